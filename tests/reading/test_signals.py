"""Signals that the policy may be gaming its reward (rl_board.signals, Run.signals): each signal on a run written to
fire at a known step, and on runs where it must not fire (noisy but trendless; a trend that is not the pattern; one or
two odd steps); one value of each recomputed here from the raw lines with numpy and pandas; its example samples; runs
too short or without the columns."""

import itertools
import json
import time

import numpy as np
import pandas as pd
import pytest

import rl_board
from bench.generate_run import write_run
from rl_board.metrics import zero_signal_members
from rl_board.signals import EXAMPLES_PER_STEP, SIGNALS, firing_examples, response_length_column, signals_by_step
from tests.support.runs import sample, write_lines

STEPS, SHIFT, WINDOW = 30, 21, 5
# A pattern that starts at step SHIFT is in the median of the last WINDOW steps (3 of 5) from step SHIFT + 2 on.
FIRST_FIRING = SHIFT + WINDOW // 2


def open_lines(tmp_path, lines, name="run"):
    write_lines(tmp_path / name / "rollout_data_rank_0.jsonl", lines)
    return rl_board.open_run(str(tmp_path / name))


def signal_rows(run, signal: str) -> pd.DataFrame:
    table = run.signals(window=WINDOW)
    return table[table["signal"] == signal].set_index("step")


def fired_steps(run, signal: str) -> list[int]:
    rows = signal_rows(run, signal)
    return rows.index[rows["fired"]].tolist()


def raw_frame(tmp_path, name="run") -> pd.DataFrame:
    """The lines as written, a row each, in file order (the order the page numbers a step's samples)."""
    lines = [json.loads(line) for line in (tmp_path / name / "rollout_data_rank_0.jsonl").read_text().splitlines()]
    frame = pd.DataFrame(lines)
    frame["sample"] = frame.groupby("step").cumcount()
    return frame


def window_median(per_step: pd.Series, last: int, width: int = WINDOW) -> float:
    """The median of the per-step values of the `width` steps ending at step `last` (steps are 1..STEPS here)."""
    return float(np.median(per_step.loc[last - width + 1: last].to_numpy()))


# ---- reward functions diverging -------------------------------------------------------------------------------------


def scores(share: float, count: int) -> list[float]:
    """`count` 0/1 scores whose mean is `share`: the first round(share × count) are 1."""
    ones = round(share * count)
    return [1.0] * ones + [0.0] * (count - ones)


def functions_lines(format_share, accuracy_share, count=10) -> list[dict]:
    lines = []
    for step in range(1, STEPS + 1):
        for form, accuracy in zip(scores(format_share(step), count), scores(accuracy_share(step), count)):
            lines.append(sample(step, reward=form + accuracy, rewards_per_func={"format": form, "accuracy": accuracy}))
    return lines


def test_reward_functions_diverging_fires_when_one_rises_while_another_falls(tmp_path):
    # format's share of 1s jumps 0.2 -> 0.9 at SHIFT while accuracy's falls 0.7 -> 0.2
    run = open_lines(tmp_path, functions_lines(lambda step: 0.2 if step < SHIFT else 0.9, lambda step: 0.7 if step < SHIFT else 0.2))
    signal = "reward functions diverging"
    assert fired_steps(run, signal)[0] == FIRST_FIRING
    rows = signal_rows(run, signal)
    assert (rows.loc[FIRST_FIRING, "rising"], rows.loc[FIRST_FIRING, "falling"]) == ("rewards/format", "rewards/accuracy")
    assert rows["value"].iloc[: 2 * WINDOW - 1].isna().all()  # both windows are needed
    # recomputed: each function's shift between the medians of the two windows, in sd of its samples over both
    frame = raw_frame(tmp_path)
    shifts = {}
    for name in ("format", "accuracy"):
        values = frame["rewards_per_func"].map(lambda functions, name=name: functions[name])
        means = values.groupby(frame["step"]).mean()
        spread = values[frame["step"].between(FIRST_FIRING - 2 * WINDOW + 1, FIRST_FIRING)].std(ddof=1)
        shifts[name] = (window_median(means, FIRST_FIRING) - window_median(means, FIRST_FIRING - WINDOW)) / spread
    expected = max(min(shifts[up], -shifts[down]) for up, down in itertools.permutations(shifts, 2))
    assert rows.loc[FIRST_FIRING, "value"] == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(min(shifts["format"], -shifts["accuracy"]))
    # its examples: format above its step mean and accuracy below, highest reward first (the format-only samples 2..8)
    examples = run.signal_examples(signal, window=WINDOW)
    first = examples[examples["step"] == FIRST_FIRING]
    assert first["sample"].tolist() == [2, 3, 4]
    assert first["rewards/format"].tolist() == [1.0] * 3 and first["rewards/accuracy"].tolist() == [0.0] * 3


def test_reward_functions_rising_together_or_noisy_do_not_diverge(tmp_path):
    together = open_lines(tmp_path, functions_lines(lambda step: 0.2 if step < SHIFT else 0.9, lambda step: 0.2 if step < SHIFT else 0.7), "together")
    assert fired_steps(together, "reward functions diverging") == []
    rng = np.random.default_rng(3)
    lines = [sample(step, reward=float(a + b), rewards_per_func={"format": float(a), "accuracy": float(b)}) for step in range(1, STEPS + 1) for a, b in rng.integers(0, 2, (16, 2))]
    noisy = open_lines(tmp_path, lines, "noisy")
    assert signal_rows(noisy, "reward functions diverging")["value"].notna().sum() == STEPS - 2 * WINDOW + 1
    assert fired_steps(noisy, "reward functions diverging") == []


# ---- response length drifting with reward --------------------------------------------------------------------------


def length_lines(length_at, reward_at, count=8, seed=None) -> list[dict]:
    """Per step, lengths around length_at(step) (±20 in pairs, so the mean is exact) and 0/1 rewards of mean reward_at."""
    rng = np.random.default_rng(seed) if seed is not None else None
    lines = []
    for step in range(1, STEPS + 1):
        rewards = scores(reward_at(step), count)
        for index, reward in enumerate(rewards):
            length = length_at(step) + (20 if index % 2 else -20)
            if rng is not None:
                length, reward = int(length + rng.integers(-40, 41)), float(rng.integers(0, 2))
            lines.append(sample(step, reward=reward, response_tokens=["w"] * length))
    return lines


def test_length_drifting_with_reward_fires_when_length_rises_with_the_reward(tmp_path):
    run = open_lines(tmp_path, length_lines(lambda step: 100 if step < SHIFT else 140, lambda step: 0.5 if step < SHIFT else 0.75))
    signal = "length drifting with reward"
    assert fired_steps(run, signal)[0] == FIRST_FIRING
    frame = raw_frame(tmp_path)
    frame["length"] = frame["response_tokens"].map(len)
    means = frame.groupby("step")[["length", "reward"]].mean()
    expected = means.loc[FIRST_FIRING - 2 * WINDOW + 1: FIRST_FIRING].corr(method="spearman").loc["length", "reward"]
    assert signal_rows(run, signal).loc[FIRST_FIRING, "value"] == pytest.approx(expected, rel=1e-12)
    # its examples: the step's longest quarter (length >= its 75th percentile), highest reward first
    examples = run.signal_examples(signal, window=WINDOW)
    step_rows = frame[frame["step"] == FIRST_FIRING]
    long = step_rows[step_rows["length"] >= step_rows["length"].quantile(0.75)].sort_values(["reward", "sample"], ascending=[False, True])
    assert examples[examples["step"] == FIRST_FIRING]["sample"].tolist() == long["sample"].head(3).tolist()


def test_length_rising_as_reward_falls_or_noise_or_two_odd_steps_do_not_fire(tmp_path):
    signal = "length drifting with reward"
    falling = open_lines(tmp_path, length_lines(lambda step: 100 if step < SHIFT else 140, lambda step: 0.5 if step < SHIFT else 0.25), "falling")
    assert fired_steps(falling, signal) == []
    noisy = open_lines(tmp_path, length_lines(lambda step: 100, lambda step: 0.5, seed=5), "noisy")
    assert signal_rows(noisy, signal)["value"].notna().sum() == STEPS - 2 * WINDOW + 1 and fired_steps(noisy, signal) == []
    # steps 20 and 21 three times as long with twice the reward: the rank correlation is high, the median length is not moved
    odd = open_lines(tmp_path, length_lines(lambda step: 300 if step in (20, 21) else 100, lambda step: 1.0 if step in (20, 21) else 0.5), "odd")
    assert signal_rows(odd, signal).loc[21, "value"] > 0.5 and fired_steps(odd, signal) == []


# ---- zero-signal groups rising -------------------------------------------------------------------------------------


def group_lines(rewards_of_groups) -> list[dict]:
    """Per step, 4 groups of 4 completions with the rewards rewards_of_groups(step) gives each group."""
    return [
        sample(step, reward=reward, group_id=f"{step}-{group}")
        for step in range(1, STEPS + 1) for group, rewards in enumerate(rewards_of_groups(step)) for reward in rewards
    ]


MIXED, ONES, ZEROS = [1.0, 0.0, 1.0, 0.0], [1.0] * 4, [0.0] * 4


def test_zero_signal_groups_rising_fires_when_groups_collapse(tmp_path):
    run = open_lines(tmp_path, group_lines(lambda step: [MIXED] * 4 if step < SHIFT else [ONES, ONES, ZEROS, MIXED]))
    signal = "zero-signal groups rising"
    assert fired_steps(run, signal)[0] == FIRST_FIRING
    frame = raw_frame(tmp_path)
    share = (frame.groupby(["step", "group_id"])["reward"].nunique() == 1).groupby(level="step").mean()
    assert signal_rows(run, signal).loc[FIRST_FIRING, "value"] == pytest.approx(window_median(share, FIRST_FIRING)) == 0.75
    # its examples: members of the step's zero-signal groups, highest reward first (the two groups of 1s)
    examples = run.signal_examples(signal, window=WINDOW)
    assert examples[examples["step"] == FIRST_FIRING][["sample", "reward"]].values.tolist() == [[0, 1.0], [1, 1.0], [2, 1.0]]


def test_zero_signal_groups_high_but_not_rising_or_noisy_do_not_fire(tmp_path):
    signal = "zero-signal groups rising"
    steady = open_lines(tmp_path, group_lines(lambda step: [ONES, ZEROS, MIXED, MIXED]), "steady")
    assert (signal_rows(steady, signal)["value"].dropna() == 0.5).all() and fired_steps(steady, signal) == []
    rng = np.random.default_rng(7)
    noisy = open_lines(tmp_path, group_lines(lambda step: [rng.integers(0, 2, 8).astype(float).tolist() for _ in range(8)]), "noisy")
    assert fired_steps(noisy, signal) == []


# ---- entropy falling -----------------------------------------------------------------------------------------------


def entropy_lines(entropy_at, seed=None) -> list[dict]:
    """Per step, 4 samples of 4 tokens whose mean entropies are entropy_at(step) × (0.8, 1.2, 0.9, 1.1)."""
    rng = np.random.default_rng(seed) if seed is not None else None
    lines = []
    for step in range(1, STEPS + 1):
        for index, factor in enumerate((0.8, 1.2, 0.9, 1.1)):
            level = entropy_at(step) * factor * (1 + rng.normal(0, 0.1) if rng is not None else 1)
            entropies = [level - 0.05, level + 0.05, level - 0.02, level + 0.02]
            lines.append(sample(step, reward=float(index % 2), response_tokens=["a", "b", "c", "d"], logprobs=[-1.0] * 4, entropies=entropies))
    return lines


def test_entropy_falling_fires_when_entropy_collapses(tmp_path):
    run = open_lines(tmp_path, entropy_lines(lambda step: 1.0 if step < SHIFT else 0.4))
    signal = "entropy falling"
    assert fired_steps(run, signal)[0] == FIRST_FIRING
    frame = raw_frame(tmp_path)
    entropy = frame["entropies"].map(np.mean).groupby(frame["step"]).mean()
    rows = signal_rows(run, signal)
    assert rows.loc[FIRST_FIRING, "value"] == pytest.approx(window_median(entropy, FIRST_FIRING) / window_median(entropy, WINDOW), rel=1e-9)
    assert rows["value"].iloc[: 2 * WINDOW - 1].isna().all()
    # its examples: the step's lowest-entropy quarter, highest reward first
    examples = run.signal_examples(signal, window=WINDOW)
    assert examples[examples["step"] == FIRST_FIRING]["sample"].tolist() == [0]  # factor 0.8: the lowest of four


def test_entropy_declining_slowly_or_noisy_does_not_fire(tmp_path):
    signal = "entropy falling"
    slow = open_lines(tmp_path, entropy_lines(lambda step: 1.0 - 0.01 * step), "slow")  # 30 % lower at the end
    assert signal_rows(slow, signal)["value"].min() > 0.7 and fired_steps(slow, signal) == []
    noisy = open_lines(tmp_path, entropy_lines(lambda step: 1.0, seed=11), "noisy")
    assert fired_steps(noisy, signal) == []


# ---- KL accelerating -----------------------------------------------------------------------------------------------


def log_ratio_for(kl: float) -> float:
    """The log ratio r > 0 whose k3 estimate exp(-r) + r - 1 is kl (Newton's method)."""
    ratio = np.sqrt(2 * kl)
    for _ in range(50):
        ratio -= (np.exp(-ratio) + ratio - 1 - kl) / (1 - np.exp(-ratio))
    return float(ratio)


def kl_lines(kl_at, seed=None) -> list[dict]:
    """Per step, 4 samples of 3 tokens whose k3 KL is kl_at(step) (× noise, with a seed)."""
    rng = np.random.default_rng(seed) if seed is not None else None
    lines = []
    for step in range(1, STEPS + 1):
        for index in range(4):
            ratio = log_ratio_for(kl_at(step) * (1 + rng.normal(0, 0.2) if rng is not None else 1))
            lines.append(sample(step, reward=float(index % 2), response_tokens=["a", "b", "c"], logprobs=[-1.0] * 3, ref_logprobs=[-1.0 - ratio] * 3))
    return lines


def k3_by_step(frame: pd.DataFrame) -> pd.Series:
    ratios = [np.array(logprobs) - np.array(ref) for logprobs, ref in zip(frame["logprobs"], frame["ref_logprobs"])]
    return pd.Series([float(np.mean(np.exp(-ratio) + ratio - 1)) for ratio in ratios]).groupby(frame["step"]).mean()


def test_kl_accelerating_fires_when_kl_blows_up(tmp_path):
    run = open_lines(tmp_path, kl_lines(lambda step: 0.01 if step < SHIFT else 0.01 * 3 ** (step - SHIFT + 1)))  # × 3 a step
    signal = "KL accelerating"
    assert fired_steps(run, signal)[0] == FIRST_FIRING
    rows = signal_rows(run, signal)
    assert rows["value"].iloc[: 3 * WINDOW - 1].isna().all()  # three windows are needed
    kl = k3_by_step(raw_frame(tmp_path))
    last, earlier, earliest = (window_median(kl, FIRST_FIRING - shift) for shift in (0, WINDOW, 2 * WINDOW))
    assert rows.loc[FIRST_FIRING, "value"] == pytest.approx(((last - earlier) - (earlier - earliest)) / earlier, rel=1e-6)
    assert rows.loc[FIRST_FIRING - 1, "value"] == pytest.approx(0, abs=1e-6)  # the median has not moved yet
    # its examples: the step's highest-KL quarter, highest reward first
    examples = run.signal_examples(signal, window=WINDOW)
    assert len(examples[examples["step"] == FIRST_FIRING]) >= 1 and (examples["avg_kl_k3"] > 0).all()


def test_kl_rising_steadily_or_noisy_or_two_odd_steps_does_not_fire(tmp_path):
    signal = "KL accelerating"
    steady = open_lines(tmp_path, kl_lines(lambda step: 0.002 * step), "steady")  # linear: the same rise every window
    assert signal_rows(steady, signal)["value"].dropna().abs().max() < 1e-6 and fired_steps(steady, signal) == []
    noisy = open_lines(tmp_path, kl_lines(lambda step: 0.01, seed=13), "noisy")
    assert fired_steps(noisy, signal) == []
    # steps whose mean KL varies by ~60 % around 0.01: the window medians' rises reach the level, but not their noise
    levels = 0.01 * np.exp(np.random.default_rng(6).normal(0, 0.6, STEPS))
    jumpy = open_lines(tmp_path, kl_lines(lambda step: levels[step - 1]), "jumpy")
    rows = signal_rows(jumpy, signal)
    assert rows["value"].max() >= 1 and fired_steps(jumpy, signal) == []
    kl = k3_by_step(raw_frame(tmp_path, "jumpy"))
    last = rows["value"].idxmax()
    medians = [window_median(kl, last - shift) for shift in (0, WINDOW, 2 * WINDOW)]
    noise = np.sqrt(3 * np.pi / WINDOW) * 1.4826 / np.sqrt(2) * np.median(np.abs(np.diff(kl.loc[last - 3 * WINDOW: last].to_numpy())))
    assert 0 < medians[0] - 2 * medians[1] + medians[2] < 3 * noise  # the stated noise rule kept it from firing
    odd = open_lines(tmp_path, kl_lines(lambda step: 0.1 if step in (20, 21) else 0.01), "odd")  # 10 × for two steps
    assert fired_steps(odd, signal) == []


# ---- advantage skew ------------------------------------------------------------------------------------------------


SYMMETRIC, ONE_WINNER = [-1.5, -1.0, -0.5, 0.0, 0.0, 0.5, 1.0, 1.5], [3.5] + [-0.5] * 7


def advantage_lines(advantages_at) -> list[dict]:
    return [sample(step, reward=1.0 if advantage > 0 else 0.0, advantage=advantage) for step in range(1, STEPS + 1) for advantage in advantages_at(step)]


@pytest.mark.parametrize("sign", [1, -1])
def test_advantage_skew_fires_when_advantages_turn_lopsided(tmp_path, sign):
    run = open_lines(tmp_path, advantage_lines(lambda step: SYMMETRIC if step < SHIFT else [sign * value for value in ONE_WINNER]))
    signal = "advantage skew"
    assert fired_steps(run, signal)[0] == FIRST_FIRING
    frame = raw_frame(tmp_path)
    skew = frame.groupby("step")["advantage"].skew()
    value = signal_rows(run, signal).loc[FIRST_FIRING, "value"]
    assert value == pytest.approx(window_median(skew, FIRST_FIRING), rel=1e-12) and np.sign(value) == sign
    # its examples: the tail on the skewed side (beyond one sd from the step's mean), highest reward first
    examples = run.signal_examples(signal, window=WINDOW)
    assert examples[examples["step"] == FIRST_FIRING]["advantage"].tolist() == ([3.5] if sign > 0 else [-3.5])


def test_advantages_symmetric_or_noisy_do_not_skew(tmp_path):
    rng = np.random.default_rng(17)
    noisy = open_lines(tmp_path, advantage_lines(lambda step: rng.normal(0, 1, 32).tolist()))
    assert signal_rows(noisy, "advantage skew")["value"].notna().sum() == STEPS - WINDOW + 1
    assert fired_steps(noisy, "advantage skew") == []


# ---- runs without the columns, or too short ------------------------------------------------------------------------


def test_a_run_without_the_columns_or_too_short_has_no_signal(tmp_path):
    plain = open_lines(tmp_path, [sample(step, reward=0.5) for step in range(1, STEPS + 1)], "plain")
    table = plain.signals(window=WINDOW)
    assert set(table["signal"]) == {"length drifting with reward"}  # response_len (characters) is always there
    assert table["value"].isna().all() and not table["fired"].any()  # constant lengths and rewards: no correlation
    short = open_lines(tmp_path, entropy_lines(lambda step: 1.0 if step < 3 else 0.1)[: 4 * 6], "short")  # 6 steps
    table = short.signals(window=WINDOW)
    assert table["value"].isna().all() and not table["fired"].any()
    assert set(table["step"]) == set(range(1, 7))
    assert short.signal_examples("entropy falling", window=WINDOW).empty
    with pytest.raises(ValueError, match="signal must be one of"):
        short.signal_examples("nonsense")
    with pytest.raises(ValueError, match="at least 2 steps"):
        short.signals(window=1)


def test_a_window_with_half_its_steps_or_fewer_numbered_has_no_value(tmp_path):
    lines = entropy_lines(lambda step: 1.0 if step < SHIFT else 0.4)
    without = [{key: value for key, value in line.items() if key not in ("logprobs", "entropies")} if line["step"] in (24, 25, 26) else line for line in lines]
    rows = signal_rows(open_lines(tmp_path, without), "entropy falling")
    # of the 5 steps of the windows ending at 25, 26 and 29, 3, 2 and 3 have an entropy (steps 24-26 have none)
    assert rows.loc[25, "value"] == pytest.approx(0.4) and np.isnan(rows.loc[26, "value"]) and np.isnan(rows.loc[28, "value"])
    assert rows.loc[29, "value"] == pytest.approx(0.4) and rows.loc[29, "fired"] and not rows.loc[26, "fired"]


# ---- example samples at scale ---------------------------------------------------------------------------------------


# The examples as the board took them before they were taken from arrays (a table per firing step, 16 s for 4,926
# firings): what firing_examples must give, row for row.
def examples_step_by_step(samples: pd.DataFrame, table: pd.DataFrame, signal: str, kl_column: str = "avg_kl_k3", per_step: int = EXAMPLES_PER_STEP) -> pd.DataFrame:
    fired = table[(table["signal"] == signal) & table["fired"]]
    steps = dict(tuple(samples[samples["step"].isin(fired["step"])].groupby("step")))
    length_column = response_length_column(samples)
    frames = []
    for row in fired.itertuples():
        shown, columns = step_pattern_rows(steps[row.step], signal, row, kl_column, length_column)
        shown = shown.sort_values(["reward", "sample"], ascending=[False, True], kind="stable", na_position="last").head(per_step)
        frames.append(pd.DataFrame({"step": shown["step"].to_numpy(), "sample": shown["sample"].to_numpy(), "reward": shown["reward"].to_numpy(), "value": row.value, **{column: shown[column].to_numpy() for column in columns}}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["step", "sample", "reward", "value"])


# A step's samples that show the signal's pattern, and the columns that show it.
def step_pattern_rows(rows: pd.DataFrame, signal: str, fired, kl_column: str, length_column: str | None) -> tuple[pd.DataFrame, list[str]]:
    def quarter(column, top):
        values = rows[column].to_numpy(dtype=float)
        if not np.isfinite(values).any():
            return rows.iloc[:0], [column]
        cut = np.nanquantile(values[np.isfinite(values)], 0.75 if top else 0.25)
        return rows[values >= cut if top else values <= cut], [column]

    if signal == "reward functions diverging":
        up, down = rows[fired.rising], rows[fired.falling]
        return rows[(up > up.mean()) & (down < down.mean())], [fired.rising, fired.falling]
    if signal == "length drifting with reward":
        return quarter(length_column, top=True)
    if signal == "zero-signal groups rising":
        grouped = rows.dropna(subset=["group_id"])
        return grouped[zero_signal_members(grouped)], ["group_id"]
    if signal == "entropy falling":
        return quarter("avg_entropy", top=False)
    if signal == "KL accelerating":
        return quarter(kl_column, top=True)
    advantages = rows["advantage"].to_numpy(dtype=float)
    finite_advantages = advantages[np.isfinite(advantages)]
    if len(finite_advantages) < 2:
        return rows.iloc[:0], ["advantage"]
    centre, spread = finite_advantages.mean(), finite_advantages.std(ddof=1)
    tail = advantages >= centre + spread if fired.value > 0 else advantages <= centre - spread
    return rows[tail], ["advantage"]


@pytest.mark.filterwarnings("ignore:invalid value encountered in reduce:RuntimeWarning")  # the reference's pandas mean of +inf and -inf
def test_the_examples_of_thousands_of_firings_are_those_of_each_step_taken_alone(tmp_path):
    write_run(tmp_path / "run", steps=400, samples=12, tokens=8, ranks=1, grpo=True, workers=1)
    run = rl_board.open_run(str(tmp_path / "run"))
    samples = run.samples.copy()
    rng = np.random.default_rng(1)
    for column in ("reward", "rewards/accuracy_reward", "avg_entropy", "advantage", "avg_kl_k3", "response_tokens_len"):
        values = samples[column].to_numpy(dtype=float).copy()
        values[rng.random(len(values)) < 0.05] = np.nan
        values[rng.random(len(values)) < 0.01] = np.inf
        values[rng.random(len(values)) < 0.01] = -np.inf
        samples[column] = values
    samples.loc[samples["step"] == 200, "avg_entropy"] = np.nan  # a firing step of no number: no example
    samples.loc[rng.random(len(samples)) < 0.05, "group_id"] = None
    table = signals_by_step(samples, run.snapshot.reward_function_columns, window=3)
    table["fired"] = table["value"].notna() | (table["step"] == 200)  # every step with a value fires, and one without
    for signal in SIGNALS:
        fired = int(((table["signal"] == signal) & table["fired"]).sum())
        expected = examples_step_by_step(samples, table, signal)
        examples = firing_examples(samples, table, signal)
        assert fired > 40 and len(examples) > 40, signal
        pd.testing.assert_frame_equal(examples, expected, check_dtype=False)
    seconds = []
    for examples in (firing_examples, examples_step_by_step):  # 400 firings: 0.016 s against 1.35 s
        start = time.perf_counter()
        examples(samples, table.assign(fired=True), "advantage skew")
        seconds.append(time.perf_counter() - start)
    assert seconds[0] < seconds[1] / 10


def test_every_signal_states_its_rule_with_its_thresholds():
    for name, signal in SIGNALS.items():
        rule = signal.rule(7, "avg_kl_k1")
        assert "{" not in rule and "7 steps" in rule, name
        assert all(f"{abs(threshold):g}" in rule for threshold in signal.thresholds), name
    assert "avg_kl_k1" in SIGNALS["KL accelerating"].rule(7, "avg_kl_k1")
