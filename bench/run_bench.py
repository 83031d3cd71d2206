"""Time the board on big runs in a real browser and print the table of the scale and speed issues.

Every time is taken in the page, from the browser's rerun request until its main thread has finished
drawing. For each run size it generates the run once (bench/generate_run.py, into bench/runs/), then,
five times over (--repeats), with an empty index cache:
  - first open: the page opened (its first screen opens the root's run by itself) until it has finished
    rendering the run, from the navigation's start (the page's code fetched within it), over the time a
    single core takes to orjson.loads every line (and the time to read the bytes), both
    measured in the same run;
  - open again after a server restart (nothing changed on disk), in the same browser tab reloaded
    (the browser keeps its cache, as a user's does; the first open starts from a fresh browser), and how long
    the server took to answer after it was started;
  - change the step (slider) and change the sample (index input), each with the server's part
    (rerun request until the page received the run's last message, drawing meanwhile); the step changes
    straight after one another, and after looking at a step for 2 s (its neighbours are read ahead meanwhile);
  - the first curve setting change after a load (Zero Shift on: the curves' fragment, shifted curves computed),
    Zero Shift off again, and a sidebar setting (Drop Padding Token, off then on: the samples' areas rerun);
  - the CPU time each of these actions cost the server (with its workers) and the browser (all its
    processes): on two cores shared by both, it shows which side a time is spent on;
  - peak memory (VmHWM) of the server process, and of its worker processes;
  - a new step of 128 samples appended to a rank file: time from the board noticing
    (a rerun) until the new step is in the charts.
It prints medians. Needs Chromium (/usr/bin/chromium, or the one BENCH_CHROMIUM names) and the test requirements.

    python bench/run_bench.py                              # medium and large
    python bench/run_bench.py --sizes medium               # just one
    python bench/run_bench.py --sizes long                 # 4,000-token responses
    python bench/run_bench.py --sizes batch --max-samples 8192   # steps of 8,192 samples, all shown
    python bench/run_bench.py --sizes huge --repeats 1     # 20 GB
    python bench/run_bench.py --sizes wide                 # huge's 880 steps and 112,640 samples in 0.4 GB
    python bench/run_bench.py --summaries                  # runs with the logger's summaries files
    python bench/run_bench.py --server-cpus 0,1 --browser-cpus 2-7   # the browser on cores of its own, as a user's is
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

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))
from bench.generate_run import step_lines, write_run  # noqa: E402

SIZES = {  # steps, samples per step, mean tokens, rank files
    "medium": (100, 128, 500, 4),
    "large": (200, 256, 1000, 4),
    "huge": (880, 256, 1000, 4),  # 20 GB
    "wide": (880, 128, 30, 4),  # huge's 112,640 samples and 880 steps in 0.4 GB: the page's costs that grow with them
    "long": (10, 16, 4000, 2),  # 4,000-token responses: the token area's worst case
    "batch": (20, 8192, 30, 4),  # verl's batches (1,024 prompts × 8): a step's charts and table at 8,192 samples
    "steps": (20_000, 12, 20, 1),  # a long run logged every step: the step charts at 20,000 steps
}
TARGETS = {  # issue 35's goals for the medium run (the large run's from the scale issue)
    "first open / orjson floor": {"medium": "<= 0.75", "large": "<= 0.75"},
    "open again after restart (s)": {"medium": "<= 0.5", "large": "<= 2"},
    "change the step (s)": {"medium": "<= 0.2", "large": "<= 0.3"},
    "change the sample (s)": {"medium": "<= 0.15", "large": "<= 0.3"},
    "server peak memory (GiB)": {"medium": "<= 0.6", "large": "<= 1.5"},
    "new step appended, noticed -> in charts (s)": {"medium": "<= 0.3", "large": "<= 0.5"},
    "first curve setting change after a load: Zero Shift on (s)": {"medium": "<= 0.3"},
    "Zero Shift off again (s)": {"medium": "<= 0.2"},
    "sidebar setting of how samples are shown: Drop Padding Token (s)": {"medium": "<= 0.2"},
}

LOOK_SECONDS = 2

EXTRA_ROWS = [
    f"change the step after {LOOK_SECONDS:g} s on one (s)",
    f"change the step after {LOOK_SECONDS:g} s on one, server part (s)",
    "first open (s)",
    "first open, server part (s)",
    "server start until it answers (s)",
    "open again after restart, server part (s)",
    "change the step, server part (s)",
    "change the sample, server part (s)",
    "new step appended, server part (s)",
    "first curve setting change after a load, server part (s)",
    "Zero Shift off again, server part (s)",
    "sidebar setting of how samples are shown, server part (s)",
    "first open, CPU: server (s)",
    "first open, CPU: browser (s)",
    "change the step, CPU: server (s)",
    "change the step, CPU: browser (s)",
    "change the sample, CPU: server (s)",
    "change the sample, CPU: browser (s)",
    "sidebar setting of how samples are shown, CPU: server (s)",
    "sidebar setting of how samples are shown, CPU: browser (s)",
    "Smoothing, one arrow key press (s)",
    "Smoothing, one arrow key press, server part (s)",
    "orjson floor (s)",
    "byte-read floor (s)",
    "worker peak memory (GiB, all)",
]


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


# Timestamps taken in the page: when it sent to the server (a rerun request), when it last heard from it
# (a run ends with its "script finished" message), and when its main thread was last busy: a frame that came
# more than 25 ms after the one before (the charts draw after the run's last message, some of them
# asynchronously). Taken in the page rather than from Playwright's websocket events, which copy every frame
# to this process: megabytes per rerun, CPU the board and the browser need.
WATCH_PAGE = """
(() => {
  const Native = window.WebSocket;
  const bench = window.__bench = {sent: [], received: 0, busy: 0, firstSentAfter: t => bench.sent.find(time => time > t)};
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener("message", () => { bench.received = performance.now(); });
    }
    send(data) {
      bench.sent = [...bench.sent.slice(-20), performance.now()];
      return super.send(data);
    }
  };
  let previous = performance.now();
  const frame = now => {
    if (now - previous > 25) bench.busy = now;
    previous = bench.frame = now;
    requestAnimationFrame(frame);
  };
  requestAnimationFrame(frame);
})();
"""
QUIET_MS = 200
# The check runs in a frame too, and may run before the page's frame callback in the first frame after a long task,
# when `busy` does not yet say so: such a check saw a page quiet that had just been busy for 0.4-0.6 s (a chart's
# data swapped in), and timed a Zero Shift of 4 compared runs at 0.1 s instead of 0.7 s. So the page's own frame
# callback must have run in this frame (within 25 ms) before the page counts as quiet.
FRAME_SEEN = "performance.now() - window.__bench.frame < 25"


def peak_rss_gib(pid: int) -> float:
    return status_gib(pid, "VmHWM")


# A memory field of /proc/PID/status (VmHWM: peak resident, VmRSS: resident now) in GiB.
def status_gib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


# User and system CPU seconds each of these processes has used so far (none for one that has ended).
def cpu_seconds(pids: list[int]) -> dict[int, float]:
    used = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        used[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return used


# CPU seconds used since `before` by the processes alive now (one started meanwhile counts in full).
def cpu_since(before: dict[int, float], pids: list[int]) -> float:
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in cpu_seconds(pids).items())


# This bench's Chromium: every chromium process below this one (Playwright's driver starts the browser).
def browser_pids() -> list[int]:
    pids = []
    for pid in child_pids(os.getpid()):
        try:
            if Path(f"/proc/{pid}/comm").read_text().startswith("chrom"):
                pids.append(pid)
        except OSError:
            pass
    return pids


# Every process below `pid`, read from /proc (a machine without procps has no pgrep).
def child_pids(pid: int) -> list[int]:
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    below, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        below += children
        frontier = children
    return below


# Keyword arguments of chromium.launch (sync or async API): the system Chromium (or the one BENCH_CHROMIUM names),
# headless, offline.
CHROMIUM = {"executable_path": os.environ.get("BENCH_CHROMIUM", "/usr/bin/chromium"), "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]}
VIEWPORT = {"width": 1600, "height": 2400}


# A set of cores as taskset writes it: "0-1,4" is {0, 1, 4}.
def cpu_list(text: str) -> set[int]:
    cpus = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


# Where the server and the browser run, for a table's heading: the browser on this process's cores, the server on its own
# or the same.
def placement(server_cpus: set[int] | None) -> str:
    server, browser = (",".join(str(cpu) for cpu in sorted(cpus)) for cpus in (server_cpus or os.sched_getaffinity(0), os.sched_getaffinity(0)))
    return f"; server on cores {server}, browser on cores {browser}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# A board server started with start.sh on 127.0.0.1:port, its index cache in `cache`, once it answers its health check;
# with `cpus`, it and its workers run on those cores alone.
def start_server(port: int, root: Path, cache: Path, output=subprocess.DEVNULL, cpus: set[int] | None = None) -> subprocess.Popen:
    env = dict(os.environ, RL_LOGGING_BOARD_CACHE=str(cache), RL_LOGGING_BOARD_PYTHON=sys.executable)  # this Python, as it is
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    server = subprocess.Popen(["bash", str(PROJECT / "start.sh"), str(port), str(root)], env=env, stdout=output, stderr=output, preexec_fn=pin)
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1)
            break
        except OSError:
            time.sleep(0.2)
    return server


# A page-side check (a JS function) that the action armed at `armed` (the page's performance.now()) has been answered
# and drawn: the page received the server's answer, the script is done, `condition` holds, and the main thread has
# been quiet for QUIET_MS.
def done_condition(armed: float, condition: str = "true") -> str:
    return f"""() => {{
            const bench = window.__bench, sent = bench.firstSentAfter({armed});
            return bench.received > sent && document.querySelector('[data-testid="stApp"]').dataset.testScriptState === 'notRunning'
                && ({condition}) && {FRAME_SEEN} && performance.now() - Math.max(bench.busy, bench.received) > {QUIET_MS};
        }}"""


# The page has drawn a loaded run of `steps_expected` steps: the step charts, the token table and the step label.
# Cheap enough to check every frame: no innerText, which would lay out the page each time.
def loaded_condition(steps_expected: int) -> str:
    label = f"Step Index({steps_expected} total steps)"
    return (
        "document.querySelectorAll('.vega-embed .marks').length >= 4 && document.querySelector('.st-key-token_view_shown [data-testid=\"stDataFrame\"] canvas')"
        f" && [...document.querySelectorAll('[data-testid=\"stWidgetLabel\"]')].some(label => label.textContent.includes('{label}'))"
    )


class Board:
    """A board server started with start.sh, and a Chromium page on it."""

    def __init__(self, root: Path, cache: Path, playwright, server_cpus: set[int] | None = None):
        self.port = free_port()
        self.root, self.cache, self.url = root, cache, f"http://127.0.0.1:{self.port}"
        self.server_cpus = server_cpus
        self.start_server()
        self.browser = playwright.chromium.launch(**CHROMIUM)
        self.page = self.browser.new_page(viewport=VIEWPORT)
        self.page.add_init_script(WATCH_PAGE)

    # Also how long the server took to answer its health check: start.sh's own start (the page's libraries imported and
    # the worker processes started before it serves).
    def start_server(self):
        started = time.perf_counter()
        self.server = start_server(self.port, self.root, self.cache, cpus=self.server_cpus)
        self.start_seconds = time.perf_counter() - started

    # The page opened (its first screen opens the root's run by itself) until it has drawn the run: seconds from the
    # navigation's start, so the page's own code is fetched within them, as a user waits for it. Also the server's part:
    # from the page's first message (its first run's request) to the run's last message.
    # `condition`: the page's check that the run is drawn (default loaded_condition's).
    def open_page(self, steps_expected: int, condition: str | None = None) -> float:
        server_before = cpu_seconds([self.server.pid, *child_pids(self.server.pid)])
        browser_before = cpu_seconds(browser_pids())
        self.page.goto(self.url)
        self.page.wait_for_function(done_condition(0, condition or loaded_condition(steps_expected)), timeout=300_000, polling="raf")
        sent, received, busy = self.page.evaluate("() => [window.__bench.firstSentAfter(0), window.__bench.received, window.__bench.busy]")
        self.server_seconds = (received - sent) / 1000
        self.server_cpu = cpu_since(server_before, [self.server.pid, *child_pids(self.server.pid)])
        self.browser_cpu = cpu_since(browser_before, browser_pids())
        return max(busy, received) / 1000

    # The page opened and its first screen drawn (and `condition` held), untimed: for a bench that times what the user
    # does next.
    def show_page(self, condition: str = "true"):
        self.page.goto(self.url)
        self.page.wait_for_function(done_condition(0, condition), timeout=300_000, polling="raf")

    # A new server on the same port, and the user reloading the same tab (the browser keeps its cache): seconds until
    # the run is drawn again.
    def restart_server(self, steps_expected: int, condition: str | None = None) -> float:
        self.stop_server()
        self.start_server()
        return self.open_page(steps_expected, condition)

    def stop_server(self):
        self.server.terminate()
        self.server.wait(timeout=30)

    # Seconds from the rerun request an action causes to the page done drawing (its main thread free again,
    # and quiet for QUIET_MS since), all timed in the page: Playwright's own latency in delivering a click is
    # not the board's. Also the server's part: from the request to the run's last message.
    def timed(self, action, condition: str = "true") -> float:
        server_before = cpu_seconds([self.server.pid, *child_pids(self.server.pid)])
        browser_before = cpu_seconds(browser_pids())
        armed = self.page.evaluate("() => performance.now()")
        action()
        try:
            self.page.wait_for_function(done_condition(armed, condition), timeout=300_000, polling="raf")
        except Exception:
            self.page.screenshot(path=str(PROJECT / "bench" / "runs" / "timed_out.png"), full_page=True)
            raise
        sent, received, busy = self.page.evaluate(f"() => [window.__bench.firstSentAfter({armed}), window.__bench.received, window.__bench.busy]")
        self.server_seconds = (received - sent) / 1000
        self.server_cpu = cpu_since(server_before, [self.server.pid, *child_pids(self.server.pid)])
        self.browser_cpu = cpu_since(browser_before, browser_pids())
        return (max(busy, received) - sent) / 1000

    def load(self, steps_expected: int) -> float:
        return self.timed(lambda: self.page.get_by_role("button", name="Load & View").click(), loaded_condition(steps_expected))

    def change_step(self) -> float:
        self.page.get_by_label(re.compile(r"Step Index\(")).get_by_role("slider").focus()
        return self.timed(lambda: self.page.keyboard.press("ArrowRight"))

    def change_sample(self, index: int) -> float:
        field = self.page.get_by_label("Sample index in current step batch")
        field.fill(str(index))
        return self.timed(lambda: field.press("Enter"))

    # A curve setting moved with the keyboard: each key press is a rerun (of the curves' fragment).
    def press_smoothing(self) -> float:
        self.page.locator('[data-testid="stSlider"]').filter(has_text="Smoothing").get_by_role("slider").focus()
        return self.timed(lambda: self.page.keyboard.press("ArrowRight"))

    # Zero Shift, above the step curves: a rerun of the curves' fragment; the first after a load computes the shifted
    # curves.
    def toggle_zero_shift(self) -> float:
        return self.timed(lambda: self.page.get_by_text("Zero Shift", exact=True).click())

    # A sidebar setting: the page reruns, or the fragment that draws it (the settings of how samples are shown).
    def toggle_sidebar_setting(self, label: str) -> float:
        return self.timed(lambda: self.page.locator('[data-testid="stSidebar"] label').filter(has_text=label).first.click())

    def set_max_samples(self, value: int, steps_expected: int) -> float:
        field = self.page.get_by_role("spinbutton", name="Max Samples Each Step", exact=True)
        field.fill(str(value))
        return self.timed(lambda: field.press("Enter"), loaded_condition(steps_expected))

    def memory(self) -> tuple[float, float]:
        pid = self.server.pid
        return peak_rss_gib(pid), sum(peak_rss_gib(child) for child in child_pids(pid))

    def close(self):
        self.browser.close()
        self.stop_server()


# bench/runs/SIZE/run, generated the first time it is needed; returns its root, bench/runs/SIZE. With summaries: the
# same run with the logger's summaries files, as the logger writes them (bench/runs/SIZE-summaries).
def generated_run(size: str, summaries: bool = False) -> Path:
    steps, samples, tokens, ranks = SIZES[size]
    root = PROJECT / "bench" / "runs" / (f"{size}-summaries" if summaries else size)
    if not (root / "run").exists():
        print(f"generating the {size} run{' with summaries' if summaries else ''}...", file=sys.stderr)
        write_run(root / "run", steps, samples, tokens, ranks, grpo=summaries, summaries=summaries)
    return root


def measure(size: str, repeats: int, max_samples: int | None, summaries: bool = False, server_cpus: set[int] | None = None) -> dict:
    steps, samples, tokens, ranks = SIZES[size]
    root = generated_run(size, summaries)
    run_dir = root / "run"
    size_gb = sum(p.stat().st_size for p in run_dir.glob("*.jsonl")) / 1e9
    rows: dict[str, list[float]] = {name: [] for name in TARGETS}
    rows.update({name: [] for name in EXTRA_ROWS})
    appended = run_dir / "rollout_data_rank_0.jsonl"
    with sync_playwright() as playwright:
        for _ in range(repeats):
            rows["orjson floor (s)"].append(orjson_floor(run_dir))
            rows["byte-read floor (s)"].append(read_floor(run_dir))
            cache = root / "cache"
            shutil.rmtree(cache, ignore_errors=True)
            board = Board(root, cache, playwright, server_cpus)
            first = board.open_page(steps)
            if max_samples:  # the first screen opened the run with 128 samples a step; then the user asks for more
                first += board.set_max_samples(max_samples, steps)
            rows["first open (s)"].append(first)
            rows["first open / orjson floor"].append(first / rows["orjson floor (s)"][-1])
            print(f"{size}: first open {first:.2f} s, orjson floor {rows['orjson floor (s)'][-1]:.2f} s", file=sys.stderr, flush=True)
            rows["first open, server part (s)"].append(board.server_seconds)
            rows["first open, CPU: server (s)"].append(board.server_cpu)
            rows["first open, CPU: browser (s)"].append(board.browser_cpu)
            for name, change in (("step", lambda i: board.change_step()), ("sample", board.change_sample)):
                totals, server_parts, server_cpu, browser_cpu = [], [], [], []
                for index in (3, 7, 11):
                    totals.append(change(index))
                    server_parts.append(board.server_seconds)
                    server_cpu.append(board.server_cpu)
                    browser_cpu.append(board.browser_cpu)
                rows[f"change the {name} (s)"].append(statistics.median(totals))
                rows[f"change the {name}, server part (s)"].append(statistics.median(server_parts))
                rows[f"change the {name}, CPU: server (s)"].append(statistics.median(server_cpu))
                rows[f"change the {name}, CPU: browser (s)"].append(statistics.median(browser_cpu))
            print(f"{size}: step {rows['change the step (s)'][-1]:.2f} s, sample {rows['change the sample (s)'][-1]:.2f} s", file=sys.stderr, flush=True)
            looked = []
            for _ in range(3):
                time.sleep(LOOK_SECONDS)  # a user looking at the step: its neighbours are read ahead meanwhile
                looked.append((board.change_step(), board.server_seconds))
            rows[f"change the step after {LOOK_SECONDS:g} s on one (s)"].append(statistics.median(total for total, _ in looked))
            rows[f"change the step after {LOOK_SECONDS:g} s on one, server part (s)"].append(statistics.median(server for _, server in looked))
            for name, server_name in (
                ("first curve setting change after a load: Zero Shift on (s)", "first curve setting change after a load, server part (s)"),
                ("Zero Shift off again (s)", "Zero Shift off again, server part (s)"),
            ):
                rows[name].append(board.toggle_zero_shift())
                rows[server_name].append(board.server_seconds)
            sidebar = []
            for _ in range(2):  # off, then on again: the page as it was
                sidebar.append((board.toggle_sidebar_setting("Drop Padding Token"), board.server_seconds, board.server_cpu, board.browser_cpu))
            for column, name in enumerate(["sidebar setting of how samples are shown: Drop Padding Token (s)", "sidebar setting of how samples are shown, server part (s)", "sidebar setting of how samples are shown, CPU: server (s)", "sidebar setting of how samples are shown, CPU: browser (s)"]):
                rows[name].append(statistics.median(values[column] for values in sidebar))
            presses = [(board.press_smoothing(), board.server_seconds) for _ in range(3)]
            rows["Smoothing, one arrow key press (s)"].append(statistics.median(total for total, _ in presses))
            rows["Smoothing, one arrow key press, server part (s)"].append(statistics.median(server for _, server in presses))
            size_before = appended.stat().st_size
            with open(appended, "ab") as file:
                file.write(step_lines(0, 0, steps, 128, tokens, steps, False))
            rows["new step appended, noticed -> in charts (s)"].append(board.load(steps + 1))
            rows["new step appended, server part (s)"].append(board.server_seconds)
            server_peak, worker_peak = board.memory()
            rows["server peak memory (GiB)"].append(server_peak)
            rows["worker peak memory (GiB, all)"].append(worker_peak)
            os.truncate(appended, size_before)
            board.load(steps)  # the index cache forgets the appended step
            again = board.restart_server(steps)
            rows["server start until it answers (s)"].append(board.start_seconds)
            rows["open again after restart, server part (s)"].append(board.server_seconds)
            if max_samples:
                again += board.set_max_samples(max_samples, steps)
            rows["open again after restart (s)"].append(again)
            print(f"{size}: appended step in charts {rows['new step appended, noticed -> in charts (s)'][-1]:.2f} s, open after restart {rows['open again after restart (s)'][-1]:.2f} s", file=sys.stderr, flush=True)
            board.close()
    return {"size_gb": size_gb, **{name: statistics.median(values) for name, values in rows.items()}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["medium", "large"], choices=list(SIZES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-samples", type=int, default=None, help="Max Samples Each Step (default: the board's 128)")
    parser.add_argument("--summaries", action="store_true", help="runs with the logger's summaries files, as the logger writes them")
    parser.add_argument("--server-cpus", type=cpu_list, help="cores for the server and its workers, as taskset writes them (0-1,4); default: the bench's")
    parser.add_argument("--browser-cpus", type=cpu_list, help="cores for this bench, its Playwright driver and Chromium; default: every core")
    options = parser.parse_args()
    if options.browser_cpus:
        os.sched_setaffinity(0, options.browser_cpus)  # Playwright's driver, and the Chromium it starts, inherit them
    results = {size: measure(size, options.repeats, options.max_samples, options.summaries, options.server_cpus) for size in options.sizes}
    sizes = list(results)
    print(f"\nmedian of {options.repeats}; Max Samples Each Step = {options.max_samples or 128}; {os.cpu_count()} cores{placement(options.server_cpus)}{'; with the logger summaries files' if options.summaries else ''}")
    print("| measure | " + " | ".join(f"{s} ({results[s]['size_gb']:.2f} GB)" for s in sizes) + " | target |")
    print("|---|" + "---|" * len(sizes) + "---|")
    for name in list(TARGETS) + EXTRA_ROWS:
        cells = " | ".join(f"{results[s][name]:.2f}" for s in sizes)
        target = " / ".join(TARGETS.get(name, {}).get(s, "") for s in sizes).strip(" /")
        print(f"| {name} | {cells} | {target} |")
