"""What the server does when a live run grows, timed in the engine: a step appended to every rank file of a generated run
(32 lines each, as ranks write their shares), then the load a refresh makes, REPEATS times; the median of each part and
the bytes it wrote to the index cache. Prints a markdown table.

    python bench/live_append_bench.py                     # medium and wide
    python bench/live_append_bench.py --sizes wide --repeats 9
    python bench/live_append_bench.py --summaries         # the runs as the logger writes them: each append with its
                                                          # texts and summaries records, as the logger's writer adds them

The run is bench/runs/<size> (run_bench.py's; generated once); its files are cut back to their size afterwards. It opens
the run once first, from an index cache of its own (kept between calls), without worker processes, so that the parts are
this process's. The parts: index (reading the new lines), select and parse (which lines each step shows), cache (writing
the changed files' indexes), snapshot (the samples frame the page draws).
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from bench.generate_run import step_lines  # noqa: E402
from bench.run_bench import SIZES, generated_run  # noqa: E402

LINES_PER_RANK = 32
PARTS = {"index": "index_files", "select and parse": "parse_selected", "cache": "save", "snapshot": "build_run"}


# Time each call of the named functions (summed per load) and count the bytes written to the index cache.
def instrumented(times: dict, written: list):
    import rl_board.reading.index as index_module
    import rl_board.reading.store as store_module

    def timed(owner, name, part):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                times[part] = times.get(part, 0.0) + time.perf_counter() - start

        setattr(owner, name, wrapper)

    timed(store_module.RunStore, "index_files", "index")
    timed(store_module.RunStore, "parse_selected", "select and parse")
    timed(store_module.IndexCache, "save", "cache")
    timed(store_module, "build_run", "snapshot")
    write_file = index_module.write_file
    index_module.write_file = lambda path, data: written.append(len(data)) or write_file(path, data)


def measure(size: str, repeats: int, summaries: bool) -> dict:
    steps, _, tokens, ranks = SIZES[size]
    run_dir = generated_run(size, summaries) / "run"
    os.environ["RL_LOGGING_BOARD_CACHE"] = str(Path(tempfile.gettempdir()) / f"rl_board_live_append_bench_{size}{'_summaries' if summaries else ''}")
    from rl_board.reading.store import RunStore
    from rl_board.reading.summaries import batch_record, texts_file
    from rollout_logger.metadata import SUMMARIES_SUFFIX

    times, written = {}, []
    instrumented(times, written)
    files = sorted(run_dir.glob("rollout_data_rank_*.jsonl"))
    sidecars = [Path(str(path) + SUMMARIES_SUFFIX) for path in files] + [Path(texts_file(str(path))) for path in files] if summaries else []
    sizes = {path: path.stat().st_size for path in files + sidecars}
    store = RunStore(str(run_dir))
    loaded = len(store.load(128, parallel=False).samples)
    rows = {part: [] for part in ["load", *PARTS, "cache bytes written"]}
    try:
        for repeat in range(repeats):
            for rank, path in enumerate(files):
                data = step_lines(0, rank, steps + repeat, LINES_PER_RANK, tokens, steps, summaries)
                if summaries:  # as the logger's writer: texts, lines, record
                    texts, record = batch_record(data, path.stat().st_size, Path(texts_file(str(path))).stat().st_size)
                    with open(texts_file(str(path)), "ab") as file:
                        file.write(texts)
                with open(path, "ab") as file:
                    file.write(data)
                if summaries:
                    with open(str(path) + SUMMARIES_SUFFIX, "ab") as file:
                        file.write(record)
            times.clear()
            written.clear()
            start = time.perf_counter()
            snapshot = store.load(128, parallel=False)
            rows["load"].append(time.perf_counter() - start)
            for part in PARTS:
                rows[part].append(times.get(part, 0.0))
            rows["cache bytes written"].append(sum(written))
            assert len(snapshot.samples) == loaded + (repeat + 1) * LINES_PER_RANK * len(files)
    finally:
        for path, length in sizes.items():
            os.truncate(path, length)
    return {part: statistics.median(values) for part, values in rows.items()} | {"samples": loaded, "steps": steps}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["medium", "wide"], choices=sorted(SIZES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--summaries", action="store_true", help="the runs with the logger's summaries and texts files")
    arguments = parser.parse_args()
    results = {size: measure(size, arguments.repeats, arguments.summaries) for size in arguments.sizes}
    print(f"| a step appended to {LINES_PER_RANK} lines a rank file, then a load (median of {arguments.repeats}) | " + " | ".join(f"{size} ({results[size]['steps']} steps, {results[size]['samples']:,} samples)" for size in results) + " |")
    print("|---|" + "---:|" * len(results))
    print("| load (ms) | " + " | ".join(f"{results[size]['load'] * 1000:.0f}" for size in results) + " |")
    for part in PARTS:
        print(f"| {part} (ms) | " + " | ".join(f"{results[size][part] * 1000:.0f}" for size in results) + " |")
    print("| index cache written (MB) | " + " | ".join(f"{results[size]['cache bytes written'] / 1e6:.2f}" for size in results) + " |")


if __name__ == "__main__":
    main()
