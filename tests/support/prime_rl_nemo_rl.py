"""Writers that reproduce prime-rl's and NeMo-RL's rollout files with those trainers' own writing code, copied below
with its source cited (neither is installable here: `pip download prime-rl` finds nothing, and nemo-rl on the package
index is an empty placeholder), fed with a toy GRPO batch whose token ids come from a tiny byte-level BPE trained here
(tokenizers), so a test can decode them. Every writer is deterministic (seeded).

- prime-rl: TokenExporter (token_exports/step_<n>/rank_<r>.jsonl, STABLE), FileMonitor.log_episodes
  (rollouts/step_<n>/train/effective/traces.jsonl) with verifiers' Episode.to_record() layout; prime_rl_run_folder
  adds the run folder's other folders and metrics.jsonl.
- NeMo-RL: the GRPO loop's log_data and Logger.log_batched_dict_as_jsonl (train_data_step<N>.jsonl);
  nemo_rl_logger_folders adds the log_dir's folders of its loggers (tensorboard/, wandb/, mlflow/).
"""

import atexit
import json
import math
import os
import random
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from torch import Tensor

# ------------------------------------------------------------------------------------------------ the toy task

QUESTIONS = [("What is 3+4?", "7"), ("计算 15 减去 8 等于多少？", "7"), ("What is 2^5 - 9?", "23"), ("What is 12*3?", "36")]

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


# A byte-level BPE with ChatML's special tokens, trained on the task's text (as examples/train_grpo_tiny.py builds one).
def build_tokenizer() -> Tokenizer:
    rng = random.Random(0)
    corpus = [chat_prompt(q) + answer_text(q, a, rng) for q, a in QUESTIONS for _ in range(50)] + [tool_text("7")] * 20
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tokenizer


def save_tokenizer(folder) -> Path:
    path = Path(folder) / "tokenizer.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    build_tokenizer().save(str(path))
    return path


def chat_prompt(question: str) -> str:
    return f"<|im_start|>user\n{question}<|im_end|>\n"


GENERATION_PROMPT = "<|im_start|>assistant\n"


def answer_text(question: str, answer: str, rng: random.Random) -> str:
    pred = answer if rng.random() < 0.6 else str(int(answer) + rng.choice((-1, 2)))
    return f"<think>\n{question}\n</think>\nIt is \\boxed{{{pred}}}."


def tool_text(result: str) -> str:
    return f"<|im_start|>tool\nresult: {result}<|im_end|>\n"


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


# One sampled rollout: its messages, the token ids each adds (ChatML), which of them the policy sampled, the
# inference engine's log-prob of each sampled token, its reward.
@dataclass
class Rollout:
    messages: list  # [(message dict, token ids, sampled mask)]
    reward: float
    inference: list = field(default_factory=list)  # per token of the sequence; 0 off the sampled tokens

    @property
    def token_ids(self) -> list[int]:
        return [t for _, ids, _ in self.messages for t in ids]

    @property
    def mask(self) -> list[bool]:
        return [m for _, _, mask in self.messages for m in mask]


# A rollout of a question: single-turn, or (multi_turn) an answer, a tool's reply, and a second answer.
def rollout(tokenizer: Tokenizer, question: str, answer: str, rng: random.Random, multi_turn: bool = False) -> Rollout:
    encode = lambda text: tokenizer.encode(text).ids  # noqa: E731
    user = encode(chat_prompt(question))
    messages = [({"role": "user", "content": question}, user, [False] * len(user))]
    turns = 2 if multi_turn else 1
    text = ""
    for turn in range(turns):
        text = answer_text(question, answer, rng)
        scaffold, completion = encode(GENERATION_PROMPT), encode(text + "<|im_end|>")
        messages.append(({"role": "assistant", "content": text}, scaffold + completion, [False] * len(scaffold) + [True] * len(completion)))
        if turn < turns - 1:
            tool = encode("\n" + tool_text(answer))
            messages.append(({"role": "tool", "tool_call_id": f"call_{turn}", "content": f"result: {answer}"}, tool, [False] * len(tool)))
    reward = 1.0 if f"\\boxed{{{answer}}}" in text else 0.0
    sequence = Rollout(messages, reward)
    sequence.inference = [f32(-rng.expovariate(1.5) - 1e-4) if sampled else 0.0 for sampled in sequence.mask]
    return sequence


# The trainer's log-probs: the engine's plus a small mismatch, a large one on a few tokens (so DPPO masks some).
def trainer_logprobs(rollout: Rollout, rng: random.Random) -> list[float]:
    values = []
    for sampled, inference in zip(rollout.mask, rollout.inference):
        if not sampled:
            values.append(f32(-rng.expovariate(0.5) - 1e-3))
            continue
        jump = rng.random() < 0.08
        values.append(f32(min(-1e-6, inference + (rng.choice((-1.5, 1.2)) if jump else rng.gauss(0, 0.02)))))
    return values


# ================================================================================================== prime-rl

# The trainer's loss configs (packages/prime-rl-configs/src/prime_rl/configs/trainer.py at PrimeIntellect-ai/prime-rl
# commit 559b44772e471d1538537b8805cc77f3824a5e64): the defaults of the two fields the exporter reads.
@dataclass
class DefaultLossConfig:
    dppo_mask_low: float = 0.2
    dppo_mask_high: float = 0.2
    adv_tau: float = 1.0
    kl_tau: float = 1e-3


@dataclass
class IPOLossConfig:
    ipo_threshold: float = 0.1
    adv_tau: float = 1.0
    kl_tau: float = 1e-3


# src/prime_rl/trainer/rl/loss.py at prime-rl 559b44772e471d1538537b8805cc77f3824a5e64.
def compute_importance_ratio_and_mismatch_kl(trainer_logprobs: Tensor, inference_logprobs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    log_importance_ratio = trainer_logprobs - inference_logprobs
    importance_ratio = torch.exp(log_importance_ratio)
    mismatch_kl = importance_ratio - log_importance_ratio - 1
    return log_importance_ratio, importance_ratio, mismatch_kl


# ---- src/prime_rl/trainer/rl/token_export.py at prime-rl 559b44772e471d1538537b8805cc77f3824a5e64, as it is (the
# ---- loss configs above stand for prime_rl.configs.trainer's).

SCHEMA_VERSION = 1


class TokenExporter:
    def __init__(
        self,
        output_dir: Path,
        rank: int,
    ) -> None:
        self.rank = rank
        self.output_dir = output_dir / "token_exports"
        self._closed = False
        self._initialized_files: set[tuple[int, int]] = set()
        self._sequences_by_file: dict[tuple[int, int], int] = {}
        self._pending_stable_dirs: set[Path] = set()
        atexit.register(self.close)

    def export(
        self,
        step: int,
        micro_step: int,
        micro_batch: Mapping[str, Any],
        model_output: Mapping[str, Tensor],
        sequence_lengths: list[int],
        loss_config: Any,
    ) -> None:
        columns = _export_columns(micro_batch, model_output, loss_config)
        _check_lengths(columns)
        file_key = (step, self.rank)

        start = 0
        for micro_sequence_idx, length in enumerate(sequence_lengths):
            raw_end = start + length
            end = _trim_padding(columns, start, raw_end)
            if end > start and any(columns["loss_mask"][start:end]):
                self._write(
                    {
                        "schema_version": SCHEMA_VERSION,
                        "step": step,
                        "rank": self.rank,
                        "micro_step": micro_step,
                        "micro_sequence_idx": micro_sequence_idx,
                        "export_sequence_idx": self._sequences_by_file.get(file_key, 0),
                        "env_name": _first_non_empty(columns["env_names"][start:end]),
                        **_slice_columns(columns, start, end),
                    },
                    step,
                )
                self._sequences_by_file[file_key] = self._sequences_by_file.get(file_key, 0) + 1
            start = raw_end

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True

    def mark_stable(self) -> None:
        # The caller barriers first so a STABLE only lands after every rank flushed.
        while self._pending_stable_dirs:
            stable_dir = self._pending_stable_dirs.pop()
            (stable_dir / "STABLE").touch()

    def _export_dir(self, step: int) -> Path:
        return self.output_dir / f"step_{step}"

    def _export_file(self, step: int) -> Path:
        if self._closed:
            raise RuntimeError(f"Token exporter is closed for {self.output_dir}")

        step_dir = self._export_dir(step)
        try:
            step_dir.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            if not step_dir.is_dir():
                raise
        return step_dir / f"rank_{self.rank}.jsonl"

    def _write(self, record: dict[str, Any], step: int) -> None:
        if self._closed:
            raise RuntimeError(f"Token exporter is closed for {self.output_dir}")

        file_key = (step, self.rank)
        mode = "a" if file_key in self._initialized_files else "w"
        export_file = self._export_file(step)
        with export_file.open(mode, encoding="utf-8") as file:
            file.write(json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n")
        self._initialized_files.add(file_key)
        self._pending_stable_dirs.add(export_file.parent)


def _export_columns(
    micro_batch: Mapping[str, Any], model_output: Mapping[str, Tensor], loss_config: Any
) -> dict[str, list[Any]]:
    token_ids = _tensor_to_ints(micro_batch["input_ids"])
    seq_len = len(token_ids)
    trainer_logprobs = model_output["logprobs"]
    export_tensors = _compute_export_tensors(micro_batch, trainer_logprobs, loss_config)

    return {
        "token_ids": token_ids,
        "position_ids": _tensor_to_ints(micro_batch["position_ids"]),
        "loss_mask": _tensor_to_bools(micro_batch["loss_mask"]),
        "advantages": _tensor_to_floats(micro_batch["advantages"]),
        "inference_logprobs": _tensor_to_floats(micro_batch["inference_logprobs"]),
        "trainer_logprobs": _tensor_to_floats(trainer_logprobs),
        "entropy": _tensor_to_floats(model_output["entropy"]),
        "mismatch_kl": _optional_tensor_to_floats(export_tensors["mismatch_kl"], seq_len),
        "log_importance_ratio": _optional_tensor_to_floats(export_tensors["log_importance_ratio"], seq_len),
        "importance_ratio": _optional_tensor_to_floats(export_tensors["importance_ratio"], seq_len),
        "prob_delta": _optional_tensor_to_floats(export_tensors["prob_delta"], seq_len),
        "is_masked": _optional_tensor_to_bools(export_tensors["is_masked"], seq_len),
        "is_masked_high": _optional_tensor_to_bools(export_tensors["is_masked_high"], seq_len),
        "is_masked_low": _optional_tensor_to_bools(export_tensors["is_masked_low"], seq_len),
        # Component weight streams; ``None`` columns mean the defaults (rl 1.0
        # on the loss mask, no ce/ref_kl component).
        "rl_weights": _optional_tensor_to_floats(micro_batch.get("rl_weights"), seq_len),
        "ce_weights": _optional_tensor_to_floats(micro_batch.get("ce_weights"), seq_len),
        "ref_kl_weights": _optional_tensor_to_floats(micro_batch.get("ref_kl_weights"), seq_len),
        "env_names": list(micro_batch["env_names"]),
    }


def _compute_export_tensors(
    micro_batch: Mapping[str, Any], trainer_logprobs: Tensor, loss_config: Any
) -> dict[str, Tensor | None]:
    fields: dict[str, Tensor | None] = {
        "log_importance_ratio": None,
        "importance_ratio": None,
        "mismatch_kl": None,
        "prob_delta": None,
        "is_masked": None,
        "is_masked_high": None,
        "is_masked_low": None,
    }
    # Ratio-based fields are meaningless when no token has sampling logprobs
    # (e.g. pure CE batches distilling frozen-model tokens): no rl member
    # (stream present but all-zero) and no ref_kl member.
    rl_weights = micro_batch.get("rl_weights")
    ref_kl_weights = micro_batch.get("ref_kl_weights")
    no_rl = rl_weights is not None and not bool((rl_weights != 0).any())
    no_ref_kl = ref_kl_weights is None or not bool((ref_kl_weights != 0).any())
    if no_rl and no_ref_kl:
        return fields

    inference_logprobs = micro_batch["inference_logprobs"].to(trainer_logprobs.device)
    loss_mask = micro_batch["loss_mask"].to(trainer_logprobs.device)
    advantages = micro_batch["advantages"].to(trainer_logprobs.device)
    with torch.no_grad():
        log_ratio, ratio, mismatch_kl = compute_importance_ratio_and_mismatch_kl(trainer_logprobs, inference_logprobs)
        prob_delta = torch.exp(trainer_logprobs) - torch.exp(inference_logprobs)
        fields["log_importance_ratio"] = log_ratio
        fields["importance_ratio"] = ratio
        fields["mismatch_kl"] = mismatch_kl
        fields["prob_delta"] = prob_delta
        if isinstance(loss_config, DefaultLossConfig):
            invalid_high = prob_delta > loss_config.dppo_mask_high
            invalid_low = prob_delta < -loss_config.dppo_mask_low
            positive_advantages = advantages > 0
            negative_advantages = advantages < 0
            invalid = torch.where(positive_advantages, invalid_high, invalid_low)
            fields["is_masked"] = loss_mask & invalid
            fields["is_masked_high"] = loss_mask & positive_advantages & invalid_high
            fields["is_masked_low"] = loss_mask & negative_advantages & invalid_low
    return fields


def _tensor_to_ints(tensor: Tensor) -> list[int]:
    return [int(value) for value in tensor.detach().cpu().reshape(-1).tolist()]


def _tensor_to_bools(tensor: Tensor) -> list[bool]:
    return [bool(value) for value in tensor.detach().cpu().reshape(-1).tolist()]


def _tensor_to_floats(tensor: Tensor) -> list[float | None]:
    values = tensor.detach().to(dtype=torch.float32, device="cpu").reshape(-1).tolist()
    return [_json_float(value) for value in values]


def _optional_tensor_to_floats(tensor: Tensor | None, seq_len: int) -> list[float | None]:
    if tensor is None:
        return [None] * seq_len
    return _tensor_to_floats(tensor)


def _optional_tensor_to_bools(tensor: Tensor | None, seq_len: int) -> list[bool | None]:
    if tensor is None:
        return [None] * seq_len
    return _tensor_to_bools(tensor)


def _check_lengths(columns: Mapping[str, Sequence[Any]]) -> None:
    lengths = {key: len(values) for key, values in columns.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"Token export fields must have aligned lengths, got {lengths}")


def _slice_columns(columns: Mapping[str, Sequence[Any]], start: int, end: int) -> dict[str, list[Any]]:
    return {key: list(values[start:end]) for key, values in columns.items() if key != "env_names"}


def _trim_padding(columns: Mapping[str, Sequence[Any]], start: int, end: int) -> int:
    env_names = columns["env_names"]
    loss_mask = columns["loss_mask"]
    while end > start and env_names[end - 1] == "" and not loss_mask[end - 1]:
        end -= 1
    return end


def _json_float(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    if not math.isfinite(value):
        return None
    return value


def _first_non_empty(values: Sequence[str]) -> str | None:
    for value in values:
        if value:
            return value
    return None


# ---- end of the copy of token_export.py


# FileMonitor.log_episodes (src/prime_rl/monitors/file.py at prime-rl 559b44772e471d1538537b8805cc77f3824a5e64): each
# episode's record appended to rollouts/step_<step>/<kind>/<subset>/traces.jsonl.
def log_episodes(output_dir: Path, records: list[dict], step: int, kind: str = "train", subset: str = "effective") -> Path:
    path = output_dir / "rollouts" / f"step_{step}" / kind / subset / "traces.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    opts = orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY
    with open(path, "ab") as f:
        for record in records:
            f.write(orjson.dumps(record, default=str, option=opts))
    return path


# An Episode.to_record() (verifiers/v1/episode.py, trace.py and graph.py at PrimeIntellect-ai/verifiers commit
# a60a606ecc4d309247edf9ff92c3eabca362781f): model_dump(mode="json", exclude_none=True), the nodes' tensor fields left
# out; fields in their declaration order. One trace, its nodes a chain (one branch); advantages on sampled tokens.
def episode_record(rollout: Rollout, group: str, step: int, advantage: float, index: int) -> dict:
    nodes = []
    for position, (message, ids, mask) in enumerate(rollout.messages):
        sampled = any(mask)
        node = {"parent": position - 1 if position else None, "message": message, "sampled": sampled, "timestamp": 1.7e9 + index + position,
                "token_ids": ids, "mask": mask, "is_content": [], "logprobs": [lp for lp, m in zip(inference_of(rollout, position), mask) if m]}
        if sampled:
            node["advantages"] = [a for a, m in zip(node_slice(rollout, position, token_advantages(rollout, advantage)), mask) if m]
        nodes.append({key: value for key, value in node.items() if value is not None})
    trace = {
        "version": 1, "id": f"trace-{step}-{index}", "verifiers": {"version": "0.3.1"},
        "task": {"type": "math", "data": {"question": rollout.messages[0][0]["content"]}},
        "agent": {"config": {}, "name": "agent", "trainable": True}, "tools": [], "nodes": nodes, "calls": [],
        "request_rewrites": [], "response_rewrites": [], "rewards": {"correct": {"score": rollout.reward, "weight": 1.0}, "format": {"score": 1.0, "weight": 0.5}},
        "metrics": {"num_turns": float(sum(1 for message, _, mask in rollout.messages if any(mask)))}, "info": {}, "extra_usage": [],
        "is_completed": True, "ok": True, "stop_condition": "completed", "errors": [],
        "timing": {"start": 1.7e9, "boot": {"start": 0.0, "end": 0.0}},
    }
    return {
        "id": f"episode-{step}-{index}", "env": {"id": "math", "name": "math"}, "task": trace["task"], "group": {"id": group},
        "run": {"type": "train", "id": "run", "work": {"type": "train", "step": step, "policy": {"start": step - 1, "end": step - 1}}},
        "ok": True, "errors": [], "traces": [trace],
    }


def inference_of(rollout: Rollout, position: int) -> list[float]:
    return node_slice(rollout, position, rollout.inference)


def node_slice(rollout: Rollout, position: int, values: list) -> list:
    start = sum(len(ids) for _, ids, _ in rollout.messages[:position])
    return values[start : start + len(rollout.messages[position][1])]


# The per-token credit the orchestrator stamps (branch.advantages: 0 off the sampled tokens): the rollout's advantage,
# a later turn's raised by 0.25 a turn (as a turn-level credit assignment would), so the tokens' mean is not any one's.
def token_advantages(rollout: Rollout, advantage: float) -> list[float]:
    values, turn = [], -1
    for _, ids, mask in rollout.messages:
        turn += any(mask)
        values += [f32(advantage + 0.25 * turn) if m else 0.0 for m in mask]
    return values


# A prime-rl run: per step, groups of rollouts (the first question multi-turn), packed into micro batches of seq_len
# tokens per rank (a sequence longer than seq_len is cut, as prime_rl/trainer/batch.py cuts it), exported by each
# rank's TokenExporter, then STABLE (unless the step is in `unstable`), and, with traces, the effective episodes logged.
# `loss` is "default" (DPPO: is_masked exported), "ipo" (no mask exported).
def prime_rl_run(folder, tokenizer: Tokenizer, steps=(1, 2), ranks=2, group_size=2, seq_len=96, traces=True, unstable=(), loss="default", seed=0) -> Path:
    rng = random.Random(seed)
    output_dir = Path(folder)
    exporters = [TokenExporter(output_dir, rank) for rank in range(ranks)]
    loss_config = DefaultLossConfig() if loss == "default" else IPOLossConfig()
    for step in steps:
        samples, records = [], []
        for number, (question, answer) in enumerate(QUESTIONS):
            group = [rollout(tokenizer, question, answer, rng, multi_turn=number == 0) for _ in range(group_size)]
            mean = sum(r.reward for r in group) / len(group)
            for r in group:
                advantage = r.reward - mean
                records.append(episode_record(r, f"group-{step}-{number}", step, advantage, len(records)))
                samples.append((r, advantage, trainer_logprobs(r, rng)))
        if traces:
            log_episodes(output_dir, records, step)
        for rank, exporter in enumerate(exporters):
            mine = samples[rank::ranks]
            for micro_step in range(0, len(mine), 2):
                batch = mine[micro_step : micro_step + 2]
                micro_batch, model_output, lengths = pack(batch, seq_len)
                exporter.export(step, micro_step // 2, micro_batch, model_output, lengths, loss_config)
        if step not in unstable:
            for exporter in exporters:  # after dist.barrier()
                exporter.mark_stable()
    return output_dir


# What else prime-rl writes into a run folder (output_dir / run.name) beside token_exports/ and the traces: the
# launcher's resolved configs, each launch attempt's logs, the checkpoints, the weight broadcasts, the orchestrator's
# micro batches and the file monitor's metrics.jsonl (src/prime_rl/utils/pathing.py, entrypoints/rl.py and
# monitors/file.py at prime-rl 559b44772e471d1538537b8805cc77f3824a5e64); a file in each folder, as object storage has
# no empty folders.
def prime_rl_run_folder(run_dir, steps=(1,)) -> Path:
    run_dir = Path(run_dir)
    files = ["configs/rl.json", "configs/trainer.json", "configs/orchestrator.json", "configs/envs/train/math.json",
             "logs/attempt_1/trainer.log", "logs/attempt_1/orchestrator.log", "evals/README"]
    for step in steps:
        files += [f"checkpoints/step_{step}/trainer/STABLE", f"broadcasts/step_{step}/STABLE", f"rollouts/step_{step}/rank_0.bin"]
    for name in files:
        (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_text("{}\n" if name.endswith(".json") else "")
    with open(run_dir / "metrics.jsonl", "a", buffering=1) as file:  # FileMonitor.log_metrics, a line per step
        for step in steps:
            file.write(json.dumps({"step": step, "time": 1.7e9 + step, "loss/mean": 0.1}) + "\n")
    return run_dir


# Samples packed into one micro batch ([1, total] tensors, padding at the end), as the trainer receives it, and the
# trainer's output for it; each sample cut at seq_len.
def pack(batch, seq_len: int):
    ids, loss_mask, advantages, inference, trainer, env_names, lengths = [], [], [], [], [], [], []
    for r, advantage, trainer_lp in batch:
        n = min(len(r.token_ids), seq_len)
        ids += r.token_ids[:n]
        loss_mask += r.mask[:n]
        advantages += token_advantages(r, advantage)[:n]
        inference += r.inference[:n]
        trainer += trainer_lp[:n]
        env_names += ["math"] * n
        lengths.append(n)
    padding = 5
    ids += [0] * padding
    loss_mask += [False] * padding
    advantages += [0.0] * padding
    inference += [0.0] * padding
    trainer += [-5.0] * padding
    env_names += [""] * padding
    lengths[-1] += padding  # the padding rides on the last sequence, as prime-rl's packer pads a micro batch
    tensor = lambda values, dtype: torch.tensor([values], dtype=dtype)  # noqa: E731
    micro_batch = {
        "input_ids": tensor(ids, torch.long),
        "position_ids": tensor([i for n in lengths for i in range(n)], torch.long),
        "loss_mask": tensor(loss_mask, torch.bool),
        "advantages": tensor(advantages, torch.float32),
        "inference_logprobs": tensor(inference, torch.float32),
        "env_names": env_names,
        "rl_weights": None, "ce_weights": None, "ref_kl_weights": None,
    }
    trainer_tensor = tensor(trainer, torch.float32)
    entropy = torch.clamp(-trainer_tensor * 0.7, min=0.0)
    return micro_batch, {"logprobs": trainer_tensor, "entropy": entropy}, lengths


# ================================================================================================== NeMo-RL


# BatchedDataDict as log_batched_dict_as_jsonl uses it (nemo_rl/distributed/batched_data_dict.py at NVIDIA-NeMo/RL
# commit 7ea279abfbeb698b092856d0dab61e7cf39bc909: size from the first key, slice of every value).
class BatchedDataDict(dict):
    @property
    def data(self):
        return self

    def slice(self, start: int, end: int) -> "BatchedDataDict":
        sliced_batch = BatchedDataDict()
        for k in self.data:
            sliced_batch[k] = self.data[k][start:end]
        return sliced_batch

    def make_microbatch_iterator(self, microbatch_size: int):
        bsize = self.size
        assert bsize % microbatch_size == 0
        for i in range(0, bsize, microbatch_size):
            yield self.slice(i, i + microbatch_size)

    @property
    def size(self) -> int:
        if not self.data:
            return 0
        key = next(iter(self.data))
        if not torch.is_tensor(self.data[key]):
            return len(self.data[key])
        return self.data[key].shape[0]


# Logger.log_batched_dict_as_jsonl (nemo_rl/utils/logger.py at NeMo-RL 7ea279abfbeb698b092856d0dab61e7cf39bc909), as
# it is but for its print.
def log_batched_dict_as_jsonl(base_log_dir: str, to_log, filename: str) -> None:
    if not isinstance(to_log, BatchedDataDict):
        to_log = BatchedDataDict(to_log)

    # Create full path within log directory
    filepath = os.path.join(base_log_dir, filename)
    os.makedirs(os.path.dirname(filepath), exist_ok=True)

    # Write to JSONL file
    with open(filepath, "w") as f:
        for i, sample in enumerate(to_log.make_microbatch_iterator(1)):
            for key, value in sample.items():
                if isinstance(value, torch.Tensor):
                    sample[key] = value.tolist()
                elif isinstance(value, np.ndarray):
                    sample[key] = value.tolist()
            # default=str is a fallback for non-JSON-serializable types (e.g., datetime, custom objects)
            f.write(json.dumps({**sample, "idx": i}, default=str) + "\n")


# The GRPO loop's log_data (grpo_train in nemo_rl/algorithms/grpo.py at NeMo-RL 7ea279a, the "Log training data"
# block): train_data's tensors, padded to the batch's longest sequence (batched_message_log_to_flat_message pads
# token_ids with the pad token and the rest with 0, to a multiple of make_sequence_length_divisible_by).
def nemo_log_data(rollouts: list[Rollout], advantages: list[float], trainer: list[list[float]], pad_token_id: int, divisible_by: int = 8,
                  skip_prev_logprobs: bool = False, sample_mask: list[float] | None = None) -> dict:
    lengths = [len(r.token_ids) for r in rollouts]
    width = math.ceil(max(lengths) / divisible_by) * divisible_by
    pad = lambda values, value: values + [value] * (width - len(values))  # noqa: E731
    token_mask = torch.tensor([pad([int(m) for m in r.mask], 0) for r in rollouts])
    train_data = {
        "input_ids": torch.tensor([pad(r.token_ids, pad_token_id) for r in rollouts]),
        "input_lengths": torch.tensor(lengths),
        "generation_logprobs": torch.tensor([pad(r.inference, 0.0) for r in rollouts], dtype=torch.float32),
        "token_mask": token_mask,
        "sample_mask": torch.tensor(sample_mask or [1.0] * len(rollouts)),
        "prev_logprobs": torch.tensor([pad(t, 0.0) for t in trainer], dtype=torch.float32),
        "advantages": torch.tensor([pad(token_advantages(r, a), 0.0) for r, a in zip(rollouts, advantages)], dtype=torch.float32),
    }
    if skip_prev_logprobs:  # force_on_policy_ratio: a zero placeholder
        train_data["prev_logprobs"] = torch.zeros_like(train_data["generation_logprobs"])
    rewards = torch.tensor([r.reward for r in rollouts])
    input_lengths = train_data["input_lengths"]
    flat_messages = {"content": [[message["content"] for message, _, _ in r.messages] for r in rollouts]}
    # ---- the block as grpo.py writes it
    log_data = {}
    log_data["content"] = flat_messages["content"]
    log_data["rewards"] = rewards.tolist()
    log_data["input_lengths"] = input_lengths.tolist()
    log_data["token_ids"] = train_data["input_ids"].tolist()
    log_data["token_loss_mask"] = train_data["token_mask"].tolist()
    log_data["sample_loss_mask"] = train_data["sample_mask"].tolist()
    log_data["advantages"] = train_data["advantages"].tolist()
    log_data["generation_logprobs"] = train_data["generation_logprobs"].tolist()
    log_data["prev_logprobs"] = train_data["prev_logprobs"].tolist()
    return log_data


# get_keys_from_message_log (nemo_rl/data/llm_message_utils.py at NeMo-RL 7ea279a).
def get_keys_from_message_log(message_log, keys: list[str]):
    return [{k: msg[k] for k in keys if k in msg} for msg in message_log]


# What validate() (grpo.py at NeMo-RL 7ea279a) logs after `step`: each question repeated `generations` times in a row
# (val_batch.repeat_interleave(val_num_generations_per_prompt)), the message logs (with their token_ids tensors) as
# to_env keeps them, and the total rewards; written by the Logger as val_data_step<step>.jsonl.
def log_nemo_validation(folder, tokenizer: Tokenizer, step: int, rng: random.Random, generations=2, multi_turn=True) -> Path:
    all_message_logs, total_rewards = [], []
    for number, (question, answer) in enumerate(QUESTIONS):
        for _ in range(generations):
            sample = rollout(tokenizer, question, answer, rng, multi_turn=multi_turn and number == 0)
            message_log = [dict(message, token_ids=torch.tensor(ids)) for message, ids, _ in sample.messages]
            total_rewards.append(sample.reward)
            all_message_logs.append(get_keys_from_message_log(message_log, ["role", "content"]))
    val_log_data = {
        "content": all_message_logs,
        "rewards": total_rewards,
    }
    log_batched_dict_as_jsonl(str(folder), val_log_data, f"val_data_step{step}.jsonl")
    return Path(folder) / f"val_data_step{step}.jsonl"


# A NeMo-RL log folder: train_data_step<N>.jsonl per step (from 1), each a batch of GRPO groups (the first question
# multi-turn with a tool reply, when multi_turn), and val_data_step<N>.jsonl beside them for each of `val_steps`.
def nemo_rl_run(folder, tokenizer: Tokenizer, steps=2, group_size=2, multi_turn=True, skip_prev_logprobs=False, val_steps=(), seed=0) -> Path:
    rng = random.Random(seed)
    folder = Path(folder)
    pad_token_id = tokenizer.token_to_id("<|endoftext|>")
    for step in range(steps):
        rollouts, advantages = [], []
        for number, (question, answer) in enumerate(QUESTIONS):
            group = [rollout(tokenizer, question, answer, rng, multi_turn=multi_turn and number == 0) for _ in range(group_size)]
            mean = sum(r.reward for r in group) / len(group)
            rollouts += group
            advantages += [r.reward - mean for r in group]
        trainer = [trainer_logprobs(r, rng) for r in rollouts]
        log_data = nemo_log_data(rollouts, advantages, trainer, pad_token_id, skip_prev_logprobs=skip_prev_logprobs)
        log_batched_dict_as_jsonl(str(folder), log_data, f"train_data_step{step + 1}.jsonl")
    for step in val_steps:
        log_nemo_validation(folder, tokenizer, step, rng, multi_turn=multi_turn)
    return folder


# What NeMo-RL's Logger also makes in its log_dir (logs/exp_<NNN>): a folder per enabled logger, wandb/, swanlab/,
# tensorboard/ and mlflow/ (Logger.__init__ in nemo_rl/utils/logger.py at NeMo-RL 7ea279a), each with a file here.
def nemo_rl_logger_folders(log_dir) -> Path:
    log_dir = Path(log_dir)
    for name in ("tensorboard/events.out.tfevents.1700000000.host", "wandb/run-20260101_000000-abc/files/config.yaml", "mlflow/meta.yaml"):
        (log_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (log_dir / name).write_text("")
    return log_dir
