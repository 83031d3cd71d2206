"""An S3 server for tests: moto's ThreadedMotoServer on a free local port, with fake credentials and AWS_ENDPOINT_URL
set for the whole test session, and helpers to fill buckets and grow objects. Use it with
`from tests.support.s3_server import s3_server  # noqa: F401` in a test module.

moto keeps its buckets in process-global state: every test of the session sees every bucket, so name them uniquely."""

import contextlib
import json
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
import s3fs
from moto.server import ThreadedMotoServer

from rl_board.reading.storage import storage
from rl_board.reading.workers import WORKER_POOL_LOCK, started_worker_pool

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}

# Settings that would send the tests' S3 calls elsewhere or fail them: a service-specific endpoint wins over
# AWS_ENDPOINT_URL, and an unknown AWS_PROFILE raises ProfileNotFound.
STRAY_SETTINGS = ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN")


# What a test needs of the server: where to send requests.
@dataclass(frozen=True)
class S3Server:
    endpoint_url: str


# os.environ has no "set or unset": None unsets.
def set_variable(name: str, value: str | None):
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


# Set (or, with None, unset) environment variables for a block, then put back what was there.
@contextlib.contextmanager
def environment(values: dict):
    saved = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            set_variable(name, value)
        yield
    finally:
        for name, value in saved.items():
            set_variable(name, value)


# Port 0 lets the OS pick a free port with no race; the server reports the one it bound.
@contextlib.contextmanager
def running_moto():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


# One server for the session. What was made before it started asks elsewhere, and what is made while it runs points at
# it: the board's and s3fs's cached filesystems, and the worker processes (born with the environment of their day).
# Both are dropped when it starts and when it stops.
@pytest.fixture(scope="session")
def s3_server():
    with running_moto() as endpoint_url:
        settings = {**FAKE_CREDENTIALS, "AWS_ENDPOINT_URL": endpoint_url, **dict.fromkeys(STRAY_SETTINGS)}
        with environment(settings):
            forget_storage()
            yield S3Server(endpoint_url)
    forget_storage()


def forget_storage():
    storage.cache_clear()
    s3fs.S3FileSystem.clear_instance_cache()
    with WORKER_POOL_LOCK:
        if started_worker_pool.cache_info().currsize:
            started_worker_pool().shutdown()
            started_worker_pool.cache_clear()


# Explicit fake credentials: the helpers work whatever the environment holds.
def s3_client(endpoint_url: str, service: str = "s3"):
    return boto3.client(
        service,
        endpoint_url=endpoint_url,
        aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region_name=FAKE_CREDENTIALS["AWS_DEFAULT_REGION"],
    )


# "s3://bucket/some/key" -> ("bucket", "some/key").
def split_s3_url(s3_url: str) -> tuple[str, str]:
    bucket, _, key = s3_url.removeprefix("s3://").partition("/")
    return bucket, key


# Buckets are process-global in moto: callers pass a name unique to their test.
def make_bucket(endpoint_url: str, name: str) -> str:
    s3_client(endpoint_url).create_bucket(Bucket=name)
    return name


# Every file under local_folder, at the same relative path under s3_url.
def upload_folder(endpoint_url: str, local_folder, s3_url: str) -> list[str]:
    bucket, prefix = split_s3_url(s3_url.rstrip("/"))
    client = s3_client(endpoint_url)
    keys = []
    for path in sorted(p for p in Path(local_folder).rglob("*") if p.is_file()):
        key = "/".join(filter(None, [prefix, path.relative_to(local_folder).as_posix()]))
        client.upload_file(str(path), bucket, key)
        keys.append(key)
    return keys


# S3 objects cannot be appended to: a log growing on object storage is re-uploaded whole (new ETag, new size).
def append_object(endpoint_url: str, s3_url: str, data: bytes) -> str:
    bucket, key = split_s3_url(s3_url)
    client = s3_client(endpoint_url)
    try:
        old = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except client.exceptions.NoSuchKey:
        old = b""
    return client.put_object(Bucket=bucket, Key=key, Body=old + data)["ETag"]


# A fresh filesystem each call (skip_instance_cache): s3fs otherwise hands back one shared instance, listing cache
# included, for equal arguments.
def s3fs_filesystem(endpoint_url: str) -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint_url}, skip_instance_cache=True)


# moto checks signatures only after its no-auth request count runs out; POST /moto-api/reset-auth sets that count
# (as a raw body: urllib's default form content type leaves moto an empty body and a 500).
def set_no_auth_requests(endpoint_url: str, count: str):
    url = f"{endpoint_url}/moto-api/reset-auth"
    request = urllib.request.Request(url, data=count.encode(), method="POST", headers={"Content-Type": "text/plain"})
    urllib.request.urlopen(request).close()


# Real credential checks for a block: yields the (key, secret) of an IAM user allowed everything; any other pair
# (the fake "testing" one included) is refused until the block ends. The server is shared: keep such blocks short.
@contextlib.contextmanager
def enforced_auth(endpoint_url: str, user: str = "reader"):
    iam = s3_client(endpoint_url, "iam")
    iam.create_user(UserName=user)
    allow_all = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    iam.put_user_policy(UserName=user, PolicyName="all", PolicyDocument=json.dumps(allow_all))
    key = iam.create_access_key(UserName=user)["AccessKey"]
    set_no_auth_requests(endpoint_url, "0")
    try:
        yield key["AccessKeyId"], key["SecretAccessKey"]
    finally:
        set_no_auth_requests(endpoint_url, "inf")
        iam.delete_access_key(UserName=user, AccessKeyId=key["AccessKeyId"])
        iam.delete_user_policy(UserName=user, PolicyName="all")
        iam.delete_user(UserName=user)
