"""Step-Update's numbers (rollout_logger's `loss_passes`) on a run of millions of tokens, timed in the engine.

Generates (once) bench/runs/update/<size>/run: a rank file of STEPS generation batches x SAMPLES samples x TOKENS
tokens, each line with logprobs and two loss passes (num_iterations=2: the first on-policy, the second with a ratio,
PPO's clip flags and update weights). Then, in a fresh process per size: indexing the run from scratch (the first
pass reads each line's passes for its clipped tokens and Σ|update weight|) and from the cache, the pass Step-Update
reads when first opened (read_loss_passes), the per-step table (TRL's clip fractions...), each sample's share, and
the process's peak memory after each. Prints a markdown table.

    python bench/update_bench.py                 # medium and large
    python bench/update_bench.py --sizes medium
"""

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orjson

PROJECT = Path(__file__).resolve().parents[1]
SIZES = {"medium": (50, 128, 500), "large": (100, 128, 1000)}  # generation batches, samples per batch, tokens
EPSILON = 0.2


def generated_run(size: str) -> Path:
    batches, samples, tokens = SIZES[size]
    run_dir = PROJECT / "bench" / "runs" / "update" / size / "run"
    path = run_dir / "rollout_data_rank_0.jsonl"
    if not path.exists():
        print(f"generating the {size} update run...", file=sys.stderr)
        run_dir.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(0)
        with open(path, "wb") as file:
            for batch in range(batches):
                step = 2 * batch + 1
                for index in range(samples):
                    advantage = float(rng.normal())
                    ratio = np.exp(rng.normal(0, 0.15, tokens))
                    clipped = np.where((ratio > 1 + EPSILON) & (advantage > 0), 1, np.where((ratio < 1 - EPSILON) & (advantage < 0), -1, 0))
                    weight = np.where(clipped != 0, 0.0, ratio * advantage / (tokens * samples))
                    passes = [
                        {"step": step, "micro_batch": 0, "clipped": [0] * tokens, "update_weight": np.round(np.full(tokens, advantage / (tokens * samples)), 8).tolist()},
                        {"step": step + 1, "micro_batch": 0, "policy_ratio": np.round(ratio, 6).tolist(), "clipped": clipped.tolist(), "update_weight": np.round(weight, 8).tolist()},
                    ]
                    line = {
                        "prompt": f"prompt {step}.{index}", "response": "response", "reward": float(index % 2), "advantage": advantage, "step": step,
                        "logprobs": np.round(-rng.exponential(0.8, tokens), 5).tolist(), "loss_passes": passes,
                    }
                    file.write(orjson.dumps(line) + b"\n")
    return run_dir


# One size, in this process (a fresh one per size: peak memory is the process's).
def measure(size: str) -> dict:
    sys.path.insert(0, str(PROJECT))
    import rl_board
    from rl_board.update import read_loss_passes, sample_shares, update_by_step

    run_dir = generated_run(size)
    peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # noqa: E731  (GiB)
    rows = {}

    def timed(name, action):
        start = time.perf_counter()
        result = action()
        rows[name] = (time.perf_counter() - start, peak())
        return result

    timed("index the run (first pass, no cache)", lambda: rl_board.open_run(run_dir))
    run = timed("open the run, index cached", lambda: rl_board.open_run(run_dir))
    passes = timed("loss-pass read (the tab's first open)", lambda: read_loss_passes(run.snapshot.samples))
    timed("per-step table (clip fractions, shares)", lambda: update_by_step(passes.table))
    timed("each sample's share of its step", lambda: sample_shares(passes.table))
    tokens = int(run.snapshot.samples["response_tokens_len"].sum())
    return {"tokens": tokens, "passes": len(passes.table), "size_gb": sum(p.stat().st_size for p in run_dir.glob("*.jsonl")) / 1e9, "rows": rows}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--one", choices=list(SIZES), help=argparse.SUPPRESS)  # the child process of one size
    options = parser.parse_args()
    if options.one:
        print(json.dumps(measure(options.one)))
        sys.exit()
    results = {}
    for size in options.sizes:
        generated_run(size)
        cache = PROJECT / "bench" / "runs" / "update" / size / "cache"
        shutil.rmtree(cache, ignore_errors=True)  # the first row indexes from scratch
        env = {"RL_LOGGING_BOARD_CACHE": str(cache), "PATH": "/usr/bin:/bin"}
        output = subprocess.run([sys.executable, __file__, "--one", size], env=env, check=True, capture_output=True, text=True).stdout
        results[size] = json.loads(output.strip().splitlines()[-1])
    sizes = list(results)
    print("| seconds (peak memory of the process, GiB) | " + " | ".join(f"{size}: {results[size]['tokens']:,} tokens × 2 passes, {results[size]['size_gb']:.2f} GB" for size in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for name in results[sizes[0]]["rows"]:
        print(f"| {name} | " + " | ".join(f"{results[size]['rows'][name][0]:.2f} ({results[size]['rows'][name][1]:.2f})" for size in sizes) + " |")
