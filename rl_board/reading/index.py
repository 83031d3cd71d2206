"""The per-file index: where each line is (offset, length), its step and the summary numbers the charts need, built by
one pass over the file (on the workers) and read on from where it stopped when the file grows (FileIndex); kept on
disk (or in a prefix of object storage) as Arrow files per rank file, keyed by the file's identity (IndexCache), so a
restarted server opens a run at once. A file that grew adds a small segment file of its new rows to its cache, not a
new copy of the whole index.
A run of many small files (a file per step: verl, TRL, AReaL, ROLL) keeps its files' indexes in one Arrow file, so that
reopening it reads one cache file, not thousands."""
import dataclasses
import hashlib
import json
import os
import re
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.feather
import pyarrow.parquet

from rl_board.reading.lines import (
    FIELD_COLUMNS,
    FIELD_PREFIXES,
    SUMMARY_NUMBERS,
    SUMMARY_TEXTS,
    TEXTS_DECODER,
    BadLine,
    IndexedChunk,
    LineSummaries,
    decode_line,
    missing,
    missing_values,
    scan_lines,
    summarize_buffer,
)
from rl_board.reading.storage import (
    Entry,
    FileStatus,
    canonical_path,
    file_status,
    is_remote,
    joined,
    lower_scheme,
    read_file,
    read_range,
    read_spans,
    remove_file,
    shown_url,
    without_secrets,
    write_file,
)
from rl_board.reading.summaries import (
    SPOT_CHECKS,
    RejectedSummaries,
    disagreement,
    read_more_summaries,
    read_summaries,
    texts_file,
)
from rollout_logger.metadata import RANK_FILE_PATTERN

CACHE_FORMAT = 12  # 12, 11: the checksum covers the schema and each column's length and nulls; 10: a checksum beside the facts; 9: an optional key of the wrong type is left out with a note (its line was skipped); 8: numbers beyond a float's range read as ±inf with a note


# Each line's place (its texts' too, in the logger's texts file: -1 where there are none), step and parse status.
LINE_COLUMNS = {"line": np.int64, "offset": np.int64, "length": np.int64, "step": float, "status": np.int8, "texts_offset": np.int64, "texts_length": np.int64}


UNPARSED, GOOD, BAD = 0, 1, 2


INDEX_COLUMNS = list(LINE_COLUMNS) + SUMMARY_NUMBERS + SUMMARY_TEXTS


# A file's identity when indexed: a replaced, truncated or rewritten file never matches it.
@dataclass
class FileIdentity:
    size: int
    mtime_ns: int
    inode: int
    device: int
    indexed_to: int
    head_hash: str
    tail_hash: str
    etag: str = ""  # an object's, on object storage (where mtime, inode and device are 0)


# Hash the first and last 4 KiB of the indexed bytes: enough to tell an append from a rewrite. Up to 8 KiB, one read
# (on object storage, a request fewer for each of a run's many small objects).
def read_identity(path: str, indexed_to: int, status: "FileStatus | None" = None) -> FileIdentity | None:
    tail_start = max(0, indexed_to - 4096)
    try:
        status = status or file_status(path)
        if indexed_to <= 8192:
            data = read_bytes(path, 0, indexed_to)
            head, tail = data[:4096], data[tail_start:]
        else:
            head, tail = read_bytes(path, 0, 4096), read_bytes(path, tail_start, indexed_to)
    except OSError:
        return None
    return FileIdentity(
        size=status.size,
        mtime_ns=status.mtime_ns,
        inode=status.inode,
        device=status.device,
        indexed_to=indexed_to,
        head_hash=hashlib.sha1(head).hexdigest(),
        tail_hash=hashlib.sha1(tail).hexdigest(),
        etag=status.etag,
    )


# Bytes [start, end) of a file as they are (fewer where it is shorter now), not the read buffer's stale bytes past them.
def read_bytes(path: str, start: int, end: int) -> bytes:
    buffer, got = read_range(path, start, end)
    return bytes(buffer[:got])


# "same", "grew" (the bytes `old` covers unchanged, more after them) or "new" (replaced, truncated, rewritten) for a
# file now `status` that had identity `old`. An object on object storage is the same while its size and ETag are; one
# uploaded again with more bytes grew when the bytes `old` covers are unchanged.
def identity_change(path: str, old: FileIdentity | None, status: "FileStatus") -> str:
    if old is None or (status.inode, status.device) != (old.inode, old.device) or status.size < old.indexed_to:
        return "new"
    if (status.size, status.mtime_ns, status.etag) == (old.size, old.mtime_ns, old.etag):
        return "same"
    if status.size == old.size:  # touched or rewritten in place: appends always grow a file
        return "new"
    now = read_identity(path, old.indexed_to)
    if now is None or (now.head_hash, now.tail_hash) != (old.head_hash, old.tail_hash):
        return "new"
    return "grew"


# What a file's cache holds (IndexCache): its whole index as written once (the base, its write id and rows), then
# the segments appended to it, each of the rows added since, up to `rows`.
class CachedIndex(NamedTuple):
    write_id: str
    base_rows: int
    segments: int
    rows: int


# One rank file: a row per line with where it is, its step and, once parsed, its numbers.
class FileIndex:
    def __init__(self, path: str):
        self.path = path
        self.launch = launch_of(path)
        self.cached: CachedIndex | None = None
        self.reset()

    # An index as a cache kept it: its lines' columns and its facts (CACHE_FORMAT's meta of one file).
    @classmethod
    def restored(cls, path: str, lines: dict, meta: dict) -> "FileIndex":
        index = cls.__new__(cls)
        index.path, index.launch, index.index_id = path, launch_of(path), uuid.uuid4().hex
        index.identity = FileIdentity(**meta["identity"])
        index.indexed_to = int(meta["identity"]["indexed_to"])
        index.physical_lines = int(meta["physical_lines"])
        index.incomplete_tail = int(meta["incomplete_tail"])
        index.problems = [tuple(problem) for problem in meta["problems"]]
        index.summaries_end = int(meta["summaries_end"])
        index.summaries_refused = bool(meta.get("summaries_refused", not index.summaries_end))  # a cache before the flag: as then
        index.fields_left_out = int(meta.get("fields_left_out", 0))
        index.first_field_left_out = tuple(meta["first_field_left_out"]) if meta.get("first_field_left_out") else None
        index.problems_left_out = int(meta.get("problems_left_out", 0))
        index.last_left_out_line = int(meta.get("last_left_out_line", 0))
        index.tail_columns = list(meta.get("tail_columns", []))
        index.texts_identity = FileIdentity(**meta["texts_identity"]) if meta["texts_identity"] else None
        index.lines = lines
        index.cached = None
        index.first_changed_row = len(lines["offset"])
        return index

    # Its facts as a cache keeps them beside its lines.
    def facts(self) -> dict:
        return dict(
            identity=self.identity.__dict__, physical_lines=self.physical_lines, incomplete_tail=self.incomplete_tail, problems=self.problems,
            summaries_end=self.summaries_end, summaries_refused=self.summaries_refused, texts_identity=self.texts_identity and self.texts_identity.__dict__,
            fields_left_out=self.fields_left_out, first_field_left_out=self.first_field_left_out, problems_left_out=self.problems_left_out,
            last_left_out_line=self.last_left_out_line, tail_columns=self.tail_columns,
        )

    def reset(self):
        self.index_id = uuid.uuid4().hex  # new whenever the file is indexed from scratch: till then it only grew
        self.identity: FileIdentity | None = None
        self.indexed_to = 0
        self.physical_lines = 0
        self.incomplete_tail = 0
        self.lines = {name: np.array([], dtype=dtype) for name, dtype in LINE_COLUMNS.items()} | empty_summaries(0)
        self.problems: list[tuple[int, str, str]] = []
        self.first_changed_row = 0  # the first of the rows its cache holds that changed since (rows past them are new)
        self.summaries_end = 0  # where the records of its summaries file taken so far end (0: none are taken)
        self.summaries_refused = False  # its summaries file disagreed with it: its lines are read from the file from then on
        self.texts_identity: FileIdentity | None = None  # its texts file's, up to the end of the records taken (None: none)
        self.fields_left_out = 0  # values of field names past the file's FIELD_COLUMNS, in the lines parsed
        self.first_field_left_out: tuple[int, str] | None = None  # the first line with one, and its name
        self.problems_left_out = 0  # problems of its lines past the PROBLEMS_LISTED listed
        self.last_left_out_line = 0  # the last line with a field value or a problem left out (0: none)
        self.tail_columns: list[str] = []  # the columns a last line taken without its newline made

    # "same", "grew" (read on from indexed_to) or "new" (replaced, truncated, rewritten or never indexed).
    def change(self, status: "FileStatus | None" = None) -> str:
        try:
            status = status or file_status(self.path)
        except OSError:
            return "same"
        return identity_change(self.path, self.identity, status)

    # How its texts file changed since its records were taken, as change() says (`status` its listing's entry's, None
    # where it is gone: "new"); "same" where none are taken.
    def texts_change(self, status: "FileStatus | None") -> str:
        if self.texts_identity is None:
            return "same"
        return identity_change(texts_file(self.path), self.texts_identity, status) if status else "new"

    # Keep using its texts file's records where it only grew since (the logger adds a step's as it writes them), and
    # stop where it was replaced, rewritten or removed: a record is trusted as its line's only while the bytes checked
    # are the same. Returns whether its rows changed (their texts then come from their lines).
    def follow_texts(self, status: "FileStatus | None") -> bool:
        change = self.texts_change(status)
        if change == "grew":
            self.texts_identity = dataclasses.replace(self.texts_identity, size=status.size, mtime_ns=status.mtime_ns, etag=status.etag)
        if change != "new":
            return False
        reason = "it changed since its records were checked" if status else "it is gone"
        self.drop_texts(reason)
        return True

    # Its lines' texts records are not used from here on (a note says why): a step's texts are read from its lines.
    # Its rows change, so it gets a new index_id, and its cache is written whole.
    def drop_texts(self, reason: str):
        self.lines["texts_offset"] = np.full(len(self.lines["offset"]), -1, dtype=np.int64)
        self.lines["texts_length"] = np.full(len(self.lines["offset"]), -1, dtype=np.int64)
        self.texts_identity = None
        self.index_id = uuid.uuid4().hex
        self.first_changed_row = 0
        self.problems.append((self.physical_lines, "note", f"{Path(texts_file(self.path)).name} not used ({reason}): a step's texts are read from its lines"))

    # Append indexed chunks (in file order) and settle what follows the last newline.
    def add_chunks(self, chunks: list["IndexedChunk"], size: int):
        first_rows = []
        parts = []
        rows = len(self.lines["offset"])
        for chunk in chunks:
            lines = chunk.lines
            parts.append({
                "line": lines.line_index + self.physical_lines + 1,
                "offset": lines.offset,
                "length": lines.length,
                "step": lines.step_hint,
                "status": np.full(len(lines.offset), UNPARSED, dtype=np.int8),
                "texts_offset": chunk.texts_places[0] if chunk.texts_places else np.full(len(lines.offset), -1, dtype=np.int64),
                "texts_length": chunk.texts_places[1] if chunk.texts_places else np.full(len(lines.offset), -1, dtype=np.int64),
            } | empty_summaries(len(lines.offset)))
            first_rows.append(rows)
            rows += len(lines.offset)
            self.physical_lines += lines.physical_lines
            self.indexed_to = lines.complete_end
        if chunks:  # a rewards/<name> or extra column exists once a parsed line had it: missing in the new rows
            self.lines = {
                name: np.concatenate([column] + [part.get(name, missing_values(name, len(part["offset"]))) for part in parts])
                for name, column in self.lines.items()
            }
        for first_row, chunk in zip(first_rows, chunks):
            self.add_summaries(first_row + chunk.parsed_rows, chunk.summary)
        self.take_tail(size)

    # Index the lines its summaries file (the logger's, beside it: rl_board.reading.summaries) covers without parsing
    # them, when the file agrees with it: the records follow each other from byte 0, their lines lie in order inside
    # their batches, and SPOT_CHECKS lines spread over them (the first, the last) are whole lines whose parse gives what
    # it holds. Otherwise it is not used (a note says why) and the lines are read from the file. The lines past it are
    # read as any file's.
    # Its texts file (rl_board.reading.summaries.texts_file) is checked the same way, and not used where it disagrees.
    # A file indexed in part already (its summaries file seen only now: the board opened the run before the logger wrote
    # a batch, or while it was writing the header) has the records of its lines up to there passed over.
    def take_summaries(self, summaries: "Entry", size: int):
        start = self.scan_start()
        try:
            raw, got = read_range(summaries.path, 0, summaries.status.size)
            chunks, end = read_summaries(bytes(raw[:got]), Path(self.path).name, size, start)
        except (OSError, RejectedSummaries) as error:
            self.summaries_rejected(summaries, error, self.physical_lines)
            return
        self.take_checked(summaries, chunks, end, start)

    # The records its summaries file gained since (a live run's steps), taken as at the first: a record of lines parsed
    # meanwhile (written before their record) is passed over. One that disagrees ends their use, with a note.
    def take_more_summaries(self, summaries: "Entry", size: int):
        if self.summaries_refused or summaries.status.size <= self.summaries_end:
            return
        if not self.summaries_end:  # none taken yet
            self.take_summaries(summaries, size)
            return
        start = self.scan_start()
        try:
            raw, got = read_range(summaries.path, self.summaries_end, summaries.status.size)
            chunks, end = read_more_summaries(bytes(raw[:got]), self.summaries_end, start, size)
        except (OSError, RejectedSummaries) as error:
            self.summaries_rejected(summaries, error, self.physical_lines)
            return
        self.take_checked(summaries, chunks, end, start)

    # Chunks of its summaries file's records from byte start of the file, used where they leave out no line and their
    # spot checks agree (their texts records, where theirs do): SPOT_CHECKS lines of the first records, the last line
    # of those a live run added since.
    def take_checked(self, summaries: "Entry", chunks: list[IndexedChunk], end: int, start: int):
        try:
            check_cover(self.path, chunks, start)
            texts_problem = check_spots(self.path, chunks, SPOT_CHECKS if not self.summaries_end else 1)
        except (OSError, RejectedSummaries) as error:
            self.summaries_rejected(summaries, error, self.physical_lines)
            return
        if texts_problem:
            chunks = [dataclasses.replace(chunk, texts_places=None) for chunk in chunks]
            self.problems.append((self.physical_lines, "note", f"{Path(texts_file(self.path)).name} not used ({texts_problem}): a step's texts are read from its lines"))
        if chunks:
            self.add_chunks(chunks, chunks[-1].lines.complete_end)
        self.summaries_end = end
        if any(chunk.texts_places is not None for chunk in chunks):
            self.texts_identity = self.texts_checked()
            if self.texts_identity is None:
                self.drop_texts("it cannot be read")

    # Its texts file's identity up to the end of the records its rows use (None where it cannot be read).
    def texts_checked(self) -> FileIdentity | None:
        used = self.lines["texts_length"] >= 0
        end = int((self.lines["texts_offset"][used] + self.lines["texts_length"][used]).max()) if used.any() else 0
        return read_identity(texts_file(self.path), end)

    def summaries_rejected(self, summaries: "Entry", error: Exception, line: int):
        reason = error if isinstance(error, RejectedSummaries) else f"it cannot be read: {error}"
        past = f" past line {line}" if line else ""
        self.problems.append((line, "note", f"{summaries.name} not used ({reason}): the lines{past} were read from the file"))
        self.summaries_end, self.summaries_refused = 0, True

    # Bytes after the last newline: a complete JSON object is a last line without "\n"; anything else is still being written.
    def take_tail(self, size: int):
        self.incomplete_tail = 0
        self.tail_columns = []
        if size <= self.indexed_to:
            return
        tail = bytes(read_range(self.path, self.indexed_to, size)[0][: size - self.indexed_to])
        if not tail.strip():
            return
        try:
            json.loads(tail.decode("utf-8", errors="replace"))
        except ValueError:
            self.incomplete_tail = 1
            return
        data = tail + b"\n"
        lines = dataclasses.replace(scan_lines(data, len(data), self.indexed_to), complete_end=size)
        summary = summarize_buffer(data, self.indexed_to, lines.offset, lines.length)
        before = set(self.lines)
        self.add_chunks([IndexedChunk(lines, np.arange(len(lines.offset)), summary)], size)
        self.tail_columns = [name for name in self.lines if name not in before]

    # Store parse results for rows of self.lines, in place.
    def add_summaries(self, rows: np.ndarray, result: "LineSummaries"):
        lines, good = self.lines, result.good
        if len(rows):
            self.first_changed_row = min(self.first_changed_row, int(rows.min()))
        lines["status"][rows] = np.where(good, GOOD, BAD)
        lines["step"][rows[good]] = result.step[good]
        for name, values in (result.numbers | result.texts).items():
            lines.setdefault(name, missing_values(name, len(lines["offset"])))[rows] = values
        columns = sum(name.startswith(FIELD_PREFIXES) for name in lines)
        # The names as they come in the lines: a part's columns', then its other names' (with the rows of their values).
        for name, (at, values) in [(name, (None, column)) for name, column in result.fields.items()] + list(result.more_fields.items()):
            target = rows if at is None else rows[at]
            if name not in lines:
                if columns >= FIELD_COLUMNS:
                    self.leave_out_field(name, target[~missing(values)])
                    continue
                columns += 1
                lines[name] = missing_values(name, len(lines["offset"]))
            lines[name][target] = values
        room = max(PROBLEMS_LISTED - len(self.problems), 0)
        self.problems += [(int(lines["line"][rows[i]]), kind, text) for i, kind, text in result.problems[:room]]
        if len(result.problems) > room:
            self.problems_left_out += len(result.problems) - room
            self.last_left_out_line = max(self.last_left_out_line, int(lines["line"][rows[[i for i, _, _ in result.problems[room:]]]].max()))

    # Count the values of a name that came after the file's FIELD_COLUMNS (at rows), and the first line with one.
    def leave_out_field(self, name: str, rows: np.ndarray):
        if not len(rows):
            return
        self.fields_left_out += len(rows)
        lines = self.lines["line"][rows]
        if self.first_field_left_out is None or int(lines.min()) < self.first_field_left_out[0]:
            self.first_field_left_out = (int(lines.min()), name)
        self.last_left_out_line = max(self.last_left_out_line, int(lines.max()))

    # Where scanning resumes: past the line end (a newline, and spaces or a carriage return before it) that ends a last
    # line taken without one, as a parse of the whole file reads it; at that line's start where something else follows
    # it (a writer that left its newline out), so that it is read with what follows, as one line, as a whole parse reads it.
    def scan_start(self) -> int:
        offsets, lengths = self.lines["offset"], self.lines["length"]
        if self.indexed_to and offsets.size and offsets[-1] + lengths[-1] == self.indexed_to:
            buffer, got = read_range(self.path, self.indexed_to, self.indexed_to + LINE_END_BYTES)
            following = bytes(buffer[:got])
            if line_end := LINE_END.match(following):
                if line_end.end() > 1:  # the bytes before the newline are the line's, as a whole parse has them: a row changes
                    self.lines["length"][-1] += line_end.end() - 1
                    self.first_changed_row = min(self.first_changed_row, len(offsets) - 1)
                    self.index_id = uuid.uuid4().hex
                self.indexed_to += line_end.end()
            elif following.strip(b" \t\r"):
                self.take_back_last_line()
            elif following:  # the start of a line end (a CRLF's "\r" so far): the line's, as a whole parse has it
                self.lines["length"][-1] += len(following)
                self.first_changed_row = min(self.first_changed_row, len(offsets) - 1)
                self.index_id = uuid.uuid4().hex
                self.indexed_to += len(following)
        return self.indexed_to

    # Its last row no longer a line: its rows change (a new index_id), and it is read again from its start; the whole
    # file is, where that line made a column (kept, it kept its place among the file's columns and their count) or
    # something of it was only counted (a field's value, a problem past those listed).
    def take_back_last_line(self):
        row = len(self.lines["offset"]) - 1
        line = int(self.lines["line"][row])
        if self.tail_columns or line == self.last_left_out_line:
            self.reset()
            return
        self.indexed_to = int(self.lines["offset"][row])
        self.lines = {name: column[:row] for name, column in self.lines.items()}
        self.physical_lines = line - 1
        self.problems = [problem for problem in self.problems if problem[0] != line]
        self.first_changed_row = min(self.first_changed_row, row)
        self.index_id = uuid.uuid4().hex


# Raises RejectedSummaries where a spot-checked line of chunks (a summaries file's: `spots` lines spread over them,
# the last, then the first, then between) is not a whole line of the file at its place, or its parse differs from its
# summary. Returns, in words, where as many lines with a texts record do not decode from it as from the line; None
# where they do, or none has one. The lines and records are read at once (on object storage, one round of requests).
def check_spots(path: str, chunks: list[IndexedChunk], spots: int) -> str | None:
    counts = np.array([len(chunk.lines.offset) for chunk in chunks], dtype=np.int64)
    if not counts.sum():
        return None
    spots = spread(counts.sum(), spots)
    owners = np.searchsorted(np.cumsum(counts), spots, side="right")
    rows = spots - (np.cumsum(counts) - counts)[owners]
    places = [(int(chunks[owner].lines.offset[row]), int(chunks[owner].lines.length[row])) for owner, row in zip(owners, rows)]
    line_spans = ([path] * len(places), [max(offset - 1, 0) for offset, _ in places], [length + 1 + (offset > 0) for offset, length in places])
    texts = texts_spots(path, chunks, len(spots))
    try:
        spans = read_spans(*(first + second for first, second in zip(line_spans, texts[1:])))
        texts_problem = None
    except OSError as error:  # the texts file's, or the rank file's (then raised again)
        spans, texts_problem = read_spans(*line_spans), f"it cannot be read: {error}"
    for owner, row, (offset, length), span in zip(owners, rows, places, spans):
        line = span[1:] if offset > 0 else span
        if (offset > 0 and span[:1] != b"\n") or line[length : length + 1] != b"\n":
            raise RejectedSummaries(f"the file has no whole line at byte {offset}")
        reason = disagreement(chunks[owner], int(row), line[:length])
        if reason:
            raise RejectedSummaries(f"{reason}, at byte {offset}")
    return texts_problem or texts_disagreement(texts[0], spans[len(places) :])


# The bytes that chunks of summaries records from byte start leave between their lines (more than a line end: blank
# lines, or a line a record left out), read to check that they are blank: a record that leaves out a line is refused
# (its lines would be neither shown nor counted). The logger's leave none.
def check_cover(path: str, chunks: list[IndexedChunk], start: int):
    if not chunks:
        return
    offsets = np.concatenate([chunk.lines.offset for chunk in chunks])
    begins = np.concatenate([[start], offsets + np.concatenate([chunk.lines.length for chunk in chunks])])
    ends = np.concatenate([offsets, [chunks[-1].lines.complete_end]])
    gaps = np.flatnonzero(ends - begins > len(b"\r\n"))
    for at, span in zip(begins[gaps].tolist(), read_spans([path] * len(gaps), begins[gaps].tolist(), (ends - begins)[gaps].tolist())):
        if span.strip():
            raise RejectedSummaries(f"its records leave out what is no blank line at byte {at}")


# The rows with a texts record that check_spots reads (their lines, with where each is, and their records), as
# (row facts, [paths], [offsets], [lengths]): the lines first, then the records with their newline.
def texts_spots(path: str, chunks: list[IndexedChunk], spots: int) -> tuple[list, list, list, list]:
    with_texts = [np.flatnonzero(chunk.texts_places[1] >= 0) if chunk.texts_places is not None else np.array([], dtype=np.int64) for chunk in chunks]
    counts = np.cumsum([len(rows) for rows in with_texts])
    facts = []
    for position in spread(int(counts[-1]), spots) if len(counts) and counts[-1] else []:
        owner = int(np.searchsorted(counts, position, side="right"))
        chunk, row = chunks[owner], with_texts[owner][position - (counts[owner] - len(with_texts[owner]))]
        offsets, lengths = chunk.texts_places
        facts.append((int(chunk.lines.offset[row]), int(chunk.lines.length[row]), int(chunk.lines.line_index[row]), int(offsets[row]), int(lengths[row])))
    paths = [path] * len(facts) + [texts_file(path)] * len(facts)
    offsets = [fact[0] for fact in facts] + [fact[3] for fact in facts]
    lengths = [fact[1] for fact in facts] + [fact[4] + 1 for fact in facts]
    return facts, paths, offsets, lengths


# `count` of `total` positions, spread from the last to the first (one: the last), in order.
def spread(total: int, count: int) -> np.ndarray:
    return np.unique(np.linspace(total - 1, 0, count).round().astype(np.int64))


# Where the texts records read (after the lines) do not decode as their lines do, in words; None where they do.
def texts_disagreement(facts: list, spans: list) -> str | None:
    for position, (_, _, line_index, texts_offset, _) in enumerate(facts):
        line, texts = spans[position], spans[len(facts) + position]
        if texts[-1:] != b"\n":
            return f"it has no whole record at byte {texts_offset}"
        try:
            same = decode_line(texts[:-1], TEXTS_DECODER)[0] == decode_line(line, TEXTS_DECODER)[0]
        except BadLine as error:
            return f"a record at byte {texts_offset} cannot be read ({error})"
        if not same:
            return f"its record at byte {texts_offset} differs from line {line_index + 1}'s texts"
    return None


# The summary columns of lines not parsed yet. Present from the start, so that storing a parse replaces columns
# instead of inserting them, which dominated loading runs of many small files.
def empty_summaries(count: int) -> dict:
    return {name: missing_values(name, count) for name in SUMMARY_NUMBERS + SUMMARY_TEXTS}


# What may end a line after its JSON object, read past a last line taken without its newline (up to LINE_END_BYTES).
LINE_END, LINE_END_BYTES = re.compile(rb"[ \t\r]*\n"), 64


# Segments appended to a file's cache before it is written whole again (also when they would hold more rows than it).
SEGMENTS_KEPT = 16


# Index files survive server restarts in a cache folder outside the run (which may be read-only). A rank file's cache
# is one Arrow file, its facts in the table's own metadata: one atomic write puts both, so a crash between two writes,
# or two servers sharing the folder, can never pair a table with another write's facts. A file that only grew (a live
# run) gets a segment file instead: its new rows with the facts after them, naming the write it extends and the row it
# starts at; a reader takes the segments in order while they extend what it has read, so one from an older write, a
# missing or a damaged one ends the index there (the rest of the file is then read again from the file).
class IndexCache:
    def __init__(self):
        default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rl_logging_board"
        named = os.environ.get("RL_LOGGING_BOARD_CACHE") or str(default)
        # Where the indexes and conversions are: a folder, or a prefix of object storage that boards share.
        self.folder = lower_scheme(named) if is_remote(named) else str(Path(named).expanduser())
        # This machine's own files (the training-history copies of runs on object storage, the saved watch patterns):
        # the cache folder, or the default folder here when the cache is on object storage.
        self.local_folder = default if is_remote(named) else Path(self.folder)
        self.error: str | None = None

    def path_of(self, path: str, segment: int = 0) -> str:
        name = hashlib.sha1(os.fsencode(canonical_path(path))).hexdigest()[:20]
        return joined(self.folder, f"{name}.{segment}.arrow" if segment else f"{name}.arrow")

    def run_path_of(self, run_dir: str) -> str:
        return joined(self.folder, f"run-{hashlib.sha1(os.fsencode(canonical_path(run_dir))).hexdigest()[:20]}.arrow")

    # The cached index of path (its base and the segments that extend it), or None when absent, damaged or from another
    # version of the board.
    def load(self, path: str) -> FileIndex | None:
        base = self.read_part(path, 0)
        if base is None:
            return None
        parts, meta = [base[0]], base[1]
        rows = len(base[0]["offset"])
        while (segment := self.read_part(path, len(parts))) and (segment[1].get("base"), segment[1].get("first_row")) == (base[1].get("write_id"), rows):
            parts.append(segment[0])
            meta = segment[1]
            rows += len(segment[0]["offset"])
        names = list(dict.fromkeys(name for part in parts for name in part))
        lines = {name: np.concatenate([part[name] if name in part else missing_values(name, len(part["offset"])) for part in parts]) for name in names}
        try:
            index = FileIndex.restored(path, lines, meta)
        except (ValueError, KeyError, TypeError):
            return None
        index.cached = CachedIndex(base[1].get("write_id", ""), len(base[0]["offset"]), len(parts) - 1, rows)
        return index

    # A cache file of path (the base, or a segment) as columns and meta, or None when absent, damaged or not this board's.
    def read_part(self, path: str, segment: int) -> tuple[dict, dict] | None:
        try:
            table, meta = self.read(self.path_of(path, segment))
            if meta["format"] != CACHE_FORMAT or meta["path"] != canonical_path(path) or not set(INDEX_COLUMNS) <= set(table.column_names):
                return None
            return {name: np.array(column.to_numpy(zero_copy_only=False)) for name, column in zip(table.column_names, table.columns)}, meta
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
            return None

    # Write atomically; a cache that cannot be written costs speed, never data. A file that only grew since its cache
    # was written gets a segment of its new rows, until SEGMENTS_KEPT or their rows outnumber the base's: then it is
    # written whole again and the segments it replaced are removed.
    def save(self, index: FileIndex):
        if index.identity is None:
            return
        meta = dict(format=CACHE_FORMAT, path=canonical_path(index.path), **index.facts())
        cached, rows = index.cached, len(index.lines["offset"])
        if cached and index.first_changed_row >= cached.rows and cached.segments < SEGMENTS_KEPT and rows - cached.base_rows <= cached.base_rows:
            new_rows = {name: column[cached.rows :] for name, column in index.lines.items()}
            if self.write(self.path_of(index.path, cached.segments + 1), new_rows, meta | dict(base=cached.write_id, first_row=cached.rows)):
                index.cached, index.first_changed_row = cached._replace(segments=cached.segments + 1, rows=rows), rows
            return
        write_id = uuid.uuid4().hex
        if self.write(self.path_of(index.path), index.lines, meta | dict(write_id=write_id)):
            for segment in range(1, cached.segments + 1 if cached else 1):
                remove_file(self.path_of(index.path, segment))
            index.cached, index.first_changed_row = CachedIndex(write_id, rows, 0, rows), rows

    # The cached indexes of a run's files, by path, from the run's one cache file (see save_run): those of the paths
    # given that it holds (their files as they were when it was written: each is checked against its file as any
    # cached index is). Empty when there is none, or it is damaged or from another version of the board.
    def load_run(self, run_dir: str, paths) -> dict[str, FileIndex]:
        try:
            table, meta = self.read(self.run_path_of(run_dir))
            if meta["format"] != CACHE_FORMAT or meta["run"] != canonical_path(run_dir) or not set(INDEX_COLUMNS) <= set(table.column_names):
                return {}
            columns = {name: np.array(column.to_numpy(zero_copy_only=False)) for name, column in zip(table.column_names, table.columns)}
            wanted, indexes, start = set(paths), {}, 0
            for entry in meta["files"]:
                rows = slice(start, start + entry["rows"])
                start += entry["rows"]
                if entry["path"] in wanted:  # its rows are a slice of each column it has: views, never copied
                    indexes[entry["path"]] = FileIndex.restored(entry["path"], {name: columns[name][rows] for name in entry["columns"]}, entry)
            return indexes
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
            return {}

    # A run's files' indexes (those with an identity) in one cache file: their columns one after the other (a column a
    # file lacks, missing there), each file's path, rows, columns and facts in the metadata.
    def save_run(self, run_dir: str, indexes):
        indexes = [index for index in indexes if index.identity is not None]
        names = list(dict.fromkeys(name for index in indexes for name in index.lines))
        columns = {name: np.concatenate([index.lines[name] if name in index.lines else missing_values(name, len(index.lines["offset"])) for index in indexes]) for name in names}
        files = [dict(path=index.path, rows=len(index.lines["offset"]), columns=list(index.lines), **index.facts()) for index in indexes]
        self.write(self.run_path_of(run_dir), columns, dict(format=CACHE_FORMAT, run=canonical_path(run_dir), files=files))

    # Remove the run's one cache file, where its files are cached one by one now.
    def drop_run(self, run_dir: str):
        remove_file(self.run_path_of(run_dir))

    # A cache file's table and facts (a file on disk read as it is, an object fetched whole first), checked against the
    # checksum its write put beside the facts: bytes changed since (a disk's error; a file cut short or left with zeros
    # by a crash, where the rename reached the disk before the data) raise, and the file's lines are read again.
    @staticmethod
    def read(target: str) -> tuple[pa.Table, dict]:
        table = pyarrow.feather.read_table(pa.BufferReader(read_file(target)) if is_remote(target) else target)
        facts = table.schema.metadata[FACTS_KEY]
        if table.schema.metadata.get(CHECKSUM_KEY) != str(table_checksum(table, facts)).encode():
            raise ValueError(f"{target}: its checksum does not match its bytes")
        return table, json.loads(facts)

    # Whether it was written. One record batch, so that the columns read back are the buffers written, one per column.
    def write(self, target: str, lines: dict, meta: dict) -> bool:
        columns = {name: pa.array(column, type=pa.string()) if column.dtype == object else column for name, column in lines.items()}
        table, facts = pa.table(columns), json.dumps(meta).encode()
        table = table.replace_schema_metadata({FACTS_KEY: facts, CHECKSUM_KEY: str(table_checksum(table, facts)).encode()})
        sink = pa.BufferOutputStream()
        pyarrow.feather.write_feather(table, sink, compression="uncompressed", chunksize=max(1, table.num_rows))
        try:
            write_file(target, sink.getvalue())
        except OSError as error:
            self.error = f"index cache not written to {shown_url(self.folder)}: {without_secrets(error)}"
            return False
        return True


FACTS_KEY, CHECKSUM_KEY = b"rl_logging_board", b"rl_logging_board_crc32"


# A CRC-32 of what a table is read as: its schema (columns' names and types, as the file's footer gives them), each
# column's length and null count (its record batch's header) and buffers (validity, offsets, values), then its facts:
# 7 ms for 50 MB.
def table_checksum(table: pa.Table, facts: bytes) -> int:
    checksum = zlib.crc32("|".join(f"{field.name}:{field.type}:{field.nullable}" for field in table.schema).encode())  # as any pyarrow reads it
    for column in table.columns:
        for chunk in filter(len, column.chunks):  # an empty chunk is written (a string's offsets [0]) but not read back
            checksum = zlib.crc32(f"{len(chunk)} {chunk.null_count} {chunk.offset};".encode(), checksum)
            for buffer in chunk.buffers():
                if buffer is not None:
                    checksum = zlib.crc32(buffer, checksum)
    return zlib.crc32(facts, checksum)


# A run of at least this many files, of at most BUNDLED_ROWS lines in all, keeps their indexes in one cache file
# (rewritten whole when one of them changes: cheap for many small files, not for a few big ones, which keep a cache
# file each).
BUNDLED_FILES = 32
BUNDLED_ROWS = 1_000_000


# Problems of its lines a file lists (the load report's rows), the first ones; those after are counted: a JSONL of
# another kind in a run folder, a million lines, made a row each (2.9 GB).
PROBLEMS_LISTED = 1000


# Whether the indexes of a run's files are kept in one cache file (IndexCache.save_run): many small files, whose
# fields are at most a file's FIELD_COLUMNS in all (that file has a column of each, missing where a file lacks it: a
# key per line in each of 32 files of 1,000 lines made 8,192 columns of 32,000 rows, 2 GB).
def cached_together(indexes: list[FileIndex]) -> bool:
    if len(indexes) < BUNDLED_FILES or sum(len(index.lines["offset"]) for index in indexes) > BUNDLED_ROWS:
        return False
    return len({name for index in indexes for name in index.lines if name.startswith(FIELD_PREFIXES)}) <= FIELD_COLUMNS


def launch_of(path: str) -> str:
    match = RANK_FILE_PATTERN.search(Path(path).name)
    return match.group(2) if match else ""


# "run_9" before "run_10": launch ids that are counters sort by number (the logger's timestamps sort either way).
def natural_order(text: str) -> list:
    return [int(part) if part.isdecimal() else part for part in re.split(r"(\d+)", text)]  # "²" is a digit, not a number
