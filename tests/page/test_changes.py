"""What changed between A and B on the page (AppTest): the counts and the table equal a recount from the raw lines, for
two halves of one run and for two runs, and for two VLM runs asking one question of different pictures (a prompt per
picture); a click on a prompt shows its images and its responses on each side with the words that differ marked,
hostile text escaped; nothing is computed while the region is closed."""

import html
import json
import re

import numpy as np
import pandas as pd
import pytest
import streamlit.elements.lib.policies as policies

import rl_logging_board as board
from rl_board.changes import default_threshold
from rl_board.figures import WORD_DIFF_BACKGROUNDS
from rl_board.text import shorten
from tests.page.test_history import downloads  # noqa: F401  (a fixture)
from tests.support.page import click_row, lines_of, load_and_view, start, widget
from tests.support.runs import sample, write_lines
from tests.support.vision_tool_runs import QUESTION, write_one_question_runs

HOSTILE = "<script>alert(1)</script> :red[x] ] [link](http://example.com)"


def agent_lines(rewards: dict[str, tuple[list, list]], steps=(1, 2)) -> list[dict]:
    lines = []
    for prompt, sides in rewards.items():
        for step, values in zip(steps, sides):
            lines += [sample(step, prompt=prompt, reward=value, response=f"the answer to {prompt} is {value} {HOSTILE if step == steps[1] else ''}",
                             response_tokens=["w"] * (2 + k)) for k, value in enumerate(values)]
    return lines


REWARDS = {
    "add 2 and 3": ([1, 1], [0, 0]),  # regressed
    "add 4 and 4": ([0, 0], [1, 0]),  # newly solved
    "add 1 and 9": ([1, 0], [1, 1]),  # improved
    "add 7 and 0": ([1, 1], [1, 1]),  # unchanged
    "add 5 and 5": ([0, 1], [0, 0]),  # regressed
}


@pytest.fixture
def root(tmp_path):
    write_lines(tmp_path / "runs" / "b_run" / "rollout_data_rank_0.jsonl", agent_lines(REWARDS))
    other = {prompt: (sides[1], [1 - value for value in sides[1]]) for prompt, sides in REWARDS.items()}
    write_lines(tmp_path / "runs" / "a_other" / "rollout_data_rank_0.jsonl", agent_lines(other, steps=(1, 3)))
    return tmp_path / "runs"


def open_changes(app):
    app.session_state[board.StateKey.CHANGES] = True
    app.run()
    assert not app.exception, app.exception
    return widget(app.expander, "🔀 What changed between A and B: the prompts that regressed or were newly solved")


def expected_counts(a: pd.DataFrame, b: pd.DataFrame) -> dict[str, int]:
    rates = pd.concat([a.groupby("prompt")["reward"].apply(lambda r: (r >= 1).mean()), b.groupby("prompt")["reward"].apply(lambda r: (r >= 1).mean())], axis=1, keys=["a", "b"]).dropna()
    return {"regressed": int((rates["b"] < rates["a"]).sum()), "newly solved": int(((rates["a"] == 0) & (rates["b"] > 0)).sum()),
            "improved": int(((rates["b"] > rates["a"]) & (rates["a"] > 0)).sum()), "unchanged": int((rates["b"] == rates["a"]).sum())}


def test_the_halves_of_a_run_counted_as_a_recount_and_a_click_shows_the_marked_responses(root, monkeypatch):
    app = load_and_view(start(root, monkeypatch))
    assert not [metric for metric in app.get("metric") if metric.label == "regressed"]  # closed: nothing computed
    details = open_changes(app)
    lines = pd.DataFrame(lines_of(root / "b_run"))
    expected = expected_counts(lines[lines["step"] == 1], lines[lines["step"] == 2])
    assert expected == {"regressed": 2, "newly solved": 1, "improved": 1, "unchanged": 1}
    assert {metric.label: int(metric.value) for metric in details.get("metric")} == expected
    [frame] = [frame for frame in details.dataframe]
    table = frame.value
    assert table.columns.tolist() == board.CHANGES_SHOWN  # a text-only run: no images column
    assert any(caption.value.startswith("5 prompts on both sides, matched by their text; pass:") for caption in details.caption)
    assert table["prompt"].tolist()[:2] == ["add 2 and 3", "add 5 and 5"]  # the worst change first
    assert table.set_index("prompt")["samples_a"].to_dict() == lines[lines["step"] == 1].groupby("prompt").size().to_dict()
    click_row(app, frame, 0)
    details = widget(app.expander, "🔀 What changed between A and B: the prompts that regressed or were newly solved")
    assert widget(details.selectbox, "A's response").value == 0 and widget(details.selectbox, "B's response").value == 0
    marked = [element.proto.body for element in details.get("html") if "class='rl-word-diff'" in element.proto.body]
    assert len(marked) == 2
    removed, added = marked
    assert f'<span style="background:{WORD_DIFF_BACKGROUNDS["removed"]}">1' in removed and f'<span style="background:{WORD_DIFF_BACKGROUNDS["added"]}">0' in added
    assert html.escape(HOSTILE) in added and "<script>" not in added  # as text: HTML escaped, no Markdown to read it


def test_long_responses_show_their_marked_start_and_end_until_whole_texts_are_asked_for(tmp_path, monkeypatch):
    responses = {step: "".join(f"line {i}: {'ab' * (i % 40)} {step if i % 7 == 0 else 'x'}\n" for i in range(1000)) for step in (1, 2)}
    assert all(len(text) > board.TEXT_SHOWN for text in responses.values())
    write_lines(tmp_path / "runs" / "run" / "rollout_data_rank_0.jsonl", [sample(step, prompt="p", reward=2 - step, response=text) for step, text in responses.items()])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    details = open_changes(app)
    click_row(app, details.dataframe[0], 0)

    def shown():
        details = widget(app.expander, "🔀 What changed between A and B: the prompts that regressed or were newly solved")
        parts = [html.unescape(re.sub(r"<[^>]+>", "", element.proto.body)) for element in details.get("html") if "class='rl-word-diff'" in element.proto.body]
        return parts, [caption.value for caption in details.caption if "characters not shown here" in caption.value]

    half = board.TEXT_SHOWN // 2
    parts, captions = shown()
    assert parts == [responses[1][:half], responses[1][-half:], responses[2][:half], responses[2][-half:]]
    assert captions == [f"… {len(text) - board.TEXT_SHOWN:,} of its {len(text):,} characters not shown here: Show Whole Texts, in the sidebar, shows them …" for text in responses.values()]
    widget(app.checkbox, "Show Whole Texts").check().run()
    parts, captions = shown()
    assert parts == [responses[1], responses[2]] and not captions


def test_two_runs_and_the_pass_rule(root, monkeypatch, downloads):  # noqa: F811  (the fixture)
    app = load_and_view(start(root, monkeypatch))
    widget(app.sidebar.multiselect, "Compare with").set_value(["a_other"]).run()
    details = open_changes(app)
    assert widget(details.selectbox, "A: run").value == "b_run" and widget(details.selectbox, "B: run").value == "a_other"
    a, b = pd.DataFrame(lines_of(root / "b_run")), pd.DataFrame(lines_of(root / "a_other"))
    assert {metric.label: int(metric.value) for metric in details.get("metric")} == expected_counts(a, b)
    exported = downloads(app, "Prompts (CSV)").set_index("prompt")
    assert exported["reward_b"].to_dict() == pytest.approx(b.groupby("prompt")["reward"].mean().to_dict())
    assert exported["samples_a"].to_dict() == a.groupby("prompt").size().to_dict()
    widget(details.select_slider, "B: steps").set_value((3, 3)).run()
    details = widget(app.expander, "🔀 What changed between A and B: the prompts that regressed or were newly solved")
    assert {metric.label: int(metric.value) for metric in details.get("metric")} == expected_counts(a, b[b["step"] == 3])
    widget(details.number_input, "Pass when at least").set_value(0.5).run()  # the same with these 0/1 rewards
    assert not app.exception


# A run that grows moves the end of a side's step range that was at the run's last step; the page sets the range's
# state and passes the slider its first range, for which Streamlit logged a warning with a stack trace (switched off in
# .streamlit/config.toml).
def test_a_growing_run_moves_a_range_at_its_end_without_a_warning(tmp_path, monkeypatch):
    path = write_lines(tmp_path / "runs" / "b_run" / "rollout_data_rank_0.jsonl", agent_lines(REWARDS))
    monkeypatch.setattr(policies, "_shown_default_value_warning", False)  # once a process
    warned = []
    monkeypatch.setattr(policies._LOGGER, "warning", lambda message, *args, **kwargs: warned.append(message % args))
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    details = open_changes(app)
    assert widget(details.select_slider, "A: steps").value == (1, 1) and widget(details.select_slider, "B: steps").value == (2, 2)
    with open(path, "ab") as file:
        file.write(b"".join(json.dumps(line).encode() + b"\n" for line in agent_lines(REWARDS, steps=(2, 3)) if line["step"] == 3))
    widget(app.sidebar.button, "Load & View").click().run()
    details = widget(app.expander, "🔀 What changed between A and B: the prompts that regressed or were newly solved")
    assert widget(details.select_slider, "A: steps").value == (1, 1) and widget(details.select_slider, "B: steps").value == (2, 3)
    assert not warned and not app.exception


def test_a_side_of_a_facet_s_value(tmp_path, monkeypatch):
    """A run that mixes validation samples in: A every step's training samples, B the validation ones, as counted from
    the raw lines."""
    lines = [sample(step, prompt=f"q{k}", reward=float(k % 2 if mode == "train" else (k + 1) % 2), mode=mode) for step in (1, 2) for k in range(4) for mode in ("train", "val")]
    write_lines(tmp_path / "runs" / "mixed" / "rollout_data_rank_0.jsonl", lines)
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    details = open_changes(app)
    widget(details.select_slider, "A: steps").set_value((1, 2))
    widget(details.select_slider, "B: steps").set_value((1, 2))
    widget(details.selectbox, "A: samples").set_value(("text/mode", "train"))
    widget(details.selectbox, "B: samples").set_value(("text/mode", "val")).run()
    raw = pd.DataFrame(lines)
    expected = expected_counts(raw[raw["mode"] == "train"], raw[raw["mode"] == "val"])
    assert expected == {"regressed": 2, "newly solved": 2, "improved": 0, "unchanged": 0}
    details = widget(app.expander, "🔀 What changed between A and B: the prompts that regressed or were newly solved")
    assert {metric.label: int(metric.value) for metric in details.get("metric")} == expected


# A reward of +inf (an overflowing reward function) made the pass threshold's first value inf, which Streamlit's number
# box refuses: the section failed. Its first value is the midpoint of the finite rewards.
def test_infinite_rewards_leave_a_finite_pass_threshold(tmp_path, monkeypatch):
    lines = [sample(step, prompt=f"q{k}", reward=reward) for step in (1, 2) for k, reward in enumerate([0.2, 0.6, float("inf")])]
    write_lines(tmp_path / "runs" / "overflow" / "rollout_data_rank_0.jsonl", lines)
    details = open_changes(load_and_view(start(tmp_path / "runs", monkeypatch)))
    assert widget(details.number_input, "Pass when at least").value == pytest.approx(0.4)
    assert default_threshold(pd.DataFrame({"reward": [np.inf, -np.inf]}), pd.DataFrame({"reward": [np.nan]})) == 1.0  # nothing finite
    assert default_threshold(pd.DataFrame({"reward": [1e308]}), pd.DataFrame({"reward": [1e308, 0.0, 1.0, np.inf]})) == 5e307


def test_a_prompt_without_a_pass_rate_on_a_side_is_counted_and_shown(tmp_path, monkeypatch):
    """A prompt none of whose samples on a side has a reward has no pass rate there: its own count and pill, and a row
    (the caption counted it, and no choice of statuses showed it)."""
    lines = [sample(1, prompt="scored", reward=0.0), sample(2, prompt="scored", reward=1.0), sample(1, prompt="not scored on A", reward=None), sample(2, prompt="not scored on A", reward=1.0)]
    write_lines(tmp_path / "runs" / "run" / "rollout_data_rank_0.jsonl", lines)
    details = open_changes(load_and_view(start(tmp_path / "runs", monkeypatch)))
    assert {metric.label: metric.value for metric in details.metric} == {"regressed": "0", "newly solved": "1", "improved": "0", "unchanged": "0", "no pass rate": "1"}
    [frame] = details.dataframe
    assert dict(zip(frame.value["prompt"], frame.value["status"])) == {"scored": "newly solved", "not scored on A": "no pass rate"}


def image_paths(line: dict) -> tuple:
    return tuple(image["path"] if isinstance(image, dict) else image for image in line.get("images") or [])


# Two VLM runs asking one question of different pictures, the shown run against the compared one: a prompt per
# picture (and one for none), each with its own numbers as recounted from the raw lines; the pictures in both orders,
# another question and a copy of the red file under another path are on one side only. A click on the red picture's
# row offers only its lines on each side, and shows the picture. Before, the question was one prompt, every picture's.
def test_one_question_of_different_pictures_is_a_prompt_per_picture(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    lines = write_one_question_runs(root / "c_shown", root / "a_compared")
    app = load_and_view(start(root, monkeypatch))
    widget(app.sidebar.multiselect, "Compare with").set_value(["a_compared"]).run()
    details = open_changes(app)
    assert widget(details.selectbox, "A: run").value == "c_shown" and widget(details.selectbox, "B: run").value == "a_compared"
    threshold = (0.1 + 1.0) / 2  # the default: the middle of the rewards seen
    a, b = (pd.DataFrame({"prompt": [line["prompt"] for line in side], "images": [image_paths(line) for line in side], "reward": [line["reward"] for line in side]})
            for side in (lines["c_shown"], lines["a_compared"]))
    rates = pd.concat([side.assign(passed=side["reward"] >= threshold).groupby(["prompt", "images"]).agg(samples=("reward", "size"), reward=("reward", "mean"), passed=("passed", "mean"))
                       for side in (a, b)], axis=1, keys=["a", "b"]).dropna()
    assert list(rates.index) == [(QUESTION, ()), (QUESTION, ("images/blue.png",)), (QUESTION, ("images/red.png",))]
    assert widget(details.number_input, "Pass when at least").value == pytest.approx(threshold)
    assert {metric.label: int(metric.value) for metric in details.get("metric")} == {
        "regressed": int((rates["b", "passed"] < rates["a", "passed"]).sum()), "newly solved": 0, "improved": 0, "unchanged": int((rates["b", "passed"] == rates["a", "passed"]).sum())} == {
        "regressed": 2, "newly solved": 0, "improved": 0, "unchanged": 1}
    assert any(caption.value.startswith("3 prompts on both sides, matched by their text and images; ") and "3 prompt(s) only on A, 1 only on B: left out" in caption.value for caption in details.caption)
    [frame] = details.dataframe
    table = frame.value
    assert table.columns.tolist() == ["prompt", "images", *board.CHANGES_SHOWN[1:]]
    found = {(QUESTION, tuple(images)): (samples_a, reward_a, samples_b, reward_b) for images, samples_a, reward_a, samples_b, reward_b in table[["images", "samples_a", "reward_a", "samples_b", "reward_b"]].itertuples(index=False)}
    assert sorted(found) == list(rates.index)
    for prompt, row in rates.iterrows():
        assert found[prompt] == pytest.approx((row["a", "samples"], row["a", "reward"], row["b", "samples"], row["b", "reward"]), rel=1e-12)
    click_row(app, frame, [tuple(images) for images in table["images"]].index(("images/red.png",)))
    details = widget(app.expander, "🔀 What changed between A and B: the prompts that regressed or were newly solved")
    for side, run in (("A", "c_shown"), ("B", "a_compared")):
        offered = widget(details.selectbox, f"{side}'s response").options
        red = sorted((line for line in lines[run] if line["prompt"] == QUESTION and image_paths(line) == ("images/red.png",)), key=lambda line: -line["reward"])
        assert [(option.split(" · ")[0], option.split(" · ")[2]) for option in offered] == [(f"step {line['step']}", f"reward {line['reward']:.4g}") for line in red]
    [picture] = [image for element in details.get("image") for image in element.proto.imgs]
    assert picture.url


# Prompts that begin with the same system turn (a tool run's): the table showed that turn on every row, cut at the same
# place, so no two rows could be told apart; Drop System Prompt drops it there too, as in the batch and group tables.
def test_the_prompts_are_shown_without_their_system_turn(tmp_path, monkeypatch):
    system = "<|im_start|>system\n# Tools\nYou may call one or more functions." + " Their signatures follow." * 8 + "<|im_end|>\n"
    lines = [sample(step, prompt=f"{system}<|im_start|>user\nadd {k} and {k}<|im_end|>", reward=float(step == 2)) for step in (1, 2) for k in range(3)]
    write_lines(tmp_path / "runs" / "run" / "rollout_data_rank_0.jsonl", lines)
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    [frame] = open_changes(app).dataframe
    assert sorted(frame.value["prompt"]) == [f"<|im_start|>user\nadd {k} and {k}<|im_end|>" for k in range(3)]


def test_prompts_that_differ_only_in_their_system_turn_show_it(tmp_path, monkeypatch):
    """Two prompts of one question under two system prompts would read alike without them: they keep theirs."""
    systems = ["<|im_start|>system\nBe brief.<|im_end|>\n", "<|im_start|>system\nThink step by step.<|im_end|>\n"]
    question = "<|im_start|>user\nadd 1 and 1<|im_end|>"
    lines = [sample(step, prompt=f"{system}{question}", reward=float(step == 2)) for step in (1, 2) for system in systems]
    lines += [sample(step, prompt="<|im_start|>user\nadd 2 and 2<|im_end|>", reward=1.0) for step in (1, 2)]
    template = "<|im_start|>user\n" + "Solve the problem, show your work and put the answer in \\boxed{}. " * 3  # the same first 120 characters
    lines += [sample(step, prompt=f"{systems[0]}{template}what is {k}+{k}?<|im_end|>", reward=1.0) for step in (1, 2) for k in (3, 4)]
    write_lines(tmp_path / "runs" / "run" / "rollout_data_rank_0.jsonl", lines)
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    [frame] = open_changes(app).dataframe
    templated = [shorten(f"{template}what is {k}+{k}?<|im_end|>", 120) for k in (3, 4)]  # they differ past what is shown: no system turn
    assert sorted(frame.value["prompt"]) == sorted([f"{system}{question}" for system in systems] + ["<|im_start|>user\nadd 2 and 2<|im_end|>"] + templated)
