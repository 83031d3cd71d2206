"""The rollout logger on real (tiny, CPU) GRPOTrainer runs: files, fields, exact log-probs, TRL's metrics, faults.

Log-probs are checked against a fresh forward pass of the weights that generated each sample (snapshotted when the
step's batch was generated), with learning rates large enough that every step changes the weights.
"""

import contextlib
import errno
import io
import json
import logging
import pathlib
import re
import shutil
import statistics
import time
from collections import Counter, defaultdict

import pandas as pd
import pytest
import torch
import trl
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from trl import GRPOTrainer

import rl_board.reading.workers
import rollout_logger.callback
import rollout_logger.writer
from examples.train_grpo_tiny import same_digits, sorted_digits
from rl_board.reading.snapshot import read_step_batch
from rl_board.reading.store import RunStore
from rollout_logger import RolloutLoggerCallback, rollout_logging_enabled
from rollout_logger.metadata import SUMMARIES_SUFFIX, TEXTS_SUFFIX
from rollout_logger.writer import JsonlWriter
from tests.support import PROJECT
from tests.support.logger_runs import (
    GenerationRecorder,
    Rescorer,
    add_logger,
    assert_step_kl_is_trls,
    make_trainer,
    max_difference,
    read_records,
    sample_key,
)
from tests.support.logger_tool_runs import make_tools_trainer, why_trl_runs_no_tools

FILE_NAME = re.compile(r"rollout_data_rank_0_(\d{8}T\d{6}Z)\.jsonl")
GRPO_KEYS = {
    "prompt",
    "response",
    "response_tokens",
    "logprobs",
    "sampler_logprobs",
    "entropies",
    "reward",
    "rewards_per_func",
    "advantage",
    "group_id",
    "truncated",
    "rank",
    "step",
    "micro_batch",
    "loss_passes",
}
HOOKED = {
    "_generate_and_score_completions",
    "_calculate_rewards",
    "_get_per_token_logps_and_entropies",
    "compute_loss",
    "get_high_entropy_mask",
}


def logger_warnings(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name.startswith("rollout_logger")]


def run_logged(tmp_path, monkeypatch, **settings):
    """A logged GRPO run: (trainer, its GenerationRecorder, file name -> records)."""
    monkeypatch.setenv("SAVE_ROLLOUT_DATA", "true")
    trainer = make_trainer(tmp_path, **settings)
    generations = GenerationRecorder(trainer)
    callback = add_logger(trainer)
    trainer.train()
    return trainer, generations, read_records(callback.run_dir)


def run_logged_with_caplog(tmp_path, monkeypatch, caplog, **settings):
    with caplog.at_level(logging.WARNING):
        return run_logged(tmp_path, monkeypatch, **settings)


def assert_exact(trainer, generations, records):
    """Every sample's log-probs (and reference log-probs, and entropies where logged) equal a fresh pass of the
    generating weights; so do the sampler's, in float32 without top-k or top-p (TRL's defaults)."""
    rescorer = Rescorer(trainer.temperature)
    for record in records:
        logprobs, entropies = rescorer.logprobs_and_entropies(generations.weights[record["step"]], record)
        assert max_difference(record["logprobs"], logprobs) < 1e-5
        assert max_difference(record["sampler_logprobs"], logprobs) < 1e-5
        if "entropies" in record:
            assert max_difference(record["entropies"], entropies) < 1e-5
        if trainer.beta != 0:
            assert max_difference(record["ref_logprobs"], rescorer.logprobs(rescorer.initial_weights, record)) < 1e-5


def assert_well_formed(trainer, generations, records, steps, batches_per_step=1, entropies_everywhere=True):
    """All keys (entropies and micro-batch possibly not, unless `entropies_everywhere`), per-token lists as long as
    the completion mask, each generated sample exactly once, micro-batches numbered from 0 in each step."""
    keys = GRPO_KEYS | ({"ref_logprobs"} if trainer.beta != 0 else set())
    generation_batch = trainer.args.per_device_train_batch_size * trainer.args.steps_per_generation
    assert Counter(record["step"] for record in records) == {
        step: generation_batch * batches_per_step for step in steps
    }
    for step in steps:
        lengths = sorted(len(record["response_tokens"]) for record in records if record["step"] == step)
        assert lengths == sorted(generations.completion_lengths[step])
    for record in records:
        assert set(record) == keys or (not entropies_everywhere and set(record) == keys - {"entropies", "micro_batch"})
        assert not {"values", "token_rewards"} & set(record)
        length = len(record["response_tokens"])
        assert length > 0 and all(
            len(record[key]) == length
            for key in set(record) & {"logprobs", "sampler_logprobs", "ref_logprobs", "entropies"}
        )
        assert record["truncated"] == (record["response_tokens"][-1] != "<|endoftext|>")
        assert length == trainer.args.max_completion_length or not record["truncated"]
        assert set(record["rewards_per_func"]) == set(trainer.reward_func_names)
        assert record["rank"] == 0 and isinstance(record["step"], int)
    micro_batches = defaultdict(set)
    for record in records:
        if "micro_batch" in record:
            micro_batches[record["step"]].add(record["micro_batch"])
    assert set(micro_batches) == set(steps)
    assert all(found == set(range(trainer.args.gradient_accumulation_steps)) for found in micro_batches.values())
    groups = Counter(record["group_id"] for record in records)
    assert set(groups.values()) == {trainer.num_generations}  # every sample once, groups whole
    prompts = defaultdict(set)
    for record in records:
        prompts[record["group_id"]].add(record["prompt"])
    assert all(len(texts) == 1 for texts in prompts.values())


# ---------------------------------------------------------------- the default run


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """Default GRPO settings (beta > 0), three steps, EXP_NAME and ROLLOUT_SAVE_DIR set."""
    tmp_path = tmp_path_factory.mktemp("default")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("EXP_NAME", "my_experiment")
        monkeypatch.setenv("ROLLOUT_SAVE_DIR", str(tmp_path / "rollouts"))
        printed = io.StringIO()
        class_before = dict(vars(GRPOTrainer))
        with contextlib.redirect_stdout(printed):
            trainer, generations, files = run_logged(tmp_path / "output", monkeypatch)
    return dict(
        trainer=trainer,
        generations=generations,
        files=files,
        printed=printed.getvalue(),
        root=tmp_path / "rollouts",
        class_untouched=dict(vars(GRPOTrainer)) == class_before,
    )


def test_default_run_files_and_fields(default_run):
    trainer, files = default_run["trainer"], default_run["files"]
    run_dir = default_run["root"] / "my_experiment"
    assert f"RLLoggingBoard: Saving rollout data to {run_dir}\n" in default_run["printed"]
    [name] = files
    launch_id = FILE_NAME.fullmatch(name).group(1)
    assert sorted(path.name for path in run_dir.iterdir()) == [
        name,
        name + SUMMARIES_SUFFIX,
        name + TEXTS_SUFFIX,
        f"rollout_meta_{launch_id}.json",
        f"rollout_metrics_{launch_id}.jsonl",
    ]
    assert (run_dir / name).read_bytes().endswith(b"\n")
    meta = json.loads((run_dir / f"rollout_meta_{launch_id}.json").read_text())
    assert meta["launch_id"] == launch_id and meta["trl_version"]
    assert meta["reward_funcs"] == ["sorted_digits", "same_digits"] and meta["reward_weights"] == [1.0, 1.0]
    assert (meta["beta"], meta["num_generations"], meta["world_size"]) == (0.04, 4, 1)
    assert_well_formed(trainer, default_run["generations"], files[name], steps=[1, 2, 3])
    assert HOOKED <= set(vars(trainer)) and default_run["class_untouched"]  # hooks on the instance, not the class
    assert all(group.startswith(launch_id) for group in {record["group_id"] for record in files[name]})


def test_default_run_opens_from_its_summaries_with_the_numbers_of_its_lines(default_run, tmp_path, monkeypatch):
    """The board opens the run from the summaries file the writer wrote beside the rank file, parsing no line, with
    the numbers (every KL estimator, rewards per function...) a parse of the same lines gives; each step's texts come
    from the texts file, equal to the lines'."""
    run_dir = default_run["root"] / "my_experiment"
    [name] = default_run["files"]
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copyfile(run_dir / name, plain / name)
    parsed = []
    summarize = rl_board.reading.workers.summarize_buffer
    monkeypatch.setattr(rl_board.reading.workers, "summarize_buffer", lambda *args: parsed.append(len(args[2])) or summarize(*args))
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    from_summaries = RunStore(str(run_dir)).load(1 << 30, parallel=False)
    assert sum(parsed) == 0 and not (from_summaries.problems["kind"] == "note").any()
    from_lines = RunStore(str(plain)).load(1 << 30, parallel=False)
    assert sum(parsed) == len(default_run["files"][name])
    columns = [column for column in from_lines.samples.columns if column not in ("path", "index_id", "texts_offset", "texts_length")]
    assert {"avg_kl_kl", "sum_kl_k1", "avg_kl_k2", "avg_kl_k3", "rewards/sorted_digits", "avg_entropy"} <= set(columns)
    pd.testing.assert_frame_equal(from_summaries.samples[columns], from_lines.samples[columns], check_exact=True)
    assert (from_summaries.samples["texts_length"] > 0).all()
    for step in from_summaries.steps:
        texts, lines = (read_step_batch(source, run.step_rows(step)).table for source, run in (("texts", from_summaries), ("lines", from_lines)))
        pd.testing.assert_frame_equal(texts[["prompt", "response", "images"]], lines[["prompt", "response", "images"]])


def test_default_run_logprobs_are_exact(default_run):
    [records] = default_run["files"].values()
    assert_exact(default_run["trainer"], default_run["generations"], records)
    # Each step generated with new weights, so the comparison tells the generating weights from the others.
    first, second, third = (default_run["generations"].weights[step]["model.norm.weight"] for step in (1, 2, 3))
    assert not torch.equal(first, second) and not torch.equal(second, third)


def test_default_run_kl_matches_trl_metric(default_run):
    """TRL's logged `kl` of each step is the token mean of exp(ref - logp) - (ref - logp) - 1 over the step's lines."""
    [records] = default_run["files"].values()
    trainer = default_run["trainer"]
    assert_step_kl_is_trls(trainer, records, steps=[1, 2, 3])
    assert [entry["kl"] > 0 for entry in trainer.state.log_history if "kl" in entry] == [False, True, True]


def test_default_run_rewards_and_advantages(default_run):
    [records] = default_run["files"].values()
    for record in records:
        prompt, response = record["prompt"], record["response"]
        assert record["rewards_per_func"] == {
            "sorted_digits": sorted_digits([prompt], [response])[0],
            "same_digits": pytest.approx(same_digits([prompt], [response])[0]),
        }
        assert record["reward"] == pytest.approx(sum(record["rewards_per_func"].values()))
    groups = defaultdict(list)
    for record in records:
        groups[record["group_id"]].append(record)
    for members in groups.values():  # TRL's advantage: (reward - group mean) / (group std + 1e-4)
        rewards = [member["reward"] for member in members]
        for member in members:
            expected = (member["reward"] - statistics.mean(rewards)) / (statistics.stdev(rewards) + 1e-4)
            assert member["advantage"] == pytest.approx(expected, rel=1e-4, abs=1e-5)


def test_logging_off_installs_nothing_and_training_is_identical(default_run, tmp_path, monkeypatch):
    monkeypatch.setenv("SAVE_ROLLOUT_DATA", "false")
    monkeypatch.setenv("ROLLOUT_SAVE_DIR", str(tmp_path / "rollouts"))
    trainer = make_trainer(tmp_path / "output")
    attributes = dict(vars(trainer))
    callback = add_logger(trainer)
    assert not callback.enabled and vars(trainer) == attributes  # no method of the instance replaced
    assert not HOOKED & set(vars(trainer))
    trainer.train()
    assert not (tmp_path / "rollouts").exists() and not (tmp_path / "output" / "rollout_samples").exists()

    def losses(history):
        return [(entry["step"], entry["loss"]) for entry in history if "loss" in entry]

    assert losses(trainer.state.log_history) == losses(default_run["trainer"].state.log_history)


# ---------------------------------------------------------------- other settings


SCENARIOS = {
    # generation batch of 2 micro-batches; log-probs from the loss pass; temperature scales them
    "gradient_accumulation": dict(settings=dict(gradient_accumulation_steps=2, temperature=0.7), steps=[1, 2]),
    # one generation for 2 optimizer steps: the second half trains on updated weights; TRL's old_per_token_logps
    "steps_per_generation_over_accumulation": dict(
        settings=dict(steps_per_generation=2, max_steps=4), steps=[1, 3], entropies_everywhere=False
    ),
    # each batch trained on twice: log-probs of the generating weights, not of the second pass
    "num_iterations": dict(settings=dict(num_iterations=2, max_steps=4), steps=[1, 3]),
    # two generation batches inside each optimizer step
    "accumulation_over_generation": dict(
        settings=dict(gradient_accumulation_steps=4, steps_per_generation=2), steps=[1, 2], batches_per_step=2
    ),
    "no_reference_model": dict(settings=dict(beta=0.0, max_steps=2), steps=[1, 2]),
    "conversational": dict(settings=dict(conversational=True, max_steps=2), steps=[1, 2]),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_logs_every_sample_exactly(scenario, tmp_path, monkeypatch):
    spec = SCENARIOS[scenario]
    trainer, generations, files = run_logged(tmp_path, monkeypatch, **{"max_steps": 2, **spec["settings"]})
    [records] = files.values()
    assert_well_formed(
        trainer,
        generations,
        records,
        spec["steps"],
        spec.get("batches_per_step", 1),
        spec.get("entropies_everywhere", True),
    )
    assert_exact(trainer, generations, records)
    if trainer.beta != 0:
        assert_step_kl_is_trls(trainer, records, spec["steps"])
    if scenario == "conversational":
        assert all(
            re.fullmatch(r"<\|im_start\|>user\nsort [\d ]+ :<\|im_end\|>\n<\|im_start\|>assistant\n", record["prompt"])
            for record in records
        )


def test_entropies_only_from_the_weights_that_sampled(tmp_path, monkeypatch):
    """With steps_per_generation=2, the second half of step 1's samples is first trained in step 2, after an update:
    those lines carry no entropies (the loss pass saw other weights); all others carry the sampling policy's."""
    trainer, generations, files = run_logged(tmp_path, monkeypatch, steps_per_generation=2, max_steps=2, beta=0.0)
    [records] = files.values()
    assert {record["step"] for record in records} == {1} and len(records) == 16
    assert len(generations.trained[1]) == len(generations.trained[2]) == 8
    assert Counter(sample_key(record) for record in records if "entropies" not in record) == Counter(
        generations.trained[2]
    )
    assert_exact(trainer, generations, records)  # log-probs of all, entropies of those that have them


def test_truncated_completions_trl_masks_keep_their_tokens(tmp_path, monkeypatch):
    """With mask_truncated_completions, TRL trains on no token of a truncated completion and computed its per-token
    values without it: its line has its sampled tokens, reward and advantage, and no per-token values."""
    trainer, generations, files = run_logged(
        tmp_path, monkeypatch, mask_truncated_completions=True, max_completion_length=4, max_steps=2
    )
    [records] = files.values()
    truncated = [record for record in records if record["truncated"]]
    assert 0 < len(truncated) < len(records)
    tokenizer = trainer.processing_class
    for record in truncated:
        tokens = record["response_tokens"]
        assert len(tokens) == 4 and tokens[-1] != "<|endoftext|>"
        text = [token for token in tokens if token not in tokenizer.all_special_tokens]  # as the response skips them
        assert tokenizer.convert_tokens_to_string(text) == record["response"]
        assert not {"logprobs", "sampler_logprobs", "ref_logprobs", "entropies"} & set(record)
        assert "micro_batch" in record
        assert record["reward"] == pytest.approx(sum(record["rewards_per_func"].values()))
        assert isinstance(record["advantage"], float)
    complete = [record for record in records if not record["truncated"]]
    assert all({"logprobs", "sampler_logprobs", "ref_logprobs", "entropies"} <= set(record) for record in complete)
    assert_exact(trainer, generations, complete)
    assert_step_kl_is_trls(trainer, records, steps=[1, 2])  # the masked lines count in their micro-batch, no token


def test_reward_function_returning_none_is_null(tmp_path, monkeypatch):
    def only_short(completions, **kwargs):
        return [1.0 if len(completion) < 8 else None for completion in completions]

    trainer, _, files = run_logged(tmp_path, monkeypatch, reward_funcs=(only_short,), max_steps=1, beta=0.0)
    [records] = files.values()
    assert {record["rewards_per_func"]["only_short"] for record in records} <= {1.0, None}
    assert all(record["reward"] is None for record in records if record["rewards_per_func"]["only_short"] is None)
    assert any(record["reward"] is None for record in records)


@pytest.mark.skipif(not hasattr(GRPOTrainer, "_log_completion_extra"), reason="this TRL passes reward functions no log_extra")
def test_log_extra_columns_named_like_the_format_s_keys_or_each_other_all_reach_the_lines(tmp_path, monkeypatch):
    def step_first(prompts, completions, log_extra=None, **kwargs):
        log_extra("step", ["column step"] * len(prompts))  # a key of the format: renamed
        log_extra("extra_step", ["column extra_step"] * len(prompts))  # named like the renamed one: it was lost
        log_extra("note", ["column note"] * len(prompts))
        return [0.0] * len(prompts)

    def step_last(prompts, completions, log_extra=None, **kwargs):
        log_extra("extra_step", ["column extra_step"] * len(prompts))
        log_extra("step", ["column step"] * len(prompts))
        return [1.0] * len(prompts)

    _, _, files = run_logged(tmp_path, monkeypatch, reward_funcs=(step_first, step_last), max_steps=1, beta=0.0)
    [records] = files.values()
    # each column under one key, whichever the order of the calls: the user's extra_step under its own name
    assert all(
        (record["step"], record["extra_step"], record["extra_extra_step"], record["note"]) == (1, "column extra_step", "column step", "column note")
        for record in records
    )


def test_summaries_off_writes_the_rank_file_alone_and_the_board_parses_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SAVE_ROLLOUT_DATA", "true")
    trainer = make_trainer(tmp_path, max_steps=2)
    callback = RolloutLoggerCallback(trainer, summaries=False)
    trainer.add_callback(callback)
    trainer.train()
    [(name, records)] = read_records(callback.run_dir).items()
    assert not [path.name for path in callback.run_dir.iterdir() if path.name.startswith(name) and path.name != name]  # no summaries, no texts
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    run = RunStore(str(callback.run_dir)).load(1 << 30, parallel=False)
    assert run.samples["reward"].tolist() == pytest.approx([record["reward"] for record in records]) and run.problems.empty


def test_each_launch_writes_new_files(tmp_path, monkeypatch):
    """A second `train()` (as after a resume) never appends to or overwrites the first launch's files."""
    monkeypatch.setenv("SAVE_ROLLOUT_DATA", "true")
    trainer = make_trainer(tmp_path, max_steps=1, beta=0.0)
    callback = add_logger(trainer)
    trainer.train()
    first = read_records(callback.run_dir)
    trainer.train()
    files = read_records(callback.run_dir)
    assert len(files) == 2 and set(first) < set(files) and files[min(files)] == first[min(first)]
    launches = sorted(FILE_NAME.fullmatch(name).group(1) for name in files)
    assert launches[0] < launches[1] and len(list(callback.run_dir.glob("rollout_meta_*.json"))) == 2


# ---------------------------------------------------------------- options


def test_arguments_override_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SAVE_ROLLOUT_DATA", "false")
    monkeypatch.setenv("ROLLOUT_SAVE_DIR", str(tmp_path / "env_root"))
    monkeypatch.setenv("EXP_NAME", "env_name")
    trainer = make_trainer(tmp_path / "output", max_steps=1, beta=0.0)
    callback = RolloutLoggerCallback(trainer, enabled=True, save_dir=tmp_path / "root", exp_name="my/experiment")
    trainer.add_callback(callback)
    trainer.train()
    assert callback.run_dir == tmp_path / "root" / "my_experiment"
    [records] = read_records(callback.run_dir).values()
    assert len(records) == 8 and not (tmp_path / "env_root").exists()

    monkeypatch.setenv("SAVE_ROLLOUT_DATA", "true")
    attributes = dict(vars(trainer))
    assert not RolloutLoggerCallback(trainer, enabled=False).enabled and vars(trainer) == attributes


def run_dir_of(trainer, **options) -> pathlib.Path:
    """The folder a logging callback with these options writes to (set up, then closed, without training)."""
    callback = RolloutLoggerCallback(trainer, enabled=True, **options)
    callback.on_train_begin(trainer.args, trainer.state, trainer.control)
    callback.on_train_end(trainer.args, trainer.state, trainer.control)
    return callback.run_dir


def test_folder_from_arguments_else_environment_else_defaults(tmp_path, monkeypatch):
    monkeypatch.delenv("ROLLOUT_SAVE_DIR", raising=False)
    monkeypatch.delenv("EXP_NAME", raising=False)
    trainer = make_trainer(tmp_path / "output")
    assert trainer.args.run_name is None  # transformers >= 4.56 (TRL 0.29's oldest) no longer sets it to output_dir
    assert run_dir_of(trainer) == tmp_path / "output" / "rollout_samples" / "output"
    trainer.args.run_name = "my/run"
    assert run_dir_of(trainer) == tmp_path / "output" / "rollout_samples" / "my_run"
    monkeypatch.setenv("ROLLOUT_SAVE_DIR", str(tmp_path / "env_root"))
    monkeypatch.setenv("EXP_NAME", "env_name")
    assert run_dir_of(trainer) == tmp_path / "env_root" / "env_name"
    assert run_dir_of(trainer, save_dir=str(tmp_path / "root"), exp_name="name") == tmp_path / "root" / "name"


# ---------------------------------------------------------------- TRL drift


def test_supported_trl_versions_are_the_projects_and_include_this_one():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    dependencies = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"trl{rollout_logger.callback.SUPPORTED_TRL}" in dependencies
    assert Version(trl.__version__) in SpecifierSet(rollout_logger.callback.SUPPORTED_TRL)


READ_FROM_THE_TRAINER = ["_calculate_rewards", "_get_per_token_logps_and_entropies", "reward_weights"]
if rollout_logger.callback.TRL_VERSION >= rollout_logger.callback.EOS_TOKEN_IDS_SINCE:
    READ_FROM_THE_TRAINER.append("eos_token_ids")


@pytest.mark.parametrize("missing", READ_FROM_THE_TRAINER)
def test_a_trainer_without_what_the_logger_reads_fails_at_construction(missing, tmp_path, monkeypatch):
    trainer = make_trainer(tmp_path)
    monkeypatch.delattr(trainer if missing in vars(trainer) else GRPOTrainer, missing)
    attributes = dict(vars(trainer))
    message = rf"GRPOTrainer \(TRL {re.escape(trl.__version__)}\) has no `{missing}`"
    with pytest.raises(RuntimeError, match=message):
        RolloutLoggerCallback(trainer, enabled=True)
    assert vars(trainer) == attributes  # nothing wrapped
    RolloutLoggerCallback(trainer, enabled=False)  # logging off checks nothing


def test_a_renamed_parameter_fails_at_construction(tmp_path):
    trainer = make_trainer(tmp_path)
    trainer.compute_loss = lambda model, batch, return_outputs=False, num_items_in_batch=None: None
    with pytest.raises(RuntimeError, match=r"`compute_loss\(model, batch, .*\)` without the parameter `inputs`"):
        RolloutLoggerCallback(trainer, enabled=True)


def test_arguments_are_read_by_name():
    class Reordered:
        def _calculate_rewards(self, completion_ids_list, inputs, prompts, completions):
            pass

    read = rollout_logger.callback._argument_reader(Reordered(), "_calculate_rewards", "completion_ids_list")
    assert read(([[1, 2]], "inputs", "prompts", "completions"), {}) == [[1, 2]]
    assert read(("ids", "inputs"), {"completions": "completions", "prompts": "prompts"}) == "ids"
    with pytest.raises(TypeError):
        read(("ids",), {})


# ---------------------------------------------------------------- faults


def test_unwritable_folder_warns_once_and_training_goes_on(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("ROLLOUT_SAVE_DIR", str(blocker))
    monkeypatch.setenv("SAVE_ROLLOUT_DATA", "true")
    trainer = make_trainer(tmp_path / "output", max_steps=2, beta=0.0)
    add_logger(trainer)
    with caplog.at_level(logging.WARNING):
        trainer.train()
    assert trainer.state.global_step == 2
    [warning] = logger_warnings(caplog)
    assert "cannot write rollout data" in warning and str(blocker) in warning


def full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


class FullDisk(io.BytesIO):
    write = full_disk


def test_failed_write_warns_once_and_training_goes_on(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(rollout_logger.writer, "open", lambda *args, **kwargs: FullDisk(), raising=False)
    trainer, _, _ = run_logged_with_caplog(tmp_path, monkeypatch, caplog, max_steps=3, beta=0.0)
    assert trainer.state.global_step == 3
    [warning] = logger_warnings(caplog)
    assert "No space left on device" in warning


def test_a_disk_full_from_the_start_warns_once(tmp_path, monkeypatch, caplog):
    """The run's metadata and then its lines cannot be written: one I/O problem, one warning, true for both."""
    monkeypatch.setattr(pathlib.Path, "write_text", full_disk)
    monkeypatch.setattr(rollout_logger.writer, "open", lambda *args, **kwargs: FullDisk(), raising=False)
    trainer, _, _ = run_logged_with_caplog(tmp_path, monkeypatch, caplog, max_steps=2, beta=0.0)
    assert trainer.state.global_step == 2
    [warning] = logger_warnings(caplog)
    assert "rollout_meta_" in warning and "No space left on device" in warning and "rollout data" in warning


def test_logging_stops_once_the_writer_failed(tmp_path, monkeypatch, caplog):
    """After an I/O error no record is built, queued or serialised any more: no work that nothing would write."""
    monkeypatch.setattr(rollout_logger.writer, "open", lambda *args, **kwargs: FullDisk(), raising=False)
    write = JsonlWriter.write

    def write_and_wait_for_the_writer(self, records):  # so that the failure is known before the next step
        write(self, records)
        deadline = time.monotonic() + 10
        while not getattr(self, "failed", False) and time.monotonic() < deadline:
            time.sleep(0.01)

    monkeypatch.setattr(JsonlWriter, "write", write_and_wait_for_the_writer)
    built, serialised = [], []
    start_records = RolloutLoggerCallback._start_records
    monkeypatch.setattr(
        RolloutLoggerCallback,
        "_start_records",
        lambda self, output, step: built.append(step) or start_records(self, output, step),
    )
    json_line = rollout_logger.writer.json_line
    monkeypatch.setattr(
        rollout_logger.writer, "json_line", lambda record: serialised.append(record) or json_line(record)
    )
    trainer, _, _ = run_logged_with_caplog(tmp_path, monkeypatch, caplog, max_steps=3, beta=0.0)
    assert trainer.state.global_step == 3
    [warning] = logger_warnings(caplog)
    assert "No space left on device" in warning
    assert built == [1] and len(serialised) == 8  # step 1's batch, the one whose write failed


def test_internal_error_warns_once_and_training_goes_on(tmp_path, monkeypatch, caplog):
    """Should TRL's batch not look as expected, logging stops with one warning; training is unchanged."""
    monkeypatch.setattr(RolloutLoggerCallback, "_start_records", lambda self, output, step: output["no such key"])
    trainer, _, files = run_logged_with_caplog(tmp_path, monkeypatch, caplog, max_steps=2, beta=0.0)
    assert trainer.state.global_step == 2
    [warning] = logger_warnings(caplog)
    assert "KeyError" in warning and all(not records for records in files.values())


@pytest.mark.parametrize(
    ("value", "enabled"),
    [
        ("true", True),
        ("TRUE", True),
        ("1", True),
        ("Yes", True),
        ("false", False),
        ("0", False),
        ("", False),
        ("on", False),
    ],
)
def test_switch_values(value, enabled, monkeypatch):
    monkeypatch.setenv("SAVE_ROLLOUT_DATA", value)
    assert rollout_logging_enabled() is enabled


# ---------------------------------------------------------------- what a user's setup may hold


# The experiment name is one folder under the runs' folder: ".." wrote the run into the output folder, outside the root
# the board is pointed at, and a NUL stopped the training (a ValueError at its start).
@pytest.mark.parametrize(("name", "folder"), [("..", "run"), (".", "run"), ("a/b/", "a_b"), ("a\\b", "a_b"), ("x\x00y", "x_y"), ("my run", "my run")])
def test_an_experiment_name_is_one_folder_of_the_root(tmp_path, name, folder):
    assert run_dir_of(make_trainer(tmp_path / "output"), save_dir=str(tmp_path / "root"), exp_name=name) == tmp_path / "root" / folder


# A switch given as text (a config file's "false") is read as SAVE_ROLLOUT_DATA is: "false" was truthy, and logging on.
def test_switches_given_as_text_are_read_as_the_environment_s(tmp_path):
    trainer = make_trainer(tmp_path / "output")
    attributes = dict(vars(trainer))
    callback = RolloutLoggerCallback(trainer, enabled="false", sampler_logprobs="no", loss_pass_values="0", summaries="false")
    assert (callback.enabled, callback.sampler_logprobs, callback.loss_pass_values, callback.summaries) == (False,) * 4 and vars(trainer) == attributes


# A tool message of another shape is read as far as it goes: a content part that is a string, whose text is null or a
# number, a call whose function is a name; these raised inside the logger, which then stopped logging for the launch.
def test_tool_messages_of_other_shapes_are_read_as_far_as_they_go():
    completion = [
        {"role": "assistant", "content": [{"type": "text", "text": None}, "plain ", {"type": "text", "text": 3}], "tool_calls": [{"type": "function", "function": "add"}, {"function": None}]},
        {"role": "tool", "name": "add", "content": [{"type": "text", "text": "5"}]},
    ]
    turns, reason = rollout_logger.callback._trajectory("p", completion, [1, 1, 0], False, 3)
    assert turns[1]["text"] == "plain 3" and turns[1]["tool_calls"] == [{"name": "add", "arguments": None}, {"name": None, "arguments": None}]
    assert turns[2]["text"] == "5" and reason == "stop"


# TRL 1.16's parse_response splits a reasoning model's <think>...</think> into the message's reasoning_content: a turn's
# text keeps it before the content, as the message was generated (the turns showed "" for a call made after thinking,
# and nothing of a completion cut mid-thought).
def test_a_turn_s_text_keeps_the_message_s_reasoning():
    completion = [
        {"role": "assistant", "reasoning_content": "I need the sum.", "content": "", "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 3, "b": 4}}}]},
        {"role": "tool", "name": "add", "content": "7"},
        {"role": "assistant", "reasoning_content": "The tool said 7.", "content": "7"},
    ]
    turns, reason = rollout_logger.callback._trajectory([{"role": "user", "content": "3+4?"}], completion, [1, 1, 0, 1], False, 3)
    assert [turn["text"] for turn in turns] == ["3+4?", "<think>\nI need the sum.\n</think>\n", "7", "<think>\nThe tool said 7.\n</think>\n7"] and reason == "stop"


# A rollout_func's env_mask makes a tool mask too (TRL 1.16), over a completion kept as one message: turns are made only
# where the trainer runs tools (the one message took the first span of sampled tokens, the environment's reply lost).
def test_turns_are_made_only_by_a_trainer_that_runs_tools(tmp_path):
    assert not rollout_logger.callback.uses_tools(make_trainer(tmp_path / "plain"))
    if why_trl_runs_no_tools() is None:
        assert rollout_logger.callback.uses_tools(make_tools_trainer(tmp_path / "tools"))


# Credentials in a URL of the training arguments (a vLLM server's https://user:password@host) and keys named as
# credentials are left out of the metadata; a key that only looks alike (author) is kept.
def test_the_metadata_keeps_no_credentials_of_a_url_or_an_access_key():
    config = {"vllm_server_base_url": "https://user:s3cr3t@host:8000/v1", "aws_access_key_id": "A", "apikey": "k", "http_auth": "x", "author": "me", "nested": [{"url": "s3://key:secret@bucket/x"}, "s3://key:sec/ret+K@bucket/y"]}
    assert rollout_logger.callback._without_secrets(config) == {"vllm_server_base_url": "https://host:8000/v1", "author": "me", "nested": [{"url": "s3://bucket/x"}, "s3://bucket/y"]}


# A training log holding a metric of its own named eval_<something> (log_metric) is a training entry: every one was
# filed as an evaluation, and the board's history put loss and reward under eval. A metric named step or kind keeps
# the line's own.
def test_a_training_log_with_an_eval_named_metric_is_a_training_entry(tmp_path):
    trainer = make_trainer(tmp_path / "output")
    callback = RolloutLoggerCallback(trainer, enabled=True, save_dir=str(tmp_path / "root"), exp_name="kinds")
    callback.on_train_begin(trainer.args, trainer.state, trainer.control)
    trainer.state.global_step = 3
    callback.on_log(trainer.args, trainer.state, trainer.control, logs={"loss": 0.5, "eval_acc_custom": 1.0, "step": 99})
    callback.on_log(trainer.args, trainer.state, trainer.control, logs={"eval_loss": 0.4, "eval_runtime": 1.0, "epoch": 1.0})
    callback.on_train_end(trainer.args, trainer.state, trainer.control)
    [metrics] = callback.run_dir.glob("rollout_metrics_*.jsonl")
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [(line["kind"], line["step"]) for line in lines] == [("train", 3), ("eval", 3)] and lines[0]["step (logged)"] == 99


# A wrapper of the model's _get_logits_processor that takes (*args, **kwargs) (a profiler's, a tracer's, or a second
# logger's: the callback added twice), put before or after the callback's: the constructor refused the first, and the
# second raised KeyError('generation_config') inside generate, stopping the training. Both callbacks now record.
@pytest.mark.parametrize("wrapped", ["before", "after", "second callback"])
def test_a_logits_processor_wrapper_neither_stops_the_training_nor_the_recording(tmp_path, monkeypatch, wrapped):
    trainer = make_trainer(tmp_path / "output", max_steps=1)
    model = rollout_logger.callback._generating_model(trainer)

    def wrap():
        inner = model._get_logits_processor
        model._get_logits_processor = lambda *args, **kwargs: inner(*args, **kwargs)

    if wrapped == "before":
        wrap()
    callbacks = [RolloutLoggerCallback(trainer, enabled=True, save_dir=str(tmp_path / "root"), exp_name=name) for name in (["a", "b"] if wrapped == "second callback" else ["a"])]
    for callback in callbacks:
        trainer.add_callback(callback)
    if wrapped == "after":
        wrap()
    trainer.train()
    logged = [[record["sampler_logprobs"] for records in read_records(callback.run_dir).values() for record in records] for callback in callbacks]
    assert all(len(values) == 8 and all(values) for values in logged) and all(values == logged[0] for values in logged)
