"""The sampler-vs-trainer mismatch per token on real (tiny, CPU) GRPOTrainer runs: the sampler's log-probs
(`sampler_logprobs`), TRL's importance-sampling ratio (`is_ratio`), and the metadata that names both.

With transformers' `generate`, the logger records the log-prob of each sampled token under the distribution it was
sampled from; the tests compare them with `generate`'s own scores (`output_scores`) of the same calls, in bfloat16,
where the sampler's and the trainer's log-probs really differ. Where `generate` truncates (top-k, top-p, min-p,
typical), the log of the mass the truncation kept (`sampler_kept_logmass`) is compared with its recomputation from the
same calls' raw logits (`output_logits`) and processed scores. vLLM is not installable here: its path is run by TRL's
own code, on a trainer whose generation returns what vLLM returns (`VLLMLikeGRPOTrainer`).
"""

import contextlib
import dataclasses
import json
import logging
import math
import re
from collections import Counter, defaultdict

import numpy as np
import pytest
import trl
from trl import GRPOConfig, GRPOTrainer

import rollout_logger.callback
from examples import train_grpo_tiny_tools
from rollout_logger import RolloutLoggerCallback
from rollout_logger.metadata import IMPORTANCE_SAMPLING_META_KEY, SAMPLER_META_KEY
from rollout_logger.sampler import truncation_start
from tests.support import SAMPLES
from tests.support.logger_runs import GenerateScores, make_trainer, max_difference, read_records, sample_key
from tests.support.logger_tool_runs import why_trl_runs_no_tools

CONFIG_FIELDS = {field.name for field in dataclasses.fields(GRPOConfig)}
IMPORTANCE_SAMPLING_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
# Bounds tight enough that bfloat16's mismatch puts some of these runs' ratios outside them, and some inside. TRL 0.29
# bounds the ratio from above only (`vllm_importance_sampling_cap`).
CLIP_MIN, CLIP_MAX = 0.998, 1.002
if "vllm_importance_sampling_clip_min" in CONFIG_FIELDS:
    CLIP_SETTINGS = dict(vllm_importance_sampling_clip_min=CLIP_MIN, vllm_importance_sampling_clip_max=CLIP_MAX)
else:
    CLIP_SETTINGS = dict(vllm_importance_sampling_cap=CLIP_MAX)
RATIO_METRICS = ("min", "mean", "max")
BUNDLED = SAMPLES / "grpo_tiny_mismatch_example"


@contextlib.contextmanager
def logger_warnings():
    """The logger's warnings while the block runs, as their messages."""
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logger = logging.getLogger("rollout_logger")
    logger.addHandler(handler)
    messages = []
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        messages.extend(record.getMessage() for record in records)


def logged_run(trainer, **options) -> dict:
    """Trains with the logger, and `GenerateScores` on the model (the trainer's own where it has one); the run's lines,
    metadata, metrics file and the logger's warnings."""
    scores = getattr(trainer, "generate_scores", None) or GenerateScores(trainer)
    with logger_warnings() as warnings:
        callback = RolloutLoggerCallback(trainer, enabled=True, **options)
        trainer.add_callback(callback)
        trainer.train()
    [records] = read_records(callback.run_dir).values()
    [meta_file] = callback.run_dir.glob("rollout_meta_*.json")
    [metrics_file] = callback.run_dir.glob("rollout_metrics_*.jsonl")
    return dict(
        trainer=trainer,
        scores=scores,
        records=records,
        meta=json.loads(meta_file.read_text()),
        metrics=[json.loads(line) for line in metrics_file.read_text().splitlines()],
        warnings=warnings,
    )


def assert_sampler_logprobs_are_generates(run):
    """Each line's `sampler_logprobs` are `generate`'s own scores of that sample, gathered at its sampled tokens; every
    sample `generate` made in training has its line."""
    expected = defaultdict(list)
    for step, samples in run["scores"].samples.items():
        for key, logprobs in samples:
            expected[step, key].append(logprobs)
    assert sum(map(len, expected.values())) == len(run["records"])
    for record in run["records"]:
        candidates = expected[record["step"], sample_key(record)]  # equal samples of a step: any one of them
        close = (logprobs for logprobs in candidates if max_difference(logprobs, record["sampler_logprobs"]) < 1e-6)
        match = next(close, None)
        assert match is not None, record
        candidates.remove(match)


def assert_kept_logmass_is_generates(run, tolerance: float = 2e-6):
    """Each line's `sampler_kept_logmass` is the log of the mass `generate`'s truncation kept at each of its tokens'
    positions, recomputed from the same call's raw logits and processed scores (`GenerateScores.truncation`); and the
    sampler's log-prob plus it is the token's log-prob under the untruncated, temperature-scaled distribution."""
    expected = defaultdict(list)
    for step, samples in run["scores"].truncation.items():
        for key, kept, untruncated in samples:
            expected[step, key].append((kept, untruncated))
    for record in run["records"]:
        kept, logprobs = record["sampler_kept_logmass"], record["sampler_logprobs"]
        assert len(kept) == len(logprobs) == len(record["response_tokens"])
        untruncated = np.add(logprobs, kept).tolist()
        candidates = expected[record["step"], sample_key(record)]
        close = (
            candidate
            for candidate in candidates
            if max_difference(candidate[0], kept) < tolerance and max_difference(candidate[1], untruncated) < tolerance
        )
        match = next(close, None)
        assert match is not None, (record, candidates)
        candidates.remove(match)


def differences(records) -> np.ndarray:
    """Every token's trainer log-prob minus its sampler log-prob."""
    return np.concatenate([np.subtract(record["logprobs"], record["sampler_logprobs"]) for record in records])


# ---------------------------------------------------------------- transformers' generate


@pytest.fixture(scope="module")
def bf16_run(tmp_path_factory):
    """Three steps in bfloat16 at TRL's default sampling (no top-k, no top-p), evaluating once in between."""
    trainer = make_trainer(
        tmp_path_factory.mktemp("bf16"),
        bf16=True,
        eval_prompts=2,
        eval_strategy="steps",
        eval_steps=2,
        per_device_eval_batch_size=8,
    )
    return logged_run(trainer)


@pytest.fixture(scope="module")
def truncated_run(tmp_path_factory):
    """Two steps in bfloat16 sampling at temperature 0.8 from the 8 likeliest tokens, and of them a top-p of 0.9."""
    path = tmp_path_factory.mktemp("truncated")
    return logged_run(make_trainer(path, bf16=True, max_steps=2, temperature=0.8, top_k=8, top_p=0.9))


def test_bf16_sampler_logprobs_are_generates_and_differ_from_the_trainers(bf16_run):
    records = bf16_run["records"]
    assert sorted({record["step"] for record in records}) == [1, 2, 3] and len(records) == 24
    assert all(len(record["sampler_logprobs"]) == len(record["response_tokens"]) for record in records)
    assert_sampler_logprobs_are_generates(bf16_run)
    # bfloat16's generate (a token at a time, with a cache) and TRL's forward pass (the whole sequence) differ: a real
    # mismatch, small against a log-prob.
    mismatch = np.abs(differences(records))
    assert 1e-3 < mismatch.max() < 0.1
    assert not bf16_run["warnings"]


def test_the_recorder_is_on_the_model_only_while_a_training_batch_is_generated(bf16_run):
    calls = bf16_run["scores"].calls  # (training, the model had a `_get_logits_processor` of its own) per call
    assert calls.count((True, True)) == 3 and (False, False) in calls and set(calls) == {(True, True), (False, False)}
    assert "_get_logits_processor" not in vars(bf16_run["trainer"].model)  # the class's method again


def test_top_k_and_top_p_sampler_logprobs_are_of_the_truncated_distribution(truncated_run):
    records = truncated_run["records"]
    assert_sampler_logprobs_are_generates(truncated_run)
    # Truncation renormalises what it keeps: each sampled token is likelier to the sampler than in the trainer's full
    # distribution, by far more than bfloat16's noise.
    difference = differences(records)
    assert difference.max() < 0.05 and np.median(difference) < -0.05
    assert truncated_run["meta"][SAMPLER_META_KEY] == {
        "engine": "transformers",
        "temperature": 0.8,
        "top_k": 8,
        "top_p": 0.9,
        "min_p": None,
    }
    assert IMPORTANCE_SAMPLING_META_KEY not in truncated_run["meta"]
    assert not any("is_ratio" in record for record in records)


def test_the_kept_mass_of_top_k_and_top_p_is_generates(truncated_run):
    records = truncated_run["records"]
    assert_kept_logmass_is_generates(truncated_run)
    kept = np.concatenate([record["sampler_kept_logmass"] for record in records])
    assert kept.max() <= 0 and kept.min() < -0.05  # top-k 8 and top-p 0.9 cut real mass
    # Δ without the renormalisation is bfloat16's drift alone: far smaller than Δ.
    drift = differences(records) - kept
    assert np.abs(drift).mean() < 0.2 * np.abs(differences(records)).mean() and np.abs(drift).max() < 0.1


@pytest.fixture(scope="module")
def stacked_truncation_run(tmp_path_factory):
    """One step sampling at temperature 0.7 with min-p and typical sampling, the logits normalised after them
    (`renormalize_logits`: a processor after the truncating warpers, whose log-sum-exp is then 0)."""
    trainer = make_trainer(
        tmp_path_factory.mktemp("stacked"),
        max_steps=1,
        beta=0.0,
        temperature=0.7,
        min_p=0.05,
        generation_kwargs={"typical_p": 0.9, "renormalize_logits": True},
    )
    return logged_run(trainer)


def test_the_kept_mass_of_min_p_and_typical_is_generates(stacked_truncation_run):
    records = stacked_truncation_run["records"]
    assert len(records) == 8 and not stacked_truncation_run["warnings"]
    assert_sampler_logprobs_are_generates(stacked_truncation_run)
    assert_kept_logmass_is_generates(stacked_truncation_run)
    assert np.concatenate([record["sampler_kept_logmass"] for record in records]).min() < -0.01


def test_no_truncation_no_kept_mass(bf16_run):
    """TRL's default sampling (no top-k, no top-p) truncates nothing: no `sampler_kept_logmass`, not zeros."""
    assert all("sampler_logprobs" in record for record in bf16_run["records"])
    assert not any("sampler_kept_logmass" in record for record in bf16_run["records"])


def test_the_truncating_warpers_are_found_where_their_kept_mass_can_be_told():
    from transformers.generation import logits_process as lp

    temperature, top_k, top_p = lp.TemperatureLogitsWarper(0.7), lp.TopKLogitsWarper(5), lp.TopPLogitsWarper(0.9)
    penalty, normalisation = lp.RepetitionPenaltyLogitsProcessor(1.2), lp.LogitNormalization()
    assert truncation_start([penalty, temperature, top_k, top_p]) == (2, "")
    assert truncation_start([temperature, top_p, normalisation]) == (1, "")
    assert truncation_start([temperature, normalisation]) == (None, "")
    assert truncation_start([top_k, temperature, top_p]) == (
        None,
        "TemperatureLogitsWarper after `generate`'s first truncating warper",
    )
    finite = lp.TopKLogitsWarper(5, filter_value=-1e4)
    assert truncation_start([temperature, finite]) == (
        None,
        "TopKLogitsWarper sets the tokens it drops to a finite score, not -inf",
    )


def test_option_off_records_nothing(tmp_path):
    run = logged_run(make_trainer(tmp_path, max_steps=1, beta=0.0), sampler_logprobs=False)
    assert len(run["records"]) == 8 and not any("sampler_logprobs" in record for record in run["records"])
    assert run["scores"].calls == [(True, False)]  # nothing put on the model
    assert run["meta"][SAMPLER_META_KEY]["engine"] == "transformers" and not run["warnings"]


def test_greedy_decoding_warns_and_records_none(tmp_path):
    run = logged_run(make_trainer(tmp_path, max_steps=1, beta=0.0, generation_kwargs={"do_sample": False}))
    assert len(run["records"]) == 8 and not any("sampler_logprobs" in record for record in run["records"])
    assert run["warnings"] == [
        "RLLoggingBoard: no sampler_logprobs for a generation batch: 0 sampling `generate` calls for one generation "
        "batch, not 1"
    ]


class TwiceGeneratingGRPOTrainer(GRPOTrainer):
    """Generates each batch twice and keeps the second: which call's log-probs belong to the batch is not for the
    logger to guess."""

    def _generate_single_turn(self, *args, **kwargs):
        super()._generate_single_turn(*args, **kwargs)
        return super()._generate_single_turn(*args, **kwargs)


def test_a_batch_of_several_generate_calls_warns_and_records_none(tmp_path):
    trainer = make_trainer(tmp_path, trainer_class=TwiceGeneratingGRPOTrainer, max_steps=2, beta=0.0)
    run = logged_run(trainer)
    assert len(run["records"]) == 16 and not any("sampler_logprobs" in record for record in run["records"])
    assert run["warnings"] == [
        "RLLoggingBoard: no sampler_logprobs for a generation batch: 2 sampling `generate` calls for one generation "
        "batch, not 1"
    ]


def test_a_tool_run_warns_and_records_none(tmp_path):
    """TRL calls `generate` again after each tool result: no sampler log-probs, one warning. The tool example's model
    without its warm-up is enough: TRL takes its tool path whether or not the model calls the tool."""
    reason = why_trl_runs_no_tools()
    if reason:
        pytest.skip(reason)
    model_dir = train_grpo_tiny_tools.save_warm_model(tmp_path / "model", warmup_steps=0)
    args = train_grpo_tiny_tools.grpo_config(tmp_path, 1, seed=0, beta=0.0, max_completion_length=12)
    run = logged_run(train_grpo_tiny_tools.build_trainer(model_dir, args))
    assert len(run["records"]) == 8 and all("tool_mask" in record for record in run["records"])  # TRL's tool path
    assert not any("sampler_logprobs" in record for record in run["records"])
    assert run["warnings"] == [
        "RLLoggingBoard: no sampler_logprobs are recorded with tool calls (TRL calls `generate` again after each tool "
        "result)"
    ]


@pytest.mark.skipif(
    "use_transformers_continuous_batching" not in CONFIG_FIELDS,
    reason=f"TRL {trl.__version__} has no use_transformers_continuous_batching",
)
def test_continuous_batching_warns_that_it_records_none(tmp_path):
    """Checked at construction: a continuous-batching run takes a minute on CPU."""
    trainer = make_trainer(tmp_path, use_transformers_continuous_batching=True)
    with logger_warnings() as warnings:
        RolloutLoggerCallback(trainer, enabled=True)
        RolloutLoggerCallback(trainer, enabled=True, sampler_logprobs=False)
    assert warnings == [
        "RLLoggingBoard: no sampler_logprobs are recorded with transformers' continuous batching (each step samples a "
        "changing mix of requests)"
    ]


# ---------------------------------------------------------------- vLLM, as TRL's code sees it


class VLLMLikeGRPOTrainer(GRPOTrainer):
    """
    A GRPOTrainer whose generation gives TRL what its vLLM branch gives it: the completions, and each sampled token's
    log-prob under the distribution it was sampled from (what vLLM returns with `processed_logprobs`), here
    `generate`'s own, from its scores (`GenerateScores`). It is built without vLLM (TRL would start an engine), then
    says `use_vllm`: from there on TRL's own code does what it does with vLLM, `old_per_token_logps` at generation,
    the importance-sampling ratio, its `sampling/*` metrics and the loss's correction. Of the places TRL reads
    `use_vllm`, only the vLLM branch of `_generate_single_turn` needs vLLM in these runs (weight syncing is in it;
    tool calls and rollout functions are not used): generation takes the transformers branch instead.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.use_vllm = True
        self.generate_scores = GenerateScores(self)

    def _generate_single_turn(self, *args, **kwargs):
        self.use_vllm = False
        try:
            result = super()._generate_single_turn(*args, **kwargs)
        finally:
            self.use_vllm = True
        if len(result) == 2:  # (completion ids, vLLM's log-probs)
            completion_ids, _ = result
            return completion_ids, self.sampled_logprobs(completion_ids)
        prompt_ids, completion_ids, _, extra_fields = result  # TRL 0.29 also returns the prompts and extra fields
        return prompt_ids, completion_ids, self.sampled_logprobs(completion_ids), extra_fields

    def sampled_logprobs(self, completion_ids: list[list[int]]) -> list[list[float]]:
        return [row[: len(ids)] for ids, row in zip(completion_ids, self.generate_scores.last.tolist())]


@pytest.fixture(scope="module", params=IMPORTANCE_SAMPLING_MODES)
def vllm_run(request, tmp_path_factory):
    """Three steps in bfloat16 with TRL's vLLM importance-sampling correction in one of its modes."""
    trainer = make_trainer(
        tmp_path_factory.mktemp(request.param),
        trainer_class=VLLMLikeGRPOTrainer,
        bf16=True,
        vllm_importance_sampling_correction=True,
        vllm_importance_sampling_mode=request.param,
        **CLIP_SETTINGS,
    )
    return logged_run(trainer)


def unbounded_ratios(record: dict, mode: str) -> np.ndarray:
    """TRL's importance-sampling ratio before its bounds, from a line's log-probs: exp(trainer - sampler) per token,
    or in the sequence modes exp of the sample's sum, at each of its tokens."""
    difference = np.subtract(record["logprobs"], record["sampler_logprobs"])
    return np.exp(difference) if mode.startswith("token") else np.full(len(difference), math.exp(difference.sum()))


def trl_ratios(record: dict, settings: dict) -> np.ndarray:
    """TRL's importance-sampling ratio of a line's tokens, recomputed: truncated to its bounds, or 0 outside them."""
    ratios = unbounded_ratios(record, settings["mode"])
    low = -math.inf if settings["clip_min"] is None else settings["clip_min"]
    high = math.inf if settings["clip_max"] is None else settings["clip_max"]
    if settings["mode"].endswith("truncate"):
        return np.clip(ratios, low, high)
    return np.where((ratios < low) | (ratios > high), 0.0, ratios)


def test_vllm_sampler_logprobs_and_metadata(vllm_run):
    records, meta, mode = vllm_run["records"], vllm_run["meta"], vllm_run["trainer"].vllm_importance_sampling_mode
    assert len(records) == 24 and all("logprobs" in record for record in records)
    assert_sampler_logprobs_are_generates(vllm_run)  # vLLM's, as TRL kept them
    assert 1e-3 < np.abs(differences(records)).max() < 0.1
    assert meta[SAMPLER_META_KEY] == {"engine": "vllm", "temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": None}
    clip_min = CLIP_MIN if "vllm_importance_sampling_clip_min" in CLIP_SETTINGS else None
    assert meta[IMPORTANCE_SAMPLING_META_KEY] == {"mode": mode, "clip_min": clip_min, "clip_max": CLIP_MAX}
    assert not vllm_run["warnings"]


def test_vllm_lines_have_no_kept_mass(vllm_run):
    """vLLM returns the sampled token's log-prob alone (TRL asks for `processed_logprobs`: after top-k and top-p), not
    the mass a truncation kept: no `sampler_kept_logmass`."""
    assert not any("sampler_kept_logmass" in record for record in vllm_run["records"])


def test_vllm_is_ratio_is_trls_recomputed_from_the_lines(vllm_run):
    records, settings = vllm_run["records"], vllm_run["meta"][IMPORTANCE_SAMPLING_META_KEY]
    for record in records:
        assert len(record["is_ratio"]) == len(record["response_tokens"])
        assert record["is_ratio"] == pytest.approx(trl_ratios(record, settings).tolist(), rel=1e-6, abs=1e-9)
    # The bounds did something here, and not everything: some ratios were outside them, some inside.
    ratios = np.concatenate([unbounded_ratios(record, settings["mode"]) for record in records])
    outside = (ratios > CLIP_MAX) | (ratios < (settings["clip_min"] or -math.inf))
    assert outside.any() and not outside.all()


def test_vllm_trls_sampling_metrics_are_the_lines_recomputed(vllm_run):
    """TRL's logged `sampling/sampling_logp_difference/{mean,max}` over the tokens of each step, and
    `sampling/importance_sampling_ratio/{min,mean,max}` over its tokens (token modes) or its samples (sequence modes),
    from the lines' log-probs."""
    settings = vllm_run["meta"][IMPORTANCE_SAMPLING_META_KEY]
    logged = {line["step"]: line for line in vllm_run["metrics"] if "sampling/sampling_logp_difference/mean" in line}
    steps = defaultdict(list)
    for record in vllm_run["records"]:
        steps[record["step"]].append(record)
    assert sorted(steps) == sorted(logged) == [1, 2, 3]
    for step, records in steps.items():
        difference = np.abs(differences(records))
        ratios = [trl_ratios(record, settings) for record in records]
        ratios = np.concatenate(ratios) if settings["mode"].startswith("token") else np.array([r[0] for r in ratios])
        expected = {
            "sampling/sampling_logp_difference/mean": difference.mean(),
            "sampling/sampling_logp_difference/max": difference.max(),
            **{f"sampling/importance_sampling_ratio/{name}": getattr(ratios, name)() for name in RATIO_METRICS},
        }
        assert {key: logged[step][key] for key in expected} == pytest.approx(expected, rel=1e-6, abs=1e-9)


def test_vllm_option_off_keeps_trls_ratio(tmp_path):
    trainer = make_trainer(tmp_path, trainer_class=VLLMLikeGRPOTrainer, max_steps=1, beta=0.0)
    records = logged_run(trainer, sampler_logprobs=False)["records"]
    assert all("is_ratio" in record and "sampler_logprobs" not in record for record in records)


# ---------------------------------------------------------------- metadata and TRL drift


def meta_of(trainer, **options) -> dict:
    """The metadata a logging callback writes for the trainer (set up, then closed, without training)."""
    callback = RolloutLoggerCallback(trainer, enabled=True, **options)
    callback.on_train_begin(trainer.args, trainer.state, trainer.control)
    callback.on_train_end(trainer.args, trainer.state, trainer.control)
    [path] = callback.run_dir.glob("rollout_meta_*.json")
    return json.loads(path.read_text())


def test_generation_kwargs_override_the_sampler_settings(tmp_path):
    trainer = make_trainer(tmp_path, top_k=5, generation_kwargs={"top_k": 7, "min_p": 0.05})
    meta = meta_of(trainer)
    assert meta[SAMPLER_META_KEY] == {
        "engine": "transformers",
        "temperature": 1.0,
        "top_k": 7,
        "top_p": 1.0,
        "min_p": 0.05,
    }
    assert (trainer.generation_config.top_k, trainer.generation_config.min_p) == (7, 0.05)  # what generate gets


def test_no_importance_sampling_without_trls_correction(tmp_path):
    trainer = make_trainer(tmp_path, vllm_importance_sampling_correction=False)
    trainer.use_vllm = True
    meta = meta_of(trainer)
    assert meta[SAMPLER_META_KEY]["engine"] == "vllm" and IMPORTANCE_SAMPLING_META_KEY not in meta


@pytest.fixture(scope="module")
def unlogged_trainer(tmp_path_factory):
    return make_trainer(tmp_path_factory.mktemp("drift"))


@pytest.mark.parametrize(
    "missing",
    [
        "top_k",
        "top_p",
        "min_p",
        "use_vllm",
        "tools",
        "rollout_func",
        "vllm_importance_sampling_correction",
        "vllm_importance_sampling_mode",
    ],
)
def test_a_trainer_without_a_sampling_field_fails_at_construction(missing, unlogged_trainer, monkeypatch):
    monkeypatch.delattr(unlogged_trainer, missing)
    with pytest.raises(RuntimeError, match=rf"has no `{missing}`"):
        RolloutLoggerCallback(unlogged_trainer, enabled=True)


@pytest.mark.parametrize("names", rollout_logger.callback.RENAMED_FIELDS)
def test_a_renamed_field_needs_one_of_its_names(names, unlogged_trainer, monkeypatch):
    for name in names:
        if name in vars(unlogged_trainer):
            monkeypatch.delattr(unlogged_trainer, name)
    with pytest.raises(RuntimeError, match=rf"has no `{' or '.join(names)}`"):
        RolloutLoggerCallback(unlogged_trainer, enabled=True)


def test_a_generate_that_builds_its_processors_otherwise_fails_at_construction(unlogged_trainer, monkeypatch):
    # the class's method (a transformers that renamed its parameter); an instance's own wrapper passes arguments on
    monkeypatch.setattr(type(unlogged_trainer.model), "_get_logits_processor", lambda self, config, **kwargs: [])
    with pytest.raises(RuntimeError, match=r"no `_get_logits_processor` taking `generation_config`.*=False"):
        RolloutLoggerCallback(unlogged_trainer, enabled=True)
    RolloutLoggerCallback(unlogged_trainer, enabled=True, sampler_logprobs=False)


# ---------------------------------------------------------------- the bundled run


@pytest.mark.skipif(not BUNDLED.is_dir(), reason="no bundled mismatch run")
def test_bundled_mismatch_run():
    """examples/train_grpo_tiny.py's 50 steps with --bf16 --top-p 0.9 (docs/bundled-runs.md): the sampler's log-prob of every token,
    above the trainer's at each one, as top-p makes it."""
    names = sorted(path.name for path in BUNDLED.iterdir())
    [data] = [name for name in names if name.startswith("rollout_data_")]
    launch_id = re.fullmatch(r"rollout_data_rank_0_(\d{8}T\d{6}Z)\.jsonl", data).group(1)
    assert names == [data, f"rollout_meta_{launch_id}.json", f"rollout_metrics_{launch_id}.jsonl"]
    assert sum(path.stat().st_size for path in BUNDLED.iterdir()) < 5_000_000
    meta = json.loads((BUNDLED / f"rollout_meta_{launch_id}.json").read_text())
    sampler = {"engine": "transformers", "temperature": 1.0, "top_k": 0, "top_p": 0.9, "min_p": None}
    assert meta[SAMPLER_META_KEY] == sampler and IMPORTANCE_SAMPLING_META_KEY not in meta
    assert meta["trainer_config"]["bf16"] is True
    records = [json.loads(line) for line in (BUNDLED / data).read_text().splitlines()]
    assert Counter(record["step"] for record in records) == {step: 16 for step in range(1, 51)}
    assert all(len(record["sampler_logprobs"]) == len(record["response_tokens"]) for record in records)
    assert differences(records).max() < 0  # the trainer's log-prob below the sampler's, at every token
    assert any(0.0 in record["sampler_logprobs"] for record in records)  # a single token left by top-p
    # The kept mass of every token: top-p's renormalisation is most of Δ, bfloat16's drift the rest.
    assert all(len(record["sampler_kept_logmass"]) == len(record["response_tokens"]) for record in records)
    kept = np.concatenate([record["sampler_kept_logmass"] for record in records])
    assert kept.max() <= 0 and (kept < 0).all()
    delta = differences(records)
    assert -kept.mean() > 0.8 * np.abs(delta).mean() and np.abs(delta - kept).mean() < 0.2 * np.abs(delta).mean()

    import rl_logging_board as board

    run = board.RunStore(str(BUNDLED)).load(10240)
    assert run.problems.empty and len(run.samples) == len(records) and run.meta[SAMPLER_META_KEY] == sampler
