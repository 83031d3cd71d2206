"""Writers that reproduce the agent trajectories of prime-rl/verifiers, rLLM and ROLL with those frameworks' own writing
code, copied below with its source cited (none is installable here without its GPU stack: prime-rl and ROLL are not on
the package index, rLLM's package there is its model gateway only; verifiers is, but its episode record comes out of
prime-rl's orchestrator, so the record's layout is built here as Episode.to_record() makes it), fed with toy agent
episodes: a question, a calculator tool call, its result, an answer. Token ids come from the tiny byte-level BPE of
tests/support/prime_rl_nemo_rl.py, so a test can decode them. Every writer is deterministic (seeded).

- prime-rl/verifiers: FileMonitor.log_episodes (prime_rl_nemo_rl.log_episodes: rollouts/step_<n>/<kind>/<subset>/
  traces.jsonl) with records laid out as verifiers' Episode.to_record() (agent_record).
- rLLM: EpisodeLogger (episodes/<mode>_step_<n>_epoch_<e>/episode_hash<h>_id<id>.json and batch_summary.json).
- ROLL: dump_rollout_trajectories, remove_nan_items and write_to_json_process (rollout_dump_data.step_<n>.jsonl), with
  AgentNativeStepEnvManager's and ProxyEnvManager's trajectory_data.
"""

import copy
import hashlib
import json
import os
import random
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from tests.support.prime_rl_nemo_rl import GENERATION_PROMPT, f32, log_episodes

QUESTIONS = [("What is 3+4?", "3+4", "7"), ("What is 12*3?", "12*3", "36"), ("计算 15 减去 8", "15-8", "7")]


SYSTEM = "You are a careful solver. Use the calculator tool."


# ================================================================================================ prime-rl/verifiers


# One message of a conversation as a verifiers node would carry it: the message (verifiers' typed message dumped with
# exclude_none), its ChatML text, and whether the model sampled it.
@dataclass
class Message:
    message: dict
    text: str
    sampled: bool = False


def conversation(question: str, expression: str, answer: str, rng: random.Random, arguments: str | None = None, turns: int = 1) -> list[Message]:
    """A system prompt, a question, then `turns` rounds of an assistant tool call and its result, and the answer."""
    messages = [Message({"role": "system", "content": SYSTEM}, f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"),
                Message({"role": "user", "content": question}, f"<|im_start|>user\n{question}<|im_end|>\n")]
    for turn in range(turns):
        call_id = f"call_{rng.randrange(10**6)}_{turn}"
        args = arguments if arguments is not None else json.dumps({"expression": expression})
        content = "I will compute it."
        messages.append(Message({"role": "assistant", "content": content, "tool_calls": [{"id": call_id, "name": "calculator", "arguments": args}]},
                                f"{content}<tool_call>{args}</tool_call><|im_end|>", sampled=True))
        result = answer if rng.random() < 0.8 else str(int(answer) + 1)
        messages.append(Message({"role": "tool", "tool_call_id": call_id, "content": result, "name": "calculator"},
                                f"\n<|im_start|>tool\n{result}<|im_end|>\n"))
    final = f"The answer is \\boxed{{{answer if rng.random() < 0.6 else int(answer) + 2}}}."
    messages.append(Message({"role": "assistant", "content": final}, f"{final}<|im_end|>", sampled=True))
    return messages


# A MessageNode as model_dump(mode="json", exclude_none=True) writes it (verifiers/v1/graph.py at
# PrimeIntellect-ai/verifiers a60a606ecc4d309247edf9ff92c3eabca362781f, fields in declaration order): an input message's
# node holds its scaffold and text (mask False); an assistant's the generation prompt (mask False) then its sampled
# completion (mask True), the sampler's log-probs per sampled token, and, once the trainer's algorithm stamped them,
# advantages and reference_logprobs per sampled token.
def node(tokenizer: Tokenizer, message: Message, parent: int | None, rng: random.Random, timestamp: float, advantage: float | None, reference: bool) -> dict:
    encode = lambda text: tokenizer.encode(text).ids  # noqa: E731
    if message.sampled:
        scaffold, completion = encode(GENERATION_PROMPT), encode(message.text)
        ids, mask = scaffold + completion, [False] * len(scaffold) + [True] * len(completion)
    else:
        ids = encode(message.text)
        mask = [False] * len(ids)
    logprobs = [f32(-rng.expovariate(1.5) - 1e-4) for flag in mask if flag]
    record = {"parent": parent, "message": message.message, "sampled": message.sampled, "timestamp": timestamp, "token_ids": ids, "mask": mask,
              "is_content": [], "logprobs": logprobs}
    if message.sampled and advantage is not None:
        record["advantages"] = [f32(advantage)] * len(logprobs)
    if message.sampled and reference:
        record["reference_logprobs"] = [f32(lp + rng.gauss(0, 0.05)) for lp in logprobs]
    return {key: value for key, value in record.items() if value is not None}


# An Episode.to_record() (verifiers/v1/episode.py and trace.py at verifiers a60a606): the episode's id, env, task, group,
# run, ok, errors and traces; a trace's version, id, verifiers, task, agent, tools, nodes, calls (a ModelCall per
# sampled node: node, model, finish_reason, usage), request_rewrites, response_rewrites, rewards, metrics, info,
# extra_usage, is_completed, ok, stop_condition, errors, timing. `forks` adds a second branch: a user message after the
# question that restarts from it (a compaction), answered once. `error` makes the trace fail (ok false, stop "error").
def agent_record(tokenizer: Tokenizer, index: int, step: int, group: str, kind: str = "train", seed: int = 0, advantage: float | None = None,
                 reference: bool = False, arguments: str | None = None, turns: int = 1, forks: bool = False, error: str | None = None,
                 stop_condition: str | None = "agent_completed", extra_roles: tuple = (), no_traces: bool = False) -> dict:
    rng = random.Random(seed * 1000 + index)
    question, expression, answer = QUESTIONS[index % len(QUESTIONS)]
    messages = conversation(question, expression, answer, rng, arguments, turns)
    for role in extra_roles:  # a message of a role the board does not know, before the answer
        messages.insert(-1, Message({"role": role, "content": f"({role} says hello)"}, f"<|im_start|>{role}\n({role} says hello)<|im_end|>\n"))
    nodes = [node(tokenizer, message, position - 1 if position else None, rng, 1.7e9 + index + position, advantage, reference)
             for position, message in enumerate(messages)]
    if forks:  # a second branch from the question: a new user turn and its answer
        restart = Message({"role": "user", "content": "Summarise and answer again."}, "<|im_start|>user\nSummarise and answer again.<|im_end|>\n")
        again = Message({"role": "assistant", "content": f"It is {answer}."}, f"It is {answer}.<|im_end|>", sampled=True)
        nodes.append(node(tokenizer, restart, 1, rng, 1.8e9, advantage, reference))
        nodes.append(node(tokenizer, again, len(nodes) - 1, rng, 1.8e9, advantage, reference))
    calls = [{"node": i, "model": "policy", "finish_reason": "tool_calls" if n["message"].get("tool_calls") else "stop",
              "usage": {"prompt_tokens": 10, "completion_tokens": sum(n["mask"])}, "time": {"start": 0.0, "end": 0.0}}
             for i, n in enumerate(nodes) if n["sampled"]]
    correct = 1.0 if f"\\boxed{{{answer}}}" in messages[-1].message["content"] else 0.0
    errors = [{"type": "ToolError", "message": error}] if error else []
    trace = {
        "version": 1, "id": f"trace-{kind}-{step}-{index}", "verifiers": {"version": "0.3.1"},
        "task": {"type": "MathTask", "data": {"question": question, "answer": answer}},
        "agent": {"config": {}, "name": "agent", "trainable": True},
        "tools": [{"name": "calculator", "description": "Evaluates an arithmetic expression.", "parameters": {"type": "object"}}],
        "nodes": [] if error == "before any message" else nodes, "calls": [] if error else calls, "request_rewrites": [], "response_rewrites": [],
        "rewards": {"correct": None, "format": None} if error else {"correct": {"score": correct, "weight": 1.0}, "format": {"score": 1.0, "weight": 0.25}},
        "metrics": {"num_tool_calls": float(turns)}, "info": {}, "extra_usage": [],
        "is_completed": True, "ok": not error, "stop_condition": "error" if error else stop_condition, "errors": errors,
        "timing": {"start": 1.7e9, "boot": {"start": 0.0, "end": 0.0}},
    }
    return {
        "id": f"episode-{kind}-{step}-{index}", "env": {"id": "calc", "name": "calc"}, "task": trace["task"], "group": {"id": group},
        "run": {"type": "train", "id": "run", "work": {"type": kind, "step": step, "policy": {"start": max(step - 1, 0), "end": max(step - 1, 0)}}},
        "ok": not error and not no_traces, "errors": [{"type": "SandboxError", "message": "sandbox did not start"}] if no_traces else errors,
        "traces": [] if no_traces else [trace],
    }


# A prime-rl run folder with the file monitor's files: per step, the train window's rollouts (all/: every one as it
# arrived, errored ones too, without advantages), the shipped ones (effective/: with advantages and reference
# log-probs), and an eval's (eval/all and eval/effective: the non-errored); metrics.jsonl beside rollouts/.
def prime_rl_traces_run(folder, tokenizer: Tokenizer, steps=(1, 2), group_size=2, eval_steps=(2,), reference=True) -> Path:
    run_dir = Path(folder)
    run_dir.mkdir(parents=True, exist_ok=True)
    for step in steps:
        arrived, shipped = [], []
        for number in range(len(QUESTIONS)):
            group = f"group-{step}-{number}"
            for member in range(group_size):
                index = number * group_size + member
                forks = number == 1 and member == 0
                error = "calculator crashed" if number == 2 and member == 1 else None
                record = agent_record(tokenizer, index, step, group, seed=step, forks=forks, error=error, turns=1 + (number == 0))
                arrived.append(record)
                if error is None and number != 2:  # the last group is filtered: one errored member, no signal
                    shipped.append(agent_record(tokenizer, index, step, group, seed=step, forks=forks, turns=1 + (number == 0),
                                                advantage=0.5 - member, reference=reference))
        arrived.append(agent_record(tokenizer, 99, step, f"group-{step}-x", seed=step, no_traces=True))
        log_episodes(run_dir, arrived, step, "train", "all")
        log_episodes(run_dir, shipped, step, "train", "effective")
        if step in eval_steps:
            evals = [agent_record(tokenizer, index, step, f"eval-{step}-{index}", kind="eval", seed=50 + step) for index in range(2)]
            evals.append(agent_record(tokenizer, 2, step, f"eval-{step}-2", kind="eval", seed=50 + step, error="timeout"))
            log_episodes(run_dir, evals, step, "eval", "all")
            log_episodes(run_dir, evals[:2], step, "eval", "effective")
    with open(run_dir / "metrics.jsonl", "a") as file:  # FileMonitor.log_metrics
        for step in steps:
            file.write(json.dumps({"step": step, "time": 1.7e9 + step, "train/agg/all/reward/mean": 0.5}) + "\n")
    return run_dir


# ====================================================================================================== rLLM
# rllm/types.py, rllm/workflows/workflow.py (TerminationReason) and rllm/utils/episode_logger.py at rllm-org/rllm
# commit 9beb6e0f676a46d38858991fd79ac5f8e0b16d4c: the fields EpisodeLogger reads, as dataclasses (pydantic's models
# there), and EpisodeLogger as it is.


class TerminationReason(Enum):
    MAX_PROMPT_LENGTH_EXCEEDED = "max_prompt_length_exceeded"
    MAX_RESPONSE_LENGTH_EXCEEDED = "max_response_length_exceeded"
    ENV_DONE = "env_done"
    MAX_TURNS_EXCEEDED = "max_turns_exceeded"
    TIMEOUT = "timeout"
    UNKNOWN = "unknown"
    ERROR = "error"


@dataclass
class Step:
    chat_completions: list = field(default_factory=list)
    observation: Any = None
    thought: str = ""
    action: Any = None
    model_response: str = ""
    reward: float = 0.0
    done: bool = False
    metadata: dict | None = None

    @property
    def info(self) -> dict:
        if self.metadata is None:
            self.metadata = {}
        return self.metadata


@dataclass
class Trajectory:
    uid: str
    name: str = "default_traj_name"
    steps: list = field(default_factory=list)
    reward: float | None = None
    metadata: dict | None = None

    @property
    def info(self) -> dict:
        if self.metadata is None:
            self.metadata = {}
        return self.metadata


@dataclass
class Episode:
    id: str
    task: Any = None
    termination_reason: Any | None = None
    is_correct: bool = False
    session_id: str | None = None
    trajectories: list = field(default_factory=list)
    metrics: dict = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)

    @property
    def info(self) -> dict:
        return self.metadata


# ---- rllm/utils/episode_logger.py, as it is but for its prints and docstrings.
class EpisodeLogger:
    def __init__(self, base_dir: str, subdirectory: str = "episodes"):
        self.log_dir = Path(base_dir) / subdirectory
        self.log_dir.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def compute_task_hash(task: Any, length: int = 8) -> str:
        task_str = json.dumps(task, sort_keys=True, default=str)
        hash_obj = hashlib.sha256(task_str.encode("utf-8"))
        return hash_obj.hexdigest()[:length]

    def get_step_dir(self, step: int, mode: str = "train", epoch: int = 0) -> Path:
        step_dir = self.log_dir / f"{mode}_step_{step}_epoch_{epoch}"
        step_dir.mkdir(parents=True, exist_ok=True)
        return step_dir

    def get_episode_filename(self, episode: Episode, step: int) -> str:
        task_hash = self.compute_task_hash(episode.task)
        episode_id_safe = str(episode.id).replace(":", "_").replace("/", "_")
        filename = f"episode_hash{task_hash}_id{episode_id_safe}.json"
        return filename

    def log_episode(self, episode: Episode, step: int, mode: str = "train", epoch: int = 0):
        episode_data = {
            "training_step": step,
            "epoch": epoch,
            "episode_id": episode.id,
            "session_id": episode.session_id,
            "task": episode.task,
            "task_hash": self.compute_task_hash(episode.task),
            "is_correct": episode.is_correct,
            "termination_reason": (episode.termination_reason.value if episode.termination_reason else None),
            "metrics": episode.metrics,
            "metadata": episode.metadata,
            "timing": episode.info.get("timing", {}),
            "trajectories": [],
        }

        for traj in episode.trajectories:
            traj_data = {
                "name": traj.name,
                "uid": traj.uid,
                "reward": traj.reward,
                "num_steps": len(traj.steps),
                "timing": traj.info.get("timing", {}),
                "steps": [
                    {
                        "observation": step.observation,
                        "thought": step.thought,
                        "action": step.action,
                        "reward": step.reward,
                        "done": step.done,
                        "model_response": step.model_response,
                        "chat_completions": step.chat_completions,
                        "timing": step.info.get("timing", {}),  # Add step-level timing
                    }
                    for step in traj.steps
                ],
            }
            episode_data["trajectories"].append(traj_data)

        step_dir = self.get_step_dir(step, mode, epoch)
        filename = self.get_episode_filename(episode, step)
        filepath = step_dir / filename

        with open(filepath, "w") as f:
            json_str = json.dumps(episode_data, indent=2, default=str)
            f.write(json_str + "\n")
            f.flush()

    def log_episodes(self, episodes: list[Episode], step: int, mode: str = "train", epoch: int = 0):
        for i, episode in enumerate(episodes):
            self.log_episode(episode, step, mode, epoch)

    def log_episodes_batch(self, episodes: list[Episode], step: int, mode: str = "train", epoch: int = 0, batch_summary: bool = True):
        self.log_episodes(episodes, step, mode, epoch)
        if batch_summary and episodes:
            summary_data = {
                "training_step": step,
                "epoch": epoch,
                "mode": mode,
                "num_episodes": len(episodes),
                "episode_files": [self.get_episode_filename(ep, step) for ep in episodes],
                "summary_stats": {
                    "total_correct": sum(1 for ep in episodes if ep.is_correct),
                    "total_incorrect": sum(1 for ep in episodes if not ep.is_correct),
                    "accuracy": sum(1 for ep in episodes if ep.is_correct) / len(episodes) if episodes else 0,
                    "avg_trajectories_per_episode": sum(len(ep.trajectories) for ep in episodes) / len(episodes) if episodes else 0,
                },
            }
            step_dir = self.get_step_dir(step, mode, epoch)
            summary_file = step_dir / "batch_summary.json"
            with open(summary_file, "w") as f:
                json.dump(summary_data, f, indent=2)


# ---- end of the copy of episode_logger.py


# A tool agent's trajectory as the agent-flow engine records it (cookbooks/math_tool_agent/math_tool_agent.py at rLLM
# 9beb6e0: a Step per model call whose chat_completions are the conversation so far, its response last, OpenAI's
# format; the calculator's results appended as tool messages), or (legacy) a workflow's steps with an observation and
# an action each and no messages. Per-step rewards on the steps.
def rllm_trajectory(index: int, rng: random.Random, legacy: bool = False, name: str = "solver", arguments: str | None = None) -> Trajectory:
    question, expression, answer = QUESTIONS[index % len(QUESTIONS)]
    steps = []
    if legacy:
        observation = question
        for turn in range(2):
            action = [{"name": "calculator", "arguments": {"expression": expression}}] if turn == 0 else f"<answer>{answer}</answer>"
            steps.append(Step(observation=observation, action=action, model_response=json.dumps(action) if turn == 0 else action,
                              reward=0.0 if turn == 0 else 1.0, done=turn == 1))
            observation = {"tool_outputs": {"calculator": answer}}
        return Trajectory(uid=f"traj-{index}", name=name, steps=steps, reward=None)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    call_id = f"call_{index}"
    args = arguments if arguments is not None else json.dumps({"expression": expression})
    assistant = {"role": "assistant", "content": "Computing.", "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "calculator", "arguments": args}}]}
    messages.append(assistant)
    steps.append(Step(chat_completions=copy.deepcopy(messages), model_response="Computing.", action="Computing.", reward=0.1))
    messages.append({"role": "tool", "tool_call_id": call_id, "content": answer})
    final = f"The answer is \\boxed{{{answer if rng.random() < 0.6 else 0}}}."
    messages.append({"role": "assistant", "content": final})
    steps.append(Step(chat_completions=copy.deepcopy(messages), model_response=final, action=final, reward=1.0 if answer in final else 0.0, done=True))
    return Trajectory(uid=f"traj-{index}", name=name, steps=steps, reward=steps[-1].reward)


# An rLLM episode log folder (trainer.episode_log_dir): per step, a training batch (groups of a task's rollouts; the
# last task's episodes legacy steps, one with a judge trajectory beside the solver's), and validation episodes at
# `val_steps`. `unfinished` steps get their episodes but no batch summary (the logger stopped in them).
def rllm_run(folder, steps=(1, 2), group_size=2, val_steps=(2,), unfinished=()) -> Path:
    base = Path(folder)
    logger = EpisodeLogger(str(base), "episodes")
    rng = random.Random(0)
    for step in steps:
        episodes = []
        for number, (question, _, _) in enumerate(QUESTIONS):
            for member in range(group_size):
                trajectories = [rllm_trajectory(number, rng, legacy=number == 2)]
                if number == 1 and member == 0:
                    trajectories.append(Trajectory(uid="judge", name="judge", steps=[Step(
                        chat_completions=[{"role": "user", "content": "Is it right?"}, {"role": "assistant", "content": "yes"}], model_response="yes", reward=0.5)], reward=0.5))
                reason = TerminationReason.ENV_DONE if member == 0 else TerminationReason.MAX_RESPONSE_LENGTH_EXCEEDED
                episodes.append(Episode(id=f"task{number}:{member}", task={"question": question, "idx": number}, termination_reason=reason,
                                        is_correct=trajectories[0].reward == 1.0, trajectories=trajectories, metrics={"solver_acc": trajectories[0].reward or 0.0}))
        if step in unfinished:
            logger.log_episodes(episodes, step, "train", 0)
        else:
            logger.log_episodes_batch(episodes, step, "train", 0)
        if step in val_steps:
            val = [Episode(id=f"val{n}:0", task={"question": QUESTIONS[n][0]}, termination_reason=TerminationReason.ENV_DONE,
                           trajectories=[rllm_trajectory(n, rng)]) for n in range(2)]
            logger.log_episodes_batch(val, step, "val", 0)
    return base


# ====================================================================================================== ROLL
# roll/pipeline/agentic/utils.py (dump_rollout_trajectories, remove_nan_items) and roll/pipeline/rlvr/utils.py
# (write_to_json_process, DUMPING_FUNC) at alibaba/ROLL commit 8eb27cc2dc34c4d1310b169d9b86d339004d811a, as they are
# but for the Timer and the logger; DUMPING_FUNC's process is run here in this process (ROLL starts a
# multiprocessing.Process for it).


def write_to_json_process(path, data, columns_configs):
    os.makedirs(path, exist_ok=True)
    column_names = {item[0] for item in columns_configs}
    data = {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in data.items() if k in column_names}
    global_step = data.get('global_step', [0])[0]
    with open(os.path.join(path, f"rollout_dump_data.step_{global_step}.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps(data, ensure_ascii=False) + "\n")


def json_checker(path: str):
    return path.startswith("/")


DUMPING_FUNC = [
    [json_checker, write_to_json_process],
]


def remove_nan_items(data):
    if not data:
        return {}
    arr = np.vstack([np.asarray(v, dtype=object) for v in data.values()])  # (num_keys, N)
    mask = arr != None  # noqa: E711
    valid_row_mask = mask.all(axis=0)
    return {
        k: np.asarray(v, dtype=object)[valid_row_mask]
        for k, v in data.items()
    }


# DataProto as dump_rollout_trajectories uses it: non_tensor_batch (numpy object arrays) and meta_info.
@dataclass
class DataProto:
    non_tensor_batch: dict
    meta_info: dict


def dump_rollout_trajectories(path, global_step, data: DataProto):
    if not path:
        return

    columns_config = data.meta_info.get("COLUMMNS_CONFIG", None)
    if columns_config is None:
        return

    write_data = {item[0]: data.non_tensor_batch.pop(item[0]) for item in columns_config if item[0] in data.non_tensor_batch}

    write_data = remove_nan_items(copy.deepcopy(write_data))
    data_cnt = len(write_data[columns_config[0][0]])

    write_data["global_step"] = [global_step] * data_cnt
    columns_config.append(["global_step", "bigint"])

    for checker, func in DUMPING_FUNC:
        if checker(path):
            func(path, write_data, columns_config)


# ---- end of the copy


COLUMNS = [["trajectory_data", "string"], ["messages", "string"], ["tools", "string"], ["exp_name", "string"]]


TOOLS = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}}]


# AgentNativeStepEnvManager.formulate_rollouts' non-tensor columns for one trajectory of `steps` steps (a sample per
# step; only the last holds trajectory_data, messages and tools: the others None), with trajectory_data as it builds it
# (roll/pipeline/agentic/env_manager/agent_native_env_manager.py at ROLL 8eb27cc).
def roll_native_trajectory(index: int, step: int, rng: random.Random, mode: str = "train", arguments: str | None = None, stop_reason: str = "FINISH"):
    question, expression, answer = QUESTIONS[index % len(QUESTIONS)]
    args = arguments if arguments is not None else json.dumps({"expression": expression})
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": [{"type": "text", "text": question}]},
                {"role": "assistant", "content": "", "tool_calls": [{"id": f"c{index}", "type": "function", "function": {"name": "calculator", "arguments": args}}]},
                {"role": "tool", "tool_call_id": f"c{index}", "content": answer},
                {"role": "assistant", "content": f"<answer>{answer}</answer>"}]
    step_rewards = [0.0, 1.0 if rng.random() < 0.7 else 0.0]
    timestamp = datetime(2026, 1, 1, 0, 0, index).strftime("%Y%m%d_%H%M%S_%f")
    group_id, episode_id, seed, tag = index // 2, index % 2, 1000 + step, "CalcNative"
    trajectory_data = {
        "trajectory_id": f"{tag}_0_1_{group_id}_{index}_{episode_id}_{seed}_{timestamp}",
        "timestamp": timestamp,
        "current_step": step,
        "env_info": {"env_id": index, "group_id": group_id, "tag": tag, "seed": seed, "episode_id": episode_id, "max_steps": 5, "mode": mode, "sequence_length": 4096},
        "timing_info": {"traj_save_time": "2026-01-01T00:00:00", "traj_time_env_total": 1.5},
        "length_info": {"trajectory_length": 2, "num_actions": 2, "terminated": True, "truncated": stop_reason == "MAX_LENGTH", "response_length": 40.0},
        "reward_info": {"episode_reward": sum(step_rewards), "step_rewards": step_rewards, "first_round_reward": step_rewards[0], "final_reward": step_rewards[-1]},
        "failure_info": {"failure_mode": "", "stop_reason": stop_reason, "error_messages": [], "test_output": "", "has_failure": False, "failure_step": 2},
        "metrics": {f"env/{tag}/num_actions": 2, f"env/{tag}/response_length": 40.0},
        "last_observation": [],
    }
    samples = 2  # a sample per step; stepwise samples keep one copy of the trajectory data, on the last
    return {
        "trajectory_data": [None] * (samples - 1) + [json.dumps(trajectory_data)],
        "messages": [None] * (samples - 1) + [json.dumps([messages])],
        "tools": [None] * (samples - 1) + [json.dumps(TOOLS)],
        "exp_name": ["calc-exp"] * samples,
        "step_scores": step_rewards,  # a column the dump does not name
    }


# ProxyEnvManager.formulate_rollouts' columns for one trajectory in trajectory_mode "step": a sample per step, each
# with its own messages and trajectory_data (proxy_env_manager.py at ROLL 8eb27cc).
def roll_proxy_trajectory(index: int, episode_score: float):
    question, expression, answer = QUESTIONS[index % len(QUESTIONS)]
    first = [{"role": "user", "content": question}, {"role": "assistant", "content": "Let me use the tool.",
                                                     "tool_calls": [{"id": "p1", "type": "function", "function": {"name": "calculator", "arguments": json.dumps({"expression": expression})}}]}]
    second = first + [{"role": "tool", "tool_call_id": "p1", "content": answer}, {"role": "assistant", "content": answer}]
    columns = {key: [] for key in ("trajectory_data", "messages", "tools", "exp_name")}
    step_rewards = [0.0, episode_score]
    for idx, messages in enumerate((first, second)):
        data = {"trajectory_id": f"proxy_{index}_b{idx}", "timestamp": "20260101_000000_000000", "num_actions": 2, "branch_or_step_idx": idx,
                "num_branches_or_steps": 2, "reward_info": {"episode_reward": episode_score, "step_reward": step_rewards[idx]}, "messages": messages,
                "finish_reason": "stop"}
        columns["trajectory_data"].append(json.dumps(data))
        columns["messages"].append(json.dumps(messages))
        columns["tools"].append(json.dumps(TOOLS))
        columns["exp_name"].append("calc-exp")
    return columns


# A ROLL rollout_dump_dir: per step, a batch of agent-native trajectories dumped by dump_rollout_trajectories (the
# last step's batch from the proxy env manager when `proxy`).
def roll_run(folder, steps=(1, 2), trajectories=4, proxy_steps=()) -> Path:
    path = str(Path(folder).resolve())
    rng = random.Random(0)
    for step in steps:
        columns: dict[str, list] = {}
        for index in range(trajectories):
            made = roll_proxy_trajectory(index, 1.0 if index % 2 else 0.0) if step in proxy_steps else roll_native_trajectory(index, step, rng)
            for key, values in made.items():
                columns.setdefault(key, []).extend(values)
        batch = DataProto({key: np.array(values, dtype=object) for key, values in columns.items()}, {"COLUMMNS_CONFIG": [list(c) for c in COLUMNS]})
        dump_rollout_trajectories(path, step, batch)
    return Path(path)
