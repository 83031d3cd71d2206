"""Many users, one server: browser sessions sharing one board server, and a live run watched by several.

Scenario 1, for each number of SESSIONS (1, 4 and 8 by default), a server of its own (start.sh) on the medium run
of bench/run_bench.py, with an empty index cache: the sessions open the page at once (its first screen opens the run:
the first open is timed until the run is drawn), and, once every page has drawn, change the step ROUNDS times, all sessions pressing the key together each round (the
worst case: every rerun collides). The single session is the baseline the run's memory and the server's CPU are
compared with: the run is indexed and held once, not once per session, so the server's memory must not grow with
the sessions, and the index cache files must be written once each (a polling thread counts each new version of a
cache file: one per indexed rank file and index pass).
Scenario 2: a small run that a writer thread extends by a step every APPEND_EVERY seconds, watched by LIVE_SESSIONS
sessions with Live mode on and Live refresh at its minimum (2 s); for each session and appended step, whether
the step appeared (the "Step Index(N total steps)" label counting it) and after how long.

Every session is a browser context of its own in one Chromium (one renderer process per page); the pages are
driven concurrently through Playwright's async API. Times are taken in each page, as bench/run_bench.py does:
from the rerun request the page sent until it received the server's last message, the script is done and
its main thread has been quiet for 0.2 s (the first such moment is stamped in the page, so waiting on the
other pages does not count). Every session shares the machine's cores with the server and the other pages:
a page's frames late because other pages draw count as its own busy time, as its user would see them.
Errors: exception elements ([data-testid="stException"]) on every page at the end of each phase, uncaught page
errors, and tracebacks in the server's output (kept in bench/runs/concurrent-*.log).

    python bench/concurrent_sessions.py                      # 1, 4, then 8 sessions, 5 rounds of step changes, 4 live watchers
    python bench/concurrent_sessions.py --sessions 4 --rounds 3 --appends 5
    python bench/concurrent_sessions.py --server-cpus 0,1 --browser-cpus 2-9   # the pages on cores of their own
"""

import argparse
import asyncio
import os
import re
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

from playwright.async_api import async_playwright

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))
from bench.generate_run import step_lines, write_run  # noqa: E402
from bench.run_bench import (  # noqa: E402
    CHROMIUM,
    SIZES,
    VIEWPORT,
    WATCH_PAGE,
    browser_pids,
    child_pids,
    cpu_list,
    cpu_seconds,
    done_condition,
    free_port,
    generated_run,
    loaded_condition,
    peak_rss_gib,
    placement,
    start_server,
    status_gib,
)

RUNS = PROJECT / "bench" / "runs"
STEP_SLIDER = re.compile(r"Step Index\(")
EXCEPTIONS = '[data-testid="stException"]'
LIVE_RUN = (5, 32, 200, 2)  # steps, samples per step, mean tokens, rank files of the live run before any append
# Page side, for the live run: when each "Step Index(N total steps)" label was first seen (epoch ms, checked every 100 ms).
WATCH_STEPS = """
(() => {
  const seen = window.__steps = {};
  setInterval(() => {
    for (const label of document.querySelectorAll('[data-testid="stWidgetLabel"]')) {
      const match = /Step Index\\((\\d+) total steps\\)/.exec(label.textContent);
      if (match && !(match[1] in seen)) seen[match[1]] = Date.now();
    }
  }, 100);
})();
"""


# The first moment the page is done (done_condition), as epoch ms [request sent, last message received, done]:
# stamped by the page itself when it first holds, so a page waited on after others is not charged the wait.
def stamped(armed: float, condition: str = "true") -> str:
    return f"""() => {{
        if (!({done_condition(armed, condition)})()) return false;
        const bench = window.__bench, origin = performance.timeOrigin;
        return [bench.firstSentAfter({armed}) + origin, bench.received + origin, Math.max(bench.busy, bench.received) + origin];
    }}"""


class Server:
    """A board served by start.sh with an empty index cache; a thread samples its memory and counts cache writes."""

    def __init__(self, root: Path, cache: Path, name: str, cpus: set[int] | None = None):
        shutil.rmtree(cache, ignore_errors=True)
        self.cache, self.log_path = cache, RUNS / f"concurrent-{name}.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(self.log_path, "wb")
        self.process = start_server(self.port, root, cache, output=self.log, cpus=cpus)
        self.peak_total = self.peak_server = 0.0
        self.cache_versions: set[tuple[str, int, int]] = set()
        self.children: dict[int, str] = {}  # every process seen under the server: pid -> what it runs
        self.stopped = threading.Event()
        self.sampler = threading.Thread(target=self.sample, daemon=True)
        self.sampler.start()

    def pids(self) -> list[int]:
        return [self.process.pid, *child_pids(self.process.pid)]

    # Every 0.1 s: the resident memory of the server and its workers (listed again every 2 s: pgrep costs CPU),
    # and every version of each index cache file (a write replaces the file: a new inode).
    def sample(self):
        pids, listed = [], 0.0
        while not self.stopped.wait(0.1):
            if time.monotonic() - listed > 2:
                pids, listed = self.pids(), time.monotonic()
                for pid in pids[1:]:
                    if pid not in self.children:
                        try:
                            self.children[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[-60:]
                        except OSError:
                            pass
            total = 0.0
            for pid in pids:
                try:
                    rss = status_gib(pid, "VmRSS")
                except OSError:
                    continue
                total += rss
                if pid == self.process.pid:
                    self.peak_server = max(self.peak_server, rss)
            self.peak_total = max(self.peak_total, total)
            if self.cache.is_dir():
                for path in self.cache.glob("*.arrow"):
                    try:
                        status = path.stat()
                    except OSError:
                        continue
                    self.cache_versions.add((path.name, status.st_ino, status.st_mtime_ns))

    def memory(self) -> dict:
        peaks = []
        for pid in child_pids(self.process.pid):
            try:
                peaks.append(peak_rss_gib(pid))
            except OSError:  # ended since it was listed
                pass
        return {"rss": status_gib(self.process.pid, "VmRSS"), "hwm": peak_rss_gib(self.process.pid), "workers_hwm": sum(peaks), "workers": len(peaks)}

    def cpu(self) -> float:
        return sum(cpu_seconds(self.pids()).values())

    def tracebacks(self) -> int:
        self.log.flush()
        return self.log_path.read_bytes().count(b"Traceback")

    def stop(self):
        self.stopped.set()
        self.sampler.join()
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()
        shutil.rmtree(self.cache, ignore_errors=True)


class Session:
    """A browser context with one page on the board."""

    def __init__(self, number: int):
        self.number = number
        self.page_errors: list[str] = []
        self.failed: str | None = None

    # Opens the page and waits until its first screen has drawn the run of `steps` steps; returns the epoch ms the
    # page was asked for, and the page's [sent, received, done] of that first draw.
    async def open(self, browser, url: str, init_scripts: list[str], steps: int) -> tuple[float, list[float]]:
        self.context = await browser.new_context(viewport=VIEWPORT)
        for script in init_scripts:
            await self.context.add_init_script(script)
        self.page = await self.context.new_page()
        self.page.on("pageerror", lambda error: self.page_errors.append(str(error)))
        asked = time.time() * 1000
        await self.page.goto(url)
        return asked, await self.done(0, loaded_condition(steps), timeout_s=300)

    async def armed(self) -> float:
        return await self.page.evaluate("() => performance.now()")

    # [sent, received, done] in epoch ms, once the page is done after the request armed at `armed`.
    async def done(self, armed: float, condition: str = "true", timeout_s: float = 120) -> list[float]:
        handle = await self.page.wait_for_function(stamped(armed, condition), timeout=timeout_s * 1000, polling="raf")
        return await handle.json_value()

    async def exceptions(self) -> int:
        return await self.page.locator(EXCEPTIONS).count()


# Runs `action(session)` on every session still running, together; a session that fails is left out from then on.
async def together(sessions: list[Session], action) -> list:
    running = [session for session in sessions if not session.failed]
    results = await asyncio.gather(*(action(session) for session in running), return_exceptions=True)
    for session, result in zip(running, results):
        if isinstance(result, BaseException):
            session.failed = f"{type(result).__name__}: {str(result).splitlines()[0] if str(result) else ''}"
    return [(session, result) for session, result in zip(running, results) if not isinstance(result, BaseException)]


# Waits until the server with its workers used under 0.1 s of CPU in half a second and every page's main thread was
# quiet for the last 0.5 s (the workers have started, the pages have drawn their off-screen warm-up); returns the seconds waited.
async def settle(server: Server, sessions: list[Session], timeout_s: float = 90) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        before = server.cpu()
        await asyncio.sleep(0.5)
        busy = server.cpu() - before
        quiet = await together(sessions, lambda s: s.page.evaluate("() => performance.now() - window.__bench.busy > 500"))
        if busy < 0.1 and all(idle for _, idle in quiet):
            break
    return time.monotonic() - started


def quantiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    if not ordered:
        return (float("nan"),) * 3
    p95 = ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))]
    return statistics.median(ordered), p95, ordered[-1]


# Scenario 1 for `count` sessions on a server of their own: the page opened by all at once (its first screen opens the
# run), then `rounds` step changes together.
async def open_and_change_steps(browser, count: int, rounds: int, size: str, server_cpus: set[int] | None = None) -> dict:
    steps = SIZES[size][0]
    server = Server(generated_run(size), RUNS / f"concurrent-cache-{count}", f"{count}-sessions", server_cpus)
    sessions = [Session(number) for number in range(count)]
    result = {"sessions": count}
    try:
        cpu_before, browser_before = server.cpu(), cpu_seconds(browser_pids())
        opened = await together(sessions, lambda s: s.open(browser, server.url, [WATCH_PAGE], steps))
        asked = [at for _, (at, _) in opened]
        result["open wall (s)"] = (max(stamp[2] for _, (_, stamp) in opened) - min(asked)) / 1000 if opened else float("nan")
        result["open server CPU (s)"] = server.cpu() - cpu_before
        result["open browser CPU (s)"] = sum(cpu_seconds(browser_pids()).values()) - sum(browser_before.values())
        result["first draw (s)"] = quantiles([(stamp[2] - at) / 1000 for _, (at, stamp) in opened])
        result["first draw, server part (s)"] = quantiles([(stamp[1] - stamp[0]) / 1000 for _, (_, stamp) in opened])
        result["page opens spread (s)"] = (max(asked) - min(asked)) / 1000 if asked else float("nan")
        result["cache writes after open"] = len(server.cache_versions)
        result["rss after open (GiB)"] = server.memory()["rss"]
        result["settled after (s)"] = await settle(server, sessions)  # the pages finish drawing, the server writes its caches
        changes, servers, spreads, cpu_before, browser_before = [], [], [], server.cpu(), sum(cpu_seconds(browser_pids()).values())

        async def change_step(session):
            await session.page.get_by_label(STEP_SLIDER).get_by_role("slider").focus()
            armed = await session.armed()
            await session.page.keyboard.press("ArrowRight")
            return await session.done(armed)

        for _ in range(rounds):
            stamps = [stamp for _, stamp in await together(sessions, change_step)]
            changes += [(stamp[2] - stamp[0]) / 1000 for stamp in stamps]
            servers += [(stamp[1] - stamp[0]) / 1000 for stamp in stamps]
            spreads.append((max(stamp[0] for stamp in stamps) - min(stamp[0] for stamp in stamps)) / 1000 if stamps else float("nan"))
        result["step change (s)"] = quantiles(changes)
        result["step change, server part (s)"] = quantiles(servers)
        result["step changes"] = len(changes)
        result["step change server CPU per change (s)"] = (server.cpu() - cpu_before) / max(len(changes), 1)
        result["step change browser CPU per change (s)"] = (sum(cpu_seconds(browser_pids()).values()) - browser_before) / max(len(changes), 1)
        result["step key presses spread (s)"] = statistics.median(spreads) if spreads else float("nan")
        result["exception elements"] = sum(count for _, count in await together(sessions, Session.exceptions))
    finally:
        await close_and_summarize(sessions, server, result)
        result["peak rss, server (GiB)"] = server.peak_server
        result["cache writes"] = len(server.cache_versions)
    return result


# Close every session's browser context, then note how the sessions and the server fared; the server is stopped even
# when reading the results fails.
async def close_and_summarize(sessions: list, server, result: dict):
    try:
        for session in sessions:
            with_context = getattr(session, "context", None)
            if with_context:
                await with_context.close()
        result["completed"] = sum(not session.failed for session in sessions)
        result["failures"] = [f"session {s.number}: {s.failed}" for s in sessions if s.failed]
        result["page errors"] = sum(len(session.page_errors) for session in sessions)
        result["page error texts"] = sorted({text for session in sessions for text in session.page_errors})[:5]
        result.update({f"memory {name}": value for name, value in server.memory().items()})
        result["peak rss, server + workers (GiB)"] = server.peak_total
        result["children"] = dict(server.children)
        result["tracebacks in server output"] = server.tracebacks()
    finally:
        server.stop()


# Appends `appends` steps to every rank file of run_dir, one every `every` seconds; returns [(step count after, epoch ms)].
def append_steps(run_dir: Path, first_step: int, appends: int, every: float, appended: list):
    steps, samples, tokens, ranks = LIVE_RUN
    start = time.monotonic()
    for k in range(appends):
        time.sleep(max(0.0, start + (k + 1) * every - time.monotonic()))
        step = first_step + k
        for rank in range(ranks):
            with open(run_dir / f"rollout_data_rank_{rank}.jsonl", "ab") as file:
                file.write(step_lines(0, rank, step, samples // ranks, tokens, first_step + appends, False))
        appended.append((step + 1, time.time() * 1000))


# Scenario 2: `count` sessions watch a run in live mode (refresh 2 s) while a step is appended every `every` seconds.
async def watch_live_run(browser, count: int, appends: int, every: float, server_cpus: set[int] | None = None) -> dict:
    steps, samples, tokens, ranks = LIVE_RUN
    root = RUNS / "live"
    shutil.rmtree(root, ignore_errors=True)
    write_run(root / "run", steps, samples, tokens, ranks, workers=1)
    server = Server(root, RUNS / "concurrent-cache-live", "live", server_cpus)
    sessions = [Session(number) for number in range(count)]
    result = {"sessions": count, "appends": appends, "every": every}
    try:
        await together(sessions, lambda s: s.open(browser, server.url, [WATCH_PAGE, WATCH_STEPS], steps))

        async def go_live(session):
            page = session.page
            armed = await session.armed()
            await page.get_by_text("Live mode", exact=True).click()
            await session.done(armed)
            armed = await session.armed()
            refresh = page.get_by_label("Live refresh (s)").get_by_role("slider")
            await refresh.focus()
            await page.keyboard.press("Home")
            await session.done(armed)
            return await refresh.input_value()

        refreshes = await together(sessions, go_live)
        result["live refresh set (s)"] = sorted({value for _, value in refreshes})
        cache_before = len(server.cache_versions)
        appended: list[tuple[int, float]] = []
        writer = threading.Thread(target=append_steps, args=(root / "run", steps, appends, every, appended))
        writer.start()
        while writer.is_alive():
            await asyncio.sleep(0.5)
        final = steps + appends
        give_up = time.monotonic() + 15  # 2 s refresh, a rerun, and a margin on busy cores
        while time.monotonic() < give_up:
            seen = await together(sessions, lambda s: s.page.evaluate("() => window.__steps"))
            if all(str(final) in steps_seen for _, steps_seen in seen):
                break
            await asyncio.sleep(0.5)
        seen = await together(sessions, lambda s: s.page.evaluate("() => window.__steps"))
        per_session = []
        for session, steps_seen in seen:
            shown = {int(n): at for n, at in steps_seen.items()}
            delays = []
            for count_after, at in appended:
                later = [seen_at for n, seen_at in shown.items() if n >= count_after]
                delays.append((min(later) - at) / 1000 if later else None)
            per_session.append((session.number, delays))
        result["per session"] = per_session
        all_delays = [d for _, delays in per_session for d in delays]
        result["appeared"] = sum(d is not None for d in all_delays)
        result["expected"] = len(sessions) * appends
        result["delay (s)"] = quantiles([d for d in all_delays if d is not None])
        result["cache writes per append"] = (len(server.cache_versions) - cache_before) / max(appends, 1)
        result["exception elements"] = sum(n for _, n in await together(sessions, Session.exceptions))
    finally:
        await close_and_summarize(sessions, server, result)
    return result


def cell(value) -> str:
    if isinstance(value, tuple):
        return " / ".join(f"{v:.2f}" for v in value)
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


# What ran under the server: a line per process, the first 6.
def processes(children: dict[int, str]) -> list[str]:
    lines = [f"process {pid}: ...{args}" for pid, args in children.items()]
    return lines[:6] + ([f"... and {len(lines) - 6} more processes"] if len(lines) > 6 else [])


# A table cell from one entry of a scenario's results ("-" when the scenario has none).
def field(key: str):
    return lambda result: cell(result.get(key, "-"))


def print_tables(opened: list[dict], live: dict | None, size: str, server_cpus: set[int] | None):
    print(f"\n## {', then '.join(str(r['sessions']) for r in opened)} session(s) on the {size} run; {os.cpu_count()} cores{placement(server_cpus)}, one Chromium, a context per session\n")
    print("| measure | " + " | ".join(f"{r['sessions']} session(s)" for r in opened) + " |")
    print("|---|" + "---|" * len(opened))
    rows = [
        ("sessions completed", lambda r: f"{r['completed']} / {r['sessions']}"),
        ("page opens spread over (s)", field("page opens spread (s)")),
        ("page open to the run drawn (s), p50 / p95 / max", field("first draw (s)")),
        ("first draw, server part (s), p50 / p95 / max", field("first draw, server part (s)")),
        ("all sessions drawn, from the first page open (s)", field("open wall (s)")),
        ("then server and pages all quiet after (s)", field("settled after (s)")),
        ("server CPU for the open, with workers (s)", field("open server CPU (s)")),
        ("browser CPU for the open, all pages (s)", field("open browser CPU (s)")),
        ("index cache files written by the open", field("cache writes after open")),
        ("step changes timed", field("step changes")),
        ("key presses of a round spread over (s), median", field("step key presses spread (s)")),
        ("step change (s), p50 / p95 / max", field("step change (s)")),
        ("step change, server part (s), p50 / p95 / max", field("step change, server part (s)")),
        ("CPU per step change: server / browser (s)", lambda r: f"{cell(r.get('step change server CPU per change (s)', '-'))} / {cell(r.get('step change browser CPU per change (s)', '-'))}"),
        ("server memory after open (GiB, VmRSS)", field("rss after open (GiB)")),
        ("server memory at the end (GiB, VmRSS)", lambda r: cell(r["memory rss"])),
        ("server peak memory (GiB, VmHWM)", lambda r: cell(r["memory hwm"])),
        ("worker peak memory (GiB, VmHWM, all)", lambda r: f"{r['memory workers_hwm']:.2f} ({r['memory workers']} processes)"),
        ("peak memory, server + workers sampled together (GiB)", lambda r: cell(r["peak rss, server + workers (GiB)"])),
        ("processes ever started under the server (workers, resource tracker)", lambda r: str(len(r["children"]))),
        ("exception elements / page errors / server tracebacks", lambda r: f"{r.get('exception elements', '-')} / {r['page errors']} / {r['tracebacks in server output']}"),
    ]
    for name, value in rows:
        print(f"| {name} | " + " | ".join(value(r) for r in opened) + " |")
    for r in opened:
        for line in r["failures"] + r["page error texts"] + processes(r["children"]):
            print(f"- {r['sessions']} session(s): {line}")
    if not live:
        return
    print(f"\n## live run: {live['sessions']} sessions, Live mode on, refresh {', '.join(live.get('live refresh set (s)', ['?']))} s; a step appended every {live['every']:g} s\n")
    print("| measure | value |\n|---|---|")
    print(f"| sessions completed | {live['completed']} / {live['sessions']} |")
    print(f"| appended steps that appeared (session x step) | {live.get('appeared', '-')} / {live.get('expected', '-')} |")
    print(f"| append -> in the page (s), p50 / p95 / max | {cell(live.get('delay (s)', '-'))} |")
    print(f"| index cache files written per append | {cell(live.get('cache writes per append', '-'))} |")
    print(f"| server memory at the end (GiB, VmRSS) / peak (VmHWM) | {live['memory rss']:.2f} / {live['memory hwm']:.2f} |")
    print(f"| peak memory, server + workers sampled together (GiB) | {live['peak rss, server + workers (GiB)']:.2f} |")
    print(f"| processes ever started under the server (workers, resource tracker) | {len(live['children'])} |")
    print(f"| exception elements / page errors / server tracebacks | {live.get('exception elements', '-')} / {live['page errors']} / {live['tracebacks in server output']} |")
    print("\n| session | " + " | ".join(f"{LIVE_RUN[0] + k + 1} steps" for k in range(live["appends"])) + " |")
    print("|---|" + "---|" * live["appends"])
    for number, delays in live.get("per session", []):
        print(f"| {number} | " + " | ".join("missed" if d is None else f"{d:.2f} s" for d in delays) + " |")
    for line in live["failures"] + live["page error texts"] + processes(live["children"]):
        print(f"- live: {line}")


async def main(options):
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(**CHROMIUM)
        try:
            opened = []
            for count in options.sessions:
                started = time.monotonic()
                opened.append(await open_and_change_steps(browser, count, options.rounds, options.size, options.server_cpus))
                print(f"{count} session(s): {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
            live = None
            if options.live_sessions:
                started = time.monotonic()
                live = await watch_live_run(browser, options.live_sessions, options.appends, options.append_every, options.server_cpus)
                print(f"live run: {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        finally:
            await browser.close()
    print_tables(opened, live, options.size, options.server_cpus)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="medium", choices=list(SIZES))
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 4, 8], help="sessions of each server, one server per number (default 1 4 8)")
    parser.add_argument("--rounds", type=int, default=5, help="step changes per session, all sessions together each round")
    parser.add_argument("--live-sessions", type=int, default=4, help="0 skips the live run")
    parser.add_argument("--appends", type=int, default=6)
    parser.add_argument("--append-every", type=float, default=2.0)
    parser.add_argument("--server-cpus", type=cpu_list, help="cores for the server and its workers, as taskset writes them (0-1,4); default: the bench's")
    parser.add_argument("--browser-cpus", type=cpu_list, help="cores for this bench, its Playwright driver and Chromium; default: every core")
    options = parser.parse_args()
    if options.browser_cpus:
        os.sched_setaffinity(0, options.browser_cpus)  # Playwright's driver, and the Chromium it starts, inherit them
    asyncio.run(main(options))
