"""Converts slime's (and miles') debug rollout dumps into the RL Logging Board's JSONL, in the training environment.

slime writes a rollout's samples with `--save-debug-rollout-data /path/rollout_data_{rollout_id}.pt`: `torch.save` of
`{"rollout_id", "samples": [Sample.to_dict(), ...]}` (slime/ray/rollout.py, `save_debug_rollout_data`; evaluation
rollouts as `eval_<id>`). Those are pickles: the board never opens them (unpickling runs code from the file). Run this
where the dumps were written (it needs torch; slime's own classes only if a sample holds them), on files you trust:

    python examples/convert_slime_rollout_dump.py /path/rollout_data_*.pt --out runs/slime_board [--tokenizer MODEL]

Each sample becomes a line: prompt (a chat prompt as its messages' text), response, reward (a dict reward: each of
its numbers under rewards_per_func, reward their sum), step (the rollout id), group_id (group_index), ground_truth
(label), truncated and stop_reason (status), response_tokens (the last response_length of tokens, as text with
--tokenizer, else the ids), logprobs (rollout_log_probs: the rollout engine's, SGLang's, the only ones slime keeps; the
board's Step-Mismatch needs the trainer's too), tool_mask (loss_mask: 0 where an environment wrote a token), and the
metadata's plain values as fields. Evaluation dumps go to <out>/eval.
"""

import argparse
import json
import math
import re
from pathlib import Path

# slime's Sample.Status values, as the board's stop_reason.
STOP_REASONS = {"completed": "stop", "truncated": "length", "aborted": "error", "failed": "error"}


def board_line(sample: dict, step: int, tokenizer=None) -> dict:
    """One slime sample (`Sample.to_dict()`) as a line of the board's format."""
    prompt = sample.get("prompt", "")
    if isinstance(prompt, list):  # a chat: its messages' text
        prompt = "\n".join(f"{message.get('role', '?')}: {message.get('content', '')}" for message in prompt if isinstance(message, dict))
    line = {"prompt": str(prompt), "response": str(sample.get("response", "")), "step": step}
    reward = sample.get("reward")
    if isinstance(reward, dict):
        scores = {str(name): float(value) for name, value in reward.items() if isinstance(value, (int, float)) and not isinstance(value, bool)}
        line["rewards_per_func"] = scores
        line["reward"] = sum(scores.values()) if scores else None
    elif isinstance(reward, (int, float)) and not isinstance(reward, bool):
        line["reward"] = float(reward)
    if sample.get("group_index") is not None:
        line["group_id"] = int(sample["group_index"])
    if sample.get("label") is not None:
        line["ground_truth"] = sample["label"]
    status = str(sample.get("status", ""))
    if status:
        line["truncated"] = status == "truncated"
        line["stop_reason"] = STOP_REASONS.get(status, status)
    length = int(sample.get("response_length") or 0)
    ids = list(sample.get("tokens") or [])[-length:] if length else []
    if ids:
        line["response_tokens"] = tokenizer.convert_ids_to_tokens(ids) if tokenizer else [str(token) for token in ids]
    logprobs = sample.get("rollout_log_probs")
    if logprobs is not None and len(logprobs) == len(ids):
        line["logprobs"] = [value if math.isfinite(value) else None for value in map(float, logprobs)]
    mask = sample.get("loss_mask")
    if mask is not None and len(mask) == len(ids) and not all(mask):
        line["tool_mask"] = [int(bool(flag)) for flag in mask]
        if "logprobs" in line:
            line["logprobs"] = [value if flag else None for value, flag in zip(line["logprobs"], line["tool_mask"])]
    for name, value in (sample.get("metadata") or {}).items():
        if isinstance(value, (str, int, float, bool)) and str(name) not in line:
            line[str(name)] = value
    return line


def convert(paths: list[Path], out: Path, tokenizer=None) -> dict[str, int]:
    """Writes the dumps' samples into out/rollout_data_rank_0.jsonl (evaluation dumps into out/eval/); the lines
    written per folder."""
    import torch

    written = {}
    for path in sorted(paths, key=lambda path: [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]):
        try:
            dump = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # a sample holding slime's own classes: the file is trusted (you wrote it)
            dump = torch.load(path, map_location="cpu", weights_only=False)
        rollout_id = str(dump.get("rollout_id", path.stem))
        evaluation = rollout_id.startswith("eval_") or "eval_" in path.stem
        step = int(re.sub(r"\D", "", rollout_id) or 0)
        folder = out / "eval" if evaluation else out
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "rollout_data_rank_0.jsonl", "a", encoding="utf-8") as file:
            for sample in dump.get("samples", []):
                file.write(json.dumps(board_line(sample, step, tokenizer), ensure_ascii=False) + "\n")
                written[str(folder)] = written.get(str(folder), 0) + 1
    return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dumps", nargs="+", type=Path, help="slime's rollout_data_<id>.pt files")
    parser.add_argument("--out", type=Path, required=True, help="the run folder to write (lines are appended)")
    parser.add_argument("--tokenizer", help="a tokenizer (model name or folder) to show the response's tokens as text")
    options = parser.parse_args()
    tokenizer = None
    if options.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(options.tokenizer)
    for folder, count in convert(options.dumps, options.out, tokenizer).items():
        print(f"{count} lines written to {folder}/rollout_data_rank_0.jsonl")
