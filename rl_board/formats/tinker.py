"""Tinker's rollouts: with Config.rollout_json_export (on by default) the RL loop (tinker_cookbook/rl/train.py of
thinking-machines-lab/tinker-cookbook @ 9dfcc3a2cf44432d621a01005073dc6d76a1e87a) serializes each iteration's
trajectory groups with serialize_rollout_summaries (rl/rollout_logging.py) and writes them with
TrainingRunStore.write_rollouts (stores/training_store.py, opened with "w", json.dumps a line) into
<log_path>/iteration_<NNNNNN>/train_rollout_summaries.jsonl, and an evaluation's (RLTestSetEvaluator,
rl/metric_util.py) into eval_<label>_rollout_summaries.jsonl: a line per trajectory, schema_version, split ("train",
"eval/<label>"), iteration, group_idx (the group's position among the groups kept: a training batch's groups in the
order they finished, those of constant reward dropped; an evaluation's failed groups dropped), traj_idx, tags (the env
group builder's logging_tags), sampling_client_step, total_reward (the steps' rewards plus the group reward),
final_reward (the group reward), trajectory_metrics, final_ob_len and steps ([{step_idx, ob_len, ac_len, reward,
episode_done, metrics, logs}]). No text: the texts are only in the logtree, <base_name>_logtree.json beside it
(Trace.to_dict of utils/logtree.py, written by TrainingRunStore.write_logtree when the iteration's logtree scope closes:
after the evaluation's summaries, before the training batch's), and only for the first num_groups_to_log (4) env
group builders of the batch: a "Group Rollout" section per group, holding what its envs logged (ProblemEnv.step,
rl/problem_env.py: sections "Prompt" and "Policy Response", each a conversation ({"data": {"type": "conversation",
"messages"}}), and "Reward", a table whose "reward" is the step's reward as "%.3f") and then "Trajectory Details"
(rl/rollouts.py, do_group_rollout): per trajectory, in traj_idx order, its turns' ob_len, ac_len and step_reward and
its final_ob_len and final_group_reward.

The traps: the envs of a group run concurrently (asyncio.gather), so their sections are in the order the envs finished,
not in traj_idx order; the logtree's groups are in the builders' order, the summaries' in the order groups finished,
and a group dropped from the summaries (constant reward) stays in the logtree. So a logged group is matched to the
summaries' group whose trajectories have the same turns' ob_len, ac_len and rewards and final_ob_len and group reward
(matched only when exactly one logged group and one summaries' group have them), and a response to a trajectory only
by its reward: where one response and one trajectory of the group have a reward, or all the responses with a reward
are the same text; otherwise (rewards tied, different texts) the response could be any of them and none is attached,
with a note. No token count is logged beside a response: lengths cannot tell responses apart. A multi-turn trajectory's
responses are not attributed (an env logs what it likes per step); only its prompt is.

A summaries line becomes a board line, line for line: step the iteration (its folder's number); reward total_reward;
group_id <base_name>:<group_idx>; split as it is (a facet: train, eval/<label>); policy_version the
sampling_client_step; prompt the group's "Prompt" conversation (where all its envs logged the same), ground_truth its
"reference_answer" (likewise), response the attributed "Policy Response" (chat messages as the board's texts: one
message's text, else the messages); tags joined as text; num_turns, ac_tokens (the turns' ac_len summed),
final_reward, final_ob_len, group_idx, traj_idx kept as numbers, steps and trajectory_metrics as they are, the numbers
of trajectory_metrics and of a single-turn trajectory's step metrics as numbers of their own (Tinker pools both in its
env/all/<metric>); logtree says what the texts are: "response attributed", "prompt only" (why: a note), "not
logged". A folder of iteration_<NNNNNN>/ folders is a run (the log_path; its metrics.jsonl is not read), and so is one
iteration folder opened alone."""
import html
import json
import re
from collections import defaultdict
from dataclasses import dataclass

from rl_board.formats.agent_turns import Notes, encoded, finite, messages_value
from rl_board.formats.base import UTF8_BOM, Folder, RunFormat, RunLayout, json_object, parent_and_name
from rl_board.reading.storage import FileStatus, joined, list_folder, read_file
from rollout_logger.metadata import FORMAT_KEYS

ITERATION = re.compile(r"iteration_(\d+)")


SUMMARIES = re.compile(r"(train|eval_.+)_rollout_summaries\.jsonl")


NAME = "Tinker rollout summaries (iteration_<N>/{train,eval_<label>}_rollout_summaries.jsonl, texts from the logtree)"


# The log_path holds iteration_<NNNNNN>/ folders (its own files: metrics.jsonl, config.json, code.diff,
# checkpoints.jsonl, timing_spans.jsonl): a folder with one is a run, they are its; a folder of summaries is one too.
@dataclass(frozen=True)
class IterationsLayout(RunLayout):
    def takes(self, folder: Folder) -> bool:
        return any(ITERATION.fullmatch(name) for name in folder.folders) or super().takes(folder)


LAYOUT = IterationsLayout(files=SUMMARIES, parts=ITERATION)


ATTRIBUTED, PROMPT_ONLY, NOT_LOGGED = "response attributed", "prompt only", "not logged"


# Tinker's keys the board's line is made from, or left out (schema_version, iteration: the step).
MAPPED = {"schema_version", "split", "iteration", "total_reward", "sampling_client_step", "tags"}


def recognise(folder: Folder) -> tuple[dict[str, FileStatus], RunFormat] | None:
    run_dir = folder.run_dir.rstrip("/")
    iterations = sorted((int(match.group(1)), name) for name in folder.folders if (match := ITERATION.fullmatch(name)))
    if iterations:
        listed = [(number, name, list_folder(joined(run_dir, name))) for number, name in iterations]
    else:
        match = ITERATION.fullmatch(parent_and_name(run_dir)[1])
        if not any(SUMMARIES.fullmatch(entry.name) for entry in folder.files):
            return None
        listed = [(int(match.group(1)) if match else 0, parent_and_name(run_dir)[1], list(folder.files))]
    sources, contexts, without_logtree = {}, {}, 0
    for number, name, entries in listed:
        files = {entry.name: entry for entry in entries if not entry.is_dir}
        for entry in files.values():
            summaries = SUMMARIES.fullmatch(entry.name)
            if not summaries:
                continue
            logtree = files.get(f"{summaries.group(1)}_logtree.json")
            without_logtree += logtree is None
            sources[entry.path] = entry.status
            # the logtree's status is part of what the conversion depends on: written after an evaluation's summaries
            contexts[entry.path] = (f"{name}_{entry.name}", [number, summaries.group(1), logtree.path if logtree else None, list(logtree.status) if logtree else None])
    problems = []
    if without_logtree:
        problems.append(("", 0, "note", f"{without_logtree} rollout summary file(s) have no logtree (<name>_logtree.json) beside them: their samples have no texts "
                                        "(Tinker logs texts only with num_groups_to_log > 0, and not in its asynchronous loop)"))
    if not sources:
        problems.append(("", 0, "note", "iteration folders without rollout summaries (Tinker's rollout_json_export off?): nothing to read"))
    return sources, RunFormat(NAME, summary_lines, (), tuple(problems), file_contexts=contexts)


# A <base_name>_rollout_summaries.jsonl as the board's lines, line for line (a line that is not a JSON object stays as
# it is: a bad line at its number, or the incomplete last line of a file being written), with the texts the logtree
# beside it attributes, and the notes on what it could not.
def summary_lines(data: bytes, context: tuple) -> tuple[bytes, list]:
    ((step, base_name, logtree_path, _),) = context
    lines = data.removeprefix(UTF8_BOM).split(b"\n")
    records = [json_object(line) for line in lines]
    notes = Notes()
    texts = {}
    if logtree_path is not None:
        try:
            tree = json.loads(read_file(logtree_path))
        except (OSError, ValueError, RecursionError) as error:
            notes.add(0, f"{base_name}_logtree.json could not be read ({str(error)[:120]}; still being written?): no texts")
        else:
            texts = attributed_texts(tree, records, base_name, notes)
    converted = [line if record is None else encoded(board_line(record, step, base_name, texts.get(number))) for number, (line, record) in enumerate(zip(lines, records))]
    return b"\n".join(converted), notes.rows


def board_line(record: dict, step: int, base_name: str, texts: dict | None) -> dict:
    texts = texts or {"logtree": NOT_LOGGED}
    board = {"step": step, "prompt": texts.get("prompt"), "response": texts.get("response"), "reward": finite(record.get("total_reward")),
             "split": record.get("split", base_name), "group_id": f"{base_name}:{record.get('group_idx')}"}
    if "ground_truth" in texts:
        board["ground_truth"] = texts["ground_truth"]
    if isinstance(record.get("sampling_client_step"), int):
        board["policy_version"] = record["sampling_client_step"]
    if isinstance(record.get("tags"), list):
        board["tags"] = ", ".join(map(str, record["tags"]))
    steps = record.get("steps") if isinstance(record.get("steps"), list) else []
    board["num_turns"] = len(steps)
    board["ac_tokens"] = sum(turn["ac_len"] for turn in steps if isinstance(turn, dict) and isinstance(turn.get("ac_len"), int))
    others = {key: value for key, value in record.items() if key not in MAPPED}
    board |= {(f"{key} (Tinker)" if key in board or key in FORMAT_KEYS else key): value for key, value in others.items()}
    metrics = record.get("trajectory_metrics") if isinstance(record.get("trajectory_metrics"), dict) else {}
    if len(steps) == 1 and isinstance(steps[0], dict) and isinstance(steps[0].get("metrics"), dict):
        metrics = {**steps[0]["metrics"], **metrics}
    for name, value in metrics.items():
        if finite(value) is not None:
            board[f"{name} (Tinker)" if name in board or name in FORMAT_KEYS else name] = value
    board["logtree"] = texts["logtree"]
    return board


# ------------------------------------------------------------------------------------------------------ the logtree


# What one env logged in a group: its prompt's and response's messages and its "Reward" table.
@dataclass
class Attempt:
    prompt: list | None = None
    response: list | None = None
    table: dict | None = None


# A logged group: its envs' attempts in the order they finished, and its trajectories as "Trajectory Details" gives
# them (None: not there, as when the rollout failed).
@dataclass
class LoggedGroup:
    attempts: list
    trajectories: tuple | None


# A node's section: its title and its body's children (None: not a section as scope_header writes it).
def section(node) -> tuple[str, list] | None:
    if not isinstance(node, dict) or node.get("tag") != "section":
        return None
    children = node.get("children")
    if not isinstance(children, list) or len(children) < 2 or not isinstance(children[0], dict) or not isinstance(children[1], dict):
        return None
    title, body = children[0].get("children"), children[1].get("children")
    if not isinstance(title, list) or not isinstance(body, list):
        return None
    return html.unescape("".join(part for part in title if isinstance(part, str))), body


def sections(children: list) -> list[tuple[str, list]]:
    return [found for found in map(section, children) if found is not None]


# The "Group Rollout" sections anywhere in the tree (not inside one another), in order.
def group_bodies(node) -> list[list]:
    found = section(node)
    if found is not None and found[0] == "Group Rollout":
        return [found[1]]
    children = node.get("children") if isinstance(node, dict) else None
    return [body for child in children for body in group_bodies(child)] if isinstance(children, list) else []


# The first conversation's messages among a body's children.
def conversation(children: list) -> list | None:
    for child in children:
        data = child.get("data") if isinstance(child, dict) else None
        if isinstance(data, dict) and data.get("type") == "conversation" and isinstance(data.get("messages"), list):
            return data["messages"]
    return None


def cell(node) -> str:
    parts = node.get("children") if isinstance(node, dict) else None
    return html.unescape("".join(part for part in parts if isinstance(part, str))) if isinstance(parts, list) else ""


# The first key-value table (table_from_dict) among a body's children, as {key: value}.
def table(children: list) -> dict | None:
    for child in children:
        if isinstance(child, dict) and child.get("tag") == "table":
            rows = {}
            for part in child.get("children") or []:
                if isinstance(part, dict) and part.get("tag") == "tbody":
                    for row in part.get("children") or []:
                        cells = [cell(node) for node in row.get("children") or []] if isinstance(row, dict) else []
                        if len(cells) == 2:
                            rows[cells[0]] = cells[1]
            return rows
    return None


def logged_group(body: list) -> LoggedGroup:
    attempts, trajectories = [], None
    for title, children in sections(body):
        if title == "Prompt":
            attempts.append(Attempt(prompt=conversation(children)))
        elif title == "Policy Response":
            if not attempts or attempts[-1].response is not None:
                attempts.append(Attempt())
            attempts[-1].response = conversation(children)
        elif title == "Reward" and attempts and attempts[-1].table is None:
            attempts[-1].table = table(children)
        elif title == "Trajectory Details":
            trajectories = trajectory_details(children)
    return LoggedGroup(attempts, trajectories)


# "Trajectory Details": per trajectory (in traj_idx order) its turns' (ob_len, ac_len, step_reward) and its
# (final_ob_len, final_group_reward), as the logtree's texts; None where one is not as do_group_rollout writes it.
def trajectory_details(children: list) -> tuple | None:
    trajectories = []
    for _, episode in sections(children):
        details = next((body for title, body in sections(episode) if title == "Episode Details"), None)
        totals = table(details) if details is not None else None
        turns = [table(body) for title, body in sections(details or []) if title.startswith("Turn ")]
        if totals is None or any(turn is None for turn in turns):
            return None
        try:
            trajectories.append((tuple((turn["ob_len"], turn["ac_len"], turn["step_reward"]) for turn in turns), totals["final_ob_len"], totals["final_group_reward"]))
        except KeyError:
            return None
    return tuple(trajectories)


# A summaries line's trajectory as "Trajectory Details" writes it (None: not as serialize_rollout_summaries writes it).
def summary_trajectory(record: dict) -> tuple | None:
    try:
        turns = tuple((str(turn["ob_len"]), str(turn["ac_len"]), f"{turn['reward']:.3f}") for turn in record["steps"])
        return turns, str(record["final_ob_len"]), f"{record['final_reward']:.3f}"
    except (KeyError, TypeError, ValueError):
        return None


# {line number: {"prompt", "response", "ground_truth", "logtree"}} for the summaries' lines of the groups the logtree
# holds; what could not be attributed is noted.
def attributed_texts(tree, records: list, base_name: str, notes: Notes) -> dict:
    groups = defaultdict(list)  # group_idx -> [(traj_idx, line number, record)]
    for number, record in enumerate(records):
        if record is not None:
            groups[str(record.get("group_idx"))].append((record.get("traj_idx"), number, record))
    by_trajectories = defaultdict(list)
    for group_idx, members in groups.items():
        members.sort(key=lambda member: member[0] if isinstance(member[0], int) else -1)
        trajectories = tuple(summary_trajectory(record) for _, _, record in members)
        if None not in trajectories:
            by_trajectories[trajectories].append(group_idx)
    logged = [logged_group(body) for body in group_bodies(tree.get("root") if isinstance(tree, dict) else None)]
    logged_by_trajectories = defaultdict(list)
    for group in logged:
        logged_by_trajectories[group.trajectories].append(group)
    texts, unmatched = {}, 0
    for group in logged:
        matches = by_trajectories.get(group.trajectories, []) if group.trajectories is not None else []
        if len(matches) != 1 or len(logged_by_trajectories[group.trajectories]) != 1:
            unmatched += 1
            continue
        texts |= group_texts(group, groups[matches[0]], base_name, notes)
    if unmatched:
        notes.add(0, f"{unmatched} of the logtree's {len(logged)} groups match no one group of the summaries (a group dropped for a constant reward, a failed "
                     "rollout, or groups alike in every length and reward): their texts are not attached")
    return texts


# The texts of a matched group's lines: its prompt (and reference answer) where all its envs logged the same, each
# response where its reward tells whose it is.
def group_texts(group: LoggedGroup, members: list, base_name: str, notes: Notes) -> dict:
    prompts = [attempt.prompt for attempt in group.attempts]
    shared = {"logtree": PROMPT_ONLY}
    if prompts and None not in prompts and all(prompt == prompts[0] for prompt in prompts):
        shared["prompt"] = messages_value(prompts[0])
    answers = [(attempt.table or {}).get("reference_answer") for attempt in group.attempts]
    if answers and None not in answers and len(set(answers)) == 1:
        shared["ground_truth"] = answers[0]
    texts = {number: dict(shared) for _, number, _ in members}
    first_line = members[0][1] + 1
    label = f"{base_name} group {members[0][2].get('group_idx')}"
    single_turn = all(len(record["steps"]) == 1 for _, _, record in members)
    if not single_turn or len(group.attempts) != len(members) or any(attempt.response is None or attempt.table is None for attempt in group.attempts):
        notes.add(first_line, f"{label}: {len(group.attempts)} logged response(s) for {len(members)} trajectories"
                              f"{'' if single_turn else ' of several turns'}: responses not attributed, the prompt is")
        return texts
    responses = defaultdict(list)  # reward as logged -> the responses logged with it
    for attempt in group.attempts:
        responses[attempt.table.get("reward")].append(attempt.response)
    trajectories = defaultdict(list)  # the same for the trajectories: their line numbers
    for _, number, record in members:
        trajectories[f"{record['steps'][0]['reward']:.3f}"].append(number)
    for reward, numbers in trajectories.items():
        logged = responses.get(reward, [])
        if len(logged) != len(numbers):
            notes.add(first_line, f"{label}: {len(numbers)} trajectories have the reward {reward}, {len(logged)} logged responses: not attributed")
        elif len(numbers) == 1 or all(response == logged[0] for response in logged):
            for number, response in zip(numbers, logged):
                texts[number] |= {"response": messages_value(response), "logtree": ATTRIBUTED}
        else:
            notes.add(first_line, f"{label}: {len(numbers)} responses share the reward {reward}: which is whose the logtree does not say, so none is attached")
    return texts
