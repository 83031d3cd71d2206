"""The store of a run folder (RunStore), shared by every session: each load lists the folder, indexes only what changed
(on the worker processes when there is much), parses what the selection wants and returns an immutable snapshot per
Max Samples Each Step; a worker that dies is replaced and the load read again. list_runs says which folders under a
root are runs."""
import contextlib
import dataclasses
import math
import os
import threading
from collections import Counter
from concurrent.futures import Executor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import numpy as np
import pandas as pd

from rl_board.formats import TRAINER_OUTPUT, run_layouts, run_sources
from rl_board.formats.base import Folder, RunFormat
from rl_board.formats.conversion import (
    CONVERSION_THREADS,
    ConversionNotWritten,
    conversions_folder,
    converted_file,
    known_conversions,
    save_known_conversions,
)
from rl_board.reading.history import history_signature
from rl_board.reading.index import (
    BAD,
    BUNDLED_FILES,
    UNPARSED,
    FileIdentity,
    FileIndex,
    IndexCache,
    cached_together,
    read_identity,
)
from rl_board.reading.snapshot import RunSnapshot, Selection, build_run, select_lines
from rl_board.reading.storage import (
    FileStatus,
    StorageError,
    canonical_paths,
    file_status,
    is_remote,
    joined,
    list_folder,
)
from rl_board.reading.workers import (
    PARALLEL_MIN_BYTES,
    WORKERS,
    Unread,
    batches_of_rows,
    index_chunk,
    line_aligned_chunks,
    run_tasks,
    summarize_lines,
    unless_unreadable,
)
from rl_board.text import shorten, valid_text
from rollout_logger.metadata import ROLLOUTS_FOLDER

SNAPSHOTS_KEPT = 4  # of one run, for different Max Samples Each Step


WORKER_LOST = (
    "a worker process stopped (killed, or out of memory) while this run was read: the workers were started again and "
    "the run read again"
)


# A run folder, indexed incrementally: each load reads only what changed on disk since the last.
class RunStore:
    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self.files: dict[str, FileIndex] = {}
        self.cache = IndexCache()
        self.lock = threading.Lock()
        # The snapshots of the files as indexed, one per Max Samples Each Step asked for (sessions may differ), the
        # latest SNAPSHOTS_KEPT; dropped when a file changes.
        self.snapshots: dict[int, RunSnapshot] = {}
        self.built_format = RunFormat("")  # the format the snapshots were built with: its notes, skipped files and weights
        self.conversions: dict[str, tuple] = {}  # source -> (its stamp, its conversion's path), as made or checked last
        self.failures: dict[str, tuple] = {}  # source -> ((status, context), problem) of its last failed conversion
        self.gone: dict[str, int] = {}  # a file loaded before and no longer listed -> its lines then (a note says so)
        self.unparsed: dict[int, dict[str, str]] = {}  # per kept snapshot (by Max Samples Each Step), the files whose lines it could not read, and why: a load of it tries again
        self.run_cached = False  # its files' indexes were read from, or written to, the run's one cache file
        self.unwritten_conversions = ""  # why the last listing's conversions could not be written (the run is then not indexed)

    # The files to index, with their status: the rank files, or the conversions of another trainer's files (made here
    # when new or changed). One listing: a stat per file on disk, one request per folder on object storage. A file
    # whose name is not UTF-8 is listed in the load report instead (tables and caches need UTF-8).
    def current_files(self) -> tuple[dict[str, "FileStatus"], "RunFormat"]:
        self.unwritten_conversions = ""
        sources, run_format = run_sources(self.run_dir)
        if run_format.convert is None:
            return readable_files(sources, run_format)
        folder = conversions_folder(self.cache, self.run_dir)
        if not self.conversions:
            self.conversions.update(known_conversions(folder))
        before = dict(self.conversions)
        at_once = is_remote(self.run_dir) or is_remote(folder)  # on object storage the files are fetched and written at once
        canonical = canonical_paths(sources)
        with ThreadPoolExecutor(max_workers=CONVERSION_THREADS) as pool:
            results = list((pool.map if at_once else map)(lambda item: self.conversion(*item, run_format, folder, canonical[item[0]]), sources.items()))
        if self.conversions != before:  # the current sources' (a source gone is forgotten)
            save_known_conversions(folder, {source: self.conversions[source] for source in sources if source in self.conversions})
        converted = tuple(problem for _, problems in results for problem in problems)
        run_format = dataclasses.replace(run_format, problems=run_format.problems + (run_format.merged_notes or tuple)(converted))
        listed = {entry.path: entry.status for entry in list_folder(folder) if entry.status} if any(path for path, _ in results) else {}
        return {path: listed.get(path) or file_status(path) for path, _ in results if path}, run_format

    # A source file's conversion and its notes, or the problem that stops it (tried again only once the file changed).
    def conversion(self, source: str, status: "FileStatus", run_format: "RunFormat", folder: str, canonical: str) -> tuple[str | None, tuple]:
        failed = self.failures.get(source)
        if failed and failed[0] == (status, run_format.context):
            return None, (failed[1],)
        try:
            path, notes = converted_file(source, status, run_format, folder, self.conversions, canonical)
        except Exception as error:  # a parquet file still being written, a file of any shape: its problem, never the load's
            name = run_format.file_contexts.get(source, (source.rstrip("/").rsplit("/", 1)[-1],))[0]  # its conversion's name, when it has one
            if isinstance(error, ConversionNotWritten):  # not kept: the cache may be writable on the next load
                self.unwritten_conversions = self.unwritten_conversions or shorten(f"conversions not written: {error}", 400)
                return None, ((valid_text(name), 0, "skipped", shorten(str(error), 400)),)
            if isinstance(error, OSError):  # not kept either: read once it can be (a permission given, a mount back)
                return None, ((valid_text(name), 0, "skipped", f"cannot be read ({error.strerror or shorten(str(error), 200)}): left out, read once it can be"),)
            reason = f"could not be read as {run_format.name} ({shorten(str(error), 200)}); still being written? It is read again when it changes"
            problem = (valid_text(name), 0, "skipped", reason)
            self.failures[source] = ((status, run_format.context), problem)
            return None, (problem,)
        name = valid_text(Path(path).name)  # the conversion's lines are reported under its name
        return path, tuple((name, line, "note", valid_text(reason)) for line, reason in notes)

    # The run's files and format as listed now when load() would read anything, else None. Cheap: a listing.
    def pending(self, max_samples: int) -> tuple[dict[str, "FileStatus"], "RunFormat"] | None:
        listing, run_format = self.current_files()
        files = self.files  # read once: a load may replace it meanwhile (this runs outside the lock)
        if max_samples not in self.snapshots or list(listing) != list(files) or run_format != self.built_format or self.unparsed.get(max_samples):
            return listing, run_format
        changed = any(files[path].change(status) != "same" or files[path].texts_change(run_format.texts.get(path)) != "same" for path, status in listing.items())
        return (listing, run_format) if changed else None

    def needs_work(self, max_samples: int) -> bool:
        return self.pending(max_samples) is not None

    # Bring every file up to date, parse what the selection needs, and return an immutable snapshot. A worker process
    # that dies (killed, out of memory) breaks the pool: it is started again and the run read again, once, with a note.
    # parallel: the worker pool (None: when there is much to read) or an Executor of other workers (run_tasks).
    def load(self, max_samples: int, files_progress=None, samples_progress=None, parallel: "bool | Executor | None" = None) -> "RunSnapshot":
        if valid_text(self.run_dir) != self.run_dir:  # tables and caches need UTF-8 (a file so named is reported instead)
            raise StorageError(f"The name of {valid_text(self.run_dir)} is not valid UTF-8: rename the folder to open it.")
        with self.lock:
            try:
                return self.updated(max_samples, files_progress, samples_progress, parallel)
            except BrokenProcessPool:  # run_tasks replaced the pool
                self.files, self.snapshots = {}, {}
                try:
                    snapshot = self.updated(max_samples, files_progress, samples_progress, parallel)
                except BrokenProcessPool:  # again: read in this process, without workers
                    self.files, self.snapshots = {}, {}
                    snapshot = self.updated(max_samples, files_progress, samples_progress, False)
                note = pd.DataFrame([["", 0, "note", WORKER_LOST]], columns=snapshot.problems.columns)
                snapshot = dataclasses.replace(snapshot, problems=pd.concat([note, snapshot.problems], ignore_index=True))
                self.snapshots[max_samples] = snapshot
                return snapshot

    def updated(self, max_samples: int, files_progress, samples_progress, parallel: bool | None) -> "RunSnapshot":
        pending = self.pending(max_samples)  # what is read: a write during the pass shows as a change next time
        if pending is None:
            self.snapshots[max_samples] = self.snapshots.pop(max_samples)  # the most recently used is kept longest
            return self.snapshots[max_samples]
        listing, run_format = pending
        self.gone = {path: lines for path, lines in self.gone.items() if path not in listing}
        self.gone |= {path: len(index.lines["offset"]) for path, index in self.files.items() if path not in listing and not still_a_file(path) and len(index.lines["offset"])}
        same_files = list(listing) == list(self.files) and run_format == self.built_format
        bundled = self.cache.load_run(self.run_dir, listing) if len(listing) >= BUNDLED_FILES and not self.files else {}
        self.run_cached = self.run_cached or bool(bundled)
        self.files = {path: self.files.get(path) or bundled.get(path) or self.cache.load(path) or FileIndex(path) for path in listing}
        changed, summarized, retexted = [], [], set()
        for index in self.files.values():
            change = index.change(listing[index.path])
            if change == "new":
                index.reset()
            elif index.follow_texts(run_format.texts.get(index.path)):
                retexted.add(index.path)
            if change != "same":
                changed.append(index)
                if index.path in run_format.summaries:
                    summarized.append((index, change))
        self.each_file(summarized, lambda item: (item[0].take_summaries if item[1] == "new" else item[0].take_more_summaries)(run_format.summaries[item[0].path], listing[item[0].path].size))
        jobs, unchunked = [], {}
        for index in changed:
            size = listing[index.path].size
            chunks = unless_unreadable(line_aligned_chunks, index.path, index.scan_start(), size)
            if isinstance(chunks, Unread):
                unchunked[index.path] = chunks.reason
            else:
                jobs.append((index, size, chunks))
        new_bytes = sum(size - index.indexed_to for index, size, _ in jobs)
        before = {index.path: edges(index.path, listing[index.path]) for index in changed if not is_remote(index.path)}
        with index_executor(parallel, new_bytes, sum(len(chunks) for _, _, chunks in jobs), is_remote(self.run_dir)) as indexing:
            unread = unchunked | self.index_files(jobs, max_samples, indexing, files_progress, samples_progress)
        selected, parsed, unparsed = self.parse_selected(max_samples, parallel, samples_progress)
        bundle = cached_together(list(self.files.values()))
        self.each_file(changed, lambda index: setattr(index, "identity", identity_after_pass(index, listing[index.path], before.get(index.path), index.path in unread)))
        # Written: the files read anew, and those of which lines were parsed (a larger selection's numbers are kept too)
        written = parsed | retexted | {index.path for index in changed}
        if not bundle:
            for path in written:
                self.cache.save(self.files[path])
            if written and self.run_cached:  # cached together before, its files grown past it: else read again at every restart
                self.cache.drop_run(self.run_dir)
                self.run_cached = False
        if bundle and written:
            self.cache.save_run(self.run_dir, self.files.values())
            self.run_cached = True
        previous = self.snapshots.get(max_samples) if run_format == self.built_format else None
        if changed or retexted or not same_files:  # a texts file dropped: every snapshot's rows point into it
            self.snapshots = {}
        self.built_format = run_format
        gone = tuple((valid_text(Path(path).name), 0, "note", f"gone since the run was loaded (deleted, or no longer a file): its {lines:,} line(s) are no longer shown") for path, lines in self.gone.items())
        gone += tuple((valid_text(Path(path).name), 0, "skipped", f"its new lines could not be read ({shorten(reason, 300)}): left out, read again at the next load") for path, reason in unread.items() if path not in unparsed)
        gone += tuple((valid_text(Path(path).name), 0, "skipped", f"its lines could not be read ({shorten(reason, 300)}): left out of this load, read again at the next") for path, reason in unparsed.items())
        snapshot = build_run(self.run_dir, self.files, selected, max_samples, dataclasses.replace(run_format, problems=run_format.problems + gone), self.cache.error, previous)
        if self.conversions:
            snapshot = dataclasses.replace(snapshot, source_files={known[1]: source for source, known in self.conversions.items() if known[1] in self.files})
        kept = [item for item in self.snapshots.items() if item[0] != max_samples]
        self.snapshots = dict(kept[len(kept) - (SNAPSHOTS_KEPT - 1) :] if SNAPSHOTS_KEPT > 1 else []) | {max_samples: snapshot}
        self.unparsed = {samples: files for samples, files in (self.unparsed | {max_samples: unparsed}).items() if samples in self.snapshots and files}
        return snapshot

    # Do something for each of some of its files (a few requests each, waited for): at once on object storage, one
    # after the other on disk.
    def each_file(self, items: list, work):
        if len(items) > 1 and is_remote(self.run_dir):
            with ThreadPoolExecutor(max_workers=CONVERSION_THREADS) as pool:
                list(pool.map(work, items))
        else:
            for item in items:
                work(item)

    # One pass over the new bytes of every changed file, chunks spread over the workers. Each chunk parses its file's
    # share of Max Samples Each Step per step: new lines are only in the changed files of a launch, so a step appended
    # to one rank file is parsed there in full, and one appended to every rank file a share in each.
    # Returns the files whose new bytes could not be read, with why (deleted since the listing): their new lines are left
    # out of this load, and read at the next.
    def index_files(self, jobs: list, max_samples: int, parallel: bool, files_progress, samples_progress) -> dict[str, str]:
        changed_per_launch = Counter(index.launch for index, _, _ in jobs)
        tasks = [
            (unless_unreadable, (index_chunk, index.path, start, end, math.ceil(max_samples / changed_per_launch[index.launch])))
            for index, _, chunks in jobs
            for start, end in chunks
        ]
        results = run_tasks(tasks, parallel)
        total_bytes = max(sum(end - start for _, _, chunks in jobs for start, end in chunks), 1)
        files_done, bytes_done, lines_done, unread = len(self.files) - len(jobs), 0, 0, {}
        for index, size, chunks in jobs:
            indexed = []
            for start, end in chunks:
                indexed.append(next(results))
                bytes_done += end - start
                lines_done += 0 if isinstance(indexed[-1], Unread) else len(indexed[-1].lines.offset)
                if samples_progress:
                    samples_progress(bytes_done / total_bytes, f"Processing {lines_done} samples...")
            failed = next((chunk.reason for chunk in indexed if isinstance(chunk, Unread)), None)
            if failed is None:
                index.add_chunks(indexed, size)
            else:
                unread[index.path] = failed
            files_done += 1
            if files_progress:
                files_progress(files_done / len(self.files), f"Loading {files_done} / {len(self.files)} files...")
        if files_progress and not jobs:
            files_progress(1.0, f"Loading {len(self.files)} / {len(self.files)} files...")
        return unread

    # Parse lines of unknown step first, then what the selection wants, until it wants nothing new
    # (a line that turns out bad makes room for the next one of its step); returns the selection, the paths of the
    # files of which lines were parsed, and those whose lines could not be read (deleted since the listing), with why:
    # left out of this selection.
    def parse_selected(self, max_samples: int, parallel: "bool | Executor | None", progress) -> tuple["Selection", set[str], dict[str, str]]:
        unknown = {path: np.flatnonzero((index.lines["status"] == UNPARSED) & np.isnan(index.lines["step"])) for path, index in self.files.items()}
        unparsed: dict[str, str] = {}
        parsed = self.parse_rows(unknown, parallel, progress, unparsed)
        wider: dict[float, int] = {}  # steps whose lines parsed last were bad: twice as many of their next are parsed
        while True:
            readable = {path: index for path, index in self.files.items() if path not in unparsed}
            wanted = select_lines(readable, max_samples)
            todo = {path: rows[self.files[path].lines["status"][rows] == UNPARSED] for path, rows in wanted.rows.items()}
            if not any(len(rows) for rows in todo.values()):
                return wanted, parsed - set(unparsed), unparsed
            if wider:  # the lines the selection would take next, were these bad too: a step of thousands of bad lines took as many rounds over every line
                todo = {path: rows[self.files[path].lines["status"][rows] == UNPARSED] for path, rows in select_lines(readable, max_samples, wider).rows.items()}
            parsed |= self.parse_rows(todo, parallel, progress, unparsed)
            for path, rows in todo.items():
                lines = self.files[path].lines
                for step in np.unique(lines["step"][rows[lines["status"][rows] == BAD]]).tolist():
                    wider[step] = 2 * wider.get(step, max_samples)

    # Parse the rows of each file in todo; returns the paths of the files of which rows were parsed, and adds to
    # unparsed those that could not be read, with why. parallel None: on the workers when the rows are big enough (a
    # raised Max Samples Each Step parses many lines of files already indexed, which have no new bytes).
    def parse_rows(self, todo: dict, parallel: "bool | Executor | None", progress, unparsed: dict[str, str]) -> set[str]:
        if parallel is None:
            parallel = WORKERS > 1 and sum(int(self.files[path].lines["length"][rows].sum()) for path, rows in todo.items()) > PARALLEL_MIN_BYTES
        tasks, owners = [], []
        for path, rows in todo.items():
            lines = self.files[path].lines
            offsets, lengths = lines["offset"], lines["length"]
            for part in batches_of_rows(rows, lengths):
                tasks.append((unless_unreadable, (summarize_lines, path, offsets[part], lengths[part])))
                owners.append((path, part))
        total, done = sum(len(part) for _, part in owners), 0
        for (path, part), result in zip(owners, run_tasks(tasks, parallel)):
            if isinstance(result, Unread):
                unparsed.setdefault(path, result.reason)
            else:
                self.files[path].add_summaries(part, result)
            done += len(part)
            if progress:
                progress(done / total, f"Processing {done} / {total} more samples...")
        return {path for path, _ in owners}


# Where a load's chunks are indexed (run_tasks' parallel): the executor or the worker processes asked for, or theirs
# when there is much to parse (parallel None); else, on object storage, threads when there are several chunks (many
# small objects: each a request, whose round trip, not the parse, is the time: 300 objects of 30 kB took 24 s one
# after the other at 30 ms a request); else this thread.
@contextlib.contextmanager
def index_executor(parallel: "bool | Executor | None", new_bytes: int, chunks: int, remote: bool):
    processes = (WORKERS > 1 and new_bytes > PARALLEL_MIN_BYTES) if parallel is None else parallel
    if processes or not remote or chunks < 2:
        yield processes
        return
    with ThreadPoolExecutor(max_workers=CONVERSION_THREADS) as threads:
        yield threads


# A file's first and last 4 KiB of the bytes it was listed with, hashed (None where it cannot be read): taken before a
# pass over them and after, they differ where the file was rewritten meanwhile (its identity, taken after the pass,
# would hash the new bytes, and the next load would take the rewrite for an append of the old).
def edges(path: str, status: "FileStatus") -> tuple[str, str] | None:
    identity = read_identity(path, status.size, status)
    return identity and (identity.head_hash, identity.tail_hash)


# A changed file's identity after the pass over it; None (read anew at the next load) where its new bytes could not be
# read, or it was rewritten while they were (asked after the identity is taken: a rewrite in between is seen too).
def identity_after_pass(index: FileIndex, status: "FileStatus", edges_before: tuple | None, unread: bool) -> FileIdentity | None:
    if unread:
        return None
    identity = read_identity(index.path, index.indexed_to, status)
    return None if rewritten_meanwhile(index.path, status, edges_before) else identity


# Whether a file was rewritten while a pass read it: on disk its edges changed (an append leaves them); on object
# storage it is another object than listed (an upload, whole each time, has its own ETag; a store that gives none,
# hf://, cannot tell). Where it cannot be read, so.
def rewritten_meanwhile(path: str, status: "FileStatus", edges_before: tuple | None) -> bool:
    if not is_remote(path):
        return edges_before is None or edges(path, status) != edges_before
    if not status.etag:
        return False
    try:
        return file_status(path).etag != status.etag
    except OSError:
        return True


# The files of a run on disk that this process may open, and a load-report row for each other (a rank file a trainer
# in a container wrote as root with mode 600; one whose mode changed since: a chmod changes no size or time): the
# run's other files are shown. Asked at each listing (access(2): 3,000 files in 5 ms; opening each took 20 ms), and a
# file it refuses is opened for the reason.
def readable_files(sources: dict[str, "FileStatus"], run_format: "RunFormat") -> tuple[dict[str, "FileStatus"], "RunFormat"]:
    unreadable = {}
    for path in sources:
        if not is_remote(path) and not os.access(path, os.R_OK, effective_ids=os.access in os.supports_effective_ids):
            try:
                open(path, "rb").close()
            except OSError as error:
                unreadable[path] = error.strerror or type(error).__name__
    if not unreadable:
        return sources, run_format
    problems = tuple((valid_text(Path(path).name), 0, "skipped", f"cannot be read ({reason}): left out, read once it can be") for path, reason in unreadable.items())
    return {path: status for path, status in sources.items() if path not in unreadable}, dataclasses.replace(run_format, problems=run_format.problems + problems)


# Whether a file no longer listed is still a file on disk (one that cannot be read: not gone, its own row says why).
def still_a_file(path: str) -> bool:
    return not is_remote(path) and os.path.isfile(path)


# Runs are the root's sub-folders, and the root itself when one of the formats' layouts makes it a run (it holds rank
# files, TRL's completions, prime-rl's token_exports/, NeMo-RL's train_data_step<N>.jsonl...) or, on disk, it holds a
# training history: a user pointed it at a run or at a trainer's output folder. Then its sub-folders that the layouts
# say are the run's (prime-rl's rollouts/ and logs/, NeMo-RL's tensorboard/, the Trainer's checkpoint-*) are not
# listed. A sub-folder named as the logger's default folder of runs (a trainer's output_dir/rollout_samples/) stands
# for the runs inside it, each listed as rollout_samples/<run>. One listing of the root (and of that folder), nothing
# read (a sub-folder is listed without looking inside it).
def list_runs(root: str) -> list[str]:
    folder_path = root if is_remote(root) else str(Path(root).expanduser())
    entries = list_folder(folder_path)
    folders = [entry.name for entry in entries if entry.is_dir]
    files = tuple(entry for entry in entries if not entry.is_dir)  # a name that is not UTF-8 too: the load report names it
    layouts = run_layouts(Folder(folder_path, files, frozenset(folders), ()))
    if not layouts and (is_remote(root) or history_signature(folder_path) == ()):
        return runs_inside_rollouts_folder(folder_path, folders)
    layouts += (TRAINER_OUTPUT,)
    return ["."] + runs_inside_rollouts_folder(folder_path, [name for name in folders if not any(layout.holds(name) for layout in layouts)])


def runs_inside_rollouts_folder(folder_path: str, folders: list[str]) -> list[str]:
    if ROLLOUTS_FOLDER not in folders:
        return folders
    path = joined(folder_path, ROLLOUTS_FOLDER)
    entries = list_folder(path)
    inner = [entry.name for entry in entries if entry.is_dir]
    if run_layouts(Folder(path, tuple(entry for entry in entries if not entry.is_dir), frozenset(inner), ())):
        return folders  # a run of that name
    inside = sorted(f"{ROLLOUTS_FOLDER}/{name}" for name in inner)
    position = folders.index(ROLLOUTS_FOLDER)
    return folders[:position] + (inside or [ROLLOUTS_FOLDER]) + folders[position + 1:]
