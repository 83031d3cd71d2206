"""The trainer's own numbers (training history): from the logger's rollout_metrics_*.jsonl, seed 004's
training_log.json, Hugging Face's trainer_state.json (the newest checkpoint's), trackio's project databases (their
metrics table) or a W&B run folder's transaction log (run-<id>.wandb, else files/wandb-summary.json), read as JSON only (a run folder is untrusted: the Trainer's pickled arguments are never read), into
train and eval frames with the configuration and the best checkpoint; a remote run's history files mirrored into the
cache folder; the logger's rollout_meta*.json."""
import contextlib
import fnmatch
import hashlib
import json
import math
import os
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

import rl_board.reading.trackio_db as trackio_db
import rl_board.reading.wandb_log as wandb_log
from rl_board.reading.index import PROBLEMS_LISTED, IndexCache
from rl_board.reading.lines import as_float, text_number
from rl_board.reading.storage import (
    FileStatus,
    canonical_path,
    is_remote,
    joined,
    list_folder,
    read_file,
    remote_storage,
    storage_errors,
)
from rl_board.text import json_kind, shorten, valid_text
from rollout_logger.metadata import META_FILES, METRICS_FILES


# A logged metric's name without its eval prefix: eval_loss (HF Trainer) and val_reward (seed 004) are drawn with loss
# and reward.
def metric_name(column: str) -> str:
    for prefix in ("eval_", "val_"):
        if column.startswith(prefix) and len(column) > len(prefix):
            return column[len(prefix):]
    return column


# The newest rollout_meta_*.json of the run, if the logger wrote one.
def read_meta(run_dir: str) -> dict | None:
    return read_meta_noted(run_dir)[0]


# The types of the metadata's values the board computes with (rollout_logger writes them so; null is absent), a
# section's by its keys: one of another type is left out (a list as `loss` would stop the views that read it).
NUMBER = (int, float)
META_TYPES = {
    "started_at": str, "trl_version": str, "model_name": str, "loss_type": str, "num_generations": int,
    "reward_funcs": list, "reward_weights": list, "trainer_config": dict,
    "sampler": {"engine": str, "temperature": NUMBER, "top_k": NUMBER, "top_p": NUMBER, "min_p": NUMBER},
    "importance_sampling": {"mode": str, "clip_min": NUMBER, "clip_max": NUMBER},
    "loss": {"epsilon_low": NUMBER, "epsilon_high": NUMBER, "delta": NUMBER, "importance_sampling_level": str, "top_entropy_quantile": NUMBER},
}


# read_meta's metadata, and a note for each file passed over (not a JSON object) and each value left out (META_TYPES).
def read_meta_noted(run_dir: str) -> tuple[dict | None, list[str]]:
    try:
        entries = list_folder(run_dir)
    except OSError:
        return None, []
    notes = []
    for entry in reversed(entries):
        if entry.is_dir or not fnmatch.fnmatch(entry.name, META_FILES):  # list_folder lists regular files: a FIFO would block the page forever
            continue
        name = valid_text(entry.name)
        try:
            value = json.loads(read_file(entry.path).decode("utf-8"))
        except (OSError, ValueError, RecursionError) as error:
            notes.append(f"{name} could not be read as JSON ({shorten(valid_text(str(error)), 200)}): passed over")
            continue
        if not isinstance(value, dict):
            notes.append(f"{name} holds a JSON {json_kind(value)}, not an object: passed over")
            continue
        return typed_meta(value, META_TYPES, name, notes), notes
    return None, notes


# The metadata with each value of another type than `types` says left out, noted (a section's keys in turn).
def typed_meta(value: dict, types: dict, where: str, notes: list[str]) -> dict:
    kept = {}
    for key, field in value.items():
        expected = types.get(key)
        if isinstance(expected, dict) and isinstance(field, dict):
            field = typed_meta(field, expected, f"{where} {key}", notes)
        elif expected is not None and field is not None and (not isinstance(field, dict if isinstance(expected, dict) else expected) or isinstance(field, bool)):
            notes.append(f"{where}: {valid_text(str(key))} of type {type(field).__name__} is not what the logger writes: left out")
            continue
        kept[key] = field
    return kept


TRAINING_LOG, TRAINER_STATE = "training_log.json", "trainer_state.json"


TRACKIO_DATABASES = "*.db"  # trackio's <project>.db (its -wal beside it while a writer has it open)


WANDB_LOG, WANDB_SUMMARY = "run-*.wandb", "files/wandb-summary.json"  # a W&B run folder's (offline-run-*, run-*)


CHECKPOINT_FOLDER = re.compile(r"checkpoint-(\d+)")


PROBLEM_COLUMNS = ["file", "line", "kind", "reason"]


# The trainer's numbers of a run: one row per logged step of each kind, its configuration and best checkpoint.
@dataclass(frozen=True)
class TrainingHistory:
    sources: list  # the files read, relative to the folder
    train: pd.DataFrame  # "step", then one float column per logged number
    eval: pd.DataFrame
    config: dict
    best: dict  # {} or {"step", "path", "metrics": {name: value}} (+ "epoch")
    problems: pd.DataFrame  # file, line, kind, reason: each file's first PROBLEMS_LISTED, after a note counting the rest
    skipped: int = 0  # entries and files skipped, listed or not
    signature: tuple = ()  # history_signature of the files when read (set by load_history)

    @property
    def empty(self) -> bool:
        return self.train.empty and self.eval.empty


# A history whose load report lists each file's first PROBLEMS_LISTED problems, after a note counting the rest (a log of
# 100,000 entries, each with a NaN, made as many rows), and counts every entry or file skipped.
def training_history(sources: list, train: pd.DataFrame, evaluation: pd.DataFrame, config: dict, best: dict, problems: list) -> TrainingHistory:
    listed, seen = [], {}
    for problem in problems:
        seen[problem[0]] = seen.get(problem[0], 0) + 1
        if seen[problem[0]] <= PROBLEMS_LISTED:
            listed.append(problem)
    notes = [
        [file, 0, "note", f"{count - PROBLEMS_LISTED:,} more problems of its entries are not listed here, past the first {PROBLEMS_LISTED:,}"]
        for file, count in seen.items() if count > PROBLEMS_LISTED
    ]
    skipped = sum(kind == "skipped" for _, _, kind, _ in problems)
    return TrainingHistory(sources, train, evaluation, config, best, pd.DataFrame(notes + listed, columns=PROBLEM_COLUMNS), skipped)


# Entries of one kind in file order. A step lower than one already seen starts a resumed run: what the earlier run
# logged from that step on is dropped (add returns how many steps, for the load report), the later entry stands;
# entries of the same step merge key by key. The rows are kept in step order, so that each entry looks at the largest
# step only (finding the largest step of all, each entry, took 60 s for a trainer_state.json of 80,000 entries).
# add(..., resume=False) keeps an entry below the largest step at its step instead (the logger's metrics file: one
# launch never resumes within its own file); the rows are then out of order (frame() sorts them; drop_from drops by
# step).
class HistorySeries:
    def __init__(self):
        self.rows: dict[int, dict] = {}
        self.last: int | None = None  # the largest step in rows
        self.in_order = True  # rows' keys ascending

    def add(self, step: int, numbers: dict, resume: bool = True) -> int:
        dropped = 0
        if self.rows and step < self.last:
            if resume:
                dropped = self.drop_from(step)
            elif step not in self.rows:
                self.in_order = False
        self.rows.setdefault(step, {}).update(numbers)
        self.last = step if self.last is None or step > self.last else self.last
        return dropped

    # Drops every row from step on; the number dropped.
    def drop_from(self, step: int) -> int:
        before = len(self.rows)
        if self.in_order:
            while self.rows and next(reversed(self.rows)) >= step:
                self.rows.popitem()
            self.last = next(reversed(self.rows)) if self.rows else None
        elif self.last is not None and self.last >= step:
            self.rows = {kept: row for kept, row in self.rows.items() if kept < step}
            self.last = max(self.rows, default=None)
        return before - len(self.rows)

    def frame(self) -> pd.DataFrame:
        steps = sorted(self.rows)
        table = pd.DataFrame.from_records([self.rows[step] for step in steps], index=range(len(steps)))
        table.insert(0, "step", np.array(steps, dtype=np.int64))
        return table.astype({column: float for column in table.columns if column != "step"})


# An entry of a history whose train and eval entries come in one sequence (trainer_state.json's log_history, a trackio
# or W&B run's rows), added to its kind's series. A train entry below the latest train step starts a resumed run: what
# the earlier run logged from that step on, of both kinds, its evaluations too, is dropped, and a load-report note
# counts it (nothing is replaced unsaid). An evaluation below an earlier one is kept at its step (trainer.evaluate()
# called before a resumed trainer.train() logs at step 0): only the trainer's step going back tells a resume.
def add_entry(train: HistorySeries, evaluation: HistorySeries, evaluated: bool, step: int, numbers: dict, where: tuple, problems: list):
    if evaluated:
        evaluation.add(step, numbers, resume=False)
    elif dropped := train.add(step, numbers):
        note_resume(f"{dropped:,} train and {evaluation.drop_from(step):,} eval step(s)", step, where, problems)


# A load-report note for the entries a resume dropped, at where.
def note_resume(dropped: str, step: int, where: tuple, problems: list):
    file, line, *within = where
    about = f"{within[0]}: " if within else ""
    problems.append([file, line, "note", f"{about}step {step} after later steps: a resume; the {dropped} logged before it from step {step} on are replaced"])


# The history of a run folder or training output folder, from the first source it holds (see this section's title).
def read_history(folder) -> TrainingHistory:
    if is_remote(folder):
        folder = mirrored_history(str(folder))
    folder, problems = Path(folder), []
    metrics_files = sorted(path for path in folder.glob(METRICS_FILES) if path.is_file())
    if metrics_files:
        return history_from_metrics_files(folder, metrics_files, problems)
    if (folder / TRAINING_LOG).is_file():
        log = read_json_file(folder / TRAINING_LOG, folder, problems)
        if log is not None:
            return history_from_training_log(TRAINING_LOG, log, problems)
    state_path, state = newest_trainer_state(folder, problems)
    if state is not None:
        return history_from_trainer_state(state_path, state, problems)
    databases = sorted(path for path in folder.glob(TRACKIO_DATABASES) if path.is_file())
    if databases:
        history = history_from_trackio(databases, problems)
        if history is not None:
            return history
    logs = sorted(path for path in folder.glob(WANDB_LOG) if path.is_file())
    if logs or (folder / WANDB_SUMMARY).is_file():
        return history_from_wandb(folder, logs, problems)
    empty = pd.DataFrame({"step": np.array([], dtype=np.int64)})
    return training_history([], empty, empty, {}, {}, problems)


# The files a history is read from, with their sizes and times: a cheap key that changes when any of them does.
def history_signature(folder) -> tuple:
    if is_remote(folder):
        with contextlib.suppress(OSError):  # the rollouts' load says why a run cannot be read
            return tuple((name, status.size, status.etag) for name, status in remote_history_files(str(folder)).items())
        return ()
    folder = Path(folder)
    paths = [*folder.glob(METRICS_FILES), *folder.glob(META_FILES), folder / TRAINING_LOG, folder / TRAINER_STATE, *folder.glob(f"checkpoint-*/{TRAINER_STATE}")]
    paths += [*folder.glob(WANDB_LOG), folder / WANDB_SUMMARY]
    signature = []
    for path in sorted(paths):
        with contextlib.suppress(OSError):
            status = path.stat()
            signature.append((str(path.relative_to(folder)), status.st_size, status.st_mtime_ns))
    for path in sorted(folder.glob(TRACKIO_DATABASES)):  # trackio's: a commit in WAL mode changes only the -wal
        with contextlib.suppress(OSError):
            signature.append((path.name, *trackio_db.file_stamp(str(path))))
    return tuple(signature)


# A whole JSON file (NaN and Infinity allowed: the entries say which keys were left out); None with a problem row
# when it cannot be read, e.g. while a trainer rewrites it.
def read_json_file(path: Path, folder: Path, problems: list):
    name = valid_text(str(path.relative_to(folder)))
    try:
        value = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as error:
        problems.append([name, 0, "skipped", f"not readable as JSON ({error}): nothing taken from it"])
        return None
    if not isinstance(value, dict):
        problems.append([name, 0, "skipped", f"holds a JSON {json_kind(value)}, not an object: nothing taken from it"])
        return None
    return value


# The folder's own trainer_state.json or a checkpoint's, whichever reached the latest global_step (the folder's own
# wins a tie); checkpoints are tried newest first and an unreadable one is passed over.
def newest_trainer_state(folder: Path, problems: list) -> tuple[str | None, dict | None]:
    checkpoints = sorted(
        (path for path in folder.glob(f"checkpoint-*/{TRAINER_STATE}") if CHECKPOINT_FOLDER.fullmatch(path.parent.name) and path.is_file()),
        key=lambda path: int(path.parent.name.split("-")[1]),
        reverse=True,
    )
    found = []
    for path in ([folder / TRAINER_STATE] if (folder / TRAINER_STATE).is_file() else []) + checkpoints:
        state = read_json_file(path, folder, problems)
        if state is not None and not isinstance(state.get("log_history"), list):
            problems.append([valid_text(str(path.relative_to(folder))), 0, "skipped", "no log_history list: not a Trainer state"])
            state = None
        if state is not None:
            found.append((str(path.relative_to(folder)), state))
            if path.parent != folder:
                break
    if not found:
        return None, None
    return max(found, key=lambda item: global_step(item[1]))  # max keeps the first of equals: the folder's own


def global_step(state: dict) -> int:
    step = state.get("global_step")
    return step if type(step) is int else -1


# The logger's metrics files in launch order: train and eval lines, and checkpoint lines that name the best one.
def history_from_metrics_files(folder: Path, paths: list, problems: list) -> TrainingHistory:
    train, evaluation, best = HistorySeries(), HistorySeries(), {}
    for launch, path in enumerate(paths):
        name, resumed_at, latest, nulls = valid_text(path.name), None, {}, {}  # latest: the largest step of each kind so far
        try:
            data = path.read_bytes()
        except OSError as error:
            problems.append([name, 0, "skipped", f"could not be read ({error})"])
            continue
        lines = data.split(b"\n")
        if lines[-1].strip():
            problems.append([name, len(lines), "incomplete", "the last line has no end yet: still being written, or cut off"])
        for number, line in enumerate(lines[:-1], start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except (ValueError, RecursionError) as error:
                problems.append([name, number, "skipped", f"not valid JSON ({error})"])
                continue
            where = (name, number)
            if isinstance(entry, dict) and entry.get("kind") == "checkpoint":
                if isinstance(entry.get("best_model_checkpoint"), str):
                    best = {"path": entry["best_model_checkpoint"], "value": entry.get("best_metric")}
                continue
            step = history_entry_step(entry, where, problems)
            if step is None:
                continue
            evaluated = is_evaluation(entry)
            # A later launch (a resume) replaces what earlier ones logged, of either kind, from its first trained step on.
            if launch and resumed_at is None and not evaluated:
                resumed_at = step
                dropped = train.drop_from(step), evaluation.drop_from(step)
                if any(dropped):
                    problems.append([name, number, "note", f"this launch resumes at step {step}: {dropped[0]:,} train and {dropped[1]:,} eval step(s) earlier launches logged from step {step} on are replaced by its own"])
            # Within a launch's file the steps of a kind only go up: one below an earlier line's is no resume (that
            # starts a new file), it is kept at its step, with a note.
            if step < latest.get(evaluated, step):
                problems.append([name, number, "note", f"step {step} after step {latest[evaluated]} in the same launch: kept at its step, merged with what that step logged before (a resume starts a new file)"])
            latest[evaluated] = max(latest.get(evaluated, step), step)
            (evaluation if evaluated else train).add(step, entry_numbers(entry, where, problems, nulls), resume=False)
        for key, (first, count) in nulls.items():  # a metric the trainer logs as NaN at every step: one note, not one a line
            problems.append([name, first, "note", f"{key} is null (NaN or an infinity, as the logger writes them) at {count:,} line(s), from this one: left out"])
    eval_frame = evaluation.frame()
    if best:
        best = best_from_checkpoint(best["path"], None, best["value"], eval_frame)
    meta = read_meta(str(folder)) or {}
    config = meta.get("trainer_config") if isinstance(meta.get("trainer_config"), dict) else {}
    return training_history([path.name for path in paths], train.frame(), eval_frame, config, best, problems)


# Seed 004's training_log.json: config, train_history, val_history, and best_checkpoint (GRPO, DPO) or final_metrics
# (LoRA).
def history_from_training_log(name: str, log: dict, problems: list) -> TrainingHistory:
    frames = {}
    for key in ("train_history", "val_history"):
        series, entries = HistorySeries(), log.get(key, [])
        if not isinstance(entries, list):
            problems.append([name, 0, "skipped", f"{key} is not a list"])
            entries = []
        for position, entry in enumerate(entries):
            where = (name, 0, f"{key}[{position}]")
            step = history_entry_step(entry, where, problems)
            if step is not None and (dropped := series.add(step, entry_numbers(entry, where, problems))):  # its own list's entries alone
                note_resume(f"{dropped:,} step(s)", step, where, problems)
        frames[key] = series.frame()
    best, final = log.get("best_checkpoint"), log.get("final_metrics")
    if isinstance(best, dict):
        best = {
            "step": history_entry_step(best, (name, 0, "best_checkpoint"), []),
            "path": best.get("path") if isinstance(best.get("path"), str) else None,
            "metrics": {key: value for key, value in entry_numbers(best, (name, 0, "best_checkpoint"), problems).items() if key not in ("epoch", "samples")},
        } | ({"epoch": as_float(best["epoch"])} if type(best.get("epoch")) in (int, float) and math.isfinite(as_float(best["epoch"])) else {})
    elif isinstance(final, dict) and isinstance(final.get("best_checkpoint"), str):
        best = best_from_checkpoint(final["best_checkpoint"], None, final.get("best_metric"), frames["val_history"])
    else:
        best = {}
    config = log.get("config") if isinstance(log.get("config"), dict) else {}
    return training_history([name], frames["train_history"], frames["val_history"], config, best, problems)


# Hugging Face Trainer's state: log_history entries with eval_* keys are evaluations, the rest training.
def history_from_trainer_state(name: str, state: dict, problems: list) -> TrainingHistory:
    train, evaluation = HistorySeries(), HistorySeries()
    for position, entry in enumerate(state["log_history"]):
        where = (valid_text(name), 0, f"log_history[{position}]")
        step = history_entry_step(entry, where, problems)
        if step is not None:
            add_entry(train, evaluation, is_evaluation(entry), step, entry_numbers(entry, where, problems), where, problems)
    eval_frame = evaluation.frame()
    path = state.get("best_model_checkpoint")
    best = best_from_checkpoint(path, state.get("best_global_step"), state.get("best_metric"), eval_frame) if isinstance(path, str) else {}
    config = {key: value for key, value in state.items() if type(value) in (int, float, str, bool)}
    return training_history([valid_text(name)], train.frame(), eval_frame, config, best, problems)


# trackio's metrics tables: each row one trackio.log call of a run, its metrics a JSON object (non-finite numbers as
# "NaN", "Infinity", "-Infinity"). Hugging Face's TrackioCallback logs every Trainer log with rewrite_logs' names
# (train/<key>, eval/<key>, test/<key>) and train/global_step, on trackio's own step counter: such a row is read back
# as the Trainer logged it (<key>, eval_<key>, test_<key>; evaluations as in trainer_state.json) at its global step.
# In such a run (one with train/global_step in any row) a row without it (the callback's on_predict: trainer.predict()'s
# test_* metrics; a trackio.log of your own) is read back with the same names at the latest global step logged before
# it (0 before any), never at trackio's counter (11 after ten rows, below the global steps: a resume that would drop
# them), with a note counting such rows. Other runs' rows (verl's, a script's) keep their names at the row's step. A
# row without numbers (a trackio.log of traces only, as TRL's async GRPO logs rollouts) is passed over. Runs (of a
# database, or of several: <database>/<run>) are told apart by " · <run>" after each metric's name when several logged
# metrics, their configurations by run when there are several; one run keeps the names and its configuration.
def history_from_trackio(paths: list, problems: list) -> TrainingHistory | None:
    runs, sources = {}, []  # (database, run key) -> [label, train, eval, config]
    for path in paths:
        name = valid_text(path.name)
        try:
            with trackio_db.read(str(path)) as connection:
                available = trackio_db.tables(connection)
                if "metrics" not in available:
                    continue  # not trackio's, or no metrics: the format's load report names it
                labels = trackio_db.run_names(connection, available)
                key = trackio_db.run_key_column(connection, "metrics")
                rows = connection.execute(f"SELECT rowid, {key}, step, metrics FROM metrics ORDER BY rowid").fetchall()
                configs = []
                if "configs" in available:
                    config_key = trackio_db.run_key_column(connection, "configs")
                    configs = connection.execute(f"SELECT {config_key}, config FROM configs ORDER BY rowid").fetchall()
        except (sqlite3.Error, OSError) as error:
            problems.append([name, 0, "skipped", f"not readable as trackio's database ({shorten(str(error), 200)}): no training metrics from it"])
            continue
        sources.append(name)
        for run_key, config in configs:
            run = runs.setdefault((name, str(run_key)), [labels.get(str(run_key), str(run_key)), HistorySeries(), HistorySeries(), {}])
            with contextlib.suppress(ValueError, TypeError, RecursionError):
                value = json.loads(config)
                run[3] = value if isinstance(value, dict) else {}
        logged_rows = {}  # run key -> [(row id, trackio's step, entry)], in the order logged
        for row_id, run_key, step, metrics in rows:
            try:
                entry = json.loads(metrics)
            except (ValueError, TypeError, RecursionError) as error:
                problems.append([name, 0, "skipped", f"metrics row {row_id}: not JSON ({shorten(str(error), 120)}): entry left out"])
                continue
            if not isinstance(entry, dict):
                problems.append([name, 0, "skipped", f"metrics row {row_id}: not a JSON object: entry left out"])
                continue
            entry = {str(key): trackio_db.number_of(value) for key, value in entry.items()}
            if any(type(value) in (int, float) for value in entry.values()):
                logged_rows.setdefault(str(run_key), []).append((row_id, step, entry))
        for run_key, logged in logged_rows.items():
            run = runs.setdefault((name, run_key), [labels.get(run_key, run_key), HistorySeries(), HistorySeries(), {}])
            add_trainer_rows(logged, (name, f"run {run[0]}"), run[1], run[2], problems)
    if not sources:
        return None
    logged = sum(bool(run[1].rows or run[2].rows) for run in runs.values())  # a run of traces only has no entries
    several_databases = len({database for database, _ in runs}) > 1
    train, evaluation, config = HistorySeries(), HistorySeries(), {}
    for (database, _), (label, run_train, run_eval, run_config) in runs.items():
        label = f"{database.removesuffix('.db')}/{label}" if several_databases else label
        suffix = f" · {label}" if logged > 1 else ""
        for series, merged in ((run_train, train), (run_eval, evaluation)):
            for step, numbers in series.rows.items():
                merged.rows.setdefault(step, {}).update({key + suffix: value for key, value in numbers.items()})
        if len(runs) == 1:
            config = run_config
        elif run_config:
            config[label] = run_config
    return training_history(sources, train.frame(), evaluation.frame(), config, {}, problems)


# A W&B run's history: each row of its transaction log one wandb.log, at the Trainer's global step when the row has
# Hugging Face's WandbCallback's train/global_step (names as trackio's rows are read back), else at W&B's own _step.
# W&B's own keys (_step, _runtime, _timestamp, _wandb) and the numbers that describe a logged media object (a table's
# nrows, ncols, size: <key>.* beside <key>._type) are not metrics. Without the log (a synced run's files/ copied
# alone), its wandb-summary.json is one row: the last value of each metric. A log cut short or corrupt is read up to
# there, with a row in the load report.
def history_from_wandb(folder: Path, logs: list, problems: list) -> TrainingHistory:
    train, evaluation, config, sources = HistorySeries(), HistorySeries(), {}, []
    for path in logs:
        name = valid_text(path.name)
        try:
            log = wandb_log.read_log(path.read_bytes())
        except OSError as error:
            problems.append([name, 0, "skipped", f"could not be read ({error})"])
            continue
        sources.append(name)
        if log.stopped:
            problems.append([name, 0, "note", f"{log.stopped} ({len(log.history)} history rows read before it)"])
        config |= {key: value for key, value in log.config.items() if not key.startswith("_")}
        rows = [(f"history row {position}", row.get("_step"), wandb_entry(row)) for position, row in enumerate(log.history)]
        add_trainer_rows([row for row in rows if row[2]], (name, "the log"), train, evaluation, problems)
    if not sources and (folder / WANDB_SUMMARY).is_file():
        summary = read_json_file(folder / WANDB_SUMMARY, folder, problems)
        if summary is not None:
            sources.append(WANDB_SUMMARY)
            rows = [("the summary", summary.get("_step"), wandb_entry(summary))]
            add_trainer_rows([row for row in rows if row[2]], (WANDB_SUMMARY, "the summary"), train, evaluation, problems)
    return training_history(sources, train.frame(), evaluation.frame(), config, {}, problems)


# A W&B row's metrics: not W&B's own keys nor a media object's numbers; {} when it has no number.
def wandb_entry(row: dict) -> dict:
    media = {key[: -len("._type")] + "." for key in row if key.endswith("._type")}
    entry = {key: value for key, value in row.items() if not key.startswith("_") and not key.startswith(tuple(media))}
    return entry if any(type(value) in (int, float) for value in entry.values()) else {}


HF_PREFIXES = (("train/", ""), ("eval/", "eval_"), ("test/", "test_"))  # transformers' rewrite_logs, undone


# One run's rows of trackio or W&B, in the order logged: (row label, the logger's own step, entry with a number). In a
# run of Hugging Face's TrackioCallback or WandbCallback (a row with train/global_step), every row gets the Trainer's
# names; one without train/global_step (on_predict's test_* metrics, a log call of your own) is placed at the latest
# global step logged before it (0, the Trainer's before its first step, when none was), with one note counting such
# rows, instead of at the logger's counter. Other runs' rows stay as logged, at the logger's step.
def add_trainer_rows(rows: list, where: tuple, train: HistorySeries, evaluation: HistorySeries, problems: list):
    file, run = where
    callback = any(type(entry.get("train/global_step")) is int for _, _, entry in rows)
    latest, placed = 0, []
    for label, logger_step, entry in rows:
        row_where = (file, 0, label if isinstance(label, str) else f"metrics row {label}")
        entry, global_step = trainer_names(entry, callback)
        if global_step is not None:
            latest = global_step
        elif callback:
            placed.append(logger_step)
        entry["step"] = global_step if global_step is not None else latest if callback else logger_step
        step = history_entry_step(entry, row_where, problems)
        if step is not None:
            add_entry(train, evaluation, is_evaluation(entry), step, entry_numbers(entry, row_where, problems), row_where, problems)
    if placed:
        problems.append([file, 0, "note", (
            f"{run}: {len(placed):,} {'row' if len(placed) == 1 else 'rows'} without train/global_step (trainer.predict's "
            "test_* metrics, or a log call of your own) placed at the global step logged before, not at the logger's own step "
            f"({', '.join(str(step) for step in placed[:3])}{', ...' if len(placed) > 3 else ''})")])


# A row of Hugging Face's TrackioCallback or WandbCallback with the Trainer's own names (also a row without
# train/global_step when callback: its run is the callback's), and its global step (None where it has none).
def trainer_names(entry: dict, callback: bool = False) -> tuple[dict, int | None]:
    global_step = entry.get("train/global_step")
    if type(global_step) is not int:
        global_step = None
        if not callback:
            return entry, None
    renamed = {}
    for key, value in entry.items():
        if key == "train/global_step":
            continue
        prefix, replacement = next(((prefix, replacement) for prefix, replacement in HF_PREFIXES if key.startswith(prefix)), ("", ""))
        renamed[replacement + key[len(prefix):]] = value
    return renamed, global_step


# The best checkpoint from its path and metric value: the step is the checkpoint's number unless given, the metric is
# named after the eval metric (eval_*, val_*) holding that value (at that step if it can be), else "best_metric".
def best_from_checkpoint(path: str, step, value, eval_frame: pd.DataFrame) -> dict:
    numbers = CHECKPOINT_FOLDER.findall(path)
    step = step if type(step) is int else int(numbers[-1]) if numbers else None
    metrics = {}
    if type(value) in (int, float) and math.isfinite(as_float(value)):
        at_step = eval_frame[eval_frame["step"] == step]
        names = [column for column in eval_frame.columns[1:] if metric_name(column) != column]  # eval_*, val_*: not epoch
        at_best, anywhere = ([column for column in names if np.isclose(table[column], value, rtol=1e-12, atol=0).any()] for table in (at_step, eval_frame))
        # The trainer does not say which metric it is (metric_for_best_model is not in its state): the evaluation's
        # metrics equal to it at that step, all of them where several are (one reward function's mean is the reward).
        metrics[" or ".join(at_best) if at_best else anywhere[0] if anywhere else "best_metric"] = float(value)
    return {"step": step, "path": path, "metrics": metrics}


# An evaluation's entry: the logger says so ("kind"); else its keys do: eval_* or, from Trainer.evaluate with another
# metric_key_prefix (e.g. "test"), <prefix>_runtime.
def is_evaluation(entry: dict) -> bool:
    if entry.get("kind") in ("train", "eval"):
        return entry["kind"] == "eval"
    return any(str(key).startswith("eval_") or (str(key).endswith("_runtime") and key != "train_runtime") for key in entry)


# An entry's step: an integer (2.0 is 2); None, with a problem row at where, for anything else.
def history_entry_step(entry, where: tuple, problems: list) -> int | None:
    step = entry.get("step") if isinstance(entry, dict) else None
    if type(step) is float and step.is_integer() and abs(step) < 2**63:
        step = int(step)
    if type(step) is int and -(2**63) <= step < 2**63:
        return step
    file, line, *within = where
    about = f"{within[0]}: " if within else ""
    reason = "not a JSON object" if not isinstance(entry, dict) else "no step" if "step" not in entry else f"step {shorten(repr(step), 40)} is not an integer within int64"
    problems.append([file, line, "skipped", f"{about}{reason}: entry left out"])
    return None


# The numbers of an entry (not step): other values (texts, lists) are not series; NaN and infinities are left out
# with a note. nulls (the logger's metrics file, whose every value is a number the trainer logged; {key: (first line,
# count)}, which the caller makes one note a key): a number written as text ("0.7") is read as that number, null (the
# logger's NaN and infinities) counted in nulls, and any other value (a boolean, other text, a list) left out with a
# note.
def entry_numbers(entry: dict, where: tuple, problems: list, nulls: dict | None = None) -> dict:
    numbers = {}
    file, line, *within = where
    about = f"{within[0]}: " if within else ""
    for key, value in entry.items():
        if key in ("step", "kind"):
            continue
        if nulls is not None and type(value) is str and text_number(value) is not None:
            value = text_number(value)
        if type(value) not in (int, float):
            if nulls is not None and value is None:
                first, count = nulls.get(valid_text(str(key)), (line, 0))
                nulls[valid_text(str(key))] = (first, count + 1)
            elif nulls is not None:
                problems.append([file, line, "note", f"{about}{valid_text(str(key))} is {'an' if json_kind(value)[0] in 'aeiou' else 'a'} {json_kind(value)}, not a number: left out"])
            continue
        value = as_float(value)
        if math.isfinite(value):
            numbers[valid_text(str(key))] = value
        else:
            problems.append([file, line, "note", f"{about}{key} is {value}: left out"])
    return numbers


# A run's history files on object storage, by their path in the run folder, from one listing of all its objects.
def remote_history_files(run_dir: str) -> dict[str, FileStatus]:
    remote = remote_storage(run_dir)
    with storage_errors(run_dir):
        found = remote.find(run_dir, detail=True)
    prefix, files = remote._strip_protocol(run_dir).rstrip("/") + "/", {}
    for name, info in sorted(found.items()):
        relative = name[len(prefix) :] if name.startswith(prefix) else ""
        folder, _, file = relative.rpartition("/")
        top_level = not folder and (fnmatch.fnmatch(file, METRICS_FILES) or fnmatch.fnmatch(file, META_FILES) or fnmatch.fnmatch(file, WANDB_LOG) or file in (TRAINING_LOG, TRAINER_STATE))
        if top_level or relative == WANDB_SUMMARY or (CHECKPOINT_FOLDER.fullmatch(folder) and file == TRAINER_STATE):
            files[relative] = FileStatus(int(info.get("size") or 0), etag=str(info.get("ETag") or "").strip('"'))
    return files


# A run's history files on object storage, copied into a local folder (again only those that changed), to be read as
# a local run's are.
def mirrored_history(run_dir: str) -> Path:
    folder = IndexCache().local_folder / "history" / hashlib.sha1(os.fsencode(canonical_path(run_dir))).hexdigest()[:20]
    with contextlib.suppress(OSError):
        wanted = remote_history_files(run_dir)
        for path in folder.rglob("*"):
            if path.is_file() and str(path.relative_to(folder)).removesuffix(".etag") not in wanted:
                path.unlink()
        for relative, status in wanted.items():
            target, stamp = folder / relative, folder / f"{relative}.etag"
            if target.is_file() and stamp.is_file() and stamp.read_text() == f"{status.size} {status.etag}":
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(read_file(joined(run_dir, relative)))
            stamp.write_text(f"{status.size} {status.etag}")
    return folder
