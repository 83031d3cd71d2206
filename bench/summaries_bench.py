"""First open of a run whose rank files have the logger's summaries files (rl_board/reading/summaries.py) against the
same files without them: RunStore.load as the page calls it (Max Samples Each Step 128, the worker pool started
before the clock, as the page starts it while the user picks a run), in a fresh process each time, with an empty index
cache. The run is bench/generate_run.py's with the keys rollout_logger writes (--grpo), its summaries written a record
per step as the logger's writer writes one per batch; the run without summaries is the same files, hard-linked into
another folder. Median of REPEATS. Prints a markdown table.

    python bench/summaries_bench.py                  # medium (100 steps x 128 samples, ~550 MB)
    python bench/summaries_bench.py --sizes medium large
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from bench.generate_run import write_run  # noqa: E402

SIZES = {"medium": (100, 128, 500, 4), "large": (200, 256, 1000, 4)}  # steps, samples per step, mean tokens, rank files
REPEATS = 3
FOLDER = PROJECT / "bench" / "runs" / "summaries"
OPEN = """
import sys, time
sys.path.insert(0, {project!r})
from rl_board.reading import store, workers
if __name__ == "__main__":
    list(workers.run_tasks([(workers.ready, ())] * workers.WORKERS * 2, True))
    start = time.perf_counter()
    snapshot = store.RunStore({run!r}).load(128)
    print(time.perf_counter() - start, len(snapshot.samples), len(snapshot.problems))
"""


def runs(size: str) -> tuple[Path, Path]:
    with_summaries, without = FOLDER / size / "logger", FOLDER / size / "plain"
    if not (without / "rollout_data_rank_0.jsonl").exists():
        shutil.rmtree(FOLDER / size, ignore_errors=True)
        steps, samples, tokens, ranks = SIZES[size]
        start = time.perf_counter()
        paths = write_run(with_summaries, steps, samples, tokens, ranks, grpo=True, summaries=True)
        print(f"generated {size} in {time.perf_counter() - start:.0f} s", file=sys.stderr)
        without.mkdir(parents=True)
        for path in paths:
            os.link(path, without / path.name)
    return with_summaries, without


def opened(run: Path) -> tuple[float, int, int]:
    with tempfile.TemporaryDirectory() as cache:
        script = OPEN.format(project=str(PROJECT), run=str(run))
        result = subprocess.run([sys.executable, "-c", script], env={**os.environ, "RL_LOGGING_BOARD_CACHE": cache}, capture_output=True, text=True, check=True)
    seconds, samples, problems = result.stdout.split()[-3:]
    return float(seconds), int(samples), int(problems)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["medium"], choices=list(SIZES))
    options = parser.parse_args()
    print("| run | data (MB) | summaries (MB) | samples | first open, parsing the lines (s) | first open, from the summaries (s) |")
    print("|---|---|---|---|---|---|")
    for size in options.sizes:
        logger_run, plain_run = runs(size)
        data = sum(path.stat().st_size for path in plain_run.glob("*.jsonl")) / 1e6
        summaries = sum(path.stat().st_size for path in logger_run.glob("*.summaries")) / 1e6
        times = {}
        for name, run in (("plain", plain_run), ("logger", logger_run)):
            results = [opened(run) for _ in range(REPEATS)]
            assert all(problems == 0 for _, _, problems in results), f"{name}: the load report is not empty"
            times[name] = statistics.median(seconds for seconds, _, _ in results)
            samples = results[0][1]
        print(f"| {size} | {data:,.0f} | {summaries:.1f} | {samples:,} | {times['plain']:.2f} | {times['logger']:.3f} |")
