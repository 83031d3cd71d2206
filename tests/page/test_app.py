"""The board driven through Streamlit's AppTest: sidebar, views, step selector, batch table, samples pair, token area."""

import contextlib
import json
import multiprocessing
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

import rl_logging_board as board
from bench.generate_run import write_run
from rl_board.reading.workers import WORKERS, Turns
from rl_board.text import BYTE_OF_CHARACTER, clean_text, markdown_literal
from tests.support import PROJECT
from tests.support.page import (
    APP,
    batch_table,
    chart_spec,
    curve_views,
    lines_of,
    load_and_view,
    open_token_view,
    running_text,
    start,
    views,
    widget,
)
from tests.support.runs import sample, write_lines
from tests.support.threads import turn_held_elsewhere

# The original's sidebar, less its two curve settings, which are above the curves (a slider there moved with the
# keyboard reruns only the curves).
SIDEBAR_LABELS = [
    "Log(s) Root Path", "Choose Log Name", "Max Samples Each Step", "Reward 曲线图", "Response 对比", "Use LogP as KL", "Drop Padding Token", "Pad Token", "Drop System Prompt",
    "End Token of System Prompt", "Show Charts", "Show Batch Samples", "Show Samples Pair", "Show Heat Map", "Show Whole Texts",
]


@pytest.fixture
def grpo_root(tmp_path):
    write_run(tmp_path / "runs" / "grpo_run", steps=5, samples=8, tokens=24, ranks=2, grpo=True, workers=1)
    return tmp_path / "runs"


def test_the_sidebar_has_the_original_controls_and_the_first_screen_shows_the_chosen_run(grpo_root, monkeypatch):
    app = start(grpo_root, monkeypatch)
    labels = [w.label for kind in ("text_input", "selectbox", "number_input", "checkbox", "slider") for w in getattr(app.sidebar, kind)]
    for label in SIDEBAR_LABELS:
        assert label in labels
    assert widget(app.main.slider, "Variance Scaling").value == 0.2 and widget(app.main.checkbox, "Zero Shift").value is False
    assert widget(app.main.slider, "Smoothing").value == 0.0
    assert app.sidebar.title[0].value == "📖 RL Logging Board"
    assert widget(app.sidebar.selectbox, "Choose Log Name").value == "grpo_run"
    assert widget(app.sidebar.number_input, "Max Samples Each Step").value == 128
    assert [e.label for e in app.sidebar.expander] == ["🧩 module setting", "⚙️ show details setting"]
    # No "Please Press Load & View": the preselected run is shown, at its first step, as Load & View shows it.
    first_step = min(line["step"] for line in lines_of(grpo_root / "grpo_run"))
    assert not app.info and sorted(batch_table(app)["reward"]) == sorted(line["reward"] for line in lines_of(grpo_root / "grpo_run") if line["step"] == first_step)
    assert len(app.get("vega_lite_chart")) == 1 + 3 and not app.get("plotly_chart")  # the token table is the open view
    assert len(app.toast) == 1
    load_and_view(app)
    assert len(app.get("vega_lite_chart")) == 1 + 3


def test_every_area_of_a_grpo_run(grpo_root, monkeypatch):
    app = load_and_view(start(grpo_root, monkeypatch))
    run_lines = lines_of(grpo_root / "grpo_run")
    assert [tab.label for tab in curve_views(app)] == ["Step-Reward", "Step-KL", "Step-RespLen", "Step-Groups", "Step-Entropy", "Step-Watch"]
    assert "Loaded 40 sample(s) of 5 step(s) from 2 file(s) (JSONL, the board's format): 0 bad line(s) skipped." in [c.value for c in app.caption]
    series = widget(app.multiselect, "Reward series")
    assert set(series.options) >= {"reward", "ref_reward", "valid_reward", "ref_valid_reward", "rewards/accuracy_reward", "rewards/format_reward"}
    assert series.value == ["reward", "ref_reward", "rewards/accuracy_reward", "rewards/format_reward"]  # GRPO: functions beside the total
    assert len(app.get("vega_lite_chart")) == 1 + 3  # the chosen view's curves, the three batch charts
    assert [view.label for view in views(app, "step_table") + views(app, "token_view")] == ["Batch samples", "Groups", "Token table", "Heat map", "Response tokens"]
    series.set_value(["valid_reward", "rewards/format_reward"]).run()
    for name in ["Step-KL", "Step-RespLen", "Step-Groups", "Step-Entropy", "Step-Reward"]:  # only the chosen view is drawn
        app.session_state["curve_view"] = name
        app.run()
        assert [len(tab.get("vega_lite_chart")) for tab in curve_views(app)] == [int(tab.label == name) for tab in curve_views(app)], name
    assert widget(app.multiselect, "Reward series").value == ["valid_reward", "rewards/format_reward"]  # kept while hidden
    curves = chart_spec(app.get("vega_lite_chart")[0])
    assert {point["series"] for point in curves["data"]["values"]} == {"valid_reward", "rewards/format_reward"}

    step_slider = widget(app.slider, "Step Index(5 total steps)")
    step_slider.set_value(3).run()
    table = batch_table(app)
    expected_rewards = [line["reward"] for line in run_lines if line["step"] == 3]
    assert table["reward"].tolist() == expected_rewards
    assert {"rewards/accuracy_reward", "advantage", "group_id", "avg_kl", "sum_kl", "avg_log_ratio"} <= set(table.columns)

    widget(app.number_input, "Sample index in current step batch").set_value(2).run()
    chosen = [line for line in run_lines if line["step"] == 3][2]
    texts = [t.value for t in app.text]
    assert chosen["response"] in texts
    assert clean_text(chosen["prompt"], "<PAD>", "<endofsystem>") in texts
    assert chosen["ref_response"] in texts
    step_responses = [line["response"] for line in run_lines if line["step"] == 3]
    previous_responses = [line["response"] for line in run_lines if line["step"] == 2]
    mean, previous_mean = np.mean([len(r) for r in step_responses]), np.mean([len(r) for r in previous_responses])
    [metric] = [m for m in app.metric if m.label == "Response Average Length"]
    assert metric.value == f"{mean:,.2f}".rstrip("0").rstrip(".") and metric.delta == f"{mean - previous_mean:+,.2f}"  # decimals kept

    token_rows = widget(app.multiselect, "Select show value(s)")
    assert token_rows.options == ["kl", "log_ratio", "logp", "ref_logp", "entropy", "token_reward", "token_value", "prob", "ref_prob", "advantage"]
    assert token_rows.value == token_rows.options[:-1]  # advantage, the same on every token, only when chosen
    token_rows.set_value(["logp", "kl"]).run()
    grid = app.dataframe[-1].value
    assert list(grid.columns) == ["logp", "kl"]
    assert grid["logp"].tolist() == pytest.approx(chosen["logprobs"])
    assert list(grid.index[:2]) == [f"0 - {chosen['response_tokens'][0]}", f"1 - {chosen['response_tokens'][1]}"]


# docs/page.md#numbers-as-shown, on the page: the reward gap of -1e-9 is not "-0.0000", the token table's columns show
# significant digits (%.6g: a KL of 3e-8 was 0.000000, a log ratio of -1e-9 -0.000000), a zero advantage has no minus.
def test_tiny_numbers_keep_their_digits_on_the_page(tmp_path, monkeypatch):
    tokens = {"response_tokens": ["a", "b"], "logprobs": [-0.5, -1e-7], "ref_logprobs": [-0.5 + 1e-9, -1e-7 - 3e-8]}
    write_lines(tmp_path / "runs" / "run" / "r.jsonl", [sample(1, reward=0.5, ref_reward=0.5 + 1e-9, ref_response="x", advantage=-0.0, group_id="g", **tokens)] * 2)
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    assert "### -1e-09" in [m.value for m in app.markdown]
    assert not [m.value for m in app.markdown if "-0.0000" in m.value or "adv -0" in m.value]
    [table] = [frame for frame in app.dataframe if "log_ratio" in frame.value.columns]
    formats = {name: column.get("type_config", {}).get("format") for name, column in json.loads(table.proto.columns).items() if name in table.value.columns}
    assert formats and set(formats.values()) == {"%.6g"}, formats


# An empty response with empty token lists, and one of pad tokens only with Drop Padding Token on: a line saying there
# are no tokens, not a value picker with nothing under it.
def test_a_response_without_tokens_says_so(tmp_path, monkeypatch):
    pads = {"response_tokens": ["<PAD>", "<PAD>"], "logprobs": [-0.1, -0.2], "ref_logprobs": [-0.1, -0.2]}
    write_lines(tmp_path / "runs" / "run" / "r.jsonl", [sample(1, response="", response_tokens=[], logprobs=[], ref_logprobs=[]), sample(1, response="<PAD><PAD>", **pads)])
    app = start(tmp_path / "runs", monkeypatch)
    for index in (0, 1):
        app.number_input(key=board.StateKey.SAMPLE_INDEX).set_value(index).run()
        assert not app.exception and not [widget for widget in app.multiselect if widget.label == "Select show value(s)"]
        assert [info.value for info in app.info if info.value.startswith(("No tokens to show", "No token area"))], index


# A step whose samples have a reference only in part: with pandas 3 a column of texts and None became a string column
# of NaN, and the batch table's view failed on the NaN (the step area was not drawn).
def test_a_reference_in_some_samples_only(tmp_path, monkeypatch):
    write_lines(tmp_path / "runs" / "run" / "r.jsonl", [sample(1, reward=0.0), sample(1, reward=1.0, ref_response="the reference")])
    app = start(tmp_path / "runs", monkeypatch)
    assert batch_table(app)["ref_response"].tolist()[1] == "the reference" and not isinstance(batch_table(app)["ref_response"].tolist()[0], str)
    assert "No `ref_response` in this sample." in [info.value for info in app.info]
    app.number_input(key=board.StateKey.SAMPLE_INDEX).set_value(1).run()
    assert not app.exception and "the reference" in [text.value for text in app.text]


# A reward of ±inf or null and a token given no probability: the step curve's subtitle and the batch charts' note say
# where the values the charts cannot draw are, the token table writes them out (Infinity) in an unshaded column.
def test_infinite_values_are_named_where_the_charts_leave_them_out(tmp_path, monkeypatch):
    tokens = {"response_tokens": ["a", "b"], "ref_logprobs": [-0.5, -0.7]}
    lines = [sample(1, reward=reward, ref_reward=0.0, logprobs=[-0.5, -0.6], **tokens) for reward in (0.5, float("inf"), 1.0)]
    lines.append(sample(2, reward=float("-inf"), ref_reward=0.0, logprobs=[float("-inf"), -0.6], **tokens))
    lines.append(sample(2, reward=None, ref_reward=0.0, logprobs=[-0.5, -0.6], **tokens))  # null: a reward function's None
    write_lines(tmp_path / "runs" / "run" / "r.jsonl", lines)
    app = start(tmp_path / "runs", monkeypatch)
    assert chart_spec(app.get("vega_lite_chart")[0])["title"]["subtitle"][1] == "reward: 2 values ±inf and 1 without a number, left out (steps 1, 2)"
    assert "Not in the charts: reward at sample 1 (+inf); reward_gap at sample 1 (+inf)." in [c.value for c in app.caption]
    widget(app.slider, "Step Index(2 total steps)").set_value(2).run()
    assert [c.value for c in app.caption if c.value.startswith("Not in the charts")] == ["Not in the charts: reward without a number at sample 1; reward at sample 0 (−inf); reward_gap at sample 0 (−inf)."]
    [table] = [frame for frame in app.dataframe if "logp" in frame.value.columns]
    columns = json.loads(table.proto.columns)
    assert columns["logp"]["type_config"]["type"] == "number" and columns["ref_logp"]["type_config"]["type"] == "progress"
    assert table.value["logp"].tolist()[0] == float("-inf")


# The values the page keeps for its widgets (a view chosen, a remembered choice, the sample index) are sent with the
# widget only when the page changes them: Streamlit sends a value the script set as a new value, which the browser
# draws anew, in every run that sets it.
def test_a_kept_widget_value_is_sent_again_only_when_it_changes(tmp_path, monkeypatch):
    tokens = {"response_tokens": ["a", "b"], "logprobs": [-0.5, -1.0], "ref_logprobs": [-0.4, -1.5]}
    write_lines(tmp_path / "runs" / "run" / "r.jsonl", [sample(1, group_id="g", **tokens)] * 3 + [sample(2, group_id="g", **tokens)])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))

    def sent_with_a_value() -> list[str]:
        controls = {key: app.get_by_key(key) for key in ["curve_view", "step_table", "token_view", "sample_index"]}
        controls["reward_series"] = widget(app.multiselect, "Reward series")
        return [key for key, control in controls.items() if control.proto.set_value]

    app.run()
    assert sent_with_a_value() == []
    open_token_view(app, "Response tokens")
    assert sent_with_a_value() == ["token_view"]  # a new choice is sent once
    app.run()
    assert sent_with_a_value() == []  # then the browser holds it
    widget(app.number_input, "Sample index in current step batch").set_value(2).run()
    assert sent_with_a_value() == []
    widget(app.slider, "Step Index(2 total steps)").set_value(2).run()  # a step of one sample: the page sets index 0
    assert sent_with_a_value() == ["sample_index"] and app.get_by_key("sample_index").value == 0
    app.run()
    assert sent_with_a_value() == []


def test_only_the_open_token_view_is_drawn_and_it_stays_open(tmp_path, monkeypatch):
    tokens = {"response_tokens": ["a", "b", "c"], "logprobs": [-0.5, -1.0, -2.0], "ref_logprobs": [-0.4, -1.5, -2.0]}
    lines = [sample(1, **tokens), sample(1), sample(1, **tokens), sample(2, **tokens)]  # the second has no logprobs
    write_lines(tmp_path / "runs" / "run" / "r.jsonl", lines)
    app = load_and_view(start(tmp_path / "runs", monkeypatch))

    def drawn() -> tuple:
        token_tables = [frame for frame in app.dataframe if frame.value.index.name == "token"]
        texts = [html for html in app.get("html") if "class='rl-running-text'" in html.proto.body]
        return len(token_tables), len(app.get("plotly_chart")), len(texts)

    names = ["Token table", "Heat map", "Response tokens"]
    assert [view.label for view in views(app, "token_view")] == names and drawn() == (1, 0, 0)
    assert open_token_view(app, "Heat map") and drawn() == (0, 1, 0)
    widget(app.number_input, "Sample index in current step batch").set_value(1).run()  # no logprobs: no views
    assert not views(app, "token_view") and drawn() == (0, 0, 0)
    widget(app.number_input, "Sample index in current step batch").set_value(2).run()
    assert drawn() == (0, 1, 0)  # the heat map again, as chosen before
    widget(app.slider, "Step Index(2 total steps)").set_value(2).run()
    assert drawn() == (0, 1, 0)
    assert open_token_view(app, "Response tokens") and drawn() == (0, 0, 1)
    widget(app.checkbox, "Show Heat Map").uncheck().run()  # the open view stays open as the views change
    assert [view.label for view in views(app, "token_view")] == ["Token table", "Response tokens"] and drawn() == (0, 0, 1)
    widget(app.checkbox, "Show Heat Map").check().run()
    open_token_view(app, "Heat map")
    widget(app.checkbox, "Show Heat Map").uncheck().run()  # the open view is gone: the table opens
    assert drawn() == (1, 0, 0)
    widget(app.checkbox, "Show Heat Map").check().run()  # and the heat map comes back, as chosen
    assert drawn() == (0, 1, 0)
    assert not app.exception


def test_the_kl_estimator_applies_to_the_table_and_the_token_rows(grpo_root, monkeypatch):
    app = load_and_view(start(grpo_root, monkeypatch))
    widget(app.selectbox, "KL estimator").set_value("k3").run()
    first = [line for line in lines_of(grpo_root / "grpo_run") if line["step"] == 0][0]
    ratio = np.array(first["logprobs"]) - np.array(first["ref_logprobs"])
    k3 = np.exp(-ratio) + ratio - 1
    assert batch_table(app)["avg_kl"].iloc[0] == pytest.approx(k3.mean())
    widget(app.multiselect, "Select show value(s)").set_value(["kl"]).run()
    assert app.dataframe[-1].value["kl"].tolist() == pytest.approx(k3.tolist())


# The token table is made once per sample and setting and kept (cached_token_table): each change of the KL estimator,
# the values shown or the sample brings the table of what is chosen now, never one made for another choice.
def test_the_token_table_follows_the_estimator_the_values_and_the_sample(grpo_root, monkeypatch):
    app = load_and_view(start(grpo_root, monkeypatch))
    shown = [line for line in lines_of(grpo_root / "grpo_run") if line["step"] == 0]

    def kl(line: dict, estimator: str) -> list[float]:
        ratio = np.array(line["logprobs"]) - np.array(line["ref_logprobs"])
        return {"k1": ratio, "k3": np.expm1(-ratio) + ratio}[estimator].tolist()

    widget(app.multiselect, "Select show value(s)").set_value(["kl"]).run()
    widget(app.selectbox, "KL estimator").set_value("k1").run()
    assert app.dataframe[-1].value["kl"].tolist() == pytest.approx(kl(shown[0], "k1"))
    widget(app.selectbox, "KL estimator").set_value("k3").run()
    assert app.dataframe[-1].value["kl"].tolist() == pytest.approx(kl(shown[0], "k3"))
    widget(app.multiselect, "Select show value(s)").set_value(["logp", "kl"]).run()
    assert list(app.dataframe[-1].value.columns) == ["logp", "kl"] and app.dataframe[-1].value["logp"].tolist() == pytest.approx(shown[0]["logprobs"])
    widget(app.number_input, "Sample index in current step batch").set_value(1).run()
    assert app.dataframe[-1].value["kl"].tolist() == pytest.approx(kl(shown[1], "k3"))
    widget(app.number_input, "Sample index in current step batch").set_value(0).run()
    widget(app.selectbox, "KL estimator").set_value("k1").run()
    assert app.dataframe[-1].value["kl"].tolist() == pytest.approx(kl(shown[0], "k1"))  # made before, and kept


# ... and Drop Padding Token: the trailing pads leave the table and come back with it (the pad token is in its key).
def test_the_token_table_follows_drop_padding_token(tmp_path, monkeypatch):
    tokens = ["a", "b", "<PAD>", "<PAD>"]
    write_lines(tmp_path / "runs" / "run" / "rollout_data_rank_0.jsonl", [
        sample(1, reward=i / 2, response_tokens=tokens, logprobs=[-0.1 * (k + 1) for k in range(4)], ref_logprobs=[-0.2] * 4) for i in range(2)
    ])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))

    def token_rows() -> int:
        return len(next(frame.value for frame in app.dataframe if frame.value.index.name == "token"))

    dropping = widget(app.sidebar.checkbox, "Drop Padding Token").value
    assert token_rows() == (2 if dropping else 4)
    widget(app.sidebar.checkbox, "Drop Padding Token").set_value(not dropping).run()
    assert token_rows() == (4 if dropping else 2)
    widget(app.sidebar.checkbox, "Drop Padding Token").set_value(dropping).run()
    assert token_rows() == (2 if dropping else 4)


def test_a_run_with_only_the_required_keys(tmp_path, monkeypatch):
    lines = [sample(step, reward=i / 4, ref_response=f"ref {step} {i}", ref_reward=0.5) for step in (1, 2) for i in range(4)]
    write_lines(tmp_path / "runs" / "minimal" / "r.jsonl", lines)
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    assert [tab.label for tab in curve_views(app)] == ["Step-Reward", "Step-KL", "Step-RespLen", "Step-Watch"]
    assert [view.label for view in views(app, "step_table")] == ["Batch samples"]  # no groups
    assert any(i.value.startswith("No token area: this sample has no `logprobs`.") for i in app.info)
    assert len(app.get("vega_lite_chart")) == 1 + 3  # the reward curves and the batch charts
    for name, note in (("Step-KL", "No KL: the run has no `logprobs` with `ref_logprobs`."), ("Step-RespLen", "No token counts: the run has neither `response_tokens` nor `logprobs`.")):
        app.session_state["curve_view"] = name
        app.run()
        assert note in [i.value for i in app.info]
    assert not app.get("plotly_chart")  # no token area, no heat map
    assert "ref 1 0" in [t.value for t in app.text]
    assert batch_table(app).columns.tolist() == ["sample", "reward", "prompt", "response", "ref_response", "ref_reward", "reward_gap"]


def test_the_batch_tables_number_columns_fit_their_names_with_a_sort_arrow(grpo_root, monkeypatch):
    """Sized to their numbers, narrow columns showed "↑ re ⋮" once sorted: each number column is as wide as its name
    (8 px a character) plus the arrow and menu (48 px)."""
    app = load_and_view(start(grpo_root, monkeypatch))
    [frame] = [frame for frame in app.dataframe if {"prompt", "response"} <= set(frame.value.columns)]
    widths = {name: column.get("width") for name, column in json.loads(frame.proto.columns).items()}
    numbers = frame.value.select_dtypes("number").columns
    assert len(numbers) >= 8 and all(widths[name] == 8 * len(name) + 48 for name in numbers), widths


def test_a_run_without_references_has_no_slot_for_them(tmp_path, monkeypatch):
    """No ref_response or ref_reward anywhere: no Reward Gap chart or note, no Ref Response or Reward Gap column, no
    Ref Response Average Length; the reward and distribution charts share the row."""
    write_lines(tmp_path / "runs" / "no_refs" / "r.jsonl", [sample(step, reward=i / 4, response="x" * (i + step)) for step in (1, 2) for i in range(4)])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    assert len(app.get("vega_lite_chart")) == 1 + 2
    assert not [i for i in app.info if "ref_re" in i.value]
    assert [m.label for m in app.metric] == ["Response Average Length"]
    assert not [m for m in app.markdown if "Ref Response" in m.value or "Reward Gap" in m.value]
    assert "ref_response" not in batch_table(app).columns


def test_use_logp_as_kl_is_off_for_a_trl_run_so_step_kl_plots_the_chosen_estimator(grpo_root, monkeypatch):
    (grpo_root / "grpo_run" / "rollout_meta_20261124T000000Z.json").write_text(json.dumps({"trl_version": "1.16.0"}))
    write_lines(grpo_root / "a_plain_run" / "r.jsonl", [sample(1)])  # an original's run, listed before grpo_run
    app = load_and_view(start(grpo_root, monkeypatch))
    assert widget(app.checkbox, "Use LogP as KL").value is False and widget(app.selectbox, "KL estimator").value == "k3"
    app.session_state["curve_view"] = "Step-KL"
    app.run()
    [chart] = [tab for tab in curve_views(app) if tab.label == "Step-KL"][0].get("vega_lite_chart")
    assert "estimator k3" in chart_spec(chart)["title"]["text"]
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("a_plain_run").run()  # picked, not yet opened: no change
    assert widget(app.checkbox, "Use LogP as KL").value is False and widget(app.selectbox, "KL estimator").value == "k3"
    load_and_view(app)  # the original's runs: as it was
    assert widget(app.checkbox, "Use LogP as KL").value is True and widget(app.selectbox, "KL estimator").value == "kl"


def test_a_run_without_the_chosen_tab_and_series_opens_on_the_defaults(grpo_root, monkeypatch):
    write_run(grpo_root / "plain_run", steps=3, samples=4, tokens=8, ranks=1, workers=1)  # no entropies, no rewards/*
    app = start(grpo_root, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("grpo_run").run()
    app = load_and_view(app)
    widget(app.multiselect, "Reward series").set_value(["rewards/format_reward"]).run()
    app.session_state["curve_view"] = "Step-Entropy"
    app.run()
    assert [len(tab.get("vega_lite_chart")) for tab in curve_views(app)] == [0, 0, 0, 0, 1, 0]
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("plain_run").run()
    app = load_and_view(app)
    assert [(tab.label, len(tab.get("vega_lite_chart"))) for tab in curve_views(app)] == [("Step-Reward", 1), ("Step-KL", 0), ("Step-RespLen", 0), ("Step-Watch", 0)]
    assert widget(app.multiselect, "Reward series").value == ["reward", "ref_reward"]


ARROW_DATA_SCRIPT = """
import numpy as np, pandas as pd, streamlit as st
import rl_logging_board as board
from rl_board.figures import reward_distribution_chart, step_curve_chart
samples = pd.DataFrame({"step": [1, 1, 2, 3, 3], "reward": [0.5, np.nan, 1.0, -2.0, 0.25], "ref_reward": [0.0, 1.0, np.nan, 1.5, 2.0]})
for spec in (step_curve_chart([("run", samples)], ["reward", "ref_reward"], "title", "unit", lines=[("logged", [1, 2], [0.1, None])]), reward_distribution_chart(samples)):
    board.draw_chart(st, spec)
    board.draw_chart(st, board.arrow_data(spec))
"""


def test_a_cached_chart_s_arrow_data_is_what_streamlit_sends_for_its_points():
    """arrow_data converts a chart's points once, for the cache: the browser must get the same bytes as from the points
    (missing values, a layer's own points and named datasets included), and the spec it was made from stays whole."""
    app = AppTest.from_string(ARROW_DATA_SCRIPT).run()
    assert not app.exception, app.exception
    charts = app.get("vega_lite_chart")
    assert len(charts) == 4
    for points, tables in (charts[0:2], charts[2:4]):
        assert tables.proto.spec == points.proto.spec and tables.proto.data.data == points.proto.data.data
        assert [(d.name, d.data.data) for d in tables.proto.datasets] == [(d.name, d.data.data) for d in points.proto.datasets]
    assert chart_spec(charts[0])["data"]["values"] and charts[2].proto.datasets  # there was data to compare


def test_the_step_selector_follows_the_original(tmp_path, monkeypatch):
    write_lines(tmp_path / "runs" / "uneven" / "r.jsonl", [sample(step, reward=step) for step in (10, 2, 1)])
    write_lines(tmp_path / "runs" / "one_step" / "r.jsonl", [sample(7), sample(7)])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))  # the last run, uneven, is preselected
    selector = widget(app.selectbox, "Step Index(3 total steps)")  # unevenly spaced: a select box, in numeric order
    assert selector.options == ["1", "2", "10"]
    selector.set_value(10).run()
    assert "reward 10" in [m.value for m in app.markdown if m.value.startswith(":green")][0]
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("one_step").run()
    app = load_and_view(app)
    assert "r7" in [t.value for t in app.text]
    assert not [w for w in [*app.slider, *app.selectbox] if w.label.startswith("Step Index")]  # one step: no selector
    assert "Step Index" not in " ".join(m.value for m in app.markdown)


def test_missing_and_empty_roots_say_what_to_do(tmp_path, monkeypatch):
    app = start(tmp_path / "nowhere", monkeypatch)
    assert "does not exist" in app.warning[0].value
    (tmp_path / "empty").mkdir()
    app = start(tmp_path / "empty", monkeypatch)
    assert "No run in" in app.warning[0].value and "rollout_data_rank_0.jsonl" in app.code[0].value
    labels = [w.label for kind in ("text_input", "selectbox", "number_input", "checkbox", "slider") for w in getattr(app.sidebar, kind)]
    assert set(SIDEBAR_LABELS) <= set(labels)  # with no run to show, the settings of how its samples are shown too


def test_a_root_that_is_itself_a_run_and_a_folder_without_rank_files(tmp_path, monkeypatch):
    write_lines(tmp_path / "run" / "r.jsonl", [sample(1), sample(2)])
    (tmp_path / "run" / "notes").mkdir()  # a sub-folder that is not a run
    (tmp_path / "run" / "checkpoint-1").mkdir()  # a checkpoint of the run in the root: not listed
    app = start(tmp_path / "run", monkeypatch)
    run_choice = widget(app.sidebar.selectbox, "Choose Log Name")
    assert run_choice.options == ["(this folder)", "notes"] and run_choice.value == "."
    run_choice.set_value("notes")
    app = load_and_view(app)
    assert app.warning[0].value.startswith("No `.jsonl` file and no training history in ") and not curve_views(app) and not views(app, "step_table")
    run_choice = widget(app.sidebar.selectbox, "Choose Log Name")
    run_choice.set_value(".")
    app = load_and_view(app)
    assert not app.warning and "Loaded 2 sample(s)" in app.toast[0].value
    assert widget(app.slider, "Step Index(2 total steps)").value == 2  # a run opened after another: its latest step


def test_bad_lines_show_in_the_load_report(tmp_path, monkeypatch):
    write_lines(tmp_path / "runs" / "bad" / "r.jsonl", [sample(1), b"{oops\n", sample(1), b'{"step": 2}\n'])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    assert app.warning[0].value == "Loaded 2 sample(s) of 1 step(s) from 1 file(s) (JSONL, the board's format): 2 bad line(s) skipped; 2 issue(s) listed in the load report."
    report = widget(app.expander, "Load report")
    assert [toast.value for toast in app.toast] == ["Loaded 2 sample(s), success: 2, error: 2"]  # one count: the samples shown
    assert not report.dataframe  # drawn only when opened
    app.session_state["load_report_details"] = True
    app.run()
    files, problems = (frame.value for frame in widget(app.expander, "Load report").dataframe)
    assert files["bad lines"].tolist() == [2]
    assert problems["line"].tolist() == [2, 4] and problems["kind"].tolist() == ["skipped", "skipped"]


def test_a_line_that_cannot_be_read_back_is_tried_again(tmp_path, monkeypatch):
    path = write_lines(tmp_path / "runs" / "run" / "r.jsonl", [sample(1), sample(2)])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    good, status = path.read_bytes(), path.stat()
    path.write_bytes(good.replace(b'{"prompt": "p2"', b'["prompt": "p2"'))  # same size and time: the index still holds
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    widget(app.slider, "Step Index(2 total steps)").set_value(2).run()
    texts, tokens = (w.value for w in app.warning)
    assert texts.replace("\\", "").startswith("r.jsonl line 2 could not be read back (not valid JSON")  # as text: Markdown's escapes
    assert tokens.startswith("r.jsonl line 2: no token area, the line cannot be read in full (not valid JSON")
    path.write_bytes(good)  # a passing failure (a network file system, say) is not kept
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    app.run()
    assert not app.warning
    assert batch_table(app)["response"].tolist() == ["r2"]


def test_area_switches_hide_their_areas(grpo_root, monkeypatch):
    app = load_and_view(start(grpo_root, monkeypatch))
    open_token_view(app, "Heat map")
    widget(app.checkbox, "Show Charts").uncheck().run()
    assert len(app.get("vega_lite_chart")) == 1 and len(app.get("plotly_chart")) == 1
    widget(app.checkbox, "Show Heat Map").uncheck().run()
    assert not app.get("plotly_chart")
    widget(app.checkbox, "Reward 曲线图").uncheck().run()
    assert not curve_views(app)
    widget(app.checkbox, "Response 对比").uncheck().run()
    assert not [s for s in app.slider if s.label.startswith("Step Index")]
    assert not app.exception


def test_live_mode_pulls_in_new_steps_and_keeps_the_selection(grpo_root, monkeypatch):
    app = load_and_view(start(grpo_root, monkeypatch))
    widget(app.slider, "Step Index(5 total steps)").set_value(2).run()
    widget(app.toggle, "Live mode").set_value(True).run()
    with open(grpo_root / "grpo_run" / "rollout_data_rank_1.jsonl", "a") as file:
        file.write(json.dumps(sample(5, reward=9.0)) + "\n")
    app.run()
    slider = widget(app.slider, "Step Index(6 total steps)")
    assert slider.value == 2 and slider.max == 5


# A resumed launch drops the steps the one before logged after its checkpoint until it logs them again: the step the
# user chose was replaced by the nearest for good (it stayed there after the step was back). It stays chosen, said so,
# and shows again once logged.
# Evenly spaced steps (a slider) and others (a select box, which keeps its value where a slider is built anew).
# The resumed launch logs its steps one at a time: each the nearest stands in, until the chosen one is back (a select
# box kept the first step that stood in, and took it for the user's choice once a nearer one came).
@pytest.mark.parametrize("steps, chosen, resumed_at, between", [((1, 2, 3, 4, 5, 6), 5, 4, ()), ((1, 2, 4, 7, 9, 12), 9, 7, (8,))])
def test_a_chosen_step_a_resumed_launch_drops_for_a_while_is_shown_again_once_back(tmp_path, monkeypatch, steps, chosen, resumed_at, between):
    run_dir = tmp_path / "runs" / "run"
    write_lines(run_dir / "rollout_data_rank_0_20260101T000000Z.jsonl", [sample(step, reward=1.0) for step in steps])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    selector = lambda count: widget(app.slider if steps[1] - steps[0] == steps[-1] - steps[-2] else app.selectbox, f"Step Index({count} total steps)")  # noqa: E731
    selector(len(steps)).set_value(chosen).run()
    widget(app.toggle, "Live mode").set_value(True).run()
    resumed = run_dir / "rollout_data_rank_0_20260102T000000Z.jsonl"
    write_lines(resumed, [sample(resumed_at, reward=2.0)])  # resumed from a checkpoint before: the first launch's later steps replaced
    app.run()
    left = [step for step in steps if step < resumed_at] + [resumed_at]
    assert selector(len(left)).value == resumed_at  # the nearest
    assert [box.value for box in app.info if box.value.startswith(f"Step {chosen} is not in the run now")]
    for step in between:
        with open(resumed, "a") as file:
            file.write(json.dumps(sample(step, reward=2.0)) + "\n")
        app.run()
        left.append(step)
        assert selector(len(left)).value == step and [box.value for box in app.info if box.value.startswith(f"Step {chosen} is not in the run now")]
    with open(resumed, "a") as file:
        file.write(json.dumps(sample(chosen, reward=2.0)) + "\n")
    app.run()
    assert selector(len(left) + 1).value == chosen and not [box for box in app.info if "is not in the run now" in box.value]
    assert [line for line in batch_table(app)["reward"]] == [2.0]  # the resumed launch's line


def test_the_bundled_logger_run_answers_the_grpo_questions(monkeypatch):
    root = Path(board.DEFAULT_ROOT)
    app = start(root, monkeypatch)
    run_choice = widget(app.sidebar.selectbox, "Choose Log Name")
    assert run_choice.options == ["from_trl_log_completions", "from_verl_rollout_data", "from_verl_validation_data", "generated_every_key", "grpo_tiny_example", "grpo_tiny_example_lr1e-4", "grpo_tiny_mismatch_example", "grpo_tiny_tools_example", "grpo_tiny_update_example", "grpo_tiny_vlm_example"]
    run_choice.set_value("grpo_tiny_example")
    app = load_and_view(app)
    run_dir = root / "grpo_tiny_example"
    run_lines = lines_of(run_dir)
    meta = json.loads(next(run_dir.glob("rollout_meta_*.json")).read_text())
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["beta"] == str(meta["beta"]) and metrics["trl"] == meta["trl_version"]
    assert metrics["model"] == markdown_literal(meta["model_name"].rstrip("/").rsplit("/", 1)[-1])  # all of it on hover
    assert [tab.label for tab in curve_views(app)] == ["Step-Reward", "Step-KL", "Step-RespLen", "Step-Groups", "Step-Entropy", "Step-Signals", "Step-Watch"]
    assert {"rewards/sorted_digits", "rewards/same_digits"} <= set(widget(app.multiselect, "Reward series").options)

    # Which groups had no learning signal at the step in view: the caption's count is a recomputation from the file.
    step = widget(app.slider, f"Step Index({len({line['step'] for line in run_lines})} total steps)").value
    groups = {}
    for line in run_lines:
        if line["step"] == step:
            groups.setdefault(line["group_id"], set()).add(line["reward"])
    zero = sum(len(rewards) == 1 for rewards in groups.values())
    assert {"rewards/sorted_digits", "rewards/same_digits", "advantage", "group", "group_id"} <= set(batch_table(app).columns)
    app.session_state["step_table"] = "Groups"
    app.run()
    assert [c.value for c in app.caption if "prompt group(s)" in c.value][0].startswith(f"{len(groups)} prompt group(s), {zero} with no learning signal")

    # Which tokens had the highest KL and entropy: the token rows hold them, per token, from the file.
    chosen = [line for line in run_lines if line["step"] == step][0]
    rows = widget(app.multiselect, "Select show value(s)")
    assert {"entropy", "advantage", "kl", "logp"} <= set(rows.options)
    rows.set_value(["kl", "entropy"]).run()
    grid = app.dataframe[-1].value
    assert grid["entropy"].tolist() == pytest.approx(chosen["entropies"])
    ratio = np.array(chosen["logprobs"]) - np.array(chosen["ref_logprobs"])
    assert widget(app.sidebar.selectbox, "KL estimator").value == "k3"  # the logger's run: TRL's kl by default
    assert grid["kl"].tolist() == pytest.approx((np.expm1(-ratio) + ratio).tolist())
    assert widget(open_token_view(app, "Response tokens").selectbox, "Colour tokens by").value == "kl"
    assert not app.exception


# Step-KL's dashed lines with runs compared: each run's TRL kl recomputed from its lines and its trainer's logged kl
# (only the shown run had its logged line), each equal to its own metrics file.
def test_step_kl_draws_each_compared_run_s_logged_kl(monkeypatch):
    root = Path(board.DEFAULT_ROOT)
    app = start(root, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("grpo_tiny_example")
    app = load_and_view(app)
    widget(app.sidebar.multiselect, "Compare with").set_value(["grpo_tiny_example_lr1e-4"]).run()
    app.session_state["curve_view"] = "Step-KL"
    app.run()
    assert not app.exception and widget(app.sidebar.selectbox, "KL estimator").value == "k3"
    lines = {}
    for point in chart_spec(app.get("vega_lite_chart")[0])["datasets"]["lines"]:
        lines.setdefault(point["series"], {})[point["step"]] = point["logged"]
    names = ("grpo_tiny_example", "grpo_tiny_example_lr1e-4")
    assert set(lines) == {f"{name} · {line}" for name in names for line in ("TRL kl from the lines", "kl (trainer log)")}
    for name in names:
        logged = {entry["step"]: entry["kl"] for path in (root / name).glob("rollout_metrics_*.jsonl") for entry in map(json.loads, path.read_text().splitlines()) if entry.get("kind") == "train" and "kl" in entry}
        assert lines[f"{name} · kl (trainer log)"] == pytest.approx(logged, rel=1e-12)
        assert lines[f"{name} · TRL kl from the lines"] == pytest.approx({step: logged[step] for step in lines[f"{name} · TRL kl from the lines"]}, rel=1e-5)


def test_progress_bars_show_on_long_loads_only_redrawn_at_most_every_half_second_and_at_the_end():
    app = AppTest.from_file(str(PROJECT / "tests" / "support" / "progress_bars_app.py"))
    app.run()
    assert not app.exception, app.exception
    finished, interrupted = app.get("progress")  # the short load drew no bar
    assert (finished.proto.value, finished.proto.text) == (100, "[100%] Loading 4 / 4 files...")
    assert (interrupted.proto.value, interrupted.proto.text) == (10, "[10%] Processing samples...")  # 0.2 and 0.3 came too soon


def test_byte_level_tokens_show_as_text(tmp_path, monkeypatch):
    character_of = {byte: character for character, byte in BYTE_OF_CHARACTER.items()}
    pieces = [b" ", b"\xe4\xbd", b"\xa0", "好\n".encode()]  # " 你好\n" as a byte-level BPE tokenizer splits it
    tokens = ["".join(character_of[byte] for byte in piece) for piece in pieces]
    write_lines(tmp_path / "runs" / "run" / "r.jsonl", [sample(1, response=" 你好\n", response_tokens=tokens, logprobs=[-1.0] * 4)])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    assert app.dataframe[-1].value.index.tolist() == ["0 -  ", "1 - ", "2 - 你", "3 - 好\\n"]
    assert ">你</span>" in running_text(open_token_view(app, "Response tokens"))


# A text over TEXT_SHOWN characters shows its start and its end, and how many characters lie between; Show Whole Texts
# shows it whole. Short texts are drawn whole either way.
def test_a_long_text_shows_its_start_and_end_until_whole_texts_are_asked_for(tmp_path, monkeypatch):
    response = "".join(f"line {i}: {'ab' * (i % 40)}\n" for i in range(2000))  # about 100,000 characters
    assert len(response) > board.TEXT_SHOWN
    write_lines(tmp_path / "runs" / "run" / "r.jsonl", [sample(1, prompt="a short prompt", response=response)])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    texts = [text.value.strip("\u200b") for text in app.text]  # as_written marks a text's leading or trailing space
    half = board.TEXT_SHOWN // 2
    assert "a short prompt" in texts and response not in texts
    assert response[:half] in texts and response[-half:] in texts
    assert [caption.value for caption in app.caption if "characters not shown here" in caption.value] == [
        f"… {len(response) - board.TEXT_SHOWN:,} of its {len(response):,} characters not shown here: Show Whole Texts, in the sidebar, shows them …"
    ]
    widget(app.checkbox, "Show Whole Texts").check().run()
    texts = [text.value.strip("\u200b") for text in app.text]
    assert response in texts and response[:half] not in texts
    assert not [caption.value for caption in app.caption if "characters not shown here" in caption.value]


def test_odd_run_metadata_and_folders_do_not_stop_the_page(tmp_path, monkeypatch):
    run_dir = tmp_path / "runs" / "run"
    write_lines(run_dir / "r.jsonl", [sample(1), sample(2)])
    os.mkfifo(run_dir / "rollout_meta_z.json")  # would block a reader forever
    (run_dir / "rollout_meta_a.json").write_text(json.dumps({"model_name": "m", "reward_funcs": ["f", "g"], "reward_weights": ["1", None]}))
    (run_dir / "rollout_meta_b.json").write_text('{"model_name": "m", "reward_funcs": ["f", "g"], "reward_weights": [1e999, ' + "9" * 400 + "]}")
    os.mkdir(os.path.join(os.fsencode(tmp_path / "runs"), b"junk_\xff"))  # a folder whose name is not UTF-8
    monkeypatch.setenv("HOME", str(tmp_path))
    app = start("~/runs", monkeypatch)
    assert widget(app.sidebar.selectbox, "Choose Log Name").options == ["run"]  # the other named, not listed
    assert [caption.value for caption in app.sidebar.caption if caption.value.endswith("(rename the folder to open it): junk\\_\ufffd")] != []
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("run")
    app = load_and_view(app)
    assert [caption.value for caption in app.caption if caption.value.startswith("Reward")] == ["Reward functions: f, g (the run's metadata gives no finite weight for each)"]
    assert curve_views(app) and widget(app.slider, "Step Index(2 total steps)").value == 1


def test_steps_beyond_the_sliders_range_get_a_select_box(tmp_path, monkeypatch):
    write_lines(tmp_path / "runs" / "run" / "r.jsonl", [sample(2**60), sample(2**61)])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    assert widget(app.selectbox, "Step Index(2 total steps)").value == 2**60
    assert not [slider for slider in app.slider if slider.label.startswith("Step Index")]


def test_lines_of_a_step_that_cannot_be_read_back_make_one_warning(tmp_path, monkeypatch):
    path = write_lines(tmp_path / "runs" / "run" / "r.jsonl", [sample(1)] + [sample(2)] * 5)
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    status = path.stat()
    path.write_bytes(path.read_bytes().replace(b'{"prompt": "p2"', b'["prompt": "p2"'))  # same size and time: the index still holds
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    widget(app.slider, "Step Index(2 total steps)").set_value(2).run()
    texts = [w.value.replace("\\", "") for w in app.warning if "could not be read back" in w.value]  # as text: Markdown's escapes
    assert len(texts) == 1 and texts[0].endswith("4 more line(s) of this step could not be read back either.")


def test_a_run_of_only_files_named_in_another_encoding_says_why_it_is_empty(tmp_path, monkeypatch):
    run_dir = tmp_path / "runs" / "run"
    run_dir.mkdir(parents=True)
    with open(os.path.join(os.fsencode(run_dir), b"rank_\xff.jsonl"), "wb") as file:
        file.write(json.dumps(sample(1)).encode() + b"\n")
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    assert [w.value for w in app.warning] == ["No loadable sample in this run: open the load report above to see why."]
    app.session_state["load_report_details"] = True
    app.run()
    problems = widget(app.expander, "Load report").dataframe[-1].value
    assert problems["reason"].tolist() == ["the file name is not valid UTF-8: rename the file to load it"]


def test_a_long_response_is_shown_as_running_text_a_window_at_a_time(tmp_path, monkeypatch):
    count = board.RUNNING_TEXT_TOKENS * 2 + 10
    tokens = [f"t{i} " for i in range(count)]
    logprobs = [-(i % 7) / 7 for i in range(count)]
    write_lines(tmp_path / "runs" / "run" / "r.jsonl", [sample(1, response="".join(tokens), response_tokens=tokens, logprobs=logprobs)])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    assert len(app.dataframe[-1].value) == count  # the table has every token
    window = widget(open_token_view(app, "Response tokens").select_slider, "Tokens shown")
    assert window.options == [f"0–{board.RUNNING_TEXT_TOKENS - 1}", f"{board.RUNNING_TEXT_TOKENS}–{2 * board.RUNNING_TEXT_TOKENS - 1}", f"{2 * board.RUNNING_TEXT_TOKENS}–{count - 1}"]
    assert running_text(app).count("<span") == board.RUNNING_TEXT_TOKENS and ">t0 </span>" in running_text(app)
    window.set_value(range(2 * board.RUNNING_TEXT_TOKENS, count)).run()
    assert running_text(app).count("<span") == 10 and f"#{count - 1} " in running_text(app) and ">t0 </span>" not in running_text(app)
    widget(app.selectbox, "Colour tokens by").set_value("prob").run()
    open_token_view(open_token_view(app, "Token table"), "Response tokens")  # both choices outlive the view not shown
    assert widget(app.select_slider, "Tokens shown").value == range(2 * board.RUNNING_TEXT_TOKENS, count)
    assert widget(app.selectbox, "Colour tokens by").value == "prob" and running_text(app).count("<span") == 10
    # texts keep their spaces and newlines, wrapped by the page style rather than Streamlit's slower pre-wrap
    assert any("break-spaces" in html.proto.body and "stText" in html.proto.body for html in app.get("html"))


# The researcher's path: a sample picked in the table is shown right under it, followed by its group's other
# completions, each a click away from the samples pair.
def test_the_sample_view_shows_the_samples_group_and_opens_its_other_completions(grpo_root, monkeypatch):
    app = load_and_view(start(grpo_root, monkeypatch))
    step_lines = [line for line in lines_of(grpo_root / "grpo_run") if line["step"] == 0]  # batch order: file, line
    group_of = list(dict.fromkeys(line["group_id"] for line in step_lines))
    widget(app.number_input, "Sample index in current step batch").set_value(5).run()
    group = group_of.index(step_lines[5]["group_id"])
    members = [i for i, line in enumerate(step_lines) if line["group_id"] == step_lines[5]["group_id"]]
    assert batch_table(app)["group"].tolist() == [group_of.index(line["group_id"]) for line in step_lines]
    assert f"**Group {group} of this step**: {len(members)} completion(s) of the prompt of sample #5." in [m.value for m in app.markdown]
    other = next(i for i in members if i != 5)
    buttons = [b for b in app.button if b.label.startswith("#")]  # a button per completion, the one shown disabled
    assert [(b.label, b.disabled) for b in buttons] == [(f"#{i} (shown above)", True) if i == 5 else (f"#{i}", False) for i in members]
    keys = [b.key for b in buttons]
    next(b for b in app.button if b.label == f"#{other}").click().run()
    assert widget(app.number_input, "Sample index in current step batch").value == other
    # Keyed by their places, the same buttons relabelled: the browser keeps its elements.
    assert [(b.key, b.label, b.disabled) for b in app.button if b.label.startswith("#")] == [
        (key, f"#{i} (shown above)" if i == other else f"#{i}", i == other) for key, i in zip(keys, members)]
    assert step_lines[other]["response"] in [t.value for t in app.text]
    app.session_state["step_table"] = "Groups"
    app.run()
    groups = next(frame.value for frame in app.dataframe if "reward spread" in frame.value.columns)
    assert sorted(groups["group"]) == list(range(len(group_of)))
    row = groups.set_index("group").loc[group]
    assert list(row["samples"]) == members and list(row["rewards"]) == [f"{step_lines[i]['reward']:.4g}" for i in members]
    assert row["group_id"] == step_lines[5]["group_id"] and row["prompt"] == clean_text(step_lines[members[0]]["prompt"], "<PAD>", "<endofsystem>")[:200]
    assert not app.exception


# A group of more than GROUP_SHOWN completions (many generations a prompt, or a group id that is the step) is drawn
# GROUP_SHOWN at a time: the part holding the sample first, any other part on request, its buttons opening its samples.
def test_a_large_group_is_drawn_a_part_at_a_time(tmp_path, monkeypatch):
    count = 2 * board.GROUP_SHOWN + 5
    lines = [sample(1, prompt="one prompt", response=f"completion {i}", reward=i / count, group_id="g") for i in range(count)]
    lines.insert(3, sample(1, prompt="another", response="alone", group_id="h"))  # batch order, not group order
    write_lines(tmp_path / "runs" / "run" / "r.jsonl", lines)
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    members = [i for i, line in enumerate(lines) if line["group_id"] == "g"]
    sample_index = widget(app.number_input, "Sample index in current step batch")
    sample_index.set_value(members[board.GROUP_SHOWN + 2]).run()

    def drawn() -> list[int]:  # the samples whose buttons are drawn (the tree lists the four columns one by one)
        return sorted(int(b.label.removesuffix(" (shown above)")[1:]) for b in app.button if b.label.startswith("#"))

    part = widget(app.selectbox, "Completions shown")
    assert part.options == [f"{start + 1}-{min(start + board.GROUP_SHOWN, count)} of {count}" for start in range(0, count, board.GROUP_SHOWN)]
    assert part.value == board.GROUP_SHOWN and drawn() == members[board.GROUP_SHOWN : 2 * board.GROUP_SHOWN]
    assert f"completion {members[board.GROUP_SHOWN]}" in [t.value for t in app.text] and "completion 0" not in [t.value for t in app.text]
    part.set_value(2 * board.GROUP_SHOWN).run()
    assert drawn() == members[2 * board.GROUP_SHOWN :]
    next(b for b in app.button if b.label == f"#{members[-1]}").click().run()  # a completion of this part opened
    assert widget(app.number_input, "Sample index in current step batch").value == members[-1]
    assert widget(app.selectbox, "Completions shown").value == 2 * board.GROUP_SHOWN and drawn() == members[2 * board.GROUP_SHOWN :]
    widget(app.number_input, "Sample index in current step batch").set_value(members[1]).run()  # another sample: its part
    assert widget(app.selectbox, "Completions shown").value == 0 and drawn() == members[: board.GROUP_SHOWN]
    widget(app.number_input, "Sample index in current step batch").set_value(members[-1]).run()
    widget(app.number_input, "Sample index in current step batch").set_value(3).run()  # a group of one: no parts
    assert not [box for box in app.selectbox if box.label == "Completions shown"] and drawn() == [3]
    widget(app.number_input, "Sample index in current step batch").set_value(members[-1]).run()  # back: its part again
    assert widget(app.selectbox, "Completions shown").value == 2 * board.GROUP_SHOWN and drawn() == members[2 * board.GROUP_SHOWN :]
    assert not app.exception


def test_step_kl_names_what_it_plots_and_offers_a_robust_view(grpo_root, monkeypatch):
    app = load_and_view(start(grpo_root, monkeypatch))
    app.session_state["curve_view"] = "Step-KL"
    app.run()

    def chart() -> dict:
        return chart_spec(app.get("vega_lite_chart")[0])

    assert "mean log ratio, logp - ref_logp (Use LogP as KL)" in chart()["title"]["text"]
    assert {p["series"] for p in chart()["data"]["values"]} == {"log_ratio (logp - ref_logp)"}
    widget(app.checkbox, "Use LogP as KL").uncheck().run()
    widget(app.selectbox, "KL estimator").set_value("k3").run()
    assert chart()["title"]["text"].endswith("mean KL per token, estimator k3")
    lines = lines_of(grpo_root / "grpo_run")

    def k3_means(line) -> float:
        ratio = np.array(line["logprobs"]) - np.array(line["ref_logprobs"])
        return float(np.mean(np.expm1(-ratio) + ratio))

    per_step = {step: [k3_means(line) for line in lines if line["step"] == step] for step in range(5)}
    points = chart()["data"]["values"]
    assert [p["centre"] for p in points] == pytest.approx([np.mean(per_step[step]) for step in range(5)])
    widget(app.radio, "Per step").set_value("median (25-75 %)").run()
    points = chart()["data"]["values"]
    assert [p["centre"] for p in points] == pytest.approx([np.median(per_step[step]) for step in range(5)])
    assert [p["high"] for p in points] == pytest.approx([np.percentile(per_step[step], 75) for step in range(5)])
    widget(app.toggle, "Log scale").set_value(True).run()
    assert chart()["layer"][0]["encoding"]["y"]["scale"]["type"] == "symlog"
    app.session_state["curve_view"] = "Step-Reward"  # kept while the view is not shown
    app.run()
    app.session_state["curve_view"] = "Step-KL"
    app.run()
    assert widget(app.radio, "Per step").value == "median (25-75 %)" and widget(app.toggle, "Log scale").value


def test_live_mode_announces_new_steps_or_follows_them(grpo_root, monkeypatch):
    app = load_and_view(start(grpo_root, monkeypatch))
    widget(app.slider, "Step Index(5 total steps)").set_value(2).run()
    widget(app.toggle, "Live mode").set_value(True).run()
    run_file = grpo_root / "grpo_run" / "rollout_data_rank_1.jsonl"
    with open(run_file, "a") as file:
        file.write(json.dumps(sample(5, reward=9.0)) + "\n")
    app.run()
    assert "1 new step(s) since you chose step 2; the latest is 5." in [i.value for i in app.info]
    next(b for b in app.button if b.label == "Show the latest step").click().run()
    assert widget(app.slider, "Step Index(6 total steps)").value == 5
    assert not [i for i in app.info if "new step(s)" in i.value]
    with open(run_file, "a") as file:
        file.write(json.dumps(sample(6, reward=9.0)) + "\n")
    app.run()  # counted from the step the button showed
    assert "1 new step(s) since you chose step 5; the latest is 6." in [i.value for i in app.info]
    widget(app.slider, "Step Index(7 total steps)").set_value(1).run()
    widget(app.toggle, "Follow the latest step").set_value(True).run()  # following starts at the latest step
    assert widget(app.slider, "Step Index(7 total steps)").value == 6
    with open(run_file, "a") as file:
        file.write(json.dumps(sample(7, reward=9.0)) + "\n")
    app.run()
    assert widget(app.slider, "Step Index(8 total steps)").value == 7
    assert not app.exception


@pytest.fixture
def served_to_the_network(monkeypatch):
    """The board as `RL_LOGGING_BOARD_ADDRESS=0.0.0.0 bash start.sh` serves it (AppTest runs in this process)."""
    from streamlit import config

    before = config.get_option("server.address")
    config.set_option("server.address", "0.0.0.0")
    yield
    config.set_option("server.address", before)


def test_served_to_the_network_the_page_needs_the_token_and_stays_under_the_root(grpo_root, tmp_path, monkeypatch, served_to_the_network):
    outside = tmp_path / "elsewhere"
    write_run(outside / "secret_run", steps=1, samples=2, tokens=4, ranks=1, workers=1)
    (grpo_root / "link_out").symlink_to(outside / "secret_run")  # a run folder that leads out of the root
    monkeypatch.delenv("RL_LOGGING_BOARD_TOKEN", raising=False)
    app = start(grpo_root, monkeypatch)
    assert "without an access token" in app.error[0].value and not app.sidebar.button  # nothing served
    monkeypatch.setenv("RL_LOGGING_BOARD_TOKEN", "s3cret-token")
    app = start(grpo_root, monkeypatch)
    assert not app.sidebar.button
    widget(app.text_input, "Access token").input("wrong").run()
    assert app.error[0].value == "Wrong access token." and not app.sidebar.button
    widget(app.text_input, "Access token").input("s3cret-token").run()
    assert not app.error and not [t for t in app.text_input if t.label == "Access token"]
    widget(app.sidebar.text_input, "Log(s) Root Path").input(str(outside)).run()  # the box cannot leave the root
    assert "opens only folders under" in app.sidebar.warning[0].value
    assert widget(app.sidebar.selectbox, "Choose Log Name").options == ["grpo_run", "link_out"]
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("link_out").run()
    load_and_view(app)
    assert "leads outside" in app.warning[0].value and not app.dataframe
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("grpo_run").run()
    load_and_view(app)
    assert batch_table(app)["reward"].notna().all()


# A run folder under the root holding a file that links outside it: its rank file, or its rollout_meta.json linked to a
# credentials file, was opened and shown (only the run folder itself was checked). A run holding such a link is not
# opened, and a compared one is left out.
@pytest.mark.parametrize("linked", ["rollout_data_rank_9.jsonl", "rollout_meta_x.json", "images"])
def test_served_to_the_network_a_run_holding_a_link_out_of_the_root_is_not_opened(grpo_root, tmp_path, monkeypatch, served_to_the_network, linked):
    outside = tmp_path / "elsewhere"
    write_run(outside / "secret_run", steps=1, samples=2, tokens=4, ranks=1, workers=1)
    (outside / "credentials.json").write_text(json.dumps({"client_secret": "s3cret"}))
    target = {"rollout_data_rank_9.jsonl": next((outside / "secret_run").glob("*rank_0*.jsonl")), "rollout_meta_x.json": outside / "credentials.json", "images": outside}[linked]
    shutil.copytree(grpo_root / "grpo_run", grpo_root / "linked_run")
    (grpo_root / "linked_run" / linked).symlink_to(target)
    monkeypatch.setenv("RL_LOGGING_BOARD_TOKEN", "t")
    app = start(grpo_root, monkeypatch)
    widget(app.text_input, "Access token").input("t").run()
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("linked_run").run()
    load_and_view(app)
    assert "is a link that leads outside" in app.warning[0].value and not app.dataframe
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("grpo_run").run()
    widget(app.sidebar.multiselect, "Compare with").set_value(["linked_run"])
    load_and_view(app)
    assert batch_table(app)["reward"].notna().all() and "s3cret" not in json.dumps([element.value for element in app.markdown])


def test_served_to_the_network_any_root_opens_when_asked(grpo_root, tmp_path, monkeypatch, served_to_the_network):
    write_run(tmp_path / "elsewhere" / "other_run", steps=1, samples=2, tokens=4, ranks=1, workers=1)
    monkeypatch.setenv("RL_LOGGING_BOARD_TOKEN", "t")
    monkeypatch.setenv("RL_LOGGING_BOARD_ALLOW_ANY_ROOT", "1")
    app = start(grpo_root, monkeypatch)
    widget(app.text_input, "Access token").input("t").run()
    widget(app.sidebar.text_input, "Log(s) Root Path").input(str(tmp_path / "elsewhere")).run()
    assert not app.sidebar.warning and widget(app.sidebar.selectbox, "Choose Log Name").value == "other_run"


# The page runs anew as __main__ on every rerun: the worker processes must still be started once per server.
def test_reruns_and_loads_share_one_pool_of_worker_processes(grpo_root, monkeypatch):
    app = start(grpo_root, monkeypatch)
    workers = set(multiprocessing.active_children())
    for _ in range(3):
        load_and_view(app)
        app.run()
    assert set(multiprocessing.active_children()) == workers and len(workers) >= WORKERS > 1


# Sessions draw their step areas in the server's turns (rl_board.reading.workers.Turns), one at a time: a step change,
# a sample change and the token area inside them take the one turn the server has, whichever the session, which another
# session's work can hold; a session whose wait runs out is drawn all the same.
def test_the_step_area_is_drawn_in_the_servers_turns(grpo_root, monkeypatch):
    taken, turn = [], Turns.turn

    @contextlib.contextmanager
    def recorded(self):
        with turn(self) as had:
            taken.append((self, had))
            yield had

    monkeypatch.setattr(Turns, "turn", recorded)
    app = start(grpo_root, monkeypatch)
    turns = taken[0][0]
    assert taken == [(turns, True)] * 3  # the step area, its sample view, the token area

    def taken_by(change) -> list:
        taken.clear()
        change()
        assert not app.exception
        return taken[:]

    assert taken_by(lambda: widget(app.slider, "Step Index(5 total steps)").set_value(2).run()) == [(turns, True)] * 3
    assert taken_by(lambda: widget(app.number_input, "Sample index in current step batch").set_value(3).run()) == [(turns, True)] * 3  # AppTest reruns the page
    with turn_held_elsewhere(turns):  # another session's work holds it
        assert taken_by(lambda: widget(app.slider, "Step Index(5 total steps)").set_value(3).run()) == [(turns, False)] * 3
    step_lines = [line for line in lines_of(grpo_root / "grpo_run") if line["step"] == 3]
    assert sorted(batch_table(app)["reward"]) == sorted(line["reward"] for line in step_lines)  # drawn all the same
    assert taken_by(lambda: widget(app.slider, "Step Index(5 total steps)").set_value(4).run()) == [(turns, True)] * 3
    assert taken_by(lambda: start(grpo_root, monkeypatch)) == [(turns, True)] * 3  # another session: the same turns


# The token in the link (start.sh prints ?token=...) is accepted and then dropped from the address, so it does not
# stay in the address bar or the browser's history; a wrong one in the link still offers the box.
def test_served_to_the_network_a_token_in_the_link_is_accepted_and_dropped(grpo_root, monkeypatch, served_to_the_network):
    monkeypatch.setenv("RL_LOGGING_BOARD_TOKEN", "s3cret-token")
    monkeypatch.setenv("RL_LOGGING_BOARD_ROOT", str(grpo_root))
    app = AppTest.from_file(APP, default_timeout=120)
    app.query_params["token"] = "s3cret-token"
    app.run()
    assert not app.exception and app.sidebar.button and not [t for t in app.text_input if t.label == "Access token"]
    assert "token" not in app.query_params
    wrong = AppTest.from_file(APP, default_timeout=120)
    wrong.query_params["token"] = "not-it"
    wrong.run()
    assert [error.value for error in wrong.error] == ["Wrong access token in the link."] and not wrong.sidebar.button
    widget(wrong.text_input, "Access token").input("s3cret-token").run()
    assert wrong.sidebar.button and not wrong.error and "token" not in wrong.query_params


# A disk's error while a run is read is said, not raised: one file's read while the run is indexed, as a row of the
# load report (the other files shown); the run folder's own (a listing on a mount gone bad), in an error box naming
# the run. Either is read again at the next load.
def test_a_disk_error_while_reading_a_run_is_said_not_raised(tmp_path, monkeypatch):
    write_lines(tmp_path / "runs" / "run" / "rollout_data_rank_0.jsonl", [sample(0), sample(1)])
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    rank_file, run_dir = tmp_path / "runs" / "run" / "rollout_data_rank_0.jsonl", tmp_path / "runs" / "run"

    def failing(path, *_):
        raise OSError(5, "Input/output error", path)

    monkeypatch.setattr("rl_board.reading.workers.read_range", failing)
    app = start(tmp_path / "runs", monkeypatch)
    assert not app.error and [w.value for w in app.warning] == ["No loadable sample in this run: open the load report above to see why."]
    app.session_state["load_report_details"] = True
    app.run()
    problems = widget(app.expander, "Load report").dataframe[-1].value
    assert problems["reason"].tolist() == [f"its new lines could not be read ([Errno 5] Input/output error: '{rank_file}'): left out, read again at the next load"]
    monkeypatch.undo()
    monkeypatch.setenv("RL_LOGGING_BOARD_ROOT", str(tmp_path / "runs"))
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("rl_board.reading.store.run_sources", failing)
    load_and_view(app)
    assert [error.value for error in app.error] == [markdown_literal(f"{run_dir} could not be read ([Errno 5] Input/output error: '{run_dir}'): it is read again at the next load or refresh.")]
    monkeypatch.undo()
    monkeypatch.setenv("RL_LOGGING_BOARD_ROOT", str(tmp_path / "runs"))
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    load_and_view(app)
    assert not app.error and len(batch_table(app)) == 1
