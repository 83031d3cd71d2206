"""trackio's project databases (<TRACKIO_DIR>/<project>.db, SQLite), opened read-only and never in a live writer's
way; their runs, named as the board shows them; a stamp that changes with every commit. Shared by the trackio format
(formats/trackio.py: the traces table as lines) and the training history (history.py: the metrics table).

Opening: a database whose header says WAL (trackio's default journal) and that has no -wal file beside it is not
open in any writer (SQLite deletes the -wal when the last connection closes): it is opened immutable, so nothing is
created beside it. Else (a writer has it open, or the rollback journal trackio uses on Spaces) it is opened with
mode=ro: a WAL reader never blocks the writer (it sees the last commit; SQLite may create the -shm beside the file, as
every reader does), a rollback-journal reader holds a shared lock only while it reads and gives up after BUSY_TIMEOUT_S
while the writer commits (the load report says so; the next refresh reads again). Nothing is ever written, and no
value is unpickled: trackio stores JSON (orjson) in its TEXT columns."""
import contextlib
import os
import sqlite3
from urllib.parse import quote

from rl_board.reading.storage import FileStatus, local_status
from rl_board.text import shorten, valid_text

BUSY_TIMEOUT_S = 2.0  # a rollback-journal writer holds its exclusive lock only while it commits


SQLITE_HEADER = b"SQLite format 3\x00"


WAL_VERSION = 2  # header bytes 18 and 19 (the file format's write and read versions): 2 for WAL, 1 for a rollback journal


# The database file's journal from its header: "wal", "rollback", or "" (not a SQLite file, or too short to say).
def journal_of(path: str) -> str:
    with open(path, "rb") as file:
        header = file.read(20)
    if len(header) < 20 or not header.startswith(SQLITE_HEADER):
        return ""
    return "wal" if header[18] == WAL_VERSION or header[19] == WAL_VERSION else "rollback"


# A connection that reads the database as committed now, in autocommit mode (read() holds one read transaction).
# Raises sqlite3.Error (not a database, locked, unreadable) or OSError.
def open_read_only(path: str) -> sqlite3.Connection:
    absolute = os.path.realpath(path)  # a symbolic link to a database: its -wal is beside the file itself
    immutable = journal_of(absolute) == "wal" and not os.path.exists(absolute + "-wal")
    uri = f"file:{quote(absolute)}?mode=ro" + ("&immutable=1" if immutable else "")
    connection = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    try:
        connection.execute("PRAGMA query_only = ON")
        connection.execute("SELECT count(*) FROM sqlite_master").fetchone()  # reads the header: fails on a non-database
    except BaseException:
        connection.close()
        raise
    return connection


# A read transaction: every query inside it sees the same commit, while a writer goes on (WAL) or waits (rollback).
@contextlib.contextmanager
def read(path: str):
    with contextlib.closing(open_read_only(path)) as connection:
        connection.execute("BEGIN")
        try:
            yield connection
        finally:
            with contextlib.suppress(sqlite3.Error):
                connection.execute("ROLLBACK")


def tables(connection: sqlite3.Connection) -> set[str]:
    return {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def columns(connection: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}  # table: one of trackio's names


# A file's status and its -wal's (a commit in WAL mode changes only the -wal): a key that changes when the content may.
def file_stamp(path: str) -> tuple:
    path = os.path.realpath(path)
    stamp = tuple(local_status(os.stat(path)))
    with contextlib.suppress(OSError):
        stamp += tuple(local_status(os.stat(path + "-wal")))[:2]
    return stamp


# The database's status for the conversion's stamp: the file's, with its -wal's and the traces table's row count and
# last rowid (a commit the file times cannot tell apart, within one clock tick, still changes them) as the etag.
def content_status(path: str, connection: sqlite3.Connection, has_traces: bool) -> FileStatus:
    path = os.path.realpath(path)
    status = local_status(os.stat(path))
    wal = ()
    with contextlib.suppress(OSError):
        wal = tuple(local_status(os.stat(path + "-wal")))[:2]
    rows = connection.execute("SELECT count(*), max(rowid) FROM traces").fetchone() if has_traces else ()
    return status._replace(etag=" ".join(str(part) for part in (*wal, "traces", *rows)))


# The runs of a database, by their key (run_id; run_name for a database of trackio < 0.24, which had no run ids), each
# named by its run_name; a name that two runs share gets the start of the run's id after it.
def run_names(connection: sqlite3.Connection, available: set[str]) -> dict[str, str]:
    found = {}
    for table in ("configs", "metrics", "traces"):
        if table not in available:
            continue
        names = columns(connection, table)
        if "run_name" not in names:
            continue
        key = "run_id" if "run_id" in names else "run_name"
        for run_key, name in connection.execute(f"SELECT {key}, run_name FROM {table} GROUP BY {key}, run_name ORDER BY min(rowid)"):
            found.setdefault(str(run_key), shorten(valid_text(str(name)), 80))
    counts = {}
    for name in found.values():
        counts[name] = counts.get(name, 0) + 1
    return {key: (name if counts[name] == 1 else f"{name} ({shorten(valid_text(key), 9)})") for key, name in found.items()}


# The column that tells a table's runs apart: run_id, or run_name before trackio 0.24.
def run_key_column(connection: sqlite3.Connection, table: str) -> str:
    return "run_id" if "run_id" in columns(connection, table) else "run_name"


# trackio's serialize_values writes non-finite numbers as these strings (utils.deserialize_values reads them back).
NON_FINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def number_of(value):
    if isinstance(value, str):
        return NON_FINITE.get(value, value)
    return value
