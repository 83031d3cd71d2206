"""The lines of one prompt, as "This prompt over training" gathers them (rl_board.reading.snapshot's prompt_lines from
the index, holds_prompt once read back): the same text and the same images, in order, by their paths as the lines
write them. Every expectation is worked out here from the lines the test wrote, never from the board's helpers."""

import json
from pathlib import Path

import pandas as pd
import pytest

from rl_board.reading.snapshot import holds_prompt, prompt_lines, read_step_batch
from tests.support.runs import load, write_lines
from tests.support.vision_tool_runs import QUESTION, picture, question_line, write_one_question_runs


def history(runs: dict[str, Path], shown: str, step: int, index: int) -> list[tuple]:
    """(run, step, reward) of every loaded line the page's prompt history lists for sample `index` of `step` of run
    `shown`, gathered as the page gathers them: prompt_lines over each run, read back, holds_prompt."""
    snapshots = {name: load(run_dir, parallel=False) for name, run_dir in runs.items()}
    row = read_step_batch("step", snapshots[shown].step_rows(step)).table.iloc[index]
    rows = pd.concat([prompt_lines(snapshot.samples, row).assign(run=name) for name, snapshot in snapshots.items()], ignore_index=True)
    table = read_step_batch("history", rows).table
    table = table[holds_prompt(table, row)]
    return sorted(zip(table["run"], table["step"].tolist(), table["reward"].tolist()))


def expected(lines_by_run: dict[str, list[dict]], prompt: str, images: list[str]) -> list[tuple]:
    """(run, step, reward) of the lines written with this text and these image paths, in order (none: no images)."""
    def paths(written) -> list[str]:
        return [image["path"] if isinstance(image, dict) else image for image in written.get("images") or []]

    return sorted((run, written["step"], written["reward"]) for run, lines in lines_by_run.items() for written in lines if written["prompt"] == prompt and paths(written) == images)


@pytest.fixture
def vision_runs(tmp_path):
    runs = {"shown": tmp_path / "shown", "compared": tmp_path / "compared"}
    lines = write_one_question_runs(runs["shown"], runs["compared"])
    assert (runs["compared"] / "images" / "red_copy.png").read_bytes() == (runs["shown"] / "images" / "red.png").read_bytes()
    return runs, lines


# The question of the red picture is another prompt than the same question of the blue one, of both, of both the
# other way round, or of none; the red picture at the same path in the compared run is the same prompt, a copy of it
# under another path is not (images are known by their paths). Before, every line with the text was listed.
@pytest.mark.parametrize(("step", "index", "images"), [
    (1, 0, ["images/red.png"]),
    (1, 1, ["images/blue.png"]),
    (2, 2, ["images/red.png", "images/blue.png"]),
    (2, 3, ["images/blue.png", "images/red.png"]),
    (3, 0, []),
    (3, 1, []),  # "images": [] is no images
])
def test_a_prompts_lines_are_those_of_its_text_and_its_images(vision_runs, step, index, images):
    runs, lines = vision_runs
    found = history(runs, "shown", step, index)
    assert found == expected(lines, QUESTION, images)
    assert len(found) < sum(written["prompt"] == QUESTION for written in lines["shown"] + lines["compared"])


def test_the_red_pictures_lines_in_numbers(vision_runs):
    runs, _ = vision_runs
    assert history(runs, "shown", 1, 0) == [("compared", 2, 0.15), ("shown", 1, 0.1), ("shown", 2, 0.3), ("shown", 3, 0.9)]
    assert history(runs, "compared", 3, 0) == [("compared", 3, 0.25)]  # the copy under another path: a prompt of its own


# The index keeps a line's first 16 image paths: two lines that differ only in the 17th image are both found from
# the index, and told apart once read back.
def test_images_past_the_sixteen_the_index_keeps_are_compared_once_read_back(tmp_path):
    red, blue = picture(tmp_path / "run", "red.png", (255, 0, 0)), picture(tmp_path / "run", "blue.png", (0, 0, 255))
    write_lines(tmp_path / "run" / "r.jsonl", [question_line(1, 0.1, [red] * 16 + [blue]), question_line(1, 0.2, [red] * 17), question_line(2, 0.3, [red] * 16 + [blue])])
    snapshot = load(tmp_path / "run", parallel=False)
    row = read_step_batch("step", snapshot.step_rows(1)).table.iloc[0]
    candidates = prompt_lines(snapshot.samples, row)
    assert candidates["reward"].tolist() == [0.1, 0.2, 0.3]
    table = read_step_batch("history", candidates).table
    assert table[holds_prompt(table, row)]["reward"].tolist() == [0.1, 0.3]


# A text-only run: the lines found are exactly those of the same text, as before images counted.
def test_a_text_only_prompts_lines_are_those_of_its_text(tmp_path):
    texts = ["Solve: 12 * 7 = ?", "Solve: 12 * 7 = ? ", "other", [{"role": "user", "content": "Solve: 12 * 7 = ?"}]]
    lines = [question_line(step, step / 10 + index / 100, prompt=texts[(step + index) % len(texts)]) for step in range(1, 6) for index in range(6)]
    write_lines(tmp_path / "run" / "r.jsonl", lines)
    snapshot = load(tmp_path / "run", parallel=False)
    for step, index in [(1, 0), (1, 1), (2, 0), (3, 3)]:
        row = read_step_batch("step", snapshot.step_rows(step)).table.iloc[index]
        by_key = snapshot.samples[snapshot.samples["prompt_key"] == row["prompt_key"]]  # what the page took before
        assert prompt_lines(snapshot.samples, row).equals(by_key)
        table = read_step_batch("history", by_key).table
        assert holds_prompt(table, row).tolist() == (table["prompt"] == row["prompt"]).tolist()
        text = row["prompt"]
        assert sorted(table[holds_prompt(table, row)]["reward"].tolist()) == sorted(
            written["reward"] for written in lines if (written["prompt"] if isinstance(written["prompt"], str) else json.dumps(written["prompt"])) == text)
