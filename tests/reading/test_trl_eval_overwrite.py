"""TRL's GRPOTrainer writes its evaluation completions to the file of the training step they were logged at
(tests/support/trl_eval_run.py): the load report says which files may hold evaluation rows, from the run's history."""

import json
import shutil

import pyarrow.parquet
import pytest

import rl_board
from tests.support.trl_eval_run import EVAL_STEP, write_trl_eval_run


@pytest.fixture(scope="module")
def output(tmp_path_factory):
    return write_trl_eval_run(tmp_path_factory.mktemp("trl_eval") / "out")


def eval_notes(run) -> dict:
    notes = run.problems[(run.problems["kind"] == "note") & run.problems["reason"].str.contains("evaluation", regex=False)]
    return dict(zip(notes["file"], notes["reason"]))


@pytest.mark.parametrize("where", [".", "completions"])
def test_a_completions_file_at_an_evaluation_s_step_is_said_to_hold_evaluation_rows(output, where):
    """trainer_state.json has an evaluation at step 2, whose log() wrote the eval rows over completions_00002.parquet:
    the load report says that file may hold evaluation rows (opened at the output folder or its completions/), and
    names no other file."""
    evaluated = [entry["step"] for entry in json.loads((output / "checkpoint-3" / "trainer_state.json").read_text())["log_history"] if "eval_loss" in entry]
    assert evaluated == [EVAL_STEP]
    prompts = pyarrow.parquet.read_table(output / "completions" / f"completions_{EVAL_STEP:05d}.parquet").column("prompt").to_pylist()
    assert any(prompt.startswith("eval") for prompt in prompts)  # the writer's trap, as written
    run = rl_board.open_run(output / where)
    notes = eval_notes(run)
    assert list(notes) == [f"completions_{EVAL_STEP:05d}.parquet"]
    assert notes[f"completions_{EVAL_STEP:05d}.parquet"].startswith(f"the run's history has an evaluation at step {EVAL_STEP}")


def test_without_the_history_no_file_is_said_to_hold_evaluation_rows(output, tmp_path):
    copy = shutil.copytree(output, tmp_path / "out")
    shutil.rmtree(copy / "checkpoint-3")
    assert not eval_notes(rl_board.open_run(copy))
