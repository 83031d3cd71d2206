"""TRL's completion logs: GRPOTrainer with GRPOConfig(log_completions=True) writes one parquet file per logged step,
<output_dir>/completions/completions_<step>.parquet (trl/trainer/grpo_trainer.py, GRPOTrainer.log: a pandas table of
step, prompt, completion, a column per reward function, the log_extra columns and advantage). Opened at the output
folder or at its completions/ folder; the training history is the output folder's checkpoint-*/trainer_state.json.
Since TRL 1.16 (grpo_trainer.py of trl 1.16.0, lines 2833-2834 and 3343-3344; huggingface/trl @ f2cd577, 1.10.0.dev0,
wrote the decoded texts) a conversational run's prompt and completion columns hold the chat messages themselves: a
completion is parse_response's message ({"role", "content", "reasoning_content", "tool_calls"}) and, with tools, the
tools' messages after it (chat_fields).

Traps of the writer (TRL 1.16): the rows come from deques of generation_batch_size entries that
_generate_and_score_completions extends with the gathered batch, so a file holds the latest generation batch, in the
order TRL computed advantages in: each group is num_generations consecutive rows (rewards.view(-1, num_generations)),
and one prompt drawn twice in a batch is two groups, not one. log() writes the deques at every logging step, also at a
step that trains on a batch generated before (num_iterations > 1, or steps_per_generation > gradient_accumulation_steps):
that file repeats the earlier one's rows under its own step. trainer_state.json does not hold num_generations; the
logger's metadata does (beside the folder, or in its default <output_dir>/rollout_samples/<run name>/).

Evaluation (huggingface/trl @ f2cd57710ae345ea6428ae95363267fcf38a3dc8, trl/trainer/grpo_trainer.py): the _logs deques
(lines 1055-1062) are extended in evaluation too (_generate_and_score_completions, lines 2753-2777), and log() (lines
3272-3325) writes completions_<global_step>.parquet in either mode. Hugging Face's Trainer logs a training step, then
evaluates at it (eval_strategy="steps"): evaluate() calls log() at the same global step, which writes that step's file
again with the last generation_batch_size rows of the evaluation (eval prompts, num_generations_eval completions each;
training rows too where the eval set was smaller), so the file shows evaluation rows under a training step. With
num_iterations > 1 a later step that trains without generating writes the deques again: the same rows (a repeated
file, above). The parquet says nothing of it: where the run's history (trainer_state.json, the logger's metrics) has an
evaluation at a file's step, the load report says that file may hold evaluation rows. trainer_state.json is written
at checkpoints, so an evaluation after the last one is not known yet."""
import contextlib
import dataclasses
import functools
import hashlib
import io
import json
import math
import os
import re
from pathlib import Path

import msgspec
import pyarrow as pa
import pyarrow.parquet

from rl_board.formats.agent_turns import LineNotes, kept_turns, message_turn, messages_value
from rl_board.formats.base import Folder, RunFormat, RunLayout, summed
from rl_board.reading.history import history_signature, mirrored_history, newest_trainer_state, read_history, read_meta
from rl_board.reading.lines import FORMAT_KEYS, as_text, converted
from rl_board.reading.storage import Entry, FileStatus, is_remote, joined, list_folder, read_file
from rl_board.text import shorten
from rollout_logger.metadata import ROLLOUTS_FOLDER

COMPLETIONS_FILE = re.compile(r"completions_(\d+)\.parquet")


COMPLETIONS_FOLDER = "completions"


NAME = "TRL completion logs (log_completions=True: completions/completions_<step>.parquet)"


# The output folder (its completions/ is the run's; its checkpoint-* and TensorBoard runs/ are the Trainer's, which
# the registry leaves out of every run), or its completions/ folder opened alone.
LAYOUT = RunLayout(files=COMPLETIONS_FILE, folders=frozenset({COMPLETIONS_FOLDER}), parts=re.compile(re.escape(COMPLETIONS_FOLDER)))


# The folder's parquet files, or its completions/ folder's, but those repeating the step before (named in the load
# report); JSONL beside them is named in a note and not read, and so is a folder named like a step's file (its step
# would be missing without a word).
def recognise(folder: Folder) -> tuple[dict[str, FileStatus], RunFormat] | None:
    parquet = [entry for entry in folder.files if COMPLETIONS_FILE.fullmatch(entry.name)]
    misnamed = [name for name in folder.folders if COMPLETIONS_FILE.fullmatch(name)]
    if not parquet and COMPLETIONS_FOLDER in folder.folders:
        listed = list_folder(joined(folder.run_dir, COMPLETIONS_FOLDER))
        parquet = [entry for entry in listed if not entry.is_dir and COMPLETIONS_FILE.fullmatch(entry.name)]
        misnamed = [entry.name for entry in listed if entry.is_dir and COMPLETIONS_FILE.fullmatch(entry.name)]
    if not parquet:
        return None
    run_dir = folder.run_dir
    near, logged = metadata_folders(run_dir)
    signatures = {meta_dir: history_signature(meta_dir) for meta_dir in near + logged}
    run_format = completions_format(run_dir, *signatures.values())
    repeats = repeated_batches(parquet)
    problems = tuple((entry.name, 0, "skipped", repeat_reason(repeats[entry.path])) for entry in parquet if entry.path in repeats)
    evaluated = evaluation_steps(output_folder(run_dir), signatures[output_folder(run_dir)])
    problems += tuple((entry.name, 0, "note", EVALUATED.format(step=file_step(entry))) for entry in parquet if file_step(entry) in evaluated)
    problems += tuple((name, 0, "skipped", FOLDER_NOT_FILE) for name in sorted(misnamed))
    if folder.jsonl:
        note = f"{len(folder.jsonl)} .jsonl file(s) beside TRL's completions are not read: put them in a run folder of their own to open them"
        problems += (("", 0, "note", note),)
    run_format = dataclasses.replace(run_format, problems=run_format.problems + problems)
    return folder.sources(entry for entry in parquet if entry.path not in repeats), run_format


# The steps the run's history (read_history of the output folder: trainer_state.json, the logger's metrics) has an
# evaluation at, read again only when its files change.
@functools.lru_cache(maxsize=64)
def evaluation_steps(output: str, signature: tuple) -> frozenset:
    if not signature:
        return frozenset()
    return frozenset(int(step) for step in read_history(output).eval["step"])


EVALUATED = (
    "the run's history has an evaluation at step {step}, and GRPOTrainer.log writes its evaluation completions to "
    "completions_<step>.parquet too: this file may hold evaluation rows (eval prompts, num_generations_eval "
    "completions each, eval rewards) written over step {step}'s training batch, not the batch trained on"
)


FOLDER_NOT_FILE = "a folder, not a parquet file (TRL writes each logged step's completions as one file): its step is not shown"


# TRL's completion logs: the reward functions' names come from the logger's metadata or TRL's logged
# rewards/<name>/mean; without either, every float column between completion and advantage is taken as one. The
# group size is the metadata's num_generations, else told from each file's prompts. Made again only when the files
# they come from change (the signatures of the folders holding them).
@functools.lru_cache(maxsize=64)
def completions_format(run_dir: str, *signatures: tuple) -> RunFormat:
    meta, meta_note = logger_meta(run_dir)
    names = reward_names(run_dir, meta)
    problems = [("", 0, "note", meta_note)] if meta_note else []
    if not names:
        problems.append(("", 0, "note", "no rollout_meta or trainer_state.json names the reward functions: every float column between completion and advantage is taken as one"))
    group_size = (meta or {}).get("num_generations")
    if type(group_size) is not int or group_size < 1:
        group_size = None
        problems.append(("", 0, "note", GROUPS_INFERRED))
    weights = tuple((meta_reward_weights(meta) or {}).items())
    return RunFormat(NAME, completion_lines, (tuple(names), group_size), tuple(problems), weights, sums_reward=True, history_dir=output_folder(run_dir))


GROUPS_INFERRED = (
    "no rollout_meta gives num_generations: a step's groups are its runs of rows with one prompt, cut into groups of "
    "the largest size that divides every run (a step whose every prompt was drawn twice shows groups twice too big)"
)


# Where the logger's metadata may be: near the completions (the opened folder, the output folder), and the logger's
# default <output_dir>/rollout_samples/<run name>/ folders.
def metadata_folders(run_dir: str) -> tuple[list[str], list[str]]:
    output, logged = output_folder(run_dir), []
    with contextlib.suppress(OSError):
        logged = [entry.path for entry in list_folder(joined(output, ROLLOUTS_FOLDER)) if entry.is_dir]
    return list(dict.fromkeys([run_dir, output])), logged


# The logger's metadata of the run: near the completions, else the newest (by started_at) of the
# rollout_samples/<run name>/ folders', with a note naming it when there are several. (None, "") without any.
def logger_meta(run_dir: str) -> tuple[dict | None, str]:
    near, logged = metadata_folders(run_dir)
    for folder in near:
        if (meta := read_meta(folder)) is not None:
            return meta, ""
    found = [(str(meta.get("started_at", "")), folder, meta) for folder in logged if (meta := read_meta(folder)) is not None]
    if not found:
        return None, ""
    _, folder, meta = max(found, key=lambda item: item[:2])
    name = folder.rstrip("/").rsplit("/" if is_remote(folder) else os.sep, 1)[-1]
    note = f"the logger's metadata is {ROLLOUTS_FOLDER}/{name}/'s, the newest of {len(found)} runs there" if len(found) > 1 else ""
    return meta, note


def reward_names(run_dir: str, meta: dict | None) -> list[str]:
    if meta and isinstance(meta.get("reward_funcs"), list):
        return [str(name) for name in meta["reward_funcs"]]
    folder = output_folder(run_dir)  # the output folder, also when its completions/ folder was opened
    _, state = newest_trainer_state(mirrored_history(folder) if is_remote(folder) else Path(folder), [])
    if state is not None:
        keys = (key for entry in state["log_history"] if isinstance(entry, dict) for key in entry)
        return list(dict.fromkeys(key[len("rewards/") : -len("/mean")] for key in keys if key.startswith("rewards/") and key.endswith("/mean")))
    return []


# The files that repeat the file before them, by path -> the step of the file that first had their rows. TRL's log()
# writes its latest generation batch at every logging step, so a step that trains on a batch generated before
# (num_iterations > 1, or steps_per_generation > gradient_accumulation_steps) writes the same rows under its own step.
# A repeat has the size of the file before it (only the step column's one value differs) and the same rows but step.
def repeated_batches(parquet: list[Entry]) -> dict[str, int]:
    ordered = sorted(parquet, key=file_step)
    repeats = {}
    for before, entry in zip(ordered, ordered[1:]):
        if before.status.size == entry.status.size and (digest := rows_digest(entry.path, entry.status)) is not None:
            if digest == rows_digest(before.path, before.status):
                repeats[entry.path] = repeats.get(before.path, file_step(before))
    return repeats


def file_step(entry: Entry) -> int:
    return int(COMPLETIONS_FILE.fullmatch(entry.name)[1])


def repeat_reason(step: int) -> str:
    return (
        f"the rows of step {step}'s file again (TRL logs a generation batch at every step that trains on it: "
        f"num_iterations > 1 or steps_per_generation > gradient_accumulation_steps): they count once, at step {step}"
    )


# A hash of a parquet file's rows but their step column, per file version (None: it cannot be read yet).
@functools.lru_cache(maxsize=4096)
def rows_digest(path: str, status: FileStatus) -> str | None:
    try:
        table = pyarrow.parquet.read_table(io.BytesIO(read_file(path)))
    except (OSError, ValueError, pa.ArrowException):
        return None
    table = table.drop_columns([name for name in ("step",) if name in table.column_names])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return hashlib.blake2b(sink.getvalue().to_pybytes(), digest_size=16).hexdigest()


# One parquet file of GRPOTrainer.log() (columns step, prompt, completion, a column per reward function, the
# log_extra columns, advantage) as the board's lines, a line per row in order (line N is row N, from 1): the reward
# functions' scores in rewards_per_func, their plain sum (NaN-skipping, as TRL sums; the weights are applied when the
# run loads) as reward, each run of group_size rows (num_generations; told from the prompts without it) a group, the
# other columns fields. A score that is not a number (a string in a reward column) is left out of its row, and so is the
# row's reward, which a sum without it would understate: the row is kept, its reward without a number (which the
# charts name), and a note names the function and the value.
def completion_lines(data: bytes, context: tuple) -> tuple[bytes, list]:
    table = pyarrow.parquet.read_table(io.BytesIO(data))
    columns = table.column_names
    reward_funcs, group_size = context
    names = list(dict.fromkeys(name for name in reward_funcs if name in columns))  # a name given twice is one column
    if not reward_funcs and "completion" in columns:  # TRL writes the scores as floats; log_extra columns follow them
        between = columns[columns.index("completion") + 1 : columns.index("advantage") if "advantage" in columns else None]
        names = [name for name in between if pa.types.is_floating(table.schema.field(name).type)]
    rows = table.to_pylist()
    group_size = group_size or prompt_runs_size([row.get("prompt") for row in rows])
    notes = []
    absent = [name for name in dict.fromkeys(reward_funcs) if name not in columns]  # a float column not named may be a log_extra one
    if absent:
        notes.append((0, f"reward function(s) {', '.join(absent)} that the run's metadata or trainer_state.json names have no column in this file (metadata of another run?): the reward sums the others"))
    if len(rows) % group_size:
        notes.append((len(rows), f"{len(rows)} rows are not groups of {group_size} (num_generations): the last group has {len(rows) % group_size}"))
    lines = []
    for index, row in enumerate(rows):
        reward, scores, row_notes = scored_row({name: row.pop(name) for name in names}, index + 1)
        notes += row_notes
        chat_notes = LineNotes()
        line = {"step": row.pop("step", None), **chat_fields(row.pop("prompt", None), row.pop("completion", None), chat_notes), "reward": reward, "rewards_per_func": scores, "advantage": row.pop("advantage", None)}
        notes += [(index + 1, chat_notes.text())] if chat_notes.text() else []
        line["group_id"] = f"{line['step']}-{index // group_size}"
        line |= {(f"{name} (log_extra)" if name in line or name in FORMAT_KEYS else name): value for name, value in row.items()}
        lines.append(encoded_line(line))
    return b"".join(line + b"\n" for line in lines), notes


# A row's reward functions' scores as its line keeps them, its reward (their plain sum, NaN-skipping as TRL sums: NaN is
# TRL's "did not score"), and notes for the row, line `line`: a score that is not a number is left out, and so is the
# reward, which a sum without it would understate; scores of +inf and −inf leave the reward without a number.
def scored_row(scores: dict, line: int) -> tuple[float | None, dict, list]:
    numbers = {name: number for name, score in scores.items() if (number := reward_number(score)) is not None}  # "0.75" too
    wrong = {name: score for name, score in scores.items() if score is not None and name not in numbers}
    notes = [(line, f"reward function {name}: {shorten(repr(score), 80)} is not a number, left out with the row's reward") for name, score in wrong.items()]
    scored = [score for score in numbers.values() if not math.isnan(score)]
    reward = summed(scored) if scored and not wrong else None
    if reward is not None and math.isnan(reward):
        notes.append((line, "reward functions scored +inf and −inf: the row's reward has no number"))
        reward = None
    return reward, {name: numbers.get(name) for name in scores if name not in wrong}, notes


# A converted line as JSON. msgspec writes ±inf as null, which the board reads as a reward without a number (or a
# function that did not score): a line holding ±inf is written by Python's json instead, as Infinity, which the board
# reads back as ±inf. NaN stays null, as msgspec writes it; other values (a timestamp column's) as msgspec writes them.
def encoded_line(line: dict) -> bytes:
    if not holds_infinity(line):
        return msgspec.json.encode(line)
    return json.dumps(nan_as_null(msgspec.to_builtins(line))).encode()


def holds_infinity(value) -> bool:
    if isinstance(value, float):
        return math.isinf(value)
    if isinstance(value, dict):
        return any(map(holds_infinity, value.values()))
    if isinstance(value, list | tuple):
        return any(map(holds_infinity, value))
    return False


def nan_as_null(value):
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, dict):
        return {key: nan_as_null(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [nan_as_null(item) for item in value]
    return value


# A reward function's score as the board reads a number (msgspec's lax mode: "0.5" is 0.5), None for one it does not.
def reward_number(score) -> float | None:
    try:
        return converted(score, float)  # beyond a float's range ("1e400"): ±inf
    except msgspec.ValidationError:
        return None


# The group size told from a file's prompts alone: TRL's groups are consecutive, so every run of rows with one prompt
# is a whole number of groups; the largest size dividing every run (a prompt drawn twice in a row makes a run of two).
def prompt_runs_size(prompts: list) -> int:
    runs, before = [], object()
    for prompt in map(as_text, prompts):
        if runs and prompt == before:
            runs[-1] += 1
        else:
            runs.append(1)
        before = prompt
    return math.gcd(*runs) or 1


# A row's prompt and completion as a line's. Chat messages as TRL wrote them: pyarrow gives each message of a column
# every key any message of it has, None where it had none (TRL 1.16 writes the messages themselves, parse_response's
# {"role", "content", "reasoning_content", "tool_calls"}, not their text; a null TRL wrote cannot be told from one
# pyarrow filled in, and is dropped too). A completion of one message of text, with its reasoning, is its text
# (messages_value); one that calls tools or holds several messages (TRL's tool loop: the calls, the tools' results,
# the answer) stays the messages, and is also the line's turns after the prompt's.
def chat_fields(prompt, completion, notes: LineNotes) -> dict:
    prompt, completion = written_messages(prompt), written_messages(completion)
    fields = {"prompt": prompt, "response": messages_value(completion) if isinstance(completion, list) else completion}
    if isinstance(completion, list) and (len(completion) > 1 or any(isinstance(message, dict) and message.get("tool_calls") for message in completion)):
        opening = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        fields["turns"] = kept_turns([message_turn(message, notes) for message in opening + completion], notes)
    return fields


def written_messages(value):
    if isinstance(value, list) and all(isinstance(message, dict) for message in value):
        return [without_nulls(message) for message in value]
    return value


# A message without the keys pyarrow filled in, at every level (a tool call's arguments get every argument name any
# call of the column has).
def without_nulls(value):
    if isinstance(value, dict):
        return {key: without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [without_nulls(item) for item in value]
    return value


# A TRL output folder opened at its completions/ folder: the output folder, where the checkpoints are.
def output_folder(run_dir: str) -> str:
    folder, _, name = run_dir.rstrip("/").rpartition("/" if is_remote(run_dir) else os.sep)
    return folder if name == COMPLETIONS_FOLDER and folder else run_dir


# The weights the logger's metadata gives the reward functions, by name (None: it names none).
def meta_reward_weights(meta: dict | None) -> dict[str, float] | None:
    names, weights = (meta or {}).get("reward_funcs"), (meta or {}).get("reward_weights")
    if not isinstance(names, list) or not isinstance(weights, list) or len(names) != len(weights):
        return None
    if not all(type(weight) in (int, float) and math.isfinite(weight) for weight in weights):
        return None
    return {str(name): float(weight) for name, weight in zip(names, weights)}
