"""The sidebar's run list (AppTest) on trainers' output folders: a root of prime-rl and NeMo-RL runs lists each run
folder once, and a prime-rl run folder typed as the root is one run, "(this folder)", not its token_exports/, rollouts/,
logs/... (tests/support/prime_rl_nemo_rl.py writes them with the trainers' own code)."""

import os

import pytest

from rl_board.formats import nemo_rl, prime_rl
from rl_board.tokenizer import TOKENIZER_VARIABLE
from tests.support.page import load_and_view, loaded_caption, start, widget
from tests.support.prime_rl_nemo_rl import (
    build_tokenizer,
    nemo_rl_logger_folders,
    nemo_rl_run,
    prime_rl_run,
    prime_rl_run_folder,
)
from tests.support.runs import sample, write_lines


@pytest.fixture
def outputs(tmp_path, monkeypatch):
    monkeypatch.delenv(TOKENIZER_VARIABLE, raising=False)
    tokenizer, root = build_tokenizer(), tmp_path / "outputs"
    for seed, name in enumerate(("run-a", "run-b")):
        prime_rl_run_folder(prime_rl_run(root / name, tokenizer, steps=(1,), ranks=1, seed=seed))
    nemo_rl_logger_folders(nemo_rl_run(root / "exp_001", tokenizer, steps=1))
    write_lines(root / "logger-run" / "rollout_data_rank_0_20260101T000000Z.jsonl", [sample(1), sample(2)])
    return root


def test_the_run_list_holds_each_trainer_run_folder_once_and_a_prime_rl_run_folder_as_one_run(outputs, monkeypatch):
    app = start(outputs, monkeypatch)
    run_choice = widget(app.sidebar.selectbox, "Choose Log Name")
    assert run_choice.options == ["exp_001", "logger-run", "run-a", "run-b"]
    run_choice.set_value("exp_001")
    app = load_and_view(app)
    assert nemo_rl.NAME.split(" (")[0] in loaded_caption(app)  # the caption escapes the rest for Markdown
    widget(app.sidebar.text_input, "Log(s) Root Path").input(str(outputs / "run-a")).run()  # the run folder as the root
    run_choice = widget(app.sidebar.selectbox, "Choose Log Name")
    assert run_choice.options == ["(this folder)"] and run_choice.value == "."
    app = load_and_view(app)
    assert prime_rl.NAME.split(" (")[0] in loaded_caption(app)


def test_a_run_folder_whose_name_is_not_utf8_is_not_listed_and_the_sidebar_says_so(tmp_path, monkeypatch):
    write_lines(tmp_path / "root" / "good" / "r.jsonl", [sample(1)])
    write_lines(tmp_path / "root" / os.fsdecode(b"run_\xff") / "r.jsonl", [sample(1)])
    app = start(tmp_path / "root", monkeypatch)
    assert widget(app.sidebar.selectbox, "Choose Log Name").options == ["good"]
    assert widget(app.sidebar.multiselect, "Compare with").options == []
    assert [caption.value for caption in app.sidebar.caption if "run\\_\ufffd" in caption.value and "not valid UTF-8 (rename the folder" in caption.value] != []
    assert loaded_caption(load_and_view(app)).startswith("Loaded 1 sample(s) of 1 step(s)")
