"""Where the sampler and the trainer disagree, token by token. The engine that samples (vLLM, SGLang, `generate` in
bf16) and the trainer's forward pass give a token different log-probs; Δ = logp - sampler_logp (trainer minus
sampler) per token, its raw importance ratio exp(Δ), and the mismatch KL exp(Δ) - 1 - Δ (k3 of KL(sampler ‖
trainer), estimated on the sampler's tokens). Trainers correct it by weighting each token with the ratio, truncated or
masked at thresholds: TRL's four `vllm_importance_sampling_mode`s, which are also TIS (token_truncate) and MIS /
IcePop (token_mask). Here, the thresholds are the user's: the share of tokens and of sequences they would correct, and
the effective sample size of the raw ratios, per step; and the tokens with the largest |Δ| of the run.

Where the sampler truncated the distribution (top-k, top-p, min-p...) it sampled from the renormalised rest, so its
log-prob of a token is log p(x) - log M, M the mass the truncation kept at that position, and Δ = drift + log M
(log M <= 0). Where the lines carry log M (`sampler_kept_logmass`), Δ is split into that renormalisation (-log M per
token) and the drift Δ - log M, the numeric disagreement between sampler and trainer.

The per-sample numbers (mean |Δ|, ΣΔ, ...) are the index's (rl_board.reading.lines.MISMATCH_NUMBERS); the per-token
values are read here, by a pass of their own over the loaded lines, once per run version."""
from dataclasses import dataclass

import msgspec
import numpy as np
import pandas as pd
import simdjson

from rl_board.reading.lines import (
    LINE_FIELDS_DECODER,
    MISMATCH_DECODER,
    MISMATCH_TOKEN_KEYS,
    BadLine,
    RolloutMismatch,
    aligned_token_arrays,
    decode_line,
    flat_float_list,
    integer_step,
    kl_per_token,
    segment_reduce,
)
from rl_board.reading.snapshot import ensure_same_step, lines_read_back

# TRL's names (GRPOConfig.vllm_importance_sampling_mode), what each does to the ratio r = exp(Δ) of a token, or of a
# sequence (exp(ΣΔ)), at [C_min, C_max] (either may be absent: no bound).
CORRECTIONS = {
    "token_truncate": "each token's ratio clipped to [C_min, C_max] (TIS)",
    "token_mask": "a token whose ratio is outside [C_min, C_max] gets weight 0 (MIS, IcePop's band)",
    "sequence_truncate": "each sequence's ratio exp(ΣΔ) clipped to [C_min, C_max], on all its tokens",
    "sequence_mask": "a sequence whose ratio exp(ΣΔ) is outside [C_min, C_max] gets weight 0",
}


# TRL's defaults (GRPOConfig, trl 1.16): what the thresholds start at for a run whose metadata names none.
DEFAULT_CORRECTION = ("sequence_mask", 0.0, 3.0)


# The per-step columns of Δ's split, where the lines carry the log of the kept mass log M: the mean of -log M (the
# part of |Δ| that is the truncated distribution's renormalisation) and the mean |Δ - log M| (the numeric drift).
RENORMALISATION, DRIFT = "Δ from renormalisation", "drift (Δ − log kept mass)"


# Per token of the loaded samples (in the samples' order, one after the other), Δ and the weight the trainer
# applied; NaN where a token has no Δ (a tool wrote it, or the line has a null) or no applied weight.
@dataclass(frozen=True)
class MismatchTokens:
    lengths: np.ndarray  # tokens of each sample; 0 for a sample without sampler log-probs
    delta: np.ndarray  # float64: a sequence's ratio is exp of the sum of thousands of them
    applied: np.ndarray  # float64: a weight beyond float32's range (3.4e38) is the line's, not inf
    entropy: np.ndarray  # the trainer's entropy at the token (NaN without)
    turn: np.ndarray  # 1 + the runs of tool tokens before the token: the assistant turn it is in
    problems: list[str]  # lines that could not be read back, as "file line N: reason"
    # float64: log of the mass the sampler's truncation kept at the token (NaN without); None: no line has it
    kept_logmass: np.ndarray | None = None

    @property
    def starts(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)


# The per-token values of the samples (a snapshot's rows: path, offset, length, step, line).
def read_mismatch_tokens(samples: pd.DataFrame) -> MismatchTokens:
    lengths, problems = np.zeros(len(samples), dtype=np.int64), []
    deltas, applied, entropies, turns, kept = [], [], [], [], []
    parser = simdjson.Parser()
    for position, raw, step, place in lines_read_back(samples):
        try:
            record = decoded_mismatch(raw, parser)
            ensure_same_step(record, step)
        except BadLine as error:
            problems.append(f"{place}: {error}")
            continue
        arrays, _, _ = aligned_token_arrays(record, MISMATCH_TOKEN_KEYS)
        if arrays["logprobs"] is None or arrays["sampler_logprobs"] is None:
            continue
        delta = arrays["logprobs"] - arrays["sampler_logprobs"]
        lengths[position] = len(delta)
        deltas.append(delta)
        applied.append(np.full(len(delta), np.nan) if arrays["is_ratio"] is None else arrays["is_ratio"].astype(np.float64))
        entropies.append(np.full(len(delta), np.nan, dtype=np.float32) if arrays["entropies"] is None else arrays["entropies"].astype(np.float32))
        kept.append(arrays["sampler_kept_logmass"])
        tool = np.zeros(len(delta), dtype=bool) if arrays["tool"] is None else arrays["tool"]
        turns.append((1 + np.cumsum(tool & ~np.concatenate([[False], tool[:-1]]))).astype(np.int32))
    flat = lambda parts, kind: np.concatenate(parts) if parts else np.zeros(0, dtype=kind)  # noqa: E731
    kept_logmass = None
    if any(values is not None for values in kept):
        kept_logmass = flat([np.full(len(delta), np.nan) if values is None else values for values, delta in zip(kept, deltas)], np.float64)
    return MismatchTokens(
        lengths=lengths, delta=flat(deltas, np.float64), applied=flat(applied, np.float64), entropy=flat(entropies, np.float32),
        turn=flat(turns, np.int32), problems=problems, kept_logmass=kept_logmass,
    )


# A line's mismatch keys, the fast way where simdjson takes its per-token lists as they are (flat lists of finite
# numbers: straight into float arrays, no Python float per token); any other line the general way.
def decoded_mismatch(raw: bytes, parser: simdjson.Parser) -> RolloutMismatch:
    try:
        fields = LINE_FIELDS_DECODER.decode(raw)
        record = RolloutMismatch(step=msgspec.json.decode(fields["step"]), tool_mask=fields.get("tool_mask", msgspec.Raw()))
        for key in MISMATCH_TOKEN_KEYS:
            setattr(record, key, flat_float_list(fields.get(key, msgspec.Raw()), parser))
        return integer_step(record)
    except (msgspec.DecodeError, ValueError, TypeError, KeyError, RuntimeError, RecursionError):
        return decode_line(raw, MISMATCH_DECODER)[0]


# The ratio r under a correction at [clip_min, clip_max] (None: no bound), as TRL applies it
# (grpo_trainer.py, `_generate_and_score_completions`): clipped into the band, or 0 outside it.
def corrected(ratio: np.ndarray, mode: str, clip_min: float | None, clip_max: float | None) -> np.ndarray:
    if mode not in CORRECTIONS:
        raise ValueError(f"unknown correction {mode!r}: one of {', '.join(CORRECTIONS)}")
    if mode.endswith("truncate"):
        return np.clip(ratio, -np.inf if clip_min is None else clip_min, np.inf if clip_max is None else clip_max)
    return np.where(outside_band(ratio, clip_min, clip_max), 0.0, ratio)


# Where the ratio r is outside [clip_min, clip_max]: what a correction changes, clipped or masked (a ratio of 0, a
# token the trainer gives probability 0, masked to 0 is changed too; NaN is in no band, as in TRL's comparisons).
def outside_band(ratio: np.ndarray, clip_min: float | None, clip_max: float | None) -> np.ndarray:
    return (ratio < (-np.inf if clip_min is None else clip_min)) | (ratio > (np.inf if clip_max is None else clip_max))


# Tokens reduced at a time: the temporaries of a pass over a run's tokens stay this many floats each.
TOKENS_PER_PASS = 1 << 20


# Blocks of whole samples (start, end: sample positions), each of about TOKENS_PER_PASS tokens.
def sample_blocks(lengths: np.ndarray) -> list[tuple[int, int]]:
    ends = np.cumsum(lengths)
    cuts = np.unique(np.searchsorted(ends, np.arange(TOKENS_PER_PASS, ends[-1] if len(ends) else 0, TOKENS_PER_PASS), side="right"))
    bounds = [0, *[int(cut) for cut in cuts if 0 < cut < len(lengths)], len(lengths)]
    return list(zip(bounds, bounds[1:]))


# Per sample, over its tokens with a Δ (a token without one counts as Δ = 0 in ΣΔ, as TRL counts it): their number,
# Σ|Δ|, Σ mismatch KL, the largest and smallest Δ, ΣΔ, Σ exp(Δ - m) and Σ exp(2(Δ - m)) with m the largest Δ (the
# sums of the token ratios r = exp(Δ) and of r², without overflow), and the trainer's applied weights (Σ, and how many
# tokens have one); over its tokens with a Δ and the log of the kept mass log M, their number, Σ|Δ|, Σ -log M (the
# renormalisation) and Σ|Δ - log M| (the drift). The same at every threshold: computed once per run.
def sample_sums(tokens: MismatchTokens) -> dict[str, np.ndarray]:
    names = ["count", "abs", "kl", "largest", "smallest", "delta", "scaled_ratio", "scaled_square", "applied", "applied_count"]
    names += ["split_count", "split_abs", "renormalisation", "abs_drift"]
    sums = {name: np.zeros(len(tokens.lengths)) for name in names}
    sums["largest"][:], sums["smallest"][:] = -np.inf, np.inf
    for first, last, delta, present in token_blocks(tokens):
        lengths = tokens.lengths[first:last]
        largest = segment_reduce(np.maximum, np.where(present, delta, -np.inf), lengths, -np.inf)
        sums["largest"][first:last] = largest
        sums["smallest"][first:last] = segment_reduce(np.minimum, np.where(present, delta, np.inf), lengths, np.inf)
        applied = tokens.applied[tokens.starts[first] : tokens.starts[first] + len(delta)]
        applied_present = present & ~np.isnan(applied)
        scaled = relative_exp(delta, np.repeat(largest, lengths))
        with np.errstate(over="ignore", invalid="ignore"):
            values = {
                "count": present, "abs": np.abs(delta), "kl": kl_per_token(delta, "kl"), "delta": delta,
                "scaled_ratio": np.where(present, scaled, 0.0), "scaled_square": np.where(present, scaled**2, 0.0),
                "applied": np.where(applied_present, applied, 0.0), "applied_count": applied_present,
            }
            if tokens.kept_logmass is not None:
                kept = tokens.kept_logmass[tokens.starts[first] : tokens.starts[first] + len(delta)]
                split = present & ~np.isnan(kept)
                values |= {
                    "split_count": split, "split_abs": np.where(split, np.abs(delta), 0.0),
                    "renormalisation": np.where(split, -kept, 0.0), "abs_drift": np.where(split, np.abs(delta - kept), 0.0),
                }
        for name, value in values.items():
            sums[name][first:last] = segment_reduce(np.add, value.astype(float), lengths, 0.0)
    return sums


# exp(values - largest) for values up to largest, as the ratios e^value over e^largest: 1 at an infinite largest's own
# values and 0 below it (an infinite ratio outweighs every finite one), and 0 under a largest of -inf (every ratio 0;
# a step of only those has no effective sample size: 0 / 0).
def relative_exp(values: np.ndarray, largest: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = np.exp(values - largest)
    return np.where(np.isposinf(largest), values == np.inf, np.where(np.isneginf(largest), 0.0, scaled))


# Each block of samples' tokens: (first sample, end sample, Δ with 0 where a token has none, whether it has one).
def token_blocks(tokens: MismatchTokens):
    starts = tokens.starts
    for first, last in sample_blocks(tokens.lengths):
        begin, end = (int(starts[first]), int(starts[last - 1] + tokens.lengths[last - 1])) if last > first else (0, 0)
        raw = tokens.delta[begin:end]
        present = ~np.isnan(raw)  # ±inf is a Δ (TRL clips or masks it); NaN none
        yield first, last, np.where(present, raw, 0.0), present


# Per sample, under a correction: how many of its tokens with a Δ the correction changes (clips or masks), and
# their summed weight. Sequence modes need only the samples' ΣΔ; token modes a pass over the tokens.
def corrected_sums(tokens: MismatchTokens, sums: dict, mode: str, clip_min: float | None, clip_max: float | None) -> tuple[np.ndarray, np.ndarray]:
    if mode.startswith("sequence"):
        with np.errstate(over="ignore"):
            ratio = np.exp(sums["delta"])
        weight = corrected(ratio, mode, clip_min, clip_max)
        return np.where(outside_band(ratio, clip_min, clip_max), sums["count"], 0.0), weight * sums["count"]
    changed, weights = np.zeros(len(tokens.lengths)), np.zeros(len(tokens.lengths))
    for first, last, delta, present in token_blocks(tokens):
        with np.errstate(over="ignore"):
            ratio = np.exp(delta)
        weight = corrected(ratio, mode, clip_min, clip_max)
        lengths = tokens.lengths[first:last]
        changed[first:last] = segment_reduce(np.add, (outside_band(ratio, clip_min, clip_max) & present).astype(float), lengths, 0.0)
        weights[first:last] = segment_reduce(np.add, np.where(present, weight, 0.0), lengths, 0.0)
    return changed, weights


# Per step (`steps`: each sample's), over the tokens with a Δ: mean |Δ|, the mismatch KL, the largest and smallest
# token ratio, the share of tokens and of sequences the correction changes (clipped or masked), the effective sample
# size of the raw ratios at the correction's level (tokens, or sequences), (Σr)² / (n Σr²), in % of n, the mean
# weight under the correction, and the mean weight the trainer applied (the lines' is_ratio; NaN without); over the
# tokens with the log of the kept mass log M (NaN without), the mean renormalisation -log M and the mean drift
# |Δ - log M|. Reduced per sample (`sums`: sample_sums, computed once per run), then per step.
def mismatch_by_step(steps: np.ndarray, tokens: MismatchTokens, mode: str, clip_min: float | None, clip_max: float | None, sums: dict | None = None) -> pd.DataFrame:
    sums = sample_sums(tokens) if sums is None else sums
    changed, weights = corrected_sums(tokens, sums, mode, clip_min, clip_max)
    has = sums["count"] > 0
    step_values, step_of = np.unique(steps[has], return_inverse=True)
    total = lambda values: np.bincount(step_of, weights=values[has], minlength=len(step_values))  # noqa: E731
    counted = total(sums["count"])
    extremes = np.full(len(step_values), -np.inf), np.full(len(step_values), np.inf)
    np.maximum.at(extremes[0], step_of, sums["largest"][has])
    np.minimum.at(extremes[1], step_of, sums["smallest"][has])
    sequences = total(np.ones(len(has)))
    # The effective sample size (Σr)² / (n Σr²) with every r divided by the step's largest: the same, without overflow.
    with np.errstate(invalid="ignore", over="ignore"):
        if mode.startswith("sequence"):  # one ratio per sequence, exp(ΣΔ)
            step_largest = np.full(len(step_values), -np.inf)
            np.maximum.at(step_largest, step_of, sums["delta"][has])
            scaled = np.zeros(len(has))
            scaled[has] = relative_exp(sums["delta"][has], step_largest[step_of])
            ratio_sum, ratio_squares, ratio_count = total(scaled), total(scaled**2), sequences
        else:  # each sample's sums are scaled by its largest Δ: brought to the step's
            shift = np.zeros(len(has))
            shift[has] = relative_exp(sums["largest"][has], extremes[0][step_of])
            ratio_sum, ratio_squares, ratio_count = total(sums["scaled_ratio"] * shift), total(sums["scaled_square"] * shift**2), counted
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return pd.DataFrame({
            "mean |Δ|": total(sums["abs"]) / counted,
            RENORMALISATION: total(sums["renormalisation"]) / total(sums["split_count"]),
            DRIFT: total(sums["abs_drift"]) / total(sums["split_count"]),
            "mismatch KL": total(sums["kl"]) / counted,
            "max ratio": np.exp(extremes[0]),
            "min ratio": np.exp(extremes[1]),
            "tokens corrected (%)": total(changed) / counted * 100,
            "sequences corrected (%)": total((changed > 0).astype(float)) / sequences * 100,
            "effective sample size (%)": ratio_sum**2 / (ratio_count * ratio_squares) * 100,
            "mean weight at these thresholds": total(weights) / counted,
            "mean applied weight": total(sums["applied"]) / total(sums["applied_count"]),
            "tokens": counted.astype(np.int64),
        }, index=pd.Index(step_values, name="step"))


# Over all the samples' tokens with a Δ and log M (`sums`: sample_sums): their number, mean |Δ|, mean -log M and
# mean |Δ - log M|; None where no token has both.
def renormalisation_split(sums: dict) -> dict | None:
    count = sums["split_count"].sum()
    if not count:
        return None
    return {
        "tokens": int(count), "mean |Δ|": sums["split_abs"].sum() / count,
        RENORMALISATION: sums["renormalisation"].sum() / count, DRIFT: sums["abs_drift"].sum() / count,
    }


# Where the mismatch lives: the tokens bucketed by their position in the response, by the trainer's entropy at them
# (nats), or by the assistant turn they are in (tool runs: a run of tool tokens ends a turn). Each bucket's label is
# the range it holds, [low, high).
BUCKETS = {
    "position": [0, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, np.inf],
    "entropy": [0, 0.01, 0.1, 0.25, 0.5, 1, 2, 4, np.inf],
    "turn": [1, 2, 3, 4, 5, 6, 8, 12, 16, np.inf],
}


# Per bucket of tokens with a Δ: the number of tokens, mean |Δ|, the largest |Δ| and the mismatch KL; only buckets
# that hold tokens, in order.
def mismatch_by_bucket(tokens: MismatchTokens, by: str) -> pd.DataFrame:
    edges = BUCKETS[by]
    labels = [f"{low:g}+" if high == np.inf else (f"{low:g}" if by == "turn" and high - low == 1 else f"{low:g}-{high:g}") for low, high in zip(edges, edges[1:])]
    count, magnitude_sum, kl_sum, largest = (np.zeros(len(labels)) for _ in range(4))
    for first, last, delta, present in token_blocks(tokens):
        begin = int(tokens.starts[first]) if last > first else 0
        lengths = tokens.lengths[first:last]
        values = {
            "position": lambda: np.arange(len(delta)) - np.repeat(np.cumsum(lengths) - lengths, lengths),
            "entropy": lambda: tokens.entropy[begin : begin + len(delta)],
            "turn": lambda: tokens.turn[begin : begin + len(delta)],
        }[by]()
        kept = present & np.isfinite(values)
        bucket = np.clip(np.searchsorted(edges, values[kept], side="right") - 1, 0, len(labels) - 1)  # bf16: entropy -1e-6
        kept_delta = delta[kept]
        magnitude = np.abs(kept_delta)
        kl = kl_per_token(kept_delta, "kl")
        count += np.bincount(bucket, minlength=len(labels))
        magnitude_sum += np.bincount(bucket, magnitude, len(labels))
        kl_sum += np.bincount(bucket, kl, len(labels))
        np.maximum.at(largest, bucket, magnitude)
    with np.errstate(invalid="ignore"):
        table = pd.DataFrame(
            {"tokens": count.astype(np.int64), "mean |Δ|": magnitude_sum / count, "max |Δ|": largest, "mismatch KL": kl_sum / count},
            index=pd.Index(labels, name=by),
        )
    return table[count > 0]


# The tokens of the run with the largest |Δ|, largest first, the earlier token (sample, then position) on a tie: their
# sample (position in the samples), position in the response, Δ and raw ratio; where lines carry the kept mass, its
# log and the drift Δ - log M (NaN where a line has none).
def largest_mismatches(tokens: MismatchTokens, count: int) -> pd.DataFrame:
    candidates = []  # each block's own largest by the same rule, then the largest of those
    for first, last, delta, present in token_blocks(tokens):
        begin = int(tokens.starts[first]) if last > first else 0
        magnitude = np.where(present, np.abs(delta), -1.0)  # no Δ: never among them
        kept = min(count, int(present.sum()))
        if kept:
            cutoff = np.partition(magnitude, len(magnitude) - kept)[len(magnitude) - kept]  # the kept-th largest
            above = np.flatnonzero(magnitude > cutoff)
            tied = np.flatnonzero(magnitude == cutoff)[: kept - len(above)]  # the earliest: a partition picks any
            candidates.append(begin + np.concatenate([above, tied]))
    order = np.concatenate(candidates) if candidates else np.zeros(0, dtype=np.int64)
    order = order[np.lexsort((order, -np.abs(tokens.delta[order])))][:count]  # largest first; the earlier token on a tie
    owners = np.searchsorted(np.cumsum(tokens.lengths), order, side="right")
    with np.errstate(over="ignore"):  # Δ past 709: a ratio of inf
        ratio = np.exp(tokens.delta[order])
    table = pd.DataFrame({"sample": owners, "position": order - tokens.starts[owners], "Δ": tokens.delta[order], "ratio": ratio})
    if tokens.kept_logmass is not None:
        table["log kept mass"] = tokens.kept_logmass[order]
        table["drift"] = tokens.delta[order] - tokens.kept_logmass[order]
    return table
