"""rLLM's episode logs: the workflow and agent-flow engines give each step's episodes to EpisodeLogger.
log_episodes_batch (rllm/utils/episode_logger.py of rllm-org/rllm @ 9beb6e0f676a46d38858991fd79ac5f8e0b16d4c; called
from rllm/engine/agentflow_engine.py, agent_workflow_engine.py, unified_workflow_engine.py and
remote_agent_flow_engine.py), which writes <episode_log_dir>/episodes/<mode>_step_<step>_epoch_<epoch>/ (mode train or
val; episode_log_dir defaults to logs/<project>/<experiment>): one episode_hash<task hash>_id<episode id>.json per
episode (json.dumps(indent=2, default=str), opened with "w"), then batch_summary.json. An episode file holds
training_step, epoch, episode_id ("<task id>:<rollout index>"), session_id, task, task_hash, is_correct,
termination_reason (TerminationReason's value: env_done, max_response_length_exceeded, max_prompt_length_exceeded,
max_turns_exceeded, timeout, error, unknown), metrics, metadata, timing and trajectories: each its name, uid, reward,
num_steps, timing and steps, each step its observation, thought, action, reward, done, model_response and
chat_completions (the messages of the step's model call and its response, OpenAI's chat format; the agent-flow engine
builds them from the gateway's traces: rllm/engine/trace_converter.py), timing. No token ids are logged.

A trajectory becomes one board line: step and mode from the folder's name (text/mode: train or val), epoch; prompt
the messages before the first assistant message (else the first observation, else the task); response the messages
after it; reward the trajectory's, else its last step's (as rllm/trainer/algorithms/transform.py fills a missing one);
turns from its steps: a step's chat_completions give the messages it adds to the previous step's (the conversation
grows a step at a time), a step without them its observation (a user turn first, an environment turn after) and its
model_response (else its action) as the assistant's turn; the step's reward is its assistant turn's; tool calls from
the messages (OpenAI's tool_calls). stop_reason from termination_reason (env_done: stop; max_*_length_exceeded:
length; error: error; others as they are). The episodes of one task (its hash) and trajectory name are a group.

A step folder is read once batch_summary.json is in it (written after every episode of the step): before, the step is
being written, and the load report names it."""
import json
import re
from dataclasses import dataclass

from rl_board.formats.agent_turns import (
    LineNotes,
    Notes,
    content_text,
    encoded,
    finite,
    kept_turns,
    message_turn,
    messages_value,
    tool_calls,
)
from rl_board.formats.base import Folder, RunFormat, RunLayout, group_of_prompt, parent_and_name
from rl_board.reading.storage import FileStatus, is_remote, joined, list_folder, read_file
from rl_board.text import shorten
from rollout_logger.metadata import FORMAT_KEYS

EPISODES_FOLDER = "episodes"


STEP_FOLDER = re.compile(r"(.+)_step_(\d+)_epoch_(\d+)")


SUMMARY = "batch_summary.json"


EPISODE_FILE = re.compile(r"episode_.*\.json")


NAME = "rLLM episode logs (episodes/<mode>_step_<n>_epoch_<e>/*.json)"


STOP_REASONS = {"env_done": "stop", "max_response_length_exceeded": "length", "max_prompt_length_exceeded": "length", "error": "error"}


# The episode log folder (episode_log_dir) holds nothing but episodes/: a folder whose only sub-folder is episodes/ is
# the run (a root of runs, one of them named episodes, holds others), its episodes/ the run's; the episodes/ folder
# opened alone (its sub-folders <mode>_step_<n>_epoch_<e>/) is the run too.
@dataclass(frozen=True)
class EpisodesLayout(RunLayout):
    def takes(self, folder: Folder) -> bool:
        return folder.folders == {EPISODES_FOLDER} or any(STEP_FOLDER.fullmatch(name) for name in folder.folders)


LAYOUT = EpisodesLayout(parts=re.compile(f"{EPISODES_FOLDER}|{STEP_FOLDER.pattern}"))


# The step folders of a run on object storage found complete (with their batch summary): not listed again.
complete_steps: dict[str, tuple] = {}


def recognise(folder: Folder) -> tuple[dict[str, FileStatus], RunFormat] | None:
    run_dir = folder.run_dir.rstrip("/")
    if EPISODES_FOLDER in folder.folders:
        names = [entry.name for entry in list_folder(joined(run_dir, EPISODES_FOLDER)) if entry.is_dir]
        episodes = joined(run_dir, EPISODES_FOLDER)
    else:
        names, episodes = list(folder.folders), run_dir
    steps = sorted((int(match.group(2)), match.group(1), int(match.group(3)), name) for name in names if (match := STEP_FOLDER.fullmatch(name)))
    if not steps or (EPISODES_FOLDER not in folder.folders and parent_and_name(run_dir)[1] != EPISODES_FOLDER and not folder.folders <= {name for *_, name in steps}):
        return None
    sources, contexts, problems = {}, {}, []
    for step, mode, epoch, name in steps:
        summary, files, problem = step_files(joined(episodes, name))
        if problem:
            problems.append((f"{name}/", 0, "skipped", problem))
            continue
        sources[summary.path] = summary.status
        contexts[summary.path] = (f"{name}.jsonl", {"step": step, "mode": mode, "epoch": epoch, "episodes": [[entry.path, list(entry.status)] for entry in files]})
    return sources, RunFormat(NAME, step_lines, (), tuple(problems), file_contexts=contexts)


# A step folder's batch summary and episode files, or why the step is left out.
def step_files(step_dir: str) -> tuple:
    if step_dir in complete_steps:
        return complete_steps[step_dir]
    entries = [entry for entry in list_folder(step_dir) if not entry.is_dir]
    summary = next((entry for entry in entries if entry.name == SUMMARY), None)
    if summary is None:
        return None, [], f"no {SUMMARY} yet: rLLM is still writing this step's episodes (or stopped in it); it is shown once the summary is written"
    found = (summary, sorted((entry for entry in entries if EPISODE_FILE.fullmatch(entry.name)), key=lambda entry: entry.name), "")
    if is_remote(step_dir):
        complete_steps[step_dir] = found
    return found


# A step's episodes as the board's lines, a line per trajectory, in the batch summary's order (then the others).
def step_lines(data: bytes, context: tuple) -> tuple[bytes, list]:
    (extra,) = context
    try:
        order = {name: index for index, name in enumerate(json.loads(data).get("episode_files") or [])}
    except (ValueError, AttributeError, TypeError, RecursionError):
        order = {}
    files = sorted(extra["episodes"], key=lambda item: (order.get(item[0].rsplit("/", 1)[-1], len(order)), item[0]))
    notes, lines = Notes(), []
    listed = {path.rsplit("/", 1)[-1] for path, _ in files}
    missing = [name for name in order if name not in listed]
    if missing:
        notes.add(0, f"{len(missing)} episode file(s) the batch summary names are not in the folder: {', '.join(missing[:3])}")
    for path, _ in files:
        name = path.rsplit("/", 1)[-1]
        try:
            episode = json.loads(read_file(path))
        except (ValueError, RecursionError):
            notes.add(0, f"{name} is not JSON (cut off while being written?): left out")
            continue
        except OSError as error:
            notes.add(0, f"{name} could not be read ({str(error)[:120]}): left out")
            continue
        if not isinstance(episode, dict) or not isinstance(episode.get("trajectories"), list):
            notes.add(0, f"{name} is not an rLLM episode (no trajectories): left out")
            continue
        trajectories = [trajectory for trajectory in episode["trajectories"] if isinstance(trajectory, dict)]
        if not trajectories:  # an episode that ended before its first trajectory (a timeout, an error): no sample
            reason = episode.get("termination_reason")
            notes.add(0, f"{name} has no trajectory{f' (termination_reason {shorten(str(reason), 80)})' if reason else ''}: an episode without samples")
        names = {trajectory.get("name") for trajectory in trajectories}
        for trajectory in trajectories:
            line_notes = LineNotes()
            line = trajectory_line(episode, trajectory, extra, line_notes, several_names=len(names) > 1)
            lines.append(encoded(line))
            notes.add(len(lines), line_notes)
    return b"".join(line + b"\n" for line in lines), notes.rows


def trajectory_line(episode: dict, trajectory: dict, extra: dict, notes: LineNotes, several_names: bool) -> dict:
    steps = [step for step in trajectory.get("steps") or [] if isinstance(step, dict)]
    turns, messages = trajectory_turns(steps, notes)
    split = next((i for i, message in enumerate(messages) if isinstance(message, dict) and message.get("role") == "assistant"), len(messages))
    if split:
        prompt = messages_value(messages[:split])
    else:
        task = episode.get("task")
        prompt = task if task is not None else ""
    reward = finite(trajectory.get("reward"))
    if reward is None and steps:
        reward = finite(steps[-1].get("reward"))
    termination = episode.get("termination_reason")
    name = trajectory.get("name")
    task_hash = episode.get("task_hash") or group_of_prompt(json.dumps(episode.get("task"), sort_keys=True, default=str))
    line = {
        "step": extra["step"],
        "prompt": prompt,
        "response": messages_value(messages[split:]),
        "reward": reward,
        "group_id": f"{task_hash}:{name}" if several_names else task_hash,
        "turns": kept_turns(turns, notes),
        "stop_reason": STOP_REASONS.get(termination, termination),
        "truncated": termination in ("max_response_length_exceeded", "max_prompt_length_exceeded"),
        "mode": extra["mode"],
        "epoch": extra["epoch"],
        "episode_id": episode.get("episode_id"),
        "trajectory": name,
        "trajectory_uid": trajectory.get("uid"),
        "num_steps": len(steps),
        "is_correct": episode.get("is_correct"),
        "termination_reason": termination,
        "session_id": episode.get("session_id"),
    }
    metrics = episode.get("metrics") if isinstance(episode.get("metrics"), dict) else {}
    taken = FORMAT_KEYS | set(line)
    line |= {(f"{key} (metric)" if key in taken else key): value for key, value in metrics.items() if isinstance(value, (int, float, str, bool))}
    return {key: value for key, value in line.items() if value is not None or key in ("reward", "prompt", "response")}


# A trajectory's steps as turns, and the messages they come from (the response's messages when a step has none).
def trajectory_turns(steps: list, notes: LineNotes) -> tuple[list, list]:
    turns, messages, previous = [], [], []
    for number, step in enumerate(steps):
        chat = step.get("chat_completions")
        start = len(turns)
        if isinstance(chat, list) and chat:
            shared = 0
            while shared < min(len(previous), len(chat)) and previous[shared] == chat[shared]:
                shared += 1
            new = chat[shared:]
            previous = chat
            messages += new
            turns += [message_turn(message, notes) for message in new]
        else:
            observation = step.get("observation")
            if observation not in (None, ""):
                text = observation if isinstance(observation, str) else content_text(observation if isinstance(observation, list) else [observation])
                role = "user" if number == 0 else "environment"
                turns.append({"role": role, "text": text})
                messages.append({"role": role, "content": text})
        assistant = next((turn for turn in reversed(turns[start:]) if turn["role"] == "assistant"), None)
        if assistant is None:  # the step's response is not among its messages: its model response or action
            text = step.get("model_response") or action_text(step.get("action"))
            assistant = {"role": "assistant", "text": text}
            calls = action_tool_calls(step.get("action"), notes)
            if calls:
                assistant["tool_calls"] = calls
            turns.append(assistant)
            messages.append({"role": "assistant", "content": text} | ({"tool_calls": step["action"]} if calls else {}))
        reward = finite(step.get("reward"))
        if reward is not None:
            assistant["reward"] = reward
    return turns, messages


def action_text(action) -> str:
    if action is None:
        return ""
    return action if isinstance(action, str) else json.dumps(action, ensure_ascii=False, default=str)


# An action that is a list of tool calls (OpenAI's, or rLLM's ToolCall.to_dict(): name and arguments), or a message
# with them; None for any other action.
def action_tool_calls(action, notes: LineNotes) -> list | None:
    if isinstance(action, dict) and isinstance(action.get("tool_calls"), list):
        action = action["tool_calls"]
    if isinstance(action, list) and action and all(isinstance(call, dict) and ("name" in call or isinstance(call.get("function"), dict)) for call in action):
        return tool_calls(action, notes)
    return None


