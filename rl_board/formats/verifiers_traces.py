"""verifiers' episode records as the board's lines and turns. prime-rl's file monitor writes one Episode.to_record() a
line to rollouts/step_<n>/<kind>/<subset>/traces.jsonl (FileMonitor.log_episodes, src/prime_rl/monitors/file.py of
PrimeIntellect-ai/prime-rl @ 559b44772e471d1538537b8805cc77f3824a5e64, with orjson). The record
(verifiers/v1/episode.py, trace.py, graph.py and types.py of PrimeIntellect-ai/verifiers @
a60a606ecc4d309247edf9ff92c3eabca362781f; model_dump(mode="json", exclude_none=True), the nodes' tensor fields left
out) holds the episode's id, env {id, name}, task, group {id}, run {type, id, work {type, step, policy}}, ok, errors
and traces; each trace its id, agent {name, trainable}, tools, nodes, calls (model calls: node, finish_reason, error),
rewards {name: {score, weight} | null}, metrics, is_completed, ok, stop_condition and errors. A node is one message of
the trace's graph: parent (a node's index), message (role, content; an assistant's tool_calls [{id, name, arguments}]
and reasoning_content; a tool's tool_call_id and name), sampled, token_ids (the tokens it adds to the sequence: its
template scaffold and its own; an assistant's generation prompt then its completion), mask (per token: sampled),
logprobs (the sampler's, per sampled token), advantages and reference_logprobs (per sampled token, once the trainer's
algorithm stamped them: the effective records), loss_weights. A branch (Trace.branches) is a path from a root to a
leaf, a node no node names as parent: one training sample, its tokens the nodes' token_ids concatenated.

A branch becomes one board line (trace_line): the response is its tokens from the first sampled one (the generation
prompt before it is the prompt's), logprobs the sampler's on the sampled tokens (null on the others, tool_mask 0),
ref_logprobs and token_advantages likewise, advantage the mean over the sampled tokens, reward Σ score × weight
(Trace.reward; null when nothing was scored), rewards_per_func each score, group_id the episode's group, and turns:
every message of the branch, those holding response tokens with their span. stop_reason from the trace's
stop_condition (error, context_length and max_*_tokens: length; Trace.is_truncated gives truncated). An exported
sequence (prime-rl's token exports) takes its fields from its branch by Branch.board_fields."""
import bisect
import functools
import hashlib
import json
import math
from dataclasses import dataclass

import numpy as np

from rl_board.formats.agent_turns import LineNotes, finite, kept_turns, message_turn, messages_value
from rl_board.formats.base import group_of_prompt, summed
from rl_board.reading.storage import read_file
from rl_board.tokenizer import tokens_of
from rollout_logger.metadata import FORMAT_KEYS

# Trace.is_truncated's stop conditions; "error" is Trace.record_error's.
LENGTH_STOPS = {"max_input_tokens", "max_output_tokens", "max_total_tokens", "context_length"}


# The per-node values a line is made from (a node's token_ids are in the branch's tokens).
NODE_KEYS = ("message", "sampled", "mask", "logprobs", "advantages", "reference_logprobs")


# One root-to-leaf branch of a trace's message graph (verifiers' Trace.branches): its nodes (without their token ids),
# where each node's tokens end, its tokens (None: the nodes' token_ids are not all token ids), its trace and episode.
@dataclass
class Branch:
    nodes: list
    ends: np.ndarray
    tokens: np.ndarray | None
    rewards: dict
    shown: dict  # group_id, episode_id, trace_id, stop_condition (None: absent)
    metrics: dict
    trace: dict  # the trace's own fields the line shows: stop_reason, truncated, errored, error, env_name, agent, branch
    notes: tuple = ()  # what the branch's nodes held that could not be taken as it was
    task: object = None  # the task's data, the prompt of a trace without messages (it failed before any)

    @property
    def messages(self) -> list:
        return [node.get("message") for node in self.nodes]

    # The board's fields from the branch, for an exported sequence of `length` tokens whose response starts at
    # `first`: the messages before the one holding that token are the prompt, the others the response; the turns
    # with their spans in the response, and the reference model's log-probs over it when the trainer's algorithm
    # stamped them.
    def board_fields(self, first: int, length: int, notes: LineNotes) -> dict:
        split = int(np.searchsorted(self.ends, first, side="right"))
        fields = {"prompt": messages_value(self.messages[:split]), "response": messages_value(self.messages[split:]),
                  "reward": trace_reward(self.rewards), "rewards_per_func": reward_scores(self.rewards), **self.shown}
        if fields["group_id"] is None:
            fields["group_id"] = group_of_prompt(" ".join(str(i) for i in self.tokens[:first].tolist()))
        if length < len(self.tokens):
            fields["cut_tokens"] = len(self.tokens) - length  # the trainer's seq_len cut them (or trailing context)
        reference = self.spread("reference_logprobs", notes)
        if reference is not None:
            fields["ref_logprobs"] = reference[first:length]
        fields["turns"] = self.turns(first, length, notes)
        fields |= self.trace
        for note in self.notes:
            notes.add(note)
        taken = FORMAT_KEYS | set(fields) | {"prompt_tokens", "masked_tokens", "masked_high_tokens", "masked_low_tokens", "token_advantages",
                                             "rank", "micro_step", "micro_sequence_idx", "export_sequence_idx", "env_name", "schema_version"}
        fields |= {(f"{name} (metric)" if name in taken else name): value for name, value in self.metrics.items()}
        return fields

    # Every message of the branch as a turn; those with tokens in [first, length) have their span there (relative to
    # first, end exclusive), an assistant's its mean advantage over its sampled tokens.
    def turns(self, first: int | None, length: int, notes: LineNotes) -> list:
        turns, start = [], 0
        for node, end in zip(self.nodes, self.ends.tolist()):
            turn = message_turn(node.get("message"), notes)
            if first is not None and end > first and start < length and end > start:
                turn["token_start"], turn["token_end"] = max(start, first) - first, min(end, length) - first
            advantages = [value for value in (finite(a) for a in node.get("advantages") or []) if value is not None]
            if advantages:
                turn["advantage"] = math.fsum(advantages) / len(advantages)
            turns.append(turn)
            start = end
        return kept_turns(turns, notes)

    # A per-sampled-token node field (logprobs, advantages, reference_logprobs) spread over the branch's tokens: the
    # node's values at its sampled positions, None elsewhere; None when no node has it (Branch.spread's layout).
    def spread(self, key: str, notes: LineNotes) -> list | None:
        if all(node.get(key) is None for node in self.nodes):
            return None
        values = []
        for node in self.nodes:
            mask, given = node["mask"], node.get(key) or []
            sampled = int(sum(mask))
            if given and len(given) != sampled:
                notes.add(f"a node's {key} has {len(given)} values for its {sampled} sampled tokens: the missing ones are null")
            given = iter(given)
            values += [finite(next(given, None)) if flag else None for flag in mask]
        return values

    @property
    def mask(self) -> list[bool]:
        return [flag for node in self.nodes for flag in node["mask"]]


# Trace.reward: the rewards' score times weight, summed (None ones skipped); None when none was scored.
def trace_reward(rewards: dict) -> float | None:
    scored = [(reward["score"], reward.get("weight", 1.0)) for reward in rewards.values() if isinstance(reward, dict) and finite(reward.get("score")) is not None]
    return summed(score * (weight if finite(weight) is not None else 1.0) for score, weight in scored) if scored else None


def reward_scores(rewards: dict) -> dict | None:
    return {name: reward.get("score") for name, reward in rewards.items() if isinstance(reward, dict)} or None


# Why the trace ended, as the board says it (rollout_logger's STOP_REASONS), from its stop_condition, its errors and
# its last model call's finish_reason (Trace.is_truncated).
def stop_reason(trace: dict) -> tuple[str | None, bool]:
    condition = trace.get("stop_condition")
    calls = [call for call in trace.get("calls") or [] if isinstance(call, dict) and call.get("error") is None]
    length_finish = bool(calls) and calls[-1].get("finish_reason") == "length"
    truncated = condition in LENGTH_STOPS or condition == "max_turns" or length_finish
    if condition == "error" or (trace.get("errors") and condition is None):
        return "error", truncated
    if condition in LENGTH_STOPS or (length_finish and condition in (None, "agent_completed")):
        return "length", truncated
    if condition in (None, "agent_completed"):
        return ("stop" if trace.get("is_completed") else None), truncated
    return str(condition), truncated


# A record's traces as branches, walked as verifiers walks them (graph.leaves, Trace.branches).
def episode_branches(episode: dict) -> list[Branch]:
    branches = []
    group = episode.get("group")
    env = episode.get("env") if isinstance(episode.get("env"), dict) else {}
    for trace in episode.get("traces") or []:
        nodes = trace.get("nodes") if isinstance(trace, dict) else None
        if not isinstance(nodes, list) or not all(isinstance(node, dict) for node in nodes):
            continue
        rewards, metrics = trace.get("rewards"), trace.get("metrics")
        shown = {
            "group_id": group.get("id") if isinstance(group, dict) else None,
            "episode_id": episode.get("id"),
            "trace_id": trace.get("id"),
            "stop_condition": trace.get("stop_condition"),
        }
        reason, truncated = stop_reason(trace)
        errors = [error for error in (trace.get("errors") or []) + (episode.get("errors") or []) if isinstance(error, dict)]
        agent = trace.get("agent") if isinstance(trace.get("agent"), dict) else {}
        own = {"stop_reason": reason, "truncated": truncated, "env_name": env.get("name") or env.get("id"),
               "errored": int(not trace.get("ok", True) or bool(errors))}
        if errors:
            own["error"] = f"{errors[-1].get('type', 'Error')}: {errors[-1].get('message', '')}"
        if agent.get("name") not in (None, "agent"):
            own["agent"] = agent["name"]
        parents = {node.get("parent") for node in nodes}
        leaves = [leaf for leaf in range(len(nodes)) if leaf not in parents] or [None]  # no nodes: one empty branch
        for number, leaf in enumerate(leaves):
            route, on_route, node_id = [], set(), leaf  # the set: a list's `in` made a branch of N nodes N² steps
            while node_id is not None and isinstance(node_id, int) and 0 <= node_id < len(nodes) and node_id not in on_route:
                route.append(node_id)
                on_route.add(node_id)
                node_id = nodes[node_id].get("parent")
            path = [nodes[i] for i in reversed(route)]
            branch_notes = []
            ids = [node.get("token_ids") if node.get("token_ids") is not None else [] for node in path]
            try:
                tokens = np.asarray([t for part in ids for t in part], dtype=np.int64)
                if tokens.ndim != 1:
                    raise ValueError
            except (ValueError, TypeError, OverflowError):  # not token ids: a branch of texts only
                tokens, ids = None, [[]] * len(path)
                branch_notes.append("token_ids that are not token ids: the trace's texts shown without tokens")
            kept = []
            for node, node_ids in zip(path, ids):
                mask = node.get("mask") if isinstance(node.get("mask"), list) else []
                if len(mask) != len(node_ids):
                    if mask or any(node.get(key) for key in ("logprobs", "advantages")):
                        branch_notes.append(f"a node's mask has {len(mask)} entries for its {len(node_ids)} tokens: cut or taken as not sampled")
                    mask = (mask + [False] * len(node_ids))[: len(node_ids)]
                kept.append({key: node.get(key) for key in NODE_KEYS} | {"mask": [bool(flag) for flag in mask]})
            extra = own | ({"branch": number} if len(leaves) > 1 else {})
            branches.append(Branch(
                nodes=kept,
                ends=np.cumsum([len(part) for part in ids], dtype=np.int64),
                tokens=tokens,
                rewards=rewards if isinstance(rewards, dict) else {},
                shown=shown,
                metrics=metrics if isinstance(metrics, dict) else {},
                trace=extra,
                notes=tuple(branch_notes),
                task=(trace.get("task") or episode.get("task") or {}).get("data") if isinstance(trace.get("task") or episode.get("task"), dict) else None,
            ))
    return branches


# A traces file's records, each (line number, record or None when the line is not a JSON object, the line's bytes).
def records(data: bytes):
    lines = data.split(b"\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            record = None
        yield number, (record if isinstance(record, dict) else None), number == len(lines)


# The branches of a step's traces, found by their tokens.
class Branches:
    def __init__(self, branches: list[Branch]):
        self.branches = [branch for branch in branches if branch.tokens is not None]
        self.by_tokens = {}
        for index, branch in enumerate(self.branches):
            self.by_tokens.setdefault(tokens_key(branch.tokens), index)
        self.keys = {(branch.shown["episode_id"], branch.shown["trace_id"]) for branch in branches}
        # Their tokens as bytes in sorted order, so that those a sequence starts lie together (looked at one by one, a
        # step of 4,000 sequences cut at seq_len took 14 s), with each one's place in the list.
        spelled = [sortable(branch.tokens) for branch in self.branches]
        order = sorted(range(len(spelled)), key=spelled.__getitem__)
        self.sorted_tokens, self.sorted_places = [spelled[index] for index in order], np.array(order, dtype=np.int64)
        self.longest = max(map(len, spelled), default=0)

    # The branch whose tokens the sequence is, else the first whose tokens it starts (cut at seq_len), else None.
    def find(self, ids: list[int]) -> Branch | None:
        tokens = np.asarray(ids, dtype=np.int64)
        index = self.by_tokens.get(tokens_key(tokens))
        if index is not None:
            return self.branches[index]
        start = sortable(tokens)  # none is it (else found above): those it starts are longer
        low = bisect.bisect_left(self.sorted_tokens, start)
        high = bisect.bisect_left(self.sorted_tokens, start + b"\xff" * (self.longest + 1), low)
        return self.branches[int(self.sorted_places[low:high].min())] if high > low else None


# Tokens as bytes whose order keeps those starting with the same tokens together.
def sortable(tokens: np.ndarray) -> bytes:
    return tokens.astype(">i8").tobytes()


def tokens_key(tokens: np.ndarray) -> bytes:
    return hashlib.blake2b(tokens.astype(np.int64).tobytes(), digest_size=16).digest()


# A traces.jsonl as branches, read once per version of the file (the ranks of a step share it).
@functools.lru_cache(maxsize=4)
def traces_index(path: str, status: tuple) -> Branches:
    return Branches([branch for _, record, _ in records(read_file(path)) if record is not None for branch in episode_branches(record)])


# A branch as a board line of its own (a trace no token export holds): the response from its first sampled token, the
# sampler's log-probs, the reference model's and the advantages where the record has them; a branch without a sampled
# token (an errored trace, an eval relay's turns without token ids) has its texts and turns only.
def trace_line(branch: Branch, step: int, tokenizer, notes: LineNotes) -> dict:
    line = {"step": step, "prompt": None, "response": None, "reward": trace_reward(branch.rewards)}
    mask = branch.mask if branch.tokens is not None else []
    first = next((i for i, flag in enumerate(mask) if flag), None)
    messages = branch.messages
    if first is not None:
        split = int(np.searchsorted(branch.ends, first, side="right"))
        ids = branch.tokens.tolist()
        sampled = mask[first:]
        line["response_tokens"] = tokens_of(tokenizer, ids[first:])
        for key, name in (("logprobs", "logprobs"), ("reference_logprobs", "ref_logprobs")):
            values = branch.spread(key, notes)
            if values is not None and any(value is not None for value in values[first:]):
                line[name] = values[first:]
        advantages = branch.spread("advantages", notes)
        if advantages is not None:
            trained = [value for value, flag in zip(advantages[first:], sampled) if flag and value is not None]
            line["advantage"] = math.fsum(trained) / len(trained) if trained else None
            if len(set(trained)) > 1:  # a per-token credit (a turn-level one): kept per response token
                line["token_advantages"] = advantages[first:]
        if not all(sampled):
            line["tool_mask"] = [int(flag) for flag in sampled]
        group = " ".join(str(i) for i in ids[:first])
    else:
        split = next((i for i, node in enumerate(branch.nodes) if node.get("sampled") or (isinstance(node.get("message"), dict) and node["message"].get("role") == "assistant")), len(messages))
        group = json.dumps(messages[:split] if messages else branch.task, sort_keys=True, default=str)
    line["prompt"], line["response"] = messages_value(messages[:split]), messages_value(messages[split:])
    if not messages:  # the trace failed before any message: its task is what it was given
        line["prompt"], line["response"] = branch.task, ""
    line["rewards_per_func"] = reward_scores(branch.rewards)
    line |= branch.shown
    if line["group_id"] is None:
        line["group_id"] = group_of_prompt(group)
    line["turns"] = branch.turns(first, len(mask), notes)
    line |= branch.trace
    for note in branch.notes:
        notes.add(note)
    taken = FORMAT_KEYS | set(line) | {"token_advantages", "kind", "subset"}
    line |= {(f"{name} (metric)" if name in taken else name): value for name, value in branch.metrics.items()}
    return {key: value for key, value in line.items() if value is not None or key in ("reward", "prompt", "response")}
