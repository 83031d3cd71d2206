"""The board opening SkyRL's evaluation dumps and Relax's rollout results as their writers write them (copies of their
code paths, tests/support/skyrl_relax.py): samples, texts, rewards, groups and fields checked against the raw files
(json.loads of each line here, never the converters), SkyRL's pickles listed as not read (never opened), and bad lines
counted in the load report."""

import json
from pathlib import Path

import pytest

import rl_board
from rl_board.formats import conversion, relax, skyrl
from rl_board.reading.search import export_jsonl
from tests.support.skyrl_relax import relax_run, skyrl_run
from tests.support.unprivileged import output_of_unprivileged


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


# Every loaded line as the board converted it (what a JSONL download gives).
def board_lines(run) -> list[dict]:
    return [json.loads(line) for step in run.steps for line in export_jsonl(run.snapshot.step_rows(step)).decode("utf-8").splitlines()]


# The partition of a step's samples into groups, as sets of positions: equal whatever the groups are named.
def partition(keys) -> set:
    groups = {}
    for position, key in enumerate(keys):
        groups.setdefault(key, set()).add(position)
    return {frozenset(members) for members in groups.values()}


# ------------------------------------------------------------------------------------------------------------ SkyRL


@pytest.mark.parametrize("token_level", [False, True])
def test_skyrl_eval_dumps_are_a_line_per_sample_grouped_by_prompt(tmp_path, token_level):
    export = skyrl_run(tmp_path / "runs" / "export", steps=(0, 5), n=2, token_level=token_level)
    run = rl_board.open_run(export)
    assert run.format == skyrl.NAME and run.steps == [0, 5]
    raw = {}  # step -> the raw lines, in the files' order (by data source file name)
    for folder in sorted((export / "dumped_evals").iterdir()):
        step = int(folder.name.split("_")[2])
        raw[step] = [line for path in sorted(folder.glob("*.jsonl")) if path.name != "aggregated_results.jsonl" for line in lines(path)]
    for step, expected in raw.items():
        shown = run.step(step)
        assert len(shown) == len(expected)
        by_text = sorted(zip(shown["prompt"], shown["response"], shown["reward"], shown["text/data_source"]))
        rewards = [sum(line["score"]) if token_level else line["score"] for line in expected]
        assert by_text == sorted(zip([line["input_prompt"] for line in expected], [line["output_response"] for line in expected], rewards, [line["data_source"] for line in expected]))
        ordered = shown.sort_values(["prompt", "response"], kind="stable").reset_index(drop=True)
        assert partition(ordered["group_id"]) == partition(ordered["prompt"])  # the samples of one prompt
    downloaded = board_lines(run)
    assert sorted(line["env_extras"]["reward_spec"]["ground_truth"] for line in downloaded) == sorted(
        line["env_extras"]["reward_spec"]["ground_truth"] for expected in raw.values() for line in expected)
    if token_level:
        assert sorted(map(tuple, (line["token_rewards"] for line in downloaded))) == sorted(tuple(line["score"]) for expected in raw.values() for line in expected)
    assert {line["stop_reason"] for line in downloaded} <= {"stop", "length"} and {line["eval_dump"] for line in downloaded} == {"global_step_0_evals", "global_step_5_evals"}
    # the pickles are listed, never opened; the aggregated metrics named
    problems = run.problems
    pickles = problems[problems["kind"] == "not read"]
    assert sorted(pickles["file"]) == sorted(f"dumped_data/{path.name}" for path in (export / "dumped_data").glob("*.pkl"))
    assert pickles["reason"].str.contains("unpickling runs code").all()
    assert sorted(problems[problems["kind"] == "note"]["file"]) == ["global_step_0_evals/aggregated_results.jsonl", "global_step_5_evals/aggregated_results.jsonl"]
    assert rl_board.list_runs(export) == [str(export)] and rl_board.list_runs(export.parent) == [str(export)]
    assert rl_board.open_run(export / "dumped_evals").samples["reward"].tolist() == run.samples["reward"].tolist()


def test_skyrl_s_evaluation_before_training_and_an_eval_only_one_stay_apart_at_step_0(tmp_path):
    """eval_before_train writes global_step_0_evals, an evaluation outside training eval_only: both step 0, each of its
    prompts a group of its own folder's samples. A length stop is truncated; the answer (env_extras' reward_spec) is the
    ground truth; one evaluation's folder opens alone."""
    export = skyrl_run(tmp_path / "export", steps=(0, None), n=2)
    run = rl_board.open_run(export)
    assert run.steps == [0]
    shown = run.step(0)
    raw = [line for folder in ("global_step_0_evals", "eval_only") for path in sorted((export / "dumped_evals" / folder).glob("*.jsonl")) if path.name != "aggregated_results.jsonl" for line in lines(path)]
    assert sorted(set(shown["text/eval_dump"])) == ["eval_only", "global_step_0_evals"] and len(shown) == len(raw)
    assert partition(shown["group_id"]) == partition(zip(shown["prompt"], shown["text/eval_dump"]))
    downloaded = board_lines(run)
    assert sorted((line["stop_reason"], line["truncated"]) for line in downloaded) == sorted((line["stop_reason"], line["stop_reason"] == "length") for line in raw)
    assert {True, False} <= {line["truncated"] for line in downloaded}
    assert sorted(shown["ground_truth"]) == sorted(line["env_extras"]["reward_spec"]["ground_truth"] for line in raw)
    alone = rl_board.open_run(export / "dumped_evals" / "global_step_0_evals")
    assert alone.format == skyrl.NAME and alone.problems["kind"].tolist() == ["note"]
    assert sorted(alone.step(0)["response"]) == sorted(line["output_response"] for line in raw[: len(raw) // 2])
    assert rl_board.open_run(export / "dumped_evals" / "eval_only").format == skyrl.NAME


def test_skyrl_pickles_are_never_opened_and_bad_lines_are_counted(tmp_path, monkeypatch):
    export = skyrl_run(tmp_path / "export", steps=(None, 3))
    monkeypatch.setattr("pickle.load", lambda *args, **kwargs: pytest.fail("a pickle was opened"))
    monkeypatch.setattr("pickle.loads", lambda *args, **kwargs: pytest.fail("a pickle was opened"))
    dump = export / "dumped_evals" / "global_step_3_evals" / "openai_gsm8k.jsonl"
    raw = dump.read_text("utf-8").splitlines()
    dump.write_text("\n".join([raw[0], "{not json", json.dumps({**json.loads(raw[1]), "score": "high"}), *raw[2:]]) + "\n" + raw[2][:30], "utf-8")
    run = rl_board.open_run(export)
    assert run.steps == [0, 3]  # eval_only: step 0
    step = run.step(3)
    kept = [json.loads(line) for line in dump.read_text("utf-8").splitlines()[:-1] if line.startswith("{\"")]
    others = lines(export / "dumped_evals" / "global_step_3_evals" / "math.jsonl")
    assert len(step) == len(kept) + len(others)
    assert step["reward"].isna().sum() == 1  # "high" is not a reward
    kinds = run.problems.groupby("kind").size().to_dict()
    assert kinds.get("incomplete") == 1 and kinds.get("not read") == 2 and sum(kinds.values()) - kinds["note"] - kinds["not read"] - kinds["incomplete"] == 1
    only_pickles = skyrl_run(tmp_path / "training_only", steps=(), train_steps=(1,))
    bare = rl_board.open_run(only_pickles)
    assert bare.samples.empty and bare.problems["kind"].tolist() == ["not read"]


# ------------------------------------------------------------------------------------------------------------ Relax


@pytest.mark.parametrize("dict_reward", [False, True])
def test_relax_results_are_a_line_per_sample_with_tokens_and_rollout_logprobs(tmp_path, dict_reward):
    folder = relax_run(tmp_path / "runs" / "rollout_result", steps=(0, 1), eval_steps=(1,), dict_reward=dict_reward)
    run = rl_board.open_run(folder)
    assert run.format == relax.NAME and run.steps == [0, 1] and run.problems.empty
    raw = [(split, int(path.stem), record) for split in ("train", "eval") for path in sorted((folder / split).glob("*.jsonl")) for record in lines(path)]
    samples = run.samples
    assert len(samples) == len(raw)
    assert sorted(samples["text/split"]) == sorted(split for split, _, _ in raw)
    shown = board_lines(run)
    key = lambda line: (line["split"], line["step"], line.get("dataset") or "", line["sample_index"])  # noqa: E731
    ordered_lines, ordered_raw = sorted(shown, key=key), sorted(raw, key=lambda item: (item[0], item[1], item[2].get("dataset") or "", item[2]["sample_index"]))
    for line, (split, step, record) in zip(ordered_lines, ordered_raw):
        assert (line["split"], line["step"], line["prompt"], line["response"]) == (split, step, record["prompt"], record["response"])
        if dict_reward and split == "train":
            assert line["reward"] is None and line["rewards_per_func"] == {name: value for name, value in record["reward"].items() if isinstance(value, float)}
        else:
            assert line["reward"] == record["reward"]
        assert line["response_tokens"] == [str(token) for token in record["response_token_ids"]]
        assert line["logprobs"] == [value if keep else None for value, keep in zip(record["response_rollout_log_probs"], record["response_rollout_log_probs_mask"])]
        assert line["stop_reason"] == {"completed": "stop", "truncated": "length", "aborted": "error"}[record["status"]] and line["truncated"] == (record["status"] == "truncated")
        assert line["ground_truth"] == record["label"] and line["agent_turns"] == record["agent_turns"] and line["response_token_count"] == record["response_token_count"]
    for split, step in {(split, step) for split, step, _ in raw}:  # the samples of one group_index (in one dataset) a group
        pairs = [(line["group_id"], (record.get("dataset"), record["group_index"])) for line, (s, t, record) in zip(ordered_lines, ordered_raw) if (s, t) == (split, step)]
        assert partition(group for group, _ in pairs) == partition(expected for _, expected in pairs)
    if dict_reward:
        train = samples[samples["text/split"] == "train"]
        assert train["rewards/accuracy"].tolist() == [record["reward"]["accuracy"] for split, _, record in sorted(raw, key=lambda item: (item[0], item[1])) if split == "train"]
    tokens = run.tokens(0, 0)
    first = lines(folder / "train" / "0.jsonl")[0]
    assert tokens["token"].tolist() == [str(token) for token in first["response_token_ids"]]
    assert rl_board.open_run(folder / "eval").samples["step"].tolist() == [1] * 4
    assert sorted(rl_board.list_runs(folder)) == [str(folder / "eval"), str(folder / "train")]


def test_relax_bad_lines_are_counted(tmp_path):
    folder = relax_run(tmp_path / "rollout_result", steps=(0,), eval_steps=())
    path = folder / "train" / "0.jsonl"
    raw = path.read_text("utf-8").splitlines()
    path.write_text("\n".join([raw[0], "[1, 2]", json.dumps({**json.loads(raw[1]), "reward": "x", "response_token_ids": "oops"}), *raw[2:]]) + "\n", "utf-8")
    run = rl_board.open_run(folder / "train")
    assert run.format == relax.NAME and len(run.samples) == len(raw)
    assert run.samples["reward"].isna().sum() == 1
    assert run.problems[["line", "reason"]].values.tolist() == [
        [2, "a JSON array, not an object"],
        [3, "response_token_ids is a JSON string, not a list: left out, with its log-probs"],
    ]


# Log-probs the writer gave another length than the response's tokens (nothing in _sample_to_summary_record makes them
# agree) cannot be put on the tokens: left out with a note, as a mask of another length is ignored with one.
def test_relax_logprobs_of_another_length_are_left_out_with_a_note(tmp_path):
    folder = relax_run(tmp_path / "rollout_result", steps=(0,), eval_steps=())
    path = folder / "train" / "0.jsonl"
    raw = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    assert all(len(line["response_rollout_log_probs"]) == len(line["response_token_ids"]) >= 2 for line in raw)
    raw[0]["response_rollout_log_probs"] = raw[0]["response_rollout_log_probs"][:-1]
    raw[1]["response_rollout_log_probs_mask"] = [True]
    path.write_text("".join(json.dumps(line) + "\n" for line in raw), "utf-8")
    run = rl_board.open_run(folder / "train")
    tokens = len(raw[0]["response_token_ids"])
    assert run.problems[["line", "kind", "reason"]].values.tolist() == [
        [1, "note", f"response_rollout_log_probs of {tokens - 1} values for {tokens} tokens: left out"],
        [2, "note", f"response_rollout_log_probs_mask of 1 values for {len(raw[1]['response_token_ids'])} tokens: ignored, every log-prob kept"],
    ]
    assert "logp" not in run.tokens(0, 0) and run.tokens(0, 1)["logp"].tolist() == raw[1]["response_rollout_log_probs"]


# An evaluation folder opened on its own under another name is told by its records' dataset key, read from the first
# file that can be read: one this process may not read (its row says so) made the evaluation's lines train.
def test_relax_evaluations_are_told_by_a_file_that_can_be_read(tmp_path):
    folder = relax_run(tmp_path / "rollout_result", steps=(), eval_steps=(1, 2, 3))
    renamed = (folder / "eval").rename(tmp_path / "evals_copy")
    (renamed / "1.jsonl").chmod(0)
    load = f"import rl_board; run = rl_board.open_run({str(renamed)!r}); print(sorted(set(run.samples['text/split'])), run.problems['file'].tolist())"
    assert output_of_unprivileged(load, {"RL_LOGGING_BOARD_CACHE": str(tmp_path / "cache")}) == "['eval'] ['eval_1.jsonl']"


# A conversion made by another version of the board's converters is made again: the cached conversions of finished
# files (Relax's never change) would keep what an older converter made of them, without today's notes.
def test_a_conversion_made_by_an_earlier_version_is_made_again(tmp_path, monkeypatch):
    folder = relax_run(tmp_path / "rollout_result", steps=(0,), eval_steps=())
    path = folder / "train" / "0.jsonl"
    raw = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    raw[0]["response_rollout_log_probs"] = raw[0]["response_rollout_log_probs"][:-1]
    path.write_text("".join(json.dumps(line) + "\n" for line in raw), "utf-8")
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(conversion, "CONVERSION_FORMAT", conversion.CONVERSION_FORMAT - 1)
    without_notes = relax.result_lines
    monkeypatch.setattr(relax, "result_lines", lambda data, context: (without_notes(data, context)[0], []))
    assert rl_board.open_run(folder / "train").problems.empty  # as an earlier converter, without the note, made it
    monkeypatch.undo()
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(tmp_path / "cache"))
    assert len(rl_board.open_run(folder / "train").problems) == 1


def test_skyrl_training_dumps_converted_in_the_training_environment(tmp_path):
    """examples/convert_skyrl_training_dump.py on a batch laid out as SkyRL's convert_prompts_responses_to_batch_tensors
    lays it (skyrl/train/dataset/preprocess.py: sequences left-padded, response tensors right-aligned), pickled as
    TensorBatch.save pickles it (here a dict of tensors: the class needs SkyRL installed)."""
    torch = pytest.importorskip("torch")
    import pickle
    import sys

    from tests.support import PROJECT

    sys.path.insert(0, str(PROJECT / "examples"))
    from convert_skyrl_training_dump import convert

    prompts, responses = [[5, 6, 7], [5, 6, 7], [8, 9]], [[10, 11], [12, 13, 14, 15], [16]]
    loss_masks = [[1, 1], [1, 0, 0, 1], [1]]
    width, longest = max(len(p) + len(r) for p, r in zip(prompts, responses)), max(map(len, responses))
    right = lambda rows, pad=0.0: torch.tensor([[pad] * (longest - len(row)) + row for row in rows], dtype=torch.float32)  # noqa: E731
    batch = {
        "sequences": torch.tensor([[0] * (width - len(p) - len(r)) + p + r for p, r in zip(prompts, responses)]),
        "attention_mask": torch.tensor([[0] * (width - len(p) - len(r)) + [1] * (len(p) + len(r)) for p, r in zip(prompts, responses)]),
        "response_mask": right([[1.0] * len(r) for r in responses]),
        "loss_mask": right([list(map(float, mask)) for mask in loss_masks]),
        "action_log_probs": right([[-0.1 * (i + 1)] * len(r) for i, r in enumerate(responses)]),
        "rollout_logprobs": right([[-0.2] * len(r) for r in responses]),
        "advantages": right([[float(i)] * len(r) for i, r in enumerate(responses)]),
    }
    dump = tmp_path / "dumped_data" / "global_step_3_training_input.pkl"
    dump.parent.mkdir()
    dump.write_bytes(pickle.dumps(batch))
    assert convert([dump], tmp_path / "runs" / "converted") == 3
    run = rl_board.open_run(tmp_path / "runs" / "converted")
    step = run.step(3)
    assert step["response"].tolist() == [" ".join(map(str, r)) for r in responses] and step["prompt"].tolist() == [" ".join(map(str, p)) for p in prompts]
    assert step["advantage"].tolist() == [0.0, 1.0, 2.0] and step["reward"].isna().all()
    assert partition(step["group_id"]) == partition(map(tuple, prompts))
    tokens = run.tokens(3, 1)
    assert tokens["token"].tolist() == ["12", "13", "14", "15"] and tokens["tool"].tolist() == [False, True, True, False]
    assert tokens["logp"].round(6).tolist()[0] == -0.2 and tokens["sampler_logp"].round(6).tolist()[0] == -0.2


def test_a_lone_surrogate_in_a_skyrl_or_relax_line_costs_one_character_not_the_file(tmp_path):
    export = skyrl_run(tmp_path / "export", steps=(0,), n=2)
    results = relax_run(tmp_path / "rollout_result", steps=(0,), eval_steps=())
    for run_dir, path, key in (
        (export, export / "dumped_evals" / "global_step_0_evals" / "math.jsonl", b'"output_response": "'),
        (results / "train", results / "train" / "0.jsonl", b'"response": "'),
    ):
        lines = path.read_bytes().split(b"\n")
        assert key in lines[0]
        lines[0] = lines[0].replace(key, key + b"\\ud800", 1)  # valid JSON: half an emoji
        path.write_bytes(b"\n".join(lines))
        run = rl_board.open_run(run_dir)
        assert not (run.problems["kind"] == "skipped").any()
        assert run.step(run.steps[0])["response"].str.startswith("\ufffd").sum() == 1
