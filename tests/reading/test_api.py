"""The Python API (rl_board.open_run, list_runs) against the raw files and the page's own numbers: samples, a step's
texts, a sample's tokens and the history, for the logger's JSONL, TRL's parquet and verl's dumps; no Streamlit imported."""

import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import rl_board
from rl_board.reading.store import RunStore
from tests.conftest import PROJECT

SAMPLES = PROJECT / "rollout_samples"


# Every line of the run's rank files by (file, line number).
def raw_lines(run_dir: Path) -> dict[tuple[str, int], dict]:
    return {
        (str(path), number): json.loads(line)
        for path in sorted(run_dir.glob("rollout_data_rank_*.jsonl"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if line.strip()
    }


def test_list_runs_gives_the_sidebar_s_runs_as_paths_open_run_takes():
    runs = rl_board.list_runs(SAMPLES)
    assert [Path(run).name for run in runs] == sorted(path.name for path in SAMPLES.iterdir() if path.is_dir())
    assert all(Path(run).is_dir() for run in runs)


def test_samples_step_texts_and_tokens_equal_the_raw_lines():
    run_dir = SAMPLES / "grpo_tiny_example"
    run = rl_board.open_run(str(run_dir))
    lines = raw_lines(run_dir)
    assert len(run.samples) == len(lines) and run.steps == sorted({line["step"] for line in lines.values()})
    assert not {"path", "offset", "length", "index_id", "status"} & set(run.samples.columns)
    step = run.steps[-1]
    table = run.step(step)
    assert len(table) == sum(line["step"] == step for line in lines.values()) and table["sample"].tolist() == list(range(len(table)))
    for row in table.itertuples():
        line = lines[(row.file, row.line)]  # every text read back as written
        assert (row.prompt, row.response, row.step) == (line["prompt"], line["response"], step)
        assert math.isclose(row.reward, line["reward"], rel_tol=1e-12)
    tokens = run.tokens(step, 2)
    line = lines[(table["file"].iloc[2], table["line"].iloc[2])]
    ratio = np.array(line["logprobs"]) - np.array(line["ref_logprobs"])
    assert tokens["logp"].tolist() == line["logprobs"][: len(tokens)]
    np.testing.assert_allclose(tokens["log_ratio"], ratio[: len(tokens)], rtol=0, atol=1e-12)
    np.testing.assert_allclose(tokens["kl"], np.exp(-ratio) + ratio - 1, rtol=1e-9, atol=1e-12)  # k3, TRL's
    np.testing.assert_allclose(run.tokens(step, 2, "k1")["kl"], ratio, rtol=0, atol=1e-12)
    assert run.samples.loc[(run.samples["step"] == step) & (run.samples["sample"] == 2), "avg_kl_k3"].item() == pytest.approx(float(np.mean(np.exp(-ratio) + ratio - 1)), rel=1e-9)
    assert not tokens["tool"].any()
    events = [json.loads(line) for line in next(run_dir.glob("rollout_metrics_*.jsonl")).read_text().splitlines()]
    losses = {event["step"]: event["loss"] for event in events if event["kind"] == "train" and "loss" in event}
    history = run.history.train.dropna(subset=["loss"])
    assert dict(zip(history["step"], history["loss"])) == losses  # the trainer's logged loss, step by step


def test_the_api_gives_the_numbers_the_page_draws():
    run_dir = str(SAMPLES / "grpo_tiny_tools_example")
    page = RunStore(run_dir).load(128, parallel=False)  # what load_run gives the page, Max Samples Each Step 128
    api = rl_board.open_run(run_dir, max_samples=128)
    for column in ("step", "sample", "reward", "advantage", "avg_kl_k3", "response_tokens_len", "group_id"):
        assert api.samples[column].equals(page.samples[column]), column


@pytest.mark.parametrize("name", ["from_trl_log_completions", "from_verl_rollout_data"])
def test_other_trainers_runs_open_the_same_way(name):
    run = rl_board.open_run(str(SAMPLES / name))
    assert len(run.samples) and run.format.startswith(("TRL", "verl"))
    step = run.step(run.steps[0])
    assert step["response"].notna().all() and step["prompt"].notna().all()
    # where each row is: file and line in the board's conversion (the line itself), source_file the trainer's own file
    own = {str(path) for path in (SAMPLES / name).rglob("*") if path.is_file()}
    assert set(run.samples["source_file"]) <= own and set(step["source_file"]) <= own and len(set(run.samples["source_file"])) > 1
    for row in step.itertuples():
        line = json.loads(Path(row.file).read_text().splitlines()[row.line - 1])
        assert (line["prompt"], line["response"]) == (row.prompt, row.response)


# A file rewritten since open_run: the step's lines that no longer hold their step are one warning, in plain text (they
# were one per line, in the page's Markdown escapes, telling to press the page's button), and a sample's tokens an error.
def test_lines_that_cannot_be_read_back_are_said_once_in_plain_words(tmp_path):
    path = tmp_path / "run" / "rollout_data_rank_0.jsonl"
    path.parent.mkdir()
    line = lambda step, text: json.dumps({"prompt": text, "response": "r", "reward": 1.0, "step": step, "logprobs": [-1.0]}) + "\n"  # noqa: E731
    path.write_text(line(1, "a") + line(2, "b") + line(2, "c") + line(2, "d"))
    run = rl_board.open_run(tmp_path / "run")
    status = path.stat()
    path.write_text(line(1, "a") + line(3, "b") + line(3, "c") + line(3, "d"))  # same size and time: the index still holds
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    with pytest.warns(UserWarning) as caught:
        run.step(2)
    assert [str(warning.message) for warning in caught] == [
        "rollout_data_rank_0.jsonl line 2 could not be read back (it now holds step 3, not 2); if the file was rewritten, "
        "open the run again (rl_board.open_run). 2 more line(s) of this step could not be read back either."
    ]
    with pytest.raises(ValueError, match=r"^rollout_data_rank_0.jsonl line 3 could not be read back \(it now holds step 3, not 2\); .*rl_board.open_run"):
        run.tokens(2, 1)


# help(), IPython's `open_run?` and a notebook's completion see the API before it is imported (it is imported lazily).
def test_the_api_is_listed_and_each_name_says_what_it_does():
    assert set(rl_board.__all__) <= set(dir(rl_board))
    for name in rl_board.__all__:
        doc = getattr(rl_board, name).__doc__ or ""
        assert len(doc) > 80 and not doc.startswith(f"{name}("), name  # not the dataclass's signature
    assert "Max Samples Each Step" in rl_board.open_run.__doc__


# A relaunch that wrote the same steps again: the lines it replaced are counted in the run's report, per file.
def test_the_run_s_report_counts_the_lines_a_newer_launch_replaced(tmp_path):
    line = lambda step, reward: json.dumps({"prompt": "p", "response": "r", "reward": reward, "step": step}) + "\n"  # noqa: E731
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "rollout_data_rank_0_20260101T000000Z.jsonl").write_text(line(1, 0.0) + line(2, 0.0) + line(3, 0.0))
    (tmp_path / "run" / "rollout_data_rank_0_20260102T000000Z.jsonl").write_text(line(2, 1.0) + line(3, 1.0))
    run = rl_board.open_run(tmp_path / "run")
    assert run.samples["reward"].tolist() == [0.0, 1.0, 1.0]
    report = run.report.set_index("file")
    assert report["replaced by a newer launch"].tolist() == [2, 0] and report["loaded"].tolist() == [1, 2]


def test_a_folder_that_holds_no_run_is_said_so(tmp_path):
    (tmp_path / "empty").mkdir()
    rank_file = tmp_path / "root" / "run_a" / "rollout_data_rank_0.jsonl"
    rank_file.parent.mkdir(parents=True)
    rank_file.write_text(json.dumps({"prompt": "p", "response": "r", "reward": 1.0, "step": 1}) + "\n")
    with pytest.warns(UserWarning, match="empty holds no rollout file and no training history") as caught:
        assert rl_board.open_run(tmp_path / "empty").samples.empty
    assert "It holds runs" not in str(caught[0].message)
    with pytest.warns(UserWarning, match=r"root holds no rollout file .* It holds runs: open one of rl_board.list_runs\(.*\): run_a$"):
        rl_board.open_run(tmp_path / "root")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(rl_board.open_run(rank_file.parent).samples) == 1


def test_list_runs_says_what_is_wrong_with_its_root_and_leaves_out_what_open_run_refuses(tmp_path):
    (tmp_path / "r.jsonl").write_text("{}\n")
    with pytest.raises(NotADirectoryError, match="is not a folder of runs: it is a file"):
        rl_board.list_runs(tmp_path / "r.jsonl")
    with pytest.raises(NotADirectoryError, match="is not a folder of runs: it does not exist"):
        rl_board.list_runs(tmp_path / "missing")
    root = tmp_path / "root"
    for name in (b"good", b"bad\xff"):
        os.makedirs(os.path.join(os.fsencode(root), name))
    with pytest.warns(UserWarning, match="Not listed, its name not valid UTF-8 .*: bad\ufffd"):
        assert rl_board.list_runs(root) == [str(root / "good")]


def test_a_step_or_sample_not_loaded_is_an_error_that_says_so():
    run = rl_board.open_run(str(SAMPLES / "grpo_tiny_example"), max_samples=2)
    with pytest.raises(KeyError, match="not among the loaded steps"):
        run.step(10**9)
    with pytest.raises(IndexError, match="2 loaded sample"):
        run.tokens(run.steps[0], 5)
    with pytest.raises(KeyError, match="step '1' is not among the loaded steps .* whole numbers"):
        run.step("1")
    with pytest.raises(KeyError, match="not among the loaded steps"):  # as step() says, not an IndexError
        run.tokens(10**9, 0)
    for sample in (True, 0.5, "0"):
        with pytest.raises(IndexError, match=f"no sample {sample!r}"):
            run.tokens(run.steps[0], sample)
    assert len(run.tokens(run.steps[0], run.samples["sample"].iloc[0])) > 0  # numpy's integers are whole numbers


def test_open_run_says_what_is_wrong_with_its_arguments(tmp_path):
    (tmp_path / "r.jsonl").write_text("{}\n")
    with pytest.raises(NotADirectoryError, match="is not a run folder: it is a file"):
        rl_board.open_run(tmp_path / "r.jsonl")
    with pytest.raises(NotADirectoryError, match="is not a run folder: it does not exist"):
        rl_board.open_run(tmp_path / "missing")
    for max_samples in (0, -1, "3", 2.0, True):
        with pytest.raises(ValueError, match="max_samples is the samples kept of each step"):
            rl_board.open_run(SAMPLES / "grpo_tiny_example", max_samples=max_samples)


def test_importing_the_api_and_opening_a_run_imports_no_streamlit_plotly_or_torch():
    code = (
        "import sys, rl_board; run = rl_board.open_run(sys.argv[1]); run.step(run.steps[0]); run.tokens(run.steps[0], 0);"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('streamlit', 'plotly', 'torch', 'trl', 'rl_logging_board')))"
    )
    result = subprocess.run([sys.executable, "-c", code, str(SAMPLES / "grpo_tiny_example")], cwd=PROJECT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_an_unknown_estimator_and_every_sample_are_said_plainly():
    run = rl_board.open_run(str(SAMPLES / "grpo_tiny_example"), max_samples=None)
    with pytest.raises(ValueError, match="kl_estimator must be one of kl, k1, k2, k3"):
        run.tokens(run.steps[0], 0, "k4")
    assert len(run.samples) == len(raw_lines(SAMPLES / "grpo_tiny_example"))
