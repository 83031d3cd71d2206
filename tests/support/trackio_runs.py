"""trackio projects written by trackio itself (pip trackio, tests/requirements.txt): trackio.init, trackio.log of
metrics and of trackio.Trace, trackio.finish, offline, in a process of its own whose TRACKIO_DIR is a test's folder
(trackio reads TRACKIO_DIR once, when imported). Each trace is made here with the turns and fields the board must
show for it, written out by hand from the messages (never by the board's converter).

- agent.db, runs grpo-a and grpo-b: TRL's async GRPO rollouts (log_rollout_traces' messages and metadata: tool calls
  with object arguments, a tool result {"role": "tool", "name", "content"}, a failed tool as str({"error": ...})),
  an OpenAI-style trace (tool_calls with ids and JSON-string arguments, tool_call_id), and Hugging Face's
  TrackioCallback metrics (train/<key>, eval/<key>, train/global_step on trackio's own step counter).
- messy.db, run edge: what the board must survive: an unknown role, tool arguments that are not JSON, a trace of
  LONG_TRACE messages, spans that say a tool failed, a trace of spans only, non-finite metadata.
- async.db, run grpo: TRL's async GRPO traces of two policy versions with their model_version (the staleness each
  must give), and bad versions: a string, a negative, a fraction, a boolean, a huge one, one after its step, null.
- hf.db, run sft: transformers' TrackioCallback itself, training, evaluating, predicting and resumed
  (write_trainer_callback).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import PROJECT

SYSTEM = "You are a calculator agent. Use the calculator tool."

QUESTIONS = [("What is 3+4?", "3+4", "7"), ("计算 15 减去 8 等于多少？", "15-8", "7"), ("What is 2^5 - 9?", "2**5-9", "23")]

LONG_TRACE = 10_000


# ------------------------------------------------------------------------------------------ traces and their lines


# One rollout as TRL's async GRPO logs it (log_rollout_traces: messages = prompt + completion, metadata = the sample's
# metrics with advantage, group_id, model_version, prompt/completion tokens; the trace's step the policy version when
# the trainer took it), with the turns and fields it must give: model_version is the line's policy_version.
def trl_rollout(step: int, question: int, sample: int) -> dict:
    text, expression, answer = QUESTIONS[question]
    version = step - min(step - 1, (question + sample) % 3)  # TRL's versions start at 1 (the cold sync)
    failed = sample == 1
    reward = 0.0 if failed else 1.0
    result = str({"error": "name 'x' is not defined"}) if failed else answer
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": text},
        {"role": "assistant", "content": "", "reasoning_content": f"I should compute {expression}.",
         "tool_calls": [{"type": "function", "function": {"name": "calculator", "arguments": {"expression": "x" if failed else expression}}}]},
        {"role": "tool", "name": "calculator", "content": result},
        {"role": "assistant", "content": f"The answer is {'unknown' if failed else answer}."},
    ]
    metadata = {
        "reward": reward, "reward_std": 0.5, "rewards/accuracy": reward, "rewards/format": 0.5,
        "tools/call_frequency": 1.0, "tools/failure_frequency": 1.0 if failed else 0.0,
        "advantage": 1.0 - 2 * sample, "group_id": step * 10 + question, "model_version": version,
        "prompt_tokens": 31, "completion_tokens": 17 + sample,
    }
    tool_turn = {"role": "tool", "text": result, "tool_name": "calculator"}
    if failed:
        tool_turn["error"] = "name 'x' is not defined"
    turns = [
        {"role": "system", "text": SYSTEM},
        {"role": "user", "text": text},
        {"role": "assistant", "text": f"<think>\nI should compute {expression}.\n</think>\n",
         "tool_calls": [{"name": "calculator", "arguments": {"expression": "x" if failed else expression}, "id": None}]},
        tool_turn,
        {"role": "assistant", "text": f"The answer is {'unknown' if failed else answer}."},
    ]
    fields = {
        "reward": reward, "advantage": 1.0 - 2 * sample, "rewards_per_func": {"accuracy": reward, "format": 0.5},
        "reward_std": 0.5, "tools/call_frequency": 1.0, "tools/failure_frequency": 1.0 if failed else 0.0,
        "policy_version": version, "prompt_tokens": 31, "completion_tokens": 17 + sample, "trace_key": "rollouts",
        "group": f"{step * 10 + question}", "prompt": f"[system]\n{SYSTEM}\n\n[user]\n{text}",
    }
    return {"messages": messages, "metadata": metadata, "turns": turns, "fields": fields}


# A chat-completions agent's trace as the OpenAI API writes it: tool calls with ids and JSON-string arguments,
# results with tool_call_id only, and a finish_reason.
def openai_trace() -> dict:
    messages = [
        {"role": "user", "content": "Weather in Paris and in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\", \"unit\": \"C\"}"}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "4 C, snow"},
        {"role": "assistant", "content": "Paris is sunny at 18 C; Oslo has snow at 4 C and the answer was cut"},
    ]
    turns = [
        {"role": "user", "text": "Weather in Paris and in Oslo?"},
        {"role": "assistant", "text": "", "tool_calls": [
            {"name": "weather", "arguments": {"city": "Paris"}, "id": "call_1"},
            {"name": "weather", "arguments": {"city": "Oslo", "unit": "C"}, "id": "call_2"},
        ]},
        {"role": "tool", "text": "18 C, sunny", "tool_name": "weather", "tool_call_id": "call_1"},
        {"role": "tool", "text": "4 C, snow", "tool_name": "weather", "tool_call_id": "call_2"},
        {"role": "assistant", "text": "Paris is sunny at 18 C; Oslo has snow at 4 C and the answer was cut"},
    ]
    metadata = {"reward": 0.25, "finish_reason": "length", "session_id": "s-42"}
    fields = {"reward": 0.25, "stop_reason": "length", "truncated": True, "session_id": "s-42", "trace_key": "agent", "prompt": "Weather in Paris and in Oslo?"}
    return {"messages": messages, "metadata": metadata, "turns": turns, "fields": fields}


# The traces the board must survive, with what it must make of each (and the load report's kinds they add).
def messy_traces() -> list[dict]:
    unknown_role = {
        "messages": [{"role": "user", "content": "hi"}, {"role": "critic", "content": "too short"}, {"role": "assistant", "content": "hello"}],
        "metadata": {"reward": float("nan"), "stop_reason": "stop"},
        "turns": [{"role": "user", "text": "hi"}, {"role": "environment", "text": "too short"}, {"role": "assistant", "text": "hello"}],
        "fields": {"reward": None, "stop_reason": "stop"},
        "problem": "unknown role",
    }
    bad_arguments = {
        "messages": [{"role": "user", "content": "run it"}, {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c9", "type": "function", "function": {"name": "shell", "arguments": "{\"cmd\": \"ls\""}}]},
            {"role": "tool", "tool_call_id": "c9", "content": "permission denied"}],
        "metadata": {"reward": -1.0},
        "spans": [{"id": "span-1", "name": "shell", "kind": "tool", "status": "error", "error": "exit code 126"}],
        "turns": [{"role": "user", "text": "run it"},
                  {"role": "assistant", "text": "", "tool_calls": [{"name": "shell", "arguments": "{\"cmd\": \"ls\"", "id": "c9"}]},
                  {"role": "tool", "text": "permission denied", "tool_name": "shell", "tool_call_id": "c9", "error": "exit code 126"}],
        "fields": {"reward": -1.0},
        "problem": "invalid tool arguments",
    }
    long_trace = {
        "messages": [{"role": "user", "content": "count"}] + [{"role": "assistant" if i % 2 else "user", "content": str(i)} for i in range(1, LONG_TRACE)],
        "metadata": {"reward": 0.5},
        "fields": {"reward": 0.5, "turns_left_out": LONG_TRACE - 2000},
        "problem": "long trace",
    }
    spans_only = {
        "messages": [],
        "spans": [
            {"id": "g1", "name": "llm", "kind": "generation", "start_time": "2026-01-01T00:00:00Z", "output": {"text": "Let me search."}},
            {"id": "t1", "name": "search", "kind": "tool", "start_time": "2026-01-01T00:00:01Z", "input": {"q": "trackio"}, "output": "no results", "status": "failed"},
        ],
        "metadata": {"reward": 0.0, "truncated": False},
        "turns": [{"role": "assistant", "text": "Let me search."},
                  {"role": "assistant", "text": "", "tool_calls": [{"name": "search", "arguments": {"q": "trackio"}, "id": "t1"}]},
                  {"role": "tool", "text": "no results", "tool_name": "search", "tool_call_id": "t1", "error": "failed"}],
        "fields": {"reward": 0.0, "truncated": False, "prompt": ""},
    }
    return [unknown_role, bad_arguments, long_trace, spans_only]


# ------------------------------------------------------------------------------------------------ the projects

STEPS = (1, 2, 3)


# What each project's runs log: (project, run, [(step, key, [trace, ...])], [(metrics, step or None)]).
def agent_runs() -> list:
    grpo_a = [(step, "rollouts", [trl_rollout(step, question, sample) for question in range(2) for sample in range(2)]) for step in STEPS]
    grpo_a.append((3, "agent", [openai_trace()]))
    metrics_a = []
    for global_step in STEPS:  # Hugging Face's TrackioCallback: rewrite_logs' names, trackio's own step counter
        metrics_a.append(({"train/loss": 1.0 / global_step, "train/reward": 0.25 * global_step, "train/learning_rate": 1e-6, "train/global_step": global_step}, None))
        if global_step == 2:
            metrics_a.append(({"eval/loss": 0.75, "eval/runtime": 1.5, "train/global_step": global_step}, None))
    grpo_b = [(1, "rollouts", [trl_rollout(1, 2, 0)])]
    metrics_b = [({"train/loss": 2.0, "train/global_step": 1}, None)]
    return [("agent", "grpo-a", grpo_a, metrics_a, {"learning_rate": 1e-6}), ("agent", "grpo-b", grpo_b, metrics_b, {"learning_rate": 5e-6})]


def messy_runs() -> list:
    return [("messy", "edge", [(7, "traces", messy_traces())], [({"loss": float("nan"), "score": 1.0}, 7)], {})]


# TRL's async GRPO traces 8 samples of every 8th policy version, at step = that version (RolloutQueueDataset): each a
# trace with its model_version and the staleness the board must give (None: none), and bad versions, each with the
# words of its load-report note.
VERSIONED_STEPS = {8: [8, 8, 7, 7, 6, 5, 8, 4], 16: [16, 15, 15, 14, 13, 12, 16, 16]}
BAD_VERSIONS = [("fifteen", "a string"), (-1, "negative (-1)"), (15.5, "a fraction (15.5)"), (True, "a boolean"), (2**62, "an integer out of range"), (17, "after the line's step 16")]


def versioned_trace(step: int, metadata: dict, staleness: int | None, note: str | None = None) -> dict:
    messages = [{"role": "user", "content": f"question at {step}"}, {"role": "assistant", "content": "answer"}]
    return {"messages": messages, "metadata": {"reward": 1.0, **metadata}, "staleness": staleness, "note": note}


def versioned_runs() -> list:
    traces = [(step, "rollouts", [versioned_trace(step, {"model_version": version}, step - version) for version in versions]) for step, versions in VERSIONED_STEPS.items()]
    bad = [versioned_trace(16, {"model_version": version}, None, note) for version, note in BAD_VERSIONS]
    bad += [versioned_trace(16, {"model_version": None}, None), versioned_trace(16, {"policy_version": 14}, 2)]  # null: none; another writer's key
    traces.append((16, "rollouts", bad))
    return [("async", "grpo", traces, [], {})]


# ----------------------------------------------------------------------------------------------- the writer


def write_runs(runs: list):  # in the writer's process
    import trackio

    for project, name, traces, metrics, config in runs:
        trackio.init(project=project, name=name, config=config, auto_log_cpu=False, auto_log_gpu=False)
        for numbers, step in metrics:
            trackio.log(numbers, step=step)
        for step, key, logged in traces:
            trackio.log({key: [trackio.Trace(messages=trace["messages"], metadata=trace["metadata"], spans=trace.get("spans")) for trace in logged]}, step=step)
        trackio.finish()


# Hugging Face's TrackioCallback itself (transformers' integration), driven as the Trainer drives it, project "hf", run
# "sft": on_log at global steps 10..100 (logging_steps=10; loss 1/step), a trackio.log of the script's own between
# steps 50 and 60, an evaluation at 100, then trainer.predict()'s on_predict (test_* metrics, without
# train/global_step: trackio files it at its own step counter, 13). Then the run resumed from checkpoint-70 by a new
# launch (a new callback: trackio.init(resume="allow") continues the run) logging steps 80, 90, 100 again (loss 2/step).
TRAINER_STEPS = range(10, 110, 10)
RESUMED_STEPS = (80, 90, 100)


def write_trainer_callback():  # in the writer's process
    import trackio
    from transformers import TrainerControl, TrainerState, TrainingArguments
    from transformers.integrations.integration_utils import TrackioCallback

    args = TrainingArguments(output_dir=os.path.join(os.environ["TRACKIO_DIR"], "out"), report_to=["trackio"], project="hf", run_name="sft", trackio_static_space_id=False)
    state, control, callback = TrainerState(), TrainerControl(), TrackioCallback()
    callback.on_train_begin(args, state, control)
    for global_step in TRAINER_STEPS:
        state.global_step = global_step
        callback.on_log(args, state, control, logs={"loss": 1.0 / global_step, "learning_rate": 1e-4})
        if global_step == 50:
            trackio.log({"reward_hacking_rate": 0.25})  # the script's own, no step
    callback.on_log(args, state, control, logs={"eval_loss": 0.9, "eval_runtime": 1.0})  # the abandoned launch's: replaced
    trackio.finish()
    state, callback = TrainerState(), TrackioCallback()  # the resumed launch
    callback.on_train_begin(args, state, control)
    for global_step in RESUMED_STEPS:
        state.global_step = global_step
        callback.on_log(args, state, control, logs={"loss": 2.0 / global_step, "learning_rate": 1e-4})
    callback.on_log(args, state, control, logs={"eval_loss": 0.4, "eval_runtime": 1.5})
    callback.on_predict(args, state, control, metrics={"test_loss": 0.5, "test_runtime": 2.0, "test_samples_per_second": 3.0})
    trackio.finish()


def writer_environment(trackio_dir: Path, **extra) -> dict:
    return {**os.environ, "TRACKIO_DIR": str(trackio_dir), "TRACKIO_STORAGE_MODE": "sqlite", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(PROJECT), **extra}


# Runs trackio in a process of its own, writing `what` (the name of a function here returning runs, or of a write_*
# function that writes them itself) into trackio_dir.
def write_trackio(trackio_dir: Path, what: str, **environment) -> Path:
    code = f"from tests.support import trackio_runs as t; t.{what}()" if what.startswith("write_") else f"from tests.support import trackio_runs as t; t.write_runs(t.{what}())"
    subprocess.run([sys.executable, "-c", code], cwd=PROJECT, env=writer_environment(trackio_dir, **environment), check=True, capture_output=True, timeout=300)
    return trackio_dir


# ------------------------------------------------------------------------------------------ a run being written

LIVE_BATCH = 4


# trackio logging a run in two batches, waiting between them: it writes READY once the first batch is committed and
# logs the second once GO exists.
def live_writer(trackio_dir: Path, **environment) -> subprocess.Popen:
    code = f"from tests.support import trackio_runs as t; t.write_live({str(trackio_dir)!r})"
    return subprocess.Popen([sys.executable, "-c", code], cwd=PROJECT, env=writer_environment(trackio_dir, **environment), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def write_live(trackio_dir: str):
    import sqlite3

    import trackio

    folder = Path(trackio_dir)
    trackio.init(project="live", name="live-run", auto_log_cpu=False, auto_log_gpu=False)
    trackio.log({"rollouts": [trackio.Trace(**live_trace(i)) for i in range(LIVE_BATCH)]}, step=1)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # trackio commits from a thread of its own
        try:
            with sqlite3.connect(f"file:{folder / 'live.db'}?mode=ro", uri=True) as connection:
                if connection.execute("SELECT count(*) FROM traces").fetchone()[0] >= LIVE_BATCH:
                    break
        except sqlite3.Error:
            pass
        time.sleep(0.05)
    (folder / "READY").touch()
    while not (folder / "GO").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    trackio.log({"rollouts": [trackio.Trace(**live_trace(i)) for i in range(LIVE_BATCH, 2 * LIVE_BATCH)]}, step=2)
    trackio.finish()


def live_trace(i: int) -> dict:
    return {"messages": [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}], "metadata": {"reward": float(i)}}


def wait_for(path: Path, process: subprocess.Popen, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None:
            raise AssertionError(f"the trackio writer stopped: {process.stderr.read().decode()[-2000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path.name} never came")
        time.sleep(0.05)


# A trace row as trackio inserts one (SQLiteStorage._insert_trace_rows), for a writer that holds its transaction open.
def trace_row(run_id: str, step: int, index: int) -> tuple:
    trace = live_trace(index)
    return (f"{run_id}:raw:{index}", run_id, "2026-01-01T00:00:00+00:00", "live-run", step, "rollouts", index,
            json.dumps(trace["messages"]), json.dumps(trace["metadata"]), f"question {index}", "[]")


INSERT_TRACE = "INSERT INTO traces (id, run_id, timestamp, run_name, step, key, trace_index, messages, metadata, search_text, spans) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
