"""The board in a real headless Chromium, served by start.sh: charts draw, model output stays text, nothing leaves the machine."""

import json
import re

import pytest
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from bench.generate_run import write_run
from tests.support import ARTIFACTS
from tests.support.browser import (
    CHART_TITLE,
    CHARTS_DRAWN,
    browser,  # noqa: F401  (fixtures)
    served_board,
)
from tests.support.runs import sample

PAYLOADS = [
    "<script>window.__pwned = 'script'</script>",
    '<iframe srcdoc="<script>parent.__pwned = \'iframe\'</script>"></iframe>',
    '<img src=x onerror="window.__pwned = \'img\'">',
    "<style>body { display: none }</style>",
    "**not bold** $x^2$ [link](http://example.com)",
]
# A group id, a reward-function name and a model name as written by a hostile run (shown in captions and metrics).
HOSTILE_NAME = "![x](http://203.0.113.9/x.png) :red[red] `tick` <b>b</b>"


@pytest.fixture(scope="module")
def board_url(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    write_run(root / "grpo_run", steps=4, samples=8, tokens=30, ranks=2, grpo=True, workers=1)
    hostile = sample(
        4,
        reward=0.5,
        prompt="Say hello<endofsystem>line one\nline two",
        response="\n".join(PAYLOADS),
        ref_response=PAYLOADS[1],
        response_tokens=PAYLOADS[:2] + ["<b>bold?</b>", "plain"],
        logprobs=[-0.1, -2.5, -0.3, -0.05],
        ref_logprobs=[-0.2, -0.5, -0.3, -0.1],
        group_id=HOSTILE_NAME,
        rewards_per_func={HOSTILE_NAME: 0.5},
    )
    with open(root / "grpo_run" / "rollout_data_rank_0.jsonl", "a") as file:
        file.write(json.dumps(hostile) + "\n")
    (root / "grpo_run" / "rollout_meta_hostile.json").write_text(json.dumps({"model_name": HOSTILE_NAME, "reward_funcs": [HOSTILE_NAME], "reward_weights": [1]}))
    # Big enough for the server to index it in its worker processes (board.PARALLEL_MIN_BYTES).
    write_run(root / "a_big_run", steps=12, samples=128, tokens=500, ranks=4)
    yield from served_board(root)


# Each test gets its own browser context (no cache, storage or session shared with another test) and a new page with
# the GRPO run loaded and drawn, so no test depends on what an earlier one clicked: they pass in any order. The server
# is the module's, so its index of the run is built once.
@pytest.fixture
def page(browser, board_url):
    context = browser.new_context(viewport={"width": 1600, "height": 4200})
    page = context.new_page()
    requests, frames = [], []
    page.on("request", lambda request: requests.append(request.url))
    page.on("websocket", lambda socket: socket.on("framereceived", lambda payload: frames.append(payload)))
    page.goto(board_url)
    page.get_by_role("button", name="Load & View").wait_for(timeout=60_000)  # the first screen shows the chosen run
    page.wait_for_function(CHARTS_DRAWN, timeout=60_000)
    page.requests, page.frames_received = requests, frames
    yield page
    context.close()


def move_step_slider(page, key: str):
    page.get_by_label("Step Index(5 total steps)").get_by_role("slider").focus()
    page.keyboard.press(key)


def set_number(page, label: str, value: int):
    field = page.get_by_label(label)
    field.fill(str(value))
    field.press("Enter")
    page.wait_for_timeout(1500)


def test_charts_draw_and_every_request_stays_local(page, board_url):
    assert page.locator(".vega-embed canvas.marks").count() >= 4 and page.locator(".js-plotly-plot").count() == 0  # heat map view not chosen
    assert page.get_by_role("radio", name="Step-Reward").is_visible()
    assert page.get_by_text("Step Index(5 total steps)").is_visible()
    outside = [url for url in page.requests if not url.startswith(board_url) and not url.startswith("data:") and not url.startswith("blob:")]
    assert outside == []


def test_a_curve_view_draws_its_chart_when_chosen(page):
    charts = page.locator(".st-key-curve_view_shown .vega-embed")
    assert charts.count() == 1  # only the chosen view's chart is drawn
    for name, title in (("Step-KL", "KL"), ("Step-Reward", "Rewards Logging")):
        page.locator(".st-key-curve_view").get_by_role("radio", name=name).click()
        page.wait_for_function(f"() => (({CHART_TITLE})(document.querySelector('.st-key-curve_view_shown .vega-embed')) || '').includes({title!r})", timeout=20_000)
        page.locator(".st-key-curve_view_shown .vega-embed canvas.marks").wait_for(timeout=20_000)
        assert charts.count() == 1


# One token view at a time: choosing one draws it and removes the one that was shown.
def test_a_token_view_draws_when_chosen_and_alone(page):
    views = page.locator(".st-key-token_view_shown")
    for name, drawn in (("Heat map", ".js-plotly-plot .main-svg"), ("Response tokens", ".rl-running-text"), ("Token table", '[data-testid="stDataFrame"] canvas')):
        page.locator(".st-key-token_view").get_by_role("radio", name=name).click()
        views.locator(drawn).first.wait_for(timeout=20_000)
        page.wait_for_timeout(500)
        counts = [views.locator(selector).count() for selector in (".js-plotly-plot", ".rl-running-text", '[data-testid="stDataFrame"]')]
        assert sum(counts) == 1, (name, counts)


def test_the_load_report_draws_its_tables_when_opened(page):
    report = page.locator('[data-testid="stExpander"]').filter(has_text="Load report")
    assert report.locator('[data-testid="stDataFrame"]').count() == 0
    report.get_by_text("Load report").click()
    report.locator('[data-testid="stDataFrame"]').first.wait_for(timeout=20_000)


def test_the_first_screen_shows_the_chosen_run_without_load_and_view(browser, board_url):
    context = browser.new_context(viewport={"width": 1600, "height": 1200})
    fresh = context.new_page()
    fresh.goto(board_url)
    fresh.wait_for_function(CHARTS_DRAWN, timeout=60_000)  # nothing clicked
    assert fresh.get_by_text("Step Index(5 total steps)").is_visible() and fresh.get_by_text("Please Press").count() == 0
    ARTIFACTS.mkdir(exist_ok=True)
    fresh.screenshot(path=str(ARTIFACTS / "landing.png"))
    context.close()


def test_model_output_is_shown_verbatim_and_never_runs(page):
    move_step_slider(page, "End")  # the hostile sample is the only one of step 4, the last
    page.wait_for_timeout(2500)
    set_number(page, "Sample index in current step batch", 0)
    response = page.locator('[data-testid="stText"]').filter(has_text="<script>window.__pwned")
    response.first.wait_for(timeout=20_000)
    text = response.first.inner_text()
    for payload in PAYLOADS:
        assert payload in text
    assert "line one\nline two" in page.locator('[data-testid="stText"]').filter(has_text="line one").first.inner_text()
    page.locator(".st-key-token_view").get_by_role("radio", name="Response tokens").click()
    page.locator(".rl-running-text").first.wait_for(timeout=20_000)
    tokens = page.locator('[data-testid="stHtml"]').filter(has_text="plain").first
    assert "<b>bold?</b>" in tokens.inner_text() and tokens.locator("b").count() == 0
    assert re.search(r"logp=-?\d", tokens.locator("span[title]").first.get_attribute("title"))  # every value on hover
    assert page.evaluate("window.__pwned") is None
    assert page.locator("iframe[srcdoc]").count() == 0 and page.locator("img[src=x]").count() == 0
    assert page.evaluate("getComputedStyle(document.body).display") != "none"  # the <style> payload did not apply
    assert page.locator('[data-testid="stApp"]').is_visible()
    # Names from the data stay literal in captions and metrics, and load nothing from outside.
    assert page.locator('[data-testid="stCaptionContainer"]').filter(has_text=f"{HOSTILE_NAME} 0.5").count() == 1  # its group's facts
    assert page.locator('[data-testid="stCaptionContainer"]').filter(has_text=f"Reward = 1 × {HOSTILE_NAME}").count() == 1
    assert page.locator('[data-testid="stMetricValue"]').filter(has_text=HOSTILE_NAME.rsplit("/", 1)[-1]).count() == 1  # the model's last part
    assert page.locator('img[src*="203.0.113.9"]').count() == 0
    assert [url for url in page.requests if "203.0.113.9" in url or "example.com" in url] == []
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "hostile_sample.png"), full_page=True)


def test_clicking_a_batch_table_row_picks_the_sample(page):
    move_step_slider(page, "Home")
    page.wait_for_timeout(2500)
    grid = page.locator('.st-key-batch_table [data-testid="stDataFrame"]')
    grid.scroll_into_view_if_needed()
    box = grid.bounding_box()
    page.mouse.click(box["x"] + 18, box["y"] + 35 * 3 + 17)  # the selection box of row 2 (header is row 0)
    page.wait_for_timeout(2500)
    assert page.get_by_label("Sample index in current step batch").input_value() == "2"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "board.png"), full_page=True)
    # Another step refills the same grid (the browser does not build a new one) and keeps the sample; its rows pick too.
    grid.evaluate("element => { element.dataset.before = 'step 0'; }")
    move_step_slider(page, "ArrowRight")
    page.wait_for_timeout(2500)
    assert grid.get_attribute("data-before") == "step 0"
    assert page.get_by_label("Sample index in current step batch").input_value() == "2"
    box = grid.bounding_box()
    page.mouse.click(box["x"] + 18, box["y"] + 35 * 5 + 17)  # row 4
    page.wait_for_timeout(2500)
    assert page.get_by_label("Sample index in current step batch").input_value() == "4"


# Where on the page the server sent an element since the frames were cleared, and its kind (None for an
# unchanged element of 10 kB or more, which Streamlit sends as a reference to the browser's cache).
def elements_sent(page) -> dict[tuple, str | None]:
    sent = {}
    for frame in page.frames_received:
        message = ForwardMsg.FromString(frame) if isinstance(frame, bytes) else None
        if message is None or message.WhichOneof("type") not in ("delta", "ref_hash"):
            continue
        kind = message.delta.new_element.WhichOneof("type") if message.WhichOneof("type") == "delta" else None
        sent[tuple(message.metadata.delta_path)] = kind
    return sent


def test_each_part_of_the_page_reruns_alone(page):
    page.frames_received.clear()
    page.locator(".st-key-token_view").get_by_role("radio", name="Heat map").click()
    page.locator(".st-key-token_view_shown .js-plotly-plot .main-svg").first.wait_for(timeout=20_000)
    page.wait_for_timeout(1000)
    tab_change = list(elements_sent(page).values())  # a token view redraws only the token area
    assert "plotly_chart" in tab_change and not {"slider", "vega_lite_chart", "number_input", "metric"} & set(tab_change)
    page.frames_received.clear()
    move_step_slider(page, "ArrowRight")
    page.wait_for_timeout(2500)
    step_change = elements_sent(page)
    batch_charts = [path for path, kind in step_change.items() if kind == "vega_lite_chart"]
    selector = [path for path, kind in step_change.items() if kind == "slider"]
    heat_map = [path for path, kind in step_change.items() if kind == "plotly_chart"]
    assert len(batch_charts) == 3 and len(selector) == 1 and len(heat_map) == 1
    page.frames_received.clear()
    set_number(page, "Sample index in current step batch", 1)
    sample_change = elements_sent(page)
    assert heat_map[0] in sample_change  # the sample view is redrawn, the step's charts and selector are not
    assert not set(batch_charts + selector) & set(sample_change)
    page.frames_received.clear()
    page.get_by_role("button", name="Remove ref_reward", exact=True).click()
    page.wait_for_timeout(2500)
    curves_change = elements_sent(page)  # a full rerun would resend the whole page (~100)
    assert "vega_lite_chart" in curves_change.values() and len(curves_change) < 40  # the curves, their settings, the metrics
    assert not set(batch_charts + selector + heat_map) & set(curves_change) and "number_input" not in curves_change.values()
    # A setting of how samples are shown (the sidebar's Show Charts): the samples' part reruns, with those settings in
    # the sidebar, and not the load, the curves or the rest of the sidebar (the sidebar's delta paths start with 1).
    for shown in (False, True):
        page.frames_received.clear()
        page.locator('[data-testid="stSidebar"] label').filter(has_text="Show Charts").click()
        page.wait_for_timeout(2500)
        settings_change = elements_sent(page)
        in_sidebar = [kind for path, kind in settings_change.items() if path[0] == 1 and kind]  # and the block they are in
        assert sorted(in_sidebar) == ["checkbox"] * 7 + ["text_input"] * 2, in_sidebar
        assert shown or "vega_lite_chart" not in settings_change.values()  # the batch charts gone, the curves not sent
        assert "slider" in settings_change.values() and not set(curves_change) & set(settings_change)
    page.wait_for_function("document.querySelectorAll('.vega-embed .marks').length >= 4", timeout=20_000)  # the batch charts back


def test_a_run_big_enough_for_the_worker_processes_loads(browser, board_url):
    # A new browser context: nothing cached, so the charts' code is fetched after the workers ran (with
    # workers forked from the server, the charts sometimes never drew on the benchmark's 577 MB run).
    context = browser.new_context(viewport={"width": 1600, "height": 2400})
    fresh = context.new_page()
    fresh.goto(board_url)
    fresh.get_by_label("Choose Log Name").click(timeout=60_000)
    fresh.get_by_role("option", name="a_big_run").click()
    fresh.get_by_role("button", name="Load & View").click()
    fresh.get_by_text("Step Index(12 total steps)").wait_for(timeout=120_000)
    assert fresh.get_by_text("Loaded 1536 sample(s) of 12 step(s) from 4 file(s) (JSONL, the board's format): 0 bad line(s) skipped").is_visible()
    fresh.wait_for_function(CHARTS_DRAWN, timeout=60_000)
    assert fresh.locator('[data-testid="stException"]').count() == 0
    context.close()
