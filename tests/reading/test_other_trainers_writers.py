"""The writers of other trainers' files (tests/support/other_trainers.py) keep those trainers' byte layouts, and the S3 test
server (tests/support/s3_server.py) round-trips a run folder."""

import json
import os
import uuid

import pytest
import s3fs

from tests.support.other_trainers import verl_run, write_openrlhf_rank_files, write_verl_dump, write_verl_fork_run
from tests.support.s3_server import (  # noqa: F401  (s3_server: a fixture)
    append_object,
    enforced_auth,
    environment,
    make_bucket,
    s3_server,
    s3fs_filesystem,
    upload_folder,
)

VERL_TRAINING_KEYS = ["input", "output", "gts", "score", "step", "acc", "pred"]
VERL_VALIDATION_KEYS = ["input", "output", "gts", "score", "step", "reward", "acc", "pred"]


def test_verl_dump_drops_short_extras_and_overwrites_base_keys_in_place(tmp_path):
    path = write_verl_dump(tmp_path / "d", 7, ["q1", "问"], ["a", "答"], ["1", None], [1.0, 0.0],
                           {"short": [1], "score": [5, 6], "acc": [True, False]})
    assert path == tmp_path / "d" / "7.jsonl"
    assert path.read_bytes() == (
        '{"input": "q1", "output": "a", "gts": "1", "score": 5, "step": 7, "acc": true}\n'
        '{"input": "问", "output": "答", "gts": null, "score": 6, "step": 7, "acc": false}\n'
    ).encode()


def test_verl_run_writes_one_file_per_step_in_verl_byte_layout(tmp_path):
    run = verl_run(tmp_path / "verl", steps=3, validation_steps=(0, 2, 3))
    assert sorted(os.listdir(run / "rollout")) == ["1.jsonl", "2.jsonl", "3.jsonl"]
    assert sorted(os.listdir(run / "validation")) == ["0.jsonl", "2.jsonl", "3.jsonl"]
    for folder, keys in (("rollout", VERL_TRAINING_KEYS), ("validation", VERL_VALIDATION_KEYS)):
        for path in (run / folder).iterdir():
            data = path.read_bytes()
            assert data.endswith(b"}\n") and b"\n\n" not in data
            rows = [json.loads(line) for line in data.decode("utf-8").split("\n")[:-1]]
            assert all(list(row) == keys and row["step"] == int(path.stem) for row in rows)
    first = (run / "rollout" / "1.jsonl").read_text("utf-8")
    assert "计算 15 减去 8" in first and "\\u" not in first  # ensure_ascii=False: CJK stays UTF-8
    assert '\\"What is' in first and "\\n</think>" in first  # an output with quotes and newlines


def test_verl_run_groups_are_n_samples_with_some_all_equal(tmp_path):
    run = verl_run(tmp_path, steps=1, n=4, prompts_per_step=3, validation_steps=())
    rows = [json.loads(line) for line in (run / "rollout" / "1.jsonl").read_text("utf-8").splitlines()]
    groups = [rows[i:i + 4] for i in range(0, 12, 4)]
    assert all(len({row["input"] for row in group}) == 1 for group in groups)
    assert [{row["score"] for row in group} for group in (groups[0], groups[2])] == [{1.0}, {0.0}]
    assert all(row["acc"] == (row["pred"] == row["gts"]) == (row["score"] == 1.0) for row in rows)


def test_openrlhf_rank_files_follow_the_seed_example(tmp_path):
    paths = write_openrlhf_rank_files(tmp_path, steps=3, ranks=2, per_rank=2)
    assert [p.name for p in paths] == ["data_rank0.jsonl", "data_rank1.jsonl"]
    rows = [json.loads(line) for p in paths for line in p.read_text("utf-8").splitlines()]
    assert len(rows) == 12 and {row["step"] for row in rows} == {1, 2, 3}
    assert list(rows[0]) == ["prompt", "response", "response_tokens", "logprobs", "ref_logprobs", "values",
                             "token_rewards", "reward", "step", "ref_response", "ref_reward"]
    for row in rows:
        n = len(row["logprobs"])
        assert len(row["ref_logprobs"]) == len(row["values"]) == len(row["token_rewards"]) == n
        assert len(row["response_tokens"]) == n + row["response"].endswith("<PAD>")
        assert all(lp < 0 and abs(lp - ref) < 0.2 for lp, ref in zip(row["logprobs"], row["ref_logprobs"]))
    assert any(row["response_tokens"][-1] == "<PAD>" for row in rows)


def test_verl_fork_run_appends_rank0_file_in_logger_key_order(tmp_path):
    run = write_verl_fork_run(tmp_path, "proj", "exp", steps=2)
    path = run / "rollout_data_rank0.jsonl"
    assert path == tmp_path / "proj" / "exp" / "rollout_data_rank0.jsonl"
    rows = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    assert [row["step"] for row in rows] == [1] * 12 + [2] * 12
    assert list(rows[0]) == ["step", "prompt", "response", "response_tokens", "logprobs", "token_rewards", "reward",
                             "ground_truth", "values", "rm_response"]
    for row in rows:
        assert len(row["response_tokens"]) == len(row["logprobs"]) == len(row["token_rewards"]) == len(row["values"])
        assert row["response"].endswith("<|im_end|>") and len(row["rm_response"]) > 1000
    assert any("\ufffd" in row["response_tokens"] for row in rows)  # an emoji split over two byte tokens


def test_environment_restores_set_and_unset_variables():
    os.environ["RLB_TEST_SET"] = "before"
    os.environ.pop("RLB_TEST_UNSET", None)
    with environment({"RLB_TEST_SET": None, "RLB_TEST_UNSET": "during"}):
        assert "RLB_TEST_SET" not in os.environ and os.environ["RLB_TEST_UNSET"] == "during"
    assert os.environ.pop("RLB_TEST_SET") == "before" and "RLB_TEST_UNSET" not in os.environ


def test_s3_round_trip_lists_reads_ranges_and_grows(s3_server, tmp_path):
    run = verl_run(tmp_path / "verl", steps=2, validation_steps=(0,))
    bucket = make_bucket(s3_server.endpoint_url, f"runs-{uuid.uuid4().hex[:12]}")
    upload_folder(s3_server.endpoint_url, run, f"s3://{bucket}/team/verl")
    fs = s3fs_filesystem(s3_server.endpoint_url)
    assert sorted(fs.find(f"{bucket}/team/verl")) == [
        f"{bucket}/team/verl/{name}" for name in ("rollout/1.jsonl", "rollout/2.jsonl", "validation/0.jsonl")
    ]
    local = (run / "rollout" / "2.jsonl").read_bytes()
    remote = f"{bucket}/team/verl/rollout/2.jsonl"
    assert fs.cat_file(remote, start=10, end=60) == local[10:60]  # keywords: positional start lands on version_id
    before = fs.info(remote)
    append_object(s3_server.endpoint_url, f"s3://{remote}", b'{"more": 1}\n')
    assert fs.info(remote)["size"] == before["size"]  # s3fs answers from its listing cache
    after = fs.info(remote, refresh=True)
    assert after["size"] == len(local) + 12 and after["ETag"] != before["ETag"]
    assert s3fs.S3FileSystem(skip_instance_cache=True).ls(bucket) == [f"{bucket}/team"]  # AWS_ENDPOINT_URL honoured


def test_enforced_auth_refuses_other_credentials(s3_server):
    bucket = make_bucket(s3_server.endpoint_url, f"auth-{uuid.uuid4().hex[:12]}")
    endpoint = {"endpoint_url": s3_server.endpoint_url}
    with enforced_auth(s3_server.endpoint_url) as (key, secret):
        assert s3fs.S3FileSystem(key=key, secret=secret, client_kwargs=endpoint, skip_instance_cache=True).ls(bucket) == []
        with pytest.raises(PermissionError, match="does not exist in our records"):
            s3fs_filesystem(s3_server.endpoint_url).ls(bucket)
    assert s3fs_filesystem(s3_server.endpoint_url).ls(bucket) == []
