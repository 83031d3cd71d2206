"""A run of a file per step (verl's rollout_data_dir: 2,000 <step>.jsonl of 16 lines, written by verl's own
_dump_generations as tests/support/other_trainers.py copies it) against the same 32,000 lines in one file of the
board's format. Times rl_board.open_run in a fresh process each (the modules imported before the clock starts): the first open (index cache empty; verl's files are
converted too), and the reopen after a restart (index cache warm: the per-step files' indexes are one cache file).
Median of REPEATS reopens. Prints a markdown table.

    python bench/per_step_files_bench.py
"""

import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from tests.support.other_trainers import write_verl_dump  # noqa: E402

STEPS, LINES = 2000, 16
REPEATS = 3
FOLDER = PROJECT / "bench" / "runs" / "per_step_files"
OPEN = "import sys, time; sys.path.insert(0, {project!r}); import rl_board; open_run = rl_board.open_run; start = time.perf_counter(); run = open_run({run!r}); print(time.perf_counter() - start, len(run.samples))"


def write_runs():
    if (FOLDER / "verl" / f"{STEPS}.jsonl").exists():
        return
    shutil.rmtree(FOLDER, ignore_errors=True)
    for step in range(1, STEPS + 1):
        inputs = [f"user\nquestion {step}.{k}: add {k} and {step}\nassistant\n" for k in range(LINES)]
        outputs = [f"the sum is {k + step}" for k in range(LINES)]
        write_verl_dump(FOLDER / "verl", step, inputs, outputs, [str(k + step) for k in range(LINES)], [float(k % 2) for k in range(LINES)], {"acc": [bool(k % 2) for k in range(LINES)]})
    (FOLDER / "one_file").mkdir(parents=True)
    with open(FOLDER / "one_file" / "rollout_data_rank_0.jsonl", "w") as file:
        for step in range(1, STEPS + 1):
            for k in range(LINES):
                file.write(json.dumps({"prompt": f"user\nquestion {step}.{k}: add {k} and {step}\nassistant\n", "response": f"the sum is {k + step}", "reward": float(k % 2), "acc": bool(k % 2), "step": step}) + "\n")


def opened(run: Path, cache: Path) -> tuple[float, int]:
    result = subprocess.run([sys.executable, "-c", OPEN.format(project=str(PROJECT), run=str(run))], env={"RL_LOGGING_BOARD_CACHE": str(cache), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
                            capture_output=True, text=True, check=True)
    seconds, samples = result.stdout.split()[-2:]
    return float(seconds), int(samples)


if __name__ == "__main__":
    write_runs()
    print("| run | files | samples | first open (s) | reopen after a restart (s) |")
    print("|---|---|---|---|---|")
    for name, files in (("verl, a file per step", STEPS), ("the same lines in one file", 1)):
        cache = FOLDER / f"cache_{files}"
        shutil.rmtree(cache, ignore_errors=True)
        first, samples = opened(FOLDER / ("verl" if files > 1 else "one_file"), cache)
        again = statistics.median(opened(FOLDER / ("verl" if files > 1 else "one_file"), cache)[0] for _ in range(REPEATS))
        print(f"| {name} | {files:,} | {samples:,} | {first:.2f} | {again:.2f} |")
