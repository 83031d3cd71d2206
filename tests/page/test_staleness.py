"""Step-Staleness on the page (AppTest): an asynchronous run's view, only when its lines carry policy_version, with its
per-step series (each compared run a line) and the shown run's samples by staleness equal to a recount of the lines;
staleness and policy_version in the batch table and as filters of Find samples."""

import pytest

from tests.page.test_search import found_on_page
from tests.support.async_runs import staleness_recount, stalenesses, write_async_run
from tests.support.page import batch_table, chart_spec, curve_points, curve_views, load_and_view, start, widget
from tests.support.runs import sample, write_lines


@pytest.fixture
def root(tmp_path):
    runs = tmp_path / "runs"
    lines = {"async_a": write_async_run(runs / "async_a", seed=1), "async_b": write_async_run(runs / "async_b", steps=5, seed=2)}
    write_lines(runs / "sync" / "rollout_data_rank_0_0.jsonl", [sample(step) for step in range(3)])
    return runs, lines


def open_view(app, name: str):
    app.session_state["curve_view"] = name
    app.run()
    assert not app.exception, app.exception
    [tab] = [tab for tab in curve_views(app) if tab.label == name]
    return [chart_spec(chart) for chart in tab.get("vega_lite_chart")]


def test_step_staleness_draws_each_run_s_staleness_per_step(root, monkeypatch):
    runs, lines = root
    app = start(runs, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("async_a").run()
    load_and_view(app)
    widget(app.sidebar.multiselect, "Compare with").set_value(["async_b"]).run()
    [curve, shares] = open_view(app, "Step-Staleness")
    points = curve_points(curve)
    assert set(points) == {"async_a", "async_b"}
    for name in points:
        counted = staleness_recount(lines[name])
        assert {step: point["value"] for step, point in points[name].items()} == pytest.approx(counted["mean"].to_dict())
    widget(app.selectbox, "Per step").set_value("stale share").run()
    [curve, shares] = open_view(app, "Step-Staleness")
    points = curve_points(curve)
    for name in points:
        assert {step: point["value"] for step, point in points[name].items()} == pytest.approx(staleness_recount(lines[name])["stale"].to_dict())
    counts = stalenesses(lines["async_a"]).value_counts(["step", "staleness"])  # the shown run's, none above 3: no part lumped
    assert {(point["step"], point["staleness"]): point["samples"] for point in shares["data"]["values"]} == {(step, str(staleness)): count for (step, staleness), count in counts.items()}
    assert shares["title"] == "Samples by staleness of async_a"


def test_a_run_without_versions_has_no_staleness_tab(root, monkeypatch):
    runs, _ = root
    app = start(runs, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("sync").run()
    load_and_view(app)
    assert "Step-Staleness" not in [tab.label for tab in curve_views(app)]
    assert "staleness" not in widget(app.multiselect, "Filter by").options


def test_staleness_is_a_batch_table_column_and_a_filter(root, monkeypatch):
    runs, lines = root
    app = start(runs, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("async_a").run()
    load_and_view(app)
    step = widget(app.slider, "Step Index(8 total steps)").value
    shown = [line for line in lines["async_a"] if line["step"] == step]
    table = batch_table(app)
    assert table["staleness"].tolist() == pytest.approx([line["step"] - line["policy_version"] if "policy_version" in line else float("nan") for line in shown], nan_ok=True)
    assert table["policy_version"].tolist() == pytest.approx([line.get("policy_version", float("nan")) for line in shown], nan_ok=True)
    widget(app.multiselect, "Filter by").set_value(["staleness"]).run()
    widget(app.slider, "staleness").set_value((2.0, 3.0)).run()
    assert not app.exception, app.exception
    per_rank = len(lines["async_a"]) // 2  # rank 0's lines, then rank 1's
    expected = {(f"rollout_data_rank_{position // per_rank}_0.jsonl", position % per_rank + 1) for position, line in enumerate(lines["async_a"]) if 2 <= line["step"] - line.get("policy_version", 1e9) <= 3}
    assert 0 < len(expected) < len(lines["async_a"]) and found_on_page(app) == expected


def test_versions_that_do_not_count_the_steps_are_explained(tmp_path, monkeypatch):
    write_lines(tmp_path / "runs" / "ahead" / "rollout_data_rank_0_0.jsonl", [sample(step, policy_version=step + 100) for step in range(3)])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    assert open_view(app, "Step-Staleness") == []
    assert any(info.value.startswith("No sample has a staleness: every policy_version is after its line's step") for info in app.info)
