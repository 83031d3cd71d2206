"""Which tokens drove each update, on real (tiny, CPU) GRPOTrainer runs: each line's `loss_passes` (the policy ratio,
PPO's clip, the entropy mask and the update weight -∂loss/∂logp of every token at every loss pass).

The clip fractions the board recomputes from the lines (`Run.update_by_step`) equal TRL's logged `clip_ratio/*`, step
by step; the update weights equal the gradient of TRL's loss written out by hand from the line's own values (the
advantage, the ratio, the clip and entropy flags, the reference log-probs) for two loss types."""

import json
import math

import numpy as np
import pytest

import rl_board
from rollout_logger import RolloutLoggerCallback
from rollout_logger.metadata import LOSS_META_KEY
from tests.support import SAMPLES
from tests.support.logger_runs import make_trainer, read_records

CLIP_METRICS = ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean")
# Two passes over each generation batch, at a learning rate and a clip range that make the second pass clip tokens.
TOKEN_LEVEL = dict(loss_type="dapo", num_iterations=2, epsilon=0.002, top_entropy_quantile=0.5, max_steps=6)
SEQUENCE_LEVEL = dict(loss_type="grpo", importance_sampling_level="sequence", num_iterations=2, epsilon=0.002, beta=0.0, max_steps=6)
BATCH = 8  # per_device_train_batch_size of tests.support.logger_runs.grpo_config


def logged_run(tmp_path, **overrides) -> dict:
    trainer = make_trainer(tmp_path, **overrides)
    callback = RolloutLoggerCallback(trainer, enabled=True)
    trainer.add_callback(callback)
    trainer.train()
    [records] = read_records(callback.run_dir).values()
    [meta_file] = callback.run_dir.glob("rollout_meta_*.json")
    [metrics_file] = callback.run_dir.glob("rollout_metrics_*.jsonl")
    metrics = [json.loads(line) for line in metrics_file.read_text().splitlines()]
    return dict(
        run_dir=callback.run_dir, records=records, meta=json.loads(meta_file.read_text()),
        metrics={entry["step"]: entry for entry in metrics if entry["kind"] == "train" and "clip_ratio/low_mean" in entry},
    )


@pytest.fixture(scope="module")
def token_level(tmp_path_factory):
    return logged_run(tmp_path_factory.mktemp("token_level"), **TOKEN_LEVEL)


@pytest.fixture(scope="module")
def sequence_level(tmp_path_factory):
    return logged_run(tmp_path_factory.mktemp("sequence_level"), **SEQUENCE_LEVEL)


@pytest.mark.parametrize("run_name", ["token_level", "sequence_level"])
def test_board_clip_fractions_are_trls_logged_ones(run_name, request):
    run = request.getfixturevalue(run_name)
    by_step = rl_board.open_run(run["run_dir"]).update_by_step().set_index("step")
    assert sorted(by_step.index) == sorted(run["metrics"]) == list(range(1, 7))
    for step, logged in run["metrics"].items():
        for name in CLIP_METRICS:
            assert by_step.loc[step, name] == pytest.approx(logged[name], abs=1e-6), (step, name)
    assert by_step["clip_ratio/region_mean"].max() > 0.05  # the second passes clip: the comparison means something
    assert (by_step["clip_ratio/low_mean"] > 0).any() and (by_step["clip_ratio/high_mean"] > 0).any()


def test_each_line_has_a_pass_per_iteration(token_level):
    assert token_level["meta"][LOSS_META_KEY] == {
        "epsilon_low": 0.002, "epsilon_high": 0.002, "delta": None, "importance_sampling_level": "token", "top_entropy_quantile": 0.5,
    }
    for record in token_level["records"]:
        first, second = record["loss_passes"]
        assert (first["step"], second["step"]) == (record["step"], record["step"] + 1)  # steps_per_generation = 1
        assert first["micro_batch"] == record["micro_batch"] == second["micro_batch"] == 0
        for loss_pass in (first, second):
            assert {len(loss_pass[key]) for key in ("policy_ratio", "clipped", "entropy_mask", "update_weight")} == {len(record["logprobs"])}
            assert set(loss_pass["entropy_mask"]) <= {0, 1} and set(loss_pass["clipped"]) <= {-1, 0, 1}
        # old log-probs are computed at generation (num_iterations > 1): the first pass runs at the same weights
        assert first["policy_ratio"] == pytest.approx([1.0] * len(record["logprobs"]), abs=1e-5)
        assert not any(first["clipped"])
        # a token clipped low had a ratio below 1 - ε and a negative advantage; high, above 1 + ε and a positive one
        for ratio, clipped in zip(second["policy_ratio"], second["clipped"]):
            expected = -1 if ratio < 1 - 0.002 and record["advantage"] < 0 else 1 if ratio > 1 + 0.002 and record["advantage"] > 0 else 0
            assert clipped == expected


def test_token_level_update_weights_are_the_loss_gradient(token_level):
    """DAPO: loss = Σ_tokens per_token_loss / N over a micro-batch, N the generation batch's tokens (one rank, one
    accumulation step per generation); per_token_loss = -min(r A, clip(r) A) · entropy mask + β k3(ref, logp) (· r with TRL's
    bias-corrected KL). So -∂loss/∂logp = (r A [not clipped] · mask - β ∂(k3 [· r])/∂logp) / N, logp the pass's: the
    line's old log-probs plus log r."""
    records = token_level["records"]
    tokens_of_step = {}
    for record in records:
        tokens_of_step[record["step"]] = tokens_of_step.get(record["step"], 0) + len(record["logprobs"])
    beta = 0.04
    # TRL 1.16 weighs the KL term by the ratio too (`use_bias_correction_kl`, on by default): β k3 · r
    bias_correction = token_level["meta"]["trainer_config"].get("use_bias_correction_kl", False)
    checked = 0
    for record in records:
        old, ref = np.array(record["logprobs"]), np.array(record["ref_logprobs"])
        for loss_pass in record["loss_passes"]:
            ratio = np.array(loss_pass["policy_ratio"])
            logp = old + np.log(ratio)
            unclipped = 1 - np.abs(loss_pass["clipped"])
            policy = ratio * record["advantage"] * unclipped * np.array(loss_pass["entropy_mask"])
            kl_gradient = 1 - np.exp(ref - logp)  # ∂k3/∂logp, k3 = exp(ref - logp) - (ref - logp) - 1
            if bias_correction:
                kl_gradient = ratio * (kl_gradient + np.exp(ref - logp) - (ref - logp) - 1)
            expected = (policy - beta * kl_gradient) / tokens_of_step[record["step"]]
            np.testing.assert_allclose(loss_pass["update_weight"], expected, rtol=2e-4, atol=1e-8)
            checked += 1
    assert checked == 2 * len(records) == 2 * 3 * BATCH  # 6 steps: 3 generation batches, each trained twice


def test_sequence_level_update_weights_are_the_loss_gradient(sequence_level):
    """GRPO at sequence level, β = 0: the sequence's ratio r = exp(mean log ratio) on each token, loss = the micro-batch's
    mean over sequences of -min(r A, clip(r) A); so -∂loss/∂logp = r A [not clipped] / (tokens of the sequence · B)."""
    for record in sequence_level["records"]:
        length = len(record["logprobs"])
        for loss_pass in record["loss_passes"]:
            ratio = np.array(loss_pass["policy_ratio"])
            assert np.ptp(ratio) == 0 and len(set(loss_pass["clipped"])) == 1  # one ratio and one clip per sequence
            expected = ratio * record["advantage"] * (1 - np.abs(loss_pass["clipped"])) / (length * BATCH)
            np.testing.assert_allclose(loss_pass["update_weight"], expected, rtol=2e-4, atol=1e-9)


def test_update_shares_are_each_samples_share_of_its_step(token_level):
    run = rl_board.open_run(token_level["run_dir"])
    shares = run.update_shares()
    by_pass_step = {}
    for record in token_level["records"]:
        for loss_pass in record["loss_passes"]:
            by_pass_step.setdefault(loss_pass["step"], []).append(sum(abs(value) for value in loss_pass["update_weight"]))
    for step, table in shares.groupby("step"):
        assert table["share"].sum() == pytest.approx(1.0)
        assert sorted(table["abs_weight"], reverse=True) == pytest.approx(sorted(by_pass_step[step], reverse=True))
    top = shares.iloc[0]
    tokens = run.tokens(int(top["generation_step"]), int(top["sample"]))
    assert {"policy_ratio", "clipped", "update_weight", "entropy_kept"} <= set(tokens.columns)
    assert not math.isnan(tokens["update_weight"].iloc[0])


def test_an_on_policy_run_has_no_ratio_and_no_clip(tmp_path):
    run = logged_run(tmp_path / "on", max_steps=2)
    for record in run["records"]:
        [loss_pass] = record["loss_passes"]
        assert "policy_ratio" not in loss_pass and "entropy_mask" not in loss_pass  # ratio 1 by construction; no mask
        assert not any(loss_pass["clipped"]) and len(loss_pass["update_weight"]) == len(record["logprobs"])


def test_bundled_update_example_clips_as_trl_logged():
    """rollout_samples/grpo_tiny_update_example (docs/bundled-runs.md): every line trained twice, and the board's
    clip fractions equal the ones TRL logged at each of its 60 steps."""
    run_dir = SAMPLES / "grpo_tiny_update_example"
    assert sum(path.stat().st_size for path in run_dir.iterdir()) < 5_000_000
    [records] = read_records(run_dir).values()
    assert len(records) == 30 * 16 and all(len(record["loss_passes"]) == 2 for record in records)
    [metrics_file] = run_dir.glob("rollout_metrics_*.jsonl")
    logged = {entry["step"]: entry for entry in map(json.loads, metrics_file.read_text().splitlines()) if entry["kind"] == "train" and "clip_ratio/region_mean" in entry}
    by_step = rl_board.open_run(run_dir).update_by_step().set_index("step")
    assert sorted(by_step.index) == sorted(logged) == list(range(1, 61))
    for step, entry in logged.items():
        for name in CLIP_METRICS:
            assert by_step.loc[step, name] == pytest.approx(entry[name], abs=1e-6)
    assert by_step["clip_ratio/region_mean"].max() > 0.3


def test_loss_pass_values_off_lists_the_passes_only(tmp_path):
    trainer = make_trainer(tmp_path, max_steps=2, num_iterations=2)
    callback = RolloutLoggerCallback(trainer, enabled=True, loss_pass_values=False)
    trainer.add_callback(callback)
    trainer.train()
    [records] = read_records(callback.run_dir).values()
    assert [loss_pass for record in records for loss_pass in record["loss_passes"]] == [{"step": 1, "micro_batch": 0}, {"step": 2, "micro_batch": 0}] * len(records)
