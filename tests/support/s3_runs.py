"""The bundled runs uploaded to the test S3 server (a module's bucket), a live copy to grow or replace on S3 and on
disk alike, and storage built anew for other credentials."""

import contextlib
import json
import uuid

import pandas as pd
import pytest
import s3fs
from google.protobuf.json_format import MessageToDict

from rl_board.reading.snapshot import RunSnapshot
from rl_board.reading.storage import storage
from rl_board.reading.store import RunStore
from tests.support import SAMPLES
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


@contextlib.contextmanager
def wrong_credentials(endpoint_url: str):
    with enforced_auth(endpoint_url) as (key, _):
        secret = f"wrong-{uuid.uuid4().hex}"
        with fresh_storage({"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}):
            yield secret
