"""Shared set-up for the rollout logger's tool-calling tests: one tiny model per session warmed up to call the `add`
tool, GRPO runs with TRL's `tools=`, and what a line should say at its tool tokens, recomputed independently."""

import atexit
import functools
import inspect
import json
import math
import re
import shutil
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

import torch
import transformers
import trl
from packaging.version import Version
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
from trl import GRPOTrainer, chat_template_utils

from examples.train_grpo_tiny_tools import (
    Exchanges,
    add,
    build_tokenizer,
    build_trainer,
    grpo_config,
    question,
    save_warm_model,
    tool_call_text,
)

WARMUP_STEPS = 150  # enough for most completions sampled at temperature 1 to hold a well-formed call


@functools.cache
def why_trl_runs_no_tools() -> str | None:
    """Why the installed TRL cannot run the example's tool calls, or None: its GRPOTrainer takes no `tools=`, or its
    parser does not get the call out of a completion with the installed transformers (TRL 0.29 sets a legacy
    `response_schema`, which transformers 5.13 on no longer read)."""
    versions = f"TRL {trl.__version__} with transformers {transformers.__version__}"
    if "tools" not in inspect.signature(GRPOTrainer.__init__).parameters:
        return f"{versions}: GRPOTrainer takes no tools="
    if Version(transformers.__version__) < Version("5.0.0"):
        return f"{versions}: TRL's tool calling needs transformers 5"
    tokenizer = chat_template_utils.add_response_schema(build_tokenizer())
    completion = tokenizer(tool_call_text(3, 4))["input_ids"] + [tokenizer.eos_token_id]
    prompt = Exchanges(tokenizer).prompt_ids([{"role": "user", "content": question(3, 4)}])
    takes_prefix = "prefix" in inspect.signature(chat_template_utils.parse_response).parameters
    try:
        prefix = {"prefix": prompt} if takes_prefix else {}
        parsed = chat_template_utils.parse_response(tokenizer, completion, **prefix)
    except Exception as error:  # e.g. transformers' parser without the legacy schema TRL set
        return f"{versions}: TRL cannot parse a tool call ({type(error).__name__}: {error})"
    expected = [{"type": "function", "function": {"name": "add", "arguments": {"a": 3, "b": 4}}}]
    if parsed.get("tool_calls") != expected:
        return f"{versions}: TRL parses a tool call as {parsed}"
    return None


@functools.cache
def tools_model_dir() -> Path:
    """The example's model and tokenizer after a short warm-up, built once per session."""
    directory = Path(tempfile.mkdtemp(prefix="rollout_logger_tools_model_"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return save_warm_model(directory / "model", warmup_steps=WARMUP_STEPS, seed=0)


def make_tools_trainer(output_dir, **overrides) -> GRPOTrainer:
    """A GRPOTrainer with the `add` tool on the example's task: 2 prompts x 4 completions per step."""
    settings = dict(per_device_train_batch_size=8, learning_rate=3e-4, lr_scheduler_type="linear")
    settings.update(overrides)
    args = grpo_config(output_dir, settings.pop("max_steps", 3), seed=0, **settings)
    return build_trainer(tools_model_dir(), args, prompts=64)


class ToolRunRecorder:
    """Wraps the trainer instance's generation to keep, per step, the policy's weights when that step's samples were
    generated, and each sample's prompt ids, completion ids and tool mask as TRL made them."""

    def __init__(self, trainer):
        self.weights, self.samples = {}, defaultdict(list)
        generate = trainer._generate_and_score_completions

        def generate_and_record(*args, **kwargs):
            step = trainer.state.global_step + 1
            if trainer.model.training and step not in self.weights:
                self.weights[step] = {
                    name: value.detach().clone() for name, value in trainer.model.state_dict().items()
                }
            output = generate(*args, **kwargs)
            if trainer.model.training:
                masks = output.get("tool_mask", torch.ones_like(output["completion_mask"]))
                for row in range(output["completion_ids"].size(0)):
                    prompt = output["prompt_ids"][row][output["prompt_mask"][row].bool()].tolist()
                    kept = output["completion_mask"][row].bool()
                    completion = output["completion_ids"][row][kept].tolist()
                    self.samples[step].append((prompt, completion, masks[row][kept].tolist()))
            return output

        trainer._generate_and_score_completions = generate_and_record


class ToolRescorer:
    """Log-probs and entropies of a logged sample under given weights, from a fresh fp32 forward pass of its prompt
    and completion as one unpadded sequence (tool tokens included: the policy reads them, it did not sample them)."""

    def __init__(self, temperature: float):
        model_dir = tools_model_dir()
        self.tokenizer = PreTrainedTokenizerFast.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
        assert self.model.dtype == torch.float32
        self.initial_weights = {name: value.clone() for name, value in self.model.state_dict().items()}
        self.temperature = temperature

    def ids(self, record: dict) -> tuple[list[int], list[int]]:
        prompt_ids = self.tokenizer(record["prompt"], add_special_tokens=False)["input_ids"]
        return prompt_ids, self.tokenizer.convert_tokens_to_ids(record["response_tokens"])

    @torch.no_grad()
    def logprobs_and_entropies(self, weights: dict, record: dict) -> tuple[list[float], list[float]]:
        self.model.load_state_dict(weights)
        prompt_ids, completion_ids = self.ids(record)
        input_ids = torch.tensor([prompt_ids + completion_ids])
        logits = self.model(input_ids=input_ids).logits[0, len(prompt_ids) - 1 : -1] / self.temperature
        logps = torch.log_softmax(logits.float(), dim=-1)
        entropies = -(logps.exp() * logps).sum(dim=-1)
        return logps.gather(-1, torch.tensor(completion_ids)[:, None]).squeeze(-1).tolist(), entropies.tolist()


def sampled_positions(record: dict) -> list[int]:
    return [position for position, flag in enumerate(record["tool_mask"]) if flag == 1]


def tool_runs(record: dict) -> list[tuple[int, int]]:
    """The (start, end) of each run of tool tokens (tool_mask 0) of a line."""
    runs, start = [], None
    for position, flag in enumerate(record["tool_mask"] + [1]):
        if flag == 0 and start is None:
            start = position
        elif flag == 1 and start is not None:
            runs.append((start, position))
            start = None
    return runs


TOOL_CALL = re.compile(r"<tool_call>\s*(.+?)\s*</tool_call>", re.DOTALL)


def expected_tool_result(tokenizer, sampled_text: str) -> str | None:
    """What `add` returns for the last tool call of the model's text before a run of tool tokens, as TRL passes it to
    the chat template (its text); None where the call is not one `add(a=<int>, b=<int>)` (TRL reports an error)."""
    calls = TOOL_CALL.findall(sampled_text)
    try:
        call = json.loads(calls[-1])
        arguments = call["arguments"]
    except (IndexError, ValueError, KeyError, TypeError):
        return None
    if call.get("name") != "add" or not isinstance(arguments, dict) or set(arguments) != {"a", "b"}:
        return None
    if not all(type(value) is int for value in arguments.values()):
        return None
    return str(add(**arguments))


def tool_text_checks(tokenizer, records: list[dict]) -> list[tuple[list[int], list[int]]]:
    """For each run of tool tokens after a well-formed `add` call: (the logged tool tokens' ids, the ids TRL renders
    for the tool message holding add's result there)."""
    exchanges = Exchanges(tokenizer)
    checks = []
    for record in records:
        ids = tokenizer.convert_tokens_to_ids(record["response_tokens"])
        previous_end = 0
        for start, end in tool_runs(record):
            sampled_text = tokenizer.decode(ids[previous_end:start], skip_special_tokens=False)
            result = expected_tool_result(tokenizer, sampled_text)
            if result is not None:
                checks.append((ids[start:end], exchanges.tool_result_ids(result)))
            previous_end = end
    return checks


def sampled_k3(record: dict) -> list[float]:
    """TRL's per-token KL estimate exp(ref - logp) - (ref - logp) - 1 over the tokens the policy sampled."""
    return [
        math.exp(record["ref_logprobs"][i] - record["logprobs"][i])
        - (record["ref_logprobs"][i] - record["logprobs"][i])
        - 1
        for i in sampled_positions(record)
    ]


def trl_step_kl_over_sampled_tokens(records: list[dict]) -> dict[int, float]:
    """TRL's logged `kl` of each step (one rank): the mean over the step's loss passes (`micro_batch`) of each pass's
    token mean of k3 over the sampled tokens (a pass without tokens counts as 0)."""
    passes = defaultdict(list)
    for record in records:
        if "micro_batch" in record:
            passes[record["step"], record["micro_batch"]].extend(sampled_k3(record) if "logprobs" in record else [])
    means = defaultdict(list)
    for (step, _), values in sorted(passes.items()):
        means[step].append(sum(values) / max(len(values), 1))
    return {step: statistics.mean(values) for step, values in means.items()}
