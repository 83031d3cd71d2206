"""Other trainers' files converted into the board's JSONL once, kept in the cache folder (or the cache's prefix of
object storage) with a stamp of what each was made from (source, size, mtime or ETag, conversion version, context), and
made again only when that changes. A format's convert returns the lines' bytes, or (bytes, notes): notes [(line number
in the conversion, reason)] for the load report, about what the conversion could not take as it was (kept in the
stamp, so a conversion found made gives them again)."""
import contextlib
import hashlib
import json
import os

from rl_board.formats.base import RunFormat
from rl_board.reading.index import IndexCache
from rl_board.reading.storage import FileStatus, canonical_path, is_file, joined, read_file, write_file

CONVERSION_FORMAT = 9  # a conversion made by another version of this code is made again (9: reasoning as <think>, TRL 1.16 tool loops as turns, SkyRL ground truths)


CONVERSION_THREADS = 16  # files of a run on object storage fetched and converted at once


# Every conversion's stamp of a run in one file of its folder, beside the stamp file each has: a store starting on a run
# of thousands of converted files (a file per step) reads one file instead of thousands.
KNOWN_CONVERSIONS = "conversions.json"


# Where a run's conversions are kept: one folder per run in the cache folder (a folder, or a prefix of object storage).
def conversions_folder(cache: "IndexCache", run_dir: str) -> str:
    return joined(cache.folder, f"converted/{hashlib.sha1(os.fsencode(canonical_path(run_dir))).hexdigest()[:20]}")


# The conversions known from the run's one file: {source: (stamp, conversion path, notes)} ({} when there is none, or
# it cannot be read); each is checked against its source as a conversion found made is.
def known_conversions(folder: str) -> dict:
    try:
        known = json.loads(read_file(joined(folder, KNOWN_CONVERSIONS)))
        return {source: (stamp, target, tuple((int(line), str(reason)) for line, reason in notes)) for source, (stamp, target, notes) in known.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


# Write the known conversions (atomically; one that cannot be written costs speed, never data).
def save_known_conversions(folder: str, known: dict):
    with contextlib.suppress(OSError):
        write_file(joined(folder, KNOWN_CONVERSIONS), json.dumps({source: [stamp, target_path, list(notes)] for source, (stamp, target_path, notes) in known.items()}).encode())


# A source file's conversion, made when the file (or what the conversion depends on) changed since the last one; a
# stamp beside it records what it was made from, and the conversion's notes. Returns the conversion's path and notes.
# The conversion has its source's name (or its file_contexts name), whatever its format: the load report, search hits
# and exports name its lines by it, so they name the user's file (completions_00003.parquet), not one made here.
# canonical: the source's canonical_path, where the caller found it already (canonical_paths).
def converted_file(source: str, status: FileStatus, run_format: RunFormat, folder: str, known: dict, canonical: str | None = None) -> tuple[str, tuple]:
    name, extra = run_format.file_contexts.get(source, (source.rstrip("/").rsplit("/", 1)[-1], None))
    context = run_format.context if extra is None else (*run_format.context, extra)
    target = joined(folder, name)
    stamp_path = f"{target}.source"
    stamp = {"source": canonical or canonical_path(source), "status": list(status), "conversion": CONVERSION_FORMAT, "context": json.loads(json.dumps(context))}
    if source in known and known[source][:2] == (stamp, target) and is_file(target):
        return target, known[source][2]
    with contextlib.suppress(OSError, ValueError, TypeError):
        made = json.loads(read_file(stamp_path))
        notes = tuple((int(line), str(reason)) for line, reason in made.pop("notes", []))
        if is_file(target) and made == stamp:
            known[source] = (stamp, target, notes)
            return target, notes
    data = run_format.convert(source if run_format.reads_path else read_file(source), context)
    data, notes = data if isinstance(data, tuple) else (data, ())
    notes = tuple((int(line), str(reason)) for line, reason in notes)
    try:
        write_file(target, data)  # the conversion first: a stamp is never found beside an older one
        write_file(stamp_path, json.dumps(stamp | {"notes": notes}).encode())
    except OSError as error:
        raise ConversionNotWritten(f"its conversion could not be written to the cache, {folder} ({error}); it is made again on the next load") from None
    known[source] = (stamp, target, notes)
    return target, notes


class ConversionNotWritten(OSError):
    """A conversion made but not written to the cache: the board reads other trainers' files from their conversions, so
    the cache (a folder or a prefix of object storage) must be writable for them."""
