"""W&B run folders, offline or synced (wandb/offline-run-<date>_<time>-<id>/, wandb/run-<date>_<time>-<id>/): the
tables logged with wandb.log({key: wandb.Table(...)}). wandb (pip wandb 0.22.3; wandb/sdk/data_types/table.py,
Table.to_json, and wandb/sdk/data_types/base_types/media.py, Media._set_file) writes every logged table as its own file,
files/media/table/<key>_<W&B step>_<20 hex of its sha256>.table.json ({"columns": [...], "data": [[row], ...]}, with
NaN and Infinity written as such; a key with "/" in it a sub-folder), so a local run keeps every step's table where
the W&B page shows only the latest (TRL issue #2045). Its history, config and summary are only in its transaction log
run-<id>.wandb (reading/wandb_log.py; a synced run also has files/wandb-summary.json): read as the run's training
history (reading/history.py).

TRL's completions table: GRPOTrainer.log (trl/trainer/grpo_trainer.py, trl 1.16.0; as in huggingface/trl @
f2cd57710ae345ea6428ae95363267fcf38a3dc8 but for the prompt and completion, texts there) logs {"completions":
wandb.Table(dataframe=df)} at each logging step, df the columns step (the Trainer's global step, not W&B's step in the
file name), prompt, completion (a text, or chat messages: a reasoning model's reasoning_content, a tool loop's calls
and results, read as TRL's parquet files are), a column per reward function (self.reward_func_names, floats, NaN where a function gave None), the
log_extra columns, advantage (and image, wandb.Image objects, when the prompts had images); with
log_unique_prompts=True one row per prompt. The reward functions' names are in the history as TRL's metrics
(train/rewards/<name>/mean through Hugging Face's WandbCallback), their weights in the config (GRPOConfig's
reward_weights, None: all 1). Its rows become the board's lines as TRL's parquet files do (formats/trl.py): prompt,
response, rewards_per_func, reward (their weighted sum, made when the run loads), advantage, group_id (the prompt's
completions within the step: GRPO's group), the other columns fields. Traps: a run without those metrics names no
functions, and then every column between completion and advantage whose values are all floats is taken as one (a
float log_extra column too: the load report says so).

Another table becomes a line per row, every column a field as named (one named like a board key gets " (table)"
after its name), its response the row as text (a line per column, "name: value"), its prompt empty, its reward its
reward column where every value of that is a number, or a number written as text (else none, and the column a
field, with a note). Every line has the field wandb_table (the key it was logged under: a facet).

Evaluations: GRPOTrainer.log logs the evaluation's completions table too, under the same key, at the step the
evaluation ran at, right after the evaluation's metrics (eval/<key>), from the same buffer (_logs, a deque of
generation_batch_size rows, never cleared): an evaluation of fewer rows leaves the tail of the step's training batch
in it, logged again. In a run whose log has an evaluation, a GRPOTrainer completions table (its advantage column
tells it from LogCompletionsCallback's) has the field split: eval where the last row of metrics logged before it is an
evaluation's, else train, the former counted in the load report. Other tables have no split: other loggers log their
tables before their metrics (OpenRLHF), or before the evaluation of their step (LogCompletionsCallback.on_step_end).

A row's step, in any table, is its step column's (the first of step, global_step the table has; an integer or a whole
float, or either written as text), else the Trainer's global step when the table was logged (the last train/global_step the
log has at or before the W&B step in the file's name), else that W&B step. Cumulative tables: a logger that logs its
whole table again at every step, grown by the step's rows, writes each row again in every later file. OpenRLHF's
WandbLogger.log_train (openrlhf/utils/logging_utils.py, OpenRLHF/OpenRLHF @ 3c3be623, lines 84-97; the sample from
openrlhf/trainer/ppo_trainer.py, lines 220-263) logs train/generated_samples, columns global_step, text, reward, the
table before plus a row, in a wandb.log before the one of train/global_step (so the log's global step is the step
before). TRL's LogCompletionsCallback.on_step_end (trl/trainer/callbacks.py, huggingface/trl @ f2cd577, ~290 and
330-336) logs {"completions": pd.DataFrame(columns=["step", "prompt", "completion"], data=self.table)} with
self.table grown each time, step str(state.global_step); it maps as TRL's completions table (no reward functions).
Rows that repeat rows of the file logged before it under the same key (same columns and values; each earlier row takes
one) are left out, so each row counts once, where it was first logged (the load report has a note a key with how
many): in a table with a step column, any (a row holds its step: the same sample at the same step); in one without,
only where the file holds every row of the one before and more (cumulative). A table without a step column of each
step's own rows, one alike by chance or all unchanged, loses none.

A table file that is not JSON or not {"columns", "data"} (one being written) is named in the load report and read
again when it changes; a row of another length than the columns is left out, counted.

A run folder holding run-<id>.wandb is one run (W&B's unit: one wandb.init); its files/, logs/ and tmp/ are its. A
wandb/ folder lists each run folder in it as a run, and latest-run (W&B's link to the newest) as one more."""
import bisect
import collections
import functools
import hashlib
import json
import math
import re
from dataclasses import dataclass

from rl_board.formats.agent_turns import LineNotes
from rl_board.formats.base import Folder, RunFormat, RunLayout, group_of_prompt
from rl_board.formats.trl import chat_fields, encoded_line, reward_number, scored_row
from rl_board.reading.history import wandb_entry
from rl_board.reading.lines import FORMAT_KEYS, text_number
from rl_board.reading.storage import FileStatus, joined, list_folder, read_file
from rl_board.reading.wandb_log import read_log
from rl_board.text import shorten, valid_text

NAME = "W&B run folders (files/media/table/*.table.json, run-<id>.wandb)"


LOG_FILE = re.compile(r"run-.+\.wandb", re.DOTALL)


LAYOUT = RunLayout(files=LOG_FILE, parts=re.compile(r"files|logs|tmp"))


TABLES_FOLDER = ("files", "media", "table")


TABLE_FILE = re.compile(r"(?P<key>.+)_(?P<step>\d+)_[0-9a-f]+\.table\.json", re.DOTALL)


TRL_COLUMNS = {"step", "prompt", "completion"}  # TRL's completions table (its advantage column comes last)


STEP_COLUMNS = ("step", "global_step")  # a row's own step (TRL's; OpenRLHF's), the first of them a table has


REWARD_METRIC = re.compile(r"(?:train/|eval/)?rewards/(?P<name>.+)/mean", re.DOTALL)  # TRL's per-function mean


WEIGHTS_SOURCE = "the W&B run's config: reward_weights"


CONVERSION = 2  # the conversion's version: a change makes every table's conversion again


OWN_FIELDS = ("wandb_table",)


# A folder with W&B's transaction log: every table file under files/media/table/ is a source, named in the
# conversions by its path there; the reward functions' names and weights come from the log.
def recognise(folder: Folder) -> tuple[dict[str, FileStatus], RunFormat] | None:
    logs = [entry for entry in folder.files if LOG_FILE.fullmatch(entry.name)]
    if not logs:
        return None
    facts = log_facts(logs[-1].path, logs[-1].status)
    problems = facts.problems
    sources, contexts, others, keys = {}, {}, 0, {}
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
        contexts[entry.path] = (relative.replace("/", "~"), {"key": key, "step": wandb_step if global_step is None else global_step, "split": facts.split(wandb_step)})
        keys.setdefault(key, []).append((wandb_step, entry))
    for logged in keys.values():  # each file of a key after the first: the one logged before it, whose rows it may repeat
        logged.sort(key=lambda item: (item[0], item[1].name))
        for (_, before), (_, entry) in zip(logged, logged[1:]):
            contexts[entry.path][1]["before"] = (before.path, before.status)
    if others:
        problems += (("", 0, "note", f"{others} file(s) in files/media/table are not named <key>_<step>_<hash>.table.json: not read"),)
    if not sources:
        problems += (("", 0, "note", "no table was logged (wandb.Table): the run's metrics are its Training metrics"),)
    names, weights = ordered_weights(facts, sources)
    return sources, RunFormat(
        NAME, table_lines, (CONVERSION, names), problems, weights, weights_source=WEIGHTS_SOURCE, sums_reward=True, file_contexts=contexts, merged_notes=notes_by_key
    )


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
    evaluations: tuple = ()  # (W&B step, whether it is an evaluation's: eval/<key>) of the rows of metrics, by W&B step
    evaluates: bool = False  # whether any row of metrics is an evaluation's

    # The Trainer's global step when W&B's step was `step`: the last one logged at or before it (None: none was).
    def global_step(self, step: int) -> int | None:
        position = bisect.bisect_right(self.global_steps, (step, math.inf))
        return self.global_steps[position - 1][1] if position else None

    # A GRPOTrainer completions table logged at W&B's step `step`: "eval" where the last row of metrics logged before it
    # is an evaluation's (GRPOTrainer.log logs its table right after the Trainer's metrics, in evaluation too), else
    # "train"; None in a run that logged no evaluation.
    def split(self, step: int) -> str | None:
        if not self.evaluates:
            return None
        position = bisect.bisect_left(self.evaluations, (step, False))
        return "eval" if position and self.evaluations[position - 1][1] else "train"


@functools.lru_cache(maxsize=64)
def log_facts(log_path: str, status: FileStatus) -> LogFacts:
    try:
        log = read_log(read_file(log_path))
    except OSError as error:
        return LogFacts(problems=(("", 0, "note", f"the transaction log could not be read ({shorten(str(error), 200)}): the reward functions are not named"),))
    names = tuple(dict.fromkeys(found["name"] for row in log.history for key in row if (found := REWARD_METRIC.fullmatch(key))))
    steps = tuple(sorted({(row["_step"], row["train/global_step"]) for row in log.history if type(row.get("_step")) is int and type(row.get("train/global_step")) is int}))
    evaluations = tuple(sorted(
        (row["_step"], any(key.startswith("eval/") for key in numbers)) for row in log.history if type(row.get("_step")) is int and (numbers := metrics_of(row))
    ))
    evaluated = {"evaluations": evaluations, "evaluates": any(evaluation for _, evaluation in evaluations)}
    weights = log.config.get("reward_weights")
    if names and isinstance(weights, list) and len(weights) == len(names) and all(type(weight) in (int, float) and math.isfinite(weight) for weight in weights):
        return LogFacts(names, tuple(map(float, weights)), steps, **evaluated)
    if names:
        return LogFacts(names, (), steps, **evaluated)
    note = "the log names no reward functions (TRL's rewards/<name>/mean): in a completions table, every all-float column between completion and advantage is taken as one"
    return LogFacts((), (), steps, (("", 0, "note", note),), **evaluated)


# The keys of a history row's metrics: its numbers but W&B's own (_step, _runtime), a table's (completions.nrows) and
# the Trainer's step (W&B's step_sync writes it into rows of tables too).
def metrics_of(row: dict) -> list[str]:
    return [key for key, value in wandb_entry(row).items() if type(value) in (int, float) and key != "train/global_step"]


# One table file as the board's lines, a line per row; notes for the rows left out: those of another length than the
# columns, and those repeating the table logged before it under the same key (repeated_rows), counted in a note that
# notes_by_key makes one per key, as the note on an evaluation's completions (GRPOTrainer's table: split).
def table_lines(data: bytes, context: tuple) -> tuple[bytes, list]:
    _, names, table = context
    value = json.loads(data)
    if not is_table(value):
        raise ValueError("not a W&B table ({\"columns\", \"data\"})")
    columns = [valid_text(str(column)) for column in value["columns"]]
    step_column = next((name for name in STEP_COLUMNS if name in columns), None)
    digests = row_digests(value)
    repeated = repeated_rows(digests, file_digests(*table["before"]) if "before" in table else None, step_column is not None)
    rows = [row for index, (row, digest) in enumerate(zip(value["data"], digests)) if digest is not None and index not in repeated]
    wrong = digests.count(None)
    notes = [(0, f"{wrong} row(s) of another length than its {len(columns)} columns: left out")] if wrong else []
    if repeated:
        notes.append((0, REPEATED_NOTE.format(count=len(repeated), key=table["key"])))
    trl = TRL_COLUMNS <= set(columns)
    split = table.get("split") if trl and "advantage" in columns else None  # GRPOTrainer's table: logged right after the metrics
    if split == "eval" and rows:
        notes.append((0, EVALUATED_NOTE.format(count=len(rows), key=table["key"])))
    functions = (list(names) if names else float_columns(columns, rows)) if trl else []
    reward_column, reward_note = ("", "") if trl else numeric_reward(columns, rows)
    notes += [(0, reward_note)] if reward_note else []
    lines = []
    for index, row in enumerate(rows):
        cells = dict(zip(columns, row))
        step = row_step(cells.get(step_column))
        line = {"step": table["step"] if step is None else step}
        if trl:
            cells.pop("step")
            reward, scores, row_notes = scored_row({name: cells.pop(name) for name in functions if name in cells}, index + 1)
            notes += row_notes
            chat_notes = LineNotes()
            line |= {**chat_fields(cells.pop("prompt"), cells.pop("completion"), chat_notes), "reward": reward, "rewards_per_func": scores}
            notes += [(index + 1, chat_notes.text())] if chat_notes.text() else []
            if "advantage" in cells:
                line["advantage"] = cells.pop("advantage")
            line["group_id"] = group_of_prompt(line["prompt"])
        else:
            line |= {"prompt": "", "response": row_text(cells), "reward": reward_number(cells.pop(reward_column)) if reward_column else None}
            if step is not None:
                cells.pop(step_column)
        line["wandb_table"] = table["key"]
        if split:
            line["split"] = split
        line |= {(f"{name} (table)" if name in line or name in FORMAT_KEYS or name in OWN_FIELDS else name): cell for name, cell in cells.items()}
        lines.append(encoded_line(line))
    return b"".join(line + b"\n" for line in lines), notes


# Whether a table file's JSON is W&B's table ({"columns", "data"}): one being written, or of another kind, is not.
def is_table(value) -> bool:
    return isinstance(value, dict) and isinstance(value.get("columns"), list) and isinstance(value.get("data"), list)


# A row's step as its step column gives it: an integer, a whole float (2.0), or either written as text (TRL's
# LogCompletionsCallback writes str(state.global_step)); None for anything else (the table's step then).
def row_step(cell) -> int | None:
    number = text_number(cell) if isinstance(cell, str) else cell
    if type(number) is float and number.is_integer():  # 2.0: pandas makes an integer column with a NaN one of floats
        return int(number)
    return number if type(number) is int else None


# A table's reward column (its name, "" for none) when it has a column named reward whose every value is a number (or
# null, or a number written as text, as TRL's scores are read: reward_number): OpenRLHF's generated_samples. A reward
# column holding something else stays a field, with a note.
def numeric_reward(columns: list, rows: list) -> tuple[str, str]:
    if "reward" not in columns:
        return "", ""
    at = columns.index("reward")
    other = next((row[at] for row in rows if row[at] is not None and reward_number(row[at]) is None), None)
    if other is None:
        return "reward", ""
    return "", f"its reward column holds values that are not numbers ({shorten(repr(other), 60)}): kept as the field reward (table), the rows have no reward"


# Each row's digest (its columns and values), None for a row of another length than the columns.
def row_digests(value: dict) -> list:
    columns, size = json.dumps(value["columns"]), len(value["columns"])
    return [
        hashlib.blake2b(f"{columns}\n{json.dumps(row, sort_keys=True)}".encode(), digest_size=16).digest() if isinstance(row, list) and len(row) == size else None
        for row in value["data"]
    ]


# The digests of a table file's rows, counted, per file version (None: it cannot be read as a table).
@functools.lru_cache(maxsize=64)
def file_digests(path: str, status: FileStatus) -> collections.Counter | None:
    try:
        value = json.loads(read_file(path))
    except (OSError, ValueError):
        return None
    return collections.Counter(digest for digest in row_digests(value) if digest is not None) if is_table(value) else None


# The rows (by position) that repeat rows of the table logged before (each of those takes one): in a table with a step
# column, any (the same sample at the same step, logged again: TRL's GRPOTrainer logs its evaluation's completions
# from the buffer that still holds the tail of the step's training batch); in one without, only where this one holds
# every row of the one before and more (a cumulative table, each the one before plus rows: OpenRLHF's
# generated_samples). A table without a step column that holds some of them, or all and no more (each step's own
# rows, alike by chance or unchanged), repeats none.
def repeated_rows(digests: list, before: collections.Counter | None, step_column: bool) -> set[int]:
    left, repeated = collections.Counter(before or ()), set()
    for index, digest in enumerate(digests):
        if digest is not None and left[digest] > 0:
            left[digest] -= 1
            repeated.add(index)
    grown = not +left and len(repeated) < sum(digest is not None for digest in digests)
    return repeated if step_column or grown else set()


REPEATED_NOTE = "{count} row(s) repeating the {key} table logged before it: left out"


EVALUATED_NOTE = "{count} row(s) of the {key} table logged right after an evaluation's metrics: split eval"


# Each note of table_lines that notes_by_key makes one a key: its pattern, and the note it makes (count, files, key).
KEYED_NOTES = (
    (REPEATED_NOTE, (
        "{key}: {count} repeated row(s) left out, from {files} table file(s) that logged again rows of the table logged before them "
        "(a cumulative table, each step's the one before plus new rows, as the W&B page shows only the latest; or the same sample at "
        "the same step): each row counts once, at its step column's step, else where it was first logged"
    )),
    (EVALUATED_NOTE, (
        "{key}: {count} row(s) of {files} table file(s) logged right after an evaluation's metrics (eval/<key>) are the evaluation's "
        "completions (GRPOTrainer.log logs them under the same key, at the step the evaluation ran at): they have the field split "
        "eval, the training's split train"
    )),
)


KEYED_PATTERNS = tuple(re.compile(re.escape(note).replace(r"\{count\}", r"(?P<count>\d+)").replace(r"\{key\}", "(?P<key>.+)"), re.DOTALL) for note, _ in KEYED_NOTES)


# The conversions' load-report rows with each key's notes of one kind (KEYED_NOTES, one a file) made one note.
def notes_by_key(problems: tuple) -> tuple:
    merged, kept = {}, []  # (kind, key) -> [rows, files]
    for problem in problems:
        found = next(((kind, match) for kind, pattern in enumerate(KEYED_PATTERNS) if problem[2] == "note" and (match := pattern.fullmatch(problem[3]))), None)
        if found is None:
            kept.append(problem)
            continue
        kind, match = found
        counts = merged.setdefault((kind, match["key"]), [0, 0])
        counts[0], counts[1] = counts[0] + int(match["count"]), counts[1] + 1
    notes = [("", 0, "note", KEYED_NOTES[kind][1].format(key=key, count=count, files=files)) for (kind, key), (count, files) in merged.items()]
    return (*notes, *kept)


# TRL's reward functions when no metric names them: the columns between completion and advantage whose values are
# all floats (TRL's scores; NaN for a function that gave None).
def float_columns(columns: list, rows: list) -> list:
    between = columns[columns.index("completion") + 1 : columns.index("advantage") if "advantage" in columns else None]
    return [name for name, at in ((name, columns.index(name)) for name in between) if rows and all(type(row[at]) is float for row in rows)]


# Another table's row as the text the board shows for it: a line per column, "name: value" (JSON for what is not text).
def row_text(cells: dict) -> str:
    return "\n".join(f"{name}: {cell if isinstance(cell, str) else json.dumps(cell, ensure_ascii=False)}" for name, cell in cells.items())
