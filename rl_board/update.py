"""Which tokens drove each update: what every loss pass over a sample did with its tokens, as rollout_logger records
it from the pass's own tensors (a line's `loss_passes`, rollout_logger/metadata.py): the policy ratio π_θ/π_old, the
tokens PPO's clip zeroed (low: ratio below 1 - ε_low with a negative advantage; high: above 1 + ε_high with a positive
one), the tokens the entropy mask dropped, and each token's update weight -∂loss/∂logp.

Per step (the optimizer step a pass ran in, not the line's generation step): the clip fractions as TRL logs them
(`clip_ratio/low_mean`, `high_mean`, `region_mean`: per loss pass, the clipped share of the tokens of all ranks in it,
or of the sequences with `importance_sampling_level="sequence"`, then the mean over the step's passes), the share of
tokens the entropy mask dropped, and how concentrated the update was: each sample's share of the step's Σ|weight|.
Read by a pass of their own over the loaded lines, only when asked (the Step-Update tab, `Run.update_by_step`)."""
from dataclasses import dataclass

import msgspec
import numpy as np
import pandas as pd
import simdjson

from rl_board.reading.lines import (
    LINE_FIELDS_DECODER,
    LOSS_PASSES_DECODER,
    BadLine,
    LossPassRecord,
    decode_line,
    integer_step,
    loss_pass_records,
)
from rl_board.reading.snapshot import lines_read_back
from rollout_logger.metadata import LOSS_META_KEY


# The numbers of one loss pass over one sample: its tokens (those any of its lists has a value at: a tool's have none,
# and a ratio that overflowed to null still has its clip and weight), how many were clipped low and high and dropped
# by the entropy mask, Σ|weight| and Σ weight, and the ratio's extremes (±inf included: the charts name them). A row
# of the passes table.
def pass_numbers(record: LossPassRecord) -> dict:
    values = {key: np.asarray(getattr(record, key), dtype=float) if getattr(record, key) is not None else None for key in ("policy_ratio", "clipped", "entropy_mask", "update_weight")}
    present = [array for array in values.values() if array is not None]
    has_value = np.zeros(max((len(array) for array in present), default=0), dtype=bool)
    for array in present:
        has_value[: len(array)] |= ~np.isnan(array)
    clipped, entropy_mask, weight, ratio = values["clipped"], values["entropy_mask"], values["update_weight"], values["policy_ratio"]
    valued = lambda array: array[~np.isnan(array)] if array is not None else np.zeros(0)  # noqa: E731
    return {
        "tokens": int(has_value.sum()),
        "clipped_low": int((clipped < 0).sum()) if clipped is not None else np.nan,  # -1 as the logger writes it: any below 0, as the index counts a clip
        "clipped_high": int((clipped > 0).sum()) if clipped is not None else np.nan,
        "entropy_dropped": int((entropy_mask == 0).sum()) if entropy_mask is not None else np.nan,
        "abs_weight": float(np.abs(valued(weight)).sum()) if weight is not None else np.nan,
        "weight": float(valued(weight).sum()) if weight is not None else np.nan,
        "max_ratio": float(valued(ratio).max()) if len(valued(ratio)) else np.nan,
        "min_ratio": float(valued(ratio).min()) if len(valued(ratio)) else np.nan,
        "lengths_differ": len({len(array) for array in present}) > 1,
    }


PASS_COLUMNS = ["sample", "path", "generation_step", "step", "micro_batch", "tokens", "clipped_low", "clipped_high", "entropy_dropped", "abs_weight", "weight", "max_ratio", "min_ratio"]


# Every loss pass over the samples (a snapshot's rows: path, offset, length, step, line), a row each: `sample` is the
# sample's position in `samples`, `path` its file (a rank); the lines that could not be read back, as "file line N:
# reason"; and notes on passes read in part or not at all (each "file line N: what").
@dataclass(frozen=True)
class LossPasses:
    table: pd.DataFrame
    problems: list[str]
    notes: list[str]


def read_loss_passes(samples: pd.DataFrame) -> LossPasses:
    rows_out, problems, notes, parser, paths = [], [], [], simdjson.Parser(), samples["path"].to_numpy()
    # only the lines the index saw passes in (all of them when it has no such column)
    positions = np.flatnonzero(samples["loss_passes"].to_numpy() > 0) if "loss_passes" in samples else np.arange(len(samples))
    for position, raw, step, place in lines_read_back(samples, positions):
        if b'"loss_passes"' not in raw:
            continue
        try:
            line_step, loss_passes, left_out = decoded_loss_passes(raw, parser)
            if float(line_step) != float(step):
                raise BadLine(f"it now holds step {line_step}, not {step}")
        except BadLine as error:
            problems.append(f"{place}: {error}")
            continue
        except ValueError as error:
            notes.append(f"{place}: {error}")
            continue
        if left_out:
            notes.append(f"{place}: {left_out} of its loss passes are not loss-pass objects: left out")
        for loss_pass in loss_passes:
            if loss_pass.step is None:
                notes.append(f"{place}: a loss pass without its step: left out")
                continue
            try:
                pass_step = integer_step(loss_pass).step
            except BadLine as error:
                notes.append(f"{place}: a loss pass's {error}: left out")
                continue
            numbers = pass_numbers(loss_pass)
            if numbers.pop("lengths_differ"):
                notes.append(f"{place}: a loss pass's per-token lists are of different lengths: its tokens are those any of them has a value at")
            rows_out.append({"sample": position, "path": paths[position], "generation_step": step, "step": pass_step, "micro_batch": loss_pass.micro_batch, **numbers})
    table = pd.DataFrame(rows_out, columns=PASS_COLUMNS)
    return LossPasses(table=table.astype({"micro_batch": float}), problems=problems, notes=notes)


# A line's step, its loss passes and how many of them are not pass objects (rl_board.reading.lines.loss_pass_records):
# the fast way where the line is JSON msgspec takes, else the general way (NaN, bad UTF-8...). ValueError where
# loss_passes is not a list.
def decoded_loss_passes(raw: bytes, parser: simdjson.Parser) -> tuple:
    try:
        fields = LINE_FIELDS_DECODER.decode(raw)
        step = msgspec.json.decode(fields["step"], type=int | float)
    except (msgspec.DecodeError, msgspec.ValidationError, KeyError, ValueError, RecursionError):
        record, _ = decode_line(raw, LOSS_PASSES_DECODER)
        step, value = record.step, record.loss_passes
    else:
        value = fields.get("loss_passes", msgspec.Raw())
    return (step, *loss_pass_records(value, parser)) if len(value) else (step, [], 0)


# Per optimizer step: TRL's clip fractions (clip_ratio/low_mean, high_mean, region_mean: per loss pass, the pooled
# share of the tokens of all ranks, or of the sequences at sequence level, then the mean over the step's passes; TRL
# before 1.9 averaged each rank's share instead, pooled_ranks=False: rl_board.metrics.trl_pools_ranks), the share of
# tokens the entropy mask dropped, the passes and samples, and how concentrated the update was: the largest sample's
# share of the step's Σ|weight| and how many samples make half of it. Passes without a micro_batch are one pass of
# their step.
UPDATE_SERIES = {
    "clip_ratio/low_mean": "share of tokens PPO's lower clip zeroed (ratio < 1 - ε_low, advantage < 0), TRL's metric",
    "clip_ratio/high_mean": "share of tokens PPO's upper clip zeroed (ratio > 1 + ε_high, advantage > 0), TRL's metric",
    "clip_ratio/region_mean": "share of tokens either clip zeroed, TRL's metric",
    "cispo_clip_ratio": "CISPO: share of tokens whose weight its cap lowered (ratio > ε_high, advantage > 0), TRL's metric",
    "entropy_dropped": "share of tokens the entropy mask (top_entropy_quantile) left out of the loss",
    "top_sample_share": "the largest share one sample has of the step's Σ|update weight|",
    "samples_for_half": "the fewest samples that make half of the step's Σ|update weight|",
    "max_ratio": "the largest policy ratio π_θ/π_old of the step's passes",
    "min_ratio": "the smallest policy ratio π_θ/π_old of the step's passes",
}


def update_by_step(passes: pd.DataFrame, sequence_level: bool = False, loss_type: str | None = None, pooled_ranks: bool = True) -> pd.DataFrame:
    if passes.empty:
        return pd.DataFrame(columns=["step", *UPDATE_SERIES])
    table = passes.assign(
        low=(passes["clipped_low"] > 0).astype(float) if sequence_level else passes["clipped_low"],
        high=(passes["clipped_high"] > 0).astype(float) if sequence_level else passes["clipped_high"],
        region=((passes["clipped_low"] + passes["clipped_high"]) > 0).astype(float) if sequence_level else passes["clipped_low"] + passes["clipped_high"],
        count=1.0 if sequence_level else passes["tokens"].astype(float),
    )
    table.loc[passes["clipped_low"].isna(), ["low", "high", "region"]] = np.nan
    per_pass = trl_pass_means(table, {"clip_ratio/low_mean": "low", "clip_ratio/high_mean": "high", "clip_ratio/region_mean": "region"}, pooled_ranks)
    result = per_pass.groupby(level="step").mean()
    sums = passes.groupby("step")[["entropy_dropped", "tokens", "abs_weight"]].sum(min_count=1)
    result["entropy_dropped"] = sums["entropy_dropped"] / sums["tokens"].clip(lower=1)
    result["max_ratio"] = passes.groupby("step")["max_ratio"].max()
    result["min_ratio"] = passes.groupby("step")["min_ratio"].min()
    shares = sample_shares(passes)
    result["top_sample_share"] = shares.groupby("step")["share"].max()
    result["samples_for_half"] = shares.groupby("step")["share"].apply(samples_for_half)
    result["passes"] = per_pass.groupby(level="step").size()
    result["samples"] = passes.groupby("step")["sample"].nunique()
    if loss_type == "cispo":  # CISPO caps the weight of a high ratio (clipped +1), it zeroes no gradient: TRL's own name
        result = result.drop(columns=["clip_ratio/low_mean", "clip_ratio/region_mean"]).rename(columns={"clip_ratio/high_mean": "cispo_clip_ratio"})
    return result.reset_index()


# TRL's token means per loss pass (step, micro_batch; rows without a micro_batch one pass of their step): each column
# of `means` (name: summed column) over the pass's `count`, pooled over all ranks' rows, or each rank's (a path) then
# their mean where pooled_ranks is False (rl_board.metrics.trl_pools_ranks). A pass without tokens counts as 0.
def trl_pass_means(table: pd.DataFrame, means: dict[str, str], pooled_ranks: bool) -> pd.DataFrame:
    sums = table.groupby(["step", "micro_batch"] + ([] if pooled_ranks else ["path"]), dropna=False)[[*means.values(), "count"]].sum(min_count=1)
    per_pass = pd.DataFrame({name: sums[column] / sums["count"].clip(lower=1) for name, column in means.items()})
    return per_pass if pooled_ranks else per_pass.groupby(level=["step", "micro_batch"], dropna=False).mean()


# Whether the run's loss weighs whole sequences (TRL's importance_sampling_level="sequence"), from its metadata.
def sequence_level(meta: dict | None) -> bool:
    return ((meta or {}).get(LOSS_META_KEY) or {}).get("importance_sampling_level") == "sequence"


# Each sample's share of its step's Σ|update weight| (over its passes in that step), with its clipped tokens there;
# a row per (step, sample), the largest share first within a step.
def sample_shares(passes: pd.DataFrame) -> pd.DataFrame:
    weighted = passes.dropna(subset=["abs_weight"])
    per_sample = weighted.groupby(["step", "sample"], as_index=False)[["abs_weight", "tokens", "clipped_low", "clipped_high", "entropy_dropped"]].sum(min_count=1)
    totals = per_sample.groupby("step")["abs_weight"].transform("sum")
    per_sample["share"] = np.where(totals > 0, per_sample["abs_weight"] / totals.where(totals > 0, 1.0), np.nan)
    return per_sample.sort_values(["step", "share"], ascending=[True, False], kind="stable").reset_index(drop=True)


# The fewest shares (any order) whose sum reaches half of their total.
def samples_for_half(shares: pd.Series) -> float:
    values = np.sort(shares.dropna().to_numpy())[::-1]
    if not len(values) or values.sum() <= 0:
        return np.nan
    return float(np.searchsorted(np.cumsum(values), values.sum() / 2) + 1)


# A sample's per-token update values over its passes (a line's loss_passes as they are): the ratio at its last pass
# that has one at the token, the passes that clipped the token (signed: -k for k passes of the lower clip, +k of the
# upper), the passes whose entropy mask kept it, and Σ weight over the passes, each over the passes with a value at
# the token (NaN where none has); none for a line without passes. A pass of another shape is left out.
def token_update(loss_passes, length: int) -> dict[str, np.ndarray]:
    try:
        loss_passes, _ = loss_pass_records(loss_passes, None)
    except ValueError:  # not a list: another tool's key of that name
        return {}
    if not loss_passes:
        return {}

    def stacked(key):
        arrays = [fitted(getattr(loss_pass, key), length) for loss_pass in loss_passes if getattr(loss_pass, key) is not None]
        return np.array(arrays) if arrays else None

    def summed(key):
        arrays = stacked(key)
        return None if arrays is None else np.where(np.isnan(arrays).all(axis=0), np.nan, np.nansum(arrays, axis=0))

    ratios = stacked("policy_ratio")
    if ratios is not None:  # per token, the last pass with a value there
        last = len(ratios) - 1 - np.argmax(~np.isnan(ratios[::-1]), axis=0)
        ratios = ratios[last, np.arange(length)]
    values = {"policy_ratio": ratios, "clipped": summed("clipped"), "entropy_kept": summed("entropy_mask"), "update_weight": summed("update_weight")}
    return {name: array for name, array in values.items() if array is not None}


# A per-token list as a float array of `length` (null as NaN; cut, or NaN-padded).
def fitted(values: list, length: int) -> np.ndarray:
    array = np.asarray([np.nan if value is None else value for value in values[:length]], dtype=float)
    return np.concatenate([array, np.full(length - len(array), np.nan)])
