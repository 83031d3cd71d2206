"""`python -m rl_board index ROOT` on a generated root (RUNS runs of bench/generate_run.py, GRPO keys, 4 rank files
each): the whole command's seconds with the worker pool and with `--dask local` (a LocalCluster of as many worker
processes, its start included), each into an empty cache folder, then again into the cache it built (nothing to read).
Each in a fresh process. Prints a markdown table.

    python bench/index_root_bench.py [--runs 8] [--steps 20] [--samples 128] [--tokens 300]
"""

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from bench.generate_run import write_run  # noqa: E402

FOLDER = PROJECT / "bench" / "runs" / "index_root"


def write_root(runs: int, steps: int, samples: int, tokens: int) -> Path:
    root = FOLDER / f"root_{runs}x{steps}x{samples}x{tokens}"
    if not (root / f"run_{runs - 1}" / "rollout_data_rank_3.jsonl").exists():
        shutil.rmtree(root, ignore_errors=True)
        for number in range(runs):
            write_run(root / f"run_{number}", steps=steps, samples=samples, tokens=tokens, ranks=4, seed=number, grpo=True)
    return root


# The command's wall time in a fresh process, and the lines its summary counts.
def timed_index(root: Path, cache: Path, *options: str) -> tuple[float, str]:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "rl_board", "index", str(root), "--cache", str(cache), *options], cwd=PROJECT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if result.returncode:
        raise SystemExit(result.stdout + result.stderr)
    total = next(line for line in result.stdout.splitlines() if line.startswith("total:"))
    return seconds, re.split(r"\s{2,}", total)[2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--samples", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=300)
    arguments = parser.parse_args()
    root = write_root(arguments.runs, arguments.steps, arguments.samples, arguments.tokens)
    size = sum(path.stat().st_size for path in root.rglob("*.jsonl"))
    print(f"{arguments.runs} runs, {size / 1e6:.0f} MB of rank files ({root.name})\n")
    print("| workers | lines | empty cache (s) | cache built (s) |\n|---|---:|---:|---:|")
    for name, options in (("worker pool", ()), ("Dask LocalCluster", ("--dask", "local"))):
        cache = FOLDER / "cache"
        shutil.rmtree(cache, ignore_errors=True)
        first, lines = timed_index(root, cache, *options)
        again, _ = timed_index(root, cache, *options)
        print(f"| {name} | {lines} | {first:.1f} | {again:.1f} |")
    shutil.rmtree(FOLDER / "cache", ignore_errors=True)


if __name__ == "__main__":
    main()
