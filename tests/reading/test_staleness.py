"""An asynchronous run's staleness (rl_board.staleness): a line's policy_version gives step - policy_version per
sample, and per step its mean, its largest, the stale share and the samples at each staleness, each equal to a recount
from the raw lines with pandas; TRL's async GRPO traces, written to a database by trackio itself, give TRL's staleness;
bad versions are counted in the load report and ignored, never a crash."""


import numpy as np
import pytest

import rl_board
from rl_board.staleness import STALENESS_SERIES
from tests.support.async_runs import staleness_recount, stalenesses, write_async_run
from tests.support.runs import sample, write_lines
from tests.support.trackio_runs import BAD_VERSIONS, VERSIONED_STEPS, versioned_runs, write_trackio

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

STEPS = 8


def test_staleness_per_step_equals_a_recount_of_the_lines(tmp_path):
    lines = write_async_run(tmp_path / "async", steps=STEPS)
    run = rl_board.open_run(tmp_path / "async")
    samples = run.samples.sort_values(["file", "line"])
    expected = [line["step"] - line["policy_version"] if "policy_version" in line else np.nan for line in lines]
    assert samples["staleness"].tolist() == pytest.approx(expected, nan_ok=True)
    assert samples["policy_version"].tolist() == pytest.approx([line.get("policy_version", np.nan) for line in lines], nan_ok=True)
    assert 0 < samples["staleness"].isna().sum() < len(lines) and (samples["staleness"] > 0).any()
    table, counted = run.staleness_by_step(), staleness_recount(lines)
    assert list(table.columns) == [*STALENESS_SERIES, "samples"] and table.index.tolist() == counted.index.tolist()
    assert table["mean staleness"].tolist() == pytest.approx(counted["mean"].tolist())
    assert table["max staleness"].tolist() == counted["max"].tolist()
    assert table["stale share"].tolist() == pytest.approx(counted["stale"].tolist())
    assert table["samples"].tolist() == counted["samples"].tolist()
    distribution = run.staleness_distribution()
    counts = stalenesses(lines).value_counts(["step", "staleness"]).sort_index()
    assert list(zip(distribution["step"], distribution["staleness"], distribution["samples"])) == [(step, staleness, count) for (step, staleness), count in counts.items()]
    assert distribution.groupby("step")["share"].sum().tolist() == pytest.approx([1.0] * STEPS)
    assert run.problems.empty


def test_a_run_without_versions_has_no_staleness(tmp_path):
    write_lines(tmp_path / "sync" / "rollout_data_rank_0_0.jsonl", [sample(step) for step in range(3)])
    run = rl_board.open_run(tmp_path / "sync")
    assert run.samples["staleness"].isna().all() and run.staleness_by_step().empty and run.staleness_distribution().empty


def test_bad_versions_are_counted_and_ignored(tmp_path):
    """A string, a negative, a fraction, a boolean, an integer too big for a float to hold (or for Python to read: 5,000
    digits), a list, an object, NaN and Infinity are ignored, each a note at its line; a version after its step has no
    staleness; null is no version; an integer-valued float is an integer, as a step is, and a number written as text is
    a number, as any of a line's. The other lines load."""
    bad = ['"three"', "-1", "2.5", "true", str(2**60), "1" * 5000, "[1]", '{"v": 1}', "NaN", "Infinity", "1e300", "4"]
    good = {"null": None, "3.0": 0, "1": 2, '"0"': 3}
    raw = [f'{{"prompt": "p", "response": "r", "reward": 1.0, "step": 3, "policy_version": {value}}}\n'.encode() for value in [*bad, *good]]
    write_lines(tmp_path / "bad" / "rollout_data_rank_0_0.jsonl", raw)
    run = rl_board.open_run(tmp_path / "bad")
    samples = run.samples.sort_values("line")
    assert len(samples) == len(raw)
    assert samples["staleness"].tolist()[len(bad):] == pytest.approx([np.nan, 0, 2, 3], nan_ok=True)
    assert samples["staleness"].iloc[: len(bad)].isna().all()
    assert samples["policy_version"].tolist() == pytest.approx([np.nan] * (len(bad) - 1) + [4, np.nan, 3, 1, 0], nan_ok=True)
    notes = dict(zip(run.problems["line"], run.problems["reason"]))
    assert sorted(notes) == list(range(1, len(bad) + 1))
    words = ["a string", "negative (-1)", "a fraction (2.5)", "a boolean", "an integer out of range", "not finite (inf)", "a list", "an object", "not finite (nan)", "not finite (inf)", "an integer out of range"]
    for line, word in enumerate(words, start=1):
        assert notes[line] == f"policy_version is {word}, not an integer from 0 to 2^53: ignored"
    assert notes[len(bad)].startswith("policy_version 4 is after the line's step 3: no staleness")
    assert set(run.problems["kind"]) == {"note"}


@pytest.fixture(scope="module")
def trackio_run(tmp_path_factory):
    return write_trackio(tmp_path_factory.mktemp("trackio") / "async", "versioned_runs")


def test_trl_async_traces_in_trackio_give_trl_s_staleness(trackio_run):
    """TRL's traces, logged by trackio at step = the policy version when the trainer took them with their
    model_version: the board's staleness is TRL's, version - model_version; the bad versions are counted at their
    lines; a trace whose metadata says policy_version is read the same."""
    run = rl_board.open_run(trackio_run)
    [(_, _, traces, _, _)] = versioned_runs()
    logged = [(step, trace) for step, _, batch in traces for trace in batch]
    samples = run.samples.sort_values(["step", "line"])
    assert samples["step"].tolist() == [step for step, _ in logged]
    assert samples["staleness"].tolist() == pytest.approx([np.nan if trace["staleness"] is None else trace["staleness"] for _, trace in logged], nan_ok=True)
    assert "extra/model_version" not in samples and "extra/policy_version" not in samples
    notes = [reason for reason in run.problems["reason"] if reason.startswith("policy_version")]
    assert len(notes) == len(BAD_VERSIONS)
    for _, note in BAD_VERSIONS:
        assert sum(note in reason for reason in notes) == 1, note
    table = run.staleness_by_step()
    for step, versions in VERSIONED_STEPS.items():
        stalenesses = [step - version for version in versions] + ([2] if step == 16 else [])
        assert table.loc[step, "mean staleness"] == pytest.approx(np.mean(stalenesses))
        assert table.loc[step, "max staleness"] == max(stalenesses)
        assert table.loc[step, "stale share"] == pytest.approx(np.mean([value > 0 for value in stalenesses]))


def test_an_integer_of_thousands_of_digits_in_a_field_is_infinite(tmp_path):
    """Python reads no integer of more than 4,300 digits: such a field (here beside a good policy_version) is an
    infinite number, as any integer too big for a float, and the line loads."""
    raw = [b'{"prompt": "p", "response": "r", "reward": 1.0, "step": 3, "policy_version": 1, "count": ' + b"9" * 5000 + b"}\n"]
    write_lines(tmp_path / "huge" / "rollout_data_rank_0_0.jsonl", raw)
    run = rl_board.open_run(tmp_path / "huge")
    assert run.samples["extra/count"].tolist() == [np.inf] and run.samples["staleness"].tolist() == [2]
