"""The `RolloutLoggerCallback`: exact per-token rollout logs from TRL's `GRPOTrainer`."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import inspect
import itertools
import json
import logging
import math
import os
import re
from datetime import datetime, timedelta, timezone
from enum import Enum
from pathlib import Path
from typing import Any, Callable

import torch
import trl
from packaging.version import Version
from transformers import ProcessorMixin, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl.data_utils import prepare_multimodal_messages

from .images import ImageFiles
from .metadata import (
    FORMAT_KEYS,
    IMPORTANCE_SAMPLING_META_KEY,
    LOSS_META_KEY,
    LOSS_PASS_TOKEN_KEYS,
    META_FILE,
    METRICS_FILE,
    PER_TOKEN_KEYS,
    RANK_FILE,
    ROLLOUTS_FOLDER,
    SAMPLER_META_KEY,
    SUMMARIES_SUFFIX,
    URL_USER_INFO,
    with_reasoning,
)
from .sampler import GenerateLogprobs
from .writer import JsonlWriter

logger = logging.getLogger(__name__)

ENABLE_VARIABLE = "SAVE_ROLLOUT_DATA"
EXP_NAME_VARIABLE = "EXP_NAME"
SAVE_DIR_VARIABLE = "ROLLOUT_SAVE_DIR"
# Added to each generated batch so that the loss pass, which sees the batch shuffled and split, knows which samples it
# holds. TRL ignores keys it does not know.
SAMPLE_KEY = "rollout_logger_sample"

# The TRL versions this logger is tested with (pyproject.toml's requirement), and what it reads from their trainer.
SUPPORTED_TRL = ">=0.29,<2"
TRL_VERSION = Version(trl.__version__)
HOOKED_METHODS = (
    "_generate_and_score_completions",
    "_calculate_rewards",
    "_get_per_token_logps_and_entropies",
    "compute_loss",
)
TRAINER_FIELDS = (
    "num_generations",
    "reward_func_names",
    "reward_weights",
    "beta",
    "loss_type",
    "scale_rewards",
    "tools",
    "rollout_func",
    "use_vllm",
    "vllm_importance_sampling_correction",
    "vllm_importance_sampling_mode",
    "num_iterations",
    "epsilon_low",
    "epsilon_high",
    "importance_sampling_level",
    "top_entropy_quantile",
)
# The trainer's method that picks the high-entropy tokens its loss keeps (`top_entropy_quantile`); wrapped to read its
# mask where the trainer has it.
ENTROPY_MASK_METHOD = "get_high_entropy_mask"
# The loss types whose policy term is PPO's clipped one, and CISPO's (which clips the weight, not the gradient): TRL
# logs `clip_ratio/*` for the first, `cispo_clip_ratio` for the second.
PPO_CLIPPED_LOSSES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
CISPO_LOSS = "cispo"
# The sampling settings, the trainer's fields of the same name, which `generation_kwargs` override.
SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "min_p")
# Fields TRL renamed: the logger reads the first of each that the trainer has, and needs one. TRL 0.29 has the second
# names (its `vllm_importance_sampling_cap` is an upper bound with no lower one); TRL 1.16 the first, and beside the
# upper bound `vllm_importance_sampling_clip_min`, read where the trainer has it.
CONTINUOUS_BATCHING_FIELDS = ("use_transformers_continuous_batching", "use_transformers_paged")
IMPORTANCE_SAMPLING_MAX_FIELDS = ("vllm_importance_sampling_clip_max", "vllm_importance_sampling_cap")
RENAMED_FIELDS = (CONTINUOUS_BATCHING_FIELDS, IMPORTANCE_SAMPLING_MAX_FIELDS)
# Since TRL 1.15 a completion also ends at the generation config's EOS tokens; before, only at the tokenizer's.
EOS_TOKEN_IDS_SINCE = Version("1.15")
# The keys a log_extra column may not have: the line format's, and the dataset's image column (it becomes images).
RESERVED_KEYS = FORMAT_KEYS | {"image"}
# Keys of the training arguments (at any depth) left out of the metadata: they may hold credentials.
SECRET_KEY = re.compile(r"(?:^|_)token$|password|secret|api_?key|access_key|credential|(?:^|_)auth(?:$|_|orization)", re.IGNORECASE)


@dataclasses.dataclass
class LossPass:
    """A loss pass over samples the logger waits for: their ids in the batch's order, the batch, the index of the
    pass in its optimizer step, and what the pass computes that the logger reads (set by the hooks it calls)."""

    samples: list[int]
    inputs: dict
    micro_batch: int
    logps: torch.Tensor | None = None  # the policy's per-token log-probs, as the loss takes them (with their graph)
    entropies: torch.Tensor | None = None
    entropy_mask: torch.Tensor | None = None  # TRL's `get_high_entropy_mask`, where the loss used one


def rollout_logging_enabled() -> bool:
    """Whether `SAVE_ROLLOUT_DATA` is set to true, 1 or yes (any case)."""
    return _flag(os.environ.get(ENABLE_VARIABLE, ""))


def _flag(value) -> bool:
    """A switch given as a bool, or as text (a config file's "false"): true, 1 or yes (any case) is on."""
    return value.strip().lower() in {"true", "1", "yes"} if isinstance(value, str) else bool(value)


class RolloutLoggerCallback(TrainerCallback):
    r"""
    A [`~transformers.TrainerCallback`] that saves every completion a [`~trl.GRPOTrainer`] samples, with its per-token
    log-probs, in the JSONL format the RL Logging Board reads. It does nothing unless enabled (`SAVE_ROLLOUT_DATA`).

    Each rank appends to its own `<save_dir>/<exp_name>/rollout_data_rank_<rank>_<launch id>.jsonl`, where the launch id
    is the UTC start time `YYYYmmddTHHMMSSZ` chosen by rank 0, so a resumed run writes new files. Rank 0 also writes
    `rollout_meta_<launch id>.json` with the run's settings and the training arguments (`trainer_config`, without
    tokens, passwords, secrets and API keys). Each line is one sampled completion, tagged with `step`: the optimizer
    step it was generated for (`state.global_step + 1`, the `step` of TRL's logged metrics), and with `micro_batch`
    when that step trained it: the index of the loss pass (`compute_loss` call) of the step, on its rank, that did. TRL
    logs `kl` as the mean over a step's loss passes of each pass's token mean, so the lines' `micro_batch` is what
    recomputes it. Lines are written once per optimizer step by a background thread; an I/O error costs one warning,
    never the training. Evaluation batches are not logged.

    The trainer's own numbers go, from rank 0, to `rollout_metrics_<launch id>.jsonl`: each event it logs (training and
    evaluation metrics, the final summary; its `log_history` entry) as `{"step", "kind": "train" or "eval", **logs}`,
    and each checkpoint save as `{"step", "kind": "checkpoint", "checkpoint", "best_model_checkpoint", "best_metric"}`.
    As in rollout lines, NaN and ±inf are written as `null`: every line stays strict JSON, and null reads as no value.

    Vision-language models: the prompt text keeps the model's image placeholder tokens, and each line of a batch with
    images lists its sample's images in the order the prompt shows them (the dataset's `images` or `image` column,
    placed into the prompt's image placeholders as TRL places them, and image parts `{"type": "image", "image": ...}`
    already in a conversational prompt): `"images": [{"path": "images/<content hash>.png", "width": W, "height": H}]`,
    the path relative to the run folder, the original size. Each distinct image is written once into
    `<run_dir>/images/` by the writer thread (see [`ImageFiles`]: at most 768 px on its longest side, `.jpg` when it
    was decoded from a JPEG, else `.png`). An image that is not a PIL image (a path or URL) is listed with a null path
    and a `note`. A line's `turns` (below) list the images of each turn the same way: those of a prompt message, and
    those a tool returned (content parts `{"type": "image", "image": ...}`, as TRL's tool loop passes them on).

    Tool calls (TRL's `tools=`): each line of a batch where TRL marks the completion tokens a tool wrote has
    `"tool_mask"`, one 1 (sampled by the policy) or 0 (a tool's result) per token of `response_tokens`, and its
    `logprobs`, `ref_logprobs` and `entropies` are null at the 0s: the policy did not sample those tokens. A truncated
    completion TRL masks (`mask_truncated_completions`) has no `tool_mask`: TRL zeroes its mask, and the mask before
    that is not kept anywhere the logger can read.

    The sampler's log-probs (`sampler_logprobs`, one per completion token): with vLLM (or a `rollout_func`), those
    TRL has (`sampling_per_token_logps`); with transformers' `generate`, recorded as it samples, from the very scores
    it samples each token from (after temperature, top-k, top-p and min-p), by a recorder that `generate`'s logits
    processors hand their scores to, put on the generating model instance during each training generation batch (see
    [`GenerateLogprobs`]). Tool-calling runs (`generate` is called again after each tool result), transformers'
    continuous batching and greedy decoding get none (one warning). Where TRL corrects for the difference between
    vLLM's log-probs and its own (`use_vllm` and `vllm_importance_sampling_correction`), each line has `is_ratio`: the
    ratio TRL applied, per token (in its sequence modes the sample's ratio at each token), after its truncation or
    masking. The metadata names the sampler and its settings (`sampler`) and TRL's correction (`importance_sampling`:
    its mode and clip bounds, only when applied).

    Where `generate` truncates (top-k, top-p, min-p, typical, epsilon, eta), the same recorder also logs
    `sampler_kept_logmass`: the log of the mass the truncation kept at each token's position (no key where nothing
    truncates, nor with vLLM, which returns none).

    Reward functions' `log_extra(column, values)` (TRL versions that pass it; not 0.29): this rank's values of each
    column become a key of its lines, `extra_<column>` where the column is named like a key of the line format
    (`extra_` again while that name is taken: a column `step` beside one named `extra_step` is `extra_extra_step`), as
    plain JSON, null for the samples a column has no value for. Their `log_metric(name, value)` values reach the
    metrics file like the trainer's other logged metrics.

    A callback never sees the batch, so this one wraps methods of the trainer instance it is given (TRL has no public
    API for per-token data); the trainer's class and TRL itself are left untouched. The log-probs are the ones TRL's
    loss uses, so nothing is computed twice: TRL's `old_per_token_logps` when it computes them at generation, otherwise
    those of the loss pass's first pass over each sample. The entropies come from that first pass; the pass's values
    are kept only when it runs at the weights that sampled the sample (no optimizer step in between). A truncated
    completion that TRL masks (`mask_truncated_completions`) is logged with its tokens but no per-token values.

    Supports TRL >=0.29,<2. With logging enabled, a trainer that lacks a method or field the logger reads, or whose
    methods no longer take the arguments it reads, raises a `RuntimeError` here, before any training.

    Usage:
    ```python
    >>> trainer = GRPOTrainer(...)
    >>> trainer.add_callback(RolloutLoggerCallback(trainer=trainer))
    >>> trainer.train()
    ```

    Args:
        trainer ([`~trl.GRPOTrainer`]):
            The trainer (or an instance of a subclass) whose rollouts to save.
        enabled (`bool`, *optional*):
            Whether to save rollouts. Defaults to the environment variable `SAVE_ROLLOUT_DATA` being `true`, `1` or
            `yes` (any case). When disabled, no method of the trainer is wrapped and nothing is written.
        save_dir (`str` or `os.PathLike`, *optional*):
            The root folder, which holds one folder per experiment. Defaults to the environment variable
            `ROLLOUT_SAVE_DIR`, else `<output_dir>/rollout_samples`.
        exp_name (`str`, *optional*):
            The experiment's folder name under `save_dir`. Defaults to the environment variable `EXP_NAME`, else the
            training arguments' `run_name`, else the name of `output_dir`.
        sampler_logprobs (`bool`, *optional*, defaults to `True`):
            Whether to log the sampler's log-prob of each completion token (`sampler_logprobs`). With transformers'
            `generate` this records them while it samples: a log-softmax over the vocabulary per generated token (on
            the tiny example, 2 CPU cores: about 1 % of an optimizer step, see docs/logger.md).
        loss_pass_values (`bool`, *optional*, defaults to `True`):
            Whether each loss pass's per-token values go into `loss_passes` (the policy ratio, PPO's clip, the entropy
            mask and the update weight -∂loss/∂logp: a gradient through the loss's last operations, and four copies of
            batch × tokens values per pass). Off, each pass is still listed with its step and micro-batch.
        summaries (`bool`, *optional*, defaults to `True`):
            Whether to write, beside each rank file, its lines' summaries and texts files: the board's index of the
            lines, made on the writing thread, so that the board opens the run without parsing them. They cost that
            thread about 0.04 ms of CPU per sample (0.6 ms per 16-sample step on 2 CPU cores, see docs/logger.md); off,
            the board parses the lines when it opens the run.
    """

    def __init__(
        self,
        trainer,
        enabled: bool | None = None,
        save_dir: str | os.PathLike | None = None,
        exp_name: str | None = None,
        sampler_logprobs: bool = True,
        loss_pass_values: bool = True,
        summaries: bool = True,
    ):
        self.trainer = trainer
        self.enabled = rollout_logging_enabled() if enabled is None else _flag(enabled)
        self.sampler_logprobs = _flag(sampler_logprobs)
        self.loss_pass_values = _flag(loss_pass_values)
        self.summaries = _flag(summaries)
        self.save_dir = _setting(save_dir, SAVE_DIR_VARIABLE)  # None: `<output_dir>/rollout_samples`
        self.exp_name = _setting(exp_name, EXP_NAME_VARIABLE)  # None: the run name, else the output folder's name
        self.run_dir: Path | None = None
        self.launch_id: str | None = None
        self._writer: JsonlWriter | None = None
        self._metrics_writer: JsonlWriter | None = None  # rank 0's, for the trainer's logged events
        self._warned: set[str] = set()
        self._reset_batches()
        if self.enabled:
            _check_trainer(trainer)
            self._tokenizer = _tokenizer(trainer.processing_class)
            self._stop_ids = _stop_token_ids(trainer, self._tokenizer)
            # TRL's private methods' arguments, read by name: a renamed parameter fails here, not mid-run.
            self._batch_inputs_of = _argument_reader(trainer, "_generate_and_score_completions", "inputs")
            self._completion_ids_of = _argument_reader(trainer, "_calculate_rewards", "completion_ids_list")
            self._prompts_of = _argument_reader(trainer, "_calculate_rewards", "prompts")
            self._completions_of = _argument_reader(trainer, "_calculate_rewards", "completions")
            self._loss_inputs_of = _argument_reader(trainer, "compute_loss", "inputs")
            self._generate_logprobs = self._generate_logprobs_recorder() if self.sampler_logprobs else None
            self._install_hooks()

    def _reset_batches(self) -> None:
        self._generations = 0  # generation batches of this launch; part of each group id
        self._next_sample = 0  # the id the next sample of this rank gets
        self._waiting: dict[int, tuple[dict, bool]] = {}  # sample id -> (record, per-token values to come), until
        # its first loss pass
        self._updating: dict[int, tuple[dict, bool]] = {}  # the same, after its first loss pass, until its last
        self._finished: list[dict] = []  # records whose lines are written at the end of the optimizer step
        self._batch_inputs: list[dict] | None = None  # the dataset rows of the batch being generated
        self._scored: tuple | None = None  # `_calculate_rewards`'s completion ids, result and the reward functions'
        # `log_extra` columns, during a generation
        self._loss_pass: LossPass | None = None  # what the loss pass in progress reads, for records it completes
        self._micro_batches = 0  # the training loss passes of the current optimizer step so far

    # ------------------------------------------------------------------ hooks

    def _install_hooks(self) -> None:
        self._wrap("_generate_and_score_completions", self._around_generation)
        self._wrap("_calculate_rewards", self._around_rewards)
        self._wrap("_get_per_token_logps_and_entropies", self._around_per_token_logps)
        self._wrap("compute_loss", self._around_loss)
        if hasattr(self.trainer, ENTROPY_MASK_METHOD):
            self._wrap(ENTROPY_MASK_METHOD, self._around_entropy_mask)

    def _wrap(self, name: str, around: Callable) -> None:
        """Replaces `trainer.<name>` on this instance only by `around(original, *args, **kwargs)`."""
        original = getattr(self.trainer, name)

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            return around(original, *args, **kwargs)

        setattr(self.trainer, name, wrapper)

    def _around_generation(self, generate, *args, **kwargs):
        if not self._logging() or not self.trainer.model.training:  # evaluation batches are not logged
            return generate(*args, **kwargs)
        step = self.trainer.state.global_step + 1  # the optimizer step these samples are trained in first
        self._scored = None
        self._batch_inputs = self._batch_inputs_of(args, kwargs)
        # TRL generates again once every sample of the last batch had its num_iterations loss passes; a record still
        # waiting for one (a pass TRL skipped) is written as it is.
        self._finished.extend(_completed(record) for record, _ in self._updating.values())
        self._updating.clear()
        recording = contextlib.nullcontext()
        if self._generate_logprobs is not None:
            recording = self._generate_logprobs.recording(_generating_model(self.trainer))
        with recording:
            output = generate(*args, **kwargs)
        self._safely(self._start_records, output, step)
        self._scored = self._batch_inputs = None
        return output

    def _around_rewards(self, calculate_rewards, *args, **kwargs):
        # TRL's buffer of the reward functions' `log_extra` columns, emptied after each generation's rewards
        pending = getattr(self.trainer, "_pending_extra_logs", None)
        logged = {column: len(values) for column, values in pending.items()} if pending is not None else {}
        rewards_per_func = calculate_rewards(*args, **kwargs)
        if self._writer is not None:
            extras = {column: values[logged.get(column, 0) :] for column, values in (pending or {}).items()}
            conversation = (self._prompts_of(args, kwargs), self._completions_of(args, kwargs))
            self._scored = (self._completion_ids_of(args, kwargs), rewards_per_func, extras, conversation)
        return rewards_per_func

    def _around_loss(self, compute_loss, *args, **kwargs):
        micro_batch = self._micro_batches
        if self.trainer.model.training:  # an evaluation's loss pass is none of the optimizer step's
            self._micro_batches += 1
        inputs = self._loss_inputs_of(args, kwargs)
        samples = inputs.get(SAMPLE_KEY)
        loss_pass = None
        if samples is not None and (self._waiting or self._updating):
            samples = samples.tolist()
            if any(sample in self._waiting or sample in self._updating for sample in samples):
                loss_pass = LossPass(samples, inputs, micro_batch)
        self._loss_pass = loss_pass
        try:
            loss = compute_loss(*args, **kwargs)
        finally:
            self._loss_pass = None
        if loss_pass is not None:
            if loss_pass.logps is None:  # the loss computed no per-token log-probs (e.g. a Liger kernel loss)
                self._warn_once("loss-logps", "the loss pass computed no per-token log-probs that could be logged")
            self._safely(self._finish_pass, loss_pass, loss)
        return loss

    def _around_per_token_logps(self, get_per_token_logps, *args, **kwargs):
        result = get_per_token_logps(*args, **kwargs)
        loss_pass = self._loss_pass
        if loss_pass is not None and loss_pass.logps is None:  # only the loss pass's first call is the policy's
            loss_pass.logps, loss_pass.entropies = result[:2]  # since TRL 1.7 an auxiliary loss follows
        return result

    def _around_entropy_mask(self, get_high_entropy_mask, *args, **kwargs):
        entropy_mask = get_high_entropy_mask(*args, **kwargs)
        if self._loss_pass is not None and self._loss_pass.entropy_mask is None:
            self._loss_pass.entropy_mask = entropy_mask
        return entropy_mask

    # ------------------------------------------------------------------ records

    def _start_records(self, output: dict, step: int) -> None:
        """Builds one record per sample of a generated batch; they wait for the loss pass's log-probs and entropies."""
        completion_mask = output["completion_mask"].bool()
        lengths = completion_mask.sum(dim=1).tolist()
        count = len(lengths)
        sampled_ids, rewards, rewards_per_func, extras = self._scored_samples(count)
        # Per-token values only where the mask holds every sampled token: TRL's `mask_truncated_completions` masks a
        # truncated completion out of attention, so its log-probs and entropies were computed without it.
        per_token = [length == len(ids) for length, ids in zip(lengths, sampled_ids)]
        generated = (output.get("old_per_token_logps"), output.get("ref_per_token_logps"))
        logprobs, ref_logprobs, sampler_logprobs, sampler_kept_logmass, is_ratio = (
            _per_token_rows(values, completion_mask, lengths, per_token)
            for values in (*generated, *self._sampler_values(output, completion_mask))
        )
        rank = self.trainer.accelerator.process_index
        images = _prompt_images(self._batch_inputs, count)
        tool_mask = output.get("tool_mask")
        columns = {  # in the order of a line's keys (`LINE_KEYS`); None values are left out of the line
            "prompt": self._decode_prompts(output["prompt_ids"], output["prompt_mask"].bool()),
            **({} if images is None else {"images": images}),  # objects: the writer thread writes their files
            "response": self._tokenizer.batch_decode(sampled_ids, skip_special_tokens=True),  # as TRL decodes them
            "response_tokens": self._completion_tokens(sampled_ids),
            **({} if tool_mask is None else {"tool_mask": _tool_masks(tool_mask, completion_mask, lengths, per_token)}),
            "logprobs": logprobs,
            "sampler_logprobs": sampler_logprobs,
            "sampler_kept_logmass": sampler_kept_logmass,
            "is_ratio": is_ratio,
            "ref_logprobs": ref_logprobs,
            "entropies": [None] * count,
            "reward": rewards,
            "rewards_per_func": rewards_per_func,
            "advantage": _sample_advantages(output["advantages"], completion_mask),
            "group_id": self._group_ids(rank * count, count),
            "truncated": [bool(ids) and ids[-1] not in self._stop_ids for ids in sampled_ids],
            "rank": [rank] * count,
            "step": [step] * count,
            "micro_batch": [None] * count,
            "loss_passes": [None] * count,
            **self._trajectories(sampled_ids, tool_mask, completion_mask, lengths, per_token),
        }
        # The columns named like no key of the format first, under their names: a column renamed `extra_<name>` (or
        # `extra_` again while that is taken) never takes the name of one of them, in whatever order they were logged.
        for column, values in sorted(extras.items(), key=lambda item: str(item[0]) in RESERVED_KEYS):
            values = [_plain(value) for value in values[:count]] + [None] * (count - len(values))
            key = str(column)
            while key in RESERVED_KEYS or key in columns:
                key = "extra_" + key
            columns[key] = values
        records = [dict(zip(columns, values)) for values in zip(*columns.values())]
        self._await_loss_pass(output, records, per_token)

    def _trajectories(self, sampled_ids, tool_mask, completion_mask, lengths, per_token) -> dict[str, list]:
        """With TRL's tools (`tools`, or an `environment_factory`'s), each sample's turns (`turns`: its prompt's
        messages, then the completion's messages as TRL's tool loop made them, each policy turn and each round of tool
        results with its span of the completion's tokens) and why it ended (`stop_reason`); nothing without tools. A
        rollout_func's env_mask also makes a tool mask, over a completion TRL keeps as one message: no turns then."""
        if tool_mask is None or not uses_tools(self.trainer):
            return {}
        prompts, completions = self._scored[3]
        masks = _tool_masks(tool_mask, completion_mask, lengths, per_token)
        rounds = getattr(self.trainer, "max_tool_calling_iterations", None) or math.inf
        trajectories = [
            _trajectory(prompt, completion, mask, ids and ids[-1] not in self._stop_ids, rounds)
            for prompt, completion, mask, ids in zip(prompts, completions, masks, sampled_ids)
        ]
        return {"turns": [turns for turns, _ in trajectories], "stop_reason": [reason for _, reason in trajectories]}

    def _sampler_values(self, output: dict, completion_mask: torch.Tensor) -> tuple:
        """The sampler's per-token log-probs of the batch (TRL's from vLLM or a rollout function, else those recorded
        from `generate`; None when the option is off or none were recorded), the log of the mass `generate`'s
        truncation (top-k, top-p...) kept at each token's position (None where nothing truncated, and with vLLM, which
        returns none), and the importance-sampling ratio TRL applies for the difference, one per token (a
        sequence-level ratio repeated; None when TRL applies none)."""
        sampler_logprobs = output.get("sampling_per_token_logps") if self.sampler_logprobs else None
        kept_logmass = None
        if sampler_logprobs is None and self._generate_logprobs is not None:
            sampler_logprobs, kept_logmass, problem = self._generate_logprobs.logprobs(
                output["completion_ids"], completion_mask
            )
            if sampler_logprobs is None:
                self._warn_once("sampler-logprobs", f"no sampler_logprobs for a generation batch: {problem}")
            elif problem:
                self._warn_once("sampler-kept-logmass", f"no sampler_kept_logmass: {problem}")
        is_ratio = output.get("importance_sampling_ratio")  # (batch, tokens), or (batch, 1) in TRL's sequence modes
        return sampler_logprobs, kept_logmass, None if is_ratio is None else is_ratio.expand_as(completion_mask)

    def _generate_logprobs_recorder(self) -> GenerateLogprobs | None:
        """What records the sampler's log-probs where TRL samples each generation batch with one `generate` call and
        keeps none itself; None where TRL has them (vLLM, a rollout function) or none can be recorded (warned)."""
        trainer = self.trainer
        if trainer.use_vllm or trainer.rollout_func is not None:
            return None
        unrecorded = "tool calls (TRL calls `generate` again after each tool result)" if trainer.tools else None
        if _first_field(trainer, CONTINUOUS_BATCHING_FIELDS):
            unrecorded = "transformers' continuous batching (each step samples a changing mix of requests)"
        if unrecorded:
            self._warn_once("sampler-logprobs", f"no sampler_logprobs are recorded with {unrecorded}")
            return None
        return GenerateLogprobs(_generating_model(trainer))

    def _scored_samples(self, count: int) -> tuple[list[list[int]], list[float], list[dict[str, float | None]], dict]:
        """This rank's rows of what `_calculate_rewards` saw and returned: every sampled token of each completion (even
        those a mask hides), its weighted reward (NaN when no function scored it) and each function's score; and the
        columns the reward functions logged with `log_extra`."""
        if self._scored is None:
            raise RuntimeError("TRL's generation did not call `_calculate_rewards`")
        completion_ids, gathered, extras, _ = self._scored
        trainer = self.trainer
        if gathered.size(0) != count * trainer.accelerator.num_processes:
            raise RuntimeError(f"TRL's rewards have {gathered.size(0)} rows for {count} samples per rank")
        # TRL gathers the rewards of all ranks; each rank's samples are consecutive rows.
        rank = trainer.accelerator.process_index
        per_func = gathered[rank * count : (rank + 1) * count].float().cpu()
        weighted = (per_func * trainer.reward_weights.float().cpu()).nansum(dim=1)
        weighted[per_func.isnan().all(dim=1)] = float("nan")  # TRL's unscorable samples
        names = list(trainer.reward_func_names)
        rewards_per_func = [
            {name: None if math.isnan(score) else score for name, score in zip(names, scores)}
            for scores in per_func.tolist()
        ]
        return [list(ids) for ids in completion_ids], weighted.tolist(), rewards_per_func, extras

    def _decode_prompts(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> list[str]:
        """Each row's prompt text, special tokens included; each distinct prompt decoded once (TRL repeats each
        num_generations times)."""
        rows = _split(prompt_ids[prompt_mask].tolist(), prompt_mask.sum(dim=1).tolist())
        unique = list(dict.fromkeys(map(tuple, rows)))
        texts = self._tokenizer.batch_decode(unique, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        text_of = dict(zip(unique, texts))
        return [text_of[tuple(ids)] for ids in rows]

    def _completion_tokens(self, sampled_ids: list[list[int]]) -> list[list[str]]:
        tokens = self._tokenizer.convert_ids_to_tokens([id_ for ids in sampled_ids for id_ in ids])
        return _split(tokens, [len(ids) for ids in sampled_ids])

    def _group_ids(self, first_row: int, count: int) -> list[str]:
        """The group of each of `count` rows from the global batch's `first_row` on: TRL repeats each prompt
        num_generations times in the global batch, then splits it across ranks."""
        rows = range(first_row, first_row + count)
        return [f"{self.launch_id}-{self._generations}-{row // self.trainer.num_generations}" for row in rows]

    def _await_loss_pass(self, output: dict, records: list[dict], per_token: list[bool]) -> None:
        """Holds the records until the loss pass completes them (its micro-batch, and the per-token values where
        `per_token`), tagging the batch so that it finds them."""
        self._waiting.update(zip(itertools.count(self._next_sample), zip(records, per_token)))
        output[SAMPLE_KEY] = torch.arange(self._next_sample, self._next_sample + len(records))
        self._next_sample += len(records)
        self._generations += 1

    def _finish_pass(self, loss_pass: LossPass, loss: torch.Tensor) -> None:
        """Adds the loss pass to its samples' records: at a sample's first pass, its micro-batch index, log-probs and
        entropies, where they describe the policy that sampled it; at each pass, what the pass did with each token
        (`loss_passes`). A record is done after its `num_iterations`-th pass."""
        trainer = self.trainer
        # A record's `step` is `global_step + 1` at generation: an equal step here means no optimizer step since. A
        # sample trained in a later step of its generation batch gets no loss-pass values (TRL's old log-probs stay)
        # and no micro-batch: its line's step did not train it.
        step = trainer.state.global_step + 1
        first = [sample in self._waiting for sample in loss_pass.samples]
        entries = [self._waiting.pop(sample, None) or self._updating.pop(sample, None) for sample in loss_pass.samples]
        mask = loss_pass.inputs["completion_mask"].bool()
        lengths = mask.sum(dim=1).tolist()
        logps = entropies = None
        sampling_policy = [is_first and entry[0]["step"] == step for is_first, entry in zip(first, entries)]
        if loss_pass.logps is not None and any(sampling_policy):
            logps = _masked_rows(loss_pass.logps.detach(), mask, lengths)
            entropies = None if loss_pass.entropies is None else _masked_rows(loss_pass.entropies.detach(), mask, lengths)
        values = self._update_values(loss_pass, loss) if self.loss_pass_values else {}
        updates = {name: _masked_rows(tensor, mask, lengths) for name, tensor in values.items()}
        for position, entry in enumerate(entries):
            if entry is None:  # a sample of a batch already written
                continue
            record, per_token = entry
            if sampling_policy[position]:
                record["micro_batch"] = loss_pass.micro_batch
                if per_token and logps is not None:
                    if record["logprobs"] is None:
                        record["logprobs"] = logps[position]
                    if entropies is not None:
                        record["entropies"] = entropies[position]
            passes = record["loss_passes"] = record["loss_passes"] or []
            tokens = {name: rows[position] for name, rows in updates.items()} if per_token else {}
            passes.append({"step": step, "micro_batch": loss_pass.micro_batch, **tokens})
            if len(passes) < trainer.num_iterations:
                self._updating[loss_pass.samples[position]] = entry
            else:
                self._finished.append(_completed(record))

    def _update_values(self, loss_pass: LossPass, loss: torch.Tensor) -> dict[str, torch.Tensor]:
        """What the loss pass did with each token (batch × completion tokens; `LOSS_PASS_TOKEN_KEYS`), from its own
        tensors: the ratio and clipping as TRL's loss computes them from the pass's log-probs, the entropy mask TRL
        picked, and the gradient of the loss with respect to the log-probs (through the loss's last operations
        only, not the model)."""
        trainer, inputs, logps = self.trainer, loss_pass.inputs, loss_pass.logps
        if logps is None:
            return {}
        mask = inputs["completion_mask"] * inputs["tool_mask"] if "tool_mask" in inputs else inputs["completion_mask"]
        values = {}
        old_logps = inputs.get("old_per_token_logps")
        log_ratio = logps.detach() - (logps.detach() if old_logps is None else old_logps)
        if trainer.importance_sampling_level == "sequence":
            log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
        ratio = torch.exp(log_ratio).expand_as(logps)
        if old_logps is not None:
            values["policy_ratio"] = ratio
        advantages = inputs["advantages"]
        advantages = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
        if trainer.loss_type in PPO_CLIPPED_LOSSES:
            delta = getattr(trainer.args, "delta", None)
            clipped_ratio = ratio if delta is None else ratio.clamp(max=delta)  # TRL's metric reads the capped ratio
            low = (clipped_ratio < 1 - trainer.epsilon_low) & (advantages < 0)
            high = (clipped_ratio > 1 + trainer.epsilon_high) & (advantages > 0)
            values["clipped"] = high.int() - low.int()
        elif trainer.loss_type == CISPO_LOSS:
            values["clipped"] = ((ratio > trainer.epsilon_high) & (advantages > 0)).int()
        if loss_pass.entropy_mask is not None:
            values["entropy_mask"] = loss_pass.entropy_mask.int()
        if loss.requires_grad and logps.requires_grad:
            (gradient,) = torch.autograd.grad(loss, logps, retain_graph=True, allow_unused=True)
            if gradient is not None:
                values["update_weight"] = -gradient
        return values

    # ------------------------------------------------------------------ training events

    def on_train_begin(self, args, state, control, **kwargs):
        root = self.save_dir or Path(args.output_dir) / ROLLOUTS_FOLDER
        name = self.exp_name or args.run_name or Path(args.output_dir).resolve().name
        self.run_dir = Path(root) / _folder_name(name)
        accelerator = self.trainer.accelerator
        # Every rank's callback takes part, enabled or not: a collective only the enabled ranks joined would hang the
        # training (enabled=accelerator.is_main_process, or SAVE_ROLLOUT_DATA set in some ranks' environments).
        self.launch_id = _shared_launch_id(self.run_dir, accelerator.is_main_process)
        if not self.enabled:
            return
        self._reset_batches()
        path = self.run_dir / RANK_FILE.format(rank=accelerator.process_index, launch=self.launch_id)
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._writer = JsonlWriter(
                path,
                self._warn_once,
                prepare=ImageFiles(self.run_dir, self._warn_once).resolve,
                summaries=path.with_name(path.name + SUMMARIES_SUFFIX) if self.summaries else None,
            )
            if state.is_world_process_zero:
                metrics_path = self.run_dir / METRICS_FILE.format(launch=self.launch_id)
                self._metrics_writer = JsonlWriter(metrics_path, self._warn_once)
        except OSError as error:
            self._warn_once("io", f"cannot write rollout data to {path} ({error}); training goes on without it")
            self._stop()
            return
        if state.is_world_process_zero:
            self._safely(self._write_meta, args)
            print(f"RLLoggingBoard: Saving rollout data to {self.run_dir}", flush=True)

    def on_step_end(self, args, state, control, **kwargs):
        self._micro_batches = 0
        if self._logging():
            self._writer.write(self._finished)
            self._finished = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._logging_metrics():
            # The trainer's own entry of this event where it has one: a callback before this one may have taken keys
            # out of `logs` (transformers' progress callback takes `total_flos`).
            entry = state.log_history[-1] if state.log_history else {}
            if entry.get("step") == state.global_step and logs.items() <= entry.items():
                logs = {key: value for key, value in entry.items() if key != "step"}
            metrics = [key for key in logs if key != "epoch"]  # an evaluation's are all eval_<name> (Trainer.evaluate)
            kind = "eval" if metrics and all(key.startswith("eval_") for key in metrics) else "train"
            logged = {(f"{key} (logged)" if key in ("step", "kind") else key): value for key, value in logs.items()}  # never the line's own
            self._metrics_writer.write([{"step": state.global_step, "kind": kind, **_plain(logged)}])

    def on_save(self, args, state, control, **kwargs):
        """Marks the checkpoint, and the best one so far, so that the board can show them on the step axis."""
        if self._logging_metrics():
            line = {
                "step": state.global_step,
                "kind": "checkpoint",
                "checkpoint": f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}",
                "best_model_checkpoint": state.best_model_checkpoint,
                "best_metric": state.best_metric,
            }
            self._metrics_writer.write([_plain(line)])

    def on_train_end(self, args, state, control, **kwargs):
        if not self._logging():
            return
        # Samples generated but never trained on (the run stopped mid generation batch) still get their line.
        self._finished.extend(_completed(record) for record, _ in (*self._waiting.values(), *self._updating.values()))
        self._writer.write(self._finished)
        self._stop()
        self._reset_batches()

    # ------------------------------------------------------------------ helpers

    def _write_meta(self, args) -> None:
        trainer = self.trainer
        model_config = getattr(trainer.model, "config", None)
        meta = {
            "launch_id": self.launch_id,
            "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "trl_version": trl.__version__,
            "model_name": getattr(model_config, "_name_or_path", None),
            "world_size": trainer.accelerator.num_processes,
            "beta": trainer.beta,
            "num_generations": trainer.num_generations,
            "temperature": trainer.temperature,
            "loss_type": trainer.loss_type,
            "scale_rewards": trainer.scale_rewards,
            "reward_funcs": list(trainer.reward_func_names),
            "reward_weights": trainer.reward_weights.tolist(),
            "learning_rate": args.learning_rate,
            "max_completion_length": args.max_completion_length,
            "num_iterations": args.num_iterations,
            "steps_per_generation": args.steps_per_generation,
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
            "per_device_train_batch_size": args.per_device_train_batch_size,
            "seed": args.seed,
            SAMPLER_META_KEY: _sampler_settings(trainer, args),
            **_importance_sampling_settings(trainer),
            LOSS_META_KEY: {
                "epsilon_low": trainer.epsilon_low,
                "epsilon_high": trainer.epsilon_high,
                "delta": getattr(args, "delta", None),
                "importance_sampling_level": trainer.importance_sampling_level,
                "top_entropy_quantile": trainer.top_entropy_quantile,
            },
            "trainer_config": _without_secrets(args.to_dict()),
        }
        path = self.run_dir / META_FILE.format(launch=self.launch_id)
        try:
            path.write_text(json.dumps(_plain(meta), indent=2) + "\n", encoding="utf-8")
        except OSError as error:
            # The kind of the writer's I/O errors: a full disk is one warning, so this one says what a later one would.
            self._warn_once("io", f"cannot write {path} ({error}); the rollout data may be missing or cut short too")

    def _safely(self, function: Callable, *args) -> None:
        """Runs a logging step; an unexpected error stops the logging with one warning instead of the training."""
        try:
            function(*args)
        except Exception as error:
            self._warn_once(
                "internal", f"rollout logging stopped after an unexpected error ({error!r}); training goes on"
            )
            self._stop()

    def _logging(self) -> bool:
        """Whether logging goes on; once a writer has failed (it warned), it stops: no record is built in vain."""
        if any(writer is not None and writer.failed for writer in (self._writer, self._metrics_writer)):
            self._stop()
        return self._writer is not None

    def _logging_metrics(self) -> bool:
        return self._logging() and self._metrics_writer is not None

    def _stop(self) -> None:
        """Stops logging for the rest of this launch, writing what is queued; the hooks stay but only call through."""
        for writer in (self._writer, self._metrics_writer):
            if writer is not None:
                writer.close()
        self._writer = self._metrics_writer = None
        self._waiting.clear()
        self._updating.clear()
        self._finished = []

    def _warn_once(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            logger.warning(f"RLLoggingBoard: {message}")


def _setting(value, variable: str):
    """An argument given to the callback, else its environment variable (unless empty), else None."""
    return value if value is not None else (os.environ.get(variable) or None)


def _check_trainer(trainer) -> None:
    """Raises if the trainer lacks a method or field the logger reads: TRL changed in a way this logger does not know,
    and it would log wrong or nothing."""
    needed = HOOKED_METHODS + TRAINER_FIELDS + SAMPLING_FIELDS
    needed += ("eos_token_ids",) if TRL_VERSION >= EOS_TOKEN_IDS_SINCE else ()
    missing = [name for name in needed if not hasattr(trainer, name)]
    missing += [" or ".join(names) for names in RENAMED_FIELDS if not any(hasattr(trainer, name) for name in names)]
    if missing:
        raise _trl_drift(trainer, f"has no {', '.join(f'`{name}`' for name in missing)}")


def _argument_reader(trainer, method: str, parameter: str) -> Callable[[tuple, dict], Any]:
    """A function of a call's `(args, kwargs)` to `trainer.<method>` that returns the argument it takes as `parameter`,
    matched by name, so that TRL reordering its parameters cannot make the logger read another one. A wrapper that
    takes only `*args, **kwargs` (a profiler's, a test's) passes them on: they are read as the class's method takes
    them."""
    signature = inspect.signature(getattr(trainer, method))
    kinds = {item.kind for item in signature.parameters.values()}
    if kinds == {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}:
        signature = inspect.signature(getattr(type(trainer), method).__get__(trainer))
    if parameter not in signature.parameters:
        raise _trl_drift(trainer, f"has a `{method}{signature}` without the parameter `{parameter}`")
    return lambda args, kwargs: signature.bind(*args, **kwargs).arguments[parameter]


def _trl_drift(trainer, problem: str) -> RuntimeError:
    return RuntimeError(
        f"RolloutLoggerCallback cannot log this run: {type(trainer).__name__} (TRL {trl.__version__}) {problem}. "
        f"The logger supports TRL {SUPPORTED_TRL}; pass enabled=False or set SAVE_ROLLOUT_DATA=false to train "
        "without it."
    )


def _tokenizer(processing_class):
    """The tokenizer, also of a vision-language model's processor, as TRL takes it."""
    return processing_class.tokenizer if isinstance(processing_class, ProcessorMixin) else processing_class


def _stop_token_ids(trainer, tokenizer) -> set[int]:
    """The tokens that end a completion that was not cut at `max_completion_length`: TRL's EOS tokens, and padding."""
    eos_token_ids = trainer.eos_token_ids if TRL_VERSION >= EOS_TOKEN_IDS_SINCE else [tokenizer.eos_token_id]
    return set(eos_token_ids) | {tokenizer.pad_token_id}


def _folder_name(name: str) -> str:
    """One folder name under the runs' folder (the board lists folders): path separators and NUL become underscores, and
    a name that is no folder of its own ("", ".", "..") is "run"."""
    name = re.sub(r"[/\\\x00]", "_", str(name).strip("/\\"))
    return "run" if name.strip() in ("", ".", "..") else name


def _first_field(trainer, names: tuple[str, ...]) -> Any:
    """The value of the first of a renamed field's names that the trainer has (`_check_trainer` made sure of one)."""
    return getattr(trainer, next(name for name in names if hasattr(trainer, name)))


def _generating_model(trainer):
    """The model TRL calls `generate` on: the trainer's, unwrapped as TRL unwraps it for generation; of a PEFT model,
    the base model, whose `generate` PEFT's calls."""
    model = trainer.accelerator.unwrap_model(trainer.model_wrapped)
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _sampler_settings(trainer, args) -> dict:
    """The sampler (vLLM or transformers' `generate`) and the settings it samples with: the trainer's, overridden by
    the training arguments' `generation_kwargs`, as TRL passes them to either."""
    overrides = args.generation_kwargs or {}
    settings = {name: overrides.get(name, getattr(trainer, name)) for name in SAMPLING_FIELDS}
    return {"engine": "vllm" if trainer.use_vllm else "transformers", **settings}


def _importance_sampling_settings(trainer) -> dict:
    """`{"importance_sampling": {"mode", "clip_min", "clip_max"}}` when TRL corrects for the difference between
    vLLM's log-probs and its own (`is_ratio`), else nothing. TRL 0.29 has no lower bound: its `clip_min` is null."""
    if not (trainer.use_vllm and trainer.vllm_importance_sampling_correction):
        return {}
    settings = {
        "mode": trainer.vllm_importance_sampling_mode,
        "clip_min": getattr(trainer, "vllm_importance_sampling_clip_min", None),
        "clip_max": _first_field(trainer, IMPORTANCE_SAMPLING_MAX_FIELDS),
    }
    return {IMPORTANCE_SAMPLING_META_KEY: settings}


def _per_token_rows(
    values: torch.Tensor | None, completion_mask: torch.Tensor, lengths: list[int], per_token: list[bool]
) -> list[list[float] | None]:
    """Per sample, the per-token `values` (batch × completion tokens) at its completion tokens; None for all samples
    where `values` is None, and where `per_token` says the completion mask does not cover every sampled token."""
    rows = [None] * len(lengths) if values is None else _masked_rows(values, completion_mask, lengths)
    return [row if keep else None for row, keep in zip(rows, per_token)]


def _sample_advantages(advantages: torch.Tensor, completion_mask: torch.Tensor) -> list[float]:
    """One advantage per sample: TRL's, or the completion mean of the per-token advantages a subclass may give (TRL's
    loss takes both shapes)."""
    if advantages.dim() > 1:
        advantages = (advantages * completion_mask).sum(dim=1) / completion_mask.sum(dim=1).clamp(min=1)
    return advantages.tolist()


def _completed(record: dict) -> dict:
    """The record as its line: without the keys nothing filled in (per-token values: no reference model, a sample
    never trained on or trained after an update, a truncated completion TRL masked; its tool mask then too; the
    micro-batch: a sample its step did not train; the loss passes: a sample never trained), and with null per-token
    values at the tokens a tool wrote."""
    for key in ("tool_mask", *PER_TOKEN_KEYS, "micro_batch", "loss_passes", "turns", "stop_reason"):
        if key in record and record[key] is None:
            del record[key]
    tool_mask = record.get("tool_mask")
    if tool_mask is not None and not all(tool_mask):
        sampled_only = lambda values: [value if sampled else None for value, sampled in zip(values, tool_mask)]  # noqa: E731
        for key in PER_TOKEN_KEYS:
            if key in record:
                record[key] = sampled_only(record[key])
        for loss_pass in record.get("loss_passes", ()):
            for key in LOSS_PASS_TOKEN_KEYS:
                if loss_pass.get(key) is not None:
                    loss_pass[key] = sampled_only(loss_pass[key])
    return record


def _trajectory(prompt, completion, tool_mask: list[int] | None, truncated: bool, tool_rounds: int) -> tuple:
    """A sample's turns and stop reason from TRL's conversation: the prompt's messages (no tokens), then each message
    of the completion (TRL's `completions` row: the assistant's, parsed with its tool calls, and the tools' results)
    with its span of the completion's tokens: the k-th run of sampled tokens (tool mask 1) is the k-th assistant turn,
    the k-th run of tool tokens (0) the k-th round of tool results (a round's tool turns share its span); no spans
    without a mask (a truncated completion TRL masks). (None, None) for a completion that is not a list of messages."""
    if not isinstance(completion, list) or not all(isinstance(message, dict) for message in completion):
        return None, None
    runs = {1: [], 0: []}
    for value, group in itertools.groupby(enumerate(tool_mask or []), key=lambda item: item[1]):
        positions = [position for position, _ in group]
        runs[value].append((positions[0], positions[-1] + 1))
    prompt_messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    turns = [_turn(message) for message in prompt_messages if isinstance(message, dict)]
    policy_turns = tool_rounds_seen = 0
    previous_role = None
    for message in completion:
        role = str(message.get("role"))
        turn = _turn(message)
        span = None
        if role == "assistant":
            span = runs[1][policy_turns] if policy_turns < len(runs[1]) else None
            policy_turns += 1
            calls = message.get("tool_calls") if isinstance(message.get("tool_calls"), list) else []
            calls = [function if isinstance(function := call.get("function"), dict) else {"name": function} for call in calls if isinstance(call, dict)]
            if calls:
                turn["tool_calls"] = [{"name": call.get("name"), "arguments": call.get("arguments")} for call in calls]
        elif role == "tool":
            if previous_role != "tool":
                tool_rounds_seen += 1
            span = runs[0][tool_rounds_seen - 1] if tool_rounds_seen <= len(runs[0]) else None
            turn["tool_name"] = message.get("name")
            error = _tool_error(turn["text"])
            if error is not None:
                turn["error"] = error
        if span is not None and tool_mask is not None:
            turn["token_start"], turn["token_end"] = span
        turns.append(turn)
        previous_role = role
    last = completion[-1] if completion else {}
    if truncated:
        reason = "length"
    elif last.get("role") == "assistant" and last.get("tool_calls"):  # a call TRL did not run
        reason = "tool_limit" if tool_rounds_seen >= tool_rounds else "length"  # else its result did not fit
    else:
        reason = "stop"
    return turns, reason


def _turn(message: dict) -> dict:
    """A message's role, text (its reasoning before it: parse_response's reasoning_content) and images (the image
    objects of its content's image parts; the writer thread writes their files)."""
    turn = {"role": str(message.get("role")), "text": with_reasoning(message, _message_text(message.get("content")))}
    content = message.get("content")
    images = [part["image"] for part in content if isinstance(part, dict) and part.get("type") == "image" and part.get("image") is not None] if isinstance(content, list) else []
    if images:
        turn["images"] = images
    return turn


def _message_text(content) -> str:
    """A message's content as text: a string as it is, the text parts of a list of parts (a part that is a string
    itself too; images left out)."""
    if isinstance(content, list):
        texts = (part if isinstance(part, str) else part.get("text") if isinstance(part, dict) and part.get("type") == "text" else None for part in content)
        return "".join(text if isinstance(text, str) else str(text) for text in texts if text is not None)
    return "" if content is None else str(content)


def _tool_error(text: str) -> str | None:
    """The error of a tool's result, as TRL writes a failed call's: `str({"error": message})`."""
    if not text.startswith("{'error': ") or len(text) > 100_000:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return str(value["error"]) if isinstance(value, dict) and set(value) == {"error"} else None


def _prompt_images(inputs: list[dict], count: int) -> list[list] | None:
    """Each sample's images in the order its prompt shows them, as TRL gives them to the model: the `images` column,
    else the `image` column, placed into the prompt's image placeholders, with the image parts the prompt already
    holds. None when no sample has an image."""
    if len(inputs) != count:
        raise RuntimeError(f"TRL's generation has {count} samples for {len(inputs)} dataset rows")
    column = next((name for name in ("images", "image") if name in inputs[0]), None)
    rows = []
    for example in inputs:
        given = example.get(column) if column else None
        given = ([given] if column == "image" else list(given)) if given is not None else []
        prompt = example.get("prompt")
        if not (isinstance(prompt, list) and prompt and isinstance(prompt[0], dict)):  # not conversational
            rows.append(given)
            continue
        if given:
            prompt = prepare_multimodal_messages(prompt, given)
        rows.append(
            [
                part["image"]
                for message in prompt
                if isinstance(message.get("content"), list)
                for part in message["content"]
                if isinstance(part, dict) and part.get("type") == "image" and part.get("image") is not None
            ]
        )
    return rows if any(rows) else None


def uses_tools(trainer) -> bool:
    """Whether the trainer runs a tool loop: tools given (`tools=`), or an environment's (TRL 1.16's
    `environment_factory`, whose methods it adds to its tools)."""
    return bool(getattr(trainer, "tools", None) or getattr(trainer, "environment_factories", None))


def _tool_masks(
    tool_mask: torch.Tensor, completion_mask: torch.Tensor, lengths: list[int], per_token: list[bool]
) -> list[list[int] | None]:
    """Per sample, TRL's tool mask over its sampled tokens; None where `per_token` says the completion mask hides
    some (TRL's `mask_truncated_completions` zeroed the tool mask there too)."""
    rows = _split(tool_mask.int()[completion_mask].tolist(), lengths)
    return [row if keep else None for row, keep in zip(rows, per_token)]


def _plain(value: Any) -> Any:
    """`value` as plain JSON values: an enum as its value, a NumPy or torch value as its Python value, NaN and ±inf as
    None (as the writer writes them), anything else JSON has no type for (a path, a dtype) as its text."""
    if isinstance(value, Enum):
        value = value.value
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # a NumPy or torch scalar or array
        value = value.tolist()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return str(value)


def _without_secrets(config: Any) -> Any:
    """The training arguments without the keys, at any depth (e.g. `model_init_kwargs`), that may hold credentials, and
    without the user and password of a URL (a vLLM server's `https://user:password@host`)."""
    if isinstance(config, dict):
        return {key: _without_secrets(value) for key, value in config.items() if not SECRET_KEY.search(str(key))}
    if isinstance(config, list):
        return [_without_secrets(value) for value in config]
    if isinstance(config, str):
        return URL_USER_INFO.sub("", config)
    return config


def _split(values: list, lengths: list[int]) -> list[list]:
    """Consecutive pieces of `values` with the given lengths."""
    ends = itertools.accumulate(lengths)
    return [values[end - length : end] for end, length in zip(ends, lengths)]


def _masked_rows(values: torch.Tensor, mask: torch.Tensor, lengths: list[int]) -> list[list[float]]:
    """Per row, the values where `mask` is set, as Python lists (floats as 32-bit floats' values, integers as
    integers): one tensor index and one copy for the whole batch."""
    values = values[mask]
    return _split((values.float() if values.is_floating_point() else values).tolist(), lengths)


def _launch_exists(run_dir: Path, launch_id: str) -> bool:
    try:
        return any(run_dir.glob(f"*_{launch_id}.json*"))
    except OSError:  # an unreadable folder: writing into it fails later, with its own warning
        return False


def _shared_launch_id(run_dir: Path, is_main_process: bool) -> str:
    """Rank 0's UTC start time `YYYYmmddTHHMMSSZ`, shared with all ranks, so file names sort by launch."""
    launch_id = None
    if is_main_process:
        moment = datetime.now(timezone.utc)
        # Two launches in the same second would share file names: take the next free second.
        while _launch_exists(run_dir, f"{moment:%Y%m%dT%H%M%SZ}"):
            moment += timedelta(seconds=1)
        launch_id = f"{moment:%Y%m%dT%H%M%SZ}"
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        shared = [launch_id]
        torch.distributed.broadcast_object_list(shared, src=0)
        launch_id = shared[0]
    return launch_id
