"""Step-Watch on the page (AppTest): a watch pattern added with the form becomes a curve whose points are the hit rates
recounted here with Python's re from the lines (a compared run a line of its own), a bad pattern is refused with a
message, the patterns are kept for the root in a new session (and only for it) and can be removed, and a click on a
point lists that step's hits, each a click to its sample."""

import json
import re
from collections import defaultdict

import pytest
from streamlit.proto.WidgetStates_pb2 import WidgetState

from rl_board.figures import PICK_STEP
from rl_board.text import markdown_literal
from tests.support.page import chart_spec, click_row, curve_views, lines_of, load_and_view, start, widget
from tests.support.runs import sample, write_lines

STEPS = (1, 2, 3, 4)


# Refusals spread over the steps (i of 6 samples at step i), and a format tag on every other sample.
def watched_lines(offset: int) -> list[dict]:
    lines = []
    for step in STEPS:
        for index in range(6):
            refusal = index < (step + offset) % 7
            response = ("I cannot do that. " if refusal else "Sure. ") + ("<answer>4</answer>" if index % 2 else "no tag")
            lines.append(sample(step, reward=float(not refusal), prompt=f"question {step}.{index}", response=response))
    return lines


@pytest.fixture
def root(tmp_path):
    write_lines(tmp_path / "runs" / "shown" / "rollout_data_rank_0.jsonl", watched_lines(0))
    write_lines(tmp_path / "runs" / "other" / "rollout_data_rank_0.jsonl", watched_lines(2))
    return tmp_path / "runs"


def recount(lines: list[dict], pattern: str, flags: int = 0) -> dict[int, float]:
    hits, samples = defaultdict(int), defaultdict(int)
    for line in lines:
        samples[line["step"]] += 1
        hits[line["step"]] += bool(re.search(pattern, line["response"], flags))
    return {step: hits[step] / samples[step] for step in samples}


def approx_each(series: dict[str, dict]) -> dict:
    return {name: pytest.approx(values) for name, values in series.items()}


def open_watch(app):
    app.session_state["curve_view"] = "Step-Watch"
    app.run()
    assert not app.exception, app.exception
    return app


def add_pattern(app, name: str, pattern: str, regex: bool = True, case: bool = True):
    widget(app.text_input, "Name").input(name)
    widget(app.text_input, "Pattern").input(pattern)
    widget(app.toggle, "Regular expression (RE2)").set_value(regex)
    widget(app.toggle, "Case-sensitive").set_value(case)
    widget(app.button, "Save pattern").click()
    app.run()
    assert not app.exception, app.exception
    return app


def watch_chart(app):
    [tab] = [tab for tab in curve_views(app) if tab.label == "Step-Watch"]
    return next(chart for chart in tab.get("vega_lite_chart") if chart_spec(chart)["title"].startswith("👾 Watch patterns"))


def watch_points(app) -> dict:
    points = {}
    for point in chart_spec(watch_chart(app))["data"]["values"]:
        points.setdefault(point["series"], {})[point["step"]] = point["value"]
    return points


def test_a_pattern_added_with_the_form_is_a_curve_of_its_hit_rate(root, monkeypatch):
    app = start(root, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("shown")
    open_watch(load_and_view(app))
    assert any(info.value.startswith("No watch pattern for this root yet") for info in app.info)
    add_pattern(app, "refusal", r"I can(not|'t)")
    assert any(success.value == "Saved refusal." for success in app.success)
    lines = lines_of(root / "shown")
    assert watch_points(app) == {"refusal": pytest.approx(recount(lines, r"I can(not|'t)"))}
    add_pattern(app, "tag", "<ANSWER>", regex=False, case=False)
    expected = {"refusal": recount(lines, r"I can(not|'t)"), "tag": recount(lines, "<answer>")}
    assert watch_points(app) == approx_each(expected)
    assert len(set(expected["refusal"].values())) == len(STEPS)  # one rate per step: a wrong grouping would show

    widget(app.sidebar.multiselect, "Compare with").set_value(["other"]).run()
    other = lines_of(root / "other")
    assert watch_points(app) == approx_each({
        "shown · refusal": expected["refusal"], "shown · tag": expected["tag"],
        "other · refusal": recount(other, r"I can(not|'t)"), "other · tag": recount(other, "<answer>"),
    })


def test_a_bad_pattern_is_refused_with_a_message(root, monkeypatch):
    app = open_watch(load_and_view(start(root, monkeypatch)))
    add_pattern(app, "broken", "(I cannot")
    assert markdown_literal("Not saved: not a valid regular expression: missing ): (I cannot") in [error.value for error in app.error]
    assert widget(app.text_input, "Pattern").value == "(I cannot"  # kept, to be mended
    add_pattern(app, "", "I cannot")
    assert markdown_literal("Not saved: a watch pattern needs a name") in [error.value for error in app.error]
    assert any(info.value.startswith("No watch pattern for this root yet") for info in app.info)


# The patterns are the root's: a new session on the same root (the same cache folder) draws them, another root has none;
# a pattern removed is gone from the file too.
def test_the_patterns_are_kept_for_the_root_across_sessions(root, monkeypatch, tmp_path):
    app = start(root, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("shown")
    add_pattern(open_watch(load_and_view(app)), "refusal", "I cannot")
    add_pattern(app, "tag", "<answer>")

    again = start(root, monkeypatch)
    widget(again.sidebar.selectbox, "Choose Log Name").set_value("shown")
    open_watch(load_and_view(again))
    lines = lines_of(root / "shown")
    assert watch_points(again) == approx_each({"refusal": recount(lines, "I cannot"), "tag": recount(lines, "<answer>")})
    listed = next(frame.value for frame in again.dataframe if list(frame.value.columns[:2]) == ["name", "pattern"])
    assert listed["name"].tolist() == ["refusal", "tag"] and listed["pattern"].tolist() == ["I cannot", "<answer>"]
    widget(again.selectbox, "Remove a saved pattern").set_value("refusal")
    widget(again.button, "Remove").click()
    again.run()
    assert list(watch_points(again)) == ["tag"]

    elsewhere = tmp_path / "elsewhere"
    write_lines(elsewhere / "run" / "rollout_data_rank_0.jsonl", watched_lines(0))
    third = open_watch(load_and_view(start(elsewhere, monkeypatch)))
    assert any(info.value.startswith("No watch pattern for this root yet") for info in third.info)
    assert list(watch_points(open_watch(load_and_view(start(root, monkeypatch))))) == ["tag"]
    assert not list(root.rglob("*.json"))  # nothing in the run folders


# A click on a point lists that step's hits (sent as the browser sends a chart selection; AppTest cannot click a
# canvas), and a click on a hit shows its sample in the step area.
def test_a_click_on_a_point_lists_the_steps_hits_and_a_hit_opens_its_sample(root, monkeypatch):
    app = start(root, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("shown")
    add_pattern(open_watch(load_and_view(app)), "refusal", "I cannot")
    lines = lines_of(root / "shown")
    states = app._tree.get_widget_states()
    states.widgets.append(WidgetState(id=watch_chart(app).proto.id, string_value=json.dumps({"selection": {PICK_STEP: [{"step": 3}]}})))
    app._run(states)
    assert not app.exception, app.exception
    assert widget(app.selectbox, "Hits at step").value == 3
    step_lines = [line for line in lines if line["step"] == 3]
    expected = [index for index, line in enumerate(step_lines) if "I cannot" in line["response"]]
    frame = next(frame for frame in app.dataframe if frame.key and frame.key.startswith("watch:hits:"))
    assert frame.value["sample"].tolist() == expected and (frame.value["step"] == 3).all() and len(expected) == 3
    assert all(match.startswith("⟦I cannot⟧ do that.") for match in frame.value["match"])
    assert "Step 3, of its 6 loaded samples: refusal matches **3**." in [text.value for text in app.markdown]

    click_row(app, frame, 2)
    assert widget(app.number_input, "Sample index in current step batch").value == expected[2]
    assert step_lines[expected[2]]["response"] in [text.value for text in app.text]
