"""Finding samples (issue 17): search, filters, fields outside the format, facets and export, checked against the raw JSONL."""

import csv
import io
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import rl_board.reading.search
import rl_logging_board as board
from rl_board.metrics import SampleFilter, facet_table, filter_columns, filter_mask
from rl_board.reading.lines import FIELD_COLUMNS
from rl_board.reading.search import (
    FORMULA_STARTS,
    SNIPPET_AFTER,
    SNIPPET_BEFORE,
    SNIPPET_MATCH,
    RunTexts,
    export_csv,
    export_jsonl,
    export_parquet,
    export_table,
    match_snippets,
    search_pattern,
    search_samples,
    spreadsheet_csv,
)

# Each test loads runs it wrote under tmp_path (bundled runs are copied there first); conftest's private_index_cache
# sets RL_LOGGING_BOARD_CACHE to the test's own tmp folder for every load.
from tests.conftest import PROJECT
from tests.support.runs import load, sample, write_lines
from tests.support.search_runs import (
    BAD_UTF8_FIELDS,
    EVERYWHERE,
    FORMAT_USED,
    QUERIES,
    RANK_FILES,
    bundled,
    bundled_every_key,
    found,
    kl_of,
    needle_run,  # noqa: F401  (fixtures)
    plain_search,
    positions_of,
    raw_lines,
    records,
    search,
    shown_records,
    text_of,
    write_fields_run,
    write_run_lines,
)


# Search: each query finds exactly the lines holding its needle, and the independent re reading of the files agrees
# (which also proves the run holds no stray match a wrong search would be excused by).
@pytest.mark.parametrize(("query", "regex", "match_case", "places", "needles"), QUERIES)
def test_a_search_finds_exactly_the_lines_holding_the_needle(needle_run, query, regex, match_case, places, needles):
    run_dir, positions = needle_run
    expected = {positions[name] for name in needles}
    assert plain_search(records(run_dir), query, regex, match_case, places) == expected
    assert found(load(run_dir), query, regex, match_case, places) == expected


# Chat messages are searched as their JSON text (a compact line too), a line only Python's json decodes (NaN) is
# searched, and a prompt written with escapes is found by the text they stand for; the table shows them the same way.
def test_chat_prompts_nan_lines_and_escaped_texts_are_searched_as_shown(needle_run):
    run_dir, positions = needle_run
    run = load(run_dir)
    by_position = {(Path(path).name, int(line)): row for row, (path, line) in enumerate(zip(run.samples["path"], run.samples["line"]))}
    assert np.isnan(run.samples["prompt_at"].iat[by_position[positions["nan"]]])  # the general decode path: no text spans
    assert found(run, '[{"role": "user", "content": "光速, again"}]', places="prompt") == {positions["chat_compact"]}
    assert found(run, "a needle beside NaN", match_case=True, places="response") == {positions["nan"]}
    assert found(run, 'say "hi"\nthen café, 中文', match_case=True, places="prompt") == {positions["escapes"]}
    assert found(run, "\\u00e9") == set() and found(run, '\\"hi') == set()  # the escapes themselves are not the text
    table = export_table(run.samples)
    lines = records(run_dir)
    assert table["prompt"].tolist() == [text_of(lines[(file, line)]["prompt"]) for file, line in zip(table["file"], table["line"])]


# A line with bytes that are not UTF-8 is shown with � in their place (the load report notes it): search reads the
# same text as shown, so the text around the � is found as it is shown.
def test_a_text_with_invalid_utf8_is_searched_as_shown(tmp_path):
    write_lines(tmp_path / "run" / "r.jsonl", [b'{"prompt": "p", "response": "answer \xff here", "reward": 1, "step": 1}\n', sample(1)])
    run = load(tmp_path / "run")
    assert export_table(run.samples)["response"].tolist() == ["answer \ufffd here", "r1"]
    assert found(run, "here") == {("r.jsonl", 1)}
    assert found(run, "answer \ufffd here") == {("r.jsonl", 1)}


# The deadline was looked at only between texts: one long response with a pattern RE2 cannot run as a DFA took its
# whole time (1.4 s a MB; 22 s for 16 MB) past it. A long text is now searched on a thread the deadline stops waiting
# for; the texts before it keep their matches, and a long text found in time is found as re finds it.
@pytest.mark.slow
def test_the_deadline_stops_the_wait_for_one_long_text(tmp_path, monkeypatch):
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz ", dtype=np.uint8)
    slow = letters[np.random.default_rng(0).integers(0, len(letters), 1_500_000)].tobytes().decode()
    found_late = "x" * 100_000 + "a" + "b" * 300 + "Q"
    responses = ["b" * 300 + "Q", "a" + "c" * 300 + "Q", found_late, slow, "a" + "d" * 300 + "Q"]
    run = load(write_lines(tmp_path / "run" / "r.jsonl", [sample(1, response=text) for text in responses]).parent)
    pattern = "[a-m][a-z ]{300}Q"
    expected = [bool(re.search(pattern, text)) for text in responses]
    monkeypatch.setattr(rl_board.reading.search, "SEARCH_SECONDS", 0.3)
    began = time.perf_counter()
    result = search(run, pattern, regex=True, match_case=True, places="response")
    assert time.perf_counter() - began < 1.2  # the slow text alone takes about 2 s
    assert result.searched == 3 and (result.place[:3] > 0).tolist() == expected[:3] == [False, True, True]
    assert result.end[2] - result.start[2] == 302 and result.start[2] == re.search(pattern, found_late).start()
    monkeypatch.setattr(rl_board.reading.search, "SEARCH_SECONDS", 60.0)
    assert (search(run, pattern, regex=True, match_case=True, places="response").place > 0).tolist() == expected


# A long text's search no longer waited for goes on alone: a process that ends meanwhile (a server stopped, a notebook
# closed) ends at once, and two sessions' long texts are searched side by side. On one shared thread, the exit waited
# for its end (20 s for 8 MB, a Streamlit server deaf to Ctrl-C meanwhile), and the next search's long texts waited too.
def test_a_search_left_behind_neither_holds_the_exit_nor_the_next_search(tmp_path):
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz ", dtype=np.uint8)
    slow = letters[np.random.default_rng(1).integers(0, len(letters), 3_000_000)].tobytes().decode()
    write_lines(tmp_path / "run" / "r.jsonl", [sample(1, response=slow), sample(2, response="a" + "b" * 300 + "Q" + "x" * 100_000)])
    script = f"""
import time
import rl_board.reading.search as search
from tests.support.runs import load
from tests.support.search_runs import search as find
run = load({str(tmp_path / "run")!r})
search.SEARCH_SECONDS = 0.3
began = time.perf_counter()
stopped = find(run, "[a-m][a-z ]{{300}}Q", regex=True, match_case=True, places="response")
search.SEARCH_SECONDS = 60.0
later = find(run, "[a-b]b{{300}}Q", regex=True, match_case=True, places="response")
print(stopped.searched, later.searched, "".join("+" if place else "-" for place in later.place), time.perf_counter() - began, time.time())
"""
    shown = subprocess.run([sys.executable, "-c", script], cwd=PROJECT, env=os.environ | {"RL_LOGGING_BOARD_CACHE": str(tmp_path / "cache")}, capture_output=True, text=True, timeout=120)
    ended = time.time()
    stopped, later, found, searching, printed = shown.stdout.split()
    assert (stopped, later, found) == ("0", "2", "-+"), shown.stderr
    assert float(searching) < 2.0 and ended - float(printed) < 1.5  # the slow text alone takes about 4 s


# Keys outside the format: numbers (booleans as 0/1, a huge integer as its float) are extra/ columns, strings of at
# most 64 characters text/ columns, nested and longer values are not in the index but counted; the first 32 of a line
# are kept; a string field with at most 50 distinct values is a facet.
def test_fields_outside_the_format_become_columns_and_facets(tmp_path):
    lines = write_fields_run(tmp_path / "run")
    run = load(tmp_path / "run")
    samples = run.samples.sort_values("line")
    assert samples["line"].tolist() == list(range(1, len(lines) + 1))
    numbers = {"flag", "count", "score", "huge", "mixed"} | {f"k{k:02d}" for k in range(32)}
    texts = {"label", "ident", "fifty", "fiftyone", "mixed", "edge64"}
    assert {c for c in samples.columns if c.startswith(("extra/", "text/"))} == {f"extra/{k}" for k in numbers} | {f"text/{k}" for k in texts}
    assert run.extra_columns == sorted(f"extra/{k}" for k in numbers)
    assert run.facets == ["text/edge64", "text/fifty", "text/label", "text/mixed"]
    for key in numbers:
        expected = [float(line[key]) if isinstance(line.get(key), (bool, int, float)) else math.nan for line in lines]
        assert samples[f"extra/{key}"].tolist() == pytest.approx(expected, nan_ok=True), key
    assert samples["extra/flag"].tolist()[:2] == [1.0, 0.0] and samples["extra/huge"].iat[1] == float(2**70 + 1)
    for key in texts:
        expected = [line[key] if isinstance(line.get(key), str) else None for line in lines]
        assert [None if pd.isna(value) else value for value in samples[f"text/{key}"]] == expected, key
    assert samples["extra_keys"].tolist() == [len(set(line) - FORMAT_USED) for line in lines]


# facet_table: per data source, the number of samples and the mean of a number, as a plain count of the lines.
def test_facet_counts_and_means_equal_a_recount_of_the_lines(tmp_path):
    _, run, lines = bundled_every_key(tmp_path)
    assert len(run.samples) == len(lines) == 80 and "text/data_source" in run.facets
    values_of = {
        "reward": lambda line: line["reward"],
        "rewards/accuracy_reward": lambda line: line["rewards_per_func"]["accuracy_reward"],
        "extra/difficulty": lambda line: line["difficulty"],
        "extra/acc": lambda line: float(line["acc"]),
    }
    for column, value_of in values_of.items():
        by_source = defaultdict(list)
        for line in lines.values():
            by_source[line["data_source"]].append(value_of(line))
        table = facet_table(run.samples, "text/data_source", column)
        assert table["samples"].tolist() == sorted((len(values) for values in by_source.values()), reverse=True)
        assert dict(zip(table["text/data_source"], table["samples"])) == {source: len(values) for source, values in by_source.items()}
        assert dict(zip(table["text/data_source"], table[f"mean {column}"])) == pytest.approx({source: np.mean(values) for source, values in by_source.items()})


# Each filter keeps the samples a plain reading of the lines keeps: a step range, a number's range (inclusive), a
# facet's values, truncated completions, members of zero-signal groups, and all of them at once.
def test_each_filter_keeps_what_a_plain_reading_keeps(tmp_path):
    _, run, lines = bundled_every_key(tmp_path)
    rewards = defaultdict(set)
    for line in lines.values():
        rewards[(line["step"], line["group_id"])].add(line["reward"])
    zero_signal = {position for position, line in lines.items() if len(rewards[(line["step"], line["group_id"])]) == 1}
    checks = [
        (SampleFilter(steps=(1, 3)), lambda line: 1 <= line["step"] <= 3),
        (SampleFilter(ranges=(("reward", 0.5, 1.0),)), lambda line: 0.5 <= line["reward"] <= 1.0),
        (SampleFilter(ranges=(("extra/acc", 1.0, 1.0), ("avg_kl_kl", 0.002, 0.02))), lambda line: line["acc"] and 0.002 <= kl_of(line) <= 0.02),
        (SampleFilter(facets=(("text/data_source", ("math", "code")),)), lambda line: line["data_source"] in ("math", "code")),
        (SampleFilter(truncated=True), lambda line: line["truncated"]),
    ]
    for sample_filter, keep in checks:
        expected = {position for position, line in lines.items() if keep(line)}
        assert 0 < len(expected) < len(lines), sample_filter  # a filter that keeps all or nothing proves little
        assert positions_of(run.samples[filter_mask(run.samples, sample_filter)]) == expected, sample_filter
    assert 0 < len(zero_signal) < len(lines)
    assert positions_of(run.samples[filter_mask(run.samples, SampleFilter(zero_signal=True))]) == zero_signal
    everything = SampleFilter(steps=(1, 4), ranges=(("reward", 0.5, 1.5),), facets=(("text/data_source", ("gsm8k", "code")),), truncated=True)
    expected = {p for p, line in lines.items() if line["step"] >= 1 and 0.5 <= line["reward"] <= 1.5 and line["data_source"] in ("gsm8k", "code") and line["truncated"]}
    assert 0 < len(expected) < sum(line["truncated"] for line in lines.values())
    assert positions_of(run.samples[filter_mask(run.samples, everything)]) == expected
    assert filter_columns(run, "k3")[:9] == [
        "reward", "rewards/accuracy_reward", "rewards/format_reward", "advantage", "response_tokens_len", "response_len", "avg_log_ratio", "avg_kl_k3", "avg_entropy",
    ]
    assert filter_columns(run, "k3")[9:] == run.extra_columns == ["extra/acc", "extra/difficulty"]


# A range keeps both its ends and leaves out a sample without the number (NaN reward).
def test_a_range_keeps_its_ends_and_leaves_out_missing_numbers(needle_run):
    run_dir, positions = needle_run
    run, lines = load(run_dir), records(run_dir)
    for low, high in [(0.25, 0.5), (-math.inf, math.inf)]:
        expected = {position for position, line in lines.items() if low <= line["reward"] <= high}
        assert positions["nan"] not in expected and {0.25, 0.5} <= {lines[p]["reward"] for p in expected}
        assert positions_of(run.samples[filter_mask(run.samples, SampleFilter(ranges=(("reward", low, high),)))]) == expected


# The texts read for search follow the files: lines appended since are read in, and a file rewritten in place is read
# anew rather than answered from the old texts at the same offsets.
def test_the_searched_texts_follow_appended_and_rewritten_files(tmp_path):
    path = write_lines(tmp_path / "run" / "r.jsonl", [sample(1, response="old words"), sample(1, response="more old words")])
    texts = RunTexts()

    def found_now(query):
        run = load(tmp_path / "run")
        return positions_of(run.samples[search_samples(texts, run.samples, search_pattern(query, False, False), EVERYWHERE).place > 0])

    assert found_now("old") == {("r.jsonl", 1), ("r.jsonl", 2)}
    with open(path, "ab") as file:
        file.write(json.dumps(sample(2, response="new words")).encode() + b"\n")
    assert found_now("new") == {("r.jsonl", 3)} and found_now("old") == {("r.jsonl", 1), ("r.jsonl", 2)}
    write_lines(path, [sample(1, response="odd wards"), sample(1, response="more odd wards")])  # the same offsets and sizes
    assert found_now("old") == set() and found_now("odd wards") == {("r.jsonl", 1), ("r.jsonl", 2)}


# JSONL export: the lines as they are in the files, byte for byte (escapes, NaN and UTF-8 included), in the rows' order.
def test_the_jsonl_export_is_the_source_lines_byte_for_byte(needle_run):
    run_dir, positions = needle_run
    run = load(run_dir)
    source = raw_lines(run_dir)
    rows = run.samples
    exported = export_jsonl(rows)
    assert exported == b"".join(source[position] + b"\n" for position in zip((Path(p).name for p in rows["path"]), rows["line"]))
    assert exported.count(b"\n") == len(records(run_dir)) == len(rows)
    for name in ("escapes", "nan", "chat_compact"):
        assert source[positions[name]] + b"\n" in exported
    some = rows[rows["step"] == 2].iloc[::-1]  # any rows, in their own order
    assert export_jsonl(some).split(b"\n")[:-1] == [source[(Path(p).name, line)] for p, line in zip(some["path"], some["line"])]


# CSV and Parquet exports read back equal the export table, and that table equals the lines: texts with CJK,
# newlines, commas, quotes and tabs, chat prompts as JSON, numbers (NaN as missing) and the fields outside the format.
def test_csv_and_parquet_exports_read_back_equal_the_table_and_the_lines(needle_run, tmp_path):
    run_dir, _ = needle_run
    fields_dir = tmp_path / "fields"
    write_fields_run(fields_dir)
    for directory in (run_dir, fields_dir, bundled(tmp_path, "generated_every_key")):
        run, lines = load(directory), records(directory)
        table = export_table(run.samples)
        ordered = [lines[(file, int(line))] for file, line in zip(table["file"], table["line"])]
        assert table["prompt"].tolist() == [text_of(line["prompt"]) for line in ordered]
        assert table["response"].tolist() == [text_of(line["response"]) for line in ordered]
        assert table["reward"].tolist() == pytest.approx([line["reward"] for line in ordered], nan_ok=True)
        assert table["step"].tolist() == [line["step"] for line in ordered]
        for column in [c for c in table.columns if c.startswith(("extra/", "text/"))]:
            key = column.split("/", 1)[1]
            if column.startswith("text/"):
                assert [None if pd.isna(v) else v for v in table[column]] == [line.get(key) if isinstance(line.get(key), str) else None for line in ordered], column
            else:
                expected = [float(line[key]) if isinstance(line.get(key), (bool, int, float)) else math.nan for line in ordered]
                assert table[column].tolist() == pytest.approx(expected, nan_ok=True), column

        read = pd.read_csv(io.StringIO(export_csv(run.samples)), dtype=str, keep_default_na=False)
        assert read.columns.tolist() == table.columns.tolist()
        for column in table.columns:
            if pd.api.types.is_numeric_dtype(table[column]):
                assert pd.to_numeric(read[column].replace("", np.nan)).tolist() == pytest.approx(table[column].astype(float).tolist(), nan_ok=True, rel=1e-15), column
            else:
                shown = ["" if pd.isna(value) else str(value) for value in table[column]]
                assert read[column].tolist() == ["'" + text if text.startswith(FORMULA_STARTS) else text for text in shown], column
        pd.testing.assert_frame_equal(pd.read_parquet(io.BytesIO(export_parquet(run.samples))), table)
        step = export_table(run.step_rows(2))  # the step in view: its batch, in batch order
        assert step["sample"].tolist() == list(range(len(step))) and list(zip(step["file"], step["line"])) == sorted(p for p, line in lines.items() if line["step"] == 2)
        if directory == run_dir:
            assert any(all(part in text for part in (',', '"quoted"', "\n", "\t", "中文")) for text in table["response"])
    assert table["rewards/accuracy_reward"].notna().all() and "group_id" in table and "ground_truth" in table


# ==== Review of issue 17: each defect found, as its own check ====


# A key outside the format whose string (or nested value) holds bytes that are not UTF-8 made the whole load fail;
# it loads, the string as shown (�).
def test_a_key_outside_the_format_with_bytes_that_are_not_utf8_loads_as_shown(tmp_path):
    run_dir = write_run_lines(tmp_path, "run", [sample(1), BAD_UTF8_FIELDS, sample(2, source="plain")])
    run, lines = load(run_dir), shown_records(run_dir)
    samples = run.samples.sort_values("line")
    assert [None if pd.isna(value) else value for value in samples["text/source"]] == [None, lines[(RANK_FILES[0], 2)]["source"], "plain"]
    assert "\ufffd" in samples["text/source"].iat[1]
    row = samples.iloc[1]
    assert board.load_other_fields(row["index_id"], row["path"], int(row["offset"]), int(row["length"])) == {key: lines[(RANK_FILES[0], 2)][key] for key in ("source", "info")}


# An extra number logged as NaN (or null) became +inf, first in every "highest first"; 1.5e308 became inf too. NaN and
# null stay missing and a float stays itself; an integer beyond a float's range (which made the load raise) is
# infinite, with its sign.
def test_an_extra_nan_stays_missing_and_only_integers_beyond_floats_are_infinite(tmp_path):
    def as_number(value):
        try:
            return math.nan if value is None else float(value)
        except OverflowError:  # an integer beyond a float's range
            return math.inf if value > 0 else -math.inf

    def extra_acc(name, values) -> tuple[list, list]:
        run_dir = write_run_lines(tmp_path, name, [b'{"prompt": "p", "response": "r", "reward": 1, "step": %d, "acc": %s}\n' % (1 + i % 2, value) for i, value in enumerate(values)])
        run = load(run_dir)
        return run.samples.sort_values("line")["extra/acc"].tolist(), [as_number(line["acc"]) for line in shown_records(run_dir).values()]

    loaded, expected = extra_acc("floats", [b"0.5", b"NaN", b"null", b"1.5e308", b"-1.5e308", b"0.25"])
    assert loaded == pytest.approx(expected, nan_ok=True) and math.isnan(loaded[1]) and math.isnan(loaded[2]) and loaded[3:5] == [1.5e308, -1.5e308]
    top = pd.Series(loaded, index=range(1, 7)).sort_values(ascending=False, na_position="last").index.tolist()
    assert top[:2] == [4, 1] and set(top[-2:]) == {2, 3}  # highest first: the NaN and null lines last, not first
    loaded, expected = extra_acc("integers", [b"1" + b"0" * 400, b"-1" + b"0" * 400, b"7"])
    assert loaded == expected == [math.inf, -math.inf, 7.0]


# A key of its own on every line (an id as the key) made a full-length column per line, memory growing with lines x
# keys; a file keeps at most FIELD_COLUMNS columns of keys outside the format, the keys every line has among them.
def test_a_key_per_line_keeps_at_most_field_columns_columns(tmp_path):
    def line(i):
        own = {f"id_{i}": i} if i % 2 else {f"t_{i}": "x"}
        return sample(1 + i // 100, reward=1.0, rewards_per_func={"acc": i / 600}, acc=i, **own)

    run_dir = write_run_lines(tmp_path, "run", [line(i) for i in range(600)])
    for _ in range(2):
        run, lines = load(run_dir), records(run_dir)
        columns = [column for column in run.samples.columns if column.startswith(("rewards/", "extra/", "text/"))]
        assert len(columns) <= 256 and FIELD_COLUMNS == 256
        samples = run.samples.sort_values(["path", "line"])
        ordered = [lines[(Path(path).name, line)] for path, line in zip(samples["path"], samples["line"])]
        assert samples["extra/acc"].tolist() == [line["acc"] for line in ordered]
        assert samples["rewards/acc"].tolist() == pytest.approx([line["rewards_per_func"]["acc"] for line in ordered])
        for column in columns:
            if column.startswith(("extra/id_", "text/t_")):
                key = column.split("/", 1)[1]
                assert samples[column].notna().tolist() == [key in line for line in ordered], column
        with open(run_dir / RANK_FILES[0], "ab") as file:  # a grown file, loaded again, keeps within the bound too
            file.write(b"".join(json.dumps(line(i)).encode() + b"\n" for i in range(600, 700)))


# The result says where the first match is: in the prompt only when the response has none, and its snippet marks the
# text as written (the case of the line, not of the query), whitespace made visible.
def test_a_match_is_placed_and_marked_as_written(needle_run):
    run_dir, positions = needle_run
    run = load(run_dir)

    def snippets(query, regex=False) -> dict:
        result = search(run, query, regex)
        hit = result.place > 0
        rows = run.samples[hit]
        texts = match_snippets(RunTexts(), rows, result.place[hit], result.start[hit], result.end[hit])
        return {(Path(path).name, int(line)): (int(place), text) for path, line, place, text in zip(rows["path"], rows["line"], result.place[hit], texts)}

    assert snippets("HAYSTACK")[positions["haystack_mixed"]] == (2, "looking for the ⟦HayStack⟧ here")
    assert snippets("zebra")[positions["prompt_only"]] == (1, "a ⟦zebra⟧ crossing in the prompt")
    assert snippets("押韵诗句")[positions["cjk"]] == (2, "请写两句⟦押韵诗句⟧。")
    assert snippets(r"line\ssecond", True)[positions["newline"]] == (2, "first ⟦line\\nsecond⟧ line")
    assert snippets("café")[positions["escapes"]] == (1, 'say "hi"\\nthen ⟦café⟧, 中文')
    assert snippets("prompt|response", True)[positions["anchors"]] == (2, "omega ⟦response⟧ here")  # the response first
    # so many bytes each side (3 a character here): the character cut at an edge is left out, not shown broken
    before, after = (SNIPPET_BEFORE - 1) // 3, SNIPPET_AFTER // 3
    assert snippets("针在这里")[positions["long_cjk"]] == (2, "…" + "中" * before + "a⟦针在这里⟧" + "文" * after + "…")


# Texts with bytes that are not UTF-8 were left unsearched when they also held an escape, or were chat messages: the
# search finds each as the step view shows it (� for the bad bytes, the escapes decoded).
def test_texts_with_bad_bytes_are_searched_as_shown_with_escapes_and_in_chat_prompts(tmp_path):
    run_dir = write_run_lines(tmp_path, "run", [
        b'{"prompt": "p", "response": "caf\xe9 needle\\n", "reward": 1, "step": 1}\n',
        b'{"prompt": "caf\xe9 \\"needle\\"", "response": "r", "reward": 1, "step": 1}\n',
        b'{"prompt": [{"role": "user", "content": "caf\xe9 needle"}], "response": "r", "reward": 1, "step": 1}\n',
        b'{"prompt": "p", "response": "caf\xe9 needle", "reward": 1, "step": 2}\n',
    ])
    run, lines = load(run_dir), shown_records(run_dir)
    samples = run.samples.sort_values("line")
    place = search(run, "needle").place[samples.index]
    assert place.tolist() == [2 if "needle" in line["response"] else 1 if "needle" in text_of(line["prompt"]) else 0 for line in lines.values()] == [2, 1, 1, 2]
    for query, places in [("caf\ufffd needle\n", "response"), ('caf\ufffd "needle"', "prompt"), ('"content": "caf\ufffd needle"', "prompt")]:
        assert found(run, query, places=places) == plain_search(lines, query, False, False, places) != set(), query
    result = search(run, "needle", places="prompt")
    hit = result.place > 0
    snippets = match_snippets(RunTexts(), run.samples[hit], result.place[hit], result.start[hit], result.end[hit])
    assert sorted(snippets) == ['[{"role": "user", "content": "caf\ufffd ⟦needle⟧"}]', 'caf\ufffd "⟦needle⟧"']


# A match longer than SNIPPET_MATCH shows its two ends and counts the bytes between (a greedy `x+` on a 2 MB response
# put the whole response in its table cell, and a thousand results could send GBs to the browser).
def test_a_long_match_shows_its_ends_and_counts_the_rest(tmp_path):
    response = "before " + "x" * 2_000_000 + "é after"
    write_lines(tmp_path / "run" / "r.jsonl", [sample(1, response=response), sample(1, response="a short xxx one")])
    run = load(tmp_path / "run")
    result = search(run, "x+é|x+", regex=True, places="response")
    snippets = match_snippets(RunTexts(), run.samples, result.place, result.start, result.end)
    half = SNIPPET_MATCH // 2
    matched = len(("x" * 2_000_000 + "é").encode())
    assert snippets[0] == f"before ⟦{'x' * half}…({matched - 2 * half:,} bytes)…{('x' * half + 'é').encode()[-half:].decode()}⟧ after"
    assert snippets[1] == "a short ⟦xxx⟧ one" and len(snippets[0]) < 300


# A CSV is opened in spreadsheets: model-written text that starts as a formula is shown, not run, and a lone carriage
# return stays inside its cell.
def test_the_csv_download_neither_runs_a_formula_nor_splits_a_row(tmp_path):
    hostile = ['=HYPERLINK("http://evil.invalid","click")', "+1+1", "-2+3", "@SUM(A1)", "\t=1", "progress 10%\r20%\rdone", "fine"]
    write_lines(tmp_path / "run" / "r.jsonl", [sample(1, response=text, reward=-1.5, **{"=bad": 1, "note": text}) for text in hostile])
    text = export_csv(load(tmp_path / "run").samples)
    rows = list(csv.reader(io.StringIO(text)))
    header, body = rows[0], rows[1:]
    assert len(body) == len(hostile) and "'=bad" not in header and "extra/=bad" in header  # a name's start: extra/
    responses = [row[header.index("response")] for row in body]
    assert responses == ["'" + text if text[0] in "=+-@\t" else text for text in hostile]
    assert [row[header.index("reward")] for row in body] == ["-1.5"] * len(hostile)  # numbers stay numbers


# A number the board keeps as text (a group id, a ground truth: its lines' JSON numbers) is exported as that number, not
# with a formula's ' in front: a spreadsheet reads "-1" as -1, and "-1+1" is still a formula.
def test_the_csv_download_keeps_numbers_kept_as_text(tmp_path):
    write_lines(tmp_path / "run" / "r.jsonl", [sample(1, group_id=-1, ground_truth=-5), sample(1, group_id="-1+1", ground_truth="-3.5e2")])
    rows = list(csv.DictReader(io.StringIO(export_csv(load(tmp_path / "run").samples))))
    assert [(row["group_id"], row["ground_truth"]) for row in rows] == [("-1", "-5"), ("'-1+1", "-3.5e2")]


# A list or mapping in a cell (What changed's image paths, a chat prompt) is written as JSON that a spreadsheet or a
# script reads back, not as Python's repr.
def test_the_csv_download_writes_lists_and_mappings_as_json():
    table = pd.DataFrame({
        "images": [["images/ä.png", None], [], np.array(["x.png"], dtype=object)],
        "prompt": [[{"role": "user", "content": "=1+1"}], {"k": 1.5}, "plain"],
        "reward": [1.0, 0.5, 0.0],
    })
    rows = list(csv.reader(io.StringIO(spreadsheet_csv(table))))
    assert rows[1:] == [
        ['["images/ä.png", null]', '[{"role": "user", "content": "=1+1"}]', "1.0"],
        ["[]", '{"k": 1.5}', "0.5"],
        ['["x.png"]', "plain", "0.0"],
    ]
    assert [json.loads(row[0]) for row in rows[1:]] == [["images/ä.png", None], [], ["x.png"]]


# A file rewritten since the run was loaded (a relaunch): the JSONL download holds no bytes that are not a line of the
# step it was loaded as (those where a line was are now parts of others).
def test_the_jsonl_download_leaves_out_lines_that_changed_since_the_load(tmp_path):
    path = write_lines(tmp_path / "run" / "r.jsonl", [sample(1, response="a" * 10), sample(2, response="b" * 10), sample(3)])
    rows = load(tmp_path / "run").samples
    assert export_jsonl(rows) == path.read_bytes()
    write_lines(path, [sample(1, response="a longer response " * 3), sample(2), sample(3, response="c" * 50)])
    assert export_jsonl(rows) == b""  # each old place now holds part of a longer line, or of two


# Searches left behind at their deadline each kept a core until their text's end: reruns stopping one after another
# piled them up on every core. At most a core's worth run at once; a search that finds none free stops at its deadline.
def test_searches_left_behind_take_at_most_a_core_each(tmp_path, monkeypatch):
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz ", dtype=np.uint8)
    slow = letters[np.random.default_rng(2).integers(0, len(letters), 1_500_000)].tobytes().decode()
    run = load(write_lines(tmp_path / "run" / "r.jsonl", [sample(1, response=slow)]).parent)
    monkeypatch.setattr(rl_board.reading.search, "SEARCH_SECONDS", 0.2)
    monkeypatch.setattr(rl_board.reading.search, "LONG_TEXT_SEARCHES", threading.BoundedSemaphore(2))
    for _ in range(4):
        assert search(run, "[a-m][a-z ]{300}Q", regex=True, match_case=True, places="response").searched == 0
    assert sum(thread.name == "long-text-search" for thread in threading.enumerate()) <= 2
