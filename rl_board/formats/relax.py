"""Relax's rollout results: with --rollout-result-dir, the rollout manager (relax/distributed/ray/rollout.py) calls
save_rollout_result_jsonl for each training rollout and save_eval_summary_jsonl for each evaluation
(relax/utils/training/train_dump_utils.py of redai-infra/Relax @ 2765d18a5fa57b0c3b7b5f6d310d60ee6c1dfcec), which write
<rollout_result_dir>/train/<rollout_id>.jsonl and <rollout_result_dir>/eval/<rollout_id>.jsonl (opened with "w",
json.dumps(ensure_ascii=False)), a line per sample (_sample_to_summary_record): rollout_id, sample_index (an
evaluation's counts per dataset), prompt (a text or chat messages), response, reward (a number, or a dict of them:
Sample.reward; the trainer takes --reward-key of it), prompt_length, response_length, total_length,
prompt_token_count, response_token_count, response_token_ids, total_token_count, image_count, image_token_count,
multimodal_token_count, agent_turns, status (Sample.Status: pending, completed, truncated, aborted, failed),
group_index, and where they apply response_rollout_log_probs (the rollout engine's, SGLang's),
response_rollout_log_probs_mask (true where a token and its log-prob still correspond), label, multimodal_inputs and
multimodal_train_inputs (summaries), dataset (an evaluation's). Its debug dumps (--save-debug-rollout-data,
--save-debug-train-data: torch.save) are pickles, as slime's: never opened.

A line becomes a board line, line for line: step the file name's rollout id; prompt, response as they are; reward the
number (a dict reward: its numbers as rewards_per_func, reward missing: which one was trained on is the trainer's
--reward-key); group_id the group_index (an evaluation's within its dataset); response_tokens the response's token
ids (as text); logprobs response_rollout_log_probs, missing where the mask is false (the only log-probs Relax keeps,
as slime; a list of another length than the tokens is left out, a mask of another length ignored, each with a
note); ground_truth the label; stop_reason and truncated from status (completed: stop, truncated: length,
aborted and failed: error); text/split train or eval, text/dataset the evaluation's dataset; the other keys kept as
fields. A folder of <rollout_id>.jsonl files (train/ or eval/) is a run; so is rollout_result_dir, both its folders."""
import re

from rl_board.formats.agent_turns import LineNotes, Notes, encoded, finite
from rl_board.formats.base import UTF8_BOM, Folder, RunFormat, RunLayout, first_line_keys, json_object, parent_and_name
from rl_board.reading.storage import FileStatus, joined, list_folder
from rl_board.text import json_kind
from rollout_logger.metadata import FORMAT_KEYS

DUMP_FILE = re.compile(r"(\d+)\.jsonl")


SPLITS = ("train", "eval")


NAME = "Relax rollout results (rollout_result/{train,eval}/<rollout_id>.jsonl)"


LAYOUT = RunLayout(files=DUMP_FILE)  # train/ and eval/ hold the results and nothing else (verl's layout too)


RELAX_KEYS = {"rollout_id", "sample_index", "prompt", "response", "reward", "response_token_ids", "status"}  # every record has them


STOP_REASONS = {"completed": "stop", "truncated": "length", "aborted": "error", "failed": "error"}


# Relax's keys the board's line is made from (the others are kept as fields).
MAPPED = {"rollout_id", "prompt", "response", "reward", "group_index", "response_token_ids", "response_rollout_log_probs",
          "response_rollout_log_probs_mask", "label", "status", "dataset"}


# A folder of <rollout_id>.jsonl with Relax's keys (train/ or eval/), or one holding train/ and eval/ folders of them.
def recognise(folder: Folder) -> tuple[dict[str, FileStatus], RunFormat] | None:
    run_dir = folder.run_dir.rstrip("/")
    if results(folder.jsonl):
        name = parent_and_name(run_dir)[1]
        split = name if name in SPLITS else ("eval" if "dataset" in first_keys(folder.jsonl) else "train")
        found = {split: folder.jsonl}
    elif folder.folders & set(SPLITS) and not folder.jsonl:
        listed = {split: tuple(entry for entry in list_folder(joined(run_dir, split)) if not entry.is_dir) for split in SPLITS if split in folder.folders}
        found = {split: files for split, files in listed.items() if results(files)}
        if not found:
            return None
    else:
        return None
    sources, contexts = {}, {}
    for split, files in found.items():
        for entry in files:
            sources[entry.path] = entry.status
            contexts[entry.path] = (f"{split}_{entry.name}", [int(DUMP_FILE.fullmatch(entry.name).group(1)), split])
    return sources, RunFormat(NAME, result_lines, (), file_contexts=contexts)


# Files that are all <rollout_id>.jsonl, the first of them (with a line yet) with Relax's keys.
def results(files) -> bool:
    jsonl = [entry for entry in files if entry.name.endswith(".jsonl")]
    if not jsonl or len(jsonl) != len(files) or not all(DUMP_FILE.fullmatch(entry.name) for entry in jsonl):
        return False
    return RELAX_KEYS <= first_keys(jsonl)


# The keys of the first line of the first of a folder's first files that has one to read (an empty file, or one this
# process may not read, has none).
def first_keys(files) -> set:
    return next(filter(None, (first_line_keys(entry.path, entry.status) for entry in files[:3])), set())


# A <rollout_id>.jsonl as the board's lines, line for line (a line that is not a JSON object stays as it is: a bad line
# at its number, or the incomplete last line of a file being written).
def result_lines(data: bytes, context: tuple) -> tuple[bytes, list]:
    ((step, split),) = context
    notes, lines = Notes(), []
    for number, line in enumerate(data.removeprefix(UTF8_BOM).split(b"\n"), 1):
        line_notes = LineNotes()
        lines.append(result_line(line, step, split, line_notes))
        notes.add(number, line_notes)
    return b"\n".join(lines), notes.rows


def result_line(line: bytes, step: int, split: str, notes: LineNotes) -> bytes:
    record = json_object(line)
    if record is None:
        return line
    board = {"step": step, "prompt": record.get("prompt"), "response": record.get("response"), "split": split}
    reward = record.get("reward")
    if isinstance(reward, dict):
        board["rewards_per_func"] = {str(name): finite(value) for name, value in reward.items() if finite(value) is not None}
        board["reward"] = None
    else:
        board["reward"] = finite(reward)
    dataset = record.get("dataset")
    if dataset is not None:
        board["dataset"] = dataset
    if record.get("group_index") is not None:
        board["group_id"] = f"{dataset}:{record['group_index']}" if dataset is not None else record["group_index"]
    ids = record.get("response_token_ids")
    if ids is not None and not isinstance(ids, list):
        notes.add(f"response_token_ids is a JSON {json_kind(ids)}, not a list: left out, with its log-probs")
    if isinstance(ids, list) and ids:
        board["response_tokens"] = [str(token) for token in ids]
        logprobs, mask = record.get("response_rollout_log_probs"), record.get("response_rollout_log_probs_mask")
        if isinstance(logprobs, list) and len(logprobs) == len(ids):
            if mask is not None and not (isinstance(mask, list) and len(mask) == len(ids)):
                notes.add(f"response_rollout_log_probs_mask {size_for(mask, ids)}: ignored, every log-prob kept")
            kept = mask if isinstance(mask, list) and len(mask) == len(ids) else [True] * len(ids)
            board["logprobs"] = [finite(value) if keep else None for value, keep in zip(logprobs, kept)]
        elif logprobs is not None:
            notes.add(f"response_rollout_log_probs {size_for(logprobs, ids)}: left out")
    if record.get("label") is not None:
        board["ground_truth"] = record["label"]
    status = record.get("status")
    if isinstance(status, str):
        board["stop_reason"] = STOP_REASONS.get(status, status)
        board["truncated"] = status == "truncated"
    others = {key: value for key, value in record.items() if key not in MAPPED}
    board |= {(f"{key} (Relax)" if key in board or key in FORMAT_KEYS else key): value for key, value in others.items()}
    board["relax_status"] = status
    return encoded(board)  # a lone surrogate (half an emoji) escaped, not a whole file lost


# What a per-token list is against the response's tokens, for a note: "of 2 values for 3 tokens", "a JSON string".
def size_for(values, ids: list) -> str:
    return f"of {len(values)} values for {len(ids)} tokens" if isinstance(values, list) else f"is a JSON {json_kind(values)}, not a list"
