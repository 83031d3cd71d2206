"""The example run: a killed run leaves readable files, and the bundled output has the logger's layout and keys."""

import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest


PROJECT = Path(__file__).resolve().parents[1]
BUNDLED = PROJECT / "rollout_samples" / "grpo_tiny_example"


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
        while time.monotonic() < deadline and sum(path.stat().st_size for path in run_dir.glob("*.jsonl")) < 50_000:
            assert process.poll() is None, "the example stopped before it was killed"
            time.sleep(0.2)
    finally:
        process.kill()
        process.wait()
    [path] = run_dir.glob("rollout_data_rank_0_*.jsonl")
    lines = path.read_bytes().split(b"\n")
    records = [json.loads(line) for line in lines[:-1]]  # every line but a cut last one is whole
    assert len(records) >= 50 and all(record["step"] >= 1 for record in records)


@pytest.mark.skipif(not BUNDLED.is_dir(), reason="no bundled example run")
def test_bundled_example_run():
    names = sorted(path.name for path in BUNDLED.iterdir())
    [data] = [name for name in names if name.endswith(".jsonl")]
    launch_id = re.fullmatch(r"rollout_data_rank_0_(\d{8}T\d{6}Z)\.jsonl", data).group(1)
    assert names == [data, f"rollout_meta_{launch_id}.json"]
    assert (BUNDLED / data).stat().st_size < 7_000_000
    meta = json.loads((BUNDLED / f"rollout_meta_{launch_id}.json").read_text())
    assert meta["beta"] > 0 and meta["reward_funcs"] == ["sorted_digits", "same_digits"] and meta["seed"] == 0

    rewards = defaultdict(list)
    for line in (BUNDLED / data).read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        assert (
            len(record["logprobs"])
            == len(record["ref_logprobs"])
            == len(record["entropies"])
            == len(record["response_tokens"])
        )
        rewards[record["step"]].append(record["reward"])
    steps = sorted(rewards)
    assert steps == list(range(1, len(steps) + 1))
    tenth = len(steps) // 10

    def mean_reward(chosen):
        values = [reward for step in chosen for reward in rewards[step]]
        return sum(values) / len(values)

    assert mean_reward(steps[-tenth:]) > mean_reward(steps[:tenth]) + 0.2  # the reward visibly rises


@pytest.mark.skipif(not BUNDLED.is_dir(), reason="no bundled example run")
def test_the_board_loads_the_bundled_example_with_no_bad_lines():
    import rl_logging_board as board
    from tests.test_loading import sample_tokens

    lines = sum(path.read_bytes().count(b"\n") for path in BUNDLED.glob("*.jsonl"))
    run = board.RunStore(str(BUNDLED)).load(10240)
    assert run.problems.empty, run.problems
    assert len(run.samples) == lines and run.report["bad lines"].sum() == 0
    assert run.meta["reward_funcs"] == ["sorted_digits", "same_digits"]
    step = run.steps[-1]
    assert not board.load_step_batch(board.lines_key(run.step_rows(step)), run.step_rows(step)).problems
    for index in range(len(run.step_rows(step))):
        tokens = sample_tokens(run, step, index)
        assert not tokens.notes and len(tokens.response_tokens) == len(tokens.logprobs) == len(tokens.entropies)
