"""The board opening AReaL's trajectory dumps, ROLL's RLVR rollout dumps and open-instruct's rollout traces as those
frameworks write them (tests/support/more_formats.py runs their own writing code on the toy GRPO task): samples,
texts, rewards, groups and fields checked against the raw files (json.loads of each line, recounted here with
pandas), never against the converters; and bad input (a line cut off while being appended, a line that is not JSON,
messages that are not JSON, a second run in the folder) counted in the load report, never a crash."""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import rl_board
from rl_board.formats import FORMATS, areal, board_jsonl, open_instruct, roll
from rl_board.reading.search import export_jsonl
from rl_board.tokenizer import TOKENIZER_VARIABLE
from tests.support.more_formats import areal_run, open_instruct_run, roll_rlvr_run
from tests.support.prime_rl_nemo_rl import save_tokenizer


# Every loaded line as the board converted it (what a JSONL download gives), in the samples' order.
def board_lines(run) -> list[dict]:
    return [json.loads(line) for step in run.steps for line in export_jsonl(run.snapshot.step_rows(step)).decode("utf-8").splitlines()]


def problems(run, kind: str) -> list[list]:
    return run.problems[run.problems["kind"] == kind].values.tolist()


def same_number(a, b) -> bool:
    return (a is None or (isinstance(a, float) and math.isnan(a))) and (b is None or (isinstance(b, float) and math.isnan(b))) or a == b


# ------------------------------------------------------------------------------------------------------ AReaL


# Every dumped line of an AReaL log path, with where it was: mode (from the dump folder), version (its folder), task.
def areal_records(log_path: Path) -> pd.DataFrame:
    rows = []
    for folder, mode in (("rollout", "train"), ("eval-rollout", "eval")):
        for path in sorted((log_path / folder).glob("*/*.jsonl")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                rows.append({"mode": mode, "version": int(path.parent.name), "file": path.stem, "line": number, **json.loads(line)})
    return pd.DataFrame(rows)


def test_areal_dumps_are_a_line_per_sample_and_a_task_file_a_group(tmp_path, tokenizer):
    """Each dumped sample is a line of the step its version folder names, its completion the response, its task file
    (train or eval) a group; head_version and tail_version are fields (numbers: curves and filters), and the prompt
    tokens' version -1 makes every head_version -1, even for the task the weight update interrupted."""
    log_path = areal_run(tmp_path / "fileroot", tokenizer, versions=(1, 2, 3), tasks=2, group_size=3, eval_versions=(2,))
    run = rl_board.open_run(log_path)
    raw = areal_records(log_path)
    assert run.format == areal.NAME and run.problems.empty
    assert run.steps == sorted(raw["version"].unique().tolist()) == [1, 2, 3]
    assert len(run.samples) == len(raw) == 3 * 2 * 3 + 3
    samples = run.samples.assign(mode=run.samples["text/mode"]).sort_values(["mode", "step", "extra/task_id", "extra/sample_idx"])
    expected = raw.sort_values(["mode", "version", "task_id", "sample_idx"])
    np.testing.assert_array_equal(samples["step"].to_numpy(), expected["version"].to_numpy())
    np.testing.assert_array_equal(samples["reward"].to_numpy(), expected["reward"].to_numpy())
    for column in ("task_id", "sample_idx", "seqlen", "prompt_len", "head_version", "tail_version"):
        np.testing.assert_array_equal(samples[f"extra/{column}"].to_numpy(), expected[column].to_numpy())
    np.testing.assert_array_equal(samples["extra/completion_tokens"].to_numpy(), (expected["seqlen"] - expected["prompt_len"]).to_numpy())
    assert (raw["head_version"] == -1).all() and (raw["tail_version"] == raw["version"]).all()
    groups = samples.groupby(["step", "group_id"]).size()
    assert groups.tolist() == expected.groupby(["version", "mode", "file"]).size().tolist() == [3] * 7
    shown = {(line["mode"], line["step"], line["task_id"], line["sample_idx"]): line for line in board_lines(run)}
    for record in raw.itertuples():
        line = shown[(record.mode, record.version, record.task_id, record.sample_idx)]
        assert (line["prompt"], line["response"], line["reward"]) == (record.prompt, record.completion, record.reward)
        assert line["group_id"] == f"{record.mode}/{record.version}/{record.task_id}"
    assert rl_board.list_runs(log_path.parent) == [str(log_path)] and rl_board.list_runs(log_path) == [str(log_path)]
    alone = rl_board.open_run(log_path / "rollout")  # the dump folder opened alone: the training samples
    assert alone.format == areal.NAME and len(alone.samples) == (raw["mode"] == "train").sum()


def test_areal_file_being_appended_a_bad_line_and_a_resumed_task_id(tmp_path, tokenizer):
    """A task file's last line without its newline is incomplete until the dump finishes it; a line that is not JSON
    is a bad line at its number; a resumed trainer's task of the same id appended to the file is a group of its own;
    a NaN reward is missing."""
    log_path = areal_run(tmp_path / "fileroot", tokenizer, versions=(1, 2), tasks=2, group_size=2, eval_versions=())
    appended, bad = log_path / "rollout" / "2" / "3.jsonl", log_path / "rollout" / "1" / "0.jsonl"
    lines = appended.read_text().splitlines()
    again = [json.loads(line) | {"reward": float("nan")} for line in lines]
    appended.write_text("\n".join(lines + [json.dumps(record) for record in again]) + "\n" + lines[0][:40])
    bad.write_text(bad.read_text() + "{not json\n")
    run = rl_board.open_run(log_path)
    [[file, line, kind, _]] = problems(run, "incomplete")
    assert (file, line) == ("train.2.3.jsonl", 5)
    [[file, line, _, _]] = [row for row in run.problems.values.tolist() if row[2] not in ("incomplete",)]
    assert (file, line) == ("train.1.0.jsonl", 3)
    step_2 = run.samples[run.samples["extra/task_id"] == 3]
    assert step_2.groupby("group_id").size().to_dict() == {"train/2/3": 2, "train/2/3#2": 2}
    assert step_2[step_2["group_id"] == "train/2/3#2"]["reward"].isna().all()
    assert step_2[step_2["group_id"] == "train/2/3"]["reward"].tolist() == [json.loads(line)["reward"] for line in lines]


# -------------------------------------------------------------------------------------------------- ROLL RLVR


def rlvr_rows(path: Path) -> list[dict]:
    columns = json.loads(path.read_text())
    return [{name: values[row] for name, values in columns.items()} for row in range(len(columns["responses"]))]


@pytest.mark.parametrize("prompt_column", [False, True])
def test_roll_rlvr_dump_rows_are_lines_with_their_prompt_response_score_and_group(tmp_path, tokenizer, prompt_column):
    """An RLVR dump's row is a line: the prompt the messages (parsed from their JSON string) or the prompt column, the
    decoded response, the score the reward, the rows of one prompt a group; the dataset's columns and the batch's
    sampling parameters are fields."""
    folder = roll_rlvr_run(tmp_path / "dump", tokenizer, steps=(0, 1, 2), prompts=2, num_return_sequences=3, prompt_column=prompt_column)
    run = rl_board.open_run(folder)
    assert run.format == roll.NAME and run.steps == [0, 1, 2] and run.problems.empty
    shown = board_lines(run)
    raws = [(step, row) for step in run.steps for row in rlvr_rows(folder / f"rollout_dump_data.step_{step}.jsonl")]
    assert len(shown) == len(raws) == 3 * 2 * 3
    for line, (step, row) in zip(shown, raws):
        prompt = row["prompt"] if prompt_column else json.loads(row["messages"])
        assert (line["step"], line["prompt"], line["response"], line["reward"]) == (step, prompt, row["responses"], row["scores"])
        assert (line["ground_truth"], line["id"], line["tag"], line["domain"]) == (row["ground_truth"], row["id"], row["tag"], row["domain"])
        assert line["sampling_params"] == json.loads(row["sampling_params"]) and line["sampling_params"]["global_step"] == step
    samples = run.samples.assign(prompt_id=[row["id"] for _, row in raws])
    assert samples.groupby(["step", "group_id"])["prompt_id"].nunique().eq(1).all()
    assert samples.groupby("step")["group_id"].nunique().tolist() == [2, 2, 2]
    recount = pd.DataFrame([{"step": step, "reward": row["scores"]} for step, row in raws]).groupby("step")["reward"].mean()
    assert run.samples.groupby("step")["reward"].mean().tolist() == recount.tolist()


def test_roll_rlvr_messages_that_are_not_json_are_a_note(tmp_path, tokenizer):
    """A row whose messages are not JSON keeps its response and score, without a prompt; its messages are a field."""
    folder = roll_rlvr_run(tmp_path / "dump", tokenizer, steps=(1,), prompts=1, num_return_sequences=2)
    dump = folder / "rollout_dump_data.step_1.jsonl"
    columns = json.loads(dump.read_text())
    columns["messages"][0] = "[{\"role\": \"user\", "
    dump.write_text(json.dumps(columns) + "\n")
    run = rl_board.open_run(folder)
    assert any("messages is not valid JSON" in row[3] for row in problems(run, "note"))
    cut, whole = board_lines(run)
    assert (cut["prompt"], cut["messages"], cut["response"]) == (None, columns["messages"][0], columns["responses"][0])  # kept as written
    assert whole["prompt"] == json.loads(columns["messages"][1]) and len(run.problems) == 1


# ------------------------------------------------------------------------------------------------ open-instruct


def shard_records(folder: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(folder.glob("*_rollouts_*.jsonl")) for line in path.read_text().splitlines()]


def test_open_instruct_records_are_lines_with_ids_logprobs_advantages_and_tool_statistics(tmp_path, tokenizer):
    """Each record is a line of its step: token ids shown as ids (no tokenizer: a note names the metadata's model),
    vLLM's log-probs the token area's (NaN missing), reward, advantage and finish reason as written, the samples of a
    prompt a group, the request_info's tool statistics fields (tool_call_failures recounted from tool_call_stats)."""
    folder = open_instruct_run(tmp_path / "rollouts", tokenizer, steps=(1, 2, 3), prompts=2, samples=3, shard_size=10)
    assert sorted(path.name for path in folder.iterdir()) == ["olmo_grpo__1__1755_metadata.jsonl", "olmo_grpo__1__1755_rollouts_000000.jsonl",
                                                              "olmo_grpo__1__1755_rollouts_000001.jsonl"]
    run = rl_board.open_run(folder)
    raws = shard_records(folder)
    assert run.format == open_instruct.NAME and run.steps == [1, 2, 3] and len(run.samples) == len(raws) == 18
    [[_, _, _, note]] = problems(run, "note")
    assert TOKENIZER_VARIABLE in note and "allenai/OLMo-2-0425-1B-Instruct" in note
    shown = board_lines(run)
    for line, raw, row in zip(shown, raws, run.samples.to_dict("records")):
        assert (line["step"], line["sample_idx"], line["prompt_idx"]) == (raw["step"], raw["sample_idx"], raw["prompt_idx"])
        assert line["response"].startswith("<token ids, not decoded") and line["response_tokens"] == [str(i) for i in raw["response_tokens"]]
        assert all(same_number(a, b) for a, b in zip(line["logprobs"], raw["logprobs"])) and len(line["logprobs"]) == len(raw["logprobs"])
        assert (line["reward"], line["advantage"], line["stop_reason"]) == (raw["reward"], raw["advantage"], raw["finish_reason"])
        assert line["truncated"] == (raw["finish_reason"] == "length") and line["ground_truth"] == raw["ground_truth"]
        info = raw["request_info"]
        assert {key: line[key] for key in info} == info
        assert line["tool_call_failures"] == sum(not call["success"] for call in info["tool_call_stats"])
        assert (line["run_name"], line["model_name"]) == ("olmo_grpo__1__1755", "allenai/OLMo-2-0425-1B-Instruct")
        assert line["prompt_tokens"] == len(raw["prompt_tokens"]) == row["extra/prompt_tokens"]
        finite = [value for value in raw["logprobs"] if not math.isnan(value)]
        assert row["avg_logp"] == pytest.approx(sum(finite) / len(finite), rel=1e-12) if finite else math.isnan(row["avg_logp"])
    assert any(math.isnan(value) for raw in raws for value in raw["logprobs"])  # the empty response's EOS
    assert run.samples["extra/tool_call_failures"].sum() == sum(not c["success"] for raw in raws for c in raw["request_info"]["tool_call_stats"]) > 0
    assert run.samples["extra/num_calls"].tolist() == [raw["request_info"]["num_calls"] for raw in raws]
    frame = pd.DataFrame({"step": [raw["step"] for raw in raws], "prompt": [str(raw["prompt_tokens"]) for raw in raws], "group": run.samples["group_id"].tolist()})
    assert frame.groupby(["step", "prompt"])["group"].nunique().eq(1).all() and frame.groupby(["step", "group"])["prompt"].nunique().eq(1).all()
    assert frame.groupby("step")["group"].nunique().tolist() == [2, 2, 2]
    assert rl_board.list_runs(folder) == [str(folder)]


def test_open_instruct_ids_decoded_with_a_tokenizer(tmp_path, tokenizer, monkeypatch):
    folder = open_instruct_run(tmp_path / "rollouts", tokenizer, steps=(1,), prompts=2, samples=2)
    monkeypatch.setenv(TOKENIZER_VARIABLE, str(save_tokenizer(tmp_path / "tok")))
    run = rl_board.open_run(folder)
    assert run.problems.empty
    for line, raw in zip(board_lines(run), shard_records(folder)):
        assert line["prompt"] == tokenizer.decode(raw["prompt_tokens"], skip_special_tokens=False)
        assert line["response"] == tokenizer.decode(raw["response_tokens"], skip_special_tokens=False)
        assert line["response_tokens"] == [tokenizer.id_to_token(i) for i in raw["response_tokens"]]


def test_open_instruct_shard_being_appended_and_a_second_run_in_the_folder(tmp_path, tokenizer):
    """The default rollouts_save_path is shared by runs: a second run's shards are read too, with a note and their
    run_name; a shard's last line without its newline (the thread still writing it) is incomplete."""
    folder = open_instruct_run(tmp_path / "rollouts", tokenizer, steps=(1, 2), prompts=1, samples=2)
    open_instruct_run(folder, tokenizer, steps=(1,), prompts=1, samples=2, run_name="qwen_grpo__7")
    shard = folder / "qwen_grpo__7_rollouts_000000.jsonl"
    text = shard.read_text()
    shard.write_text(text + text.splitlines()[0][:50])
    run = rl_board.open_run(folder)
    assert any("2 runs" in row[3] and "qwen_grpo__7" in row[3] for row in problems(run, "note"))
    [[file, line, _, _]] = problems(run, "incomplete")
    assert (file, line) == (shard.name, 3)
    assert run.samples.groupby("text/run_name").size().to_dict() == {"olmo_grpo__1__1755": 4, "qwen_grpo__7": 2}


def test_registry_asks_the_new_formats_before_the_board_s_own_jsonl():
    assert FORMATS[-1] is board_jsonl and {areal, open_instruct} < set(FORMATS)
