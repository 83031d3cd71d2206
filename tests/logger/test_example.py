"""The example run: a killed run leaves readable files, and the bundled runs have the logger's layout and keys."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest

from rl_board.reading.store import RunStore
from rollout_logger.metadata import SUMMARIES_SUFFIX
from tests.support import FIXTURES, PROJECT

SAMPLES = PROJECT / "rollout_samples"
BUNDLED = SAMPLES / "grpo_tiny_example"
# The same run (seed 0, 400 steps) at the default learning rate and at a third of it.
BUNDLED_RUNS = {"grpo_tiny_example": 3e-4, "grpo_tiny_example_lr1e-4": 1e-4}
TRL_OUTPUT = FIXTURES / "trl_output"


def test_killed_run_leaves_whole_lines(tmp_path):
    environment = {**os.environ, "SAVE_ROLLOUT_DATA": "true", "EXP_NAME": "killed"}
    command = [
        sys.executable,
        str(PROJECT / "examples" / "train_grpo_tiny.py"),
        "--output-dir",
        str(tmp_path),
        "--steps",
        "5000",
    ]
    process = subprocess.Popen(command, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_dir = tmp_path / "rollout_samples" / "killed"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and sum(path.read_bytes().count(b"\n") for path in run_dir.glob("rollout_data_*.jsonl")) < 60:
            assert process.poll() is None, "the example stopped before it was killed"
            time.sleep(0.2)
    finally:
        process.kill()
        process.wait()
    [path] = run_dir.glob("rollout_data_rank_0_*.jsonl")
    lines = path.read_bytes().split(b"\n")
    records = [json.loads(line) for line in lines[:-1]]  # every line but a cut last one is whole
    assert len(records) >= 50 and all(record["step"] >= 1 for record in records)
    # Its summaries file, maybe cut in a record, gives the numbers a parse of the same lines gives.
    assert path.with_name(path.name + SUMMARIES_SUFFIX).stat().st_size > 1000
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copyfile(path, plain / path.name)
    from_summaries, from_lines = (RunStore(str(folder)).load(1 << 30, parallel=False) for folder in (run_dir, plain))
    assert not from_summaries.problems["reason"].str.contains("summaries").any()
    columns = [column for column in from_lines.samples.columns if column not in ("path", "index_id", "texts_offset", "texts_length")]
    pd.testing.assert_frame_equal(from_summaries.samples[columns], from_lines.samples[columns], check_exact=True)


@pytest.mark.parametrize("name", BUNDLED_RUNS)
def test_bundled_example_run(name):
    run = SAMPLES / name
    if not run.is_dir():
        pytest.skip("no bundled example run")
    names = sorted(path.name for path in run.iterdir())
    [data] = [name for name in names if name.startswith("rollout_data_")]
    launch_id = re.fullmatch(r"rollout_data_rank_0_(\d{8}T\d{6}Z)\.jsonl", data).group(1)
    assert names == [data, f"rollout_meta_{launch_id}.json", f"rollout_metrics_{launch_id}.jsonl"]
    assert sum(path.stat().st_size for path in run.iterdir()) < 7_000_000
    meta = json.loads((run / f"rollout_meta_{launch_id}.json").read_text())
    assert meta["beta"] > 0 and meta["reward_funcs"] == ["sorted_digits", "same_digits"] and meta["seed"] == 0
    assert meta["learning_rate"] == meta["trainer_config"]["learning_rate"] == BUNDLED_RUNS[name]

    metrics = [json.loads(line) for line in (run / f"rollout_metrics_{launch_id}.jsonl").read_text().splitlines()]
    kinds = defaultdict(list)
    for line in metrics:
        kinds[line["kind"]].append(line["step"])
    assert kinds["train"] == list(range(1, 401)) + [400]  # every step, then the run's summary
    assert kinds["eval"] == kinds["checkpoint"] == list(range(50, 401, 50))
    assert all("kl" in line and "reward" in line for line in metrics[:-1] if line["kind"] == "train")
    eval_rewards = {line["step"]: line["eval_reward"] for line in metrics if line["kind"] == "eval"}
    best_step = max(eval_rewards, key=eval_rewards.get)  # the first of equals, as the trainer keeps it
    last_save = [line for line in metrics if line["kind"] == "checkpoint"][-1]
    assert meta["trainer_config"]["metric_for_best_model"] == "reward"
    assert last_save["best_metric"] == eval_rewards[best_step]
    assert last_save["best_model_checkpoint"].endswith(f"checkpoint-{best_step}")

    rewards = bundled_rewards(run / data)
    steps = sorted(rewards)
    assert steps == list(range(1, 401))


def bundled_rewards(path: Path) -> dict[int, list[float]]:
    """Step -> the rewards of its lines, whose per-token values all have one value per token."""
    rewards = defaultdict(list)
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        assert (
            len(record["logprobs"])
            == len(record["ref_logprobs"])
            == len(record["entropies"])
            == len(record["response_tokens"])
        )
        rewards[record["step"]].append(record["reward"])
    return rewards


@pytest.mark.skipif(not all((SAMPLES / name).is_dir() for name in BUNDLED_RUNS), reason="no bundled example runs")
def test_the_bundled_learning_rates_make_different_reward_curves():
    """At the default learning rate the reward visibly rises; at a third of it, from the same start, more slowly."""

    def first_and_last_tenth(name):
        [path] = (SAMPLES / name).glob("rollout_data_*.jsonl")
        rewards = bundled_rewards(path)
        means = [sum(rewards[step]) / len(rewards[step]) for step in sorted(rewards)]
        tenth = len(means) // 10
        return sum(means[:tenth]) / tenth, sum(means[-tenth:]) / tenth

    (default_first, default_last), (lower_first, lower_last) = map(first_and_last_tenth, BUNDLED_RUNS)
    assert default_last > default_first + 0.3
    assert abs(lower_first - default_first) < 0.05 and lower_last < default_last - 0.15


@pytest.mark.skipif(not BUNDLED.is_dir(), reason="no bundled example run")
def test_bundled_metrics_are_the_log_history_of_its_checkpoints():
    """tests/fixtures/trl_output holds the trainer_state.json of the bundled run's two last checkpoints (the best,
    step 300, and the last): their log history is the metrics file's, line for line."""
    [path] = BUNDLED.glob("rollout_metrics_*.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    events = [
        {key: value for key, value in line.items() if key != "kind"} for line in lines if line["kind"] != "checkpoint"
    ]
    for checkpoint in sorted(TRL_OUTPUT.iterdir()):
        state = json.loads((checkpoint / "trainer_state.json").read_text())
        step = int(checkpoint.name.removeprefix("checkpoint-"))
        assert state["global_step"] == step and state["log_history"] == [
            event for event in events[:-1] if event["step"] <= step  # all but the run's summary
        ]
        save = next(line for line in lines if line["kind"] == "checkpoint" and line["step"] == step)
        assert (save["best_model_checkpoint"], save["best_metric"]) == (
            state["best_model_checkpoint"],
            state["best_metric"],
        )
    assert sorted(path.name for path in TRL_OUTPUT.iterdir()) == ["checkpoint-300", "checkpoint-400"]


@pytest.mark.skipif(not BUNDLED.is_dir(), reason="no bundled example run")
def test_the_board_loads_the_bundled_example_with_no_bad_lines():
    import rl_logging_board as board
    from tests.support.runs import sample_tokens

    lines = sum(path.read_bytes().count(b"\n") for path in BUNDLED.glob("rollout_data_*.jsonl"))
    run = board.RunStore(str(BUNDLED)).load(10240)
    assert run.problems.empty, run.problems
    assert len(run.samples) == lines and run.report["bad lines"].sum() == 0
    assert run.meta["reward_funcs"] == ["sorted_digits", "same_digits"]
    step = run.steps[-1]
    assert not board.load_step_batch(board.lines_key(run.step_rows(step)), run.step_rows(step)).problems
    for index in range(len(run.step_rows(step))):
        tokens = sample_tokens(run, step, index)
        assert not tokens.notes and len(tokens.response_tokens) == len(tokens.logprobs) == len(tokens.entropies)


# The overhead measurement (docs/logger.md) wraps the callback's methods by name: one renamed broke it unnoticed.
def test_the_overhead_measurement_times_methods_the_callback_has(monkeypatch):
    monkeypatch.syspath_prepend(str(PROJECT / "examples"))
    import measure_logging_overhead

    from rollout_logger import RolloutLoggerCallback

    assert all(callable(getattr(RolloutLoggerCallback, name, None)) for name in measure_logging_overhead.TRAINING_THREAD_METHODS)
