"""The command line: `python -m rl_board index ROOT [--cache DIR] [--dask SCHEDULER]` builds the index caches of every
run under ROOT (a folder or s3://bucket/prefix) ahead of time, where it runs (a node next to the data), on this
machine's worker processes, or on a Dask cluster (`--dask local`: a LocalCluster here; `--dask tcp://host:8786`: a
running scheduler), into a cache folder or a prefix of object storage; a board or rl_board.open_run with the same cache
(RL_LOGGING_BOARD_CACHE) then opens each run without reading its files again. See rl_board/indexing.py."""
import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

from rl_board.indexing import IndexedRun, index_runs
from rl_board.reading.index import IndexCache
from rl_board.reading.storage import StorageError, is_remote, lower_scheme, shown_url, write_problem
from rl_board.reading.workers import WORKERS
from rl_board.run import run_folders
from rl_board.text import shorten, valid_text

DASK_MISSING = "--dask needs Dask's distributed package (not needed otherwise): pip install dask distributed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rl_board", description="RL Logging Board's engine from the command line.")
    commands = parser.add_subparsers(dest="command", required=True)
    index = commands.add_parser("index", help="build the index caches of every run under ROOT ahead of time")
    index.add_argument("root", metavar="ROOT", help="the folder (or s3://bucket/prefix) whose runs are indexed, as the board's root")
    index.add_argument("--cache", metavar="DIR", help="the cache folder, or s3://bucket/prefix (default RL_LOGGING_BOARD_CACHE, else ~/.cache/rl_logging_board)")
    index.add_argument("--dask", metavar="SCHEDULER", help="run the tasks on Dask: 'local' (a LocalCluster here) or a scheduler's address")
    arguments = parser.parse_args(argv)
    if arguments.cache:
        os.environ["RL_LOGGING_BOARD_CACHE"] = arguments.cache if is_remote(arguments.cache) else str(Path(arguments.cache).expanduser().absolute())
    cache = IndexCache().folder
    problem = write_problem(cache)
    if problem:  # found now, not after hours of indexing
        print(f"the cache {shown_url(cache)} cannot be written: {problem}", file=sys.stderr)
        return 2
    try:
        run_dirs = run_folders(lower_scheme(arguments.root))
    except (OSError, StorageError) as error:
        print(f"{shown_url(arguments.root)} could not be listed: {error}", file=sys.stderr)
        return 2
    if not run_dirs:
        print(f"no runs under {shown_url(arguments.root)}", file=sys.stderr)
        return 2
    with contextlib.ExitStack() as stack:
        try:
            workers, described = stack.enter_context(workers_of(arguments.dask))
        except SchedulerMissing as error:  # before indexing anything, as a root that cannot be listed
            print(error, file=sys.stderr)
            return 2
        print(f"Indexing {len(run_dirs)} run(s) under {shown_url(arguments.root)} into {shown_url(IndexCache().folder)}, on {described}", flush=True)
        started, indexed = time.perf_counter(), []
        try:
            for run in index_runs(run_dirs, workers):
                indexed.append(run)
                print(f"[{len(indexed)}/{len(run_dirs)}] {progress_line(run)}", flush=True)
        except KeyboardInterrupt:  # Ctrl-C: a run's caches are written as it is indexed, so a rerun reads only the rest
            print(f"\ninterrupted after {len(indexed)} of {len(run_dirs)} run(s), which are cached: run the command again to index the rest", file=sys.stderr)
            return 130
    print()
    print(summary_table(sorted(indexed, key=lambda run: run_dirs.index(run.run_dir)), time.perf_counter() - started))
    return 1 if any(run.error for run in indexed) else 0


class SchedulerMissing(Exception):
    """--dask cannot run: Dask is not installed, or no scheduler answers at the address given."""


# The workers the tasks run on, and in words: the worker pool, or a Dask client's (imported only here: Dask is needed
# for --dask alone).
@contextlib.contextmanager
def workers_of(scheduler: str | None):
    if scheduler is None:
        yield True, f"this machine's worker pool ({WORKERS} processes)"
        return
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise SchedulerMissing(DASK_MISSING) from None
    with contextlib.ExitStack() as stack:
        if scheduler == "local":  # processes, a thread each: indexing holds the GIL
            cluster = stack.enter_context(LocalCluster(n_workers=WORKERS, threads_per_worker=1, dashboard_address=None))
            client = stack.enter_context(Client(cluster))
        else:
            try:
                client = stack.enter_context(Client(scheduler, timeout="30s"))
            except (OSError, ValueError) as error:
                raise SchedulerMissing(f"no Dask scheduler at {scheduler}: {error}") from None
        workers = len(client.scheduler_info()["workers"])
        yield client.get_executor(), f"Dask at {client.scheduler.address} ({workers} workers)"


def progress_line(run: IndexedRun) -> str:
    if run.error and not run.files:
        return f"{valid_text(run.run_dir)}: not indexed: {run.error}"  # a folder name that is not UTF-8 printed with �
    text = f"{valid_text(run.run_dir)}: {format_name(run)}, {run.files} file(s), {run.lines:,} lines, {run.bad_lines} bad, {run.seconds:.1f} s"
    skipped = "".join(f"\n    skipped {file}: {reason}" for file, reason in run.skipped_files)
    bad = "".join(f"\n    bad line: {file} line {line}: {shorten(reason, 200)}" for file, line, reason in run.first_bad_lines)
    if run.bad_lines > len(run.first_bad_lines):
        bad += f"\n    ... {run.bad_lines - len(run.first_bad_lines)} more bad line(s): the load report lists them"
    return text + skipped + bad + (f"\n    {run.error}" if run.error else "")


# A run's format by its name, without its details.
def format_name(run: IndexedRun) -> str:
    return run.format.split(" (")[0]


# The runs as a table, and a total (its seconds: the whole command's, runs overlapping).
def summary_table(runs: list[IndexedRun], seconds: float) -> str:
    header = ("run", "format", "files", "lines", "bad lines", "skipped files", "seconds")
    rows = [(valid_text(run.run_dir), format_name(run) or "not indexed", run.files, f"{run.lines:,}", run.bad_lines, len(run.skipped_files), f"{run.seconds:.1f}") for run in runs]
    failed = sum(bool(run.error) for run in runs)
    rows.append((f"total: {len(runs)} run(s)" + (f", {failed} not indexed" if failed else ""), "", sum(run.files for run in runs),
                 f"{sum(run.lines for run in runs):,}", sum(run.bad_lines for run in runs), sum(len(run.skipped_files) for run in runs), f"{seconds:.1f}"))
    widths = [max(len(str(row[column])) for row in [header, *rows]) for column in range(len(header))]
    lines = ["  ".join(str(cell).ljust(width) if column < 2 else str(cell).rjust(width) for column, (cell, width) in enumerate(zip(row, widths))) for row in [header, *rows]]
    return "\n".join(lines[:1] + ["-" * len(lines[0])] + lines[1:-1] + ["-" * len(lines[0])] + lines[-1:])


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C before or after the runs are indexed (main says how many were, during)
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
