"""The training-history reader, rl_logging_board.read_history, against the run folders in tests/fixtures/history.

Each test works out what the reader must return from the raw files itself (json with the standard library and plain
loops, never the board's own helpers) and compares that with read_history's answer: the train and eval frames, the
config, the best checkpoint, the sources and the problem rows. The reader's rules, in short:

- sources, first found wins: the logger's rollout_metrics_<launch>.jsonl files (in name order), else training_log.json
  (seed 004), else the trainer_state.json with the largest global_step among the folder's own and its checkpoint-<N>
  subfolders' (the folder's own wins a tie); an unreadable candidate is a problem row and the next one is tried;
  training_args.bin is never read;
- per kind, in file order: a step lower than the last kept one starts a resumed run (kept entries with a step at or past
  it are dropped, with a "note" row saying so), the same step as the last kept one merges into it key by key (the later
  value stands); the logger's metrics files: each file is one launch, a step lower than an earlier line's of its kind
  in the same file is kept at its step with a "note", and a later launch's first train line replaces what earlier
  launches logged (train and eval) from its step on, with a "note" counting them;
- values: finite int/float kept as float64, NaN/Infinity missing plus a "note" row naming the key, bools, strings,
  lists and dicts ignored (in a metrics file: a number written as text is that number, anything else not a number a
  "note" naming the key); an entry that is no object or has no integral step is "skipped"; a file that is no valid
  JSON is one "skipped" row on line 0; in a metrics file, a bad line is "skipped" on its line and an unterminated last
  line is "incomplete".
"""

import json
import math
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest

import rl_board
import rl_board.reading.history
import rl_logging_board as board
from rl_board.reading.history import HistorySeries, TrainingHistory, read_history
from tests.support import FIXTURES as ALL_FIXTURES
from tests.support import PROJECT
from tests.support.runs import sample, write_lines

FIXTURES = ALL_FIXTURES / "history"
# What tests/fixtures/history/malicious_pickle/**/training_args.bin creates when unpickled.
MARKER = Path("/tmp/rl_logging_board_history_pickle_marker")
PROBLEM_COLUMNS = ["file", "line", "kind", "reason"]


# ---------------------------------------------------------------- what the rules give, worked out from the raw files


def integral_step(value):
    """The step an entry's "step" value gives: an int, or a float with an integral value; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    return None


def expected_frame(records, problems):
    """The frame one kind's entries give. records: (file, line, entry) in file order; problem rows are appended to
    problems as (file, line, kind, a word the reason must contain or None)."""
    rows = []  # [step, {key: value}], steps ascending
    for file, line, entry in records:
        if not isinstance(entry, dict):
            problems.append((file, line, "skipped", None))
            continue
        step = integral_step(entry.get("step"))
        if step is None:
            problems.append((file, line, "skipped", None))
            continue
        values = {}
        for key, value in entry.items():
            if key == "step" or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if math.isfinite(value):
                values[key] = float(value)
            else:
                values[key] = math.nan
                problems.append((file, line, "note", key))
        if rows and step < rows[-1][0]:
            kept = [row for row in rows if row[0] < step]
            problems.append((file, line, "note", "resume"))  # the rows logged from step on are replaced, said
            rows = kept
        if rows and rows[-1][0] == step:
            for key, value in values.items():
                if not (math.isnan(value) and key in rows[-1][1]):
                    rows[-1][1][key] = value
        else:
            rows.append([step, values])
    return rows_frame(rows)


def rows_frame(rows):
    """The frame of [step, {key: value}] rows, in step order, columns in the order first logged."""
    rows = sorted(rows, key=lambda row: row[0])
    columns = []
    for _, values in rows:
        columns += [key for key in values if key not in columns]
    frame = pd.DataFrame({"step": np.array([step for step, _ in rows], dtype="int64")})
    for column in columns:
        frame[column] = np.array([values.get(column, math.nan) for _, values in rows], dtype="float64")
    return frame


def empty_frame():
    return pd.DataFrame({"step": np.array([], dtype="int64")})


def checkpoint_number(path):
    match = re.search(r"(?:^|[/\\])checkpoint-(\d+)[/\\]?$", path or "")
    return int(match.group(1)) if match else None


def metric_name(eval_frame, step, best_metric):
    """The eval column whose value at step equals best_metric, else one holding it at any step, else "best_metric"."""
    rows = eval_frame[eval_frame["step"] == step]
    for column in eval_frame.columns[1:]:
        if len(rows) and rows[column].iloc[0] == best_metric:
            return column
    for column in eval_frame.columns[1:]:
        if (eval_frame[column] == best_metric).any():
            return column
    return "best_metric"


def expected_from_training_log(folder, name="training_log.json"):
    log = json.loads((folder / name).read_text())
    problems = []
    train = expected_frame([(name, 0, e) for e in log.get("train_history", [])], problems)
    evals = expected_frame([(name, 0, e) for e in log.get("val_history", [])], problems)
    best = {}
    if "best_checkpoint" in log:
        raw = log["best_checkpoint"]
        best = {
            "step": integral_step(raw.get("step")),
            "path": raw.get("path"),
            "metrics": {
                key: float(value)
                for key, value in raw.items()
                if key not in ("step", "epoch", "samples", "path") and isinstance(value, (int, float)) and not isinstance(value, bool)
            },
        }
        if "epoch" in raw:
            best["epoch"] = float(raw["epoch"])
    elif "final_metrics" in log:
        raw = log["final_metrics"]
        step = checkpoint_number(raw.get("best_checkpoint"))
        best = {"step": step, "path": raw.get("best_checkpoint"), "metrics": {metric_name(evals, step, raw["best_metric"]): float(raw["best_metric"])}}
    return {"sources": [name], "train": train, "eval": evals, "config": log.get("config", {}), "best": best, "problems": problems}


def expected_from_trainer_state(folder, relative):
    state = json.loads((folder / relative).read_text())
    problems = []
    history = state["log_history"]
    is_eval = [isinstance(e, dict) and any(key.startswith("eval_") for key in e) for e in history]
    train = expected_frame([(relative, 0, e) for e, ev in zip(history, is_eval) if not ev], problems)
    evals = expected_frame([(relative, 0, e) for e, ev in zip(history, is_eval) if ev], problems)
    best = {}
    if "best_model_checkpoint" in state or "best_metric" in state:
        step = state.get("best_global_step")
        if step is None:
            step = checkpoint_number(state.get("best_model_checkpoint"))
        best = {"step": step, "path": state.get("best_model_checkpoint"),
                "metrics": {metric_name(evals, step, state["best_metric"]): float(state["best_metric"])}}
    config = {key: value for key, value in state.items() if not isinstance(value, (dict, list))}
    return {"sources": [relative], "train": train, "eval": evals, "config": config, "best": best, "problems": problems}


TEXT_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def metrics_values(file, line, entry, problems, nulls):
    """A metrics-file line's values: numbers, and numbers written as text, as floats (NaN where not finite, with a
    note); null counted in nulls ({key: first line}: one note a key, at its first line); anything else (a boolean,
    other text, a list) left out with a note naming its key."""
    values = {}
    for key, value in entry.items():
        if key in ("step", "kind"):
            continue
        if isinstance(value, str) and TEXT_NUMBER.fullmatch(value.strip()):
            value = float(value)
        if value is None:
            nulls.setdefault(key, line)
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            problems.append((file, line, "note", key))
            continue
        if math.isfinite(value):
            values[key] = float(value)
        else:
            values[key] = math.nan
            problems.append((file, line, "note", key))
    return values


def expected_from_metrics_files(folder):
    """The logger's rule: each file is one launch, in name order. Within a file nothing is dropped: a step below an
    earlier line's of its kind is kept at its step, with a note. A later launch's first train line at step s replaces what earlier
    launches logged (train and eval) from s on, with a note when it replaces anything. Entries of one step merge key by
    key."""
    names = sorted(path.name for path in folder.glob("rollout_metrics_*.jsonl"))
    problems, rows = [], {"train": {}, "eval": {}}  # kind -> {step: {key: value}}
    for launch, name in enumerate(names):
        text = (folder / name).read_text()
        lines = text.split("\n")  # the last piece is "" when the file ends with a newline
        resumed, latest, nulls = False, {}, {}  # latest: the largest step of each kind in this file so far
        for number, raw in enumerate(lines[:-1], start=1):
            try:
                entry = json.loads(raw)
            except ValueError:
                problems.append((name, number, "skipped", None))
                continue
            kind = entry.get("kind") if isinstance(entry, dict) else None
            if kind == "checkpoint":
                continue
            step = integral_step(entry.get("step")) if isinstance(entry, dict) else None
            if step is None:
                problems.append((name, number, "skipped", None))
                continue
            kind = "eval" if kind == "eval" else "train"
            if launch and not resumed and kind == "train":
                resumed = True
                before = sum(map(len, rows.values()))
                rows = {kind_: {s: row for s, row in found.items() if s < step} for kind_, found in rows.items()}
                if sum(map(len, rows.values())) < before:
                    problems.append((name, number, "note", "resumes"))
            if kind in latest and step < latest[kind]:
                problems.append((name, number, "note", "same launch"))
            latest[kind] = max(latest.get(kind, step), step)
            values = metrics_values(name, number, entry, problems, nulls)
            merged = rows[kind].setdefault(step, {})
            for key, value in values.items():
                if not (math.isnan(value) and key in merged):
                    merged[key] = value
        problems += [(name, line, "note", key) for key, line in nulls.items()]
        if lines[-1]:
            problems.append((name, len(lines), "incomplete", None))
    frames = {kind: rows_frame([[step, values] for step, values in found.items()]) for kind, found in rows.items()}
    return {"sources": names, "train": frames["train"], "eval": frames["eval"], "problems": problems}


# ---------------------------------------------------------------- comparisons


def assert_frame(actual, expected):
    assert isinstance(actual, pd.DataFrame)
    assert list(actual.columns) == list(expected.columns)
    assert actual["step"].dtype == np.int64
    assert actual["step"].is_unique and actual["step"].is_monotonic_increasing
    for column in actual.columns[1:]:
        assert actual[column].dtype == np.float64, column
    pdt.assert_frame_equal(actual.reset_index(drop=True), expected, check_exact=True, check_column_type=False)


def problem_rows(history):
    frame = history.problems
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == PROBLEM_COLUMNS
    rows = [(str(f), int(line), str(kind), str(reason)) for f, line, kind, reason in frame.itertuples(index=False)]
    for row in rows:
        assert row[2] in ("skipped", "incomplete", "note") and row[3].strip(), row
    return rows


def assert_problems(history, expected):
    """The problem rows are exactly the expected (file, line, kind) rows, in any order; where an expected row names a
    word (a key, "JSON"), the reason of one row of its own says it."""
    rows = problem_rows(history)
    assert Counter(row[:3] for row in rows) == Counter(row[:3] for row in expected), rows
    unused = list(rows)
    for file, line, kind, word in sorted((row for row in expected if row[3]), key=lambda row: -len(row[3])):
        match = next((row for row in unused if row[:3] == (file, line, kind) and word.lower() in row[3].lower()), None)
        assert match, f"no {kind} row on {file}:{line} names {word!r}: {rows}"
        unused.remove(match)


def assert_best(actual, expected):
    assert actual == expected
    if expected:
        assert set(actual) == set(expected)
        assert actual["step"] is None or type(actual["step"]) is int, type(actual["step"])
        assert all(isinstance(value, float) for value in actual["metrics"].values())
        if "epoch" in expected:
            assert isinstance(actual["epoch"], float)


def assert_state_config(actual, expected):
    """The state's top-level scalars, with their types; a None value may be left out ("scalar" is not clear there)."""
    assert set(actual) <= set(expected), set(actual) - set(expected)
    for key, value in expected.items():
        if value is None:
            assert actual.get(key) is None, key
        else:
            assert key in actual and actual[key] == value and type(actual[key]) is type(value), (key, actual.get(key), value)


def assert_history(history, expected, state_config=False):
    assert isinstance(history, TrainingHistory)
    assert history.sources == expected["sources"]
    assert_frame(history.train, expected["train"])
    assert_frame(history.eval, expected["eval"])
    if "config" in expected:
        if state_config:
            assert_state_config(history.config, expected["config"])
        else:
            assert history.config == expected["config"]
    if "best" in expected:
        assert_best(history.best, expected["best"])
    assert_problems(history, expected["problems"])


def read(folder) -> "board.TrainingHistory":
    return read_history(str(folder))


def copy_fixture(name, tmp_path) -> Path:
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    return folder


# ---------------------------------------------------------------- seed 004's training_log.json


@pytest.mark.parametrize("layout", ["grpo", "lora", "dpo"])
def test_seed004_training_log(layout):
    folder = FIXTURES / f"seed004_{layout}"
    expected = expected_from_training_log(folder)
    history = read(folder)
    assert_history(history, expected)
    # what the expected values must come to, said plainly
    assert history.problems.empty
    assert len(history.train) >= 20 and len(history.eval) >= 3
    assert history.best["step"] in set(history.eval["step"])


def test_seed004_keys_keep_their_names():
    grpo, lora, dpo = (read(FIXTURES / f"seed004_{layout}") for layout in ("grpo", "lora", "dpo"))
    assert list(grpo.train.columns) == ["step", "epoch", "samples", "loss", "reward", "kl", "lr"]
    assert list(grpo.eval.columns) == ["step", "epoch", "samples", "val_reward", "val_format", "val_bbox", "val_category", "val_completeness"]
    assert list(lora.train.columns) == ["step", "epoch", "loss", "learning_rate"]
    assert list(lora.eval.columns) == ["step", "epoch", "eval_loss"]
    assert list(dpo.train.columns) == ["step", "epoch", "loss", "accuracy", "reward_margin"]
    assert list(dpo.eval.columns) == ["step", "epoch", "val_loss", "val_accuracy", "val_reward_margin"]
    assert grpo.sources == lora.sources == dpo.sources == ["training_log.json"]


def test_seed004_best_checkpoints():
    grpo = read(FIXTURES / "seed004_grpo")
    raw = json.loads((FIXTURES / "seed004_grpo/training_log.json").read_text())["best_checkpoint"]
    assert grpo.best == {"step": raw["step"], "epoch": 1.0, "path": "outputs/qwen3vl_grpo/best", "metrics": {"val_reward": raw["val_reward"]}}
    dpo = read(FIXTURES / "seed004_dpo")
    assert dpo.best["step"] == 200 and dpo.best["epoch"] == 2.0 and dpo.best["path"] == "outputs/qwen3vl_dpo/best"
    assert set(dpo.best["metrics"]) == {"val_accuracy", "val_loss", "val_reward_margin"}  # not step, epoch or path
    lora = read(FIXTURES / "seed004_lora")
    # final_metrics: the step from the checkpoint-<N> path, the metric named after the eval column it equals; no epoch
    assert lora.best == {"step": 200, "path": "outputs/qwen3vl_lora/checkpoint-200", "metrics": {"eval_loss": 0.914}}


def rewrite_log(folder, change):
    path = folder / "training_log.json"
    log = json.loads(path.read_text())
    change(log)
    path.write_text(json.dumps(log, indent=2))


def test_lora_best_without_checkpoint_number_has_no_step(tmp_path):
    folder = copy_fixture("seed004_lora", tmp_path)
    rewrite_log(folder, lambda log: log["final_metrics"].update(best_checkpoint="outputs/qwen3vl_lora/best"))
    history = read(folder)
    assert_history(history, expected_from_training_log(folder))
    # No step in the path, but the value is one eval_loss of the history: the metric is named after it.
    assert history.best == {"step": None, "path": "outputs/qwen3vl_lora/best", "metrics": {"eval_loss": 0.914}}


def test_lora_best_metric_equal_to_no_eval_value(tmp_path):
    folder = copy_fixture("seed004_lora", tmp_path)
    rewrite_log(folder, lambda log: log["final_metrics"].update(best_metric=0.9))
    history = read(folder)
    assert_history(history, expected_from_training_log(folder))
    assert history.best == {"step": 200, "path": "outputs/qwen3vl_lora/checkpoint-200", "metrics": {"best_metric": 0.9}}


def test_training_log_without_best(tmp_path):
    folder = copy_fixture("seed004_grpo", tmp_path)
    rewrite_log(folder, lambda log: log.pop("best_checkpoint"))
    history = read(folder)
    assert history.best == {}
    assert_history(history, expected_from_training_log(folder))


def copy_rollouts(folder):
    """The rollout files (data and meta, no metrics files) of the project's sample runs."""
    sample = PROJECT / "rollout_samples/grpo_tiny_example"
    files = [*sample.glob("rollout_data*.jsonl"), *sample.glob("rollout_meta*.json")]
    assert files
    for path in files:
        shutil.copy(path, folder / path.name)


def test_folder_with_rollouts_and_training_log(tmp_path):
    """A run folder as the board shows it: rollout files and training_log.json; the rollout files are no history."""
    folder = copy_fixture("seed004_grpo", tmp_path)
    copy_rollouts(folder)
    assert_history(read(folder), expected_from_training_log(FIXTURES / "seed004_grpo"))


def test_folder_with_rollouts_only(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    copy_rollouts(folder)
    history = read(folder)
    assert history.sources == []
    assert_frame(history.train, empty_frame())
    assert_frame(history.eval, empty_frame())
    assert history.config == {} and history.best == {}
    assert [row for row in problem_rows(history) if row[2] != "note"] == []


def test_empty_folder(tmp_path):
    history = read(tmp_path)
    assert history.sources == []
    assert_frame(history.train, empty_frame())
    assert_frame(history.eval, empty_frame())
    assert history.config == {} and history.best == {}
    assert problem_rows(history) == []


# ---------------------------------------------------------------- Hugging Face Trainer's trainer_state.json


def test_hf_sft_newest_checkpoint():
    folder = FIXTURES / "hf_sft"
    history = read(folder)
    assert_history(history, expected_from_trainer_state(folder, "checkpoint-30/trainer_state.json"), state_config=True)
    assert history.sources == ["checkpoint-30/trainer_state.json"]
    assert list(history.train.columns) == ["step", "epoch", "grad_norm", "learning_rate", "loss"]
    assert list(history.eval.columns[:3]) == ["step", "epoch", "eval_loss"]
    assert list(history.train["step"]) == list(range(2, 31, 2)) and list(history.eval["step"]) == [5, 10, 15, 20, 25, 30]
    # the best checkpoint is the one of step 20, not the last
    assert history.best == {"step": 20, "path": "runs/sft_tiny/checkpoint-20", "metrics": {"eval_loss": 2.449167490005493}}
    for key in ("global_step", "max_steps", "logging_steps", "eval_steps", "save_steps", "num_train_epochs", "train_batch_size", "best_global_step"):
        assert key in history.config
    assert history.config["global_step"] == 30 and "log_history" not in history.config


def test_hf_any_eval_key_makes_an_eval_entry(tmp_path):
    """An evaluation that logged no eval_loss (compute_metrics only) is still an eval entry."""
    folder = copy_fixture("hf_sft", tmp_path)

    def add_accuracy(state):
        at = next(i for i, e in enumerate(state["log_history"]) if e["step"] == 30 and "eval_loss" in e)
        state["log_history"].insert(at + 1, {"epoch": state["epoch"], "eval_accuracy": 0.375, "step": 30})

    rewrite_state(folder / "checkpoint-30/trainer_state.json", add_accuracy)
    history = read(folder)
    assert_history(history, expected_from_trainer_state(folder, "checkpoint-30/trainer_state.json"), state_config=True)
    assert history.eval.set_index("step").loc[30, "eval_accuracy"] == 0.375
    assert "eval_accuracy" not in history.train.columns


def test_hf_newest_checkpoint_is_the_highest_numbered_folder(tmp_path):
    folder = copy_fixture("hf_sft", tmp_path)
    (folder / "checkpoint-20").rename(folder / "checkpoint-99")  # the Trainer names a checkpoint by its step
    history = read(folder)
    assert history.sources == ["checkpoint-99/trainer_state.json"]
    assert_history(history, expected_from_trainer_state(folder, "checkpoint-99/trainer_state.json"), state_config=True)


def test_hf_stale_folder_state_loses_to_newer_checkpoint(tmp_path):
    folder = copy_fixture("hf_sft", tmp_path)
    shutil.copy(folder / "checkpoint-20/trainer_state.json", folder / "trainer_state.json")  # global_step 20
    history = read(folder)
    assert history.sources == ["checkpoint-30/trainer_state.json"]
    assert_history(history, expected_from_trainer_state(folder, "checkpoint-30/trainer_state.json"), state_config=True)


def test_hf_older_checkpoint_alone(tmp_path):
    folder = copy_fixture("hf_sft", tmp_path)
    shutil.rmtree(folder / "checkpoint-30")
    history = read(folder)
    assert_history(history, expected_from_trainer_state(folder, "checkpoint-20/trainer_state.json"), state_config=True)
    assert list(history.eval["step"]) == [5, 10, 15, 20]


def test_hf_folder_own_state_wins_a_tie():
    """hf_sft_saved: trainer.save_state()'s trainer_state.json (with the run's summary entry) and checkpoint-30's, both
    at global_step 30; the summary entry (train_runtime, train_loss, ...) merges into the train row of step 30."""
    folder = FIXTURES / "hf_sft_saved"
    history = read(folder)
    assert_history(history, expected_from_trainer_state(folder, "trainer_state.json"), state_config=True)
    assert history.sources == ["trainer_state.json"]
    assert list(history.train["step"]) == list(range(2, 31, 2))
    summary = json.loads((folder / "trainer_state.json").read_text())["log_history"][-1]
    last = history.train.iloc[-1]
    assert last["step"] == 30 and last["train_loss"] == summary["train_loss"] and last["train_runtime"] == summary["train_runtime"]
    assert not math.isnan(last["loss"])  # the step's own train entry is still there
    assert history.train["train_loss"].isna().sum() == len(history.train) - 1


def test_hf_dpo():
    folder = FIXTURES / "hf_dpo"
    history = read(folder)
    assert_history(history, expected_from_trainer_state(folder, "checkpoint-30/trainer_state.json"), state_config=True)
    for column in ("rewards/chosen", "rewards/margins", "logps/chosen", "logps/rejected"):
        assert column in history.train.columns and column not in history.eval.columns
    for column in ("eval_rewards/accuracies", "eval_rewards/margins", "eval_loss"):
        assert column in history.eval.columns and column not in history.train.columns
    assert history.best["metrics"] == {"eval_rewards/margins": 2.201248526573181}


def rewrite_state(path, change):
    state = json.loads(path.read_text())
    change(state)
    path.write_text(json.dumps(state, indent=2))


def test_hf_best_step_from_path_without_best_global_step(tmp_path):
    folder = copy_fixture("hf_sft", tmp_path)
    rewrite_state(folder / "checkpoint-30/trainer_state.json", lambda state: state.pop("best_global_step"))
    history = read(folder)
    assert_history(history, expected_from_trainer_state(folder, "checkpoint-30/trainer_state.json"), state_config=True)
    assert history.best["step"] == 20


def test_hf_without_best(tmp_path):
    folder = copy_fixture("hf_sft", tmp_path)

    def no_best(state):
        for key in ("best_global_step", "best_metric", "best_model_checkpoint"):
            state.pop(key)

    rewrite_state(folder / "checkpoint-30/trainer_state.json", no_best)
    history = read(folder)
    assert history.best == {}
    assert_history(history, expected_from_trainer_state(folder, "checkpoint-30/trainer_state.json"), state_config=True)


def test_hf_best_metric_equal_to_no_eval_value(tmp_path):
    folder = copy_fixture("hf_sft", tmp_path)
    rewrite_state(folder / "checkpoint-30/trainer_state.json", lambda state: state.update(best_metric=2.5))
    history = read(folder)
    assert history.best == {"step": 20, "path": "runs/sft_tiny/checkpoint-20", "metrics": {"best_metric": 2.5}}


def test_malformed_newest_checkpoint_falls_back_to_older():
    folder = FIXTURES / "broken_checkpoint"
    text = (folder / "checkpoint-30/trainer_state.json").read_text()
    with pytest.raises(json.JSONDecodeError) as error:
        json.loads(text)
    expected = expected_from_trainer_state(folder, "checkpoint-20/trainer_state.json")
    expected["problems"].append(("checkpoint-30/trainer_state.json", 0, "skipped", "JSON"))
    history = read(folder)
    assert_history(history, expected, state_config=True)
    assert_reason_says_where(history, "checkpoint-30/trainer_state.json", error.value)


def test_training_args_bin_is_never_unpickled():
    MARKER.unlink(missing_ok=True)
    folder = FIXTURES / "malicious_pickle"
    history = read(folder)
    assert not MARKER.exists(), "read_history unpickled training_args.bin"
    expected = expected_from_trainer_state(folder, "checkpoint-20/trainer_state.json")
    assert_history(history, expected, state_config=True)


def test_malicious_fixture_creates_the_marker_when_unpickled():
    """The fixture the test above relies on really is one: unpickling it (in another process) creates the marker."""
    MARKER.unlink(missing_ok=True)
    try:
        code = "import pickle, sys; pickle.loads(open(sys.argv[1], 'rb').read())"
        subprocess.run([sys.executable, "-c", code, str(FIXTURES / "malicious_pickle/training_args.bin")], check=True)
        assert MARKER.exists()
    finally:
        MARKER.unlink(missing_ok=True)


# ---------------------------------------------------------------- broken training_log.json


def assert_reason_says_where(history, file, error):
    reasons = [row[3] for row in problem_rows(history) if row[0] == file]
    assert len(reasons) == 1
    assert "json" in reasons[0].lower()
    assert f"line {error.lineno}" in reasons[0] or str(error.pos) in reasons[0], (reasons[0], error.lineno, error.pos)


def test_truncated_training_log():
    folder = FIXTURES / "broken_truncated"
    with pytest.raises(json.JSONDecodeError) as error:
        json.loads((folder / "training_log.json").read_text())
    history = read(folder)
    assert history.sources == []
    assert_frame(history.train, empty_frame())
    assert_frame(history.eval, empty_frame())
    assert history.config == {} and history.best == {}
    assert_problems(history, [("training_log.json", 0, "skipped", "JSON")])
    assert_reason_says_where(history, "training_log.json", error.value)


def test_truncated_training_log_falls_back_to_trainer_state(tmp_path):
    folder = copy_fixture("broken_truncated", tmp_path)
    for number in (20, 30):
        shutil.copytree(FIXTURES / f"hf_sft/checkpoint-{number}", folder / f"checkpoint-{number}")
    expected = expected_from_trainer_state(folder, "checkpoint-30/trainer_state.json")
    expected["problems"].append(("training_log.json", 0, "skipped", "JSON"))
    assert_history(read(folder), expected, state_config=True)


def test_training_log_completed_after_being_half_written(tmp_path):
    folder = copy_fixture("broken_truncated", tmp_path)
    assert read(folder).train.empty
    shutil.copy(FIXTURES / "seed004_grpo/training_log.json", folder / "training_log.json")
    assert_history(read(folder), expected_from_training_log(FIXTURES / "seed004_grpo"))


def test_nan_and_infinity_are_missing_with_a_note():
    folder = FIXTURES / "broken_nonfinite"
    expected = expected_from_training_log(folder)
    assert sorted(row[3] for row in expected["problems"]) == ["kl", "loss", "val_bbox"]  # the fixture's three tokens
    history = read(folder)
    assert_history(history, expected)
    assert np.isnan(history.train.loc[history.train["step"] == 30, "loss"].iloc[0])
    assert np.isnan(history.train.loc[history.train["step"] == 50, "kl"].iloc[0])
    assert np.isnan(history.eval.loc[history.eval["step"] == 100, "val_bbox"].iloc[0])
    assert history.train["loss"].notna().sum() == len(history.train) - 1
    # a string, a list and a dict (step 60) and a bool (step 70) are no columns, and no problem
    for key in ("note", "reward_per_function", "timing", "clipped"):
        assert key not in history.train.columns
    assert all(row[2] == "note" for row in problem_rows(history))


def test_entries_without_a_usable_step_are_skipped():
    folder = FIXTURES / "broken_steps"
    expected = expected_from_training_log(folder)
    # the fixture's broken entries: in train_history no step, "forty", null, 65.5, a string and a list; in
    # val_history no step and a number
    assert Counter(row[:3] for row in expected["problems"]) == {("training_log.json", 0, "skipped"): 8}
    history = read(folder)
    assert_history(history, expected)
    assert list(history.train["step"]) == [10, 30, 60, 80, 90, 100]  # 60.0 is step 60
    assert list(history.eval["step"]) == [50, 100, 150]
    assert "global_step" not in history.eval.columns


def test_resumed_run_drops_the_steps_logged_again():
    folder = FIXTURES / "broken_resume"
    log = json.loads((folder / "training_log.json").read_text())
    steps = [e["step"] for e in log["train_history"]]
    resumed_at = next(i for i in range(1, len(steps)) if steps[i] < steps[i - 1])
    assert steps[:resumed_at] == [10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 100] and steps[resumed_at] == 60
    history = read(folder)
    assert_history(history, expected_from_training_log(folder))
    train = history.train.set_index("step")
    assert list(train.index) == list(range(10, 130, 10))  # 95, logged only before the resume, is gone
    first = {e["step"]: e for e in log["train_history"][:resumed_at]}
    again = {}
    for e in log["train_history"][resumed_at:]:
        again.setdefault(e["step"], {}).update(e)
    for step in range(10, 60, 10):
        assert train.loc[step, "reward"] == first[step]["reward"]
    for step in range(60, 130, 10):  # the resumed run's values, not the first run's
        assert train.loc[step, "reward"] == again[step]["reward"] and train.loc[step, "loss"] == again[step]["loss"]
        assert train.loc[step, "reward"] != first.get(step, {}).get("reward")
    # step 90 logged twice in a row: merged, the later loss stands, grad_norm only there, kl from the first record
    nineties = [e for e in log["train_history"][resumed_at:] if e["step"] == 90]
    assert train.loc[90, "loss"] == nineties[1]["loss"] != nineties[0]["loss"]
    assert train.loc[90, "grad_norm"] == 0.8125 and train.loc[90, "kl"] == nineties[0]["kl"]
    assert train["grad_norm"].notna().sum() == 1
    evals = history.eval.set_index("step")
    assert list(evals.index) == [50, 100]
    assert evals.loc[50, "val_reward"] == 2.0071 and evals.loc[100, "val_reward"] == 2.2634
    assert evals.loc[100, "val_format"] == log["val_history"][3]["val_format"]
    assert history.best["metrics"] == {"val_reward": 2.2634}


def test_a_resume_in_trainer_state_drops_the_abandoned_run_s_evaluations_too(tmp_path):
    """A Trainer resumed from checkpoint-2 logs steps 3 and 4 again: the abandoned run's evaluations at 3 and 4 go with
    its train entries (they kept showing beside the resumed run's), and the load report counts both."""
    entries = [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.9}, {"step": 3, "loss": 0.8}, {"step": 3, "eval_loss": 0.85}, {"step": 4, "loss": 0.7},
               {"step": 4, "eval_loss": 0.75}, {"step": 3, "loss": 0.6}, {"step": 4, "loss": 0.5}, {"step": 5, "loss": 0.4}, {"step": 5, "eval_loss": 0.45}]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": entries, "global_step": 5}))
    history = read(tmp_path)
    assert history.train.set_index("step")["loss"].to_dict() == {1: 1.0, 2: 0.9, 3: 0.6, 4: 0.5, 5: 0.4}
    assert history.eval.set_index("step")["eval_loss"].to_dict() == {5: 0.45}
    assert history.problems["reason"].tolist() == ["log_history[6]: step 3 after later steps: a resume; the 2 train and 2 eval step(s) logged before it from step 3 on are replaced"]


def test_the_best_checkpoint_s_metric_is_every_evaluation_metric_equal_to_it_at_its_step(tmp_path):
    """trainer_state.json gives best_metric without its name: the evaluation metrics equal to it at the best step name
    it, all of them where several are (it was the first, a share of groups that was 1.0 beside the reward of 1.0)."""
    entries = [{"step": 2, "loss": 0.5}, {"step": 2, "eval_frac_reward_zero_std": 1.0, "eval_reward": 1.0, "eval_loss": 0.3},
               {"step": 4, "loss": 0.4}, {"step": 4, "eval_frac_reward_zero_std": 0.5, "eval_reward": 0.8, "eval_loss": 0.2}]
    state = {"log_history": entries, "best_model_checkpoint": "out/checkpoint-2", "best_metric": 1.0, "best_global_step": 2}
    (tmp_path / "trainer_state.json").write_text(json.dumps(state))
    assert read(tmp_path).best == {"step": 2, "path": "out/checkpoint-2", "metrics": {"eval_frac_reward_zero_std or eval_reward": 1.0}}
    (tmp_path / "trainer_state.json").write_text(json.dumps(state | {"best_metric": 0.3}))
    assert read(tmp_path).best["metrics"] == {"eval_loss": 0.3}


def test_an_evaluation_below_an_earlier_one_is_no_resume(tmp_path):
    """trainer.evaluate() before a resumed trainer.train() logs at step 0: kept at its step; the train entries stay until
    the trainer's step goes back (it dropped every train entry from 0 on)."""
    entries = [{"step": step, "loss": 1.0 / step} for step in (10, 20, 30)] + [{"step": 30, "eval_loss": 0.5}, {"step": 0, "eval_loss": 0.9}]
    entries += [{"step": 20, "loss": 0.25}, {"step": 30, "loss": 0.2}]  # the resume, from checkpoint-10
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": entries}))
    history = read(tmp_path)
    assert history.train.set_index("step")["loss"].to_dict() == {10: 0.1, 20: 0.25, 30: 0.2}
    assert history.eval.set_index("step")["eval_loss"].to_dict() == {0: 0.9}  # the abandoned run's at 30 replaced
    assert [reason.split(": ", 1)[1] for reason in history.problems["reason"]] == ["step 20 after later steps: a resume; the 2 train and 1 eval step(s) logged before it from step 20 on are replaced"]


# A history's entries against the rule as written: a step lower than the largest seen drops every row from it on, and
# entries of one step merge key by key; over random logs of resumes, repeats and steps logged back and forth. And a log
# of 200,000 entries, stepping back one each time, in time linear in it (each entry looked at every step seen: 60 s
# for a trainer_state.json of 80,000 entries).
@pytest.mark.parametrize("seed", range(20))
def test_history_entries_follow_the_resume_rule(seed):
    rng = np.random.default_rng(seed)
    steps = np.cumsum(rng.choice([-30, -1, 0, 1, 1, 2, 5], size=300)) + 40
    expected, series = {}, HistorySeries()
    for index, step in enumerate(steps.tolist()):
        numbers = {f"m{index % 3}": float(index)}
        if expected and step < max(expected):
            expected = {seen: row for seen, row in expected.items() if seen < step}
        expected.setdefault(step, {}).update(numbers)
        series.add(step, numbers)
    assert series.rows == expected and list(series.rows) == sorted(expected)
    frame = series.frame()
    assert frame["step"].tolist() == sorted(expected)


def test_a_long_history_stepping_back_is_read_in_linear_time():
    series = HistorySeries()
    start = time.perf_counter()
    for index in range(200_000):
        series.add(100_000 + index // 2 - index % 2, {"loss": float(index)})  # 100000, 99999, 100001, 100000, ...
    assert time.perf_counter() - start < 5  # 0.2 s here
    assert list(series.rows) == list(range(99_999, 199_999))  # each step back drops the step before it


# ---------------------------------------------------------------- the logger's rollout_metrics_<launch>.jsonl


def test_metrics_files():
    folder = FIXTURES / "metrics_jsonl"
    expected = expected_from_metrics_files(folder)
    a, b = expected["sources"]
    assert sorted(row[:3] for row in expected["problems"]) == [
        (a, 9, "skipped"), (a, 10, "skipped"), (a, 11, "skipped"), (a, 13, "note"), (b, 2, "note"), (b, 16, "incomplete"),
    ]
    history = read(folder)
    assert_history(history, expected)
    # the resume is counted: launch B's first trained step 11 replaces A's train steps 11, 12 and its eval of step 12
    resume = history.problems[(history.problems["file"] == b) & (history.problems["line"] == 2)]["reason"].tolist()
    assert resume == ["this launch resumes at step 11: 2 train and 1 eval step(s) earlier launches logged from step 11 on are replaced by its own"]
    assert history.sources == ["rollout_metrics_20261122T185902Z.jsonl", "rollout_metrics_20261123T091500Z.jsonl"]
    train = history.train.set_index("step")
    assert list(train.index) == [1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
    assert train.loc[3, "kl"] == 0.0031 and train.loc[3, "grad_norm"] == 0.875 and train.loc[3, "loss"] == 0.5623
    lines_b = (folder / b).read_text().splitlines()
    assert train.loc[11, "loss"] == json.loads(lines_b[1])["loss"]  # the resumed launch's step 11
    # the resumed launch evaluated at step 10 first: the first launch's eval of step 12 is dropped
    assert list(history.eval["step"]) == [4, 8, 10, 15, 20]
    assert history.eval.set_index("step").loc[10, "eval_reward"] == 0.79
    for column in ("path", "seconds", "kind"):  # checkpoint records are neither train nor eval
        assert column not in history.train.columns and column not in history.eval.columns


# One launch's file never resumes (a resume starts a new file): steps 1, 2, 3, 10, 4, 5 keep step 10's entry (it
# was silently dropped as a resume), each line below an earlier step says so in the load report.
def test_a_step_back_within_one_launch_is_kept_with_a_note(tmp_path):
    name = "rollout_metrics_20260101T000000Z.jsonl"
    entries = [(1, 0.5), (2, 0.4), (3, 0.3), (10, 9.9), (4, 0.2), (5, 0.1)]
    (tmp_path / name).write_text("".join(json.dumps({"step": step, "kind": "train", "loss": loss}) + "\n" for step, loss in entries))
    history = read(tmp_path)
    assert_history(history, expected_from_metrics_files(tmp_path))
    assert history.train.to_dict("list") == {"step": [1, 2, 3, 4, 5, 10], "loss": [0.5, 0.4, 0.3, 0.2, 0.1, 9.9]}
    assert history.problems.values.tolist() == [
        [name, 5, "note", "step 4 after step 10 in the same launch: kept at its step, merged with what that step logged before (a resume starts a new file)"],
        [name, 6, "note", "step 5 after step 10 in the same launch: kept at its step, merged with what that step logged before (a resume starts a new file)"],
    ]
    assert history.skipped == 0


# A number written as text is that number; a boolean, other text, a list and null (the logger's NaN) are left out,
# each with a note naming its key, as NaN is.
def test_metrics_file_values_written_as_text_are_numbers_and_what_is_left_out_is_said(tmp_path):
    name = "rollout_metrics_20260101T000000Z.jsonl"
    lines = [
        {"step": 1, "kind": "train", "loss": 0.5, "reward": "0.7", "lr": True, "steps_done": " 12 "},
        {"step": 2, "kind": "train", "loss": None, "reward": 0.8, "note": "warm-up", "per_func": [0.1, 0.2]},
        {"step": 3, "kind": "train", "loss": None, "reward": 0.9},  # nulls of a key: one note, from its first line
    ]
    (tmp_path / name).write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"step": 4, "kind": "train", "loss": NaN, "reward": "1e400"}\n')
    history = read(tmp_path)
    assert_history(history, expected_from_metrics_files(tmp_path))
    assert history.train["reward"].tolist()[:3] == [0.7, 0.8, 0.9] and history.train["steps_done"].tolist()[0] == 12.0
    assert history.problems.values.tolist() == [
        [name, 1, "note", "lr is a boolean, not a number: left out"],
        [name, 2, "note", "note is a string, not a number: left out"],
        [name, 2, "note", "per_func is an array, not a number: left out"],
        [name, 4, "note", "loss is nan: left out"],
        [name, 4, "note", "reward is inf: left out"],
        [name, 2, "note", "loss is null (NaN or an infinity, as the logger writes them) at 2 line(s), from this one: left out"],
    ]


# A log of many entries each with a problem (a NaN loss, a line that is not JSON) made a load report row each: a file
# lists its first PROBLEMS_LISTED, after a note counting the rest, and the history counts every entry skipped (the
# caption's count).
def test_a_history_lists_a_files_first_problems_and_counts_every_skipped_entry(tmp_path, monkeypatch):
    monkeypatch.setattr(rl_board.reading.history, "PROBLEMS_LISTED", 10)
    lines = [json.dumps({"step": step, "loss": float("nan") if step % 2 else 0.5}) for step in range(1, 41)] + ["not JSON"] * 15
    (tmp_path / "rollout_metrics_20261122T185902Z.jsonl").write_text("\n".join(lines) + "\n")
    history = read_history(tmp_path)
    assert history.skipped == 15 and len(history.train) == 40
    rows = history.problems.values.tolist()
    assert rows[0] == ["rollout_metrics_20261122T185902Z.jsonl", 0, "note", "25 more problems of its entries are not listed here, past the first 10"]
    assert [kind for _, _, kind, _ in rows[1:]] == ["note"] * 10 and [line for _, line, _, _ in rows[1:]] == list(range(1, 21, 2))


def test_metrics_last_line_read_once_finished(tmp_path):
    folder = copy_fixture("metrics_jsonl", tmp_path)
    name = "rollout_metrics_20261123T091500Z.jsonl"
    with open(folder / name, "a") as file:
        file.write(', "reward": 1.4, "kl": 0.021, "learning_rate": 1e-05}\n')
    expected = expected_from_metrics_files(folder)
    assert all(row[2] != "incomplete" for row in expected["problems"])
    history = read(folder)
    assert_history(history, expected)
    assert history.train["step"].iloc[-1] == 21 and history.train["loss"].iloc[-1] == 0.18


def test_metrics_files_win_over_training_log_and_trainer_state(tmp_path):
    folder = copy_fixture("metrics_jsonl", tmp_path)
    shutil.copy(FIXTURES / "seed004_grpo/training_log.json", folder)
    shutil.copytree(FIXTURES / "hf_sft/checkpoint-30", folder / "checkpoint-30")
    assert_history(read(folder), expected_from_metrics_files(FIXTURES / "metrics_jsonl"))


def test_training_log_wins_over_trainer_state(tmp_path):
    folder = copy_fixture("seed004_dpo", tmp_path)
    shutil.copytree(FIXTURES / "hf_sft/checkpoint-30", folder / "checkpoint-30")
    shutil.copy(FIXTURES / "hf_sft_saved/trainer_state.json", folder)
    assert_history(read(folder), expected_from_training_log(FIXTURES / "seed004_dpo"))


# Numbers no float or int64 holds: a step beyond int64 is a bad step, an integer best_metric or epoch beyond a float's
# range is no metric; neither stops the reader.
def test_numbers_too_big_for_a_step_or_a_float(tmp_path):
    log = {
        "train_history": [{"step": 10, "loss": 1.0}, {"step": 2**63, "loss": 2.0}, {"step": 1e30, "loss": 3.0}, {"step": 20, "loss": 10**400}],
        "val_history": [],
        "best_checkpoint": {"step": 10, "epoch": 10**400, "val_reward": 10**400, "path": "out/best"},
    }
    (tmp_path / "training_log.json").write_text(json.dumps(log))
    history = read(tmp_path)
    assert history.train["step"].tolist() == [10, 20] and history.train["loss"].tolist()[0] == 1.0 and np.isnan(history.train["loss"].tolist()[1])
    assert history.best == {"step": 10, "path": "out/best", "metrics": {}}
    assert history.problems["kind"].tolist() == ["skipped", "skipped", "note", "note", "note"]  # loss; epoch, val_reward
    state = {"global_step": 10, "log_history": [{"step": 10, "eval_loss": 0.5}], "best_model_checkpoint": "out/checkpoint-10", "best_metric": 10**400}
    (tmp_path / "training_log.json").unlink()
    (tmp_path / "trainer_state.json").write_text(json.dumps(state))
    assert read(tmp_path).best == {"step": 10, "path": "out/checkpoint-10", "metrics": {}}


# A resumed launch replaces what earlier launches logged from its first trained step on, evaluations too: launch A
# evaluated at step 6 and 8, launch B resumed from step 5's checkpoint and evaluated only at step 8.
def test_a_resumed_launch_replaces_earlier_evaluations_past_its_start(tmp_path):
    launch_a = [{"step": step, "kind": "train", "loss": 1.0} for step in range(1, 9)] + [
        {"step": 6, "kind": "eval", "eval_loss": 0.6}, {"step": 8, "kind": "eval", "eval_loss": 0.8}]
    launch_b = [{"step": step, "kind": "train", "loss": 2.0} for step in range(6, 10)] + [{"step": 8, "kind": "eval", "eval_loss": 0.5}]
    for name, entries in (("rollout_metrics_A.jsonl", launch_a), ("rollout_metrics_B.jsonl", launch_b)):
        (tmp_path / name).write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    history = read(tmp_path)
    assert history.train["step"].tolist() == list(range(1, 10))
    assert history.train["loss"].tolist() == [1.0] * 5 + [2.0] * 4
    assert history.eval.to_dict("list") == {"step": [8], "eval_loss": [0.5]}  # A's step-6 evaluation is of the dropped branch
    assert history.problems.values.tolist() == [  # what was replaced is counted
        ["rollout_metrics_B.jsonl", 1, "note", "this launch resumes at step 6: 3 train and 2 eval step(s) earlier launches logged from step 6 on are replaced by its own"],
    ]


# Trainer.evaluate(metric_key_prefix="test") logs test_* keys: an evaluation too; a "kind" that is no kind is no metric.
def test_evaluations_under_another_prefix_and_an_odd_kind(tmp_path):
    state = {"global_step": 4, "log_history": [{"step": 4, "loss": 1.0}, {"step": 4, "test_loss": 0.7, "test_runtime": 1.5}]}
    (tmp_path / "trainer_state.json").write_text(json.dumps(state))
    history = read(tmp_path)
    assert history.train.to_dict("list") == {"step": [4], "loss": [1.0]}
    assert history.eval.to_dict("list") == {"step": [4], "test_loss": [0.7], "test_runtime": [1.5]}
    (tmp_path / "rollout_metrics_A.jsonl").write_text(json.dumps({"step": 1, "kind": 5, "loss": 1.0}) + "\n")
    assert read(tmp_path).train.to_dict("list") == {"step": [1], "loss": [1.0]}


def test_metadata_of_types_the_logger_does_not_write_is_left_out_with_a_note_and_a_broken_file_passed_over(tmp_path):
    run_dir = tmp_path / "run"
    write_lines(run_dir / "rollout_data_rank_0_1.jsonl", [sample(1, logprobs=[-1.0], response_tokens=["a"])])
    written = {
        "model_name": "m", "beta": "anything shown", "loss": [1], "importance_sampling": "x", "num_generations": True,
        "sampler": {"engine": 3, "temperature": 0.7}, "trainer_config": {"seed": 1},
    }
    (run_dir / "rollout_meta_1.json").write_text(json.dumps(written))
    (run_dir / "rollout_meta_2.json").write_text('{"model_name": "cut')  # the newest, half written
    run = rl_board.open_run(run_dir)
    assert run.snapshot.meta == {"model_name": "m", "beta": "anything shown", "sampler": {"temperature": 0.7}, "trainer_config": {"seed": 1}}
    notes = run.problems[run.problems["kind"] == "note"]["reason"].tolist()
    assert notes[0].startswith("rollout_meta_2.json could not be read as JSON (Unterminated string") and notes[0].endswith("passed over")
    assert notes[1:] == [
        f"rollout_meta_1.json: {key} of type {kind} is not what the logger writes: left out"
        for key, kind in (("loss", "list"), ("importance_sampling", "str"), ("num_generations", "bool"))
    ] + ["rollout_meta_1.json sampler: engine of type int is not what the logger writes: left out"]
    assert run.update_by_step().empty  # reads the loss section (a list stopped it)
