"""Shared set-up for the rollout logger's tests: one tiny warmed-up model per session, GRPO runs, exact re-scoring."""

import atexit
import functools
import json
import math
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

import torch
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
    output_dir, reward_funcs=(sorted_digits, same_digits), conversational=False, model_dir=None, **overrides
) -> GRPOTrainer:
    args = grpo_config(output_dir, **overrides)
    model_dir = model_dir or tiny_model_dir()
    return GRPOTrainer(
        model=str(model_dir),
        reward_funcs=list(reward_funcs),
        args=args,
        train_dataset=prompt_dataset(256, seed=0, conversational=conversational),
        processing_class=PreTrainedTokenizerFast.from_pretrained(model_dir),
    )


class GenerationRecorder:
    """Wraps the trainer instance's generation to keep, per step, the policy's weights when that step's samples were
    generated and the number of real tokens (completion mask) of each completion; and its loss to keep, per optimizer
    step, the samples trained in it as `sample_key`s."""

    def __init__(self, trainer):
        self.weights, self.completion_lengths, self.trained = {}, defaultdict(list), defaultdict(list)
        generate, compute_loss = trainer._generate_and_score_completions, trainer.compute_loss
        tokenizer = trainer.processing_class

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
    sequence."""

    def __init__(self, temperature: float):
        model_dir = tiny_model_dir()
        self.tokenizer = PreTrainedTokenizerFast.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
        assert self.model.dtype == torch.float32
        self.initial_weights = {name: value.clone() for name, value in self.model.state_dict().items()}
        self.temperature = temperature

    @torch.no_grad()
    def logprobs_and_entropies(self, weights: dict, record: dict) -> tuple[list[float], list[float]]:
        self.model.load_state_dict(weights)
        prompt_ids = self.tokenizer(record["prompt"], add_special_tokens=False)["input_ids"]
        completion_ids = self.tokenizer.convert_tokens_to_ids(record["response_tokens"])
        input_ids = torch.tensor([prompt_ids + completion_ids])
        logits = self.model(input_ids=input_ids).logits[0, len(prompt_ids) - 1 : -1] / self.temperature
        logps = torch.log_softmax(logits.float(), dim=-1)
        entropies = -(logps.exp() * logps).sum(dim=-1)
        return logps.gather(-1, torch.tensor(completion_ids)[:, None]).squeeze(-1).tolist(), entropies.tolist()

    def logprobs(self, weights: dict, record: dict) -> list[float]:
        return self.logprobs_and_entropies(weights, record)[0]


def max_difference(left: list[float], right: list[float]) -> float:
    assert len(left) == len(right)
    return max((abs(a - b) for a, b in zip(left, right)), default=0.0)


def trl_kl(record: dict) -> list[float]:
    """TRL's per-token KL estimate exp(ref - logp) - (ref - logp) - 1 from a record."""
    return [math.exp(ref - logp) - (ref - logp) - 1 for logp, ref in zip(record["logprobs"], record["ref_logprobs"])]
