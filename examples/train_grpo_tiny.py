"""A tiny GRPO run on CPU with rollout logging on: the RL Logging Board's example run.

A Qwen2-style model with random weights and a byte-level BPE tokenizer trained here learn to sort digits
("sort 7 2 5 :" -> " 2 5 7"). A short supervised warm-up teaches the answer format; then TRL's GRPOTrainer, scored by
two reward functions and held near the warm-up model by a KL penalty (beta > 0), makes the sorting visibly better.
The trainer logs every step, evaluates on 8 other prompts every 50 steps and saves the weights then (the last two
checkpoints and the best one by eval reward, in <output-dir>/checkpoint-<step>/). Everything runs offline on 2 CPU
cores in about a minute.

    python examples/train_grpo_tiny.py --output-dir runs/grpo_tiny --steps 400 --seed 0
    python examples/train_grpo_tiny.py --output-dir runs/grpo_tiny_mismatch --steps 50 --bf16 --top-p 0.9

The second is in bfloat16 mixed precision, sampled at top-p 0.9: the logger records, per token, the log-prob
`generate` sampled it with (`sampler_logprobs`, after top-p) beside the one TRL's loss uses (`logprobs`, the full
distribution from a bfloat16 forward pass of the whole sequence). They differ for two reasons the board shows per
token: top-p renormalises what it keeps, so every sampled token is likelier to the sampler; and bfloat16 computes a
token at a time with a cache in `generate`, all at once in the forward pass.

Rollouts and the trainer's logged metrics go to <output-dir>/rollout_samples/<EXP_NAME or the output folder's name>/
(ROLLOUT_SAVE_DIR changes the root); run with SAVE_ROLLOUT_DATA=false for the same training without them.
"""

import argparse
import os
import random
import sys
from collections import Counter
from pathlib import Path


os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here needs the Hugging Face Hub
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # `rollout_logger` from this checkout, if not installed

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
import trl  # noqa: E402
from packaging.version import Version  # noqa: E402
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, set_seed  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from rollout_logger import RolloutLoggerCallback  # noqa: E402


EVAL_EVERY = 50  # steps; the checkpoints are saved then too, so that the best one is among them
# Before TRL 1.5, GRPOTrainer's own evaluation metrics (eval_reward...) were not among those metric_for_best_model saw.
BEST_MODEL_METRIC = "reward" if Version(trl.__version__) >= Version("1.5") else "loss"

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# ---------------------------------------------------------------- the task


def make_task(rng: random.Random) -> tuple[str, str]:
    """A prompt with 3 to 5 digits and its answer, the digits sorted."""
    digits = [str(rng.randint(0, 9)) for _ in range(rng.randint(3, 5))]
    return f"sort {' '.join(digits)} :", " " + " ".join(sorted(digits))


def _text(message) -> str:
    """The text of a plain prompt/completion or of the last message of a conversational one."""
    return message if isinstance(message, str) else message[-1]["content"]


def _prompt_digits(prompt) -> list[str]:
    return _text(prompt).split(":")[0].split()[1:]


def sorted_digits(prompts, completions, **kwargs) -> list[float]:
    """1 when the completion is exactly the prompt's digits in ascending order."""
    return [float(_text(c).split() == sorted(_prompt_digits(p))) for p, c in zip(prompts, completions)]


def same_digits(prompts, completions, **kwargs) -> list[float]:
    """How well the completion's words match the prompt's digits as a multiset (F1 score, order ignored)."""
    scores = []
    for prompt, completion in zip(prompts, completions):
        wanted, written = Counter(_prompt_digits(prompt)), Counter(_text(completion).split())
        total = sum(wanted.values()) + sum(written.values())
        scores.append(2 * sum((wanted & written).values()) / total if total else 0.0)
    return scores


# ---------------------------------------------------------------- tokenizer and model


def build_tokenizer(seed: int = 0) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on task text (each " d" becomes one token), with a ChatML template."""
    rng = random.Random(seed)
    corpus = ["".join(make_task(rng)) for _ in range(2000)]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    bpe = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(corpus, bpe)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        model_input_names=["input_ids", "attention_mask"],  # no token_type_ids: a decoder-only model takes none
    )


def build_model(tokenizer: PreTrainedTokenizerFast, seed: int = 0) -> Qwen2ForCausalLM:
    """A Qwen2-style model (hidden size 64, 2 layers, ~140k parameters) with random weights."""
    set_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return Qwen2ForCausalLM(config)


def warm_up(model, tokenizer, steps: int, seed: int = 0, batch_size: int = 32, learning_rate: float = 3e-3) -> None:
    """Supervised fine-tuning on correct answers (loss on the answer only): just enough to learn the format."""
    rng = random.Random(seed + 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    model.train()
    for _ in range(steps):
        ids, labels = [], []
        for prompt, answer in (make_task(rng) for _ in range(batch_size)):
            prompt_ids = tokenizer(prompt)["input_ids"]
            answer_ids = tokenizer(answer)["input_ids"] + [tokenizer.eos_token_id]
            ids.append(prompt_ids + answer_ids)
            labels.append([-100] * len(prompt_ids) + answer_ids)
        width = max(map(len, ids))
        input_ids = torch.tensor([row + [tokenizer.pad_token_id] * (width - len(row)) for row in ids])
        attention_mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in ids])
        labels = torch.tensor([row + [-100] * (width - len(row)) for row in labels])
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def save_warm_model(directory: Path, warmup_steps: int, seed: int = 0) -> Path:
    """Builds, warms up and saves the model and tokenizer (GRPO with beta > 0 loads its reference model from disk)."""
    tokenizer = build_tokenizer(seed)
    model = build_model(tokenizer, seed)
    warm_up(model, tokenizer, warmup_steps, seed)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def prompt_dataset(size: int, seed: int = 0, conversational: bool = False) -> Dataset:
    rng = random.Random(seed + 2)
    prompts = [make_task(rng)[0] for _ in range(size)]
    if conversational:
        return Dataset.from_list([{"prompt": [{"role": "user", "content": prompt}]} for prompt in prompts])
    return Dataset.from_list([{"prompt": prompt} for prompt in prompts])


# ---------------------------------------------------------------- training


def build_trainer(
    model_dir: Path,
    output_dir: Path,
    steps: int,
    seed: int = 0,
    learning_rate: float = 3e-4,
    bf16: bool = False,
    top_p: float = 1.0,
    num_iterations: int = 1,
    epsilon: float = 0.2,
) -> GRPOTrainer:
    """GRPO on the sorting task: 4 prompts x 4 completions per step, two reward functions, beta > 0, all on CPU; in
    bfloat16 mixed precision with `bf16`, sampling from the top-p share of each next token's distribution; each
    generation batch trained `num_iterations` times, PPO's clip range ±`epsilon`."""
    args = GRPOConfig(
        output_dir=str(output_dir),
        use_cpu=True,
        bf16=bf16,
        seed=seed,
        max_steps=steps,
        per_device_train_batch_size=16,
        num_generations=4,
        max_completion_length=12,
        temperature=1.0,
        top_p=top_p,
        num_iterations=num_iterations,
        epsilon=epsilon,
        beta=0.04,
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        gradient_checkpointing=False,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=EVAL_EVERY,
        per_device_eval_batch_size=16,
        save_strategy="steps",
        save_steps=EVAL_EVERY,
        save_only_model=True,
        save_total_limit=2,
        metric_for_best_model=BEST_MODEL_METRIC,
        report_to=[],
        disable_tqdm=True,
    )
    return GRPOTrainer(
        model=str(model_dir),
        reward_funcs=[sorted_digits, same_digits],
        args=args,
        train_dataset=prompt_dataset(args.per_device_train_batch_size * steps, seed),
        eval_dataset=prompt_dataset(8, seed + 1),
        processing_class=PreTrainedTokenizerFast.from_pretrained(model_dir),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--output-dir", default="runs/grpo_tiny", help="the warm-up model, TRL's output and (by default) the rollouts"
    )
    parser.add_argument("--steps", type=int, default=400, help="GRPO optimizer steps")
    parser.add_argument("--warmup-steps", type=int, default=60, help="supervised warm-up steps before GRPO")
    parser.add_argument("--learning-rate", type=float, default=3e-4, help="GRPO's (constant) learning rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--bf16",
        action="store_true",
        help="train in bfloat16 mixed precision: generate's and the loss's log-probs of a token then differ (the "
        "sampler-trainer mismatch the logger records as sampler_logprobs beside logprobs)",
    )
    parser.add_argument("--top-p", type=float, default=1.0, help="sample from this top share of each distribution")
    parser.add_argument(
        "--num-iterations", type=int, default=1, help="loss passes over each generation batch (TRL's num_iterations)"
    )
    parser.add_argument("--epsilon", type=float, default=0.2, help="PPO's clip range: ratios outside 1 ± epsilon clip")
    options = parser.parse_args()
    os.environ.setdefault("SAVE_ROLLOUT_DATA", "true")  # this example exists to show the logging

    output_dir = Path(options.output_dir)
    model_dir = save_warm_model(output_dir / "warm_model", options.warmup_steps, options.seed)
    trainer = build_trainer(
        model_dir,
        output_dir,
        options.steps,
        options.seed,
        options.learning_rate,
        options.bf16,
        options.top_p,
        options.num_iterations,
        options.epsilon,
    )
    trainer.add_callback(RolloutLoggerCallback(trainer=trainer))  # the one line that turns on rollout logging
    trainer.train()

    rewards = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]
    tenth = max(1, len(rewards) // 10)
    first, last = sum(rewards[:tenth]) / tenth, sum(rewards[-tenth:]) / tenth
    print(f"mean reward: first {tenth} steps {first:.3f}, last {tenth} steps {last:.3f}")
    state = trainer.state
    print(f"best checkpoint: {state.best_model_checkpoint} (eval {BEST_MODEL_METRIC} {state.best_metric:.3f})")


if __name__ == "__main__":
    main()
