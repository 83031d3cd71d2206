"""Rollout lines and run folders written for a test, opened as the board opens them."""

import json
from pathlib import Path

import rl_logging_board as board
from rl_board.reading.store import RunStore


def sample(step, reward=1.0, **extra):
    return {"prompt": f"p{step}", "response": f"r{step}", "reward": reward, "step": step, **extra}


def write_lines(path: Path, lines) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as file:
        for line in lines:
            file.write(line if isinstance(line, bytes) else json.dumps(line).encode() + b"\n")
    return path


def load(run_dir, max_samples=10240, **kwargs):
    return RunStore(str(run_dir)).load(max_samples, **kwargs)


def sample_tokens(run, step, index):
    row = run.step_rows(step).iloc[index]
    return board.load_sample_tokens(row["index_id"], row["path"], int(row["offset"]), int(row["length"]), int(row["step"]))


def jsonl_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]
