"""What changed between A and B in a real headless Chromium served by start.sh: opened, it counts the prompts of the
run's two halves as the raw lines say; a click on a regressed prompt shows its responses on A and B side by side with
the differing words marked, and the rollout's hostile text as text (no element, no script, no link made of it).

Screenshots go to /tmp/changes_shots/ (RL_LOGGING_BOARD_SHOTS overrides it)."""

import os
from pathlib import Path

import pandas as pd
import pytest

from tests.page.test_changes import REWARDS, agent_lines, expected_counts
from tests.support.browser import browser, served_board  # noqa: F401 (browser: a fixture)
from tests.support.runs import write_lines

SHOTS = Path(os.environ.get("RL_LOGGING_BOARD_SHOTS", "/tmp/changes_shots"))
SETTLED = "document.querySelector('[data-testid=\"stApp\"]').dataset.testScriptState === 'notRunning'"
REGION = "What changed between A and B"

# The region's state as drawn: its metrics (label: value), the accessible table's rows, and the two response columns'
# marked words (red: removed, green: added) with their whole texts.
REGION_STATE = """() => {
  const region = [...document.querySelectorAll('[data-testid="stExpander"]')].find(e => e.innerText.includes('What changed between A and B'));
  if (!region) return null;
  const metrics = Object.fromEntries([...region.querySelectorAll('[data-testid="stMetric"]')].map(m =>
    [m.querySelector('[data-testid="stMetricLabel"]').innerText.trim(), m.querySelector('[data-testid="stMetricValue"]').innerText.trim()]));
  const rows = [...region.querySelectorAll('table tbody tr')].map(row => [...row.querySelectorAll('td')].map(cell => cell.textContent));
  const marked = [...region.querySelectorAll('.rl-word-diff span')].filter(span => getComputedStyle(span).backgroundColor !== 'rgba(0, 0, 0, 0)')
    .map(span => span.innerText);
  const responses = [...region.querySelectorAll('[data-testid="stColumn"] .rl-word-diff')].map(m => m.innerText).filter(text => text.includes('the answer to'));
  return {metrics, rows, marked, responses, scripts: region.querySelectorAll('script, img, a[href^="http://example"]').length};
}"""


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("changes") / "runs"
    write_lines(root / "agent" / "rollout_data_rank_0.jsonl", agent_lines(REWARDS))
    return root


@pytest.fixture(scope="module")
def board_url(root):
    yield from served_board(root)


def test_a_click_on_a_regressed_prompt_shows_its_word_diff(browser, board_url, root):
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.add_init_script("window.__pwned = 0")
    page.goto(board_url)
    page.wait_for_function(f"() => ({SETTLED}) && document.body.innerText.includes('Each Step Response')", timeout=120_000)
    page.get_by_text(REGION).click()
    page.wait_for_function(f"() => ({SETTLED}) && ({REGION_STATE})()?.rows.length > 0", timeout=60_000)
    state = page.evaluate(f"({REGION_STATE})()")
    lines = pd.read_json(root / "agent" / "rollout_data_rank_0.jsonl", lines=True)
    assert {name: int(value) for name, value in state["metrics"].items()} == expected_counts(lines[lines["step"] == 1], lines[lines["step"] == 2])
    first = state["rows"][0]
    assert first[:2] == ["add 2 and 3", "regressed"]  # the worst change first
    grid = page.locator('[data-testid="stExpander"]').filter(has_text=REGION).locator('[data-testid="stDataFrame"]')
    grid.scroll_into_view_if_needed()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "changes_table.png"))
    box = grid.bounding_box()
    page.mouse.click(box["x"] + 18, box["y"] + 35 + 17)  # the first row's selection box
    page.wait_for_function(f"() => ({SETTLED}) && ({REGION_STATE})()?.responses.length === 2", timeout=60_000)
    page.get_by_text("Words of A's response not in B's").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "changes_diff.png"))
    state = page.evaluate(f"({REGION_STATE})()")
    a_text, b_text = state["responses"]
    assert a_text.startswith("the answer to add 2 and 3 is 1") and b_text.startswith("the answer to add 2 and 3 is 0")
    # As text, every character.
    assert "<script>alert(1)</script> :red[x] ] [link](http://example.com)" in b_text
    assert "1" in state["marked"] and "0" in state["marked"]
    assert any("script" in text for text in state["marked"])  # B's added words, marked
    assert state["scripts"] == 0 and page.evaluate("window.__pwned") == 0
    page.close()
