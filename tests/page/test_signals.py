"""Step-Signals on the page (AppTest): the view only for runs with enough steps, a signal's curve equal to its rule
recomputed here from the lines, the steps where it fired marked, the rule under the chart, a compared run as a second
line, and a click on a firing's example sample showing that sample."""


import numpy as np
import pandas as pd
import pytest

from tests.support.page import chart_spec, click_row, curve_views, lines_of, load_and_view, start, widget
from tests.support.runs import sample, write_lines

STEPS, SHIFT, WINDOW = 30, 21, 5
MIXED, ONES, ZEROS = [1.0, 0.0, 1.0, 0.0], [1.0] * 4, [0.0] * 4


def collapse_lines(shift: int) -> list[dict]:
    """4 groups of 4 completions a step: every group's rewards mixed before `shift`, three groups all-equal from it."""
    lines = []
    for step in range(1, STEPS + 1):
        for group, rewards in enumerate([MIXED] * 4 if step < shift else [ONES, ZEROS, ONES, MIXED]):
            lines += [sample(step, reward=reward, group_id=f"{step}-{group}", response_tokens=["w"] * (10 + index)) for index, reward in enumerate(rewards)]
    return lines


@pytest.fixture
def root(tmp_path):
    write_lines(tmp_path / "runs" / "short" / "rollout_data_rank_0.jsonl", [line for line in collapse_lines(3) if line["step"] <= 2 * WINDOW - 1])
    write_lines(tmp_path / "runs" / "shown" / "rollout_data_rank_0.jsonl", collapse_lines(SHIFT))
    write_lines(tmp_path / "runs" / "other" / "rollout_data_rank_0.jsonl", collapse_lines(SHIFT + 4))
    return tmp_path / "runs"


def zero_signal_rule(lines: list[dict]) -> tuple[dict, list]:
    """The rule recomputed: the share of all-equal groups per step, its median over the last WINDOW steps (the value),
    fired where that is >= 0.3 and >= 0.2 above the median over the WINDOW steps before."""
    frame = pd.DataFrame(lines)
    share = (frame.groupby(["step", "group_id"])["reward"].nunique() == 1).groupby(level="step").mean()
    medians = {step: float(np.median(share.loc[step - WINDOW + 1: step])) for step in share.index if step >= WINDOW}
    fired = [step for step in medians if step - WINDOW in medians and medians[step] >= 0.3 and medians[step] - medians[step - WINDOW] >= 0.2 - 1e-12]
    return medians, fired


def open_signals(app, signal: str):
    app.session_state["curve_view"] = "Step-Signals"
    app.run()
    assert not app.exception, app.exception
    widget(app.selectbox, "Signal").set_value(signal).run()
    assert not app.exception, app.exception
    return app


def signal_chart(app) -> dict:
    [tab] = [tab for tab in curve_views(app) if tab.label == "Step-Signals"]
    [element] = tab.get("vega_lite_chart")
    return chart_spec(element)


def test_step_signals_draws_the_rule_s_value_and_marks_where_it_fired(root, monkeypatch):
    app = start(root, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("short")
    load_and_view(app)
    assert "Step-Signals" not in [tab.label for tab in curve_views(app)]  # 9 steps: fewer than two windows
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("shown")
    open_signals(load_and_view(app), "zero-signal groups rising")
    assert widget(app.selectbox, "Window (steps)").value == WINDOW
    assert "length drifting with reward" in widget(app.selectbox, "Signal").options
    spec = signal_chart(app)
    assert spec["title"] == "👾 Signals (Step level): zero-signal groups rising"
    medians, fired = zero_signal_rule(lines_of(root / "shown"))
    # from when the last window holds the collapse (3 of 5 steps) until the window before does too
    assert fired == list(range(SHIFT + WINDOW // 2, SHIFT + WINDOW + WINDOW // 2))
    points = {point["step"]: point["value"] for point in spec["data"]["values"] if point["value"] is not None}
    assert points == pytest.approx(medians)
    [marks] = [layer for layer in spec["layer"] if layer["mark"].get("shape") == "triangle-up"]
    assert [mark["step"] for mark in marks["data"]["values"]] == fired
    assert [mark["value"] for mark in marks["data"]["values"]] == pytest.approx([medians[step] for step in fired])
    [rule] = [layer for layer in spec["layer"] if layer["mark"]["type"] == "rule"]
    assert rule["data"]["values"] == [{"threshold": 0.3}]
    assert any(caption.value.startswith("**Rule:** Per step, the share of groups") and "≥ 0.3" in caption.value for caption in app.caption)
    assert any(f"first at step {fired[0]}" in markdown.value for markdown in app.markdown)

    widget(app.sidebar.multiselect, "Compare with").set_value(["other"]).run()
    spec = signal_chart(app)
    assert {point["series"] for point in spec["data"]["values"]} == {"shown", "other"}
    [marks] = [layer for layer in spec["layer"] if layer["mark"].get("shape") == "triangle-up"]
    _, other_fired = zero_signal_rule(lines_of(root / "other"))
    assert [mark["step"] for mark in marks["data"]["values"] if mark["series"] == "other"] == other_fired and other_fired[0] == SHIFT + 4 + WINDOW // 2


def test_a_firing_s_example_sample_clicked_shows_that_sample(root, monkeypatch):
    app = start(root, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("shown")
    open_signals(load_and_view(app), "length drifting with reward")
    widget(app.selectbox, "Signal").set_value("zero-signal groups rising").run()
    frame = next(frame for frame in app.dataframe if frame.key and frame.key.startswith("signals:firings:"))
    _, fired = zero_signal_rule(lines_of(root / "shown"))
    # per firing step, the members of its all-equal groups with the highest reward: groups 0 and 2 (reward 1), samples 0-2
    assert list(zip(frame.value["step"], frame.value["sample"])) == [(step, index) for step in fired for index in (0, 1, 2)]
    assert (frame.value["reward"] == 1.0).all()
    # A click on the fifth row, sent as the browser sends it (tests/page/test_search.py says why).
    click_row(app, frame, 4)
    assert widget(app.number_input, "Sample index in current step batch").value == 1
    assert widget(app.slider, f"Step Index({STEPS} total steps)").value == fired[1]
