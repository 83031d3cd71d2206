"""A tiny tool-calling GRPO run on CPU with rollout logging on: the RL Logging Board's example of a run with tools.

The model is asked to add two digits ("add 3 and 4") and has one tool, `add(a, b)`. TRL's GRPOTrainer (`tools=[add]`)
parses the tool calls the model writes, runs the tool, puts its result into the completion (as the chat template
renders a tool message) and lets the model go on after it; those tool-result tokens are in the completion but were not
sampled by the policy (TRL's `tool_mask` is 0 there), and the logger logs the mask and no log-probs for them.

A Qwen2-style model with random weights and a byte-level BPE tokenizer trained here use Qwen3's chat template (the
one TRL ships and knows how to parse tool calls of: `<tool_call>{"name": ..., "arguments": ...}</tool_call>`). A short
supervised warm-up on whole tool-using conversations, laid out token for token as TRL builds them (prompt, tool call,
tool result, answer; the loss on the model's own turns only), teaches the format; sampling at temperature 1 then
writes a well-formed call in about half of the completions. GRPO, scored by two reward functions (the tool ran; the
final answer is the right sum) and held near the warm-up model by a KL penalty, trains from there: in the bundled run
the share of completions whose call ran rises from about 0.5 to 0.8 in 50 steps, while the right sum stays rare (this
model does not learn to copy the question's digits into the call). Everything runs offline on 2 CPU cores in a minute
or two.

    python examples/train_grpo_tiny_tools.py --output-dir runs/grpo_tiny_tools --steps 50 --seed 0

The bundled run rollout_samples/grpo_tiny_tools_example/ is that command's output, with SAVE_ROLLOUT_DATA=true
ROLLOUT_SAVE_DIR=rollout_samples EXP_NAME=grpo_tiny_tools_example.

Rollouts and the trainer's logged metrics go to <output-dir>/rollout_samples/<EXP_NAME or the output folder's name>/
(ROLLOUT_SAVE_DIR changes the root); run with SAVE_ROLLOUT_DATA=false for the same training without them.
"""

import argparse
import json
import os
import random
import re
import sys
from pathlib import Path


os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here needs the Hugging Face Hub
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # `rollout_logger` from this checkout, if not installed

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, set_seed  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl.chat_template_utils import get_training_chat_template, qwen3_chat_template  # noqa: E402

from rollout_logger import RolloutLoggerCallback  # noqa: E402


SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen3's markup tokens, single tokens there too (added, not special: decoding keeps them, so TRL's parser sees them).
MARKUP_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]


# ---------------------------------------------------------------- the tool and the task


def add(a: int, b: int) -> int:
    """Adds two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The sum of a and b.
    """
    return a + b


TOOLS = [add]


def make_task(rng: random.Random) -> tuple[int, int]:
    return rng.randint(0, 9), rng.randint(0, 9)


def question(a: int, b: int) -> str:
    return f"add {a} and {b}"


def tool_call_text(a: int, b: int) -> str:
    """The model's tool call as Qwen3's chat template renders it."""
    return f'<tool_call>\n{{"name": "add", "arguments": {json.dumps({"a": a, "b": b})}}}\n</tool_call>'


def conversation(a: int, b: int) -> list[dict]:
    """A whole tool-using exchange: the question, the model's call, the tool's result, the model's answer."""
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": a, "b": b}}}
    return [
        {"role": "user", "content": question(a, b)},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "add", "content": str(add(a, b))},
        {"role": "assistant", "content": str(add(a, b))},
    ]


def _question_digits(prompt) -> tuple[int, int] | None:
    match = re.fullmatch(r"add (\d+) and (\d+)", prompt[-1]["content"])
    return match and (int(match.group(1)), int(match.group(2)))


def used_tool(completions, **kwargs) -> list[float]:
    """1 when the completion called `add` and TRL ran it (a tool message with a number, not an error, follows)."""
    return [
        float(any(message["role"] == "tool" and str(message["content"]).strip().isdigit() for message in completion))
        for completion in completions
    ]


def correct_sum(prompts, completions, **kwargs) -> list[float]:
    """1 when the completion's last message is the model's answer after a tool result, and it is the right sum."""
    scores = []
    for prompt, completion in zip(prompts, completions):
        last = completion[-1]
        answered = len(completion) > 1 and completion[-2]["role"] == "tool" and last["role"] == "assistant"
        scores.append(float(answered and last["content"].strip() == str(sum(_question_digits(prompt)))))
    return scores


# ---------------------------------------------------------------- tokenizer and model


def build_tokenizer(seed: int = 0) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on rendered tool-using conversations, with Qwen3's chat template."""
    rng = random.Random(seed)
    renderer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), chat_template=qwen3_chat_template)
    texts = [
        renderer.apply_chat_template(conversation(*make_task(rng)), tools=TOOLS, tokenize=False) for _ in range(300)
    ]
    markup = re.compile("|".join(map(re.escape, SPECIAL_TOKENS + MARKUP_TOKENS)))
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    bpe = trainers.BpeTrainer(
        vocab_size=500,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator((piece for text in texts for piece in markup.split(text)), bpe)
    tokenizer.add_tokens(MARKUP_TOKENS)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",  # as Qwen3's: a turn, a tool call included, ends there
        pad_token="<|endoftext|>",
        chat_template=qwen3_chat_template,
        model_input_names=["input_ids", "attention_mask"],  # no token_type_ids: a decoder-only model takes none
    )


def build_model(tokenizer: PreTrainedTokenizerFast, seed: int = 0) -> Qwen2ForCausalLM:
    """A Qwen2-style model (hidden size 64, 2 layers, ~130k parameters) with random weights."""
    set_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return Qwen2ForCausalLM(config)


# ---------------------------------------------------------------- warm-up


class Exchanges:
    """Token ids of tool-using exchanges laid out as TRL's tool loop lays them out, to warm up on."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        # The template TRL renders with when tools are on: Qwen3's own is not prefix-preserving, so TRL takes its
        # patched training version (None: the tokenizer's own).
        self.template = get_training_chat_template(tokenizer)
        self._tool_results = {}

    def chat_ids(self, messages: list[dict], **kwargs) -> list[int]:
        return list(
            self.tokenizer.apply_chat_template(
                messages, chat_template=self.template, tokenize=True, return_dict=False, **kwargs
            )
        )

    def prompt_ids(self, prompt: list[dict]) -> list[int]:
        return self.chat_ids(prompt, tools=TOOLS, add_generation_prompt=True)

    def tool_result_ids(self, result: str) -> list[int]:
        """The tokens TRL puts into a completion after a tool call: the rendered tool message and the next assistant
        header, found as TRL finds them (a conversation with and without the tool message, cut after the call's
        EOS)."""
        if result not in self._tool_results:
            call = {"type": "function", "function": {"name": "add", "arguments": {}}}
            before = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
            prefix = self.chat_ids(before)
            tool = {"role": "tool", "name": "add", "content": result}
            full = self.chat_ids(before + [tool], add_generation_prompt=True)
            end = max(index for index, id_ in enumerate(prefix) if id_ == self.tokenizer.eos_token_id) + 1
            assert full[:end] == prefix[:end]
            self._tool_results[result] = full[end:]
        return self._tool_results[result]

    def example(self, a: int, b: int) -> tuple[list[int], list[int]]:
        """A whole exchange (prompt, call, the tool's result, answer) and its labels: the model's turns only."""
        eos = self.tokenizer.eos_token_id
        prompt = self.prompt_ids([{"role": "user", "content": question(a, b)}])
        call = self.tokenizer(tool_call_text(a, b))["input_ids"] + [eos]
        result = self.tool_result_ids(str(add(a, b)))
        answer = self.tokenizer(str(add(a, b)))["input_ids"] + [eos]
        ids = prompt + call + result + answer
        labels = [-100] * len(prompt) + call + [-100] * len(result) + answer
        return ids, labels


def warm_up(model, tokenizer, steps: int, seed: int = 0, batch_size: int = 16, learning_rate: float = 3e-3) -> None:
    """Supervised fine-tuning on whole tool-using exchanges (loss on the model's turns): just enough for the format."""
    rng = random.Random(seed + 1)
    exchanges = Exchanges(tokenizer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    model.train()
    for _ in range(steps):
        ids, labels = zip(*(exchanges.example(*make_task(rng)) for _ in range(batch_size)))
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


def prompt_dataset(size: int, seed: int = 0) -> Dataset:
    rng = random.Random(seed + 2)
    prompts = [[{"role": "user", "content": question(*make_task(rng))}] for _ in range(size)]
    return Dataset.from_list([{"prompt": prompt} for prompt in prompts])


# ---------------------------------------------------------------- training


def grpo_config(output_dir: Path, steps: int, seed: int = 0, **overrides) -> GRPOConfig:
    settings = dict(
        output_dir=str(output_dir),
        use_cpu=True,
        bf16=False,
        seed=seed,
        max_steps=steps,
        per_device_train_batch_size=8,  # 2 prompts x 4 completions
        num_generations=4,
        max_completion_length=48,  # a call (~24 tokens), the tool's result (~14) and an answer (2)
        max_tool_calling_iterations=2,
        temperature=1.0,
        beta=0.04,
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        gradient_checkpointing=False,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
    )
    settings.update(overrides)
    return GRPOConfig(**settings)


def build_trainer(model_dir: Path, args: GRPOConfig, prompts: int | None = None) -> GRPOTrainer:
    """GRPO with the `add` tool, two reward functions, beta > 0, all on CPU."""
    prompts = prompts or args.per_device_train_batch_size * args.max_steps
    return GRPOTrainer(
        model=str(model_dir),
        reward_funcs=[used_tool, correct_sum],
        args=args,
        train_dataset=prompt_dataset(prompts, args.seed),
        processing_class=PreTrainedTokenizerFast.from_pretrained(model_dir),
        tools=TOOLS,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--output-dir",
        default="runs/grpo_tiny_tools",
        help="the warm-up model, TRL's output and (by default) the rollouts",
    )
    parser.add_argument("--steps", type=int, default=50, help="GRPO optimizer steps")
    parser.add_argument("--warmup-steps", type=int, default=100, help="supervised warm-up steps before GRPO")
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="GRPO's (constant) learning rate")
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()
    os.environ.setdefault("SAVE_ROLLOUT_DATA", "true")  # this example exists to show the logging

    output_dir = Path(options.output_dir)
    model_dir = save_warm_model(output_dir / "warm_model", options.warmup_steps, options.seed)
    args = grpo_config(output_dir, options.steps, options.seed, learning_rate=options.learning_rate)
    trainer = build_trainer(model_dir, args)
    trainer.add_callback(RolloutLoggerCallback(trainer=trainer))  # the one line that turns on rollout logging
    trainer.train()

    history = [entry for entry in trainer.state.log_history if "reward" in entry]
    tenth = max(1, len(history) // 10)
    for key in ("tools/call_frequency", "rewards/used_tool/mean", "rewards/correct_sum/mean"):
        first = sum(entry.get(key, 0.0) for entry in history[:tenth]) / tenth
        last = sum(entry.get(key, 0.0) for entry in history[-tenth:]) / tenth
        print(f"{key}: first {tenth} steps {first:.3f}, last {tenth} steps {last:.3f}")


if __name__ == "__main__":
    main()
