"""Append-only JSONL writing off the training thread."""

from __future__ import annotations

import atexit
import errno
import importlib.util
import io
import json
import math
import os
import queue
import threading
from pathlib import Path
from typing import Any, Callable

WRITER_NICENESS = 10  # added to the thread's niceness; 19 is the lowest priority
STALLED_SECONDS = 60.0  # at the end, how long the writer may write no batch (a hung network mount) before it is left

if importlib.util.find_spec("orjson") is not None:
    import orjson
else:
    orjson = None


def json_line(record: dict) -> bytes:
    """One record as a UTF-8 JSON line ending in "\\n"; NaN and ±Infinity become `null`, which stays valid JSON."""
    if orjson is not None:
        try:
            return orjson.dumps(record) + b"\n"  # orjson already writes non-finite floats as null
        except TypeError:  # an integer beyond 64 bits, a lone surrogate, nesting past 254: the standard library's way
            pass
    try:
        text = json.dumps(record, ensure_ascii=False, allow_nan=False)
    except ValueError:  # a non-finite float somewhere: replace it and encode again
        text = json.dumps(_finite_or_null(record), ensure_ascii=False, allow_nan=False)
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:  # a lone surrogate (a file name os.listdir decoded): written as its escape, \\udcxx
        return json.dumps(_finite_or_null(record), allow_nan=False).encode("ascii") + b"\n"


def _finite_or_null(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite_or_null(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_null(item) for item in value]
    return value


def _write_whole(file, data: bytes) -> None:
    """An unbuffered write may take only part of the data (a nearly full disk): write the rest until it raises."""
    view = memoryview(data)
    while view:
        written = file.write(view)
        if not written:  # taking nothing, it would never finish
            raise OSError(errno.EIO, "the file took no bytes")
        view = view[written:]


def _deleted(file, path: Path) -> bool:
    """Whether the open file was deleted (its folder removed meanwhile): lines written to it would be lost unseen. A
    file system that counts no links of a live file is told apart by its path, which still names the same file."""
    try:
        opened = os.fstat(file.fileno())
        if opened.st_nlink:
            return False
        named = os.stat(path)
    except FileNotFoundError:
        return True
    except (OSError, ValueError):  # no descriptor to ask: not told
        return False
    return (named.st_ino, named.st_dev) != (opened.st_ino, opened.st_dev)


def _yield_to_training() -> None:
    """Lowers this thread's scheduling priority where the system can (Linux: a thread has a priority of its own), so
    that on a machine whose cores training keeps busy the logger's work waits for idle time instead of taking it."""
    try:
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, min(os.getpriority(os.PRIO_PROCESS, thread) + WRITER_NICENESS, 19))
    except (AttributeError, OSError):  # no such call here, or not allowed: the thread keeps its priority
        pass


class JsonlWriter:
    """
    Appends records to one JSONL file from a background thread, so serialising and writing never hold up training.

    Each call of `write` becomes whole lines, written together or not at all: the file is unbuffered, and a batch an
    I/O error (full disk, lost permission) cuts short is cut from the file again. Such an error stops all further
    writes and sets `failed`; a record that cannot be serialised is skipped. Either is reported once through
    `warn(kind, message)`, and training goes on. The thread runs at a lower scheduling priority where the system
    allows it (Linux), so that on busy cores its work takes idle time rather than training's.

    Args:
        path (`Path`):
            The file to append to; opening it raises `OSError` to the caller.
        warn (`Callable[[str, str], None]`):
            Reports a problem: a short kind (`"serialize"` or `"io"`) and a message.
        prepare (`Callable[[list[dict]], None]`, *optional*):
            Run on the writing thread on each batch before it is serialised, e.g. to write its images; it may change
            the records, and reports its own problems.
        summaries (`Path`, *optional*):
            Where to write the lines' summaries file (`rollout_logger.metadata.SUMMARIES_SUFFIX`): after each batch's
            lines, on the writing thread, the board's summary of them, so that the board opens the run without
            parsing them, and before it the texts of the lines in the texts file (`TEXTS_SUFFIX`, beside the rank
            file), so that showing a step reads those. Only for a file started empty, and where the board's reading
            layer imports (msgspec, pysimdjson and google-re2 installed; else a warning, kind `"summaries"`). Their
            failures stop them alone, with a warning.
    """

    def __init__(
        self,
        path: Path,
        warn: Callable[[str, str], None],
        prepare: Callable[[list[dict]], None] | None = None,
        summaries: Path | None = None,
    ):
        self.path = path
        self._warn = warn
        self._prepare = prepare
        self._file = open(path, "ab", buffering=0)
        self._size = self._file.seek(0, io.SEEK_END)  # where a batch that fails is cut back to
        # A summaries file must start with the rank file: none for lines another writer began (the board reads them).
        self._summaries_path = summaries if summaries is not None and self._size == 0 else None
        self._summaries = None  # the summaries file, open on the writing thread
        self._texts = None  # the texts file, open with it
        self._summaries_started = False
        self.failed = False  # set by the writing thread after an I/O error; nothing is written from then on
        self._batches_done = 0  # by the writing thread
        self._queue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._drain, name="rollout-logger-writer", daemon=True)
        self._thread.start()
        atexit.register(self.close)  # a run that dies with an exception still gets its queued lines written

    def write(self, records: list[dict]) -> None:
        """Queues records to be written as one batch; the caller must not change them afterwards."""
        if records:
            self._queue.put(records)

    def close(self) -> None:
        """Writes everything queued, then closes the file; gives up, with a warning, once the writing thread has
        finished no batch for STALLED_SECONDS (a disk that hangs: the end of training would wait for it for good)."""
        atexit.unregister(self.close)
        if not self._thread.is_alive():
            return
        self._queue.put(None)
        while True:
            batches = self._batches_done
            self._thread.join(STALLED_SECONDS)
            if not self._thread.is_alive():
                return
            if self._batches_done == batches:
                left = max(self._queue.qsize() - 1, 0)  # the end marker put above is no batch
                self._warn("stalled", f"writing {self.path} finished nothing for {STALLED_SECONDS:.0f} s: the batch being written, and the {left} after it, are left (written if the disk comes back while the process lives)")
                return

    def _drain(self) -> None:
        _yield_to_training()
        while (records := self._queue.get()) is not None:
            try:
                self._write_batch(records)
            except Exception as error:  # the thread must live on: a dead one would leave every later batch queued
                self._warn("writer", f"writing a batch of rollout data to {self.path} failed ({error!r}); later batches are still written")
            self._batches_done += 1
        self._close_file()
        self._stop_summaries()

    def _write_batch(self, records: list[dict]) -> None:
        if self._file is None:  # an I/O error stopped the writing: not even serialised
            return
        if self._prepare is not None:
            try:
                self._prepare(records)
            except Exception as error:  # its records may not serialise now; the thread must live on
                self._warn("prepare", f"preparing rollout lines failed ({error!r})")
        lines = []
        for record in records:
            try:
                lines.append(json_line(record))
            except Exception as error:  # e.g. a value JSON cannot hold: lose this sample, keep the rest
                self._warn("serialize", f"a sample could not be written as JSON and was skipped ({error!r})")
        data = b"".join(lines)
        try:
            if data and _deleted(self._file, self.path):
                raise OSError(errno.ENOENT, "the file was deleted")
            _write_whole(self._file, data)
        except OSError as error:
            self.failed = True
            self._warn("io", f"writing {self.path} failed ({error}); no more rollout data is written")
            self._cut_back()
            self._close_file()
            return
        offset, self._size = self._size, self._size + len(data)
        if not self._summaries_started:
            self._open_summaries()  # once lines are written: a file that cannot be written at all warns once
        self._add_summaries(data, offset)

    def _open_summaries(self) -> None:
        self._summaries_started = True
        if self._summaries_path is None:
            return
        try:
            import rl_board.reading.summaries as summaries  # the board's own summary of a line: both give the same
        except Exception as error:  # not installed, or a binary that does not load (numpy's "dtype size changed")
            self._warn("summaries", f"no summaries file is written ({error}): the board parses the lines when it opens the run")
            return
        self._summaries_of = summaries.batch_record
        try:
            self._summaries = open(self._summaries_path, "wb", buffering=0)
            self._texts = open(summaries.texts_file(str(self.path)), "wb", buffering=0)
            self._summaries.write(summaries.summaries_header(self.path.name))
        except Exception as error:  # the lines are written; the board parses them instead
            self._summaries_failed(error)

    def _add_summaries(self, data: bytes, base: int) -> None:
        """Appends the texts and the record of a batch written at byte `base`, the texts first (the record says where
        they are); what a failure cuts short is cut off again."""
        if self._summaries is None or not data:
            return
        try:
            texts_end, end = self._texts.tell(), self._summaries.tell()
            texts, record = self._summaries_of(data, base, texts_end)
        except Exception as error:  # the lines are written; the board parses them instead
            self._summaries_failed(error)
            return
        try:
            _write_whole(self._texts, texts)
            _write_whole(self._summaries, record)
        except OSError as error:
            for file, size in ((self._texts, texts_end), (self._summaries, end)):
                try:
                    file.truncate(size)
                except OSError:
                    pass  # the board ignores a last record cut short, and texts no record names
            self._summaries_failed(error)

    def _summaries_failed(self, error: Exception) -> None:
        self._warn("summaries", f"writing {self._summaries_path} failed ({error!r}); the board parses the lines past it")
        self._stop_summaries()

    def _stop_summaries(self) -> None:
        for file in (self._summaries, self._texts):
            if file is not None:
                try:
                    file.close()
                except OSError:
                    pass
        self._summaries = self._texts = None

    def _cut_back(self) -> None:
        """Removes what a failed batch left, so the file ends with the last whole batch."""
        try:
            self._file.truncate(self._size)
        except OSError:
            pass  # the file keeps a cut-off line, which readers report; the write error was reported

    def _close_file(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass  # the error that matters was reported when the write failed
            self._file = None
