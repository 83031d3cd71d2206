"""The token heat map of a long response as the browser draws it: every KL spike of a 4,000-token response is a coloured
column of the plot, read from the page's pixels. Drawn a token a cell, plotly painted cells narrower than a pixel over
each other, and the plot showed one spike of four."""

import io
import random

import pytest
from PIL import Image

from rl_board.figures import HEAT_MAP_COLUMNS
from tests.support.browser import (
    CHARTS_DRAWN,
    browser,  # noqa: F401  (fixtures)
    served_board,
)
from tests.support.runs import sample, write_lines

TOKENS = 4_000
SPIKES = [571, 1_333, 2_001, 2_860, TOKENS - 1]  # KL spikes; the rest of the response is within 0.01 of the reference


@pytest.fixture(scope="module")
def board_url(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    rng = random.Random(8)
    lines = []
    for step in (1, 2):
        for index in range(2):
            logp = [-rng.uniform(0.5, 1.5) for _ in range(TOKENS)]
            ref = [value + rng.uniform(-0.01, 0.01) for value in logp]
            for spike in SPIKES:
                ref[spike] = logp[spike] - 3.0
            lines.append(sample(step, reward=index, ref_reward=0.5, response_tokens=[f"w{i}" for i in range(TOKENS)], logprobs=logp, ref_logprobs=ref))
    write_lines(root / "long_responses" / "rollout_data_rank_0.jsonl", lines)
    yield from served_board(root)


# The x and y (in the page) of the heat map's cell of `row` at each token in `tokens`, from plotly's own axes.
CELL_PLACES = """([row, tokens]) => {
  const plot = document.querySelector('.st-key-token_view_shown .js-plotly-plot');
  const layout = plot._fullLayout, box = plot.getBoundingClientRect();
  const y = box.top + layout.yaxis._offset + layout.yaxis.l2p(plot.data[0].y.indexOf(row));
  return tokens.map(token => [box.left + layout.xaxis._offset + layout.xaxis.l2p(token), y]);
}"""


@pytest.mark.parametrize("width, height", [(1600, 1000), (1280, 800)])
def test_every_kl_spike_of_a_long_response_is_drawn(browser, board_url, width, height):  # noqa: F811
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.goto(board_url)
    page.wait_for_function(CHARTS_DRAWN, timeout=60_000)
    page.locator(".st-key-token_view").get_by_role("radio", name="Heat map").click()
    page.locator(".st-key-token_view_shown .js-plotly-plot .heatmaplayer image").wait_for(timeout=30_000)
    page.locator(".st-key-token_view_shown .js-plotly-plot").scroll_into_view_if_needed()
    page.wait_for_timeout(500)
    assert page.get_by_text(f"Over {HEAT_MAP_COLUMNS} tokens, a cell is a stretch of {TOKENS // HEAT_MAP_COLUMNS} tokens").count() == 1
    calm = [spike + 150 for spike in SPIKES[:-1]]  # far from every spike's stretch
    places = page.evaluate(CELL_PLACES, ["kl", SPIKES + calm])
    shot = Image.open(io.BytesIO(page.screenshot())).convert("RGB")
    context.close()

    def darkness(x: float, y: float) -> int:  # the darkest of the pixels around the place: a cell is a pixel or two wide
        return max(255 - min(shot.getpixel((round(x) + dx, round(y) + dy))) for dx in (-1, 0, 1) for dy in (-2, 0, 2))

    spikes, others = [darkness(*place) for place in places[: len(SPIKES)]], [darkness(*place) for place in places[len(SPIKES) :]]
    # The balance colour scale: its ends are dark (a spike at the red end), its middle light (values near 0).
    assert min(spikes) > 150 and max(others) < 80, (spikes, others)
