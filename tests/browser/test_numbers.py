"""Numbers as the browser draws them (docs/page.md#numbers-as-shown): the token table's cells, formatted by Streamlit's
own code with the formats the page gives its columns, and the charts' axis labels, read from Vega's scene graph, on a
run whose rewards are ordinary and whose per-token differences are tiny (a KL of 1e-8). Found in a visual review: the
table read -0.000000 and 0.000000 for a KL that was not zero, and axes 0.0000000, 0.0000002..."""

import json
import math
import random
import re
from pathlib import Path

import pandas as pd
import pytest
import streamlit

import rl_logging_board as board
from tests.support.browser import (
    CHARTS_DRAWN,
    VEGA_VIEW,
    browser,  # noqa: F401  (fixtures)
    served_board,
)
from tests.support.runs import sample, write_lines

# Each axis's labels of every chart drawn, by its scale, its legends' as "legend", its title as "title":
# [{"title": [...], "x": [...], "y": [...], "legend": [...]}, ...].
AXIS_LABELS = """() => { const out = []; for (const chart of document.querySelectorAll('%s')) {""" + VEGA_VIEW + """
  const labels = {};
  const walk = (node, scale) => {
    for (const item of node.items || []) {
      let inner = scale;
      if (node.role === 'axis' || node.role === 'legend') inner = (item.datum && item.datum.scale) || node.role;
      if (node.role === 'title-text') inner = 'title';
      if ((node.role === 'axis-label' || node.role === 'legend-label' || node.role === 'title-text') && inner) (labels[inner] = labels[inner] || []).push([].concat(item.text).join(' '));
      walk(item, inner);
    }
  };
  if (view) walk(view.scenegraph().root, null);
  out.push(labels);
} return out; }"""

ZEROS = re.compile(r"[-−]?0\.0+")  # a row of zeros: 0.0000000, −0.000
EXPONENT = re.compile(r"[-−]?[1-9](\.\d*[1-9])?e-\d+")  # 2e-7, −1.5e-8


@pytest.fixture(scope="module")
def board_url(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    rng = random.Random(5)
    lines = []
    for step in range(1, 5):
        for index in range(8):
            logp = [-rng.random() * 1e-6 for _ in range(6)]
            ref = [value + rng.choice([-1, 1]) * 10 ** rng.uniform(-9, -7) for value in logp]
            ref[0] = logp[0] + 1e-9  # a log ratio of -1e-9
            entropies = [3.2e-4 + rng.random() * 1e-8 for _ in range(6)]  # a narrow band: its ticks need 5 significant digits
            lines.append(sample(step, reward=index / 8, ref_reward=index / 8 + 1e-7 * (index + 1), response_tokens=list("abcdef"), logprobs=logp, ref_logprobs=ref, entropies=entropies))
    write_lines(root / "tiny_differences" / "rollout_data_rank_0.jsonl", lines)
    yield from served_board(root)


@pytest.fixture
def page(browser, board_url):  # noqa: F811
    context = browser.new_context(viewport={"width": 1600, "height": 4200})
    page = context.new_page()
    page.goto(board_url)
    page.wait_for_function(CHARTS_DRAWN, timeout=60_000)
    yield page
    context.close()


def axis_labels(page, selector: str = ".vega-embed") -> list[dict]:
    return page.evaluate(AXIS_LABELS % selector)


def test_axes_read_as_numbers_tiny_ones_in_exponent_form(page):
    charts = axis_labels(page)
    assert len(charts) >= 4
    labels = [label for chart in charts for scale, shown in chart.items() if scale != "title" for label in shown]
    assert labels and not [label for label in labels if ZEROS.fullmatch(label)]  # never 0.0000000 for a zero
    assert not [label for label in labels if re.fullmatch(r"[-−]?\d+\.\d*0", label)]  # no trailing zeros: 0.5, not 0.50
    rewards = charts[0]["y"]  # Step-Reward: rewards of 0 to 7/8, labelled as d3 spaces them
    assert rewards and all(re.fullmatch(r"[-−]?\d+(\.\d+)?", label) for label in rewards), rewards
    page.locator(".st-key-curve_view").get_by_role("radio", name="Step-KL").click()
    # one chart in the view (the view before it is gone: under load it was still there beside the new one), this one
    page.wait_for_function(f"() => (charts => charts.length === 1 && (charts[0].y || []).some(label => label.includes('e-')))(({AXIS_LABELS % '.st-key-curve_view_shown .vega-embed'})())", timeout=20_000)
    [kl] = axis_labels(page, ".st-key-curve_view_shown .vega-embed")
    assert all(label == "0" or EXPONENT.fullmatch(label) for label in kl["y"]), kl["y"]  # log ratios of 1e-9 to 1e-7
    page.locator(".st-key-curve_view").get_by_role("radio", name="Step-Entropy").click()
    page.wait_for_function(f"() => (charts => charts.length === 1 && (charts[0].title || []).join(' ').includes('Entropy'))(({AXIS_LABELS % '.st-key-curve_view_shown .vega-embed'})())", timeout=20_000)
    [entropy] = axis_labels(page, ".st-key-curve_view_shown .vega-embed")
    assert len(entropy["y"]) >= 3 and len(set(entropy["y"])) == len(entropy["y"]) and all(EXPONENT.fullmatch(label) for label in entropy["y"]), entropy["y"]
    [gaps] = [chart for chart in charts if chart["title"][0].startswith("Reward Gap")]  # its bars and gradient legend: -1e-7 to -8e-7
    assert all(EXPONENT.fullmatch(label) or label == "0" for label in gaps["y"] + gaps["legend"]), gaps


# A token table's cells are drawn on canvas by Streamlit's data grid, which formats each number with the column's format
# (sprintf-js for printf formats): the page's formats are given to that same code, from Streamlit's own files.
def test_token_table_cells_show_significant_digits_and_no_negative_zero(page):
    module = sorted(Path(streamlit.__file__).parent.joinpath("static", "static", "js").glob("formatNumber.*.js"))
    assert len(module) == 1, "Streamlit's formatNumber module moved: find where its data grid formats a number"
    cases = {
        "kl": [3e-8, 5.000000746e-19, 0.0, 1.5],
        "log_ratio": [-1e-9, -0.0, 2.5e-5, -0.000123456789],
        "logp": [-5.0000006, -12.345678, -2.4e-7, -0.5],
        "prob": [0.9999876, 1.0, 0.006737947, 1e-12],
        "clipped": [2.0, -1.0, 0.0, 1.0],
        "policy_ratio": [485165195.4, 1e-3, 0.0, 1.0],  # a column with a value of 10^6 or more: exponent form
    }
    config = board.shaded_columns(pd.DataFrame(cases))
    values = [value for name in cases for value in cases[name]]
    shown = page.evaluate(
        """async ([url, cases]) => {
          const exports = Object.values(await import(url));
          const format = exports.find(f => typeof f === 'function' && (() => { try { return f(0.5, '%.2f') === '0.50'; } catch (e) { return false; } })());
          return cases.map(([value, spec]) => format(value, spec));
        }""",
        [f"/static/js/{module[0].name}", [[value, config[name]["type_config"]["format"]] for name in cases for value in cases[name]]],
    )
    expected = [
        "3e-8", "5e-19", "0", "1.5",
        "-1e-9", "0", "0.000025", "-0.000123457",
        "-5", "-12.3457", "-2.4e-7", "-0.5",
        "0.999988", "1", "0.00673795", "1e-12",
        "2", "-1", "0", "1",
        "4.85165e+8", "1.00000e-3", "0.00000e+0", "1.00000e+0",
    ]
    assert shown == expected, json.dumps(dict(zip([f"{name} {value!r}" for name in cases for value in cases[name]], shown)), indent=1)
    for value, text in zip(values, shown):  # each reads as its value, to the digits shown
        assert math.isclose(float(text), value, rel_tol=1e-5), (value, text)
