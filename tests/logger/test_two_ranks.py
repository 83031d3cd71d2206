"""Two processes on CPU (gloo, launched by torchrun): one file per rank, together the whole generation batch; rank 0's
metrics file; TRL's `kl` from both ranks' lines."""

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from collections import Counter, defaultdict

import pytest

from tests.support import PROJECT
from tests.support.logger_runs import KL_ROUNDING, TRL_POOLS_RANKS, read_records, tiny_model_dir, trl_step_kl

# What a rank prints when gloo's threads abort it (std::terminate on a still-joinable thread), seen mid-training and at
# exit, now and then, on a busy 2-core machine, with no error of ours: the run is tried once more.
GLOO_ABORT = "terminate called without an active exception"


def test_two_ranks_write_the_whole_batch_once(tmp_path):
    environment = {**os.environ, "SAVE_ROLLOUT_DATA": "true", "EXP_NAME": "two_ranks", "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(PROJECT / "tests" / "support" / "logger_two_ranks.py"),
        str(tiny_model_dir()),
        str(tmp_path),
    ]
    finished = subprocess.run(command, env=environment, cwd=PROJECT, capture_output=True, text=True, timeout=240)
    if finished.returncode and GLOO_ABORT in finished.stderr:  # gloo on CPU, not the logger: once in a few dozen runs
        shutil.rmtree(tmp_path / "rollout_samples", ignore_errors=True)
        finished = subprocess.run(command, env=environment, cwd=PROJECT, capture_output=True, text=True, timeout=240)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert finished.stdout.count("RLLoggingBoard: Saving rollout data to") == 1  # rank 0 says it, once

    run_dir = tmp_path / "rollout_samples" / "two_ranks"
    files = read_records(run_dir)
    names = sorted(files)
    assert [re.sub(r"_\d{8}T\d{6}Z", "", name) for name in names] == [
        "rollout_data_rank_0.jsonl",
        "rollout_data_rank_1.jsonl",
    ]
    launch_id = re.search(r"_(\d{8}T\d{6}Z)\.jsonl", names[0]).group(1)
    assert names[1].endswith(f"_{launch_id}.jsonl")  # rank 0's launch id, shared
    assert [path.name for path in run_dir.glob("rollout_meta_*.json")] == [f"rollout_meta_{launch_id}.json"]
    assert [path.name for path in run_dir.glob("rollout_metrics_*")] == [f"rollout_metrics_{launch_id}.jsonl"]
    history = json.loads((tmp_path / "log_history.json").read_text())
    metrics = (run_dir / f"rollout_metrics_{launch_id}.jsonl").read_text().splitlines()
    assert [{key: value for key, value in json.loads(line).items() if key != "kind"} for line in metrics] == history

    for rank, name in enumerate(names):
        assert {record["rank"] for record in files[name]} == {rank}
        assert Counter(record["step"] for record in files[name]) == {1: 6, 2: 6}
        assert Counter((record["step"], record["micro_batch"]) for record in files[name]) == {
            (step, micro_batch): 3 for step in (1, 2) for micro_batch in (0, 1)
        }
    records = files[names[0]] + files[names[1]]

    # TRL's `kl`: per loss pass, a token mean over both ranks' tokens (TRL >= 1.9) or the mean of each rank's
    logged = {entry["step"]: entry["kl"] for entry in history if "kl" in entry}
    recomputed, other_rule = trl_step_kl(records), trl_step_kl(records, pooled=not TRL_POOLS_RANKS)
    assert sorted(recomputed) == sorted(logged) == [1, 2] and logged[2] > 0
    for step, kl in recomputed.items():
        assert kl == pytest.approx(logged[step], rel=1e-6, abs=KL_ROUNDING)
    assert other_rule[2] != pytest.approx(logged[2], rel=1e-4)  # the ranks' token counts differ: the rules do too
    groups = defaultdict(list)
    for record in records:
        groups[record["group_id"]].append(record)
    # 3 prompts a step, 4 samples each
    assert len(groups) == 6 and all(len(members) == 4 for members in groups.values())
    split = [members for members in groups.values() if {member["rank"] for member in members} == {0, 1}]
    assert len(split) == 2  # each step's middle prompt: two samples on each rank
    for members in groups.values():
        assert len({member["prompt"] for member in members}) == 1 and len({member["step"] for member in members}) == 1
        rewards = [member["reward"] for member in members]
        for member in members:  # advantages normalised over the whole group, across ranks
            expected = (member["reward"] - statistics.mean(rewards)) / (statistics.stdev(rewards) + 1e-4)
            assert member["advantage"] == pytest.approx(expected, rel=1e-4, abs=1e-5)


# The logger enabled on rank 0 alone (the usual pattern for a logger; or SAVE_ROLLOUT_DATA in one rank's environment):
# its start shared rank 0's launch time with a collective the disabled rank never joined, and training hung for good.
def test_a_logger_enabled_on_one_rank_alone_neither_hangs_nor_writes_the_other(tmp_path):
    environment = {**os.environ, "EXP_NAME": "main_only", "OMP_NUM_THREADS": "1"}
    environment.pop("SAVE_ROLLOUT_DATA", None)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(PROJECT / "tests" / "support" / "logger_two_ranks.py"), str(tiny_model_dir()), str(tmp_path), "main-only"]
    finished = subprocess.run(command, env=environment, cwd=PROJECT, capture_output=True, text=True, timeout=240)
    if finished.returncode and GLOO_ABORT in finished.stderr:
        shutil.rmtree(tmp_path / "rollout_samples", ignore_errors=True)
        finished = subprocess.run(command, env=environment, cwd=PROJECT, capture_output=True, text=True, timeout=240)
    assert finished.returncode == 0, finished.stderr[-3000:]
    names = sorted(read_records(tmp_path / "rollout_samples" / "main_only"))
    assert [re.sub(r"_\d{8}T\d{6}Z", "", name) for name in names] == ["rollout_data_rank_0.jsonl"]
