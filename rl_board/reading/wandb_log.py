"""W&B's transaction log, run-<id>.wandb in a run folder (offline or synced): the only local copy of a run's history,
config and summary (wandb 0.22's wandb-core writes no wandb-history.jsonl, and an offline run no wandb-summary.json
or config.yaml). Its container is LevelDB's log format (wandb/sdk/internal/datastore.py, wandb 0.22.3: a 7-byte header
":W&B", 0xBEE1, version 0; 32 KiB blocks of chunks, each a CRC-32 (zlib's, seeded with the chunk's type), a length, a
type FULL/FIRST/MIDDLE/LAST), each record one protobuf Record (wandb/proto/wandb_internal.proto). Only the fields the
board uses are decoded, from the protobuf wire format itself (no wandb, no protobuf package; nothing executed): a
Record's history (2), summary (3), config (5) and run (17: its config 4, summary 5); their items' key (1) or
nested_key (2, repeated: a nested value's path) and value_json (16)."""
import json
import struct
import zlib
from dataclasses import dataclass, field

from rl_board.text import shorten, valid_text

LOG_HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)


BLOCK, CHUNK_HEADER = 32768, 7


FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


TYPE_SEEDS = {kind: zlib.crc32(bytes([kind])) for kind in (FULL, FIRST, MIDDLE, LAST)}


HISTORY, SUMMARY, CONFIG, RUN = 2, 3, 5, 17  # Record's fields
RUN_CONFIG, RUN_SUMMARY = 4, 5  # RunRecord's
ITEM_KEY, ITEM_NESTED_KEY, ITEM_VALUE = 1, 2, 16  # HistoryItem's, SummaryItem's, ConfigItem's


# What a log holds for the board: the history rows in the order logged ({key: value}, a nested value's key its path
# joined by "."), the config and the summary as the last update of each key left them, and why reading stopped early.
@dataclass
class WandbLog:
    history: list = field(default_factory=list)
    config: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    stopped: str = ""


def read_log(data: bytes) -> WandbLog:
    log = WandbLog()
    if not data.startswith(LOG_HEADER):
        log.stopped = "not W&B's transaction log (no :W&B header)"
        return log
    try:
        for record in records(data):
            for number, value in fields(record):
                if number == HISTORY:
                    log.history.append(items(value))
                elif number == SUMMARY:
                    log.summary.update(items(value))
                elif number == CONFIG:
                    log.config.update(items(value))
                elif number == RUN:
                    for part, inner in fields(value):
                        if part == RUN_CONFIG:
                            log.config.update(items(inner))
                        elif part == RUN_SUMMARY:
                            log.summary.update(items(inner))
    except ValueError as error:
        log.stopped = str(error)
    return log


# The log's records, joined from their chunks; a chunk cut short ends the log (a writer mid-record); a wrong checksum
# or chunk type is a ValueError.
def records(data: bytes):
    position, pending = len(LOG_HEADER), []  # a record's chunks so far (joined once: added up, a record of 65 MB took 30 s)
    while position < len(data):
        if BLOCK - position % BLOCK < CHUNK_HEADER:  # a block's tail too short for a header is padding
            position += BLOCK - position % BLOCK
            continue
        if position + CHUNK_HEADER > len(data):
            return
        checksum, length, kind = struct.unpack_from("<IHB", data, position)
        start = position + CHUNK_HEADER
        if start + length > len(data):
            return
        chunk = data[start : start + length]
        if kind not in TYPE_SEEDS or zlib.crc32(chunk, TYPE_SEEDS[kind]) != checksum:
            raise ValueError(f"a corrupt record at byte {position}: the rest of the log is not read")
        position = start + length
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            pending = [chunk]
        elif kind == MIDDLE:
            pending.append(chunk)
        else:
            yield b"".join([*pending, chunk])
            pending = []


# A protobuf message's fields as (number, value): varints as ints, length-delimited fields as bytes, fixed-width ones
# as their bytes.
def fields(message: bytes):
    position = 0
    while position < len(message):
        tag, position = varint(message, position)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, position = varint(message, position)
        elif wire == 2:
            length, position = varint(message, position)
            value, position = message[position : position + length], position + length
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, position = message[position : position + width], position + width
        else:
            raise ValueError(f"a record with protobuf wire type {wire}, which W&B does not write: the rest of the log is not read")
        if position > len(message):
            raise ValueError("a record cut short inside: the rest of the log is not read")
        yield number, value


def varint(data: bytes, position: int) -> tuple[int, int]:
    value, shift = 0, 0
    while position < len(data) and shift < 64:
        byte = data[position]
        value |= (byte & 0x7F) << shift
        position += 1
        if byte < 0x80:
            return value, position
        shift += 7
    raise ValueError("a record with a broken varint: the rest of the log is not read")


# A record's items as {key: value}: value_json parsed (NaN and Infinity as W&B writes them); a value that is not
# JSON stays its text.
def items(message: bytes) -> dict:
    found = {}
    for number, item in fields(message):
        if number != 1 or not isinstance(item, bytes):  # HistoryRecord.item, SummaryRecord.update, ConfigRecord.update
            continue
        key, path, text = "", [], ""
        for part, value in fields(item):
            if not isinstance(value, bytes):
                continue
            if part == ITEM_KEY:
                key = valid_text(value.decode("utf-8", "replace"))
            elif part == ITEM_NESTED_KEY:
                path.append(valid_text(value.decode("utf-8", "replace")))
            elif part == ITEM_VALUE:
                text = value.decode("utf-8", "replace")
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            value = shorten(valid_text(text), 200)
        found[key or ".".join(path)] = value
    return found
