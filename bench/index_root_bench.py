"""`python -m rl_board index ROOT` on a generated root (RUNS runs of bench/generate_run.py, GRPO keys, 4 rank files
each): the whole command's seconds with the worker pool and with `--dask local` (a LocalCluster of as many worker
processes, its start included), each into an empty cache, then again into the cache it built (nothing to read); then
every run opened from that cache with rl_board.open_run. The cache is a folder, then a prefix of a bucket on a local
S3 server (moto, started here: a test dependency). Each in a fresh process. Prints a markdown table.

    python bench/index_root_bench.py [--runs 8] [--steps 20] [--samples 128] [--tokens 300]
"""

import argparse
import logging
import os
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
def timed_index(root: Path, cache: str, *options: str) -> tuple[float, str]:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "rl_board", "index", str(root), "--cache", cache, *options], cwd=PROJECT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if result.returncode:
        raise SystemExit(result.stdout + result.stderr)
    total = next(line for line in result.stdout.splitlines() if line.startswith("total:"))
    return seconds, re.split(r"\s{2,}", total)[2]


# Every run of the root opened with open_run from the cache, in a fresh process: the seconds the opening took.
def timed_open(root: Path, cache: str) -> float:
    script = (
        "import sys, time, rl_board\n"
        "started = time.perf_counter()\n"
        "runs = [rl_board.open_run(run) for run in rl_board.list_runs(sys.argv[1])]\n"
        "assert all(len(run.samples) for run in runs)\n"
        "print(time.perf_counter() - started)"
    )
    result = subprocess.run([sys.executable, "-c", script, str(root)], cwd=PROJECT, capture_output=True, text=True, env=dict(os.environ, RL_LOGGING_BOARD_CACHE=cache))
    if result.returncode:
        raise SystemExit(result.stdout + result.stderr)
    return float(result.stdout.split()[-1])


# The caches measured, each a name and how to make an empty one: a folder, and a bucket's prefix on a moto server that
# runs while the caller goes through its rows.
def caches():
    from tests.support.s3_server import FAKE_CREDENTIALS, STRAY_SETTINGS, environment, make_bucket, running_moto

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's server logs every request
    folder = FOLDER / "cache"
    yield "folder", lambda: shutil.rmtree(folder, ignore_errors=True) or str(folder)
    shutil.rmtree(folder, ignore_errors=True)
    with running_moto() as endpoint, environment({**FAKE_CREDENTIALS, "AWS_ENDPOINT_URL": endpoint, **dict.fromkeys(STRAY_SETTINGS)}):
        buckets = iter(range(1_000))
        yield "bucket prefix (moto)", lambda: f"s3://{make_bucket(endpoint, f'cache-{next(buckets)}')}/rl_board_cache"


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
    print("| cache | workers | lines | empty cache (s) | cache built (s) | every run opened from it (s) |\n|---|---|---:|---:|---:|---:|")
    for cache_kind, empty_cache in caches():
        for name, options in (("worker pool", ()), ("Dask LocalCluster", ("--dask", "local"))):
            cache = empty_cache()
            first, lines = timed_index(root, cache, *options)
            again, _ = timed_index(root, cache, *options)
            print(f"| {cache_kind} | {name} | {lines} | {first:.1f} | {again:.1f} | {timed_open(root, cache):.2f} |", flush=True)


if __name__ == "__main__":
    main()
