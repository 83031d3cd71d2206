"""Names from a hostile run in a real headless Chromium: metric keys, reward-function names, field keys, facet values
and group ids that hold Markdown, HTML, KaTeX, a Vega expression's quotes and line breaks. Every tab's chart draws, the
page makes no element from them (image, link, heading, maths), fetches nothing beyond the server, and shows each name
as written."""

import json
import re

import pytest

from tests.support import ARTIFACTS
from tests.support.browser import VEGA_VIEW, browser, served_board  # noqa: F401  (browser: a fixture)
from tests.support.runs import sample

# Each a name that did harm somewhere: an image and a bare URL fetched or linked from a tab label, a javascript link,
# Streamlit's colour, bold and KaTeX, a line break that stopped a Vega chart or made a caption a heading, the
# characters that end a string or a block of an expression, and Streamlit's icon shortcodes (a check mark, its logo).
HOSTILE_NAMES = [
    "![x](http://127.0.0.2:9/a.png)",
    "http://127.0.0.2:9/bare",
    "[x](javascript:alert(1))",
    ":red[red] **bold** $x^2$",
    "x\n===",
    'quote" back\\slash }brace{ \'single',
    "- 1. <h1>h</h1>\ttab\x07bell\u202eevil",
    ":material/verified: :streamlit: a -> b >= c",  # Streamlit's icons and arrows, which it makes after the escapes are read
]
# Each name as the page shows it: line breaks, tabs and other control characters as their escapes.
SHOWN = {name: name.replace("\n", "\\n").replace("\t", "\\t").replace("\x07", "\\u0007").replace("\u202e", "\\u202e") for name in HOSTILE_NAMES}
STEPS = 3


@pytest.fixture(scope="module")
def board_url(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    run = root / "hostile_names"
    run.mkdir()
    with open(run / "rollout_data_rank_0.jsonl", "w") as file:
        for step in range(STEPS):
            for index in range(4):
                rewards = {name: float((step + index + position) % 3) for position, name in enumerate(HOSTILE_NAMES[:3])}
                fields = {name: step * 10 + index for name in HOSTILE_NAMES[3:5]} | {"source": HOSTILE_NAMES[index % 2]}
                line = sample(step, reward=float(index), response=f"answer {index}", group_id=HOSTILE_NAMES[index // 2], rewards_per_func=rewards, **fields)
                file.write(json.dumps(line) + "\n")
    (run / "rollout_meta_hostile.json").write_text(json.dumps({"model_name": "m", "reward_funcs": HOSTILE_NAMES[4:], "reward_weights": [1.0] * len(HOSTILE_NAMES[4:])}))
    with open(run / "rollout_metrics_hostile.jsonl", "w") as file:
        for step in range(STEPS):
            file.write(json.dumps({"step": step, "kind": "train", **{name: step + position for position, name in enumerate(HOSTILE_NAMES)}}) + "\n")
        file.write(json.dumps({"step": STEPS - 1, "kind": "eval", **{f"eval_{name}": 1.5 for name in HOSTILE_NAMES[:2]}}) + "\n")
    yield from served_board(root)


# The plot height, the points of each line a chart drew and the series they draw, from the Vega view in the chart
# element's React fiber (the chart is on canvas: VEGA_VIEW finds its view).
CHART_DRAWN = """chart => {
  if (!chart) return null;
""" + VEGA_VIEW + """  if (!view) return null;
  const lines = [], series = [];
  const walk = node => {
    const items = node.items || [];
    const drawn = items.filter(item => item.defined !== false && Number.isFinite(item.y)).length;
    if (node.marktype === 'line' && node.role === 'mark' && drawn) {
      lines.push(drawn);
      series.push(...items.filter(item => item.datum && item.datum.series !== undefined).map(item => item.datum.series));
    }
    for (const item of items) for (const child of item.items || []) walk(child);
  };
  walk(view.scenegraph().root);
  return {height: view.height(), lines, series: [...new Set(series)]};
}"""


# Elements only Markdown, HTML or KaTeX made from the data: none may exist in the app.
MADE_FROM_DATA = "[data-testid='stApp'] :is(img, .katex, a[href*='127.0.0.2'], a[href^='javascript'])"
# The page's own headings: its title, the areas' subheaders and the reward gap (a number).
PAGE_HEADING = re.compile(r"(📖 RL Logging Board|📈 Training metrics|🔎 Find samples|⚡️ Each Step Response|-?\d+\.\d+|—)")


def test_every_hostile_name_shows_as_written_and_every_metric_chart_draws(browser, board_url):  # noqa: F811
    context = browser.new_context(viewport={"width": 1600, "height": 2400})
    page = context.new_page()
    requests, errors = [], []
    page.on("request", lambda request: requests.append(request.url))
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.goto(board_url)
    page.get_by_role("button", name="Load & View").wait_for(timeout=60_000)  # the first screen shows the chosen run
    page.get_by_text("📈 Training metrics").wait_for(timeout=60_000)

    # The reward caption reads as written: no heading, one line per name.
    caption = page.locator('[data-testid="stCaptionContainer"]').filter(has_text="Reward = ")
    assert caption.inner_text().replace("\u200b", "") == "Reward = " + " + ".join(f"1 × {SHOWN[name]}" for name in HOSTILE_NAMES[4:])

    # Every metric chosen: a tab each, labelled as written; each tab's chart draws.
    choose = page.get_by_role("combobox", name="Training metrics")
    for name in HOSTILE_NAMES[2:]:  # the first two are chosen at first
        choose.click()
        page.get_by_role("option", name=SHOWN[name], exact=True).click()
        page.keyboard.press("Escape")
        page.wait_for_timeout(800)
    metric_views = page.locator(".st-key-metric_view")
    labels = [label.strip().replace("\u200b", "") for label in metric_views.get_by_role("radio").all_inner_texts()]  # autolinks broken by a zero-width space
    assert labels == [SHOWN[name] for name in HOSTILE_NAMES]
    panel = page.locator(".st-key-metric_view_shown")
    for name in HOSTILE_NAMES:
        metric_views.get_by_role("radio", name=SHOWN[name], exact=True).click()
        chart_of = f"() => ({CHART_DRAWN})(document.querySelector('.st-key-metric_view_shown .vega-embed'))"
        page.wait_for_function(f"name => {{ const drawn = ({chart_of})(); return drawn !== null && drawn.series.includes(name); }}", arg=name, timeout=30_000)
        drawn = panel.locator(".vega-embed").first.evaluate(CHART_DRAWN)  # the one waited for: the last chart may still be there
        assert drawn["height"] >= 50 and drawn["lines"] == [STEPS] + ([1] if name in HOSTILE_NAMES[:2] else []), (name, drawn)  # train, and eval
        assert panel.locator('[data-testid="stException"], .vega-embed .error').count() == 0, name
    # The Step-Fields and Step-Facets curves and the group facts use the same names.
    page.get_by_role("radio", name="Step-Fields").click()
    page.locator(".st-key-curve_view_shown .vega-embed canvas").first.wait_for(timeout=30_000)
    page.get_by_role("radio", name="Step-Facets").click()
    for field in HOSTILE_NAMES[3:5]:  # a field named with quotes and a line break: the chart's axis title
        page.get_by_label("Series", exact=True).click()
        page.get_by_role("option", name="extra/" + SHOWN[field], exact=True).click()
        page.wait_for_timeout(1500)
        chart = page.locator(".st-key-curve_view_shown .vega-embed").first
        chart.locator("canvas").wait_for(timeout=30_000)
        drawn = chart.evaluate(CHART_DRAWN)
        assert drawn["height"] >= 50 and sorted(drawn["lines"]) == [STEPS, STEPS], (field, drawn)  # a line per source

    assert page.locator(MADE_FROM_DATA).count() == 0, page.locator(MADE_FROM_DATA).evaluate_all("nodes => nodes.map(node => node.outerHTML)")
    headings = page.locator("[data-testid='stApp'] :is(h1, h2, h3, h4, h5, h6)").all_inner_texts()
    assert [heading for heading in headings if not PAGE_HEADING.fullmatch(heading.strip())] == []
    assert page.locator('[data-testid="stException"]').count() == 0
    assert [error for error in errors if "Expression" in error or "parse" in error.lower()] == []
    assert [url for url in requests if not url.startswith(board_url)] == []
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "hostile_names.png"), full_page=True)
    context.close()
