"""What changed between A and B (rl_board.prompt_changes) on two medium runs: 100 steps x 128 samples (12,800 samples,
~200 tokens each) each, every step drawing its 16 prompts (8 samples each) from the same pool of 1,600, so that each
prompt is seen 8 times per run. Times, after both runs are indexed (the index cache warm, as the page has them): the
whole comparison (matching by prompt key, one prompt text read back per prompt and side, the numbers per prompt),
the first time and again (median of REPEATS), and the same for two windows of one run. Prints a markdown table.

    python bench/changes_bench.py
"""

import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import orjson

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

import rl_board  # noqa: E402

STEPS, SAMPLES, GROUP, POOL, TOKENS = 100, 128, 8, 1600, 200
REPEATS = 5
WORDS = ["the", "model", "reward", "policy", "token", "step", "value", "answer", "because", "therefore"]


def write_run(path: Path, seed: int):
    rng = np.random.default_rng(seed)
    order = np.random.default_rng(0).permutation(POOL)  # both runs see the prompts in the same order
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as file:
        for step in range(1, STEPS + 1):
            for sample in range(SAMPLES):
                prompt = int(order[((step - 1) * (SAMPLES // GROUP) + sample // GROUP) % POOL])
                tokens = [WORDS[w] for w in rng.integers(0, len(WORDS), size=TOKENS)]
                line = {"prompt": f"question {prompt}: " + " ".join(WORDS[(prompt * 7 + k) % len(WORDS)] for k in range(30)), "response": " ".join(tokens),
                        "response_tokens": tokens, "logprobs": np.round(-rng.exponential(0.5, TOKENS), 4).tolist(),
                        "reward": float(rng.random() < 0.3 + 0.4 * (prompt % 2) * step / STEPS), "group_id": f"{step}-{sample // GROUP}", "step": step}
                file.write(orjson.dumps(line) + b"\n")


def timed(action) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


if __name__ == "__main__":
    root = PROJECT / "bench" / "runs" / "changes"
    for name, seed in (("a", 1), ("b", 2)):
        if not (root / name / "rollout_data_rank_0.jsonl").exists():
            write_run(root / name / "rollout_data_rank_0.jsonl", seed)
    start = time.perf_counter()
    a, b = rl_board.open_run(root / "a"), rl_board.open_run(root / "b")
    indexed = time.perf_counter() - start
    warnings.simplefilter("ignore")
    start = time.perf_counter()
    table = rl_board.prompt_changes(a, b)
    first = time.perf_counter() - start
    two_runs = timed(lambda: rl_board.prompt_changes(a, b))
    windows = timed(lambda: rl_board.prompt_changes(a, a, steps_a=(1, 50), steps_b=(51, 100)))
    print("| runs | samples each | prompts on both | open both (index; s) | two runs compared, first (s) | again (s) | two windows of one run (s) |")
    print("|---|---|---|---|---|---|---|")
    print(f"| 2 generated | {len(a.samples):,} | {len(table):,} | {indexed:.2f} | {first:.3f} | {two_runs:.3f} | {windows:.3f} |")
