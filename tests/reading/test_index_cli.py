"""`python -m rl_board index ROOT`: every run under a root indexed ahead of time (the worker pool, or Dask's workers),
into the cache folder a board or open_run then opens each run from without reading its files again."""

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import rl_board
import rl_board.formats.conversion
import rl_board.indexing
import rl_board.reading.index
import rl_board.reading.storage
import rl_board.reading.store
from rl_board.__main__ import DASK_MISSING, main
from rl_board.reading.index import BUNDLED_FILES, GOOD, UNPARSED, IndexCache
from rl_board.reading.store import RunStore
from rl_board.watch import watch_file
from tests.conftest import PROJECT
from tests.support.other_trainers import verl_run
from tests.support.runs import sample, write_lines
from tests.support.s3_server import make_bucket, s3_server, s3fs_filesystem, upload_folder  # noqa: F401  (s3_server: a fixture)

BAD_LINE = b'{"step": 3, "reward": \n'
NOT_UTF8_NAME = b"rank\xff.jsonl"


def write_root(root: Path) -> dict[str, list[dict]]:
    """Three runs: two rank files with a bad line; a file per step, enough for the one bundled cache file; verl's
    dumps (converted into the cache folder first), with a file whose name is not UTF-8 beside them. Returns the
    board-format runs' lines as written."""
    ranks = [[sample(step, reward=step + rank / 10 + k / 100, group_id=f"{step}-{k % 2}") for step in range(1, 7) for k in range(4)] for rank in range(2)]
    write_lines(root / "ranks" / "rollouts_rank0.jsonl", ranks[0])
    write_lines(root / "ranks" / "rollouts_rank1.jsonl", ranks[1][:5] + [BAD_LINE] + ranks[1][5:])
    per_step = {step: [sample(step, reward=step * 2 + k / 10, **({"rewards_per_func": {"f": k}} if step % 2 else {})) for k in range(3)] for step in range(1, BUNDLED_FILES + 3)}
    for step, lines in per_step.items():
        write_lines(root / "step_files" / f"{step}.jsonl", lines)
    shutil.move(str(verl_run(root.parent / "verl_output", steps=3, validation_steps=()) / "rollout"), str(root / "verl_rollout"))
    (root / "verl_rollout" / Path(NOT_UTF8_NAME.decode("utf-8", "surrogateescape"))).write_bytes(b"")
    return {"ranks": ranks[0] + ranks[1], "step_files": [line for lines in per_step.values() for line in lines]}


def count_calls(monkeypatch, name: str) -> list:
    calls, original = [], getattr(rl_board.reading.store, name)
    monkeypatch.setattr(rl_board.reading.store, name, lambda path, *args: calls.append(Path(path).name) or original(path, *args))
    return calls


def run_samples(run_dir: Path) -> pd.DataFrame:
    return rl_board.open_run(run_dir).samples.drop(columns=["file"])


def assert_runs_open_from_the_cache(root: Path, written: dict, fresh_cache: Path, monkeypatch):
    """Each run opens without one line indexed or parsed again, for any Max Samples Each Step, and gives the samples a
    fresh index gives; the board-format runs' rewards per step are those of the lines written."""
    indexed, parsed = count_calls(monkeypatch, "index_chunk"), count_calls(monkeypatch, "summarize_lines")
    opened = {run: run_samples(root / run) for run in ("ranks", "step_files", "verl_rollout")}
    for max_samples in (2, 5):
        for run in opened:
            RunStore(str(root / run)).load(max_samples, parallel=False)
    assert indexed == [] and parsed == []
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(fresh_cache))
    for run, samples in opened.items():
        fresh = run_samples(root / run)
        pd.testing.assert_frame_equal(samples.reset_index(drop=True), fresh.reset_index(drop=True))
    assert len(indexed) == 2 + BUNDLED_FILES + 2 + 3  # the fresh index did read every file: the counts can fail
    assert len(opened["verl_rollout"]) == 3 * 3 * 4  # verl_run: 3 prompts per step, n=4
    for run, lines in written.items():
        expected = pd.DataFrame(lines).groupby("step")["reward"].apply(sorted)
        assert opened[run].groupby("step")["reward"].apply(sorted).to_dict() == expected.to_dict()


def summary_rows(out: str) -> dict[str, list[str]]:
    """The summary table's rows by run: format, files, lines, bad lines, skipped files, seconds."""
    table = out.split("\nrun ")[1].split("\n")
    rows = [re.split(r"\s{2,}", row.strip()) for row in table[2:] if row.strip() and not row.startswith("-")]
    return {row[0]: row[1:] for row in rows}


def assert_summary(out: str, root: Path, written: dict):
    rows = summary_rows(out)
    assert rows[str(root / "ranks")][:5] == ["JSONL, the board's format", "2", str(len(written["ranks"]) + 1), "1", "0"]
    assert rows[str(root / "step_files")][:5] == ["JSONL, the board's format", str(BUNDLED_FILES + 2), str(len(written["step_files"])), "0", "0"]
    assert rows[str(root / "verl_rollout")][:5] == ["verl generations dump", "3", "36", "0", "1"]
    assert rows["total: 3 run(s)"][:4] == [str(2 + BUNDLED_FILES + 2 + 3), str(len(written["ranks"]) + 1 + len(written["step_files"]) + 36), "1", "1"]
    assert "skipped rank\ufffd.jsonl: the file name is not valid UTF-8" in out
    assert "\n    bad line: rollouts_rank1.jsonl line 6: not valid JSON" in out  # named, as the README says


def test_the_index_command_builds_the_caches_the_board_opens(tmp_path, monkeypatch, capsys):
    """With the worker pool: the summary counts each run's files and lines, names the bad line and the skipped file,
    and the runs then open from the cache."""
    root = tmp_path / "root"
    written = write_root(root)
    cache = tmp_path / "built_cache"
    assert main(["index", str(root), "--cache", str(cache)]) == 0
    out = capsys.readouterr().out
    assert f"into {cache}, on this machine's worker pool" in out and out.count(f"/3] {root}") == 3
    assert_summary(out, root, written)
    assert_runs_open_from_the_cache(root, written, tmp_path / "fresh_cache", monkeypatch)


@pytest.mark.parametrize("cache_in_a_bucket", [False, True], ids=["cache folder", "cache in a bucket"])
def test_the_index_command_runs_its_tasks_on_dask(tmp_path, monkeypatch, capsys, request, cache_in_a_bucket):
    """--dask local: a LocalCluster's worker processes index the board-format runs; verl's conversions, made in this
    process's cache folder, are indexed on the worker pool, or on Dask's workers too when the cache is in a bucket
    (which they can read); the caches are the same as the pool's."""
    pytest.importorskip("distributed")
    root = tmp_path / "root"
    written = write_root(root)
    if cache_in_a_bucket:
        endpoint = request.getfixturevalue("s3_server").endpoint_url
        monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", f"s3://{make_bucket(endpoint, 'index-cache-dask')}/cache")
    workers = {}

    class RecordingStore(RunStore):
        def load(self, max_samples, *args, parallel=None, **kwargs):
            workers[Path(self.run_dir).name] = parallel
            return super().load(max_samples, *args, parallel=parallel, **kwargs)

    monkeypatch.setattr(rl_board.indexing, "RunStore", RecordingStore)
    assert main(["index", str(root), "--dask", "local"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"on Dask at tcp://127\.0\.0\.1:\d+ \(\d+ workers\)", out)
    assert [type(workers[run]).__name__ for run in ("ranks", "step_files")] == ["ClientExecutor"] * 2
    assert type(workers["verl_rollout"]).__name__ == "ClientExecutor" if cache_in_a_bucket else workers["verl_rollout"] is True
    assert_summary(out, root, written)
    assert_runs_open_from_the_cache(root, written, tmp_path / "fresh_cache", monkeypatch)


def test_without_dask_the_pool_indexes_and_dask_is_asked_for_by_name(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed: importing it raises ImportError
    write_lines(tmp_path / "root" / "run" / "r.jsonl", [sample(1), sample(2)])
    assert main(["index", str(tmp_path / "root"), "--dask", "local"]) == 2  # before indexing anything (1: a run failed)
    assert capsys.readouterr().err.strip() == DASK_MISSING
    assert main(["index", str(tmp_path / "root")]) == 0
    assert summary_rows(capsys.readouterr().out)[str(tmp_path / "root" / "run")][:5] == ["JSONL, the board's format", "1", "2", "0", "0"]


def test_a_cache_the_board_left_partly_parsed_is_completed(tmp_path, monkeypatch, capsys):
    """The board parses a step's first Max Samples Each Step lines; the command parses the rest into the same cache."""
    run = tmp_path / "root" / "run"
    path = write_lines(run / "r.jsonl", [sample(step, reward=step + k) for step in (1, 2) for k in range(5)])
    RunStore(str(run)).load(2, parallel=False)
    assert list(IndexCache().load(str(path)).lines["status"]) == [GOOD] * 2 + [UNPARSED] * 3 + [GOOD] * 2 + [UNPARSED] * 3
    assert main(["index", str(tmp_path / "root")]) == 0
    assert list(IndexCache().load(str(path)).lines["status"]) == [GOOD] * 10
    parsed = count_calls(monkeypatch, "summarize_lines")
    assert sorted(run_samples(run)["reward"]) == sorted(step + k for step in (1, 2) for k in range(5)) and parsed == []


@pytest.mark.slow
def test_a_bucket_is_indexed_by_dask_workers_and_opens_from_the_cache(tmp_path, monkeypatch, capsys, s3_server):  # noqa: F811
    """The runs of an s3:// root, read by a LocalCluster's workers (the credentials and endpoint theirs by the
    environment), open from the cache folder without a request for their lines."""
    pytest.importorskip("distributed")
    written = {"a": [sample(step, reward=step / 4 + k) for step in range(1, 5) for k in range(3)], "b": [sample(step, reward=-step - k) for step in range(1, 3) for k in range(4)]}
    for run, lines in written.items():
        for rank in range(2):
            write_lines(tmp_path / "root" / run / f"rollouts_rank{rank}.jsonl", lines[rank::2])
    root = f"s3://{make_bucket(s3_server.endpoint_url, 'index-cli')}/runs"
    upload_folder(s3_server.endpoint_url, tmp_path / "root", root)
    assert main(["index", root, "--dask", "local"]) == 0
    assert summary_rows(capsys.readouterr().out)["total: 2 run(s)"][:2] == ["4", str(sum(map(len, written.values())))]
    indexed, parsed = count_calls(monkeypatch, "index_chunk"), count_calls(monkeypatch, "summarize_lines")
    for run, lines in written.items():
        assert sorted(rl_board.open_run(f"{root}/{run}").samples["reward"]) == sorted(line["reward"] for line in lines)
    assert indexed == [] and parsed == []


def test_a_root_that_cannot_be_listed_is_named(tmp_path, capsys):
    assert main(["index", str(tmp_path / "missing")]) == 2
    assert f"{tmp_path / 'missing'} could not be listed" in capsys.readouterr().err
    in_a_subprocess = subprocess.run([sys.executable, "-m", "rl_board", "index", str(tmp_path / "missing")], cwd=PROJECT, capture_output=True, text=True)
    assert in_a_subprocess.returncode == 2 and f"{tmp_path / 'missing'} could not be listed" in in_a_subprocess.stderr


def test_a_cache_that_cannot_be_written_is_named_before_anything_is_indexed(tmp_path, monkeypatch, capsys, s3_server):  # noqa: F811
    write_lines(tmp_path / "root" / "run" / "r.jsonl", [sample(1), sample(2)])
    indexed = count_calls(monkeypatch, "index_chunk")
    (tmp_path / "a_file").write_text("")
    for cache in (str(tmp_path / "a_file" / "cache"), "s3://no-such-bucket-for-the-index/cache"):
        assert main(["index", str(tmp_path / "root"), "--cache", cache]) == 2
        assert capsys.readouterr().err.startswith(f"the cache {cache} cannot be written: ")
    assert indexed == []
    assert main(["index", str(tmp_path / "root"), "--cache", str(tmp_path / "cache")]) == 0
    assert [path.name for path in (tmp_path / "cache").iterdir()] == [Path(IndexCache().path_of(str(tmp_path / "root" / "run" / "r.jsonl"))).name]  # the check leaves nothing


def record_writes(monkeypatch) -> list[str]:
    """The paths the cache and the conversions write (every write of either goes through storage.write_file)."""
    writes, original = [], rl_board.reading.storage.write_file
    for module in (rl_board.reading.index, rl_board.formats.conversion):
        monkeypatch.setattr(module, "write_file", lambda path, data: writes.append(path) or original(path, data))
    return writes


def test_the_index_command_builds_the_caches_in_a_bucket_prefix(tmp_path, monkeypatch, capsys, s3_server, private_index_cache):  # noqa: F811
    """--cache s3://bucket/prefix: the indexes and verl's conversions are written there; a board or open_run whose
    RL_LOGGING_BOARD_CACHE is that prefix opens every run from it without indexing, converting or writing anything,
    and keeps its own files (training-history copies, watch patterns) in the default folder here."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home_cache"))
    root = tmp_path / "root"
    written = write_root(root)
    cache = f"s3://{make_bucket(s3_server.endpoint_url, 'index-cache-prefix')}/boards/cache"
    assert main(["index", str(root), "--cache", cache]) == 0
    out = capsys.readouterr().out
    assert f"into {cache}, on this machine's worker pool" in out
    assert_summary(out, root, written)
    keys = [key.split("/boards/cache/", 1)[1] for key in s3fs_filesystem(s3_server.endpoint_url).find(cache.removeprefix("s3://"))]
    converted = [key for key in keys if key.startswith("converted/")]
    assert len([key for key in converted if key.endswith(".jsonl")]) == 3 and len([key for key in converted if key.endswith(".source")]) == 3
    assert len([key for key in keys if key.startswith("run-")]) == 1 and len([key for key in keys if re.fullmatch(r"[0-9a-f]{20}\.arrow", key)]) == 2 + 3
    assert not private_index_cache.exists()
    writes = record_writes(monkeypatch)
    assert_runs_open_from_the_cache(root, written, tmp_path / "fresh_cache", monkeypatch)
    assert [path for path in writes if path.startswith("s3://")] == [] and any(path.startswith(str(tmp_path / "fresh_cache")) for path in writes)
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", cache)
    assert IndexCache().local_folder == tmp_path / "home_cache" / "rl_logging_board" and watch_file().parent == IndexCache().local_folder


def test_a_cache_prefix_that_cannot_be_written_costs_speed_never_data(tmp_path, monkeypatch, s3_server):  # noqa: F811
    """A missing bucket: the run opens from its files, and the load says the cache was not written and why."""
    write_lines(tmp_path / "run" / "r.jsonl", [sample(step, reward=step + k) for step in (1, 2) for k in range(3)])
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", "s3://no-such-bucket-for-the-cache/cache")
    store = RunStore(str(tmp_path / "run"))
    snapshot = store.load(8, parallel=False)
    assert sorted(snapshot.samples["reward"]) == sorted(step + k for step in (1, 2) for k in range(3))
    assert store.cache.error.startswith("index cache not written to s3://no-such-bucket-for-the-cache/cache: ") and "not found" in store.cache.error
    assert ["", 0, "note", store.cache.error] in snapshot.problems.values.tolist()  # the load report's


def test_other_trainers_files_need_a_cache_that_can_be_written_and_are_read_once_it_can(tmp_path, monkeypatch, s3_server):  # noqa: F811
    """verl's dumps are read from their conversions: with the cache's bucket missing, each file is skipped with why in
    the load report; once the bucket is there, the next load converts and shows them."""
    run = verl_run(tmp_path / "verl_output", steps=2, validation_steps=()) / "rollout"
    bucket = "cache-made-later"
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", f"s3://{bucket}/cache")
    store = RunStore(str(run))
    snapshot = store.load(64, parallel=False)
    skipped = snapshot.problems[snapshot.problems["kind"] == "skipped"]
    assert snapshot.samples.empty and sorted(skipped["file"]) == ["1.jsonl", "2.jsonl"]
    assert all(reason.startswith(f"its conversion could not be written to the cache, s3://{bucket}/cache/converted/") and "not found" in reason for reason in skipped["reason"])
    make_bucket(s3_server.endpoint_url, bucket)
    snapshot = store.load(64, parallel=False)
    assert len(snapshot.samples) == 2 * 3 * 4 and (snapshot.problems["kind"] != "skipped").all()  # verl_run: 3 prompts a step, n=4


def test_a_run_of_other_trainers_files_whose_conversions_cannot_be_written_is_not_indexed(tmp_path, monkeypatch, capsys):
    """The cache takes the index files but not the conversions (its converted/ is a file here; a full disk is alike):
    verl's run is counted as not indexed, with why, and the command fails (it said 0 files and exited 0)."""
    root = tmp_path / "root"
    shutil.move(str(verl_run(tmp_path / "verl_output", steps=2, validation_steps=()) / "rollout"), str(root / "verl_rollout"))
    write_lines(root / "ranks" / "rollouts_rank0.jsonl", [sample(step) for step in (1, 2)])
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "converted").write_text("not a folder")
    assert main(["index", str(root), "--cache", str(cache)]) == 1
    out = capsys.readouterr().out
    assert "1 not indexed" in out and "conversions not written" in out
    store = RunStore(str(root / "verl_rollout"))  # the page's: once the cache takes them, nothing of it is left
    assert store.load(64, parallel=False).samples.empty and store.unwritten_conversions
    (cache / "converted").unlink()
    snapshot = store.load(64, parallel=False)
    assert len(snapshot.samples) and not store.unwritten_conversions and not snapshot.problems["reason"].str.contains("not written").any()


# A disk of 64 KiB, filled: a mount of tmpfs, which takes root. Its path while the test runs.
@pytest.fixture
def full_disk(tmp_path):
    disk = tmp_path / "full"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs takes root")
    try:
        subprocess.run(["dd", "if=/dev/zero", f"of={disk / 'filler'}", "bs=4k", "count=100"], capture_output=True)
        (disk / "cache").mkdir()
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_cache_on_a_full_disk_is_named_before_anything_is_indexed(tmp_path, full_disk, capsys):
    """An empty file can still be written on a full disk: the check writes some bytes."""
    write_lines(tmp_path / "root" / "run" / "rollouts_rank0.jsonl", [sample(1)])
    assert main(["index", str(tmp_path / "root"), "--cache", str(full_disk / "cache")]) == 2
    assert "cannot be written" in capsys.readouterr().err


def test_ctrl_c_stops_says_what_is_kept_and_a_rerun_indexes_the_rest(tmp_path):
    """Ctrl-C stops the command: the runs not started are not indexed (it went on with every one, silently)."""
    runs = 300
    for number in range(runs):
        write_lines(tmp_path / "root" / f"run{number:03d}" / "rollouts_rank0.jsonl", [sample(step) for step in range(1, 200)])
    env = {**os.environ, "RL_LOGGING_BOARD_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(PROJECT)}
    command = [sys.executable, "-m", "rl_board", "index", str(tmp_path / "root")]
    indexing = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert indexing.stdout.readline().startswith(f"Indexing {runs} run(s)") and indexing.stdout.readline().startswith(f"[1/{runs}]")
    indexing.send_signal(signal.SIGINT)
    out, err = indexing.communicate(timeout=60)
    done = 1 + out.count(f"/{runs}] ")
    assert indexing.returncode == 130 and "Traceback" not in err
    assert err.strip() == f"interrupted after {done} of {runs} run(s), which are cached: run the command again to index the rest"
    assert len(list((tmp_path / "cache").glob("*.arrow"))) < runs // 2  # stopped: far from every run indexed
    rerun = subprocess.run(command, env=env, capture_output=True, text=True)
    assert rerun.returncode == 0 and f"total: {runs} run(s)" in rerun.stdout
