"""The run snapshot the page draws: which lines each step shows (Max Samples Each Step, round-robin over the rank
files, a resumed launch replacing older steps), their numbers in one frame with the load report (RunSnapshot, made by
RunStore.load); and the lines read back on demand: a step's texts (StepBatch), a sample's per-token lists
(SampleTokens), each checked to still hold its step; a prompt as its text and images (index_images), and the lines
of one prompt (prompt_lines, holds_prompt)."""
import contextlib
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa

from rl_board.formats.base import RunFormat
from rl_board.reading.history import read_meta_noted
from rl_board.reading.images import image_problems
from rl_board.reading.index import (
    BAD,
    BUNDLED_FILES,
    BUNDLED_ROWS,
    LINE_COLUMNS,
    PROBLEMS_LISTED,
    FileIndex,
    natural_order,
)
from rl_board.reading.lines import (
    EXTRA_PREFIX,
    FIELD_COLUMNS,
    FIELD_PREFIXES,
    ROLLOUT_DECODER,
    SUMMARY_NUMBERS,
    SUMMARY_TEXTS,
    TEXT_PREFIX,
    TEXTS_DECODER,
    TOKEN_KEYS,
    BadLine,
    aligned_token_arrays,
    as_text,
    beyond_range_note,
    decode_line,
    image_references,
    missing,
    missing_values,
    numbers_beyond_range,
    token_list,
)
from rl_board.reading.storage import StorageUnreachable, is_remote, jsonl_left_out, read_spans
from rl_board.reading.summaries import texts_file
from rl_board.text import readable_tokens, valid_text
from rollout_logger.metadata import RANK_FILE_PATTERN


# TRL's reward of a sample: the reward functions' scores times their weights (1 where none is given), summed
# skipping NaN (a function that did not score the sample); NaN where the line's own reward is NaN (a score that was not
# a number, left out: the sum of the others would understate the reward). A line no function scored keeps its own
# reward: NaN for TRL's (its converter gives such a row none), a W&B table's reward column beside TRL's completions.
def total_reward(samples: pd.DataFrame, weights: dict[str, float]) -> np.ndarray:
    columns = [column for column in samples.columns if column.startswith("rewards/")]
    rewards = samples["reward"].to_numpy(dtype=float)
    if not columns:
        return rewards
    scores = samples[columns].to_numpy(dtype=float) * np.array([weights.get(column[len("rewards/") :], 1.0) for column in columns])
    unscored = np.isnan(scores).all(axis=1)
    return np.where(unscored, rewards, np.where(np.isnan(rewards), np.nan, np.nansum(scores, axis=1)))


# What reward is, in words, for the page: the weighted sum and where the weights came from, or the plain sum.
def reward_sum_note(weights: dict[str, float] | None, source: str) -> str:
    if not weights:
        return "reward = the plain sum of the reward functions' scores (their weights are not known: type them in Reward weights)"
    return "reward = " + " + ".join(f"{weight:g} × {name}" for name, weight in weights.items()) + f" (weights from {source})"


# Groups numbered 0, 1, ... in batch order (NaN: no group): the ids as logged are long and alike.
def group_numbers(group_ids: pd.Series) -> np.ndarray:
    codes = pd.factorize(group_ids)[0]
    return np.where(codes >= 0, codes, np.nan)


FACET_VALUES = 50  # a short text field with more distinct values is a column, not a facet


REPORT_COLUMNS = [
    "file", "lines", "loaded", "bad lines", "not loaded (Max Samples Each Step)", "replaced by a newer launch", "incomplete last line",
]


# The lines a load shows, per file, and how many usable lines each file has that a newer launch replaced; with every
# file's index_id then (its parsed rows keep their numbers while it stays the same).
class Selection(NamedTuple):
    rows: dict[str, np.ndarray]
    replaced: dict[str, int]
    index_ids: dict[str, str]


# Which rows each file contributes. A resumed run starts a new launch at its checkpoint's step: every step an older
# launch logged from the newer launch's first step on was abandoned by training (re-logged, or a trajectory the resume
# dropped), so it is left out and counted; a file not named as the logger names rank files (no launch) has all its
# lines. Then up to max_samples per step (or as many as `wider` says for its steps), taken round-robin over the rank
# files.
def select_lines(files: dict[str, FileIndex], max_samples: int, wider: dict[float, int] | None = None) -> Selection:
    file_of, row, step, launch_of_row = [], [], [], []
    launches = sorted({index.launch for index in files.values()}, key=lambda launch: (natural_order(launch), launch))
    for position, index in enumerate(files.values()):
        lines = index.lines
        usable = np.flatnonzero((lines["status"] != BAD) & ~np.isnan(lines["step"]))
        file_of.append(np.full(len(usable), position))
        row.append(usable)
        step.append(lines["step"][usable])
        launch_of_row.append(np.full(len(usable), launches.index(index.launch)))
    paths = list(files)
    index_ids = {path: index.index_id for path, index in files.items()}
    if not row:
        return Selection({}, {}, index_ids)
    file_of, row, step, launch_of_row = (np.concatenate(parts) for parts in (file_of, row, step, launch_of_row))
    first_step = np.full(len(launches), np.inf)
    np.minimum.at(first_step, launch_of_row, step)
    # A launch's lines end where any newer launch begins.
    ends = np.minimum.accumulate(first_step[::-1])[::-1]
    ends = np.append(ends[1:], np.inf)
    unnamed = launches.index("") if "" in launches else -1  # the files without a launch: none of their lines replaced
    current = (step < ends[launch_of_row]) | (launch_of_row == unnamed)
    replaced = {paths[position]: int(count) for position, count in enumerate(np.bincount(file_of[~current], minlength=len(paths))) if count}
    file_of, row, step = file_of[current], row[current], step[current]
    steps, step_of_row = np.unique(step, return_inverse=True)
    limit = np.full(len(steps), max_samples, dtype=np.int64)
    for wide_step, samples in (wider or {}).items():
        at = int(np.searchsorted(steps, wide_step))
        if at < len(steps) and steps[at] == wide_step:
            limit[at] = samples
    turn = position_in_group(np.lexsort((row, file_of, step_of_row)), step_of_row * len(files) + file_of)
    chosen = position_in_group(np.lexsort((file_of, turn, step_of_row)), step_of_row) < limit[step_of_row]
    chosen_files, chosen_rows = file_of[chosen], row[chosen]
    order = np.lexsort((chosen_rows, chosen_files))  # by file, then row: each file's rows one run, in order
    chosen_files, chosen_rows = chosen_files[order], chosen_rows[order]
    starts = np.flatnonzero(np.r_[True, chosen_files[1:] != chosen_files[:-1]]) if len(order) else np.array([], dtype=np.int64)
    rows = {paths[position]: part for position, part in zip(chosen_files[starts].tolist(), np.split(chosen_rows, starts[1:]))}
    return Selection(rows, replaced, index_ids)


# For each element, its position among the elements of the same group when taken in the given order
# (an order that keeps each group together: sorted by group first).
def position_in_group(order: np.ndarray, group: np.ndarray) -> np.ndarray:
    ordered = group[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    positions = np.empty(len(order), dtype=np.int64)
    positions[order] = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    return positions


# What the page draws: the selected, parsed samples of every step, and the load report.
@dataclass(frozen=True)
class RunSnapshot:
    run_dir: str
    samples: pd.DataFrame
    report: pd.DataFrame
    problems: pd.DataFrame
    meta: dict | None
    max_samples: int
    downsampled: bool
    version: tuple
    steps: list = field(default_factory=list)
    reward_function_columns: list = field(default_factory=list)
    extra_columns: list = field(default_factory=list)  # extra/<key>: numbers of keys outside the format
    facets: list = field(default_factory=list)  # text/<key> with at most FACET_VALUES distinct values
    image_problems: int = 0  # images named by the loaded lines that cannot be shown (rows of problems)
    format: str = ""  # how the files were read (RunFormat.name)
    reward_note: str = ""  # how reward was made from the reward functions' scores, where the board made it (TRL's files)
    history_dir: str = ""  # where its training history is: the run folder, or the output folder of TRL's completions/
    reward_weights: dict = field(default_factory=dict)  # TRL's: the weights reward was summed with ({}: all 1)
    selection: Selection | None = field(default=None, compare=False, repr=False)  # the lines it holds
    fields_left_out: list = field(default_factory=list)  # names of fields with values in its samples that are not columns
    source_files: dict = field(default_factory=dict)  # a conversion's path (a path of samples) -> its source, another trainer's file
    # What step_rows, step_mean, has_values and has_positive found: every rerun of the page asks again, and on a run of 100,000
    # samples each answer costs milliseconds. A snapshot's samples do not change (a changed copy is a new snapshot).
    answers: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    # A step's samples in batch order: a slice of the samples (build_run keeps them in step order), not a scan of them.
    def step_rows(self, step: int) -> pd.DataFrame:
        order, places = self.answer("step places", self.find_step_places)
        first, end = places.get(step, (0, 0))
        rows = self.samples.iloc[first:end] if order is None else self.samples.iloc[order[first:end]]
        return rows.reset_index(drop=True)

    # Each step's (first, end) in the samples when they are in step order (order None), else in `order`, which puts them so.
    def find_step_places(self) -> tuple[np.ndarray | None, dict[int, tuple[int, int]]]:
        steps = self.samples["step"].to_numpy()
        order = None if bool((steps[1:] >= steps[:-1]).all()) else np.argsort(steps, kind="stable")
        ordered = steps if order is None else steps[order]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(ordered) else np.array([], dtype=np.int64)
        ends = np.r_[starts[1:], len(ordered)]
        return order, {int(ordered[start]): (int(start), int(end)) for start, end in zip(starts.tolist(), ends.tolist())}

    def previous_step(self, step: int) -> int | None:
        position = self.steps.index(step)
        return self.steps[position - 1] if position else None

    def step_mean(self, column: str) -> dict:
        return self.answer(("step mean", column), lambda: self.samples.groupby("step")[column].mean().to_dict())

    # Whether any sample has the column, with a value.
    def has_values(self, column: str) -> bool:
        return self.answer(("has values", column), lambda: column in self.samples and bool(self.samples[column].notna().any()))

    # Whether any sample has the column above 0.
    def has_positive(self, column: str) -> bool:
        return self.answer(("has positive", column), lambda: column in self.samples and bool((self.samples[column] > 0).any()))

    def answer(self, question, compute):
        if question not in self.answers:
            self.answers[question] = compute()
        return self.answers[question]


# The dtype pandas gives a column of strings here: Arrow-backed "str" from pandas 3, object before.
TEXT_DTYPE = pd.Series(["text"]).dtype


# The texts at `codes` of a few distinct ones (each sample's file, its index id), as a column: taken in Arrow where
# pandas keeps its strings there (six times faster than converting 100,000 Python strings).
def repeated_texts(texts: list[str], codes: np.ndarray):
    if isinstance(TEXT_DTYPE, pd.StringDtype) and TEXT_DTYPE.storage == "pyarrow":
        return pd.array(pa.array(texts, type=pa.string()).take(pa.array(codes)), dtype=TEXT_DTYPE)
    return np.array(texts, dtype=object)[codes]


# The chosen rows of every file as the samples' columns, ordered by step, then file path, then place in the file (each
# column taken once, in that order: sorting a frame of 100,000 samples afterwards took longer than building it), with
# each sample's file, its index, its place in its step's batch, and the summary columns no file has (missing).
def sorted_samples(files: dict[str, FileIndex], chosen: list[np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    columns = chosen_columns(files, chosen, names) if files else {name: np.array([], dtype=dtype) for name, dtype in LINE_COLUMNS.items()}
    columns = {name: column for name, column in columns.items() if not name.startswith(FIELD_PREFIXES) or not pd.isna(column).all()}
    counts = [len(rows) for rows in chosen]
    place_of_path = {path: place for place, path in enumerate(sorted(files))}
    step = columns["step"].astype(np.int64)
    order = np.lexsort((columns["offset"], np.repeat(np.array([place_of_path[path] for path in files], dtype=np.int64), counts), step))
    columns = {name: column[order] for name, column in columns.items()} | {"step": step[order]}
    file_of = np.repeat(np.arange(len(files)), counts)[order]
    columns["path"] = repeated_texts(list(files), file_of)  # one column each, not one per file
    columns["index_id"] = repeated_texts([index.index_id for index in files.values()], file_of)
    total = len(order)
    for column in SUMMARY_NUMBERS + SUMMARY_TEXTS:
        columns.setdefault(column, np.full(total, np.nan))
    starts = np.flatnonzero(np.r_[True, columns["step"][1:] != columns["step"][:-1]]) if total else np.array([], dtype=np.int64)
    columns["sample"] = np.arange(total) - np.repeat(starts, np.diff(np.r_[starts, total]))  # its index in the step's batch
    return columns


# The columns of the files' indexes, in file order (rewards/* and the fields differ by file).
def line_column_names(files: dict[str, FileIndex]) -> list[str]:
    return list(dict.fromkeys(name for index in files.values() for name in index.lines))


# The columns of the files' indexes the samples of the chosen rows take, and the names of fields with values there left
# out. A line's keys outside the format (a reward function's score, a field: FIELD_PREFIXES) are a column of the
# samples only where a loaded sample has a value of it: lines parsed and not loaded (past Max Samples Each Step, as a
# live append's can be) add none, so the columns do not depend on how the run was read. Of those, a run keeps the
# first FIELD_COLUMNS, in file order: each file keeps as many, and a key per line in each of 64 rank files made 16,384.
def sample_columns(files: dict[str, FileIndex], chosen: list[np.ndarray]) -> tuple[list[str], list[str]]:
    names = line_column_names(files)
    fields = [name for name in names if name.startswith(FIELD_PREFIXES)]
    if len(fields) <= FIELD_COLUMNS:
        return names, []
    lines = [index.lines for index in files.values()]
    valued = [name for name in fields if any(name in file_lines and not missing(file_lines[name][rows]).all() for file_lines, rows in zip(lines, chosen))]
    kept = set(valued[:FIELD_COLUMNS])
    return [name for name in names if name in kept or not name.startswith(FIELD_PREFIXES)], valued[FIELD_COLUMNS:]


# The chosen rows of every file, in file order, a column each (missing where a file lacks it). Many small files (a file
# per step) are joined whole first and indexed once: indexing each file's rows would cost more than the rows.
def chosen_columns(files: dict[str, FileIndex], chosen: list[np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    lines = [index.lines for index in files.values()]
    lengths = [len(file_lines["offset"]) for file_lines in lines]
    if len(files) < BUNDLED_FILES or sum(lengths) > BUNDLED_ROWS:
        return {name: np.concatenate([(file_lines[name] if name in file_lines else missing_values(name, length))[rows] for file_lines, length, rows in zip(lines, lengths, chosen)]) for name in names}
    rows = np.concatenate([start + rows for start, rows in zip(np.cumsum([0, *lengths[:-1]]).tolist(), chosen)])
    return {name: np.concatenate([file_lines[name] if name in file_lines else missing_values(name, length) for file_lines, length in zip(lines, lengths)])[rows] for name in names}


# Columns build_run adds to the samples: made again from the others each time.
DERIVED_COLUMNS = ["reward_gap", "valid_reward_gap"]


# The samples of files that grew since `previous` was built from them: its rows of the steps before the first step
# whose lines changed, kept as they are, and those from that step on taken from the files. On a run of many steps each
# live append changes only the last steps, and sorting every column anew took most of its load. None where the
# result could differ from a whole build: a file read anew or gone, or a column that is new or of another type.
def grown_samples(previous: RunSnapshot, files: dict[str, FileIndex], selected: "Selection", names: list[str], fields_left_out: list[str]) -> pd.DataFrame | None:
    before = previous.selection
    if before is None or any(path not in files or files[path].index_id != index_id for path, index_id in before.index_ids.items()):
        return None
    if fields_left_out or previous.fields_left_out:
        return None  # which fields are columns can change with any row
    none = np.array([], dtype=np.int64)
    first_changed = np.inf  # the first step of a line selected now and not then, or then and not now
    for path, index in files.items():
        changed = np.setxor1d(selected.rows.get(path, none), before.rows.get(path, none), assume_unique=True)
        if changed.size:
            first_changed = min(first_changed, float(index.lines["step"][changed].min()))
    kept = previous.samples.iloc[: int(np.searchsorted(previous.samples["step"].to_numpy(), first_changed))]
    kept = kept.drop(columns=DERIVED_COLUMNS)
    chosen = [selected.rows.get(path, none) for path in files]
    chosen = [rows[index.lines["step"][rows] >= first_changed] for rows, index in zip(chosen, files.values())]
    taken = pd.DataFrame(sorted_samples(files, chosen, names))
    one_side = set(taken.columns) ^ set(kept.columns)
    if not files or any(not name.startswith(FIELD_PREFIXES) for name in one_side):
        return None
    # A field with values on one side only: missing on the other, in the place a whole build gives its column; none
    # where the kept rows have no value of it either (the rows that had were selected out).
    kept = kept.drop(columns=[name for name in kept.columns.difference(taken.columns) if kept[name].isna().all()])
    kept = kept.assign(**{name: missing_values(name, len(kept)) for name in taken.columns.difference(kept.columns)})
    taken = taken.assign(**{name: missing_values(name, len(taken)) for name in kept.columns.difference(taken.columns)})
    place = {name: position for position, name in enumerate(line_column_names(files))}
    order = sorted(kept.columns, key=lambda name: place.get(name, len(place)))  # stable: the columns no index has keep their order
    if order != list(kept.columns):
        kept = kept[order]
    for name in [name for name in kept.columns if taken[name].dtype != kept[name].dtype]:
        # A text column with values in one part only: the other's missing values take its type, as the whole would.
        kept_missing, taken_missing = kept[name].isna().all(), taken[name].isna().all()
        if kept_missing == taken_missing:
            return None
        if taken_missing:
            taken[name] = taken[name].astype(kept[name].dtype)
        else:
            kept = kept.assign(**{name: kept[name].astype(taken[name].dtype)})
    return pd.concat([kept, taken[kept.columns]], ignore_index=True) if len(taken) else kept


# A note for each of the logger's rank files that lacks steps the other rank files of its launch have: its writer
# stopped (a full disk, a crash) while the others went on, and those steps show the other ranks' samples alone (each
# group part of its completions). A file that lacks the launch's last step alone is not noted: a live run's ranks
# end writing a step at different moments.
def steps_a_rank_lacks(files: dict[str, FileIndex]) -> list[list]:
    launches: dict[str, list[str]] = {}
    for path, index in files.items():
        if RANK_FILE_PATTERN.search(Path(path).name):
            launches.setdefault(index.launch, []).append(path)
    notes = []
    for paths in (paths for paths in launches.values() if len(paths) > 1):
        ranks = {path: written_steps(files[path].lines["step"]) for path in paths}
        every = np.unique(np.concatenate(list(ranks.values())))
        for path, steps in ranks.items():
            lacking = np.setdiff1d(every, steps, assume_unique=True)
            if len(lacking) and lacking[0] < every[-1]:
                shown = ", ".join(f"{step:g}" for step in lacking[:STEPS_NAMED]) + (", ..." if len(lacking) > STEPS_NAMED else "")
                notes.append([valid_text(Path(path).name), 0, "note", (
                    f"has no line of {len(lacking):,} step(s) that the other rank files of its launch have ({shown}): those steps "
                    "show the other ranks' samples alone (its writer stopped early, a full disk or a crash, or lags behind)"
                )])
    return notes


STEPS_NAMED = 5  # of the steps a rank file lacks, in its note


# The steps a file's lines were written for (a bad line's too, where its step is known), each once, in order: runs of
# one step taken once first (a rank file's steps come in order), so a load of millions of lines sorts a few thousand.
def written_steps(steps: np.ndarray) -> np.ndarray:
    steps = steps[~np.isnan(steps)]
    return np.unique(steps[np.r_[True, steps[1:] != steps[:-1]]]) if len(steps) else steps


# The snapshot of files as selected; from `previous` (the last one of the same Max Samples Each Step, when the files
# only grew since) where it can be.
def build_run(run_dir: str, files: dict[str, FileIndex], selected: "Selection", max_samples: int, run_format: "RunFormat", cache_error: str | None = None, previous: RunSnapshot | None = None) -> RunSnapshot:
    chosen, report, problems = [], [], []
    for path, index in files.items():
        rows = selected.rows.get(path, np.array([], dtype=np.int64))
        chosen.append(rows)
        status = index.lines["status"]
        name = valid_text(Path(path).name)
        bad, replaced = int((status == BAD).sum()), selected.replaced.get(path, 0)
        report.append([name, len(status), len(rows), bad, len(status) - len(rows) - bad - replaced, replaced, index.incomplete_tail])
        if index.problems_left_out:  # first: the list below is long
            problems.append([name, 0, "note", (
                f"{index.problems_left_out:,} more problems of its lines are not listed here, past the first {PROBLEMS_LISTED:,}: the table above "
                "counts every bad line"
            )])
        problems += [[name, line, kind, valid_text(text)] for line, kind, text in index.problems]
        if index.first_field_left_out is not None:
            line, field_name = index.first_field_left_out
            problems.append([name, line, "note", (
                f"{index.fields_left_out:,} values of keys outside the format in the lines read are not in the tables: the file has columns "
                f"(rewards/, extra/, text/) for the first {FIELD_COLUMNS} names it holds, and {field_name} came later "
                "(an id used as a key?); a sample's view shows every key of its line"
            )])
        if index.incomplete_tail:
            steps = index.lines["step"]
            before = f" (if the run was killed while writing, step {steps[-1]:g}, that of the line before, may lack samples)" if len(steps) and np.isfinite(steps[-1]) else ""
            problems.append([name, index.physical_lines + 1, "incomplete", "the last line has no end yet: still being written, or cut off" + before])
    if cache_error:
        problems.append(["", 0, "note", cache_error])
    problems += [list(problem) for problem in run_format.problems]
    problems += steps_a_rank_lacks(files)
    with contextlib.suppress(OSError):
        problems += [[valid_text(name), 0, "skipped", reason] for name, reason in jsonl_left_out(run_dir)]
    names, fields_left_out = sample_columns(files, chosen)
    if fields_left_out:
        problems.append(["", 0, "note", fields_left_out_note(fields_left_out)])
    samples = grown_samples(previous, files, selected, names, fields_left_out) if previous is not None else None
    if samples is None:
        samples = pd.DataFrame(sorted_samples(files, chosen, names))
    meta, meta_notes = read_meta_noted(run_dir)
    problems += [["", 0, "note", note] for note in meta_notes]
    reward_note = ""
    if run_format.sums_reward:
        weights = {name: weight for name, weight in run_format.weights if f"rewards/{name}" in samples}  # the functions the files score
        absent = [name for name, _ in run_format.weights if name not in weights]
        if absent and len(samples):
            problems.append(["", 0, "note", f"{run_format.weights_source} gives a weight to reward function(s) {', '.join(absent)} that no loaded line scored: not in the reward"])
        samples["reward"] = total_reward(samples, weights)
        reward_note = reward_sum_note(weights, run_format.weights_source)
    samples["reward_gap"] = samples["reward"] - samples["ref_reward"]
    samples["valid_reward_gap"] = samples["valid_reward"] - samples["ref_valid_reward"]
    report = pd.DataFrame(report, columns=REPORT_COLUMNS)
    missing_images = image_problems(samples)
    problems += missing_images
    return RunSnapshot(
        run_dir=run_dir,
        samples=samples,
        report=report,
        problems=pd.DataFrame(problems, columns=["file", "line", "kind", "reason"]),
        meta=meta,
        max_samples=max_samples,
        downsampled=bool(report["not loaded (Max Samples Each Step)"].sum()),
        version=(run_dir, max_samples, run_format.weights, tuple((path, index.identity and (index.identity.size, index.identity.mtime_ns, index.identity.etag)) for path, index in files.items())),
        steps=sorted(int(step) for step in samples["step"].unique()),
        reward_function_columns=sorted(column for column in samples.columns if column.startswith("rewards/")),
        extra_columns=sorted(column for column in samples.columns if column.startswith(EXTRA_PREFIX) and samples[column].notna().any()),
        facets=sorted(column for column in samples.columns if column.startswith(TEXT_PREFIX) and 1 <= samples[column].nunique() <= FACET_VALUES),
        image_problems=sum(kind == "image" for _, _, kind, _ in missing_images),
        format=run_format.name,
        reward_note=reward_note,
        history_dir=run_format.history_dir or run_dir,
        reward_weights=dict(run_format.weights),
        selection=selected,
        fields_left_out=fields_left_out,
    )


# The load report's note on the names of fields with values in the loaded samples that are not columns of the run.
def fields_left_out_note(names: list[str]) -> str:
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3:,} more" if len(names) > 3 else "")
    return (
        f"{len(names):,} names of keys outside the format with values in the loaded samples are not in the tables: a run has columns "
        f"(rewards/, extra/, text/) for the first {FIELD_COLUMNS} names, file by file; left out: {shown}. A sample's view shows every key of its line"
    )


# Which lines a step shows, as a short key: the same key means the same bytes (as far as FileIndex.change
# can tell), so a live refresh that only appended to the files reuses the step's texts, charts and tables. The rewards
# are in it too: typed reward weights change them and not the lines.
def lines_key(rows: pd.DataFrame) -> str:
    lines = zip(rows["path"], rows["index_id"].tolist(), rows["offset"].tolist(), rows["length"].tolist(), rows["reward"].tolist())
    return hashlib.sha1(repr(list(lines)).encode()).hexdigest()


# A step's lines with their texts read back, for the tables and the samples pair; problems say which lines could not be.
@dataclass
class StepBatch:
    key: str
    table: pd.DataFrame
    problems: list[str]


# Read back the texts of a step's lines (the index keeps only numbers), each line checked to hold its step still: from
# the logger's texts file where it has them (a step's are together there), else from the lines.
def read_step_batch(key: str, rows: pd.DataFrame) -> StepBatch:
    texts = {name: [] for name in ("prompt", "response", "ref_response", "ground_truth")}
    images, problems, raw_lines = [], [], None
    in_texts = rows["texts_length"].to_numpy() >= 0
    paths = [texts_file(path) if use else path for path, use in zip(rows["path"], in_texts.tolist())]
    offsets = np.where(in_texts, rows["texts_offset"], rows["offset"]).tolist()
    lengths = np.where(in_texts, rows["texts_length"], rows["length"]).tolist()
    unanswered = {}  # a file -> object storage's not answering for it: its other lines are not asked (each would wait as long)
    try:  # all at once (on object storage, a few requests at the same time); else line by line, each saying why
        raw_lines = read_spans(paths, offsets, lengths)
    except StorageUnreachable as error:
        unanswered[error.path] = str(error)
    except OSError:
        pass

    # A line read on its own, but not from a file the store did not answer for, nor from the store at all once it did
    # not answer for two files.
    def read_one(path: str, offset: int, length: int) -> bytes:
        if is_remote(path) and (path in unanswered or len(unanswered) > 1):
            raise StorageUnreachable(unanswered.get(path) or next(iter(unanswered.values())), path)
        try:
            return read_line(path, offset, length)
        except StorageUnreachable as error:
            unanswered[path] = str(error)
            raise

    places = zip(paths, offsets, lengths, in_texts.tolist(), rows["path"], rows["offset"], rows["length"], rows["line"], rows["step"])
    for position, (path, offset, length, from_texts, line_path, line_offset, line_length, line, step) in enumerate(places):
        try:
            record = read_back(raw_lines[position] if raw_lines else read_one(path, offset, length), step)
        except (OSError, BadLine) as error:
            record, problem = None, error
            if from_texts:  # its texts file changed since it was checked (the next load stops using it): the line
                try:
                    record = read_back(read_one(line_path, line_offset, line_length), step)
                except (OSError, BadLine) as line_error:
                    problem = line_error
            if record is None:
                problems.append(read_back_problem(line_path, line, problem))
        for name in texts:
            text = as_text(getattr(record, name)) if record else None
            texts[name].append(text or "" if name in ("prompt", "response") else text)
        images.append(image_references(record.images) if record and record.images is not None else [])
    if problems:  # the tables drawn from this batch are kept apart from those of a batch read in full
        key = hashlib.sha1(repr((key, problems)).encode()).hexdigest()
    # A text a line lacks stays None: pandas 3 makes a column of strings and None a string column of NaN.
    texts = {name: pd.Series(values, index=rows.index, dtype=object) if None in values else values for name, values in texts.items()}
    return StepBatch(key=key, table=rows.assign(**texts, images=images, group=group_numbers(rows["group_id"])), problems=problems)


NO_IMAGES = "[]"  # the index's image paths of a line whose images are an empty list: the same prompt as one without images


# Each line's images as the index knows a prompt by them, beside its text key: their paths, in order, as the lines
# write them (the first IMAGES_SHOWN), one value for a line without images and one whose images are an empty list.
def index_images(samples: pd.DataFrame) -> pd.Series:
    return samples["image_paths"].fillna(NO_IMAGES)


# The lines of a run that may hold the prompt of `row` (a row of a snapshot's samples or of a StepBatch's table),
# found from the index alone, so that a cap on the lines read back counts only these: the same text key and the same
# images (index_images). The texts, and any images past those the index keeps, are compared once read back
# (holds_prompt).
def prompt_lines(samples: pd.DataFrame, row: pd.Series) -> pd.DataFrame:
    keyed = samples[(samples["prompt_key"] == row["prompt_key"]).to_numpy()]
    images = NO_IMAGES if pd.isna(row["image_paths"]) else row["image_paths"]
    return keyed[(index_images(keyed) == images).to_numpy()]


# Of lines read back (a StepBatch's table), those holding the prompt of `row`: the same text and the same images, in
# order, each known by its path as the line writes it (rollout_logger names an image file by its content's hash, so
# one image has one path in every run it writes), not by the file's bytes, which would cost a read (on object
# storage a request) of every image of every line with that text.
def holds_prompt(table: pd.DataFrame, row: pd.Series) -> np.ndarray:
    paths = [image["path"] for image in row["images"]]
    return np.array([prompt == row["prompt"] and [image["path"] for image in images] == paths for prompt, images in zip(table["prompt"], table["images"])], dtype=bool)


# A line's texts (or its texts record) as read back, checked to hold its step still.
def read_back(raw: bytes, step: int):
    record, _ = decode_line(raw, TEXTS_DECODER)
    ensure_same_step(record, step)
    return record


# The per-token arrays of the sample in view, cut to one length (notes say where they did not match), and its tokens
# as text.
@dataclass
class SampleTokens:
    logprobs: np.ndarray
    ref_logprobs: np.ndarray | None
    entropies: np.ndarray | None
    values: np.ndarray | None
    token_rewards: np.ndarray | None
    response_tokens: list[str]
    advantage: float | None
    notes: list[str]
    tool: np.ndarray | None = None  # which tokens a tool wrote (tool_mask 0); None: no tool_mask
    sampler_logprobs: np.ndarray | None = None  # the sampler's log-prob of each token (vLLM's, generate's)
    is_ratio: np.ndarray | None = None  # the importance-sampling weight the trainer applied to each token
    loss_passes: object = None  # the line's loss_passes as they are (rl_board.update.token_update reads them)
    sampler_kept_logmass: np.ndarray | None = None  # log of the mass the sampler's truncation kept at each token


# The per-token arrays of a sample, parsed only when it is shown (its first most_tokens, with a note); None without
# logprobs.
def read_sample_tokens(path: str, offset: int, length: int, step: int, most_tokens: int | None = None) -> "SampleTokens | None":
    raw = read_line(path, offset, length)
    record, note = decode_line(raw, ROLLOUT_DECODER)
    ensure_same_step(record, step)
    detail = token_detail(record, most_tokens)
    if detail is not None and note:  # a per-token list of the wrong type (a text, nested lists), left out of the line
        detail.notes.extend(part for part in note.split("; ") if part.startswith(tuple(f"{key} left out: " for key in TOKEN_KEYS)))
    lists = (getattr(detail, key) for key in TOKEN_KEYS) if detail is not None else ()
    if any(array is not None and np.isinf(array).any() for array in lists) and (places := numbers_beyond_range(raw, TOKEN_KEYS, outside_format=False)):
        detail.notes.append(beyond_range_note(places))  # values, token_rewards and sampler_kept_logmass are in no load report
    return detail


# The aligned per-token arrays of one sample (its first most_tokens, with a note), or None without logprobs.
def token_detail(record, most_tokens: int | None = None) -> "SampleTokens | None":
    arrays, length, notes = aligned_token_arrays(record)
    if arrays["logprobs"] is None:
        return None
    length, tokens = int(length), token_list(record.response_tokens, []) or []  # its note is in notes
    if most_tokens is not None and length > most_tokens:
        notes.append(f"This response has {length:,} tokens: the token views show its first {most_tokens:,}.")
        length, tokens = most_tokens, tokens[:most_tokens]
        arrays = {key: None if array is None else array[:length] for key, array in arrays.items()}
    names = readable_tokens([valid_text(str(token)) for token in tokens])[:length]
    names += ["?"] * (length - len(names))
    return SampleTokens(**arrays, response_tokens=names, advantage=record.advantage, notes=notes, loss_passes=record.loss_passes)


# A line read back must still hold the step it was indexed with (as a float, as the index holds steps): a file
# rewritten in place with the same layout would otherwise mix new lines into old numbers.
def ensure_same_step(record, step: int):
    if float(record.step) != float(step):
        raise BadLine(f"it now holds step {record.step}, not {step}")


def read_line(path: str, offset: int, length: int) -> bytes:
    return read_spans([path], [offset], [length])[0]


# The lines a pass over many samples reads at a time: a batch's bytes are in memory at once.
LINES_PER_READ = 2048


# The lines of the samples (a snapshot's rows: path, offset, length, step, line) at `positions` (all: None), read
# back in batches: (its position in samples, its bytes, the step the index holds, "file line N" for a problem).
def lines_read_back(samples: pd.DataFrame, positions: np.ndarray | None = None):
    positions = np.arange(len(samples)) if positions is None else positions
    for start in range(0, len(positions), LINES_PER_READ):
        chosen = positions[start : start + LINES_PER_READ]
        rows = samples.iloc[chosen]
        spans = read_spans(rows["path"].tolist(), rows["offset"].astype(int).tolist(), rows["length"].astype(int).tolist())
        for position, raw, step, path, line in zip(chosen.tolist(), spans, rows["step"].tolist(), rows["path"].tolist(), rows["line"].tolist()):
            yield position, raw, step, f"{path} line {line}"


# A line that could not be read back, in plain words (the page shows them as text).
def read_back_problem(path: str, line: int, error: Exception) -> str:
    return f"{valid_text(Path(path).name)} line {line} could not be read back ({error})"


# Lines that could not be read back, said once: the first, how many more, and how to read the files anew (`again`: the
# page's button, the API's open_run).
def unread_lines_note(problems: list[str], again: str) -> str:
    more = len(problems) - 1
    return f"{problems[0]}; if the file was rewritten, {again}." + (f" {more} more line(s) of this step could not be read back either." if more else "")
