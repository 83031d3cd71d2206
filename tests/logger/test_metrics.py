"""The trainer's side of a logged run: its logged events in the metrics file, its configuration in the metadata, and
each line's micro-batch, from which TRL's logged `kl` is recomputed exactly."""

import json
import math
from collections import Counter

import pytest

from examples.train_grpo_tiny import prompt_dataset
from rollout_logger import RolloutLoggerCallback
from tests.support.logger_runs import (
    KL_ROUNDING,
    GenerationRecorder,
    add_logger,
    assert_step_kl_is_trls,
    make_trainer,
    read_records,
    trl_kl,
    trl_step_kl,
)

SECRETS = dict(hub_token="hf_hub_secret", model_init_kwargs={"token": "hf_model_secret", "dtype": "float32"})


def only_file(run_dir, pattern: str):
    [path] = run_dir.glob(pattern)
    return path


def strict(entry: dict) -> dict:
    """A `log_history` entry as strict JSON holds it: NaN and ±inf are null."""
    return {
        key: None if isinstance(value, float) and not math.isfinite(value) else value for key, value in entry.items()
    }


@pytest.fixture(scope="module")
def eval_run(tmp_path_factory):
    """Six steps, evaluated and saved every two, the best checkpoint (lowest eval loss: before TRL 1.5 its own eval
    metrics are not among those `metric_for_best_model` sees) loaded at the end; a hub token and a model token set."""
    tmp_path = tmp_path_factory.mktemp("eval")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("SAVE_ROLLOUT_DATA", "true")
        trainer = make_trainer(
            tmp_path,
            eval_prompts=4,
            max_steps=6,
            eval_strategy="steps",
            eval_steps=2,
            per_device_eval_batch_size=8,
            save_strategy="steps",
            save_steps=2,
            save_only_model=True,
            metric_for_best_model="loss",
            load_best_model_at_end=True,
            **SECRETS,
        )
        evaluated = []
        generate = trainer._generate_and_score_completions

        def generate_and_record_evaluations(*args, **kwargs):
            output = generate(*args, **kwargs)
            if not trainer.model.training:
                evaluated.append(output["prompt_ids"].size(0))
            return output

        trainer._generate_and_score_completions = generate_and_record_evaluations
        callback = add_logger(trainer)
        trainer.train()
    return dict(trainer=trainer, run_dir=callback.run_dir, output_dir=tmp_path, evaluated=evaluated)


def metric_lines(run_dir) -> list[dict]:
    return [json.loads(line) for line in only_file(run_dir, "rollout_metrics_*.jsonl").read_text().splitlines()]


def test_metrics_file_is_the_log_history(eval_run):
    """Each event the trainer logged, in order, with its step and kind: train steps, evaluations and the summary."""
    events = [line for line in metric_lines(eval_run["run_dir"]) if line["kind"] != "checkpoint"]
    history = eval_run["trainer"].state.log_history
    assert [{key: value for key, value in line.items() if key != "kind"} for line in events] == [
        json.loads(json.dumps(strict(entry))) for entry in history
    ]
    kinds = [(line["step"], line["kind"]) for line in events]
    assert kinds == [(1, "train"), (2, "train"), (2, "eval"), (3, "train"), (4, "train"), (4, "eval")] + [
        (5, "train"),
        (6, "train"),
        (6, "eval"),
        (6, "train"),  # the final summary
    ]
    for line in events:
        assert (line["kind"] == "eval") == any(key.startswith("eval_") for key in line)
    assert {"loss", "reward", "kl", "entropy", "learning_rate", "grad_norm", "epoch"} <= set(events[0])
    assert {"eval_loss", "eval_reward", "eval_kl"} <= set(events[2]) and "train_runtime" in events[-1]
    [records_file] = read_records(eval_run["run_dir"])
    launch_id = records_file.removeprefix("rollout_data_rank_0_")
    assert only_file(eval_run["run_dir"], "rollout_metrics_*.jsonl").name == f"rollout_metrics_{launch_id}"


def test_checkpoint_lines_mark_the_best_checkpoint(eval_run):
    """One line per save, with the best checkpoint and metric as the checkpoint's own trainer_state.json has them."""
    trainer, output_dir = eval_run["trainer"], eval_run["output_dir"]
    saves = [line for line in metric_lines(eval_run["run_dir"]) if line["kind"] == "checkpoint"]
    assert [(line["step"], line["checkpoint"]) for line in saves] == [(2, "checkpoint-2"), (4, "checkpoint-4")] + [
        (6, "checkpoint-6")
    ]
    for line in saves:
        state = json.loads((output_dir / line["checkpoint"] / "trainer_state.json").read_text())
        assert state["global_step"] == line["step"]
        assert (line["best_model_checkpoint"], line["best_metric"]) == (
            state["best_model_checkpoint"],
            state["best_metric"],
        )
    assert (saves[-1]["best_model_checkpoint"], saves[-1]["best_metric"]) == (
        trainer.state.best_model_checkpoint,
        trainer.state.best_metric,
    )
    eval_losses = [entry["eval_loss"] for entry in trainer.state.log_history if "eval_loss" in entry]
    assert trainer.state.best_metric == min(eval_losses) and len(eval_losses) == 3


def test_evaluation_samples_are_no_rollout_lines(eval_run):
    """Evaluations generated completions; only the training batches are lines."""
    assert eval_run["evaluated"] == [8, 8] * 3  # 4 prompts x 4 completions, in batches of 8, at steps 2, 4 and 6
    [records] = read_records(eval_run["run_dir"]).values()
    assert Counter(record["step"] for record in records) == {step: 8 for step in range(1, 7)}
    evaluation_prompts = set(prompt_dataset(4, seed=1)["prompt"])
    assert not evaluation_prompts & set(prompt_dataset(256, seed=0)["prompt"])  # so the prompts tell them apart
    assert not evaluation_prompts & {record["prompt"] for record in records}


def test_trainer_config_is_plain_json_without_secrets(eval_run):
    trainer = eval_run["trainer"]
    text = only_file(eval_run["run_dir"], "rollout_meta_*.json").read_text()
    config = json.loads(text)["trainer_config"]
    assert "hf_" not in text and "SECRET" not in text.upper()
    expected = json.loads(json.dumps(trainer.args.to_dict(), default=str))
    assert set(expected) - set(config) == {"hub_token"}  # `to_dict` masks it as "<HUB_TOKEN>"; left out all the same
    del expected["hub_token"]
    model_init_kwargs = expected.pop("model_init_kwargs")
    assert model_init_kwargs.pop("token") == "hf_model_secret"  # `to_dict` keeps a nested token
    assert config.pop("model_init_kwargs") == model_init_kwargs
    assert config == expected
    assert (config["eval_strategy"], config["metric_for_best_model"], config["logging_steps"]) == ("steps", "loss", 1)


def test_non_finite_metrics_are_null(tmp_path):
    """As in rollout lines: strict JSON, the missing value null."""
    trainer = make_trainer(tmp_path / "output")
    callback = RolloutLoggerCallback(trainer, enabled=True, save_dir=tmp_path / "root", exp_name="run")
    callback.on_train_begin(trainer.args, trainer.state, trainer.control)
    logs = {"loss": float("nan"), "grad_norm": float("inf"), "eval_reward": -float("inf"), "epoch": 0.5}
    callback.on_log(trainer.args, trainer.state, trainer.control, logs=logs)
    callback.on_train_end(trainer.args, trainer.state, trainer.control)
    text = only_file(callback.run_dir, "rollout_metrics_*.jsonl").read_text()
    assert json.loads(text, parse_constant=pytest.fail) == {
        "step": 0,
        "kind": "train",  # a training log, with a metric of its own named eval_*
        "loss": None,
        "grad_norm": None,
        "eval_reward": None,
        "epoch": 0.5,
    }


def test_kl_of_each_step_from_its_micro_batches(tmp_path, monkeypatch):
    """num_iterations=2 and gradient accumulation 2: each generation trains two steps, each in two loss passes. The
    steps that generated have lines, numbered by micro-batch, and their recomputed `kl` is TRL's; the steps that reuse
    a generation have none. A token mean over the whole step would not be TRL's `kl`."""
    monkeypatch.setenv("SAVE_ROLLOUT_DATA", "true")
    trainer = make_trainer(tmp_path, num_iterations=2, gradient_accumulation_steps=2, max_steps=6)
    generations = GenerationRecorder(trainer)
    callback = add_logger(trainer)
    trainer.train()
    [records] = read_records(callback.run_dir).values()
    assert sorted(generations.weights) == [1, 3, 5]  # the steps that generated
    assert Counter((record["step"], record["micro_batch"]) for record in records) == {
        (step, micro_batch): 8 for step in (1, 3, 5) for micro_batch in (0, 1)
    }
    assert_step_kl_is_trls(trainer, records, steps=[1, 3, 5])
    logged = {entry["step"]: entry["kl"] for entry in trainer.state.log_history if "kl" in entry}
    assert sorted(logged) == [1, 2, 3, 4, 5, 6]  # TRL's own values for the steps without lines
    whole_step = {}
    for step in (3, 5):
        values = [value for record in records if record["step"] == step for value in trl_kl(record)]
        whole_step[step] = sum(values) / len(values)
    assert any(whole_step[step] != pytest.approx(logged[step], rel=1e-4, abs=KL_ROUNDING) for step in (3, 5))
    assert trl_step_kl(records)[3] > 0
