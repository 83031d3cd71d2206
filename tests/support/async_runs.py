"""An asynchronous trainer's run written for a test: each line's policy_version (the step whose policy sampled it)
up to 3 steps before its step, a few lines without one; and the staleness per step recounted from the raw lines with
pandas (never by the board's code)."""

import json
from pathlib import Path

import numpy as np
import pandas as pd

from tests.support.runs import sample, write_lines


# Two ranks of steps 0..steps-1, `samples` lines each per step; returns the lines as written, rank 0's first.
def write_async_run(run_dir: Path, steps: int = 8, samples: int = 6, seed: int = 3) -> list[dict]:
    rng = np.random.default_rng(seed)
    lines = {rank: [] for rank in (0, 1)}
    for step in range(steps):
        for rank in lines:
            for index in range(samples):
                lag = int(rng.integers(0, 4))
                versioned = {"policy_version": max(step - lag, 0)} if (step + index) % 7 else {}
                lines[rank].append(sample(step, reward=float(index % 2), **versioned))
    for rank, written in lines.items():
        write_lines(run_dir / f"rollout_data_rank_{rank}_0.jsonl", written)
    return [json.loads(line) for rank in lines for line in (run_dir / f"rollout_data_rank_{rank}_0.jsonl").read_text().splitlines()]


# Each versioned line's step and staleness, step - policy_version.
def stalenesses(lines: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{"step": line["step"], "staleness": line["step"] - line["policy_version"]} for line in lines if "policy_version" in line])


# Per step: mean, max, the share above 0, and how many lines have a version.
def staleness_recount(lines: list[dict]) -> pd.DataFrame:
    grouped = stalenesses(lines).groupby("step")["staleness"]
    return pd.DataFrame({"mean": grouped.mean(), "max": grouped.max(), "stale": grouped.apply(lambda values: (values > 0).mean()), "samples": grouped.size()})
