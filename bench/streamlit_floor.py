"""What Streamlit's page costs the browser before the board draws anything: the floor under every row of run_bench.py's
browser table. A page of this script's own (no board, no data) is served with `streamlit run` on 127.0.0.1 and opened
in Chromium as run_bench.py opens the board; each action is timed in the page the same way (run_bench.done_condition:
from the request to the page drawn and its main thread quiet).

- an empty page (a fragment holding a number input), from the navigation to drawn: Streamlit's own start in the page;
- a number typed into that fragment (a fragment rerun, as a step or sample change is), with K other elements or blocks
  on the page that the rerun does not change: every rerun re-renders every element of the page when the script starts
  and again when it ends (they read the script's run state), so each element costs every interaction something.

    python bench/streamlit_floor.py                  # median of 10 per row
    python bench/streamlit_floor.py --repeats 20
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from playwright.sync_api import sync_playwright  # noqa: E402

from bench.run_bench import CHROMIUM, WATCH_PAGE, browser_pids, cpu_seconds, cpu_since, done_condition, free_port  # noqa: E402

PAGE = '''
import os
import streamlit as st

count, kind = int(os.environ["FLOOR_COUNT"]), os.environ["FLOOR_KIND"]
for i in range(count):
    if kind == "markdown":
        st.markdown(f"line {i}")
    elif kind == "checkbox":
        st.checkbox(f"box {i}", key=f"box {i}")
    elif kind == "columns":
        left, right = st.columns(2)
        left.markdown(f"left {i}")
        right.markdown(f"right {i}")
    elif kind == "tabs":
        first, second = st.tabs(["first", "second"])
        first.markdown(f"first {i}")
        second.markdown(f"second {i}")


@st.fragment
def typed():
    number = st.number_input("fragment number", key="number")
    st.markdown(f"typed {number:g}")


typed()
'''
# (what, how many): the rows after the empty page; a columns row is a horizontal block, 2 columns and 2 markdown.
PAGES = [("markdown", 0), ("markdown", 75), ("markdown", 300), ("checkbox", 75), ("checkbox", 300), ("columns", 40), ("tabs", 10), ("tabs", 40)]


def serve(page: Path, kind: str, count: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = dict(os.environ, FLOOR_KIND=kind, FLOOR_COUNT=str(count))
    options = ["--server.port", str(port), "--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"]
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(page), *options], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1)
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
    server.terminate()
    raise RuntimeError(f"streamlit run {page} did not answer its health check on port {port}")


# Seconds from the navigation to the page drawn, the browser's cache warm (the first navigation fills it).
def navigations(browser, url: str, repeats: int) -> list[float]:
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.add_init_script(WATCH_PAGE)
    seconds = []
    for _ in range(repeats + 1):
        page.goto(url)
        page.wait_for_function(done_condition(0, "document.body.innerText.includes('typed 0')"), polling="raf")
        seconds.append(page.evaluate("() => Math.max(window.__bench.busy, window.__bench.received)") / 1000)
    page.close()
    return seconds[1:]


# Seconds and the browser's CPU seconds of each number typed into the fragment.
def typings(browser, url: str, repeats: int) -> list[tuple[float, float]]:
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.add_init_script(WATCH_PAGE)
    page.goto(url)
    field = page.get_by_label("fragment number", exact=True)
    field.wait_for()
    time.sleep(1)
    timed = []
    for number in range(1, repeats + 1):
        field.fill(str(number))
        before = cpu_seconds(browser_pids())
        armed = page.evaluate("() => performance.now()")
        field.press("Enter")
        page.wait_for_function(done_condition(armed, f"document.body.innerText.includes('typed {number}')"), polling="raf")
        sent, received, busy = page.evaluate(f"() => [window.__bench.firstSentAfter({armed}), window.__bench.received, window.__bench.busy]")
        timed.append(((max(busy, received) - sent) / 1000, cpu_since(before, browser_pids())))
        time.sleep(0.3)
    page.close()
    return timed


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=10)
    repeats = parser.parse_args().repeats
    rows = []
    with tempfile.TemporaryDirectory() as folder, sync_playwright() as playwright:
        page = Path(folder) / "floor.py"
        page.write_text(PAGE)
        browser = playwright.chromium.launch(**CHROMIUM)
        for kind, count in PAGES:
            server, url = serve(page, kind, count)
            try:
                if count == 0:
                    rows.append(("an empty page, from the navigation to drawn (s)", statistics.median(navigations(browser, url, repeats)), None))
                timed = typings(browser, url, repeats)
                what = {"columns": f"{count} rows of 2 columns", "tabs": f"{count} tab groups of 2 tabs"}.get(kind, f"{count} {kind}") if count else "nothing else"
                rows.append((f"a number typed into a fragment, {what} on the page (s)", statistics.median(t for t, _ in timed), statistics.median(c for _, c in timed)))
            finally:
                server.terminate()
                server.wait()
        browser.close()
    print(f"| measure (median of {repeats}) | seconds | browser CPU (s) |\n|---|---:|---:|")
    for what, seconds, cpu in rows:
        print(f"| {what} | {seconds:.3f} | {'' if cpu is None else f'{cpu:.2f}'} |")


if __name__ == "__main__":
    main()
