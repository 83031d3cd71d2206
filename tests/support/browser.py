"""The board served by start.sh on a free port, a headless Chromium, and what a test reads of a drawn page."""

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from tests.support import PROJECT

CHROMIUM = "/usr/bin/chromium"


# The chosen step-curve view and the three batch charts (Vega-Lite), and the token area's open view (the table) are drawn.
CHARTS_DRAWN = (
    "document.querySelectorAll('.vega-embed .marks').length >= 4"
    " && document.querySelector('.st-key-token_view_shown [data-testid=\"stDataFrame\"] canvas')"
)


# The Vega view of a chart element (`chart`), as `view` (null when none): a chart is drawn on canvas, so its marks and
# legend are in Vega's scene graph, not the DOM. Streamlit keeps the view in a React hook of the chart's component,
# found from the element's React fiber, upwards. JavaScript to put at the start of a function that has `chart`.
VEGA_VIEW = """
  const isView = v => v && typeof v === 'object' && typeof v.scenegraph === 'function' && typeof v.runAsync === 'function';
  const seen = new Set();
  const search = (value, depth) => {
    if (!value || typeof value !== 'object' || seen.has(value) || depth > 4) return null;
    seen.add(value);
    if (isView(value)) return value;
    for (const key of Object.keys(value)) {
      let found = null;
      try { found = search(value[key], depth + 1); } catch (error) {}
      if (found) return found;
    }
    return null;
  };
  let view = null;
  let fiber = chart[Object.keys(chart).find(key => key.startsWith('__reactFiber'))];
  for (; fiber && !view; fiber = fiber.return)
    for (let hook = fiber.memoizedState; hook && typeof hook === 'object' && !view; hook = hook.next) view = search(hook.memoizedState, 0);
"""

# The title a chart element's Vega view drew (on canvas, not in the DOM), its lines joined; null while none is drawn.
CHART_TITLE = """chart => {
  if (!chart) return null;
""" + VEGA_VIEW + """  if (!view) return null;
  const texts = [];
  const walk = node => {
    for (const item of node.items || []) {
      if (node.role === 'title-text') texts.push([].concat(item.text).join(' '));
      walk(item);
    }
  };
  walk(view.scenegraph().root);
  return texts.join(' ');
}"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# Whether a Streamlit server answers at `url` within a minute.
def serves(url: str) -> bool:
    for _ in range(120):
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).read() == b"ok":
                return True
        except OSError:
            time.sleep(0.5)
    return False


# The board served by start.sh on a free port, from any working directory, with this Python: its URL until the test
# module is done. The index cache is in the root, or in `cache` (a root on S3).
def served_board(root, cache: Path | None = None):
    port = free_port()
    env = dict(os.environ, RL_LOGGING_BOARD_CACHE=str(cache or Path(root) / ".cache"), RL_LOGGING_BOARD_PYTHON=sys.executable)
    server = subprocess.Popen(["bash", str(PROJECT / "start.sh"), str(port), str(root)], env=env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    if not serves(url):
        server.kill()
        pytest.fail("start.sh did not serve the board: " + server.stdout.read().decode(errors="replace")[-2000:])
    try:
        yield url
    finally:  # also when the generator is closed (a script's board.close()), not only run to its end as a fixture
        server.terminate()
        server.wait(timeout=60)


@pytest.fixture(scope="module")
def browser():
    assert Path(CHROMIUM).exists(), "install Chromium: apt-get install -y chromium (tests/run.sh does)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield browser
        browser.close()
