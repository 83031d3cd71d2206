"""Search and export: the texts of every loaded line read once on the first search (only the prompt and response bytes
the index located, held as UTF-8 in one buffer per file), searched with RE2 in linear time under a deadline, with
snippets of the matches; the found lines exported as CSV, Parquet or the original JSONL bytes."""
import concurrent.futures
import contextlib
import csv
import io
import json
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd
import re2

from rl_board.reading.lines import (
    EXTRA_PREFIX,
    JSON_NUMBER,
    KL_ESTIMATORS,
    TEXT_PREFIX,
    TEXTS_DECODER,
    BadLine,
    as_text,
    decode_line,
    raw_value,
)
from rl_board.reading.snapshot import read_back, read_line, read_step_batch
from rl_board.reading.storage import read_spans
from rl_board.reading.summaries import texts_file
from rl_board.reading.workers import PARALLEL_MIN_BYTES, WORKERS, batches_of_rows, run_tasks
from rl_board.text import valid_text, visible_whitespace

SEARCH_PLACES = {"prompt and response": ("response", "prompt"), "response": ("response",), "prompt": ("prompt",)}  # looked at in this order


SEARCH_SECONDS = 10.0  # a search stops after this long and says so (RE2 runs in linear time: only a huge run gets there)


SEARCH_MEMORY = 64 << 20  # RE2's memory for one pattern: a larger one is refused as too complex


SEARCH_PROGRAM = 2_000  # RE2's size of a regular expression at most (ordinary ones are under 100): a larger one can take seconds per text


# A text longer than this is searched on a thread of its own (search_until), so that the deadline also ends the wait
# for it: RE2 runs in time linear in the text and its pattern, which for a megabyte is seconds at worst (a pattern RE2
# cannot run as a DFA, [a-m][a-z ]{300}Q: 1.4 s a MB, 22 s for one 16 MB response). At most a core's worth of them at
# once, searches left behind included: one more waits for a free one, within its deadline.
LONG_TEXT = 64 << 10
LONG_TEXT_SEARCHES = threading.BoundedSemaphore(max(WORKERS, 1))


SNIPPET_BEFORE, SNIPPET_AFTER = 40, 80  # bytes of text shown before and after a match
SNIPPET_MATCH = 120  # bytes of a longer match shown: its first and last half, the bytes between counted (`x+` matched 2 MB)


EXPORT_NUMBERS = [
    "reward", "ref_reward", "valid_reward", "ref_valid_reward", "reward_gap", "advantage", "group_id", "truncated", "response_len",
    "response_tokens_len", "tool_tokens", "avg_logp", "avg_entropy", "avg_log_ratio", "sum_log_ratio",
] + [f"{kind}_kl_{name}" for name in KL_ESTIMATORS for kind in ("avg", "sum")]


# A file's searched texts as UTF-8 in one buffer: a Python string per text would take several times the memory.
# The line at offsets[i] has its prompt at data[bounds[i, 0]:bounds[i, 1]] and its response at data[bounds[i, 1]:bounds[i, 2]].
@dataclass
class FileTexts:
    index_id: str
    offsets: np.ndarray
    bounds: np.ndarray
    data: bytes


# A run's texts, read on its first search and added to as more lines are loaded; shared by sessions.
class RunTexts:
    def __init__(self):
        self.lock = threading.Lock()
        self.files: dict[str, FileTexts] = {}

    # For each sample: the buffer its texts are in (an index into the list) and their bounds there.
    def of(self, samples: pd.DataFrame) -> tuple[list[bytes], np.ndarray, np.ndarray]:
        buffers, owner, bounds = [], np.zeros(len(samples), dtype=np.int64), np.zeros((len(samples), 3), dtype=np.int64)
        lines = samples[TEXT_SPAN_COLUMNS].to_numpy(dtype=float)
        with self.lock:
            for path, rows in samples.groupby("path", sort=False).indices.items():
                texts = self.updated(path, samples["index_id"].iat[rows[0]], lines[rows])
                owner[rows] = len(buffers)
                buffers.append(texts.data)
                bounds[rows] = texts.bounds[np.searchsorted(texts.offsets, lines[rows, 0])]
        return buffers, owner, bounds

    # The file's texts with those of the given lines (TEXT_SPAN_COLUMNS) read in; a file indexed anew starts over.
    def updated(self, path: str, index_id: str, lines: np.ndarray) -> FileTexts:
        known = self.files.get(path)
        if known is None or known.index_id != index_id:
            known = FileTexts(index_id, np.array([], dtype=np.int64), np.zeros((0, 3), dtype=np.int64), b"")
        lines = lines[~np.isin(lines[:, 0], known.offsets)]
        lines = lines[np.unique(lines[:, 0], return_index=True)[1]]
        if not len(lines):
            return known
        spans = lines[:, 3] + lines[:, 5]
        sizes = np.where(lines[:, 7] >= 0, lines[:, 7], np.where(np.isnan(spans), lines[:, 1], spans)).astype(np.int64)  # bytes each line's texts take to read
        parallel = WORKERS > 1 and int(sizes.sum()) > PARALLEL_MIN_BYTES
        tasks = [(read_texts, (path, lines[part])) for part in batches_of_rows(np.arange(len(lines)), sizes)]
        try:
            results = list(run_tasks(tasks, parallel))
        except BrokenProcessPool:  # a worker died: run_tasks replaced the pool; read them again, once
            results = list(run_tasks(tasks, parallel))
        parts, text_sizes = [known.data], []
        for data, part_sizes, _ in results:
            parts.append(data)
            text_sizes.append(part_sizes)
        ends = len(known.data) + np.cumsum(np.concatenate(text_sizes).ravel())  # prompt end, response end, prompt end, ...
        bounds = np.column_stack([np.r_[len(known.data), ends[1::2][:-1]], ends[0::2], ends[1::2]])
        offsets = np.concatenate([known.offsets, lines[:, 0].astype(np.int64)])
        order = np.argsort(offsets, kind="stable")
        self.files[path] = FileTexts(index_id, offsets[order], np.concatenate([known.bounds, bounds])[order], b"".join(parts))
        return self.files[path]


# Where a line's texts are: the line, then its prompt's and response's JSON values within it (NaN: not known), then
# its record in the logger's texts file (-1: none).
TEXT_SPAN_COLUMNS = ["offset", "length", "prompt_at", "prompt_bytes", "response_at", "response_bytes", "texts_offset", "texts_length"]


# The prompt and response of lines as UTF-8, one after the other, their sizes (0 for a line that cannot be read), and
# which lines were read.
# Where the logger's texts file has them, a line's record there is read (a file's records are together: on object
# storage a few requests, where the values inside lines tens of kB apart make one read of nearly the whole file);
# else where the index knows them, only the two values, not the whole line (whose token lists are most of it).
def read_texts(path: str, lines: np.ndarray) -> tuple[bytes, np.ndarray, np.ndarray]:
    parts, sizes, read = [], np.zeros((len(lines), 2), dtype=np.int64), np.zeros(len(lines), dtype=bool)
    in_texts = lines[:, 7] >= 0
    whole = in_texts | np.isnan(lines[:, 2:6]).any(axis=1)  # read in one span: the record (its head), or the line
    head = len(RECORD_PROMPT) + lines[:, 3] + len(RECORD_RESPONSE) + lines[:, 5] + 1  # a record's prompt and response, and the byte after
    record_read = np.where(np.isnan(head), lines[:, 7], np.minimum(head, lines[:, 7]))
    starts = np.where(whole[:, None], np.where(in_texts, lines[:, 6], lines[:, 0])[:, None] * [1, 0], lines[:, [0, 0]] + lines[:, [2, 4]]).astype(np.int64)
    lengths = np.where(whole[:, None], np.where(in_texts, record_read, lines[:, 1])[:, None] * [1, 0], lines[:, [3, 5]]).astype(np.int64)  # then nothing
    paths = [texts_file(path) if use else path for use in np.repeat(in_texts, 2).tolist()]
    try:
        raw = read_spans(paths, starts.ravel().tolist(), lengths.ravel().tolist())
    except OSError:  # gone since it was loaded: the texts file (read the lines instead), or the file (the step view says so)
        return read_texts(path, np.concatenate([lines[:, :6], np.full((len(lines), 2), -1.0)], axis=1)) if in_texts.any() else (b"", sizes, read)
    for row, (is_whole, is_record) in enumerate(zip(whole.tolist(), in_texts.tolist())):
        try:
            if is_record:
                try:
                    texts = record_texts(raw[2 * row], lines[row, 3], lines[row, 5]) or record_texts(read_line(texts_file(path), int(lines[row, 6]), int(lines[row, 7])), np.nan, np.nan)
                except (OSError, BadLine, msgspec.DecodeError, ValueError):  # its texts file changed since it was checked: the line
                    texts = line_texts(read_line(path, int(lines[row, 0]), int(lines[row, 1])))
            elif is_whole:
                texts = line_texts(raw[2 * row])
            else:
                texts = [json_text(raw[2 * row]), json_text(raw[2 * row + 1])]
        except (OSError, BadLine, msgspec.DecodeError, ValueError):  # the file changed since it was indexed
            continue
        parts += texts
        sizes[row], read[row] = [len(text) for text in texts], True
    return b"".join(parts), sizes, read


# A whole line's prompt and response as UTF-8.
def line_texts(raw: bytes) -> list[bytes]:
    record, _ = decode_line(raw, TEXTS_DECODER)
    return [(as_text(value) or "").encode() for value in (record.prompt, record.response)]


# How a texts record begins (rl_board.reading.summaries.texts_records): its prompt's JSON, then its response's.
RECORD_PROMPT, RECORD_RESPONSE = b'{"prompt":', b',"response":'


# The prompt and response of a texts record as UTF-8. Where the index knows the sizes of their JSON, only its head was
# read (with the byte after them): they are cut from it (their JSON is the line's, byte for byte) as from the line; or
# None where it does not begin so, each a whole JSON value (then the whole record is read). Else the record is decoded.
def record_texts(record: bytes, prompt_bytes: float, response_bytes: float) -> list[bytes] | None:
    if np.isnan(prompt_bytes) or np.isnan(response_bytes):
        decoded, _ = decode_line(record, TEXTS_DECODER)
        return [(as_text(value) or "").encode() for value in (decoded.prompt, decoded.response)]
    middle = len(RECORD_PROMPT) + int(prompt_bytes)
    response = middle + len(RECORD_RESPONSE)
    end = response + int(response_bytes)
    prompt, answer = record[len(RECORD_PROMPT) : middle], record[response:end]
    if record.startswith(RECORD_PROMPT) and record[middle:response] == RECORD_RESPONSE and record[end : end + 1] in (b",", b"}") and whole_json(prompt) and whole_json(answer):
        return [json_text(prompt), json_text(answer)]
    return None


# Whether raw is a whole JSON value, not one cut short: a string ends at its closing quote (inside one a quote is always
# escaped), anything else must decode.
def whole_json(raw: bytes) -> bool:
    if raw[:1] == b'"':
        inside = raw[1:-1]
        return len(raw) >= 2 and raw[-1:] == b'"' and (len(inside) - len(inside.rstrip(b"\\"))) % 2 == 0
    try:
        msgspec.json.decode(raw)
    except (msgspec.DecodeError, ValueError):
        return False
    return True


# A field's text as UTF-8 from its raw JSON value (of a line that was valid UTF-8 when indexed): a string without
# escapes is its own bytes.
def json_text(raw: bytes) -> bytes:
    if raw[:1] == b'"' and raw[-1:] == b'"' and b"\\" not in raw:
        return raw[1:-1]
    value = raw_value(raw)
    try:
        return value.encode() if isinstance(value, str) else (as_text(value) or "").encode()
    except UnicodeEncodeError:  # a lone surrogate escape
        return valid_text(value).encode()


# A search's pattern in RE2 (linear time, so no pattern can stall the server): the text as it is, or a regular
# expression; case-insensitive unless match_case. Raises ValueError with RE2's reason for an invalid one.
def search_pattern(query: str, regex: bool, match_case: bool):
    options = re2.Options()
    options.literal, options.case_sensitive, options.max_mem = not regex, match_case, SEARCH_MEMORY
    options.log_errors = False
    try:
        pattern = re2.compile(valid_text(query).encode(), options)
    except re2.error as error:
        reason = error.args[0] if error.args else ""
        raise ValueError(reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)) from None
    if regex and pattern.programsize > SEARCH_PROGRAM:
        raise ValueError(f"too complex ({pattern.programsize:,} steps to RE2, at most {SEARCH_PROGRAM:,}): repeat less")
    return pattern


# Where the samples' texts match: per sample 0 (nowhere), 1 (its prompt) or 2 (its response, looked at first), with
# the match's byte span in that text; `searched` samples were searched, in step order, all unless SEARCH_SECONDS ran out.
@dataclass
class SearchResult:
    place: np.ndarray
    start: np.ndarray
    end: np.ndarray
    searched: int
    seconds: float


# Each text is searched on its own, so ^ and $ are its start and end and no match runs from one text into the next.
def search_samples(texts: RunTexts, samples: pd.DataFrame, pattern, places: str) -> SearchResult:
    began = time.perf_counter()
    buffers, owner, bounds = texts.of(samples)
    views = [memoryview(buffer) for buffer in buffers]
    where = {"response": (2, 1, 2), "prompt": (1, 0, 1)}  # code, and the bounds the text lies between
    fields = [where[name] for name in SEARCH_PLACES[places]]
    place, start, end = np.zeros(len(samples), dtype=np.int8), np.zeros(len(samples), dtype=np.int64), np.zeros(len(samples), dtype=np.int64)
    searched, deadline = len(samples), began + SEARCH_SECONDS
    for row, (buffer, text_bounds) in enumerate(zip(owner.tolist(), bounds.tolist())):
        if time.perf_counter() > deadline:
            searched = row
            break
        view = views[buffer]
        for code, first, last in fields:
            text = view[text_bounds[first] : text_bounds[last]]
            try:
                match = pattern.search(text) if len(text) <= LONG_TEXT else search_until(pattern, text, deadline)
            except concurrent.futures.TimeoutError:
                return SearchResult(place, start, end, row, time.perf_counter() - began)
            if match:
                place[row], (start[row], end[row]) = code, match.span()
                break
    return SearchResult(place, start, end, searched, time.perf_counter() - began)


# pattern.search(text) on a thread of its own, waited for until the deadline (then TimeoutError): RE2 lets go of the
# interpreter lock, and a search no longer waited for goes on to its end on its daemon thread, which no exit waits for.
def search_until(pattern, text: memoryview, deadline: float):
    slots = LONG_TEXT_SEARCHES  # released where it was acquired, whatever the module holds by then
    if not slots.acquire(timeout=max(deadline - time.perf_counter(), 0.0)):
        raise concurrent.futures.TimeoutError  # every core busy with long texts, left behind ones among them
    searched = concurrent.futures.Future()

    def search():
        try:
            searched.set_result(pattern.search(text))
        except Exception as error:  # raised where it is waited for
            searched.set_exception(error)
        finally:
            slots.release()

    try:
        threading.Thread(target=search, name="long-text-search", daemon=True).start()
    except RuntimeError:  # no thread to be had
        slots.release()
        raise
    return searched.result(timeout=max(deadline - time.perf_counter(), 0.0))


# The text around each sample's match, on one line, the match between ⟦ ⟧ (shown as plain text, never as HTML).
def match_snippets(texts: RunTexts, samples: pd.DataFrame, place: np.ndarray, start: np.ndarray, end: np.ndarray) -> list[str]:
    buffers, owner, bounds = texts.of(samples)
    snippets = []
    for buffer, text_bounds, code, match_start, match_end in zip(owner.tolist(), bounds.tolist(), place.tolist(), start.tolist(), end.tolist()):
        if not code:
            snippets.append("")
            continue
        first, last = text_bounds[code - 1], text_bounds[code]
        text = buffers[buffer]
        half = SNIPPET_MATCH // 2 if match_end - match_start > SNIPPET_MATCH else match_end - match_start  # a long match: its ends
        parts = [
            text[max(first, first + match_start - SNIPPET_BEFORE) : first + match_start],
            text[first + match_start : first + match_start + half],
            text[first + max(match_start + half, match_end - half) : first + match_end],
            text[first + match_end : min(last, first + match_end + SNIPPET_AFTER)],
        ]
        before, head, tail, after = (part.decode("utf-8", errors="ignore") for part in parts)  # a character cut at the edge is left out
        between = match_end - match_start - len(head.encode()) - len(tail.encode())  # a character cut at an edge counts here
        match = f"{head}…({between:,} bytes)…{tail}" if half < match_end - match_start else head + tail
        snippet = ("…" if match_start > SNIPPET_BEFORE else "") + f"{before}⟦{match}⟧{after}" + ("…" if first + match_end + SNIPPET_AFTER < last else "")
        snippets.append(visible_whitespace(snippet))
    return snippets


# The rows as a table to export: the numbers the page shows of each sample, then its texts, read back (empty for a
# line that cannot be: the step view says why).
def export_table(rows: pd.DataFrame) -> pd.DataFrame:
    table = read_step_batch("export", rows).table.assign(file=[Path(path).name for path in rows["path"]])
    fields = sorted(column for column in table.columns if column.startswith(("rewards/", EXTRA_PREFIX, TEXT_PREFIX)))
    numbers = [column for column in EXPORT_NUMBERS + fields if table[column].notna().any()]
    texts = ["prompt", "response"] + [column for column in ("ref_response", "ground_truth") if table[column].notna().any()]
    return table[["step", "sample", "file", "line"] + numbers + texts].reset_index(drop=True)


def export_csv(rows: pd.DataFrame) -> str:
    return spreadsheet_csv(export_table(rows))


# A table as CSV for a spreadsheet. A text (a cell or a column's name) that starts as a formula would (=, +, -, @, a tab
# or a carriage return) gets a ' in front, so a spreadsheet shows it instead of running it: rollout text is written by
# a model (=HYPERLINK(...), @SUM(...)). Every text is quoted, so a lone carriage return in one cannot split its row.
# The Parquet and JSONL downloads keep the texts exactly.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_csv(table: pd.DataFrame) -> str:
    safe = pd.DataFrame({position: column if pd.api.types.is_numeric_dtype(column) else column.map(spreadsheet_cell) for position, (_, column) in enumerate(table.items())})
    safe.columns = [spreadsheet_cell(str(name)) for name in table.columns]
    return safe.to_csv(index=False, quoting=csv.QUOTE_NONNUMERIC)


# A cell as a spreadsheet gets it: a list or a mapping (a prompt's image paths, a chat) as JSON, not Python's repr, and a
# text that starts as a formula with a ' in front, so that it is shown, not run; a number kept as text (a group id of
# -1, a ground truth of -5) is no formula, and stays the number.
def spreadsheet_cell(value):
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple, dict)):
        value = json.dumps(value, ensure_ascii=False, default=str)
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) and not JSON_NUMBER.fullmatch(value) else value


def export_parquet(rows: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    export_table(rows).to_parquet(buffer, index=False)
    return buffer.getvalue()


# The rows' lines as they are in their files, byte for byte, one a line. A line that cannot be read, or no longer holds
# its step (the file rewritten since it was loaded: its bytes there are another line's, or parts of two), is left out.
def export_jsonl(rows: pd.DataFrame) -> bytes:
    lines = []
    for path, offset, length, step in zip(rows["path"], rows["offset"].tolist(), rows["length"].tolist(), rows["step"].tolist()):
        with contextlib.suppress(OSError, BadLine):
            raw = read_line(path, offset, length)
            read_back(raw, step)
            lines.append(raw + b"\n")
    return b"".join(lines)
