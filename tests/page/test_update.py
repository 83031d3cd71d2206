"""Step-Update on the page (AppTest): the view only for runs whose lines have loss passes, its clip-fraction curve equal
to TRL's definition recomputed here from the lines (and the caption's comparison with the run's own logged values), a
compared run as a second line, the samples that drove a step's update, and a click on one showing its sample with the
update columns in the token table."""

import json

import numpy as np
import pytest

from rl_board.text import markdown_literal, one_line
from tests.support.page import chart_spec, click_row, curve_views, lines_of, load_and_view, start, widget
from tests.support.runs import sample, write_lines

GENERATIONS, SAMPLES, TOKENS, EPSILON = 3, 6, 8, 0.05


def update_lines(seed: int) -> list[dict]:
    """Generation batches at steps 1, 3, 5, each trained twice (num_iterations=2): at its own step and the next."""
    rng = np.random.default_rng(seed)
    lines = []
    for generation in range(GENERATIONS):
        step = 2 * generation + 1
        for index in range(SAMPLES):
            advantage = float(rng.normal())
            passes = []
            for iteration in range(2):
                ratio = np.ones(TOKENS) if iteration == 0 else np.exp(rng.normal(0, 0.08, TOKENS))
                clipped = np.where((ratio > 1 + EPSILON) & (advantage > 0), 1, np.where((ratio < 1 - EPSILON) & (advantage < 0), -1, 0))
                weight = np.where(clipped != 0, 0.0, ratio * advantage / (TOKENS * SAMPLES))
                passes.append({"step": step + iteration, "micro_batch": 0, "policy_ratio": ratio.tolist(), "clipped": clipped.tolist(), "update_weight": weight.tolist()})
            logprobs = [float(-rng.exponential(1.0)) for _ in range(TOKENS)]
            lines.append(sample(step, reward=float(index % 3), advantage=advantage, response_tokens=[f"w{k}" for k in range(TOKENS)], logprobs=logprobs, loss_passes=passes))
    return lines


def region_share(lines: list[dict]) -> dict[int, float]:
    """TRL's clip_ratio/region_mean per step: each pass (step, micro-batch) pools its tokens; one pass per step here."""
    clipped, tokens = {}, {}
    for line in lines:
        for loss_pass in line["loss_passes"]:
            clipped[loss_pass["step"]] = clipped.get(loss_pass["step"], 0) + sum(value != 0 for value in loss_pass["clipped"])
            tokens[loss_pass["step"]] = tokens.get(loss_pass["step"], 0) + len(loss_pass["clipped"])
    return {step: clipped[step] / tokens[step] for step in clipped}


@pytest.fixture
def root(tmp_path):
    write_lines(tmp_path / "runs" / "plain" / "rollout_data_rank_0.jsonl", [sample(step, logprobs=[-1.0, -2.0], response_tokens=["a", "b"]) for step in (1, 2)])
    write_lines(tmp_path / "runs" / "other" / "rollout_data_rank_0.jsonl", update_lines(1))
    shown = update_lines(0)
    write_lines(tmp_path / "runs" / "shown" / "rollout_data_rank_0.jsonl", shown)
    # the trainer's own log: TRL's value at each step, one of them off by 0.01
    logged = {step: value + (0.01 if step == 4 else 0.0) for step, value in region_share(shown).items()}
    metrics = [{"step": step, "kind": "train", "clip_ratio/region_mean": value} for step, value in logged.items()]
    (tmp_path / "runs" / "shown" / "rollout_metrics_20260101T000000Z.jsonl").write_text("".join(json.dumps(line) + "\n" for line in metrics))
    return tmp_path / "runs"


def open_update(app):
    app.session_state["curve_view"] = "Step-Update"
    app.run()
    assert not app.exception, app.exception
    return app


def update_points(app) -> dict:
    [tab] = [tab for tab in curve_views(app) if tab.label == "Step-Update"]
    [chart] = [chart_spec(chart) for chart in tab.get("vega_lite_chart") if chart_spec(chart)["title"].startswith("👾 What the loss passes did")]
    points = {}
    for point in chart["data"]["values"]:
        points.setdefault(point["series"], {})[point["step"]] = point["value"]
    return points


def test_step_update_draws_trls_clip_fraction_from_the_lines(root, monkeypatch):
    app = start(root, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("plain")
    load_and_view(app)
    assert "Step-Update" not in [tab.label for tab in curve_views(app)]  # no loss passes: no tab
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("shown")
    open_update(load_and_view(app))
    assert widget(app.selectbox, "Per step").value == "clip_ratio/region_mean"
    expected = region_share(lines_of(root / "shown"))
    assert update_points(app)["clip_ratio/region_mean"] == pytest.approx(expected)
    assert 0 < max(expected.values())  # the lines clip: the curve means something
    caption = next(caption.value for caption in app.caption if "The trainer logged clip_ratio/region_mean" in caption.value)
    assert f"at {len(expected)} of these steps" in caption and "difference from the lines' recomputation is 0.01" in caption

    widget(app.sidebar.multiselect, "Compare with").set_value(["other"]).run()
    points = update_points(app)
    assert set(points) == {"shown", "other"}
    assert points["other"] == pytest.approx(region_share(lines_of(root / "other")))


# Loaded at fewer samples a step than the trainer's batch, the shares are the loaded samples': the caption compared
# them with the trainer's logged values as if they were the same (Step-KL's TRL line is hidden then, as here).
def test_a_downsampled_run_s_clip_shares_are_not_compared_with_the_trainer_s(root, monkeypatch):
    app = start(root, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("shown")
    widget(app.sidebar.number_input, "Max Samples Each Step").set_value(SAMPLES - 1)
    open_update(load_and_view(app))
    captions = [caption.value for caption in app.caption if "Steps are the optimizer steps" in caption.value]
    assert len(captions) == 1 and "not compared here" in captions[0] and "difference from the lines' recomputation" not in captions[0]


def test_a_sample_that_drove_a_step_clicked_shows_its_update_columns(root, monkeypatch):
    app = start(root, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("shown")
    open_update(load_and_view(app))
    lines = lines_of(root / "shown")
    step = 2 * GENERATIONS  # the last step: the second pass over the last generation batch
    assert widget(app.selectbox, "Samples that drove the update of step").value == step
    weights = [(sum(abs(w) for w in p["update_weight"]), line["step"], position % SAMPLES) for position, line in enumerate(lines) for p in line["loss_passes"] if p["step"] == step]
    total = sum(weight for weight, *_ in weights)
    weights.sort(reverse=True)
    frame = next(frame for frame in app.dataframe if frame.key and frame.key.startswith("update:drivers:"))
    assert list(zip(frame.value["step"], frame.value["sample"])) == [row[1:] for row in weights]
    assert frame.value["share of |update|"].tolist() == pytest.approx([weight / total for weight, *_ in weights])
    # A click on the second row, sent as the browser sends it (tests/page/test_search.py says why).
    click_row(app, frame, 1)
    _, generation_step, index = weights[1]
    assert widget(app.number_input, "Sample index in current step batch").value == index
    line = [line for line in lines if line["step"] == generation_step][index]
    token_table = next(frame.value for frame in app.dataframe if "update_weight" in frame.value.columns)
    first, second = line["loss_passes"]
    assert token_table["update_weight"].tolist() == pytest.approx([a + b for a, b in zip(first["update_weight"], second["update_weight"])])
    assert token_table["clipped"].tolist() == [a + b for a, b in zip(first["clipped"], second["clipped"])]
    assert token_table["policy_ratio"].tolist() == pytest.approx(second["policy_ratio"])
    batch = next(frame.value for frame in app.dataframe if "clipped_tokens" in frame.value.columns)
    assert batch["clipped_tokens"].iloc[index] == sum(value != 0 for p in line["loss_passes"] for value in p["clipped"])


# A name and settings from the data that once reached Markdown or a chart's title as they were: the metadata's
# correction mode and logging_steps in the Step-Mismatch and Step-Update captions, a reward function in Largest
# changes' label, a tool in Step-Tools' chart title.
HOSTILE = "**b** :red[x] $y$ [l](javascript:alert(1))\n==="


def test_names_and_settings_from_the_data_show_as_written_in_captions_labels_and_titles(tmp_path, monkeypatch):
    lines = update_lines(0)
    for index, line in enumerate(lines):
        line["sampler_logprobs"] = [value + 0.1 for value in line["logprobs"]]
        line["rewards_per_func"] = {HOSTILE: float(index % 2)}
        line["turns"] = [{"role": "assistant", "text": "a", "tool_calls": [{"name": HOSTILE, "arguments": {}}]}, {"role": "tool", "text": "r", "tool_name": HOSTILE}]
    run_dir = tmp_path / "runs" / "shown"
    write_lines(run_dir / "rollout_data_rank_0.jsonl", lines)
    (run_dir / "rollout_meta_1.json").write_text(json.dumps({"importance_sampling": {"mode": HOSTILE, "clip_min": 0.5, "clip_max": 2.0}, "trainer_config": {"logging_steps": HOSTILE}}))
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    shown = markdown_literal(HOSTILE)
    assert "\n" not in shown and "\\*\\*b\\*\\* \\:red\\[x\\] \\$y\\$ \\[l\\]\\(javascript\\:alert\\(1\\)\\)" in shown
    widget(app.multiselect, "Reward series").set_value([f"rewards/{HOSTILE}"]).run()
    assert [group.label for group in app.button_group if group.label.startswith("Largest changes of")] == [f"Largest changes of {markdown_literal('rewards/' + HOSTILE)} (mean, from the step before)"]
    for view, said in (("Step-Mismatch", f"The trainer applied {shown} at [0.5, 2.0]"), ("Step-Update", f"The trainer logged every {shown} steps")):
        app.session_state["curve_view"] = view
        app.run()
        assert not app.exception and [caption for caption in app.caption if said in caption.value] != []
    app.session_state["curve_view"] = "Step-Tools"
    app.run()
    per_step = widget(app.selectbox, "Per step")
    per_step.set_value(next(option for option in per_step.options if option.startswith("calls per sample:"))).run()
    [tab] = [tab for tab in curve_views(app) if tab.label == "Step-Tools"]
    titles = [chart_spec(chart)["title"] for chart in tab.get("vega_lite_chart")]
    assert [title for title in titles if title.endswith(one_line(HOSTILE)) and "\n" not in title] != []
