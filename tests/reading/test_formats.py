"""The board opening other trainers' files as they are: TRL's completion logs (parquet), verl's generations dumps,
OpenRLHF's rank files and a verl fork's rollout_data_rank0.jsonl.

Every number and text checked is worked out here from the raw files (parquet through pyarrow, JSONL through json.loads
of each line), never from the board's own helpers. The TRL files are a real tiny GRPOTrainer run
(tests/support/trl_completions_run.py), trained once per session; the other trainers' files come from the byte-exact writers
of tests/support/other_trainers.py.
"""

import hashlib
import json
import math
import shutil
from collections import Counter
from pathlib import Path

import pyarrow.parquet
import pytest

import rl_board.formats.conversion
import rl_board.formats.verl
import rl_board.reading.storage
import rl_logging_board as board
from rl_board.formats.base import summed
from rl_board.formats.conversion import KNOWN_CONVERSIONS, conversions_folder
from rl_board.formats.verifiers_traces import trace_reward
from rl_board.reading.history import read_history
from rl_board.reading.index import BUNDLED_FILES, IndexCache
from rl_board.reading.search import export_jsonl
from rl_board.reading.snapshot import RunSnapshot, read_sample_tokens, read_step_batch
from rl_board.reading.store import RunStore, list_runs
from tests.support import SAMPLES
from tests.support.other_trainers import (
    verl_run,
    verl_v1_run,
    write_openrlhf_rank_files,
    write_verl_dump,
    write_verl_fork_run,
)
from tests.support.runs import jsonl_rows
from tests.support.trl_completions_run import parquet_steps

MAX_SAMPLES = 128
TRL_FORMAT = "TRL completion logs (log_completions=True: completions/completions_<step>.parquet)"
REWARD_FUNCS = ("sorted_digits", "same_digits")  # the shared run's reward functions, weighted (1.0, 0.5) in training
FLOAT_COLUMNS_NOTE = "every float column between completion and advantage is taken as one"


# ---------------------------------------------------------------------------------------------------- helpers


# The shared real TRL run (torch and trl are imported only by the tests that train).
def trl_run(conversational: bool = False) -> Path:
    from tests.support.trl_completions_run import shared_trl_completions_run

    return shared_trl_completions_run(conversational)


# A copy of a TRL output folder to change, without the model weights.
def trl_copy(output: Path, target: Path) -> Path:
    return Path(shutil.copytree(output, target, ignore=shutil.ignore_patterns("*.safetensors", "*.bin")))


# A TRL prompt as a text: a string, or a chat's messages as JSON.
def prompt_text(prompt) -> str:
    return prompt if isinstance(prompt, str) else json.dumps(prompt, ensure_ascii=False)


# A TRL completion as a text: a string, or the content of a chat completion's one assistant message.
def completion_text(completion) -> str:
    if isinstance(completion, str):
        return completion
    [message] = completion
    assert message["role"] == "assistant"
    return message["content"]


def load(run_dir) -> RunSnapshot:
    return RunStore(str(run_dir)).load(MAX_SAMPLES)


def texts(run: RunSnapshot, step: int):
    return read_step_batch(f"step {step}", run.step_rows(step)).table


def problem_rows(run: RunSnapshot, kind: str) -> list[list]:
    return run.problems[run.problems["kind"] == kind].values.tolist()


# ------------------------------------------------------------------------------------------------------- TRL


@pytest.mark.training
@pytest.mark.parametrize("conversational", [False, True], ids=["plain", "chat"])
@pytest.mark.parametrize("where", [".", "completions"])
def test_trl_output_and_completions_folder_show_every_parquet_row(conversational, where):
    """Opened at the output folder or its completions/ folder, each step shows the parquet's rows: scores, advantage, log_extra columns and texts."""
    output = trl_run(conversational)
    raw = parquet_steps(output / "completions")
    run = load(output / where)
    assert run.format == TRL_FORMAT
    assert run.reward_function_columns == sorted(f"rewards/{name}" for name in REWARD_FUNCS)
    assert not any(FLOAT_COLUMNS_NOTE in reason for *_, reason in problem_rows(run, "note"))  # named by trainer_state.json
    assert run.steps == sorted(raw) == [1, 2, 3]
    for step, rows in raw.items():
        shown = run.step_rows(step)
        assert len(shown) == len(rows) == 8
        for name in REWARD_FUNCS:
            assert shown[f"rewards/{name}"].tolist() == [row[name] for row in rows]
        assert shown["reward"].tolist() == pytest.approx([row["sorted_digits"] + row["same_digits"] for row in rows], rel=1e-12)
        assert shown["advantage"].tolist() == [row["advantage"] for row in rows]
        assert shown["extra/words"].tolist() == [float(row["words"]) for row in rows]
        assert shown["text/verdict"].tolist() == [row["verdict"] for row in rows]
        table = texts(run, step)
        assert table["prompt"].tolist() == [prompt_text(row["prompt"]) for row in rows]
        assert table["response"].tolist() == [completion_text(row["completion"]) for row in rows]
    assert run.reward_note.startswith("reward = the plain sum of the reward functions' scores")


@pytest.mark.training
@pytest.mark.parametrize("conversational", [False, True], ids=["plain", "chat"])
def test_trl_groups_are_the_completions_of_one_prompt_in_a_step(conversational):
    """The Groups view puts a step's completions of one prompt together, and different prompts apart."""
    output = trl_run(conversational)
    run = load(output)
    for step, rows in parquet_steps(output / "completions").items():
        ids_by_prompt = {}
        for row, group_id in zip(rows, run.step_rows(step)["group_id"]):
            ids_by_prompt.setdefault(prompt_text(row["prompt"]), set()).add(group_id)
        assert len(ids_by_prompt) == 2 and all(len(ids) == 1 for ids in ids_by_prompt.values())
        assert len(set.union(*ids_by_prompt.values())) == 2


@pytest.mark.training
def test_trl_reward_is_the_weighted_sum_with_the_logger_metadata(tmp_path):
    """With a rollout_meta naming the reward functions and their weights, reward is their weighted sum and the caption says so."""
    output = trl_copy(trl_run(), tmp_path / "run")
    (output / "rollout_meta_x.json").write_text(json.dumps({"reward_funcs": list(REWARD_FUNCS), "reward_weights": [1.0, 0.5]}))
    run = load(output)
    assert run.reward_note == "reward = 1 × sorted_digits + 0.5 × same_digits (weights from the logger's metadata)"
    for step, rows in parquet_steps(output / "completions").items():
        expected = [1.0 * row["sorted_digits"] + 0.5 * row["same_digits"] for row in rows]
        assert run.step_rows(step)["reward"].tolist() == pytest.approx(expected, rel=1e-12)
    assert any(row["sorted_digits"] for rows in parquet_steps(output / "completions").values() for row in rows)  # weights matter


def test_trl_reward_function_named_twice_is_one_column(tmp_path):
    """Two reward functions of one name (passed twice, or sharing a __name__): the metadata names it twice, its column is
    read once; every completions file was skipped ('could not be read')."""
    output = trl_copy(trl_run(), tmp_path / "run")
    (output / "rollout_meta_x.json").write_text(json.dumps({"reward_funcs": ["sorted_digits", "sorted_digits", "same_digits"], "reward_weights": [1.0, 1.0, 1.0]}))
    run = load(output)
    assert not (run.problems["kind"] == "skipped").any() and run.steps == sorted(parquet_steps(output / "completions"))
    assert run.step_rows(1)["rewards/sorted_digits"].tolist() == [row["sorted_digits"] for row in parquet_steps(output / "completions")[1]]


def test_trl_metadata_naming_other_reward_functions_is_said_and_the_reward_names_only_those_scored(tmp_path):
    """Metadata of another run (the logger's default folder holds several) names a function the files do not have and
    not one they have: the reward note named the absent one and the load report said nothing. (The column it does not
    name is a field, as a log_extra float column between the scores and advantage is: the two cannot be told apart.)"""
    output = trl_copy(trl_run(), tmp_path / "run")
    (output / "rollout_meta_x.json").write_text(json.dumps({"reward_funcs": ["sorted_digits", "format"], "reward_weights": [1.0, 0.5]}))
    run = load(output)
    assert run.reward_note == "reward = 1 × sorted_digits (weights from the logger's metadata)"
    notes = run.problems["reason"].tolist()
    assert "the logger's metadata gives a weight to reward function(s) format that no loaded line scored: not in the reward" in notes
    assert any(note.startswith("reward function(s) format that the run's metadata or trainer_state.json names have no column in this file") for note in notes)
    for step, rows in parquet_steps(output / "completions").items():
        assert run.step_rows(step)["reward"].tolist() == pytest.approx([row["sorted_digits"] for row in rows], rel=1e-12)


@pytest.mark.training
def test_trl_reward_skips_missing_scores_and_is_missing_when_none_scored(tmp_path):
    """A reward function that did not score a completion (None) is left out of its reward; with no score at all the reward is empty."""
    output = trl_copy(trl_run(), tmp_path / "run")
    path = output / "completions" / "completions_00001.parquet"
    frame = pyarrow.parquet.read_table(path).to_pandas()
    frame.loc[0, "sorted_digits"] = None
    frame.loc[1, ["sorted_digits", "same_digits"]] = None
    frame.to_parquet(path, index=False)
    rows = pyarrow.parquet.read_table(path).to_pylist()
    reward = load(output).step_rows(1)["reward"].tolist()
    assert reward[0] == pytest.approx(rows[0]["same_digits"], rel=1e-12)
    assert math.isnan(reward[1])
    assert reward[2:] == pytest.approx([row["sorted_digits"] + row["same_digits"] for row in rows[2:]], rel=1e-12)


# The messages of a completion as TRL 1.16 logs them (grpo_trainer.py of trl 1.16.0: parse_response's message, its
# reasoning_content and tool_calls where it has them; with tools, the tools' messages and the answer after it). A
# reasoning model's answer, a tool loop, a plain answer, and a call rolled back at the length limit (its tool message
# dropped: the assistant's call alone, content "").
TRL_CHAT_COMPLETIONS = [
    [{"role": "assistant", "reasoning_content": "6*7 is 42", "content": "42"}],
    [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "multiply", "arguments": {"a": 6, "b": 7}}}]},
     {"role": "tool", "name": "multiply", "content": "42"}, {"role": "assistant", "content": "It is 42."}],
    [{"role": "assistant", "content": "41"}],
    [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "square", "arguments": {"x": 6}}}]}],
]


def test_trl_chat_completions_keep_their_reasoning_and_tool_calls(tmp_path):
    """A one-message completion of text shows as its text, a reasoning model's reasoning before it as <think>...</think>;
    a completion that calls tools stays the messages TRL wrote (none of the keys pyarrow gives a message that lacks
    them) and is also the sample's turns, after the prompt's: the calls, the tools' results."""
    import pandas as pd

    prompt = [{"role": "user", "content": "What is 6*7?"}]
    folder = tmp_path / "out" / "completions"
    folder.mkdir(parents=True)
    pd.DataFrame({  # GRPOTrainer.log's table, as it writes it
        "step": [1] * 4, "prompt": [prompt] * 4, "completion": TRL_CHAT_COMPLETIONS, "correct": [1.0, 1.0, 0.0, 0.0], "advantage": [0.5, 0.5, -0.5, -0.5],
    }).to_parquet(folder / "completions_00001.parquet")
    assert pyarrow.parquet.read_table(folder / "completions_00001.parquet").to_pylist()[2]["completion"][0]["tool_calls"] is None  # filled in
    run = load(tmp_path / "out")
    table = texts(run, 1)
    assert table["response"].tolist()[0] == "<think>\n6*7 is 42\n</think>\n42" and table["response"].tolist()[2] == "41"
    assert [json.loads(text) for text in table["response"].tolist()[1::2]] == [TRL_CHAT_COMPLETIONS[1], TRL_CHAT_COMPLETIONS[3]]
    assert [json.loads(text) for text in table["prompt"]] == [prompt] * 4
    assert run.step_rows(1)["turns"].fillna(0).tolist() == [0, 4, 0, 2]
    lines = [json.loads(line) for line in export_jsonl(run.step_rows(1)).decode().splitlines()]
    turns = lines[1]["turns"]
    assert [(turn["role"], turn["text"]) for turn in turns] == [("user", "What is 6*7?"), ("assistant", ""), ("tool", "42"), ("assistant", "It is 42.")]
    assert turns[1]["tool_calls"] == [{"name": "multiply", "arguments": {"a": 6, "b": 7}}] and turns[2]["tool_name"] == "multiply"
    assert lines[3]["turns"][1]["tool_calls"] == [{"name": "square", "arguments": {"x": 6}}] and "turns" not in lines[0]


@pytest.mark.training
def test_trl_without_checkpoints_or_metadata_takes_the_float_columns_as_rewards(tmp_path):
    """With no trainer_state.json and no metadata, a note says the float columns are taken as reward functions; the int log_extra column is not one."""
    output = trl_copy(trl_run(), tmp_path / "run")
    for checkpoint in output.glob("checkpoint-*"):
        shutil.rmtree(checkpoint)
    run = load(output)
    assert sum(FLOAT_COLUMNS_NOTE in reason for *_, reason in problem_rows(run, "note")) == 1
    assert run.reward_function_columns == ["rewards/same_digits", "rewards/sorted_digits"]
    raw = parquet_steps(output / "completions")
    assert run.samples["extra/words"].tolist() == [float(row["words"]) for step in sorted(raw) for row in raw[step]]


@pytest.mark.training
def test_trl_training_history_is_the_newest_trainer_state():
    """The Training metrics area shows the newest checkpoint's trainer_state.json log_history, step by step."""
    output = trl_run()
    newest = max(output.glob("checkpoint-*"), key=lambda folder: int(folder.name.split("-")[1]))
    entries = [entry for entry in json.loads((newest / "trainer_state.json").read_text())["log_history"] if "loss" in entry]
    history = read_history(output)
    assert history.sources == [f"{newest.name}/trainer_state.json"]
    assert history.train["step"].tolist() == [entry["step"] for entry in entries] == [1, 2, 3]
    for (_, shown), entry in zip(history.train.iterrows(), entries):
        assert {key: shown[key] for key in entry if key != "step"} == {key: float(value) for key, value in entry.items() if key != "step"}


@pytest.mark.training
def test_trl_live_folder_skips_a_parquet_still_being_written_then_shows_its_step(tmp_path):
    """A parquet file cut off mid-write is listed as skipped while the others load; written in full, its step appears."""
    sources = sorted((trl_run() / "completions").glob("completions_*.parquet"))
    live = tmp_path / "live"
    live.mkdir()
    for source in sources[:2]:
        shutil.copy(source, live)
    store = RunStore(str(live))
    assert store.load(MAX_SAMPLES).steps == [1, 2]
    data = sources[2].read_bytes()
    (live / sources[2].name).write_bytes(data[: len(data) // 2])
    opened = load(live)  # the page opening the folder now
    [[name, line, _, reason]] = problem_rows(opened, "skipped")
    assert (name, line) == (sources[2].name, 0) and "still being written?" in reason
    assert opened.steps == [1, 2] and len(opened.samples) == 16
    (live / sources[2].name).write_bytes(data)
    assert store.needs_work(MAX_SAMPLES)
    run = store.load(MAX_SAMPLES)
    assert run.steps == [1, 2, 3] and not problem_rows(run, "skipped")
    assert run.step_rows(3)["advantage"].tolist() == pyarrow.parquet.read_table(sources[2]).column("advantage").to_pylist()


@pytest.mark.training
def test_trl_live_load_report_names_a_parquet_still_being_written(tmp_path):
    """Watching a TRL folder live, the load report names the parquet file that cannot be read yet."""
    sources = sorted((trl_run() / "completions").glob("completions_*.parquet"))
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(sources[0], live)
    store = RunStore(str(live))
    store.load(MAX_SAMPLES)
    data = sources[1].read_bytes()
    (live / sources[1].name).write_bytes(data[: len(data) // 2])
    assert [row[0] for row in problem_rows(store.load(MAX_SAMPLES), "skipped")] == [sources[1].name]


@pytest.mark.training
def test_trl_reward_follows_metadata_written_after_the_folder_was_opened(tmp_path):
    """Reward weights written into the folder's rollout_meta after opening it apply at the next Load & View."""
    output = trl_copy(trl_run(), tmp_path / "run")
    store = RunStore(str(output))
    store.load(MAX_SAMPLES)
    (output / "rollout_meta_x.json").write_text(json.dumps({"reward_funcs": ["same_digits", "sorted_digits"], "reward_weights": [0.5, 1.0]}))
    rows = parquet_steps(output / "completions")[2]
    reward = store.load(MAX_SAMPLES).step_rows(2)["reward"].tolist()
    assert reward == pytest.approx([row["sorted_digits"] + 0.5 * row["same_digits"] for row in rows], rel=1e-12)


@pytest.mark.training
def test_trl_output_folder_is_one_run():
    """Pointed at a TRL output folder, the run list holds the folder itself, not completions/ or checkpoint-*."""
    assert list_runs(str(trl_run())) == ["."]


# ------------------------------------------------------------------------------------------------------ verl


@pytest.mark.parametrize("folder, kind", [("rollout", "training"), ("validation", "validation")])
def test_verl_dumps_show_every_line_with_its_texts_score_and_extras(tmp_path, folder, kind):
    """A verl rollout or validation folder shows each line's input, output, ground truth and score, and acc/pred as fields."""
    run_dir = verl_run(tmp_path) / folder
    assert list_runs(str(tmp_path)) == ["rollout", "validation"]
    run = load(run_dir)
    assert run.format.startswith(f"verl generations dump ({kind}:")
    raw = {int(path.stem): jsonl_rows(path) for path in run_dir.glob("*.jsonl")}
    assert run.steps == sorted(raw) == ([0, 2, 4] if kind == "validation" else [1, 2, 3, 4])
    for step, lines in raw.items():
        shown, table = run.step_rows(step), texts(run, step)
        assert table["prompt"].tolist() == [line["input"] for line in lines]
        assert table["response"].tolist() == [line["output"] for line in lines]
        assert table["ground_truth"].tolist() == [line["gts"] for line in lines]
        assert shown["reward"].tolist() == [line["score"] for line in lines]
        assert shown["extra/acc"].tolist() == [float(line["acc"]) for line in lines]
        assert shown["text/pred"].tolist() == [line["pred"] for line in lines]
        if kind == "validation":
            assert shown["extra/reward (reward_extra_info)"].tolist() == [line["reward"] for line in lines]
    assert any("计算 15 减去 8" in prompt for prompt in texts(run, run.steps[0])["prompt"])  # CJK compared above


def test_verl_reward_extra_info_named_like_verl_s_own_keys_is_a_field(tmp_path):
    """verl's own input/output/gts/score are the prompt, response, ground truth and reward; reward_extra_info keys named
    reward or response (a validation dump's reward, a judge's response) are fields beside them."""
    extras = {"reward": [0.75, -0.25], "response": ["judge: ok", "judge: no"]}
    path = write_verl_dump(tmp_path / "validation", 0, ["q1", "q2"], ["a1", "a2"], ["1", "2"], [1.0, 0.0], extras)
    run = load(path.parent)
    shown, lines = run.step_rows(0), jsonl_rows(path)
    assert shown["reward"].tolist() == [line["score"] for line in lines] == [1.0, 0.0]
    assert shown["extra/reward (reward_extra_info)"].tolist() == [line["reward"] for line in lines] == [0.75, -0.25]
    assert texts(run, 0)["response"].tolist() == [line["output"] for line in lines] == ["a1", "a2"]
    assert shown["text/response (reward_extra_info)"].tolist() == [line["response"] for line in lines]


def test_verl_training_groups_are_the_samples_of_one_prompt(tmp_path):
    """In a verl training step, the Groups view has one group per prompt, of its n=4 samples."""
    run_dir = verl_run(tmp_path, n=4) / "rollout"
    run = load(run_dir)
    for path in run_dir.glob("*.jsonl"):
        lines, ids = jsonl_rows(path), run.step_rows(int(path.stem))["group_id"].tolist()
        assert sorted(Counter(ids).values()) == [4, 4, 4]
        assert len({(line["input"], group_id) for line, group_id in zip(lines, ids)}) == len(set(ids)) == 3


def test_verl_v1_groups_are_the_uid_s_prompt_also_for_a_problem_drawn_twice(tmp_path):
    """verl v1's dumps are grouped by their uid's prompt part ({uid}_{session_id}_{index}), not by prompt text."""
    run_dir = verl_v1_run(tmp_path / "rollout", n=4, prompts_per_step=3, drawn_twice=1, outputs=2)
    run = load(run_dir)
    assert run.steps == [1, 2]
    for path in run_dir.glob("*.jsonl"):
        lines, shown = jsonl_rows(path), run.step_rows(int(path.stem))
        ids, prompt_uids = shown["group_id"].tolist(), [line["uid"].rsplit("_", 2)[0] for line in lines]
        assert shown["text/uid"].tolist() == [line["uid"] for line in lines]
        assert len(set(zip(prompt_uids, ids))) == len(set(prompt_uids)) == len(set(ids)) == 4  # the same partition
        assert sorted(Counter(ids).values()) == [8, 8, 8, 8]  # n=4 rollouts x 2 outputs each
        assert len({line["input"] for line in lines}) == 3  # one problem twice: by prompt text it would be 3 groups


def test_verl_dump_bad_line_keeps_its_line_number_and_a_nan_score_is_missing(tmp_path):
    """A malformed line is reported at its line number in the verl file; a NaN score shows as no reward, not infinity."""
    run_dir = verl_run(tmp_path, steps=1, validation_steps=()) / "rollout"
    path = run_dir / "1.jsonl"
    lines = path.read_text("utf-8").splitlines()
    lines[5] = json.dumps({**json.loads(lines[5]), "score": float("nan")}, ensure_ascii=False)  # as verl writes a NaN
    lines.insert(8, lines[8][: len(lines[8]) // 2])
    path.write_text("\n".join(lines) + "\n", "utf-8")
    good, bad = {}, []
    for number, line in enumerate(path.read_text("utf-8").splitlines(), start=1):
        try:
            good[number] = json.loads(line)
        except ValueError:
            bad.append(number)
    run = load(run_dir)
    assert [row[:3] for row in problem_rows(run, "skipped")] == [["1.jsonl", number, "skipped"] for number in bad] == [["1.jsonl", 9, "skipped"]]
    shown = run.step_rows(1)
    assert shown["line"].tolist() == list(good)
    rewards = dict(zip(shown["line"], shown["reward"]))
    assert math.isnan(rewards[6]) and math.isnan(good[6]["score"])
    assert {number: reward for number, reward in rewards.items() if number != 6} == {number: line["score"] for number, line in good.items() if number != 6}
    batch = read_step_batch("step 1", shown)
    assert not batch.problems and batch.table["response"].tolist() == [line["output"] for line in good.values()]


def test_verl_dump_lone_surrogates_and_bad_bytes_show_as_replacement_characters_and_keep_every_line(tmp_path):
    """A lone surrogate escape (half an emoji) shows as �, as in the board's own lines, and the file's other lines stay;
    an escaped \\udcff is such a surrogate too, not a bad byte; bytes that are not UTF-8 show as � with the board's note."""
    run_dir = verl_run(tmp_path, steps=1, validation_steps=()) / "rollout"
    path = run_dir / "1.jsonl"
    lines = path.read_bytes().splitlines()
    lines[2] = lines[2].replace(b'"output": "', b'"output": "\\ud800', 1)
    lines[3] = lines[3].replace(b'"output": "', b'"output": "\\udcff', 1)
    lines[4] = lines[4].replace(b'"output": "', b'"output": "\xff', 1)
    path.write_bytes(b"\n".join(lines) + b"\n")
    outputs = [json.loads(line.decode("utf-8", errors="replace"))["output"] for line in lines]
    outputs = ["".join("\ufffd" if 0xD800 <= ord(character) <= 0xDFFF else character for character in output) for output in outputs]
    run = load(run_dir)
    assert not problem_rows(run, "skipped")
    bad_byte = lines[4].index(b"\xff")
    assert problem_rows(run, "note") == [["1.jsonl", 5, "note", f"invalid UTF-8 at byte {bad_byte} shown as �"]]
    shown = run.step_rows(1)
    assert shown["line"].tolist() == list(range(1, len(lines) + 1))
    assert texts(run, 1)["response"].tolist() == outputs
    assert outputs[2].startswith("\ufffd") and outputs[3].startswith("\ufffd") and outputs[4].startswith("\ufffd")


def test_a_verl_dump_of_many_steps_reopens_from_one_file_of_conversions_and_one_of_indexes(tmp_path, monkeypatch):
    """A file per step: a new store (a restart) finds every step's conversion from the run's one conversions file (no
    stamp file read, nothing converted again) and every index from the run's one index file, with the same samples;
    a step file rewritten is converted again and the others are not."""
    folder = tmp_path / "dump"
    steps = BUNDLED_FILES + 4
    for step in range(1, steps + 1):
        write_verl_dump(folder, step, [f"q{step}.{k}" for k in range(3)], [f"a{k}" for k in range(3)], ["1"] * 3, [float(k) for k in range(3)], {})
    first = RunStore(str(folder)).load(10240, parallel=False)
    cache = IndexCache()
    stamps = list(Path(conversions_folder(cache, str(folder))).glob("*.source"))
    assert len(stamps) == steps and (Path(conversions_folder(cache, str(folder))) / KNOWN_CONVERSIONS).is_file()
    for stamp in stamps:
        stamp.unlink()  # a restart must not need them
    converted, indexed = [], []
    real_convert, real_load = rl_board.formats.verl.dump_lines, IndexCache.load
    monkeypatch.setattr(rl_board.formats.verl, "dump_lines", lambda *args: converted.append(1) or real_convert(*args))
    monkeypatch.setattr(IndexCache, "load", lambda self, path: indexed.append(path) or real_load(self, path))
    again = RunStore(str(folder)).load(10240, parallel=False)
    assert not converted and not indexed
    assert again.samples.drop(columns=["index_id"]).equals(first.samples.drop(columns=["index_id"]))
    write_verl_dump(folder, 3, ["changed"] * 3, ["x"] * 3, ["1"] * 3, [5.0] * 3, {})
    changed = RunStore(str(folder)).load(10240, parallel=False)
    assert len(converted) == 1 and changed.samples.loc[changed.samples["step"] == 3, "reward"].tolist() == [5.0] * 3


def test_verl_jsonl_export_gives_the_converted_lines(tmp_path):
    """Downloading a verl step as JSONL gives the lines as the board converted them: the board's keys (prompt, response, ground_truth, reward), not verl's."""
    run_dir = verl_run(tmp_path, steps=1, validation_steps=()) / "rollout"
    exported = [json.loads(line) for line in export_jsonl(load(run_dir).step_rows(1)).decode("utf-8").splitlines()]
    expected = [
        {"prompt": line["input"], "response": line["output"], "ground_truth": line["gts"], "reward": line["score"], "step": line["step"],
         "acc": line["acc"], "pred": line["pred"], "group_id": hashlib.blake2b(line["input"].encode(), digest_size=8).hexdigest()}
        for line in jsonl_rows(run_dir / "1.jsonl")
    ]
    assert exported == expected


# --------------------------------------------------------------------------------------------------- OpenRLHF


def test_openrlhf_rank_files_show_every_line_and_their_token_values(tmp_path):
    """OpenRLHF's data_rank<r>.jsonl open as such: every line, steps from 1, and each token's value and reward as logged."""
    paths = write_openrlhf_rank_files(tmp_path / "openrlhf", steps=3, ranks=2)
    raw = {path.name: jsonl_rows(path) for path in paths}
    run = load(tmp_path / "openrlhf")
    assert run.format.startswith("OpenRLHF rank files")
    assert run.report.set_index("file")["loaded"].to_dict() == {name: len(lines) for name, lines in raw.items()}
    assert run.steps == sorted({line["step"] for lines in raw.values() for line in lines}) == [1, 2, 3]
    padded = 0
    for row in run.samples.itertuples():
        line = raw[Path(row.path).name][row.line - 1]
        assert row.reward == line["reward"] and row.step == line["step"]
        tokens = read_sample_tokens(row.path, row.offset, row.length, row.step)
        n = len(line["logprobs"])
        assert tokens.values.tolist() == line["values"] and tokens.token_rewards.tolist() == line["token_rewards"]
        assert tokens.logprobs.tolist() == line["logprobs"] and tokens.ref_logprobs.tolist() == line["ref_logprobs"]
        assert tokens.response_tokens == line["response_tokens"][:n]
        padded += len(line["response_tokens"]) > n
    assert padded  # some responses kept their trailing <PAD>


# -------------------------------------------------------------------------------------------------- verl fork


def test_verl_fork_experiment_lists_opens_and_shows_rm_response(tmp_path):
    """A verl fork's <project>/<experiment> folder is listed, opens as the fork's format, and each line's rm_response is in Other fields."""
    experiment = write_verl_fork_run(tmp_path, "proj", "exp", steps=2)
    assert list_runs(str(tmp_path / "proj")) == ["exp"]
    run = load(experiment)
    assert run.format.startswith("verl fork's rollout_data_rank<r>.jsonl")
    lines = jsonl_rows(experiment / "rollout_data_rank0.jsonl")
    assert len(run.samples) == len(lines) and run.steps == [1, 2]
    for row in run.samples.itertuples():
        line = lines[row.line - 1]
        assert row.reward == line["reward"] and row.extra_keys > 0  # the page offers "Other fields of this line"
        fields = board.load_other_fields(row.index_id, row.path, int(row.offset), int(row.length))  # what that area shows
        assert fields["rm_response"] == line["rm_response"]


# -------------------------------------------------------------------------------------------- the page (AppTest)


def test_bundled_samples_list_the_other_trainers_runs():
    """The bundled rollout_samples root lists the TRL and verl runs."""
    assert {"from_trl_log_completions", "from_verl_rollout_data", "from_verl_validation_data"} <= set(list_runs(str(SAMPLES)))


@pytest.mark.training
def test_trl_completions_folder_opened_alone_shows_the_output_folders_history():
    """Opened at its completions/ folder, a TRL run's training history is the output folder's checkpoints'."""
    run = load(trl_run() / "completions")
    assert run.history_dir == str(trl_run())
    history = read_history(run.history_dir)
    assert history.sources and history.sources[0].startswith("checkpoint-") and len(history.train)


@pytest.mark.parametrize("case", ["long first line", "empty first file", "byte order mark"])
def test_verl_dumps_are_told_by_their_keys_however_their_first_file_starts(tmp_path, case):
    """A dump whose first line is longer than any read-ahead (a reasoning model's), whose first file is still empty, or
    which starts with a byte order mark, still opens as verl's, every line loaded."""
    output = "x" * 300_000 if case == "long first line" else "a"
    write_verl_dump(tmp_path, 1, ["q1", "q2"], [output, "b"], ["1", "2"], [1.0, 0.0], {})
    write_verl_dump(tmp_path, 2, ["q3"], ["c"], ["3"], [0.5], {})
    if case == "empty first file":
        (tmp_path / "1.jsonl").write_bytes(b"")
    if case == "byte order mark":
        (tmp_path / "1.jsonl").write_bytes(b"\xef\xbb\xbf" + (tmp_path / "1.jsonl").read_bytes())
    run = load(tmp_path)
    assert run.format.startswith("verl generations dump (training:")
    assert len(run.samples) == (1 if case == "empty first file" else 3) and run.problems.empty
    assert run.step_rows(run.steps[-1])["reward"].tolist() == [0.5]


# A parquet file as GRPOTrainer.log() writes one (pandas' to_parquet of its table), for tests that need no training.
def write_completions(folder: Path, step: int, accuracy: list[float]) -> Path:
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame({"step": step, "prompt": "p", "completion": [f"c{i}" for i in range(len(accuracy))], "accuracy": accuracy, "advantage": 0.0})
    path = folder / f"completions_{step:05d}.parquet"
    table.to_parquet(path)
    return path


def test_a_parquet_that_cannot_be_read_is_not_read_again_until_it_changes(tmp_path, monkeypatch):
    """A live check does not fetch a broken parquet again and again: once it changes, it is read (and shown)."""
    write_completions(tmp_path / "completions", 1, [1.0])
    broken = write_completions(tmp_path / "completions", 2, [0.5, 0.25])
    data = broken.read_bytes()
    broken.write_bytes(data[: len(data) // 2])
    reads = Counter()
    read_file = rl_board.reading.storage.read_file
    monkeypatch.setattr(rl_board.formats.conversion, "read_file", lambda path: reads.update([Path(path).name]) or read_file(path))
    store = RunStore(str(tmp_path))
    assert [row[0] for row in problem_rows(store.load(MAX_SAMPLES), "skipped")] == [broken.name]
    assert not store.needs_work(MAX_SAMPLES) and not store.needs_work(MAX_SAMPLES)
    assert reads[broken.name] == 1
    broken.write_bytes(data)
    assert store.needs_work(MAX_SAMPLES)
    assert store.load(MAX_SAMPLES).step_rows(2)["reward"].tolist() == [0.5, 0.25]


def test_a_string_in_a_trl_reward_column_is_left_out_with_the_row_s_reward_named_in_the_user_s_file(tmp_path):
    """A reward function's cell that is not a number is left out of its row, with the row's reward (a sum without it
    would understate it), as the board leaves out an optional key of the wrong type in a line of its own: the row is
    kept, its reward without a number. One written as text ("0.75") is read as the number, as the board reads its own
    lines; the load report names the parquet file (not its conversion) and the row (line N is row N, from 1)."""
    (tmp_path / "rollout_meta_x.json").write_text(json.dumps({"reward_funcs": ["accuracy"], "num_generations": 3}))
    write_completions(tmp_path / "completions", 1, [1.0, 0.5, 0.0])
    path = write_completions(tmp_path / "completions", 2, [0.25, 0.5, 0.75])
    table = pyarrow.parquet.read_table(path)
    table = table.set_column(table.column_names.index("accuracy"), "accuracy", pyarrow.array(["0.75", "bad", None]))  # a string column
    pyarrow.parquet.write_table(table, path)
    bad_row = [row["accuracy"] for row in pyarrow.parquet.read_table(path).to_pylist()].index("bad") + 1
    run = load(tmp_path)
    assert not problem_rows(run, "skipped") and bad_row == 2
    assert problem_rows(run, "note") == [[path.name, 2, "note", "reward function accuracy: 'bad' is not a number, left out with the row's reward"]]
    assert run.steps == [1, 2] and run.step_rows(1)["reward"].tolist() == [1.0, 0.5, 0.0]
    kept = run.step_rows(2)
    assert kept["line"].tolist() == [1, 2, 3] and kept["reward"].tolist()[0] == 0.75  # a number as text read as one
    assert kept["reward"].isna().tolist() == [False, True, True] and kept["rewards/accuracy"].isna().tolist() == [False, True, True]
    # With two functions, the row's reward is not the other's score: the weighted sum at load keeps it without a number.
    (tmp_path / "rollout_meta_x.json").write_text(json.dumps({"reward_funcs": ["accuracy", "format"], "reward_weights": [1.0, 2.0], "num_generations": 3}))
    table = table.append_column("format", pyarrow.array([0.5, 0.5, None]))
    pyarrow.parquet.write_table(table, path)
    two = load(tmp_path).step_rows(2)
    assert two["reward"].tolist()[0] == 0.75 + 2 * 0.5 and two["reward"].isna().tolist() == [False, True, True] and two["rewards/format"].tolist()[1] == 0.5


def test_infinite_trl_scores_are_kept_and_opposite_ones_leave_the_reward_without_a_number(tmp_path):
    """A reward function that overflows scores ±inf, which TRL writes into its parquet as it is. The converted line keeps
    it (as Infinity: msgspec would write null, a reward without a number), so the board shows and names it as in a line
    of its own. A row scored +inf by one function and −inf by another has no reward (their sum is no number), with a
    note; finite scores whose sum is beyond a float's range sum to +inf. Neither stops the file's conversion."""
    (tmp_path / "rollout_meta_x.json").write_text(json.dumps({"reward_funcs": ["accuracy", "format"], "num_generations": 2}))
    path = write_completions(tmp_path / "completions", 1, [math.inf, math.inf, 1e308, 0.5])
    table = pyarrow.parquet.read_table(path).append_column("format", pyarrow.array([1.0, -math.inf, 1e308, math.nan]))
    pyarrow.parquet.write_table(table, path)
    run = load(tmp_path)
    assert not problem_rows(run, "skipped")
    assert problem_rows(run, "note") == [[path.name, 2, "note", "reward functions scored +inf and −inf: the row's reward has no number"]]
    rows = run.step_rows(1)
    assert rows["reward"].tolist()[0] == math.inf and math.isnan(rows["reward"].tolist()[1]) and rows["reward"].tolist()[2:] == [math.inf, 0.5]
    assert rows["rewards/format"].tolist()[:3] == [1.0, -math.inf, 1e308] and math.isnan(rows["rewards/format"].tolist()[3])  # NaN: did not score
    assert rows["rewards/accuracy"].tolist() == [math.inf, math.inf, 1e308, 0.5]


def test_a_sum_of_scores_never_stops_a_conversion():
    """fsum raises where +inf meets −inf and where finite scores sum beyond a float's range, which stopped a whole file's
    conversion: summed gives NaN and ±inf there, and fsum's exact sum elsewhere. A verifiers trace's weighted reward
    (prime-rl's traces) is one such sum."""
    assert summed([0.1] * 10) == 1.0  # exact: a plain sum gives 0.9999999999999999
    assert summed([1e308, 1e308]) == math.inf and summed(score for score in [-1e308, -1e308]) == -math.inf  # a generator read once
    assert summed([math.inf, 1.0]) == math.inf and math.isnan(summed([math.inf, -math.inf]))
    assert trace_reward({"a": {"score": 1e308, "weight": 10}, "b": {"score": 2.0}}) == math.inf
    assert math.isnan(trace_reward({"a": {"score": 1e308, "weight": 10}, "b": {"score": -1e308, "weight": 10}}))


@pytest.mark.parametrize("where", ["completions", "."])
def test_a_folder_named_like_a_trl_completions_file_is_named_as_skipped(tmp_path, where):
    """A folder named completions_<step>.parquet is not a step's file: the load report says so, its step is not silently missing."""
    write_completions(tmp_path / where, 1, [1.0])
    (tmp_path / where / "completions_00002.parquet").mkdir()
    run = load(tmp_path)
    assert run.steps == [1]
    [[name, line, _, reason]] = problem_rows(run, "skipped")
    assert (name, line) == ("completions_00002.parquet", 0) and reason.startswith("a folder, not a parquet file")


def test_jsonl_files_beside_trl_completions_are_named_as_not_read(tmp_path):
    """A folder holding TRL's completions and rank files shows the completions and says the rank files were not read."""
    write_completions(tmp_path / "completions", 1, [1.0])
    write_verl_dump(tmp_path, 1, ["q"], ["a"], ["1"], [1.0], {})
    notes = [row[3] for row in problem_rows(load(tmp_path), "note")]
    assert any(note.startswith("1 .jsonl file(s) beside TRL's completions are not read") for note in notes)


def test_typed_reward_weights_keep_the_metadata_s_for_functions_not_typed():
    """Typing one weight changes that function's alone; an unknown name or a bad number is refused with the names."""
    assert board.parsed_weights("acc=2", {"acc": 1.0, "fmt": 0.5}) == ({"acc": 2.0, "fmt": 0.5}, None)
    assert board.parsed_weights("", {"acc": 1.0}) == ({}, None)
    for bad in ("nope=1", "acc=x", "acc", "acc=inf"):
        weights, problem = board.parsed_weights(bad, {"acc": 1.0, "fmt": 0.5})
        assert weights == {} and problem.startswith("Reward weights:") and "(acc, fmt)" in problem
