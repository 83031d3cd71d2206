"""Where the sampler and the trainer disagree, token by token. The engine that samples (vLLM, SGLang, `generate` in
bf16) and the trainer's forward pass give a token different log-probs; Δ = logp - sampler_logp (trainer minus
sampler) per token, its raw importance ratio exp(Δ), and the mismatch KL exp(Δ) - 1 - Δ (k3 of KL(sampler ‖
trainer), estimated on the sampler's tokens). Trainers correct it by weighting each token with the ratio, truncated or
masked at thresholds: TRL's four `vllm_importance_sampling_mode`s, which are also TIS (token_truncate) and MIS /
IcePop (token_mask). Here, the thresholds are the user's: the share of tokens and of sequences they would correct, and
the effective sample size of the raw ratios, per step; and the tokens with the largest |Δ| of the run.

The per-sample numbers (mean |Δ|, ΣΔ, ...) are the index's (rl_board.reading.lines.MISMATCH_NUMBERS); the per-token
values are read here, by a pass of their own over the loaded lines, once per run version."""
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rl_board.reading.lines import MISMATCH_DECODER, MISMATCH_TOKEN_KEYS, BadLine, aligned_token_arrays, decode_line
from rl_board.reading.storage import read_spans

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


# The lines read per batch of the pass: a batch's bytes are in memory at once.
LINES_PER_READ = 2048


# Per token of the loaded samples (in the samples' order, one after the other), Δ and the weight the trainer
# applied; NaN where a token has no Δ (a tool wrote it, or the line has a null) or no applied weight.
@dataclass(frozen=True)
class MismatchTokens:
    lengths: np.ndarray  # tokens of each sample; 0 for a sample without sampler log-probs
    delta: np.ndarray  # float64: a sequence's ratio is exp of the sum of thousands of them
    applied: np.ndarray  # float32, as the entropies: shown, never summed over a sequence
    entropy: np.ndarray  # the trainer's entropy at the token (NaN without)
    turn: np.ndarray  # 1 + the runs of tool tokens before the token: the assistant turn it is in
    problems: list[str]  # lines that could not be read back, as "file line N: reason"

    @property
    def starts(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)

    @property
    def owners(self) -> np.ndarray:
        """The sample (its position in the samples) of each token."""
        return np.repeat(np.arange(len(self.lengths)), self.lengths)


# The per-token values of the samples (a snapshot's rows: path, offset, length, step, line).
def read_mismatch_tokens(samples: pd.DataFrame) -> MismatchTokens:
    lengths, problems = np.zeros(len(samples), dtype=np.int64), []
    deltas, applied, entropies, turns = [], [], [], []
    for start in range(0, len(samples), LINES_PER_READ):
        rows = samples.iloc[start : start + LINES_PER_READ]
        spans = read_spans(rows["path"].tolist(), rows["offset"].astype(int).tolist(), rows["length"].astype(int).tolist())
        for position, (raw, step, path, line) in enumerate(zip(spans, rows["step"].tolist(), rows["path"].tolist(), rows["line"].tolist())):
            try:
                record, _ = decode_line(raw, MISMATCH_DECODER)
                if float(record.step) != float(step):
                    raise BadLine(f"it now holds step {record.step}, not {step}")
            except BadLine as error:
                problems.append(f"{path} line {line}: {error}")
                continue
            arrays, _, _ = aligned_token_arrays(record, MISMATCH_TOKEN_KEYS)
            if arrays["logprobs"] is None or arrays["sampler_logprobs"] is None:
                continue
            delta = arrays["logprobs"] - arrays["sampler_logprobs"]
            lengths[start + position] = len(delta)
            deltas.append(delta)
            missing = np.full(len(delta), np.nan, dtype=np.float32)
            applied.append(missing if arrays["is_ratio"] is None else arrays["is_ratio"].astype(np.float32))
            entropies.append(missing if arrays["entropies"] is None else arrays["entropies"].astype(np.float32))
            tool = np.zeros(len(delta), dtype=bool) if arrays["tool"] is None else arrays["tool"]
            turns.append((1 + np.cumsum(tool & ~np.concatenate([[False], tool[:-1]]))).astype(np.int32))
    flat = lambda parts, kind: np.concatenate(parts) if parts else np.zeros(0, dtype=kind)  # noqa: E731
    return MismatchTokens(
        lengths=lengths, delta=flat(deltas, np.float64), applied=flat(applied, np.float32), entropy=flat(entropies, np.float32),
        turn=flat(turns, np.int32), problems=problems,
    )


# Each token's raw ratio at a correction's level, as TRL computes it (grpo_trainer.py, `_generate_and_score_completions`):
# exp(Δ) of the token, or exp(ΣΔ) of its sequence; a token without Δ counts as Δ = 0 (ratio 1).
def raw_ratios(tokens: MismatchTokens, mode: str) -> np.ndarray:
    delta = np.nan_to_num(tokens.delta, nan=0.0)
    if mode.startswith("sequence") and len(delta):
        kept = tokens.lengths > 0
        delta = np.repeat(np.add.reduceat(delta, tokens.starts[kept]), tokens.lengths[kept])
    with np.errstate(over="ignore"):
        return np.exp(delta)


# Each token's weight under a correction at [clip_min, clip_max] (None: no bound), as TRL applies it.
def corrected_weights(tokens: MismatchTokens, mode: str, clip_min: float | None, clip_max: float | None) -> np.ndarray:
    return corrected(raw_ratios(tokens, mode), mode, clip_min, clip_max)


def corrected(ratio: np.ndarray, mode: str, clip_min: float | None, clip_max: float | None) -> np.ndarray:
    if mode not in CORRECTIONS:
        raise ValueError(f"unknown correction {mode!r}: one of {', '.join(CORRECTIONS)}")
    low = -np.inf if clip_min is None else clip_min
    high = np.inf if clip_max is None else clip_max
    if mode.endswith("truncate"):
        return np.clip(ratio, low, high)
    return np.where((ratio < low) | (ratio > high), 0.0, ratio)


# Per step (`steps`: each sample's), over the tokens with a Δ: mean |Δ|, the mismatch KL, the largest and smallest
# token ratio, the share of tokens and of sequences the correction changes (clipped or masked), the effective sample
# size of the raw ratios at the correction's level (tokens, or sequences), (Σr)² / (n Σr²), in % of n, the mean
# weight under the correction, and the mean weight the trainer applied (the lines' is_ratio; NaN without). Reduced
# per sample, then per step, with a few temporaries the size of the tokens (a run of millions of tokens takes
# a fraction of a second).
def mismatch_by_step(steps: np.ndarray, tokens: MismatchTokens, mode: str, clip_min: float | None, clip_max: float | None) -> pd.DataFrame:
    present = np.isfinite(tokens.delta)
    delta = np.where(present, tokens.delta, 0.0)
    raw = raw_ratios(tokens, mode)
    weights = corrected(raw, mode, clip_min, clip_max)
    changed = (weights != raw) & present
    kept, starts = tokens.lengths > 0, tokens.starts[tokens.lengths > 0]

    def per_sample(values: np.ndarray, function=np.add, empty: float = 0.0) -> np.ndarray:
        result = np.full(len(tokens.lengths), empty)
        if len(starts):
            result[kept] = function.reduceat(values, starts)
        return result

    count = per_sample(present.astype(float))
    applied_present = present & np.isfinite(tokens.applied)
    with np.errstate(over="ignore", invalid="ignore"):
        sums = {
            "abs": per_sample(np.abs(delta)),
            "kl": per_sample(np.expm1(delta) - delta),
            "changed": per_sample(changed.astype(float)),
            "weight": per_sample(np.where(present, weights, 0.0)),
            "applied": per_sample(np.where(applied_present, tokens.applied, 0.0)),
            "applied_count": per_sample(applied_present.astype(float)),
            "raw": per_sample(np.where(present, raw, 0.0)),
            "raw_squared": per_sample(np.where(present, raw**2, 0.0)),
        }
    largest = per_sample(np.where(present, delta, -np.inf), np.maximum, -np.inf)
    smallest = per_sample(np.where(present, delta, np.inf), np.minimum, np.inf)
    has = count > 0
    step_values, step_of = np.unique(steps[has], return_inverse=True)
    total = lambda values: np.bincount(step_of, weights=values[has], minlength=len(step_values))  # noqa: E731
    tokens_per_step = total(count)
    extremes = np.full(len(step_values), -np.inf), np.full(len(step_values), np.inf)
    np.maximum.at(extremes[0], step_of, largest[has])
    np.minimum.at(extremes[1], step_of, smallest[has])
    if mode.startswith("sequence"):  # one ratio per sequence: its tokens' (all the same)
        ratio = np.exp(per_sample(delta))
        ratio_sum, ratio_squares, ratio_count = total(ratio), total(ratio**2), total(np.ones(len(count)))
    else:
        ratio_sum, ratio_squares, ratio_count = total(sums["raw"]), total(sums["raw_squared"]), tokens_per_step
    with np.errstate(invalid="ignore", divide="ignore"):
        table = pd.DataFrame({
            "mean |Δ|": total(sums["abs"]) / tokens_per_step,
            "mismatch KL": total(sums["kl"]) / tokens_per_step,
            "max ratio": np.exp(extremes[0]),
            "min ratio": np.exp(extremes[1]),
            "tokens corrected (%)": total(sums["changed"]) / tokens_per_step * 100,
            "sequences corrected (%)": total((sums["changed"] > 0).astype(float)) / total(np.ones(len(count))) * 100,
            "effective sample size (%)": ratio_sum**2 / (ratio_count * ratio_squares) * 100,
            "mean weight at these thresholds": total(sums["weight"]) / tokens_per_step,
            "mean applied weight": total(sums["applied"]) / total(sums["applied_count"]),
            "tokens": tokens_per_step.astype(np.int64),
        }, index=pd.Index(step_values, name="step"))
    return table


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
    values = {"position": np.arange(len(tokens.delta)) - np.repeat(tokens.starts, tokens.lengths), "entropy": tokens.entropy, "turn": tokens.turn}[by]
    present = np.isfinite(tokens.delta) & np.isfinite(values)
    edges = BUCKETS[by]
    labels = [f"{low:g}+" if high == np.inf else (f"{low:g}" if by == "turn" and high - low == 1 else f"{low:g}-{high:g}") for low, high in zip(edges, edges[1:])]
    bucket = np.searchsorted(edges, values[present], side="right") - 1  # values below the first edge: none here
    delta = tokens.delta[present]
    magnitude = np.abs(delta)
    with np.errstate(over="ignore"):
        kl = np.expm1(delta) - delta
    count = np.bincount(bucket, minlength=len(labels))
    largest = np.zeros(len(labels))
    np.maximum.at(largest, bucket, magnitude)
    held = count > 0
    with np.errstate(invalid="ignore"):
        table = pd.DataFrame({
            "tokens": count, "mean |Δ|": np.bincount(bucket, magnitude, len(labels)) / count, "max |Δ|": largest,
            "mismatch KL": np.bincount(bucket, kl, len(labels)) / count,
        }, index=pd.Index(labels, name=by))
    return table[held]


# The tokens of the run with the largest |Δ|, largest first: their sample (position in the samples), position in the
# response, Δ and raw ratio.
def largest_mismatches(tokens: MismatchTokens, count: int) -> pd.DataFrame:
    magnitude = np.nan_to_num(np.abs(tokens.delta), nan=-1.0)  # no Δ: never among them
    count = min(count, int(np.isfinite(tokens.delta).sum()))
    candidates = np.argpartition(-magnitude, count - 1)[:count] if count else np.zeros(0, dtype=np.int64)
    order = candidates[np.lexsort((candidates, -magnitude[candidates]))]  # largest first; the earlier token on a tie
    owners = tokens.owners[order]
    return pd.DataFrame({
        "sample": owners,
        "position": order - tokens.starts[owners],
        "Δ": tokens.delta[order],
        "ratio": np.exp(tokens.delta[order]),
    })
