"""The worker processes that index big runs: one spawned pool per server, started before Load & View; tasks are this
package's functions (index_chunk, summarize_lines, read_texts), pickled by name, so a worker imports only the reading
layer. Also how files are cut into line-aligned chunks and rows into batches for them, the thread that reads ahead
what the page will likely show next, and the turns the server's sessions take to draw."""
import collections
import contextlib
import functools
import gc
import math
import multiprocessing
import os
import sys
import threading
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import NamedTuple

import numpy as np

from rl_board.reading.lines import IndexedChunk, LineSummaries, scan_lines, summarize_buffer
from rl_board.reading.storage import read_range, read_spans

PARALLEL_MIN_BYTES = 48 << 20


CHUNK_BYTES = 32 << 20


# The CPU time this process's cgroups allow it, in cores: the tightest quota over period of its cgroup and those above
# it (cgroup v2's cpu.max, v1's cpu.cfs_quota_us), found through the cgroup mounts it sees; None where none is set
# or none can be read (not Linux, no cgroup file system mounted).
def cgroup_cpu_quota(proc: str = "/proc/self") -> float | None:
    try:
        with open(f"{proc}/cgroup") as file:
            groups = [line.rstrip("\n").split(":", 2) for line in file if line.count(":") >= 2]
        with open(f"{proc}/mountinfo") as file:
            mounts = [line.split() for line in file if " - " in line]
    except OSError:
        return None
    quotas = []
    for fields in mounts:
        root, mount_point = fields[3], fields[4]
        file_system, options = fields[fields.index("-") + 1], fields[fields.index("-") + 3].split(",")
        if file_system == "cgroup2":
            paths = [path for hierarchy, _, path in groups if hierarchy == "0"]
        elif file_system == "cgroup" and "cpu" in options:
            paths = [path for _, controllers, path in groups if "cpu" in controllers.split(",")]
        else:
            continue
        for path in paths:  # the cgroup's place under the mount: a container may have its own cgroup mounted as the root
            below = path if root == "/" else path[len(root):] if path.startswith(root) else ""
            quotas += cpu_quotas_up_to(mount_point, [part for part in below.split("/") if part], v2=file_system == "cgroup2")
    return min(quotas, default=None)


# The CPU quotas, in cores, set on a cgroup (a mount point and the folders below it) and on each cgroup above it.
def cpu_quotas_up_to(mount_point: str, parts: list[str], v2: bool) -> list[float]:
    quotas = []
    for depth in range(len(parts), -1, -1):
        folder = os.path.join(mount_point, *parts[:depth])
        with contextlib.suppress(OSError, ValueError):
            if v2:
                with open(f"{folder}/cpu.max") as file:
                    quota, period = file.read().split()
            else:
                with open(f"{folder}/cpu.cfs_quota_us") as quota_file, open(f"{folder}/cpu.cfs_period_us") as period_file:
                    quota, period = quota_file.read().strip(), period_file.read().strip()
            if quota not in ("max", "-1") and int(quota) > 0 and int(period) > 0:
                quotas.append(int(quota) / int(period))
    return quotas


# The cores this process may use: its CPU affinity (taskset, a container's cpuset) and, rounded up, its cgroups' CPU
# quota (docker --cpus, a Kubernetes pod's CPU limit, systemd's CPUQuota), not the machine's count of cores.
def usable_cores() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return max(1, min(cores, math.ceil(quota))) if quota else cores


# One worker process for each core this process may use, not one per core of the machine: a pod limited to 2 CPUs of
# a 64-core node would otherwise start 64 workers, each with its own memory, to share 2 cores' time.
WORKERS = usable_cores()


# Worker: index bytes [start, end) of a file: every line's place and step, and the numbers of the
# lines that will likely be shown (the first parse_per_step of each step: a file's share of
# Max Samples Each Step), all in one read.
def index_chunk(path: str, start: int, end: int, parse_per_step: int) -> "IndexedChunk":
    gc.disable()  # decoding makes millions of short-lived objects and no cycles: collections only cost time
    try:
        return index_chunk_bytes(*read_range(path, start, end), start, parse_per_step)
    finally:
        gc.enable()


def index_chunk_bytes(buffer, size: int, start: int, parse_per_step: int) -> "IndexedChunk":
    lines = scan_lines(buffer, size, start)
    seen: dict[float, int] = {}
    parse = []
    for row, step in enumerate(lines.step_hint.tolist()):
        seen[step] = seen.get(step, 0) + 1
        if math.isnan(step) or seen[step] <= parse_per_step:
            parse.append(row)
    parse = np.array(parse, dtype=np.int64)
    return IndexedChunk(lines, parse, summarize_buffer(buffer, start, lines.offset[parse], lines.length[parse]))


# Worker: the numbers of some lines of a file (those a new selection wants and the first pass skipped), read one
# by one: the lines may lie far apart in a big file.
def summarize_lines(path: str, offsets: np.ndarray, lengths: np.ndarray) -> "LineSummaries":
    data = b"".join(read_spans([path] * len(offsets), offsets.tolist(), lengths.tolist()))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return summarize_buffer(data, 0, starts, lengths)


# Split bytes [start, end) into ~CHUNK_BYTES pieces that begin at line starts, for workers to scan alone.
def line_aligned_chunks(path: str, start: int, end: int) -> list[tuple[int, int]]:
    bounds, position = [start], start + CHUNK_BYTES
    while position < end:
        buffer, got = read_range(path, position, min(position + (1 << 16), end))
        newline = buffer.find(b"\n", 0, got)
        if newline < 0:
            position += got
            if not got:
                break
            continue
        position += newline + 1
        if position >= end:
            break
        bounds.append(position)
        position += CHUNK_BYTES
    bounds.append(end)
    return [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


# Rows to parse in batches of about 8 MB, so the progress bar moves and workers share the load.
def batches_of_rows(rows: np.ndarray, lengths: np.ndarray, batch_bytes: int = 8 << 20) -> list[np.ndarray]:
    if not len(rows):
        return []
    sizes = np.cumsum(lengths[rows])
    cuts = np.searchsorted(sizes, np.arange(batch_bytes, sizes[-1], batch_bytes))
    return [part for part in np.split(rows, cuts) if len(part)]


# Run (function, args) tasks on the worker processes, or here when small; yields results in task order. A task's
# function is a module-level function of this package: it pickles by name, and a worker imports its module once. A
# worker that dies (killed, out of memory) breaks its pool for good: that pool is replaced, and BrokenProcessPool
# raised for the caller to run its tasks again. parallel may instead be an Executor of other workers (Dask's
# client.get_executor(), for `python -m rl_board index --dask`): the tasks run there.
def run_tasks(tasks: list, parallel: "bool | Executor"):
    if not parallel or len(tasks) < 2:
        for function, args in tasks:
            yield function(*args)
        return
    pool = parallel if isinstance(parallel, Executor) else worker_pool()
    try:
        futures = collections.deque(pool.submit(function, *args) for function, args in tasks)
        while futures:
            yield futures.popleft().result()  # and let go of it: the caller keeps what it needs
    except BrokenProcessPool:
        replace_broken_pool(pool)
        raise


WORKER_POOL_LOCK = threading.Lock()


# One pool of worker processes per server (the lock keeps sessions opening at once from starting one each), started
# before the user presses Load & View. Spawned, never forked: forked from the server they would share its sockets and
# threads (the page's charts then sometimes never drew).
def worker_pool() -> ProcessPoolExecutor:
    with WORKER_POOL_LOCK:
        return started_worker_pool()


# A pool a worker of which died: the next task starts a new one. Only that pool is replaced: sessions whose tasks broke
# on it at once must not shut down the pool another has just started.
def replace_broken_pool(broken: ProcessPoolExecutor):
    with WORKER_POOL_LOCK:
        if started_worker_pool.cache_info().currsize and started_worker_pool() is broken:
            started_worker_pool.cache_clear()
    broken.shutdown(wait=False, cancel_futures=True)


@functools.cache
def started_worker_pool() -> ProcessPoolExecutor:
    pool = ProcessPoolExecutor(max_workers=WORKERS, mp_context=multiprocessing.get_context("spawn"))
    with page_not_rerun():
        for _ in range(WORKERS):  # they all start on these first tasks, long before one is idle
            pool.submit(ready)
    return pool


# A worker's first task, while the user picks a run: unpickling it imports this module, the reading layer its indexing
# tasks need, so the first Load & View does not wait for it.
def ready() -> int:
    return os.getpid()


# A spawned process first runs its parent's __main__ again (multiprocessing's spawn), and in the server __main__ is the
# page: Streamlit installs each run of the page as sys.modules["__main__"]. While the workers start, that module shows
# no spec and no file, so they run nothing of it: a worker imports only the modules of the functions it is sent (this
# package's reading layer), never the page, Streamlit or plotly.
@contextlib.contextmanager
def page_not_rerun():
    main_module = sys.modules["__main__"]
    spec, file = main_module.__spec__, main_module.__dict__.pop("__file__", None)
    main_module.__spec__ = None
    try:
        yield
    finally:
        main_module.__spec__ = spec
        if file is not None:
            main_module.__file__ = file


# One background thread that runs the latest job it is given once `delay` seconds have passed without a newer one,
# dropping the older ones: the page reads the steps either side of the one in view once the user has stayed on it,
# and only the latest view's neighbours are worth reading. While the user moves on quickly (and the browser, on the
# same cores, draws each step) it reads nothing. A job that fails is dropped: reading that step again when it is
# shown says why.
# A task's error that stopped it reading its file (deleted since it was listed; on object storage, while the load's
# requests ran; unreadable), as a task's result: the load goes on with the other files.
class Unread(NamedTuple):
    reason: str


# A task run so that an error reading its file is its result (Unread), not the whole load's.
def unless_unreadable(function, *arguments):
    try:
        return function(*arguments)
    except OSError as error:
        return Unread(str(error))


class LatestJobThread:
    def __init__(self, delay: float):
        self.delay = delay
        self.condition = threading.Condition()
        self.job, self.given = None, 0.0
        threading.Thread(target=self.run_jobs, name="read-ahead", daemon=True).start()

    def submit(self, job):
        with self.condition:
            self.job, self.given = job, time.monotonic()
            self.condition.notify()

    def run_jobs(self):
        while True:
            with self.condition:
                self.condition.wait_for(lambda: self.job is not None)
                while (left := self.given + self.delay - time.monotonic()) > 0:
                    self.condition.wait(left)  # a newer job given meanwhile starts the wait again
                job, self.job = self.job, None
            with contextlib.suppress(Exception):
                job()


# Turns that threads take at a piece of work, one at a time, each waiting for its turn at most `wait` seconds. Python
# runs one thread at a time and switches between them every few milliseconds, so 8 sessions of one server that rerun
# their pages together each go an eighth as fast: all 8 are drawn at the end, 8 reruns' time after they began. In
# turns, the first is drawn after one rerun's time and half of them after half the time, and the last no later. A
# thread that has waited `wait` seconds goes ahead beside the one in turn, so a long piece of work (a step read from S3
# for the first time) holds the others up no longer than that. Work a thread does inside its turn (a fragment drawn
# inside another) goes on in it, without waiting again, whether the thread had its turn or went ahead.
class Turns:
    def __init__(self, wait: float):
        self.wait = wait
        self.lock = threading.Lock()
        self.inside = threading.local()  # .had: whether this thread had its turn; absent outside one

    # Yields whether the turn was had (False: the wait ran out, and the work goes on beside the one in turn).
    @contextlib.contextmanager
    def turn(self):
        if hasattr(self.inside, "had"):
            yield self.inside.had
            return
        had = self.inside.had = self.lock.acquire(timeout=self.wait)
        try:
            yield had
        finally:
            del self.inside.had
            if had:
                self.lock.release()
