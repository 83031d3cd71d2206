"""Watch patterns, for reward hacking: a search saved under a name (`I cannot`, a format tag, a known exploit) and drawn
as a curve of its hit rate per step (the Step-Watch tab, `rl_board.pattern_rate`), with the hits of one step listed.

A step's hit rate is the share of its loaded samples whose field (response, prompt, or either) the pattern matches,
searched as the page's search does (reading/search.py: RE2, each text on its own, so ^ and $ are the text's ends).
Steps the search did not wholly reach before its deadline (SEARCH_SECONDS) have no rate.

The saved patterns are kept per run root (its canonical path, or its URL) in one small JSON file in the index cache's
folder (WATCH_FILE; RL_LOGGING_BOARD_CACHE or ~/.cache/rl_logging_board, the latter too when the cache is a prefix of
object storage: they are this machine's), never in a run folder: written whole to a
temporary file and renamed over the old one, so a reader never sees half a file; a file that cannot be read is a
message (and is kept aside on the next save), never a crash."""
import json
import os
import threading
import uuid
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from rl_board.reading.index import IndexCache
from rl_board.reading.search import (
    SEARCH_PLACES,
    SEARCH_SECONDS,
    RunTexts,
    match_snippets,
    search_pattern,
    search_samples,
)
from rl_board.reading.storage import canonical_path, is_remote

WATCH_FILE = "watch_patterns.json"  # in the index cache's folder


WATCH_FORMAT = 1  # the file's layout: {"format": 1, "roots": {canonical root: [pattern, ...]}}


WATCH_PATTERNS_MAX = 20  # saved per root: each is a pass over every loaded text when its run is drawn


NAME_CHARACTERS = 80  # of a pattern's name at most


# A saved search: its name (unique per root), the pattern, where it looks (a key of SEARCH_PLACES), and whether it is a
# regular expression (RE2) and matches case. The same on the page and in Python: regex and case-sensitive, as re is.
@dataclass(frozen=True)
class WatchPattern:
    name: str
    pattern: str
    field: str = "response"
    regex: bool = True
    match_case: bool = True

    def compiled(self):
        return search_pattern(self.pattern, self.regex, self.match_case)


# A watch pattern checked: a name, and a search checked_search takes. Raises ValueError saying what is wrong.
def watch_pattern(name, pattern, field: str = "response", regex: bool = True, match_case: bool = True) -> WatchPattern:
    if not isinstance(name, str) or not name.strip():
        raise ValueError("a watch pattern needs a name")
    if len(name.strip()) > NAME_CHARACTERS:
        raise ValueError(f"a name of at most {NAME_CHARACTERS} characters, please ({len(name.strip())} given)")
    return checked_search(WatchPattern(name.strip(), pattern, field, regex, match_case))


# The watch pattern if it can search: a pattern RE2 takes, a field it can look in. Raises ValueError saying why not.
def checked_search(watch: WatchPattern) -> WatchPattern:
    if not isinstance(watch.pattern, str) or not watch.pattern:
        raise ValueError("a watch pattern needs a pattern (an empty one matches every sample)")
    if not isinstance(watch.field, str) or watch.field not in SEARCH_PLACES:  # a list from a hand-edited file too
        raise ValueError(f"field must be one of {', '.join(map(repr, SEARCH_PLACES))}, not {watch.field!r}")
    if not isinstance(watch.regex, bool) or not isinstance(watch.match_case, bool):
        raise ValueError("regex and match_case are true or false")
    try:
        watch.compiled()
    except ValueError as error:
        raise ValueError(f"not a valid {'regular expression' if watch.regex else 'pattern'}: {error}") from None
    return watch


# One pattern over a run's loaded samples (a snapshot's, their texts read through `texts`), per step: its samples,
# those whose field the pattern matches (hits), and hits / samples (rate); hits and rate NaN for a step the search did
# not wholly reach before its deadline. Indexed by step.
def watch_counts(texts: RunTexts, samples: pd.DataFrame, watch: WatchPattern) -> pd.DataFrame:
    found = search_samples(texts, samples, watch.compiled(), watch.field)
    rows = pd.DataFrame({"step": samples["step"].to_numpy(), "hit": found.place > 0, "searched": np.arange(len(samples)) < found.searched})
    table = rows.groupby("step").agg(samples=("hit", "size"), hits=("hit", "sum"), searched=("searched", "all"))
    table["hits"] = table["hits"].where(table["searched"])
    table["rate"] = table["hits"] / table["samples"]
    return table.drop(columns="searched")


# The hits of some patterns at one step: the step's matching rows (as `samples` has them), a row per pattern and sample
# it matches, with the pattern's name, where it matched and the text around the match (⟦ ⟧ around it); and the names of
# the patterns whose search stopped at its deadline before the step's last sample (their hits are those before).
def step_hits(texts: RunTexts, samples: pd.DataFrame, watches: list[WatchPattern], step: int) -> tuple[pd.DataFrame, list[str]]:
    rows = samples[samples["step"] == step]
    hits, stopped = [], []
    for watch in watches:
        found = search_samples(texts, rows, watch.compiled(), watch.field)
        if found.searched < len(rows):
            stopped.append(watch.name)
        matched = found.place > 0
        hit_rows = rows[matched]
        snippets = match_snippets(texts, hit_rows, found.place[matched], found.start[matched], found.end[matched])
        hits.append(hit_rows.assign(pattern=watch.name, **{"found in": np.where(found.place[matched] == 1, "prompt", "response"), "match": snippets}))
    return (pd.concat(hits) if hits else rows.iloc[:0].assign(pattern="", **{"found in": "", "match": ""})), stopped


def pattern_rate(run, pattern: str, field: str = "response", regex: bool = True, match_case: bool = True) -> pd.Series:
    """The share of each step's loaded samples of a run (rl_board.open_run's) whose field the pattern matches: a
    Series indexed by step, named by the pattern. field: "response", "prompt" or "prompt and response"; regex: RE2
    syntax, else the text as it is; case-sensitive unless match_case=False. A step the search did not reach in
    SEARCH_SECONDS is NaN, with a warning. watch_counts has each step's samples and hits too."""
    watch = checked_search(WatchPattern(str(pattern), pattern, field, regex, match_case))
    counts = watch_counts(run.texts, run.snapshot.samples, watch)
    if counts["rate"].isna().any():
        warnings.warn(f"the search stopped after {SEARCH_SECONDS:.0f} s: {int(counts['rate'].isna().sum())} step(s) have no rate", stacklevel=2)
    return counts["rate"].rename(pattern)


# The saved patterns of a root, and what in the file could not be used (each a message).
@dataclass(frozen=True)
class SavedPatterns:
    patterns: list[WatchPattern]
    problems: list[str]


WRITING = threading.Lock()  # one change at a time in this process (the page's sessions share it): none undoes another's


def watch_file() -> Path:
    return IndexCache().local_folder / WATCH_FILE


# The root as the file keys it: the same folder however it is written, a URL with its endpoint.
def root_key(root) -> str:
    root = str(root)
    return canonical_path(root if is_remote(root) else os.path.expanduser(root))


# The file's roots and their entries as written, and why it cannot be read (None: it can, or it is absent).
def read_watch_file(path: Path) -> tuple[dict, str | None]:
    try:
        content = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return {}, None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:  # the last: nested too deep for json
        return {}, f"{path} could not be read ({error})"
    if not isinstance(content, dict) or content.get("format") != WATCH_FORMAT or not isinstance(content.get("roots"), dict):
        return {}, f"{path} is not a file of watch patterns (format {WATCH_FORMAT})"
    return content["roots"], None


def saved_patterns(root) -> SavedPatterns:
    path = watch_file()
    roots, problem = read_watch_file(path)
    entries = roots.get(root_key(root), [])
    problems = [problem] if problem else []
    if not isinstance(entries, list):
        return SavedPatterns([], problems + [f"{path}: the patterns of {root_key(root)} are not a list"])
    patterns = []
    for position, entry in enumerate(entries, 1):
        try:
            if not isinstance(entry, dict):
                raise ValueError("not an object")
            watch = watch_pattern(entry.get("name"), entry.get("pattern"), entry.get("field", "response"), entry.get("regex", True), entry.get("match_case", True))
            if any(saved.name == watch.name for saved in patterns):
                raise ValueError(f"a second pattern named {watch.name!r}")
            if len(patterns) == WATCH_PATTERNS_MAX:
                raise ValueError(f"more than {WATCH_PATTERNS_MAX} for the root")
        except ValueError as error:
            problems.append(f"saved pattern {position} left out: {error}")
            continue
        patterns.append(watch)
    return SavedPatterns(patterns, problems)


# Whether a saved entry is the pattern of that name, as saved_patterns names it (a hand-written " a " is a).
def named(entry, name: str) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("name"), str) and entry["name"].strip() == name


# Save a pattern under the root (one of the same name is replaced). Returns a note (a damaged file kept aside), or "".
# Raises ValueError saying why it was not saved.
def save_pattern(root, watch: WatchPattern) -> str:
    def change(entries: list) -> list:
        entries = [entry for entry in entries if not named(entry, watch.name)]
        if len(entries) >= WATCH_PATTERNS_MAX:
            raise ValueError(f"at most {WATCH_PATTERNS_MAX} watch patterns per root: remove one first")
        return entries + [asdict(watch)]

    return change_patterns(root, change)


# Remove the root's pattern of that name (none: nothing changes). Returns a note, or "".
def remove_pattern(root, name: str) -> str:
    return change_patterns(root, lambda entries: [entry for entry in entries if not named(entry, name)])


# Read the file, change the root's entries, write it whole to a temporary file of this writer's own and rename it over
# the old one. A damaged file is renamed to WATCH_FILE.damaged first (the note says so): the other roots' patterns are
# in it, for a person to mend.
def change_patterns(root, change) -> str:
    path, note = watch_file(), ""
    with WRITING:
        roots, problem = read_watch_file(path)
        key = root_key(root)
        if not problem and key in roots and not isinstance(roots[key], list):  # the root's entry damaged: kept aside too
            problem = f"{path}: the patterns of {key} are not a list"
        if problem:
            aside = path.with_name(path.name + ".damaged")
            try:
                os.replace(path, aside)
            except OSError as error:
                raise ValueError(f"{problem}, and it cannot be moved aside ({error}): not saved") from None
            roots = {name: entries for name, entries in roots.items() if isinstance(entries, list)}  # the other roots go on
            note = f"{problem}: it was kept as {aside}, and a new file started" + (" with the other roots' patterns." if roots else ".")
        entries = roots.get(key, [])
        roots = {**roots, key: change(entries)}
        if not roots[key]:
            del roots[key]
        temporary = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(json.dumps({"format": WATCH_FORMAT, "roots": roots}, ensure_ascii=False, indent=1), "utf-8")
            os.replace(temporary, path)
        except OSError as error:
            temporary.unlink(missing_ok=True)
            raise ValueError(f"watch patterns not saved to {path}: {error}") from None
    return note
