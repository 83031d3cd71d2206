"""What changed between A and B (rl_board.prompt_changes) on two medium runs: 100 steps x 128 samples (12,800 samples,
~200 tokens each) each, every step drawing its 16 prompts (8 samples each) from the same pool of 1,600, so that each
prompt is seen 8 times per run. Times, after both runs are indexed (the index cache warm, as the page has them): the
whole comparison (matching by prompt key, one prompt text read back per prompt and side, the numbers per prompt),
the first time and again (median of REPEATS), and the same for two windows of one run. Prints a markdown table.

Then the word diff of a clicked prompt's two responses (rl_board.changes.word_diff) at a reasoning model's lengths:
two responses of 500, 8,000 and 32,000 tokens of generate_run.py's few distinct words (the worst case for a diff:
many words match many others), median of REPEATS. With --page, the same in the page, real server and Chromium
(run_bench.py's timing): a run of 4 steps of 8 prompts with 32,000-token responses; What changed opened, then its
first prompt clicked until both responses are drawn.

    python bench/changes_bench.py [--page]
"""

import argparse
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
from bench.run_bench import Board  # noqa: E402
from rl_board.changes import DIFF_WORDS, word_diff  # noqa: E402

STEPS, SAMPLES, GROUP, POOL, TOKENS = 100, 128, 8, 1600, 200
REPEATS = 5
WORDS = ["the", "model", "reward", "policy", "token", "step", "value", "answer", "because", "therefore"]


def write_run(path: Path, seed: int, steps: int = STEPS, samples: int = SAMPLES, group: int = GROUP, pool: int = POOL, tokens: int = TOKENS):
    rng = np.random.default_rng(seed)
    order = np.random.default_rng(0).permutation(pool)  # both runs see the prompts in the same order
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as file:
        for step in range(1, steps + 1):
            for sample in range(samples):
                prompt = int(order[((step - 1) * (samples // group) + sample // group) % pool])
                words = [WORDS[w] for w in rng.integers(0, len(WORDS), size=tokens)]
                line = {"prompt": f"question {prompt}: " + " ".join(WORDS[(prompt * 7 + k) % len(WORDS)] for k in range(30)), "response": " ".join(words),
                        "response_tokens": words, "logprobs": np.round(-rng.exponential(0.5, tokens), 4).tolist(),
                        "reward": float(rng.random() < 0.3 + 0.4 * (prompt % 2) * step / steps), "group_id": f"{step}-{sample // group}", "step": step}
                file.write(orjson.dumps(line) + b"\n")


def timed(action) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# Seconds to diff two responses of `tokens` words each (median of REPEATS), and the words compared of each.
def word_diff_seconds(tokens: int) -> tuple[float, int]:
    rng = np.random.default_rng(tokens)
    a, b = (" ".join(WORDS[w] for w in rng.integers(0, len(WORDS), size=tokens)) for _ in range(2))
    return timed(lambda: word_diff(a, b)), min(tokens, DIFF_WORDS)


# The page's What changed on a run of 32,000-token responses: seconds to open the region, and to show a clicked
# prompt's two responses.
def page_seconds(root: Path) -> tuple[float, float]:
    from playwright.sync_api import sync_playwright

    if not (root / "run" / "rollout_data_rank_0.jsonl").exists():
        write_run(root / "run" / "rollout_data_rank_0.jsonl", 1, steps=4, samples=8, group=1, pool=8, tokens=32_000)
    region = "What changed between A and B"
    in_region = f"[...document.querySelectorAll('[data-testid=\"stExpander\"]')].find(e => e.textContent.includes('{region}'))"
    with sync_playwright() as playwright:
        board = Board(root, root / "cache", playwright)
        try:
            board.show_page("[...document.querySelectorAll('[data-testid=\"stWidgetLabel\"]')].some(label => label.textContent.includes('Step Index('))")
            opened = board.timed(lambda: board.page.get_by_text(region).click(), f"{in_region}?.querySelector('[data-testid=\"stDataFrame\"] canvas')")
            grid = board.page.locator('[data-testid="stExpander"]').filter(has_text=region).locator('[data-testid="stDataFrame"]')
            grid.scroll_into_view_if_needed()
            box = grid.bounding_box()
            shown = board.timed(lambda: board.page.mouse.click(box["x"] + 18, box["y"] + 35 + 17), f"{in_region}?.querySelectorAll('.rl-word-diff').length >= 2")
        finally:
            board.close()
    return opened, shown


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--page", action="store_true", help="also time What changed in the page on 32,000-token responses")
    page = parser.parse_args().page
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
    print()
    print("| two responses of | words compared of each | word diff (s) |")
    print("|---|---|---|")
    for tokens in (500, 8_000, 32_000):
        seconds, compared = word_diff_seconds(tokens)
        print(f"| {tokens:,} tokens | {compared:,} | {seconds:.3f} |")
    if page:
        opened, shown = page_seconds(PROJECT / "bench" / "runs" / "changes-long")
        print()
        print("| What changed in the page, 32,000-token responses | seconds |")
        print("|---|---|")
        print(f"| open the region | {opened:.2f} |")
        print(f"| click a prompt, until both responses are drawn | {shown:.2f} |")
