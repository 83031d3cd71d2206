"""Comparing runs in a real headless Chromium, served by start.sh: the loaded run and the two runs picked in "Compare
with" each get their own line on the Step-Reward chart, read from the Vega view the browser drew (the chart is on
canvas: its marks and legend are in Vega's scene graph, not the DOM)."""

import pytest

from bench.generate_run import write_run
from tests.support import ARTIFACTS
from tests.support.browser import CHARTS_DRAWN, VEGA_VIEW, browser, served_board  # noqa: F401  (browser: a fixture)
from tests.support.runs import sample, write_lines

RUNS = ["alpha", "beta", "gamma"]  # gamma, the last, is the one Load & View opens ("facets" sorts before it)
FACET_VALUES = [f"a data source with a long name, number {k}" for k in range(10)]  # a 0/1 reward each
LOADED, PICKED = "gamma", ["alpha", "beta"]
STEPS = 6
REWARD_SERIES = ["reward", "ref_reward", "rewards/accuracy_reward", "rewards/format_reward"]  # a GRPO run's default

# The open Step-Reward chart's scene as Vega drew it: its legends' labels and symbol colours, each line mark's
# colour, dash and number of points drawn, and how far it reaches past the canvas (null until the chart is drawn). Streamlit keeps the chart's Vega view in a React
# hook of the chart's component: it is found from the chart element's React fiber, upwards.
STEP_REWARD_SCENE = """() => {
  const chosen = document.querySelector('.st-key-curve_view [role="radio"][aria-checked="true"]');
  const chart = chosen && chosen.innerText.trim() === (window.__curveView || 'Step-Reward') && document.querySelector('.st-key-curve_view_shown .vega-embed');
  if (!chart) return null;
""" + VEGA_VIEW + """  if (!view) return null;
  const scene = {labels: [], symbols: [], lines: []};
  const walk = node => {
    const items = node.items || [];
    if (node.role === 'legend-label') scene.labels.push(...items.map(item => item.text));
    if (node.role === 'legend-symbol') scene.symbols.push(...items.map(item => item.stroke || item.fill));
    const drawn = items.filter(item => item.defined !== false && Number.isFinite(item.y)).length;  // the faint raw line has none unsmoothed
    if (node.marktype === 'line' && node.role === 'mark' && drawn)
      scene.lines.push({stroke: items[0].stroke, dash: String(items[0].strokeDash || ''), points: drawn});
    for (const item of items) for (const child of item.items || []) walk(child);
  };
  walk(view.scenegraph().root);
  // How far its marks and legends reach past the canvas's right edge, and its left (positive: cut off).
  scene.overflow = view.origin()[0] + view.scenegraph().root.bounds.x2 - chart.querySelector('canvas').getBoundingClientRect().width;
  scene.left_overflow = -(view.origin()[0] + view.scenegraph().root.bounds.x1);
  return scene;
}"""


@pytest.fixture(scope="module")
def board_url(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for seed, name in enumerate(RUNS):
        write_run(root / name, steps=STEPS, samples=8, tokens=10, ranks=1, seed=seed, grpo=True, workers=1)
    write_lines(root / "facets" / "r.jsonl", [sample(step, reward=float(k % 2), source=FACET_VALUES[k]) for step in (1, 2, 3) for k in range(len(FACET_VALUES))])
    yield from served_board(root)


def wait_for_scene(page, condition: str) -> dict:
    """The Step-Reward scene once `condition` (JavaScript over `scene`) holds: the rerun has been drawn."""
    page.wait_for_function(f"() => {{ const scene = ({STEP_REWARD_SCENE})(); return scene !== null && ({condition}); }}", timeout=60_000)
    return page.evaluate(f"({STEP_REWARD_SCENE})()")


def test_runs_picked_in_compare_with_each_draw_a_line_on_step_reward(browser, board_url):  # noqa: F811
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    page = context.new_page()
    page.goto(board_url)
    page.get_by_role("button", name="Load & View").wait_for(timeout=60_000)  # the first screen shows the chosen run
    page.wait_for_function(CHARTS_DRAWN, timeout=60_000)
    alone = page.evaluate(f"({STEP_REWARD_SCENE})()")
    assert alone is not None, "no Vega view found from the Step-Reward chart's React fiber (Streamlit's internals changed?)"
    assert alone["labels"] == REWARD_SERIES and len(alone["lines"]) == len(REWARD_SERIES)  # one run: a line per series

    page.get_by_role("combobox", name="Compare with").click()
    assert page.get_by_role("option", name="gamma", exact=True).count() == 0  # the loaded run is not offered
    for name in PICKED:
        page.get_by_role("option", name=name, exact=True).click()
    page.keyboard.press("Escape")

    # Several series of several runs: a colour per run, a dash per series.
    scene = wait_for_scene(page, "['alpha', 'beta'].every(name => scene.labels.includes(name))")
    assert scene["labels"][:3] == [LOADED, *PICKED] and sorted(scene["labels"][3:]) == sorted(REWARD_SERIES)  # dashes: Vega's order
    assert len(scene["lines"]) == len(RUNS) * len(REWARD_SERIES)
    assert len({line["stroke"] for line in scene["lines"]}) == len(RUNS)
    assert len({line["dash"] for line in scene["lines"]}) == len(REWARD_SERIES)
    assert scene["overflow"] <= 0, scene["overflow"]
    page.set_viewport_size({"width": 1280, "height": 800})  # the runs' and the series' legends, one above the other, still fit
    page.wait_for_timeout(1000)
    assert page.evaluate(f"({STEP_REWARD_SCENE})()")["overflow"] <= 0
    page.set_viewport_size({"width": 1600, "height": 1000})
    page.wait_for_timeout(1000)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "compare_series.png"))

    # One series: a line per run, named by run; the series is the one dash (the spec stays that of several series).
    for series in REWARD_SERIES[1:]:
        page.get_by_role("button", name=f"Remove {series}", exact=True).click()
        wait_for_scene(page, f"!scene.labels.includes({series!r})")
    scene = page.evaluate(f"({STEP_REWARD_SCENE})()")
    assert scene["labels"] == [LOADED, *PICKED, REWARD_SERIES[0]]
    assert len({line["dash"] for line in scene["lines"]}) == 1
    assert len(scene["lines"]) == len(RUNS) and all(line["points"] == STEPS for line in scene["lines"])
    assert len({line["stroke"] for line in scene["lines"]}) == len(RUNS)
    assert set(scene["symbols"][: len(RUNS)]) == {line["stroke"] for line in scene["lines"]}  # the colour legend's are the lines'
    page.screenshot(path=str(ARTIFACTS / "compare.png"))
    context.close()


# Each Vega view on the page, marked: "kept" where it was marked before, "new" where the browser built it since.
VIEWS_KEPT = "() => [...document.querySelectorAll('.vega-embed')].map(chart => {" + VEGA_VIEW + """  if (!view) return null;
  const kept = view.__marked === true;
  view.__marked = true;
  return kept ? 'kept' : 'new';
})"""
SETTLED = "document.querySelector('[data-testid=\"stApp\"]').dataset.testScriptState === 'notRunning'"


# A run added to Compare with must not move the page below it: there the browser updates each chart's data in the
# Vega view it has, where an element moved to another place is built anew (every chart of the page, several times the
# work). From the second compared run on, every chart keeps its view; so it does when a reward series is removed.
def test_a_run_added_or_a_series_removed_keeps_every_chart_s_view(browser, board_url):  # noqa: F811
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    page = context.new_page()
    page.goto(board_url)
    page.wait_for_function(CHARTS_DRAWN, timeout=60_000)
    for position, name in enumerate(PICKED):
        page.get_by_role("combobox", name="Compare with").click()
        page.get_by_role("option", name=name, exact=True).click()
        page.keyboard.press("Escape")
        wait_for_scene(page, f"scene.labels.includes({name!r})")
        page.wait_for_timeout(500)
        page.wait_for_function(SETTLED, timeout=60_000)
        views = page.evaluate(VIEWS_KEPT)
        if position > 0:  # the first compared run turns the Step-Reward chart's series into a dash each: a new spec
            assert len(views) >= 4 and views == ["kept"] * len(views), views
    page.get_by_role("button", name=f"Remove {REWARD_SERIES[1]}", exact=True).click()
    wait_for_scene(page, f"!scene.labels.includes({REWARD_SERIES[1]!r})")
    page.wait_for_timeout(500)
    page.wait_for_function(SETTLED, timeout=60_000)
    assert page.evaluate(VIEWS_KEPT) == ["kept"] * len(views)
    assert page.locator('[data-testid="stException"]').count() == 0
    context.close()


# Ten facet values, their names long: the legend wraps in rows within the chart at 1280 and 1600 (in one row it ran past
# both edges), and no line sits on the frame (a 0/1 reward's lines at the domain's ends).
def test_a_legend_of_many_facet_values_fits_its_chart(browser, board_url):  # noqa: F811
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.add_init_script("window.__curveView = 'Step-Facets'")
    page.goto(board_url)
    page.get_by_role("button", name="Load & View").wait_for(timeout=60_000)
    page.get_by_role("combobox", name="Choose Log Name").click()
    page.get_by_role("option", name="facets", exact=True).click()
    page.get_by_role("button", name="Load & View").click()
    page.get_by_text("Step-Facets", exact=True).click()
    scene = wait_for_scene(page, f"scene.labels.length >= {len(FACET_VALUES)}")
    assert [label for label in scene["labels"] if label.startswith("source = ")] == [f"source = {value}" for value in sorted(FACET_VALUES)]
    for width, height in ((1280, 800), (1600, 1000)):
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(1000)
        scene = page.evaluate(f"({STEP_REWARD_SCENE})()")
        assert scene["overflow"] <= 0 and scene["left_overflow"] <= 0, (width, scene["overflow"], scene["left_overflow"])
    page.close()


# The step's batch charts, a third of the page each: how far each one's legends reach past its canvas, right and left
# (positive: cut off), in the page's order; null for one not drawn yet.
BATCH_CHARTS_OVERFLOW = """() => [...document.querySelectorAll('.vega-embed')].filter(chart => !chart.closest('.st-key-curve_view_shown')).map(chart => {
""" + VEGA_VIEW + """  if (!view) return null;
  const width = chart.querySelector('canvas').getBoundingClientRect().width, x = view.origin()[0];
  let right = -Infinity, left = -Infinity;
  const walk = node => {
    for (const item of node.items || []) {
      if (node.role === 'legend' && item.bounds) { right = Math.max(right, x + item.bounds.x2 - width); left = Math.max(left, -(x + item.bounds.x1)); }
      walk(item);
    }
  };
  walk(view.scenegraph().root);
  return [right, left];
})"""


# The reward gap's colour legend and the reward distribution's two columns of series fit their charts at 1280 and 1600
# (at 1280 the gradient's end label and the second column were cut at the chart's right edge).
def test_the_batch_charts_legends_fit_their_charts(browser, board_url):  # noqa: F811
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(board_url)
    page.get_by_role("button", name="Load & View").wait_for(timeout=60_000)
    page.wait_for_function(CHARTS_DRAWN, timeout=60_000)
    for width, height in ((1280, 800), (1600, 1000)):
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(1000)
        overflow = page.evaluate(BATCH_CHARTS_OVERFLOW)
        assert len(overflow) == 3 and None not in overflow, overflow  # reward, reward gap, distribution
        assert all(right <= 0 and left <= 0 for right, left in overflow), (width, overflow)
    page.close()
