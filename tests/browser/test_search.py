"""Finding samples (issue 17) in a real headless Chromium served by start.sh: a search over every step finds exactly the
lines holding a phrase (CJK text and different case included), shows hostile text as text, sends nothing anywhere,
moves the step and sample view to a clicked result, downloads the results as the source lines byte for byte (JSONL)
and as a table (CSV), and says so under the box when a regular expression is not valid.

Screenshots of each stage go to /tmp/search_shots/ (RL_LOGGING_BOARD_SHOTS overrides it)."""

import contextlib
import io
import json
import os
from pathlib import Path

import pandas as pd
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.support.browser import VEGA_VIEW, browser, served_board  # noqa: F401 (browser: a fixture)
from tests.support.runs import sample, write_lines

SHOTS = Path(os.environ.get("RL_LOGGING_BOARD_SHOTS", "/tmp/search_shots"))
STEPS, SAMPLES, RANKS = 4, 8, 2  # rank r holds samples 4r .. 4r+3 of each step, so its file line is known
NEEDLE = "violet harbour lantern"
HOSTILE = '<img src=x onerror="window.__pwned=1">' + NEEDLE + "<script>window.__pwned=2</script>[click](http://example.com)"
CJK = "模型在第三步给出的回答比较长，这里先写一段中文说明，然后才出现" + NEEDLE.upper() + "，之后还有一句中文结尾。"
# The responses holding the phrase, by (step, sample index in the step's batch): three plain ones and the hostile one.
NEEDLES = {
    (1, 1): "The Violet Harbour Lantern glows — at the first step.",
    (2, 5): HOSTILE,
    (3, 6): CJK,
    (4, 2): "a line that ends with the phrase: violet harbour lantern",
}
RAW_UTF8 = {(3, 6)}  # lines written with their text as UTF-8 bytes; the others as json.dumps writes them (\u escapes)
BAR_COLOUR = (0x5F, 0xA8, 0xD3)  # of the chart of samples found per step (board.STEP_PALETTE[1])
# The results' order on the page: sort by step, highest first (the default).
RESULTS = sorted(NEEDLES, reverse=True)

# The run has been drawn: the script is done.
SETTLED = "document.querySelector('[data-testid=\"stApp\"]').dataset.testScriptState === 'notRunning'"

# The search's results grid as Streamlit exposes it: the header names and each row's cell texts of its accessible table
# (the grid itself is drawn on a canvas); null before it is drawn.
RESULTS_TABLE = """() => {
  const table = document.querySelector('[class*="st-key-search_results-"] table');
  if (!table) return null;
  return {header: [...table.querySelectorAll('th')].map(cell => cell.textContent),
          rows: [...table.querySelectorAll('tbody tr')].map(row => [...row.querySelectorAll('td')].map(cell => cell.textContent))};
}"""

# The chart canvases drawn between the search's heading and the step area's heading.
SEARCH_CHARTS = """(() => {
  const headings = [...document.querySelectorAll('h3')];
  const top = headings.find(h => h.textContent.includes('Find samples')), bottom = headings.find(h => h.textContent.includes('Each Step Response'));
  if (!top || !bottom) return [];
  const y0 = top.getBoundingClientRect().bottom, y1 = bottom.getBoundingClientRect().top;
  return [...document.querySelectorAll('.vega-embed canvas.marks')].filter(chart => { const y = chart.getBoundingClientRect().top; return y > y0 && y < y1; });
})()"""

# The samples pair's response column as the page shows it: its label line and its text; null before it is drawn.
RESPONSE_COLUMN = """() => {
  const label = [...document.querySelectorAll('[data-testid="stMarkdownContainer"] p')].find(p => p.textContent.trim().startsWith('Response · '));
  const column = label && label.closest('[data-testid="stColumn"]');
  if (!column) return null;
  return {label: label.textContent.trim(), text: [...column.querySelectorAll('[data-testid="stText"]')].map(text => text.innerText).join('\\n')};
}"""


# The line a sample of this run is on: its rank file and its number there (1-based).
def place_of(step: int, index: int) -> tuple[str, int]:
    per_rank = SAMPLES // RANKS
    return f"rollout_data_rank_{index // per_rank}.jsonl", (step - 1) * per_rank + index % per_rank + 1


# A sample's line as its rank file holds it: the search must find the phrase whether the text is escaped or not.
def line_of(step: int, index: int) -> bytes:
    record = sample(step, reward=round(step + 0.1 * index, 3), prompt=f"question {step}.{index}", response=NEEDLES.get((step, index), f"answer {step}.{index}"))
    return json.dumps(record, ensure_ascii=(step, index) not in RAW_UTF8).encode() + b"\n"


# The run the page opens, the only one of the root.
@pytest.fixture(scope="module")
def run_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    files = {}
    for step in range(1, STEPS + 1):
        for index in range(SAMPLES):
            files.setdefault(place_of(step, index)[0], []).append(line_of(step, index))
    for name, lines in files.items():
        write_lines(root / "needles" / name, lines)
    return root


@pytest.fixture(scope="module")
def board_url(run_root):
    yield from served_board(run_root)


# A line's bytes as written, read back from its file (the JSONL download must hold exactly these).
def source_line(run_root: Path, step: int, index: int) -> bytes:
    name, number = place_of(step, index)
    return (run_root / "needles" / name).read_bytes().split(b"\n")[number - 1]


# A new browser context (nothing shared with another test) and a page with the run loaded and drawn, recording every
# request it makes.
@pytest.fixture
def page(browser, board_url):
    context = browser.new_context(viewport={"width": 1600, "height": 3000}, accept_downloads=True)
    page = context.new_page()
    page.requests = []
    page.on("request", lambda request: page.requests.append(request.url))
    page.goto(board_url)
    page.get_by_role("button", name="Load & View").wait_for(timeout=60_000)  # the first screen shows the chosen run
    page.wait_for_function(f"() => ({SETTLED}) && document.body.innerText.includes('Step Index({STEPS} total steps)')", timeout=60_000)
    search_box(page).wait_for(timeout=30_000)
    yield page
    context.close()


# The search box (its label also names the help button beside it).
def search_box(page):
    return page.get_by_role("textbox", name="Search prompt and response text")


# The page once the phrase was searched for and the results are drawn: their grid's accessible table.
def search_needle(page) -> dict:
    box = search_box(page)
    box.fill(NEEDLE)
    box.press("Enter")
    page.wait_for_function(f"() => {{ const table = ({RESULTS_TABLE})(); return ({SETTLED}) && table && table.rows.length > 0; }}", timeout=60_000)
    return page.evaluate(f"({RESULTS_TABLE})()")


# The whole page, to look at: is the search area laid out sensibly at this stage?
def shot(page, name: str):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / name), full_page=True)


# The part of the page from the top of one element to the top (or bottom) of another, across the page's width.
def shot_between(page, name: str, top, bottom, below: bool = False):
    first, last = top.bounding_box(), bottom.bounding_box()
    end = last["y"] + (last["height"] if below else 0)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / name), full_page=True, clip={"x": 0, "y": first["y"] - 10, "width": 1600, "height": end - first["y"] + 20})


# The search area alone, from its heading to the step area's heading below it.
def shot_section(page, name: str):
    shot_between(page, name, page.get_by_role("heading", name="🔎 Find samples"), page.get_by_role("heading", name="⚡️ Each Step Response"))


# Exactly the four lines holding the phrase are found (any case, CJK text, escaped or raw), each with its match marked
# in a snippet of plain text; the hostile line's HTML and link stay text: nothing runs, nothing is fetched.
def test_the_search_finds_exactly_the_needle_lines_and_shows_hostile_text_as_text(page, board_url):
    table = search_needle(page)
    assert page.get_by_text(f"4 of {STEPS * SAMPLES} loaded samples found, at 4 of {STEPS} steps").is_visible()
    header = table["header"]
    assert header[:3] == ["step", "sample", "reward"] and {"found in", "match", "file", "line"} <= set(header), header
    found = [(int(row[header.index("step")]), int(row[header.index("sample")])) for row in table["rows"]]
    assert found == RESULTS
    assert [(row[header.index("file")], int(row[header.index("line")])) for row in table["rows"]] == [place_of(*key) for key in RESULTS]
    assert {row[header.index("found in")] for row in table["rows"]} == {"response"}
    snippets = dict(zip(found, (row[header.index("match")] for row in table["rows"])))
    assert snippets[(1, 1)] == "The ⟦Violet Harbour Lantern⟧ glows — at the first step."  # the text as written, whatever the case
    assert snippets[(4, 2)] == "a line that ends with the phrase: ⟦violet harbour lantern⟧"
    assert snippets[(3, 6)].startswith("…") and f"⟦{NEEDLE.upper()}⟧，之后还有一句中文结尾。" in snippets[(3, 6)]  # cut 60 bytes before, on a character
    assert snippets[(2, 5)] == HOSTILE.replace(NEEDLE, f"⟦{NEEDLE}⟧")  # the hostile HTML and link, literal
    assert page.locator('[data-testid="stException"]').count() == 0
    # Nothing of the hostile line ran, was parsed as HTML, or was fetched.
    assert page.evaluate("window.__pwned") is None
    assert page.locator("img[src=x]").count() == 0 and page.locator('a[href*="example.com"]').count() == 0
    assert page.evaluate("() => [...document.scripts].filter(script => script.textContent.includes('__pwned')).length") == 0
    outside = [url for url in page.requests if not url.startswith((board_url, "data:", "blob:"))]
    assert outside == [] and board_url + "/x" not in page.requests, outside
    shot(page, "search_results.png")
    shot_section(page, "search_results_section.png")
    page.locator('[class*="st-key-search_results-"]').screenshot(path=str(SHOTS / "search_results_table.png"))


# The matches-per-step chart is drawn in the search area, above the results.
def test_the_chart_of_samples_found_per_step_is_drawn_in_the_search_area(page):
    search_needle(page)
    page.wait_for_function(f"() => ({SEARCH_CHARTS}).length === 1", timeout=30_000)
    [chart] = page.evaluate(f"() => ({SEARCH_CHARTS}).map(canvas => canvas.getBoundingClientRect().height)")
    assert chart >= 100


# The chart's bars are drawn: Streamlit counts the title and both axes in a chart's height, and at 110 px the plot
# itself got none (no bar, no y-axis ticks, no x-axis title).
def test_the_chart_of_samples_found_per_step_shows_its_bars(page):
    search_needle(page)
    page.wait_for_function(f"() => ({SEARCH_CHARTS}).length === 1", timeout=30_000)
    page.wait_for_timeout(1000)  # drawn
    bars = page.evaluate(f"""() => {{
      const canvas = ({SEARCH_CHARTS})[0], pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
      let count = 0;
      for (let i = 0; i < pixels.length; i += 4)
        if (Math.abs(pixels[i] - {BAR_COLOUR[0]}) < 20 && Math.abs(pixels[i + 1] - {BAR_COLOUR[1]}) < 20 && Math.abs(pixels[i + 2] - {BAR_COLOUR[2]}) < 20) count++;
      return count;
    }}""")
    assert bars >= 4 * 100, bars  # four bars, each some pixels wide and tall


# The labels on a Vega view's bottom axis, with the steps put into its data first (when given).
STEP_AXIS_LABELS = """async ([chart, steps]) => {
""" + VEGA_VIEW + """  if (steps) {
    const source = Object.keys(view._runtime.data).find(name => (view.data(name) || []).some(row => 'samples' in row));
    view.data(source, steps.map(step => ({step, samples: step % 3})));
    await view.runAsync();
  }
  const labels = [];
  const walk = (node, orient) => {
    for (const item of node.items || []) {
      const side = item.mark && item.mark.role === 'axis' ? item.orient : orient;
      if (side === 'bottom' && item.mark.role === 'axis-label') labels.push(item.opacity === 0 ? '' : item.text);  // 0: hidden by the overlap rule
      for (const child of item.items || []) walk(child, side);
    }
  };
  walk(view.scenegraph().root, null);
  return labels;
}"""


# Which steps the chart labels is worked out in its Vega view from its data (not written into the spec, which would
# then change with every step a run adds): every step of this run's 4; of more, the first step and the first of each
# round stretch of steps (1, 2 or 5 × 10^k), about 12 labels.
def test_the_chart_of_samples_found_per_step_labels_round_steps(page):
    search_needle(page)
    page.wait_for_function(f"() => ({SEARCH_CHARTS}).length === 1", timeout=30_000)
    page.wait_for_timeout(1000)  # drawn
    chart = f"({SEARCH_CHARTS})[0].closest('.vega-embed')"
    assert page.evaluate(f"() => ({STEP_AXIS_LABELS})([{chart}, null])") == [str(step) for step in range(1, STEPS + 1)]

    def labelled(steps: list[int]) -> list[int]:
        labels = page.evaluate(f"steps => ({STEP_AXIS_LABELS})([{chart}, steps])", steps)
        assert len(labels) == len(steps)
        return [int(label.replace(",", "")) for label in labels if label]

    assert labelled(list(range(101, 131))) == [101, 105, 110, 115, 120, 125, 130]  # 29 steps: every 5
    assert labelled(list(range(1, 101))) == [1, *range(10, 101, 10)]
    assert labelled(list(range(99, 199))) == [99, *range(110, 191, 10)]  # 100, beside 99, hidden alone
    assert labelled(list(range(0, 2001, 10))) == list(range(0, 2001, 200))  # logged every 10 steps
    assert labelled(list(range(1, 20_001, 80))) == [1, *range(2001, 20_001, 2000)]  # stretches of 80 steps, at their first
    assert labelled([7, 3000]) == [7, 3000]


# Clicking a result's selection box (rows are 35 px, the header is row 0) and waiting until the sample view shows it.
def click_result(page, row: int, shown: str):
    grid = page.locator('[class*="st-key-search_results-"] [data-testid="stDataFrame"]')
    grid.scroll_into_view_if_needed()
    box = grid.bounding_box()
    page.mouse.click(box["x"] + 18, box["y"] + 35 * (row + 1) + 17)
    page.wait_for_function(f"() => ({SETTLED}) && ({RESPONSE_COLUMN})()?.text.includes({json.dumps(shown)})", timeout=60_000)


# The batch table's prompts, once its accessible table is drawn (after its canvas) and, given the step expected in
# view, holds that step's prompts: the grid is refilled for another step, and its accessible table follows its canvas
# a moment later. Which step's batch is in view.
def batch_prompts(page, step: int | None = None) -> list[str]:
    rows = "[...document.querySelectorAll('.st-key-batch_table tbody tr')]"
    first = "true" if step is None else f"{rows}[0].querySelectorAll('td')[2].textContent === {json.dumps(f'question {step}.0')}"
    with contextlib.suppress(PlaywrightTimeout):  # the assertion on what it returns says what is wrong
        page.wait_for_function(f"() => {rows}.length === {SAMPLES} && {first}", timeout=30_000)
    return page.evaluate(f"() => {rows}.map(row => row.querySelectorAll('td')[2].textContent)")


# The step selector (a slider: the run's steps are evenly spaced); its value is the step it shows.
def step_slider(page):
    return page.get_by_label(f"Step Index({STEPS} total steps)").get_by_role("slider")


# A click on a result at another step shows that step's batch and the sample's response below (the browser test).
def test_clicking_a_result_shows_that_sample_in_the_step_view(page):
    search_needle(page)
    assert step_slider(page).input_value() == "1" and batch_prompts(page)[0] == "question 1.0"  # the first step is in view
    step, index = RESULTS[1]  # the CJK line, at step 3
    click_result(page, 1, "之后还有一句中文结尾")
    assert batch_prompts(page, step) == [f"question {step}.{sample}" for sample in range(SAMPLES)]
    assert page.get_by_label("Sample index in current step batch").input_value() == str(index)
    column = page.evaluate(f"({RESPONSE_COLUMN})()")
    assert column["text"] == CJK and column["label"] == f"Response · reward {step + 0.1 * index:.4g}"
    assert page.locator('[data-testid="stException"]').count() == 0
    shot(page, "search_result_clicked.png")
    shot_between(page, "search_result_clicked_step_view.png", page.get_by_role("heading", name="⚡️ Each Step Response"), page.get_by_text("This prompt over training"), below=True)
    # Another result, at the last step, and the view follows again.
    click_result(page, 0, "a line that ends with the phrase")
    assert batch_prompts(page, 4)[0] == "question 4.0" and page.get_by_label("Sample index in current step batch").input_value() == "2"


# The slider moves with the view and stays there: Streamlit 1.67 keys a slider's identity on its key, min, max and
# step only, so a slider whose session-state key was dropped kept the browser's value, still showing step 1, and the
# next full rerun (any sidebar widget) sent 1 back and the view jumped to step 1.
def test_clicking_a_result_moves_the_step_selector_and_the_view_stays_there(page):
    search_needle(page)
    click_result(page, 1, "之后还有一句中文结尾")
    page.get_by_text("Use LogP as KL", exact=True).click()  # a full rerun of the page
    page.wait_for_timeout(1500)
    page.wait_for_function(SETTLED, timeout=60_000)
    assert batch_prompts(page, 3)[0] == "question 3.0"
    assert step_slider(page).input_value() == "3"


# Opening an earlier step from a result announces no new steps: the steps after it were there when it was chosen
# (the notice is for steps that arrive later, in live mode).
def test_clicking_a_result_announces_no_new_steps(page):
    search_needle(page)
    click_result(page, 1, "之后还有一句中文结尾")
    assert page.get_by_text("new step(s) since you chose step").count() == 0


# The downloads are made from the results in the page's order: JSONL holds the source lines byte for byte, CSV the table.
def test_the_results_download_as_the_source_lines_and_as_a_table(page, run_root):
    search_needle(page)
    with page.expect_download() as download:
        page.get_by_role("button", name="Results (JSONL)").click()
    assert Path(download.value.path()).read_bytes() == b"\n".join(source_line(run_root, *key) for key in RESULTS) + b"\n"
    with page.expect_download() as download:
        page.get_by_role("button", name="Results (CSV)").click()
    table = pd.read_csv(io.BytesIO(Path(download.value.path()).read_bytes()))
    assert len(table) == 4
    assert list(zip(table["step"], table["sample"])) == RESULTS
    assert list(zip(table["file"], table["line"])) == [place_of(*key) for key in RESULTS]
    assert table["response"].tolist() == [json.loads(source_line(run_root, *key))["response"] for key in RESULTS]
    assert table["prompt"].tolist() == [f"question {step}.{index}" for step, index in RESULTS]


# RE2 has no look-behind: the pattern is refused with its reason under the box, and no results are drawn.
def test_an_invalid_regular_expression_is_reported_under_the_box(page):
    page.get_by_text("Regular expression", exact=True).click()
    page.wait_for_function(SETTLED)
    box = search_box(page)
    box.fill("(?<=x)a")
    box.press("Enter")
    error = page.locator('[data-testid="stAlert"]').filter(has_text="Not a valid regular expression")
    error.wait_for(timeout=30_000)
    assert error.bounding_box()["y"] > box.bounding_box()["y"]  # under the box
    assert page.locator('[class*="st-key-search_results-"]').count() == 0
    shot_section(page, "search_invalid_regex.png")
