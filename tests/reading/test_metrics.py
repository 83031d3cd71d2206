"""Every derived number the board shows, against an independent recomputation in plain Python."""

import html
import inspect
import json
import math
import statistics
import time

import numpy as np
import pandas as pd
import pytest

import rl_logging_board as board
from rl_board.figures import (
    HEAT_MAP_COLUMNS,
    LABELLED_TOKENS,
    LINE_WIDENING,
    LINE_WIDTH,
    SAMPLE_BARS,
    SAMPLE_BINS,
    STEP_BINS,
    STEP_EXTENT,
    STEPS_DRAWN_NOTE,
    VALUE_LABELLED_TOKENS,
    batch_charts_left_out,
    batch_reward_chart,
    diverging_colours,
    infinite_places,
    matches_per_step_chart,
    metric_chart,
    mismatch_bucket_chart,
    prompt_reward_chart,
    reward_distribution_chart,
    reward_gap_chart,
    running_text_html,
    signal_chart,
    staleness_share_chart,
    step_curve_chart,
    step_fraction_chart,
    step_table_chart,
    steps_drawn,
    token_heatmap_figure,
    tokens_per_column,
    value_labels,
)
from rl_board.metrics import (
    TokenRows,
    few_reward_values,
    group_signal_by_step,
    group_table,
    largest_changes,
    normal_curve,
    smoothed,
    step_stats,
    token_rows,
    trl_kl_by_step,
    trl_pools_ranks,
    zero_signal_members,
)
from rl_board.reading.history import TrainingHistory, read_history
from rl_board.reading.lines import KL_ESTIMATORS, kl_per_token, segment_sums_and_means
from rl_board.reading.snapshot import SampleTokens, group_numbers, read_sample_tokens
from rl_board.reading.store import RunStore
from rl_board.text import (
    clean_text,
    distinct_labels,
    markdown_literal,
    number_text,
    one_line,
    readable_tokens,
    significant_format,
    system_prompt_span,
    valid_text,
)
from tests.support.runs import load, sample, write_lines

FORMULAS = {
    "kl": lambda r: math.exp(r) - 1 - r,
    "k1": lambda r: r,
    "k2": lambda r: r * r / 2,
    "k3": lambda r: math.exp(-r) - (-r) - 1,  # TRL: exp(ref - logp) - (ref - logp) - 1
}


@pytest.mark.parametrize("estimator", list(KL_ESTIMATORS))
def test_kl_estimators(estimator):
    ratios = [-2.0, -0.3, -1e-9, 0.0, 1e-9, 0.4, 3.0]
    got = kl_per_token(np.array(ratios), estimator)
    assert got.tolist() == pytest.approx([FORMULAS[estimator](r) for r in ratios], rel=1e-12, abs=1e-15)


def test_segment_sums_and_means_skip_nan_and_empty_segments():
    values = np.array([[1.0, 2.0, np.nan, 4.0, 5.0]])
    sums, means = segment_sums_and_means(values, np.array([2, 0, 3]))
    assert sums[0].tolist()[0] == 3.0 and np.isnan(sums[0][1]) and sums[0][2] == 9.0
    assert means[0][0] == 1.5 and np.isnan(means[0][1]) and means[0][2] == 4.5


def test_step_statistics_are_population_mean_and_std_in_step_order():
    samples = pd.DataFrame({"step": [3, 1, 3, 1, 3], "reward": [1.0, 2.0, 2.0, 4.0, np.inf]})
    stats = step_stats(samples, "reward")
    assert stats.index.tolist() == [1, 3]
    assert stats["mean"].tolist() == [3.0, 1.5]
    assert stats["std"].tolist() == pytest.approx([statistics.pstdev([2, 4]), statistics.pstdev([1, 2])])
    assert stats["count"].tolist() == [2, 2]


def pandas_step_stats(samples: pd.DataFrame, column: str) -> pd.DataFrame:
    """step_stats as pandas' grouped aggregations give it: the recomputation the numbers are checked against."""
    values = samples[["step", column]].replace([np.inf, -np.inf], np.nan).dropna().groupby("step")[column]
    stats = values.agg(["mean", "median", "count"])
    stats["std"] = values.std(ddof=0)
    stats["q25"], stats["q75"] = values.quantile(0.25), values.quantile(0.75)
    return stats.sort_index()


@pytest.mark.parametrize("layout", ["shuffled", "in step order, as many each step", "in step order, counts differ"])
def test_step_statistics_equal_pandas_grouped_aggregations(layout):
    """Medians and quartiles exactly, means and stds to rounding, over missing and infinite values and ties."""
    rng = np.random.default_rng(7)
    for trial in range(40):
        steps = np.repeat(np.arange(int(rng.integers(1, 30))), int(rng.integers(1, 40)))
        if layout == "shuffled":
            steps = rng.permutation(steps)
        elif layout == "in step order, counts differ":
            steps = np.sort(rng.choice(steps, size=len(steps)))
        values = rng.normal(size=len(steps)) * 10.0 ** int(rng.integers(-3, 6))
        values = np.round(values) if trial % 3 == 0 else values  # ties
        odd = rng.random(len(steps))
        values[odd < 0.05], values[(odd > 0.05) & (odd < 0.08)], values[(odd > 0.08) & (odd < 0.1)] = np.nan, np.inf, -np.inf
        samples = pd.DataFrame({"step": steps, "x": values})
        expected, stats = pandas_step_stats(samples, "x"), step_stats(samples, "x")
        assert stats.index.tolist() == expected.index.tolist() and list(stats.columns) == list(expected.columns)
        for column in ("median", "q25", "q75", "count"):
            assert stats[column].tolist() == expected[column].tolist(), column
        for column in ("mean", "std"):
            assert stats[column].to_numpy() == pytest.approx(expected[column].to_numpy(), rel=1e-12, abs=1e-12 * np.abs(values[np.isfinite(values)]).max(initial=1)), column
    assert step_stats(pd.DataFrame({"step": [1, 2], "x": [np.nan, np.inf]}), "x").empty


# Finite values near a float's largest: their sums overflow, and each step's numbers are computed scaled (they were
# inf with no note, every value being finite). Exact numbers from fractions; steps that do not overflow are unchanged.
def test_step_statistics_of_values_near_the_largest_float_are_finite():
    from fractions import Fraction
    from statistics import median

    groups = {1: [-1e308, 1e308], 2: [1e308, 1.5e308], 3: [1e308, 1e308, -1e308, 0.5, 0.25], 4: [1.0, 2.0, 4.0], 5: [1e308, 1e-300, 5e-324]}
    samples = pd.DataFrame({"step": [step for step, values in groups.items() for _ in values], "x": [value for values in groups.values() for value in values]})
    stats = step_stats(samples, "x")
    for step, values in groups.items():
        exact = [Fraction(value) for value in values]
        mean = sum(exact) / len(exact)
        variance = sum((value - mean) ** 2 for value in exact) / len(exact)
        ordered = sorted(exact)

        def quantile(q):
            place = (len(ordered) - 1) * Fraction(q)
            below = int(place)
            return ordered[below] + (ordered[min(below + 1, len(ordered) - 1)] - ordered[below]) * (place - below)

        expected = {"mean": float(mean), "std": float(variance / max(exact, key=abs) ** 2) ** 0.5 * abs(max(values, key=abs)), "median": float(median(exact)), "q25": float(quantile("0.25")), "q75": float(quantile("0.75"))}
        assert stats.loc[step, list(expected)].to_numpy() == pytest.approx(list(expected.values()), rel=1e-12), step
    assert stats.loc[4].tolist() == pandas_step_stats(samples[samples["step"] == 4], "x").loc[4].tolist()
    assert stats.loc[5, ["median", "q25"]].tolist() == [1e-300, 5e-301]  # only what overflowed is computed scaled


def test_reward_gaps_from_a_run(tmp_path):
    lines = [sample(1, reward=1.0, ref_reward=0.25, valid_reward=0.5, ref_valid_reward=0.75), sample(1, reward=2.0)]
    write_lines(tmp_path / "run" / "r.jsonl", lines)
    run = load(tmp_path / "run")
    assert run.samples["reward_gap"].iloc[0] == 0.75
    assert run.samples["valid_reward_gap"].iloc[0] == -0.25  # valid_reward - ref_valid_reward
    assert np.isnan(run.samples["reward_gap"].iloc[1])


def test_response_lengths_are_characters_and_tokens(tmp_path):
    lines = [
        sample(1, response="押韵的诗句", ref_response="abc", response_tokens=["押韵", "的", "诗句"], logprobs=[-1.0, -1.0, -1.0]),
        sample(1, response="xy", response_tokens=["x", "y"]),
    ]
    write_lines(tmp_path / "run" / "r.jsonl", lines)
    run = load(tmp_path / "run")
    assert run.samples["response_len"].tolist() == [5, 2]
    assert run.samples["ref_response_len"].iloc[0] == 3 and np.isnan(run.samples["ref_response_len"].iloc[1])
    assert run.samples["response_tokens_len"].tolist() == [3, 2]
    assert run.step_mean("response_len") == {1: 3.5}


def test_zero_signal_groups_and_truncation_per_step():
    samples = pd.DataFrame({
        "step": [1, 1, 1, 1, 2, 2],
        "group_id": ["a", "a", "b", "b", "c", "c"],
        "reward": [1.0, 1.0, 0.0, 1.0, 0.5, 0.5],
        "truncated": [0.0, 1.0, 0.0, 0.0, np.nan, np.nan],
    })
    fractions = group_signal_by_step(samples)
    assert fractions["zero-signal groups"].tolist() == [0.5, 1.0]
    assert fractions["truncated"].iloc[0] == 0.25 and np.isnan(fractions["truncated"].iloc[1])


def test_group_table_sorts_by_reward_spread():
    table = pd.DataFrame({
        "group_id": ["a", "a", "b", "b"], "prompt": ["pa", "pa", "pb", "pb"],
        "reward": [1.0, 1.0, 0.0, 2.0], "truncated": [0.0, 0.0, 1.0, 0.0],
    })
    table["group"] = group_numbers(table["group_id"])
    groups = group_table(table)
    assert groups["group"].tolist() == [1, 0] and groups["group_id"].tolist() == ["b", "a"]
    assert groups["reward spread"].tolist() == [2.0, 0.0]
    assert groups["zero signal"].tolist() == [False, True]
    assert groups["samples"].tolist() == [[2, 3], [0, 1]] and groups["rewards"].tolist() == [["0", "2"], ["1", "1"]]
    assert np.isnan(group_numbers(pd.Series([None, "x", None, "x"]))).tolist() == [True, False, True, False]
    infinite = table.assign(reward=[np.inf, np.inf, 0.0, 2.0])  # equal infinities are no spread (inf - inf was NaN, sorted last)
    assert group_table(infinite)[["reward spread", "reward std", "zero signal"]].values.tolist() == [[2.0, 1.0, False], [0.0, 0.0, True]]


def test_group_prompts_are_shown_as_the_display_settings_say():
    table = pd.DataFrame({"group_id": ["a"], "prompt": ["system<endofsystem>question<PAD><PAD>"], "reward": [1.0], "truncated": [np.nan]})
    table["group"] = group_numbers(table["group_id"])
    assert group_table(table, "<PAD>", "<endofsystem>")["prompt"].tolist() == ["question"]
    assert group_table(table)["prompt"].tolist() == ["system<endofsystem>question<PAD><PAD>"]


def test_normal_curve_is_the_fitted_density():
    values = np.array([0.0, 1.0, 2.0, 3.0])
    x, density = normal_curve(values)
    mean, std = 1.5, statistics.pstdev(values)
    assert density.max() == pytest.approx(1 / (std * math.sqrt(2 * math.pi)), rel=1e-3)
    assert np.trapezoid(density, x) == pytest.approx(1.0, abs=0.01)
    assert x[np.argmax(density)] == pytest.approx(mean, abs=(x[1] - x[0]))


def test_token_rows_derive_from_logprobs_and_drop_trailing_pads():
    tokens = SampleTokens(
        response_tokens=["a", "<PAD>", "b", "<PAD>", "<PAD>"],
        logprobs=np.log([0.5, 0.9, 0.25, 1.0, 1.0]),
        ref_logprobs=np.log([0.25, 0.9, 0.5, 1.0, 1.0]),
        token_rewards=None, values=np.arange(5.0), entropies=None, advantage=0.5, notes=[],
    )
    rows = token_rows(tokens, "k3", "<PAD>")
    assert rows.tokens == ["a", "<PAD>", "b"]
    assert rows.is_pad.tolist() == [False, True, False]
    values = rows.values
    assert values["prob"].tolist() == pytest.approx([0.5, 0.9, 0.25])
    assert values["ref_prob"].tolist() == pytest.approx([0.25, 0.9, 0.5])
    assert values["log_ratio"].tolist() == pytest.approx([math.log(2), 0.0, math.log(0.5)])
    assert values["kl"].tolist() == pytest.approx([FORMULAS["k3"](r) for r in values["log_ratio"]])
    assert values["token_value"].tolist() == [0.0, 1.0, 2.0]
    assert values["advantage"].tolist() == [0.5, 0.5, 0.5]
    assert set(values) == {"logp", "prob", "log_ratio", "kl", "ref_logp", "ref_prob", "token_value", "advantage"}
    assert token_rows(tokens, "kl", None).tokens == tokens.response_tokens


def test_running_text_escapes_tokens_and_shows_values_on_hover():
    tokens = ["<script>alert(1)</script>", '" onmouseover="x', "ok"]
    values = {"logp": np.array([-1.0, -2.0, -0.5]), "kl": np.array([0.0, 0.4, -0.2])}
    rows = TokenRows(tokens=tokens, is_pad=np.array([False, False, True]), is_tool=np.zeros(3, dtype=bool), positions=np.arange(3), values=values)
    page = running_text_html(rows, "kl")
    assert "<script>" not in page and html.escape("<script>alert(1)</script>") in page
    assert 'onmouseover="x' not in page
    assert "kl=0.4" in page and "logp=-2" in page
    assert page.count("<span") == 3 and "opacity:0.35" in page
    colours = diverging_colours(np.array([0.0, 0.4, -0.2, np.nan]))
    assert colours[0].startswith("rgba(220,60,60,0.00") and colours[1] == "rgba(220,60,60,0.85)"
    assert colours[2] == "rgba(60,110,230,0.42)" and colours[3] == "transparent"


def test_clean_text_drops_pads_and_the_system_prompt_only_when_asked():
    text = "<PAD>system rules<endofsystem>question<PAD>"
    assert clean_text(text, "<PAD>", "<endofsystem>") == "question"
    assert clean_text(text) == text


# docs/page.md#numbers-as-shown: a number in the page's text keeps its significant digits and has no minus on a zero;
# a table column's format shows each value with its significant digits (tests/browser/test_numbers.py: as drawn).
def test_numbers_in_text_keep_their_digits_and_a_zero_has_no_minus():
    assert [number_text(value) for value in (-0.0, -1e-9, 3e-8, -0.80683, 12345.678, float("-inf"), float("nan"))] == ["0", "-1e-09", "3e-08", "-0.8068", "1.235e+04", "-inf", "nan"]
    assert number_text(-0.0001, "+.3f") == "+0.000" and number_text(-0.004, "+,.2f") == "+0.00" and number_text(-0.0, "+.3g") == "+0"
    assert number_text(-0.006, "+,.2f") == "-0.01" and number_text(-1e-30, ".0%") == "0%" and number_text(-0.5, ".3g") == "-0.5"
    assert significant_format([-1e-9, 0.5, np.nan, np.inf]) == "%.6g" and significant_format([]) == "%.6g"
    assert significant_format([999_999.0, 1.0]) == "%.6g" and significant_format([-1e6, 1.0]) == "%.5e" and significant_format([12_345.0], 4) == "%.3e"
    config = board.shaded_columns(pd.DataFrame({"kl": [3e-8, 0.0], "log_ratio": [-1e-9, 2.0], "policy_ratio": [4.8e8, 1.0]}))
    assert {name: column["type_config"]["format"] for name, column in config.items()} == {"kl": "%.6g", "log_ratio": "%.6g", "policy_ratio": "%.5e"}
    figure = token_heatmap_figure(*heat_map_rows({"advantage": [-0.0, -1e-9], "kl": [3e-8, 1.0]}))
    assert [list(row) for row in figure.data[0].text] == [["0", "-1e-09"], ["3e-08", "1"]]
    rows = TokenRows(tokens=["a"], is_pad=np.array([False]), is_tool=np.array([False]), positions=np.array([0]), values={"kl": np.array([3e-8]), "advantage": np.array([-0.0])})
    assert 'kl=3e-08  advantage=0"' in running_text_html(rows, "kl")  # the hover's values, -0.0 as 0


# The value axes (and the reward gap's gradient legend) of every chart label their ticks by the rule of value_labels.
def test_value_axes_label_their_ticks_as_numbers_read():
    samples = pd.DataFrame({"step": [1, 1, 2], "reward": [1e-7, 2e-7, 3e-7], "ref_reward": [0.0, 0.0, 0.0], "reward_gap": [1e-7, 2e-7, 3e-7]})
    history = TrainingHistory([], pd.DataFrame({"step": [1, 2], "learning_rate": [1e-6, 2e-6]}), pd.DataFrame({"step": []}), {}, {}, pd.DataFrame())
    buckets = pd.DataFrame({"mean |Δ|": [1e-7], "max |Δ|": [2e-7], "mismatch KL": [1e-9], "tokens": [3]}, index=pd.Index(["0-1"], name="entropy"))
    specs = {
        "curve": step_curve_chart([("run", samples)], ["reward"], "t", "reward"),
        "fractions": step_fraction_chart([("run", pd.DataFrame({"zero-signal groups": [0.5], "truncated": [0.0]}, index=pd.Index([1], name="step")))]),
        "signal": signal_chart([("run", pd.DataFrame({"value": [1e-7], "fired": [False]}, index=pd.Index([1], name="step")))], "kl accelerating", "nats", (1e-7,)),
        "metric": metric_chart("learning_rate", [("run", history)]),
        "buckets": mismatch_bucket_chart(buckets, "t"),
        "prompt": prompt_reward_chart(pd.DataFrame({"run": ["r"], "step": [1], "reward": [1e-7]})),
        "batch": batch_reward_chart(samples.set_index(pd.RangeIndex(3))),
        "gap": reward_gap_chart(samples.set_index(pd.RangeIndex(3))),
        "distribution": reward_distribution_chart(samples),
    }

    def value_encodings(spec):
        for layer in [spec, *spec.get("layer", [])]:
            for channel, encoding in layer.get("encoding", {}).items():
                guide = encoding.get("axis", encoding.get("legend")) if isinstance(encoding, dict) else None  # None: none drawn (a line's width)
                if guide is not None and encoding.get("type") == "quantitative" and encoding.get("field") != "step":
                    yield channel, encoding

    for name, spec in specs.items():
        labelled = list(value_encodings(spec))
        assert labelled, name
        for channel, encoding in labelled:
            guide = encoding.get("axis", encoding.get("legend"))
            scale = "color" if channel == "color" else channel
            assert {key: guide[key] for key in ("format", "labelExpr")} == value_labels(scale), (name, channel)
    labels = value_labels("y")  # how they read in the browser: tests/browser/test_numbers.py
    assert labels["format"] == ",~f" and labels["labelExpr"].startswith("datum.value == 0 ? '0' : ") and "domain('y')" in labels["labelExpr"]


# A series of more than 2 × STEP_BINS steps is drawn by the steps holding each stretch's least and largest values: a
# spike stays at its step, each point drawn is its step's own numbers, and the chart says how it was drawn.
def test_a_run_of_many_steps_is_drawn_by_each_stretchs_least_and_largest_steps():
    rng = np.random.default_rng(3)
    steps = 20_000
    values = rng.normal(size=steps)
    values[rng.integers(0, steps, 300)] = np.nan
    values[[7, 19_999]] = np.inf, -np.inf
    values[12_345] = 40.0  # a spike
    size = math.ceil(steps / STEP_BINS)
    drawn = steps_drawn(steps, [values])
    expected = {0, steps - 1}
    for start in range(0, steps, size):
        stretch = values[start : start + size]
        finite_places = [start + k for k, value in enumerate(stretch) if np.isfinite(value)]
        if finite_places:
            expected |= {min(finite_places, key=lambda k: (values[k], k)), max(finite_places, key=lambda k: (values[k], -k))}
    assert set(drawn.tolist()) == expected and 12_345 in expected and len(drawn) <= 2 * STEP_BINS + 2
    assert (steps_drawn(2 * STEP_BINS, [values[: 2 * STEP_BINS]]) == np.arange(2 * STEP_BINS)).all()  # a stretch of 2: all
    samples = pd.DataFrame({"step": np.repeat(np.arange(steps) * 10, 2), "reward": np.repeat(values, 2) + np.tile([-0.5, 0.5], steps), "ref_reward": 0.0})
    samples.loc[samples["step"] == 123_450, "reward"] = 40.0
    chart = step_curve_chart([("run", samples)], ["reward"], "t", "reward")
    assert chart["title"]["subtitle"][:2] == ["mean, band ± std × 0.2", STEPS_DRAWN_NOTE]
    points = pd.DataFrame(chart["datasets"]["points"]).set_index("step")
    stats = step_stats(samples, "reward")
    assert len(points) < 3 * 2 * STEP_BINS + 2 and points.loc[123_450, "mean"] == 40.0
    assert np.allclose(points["mean"].astype(float), stats.loc[points.index, "mean"], equal_nan=True)  # each step's own numbers
    assert points["n"].tolist() == stats.loc[points.index, "count"].tolist()
    means = stats["mean"].to_numpy()
    finite_means = np.where(np.isfinite(means), means, np.nan)
    stretch_size = math.ceil(len(stats) / STEP_BINS)  # the series' own steps, those with a mean
    for start in range(0, len(stats), stretch_size):  # each stretch of them: its least and largest drawn
        stretch, first, last = finite_means[start : start + stretch_size], stats.index[start], stats.index[min(start + stretch_size, len(stats)) - 1]
        if np.isfinite(stretch).any():
            in_stretch = points.loc[(points.index >= first) & (points.index <= last), "mean"].astype(float)
            assert in_stretch.max() == np.nanmax(stretch) and in_stretch.min() == np.nanmin(stretch)
    shifted = step_curve_chart([("run", samples)], ["reward"], "t", "reward", zero_shift=True, smoothing=0.9)
    assert max(point["raw"] for point in shifted["datasets"]["points"] if point["raw"] is not None) == pytest.approx(40.0 - means[0])  # the faint raw line keeps its spike
    table = pd.DataFrame({"value": values}, index=pd.Index(np.arange(steps), name="step"))
    spec = step_table_chart([("run", table)], ["value"], "t", "unit")
    assert {point["step"] for point in spec["datasets"]["points"]} == expected and spec["title"]["subtitle"][0] == STEPS_DRAWN_NOTE
    history = TrainingHistory([], pd.DataFrame({"step": np.arange(steps), "loss": values}), pd.DataFrame({"step": []}), {}, {}, pd.DataFrame())
    metric = metric_chart("loss", [("run", history)])
    finite_steps = np.flatnonzero(~np.isnan(values))  # the history drops a step without the metric
    assert {point["step"] for point in metric["datasets"]["points"]} == set(finite_steps[steps_drawn(len(finite_steps), [values[finite_steps]])].tolist())
    assert metric["title"]["subtitle"] == STEPS_DRAWN_NOTE
    evaluated = TrainingHistory([], history.train, pd.DataFrame({"step": np.arange(0, steps, 100), "loss": 1.0}), {}, {}, pd.DataFrame())
    eval_points = [point for point in metric_chart("loss", [("run", evaluated)])["datasets"]["points"] if point["split"] == "eval"]
    assert len(eval_points) == steps // 100  # a short series beside a long one: every point
    compared = step_table_chart([("long", table), ("begun", table.iloc[:300])], ["value"], "t", "unit")["datasets"]["points"]
    assert {point["step"] for point in compared if point["series"] == "begun"} == set(range(300))
    found = pd.Series(rng.integers(0, 5, steps), index=np.arange(steps) * 10)  # a search's samples found per step
    bars = matches_per_step_chart(found)["data"]["values"]
    assert len(bars) == STEP_BINS and sum(bar["samples"] for bar in bars) == found.sum()
    assert bars[1] == {"step": size * 10, "steps": f"{size * 10}–{(2 * size - 1) * 10}", "samples": int(found.iloc[size : 2 * size].sum())}
    assert len(matches_per_step_chart(found.iloc[: 2 * STEP_BINS])["data"]["values"]) == 2 * STEP_BINS  # a bar per step
    staleness = pd.DataFrame({"step": np.repeat(np.arange(steps) * 10, 3), "staleness": np.tile([0, 1, 9], steps), "samples": rng.integers(1, 5, 3 * steps)})
    shares = pd.DataFrame(staleness_share_chart(staleness.assign(share=0.0), "t")["data"]["values"])  # share: recomputed per stretch
    assert shares["step"].nunique() == STEP_BINS and shares["samples"].sum() == staleness["samples"].sum()
    second = staleness[(staleness["step"] >= size * 10) & (staleness["step"] < 2 * size * 10)]
    expected = second.assign(staleness=second["staleness"].clip(upper=8)).groupby("staleness")["samples"].sum()
    got = shares[shares["step"] == size * 10].set_index("order")
    assert got["samples"].to_dict() == expected.to_dict() and got["share"].to_numpy() == pytest.approx((expected / expected.sum()).to_numpy())
    assert set(got["steps"]) == {f"{size * 10}–{(2 * size - 1) * 10}"} and set(got["staleness"]) == {"0", "1", "≥ 8"}
    few = step_curve_chart([("run", samples[samples["step"] < 10 * 2 * STEP_BINS].assign(reward=1.0))], ["reward"], "t", "reward")
    assert few["title"]["subtitle"] == "mean, band ± std × 0.2" and len(few["datasets"]["points"]) == 2 * STEP_BINS  # every step


def test_token_table_shades_each_metric_within_its_range():
    grid = pd.DataFrame({"logp": [-3.0, -1.0, -0.5], "kl": [0.5, 0.5, np.nan]})
    config = board.shaded_columns(grid)
    assert (config["logp"]["type_config"]["min_value"], config["logp"]["type_config"]["max_value"]) == (-3.0, -0.5)
    assert (config["kl"]["type_config"]["min_value"], config["kl"]["type_config"]["max_value"]) == (0.5, 1.5)
    assert config["logp"]["type_config"]["type"] == "progress"


# A ±inf value (a reward function's overflow, a token given no probability) cannot be drawn, and the means, spreads,
# bars and histograms leave it out: each view says where, so that the samples a run most needs looked at do not vanish.
def test_infinities_left_out_of_the_charts_are_named_where_they_are():
    samples = pd.DataFrame({"step": [1, 1, 1, 2, 2, 2, 3, 3], "reward": [0.0, np.inf, 1.0, -np.inf, 0.5, np.inf, 0.2, np.nan], "ref_reward": [0.0] * 8})
    chart = step_curve_chart([("run", samples)], ["reward", "ref_reward"], "t", "reward")
    assert chart["title"]["subtitle"] == ["mean, band ± std × 0.2", "reward: 3 values ±inf and 1 without a number, left out (steps 1, 2, 3)"]
    assert [(p["step"], p["mean"], p["n"]) for p in chart["datasets"]["points"] if p["series"] == "reward"] == [(1, 0.5, 2), (2, 0.5, 1), (3, 0.2, 1)]
    numberless = samples.assign(ref_reward=np.nan, reward=[0.0, np.nan, 1.0, np.nan, 0.5, np.inf, 0.2, 0.3])  # the reward is required: NaN is named
    assert step_curve_chart([("run", numberless)], ["reward", "ref_reward"], "t", "reward")["title"]["subtitle"][1:] == ["reward: 1 value ±inf and 2 without a number, left out (steps 1, 2)"]
    many = pd.DataFrame({"step": list(range(1, 8)), "kl": [np.inf] * 7})  # steps of nothing finite: no points, still named
    compared = step_curve_chart([("a", many), ("b", samples.rename(columns={"reward": "kl"}))], ["kl"], "t", "nats")
    assert compared["title"]["subtitle"][1:] == ["a: 7 values ±inf, left out (steps 1, 2, 3, 4, 5, …)", "b: 3 values ±inf, left out (steps 1, 2)"]
    assert step_curve_chart([("run", samples)], ["ref_reward"], "t", "reward")["title"]["subtitle"] == "mean, band ± std × 0.2"  # none: the band alone
    kl = step_curve_chart([("run", samples)], ["ref_reward"], "t", "nats", zero_shift=True, lines=[("trl kl", [1, 2, 3], [np.inf, 0.1, 0.25])])
    assert kl["title"]["subtitle"][1] == "trl kl: 1 value ±inf, left out (step 1)"  # a dashed line's too
    assert [point["centre"] for point in kl["datasets"]["lines"]] == [None, 0.0, 0.15]  # shifted by its first finite value
    prompt = prompt_reward_chart(pd.DataFrame({"run": ["a", "a", "a", "b"], "step": [1, 1, 2, 1], "reward": [0.5, np.inf, 0.2, 0.1]}))
    assert prompt["title"]["subtitle"] == ["a: 1 value ±inf, left out (step 1)"]  # one prompt's completions over training
    assert [(line["run"], line["step"], line["mean reward"]) for line in prompt["datasets"]["means"]] == [("a", 1, 0.5), ("a", 2, 0.2), ("b", 1, 0.1)]
    per_step = pd.DataFrame({"mean |Δ|": [0.1, np.inf, 0.2]}, index=pd.Index([1, 2, 3], name="step"))  # Step-Mismatch, -Tools, ...
    assert step_table_chart([("run", per_step)], ["mean |Δ|"], "t", "nats")["title"]["subtitle"] == ["mean |Δ|: 1 value ±inf, left out (step 2)"]
    assert step_table_chart([("run", per_step.iloc[[0, 2]])], ["mean |Δ|"], "t", "nats")["title"] == "t"
    five = step_curve_chart([(f"run {n}", many) for n in range(5)], ["kl"], "t", "nats")["title"]["subtitle"]
    assert five[1:] == [f"run {n}: 7 values ±inf, left out (steps 1, 2, 3, 4, 5, …)" for n in range(3)] + ["and 2 more series with values left out"]
    table = pd.DataFrame({"reward": [0.0, np.inf, -np.inf, 1.0], "ref_reward": [0.0, 0.0, 0.0, np.nan]})
    table["reward_gap"] = table["reward"] - table["ref_reward"]
    assert batch_charts_left_out(table) == "Not in the charts: reward at samples 1 (+inf), 2 (−inf); reward_gap at samples 1 (+inf), 2 (−inf)."
    assert batch_charts_left_out(table.iloc[[0, 3]]) is None
    numberless_batch = pd.DataFrame({"reward": [np.nan, 0.0, np.nan, 1.0], "ref_reward": [0.0] * 4, "reward_gap": [np.nan, 0.0, np.nan, 1.0]})
    assert batch_charts_left_out(numberless_batch) == "Not in the charts: reward without a number at samples 0, 2."
    apart = pd.DataFrame({"reward": [1e308, -1e308], "ref_reward": [0.0, 1.0], "reward_gap": [1e308, -1e308]})  # no histogram spans them
    assert batch_charts_left_out(apart) == "Not in the charts: reward's distribution: its values, -1e+308 to 1e+308, span more than a float holds."
    assert infinite_places(list("abcdefg"), [np.inf] * 7) == "a (+inf), b (+inf), c (+inf), d (+inf), e (+inf) and 2 more"


# Coloured by value, a token whose value is ±inf is at the colour's end (beyond every finite value), not uncoloured
# as a token without a value (NaN) is; the token table writes it in a number column (its bar cells leave it blank).
def test_infinite_token_values_are_coloured_at_the_ends_and_written_out():
    assert diverging_colours(np.array([0.5, -np.inf, np.nan, 1.0, np.inf])) == ["rgba(220,60,60,0.42)", "rgba(60,110,230,0.85)", "transparent", "rgba(220,60,60,0.85)", "rgba(220,60,60,0.85)"]
    assert diverging_colours(np.array([0.0, np.inf]))[1] == "rgba(220,60,60,0.85)"  # no finite magnitude to scale by
    figure = token_heatmap_figure(*heat_map_rows({"kl": [0.5, np.inf, np.nan], "logp": [-1.0, -np.inf, 0.25]}))
    assert np.array_equal(np.asarray(figure.data[0].z, dtype=float), [[1.0, 1.0, np.nan], [-1.0, -1.0, 0.25]], equal_nan=True)
    config = board.shaded_columns(pd.DataFrame({"logp": [-0.5, -np.inf], "kl": [0.1, np.nan]}))
    assert config["logp"]["type_config"]["type"] == "number" and config["logp"]["type_config"]["format"] == "%.6g" and "±inf" in config["logp"]["help"]
    assert config["kl"]["type_config"]["type"] == "progress"


def test_step_curve_band_is_mean_plus_minus_scaled_std_with_zero_shift():
    samples = pd.DataFrame({"step": [2, 2, 1, 1, 10], "reward": [1.0, 3.0, 0.0, 2.0, np.nan]})
    chart = step_curve_chart([("run", samples)], ["reward"], "t", "reward", variance_scale=0.5, zero_shift=True)
    points = chart["datasets"]["points"]
    assert [(p["step"], p["centre"], p["low"], p["high"], p["std"], p["n"]) for p in points] == [(1, 0.0, -0.5, 0.5, 1.0, 2), (2, 1.0, 0.5, 1.5, 1.0, 2)]
    assert [p["mean"] for p in points] == [1.0, 2.0]  # the hover keeps the unshifted mean
    assert chart["datasets"][STEP_EXTENT] == [{"step": 1}, {"step": 10}]  # the axis ends at the last step
    assert chart["layer"][0]["encoding"]["y"]["title"] == "reward" and chart["title"]["subtitle"] == ["mean, band ± std × 0.5", "reward: 1 without a number, left out (step 10)"]


def test_step_curve_median_view_is_robust_to_a_spike_and_log_scale_is_symlog():
    samples = pd.DataFrame({"step": [1] * 5, "kl": [0.1, 0.2, 0.3, 0.4, 1000.0]})
    chart = step_curve_chart([("run", samples)], ["kl"], "t", "nats per token", median=True, log_scale=True)
    [point] = chart["datasets"]["points"]
    assert (point["centre"], point["low"], point["high"]) == (0.3, 0.2, 0.4) and point["mean"] == pytest.approx(200.2)
    assert chart["layer"][0]["encoding"]["y"]["scale"] == {"zero": False, "padding": 8, "type": "symlog"}


# A step chart's spec keeps its shape as steps are appended (live mode, Load & View): the browser then swaps its data
# in the Vega view it has instead of building a new one (about a fifth of an append's browser time on the medium run).
# Its steps, and the lines, marks and rules that come and go with them, are data, not spec: from one step to two, past
# the point where a dashed line's points stop being marked, and when a trainer's logged line starts late.
def test_a_step_chart_s_spec_is_the_same_when_a_step_is_appended():
    def samples(steps: int) -> pd.DataFrame:
        step = np.repeat(np.arange(1, steps + 1), 4)
        return pd.DataFrame({"step": step, "reward": np.sin(np.arange(len(step))), "run": "a", "advantage": 0.0})

    def history(steps: int) -> TrainingHistory:
        train = pd.DataFrame({"step": np.arange(1, steps + 1), "loss": np.linspace(1, 0, steps)})
        evaluation = pd.DataFrame({"step": [steps], "eval_loss": [0.5]})
        best = {"step": steps, "path": f"checkpoint-{steps}"} if steps > 2 else {}  # a best checkpoint from step 3 on
        return TrainingHistory([], train, evaluation, {}, best, pd.DataFrame())

    def signal(steps: int) -> pd.DataFrame:
        table = pd.DataFrame({"value": np.linspace(0, 1, steps)}, index=pd.Index(np.arange(1, steps + 1), name="step"))
        return table.assign(fired=table["value"] > 0.5)

    def kl_lines(steps: int) -> list:  # TRL's kl from the lines, and the trainer's logged kl from step 5 on
        logged = list(range(5, steps + 1))
        return [("kl (lines)", list(range(1, steps + 1)), [0.1] * steps), ("kl (trainer log)", logged, [0.2] * len(logged))]

    def charts(steps: int) -> list[dict]:
        return [
            step_curve_chart([("a", samples(steps))], ["reward"], "t", "reward", lines=kl_lines(steps)),
            step_curve_chart([("a", samples(steps)), ("b", samples(steps + 3))], ["reward"], "t", "reward", zero_shift=True, smoothing=0.5, median=True),
            step_fraction_chart([("a", pd.DataFrame({"zero-signal groups": 0.5, "truncated": 0.1}, index=pd.Index(np.arange(1, steps + 1), name="step")))]),
            signal_chart([("a", signal(steps))], "s", "unit", (0.5,)),
            metric_chart("loss", [("a", history(steps))]),
            prompt_reward_chart(samples(steps)),
        ]

    assert all(chart["datasets"]["points"] for chart in charts(3))  # every chart has its points to compare
    for steps in (1, 2, 3, 4, 5, 29, 30, 31, 59, 60, 70):
        for before, after in zip(charts(steps), charts(steps + 1)):
            assert before["datasets"] != after["datasets"]
            assert {**before, "datasets": None} == {**after, "datasets": None}, (steps, before["title"])
            assert all("values" not in layer.get("data", {}) or layer["mark"]["type"] == "rule" for layer in before["layer"])  # a threshold's rule, the user's

    # The bar charts of steps (search's matches, a run's samples by staleness): their step labels come from the data too.
    def bar_charts(steps: int) -> list[dict]:
        staleness = pd.DataFrame({"step": np.repeat(np.arange(1, steps + 1), 2), "staleness": [0, 1] * steps, "samples": 2, "share": 0.5})
        return [matches_per_step_chart(pd.Series(np.arange(steps) % 3, index=np.arange(1, steps + 1))), staleness_share_chart(staleness, "t")]

    for steps in (1, 2, 11, 12, 13, 24, 25, 100):
        for before, after in zip(bar_charts(steps), bar_charts(steps + 1)):
            assert before["data"] != after["data"]
            assert {**before, "data": None} == {**after, "data": None}, (steps, before["title"])


# Compared runs: a colour per run and a dash per series, the dashes in the order the series were chosen, whatever
# series are chosen: the spec stays the same, so the browser swaps the data instead of building the chart anew.
def test_compared_runs_keep_their_step_curve_spec_whichever_series_are_chosen():
    def samples(seed: int) -> pd.DataFrame:
        rng = np.random.default_rng(seed)
        return pd.DataFrame({"step": np.repeat([1, 2, 3], 4), "reward": rng.random(12), "ref_reward": rng.random(12), "accuracy": rng.random(12)})

    runs = [("a", samples(0)), ("b", samples(1))]
    charts = [step_curve_chart(runs, columns, "t", "reward") for columns in (["reward"], ["ref_reward", "reward"], ["reward", "ref_reward", "accuracy"])]
    assert all({**chart, "datasets": None} == {**charts[0], "datasets": None} for chart in charts)
    dashes = [sorted({(point["what_order"], point["what"]) for point in chart["datasets"]["points"]}) for chart in charts]
    assert dashes == [[(0, "reward")], [(0, "ref_reward"), (1, "reward")], [(0, "reward"), (1, "ref_reward"), (2, "accuracy")]]
    assert {point["colour"] for point in charts[1]["datasets"]["points"]} == {"a", "b"}
    [line] = [layer for layer in charts[0]["layer"] if "strokeDash" in layer["encoding"]]
    assert line["encoding"]["strokeDash"]["sort"] == {"field": "what_order", "op": "min"} and line["encoding"]["strokeDash"]["legend"]["orient"] == "bottom"
    # a facet's values drawn as runs: one series, named in the title, its dash in no legend
    [line] = [layer for layer in step_curve_chart(runs, ["reward"], "t", "reward", dashes_named=False)["layer"] if "strokeDash" in layer["encoding"]]
    assert line["encoding"]["strokeDash"]["legend"] is None


# Step-KL's dashed lines, TRL's kl recomputed and as the trainer logged it, are often the same numbers: the first is
# drawn wider than the one over it, so both show where they coincide; lines that never meet keep the one width.
def test_dashed_lines_that_coincide_both_show():
    samples = pd.DataFrame({"step": [1, 1, 2, 2], "kl": [0.1, 0.2, 0.3, 0.4]})
    lines = [("recomputed", [0, 1, 2], [0.0, 0.15, 0.35]), ("logged", [0, 1, 2], [0.0, 0.15, 0.35 + 1e-9]), ("b · recomputed", [0, 1, 2], [0.0, 0.25, 0.05]),
             ("c · recomputed", [2, 3], [np.nan, 0.15]), ("d · recomputed", [0], [0.0])]  # every run's kl is 0 at its first step: b meets the others there alone; d just begun
    chart = step_curve_chart([("run", samples)], ["kl"], "t", "nats", lines=lines)
    widths = {point["series"]: point["width"] for point in chart["datasets"]["lines"]}
    assert widths == {"recomputed": LINE_WIDTH + LINE_WIDENING, "logged": LINE_WIDTH, "b · recomputed": LINE_WIDTH, "c · recomputed": LINE_WIDTH, "d · recomputed": LINE_WIDTH}
    [drawn] = [layer for layer in chart["layer"] if layer.get("data") == {"name": "lines"} and layer["mark"]["type"] == "line"]
    assert drawn["encoding"]["strokeWidth"] == {"field": "width", "type": "quantitative", "scale": None, "legend": None}


def test_step_fractions_are_percent_per_step():
    fractions = pd.DataFrame({"zero-signal groups": [0.5, 0.25]}, index=pd.Index([1, 3], name="step"))
    points = step_fraction_chart([("run", fractions)])["datasets"]["points"]
    assert [(p["series"], p["step"], p["value"]) for p in points] == [("zero-signal groups (%)", 1, 50.0), ("zero-signal groups (%)", 3, 25.0)]


# TensorBoard's smoothing, written out: s_t = w s_(t-1) + (1 - w) x_t from s_0 = 0, divided by 1 - w^t (debiased);
# a missing value is skipped and stays missing.
def test_smoothing_is_tensorboards_debiased_moving_average():
    values, weight = np.array([1.0, 3.0, np.nan, 2.0, 10.0]), 0.6
    expected, state, seen = [], 0.0, 0
    for value in values:
        if np.isnan(value):
            expected.append(np.nan)
            continue
        state, seen = weight * state + (1 - weight) * value, seen + 1
        expected.append(state / (1 - weight**seen))
    np.testing.assert_allclose(smoothed(values, weight), expected, rtol=1e-12)
    np.testing.assert_array_equal(smoothed(values, 0.0), values)


# Compared runs: one line per run, named by run, each shifted to its own first point and smoothed alone; the raw
# centre stays in the points for the faint line.
def test_compared_runs_draw_one_line_each_shifted_and_smoothed_per_run():
    first = pd.DataFrame({"step": [1, 1, 2, 3], "reward": [1.0, 3.0, 4.0, 0.0]})
    second = pd.DataFrame({"step": [2, 3, 4], "reward": [10.0, 12.0, 11.0]})
    chart = step_curve_chart([("a", first), ("b", second)], ["reward"], "t", "reward", zero_shift=True, smoothing=0.5)
    points = chart["datasets"]["points"]
    assert chart["layer"][1]["encoding"]["color"]["sort"] == {"field": "order", "op": "min"}  # colours in run order
    assert {(p["colour"], p["order"]) for p in points} == {("a", 0), ("b", 1)}
    for name, raw in (("a", [0.0, 2.0, -2.0]), ("b", [0.0, 2.0, 1.0])):
        mine = [p for p in points if p["series"] == name]
        assert [p["raw"] for p in mine] == raw
        assert [p["centre"] for p in mine] == pytest.approx(smoothed(np.array(raw), 0.5).tolist())
    assert chart["layer"][1]["encoding"]["y"]["field"] == "raw" and chart["layer"][1]["mark"]["opacity"] < 1
    assert chart["datasets"][STEP_EXTENT] == [{"step": 1}, {"step": 4}]


def test_rewards_of_a_few_values_are_counted_per_value():
    table = pd.DataFrame({"reward": [0.0, 1.0, 1.0, np.nan, 0.5], "ref_reward": [1.0, 1.0, np.nan, 1.0, 1.0]})
    assert few_reward_values(table)  # 3 values among 8 rewards and ref rewards
    assert not few_reward_values(pd.DataFrame({"reward": [0.0, 1.0, 0.5, 0.25]}))  # each value once: continuous, for all we know
    assert not few_reward_values(pd.DataFrame({"reward": np.linspace(0, 1, 200)}))
    bars = reward_distribution_chart(table, counted=True)["data"]["values"]
    assert bars == [
        {"series": "Reward", "reward": 0.0, "samples": 1}, {"series": "Reward", "reward": 0.5, "samples": 1},
        {"series": "Reward", "reward": 1.0, "samples": 2}, {"series": "Ref Reward", "reward": 1.0, "samples": 4},
    ]


def test_reward_distribution_is_a_numpy_histogram_with_a_normal_fit():
    table = pd.DataFrame({"reward": [0.0, 1.0, 1.0, np.nan] + np.linspace(0, 1, 13).tolist(), "ref_reward": [np.nan] * 17})
    chart = reward_distribution_chart(table)
    bars, curve = chart["datasets"]["bars"], chart["datasets"]["curves"]
    assert [layer["data"] for layer in chart["layer"]] == [{"name": "bars"}, {"name": "curves"}]
    rewards = [0.0, 1.0, 1.0] + np.linspace(0, 1, 13).tolist()
    density, edges = np.histogram(rewards, bins="auto", density=True)
    assert [bar["density"] for bar in bars] == pytest.approx(density.tolist())
    assert [(bar["start"], bar["end"]) for bar in bars] == pytest.approx(list(zip(edges[:-1], edges[1:])))
    assert {point["series"] for point in curve} == {"Reward normal fit"}
    mean, std = np.mean(rewards), np.std(rewards)
    for point in curve[::50]:
        assert point["density"] == pytest.approx(np.exp(-0.5 * ((point["x"] - mean) / std) ** 2) / (std * np.sqrt(2 * np.pi)))


# Streamlit moves a chart's top-level and named data out of its spec; when the rest is unchanged the browser
# swaps the data in the chart it has instead of building a new one. So a step change must change only data.
def test_batch_charts_of_two_steps_differ_only_in_data():
    first = pd.DataFrame({"reward": [0.0, 1.0, 0.5], "ref_reward": [0.2, 0.4, 0.1], "reward_gap": [-0.2, 0.6, 0.4]})
    second = pd.DataFrame({"reward": [3.0, 1.0, -2.0, 7.0], "ref_reward": [0.0, 2.0, 1.0, 0.0], "reward_gap": [3.0, -1.0, -3.0, 7.0]})
    for make in (batch_reward_chart, reward_gap_chart, reward_distribution_chart):
        specs = [{key: value for key, value in make(table).items() if key not in ("data", "datasets")} for table in (first, second)]
        assert specs[0] == specs[1], make.__name__
        assert make(first) != make(second)


# A step of more samples than SAMPLE_BARS is charted in bins of consecutive samples: each bin's bar is the mean of its
# finite values, with their count, least and largest, recomputed here from the table with numpy.
@pytest.mark.parametrize("count", [SAMPLE_BARS + 1, 1000, 8192])
def test_a_step_of_many_samples_is_charted_in_bins_of_samples(count):
    rng = np.random.default_rng(count)
    reward = rng.normal(size=count)
    reward[rng.choice(count, count // 10, replace=False)] = np.nan
    reward[3], reward[count - 1] = np.inf, -np.inf
    ref = np.round(rng.normal(size=count), 2)
    table = pd.DataFrame({"reward": reward, "ref_reward": ref, "reward_gap": reward - ref})
    size = math.ceil(count / SAMPLE_BINS)
    assert math.ceil(count / size) <= SAMPLE_BINS
    reward_chart, gap_chart = batch_reward_chart(table), reward_gap_chart(table)
    assert reward_chart["title"]["subtitle"] == gap_chart["title"]["subtitle"] == f"each bar the mean of {size} samples"
    bins = reward_chart["data"]["values"]
    assert [row["series"] for row in bins] == ["Reward"] * math.ceil(count / size) + ["Ref Reward"] * math.ceil(count / size)
    for column, name, place, rows in (("reward", "Reward", 0, bins), ("ref_reward", "Ref Reward", 1, bins), ("reward_gap", None, 0, gap_chart["data"]["values"])):
        rows = [row for row in rows if row.get("series") == name]
        places = 2 if name else 1
        for row, first in zip(rows, range(0, count, size), strict=True):
            values = table[column].to_numpy()[first : first + size]
            finite = values[np.isfinite(values)]
            assert row["samples"] == f"{first}–{first + len(values) - 1}" and row["finite"] == len(finite)
            assert (row["start"], row["end"]) == pytest.approx((first + place * len(values) / places, first + (place + 1) * len(values) / places))
            if len(finite):
                assert row["mean"] == pytest.approx(finite.mean(), rel=1e-12, abs=1e-15)
                assert (row["least"], row["largest"]) == (finite.min(), finite.max())
            else:
                assert row["mean"] is row["least"] is row["largest"] is None
    json.dumps([reward_chart, gap_chart], allow_nan=False)


def test_a_step_of_at_most_sample_bars_samples_has_a_bar_each_and_bins_keep_their_spec():
    table = pd.DataFrame({"reward": np.arange(SAMPLE_BARS, dtype=float), "ref_reward": 0.0, "reward_gap": np.arange(SAMPLE_BARS, dtype=float)})
    assert len(batch_reward_chart(table)["data"]["values"]) == 2 * SAMPLE_BARS and batch_reward_chart(table)["encoding"]["x"]["type"] == "ordinal"
    first, second = (pd.DataFrame({"reward": np.arange(count) % 7, "ref_reward": 1.0, "reward_gap": np.arange(count) % 7 - 1.0}) for count in (5000, 5050))
    for make in (batch_reward_chart, reward_gap_chart):  # 79 samples a bin in both: the browser swaps the data in
        specs = [{key: value for key, value in make(table).items() if key != "data"} for table in (first, second)]
        assert specs[0] == specs[1] and make(first) != make(second)


def test_batch_charts_hold_the_table_and_json_has_no_nan():
    table = pd.DataFrame({"reward": [0.5, np.nan], "ref_reward": [0.25, 1.0], "reward_gap": [0.25, np.nan]})
    bars = batch_reward_chart(table)["data"]["values"]
    assert [(b["sample_index"], b["series"], b["reward"]) for b in bars] == [(0, "Reward", 0.5), (1, "Reward", None), (0, "Ref Reward", 0.25), (1, "Ref Reward", 1.0)]
    assert [b["reward_gap"] for b in reward_gap_chart(table)["data"]["values"]] == [0.25, None]
    json.dumps(batch_reward_chart(table), allow_nan=False)


# Token rows of these values (a list each, by name) and tokens (default: "t"), as the token area gives them to the heat
# map, with the names to draw.
def heat_map_rows(values: dict, tokens: list[str] | None = None, positions=None) -> tuple[TokenRows, list[str]]:
    count = len(next(iter(values.values())))
    rows = TokenRows(
        tokens=tokens or ["t"] * count, is_pad=np.zeros(count, dtype=bool), is_tool=np.zeros(count, dtype=bool),
        positions=np.arange(count) if positions is None else np.asarray(positions), values={name: np.asarray(column, dtype=float) for name, column in values.items()},
    )
    return rows, list(values)


def test_heat_map_labels_are_escaped_for_plotly():
    figure = token_heatmap_figure(*heat_map_rows({"logp": [1.0]}, tokens=['<a href="x">t</a>']))
    assert list(figure.data[0].x) == ['0 - &lt;a href="x"&gt;t&lt;/a&gt;']  # tags as text; quotes as written (Plotly shows &quot; as written)
    assert json.loads(figure.to_json())["data"][0]["colorscale"][0][1] == "rgb(23, 28, 66)"  # balance


def test_long_heat_maps_index_tokens_instead_of_labelling_each():
    def rows(tokens: int, start: int = 0) -> tuple[TokenRows, list[str]]:
        return heat_map_rows({"logp": np.arange(tokens) - 5.0, "kl": np.ones(tokens)}, positions=np.arange(start, start + tokens))

    figure = token_heatmap_figure(*rows(VALUE_LABELLED_TOKENS))
    assert list(figure.data[0].x) == [f"{i} - t" for i in range(VALUE_LABELLED_TOKENS)] and figure.data[0].texttemplate == "%{text}"
    figure = token_heatmap_figure(*rows(VALUE_LABELLED_TOKENS + 1))  # too narrow for values in the cells, wide enough for tokens
    assert list(figure.data[0].x) == [f"{i} - t" for i in range(VALUE_LABELLED_TOKENS + 1)] and figure.data[0].text is None and figure.data[0].texttemplate is None
    figure = token_heatmap_figure(*rows(LABELLED_TOKENS + 1, start=7))  # a turn's tokens, say: their places in the response
    assert list(figure.data[0].x) == list(range(7, LABELLED_TOKENS + 9))  # each cell's edges: from its token to the next
    assert list(figure.data[0].text[0]) == [str(i) for i in range(7, LABELLED_TOKENS + 8)] and "token #%{text}" in figure.data[0].hovertemplate
    long, names = rows(HEAT_MAP_COLUMNS)
    figure = token_heatmap_figure(long, names)
    assert list(figure.data[0].x) == list(range(HEAT_MAP_COLUMNS + 1)) and figure.data[0].texttemplate is None
    assert np.asarray(figure.data[0].z).shape == (2, HEAT_MAP_COLUMNS)  # every token a cell of its own, up to HEAT_MAP_COLUMNS
    assert np.array_equal(np.asarray(figure.data[0].customdata), np.array([long.values[name] for name in names]))  # its value on hover


# A run of image placeholder tokens is one row (token_rows): its cell spans its tokens, and the token after it starts
# where they end. Placed at their first tokens, plotly put each cell's edges halfway to its neighbours', and drew the
# token after 1,024 placeholders 512 tokens wide, over half of them.
def test_a_heat_map_cell_spans_the_tokens_of_its_row():
    positions = np.r_[np.arange(101), np.arange(1124, 1174)]  # row 100 is <|image_pad|> × 1024: tokens 100-1123
    rows, names = heat_map_rows({"kl": np.linspace(-1.0, 1.0, len(positions))}, positions=positions)
    trace = token_heatmap_figure(rows, names).data[0]
    assert trace.x.tolist() == [*positions.tolist(), 1174] and trace.x[100:102].tolist() == [100, 1124]
    positions = np.r_[np.arange(101), np.arange(1124, 1124 + 700)]
    rows, names = heat_map_rows({"kl": np.linspace(-1.0, 1.0, len(positions))}, positions=positions)
    trace = token_heatmap_figure(rows, names).data[0]  # 801 rows: stretches of 2
    assert trace.x[49:52].tolist() == [98, 100, 1125] and trace.customdata[0][50][1] == "#100–#1124"


# Past HEAT_MAP_COLUMNS tokens a column is a stretch of tokens, drawn by each row's value of largest size in it: drawn a
# token a cell, plotly painted cells narrower than a pixel over each other and showed one KL spike of four (4,000 tokens
# about 1,000 pixels wide; tests/browser/test_heat_map.py looks at the pixels). Checked against a plain loop.
def test_a_long_heat_map_draws_each_stretch_of_tokens_by_its_value_of_largest_size():
    rng = np.random.default_rng(3)
    for count in (HEAT_MAP_COLUMNS + 1, 1_999, 4_000, 30_011):
        size = math.ceil(count / HEAT_MAP_COLUMNS)
        kl, logp = rng.normal(0, 0.01, count), -rng.exponential(1.0, count)
        first, second = (count // 7) // size * size, (count // 3) // size * size
        kl[[first, first + 1, second, second + 1, count // 2 + 1]] = [3.0, np.inf, -np.inf, -4.0, 2.5]  # ±inf beside the row's largest
        kl[: min(count, 37)] = np.nan  # a tool's tokens: stretches with no value at all, then one with a few
        logp[count // 2] = -50.0
        positions = np.arange(count) + 11  # a response's tokens after those a turn left out, say
        rows, names = heat_map_rows({"kl": kl, "logp": logp}, tokens=[f"w{i}" for i in range(count)], positions=positions)
        trace = token_heatmap_figure(rows, names).data[0]
        stretches = [range(start, min(start + size, count)) for start in range(0, count, size)]
        assert size == tokens_per_column(count) > 1 and len(stretches) <= HEAT_MAP_COLUMNS
        expected, hover = [], []
        for values in (kl, logp):
            kept, cells = [], []
            for stretch in stretches:
                span = f"#{positions[stretch[0]]}–#{positions[stretch[-1]]}"
                finite = [i for i in stretch if not math.isnan(values[i])]
                if not finite:
                    kept.append(math.nan)
                    cells.append(["no value", span, ""])
                    continue
                largest = max(finite, key=lambda i: abs(values[i]))  # the first of equals, as max gives it
                kept.append(values[largest])
                shown = "inf" if values[largest] == np.inf else "-inf" if values[largest] == -np.inf else f"{values[largest]:.4g}"
                cells.append([shown, span, f" at {positions[largest]} - w{largest} (the stretch's largest in size)"])
            expected.append(kept)
            hover.append(cells)
        expected = np.array(expected)
        assert np.array_equal(np.asarray(trace.x), [positions[s[0]] for s in stretches] + [positions[-1] + 1])  # the stretches' edges
        bounds = np.array([max(abs(v) for v in values if math.isfinite(v)) for values in (kl, logp)])  # every token's, not the cells'
        assert bounds[0] == 4.0 and np.array_equal(np.asarray(trace.z), np.clip(expected / bounds[:, None], -1, 1), equal_nan=True)
        assert [[list(cell) for cell in row] for row in trace.customdata] == hover
        for spike in (np.inf, -np.inf, 2.5):  # every spike is a cell's value (3.0 and -4.0 share theirs with ±inf)
            assert spike in expected[0]
        assert -50.0 in expected[1] and trace.text is None and "customdata[2]" in trace.hovertemplate


def test_heat_map_colours_each_row_within_its_own_range_and_shows_raw_values():
    rows, names = heat_map_rows({"logp": [-12.0, -3.0, -6.0, np.nan], "log_ratio": [0.02, -0.01, 0.0, np.inf], "advantage": [0.0, 0.0, 0.0, 0.0]}, tokens=list("abcd"))
    grid = np.array([rows.values[name] for name in names])
    trace = token_heatmap_figure(rows, names).data[0]
    z = np.asarray(trace.z)
    assert np.allclose(z[0, :3], [-1.0, -0.25, -0.5]) and np.isnan(z[0, 3])  # logp's own largest |value| is 12
    assert np.allclose(z[1], [1.0, -0.5, 0.0, 1.0])  # infinity is no bound, and at the colour's end
    assert np.array_equal(z[2], np.zeros(4))  # an all-zero row stays neutral
    assert (trace.zmin, trace.zmax, trace.showscale) == (-1, 1, False)
    assert np.array_equal(np.asarray(trace.customdata), grid, equal_nan=True)  # hover: raw values
    assert [list(row) for row in trace.text] == [["-12", "-3", "-6", "nan"], ["0.02", "-0.01", "0", "inf"], ["0", "0", "0", "0"]]  # cells: raw values
    assert "%{customdata" in trace.hovertemplate


@pytest.mark.parametrize(
    "tokens, shown",
    [
        # byte-level BPE (GPT-2, Llama 3, Qwen): " é 中文", a character shown on the token that completes it
        (["Ġ", "Ã", "©", "Ġ", "ä", "¸", "Ń", "æĸĩ"], [" ", "", "é", " ", "", "", "中", "文"]),
        (["Hello", "Ġworld", "Ċ", "ĉx", "<|im_end|>"], ["Hello", " world", "\n", "\tx", "<|im_end|>"]),
        # SentencePiece: ▁ is a space, <0xE4> a byte
        (["▁Hi", "<0xE4>", "<0xB8>", "<0xAD>", "<PAD>"], [" Hi", "", "", "中", "<PAD>"]),
        (["▁caf", "é", "<0x0A>"], [" caf", "é", "\n"]),  # SentencePiece text is Unicode, not the byte table
        (["Hi", "<｜end▁of▁sentence｜>"], ["Hi", "<｜end▁of▁sentence｜>"]),  # a special token as written
        # already text, or not decodable as bytes as a whole: as they are
        (["威", "仪", "<EOD>"], ["威", "仪", "<EOD>"]),
        (["café", " au", " lait"], ["café", " au", " lait"]),
        (["Nie", "mog", "ę", "być"], ["Nie", "mog", "ę", "być"]),  # ę and ć are in the byte table too
        # bytes that are no character (cut at truncation, sampled early in training): only those marked
        (["Ġ3", "×"], [" 3", "⟨0xD7⟩"]),
        (["Ġcaf", "Ã"], [" caf", "⟨0xC3⟩"]),
        (["ä", "¸", "Ń", "æ", "<|im_end|>", "Ġok"], ["", "", "中", "⟨0xE6⟩", "<|im_end|>", " ok"]),
        (["Hi", "¶", "Ġthere", "ä½", "Ġ!"], ["Hi", "⟨0xB6⟩", " there", "", "⟨0xE4⟩⟨0xBD⟩ !"]),
        (["▁a", "<0xE4>", "<0xB8>", "▁b"], [" a", "", "", "⟨0xE4⟩⟨0xB8⟩ b"]),
        (["Ġ0", "ě", "Ġ1"], [" 0", "⟨0x1B⟩", " 1"]),  # a control byte, shown as a byte
        (["caf", "é"], ["caf", "é"]),  # plain text: as bytes é is a lone lead byte, and nothing proves the byte table
        ([], []),
    ],
)
def test_tokens_are_shown_as_the_text_they_stand_for(tokens, shown):
    assert readable_tokens(tokens) == shown


def test_text_utf8_cannot_carry_is_shown_with_a_replacement_character():
    assert valid_text("a\ud83db") == "a\ufffdb" and valid_text("r_\udcff.jsonl") == "r_\ufffd.jsonl"
    assert valid_text("😀 ok") == "😀 ok"


def test_markdown_literal_keeps_html_entities_and_markdown_as_written():
    assert markdown_literal("fn&amp;1 [x](http://h) :red[y]") == "fn\\&amp;1 \\[x\\]\\(http\\:\u200b//h\\) \\:red\\[y\\]"
    # GitHub's autolinks, which escapes do not stop, are broken by an invisible space.
    assert markdown_literal("www.x.org a@x.org") == "www\u200b.x.org a\u200b@x.org"
    # Streamlit's icons and arrows, made after the escapes are read, are broken likewise; a minus or a date is left alone.
    assert markdown_literal(":material/verified: :streamlit: a -> b") == "\\:\u200bmaterial/verified\\: \\:\u200bstreamlit\\: a -\u200b\\> b"
    assert [markdown_literal(name) for name in ("x >= 1", "-- y", "a-b", "-1", "2026-11-26")] == ["x \\>\u200b= 1", "-\u200b- y", "a-b", "-1", "2026-11-26"]


# A name keeps to its line: a newline and "===" under it made a caption a heading, "- " or "1. " at its start a list.
def test_markdown_literal_and_one_line_keep_a_name_on_its_line_as_written():
    assert one_line("x\n===\r\t\x07\u202eabc\u2028") == "x\\n===\\r\\t\\u0007\\u202eabc\\u2028"
    assert markdown_literal("x\n===") == "x\\\\n==="  # the escape's backslash escaped: it shows as \n
    assert [markdown_literal(name) for name in ("- a", "+ b", "1. c", "12.", "  3. d")] == ["\\- a", "\\+ b", "1\\. c", "12\\.", "  3\\. d"]
    assert [markdown_literal(name) for name in ("0.04", "-1", "2026-11-26", "a - b")] == ["0.04", "-1", "2026-11-26", "a - b"]
    assert one_line("plain name/with: punctuation") == "plain name/with: punctuation"


# Select widgets tell options apart by their labels: options that show alike each get a label of their own, in order.
def test_options_that_show_alike_get_labels_of_their_own():
    options = ["a\nb", "a\\nb", "x", "a\\nb (2)", 1, "1", True, "x"]
    label = distinct_labels(options)
    assert [label(option) for option in options] == ["a\\nb", "a\\nb (2)", "x", "a\\nb (2) (2)", "1", "1 (2)", "True", "x"]
    assert label("not an option\n") == "not an option\\n"  # a value outside them: as one_line shows it
    assert distinct_labels([".", "(this folder)"], lambda name: "(this folder)" if name == "." else name)("(this folder)") == "(this folder) (2)"


# A group is judged on the rewards it has: [1, null, 1] has no signal, [0, 1] has, and [null, null] is neither (missing
# in the table, left out of the curve's share, which Step-Signals uses; a step of only such groups has no share). The
# curve, the table and the members of zero-signal groups (the search's filter, the signal's examples) agree.
def test_zero_signal_is_counted_alike_by_the_curve_and_the_group_table():
    table = pd.DataFrame({
        "step": [1] * 7 + [2] * 2, "group_id": ["a", "a", "a", "b", "b", "c", "c", "d", "d"], "prompt": ["p"] * 9,
        "reward": [1.0, np.nan, 1.0, np.nan, np.nan, 0.0, 1.0, np.nan, np.nan], "truncated": [np.nan] * 9,
    })
    first = table[table["step"] == 1].assign(group=lambda rows: group_numbers(rows["group_id"]))
    groups = group_table(first).set_index("group_id")
    assert groups["zero signal"].dropna().to_dict() == {"a": True, "c": False} and groups["zero signal"].isna()["b"]
    assert groups.index.tolist() == ["c", "a", "b"]  # by spread: a group without a reward has none, last
    assert int(groups["zero signal"].sum()) == 1
    shares = group_signal_by_step(table)["zero-signal groups"]
    assert shares[1] == 0.5 and np.isnan(shares[2])
    assert zero_signal_members(table).tolist() == [True, True, True, False, False, False, False, False, False]


def test_rewards_spread_beyond_float_range_leave_the_distribution_out_instead_of_failing():
    for counted in (False, True):
        chart = reward_distribution_chart(pd.DataFrame({"reward": [1e308, -1e308], "ref_reward": [0.0, 1.0]}), counted)
        bars = chart["data"]["values"] if counted else chart["datasets"]["bars"]
        assert {bar["series"] for bar in bars} == {"Ref Reward"}


def test_running_text_isolates_each_token_and_keeps_empty_ones_hoverable():
    rows = TokenRows(tokens=["\u202eabc", "", "end"], is_pad=np.zeros(3, dtype=bool), is_tool=np.zeros(3, dtype=bool), positions=np.arange(3), values={"kl": np.array([0.1, 0.2, 0.3])})
    page = running_text_html(rows, "kl")
    assert ".rl-running-text span {unicode-bidi: isolate; box-shadow: inset -1px" in board.PAGE_STYLE and "class='rl-running-text'" in page
    assert page.count("<span") == 3 and ">\u200b</span>" in page and "#1 &#x27;&#x27;" in page


# TRL's kl of a step, written out from per-token values: per loss pass the token mean of k3 over all ranks' tokens
# (TRL >= 1.9) or the mean of each rank's token mean (before), then the mean over the step's passes.
def test_trl_kl_is_the_mean_over_loss_passes_of_their_token_means():
    rng = np.random.default_rng(0)
    lines = []  # step, micro_batch, rank, per-token k3
    for step in (1, 2):
        for micro_batch in (0, 1):
            for rank in ("r0", "r1"):
                for _ in range(3):
                    lines.append((step, micro_batch, rank, rng.exponential(0.1, size=rng.integers(1, 9))))
    samples = pd.DataFrame({
        "step": [line[0] for line in lines],
        "micro_batch": [float(line[1]) for line in lines],
        "path": [line[2] for line in lines],
        "sum_kl_k3": [line[3].sum() for line in lines],
        "k3_tokens": [float(len(line[3])) for line in lines],
    })
    for pooled in (True, False):
        expected = {}
        for step in (1, 2):
            passes = []
            for micro_batch in (0, 1):
                chosen = [line for line in lines if line[:2] == (step, micro_batch)]
                if pooled:
                    passes.append(np.concatenate([line[3] for line in chosen]).mean())
                else:
                    passes.append(np.mean([np.concatenate([line[3] for line in chosen if line[2] == rank]).mean() for rank in ("r0", "r1")]))
            expected[step] = np.mean(passes)
        assert trl_kl_by_step(samples, pooled_ranks=pooled).to_dict() == pytest.approx(expected, rel=1e-12)
    assert trl_pools_ranks("1.16.0") and trl_pools_ranks("1.9.0") and not trl_pools_ranks("0.29.0") and trl_pools_ranks(None)


# TRL kl from the lines counts the tokens that have a k3 value, as avg_kl_k3 does: a tool's token and a null ref
# log-prob add none (a pass with none counts as 0, as TRL divides by at least 1). Recomputed here from the lines.
def test_trl_kl_from_the_lines_counts_only_the_tokens_with_a_k3_value(tmp_path):
    lines = [
        sample(1, micro_batch=0, response_tokens=["a", "b", "c"], logprobs=[-0.1, -0.2, -0.3], ref_logprobs=[-0.5, None, -0.1]),
        sample(1, micro_batch=0, response_tokens=["d", "e"], logprobs=[-0.4, -0.9], ref_logprobs=[-0.2, -0.3], tool_mask=[1, 0]),
        sample(1, micro_batch=1, response_tokens=["f"], logprobs=[-1.0], ref_logprobs=[None]),
    ]
    run = load(write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", lines).parent)
    k3 = [math.exp(ref - logp) - (ref - logp) - 1 for logp, ref in [(-0.1, -0.5), (-0.3, -0.1), (-0.4, -0.2)]]
    assert trl_kl_by_step(run.samples).to_dict() == pytest.approx({1: (math.fsum(k3) / 3 + 0.0) / 2}, rel=1e-12)
    assert run.samples["k3_tokens"].tolist() == [2, 1, 0]


# The bundled logger runs (TRL, beta > 0, logging every step): TRL's kl recomputed from the lines, as Step-KL draws it,
# equals the kl the trainer logged (the metrics file) at every step, to float32 precision.
@pytest.mark.parametrize("name", ["grpo_tiny_example", "grpo_tiny_example_lr1e-4"])
def test_trl_kl_from_the_bundled_lines_equals_the_trainers_logged_kl(name):
    run_dir = str(board.DEFAULT_ROOT / name)
    run = RunStore(run_dir).load(10240, parallel=False)
    logged = read_history(run_dir).train.set_index("step")["kl"].dropna()
    recomputed = trl_kl_by_step(run.samples, trl_pools_ranks(run.meta["trl_version"]))
    assert not run.downsampled and run.samples["micro_batch"].notna().all()
    assert list(recomputed.index) == list(logged.index) == run.steps
    np.testing.assert_allclose(recomputed.to_numpy(), logged.to_numpy(), rtol=1e-5)


# Drop System Prompt: the End Token of System Prompt first (all before it goes), else a chat template's system turn.
@pytest.mark.parametrize(
    ("prompt", "shown"),
    [
        ("You are kind.<endofsystem>What is 2+2?", "What is 2+2?"),
        ("<|im_start|>system\nYou are kind.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n", "<|im_start|>user\nHi<|im_end|>\n"),
        (
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
        ),
        ("<|im_start|>user\nno system turn here<|im_end|>\n", "<|im_start|>user\nno system turn here<|im_end|>\n"),
        ("<|im_start|>user\nsay <|im_start|>system but no end", "<|im_start|>user\nsay <|im_start|>system but no end"),
        # a system turn after another turn is not the prompt's system prompt: nothing before it is dropped
        ("<|im_start|>user\nHi<|im_end|>\n<|im_start|>system\nX<|im_end|>\n", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>system\nX<|im_end|>\n"),
        ("<|im_start|>system\nA<|im_end|><|im_start|>user\nB<|im_end|>\n", "<|im_start|>user\nB<|im_end|>\n"),
    ],
)
def test_drop_system_prompt_finds_the_end_token_chatml_and_llama_3(prompt, shown):
    assert clean_text(prompt, None, "<endofsystem>") == shown
    assert clean_text(prompt, None, None) == prompt  # Drop System Prompt off
    assert (system_prompt_span(prompt, "<endofsystem>") is None) == (shown == prompt)


# A prompt of megabytes with system turns that never end is searched in time proportional to its length.
def test_drop_system_prompt_takes_linear_time_on_an_unended_system_turn():
    for text in ("<|im_start|>system\n" * 500_000, "<|start_header_id|>system<|end_header_id|>" * 200_000):
        started = time.perf_counter()
        assert clean_text(text, None, "<endofsystem>") == text
        assert time.perf_counter() - started < 0.5


def test_largest_changes_skip_missing_and_infinite_means():
    per_step = pd.Series({1: 0.0, 2: 1.0, 3: np.nan, 4: 5.0, 5: np.inf, 6: -2.0, 7: -1.5}).sample(frac=1, random_state=0)
    changes = largest_changes(per_step, count=3)
    assert changes.to_dict() == {2: 1.0, 7: 0.5}  # 3-7 involve a missing or infinite mean: no change to speak of


# The page's token views show a response's first TOKEN_VIEW_TOKENS tokens, with a note: a runaway generation logged
# whole (16.7 million tokens in one line) took a minute and 7.5 GiB of the server. Run.tokens has them all.
def test_the_token_views_show_a_responses_first_tokens_with_a_note(tmp_path):
    count = 25
    line = sample(
        1, response_tokens=[f"t{i}" for i in range(count)], logprobs=[-0.1 * i for i in range(count)], ref_logprobs=[-0.2 * i for i in range(count)],
        tool_mask=[int(i % 5 != 3) for i in range(count)], loss_passes=[{"step": 1, "micro_batch": 0, "clipped": [1] * count}],
    )
    path = write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", [line])
    row = load(path.parent).step_rows(1).iloc[0]
    whole = read_sample_tokens(row["path"], int(row["offset"]), int(row["length"]), 1)
    shown = read_sample_tokens(row["path"], int(row["offset"]), int(row["length"]), 1, most_tokens=10)
    assert len(whole.response_tokens) == count and not whole.notes
    assert shown.response_tokens == whole.response_tokens[:10] and shown.notes == ["This response has 25 tokens: the token views show its first 10."]
    for key in ("logprobs", "ref_logprobs", "tool"):
        assert np.array_equal(getattr(shown, key), getattr(whole, key)[:10], equal_nan=True)
    rows = token_rows(shown, "k3", None)
    tool = np.arange(10) % 5 == 3  # a tool's tokens have no values
    assert len(rows.tokens) == 10 and np.array_equal(rows.values["clipped"], np.where(tool, np.nan, 1.0), equal_nan=True)
    assert board.TOKEN_VIEW_TOKENS == 1 << 20 and "TOKEN_VIEW_TOKENS)" in inspect.getsource(board.load_sample_tokens)
