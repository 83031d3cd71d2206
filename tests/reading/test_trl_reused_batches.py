"""TRL's completion parquet of a run that trains on each batch twice (num_iterations=2) with a prompt drawn twice in a
batch, and the rollout logger in its default folder (tests/support/trl_completions_run.py, trl_reused_batches_run).

Groups, repeated files, rewards and weights are worked out here from the raw files (pyarrow, json), never from the
board's helpers: TRL's groups are num_generations consecutive rows (its advantages are computed over
rewards.view(-1, num_generations)), a repeated file has the rows of the file before it but for step.
"""

import atexit
import functools
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

import rl_board
from tests.support.trl_completions_run import parquet_steps

pytestmark = pytest.mark.training

REWARD_FUNCS = ("sorted_digits", "same_digits")


@functools.cache
def reused_run() -> Path:
    from tests.support.trl_completions_run import trl_reused_batches_run

    directory = Path(tempfile.mkdtemp(prefix="trl_reused_"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return trl_reused_batches_run(directory / "run")


# The logger's metadata, read from its only rollout_samples/<run name>/ folder.
def logger_meta(output: Path) -> dict:
    [meta_path] = output.glob("rollout_samples/*/rollout_meta*.json")
    return json.loads(meta_path.read_text())


# The files whose rows (but step) equal the file before them: {file name: step of the file that first had them}.
def repeated_files(completions: Path) -> dict[str, int]:
    raw = parquet_steps(completions)
    repeats, steps = {}, sorted(raw)
    for before, step in zip(steps, steps[1:]):
        strip = lambda rows: [{key: value for key, value in row.items() if key != "step"} for row in rows]  # noqa: E731
        if json.dumps(strip(raw[before])) == json.dumps(strip(raw[step])):
            repeats[f"completions_{step:05d}.parquet"] = repeats.get(f"completions_{before:05d}.parquet", before)
    return repeats


# A copy of the output folder without model weights, and without its rollout_samples/ when `logger` is False.
def copied(target: Path, logger: bool = True) -> Path:
    ignore = ("*.safetensors", "*.bin", *(() if logger else ("rollout_samples",)))
    return Path(shutil.copytree(reused_run(), target, ignore=shutil.ignore_patterns(*ignore)))


def test_groups_are_trl_s_consecutive_num_generations_rows_also_for_a_prompt_drawn_twice():
    """Each kept step's groups are its runs of num_generations rows, as TRL grouped them; a prompt drawn twice is two groups."""
    output = reused_run()
    size = logger_meta(output)["num_generations"]
    raw = parquet_steps(output / "completions")
    run = rl_board.open_run(str(output))
    drawn_twice = 0
    for step in run.samples["step"].unique():
        rows, ids = raw[step], run.samples[run.samples["step"] == step]["group_id"].tolist()
        assert len(ids) == len(rows) and len(rows) % size == 0
        blocks = [ids[start : start + size] for start in range(0, len(ids), size)]
        assert all(len(set(block)) == 1 for block in blocks) and len({block[0] for block in blocks}) == len(blocks)
        prompts = [rows[start]["prompt"] for start in range(0, len(rows), size)]
        drawn_twice += len(prompts) - len(set(prompts))
        # the zero-signal share over TRL's groups, recomputed from the raw scores weighted by the metadata
        weights = dict(zip(logger_meta(output)["reward_funcs"], logger_meta(output)["reward_weights"]))
        rewards = np.array([sum(weights[name] * row[name] for name in REWARD_FUNCS) for row in rows]).reshape(-1, size)
        shown = run.samples[run.samples["step"] == step].groupby("group_id")["reward"].agg(lambda r: r.max() - r.min())
        assert (shown == 0).mean() == pytest.approx(np.mean(np.ptp(rewards, axis=1) == 0))
    assert drawn_twice  # the run drew a prompt twice in one batch: grouping by prompt text would have merged them


def test_each_generation_counts_once_and_the_repeated_files_are_named_in_the_load_report():
    """Files repeating the step before are left out and named, as repeats of their first step, in the load report."""
    output = reused_run()
    raw, repeats = parquet_steps(output / "completions"), repeated_files(output / "completions")
    assert sorted(repeats) == ["completions_00002.parquet", "completions_00004.parquet"]  # num_iterations=2
    run = rl_board.open_run(str(output))
    kept = [step for step in sorted(raw) if f"completions_{step:05d}.parquet" not in repeats]
    assert sorted(run.samples["step"].unique()) == kept == [1, 3]
    assert run.samples.groupby("step").size().to_dict() == {step: len(raw[step]) for step in kept}
    skipped = run.problems[run.problems["kind"] == "skipped"]
    assert sorted(skipped["file"]) == sorted(repeats)
    for name, step in repeats.items():
        reason = skipped.set_index("file").loc[name, "reason"]
        assert reason.startswith(f"the rows of step {step}'s file again") and reason.endswith(f"they count once, at step {step}")


def test_weights_and_group_size_come_from_the_logger_s_default_folder(tmp_path):
    """The logger's metadata in rollout_samples/<run name>/ gives the reward weights and the group size."""
    output = copied(tmp_path / "run")
    meta = logger_meta(output)
    assert meta["reward_weights"] == [1.0, 0.5] and not list(output.glob("rollout_meta*.json"))
    run = rl_board.open_run(str(output))
    assert run.snapshot.reward_note == "reward = 1 × sorted_digits + 0.5 × same_digits (weights from the logger's metadata)"
    raw = parquet_steps(output / "completions")
    for step in (1, 3):
        expected = [row["sorted_digits"] * 1.0 + row["same_digits"] * 0.5 for row in raw[step]]
        assert run.samples[run.samples["step"] == step]["reward"].tolist() == pytest.approx(expected, rel=1e-12)
    assert not any("num_generations" in reason for reason in run.problems["reason"])


def test_without_the_logger_groups_are_told_from_the_prompts_and_a_note_says_so(tmp_path):
    """Without metadata, the groups told from the runs of one prompt equal TRL's consecutive num_generations rows."""
    output = copied(tmp_path / "run", logger=False)
    size = logger_meta(reused_run())["num_generations"]
    raw = parquet_steps(output / "completions")
    run = rl_board.open_run(str(output / "completions"))
    for step in (1, 3):
        ids = run.samples[run.samples["step"] == step]["group_id"].tolist()
        assert ids == [f"{step}-{index // size}" for index in range(len(raw[step]))]
    notes = run.problems[run.problems["kind"] == "note"]["reason"].tolist()
    assert any(note.startswith("no rollout_meta gives num_generations") for note in notes)


def test_the_newest_of_several_logger_runs_gives_the_weights_and_is_named(tmp_path):
    """With two runs in rollout_samples/, the newer one's metadata (started_at) is used and the load report names it."""
    output = copied(tmp_path / "run")
    [logged] = (output / "rollout_samples").iterdir()
    meta = logger_meta(output)
    older = output / "rollout_samples" / "an-older-run"
    older.mkdir()
    (older / "rollout_meta_1.json").write_text(json.dumps(meta | {"started_at": "2000-01-01T00:00:00+00:00", "reward_weights": [2.0, 2.0]}))
    run = rl_board.open_run(str(output))
    assert run.snapshot.reward_note == "reward = 1 × sorted_digits + 0.5 × same_digits (weights from the logger's metadata)"
    assert f"the logger's metadata is rollout_samples/{logged.name}/'s, the newest of 2 runs there" in run.problems["reason"].tolist()
