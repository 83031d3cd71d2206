"""Runs on S3, served by a real S3 server (moto): the board lists, loads, searches and shows them exactly as it does the
same runs on disk, keeps their indexes by ETag, reads only what an object uploaded again added, and says what went
wrong (missing bucket, refused credentials, endpoint down) in a message that never holds a secret."""

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pandas as pd
import pyarrow.feather
import pytest
from streamlit.testing.v1 import AppTest

import rl_board.reading.storage
import rl_board.reading.store
import rl_board.reading.workers
import rl_board.run
import rl_logging_board as board
from rl_board.reading.history import read_history
from rl_board.reading.images import SHOWN_IMAGE_SIDE, THUMBNAIL_SIDE
from rl_board.reading.index import IndexCache
from rl_board.reading.search import RunTexts, search_pattern, search_samples
from rl_board.reading.snapshot import read_sample_tokens, read_step_batch
from rl_board.reading.storage import StorageError, run_labels
from rl_board.reading.store import RunStore, list_runs
from tests.support import PROJECT, SAMPLES
from tests.support.runs import write_lines
from tests.support.s3_runs import (  # noqa: F401  (fixtures)
    GRPO,
    RUNS,
    SEARCHES,
    TEXTS,
    TRL,
    VLM,
    both,
    bucket,
    fresh_storage,
    live_run,
    loaded,
    next_step,
    numbers,
    page_text,
    write_both,
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


# An object uploaded again, other lines and longer, while a load reads it: the next load reads it anew (its identity,
# taken after the pass from the new object, made the next load take it for an append of the old: the old rewards were
# shown, and cached for every board).
def test_an_object_uploaded_again_while_it_is_read_is_read_anew_by_the_next_load(s3_server, live_run, monkeypatch):
    url, local, name = live_run
    store = RunStore(url)
    store.load(128)
    original = (local / name).read_bytes()
    write_both(s3_server, live_run, original + next_step(original))
    rewritten = b"".join(json.dumps(json.loads(line) | {"reward": 100.0 + index}).encode() + b"\n" for index, line in enumerate((original + next_step(original) * 2).splitlines()))
    index_chunk = rl_board.reading.store.index_chunk

    def uploaded_meanwhile(*arguments):
        indexed = index_chunk(*arguments)
        write_both(s3_server, live_run, rewritten)
        return indexed

    monkeypatch.setattr(rl_board.reading.store, "index_chunk", uploaded_meanwhile)
    store.load(128)
    monkeypatch.setattr(rl_board.reading.store, "index_chunk", index_chunk)
    for shown in (store.load(128), RunStore(url).load(128)):
        pd.testing.assert_frame_equal(numbers(shown), numbers(loaded(local)))


# A run of many small objects is indexed on threads: each object a request, whose round trip is the time (300 objects
# of 30 kB took 24 s one after the other at 30 ms a request). Here each chunk's indexing takes 50 ms more.
def test_many_small_objects_are_indexed_at_once(s3_server, bucket, tmp_path, monkeypatch):
    local = tmp_path / "run"
    for step in range(24):
        write_lines(local / f"rollout_data_rank_{step}.jsonl", [{"prompt": "p", "response": f"r{step}", "reward": float(step), "step": step}])
    url = f"s3://{bucket}/small-{uuid.uuid4().hex[:8]}/run"
    upload_folder(s3_server.endpoint_url, local, url)
    index_chunk, threads = rl_board.reading.store.index_chunk, set()

    def slow_request(*arguments):
        threads.add(threading.get_ident())
        time.sleep(0.05)
        return index_chunk(*arguments)

    monkeypatch.setattr(rl_board.reading.store, "index_chunk", slow_request)
    began = time.monotonic()
    snapshot = RunStore(url).load(128)
    assert len(threads) > 4 and time.monotonic() - began < 24 * 0.05
    pd.testing.assert_frame_equal(numbers(snapshot), numbers(loaded(local)))


# A rank file's URL is no run nor folder of runs, on object storage as on disk (its listing was the object itself: it
# opened as a run of one file, and the indexer indexed it).
def test_an_object_is_not_a_run_folder(bucket, tmp_path):
    run_url = f"s3://{bucket}/runs/{GRPO}"
    url = f"{run_url}/{next(entry.name for entry in rl_board.reading.storage.list_folder(run_url) if entry.name.endswith('.jsonl'))}"
    with pytest.raises(NotADirectoryError, match="is not a run folder: it is a file"):
        rl_board.run.open_run(url)
    with pytest.raises(NotADirectoryError, match="is not a folder of runs: it is a file"):
        rl_board.run.list_runs(url)
    with pytest.raises(NotADirectoryError, match="is not a run folder: it does not exist"):
        rl_board.run.open_run(f"s3://{bucket}/runs/missing")
    result = subprocess.run([sys.executable, "-m", "rl_board", "index", url, "--cache", str(tmp_path / "cache")], capture_output=True, text=True, cwd=PROJECT, env=os.environ)
    assert result.returncode == 2 and "is not a folder of runs: it is a file" in result.stderr


def test_a_missing_bucket_is_a_message(bucket):
    """A root in a bucket that does not exist is reported as not found."""
    with pytest.raises(StorageError, match="was not found"):
        list_runs(f"s3://missing-{uuid.uuid4().hex[:12]}/runs")


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


# An endpoint that takes connections and never answers (a stalled proxy, a hung store): a read fails after botocore's
# few attempts, not s3fs's retries around them (75 attempts: over an hour at the read timeout), and a step's texts,
# whose read of them all failed so, are not asked line by line (each line waited as long: 438 s for 8 at a 1 s timeout).
def test_a_stalled_endpoint_fails_a_read_after_a_few_attempts_and_a_step_does_not_ask_each_line(bucket, monkeypatch):
    run = loaded(f"s3://{bucket}/runs/{GRPO}")
    rows = run.step_rows(run.steps[0])
    accepted = []
    with socket.socket() as stalled:
        stalled.bind(("127.0.0.1", 0))
        stalled.listen(64)

        def take_connections():
            with contextlib.suppress(OSError):  # closed at the end
                while True:
                    accepted.append(stalled.accept()[0])

        threading.Thread(target=take_connections, daemon=True).start()
        monkeypatch.setattr(rl_board.reading.storage, "S3_CONFIG", {**rl_board.reading.storage.S3_CONFIG, "read_timeout": 0.5})
        with fresh_storage({"AWS_ENDPOINT_URL": f"http://127.0.0.1:{stalled.getsockname()[1]}"}):
            began = time.monotonic()
            with pytest.raises(rl_board.reading.storage.StorageUnreachable, match="could not be read: ReadTimeoutError"):
                rl_board.reading.storage.read_remote_range(rows["path"].iloc[0], 0, 100)
            assert len(accepted) <= 4 and time.monotonic() - began < 15
            asked, began = len(accepted), time.monotonic()
            batch = read_step_batch("stalled", rows)
            assert len(batch.problems) == len(rows) > 1 and all("ReadTimeoutError" in problem for problem in batch.problems)
            assert len(accepted) - asked <= 8 and time.monotonic() - began < 20  # one read of them all, its attempts
        for connection in accepted:
            connection.close()


# One file's request unanswered (a stalled connection, a slow block) while the others' answer: their texts are shown,
# only that file's lines said (all were hidden: the read of them all raised, and no line was asked again).
def test_a_step_shows_the_texts_of_the_files_the_store_answered_for(s3_server, bucket, tmp_path, monkeypatch):
    import botocore.exceptions
    import s3fs

    local = tmp_path / "run"
    for rank in (0, 1):
        write_lines(local / f"rollout_data_rank_{rank}.jsonl", [{"prompt": "p", "response": f"rank {rank}, {index}", "reward": float(index), "step": 1} for index in range(4)])
    url = f"s3://{bucket}/one-unanswered-{uuid.uuid4().hex[:8]}/run"
    upload_folder(s3_server.endpoint_url, local, url)
    run = loaded(url)
    cat_file = s3fs.S3FileSystem._cat_file

    async def rank_1_unanswered(self, path, *arguments, **options):
        if "rank_1" in path:
            raise botocore.exceptions.ReadTimeoutError(endpoint_url=path)
        return await cat_file(self, path, *arguments, **options)

    monkeypatch.setattr(s3fs.S3FileSystem, "_cat_file", rank_1_unanswered)
    batch = read_step_batch("one unanswered", run.step_rows(1))
    assert batch.table["response"].tolist() == [f"rank 0, {index}" for index in range(4)] + [""] * 4
    assert len(batch.problems) == 4 and all("rollout_data_rank_1.jsonl" in problem and "ReadTimeoutError" in problem for problem in batch.problems)


def test_the_endpoint_url_option_sets_the_s3_endpoint(monkeypatch):
    """streamlit run rl_logging_board.py -- --endpoint-url URL sends s3:// requests to URL."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")  # put back after the test
    monkeypatch.setattr(sys, "argv", ["rl_logging_board.py", "--root", "s3://b/runs", "--endpoint-url", "http://127.0.0.1:9000"])
    options = board.launch_options()
    assert (options.root, options.endpoint_url) == ("s3://b/runs", "http://127.0.0.1:9000")
    assert os.environ["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000"


def test_the_load_report_names_the_logger_s_files_as_the_logger_names_them(bucket):
    """The caption's format names the rank files as the rollout logger writes them: rollout_data_rank_<rank>_<launch>.jsonl."""
    remote, local = both(bucket, VLM)
    assert remote.format == local.format
    assert "rollout_data_rank_" in remote.format


# canonical_paths finds each folder's real path once (a run of thousands of converted files took a realpath of each at
# every refresh) and gives what canonical_path gives each: through a linked folder, a file that is a link, a link to a
# link, a path with "..", an object's URL.
def test_canonical_paths_are_each_file_s_canonical_path(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir()
    for name in ("a.jsonl", "b.jsonl"):
        (real / name).write_text("{}\n")
    (tmp_path / "linked").symlink_to(real)
    (real / "c.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    (tmp_path / "elsewhere.jsonl").write_text("{}\n")
    (real / "d.jsonl").symlink_to(real / "c.jsonl")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    paths = [str(tmp_path / "linked" / name) for name in ("a.jsonl", "b.jsonl", "c.jsonl", "d.jsonl")] + [str(real / ".." / "real" / "a.jsonl"), "s3://bucket/run/a.jsonl"]
    canonical = rl_board.reading.storage.canonical_paths(paths)
    assert canonical == {path: rl_board.reading.storage.canonical_path(path) for path in paths}
    assert canonical[paths[0]] == str(real.resolve() / "a.jsonl") and canonical[paths[2]] == canonical[paths[3]] == str((tmp_path / "elsewhere.jsonl").resolve())


SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzzSECRET"  # AWS's secret keys are base64: "/" and "+" in them


# Credentials in a URL (s3://key:secret@bucket/...) are refused before any request, with where they go instead, and
# no message shows them: the API's, the indexer's (its root or its cache), the page's (its root, sidebar and errors).
# botocore took "key:secret@bucket" for a bucket's name and quoted it in its error, which every message showed.
def test_credentials_in_a_url_are_neither_read_nor_shown(tmp_path, monkeypatch):
    url = f"s3://AKIAIOSFODNN7EXAMPLE:{SECRET}@bucket/runs"
    for call in (rl_board.run.list_runs, rl_board.run.open_run):
        with pytest.raises(StorageError) as raised:
            call(url)
        assert SECRET not in str(raised.value) and "credentials in the URL are not read" in str(raised.value) and "s3://…@bucket/runs" in str(raised.value)
    for arguments in ([url, "--cache", str(tmp_path / "cache")], [str(SAMPLES / "grpo_tiny_example"), "--cache", url]):
        result = subprocess.run([sys.executable, "-m", "rl_board", "index", *arguments], capture_output=True, text=True, cwd=PROJECT)
        assert result.returncode == 2 and SECRET not in result.stdout + result.stderr and "credentials in the URL are not read" in result.stderr
    monkeypatch.setenv("RL_LOGGING_BOARD_ROOT", url)
    app = AppTest.from_file(board.__file__, default_timeout=120)
    app.run()
    assert not app.exception and SECRET not in page_text(app) and "credentials in the URL are not read" in page_text(app)
    assert rl_board.reading.storage.shown_url(f"s3://user:pass@word{SECRET}@bucket/runs") == "s3://…@bucket/runs"  # an "@" in it


# A signature or token in a URL's query (a presigned URL's X-Amz-Signature, hf's token) is not shown either.
def test_a_token_in_a_url_s_query_is_not_shown(bucket):
    for call in (rl_board.run.list_runs, rl_board.run.open_run):
        with pytest.raises(OSError) as raised:
            call(f"s3://{bucket}/runs?X-Amz-Signature={SECRET}&X-Amz-Expires=60")
        assert SECRET not in str(raised.value) and "X-Amz-Signature=…&X-Amz-Expires=60" in str(raised.value)


# S3:// (a scheme in capitals, as the page takes it) opens in the API and the indexer too: fsspec took "S3:" for a
# bucket's name.
def test_a_url_s_scheme_in_capitals_is_the_same_storage(bucket, tmp_path, monkeypatch):
    upper = f"S3://{bucket}/runs"
    assert rl_board.run.list_runs(upper) == [f"s3://{bucket}/runs/{name}" for name in RUNS]
    assert len(rl_board.run.open_run(f"S3://{bucket}/runs/{RUNS[0]}").samples) == len(rl_board.run.open_run(f"s3://{bucket}/runs/{RUNS[0]}").samples) > 0
    result = subprocess.run([sys.executable, "-m", "rl_board", "index", upper, "--cache", str(tmp_path / "cache")], capture_output=True, text=True, cwd=PROJECT, env=os.environ)
    assert result.returncode == 0, result.stderr


# Runs shown together are named by their folder, with the folders above it where two share a name: on disk and on
# object storage alike.
def test_runs_shown_together_are_named_apart():
    assert run_labels(["/data/runs/a", "/data/runs/b"]) == ["a", "b"]
    assert run_labels(["/coll/grpo", "/coll/grpo/grpo", "/coll/other"]) == ["coll/grpo", "grpo/grpo", "other"]
    assert run_labels(["s3://bucket/x/run/", "s3://bucket/y/run", "/local/run"]) == ["x/run", "y/run", "local/run"]
    assert run_labels(["/a/b/run", "/c/b/run"]) == ["a/b/run", "c/b/run"]
    assert run_labels(["s3://grpo", "s3://grpo/grpo"]) == ["grpo", "grpo/grpo"]  # a bucket's root run: the bucket
    assert run_labels(["/data/run", "s3://data/run"]) == ["/data/run", "s3://data/run"]  # alike but for the scheme: whole
