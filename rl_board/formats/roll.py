"""ROLL's rollout dumps (pipeline_config.rollout_dump_dir, an absolute path): dump_rollout_trajectories
(roll/pipeline/agentic/utils.py of alibaba/ROLL @ 8eb27cc2dc34c4d1310b169d9b86d339004d811a; called by the agentic
pipeline for each training batch and each validation batch, roll/pipeline/agentic/agentic_pipeline.py) takes the
columns the env manager names in meta_info["COLUMMNS_CONFIG"], drops the rows where one of them is None
(remove_nan_items: a step-wise trajectory's samples but its last), adds global_step, and write_to_json_process
(roll/pipeline/rlvr/utils.py) writes them as one JSON object, {column: [value per row]}, on one line of
rollout_dump_data.step_<global_step>.jsonl (opened with "w", from a separate process; a validation batch of the same
step writes the same file). The agentic env managers' columns are trajectory_data, messages and tools (JSON strings)
and exp_name: AgentNativeStepEnvManager.formulate_rollouts (roll/pipeline/agentic/env_manager/
agent_native_env_manager.py) writes per trajectory trajectory_data {trajectory_id, env_info {env_id, group_id, tag,
seed, episode_id, mode, ...}, length_info {terminated, truncated, num_actions, ...}, reward_info {episode_reward,
step_rewards, ...}, failure_info {failure_mode, stop_reason (EpisodeStopReason's name), error_messages, has_failure},
metrics, last_observation} and messages [the last step's messages: the conversation, OpenAI's chat format, and the
model's last response]; ProxyEnvManager.formulate_rollouts (proxy_env_manager.py) a row per branch (trajectory_mode
traj) or per step (step) with trajectory_data {trajectory_id, branch_or_step_idx, num_branches_or_steps, reward_info
{episode_reward, step_reward}, messages, finish_reason} and messages [that sample's messages]. The RLVR pipeline's dump
(dump_rollout_to_specific_path, roll/pipeline/rlvr/utils.py; called by RLVRPipeline.run, roll/pipeline/rlvr/
rlvr_pipeline.py, and rlvr_vlm_pipeline.py, with each step's generated batch, never a validation batch) shares the file
name: the columns of COLUMMNS_CONFIG the batch has, a row per response (num_return_sequences of each prompt, in a
row): the dataset's id, source, difficulty, prompt, messages (chat messages, often a JSON string), ground_truth,
case_type, test_case_function, test_cases, tag, domain; responses (tokenizer.batch_decode with skip_special_tokens),
scores (the reward worker's) and sampling_params (json.dumps of the batch's meta_info, the same on every row). No
token ids, log-probs or values are written.

A row becomes one board line: step the file name's global step. An agentic row (a trajectory, or a proxy's branch or
step): prompt the messages before the first assistant message, response the others, turns every message (tool calls
from OpenAI's tool_calls), reward the episode's; an agent-native trajectory's step rewards go on its assistant turns
when there are as many, a proxy's step reward on its last; stop_reason from stop_reason (FINISH: stop, MAX_LENGTH:
length, ENV_RESET_FAILED, SANDBOX_INIT_FAILED, LLM_GENERATE_FAILED: error, others in lower case) or finish_reason;
truncated from length_info; text/mode from env_info (train, val); the trajectories of one group (tag, group_id,
episode_id, seed: ROLL's traj_group_id) a group. An RLVR row: prompt the messages (which ROLL's encode function takes
before the prompt column, the prompt then kept as a field), else the prompt; response the decoded responses; reward
the score; ground_truth; the rows of one prompt a group; id, source, difficulty, tag, domain, the test case columns
and sampling_params (parsed) kept as fields."""
import json
import re

from rl_board.formats.agent_turns import LineNotes, Notes, encoded, finite, kept_turns, message_turn, messages_value
from rl_board.formats.base import UTF8_BOM, Folder, RunFormat, RunLayout, group_of_prompt
from rl_board.reading.storage import FileStatus
from rollout_logger.metadata import FORMAT_KEYS

DUMP_FILE = re.compile(r"rollout_dump_data\.step_(\d+)\.jsonl")


NAME = "ROLL rollout dumps (rollout_dump_data.step_<n>.jsonl)"


LAYOUT = RunLayout(files=DUMP_FILE)  # rollout_dump_dir holds the dumps and nothing else


STOP_REASONS = {"FINISH": "stop", "MAX_LENGTH": "length", "ENV_RESET_FAILED": "error", "SANDBOX_INIT_FAILED": "error", "LLM_GENERATE_FAILED": "error"}


# ROLL's columns the board's line is made from (the others are kept as fields).
MAPPED = {"trajectory_data", "messages", "global_step", "prompt", "responses", "scores", "ground_truth"}


# A folder whose JSONL files are all ROLL's dumps.
def recognise(folder: Folder) -> tuple[dict[str, FileStatus], RunFormat] | None:
    if not folder.jsonl or not all(DUMP_FILE.fullmatch(entry.name) for entry in folder.jsonl):
        return None
    contexts = {entry.path: (entry.name, int(DUMP_FILE.fullmatch(entry.name).group(1))) for entry in folder.jsonl}
    return folder.sources(folder.jsonl), RunFormat(NAME, dump_lines, (), file_contexts=contexts)


# A dump (one JSON object of columns) as the board's lines, a line per row. A file that is not one JSON object (cut
# off while being written) raises ValueError: the load report lists it as skipped until it changes.
def dump_lines(data: bytes, context: tuple) -> tuple[bytes, list]:
    (step,) = context
    columns = json.loads(data.removeprefix(UTF8_BOM))
    if not isinstance(columns, dict) or not all(isinstance(values, list) for values in columns.values()):
        raise ValueError("not one JSON object of columns")
    rows = max((len(values) for values in columns.values()), default=0)
    notes, lines = Notes(), []
    uneven = {name for name, values in columns.items() if len(values) != rows}
    if uneven:
        notes.add(0, f"column(s) {', '.join(sorted(uneven))} shorter than the others: missing values are null")
    for row in range(rows):
        fields = {name: values[row] if row < len(values) else None for name, values in columns.items()}
        line_notes = LineNotes()
        if "trajectory_data" in fields:
            made = agentic_lines(fields, step, line_notes)
        else:
            made = [rlvr_line(fields, step, line_notes)]
        for line in made:
            lines.append(encoded(line))
            notes.add(len(lines), line_notes)
    return b"".join(line + b"\n" for line in lines), notes.rows


# A JSON string column's value, parsed (a value that is not a string is taken as it is; one that is not valid JSON is
# None, with a note).
def parsed(value, name: str, notes: LineNotes):
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        notes.add(f"{name} is not valid JSON: left out")
        return None


def agentic_lines(fields: dict, step: int, notes: LineNotes) -> list[dict]:
    data = parsed(fields.get("trajectory_data"), "trajectory_data", notes)
    data = data if isinstance(data, dict) else {}
    messages = parsed(fields.get("messages"), "messages", notes)
    if messages is None:
        messages = data.get("messages")
    conversations = messages if isinstance(messages, list) and messages and all(isinstance(item, list) for item in messages) else [messages if isinstance(messages, list) else []]
    lines = []
    for number, conversation in enumerate(conversations):
        line = agentic_line(fields, data, conversation, step, notes)
        if len(conversations) > 1:  # messages of several trajectories sharing a prefix
            line["branch"] = number
        lines.append(line)
    return lines


def agentic_line(fields: dict, data: dict, messages: list, step: int, notes: LineNotes) -> dict:
    info = lambda key: data.get(key) if isinstance(data.get(key), dict) else {}  # noqa: E731
    env, length, rewards, failure = info("env_info"), info("length_info"), info("reward_info"), info("failure_info")
    turns = [message_turn(message, notes) for message in messages]
    assistants = [turn for turn in turns if turn["role"] == "assistant"]
    step_rewards = rewards.get("step_rewards")
    if isinstance(step_rewards, list) and len(step_rewards) == len(assistants):
        for turn, reward in zip(assistants, step_rewards):
            if finite(reward) is not None:
                turn["reward"] = finite(reward)
    elif finite(rewards.get("step_reward")) is not None and assistants:
        assistants[-1]["reward"] = finite(rewards["step_reward"])
    split = next((i for i, message in enumerate(messages) if isinstance(message, dict) and message.get("role") == "assistant"), len(messages))
    stop = failure.get("stop_reason") or data.get("finish_reason")
    line = {
        "step": step,
        "prompt": messages_value(messages[:split]),
        "response": messages_value(messages[split:]),
        "reward": finite(rewards.get("episode_reward")),
        "turns": kept_turns(turns, notes),
        "stop_reason": STOP_REASONS.get(stop, stop.lower() if isinstance(stop, str) else None),
        "truncated": length.get("truncated"),
    }
    if all(key in env for key in ("tag", "group_id", "episode_id", "seed")):
        line["group_id"] = f"{env['tag']}_{env['group_id']}_{env['episode_id']}_{env['seed']}"
    else:
        line["group_id"] = group_of_prompt(json.dumps(messages[:split], sort_keys=True, default=str))
    line |= {
        "mode": env.get("mode"), "trajectory_id": data.get("trajectory_id"), "env_id": env.get("env_id"), "tag": env.get("tag"),
        "exp_name": fields.get("exp_name"), "num_actions": length.get("num_actions", data.get("num_actions")),
        "terminated": length.get("terminated"), "step_reward": rewards.get("step_reward"),
        "branch_or_step_idx": data.get("branch_or_step_idx"), "failure_mode": failure.get("failure_mode") or None,
        "has_failure": failure.get("has_failure"), "error_messages": failure.get("error_messages") or None,
        "roll_stop_reason": stop,
    }
    tools = parsed(fields.get("tools"), "tools", notes)
    if tools:
        line["tools"] = tools
    taken = FORMAT_KEYS | set(line)
    metrics = data.get("metrics") if isinstance(data.get("metrics"), dict) else {}
    line |= {(f"{key} (metric)" if key in taken else key): value for key, value in metrics.items() if isinstance(value, (int, float, bool))}
    others = {key: value for key, value in fields.items() if key not in MAPPED | {"tools", "exp_name"}}
    line |= {(f"{key} (ROLL)" if key in line or key in FORMAT_KEYS else key): value for key, value in others.items()}
    return {key: value for key, value in line.items() if value is not None or key in ("reward", "prompt", "response")}


# A row of the RLVR pipeline's dump: the prompt as the model saw it (messages, which ROLL's encode function takes
# before prompt, parsed when a JSON string; else prompt; the other then kept as a field), the decoded response, its
# score; the rows of one prompt a group.
def rlvr_line(fields: dict, step: int, notes: LineNotes) -> dict:
    messages = parsed(fields.get("messages"), "messages", notes)
    prompt, other = (messages, "prompt") if messages is not None else (fields.get("prompt"), "messages")
    line = {"step": step, "prompt": messages_value(prompt) if isinstance(prompt, list) else prompt, "response": fields.get("responses"),
            "reward": finite(fields.get("scores")), "ground_truth": fields.get("ground_truth")}
    line["group_id"] = group_of_prompt(prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str))
    others = {key: value for key, value in fields.items() if key not in MAPPED or (key == other and value is not None)}
    if "sampling_params" in others:  # the batch's meta_info (its generation_config), the same on every row
        others["sampling_params"] = parsed(others["sampling_params"], "sampling_params", notes)
    line |= {(f"{key} (ROLL)" if key in line or key in FORMAT_KEYS else key): value for key, value in others.items()}
    return line


