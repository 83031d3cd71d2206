"""W&B run folders, offline or synced (wandb/offline-run-<date>_<time>-<id>/, wandb/run-<date>_<time>-<id>/): the
tables logged with wandb.log({key: wandb.Table(...)}). wandb (pip wandb 0.22.3; wandb/sdk/data_types/table.py,
Table.to_json, and wandb/sdk/data_types/base_types/media.py, Media._set_file) writes every logged table as its own file,
files/media/table/<key>_<W&B step>_<20 hex of its sha256>.table.json ({"columns": [...], "data": [[row], ...]}, with
NaN and Infinity written as such; a key with "/" in it a sub-folder), so a local run keeps every step's table where
the W&B page shows only the latest (TRL issue #2045). Its history, config and summary are only in its transaction log
run-<id>.wandb (reading/wandb_log.py; a synced run also has files/wandb-summary.json): read as the run's training
history (reading/history.py).

TRL's completions table: GRPOTrainer.log (trl/trainer/grpo_trainer.py, trl 1.16.0, the same in huggingface/trl @
f2cd57710ae345ea6428ae95363267fcf38a3dc8) logs {"completions": wandb.Table(dataframe=df)} at each logging step, df
the columns step (the Trainer's global step, not W&B's step in the file name), prompt, completion (a text, or chat
messages), a column per reward function (self.reward_func_names, floats, NaN where a function gave None), the
log_extra columns, advantage (and image, wandb.Image objects, when the prompts had images); with
log_unique_prompts=True one row per prompt. The reward functions' names are in the history as TRL's metrics
(train/rewards/<name>/mean through Hugging Face's WandbCallback), their weights in the config (GRPOConfig's
reward_weights, None: all 1). Its rows become the board's lines as TRL's parquet files do (formats/trl.py): prompt,
response, rewards_per_func, reward (their weighted sum, made when the run loads), advantage, group_id (the prompt's
completions within the step: GRPO's group), the other columns fields. Traps: a run without those metrics names no
functions, and then every column between completion and advantage whose values are all floats is taken as one (a
float log_extra column too: the load report says so).

Another table becomes a line per row, every column a field as named (one named like a board key gets " (table)"
after its name), at the row's integer step column, else at the Trainer's global step when it was logged (the last
train/global_step the log has at or before the W&B step in the file's name), else at that W&B step; its response is the row
as text (a line per column, "name: value"), its prompt empty, no reward. Every line has the field
wandb_table (the key it was logged under: a facet). A table file that is not JSON or not {"columns", "data"} (one
being written) is named in the load report and read again when it changes; a row of another length than the columns
is left out, counted.

A run folder holding run-<id>.wandb is one run (W&B's unit: one wandb.init); its files/, logs/ and tmp/ are its. A
wandb/ folder lists each run folder in it as a run, and latest-run (W&B's link to the newest) as one more."""
import bisect
import functools
import json
import math
import re
from dataclasses import dataclass

from rl_board.formats.base import Folder, RunFormat, RunLayout, group_of_prompt
from rl_board.formats.trl import completion_text, encoded_line, scored_row
from rl_board.reading.lines import FORMAT_KEYS
from rl_board.reading.storage import FileStatus, joined, list_folder, read_file
from rl_board.reading.wandb_log import read_log
from rl_board.text import shorten, valid_text

NAME = "W&B run folders (files/media/table/*.table.json, run-<id>.wandb)"


LOG_FILE = re.compile(r"run-.+\.wandb", re.DOTALL)


LAYOUT = RunLayout(files=LOG_FILE, parts=re.compile(r"files|logs|tmp"))


TABLES_FOLDER = ("files", "media", "table")


TABLE_FILE = re.compile(r"(?P<key>.+)_(?P<step>\d+)_[0-9a-f]+\.table\.json", re.DOTALL)


TRL_COLUMNS = {"step", "prompt", "completion"}  # TRL's completions table (its advantage column comes last)


REWARD_METRIC = re.compile(r"(?:train/|eval/)?rewards/(?P<name>.+)/mean", re.DOTALL)  # TRL's per-function mean


WEIGHTS_SOURCE = "the W&B run's config: reward_weights"


CONVERSION = 1  # the conversion's version: a change makes every table's conversion again


OWN_FIELDS = ("wandb_table",)


# A folder with W&B's transaction log: every table file under files/media/table/ is a source, named in the
# conversions by its path there; the reward functions' names and weights come from the log.
def recognise(folder: Folder) -> tuple[dict[str, FileStatus], RunFormat] | None:
    logs = [entry for entry in folder.files if LOG_FILE.fullmatch(entry.name)]
    if not logs:
        return None
    facts = log_facts(logs[-1].path, logs[-1].status)
    problems = facts.problems
    sources, contexts, others = {}, {}, 0
    for relative, entry in table_files(folder.run_dir):
        found = TABLE_FILE.fullmatch(entry.name)
        if found is None:
            others += 1
            continue
        sources[entry.path] = entry.status
        sub_folder = relative.rpartition("/")[0]
        key = f"{sub_folder}/{found['key']}" if sub_folder else found["key"]
        wandb_step = int(found["step"])
        global_step = facts.global_step(wandb_step)
        contexts[entry.path] = (relative.replace("/", "~"), {"key": key, "step": wandb_step if global_step is None else global_step})
    if others:
        problems += (("", 0, "note", f"{others} file(s) in files/media/table are not named <key>_<step>_<hash>.table.json: not read"),)
    if not sources:
        problems += (("", 0, "note", "no table was logged (wandb.Table): the run's metrics are its Training metrics"),)
    names, weights = ordered_weights(facts, sources)
    return sources, RunFormat(NAME, table_lines, (CONVERSION, names), problems, weights, weights_source=WEIGHTS_SOURCE, sums_reward=True, file_contexts=contexts)


# The reward functions in TRL's order, the order of their columns in a completions table (the order reward_weights
# follows), with their weights: read from the first completions table's header (none: the weights are unknown).
def ordered_weights(facts: "LogFacts", sources: dict) -> tuple[tuple, tuple]:
    header = next((table_columns(path, status) for path, status in sources.items() if TABLE_FILE.fullmatch(path.rsplit("/", 1)[-1])["key"] == "completions"), ())
    if not facts.names or not set(facts.names) <= set(header):
        return facts.names, ()
    names = tuple(sorted(facts.names, key=header.index))
    return names, tuple(zip(names, facts.reward_weights))


@functools.lru_cache(maxsize=64)
def table_columns(path: str, status: FileStatus) -> tuple:
    try:
        value = json.loads(read_file(path))
    except (OSError, ValueError):
        return ()
    return tuple(str(column) for column in value["columns"]) if isinstance(value, dict) and isinstance(value.get("columns"), list) else ()


# The .table.json files under files/media/table/ and their sub-folders (a key with "/"), with their paths there.
def table_files(run_dir: str) -> list:
    found, folders = [], [("", joined(run_dir, "/".join(TABLES_FOLDER)))]
    while folders:
        relative, path = folders.pop()
        try:
            entries = list_folder(path)
        except OSError:
            continue
        for entry in entries:
            inner = f"{relative}/{entry.name}" if relative else entry.name
            if entry.is_dir:
                folders.append((inner, entry.path))
            elif entry.name.endswith(".table.json") and valid_text(entry.name) == entry.name:
                found.append((inner, entry))
    return sorted(found, key=lambda item: item[0])


# What the transaction log says about the tables (read again only when it changes): TRL's reward functions as its
# metrics name them (in no reliable order: wandb-core writes a logged dict's keys in any order) and the config's
# reward_weights when it gives one per function (in TRL's order of the functions: see ordered_weights); the Trainer's global step at each W&B step that logged one (Hugging Face's WandbCallback logs
# train/global_step with every log); load-report notes.
@dataclass(frozen=True)
class LogFacts:
    names: tuple = ()
    reward_weights: tuple = ()
    global_steps: tuple = ()  # (W&B step, the Trainer's global step then), by W&B step
    problems: tuple = ()

    # The Trainer's global step when W&B's step was `step`: the last one logged at or before it (None: none was).
    def global_step(self, step: int) -> int | None:
        position = bisect.bisect_right(self.global_steps, (step, math.inf))
        return self.global_steps[position - 1][1] if position else None


@functools.lru_cache(maxsize=64)
def log_facts(log_path: str, status: FileStatus) -> LogFacts:
    try:
        log = read_log(read_file(log_path))
    except OSError as error:
        return LogFacts(problems=(("", 0, "note", f"the transaction log could not be read ({shorten(str(error), 200)}): the reward functions are not named"),))
    names = tuple(dict.fromkeys(found["name"] for row in log.history for key in row if (found := REWARD_METRIC.fullmatch(key))))
    steps = tuple(sorted({(row["_step"], row["train/global_step"]) for row in log.history if type(row.get("_step")) is int and type(row.get("train/global_step")) is int}))
    weights = log.config.get("reward_weights")
    if names and isinstance(weights, list) and len(weights) == len(names) and all(type(weight) in (int, float) and math.isfinite(weight) for weight in weights):
        return LogFacts(names, tuple(map(float, weights)), steps)
    if names:
        return LogFacts(names, (), steps)
    note = "the log names no reward functions (TRL's rewards/<name>/mean): in a completions table, every all-float column between completion and advantage is taken as one"
    return LogFacts((), (), steps, (("", 0, "note", note),))


# One table file as the board's lines, a line per row; notes for the rows left out.
def table_lines(data: bytes, context: tuple) -> tuple[bytes, list]:
    _, names, table = context
    value = json.loads(data)
    if not isinstance(value, dict) or not isinstance(value.get("columns"), list) or not isinstance(value.get("data"), list):
        raise ValueError("not a W&B table ({\"columns\", \"data\"})")
    columns = [valid_text(str(column)) for column in value["columns"]]
    rows = [row for row in value["data"] if isinstance(row, list) and len(row) == len(columns)]
    notes = [(0, f"{len(value['data']) - len(rows)} row(s) of another length than its {len(columns)} columns: left out")] if len(rows) < len(value["data"]) else []
    trl = TRL_COLUMNS <= set(columns)
    functions = (list(names) if names else float_columns(columns, rows)) if trl else []
    lines = []
    for index, row in enumerate(rows):
        cells = dict(zip(columns, row))
        step = cells.get("step")
        line = {"step": step if type(step) is int else table["step"]}
        if trl:
            cells.pop("step")
            reward, scores, row_notes = scored_row({name: cells.pop(name) for name in functions if name in cells}, index + 1)
            notes += row_notes
            line |= {"prompt": cells.pop("prompt"), "response": completion_text(cells.pop("completion")), "reward": reward, "rewards_per_func": scores}
            if "advantage" in cells:
                line["advantage"] = cells.pop("advantage")
            line["group_id"] = group_of_prompt(line["prompt"])
        else:
            line |= {"prompt": "", "response": row_text(cells), "reward": None}
            if type(step) is int:
                cells.pop("step")
        line["wandb_table"] = table["key"]
        line |= {(f"{name} (table)" if name in line or name in FORMAT_KEYS or name in OWN_FIELDS else name): cell for name, cell in cells.items()}
        lines.append(encoded_line(line))
    return b"".join(line + b"\n" for line in lines), notes


# TRL's reward functions when no metric names them: the columns between completion and advantage whose values are
# all floats (TRL's scores; NaN for a function that gave None).
def float_columns(columns: list, rows: list) -> list:
    between = columns[columns.index("completion") + 1 : columns.index("advantage") if "advantage" in columns else None]
    return [name for name, at in ((name, columns.index(name)) for name in between) if rows and all(type(row[at]) is float for row in rows)]


# Another table's row as the text the board shows for it: a line per column, "name: value" (JSON for what is not text).
def row_text(cells: dict) -> str:
    return "\n".join(f"{name}: {cell if isinstance(cell, str) else json.dumps(cell, ensure_ascii=False)}" for name, cell in cells.items())
