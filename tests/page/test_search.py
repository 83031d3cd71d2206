"""Finding samples on the page (issue 17): the search box, filters, fields, facets, downloads and the clicked result, in
AppTest, checked against the raw JSONL (tests/support/search_runs.py)."""

import json
import math
import re
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

import rl_board.reading.search
import rl_logging_board as board
from rl_board.metrics import facet_table
from rl_board.reading.search import (
    SEARCH_PROGRAM,
    search_pattern,
)
from rl_board.text import markdown_literal
from tests.support.page import batch_table, chart_spec, click_row, curve_views, load_and_view, start, widget
from tests.support.runs import load, sample, write_lines
from tests.support.search_runs import (
    BAD_UTF8_FIELDS,
    EVERYWHERE,
    FORMAT_USED,
    MARKDOWN_KEY,
    PAGE_QUERIES,
    QUERIES,
    RANK_FILES,
    STEPS,
    bundled,
    bundled_every_key,
    found,
    kl_of,
    needle_run,  # noqa: F401  (fixtures)
    plain_search,
    records,
    search,
    shown_records,
    write_fields_run,
    write_run_lines,
)


def search_page(app: AppTest, query: str, regex=False, match_case=False, places=EVERYWHERE) -> AppTest:
    widget(app.text_input, "Search prompt and response text").input(query)
    widget(app.toggle, "Regular expression").set_value(regex)
    widget(app.toggle, "Match case").set_value(match_case)
    widget(app.selectbox, "Search in").set_value(places)
    app.run()
    assert not app.exception, app.exception
    return app


# The results table (None when nothing was found).
def results_table(app: AppTest) -> pd.DataFrame | None:
    return next((frame.value for frame in app.dataframe if frame.key and frame.key.startswith("search_results:")), None)


def found_on_page(app: AppTest) -> set:
    table = results_table(app)
    return set() if table is None else {(file, int(line)) for file, line in zip(table["file"], table["line"])}


def count_line(app: AppTest) -> str:
    [line] = [element.value for element in [*app.markdown, *app.warning] if "loaded samples found" in element.value]
    return line


# The page: typing a query lists exactly the needle lines (file and line columns) and counts them.
def test_the_page_lists_and_counts_exactly_the_needle_lines(needle_run, monkeypatch):
    run_dir, positions = needle_run
    lines = records(run_dir)
    app = load_and_view(start(run_dir.parent, monkeypatch))
    assert "🔎 Find samples" in [header.value for header in app.subheader]
    assert any(caption.value.startswith("Type text to find") for caption in app.caption)  # nothing asked: nothing listed
    for query, regex, match_case, places, needles in [param.values for param in QUERIES if param.id in PAGE_QUERIES]:
        search_page(app, query, regex, match_case, places)
        expected = {positions[name] for name in needles}
        steps = {lines[position]["step"] for position in expected}
        assert found_on_page(app) == expected, query
        assert count_line(app).startswith(f"**{len(expected)}** of {len(lines)} loaded samples found, at {len(steps)} of 3 steps"), query
    search_page(app, "zebra crossing")
    assert results_table(app)["found in"].tolist() == ["prompt"] and results_table(app)["match"].tolist() == ["a ⟦zebra crossing⟧ in the prompt"]
    search_page(app, "a")  # most lines: each row's sample is its index in its step's batch (ordered by file, then line)
    table = results_table(app)
    batches = {step: sorted(position for position, line in lines.items() if line["step"] == step) for step in STEPS}
    assert len(table) > 20 and table["sample"].tolist() == [batches[step].index((file, line)) for step, file, line in zip(table["step"], table["file"], table["line"])]
    assert table["step"].tolist() == sorted(table["step"], reverse=True)  # sorted by step, highest first (the default)
    [per_step] = [chart_spec(chart)["data"]["values"] for chart in app.get("vega_lite_chart") if chart_spec(chart).get("title") == "Samples found per step"]
    a_lines = plain_search(lines, "a", False, False, EVERYWHERE)
    assert {point["step"]: point["samples"] for point in per_step} == {step: sum(lines[p]["step"] == step for p in a_lines) for step in STEPS}
    widget(app.text_input, "Search prompt and response text").input("")
    widget(app.selectbox, "Sort by").set_value("reward")
    widget(app.radio, "Order").set_value("lowest first")
    app.run()
    table = results_table(app)
    rewards = sorted(line["reward"] for line in lines.values() if not math.isnan(line["reward"]))
    assert table["reward"].tolist()[:-1] == rewards and math.isnan(table["reward"].iat[-1])  # no reward (NaN): last
    assert (table["file"].iat[-1], table["line"].iat[-1]) == positions["nan"]


# An invalid regular expression is explained under the box and the rest of the page is drawn as before.
def test_an_invalid_regular_expression_is_explained_under_the_box(needle_run, monkeypatch):
    run_dir, _ = needle_run
    with pytest.raises(ValueError, match="missing"):
        search_pattern("(unclosed", True, False)
    app = load_and_view(start(run_dir.parent, monkeypatch))
    search_page(app, "(unclosed", regex=True)
    [error] = [element.value for element in app.error]
    assert error.startswith("Not a valid regular expression: ") and "missing ): (unclosed" in error.replace("\\", "")  # markdown-escaped
    assert results_table(app) is None and not [m for m in app.markdown if "loaded samples found" in m.value]
    assert "⚡️ Each Step Response" in [header.value for header in app.subheader] and len(batch_table(app)) == sum(line["step"] == 1 for line in records(run_dir).values())
    search_page(app, "(unclosed", regex=False)  # the same text, literally: no error, nothing found
    assert not app.error and count_line(app).startswith("**0** of")


# RE2 runs in linear time: a pattern that backtracks catastrophically in Python's re is answered at once.
def test_a_catastrophic_pattern_is_answered_in_linear_time(tmp_path, monkeypatch):
    run_dir = tmp_path / "runs" / "run"
    write_lines(run_dir / "r.jsonl", [sample(1, response="a" * 50_000 + "b"), sample(1, response="ends in aaa"), sample(2, response="b" + "a" * 50_000 + "b")])
    run = load(run_dir)
    began = time.perf_counter()
    assert found(run, "(a+)+$", regex=True, places="response") == {("r.jsonl", 2)}
    assert time.perf_counter() - began < 5
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    began = time.perf_counter()
    search_page(app, "(a+)+$", regex=True, places="response")
    assert time.perf_counter() - began < 5 and found_on_page(app) == {("r.jsonl", 2)}


# The page shows the fields: as batch-table columns, and in full (nested and long values included) under "Other fields
# of this line"; Step-Fields draws each number's per-step mean.
def test_the_page_shows_the_fields_in_the_table_the_sample_view_and_step_fields(tmp_path, monkeypatch):
    lines = write_fields_run(tmp_path / "runs" / "run")
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    table = batch_table(app)
    first_step = [line for line in lines if line["step"] == 1]
    for key in ("count", "score"):
        assert table[f"extra/{key}"].tolist() == pytest.approx([line[key] for line in first_step])
    for key in ("label", "edge64"):
        assert table[f"text/{key}"].tolist() == [line[key] for line in first_step]
    assert table["extra/flag"].tolist() == [float(line["flag"]) for line in first_step]
    assert not [column for column in table.columns if column.endswith(("nested", "/long", "edge65"))]

    assert not [e for e in app.expander if e.label == "Other fields of this line" and (e.dataframe or e.text)]  # read when opened
    app.session_state["other_fields"] = True
    app.run()
    details = widget(app.expander, "Other fields of this line")
    shown = details.dataframe[0].value
    line = lines[0]
    short = {key: value for key, value in line.items() if key not in FORMAT_USED and key not in ("nested", "long", "edge65")}
    assert shown["field"].tolist() == list(short) and shown["value"].tolist() == [json.dumps(value, ensure_ascii=False) for value in short.values()]
    assert [caption.value for caption in details.caption] == ["nested", "long", "edge65"]
    assert [text.value for text in details.text] == [line["long"], line["edge65"]]
    assert [json.loads(element.value) for element in details.get("json")] == [line["nested"]]

    app.session_state["curve_view"] = "Step-Fields"
    app.run()
    widget(app.multiselect, "Fields").set_value(["extra/score", "extra/flag"]).run()
    points = chart_spec(next(tab for tab in curve_views(app) if tab.label == "Step-Fields").get("vega_lite_chart")[0])["data"]["values"]
    for key in ("score", "flag"):
        expected = {step: np.mean([float(line[key]) for line in lines if line["step"] == step and key in line]) for step in (1, 2)}
        assert {point["step"]: point["mean"] for point in points if point["series"] == f"extra/{key}"} == pytest.approx(expected)


# Step-Facets: one curve per data source whose points are that source's per-step mean, and the table under it.
def test_step_facets_draws_each_values_mean_per_step(tmp_path, monkeypatch):
    run_dir, _, lines = bundled_every_key(tmp_path)
    app = load_and_view(start(run_dir.parent, monkeypatch))
    app.session_state["curve_view"] = "Step-Facets"
    app.run()
    assert widget(app.selectbox, "Facet").value == "text/data_source"
    for series, value_of in [("reward", lambda line: line["reward"]), ("extra/difficulty", lambda line: line["difficulty"])]:
        widget(app.selectbox, "Series").set_value(series).run()
        tab = next(tab for tab in curve_views(app) if tab.label == "Step-Facets")
        points = chart_spec(tab.get("vega_lite_chart")[0])["data"]["values"]
        expected = defaultdict(list)
        for line in lines.values():
            expected[(f"data_source = {line['data_source']}", line["step"])].append(value_of(line))
        assert {(point["series"], point["step"]): point["mean"] for point in points} == pytest.approx({key: np.mean(values) for key, values in expected.items()})
        assert {(point["series"], point["step"]): point["n"] for point in points} == {key: len(values) for key, values in expected.items()}
        facet_rows = tab.dataframe[0].value.set_index("text/data_source")
        for source in ("gsm8k", "math", "code"):
            values = [value_of(line) for line in lines.values() if line["data_source"] == source]
            assert facet_rows.loc[source, "samples"] == len(values) and facet_rows.loc[source, f"mean {series}"] == pytest.approx(np.mean(values))


# The page combines a search with filters, then lists the top N by KL across the run, highest or lowest first.
def test_the_page_combines_search_filters_and_top_n_by_kl(tmp_path, monkeypatch):
    run_dir, _, lines = bundled_every_key(tmp_path)
    app = load_and_view(start(run_dir.parent, monkeypatch))
    search_page(app, "押韵", places="response")
    phrase = plain_search(lines, "押韵", False, False, "response")
    assert found_on_page(app) == phrase
    widget(app.multiselect, "Filter by").set_value(["steps", "text/data_source"]).run()
    widget(app.select_slider, "Steps").set_value((1, 3))
    widget(app.multiselect, markdown_literal("text/data_source")).set_value(["math", "gsm8k"])  # a label from the data is escaped
    app.run()
    expected = {p for p in phrase if 1 <= lines[p]["step"] <= 3 and lines[p]["data_source"] in ("math", "gsm8k")}
    assert 0 < len(expected) < len(phrase) and found_on_page(app) == expected
    assert count_line(app).startswith(f"**{len(expected)}** of 80 loaded samples found, at 3 of 5 steps")
    widget(app.multiselect, "Filter by").set_value(["steps", "text/data_source", "truncated"]).run()
    truncated = {p for p in expected if lines[p]["truncated"]}
    assert 0 < len(truncated) < len(expected) and found_on_page(app) == truncated
    assert set(results_table(app).columns) >= {"step", "sample", "reward", "text/data_source", "found in", "match", "file", "line"}

    widget(app.multiselect, "Filter by").set_value(["avg_kl_kl", "advantage"]).run()  # untouched ranges keep every sample
    assert found_on_page(app) == phrase
    widget(app.multiselect, "Filter by").set_value([]).run()
    widget(app.text_input, "Search prompt and response text").input("").run()
    widget(app.selectbox, "Sort by").set_value("avg_kl_kl")
    widget(app.number_input, "Top N").set_value(5)
    app.run()
    by_kl = sorted(lines, key=lambda position: kl_of(lines[position]), reverse=True)
    table = results_table(app)
    assert [(file, int(line)) for file, line in zip(table["file"], table["line"])] == by_kl[:5]
    assert table["avg_kl_kl"].tolist() == pytest.approx([kl_of(lines[p]) for p in by_kl[:5]])
    assert count_line(app).startswith("**80** of 80 loaded samples found, at 5 of 5 steps; the results are the top 5 by avg\\_kl\\_kl")
    widget(app.radio, "Order").set_value("lowest first").run()
    assert [(file, int(line)) for file, line in zip(results_table(app)["file"], results_table(app)["line"])] == by_kl[::-1][:5]


# The page offers the results and the step in view as CSV, JSONL and Parquet.
def test_the_page_offers_downloads_of_the_results_and_the_step(needle_run, monkeypatch):
    run_dir, _ = needle_run
    app = load_and_view(start(run_dir.parent, monkeypatch))
    labels = [button.label for button in app.download_button]
    assert [label for label in labels if label.startswith(("Step", "Results"))] == ["Step 1 (CSV)", "Step 1 (JSONL)", "Step 1 (Parquet)"]
    search_page(app, "haystack")
    downloads = {button.label: button.proto.disabled for button in app.download_button if button.label.startswith(("Step", "Results"))}
    assert downloads == dict.fromkeys(["Results (CSV)", "Results (JSONL)", "Results (Parquet)", "Step 1 (CSV)", "Step 1 (JSONL)", "Step 1 (Parquet)"], False)
    ids = {button.label.removeprefix("Step 1"): button.proto.id for button in app.download_button if button.label.startswith("Step")}
    widget(app.slider, "Step Index(3 total steps)").set_value(3).run()
    assert "Step 3 (JSONL)" in [button.label for button in app.download_button]
    # the same buttons, relabelled: the browser keeps them rather than building new ones
    assert {button.label.removeprefix("Step 3"): button.proto.id for button in app.download_button if button.label.startswith("Step")} == ids


# Beyond the caps the downloads are disabled and the page says to narrow the filter (the caps made small: the board's
# own module runs the page, so that the test can set them).
def test_downloads_beyond_the_caps_are_disabled_and_say_so(needle_run, tmp_path, monkeypatch):
    run_dir, _ = needle_run
    page = tmp_path / "capped_board.py"
    page.write_text("import rl_logging_board as board\n\nif __name__ == '__main__':\n    board.main()\n")
    monkeypatch.setattr(board, "EXPORT_ROWS", 5)
    monkeypatch.setattr(board, "RESULTS_SHOWN", 3)  # the Top N default, which must stay under the cap
    monkeypatch.setenv("RL_LOGGING_BOARD_ROOT", str(run_dir.parent))
    app = AppTest.from_file(str(page), default_timeout=120)
    app.run()
    load_and_view(app)
    step_rows = len(load(run_dir).step_rows(1))
    assert step_rows > 5
    downloads = {button.label: button.proto.disabled for button in app.download_button if button.label.startswith("Step")}
    assert downloads == {"Step 1 (CSV)": True, "Step 1 (JSONL)": True, "Step 1 (Parquet)": True}
    assert f"{step_rows:,} lines, 0 MB: more than a download holds (5 lines, 100 MB of JSONL); narrow the filter." in [c.value for c in app.caption]
    search_page(app, "a")  # most lines: the results are the top 3
    assert len(results_table(app)) == 3 and "the results are the top 3 by step" in count_line(app)
    found_count = count_line(app)[2:].split("**")[0]
    assert any(c.value.endswith(f"The downloads hold the 3 result(s) of {found_count} found: narrow the filter, or raise Top N (at most 5), to download others.") for c in app.caption)
    assert not [button for button in app.download_button if button.label.startswith("Results") and button.proto.disabled]
    monkeypatch.setattr(board, "EXPORT_BYTES", 100)  # three lines of JSONL are more than that; the tables are not
    app.run()
    downloads = {button.label: button.proto.disabled for button in app.download_button if button.label.startswith("Results")}
    assert downloads == {"Results (CSV)": False, "Results (JSONL)": True, "Results (Parquet)": False}


# Clicking a result moves the step view and the sample view to it. AppTest cannot click a dataframe row, so the test
# sends the row selection as the browser does (the table's widget state, a JSON string) through AppTest's private
# _run, which fires the table's on_select; tests/browser/test_search.py clicks the row in Chromium.
def test_clicking_a_result_shows_that_sample(needle_run, monkeypatch):
    run_dir, positions = needle_run
    lines = records(run_dir)
    app = load_and_view(start(run_dir.parent, monkeypatch))
    search_page(app, "haystack")
    frame = next(frame for frame in app.dataframe if frame.key and frame.key.startswith("search_results:"))
    row = [(file, int(line)) for file, line in zip(frame.value["file"], frame.value["line"])].index(positions["haystack_lower"])
    click_row(app, frame, row)
    chosen = lines[positions["haystack_lower"]]
    step_lines = sorted(position for position, line in lines.items() if line["step"] == chosen["step"])  # batch order: file, line
    assert widget(app.slider, "Step Index(3 total steps)").value == chosen["step"] == 2
    assert widget(app.number_input, "Sample index in current step batch").value == step_lines.index(positions["haystack_lower"])
    assert chosen["response"] in [text.value for text in app.text]


# The bundled run answers a user's questions: every response with a phrase, the samples of highest KL (the default
# estimator, the original board's: the run has no meta naming TRL), and the reward per data source.
def test_the_bundled_run_answers_a_users_questions(tmp_path, monkeypatch):
    run_dir, _, lines = bundled_every_key(tmp_path)
    app = load_and_view(start(run_dir.parent, monkeypatch))
    search_page(app, "运泰开 中兴", places="response")
    expected = {position for position, line in lines.items() if "运泰开 中兴" in line["response"]}
    assert 0 < len(expected) < 80 and found_on_page(app) == expected
    assert count_line(app).startswith(f"**{len(expected)}** of 80 loaded samples found")
    widget(app.text_input, "Search prompt and response text").input("").run()
    widget(app.selectbox, "Sort by").set_value("avg_kl_kl")
    widget(app.number_input, "Top N").set_value(3)
    app.run()
    highest = sorted(lines, key=lambda position: kl_of(lines[position]), reverse=True)[:3]
    assert [(file, int(line)) for file, line in zip(results_table(app)["file"], results_table(app)["line"])] == highest
    app.session_state["curve_view"] = "Step-Facets"
    app.run()
    facet_rows = next(tab for tab in curve_views(app) if tab.label == "Step-Facets").dataframe[0].value
    means = dict(zip(facet_rows["text/data_source"], facet_rows["mean reward"]))
    assert means == pytest.approx({source: np.mean([line["reward"] for line in lines.values() if line["data_source"] == source]) for source in ("gsm8k", "math", "code")})


# The bundled tool run: every response with a tool call is found, and the calls of highest KL under TRL's k3 (the
# default its meta gives), over the tokens the policy sampled.
def test_the_bundled_tool_run_finds_every_tool_call(tmp_path, monkeypatch):
    run_dir = bundled(tmp_path, "grpo_tiny_tools_example")
    lines = records(run_dir)
    app = load_and_view(start(run_dir.parent, monkeypatch))
    search_page(app, "<tool_call>", places="response")
    expected = {position for position, line in lines.items() if "<tool_call>" in line["response"]}
    assert 0 < len(expected) < len(lines) and found_on_page(app) == expected
    assert count_line(app).startswith(f"**{len(expected)}** of {len(lines)} loaded samples found")
    calls = plain_search(lines, r"<tool_call>\s*\{", True, False, "response")
    search_page(app, r"<tool_call>\s*\{", regex=True, places="response")
    assert found_on_page(app) == calls
    widget(app.selectbox, "Sort by").set_value("avg_kl_k3")
    widget(app.number_input, "Top N").set_value(3)
    app.run()
    highest = sorted(calls, key=lambda position: kl_of(lines[position], "k3"), reverse=True)[:3]
    assert [(file, int(line)) for file, line in zip(results_table(app)["file"], results_table(app)["line"])] == highest
    assert results_table(app)["avg_kl_k3"].tolist() == pytest.approx([kl_of(lines[p], "k3") for p in highest])


# A long text field is shown as written, its indentation and its leading and trailing newlines included (a critique
# quoting code, say), as the samples pair promises for texts.
def test_a_long_field_keeps_its_indentation_and_outer_whitespace(tmp_path, monkeypatch):
    critique = "\n    def answer():\n        return 42\n    # the model's code, quoted by the verifier\n"
    write_lines(tmp_path / "runs" / "run" / "r.jsonl", [sample(1, critique=critique)])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    app.session_state["other_fields"] = True
    app.run()
    # st.text dedents and strips its body: the board keeps the text as written between two zero-width spaces
    assert [text.value.removeprefix("\u200b").removesuffix("\u200b") for text in widget(app.expander, "Other fields of this line").text] == [critique]


# Another run chosen in the sidebar, loaded.
def choose_run(app: AppTest, name: str) -> AppTest:
    widget(app.sidebar.selectbox, "Choose Log Name").set_value(name)
    return load_and_view(app)


# The Steps filter's widget (a select slider over the run's steps; a slider before).
def steps_filter(app: AppTest):
    return widget([*app.select_slider, *app.slider], "Steps")


# Filters chosen under "Filter by" (each draws its widget).
def choose_filters(app: AppTest, names: list) -> AppTest:
    widget(app.multiselect, "Filter by").set_value(names).run()
    assert not app.exception, app.exception
    return app


# The line counting what was found (a warning when the search was cut); None when none is drawn.
def results_line(app: AppTest) -> str | None:
    return next((line.value for line in [*app.markdown, *app.warning] if "loaded samples found" in line.value), None)


# The board's own module runs the page, so that a test can change its constants (monkeypatch on board).
def own_module_page(tmp_path: Path, root: Path, monkeypatch) -> AppTest:
    page = tmp_path / "own_module_board.py"
    page.write_text("import rl_logging_board as board\n\nif __name__ == '__main__':\n    board.main()\n")
    monkeypatch.setenv("RL_LOGGING_BOARD_ROOT", str(root))
    app = AppTest.from_file(str(page), default_timeout=120)
    app.run()
    return app


# "Other fields of this line" raised on a nested value with bytes that are not UTF-8; it shows the fields as shown (�).
def test_other_fields_of_a_line_with_bytes_that_are_not_utf8_are_shown(tmp_path, monkeypatch):
    run_dir = write_run_lines(tmp_path / "runs", "run", [BAD_UTF8_FIELDS, sample(1)])
    line = shown_records(run_dir)[(RANK_FILES[0], 1)]
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    app.session_state["other_fields"] = True
    app.run()
    assert not app.exception, app.exception
    details = widget(app.expander, "Other fields of this line")
    shown = details.dataframe[0].value
    assert shown["field"].tolist() == ["source"] and shown["value"].tolist() == [json.dumps(line["source"], ensure_ascii=False)]
    assert [json.loads(element.value) for element in details.get("json")] == [line["info"]] and "\ufffd" in line["info"]["source"]


# A regular expression RE2 runs in linear time but with a huge program (a big counted repeat) took seconds per text;
# one larger than SEARCH_PROGRAM is refused as too complex, while ordinary patterns and any literal text are searched.
def test_a_regular_expression_too_complex_for_re2_is_refused(tmp_path, monkeypatch):
    for query in [r"(.*a){1000}x", r"((.*.){30}){30}x", r"((\w|\s)*.){1000}!"]:
        with pytest.raises(ValueError, match="too complex"):
            search_pattern(query, True, False)
        assert search_pattern(query, False, False) is not None  # the same text, literally
    assert search_pattern(r"tool_call>\s*\{", True, False).programsize <= SEARCH_PROGRAM
    assert search_pattern("x" * 5000, False, True) is not None  # a long literal query is no repeat
    write_run_lines(tmp_path / "runs", "run", [sample(1), sample(2)])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    search_page(app, r"(.*a){1000}x", regex=True)
    [error] = [element.value for element in app.error]
    assert "too complex" in error and results_line(app) is None


# The search looked at its SEARCH_SECONDS deadline only every 512 samples, so one slow text after another ran far past
# it; it is checked after every text (a clock that moves one second a look: cut after two texts), and the page warns.
def test_the_search_checks_its_deadline_after_every_text(tmp_path, monkeypatch):
    run_dir = write_run_lines(tmp_path / "runs", "run", [sample(step, response=f"needle {i}") for step in (1, 2, 3) for i in range(4)])
    run = load(run_dir)
    clock = iter(range(1, 1000))
    with monkeypatch.context() as patch:
        patch.setattr(rl_board.reading.search, "time", type("Clock", (), {"perf_counter": staticmethod(lambda: float(next(clock)))}))
        patch.setattr(rl_board.reading.search, "SEARCH_SECONDS", 2.5)  # began at 1: looks at 2 and 3 pass, 4 is past the deadline
        result = search(run, "needle")
    assert result.searched == 2 < len(run.samples) and (result.place > 0).tolist() == [True, True] + [False] * 10
    monkeypatch.setattr(rl_board.reading.search, "SEARCH_SECONDS", 1e-9)
    app = load_and_view(own_module_page(tmp_path, tmp_path / "runs", monkeypatch))
    search_page(app, "needle")
    [warning] = [element.value for element in app.warning if "loaded samples found" in element.value]
    assert "The search stopped after" in warning and "later steps were not searched" in warning
    monkeypatch.setattr(rl_board.reading.search, "SEARCH_SECONDS", 10.0)
    app.run()  # a rerun a moment later shows what the stopped search found: searching again would take its deadline
    assert "The search stopped after" in results_line(app)
    monkeypatch.setattr(board, "STOPPED_KEPT_SECONDS", 0.0)  # once that while is over, it is searched again, never cached
    app.run()
    assert "stopped" not in results_line(app) and "**12**" in results_line(app)


# A number with no finite value (Infinity on every line) raised when chosen under "Filter by"; it and a number with
# one value are offered for sort, and their filter says there is nothing to filter, drawing no slider. A key with no
# number on any line (NaN) is no column at all.
def test_a_number_without_two_finite_values_has_nothing_to_filter(tmp_path, monkeypatch):
    write_run_lines(tmp_path / "runs", "run", [b'{"prompt": "p", "response": "r%d", "reward": %d, "step": %d, "inf": Infinity, "one": 3, "nan": NaN}\n' % (i, i, 1 + i % 2) for i in range(4)])
    app = choose_filters(load_and_view(start(tmp_path / "runs", monkeypatch)), ["extra/inf", "extra/one", "reward"])
    assert {"extra/inf", "extra/one"} <= set(widget(app.selectbox, "Sort by").options)
    assert {"extra/inf", "extra/one"} <= set(widget(app.multiselect, "Filter by").options) and "extra/nan" not in widget(app.multiselect, "Filter by").options
    captions = [caption.value for caption in app.caption]
    assert "extra/inf: no finite value and 4 ±inf (sort by it to find them), nothing to filter." in captions and "extra/one: every finite value is 3, nothing to filter." in captions
    assert [slider.label for slider in app.slider if slider.label.startswith(("extra/", "reward"))] == ["reward"]
    widget(app.selectbox, "Sort by").set_value("extra/inf").run()
    assert not app.exception and results_line(app).startswith("**4** of 4 loaded samples found")


# A range of two values closer than 200 steps of a float (5e-324..1e-323) gave the slider a step of 0, and one of
# -1e308..1e308 a step of inf: both draw a slider over their values, and narrowing it keeps the samples within.
def test_tiny_and_huge_ranges_draw_a_slider(tmp_path, monkeypatch):
    lines = [sample(1, x=5e-324, y=-1e308), sample(2, x=1e-323, y=1e308), sample(2, x=5e-324, y=0.0)]
    write_run_lines(tmp_path / "runs", "run", lines)
    app = choose_filters(load_and_view(start(tmp_path / "runs", monkeypatch)), ["extra/x", "extra/y"])
    for key in ("x", "y"):
        slider = widget(app.slider, f"extra/{key}")
        values = [line[key] for line in lines]
        assert (slider.min, slider.max, slider.value) == (min(values), max(values), (min(values), max(values)))
    assert results_line(app).startswith("**3** of 3 loaded samples found")
    widget(app.slider, "extra/y").set_value((0.0, 1e308)).run()
    assert not app.exception and found_on_page(app) == {(RANK_FILES[0], n) for n, line in enumerate(lines, 1) if 0.0 <= line["y"] <= 1e308}
    widget(app.slider, "extra/x").set_value((1e-323, 1e-323)).run()
    assert not app.exception and found_on_page(app) == {(RANK_FILES[0], n) for n, line in enumerate(lines, 1) if line["x"] == 1e-323 and line["y"] >= 0.0}


# A range's slider spans the finite values; at an end it goes on past it, so a reward of ±inf (the sample a reward
# function's overflow made, which the curves leave out) is found with the range as it opens, and left out only once
# that end is moved. A sample without the number is left out whatever the range.
def test_a_range_at_an_end_takes_the_infinities_beyond_it(tmp_path, monkeypatch):
    rewards = [0.0, 0.25, 0.5, float("inf"), float("-inf"), float("nan")]
    write_run_lines(tmp_path / "runs", "run", [sample(1 + n % 2, reward=reward) for n, reward in enumerate(rewards)])
    app = choose_filters(load_and_view(start(tmp_path / "runs", monkeypatch)), ["reward"])
    slider = widget(app.slider, "reward")
    assert (slider.min, slider.max) == (0.0, 0.5)
    assert found_on_page(app) == {(RANK_FILES[0], n) for n in (1, 2, 3, 4, 5)}
    slider.set_value((0.0, 0.25)).run()
    assert found_on_page(app) == {(RANK_FILES[0], n) for n in (1, 2, 5)}  # 0, 0.25 and -inf, below the range's open end
    widget(app.slider, "reward").set_value((0.25, 0.5)).run()
    assert found_on_page(app) == {(RANK_FILES[0], n) for n in (2, 3, 4)}


# Steps beyond 2**53 (more than JavaScript holds exactly) made the Steps slider raise: it is a select slider over the
# run's steps.
def test_steps_beyond_2_to_the_53_are_filtered_with_a_select_slider(tmp_path, monkeypatch):
    steps = [2**60, 2**61, 2**61 + 2**20]
    write_run_lines(tmp_path / "runs", "run", [sample(step) for step in steps])
    app = choose_filters(load_and_view(start(tmp_path / "runs", monkeypatch)), ["steps"])
    slider = widget(app.select_slider, "Steps")
    assert [int(option) for option in slider.options] == steps and tuple(slider.value) == (steps[0], steps[-1])
    widget(app.select_slider, "Steps").set_value((steps[1], steps[2])).run()
    assert not app.exception and results_line(app).startswith("**2** of 3 loaded samples found, at 2 of 3 steps")


# Max Samples Each Step below the lines per step left a text key only unloaded lines have as a facet with no value
# (Step-Facets raised), and such a number as a field: facets and fields need a value among the loaded samples.
def test_facets_and_fields_need_a_value_among_the_loaded_samples(tmp_path, monkeypatch):
    lines = [sample(step, reward=reward, **({"source": "gsm8k", "score": 0.5} if reward == 3.0 else {})) for step in (1, 2, 3) for reward in (1.0, 2.0, 3.0)]
    run_dir = write_run_lines(tmp_path / "runs", "run", lines)
    whole, part = load(run_dir), load(run_dir, max_samples=2)
    assert (whole.facets, whole.extra_columns) == (["text/source"], ["extra/score"])
    loaded = [lines[line - 1] for line in part.samples["line"]]
    assert len(loaded) == 6 and not any("source" in line for line in loaded)  # the lines with the keys are not loaded
    assert (part.facets, part.extra_columns) == ([], [])
    app = start(tmp_path / "runs", monkeypatch)
    widget(app.sidebar.number_input, "Max Samples Each Step").set_value(2)
    load_and_view(app)
    assert not {"Step-Fields", "Step-Facets"} & {tab.label for tab in curve_views(app)}
    assert not {"text/source", "extra/score"} & set(widget(app.multiselect, "Filter by").options)


# Step-Facets raised when the run had a facet but no number per sample (every reward null): it says so.
def test_step_facets_without_a_number_says_so(tmp_path, monkeypatch):
    write_run_lines(tmp_path / "runs", "run", [b'{"prompt": "p", "response": "r", "reward": null, "step": %d, "source": "a"}\n' % step for step in (1, 2)])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    app.session_state["curve_view"] = "Step-Facets"
    app.run()
    assert not app.exception, app.exception
    tab = next(tab for tab in curve_views(app) if tab.label == "Step-Facets")
    assert [info.value for info in tab.info] == ["No number to draw per value: the loaded samples have no reward or other number."]


# A facet key named "samples" clashed with facet_table's count column (it raised), one named "path" was shown as the
# file's: the table's first column is the full text/<key> name, and Step-Facets draws both.
def test_facet_keys_named_samples_or_path_are_tabled(tmp_path, monkeypatch):
    lines = [sample(step, reward=i, samples=["few", "many"][i], path="x", sample=7) for step in (1, 2) for i in range(2)]
    run_dir = write_run_lines(tmp_path / "runs", "run", lines)
    run = load(run_dir)
    assert run.facets == ["text/path", "text/samples"] and run.samples.sort_values("line")["sample"].tolist() == [0, 1, 0, 1]
    for key in ("samples", "path"):
        table = facet_table(run.samples, f"text/{key}", "reward")
        assert table.columns.tolist() == [f"text/{key}", "samples", "mean reward", "samples with reward"]
        by_value = defaultdict(list)
        for line in lines:
            by_value[line[key]].append(line["reward"])
        assert dict(zip(table[f"text/{key}"], table["samples"])) == {value: len(rewards) for value, rewards in by_value.items()}
        assert dict(zip(table[f"text/{key}"], table["mean reward"])) == pytest.approx({value: np.mean(rewards) for value, rewards in by_value.items()})
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    app.session_state["curve_view"] = "Step-Facets"
    for facet in ("text/samples", "text/path"):
        app.session_state["facet"] = facet
        app.run()
        assert not app.exception, app.exception
        assert next(tab for tab in curve_views(app) if tab.label == "Step-Facets").dataframe[0].value.columns[0] == facet


# A rank file deleted after loading made the search raise: it answers, that file's texts read as empty.
def test_a_search_answers_after_a_rank_file_is_deleted(tmp_path, monkeypatch):
    run_dir = write_run_lines(tmp_path / "runs", "run", [sample(1), sample(2)])
    write_run_lines(tmp_path / "runs", "run", [sample(3), sample(4)], file=RANK_FILES[1])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    (run_dir / RANK_FILES[1]).unlink()
    search_page(app, "p1")
    assert found_on_page(app) == {(RANK_FILES[0], 1)}
    search_page(app, "p3")
    assert results_line(app).startswith("**0** of 4 loaded samples found")


# Filter widgets were keyed by filter name only, so run A's ranges clamped run B's (B's Steps and reward squeezed to
# one value): they are keyed per run folder, and B's filters start at B's full ranges.
def test_another_run_opens_without_the_search_and_its_filters_span_its_own_values(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    write_run_lines(root, "a_run", [sample(step, reward=reward, x=reward * 10, source=source) for step in (1, 2, 3) for reward, source in ((0.0, "gsm8k"), (1.0, "math"))])
    write_run_lines(root, "b_run", [sample(step, reward=reward + 5, y=reward, source=source) for step in (10, 20) for reward, source in ((0.0, "code"), (1.0, "code2"))])
    app = choose_run(start(root, monkeypatch), "a_run")
    choose_filters(app, ["steps", "reward", "extra/x", "text/source"])
    widget(app.slider, "reward").set_value((0.5, 1.0))
    steps_filter(app).set_value((2, 3))
    widget(app.multiselect, "text/source").set_value(["math"])
    app.run()
    assert results_line(app).startswith("**2** of 6 loaded samples found")
    widget(app.text_input, "Search prompt and response text").input("p").run()
    choose_run(app, "b_run")  # another run opens with no search: no text, no filter, no order
    assert widget(app.multiselect, "Filter by").value == [] and widget(app.text_input, "Search prompt and response text").value == ""
    choose_filters(app, ["steps", "reward", "text/source"])
    assert tuple(steps_filter(app).value) == (10, 20) and widget(app.slider, "reward").value == (5.0, 6.0)
    assert widget(app.multiselect, "text/source").value == [] and widget(app.multiselect, "text/source").options == ["code", "code2"]
    assert results_line(app).startswith("**4** of 4 loaded samples found, at 2 of 2 steps")


# A range left at its full extent stayed at the old extent when a live run grew, leaving the new steps and values
# out: it follows the new extent, while an end the user moved stays where it was put.
def test_a_range_at_its_full_extent_follows_a_growing_run(tmp_path, monkeypatch):
    run_dir = write_run_lines(tmp_path / "runs", "live", [sample(step, reward=reward) for step in (1, 2) for reward in (0.0, 1.0)])
    app = choose_filters(load_and_view(start(tmp_path / "runs", monkeypatch)), ["steps", "reward"])
    widget(app.slider, "reward").set_value((0.5, 1.0)).run()  # the low end moved, the high one left at the top
    assert results_line(app).startswith("**2** of 4 loaded samples found")
    with open(run_dir / RANK_FILES[0], "ab") as file:
        file.write(b"".join(json.dumps(sample(step, reward=reward)).encode() + b"\n" for step in (3, 4) for reward in (0.5, 2.0)))
    load_and_view(app)
    assert tuple(steps_filter(app).value) == (1, 4) and widget(app.slider, "reward").value == (0.5, 2.0)
    kept = [line for line in records(run_dir).values() if 0.5 <= line["reward"] <= 2.0]
    assert results_line(app).startswith(f"**{len(kept)}** of 8 loaded samples found, at {len({line['step'] for line in kept})} of 4 steps")


# An invalid regular expression with a filter chosen showed the error and the filter's samples as if found: the error
# alone is shown.
def test_an_invalid_regular_expression_with_a_filter_lists_nothing(tmp_path, monkeypatch):
    write_run_lines(tmp_path / "runs", "run", [sample(step, reward=i) for step in (1, 2) for i in range(2)])
    app = choose_filters(load_and_view(start(tmp_path / "runs", monkeypatch)), ["reward"])
    search_page(app, "needle(", regex=True)
    [error] = [element.value for element in app.error]
    assert error.startswith("Not a valid regular expression: ") and results_line(app) is None and results_table(app) is None


# A key name from the data was rendered as markdown in the widget labels (an image fetched from outside the server,
# bold text): labels, captions and the results line's "by <column>" show it escaped (markdown_literal).
def test_key_names_are_escaped_in_labels_captions_and_the_results_line(tmp_path, monkeypatch):
    write_run_lines(tmp_path / "runs", "run", [sample(step, reward=i, **{MARKDOWN_KEY: i / 2, "_one_*": 1}) for step in (1, 2) for i in range(3)])
    column = "extra/" + MARKDOWN_KEY
    app = choose_filters(load_and_view(start(tmp_path / "runs", monkeypatch)), [column, "extra/_one_*"])
    slider = widget(app.slider, markdown_literal(column))
    assert re.search(r"(?<!\\)[!\[\]()*]", slider.label) is None and (slider.min, slider.max) == (0.0, 1.0)  # nothing left to render
    assert re.sub(r"\\(.)", r"\1", slider.label).replace("\u200b", "") == column  # and the name as logged, read
    assert f"{markdown_literal('extra/_one_*')}: every finite value is 1, nothing to filter." in [caption.value for caption in app.caption]
    widget(app.selectbox, "Sort by").set_value(column)
    widget(app.number_input, "Top N").set_value(2)
    app.run()
    assert not app.exception and f"the results are the top 2 by {markdown_literal(column)}" in results_line(app)
    assert results_table(app)[column].tolist() == [1.0, 1.0]


# A live refresh that adds results above the one clicked: the check stayed on the row's place, over another sample,
# and a click there did nothing. The table is drawn anew with no row checked, the view stays on the sample it showed,
# and a click on the new first row opens its sample.
def test_a_clicked_result_stays_checked_only_while_its_row_holds_it(tmp_path, monkeypatch):
    path = write_lines(tmp_path / "runs" / "run" / "r.jsonl", [sample(step, response=f"needle {step}.{k}") for step in (1, 2) for k in range(2)])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    search_page(app, "needle")
    widget(app.selectbox, "Sort by").set_value("step")
    app.run()
    frame = next(frame for frame in app.dataframe if frame.key and frame.key.startswith("search_results:"))
    first = (int(frame.value["step"].iat[0]), int(frame.value["sample"].iat[0]))
    click_row(app, frame, 0)
    assert widget(app.slider, "Step Index(2 total steps)").value == first[0]
    with open(path, "a") as file:  # a step the training wrote since: its results come first
        file.writelines(json.dumps(sample(3, response=f"needle 3.{k}")) + "\n" for k in range(2))
    load_and_view(app)
    frame = next(frame for frame in app.dataframe if frame.key and frame.key.startswith("search_results:"))
    assert int(frame.value["step"].iat[0]) == 3 and not app.session_state[frame.key].selection.rows
    assert widget(app.slider, "Step Index(3 total steps)").value == first[0]
    click_row(app, frame, 0)
    assert widget(app.slider, "Step Index(3 total steps)").value == 3
    names = list(app.session_state)
    assert board.StateKey.PICKED_ROW in names and [name for name in names if name.endswith(":picked")] == []  # one entry, not one a table
