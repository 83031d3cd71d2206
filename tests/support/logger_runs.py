"""Shared set-up for the rollout logger's tests: one tiny warmed-up model per session, GRPO runs, exact re-scoring."""

import atexit
import functools
import json
import math
import shutil
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest
import torch
import trl
from packaging.version import Version
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
from trl import GRPOConfig, GRPOTrainer

from examples.train_grpo_tiny import prompt_dataset, same_digits, save_warm_model, sorted_digits
from rollout_logger import RolloutLoggerCallback


@functools.cache
def tiny_model_dir() -> Path:
    """The example's model and tokenizer after a short warm-up, built once per session (any test module may ask)."""
    directory = Path(tempfile.mkdtemp(prefix="rollout_logger_model_"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return save_warm_model(directory / "model", warmup_steps=60, seed=0)


def grpo_config(output_dir, **overrides) -> GRPOConfig:
    settings = dict(
        output_dir=str(output_dir),
        use_cpu=True,
        bf16=False,
        seed=0,
        max_steps=3,
        per_device_train_batch_size=8,  # 2 prompts x 4 completions per micro-batch
        num_generations=4,
        max_completion_length=10,
        beta=0.04,
        learning_rate=1e-3,  # large enough that every step changes the weights
        gradient_checkpointing=False,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
    )
    settings.update(overrides)
    return GRPOConfig(**settings)


def make_trainer(
    output_dir,
    reward_funcs=(sorted_digits, same_digits),
    conversational=False,
    model_dir=None,
    eval_prompts=None,
    trainer_class=GRPOTrainer,
    train_dataset=None,
    **overrides,
) -> GRPOTrainer:
    """A GRPOTrainer (or `trainer_class`) on the example's task (256 prompts, or `train_dataset`); with
    `eval_prompts`, that many other prompts to evaluate on."""
    args = grpo_config(output_dir, **overrides)
    model_dir = model_dir or tiny_model_dir()
    return trainer_class(
        model=str(model_dir),
        reward_funcs=list(reward_funcs),
        args=args,
        train_dataset=train_dataset or prompt_dataset(256, seed=0, conversational=conversational),
        eval_dataset=eval_prompts and prompt_dataset(eval_prompts, seed=1, conversational=conversational),
        processing_class=PreTrainedTokenizerFast.from_pretrained(model_dir),
    )


class GenerationRecorder:
    """Wraps the trainer instance's generation to keep, per step, the policy's weights when that step's samples were
    generated and the number of real tokens (completion mask) of each completion; and its loss to keep, per optimizer
    step, the samples trained in it as `sample_key`s."""

    def __init__(self, trainer):
        self.weights, self.completion_lengths, self.trained = {}, defaultdict(list), defaultdict(list)
        generate, compute_loss = trainer._generate_and_score_completions, trainer.compute_loss
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)  # also a VLM's processor

        def generate_and_record(*args, **kwargs):
            step = trainer.state.global_step + 1
            if trainer.model.training and step not in self.weights:
                self.weights[step] = {
                    name: value.detach().clone() for name, value in trainer.model.state_dict().items()
                }
            output = generate(*args, **kwargs)
            if trainer.model.training:
                self.completion_lengths[step] += output["completion_mask"].sum(dim=1).tolist()
            return output

        def compute_loss_and_record(model, inputs, *args, **kwargs):
            prompts = [ids[mask.bool()].tolist() for ids, mask in zip(inputs["prompt_ids"], inputs["prompt_mask"])]
            completions = zip(inputs["completion_ids"], inputs["completion_mask"])
            self.trained[trainer.state.global_step + 1] += [
                (
                    tokenizer.decode(prompt, skip_special_tokens=False, clean_up_tokenization_spaces=False),
                    tuple(tokenizer.convert_ids_to_tokens(ids[mask.bool()].tolist())),
                )
                for prompt, (ids, mask) in zip(prompts, completions)
            ]
            return compute_loss(model, inputs, *args, **kwargs)

        trainer._generate_and_score_completions = generate_and_record
        trainer.compute_loss = compute_loss_and_record


class GenerateScores:
    """Wraps the trainer's model's `generate` (on the instance) to ask it for the scores it sampled each token from
    (`output_scores`: after temperature, top-k and top-p), and keeps the log-probs of the sampled tokens under them:
    `generate`'s own account of the sampler's log-probs, independent of the logger's. Per step, each training
    generation's samples as `(sample_key, log-probs)`; of the last call (training or evaluation), one row per sequence
    (`last`); and, per call, whether the model was training and had a `_get_logits_processor` of its own then (the
    logger's recorder). With the raw logits too (`output_logits`), per step and training sample, `truncation`: the log
    of the mass `generate`'s truncation (top-k, top-p...) kept at each sampled position, recomputed as the
    log-sum-exp of the temperature-scaled log-softmax over the tokens whose processed score is finite, and the sampled
    tokens' log-probs under that untruncated distribution."""

    def __init__(self, trainer):
        self.samples, self.last, self.calls = defaultdict(list), None, []
        self.truncation = defaultdict(list)
        model, tokenizer = trainer.model, trainer.processing_class
        eos_token_ids = set(getattr(trainer, "eos_token_ids", None) or [tokenizer.eos_token_id])  # TRL's, where it has
        generate = model.generate

        def generate_with_scores(*args, **kwargs):
            self.calls.append((model.training, "_get_logits_processor" in vars(model)))
            output = generate(*args, **kwargs, output_scores=True, output_logits=True, return_dict_in_generate=True)
            prompts, prompt_masks = kwargs["input_ids"], kwargs["attention_mask"].bool()
            completions = output.sequences[:, prompts.size(1) :]
            scores = torch.stack(output.scores, dim=1)
            self.last = torch.log_softmax(scores, dim=-1).gather(2, completions[..., None]).squeeze(-1)
            temperature = (kwargs.get("generation_config") or trainer.generation_config).temperature or 1.0
            untruncated = torch.log_softmax(torch.stack(output.logits, dim=1).double() / temperature, dim=-1)
            kept = torch.logsumexp(untruncated.masked_fill(~scores.isfinite(), -torch.inf), dim=-1)
            untruncated = untruncated.gather(2, completions[..., None]).squeeze(-1)
            if model.training:
                rows = zip(
                    prompts, prompt_masks, completions.tolist(), self.last.tolist(), kept.tolist(), untruncated.tolist()
                )
                for prompt, mask, ids, logprobs, kept_logmass, untruncated_logprobs in rows:
                    end = next((index + 1 for index, id_ in enumerate(ids) if id_ in eos_token_ids), len(ids))
                    text = tokenizer.decode(prompt[mask], skip_special_tokens=False, clean_up_tokenization_spaces=False)
                    key = (text, tuple(tokenizer.convert_ids_to_tokens(ids[:end])))
                    self.samples[trainer.state.global_step + 1].append((key, logprobs[:end]))
                    self.truncation[trainer.state.global_step + 1].append(
                        (key, kept_logmass[:end], untruncated_logprobs[:end])
                    )
            return output.sequences

        model.generate = generate_with_scores


def sample_key(record: dict) -> tuple:
    """A logged sample as `GenerationRecorder.trained` keeps it: its prompt and its completion's tokens."""
    return record["prompt"], tuple(record["response_tokens"])


def add_logger(trainer) -> RolloutLoggerCallback:
    callback = RolloutLoggerCallback(trainer=trainer)
    trainer.add_callback(callback)
    return callback


def read_records(run_dir: Path) -> dict[str, list[dict]]:
    """File name -> its records, for every rollout file of a run folder."""
    return {
        path.name: [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        for path in sorted(Path(run_dir).glob("rollout_data_rank_*.jsonl"))
    }


class Rescorer:
    """Log-probs and entropies of a logged sample under given weights, from a fresh fp32 forward pass of one unpadded
    sequence: of the example's text model, or of the model and tokenizer given."""

    def __init__(self, temperature: float, model=None, tokenizer=None):
        if model is None:
            model = AutoModelForCausalLM.from_pretrained(tiny_model_dir())
            tokenizer = PreTrainedTokenizerFast.from_pretrained(tiny_model_dir())
        self.tokenizer, self.model = tokenizer, model.eval()
        assert self.model.dtype == torch.float32
        self.initial_weights = {name: value.clone() for name, value in self.model.state_dict().items()}
        self.temperature = temperature

    @torch.no_grad()
    def logprobs_and_entropies(self, weights: dict, record: dict, **model_inputs) -> tuple[list[float], list[float]]:
        """`model_inputs` go to the forward pass beside the input ids (a VLM's `pixel_values`)."""
        self.model.load_state_dict(weights)
        prompt_ids = self.tokenizer(record["prompt"], add_special_tokens=False)["input_ids"]
        completion_ids = self.tokenizer.convert_tokens_to_ids(record["response_tokens"])
        input_ids = torch.tensor([prompt_ids + completion_ids])
        logits = self.model(input_ids=input_ids, **model_inputs).logits[0, len(prompt_ids) - 1 : -1]
        logps = torch.log_softmax(logits.float() / self.temperature, dim=-1)
        entropies = -(logps.exp() * logps).sum(dim=-1)
        return logps.gather(-1, torch.tensor(completion_ids)[:, None]).squeeze(-1).tolist(), entropies.tolist()

    def logprobs(self, weights: dict, record: dict, **model_inputs) -> list[float]:
        return self.logprobs_and_entropies(weights, record, **model_inputs)[0]


def max_difference(left: list[float], right: list[float]) -> float:
    assert len(left) == len(right)
    return max((abs(a - b) for a, b in zip(left, right)), default=0.0)


def trl_kl(record: dict) -> list[float]:
    """TRL's per-token KL estimate exp(ref - logp) - (ref - logp) - 1 from a record."""
    return [math.exp(ref - logp) - (ref - logp) - 1 for logp, ref in zip(record["logprobs"], record["ref_logprobs"])]


# Since TRL 1.9 a loss pass's token mean pools the tokens of all ranks; before, it was the mean of each rank's.
TRL_POOLS_RANKS = Version(trl.__version__) >= Version("1.9")


def trl_step_kl(records: list[dict], pooled: bool = TRL_POOLS_RANKS) -> dict[int, float]:
    """TRL's logged `kl` of each step, from the lines (of all ranks) that the step trained, those with a `micro_batch`:
    the mean over the step's loss passes of each pass's token mean of `trl_kl`, over all ranks' tokens if `pooled`,
    else the mean of each rank's token mean (a pass without tokens counts as 0, as TRL divides by at least 1)."""
    tokens = defaultdict(dict)  # (step, micro_batch) -> rank -> the k3 values of the pass's tokens on that rank
    for record in records:
        if "micro_batch" in record:
            passes = tokens[record["step"], record["micro_batch"]].setdefault(record["rank"], [])
            passes.extend(trl_kl(record) if "logprobs" in record else [])
    pass_means = defaultdict(list)
    for (step, _), ranks in sorted(tokens.items()):
        if pooled:
            values = [value for values in ranks.values() for value in values]
            pass_means[step].append(sum(values) / max(len(values), 1))
        else:
            pass_means[step].append(statistics.mean(sum(values) / max(len(values), 1) for values in ranks.values()))
    return {step: statistics.mean(means) for step, means in pass_means.items()}


# TRL computes each token's exp(ref - logp) - (ref - logp) - 1 in float32, where exp(...) is near 1: its rounding, up
# to half a float32 ulp of 1 (6e-8), makes each token's value, and so any mean of them, uncertain by about that much.
KL_ROUNDING = 2**-23


def assert_step_kl_is_trls(trainer, records, steps):
    """TRL's logged `kl` of each step with lines, recomputed from the lines by their micro-batches: to 1e-6 relative,
    or to the float32 rounding of TRL's per-token KL when that is more."""
    logged = {entry["step"]: entry["kl"] for entry in trainer.state.log_history if "kl" in entry}
    recomputed = trl_step_kl(records)
    assert sorted(recomputed) == steps
    for step, kl in recomputed.items():
        assert kl == pytest.approx(logged[step], rel=1e-6, abs=KL_ROUNDING)
