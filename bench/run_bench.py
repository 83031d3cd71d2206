"""Time the board on big runs in a real browser and print the table of the scale issue.

For each run size it generates the run once (bench/generate_run.py, into bench/runs/), then,
three times over, with an empty index cache:
  - first open: Load & View clicked until the page has finished rendering, over the time a
    single core takes to orjson.loads every line (and the time to read the bytes), both
    measured in the same run;
  - open again after a server restart (nothing changed on disk);
  - change the step (slider) and change the sample (index input);
  - peak memory (VmHWM) of the server process, and of its worker processes;
  - a new step of 128 samples appended to a rank file: time from the board noticing
    (a rerun) until the new step is in the charts.
It prints medians. Needs Chromium (/usr/bin/chromium) and the test requirements.

    python bench/run_bench.py                 # medium and large
    python bench/run_bench.py --sizes medium  # just one
"""

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import orjson
from playwright.sync_api import sync_playwright
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))
from bench.generate_run import step_lines, write_run  # noqa: E402

SIZES = {  # steps, samples per step, mean tokens, rank files
    "medium": (100, 128, 500, 4),
    "large": (200, 256, 1000, 4),
}
TARGETS = {
    "first open / orjson floor": {"medium": "<= 0.75", "large": "<= 0.75"},
    "open again after restart (s)": {"medium": "<= 0.5", "large": "<= 2"},
    "change the step (s)": {"medium": "<= 0.2", "large": "<= 0.3"},
    "change the sample (s)": {"medium": "<= 0.2", "large": "<= 0.3"},
    "server peak memory (GiB)": {"medium": "<= 0.6", "large": "<= 1.5"},
    "new step appended, noticed -> in charts (s)": {"medium": "<= 0.3", "large": "<= 0.5"},
}


def orjson_floor(run_dir: Path) -> float:
    start = time.perf_counter()
    for path in sorted(run_dir.glob("*.jsonl")):
        with open(path, "rb") as file:
            for line in file:
                orjson.loads(line)
    return time.perf_counter() - start


def read_floor(run_dir: Path) -> float:
    buffer = memoryview(bytearray(64 << 20))
    start = time.perf_counter()
    for path in sorted(run_dir.glob("*.jsonl")):
        with open(path, "rb", buffering=0) as file:
            while file.readinto(buffer):
                pass
    return time.perf_counter() - start


def peak_rss_gib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def child_pids(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out] + [grandchild for p in out for grandchild in child_pids(int(p))]


class Board:
    """A board server started with start.sh, and a Chromium page on it."""

    def __init__(self, root: Path, cache: Path, playwright):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        env = dict(os.environ, RL_LOGGING_BOARD_CACHE=str(cache))
        self.server = subprocess.Popen(["bash", str(PROJECT / "start.sh"), str(self.port), str(root)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{self.port}"
        for _ in range(200):
            try:
                urllib.request.urlopen(f"{url}/_stcore/health", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        self.browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        self.page = self.browser.new_page(viewport={"width": 1600, "height": 2400})
        self.watch_script_runs()
        self.page.goto(url)
        self.page.get_by_role("button", name="Load & View").wait_for(timeout=60_000)
        time.sleep(3)  # the worker processes start while the user picks a run

    # Follow the websocket: when the browser asks for a rerun, and when the server says the script finished.
    def watch_script_runs(self):
        self.finished_runs, self.last_sent, self.last_finished = 0, 0.0, 0.0

        def on_received(payload):
            if isinstance(payload, bytes) and ForwardMsg.FromString(payload).WhichOneof("type") == "script_finished":
                self.finished_runs += 1
                self.last_finished = time.perf_counter()

        def on_sent(payload):
            self.last_sent = time.perf_counter()

        def on_socket(socket):
            socket.on("framereceived", on_received)
            socket.on("framesent", on_sent)

        self.page.on("websocket", on_socket)

    # Seconds from an action to the end of the rerun it causes plus two frames for the browser to draw,
    # and the server's part: from the rerun request to the script's end.
    def timed(self, action, condition: str = "true") -> float:
        runs = self.finished_runs
        start = time.perf_counter()
        action()
        while self.finished_runs == runs:
            self.page.wait_for_timeout(5)
        self.page.wait_for_function(f"() => {condition}", timeout=600_000, polling="raf")
        self.page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        self.server_seconds = self.last_finished - self.last_sent
        return time.perf_counter() - start

    def load(self, steps_expected: int) -> float:
        label = f"Step Index({steps_expected} total steps)"
        return self.timed(
            lambda: self.page.get_by_role("button", name="Load & View").click(),
            f"document.querySelectorAll('.vega-embed svg').length >= 4 && document.querySelectorAll('.js-plotly-plot .main-svg').length >= 1 && document.body.innerText.includes('{label}')",
        )

    def change_step(self) -> float:
        self.page.get_by_label(re.compile(r"Step Index\(")).get_by_role("slider").focus()
        return self.timed(lambda: self.page.keyboard.press("ArrowRight"))

    def change_sample(self, index: int) -> float:
        field = self.page.get_by_label("Sample index in current step batch")
        field.fill(str(index))
        return self.timed(lambda: field.press("Enter"))

    def set_max_samples(self, value: int):
        field = self.page.get_by_label("Max Samples Each Step")
        field.fill(str(value))
        self.timed(lambda: field.press("Enter"))

    def memory(self) -> tuple[float, float]:
        pid = self.server.pid
        return peak_rss_gib(pid), sum(peak_rss_gib(child) for child in child_pids(pid))

    def close(self):
        self.browser.close()
        self.server.terminate()
        self.server.wait(timeout=30)


def measure(size: str, repeats: int, max_samples: int | None) -> dict:
    steps, samples, tokens, ranks = SIZES[size]
    root = PROJECT / "bench" / "runs" / size
    run_dir = root / "run"
    if not run_dir.exists():
        print(f"generating the {size} run...", file=sys.stderr)
        write_run(run_dir, steps, samples, tokens, ranks)
    size_gb = sum(p.stat().st_size for p in run_dir.glob("*.jsonl")) / 1e9
    rows: dict[str, list[float]] = {name: [] for name in TARGETS}
    rows.update({"orjson floor (s)": [], "byte-read floor (s)": [], "first open (s)": [], "worker peak memory (GiB, all)": []})
    appended = run_dir / "rollout_data_rank_0.jsonl"
    with sync_playwright() as playwright:
        for _ in range(repeats):
            rows["orjson floor (s)"].append(orjson_floor(run_dir))
            rows["byte-read floor (s)"].append(read_floor(run_dir))
            cache = root / "cache"
            shutil.rmtree(cache, ignore_errors=True)
            board = Board(root, cache, playwright)
            if max_samples:
                board.set_max_samples(max_samples)
            first = board.load(steps)
            rows["first open (s)"].append(first)
            rows["first open / orjson floor"].append(first / rows["orjson floor (s)"][-1])
            rows["change the step (s)"].append(statistics.median(board.change_step() for _ in range(3)))
            rows["change the sample (s)"].append(statistics.median(board.change_sample(i) for i in (3, 7, 11)))
            size_before = appended.stat().st_size
            with open(appended, "ab") as file:
                file.write(step_lines(0, 0, steps, 128, tokens, steps, False))
            rows["new step appended, noticed -> in charts (s)"].append(board.load(steps + 1))
            server_peak, worker_peak = board.memory()
            rows["server peak memory (GiB)"].append(server_peak)
            rows["worker peak memory (GiB, all)"].append(worker_peak)
            board.close()
            os.truncate(appended, size_before)
            board = Board(root, cache, playwright)
            if max_samples:
                board.set_max_samples(max_samples)
            rows["open again after restart (s)"].append(board.load(steps))
            board.close()
    return {"size_gb": size_gb, **{name: statistics.median(values) for name, values in rows.items()}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-samples", type=int, default=None, help="Max Samples Each Step (default: the board's 128)")
    options = parser.parse_args()
    results = {size: measure(size, options.repeats, options.max_samples) for size in options.sizes}
    sizes = list(results)
    print(f"\nmedian of {options.repeats}; Max Samples Each Step = {options.max_samples or 128}; {os.cpu_count()} cores")
    print("| measure | " + " | ".join(f"{s} ({results[s]['size_gb']:.2f} GB)" for s in sizes) + " | target |")
    print("|---|" + "---|" * len(sizes) + "---|")
    for name in list(TARGETS) + ["first open (s)", "orjson floor (s)", "byte-read floor (s)", "worker peak memory (GiB, all)"]:
        cells = " | ".join(f"{results[s][name]:.2f}" for s in sizes)
        target = " / ".join(TARGETS.get(name, {}).get(s, "") for s in sizes).strip(" /")
        print(f"| {name} | {cells} | {target} |")
