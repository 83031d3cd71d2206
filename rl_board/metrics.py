"""Numbers for the page's charts and tables, from a snapshot's samples (no Streamlit): per-step statistics and
smoothing, TRL's kl recomputed per loss pass, GRPO groups and their learning signal, the search's filters, the batch
and group tables, and a sample's token rows (logp, KL by estimator, entropy...)."""
import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rl_board.reading.lines import (
    EXTRA_PREFIX,
    KL_ESTIMATORS,
    KL_TOKENS,
    TEXT_PREFIX,
    kl_per_token,
    segment_sums_and_means,
)
from rl_board.reading.snapshot import RunSnapshot, SampleTokens
from rl_board.text import IMAGE_PLACEHOLDER, clean_text, number_text, shorten
from rl_board.update import token_update, trl_pass_means

# Per-step series of the reward tab, in the original's order.
REWARD_SERIES = ["reward", "ref_reward", "valid_reward", "ref_valid_reward"]


# A column's finite values (no NaN, no infinity), as floats.
def finite(series: pd.Series) -> np.ndarray:
    values = series.to_numpy(dtype=float)
    return values[np.isfinite(values)]


# Rows of the token area: (name, what it is). Where the policy left the reference and was unsure come first, so the
# token table shows them without scrolling; advantage, the same on every token, is not shown until chosen.
TOKEN_ROWS = {
    "kl": "per-token KL under the chosen estimator",
    "log_ratio": "logp - ref_logp",
    "logp": "logprobs: log-prob of the token under the policy that sampled it (the trainer's forward pass)",
    "sampler_logp": "sampler_logprobs: log-prob of the token under the sampler (vLLM, generate) that drew it",
    "delta": "logp - sampler_logp: where the trainer and the sampler disagree (Δ)",
    "is_ratio": "exp(Δ): the raw importance ratio, trainer over sampler, before any truncation or mask",
    "applied_is_ratio": "is_ratio: the importance weight the trainer applied (after its truncation or mask)",
    "mismatch_kl": "exp(Δ) - 1 - Δ: the token's term of KL(sampler ‖ trainer), k3 on the sampler's tokens",
    "kept_logmass": "sampler_kept_logmass: log of the mass the sampler's top-k/top-p kept here (log M ≤ 0): Δ's renormalisation part",
    "drift": "Δ - kept_logmass: the sampler-trainer difference without the truncation's renormalisation (numeric drift)",
    "ref_logp": "ref_logprobs: log-prob under the reference model",
    "entropy": "entropies: the policy's entropy at each position",
    "token_reward": "token_rewards: the per-token reward the policy was trained on",
    "token_value": "values: the critic's value of each token",
    "prob": "exp(logp)",
    "ref_prob": "exp(ref_logp)",
    "advantage": "the sample's advantage, the same on every token",
    "update_weight": "-∂loss/∂logp summed over the loss passes: how hard the update pushed the token's log-prob up (> 0) or down (< 0); 0 where clipping or a mask zeroed it",
    "clipped": "loss passes whose PPO clip zeroed the token's gradient: -k for k passes of the lower clip, +k of the upper",
    "policy_ratio": "π_θ/π_old at the sample's last loss pass: how far the update had moved the token's probability",
    "entropy_kept": "loss passes whose entropy mask (top_entropy_quantile) kept the token",
}


# Mean, std (population), median, quartiles (interpolated linearly, as pandas' and numpy's) and count of a column per
# step, over finite values only; steps without one are left out. From one sort of the values by step: pandas'
# grouped quantiles took most of a step curve's time over 100,000 samples.
def step_stats(samples: pd.DataFrame, column: str) -> pd.DataFrame:
    values = samples[column].to_numpy(dtype=float, na_value=np.nan)
    finite_values = np.isfinite(values)
    steps, values = samples["step"].to_numpy()[finite_values], values[finite_values]
    steps, values = sorted_by_step(steps, values)
    starts = np.flatnonzero(np.r_[True, steps[1:] != steps[:-1]]) if len(steps) else np.array([], dtype=np.int64)
    counts = np.diff(np.r_[starts, len(steps)])
    if not len(steps):
        return pd.DataFrame({name: np.array([], dtype=np.int64 if name == "count" else float) for name in STEP_STATS}, index=pd.Index(steps, name="step"))
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is computed again below
        stats = sorted_stats(values, starts, counts)
    if not all(np.isfinite(column).all() for column in stats.values()):  # finite values near a float's largest (1e308 + 1e308)
        _, exponent = np.frexp(np.maximum.reduceat(np.abs(values), starts))
        scale = np.ldexp(1.0, exponent - 1)  # a power of two near each step's largest |value| (2^1024 is inf): dividing by it is exact
        scaled = sorted_stats(values / np.repeat(scale, counts), starts, counts)
        for name, column in stats.items():
            overflowed = ~np.isfinite(column)
            column[overflowed] = scaled[name][overflowed] * scale[overflowed]
    return pd.DataFrame({name: counts if name == "count" else stats[name] for name in STEP_STATS}, index=pd.Index(steps[starts], name="step"))


# step_stats' numbers of values sorted by step then value, a step's from starts on, counts of them.
def sorted_stats(values: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> dict[str, np.ndarray]:
    mean = np.add.reduceat(values, starts) / counts
    std = np.sqrt(np.add.reduceat((values - np.repeat(mean, counts)) ** 2, starts) / counts)
    middle = starts + (counts - 1) // 2
    median = np.where(counts % 2 == 1, values[middle], (values[middle] + values[np.minimum(middle + 1, len(values) - 1)]) / 2)

    def quantile(q: float) -> np.ndarray:
        place = (counts - 1) * q
        below = np.floor(place).astype(np.int64)
        at, above = starts + below, starts + np.minimum(below + 1, counts - 1)
        return values[at] + (values[above] - values[at]) * (place - below)

    return {"mean": mean, "median": median, "std": std, "q25": quantile(0.25), "q75": quantile(0.75)}


STEP_STATS = ["mean", "median", "count", "std", "q25", "q75"]  # step_stats' columns


# Steps and values sorted by step, then value. A snapshot's samples come in step order, mostly as many each step: then
# each step's values are sorted as a row of one table (a few times faster than sorting by both keys).
def sorted_by_step(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(steps) and (steps[1:] >= steps[:-1]).all():
        per_step = np.diff(np.flatnonzero(np.r_[True, steps[1:] != steps[:-1], True]))
        if (per_step == per_step[0]).all():
            return steps, np.sort(values.reshape(len(per_step), per_step[0]), axis=1).reshape(-1)
    order = np.lexsort((values, steps))
    return steps[order], values[order]


# Rewards that take at most this many values over a whole run (0/1 correctness, a sum of such scores) are counted per
# value in the batch's distribution; decided once per run, so every step's chart is of one kind.
FEW_REWARD_VALUES = 12


def few_reward_values(samples: pd.DataFrame) -> bool:
    values = np.concatenate([finite(samples[column]) for column in ("reward", "ref_reward") if column in samples] or [np.array([])])
    distinct = len(np.unique(values))
    return 0 < distinct <= FEW_REWARD_VALUES and len(values) > 2 * distinct  # each value, on average, more than twice


# The steps where a per-step number changed most from the step before (by size, up to `count`), with the change; the
# first step has none.
def largest_changes(per_step: pd.Series, count: int = 5) -> pd.Series:
    changes = per_step.sort_index().diff().replace([np.inf, -np.inf], np.nan).dropna()
    return changes.loc[changes.abs().sort_values(ascending=False, kind="stable").index[:count]]


# TensorBoard's smoothing: an exponential moving average debiased at the start (pandas' adjusted ewm is exactly that),
# over the finite values only; a missing value stays missing.
def smoothed(values: np.ndarray, weight: float) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    if not weight or not len(values):
        return values
    finite_values = np.where(np.isfinite(values), values, np.nan)
    result = pd.Series(finite_values).ewm(alpha=1 - weight, adjust=True, ignore_na=True).mean().to_numpy()
    return np.where(np.isnan(finite_values), np.nan, result)


# The per-step columns the step curves draw, each as its chart names it.
STEP_CURVE_COLUMNS = {
    **{name: name for name in REWARD_SERIES},
    "avg_log_ratio": "log_ratio",
    **{f"avg_kl_{name}": f"kl ({name})" for name in KL_ESTIMATORS},
    "response_tokens_len": "response tokens",
    "avg_entropy": "entropy",
}


# The numbers behind the step curves, every run compared: one row per run, series and step.
def step_statistics_table(runs: list[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    tables = []
    for run_name, samples in runs:
        columns = list(STEP_CURVE_COLUMNS) + sorted(column for column in samples.columns if column.startswith("rewards/"))
        for column in columns:
            if column in samples and samples[column].notna().any():
                stats = step_stats(samples, column).reset_index()
                tables.append(stats.assign(run=run_name, series=STEP_CURVE_COLUMNS.get(column, column)))
        fractions = group_signal_by_step(samples)
        for column in fractions.columns:
            values = fractions[column].dropna()
            tables.append(pd.DataFrame({"step": values.index, "mean": values.to_numpy(), "run": run_name, "series": f"{column} (fraction)"}))
    order = ["run", "series", "step", "mean", "std", "median", "q25", "q75", "count"]
    return pd.concat(tables, ignore_index=True).reindex(columns=order) if tables else pd.DataFrame(columns=order)


# TRL logs kl per loss pass (micro-batch) as the token mean of k3 over the sampled tokens (a tool's are left out)
# pooled over all ranks (since TRL 1.9; before, the mean of each rank's token mean), and per step the mean over its
# passes. From lines that say their pass (micro_batch), per step; a rank is a file. The tokens counted are those with
# a k3 value, as avg_kl_k3 counts them: TRL's lines have one at every sampled token; a null in another's adds none.
def trl_kl_by_step(samples: pd.DataFrame, pooled_ranks: bool = True) -> pd.Series:
    lines = samples.dropna(subset=["micro_batch"])
    tokens = pd.DataFrame({  # a line without log-probs (e.g. masked when truncated) adds no token
        "kl": lines["sum_kl_k3"].fillna(0.0),
        "count": lines[KL_TOKENS].fillna(0.0),
        "step": lines["step"], "micro_batch": lines["micro_batch"], "path": lines["path"],
    })
    return trl_pass_means(tokens, {"kl": "kl"}, pooled_ranks)["kl"].groupby(level="step").mean()


# TRL (1.9 on) pools each loss pass's kl and clip shares over all ranks' tokens; before, it averaged each rank's
# token mean. Unknown: pooled.
POOLED_RANKS_SINCE = (1, 9)


def trl_pools_ranks(trl_version) -> bool:
    match = re.match(r"(\d+)\.(\d+)", str(trl_version or ""))
    return match is None or (int(match.group(1)), int(match.group(2))) >= POOLED_RANKS_SINCE


# Per step, the share of groups with identical rewards and the share of truncated completions. A group is judged on
# the rewards it has (a null reward is skipped); one with no reward at all is neither, left out of the share (a step
# of only such groups has none), as the groups table and Step-Signals count them.
def group_signal_by_step(samples: pd.DataFrame) -> pd.DataFrame:
    result = pd.DataFrame(index=pd.Index(sorted(samples["step"].unique()), name="step"))
    grouped = samples.dropna(subset=["group_id"])
    if len(grouped):
        extremes = grouped.groupby(["step", "group_id"])["reward"].agg(["max", "min", "count"])  # NaN skipped
        judged = extremes[extremes["count"] > 0]
        result["zero-signal groups"] = (judged["max"] == judged["min"]).groupby(level="step").mean()
    truncated = samples.dropna(subset=["truncated"])
    if len(truncated):
        result["truncated"] = truncated.groupby("step")["truncated"].mean()
    return result


# Per sample, whether its group (same step and group id) gave every completion the same reward: no learning signal,
# as Step-Groups counts it (over the rewards the group has; a group without any is not one).
def zero_signal_members(samples: pd.DataFrame) -> np.ndarray:
    rewards = samples.groupby(["step", "group_id"])["reward"]
    return (rewards.transform("max") == rewards.transform("min")).to_numpy()


# The numbers a search can be filtered and sorted by, those the run has: rewards, advantage, length, log ratio, the
# chosen KL estimator, entropy, the sampler-trainer mismatch (mean and largest |Δ|, ΣΔ: the log of the sequence's
# ratio, mismatch KL, largest and smallest token ratio), an asynchronous run's staleness and policy version, and every
# number of a key outside the format.
def filter_columns(run: "RunSnapshot", kl_estimator: str) -> list[str]:
    columns = ["reward", *run.reward_function_columns, "advantage", "response_tokens_len", "response_len", "avg_log_ratio", f"avg_kl_{kl_estimator}", "avg_entropy", "tool_tokens"]
    columns += ["avg_abs_mismatch", "max_abs_mismatch", "sum_mismatch", "avg_mismatch_kl", "max_is_ratio", "min_is_ratio", "clipped_tokens", "abs_update_weight"]
    columns += ["turns", "tool_calls", "tool_errors", "staleness", "policy_version"]
    return [column for column in columns + run.extra_columns if run.has_values(column)]


# What a search keeps besides its text: a step range, ranges of numbers, facet values, truncated completions, members
# of zero-signal groups; the default keeps every sample.
@dataclass(frozen=True)
class SampleFilter:
    steps: tuple = ()  # (first, last); () for all
    ranges: tuple = ()  # (column, low, high), each kept inclusive; a sample without the number is left out
    facets: tuple = ()  # (column, values)
    truncated: bool = False
    zero_signal: bool = False


# Which samples pass every part of the filter.
def filter_mask(samples: pd.DataFrame, chosen: SampleFilter) -> np.ndarray:
    mask = np.ones(len(samples), dtype=bool)
    if chosen.steps:
        mask &= samples["step"].between(*chosen.steps).to_numpy()
    for column, low, high in chosen.ranges:
        mask &= samples[column].between(low, high).to_numpy()
    for column, values in chosen.facets:
        mask &= samples[column].isin(values).to_numpy()
    if chosen.truncated:
        mask &= samples["truncated"].to_numpy() == 1
    if chosen.zero_signal:
        mask &= zero_signal_members(samples)
    return mask


# Per value of a facet: how many samples, and the mean of a number over those that have it.
def facet_table(samples: pd.DataFrame, facet: str, column: str) -> pd.DataFrame:
    grouped = samples.groupby(facet)[column]
    table = pd.DataFrame({"samples": samples.groupby(facet).size(), f"mean {column}": grouped.mean(), f"samples with {column}": grouped.count()})
    return table.rename_axis(facet).reset_index().sort_values("samples", ascending=False, kind="stable")  # text/<key>: no clash


# One row per prompt group of the step: the spread of its rewards (0: no learning signal) and its completions. Zero
# signal is judged on the rewards the group has, as the Step-Groups curve judges it: missing (neither) for a group
# without any.
def group_table(table: pd.DataFrame, pad_token: str | None = None, system_prompt_end: str | None = None) -> pd.DataFrame:
    rows = []
    for group, members in table.groupby("group", sort=True):
        rewards = members["reward"]
        same = rewards.max() == rewards.min()  # over the rewards there are (NaN skipped); equal infinities too
        rows.append({
            "group": int(group),
            "prompt": shorten(clean_text(members["prompt"].iloc[0], pad_token, system_prompt_end), 200),
            "completions": len(members),
            "reward spread": 0.0 if same else rewards.max() - rewards.min(),
            "reward std": 0.0 if same else rewards.std(ddof=0),
            "mean reward": rewards.mean(),
            "zero signal": same if rewards.notna().any() else pd.NA,
            "truncated": members["truncated"].sum() if members["truncated"].notna().any() else np.nan,
            "samples": members.index.tolist(),
            "rewards": [number_text(reward) for reward in rewards],  # as the page's other texts show a reward
            "group_id": members["group_id"].iloc[0],
        })
    groups = pd.DataFrame(rows).astype({"zero signal": "boolean"})
    return groups.sort_values("reward spread", ascending=False, kind="stable").reset_index(drop=True)


# The batch table's columns, the original's and GRPO's (absent ones hidden): first the short numbers that say which
# samples matter (reward, advantage, group, staleness, KL, entropy, length), then the texts, then the rest; the wide
# texts first would push them off-screen.
def batch_table_view(table: pd.DataFrame, kl_estimator: str, pad_token: str | None, system_prompt_end: str | None) -> pd.DataFrame:
    view = table.assign(
        sample=np.arange(len(table)),
        prompt=[shorten(clean_text(text, pad_token, system_prompt_end)) for text in table["prompt"]],
        response=[shorten(clean_text(text, pad_token)) for text in table["response"]],
        ref_response=[None if text is None else shorten(clean_text(text, pad_token)) for text in table["ref_response"]],
        avg_kl=table[f"avg_kl_{kl_estimator}"],
        sum_kl=table[f"sum_kl_{kl_estimator}"],
    )
    columns = ["sample", "reward", "advantage", "group"] + [c for c in table.columns if c.startswith("rewards/")] + ["staleness", "policy_version"]
    columns += ["avg_kl", "avg_log_ratio", "avg_entropy", "avg_abs_mismatch", "max_is_ratio", "clipped_tokens", "abs_update_weight", "turns", "tool_calls", "tool_errors", "response_tokens_len", "tool_tokens", "truncated"]
    columns += sorted(c for c in table.columns if c.startswith((EXTRA_PREFIX, TEXT_PREFIX))) + ["prompt", "response", "ground_truth"]
    columns += ["valid_reward", "sum_log_ratio", "sum_kl", "ref_response", "ref_reward", "ref_valid_reward", "reward_gap", "valid_reward_gap", "group_id"]
    view = view[columns]
    return view.loc[:, view.notna().any()]  # the frame's notna at once: a Series' per column took 12 of 17 ms a step


# The token area's rows: the sample's tokens as shown, which are pads and which a tool wrote, where each starts in
# the response (a run of image placeholders is one row), and each metric (TOKEN_ROWS) per row.
@dataclass
class TokenRows:
    tokens: list[str]
    is_pad: np.ndarray
    is_tool: np.ndarray
    positions: np.ndarray
    values: dict[str, np.ndarray]


# Token rows for the area: metrics by name, tokens clipped to the log-prob length, trailing pads dropped.
def token_rows(tokens: "SampleTokens", estimator: str, pad_token: str | None) -> TokenRows:
    logp = tokens.logprobs
    values = {"logp": logp, "prob": np.exp(logp)}
    if tokens.ref_logprobs is not None:
        ref = tokens.ref_logprobs
        log_ratio = logp - ref
        values.update(log_ratio=log_ratio, kl=kl_per_token(log_ratio, estimator), ref_logp=ref, ref_prob=np.exp(ref))
    if tokens.sampler_logprobs is not None:
        delta = logp - tokens.sampler_logprobs
        with np.errstate(over="ignore"):
            values.update(sampler_logp=tokens.sampler_logprobs, delta=delta, is_ratio=np.exp(delta), mismatch_kl=kl_per_token(delta, "kl"))
        if tokens.sampler_kept_logmass is not None:
            values.update(kept_logmass=tokens.sampler_kept_logmass, drift=delta - tokens.sampler_kept_logmass)
    for name, per_token in (
        ("token_reward", tokens.token_rewards), ("token_value", tokens.values), ("entropy", tokens.entropies), ("applied_is_ratio", tokens.is_ratio),
    ):
        if per_token is not None:
            values[name] = per_token
    if tokens.advantage is not None:
        values["advantage"] = np.full(len(logp), tokens.advantage)
    values.update(token_update(tokens.loss_passes, len(logp)))
    names = tokens.response_tokens
    is_pad = np.array([pad_token is not None and name == pad_token for name in names], dtype=bool)
    is_tool = np.zeros(len(names), dtype=bool) if tokens.tool is None else tokens.tool
    if is_tool.any():  # a tool's tokens have no value of any kind (advantage, a critic's value...) in the token views
        values = {name: np.where(is_tool, np.nan, array) for name, array in values.items()}
    keep = len(names)
    if pad_token is not None:
        while keep and is_pad[keep - 1]:
            keep -= 1
    names = names[:keep]
    # A row starts at each token but the second and later of a run of one image placeholder (<|image_pad|> x 1024).
    starts = np.array([i for i, name in enumerate(names) if not (i and name == names[i - 1] and IMAGE_PLACEHOLDER.fullmatch(name))], dtype=np.int64)
    counts = np.diff(np.append(starts, keep))
    if len(starts) == keep:
        return TokenRows(tokens=names, is_pad=is_pad[:keep], is_tool=is_tool[:keep], positions=starts, values={name: array[:keep] for name, array in values.items()})
    labels = [names[start] if count == 1 else f"{names[start]} × {count}" for start, count in zip(starts.tolist(), counts.tolist())]
    means = {name: segment_sums_and_means(np.asarray(array[:keep], dtype=float)[None], counts)[1][0] for name, array in values.items()}
    return TokenRows(
        tokens=labels, is_pad=np.logical_and.reduceat(is_pad[:keep], starts), is_tool=np.logical_and.reduceat(is_tool[:keep], starts),
        positions=starts, values=means,
    )


# The token rows of one span of the response's tokens [start, end) (a turn of a trajectory).
def turn_rows(rows: TokenRows, start: int, end: int) -> TokenRows:
    kept = (rows.positions >= start) & (rows.positions < end)
    return TokenRows(
        tokens=[token for token, keep in zip(rows.tokens, kept) if keep], is_pad=rows.is_pad[kept], is_tool=rows.is_tool[kept],
        positions=rows.positions[kept], values={name: values[kept] for name, values in rows.values.items()},
    )


# The normal density fitted (mean, population std) to values, on a grid spanning them.
def normal_curve(values: np.ndarray, points: int = 200) -> tuple[np.ndarray, np.ndarray]:
    mean, std = values.mean(), values.std()
    if std == 0:
        return np.array([mean]), np.array([0.0])
    x = np.linspace(min(values.min(), mean - 3 * std), max(values.max(), mean + 3 * std), points)
    return x, np.exp(-0.5 * ((x - mean) / std) ** 2) / (std * math.sqrt(2 * math.pi))
