"""The logger's summaries files (rl_board/reading/summaries.py): a run opened from them has the numbers a parse of its
lines gives, every KL estimator recomputed here from the JSONL lines with numpy; a summaries file that disagrees with
its rank file (damaged, edited, stale, another version's) is not used, with a note; one cut short, or a rank file
grown past it, is read on from the lines. A step's texts come from the texts file beside them, and equal the lines'."""

import json
import os
import shutil
import struct
import uuid
import zlib
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd
import pytest

import rl_board.reading.lines
import rl_board.reading.search
import rl_board.reading.snapshot
import rl_board.reading.summaries
import rl_board.reading.workers
from rl_board.reading.lines import FIELD_COLUMNS, TEXTS_DECODER, decode_line
from rl_board.reading.search import TEXT_SPAN_COLUMNS, RunTexts, read_texts, search_pattern, search_samples
from rl_board.reading.snapshot import read_step_batch
from rl_board.reading.storage import remote_storage
from rl_board.reading.store import RunStore
from rollout_logger.metadata import SUMMARIES_MAGIC, SUMMARIES_SUFFIX, TEXTS_SUFFIX
from rollout_logger.writer import JsonlWriter
from tests.support.s3_server import append_object, make_bucket, s3_server, upload_folder  # noqa: F401  (s3_server: a fixture)

RANK_FILES = ("rollout_data_rank_0_20250101T000000Z.jsonl", "rollout_data_rank_1_20250101T000000Z.jsonl")
STEPS, PER_STEP = 6, 5


# A logger's line with everything the first pass summarizes: per-token lists (some with a tool's tokens), reward
# functions, fields outside the format, loss passes, turns, a policy version, a stop reason, a missing reward.
def logger_record(rng, rank: int, step: int, sample: int) -> dict:
    tokens = int(rng.integers(3, 12))
    logprobs = -rng.exponential(1.0, tokens)
    record = {
        "prompt": f"question {step}-{sample // 2} 押韵",
        "response": " ".join(f"w{i}" for i in range(tokens)),
        "response_tokens": [f"w{i}" for i in range(tokens)],
        "logprobs": logprobs.tolist(),
        "sampler_logprobs": (logprobs + rng.normal(0, 0.05, tokens)).tolist(),
        "is_ratio": rng.uniform(0.5, 1.5, tokens).tolist(),
        "ref_logprobs": (logprobs + rng.normal(0, 0.3, tokens)).tolist(),
        "entropies": rng.gamma(2.0, 0.5, tokens).tolist(),
        "reward": None if sample == 3 else float(rng.random()),
        "rewards_per_func": {"accuracy": float(rng.random() < 0.5), "format": float(rng.random())},
        "advantage": float(rng.normal()),
        "group_id": f"{step}-{rank}-{sample // 2}",
        "truncated": bool(sample % 2),
        "rank": rank,
        "step": step,
        "micro_batch": sample % 2,
        "data_source": ["gsm8k", "math"][sample % 2],
        "difficulty": sample,
    }
    if sample == 1:
        record["tool_mask"] = [int(i % 3 != 1) for i in range(tokens)]
        record["turns"] = [
            {"role": "assistant", "text": "call", "tool_calls": [{"name": "f", "arguments": {}, "id": "1"}]},
            {"role": "tool", "text": "failed", "tool_name": "f", "error": "boom"},
        ]
        record["stop_reason"] = "tool_limit"
    if sample == 2:
        record["loss_passes"] = [{"step": step, "micro_batch": 0, "policy_ratio": [1.0] * tokens, "clipped": [0] * (tokens - 1) + [1], "update_weight": rng.normal(0, 1, tokens).tolist()}]
        record["policy_version"] = max(step - 1, 0)
    return record


# A run written by the logger's writer, a batch per step and rank, with its summaries files.
def logger_run(folder: Path, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    for rank, name in enumerate(RANK_FILES):
        writer = JsonlWriter(folder / name, lambda kind, message: pytest.fail(message), summaries=folder / (name + SUMMARIES_SUFFIX))
        for step in range(STEPS):
            writer.write([logger_record(rng, rank, step, sample) for sample in range(PER_STEP)])
        writer.close()
    return folder


def without_summaries(run: Path, folder: Path) -> Path:
    folder.mkdir()
    for name in RANK_FILES:
        shutil.copyfile(run / name, folder / name)
    return folder


# Open a run with an empty index cache (a first open), counting the lines parsed on the way.
def first_open(run: Path, monkeypatch, tmp_path):
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / f"cache-{len(os.listdir(tmp_path))}"))
    parsed = []
    summarize = rl_board.reading.workers.summarize_buffer

    def counted(data, base, offsets, lengths):
        parsed.append(len(offsets))
        return summarize(data, base, offsets, lengths)

    with monkeypatch.context() as patch:
        patch.setattr(rl_board.reading.workers, "summarize_buffer", counted)
        snapshot = RunStore(str(run)).load(1 << 30, parallel=False)
    return snapshot, sum(parsed)


def numbers(snapshot) -> pd.DataFrame:
    samples = snapshot.samples.drop(columns=["path", "index_id", "texts_offset", "texts_length"])  # where, not what
    return samples.sort_values(["step", "group_id", "offset"]).reset_index(drop=True)


def notes(snapshot) -> list[str]:
    return [reason for reason in snapshot.problems["reason"] if "summaries" in reason]


@pytest.fixture
def run(tmp_path):
    return logger_run(tmp_path / "run")


@pytest.fixture
def parsed(run, tmp_path, monkeypatch):
    """The same rank files without summaries, opened: every line parsed."""
    snapshot, count = first_open(without_summaries(run, tmp_path / "plain"), monkeypatch, tmp_path)
    assert count == len(RANK_FILES) * STEPS * PER_STEP and not notes(snapshot)
    return numbers(snapshot)


def test_numbers_from_summaries_are_those_of_the_lines(run, parsed, tmp_path, monkeypatch):
    snapshot, count = first_open(run, monkeypatch, tmp_path)
    assert count == 0 and snapshot.problems.empty  # not a line parsed (but the spot checks), nothing to report
    pd.testing.assert_frame_equal(numbers(snapshot), parsed, check_exact=True)
    for column in ["rewards/accuracy", "extra/difficulty", "text/data_source", "text/stop_reason", "loss_passes", "clipped_tokens", "tool_errors", "staleness", "avg_mismatch_kl", "avg_applied_is_ratio", "tool_tokens"]:
        assert parsed[column].notna().any(), column  # each kind of summary is there to compare


# A key per line (an id used as the key) and a reward function per line, in a run the logger writes: its summaries
# give what a parse of its lines gives (a file's first FIELD_COLUMNS names with every value of each, the note on the
# rest), where a batch of the logger has more names than that, and where a name the file keeps comes again after
# hundreds of others. The records of a file, read together, have columns of their first FIELD_COLUMNS names only: they
# had a column as long as all their lines of every name (16,000 such lines: 2.3 GB and 9.7 s to open; parsed, 0.4 GB).
def test_summaries_of_a_key_per_line_give_what_a_parse_gives(tmp_path, monkeypatch):
    run, name = tmp_path / "run", RANK_FILES[0]
    run.mkdir()
    writer = JsonlWriter(run / name, lambda kind, message: pytest.fail(message), summaries=run / (name + SUMMARIES_SUFFIX))
    row = 0
    for step, lines in enumerate([200] + [32] * 12):  # a first batch of 400 names
        batch = []
        for _ in range(lines):
            line = {"prompt": "p", "response": "r", "reward": 1.0, "step": step, "rewards_per_func": {f"f{row}": row / 2}, f"id{row}": row}
            if row < 20 or row >= 400:
                line[f"early{row % 20}"] = f"e{row}"  # kept: among the file's first names
            batch.append(line)
            row += 1
        writer.write(batch)
    writer.close()
    raw = (run / (name + SUMMARIES_SUFFIX)).read_bytes()
    chunks, _ = rl_board.reading.summaries.read_summaries(raw, name, (run / name).stat().st_size)
    assert len(chunks[0].summary.fields) == FIELD_COLUMNS and len(chunks[0].summary.more_fields) == 2 * row + 20 - FIELD_COLUMNS
    summarized, count = first_open(run, monkeypatch, tmp_path)
    (tmp_path / "plain").mkdir()
    shutil.copyfile(run / name, tmp_path / "plain" / name)
    plain, _ = first_open(tmp_path / "plain", monkeypatch, tmp_path)
    assert count == 0 and not notes(summarized)
    pd.testing.assert_frame_equal(numbers(summarized), numbers(plain), check_exact=True)
    assert summarized.samples["text/early3"].dropna().tolist() == ["e3"] + [f"e{later}" for later in range(403, row, 20)]
    assert summarized.problems.to_dict("records") == plain.problems.to_dict("records") == [{
        "file": name, "line": 119, "kind": "note",  # lines 0 to 19 have 3 names, the next 98 two
        "reason": f"{2 * (row - 118):,} values of keys outside the format in the lines read are not in the tables: the file has columns "
        f"(rewards/, extra/, text/) for the first {FIELD_COLUMNS} names it holds, and rewards/f118 came later (an id used as a key?); a sample's view "
        "shows every key of its line",
    }]


def test_every_kl_estimator_from_summaries_is_recomputed_from_the_lines(run, tmp_path, monkeypatch):
    snapshot, _ = first_open(run, monkeypatch, tmp_path)
    samples = snapshot.samples.set_index(["step", "offset", "path"]).sort_index()
    estimators = {"kl": lambda r: np.exp(r) - 1 - r, "k1": lambda r: r, "k2": lambda r: r**2 / 2, "k3": lambda r: np.exp(-r) + r - 1}
    checked = 0
    for name in RANK_FILES:
        offset = 0
        for line in (run / name).read_bytes().splitlines(keepends=True):
            record = json.loads(line)
            keep = np.array(record.get("tool_mask", [1] * len(record["logprobs"]))) == 1  # a tool's tokens have no KL
            log_ratio = (np.array(record["logprobs"]) - np.array(record["ref_logprobs"]))[keep]
            row = samples.loc[(record["step"], offset, str(run / name))]
            for estimator, function in estimators.items():
                assert row[f"sum_kl_{estimator}"] == pytest.approx(function(log_ratio).sum(), rel=1e-12, abs=1e-15)
                assert row[f"avg_kl_{estimator}"] == pytest.approx(function(log_ratio).mean(), rel=1e-12, abs=1e-15)
            assert row["avg_entropy"] == pytest.approx(np.array(record["entropies"])[keep].mean(), rel=1e-12)
            assert row["response_tokens_len"] == len(record["response_tokens"])
            offset += len(line)
            checked += 1
    assert checked == len(samples) == len(RANK_FILES) * STEPS * PER_STEP


def rewrite_records(path: Path, change):
    """The summaries file with change(index, payload) applied to each record's decoded payload, CRCs made right."""
    data = path.read_bytes()
    out, position, index = [data[: len(SUMMARIES_MAGIC)]], len(SUMMARIES_MAGIC), 0
    while position < len(data):
        length, _ = struct.unpack_from("<II", data, position)
        payload = msgspec.msgpack.decode(data[position + 8 : position + 8 + length])
        payload = msgspec.msgpack.encode(change(index, payload))
        out.append(struct.pack("<II", len(payload), zlib.crc32(payload)) + payload)
        position += 8 + length
        index += 1
    path.write_bytes(b"".join(out))


def step_changed(index, payload):
    if index == 1:  # the first batch: its first line is spot-checked
        steps = np.frombuffer(payload["step"], dtype="<i8").copy()
        steps[0] += 1
        payload["step"] = steps.tobytes()
    return payload


def reward_changed(index, payload):
    if index == 1:
        rewards = np.frombuffer(payload["numbers"]["reward"], dtype="<f8").copy()
        rewards[0] += 0.5
        payload["numbers"]["reward"] = rewards.tobytes()
    return payload


def offsets_shifted(index, payload):
    if index == 1:
        payload["offset"] = (np.frombuffer(payload["offset"], dtype="<i8") + 1).tobytes()
        payload["length"] = (np.frombuffer(payload["length"], dtype="<i8") - 1).tobytes()
    return payload


def field_cut_short(index, payload):
    if index == 2:
        payload["fields"]["extra/difficulty"] = payload["fields"]["extra/difficulty"][:-8]
    return payload


def texts_as_numbers(index, payload):
    if index == 2:
        payload["fields"]["text/data_source"] = bytes(8 * len(payload["fields"]["text/data_source"]))
    return payload


def value_past_its_lines(index, payload):
    if index == 2:
        payload["more_fields"] = {"extra/late": [np.array([len(payload["step"]) // 8], dtype="<i8").tobytes(), np.array([1.0]).tobytes()]}
    return payload


def index_column_as_field(index, payload):
    if index == 2:
        payload["fields"]["offset"] = bytes(len(payload["offset"]))  # every line at byte 0, were it taken
    return payload


def field_twice(index, payload):
    if index == 2:
        payload["more_fields"] = {"extra/difficulty": [np.array([0], dtype="<i8").tobytes(), np.array([9.0]).tobytes()]}
    return payload


def line_left_out(index, payload):
    """A batch's record without its second line (no line spot-checked): every per-line value of it taken out."""
    if index != 2:
        return payload
    count, row = len(payload["offset"]) // 8, 1

    def without_row(value):
        if isinstance(value, bytes) and len(value) in (count, 8 * count):
            width = len(value) // count
            return value[: row * width] + value[(row + 1) * width :]
        if isinstance(value, list) and len(value) == count:
            return value[:row] + value[row + 1 :]
        if isinstance(value, dict):
            return {key: without_row(item) for key, item in value.items()}
        return value

    more = {}
    for name, (rows, values) in payload.get("more_fields", {}).items():
        rows = np.frombuffer(rows, dtype="<i8")
        kept = rows != row
        more[name] = [(rows[kept] - (rows[kept] > row)).astype("<i8").tobytes(), without_row(values) if len(rows) == count else values]
    payload = {key: value if key in ("more_fields", "problems", "physical_lines", "start", "end") else without_row(value) for key, value in payload.items()}
    payload["more_fields"] = more
    payload["problems"] = [[position - (position > row), kind, text] for position, kind, text in payload.get("problems", []) if position != row]
    return payload


def other_version(index, payload):
    if index == 0:
        payload["summary_format"] += 1
    return payload


def damaged(path: Path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside a record that is not the last
    path.write_bytes(bytes(data))


def stale(path: Path):
    """The rank file written again by another run: its summaries file is the old one's."""
    other = logger_run(path.parent.parent / "other", seed=1)
    shutil.copyfile(other / path.name.removesuffix(SUMMARIES_SUFFIX), path.with_name(path.name.removesuffix(SUMMARIES_SUFFIX)))


@pytest.mark.parametrize(
    "tamper, reason",
    [
        (damaged, "is damaged"),
        (lambda path: rewrite_records(path, step_changed), "at step"),
        (lambda path: rewrite_records(path, reward_changed), "reward"),
        (lambda path: rewrite_records(path, offsets_shifted), "no whole line"),
        (lambda path: rewrite_records(path, line_left_out), "leave out what is no blank line"),
        (lambda path: rewrite_records(path, other_version), "another version"),
        (lambda path: rewrite_records(path, field_cut_short), "values of extra/difficulty are not one a line"),
        (lambda path: rewrite_records(path, texts_as_numbers), "values of text/data_source are not one a line"),
        (lambda path: rewrite_records(path, value_past_its_lines), "values of extra/late are not at its lines"),
        (lambda path: rewrite_records(path, index_column_as_field), "names as a field what is no field"),
        (lambda path: rewrite_records(path, field_twice), "names a field twice"),
        (lambda path: path.write_bytes(b"not a summaries file"), "not a summaries file"),
        (lambda path: shutil.copyfile(path.with_name(RANK_FILES[1] + SUMMARIES_SUFFIX), path), "it summarizes"),
        (stale, ""),
    ],
    ids=["damaged", "step", "reward", "offsets", "line-left-out", "version", "field-cut-short", "texts-as-numbers", "value-past-its-lines", "index-column-as-field", "field-twice", "not-summaries", "other-file", "stale"],
)
def test_a_summaries_file_that_disagrees_is_not_used_with_a_note(run, tmp_path, monkeypatch, tamper, reason):
    tamper(run / (RANK_FILES[0] + SUMMARIES_SUFFIX))
    snapshot, count = first_open(run, monkeypatch, tmp_path)
    [note] = notes(snapshot)
    assert note.startswith(f"{RANK_FILES[0]}{SUMMARIES_SUFFIX} not used (") and reason in note and note.endswith("the lines were read from the file")
    assert count == STEPS * PER_STEP  # the lines of that file parsed, the other file's from its summaries
    expected, _ = first_open(without_summaries(run, tmp_path / "plain"), monkeypatch, tmp_path)
    pd.testing.assert_frame_equal(numbers(snapshot), numbers(expected), check_exact=True)


def test_a_summaries_file_cut_short_is_read_to_its_last_whole_record(run, parsed, tmp_path, monkeypatch):
    path = run / (RANK_FILES[0] + SUMMARIES_SUFFIX)
    path.write_bytes(path.read_bytes()[:-10])  # a crash while its last record was written
    snapshot, count = first_open(run, monkeypatch, tmp_path)
    assert count == PER_STEP and not notes(snapshot)  # the last step's lines of that file, read from the file
    pd.testing.assert_frame_equal(numbers(snapshot), parsed, check_exact=True)


def test_a_rank_file_grown_past_its_summaries_is_read_on(run, tmp_path, monkeypatch):
    rng = np.random.default_rng(7)
    with open(run / RANK_FILES[1], "ab") as file:  # lines appended by another writer, and a last one still being written
        for sample in range(3):
            file.write(json.dumps(logger_record(rng, 1, STEPS, sample)).encode() + b"\n")
        file.write(b'{"prompt": "p", "resp')
    snapshot, count = first_open(run, monkeypatch, tmp_path)
    assert count == 3 and not notes(snapshot)
    expected, _ = first_open(without_summaries(run, tmp_path / "plain"), monkeypatch, tmp_path)
    pd.testing.assert_frame_equal(numbers(snapshot), numbers(expected), check_exact=True)
    assert (snapshot.samples["step"] == STEPS).sum() == 3 and (snapshot.problems["kind"] == "incomplete").sum() == 1


def test_a_rank_file_cut_short_uses_the_summaries_of_what_is_left(run, tmp_path, monkeypatch):
    path = run / RANK_FILES[0]
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[: 2 * PER_STEP + 2]))  # two steps and two lines of the third
    snapshot, count = first_open(run, monkeypatch, tmp_path)
    assert count == 2 and not notes(snapshot)  # the third step's record ends past the file: its lines parsed
    expected, _ = first_open(without_summaries(run, tmp_path / "plain"), monkeypatch, tmp_path)
    pd.testing.assert_frame_equal(numbers(snapshot), numbers(expected), check_exact=True)


# ---------------------------------------------------------------- the texts file

TEXT_COLUMNS = ["prompt", "response", "ref_response", "ground_truth", "images"]


def spans_read(monkeypatch) -> list[tuple[str, int, int]]:
    """Every (file, offset, length) read back from now on."""
    read, read_spans = [], rl_board.reading.snapshot.read_spans

    def recorded(paths, offsets, lengths):
        read.extend(zip(paths, offsets, lengths))
        return read_spans(paths, offsets, lengths)

    monkeypatch.setattr(rl_board.reading.snapshot, "read_spans", recorded)
    return read


# A step's tables read its texts from the texts file, a step's records one after the other there, and show what the
# lines hold.
def test_a_steps_texts_come_from_the_texts_file_and_equal_the_lines(run, tmp_path, monkeypatch):
    snapshot, _ = first_open(run, monkeypatch, tmp_path)
    plain, _ = first_open(without_summaries(run, tmp_path / "plain"), monkeypatch, tmp_path)
    assert (snapshot.samples["texts_length"] > 0).all() and (plain.samples["texts_length"] == -1).all()
    read = spans_read(monkeypatch)
    for step in snapshot.steps:
        rows = snapshot.step_rows(step)
        batch, expected = read_step_batch("texts", rows), read_step_batch("lines", plain.step_rows(step))
        assert batch.problems == [] and expected.problems == []
        pd.testing.assert_frame_equal(batch.table[TEXT_COLUMNS], expected.table[TEXT_COLUMNS])
        for name in RANK_FILES:  # the step's records of a rank file are together: one read
            mine = rows[rows["path"] == str(run / name)]
            assert mine["texts_offset"].max() + mine["texts_length"].max() - mine["texts_offset"].min() < 2 * mine["texts_length"].sum()
    from_run = [path for path, _, _ in read if Path(path).parent == run]  # not the plain copy's
    assert len(from_run) == len(snapshot.samples) and all(path.endswith(TEXTS_SUFFIX) for path in from_run)
    records = [json.loads(line) for name in RANK_FILES for line in (run / (name + TEXTS_SUFFIX)).read_bytes().splitlines()]
    assert len(records) == len(snapshot.samples) and set(records[0]) == {"prompt", "response", "step"}


# A line the fast decoder cannot read (NaN, a byte order mark, invalid UTF-8) has no texts record: the board reads it
# from the line, as it reads the others, and the records it has (a chat prompt, a step written as text, images, keys
# in another order) decode as their lines do.
def test_a_line_without_a_texts_record_is_read_from_the_line():
    lines = [
        b'{"prompt": "p0", "response": "r0", "step": 1, "reward": 1.0, "logprobs": [-0.5, -1.0]}',
        b'{"prompt": "p1", "response": "r1", "step": 1, "reward": NaN}',
        b'{"prompt": [{"role": "user", "content": "hi \\u00e9"}], "response": "r2", "step": "1", "images": [{"path": "images/a.png"}]}',
        b'\xef\xbb\xbf{"prompt": "p3", "response": "r3", "step": 1}',
        b'{"prompt": "p4", "response": "r4 \xff", "step": 1}',
        b'{"response": "r5", "step": 1, "ref_response": "ref", "ground_truth": [1, 2], "prompt": "p5"}',
    ]
    data = b"\n".join(lines) + b"\n"
    texts, record = rl_board.reading.summaries.batch_record(data, 100, 7)
    batch = msgspec.msgpack.decode(record[8:])
    offsets, lengths = (np.frombuffer(batch[name], dtype="<i8") for name in ("texts_offset", "texts_length"))
    assert (lengths >= 0).tolist() == [True, False, True, False, False, True]
    assert offsets[0] == 7 and offsets[2] == 7 + lengths[0] + 1 and len(texts) == (lengths[lengths >= 0] + 1).sum()
    for row in (0, 2, 5):
        own = texts[offsets[row] - 7 : offsets[row] - 7 + lengths[row]]
        assert decode_line(own, TEXTS_DECODER)[0] == decode_line(lines[row], TEXTS_DECODER)[0]


def tampered_texts(path: Path):
    """The first record's prompt changed, its length kept."""
    data = path.read_bytes()
    path.write_bytes(data.replace(b"question", b"QUESTION", 1))


@pytest.mark.parametrize(
    "tamper, reason",
    [
        (lambda path: path.unlink(), "cannot be read"),
        (tampered_texts, "differs from line 1's texts"),
        (lambda path: path.write_bytes(path.read_bytes()[:-40]), "no whole record"),
    ],
    ids=["missing", "edited", "cut-short"],
)
def test_a_texts_file_that_disagrees_is_not_used_with_a_note(run, parsed, tmp_path, monkeypatch, tamper, reason):
    tamper(run / (RANK_FILES[0] + TEXTS_SUFFIX))
    snapshot, count = first_open(run, monkeypatch, tmp_path)
    [note] = [reason for reason in snapshot.problems["reason"] if TEXTS_SUFFIX in reason]
    assert note.startswith(f"{RANK_FILES[0]}{TEXTS_SUFFIX} not used (") and reason in note and note.endswith("a step's texts are read from its lines")
    assert count == 0 and not notes(snapshot)  # the summaries are used
    pd.testing.assert_frame_equal(numbers(snapshot), parsed, check_exact=True)
    in_texts = snapshot.samples.groupby("path")["texts_length"].min().to_dict()
    assert in_texts[str(run / RANK_FILES[0])] == -1 and in_texts[str(run / RANK_FILES[1])] > 0  # the other file's are used
    first = snapshot.step_rows(0)
    assert read_step_batch("step", first).table["prompt"].str.startswith("question").all()


def edited_in_place(path: Path):
    """The first record's prompt changed, the file's size kept (a touch after its check: its mtime changes)."""
    tampered_texts(path)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))


# A texts file checked at the open and then removed or edited, the rank files untouched: the next load (of the same
# board, or of a restarted one from the index cache) stops using it with a note, and the step view and the search show
# what the lines hold; between the change and that load, a record that cannot be read is read from its line.
@pytest.mark.parametrize("tamper, reason", [(lambda path: path.unlink(), "it is gone"), (edited_in_place, "it changed since its records were checked")], ids=["removed", "edited"])
@pytest.mark.parametrize("restart", [False, True], ids=["same-board", "restarted"])
def test_a_texts_file_changed_after_its_check_is_not_used_any_more(run, tmp_path, monkeypatch, tamper, reason, restart):
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    store = RunStore(str(run))
    opened = store.load(1 << 30, parallel=False)
    plain, _ = first_open(without_summaries(run, tmp_path / "plain"), monkeypatch, tmp_path)
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    texts_path = run / (RANK_FILES[0] + TEXTS_SUFFIX)
    tamper(texts_path)
    if not texts_path.exists():  # not loaded again yet: the records that cannot be read are read from their lines
        batch = read_step_batch("before", opened.step_rows(1))
        assert batch.problems == []
        pd.testing.assert_frame_equal(batch.table[TEXT_COLUMNS], read_step_batch("lines", plain.step_rows(1)).table[TEXT_COLUMNS])
        pattern = search_pattern("question", regex=False, match_case=False)
        found, expected = (search_samples(RunTexts(), shown.samples, pattern, "prompt and response") for shown in (opened, plain))
        np.testing.assert_array_equal(found.place, expected.place)
    snapshot = (RunStore(str(run)) if restart else store).load(1 << 30, parallel=False)
    [note] = [text for text in snapshot.problems["reason"] if TEXTS_SUFFIX in text]
    assert note == f"{RANK_FILES[0]}{TEXTS_SUFFIX} not used ({reason}): a step's texts are read from its lines"
    in_texts = snapshot.samples.groupby("path")["texts_length"].min().to_dict()
    assert in_texts[str(run / RANK_FILES[0])] == -1 and in_texts[str(run / RANK_FILES[1])] > 0  # the other file's are used
    pd.testing.assert_frame_equal(numbers(snapshot), numbers(plain), check_exact=True)
    for step in snapshot.steps:
        batch = read_step_batch("after", snapshot.step_rows(step))
        assert batch.problems == []
        pd.testing.assert_frame_equal(batch.table[TEXT_COLUMNS], read_step_batch("lines", plain.step_rows(step)).table[TEXT_COLUMNS])
    pattern = search_pattern("question", regex=False, match_case=False)
    found, expected = (search_samples(RunTexts(), shown.samples, pattern, "prompt and response") for shown in (snapshot, plain))
    np.testing.assert_array_equal(found.place, expected.place)
    again = RunStore(str(run)).load(1 << 30, parallel=False)  # the cache kept it: still the lines, the note kept
    assert again.samples.groupby("path")["texts_length"].min().to_dict() == in_texts and note in set(again.problems["reason"])


# A texts file that only grew since its check (the logger's next steps) stays in use, for the old records and the new.
def test_a_texts_file_that_only_grew_stays_in_use(run, tmp_path, monkeypatch):
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    rng = np.random.default_rng(5)
    store = RunStore(str(run))
    store.load(1 << 30, parallel=False)
    append_batch(run / RANK_FILES[0], [logger_record(rng, 0, STEPS, sample) for sample in range(PER_STEP)])
    for board in (store, RunStore(str(run))):  # and a restarted board
        snapshot = board.load(1 << 30, parallel=False)
        assert not [text for text in snapshot.problems["reason"] if TEXTS_SUFFIX in text]
        assert (snapshot.samples["texts_length"] > 0).all() and snapshot.steps[-1] == STEPS


# On object storage a step in view costs one ranged request a rank file, of its texts records only: not its lines.
def test_a_step_of_a_run_on_s3_reads_its_texts_not_its_lines(run, s3_server, tmp_path, monkeypatch):
    url = f"s3://{make_bucket(s3_server.endpoint_url, f'texts-{uuid.uuid4().hex[:12]}')}/run"
    upload_folder(s3_server.endpoint_url, run, url)
    snapshot, count = first_open(url, monkeypatch, tmp_path)
    plain, _ = first_open(without_summaries(run, tmp_path / "plain"), monkeypatch, tmp_path)
    assert count == 0 and snapshot.problems.empty
    storage = remote_storage(url)
    requests, cat_ranges = [], storage.cat_ranges
    monkeypatch.setattr(storage, "cat_ranges", lambda paths, starts, ends, **options: requests.append(list(zip(paths, starts, ends))) or cat_ranges(paths, starts, ends, **options))
    for step in snapshot.steps:
        rows = snapshot.step_rows(step)
        requests.clear()
        batch = read_step_batch("s3", rows)
        pd.testing.assert_frame_equal(batch.table[TEXT_COLUMNS], read_step_batch("disk", plain.step_rows(step)).table[TEXT_COLUMNS])
        [ranges] = requests
        spans = {f"{path}{TEXTS_SUFFIX}": (mine["texts_offset"].min(), (mine["texts_offset"] + mine["texts_length"]).max()) for path, mine in rows.groupby("path")}
        assert sorted((path, start, end) for path, start, end in ranges) == sorted((path, start, end) for path, (start, end) in spans.items())
        assert sum(end - start for _, start, end in ranges) * 4 < rows["length"].sum()


# ---------------------------------------------------------------- a live run's summaries


def append_batch(path: Path, records: list[dict], with_record: bool = True) -> bytes:
    """A batch appended as the logger's writer appends one (JsonlWriter._drain, _add_summaries): its texts, its lines,
    its summaries record; without the record, as it stands between the lines and their record."""
    data = b"".join(json.dumps(record).encode() + b"\n" for record in records)
    texts_path, summaries_path = Path(str(path) + TEXTS_SUFFIX), Path(str(path) + SUMMARIES_SUFFIX)
    texts, record = rl_board.reading.summaries.batch_record(data, path.stat().st_size, texts_path.stat().st_size)
    with open(texts_path, "ab") as file:
        file.write(texts)
    with open(path, "ab") as file:
        file.write(data)
    if with_record:
        with open(summaries_path, "ab") as file:
            file.write(record)
    return record


def parses_counted(monkeypatch) -> list[int]:
    parsed, summarize = [], rl_board.reading.workers.summarize_buffer
    monkeypatch.setattr(rl_board.reading.workers, "summarize_buffer", lambda data, base, offsets, lengths: parsed.append(len(offsets)) or summarize(data, base, offsets, lengths))
    return parsed


# Steps a live run appends after the board opened it are indexed from their summaries records too (and their texts
# from the texts file), also after a restart; lines written before their record are parsed, and the record passed
# over; the numbers are always those a parse of every line gives.
def test_steps_appended_after_the_open_are_indexed_from_their_summaries(run, tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    path = run / RANK_FILES[0]
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    store = RunStore(str(run))
    parsed = parses_counted(monkeypatch)
    store.load(1 << 30, parallel=False)
    for step in (STEPS, STEPS + 1):
        append_batch(path, [logger_record(rng, 0, step, sample) for sample in range(PER_STEP)])
    late = append_batch(path, [logger_record(rng, 0, STEPS + 2, sample) for sample in range(PER_STEP)], with_record=False)
    snapshot = store.load(1 << 30, parallel=False)
    assert sum(parsed) == PER_STEP and not notes(snapshot)  # only the batch whose record is not written yet
    with open(str(path) + SUMMARIES_SUFFIX, "ab") as file:
        file.write(late)  # its record, late: passed over
    append_batch(path, [logger_record(rng, 0, STEPS + 3, sample) for sample in range(PER_STEP)])
    snapshot = RunStore(str(run)).load(1 << 30, parallel=False)  # a restart: from the cache, then the new records
    assert sum(parsed) == PER_STEP and not notes(snapshot)
    plain, _ = first_open(without_summaries(run, tmp_path / "plain"), monkeypatch, tmp_path)
    pd.testing.assert_frame_equal(numbers(snapshot), numbers(plain), check_exact=True)
    rows = snapshot.step_rows(STEPS + 3)
    assert (rows["texts_length"] > 0).all()
    pd.testing.assert_frame_equal(read_step_batch("texts", rows).table[TEXT_COLUMNS], read_step_batch("lines", plain.step_rows(STEPS + 3)).table[TEXT_COLUMNS])


# An appended record that disagrees with its lines ends the use of the summaries file, with a note: those lines and
# the ones after are parsed.
def test_an_appended_record_that_disagrees_stops_the_summaries_with_a_note(run, tmp_path, monkeypatch):
    rng = np.random.default_rng(4)
    path = run / RANK_FILES[0]
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    store = RunStore(str(run))
    store.load(1 << 30, parallel=False)
    parsed = parses_counted(monkeypatch)
    summaries = Path(str(path) + SUMMARIES_SUFFIX)
    size = summaries.stat().st_size
    append_batch(path, [logger_record(rng, 0, STEPS, sample) for sample in range(PER_STEP)])
    data = summaries.read_bytes()
    payload = msgspec.msgpack.decode(data[size + 8 :])
    rewards = np.frombuffer(payload["numbers"]["reward"], dtype="<f8").copy()
    rewards[-1] += 0.5  # the last line: the one an appended record's check parses
    payload["numbers"]["reward"] = rewards.tobytes()
    payload = msgspec.msgpack.encode(payload)
    summaries.write_bytes(data[:size] + struct.pack("<II", len(payload), zlib.crc32(payload)) + payload)
    snapshot = store.load(1 << 30, parallel=False)
    [note] = notes(snapshot)
    assert "reward" in note and note.endswith(f"the lines past line {STEPS * PER_STEP} were read from the file")
    append_batch(path, [logger_record(rng, 0, STEPS + 1, sample) for sample in range(PER_STEP)])
    snapshot = store.load(1 << 30, parallel=False)
    assert sum(parsed) == 2 * PER_STEP
    plain, _ = first_open(without_summaries(run, tmp_path / "plain"), monkeypatch, tmp_path)
    pd.testing.assert_frame_equal(numbers(snapshot), numbers(plain), check_exact=True)


# A search reads each line's record in the texts file (a file's records together), and finds what it finds in the
# lines: the same samples, places and snippets.
@pytest.mark.parametrize("query", ["question 3-", "w7", "5-1 押韵"])
def test_a_search_reads_the_texts_file_and_finds_what_the_lines_hold(run, tmp_path, monkeypatch, query):
    snapshot, _ = first_open(run, monkeypatch, tmp_path)
    plain, _ = first_open(without_summaries(run, tmp_path / "plain"), monkeypatch, tmp_path)
    read, read_spans = [], rl_board.reading.search.read_spans
    monkeypatch.setattr(rl_board.reading.search, "read_spans", lambda paths, offsets, lengths: read.extend(paths) or read_spans(paths, offsets, lengths))
    pattern = search_pattern(query, regex=False, match_case=False)
    found, expected = (search_samples(RunTexts(), shown.samples, pattern, "prompt and response") for shown in (snapshot, plain))
    assert 0 < (found.place > 0).sum() < len(found.place)
    for name in ("place", "start", "end"):
        np.testing.assert_array_equal(getattr(found, name), getattr(expected, name))
    from_run = {path for path in read if Path(path).parent == run}
    assert from_run == {str(run / (name + TEXTS_SUFFIX)) for name in RANK_FILES}


# A search reads only the head of a record, where the index knows the sizes of its prompt's and response's JSON; a
# record that does not begin as those sizes say is read whole and decoded: the texts are the same either way.
def test_a_record_not_laid_out_as_the_index_says_is_read_whole(run, tmp_path, monkeypatch):
    snapshot, _ = first_open(run, monkeypatch, tmp_path)
    rows = snapshot.samples[snapshot.samples["path"] == str(run / RANK_FILES[0])]
    lines = rows[TEXT_SPAN_COLUMNS].to_numpy(dtype=float)
    expected = read_texts(str(run / RANK_FILES[0]), lines)
    assert expected[1].min() > 0 and expected[2].all()
    for column, change in ((3, 1), (5, -1), (3, np.nan)):  # a prompt's or a response's size wrong, or not known
        wrong = lines.copy()
        wrong[::3, column] += change
        data, sizes, read = read_texts(str(run / RANK_FILES[0]), wrong)
        assert data == expected[0] and np.array_equal(sizes, expected[1]) and read.all()


@pytest.mark.parametrize(
    "raw, whole",
    [(b'"ab"', True), (b'"ab', False), (b'"a\\"', False), (b'"a\\\\"', True), (b'"', False), (b'[{"role": "user"}]', True), (b'[{"role": "us', False), (b"12", True)],
)
def test_a_json_value_cut_short_is_told_from_a_whole_one(raw, whole):
    assert rl_board.reading.search.whole_json(raw) is whole


# A live run on S3 (each object uploaded again whole as it grows): the steps added are taken from the summaries
# records added, with their texts, reading the new records and one spot-checked line, not the new lines.
def test_a_live_run_on_s3_takes_its_new_steps_from_the_summaries(run, s3_server, tmp_path, monkeypatch):
    rng = np.random.default_rng(5)
    url = f"s3://{make_bucket(s3_server.endpoint_url, f'live-{uuid.uuid4().hex[:12]}')}/run"
    upload_folder(s3_server.endpoint_url, run, url)
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    store = RunStore(url)
    store.load(1 << 30, parallel=False)
    parsed = parses_counted(monkeypatch)
    path = run / RANK_FILES[1]
    sizes = {name: (run / name).stat().st_size for name in (RANK_FILES[1], RANK_FILES[1] + SUMMARIES_SUFFIX, RANK_FILES[1] + TEXTS_SUFFIX)}
    append_batch(path, [logger_record(rng, 1, STEPS, sample) for sample in range(PER_STEP)])
    for name, size in sizes.items():  # uploaded again with what was added, as a sync of the run folder does
        append_object(s3_server.endpoint_url, f"{url}/{name}", (run / name).read_bytes()[size:])
    snapshot = store.load(1 << 30, parallel=False)
    assert sum(parsed) == 0 and not notes(snapshot) and snapshot.steps[-1] == STEPS
    rows = snapshot.step_rows(STEPS)
    assert len(rows) == PER_STEP and (rows["texts_length"] > 0).all()
    plain, _ = first_open(without_summaries(run, tmp_path / "plain"), monkeypatch, tmp_path)
    pd.testing.assert_frame_equal(numbers(snapshot), numbers(plain), check_exact=True)
    pd.testing.assert_frame_equal(read_step_batch("s3", rows).table[TEXT_COLUMNS], read_step_batch("disk", plain.step_rows(STEPS)).table[TEXT_COLUMNS])


# The board opened a live run before the logger's summaries file held anything: before any line was written, or after
# the first batch's lines and before the file's header (the writer makes the file once lines are written). The file is
# taken once written, with no note, then and after a restart, and the lines it summarizes are not parsed; those parsed
# meanwhile keep their numbers. Before, such a file was never used (a live run opened early was parsed line by line),
# or refused for good as "not a summaries file".
@pytest.mark.parametrize("seen_first", ["an empty rank file", "lines, no summaries file", "lines and an empty summaries file", "lines and part of a header"])
def test_a_summaries_file_written_after_the_run_was_opened_is_taken(tmp_path, monkeypatch, seen_first):
    complete = logger_run(tmp_path / "complete")
    name = RANK_FILES[0]
    data, summaries, texts = ((complete / (name + suffix)).read_bytes() for suffix in ("", SUMMARIES_SUFFIX, TEXTS_SUFFIX))
    live = tmp_path / "live"
    live.mkdir()
    first_batch = b"".join(data.splitlines(keepends=True)[:PER_STEP]) if seen_first != "an empty rank file" else b""
    (live / name).write_bytes(first_batch)
    if seen_first != "lines, no summaries file" and first_batch:
        (live / (name + SUMMARIES_SUFFIX)).write_bytes(b"" if seen_first == "lines and an empty summaries file" else rl_board.reading.summaries.summaries_header(name)[:9])
        (live / (name + TEXTS_SUFFIX)).write_bytes(b"")
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    parsed = parses_counted(monkeypatch)
    store = RunStore(str(live))
    first = store.load(1 << 30, parallel=False)
    assert sum(parsed) == len(first_batch.splitlines()) and not notes(first)
    with open(live / name, "ab") as file:  # the logger goes on: its lines, then the files beside them written whole
        file.write(data[len(first_batch) :])
    (live / (name + SUMMARIES_SUFFIX)).write_bytes(summaries)
    (live / (name + TEXTS_SUFFIX)).write_bytes(texts)
    snapshot = store.load(1 << 30, parallel=False)
    assert sum(parsed) == len(first_batch.splitlines()) and not notes(snapshot)  # the rest from the summaries file
    restarted = RunStore(str(live)).load(1 << 30, parallel=False)
    assert sum(parsed) == len(first_batch.splitlines()) and not notes(restarted)
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copyfile(live / name, plain / name)
    expected, _ = first_open(plain, monkeypatch, tmp_path)
    for shown in (snapshot, restarted):
        pd.testing.assert_frame_equal(numbers(shown), numbers(expected), check_exact=True)
    rows = restarted.step_rows(STEPS - 1)
    assert (rows["texts_length"] > 0).all()  # a step's texts from the texts file


# A texts file that changes while its rank file does not is dropped (its texts read from the lines) for every Max
# Samples Each Step's snapshot, not only the one of the load that noticed it: another's still pointed into the file,
# and showed its new texts.
def test_a_texts_file_changed_after_two_loads_is_dropped_from_both(run, tmp_path, monkeypatch):
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    store = RunStore(str(run))
    store.load(2, parallel=False)
    store.load(4, parallel=False)
    texts = Path(str(run / RANK_FILES[0]) + TEXTS_SUFFIX)
    data = texts.read_bytes()
    texts.write_bytes(data.replace("question".encode(), "QUESTION".encode()))  # the same length, other texts
    os.utime(texts, ns=(texts.stat().st_atime_ns, texts.stat().st_mtime_ns + 10**9))

    def dropped(snapshot) -> list[str]:
        return [reason for reason in snapshot.problems["reason"] if "texts not used" in reason]

    assert dropped(store.load(2, parallel=False))
    shown = store.load(4, parallel=False)
    rows = shown.step_rows(1)
    assert dropped(shown) and (rows[rows["path"] == str(run / RANK_FILES[0])]["texts_length"] == -1).all()
    prompts = read_step_batch("texts", rows).table["prompt"]
    assert prompts.str.startswith("question").all(), prompts.tolist()
