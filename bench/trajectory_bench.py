"""A sample's trajectory (its line's `turns`) opened in the board: in the engine, and in a real browser.

Generates (once) bench/runs/trajectory/run: one step of four agent samples of 10, 200, 2,000 and 10,000 turns (half
policy turns, half tool results; 150 tokens a turn, so 1,500 to 1.5 M tokens a sample). Then, for each: the engine
reading its turns and numbering them over its tokens (read_trajectory + read_sample_tokens + numbered), and, in a
board served by start.sh, the sample picked (Sample index) until the page has drawn its trajectory table and token
area: the first time (nothing of the sample cached on the server; the 10-turn sample is open from the start) and again (the median of REPEATS more, its turns and
tokens cached). The engine's time is the median of REPEATS. Prints a markdown table.

    python bench/trajectory_bench.py
"""

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import orjson
from playwright.sync_api import sync_playwright

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))
from bench.run_bench import Board  # noqa: E402

TURNS = [10, 200, 2000, 10000]
TOKENS_PER_TURN = 150
REPEATS = 3
TRAJECTORY_DRAWN = "document.querySelector('[class*=\"st-key-trajectory\"] [data-testid=\"stDataFrame\"] canvas') && document.querySelector('.st-key-token_view')"


def agent_line(turns: int, rng) -> dict:
    rows, tokens, logprobs, mask = [{"role": "user", "text": "the task"}], [], [], []
    for number in range(turns // 2):
        start = len(tokens)
        rows.append({"role": "assistant", "text": f"step {number}", "token_start": start, "token_end": start + TOKENS_PER_TURN,
                     "tool_calls": [{"name": ["search", "calc", "open"][number % 3], "arguments": {"query": f"q{number}"}}]})
        rows.append({"role": "tool", "text": f"result {number}", "tool_name": ["search", "calc", "open"][number % 3],
                     "token_start": start + TOKENS_PER_TURN, "token_end": start + 2 * TOKENS_PER_TURN, **({"error": "timeout"} if number % 7 == 0 else {})})
        tokens += [f"w{k}" for k in range(2 * TOKENS_PER_TURN)]
        logprobs += np.round(-rng.exponential(0.5, TOKENS_PER_TURN), 4).tolist() + [None] * TOKENS_PER_TURN
        mask += [1] * TOKENS_PER_TURN + [0] * TOKENS_PER_TURN
    return {"prompt": "the task", "response": "…", "reward": 1.0, "step": 1, "response_tokens": tokens, "logprobs": logprobs,
            "tool_mask": mask, "turns": rows[:turns], "stop_reason": "stop"}


def generated_root() -> Path:
    root = PROJECT / "bench" / "runs" / "trajectory"
    path = root / "run" / "rollout_data_rank_0.jsonl"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(0)
        path.write_bytes(b"".join(orjson.dumps(agent_line(turns, rng)) + b"\n" for turns in TURNS))
    return root


def engine_seconds(run_dir: Path) -> list[float]:
    import rl_board
    from rl_board.reading.snapshot import read_sample_tokens
    from rl_board.trajectory import numbered, read_trajectory

    rows = rl_board.open_run(run_dir).snapshot.step_rows(1)
    seconds = []
    for _, row in rows.iterrows():
        times = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            place = (row["path"], int(row["offset"]), int(row["length"]), 1)
            numbered(read_trajectory(*place), read_sample_tokens(*place))
            times.append(time.perf_counter() - start)
        seconds.append(statistics.median(times))
    return seconds


def browser_seconds(root: Path) -> list[tuple[float, float]]:
    with sync_playwright() as playwright:
        board = Board(root, root / "cache", playwright)
        try:
            board.show_page(TRAJECTORY_DRAWN)  # the root's run opens by itself, at its first sample (10 turns)
            opened, shown = {}, 0
            for index in [*range(1, len(TURNS)), 0]:  # the 10-turn sample, open from the start, last
                times = []
                for _ in range(1 + REPEATS):
                    if shown == index:  # from a sample already open: nothing of this one cached
                        board.change_sample(shown := 1 if index == 0 else 0)
                    times.append(board.timed(lambda: pick(board, index), TRAJECTORY_DRAWN))
                    shown = index
                opened[index] = (times[0], statistics.median(times[1:]))
        finally:
            board.close()
    return [opened[index] for index in range(len(TURNS))]


def pick(board: Board, index: int):
    field = board.page.get_by_label("Sample index in current step batch")
    field.fill(str(index))
    field.press("Enter")


if __name__ == "__main__":
    root = generated_root()
    engine = engine_seconds(root / "run")
    opened = browser_seconds(root)
    print("| turns (tokens) | engine: read and number its turns (s) | page: picked until drawn, first time (s) | page: again (s) |")
    print("|---|---|---|---|")
    for turns, seconds, (first, again) in zip(TURNS, engine, opened):
        print(f"| {turns:,} ({turns // 2 * 2 * TOKENS_PER_TURN:,}) | {seconds:.3f} | {first:.2f} | {again:.2f} |")
    print(json.dumps({"engine": engine, "opened": opened}), file=sys.stderr)
