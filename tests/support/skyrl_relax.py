"""Runs as SkyRL and Relax write them, by copies of their writers' code paths (neither installs without torch):

- SkyRL: dump_per_dataset_eval_results and sanitize_data_source (skyrl/train/utils/trainer_utils.py of NovaSky-AI/SkyRL
  @ a9564572eb8e91076be43c1bd5e4615e3de17265), called as evaluate() does (skyrl/train/evaluate.py: the folder
  dumped_evals/global_step_<N>_evals, eval_only without a step), and TensorBatch.save (a pickle.dump of the batch,
  skyrl/backends/skyrl_train/training_batch.py) for dumped_data/global_step_<N>_training_input.pkl.
- Relax: _sample_to_summary_record, _write_summary_jsonl, save_rollout_result_jsonl and save_eval_summary_jsonl
  (relax/utils/training/train_dump_utils.py of redai-infra/Relax @ 2765d18a5fa57b0c3b7b5f6d310d60ee6c1dfcec), with the
  fields of Sample (relax/utils/types.py) they read; get_sample_multimodal_stats gives a text sample's zero counts.
"""
import json
import pickle
import random
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import SimpleNamespace

# ------------------------------------------------------------------------------------------------------------ SkyRL


VOCABULARY = ["<|im_start|>", "user\n", "assistant\n", "<|im_end|>", "What is ", "2+2", "3*3", "?", " The answer is ", "4", "9", "5", "."]


class ToyTokenizer:  # decode as a Hugging Face tokenizer does: the ids' pieces joined
    def decode(self, ids):
        return "".join(VOCABULARY[i] for i in ids)


def sanitize_data_source(data_source: str) -> str:
    if data_source is None:
        return "unknown"
    return data_source.replace("/", "_")


def dump_per_dataset_eval_results(dump_dir_path: Path, tokenizer, concat_generator_outputs, concat_data_sources, concat_all_envs, concat_env_extras, eval_metrics):
    input_prompts = [tokenizer.decode(prompt) for prompt in concat_generator_outputs["prompt_token_ids"]]
    output_responses = [tokenizer.decode(response) for response in concat_generator_outputs["response_ids"]]
    data_source_indices = {}
    for i, data_source in enumerate(concat_data_sources):
        if data_source is None:
            data_source = "unknown"
        if data_source not in data_source_indices:
            data_source_indices[data_source] = []
        data_source_indices[data_source].append(i)
    for data_source, indices in data_source_indices.items():
        sanitized_data_source = sanitize_data_source(data_source)
        filename = dump_dir_path / f"{sanitized_data_source}.jsonl"
        with open(filename, "w") as f:
            for i in indices:
                entry = {
                    "input_prompt": input_prompts[i],
                    "output_response": output_responses[i],
                    "score": concat_generator_outputs["rewards"][i],
                    "stop_reason": concat_generator_outputs.get("stop_reasons", [None] * len(input_prompts))[i],
                    "env_class": concat_all_envs[i],
                    "env_extras": concat_env_extras[i],
                    "data_source": data_source,
                }
                f.write(json.dumps(entry, ensure_ascii=False) + "\n")
    aggregated_filename = dump_dir_path / "aggregated_results.jsonl"
    with open(aggregated_filename, "w") as f:
        f.write(json.dumps(eval_metrics, ensure_ascii=False) + "\n")


PROBLEMS = [("openai/gsm8k", [4, 5, 7], [8, 9]), ("openai/gsm8k", [4, 6, 7], [8, 10]), ("math", [4, 5, 7], [8, 9])]


# A SkyRL export_path: an evaluation at each step (eval_only: None), n samples per prompt, per-token rewards when
# token_level; training batches pickled at train_steps.
def skyrl_run(export_path: Path, steps=(0, 5), n=2, token_level=False, train_steps=(1, 2), seed=0) -> Path:
    rng = random.Random(seed)
    for global_step in steps:
        outputs = {"prompt_token_ids": [], "response_ids": [], "rewards": [], "stop_reasons": []}
        sources, envs, extras = [], [], []
        for source, question, answer in PROBLEMS:
            for _ in range(n):
                response = [8, rng.choice([9, 10, 11]), 12]
                correct = float(response[1] == answer[1])
                outputs["prompt_token_ids"].append([0, 1, *question, 3, 0, 2])
                outputs["response_ids"].append(response)
                outputs["rewards"].append([0.0, 0.0, correct] if token_level else correct)
                outputs["stop_reasons"].append(rng.choice(["stop", "length"]))
                sources.append(source)
                envs.append("gsm8k")
                extras.append({"data_source": source, "reward_spec": {"ground_truth": VOCABULARY[answer[1]]}})
        folder = export_path / "dumped_evals" / ("eval_only" if global_step is None else f"global_step_{global_step}_evals")
        folder.mkdir(parents=True, exist_ok=True)
        dump_per_dataset_eval_results(folder, ToyTokenizer(), outputs, sources, envs, extras, {"eval/all/avg_score": 0.5})
    data = export_path / "dumped_data"
    for global_step in train_steps:
        data.mkdir(parents=True, exist_ok=True)
        with open(data / f"global_step_{global_step}_training_input.pkl", "wb") as f:  # TensorBatch.save
            pickle.dump({"sequences": [[0, 1, 4, 5]], "metadata": {"response_length": 3}}, f)
    return export_path


# ------------------------------------------------------------------------------------------------------------ Relax


class Status(Enum):  # Sample.Status
    PENDING = "pending"
    COMPLETED = "completed"
    TRUNCATED = "truncated"
    ABORTED = "aborted"
    FAILED = "failed"


@dataclass
class Sample:  # the fields of relax/utils/types.py's Sample the writer reads
    group_index: int | None = None
    prompt: str | list = ""
    tokens: list = field(default_factory=list)
    multimodal_inputs: dict | None = None
    multimodal_train_inputs: dict | None = None
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: float | dict | None = None
    rollout_log_probs: list | None = None
    rollout_log_probs_mask: list | None = None
    status: Status = Status.PENDING
    metadata: dict = field(default_factory=dict)


def get_sample_multimodal_stats(sample) -> dict:  # relax/utils/multimodal/stats.py, for a sample without images
    return {"image_count": 0, "image_token_count": 0, "multimodal_token_count": 0}


def _sample_to_summary_record(sample, rollout_id: int, idx: int, dataset_name: str | None = None) -> dict:
    total_length = len(sample.tokens) if sample.tokens else 0
    response_length = sample.response_length
    prompt_length = max(total_length - response_length, 0)
    response_token_ids = list(sample.tokens[prompt_length:]) if sample.tokens else []
    multimodal_stats = get_sample_multimodal_stats(sample)
    metadata = sample.metadata or {}
    record = {
        "rollout_id": rollout_id,
        "sample_index": idx,
        "prompt": sample.prompt,
        "response": sample.response,
        "reward": sample.reward,
        "prompt_length": prompt_length,
        "response_length": response_length,
        "total_length": total_length,
        "prompt_token_count": prompt_length,
        "response_token_count": response_length,
        "response_token_ids": response_token_ids,
        "total_token_count": total_length,
        "image_count": multimodal_stats["image_count"],
        "image_token_count": multimodal_stats["image_token_count"],
        "multimodal_token_count": multimodal_stats["multimodal_token_count"],
        "agent_turns": metadata.get("rollout_turns", 1),
        "status": sample.status.value if hasattr(sample.status, "value") else str(sample.status),
        "group_index": sample.group_index,
    }
    if sample.rollout_log_probs is not None:
        record["response_rollout_log_probs"] = list(sample.rollout_log_probs)
    if sample.rollout_log_probs_mask is not None:
        record["response_rollout_log_probs_mask"] = list(sample.rollout_log_probs_mask)
    if sample.label is not None:
        record["label"] = sample.label
    if dataset_name is not None:
        record["dataset"] = dataset_name
    return record


def _write_summary_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")


def save_rollout_result_jsonl(args, rollout_id: int, samples: list) -> None:
    result_dir = getattr(args, "rollout_result_dir", None)
    if result_dir is None:
        return
    path = Path(result_dir) / "train" / f"{rollout_id}.jsonl"
    records = [_sample_to_summary_record(s, rollout_id, i) for i, s in enumerate(samples)]
    _write_summary_jsonl(path, records)


def save_eval_summary_jsonl(args, rollout_id: int, data: dict) -> None:
    result_dir = getattr(args, "rollout_result_dir", None)
    if result_dir is None:
        return
    path = Path(result_dir) / "eval" / f"{rollout_id}.jsonl"
    records = []
    for dataset_name, info in data.items():
        samples = info.get("samples")
        if not samples:
            continue
        for i, s in enumerate(samples):
            records.append(_sample_to_summary_record(s, rollout_id, i, dataset_name=dataset_name))
    if not records:
        return
    _write_summary_jsonl(path, records)


def relax_samples(rollout_id: int, rng: random.Random, groups=2, group_size=2, dict_reward=False) -> list[Sample]:
    samples = []
    for group in range(groups):
        for _ in range(group_size):
            response_ids = [rng.randrange(100, 200) for _ in range(rng.randint(2, 5))]
            correct = rng.random() < 0.5
            mask = [True] * len(response_ids)
            mask[0] = rng.random() < 0.5
            samples.append(Sample(
                group_index=group, prompt=[{"role": "user", "content": f"问题 {rollout_id}.{group}"}] if group else f"Question {rollout_id}.{group}",
                tokens=[1, 2, 3, *response_ids], response=f"answer {'right' if correct else 'wrong'}", response_length=len(response_ids),
                label="42", reward={"accuracy": float(correct), "format": 0.5, "pred": "42"} if dict_reward else float(correct),
                rollout_log_probs=[-rng.random() for _ in response_ids], rollout_log_probs_mask=mask,
                status=rng.choice([Status.COMPLETED, Status.TRUNCATED, Status.ABORTED]), metadata={"rollout_turns": 1},
            ))
    return samples


# A Relax rollout_result_dir: training rollouts at steps, evaluations (two datasets) at eval_steps.
def relax_run(folder: Path, steps=(0, 1), eval_steps=(1,), dict_reward=False, seed=0) -> Path:
    rng = random.Random(seed)
    args = SimpleNamespace(rollout_result_dir=str(folder))
    for rollout_id in steps:
        save_rollout_result_jsonl(args, rollout_id, relax_samples(rollout_id, rng, dict_reward=dict_reward))
    for rollout_id in eval_steps:
        save_eval_summary_jsonl(args, rollout_id, {name: {"samples": relax_samples(rollout_id, rng, groups=1)} for name in ("aime", "gsm8k")})
    return folder
