"""The page on the bundled runs of other trainers: TRL's completion logs with typed reward weights, verl's dumps compared."""


import json
import shutil

import pytest

from tests.support import SAMPLES
from tests.support.page import (
    batch_table,
    curve_points,
    load_and_view,
    loaded_caption,
    start,
    step_reward_chart,
    widget,
)
from tests.support.runs import jsonl_rows
from tests.support.trl_completions_run import parquet_steps


def open_run(name: str, monkeypatch):
    app = start(SAMPLES, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").set_value(name).run()
    return load_and_view(app)


def test_page_opens_the_bundled_trl_run_and_applies_typed_reward_weights(monkeypatch):
    """The bundled TRL run opens with its format named; typed reward weights reweight the batch table's reward, and a bad entry warns."""
    raw = parquet_steps(SAMPLES / "from_trl_log_completions" / "completions")
    step = next(step for step, rows in raw.items() if any(row["sorted_digits"] for row in rows))  # where the weights differ
    app = open_run("from_trl_log_completions", monkeypatch)
    assert "TRL completion logs" in loaded_caption(app)
    widget(app.slider, f"Step Index({len(raw)} total steps)").set_value(step).run()
    table = batch_table(app)
    assert table["reward"].tolist() == pytest.approx([row["sorted_digits"] + row["same_digits"] for row in raw[step]], rel=1e-12)
    widget(app.text_input, "Reward weights").input("sorted_digits=1, same_digits=0.5").run()
    assert not app.exception
    table = batch_table(app)
    assert table["reward"].tolist() == pytest.approx([row["sorted_digits"] + 0.5 * row["same_digits"] for row in raw[step]], rel=1e-12)
    assert table["rewards/same_digits"].tolist() == [row["same_digits"] for row in raw[step]]
    widget(app.text_input, "Reward weights").input("nope=2").run()
    assert not app.exception
    assert any(warning.value.startswith("Reward weights") and "nope=2" in warning.value for warning in app.warning)


@pytest.mark.parametrize("weights", [None, [1, 0.5]], ids=["no weights", "weights"])
def test_a_trl_runs_metadata_and_its_reward_note_agree_on_the_weights(tmp_path, monkeypatch, weights):
    """Metadata naming the reward functions without their weights says so, as the reward note does (the plain sum), rather
    than a weighted sum with TRL's default weights; with weights, both give the same sum."""
    shutil.copytree(SAMPLES / "from_trl_log_completions", tmp_path / "runs" / "trl_run")
    meta = {"model_name": "m", "reward_funcs": ["sorted_digits", "same_digits"]} | ({"reward_weights": weights} if weights else {})
    (tmp_path / "runs" / "trl_run" / "rollout_meta_0.json").write_text(json.dumps(meta))
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    captions = [caption.value for caption in app.caption if caption.value.startswith(("Reward =", "Reward functions:", "reward ="))]
    if weights is None:
        assert captions == [
            "Reward functions: sorted\\_digits, same\\_digits (the run's metadata gives no weights)",
            "reward = the plain sum of the reward functions' scores \\(their weights are not known\\: type them in Reward weights\\)",
        ]
    else:
        assert captions == ["Reward = 1 × sorted\\_digits + 0.5 × same\\_digits", "reward = 1 × sorted\\_digits + 0.5 × same\\_digits \\(weights from the logger's metadata\\)"]


def test_page_opens_the_bundled_verl_runs_and_compares_them(monkeypatch):
    """The bundled verl validation run opens with its format named and its latest step in the table; compared with the training run, each gets its step-reward curve."""
    validation, training = SAMPLES / "from_verl_validation_data", SAMPLES / "from_verl_rollout_data"
    app = open_run(validation.name, monkeypatch)
    assert "verl generations dump" in loaded_caption(app) and "validation" in loaded_caption(app)
    latest = jsonl_rows(max(validation.glob("*.jsonl"), key=lambda path: int(path.stem)))
    table = batch_table(app)
    assert table["reward"].tolist() == [line["reward"] for line in latest]
    assert table["ground_truth"].tolist() == [line["gts"] for line in latest]
    widget(app.sidebar.multiselect, "Compare with").set_value([training.name]).run()
    assert not app.exception
    points = curve_points(step_reward_chart(app))
    for run_dir, key in ((validation, "reward"), (training, "score")):
        means = {int(path.stem): sum(line[key] for line in jsonl_rows(path)) / len(jsonl_rows(path)) for path in run_dir.glob("*.jsonl")}
        assert {step: point["centre"] for step, point in points[run_dir.name].items()} == pytest.approx(dict(sorted(means.items())))
