"""Watch patterns (issue 33): a pattern's hit rate per step equals a recount with Python's re over the raw JSONL lines
(a written run and a bundled one), a step's hits are exactly its matching lines, and the saved patterns' store: a round
trip, one list per root, a damaged file or entry, bad patterns, nothing written in a run folder, writers that never
leave half a file."""

import itertools
import json
import os
import re
import threading
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import rl_board
from rl_board.reading import search
from rl_board.watch import (
    NAME_CHARACTERS,
    WATCH_FILE,
    WATCH_PATTERNS_MAX,
    WatchPattern,
    remove_pattern,
    save_pattern,
    saved_patterns,
    step_hits,
    watch_file,
    watch_pattern,
)
from tests.support.runs import sample, write_lines
from tests.support.search_runs import bundled, text_of

STEPS = (1, 2, 3, 5, 8)


# A run whose refusals grow over training, with format tags, case variants, chat prompts and CJK text; two rank files
# with a different number of samples per step.
def watched_lines(seed: int) -> dict[str, list[dict]]:
    rng = np.random.default_rng(seed)
    phrases = ["I cannot help with that.", "i cannot say", "Sure: <answer>42</answer>", "<answer> 7 </answer> done", "答案是 42", "I can not", "plain text"]
    files = {}
    for rank in range(2):
        lines = []
        for position, step in enumerate(STEPS):
            for index in range(3 + rank + position % 3):
                refusal = rng.random() < 0.1 + 0.15 * position  # the exploit spreads
                response = phrases[0] if refusal else str(rng.choice(phrases[1:]))
                prompt = [{"role": "user", "content": f"question {index}: I cannot decide"}] if index % 4 == 0 else f"step {step} prompt {index}"
                lines.append(sample(step, reward=float(refusal), prompt=prompt, response=response))
        files[f"rollout_data_rank_{rank}.jsonl"] = lines
    return files


@pytest.fixture
def run_dir(tmp_path):
    for name, lines in watched_lines(0).items():
        write_lines(tmp_path / "runs" / "watched" / name, lines)
    return tmp_path / "runs" / "watched"


# The recount: every line of the files, json-decoded, each field's text searched by Python's re.
def recount(run_dir: Path, pattern: str, field: str, regex: bool, match_case: bool) -> dict[int, float]:
    compiled = re.compile(pattern if regex else re.escape(pattern), 0 if match_case else re.IGNORECASE)
    names = {"response": ["response"], "prompt": ["prompt"], "prompt and response": ["prompt", "response"]}[field]
    hits, samples = defaultdict(int), defaultdict(int)
    for path in sorted(run_dir.glob("rollout_data_rank_*.jsonl")):
        for line in path.read_text("utf-8").splitlines():
            record = json.loads(line)
            samples[record["step"]] += 1
            hits[record["step"]] += any(compiled.search(text_of(record[name])) for name in names)
    return {step: hits[step] / samples[step] for step in samples}


WATCHED = [
    pytest.param("I cannot", "response", True, True, id="phrase"),
    pytest.param("I cannot", "response", True, False, id="phrase-any-case"),
    pytest.param(r"<answer>\s*\d+\s*</answer>", "response", True, True, id="format-tag"),
    pytest.param("<answer>42</answer>", "response", False, True, id="literal-tag"),
    pytest.param(r"^I can(not| not)", "response", True, True, id="anchored"),
    pytest.param("答案", "response", True, True, id="cjk"),
    pytest.param("I cannot", "prompt", True, True, id="in-prompts"),
    pytest.param("I cannot", "prompt and response", True, True, id="in-either"),
    pytest.param(r'"role": "user"', "prompt", True, True, id="chat-prompt-as-json"),
]


@pytest.mark.parametrize(("pattern", "field", "regex", "match_case"), WATCHED)
def test_the_hit_rate_per_step_equals_a_recount_with_re(run_dir, pattern, field, regex, match_case):
    expected = recount(run_dir, pattern, field, regex, match_case)
    rate = rl_board.pattern_rate(rl_board.open_run(run_dir), pattern, field=field, regex=regex, match_case=match_case)
    assert rate.name == pattern and rate.index.tolist() == list(STEPS)
    assert rate.to_dict() == pytest.approx(expected)
    assert len(set(expected.values())) > 1 or field == "prompt"  # the rate moves with the step: a constant would prove little


# The refusal spreads: the curve a user would watch rises (the run is written so), and the default is case-sensitive.
def test_the_defaults_are_a_case_sensitive_regex_on_the_response(run_dir):
    run = rl_board.open_run(run_dir)
    rate = rl_board.pattern_rate(run, r"I cannot|i cannot")
    assert rate.to_dict() == pytest.approx(recount(run_dir, r"I cannot|i cannot", "response", True, True))
    assert rl_board.pattern_rate(run, "i cannot").to_dict() == pytest.approx(recount(run_dir, "i cannot", "response", True, True))
    assert rl_board.pattern_rate(run, "i cannot").to_dict() != pytest.approx(recount(run_dir, "i cannot", "response", True, False))


# The bundled run: sorting prompts and their answers, recounted from its file.
@pytest.mark.parametrize(("pattern", "field"), [(r" 9$", "response"), (r"sort 9", "prompt"), (r"^ 3", "response"), (r"\d \d \d \d \d$", "prompt and response")])
def test_the_bundled_runs_hit_rate_equals_a_recount(tmp_path, pattern, field):
    run_dir = bundled(tmp_path, "grpo_tiny_example")
    expected = recount(run_dir, pattern, field, True, True)
    rate = rl_board.pattern_rate(rl_board.open_run(run_dir), pattern, field=field)
    assert rate.to_dict() == pytest.approx(expected)
    assert 0 < max(expected.values()) and len(set(expected.values())) > 1


# A step's hits: exactly the step's lines the pattern matches, each once per pattern, with the match between ⟦ ⟧.
def test_a_steps_hits_are_its_matching_lines(run_dir):
    run = rl_board.open_run(run_dir)
    watches = [watch_pattern("refusal", "I cannot"), watch_pattern("tag", r"<answer>\s*(\d+)", match_case=False)]
    hits, stopped = step_hits(run.texts, run.snapshot.samples, watches, 8)
    assert stopped == []
    lines = {(path.name, number): json.loads(line) for path in sorted(run_dir.glob("*.jsonl")) for number, line in enumerate(path.read_text().splitlines(), 1)}
    for watch in watches:
        mine = hits[hits["pattern"] == watch.name]
        expected = {position for position, record in lines.items() if record["step"] == 8 and re.search(watch.pattern, record["response"], 0 if watch.match_case else re.I)}
        assert {(Path(path).name, int(line)) for path, line in zip(mine["path"], mine["line"])} == expected and expected
        assert (mine["found in"] == "response").all()
        for snippet, (path, line) in zip(mine["match"], zip(mine["path"], mine["line"])):
            matched = re.search(watch.pattern, lines[(Path(path).name, int(line))]["response"], 0 if watch.match_case else re.I).group(0)
            assert f"⟦{matched}⟧" in snippet


# A search stopped by its deadline (a clock that ticks once per text, 10.5 ticks allowed): the steps it wholly
# searched keep their rate, the others have none, and a warning says so.
def test_the_steps_a_stopped_search_did_not_reach_have_no_rate(run_dir, monkeypatch):
    run = rl_board.open_run(run_dir)
    ticks = itertools.count()
    monkeypatch.setattr(search, "SEARCH_SECONDS", 10.5)
    monkeypatch.setattr(search.time, "perf_counter", lambda: float(next(ticks)))
    with pytest.warns(UserWarning, match="stopped after 10 s: 4 step"):
        rate = rl_board.pattern_rate(run, "I cannot")
    watch = WatchPattern("refusal", "I cannot", "response", False, True)
    monkeypatch.setattr(search, "SEARCH_SECONDS", 2.5)
    hits, stopped = step_hits(run.texts, run.snapshot.samples, [watch], 2)  # a hits table of a step not wholly searched says so
    assert stopped == ["refusal"] and len(hits) < (run.snapshot.samples["step"] == 2).sum()
    monkeypatch.undo()
    samples = run.snapshot.samples["step"].value_counts().sort_index()
    assert samples.iloc[0] <= 10 < samples.iloc[:2].sum()  # step 1 wholly searched, step 2 not
    assert rate.iloc[0] == pytest.approx(recount(run_dir, "I cannot", "response", True, True)[1]) and rate.iloc[1:].isna().all()


def test_a_bad_pattern_or_field_is_a_clear_error(run_dir):
    run = rl_board.open_run(run_dir)
    with pytest.raises(ValueError, match="not a valid regular expression"):
        rl_board.pattern_rate(run, "(?<=I )cannot")  # look-behind: not RE2
    with pytest.raises(ValueError, match="field must be one of"):
        rl_board.pattern_rate(run, "I cannot", field="answer")
    with pytest.raises(ValueError, match="needs a pattern"):
        rl_board.pattern_rate(run, "")
    assert rl_board.pattern_rate(run, "(?<=I )cannot", regex=False).eq(0).all()  # as text, it is just text


# The saved patterns' store.

def test_saved_patterns_round_trip_in_order_and_a_name_saved_again_replaces_it(tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    first, second = watch_pattern("refusal", "I cannot"), watch_pattern("tag", "<answer>", "prompt and response", regex=False, match_case=False)
    assert save_pattern(root, first) == "" and save_pattern(root, second) == ""
    assert saved_patterns(root).patterns == [first, second] and saved_patterns(root).problems == []
    changed = watch_pattern("refusal", "I can(not|'t)")
    save_pattern(root, changed)
    assert saved_patterns(root).patterns == [second, changed]
    remove_pattern(root, "tag")
    assert saved_patterns(root).patterns == [changed]
    remove_pattern(root, "refusal")
    assert saved_patterns(root).patterns == [] and json.loads(watch_file().read_text())["roots"] == {}
    assert watch_file() == Path(os.environ["RL_LOGGING_BOARD_CACHE"]) / WATCH_FILE


def test_each_root_has_its_own_patterns_however_it_is_written(tmp_path, monkeypatch):
    one, other = tmp_path / "one", tmp_path / "other"
    one.mkdir(), other.mkdir()
    (tmp_path / "link").symlink_to(one)
    save_pattern(one, watch_pattern("refusal", "I cannot"))
    save_pattern("s3://bucket/runs", watch_pattern("remote", "x"))
    assert saved_patterns(other).patterns == []
    monkeypatch.chdir(tmp_path)
    for spelling in ("one", "one/", "./one", str(tmp_path / "link"), str(one) + "/../one"):
        assert [watch.name for watch in saved_patterns(spelling).patterns] == ["refusal"], spelling
    assert [watch.name for watch in saved_patterns("s3://bucket/runs").patterns] == ["remote"]
    assert saved_patterns("s3://bucket/other").patterns == []


def test_a_damaged_file_is_a_message_and_kept_aside_on_the_next_save(tmp_path):
    root = tmp_path / "runs"
    save_pattern(root, watch_pattern("refusal", "I cannot"))
    watch_file().write_text('{"format": 1, "roots": {"cut off')
    saved = saved_patterns(root)
    assert saved.patterns == [] and len(saved.problems) == 1 and "could not be read" in saved.problems[0]
    note = save_pattern(root, watch_pattern("tag", "<answer>"))
    assert "kept as" in note and (watch_file().parent / (WATCH_FILE + ".damaged")).read_text() == '{"format": 1, "roots": {"cut off'
    assert [watch.name for watch in saved_patterns(root).patterns] == ["tag"] and saved_patterns(root).problems == []
    for content in (b"\xff\xfe not UTF-8", b"[1, 2]", b'{"format": 99, "roots": {}}'):
        watch_file().write_bytes(content)
        assert saved_patterns(root).patterns == [] and len(saved_patterns(root).problems) == 1, content


# Entries a person edited wrongly are each left out with a message; the others are kept.
def test_a_bad_entry_is_left_out_with_a_message(tmp_path):
    root = tmp_path / "runs"
    save_pattern(root, watch_pattern("good", "I cannot"))
    content = json.loads(watch_file().read_text())
    [key] = content["roots"]
    content["roots"][key] += [
        {"name": "bad regex", "pattern": "(unclosed", "field": "response", "regex": True, "match_case": True},
        "not an object",
        {"name": "good", "pattern": "again", "field": "response", "regex": True, "match_case": True},
        {"name": "bad field", "pattern": "x", "field": "answer", "regex": True, "match_case": True},
    ]
    watch_file().write_text(json.dumps(content))
    saved = saved_patterns(root)
    assert [watch.pattern for watch in saved.patterns] == ["I cannot"]
    assert [problem.split(":")[0] for problem in saved.problems] == [f"saved pattern {n} left out" for n in (2, 3, 4, 5)]
    assert "missing )" in saved.problems[0] and "second pattern named 'good'" in saved.problems[2]


@pytest.mark.parametrize(("arguments", "message"), [
    (("", "I cannot"), "needs a name"),
    (("  ", "I cannot"), "needs a name"),
    (("x" * (NAME_CHARACTERS + 1), "I cannot"), "at most 80 characters"),
    (("refusal", ""), "needs a pattern"),
    (("refusal", "(I cannot"), "not a valid regular expression: missing \\)"),
    (("refusal", "a{2000}{2000}"), "not a valid regular expression"),
    (("refusal", "I cannot", "answer"), "field must be one of"),
])
def test_a_bad_name_or_pattern_is_refused_with_a_message(tmp_path, arguments, message):
    with pytest.raises(ValueError, match=message):
        watch_pattern(*arguments)
    assert not watch_file().exists()


def test_at_most_so_many_patterns_per_root(tmp_path):
    for number in range(WATCH_PATTERNS_MAX):
        save_pattern(tmp_path, watch_pattern(f"p{number}", f"x{number}"))
    with pytest.raises(ValueError, match=f"at most {WATCH_PATTERNS_MAX}"):
        save_pattern(tmp_path, watch_pattern("one more", "y"))
    save_pattern(tmp_path, watch_pattern("p0", "replaced"))  # a replacement is no more
    assert len(saved_patterns(tmp_path).patterns) == WATCH_PATTERNS_MAX


# Saving patterns and computing their rates write nothing in the run folder, read-only or not.
def test_nothing_is_written_in_the_run_folder(run_dir):
    before = {path: path.stat().st_mtime_ns for path in run_dir.rglob("*")}
    run_dir.chmod(0o555)
    try:
        save_pattern(run_dir, watch_pattern("refusal", "I cannot"))
        save_pattern(run_dir.parent, watch_pattern("refusal", "I cannot"))
        rl_board.pattern_rate(rl_board.open_run(run_dir), "I cannot")
    finally:
        run_dir.chmod(0o755)
    assert {path: path.stat().st_mtime_ns for path in run_dir.rglob("*")} == before
    assert not watch_file().is_relative_to(run_dir.parent)


# A write that fails half-way (the rename refused) leaves the old file as it was, and no temporary file behind.
def test_a_failed_write_leaves_the_old_file_whole(tmp_path, monkeypatch):
    save_pattern(tmp_path, watch_pattern("refusal", "I cannot"))
    old = watch_file().read_bytes()

    def refuse(source, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(ValueError, match="not saved to .*No space left"):
        save_pattern(tmp_path, watch_pattern("tag", "<answer>"))
    assert watch_file().read_bytes() == old and sorted(path.name for path in watch_file().parent.iterdir()) == [WATCH_FILE]


# Sessions saving at once (the page's share a process): every pattern is kept, and a reader meanwhile always reads a
# whole file (each write is a new file renamed over the old one).
def test_writers_at_once_keep_every_pattern_and_a_reader_never_sees_half_a_file(tmp_path):
    roots = [tmp_path / "a", tmp_path / "b"]
    problems, done = [], threading.Event()

    def read_meanwhile():
        while not done.is_set():
            for root in roots:
                problems.extend(saved_patterns(root).problems)

    def write(root, number):
        for index in range(8):
            save_pattern(root, WatchPattern(f"w{number}-{index}", f"text {number} {index}"))

    reader = threading.Thread(target=read_meanwhile)
    reader.start()
    writers = [threading.Thread(target=write, args=(roots[number % 2], number)) for number in range(4)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    done.set()
    reader.join()
    assert problems == []
    for parity, root in enumerate(roots):
        names = {watch.name for watch in saved_patterns(root).patterns}
        assert names == {f"w{number}-{index}" for number in range(parity, 4, 2) for index in range(8)}
    assert sorted(path.name for path in watch_file().parent.iterdir()) == [WATCH_FILE]


def test_a_hand_edited_file_s_odd_entries_are_left_out_named_and_kept_when_saving(tmp_path):
    root = tmp_path / "runs"
    save_pattern(root, watch_pattern("refusal", "I cannot"))
    key = next(iter(json.loads(watch_file().read_text())["roots"]))
    entries = [{"name": "listy", "pattern": "x", "field": ["response"]}, {"name": " padded ", "pattern": "y"}]
    entries += [{"name": f"p{number}", "pattern": "z"} for number in range(25)]
    watch_file().write_text(json.dumps({"format": 1, "roots": {key: entries, "other": [{"name": "kept", "pattern": "k"}]}}))
    saved = saved_patterns(root)
    assert [watch.name for watch in saved.patterns] == ["padded", *[f"p{number}" for number in range(19)]]
    assert saved.problems[0] == "saved pattern 1 left out: field must be one of " + ", ".join(map(repr, search.SEARCH_PLACES)) + ", not ['response']"
    assert saved.problems[1:] == [f"saved pattern {position} left out: more than 20 for the root" for position in range(22, 28)]
    remove_pattern(root, "padded")  # as listed
    assert "padded" not in [watch.name for watch in saved_patterns(root).patterns]
    watch_file().write_text("[" * 100_000)  # nested beyond Python's json
    assert "could not be read" in saved_patterns(root).problems[0]
    watch_file().write_text(json.dumps({"format": 1, "roots": {key: {"not": "a list"}, "other": [{"name": "kept", "pattern": "k"}]}}))
    note = save_pattern(root, watch_pattern("tag", "<answer>"))
    assert "are not a list" in note and "kept as" in note and "with the other roots' patterns" in note
    assert json.loads((watch_file().parent / (WATCH_FILE + ".damaged")).read_text())["roots"][key] == {"not": "a list"}
    assert json.loads(watch_file().read_text())["roots"]["other"] == [{"name": "kept", "pattern": "k"}]
    assert [watch.name for watch in saved_patterns(root).patterns] == ["tag"]
