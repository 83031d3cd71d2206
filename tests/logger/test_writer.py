"""The JSONL writer: valid JSON for non-finite floats, whole lines, and faults that cost one warning, not the run."""

import errno
import io
import json

import pytest

import rollout_logger.writer
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
