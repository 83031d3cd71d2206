"""Signals that the policy may be gaming its reward: per loaded step, six numbers computed over trailing windows of
the run's steps, each with a stated rule (thresholds included) that says at which steps it fires:

    reward functions diverging     one reward function rises while another falls
    length drifting with reward    response length rises together with the reward
    zero-signal groups rising      more groups whose completions all got the same reward (collapse)
    entropy falling                token entropy far below its level at the start (collapse)
    KL accelerating                KL rising faster than it did the window before
    advantage skew                 the advantages' distribution lopsided

Windows are of the run's loaded steps in order (W of them, the last W ending at the step), not of step numbers. A
window's level is the median of its steps' numbers (per-step means), so up to (W - 1) / 2 odd steps in a window (two
of five) do not move it. A window with half its steps or fewer having a number gives none; a signal whose columns the
run lacks is left out, and one whose windows do not fit yet (the run's first steps) has no value and does not fire.

A firing step's example samples: those of the step that show the pattern, highest reward first (EXAMPLES_PER_STEP).
Read from the index table (a snapshot's samples); the Step-Signals tab and `Run.signals` show them."""
import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from rl_board.metrics import group_signal_by_step, zero_signal_members

DEFAULT_WINDOW = 5
EXAMPLES_PER_STEP = 3

# The thresholds the rules state.
DIVERGENCE_SD = 0.5  # each function's shift, in standard deviations of its samples
LENGTH_CORRELATION, LENGTH_RISE = 0.7, 1.1  # Spearman's ρ; the last window's median length over the one before's
ZERO_SIGNAL_FLOOR, ZERO_SIGNAL_RISE = 0.3, 0.2  # shares of groups
ENTROPY_FRACTION = 0.5  # of the first window's entropy
KL_ACCELERATION, KL_FLOOR = 1.0, 1e-4  # the extra rise, as a share of the earlier level; that level, nats per token
KL_NOISE = 3.0  # the extra rise, in multiples of its noise
NORMAL_MAD_OF_DIFFERENCES = 1.4826 / np.sqrt(2)  # σ of normal noise per 1 of the median |change| between steps
ADVANTAGE_SKEW = 1.0

SIGNAL_COLUMNS = ["signal", "step", "value", "fired", "rising", "falling"]


# A signal as the page shows it: the y axis of its curve, the thresholds drawn on it, and its rule for a window.
@dataclass(frozen=True)
class Signal:
    unit: str
    thresholds: tuple[float, ...]
    rule_text: str  # {w}: the window, {w2} and {w3}: twice and three times it, {kl}: the KL column

    def rule(self, window: int, kl_column: str = "avg_kl_k3") -> str:
        return self.rule_text.format(w=window, w2=2 * window, w3=3 * window, kl=kl_column)


SIGNALS = {
    "reward functions diverging": Signal(
        "sd", (DIVERGENCE_SD,),
        "Each reward function's shift: the median of its per-step mean over the last {w} steps minus the median over the "
        "{w} steps before, in standard deviations of its samples over those {w2} steps. Value: the largest min(shift of one "
        f"function, −shift of another). Fires at ≥ {DIVERGENCE_SD:g}: one function rose by ≥ {DIVERGENCE_SD:g} sd while "
        f"another fell by ≥ {DIVERGENCE_SD:g} sd.",
    ),
    "length drifting with reward": Signal(
        "Spearman ρ", (LENGTH_CORRELATION,),
        "Value: Spearman's rank correlation of the per-step mean response length (response_tokens_len, else characters) "
        f"and mean reward over the last {{w2}} steps. Fires at ≥ {LENGTH_CORRELATION:g} when the median length of the "
        f"last {{w}} steps is also ≥ {LENGTH_RISE:g} × the median of the {{w}} before (length rising with reward).",
    ),
    "zero-signal groups rising": Signal(
        "share of groups", (ZERO_SIGNAL_FLOOR,),
        "Per step, the share of groups (group_id) whose completions all got the same reward (no learning signal, as "
        "Step-Groups counts it: over the rewards a group has; a group without any is left out). Value: its median over "
        f"the last {{w}} steps. Fires at ≥ {ZERO_SIGNAL_FLOOR:g} when it is also ≥ {ZERO_SIGNAL_RISE:g} above the median "
        "over the {w} steps before.",
    ),
    "entropy falling": Signal(
        "× first window's entropy", (ENTROPY_FRACTION,),
        "Value: the median of the per-step mean token entropy (avg_entropy) over the last {w} steps ÷ its median over "
        f"the run's first {{w}} steps (once there are {{w2}} steps: the two windows apart). Fires at ≤ {ENTROPY_FRACTION:g}.",
    ),
    "KL accelerating": Signal(
        "× earlier KL", (KL_ACCELERATION,),
        "Per step, the mean {kl}; a window's level: its median over {w} steps. Value: (the level's rise from the {w} "
        "steps before to the last {w} − its rise from the {w} steps before those) ÷ the level of the {w} before (once there "
        f"are {{w3}} steps). Fires at ≥ {KL_ACCELERATION:g} where that level is ≥ {KL_FLOOR:g} and the extra rise is ≥ "
        f"{KL_NOISE:g} × its noise: √(3π/{{w}}) × {NORMAL_MAD_OF_DIFFERENCES:.3g} × the median |change from the step before| "
        "over the {w3} steps. "
        "A steady rise gives 0.",
    ),
    "advantage skew": Signal(
        "skewness", (-ADVANTAGE_SKEW, ADVANTAGE_SKEW),
        "Per step, the sample skewness of the advantages (adjusted Fisher-Pearson, as pandas' skew). Value: its median "
        f"over the last {{w}} steps. Fires at ≥ +{ADVANTAGE_SKEW:g} or ≤ −{ADVANTAGE_SKEW:g}.",
    ),
}


# The run's signals: a row per (signal, loaded step) with its value, whether it fired, and for reward functions
# diverging the functions that rose and fell (the pair that gave the value). kl_column: the KL estimator's column.
def signals_by_step(samples: pd.DataFrame, reward_functions: list[str], kl_column: str = "avg_kl_k3", window: int = DEFAULT_WINDOW) -> pd.DataFrame:
    if window < 2:
        raise ValueError(f"the window must be at least 2 steps, not {window}")
    steps = np.array(sorted(samples["step"].unique()), dtype=np.int64)
    frames = []
    for name, (value, fired, rising, falling) in signal_values(samples, steps, reward_functions, kl_column, window).items():
        frames.append(pd.DataFrame({"signal": name, "step": steps, "value": value, "fired": fired & np.isfinite(value), "rising": rising, "falling": falling}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=SIGNAL_COLUMNS)


# Each signal the run's columns allow: its values, fired flags, and the rising and falling functions (None elsewhere).
def signal_values(samples: pd.DataFrame, steps: np.ndarray, reward_functions: list[str], kl_column: str, window: int) -> dict:
    mean = lambda column: step_means(samples, steps, column)  # noqa: E731
    present = lambda column: column in samples and np.isfinite(samples[column].to_numpy(dtype=float)).any()  # noqa: E731
    no_pair = np.full(len(steps), None, dtype=object)
    result = {}
    functions = [column for column in reward_functions if present(column)]
    if len(functions) >= 2:
        value, rising, falling = divergence(samples, steps, functions, window)
        result["reward functions diverging"] = (value, value >= DIVERGENCE_SD, rising, falling)
    length_column = response_length_column(samples)
    if length_column and present("reward"):
        length, reward = mean(length_column), mean("reward")
        correlation = windowed_spearman(length, reward, 2 * window)
        level = window_median(length, window)
        earlier = before(level, window)
        rise = level / np.where(earlier > 0, earlier, np.nan)
        result["length drifting with reward"] = (correlation, (correlation >= LENGTH_CORRELATION) & (rise >= LENGTH_RISE), no_pair, no_pair)
    if "group_id" in samples and samples["group_id"].notna().any() and present("reward"):
        share = group_signal_by_step(samples)["zero-signal groups"].reindex(steps).to_numpy(dtype=float)
        level = window_median(share, window)
        rise = level - before(level, window)  # shares are fractions of groups: a rise of exactly d counts, rounding aside
        result["zero-signal groups rising"] = (level, (level >= ZERO_SIGNAL_FLOOR) & (rise >= ZERO_SIGNAL_RISE - 1e-12), no_pair, no_pair)
    if present("avg_entropy"):
        entropy = mean("avg_entropy")
        level = window_median(entropy, window)
        first = level[window - 1] if len(steps) >= window else np.nan
        ratio = level / first if first > 0 else np.full(len(steps), np.nan)
        ratio[: 2 * window - 1] = np.nan  # the last window after the first
        result["entropy falling"] = (ratio, ratio <= ENTROPY_FRACTION, no_pair, no_pair)
    if present(kl_column):
        kl = mean(kl_column)
        level = window_median(kl, window)
        earlier = before(level, window)
        acceleration = (level - earlier) - (earlier - before(earlier, window))
        value = acceleration / np.where(earlier >= KL_FLOOR, earlier, np.nan)
        # the noise of three window medians' second difference, from the step-to-step changes (a trend moves them little)
        noise = np.sqrt(3 * np.pi / window) * NORMAL_MAD_OF_DIFFERENCES * window_median(np.abs(np.diff(kl, prepend=np.nan)), 3 * window)
        result["KL accelerating"] = (value, (value >= KL_ACCELERATION) & (acceleration >= KL_NOISE * noise), no_pair, no_pair)
    if present("advantage"):
        skew = finite_rows(samples, "advantage").groupby("step")["advantage"].skew().reindex(steps).to_numpy(dtype=float)
        level = window_median(skew, window)
        result["advantage skew"] = (level, np.abs(level) >= ADVANTAGE_SKEW, no_pair, no_pair)
    return result


# Reward functions diverging: per function, the shift of its per-step mean between the window before and the last, in
# standard deviations of its samples over both; the value is the largest min(rise of one, fall of another).
def divergence(samples: pd.DataFrame, steps: np.ndarray, functions: list[str], window: int) -> tuple:
    shifts = {}
    for column in functions:
        level = window_median(step_means(samples, steps, column), window)
        shifts[column] = (level - before(level, window)) / windowed_std(samples, steps, column, 2 * window)
    value = np.full(len(steps), np.nan)
    rising, falling = np.full(len(steps), None, dtype=object), np.full(len(steps), None, dtype=object)
    for up, down in itertools.permutations(functions, 2):
        pair = np.fmin(shifts[up], -shifts[down])
        pair = np.where(np.isfinite(shifts[up]) & np.isfinite(shifts[down]), pair, np.nan)
        better = pair > np.where(np.isnan(value), -np.inf, value)
        value = np.where(better, pair, value)
        rising[better], falling[better] = up, down
    return value, rising, falling


# A column's rows with a finite value (no NaN, no infinity).
def finite_rows(samples: pd.DataFrame, column: str) -> pd.DataFrame:
    values = samples[column].to_numpy(dtype=float)
    return samples[np.isfinite(values)]


def step_means(samples: pd.DataFrame, steps: np.ndarray, column: str) -> np.ndarray:
    return finite_rows(samples, column).groupby("step")[column].mean().reindex(steps).to_numpy(dtype=float)


# The standard deviation of a column's samples over the `width` steps ending at each step (NaN where it is 0, or
# where fewer than `width` steps have come).
def windowed_std(samples: pd.DataFrame, steps: np.ndarray, column: str, width: int) -> np.ndarray:
    rows = finite_rows(samples, column).sort_values("step", kind="stable")
    values, bounds = rows[column].to_numpy(dtype=float), np.searchsorted(rows["step"].to_numpy(), steps, side="right")
    result = np.full(len(steps), np.nan)
    for position in range(width - 1, len(steps)):
        start = bounds[position - width] if position >= width else 0
        chosen = values[start:bounds[position]]
        spread = chosen.std(ddof=1) if len(chosen) > 1 else 0.0
        result[position] = spread if spread > 0 else np.nan
    return result


# Each step's trailing window of `width` per-step values (a row each, NaN rows for the first width - 1 steps), and
# whether enough of them (more than half) are numbers.
def trailing_windows(values: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    windows = np.full((len(values), width), np.nan)
    if len(values) >= width:
        windows[width - 1:] = sliding_window_view(values, width)
    return windows, np.isfinite(windows).sum(axis=1) > width // 2


def window_median(values: np.ndarray, width: int) -> np.ndarray:
    windows, enough = trailing_windows(values, width)
    result = np.full(len(values), np.nan)
    result[enough] = np.nanmedian(windows[enough], axis=1)
    return result


# Spearman's rank correlation of two series over the trailing window of `width` steps where both have a number (more
# than half of them): the correlation of their ranks (ties averaged); NaN where either is constant.
def windowed_spearman(first: np.ndarray, second: np.ndarray, width: int) -> np.ndarray:
    first_windows, _ = trailing_windows(first, width)
    second_windows, _ = trailing_windows(second, width)
    both = np.isfinite(first_windows) & np.isfinite(second_windows)
    enough = both.sum(axis=1) > width // 2
    result = np.full(len(first), np.nan)
    if not enough.any():
        return result
    ranks = [pd.DataFrame(np.where(both, windows, np.nan)[enough]).rank(axis=1).to_numpy() for windows in (first_windows, second_windows)]
    deviations = [rank - np.nanmean(rank, axis=1, keepdims=True) for rank in ranks]
    covariance = np.nansum(deviations[0] * deviations[1], axis=1)
    spreads = np.sqrt(np.nansum(deviations[0] ** 2, axis=1) * np.nansum(deviations[1] ** 2, axis=1))
    result[enough] = np.where(spreads > 0, covariance / np.where(spreads > 0, spreads, 1), np.nan)
    return result


# The value a window earlier: at each step, the one `width` steps before it (NaN for the first ones).
def before(values: np.ndarray, width: int) -> np.ndarray:
    return np.concatenate([np.full(min(width, len(values)), np.nan), values[:-width]]) if len(values) > width else np.full(len(values), np.nan)


# The length the signals use: tokens where the run has them, else characters.
def response_length_column(samples: pd.DataFrame) -> str | None:
    for column in ("response_tokens_len", "response_len"):
        if column in samples and np.isfinite(samples[column].to_numpy(dtype=float)).any():
            return column
    return None


# A firing's example samples: at each step where the signal fired, the step's samples that show its pattern, highest
# reward first (EXAMPLES_PER_STEP each): step, sample (its index in the step's batch, as the page numbers it), reward,
# the signal's value there, and the numbers of the pattern. The patterns: diverging, the rising function above its step
# mean and the falling one below; length, the step's longest quarter; zero-signal, members of its zero-signal groups;
# entropy, its lowest-entropy quarter; KL, its highest-KL quarter; skew, the advantages beyond one standard deviation
# from the step's mean on the skewed side. Arrays sliced per step, not a table per step: a run of 20,000 steps whose
# signal fired at 4,926 of them took 16 s.
def firing_examples(samples: pd.DataFrame, table: pd.DataFrame, signal: str, kl_column: str = "avg_kl_k3", per_step: int = EXAMPLES_PER_STEP) -> pd.DataFrame:
    fired = table[(table["signal"] == signal) & table["fired"]]
    if fired.empty:
        return pd.DataFrame(columns=["step", "sample", "reward", "value"])
    rows = samples[samples["step"].isin(fired["step"])]
    firing = pd.Index(fired["step"]).get_indexer(rows["step"])  # each row's firing step, by its place in the table
    order = np.argsort(firing, kind="stable")  # by firing, each step's samples in batch order
    rows, firing = rows.iloc[order], firing[order]
    bounds = np.searchsorted(firing, np.arange(len(fired) + 1))
    shown, columns = pattern_mask(rows, signal, fired, bounds, kl_column, response_length_column(samples))
    rewards = rows["reward"].to_numpy(dtype=float)
    missing = np.isnan(rewards)
    ranked = np.lexsort((rows["sample"].to_numpy(), -np.where(missing, 0.0, rewards), missing, firing))  # the highest reward first
    ranked = ranked[shown[ranked]]
    rank = np.arange(len(ranked)) - np.searchsorted(firing[ranked], firing[ranked])  # its place among its step's shown
    kept = ranked[rank < per_step]
    values = fired["value"].to_numpy()[firing[kept]]
    examples = pd.DataFrame({"step": rows["step"].to_numpy()[kept], "sample": rows["sample"].to_numpy()[kept], "reward": rewards[kept], "value": values})
    for column in dict.fromkeys(itertools.chain.from_iterable(columns)):  # in the order the firings name them
        own = np.array([column in names for names in columns])[firing[kept]]
        examples[column] = rows[column].to_numpy()[kept] if own.all() else pd.Series(rows[column].to_numpy()[kept]).where(own).to_numpy()
    return examples


# Which rows (sorted by firing, `bounds` the firings' row ranges) show their step's pattern, and the columns that show
# it for each firing.
def pattern_mask(rows: pd.DataFrame, signal: str, fired: pd.DataFrame, bounds: np.ndarray, kl_column: str, length_column: str | None) -> tuple[np.ndarray, list[list[str]]]:
    steps = range(len(fired))
    shown = np.zeros(len(rows), dtype=bool)

    def quarter(column: str, top: bool) -> tuple[np.ndarray, list[list[str]]]:
        values = rows[column].to_numpy(dtype=float)
        for k in steps:
            part = values[bounds[k] : bounds[k + 1]]
            finite = part[np.isfinite(part)]
            if len(finite):
                cut = np.quantile(finite, 0.75 if top else 0.25)
                shown[bounds[k] : bounds[k + 1]] = part >= cut if top else part <= cut
        return shown, [[column]] * len(fired)

    if signal == "reward functions diverging":
        columns = [[rising, falling] for rising, falling in zip(fired["rising"], fired["falling"])]
        for k, (rising, falling) in zip(steps, columns):
            up, down = (rows[name].to_numpy(dtype=float)[bounds[k] : bounds[k + 1]] for name in (rising, falling))
            shown[bounds[k] : bounds[k + 1]] = (up > step_mean(up)) & (down < step_mean(down))
        return shown, columns
    if signal == "length drifting with reward":
        return quarter(length_column, top=True)
    if signal == "zero-signal groups rising":
        grouped = rows["group_id"].notna().to_numpy()
        shown[grouped] = zero_signal_members(rows[grouped])
        return shown, [["group_id"]] * len(fired)
    if signal == "entropy falling":
        return quarter("avg_entropy", top=False)
    if signal == "KL accelerating":
        return quarter(kl_column, top=True)
    advantages = rows["advantage"].to_numpy(dtype=float)
    for k, value in zip(steps, fired["value"]):
        part = advantages[bounds[k] : bounds[k + 1]]
        finite = part[np.isfinite(part)]
        if len(finite) >= 2:
            centre, spread = finite.mean(), finite.std(ddof=1)
            shown[bounds[k] : bounds[k + 1]] = part >= centre + spread if value > 0 else part <= centre - spread
    return shown, [["advantage"]] * len(fired)


# A step's mean of a column as pandas takes it: its values but NaN (±inf kept), NaN where there are none.
def step_mean(values: np.ndarray) -> float:
    numbered = ~np.isnan(values)
    with np.errstate(invalid="ignore"):  # +inf and -inf: NaN
        return np.where(numbered, values, 0.0).sum() / numbered.sum() if numbered.any() else np.nan
