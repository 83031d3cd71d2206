"""What every format module gives the registry, and what detectors share: RunFormat (how a run folder's files are
read), RunLayout (which folders are one run of the format, from a listing), Folder (one listing of a run folder) and
first_line_keys (the keys a JSONL file's first line has); and what converters share: a group id from a prompt, a sum of
scores that cannot fail."""
import fnmatch
import functools
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl_board.reading.lines import as_text, line_fields
from rl_board.reading.storage import Entry, FileStatus, is_remote, list_folder, read_range
from rl_board.text import valid_text
from rollout_logger.metadata import METRICS_FILES

UTF8_BOM = b"\xef\xbb\xbf"


# A line of a JSONL file another trainer wrote, as its JSON object; None for a blank line, one that is not JSON (an
# incomplete last line of a file being written) or JSON that is not an object: converters leave such a line as it is.
def json_object(line: bytes) -> dict | None:
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


# How a run folder's files are read: which files, named how in the load report, converted by what (None: as they are).
@dataclass(frozen=True)
class RunFormat:
    name: str
    convert: Any = None  # (bytes of a source file, or its path with reads_path, context) -> bytes of the board's JSONL lines
    context: tuple = ()  # what a conversion depends on besides the file (TRL: the reward functions' names)
    problems: tuple = ()  # load-report rows (file, line, kind, reason): notes, files that could not be converted
    weights: tuple = ()  # (name, weight) of each reward function, from the logger's metadata (none: unknown)
    weights_source: str = "the logger's metadata"  # where `weights` come from, in words
    sums_reward: bool = False  # reward is the functions' scores weighted by `weights`, summed when the run loads
    history_dir: str = ""  # where the trainer's history is, when not in the run folder (TRL's output folder)
    reads_path: bool = False  # convert is given the source's path, not its bytes: a database it opens itself (trackio's)
    # source -> (its conversion's name, what converting it depends on besides context, given to convert after it), for
    # files whose names repeat in a run (prime-rl's step_<n>/rank_<r>.jsonl) or whose path says what their lines do not
    # (NeMo-RL's step); a source not in it keeps its name. Not compared: a change shows as a conversion made again.
    file_contexts: dict = field(default_factory=dict, compare=False)
    # source -> the listing's entry of its summaries file (the logger's, rollout_logger/metadata.py): its lines are
    # indexed from it when the source is indexed from scratch. Not compared: it grows with its source.
    summaries: dict = field(default_factory=dict, compare=False)
    # source -> the listing's status of its texts file (the logger's): its records, once checked, are used while it only
    # grows (FileIndex.follow_texts). Not compared, as summaries.
    texts: dict = field(default_factory=dict, compare=False)
    # (the conversions' load-report rows) -> those rows, notes of several files made one (W&B's cumulative tables: a
    # note per key); None: as they are.
    merged_notes: Any = None


# One listing of a run folder: its files whose names are valid UTF-8 (tables and caches need it; the others are in the
# load report), its sub-folders' names, and its JSONL files that are not the logger's metrics files.
@dataclass(frozen=True)
class Folder:
    run_dir: str
    files: tuple[Entry, ...]
    folders: frozenset[str]
    jsonl: tuple[Entry, ...]

    @classmethod
    def listed(cls, run_dir: str) -> "Folder":
        entries = list_folder(run_dir)
        files = tuple(entry for entry in entries if not entry.is_dir and valid_text(entry.name) == entry.name)
        jsonl = tuple(entry for entry in files if entry.name.endswith(".jsonl") and not fnmatch.fnmatch(entry.name, METRICS_FILES))
        return cls(run_dir, files, frozenset(entry.name for entry in entries if entry.is_dir), jsonl)

    def sources(self, entries) -> dict[str, FileStatus]:
        return {entry.path: entry.status for entry in entries}


# A folder's parent and its own name, symbolic links and ".." resolved on disk ("" for the parent of a bucket's root).
def parent_and_name(folder: str) -> tuple[str, str]:
    if is_remote(folder):
        parent, _, name = folder.rstrip("/").rpartition("/")
        return ("" if parent.endswith(":/") else parent), name
    resolved = Path(folder).expanduser().resolve()
    return str(resolved.parent), resolved.name


EVERY_FOLDER = re.compile(r".*", re.DOTALL)  # RunLayout.parts of a trainer's own output folder: all its sub-folders are its


# Which folders are one run of a format, told from the folder's listing alone (list_runs asks every format's layout
# of a root before anything is opened: nothing is read, one listing, also on object storage). A folder is a run of
# the format when it holds a file whose name `files` matches, or a sub-folder named in `folders`, or is itself named
# in `named` (a folder of a run that also opens alone: prime-rl's token_exports/). Its sub-folders whose names `parts`
# matches are that run's (a trainer's logs, checkpoints, exports), not runs of their own.
@dataclass(frozen=True)
class RunLayout:
    files: re.Pattern | None = None
    folders: frozenset[str] = frozenset()
    named: frozenset[str] = frozenset()
    parts: re.Pattern | None = None

    def takes(self, folder: Folder) -> bool:
        if self.folders & folder.folders:
            return True
        if self.files is not None and any(self.files.fullmatch(entry.name) for entry in folder.files):
            return True
        return bool(self.named) and parent_and_name(folder.run_dir)[1] in self.named

    def holds(self, name: str) -> bool:
        return self.parts is not None and self.parts.fullmatch(name) is not None


# A format whose files are JSONL rank files named by a pattern, read as they are: it takes a folder whose every JSONL
# file is so named.
def named_rank_files(folder: Folder, pattern, name: str) -> tuple[dict[str, FileStatus], RunFormat] | None:
    if folder.jsonl and all(pattern.fullmatch(entry.name) for entry in folder.jsonl):
        return folder.sources(folder.jsonl), RunFormat(name)
    return None


# The top-level keys of a file's first line; none for an empty file, a line that is not a JSON object, or a file this
# process may not read (the conversion of it says so in the load report).
def first_line_keys(path: str, status: FileStatus) -> set:
    try:
        return read_first_line_keys(path, status)
    except OSError:  # not cached: read once it can be
        return set()


# first_line_keys of a file that can be read, however long its first line (a reasoning model's can be MBs), per file
# version.
@functools.lru_cache(maxsize=1024)
def read_first_line_keys(path: str, status: FileStatus) -> set:
    line, size = b"", 1 << 16
    while b"\n" not in line and len(line) < status.size:
        buffer, got = read_range(path, len(line), min(len(line) + size, status.size))
        if not got:  # cut short since it was listed
            break
        line += bytes(buffer[:got])
        size *= 2
    line = line.split(b"\n", 1)[0].removeprefix(UTF8_BOM)
    return set(line_fields(line))  # a line msgspec refuses (half an emoji, NaN) read by Python's json


# Completions of one prompt in a step form a group (GRPO's): the prompt's hash names it.
def group_of_prompt(prompt) -> str:
    return hashlib.blake2b((as_text(prompt) or "").encode(), digest_size=8).hexdigest()


# A sum of scores, exact where it can be (fsum): ±inf where they hold one or where the finite ones' sum goes beyond a
# float's range, NaN where +inf meets −inf. fsum raises in those two cases, which stopped a whole file's conversion.
def summed(values) -> float:
    values = list(values)
    try:
        return math.fsum(values)
    except OverflowError:
        return sum(values)
    except ValueError:
        return math.nan
