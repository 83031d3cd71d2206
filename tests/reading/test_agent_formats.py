"""The board opening agent trajectories as prime-rl/verifiers, rLLM and ROLL write them (tests/support/agent_formats.py
runs their own writing code on toy tool-calling episodes): a line per rollout, its turns, token spans, tool calls and
per-turn rewards checked against the raw files (json.loads of each record, the graphs walked here), never against the
converters; and bad input (a span that does not fit, invalid tool-call arguments, an unknown role, 10,000 turns,
truncated files) counted in the load report, never a crash."""

import json
import os
from pathlib import Path

import pytest

import rl_board
from rl_board.formats import FORMATS, board_jsonl, prime_rl, rllm, roll
from rl_board.formats.agent_turns import MAX_TURNS, messages_value
from rl_board.reading.search import export_jsonl
from rl_board.tokenizer import TOKENIZER_VARIABLE
from tests.support.agent_formats import agent_record, prime_rl_traces_run, rllm_run, roll_run
from tests.support.prime_rl_nemo_rl import log_episodes, prime_rl_run, save_tokenizer


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


# Every loaded line as the board converted it (what a JSONL download gives), with its sample row.
def board_lines(run) -> list[dict]:
    return [json.loads(line) for step in run.steps for line in export_jsonl(run.snapshot.step_rows(step)).decode("utf-8").splitlines()]


def notes(run) -> list[str]:
    return run.problems[run.problems["kind"] == "note"]["reason"].tolist()


# ------------------------------------------------------------------------------------------------ prime-rl traces


# A trace's branches walked here: each a list of its nodes, root first (a leaf is a node no node names as parent).
def walked_branches(trace: dict) -> list[list[dict]]:
    nodes = trace["nodes"]
    parents = {node.get("parent") for node in nodes}
    branches = []
    for leaf in (i for i in range(len(nodes)) if i not in parents):
        path, at = [], leaf
        while at is not None:
            path.append(nodes[at])
            at = nodes[at].get("parent")
        branches.append(path[::-1])
    return branches


def raw_traces(run_dir: Path) -> dict:
    """(step, kind, subset) -> records of that traces file."""
    found = {}
    for path in (run_dir / "rollouts").glob("step_*/*/*/traces.jsonl"):
        step, kind, subset = int(path.parts[-4].removeprefix("step_")), path.parts[-3], path.parts[-2]
        found[(step, kind, subset)] = lines(path)
    return found


def expected_calls(message: dict) -> list | None:
    calls = message.get("tool_calls")
    return [{"name": call["name"], "arguments": json.loads(call["arguments"]), "id": call["id"]} for call in calls] if calls else None


# A line's checks against its raw branch: the response tokens from the first sampled one, each turn's text, role, tool
# calls and span (its tokens are its node's), the sampler's and the reference's log-probs on the sampled tokens,
# advantage, reward.
def check_branch_line(line: dict, path: list[dict], trace: dict, token=str):
    ids = [t for node in path for t in node["token_ids"]]
    mask = [m for node in path for m in node["mask"]]
    first = mask.index(True)
    assert line["response_tokens"] == [token(i) for i in ids[first:]]
    assert [turn["role"] for turn in line["turns"]] == [node["message"]["role"] for node in path]
    start = 0
    covered = []
    for turn, node in zip(line["turns"], path):
        end = start + len(node["token_ids"])
        assert turn["text"] == node["message"]["content"]
        assert turn.get("tool_calls") == expected_calls(node["message"])
        if node["message"]["role"] == "tool":
            assert (turn["tool_call_id"], turn["tool_name"]) == (node["message"]["tool_call_id"], node["message"]["name"])
        if end <= first:
            assert "token_start" not in turn  # a prompt turn
        else:
            assert (turn["token_start"], turn["token_end"]) == (max(start, first) - first, end - first)
            assert ids[first:][turn["token_start"] : turn["token_end"]] == node["token_ids"][max(first - start, 0) :]
            covered += range(turn["token_start"], turn["token_end"])
        if node.get("advantages"):
            assert turn["advantage"] == pytest.approx(sum(node["advantages"]) / len(node["advantages"]))
        start = end
    assert covered == list(range(len(ids) - first))  # the spans tile the response, in order
    sampled_logprobs = [lp for node in path for lp in node["logprobs"]]
    assert [lp for lp, m in zip(line["logprobs"], mask[first:]) if m] == sampled_logprobs
    assert all(lp is None for lp, m in zip(line["logprobs"], mask[first:]) if not m)
    assert line.get("tool_mask", [1] * len(mask[first:])) == [int(m) for m in mask[first:]]
    if any("reference_logprobs" in node for node in path):
        assert [lp for lp, m in zip(line["ref_logprobs"], mask[first:]) if m] == [lp for node in path for lp in node.get("reference_logprobs", [])]
    advantages = [a for node in path for a in node.get("advantages", [])]
    assert line.get("advantage") == (pytest.approx(sum(advantages) / len(advantages)) if advantages else None)
    scored = [r["score"] * r["weight"] for r in trace["rewards"].values() if r is not None]
    assert line["reward"] == (pytest.approx(sum(scored)) if scored else None)


def test_prime_rl_traces_are_a_line_per_rollout_with_turns_spans_and_subsets(tmp_path, tokenizer):
    """Without token exports, each trace branch of the file monitor's traces is a line: effective ones (shipped, with
    advantages and reference log-probs) and the rest of all/ (filtered, errored, an episode without traces), each once
    per step, train and eval, their kind and subset facets; turns with the spans of their nodes' tokens."""
    run_dir = prime_rl_traces_run(tmp_path / "run", tokenizer, steps=(1, 2), eval_steps=(2,))
    run = rl_board.open_run(run_dir)
    assert run.format == prime_rl.TRACES_NAME and run.steps == [1, 2]
    assert notes(run) == ["1 .jsonl file(s) beside rollouts/ are not read (prime-rl's metrics.jsonl holds its logged metrics, not samples)"]
    raw = raw_traces(run_dir)
    expected = {}
    for (step, kind, subset), records in raw.items():
        for record in records:
            for trace in record["traces"] or [None]:
                for number, path in enumerate(walked_branches(trace) if trace else [None]):
                    expected.setdefault((step, kind, record["id"], trace and trace["id"], number), []).append((subset, record, trace, path))
    shown = board_lines(run)
    assert len(shown) == len(expected)  # a rollout in effective/ and all/ is one line, the effective one
    checked = {"effective": 0, "all": 0, "errored": 0, "eval": 0}
    for line in shown:
        candidates = expected[(line["step"], line["kind"], line["episode_id"], line.get("trace_id"), line.get("branch", 0))]
        subset, record, trace, path = next(item for item in candidates if item[0] == "effective") if len(candidates) > 1 else candidates[0]
        assert line["subset"] == subset and line["group_id"] == record["group"]["id"]
        checked[subset] += 1
        checked["eval"] += line["kind"] == "eval"
        if trace is None:  # an episode without traces: its task and error
            assert line["stop_reason"] == "error" and line["errored"] == 1 and line["turns"] == [] and "sandbox" in line["error"]
            continue
        if trace["errors"]:
            checked["errored"] += 1
            assert line["stop_reason"] == "error" and line["errored"] == 1 and line["reward"] is None
        else:
            assert line["stop_reason"] == "stop" and line["errored"] == 0
        check_branch_line(line, path, trace)
    assert checked == {"effective": 12, "all": 7, "errored": 3, "eval": 3}
    samples = run.samples
    assert set(samples["text/subset"]) == {"all", "effective"} and set(samples["text/kind"]) == {"train", "eval"}


def test_prime_rl_traces_decoded_with_a_tokenizer_and_opened_at_rollouts(tmp_path, tokenizer, monkeypatch):
    run_dir = prime_rl_traces_run(tmp_path / "run", tokenizer, steps=(1,), eval_steps=())
    monkeypatch.setenv(TOKENIZER_VARIABLE, str(save_tokenizer(tmp_path / "tok")))
    run = rl_board.open_run(run_dir)
    raw = {(r["id"], t["id"]): walked_branches(t)[0] for r in lines(run_dir / "rollouts/step_1/train/effective/traces.jsonl") for t in r["traces"]}
    line = next(line for line in board_lines(run) if line["subset"] == "effective" and line.get("branch") is None)
    path = raw[(line["episode_id"], line["trace_id"])]
    check_branch_line(line, path, next(t for r in lines(run_dir / "rollouts/step_1/train/effective/traces.jsonl") for t in r["traces"] if t["id"] == line["trace_id"]),
                      token=lambda i: tokenizer.id_to_token(i))
    alone = rl_board.open_run(run_dir / "rollouts")
    assert alone.format == prime_rl.TRACES_NAME and len(alone.samples) == len(run.samples)
    assert rl_board.list_runs(run_dir) == [str(run_dir)] and str(run_dir) in rl_board.list_runs(tmp_path)


def test_prime_rl_exports_take_their_turns_from_their_traces_and_all_adds_the_rest(tmp_path, tokenizer):
    """With token exports, a step's trained lines are the exports (the trainer's log-probs), each with the turns of its
    trace branch, spans in its response (cut at seq_len with it); all/'s other rollouts are lines of their own."""
    run_dir = prime_rl_run(tmp_path / "run", tokenizer, steps=(1,), ranks=1, seq_len=50)
    effective = lines(run_dir / "rollouts/step_1/train/effective/traces.jsonl")
    extra = agent_record(tokenizer, 0, 1, "group-x", error="calculator crashed")
    log_episodes(run_dir, effective + [extra], 1, "train", "all")
    run = rl_board.open_run(run_dir)
    assert run.format == prime_rl.NAME and run.problems.empty
    shown = board_lines(run)
    exports = lines(run_dir / "token_exports/step_1/rank_0.jsonl")
    assert len(shown) == len(exports) + 1
    assert [line["subset"] for line in shown].count("all") == 1
    for line in shown:
        if line["subset"] == "all":
            assert line["episode_id"] == extra["id"] and line["stop_reason"] == "error"
            continue
        raw = next(raw for raw in exports if raw["export_sequence_idx"] == line["export_sequence_idx"])
        first = raw["loss_mask"].index(True)
        response = raw["token_ids"][first:]
        path = next(walked_branches(t)[0] for r in effective for t in r["traces"] if t["id"] == line["trace_id"])
        assert line["logprobs"] == raw["trainer_logprobs"][first:] and line["kind"] == "train"
        start = 0
        for turn, node in zip(line["turns"], path):
            end = start + len(node["token_ids"])
            if end > first and start < len(raw["token_ids"]):
                assert response[turn["token_start"] : turn["token_end"]] == node["token_ids"][max(first - start, 0) : len(raw["token_ids"]) - start]
            else:
                assert "token_start" not in turn
            start = end
        assert max((turn.get("token_end", 0) for turn in line["turns"]), default=0) <= len(response)


def test_prime_rl_traces_bad_input_is_counted_never_a_crash(tmp_path, tokenizer):
    """A node whose mask does not fit its tokens, tool-call arguments that are not JSON (kept as text), an unknown role,
    10,000 turns (the first MAX_TURNS kept), token ids that are not ids, a cut-off last line: notes in the load report,
    the other rollouts as they are."""
    run_dir = tmp_path / "run"
    good = agent_record(tokenizer, 0, 1, "g0")
    bad_mask = agent_record(tokenizer, 1, 1, "g1")
    bad_mask["traces"][0]["nodes"][2]["mask"] = bad_mask["traces"][0]["nodes"][2]["mask"][:-3]
    bad_args = agent_record(tokenizer, 2, 1, "g2", arguments='{"expression": 3+')
    odd_role = agent_record(tokenizer, 3, 1, "g3", extra_roles=("critic",))
    long = agent_record(tokenizer, 4, 1, "g4")
    nodes = long["traces"][0]["nodes"]
    for _ in range(10_000):
        nodes.append(dict(nodes[3], parent=len(nodes) - 1))
    not_ids = agent_record(tokenizer, 5, 1, "g5")
    not_ids["traces"][0]["nodes"][1]["token_ids"] = ["a", "b"]
    log_episodes(run_dir, [good, bad_mask, bad_args, odd_role, long, not_ids], 1, "train", "effective")
    with open(run_dir / "rollouts/step_1/train/effective/traces.jsonl", "ab") as file:
        file.write(json.dumps(good)[:200].encode())  # cut off while being written
    (run_dir / "metrics.jsonl").write_text("")
    run = rl_board.open_run(run_dir)
    shown = {line["group_id"]: line for line in board_lines(run)}
    assert sorted(shown) == ["g0", "g1", "g2", "g3", "g4", "g5"]
    reported = run.problems[run.problems["kind"] == "note"]
    by_line = dict(zip(reported["line"], reported["reason"]))
    order = [line["group_id"] for line in board_lines(run)]
    assert "mask has" in by_line[order.index("g1") + 1]
    assert "not valid JSON" in by_line[order.index("g2") + 1]
    assert shown["g2"]["turns"][2]["tool_calls"][0]["arguments"] == '{"expression": 3+'
    assert "unknown role 'critic'" in by_line[order.index("g3") + 1]
    assert [turn["role"] for turn in shown["g3"]["turns"]][-2] == "environment"
    assert f"the first {MAX_TURNS} kept" in by_line[order.index("g4") + 1] and len(shown["g4"]["turns"]) == MAX_TURNS
    assert all(turn["token_end"] <= len(shown["g4"]["response_tokens"]) for turn in shown["g4"]["turns"] if "token_end" in turn)
    assert "not token ids" in by_line[order.index("g5") + 1] and "response_tokens" not in shown["g5"]
    assert any("line 7 has no end yet" in reason for reason in reported["reason"])
    assert "g0" not in {order[line - 1] for line in reported["line"] if line}


# ------------------------------------------------------------------------------------------------------ rLLM


def rllm_episodes(base: Path) -> dict:
    """(mode, step) -> the episode files' records, each with its folder's epoch."""
    found = {}
    for folder in (base / "episodes").iterdir():
        mode, _, rest = folder.name.partition("_step_")
        step = int(rest.split("_epoch_")[0])
        found[(mode, step)] = [json.loads(path.read_text()) for path in sorted(folder.glob("episode_*.json"))]
    return found


def test_rllm_episodes_are_a_line_per_trajectory_with_turns_and_step_rewards(tmp_path):
    base = rllm_run(tmp_path / "logs" / "project" / "experiment", steps=(1, 2), val_steps=(2,))
    run = rl_board.open_run(base)
    assert run.format == rllm.NAME and run.steps == [1, 2] and run.problems.empty
    raw = rllm_episodes(base)
    shown = board_lines(run)
    assert len(shown) == sum(len(episode["trajectories"]) for episodes in raw.values() for episode in episodes)
    for line in shown:
        episode = next(e for e in raw[(line["mode"], line["step"])] if e["episode_id"] == line["episode_id"])
        trajectory = next(t for t in episode["trajectories"] if t["uid"] == line["trajectory_uid"])
        steps = trajectory["steps"]
        reward = trajectory["reward"] if trajectory["reward"] is not None else steps[-1]["reward"]
        assert line["reward"] == reward and line["epoch"] == 0 and line["termination_reason"] == episode["termination_reason"]
        assert line["stop_reason"] == {"env_done": "stop", "max_response_length_exceeded": "length"}[episode["termination_reason"]]
        several = len({t["name"] for t in episode["trajectories"]}) > 1
        assert line["group_id"] == (f"{episode['task_hash']}:{trajectory['name']}" if several else episode["task_hash"])
        assistants = [turn for turn in line["turns"] if turn["role"] == "assistant"]
        assert [turn["reward"] for turn in assistants] == [step["reward"] for step in steps]  # a step's reward on its response
        if steps[0]["chat_completions"]:  # the conversation grows a step at a time: its last step's messages are the turns
            messages = steps[-1]["chat_completions"]
            assert [(turn["role"], turn["text"]) for turn in line["turns"]] == [(m["role"], m["content"]) for m in messages]
            for turn, message in zip(line["turns"], messages):
                calls = message.get("tool_calls")
                assert turn.get("tool_calls") == ([{"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"]), "id": c["id"]} for c in calls] if calls else None)
            first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
            assert line["prompt"] == (messages[0]["content"] if first == 1 else messages[:first])
        else:  # a workflow's observations and actions
            roles = [turn["role"] for turn in line["turns"]]
            assert roles == ["user", "assistant", "environment", "assistant"]
            assert line["turns"][0]["text"] == steps[0]["observation"]
            assert line["turns"][1]["tool_calls"] == [{"name": "calculator", "arguments": {"expression": steps[0]["action"][0]["arguments"]["expression"]}}]
            assert line["turns"][3]["text"] == steps[1]["model_response"]
    samples = run.samples
    assert set(samples["text/mode"]) == {"train", "val"} and samples[samples["text/mode"] == "val"]["step"].unique().tolist() == [2]
    assert rl_board.list_runs(base) == [str(base)] and rl_board.list_runs(base.parent) == [str(base)]
    assert rl_board.open_run(base / "episodes").samples["reward"].tolist() == samples["reward"].tolist()


def test_rllm_step_without_its_summary_waits_and_bad_files_are_notes(tmp_path):
    base = rllm_run(tmp_path / "e", steps=(1, 2), val_steps=(), unfinished=(2,))
    run = rl_board.open_run(base)
    assert run.steps == [1]
    [[file, _, kind, reason]] = run.problems.values.tolist()
    assert (file, kind) == ("train_step_2_epoch_0/", "skipped") and "batch_summary.json" in reason
    step_1 = base / "episodes" / "train_step_1_epoch_0"
    cut = sorted(step_1.glob("episode_*.json"))[0]
    cut.write_text(cut.read_text()[:300])  # cut off
    tool = sorted(step_1.glob("episode_*.json"))[1]
    episode = json.loads(tool.read_text())
    call = episode["trajectories"][0]["steps"][0]["chat_completions"][2]["tool_calls"][0]
    call["function"]["arguments"] = "{not json"
    episode["trajectories"][0]["steps"][0]["chat_completions"][2]["role"] = "critic"
    episode["trajectories"][0]["steps"][1]["chat_completions"][:3] = episode["trajectories"][0]["steps"][0]["chat_completions"]
    tool.write_text(json.dumps(episode, indent=2))
    run = rl_board.open_run(base)
    reasons = notes(run)
    assert any(cut.name in reason and "not JSON" in reason for reason in reasons)
    assert any("not valid JSON" in reason and "unknown role 'critic'" in reason for reason in reasons)
    line = next(line for line in board_lines(run) if line["episode_id"] == episode["episode_id"])
    assert line["turns"][2]["role"] == "environment" and line["turns"][2]["tool_calls"][0]["arguments"] == "{not json"
    readable = [json.loads(path.read_text()) for path in step_1.glob("episode_*.json") if path != cut]
    assert len(run.samples) == sum(len(episode["trajectories"]) for episode in readable)  # all but the cut-off episode's


@pytest.mark.parametrize("messages, value", [
    ([{"role": "assistant", "content": "42"}], "42"),
    ([{"role": "assistant", "reasoning_content": "6*7", "content": "42"}], "<think>\n6*7\n</think>\n42"),
    ([{"role": "assistant", "reasoning": "6*7", "content": "42"}], "<think>\n6*7\n</think>\n42"),  # vLLM's and rLLM's name
    ([{"role": "assistant", "content": [{"type": "thinking", "thinking": "6*7"}, {"type": "text", "text": "42"}]}], "<think>\n6*7\n</think>\n42"),  # Tinker's parts
    ([{"role": "assistant", "content": [{"type": "image"}, {"type": "text", "text": "a cat"}]}], None),  # an image: the messages
    ([{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}], None),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], None),
    ([{"role": "assistant", "content": None, "reasoning_content": "6*7"}], "<think>\n6*7\n</think>\n"),  # stopped mid-thought
    ([{"role": "assistant", "content": "42", "reasoning": {"summary": ["6*7"]}}], None),  # not a text: the messages keep it
    ([{"role": "assistant", "content": "42", "reasoning_content": "6*7", "reasoning": "7*6"}], None),  # two texts: both kept
    ([{"role": "assistant", "content": "42", "reasoning_content": "6*7", "reasoning": "6*7"}], "<think>\n6*7\n</think>\n42"),
    ([{"role": "assistant", "content": "42", "reasoning_content": "", "reasoning": "6*7"}], "<think>\n6*7\n</think>\n42"),
])
def test_one_message_of_text_is_its_text_with_its_reasoning_and_anything_else_the_messages(messages, value):
    assert messages_value(messages) == (messages if value is None else value)


def test_rllm_reasoning_is_the_turn_s_think_block_and_an_episode_without_trajectories_is_a_note(tmp_path):
    """Step.from_model_output writes an assistant message's reasoning beside its content (rllm/types.py): the turn shows
    it before its text, as chat templates write it. An episode that ended before its first trajectory has no sample,
    and the load report says so."""
    base = rllm_run(tmp_path / "e", steps=(1,), val_steps=())
    step_1 = base / "episodes" / "train_step_1_epoch_0"
    path = sorted(step_1.glob("episode_*.json"))[0]
    episode = json.loads(path.read_text())
    for step in episode["trajectories"][0]["steps"]:
        for message in step["chat_completions"]:
            if message["role"] == "assistant":
                message["reasoning"] = f"I should compute {message['content'][:5]}"
    path.write_text(json.dumps(episode))
    empty = step_1 / "episode_timeout.json"
    empty.write_text(json.dumps(episode | {"episode_id": "timeout", "trajectories": [], "termination_reason": "timeout"}))
    run = rl_board.open_run(base)
    line = next(line for line in board_lines(run) if line["episode_id"] == episode["episode_id"])
    messages = episode["trajectories"][0]["steps"][-1]["chat_completions"]
    assert [turn["text"] for turn in line["turns"]] == [f"<think>\n{m['reasoning']}\n</think>\n{m['content']}" if "reasoning" in m else m["content"] for m in messages]
    assert any(m.get("reasoning") for m in messages)
    assert [reason for reason in notes(run) if empty.name in reason] == ["episode_timeout.json has no trajectory (termination_reason timeout): an episode without samples"]
    assert "timeout" not in set(run.samples.get("text/episode_id", []))


# ------------------------------------------------------------------------------------------------------ ROLL


def roll_rows(path: Path) -> list[dict]:
    columns = json.loads(path.read_text())
    return [{name: values[row] for name, values in columns.items()} for row in range(len(columns["trajectory_data"]))]


def test_roll_dumps_are_a_line_per_trajectory_with_turns_and_step_rewards(tmp_path):
    """An agent-native batch's step-wise samples leave one row per trajectory (remove_nan_items): a line each, its
    messages the turns, its step rewards on its assistant turns; a proxy batch's rows (a step each) a line each."""
    folder = roll_run(tmp_path / "dump", steps=(1, 2, 3), trajectories=4, proxy_steps=(3,))
    run = rl_board.open_run(folder)
    assert run.format == roll.NAME and run.steps == [1, 2, 3] and run.problems.empty
    shown = board_lines(run)
    assert len(shown) == 4 + 4 + 8
    by_step = {step: roll_rows(folder / f"rollout_dump_data.step_{step}.jsonl") for step in (1, 2, 3)}
    for line in shown:
        rows = by_step[line["step"]]
        row = next(r for r in rows if json.loads(r["trajectory_data"])["trajectory_id"] == line["trajectory_id"])
        data, messages = json.loads(row["trajectory_data"]), json.loads(row["messages"])
        messages = messages[0] if isinstance(messages[0], list) else messages
        texts = [m["content"] if isinstance(m["content"], str) else "".join(p["text"] for p in m["content"]) for m in messages]
        assert [(turn["role"], turn["text"]) for turn in line["turns"]] == [(m["role"], text) for m, text in zip(messages, texts)]
        for turn, message in zip(line["turns"], messages):
            calls = message.get("tool_calls")
            assert turn.get("tool_calls") == ([{"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"]), "id": c["id"]} for c in calls] if calls else None)
        assistants = [turn for turn in line["turns"] if turn["role"] == "assistant"]
        assert line["reward"] == data["reward_info"]["episode_reward"]
        if "step_rewards" in data["reward_info"]:
            env = data["env_info"]
            assert [turn["reward"] for turn in assistants] == data["reward_info"]["step_rewards"]
            assert line["group_id"] == f"{env['tag']}_{env['group_id']}_{env['episode_id']}_{env['seed']}" and line["mode"] == "train"
            assert line["stop_reason"] == "stop" and line["truncated"] is False
        else:
            assert assistants[-1]["reward"] == data["reward_info"]["step_reward"] and line["branch_or_step_idx"] == data["branch_or_step_idx"]
    assert rl_board.list_runs(folder) == [str(folder)]


# A dump nested deeper than a JSON decoder goes (whole, or cut off inside) is listed as skipped: its RecursionError
# went out of open_run (found by a review). Any converter's failure on a file is that file's problem, not the load's.
def test_roll_dump_nested_too_deep_is_skipped_and_the_rest_loads(tmp_path):
    folder = roll_run(tmp_path / "dump", steps=(1, 2), trajectories=2)
    deep = '{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}"
    for name, text in (("rollout_dump_data.step_3.jsonl", deep), ("rollout_dump_data.step_4.jsonl", deep[:150_000])):
        (folder / name).write_text(text)
    run = rl_board.open_run(folder)
    assert run.steps == [1, 2]
    skipped = {file: reason for file, _, kind, reason in run.problems.values.tolist() if kind == "skipped"}
    assert set(skipped) == {"rollout_dump_data.step_3.jsonl", "rollout_dump_data.step_4.jsonl"}
    assert all(reason.startswith("could not be read as ROLL") for reason in skipped.values()), skipped


def test_roll_truncated_dump_waits_and_bad_rows_are_notes(tmp_path):
    folder = roll_run(tmp_path / "dump", steps=(1, 2), trajectories=2)
    dump = folder / "rollout_dump_data.step_2.jsonl"
    whole = dump.read_text()
    dump.write_text(whole[: len(whole) // 2])  # the writing process is still at it
    run = rl_board.open_run(folder)
    assert run.steps == [1]
    [[file, _, kind, reason]] = run.problems.values.tolist()
    assert (file, kind) == (dump.name, "skipped") and "still being written" in reason
    columns = json.loads(whole)
    data = json.loads(columns["trajectory_data"][0])
    columns["trajectory_data"][1] = "{cut"
    messages = json.loads(columns["messages"][0])
    messages[0][2]["tool_calls"][0]["function"]["arguments"] = "[1,"
    messages[0][3]["role"] = "critic"
    columns["messages"][0] = json.dumps(messages)
    dump.write_text(json.dumps(columns) + "\n")
    os.utime(dump, ns=(dump.stat().st_mtime_ns + 10**9,) * 2)
    run = rl_board.open_run(folder)
    assert run.steps == [1, 2]
    reasons = notes(run)
    assert any("trajectory_data is not valid JSON" in reason for reason in reasons)
    assert any("not valid JSON" in reason and "unknown role 'critic'" in reason for reason in reasons)
    step_2 = [line for line in board_lines(run) if line["step"] == 2]
    assert step_2[0]["trajectory_id"] == data["trajectory_id"] and step_2[0]["turns"][2]["tool_calls"][0]["arguments"] == "[1,"
    assert step_2[0]["turns"][3]["role"] == "environment" and "trajectory_id" not in step_2[1]


def test_registry_asks_the_agent_formats_before_the_board_s_own_jsonl():
    assert FORMATS.index(rllm) < FORMATS.index(board_jsonl) and FORMATS.index(roll) < FORMATS.index(board_jsonl)
