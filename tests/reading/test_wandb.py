"""The board opening W&B offline run folders as wandb itself writes them (tests/support/wandb_runs.py runs wandb.init
offline, wandb.log of metrics and of wandb.Table as TRL's GRPOTrainer and Hugging Face's WandbCallback log them): every
step's table file is a step; samples, texts, rewards, groups and fields equal a recomputation from the table files
(json, pandas); the history and the steps of other tables equal what wandb's own reader (DataStore and its protobuf
Record) finds in the transaction log; bad input is counted."""

import json
import math
import shutil
import time

import numpy as np
import pandas as pd
import pytest

import rl_board
from rl_board.formats import wandb_tables
from rl_board.reading.wandb_log import read_log
from tests.support.wandb_runs import (
    EVAL_ROWS,
    EVALUATED_STEP,
    NUM_GENERATIONS,
    OPENRLHF_STEPS,
    PER_STEP_ROWS,
    QUESTIONS,
    REASONING_STEP,
    REWARD_FUNCTIONS,
    REWARD_WEIGHTS,
    TRL_CALLBACK_STEPS,
    table_files,
    write_wandb,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("wandb")
    return {name: write_wandb(root / name, f"write_{name}") for name in ("grpo", "bare", "openrlhf", "trl_callback", "grpo_evaluation", "per_step")}


# The log's history rows as wandb's own reader gives them: {key (nested keys joined by "."): value}.
def wandb_history(run_folder) -> list[dict]:
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal.datastore import DataStore

    (log,) = run_folder.glob("run-*.wandb")
    copy = run_folder.parent / f"{log.name}.copy"  # DataStore opens its file for writing too
    shutil.copy(log, copy)
    store, rows = DataStore(), []
    store.open_for_scan(str(copy))
    while (data := store.scan_data()) is not None:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or ".".join(item.nested_key): json.loads(item.value_json) for item in record.history.item})
    store.close()
    copy.unlink()
    return rows


# A completions table's rows, recomputed: the reward is the weighted NaN-skipping sum TRL makes, groups the
# prompt's completions within the step.
def expected_completions(tables: dict, weights: dict) -> pd.DataFrame:
    rows = []
    for path, table in tables.items():
        if not path.name.startswith("completions_"):
            continue
        for row in table["data"]:
            cells = dict(zip(table["columns"], row))
            scores = {name: cells[name] for name in REWARD_FUNCTIONS}
            weighted = [weights.get(name, 1.0) * score for name, score in scores.items() if not math.isnan(score)]
            rows.append({
                "step": cells["step"], "prompt": json.dumps(cells["prompt"], ensure_ascii=False), "response": response_text(cells["completion"]),
                "reward": sum(weighted) if weighted else np.nan, "advantage": cells["advantage"],
                **{f"rewards/{name}": score for name, score in scores.items()}, "file": path.name,
            })
    frame = pd.DataFrame(rows)
    frame["group"] = frame.groupby("step")["prompt"].transform(lambda prompts: pd.factorize(prompts)[0])
    return frame


# A completion of one assistant message as the board shows it: its reasoning (a reasoning model's) before its text, as
# chat templates write it.
def response_text(completion: list) -> str:
    [message] = completion
    reasoning = message.get("reasoning_content")
    return f"<think>\n{reasoning}\n</think>\n{message['content']}" if reasoning else message["content"]


# The board's samples with their texts, in the board's order.
def board_samples(run) -> pd.DataFrame:
    steps = [run.step(step).assign(step=step) for step in run.steps]
    return pd.concat(steps, ignore_index=True)


def test_every_step_s_completions_table_is_a_step_with_its_rows(written):
    """A local run keeps every step's table (the W&B page shows the latest): each completions_<W&B step>_<hash> file is
    the Trainer's step its step column says, its rows that step's samples, with their prompts, responses, rewards
    per function, reward (weighted by the config's reward_weights), advantages and groups."""
    run_folder = written["grpo"]
    tables = table_files(run_folder)
    expected = expected_completions(tables, dict(zip(REWARD_FUNCTIONS, REWARD_WEIGHTS)))
    run = rl_board.open_run(run_folder)
    assert run.format == wandb_tables.NAME and run.problems.empty
    samples = board_samples(run)
    completions = samples[samples["text/wandb_table"] == "completions"].reset_index(drop=True)
    assert set(completions["text/split"]) == {"train"}  # the run evaluates (its eval/loss): its completions tables are the training's
    assert sorted(set(expected["step"])) == [1, 2, 3] and len(completions) == len(expected) == 18
    assert completions["step"].tolist() == expected["step"].tolist()
    assert completions["prompt"].tolist() == expected["prompt"].tolist()
    assert completions["response"].tolist() == expected["response"].tolist()
    assert sum(text.startswith("<think>\nthinking at step") for text in completions["response"]) == len(completions[completions["step"] == REASONING_STEP]) > 0
    for column in ["reward", "advantage", *[f"rewards/{name}" for name in REWARD_FUNCTIONS]]:
        np.testing.assert_allclose(completions[column].to_numpy(float), expected[column].to_numpy(float), rtol=0, atol=1e-12, err_msg=column)
    assert completions["rewards/accuracy"].isna().sum() == 1  # the function that gave None
    assert completions["group"].tolist() == expected["group"].tolist()
    assert completions["text/solution"].tolist() == [cells[-2] for table in tables.values() if table["columns"][0] == "step" for cells in table["data"]]
    assert "reward = 1 × accuracy + 0.5 × format" in run.snapshot.reward_note and "reward_weights" in run.snapshot.reward_note


def test_another_table_s_columns_are_fields_at_the_trainer_s_step(written):
    """eval/answers (no step column) is at the Trainer's global step when it was logged: the last train/global_step
    the log has at or before the W&B step in its file's name, as wandb's own reader finds it. Its columns are fields
    (prompt, a board key, as "prompt (table)"), its response the row as text."""
    run_folder = written["grpo"]
    ((path, table),) = [(path, table) for path, table in table_files(run_folder).items() if path.parent.name == "eval"]
    wandb_step = int(path.name.split("_")[-2])
    logged = [(row["_step"], row["train/global_step"]) for row in wandb_history(run_folder) if "train/global_step" in row]
    global_step = max((found for found in logged if found[0] <= wandb_step))[1]
    assert global_step != wandb_step
    run = rl_board.open_run(run_folder)
    answers = board_samples(run)
    answers = answers[answers["text/wandb_table"] == "eval/answers"]
    assert answers["step"].tolist() == [global_step] * len(table["data"])
    columns = table["columns"]
    assert answers["text/question"].tolist() == [row[columns.index("question")] for row in table["data"]]
    assert answers["text/answer"].tolist() == [row[columns.index("answer")] for row in table["data"]]
    assert answers["extra/score"].tolist() == [row[columns.index("score")] for row in table["data"]]
    assert answers["text/prompt (table)"].tolist() == [row[columns.index("prompt")] for row in table["data"]]
    assert answers["response"].tolist() == ["\n".join(f"{name}: {cell}" for name, cell in zip(columns, row)) for row in table["data"]]
    assert answers["reward"].isna().all()
    assert "text/split" not in answers or answers["text/split"].isna().all()  # another program's table: no split


def test_an_evaluation_s_completions_table_is_told_from_the_training_one_at_its_step(written):
    """GRPOTrainer.log logs the evaluation's completions under the same key as the training's, at the same global step,
    right after the evaluation's metrics, from a buffer still holding the tail of the step's training batch: the
    evaluation's rows are that step's too, with split eval, the training's with split train, each training row once
    (the tail logged again is a repeat: the same rows at the same step), and the load report says both."""
    run = rl_board.open_run(written["grpo_evaluation"])
    samples = board_samples(run)
    completions = samples[samples["text/wandb_table"] == "completions"]
    at_step = completions[completions["step"] == EVALUATED_STEP]
    batch = len(QUESTIONS) * NUM_GENERATIONS
    assert len(at_step) == batch + EVAL_ROWS and at_step["text/split"].tolist() == ["train"] * batch + ["eval"] * EVAL_ROWS
    assert all(('"train question' in prompt) == (split == "train") for prompt, split in zip(at_step["prompt"], at_step["text/split"]))
    assert set(completions.loc[completions["step"] != EVALUATED_STEP, "text/split"]) == {"train"}
    assert samples.loc[samples["text/wandb_table"] == "eval/answers", "text/split"].isna().all()
    assert run.problems["reason"].tolist() == [
        wandb_tables.KEYED_NOTES[0][1].format(key="completions", count=batch - EVAL_ROWS, files=1),
        wandb_tables.KEYED_NOTES[1][1].format(key="completions", count=EVAL_ROWS, files=1),
    ]


# A cumulative table's files in W&B step order, {W&B step: {"columns", "data"}}: each holds the rows of the one before.
def cumulative_files(run_folder, key: str) -> dict[int, dict]:
    tables = {int(path.name.split("_")[-2]): table for path, table in table_files(run_folder).items() if path.name.startswith(f"{key}_")}
    steps = sorted(tables)
    assert len(steps) > 1 and all(tables[before]["data"] == tables[after]["data"][: len(tables[before]["data"])] for before, after in zip(steps, steps[1:]))
    return tables


def test_a_cumulative_table_s_rows_count_once_at_their_own_global_step(written):
    """OpenRLHF's WandbLogger logs train/generated_samples (global_step, text, reward) as the table before plus a row,
    before the step's train/global_step row: each row is one sample, at its own global_step column (W&B's step and the
    last logged train/global_step are both a step behind), its reward the reward column; one note says how many
    repeated rows were left out."""
    run_folder = written["openrlhf"]
    tables = cumulative_files(run_folder, "generated_samples")
    columns, last = tables[max(tables)]["columns"], tables[max(tables)]["data"]
    assert columns == ["global_step", "text", "reward"] and len(last) == len(OPENRLHF_STEPS)
    run = rl_board.open_run(run_folder)
    samples = board_samples(run)
    assert samples["step"].tolist() == [row[0] for row in last] == list(OPENRLHF_STEPS)
    assert samples["reward"].tolist() == [row[2] for row in last]
    assert samples["text/text"].tolist() == [row[1] for row in last]
    assert not [column for column in samples.columns if "global_step" in column or column.startswith("extra/reward")]
    assert set(samples["text/wandb_table"]) == {"train/generated_samples"}
    repeated = sum(len(table["data"]) for table in tables.values()) - len(last)
    notes = [reason for reason in run.problems["reason"] if "repeated" in reason]
    assert len(notes) == 1 and notes[0].startswith(f"train/generated_samples: {repeated} repeated row(s)")


def test_trl_s_log_completions_callback_table_counts_each_row_once_at_its_text_step(written, tmp_path):
    """TRL's LogCompletionsCallback logs its whole growing table at every step, its step column str(global_step): each
    row counts once, at the step its text says, with TRL's completions mapping (prompt, completion); one note."""
    run_folder = written["trl_callback"]
    tables = cumulative_files(run_folder, "completions")
    last = tables[max(tables)]["data"]
    assert all(type(row[0]) is str for row in last)
    run = rl_board.open_run(run_folder)
    samples = board_samples(run)
    assert samples["step"].tolist() == [int(row[0]) for row in last] and sorted(set(samples["step"])) == list(TRL_CALLBACK_STEPS)
    assert samples["prompt"].tolist() == [row[1] for row in last] and samples["response"].tolist() == [row[2] for row in last]
    repeated = sum(len(table["data"]) for table in tables.values()) - len(last)
    notes = [reason for reason in run.problems["reason"] if "repeated" in reason]
    assert len(notes) == 1 and notes[0].startswith(f"completions: {repeated} repeated row(s)")
    copy = shutil.copytree(run_folder, tmp_path / "run")  # the text is the step, not the log's train/global_step
    (path,) = (copy / "files" / "media" / "table").glob(f"completions_{max(tables)}_*.table.json")
    table = json.loads(path.read_text())
    for row in table["data"][-2:]:
        row[0] = " 25"
    path.write_text(json.dumps(table))
    assert board_samples(rl_board.open_run(copy))["step"].tolist() == [10, 10, 20, 20, 25, 25]


def test_a_table_logged_again_with_new_rows_only_loses_no_row(written):
    """GRPO's completions tables (each step's own rows, a step column) repeat no row: none is left out, no note."""
    run = rl_board.open_run(written["grpo"])
    assert len(board_samples(run)) == 18 + 3 and not any("repeated" in reason for reason in run.problems["reason"])


def test_a_table_of_each_step_s_own_rows_keeps_a_row_equal_to_one_before(written):
    """Without a step column, only a file holding every row of the one before and more is cumulative: a step's row
    that equals one of the step before by chance, or a step's rows all as the step before's (a greedy policy's answers
    unchanged), are that step's samples too."""
    run = rl_board.open_run(written["per_step"])
    samples = board_samples(run)
    for step, rows in PER_STEP_ROWS.items():
        at_step = samples[samples["step"] == step]
        assert at_step["reward"].tolist() == [row[2] for row in rows] and at_step["text/response (table)"].tolist() == [row[1] for row in rows]
    assert not any("repeated row" in reason for reason in run.problems["reason"])


# A step column of whole floats (pandas makes an integer column holding a NaN one of floats) or written as text, and
# a reward written as text, are read as TRL's scores are; a step that is no whole number is the table's step.
def test_steps_and_rewards_written_as_floats_or_text_are_read():
    table = {"columns": ["global_step", "text", "reward"], "data": [[2.0, "a", "0.5"], ["5.0", "b", 1], [2.5, "c", None]]}
    data, notes = wandb_tables.table_lines(json.dumps(table).encode(), ("samples", (), {"key": "samples", "step": 9}))
    lines = [json.loads(line) for line in data.splitlines()]
    assert [(line["step"], line["reward"]) for line in lines] == [(2, 0.5), (5, 1.0), (9, None)] and not notes


def test_a_numeric_reward_column_beside_trl_s_completions_is_the_reward(written, tmp_path):
    """Another table's numeric reward column is its rows' reward, also in a run whose completions tables score reward
    functions (the weighted sum is for the lines they score); a reward column holding text stays a field, with a note."""
    run_folder = shutil.copytree(written["grpo"], tmp_path / "run")
    (path,) = (run_folder / "files" / "media" / "table" / "eval").glob("answers_*.table.json")
    table = json.loads(path.read_text())
    table["columns"][table["columns"].index("score")] = "reward"
    path.write_text(json.dumps(table))
    answers = board_samples(rl_board.open_run(run_folder)).query("`text/wandb_table` == 'eval/answers'")
    assert answers["reward"].tolist() == [row[2] for row in table["data"]] and "extra/reward (table)" not in answers
    table["data"][0][2] = "high"
    path.write_text(json.dumps(table))
    run = rl_board.open_run(run_folder)
    answers = board_samples(run).query("`text/wandb_table` == 'eval/answers'")
    assert answers["reward"].isna().all() and answers["text/reward (table)"].tolist()[0] == "high"
    assert any("its reward column holds values that are not numbers ('high')" in reason for reason in run.problems["reason"])


def test_the_transaction_log_is_the_training_history(written):
    """Every wandb.log of numbers is a history row at its train/global_step (WandbCallback's names undone: train/loss
    is loss, eval/loss eval_loss), as wandb's own reader reads the log; tables' rows and W&B's _keys are not metrics;
    the config is the run's."""
    run_folder = written["grpo"]
    rows = [row for row in wandb_history(run_folder) if "train/global_step" in row]
    train = {row["train/global_step"]: row for row in rows if "train/loss" in row}
    history = rl_board.open_run(run_folder).history
    assert history.train["step"].tolist() == sorted(train) == [1, 2, 3]
    assert history.train["loss"].tolist() == [train[step]["train/loss"] for step in sorted(train)]
    assert history.train["rewards/accuracy/mean"].tolist() == [train[step]["train/rewards/accuracy/mean"] for step in sorted(train)]
    assert history.eval["step"].tolist() == [2, 3] and history.eval["eval_loss"].tolist()[0] == next(row["eval/loss"] for row in rows if "eval/loss" in row)
    # trainer.predict()'s row: WandbCallback.on_predict logs it without train/global_step, which W&B adds itself
    # (define_metric's step_sync): it is at that global step, not at W&B's _step, with the Trainer's test_* names
    predicted = next(row for row in wandb_history(run_folder) if "test/loss" in row)
    assert predicted["_step"] > 3 and predicted["train/global_step"] == 3
    assert history.eval.loc[history.eval["step"] == 3, ["test_loss", "test_runtime"]].values.tolist() == [[0.6, 2.0]]
    assert not [column for column in history.train.columns if column.startswith("_") or "completions" in column or "global_step" in column]
    assert history.config["reward_weights"] == REWARD_WEIGHTS and history.sources == [next(run_folder.glob("run-*.wandb")).name]


def test_without_reward_metrics_the_float_columns_are_the_functions(written):
    """A run that logged no TRL metrics names no functions: the all-float columns between completion and advantage
    are taken as them (a note says so), the reward their plain sum; log_unique_prompts' one row per prompt is a group
    of one."""
    run_folder = written["bare"]
    tables = table_files(run_folder)
    expected = expected_completions(tables, {})
    run = rl_board.open_run(run_folder)
    samples = board_samples(run)
    assert samples["step"].tolist() == expected["step"].tolist() == [5, 5, 5, 10, 10, 10]
    np.testing.assert_allclose(samples["reward"].to_numpy(float), expected["reward"].to_numpy(float), rtol=0, atol=1e-12)
    assert samples["group"].tolist() == expected["group"].tolist() == [0, 1, 2] * 2
    assert any("taken as one" in reason for reason in run.problems["reason"])
    assert run.history.empty


def test_scores_whose_sum_is_beyond_a_float_s_range_give_an_infinite_reward(written, tmp_path):
    """Two scores of 1e308 sum to +inf: the row's reward is +inf, kept as such in its converted line (msgspec writes
    ±inf as null, a reward without a number), where fsum's overflow stopped the whole table's conversion."""
    run_folder = shutil.copytree(written["bare"], tmp_path / "run")
    path = sorted((run_folder / "files" / "media" / "table").glob("completions_*.table.json"))[0]
    table = json.loads(path.read_text())
    columns = table["columns"]
    functions = range(columns.index("completion") + 1, columns.index("advantage"))
    assert len(functions) == len(REWARD_FUNCTIONS)
    for position in functions:
        table["data"][0][position] = 1e308
    path.write_text(json.dumps(table))
    run = rl_board.open_run(run_folder)
    assert not (run.problems["kind"] == "skipped").any()
    rewards = board_samples(run).query(f"step == {table['data'][0][columns.index('step')]}")["reward"].tolist()
    assert len(rewards) == len(table["data"]) and rewards[0] == math.inf and all(math.isfinite(reward) for reward in rewards[1:])


def test_infinite_scores_are_kept_as_w_and_b_wrote_them(written, tmp_path):
    """W&B writes ±inf as Infinity (Python's json), which were read as "did not score": a score of +inf makes the row's
    reward +inf, +inf beside −inf leaves it without a number with a note naming the row, NaN is still "did not score",
    and an advantage of −inf is kept."""
    run_folder = shutil.copytree(written["bare"], tmp_path / "run")
    path = sorted((run_folder / "files" / "media" / "table").glob("completions_*.table.json"))[0]
    table = json.loads(path.read_text())
    columns = table["columns"]
    first, second = (columns.index(name) for name in columns[columns.index("completion") + 1 : columns.index("completion") + 3])
    table["data"][0][first], table["data"][0][second] = math.inf, 0.5
    table["data"][1][first], table["data"][1][second] = math.inf, -math.inf
    table["data"][2][first], table["data"][2][second] = math.nan, 0.25
    table["data"][2][columns.index("advantage")] = -math.inf
    path.write_text(json.dumps(table))
    assert "Infinity" in path.read_text() and "NaN" in path.read_text()  # as W&B writes them
    run = rl_board.open_run(run_folder)
    step = table["data"][0][columns.index("step")]
    samples = board_samples(run).query(f"step == {step}")
    first_name, second_name = f"rewards/{columns[first]}", f"rewards/{columns[second]}"
    assert samples["reward"].iloc[0] == math.inf and samples[first_name].iloc[0] == math.inf
    assert math.isnan(samples["reward"].iloc[1]) and samples[first_name].iloc[1] == math.inf and samples[second_name].iloc[1] == -math.inf
    assert samples["reward"].iloc[2] == 0.25 and math.isnan(samples[first_name].iloc[2]) and samples["advantage"].iloc[2] == -math.inf
    notes = run.problems[run.problems["reason"].str.contains("scored +inf and −inf", regex=False)]
    assert len(notes) == 1 and notes["file"].iloc[0].startswith(path.name) and notes["line"].iloc[0] == 2


def test_bad_input_is_counted_in_the_load_report(written, tmp_path):
    """A table file being written (cut short) is named and its rows wait; a row of another length is left out and
    counted; a log cut mid-record is read up to there; a corrupt log is read up to the corrupt record, with a note."""
    run_folder = shutil.copytree(written["grpo"], tmp_path / "run")
    paths = sorted((run_folder / "files" / "media" / "table").glob("completions_*.table.json"))
    paths[0].write_bytes(paths[0].read_bytes()[:100])
    table = json.loads(paths[1].read_text())
    table["data"][0] = table["data"][0][:3]
    paths[1].write_text(json.dumps(table))
    (log,) = run_folder.glob("run-*.wandb")
    data = log.read_bytes()
    log.write_bytes(data[: len(data) - 37])  # a writer mid-record
    run = rl_board.open_run(run_folder)
    skipped = run.problems[run.problems["kind"] == "skipped"]
    assert len(skipped) == 1 and skipped["file"].iloc[0].startswith(paths[0].name) and "still being written" in skipped["reason"].iloc[0]
    assert any("1 row(s) of another length" in reason for reason in run.problems["reason"])
    assert sorted(run.samples["step"].unique().tolist()) == [2, 3] and len(run.samples) == 6 - 1 + 6 + 3
    assert run.history.train["step"].tolist() == [1, 2, 3]
    corrupt = bytearray(data)
    corrupt[len(data) // 2] ^= 0xFF
    log.write_bytes(bytes(corrupt))
    history = rl_board.open_run(run_folder).history
    assert any("corrupt record" in reason for reason in history.problems["reason"]) and len(history.train) <= 3
    log.write_bytes(b"not a log")
    assert any("not W&B's transaction log" in reason for reason in rl_board.open_run(run_folder).history.problems["reason"])


# A record bigger than a block is written in chunks, one a block; joining them as they came copied the record so far
# once a chunk (a config of 65 MB took 30 s to read). The log as wandb's own DataStore writes it.
def test_a_record_of_many_blocks_is_read_in_time_linear_in_it(tmp_path):
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal.datastore import DataStore

    record = wandb_internal_pb2.Record()
    for index in range(64_000):
        item = record.config.update.add()
        item.key, item.value_json = f"key_{index}", json.dumps(f"{index:06d}" * 170)
    store = DataStore()
    store.open_for_write(str(tmp_path / "run-big.wandb"))
    store.write(record)
    store.close()
    data = (tmp_path / "run-big.wandb").read_bytes()
    assert len(data) > 60e6
    start = time.perf_counter()
    log = read_log(data)
    assert time.perf_counter() - start < 5  # 0.3 s here
    assert log.stopped == "" and len(log.config) == 64_000 and log.config["key_63999"] == "063999" * 170
