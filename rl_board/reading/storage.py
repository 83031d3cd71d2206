"""Where the files are: a path on this machine, or a URL of object storage (s3://, gs://, az://, hf://) read through
fsspec by byte ranges, with listings, file status (size, mtime or ETag), coalesced span reads, whole files written
atomically (the cache's), and errors turned into messages without credentials (StorageError)."""
import contextlib
import functools
import itertools
import os
import posixpath
import re
import threading
import uuid
from pathlib import Path
from typing import NamedTuple

import fsspec

from rl_board.text import shorten, valid_text
from rollout_logger.metadata import URL_USER_INFO


# Whether path lies inside folder once symbolic links and ".." are resolved. A URL is within a URL of the same store
# only; never within a local folder, nor a path within a URL.
def is_within(path, folder) -> bool:
    if is_remote(path) or is_remote(folder):
        if not (is_remote(path) and is_remote(folder)):
            return False
        normal = [posixpath.normpath(str(url).split("://", 1)[1]) for url in (path, folder)]
        same_store = str(path).split("://", 1)[0].lower() == str(folder).split("://", 1)[0].lower()
        return same_store and (normal[0] == normal[1] or normal[0].startswith(normal[1].rstrip("/") + "/"))
    return Path(os.path.realpath(Path(path).expanduser())).is_relative_to(os.path.realpath(Path(folder).expanduser()))


# The first symbolic link under a local folder (at any depth; links are not followed) that leads outside root once
# resolved, or None: a board served to the network opens no run holding one (a rank file or a rollout_meta.json linked
# to a file elsewhere would show it to every user).
def link_leading_outside(folder: str, root: str) -> str | None:
    if is_remote(folder):
        return None
    for parent, folders, files in os.walk(folder, followlinks=False):
        for name in folders + files:
            path = os.path.join(parent, name)
            if os.path.islink(path) and not is_within(path, root):
                return path
    return None


# A run's name on charts and in tables: its folder's name.
def run_label(run_dir: str) -> str:
    return valid_text(Path(run_dir).name) or valid_text(run_dir)


# Runs shown together (a run and those compared), each named apart: its folder's name, with as many folders above it as
# it takes where two share a name (a root that is a run, grpo, and its run grpo/grpo: "coll/grpo" and "grpo/grpo"),
# so that no two runs' lines, colours or download rows are one.
def run_labels(run_dirs: list[str]) -> list[str]:
    parts = [[valid_text(part) for part in folder_names(run_dir)] or [valid_text(run_dir)] for run_dir in run_dirs]
    labels = [run_label(run_dir) for run_dir in run_dirs]
    for depth in range(2, max(map(len, parts), default=0) + 1):
        shared = {label for label in labels if labels.count(label) > 1}
        if not shared:
            break
        labels = ["/".join(path[-depth:]) if label in shared else label for label, path in zip(labels, parts)]
    return [valid_text(run_dir) if labels.count(label) > 1 else label for label, run_dir in zip(labels, run_dirs)]  # /data/run, s3://data/run: whole


_read_buffers = threading.local()


# The folders of a path, outermost first: of a URL, those after its scheme (the bucket first); on disk, those after its
# root or drive.
def folder_names(run_dir: str) -> list[str]:
    if is_remote(run_dir):
        return [name for name in run_dir.split("://", 1)[1].split("/") if name]
    path = Path(run_dir)
    return [name for name in path.parts if name != path.anchor]


# Bytes [start, end) of a file in a buffer reused per thread: allocating 100 MB anew costs more than reading it.
def read_range(path: str, start: int, end: int) -> tuple[bytearray, int]:
    if is_remote(path):
        data = read_remote_range(path, start, end)
        return data, len(data)
    wanted = end - start
    buffer = getattr(_read_buffers, "buffer", None)
    if buffer is None or len(buffer) < wanted:
        buffer = _read_buffers.buffer = bytearray(wanted + wanted // 8)  # headroom: the next chunk is a few lines longer
    view, got = memoryview(buffer), 0
    with open(path, "rb", buffering=0) as file:
        file.seek(start)
        while got < wanted:
            count = file.readinto(view[got:wanted])
            if not count:
                break
            got += count
    return buffer, got


# A file as the index cache knows it: its real path, or its URL (with the S3 endpoint: two stores may share names).
def canonical_path(path: str) -> str:
    if not is_remote(path):
        return os.path.realpath(path)
    endpoint = os.environ.get("AWS_ENDPOINT_URL") if path.lower().startswith("s3://") else None
    return f"{path} at {endpoint}" if endpoint else path


# canonical_path of many files, each folder's real path found once: a run of thousands of files in a folder (a file a
# step) took a realpath of each, a stat of every folder above it, at every refresh. A file that is a link is resolved
# on its own.
def canonical_paths(paths) -> dict[str, str]:
    folders, canonical = {}, {}
    for path in paths:
        if is_remote(path) or os.path.islink(path):
            canonical[path] = canonical_path(path)
            continue
        folder, name = os.path.split(path)
        if folder not in folders:
            folders[folder] = os.path.realpath(folder)
        canonical[path] = os.path.join(folders[folder], name)
    return canonical


REMOTE_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+)://")


# The fsspec backend each protocol needs, named when it is not installed.
STORAGE_PACKAGES = {"s3": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs", "hf": "huggingface_hub"}


# S3 requests fail in seconds, not minutes, when the endpoint is down (botocore retries for long by default), and in
# a minute at most when it stalls (a connection taken, no answer): botocore's attempts are the only ones (s3fs retries
# each call 5 times more, around botocore's, and a read twice over: 75 attempts, over an hour at a 60 s timeout).
S3_CONFIG = {"connect_timeout": 5, "read_timeout": 20, "retries": {"max_attempts": 3, "mode": "standard"}}
S3FS_RETRIES = 1


# Lines closer than SPAN_GAP bytes are read from object storage in one request of at most SPAN_BLOCK bytes.
SPAN_GAP, SPAN_BLOCK = 1 << 16, 2 << 20


# Environment variables that hold secrets: their values are blanked out of any message shown.
SECRET_VARIABLES = re.compile(r"SECRET|TOKEN|PASSWORD|ACCESS_KEY|ACCOUNT_KEY|CREDENTIAL|SAS", re.IGNORECASE)


class StorageError(OSError):
    """A run folder could not be listed or read (object storage's errors, a folder name that is not UTF-8): the message
    says why, without any credential."""


class StorageUnreachable(StorageError):
    """Object storage did not answer (a timeout, a connection refused or cut) for `path`: other requests to it would wait
    as long."""

    def __init__(self, message: str, path: str = ""):
        super().__init__(message)
        self.path = path


# The errors of a store that does not answer, as botocore, aiohttp and asyncio raise them (by name: their packages are
# the backends').
UNREACHABLE_ERRORS = {"ConnectTimeoutError", "ReadTimeoutError", "EndpointConnectionError", "ConnectionClosedError", "ClientConnectorError", "ServerTimeoutError", "ServerDisconnectedError"}


# Whether a storage call's error says the store did not answer (rather than refused: a 404, a 403).
def unreachable(error: Exception) -> bool:
    return isinstance(error, (TimeoutError, ConnectionError)) or any(kind.__name__ in UNREACHABLE_ERRORS for kind in type(error).__mro__)


# A file's size and version as listed: a local file's stat, or an object's size and ETag (mtime, inode and device 0).
class FileStatus(NamedTuple):
    size: int
    mtime_ns: int = 0
    inode: int = 0
    device: int = 0
    etag: str = ""


# A listed file or folder of a folder.
class Entry(NamedTuple):
    name: str
    path: str
    is_dir: bool
    status: FileStatus | None


def is_remote(path) -> bool:
    match = REMOTE_URL.match(str(path))
    return bool(match) and match.group(1).lower() != "file"


# One filesystem per protocol in each process (workers make their own). Credentials come from the backend's standard
# chain (environment, profile, instance role); S3's endpoint from AWS_ENDPOINT_URL, which --endpoint-url sets.
@functools.cache
def storage(protocol: str):
    if protocol not in STORAGE_PACKAGES:  # http://, ftp://...: not object storage, and a server should not fetch them
        raise StorageError(f"{protocol}:// is not object storage the board reads: s3://, gs://, az:// or hf://")
    options = {}
    if protocol == "s3":
        endpoint = os.environ.get("AWS_ENDPOINT_URL")
        options = {"config_kwargs": S3_CONFIG, "client_kwargs": {"endpoint_url": endpoint} if endpoint else {}}
    try:
        filesystem = fsspec.filesystem(protocol, **options)
    except ImportError:
        package = STORAGE_PACKAGES.get(protocol, "fsspec backend")
        raise StorageError(f"{protocol}:// paths need the {package} package: pip install {package}") from None
    if protocol == "s3":
        filesystem.retries = S3FS_RETRIES
    return filesystem


# The filesystem of a URL's store; a URL holding credentials is refused.
def remote_storage(path: str):
    if URL_USER_INFO.search(path):  # botocore takes "key:secret@bucket" for a bucket's name, and messages would show it
        raise StorageError(f"{shown_url(path)}: credentials in the URL are not read: give them as the storage's own tools take them (for S3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile, a role)")
    return storage(REMOTE_URL.match(path).group(1).lower())


# A URL as messages show it: without a user and password (s3://key:secret@bucket/...) nor a query's token.
def shown_url(path) -> str:
    return QUERY_SECRET.sub(r"\1…", URL_USER_INFO.sub("…@", str(path)))


# A URL with its scheme in lower case (S3://bucket as s3://bucket, which fsspec needs); a path as it is.
def lower_scheme(path: str) -> str:
    return REMOTE_URL.sub(lambda scheme: scheme.group(0).lower(), path, count=1) if is_remote(path) else path


# A storage call's failure as a StorageError naming the path and what went wrong (never a credential).
@contextlib.contextmanager
def storage_errors(path: str):
    try:
        yield
    except StorageError:
        raise
    except FileNotFoundError:
        raise StorageError(f"{shown_url(path)} was not found (no such bucket, folder or object)") from None
    except PermissionError as error:
        raise StorageError(f"{shown_url(path)}: permission denied ({without_secrets(error)}); check the credentials") from None
    except Exception as error:  # network and service errors come as many types (botocore, aiohttp, asyncio)
        message = f"{shown_url(path)} could not be read: {type(error).__name__}: {without_secrets(error)}"
        raise (StorageUnreachable(message, path) if unreachable(error) else StorageError(message)) from None


# A user and password anywhere in a text (botocore quotes a URL's "key:secret@bucket" as a bucket's name; a secret
# may hold "/"), and a signature or token in a URL's query (?X-Amz-Signature=..., ?token=...).
USER_INFO_ANYWHERE = re.compile(r"[^\s/@\"':]+:[^\s\"']*@")
QUERY_SECRET = re.compile(r"(?i)([?&](?:x-amz-signature|x-amz-credential|x-amz-security-token|token|access_token|sig|signature|key|secret|password)=)[^&\s\"']*")


# An error's message without a URL's user and password, nor the value of an environment variable holding a secret.
def without_secrets(error: Exception) -> str:
    text = QUERY_SECRET.sub(r"\1…", USER_INFO_ANYWHERE.sub("…@", URL_USER_INFO.sub("…@", str(error))))
    for name, value in os.environ.items():
        if SECRET_VARIABLES.search(name) and len(value) >= 4:
            text = text.replace(value, "…")
    return shorten(text, 300)


# The files and folders in a folder, sorted by name (hidden ones left out).
def list_folder(folder: str) -> list[Entry]:
    entries = []
    if is_remote(folder):
        remote = remote_storage(folder)
        with storage_errors(folder):
            listed = remote.ls(folder, detail=True, refresh=True)
        for item in listed:
            path = remote.unstrip_protocol(item["name"].rstrip("/"))
            is_dir = item.get("type") == "directory"
            status = None if is_dir else FileStatus(int(item.get("size") or 0), etag=str(item.get("ETag") or item.get("etag") or "").strip('"'))
            entries.append(Entry(path.rsplit("/", 1)[-1], path, is_dir, status))
    else:
        with os.scandir(folder) as found:
            for entry in found:
                with contextlib.suppress(OSError):
                    is_dir, is_file = entry.is_dir(), entry.is_file()
                    status = entry.stat() if is_file else None
                    if is_dir or is_file:
                        entries.append(Entry(entry.name, entry.path, is_dir, status and local_status(status)))
    return sorted((entry for entry in entries if not entry.name.startswith(".")), key=lambda entry: entry.name)


# The JSONL files of a run folder that list_folder leaves out, each with why: a name that is not UTF-8 (tables and
# caches need it), on disk a link to nothing (its target deleted, or on a mount not there now).
def jsonl_left_out(folder: str) -> list[tuple[str, str]]:
    not_utf8 = "the file name is not valid UTF-8: rename the file to load it"
    if is_remote(folder):
        return [(entry.name, not_utf8) for entry in list_folder(folder) if entry.name.endswith(".jsonl") and valid_text(entry.name) != entry.name]
    left_out = []
    with os.scandir(folder) as found:
        for entry in found:
            if not entry.name.endswith(".jsonl") or entry.name.startswith("."):
                continue
            if valid_text(entry.name) != entry.name:
                left_out.append((entry.name, not_utf8))
            elif entry.is_symlink() and not os.path.exists(entry.path):
                left_out.append((entry.name, "a link to a file that is not there (deleted, or on a mount not there now): left out, read once it is"))
    return sorted(left_out)


def local_status(status: os.stat_result) -> FileStatus:
    return FileStatus(status.st_size, status.st_mtime_ns, status.st_ino, status.st_dev)


def file_status(path: str) -> FileStatus:
    if not is_remote(path):
        return local_status(os.stat(path))
    with storage_errors(path):
        info = remote_storage(path).info(path, refresh=True)
    return FileStatus(int(info.get("size") or 0), etag=str(info.get("ETag") or info.get("etag") or "").strip('"'))


# A file or folder inside a folder, by name.
def joined(folder: str, name: str) -> str:
    if is_remote(folder):
        return folder if name == "." else f"{folder.rstrip('/')}/{name}"
    return str(Path(folder).expanduser() / name)


# Whole small files (metadata, another trainer's files to convert).
def read_file(path: str) -> bytes:
    if not is_remote(path):
        return Path(path).read_bytes()
    with storage_errors(path):
        return remote_storage(path).cat_file(path)


# Whether a file is there (an object, on object storage).
def is_file(path: str) -> bool:
    if not is_remote(path):
        return os.path.isfile(path)
    with storage_errors(path):
        return remote_storage(path).isfile(path)


# A folder (on object storage, a prefix with objects under it; an object's listing is the object itself).
def is_folder(path: str) -> bool:
    if not is_remote(path):
        return os.path.isdir(path)
    with storage_errors(path):
        return remote_storage(path).isdir(path)


# Write a whole file so that a reader finds the old content or the new, never part of it: on disk a file of its own
# renamed over it (each writer its own, folders made), on object storage one request (an object appears whole).
def write_file(path: str, data) -> None:
    if is_remote(path):
        with storage_errors(path):
            remote_storage(path).pipe_file(path, bytes(data))
        return
    target = Path(path)
    temporary = target.with_name(f"{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_bytes(data)
        os.replace(temporary, target)
    finally:
        with contextlib.suppress(OSError):
            temporary.unlink()


# Why files cannot be written in a folder (or a prefix of object storage), or None when they can: a file of some bytes
# written there and removed again (an empty one is written on a full disk too).
def write_problem(folder: str) -> str | None:
    probe = joined(folder, f".write-check-{uuid.uuid4().hex}")
    try:
        write_file(probe, bytes(WRITE_CHECK_BYTES))
    except OSError as error:
        return str(error)
    remove_file(probe)
    return None


WRITE_CHECK_BYTES = 1 << 16


# Remove a file where it can be (a file already gone, or a folder that refuses, is left as it is).
def remove_file(path: str) -> None:
    with contextlib.suppress(OSError):
        if is_remote(path):
            with storage_errors(path):
                remote_storage(path).rm_file(path)
        else:
            os.unlink(path)


# Bytes [start, end) of an object, in one ranged request.
def read_remote_range(path: str, start: int, end: int) -> bytes:
    if end <= start:  # S3 would take an empty range for a suffix one
        return b""
    with storage_errors(path):
        return remote_storage(path).cat_file(path, start=start, end=end)


# The bytes of lines (each of its own file), in order: on disk one pread each; on object storage, lines of a file
# close together are read in one request, and all requests run at once.
def read_spans(paths: list[str], offsets: list[int], lengths: list[int]) -> list[bytes]:
    spans = [b""] * len(offsets)
    order = sorted(range(len(offsets)), key=lambda position: (paths[position], offsets[position]))
    if not any(is_remote(path) for path in paths):
        for path, positions in itertools.groupby(order, key=lambda position: paths[position]):
            with open(path, "rb") as file:
                for position in positions:
                    spans[position] = os.pread(file.fileno(), lengths[position], offsets[position])
        return spans
    blocks = []  # [path, start, end, [span positions]]
    for position in order:
        path, start, end = paths[position], offsets[position], offsets[position] + lengths[position]
        last = blocks[-1] if blocks else None
        if last and last[0] == path and start - last[2] <= SPAN_GAP and end - last[1] <= SPAN_BLOCK:
            last[2] = max(last[2], end)
            last[3].append(position)
        else:
            blocks.append([path, start, end, [position]])
    with storage_errors(paths[0]):
        data = remote_storage(paths[0]).cat_ranges(*(list(column) for column in zip(*(block[:3] for block in blocks))), on_error="return")
    for (path, start, _, positions), block in zip(blocks, data):
        if isinstance(block, Exception):
            with storage_errors(path):
                raise block
        for position in positions:
            spans[position] = block[offsets[position] - start : offsets[position] - start + lengths[position]]
    return spans
