"""Loading a run: merging rank files, downsampling, bad input, the index cache and incremental reads.

Numbers are checked against `plain_parse`, an independent slow reading of the files with json and math.
"""

import dataclasses
import errno
import functools
import gc
import hashlib
import json
import math
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import types
import weakref
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd
import pyarrow
import pyarrow.feather
import pytest
import simdjson

import rl_board
import rl_board.reading.index
import rl_board.reading.lines
import rl_board.reading.snapshot
import rl_board.reading.store
import rl_board.reading.workers
import rl_logging_board as board
from bench.generate_run import write_run
from rl_board.metrics import step_stats
from rl_board.mismatch import read_mismatch_tokens
from rl_board.reading.history import read_meta
from rl_board.reading.index import (
    BAD,
    BUNDLED_FILES,
    CHECKSUM_KEY,
    FACTS_KEY,
    GOOD,
    UNPARSED,
    FileIndex,
    IndexCache,
    table_checksum,
)
from rl_board.reading.lines import (
    FIELD_COLUMNS,
    SUMMARY_DECODER,
    TOKEN_KEYS,
    BadLine,
    decode_line,
    decode_summary,
    float_array,
)
from rl_board.reading.snapshot import lines_key, select_lines
from rl_board.reading.storage import StorageError
from rl_board.reading.store import RunStore, list_runs
from rl_board.reading.workers import index_chunk, started_worker_pool, worker_pool
from rollout_logger.metadata import FORMAT_KEYS
from tests.support.runs import load, sample, sample_tokens, write_lines
from tests.support.unprivileged import output_of_unprivileged
from tests.support.worker_faults import index_chunk_killed_once


def problems_of(run, kind=None):
    rows = run.problems if kind is None else run.problems[run.problems["kind"] == kind]
    return {(row.file, int(row.line)): row.reason for row in rows.itertuples()}


# The obvious, slow way: json.loads every line, Python math per token.
def plain_parse(run_dir):
    samples = {}
    for path in sorted(Path(run_dir).glob("*.jsonl")):
        for number, line in enumerate(path.read_bytes().split(b"\n"), start=1):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict) or not {"prompt", "response", "reward", "step"} <= set(record):
                continue
            numbers = {"step": int(record["step"]), "reward": float(record["reward"])}
            numbers["response_len"] = len(record["response"])
            logp, ref = record.get("logprobs"), record.get("ref_logprobs")
            if logp is not None and ref is not None:
                ratio = [a - b for a, b in zip(logp, ref)]
                numbers["sum_log_ratio"] = math.fsum(ratio)
                numbers["avg_log_ratio"] = numbers["sum_log_ratio"] / len(ratio)
                for name, formula in {
                    "kl": lambda r: math.expm1(r) - r,
                    "k1": lambda r: r,
                    "k2": lambda r: r * r / 2,
                    "k3": lambda r: math.exp(-r) + r - 1,
                }.items():
                    values = [formula(r) for r in ratio]
                    numbers[f"sum_kl_{name}"] = math.fsum(values)
                    numbers[f"avg_kl_{name}"] = math.fsum(values) / len(values)
            if record.get("entropies"):
                numbers["avg_entropy"] = math.fsum(record["entropies"]) / len(record["entropies"])
            for name, score in (record.get("rewards_per_func") or {}).items():
                numbers[f"rewards/{name}"] = score
            for name in ("ref_reward", "advantage"):
                if name in record:
                    numbers[name] = record[name]
            samples[(str(path), number)] = numbers
    return samples


def test_rank_files_merge_by_step_in_numeric_order(tmp_path):
    write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", [sample(10), sample(2), sample(1)])
    write_lines(tmp_path / "run" / "rollout_data_rank_1.jsonl", [sample(2), sample(10), sample(10)])
    run = load(tmp_path / "run")
    assert run.steps == [1, 2, 10]
    assert run.samples.groupby("step").size().to_dict() == {1: 1, 2: 2, 10: 3}
    assert run.samples["step"].is_monotonic_increasing


def test_a_step_s_samples_are_in_file_path_order_then_file_order_and_numbered(tmp_path):
    """rank_10 sorts before rank_2 as a path (the files are listed in natural order: rank_2 first); within a file, by
    place; each step's samples numbered from 0."""
    write_lines(tmp_path / "run" / "rollout_data_rank_2.jsonl", [sample(2, reward=0.1), sample(1, reward=0.2), sample(2, reward=0.3)])
    write_lines(tmp_path / "run" / "rollout_data_rank_10.jsonl", [sample(2, reward=0.4), sample(1, reward=0.5)])
    samples = load(tmp_path / "run").samples
    assert [Path(path).name for path in samples["path"]] == ["rollout_data_rank_10.jsonl", "rollout_data_rank_2.jsonl"] + ["rollout_data_rank_10.jsonl"] + ["rollout_data_rank_2.jsonl"] * 2
    assert samples["reward"].tolist() == [0.5, 0.2, 0.4, 0.1, 0.3] and samples["sample"].tolist() == [0, 1, 0, 1, 2]
    assert samples["step"].tolist() == [1, 1, 2, 2, 2] and samples.index.tolist() == list(range(5))


def test_a_step_s_rows_and_the_run_s_answers_equal_a_scan_of_its_samples(tmp_path):
    """step_rows slices the samples (kept in step order) and the snapshot keeps its answers: both must equal a scan of
    the samples, in step order or not, and a changed copy must answer for its own samples."""
    write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", [sample(10, reward=0.0), sample(2, reward=0.5), sample(1), sample(10, reward=-1.0)])
    write_lines(tmp_path / "run" / "rollout_data_rank_1.jsonl", [sample(2, reward=np.nan), sample(10, reward=2.0, ref_reward=1.0), sample(7)])
    run = load(tmp_path / "run")
    shuffled = dataclasses.replace(run, samples=run.samples.sample(frac=1.0, random_state=0))
    for snapshot in (run, shuffled):
        for step in [*snapshot.steps, 3, 11]:  # and two steps the run does not have
            expected = snapshot.samples[snapshot.samples["step"] == step].reset_index(drop=True)
            pd.testing.assert_frame_equal(snapshot.step_rows(step), expected)
            pd.testing.assert_frame_equal(snapshot.step_rows(step), expected)  # answered again from what it found
        for column in ["reward", "ref_reward", "ground_truth", "group_id", "not a column"]:
            assert snapshot.has_values(column) == (column in snapshot.samples and snapshot.samples[column].notna().any())
            assert snapshot.has_positive(column) == (column in snapshot.samples and (snapshot.samples[column] > 0).any())
        assert snapshot.step_mean("reward") == snapshot.samples.groupby("step")["reward"].mean().to_dict()
    assert run.has_positive("reward") and run.has_values("ref_reward")
    changed = dataclasses.replace(run, samples=run.samples.assign(reward=-1.0, ref_reward=np.nan))
    assert not changed.has_positive("reward") and not changed.has_values("ref_reward")
    assert changed.step_mean("reward") == {step: -1.0 for step in run.steps}


def test_numbers_equal_a_plain_full_parse(tmp_path):
    write_run(tmp_path / "run", steps=4, samples=16, tokens=40, ranks=2, grpo=True, workers=1)
    run = load(tmp_path / "run")
    expected = plain_parse(tmp_path / "run")
    assert len(run.samples) == len(expected) == 64
    for row in run.samples.to_dict("records"):
        for name, value in expected[(row["path"], row["line"])].items():
            assert row[name] == pytest.approx(value, rel=1e-9, abs=1e-12), name


# The first pass parses per-token lists with simdjson when it can and decodes the line the general way when
# not: both ways must give the same record, and the fast way must be the one taken for ordinary lines.
FAST_AND_GENERAL = [
    sample(1, logprobs=[-0.5, -1.25e-3, -7], ref_logprobs=[-0.25, -2, 0], entropies=[1.5, 0.0, 2]),
    sample(1, logprobs=[], ref_logprobs=[]),
    sample(1, logprobs=[-0.5, None], ref_logprobs=[-1.0, -2.0]),
    sample(1, logprobs=None, ref_logprobs=[-1.0]),
    sample(1, logprobs=[-0.5, 2**64], ref_logprobs=[-1.0, -2.0]),
    sample(1, logprobs=[True, -1.0], ref_logprobs=[-1.0, -2.0]),
    sample(1, logprobs=[-0.5, "x"]),
    sample(1, logprobs={"a": 1}),
    sample(1.0, prompt=["a list", 2], logprobs=[-0.1]),
    sample(1.5, logprobs=[-0.1]),
    sample(1, logprobs=[[-1.0], [-2.0]], ref_logprobs=[-1.0, -2.0]),
    sample(1, logprobs=[-1.0, -2.0], ref_logprobs=[-1.0, [-2.0]]),
    sample(1, logprobs=[-1.0], entropies=[[]]),
]
RAW_ONLY = [
    b'{"prompt": "p", "response": "r", "reward": 1, "step": 1, "logprobs": [NaN, -Infinity, 1e999]}',
    b'{"prompt": "\xff\xfe", "response": "r", "reward": 1, "step": 1, "logprobs": [-1.0]}',
    b'{"prompt": "p", "response": "r", "reward": 1' + b"0" * 400 + b', "step": 1, "logprobs": [-1' + b"0" * 400 + b', -1.0], "rewards_per_func": {"f": "1e400"}}',
]


@pytest.mark.parametrize("line", [json.dumps(line).encode() for line in FAST_AND_GENERAL] + RAW_ONLY)
def test_the_fast_first_pass_decodes_exactly_like_the_general_one(line):
    def outcome(decode):
        try:
            record, note = decode()[:2]
        except BadLine as error:
            return str(error)
        fields = {name: getattr(record, name) for name in record.__struct_fields__ if name not in ("response_tokens", *TOKEN_KEYS)}
        arrays = {key: float_array(getattr(record, key, None)) for key in ("logprobs", "ref_logprobs", "entropies")}
        return fields, {key: None if array is None else array.tolist() for key, array in arrays.items()}, note

    fast = outcome(lambda: decode_summary(line, simdjson.Parser()))
    general = outcome(lambda: decode_line(line, SUMMARY_DECODER))
    assert repr(fast) == repr(general)  # repr: NaN equals NaN


def test_ordinary_lines_never_take_the_general_way(monkeypatch):
    def general(*args):
        raise AssertionError("decoded the general way")

    monkeypatch.setattr(rl_board.reading.lines, "decode_line", general)
    record, note, _ = decode_summary(json.dumps(FAST_AND_GENERAL[0]).encode(), simdjson.Parser())
    assert record.logprobs.tolist() == [-0.5, -1.25e-3, -7.0] and record.entropies.tolist() == [1.5, 0.0, 2.0] and note is None


# The workers only read lines: they import the package's reading layer, never the page, Streamlit or plotly (their
# memory and start-up CPU are the page's), also once they have run a task.
def test_worker_processes_import_neither_the_page_nor_its_libraries():
    probe = "sorted(name for name in __import__('sys').modules if name.split('.')[0] in ('streamlit', 'plotly', 'rl_logging_board'))"
    assert worker_pool().submit(rl_board.reading.workers.summarize_lines, __file__, np.array([0]), np.array([3])).result(timeout=60).problems
    assert worker_pool().submit(eval, probe).result(timeout=120) == []


# A board that a scheduler or taskset gave one core of a bigger machine starts as many workers as it may run on: one
# (the work is then done in the process itself), not one per core of the machine.
@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs CPU affinity (Linux) and two cores or more")
def test_a_board_limited_to_one_core_counts_one_worker():
    count = "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); from rl_board.reading.workers import WORKERS; print(WORKERS)"
    result = subprocess.run([sys.executable, "-c", count], capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2], check=True)
    assert result.stdout.split() == ["1"]


# A board in a container or a systemd unit with a CPU quota (docker --cpus, a pod's CPU limit, CPUQuota) starts as many
# workers as its quota's cores, rounded up: here a real cgroup of this machine, allowed one core's time, around a
# process that may run on every core.
def test_a_board_given_one_cores_time_by_its_cgroup_counts_one_worker(tmp_path):
    folder = next((Path(f"/sys/fs/cgroup/{name}") for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu") if Path(f"/sys/fs/cgroup/{name}/cpu.cfs_quota_us").exists()), None)
    if folder is None or not os.access(folder, os.W_OK) or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs a writable cgroup v1 cpu controller (root) and two cores or more")
    group = folder / f"rl_board_test_{os.getpid()}"
    group.mkdir()
    try:
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text("100000")
        count = f"import os; open({str(group / 'cgroup.procs')!r}, 'w').write(str(os.getpid())); from rl_board.reading.workers import WORKERS; print(WORKERS)"
        result = subprocess.run([sys.executable, "-c", count], capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2], check=True)
        assert result.stdout.split() == ["1"]
    finally:
        group.rmdir()


# The quota is the tightest of the process's cgroup and those above it, read through the mounts the process sees:
# cgroup v2's cpu.max below a shared root, v1's cfs files in a container whose own cgroup is mounted as the root.
def test_the_cpu_quota_is_the_tightest_of_a_cgroup_and_those_above_it(tmp_path):
    proc, v2, v1 = tmp_path / "proc", tmp_path / "v2", tmp_path / "v1"
    proc.mkdir()
    for folder, quota in ((v2, "max 100000"), (v2 / "kubepods", "max 100000"), (v2 / "kubepods/pod", "250000 100000"), (v2 / "kubepods/pod/container", "max 100000")):
        folder.mkdir()
        (folder / "cpu.max").write_text(quota + "\n")
    (proc / "cgroup").write_text("0::/kubepods/pod/container\n")
    (proc / "mountinfo").write_text(f"30 25 0:26 / {v2} rw,nosuid,nodev shared:4 - cgroup2 cgroup2 rw,nsdelegate\n")
    assert rl_board.reading.workers.cgroup_cpu_quota(str(proc)) == 2.5

    v1.mkdir()
    (v1 / "cpu.cfs_quota_us").write_text("150000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    (proc / "cgroup").write_text("5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n")
    (proc / "mountinfo").write_text(
        f"40 35 0:30 /docker/abc {tmp_path / 'memory'} ro - cgroup cgroup rw,memory\n"
        f"41 35 0:31 /docker/abc {v1} ro,nosuid master:12 - cgroup cgroup rw,cpu,cpuacct\n"
    )
    assert rl_board.reading.workers.cgroup_cpu_quota(str(proc)) == 1.5

    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    assert rl_board.reading.workers.cgroup_cpu_quota(str(proc)) is None
    assert rl_board.reading.workers.cgroup_cpu_quota(str(tmp_path / "no proc")) is None


# Sessions opening the page at once (each in a thread of its own) start one pool of workers between them.
def test_sessions_opening_at_once_start_one_pool_of_workers():
    worker_pool().shutdown()
    started_worker_pool.cache_clear()
    pools = []
    threads = [threading.Thread(target=lambda: pools.append(worker_pool())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(pools) == 8 and len({id(pool) for pool in pools}) == 1


# In the server, __main__ is the page itself (Streamlit runs it so), which a spawned process would run again first.
def test_worker_processes_do_not_run_the_servers_main_module(tmp_path, monkeypatch):
    ran = tmp_path / "ran"
    page = tmp_path / "page.py"
    page.write_text(f"open({str(ran)!r}, 'w').close()\n")
    main = types.ModuleType("__main__")
    main.__file__, main.__spec__ = str(page), None
    monkeypatch.setitem(sys.modules, "__main__", main)
    worker_pool().shutdown()
    started_worker_pool.cache_clear()
    assert worker_pool().submit(eval, "1 + 1").result(timeout=120) == 2
    assert not ran.exists() and main.__file__ == str(page)


def test_parallel_workers_give_the_same_numbers(tmp_path):
    write_run(tmp_path / "run", steps=3, samples=8, tokens=30, ranks=4, grpo=True, workers=1)
    parallel = load(tmp_path / "run", parallel=True).samples
    shutil.rmtree(os.environ["RL_LOGGING_BOARD_CACHE"])
    sequential = load(tmp_path / "run", parallel=False).samples
    assert parallel.drop(columns=["group_id", "index_id"]).equals(sequential.drop(columns=["group_id", "index_id"]))
    assert list(parallel["group_id"]) == list(sequential["group_id"])


# Raising Max Samples Each Step on a run already indexed parses many lines of files with no new bytes: those go to the
# worker processes when they are big enough, as new bytes do (they were parsed in the server's process, 15.9 s for a
# run of 8,192 samples a step where the workers take 7.2 s), with the same numbers as parsed here.
@pytest.mark.skipif(rl_board.reading.workers.WORKERS < 2, reason="needs two cores or more for worker processes")
def test_lines_a_raised_max_samples_needs_are_parsed_on_the_workers(tmp_path, monkeypatch):
    write_run(tmp_path / "run", steps=3, samples=32, tokens=30, ranks=2, grpo=True, workers=1)
    monkeypatch.setattr(rl_board.reading.store, "PARALLEL_MIN_BYTES", 1 << 60)  # the first pass here, in this process
    store = RunStore(str(tmp_path / "run"))
    store.load(4)
    passes, run_tasks = [], rl_board.reading.store.run_tasks
    monkeypatch.setattr(rl_board.reading.store, "run_tasks", lambda tasks, parallel: passes.append((len(tasks), parallel)) or run_tasks(tasks, parallel))
    monkeypatch.setattr(rl_board.reading.store, "PARALLEL_MIN_BYTES", 1000)
    monkeypatch.setattr(rl_board.reading.store, "batches_of_rows", functools.partial(rl_board.reading.workers.batches_of_rows, batch_bytes=20_000))
    raised = store.load(32).samples
    parses = [(tasks, parallel) for tasks, parallel in passes if tasks]  # no new bytes: the index pass has no task
    assert parses and all(tasks > 1 and parallel is True for tasks, parallel in parses)
    shutil.rmtree(os.environ["RL_LOGGING_BOARD_CACHE"])
    whole = RunStore(str(tmp_path / "run")).load(32, parallel=False).samples
    assert raised.drop(columns=["group_id", "index_id"]).equals(whole.drop(columns=["group_id", "index_id"]))


# The workers' results are let go as the caller takes them: kept until the last task was done, they raised the server's
# peak memory by all of a load's parsed lines (a raise to 8,192 samples a step: 528 MB peak RSS, 469 MB let go).
@pytest.mark.skipif(rl_board.reading.workers.WORKERS < 2, reason="needs two cores or more for worker processes")
def test_a_workers_result_is_let_go_once_the_caller_has_taken_it():
    results = rl_board.reading.workers.run_tasks([(np.full, (1000, task)) for task in range(4)], True)
    taken = [weakref.ref(next(results)) for _ in range(2)]
    gc.collect()
    assert all(result() is None for result in taken)  # neither held on to, though two tasks remain
    assert [int(result[0]) for result in results] == [2, 3]


def test_max_samples_is_applied_evenly_over_rank_files_without_parsing_the_rest(tmp_path):
    for rank in range(4):
        lines = [sample(step, reward=rank * 100 + i) for step in (0, 1) for i in range(8)]
        lines[-1] = b'{"step": 1, "this line is broken\n'  # dropped by the selection: must not be parsed
        write_lines(tmp_path / "run" / f"rollout_data_rank_{rank}.jsonl", lines)
    store = RunStore(str(tmp_path / "run"))
    run = store.load(6)
    assert run.samples.groupby("step").size().to_dict() == {0: 6, 1: 6}
    assert run.downsampled
    step0 = run.samples[run.samples["step"] == 0]
    assert sorted(step0["reward"]) == [0, 1, 100, 101, 200, 300]  # two from ranks 0-1, one from ranks 2-3
    assert not problems_of(run, "skipped")  # the broken line was never parsed
    assert int(run.report["not loaded (Max Samples Each Step)"].sum()) == 4 * 16 - 12 - 0
    again = RunStore(str(tmp_path / "run")).load(6)
    assert again.samples[["path", "line"]].equals(run.samples[["path", "line"]])
    everything = store.load(10240)
    assert len(everything.samples) == 4 * 16 - 4 and len(problems_of(everything, "skipped")) == 4


@pytest.mark.parametrize(
    "bad_line, reason",
    [
        (b"{not json\n", "not valid JSON"),
        (b'{"prompt": "p", "response": "r", "step": 1}\n', "reward"),
        (b'{"prompt": "p", "response": "r", "reward": "high", "step": 1}\n', "reward"),
        (b'{"prompt": "p", "response": "r", "reward": 1, "step": "one"}\n', "step"),
        (b'{"prompt": "p", "response": "r", "reward": 1, "step": 1.5}\n', "step"),
        (b'{"prompt": "p", "response": "r", "reward": 1, "step": 100000000000000000000}\n', "step"),
        (b'{"prompt": "p", "response": "r", "reward": 1, "step": 1e300}\n', "step"),
        (b'{"prompt": "p", "response": "r", "reward": 1, "step": 1' + b"0" * 400 + b"}\n", "step"),
        (b'{"prompt": "p", "response": "r", "reward": 1, "step": 1' + b"0" * 400 + b', "extra": {"step": 1}}\n', "step"),
        (b'{"prompt": "p", "response": "r", "reward": 1, "step": 1' + b"0" * 5000 + b"}\n", "step inf is out of range"),
        (b'[1, 2, 3]\n', "a JSON array, not an object"),
        (b'null\n', "a JSON null, not an object"),  # JSON's names, not Python's (NoneType)
        (b'"text"\n', "a JSON string, not an object"),
    ],
)
def test_a_bad_line_is_skipped_and_reported_with_its_number(tmp_path, bad_line, reason):
    write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", [sample(1), bad_line, sample(2)])
    run = load(tmp_path / "run")
    assert len(run.samples) == 2
    skipped = problems_of(run, "skipped")
    assert list(skipped) == [("rollout_data_rank_0.jsonl", 2)]
    assert reason in skipped[("rollout_data_rank_0.jsonl", 2)]
    assert run.report["bad lines"].tolist() == [1]


def test_nan_infinity_and_null_are_accepted(tmp_path):
    lines = [
        b'{"prompt": "p", "response": "r", "reward": NaN, "step": 1}\n',
        b'{"prompt": "p", "response": "r", "reward": null, "step": 1}\n',
        b'{"prompt": "p", "response": "r", "reward": 2.0, "step": 1, "logprobs": [-Infinity, -1.0], "ref_logprobs": [-1.0, -1.0]}\n',
        b'{"prompt": "p", "response": "r", "reward": 4.0, "step": 1, "logprobs": [null, -1.0], "ref_logprobs": [-1.0, -2.0]}\n',
        b'{"prompt": "p", "response": "ab", "reward": 1.0, "step": 1, "response_tokens": ["a", "b"], "logprobs": [-Infinity, -1.0], "ref_logprobs": [-1.0, -2.0], "entropies": [NaN, 0.5]}\n',
        b'{"prompt": "p", "response": "ab", "reward": NaN, "step": 1, "response_tokens": ["a", "b", "<pad>"]}\n',
    ]
    write_lines(tmp_path / "run" / "r.jsonl", lines)
    run = load(tmp_path / "run")
    assert len(run.samples) == 6 and not problems_of(run, "skipped")
    assert np.isnan(run.samples["reward"].iloc[0]) and np.isnan(run.samples["reward"].iloc[1])
    assert step_stats(run.samples, "reward")["mean"].tolist() == [7 / 3]  # finite values only
    assert run.samples["avg_log_ratio"].iloc[2] == -np.inf
    assert run.samples["avg_log_ratio"].iloc[3] == 1.0  # the null token is left out of the mean
    # NaN or Infinity in a line with response_tokens: the line is kept, and so are its tokens
    assert run.samples["avg_log_ratio"].iloc[4] == -np.inf and run.samples["avg_entropy"].iloc[4] == 0.5
    assert run.samples["response_tokens_len"].tolist()[4:] == [2.0, 3.0]
    tokens = sample_tokens(run, 1, 4)
    assert tokens.response_tokens == ["a", "b"] and tokens.logprobs.tolist() == [-np.inf, -1.0]


# An optional key of the wrong type is left out of its line with a note naming it, and the rest of the line is kept
# (its reward, texts and other keys): the whole line was skipped, its valid reward with it. A required key of the
# wrong type still makes the line bad (test_a_bad_line_is_skipped_and_reported_with_its_number).
@pytest.mark.parametrize(
    "wrong, key",
    [
        ({"advantage": [0.1, 0.2]}, "advantage"),
        ({"ref_reward": "abc"}, "ref_reward"),
        ({"group_id": [1, 2]}, "group_id"),
        ({"truncated": "yes"}, "truncated"),
        ({"valid_reward": [1]}, "valid_reward"),
        ({"rewards_per_func": {"a": "x"}}, "rewards_per_func"),
        ({"logprobs": "oops", "response_tokens": ["a"]}, "logprobs"),
        ({"logprobs": [1, {"a": 2}], "ref_logprobs": [-1.0, -1.0]}, "logprobs"),
        ({"entropies": ["x"], "logprobs": [-1.0], "ref_logprobs": [-1.5]}, "entropies"),
    ],
)
def test_an_optional_key_of_the_wrong_type_is_left_out_and_its_line_kept(tmp_path, wrong, key):
    write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", [sample(1), sample(1, reward=0.25, **({"advantage": 0.5} | wrong)), sample(2)])
    run = load(tmp_path / "run")
    assert run.samples["reward"].tolist() == [1.0, 0.25, 1.0] and not problems_of(run, "skipped")
    notes = problems_of(run, "note")
    assert list(notes) == [("rollout_data_rank_0.jsonl", 2)] and notes[("rollout_data_rank_0.jsonl", 2)].startswith(f"{key} left out: Expected")
    advantage = run.samples["advantage"].tolist()[1]
    assert np.isnan(advantage) if key == "advantage" else advantage == 0.5  # the line's other keys kept
    batch = board.load_step_batch(lines_key(run.step_rows(1)), run.step_rows(1))
    assert batch.table["response"].tolist() == ["r1", "r1"] and not batch.problems
    sample_tokens(run, 1, 1)  # the sample view reads the line as the index did


# docs/data-format.md: response_tokens may be one longer than logprobs (a trailing pad), which the token area drops
# without a note; two or more longer are clipped with one.
def test_one_token_past_the_log_probs_is_a_trailing_pad_more_are_clipped_with_a_note(tmp_path):
    tokens = {"logprobs": [-1.0, -2.0], "ref_logprobs": [-1.0, -2.5]}
    write_lines(tmp_path / "run" / "r.jsonl", [sample(1, response_tokens=["a", "b", "<pad>"], **tokens), sample(1, response_tokens=["a", "b", "c", "<pad>"], **tokens)])
    run = load(tmp_path / "run")
    padded, longer = sample_tokens(run, 1, 0), sample_tokens(run, 1, 1)
    assert padded.response_tokens == ["a", "b"] and not padded.notes
    assert longer.response_tokens == ["a", "b"] and longer.notes == ["response_tokens has 4 entries, log-probs 2: tokens clipped to 2"]


# docs/limits.md: a number beyond a float's range, however JSON writes it (1e400, an integer of 401 or 5,001 digits,
# "1e400" as text), is ±inf with a note naming where, the line kept, as Infinity is (without a note). A reward of
# 10**400 skipped its whole line while 1e400 was read as inf.
def test_a_number_beyond_a_floats_range_is_infinite_with_a_note_however_it_is_written(tmp_path):
    written = {"@huge": "1" + "0" * 400, "@-huge": "-1" + "0" * 400, "@huger": "1" + "0" * 5000, "@1e400": "1e400", "@-1e400": "-1e400", "@inf": "Infinity"}
    tokens = dict(response_tokens=["a", "b"], logprobs=[-1.0, -2.0], ref_logprobs=[-1.5, -2.5])
    everything = sample(
        1, reward=0.5, ref_reward="@-1e400", advantage="@huge", rewards_per_func={"f": "@huge"}, score="@huge",
        response_tokens=["a", "b"], logprobs=[-1.0, "@-huge"], ref_logprobs=[-1.5, -2.5], token_rewards=[1, "@huge"],
        loss_passes=[{"step": 1, "policy_ratio": ["@huge", 1.0], "clipped": [0, 0], "update_weight": [0.5, "@huge"]}],
        turns=[{"role": "assistant", "text": "ab", "reward": "@huge", "token_start": 0, "token_end": 2}],
    )
    records = [sample(1, reward=reward, **tokens) for reward in ("@1e400", "@huge", "@-huge", "1e400", "@huger", "@inf")] + [everything, sample(1, **tokens)]
    lines = [functools.reduce(lambda line, name: line.replace(f'"{name}"', written[name]), written, json.dumps(record)) for record in records]
    write_lines(tmp_path / "run" / "r.jsonl", [line.encode() + b"\n" for line in lines])
    run = load(tmp_path / "run")
    assert len(run.samples) == len(lines) and not problems_of(run, "skipped")
    recomputed = [float(json.loads(line, parse_int=float)["reward"]) for line in lines]  # Python's float of each as written
    assert run.samples.sort_values("line")["reward"].tolist() == recomputed == [math.inf, math.inf, -math.inf, math.inf, math.inf, math.inf, 0.5, 1.0]
    beyond = "beyond a float's range (±1.8e308), read as ±inf: "
    assert problems_of(run, "note") == {
        ("r.jsonl", 1): beyond + "reward = 1e400",
        ("r.jsonl", 2): beyond + "reward = 100000000000… (401 digits)",
        ("r.jsonl", 3): beyond + "reward = -10000000000… (401 digits)",
        ("r.jsonl", 4): beyond + 'reward = "1e400"',
        ("r.jsonl", 5): beyond + "reward = 100000000000… (5001 digits)",  # Infinity, line 6, is no number beyond the range
        ("r.jsonl", 7): beyond + "ref_reward = -1e400; advantage = 100000000000… (401 digits); rewards_per_func.f = 100000000000… (401 digits); and 4 more",
    }
    row = run.samples.sort_values("line").iloc[6]
    assert (row["ref_reward"], row["advantage"], row["rewards/f"], row["extra/score"], row["avg_logp"], row["loss_passes"]) == (-math.inf, math.inf, math.inf, math.inf, -math.inf, 1.0)
    tokens = sample_tokens(run, 1, 6)
    assert tokens.logprobs.tolist() == [-1.0, -math.inf] and tokens.token_rewards.tolist() == [1.0, math.inf]
    assert tokens.notes == [beyond + "logprobs[1] = -10000000000… (401 digits); token_rewards[1] = 100000000000… (401 digits)"]
    opened = rl_board.open_run(tmp_path / "run")
    assert opened.turns(1, 6)["reward"].tolist() == [math.inf]
    with pytest.warns(UserWarning, match="beyond a float's range"):  # the sample's notes, as Run.tokens gives them
        assert opened.tokens(1, 6)["update_weight"].tolist() == [0.5, math.inf]


def test_a_file_that_starts_with_a_byte_order_mark_loses_no_line(tmp_path):
    write_lines(tmp_path / "run" / "r.jsonl", [b"\xef\xbb\xbf" + json.dumps(sample(1)).encode() + b"\n", sample(2)])
    run = load(tmp_path / "run")
    assert sorted(run.samples["step"]) == [1, 2] and not problems_of(run)
    assert board.load_step_batch(lines_key(run.step_rows(1)), run.step_rows(1)).table["prompt"].tolist() == ["p1"]


def test_length_mismatches_keep_the_sample_and_say_so(tmp_path):
    lines = [
        sample(1, logprobs=[-1.0, -2.0, -3.0], ref_logprobs=[-1.5, -2.5]),
        sample(1, response_tokens=["a", "b", "<PAD>"], logprobs=[-1.0, -2.0], ref_logprobs=[-1.0, -1.0]),
    ]
    write_lines(tmp_path / "run" / "r.jsonl", lines)
    run = load(tmp_path / "run")
    notes = problems_of(run, "note")
    assert "ref_logprobs has 2 values, logprobs 3" in notes[("r.jsonl", 1)]
    assert run.samples["avg_log_ratio"].iloc[0] == pytest.approx(0.5)
    tokens = sample_tokens(run, 1, 1)
    assert tokens.response_tokens == ["a", "b"] and not tokens.notes  # one token past the log-probs: the format's trailing pad


def test_empty_files_blank_lines_and_non_utf8_bytes(tmp_path):
    write_lines(tmp_path / "run" / "empty.jsonl", [])
    blank_long = [b" " * 300 + b"\n", b"\t" * 299 + b"\r\n"]  # however long (they were bad lines from 256 bytes)
    lines = [sample(1), b"\n", b"   \n", *blank_long, b'{"prompt": "p", "response": "caf\xe9", "reward": 1, "step": 1}\n', sample(2)]
    write_lines(tmp_path / "run" / "r.jsonl", lines)
    run = load(tmp_path / "run")
    assert len(run.samples) == 3 and run.report["bad lines"].sum() == 0
    assert sorted(run.samples["line"]) == [1, 6, 7]
    assert "invalid UTF-8" in problems_of(run, "note")[("r.jsonl", 6)]
    assert run.report.set_index("file").loc["empty.jsonl", "lines"] == 0
    batch = board.load_step_batch(lines_key(run.step_rows(1)), run.step_rows(1))
    assert batch.table["response"].tolist() == ["r1", "caf\ufffd"]


def test_a_last_line_cut_mid_write_is_reported_then_picked_up_when_finished(tmp_path):
    path = write_lines(tmp_path / "run" / "r.jsonl", [sample(1), sample(2)])
    whole = json.dumps(sample(3)).encode() + b"\n"
    with open(path, "ab") as file:
        file.write(whole[:20])
    store = RunStore(str(tmp_path / "run"))
    run = store.load(128)
    assert run.steps == [1, 2]
    assert run.report["incomplete last line"].tolist() == [1] and run.report["bad lines"].tolist() == [0]
    assert problems_of(run, "incomplete") == {
        ("r.jsonl", 3): "the last line has no end yet: still being written, or cut off (if the run was killed while writing, step 2, that of the line before, may lack samples)"
    }
    with open(path, "ab") as file:
        file.write(whole[20:])
    assert store.needs_work(128)
    run = store.load(128)
    assert run.steps == [1, 2, 3] and not len(run.problems)


def test_a_complete_last_line_without_newline_counts_once(tmp_path):
    path = tmp_path / "run" / "r.jsonl"
    write_lines(path, [sample(1), json.dumps(sample(2)).encode()])
    store = RunStore(str(tmp_path / "run"))
    assert store.load(128).steps == [1, 2]
    with open(path, "ab") as file:
        file.write(b"\n" + json.dumps(sample(3)).encode() + b"\n")
    run = store.load(128)
    assert run.samples["line"].tolist() == [1, 2, 3] and run.samples["step"].tolist() == [1, 2, 3]


def test_a_resumed_launch_replaces_the_steps_it_logged_again(tmp_path):
    run_dir = tmp_path / "run"
    for rank in (0, 1):
        write_lines(run_dir / f"rollout_data_rank_{rank}_20260101T000000Z.jsonl", [sample(s, reward=1) for s in (1, 2, 3)])
        write_lines(run_dir / f"rollout_data_rank_{rank}_20260102T000000Z.jsonl", [sample(s, reward=2) for s in (3, 4)])
    run = load(run_dir)
    assert run.samples.groupby("step")["reward"].agg(["size", "mean"]).to_dict("index") == {
        1: {"size": 2, "mean": 1.0}, 2: {"size": 2, "mean": 1.0}, 3: {"size": 2, "mean": 2.0}, 4: {"size": 2, "mean": 2.0},
    }


# A rank whose writer stopped (its disk full) while the others went on: the steps it lacks are noted on its file, each
# launch on its own; one that lacks the launch's last step alone is a live run's rank still writing it: no note.
def test_a_rank_file_that_lacks_steps_the_other_ranks_have_is_noted(tmp_path):
    run_dir = tmp_path / "run"
    old, new = "20260101T000000Z", "20260102T000000Z"
    write_lines(run_dir / f"rollout_data_rank_0_{old}.jsonl", [sample(step) for step in (1, 2, 3)])
    write_lines(run_dir / f"rollout_data_rank_1_{old}.jsonl", [sample(step) for step in (1, 2, 3)])
    write_lines(run_dir / f"rollout_data_rank_0_{new}.jsonl", [sample(step) for step in (4, 5, 6, 7)])
    write_lines(run_dir / f"rollout_data_rank_1_{new}.jsonl", [sample(4)])
    write_lines(run_dir / f"rollout_data_rank_2_{new}.jsonl", [sample(step) for step in (4, 6)] + [sample(5, reward="bad")])  # step 5 written, bad
    run = load(run_dir)
    assert len(run.samples) == 3 + 3 + 4 + 1 + 2 and list(problems_of(run, "skipped")) == [(f"rollout_data_rank_2_{new}.jsonl", 3)]
    assert problems_of(run, "note") == {
        (f"rollout_data_rank_1_{new}.jsonl", 0): "has no line of 3 step(s) that the other rank files of its launch have (5, 6, 7): those steps "
        "show the other ranks' samples alone (its writer stopped early, a full disk or a crash, or lags behind)",
    }
    write_lines(run_dir / f"rollout_data_rank_1_{new}.jsonl", [sample(step) for step in (4, 5, 6, 7)])
    assert not problems_of(load(run_dir), "note")


def test_a_file_not_named_as_a_rank_file_beside_rank_files_keeps_every_line(tmp_path):
    write_lines(tmp_path / "run" / "rollout_data_rank_0_20260101T000000Z.jsonl", [sample(1), sample(2)])
    write_lines(tmp_path / "run" / "extra.jsonl", [sample(2, prompt="extra"), sample(3, prompt="extra")])
    run = load(tmp_path / "run")
    assert run.steps == [1, 2, 3] and len(run.samples) == 4 and run.report["replaced by a newer launch"].sum() == 0


# Resumed inside a generation cycle (num_iterations=2, resumed from step 9): the new launch logs 10, 12, 14, and the
# older launch's step 11 is a trajectory training abandoned: left out, counted in the report, and in no count shown.
def test_steps_an_older_launch_logged_after_the_resume_are_left_out_and_counted(tmp_path):
    run_dir = tmp_path / "run"
    write_lines(run_dir / "rollout_data_rank_0_20260101T000000Z.jsonl", [sample(s, reward=1) for s in (2, 4, 6, 8, 10, 11) for _ in range(2)])
    write_lines(run_dir / "rollout_data_rank_0_20260102T000000Z.jsonl", [sample(s, reward=2) for s in (10, 12, 14) for _ in range(2)])
    run = load(run_dir)
    assert run.steps == [2, 4, 6, 8, 10, 12, 14]
    assert run.samples.groupby("step")["reward"].mean().to_dict() == {2: 1, 4: 1, 6: 1, 8: 1, 10: 2, 12: 2, 14: 2}
    report = run.report.set_index("file")
    assert report.loc["rollout_data_rank_0_20260101T000000Z.jsonl", "replaced by a newer launch"] == 4  # steps 10 and 11
    assert report["not loaded (Max Samples Each Step)"].sum() == 0 and not run.downsampled


# The selection rule, written plainly: a line of a launch is left out when a newer launch's first step is at or before
# its step (a file without a launch keeps every line); then per step the rank files in turn (each file's lines in file
# order) until max_samples.
def plain_selection(files: dict, max_samples: int) -> dict:
    usable = [(path, row, step, index.launch) for path, index in files.items()
              for row, (step, status) in enumerate(zip(index.lines["step"], index.lines["status"])) if status != BAD and not math.isnan(step)]
    first_step = {launch: min(s for _, _, s, l in usable if l == launch) for launch in {launch for *_, launch in usable}}
    usable = [line for line in usable if not line[3] or not any(launch > line[3] and first <= line[2] for launch, first in first_step.items())]
    chosen = {}
    for step in sorted({step for _, _, step, _ in usable}):
        queues = [[row for p, row, s, launch in usable if p == path and s == step] for path in files]
        picked = [(path, queue[turn]) for turn in range(max(map(len, queues))) for path, queue in zip(files, queues) if turn < len(queue)]
        for path, row in picked[:max_samples]:
            chosen.setdefault(path, []).append(row)
    return {path: sorted(rows) for path, rows in chosen.items()}


def test_the_selection_of_lines_follows_the_plain_rule():
    rng = np.random.default_rng(0)
    for _ in range(300):
        files = {}
        for position in range(int(rng.integers(0, 5))):
            index = FileIndex(f"/nowhere/rollout_data_rank_{position}.jsonl")
            index.launch = str(rng.choice(["", "20260101T000000Z", "20260102T000000Z"]))
            count = int(rng.integers(0, 30))
            steps = rng.integers(0, 6, count).astype(float)
            steps[rng.random(count) < 0.1] = np.nan
            index.lines = {"step": steps, "status": rng.choice([GOOD, BAD, UNPARSED], count).astype(np.int8)}
            files[index.path] = index
        max_samples = int(rng.integers(1, 20))
        selected = {path: rows.tolist() for path, rows in select_lines(files, max_samples).rows.items() if len(rows)}
        assert selected == plain_selection(files, max_samples)


def count_index_calls(monkeypatch):
    calls = []
    original = index_chunk

    def counting(path, start, end, per_step):
        calls.append((Path(path).name, start, end))
        return original(path, start, end, per_step)

    monkeypatch.setattr(rl_board.reading.store, "index_chunk", counting)
    return calls


def test_the_index_cache_survives_a_restart_and_reads_only_appended_bytes(tmp_path, monkeypatch):
    path = write_lines(tmp_path / "run" / "r.jsonl", [sample(1), sample(2)])
    first = load(tmp_path / "run", parallel=False)
    calls = count_index_calls(monkeypatch)
    restarted = load(tmp_path / "run", parallel=False)
    assert calls == [] and restarted.samples.drop(columns=["path", "index_id"]).equals(first.samples.drop(columns=["path", "index_id"]))
    size = path.stat().st_size
    with open(path, "ab") as file:
        file.write(json.dumps(sample(3)).encode() + b"\n")
    grown = load(tmp_path / "run", parallel=False)
    assert calls == [("r.jsonl", size, path.stat().st_size)]
    assert grown.steps == [1, 2, 3]


def assert_same_index(restored: FileIndex, index: FileIndex):
    assert restored.facts() == index.facts() and list(restored.lines) == list(index.lines)
    for name, column in index.lines.items():
        assert restored.lines[name].dtype == column.dtype, name
        assert np.array_equal(restored.lines[name], column, equal_nan=column.dtype.kind == "f"), name


def append_step(path: Path, step: int, samples: int, **extra):
    with open(path, "ab") as file:
        file.write(b"".join(json.dumps(sample(step, reward=step + k / 10, **extra)).encode() + b"\n" for k in range(samples)))


# A live run's rank file that grew writes a segment of its new rows, not its whole index again: the cache read back
# equals the index in memory after every append (a reward function and a text field that appear late included), until
# SEGMENTS_KEPT segments: then it is written whole once more and the segments it replaced are removed.
def test_a_file_that_grew_adds_a_segment_to_its_cache_not_a_copy(tmp_path, private_index_cache):
    write_run(tmp_path / "run", steps=40, samples=8, tokens=10, ranks=2, workers=1)
    path = tmp_path / "run" / "rollout_data_rank_0.jsonl"
    store, cache = RunStore(str(tmp_path / "run")), IndexCache()
    store.load(128, parallel=False)
    base = Path(cache.path_of(str(path)))
    base_size = base.stat().st_size
    for appended in range(1, rl_board.reading.index.SEGMENTS_KEPT + 2):
        append_step(path, 40 + appended, 4, **({"rewards_per_func": {"late": 1.0}, "note": "n"} if appended == 3 else {}))
        store.load(128, parallel=False)
        segments = sorted(private_index_cache.glob(f"{base.stem}.*.arrow"), key=lambda segment: int(segment.suffixes[0][1:]))
        assert_same_index(cache.load(str(path)), store.files[str(path)])
        if appended <= rl_board.reading.index.SEGMENTS_KEPT:
            assert [segment.name for segment in segments] == [f"{base.stem}.{number}.arrow" for number in range(1, appended + 1)]
            assert segments[-1].stat().st_size < base_size / 4 and base.stat().st_size == base_size  # the base is not written again
        else:
            assert segments == [] and base.stat().st_size > base_size
    restarted = RunStore(str(tmp_path / "run")).load(128, parallel=False)
    assert restarted.samples.drop(columns="index_id").equals(store.load(128, parallel=False).samples.drop(columns="index_id"))


# A segment that is damaged, missing or of another write of the cache ends the cached index there: the file's lines past
# it are read from the file, and the run equals one read whole. Parsing lines the cache already holds (a larger Max
# Samples Each Step) writes it whole.
@pytest.mark.parametrize("fault", ["damaged", "missing", "of another write"])
def test_a_cached_index_ends_at_a_segment_that_does_not_extend_it(tmp_path, monkeypatch, private_index_cache, fault):
    write_run(tmp_path / "run", steps=20, samples=8, tokens=10, ranks=1, workers=1)
    path = tmp_path / "run" / "rollout_data_rank_0.jsonl"
    store, cache = RunStore(str(tmp_path / "run")), IndexCache()
    store.load(4, parallel=False)
    for step in (20, 21, 22):
        append_step(path, step, 8)
        store.load(4, parallel=False)
    second = Path(cache.path_of(str(path), 2))
    if fault == "damaged":
        second.write_bytes(second.read_bytes()[:100])
    elif fault == "missing":
        second.unlink()
    else:
        first = Path(cache.path_of(str(path), 1))
        first_write = first.read_bytes()
        store.load(8, parallel=False)  # parses rows the cache holds: written whole, under a new write id
        assert not first.exists() and not second.exists()
        table = pyarrow.feather.read_table(pyarrow.BufferReader(first_write))
        meta = json.loads(table.schema.metadata[FACTS_KEY]) | {"first_row": 23 * 8}  # where the new write ends
        write_signed(first, table, meta)
    restored = cache.load(str(path))
    expected_rows = {"damaged": 20 * 8 + 8, "missing": 20 * 8 + 8, "of another write": 23 * 8}[fault]
    assert len(restored.lines["offset"]) == expected_rows
    calls = count_index_calls(monkeypatch)
    reopened = RunStore(str(tmp_path / "run")).load(4, parallel=False)
    assert len(calls) == (fault != "of another write")
    fresh = load_fresh(tmp_path / "run", tmp_path / "fresh_cache", monkeypatch, 4)
    assert reopened.samples.drop(columns="index_id").equals(fresh.samples.drop(columns="index_id"))


def load_fresh(run_dir: Path, cache_folder: Path, monkeypatch, max_samples: int):
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(cache_folder))
    return RunStore(str(run_dir)).load(max_samples, parallel=False)


@pytest.mark.parametrize("change", ["truncate", "replace", "rewrite in place"])
def test_the_index_cache_is_never_used_stale(tmp_path, change):
    path = write_lines(tmp_path / "run" / "r.jsonl", [sample(1, reward=1), sample(2, reward=1)])
    load(tmp_path / "run")
    if change == "truncate":
        write_lines(path, [sample(1, reward=5)])
    elif change == "replace":
        other = write_lines(tmp_path / "other.jsonl", [sample(1, reward=7), sample(2, reward=7)])
        os.replace(other, path)
    else:
        data = path.read_bytes().replace(b'"reward": 1', b'"reward": 9')
        with open(path, "r+b") as file:
            file.write(data)
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    run = load(tmp_path / "run")
    expected = {"truncate": [5.0], "replace": [7.0, 7.0], "rewrite in place": [9.0, 9.0]}[change]
    assert run.samples["reward"].tolist() == expected


def step_files(run_dir, steps: int) -> list:
    """A file per step, as verl and TRL write them (here in the board's format): 3 lines each, a reward function in
    the even steps only, a field in step 5."""
    return [write_lines(run_dir / f"{step}.jsonl", [sample(step, reward=step + k / 10, **({"rewards_per_func": {"f": k}} if step % 2 == 0 else {}), **({"note": "x"} if step == 5 else {})) for k in range(3)])
            for step in range(1, steps + 1)]


def test_a_run_of_many_files_reopens_from_one_cache_file(tmp_path, monkeypatch, private_index_cache):
    """Its files' indexes in one cache file: a restart reads nothing of the files and gives the same samples; a file
    appended to is read on from where it was, a file replaced is read anew, a new file is indexed, and the one cache
    file is written again with them."""
    files = step_files(tmp_path / "run", BUNDLED_FILES + 8)
    first = load(tmp_path / "run", parallel=False)
    assert [path.name for path in private_index_cache.iterdir()] == [Path(IndexCache().run_path_of(str(tmp_path / "run"))).name]
    calls = count_index_calls(monkeypatch)
    restarted = RunStore(str(tmp_path / "run"))
    again = restarted.load(10240, parallel=False)
    assert calls == [] and again.samples.drop(columns=["index_id"]).equals(first.samples.drop(columns=["index_id"]))
    assert again.samples["rewards/f"].notna().sum() == 3 * ((BUNDLED_FILES + 8) // 2) and again.samples["text/note"].notna().sum() == 3
    size = files[0].stat().st_size
    with open(files[0], "ab") as file:
        file.write(json.dumps(sample(1, reward=9.0)).encode() + b"\n")
    os.replace(write_lines(tmp_path / "new.jsonl", [sample(2, reward=-1.0)]), files[1])
    step_files(tmp_path / "more", 1)[0].rename(tmp_path / "run" / "999.jsonl")
    grown = restarted.load(10240, parallel=False)
    assert sorted(calls) == sorted([("1.jsonl", size, files[0].stat().st_size), ("2.jsonl", 0, files[1].stat().st_size), ("999.jsonl", 0, (tmp_path / "run" / "999.jsonl").stat().st_size)])
    by_step = grown.samples.groupby("step")["reward"].apply(list)
    assert sorted(by_step[1]) == [1.0, 1.0, 1.1, 1.1, 1.2, 1.2, 9.0] and by_step[2] == [-1.0]
    calls.clear()
    reopened = load(tmp_path / "run", parallel=False)  # a new store: the cache file holds the changes
    assert calls == [] and reopened.samples["reward"].sum() == pytest.approx(grown.samples["reward"].sum())


@pytest.mark.parametrize("damage", ["garbage", "another run", "a column missing"])
def test_a_damaged_run_cache_file_is_read_again_from_the_files(tmp_path, damage, private_index_cache):
    step_files(tmp_path / "run", BUNDLED_FILES)
    expected = load(tmp_path / "run", parallel=False).samples["reward"].tolist()
    cached = Path(IndexCache().run_path_of(str(tmp_path / "run")))
    table = pyarrow.feather.read_table(cached)
    if damage == "garbage":
        cached.write_bytes(b"not arrow")
    elif damage == "another run":
        write_signed(cached, table, dict(json.loads(table.schema.metadata[FACTS_KEY]), run="/elsewhere"))
    else:
        write_signed(cached, table.drop(["offset"]), json.loads(table.schema.metadata[FACTS_KEY]))
    assert load(tmp_path / "run", parallel=False).samples["reward"].tolist() == expected


def test_a_snapshot_never_changes_and_a_restart_keeps_every_column_and_type(tmp_path):
    lines = [sample(1, group_id=7, rewards_per_func={"f": 1.0}), sample(1, group_id="g"), sample(2)]
    path = write_lines(tmp_path / "run" / "r.jsonl", lines)
    first = load(tmp_path / "run", parallel=False)
    kept = first.samples.copy()
    restarted = RunStore(str(tmp_path / "run"))
    restarted.load(10240, parallel=False)
    index = restarted.files[str(path)]
    assert {name: column.dtype for name, column in index.lines.items() if name in ("status", "step", "group_id")} == {
        "status": np.int8, "step": np.float64, "group_id": object}
    assert all(column.flags.writeable for column in index.lines.values())  # appends write into them
    with open(path, "a") as file:
        file.write(json.dumps(sample(3, group_id="h", rewards_per_func={"f": 0.5, "late": 2.0})) + "\n")
    grown = restarted.load(10240, parallel=False)
    assert first.samples.equals(kept)  # a later load never writes into an earlier snapshot
    assert grown.samples["group_id"].tolist()[:2] == ["7", "g"] and grown.samples["rewards/late"].tolist()[-1] == 2.0
    assert np.allclose(grown.samples["rewards/f"], [1.0, np.nan, np.nan, 0.5], equal_nan=True)


@pytest.mark.parametrize("damage", ["garbage", "empty", "no metadata", "meta null", "meta without identity", "a column missing", "another format"])
def test_a_damaged_index_cache_is_read_again_from_the_file(tmp_path, damage):
    path = write_lines(tmp_path / "run" / "r.jsonl", [sample(1, reward=3), sample(2, reward=4)])
    load(tmp_path / "run")
    cached = Path(IndexCache().path_of(str(path)))
    table = pyarrow.feather.read_table(cached)
    meta = json.loads(table.schema.metadata[FACTS_KEY])
    if damage in ("garbage", "empty"):
        cached.write_bytes(b"not arrow" if damage == "garbage" else b"")
    elif damage == "no metadata":
        pyarrow.feather.write_feather(table.replace_schema_metadata(None), cached)
    elif damage == "a column missing":
        write_signed(cached, table.drop(["status"]), meta)
    else:  # each check of the facts alone: the file's checksum holds
        write_signed(cached, table, {"meta null": None, "meta without identity": dict(meta, identity={"size": 1}), "another format": dict(meta, format=1)}[damage])
    run = load(tmp_path / "run")
    assert run.samples["reward"].tolist() == [3.0, 4.0] and not problems_of(run)


# A cache file written as IndexCache writes one, its checksum over what it holds: a test's change of the facts or the
# columns, which the reader must then turn down for what it is, not for its checksum.
def write_signed(path: Path, table: pyarrow.Table, meta):
    facts = json.dumps(meta).encode()
    pyarrow.feather.write_feather(table.replace_schema_metadata({FACTS_KEY: facts, CHECKSUM_KEY: str(table_checksum(table, facts)).encode()}), str(path), compression="uncompressed", chunksize=max(1, table.num_rows))


@pytest.mark.parametrize("where", ["a reward's bytes", "the facts", "the checksum", "a column's type", "a column's nulls"])
def test_an_index_cache_whose_bytes_changed_since_its_write_is_read_again(tmp_path, where):
    """A cache file keeps a CRC-32 of what it is read as (its columns' types, lengths, nulls and bytes) and its facts: a
    byte changed since the write (a disk's error, a crash that left zeros) is caught, and the numbers come from the file
    again, never from the changed bytes (a flip in the footer read floats as float16, in a batch header a null count)."""
    path = write_lines(tmp_path / "run" / "r.jsonl", [sample(1, reward=3), sample(2, reward=4)])
    load(tmp_path / "run")
    cached = Path(IndexCache().path_of(str(path)))
    data = bytearray(cached.read_bytes())
    if where in ("a column's type", "a column's nulls"):  # the first byte whose flip reads so, the checksum aside
        written = pyarrow.feather.read_table(cached)

        def read_as(position: int):
            flipped = bytearray(data)
            flipped[position] ^= 0x80
            try:
                table = pyarrow.feather.read_table(pyarrow.BufferReader(bytes(flipped)))
                return table if table.column_names else None  # a name that is no longer UTF-8 raises here
            except (pyarrow.ArrowException, OSError, ValueError):
                return None

        def changed(table) -> bool:
            if where == "a column's type":  # the same columns, one read as another type
                return table.column_names == written.column_names and table.schema.remove_metadata() != written.schema.remove_metadata()
            return table.schema.remove_metadata() == written.schema.remove_metadata() and [column.null_count for column in table.columns] != [column.null_count for column in written.columns]

        position = next(position for position in range(len(data)) if (table := read_as(position)) is not None and changed(table))
        data[position] ^= 0x80
    elif where == "a reward's bytes":
        position = data.find(np.array([3.0, 4.0]).tobytes())
        assert position > 0
        data[position : position + 8] = np.array([300.0]).tobytes()
    else:  # a digit of the file's size in the facts, or of the checksum, in each copy of the schema (the start, the footer)
        written = pyarrow.feather.read_table(cached).schema.metadata[CHECKSUM_KEY]
        pattern = rb'"size": ([0-9])' if where == "the facts" else rb"(?<![0-9])([0-9])" + re.escape(written[1:]) + rb"(?![0-9])"
        changed = 0
        for match in re.finditer(pattern, bytes(data)):
            data[match.start(1)] = ord("7") if match.group(1) != b"7" else ord("8")
            changed += 1
        assert changed == 2
    cached.write_bytes(bytes(data))
    assert IndexCache().load(str(path)) is None
    run = load(tmp_path / "run")
    assert run.samples["reward"].tolist() == [3.0, 4.0] and not problems_of(run)


def test_an_unwritable_cache_folder_costs_speed_not_data(tmp_path, monkeypatch):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(blocker / "cache"))
    write_lines(tmp_path / "run" / "r.jsonl", [sample(1)])
    run = load(tmp_path / "run")
    assert len(run.samples) == 1
    assert any("index cache not written" in reason for reason in run.problems["reason"])


# Everything in a folder that a write could change: each entry's name, kind, mode, size, mtime and bytes. The folder's
# own mtime is in it too, so a file made and removed again (a temporary file, a lock) shows as well.
def folder_state(folder: Path) -> dict:
    state = {}
    for path in [folder, *sorted(folder.rglob("*"))]:
        info = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if stat.S_ISREG(info.st_mode) else None
        state[str(path.relative_to(folder))] = (info.st_mode, info.st_size, info.st_mtime_ns, digest)
    return state


# The board never writes into a run folder, read-only or not: its index cache lives in RL_LOGGING_BOARD_CACHE. (The
# tests run as root, for whom the chmod changes nothing, so the folder is compared byte for byte instead.)
def test_a_read_only_run_folder_loads(tmp_path, private_index_cache):
    run_dir = tmp_path / "run"
    write_run(run_dir, steps=2, samples=4, tokens=8, ranks=2, grpo=True, workers=1)
    (run_dir / "rollout_meta_1.json").write_text(json.dumps({"model_name": "m"}))
    (run_dir / ".hidden").mkdir()
    (run_dir / ".hidden" / "notes.txt").write_text("a trainer's own file")
    os.chmod(run_dir, 0o555)
    try:
        before = folder_state(run_dir)
        assert list_runs(str(tmp_path)) == ["run"] and read_meta(str(run_dir)) == {"model_name": "m"}
        store = RunStore(str(run_dir))
        run = store.load(128, parallel=False)
        rows = run.step_rows(1)
        assert run.steps == [0, 1] and len(board.load_step_batch(lines_key(rows), rows).table) == len(rows)
        assert sample_tokens(run, 1, 0) is not None
        assert folder_state(run_dir) == before
        assert list(private_index_cache.iterdir())  # the cache was written, only elsewhere
        # The trainer appends a step; the board reads it incrementally, and after a restart from its cache.
        with open(run_dir / "rollout_data_rank_1.jsonl", "ab") as file:
            file.write(json.dumps(sample(2, response_tokens=["a"], logprobs=[-0.5])).encode() + b"\n")
        before = folder_state(run_dir)
        assert store.needs_work(128) and store.load(128, parallel=False).steps == [0, 1, 2]
        assert sample_tokens(store.snapshots[128], 2, 0) is not None
        assert RunStore(str(run_dir)).load(128, parallel=False).steps == [0, 1, 2]
        assert folder_state(run_dir) == before
    finally:
        os.chmod(run_dir, 0o755)


def test_a_new_step_appended_while_live_is_picked_up(tmp_path):
    write_run(tmp_path / "run", steps=2, samples=8, tokens=20, ranks=2, workers=1)
    store = RunStore(str(tmp_path / "run"))
    before = store.load(128)
    assert not store.needs_work(128)
    path = tmp_path / "run" / "rollout_data_rank_0.jsonl"
    with open(path, "ab") as file:
        file.write(b"".join(json.dumps(sample(7, reward=3.0)).encode() + b"\n" for _ in range(4)))
    assert store.needs_work(128)
    after = store.load(128)
    assert after.steps == [0, 1, 7] and after.version != before.version
    assert after.samples[after.samples["step"] < 7].drop(columns="path").equals(before.samples.drop(columns="path"))
    assert lines_key(after.step_rows(1)) == lines_key(before.step_rows(1))  # what the step view built is reused


# A live run's next snapshot keeps the last one's rows of the steps its new lines leave alone: it must equal a snapshot
# built whole from the same files, column for column and type for type, through appends to one rank and to all, lines
# of earlier steps, bad and half-written lines, reward functions and text fields that appear late, a resumed launch and
# a file written anew.
@pytest.mark.parametrize("max_samples", [3, 128])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_snapshot_grown_from_the_last_equals_one_built_whole(tmp_path, monkeypatch, seed, max_samples):
    rng = np.random.default_rng(seed)
    run_dir = tmp_path / "run"
    launch = "20260101T000000Z"
    write_lines(run_dir / f"rollout_data_rank_0_{launch}.jsonl", [sample(0, reward=0.5)])
    write_lines(run_dir / f"rollout_data_rank_1_{launch}.jsonl", [sample(0, reward=1.5)])
    grown, grown_samples = [], rl_board.reading.snapshot.grown_samples
    monkeypatch.setattr(rl_board.reading.snapshot, "grown_samples", lambda *args: grown.append(grown_samples(*args)) or grown[-1])
    store, step, cut = RunStore(str(run_dir)), 0, None
    store.load(max_samples, parallel=False)
    for event in rng.choice(["step", "step", "step", "one rank", "earlier step", "bad", "half", "new fields", "resume", "rewrite"], size=40):
        rank = int(rng.integers(0, 2))
        path = run_dir / f"rollout_data_rank_{rank}_{launch}.jsonl"
        lines = []
        if cut is not None:  # the half-written line is finished first
            path, rest = cut
            lines, cut = [rest], None
        elif event in ("step", "one rank"):
            step += event == "step"
            lines = [json.dumps(sample(step, reward=float(rng.normal()), group_id=f"g{step}" if rng.random() < 0.5 else None)).encode() + b"\n" for _ in range(int(rng.integers(1, 5)))]
            if event == "step":
                write_lines_appended(run_dir / f"rollout_data_rank_{1 - rank}_{launch}.jsonl", lines[:1])
        elif event == "earlier step":  # with one of the last step, in one write
            lines = [json.dumps(sample(int(rng.integers(0, step + 1)), reward=9.0)).encode() + b"\n", json.dumps(sample(step, reward=8.0)).encode() + b"\n"]
        elif event == "bad":
            lines = [b"{not json\n"]
        elif event == "half":
            line = json.dumps(sample(step, reward=2.0)).encode() + b"\n"
            lines, cut = [line[:7]], (path, line[7:])
        elif event == "new fields":
            lines = [json.dumps(sample(step, reward=1.0, rewards_per_func={"late": 0.25}, note="n")).encode() + b"\n"]
        elif event == "rewrite":  # the same lines with other rewards: its rows are numbered as before
            rewritten = [line.replace(b'"reward": ', b'"reward": 1') for line in path.read_bytes().splitlines(keepends=True)]
            path.write_bytes(b"".join(rewritten[:-1]))
            lines = rewritten[-1:]
        else:
            launch = f"2026010{int(rng.integers(2, 10))}T{len(grown):06d}Z"
            step = max(step - 1, 0)
            lines = [json.dumps(sample(step, reward=-1.0)).encode() + b"\n"]
            path = run_dir / f"rollout_data_rank_0_{launch}.jsonl"
        write_lines_appended(path, lines)
        snapshot = store.load(max_samples, parallel=False)
        whole = rl_board.reading.snapshot.build_run(str(run_dir), store.files, select_lines(store.files, max_samples), max_samples, store.built_format)
        pd.testing.assert_frame_equal(snapshot.samples, whole.samples)
        assert snapshot.steps == whole.steps and snapshot.report.equals(whole.report)
    assert sum(samples is not None for samples in grown) >= len(grown) // 2


# A reward function or a field is a column only where a loaded sample has a value of it. Lines a live append adds to a
# step already full (Max Samples Each Step) are parsed and not loaded: their keys make no column, so a board that
# followed the run, one restarted on its cache and one that opens it fresh show the same samples. A field that only
# earlier steps have stays a column when later steps are appended, with the grown snapshot.
def test_a_field_is_a_column_only_where_a_loaded_sample_has_a_value(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    path = write_lines(run_dir / "rollout_data_rank_0.jsonl", [sample(0, note="first", rewards_per_func={"early": 1.0}), sample(0), sample(1, nothing=None), sample(1)])
    store = RunStore(str(run_dir))
    followed = store.load(2, parallel=False)
    assert {"text/note", "rewards/early"} <= set(followed.samples.columns) and "extra/nothing" not in followed.samples.columns
    write_lines_appended(path, [json.dumps(sample(0, rewards_per_func={"late": 0.5}, late_note="n", score=3)).encode() + b"\n"] * 2)
    followed = store.load(2, parallel=False)
    assert int((store.files[str(path)].lines["status"] == GOOD).sum()) == 6  # the appended lines were parsed, not loaded
    restarted = RunStore(str(run_dir)).load(2, parallel=False)
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "another_cache"))
    fresh = RunStore(str(run_dir)).load(2, parallel=False)
    for run in (followed, restarted):
        pd.testing.assert_frame_equal(run.samples.drop(columns="index_id"), fresh.samples.drop(columns="index_id"))
        assert run.reward_function_columns == fresh.reward_function_columns == ["rewards/early"]
    grown, grown_samples = [], rl_board.reading.snapshot.grown_samples
    monkeypatch.setattr(rl_board.reading.snapshot, "grown_samples", lambda *args: grown.append(grown_samples(*args)) or grown[-1])
    write_lines_appended(path, [json.dumps(sample(2, rewards_per_func={"late": 0.25})).encode() + b"\n"])
    followed = store.load(2, parallel=False)
    whole = rl_board.reading.snapshot.build_run(str(run_dir), store.files, select_lines(store.files, 2), 2, store.built_format)
    assert grown[-1] is not None
    pd.testing.assert_frame_equal(followed.samples, whole.samples)
    assert followed.samples["rewards/early"].notna().tolist() == [True, False, False, False, False]
    assert followed.reward_function_columns == ["rewards/early", "rewards/late"]


# The grown snapshot against a whole build where a live append changes which lines a full step shows: a rank's line
# arriving late for a step takes the place of another rank's, and the field only that one had goes with it; and a
# new rank file, listed first, whose lines name their fields in another order (a whole build orders the columns by it).
def test_a_grown_snapshot_orders_and_drops_field_columns_as_a_whole_build(tmp_path, monkeypatch):
    grown, grown_samples = [], rl_board.reading.snapshot.grown_samples
    monkeypatch.setattr(rl_board.reading.snapshot, "grown_samples", lambda *args: grown.append(grown_samples(*args)) or grown[-1])
    run_dir = tmp_path / "run"
    write_lines(run_dir / "rollout_data_rank_1.jsonl", [sample(0), sample(0), sample(1), sample(1, rewards_per_func={"only": 1.0}, score=5)])
    late = write_lines(run_dir / "rollout_data_rank_2.jsonl", [sample(0), sample(0)])
    store = RunStore(str(run_dir))
    assert {"rewards/only", "extra/score"} <= set(store.load(2, parallel=False).samples.columns)
    write_lines_appended(late, [json.dumps(sample(1)).encode() + b"\n"])  # step 1 now shows one line of each rank
    write_lines(run_dir / "rollout_data_rank_0.jsonl", [sample(2, b=2, a=1)])
    write_lines_appended(late, [json.dumps(sample(2, a=1, b=2)).encode() + b"\n"])
    followed = store.load(2, parallel=False)
    whole = rl_board.reading.snapshot.build_run(str(run_dir), store.files, select_lines(store.files, 2), 2, store.built_format)
    assert grown[-1] is not None
    pd.testing.assert_frame_equal(followed.samples, whole.samples)
    assert followed.reward_function_columns == [] and [name for name in followed.samples if name.startswith("extra/")] == ["extra/b", "extra/a"]


# The columns of keys outside the format (rewards/, extra/, text/) lines give, as the board names them, in the order
# they come: each line's reward functions, then its other keys; with each line's value of each.
def field_values_of(lines: list[dict]) -> dict[str, dict[int, object]]:
    fields: dict[str, dict[int, object]] = {}
    for row, line in enumerate(lines):
        named = [(f"rewards/{name}", score) for name, score in line.get("rewards_per_func", {}).items()]
        named += [(("text/" if isinstance(value, str) else "extra/") + name, value) for name, value in line.items() if name not in FORMAT_KEYS]
        for name, value in named:
            fields.setdefault(name, {})[row] = value
    return fields


# A key per line (an id used as the key): a file has columns for the first FIELD_COLUMNS names it holds, as they come
# in it, with every value of each, however its bytes are split for reading, and counts the values of the names after
# them in a note. A part read at once used to keep its own first 256 names, and a name the file keeps, met in a later
# part after 256 others, lost its values there; each line's reward function made a column of the whole part.
@pytest.mark.parametrize("split", [False, True])
def test_a_files_field_columns_are_its_first_names_however_it_is_split(tmp_path, monkeypatch, split):
    lines = [sample(i // 10, **{f"id{i}": i}, rewards_per_func={f"f{i}": i / 2}) for i in range(300)]
    lines += [sample(30 + i // 10, **{f"new{i}": -i, f"id{i}": float(i), "label": f"l{i % 3}"}) for i in range(300)]
    path = write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", lines)
    if split:  # the second half a part of its own: 300 new names before the first half's come again
        monkeypatch.setattr(rl_board.reading.workers, "CHUNK_BYTES", sum(len(json.dumps(line)) + 1 for line in lines[:300]) - 1)
    parts = count_index_calls(monkeypatch)
    run = load(path.parent, parallel=False)
    assert len(parts) == (2 if split else 1)
    fields = field_values_of(lines)
    kept, left_out = list(fields)[:FIELD_COLUMNS], list(fields)[FIELD_COLUMNS:]
    assert [name for name in run.samples if name.startswith(("rewards/", "extra/", "text/"))] == kept
    for name in kept:
        shown = [None if pd.isna(value) else value for value in run.samples[name]]
        assert shown == [fields[name].get(row) for row in range(len(lines))], name
    note = run.problems[run.problems["reason"].str.contains("values of keys outside the format")]
    assert note["line"].tolist() == [min(min(fields[name]) for name in left_out) + 1]
    assert note["reason"].iloc[0].startswith(f"{sum(len(fields[name]) for name in left_out):,} values of keys outside the format in the lines read are not in the tables")
    restarted = load(path.parent, parallel=False)  # from the index cache
    pd.testing.assert_frame_equal(restarted.samples.drop(columns="index_id"), run.samples.drop(columns="index_id"))
    pd.testing.assert_frame_equal(restarted.problems, run.problems)


# A run keeps columns for the first FIELD_COLUMNS field names with values in its loaded samples, file by file, and names
# the others in a note: a key per line in each of 64 rank files made 16,384 columns (a file keeps 256), and the one
# cache file of many small files a column of each name (2 GB for 32 files of 1,000 lines). A restart, and a run grown
# live, give what a whole build gives.
def test_a_run_keeps_the_first_field_names_of_its_files(tmp_path, monkeypatch, private_index_cache):
    run_dir = tmp_path / "run"
    paths = [write_lines(run_dir / f"rollout_data_rank_{rank}.jsonl", [sample(step, **{f"id_{rank}_{step}": step}) for step in range(10)]) for rank in range(BUNDLED_FILES + 8)]
    store = RunStore(str(run_dir))
    run = store.load(10240, parallel=False)
    rank_of = {path.name: rank for rank, path in enumerate(paths)}
    names = [f"extra/id_{rank_of[Path(path).name]}_{step}" for path in store.files for step in range(10)]
    assert [name for name in run.samples if name.startswith("extra/")] == names[:FIELD_COLUMNS]
    assert run.samples[names[0]].notna().sum() == 1 and run.samples[names[0]].iloc[0] == 0.0
    assert run.problems[run.problems["reason"].str.contains("names of keys outside the format")]["reason"].tolist() == [
        f"{len(names) - FIELD_COLUMNS:,} names of keys outside the format with values in the loaded samples are not in the tables: a run has "
        f"columns (rewards/, extra/, text/) for the first {FIELD_COLUMNS} names, file by file; left out: {', '.join(names[FIELD_COLUMNS:FIELD_COLUMNS + 3])} "
        f"and {len(names) - FIELD_COLUMNS - 3:,} more. A sample's view shows every key of its line"
    ]
    assert not Path(IndexCache().run_path_of(str(run_dir))).exists()  # a cache file each: one would have a column of each of 400 names
    calls = count_index_calls(monkeypatch)
    restarted = RunStore(str(run_dir)).load(10240, parallel=False)
    assert calls == []
    pd.testing.assert_frame_equal(restarted.samples.drop(columns="index_id"), run.samples.drop(columns="index_id"))
    write_lines_appended(paths[0], [json.dumps(sample(3, id_first=1.0)).encode() + b"\n"])  # a name of the first file: it comes before the others'
    grown = store.load(10240, parallel=False)
    whole = rl_board.reading.snapshot.build_run(str(run_dir), store.files, select_lines(store.files, 10240), 10240, store.built_format)
    pd.testing.assert_frame_equal(grown.samples, whole.samples)
    assert [name for name in grown.samples if name.startswith("extra/")] == names[:10] + ["extra/id_first"] + names[10 : FIELD_COLUMNS - 1]


# A step whose first lines are bad (a reward service down: "reward": "N/A") is filled with its next lines in rounds that
# parse twice as many as the last wherever its lines were bad: a round took the step's next Max Samples Each Step lines
# only, each round over every line of the run (8,000 bad lines among 400,000 at 16 a step: 500 rounds, 10 s). It shows
# what a selection from every line parsed shows.
def test_a_step_of_many_bad_lines_is_filled_in_few_rounds(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    bad = [json.dumps(sample(3, reward="N/A")).encode() + b"\n"] * 2000
    write_lines(run_dir / "rollout_data_rank_0.jsonl", [sample(step, reward=float(i)) for step in range(3) for i in range(20)] + bad + [sample(step, reward=float(i)) for step in range(3, 6) for i in range(20)])
    write_lines(run_dir / "rollout_data_rank_1.jsonl", [sample(step, reward=-float(i)) for step in range(6) for i in range(5)])
    rounds, parse_rows = [], RunStore.parse_rows
    monkeypatch.setattr(RunStore, "parse_rows", lambda self, todo, *args: rounds.append(sum(map(len, todo.values()))) or parse_rows(self, todo, *args))
    run = load(run_dir, 16, parallel=False)
    assert len(rounds) <= 10 and sum(rounds) < 2 * 2000 + 6 * 16 * 2  # 2,000 bad lines: 125 rounds before
    assert run.samples.groupby("step").size().tolist() == [16] * 6
    every = RunStore(str(run_dir))
    every.load(1 << 20, parallel=False)
    whole = rl_board.reading.snapshot.build_run(str(run_dir), every.files, select_lines(every.files, 16), 16, every.built_format)
    pd.testing.assert_frame_equal(run.samples.drop(columns="index_id"), whole.samples.drop(columns="index_id"))
    assert run.report["bad lines"].sum() <= 2 * 2000 and run.report["loaded"].sum() == 6 * 16


# A file of a million lines of another kind (a dataset's JSONL in the run folder) made a row of the load report each,
# 2.9 GB of the server: a file lists its lines' first PROBLEMS_LISTED problems and counts the rest, in a note; the
# report's table counts every bad line. Restarted, grown and followed live, where a last line with a problem only
# counted goes on without its newline, as a fresh open.
def test_a_files_problems_past_the_first_are_counted_not_listed(tmp_path, monkeypatch):
    monkeypatch.setattr(rl_board.reading.index, "PROBLEMS_LISTED", 10)
    monkeypatch.setattr(rl_board.reading.snapshot, "PROBLEMS_LISTED", 10)
    path = write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", [sample(0), *[{"text": f"row {i}"} for i in range(25)], sample(1)])
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    store = RunStore(str(path.parent))
    run = store.load(8, parallel=False)

    def listed(snapshot) -> list:
        return snapshot.problems[["line", "kind"]].values.tolist()

    note = "15 more problems of its lines are not listed here, past the first 10: the table above counts every bad line"
    assert listed(run) == [[0, "note"]] + [[line, "skipped"] for line in range(2, 12)] and run.problems["reason"].iloc[0] == note
    assert run.report["bad lines"].tolist() == [25] and run.steps == [0, 1]
    assert listed(RunStore(str(path.parent)).load(8, parallel=False)) == listed(run)  # from the index cache
    with open(path, "ab") as file:
        file.write(json.dumps({"text": "the last"}).encode())  # a whole last line without its newline: a problem counted
    grown = store.load(8, parallel=False)
    assert grown.problems["reason"].iloc[0] == note.replace("15", "16") and grown.report["bad lines"].tolist() == [26]
    with open(path, "ab") as file:
        file.write(json.dumps(sample(2)).encode() + b"\n")  # ...that goes on: one bad line with what follows
    live = store.load(8, parallel=False)
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "fresh"))
    fresh = RunStore(str(path.parent)).load(8, parallel=False)
    pd.testing.assert_frame_equal(live.samples.drop(columns="index_id"), fresh.samples.drop(columns="index_id"))
    pd.testing.assert_frame_equal(live.problems, fresh.problems)
    assert live.problems["reason"].iloc[0] == note.replace("15", "16") and live.report["bad lines"].tolist() == [26]


# A run of many files cached together, whose files then hold more field names than one cache file keeps: they are
# cached one by one, and the one cache file goes (kept, a restart took its files from it and read them on from there).
def test_a_run_cached_together_then_one_by_one_restarts_from_its_files_caches(tmp_path, monkeypatch, private_index_cache):
    run_dir = tmp_path / "run"
    paths = [write_lines(run_dir / f"rollout_data_rank_{rank}.jsonl", [sample(step) for step in range(3)]) for rank in range(BUNDLED_FILES)]
    load(run_dir, parallel=False)
    assert Path(IndexCache().run_path_of(str(run_dir))).exists()
    for rank, path in enumerate(paths):
        write_lines_appended(path, [json.dumps(sample(3, **{f"id_{rank}_{index}": index})).encode() + b"\n" for index in range(10)])
    grown = load(run_dir, parallel=False)
    assert not Path(IndexCache().run_path_of(str(run_dir))).exists()
    calls = count_index_calls(monkeypatch)
    restarted = load(run_dir, parallel=False)
    assert calls == []
    pd.testing.assert_frame_equal(restarted.samples.drop(columns="index_id"), grown.samples.drop(columns="index_id"))


# A last line taken without its newline whose key is new, then gone on (read again with what follows, as one bad line):
# the column it made went on standing in the index, so the file's columns came in another order than a fresh open's,
# and where they are 256, a name a fresh open has as a column was left out. And a last line whose line end has only
# its "\r" so far is as long as a fresh open has it (found by a fuzzing review).
@pytest.mark.parametrize("case", ["order", "the 256th name", "a carriage return"])
def test_a_last_line_gone_on_leaves_the_columns_a_fresh_open_has(tmp_path, monkeypatch, case):
    def line(step, **extra) -> bytes:
        return json.dumps(sample(step, **extra)).encode()

    path = tmp_path / "run" / "rollout_data_rank_0.jsonl"
    path.parent.mkdir()
    first, then = {
        "order": (line(0, a=1) + b"\n" + line(0, zzz=1), b"garbage\n" + line(1, c=2) + b"\n" + line(1, zzz=3) + b"\n"),
        "the 256th name": (b"".join(line(0, **{f"k{i}": i}) + b"\n" for i in range(255)) + line(0, zzz=1), b"garbage\n" + line(1, late=5) + b"\n"),
        "a carriage return": (line(0, a=1) + b"\r\n" + line(0, zzz=1), b"\r"),
    }[case]
    path.write_bytes(first)
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    store = RunStore(str(path.parent))
    store.load(1 << 20, parallel=False)
    write_lines_appended(path, [then])
    live = store.load(1 << 20, parallel=False)
    restarted = RunStore(str(path.parent)).load(1 << 20, parallel=False)
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "fresh"))
    fresh = RunStore(str(path.parent)).load(1 << 20, parallel=False)
    for shown in (live, restarted):
        pd.testing.assert_frame_equal(shown.samples.drop(columns="index_id"), fresh.samples.drop(columns="index_id"))
        pd.testing.assert_frame_equal(shown.problems, fresh.problems)
    assert [name for name in live.samples if name.startswith("extra/")][-1] == {"order": "extra/zzz", "the 256th name": "extra/late", "a carriage return": "extra/zzz"}[case]


# A prompt nested nearly as deep as the decoder takes was decoded, then overflowed Python's stack when written out as
# text, and the RecursionError went out of the load (a window of a few depths, wherever the stack stands): every depth
# around it is a line loaded or a line skipped with its reason (found by a review).
def test_a_line_nested_about_as_deep_as_a_decoder_goes_is_loaded_or_skipped(tmp_path):
    depths = range(850, 1010)
    path = write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", [
        ('{"prompt": ' + "[" * depth + "1" + "]" * depth + f', "response": "r", "reward": 1.0, "step": {index}}}').encode() + b"\n" for index, depth in enumerate(depths)
    ])
    run = load(path.parent, parallel=False)
    skipped = run.problems[run.problems["kind"] == "skipped"]
    assert len(run.samples) + len(skipped) == len(depths) and len(run.samples) > 0 and len(skipped) > 0
    assert set(skipped["reason"]) <= {"nested too deep to be read"} | {reason for reason in skipped["reason"] if "nest" in reason or "depth" in reason or "recursion" in reason.lower()}


def write_lines_appended(path: Path, lines: list[bytes]):
    with open(path, "ab") as file:
        file.write(b"".join(lines))


@pytest.mark.parametrize("ranks_appended", [1, 4])
def test_a_new_step_is_parsed_in_one_pass_and_no_more_than_max_samples(tmp_path, monkeypatch, ranks_appended):
    write_run(tmp_path / "run", steps=2, samples=8, tokens=20, ranks=4, workers=1)
    store = RunStore(str(tmp_path / "run"))
    store.load(8)
    second_passes, summarize_lines = [], rl_board.reading.workers.summarize_lines
    monkeypatch.setattr(rl_board.reading.store, "summarize_lines", lambda *args: second_passes.append(args) or summarize_lines(*args))
    for rank in range(ranks_appended):
        with open(tmp_path / "run" / f"rollout_data_rank_{rank}.jsonl", "ab") as file:
            file.write(b"".join(json.dumps(sample(7, reward=float(i))).encode() + b"\n" for i in range(8)))
    run = store.load(8)
    assert second_passes == []  # one rank: its share would be 2 of the 8, so the new lines are parsed in full at once
    parsed = sum(int(((index.lines["step"] == 7) & (index.lines["status"] != UNPARSED)).sum()) for index in store.files.values())
    assert parsed == 8  # all ranks: a share of 2 in each, not 8 in each
    assert len(run.step_rows(7)) == 8


def test_a_second_pass_reads_just_its_lines_and_reports_one_cut_short(tmp_path):
    lines = [json.dumps(sample(1, reward=float(i), response="r" * (10 + i))).encode() for i in range(4)]
    path = write_lines(tmp_path / "r.jsonl", [line + b"\n" for line in lines])
    offsets = np.cumsum([0] + [len(line) + 1 for line in lines[:-1]])
    lengths = np.array([len(line) for line in lines])
    far_apart = rl_board.reading.workers.summarize_lines(str(path), offsets[[0, 3]], lengths[[0, 3]])
    assert far_apart.good.tolist() == [True, True] and far_apart.numbers["reward"].tolist() == [0.0, 3.0]
    os.truncate(path, offsets[2] + 5)  # the file shrank after it was indexed
    cut = rl_board.reading.workers.summarize_lines(str(path), offsets, lengths)
    assert cut.good.tolist() == [True, True, False, False] and cut.numbers["reward"][:2].tolist() == [0.0, 1.0]
    assert [(row, kind) for row, kind, _ in cut.problems] == [(2, "skipped"), (3, "skipped")]


def test_a_rewritten_file_never_reuses_what_was_built_from_its_old_lines(tmp_path):
    path = write_lines(tmp_path / "run" / "r.jsonl", [sample(1, reward=1.0), sample(1, reward=2.0)])
    store = RunStore(str(tmp_path / "run"))
    rows = store.load(128).step_rows(1)
    assert list(board.load_step_batch(lines_key(rows), rows).table["response"]) == ["r1", "r1"]
    write_lines(path, [sample(1, reward=5.0, response="s1"), sample(1, reward=6.0, response="t1")])  # same size and offsets
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    rewritten = store.load(128).step_rows(1)
    assert lines_key(rewritten) != lines_key(rows)
    assert list(board.load_step_batch(lines_key(rewritten), rewritten).table["response"]) == ["s1", "t1"]


# A write that lands while a load is reading the file: the index describes what was read, so the next load sees the write.
def write_during_the_pass(monkeypatch, write):
    original = index_chunk

    def racing(*args):
        result = original(*args)
        monkeypatch.setattr(rl_board.reading.store, "index_chunk", original)
        write()
        return result

    monkeypatch.setattr(rl_board.reading.store, "index_chunk", racing)


def test_lines_appended_during_a_load_are_read_by_the_next(tmp_path, monkeypatch):
    path = write_lines(tmp_path / "run" / "r.jsonl", [sample(1)])
    write_during_the_pass(monkeypatch, lambda: open(path, "ab").write(json.dumps(sample(2)).encode() + b"\n"))
    store = RunStore(str(tmp_path / "run"))
    assert store.load(128, parallel=False).steps == [1]
    assert store.needs_work(128) and store.load(128, parallel=False).steps == [1, 2]


def test_a_file_rewritten_during_a_load_is_read_again(tmp_path, monkeypatch):
    path = write_lines(tmp_path / "run" / "r.jsonl", [sample(1)])
    store = RunStore(str(tmp_path / "run"))
    rows = store.load(128, parallel=False).step_rows(1)
    assert list(board.load_step_batch(lines_key(rows), rows).table["response"]) == ["r1"]
    with open(path, "ab") as file:
        file.write(json.dumps(sample(2)).encode() + b"\n")
    write_during_the_pass(monkeypatch, lambda: path.write_bytes(path.read_bytes().replace(b'"r1"', b'"s1"')))
    store.load(128, parallel=False)
    rows = store.load(128, parallel=False).step_rows(1)
    assert list(board.load_step_batch(lines_key(rows), rows).table["response"]) == ["s1"]


def test_free_form_fields_from_other_tools_are_shown_as_text(tmp_path):
    chat = [{"role": "user", "content": "hi"}]
    write_lines(tmp_path / "run" / "r.jsonl", [dict(prompt=chat, response="ok", reward=1, step="3", ground_truth=[1, 2], extra={"x": 1})])
    run = load(tmp_path / "run")
    batch = board.load_step_batch(lines_key(run.step_rows(3)), run.step_rows(3))
    assert json.loads(batch.table["prompt"].iloc[0]) == chat
    assert batch.table["ground_truth"].iloc[0] == "[1, 2]"


def test_a_lone_surrogate_anywhere_costs_one_character_not_the_run(tmp_path):
    lone = "\ud83d"  # valid JSON ("\ud83d"): an emoji cut in half by the tool that wrote it
    lines = [
        sample(1, group_id=lone, rewards_per_func={lone: 1.0}, response_tokens=["a", lone], logprobs=[-1.0, -2.0]),
        sample(1, prompt=lone, response="x" + lone, ref_response=lone, ground_truth=[lone]),
        sample(2, response_tokens=[lone]),
        sample(3, **{"note" + lone: 5, "nested": {lone: 1}}),  # in a key name too, and in the keys the views read
        sample(4, logprobs=[-1.0], response_tokens=["a"], turns=[{"role": "assistant", "text": "a", "k" + lone: 1}],
               loss_passes=[{"step": 4, "micro_batch": 0, "x" + lone: 1, "update_weight": [0.5]}]),
    ]
    write_lines(tmp_path / "run" / "r.jsonl", lines)
    run = load(tmp_path / "run")
    assert len(run.samples) == 5 and not problems_of(run)
    assert run.samples["extra/note\ufffd"].iloc[3] == 5
    assert run.samples["turns"].iloc[4] == 1 and run.samples["loss_passes"].iloc[4] == 1
    assert rl_board.open_run(tmp_path / "run").tokens(4, 0)["update_weight"].tolist() == [0.5]
    assert run.samples["group_id"].iloc[0] == "\ufffd" and run.reward_function_columns == ["rewards/\ufffd"]
    assert run.samples["response_tokens_len"].iloc[0] == 2.0 and run.samples["response_tokens_len"].iloc[2] == 1.0
    batch = board.load_step_batch(lines_key(run.step_rows(1)), run.step_rows(1))
    assert batch.table["prompt"].tolist() == ["p1", "\ufffd"] and batch.table["response"].iloc[1] == "x\ufffd"
    assert run.samples["response_len"].tolist()[:2] == [2.0, 2.0] and run.samples["ref_response_len"].iloc[1] == 1.0  # as shown
    assert sample_tokens(run, 1, 0).response_tokens == ["a", "\ufffd"]


def test_nesting_too_deep_for_a_parser_is_a_skipped_line(tmp_path):
    deep = json.dumps(sample(1))[:-1].encode() + b', "x": ' + b"[" * 5000 + b"]" * 5000 + b"}\n"
    write_lines(tmp_path / "run" / "r.jsonl", [deep, sample(1)])
    for parallel in (False, True):
        run = load(tmp_path / "run", parallel=parallel)
        assert len(run.samples) == 1 and list(problems_of(run, "skipped")) == [("r.jsonl", 1)]
        shutil.rmtree(os.environ["RL_LOGGING_BOARD_CACHE"])


def test_a_file_name_that_is_not_utf8_is_reported_not_fatal(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with open(os.path.join(os.fsencode(run_dir), b"rank_\xff.jsonl"), "wb") as file:
        file.write(json.dumps(sample(1)).encode() + b"\n{oops\n")
    write_lines(run_dir / "rank_0.jsonl", [sample(1)])
    run = load(run_dir)
    assert len(run.samples) == 1 and run.report["file"].tolist() == ["rank_0.jsonl"]
    assert problems_of(run, "skipped") == {("rank_\ufffd.jsonl", 0): "the file name is not valid UTF-8: rename the file to load it"}


def test_a_rank_file_that_is_a_link_to_nothing_is_reported(tmp_path):
    run_dir = tmp_path / "run"
    write_lines(run_dir / "rollout_data_rank_0.jsonl", [sample(1)])
    (run_dir / "rollout_data_rank_1.jsonl").symlink_to(tmp_path / "elsewhere" / "rank_1.jsonl")
    run = load(run_dir)
    assert len(run.samples) == 1 and run.report["file"].tolist() == ["rollout_data_rank_0.jsonl"]
    assert list(problems_of(run, "skipped")) == [("rollout_data_rank_1.jsonl", 0)]
    assert problems_of(run, "skipped")[("rollout_data_rank_1.jsonl", 0)].startswith("a link to a file that is not there")
    write_lines(tmp_path / "elsewhere" / "rank_1.jsonl", [sample(1, reward=2.0)])  # the mount back
    run = load(run_dir)
    assert len(run.samples) == 2 and not problems_of(run, "skipped")


def test_a_per_token_list_of_the_wrong_type_is_left_out_with_a_note_not_the_sample_s_tokens(tmp_path):
    tokens = dict(logprobs=[-1.0, -2.0], ref_logprobs=[-1.5, -2.5], sampler_logprobs=[-1.1, -2.1])
    lines = [
        sample(1, response_tokens=["a", "b"], values="bad", **tokens),
        sample(1, response_tokens="ab", token_rewards=[[1.0], [2.0]], **tokens),
        sample(1, response_tokens=["a", "b"], sampler_kept_logmass={"x": 1}, token_rewards=[1, "x"], **tokens),
    ]
    write_lines(tmp_path / "run" / "r.jsonl", lines)
    run = load(tmp_path / "run")
    assert len(run.samples) == 3 and not problems_of(run)
    shown = [sample_tokens(run, 1, index) for index in range(3)]
    assert [detail.notes for detail in shown] == [
        ["values is not a list of numbers: ignored"],
        ["token_rewards is not a list of numbers: ignored", "response_tokens is not a list: ignored"],
        ["token_rewards is not a list of numbers: ignored", "sampler_kept_logmass is not a list of numbers: ignored"],
    ]
    assert shown[0].values is None and shown[1].token_rewards is None and shown[2].sampler_kept_logmass is None
    assert shown[0].response_tokens == ["a", "b"] and shown[1].response_tokens == ["?", "?"]
    for detail in shown:
        assert detail.logprobs.tolist() == [-1.0, -2.0] and detail.ref_logprobs.tolist() == [-1.5, -2.5]
    mismatch = read_mismatch_tokens(run.samples)
    assert not mismatch.problems and mismatch.lengths.tolist() == [2, 2, 2]
    with pytest.warns(UserWarning, match="values is not a list of numbers: ignored"):
        assert rl_board.open_run(tmp_path / "run").tokens(1, 0)["logp"].tolist() == [-1.0, -2.0]


# A list the load report names as left out of its line (not a list, lists in a list) is named above the sample's tokens
# too, where the others of the wrong type are: the sampler's columns were missing from the sample with no word.
def test_a_per_token_list_left_out_of_its_line_is_named_above_the_sample_s_tokens(tmp_path):
    lines = [sample(1, response_tokens=["a", "b"], logprobs=[-1.0, -2.0], sampler_logprobs=wrong) for wrong in ("oops", [[-1.0], [-2.0]])]
    write_lines(tmp_path / "run" / "r.jsonl", lines)
    run = load(tmp_path / "run")
    assert [reason.split(":")[0] for reason in problems_of(run, "note").values()] == ["sampler_logprobs left out"] * 2
    for index in range(2):
        detail = sample_tokens(run, 1, index)
        assert detail.sampler_logprobs is None and [note.split(":")[0] for note in detail.notes] == ["sampler_logprobs left out"]
    with pytest.warns(UserWarning, match="sampler_logprobs left out"):
        assert "sampler_logp" not in rl_board.open_run(tmp_path / "run").tokens(1, 0)


def test_lists_of_different_lengths_are_cut_to_the_shortest_and_each_note_says_so(tmp_path):
    write_lines(tmp_path / "run" / "r.jsonl", [sample(1, logprobs=[-1.0] * 6, ref_logprobs=[-1.0], entropies=[0.5] * 6, values=[1.0] * 4)])
    detail = sample_tokens(load(tmp_path / "run"), 1, 0)
    assert len(detail.logprobs) == 1 and detail.notes == [
        "ref_logprobs has 1 values, logprobs 6: token values use the first 1",
        "values has 4 values, logprobs 6: token values use the first 1",
    ]  # entropies agree with logprobs: no note


def test_a_rank_file_gone_between_loads_is_noted_until_it_is_back(tmp_path):
    kept = write_lines(tmp_path / "run" / "rollout_data_rank_0_1.jsonl", [sample(1), sample(2)])
    gone = write_lines(tmp_path / "run" / "rollout_data_rank_1_1.jsonl", [sample(1), sample(2)])
    store = RunStore(str(tmp_path / "run"))
    assert len(store.load(128).samples) == 4
    content = gone.read_bytes()
    gone.unlink()
    gone.mkdir()  # no longer a file
    run = store.load(128)
    assert len(run.samples) == 2 and problems_of(run, "note") == {(gone.name, 0): "gone since the run was loaded (deleted, or no longer a file): its 2 line(s) are no longer shown"}
    kept.write_bytes(kept.read_bytes() + json.dumps(sample(3)).encode() + b"\n")
    assert (gone.name, 0) in problems_of(store.load(128), "note")  # said on every load, not once
    gone.rmdir()
    gone.write_bytes(content)
    run = store.load(128)
    assert len(run.samples) == 5 and not problems_of(run, "note")


def test_a_run_folder_whose_name_is_not_utf8_is_refused_with_its_reason(tmp_path):
    run_dir = tmp_path / "root" / os.fsdecode(b"run_\xff")
    write_lines(run_dir / "r.jsonl", [sample(1)])
    with pytest.warns(UserWarning, match="Not listed, its name not valid UTF-8 .*: run_\ufffd"):
        assert rl_board.list_runs(tmp_path / "root") == []  # named, not listed, as in the sidebar: a loop over the runs opens each
    with pytest.raises(StorageError, match="run_\ufffd is not valid UTF-8: rename the folder to open it"):
        rl_board.open_run(run_dir)


def test_an_empty_per_token_list_beside_others_counts_as_absent(tmp_path):
    write_lines(tmp_path / "run" / "r.jsonl", [sample(1, logprobs=[-1.0, -2.0, -3.0], ref_logprobs=[], entropies=[])])
    run = load(tmp_path / "run")
    assert not problems_of(run)
    numbers = run.samples.iloc[0]
    assert numbers["response_tokens_len"] == 3 and numbers["avg_logp"] == -2.0
    assert np.isnan(numbers["avg_entropy"]) and np.isnan(numbers["avg_kl_kl"])
    tokens = sample_tokens(run, 1, 0)
    assert tokens.ref_logprobs is None and tokens.entropies is None and tokens.logprobs.tolist() == [-1.0, -2.0, -3.0]


def test_launch_ids_with_digits_that_are_no_numbers_still_load(tmp_path):
    write_lines(tmp_path / "run" / "d_rank_0_².jsonl", [sample(1)])
    write_lines(tmp_path / "run" / "d_rank_0_1².jsonl", [sample(2)])
    run = load(tmp_path / "run")  # "²" sorts after "1²" as text, so it is the newer launch, from step 1 on
    assert run.steps == [1] and run.report["replaced by a newer launch"].sum() == 1


def test_launch_ids_that_are_counters_sort_by_number(tmp_path):
    write_lines(tmp_path / "run" / "d_rank_0_9.jsonl", [sample(1, reward=9.0), sample(2, reward=9.0)])
    write_lines(tmp_path / "run" / "d_rank_0_10.jsonl", [sample(2, reward=10.0), sample(3, reward=10.0)])
    run = load(tmp_path / "run")
    assert run.samples.set_index("step")["reward"].to_dict() == {1: 9.0, 2: 10.0, 3: 10.0}


def test_a_line_that_holds_another_step_when_read_back_is_reported(tmp_path):
    path = write_lines(tmp_path / "run" / "r.jsonl", [sample(1), sample(2)])
    run = load(tmp_path / "run")
    status = path.stat()
    path.write_bytes(path.read_bytes().replace(b'"step": 1', b'"step": 3'))  # same size and time: the index still holds
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    batch = board.load_step_batch(lines_key(run.step_rows(1)), run.step_rows(1))
    assert batch.problems == ["r.jsonl line 1 could not be read back (it now holds step 3, not 1)"]
    assert batch.table["prompt"].tolist() == [""]
    with pytest.raises(BadLine, match="it now holds step 3, not 1"):  # nor are its tokens shown
        sample_tokens(run, 1, 0)


def test_steps_a_float_cannot_hold_exactly_are_read_back(tmp_path):
    write_lines(tmp_path / "run" / "r.jsonl", [sample(2**53 + 1), sample(2**53 + 1)])
    run = load(tmp_path / "run")
    [step] = run.steps
    batch = board.load_step_batch(lines_key(run.step_rows(step)), run.step_rows(step))
    assert not batch.problems and batch.table["prompt"].tolist() == [f"p{2**53 + 1}"] * 2


def test_a_step_int64_holds_only_before_it_is_a_float_is_skipped_not_shown_negative(tmp_path):
    largest = 2**63 - 1024  # the largest float below 2**63
    write_lines(tmp_path / "run" / "r.jsonl", [sample(2**63 - 1), sample(largest), sample(-(2**63))])
    for parallel in (False, True):
        run = load(tmp_path / "run", parallel=parallel)
        assert run.steps == [-(2**63), largest] and problems_of(run, "skipped") == {("r.jsonl", 1): "step 922337203685… (19 digits) is out of range"}
        shutil.rmtree(os.environ["RL_LOGGING_BOARD_CACHE"])


# The logger's contract with the board (rollout_logger.metadata) is what the board's decoders read: a key added to one
# and not the other would be read as a field, or never written.
def test_the_decoders_read_exactly_the_line_format_of_the_contract():
    from rl_board.reading.lines import Rollout, RolloutTexts
    from rollout_logger.metadata import FORMAT_KEYS, LINE_KEYS

    decoded = {field.encode_name for struct in (Rollout, RolloutTexts) for field in msgspec.structs.fields(struct)}
    assert decoded | {"rank"} == FORMAT_KEYS and set(LINE_KEYS) <= FORMAT_KEYS


# A worker killed while it indexes (out of memory, a signal) broke the pool until the server restarted: the pool is
# started again and the run read again, once, and the load report says so.
def test_a_worker_killed_mid_index_is_replaced_and_the_load_retried(tmp_path, monkeypatch):
    write_run(tmp_path / "run", steps=3, samples=8, tokens=10, ranks=2, workers=1)
    marker = tmp_path / "killed"
    monkeypatch.setattr(rl_board.reading.store, "index_chunk", functools.partial(index_chunk_killed_once, str(marker)))
    run = RunStore(str(tmp_path / "run")).load(128, parallel=True)
    assert marker.exists() and len(run.samples) == 3 * 8
    assert run.problems["reason"].tolist()[0] == rl_board.reading.store.WORKER_LOST
    assert worker_pool().submit(int).result(timeout=120) == 0  # the new pool works
    assert len(RunStore(str(tmp_path / "run")).load(128, parallel=True).samples) == 3 * 8


# Two sessions watching a run with different Max Samples Each Step each keep their snapshot: neither reloads the other's.
def test_snapshots_of_different_max_samples_are_kept_side_by_side(tmp_path):
    write_run(tmp_path / "run", steps=3, samples=8, tokens=10, ranks=2, workers=1)
    store = RunStore(str(tmp_path / "run"))
    small, whole = store.load(4, parallel=False), store.load(128, parallel=False)
    assert (len(small.samples), len(whole.samples)) == (3 * 4, 3 * 8)
    assert not store.needs_work(4) and not store.needs_work(128)
    assert store.load(4, parallel=False) is small and store.load(128, parallel=False) is whole
    with open(tmp_path / "run" / "rollout_data_rank_0.jsonl", "a") as file:  # a new step: both are out of date
        file.write(json.dumps(sample(3)) + "\n")
    assert store.needs_work(4) and store.needs_work(128)
    assert store.load(4, parallel=False).steps == [0, 1, 2, 3]


# A second session whose tasks broke on the same dead pool must not shut down the pool the first has just started.
def test_only_the_broken_pool_is_replaced():
    broken = worker_pool()
    rl_board.reading.workers.replace_broken_pool(broken)
    fresh = worker_pool()
    assert fresh is not broken
    rl_board.reading.workers.replace_broken_pool(broken)  # the second session's late call
    assert worker_pool() is fresh and fresh.submit(int).result(timeout=120) == 0


# A line's step is hinted, before it is parsed, from its "step" key, so that only Max Samples Each Step lines a step are
# parsed; the logger's line with loss passes names each pass's optimizer step after the line's own (with
# num_iterations > 1, a step's lines are written after later steps' lines), each pass object beginning with it, as a
# field's object may; and "step" can be a token of a list after the key. Hinted by the last "step", the line was
# counted at a later step, never parsed, and its own step was missing.
@pytest.mark.parametrize("max_samples", [1, 2, 10])
def test_a_line_naming_other_steps_inside_it_is_loaded_at_its_own_step(tmp_path, max_samples):
    path = tmp_path / "run" / "rollout_data_rank_0.jsonl"
    late = sample(0, reward=0.25, micro_batch=0, loss_passes=[{"step": 0, "micro_batch": 0}, {"step": 1, "micro_batch": 0}])
    nested = sample(2, reward=0.75, meta={"step": 1, "source": "eval"}, tokens=["step", "1"])
    wordy = sample(3, reward=0.5, tokens=["step"] * 100)  # more "step"s after its key than are looked at: parsed at once
    write_lines(path, [sample(1, reward=1.0), sample(1, reward=0.5), late, sample(1, reward=0.0), nested, wordy])
    run = load(path.parent, max_samples=max_samples)
    assert run.steps == [0, 1, 2, 3]
    assert run.step_rows(0)["reward"].tolist() == [0.25] and run.step_rows(2)["reward"].tolist() == [0.75] and run.step_rows(3)["reward"].tolist() == [0.5]
    assert run.step_rows(1)["reward"].tolist() == [1.0, 0.5, 0.0][:max_samples]


# An agent's turns, or a field's object, may hold a "step" key of their own after other keys of theirs, before or after
# the line's "step" (a turn's number, an environment's step). Before, the last "step" key that was no object's first
# was taken for the line's: lines of steps 4 and 7 were counted at step 1 (their last turn's number) and, step 1 having
# Max Samples Each Step lines of its own, were never parsed: steps 4 and 7 had one sample each, not two.
@pytest.mark.parametrize("own_step_first", [True, False])
def test_lines_whose_turns_name_steps_of_their_own_are_loaded_at_their_step(tmp_path, own_step_first):
    def line(step, number):
        turns = [{"role": "agent", "action": "look", "step": turn} for turn in range(1 + step % 3)]
        meta = {"env": "maze", "step": number % 2}
        record = {"step": step, "meta": meta, "turns": turns} if own_step_first else {"meta": meta, "turns": turns, "step": step}
        return {"prompt": f"p{step}", "response": f"r{number}", "reward": float(number), **record}
    lines = [line(step, number) for number in range(6) for step in range(8)]  # the steps interleaved, as ranks' lines
    path = write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", lines)
    run = load(path.parent, max_samples=2)
    assert run.steps == list(range(8))
    for step in range(8):
        assert run.step_rows(step)["reward"].tolist() == [0.0, 1.0]


# The hint of each shape of line: the one "step" key that is no object's first, else none (the line parsed at once).
STEP_HINTS = [
    (b'{"step": 3, "a": 1}', 3), (b'{"a": 1, "step": 3}', 3), (b'{ "step":1}', 1), (b'  {"step": -2}', -2), (b'{"x": 1}', None),
    (b'{"a": [{"step": 9, "x": 1}], "step": 4}', 4), (b'{"step": 4, "m": {"x": 1, "step": 5}}', None), (b'{"m": {"x": 1, "step": 5}, "step": 4}', None),
    (b'{"t": ["step", "step"], "step" :  7 }', 7), (b'{"step": 3, "t": ["step", "step"]}', 3), (b'{"a": "\\"step\\": 5", "step": 6}', 6),
    (b'{"step": 2.5}', None), (b'{"step": "3"}', None), (b'{"step": 1' + b"0" * 400 + b"}", math.inf),
    (b'{"x": "' + b"y" * 5000 + b'", "step": 8}', 8), (b'{"x": "' + b"y" * 5000 + b'", "step": 8, "m": {"a": 1, "step": 2}}', None),
    (b'{"step": 5, "passes": [' + b'{"step": 6, "micro_batch": 0}, ' * 10 + b"{}]}", 5),
    (b'{"step": 5, "passes": [' + b'{"step": 6, "micro_batch": 0}, ' * 100 + b"{}]}", None),  # more keys than are looked at
    (b'{"st\\u0065p": 1, "turns": [{"role": "agent", "step": 0}]}', None), (b'{"step": 0, "st\\u0065p": 1}', None),  # the same key, escaped
    (b'{"step": 3, "text": "caf\\u00e9 \\u0073tep \\\\u0073tep"}', 3),
]


def test_each_line_is_hinted_at_the_step_its_own_key_names():
    data = bytearray(b"\n".join(line for line, _ in STEP_HINTS) + b'\n{"step": 99')  # an unfinished last line: no line
    hints = rl_board.reading.lines.scan_lines(data, len(data), 0).step_hint.tolist()
    assert len(hints) == len(STEP_HINTS)
    for hint, (line, expected) in zip(hints, STEP_HINTS):
        assert (math.isnan(hint) if expected is None else hint == expected), line[:80]


# A "step" key with a letter escaped is the line's step once decoded: the line was hinted at its turn's step and, that
# step full, never parsed.
def test_a_step_key_written_with_an_escape_is_loaded_at_its_step(tmp_path):
    lines = [b'{"step": 0, "prompt": "a", "response": "a", "reward": 0}\n', b'{"st\\u0065p": 1, "prompt": "b", "response": "b", "reward": 1, "turns": [{"role": "agent", "step": 0}]}\n']
    run = load(write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", lines).parent, max_samples=1)
    assert run.steps == [0, 1] and run.step_rows(1)["reward"].tolist() == [1.0]


# A last line taken without its line end (the writer between "}" and "\r\n", or spaces and "\n") ends where a whole
# parse ends it once the rest is written: the bytes before the newline are its own, and no blank line follows it.
# Before, "\r\n" was read as one more (blank) line, every later line numbered one more than a fresh open numbers it.
@pytest.mark.parametrize("line_end", [b"\r\n", b"  \n", b"\n"])
def test_a_last_line_whose_line_end_comes_later_is_read_as_a_whole_parse_reads_it(tmp_path, monkeypatch, line_end):
    path = tmp_path / "run" / "rollout_data_rank_0.jsonl"
    path.parent.mkdir()
    path.write_bytes(json.dumps(sample(0)).encode() + line_end + json.dumps(sample(1)).encode())
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    store = RunStore(str(path.parent))
    store.load(8, parallel=False)
    with open(path, "ab") as file:
        file.write(line_end + json.dumps(sample(2)).encode() + line_end + b"{bad" + line_end)
    live = store.load(8, parallel=False)
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "fresh"))
    fresh = RunStore(str(path.parent)).load(8, parallel=False)
    pd.testing.assert_frame_equal(live.samples.drop(columns="index_id"), fresh.samples.drop(columns="index_id"))
    assert live.samples["line"].tolist() == [1, 2, 3] and live.problems[["line", "kind"]].values.tolist() == fresh.problems[["line", "kind"]].values.tolist() == [[4, "skipped"]]


# A last line taken without its newline, then continued by something other than a line end (a writer that left the
# newline out, or a last line only looking whole): a parse of the whole file reads it with what follows as one line,
# and so does a run followed live. Before, the live run kept it as a line of its own, and read the rest as the next.
@pytest.mark.parametrize("going_on", [json.dumps(sample(2)).encode() + b"\n", b"  " + json.dumps(sample(2)).encode(), b', "extra": 1}\n' + json.dumps(sample(3)).encode() + b"\n"])
def test_a_last_line_continued_without_its_newline_is_read_as_a_whole_parse_reads_it(tmp_path, monkeypatch, going_on):
    path = tmp_path / "run" / "rollout_data_rank_0.jsonl"
    path.parent.mkdir()
    path.write_bytes(json.dumps(sample(0)).encode() + b"\n" + json.dumps(sample(1)).encode())
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    store = RunStore(str(path.parent))
    assert store.load(8, parallel=False).steps == [0, 1]
    with open(path, "ab") as file:
        file.write(going_on)
    live = store.load(8, parallel=False)
    restarted = RunStore(str(path.parent)).load(8, parallel=False)
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "fresh"))
    fresh = RunStore(str(path.parent)).load(8, parallel=False)
    for shown in (live, restarted):
        pd.testing.assert_frame_equal(shown.samples.drop(columns="index_id"), fresh.samples.drop(columns="index_id"))
        assert shown.problems[["line", "kind"]].values.tolist() == fresh.problems[["line", "kind"]].values.tolist()
    assert live.steps == fresh.steps and 1 not in fresh.steps  # line 2 is no line of step 1 once it goes on


# A rank file this process may not read (a trainer in a container wrote it as root, mode 600) is left out with a row
# of the load report, and the run's other files are shown: open_run raised PermissionError, the page a traceback. As
# root, which reads any file, the load runs without the capabilities that let it (setpriv).
# A format the board converts (verl's dumps: <step>.jsonl, their first lines read to tell the format) too.
@pytest.mark.parametrize("names, line", [
    (["rollout_data_rank_0.jsonl", "rollout_data_rank_1.jsonl"], sample),
    (["1.jsonl", "2.jsonl"], lambda step: {"input": f"q{step}", "output": "a", "score": 1.0, "step": step}),
], ids=["rank files", "verl dumps"])
def test_a_rank_file_that_cannot_be_read_is_reported_and_the_others_shown(tmp_path, names, line):
    run_dir = tmp_path / "run"
    for name in names:
        write_lines(run_dir / name, [line(1), line(1)])
    (run_dir / names[0]).chmod(0)
    load = (
        "import rl_board; run = rl_board.open_run(" + repr(str(run_dir)) + "); "
        "print(len(run.samples), run.problems[['file', 'kind', 'reason']].values.tolist())"
    )
    assert output_of_unprivileged(load, {"RL_LOGGING_BOARD_CACHE": str(tmp_path / "cache")}) == f"2 [['{names[0]}', 'skipped', 'cannot be read (Permission denied): left out, read once it can be']]"


# A rank file that cannot be read any more after a load (a relaunch writing it as another user; a chmod, which changes
# no size or time: a load asking for more of its lines raised) is said to be so, not also "gone since the run was
# loaded" (it is still there), and the others stay shown.
@pytest.mark.parametrize("appended", [True, False], ids=["appended", "only its mode changed"])
def test_a_rank_file_that_cannot_be_read_after_a_load_is_said_so(tmp_path, appended):
    run_dir = tmp_path / "run"
    for rank in (0, 1):
        write_lines(run_dir / f"rollout_data_rank_{rank}.jsonl", [sample(1), sample(1)])
    path = run_dir / "rollout_data_rank_1.jsonl"
    load = (
        "import json, os\n"
        "from rl_board.reading.store import RunStore\n"
        f"store, path = RunStore({str(run_dir)!r}), {str(path)!r}\n"
        "store.load(1, parallel=False)\n"
        f"if {appended}:\n"
        "    with open(path, 'a') as file:\n"
        "        file.write(json.dumps({'prompt': 'p', 'response': 'r', 'reward': 1.0, 'step': 2}) + '\\n')\n"
        "os.chmod(path, 0)\n"
        "run = store.load(64, parallel=False)\n"
        "print(len(run.samples), run.problems[['file', 'kind', 'reason']].values.tolist())"
    )
    assert output_of_unprivileged(load, {"RL_LOGGING_BOARD_CACHE": str(tmp_path / "cache")}) == "2 [['rollout_data_rank_1.jsonl', 'skipped', 'cannot be read (Permission denied): left out, read once it can be']]"


# A file rewritten in place while a load reads its new bytes (a tool that writes its whole JSONL again each step, in
# live mode) is read anew by the next load: its identity was taken after the pass, from the new bytes, so the next
# load took the rewrite for an append, kept the old numbers and cached them (a restart showed them too).
def test_a_file_rewritten_while_it_is_read_is_read_anew_by_the_next_load(tmp_path, monkeypatch):
    path = tmp_path / "run" / "rollout_data_rank_0.jsonl"
    write_lines(path, [sample(1, reward=0.5) for _ in range(3)])
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    store = RunStore(str(path.parent))
    store.load(64, parallel=False)
    with open(path, "ab") as file:
        file.write(json.dumps(sample(2, reward=0.5)).encode() + b"\n")
    index_chunk = rl_board.reading.store.index_chunk

    def rewritten_meanwhile(*arguments):
        indexed = index_chunk(*arguments)
        write_lines(path, [sample(step, reward=0.123456789) for step in (1, 2) for _ in range(3)])
        return indexed

    monkeypatch.setattr(rl_board.reading.store, "index_chunk", rewritten_meanwhile)
    store.load(64, parallel=False)
    monkeypatch.setattr(rl_board.reading.store, "index_chunk", index_chunk)
    for shown in (store.load(64, parallel=False), RunStore(str(path.parent)).load(64, parallel=False)):
        assert shown.samples["reward"].tolist() == [0.123456789] * 6 and shown.samples["step"].tolist() == [1, 1, 1, 2, 2, 2] and shown.problems.empty


# A rank file deleted between the listing and the read of its new bytes (a launch cleaned away while the board follows
# the run): that file is said, the others shown; it failed the whole load. The next load does not list it.
# Deleted before its bytes are split into chunks (a file of more than one chunk is read for their line starts), or
# while a chunk is read.
@pytest.mark.parametrize("reading", ["line_aligned_chunks", "index_chunk"])
def test_a_rank_file_deleted_while_a_load_reads_it_leaves_the_others_shown(tmp_path, monkeypatch, reading):
    run_dir = tmp_path / "run"
    for rank in (0, 1):
        write_lines(run_dir / f"rollout_data_rank_{rank}.jsonl", [sample(1, reward=float(rank)), sample(2, reward=float(rank))])
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(rl_board.reading.workers, "CHUNK_BYTES", 16)  # files of several chunks
    read = getattr(rl_board.reading.store, reading)

    def deleted_meanwhile(path, *arguments):
        if path.endswith("rank_1.jsonl") and os.path.exists(path):
            os.remove(path)
        return read(path, *arguments)

    monkeypatch.setattr(rl_board.reading.store, reading, deleted_meanwhile)
    store = RunStore(str(run_dir))
    run = store.load(64, parallel=False)
    assert run.samples["reward"].tolist() == [0.0, 0.0]
    [[name, kind, reason]] = run.problems[["file", "kind", "reason"]].values.tolist()
    assert (name, kind) == ("rollout_data_rank_1.jsonl", "skipped") and reason.startswith("its new lines could not be read ([Errno 2] No such file or directory")
    again = store.load(64, parallel=False)
    assert again.samples["reward"].tolist() == [0.0, 0.0] and again.problems.empty


# Two rank files of 3 lines at each of steps 1 and 2 (rewards 0 and 1), loaded with 2 samples a step: each file has
# lines indexed but not parsed, which a larger selection parses.
def store_with_lines_left_to_parse(tmp_path, monkeypatch) -> RunStore:
    for rank in (0, 1):
        write_lines(tmp_path / "run" / f"rollout_data_rank_{rank}.jsonl", [sample(step, reward=float(rank)) for step in (1, 2) for _ in range(3)])
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    store = RunStore(str(tmp_path / "run"))
    assert sorted(store.load(2, parallel=False).samples["reward"].tolist()) == [0.0, 0.0, 1.0, 1.0]
    return store


def test_a_rank_file_deleted_while_a_larger_selection_parses_its_lines_leaves_the_others_shown(tmp_path, monkeypatch):
    store = store_with_lines_left_to_parse(tmp_path, monkeypatch)
    summarize_lines = rl_board.reading.store.summarize_lines

    def deleted_meanwhile(path, *arguments):
        if path.endswith("rank_1.jsonl") and os.path.exists(path):
            os.remove(path)
        return summarize_lines(path, *arguments)

    monkeypatch.setattr(rl_board.reading.store, "summarize_lines", deleted_meanwhile)
    run = store.load(64, parallel=False)
    assert run.samples["reward"].tolist() == [0.0] * 6
    [[name, kind, reason]] = run.problems[["file", "kind", "reason"]].values.tolist()
    assert (name, kind) == ("rollout_data_rank_1.jsonl", "skipped") and reason.startswith("its lines could not be read ([Errno 2] No such file or directory")
    again = store.load(64, parallel=False)
    assert again.samples["reward"].tolist() == [0.0] * 6
    [[name, kind, reason]] = again.problems[["file", "kind", "reason"]].values.tolist()
    assert (name, kind) == ("rollout_data_rank_1.jsonl", "note") and reason.startswith("gone since the run was loaded")


# A read that failed once (a network file system's error) and not again: the next load reads the file's lines, though
# nothing changed in the folder (the snapshot without them was given again). The snapshot is kept meanwhile: the page
# shows it at each rerun without loading again, until Load & View or a live refresh.
def test_lines_a_load_could_not_parse_are_read_by_the_next_though_nothing_changed(tmp_path, monkeypatch):
    store = store_with_lines_left_to_parse(tmp_path, monkeypatch)
    summarize_lines, failures = rl_board.reading.store.summarize_lines, []

    def fails_once(path, *arguments):
        if path.endswith("rank_1.jsonl") and not failures:
            failures.append(path)
            raise OSError(errno.EIO, "Input/output error")
        return summarize_lines(path, *arguments)

    monkeypatch.setattr(rl_board.reading.store, "summarize_lines", fails_once)
    run = store.load(64, parallel=False)
    assert run.samples["reward"].tolist() == [0.0] * 6 and run.problems["reason"].str.startswith("its lines could not be read ([Errno 5]").all()
    assert store.snapshots[64] is run and store.needs_work(64)
    assert len(store.load(128, parallel=False).samples) == 12 and store.needs_work(64)  # another selection read them: not this one's
    again = store.load(64, parallel=False)
    assert sorted(again.samples["reward"].tolist()) == [0.0] * 6 + [1.0] * 6 and again.problems.empty and not store.needs_work(64)


# A cache file of no rows (an empty rank file; a segment of a file that grew by half a line only) reads back as
# written: its string columns' one empty chunk is written and not read back, and its checksum held it damaged (the
# segments after it were read again at every start).
def test_an_index_cache_of_no_rows_reads_back(tmp_path):
    cache = IndexCache()
    target = str(tmp_path / "empty.arrow")
    assert cache.write(target, {"offset": np.array([], dtype=np.int64), "group_id": np.array([], dtype=object)}, {"format": 0})
    table, facts = IndexCache.read(target)
    assert table.num_rows == 0 and facts == {"format": 0}
    path = write_lines(tmp_path / "run" / "r.jsonl", [sample(1)])
    path.write_text("")
    load(tmp_path / "run")
    assert IndexCache().load(str(path)) is not None
