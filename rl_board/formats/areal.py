"""AReaL's trajectory dumps (rollout.dump_to_file = true, with rollout.tokenizer_path): WorkflowExecutor.
_dump_trajectory (areal/infra/workflow_executor.py of inclusionAI/AReaL @ 4aef98d8d818af55b43621aaadba047ae10f4e77;
docs/en/reference/rollout_workflow.md, "Trajectory Dumping") writes each finished rollout task, the samples of one
prompt (group_size of them, GroupedRolloutWorkflow's batch), to <log path>/rollout/<tail_version>/<task_id>.jsonl
(eval-rollout/ for an evaluation's tasks; the log path is StatsLogger.get_log_path, <fileroot>/logs/<user>/
<experiment_name>/<trial_name>, beside config.yaml and main.log), opened with "a", a line per sample: task_id,
sample_idx (the sample's row in the task's batch), seqlen, prompt_len (in tokens), head_version, tail_version, reward,
prompt and completion (decoded with the tokenizer, special tokens kept). No token ids and no log-probs are written.
The traps: head_version and tail_version are the min and max of the task's whole `versions` tensor, over every sample
and over the prompt tokens, which every AReaL workflow (rlvr.py, multi_turn.py, vision_rlvr.py, the OpenAI proxy's
types.py) marks -1, and the padding (0): head_version is -1 for them, not the oldest policy that wrote a token; the
folder is tail_version, the newest policy that did (a rollout interrupted by a weight update has tokens of several). A
sample whose sequence is empty or does not end on a completion token is not written (sample_idx skips it). A resumed
trainer's task ids start again: a task file may then hold a second task's samples (sample_idx starts again at 0).

A line becomes a board line, line for line (the load report's line numbers are the file's): step the version folder's
number. A version is the number of weight updates the inference engine has had (RLTrainer sets version
global_step + 1 after step global_step's update), so rollout/<v>/ holds what the weights training step v starts from
generated; an on-policy run trains on it at step v, an asynchronous one up to max_head_offpolicyness steps later (the
dump does not say when), so the version is the step. response the completion, reward the reward (a non-finite one
missing); text/mode train (rollout/) or eval (eval-rollout/); a task (its file) a group; kept as fields: task_id,
sample_idx, seqlen, prompt_len, completion_tokens (seqlen - prompt_len), head_version and tail_version."""
import json
import re
from dataclasses import dataclass

from rl_board.formats.agent_turns import encoded, finite
from rl_board.formats.base import EVERY_FOLDER, UTF8_BOM, Folder, RunFormat, RunLayout, parent_and_name
from rl_board.reading.storage import FileStatus, is_remote, joined, list_folder
from rollout_logger.metadata import FORMAT_KEYS

MODES = {"rollout": "train", "eval-rollout": "eval"}  # the dump folders under the log path, and the mode of each


VERSION_FOLDER = re.compile(r"\d+")


TASK_FILE = re.compile(r"(\d+)\.jsonl")


CONFIG_FILE = "config.yaml"  # save_config writes it into the log path


NAME = "AReaL trajectory dumps (rollout/<version>/<task_id>.jsonl)"


# The log path holds rollout/ beside config.yaml, or eval-rollout/ (a name of AReaL's own), beside main.log, wandb/,
# swanlab/, memory_snapshots/, all of them the run's; its rollout/ or eval-rollout/ opened alone (its sub-folders
# version numbers) is the run too.
@dataclass(frozen=True)
class ArealLayout(RunLayout):
    def takes(self, folder: Folder) -> bool:
        if "eval-rollout" in folder.folders or ("rollout" in folder.folders and any(entry.name == CONFIG_FILE for entry in folder.files)):
            return True
        return parent_and_name(folder.run_dir)[1] in MODES and any(VERSION_FOLDER.fullmatch(name) for name in folder.folders)


LAYOUT = ArealLayout(parts=EVERY_FOLDER)


# The task files of a run on object storage's older version folders, by folder: not listed again (a request each).
listed_versions: dict[str, list] = {}


# The log path (its rollout/ and eval-rollout/ hold version folders), or its rollout/ or eval-rollout/ itself.
def recognise(folder: Folder) -> tuple[dict[str, FileStatus], RunFormat] | None:
    run_dir = folder.run_dir.rstrip("/")
    name = parent_and_name(run_dir)[1]
    if folder.folders & MODES.keys():
        dumps = {MODES[sub]: joined(run_dir, sub) for sub in sorted(folder.folders & MODES.keys())}
        versions = {mode: version_folders(path) for mode, path in dumps.items()}
    elif name in MODES:
        versions = {MODES[name]: [(int(sub), joined(run_dir, sub)) for sub in folder.folders if VERSION_FOLDER.fullmatch(sub)]}
    else:
        return None
    if not any(versions.values()):
        return None
    sources, contexts = {}, {}
    for mode, folders in versions.items():
        for position, (version, path) in enumerate(sorted(folders)):
            for entry in task_files(path, is_remote(path) and position < len(folders) - 2):
                sources[entry.path] = entry.status
                contexts[entry.path] = (f"{mode}.{version}.{entry.name}", [mode, version, int(TASK_FILE.fullmatch(entry.name).group(1))])
    problems = ()
    if folder.jsonl:
        problems = (("", 0, "note", f"{len(folder.jsonl)} .jsonl file(s) beside AReaL's dump folders are not read"),)
    return sources, RunFormat(NAME, task_lines, (), problems, file_contexts=contexts)


# A dump folder's version folders: (version, path).
def version_folders(dump_dir: str) -> list[tuple[int, str]]:
    try:
        return [(int(entry.name), entry.path) for entry in list_folder(dump_dir) if entry.is_dir and VERSION_FOLDER.fullmatch(entry.name)]
    except OSError:  # removed since the run folder was listed
        return []


# A version folder's task files; an older version folder on object storage is listed once (a late task's file can
# still land in the newest two: the dump follows the reward's computation).
def task_files(version_dir: str, settled: bool) -> list:
    if version_dir in listed_versions:
        return listed_versions[version_dir]
    try:
        files = [entry for entry in list_folder(version_dir) if not entry.is_dir and TASK_FILE.fullmatch(entry.name)]
    except OSError:
        return []
    if settled:
        listed_versions[version_dir] = files
    return files


# AReaL's keys the board's line is made from (the others are kept as fields).
MAPPED = {"prompt", "completion", "reward"}


# A task file as the board's lines, line for line (a line that is not a JSON object stays as it is: a bad line at its
# number, or the incomplete last line of a file being appended to).
def task_lines(data: bytes, context: tuple) -> bytes:
    mode, version, task_id = context[-1]
    lines, dumps, last_index = [], 1, None
    for line in data.removeprefix(UTF8_BOM).split(b"\n"):
        try:
            fields = json.loads(line) if line.strip() else None
        except (ValueError, RecursionError):
            fields = None
        if not isinstance(fields, dict):
            lines.append(line)
            continue
        index = fields.get("sample_idx")
        if isinstance(index, int) and isinstance(last_index, int) and index <= last_index:  # a resumed trainer's task of the same id
            dumps += 1
        last_index = index if isinstance(index, int) else last_index
        lines.append(encoded(board_line(fields, mode, version, f"{mode}/{version}/{task_id}" + (f"#{dumps}" if dumps > 1 else ""))))
    return b"\n".join(lines)


def board_line(fields: dict, mode: str, version: int, group: str) -> dict:
    line = {"step": version, "prompt": fields.get("prompt"), "response": fields.get("completion"), "reward": finite(fields.get("reward")),
            "group_id": group, "mode": mode}
    seqlen, prompt_len = fields.get("seqlen"), fields.get("prompt_len")
    if all(isinstance(value, int) and not isinstance(value, bool) for value in (seqlen, prompt_len)):
        line["completion_tokens"] = seqlen - prompt_len
    kept = {key: value for key, value in fields.items() if key not in MAPPED}
    line |= {(f"{key} (AReaL)" if key in FORMAT_KEYS or key in line else key): value for key, value in kept.items()}
    return line
