"""What changed between two sides (rl_board/changes.py, rl_board.prompt_changes): per prompt matched by its text and
its images, the samples, mean reward, pass rate and mean length on A and B and the statuses, equal to a pandas recount
from the raw lines, on the bundled runs (lr 1e-4 against the default, and two windows of one run), on a run built so
that each status is known and on VLM runs asking one question of different pictures; text-only runs give the tables
the engine gave before images counted; keys whose texts differ are left out and counted; the word diff gives back both
texts and marks no more than a longest common subsequence of their words leaves, in a fraction of a second for two
reasoning-length responses of few distinct words."""

import html
import importlib.util
import json
import re
import subprocess
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import rl_board
from rl_board.changes import (
    CHANGE_COLUMNS,
    DIFF_WORDS,
    WORDS,
    default_threshold,
    prompt_changes,
    runs_between,
    side_rows,
    word_diff,
)
from rl_board.figures import WORD_DIFF_BACKGROUNDS, marked_words_html
from rl_board.reading.search import read_texts
from tests.conftest import PROJECT
from tests.support import SAMPLES
from tests.support.runs import sample, write_lines
from tests.support.vision_tool_runs import QUESTION, write_one_question_runs

DEFAULT, LOW_LR = SAMPLES / "grpo_tiny_example", SAMPLES / "grpo_tiny_example_lr1e-4"


def raw_lines(run_dir) -> pd.DataFrame:
    """Every line of a run's rank files, as the JSON says: prompt, step, reward, reward functions, token count."""
    rows = []
    for path in sorted(run_dir.glob("rollout_data_rank_*.jsonl")):
        for text in path.read_text().splitlines():
            line = json.loads(text)
            rows.append({"prompt": line["prompt"], "step": line["step"], "reward": line["reward"], "tokens": len(line["response_tokens"]),
                         **{f"rewards/{name}": value for name, value in line["rewards_per_func"].items()}})
    return pd.DataFrame(rows)


def recount(a: pd.DataFrame, b: pd.DataFrame, threshold: float, column: str = "reward") -> pd.DataFrame:
    """The table recomputed here: per prompt text on both sides, its numbers and status."""
    def side(lines):
        return lines.assign(passed=lines[column] >= threshold).groupby("prompt").agg(samples=("reward", "size"), reward=("reward", "mean"), passed=("passed", "mean"), length=("tokens", "mean"))
    table = side(a).merge(side(b), left_index=True, right_index=True, suffixes=("_a", "_b"))
    fell, rose = table["passed_b"] < table["passed_a"], table["passed_b"] > table["passed_a"]
    table["status"] = np.select([fell, rose & (table["passed_a"] == 0), rose], ["regressed", "newly solved", "improved"], "unchanged")
    return table


def assert_same(found: pd.DataFrame, expected: pd.DataFrame, prompt: tuple[str, ...] = ("prompt",)):
    """The table found, indexed by `prompt` (its columns), against a recount indexed alike."""
    found = found.set_index(list(prompt)).sort_index()
    expected = expected.sort_index()
    assert list(found.index) == list(expected.index)
    for ours, theirs in [("samples_a", "samples_a"), ("samples_b", "samples_b"), ("reward_a", "reward_a"), ("reward_b", "reward_b"),
                         ("pass_a", "passed_a"), ("pass_b", "passed_b"), ("length_a", "length_a"), ("length_b", "length_b")]:
        assert found[ours].to_numpy() == pytest.approx(expected[theirs].to_numpy(), rel=1e-12), ours
    assert found["change"].to_numpy() == pytest.approx((expected["reward_b"] - expected["reward_a"]).to_numpy(), rel=1e-12)
    assert found["status"].tolist() == expected["status"].tolist()


def test_the_lower_learning_rate_run_against_the_default_equals_a_pandas_recount():
    a, b = rl_board.open_run(DEFAULT), rl_board.open_run(LOW_LR)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = rl_board.prompt_changes(a, b)
    raw_a, raw_b = raw_lines(DEFAULT), raw_lines(LOW_LR)
    threshold = (min(raw_a["reward"].min(), raw_b["reward"].min()) + max(raw_a["reward"].max(), raw_b["reward"].max())) / 2  # the default
    expected = recount(raw_a, raw_b, threshold)
    assert_same(table, expected)
    counts = table["status"].value_counts()
    assert counts["regressed"] == (expected["status"] == "regressed").sum() > 100 and counts["newly solved"] == (expected["status"] == "newly solved").sum() > 50
    assert table["change"].is_monotonic_increasing  # the worst first
    assert set(raw_a["prompt"]) == set(raw_b["prompt"]) and not caught  # the same prompts (seed 0): none left out


def test_a_reward_function_as_the_pass_rule_and_two_windows_of_one_run():
    run = rl_board.open_run(LOW_LR)
    raw = raw_lines(LOW_LR)
    column = "rewards/sorted_digits"
    with pytest.warns(UserWarning) as caught:
        table = rl_board.prompt_changes(run, run, steps_a=(1, 200), steps_b=(201, 400), pass_threshold=0.5, pass_column=column)
    a, b = raw[raw["step"] <= 200], raw[raw["step"] > 200]
    expected = recount(a, b, 0.5, column)
    only_a, only_b = len(set(a["prompt"]) - set(b["prompt"])), len(set(b["prompt"]) - set(a["prompt"]))
    assert f"{only_a} prompt(s) only on A, {only_b} only on B" in str(caught[0].message)
    assert len(expected) >= 20
    assert_same(table, expected)
    with pytest.raises(ValueError, match="not a number of both"):
        rl_board.prompt_changes(run, run, pass_column="rewards/none")


def test_each_status_where_it_was_built(tmp_path):
    """Prompts whose pass rates go 1/2 -> 0 (regressed), 0 -> 1/2 (newly solved), 1/2 -> 1 (improved), 1/2 -> 1/2
    (unchanged), one with no sample on B, and one whose rewards are missing on A (no pass rate there: no status)."""
    built = {"regressed": ([1, 0], [0, 0]), "newly solved": ([0, 0], [0, 1]), "improved": ([1, 0], [1, 1]), "unchanged": ([0, 1], [1, 0])}
    lines = []
    for name, (rewards_a, rewards_b) in built.items():
        lines += [sample(1, prompt=f"prompt {name}", reward=reward, response_tokens=["w"] * (3 + k)) for k, reward in enumerate(rewards_a)]
        lines += [sample(2, prompt=f"prompt {name}", reward=reward, response_tokens=["w"] * 5) for reward in rewards_b]
    lines += [sample(1, prompt="prompt only on A", reward=1.0)]
    lines += [sample(1, prompt="prompt without rewards on A", reward=None), sample(2, prompt="prompt without rewards on A", reward=1.0)]
    write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", lines)
    run = rl_board.open_run(tmp_path / "run")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = rl_board.prompt_changes(run, run, steps_a=(1, 1), steps_b=(2, 2), pass_threshold=1)
    statuses = dict(zip(table["prompt"], table["status"]))
    assert statuses.pop("prompt without rewards on A") == "no pass rate"  # counted in the caption, shown in the table
    assert statuses == {f"prompt {name}": name for name in built}
    regressed = table.set_index("prompt").loc["prompt regressed"]
    assert (regressed["pass_a"], regressed["pass_b"], regressed["length_a"], regressed["length_b"]) == (0.5, 0.0, 3.5, 5.0)


def test_a_prompt_s_mean_reward_is_of_its_finite_rewards_and_a_sample_without_a_prompt_is_counted(tmp_path):
    """±inf rewards are left out of a prompt's mean reward, as This prompt over training's and the step curves' means
    leave them out (one made the mean ±inf, +inf beside -inf NaN), but an +inf passes; a line whose prompt is null is
    counted as left out."""
    lines = [sample(1, prompt="p", reward=reward) for reward in (1.0, float("inf"))] + [sample(2, prompt="p", reward=reward) for reward in (0.0, float("-inf"), float("inf"))]
    lines += [sample(1, prompt="q", reward=float("-inf")), sample(2, prompt="q", reward=0.5), sample(2, prompt=None, reward=1.0)]
    write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", lines)
    run = rl_board.open_run(tmp_path / "run")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = rl_board.prompt_changes(run, run, steps_a=(1, 1), steps_b=(2, 2), pass_threshold=1).set_index("prompt")
    assert (table.loc["p", "reward_a"], table.loc["p", "reward_b"], table.loc["p", "change"]) == (1.0, 0.0, -1.0)
    assert (table.loc["p", "pass_a"], table.loc["p", "pass_b"]) == (1.0, pytest.approx(1 / 3))  # +inf passes
    assert np.isnan(table.loc["q", "reward_a"]) and table.loc["q", "reward_b"] == 0.5 and np.isnan(table.loc["q", "change"])
    assert [str(warning.message) for warning in caught] == ["0 prompt(s) only on A, 0 only on B, 1 sample(s) without a prompt: left out"]
    with warnings.catch_warnings(record=True) as caught:  # sides that overlap count the line once
        warnings.simplefilter("always")
        rl_board.prompt_changes(run, run, steps_a=(1, 2), steps_b=(2, 2), pass_threshold=1)
    assert "1 sample(s) without a prompt" in str(caught[0].message)


def test_a_side_of_a_facet_s_value_the_validation_samples_against_training(tmp_path):
    """A run that mixes its validation samples in (mode val, as NeMo-RL's, rLLM's and AReaL's are read): A its training
    samples, B its validation samples at the same steps; each side only its own."""
    lines = [sample(step, prompt=f"q{k}", reward=float((k + step) % 2), mode=mode) for step in (1, 2) for k in range(4) for mode in ("train", "val") if mode == "train" or k < 3]
    write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", lines)
    run = rl_board.open_run(tmp_path / "run")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = rl_board.prompt_changes(run, run, where_a=("text/mode", "train"), where_b=("text/mode", "val"), pass_threshold=1)
    raw = pd.DataFrame(lines).assign(tokens=0)
    expected = recount(raw[raw["mode"] == "train"], raw[raw["mode"] == "val"], 1)
    assert list(expected.index) == ["q0", "q1", "q2"] and table["samples_a"].tolist() == table["samples_b"].tolist() == [2, 2, 2]
    assert sorted(zip(table["prompt"], table["reward_a"], table["reward_b"])) == [(prompt, row["reward_a"], row["reward_b"]) for prompt, row in expected.iterrows()]
    assert "1 prompt(s) only on A, 0 only on B" in str(caught[0].message)  # q3 has no validation sample
    with pytest.warns(UserWarning):
        assert rl_board.prompt_changes(run, run, where_b=("text/split", "val")).empty  # no such facet: B is empty


def test_keys_whose_texts_differ_are_left_out_and_counted(tmp_path):
    write_lines(tmp_path / "a" / "rollout_data_rank_0.jsonl", [sample(1, prompt=f"p{k}", reward=1.0) for k in range(3)])
    write_lines(tmp_path / "b" / "rollout_data_rank_0.jsonl", [sample(1, prompt=f"p{k}", reward=0.0) for k in range(3)])
    a, b = (rl_board.open_run(tmp_path / name).snapshot.samples for name in "ab")
    b = b.assign(prompt_key=b["prompt_key"].replace(b["prompt_key"].iat[2], a["prompt_key"].iat[1])).iloc[[0, 2]]  # B: p0, and p2 under p1's key
    changes = prompt_changes(a, b, threshold=1.0)
    assert changes.table["prompt"].tolist() == ["p0"] and changes.collisions == 1 and (changes.only_a, changes.only_b) == (1, 0)
    assert changes.counts() == {"regressed": 1, "newly solved": 0, "improved": 0, "unchanged": 0}


# An empty prompt whose response is empty too is a prompt like any other: its texts read back as nothing, which was
# taken for a line that could not be read back (a key whose texts differ, left out).
def test_an_empty_prompt_with_an_empty_response_is_compared(tmp_path):
    write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", [sample(1, prompt="", response="", reward=0.0), sample(2, prompt="", response="", reward=1.0)])
    run = rl_board.open_run(tmp_path / "run")
    changes = prompt_changes(*(run.snapshot.samples[run.snapshot.samples["step"] == step] for step in (1, 2)), threshold=1.0)
    assert changes.table["prompt"].tolist() == [""] and changes.collisions == 0
    assert changes.counts() == {"regressed": 0, "newly solved": 1, "improved": 0, "unchanged": 0}


def test_the_word_diff_gives_back_both_texts_and_marks_what_differs():
    a, b = "The answer is 42.\nDone <b>now</b>", "The answer is 41.\nDone <b>now</b> twice"
    runs_a, runs_b, cut = word_diff(a, b)
    assert "".join(text for _, text in runs_a) == a and "".join(text for _, text in runs_b) == b and not cut
    assert [text for kind, text in runs_a if kind == "removed"] == ["42."]
    assert [text for kind, text in runs_b if kind == "added"] == ["41.", " twice"]
    long = " ".join(f"w{k}" for k in range(DIFF_WORDS))
    runs_a, runs_b, cut = word_diff(long, long + " more")
    assert cut and "".join(text for _, text in runs_b) == long + " more"


def common_subsequence_length(a: list[str], b: list[str]) -> int:
    """The length of the longest common subsequence of a and b, by the textbook dynamic programme."""
    previous = [0] * (len(b) + 1)
    for item in a:
        current = [0]
        for j, other in enumerate(b):
            current.append(previous[j] + 1 if item == other else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def test_the_word_diff_keeps_a_longest_common_subsequence_of_words_and_whitespace():
    rng = np.random.default_rng(5)
    words, spaces = ["the", "answer", "is", "42.", "证明", "<b>x</b>", "x"], [" ", "\n", "  ", "\t "]
    for _ in range(30):
        a, b = ("".join(f"{rng.choice(words)}{rng.choice(spaces)}" for _ in range(rng.integers(0, 60))).strip() for _ in range(2))
        runs_a, runs_b, cut = word_diff(a, b)
        assert "".join(text for _, text in runs_a) == a and "".join(text for _, text in runs_b) == b and not cut
        assert {kind for kind, _ in runs_a} <= {"same", "removed"} and {kind for kind, _ in runs_b} <= {"same", "added"}
        assert all(first[0] != second[0] for runs in (runs_a, runs_b) for first, second in zip(runs, runs[1:]))  # runs joined
        same_a, same_b = ("".join(text for kind, text in runs if kind == "same") for runs in (runs_a, runs_b))
        assert same_a == same_b  # the unmarked words are common to both, in order
        common = common_subsequence_length(WORDS.findall(a), WORDS.findall(b))
        for text, runs in ((a, runs_a), (b, runs_b)):  # a marked run is whole words and whitespace of its text
            marked = sum(len(WORDS.findall(part)) for kind, part in runs if kind != "same")
            assert len(WORDS.findall(text)) - marked == common  # no more marked than the longest common subsequence leaves


def test_two_responses_of_a_reasoning_models_length_are_compared_in_a_fraction_of_a_second():
    rng = np.random.default_rng(0)
    vocabulary = ["the", "model", "reward", "policy", "answer", "therefore", "因此", "步骤"]  # few words: difflib took a minute
    a, b = (" ".join(rng.choice(vocabulary, size=DIFF_WORDS + 2000)) for _ in range(2))
    start = time.perf_counter()
    runs_a, runs_b, cut = word_diff(a, b)
    assert time.perf_counter() - start < 5  # about 0.07 s; difflib's SequenceMatcher took 54 s
    assert cut and "".join(text for _, text in runs_a) == a and "".join(text for _, text in runs_b) == b
    compared = len(" ".join(a.split(" ")[:DIFF_WORDS]) + " ")  # characters of A's first DIFF_WORDS words
    marks, offset = [], 0
    for kind, text in runs_a:
        marks += [(offset, offset + len(text))] if kind != "same" else []
        offset += len(text)
    assert marks and marks[-1][1] <= compared  # the rest is not compared, so not marked
    assert sum(end - start for start, end in marks) < compared / 2  # most words of few distinct ones are common


def test_a_part_of_marked_runs_keeps_each_characters_mark():
    runs = [("same", "The answer is "), ("removed", "42."), ("same", "\nDone"), ("removed", " now")]
    text = "".join(part for _, part in runs)
    kinds = "".join(kind[0] * len(part) for kind, part in runs)
    for start in range(len(text) + 1):
        for end in range(start, len(text) + 2):
            part = runs_between(runs, start, end)
            assert "".join(piece for _, piece in part) == text[start:end] and all(piece for _, piece in part)
            assert "".join(kind[0] * len(piece) for kind, piece in part) == kinds[start:end]


def test_a_word_diff_shows_each_response_as_written_and_never_as_markup():
    a, b = "Title\n===\n    four spaces\n\tTAB <b>alpha</b>", "Title\n===\n    four spaces\n\tTAB <b>beta</b>"
    runs_a, runs_b, _ = word_diff(a, b)
    shown = marked_words_html(runs_a)
    assert shown.startswith("<div class='rl-word-diff' style='white-space:break-spaces;overflow-wrap:anywhere'>Title\n===\n    four spaces\n\tTAB ")
    assert f'<span style="background:{WORD_DIFF_BACKGROUNDS["removed"]}">&lt;b&gt;alpha&lt;/b&gt;</span>' in shown
    assert html.unescape(re.sub(r"<[^>]+>", "", shown)) == a  # every character of the response, nothing else
    assert marked_words_html(word_diff("", "")[0]).endswith(">(empty)</div>")


def image_paths(line: dict) -> tuple:
    """A written line's image paths, in order (none: no images, as "images": [] is)."""
    return tuple(image["path"] if isinstance(image, dict) else image for image in line.get("images") or [])


def recount_by_prompt_and_images(a: list[dict], b: list[dict], threshold: float) -> pd.DataFrame:
    """The table recomputed here from written lines: per prompt text and image paths on both sides, its numbers
    (length in characters: the lines have no tokens) and status."""
    def side(lines):
        frame = pd.DataFrame({"prompt": [line["prompt"] for line in lines], "images": [image_paths(line) for line in lines],
                              "reward": [line["reward"] for line in lines], "tokens": [len(line["response"]) for line in lines]})
        return frame.assign(passed=frame["reward"] >= threshold).groupby(["prompt", "images"]).agg(
            samples=("reward", "size"), reward=("reward", "mean"), passed=("passed", "mean"), length=("tokens", "mean"))
    table = side(a).merge(side(b), left_index=True, right_index=True, suffixes=("_a", "_b"))
    fell, rose = table["passed_b"] < table["passed_a"], table["passed_b"] > table["passed_a"]
    table["status"] = np.select([fell, rose & (table["passed_a"] == 0), rose], ["regressed", "newly solved", "improved"], "unchanged")
    return table


# One question asked of different pictures (a VLM run) is a prompt per picture: the red picture's lines against the
# red picture's, the blue's against the blue's, those without images (absent or []) against those without; the two
# pictures in either order, and a copy of the red file under another path, are prompts of their own (seen on one side).
# Before, the question was one prompt, its rewards over every picture.
def test_one_question_asked_of_different_pictures_is_a_prompt_per_picture(tmp_path):
    lines = write_one_question_runs(tmp_path / "shown", tmp_path / "compared")
    shown, compared = rl_board.open_run(tmp_path / "shown"), rl_board.open_run(tmp_path / "compared")
    with pytest.warns(UserWarning) as caught:
        table = rl_board.prompt_changes(shown, compared)
    threshold = (0.1 + 1.0) / 2  # the default: the middle of the rewards seen
    expected = recount_by_prompt_and_images(lines["shown"], lines["compared"], threshold)
    assert sorted(expected.index) == [(QUESTION, ()), (QUESTION, ("images/blue.png",)), (QUESTION, ("images/red.png",))]
    assert_same(table.assign(images=[tuple(paths) for paths in table["images"]]), expected, ("prompt", "images"))
    assert "3 prompt(s) only on A, 1 only on B" in str(caught[0].message)  # red and blue, blue and red, another question; the copy
    red = table[[paths == ["images/red.png"] for paths in table["images"]]].iloc[0]
    assert (red["samples_a"], red["reward_a"], red["samples_b"], red["reward_b"], red["status"]) == (3, pytest.approx((0.1 + 0.3 + 0.9) / 3), 1, 0.15, "regressed")
    assert table.columns.tolist() == ["prompt", "images", *CHANGE_COLUMNS[1:]]


def test_two_windows_of_a_vision_run_match_each_picture_alone(tmp_path):
    lines = write_one_question_runs(tmp_path / "shown", tmp_path / "compared")["shown"]
    run = rl_board.open_run(tmp_path / "shown")
    with pytest.warns(UserWarning):
        table = rl_board.prompt_changes(run, run, steps_a=(1, 2), steps_b=(3, 3), pass_threshold=0.35)
    expected = recount_by_prompt_and_images([line for line in lines if line["step"] <= 2], [line for line in lines if line["step"] == 3], 0.35)
    assert list(expected.index) == [(QUESTION, ("images/red.png",))]
    assert_same(table.assign(images=[tuple(paths) for paths in table["images"]]), expected, ("prompt", "images"))


BEFORE_IMAGES = "d258c87"  # the last commit whose What changed matched prompts by their text alone


# The engine as it was before a prompt's images counted, read from git into a module of its own (skipped outside a
# checkout with that commit), to run beside the new one.
def engine_before_images(folder: Path):
    shown = subprocess.run(["git", "show", f"{BEFORE_IMAGES}:rl_board/changes.py"], cwd=PROJECT, capture_output=True, text=True, check=False)
    if shown.returncode:
        pytest.skip(f"no git history to read the old engine from: {shown.stderr.strip()}")
    (folder / "changes_before_images.py").write_text(shown.stdout)
    spec = importlib.util.spec_from_file_location("changes_before_images", folder / "changes_before_images.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.read_texts = lambda path, lines: read_texts(path, lines)[:2]  # its texts and sizes, as read_texts gave them then
    return module


def text_only_sides(tmp_path) -> list[tuple[pd.DataFrame, pd.DataFrame, float, str]]:
    """Sides of text-only runs, each pair with a threshold and pass column: two bundled runs, two windows of one by a
    reward function, two windows of a run without tokens (verl's) and of a tool-use run, a run of ties and a key
    shared by two texts."""
    default, low = (rl_board.open_run(run).snapshot.samples for run in (DEFAULT, LOW_LR))
    verl, tools = (rl_board.open_run(SAMPLES / name).snapshot.samples for name in ("from_verl_rollout_data", "grpo_tiny_tools_example"))
    write_lines(tmp_path / "ties" / "rollout_data_rank_0.jsonl", [sample(step, prompt=f"p{k % 5}", reward=float((k + step) % 2)) for step in (1, 2, 3) for k in range(20)])
    ties = rl_board.open_run(tmp_path / "ties").snapshot.samples
    collided = ties.assign(prompt_key=ties["prompt_key"].replace(ties["prompt_key"].iat[0], ties["prompt_key"].iat[1]))  # p0 under p1's key
    return [
        (default, low, 1.0, "reward"), (default, low, 0.5, "reward"),
        (side_rows(low, (1, 200)), side_rows(low, (201, 400)), 0.5, "rewards/sorted_digits"),
        (side_rows(verl, (1, 7)), side_rows(verl, (8, 12)), default_threshold(verl, verl), "reward"),
        (side_rows(tools, (1, 26)), side_rows(tools, (27, 50)), 0.5, "reward"),
        (ties[ties["step"] == 1], ties[ties["step"] > 1], 1.0, "reward"),
        (ties[ties["step"] == 1], collided[collided["step"] > 1], 1.0, "reward"),
    ]


# The old engine beside the new one, on text-only runs: the same tables, row for row, the same counts of prompts left
# out, the same keys.
def test_text_only_runs_give_the_tables_the_engine_gave_before_images_counted(tmp_path):
    before = engine_before_images(tmp_path)
    for a, b, threshold, column in text_only_sides(tmp_path):
        assert a["image_paths"].isna().all() and b["image_paths"].isna().all()
        old, new = before.prompt_changes(a, b, threshold, column), prompt_changes(a, b, threshold, column)
        assert len(new.table) > 0
        assert new.table.reset_index(drop=True).equals(old.table.reset_index(drop=True))
        assert new.table.index.get_level_values("prompt_key").equals(old.table.index)
        assert (new.only_a, new.only_b, new.collisions, new.length_unit, new.counts()) == (old.only_a, old.only_b, old.collisions, old.length_unit, old.counts())
    assert old.collisions == 1  # the last pair: a key shared by two texts
