"""open-instruct's rollout traces (GRPO with save_traces = true): DataPreparationActor (open_instruct/data_loader.py of
allenai/open-instruct @ e6c3044aa6201c8bfa4573c1b03142af599e730d) calls save_rollout_metadata once, then
save_rollouts_to_disk for each training step's batch (open_instruct/rl_utils.py): _save_rollouts appends, from a
thread, a JSON line per sample (asdict(RolloutRecord)) to <rollouts_save_path>/<run_name>_rollouts_<shard:06d>.jsonl,
the shard total_samples_written // 10,000 (a step's batch goes whole into the shard it starts in, so a shard holds
many steps), and save_rollout_metadata writes <run_name>_metadata.jsonl: {run_name, git_commit, model_name, timestamp}.
A record: step (the training step the batch is prepared for), sample_idx, prompt_idx (sample_idx //
num_samples_per_prompt), prompt_tokens and response_tokens (token ids only, no text), reward (the score), advantage
(the group-normalised one the trainer uses), finish_reason (vLLM's: stop, length), dataset, ground_truth, logprobs
(vLLM's, logprobs_mode processed_logprobs: after temperature, one per response token) and request_info {num_calls,
timeouts, tool_errors, tool_outputs, tool_runtimes, tool_calleds, tool_call_stats [{tool_name, success, runtime}],
rollout_state (RolloutState: rewards, step_count, done, info, ...)}. The traps: a tool's output tokens are in
response_tokens with log-prob 0.0 (process_tool_tokens in open_instruct/vllm_utils.py; the masks that tell them are
not written); an empty response is written as one EOS token with log-prob NaN (json writes NaN); with
mask_truncated_completions the batch loses its samples that did not stop, so prompt_idx no longer names the prompt and
request_info (not filtered) belongs to another sample; rollouts_save_path defaults to a folder shared by runs.

A record becomes a board line, line for line (the load report's line numbers are the file's): step the record's;
prompt and response the ids decoded with a tokenizer (rl_board.tokenizer), else the ids; response_tokens the ids'
tokens; logprobs vLLM's (the policy that sampled them: there is no trainer's beside them, so no sampler-trainer
mismatch; non-finite ones missing); reward, advantage, ground_truth; stop_reason the finish_reason, truncated when it
is length; the samples of one prompt (the same prompt_tokens) in a step a group. Kept as fields: the request_info's
values (tool_call_failures counts its tool_call_stats that failed), prompt_tokens (how many), prompt_idx, sample_idx,
dataset, and run_name, model_name and git_commit from the file name and the metadata file."""
import json
import re

from rl_board.formats.agent_turns import encoded, finite
from rl_board.formats.base import UTF8_BOM, Folder, RunFormat, RunLayout, group_of_prompt
from rl_board.reading.storage import FileStatus, read_file
from rl_board.tokenizer import TOKENIZER_VARIABLE, text_of, tokenizer_identity, tokenizer_of, tokens_of
from rollout_logger.metadata import FORMAT_KEYS

ROLLOUTS_FILE = re.compile(r"(.+)_rollouts_(\d{6,})\.jsonl")


METADATA_FILE = re.compile(r"(.+)_metadata\.jsonl")


NAME = "open-instruct rollout traces (<run>_rollouts_<shard>.jsonl)"


LAYOUT = RunLayout(files=ROLLOUTS_FILE)  # rollouts_save_path holds the shards and the metadata files


# The folder's rollout shards, each with its run's metadata (the metadata file of its run name, when there is one).
def recognise(folder: Folder) -> tuple[dict[str, FileStatus], RunFormat] | None:
    shards = [entry for entry in folder.jsonl if ROLLOUTS_FILE.fullmatch(entry.name)]
    if not shards:
        return None
    metadata = {match.group(1): run_metadata(entry.path) for entry in folder.jsonl if (match := METADATA_FILE.fullmatch(entry.name))}
    runs = sorted({ROLLOUTS_FILE.fullmatch(entry.name).group(1) for entry in shards})
    problems = []
    others = [entry.name for entry in folder.jsonl if not ROLLOUTS_FILE.fullmatch(entry.name) and not METADATA_FILE.fullmatch(entry.name)]
    if others:
        problems.append(("", 0, "note", f"{len(others)} other .jsonl file(s) beside open-instruct's rollout shards are not read"))
    if len(runs) > 1:
        problems.append(("", 0, "note", f"the folder holds the rollouts of {len(runs)} runs ({', '.join(runs)}): their steps are shown together; "
                                        "filter by run_name, or give each run its own rollouts_save_path"))
    identity, note = tokenizer_identity()
    if note:
        problems.append(("", 0, "note", note))
    elif identity is None:
        models = sorted({str(meta["model_name"]) for meta in metadata.values() if meta.get("model_name")})
        named = f" (the metadata names the model: {', '.join(models)})" if models else ""
        problems.append(("", 0, "note", f"token ids only: set {TOKENIZER_VARIABLE} to a tokenizer to see texts and tokens{named}"))
    contexts = {}
    for entry in shards:
        run_name = ROLLOUTS_FILE.fullmatch(entry.name).group(1)
        contexts[entry.path] = (entry.name, {"run_name": run_name} | metadata.get(run_name, {}))
    return folder.sources(shards), RunFormat(NAME, shard_lines, (identity,), tuple(problems), file_contexts=contexts)


# A metadata file's model_name and git_commit ({} when it cannot be read).
def run_metadata(path: str) -> dict:
    try:
        fields = json.loads(read_file(path).removeprefix(UTF8_BOM).split(b"\n", 1)[0])
    except (OSError, ValueError, RecursionError):
        return {}
    return {key: fields[key] for key in ("model_name", "git_commit") if isinstance(fields, dict) and isinstance(fields.get(key), str)}


# A shard as the board's lines, line for line (a line that is not a record stays as it is: a bad line at its number,
# or the incomplete last line of a shard being appended to).
def shard_lines(data: bytes, context: tuple) -> bytes:
    identity, run = context
    tokenizer = tokenizer_of(None if identity is None else tuple(identity))
    return b"\n".join(shard_line(line, tokenizer, run) for line in data.removeprefix(UTF8_BOM).split(b"\n"))


def shard_line(line: bytes, tokenizer, run: dict) -> bytes:
    if not line.strip():
        return line
    try:
        fields = json.loads(line)  # NaN as Python's json writes it
        return encoded(board_line(fields, tokenizer, run))
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError):  # not a record: ids that are not ids...
        return line


# RolloutRecord's keys that become the board's, or that the board's line is made from.
MAPPED = {"step", "prompt_tokens", "response_tokens", "reward", "advantage", "finish_reason", "logprobs", "request_info", "ground_truth"}


def board_line(fields: dict, tokenizer, run: dict) -> dict:
    prompt_ids, response_ids = ids_of(fields["prompt_tokens"]), ids_of(fields["response_tokens"])
    finish = fields.get("finish_reason")
    line = {
        "step": fields.get("step"), "prompt": text_of(tokenizer, prompt_ids), "response": text_of(tokenizer, response_ids),
        "reward": finite(fields.get("reward")), "advantage": finite(fields.get("advantage")), "response_tokens": tokens_of(tokenizer, response_ids),
        "stop_reason": finish, "truncated": finish == "length" if isinstance(finish, str) else None, "group_id": group_of_prompt(" ".join(map(str, prompt_ids))),
        "ground_truth": fields.get("ground_truth"),
    }
    logprobs = fields.get("logprobs")
    if isinstance(logprobs, list) and logprobs:
        line["logprobs"] = [finite(value) for value in logprobs]
    line["prompt_tokens"] = len(prompt_ids)
    info = fields.get("request_info") if isinstance(fields.get("request_info"), dict) else {}
    kept = {key: value for key, value in fields.items() if key not in MAPPED} | info
    stats = info.get("tool_call_stats")
    if isinstance(stats, list):
        kept["tool_call_failures"] = sum(isinstance(call, dict) and call.get("success") is False for call in stats)
    kept |= run
    line |= {(f"{key} (open-instruct)" if key in FORMAT_KEYS or key in line else key): value for key, value in kept.items()}
    return {key: value for key, value in line.items() if value is not None or key in ("reward", "prompt", "response")}


# A list of token ids (anything else raises TypeError: the line is not a record).
def ids_of(values) -> list[int]:
    if not isinstance(values, list) or not all(isinstance(value, int) and not isinstance(value, bool) for value in values):
        raise TypeError("token ids expected")
    return values
