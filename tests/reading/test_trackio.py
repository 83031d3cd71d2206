"""The board opening trackio's project databases as trackio itself writes them (tests/support/trackio_runs.py runs
trackio.init, trackio.log of metrics and of trackio.Trace, trackio.finish in a process of its own): every logged trace
a line whose turns, texts and fields are those written out by hand beside its messages; the metrics table as the
training history; a database being written (trackio mid-run, a writer holding its transaction open, a rollback
journal's commit); and bad input: messages the board does not know, corrupt and foreign databases, object storage."""

import json
import math
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

import rl_board
from rl_board.formats import board_jsonl, trackio
from rl_board.reading import trackio_db
from rl_board.reading.search import export_jsonl
from rl_board.reading.store import RunStore
from rl_board.run import ALL_SAMPLES
from tests.support.s3_server import make_bucket, s3_server, upload_folder  # noqa: F401  (s3_server: a fixture)
from tests.support.trackio_runs import (
    INSERT_TRACE,
    LIVE_BATCH,
    LONG_TRACE,
    RESUMED_STEPS,
    SYSTEM,
    TRAINER_STEPS,
    agent_runs,
    live_writer,
    messy_runs,
    trace_row,
    wait_for,
    write_trackio,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, Path]:
    """agent/ (agent.db), messy/ (messy.db), both/ (copies of both): trackio's TRACKIO_DIR after each run finished."""
    root = tmp_path_factory.mktemp("trackio")
    folders = {"agent": write_trackio(root / "agent", "agent_runs"), "messy": write_trackio(root / "messy", "messy_runs")}
    both = root / "both"
    both.mkdir()
    for name in ("agent", "messy"):
        shutil.copy(folders[name] / f"{name}.db", both / f"{name}.db")  # finished: no -wal, the file is the database
    return folders | {"both": both}


# The converted lines, in the board's order (by step, then file, then as logged).
def converted_lines(run) -> list[dict]:
    return [json.loads(line) for step in run.steps for line in export_jsonl(run.snapshot.step_rows(step)).decode("utf-8").splitlines()]


# The traces the projects logged, in the order the board shows them: by step, then database (by name), then as logged.
def logged_traces(projects: list) -> list[dict]:
    found = []
    for position, runs in enumerate(projects):
        order = 0
        for project, name, traces, _, _ in runs:
            for step, key, logged in traces:
                for trace in logged:
                    found.append(((step, position, order), {"project": project, "run": name, "step": step, "key": key, **trace}))
                    order += 1
    return [trace for _, trace in sorted(found, key=lambda item: item[0])]


def long_trace_turns() -> list[dict]:
    return [{"role": "user", "text": "count"}] + [{"role": "assistant" if i % 2 else "user", "text": str(i)} for i in range(1, LONG_TRACE)]


def problems(run, kind: str) -> list[list]:
    return run.problems[run.problems["kind"] == kind].values.tolist()


def test_each_trace_is_a_line_with_the_turns_and_fields_it_was_logged_with(written):
    """Every Trace logged is one line at its step, in the order logged: its messages as turns (roles, texts, tool calls
    with their arguments as objects, tool names and call ids, a failed tool's error), its metadata as reward, advantage,
    rewards per function, stop reason and fields, its project and run named."""
    run = rl_board.open_run(written["both"])
    assert run.format == trackio.NAME
    lines, traces = converted_lines(run), logged_traces([agent_runs(), messy_runs()])
    assert len(lines) == len(traces) == 3 * 4 + 1 + 1 + 4
    for line, trace in zip(lines, traces):
        assert (line["step"], line["trackio_project"], line["trackio_run"], line["trace_key"]) == (trace["step"], trace["project"], trace["run"], trace["key"])
        turns = trace.get("turns") or long_trace_turns()
        assert line["turns"] == turns[: trackio.MAX_TURNS]
        for key, value in trace["fields"].items():
            if key != "group":
                assert line[key] == value, (key, line.get(key), value)
        if "stop_reason" not in trace["fields"]:
            assert "stop_reason" not in line
    assert run.steps == [1, 2, 3, 7]


def test_prompt_and_response_are_the_trace_s_texts(written):
    """The prompt is the leading system and user messages; the response the rest, a block per turn with the tool's
    name, its error when it failed and the assistant's calls; one message alone is its text."""
    run = rl_board.open_run(written["agent"])
    batch = run.step(1)
    first = batch[batch["sample"] == 0].iloc[0]
    assert first["prompt"] == f"[system]\n{SYSTEM}\n\n[user]\nWhat is 3+4?"
    assert first["response"] == (
        "[assistant]\n<think>\nI should compute 3+4.\n</think>\n\n→ calculator({\"expression\": \"3+4\"})\n\n"
        "[tool: calculator]\n7\n\n[assistant]\nThe answer is 7."
    )
    failed = batch[batch["sample"] == 1].iloc[0]
    assert "[tool: calculator] error: name 'x' is not defined\n{'error': \"name 'x' is not defined\"}" in failed["response"]
    agent = run.step(3)
    openai = agent[agent["response"].str.contains("weather")].iloc[0]
    assert openai["prompt"] == "Weather in Paris and in Oslo?"
    assert "→ weather({\"city\": \"Oslo\", \"unit\": \"C\"})" in openai["response"] and "[tool: weather]\n4 C, snow" in openai["response"]


def test_rewards_groups_and_runs_are_columns(written):
    """reward, advantage and rewards/<function> are the metadata's; the completions of one prompt of one run at a step
    are a group (TRL's group_id), never mixed with another run's; each trackio run and project is a facet."""
    run = rl_board.open_run(written["both"])
    samples = run.samples
    assert {"text/trackio_run", "text/trackio_project"} <= set(run.snapshot.facets)
    assert set(samples["text/trackio_run"]) == {"grpo-a", "grpo-b", "edge"}
    lines = converted_lines(run)
    traces = logged_traces([agent_runs(), messy_runs()])
    by_group = {}
    for line, trace in zip(lines, traces):
        if "group" in trace["fields"]:
            by_group.setdefault((trace["run"], trace["step"], trace["fields"]["group"]), set()).add(line["group_id"])
    assert all(len(ids) == 1 for ids in by_group.values())
    assert len({next(iter(ids)) for ids in by_group.values()}) == len(by_group)  # grpo-b's group 12 is not grpo-a's
    step_1 = samples[samples["step"] == 1].sort_values("line")
    assert step_1["reward"].tolist() == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert step_1["rewards/accuracy"].tolist() == [1.0, 0.0, 1.0, 0.0, 1.0] and step_1["rewards/format"].tolist() == [0.5] * 5
    assert step_1["advantage"].tolist() == [1.0, -1.0, 1.0, -1.0, 1.0]
    assert step_1["extra/tools/failure_frequency"].tolist() == [0.0, 1.0, 0.0, 1.0, 0.0]
    assert samples.loc[samples["step"] == 3, "truncated"].tolist().count(True) == 1  # the finish_reason "length" trace


def test_the_metrics_table_is_the_training_history(written):
    """Hugging Face's TrackioCallback rows are read back as the Trainer logged them, at their global step (not trackio's
    own step counter): train/loss is loss, eval/loss eval_loss in the eval frame. Two runs of a project are told apart
    by ' · <run>', two projects by '<project>/<run>'; one run keeps the names. Rows of traces only are no entries."""
    history = rl_board.open_run(written["agent"]).history
    assert history.sources == ["agent.db"]
    assert history.train["step"].tolist() == [1, 2, 3]
    assert history.train["loss · grpo-a"].tolist() == [1.0, 0.5, 1 / 3]
    assert history.train["reward · grpo-a"].tolist() == [0.25, 0.5, 0.75]
    assert history.train["loss · grpo-b"].fillna(-1).tolist() == [2.0, -1, -1]
    assert "global_step · grpo-a" not in history.train
    assert history.eval["step"].tolist() == [2] and history.eval["eval_loss · grpo-a"].tolist() == [0.75]
    assert history.config["grpo-a"]["learning_rate"] == 1e-6 and history.config["grpo-b"]["learning_rate"] == 5e-6
    messy = rl_board.open_run(written["messy"]).history
    assert list(messy.train.columns) == ["step", "score"] and messy.train["step"].tolist() == [7]
    assert any("loss is nan: left out" in reason for reason in messy.problems["reason"])
    both = rl_board.open_run(written["both"]).history
    assert {"loss · agent/grpo-a", "score · messy/edge"} <= set(both.train.columns)


def test_rows_of_trainer_predict_and_of_the_script_keep_the_trainer_s_steps(tmp_path):
    """transformers' TrackioCallback logs trainer.predict()'s test_* metrics, and a script logs its own, without
    train/global_step: trackio files them at its own step counter (13 after twelve rows), below the global steps. Such a
    row is placed at the global step logged before it, with a note: the train steps 10..100 all stay (they were dropped
    as a resume), the test_* metrics are the Trainer's names in the eval frame at 100 (test/runtime was a train
    metric). A real resume (a new launch logging 80..100 again) replaces those steps, and the abandoned launch's
    evaluation at 100, and the load report counts them."""
    folder = write_trackio(tmp_path / "trackio", "write_trainer_callback")
    with sqlite3.connect(folder / "hf.db") as connection:
        logged = [(step, json.loads(metrics)) for step, metrics in connection.execute("SELECT step, metrics FROM metrics ORDER BY rowid")]
    connection.close()
    predicted = next(step for step, metrics in logged if "test/loss" in metrics)
    assert predicted < max(TRAINER_STEPS) and not any("train/global_step" in metrics for step, metrics in logged if step == predicted)
    history = rl_board.open_run(folder).history
    train = history.train.set_index("step")
    assert list(train.index) == list(TRAINER_STEPS)
    assert train["loss"].tolist() == [1.0 / step for step in TRAINER_STEPS if step not in RESUMED_STEPS] + [2.0 / step for step in RESUMED_STEPS]
    assert train["reward_hacking_rate"].dropna().to_dict() == {50: 0.25}  # logged between steps 50 and 60
    assert list(history.eval.columns) == ["step", "eval_loss", "eval_runtime", "test_loss", "test_runtime", "test_samples_per_second"]
    assert history.eval.values.tolist() == [[100, 0.4, 1.5, 0.5, 2.0, 3.0]]
    reasons = history.problems["reason"].tolist()
    assert len(reasons) == 2 and history.skipped == 0
    assert reasons[0].startswith("metrics row ") and reasons[0].endswith("step 80 after later steps: a resume; the 3 train and 1 eval step(s) logged before it from step 80 on are replaced")
    assert reasons[1].startswith("run sft: 2 rows without train/global_step (trainer.predict's test_* metrics, or a log call of your own) placed at the global step logged before")


def test_trackio_s_folder_is_one_run_with_its_own_folders(written):
    """TRACKIO_DIR (databases, .lock files, traces/ with trackio's session files) is one run, listed once; its parent
    lists it."""
    folder = written["agent"]
    assert (folder / "traces").is_dir() and (folder / "agent.lock").exists()
    assert rl_board.list_runs(folder) == [str(folder)]
    assert str(folder) in rl_board.list_runs(folder.parent)


def test_a_finished_database_is_read_without_a_change_or_a_file_beside_it(written, tmp_path):
    """No writer has it open (no -wal): it is read immutable, so SQLite makes no -wal or -shm beside it; its bytes and
    time stay as they were."""
    folder = tmp_path / "trackio"
    shutil.copytree(written["messy"], folder)
    database = folder / "messy.db"
    before = (database.read_bytes(), database.stat().st_mtime_ns)
    run = rl_board.open_run(folder)
    assert len(run.samples) == 4 and not run.history.empty
    assert sorted(path.name for path in folder.glob("messy.db*")) == ["messy.db"]
    assert (database.read_bytes(), database.stat().st_mtime_ns) == before


def test_bad_input_is_counted_in_the_load_report(written, tmp_path):
    """A role the board does not know is an environment turn, tool arguments that are not JSON are kept as written, a
    trace of 10,000 messages keeps its first MAX_TURNS turns (and all its text), non-finite rewards are missing: each
    counted at its line. A corrupt database, a truncated one and another program's SQLite are named, not read."""
    folder = tmp_path / "trackio"
    shutil.copytree(written["messy"], folder)
    (folder / "corrupt.db").write_bytes(b"not a database " * 100)
    (folder / "truncated.db").write_bytes((written["agent"] / "agent.db").read_bytes()[:8192])
    with sqlite3.connect(folder / "foreign.db") as foreign:
        foreign.execute("CREATE TABLE users (name TEXT)")
    foreign.close()
    run = rl_board.open_run(folder)
    lines = converted_lines(run)
    assert [line["turns"][1]["role"] for line in lines[:1]] == ["environment"]
    assert lines[1]["turns"][1]["tool_calls"][0]["arguments"] == "{\"cmd\": \"ls\""
    assert len(lines[2]["turns"]) == trackio.MAX_TURNS and lines[2]["turns_left_out"] == LONG_TRACE - trackio.MAX_TURNS
    assert lines[2]["response"].endswith(f"[assistant]\n{LONG_TRACE - 1}")
    assert lines[0]["reward"] is None and math.isnan(run.samples.sort_values("line")["reward"].iloc[0])
    notes = {(file, line, reason.split(":")[0]) for file, line, _, reason in problems(run, "note")}
    assert ("messy.db", 1, "message 1 has the role 'critic', not one the board knows") in notes
    assert ("messy.db", 2, "message 1") in notes  # the arguments of shell are not valid JSON
    assert ("messy.db", 3, f"{LONG_TRACE} messages") in notes
    skipped = {file: reason for file, _, _, reason in problems(run, "skipped")}
    assert skipped["corrupt.db"].startswith("not readable as a SQLite database (file is not a database)")
    assert skipped["foreign.db"].startswith("not trackio's database")
    assert skipped["truncated.db"].startswith("not readable as a SQLite database")
    assert run.history.train["step"].tolist() == [7]


def test_a_folder_of_jsonl_beside_another_program_s_database_is_not_trackio_s(tmp_path):
    (tmp_path / "cache.db").write_bytes(b"")
    (tmp_path / "data.jsonl").write_text(json.dumps({"prompt": "p", "response": "r", "reward": 1.0, "step": 1}) + "\n")
    run = rl_board.open_run(tmp_path)
    assert run.format == board_jsonl.NAME and run.steps == [1]


def test_a_run_being_written_opens_and_never_blocks_its_writer(tmp_path):
    """While trackio logs (its database open in WAL mode) and a writer holds a transaction open, the run opens at once
    with what was committed; the writer commits right after (nothing is left locked), and each commit is seen at the
    next load of the same store, as live mode loads."""
    folder = tmp_path / "trackio"
    folder.mkdir()
    writer = live_writer(folder)
    try:
        wait_for(folder / "READY", writer)
        database = folder / "live.db"
        assert database.with_name("live.db-wal").exists() and trackio_db.journal_of(str(database)) == "wal"
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as reader:
            run_id = reader.execute("SELECT run_id FROM traces").fetchone()[0]
        reader.close()
        other = sqlite3.connect(database, timeout=0, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        other.execute(INSERT_TRACE, trace_row(run_id, 1, 100))
        store = RunStore(str(folder))
        started = time.monotonic()
        snapshot = store.load(ALL_SAMPLES)
        assert time.monotonic() - started < trackio_db.BUSY_TIMEOUT_S
        assert snapshot.samples["reward"].tolist() == [float(i) for i in range(LIVE_BATCH)]  # not the open transaction's
        other.execute("COMMIT")  # timeout 0: it would fail if the board held a lock
        other.close()
        assert store.load(ALL_SAMPLES).samples["reward"].tolist() == [*(float(i) for i in range(LIVE_BATCH)), 100.0]
        (folder / "GO").touch()
        assert writer.wait(timeout=120) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
    snapshot = store.load(ALL_SAMPLES)
    assert snapshot.steps == [1, 2] and len(snapshot.samples) == 2 * LIVE_BATCH + 1
    assert snapshot.problems.empty


def test_a_rollback_journal_writer_s_commit_is_reported_then_read(tmp_path, monkeypatch):
    """With the rollback journal (trackio's on Spaces) a writer holding its reserved lock does not stop the board; one
    committing (an exclusive lock) is waited for BUSY_TIMEOUT_S, then named in the load report, and read next time."""
    monkeypatch.setattr(trackio_db, "BUSY_TIMEOUT_S", 0.2)
    folder = write_trackio(tmp_path / "trackio", "messy_runs", TRACKIO_SQLITE_JOURNAL_MODE="delete")
    database = folder / "messy.db"
    assert trackio_db.journal_of(str(database)) == "rollback"
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as reader:
        run_id = reader.execute("SELECT run_id FROM traces").fetchone()[0]
    reader.close()
    writer = sqlite3.connect(database, timeout=0, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute(INSERT_TRACE, trace_row(run_id, 7, 100))
    assert len(rl_board.open_run(folder).samples) == 4
    writer.execute("COMMIT")
    writer.execute("BEGIN EXCLUSIVE")
    locked = rl_board.open_run(folder)
    assert [reason for file, _, _, reason in problems(locked, "skipped") if file == "messy.db"] == ["locked by a writer's commit: read again at the next refresh"]
    assert any("locked" in reason for reason in locked.history.problems["reason"])
    writer.execute("ROLLBACK")
    writer.close()
    assert len(rl_board.open_run(folder).samples) == 5


def test_a_trackio_folder_on_object_storage_is_named_not_read(written, s3_server):  # noqa: F811  (the fixture)
    bucket = make_bucket(s3_server.endpoint_url, "trackio-run")
    upload_folder(s3_server.endpoint_url, written["messy"], f"s3://{bucket}/trackio")
    url = f"s3://{bucket}/trackio"
    assert rl_board.list_runs(url) == [url]
    run = rl_board.open_run(url)
    assert run.format == trackio.NAME and run.samples.empty
    assert run.problems.values.tolist() == [["", 0, "skipped", trackio.REMOTE]]


def test_a_reasoning_with_half_a_surrogate_pair_costs_one_character():
    """Half an emoji in a reasoning is shown as �, as in every other text of a trace (the whole line was escaped)."""
    assert trackio.message_text({"role": "assistant", "content": "café", "reasoning_content": "a\ud800b"}) == "<think>\na\ufffdb\n</think>\ncafé"
