"""Comparing runs: the board with 4 medium runs on one chart, timed in a real browser.

Generates (once) 4 runs of the medium size of bench/run_bench.py (100 steps x 128 samples x ~500 tokens, 4 rank
files) with seeds 0-3 into bench/runs/compare/seed-N/, each with a trainer_state.json of 100 steps so the
"Training metrics" area has charts to compare too, and indexes them (their index caches in
bench/runs/compare-cache/, written by the board's own RunStore in a separate process; a no-op when current).
Then, REPEATS times, a server started by start.sh with that index cache and a Chromium page on it (the first
repeat a fresh browser, later ones the same tab reloaded after a server restart, as bench/run_bench.py does):
  - the page opened (its first screen opens seed-3, the run the board shows by default), then the curve setting changes with that run
    alone, for reference (time_curve_changes: Zero Shift, Smoothing, the reward series), and a step change;
  - Smoothing back to 0, then seed-0, seed-1 and seed-2 added to "Compare with" one after the other: each run
    read from its index cache on disk by a server that has not read it yet ("indexed on disk, new server"); the
    resident memory of the server with its worker processes after each (1, 2, 3, 4 runs);
  - the same curve setting changes with the 4 runs, and a step change;
  - seed-2 removed, Smoothing moved a step (so no chart of this set of runs and settings is cached), and
    seed-2 added again: a run this server already holds ("already indexed by this server").
Times are run_bench.py's (Board.timed): from the rerun request the action sends until the page has received
the run's last message and its main thread has been quiet for 0.2 s, charts drawn. Prints medians over the
repeats (of each repeat's median where an action is timed more than once in it) as a markdown table, the
memory rows, and, per action, the server's part and the CPU seconds of the server and the browser.

    python bench/compare_runs.py                   # 3 repeats
    python bench/compare_runs.py --repeats 5
    python bench/compare_runs.py --server-timings  # the board's functions behind these actions, no browser
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))
from bench.generate_run import write_run  # noqa: E402
from bench.run_bench import SIZES, Board, child_pids, status_gib  # noqa: E402

ROOT = PROJECT / "bench" / "runs" / "compare"
CACHE = PROJECT / "bench" / "runs" / "compare-cache"
RUN_NAMES = [f"seed-{seed}" for seed in range(4)]
SHOWN, COMPARED = RUN_NAMES[-1], RUN_NAMES[:-1]  # the board shows the last run of a root by default

CURVE_TARGET, ADD_TARGET = 0.3, 0.5
MEMORY_TARGET = {runs: 0.6 + 0.1 * (runs - 1) for runs in range(1, len(RUN_NAMES) + 1)}  # GiB, server + workers
CURVE_CHANGES = [
    "first curve setting change once drawn (Zero Shift on)",
    "toggle Zero Shift",
    "turn Smoothing on (0 -> 0.01)",
    "change Smoothing (one step of 0.01)",
    "change the reward series",
]
ACTIONS = {  # row name: target (None: shown for reference)
    **{f"{change}, 4 runs": CURVE_TARGET for change in CURVE_CHANGES},
    "add the 4th run: indexed on disk, new server": ADD_TARGET,
    "add the 4th run: already indexed by this server": ADD_TARGET,
    **{f"{change}, 1 run": None for change in CURVE_CHANGES},
    "change the step, 1 run (run_bench.py's target: <= 0.2)": None,
    "change the step, 4 runs": None,
    "the page opened on the shown run: indexed on disk, new server": None,
    "add the 2nd run: indexed on disk, new server": None,
    "add the 3rd run: indexed on disk, new server": None,
}
ORDINALS = {2: "2nd", 3: "3rd", 4: "4th"}


# A trainer_state.json of `steps` steps, as a Hugging Face Trainer writes it: train entries every step, eval every 10.
def trainer_state(seed: int, steps: int) -> dict:
    entries = []
    for step in range(1, steps + 1):
        wobble = ((seed * 7919 + step * 104729) % 1000) / 1000 - 0.5
        entries.append({"step": step, "epoch": step / steps, "loss": 1.0 / (1 + step / 20) + 0.05 * wobble,
                        "reward": 0.4 + 0.6 * step / steps + 0.1 * wobble, "kl": 0.001 * step * (1 + 0.3 * wobble),
                        "learning_rate": 1e-6 * (1 - step / steps)})
        if step % 10 == 0:
            entries.append({"step": step, "epoch": step / steps, "eval_loss": 1.1 / (1 + step / 20) + 0.03 * wobble})
    return {"global_step": steps, "max_steps": steps, "log_history": entries}


# bench/runs/compare/seed-N, each generated the first time it is needed.
def generated_runs() -> list[Path]:
    steps, samples, tokens, ranks = SIZES["medium"]
    dirs = []
    for seed, name in enumerate(RUN_NAMES):
        run_dir = ROOT / name
        if len(list(run_dir.glob("*.jsonl"))) != ranks:
            print(f"generating {name}...", file=sys.stderr, flush=True)
            write_run(run_dir, steps, samples, tokens, ranks, seed=seed)
        state = run_dir / "trainer_state.json"
        if not state.exists():
            state.write_text(json.dumps(trainer_state(seed, steps)))
        dirs.append(run_dir)
    return dirs


# Every run indexed into CACHE by the board's own loader, in a process of its own (its worker pool ends with it).
INDEX_RUNS = """
import sys, time
from rl_board.reading.store import RunStore
for run_dir in sys.argv[1:]:
    started = time.perf_counter()
    samples = len(RunStore(run_dir).load(128).samples)
    print(f"indexed {run_dir}: {samples} samples in {time.perf_counter() - started:.1f} s", file=sys.stderr)
"""


def index_runs(run_dirs: list[Path]):
    env = dict(os.environ, RL_LOGGING_BOARD_CACHE=str(CACHE))
    subprocess.run([sys.executable, "-c", INDEX_RUNS, *map(str, run_dirs)], cwd=PROJECT, env=env, check=True)


class CompareBoard(Board):
    """run_bench's Board, with the comparison's widgets."""

    # Picks `option` in the multiselect labelled `label` (typed, then Enter), timed; checks it was picked.
    def choose(self, label: str, option: str) -> float:
        box = self.page.get_by_role("combobox", name=label)
        box.click()
        box.fill(option)
        seconds = self.timed(lambda: box.press("Enter"))
        box.press("Escape")  # closes the options list; sends nothing
        self.page.get_by_role("button", name=f"Remove {option}", exact=True).wait_for(timeout=10_000)
        return seconds

    def add_run(self, name: str) -> float:
        return self.choose("Compare with", name)

    def add_reward_series(self, name: str) -> float:
        return self.choose("Reward series", name)

    def remove(self, name: str) -> float:
        return self.timed(lambda: self.page.get_by_role("button", name=f"Remove {name}", exact=True).click())

    # Exception elements on the page (each would be an error the board showed).
    def exceptions(self) -> int:
        return self.page.locator('[data-testid="stException"]').count()

    def step_smoothing(self) -> float:
        self.page.get_by_label("Smoothing").get_by_role("slider").focus()
        return self.timed(lambda: self.page.keyboard.press("ArrowRight"))

    def reset_smoothing(self):
        self.page.get_by_label("Smoothing").get_by_role("slider").focus()
        self.timed(lambda: self.page.keyboard.press("Home"))

    def toggle_zero_shift(self) -> float:
        return self.timed(lambda: self.page.get_by_text("Zero Shift", exact=True).click())

    # Resident memory now (VmRSS, GiB): the server alone, and with its worker processes (and resource tracker).
    def resident(self) -> tuple[float, float]:
        server = status_gib(self.server.pid, "VmRSS")
        workers = 0.0
        for pid in child_pids(self.server.pid):
            try:
                workers += status_gib(pid, "VmRSS")
            except OSError:  # ended since it was listed
                pass
        return server, server + workers


class Results:
    """Each action's times, per repeat: total, server part, CPU of the server and of the browser."""

    def __init__(self):
        self.times: dict[str, list[list[tuple]]] = {}
        self.memory: dict[int, list[tuple[float, float]]] = {}

    def new_repeat(self):
        for runs in self.times.values():
            runs.append([])

    def add(self, name: str, board: CompareBoard, seconds: float):
        self.times.setdefault(name, [[]])[-1].append((seconds, board.server_seconds, board.server_cpu, board.browser_cpu))
        print(f"  {name}: {seconds:.2f} s (server part {board.server_seconds:.2f} s)", file=sys.stderr, flush=True)

    # The median over repeats of each repeat's median, of field `index` (0: total seconds).
    def median(self, name: str, index: int = 0) -> float:
        per_repeat = [statistics.median(t[index] for t in timed) for timed in self.times.get(name, []) if timed]
        return statistics.median(per_repeat) if per_repeat else float("nan")

    def every(self, name: str) -> str:
        return ", ".join(f"{t[0]:.2f}" for timed in self.times.get(name, []) for t in timed)


# The curve setting changes with `runs` runs on the charts, just drawn: Zero Shift on (the first change after the runs
# were drawn costs the browser more than later ones) and off; Smoothing turned on, then moved two steps (left at 0.03);
# the reward series: ref_reward removed, then added back (a fragment rerun); Zero Shift on and off again.
def time_curve_changes(board: CompareBoard, results: Results, runs: str):
    results.add(f"first curve setting change once drawn (Zero Shift on), {runs}", board, board.toggle_zero_shift())
    results.add(f"toggle Zero Shift, {runs}", board, board.toggle_zero_shift())
    results.add(f"turn Smoothing on (0 -> 0.01), {runs}", board, board.step_smoothing())
    for _ in range(2):
        results.add(f"change Smoothing (one step of 0.01), {runs}", board, board.step_smoothing())
    results.add(f"change the reward series, {runs}", board, board.remove("ref_reward"))
    results.add(f"change the reward series, {runs}", board, board.add_reward_series("ref_reward"))
    for _ in range(2):
        results.add(f"toggle Zero Shift, {runs}", board, board.toggle_zero_shift())


def measure(repeats: int) -> Results:
    index_runs(generated_runs())
    steps = SIZES["medium"][0]
    results = Results()
    with sync_playwright() as playwright:
        board = None
        try:
            for repeat in range(repeats):
                print(f"repeat {repeat + 1} of {repeats}", file=sys.stderr, flush=True)
                if board is None:
                    board = CompareBoard(ROOT, CACHE, playwright)
                    opened = board.open_page(steps)
                else:
                    opened = board.restart_server(steps)
                    results.new_repeat()
                results.add("the page opened on the shown run: indexed on disk, new server", board, opened)
                results.memory.setdefault(1, []).append(board.resident())
                time_curve_changes(board, results, "1 run")
                results.add("change the step, 1 run (run_bench.py's target: <= 0.2)", board, board.change_step())
                board.reset_smoothing()
                for count, name in enumerate(COMPARED, start=2):
                    results.add(f"add the {ORDINALS[count]} run: indexed on disk, new server", board, board.add_run(name))
                    results.memory.setdefault(count, []).append(board.resident())
                time_curve_changes(board, results, "4 runs")
                results.add("change the step, 4 runs", board, board.change_step())
                last = COMPARED[-1]
                board.remove(last)
                board.step_smoothing()  # to 0.04: a setting these runs were never drawn with, so no chart of them is cached
                results.add("add the 4th run: already indexed by this server", board, board.add_run(last))
                if board.exceptions():
                    raise RuntimeError(f"the board showed {board.exceptions()} exception(s)")
        finally:
            if board is not None:
                board.close()
    return results


# The server's own work behind these actions, without a browser or Streamlit: the board's functions that a curve
# setting change or an added run calls on a cache miss, timed in this process on the same runs (median of `repeats`).
def server_timings(repeats: int):
    os.environ["RL_LOGGING_BOARD_CACHE"] = str(CACHE)  # read when a store is made
    import rl_logging_board as board
    from rl_board.figures import metric_chart, step_curve_chart
    from rl_board.metrics import step_stats
    from rl_board.reading.history import read_history
    from rl_board.reading.store import RunStore

    run_dirs = [str(ROOT / name) for name in [SHOWN, *COMPARED]]
    runs = [(Path(run_dir).name, RunStore(run_dir).load(128, parallel=False).samples) for run_dir in run_dirs]
    histories = [(Path(run_dir).name, read_history(run_dir)) for run_dir in run_dirs]
    metrics = [name for name in board.DEFAULT_METRICS if name in histories[0][1].train]
    calls = {
        "RunStore(run).load: a run new to the server, from its index cache on disk": lambda k: RunStore(run_dirs[k - 1]).load(128, parallel=False),
        "read_history: a run's trainer_state.json": lambda k: read_history(run_dirs[k - 1]),
        "step_curve_chart: reward + ref_reward, smoothing 0.02": lambda k: step_curve_chart(runs[:k], ["reward", "ref_reward"], "t", "reward", 0.2, False, 0.02),
        "  of which step_stats (2 columns per run)": lambda k: [step_stats(samples, column) for _, samples in runs[:k] for column in ("reward", "ref_reward")],
        f"metric_chart x {len(metrics)} ({', '.join(metrics)}), smoothing 0.02": lambda k: [metric_chart(name, histories[:k], 0.02) for name in metrics],
    }
    print(f"\n| server function (median of {repeats}) | 1 run (s) | 4 runs (s) |\n|---|---|---|")
    for name, call in calls.items():
        cells = []
        for count in (1, len(run_dirs)):
            seconds = []
            for _ in range(repeats):
                started = time.perf_counter()
                call(count)
                seconds.append(time.perf_counter() - started)
            cells.append(f"{statistics.median(seconds):.3f}")
        print(f"| {name} | " + " | ".join(cells) + " |")


def met(value: float, target: float) -> str:
    return "yes" if value <= target else "**no**"


def print_tables(results: Results, repeats: int):
    load = " / ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"\n4 medium runs (100 steps x 128 samples, 4 rank files each), Max Samples Each Step = 128; median of {repeats}; "
          f"{os.cpu_count()} cores, load average at the end {load} (1 / 5 / 15 min)\n")
    print("| action | median s | target | met? |\n|---|---|---|---|")
    for name, target in ACTIONS.items():
        value = results.median(name)
        print(f"| {name} | {value:.2f} | {'' if target is None else f'<= {target:g}'} | {'' if target is None else met(value, target)} |")
    print("\n| runs shown | server + workers RSS (GiB) | server alone RSS (GiB) | target | met? |\n|---|---|---|---|---|")
    for runs, samples in sorted(results.memory.items()):
        total = statistics.median(sample[1] for sample in samples)
        server = statistics.median(sample[0] for sample in samples)
        print(f"| {runs} | {total:.2f} | {server:.2f} | <= {MEMORY_TARGET[runs]:.1f} | {met(total, MEMORY_TARGET[runs])} |")
    print("\n| action | server part (s) | CPU: server (s) | CPU: browser (s) | every time (s) |\n|---|---|---|---|---|")
    for name in ACTIONS:
        cells = " | ".join(f"{results.median(name, index):.2f}" for index in (1, 2, 3))
        print(f"| {name} | {cells} | {results.every(name)} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="servers started, each timing every action (default 3)")
    parser.add_argument("--server-timings", action="store_true", help="only time the board's functions behind these actions, no browser")
    options = parser.parse_args()
    if options.server_timings:
        index_runs(generated_runs())
        server_timings(max(options.repeats, 5))
    else:
        started = time.monotonic()
        measured = measure(options.repeats)
        print(f"({time.monotonic() - started:.0f} s)", file=sys.stderr)
        print_tables(measured, options.repeats)
