"""Runs on S3, served by a real S3 server (moto): the board lists, loads, searches and shows them exactly as it does the
same runs on disk, keeps their indexes by ETag, reads only what an object uploaded again added, and says what went
wrong (missing bucket, refused credentials, endpoint down) in a message that never holds a secret."""

import contextlib
import json
import os
import re
import socket
import sys
import time
import uuid

import numpy as np
import pandas as pd
import pyarrow.feather
import pytest
import s3fs
from google.protobuf.json_format import MessageToDict
from streamlit.testing.v1 import AppTest

import rl_board.reading.storage
import rl_board.reading.store
import rl_board.reading.workers
import rl_logging_board as board
from rl_board.reading.history import read_history
from rl_board.reading.images import SHOWN_IMAGE_SIDE, THUMBNAIL_SIDE
from rl_board.reading.index import IndexCache
from rl_board.reading.search import RunTexts, search_pattern, search_samples
from rl_board.reading.snapshot import RunSnapshot, read_sample_tokens, read_step_batch
from rl_board.reading.storage import StorageError, storage
from rl_board.reading.store import RunStore, list_runs
from rl_board.text import markdown_literal
from tests.conftest import PROJECT
from tests.s3_server import (  # noqa: F401  (s3_server: a fixture)
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
from tests.test_app import batch_table, chart_spec, load_and_view, start, widget

SAMPLES = PROJECT / "rollout_samples"
RUNS = ["from_trl_log_completions", "grpo_tiny_example", "grpo_tiny_vlm_example"]  # as the board lists them: by name
TRL, GRPO, VLM = RUNS
SEARCHES = {TRL: "sort 1 ", GRPO: " 0 1 6", VLM: "yellow"}  # each found in some of the run's samples, not all
TEXTS = ["prompt", "response", "ref_response", "ground_truth", "images"]


@pytest.fixture(scope="module")
def bucket(s3_server):
    storage.cache_clear()  # a filesystem made before the server's AWS_ENDPOINT_URL was set would ask AWS
    name = make_bucket(s3_server.endpoint_url, f"storage-{uuid.uuid4().hex[:12]}")
    for run in RUNS:
        upload_folder(s3_server.endpoint_url, SAMPLES / run, f"s3://{name}/runs/{run}")
    return name


def loaded(run_dir) -> RunSnapshot:
    return RunStore(str(run_dir)).load(128)


# A snapshot's samples without where they were read from (an object's URL, a file's path, the index's id).
def numbers(snapshot: RunSnapshot) -> pd.DataFrame:
    return snapshot.samples.drop(columns=["path", "index_id"])


def both(bucket: str, run: str) -> tuple[RunSnapshot, RunSnapshot]:
    return loaded(f"s3://{bucket}/runs/{run}"), loaded(SAMPLES / run)


# Storage used from here on is built anew (the board's and s3fs's cached filesystems hold their endpoint and
# credentials), and again once the block has put the environment back.
@contextlib.contextmanager
def fresh_storage(variables: dict):
    try:
        with environment(variables):
            storage.cache_clear()
            s3fs.S3FileSystem.clear_instance_cache()
            yield
    finally:
        storage.cache_clear()
        s3fs.S3FileSystem.clear_instance_cache()


# Every text the page sent, one a line: messages, widgets' labels and values, tables.
def page_text(app) -> str:
    def texts(value):
        if isinstance(value, dict | list):
            for item in value.values() if isinstance(value, dict) else value:
                yield from texts(item)
        elif isinstance(value, str):
            yield value

    def walk(node):
        if getattr(node, "proto", None) is not None:
            yield from texts(MessageToDict(node.proto))
        for child in getattr(node, "children", {}).values():
            yield from walk(child)

    return "\n".join(walk(app._tree))


def test_the_root_lists_the_runs_uploaded(bucket):
    """Log(s) Root Path s3://bucket/runs offers the three runs uploaded there."""
    assert list_runs(f"s3://{bucket}/runs") == RUNS


@pytest.mark.parametrize("run", RUNS)
def test_a_run_on_s3_loads_the_same_samples_as_on_disk(bucket, run):
    """Every number of every sample loaded from S3 equals the one loaded from disk, step by step."""
    remote, local = both(bucket, run)
    assert len(remote.samples) > 0 and remote.steps == local.steps
    pd.testing.assert_frame_equal(numbers(remote), numbers(local))
    assert remote.format == local.format and remote.reward_note == local.reward_note
    assert remote.samples["path"].str.startswith(f"s3://{bucket}/").all() or run == TRL  # TRL's: converted in the cache


@pytest.mark.parametrize("run", RUNS)
def test_a_step_read_back_from_s3_has_the_same_texts(bucket, run):
    """The batch of the first and last steps shows the same prompts, responses and images from S3 as from disk."""
    remote, local = both(bucket, run)
    for step in (remote.steps[0], remote.steps[-1]):
        remote_batch = read_step_batch("remote", remote.step_rows(step))
        local_batch = read_step_batch("local", local.step_rows(step))
        assert remote_batch.problems == [] and local_batch.problems == []
        pd.testing.assert_frame_equal(remote_batch.table[TEXTS], local_batch.table[TEXTS])


@pytest.mark.parametrize("run", [GRPO, VLM])
def test_a_sample_s_tokens_from_s3_are_the_same(bucket, run):
    """The token area of a sample shows the same tokens and per-token numbers from S3 as from disk."""
    remote, local = both(bucket, run)
    for position in (0, 5, len(remote.samples) - 1):
        found = [read_sample_tokens(*snapshot.samples.loc[position, ["path", "offset", "length", "step"]]) for snapshot in (remote, local)]
        assert found[0] is not None and len(found[0].logprobs) > 0
        np.testing.assert_equal(vars(found[0]), vars(found[1]))


@pytest.mark.parametrize("run", RUNS)
def test_a_search_of_a_run_on_s3_finds_the_same_samples(bucket, run):
    """Searching the run on S3 finds the same samples, at the same places, as searching it on disk."""
    pattern = search_pattern(SEARCHES[run], regex=False, match_case=False)
    found = [search_samples(RunTexts(), snapshot.samples, pattern, "prompt and response") for snapshot in both(bucket, run)]
    assert 0 < (found[0].place > 0).sum() < len(found[0].place) and found[0].searched == len(found[0].place)
    for name in ("place", "start", "end"):
        np.testing.assert_array_equal(getattr(found[0], name), getattr(found[1], name))


@pytest.mark.parametrize("run", RUNS)
def test_the_training_history_of_a_run_on_s3_is_the_same(bucket, run):
    """The training metrics of a run on S3 (its metrics file, or TRL's checkpoints' trainer_state.json) are the disk's."""
    remote, local = read_history(f"s3://{bucket}/runs/{run}"), read_history(SAMPLES / run)
    assert len(remote.train) > 0 and remote.sources == local.sources
    pd.testing.assert_frame_equal(remote.train, local.train)
    pd.testing.assert_frame_equal(remote.eval, local.eval)
    assert (remote.config, remote.best) == (local.config, local.best)


def test_the_prompt_s_image_of_a_run_on_s3_is_shown_as_from_disk(bucket):
    """The VLM run's prompt images, read from S3, are shown with the same bytes; one missing on S3 says so."""
    remote, local = both(bucket, VLM)
    step = remote.steps[-1]
    rows = [read_step_batch(name, snapshot.step_rows(step)).table for name, snapshot in (("remote", remote), ("local", local))]
    for (remote_path, references), local_path in zip(rows[0][["path", "images"]].itertuples(index=False), rows[1]["path"]):
        for side in (SHOWN_IMAGE_SIDE, THUMBNAIL_SIDE):
            shown = board.page_image(remote_path, references[0], side)
            assert not isinstance(shown, str), shown
            assert shown == board.page_image(local_path, references[0], side)
    missing = board.page_image(rows[0]["path"][0], {"path": "images/missing.png"}, SHOWN_IMAGE_SIDE)
    assert missing == f"s3://{bucket}/runs/{VLM}/images/missing.png was not found (no such bucket, folder or object)"
    assert "not read" in board.page_image(rows[0]["path"][0], {"path": "../grpo_tiny_example/rollout_meta.json"}, SHOWN_IMAGE_SIDE)


def test_a_second_store_loads_from_the_index_cache_kept_by_etag_without_reading_the_object(bucket, s3_server, monkeypatch):
    """Opening the run again (a restarted server) loads it from the index cache: not a byte of the rank file is read."""
    url = f"s3://{bucket}/runs/{VLM}"
    first = loaded(url)
    [rank_file] = first.samples["path"].unique()
    head = s3_client(s3_server.endpoint_url).head_object(Bucket=bucket, Key=split_s3_url(rank_file)[1])
    cached = pyarrow.feather.read_table(IndexCache().path_of(rank_file))
    identity = json.loads(cached.schema.metadata[b"rl_logging_board"])["identity"]
    assert (identity["etag"], identity["size"]) == (head["ETag"].strip('"'), head["ContentLength"])

    def refuse(*args):
        raise AssertionError(f"read again: {args[:3]}")

    for module, name in ((rl_board.reading.store, "index_chunk"), (rl_board.reading.store, "summarize_lines"), (rl_board.reading.storage, "read_remote_range")):
        monkeypatch.setattr(module, name, refuse)
    pd.testing.assert_frame_equal(numbers(loaded(url)), numbers(first))


# A copy of the VLM run's rank file on S3 (under a prefix of its own) and on disk, to grow or replace both alike.
@pytest.fixture
def live_run(bucket, s3_server, tmp_path):
    [source] = (SAMPLES / VLM).glob("rollout_data_rank_*.jsonl")
    url, local = f"s3://{bucket}/live-{uuid.uuid4().hex[:8]}/run", tmp_path / "run"
    local.mkdir()
    (local / source.name).write_bytes(source.read_bytes())
    upload_folder(s3_server.endpoint_url, local, url)
    return url, local, source.name


# The last step's lines again, as the step after it: what a trainer logs next.
def next_step(data: bytes) -> bytes:
    lines = [json.loads(line) for line in data.splitlines()]
    last = max(line["step"] for line in lines)
    return b"".join(json.dumps(line | {"step": last + 1}).encode() + b"\n" for line in lines if line["step"] == last)


def write_both(s3_server, live_run, data: bytes):
    url, local, name = live_run
    s3_client(s3_server.endpoint_url).put_object(Bucket=split_s3_url(url)[0], Key=f"{split_s3_url(url)[1]}/{name}", Body=data)
    (local / name).write_bytes(data)


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


def test_a_rank_file_replaced_by_other_lines_is_indexed_anew(s3_server, live_run):
    """An object uploaded again with other lines, of the same size or larger, is read anew: the page shows the new lines."""
    url, local, name = live_run
    store = RunStore(url)
    store.load(128)
    [index] = store.files.values()
    original = (local / name).read_bytes()
    first, second, rest = original.split(b"\n", 2)
    for data in (b"\n".join([second, first, rest]), next_step(original) + original):  # the same size; larger
        old_id = index.index_id
        write_both(s3_server, live_run, data)
        assert store.needs_work(128)
        snapshot = store.load(128)
        assert index.index_id != old_id and index.indexed_to == len(data)
        pd.testing.assert_frame_equal(numbers(snapshot), numbers(loaded(local)))


def test_a_missing_bucket_is_a_message(bucket):
    """A root in a bucket that does not exist is reported as not found."""
    with pytest.raises(StorageError, match="was not found"):
        list_runs(f"s3://missing-{uuid.uuid4().hex[:12]}/runs")


def test_the_page_says_when_the_root_s_bucket_is_missing(bucket, monkeypatch):
    """Log(s) Root Path in a missing bucket: a sidebar error naming it, no run to choose, no exception."""
    root = f"s3://missing-{uuid.uuid4().hex[:12]}/x"
    app = start(root, monkeypatch)
    assert [error.value for error in app.sidebar.error] == [markdown_literal(f"{root} was not found (no such bucket or folder), or cannot be listed")]
    assert widget(app.sidebar.selectbox, "Choose Log Name").options == [] and not app.exception


@contextlib.contextmanager
def wrong_credentials(endpoint_url: str):
    with enforced_auth(endpoint_url) as (key, _):
        secret = f"wrong-{uuid.uuid4().hex}"
        with fresh_storage({"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}):
            yield secret


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


def test_an_unreachable_endpoint_fails_within_seconds_with_a_message(bucket):
    """An S3 endpoint nobody listens on: "could not be read" within 15 s, not a hang."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{unused.getsockname()[1]}"  # bound, never listening: connections are refused
        with fresh_storage({"AWS_ENDPOINT_URL": endpoint}):
            began = time.monotonic()
            with pytest.raises(StorageError, match="could not be read: EndpointConnectionError"):
                list_runs(f"s3://{bucket}/runs")
            assert time.monotonic() - began < 15
    assert list_runs(f"s3://{bucket}/runs") == RUNS  # the real endpoint again


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


def test_the_endpoint_url_option_sets_the_s3_endpoint(monkeypatch):
    """streamlit run rl_logging_board.py -- --endpoint-url URL sends s3:// requests to URL."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")  # put back after the test
    monkeypatch.setattr(sys, "argv", ["rl_logging_board.py", "--root", "s3://b/runs", "--endpoint-url", "http://127.0.0.1:9000"])
    options = board.launch_options()
    assert (options.root, options.endpoint_url) == ("s3://b/runs", "http://127.0.0.1:9000")
    assert os.environ["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000"


def test_an_object_replaced_by_one_of_the_same_size_redraws_the_step_curves(s3_server, live_run, monkeypatch):
    """Every reward rewritten to 9.0 on S3 (same size): after Load & View, the Step-Reward curve is at 9 as the table is."""
    url, local, name = live_run
    app = opened(url.rsplit("/", 1)[0], "run", monkeypatch)
    assert {point["mean"] for point in chart_spec(app.get("vega_lite_chart")[0])["data"]["values"] if point["series"] == "reward"} != {9.0}
    write_both(s3_server, live_run, re.sub(rb'"reward":\d\.0', b'"reward":9.0', (local / name).read_bytes()))
    load_and_view(app)
    assert set(batch_table(app)["reward"]) == {9.0}
    assert {point["mean"] for point in chart_spec(app.get("vega_lite_chart")[0])["data"]["values"] if point["series"] == "reward"} == {9.0}


def test_the_load_report_names_the_logger_s_files_as_the_logger_names_them(bucket):
    """The caption's format names the rank files as the rollout logger writes them: rollout_data_rank_<rank>_<launch>.jsonl."""
    remote, local = both(bucket, VLM)
    assert remote.format == local.format
    assert "rollout_data_rank_" in remote.format


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
