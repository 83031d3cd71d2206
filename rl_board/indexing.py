"""A root's runs indexed ahead of time (`python -m rl_board index`): each run loaded as the board loads it, every line
parsed, so that its index cache (the same IndexCache files the board writes, under the same file identities) holds
every line's numbers; a board or open_run using that cache folder then opens the run without reading its files again.
The indexing tasks run on the board's worker pool, or on the workers of any concurrent.futures Executor (Dask's).
Runs whose files are conversions of another trainer's files (made here, in the cache folder) are indexed on the pool:
the Executor's workers, on other machines, may not see that folder; with the cache on object storage they can, and do."""
import time
from concurrent.futures import Executor, ThreadPoolExecutor, as_completed
from dataclasses import dataclass

import numpy as np

from rl_board.formats import run_sources
from rl_board.reading.index import BAD, IndexCache
from rl_board.reading.storage import StorageError, is_remote
from rl_board.reading.store import RunStore
from rl_board.run import ALL_SAMPLES
from rl_board.text import shorten

# Runs loaded at once: their listing, identities and cache writes (I/O, on object storage) overlap the others' tasks.
RUNS_AT_ONCE = 4


# One run as indexed: what it holds and what could not be used, or why it could not be indexed at all.
@dataclass(frozen=True)
class IndexedRun:
    run_dir: str
    format: str = ""
    files: int = 0
    lines: int = 0
    bad_lines: int = 0
    skipped_files: tuple = ()  # (file, reason) of each file that could not be read (a conversion that failed...)
    first_bad_lines: tuple = ()  # (file, line, reason) of the first BAD_LINES_NAMED bad lines
    seconds: float = 0.0
    error: str = ""  # why the run was not indexed, or its cache not written


# Index the runs (paths, as rl_board.list_runs gives those under a root) with workers (True: the worker pool, or an
# Executor), yielding each run as it is done (in the order they finish).
def index_runs(run_dirs: list[str], workers: "bool | Executor" = True):
    loads = ThreadPoolExecutor(max_workers=RUNS_AT_ONCE)
    try:
        pending = [loads.submit(index_run, run_dir, workers) for run_dir in run_dirs]
        for done in as_completed(pending):
            yield done.result()
    finally:  # Ctrl-C: the runs not started are not indexed (a with-block waited for every one)
        loads.shutdown(wait=True, cancel_futures=True)


BAD_LINES_NAMED = 3  # of a run, in its progress line: the rest are in its load report (the page's, open_run's problems)


# A run loaded with every sample of every step (each line parsed: the cache then serves any Max Samples Each Step).
def index_run(run_dir: str, workers: "bool | Executor" = True) -> IndexedRun:
    started = time.perf_counter()
    try:
        if isinstance(workers, Executor) and run_sources(run_dir)[1].convert is not None and not is_remote(IndexCache().folder):
            workers = True
        store = RunStore(run_dir)
        snapshot = store.load(ALL_SAMPLES, parallel=workers)
    except (OSError, StorageError, ValueError) as error:
        return IndexedRun(run_dir, seconds=time.perf_counter() - started, error=shorten(f"{type(error).__name__}: {error}", 300))
    problems = snapshot.problems
    skipped = problems[(problems["kind"] == "skipped") & (problems["line"] == 0)]  # a whole file (a line's skip is a bad line)
    bad = problems[(problems["kind"] == "skipped") & (problems["line"] > 0)].head(BAD_LINES_NAMED)
    return IndexedRun(
        run_dir,
        format=snapshot.format,
        files=len(store.files),
        lines=sum(len(index.lines["offset"]) for index in store.files.values()),
        bad_lines=int(sum(np.count_nonzero(index.lines["status"] == BAD) for index in store.files.values())),
        skipped_files=tuple(zip(skipped["file"], skipped["reason"])),
        first_bad_lines=tuple(zip(bad["file"], bad["line"].astype(int).tolist(), bad["reason"])),
        seconds=time.perf_counter() - started,
        error=store.cache.error or store.unwritten_conversions,
    )
