"""The JSONL writer: valid JSON for non-finite floats, whole lines, and faults that cost one warning, not the run."""

import errno
import importlib.abc
import io
import json
import struct
import sys
import threading
import time

import pytest

import rl_board.reading.summaries
import rl_board.reading.workers
import rollout_logger.writer
from rl_board.reading.store import RunStore
from rollout_logger.metadata import SUMMARIES_MAGIC, SUMMARIES_SUFFIX
from rollout_logger.writer import JsonlWriter, json_line


def strict_json(line: bytes):
    """Parses like a strict reader: NaN and Infinity are not JSON."""

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(line, parse_constant=refuse)


@pytest.fixture(params=["orjson", "json"])
def encoder(request, monkeypatch):
    if request.param == "json":
        monkeypatch.setattr(rollout_logger.writer, "orjson", None)
    elif rollout_logger.writer.orjson is None:
        pytest.skip("orjson is not installed")
    return request.param


def test_non_finite_floats_are_written_as_null(encoder):
    record = {
        "reward": float("nan"),
        "logprobs": [-0.5, float("-inf"), float("inf")],
        "rewards_per_func": {"f": float("nan")},
        "prompt": '押韵 "quoted"\n',
        "step": 3,
    }
    line = json_line(record)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert strict_json(line) == {
        "reward": None,
        "logprobs": [-0.5, None, None],
        "rewards_per_func": {"f": None},
        "prompt": '押韵 "quoted"\n',
        "step": 3,
    }


def test_batches_become_whole_lines(tmp_path, encoder):
    warnings = []
    writer = JsonlWriter(tmp_path / "rollouts.jsonl", lambda kind, message: warnings.append(kind))
    writer.write([{"step": 1, "response": "a"}, {"step": 1, "response": "b"}])
    writer.write([])
    writer.write([{"step": 2, "response": "c"}])
    writer.close()
    lines = (tmp_path / "rollouts.jsonl").read_bytes().splitlines(keepends=True)
    assert [strict_json(line)["response"] for line in lines] == ["a", "b", "c"] and all(
        line.endswith(b"\n") for line in lines
    )
    assert warnings == []


def test_a_record_that_is_not_json_is_skipped(tmp_path, encoder):
    warnings = []
    writer = JsonlWriter(tmp_path / "rollouts.jsonl", lambda kind, message: warnings.append((kind, message)))
    writer.write([{"step": 1}, {"step": object()}, {"step": 2}])
    writer.close()
    assert [strict_json(line)["step"] for line in (tmp_path / "rollouts.jsonl").read_bytes().splitlines()] == [1, 2]
    [(kind, message)] = warnings
    assert kind == "serialize" and "skipped" in message


def test_an_io_error_is_reported_once_and_stops_writing(tmp_path, monkeypatch):
    attempts, serialised = [], []

    class FullDisk(io.BytesIO):
        def write(self, data):
            attempts.append(data)
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rollout_logger.writer, "open", lambda *args, **kwargs: FullDisk(), raising=False)
    monkeypatch.setattr(rollout_logger.writer, "json_line", lambda record: serialised.append(record) or b"{}\n")
    warnings = []
    writer = JsonlWriter(tmp_path / "rollouts.jsonl", lambda kind, message: warnings.append((kind, message)))
    for step in range(3):
        writer.write([{"step": step}])
    writer.close()
    [(kind, message)] = warnings
    assert kind == "io" and "No space left on device" in message and len(attempts) == 1
    assert serialised == [{"step": 0}] and writer.failed  # the later batches are not even serialised


class NearlyFullDisk(io.FileIO):
    """A file on a disk with room for `ROOM` bytes: a write that does not fit writes what fits, then, as the kernel
    does, returns the short count (the next write raises), or, as a buffered file may, raises at once."""

    ROOM = 60
    raise_at_once = False

    def write(self, data):
        room = self.ROOM - self.seek(0, io.SEEK_END)
        if room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        written = super().write(bytes(data[:room]))
        if written < len(data) and self.raise_at_once:
            raise OSError(errno.ENOSPC, "No space left on device")
        return written


@pytest.mark.parametrize("raise_at_once", [False, True])
def test_a_batch_a_full_disk_cuts_short_is_not_written(tmp_path, monkeypatch, raise_at_once):
    monkeypatch.setattr(NearlyFullDisk, "raise_at_once", raise_at_once)
    monkeypatch.setattr(
        rollout_logger.writer, "open", lambda path, mode, **kwargs: NearlyFullDisk(path, mode), raising=False
    )
    warnings = []
    writer = JsonlWriter(tmp_path / "rollouts.jsonl", lambda kind, message: warnings.append(kind))
    writer.write([{"step": 1, "response": "a"}, {"step": 1, "response": "b"}])  # fits
    writer.write([{"step": 2, "response": "c"}, {"step": 2, "response": "d"}])  # a few bytes fit
    writer.write([{"step": 3, "response": "e"}])
    writer.close()
    data = (tmp_path / "rollouts.jsonl").read_bytes()
    assert [strict_json(line)["response"] for line in data.splitlines()] == ["a", "b"] and data.endswith(b"\n")
    assert warnings == ["io"] and writer.failed


# ---------------------------------------------------------------- the summaries file


def summarized_run(tmp_path, batches, **writer_options):
    """A rank file written by the writer with its summaries file; (warnings, the file, its summaries file)."""
    warnings = []
    path = tmp_path / "run" / "rollout_data_rank_0_20250101T000000Z.jsonl"
    path.parent.mkdir(exist_ok=True)
    summaries = path.with_name(path.name + SUMMARIES_SUFFIX)
    writer = JsonlWriter(path, lambda kind, message: warnings.append((kind, message)), summaries=summaries, **writer_options)
    for step, batch in enumerate(batches):
        writer.write([{"prompt": f"p{step}", "response": "r" * (i + 1), "reward": i / 2, "logprobs": [-0.5] * (i + 1), "ref_logprobs": [-0.25] * (i + 1), "step": step} for i in range(batch)])
    writer.close()
    return warnings, path, summaries


def opened(run_dir, monkeypatch, cache):
    """The run opened with an empty index cache, and the lines parsed on the way (not from a summaries file)."""
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(cache))
    parsed, summarize = [], rl_board.reading.workers.summarize_buffer
    monkeypatch.setattr(rl_board.reading.workers, "summarize_buffer", lambda data, base, offsets, lengths: parsed.append(len(offsets)) or summarize(data, base, offsets, lengths))
    snapshot = RunStore(str(run_dir)).load(1 << 30, parallel=False)
    monkeypatch.setattr(rl_board.reading.workers, "summarize_buffer", summarize)
    return snapshot, sum(parsed)


def test_the_summaries_file_has_a_record_per_batch_and_gives_the_lines_numbers(tmp_path, monkeypatch):
    warnings, path, summaries = summarized_run(tmp_path, [3, 0, 2, 4])
    assert warnings == []
    data = summaries.read_bytes()
    assert data.startswith(SUMMARIES_MAGIC)
    lengths, position = [], len(SUMMARIES_MAGIC)
    while position < len(data):
        lengths.append(struct.unpack_from("<I", data, position)[0])
        position += 8 + lengths[-1]
    assert position == len(data) and len(lengths) == 1 + 3  # the header, then a record per batch written
    snapshot, parsed = opened(path.parent, monkeypatch, tmp_path / "cache")
    assert parsed == 0 and snapshot.problems.empty
    lines = [json.loads(line) for line in path.read_bytes().splitlines()]
    samples = snapshot.samples.sort_values("offset")
    assert samples["reward"].tolist() == [line["reward"] for line in lines]
    assert samples["avg_kl_k1"].tolist() == [0.25 - 0.5] * len(lines)  # r = logp - ref_logp = -0.25 on every token


def test_a_file_not_started_empty_gets_no_summaries_file(tmp_path):
    path = tmp_path / "rollout_data_rank_0_x.jsonl"
    path.write_bytes(b'{"prompt": "p", "response": "r", "step": 0}\n')
    writer = JsonlWriter(path, lambda kind, message: pytest.fail(message), summaries=tmp_path / "s")
    writer.write([{"prompt": "p", "response": "r", "step": 1}])
    writer.close()
    assert not (tmp_path / "s").exists() and path.read_bytes().count(b"\n") == 2


def test_a_failed_summary_stops_the_summaries_alone_and_the_board_reads_on(tmp_path, monkeypatch):
    calls = []
    record_of = rl_board.reading.summaries.batch_record

    def fails_second(data, base, texts_base):
        calls.append(base)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return record_of(data, base, texts_base)

    monkeypatch.setattr(rl_board.reading.summaries, "batch_record", fails_second)
    warnings, path, summaries = summarized_run(tmp_path, [3, 2, 4])
    [(kind, message)] = warnings
    assert kind == "summaries" and "No space left on device" in message and len(calls) == 2
    assert path.read_bytes().count(b"\n") == 9  # every line written
    snapshot, parsed = opened(path.parent, monkeypatch, tmp_path / "cache")
    assert parsed == 6 and len(snapshot.samples) == 9 and snapshot.problems.empty  # the first batch from its summaries


def test_without_the_boards_reading_layer_the_lines_are_written_without_summaries(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "rl_board.reading.summaries", None)  # msgspec or pysimdjson not installed
    warnings, path, summaries = summarized_run(tmp_path, [2, 2])
    [(kind, message)] = warnings
    assert kind == "summaries" and "the board parses the lines" in message
    assert not summaries.exists() and path.read_bytes().count(b"\n") == 4


# The board's reading layer failing to load with another error than ImportError (a numpy built for another ABI: "dtype
# size changed", a ValueError) killed the writing thread: one batch written, every later one queued until the end and
# then lost. It is one warning now, and the lines are written without summaries.
def test_a_reading_layer_that_fails_to_load_leaves_the_lines_written(tmp_path, monkeypatch):
    class Broken(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "rl_board.reading.summaries":
                raise ValueError("numpy.dtype size changed, may indicate binary incompatibility")

    monkeypatch.delitem(sys.modules, "rl_board.reading.summaries")
    monkeypatch.delattr(rl_board.reading, "summaries")
    monkeypatch.setattr(sys, "meta_path", [Broken(), *sys.meta_path])
    warnings, path, summaries = summarized_run(tmp_path, [2, 3, 4])
    assert [kind for kind, _ in warnings] == ["summaries"] and "dtype size changed" in warnings[0][1]
    assert not summaries.exists() and path.read_bytes().count(b"\n") == 9


# orjson refuses an integer beyond 64 bits (an id from uuid4().int), a lone surrogate (a file name os.listdir decoded)
# and nesting past 254: such a log_extra value lost its sample's line (all the lines of a column of big ids). The
# standard library writes them; a lone surrogate as its escape, which the board reads.
def test_values_orjson_refuses_are_written_the_standard_library_s_way(encoder):
    deep = [0]
    for _ in range(300):
        deep = [deep]
    record = {"step": 1, "big_id": 2**64 + 7, "file": "photo_\udcff.png", "deep": deep, "reward": float("nan")}
    parsed = strict_json(json_line(record))
    assert parsed["big_id"] == 2**64 + 7 and parsed["file"] == "photo_\udcff.png" and parsed["reward"] is None
    assert json.dumps(parsed["deep"]) == json.dumps(deep)


# The writing thread lowers its priority by WRITER_NICENESS from where it starts: set to 10, it rose above a training
# started at a niceness of 15.
def test_the_writing_thread_yields_from_the_training_s_priority(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(rollout_logger.writer.os, "getpriority", lambda which, who: 15)
    monkeypatch.setattr(rollout_logger.writer.os, "setpriority", lambda which, who, value: seen.append(value))
    JsonlWriter(tmp_path / "rollouts.jsonl", lambda kind, message: None).close()
    assert seen == [19]


# A rank file deleted while training writes (its run folder removed) took every later line unseen, without a word: it
# is an I/O error now, one warning, and the writing stops.
def test_a_rank_file_deleted_while_writing_is_one_warning(tmp_path):
    warnings = []
    writer = JsonlWriter(tmp_path / "rollouts.jsonl", lambda kind, message: warnings.append((kind, message)))
    writer.write([{"step": 1}])
    while (tmp_path / "rollouts.jsonl").stat().st_size == 0:
        time.sleep(0.01)
    (tmp_path / "rollouts.jsonl").unlink()
    writer.write([{"step": 2}])
    writer.close()
    [(kind, message)] = warnings
    assert kind == "io" and "deleted" in message and writer.failed


# A disk that hangs (a network mount) held the end of training for as long as it hung: close() leaves a writer that has
# finished no batch for STALLED_SECONDS, with a warning naming what is not written.
def test_closing_leaves_a_writer_that_finishes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(rollout_logger.writer, "STALLED_SECONDS", 0.3)
    hung = threading.Event()
    monkeypatch.setattr(rollout_logger.writer, "_write_whole", lambda file, data: hung.wait(30))
    warnings = []
    writer = JsonlWriter(tmp_path / "rollouts.jsonl", lambda kind, message: warnings.append((kind, message)))
    for step in range(3):
        writer.write([{"step": step}])
    began = time.perf_counter()
    writer.close()
    assert time.perf_counter() - began < 5 and [kind for kind, _ in warnings] == ["stalled"] and "the batch being written, and the 2 after it, are left" in warnings[0][1]
    hung.set()
