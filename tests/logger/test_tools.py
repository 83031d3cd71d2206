"""The rollout logger on a real tool-calling GRPO run (TRL's `tools=`, tiny CPU model): the tool mask of each line,
null per-token values at the tokens a tool wrote, exact log-probs at the sampled ones, TRL's `kl` over the sampled
tokens only, and the board reading the run the same way.

The model (examples/train_grpo_tiny_tools.py) is warmed up to write `add` tool calls in Qwen3's format; TRL parses them
from the sampled completions, runs `add`, puts the rendered result into the completion and samples on after it.
"""

import json
import math
import re
import statistics
from collections import Counter

import numpy as np
import pytest

from examples.train_grpo_tiny_tools import add
from tests.support import PROJECT
from tests.support.logger_runs import KL_ROUNDING, add_logger, max_difference, read_records
from tests.support.logger_tool_runs import (
    ToolRescorer,
    ToolRunRecorder,
    make_tools_trainer,
    sampled_k3,
    sampled_positions,
    tool_runs,
    tool_text_checks,
    trl_step_kl_over_sampled_tokens,
    why_trl_runs_no_tools,
)

PER_TOKEN_KEYS = ("logprobs", "ref_logprobs", "entropies")
TOOL_CALL_TEXT = re.compile(r"<tool_call>\s*(.+?)\s*</tool_call>", re.DOTALL)
STEPS = [1, 2, 3]


@pytest.fixture(scope="module")
def tools_run(tmp_path_factory):
    """Three steps of GRPO with the `add` tool and beta > 0, each in two loss passes (2 prompts x 4 completions per
    step, 4 per pass)."""
    reason = why_trl_runs_no_tools()
    if reason:
        pytest.skip(reason)
    tmp_path = tmp_path_factory.mktemp("tools")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("SAVE_ROLLOUT_DATA", "true")
        trainer = make_tools_trainer(tmp_path, per_device_train_batch_size=4, gradient_accumulation_steps=2)
        recorder = ToolRunRecorder(trainer)
        callback = add_logger(trainer)
        trainer.train()
    [records] = read_records(callback.run_dir).values()
    return dict(trainer=trainer, recorder=recorder, records=records, run_dir=callback.run_dir)


def test_tool_calls_ran_and_each_line_has_trls_tool_mask(tools_run):
    records, recorder, trainer = tools_run["records"], tools_run["recorder"], tools_run["trainer"]
    assert Counter(record["step"] for record in records) == {step: 8 for step in STEPS}
    assert Counter((record["step"], record["micro_batch"]) for record in records) == {
        (step, micro_batch): 4 for step in STEPS for micro_batch in (0, 1)
    }
    for record in records:
        assert len(record["tool_mask"]) == len(record["response_tokens"]) > 0
        assert set(record["tool_mask"]) <= {0, 1} and record["tool_mask"][0] == 1  # a completion starts sampled
    # The masks are TRL's, each on its own completion's tokens.
    tokenizer = trainer.processing_class
    for step in STEPS:
        logged = sorted(
            (tuple(record["response_tokens"]), tuple(record["tool_mask"]))
            for record in records
            if record["step"] == step
        )
        made = sorted(
            (tuple(tokenizer.convert_ids_to_tokens(completion)), tuple(mask))
            for _, completion, mask in recorder.samples[step]
        )
        assert logged == made
    with_tools = [record for record in records if 0 in record["tool_mask"]]
    assert len(with_tools) >= len(records) // 2  # the warm-up made most completions call the tool
    assert any(record["tool_mask"][-1] == 1 for record in with_tools)  # the policy sampled on after a tool result
    calls = [entry["tools/call_frequency"] for entry in trainer.state.log_history if "tools/call_frequency" in entry]
    assert len(calls) == len(STEPS) and sum(calls) > 0


def test_per_token_values_are_null_exactly_at_tool_tokens(tools_run):
    for record in tools_run["records"]:
        for key in PER_TOKEN_KEYS:
            assert len(record[key]) == len(record["tool_mask"])
            for value, sampled in zip(record[key], record["tool_mask"]):
                assert (value is not None and math.isfinite(value)) if sampled else value is None


def test_tool_tokens_are_the_tools_rendered_result(tools_run):
    """After each well-formed `add(a, b)` call, the tool tokens are the chat template's tool message holding a + b,
    then the next assistant header: what TRL inserted, not sampled."""
    tokenizer = tools_run["trainer"].processing_class
    records = tools_run["records"]
    checks = tool_text_checks(tokenizer, records)
    assert len(checks) >= len(records) // 2
    for logged, expected in checks:
        assert logged == expected
        text = tokenizer.decode(logged, skip_special_tokens=False)
        assert text.startswith("\n<|im_start|>user\n<tool_response>\n") and text.endswith("<|im_start|>assistant\n")
    assert sum(len(tool_runs(record)) for record in records) >= len(checks)


def test_logprobs_are_exact_at_sampled_tokens(tools_run):
    """At every sampled token, log-probs and entropies equal a fresh pass of the weights that generated the sample,
    reference log-probs one of the initial weights, over the logged prompt and completion (tool tokens included)."""
    trainer, recorder = tools_run["trainer"], tools_run["recorder"]
    rescorer = ToolRescorer(trainer.temperature)
    compared = 0
    for record in tools_run["records"]:
        prompt_ids, completion_ids = rescorer.ids(record)
        assert (prompt_ids, completion_ids, record["tool_mask"]) in [
            (prompt, completion, mask) for prompt, completion, mask in recorder.samples[record["step"]]
        ]
        sampled = sampled_positions(record)
        logprobs, entropies = rescorer.logprobs_and_entropies(recorder.weights[record["step"]], record)
        ref_logprobs, _ = rescorer.logprobs_and_entropies(rescorer.initial_weights, record)
        for key, fresh in (("logprobs", logprobs), ("entropies", entropies), ("ref_logprobs", ref_logprobs)):
            assert max_difference([record[key][i] for i in sampled], [fresh[i] for i in sampled]) <= 1e-5
        compared += len(sampled)
    assert compared > 0
    first, second = (recorder.weights[step]["model.norm.weight"] for step in (1, 2))
    assert not np.array_equal(first.numpy(), second.numpy())  # each step sampled with other weights


def test_kl_is_trls_over_the_sampled_tokens(tools_run):
    """TRL's logged `kl` of each step is the mean over its loss passes of each pass's token mean of
    exp(ref - logp) - (ref - logp) - 1 over the sampled tokens (tool tokens left out), in the log history and in the
    logger's metrics file alike."""
    trainer, records = tools_run["trainer"], tools_run["records"]
    logged = {entry["step"]: entry["kl"] for entry in trainer.state.log_history if "kl" in entry}
    [metrics_file] = tools_run["run_dir"].glob("rollout_metrics_*.jsonl")
    metrics = [json.loads(line) for line in metrics_file.read_text().splitlines()]
    assert {line["step"]: line["kl"] for line in metrics if "kl" in line} == logged
    recomputed = trl_step_kl_over_sampled_tokens(records)
    assert sorted(recomputed) == STEPS
    for step, kl in recomputed.items():
        assert kl == pytest.approx(logged[step], rel=1e-6, abs=KL_ROUNDING)
    assert logged[1] == 0 and max(logged.values()) > 0
    # Counted as tokens without KL, the tool tokens would dilute each pass's mean: the mask is what makes it TRL's.
    diluted = {}
    for step in STEPS:
        means = []
        for micro_batch in (0, 1):
            lines = [record for record in records if (record["step"], record["micro_batch"]) == (step, micro_batch)]
            means.append(sum(sum(sampled_k3(line)) for line in lines) / sum(len(line["tool_mask"]) for line in lines))
        diluted[step] = statistics.mean(means)
    assert any(diluted[step] != pytest.approx(logged[step], rel=1e-3) for step in STEPS if logged[step] > 0)


def test_board_leaves_tool_tokens_out_of_kl(tools_run):
    """The board reads the run's tool masks: each line's avg KL (k3) is over its sampled tokens only, and TRL's kl
    recomputed by the board from the lines is the trainer's."""
    import rl_logging_board as board

    records, trainer = tools_run["records"], tools_run["trainer"]
    run = board.RunStore(str(tools_run["run_dir"])).load(10240, parallel=False)
    samples = run.samples.sort_values("line")
    assert len(samples) == len(records) and not run.downsampled
    for (_, row), record in zip(samples.iterrows(), records):
        assert (row["step"], row["response_tokens_len"]) == (record["step"], len(record["response_tokens"]))
        assert row["tool_tokens"] == record["tool_mask"].count(0)
        sampled = sampled_positions(record)
        log_ratio = np.array([record["logprobs"][i] - record["ref_logprobs"][i] for i in sampled])
        assert row["avg_kl_k3"] == pytest.approx(np.mean(np.expm1(-log_ratio) + log_ratio), rel=1e-9, abs=1e-15)
    logged = {entry["step"]: entry["kl"] for entry in trainer.state.log_history if "kl" in entry}
    recomputed = board.trl_kl_by_step(run.samples, board.trl_pools_ranks(run.meta["trl_version"]))
    assert list(recomputed.index) == STEPS
    for step in STEPS:
        assert recomputed[step] == pytest.approx(logged[step], rel=1e-6, abs=KL_ROUNDING)


# ---------------------------------------------------------------- the bundled run


BUNDLED = PROJECT / "rollout_samples" / "grpo_tiny_tools_example"


def test_bundled_tools_example_run():
    """The bundled run of examples/train_grpo_tiny_tools.py: the logger's layout, small, tool masks on its lines with
    null values at the tool tokens, and TRL's kl recomputed over the sampled tokens, by the board too."""
    import rl_logging_board as board

    if not BUNDLED.is_dir():
        pytest.skip("no bundled tool-calling example run")
    names = sorted(path.name for path in BUNDLED.iterdir())
    [data] = [name for name in names if name.startswith("rollout_data_")]
    launch_id = re.fullmatch(r"rollout_data_rank_0_(\d{8}T\d{6}Z)\.jsonl", data).group(1)
    assert names == [data, f"rollout_meta_{launch_id}.json", f"rollout_metrics_{launch_id}.jsonl"]
    assert sum(path.stat().st_size for path in BUNDLED.iterdir()) < 2_000_000
    meta = json.loads((BUNDLED / f"rollout_meta_{launch_id}.json").read_text())
    assert meta["beta"] > 0 and meta["reward_funcs"] == ["used_tool", "correct_sum"] and meta["seed"] == 0
    records = [json.loads(line) for line in (BUNDLED / data).read_text().splitlines()]
    assert all(len(record["tool_mask"]) == len(record["response_tokens"]) for record in records)
    assert sum(0 in record["tool_mask"] for record in records) >= len(records) // 2
    for record in records:
        for key in PER_TOKEN_KEYS:
            assert [value is None for value in record[key]] == [flag == 0 for flag in record["tool_mask"]]
    metrics = [json.loads(line) for line in (BUNDLED / f"rollout_metrics_{launch_id}.jsonl").read_text().splitlines()]
    logged = {line["step"]: line["kl"] for line in metrics if line["kind"] == "train" and "kl" in line}
    recomputed = trl_step_kl_over_sampled_tokens(records)
    assert sorted(recomputed) == sorted(logged) and len(logged) >= 20
    for step, kl in recomputed.items():
        assert kl == pytest.approx(logged[step], rel=1e-5, abs=KL_ROUNDING)
    run = board.RunStore(str(BUNDLED)).load(10240, parallel=False)
    by_board = board.trl_kl_by_step(run.samples, board.trl_pools_ranks(run.meta["trl_version"]))
    assert by_board.to_dict() == pytest.approx(recomputed, rel=1e-9, abs=1e-12)


def test_each_line_has_its_turns_as_trls_tool_loop_made_them(tools_run):
    """The turns of a line: the prompt's message, then per round the assistant's turn (its span: the round's run of
    sampled tokens; its tool call: the one its text holds) and the tool's turn (its span: the run of tool tokens; its
    result: what `add` returns for that call), recomputed here from the line's tokens and tool mask alone."""
    tokenizer = tools_run["trainer"].processing_class
    checked_results = 0
    for record in tools_run["records"]:
        turns, mask = record["turns"], record["tool_mask"]
        assert turns[0] == {"role": "user", "text": re.search(r"user\n(.*?)<\|im_end\|>", record["prompt"], re.DOTALL).group(1)}
        spans = [(turn["token_start"], turn["token_end"]) for turn in turns[1:]]
        assert spans[0][0] == 0 and spans[-1][1] == len(mask) and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
        ids = tokenizer.convert_tokens_to_ids(record["response_tokens"])
        for turn, (start, end) in zip(turns[1:], spans):
            assert set(mask[start:end]) == {1 if turn["role"] == "assistant" else 0}
            text = tokenizer.decode(ids[start:end], skip_special_tokens=False)
            if turn["role"] == "assistant":
                calls = [parsed_call(call) for call in TOOL_CALL_TEXT.findall(text)]
                if all(calls):  # the model's calls are all well-formed JSON: TRL's parser gets each of them
                    assert [(call["name"], call["arguments"]) for call in turn.get("tool_calls", [])] == [(call["name"], call["arguments"]) for call in calls]
                call = turn.get("tool_calls", [None])[-1]
            else:
                assert turn["tool_name"] == call["name"] and f"<tool_response>\n{turn['text']}\n</tool_response>" in text
                try:  # what TRL's call of the tool returns, or None where it raises (TRL then writes the error)
                    expected = str(add(**call["arguments"])) if call["name"] == "add" else None
                except Exception:
                    expected = None
                if expected is None:
                    assert "error" in turn
                else:
                    assert turn["text"] == expected and "error" not in turn
                    checked_results += 1
        # A last call TRL did not run: the tool limit, else its result would not fit in max_completion_length
        ends_with_call = turns[-1]["role"] == "assistant" and "tool_calls" in turns[-1]
        rounds = sum(turn["role"] == "assistant" and "tool_calls" in turn for turn in turns) - ends_with_call
        at_limit = rounds >= tools_run["trainer"].max_tool_calling_iterations
        expected = "length" if record["truncated"] else ("tool_limit" if at_limit else "length") if ends_with_call else "stop"
        assert record["stop_reason"] == expected
    assert checked_results >= len(tools_run["records"]) // 2


def parsed_call(text: str) -> dict | None:
    try:
        call = json.loads(text)
    except ValueError:
        return None
    return call if isinstance(call, dict) and "name" in call and "arguments" in call else None


def test_board_turns_and_tools_equal_a_recount(tools_run):
    import rl_board

    run = rl_board.open_run(tools_run["run_dir"])
    records = tools_run["records"]
    by_step = run.tools_by_step()
    for step in STEPS:
        lines = [record for record in records if record["step"] == step]
        calls = sum(len(turn.get("tool_calls", [])) for record in lines for turn in record["turns"])
        results = [turn for record in lines for turn in record["turns"] if turn["role"] == "tool"]
        assert by_step.loc[step, "tool calls per sample"] == pytest.approx(calls / len(lines))
        assert by_step.loc[step, "turns per sample"] == pytest.approx(statistics.mean(len(record["turns"]) for record in lines))
        assert by_step.loc[step, "success rate: add"] == pytest.approx(sum("error" not in turn for turn in results) / len(results))
    record = records[0]
    step_lines = [line for line in records if line["step"] == record["step"]]
    table = run.turns(record["step"], step_lines.index(record))
    for (_, row), turn in zip(table.iterrows(), record["turns"]):
        if "token_start" in turn:
            start, end = turn["token_start"], turn["token_end"]
            sampled = [value for value in record["logprobs"][start:end] if value is not None]
            assert row["tokens"] == end - start
            assert row["mean_logp"] == pytest.approx(statistics.mean(sampled)) if sampled else math.isnan(row["mean_logp"])
