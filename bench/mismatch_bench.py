"""The sampler-trainer mismatch's numbers on a run of millions of tokens, timed in the engine (no browser).

Generates (once) bench/runs/mismatch/<size>/run: a rank file of STEPS steps x SAMPLES samples x TOKENS tokens, each
line with logprobs, sampler_logprobs (logprobs plus noise) and entropies. Then, in a fresh process per size: the
index (open_run, every sample), the per-token pass Step-Mismatch reads when first opened (read_mismatch_tokens), the
per-sample sums (once per run), the per-step table under a token-level and a sequence-level correction, the buckets by position and by entropy, the
largest |Δ|, and the process's peak memory after each. Prints a markdown table.

    python bench/mismatch_bench.py                 # medium and large
    python bench/mismatch_bench.py --sizes medium
"""

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orjson

PROJECT = Path(__file__).resolve().parents[1]
SIZES = {"medium": (100, 128, 500), "large": (200, 128, 1000)}  # steps, samples per step, tokens per response


def generated_run(size: str) -> Path:
    steps, samples, tokens = SIZES[size]
    run_dir = PROJECT / "bench" / "runs" / "mismatch" / size / "run"
    path = run_dir / "rollout_data_rank_0.jsonl"
    if not path.exists():
        print(f"generating the {size} mismatch run...", file=sys.stderr)
        run_dir.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(0)
        with open(path, "wb") as file:
            for step in range(1, steps + 1):
                for index in range(samples):
                    logprobs = -rng.exponential(0.8, tokens)
                    sampler = logprobs + rng.normal(0, 0.1, tokens)
                    line = {
                        "prompt": f"prompt {step}.{index}", "response": "response", "reward": float(index % 2), "step": step,
                        "logprobs": np.round(logprobs, 5).tolist(), "sampler_logprobs": np.round(sampler, 5).tolist(),
                        "entropies": np.round(rng.exponential(0.5, tokens), 4).tolist(),
                    }
                    file.write(orjson.dumps(line) + b"\n")
    return run_dir


# One size, in this process (a fresh one per size: peak memory is the process's).
def measure(size: str) -> dict:
    sys.path.insert(0, str(PROJECT))
    import rl_board
    from rl_board.mismatch import (
        largest_mismatches,
        mismatch_by_bucket,
        mismatch_by_step,
        read_mismatch_tokens,
        sample_sums,
    )

    run_dir = generated_run(size)
    peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # noqa: E731  (GiB)
    rows = {}

    def timed(name, action):
        start = time.perf_counter()
        result = action()
        rows[name] = (time.perf_counter() - start, peak())
        return result

    run = timed("open the run, index cached", lambda: rl_board.open_run(run_dir))
    tokens = timed("per-token pass (the tab's first open)", lambda: read_mismatch_tokens(run.snapshot.samples))
    steps = run.snapshot.samples["step"].to_numpy()
    sums = timed("per-sample sums (once per run)", lambda: sample_sums(tokens))
    timed("per-step table, token_mask (new thresholds)", lambda: mismatch_by_step(steps, tokens, "token_mask", 0.5, 2.0, sums))
    timed("per-step table, sequence_mask (new thresholds)", lambda: mismatch_by_step(steps, tokens, "sequence_mask", 0.0, 3.0, sums))
    timed("by position", lambda: mismatch_by_bucket(tokens, "position"))
    timed("by entropy", lambda: mismatch_by_bucket(tokens, "entropy"))
    timed("the 20 largest abs(Δ)", lambda: largest_mismatches(tokens, 20))
    return {"tokens": len(tokens.delta), "size_gb": sum(p.stat().st_size for p in run_dir.glob("*.jsonl")) / 1e9, "rows": rows}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--one", choices=list(SIZES), help=argparse.SUPPRESS)  # the child process of one size
    options = parser.parse_args()
    if options.one:
        print(json.dumps(measure(options.one)))
        sys.exit()
    cache = PROJECT / "bench" / "runs" / "mismatch" / "cache"
    results = {}
    for size in options.sizes:
        generated_run(size)
        env = {"RL_LOGGING_BOARD_CACHE": str(cache), "PATH": "/usr/bin:/bin"}
        subprocess.run([sys.executable, __file__, "--one", size], env=env, check=True, capture_output=True)  # indexes once
        output = subprocess.run([sys.executable, __file__, "--one", size], env=env, check=True, capture_output=True, text=True).stdout
        results[size] = json.loads(output.strip().splitlines()[-1])
    sizes = list(results)
    print("| seconds (peak memory of the process, GiB) | " + " | ".join(f"{size}: {results[size]['tokens']:,} tokens, {results[size]['size_gb']:.2f} GB" for size in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for name in results[sizes[0]]["rows"]:
        print(f"| {name} | " + " | ".join(f"{results[size]['rows'][name][0]:.2f} ({results[size]['rows'][name][1]:.2f})" for size in sizes) + " |")
