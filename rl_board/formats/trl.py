"""TRL's completion logs: GRPOTrainer with GRPOConfig(log_completions=True) writes one parquet file per logged step,
<output_dir>/completions/completions_<step>.parquet (trl/trainer/grpo_trainer.py, GRPOTrainer.log: a pandas table of
step, prompt, completion, a column per reward function, the log_extra columns and advantage). Opened at the output
folder or at its completions/ folder; the training history is the output folder's checkpoint-*/trainer_state.json."""
import dataclasses
import functools
import io
import math
import os
import re
from pathlib import Path

import msgspec
import pyarrow as pa
import pyarrow.parquet

from rl_board.formats.base import Folder, RunFormat, RunLayout, group_of_prompt
from rl_board.reading.history import history_signature, mirrored_history, newest_trainer_state, read_meta
from rl_board.reading.lines import FORMAT_KEYS
from rl_board.reading.storage import FileStatus, is_remote, joined, list_folder

COMPLETIONS_FILE = re.compile(r"completions_\d+\.parquet")


COMPLETIONS_FOLDER = "completions"


NAME = "TRL completion logs (log_completions=True: completions/completions_<step>.parquet)"


# The output folder (its completions/ is the run's; its checkpoint-* and TensorBoard runs/ are the Trainer's, which
# the registry leaves out of every run), or its completions/ folder opened alone.
LAYOUT = RunLayout(files=COMPLETIONS_FILE, folders=frozenset({COMPLETIONS_FOLDER}), parts=re.compile(re.escape(COMPLETIONS_FOLDER)))


# The folder's parquet files, or its completions/ folder's; JSONL beside them is named in a note and not read.
def recognise(folder: Folder) -> tuple[dict[str, FileStatus], RunFormat] | None:
    parquet = [entry for entry in folder.files if COMPLETIONS_FILE.fullmatch(entry.name)]
    if not parquet and COMPLETIONS_FOLDER in folder.folders:
        listed = list_folder(joined(folder.run_dir, COMPLETIONS_FOLDER))
        parquet = [entry for entry in listed if not entry.is_dir and COMPLETIONS_FILE.fullmatch(entry.name)]
    if not parquet:
        return None
    run_dir = folder.run_dir
    output = output_folder(run_dir)
    run_format = completions_format(run_dir, history_signature(run_dir), history_signature(output) if output != run_dir else ())
    if folder.jsonl:
        note = f"{len(folder.jsonl)} .jsonl file(s) beside TRL's completions are not read: put them in a run folder of their own to open them"
        run_format = dataclasses.replace(run_format, problems=run_format.problems + (("", 0, "note", note),))
    return folder.sources(parquet), run_format


# TRL's completion logs: the reward functions' names come from the logger's metadata or TRL's logged
# rewards/<name>/mean; without either, every float column between completion and advantage is taken as one. Made
# again only when the files they come from change (the signatures of the folder and of its parent).
@functools.lru_cache(maxsize=64)
def completions_format(run_dir: str, *signatures: tuple) -> RunFormat:
    names = reward_names(run_dir)
    note = "no rollout_meta or trainer_state.json names the reward functions: every float column between completion and advantage is taken as one"
    problems = () if names else (("", 0, "note", note),)
    weights = tuple((meta_reward_weights(read_meta(run_dir)) or {}).items())
    return RunFormat(NAME, completion_lines, (tuple(names),), problems, weights, sums_reward=True, history_dir=output_folder(run_dir))


def reward_names(run_dir: str) -> list[str]:
    meta = read_meta(run_dir)
    if meta and isinstance(meta.get("reward_funcs"), list):
        return [str(name) for name in meta["reward_funcs"]]
    folder = output_folder(run_dir)  # the output folder, also when its completions/ folder was opened
    _, state = newest_trainer_state(mirrored_history(folder) if is_remote(folder) else Path(folder), [])
    if state is not None:
        keys = (key for entry in state["log_history"] if isinstance(entry, dict) for key in entry)
        return list(dict.fromkeys(key[len("rewards/") : -len("/mean")] for key in keys if key.startswith("rewards/") and key.endswith("/mean")))
    return []


# One parquet file of GRPOTrainer.log() (columns step, prompt, completion, a column per reward function, the
# log_extra columns, advantage) as the board's lines: the reward functions' scores in rewards_per_func, their plain
# sum (NaN-skipping, as TRL sums; the weights are applied when the run loads) as reward, the prompt's completions a
# group, the other columns fields.
def completion_lines(data: bytes, context: tuple) -> bytes:
    table = pyarrow.parquet.read_table(io.BytesIO(data))
    columns = table.column_names
    names = [name for name in context[0] if name in columns]
    if not context[0] and "completion" in columns:  # TRL writes the scores as floats; log_extra columns follow them
        between = columns[columns.index("completion") + 1 : columns.index("advantage") if "advantage" in columns else None]
        names = [name for name in between if pa.types.is_floating(table.schema.field(name).type)]
    lines = []
    for row in table.to_pylist():
        scores = {name: row.pop(name) for name in names}
        finite = [score for score in scores.values() if score is not None and not math.isnan(score)]
        line = {
            "step": row.pop("step", None),
            "prompt": row.pop("prompt", None),
            "response": completion_text(row.pop("completion", None)),
            "reward": math.fsum(finite) if finite else None,
            "rewards_per_func": scores,
            "advantage": row.pop("advantage", None),
        }
        line["group_id"] = group_of_prompt(line["prompt"])
        line |= {(f"{name} (log_extra)" if name in line or name in FORMAT_KEYS else name): value for name, value in row.items()}
        lines.append(msgspec.json.encode(line))
    return b"".join(line + b"\n" for line in lines)


# A completion as text: a chat completion of one assistant message is its content; others stay the message list.
def completion_text(completion):
    if isinstance(completion, list) and len(completion) == 1 and isinstance(completion[0], dict) and isinstance(completion[0].get("content"), str):
        return completion[0]["content"]
    return completion


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
