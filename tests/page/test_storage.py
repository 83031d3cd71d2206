"""Runs on S3 on the page, served by a real S3 server (moto): listed and shown as on disk, redrawn when an object
changes, and every failure (missing bucket, refused credentials, a server stopped between two loads) a message."""

import contextlib
import re
import shutil
import uuid

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

import rl_board.reading.storage
import rl_board.reading.store
import rl_board.reading.workers
from bench.generate_run import write_run
from rl_board.__main__ import main as index_command
from rl_board.reading.storage import StorageError, storage
from rl_board.reading.store import RunStore, list_runs
from rl_board.text import markdown_literal
from tests.support import SAMPLES
from tests.support.page import batch_table, chart_spec, lines_of, load_and_view, start, widget
from tests.support.s3_runs import (  # noqa: F401  (fixtures)
    GRPO,
    RUNS,
    TRL,
    bucket,
    fresh_storage,
    live_run,
    loaded,
    next_step,
    numbers,
    page_text,
    write_both,
    wrong_credentials,
)
from tests.support.s3_server import (  # noqa: F401  (s3_server: a fixture)
    FAKE_CREDENTIALS,
    append_object,
    enforced_auth,
    environment,
    make_bucket,
    running_moto,
    s3_client,
    s3_server,
    split_s3_url,
    upload_folder,
)


def test_a_rank_file_uploaded_again_with_a_new_step_is_read_from_where_it_was(s3_server, live_run, monkeypatch):
    """Live on S3: a step appended to a rank file shows after a refresh, and only the appended bytes are read."""
    url, local, name = live_run
    store = RunStore(url)
    before = store.load(128)
    [index] = store.files.values()
    old_size, old_id = index.indexed_to, index.index_id
    added = next_step((local / name).read_bytes())
    assert not store.needs_work(128)
    append_object(s3_server.endpoint_url, f"{url}/{name}", added)
    with open(local / name, "ab") as file:
        file.write(added)
    assert store.needs_work(128)
    indexed = []
    index_chunk = rl_board.reading.workers.index_chunk
    monkeypatch.setattr(rl_board.reading.store, "index_chunk", lambda path, start, end, per_step: indexed.append((start, end)) or index_chunk(path, start, end, per_step))
    after = store.load(128)
    assert after.steps == before.steps + [before.steps[-1] + 1]
    assert indexed == [(old_size, old_size + len(added))]
    assert (index.indexed_to, index.index_id) == (old_size + len(added), old_id)
    pd.testing.assert_frame_equal(numbers(after), numbers(loaded(local)))


def test_the_page_says_when_the_root_s_bucket_is_missing(bucket, monkeypatch):
    """Log(s) Root Path in a missing bucket: a sidebar error naming it, no run to choose, no exception."""
    root = f"s3://missing-{uuid.uuid4().hex[:12]}/x"
    app = start(root, monkeypatch)
    assert [error.value for error in app.sidebar.error] == [markdown_literal(f"{root} was not found (no such bucket or folder), or cannot be listed")]
    assert widget(app.sidebar.selectbox, "Choose Log Name").options == [] and not app.exception


def test_refused_credentials_are_a_message_without_the_secret(bucket, s3_server, monkeypatch):
    """Credentials the store refuses: "permission denied" in the sidebar, and the secret key appears nowhere on the page."""
    root = f"s3://{bucket}/runs/{GRPO}"  # a root of its own: the page keeps a listing for a few seconds
    with wrong_credentials(s3_server.endpoint_url) as secret:
        with pytest.raises(StorageError, match="permission denied") as raised:
            list_runs(root)
        assert secret not in str(raised.value)
        app = start(root, monkeypatch)
    [error] = app.sidebar.error
    assert error.value.startswith(markdown_literal(f"{root}: permission denied")) and error.value.endswith("; check the credentials")
    assert error.value in page_text(app) and secret not in page_text(app)
    assert not app.exception


# The page on a root (each run reads RL_LOGGING_BOARD_ROOT: one page at a time) with a run loaded.
def opened(root, run: str, monkeypatch) -> AppTest:
    app = start(root, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").select(run).run()
    return load_and_view(app)


def test_the_page_lists_and_shows_runs_on_s3_as_on_disk(bucket, monkeypatch):
    """RL_LOGGING_BOARD_ROOT=s3://bucket/runs: the runs are listed and Load & View shows the disk's batch table."""
    assert widget(start(f"s3://{bucket}/runs", monkeypatch).sidebar.selectbox, "Choose Log Name").options == RUNS
    remote = batch_table(opened(f"s3://{bucket}/runs", GRPO, monkeypatch))
    assert len(remote) > 0
    pd.testing.assert_frame_equal(remote, batch_table(opened(SAMPLES, GRPO, monkeypatch)))


def test_the_trl_run_on_s3_says_its_format_as_on_disk(bucket, monkeypatch):
    """The TRL run from S3: the load report's caption names TRL's completion logs, word for word as from disk."""
    captions = [[caption.value for caption in opened(root, TRL, monkeypatch).caption if caption.value.startswith("Loaded ")] for root in (f"s3://{bucket}/runs", SAMPLES)]
    assert captions[0] == captions[1] and len(captions[0]) == 1
    assert f"({markdown_literal('TRL completion logs (log_completions=True: completions/completions_<step>.parquet)')})" in captions[0][0]


def test_an_object_replaced_by_one_of_the_same_size_redraws_the_step_curves(s3_server, live_run, monkeypatch):
    """Every reward rewritten to 9.0 on S3 (same size): after Load & View, the Step-Reward curve is at 9 as the table is."""
    url, local, name = live_run
    app = opened(url.rsplit("/", 1)[0], "run", monkeypatch)
    assert {point["mean"] for point in chart_spec(app.get("vega_lite_chart")[0])["data"]["values"] if point["series"] == "reward"} != {9.0}
    write_both(s3_server, live_run, re.sub(rb'"reward":\d\.0', b'"reward":9.0', (local / name).read_bytes()))
    load_and_view(app)
    assert set(batch_table(app)["reward"]) == {9.0}
    assert {point["mean"] for point in chart_spec(app.get("vega_lite_chart")[0])["data"]["values"] if point["series"] == "reward"} == {9.0}


def test_an_upper_case_scheme_and_a_trailing_slash_open_the_same_runs(bucket, monkeypatch):
    """S3://bucket/runs/ typed as it came from a console lists the same runs as s3://bucket/runs."""
    assert widget(start(f"S3://{bucket}/runs/", monkeypatch).sidebar.selectbox, "Choose Log Name").options == RUNS


def test_a_url_that_is_not_object_storage_is_refused_without_a_request(monkeypatch):
    """http:// (or any scheme but s3, gs, az, hf) in Log(s) Root Path is a message; the server fetches nothing."""
    monkeypatch.setattr(rl_board.reading.storage.fsspec, "filesystem", lambda *args, **kwargs: pytest.fail("a filesystem was made"))
    storage.cache_clear()
    with pytest.raises(StorageError, match=r"http:// is not object storage the board reads"):
        list_runs("http://127.0.0.1:9/runs")
    app = start("http://127.0.0.1:9/runs", monkeypatch)
    assert [error.value for error in app.sidebar.error] == [markdown_literal("http:// is not object storage the board reads: s3://, gs://, az:// or hf://")]


# A store kept from an earlier rerun raised the StorageError class of the rerun that made it, when the page was one
# file that Streamlit executes anew each rerun: the page's `except StorageError` missed it, and a stopped server showed
# a traceback on the next Load & View instead of the message (the same error was caught before the first load).
def test_load_and_view_again_after_the_server_stopped_is_a_message(monkeypatch):
    with contextlib.ExitStack() as stack:
        endpoint = stack.enter_context(running_moto())
        stack.enter_context(fresh_storage({**FAKE_CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}))
        name = make_bucket(endpoint, f"stopped-{uuid.uuid4().hex[:12]}")
        upload_folder(endpoint, SAMPLES / GRPO, f"s3://{name}/runs/{GRPO}")
        app = opened(f"s3://{name}/runs", GRPO, monkeypatch)
        assert len(batch_table(app)) > 0
        stack.pop_all().close()  # the server stops; the store it filled stays in the page's cache
        with fresh_storage({**FAKE_CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}):
            next(button for button in app.sidebar.button if button.label == "Load & View").click()
            app.run()
    assert not app.exception, app.exception
    assert any(markdown_literal(f"s3://{name}/runs/{GRPO}") in error.value and "could not be read" in error.value for error in app.error), [e.value for e in app.error]


def test_the_page_opens_a_run_from_an_index_cache_in_a_bucket(s3_server, tmp_path, monkeypatch):  # noqa: F811
    """A root indexed ahead of time into s3://bucket/prefix (`python -m rl_board index --cache`): a board whose
    RL_LOGGING_BOARD_CACHE is that prefix shows the run without indexing or parsing one line, as a fresh read does."""
    root = tmp_path / "runs"
    write_run(root / "grpo_run", steps=4, samples=8, tokens=16, ranks=2, grpo=True, workers=1)
    cache = f"s3://{make_bucket(s3_server.endpoint_url, 'page-index-cache')}/cache"
    assert index_command(["index", str(root), "--cache", cache]) == 0
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", cache)
    indexed = []
    for name in ("index_chunk", "summarize_lines"):
        original = getattr(rl_board.reading.store, name)
        monkeypatch.setattr(rl_board.reading.store, name, lambda *args, original=original, name=name: indexed.append(name) or original(*args))
    app = start(root, monkeypatch)
    first_step = min(line["step"] for line in lines_of(root / "grpo_run"))
    assert sorted(batch_table(app)["reward"]) == sorted(line["reward"] for line in lines_of(root / "grpo_run") if line["step"] == first_step)
    assert indexed == [] and not app.exception
    shutil.copytree(root, tmp_path / "copy")  # a run the cache does not hold (the page keeps the first's store)
    start(tmp_path / "copy", monkeypatch)
    assert "index_chunk" in indexed  # read afresh: the count can fail
