"""Step-Mismatch on the page (AppTest): the view only for runs with the sampler's log-probs, its curve equal to the
engine's table recomputed from the lines at the correction and thresholds chosen (the run's own from its metadata by
default), a compared run as a second line, the largest |Δ| tokens, a click on one showing its sample with the
sampler's columns in the token table, and the mismatch columns in the batch table and the search's filters; Δ split
into the renormalisation of the sampler's truncated distribution and drift for the bundled top-p run, whose lines
carry the kept mass, and a caption saying what the split needs for a run without it."""

import json
import math

import numpy as np
import pytest

from tests.support import SAMPLES
from tests.support.page import chart_spec, click_row, curve_views, lines_of, load_and_view, start, widget
from tests.support.runs import sample, write_lines

BUNDLED = SAMPLES / "grpo_tiny_mismatch_example"

STEPS, SAMPLES, TOKENS = 4, 6, 8


def mismatch_lines(seed: int, spread: float) -> list[dict]:
    rng = np.random.default_rng(seed)
    lines = []
    for step in range(1, STEPS + 1):
        for index in range(SAMPLES):
            logprobs = [float(-rng.exponential(1.0)) for _ in range(TOKENS)]
            sampler = [logp + float(rng.normal(0, spread)) for logp in logprobs]
            lines.append(sample(step, reward=float(index % 2), response_tokens=[f"w{k}" for k in range(TOKENS)], logprobs=logprobs, sampler_logprobs=sampler))
    return lines


@pytest.fixture
def root(tmp_path):
    write_lines(tmp_path / "runs" / "plain" / "rollout_data_rank_0.jsonl", [sample(step, logprobs=[-1.0, -2.0], response_tokens=["a", "b"]) for step in (1, 2)])
    write_lines(tmp_path / "runs" / "other" / "rollout_data_rank_0.jsonl", mismatch_lines(1, 0.2))
    write_lines(tmp_path / "runs" / "shown" / "rollout_data_rank_0.jsonl", mismatch_lines(0, 0.5))
    (tmp_path / "runs" / "shown" / "rollout_meta_20260101T000000Z.json").write_text(json.dumps({"importance_sampling": {"mode": "token_mask", "clip_min": 0.5, "clip_max": 2.0}}))
    return tmp_path / "runs"


def open_mismatch(app):
    app.session_state["curve_view"] = "Step-Mismatch"
    app.run()
    assert not app.exception, app.exception
    return app


def mismatch_points(app) -> dict:
    [tab] = [tab for tab in curve_views(app) if tab.label == "Step-Mismatch"]
    charts = [chart_spec(chart) for chart in tab.get("vega_lite_chart")]
    [chart] = [chart for chart in charts if chart["title"].startswith("👾 Sampler-trainer mismatch")]
    points = {}
    for point in chart["data"]["values"]:
        points.setdefault(point["series"], {})[point["step"]] = point["value"]
    return points


# The share of each step's tokens whose ratio exp(Δ) is outside [low, high], from the lines.
def masked_share(lines: list[dict], low: float, high: float) -> dict:
    shares = {}
    for step in range(1, STEPS + 1):
        ratios = [math.exp(a - b) for line in lines if line["step"] == step for a, b in zip(line["logprobs"], line["sampler_logprobs"])]
        shares[step] = 100 * np.mean([not low <= r <= high for r in ratios])
    return shares


def test_step_mismatch_follows_the_correction_chosen_and_a_compared_run(root, monkeypatch):
    app = start(root, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("plain")
    load_and_view(app)
    assert "Step-Mismatch" not in [tab.label for tab in curve_views(app)]  # no sampler log-probs: no view
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("shown")
    load_and_view(app)
    open_mismatch(app)
    # The run's metadata names its correction: the view starts there.
    assert widget(app.selectbox, "Correction").value == "token_mask"
    assert (widget(app.number_input, "C_min").value, widget(app.number_input, "C_max").value) == (0.5, 2.0)
    lines = lines_of(root / "shown")
    expected = {step: np.mean([abs(a - b) for line in lines if line["step"] == step for a, b in zip(line["logprobs"], line["sampler_logprobs"])]) for step in range(1, STEPS + 1)}
    assert mismatch_points(app)["mean |Δ|"] == pytest.approx(expected)
    widget(app.selectbox, "Per step").set_value("tokens corrected (%)").run()
    assert mismatch_points(app)["tokens corrected (%)"] == pytest.approx(masked_share(lines, 0.5, 2.0))
    widget(app.number_input, "C_max").set_value(1.2).run()
    assert mismatch_points(app)["tokens corrected (%)"] == pytest.approx(masked_share(lines, 0.5, 1.2))
    assert 0 < min(masked_share(lines, 0.5, 1.2).values())  # the thresholds matter for these lines

    widget(app.sidebar.multiselect, "Compare with").set_value(["other"]).run()
    points = mismatch_points(app)
    assert set(points) == {"shown", "other"}
    assert points["other"] == pytest.approx(masked_share(lines_of(root / "other"), 0.5, 1.2))


def test_a_largest_mismatch_clicked_shows_its_sample_with_the_sampler_columns(root, monkeypatch):
    app = start(root, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("shown")
    open_mismatch(load_and_view(app))
    lines = lines_of(root / "shown")
    every = sorted(((abs(a - b), line["step"], position % SAMPLES, k) for position, line in enumerate(lines) for k, (a, b) in enumerate(zip(line["logprobs"], line["sampler_logprobs"]))), reverse=True)
    frame = next(frame for frame in app.dataframe if frame.key and frame.key.startswith("mismatch:largest:"))
    assert list(zip(frame.value["step"], frame.value["sample"], frame.value["token position"])) == [row[1:] for row in every[:20]]
    assert frame.value["token"].tolist() == [f"w{position}" for *_, position in every[:20]]
    # A click on the second row, sent as the browser sends it (tests/page/test_search.py says why).
    click_row(app, frame, 1)
    _, step, index, position = every[1]
    assert widget(app.slider, f"Step Index({STEPS} total steps)").value == step
    assert widget(app.number_input, "Sample index in current step batch").value == index
    line = [line for line in lines if line["step"] == step][index]
    token_table = next(frame.value for frame in app.dataframe if "sampler_logp" in frame.value.columns)
    assert token_table["delta"].tolist() == pytest.approx([a - b for a, b in zip(line["logprobs"], line["sampler_logprobs"])])
    assert abs(token_table["delta"].iloc[position]) == pytest.approx(every[1][0])
    batch = next(frame.value for frame in app.dataframe if "avg_abs_mismatch" in frame.value.columns)
    assert batch["avg_abs_mismatch"].iloc[index] == pytest.approx(np.mean([abs(a - b) for a, b in zip(line["logprobs"], line["sampler_logprobs"])]))
    assert "avg_abs_mismatch" in widget(app.multiselect, "Filter by").options


# The correction chosen stays when another view is chosen and this one again (its widgets are drawn only in their view);
# metadata with integer bounds (TRL keeps them as given) starts the inputs.
def test_the_correction_stays_across_tabs_and_starts_from_integer_bounds(root, monkeypatch):
    (root / "shown" / "rollout_meta_20260101T000000Z.json").write_text(json.dumps({"importance_sampling": {"mode": "token_truncate", "clip_min": 0, "clip_max": 2}}))
    app = start(root, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("shown")
    open_mismatch(load_and_view(app))
    assert widget(app.selectbox, "Correction").value == "token_truncate"
    assert (widget(app.number_input, "C_min").value, widget(app.number_input, "C_max").value) == (0.0, 2.0)
    widget(app.selectbox, "Correction").set_value("sequence_mask").run()
    widget(app.number_input, "C_max").set_value(1.5).run()
    app.session_state["curve_view"] = "Step-Reward"
    app.run()
    open_mismatch(app)
    assert widget(app.selectbox, "Correction").value == "sequence_mask" and widget(app.number_input, "C_max").value == 1.5


def test_without_the_kept_mass_a_caption_says_what_the_split_needs(root, monkeypatch):
    app = start(root, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("shown")
    open_mismatch(load_and_view(app))
    assert not any(item.value.startswith("**Renormalisation:**") for item in app.markdown)
    [caption] = [item.value for item in app.caption if "sampler_kept_logmass" in item.value]
    assert "needs the sampler's kept mass" in caption
    assert not {"Δ from renormalisation", "drift (Δ − log kept mass)"} & set(widget(app.selectbox, "Per step").options)


# The bundled top-p run: the split's line and its two series, equal to a recomputation from its lines.
@pytest.mark.skipif(not BUNDLED.is_dir(), reason="no bundled mismatch run")
def test_the_bundled_top_p_run_splits_delta_into_renormalisation_and_drift(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    root.mkdir()
    (root / BUNDLED.name).symlink_to(BUNDLED, target_is_directory=True)
    app = start(root, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").set_value(BUNDLED.name)
    open_mismatch(load_and_view(app))
    lines = lines_of(BUNDLED)
    delta = {step: [] for step in sorted({line["step"] for line in lines})}
    kept = {step: [] for step in delta}
    for line in lines:
        delta[line["step"]] += [a - b for a, b in zip(line["logprobs"], line["sampler_logprobs"])]
        kept[line["step"]] += line["sampler_kept_logmass"]
    every_delta, every_kept = np.concatenate(list(delta.values())), np.concatenate(list(kept.values()))
    mean, renormalisation = np.abs(every_delta).mean(), -every_kept.mean()
    drift = np.abs(every_delta - every_kept).mean()
    assert renormalisation > 0.8 * mean and drift < 0.2 * mean  # top-p's renormalisation is most of Δ
    [split] = [item.value for item in app.markdown if item.value.startswith("**Renormalisation:**")]
    assert f"mean |Δ| = {mean:.4g} " in split and f"{len(every_delta):,} tokens" in split
    assert f", {renormalisation:.4g} ({100 * renormalisation / mean:.0f} %) is the renormalisation" in split
    assert f"mean |Δ − log kept mass|, is {drift:.4g}." in split
    largest = next(frame.value for frame in app.dataframe if frame.key and frame.key.startswith("mismatch:largest:"))
    assert largest["drift"].tolist() == pytest.approx((largest["Δ"] - largest["log kept mass"]).tolist())
    assert (largest["log kept mass"] < 0).all()
    widget(app.selectbox, "Per step").set_value("Δ from renormalisation").run()
    expected = {step: -np.mean(values) for step, values in kept.items()}
    assert mismatch_points(app)["Δ from renormalisation"] == pytest.approx(expected)
    widget(app.selectbox, "Per step").set_value("drift (Δ − log kept mass)").run()
    expected = {step: np.mean(np.abs(np.subtract(delta[step], kept[step]))) for step in delta}
    assert mismatch_points(app)["drift (Δ − log kept mass)"] == pytest.approx(expected)


def test_metadata_of_the_wrong_types_leaves_the_views_that_read_it_at_their_defaults(tmp_path, monkeypatch):
    write_lines(tmp_path / "runs" / "shown" / "rollout_data_rank_0.jsonl", mismatch_lines(0, 0.5))
    (tmp_path / "runs" / "shown" / "rollout_meta_1.json").write_text(json.dumps({"importance_sampling": {"mode": ["x"], "clip_max": "2"}, "loss": [1]}))
    app = open_mismatch(load_and_view(start(tmp_path / "runs", monkeypatch)))
    assert widget(app.selectbox, "Correction").value == "sequence_mask"  # the board's default: the metadata's mode left out
    app.session_state["curve_view"] = "Step-Update"
    app.run()
    assert not app.exception, app.exception
