"""Where Chromium's time goes in the board's actions: the browser's part of run_bench.py's rows, split by what its
threads do, and the server's messages as the page handled them.

On the medium run of run_bench.py (generated and indexed once), a real server started by start.sh and headless
Chromium, each action is done twice untimed, then --repeats times, each time timed as run_bench.py times it
(Board.timed) while Chromium traces itself (the devtools.timeline categories) and, in a second round, samples its
JavaScript (the DevTools protocol's CPU profiler). Per action, the medians of:

- the action's time, and when the page handled the run's last message: the tables' "server part", which includes
  the main thread's busy spells, since a page handles its messages between its tasks;
- the messages the page received (their count and kB), and its long tasks (over 50 ms: count and total);
- the page's main thread busy (its top-level trace events), split by their self time into JavaScript, garbage
  collection, style, layout, paint (canvases and compositing included) and the rest; the compositor's threads
  (Compositor, VizCompositorThread) and the worker threads (raster, garbage collection) busy;
- the JavaScript's self time by script, from the CPU profile: its bundle's name (Streamlit 1.67's: react-dom is
  React, embed Vega and vega-embed, vega-interpreter Vega's CSP-safe expression interpreter, emotion-styled and
  styled-components Streamlit's styled elements, DataFrame the data grids, StreamlitMarkdown the markdown, index
  Streamlit's app), a native function's name where JavaScript called one, and "(garbage collector)";
- Chromium's CPU seconds, all its processes.

    python bench/browser_profile.py                          # step, sample, Zero Shift; median of 5
    python bench/browser_profile.py --actions step --repeats 3
"""

import argparse
import collections
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from playwright.sync_api import sync_playwright  # noqa: E402

from bench.run_bench import SIZES, Board, generated_run, loaded_condition  # noqa: E402

TRACE_CATEGORIES = ["devtools.timeline", "disabled-by-default-devtools.timeline", "v8.execute", "blink", "cc", "gpu", "viz"]

# The page's messages and long tasks, each stamped in the page.
LOG_PAGE = """
(() => {
  const log = window.__profile = {messages: [], long: []};
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener("message", event => { log.messages.push([performance.now(), event.data.size ?? event.data.byteLength ?? 0]); });
    }
  };
  new PerformanceObserver(list => { for (const task of list.getEntries()) log.long.push([task.startTime, task.duration]); }).observe({type: "longtask"});
})();
"""

# What a main-thread trace event's self time is, by its name.
JAVASCRIPT = {"FunctionCall", "EvaluateScript", "RunMicrotasks", "FireAnimationFrame", "TimerFire", "EventDispatch", "v8.run", "v8.callFunction", "V8.Execute", "v8.compile", "v8.compileModule", "v8.evaluateModule", "v8.produceCache", "CompileScript", "CompileCode"}
GARBAGE_COLLECTION = ("V8.GC", "MajorGC", "MinorGC", "BlinkGC", "ThreadState::")
COMPOSITOR_THREADS = {"Compositor", "VizCompositorThread"}
WORKER_THREADS = ("ThreadPoolForegroundWorker", "CompositorTileWorker", "ThreadPoolBackgroundWorker")


def kind_of(name: str) -> str:
    if name in JAVASCRIPT:
        return "JavaScript"
    if name.startswith(GARBAGE_COLLECTION):
        return "garbage collection"
    if "Style" in name or name == "UpdateLayoutTree":
        return "style"
    if "Layout" in name or "ShapeText" in name:
        return "layout"
    if any(part in name for part in ("Paint", "Layerize", "Canvas", "Composit", "Raster", "Commit", "Image")):
        return "paint, canvases, compositing"
    return "other"


MAIN_KINDS = ["JavaScript", "garbage collection", "style", "layout", "paint, canvases, compositing", "other"]


# Seconds busy per thread name (top-level complete events) and the main thread's self time per kind of event.
def split_trace(events: list[dict]) -> tuple[dict[str, float], dict[str, float]]:
    names = {(event["pid"], event["tid"]): event["args"]["name"] for event in events if event.get("ph") == "M" and event.get("name") == "thread_name"}
    by_thread = collections.defaultdict(list)
    for event in events:
        if event.get("ph") == "X" and "dur" in event:
            by_thread[event["pid"], event["tid"]].append(event)
    busy, kinds = collections.Counter(), collections.Counter()
    main = max((key for key in by_thread if names.get(key) == "CrRendererMain"), key=lambda key: len(by_thread[key]), default=None)
    for key, spans in by_thread.items():
        spans.sort(key=lambda event: (event["ts"], -event["dur"]))
        stack, own = [], {}
        for event in spans:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= event["ts"]:
                stack.pop()
            if stack:
                parent = id(stack[-1])
                own[parent] = own.get(parent, stack[-1]["dur"]) - event["dur"]
            else:
                busy[names.get(key, "?")] += event["dur"] / 1e6
            stack.append(event)
        if key == main:
            for event in spans:
                kinds[kind_of(event["name"])] += max(own.get(id(event), event["dur"]), 0) / 1e6
    return busy, kinds


# Self seconds per script (its bundle's name) in a CPU profile of the DevTools protocol.
def split_profile(profile: dict) -> dict[str, float]:
    nodes = {node["id"]: node["callFrame"] for node in profile["nodes"]}
    seconds = collections.Counter()
    for sample, delta in zip(profile["samples"], profile["timeDeltas"]):
        frame = nodes[sample]
        if frame["functionName"] in ("(idle)", "(program)"):  # waiting, and the browser's own work (in the trace's split)
            continue
        script = frame["url"].rsplit("/", 1)[-1].split(".", 1)[0] if frame["url"] else frame["functionName"] or "(native)"
        seconds[script] += delta / 1e6
    return seconds


class ProfiledBoard(Board):
    """run_bench's Board, tracing and sampling the page's actions."""

    def __init__(self, root: Path, cache: Path, playwright):
        super().__init__(root, cache, playwright)
        self.page.add_init_script(LOG_PAGE)
        self.profiler = None

    def traced(self, action) -> dict[str, float]:
        self.page.evaluate("() => { window.__profile.messages.length = 0; window.__profile.long.length = 0; }")
        started = self.page.evaluate("() => performance.now()")
        self.browser.start_tracing(page=self.page, categories=TRACE_CATEGORIES)
        seconds = action()
        events = json.loads(self.browser.stop_tracing())["traceEvents"]
        sent = self.page.evaluate(f"() => window.__bench.firstSentAfter({started})")
        messages, long_tasks = self.page.evaluate("() => [window.__profile.messages, window.__profile.long]")
        messages = [(at, size) for at, size in messages if at >= sent]
        busy, kinds = split_trace(events)
        return {
            "the action (s)": seconds,
            "the run's last message handled, after the request (s)": (max(at for at, _ in messages) - sent) / 1000 if messages else float("nan"),
            "messages received": len(messages),
            "… their kB": sum(size for _, size in messages) / 1000,
            "long tasks": sum(1 for start, _ in long_tasks if start >= sent),
            "… their time (s)": sum(duration for start, duration in long_tasks if start >= sent) / 1000,
            "main thread busy (s)": busy["CrRendererMain"],
            **{f"… {kind} (s)": kinds[kind] for kind in MAIN_KINDS},
            "compositor threads busy (s)": sum(busy[name] for name in COMPOSITOR_THREADS),
            "worker threads busy: raster, garbage collection (s)": sum(seconds for name, seconds in busy.items() if name.startswith(WORKER_THREADS)),
            "Chromium's CPU, all its processes (s)": self.browser_cpu,
        }

    def sampled(self, action) -> dict[str, float]:
        if self.profiler is None:
            self.profiler = self.page.context.new_cdp_session(self.page)
            self.profiler.send("Profiler.enable")
            self.profiler.send("Profiler.setSamplingInterval", {"interval": 250})
        self.profiler.send("Profiler.start")
        action()
        return split_profile(self.profiler.send("Profiler.stop")["profile"])


def measure(actions: list[str], repeats: int) -> tuple[dict, dict]:
    root = generated_run("medium")
    steps = SIZES["medium"][0]
    traced, sampled = {name: [] for name in actions}, {name: [] for name in actions}
    with sync_playwright() as playwright:
        board = ProfiledBoard(root, root / "cache", playwright)
        try:
            board.show_page(loaded_condition(steps))
            samples = itertools.cycle(range(1, 64))
            do = {"step": board.change_step, "sample": lambda: board.change_sample(next(samples)), "zero_shift": board.toggle_zero_shift}
            for name in actions:
                for _ in range(2):
                    do[name]()
                time.sleep(1)
                for _ in range(repeats):
                    traced[name].append(board.traced(do[name]))
                    time.sleep(0.5)
                for _ in range(repeats):
                    sampled[name].append(board.sampled(do[name]))
                    time.sleep(0.5)
                print(f"{name}: {statistics.median(row['the action (s)'] for row in traced[name]):.2f} s", file=sys.stderr, flush=True)
        finally:
            board.close()
    return traced, sampled


ACTION_NAMES = {"step": "change the step", "sample": "change the sample", "zero_shift": "Zero Shift"}
COUNTS = {"messages received", "… their kB", "long tasks"}  # printed as whole numbers


def table(traced: dict, sampled: dict, repeats: int) -> str:
    actions = list(traced)
    lines = [f"medium run, median of {repeats}; one Chromium page, a server on the same 2 cores", "", "| measure | " + " | ".join(ACTION_NAMES[name] for name in actions) + " |", "|---" * (len(actions) + 1) + "|"]
    for measure in traced[actions[0]][0]:
        cells = [statistics.median(row[measure] for row in traced[name]) for name in actions]
        lines.append(f"| {measure} | " + " | ".join(f"{cell:.0f}" if measure in COUNTS else f"{cell:.2f}" for cell in cells) + " |")
    scripts = collections.Counter()
    for name in actions:
        for profile in sampled[name]:
            scripts.update(profile)
    for script, _ in scripts.most_common(12):
        cells = [statistics.median(profile.get(script, 0.0) for profile in sampled[name]) for name in actions]
        lines.append(f"| JavaScript profile, self: {script} (s) | " + " | ".join(f"{cell:.3f}" for cell in cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--actions", nargs="+", default=list(ACTION_NAMES), choices=list(ACTION_NAMES))
    parser.add_argument("--repeats", type=int, default=5)
    arguments = parser.parse_args()
    print(table(*measure(arguments.actions, arguments.repeats), arguments.repeats))
