"""Write a deterministic synthetic run in the board's format, of any size.

Every key of the original format is written (PPO's values and token rewards,
the reference response and rewards); `--grpo` adds the keys rollout_logger writes
for GRPO (per-function rewards, advantage, group id, entropies, truncation). The
same arguments always give the same bytes.

    python bench/generate_run.py OUT_DIR --steps 100 --samples 128 --tokens 500 --ranks 4
"""

import argparse
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import orjson

WORDS = ["the", "model", "reward", "policy", "token", "step", "value", "answer", "because", "therefore",
         "押韵", "诗句", "上相", "生坤位", "中兴", "运泰开", "威仪", "如鹤梦", "道德", "似桃梅"]
REWARD_FUNCTIONS = {"accuracy_reward": 1.0, "format_reward": 0.5}
GRPO_KEYS = ["rewards_per_func", "advantage", "group_id", "entropies", "truncated"]
DATA_SOURCES = {"gsm8k": 0.15, "math": -0.15, "code": 0.0}  # each source's shift of the chance of an accurate answer


# Values rounded to bfloat16, as a reference model or critic run in bf16 gives them.
def bf16(values: np.ndarray) -> np.ndarray:
    bits = values.astype(np.float32).view(np.uint32)
    return ((bits + 0x8000) & 0xFFFF0000).view(np.float32).astype(np.float64)


# One rank's lines for one step, as bytes.
def step_lines(seed: int, rank: int, step: int, samples: int, tokens: int, steps: int, grpo: bool, extras: bool = False) -> bytes:
    rng = np.random.default_rng([seed, rank, step])
    extra_rng = np.random.default_rng([seed, rank, step, 1])  # its own stream: the other keys are the same either way
    progress = step / max(steps - 1, 1)
    group_size = next(g for g in (8, 4, 2, 1) if samples % g == 0)
    out = []
    group_sources, group_difficulties = extra_rng.choice(list(DATA_SOURCES), size=samples), extra_rng.integers(1, 6, size=samples)
    for i in range(samples):
        source = str(group_sources[i // group_size])
        length = int(rng.integers(max(1, tokens // 2), tokens * 3 // 2 + 1))
        words = rng.integers(0, len(WORDS), size=length)
        response_tokens = [WORDS[w] for w in words]
        logprobs = -rng.exponential(1.0 - 0.5 * progress, size=length)
        ref_logprobs = bf16(logprobs + rng.normal(0.0, 0.02 + 0.2 * progress, size=length))
        accuracy = float(rng.random() < 0.2 + 0.6 * progress + (DATA_SOURCES[source] if extras else 0.0))
        formatted = float(rng.random() < 0.5 + 0.4 * progress)
        group = f"{step}-{rank}-{i // group_size}"
        reward = REWARD_FUNCTIONS["accuracy_reward"] * accuracy + REWARD_FUNCTIONS["format_reward"] * formatted
        record = {
            "prompt": f"<PAD>请编写第 {step}-{rank}-{i // group_size} 题的下一句<endofsystem>question {i // group_size}: "
            + " ".join(WORDS[w] for w in rng.integers(0, len(WORDS), size=20)),
            "response": " ".join(response_tokens),
            "response_tokens": response_tokens,
            "logprobs": logprobs,
            "ref_logprobs": ref_logprobs,
            "values": bf16(rng.normal(reward, 0.5, size=length)),
            "token_rewards": np.concatenate([-0.01 * (logprobs[:-1] - ref_logprobs[:-1]), [reward]]),
            "entropies": bf16(rng.gamma(2.0, 0.5 - 0.3 * progress, size=length)),
            "reward": reward,
            "step": step,
            "ref_response": " ".join(WORDS[w] for w in rng.integers(0, len(WORDS), size=length)),
            "ref_reward": float(rng.normal(0.6, 0.3)),
            "valid_reward": accuracy,
            "ref_valid_reward": float(rng.random() < 0.3),
            "ground_truth": "answer",
            "rewards_per_func": {"accuracy_reward": accuracy, "format_reward": formatted},
            "advantage": 0.0,
            "group_id": group,
            "truncated": length > tokens * 1.4,
        }
        if extras:  # keys outside the format, as other trainers write them: a data source, a reward's extras...
            answer = int(extra_rng.integers(0, 100))
            record |= {
                "data_source": source,
                "difficulty": int(group_difficulties[i // group_size]),
                "acc": bool(accuracy),
                "pred": str(answer if accuracy else answer + 1),
                "reward_extra_info": {"format_ok": bool(formatted), "parse_steps": [int(x) for x in extra_rng.integers(0, 9, size=3)]},
                "critique": f"The answer {answer} was checked against the reference by the {source} verifier; " * 2,
            }
        out.append(record)
    for start in range(0, samples, group_size):
        rewards = np.array([r["reward"] for r in out[start : start + group_size]])
        advantages = (rewards - rewards.mean()) / (rewards.std() + 1e-4) if group_size > 1 else rewards * 0
        for record, advantage in zip(out[start : start + group_size], advantages):
            record["advantage"] = float(advantage)
    if not grpo:
        for record in out:
            for key in GRPO_KEYS:
                del record[key]
    return b"".join(orjson.dumps(r, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n" for r in out)


# With summaries, also the file's summaries and texts files, a record per step, as rollout_logger's writer writes one
# per batch.
def write_rank_file(path: str, seed: int, rank: int, ranks: int, steps: int, samples: int, tokens: int, grpo: bool, extras: bool = False, summaries: bool = False):
    per_rank = samples // ranks + (1 if rank < samples % ranks else 0)
    if summaries:
        from rl_board.reading.summaries import batch_record, summaries_header, texts_file
        from rollout_logger.metadata import SUMMARIES_SUFFIX
    with (
        open(path, "wb") as file,
        open(path + SUMMARIES_SUFFIX if summaries else os.devnull, "wb") as summaries_file,
        open(texts_file(path) if summaries else os.devnull, "wb") as texts_out,
    ):
        if summaries:
            summaries_file.write(summaries_header(Path(path).name))
        for step in range(steps):
            data = step_lines(seed, rank, step, per_rank, tokens, steps, grpo, extras)
            if summaries:
                texts, record = batch_record(data, file.tell(), texts_out.tell())
                texts_out.write(texts)
                summaries_file.write(record)
            file.write(data)


# Write ranks files of steps x samples (split over ranks) lines of about `tokens` tokens each.
def write_run(out_dir, steps=20, samples=64, tokens=200, ranks=4, seed=0, grpo=False, workers=None, extras=False, summaries=False) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"rollout_data_rank_{rank}.jsonl" for rank in range(ranks)]
    args = [(str(p), seed, rank, ranks, steps, samples, tokens, grpo, extras, summaries) for rank, p in enumerate(paths)]
    if workers == 1 or ranks == 1:
        for a in args:
            write_rank_file(*a)
    else:
        with ProcessPoolExecutor(max_workers=workers or os.cpu_count()) as pool:
            list(pool.map(write_rank_file, *zip(*args)))
    return paths


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project's rl_board, for --summaries
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--samples", type=int, default=64, help="samples per step, over all ranks")
    parser.add_argument("--tokens", type=int, default=200, help="mean response length in tokens")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--grpo", action="store_true", help="also write the GRPO keys of rollout_logger")
    parser.add_argument("--extras", action="store_true", help="also write keys outside the format: data_source, difficulty, acc, pred, a nested and a long value")
    parser.add_argument("--summaries", action="store_true", help="also write each file's summaries file, as rollout_logger does")
    options = parser.parse_args()
    written = write_run(options.out_dir, options.steps, options.samples, options.tokens, options.ranks, options.seed, options.grpo, extras=options.extras, summaries=options.summaries)
    print(f"wrote {sum(p.stat().st_size for p in written) / 1e6:.1f} MB in {len(written)} files to {options.out_dir}")
