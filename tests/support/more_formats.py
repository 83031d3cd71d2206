"""Writers that reproduce AReaL's trajectory dumps, ROLL's RLVR rollout dumps and open-instruct's rollout traces with
those frameworks' own writing code, copied below with its source cited (none installs here without its GPU stack),
fed with the toy GRPO task of tests/support/prime_rl_nemo_rl.py (its tiny byte-level BPE makes and decodes the token
ids, standing for the trainer's tokenizer). Every writer is deterministic (seeded).

- AReaL: WorkflowExecutor._dump_trajectory (rollout/<version>/<task_id>.jsonl; aiofiles, pinned in
  tests/requirements.txt, as AReaL writes with it), fed with RLVRWorkflow.arun_episode's tensors joined by
  concat_padded_tensors as GroupedRolloutWorkflow does.
- ROLL: dump_rollout_to_specific_path and COLUMMNS_CONFIG (rollout_dump_data.step_<n>.jsonl of the RLVR pipeline),
  with agent_formats' copy of write_to_json_process.
- open-instruct: RolloutRecord, save_rollout_metadata, _get_request_info_for_sample, _save_rollouts and
  save_rollouts_to_disk (<run>_rollouts_<shard>.jsonl, <run>_metadata.jsonl).
"""

import asyncio
import copy
import getpass
import json
import logging
import multiprocessing
import os
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiofiles
import aiofiles.os
import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from tests.support.agent_formats import write_to_json_process
from tests.support.prime_rl_nemo_rl import GENERATION_PROMPT, QUESTIONS, answer_text, chat_prompt, f32

# ====================================================================================================== AReaL
# areal/utils/data.py (_pad_cat_dim0, concat_padded_tensors without its multimodal keys), areal/utils/stats_logger.py
# (StatsLogger.get_log_path) and areal/infra/workflow_executor.py (WorkflowExecutor._get_dump_dir and
# _dump_trajectory) at inclusionAI/AReaL commit 4aef98d8d818af55b43621aaadba047ae10f4e77, as they are but for the
# executor's other state (config, tokenizer, logger, inference engine: SimpleNamespace stand-ins).


def _pad_cat_dim0(tensors: list[torch.Tensor], pad_value: float = 0.0) -> torch.Tensor:
    if not tensors:
        raise ValueError("_pad_cat_dim0 requires a non-empty list of tensors.")
    ndim = tensors[0].ndim
    if ndim <= 1:
        return torch.cat(tensors, dim=0)

    # Compute the maximum shape for dims 1 … N-1
    max_shape = [0] * (ndim - 1)
    for t in tensors:
        if t.ndim != ndim:
            raise ValueError(f"Dimension mismatch: expected {ndim}D tensors, got {t.ndim}D")
        for i in range(1, ndim):
            max_shape[i - 1] = max(max_shape[i - 1], t.shape[i])

    padded_tensors = []
    for t in tensors:
        pad_sizes = [max_shape[i - 1] - t.shape[i] for i in range(1, ndim)]
        if any(pad_sizes):
            # F.pad expects sizes in reversed dimension order (innermost first)
            pad = []
            for ps in reversed(pad_sizes):
                pad.extend([0, ps])
            t = F.pad(t, tuple(pad), "constant", pad_value)
        padded_tensors.append(t)

    return torch.cat(padded_tensors, dim=0)


def concat_padded_tensors(tensor_dicts: list[dict[str, Any]], pad_value: float = 0.0) -> dict[str, Any]:
    if not tensor_dicts:
        return {}
    if len(tensor_dicts) == 1:
        return dict(tensor_dicts[0])

    result: dict[str, Any] = {}
    for key in tensor_dicts[0]:
        values = [td[key] for td in tensor_dicts]
        if isinstance(values[0], torch.Tensor):
            pv = 0.0 if key == "attention_mask" else pad_value
            result[key] = _pad_cat_dim0(values, pad_value=pv)
        elif isinstance(values[0], list):
            result[key] = [item for v in values for item in v]
        else:
            result[key] = values[0]

    return result


def get_log_path(experiment_name: str, trial_name: str, fileroot: str) -> str:
    path = f"{fileroot}/logs/{getpass.getuser()}/{experiment_name}/{trial_name}"
    os.makedirs(path, exist_ok=True)
    return path


class WorkflowExecutor:
    def __init__(self, fileroot: str, tokenizer: Tokenizer, version: int):
        self.config = SimpleNamespace(fileroot=fileroot, experiment_name="gsm8k-grpo", trial_name="trial0")
        self.tokenizer = tokenizer
        self.logger = logging.getLogger("WorkflowExecutor")
        self.inference_engine = SimpleNamespace(get_version=lambda: version)

    def _get_tokenizer(self):
        return self.tokenizer

    def _get_dump_dir(self, is_eval: bool) -> str | None:
        """Get the dump directory based on config and is_eval flag."""
        config = self.config
        if not config.fileroot or not config.experiment_name or not config.trial_name:
            return None

        log_path = get_log_path(
            experiment_name=self.config.experiment_name,
            trial_name=self.config.trial_name,
            fileroot=self.config.fileroot,
        )
        subdir = "eval-rollout" if is_eval else "rollout"
        return os.path.join(log_path, subdir)

    async def _dump_trajectory(
        self,
        traj: dict[str, Any] | None,
        task_id: int,
        is_eval: bool,
    ) -> tuple[bool, str]:
        if traj is None:
            return False, "trajectory is None"

        dump_dir = self._get_dump_dir(is_eval)
        if dump_dir is None:
            return False, "dump dir is empty"

        tokenizer = self._get_tokenizer()
        if tokenizer is None:
            return False, "tokenizer not configured"

        # Extract tensors
        input_ids = traj.get("input_ids")
        rewards = traj.get("rewards")
        loss_mask = traj.get("loss_mask")
        attention_mask = traj.get("attention_mask")

        if input_ids is None or rewards is None or loss_mask is None or attention_mask is None:
            return (
                False,
                "missing required tensor fields: input_ids, rewards, attention_mask, or loss_mask",
            )

        if "versions" not in traj:
            self.logger.warning("Trajectory missing 'versions' field, defaulting to current inference engine version.")
            versions = [self.inference_engine.get_version()]
        else:
            versions = traj["versions"].flatten().tolist()

        tail_version = max(versions)
        head_version = min(versions)
        # Create versioned directory
        version_dir = os.path.join(dump_dir, str(tail_version))
        await aiofiles.os.makedirs(version_dir, exist_ok=True)

        # Handle batched trajectories
        batch_size = input_ids.shape[0]

        file_path = os.path.join(version_dir, f"{task_id}.jsonl")
        async with aiofiles.open(file_path, "a") as f:
            for i in range(batch_size):
                seqlen = attention_mask[i].sum().item()
                if seqlen == 0:
                    continue
                ids = input_ids[i, :seqlen].tolist()
                mask = loss_mask[i, :seqlen].tolist()
                # Skip samples with empty completions (all prompt, no completion tokens)
                if mask[-1] != 1:
                    continue

                prompt_end = seqlen - sum(mask)
                prompt_ids = ids[:prompt_end]
                completion_ids = ids[prompt_end:]

                # Decode to text
                prompt_text = tokenizer.decode(prompt_ids, skip_special_tokens=False)
                completion_text = tokenizer.decode(completion_ids, skip_special_tokens=False)

                reward = rewards[i].item()

                record = {
                    "task_id": task_id,
                    "sample_idx": i,
                    "seqlen": seqlen,
                    "prompt_len": prompt_end,
                    "head_version": head_version,
                    "tail_version": tail_version,
                    "reward": reward,
                    "prompt": prompt_text,
                    "completion": completion_text,
                }
                await f.write(json.dumps(record) + "\n")
        return True, ""


# ---- end of the copy


# RLVRWorkflow.arun_episode's result for one sample (areal/workflow/rlvr.py at AReaL 4aef98d): the prompt's tokens
# with version -1, the completion's with the version of the weights that generated each. `output_versions` stands
# for the engine's (one per completion token); a completion that ends without <|im_end|> is the one cut at the
# length limit.
def rlvr_episode(tokenizer: Tokenizer, question: str, answer: str, output_versions_of, rng: random.Random) -> dict:
    input_tokens = tokenizer.encode(chat_prompt(question) + GENERATION_PROMPT).ids
    text = answer_text(question, answer, rng)
    output_tokens = tokenizer.encode(text + "<|im_end|>").ids
    output_logprobs = [f32(-rng.expovariate(1.5)) for _ in output_tokens]
    output_versions = output_versions_of(len(output_tokens))
    reward = 1.0 if f"\\boxed{{{answer}}}" in text else 0.0
    seq = input_tokens + output_tokens
    logprobs = [0.0] * len(input_tokens) + output_logprobs
    loss_mask = [0] * len(input_tokens) + [1] * len(output_tokens)
    versions = [-1] * len(input_tokens) + output_versions
    res = {
        "input_ids": torch.tensor(seq, dtype=torch.int32),
        "loss_mask": torch.tensor(loss_mask, dtype=torch.int32),
        "logprobs": torch.tensor(logprobs, dtype=torch.float32),
        "versions": torch.tensor(versions, dtype=torch.int32),
        "attention_mask": torch.ones(len(seq), dtype=torch.bool),
        "rewards": torch.tensor(reward, dtype=torch.float32),
    }
    return {k: v.unsqueeze(0) for k, v in res.items()}


# An AReaL run's log path: per version, `tasks` tasks of `group_size` samples dumped to rollout/<version>/ (task ids
# counting up as TaskIdGenerator's), and per `eval_versions` one evaluation task to eval-rollout/; one task of the
# last version was interrupted by the weight update (its first tokens from the version before). config.yaml and
# main.log beside, as the trainer writes them. Returns the log path.
def areal_run(fileroot, tokenizer: Tokenizer, versions=(1, 2, 3), tasks=2, group_size=3, eval_versions=(2,)) -> Path:
    rng = random.Random(0)
    task_id = 0
    log_path = None
    for version in versions:
        executor = WorkflowExecutor(str(fileroot), tokenizer, version)
        for task in range(tasks + (1 if version in eval_versions else 0)):
            is_eval = task == tasks
            question, answer = QUESTIONS[(task_id + task) % len(QUESTIONS)]
            interrupted = version == versions[-1] and task == 0

            def output_versions_of(length, version=version, interrupted=interrupted):
                return [version - 1] * (length // 2) + [version] * (length - length // 2) if interrupted else [version] * length

            group = [rlvr_episode(tokenizer, question, answer, output_versions_of, rng) for _ in range(group_size)]
            traj = concat_padded_tensors(group)  # GroupedRolloutWorkflow.arun_episode's tensor case
            ok, reason = asyncio.run(executor._dump_trajectory(traj, task_id, is_eval))
            assert ok, reason
            task_id += 1
        log_path = Path(executor._get_dump_dir(False)).parent
    (log_path / "config.yaml").write_text("experiment_name: gsm8k-grpo\ntrial_name: trial0\n")
    (log_path / "main.log").write_text("")
    return log_path


# ======================================================================================================= ROLL RLVR
# roll/pipeline/rlvr/utils.py (COLUMMNS_CONFIG, DUMPING_FUNC, dump_rollout_to_specific_path) at alibaba/ROLL commit
# 8eb27cc2dc34c4d1310b169d9b86d339004d811a, as they are; DUMPING_FUNC's process is started as ROLL starts it, and
# joined here (ROLL's is a daemon the pipeline does not wait for).

COLUMMNS_CONFIG = [
    ['global_step', 'bigint'],
    ['id', 'string'],
    ['source', 'string'],
    ['difficulty', 'string'],
    ['prompt', 'string'],
    ['messages', 'string'],
    ['ground_truth', 'string'],
    ['case_type', 'string'],
    ['test_case_function', 'string'],
    ['test_cases', 'string'],
    ['tag', 'string'],
    ['domain', 'string'],
    ['responses', 'string'],
    ['scores', 'double'],
    ['sampling_params', 'string']
]


def json_checker(path: str):
    return path.startswith("/")


DUMPING_FUNC = [
    [json_checker, write_to_json_process],
]


def dump_rollout_to_specific_path(path: str, global_step: int, data, tokenizer):
    if not path:
        return
    write_data = {k: copy.deepcopy(v) for k, v in data.non_tensor_batch.items()}
    responses = tokenizer.batch_decode(data.batch['responses'], skip_special_tokens=True)
    data_cnt = len(responses)
    write_data['responses'] = responses
    scores = data.batch['scores'].tolist()
    write_data['scores'] = scores
    meta_info = [json.dumps(data.meta_info)] * data_cnt
    write_data['sampling_params'] = meta_info
    write_data['global_step'] = [global_step] * data_cnt

    # TODO:If IO becomes the bottleneck, need use queue and only one write process to dump data
    for checker, func in DUMPING_FUNC:
        if checker(path):
            p = multiprocessing.get_context("fork").Process(target=func, args=(path, write_data, COLUMMNS_CONFIG), daemon=True)
            p.start()
            p.join()  # not in ROLL: the test reads the file next


# ---- end of the copy


# DataProto as dump_rollout_to_specific_path uses it: batch (tensors), non_tensor_batch (numpy object arrays), meta_info.
@dataclass
class DataProto:
    batch: dict
    non_tensor_batch: dict
    meta_info: dict


# The transformers tokenizer's batch_decode, for the toy tokenizer.
@dataclass
class BatchDecoder:
    tokenizer: Tokenizer

    def batch_decode(self, sequences, skip_special_tokens: bool = True) -> list[str]:
        return self.tokenizer.decode_batch([list(map(int, ids)) for ids in sequences], skip_special_tokens=skip_special_tokens)


# A ROLL RLVR rollout_dump_dir: per step, `prompts` dataset rows (math_rule: id, tag, domain, ground_truth, and the
# question as messages, a JSON string, or as prompt when `prompt_column`), each repeated num_return_sequences times
# in a row as the generate scheduler expands them, its responses right-padded with <|endoftext|>, a 0/1 score each.
def roll_rlvr_run(folder, tokenizer: Tokenizer, steps=(0, 1), prompts=2, num_return_sequences=3, prompt_column=False) -> Path:
    path = str(Path(folder).resolve())
    rng = random.Random(0)
    pad = tokenizer.token_to_id("<|endoftext|>")
    for step in steps:
        rows, responses, scores = {key: [] for key in ("id", "messages" if not prompt_column else "prompt", "ground_truth", "tag", "domain")}, [], []
        for number in range(prompts):
            question, answer = QUESTIONS[(step + number) % len(QUESTIONS)]
            for _ in range(num_return_sequences):
                rows["id"].append(f"deepmath-{step}-{number}")
                if prompt_column:
                    rows["prompt"].append(question)
                else:
                    rows["messages"].append(json.dumps([{"role": "system", "content": "Reason, then answer in \\boxed{}."}, {"role": "user", "content": question}]))
                rows["ground_truth"].append(answer)
                rows["tag"].append("deepmath_103k")
                rows["domain"].append("math_rule")
                text = answer_text(question, answer, rng)
                responses.append(tokenizer.encode(text + "<|im_end|>").ids)
                scores.append(1.0 if f"\\boxed{{{answer}}}" in text else 0.0)
        width = max(len(ids) for ids in responses)
        batch = {"responses": torch.tensor([ids + [pad] * (width - len(ids)) for ids in responses]), "scores": torch.tensor(scores)}
        meta_info = {"global_step": step, "generation_config": {"temperature": 1.0, "top_p": 0.99, "max_new_tokens": 64, "num_return_sequences": num_return_sequences}}
        data = DataProto(batch, {key: np.array(values, dtype=object) for key, values in rows.items()}, meta_info)
        dump_rollout_to_specific_path(path, step, data, BatchDecoder(tokenizer))
    return Path(path)


# =================================================================================================== open-instruct
# open_instruct/data_types.py (ToolCallStats, RequestInfo) and open_instruct/rl_utils.py (RolloutMetadata,
# RolloutRecord, save_rollout_metadata, _get_request_info_for_sample, _save_rollouts, save_rollouts_to_disk) at
# allenai/open-instruct commit e6c3044aa6201c8bfa4573c1b03142af599e730d, as they are but for the logger and
# utils.get_git_commit (a fixed commit here); save_rollouts_to_disk's thread pool is waited for here.

ROLLOUT_SHARD_SIZE = 10000


@dataclass
class ToolCallStats:
    """Statistics for a single tool call."""

    tool_name: str
    success: bool
    runtime: float


@dataclass
class RequestInfo:
    """Container for tool usage information used in queue payloads."""

    num_calls: list[int]
    timeouts: list[int]
    tool_errors: list[str]
    tool_outputs: list[str]
    tool_runtimes: list[float]
    tool_calleds: list[bool]
    tool_call_stats: list[list[ToolCallStats]] = field(default_factory=list)
    rollout_states: list[dict] = field(default_factory=list)


@dataclass
class RolloutMetadata:
    run_name: str
    git_commit: str
    model_name: str
    timestamp: str


@dataclass
class RolloutRecord:
    step: int
    sample_idx: int
    prompt_idx: int
    prompt_tokens: list[int]
    response_tokens: list[int]
    reward: float
    advantage: float
    finish_reason: str
    dataset: str
    ground_truth: list[int] | None = None
    request_info: dict | None = None
    logprobs: list[float] | None = None


def save_rollout_metadata(save_path: str, run_name: str, model_name: str | None) -> None:
    metadata = RolloutMetadata(
        run_name=run_name,
        git_commit="e6c3044aa6201c8bfa4573c1b03142af599e730d",
        model_name=model_name or "unknown",
        timestamp="2026-08-21T09:00:00+00:00",
    )
    metadata_path = os.path.join(save_path, f"{run_name}_metadata.jsonl")
    os.makedirs(save_path, exist_ok=True)
    with open(metadata_path, "w") as f:
        f.write(json.dumps(asdict(metadata)) + "\n")


def _get_request_info_for_sample(request_info: RequestInfo | None, i: int) -> dict | None:
    """Extract per-sample request info from batch-level RequestInfo."""
    if not request_info:
        return None
    return {
        "num_calls": request_info.num_calls[i] if i < len(request_info.num_calls) else 0,
        "timeouts": request_info.timeouts[i] if i < len(request_info.timeouts) else 0,
        "tool_errors": request_info.tool_errors[i] if i < len(request_info.tool_errors) else "",
        "tool_outputs": request_info.tool_outputs[i] if i < len(request_info.tool_outputs) else "",
        "tool_runtimes": request_info.tool_runtimes[i] if i < len(request_info.tool_runtimes) else 0.0,
        "tool_calleds": request_info.tool_calleds[i] if i < len(request_info.tool_calleds) else False,
        "tool_call_stats": (
            [asdict(s) for s in request_info.tool_call_stats[i]] if i < len(request_info.tool_call_stats) else []
        ),
        "rollout_state": request_info.rollout_states[i] if i < len(request_info.rollout_states) else {},
    }


def _save_rollouts(save_path, run_name, step, batch, result, advantages, num_samples_per_prompt, shard_idx) -> None:
    shard_filename = f"{run_name}_rollouts_{shard_idx:06d}.jsonl"
    filepath = os.path.join(save_path, shard_filename)
    os.makedirs(save_path, exist_ok=True)

    assert batch.scores is not None, "batch.scores must not be None when saving rollouts"

    records = []
    for i in range(len(batch.queries)):
        records.append(
            asdict(
                RolloutRecord(
                    step=step,
                    sample_idx=i,
                    prompt_idx=i // num_samples_per_prompt,
                    prompt_tokens=batch.queries[i],
                    response_tokens=result.responses[i],
                    reward=float(batch.scores[i]),
                    advantage=float(advantages[i]),
                    finish_reason=result.finish_reasons[i],
                    dataset=batch.datasets[i],
                    ground_truth=batch.ground_truths[i],
                    request_info=_get_request_info_for_sample(result.request_info, i),
                    logprobs=result.logprobs[i] if result.logprobs else None,
                )
            )
        )

    with open(filepath, "a") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")


def save_rollouts_to_disk(save_path, run_name, step, batch, result, advantages, num_samples_per_prompt, total_samples_written) -> None:
    shard_idx = total_samples_written // ROLLOUT_SHARD_SIZE
    _save_rollouts(save_path, run_name, step, batch, result, advantages, num_samples_per_prompt, shard_idx)


# ---- end of the copy


# A tool call's output as open-instruct appends it to the response (process_tool_tokens: log-prob 0.0 each).
def tool_output_text(result: str) -> str:
    return f"<output>\n{result}\n</output>\n"


# An open-instruct rollouts_save_path: per step, `prompts` prompts of `samples` samples (the "standard" advantage,
# (score - group mean) / (group std + 1e-8), as DataPreparationActor computes it), responses as vLLM returns them
# (token ids, processed log-probs; every other one calls a python tool whose output tokens have log-prob 0.0, one of
# those calls fails), one response cut at the length limit, one empty (an EOS with log-prob NaN);
# total_samples_written counted as the actor counts it, so a shard holds whole steps until it reaches shard_size.
def open_instruct_run(folder, tokenizer: Tokenizer, steps=(1, 2, 3), prompts=2, samples=3, run_name="olmo_grpo__1__1755", shard_size=None) -> Path:
    global ROLLOUT_SHARD_SIZE
    path = str(Path(folder))
    rng = random.Random(0)
    save_rollout_metadata(path, run_name, "allenai/OLMo-2-0425-1B-Instruct")
    eos = tokenizer.token_to_id("<|im_end|>")
    total_samples_written = 0
    saved_size, ROLLOUT_SHARD_SIZE = ROLLOUT_SHARD_SIZE, shard_size or ROLLOUT_SHARD_SIZE
    try:
        for step in steps:
            queries, responses, finish_reasons, logprobs, scores, ground_truths = [], [], [], [], [], []
            info = {key: [] for key in ("num_calls", "timeouts", "tool_errors", "tool_outputs", "tool_runtimes", "tool_calleds", "tool_call_stats", "rollout_states")}
            for number in range(prompts):
                question, answer = QUESTIONS[(step + number) % len(QUESTIONS)]
                query = tokenizer.encode(chat_prompt(question) + GENERATION_PROMPT).ids
                for sample in range(samples):
                    text = answer_text(question, answer, rng)
                    calls = sample % 2
                    pieces = [(tokenizer.encode("<tool_call>" + answer + "</tool_call>").ids, True), (tokenizer.encode(tool_output_text(answer)).ids, False)] if calls else []
                    pieces.append((tokenizer.encode(text + "<|im_end|>").ids, True))
                    ids = [t for piece, _ in pieces for t in piece]
                    values = [f32(-rng.expovariate(1.5)) if sampled else 0.0 for piece, sampled in pieces for _ in piece]
                    finish = "stop"
                    if step == steps[-1] and number == 0 and sample == 0:  # cut at max_tokens
                        ids, values, finish = ids[:5], values[:5], "length"
                    if step == steps[0] and number == 1 and sample == 2:  # vLLM returned nothing: an EOS, log-prob NaN
                        ids, values = [eos], [float("nan")]
                    failed = calls and number == 1
                    queries.append(query)
                    responses.append(ids)
                    finish_reasons.append(finish)
                    logprobs.append(values)
                    scores.append(1.0 if finish == "stop" and f"\\boxed{{{answer}}}" in text else 0.0)
                    ground_truths.append([answer])
                    stats = [ToolCallStats("python", not failed, 0.25 + sample)] if calls else []
                    info["num_calls"].append(calls)
                    info["timeouts"].append(0)
                    info["tool_errors"].append("ZeroDivisionError" if failed else "")
                    info["tool_outputs"].append(answer if calls else "")
                    info["tool_runtimes"].append(0.25 + sample if calls else 0.0)
                    info["tool_calleds"].append(calls > 0)
                    info["tool_call_stats"].append(stats)
                    info["rollout_states"].append({"rewards": [], "step_count": calls, "done": True, "info": {}, "tool_output": answer if calls else "",
                                                   "tool_error": "ZeroDivisionError" if failed else "", "tool_runtime": 0.25 + sample if calls else 0.0,
                                                   "timeout": False, "tool_call_stats": [asdict(s) for s in stats]})
            scores_array = np.array(scores)
            per_prompt = scores_array.reshape(-1, samples)
            mean = np.repeat(per_prompt.mean(axis=-1), samples, axis=0)
            std = np.repeat(per_prompt.std(axis=-1), samples, axis=0)
            advantages = (scores_array - mean) / (std + 1e-8)
            batch = SimpleNamespace(queries=queries, scores=scores, datasets=["gsm8k_tool"] * len(queries), ground_truths=ground_truths)
            result = SimpleNamespace(responses=responses, finish_reasons=finish_reasons, logprobs=logprobs, request_info=RequestInfo(**info))
            save_rollouts_to_disk(path, run_name, step, batch, result, advantages, samples, total_samples_written)
            total_samples_written += len(batch.queries)
    finally:
        ROLLOUT_SHARD_SIZE = saved_size
    return Path(path)
