"""Agent trajectories on the page (AppTest): a sample's turns a row each with its numbers recomputed here from the
line's tokens, a click on a turn opening it (tool call, result, error: as text) and limiting the token area to its span,
bad turns noted without breaking the view, and the Step-Tools tab's counts equal to a recount of the lines."""


import numpy as np
import pytest

import rl_logging_board as board
from tests.support.page import chart_spec, click_row, curve_views, lines_of, load_and_view, start, widget
from tests.support.runs import sample, write_lines
from tests.support.vision_tool_runs import draw_images

STEPS, SAMPLES = 3, 4
TOOL_ERROR = "bad expression <script>\n```\n  **at** line 2"  # a traceback's lines, with a fence of its own


def agent_line(step: int, index: int, rng) -> dict:
    """A trajectory: the question, then rounds of an assistant turn calling `search` or `calc` and the tool's answer
    (every third one an error), then the answer; tokens: each policy turn 3 to 6 tokens, each tool turn 4."""
    turns = [{"role": "user", "text": f"question {step}.{index}"}]
    tokens, logprobs, mask = [], [], []
    for round_ in range(index % 3 + 1):
        length = int(rng.integers(3, 7))
        tool = ["search", "calc"][(index + round_) % 2]
        turns.append({"role": "assistant", "text": f"thinking {round_}", "token_start": len(tokens), "token_end": len(tokens) + length,
                      "tool_calls": [{"name": tool, "arguments": {"query": f"q{round_}"} if tool == "search" else '{"expr": "1+'}]})
        tokens += [f"a{round_}.{k}" for k in range(length)]
        logprobs += [float(-rng.exponential()) for _ in range(length)]
        mask += [1] * length
        failed = (step + index + round_) % 3 == 0
        turns.append({"role": "tool", "text": "{'error': 'bad'}" if failed else f"<b>result {round_}</b>", "tool_name": tool, "token_start": len(tokens), "token_end": len(tokens) + 4, **({"error": TOOL_ERROR} if failed else {})})
        tokens += [f"t{round_}.{k}" for k in range(4)]
        logprobs += [None] * 4
        mask += [0] * 4
    turns.append({"role": "assistant", "text": "the answer", "token_start": len(tokens), "token_end": len(tokens) + 2})
    tokens += ["ans", "wer"]
    logprobs += [float(-rng.exponential()) for _ in range(2)]
    mask += [1, 1]
    return sample(step, reward=float(index % 2), response_tokens=tokens, logprobs=logprobs, tool_mask=mask, turns=turns, stop_reason="stop")


@pytest.fixture
def root(tmp_path):
    rng = np.random.default_rng(0)
    write_lines(tmp_path / "runs" / "agent" / "rollout_data_rank_0.jsonl", [agent_line(step, index, rng) for step in range(1, STEPS + 1) for index in range(SAMPLES)])
    return tmp_path / "runs"


def trajectory_frame(app):
    return next(frame for frame in app.dataframe if frame.key and frame.key.startswith("trajectory:"))


def test_a_trajectory_shows_each_turn_with_its_numbers_and_a_click_opens_it(root, monkeypatch):
    app = load_and_view(start(root, monkeypatch))
    widget(app.number_input, "Sample index in current step batch").set_value(2).run()
    step = widget(app.slider, f"Step Index({STEPS} total steps)").value
    line = [line for line in lines_of(root / "agent") if line["step"] == step][2]
    frame = trajectory_frame(app)
    turns = line["turns"]
    assert frame.value["role"].tolist() == [turn["role"] for turn in turns]
    calls = [turn["tool_calls"][0]["name"] if turn.get("tool_calls") else turn.get("tool_name", "") for turn in turns]
    assert frame.value["tool"].tolist() == calls and "" in calls  # a turn of no tool blank, not "None"
    for (_, row), turn in zip(frame.value.iterrows(), turns):
        if "token_start" in turn and turn["role"] == "assistant":
            values = line["logprobs"][turn["token_start"] : turn["token_end"]]
            assert row["tokens"] == len(values) and row["mean logp"] == pytest.approx(np.mean(values))
        elif turn["role"] == "tool":
            assert row["tokens"] == 4 and np.isnan(row["mean logp"])  # a tool's tokens have no log-probs
    batch = next(frame.value for frame in app.dataframe if "tool_calls" in frame.value.columns)
    assert batch["turns"].iloc[2] == len(turns) and batch["tool_calls"].iloc[2] == len(turns) // 2 - 1
    assert {"turns", "tool_calls", "tool_errors"} <= set(widget(app.multiselect, "Filter by").options)
    header = next(markdown.value for markdown in app.markdown if markdown.value.startswith("**Trajectory**"))
    errors = sum("error" in turn for turn in turns)
    assert f"{len(turns)} turn(s) · {len(turns) // 2 - 1} tool call(s) · {errors} tool error(s) · stopped: stop" in header
    # The second tool call's arguments are not JSON: kept as written. A click on its turn opens it.
    click_row(app, frame, 3)
    assert turns[3]["tool_calls"][0]["name"] == "calc" and [code.value for code in app.code] == ['{"expr": "1+']
    token_table = next(frame.value for frame in app.dataframe if "logp" in frame.value.columns)
    span = turns[3]
    assert len(token_table) == span["token_end"] - span["token_start"]
    assert token_table["logp"].tolist() == pytest.approx(line["logprobs"][span["token_start"] : span["token_end"]])
    # A tool's turn: its result as text (never HTML), its error as written, each line, in a code block it cannot close.
    click_row(app, trajectory_frame(app), 4)
    assert turns[4]["text"] in [text.value for text in app.text]
    click_row(app, trajectory_frame(app), next(position for position, turn in enumerate(turns) if "error" in turn))
    assert f"Tool error:\n````\n{TOOL_ERROR}\n````" in [error.value for error in app.error]


def test_bad_turns_are_noted_and_the_rest_shown(tmp_path, monkeypatch):
    turns = [{"role": "user", "text": "q"}, {"role": "wizard", "text": "?"}, {"role": "assistant", "text": "a", "token_start": 1, "token_end": 99},
             {"role": "assistant", "text": "b", "token_start": "x", "token_end": 2}, {"role": "tool", "text": "r", "tool_calls": "not a list"}]
    write_lines(tmp_path / "runs" / "bad" / "rollout_data_rank_0.jsonl", [sample(1, response_tokens=["a", "b", "c"], logprobs=[-1.0, -2.0, -3.0], turns=turns), sample(2, turns="not a list", logprobs=[-1.0], response_tokens=["x"])])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    widget(app.slider, "Step Index(2 total steps)").set_value(1).run()
    assert trajectory_frame(app).value["role"].tolist() == ["user", "wizard", "assistant", "assistant", "tool"]
    warnings = " ".join(warning.value for warning in app.warning)
    assert "role 'wizard'" in warnings and "goes past the response's 3 tokens" in warnings and "is not two integers" in warnings
    widget(app.slider, "Step Index(2 total steps)").set_value(2).run()
    assert not app.exception and not [frame for frame in app.dataframe if frame.key and frame.key.startswith("trajectory:")]


def test_a_turns_images_are_shown_when_it_is_opened(tmp_path, monkeypatch):
    """A tool's turn with images: their count in the trajectory table; opened, the good image shown with its size and
    each path that cannot be shown (outside the run folder, a link out of it, not an image) noted, never read."""
    run_dir = tmp_path / "runs" / "drawn"
    draw_images(run_dir / "images")
    shown = {"path": "images/wide.png", "width": 1200, "height": 500}
    hostile = [{"path": path} for path in ("../outside.png", "images/link.png", "images/page.png", "/etc/passwd")]
    turns = [{"role": "user", "text": "draw it"}, {"role": "assistant", "text": "", "tool_calls": [{"name": "draw", "arguments": {}}], "token_start": 0, "token_end": 2},
             {"role": "tool", "text": "", "tool_name": "draw", "images": [shown, *hostile], "token_start": 2, "token_end": 3},
             {"role": "assistant", "text": "a circle", "token_start": 3, "token_end": 4}]
    write_lines(run_dir / "rollout_data_rank_0.jsonl", [sample(1, response_tokens=["a", "b", "c", "d"], logprobs=[-1.0, -2.0, None, -3.0], tool_mask=[1, 1, 0, 1], turns=turns)])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    frame = trajectory_frame(app)
    assert frame.value["images"].tolist()[2] == 5 and frame.value["images"].isna().sum() == 3
    assert not any(element.proto.imgs for element in app.get("image"))  # nothing drawn until a turn is opened
    click_row(app, frame, 2)
    [image] = [image for element in app.get("image") for image in element.proto.imgs]
    assert image.caption == "image 1 · 1200 × 500"
    [notes] = [caption.value for caption in app.caption if caption.value.startswith("🖼️")]
    assert notes.startswith("🖼️ 4 image(s) not shown:")
    for reason in ("'..' leads out", "symbolic link", "not a PNG", "absolute"):
        assert reason in notes


def test_a_long_trajectory_s_token_area_shows_its_first_tokens_until_a_turn_is_picked(tmp_path, monkeypatch):
    length = board.LONG_TRAJECTORY_TOKENS * 2 // 3  # two turns: more tokens than the token area shows at once
    turns = [{"role": "user", "text": "go"}, {"role": "assistant", "text": "a", "token_start": 0, "token_end": length},
             {"role": "assistant", "text": "b", "token_start": length, "token_end": 2 * length}]
    logprobs = [-float(k % 7) for k in range(2 * length)]
    write_lines(tmp_path / "runs" / "long" / "rollout_data_rank_0.jsonl", [sample(1, response_tokens=["w"] * (2 * length), logprobs=logprobs, turns=turns)])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    token_table = next(frame.value for frame in app.dataframe if "logp" in frame.value.columns)
    assert len(token_table) == board.LONG_TRAJECTORY_TOKENS
    assert f"The first {board.LONG_TRAJECTORY_TOKENS:,} of this trajectory's {2 * length:,} tokens" in " ".join(caption.value for caption in app.caption)
    click_row(app, trajectory_frame(app), 2)
    token_table = next(frame.value for frame in app.dataframe if "logp" in frame.value.columns)
    assert len(token_table) == length and token_table["logp"].tolist() == logprobs[length:]


def test_step_tools_counts_equal_a_recount(root, monkeypatch):
    app = load_and_view(start(root, monkeypatch))
    app.session_state["curve_view"] = "Step-Tools"
    app.run()
    assert not app.exception, app.exception
    lines = lines_of(root / "agent")
    widget(app.selectbox, "Per step").set_value("success rate: calc").run()
    [tab] = [tab for tab in curve_views(app) if tab.label == "Step-Tools"]
    [chart] = [chart_spec(chart) for chart in tab.get("vega_lite_chart")]
    points = {point["step"]: point["value"] for point in chart["data"]["values"]}
    for step in range(1, STEPS + 1):
        results = [turn for line in lines if line["step"] == step for turn in line["turns"] if turn["role"] == "tool" and turn["tool_name"] == "calc"]
        assert points[step] == pytest.approx(sum("error" not in turn for turn in results) / len(results))
    summary = next(frame.value for frame in app.dataframe if "success rate" in frame.value.columns)
    calls = [call["name"] for line in lines for turn in line["turns"] for call in turn.get("tool_calls", [])]
    assert dict(zip(summary["tool"], summary["calls"])) == {name: calls.count(name) for name in set(calls)}
