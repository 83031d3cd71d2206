"""A rank file's summaries file (rollout_logger/metadata.py has its layout): what the first pass gives of each of its
lines (place, step, numbers, texts, fields, problems), computed by the first pass's own code (lines.py) on the logger's
writing thread as it appends the lines, so that the board opens the run without parsing them; and its texts file, the
keys of each line a step's tables show, so that showing a step reads a few hundred kB, not its lines. Here: a batch's
texts and record as the logger writes them, and the records read back as the indexed chunks a parse gives, checked
against the rank file by the index (FileIndex.take_summaries). Imports only what lines.py does: the logger imports it."""
import struct
import zlib

import msgspec
import numpy as np

from rl_board.reading.lines import (
    FIELD_COLUMNS,
    FIELD_PREFIXES,
    SUMMARY_FORMAT,
    SUMMARY_NUMBERS,
    SUMMARY_TEXTS,
    TEXT_PREFIX,
    TEXTS_DECODER,
    IndexedChunk,
    LineSummaries,
    RolloutTexts,
    ScannedLines,
    missing,
    missing_values,
    scan_lines,
    summarize_buffer,
)
from rollout_logger.metadata import SUMMARIES_FORMAT, SUMMARIES_MAGIC, TEXTS_SUFFIX

RECORD_HEAD = struct.Struct("<II")  # the payload's length and CRC-32


SPOT_CHECKS = 4  # lines read from the rank file and parsed, to compare with their summaries: the first, the last, between


class RejectedSummaries(ValueError):
    """A summaries file that cannot be used for its rank file; the message says why."""


def record(payload: dict) -> bytes:
    data = msgspec.msgpack.encode(payload)
    return RECORD_HEAD.pack(len(data), zlib.crc32(data)) + data


# The start of a summaries file: the magic and the header record.
def summaries_header(data_file: str) -> bytes:
    header = {"format": SUMMARIES_FORMAT, "summary_format": SUMMARY_FORMAT, "numbers": SUMMARY_NUMBERS, "data_file": data_file}
    return SUMMARIES_MAGIC + record(header)


# The keys of a line a step's tables read (RolloutTexts'), each as the line's own JSON of it.
RawTexts = msgspec.defstruct("RawTexts", [(field.encode_name, msgspec.Raw, msgspec.Raw()) for field in msgspec.structs.fields(RolloutTexts)])
RAW_TEXTS_DECODER = msgspec.json.Decoder(RawTexts)


# The texts file of a rank file.
def texts_file(path: str) -> str:
    return path + TEXTS_SUFFIX


# The texts records of lines (of data, at byte base of the rank file) as written at byte texts_base of the texts file,
# and where each is (-1: a line the fast decoder does not read, or whose record it would not read the same: read from
# the rank file). A record holds the line's own JSON of each key, so the board decodes it as it decodes the line.
def texts_records(data: bytes, base: int, lines: "ScannedLines", texts_base: int) -> tuple[bytes, np.ndarray, np.ndarray]:
    view, parts = memoryview(data), []
    offsets, lengths = np.full(len(lines.offset), -1, dtype=np.int64), np.full(len(lines.offset), -1, dtype=np.int64)
    at = texts_base
    for row, (offset, length) in enumerate(zip((lines.offset - base).tolist(), lines.length.tolist())):
        line = view[offset : offset + length]
        try:
            raw, texts = RAW_TEXTS_DECODER.decode(line), TEXTS_DECODER.decode(line)
            fields = [b'"%s":%s' % (name.encode(), bytes(value)) for name, value in zip(raw.__struct_fields__, msgspec.structs.astuple(raw)) if len(value)]
            text_record = b"{" + b",".join(fields) + b"}"
            if TEXTS_DECODER.decode(text_record) != texts:
                continue
        except (msgspec.DecodeError, ValueError, RecursionError):
            continue
        parts.append(text_record + b"\n")
        offsets[row], lengths[row] = at, len(text_record)
        at += len(text_record) + 1
    return b"".join(parts), offsets, lengths


# The texts and the record of a batch of whole lines, data, written at byte base of its rank file (its texts at byte
# texts_base of the texts file): every line indexed and summarized.
def batch_record(data: bytes, base: int, texts_base: int) -> tuple[bytes, bytes]:
    lines = scan_lines(data, len(data), base)
    summary = summarize_buffer(data, base, lines.offset, lines.length)
    texts, texts_offset, texts_length = texts_records(data, base, lines, texts_base)
    numbers = {name: values.astype("<f8").tobytes() for name, values in summary.numbers.items() if not np.isnan(values).all()}
    return texts, record({
        "start": base, "end": lines.complete_end, "physical_lines": lines.physical_lines,
        "line_index": lines.line_index.astype("<i8").tobytes(), "offset": lines.offset.astype("<i8").tobytes(),
        "length": lines.length.astype("<i8").tobytes(), "step_hint": lines.step_hint.astype("<f8").tobytes(),
        "good": summary.good.astype(np.uint8).tobytes(), "step": summary.step.astype("<i8").tobytes(),
        "numbers": numbers, "texts": summary.texts,
        "fields": {name: field_values(name, values) for name, values in summary.fields.items()},
        "more_fields": {name: (rows.astype("<i8").tobytes(), field_values(name, values)) for name, (rows, values) in summary.more_fields.items()},
        "problems": [list(problem) for problem in summary.problems],
        "texts_offset": texts_offset.astype("<i8").tobytes(), "texts_length": texts_length.astype("<i8").tobytes(),
    })


# A field's values as a record holds them: float64 bytes, or a list of texts.
def field_values(name: str, values: np.ndarray) -> bytes | list[str | None]:
    return values.tolist() if name.startswith(TEXT_PREFIX) else values.astype("<f8").tobytes()


# A batch's record, as batch_record writes it.
class BatchRecord(msgspec.Struct):
    start: int
    end: int
    physical_lines: int
    line_index: bytes
    offset: bytes
    length: bytes
    step_hint: bytes
    good: bytes
    step: bytes
    numbers: dict[str, bytes]
    texts: dict[str, list[str | None]]
    fields: dict[str, bytes | list[str | None]]
    problems: list[tuple[int, str, str]]
    texts_offset: bytes = b""  # none in a file written before the texts files were
    texts_length: bytes = b""
    more_fields: dict[str, tuple[bytes, bytes | list[str | None]]] = {}  # rows and values of names past FIELD_COLUMNS


class SummariesHeader(msgspec.Struct):
    format: int
    summary_format: int
    numbers: list[str]
    data_file: str


# The chunk a summaries file's records give (none without records), for the rank file named data_file of size bytes:
# of the records that end within it (one written after the listing is not), in one piece, as a parse of their bytes
# in one piece gives it; and the byte of the file where the records used end (0 while the logger is still writing its
# header: nothing is taken). For a rank file indexed to byte start already (the summaries file first seen after
# lines were parsed), the records of lines before start are passed over. Its last record cut short is ignored;
# anything else wrong raises RejectedSummaries.
def read_summaries(raw, data_file: str, size: int, start: int = 0) -> tuple[list[IndexedChunk], int]:
    view = memoryview(raw)
    if len(view) < len(SUMMARIES_MAGIC) and SUMMARIES_MAGIC.startswith(bytes(view)):
        return [], 0  # the logger has just created it: nothing to take yet
    if bytes(view[: len(SUMMARIES_MAGIC)]) != SUMMARIES_MAGIC:
        raise RejectedSummaries("it is not a summaries file")
    payloads = record_payloads(view, len(SUMMARIES_MAGIC))
    if not payloads:
        return [], 0  # its header is being written
    try:
        header = msgspec.msgpack.decode(payloads[0][0], type=SummariesHeader)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise RejectedSummaries(f"a record cannot be read ({error})") from None
    if (header.format, header.summary_format, header.numbers) != (SUMMARIES_FORMAT, SUMMARY_FORMAT, SUMMARY_NUMBERS):
        raise RejectedSummaries("another version of the board's summaries wrote it")
    if header.data_file != data_file:
        raise RejectedSummaries(f"it summarizes {header.data_file!r}")
    return records_from(payloads[1:], start, size, payloads[0][1], passing_over=start > 0)


# The chunk the records of a summaries file from one of its records on give (raw: its bytes from there, at: where that
# is), for the rank file indexed to byte start, of size bytes: the records of lines indexed already are passed over
# (a live run's lines parsed before their record was written), and the next must begin at start. With the byte of
# the file where the records used or passed over end.
def read_more_summaries(raw, at: int, start: int, size: int) -> tuple[list[IndexedChunk], int]:
    payloads = [(payload, at + end) for payload, end in record_payloads(memoryview(raw), 0)]
    return records_from(payloads, start, size, at, passing_over=True)


# The chunk of the records that follow each other from byte start of the rank file and end within its size bytes,
# and the byte of the summaries file where those end (`end` if none). passing_over: records of lines before start are
# passed over, and a first one that begins elsewhere waits (else it is wrong).
def records_from(payloads: list[tuple[memoryview, int]], start: int, size: int, end: int, passing_over: bool) -> tuple[list[IndexedChunk], int]:
    records = []
    try:
        for payload, payload_end in payloads:
            batch = msgspec.msgpack.decode(payload, type=BatchRecord)
            if batch.end > size:
                break
            if passing_over and batch.end <= start and not records:
                end = payload_end
                continue
            if batch.start != start:
                if passing_over and not records:
                    break  # lines parsed part-way into this batch: the records after it are taken once past it
                raise RejectedSummaries(f"its records do not follow each other at byte {start}")
            records.append(batch)
            start, end = batch.end, payload_end
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise RejectedSummaries(f"a record cannot be read ({error})") from None
    return ([joined_records(records)] if records else []), end


# The payloads of records from byte position of view on, each with the byte where it ends; the last cut short is left
# out.
def record_payloads(view: memoryview, position: int) -> list[tuple[memoryview, int]]:
    payloads = []
    while position + RECORD_HEAD.size <= len(view):
        length, checksum = RECORD_HEAD.unpack_from(view, position)
        end = position + RECORD_HEAD.size + length
        if end > len(view):
            break  # cut short while written
        payload = view[position + RECORD_HEAD.size : end]
        if zlib.crc32(payload) != checksum:
            if end == len(view):
                break  # the last record, cut short with its length written
            raise RejectedSummaries(f"its record {len(payloads)} is damaged")
        payloads.append((payload, end))
        position = end
    return payloads


# Consecutive batches' records as one chunk, each column joined at once (adding hundreds of chunks to an index one by
# one cost more than reading them), their lines' places checked: in order, inside their batches.
def joined_records(records: list[BatchRecord]) -> IndexedChunk:
    def joined(name: str, dtype: str) -> np.ndarray:
        return np.frombuffer(b"".join(getattr(record, name) for record in records), dtype=dtype).astype(dtype.lstrip("<"))

    offset, length = joined("offset", "<i8"), joined("length", "<i8")
    counts = np.array([len(record.offset) // 8 for record in records], dtype=np.int64)
    starts, ends = (np.repeat([getattr(record, name) for record in records], counts) for name in ("start", "end"))
    line_ends = offset + length
    if len(offset) and ((offset < starts).any() or (line_ends >= ends).any() or (length < 0).any() or (offset[1:] <= line_ends[:-1]).any()):
        raise RejectedSummaries("its lines are not in order inside their batches")
    physical = np.cumsum([0] + [record.physical_lines for record in records[:-1]])
    lines = ScannedLines(
        line_index=joined("line_index", "<i8") + np.repeat(physical, counts), offset=offset, length=length,
        step_hint=joined("step_hint", "<f8"), physical_lines=sum(record.physical_lines for record in records),
        complete_end=records[-1].end,
    )
    firsts = (np.cumsum(counts) - counts).tolist()
    summary = LineSummaries(
        good=joined("good", "<u1").astype(bool), step=joined("step", "<i8"),
        numbers={name: joined_column([record.numbers for record in records], counts, name) for name in SUMMARY_NUMBERS},
        texts={name: [text for record in records for text in record.texts[name]] for name in SUMMARY_TEXTS},
        fields={},
        problems=[(row + first, kind, text) for record, first in zip(records, firsts) for row, kind, text in record.problems],
    )
    summary.fields, summary.more_fields = joined_fields(records, counts)
    texts_places = tuple(
        np.concatenate([np.frombuffer(getattr(record, name), dtype="<i8").astype(np.int64) if record.texts_offset else np.full(count, -1) for record, count in zip(records, counts)])
        for name in ("texts_offset", "texts_length")
    )
    if any(len(column) != len(offset) for column in [lines.line_index, lines.step_hint, summary.good, summary.step, *summary.numbers.values(), *summary.texts.values(), *summary.fields.values(), *texts_places]):
        raise RejectedSummaries("a record does not have a value of each of its lines")
    return IndexedChunk(lines, np.arange(len(offset)), summary, texts_places)


# The records' fields as a parse of their lines together gives them (LineSummaries): columns of their first
# FIELD_COLUMNS names in the order they come, (rows, values) of the others, whose values a record may hold either way.
def joined_fields(records: list[BatchRecord], counts: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]]]:
    for record in records:  # a name of another column (offset, step) would overwrite the index's own
        if any(not name.startswith(FIELD_PREFIXES) for name in (*record.fields, *record.more_fields)):
            raise RejectedSummaries("a record names as a field what is no field")
        if record.fields.keys() & record.more_fields.keys():
            raise RejectedSummaries("a record names a field twice")
    names = list(dict.fromkeys(name for record in records for name in (*record.fields, *record.more_fields)))
    columns = {name: joined_column([record.fields for record in records], counts, name) for name in names[:FIELD_COLUMNS]}
    more: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {name: [] for name in names[FIELD_COLUMNS:]}
    for record, first, count in zip(records, (np.cumsum(counts) - counts).tolist(), counts.tolist()):
        for name, (rows, values) in record.more_fields.items():
            rows = np.frombuffer(rows, dtype="<i8").astype(np.int64) if len(rows) % 8 == 0 else np.array([-1])
            values = record_values(name, values, len(rows))
            if len(rows) and (rows.min() < 0 or rows.max() >= count):
                raise RejectedSummaries(f"a record's values of {name} are not at its lines")
            if name in columns:
                columns[name][first + rows] = values
            else:
                more[name].append((first + rows, values))
        for name, values in record.fields.items():
            if name in more:
                values = record_values(name, values, count)
                present = np.flatnonzero(~missing(values))
                more[name].append((first + present, values[present]))
    return columns, {
        name: (np.concatenate([rows for rows, _ in parts] or [np.array([], dtype=np.int64)]), np.concatenate([values for _, values in parts] or [missing_values(name, 0)]))
        for name, parts in more.items()
    }


# A field's count values as a record holds them (float64 bytes, or a list of texts for a text/ field), as an array.
def record_values(name: str, values: bytes | list, count: int) -> np.ndarray:
    if name.startswith(TEXT_PREFIX) and isinstance(values, list) and len(values) == count:
        return np.array(values, dtype=object)
    if not name.startswith(TEXT_PREFIX) and isinstance(values, bytes) and len(values) == 8 * count:
        return np.frombuffer(values, dtype="<f8").astype(float)
    raise RejectedSummaries(f"a record's values of {name} are not one a line")


# A column of the records' values (float64 bytes, or lists of texts), missing where a record has none.
def joined_column(columns: list[dict], counts: np.ndarray, name: str) -> np.ndarray:
    parts = [column.get(name) for column in columns]
    if all(part is None for part in parts):
        return missing_values(name, int(counts.sum()))
    if not name.startswith(TEXT_PREFIX) and all(isinstance(part, bytes) and len(part) == 8 * count for part, count in zip(parts, counts.tolist())):
        return np.frombuffer(b"".join(parts), dtype="<f8").astype(float)
    joined = missing_values(name, int(counts.sum()))  # filled where a record has the column: most lack a field's
    for part, first, count in zip(parts, (np.cumsum(counts) - counts).tolist(), counts.tolist()):
        if part is not None:
            joined[first : first + count] = record_values(name, part, count)
    return joined


# Where a row of a chunk and the first pass's parse of its line (line: its bytes) differ, in words; None where they
# agree in everything: parsed or refused, step, numbers, texts, fields and notes.
def disagreement(chunk: IndexedChunk, row: int, line: bytes) -> str | None:
    parsed, kept = summarize_buffer(line, 0, np.array([0]), np.array([len(line)])), chunk.summary
    if bool(parsed.good[0]) != bool(kept.good[row]):
        return "a line it has as " + ("refused" if parsed.good[0] else "read") + " is " + ("read" if parsed.good[0] else "refused")
    if parsed.good[0] and parsed.step[0] != kept.step[row]:
        return f"a line of step {parsed.step[0]} it has at step {kept.step[row]}"
    mine_fields, their_fields = fields_at(parsed, 0), fields_at(kept, row)
    for name in SUMMARY_NUMBERS + sorted(set(mine_fields) | set(their_fields)):
        mine = parsed.numbers[name][0] if name in parsed.numbers else mine_fields.get(name, missing_values(name, 1)[0])
        theirs = kept.numbers[name][row] if name in kept.numbers else their_fields.get(name, missing_values(name, 1)[0])
        mine, theirs = (float(value) if isinstance(value, (float, np.floating)) else value for value in (mine, theirs))
        if not (mine == theirs or (isinstance(mine, float) and isinstance(theirs, float) and np.isnan(mine) and np.isnan(theirs))):
            return f"a line's {name} it has as {theirs!r}, not {mine!r}"
    if any(parsed.texts[name][0] != kept.texts[name][row] for name in SUMMARY_TEXTS):
        return "a line's group or images differ"
    if [problem[1:] for problem in parsed.problems] != [problem[1:] for problem in kept.problems if problem[0] == row]:
        return "a line's notes differ"
    return None


# The fields with a value at a row of summaries, by name (the values of its other names at their rows looked up at
# once: a key per line has thousands).
def fields_at(summary: LineSummaries, row: int) -> dict:
    values = {name: column[row] for name, column in summary.fields.items()}
    if summary.more_fields:
        names = list(summary.more_fields)
        rows = np.concatenate([rows for rows, _ in summary.more_fields.values()])
        owner = np.repeat(np.arange(len(names)), [len(rows) for rows, _ in summary.more_fields.values()])
        starts = np.cumsum([0] + [len(rows) for rows, _ in summary.more_fields.values()])
        for at in np.flatnonzero(rows == row).tolist():
            name = names[owner[at]]
            values[name] = summary.more_fields[name][1][at - starts[owner[at]]]
    return {name: value for name, value in values.items() if not missing_value(value)}


# A field's value that is missing: None (a text), NaN (a number).
def missing_value(value) -> bool:
    return value is None or (isinstance(value, (float, np.floating)) and np.isnan(value))
