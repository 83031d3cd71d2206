"""A researcher's path through a run in a real headless Chromium, each step checked against the raw lines: the largest
reward jump on Step-Reward clicked, the step area showing that step; the highest-KL sample found by sorting and
clicked, its tokens read; the curves smoothed with the keyboard, each key press rerunning only them; another run opened at its latest step with no search left over; a live refresh that leaves
the page where the user was."""

import json
import shutil

import numpy as np
import pytest
from playwright.sync_api import sync_playwright
from streamlit.proto.BackMsg_pb2 import BackMsg

from tests.support import ARTIFACTS, SAMPLES
from tests.support.browser import CHARTS_DRAWN, CHROMIUM, VEGA_VIEW, served_board
from tests.support.runs import sample, write_lines

BUNDLED = "grpo_tiny_example"  # the root's last run: the first screen shows it
LIVE = "a_live_run"
GROWN = "a_grown_run"  # live: its step chart updated in place
SETTLED = "document.querySelector('[data-testid=\"stApp\"]').dataset.testScriptState === 'notRunning'"

# Where a step of the Step-Reward chart's "reward" line is on the page: the chart's Vega scales, from its view.
POINT_OF_STEP = "(chart, [step, value]) => {" + VEGA_VIEW + """
  const box = chart.querySelector('canvas').getBoundingClientRect();
  const [left, top] = view.origin();
  return {x: box.left + left + view.scale('x')(step), y: box.top + top + view.scale('y')(value)};
}"""


def raw_lines(run_dir) -> list[dict]:
    return [json.loads(line) for path in sorted(run_dir.glob("rollout_data_rank_*.jsonl")) for line in path.read_text().splitlines()]


# TRL's kl (k3) of a line's tokens, averaged over them: exp(ref - logp) - (ref - logp) - 1.
def mean_k3(line: dict) -> float:
    delta = np.array(line["ref_logprobs"]) - np.array(line["logprobs"])
    return float(np.mean(np.exp(delta) - delta - 1))


def live_lines(step: int) -> list[dict]:
    return [sample(step, reward=index / 4, prompt=f"live prompt {step}.{index}", response=f"live answer {step}.{index}") for index in range(4)]


@pytest.fixture(scope="module")
def run_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    shutil.copytree(SAMPLES / BUNDLED, root / BUNDLED)
    for run in (LIVE, GROWN):
        write_lines(root / run / "rollout_data_rank_0.jsonl", [line for step in (1, 2, 3) for line in live_lines(step)])
    return root


@pytest.fixture(scope="module")
def board_url(run_root):
    yield from served_board(run_root)


def step_slider(page, steps: int):
    return page.get_by_label(f"Step Index({steps} total steps)").get_by_role("slider")


# Wait until the step selector of a run of `steps` steps shows `step` (and the sample index input `sample`).
def wait_for_step(page, steps: int, step: int, sample: int | None = None):
    slider, index = step_slider(page, steps), page.get_by_label("Sample index in current step batch")
    for _ in range(120):
        if slider.get_attribute("aria-valuetext") == str(step) and (sample is None or index.input_value() == str(sample)):
            return
        page.wait_for_timeout(500)
    pytest.fail(f"the step selector shows {slider.get_attribute('aria-valuetext')}, not {step}")


def settled(page):
    page.wait_for_timeout(500)
    page.wait_for_function(SETTLED, timeout=60_000)


# In view, and not under the page's fixed header (60 px).
def in_view(page, locator) -> bool:
    box = locator.bounding_box()
    return box is not None and 60 <= box["y"] <= page.viewport_size["height"] - box["height"]


def test_from_the_largest_jump_to_the_tokens_then_another_run_then_a_live_refresh(board_url, run_root):
    lines = raw_lines(run_root / BUNDLED)
    steps = sorted({line["step"] for line in lines})
    means = {step: np.mean([line["reward"] for line in lines if line["step"] == step]) for step in steps}
    changes = {step: means[step] - means[before] for before, step in zip(steps, steps[1:])}
    jump = max(changes, key=lambda step: abs(changes[step]))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        sent = []  # what the page asks the server, each a BackMsg
        page.on("websocket", lambda socket: socket.on("framesent", lambda payload: sent.append(payload)))
        page.goto(board_url)
        page.wait_for_function(CHARTS_DRAWN, timeout=90_000)  # the first screen shows the chosen run: nothing clicked
        settled(page)

        # 1. The largest jump is listed first under the curve, and a click on its point shows that step below.
        pills = page.locator('[data-testid="stButtonGroup"]').filter(has_text="Largest changes of reward")
        pills.wait_for(timeout=30_000)
        listed = [text for text in pills.inner_text().splitlines() if text.startswith("step ")]
        assert len(listed) == 5 and listed[0] == f"step {jump}: {changes[jump]:+.3g}"
        chart = page.locator(".st-key-curve_view_shown .vega-embed").first
        point = chart.evaluate(POINT_OF_STEP, [jump, float(means[jump])])
        page.mouse.click(point["x"], point["y"])
        wait_for_step(page, len(steps), jump)
        settled(page)
        first_response = next(line["response"] for line in lines if line["step"] == jump)
        page.locator('[data-testid="stText"]').filter(has_text=first_response).first.wait_for(timeout=30_000)
        assert in_view(page, step_slider(page, len(steps)))  # brought into view
        page.screenshot(path=str(ARTIFACTS / "navigation_jump.png"))
        # The next largest change, picked among those listed: that step, brought into view again.
        second = int(listed[1].split(":")[0].removeprefix("step "))
        pills.get_by_text(listed[1], exact=True).click()  # Playwright scrolls up to the pills first
        wait_for_step(page, len(steps), second)
        settled(page)
        assert in_view(page, step_slider(page, len(steps)))

        # 2. Smoothing moved with the arrow keys: each key press reruns the curves' fragment, not the page, and the step
        # in view stays.
        sent.clear()
        smoothing = page.locator('[data-testid="stSlider"]').filter(has_text="Smoothing").get_by_role("slider")
        smoothing.focus()
        for _ in range(5):  # faster than the curves redraw: no key press is lost to a rerun still running
            page.keyboard.press("ArrowRight")
            page.wait_for_timeout(100)
        settled(page)
        reruns = [message.rerun_script for message in map(BackMsg.FromString, sent) if message.HasField("rerun_script")]
        assert reruns and all(rerun.fragment_id for rerun in reruns)
        assert smoothing.get_attribute("aria-valuetext") == "0.05"
        raw = "chart => {" + VEGA_VIEW + " return view.data('data_0').filter(point => point.raw !== null).length; }"
        assert chart.evaluate(raw) > 0  # the raw line faint behind the smoothed one
        assert step_slider(page, len(steps)).get_attribute("aria-valuetext") == str(second)

        # 3. Sorted by KL, the first result is the run's highest-KL sample; a click shows it, its tokens readable.
        highest = max(lines, key=mean_k3)
        batch = [line for line in lines if line["step"] == highest["step"]]
        page.get_by_label("Sort by").click()
        page.keyboard.type("avg_kl_k3")  # the run names TRL: k3, its kl
        page.keyboard.press("Enter")
        settled(page)
        grid = page.locator('[class*="st-key-search_results-"] [data-testid="stDataFrame"]')
        grid.scroll_into_view_if_needed()
        box = grid.bounding_box()
        page.mouse.click(box["x"] + 18, box["y"] + 35 + 17)  # the first row's selection box
        index = batch.index(highest)
        wait_for_step(page, len(steps), highest["step"], index)
        settled(page)
        assert in_view(page, page.get_by_label("Sample index in current step batch"))  # the sample, far below the results
        page.locator(".st-key-token_view").get_by_role("radio", name="Response tokens").click()
        running_text = page.locator(".rl-running-text").first
        running_text.wait_for(timeout=30_000)
        # Byte-level tokens read as the response they make, then the end-of-text token that closed it.
        assert "".join(token.replace("Ġ", " ") for token in highest["response_tokens"]) == highest["response"] + "<|endoftext|>"
        assert running_text.inner_text() == highest["response"] + "<|endoftext|>"
        page.screenshot(path=str(ARTIFACTS / "navigation_tokens.png"))

        # 4. Another run opens at its latest step, with no search left from the last one.
        query = page.get_by_role("textbox", name="Search prompt and response text")
        query.fill("1")
        query.press("Enter")
        settled(page)
        page.get_by_label("Choose Log Name").click()
        page.get_by_role("option", name=LIVE, exact=True).click()
        page.get_by_role("button", name="Load & View").click()
        page.get_by_text("Step Index(3 total steps)").wait_for(timeout=60_000)
        settled(page)
        assert step_slider(page, 3).get_attribute("aria-valuetext") == "3"
        assert query.input_value() == "" and page.get_by_text("loaded samples found").count() == 0

        # 5. Live, with a search active and the step area in view: a new step is announced, the page does not move.
        page.get_by_text("Live mode", exact=True).click()
        settled(page)
        query.fill("live")
        query.press("Enter")
        settled(page)
        slider = step_slider(page, 3)
        slider.scroll_into_view_if_needed()
        page.mouse.wheel(0, -200)  # the step area in the middle of the view
        page.wait_for_timeout(500)
        before = slider.bounding_box()["y"]
        scroll_top = "document.querySelector('[data-testid=stMain]').scrollTop"
        scrolled = page.evaluate(scroll_top)
        with open(run_root / LIVE / "rollout_data_rank_0.jsonl", "a") as file:
            file.write("".join(json.dumps(line) + "\n" for line in live_lines(4)))
        page.get_by_text("1 new step(s) since you chose step 3; the latest is 4.").wait_for(timeout=60_000)
        settled(page)
        page.wait_for_timeout(1000)
        page.screenshot(path=str(ARTIFACTS / "navigation_live.png"))
        # The page is where it was (it moved 500-800 px when a progress bar or notice came and went, as each element
        # after it was built anew); the selector only as much as its label's new step count reflows it.
        assert abs(page.evaluate(scroll_top) - scrolled) < 20 and abs(step_slider(page, 4).bounding_box()["y"] - before) < 20
        assert page.locator('[data-testid="stException"]').count() == 0
        browser.close()


# The Step-Reward chart's Vega view kept as window.chartView: whether it is still the one drawn, its step scale's domain
# and the last step it has a point of.
STEP_CHART = "() => { const chart = document.querySelector('.st-key-curve_view_shown .vega-embed');" + VEGA_VIEW + """
  window.chartView = window.chartView || view;
  let last = -Infinity;
  const walk = node => { for (const item of node.items || []) { if (item.datum && item.datum.centre != null) last = Math.max(last, item.datum.step); walk(item); } };
  walk(view.scenegraph().root);
  return {same: view === window.chartView, domain: view.scale('x').domain(), last};
}"""


# A step chart keeps its spec's shape as the run grows: a live refresh swaps the new step's data into the Vega view the
# page has, where a chart built anew costs the browser several times more, and its axis ends at the new step.
def test_a_live_refresh_updates_a_step_chart_in_place(board_url, run_root):
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.goto(board_url)
        page.wait_for_function(CHARTS_DRAWN, timeout=90_000)
        page.get_by_label("Choose Log Name").click()
        page.get_by_role("option", name=GROWN, exact=True).click()
        page.get_by_role("button", name="Load & View").click()
        page.get_by_text("Step Index(3 total steps)").wait_for(timeout=60_000)
        page.get_by_text("Live mode", exact=True).click()
        settled(page)
        assert page.evaluate(STEP_CHART) == {"same": True, "domain": [1, 3], "last": 3}  # the run's steps, end to end
        with open(run_root / GROWN / "rollout_data_rank_0.jsonl", "a") as file:
            file.write("".join(json.dumps(line) + "\n" for line in live_lines(4)))
        page.get_by_text("the latest is 4.").wait_for(timeout=60_000)
        settled(page)
        assert page.evaluate(STEP_CHART) == {"same": True, "domain": [1, 4], "last": 4}
        assert page.locator('[data-testid="stException"]').count() == 0
        browser.close()
