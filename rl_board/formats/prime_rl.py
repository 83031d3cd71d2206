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
are opened with "w" again), is being written: left out, and named in the load report. A matched line also takes its
branch's turns (spans in its response), stop_reason, ref_logprobs and the facets kind (train) and subset (effective).

The file monitor writes more traces than the effective ones (Orchestrator.main_loop and finalize_train_batch,
src/prime_rl/orchestrator/orchestrator.py; eval's in finalize_eval_batch and src/prime_rl/evals/evals.py; the subsets
are TrainEpisodes.effective and EvalEpisodes.effective in src/prime_rl/orchestrator/metrics.py, at the commit above):
rollouts/step_<n>/<kind>/all/traces.jsonl gets every rollout as it arrives (train: at the window it arrived in, errored,
rejected, cancelled or never shipped ones too, before the algorithm stamped advantages; eval: at the eval's step), and
<kind>/effective/traces.jsonl the cohort shipped to the trainer (eval: the non-errored ones). These are read too, a
line per trace branch (verifiers_traces.trace_line), with the facets kind and subset: an all file without the traces
of its step's effective file (each rollout once per step), an effective file of train unless its step has token
exports (their lines are its lines). A run folder with rollouts/ and no token_exports/ is a run of traces alone."""
import json
import math
import re
from dataclasses import dataclass

from rl_board.formats.agent_turns import LineNotes, Notes, encoded
from rl_board.formats.base import EVERY_FOLDER, UTF8_BOM, Folder, RunFormat, RunLayout, group_of_prompt, parent_and_name
from rl_board.formats.verifiers_traces import episode_branches, records, trace_line, traces_index
from rl_board.reading.storage import FileStatus, file_status, is_remote, joined, list_folder
from rl_board.tokenizer import text_of, tokenizer_identity, tokenizer_of, tokens_of

EXPORTS_FOLDER = "token_exports"


STEP_FOLDER = re.compile(r"step_(\d+)")


RANK_FILE = re.compile(r"rank_(\d+)\.jsonl")


STABLE = "STABLE"  # touched in a step's folder once every rank has flushed it


ROLLOUTS_FOLDER = "rollouts"


TRACES = (ROLLOUTS_FOLDER, "step_{step}", "train", "effective", "traces.jsonl")  # under the run folder


KINDS, SUBSETS = ("train", "eval"), ("effective", "all")  # rollouts/step_<n>/<kind>/<subset>/traces.jsonl


NAME = "prime-rl token exports (token_exports/step_<n>/rank_<r>.jsonl)"


TRACES_NAME = "prime-rl traces (rollouts/step_<n>/<train|eval>/<all|effective>/traces.jsonl)"


# The file monitor writes metrics.jsonl (its default path) beside rollouts/ into the run folder: with it, rollouts/ (a
# name too common to make a run alone) is prime-rl's.
METRICS_FILE = "metrics.jsonl"


# A run folder (<output_dir>/<run.name>) holds token_exports/, or rollouts/ (the file monitor's traces) beside
# metrics.jsonl, beside the trainer's and orchestrator's other folders (logs/, configs/, checkpoints/, weights/,
# broadcasts/, evals/, ...), all of them the run's; its token_exports/ opened alone is the run too (its step_<n>/
# folders the run's), and so is its rollouts/ (a folder of that name with step_<n>/ folders).
@dataclass(frozen=True)
class PrimeRunLayout(RunLayout):
    def takes(self, folder: Folder) -> bool:
        if EXPORTS_FOLDER in folder.folders:
            return True
        if ROLLOUTS_FOLDER in folder.folders and any(entry.name == METRICS_FILE for entry in folder.files):
            return True
        name = parent_and_name(folder.run_dir)[1]
        return name == EXPORTS_FOLDER or (name == ROLLOUTS_FOLDER and any(STEP_FOLDER.fullmatch(sub) for sub in folder.folders))


LAYOUT = PrimeRunLayout(parts=EVERY_FOLDER)


# The steps of a run on object storage found complete, by folder: not listed again (a request each).
complete_steps: dict[str, tuple] = {}


# The traces files of a run on object storage's older steps, by step folder: not listed again (a request each).
listed_traces: dict[str, list] = {}


# The run folder (its token_exports/ holds step folders, its rollouts/ the traces), or its token_exports/ or rollouts/
# folder itself.
def recognise(folder: Folder) -> tuple[dict[str, FileStatus], RunFormat] | None:
    run_dir = folder.run_dir.rstrip("/")
    parent, name = parent_and_name(run_dir)
    if EXPORTS_FOLDER in folder.folders or ROLLOUTS_FOLDER in folder.folders:
        root, root_folders = run_dir, folder.folders
    elif name in (EXPORTS_FOLDER, ROLLOUTS_FOLDER) and parent:
        root = parent
        root_folders = {entry.name for entry in list_folder(parent) if entry.is_dir}
    else:
        return None
    steps = []
    if EXPORTS_FOLDER in root_folders:
        exports = joined(root, EXPORTS_FOLDER)
        names = folder.folders if name == EXPORTS_FOLDER else [entry.name for entry in list_folder(exports) if entry.is_dir]
        steps = sorted((int(match.group(1)), step_name) for step_name in names if (match := STEP_FOLDER.fullmatch(step_name)))
    traces = trace_files(joined(root, ROLLOUTS_FOLDER)) if ROLLOUTS_FOLDER in root_folders else {}
    if not steps and not traces:
        return None
    sources, contexts, problems, exported = {}, {}, [], set()
    for step, step_name in steps:
        exported.add(step)  # its effective traces are the exports' (or wait with them)
        ranks, step_traces, problem = step_files(joined(exports, step_name), root, step)
        if problem:
            problems.append((f"{step_name}/", 0, "skipped", problem))
            continue
        for entry in ranks:
            sources[entry.path] = entry.status
            contexts[entry.path] = (f"{step_name}.{entry.name}", {"step": step, "traces": step_traces})
    for (step, kind, subset), (path, status) in sorted(traces.items()):
        if kind == "train" and subset == "effective" and step in exported:
            continue
        effective = traces.get((step, kind, "effective")) if subset == "all" else None
        sources[path] = status
        contexts[path] = (f"step_{step}.{kind}.{subset}.traces.jsonl",
                          {"step": step, "kind": kind, "subset": subset, "effective": [effective[0], list(effective[1])] if effective else None})
    if folder.jsonl:
        beside = EXPORTS_FOLDER if steps else ROLLOUTS_FOLDER
        problems.append(("", 0, "note", f"{len(folder.jsonl)} .jsonl file(s) beside {beside}/ are not read (prime-rl's metrics.jsonl holds its logged metrics, not samples)"))
    identity, note = tokenizer_identity()
    if note:
        problems.append(("", 0, "note", note))
    return sources, RunFormat(NAME if steps else TRACES_NAME, convert, (identity,), tuple(problems), file_contexts=contexts)


# The file monitor's traces files under rollouts/: (step, kind, subset) -> (path, status).
def trace_files(rollouts: str) -> dict[tuple, tuple]:
    steps = sorted((int(match.group(1)), entry.path) for entry in list_folder(rollouts) if entry.is_dir and (match := STEP_FOLDER.fullmatch(entry.name)))
    found = {}
    for position, (step, step_dir) in enumerate(steps):
        if step_dir in listed_traces:
            files = listed_traces[step_dir]
        else:
            files = []
            for kind_entry in list_folder(step_dir):
                if kind_entry.is_dir and kind_entry.name in KINDS:
                    for subset_entry in list_folder(kind_entry.path):
                        if subset_entry.is_dir and subset_entry.name in SUBSETS:
                            try:
                                path = joined(subset_entry.path, "traces.jsonl")
                                files.append(((kind_entry.name, subset_entry.name), (path, file_status(path))))
                            except OSError:
                                pass
            if is_remote(step_dir) and position < len(steps) - 2:  # an older step's files are written (an eval's may lag)
                listed_traces[step_dir] = files
        found |= {(step, *key): value for key, value in files}
    return found


# A source of the run as the board's lines: a rank file of token exports, or a traces file.
def convert(data: bytes, context: tuple) -> tuple[bytes, list]:
    return (trace_lines if "kind" in context[1] else export_lines)(data, context)


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
# bad line at its number), with the notes of what its traces held that could not be taken as it was.
def export_lines(data: bytes, context: tuple) -> tuple[bytes, list]:
    identity, extra = context
    tokenizer = tokenizer_of(None if identity is None else tuple(identity))
    branches = traces_index(extra["traces"][0], tuple(extra["traces"][1])) if extra.get("traces") else None
    notes, lines = Notes(), []
    for number, line in enumerate(data.removeprefix(UTF8_BOM).split(b"\n"), 1):
        line_notes = LineNotes()
        lines.append(export_line(line, extra["step"], tokenizer, branches, line_notes))
        notes.add(number, line_notes)
    return b"\n".join(lines), notes.rows


def export_line(line: bytes, step: int, tokenizer, branches, notes: LineNotes) -> bytes:
    if not line.strip():
        return line
    try:
        return encoded(board_line(json.loads(line), step, tokenizer, branches, notes))
    except (ValueError, TypeError, KeyError, AttributeError, StopIteration, OverflowError, RecursionError):  # not an export line
        return line


# The keys of an export line kept as fields of the board's line (numbers and short texts: columns and facets).
KEPT = ("rank", "micro_step", "micro_sequence_idx", "export_sequence_idx", "env_name", "schema_version")


def board_line(fields: dict, step: int, tokenizer, branches, notes: LineNotes) -> dict:
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
        line |= match.board_fields(first, len(ids), notes)
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
    line |= {"kind": "train", "subset": "effective"}  # what the trainer trained on (the effective traces' episodes)
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


# A traces file of the file monitor as the board's lines, a line per trace branch (verifiers_traces.trace_line), each
# with its kind (train, eval) and subset (effective: shipped to the trainer; all: every completed rollout of the
# window, filtered, errored and cancelled ones too). An all file leaves out the traces its step's effective file holds
# (their lines are the effective ones), so a rollout is one line of its step. An episode without traces (it failed
# before any) is a line of its task and error.
def trace_lines(data: bytes, context: tuple) -> tuple[bytes, list]:
    identity, extra = context
    tokenizer = tokenizer_of(None if identity is None else tuple(identity))
    shipped = traces_index(extra["effective"][0], tuple(extra["effective"][1])).keys if extra.get("effective") else set()
    notes, lines = Notes(), []
    shown = {"kind": extra["kind"], "subset": extra["subset"]}
    for number, record, last in records(data.removeprefix(UTF8_BOM)):
        if record is None:
            reason = "has no end yet: still being written, or cut off" if last else "is not a JSON object"
            notes.add(0, f"traces.jsonl line {number} {reason}: left out")
            continue
        branches = episode_branches(record)
        if not branches and not record.get("traces"):
            lines.append(encoded(failed_episode(record, extra["step"]) | shown))
            continue
        for branch in branches:
            if (branch.shown["episode_id"], branch.shown["trace_id"]) in shipped:
                continue
            line_notes = LineNotes()
            lines.append(encoded(trace_line(branch, extra["step"], tokenizer, line_notes) | shown))
            notes.add(len(lines), line_notes)
    return b"".join(line + b"\n" for line in lines), notes.rows


# An episode that produced no trace: its task as the prompt, its last error.
def failed_episode(record: dict, step: int) -> dict:
    task = record.get("task") if isinstance(record.get("task"), dict) else {}
    errors = [error for error in record.get("errors") or [] if isinstance(error, dict)]
    line = {"step": step, "prompt": task.get("data", task), "response": "", "reward": None, "turns": [], "stop_reason": "error",
            "episode_id": record.get("id"), "errored": 1}
    group = record.get("group")
    line["group_id"] = group.get("id") if isinstance(group, dict) and group.get("id") is not None else group_of_prompt(json.dumps(line["prompt"], sort_keys=True, default=str))
    if errors:
        line["error"] = f"{errors[-1].get('type', 'Error')}: {errors[-1].get('message', '')}"
    return line
