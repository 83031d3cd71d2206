"""The JSONL writer: valid JSON for non-finite floats, whole lines, and faults that cost one warning, not the run."""

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
    attempts = []

    class FullDisk(io.BytesIO):
        def write(self, data):
            attempts.append(data)
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(rollout_logger.writer, "open", lambda path, mode: FullDisk(), raising=False)
    warnings = []
    writer = JsonlWriter(tmp_path / "rollouts.jsonl", lambda kind, message: warnings.append((kind, message)))
    for step in range(3):
        writer.write([{"step": step}])
    writer.close()
    [(kind, message)] = warnings
    assert kind == "io" and "No space left on device" in message and len(attempts) == 1
