"""prime-rl's per-token exports (trainer.enable_token_export = true): the trainer writes a JSONL line per trained
sequence to <output_dir>/token_exports/step_<step>/rank_<rank>.jsonl, and touches step_<step>/STABLE once every rank
has flushed that step (TokenExporter in src/prime_rl/trainer/rl/token_export.py, called from train.py; the loss it
describes is src/prime_rl/trainer/rl/loss.py; PrimeIntellect-ai/prime-rl @ 559b44772e471d1538537b8805cc77f3824a5e64).
A line holds schema_version, step, rank, micro_step, micro_sequence_idx, export_sequence_idx, env_name, and lists of
one entry per token of the whole sequence, prompt and completion: token_ids (ids only, no text), position_ids,
loss_mask (bool: the tokens the policy sampled), advantages, inference_logprobs (the inference engine's), trainer_logprobs
(the trainer's forward pass), entropy, mismatch_kl, log_importance_ratio, importance_ratio (exp(trainer - inference),
raw), prob_delta, is_masked, is_masked_high, is_masked_low (the default loss's DPPO trust-region mask; null for
another loss), rl_weights, ce_weights, ref_kl_weights (null: the defaults). Non-finite floats are written as null.

With the orchestrator's file monitor ([monitors.file]), rollouts/step_<step>/train/effective/traces.jsonl holds the
episodes trained on at that step, one verifiers Episode.to_record() a line (src/prime_rl/monitors/file.py;
verifiers/v1/episode.py, trace.py and graph.py of PrimeIntellect-ai/verifiers @
a60a606ecc4d309247edf9ff92c3eabca362781f): each trace's message graph (nodes with their message, token_ids, mask and
parent), its rewards and its group. An exported sequence is matched to the root-to-leaf branch of a trace whose tokens
it is, or starts (the trainer cuts a sequence at seq_len), which gives it its messages, reward and group.

A line becomes a board line, line for line (the load report's line numbers are the file's): the response is the
sequence from its first loss_mask token on; logprobs the trainer's, sampler_logprobs the inference engine's; is_ratio
the weight the default loss gave each token (importance_ratio, 0 where is_masked dropped it; absent for another
loss); tool_mask 0 on response tokens the policy did not sample (loss_mask false: tool and user turns; with weight
streams, tokens of neither the rl nor the ref_kl component, as prime-rl leaves them out of its mismatch KL);
advantage the mean of the per-token advantages over the loss tokens (token_advantages keeps them per response token when
they differ); prompt and response the matched trace's
messages, else the tokens decoded with a tokenizer (rl_board.tokenizer), else the ids; step the folder's. A step
folder without STABLE, or with a rank file newer than it (a resumed trainer rewrites a step it had marked: its files
are opened with "w" again), is being written: left out, and named in the load report."""
import functools
import hashlib
import json
import math
import re
from dataclasses import dataclass

import numpy as np

from rl_board.formats.base import EVERY_FOLDER, UTF8_BOM, Folder, RunFormat, RunLayout, group_of_prompt, parent_and_name
from rl_board.reading.storage import FileStatus, file_status, is_remote, joined, list_folder, read_file
from rl_board.tokenizer import text_of, tokenizer_identity, tokenizer_of, tokens_of
from rollout_logger.metadata import FORMAT_KEYS

EXPORTS_FOLDER = "token_exports"


STEP_FOLDER = re.compile(r"step_(\d+)")


RANK_FILE = re.compile(r"rank_(\d+)\.jsonl")


STABLE = "STABLE"  # touched in a step's folder once every rank has flushed it


TRACES = ("rollouts", "step_{step}", "train", "effective", "traces.jsonl")  # under the run folder


NAME = "prime-rl token exports (token_exports/step_<n>/rank_<r>.jsonl)"


# A run folder (<output_dir>/<run.name>) holds token_exports/ beside the trainer's and orchestrator's other folders
# (rollouts/, logs/, configs/, checkpoints/, weights/, broadcasts/, evals/, ...), all of them the run's; its
# token_exports/ opened alone is the run too (its step_<n>/ folders the run's).
LAYOUT = RunLayout(folders=frozenset({EXPORTS_FOLDER}), named=frozenset({EXPORTS_FOLDER}), parts=EVERY_FOLDER)


# The steps of a run on object storage found complete, by folder: not listed again (a request each).
complete_steps: dict[str, tuple] = {}


# The run folder (its token_exports/ holds step folders) or its token_exports/ folder itself.
def recognise(folder: Folder) -> tuple[dict[str, FileStatus], RunFormat] | None:
    run_dir = folder.run_dir.rstrip("/")
    if EXPORTS_FOLDER in folder.folders:
        exports, root = joined(run_dir, EXPORTS_FOLDER), run_dir
        steps = [entry.name for entry in list_folder(exports) if entry.is_dir]
    else:
        parent, name = parent_and_name(run_dir)
        if name != EXPORTS_FOLDER or not parent:
            return None
        exports, root, steps = run_dir, parent, list(folder.folders)
    steps = sorted((int(match.group(1)), name) for name in steps if (match := STEP_FOLDER.fullmatch(name)))
    sources, contexts, problems = {}, {}, []
    for step, name in steps:
        ranks, traces, problem = step_files(joined(exports, name), root, step)
        if problem:
            problems.append((f"{name}/", 0, "skipped", problem))
            continue
        for entry in ranks:
            sources[entry.path] = entry.status
            contexts[entry.path] = (f"{name}.{entry.name}", {"step": step, "traces": traces})
    if folder.jsonl:
        problems.append(("", 0, "note", f"{len(folder.jsonl)} .jsonl file(s) beside {EXPORTS_FOLDER}/ are not read (prime-rl's metrics.jsonl holds its logged metrics, not samples)"))
    identity, note = tokenizer_identity()
    if note:
        problems.append(("", 0, "note", note))
    return sources, RunFormat(NAME, export_lines, (identity,), tuple(problems), file_contexts=contexts)


# A step folder's rank files and its traces file ([path, status], or None), or why the step is left out.
def step_files(step_dir: str, root: str, step: int) -> tuple[list, list | None, str]:
    if step_dir in complete_steps:
        return complete_steps[step_dir]
    entries = list_folder(step_dir)
    ranks = [entry for entry in entries if not entry.is_dir and RANK_FILE.fullmatch(entry.name)]
    stable = next((entry for entry in entries if entry.name == STABLE and not entry.is_dir), None)
    if stable is None:
        return [], None, f"no {STABLE} marker yet: the trainer is still writing this step (or stopped in it); it is shown once every rank has flushed it"
    newer = [entry.name for entry in ranks if entry.status.mtime_ns > stable.status.mtime_ns > 0]
    if newer:
        return [], None, f"{', '.join(newer)} changed after the {STABLE} marker: a resumed trainer is writing this step again; it is shown once marked {STABLE} again"
    traces_path = joined(root, "/".join(TRACES).format(step=step))
    try:
        traces = [traces_path, list(file_status(traces_path))]
    except OSError:  # no file monitor: no texts nor rewards but a tokenizer's
        traces = None
    found = (sorted(ranks, key=lambda entry: int(RANK_FILE.fullmatch(entry.name).group(1))), traces, "")
    if is_remote(step_dir):
        complete_steps[step_dir] = found
    return found


# A rank file of token exports as the board's lines, line for line (a line that is not an export stays as it is: a
# bad line at its number).
def export_lines(data: bytes, context: tuple) -> bytes:
    identity, extra = context
    tokenizer = tokenizer_of(None if identity is None else tuple(identity))
    branches = traces_index(extra["traces"][0], tuple(extra["traces"][1])) if extra.get("traces") else None
    return b"\n".join(export_line(line, extra["step"], tokenizer, branches) for line in data.removeprefix(UTF8_BOM).split(b"\n"))


def export_line(line: bytes, step: int, tokenizer, branches) -> bytes:
    if not line.strip():
        return line
    try:
        return encoded(board_line(json.loads(line), step, tokenizer, branches))
    except (ValueError, TypeError, KeyError, AttributeError, StopIteration, OverflowError, RecursionError):  # not an export line
        return line


# A board line as JSON: UTF-8, or escaped where a text holds half a surrogate pair (the board shows it as �).
def encoded(line: dict) -> bytes:
    try:
        return json.dumps(line, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return json.dumps(line).encode()


# The keys of an export line kept as fields of the board's line (numbers and short texts: columns and facets).
KEPT = ("rank", "micro_step", "micro_sequence_idx", "export_sequence_idx", "env_name", "schema_version")


def board_line(fields: dict, step: int, tokenizer, branches) -> dict:
    ids, loss = fields["token_ids"], fields["loss_mask"]
    first = next(i for i, sampled in enumerate(loss) if sampled)  # the writer skips sequences without one
    response_ids = ids[first:]

    def values(key):  # a per-token list over the response; None when absent or all null (another loss's mask)
        column = fields.get(key)
        return column[first:] if isinstance(column, list) and any(value is not None for value in column) else None

    line = {"step": step, "prompt": None, "response": None, "reward": None}
    line["response_tokens"] = tokens_of(tokenizer, response_ids)
    line["logprobs"] = values("trainer_logprobs")
    line["sampler_logprobs"] = values("inference_logprobs")
    ratio, masked = values("importance_ratio"), values("is_masked")
    if ratio is not None and masked is not None:
        line["is_ratio"] = [None if r is None else (0.0 if dropped else r) for r, dropped in zip(ratio, masked)]
    line["entropies"] = values("entropy")
    policy = policy_tokens(fields)
    sampled = [bool(a) and b for a, b in zip(loss[first:], policy[first:])]
    if not all(sampled):
        line["tool_mask"] = [int(flag) for flag in sampled]
    trained = [a for a, flag in zip(fields.get("advantages") or [], loss) if flag and a is not None]
    line["advantage"] = math.fsum(trained) / len(trained) if trained else None
    if len(set(trained)) > 1:  # a per-token credit (a turn-level one): kept per response token
        line["token_advantages"] = values("advantages")
    match = branches.find(ids) if branches is not None else None
    if match is not None:
        line |= match.board_fields(first, len(ids))
    else:
        line["prompt"], line["response"] = text_of(tokenizer, ids[:first]), text_of(tokenizer, response_ids)
        line["group_id"] = group_of_prompt(" ".join(str(i) for i in ids[:first]))
    line = {key: value for key, value in line.items() if value is not None or key in ("reward", "prompt", "response")}
    line["prompt_tokens"] = first
    if masked is not None:
        for key, name in (("is_masked", "masked_tokens"), ("is_masked_high", "masked_high_tokens"), ("is_masked_low", "masked_low_tokens")):
            flags = values(key)
            if flags is not None:
                line[name] = sum(bool(flag) for flag in flags)
    line |= {key: fields[key] for key in KEPT if key in fields}
    return line


# Per token, whether the policy sampled it as prime-rl counts it for its mismatch KL (train.py): every token without
# weight streams, else the tokens of the rl or the ref_kl component (a weight other than 0).
def policy_tokens(fields: dict) -> list[bool]:
    streams = [fields.get(key) for key in ("rl_weights", "ref_kl_weights")]
    streams = [stream if isinstance(stream, list) and any(value is not None for value in stream) else None for stream in streams]
    if streams == [None, None]:
        return [True] * len(fields["token_ids"])
    rl, ref_kl = streams
    rl_member = [bool(weight) for weight in rl] if rl is not None else [True] * len(fields["token_ids"])
    ref_member = [bool(weight) for weight in ref_kl] if ref_kl is not None else [False] * len(fields["token_ids"])
    return [a or b for a, b in zip(rl_member, ref_member)]


# ------------------------------------------------------------------------------------------------------- traces


# One root-to-leaf branch of a trace's message graph (verifiers' Trace.branches): its messages, where each message's
# tokens end, its tokens, and what the board shows of its trace and episode (kept small: a step's traces can be large).
@dataclass
class Branch:
    messages: list
    ends: np.ndarray
    tokens: np.ndarray
    rewards: dict
    shown: dict  # group_id, episode_id, trace_id, stop_condition (None: absent)
    metrics: dict

    # The board's fields from the branch, for an exported sequence of `length` tokens whose response starts at
    # `first`: the messages before the one holding that token are the prompt, the others the response.
    def board_fields(self, first: int, length: int) -> dict:
        split = int(np.searchsorted(self.ends, first, side="right"))
        scores = {name: reward.get("score") for name, reward in self.rewards.items() if isinstance(reward, dict)}
        fields = {"prompt": messages_value(self.messages[:split]), "response": messages_value(self.messages[split:]),
                  "reward": trace_reward(self.rewards), "rewards_per_func": scores or None, **self.shown}
        if fields["group_id"] is None:
            fields["group_id"] = group_of_prompt(" ".join(str(i) for i in self.tokens[:first].tolist()))
        if length < len(self.tokens):
            fields["cut_tokens"] = len(self.tokens) - length  # the trainer's seq_len cut them (or trailing context)
        taken = FORMAT_KEYS | set(fields) | set(KEPT) | {"prompt_tokens", "masked_tokens", "masked_high_tokens", "masked_low_tokens", "token_advantages"}
        fields |= {(f"{name} (metric)" if name in taken else name): value for name, value in self.metrics.items()}
        return fields


# Trace.reward: the rewards' score times weight, summed (None ones skipped).
def trace_reward(rewards: dict) -> float:
    return math.fsum(reward["score"] * reward.get("weight", 1.0) for reward in rewards.values() if isinstance(reward, dict) and reward.get("score") is not None)


# Messages as a prompt or response: one message of only role and text content is its text; others the list.
def messages_value(messages: list):
    if len(messages) == 1 and isinstance(messages[0], dict) and set(messages[0]) <= {"role", "content"} and isinstance(messages[0].get("content"), str):
        return messages[0]["content"]
    return messages


# The branches of a step's traces, found by their tokens.
class Branches:
    def __init__(self, branches: list[Branch]):
        self.branches = branches
        self.by_tokens = {}
        for index, branch in enumerate(branches):
            self.by_tokens.setdefault(tokens_key(branch.tokens), index)

    # The branch whose tokens the sequence is, else the first whose tokens it starts (cut at seq_len), else None.
    def find(self, ids: list[int]) -> Branch | None:
        tokens = np.asarray(ids, dtype=np.int64)
        index = self.by_tokens.get(tokens_key(tokens))
        if index is not None:
            return self.branches[index]
        return next((branch for branch in self.branches if len(branch.tokens) > len(tokens) and np.array_equal(branch.tokens[: len(tokens)], tokens)), None)


def tokens_key(tokens: np.ndarray) -> bytes:
    return hashlib.blake2b(tokens.astype(np.int64).tobytes(), digest_size=16).digest()


# A traces.jsonl as branches, read once per version of the file (the ranks of a step share it). Each trace's graph is
# walked as verifiers walks it: a leaf is a node no node names as parent, its branch the path from the root to it.
@functools.lru_cache(maxsize=4)
def traces_index(path: str, status: tuple) -> Branches:
    branches = []
    for line in read_file(path).split(b"\n"):
        try:
            episode = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(episode, dict):
            continue
        group = episode.get("group")
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
            parents = {node.get("parent") for node in nodes}
            for leaf in range(len(nodes)):
                if leaf in parents:
                    continue
                route, node_id = [], leaf
                while isinstance(node_id, int) and 0 <= node_id < len(nodes) and node_id not in route:
                    route.append(node_id)
                    node_id = nodes[node_id].get("parent")
                path_nodes = [nodes[i] for i in reversed(route)]
                ids = [node.get("token_ids") or [] for node in path_nodes]
                try:
                    tokens = np.asarray([t for part in ids for t in part], dtype=np.int64)
                except (ValueError, TypeError, OverflowError):  # not token ids: a branch nothing matches
                    continue
                branches.append(Branch(
                    messages=[node.get("message") for node in path_nodes],
                    ends=np.cumsum([len(part) for part in ids]),
                    tokens=tokens,
                    rewards=rewards if isinstance(rewards, dict) else {},
                    shown=shown,
                    metrics=metrics if isinstance(metrics, dict) else {},
                ))
    return Branches(branches)
