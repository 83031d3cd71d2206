"""The `RolloutLoggerCallback`: exact per-token rollout logs from TRL's `GRPOTrainer`."""

from __future__ import annotations

import functools
import importlib.metadata
import itertools
import json
import logging
import math
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import torch
from transformers import TrainerCallback

from .writer import JsonlWriter


logger = logging.getLogger(__name__)

ENABLE_VARIABLE = "SAVE_ROLLOUT_DATA"
EXP_NAME_VARIABLE = "EXP_NAME"
SAVE_DIR_VARIABLE = "ROLLOUT_SAVE_DIR"
# Added to each generated batch so that the loss pass, which sees the batch shuffled and split, knows which samples it
# holds. TRL ignores keys it does not know.
SAMPLE_KEY = "rollout_logger_sample"


def rollout_logging_enabled() -> bool:
    """Whether `SAVE_ROLLOUT_DATA` is set to true, 1 or yes (any case)."""
    return os.environ.get(ENABLE_VARIABLE, "").strip().lower() in {"true", "1", "yes"}


class RolloutLoggerCallback(TrainerCallback):
    r"""
    A [`~transformers.TrainerCallback`] that saves every completion a [`~trl.GRPOTrainer`] samples, with its per-token
    log-probs, in the JSONL format the RL Logging Board reads. It does nothing unless `SAVE_ROLLOUT_DATA` is true.

    Each rank appends to its own `<root>/<EXP_NAME>/rollout_data_rank_<rank>_<launch id>.jsonl`, where `<root>` is
    `ROLLOUT_SAVE_DIR` (default `<output_dir>/rollout_samples`), `EXP_NAME` defaults to the run name or the output
    folder's name, and the launch id is the UTC start time `YYYYmmddTHHMMSSZ` chosen by rank 0, so a resumed run
    writes new files. Rank 0 also writes `rollout_meta_<launch id>.json` with the run's settings. Each line is one
    sampled completion, tagged with `step`: the optimizer step it was generated for (`state.global_step + 1`, the
    `step` of TRL's logged metrics). Lines are written once per optimizer step by a background thread; an I/O error
    costs one warning, never the training. Evaluation batches are not logged.

    A callback never sees the batch, so this one wraps methods of the trainer instance it is given (TRL has no public
    API for per-token data); the trainer's class and TRL itself are left untouched. The log-probs are the ones TRL's
    loss uses, so nothing is computed twice: TRL's `old_per_token_logps` when it computes them at generation, otherwise
    those of the loss pass's first pass over each sample. The entropies come from that first pass; the pass's values
    are kept only when it runs at the weights that sampled the sample (no optimizer step in between). A truncated
    completion that TRL masks (`mask_truncated_completions`) is logged with its tokens but no per-token values.

    Usage:
    ```python
    >>> trainer = GRPOTrainer(...)
    >>> trainer.add_callback(RolloutLoggerCallback(trainer=trainer))
    >>> trainer.train()
    ```

    Args:
        trainer ([`~trl.GRPOTrainer`]):
            The trainer (or an instance of a subclass) whose rollouts to save.
    """

    def __init__(self, trainer):
        self.trainer = trainer
        self.enabled = rollout_logging_enabled()
        self.run_dir: Path | None = None
        self.launch_id: str | None = None
        self._writer: JsonlWriter | None = None
        self._warned: set[str] = set()
        self._hooks_loss_pass = False
        self._reset_batches()
        if self.enabled:
            self._install_hooks()

    def _reset_batches(self) -> None:
        self._generations = 0  # generation batches of this launch; part of each group id
        self._next_sample = 0  # the id the next sample of this rank gets
        self._waiting: dict[int, dict] = {}  # sample id -> record still waiting for its first loss pass
        self._finished: list[dict] = []  # records whose lines are written at the end of the optimizer step
        self._scored: tuple | None = None  # `_calculate_rewards`'s completion ids and result, during a generation
        self._loss_batch: tuple | None = None  # (sample ids, completion mask) of the micro-batch in the loss pass

    # ------------------------------------------------------------------ hooks

    def _install_hooks(self) -> None:
        trainer = self.trainer
        if not hasattr(trainer, "_generate_and_score_completions"):
            self._warn_once(
                "unsupported", f"{type(trainer).__name__} has no `_generate_and_score_completions`; nothing is logged"
            )
            self.enabled = False
            return
        self._wrap("_generate_and_score_completions", self._around_generation)
        if hasattr(trainer, "_calculate_rewards"):
            self._wrap("_calculate_rewards", self._around_rewards)
        else:
            self._warn_once("rewards", "this TRL version has no `_calculate_rewards`; rewards are not logged")
        # The loss pass's per-token log-prob function (named `_get_per_token_logps` before TRL 0.20).
        logps_method = next(
            (
                name
                for name in ("_get_per_token_logps_and_entropies", "_get_per_token_logps")
                if hasattr(trainer, name)
            ),
            None,
        )
        if logps_method is not None:
            self._wrap(logps_method, self._around_per_token_logps)
            self._wrap("compute_loss", self._around_loss)
            self._hooks_loss_pass = True
        else:
            self._warn_once(
                "logps",
                "this TRL version has no per-token log-prob function; only the log-probs TRL "
                "computes at generation are logged",
            )

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
        output = generate(*args, **kwargs)
        self._safely(self._start_records, output, step)
        self._scored = None
        return output

    def _around_rewards(self, calculate_rewards, *args, **kwargs):
        # Called as `_calculate_rewards(inputs, prompts, completions, completion_ids_list)`.
        rewards_per_func = calculate_rewards(*args, **kwargs)
        completion_ids = args[3] if len(args) > 3 else kwargs.get("completion_ids_list")
        if self._writer is not None and completion_ids is not None and isinstance(rewards_per_func, torch.Tensor):
            self._scored = (completion_ids, rewards_per_func)
        return rewards_per_func

    def _around_loss(self, compute_loss, *args, **kwargs):
        # Called as `compute_loss(model, inputs, ...)`.
        inputs = args[1] if len(args) > 1 else kwargs.get("inputs")
        samples = inputs.get(SAMPLE_KEY) if isinstance(inputs, dict) else None
        if samples is not None and self._waiting and inputs.get("completion_mask") is not None:
            samples = samples.tolist()
            if any(sample in self._waiting for sample in samples):
                self._loss_batch = (samples, inputs["completion_mask"])
        try:
            return compute_loss(*args, **kwargs)
        finally:
            if self._loss_batch is not None:  # the loss computed no per-token log-probs (e.g. a Liger kernel loss)
                self._warn_once("loss-logps", "the loss pass computed no per-token log-probs that could be logged")
                self._safely(self._finish_records, self._loss_batch, None)
            self._loss_batch = None

    def _around_per_token_logps(self, get_per_token_logps, *args, **kwargs):
        result = get_per_token_logps(*args, **kwargs)
        loss_batch, self._loss_batch = self._loss_batch, None  # only the loss pass's first call is the policy's
        if loss_batch is not None:
            self._safely(self._finish_records, loss_batch, result)
        return result

    # ------------------------------------------------------------------ records

    def _start_records(self, output: dict, step: int) -> None:
        """Builds one record per sample of a generated batch; they wait for the loss pass's log-probs and entropies."""
        trainer = self.trainer
        tokenizer = self._tokenizer()
        rank = trainer.accelerator.process_index
        completion_mask = output["completion_mask"].bool()
        lengths = completion_mask.sum(dim=1).tolist()
        count = len(lengths)
        sampled_ids = _split(output["completion_ids"][completion_mask].tolist(), lengths)
        prompt_mask = output["prompt_mask"].bool()
        prompt_ids = _split(output["prompt_ids"][prompt_mask].tolist(), prompt_mask.sum(dim=1).tolist())
        unique_prompts = list(dict.fromkeys(map(tuple, prompt_ids)))  # each prompt repeats num_generations times
        texts = tokenizer.batch_decode(unique_prompts, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        prompt_text = dict(zip(unique_prompts, texts))
        prompts = [prompt_text[tuple(ids)] for ids in prompt_ids]

        rewards = rewards_per_func = None
        if self._scored is not None:
            scored_ids, gathered = self._scored
            sampled_ids = [list(ids) for ids in scored_ids]  # every sampled token, even where a mask hides it
            if gathered.size(0) == count * trainer.accelerator.num_processes:
                # TRL gathers the rewards of all ranks; each rank's samples are consecutive rows.
                per_func = gathered[rank * count : (rank + 1) * count].float().cpu()
                weighted = (per_func * trainer.reward_weights.float().cpu()).nansum(dim=1)
                weighted[per_func.isnan().all(dim=1)] = float("nan")  # TRL's unscorable samples
                rewards, rewards_per_func = weighted.tolist(), per_func.tolist()
            else:
                self._warn_once("rewards", "the rewards TRL computed do not match the batch; rewards are not logged")
        sampled_lengths = [len(ids) for ids in sampled_ids]
        tokens = _split(tokenizer.convert_ids_to_tokens([id_ for ids in sampled_ids for id_ in ids]), sampled_lengths)
        # Per-token values only where the mask holds every sampled token: TRL's `mask_truncated_completions` masks a
        # truncated completion out of attention, so its log-probs and entropies were computed without it.
        per_token = [length == sampled for length, sampled in zip(lengths, sampled_lengths)]
        responses = tokenizer.batch_decode(sampled_ids, skip_special_tokens=True)  # as TRL decodes completions
        stop_ids = set(getattr(trainer, "eos_token_ids", None) or [tokenizer.eos_token_id]) | {tokenizer.pad_token_id}

        advantages = output["advantages"]
        if advantages.dim() > 1:  # a subclass's per-token advantages: their mean over the completion
            advantages = (advantages * completion_mask).sum(dim=1) / completion_mask.sum(dim=1).clamp(min=1)
        advantages = advantages.tolist()
        old_logps, ref_logps = output.get("old_per_token_logps"), output.get("ref_per_token_logps")
        old_logps = [None] * count if old_logps is None else _masked_rows(old_logps, completion_mask, lengths)
        ref_logps = None if ref_logps is None else _masked_rows(ref_logps, completion_mask, lengths)
        names = list(trainer.reward_func_names)
        num_generations = trainer.num_generations

        records = []
        for row in range(count):
            record = {
                "prompt": prompts[row],
                "response": responses[row],
                "response_tokens": tokens[row],
                "logprobs": old_logps[row] if per_token[row] else None,
            }
            if ref_logps is not None and per_token[row]:
                record["ref_logprobs"] = ref_logps[row]
            record["entropies"] = None
            record["reward"] = None if rewards is None else rewards[row]
            if rewards_per_func is not None:
                record["rewards_per_func"] = {
                    name: None if math.isnan(score) else score for name, score in zip(names, rewards_per_func[row])
                }
            record["advantage"] = advantages[row]
            # TRL repeats each prompt num_generations times in the global batch, then splits it across ranks.
            record["group_id"] = f"{self.launch_id}-{self._generations}-{(rank * count + row) // num_generations}"
            record["truncated"] = bool(sampled_ids[row]) and sampled_ids[row][-1] not in stop_ids
            record["rank"] = rank
            record["step"] = step
            records.append(record)

        for sample, record, completed_later in zip(itertools.count(self._next_sample), records, per_token):
            if completed_later and self._hooks_loss_pass:
                self._waiting[sample] = record
            else:  # nothing would complete it: written as it is
                self._finished.append(_without_missing(record))
        if self._hooks_loss_pass:
            output[SAMPLE_KEY] = torch.arange(self._next_sample, self._next_sample + count)
        self._next_sample += count
        self._generations += 1

    def _finish_records(self, loss_batch: tuple, result: Any) -> None:
        """Completes a micro-batch's records with the loss pass's log-probs and entropies, where they describe the
        policy that sampled them."""
        samples, completion_mask = loss_batch
        records = [self._waiting.pop(sample, None) for sample in samples]  # None: a later pass (num_iterations > 1)
        # A record's `step` is `global_step + 1` at generation: an equal step here means no optimizer step since. A
        # sample trained in a later step of its generation batch gets no loss-pass values (TRL's old log-probs stay).
        step = self.trainer.state.global_step + 1
        sampling_policy = [record is not None and record["step"] == step for record in records]
        logps = entropies = None
        if result is not None and any(sampling_policy):
            logps, entropies = (result[0], result[1]) if isinstance(result, tuple) else (result, None)
            mask = completion_mask.bool()
            lengths = mask.sum(dim=1).tolist()
            logps = _masked_rows(logps.detach(), mask, lengths)
            entropies = None if entropies is None else _masked_rows(entropies.detach(), mask, lengths)
        for position, record in enumerate(records):
            if record is None:
                continue
            if sampling_policy[position] and logps is not None:
                if record["logprobs"] is None:
                    record["logprobs"] = logps[position]
                if entropies is not None:
                    record["entropies"] = entropies[position]
            self._finished.append(_without_missing(record))

    def _tokenizer(self):
        trainer = self.trainer
        tokenizer = getattr(trainer, "_tokenizer", None) or trainer.processing_class
        return getattr(tokenizer, "tokenizer", tokenizer)  # a VLM processor holds its tokenizer

    # ------------------------------------------------------------------ training events

    def on_train_begin(self, args, state, control, **kwargs):
        if not self.enabled:
            return
        self._reset_batches()
        root = os.environ.get(SAVE_DIR_VARIABLE) or Path(args.output_dir) / "rollout_samples"
        self.run_dir = Path(root) / _experiment_name(args)
        accelerator = self.trainer.accelerator
        self.launch_id = _shared_launch_id(self.run_dir, accelerator.is_main_process)
        path = self.run_dir / f"rollout_data_rank_{accelerator.process_index}_{self.launch_id}.jsonl"
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._writer = JsonlWriter(path, self._warn_once)
        except OSError as error:
            self._warn_once("io", f"cannot write rollout data to {path} ({error}); training goes on without it")
            return
        if accelerator.is_main_process:
            self._write_meta(args)
            print(f"RLLoggingBoard: Saving rollout data to {self.run_dir}", flush=True)

    def on_step_end(self, args, state, control, **kwargs):
        if self._logging():
            self._writer.write(self._finished)
            self._finished = []

    def on_train_end(self, args, state, control, **kwargs):
        if not self._logging():
            return
        # Samples generated but never trained on (the run stopped mid generation batch) still get their line.
        self._finished.extend(_without_missing(record) for record in self._waiting.values())
        self._writer.write(self._finished)
        self._writer.close()
        self._writer = None
        self._reset_batches()

    # ------------------------------------------------------------------ helpers

    def _write_meta(self, args) -> None:
        trainer = self.trainer
        model_config = getattr(trainer.model, "config", None)
        meta = {
            "launch_id": self.launch_id,
            "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "trl_version": importlib.metadata.version("trl"),
            "model_name": getattr(model_config, "_name_or_path", None),
            "world_size": trainer.accelerator.num_processes,
            "beta": getattr(trainer, "beta", None),
            "num_generations": getattr(trainer, "num_generations", None),
            "temperature": getattr(trainer, "temperature", None),
            "loss_type": getattr(trainer, "loss_type", None),
            "scale_rewards": getattr(trainer, "scale_rewards", None),
            "reward_funcs": list(getattr(trainer, "reward_func_names", [])),
            "reward_weights": trainer.reward_weights.tolist() if hasattr(trainer, "reward_weights") else None,
            "learning_rate": args.learning_rate,
            "max_completion_length": getattr(args, "max_completion_length", None),
            "num_iterations": getattr(args, "num_iterations", None),
            "steps_per_generation": getattr(args, "steps_per_generation", None),
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
            "per_device_train_batch_size": args.per_device_train_batch_size,
            "seed": args.seed,
        }
        path = self.run_dir / f"rollout_meta_{self.launch_id}.json"
        try:
            path.write_text(json.dumps(meta, indent=2, default=str) + "\n", encoding="utf-8")
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
        """Whether logging goes on; once the writer has failed (it warned), it stops: no record is built in vain."""
        if self._writer is not None and self._writer.failed:
            self._stop()
        return self._writer is not None

    def _stop(self) -> None:
        """Stops logging for the rest of this launch; the hooks stay but only call through."""
        if self._writer is not None:
            self._writer.close()
        self._writer = None
        self._waiting.clear()
        self._finished = []

    def _warn_once(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            logger.warning(f"RLLoggingBoard: {message}")


def _experiment_name(args) -> str:
    """`EXP_NAME`, else the run name, else the output folder's name: one folder name (the board lists folders)."""
    run_name = args.run_name if args.run_name != args.output_dir else None  # older transformers default to output_dir
    name = os.environ.get(EXP_NAME_VARIABLE) or run_name or Path(args.output_dir).resolve().name
    return name.strip("/").replace("/", "_") or "run"


def _without_missing(record: dict) -> dict:
    """Drops the per-token keys nothing filled in (no entropies from this TRL, a sample never trained on or trained
    after an update, a truncated completion TRL masked)."""
    for key in ("logprobs", "entropies"):
        if record[key] is None:
            del record[key]
    return record


def _split(values: list, lengths: list[int]) -> list[list]:
    """Consecutive pieces of `values` with the given lengths."""
    ends = itertools.accumulate(lengths)
    return [values[end - length : end] for end, length in zip(ends, lengths)]


def _masked_rows(values: torch.Tensor, mask: torch.Tensor, lengths: list[int]) -> list[list[float]]:
    """Per row, the values where `mask` is set, as Python lists: one tensor index and one copy for the whole batch."""
    return _split(values[mask].float().tolist(), lengths)


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
