"""Time a medium run in each format the board opens, and the same run opened from S3, in a real browser.

The medium run of run_bench.py (100 steps x 128 samples, 4 rank files, 500-token responses) is written again, its
prompts, responses and rewards, as the other trainers write them, into bench/runs/formats/:
  - jsonl: the run as it is (the board's format, 551 MB);
  - verl: verl's generation dump, one <step>.jsonl per step (tests/support/other_trainers.py's write_verl_dump, which is
    verl's RayPPOTrainer._dump_generations), with acc and pred;
  - trl: TRL's completion logs, completions/completions_<step:05d>.parquet (written as GRPOTrainer.log() writes
    them, pandas' to_parquet), two reward functions, a log_extra column and advantage;
  - s3: the jsonl run uploaded to a moto S3 server on 127.0.0.1 (tests/support/s3_server.py), opened as s3://bench/formats;
  - s3-summaries: the same run as the logger writes it, with its summaries and texts files (generate_run's
    summaries=True), uploaded there too: its first open reads the summaries, a step its texts records.
For each, per repeat: a fresh server (start.sh) and Chromium page, the page opened on a cold index cache (its first
screen opens the run; for verl and trl it includes the conversion), the same after a server restart (index cache
warm), and 5 step changes (median) straight after each other, then 5 after looking at a step for 2 s (the steps
either side of it are read ahead meanwhile), timed as run_bench.py times them (Board.timed). S3's network is the loopback here: its numbers are
the board's own cost of going through fsspec and byte-range requests, not a real store's latency. For S3, also the
requests and bytes a step's texts take, counted in this process on the engine's own read (read_step_batch, 10 steps).

    python bench/formats_bench.py                # every format, 3 repeats (about 6 minutes on 2 cores)
    python bench/formats_bench.py --formats trl  # just one
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import pandas as pd
from playwright.sync_api import sync_playwright

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))
from bench.run_bench import CHROMIUM, SIZES, Board, generated_run  # noqa: E402
from tests.support.other_trainers import write_verl_dump  # noqa: E402
from tests.support.s3_server import FAKE_CREDENTIALS, environment, make_bucket, running_moto, upload_folder  # noqa: E402

FORMATS = ["jsonl", "verl", "trl", "s3", "s3-summaries"]
FOLDER = PROJECT / "bench" / "runs" / "formats"
STEP_CHANGES = 5
STEP_READS = 10
LOOK_SECONDS = 2  # a user looking at a step before the next: the board reads its neighbours ahead meanwhile
TARGET = "<= 0.2"


# Each step's lines of the medium run, in rank order: what every other format is written from.
def steps_of(run_dir: Path) -> dict[int, list[dict]]:
    steps = {}
    for path in sorted(run_dir.glob("*.jsonl")):
        with open(path, "rb") as file:
            for line in file:
                record = json.loads(line)
                steps.setdefault(record["step"], []).append(record)
    return steps


def write_verl(steps: dict, folder: Path):
    for step, records in steps.items():
        scores = [record["reward"] for record in records]
        extras = {"acc": [score > 0 for score in scores], "pred": [record["response"][-8:] for record in records]}
        write_verl_dump(folder, step, [r["prompt"] for r in records], [r["response"] for r in records], [str(step)] * len(records), scores, extras)


def write_trl(steps: dict, folder: Path):
    (folder / "completions").mkdir(parents=True)
    for step, records in steps.items():
        table = pd.DataFrame({
            "step": [step] * len(records),
            "prompt": [r["prompt"] for r in records],
            "completion": [r["response"] for r in records],
            "accuracy": [r["reward"] for r in records],
            "format": [r["reward"] / 2 for r in records],
            "words": [len(r["response"].split()) for r in records],
            "advantage": [r.get("advantage", 0.0) for r in records],
        })
        table.to_parquet(folder / "completions" / f"completions_{step:05d}.parquet")


# bench/runs/formats/<format>/run, written the first time (the jsonl run is a link to the medium run).
def format_roots() -> dict[str, Path]:
    medium = generated_run("medium") / "run"
    roots = {name: FOLDER / name for name in ("jsonl", "verl", "trl")}
    if not (roots["jsonl"] / "run").exists():
        roots["jsonl"].mkdir(parents=True, exist_ok=True)
        (roots["jsonl"] / "run").symlink_to(medium)
    if not (roots["verl"] / "run").exists() or not (roots["trl"] / "run").exists():
        print("writing the verl and trl runs...", file=sys.stderr)
        steps = steps_of(medium)
        for name, write in (("verl", write_verl), ("trl", write_trl)):
            shutil.rmtree(roots[name], ignore_errors=True)
            write(steps, roots[name] / "run")
    return roots


# The first screen on a cold cache (it opens the run by itself), again after a restart, and the step changes, one
# straight after another and after looking at a step for LOOK_SECONDS; seconds.
def measure(root, cache: Path, repeats: int) -> dict[str, list[float]]:
    steps = SIZES["medium"][0]
    loaded = (
        "document.querySelectorAll('.vega-embed .marks').length >= 3"
        f" && [...document.querySelectorAll('[data-testid=\"stWidgetLabel\"]')].some(label => label.textContent.includes('Step Index({steps} total steps)'))"
    )
    results = {"first open (s)": [], "open again after restart (s)": []}
    for row in ("change the step", f"change the step after {LOOK_SECONDS:g} s on one"):
        results |= {f"{row} (s)": [], f"{row}, server part (s)": []}
    with sync_playwright() as playwright:
        for _ in range(repeats):
            shutil.rmtree(cache, ignore_errors=True)
            board = Board(root, cache, playwright)
            try:
                results["first open (s)"].append(board.open_page(steps, loaded))
                results["open again after restart (s)"].append(board.restart_server(steps, loaded))
                for row, looked in (("change the step", 0), (f"change the step after {LOOK_SECONDS:g} s on one", LOOK_SECONDS)):
                    changes, server = [], []
                    for _ in range(STEP_CHANGES):
                        time.sleep(looked)  # the steps either side of the one in view are read ahead meanwhile
                        changes.append(board.change_step())
                        server.append(board.server_seconds)
                    results[f"{row} (s)"].append(statistics.median(changes))
                    results[f"{row}, server part (s)"].append(statistics.median(server))
            finally:
                board.close()
    return results


# The ranged requests and bytes the texts of a step take on object storage (STEP_READS steps, median), counted on
# the engine's read of them in this process (the index cache warm).
def step_reads(run_url: str, cache: Path) -> dict[str, list[float]]:
    os.environ["RL_LOGGING_BOARD_CACHE"] = str(cache)
    from rl_board.reading.snapshot import read_step_batch
    from rl_board.reading.storage import remote_storage, storage
    from rl_board.reading.store import RunStore

    storage.cache_clear()  # made under this server's endpoint
    snapshot = RunStore(run_url).load(128, parallel=False)
    store, requests = remote_storage(run_url), []
    cat_ranges = store.cat_ranges
    store.cat_ranges = lambda paths, starts, ends, **options: requests.append([end - start for start, end in zip(starts, ends)]) or cat_ranges(paths, starts, ends, **options)
    counts, sizes, seconds = [], [], []
    for step in snapshot.steps[:: max(1, len(snapshot.steps) // STEP_READS)][:STEP_READS]:
        requests.clear()
        started = time.perf_counter()
        read_step_batch("bench", snapshot.step_rows(step))
        seconds.append(time.perf_counter() - started)
        counts.append(sum(len(ranges) for ranges in requests))
        sizes.append(sum(sum(ranges) for ranges in requests) / 1e6)
    del store.cat_ranges
    return {"a step's texts: ranged requests": counts, "a step's texts: MB read": sizes, "a step's texts: read in-process (s)": seconds}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", nargs="+", default=FORMATS, choices=FORMATS)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    assert Path(CHROMIUM["executable_path"]).exists(), "needs Chromium: apt-get install -y chromium"
    roots = format_roots()
    table = {}
    for name in args.formats:
        started = time.perf_counter()
        if name.startswith("s3"):
            with running_moto() as endpoint, environment({**FAKE_CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}):  # the servers' too
                make_bucket(endpoint, "bench")
                upload_folder(endpoint, generated_run("medium", summaries=True) / "run" if name == "s3-summaries" else roots["jsonl"] / "run", "s3://bench/formats/run")
                table[name] = measure("s3://bench/formats", FOLDER / f"cache-{name}", args.repeats)
                table[name] |= step_reads("s3://bench/formats/run", FOLDER / f"cache-{name}")
        else:
            table[name] = measure(roots[name], FOLDER / f"cache-{name}", args.repeats)
        print(f"{name}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    rows = list(dict.fromkeys(row for results in table.values() for row in results))
    print(f"\nmedium run (100 steps x 128 samples), median of {args.repeats}; target for a step change {TARGET} s\n")
    print("| measure | " + " | ".join(table) + " |")
    print("|---|" + "---|" * len(table))
    for row in rows:
        print(f"| {row} | " + " | ".join(f"{statistics.median(table[name][row]):.2f}" if row in table[name] else "" for name in table) + " |")


if __name__ == "__main__":
    main()
