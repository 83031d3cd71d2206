"""Converts SkyRL's training batch dumps into the RL Logging Board's JSONL, in the training environment.

SkyRL writes each step's training batch with `trainer.dump_data_batch=true`:
`<trainer.export_path>/dumped_data/global_step_<N>_training_input.pkl`, the TrainingInputBatch pickled by
TensorBatch.save (skyrl/train/trainer.py, dump_data; skyrl/backends/skyrl_train/training_batch.py). Those are pickles:
the board never opens them (unpickling runs code from the file). Run this where they were written (SkyRL installed, for
its TrainingInputBatch class), on files you trust:

    python examples/convert_skyrl_training_dump.py /path/dumped_data/*.pkl --out runs/skyrl_board [--tokenizer MODEL]

The batch is dumped after the advantages are computed, with its rewards and uids already dropped: no reward is in it
(SkyRL's evaluation dumps, dumped_evals/, have their scores, and open in the board as they are). Each row becomes a
line: step (N), prompt and response (decoded with --tokenizer, else the token ids), response_tokens, logprobs
(action_log_probs: the trainer's), sampler_logprobs (rollout_logprobs: the inference engine's), ref_logprobs
(base_action_log_probs), tool_mask (loss_mask: 0 where an environment wrote a token), advantage (the mean of
advantages over the loss tokens), group_id (the prompt's token ids: GRPO's repeated prompt). The sequences are
left-padded, the response tensors right-aligned: a row's response is its last response_mask.sum() tokens.
"""

import argparse
import hashlib
import json
import math
import pickle
import re
from pathlib import Path


def values(tensor, row: int, length: int) -> list | None:
    """The last `length` values of a right-aligned (batch, response_len) tensor's row."""
    if tensor is None:
        return None
    kept = tensor[row].tolist()[-length:] if length else []
    return [value if math.isfinite(value) else None for value in map(float, kept)]


def board_lines(batch, step: int, tokenizer=None) -> list[dict]:
    """A TrainingInputBatch (a dict of tensors) as the board's lines, a line per row."""
    lines = []
    for row in range(len(batch["sequences"])):
        length = int(batch["response_mask"][row].sum())
        real = [int(token) for token, keep in zip(batch["sequences"][row].tolist(), batch["attention_mask"][row].tolist()) if keep]
        prompt_ids, response_ids = real[: len(real) - length], real[len(real) - length :]
        decode = (lambda ids: tokenizer.decode(ids)) if tokenizer else (lambda ids: " ".join(map(str, ids)))  # noqa: E731
        line = {"step": step, "prompt": decode(prompt_ids), "response": decode(response_ids), "reward": None,
                "group_id": hashlib.blake2b(json.dumps(prompt_ids).encode(), digest_size=8).hexdigest(),
                "response_tokens": tokenizer.convert_ids_to_tokens(response_ids) if tokenizer else [str(token) for token in response_ids]}
        for board_key, key in (("logprobs", "action_log_probs"), ("sampler_logprobs", "rollout_logprobs"), ("ref_logprobs", "base_action_log_probs")):
            if batch.get(key) is not None:
                line[board_key] = values(batch[key], row, length)
        mask = [int(flag) for flag in values(batch.get("loss_mask"), row, length) or [1] * length]
        if not all(mask):
            line["tool_mask"] = mask
        advantages = values(batch.get("advantages"), row, length)
        kept = [value for value, flag in zip(advantages or [], mask) if flag and value is not None]
        if kept:
            line["advantage"] = sum(kept) / len(kept)
        lines.append(line)
    return lines


def convert(paths: list[Path], out: Path, tokenizer=None) -> int:
    """Writes the dumps' rows into out/rollout_data_rank_0.jsonl; the lines written."""
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    with open(out / "rollout_data_rank_0.jsonl", "a", encoding="utf-8") as file:
        for path in sorted(paths, key=lambda path: int(re.search(r"global_step_(\d+)", path.name).group(1))):
            with open(path, "rb") as dump:
                batch = pickle.load(dump)  # a file you trust: you wrote it
            for line in board_lines(batch, int(re.search(r"global_step_(\d+)", path.name).group(1)), tokenizer):
                file.write(json.dumps(line, ensure_ascii=False) + "\n")
                written += 1
    return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dumps", nargs="+", type=Path, help="SkyRL's global_step_<N>_training_input.pkl files")
    parser.add_argument("--out", type=Path, required=True, help="the run folder to write (lines are appended)")
    parser.add_argument("--tokenizer", help="a tokenizer (model name or folder) to decode the tokens")
    options = parser.parse_args()
    tokenizer = None
    if options.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(options.tokenizer)
    print(f"{convert(options.dumps, options.out, tokenizer)} lines written to {options.out}/rollout_data_rank_0.jsonl")
