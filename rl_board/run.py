"""A run opened from a notebook or a script, with the same reading layer, index cache and numbers as the page:

    import rl_board
    rl_board.list_runs("rollout_samples")                 # the runs the sidebar lists, as paths open_run takes
    run = rl_board.open_run("rollout_samples/grpo_tiny_example")   # or s3://bucket/prefix/run
    run = rl_board.open_run("prime_rl_run", tokenizer="Qwen/Qwen3-0.6B")   # token ids decoded (local cache only)
    run.samples                                           # a row per loaded sample: step, sample, reward, ...
    run.step(12)                                          # that step's rows with prompt, response and the other texts
    run.tokens(12, 3)                                     # a row per token of sample 3 of step 12
    run.update_by_step()                                  # what each step's loss passes did: clip fractions, ...
    run.turns(12, 3)                                      # an agent's trajectory: a row per turn, with its numbers
    run.tools_by_step()                                   # turns, tool calls, errors per step and per tool name
    run.staleness_by_step()                               # an asynchronous run's staleness per step
    run.signals()                                         # is the policy gaming the reward: signals per step, fired
    run.history.train                                     # the trainer's own logged numbers
    rl_board.prompt_changes(run, other, steps_a=(1, 20))  # per prompt seen on both: reward, pass rate, length, change
    rl_board.pattern_rate(run, r"I cannot")               # per step, the share of responses the pattern matches
"""
import functools
import numbers
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from rl_board.changes import default_threshold, side_rows
from rl_board.changes import prompt_changes as changes_between
from rl_board.metrics import token_rows, trl_pools_ranks
from rl_board.reading import store
from rl_board.reading.history import TrainingHistory, read_history
from rl_board.reading.lines import KL_ESTIMATORS, BadLine
from rl_board.reading.search import RunTexts
from rl_board.reading.snapshot import (
    RunSnapshot,
    lines_key,
    read_back_problem,
    read_sample_tokens,
    read_step_batch,
    unread_lines_note,
)
from rl_board.reading.storage import is_file, is_folder, is_remote, joined, lower_scheme, shown_url
from rl_board.signals import DEFAULT_WINDOW, SIGNALS, firing_examples, signals_by_step
from rl_board.staleness import staleness_by_step, staleness_distribution
from rl_board.text import valid_text
from rl_board.tokenizer import TOKENIZER_VARIABLE
from rl_board.trajectory import numbered, read_tool_events, read_trajectory, tool_summary, tools_by_step
from rl_board.update import read_loss_passes, sample_shares, sequence_level, update_by_step

ALL_SAMPLES = 1 << 40  # Max Samples Each Step when none is given: every sample of every step


OPEN_AGAIN = "open the run again (rl_board.open_run)"  # how a notebook reads a rewritten file anew

# The columns of a snapshot's samples that are the index's bookkeeping (where a line and its texts are, its parse
# status): the API says file and line instead.
LOCATION_COLUMNS = ["path", "index_id", "offset", "length", "status", "texts_offset", "texts_length", "prompt_key", "extra_keys", "prompt_at", "prompt_bytes", "response_at", "response_bytes"]


@dataclass(frozen=True)
class Run:
    """A loaded run (rl_board.open_run's): its samples and training history, and the texts and tokens read back
    from the files on demand. run_dir is its folder, format how its files were read, steps the loaded steps."""

    snapshot: RunSnapshot
    history: TrainingHistory

    @property
    def run_dir(self) -> str:
        return self.snapshot.run_dir

    @property
    def format(self) -> str:
        return self.snapshot.format

    @property
    def problems(self) -> pd.DataFrame:
        """The load report's problems: bad lines, skipped files, images, notes (file, line, kind, reason)."""
        return self.snapshot.problems

    @property
    def report(self) -> pd.DataFrame:
        """The load report's row per file: its lines, loaded, bad lines, not loaded (Max Samples Each Step), replaced
        by a newer launch (a relaunch that wrote the same steps again), incomplete last line."""
        return self.snapshot.report

    @property
    def samples(self) -> pd.DataFrame:
        """A row per loaded sample, in the page's order: step, sample (its index in the step's batch, as the page
        numbers it), reward, rewards/<function>, advantage, group_id, avg_kl_<estimator>, lengths, fields; file and
        line say where it is (for another trainer's files, in the board's conversion of them, a JSONL file in the
        cache folder; source_file names the trainer's own file it was converted from)."""
        samples = self.snapshot.samples
        return self.located(samples.drop(columns=[column for column in LOCATION_COLUMNS if column in samples]), samples["path"])

    # Rows with where each is: its file (path), and for another trainer's files, their own (source_file).
    def located(self, table: pd.DataFrame, paths: pd.Series) -> pd.DataFrame:
        table = table.assign(file=paths.to_numpy(dtype=object))
        sources = self.snapshot.source_files
        return table.assign(source_file=paths.map(sources).to_numpy(dtype=object)) if sources else table

    @functools.cached_property
    def texts(self) -> RunTexts:
        """The loaded samples' prompts and responses, read on the first search (rl_board.pattern_rate) and kept."""
        return RunTexts()

    @property
    def steps(self) -> list[int]:
        return list(self.snapshot.steps)

    def step(self, step: int) -> pd.DataFrame:
        """The step's rows as samples has them, with prompt, response, ref_response and ground_truth read back from
        the files (a line that cannot be read back has none, and a warning names it)."""
        rows = self.snapshot.step_rows(step)
        if rows.empty:
            raise KeyError(f"step {step!r} is not among the loaded steps ({len(self.snapshot.steps)} steps, whole numbers)")
        batch = read_step_batch(lines_key(rows), rows)
        if batch.problems:
            warnings.warn(unread_lines_note(batch.problems, OPEN_AGAIN), stacklevel=2)
        table = batch.table.drop(columns=[column for column in LOCATION_COLUMNS if column in batch.table])
        return self.located(table, rows["path"])

    def tokens(self, step: int, sample: int, kl_estimator: str = "k3") -> pd.DataFrame:
        """A row per token of the sample (its index in the step's batch), as the page's token table has them: position,
        token, logp, prob, ref_logp, ref_prob, log_ratio, kl (by kl_estimator: kl, k1, k2 or k3, TRL's), entropy,
        token_reward, token_value, advantage where the line has them; with the sampler's log-probs, sampler_logp, delta
        (logp - sampler_logp), is_ratio (exp(delta), raw), mismatch_kl (exp(delta) - 1 - delta) and applied_is_ratio
        (the line's is_ratio: the weight the trainer applied), and where the line has the kept mass of the sampler's
        truncation (sampler_kept_logmass), kept_logmass (log M) and drift (delta - log M); and tool (a token a tool
        wrote, which has no values); a run of an image placeholder token is one row, its values averaged. Empty
        without logprobs. What the page notes above the sample's tokens (lists of different lengths cut to one, a
        list that is not numbers ignored) is warned. A line rewritten since the run was opened raises ValueError
        saying so."""
        if kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl_estimator must be one of {', '.join(KL_ESTIMATORS)}, not {kl_estimator!r}")
        row = self._row(step, sample)
        try:
            detail = read_sample_tokens(row["path"], int(row["offset"]), int(row["length"]), int(row["step"]))
        except (OSError, BadLine) as error:
            raise ValueError(unread_lines_note([read_back_problem(row["path"], row["line"], error)], OPEN_AGAIN)) from error
        if detail is None:
            return pd.DataFrame({"token": pd.Series(dtype=object)})
        for note in detail.notes:
            warnings.warn(note, stacklevel=2)
        shown = token_rows(detail, kl_estimator, pad_token=None)
        frame = pd.DataFrame({"position": shown.positions, "token": shown.tokens, **shown.values})
        frame["tool"] = np.asarray(shown.is_tool, dtype=bool)
        return frame

    def turns(self, step: int, sample: int, kl_estimator: str = "k3") -> pd.DataFrame:
        """A row per turn of the sample's trajectory (its line's `turns`): turn, role, text, tool_name, tool_arguments
        (JSON text), tool_result, error, images (a list of {"path", "width", "height"}, the path relative to the line's
        folder; empty for a turn without images), token_start and token_end (its span in tokens(step, sample); empty for turns
        the response does not hold), reward and advantage where the format has them, and the turn's numbers over its
        span: tokens, mean_logp, mean_kl (kl_estimator), mean_entropy, mean_abs_mismatch. A policy turn that calls
        tools is a row per call (the same turn), a tool's turn carries its result. Empty without turns; what in them
        could not be used is warned about."""
        row = self._row(step, sample)
        try:
            trajectory = read_trajectory(row["path"], int(row["offset"]), int(row["length"]), int(row["step"]))
            tokens = read_sample_tokens(row["path"], int(row["offset"]), int(row["length"]), int(row["step"])) if trajectory else None
        except (OSError, BadLine) as error:
            raise ValueError(unread_lines_note([read_back_problem(row["path"], row["line"], error)], OPEN_AGAIN)) from error
        if trajectory is None:
            return pd.DataFrame(columns=["turn", "role", "text"])
        trajectory = numbered(trajectory, tokens, kl_estimator)
        for note in trajectory.notes:
            warnings.warn(note, stacklevel=2)
        return trajectory.table

    def tools_by_step(self) -> pd.DataFrame:
        """Per step, of the samples with turns: turns, tool calls per sample and the tool error rate; per tool name,
        its calls per sample and success rate (results without an error over results). Empty without turns."""
        return tools_by_step(self.snapshot.samples, self._tool_events())

    def tool_summary(self) -> pd.DataFrame:
        """Per tool name over the run: calls, results, errors and success rate."""
        return tool_summary(self._tool_events())

    def _tool_events(self) -> pd.DataFrame:
        samples = self.snapshot.samples
        events = read_tool_events(samples[samples["turns"] > 0])
        for problem in events.problems:
            warnings.warn(problem, stacklevel=3)
        return events.table

    def _row(self, step: int, sample: int) -> pd.Series:
        rows = self.snapshot.step_rows(step)
        if rows.empty:
            raise KeyError(f"step {step!r} is not among the loaded steps ({len(self.snapshot.steps)} steps, whole numbers)")
        if not whole_number(sample) or not 0 <= sample < len(rows):
            raise IndexError(f"step {step} has {len(rows)} loaded sample(s), numbered from 0: no sample {sample!r}")
        return rows.iloc[sample]

    def staleness_by_step(self) -> pd.DataFrame:
        """Per step (the index), of an asynchronous run's samples with a staleness (step - policy_version: how many
        steps the trained policy had moved on from the one that sampled the sample): mean staleness, max staleness,
        stale share (staleness > 0) and samples. Empty without policy versions."""
        return staleness_by_step(self.snapshot.samples)

    def staleness_distribution(self) -> pd.DataFrame:
        """A row per step and staleness: samples, and their share of the step's samples with a staleness."""
        return staleness_distribution(self.snapshot.samples)

    def update_by_step(self) -> pd.DataFrame:
        """A row per optimizer step that loss passes ran in (rollout_logger's `loss_passes`): TRL's clip fractions
        clip_ratio/low_mean, high_mean and region_mean recomputed from the tokens, the share of tokens the entropy mask
        dropped, the policy ratio's extremes, how concentrated the update was (top_sample_share, samples_for_half;
        rl_board.update.UPDATE_SERIES), passes and samples. Empty without loss passes."""
        meta = self.snapshot.meta or {}
        return update_by_step(self._loss_passes(), sequence_level(meta), meta.get("loss_type"), trl_pools_ranks(meta.get("trl_version")))

    def update_shares(self) -> pd.DataFrame:
        """A row per (step, sample) of the loss passes: the optimizer step, the sample's generation step and index in
        that step's batch (as tokens() takes them), its share of the step's Σ|update weight| (−∂loss/∂logp over its
        tokens and passes), its tokens, clipped tokens and tokens the entropy mask dropped; largest share first."""
        shares = sample_shares(self._loss_passes())
        rows = self.snapshot.samples.iloc[shares["sample"].to_numpy()]
        return shares.drop(columns="sample").assign(generation_step=rows["step"].to_numpy(), sample=rows["sample"].to_numpy())

    def signals(self, window: int = DEFAULT_WINDOW, kl_estimator: str = "k3") -> pd.DataFrame:
        """Whether the policy may be gaming its reward, as the Step-Signals view has it: a row per (signal, loaded step)
        with the signal's value there, whether its rule fired (fired), and for reward functions diverging the functions
        that rose and fell (rising, falling). The signals and their rules: rl_board.signals.SIGNALS (each's
        .rule(window)); window is in loaded steps, kl_estimator picks the KL column (avg_kl_<estimator>). A signal the
        run's columns do not allow has no rows; the first steps, before its windows fit, have value NaN."""
        if kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl_estimator must be one of {', '.join(KL_ESTIMATORS)}, not {kl_estimator!r}")
        return signals_by_step(self.snapshot.samples, self.snapshot.reward_function_columns, f"avg_kl_{kl_estimator}", window)

    def signal_examples(self, signal: str, window: int = DEFAULT_WINDOW, kl_estimator: str = "k3") -> pd.DataFrame:
        """At each step where the signal fired, the step's samples that show its pattern, highest reward first (three
        each): step, sample (its index in the step's batch, as tokens() takes it), reward, the signal's value, and the
        numbers of the pattern (rl_board.signals.firing_examples says which)."""
        if signal not in SIGNALS:
            raise ValueError(f"signal must be one of {', '.join(SIGNALS)}, not {signal!r}")
        return firing_examples(self.snapshot.samples, self.signals(window, kl_estimator), signal, f"avg_kl_{kl_estimator}")

    def _loss_passes(self) -> pd.DataFrame:
        passes = read_loss_passes(self.snapshot.samples)
        for problem in passes.problems + passes.notes:
            warnings.warn(problem, stacklevel=3)
        return passes.table


def prompt_changes(a: Run, b: Run, steps_a: tuple[int, int] | None = None, steps_b: tuple[int, int] | None = None,
                   pass_threshold: float | None = None, pass_column: str = "reward", where_a: tuple[str, str] | None = None,
                   where_b: tuple[str, str] | None = None) -> pd.DataFrame:
    """Every prompt with samples on both sides, A (run a, steps_a: a window of steps, both ends included; None: all) and
    B; where_a and where_b keep a side's samples whose column has a value, e.g. ("text/mode", "val"). A prompt is its
    text and its images, in order, by their paths as the lines write them (one question asked of two pictures is two
    prompts; images past a line's first 16 are not compared): prompt, images (their paths; only where a prompt has
    images), samples_a/_b, reward_a/_b (mean reward), pass_a/_b (the share of its samples whose pass_column, the reward
    or a reward function such as "rewards/correct", is at least pass_threshold; None: 1 for a 0/1 reward, else the
    midpoint of the values seen), length_a/_b (mean response length, in tokens where both sides have them), change
    (reward_b - reward_a), pass_change, and status: "regressed" (pass rate fell), "newly solved" (none passed on A, some
    on B), "improved", "unchanged", "no pass rate" (no sample of a side has a value of pass_column). reward_a/_b are
    the means of the finite rewards. Sorted by change, the worst first. Prompts seen on one side only, keys whose texts
    differ, and samples without a prompt are warned about."""
    sides = [side_rows(run.snapshot.samples, steps, where) for run, steps, where in ((a, steps_a, where_a), (b, steps_b, where_b))]
    if pass_column not in sides[0] or pass_column not in sides[1]:
        raise ValueError(f"{pass_column!r} is not a number of both runs' samples")
    threshold = default_threshold(*sides, pass_column) if pass_threshold is None else float(pass_threshold)
    changes = changes_between(*sides, threshold, pass_column)
    if changes.only_a or changes.only_b or changes.collisions or changes.without_prompt:
        warnings.warn(changes.left_out(), stacklevel=2)
    return changes.table.reset_index(drop=True)


def list_runs(root) -> list[str]:
    """The runs under a root (a folder on disk or s3://...), as the page's sidebar lists them: each a path open_run
    takes (the root itself when it is a run). A run folder whose name is not UTF-8 is not listed, as on the page
    (open_run refuses it): a warning names it."""
    folders = run_folders(root)
    if misnamed := [folder for folder in folders if valid_text(folder) != folder]:
        warnings.warn(f"Not listed, its name not valid UTF-8 (rename the folder to open it): {', '.join(valid_text(Path(folder).name) for folder in misnamed)}", stacklevel=2)
    return [folder for folder in folders if folder not in misnamed]


# The run folders under a root, their names not UTF-8 too (the indexer names each as not indexed).
def run_folders(root) -> list[str]:
    root = lower_scheme(str(root)) if is_remote(str(root)) else str(Path(root).expanduser())
    if not is_folder(root):  # an object's listing is the object itself: it would be a run
        raise NotADirectoryError(f"{shown_url(root)} is not a folder of runs: " + ("it is a file (name the folder that holds it)" if is_file(root) else "it does not exist"))
    return [root if name == "." else joined(root, name) for name in store.list_runs(root)]


# An int or numpy's (run.samples' numbers), not a bool, a float or a text.
def whole_number(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def open_run(path, max_samples: int | None = None, parallel: bool = False, tokenizer: str | None = None) -> Run:
    """Open a run folder (on disk or s3://...) in any format the board reads, as a Run.

    Args:
        path: the run's folder (rl_board.list_runs gives those under a root). A folder holding no run's files opens
            empty, with a warning naming the runs inside it.
        max_samples: Max Samples Each Step, as on the page; None: every sample.
        parallel: index a big run on worker processes (spawned: a script that calls this must guard its top level with
            `if __name__ == "__main__":`).
        tokenizer: decodes the formats that log token ids only (prime-rl, NeMo-RL's multi-turn lines): a
            tokenizer.json, a folder with one, or a model in the local Hugging Face cache. It is the process's setting,
            as the page's --tokenizer (the variable RL_LOGGING_BOARD_TOKENIZER): it stays for the runs opened after.

    The index cache is the page's: a run the page opened opens at once, and only what was appended since is read."""
    if max_samples is not None and not (whole_number(max_samples) and max_samples >= 1):
        raise ValueError(f"max_samples is the samples kept of each step: a whole number from 1, or None for all, not {max_samples!r}")
    if tokenizer is not None:
        os.environ[TOKENIZER_VARIABLE] = str(tokenizer)
    path = lower_scheme(str(path)) if is_remote(str(path)) else str(Path(path).expanduser())
    if not is_folder(path):
        raise NotADirectoryError(f"{shown_url(path)} is not a run folder: " + ("it is a file (open the folder that holds it)" if is_file(path) else "it does not exist"))
    snapshot = store.RunStore(path).load(ALL_SAMPLES if max_samples is None else max_samples, parallel=parallel)
    run = Run(snapshot, read_history(snapshot.history_dir))
    if snapshot.report.empty and snapshot.problems.empty and run.history.empty and run.history.problems.empty:
        inside = [run_dir for run_dir in list_runs(path) if run_dir != path]
        warnings.warn(
            f"{shown_url(path)} holds no rollout file and no training history: a run is a folder of JSONL files, one per rank, "
            "another trainer's files (docs/formats.md) or a training output folder"
            + (f". It holds runs: open one of rl_board.list_runs({shown_url(path)!r}): {', '.join(Path(run_dir).name for run_dir in inside[:5])}{' ...' if len(inside) > 5 else ''}" if inside else ""),
            stacklevel=2,
        )
    return run
