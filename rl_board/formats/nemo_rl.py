"""NeMo-RL's training samples: the GRPO loop writes every step's batch to <logger.log_dir>/train_data_step<N>.jsonl,
N the step from 1 (grpo_train and async_grpo_train in nemo_rl/algorithms/grpo.py build log_data; Logger.
log_batched_dict_as_jsonl in nemo_rl/utils/logger.py writes it; NVIDIA-NeMo/RL @
7ea279abfbeb698b092856d0dab61e7cf39bc909). The file is opened with "w" and written a sample a line, each line the
batch sliced to one sample, so every value is a list of one: content (the sample's message contents, in order, without
their roles), rewards, input_lengths (the sequence's length before padding), token_ids, token_loss_mask (1 on the
tokens of assistant messages the policy generated), sample_loss_mask (0: the sample is left out of the loss),
advantages (per token), generation_logprobs (the generation engine's, 0 off the generated tokens), prev_logprobs (the
trainer's forward pass before the update; zeros when force_on_policy_ratio skipped it), with filtered_rewards under
dynamic sampling (then rewards is total_reward), agent_ref with NeMo-Gym, and idx (the sample's index). Token lists
are padded to the batch's longest sequence (token_ids with the pad token, the others with 0). json.dumps writes NaN
as NaN. grpo_sync.py writes the same keys (token_ids and content only when it kept them); ppo.py the same without
filtered_rewards; distillation.py only content and input_lengths.

A line becomes a board line, line for line (the load report's line numbers are the file's): the response is the
sequence from its first generated token (token_loss_mask 1) to input_lengths; the tokens after it that the policy did
not generate (tool and environment messages of a multi-turn sample) have tool_mask 0. logprobs are prev_logprobs and
sampler_logprobs generation_logprobs, on those tokens (when prev_logprobs are zeros on every generated token, the
trainer's were not computed: logprobs are then generation_logprobs and there is no sampler_logprobs, and the field
trainer_logprobs_skipped says so). There is no is_ratio: the file holds no importance weight. advantage is the mean
of the per-token advantages over the generated tokens (token_advantages keeps them per response token when they
differ). The text: a sample with one generated message at its end (single-turn) has the last content as its response
and the ones before as its prompt; a multi-turn sample's prompt and response are its tokens decoded with a tokenizer
(rl_board.tokenizer), else its prompt is its contents and its response the token ids. reward is rewards; the step
comes from the file name; the samples of one prompt (the same prompt tokens) are a group.

Validation: validate() (grpo.py, grpo_sync.py, ppo.py, distillation.py) writes val_data_step<N>.jsonl beside them with
the same Logger call, N the training step it ran after (0: val_at_start), each line {"content": [the sample's
messages, {role, content} each (get_keys_from_message_log)], "rewards": [its total reward], "idx"}, the prompts
repeated val_num_generations_per_prompt times in a row. Its samples are in the same run at step N with the facet
text/mode = val (the training samples have mode = train): the prompt is the messages before the first assistant one,
the response the assistant's message (several messages after the prompt: them, and the turns), reward rewards, a
prompt's samples a group (apart from training groups of the same step)."""
import json
import math
import re

from rl_board.formats.base import EVERY_FOLDER, UTF8_BOM, Folder, RunFormat, RunLayout, group_of_prompt
from rl_board.reading.lines import as_text
from rl_board.reading.storage import FileStatus
from rl_board.tokenizer import decoded, tokenizer_identity, tokenizer_of, tokens_of, undecoded
from rollout_logger.metadata import FORMAT_KEYS, TURN_ROLES

STEP_FILE = re.compile(r"(train|val)_data_step(\d+)\.jsonl")  # the mode (train, val) and the step


NAME = "NeMo-RL training samples (train_data_step<N>.jsonl, val_data_step<N>.jsonl)"


# The logger's log_dir (logs/exp_<NNN>, get_next_experiment_dir) is one run: train_data_step<N>.jsonl and
# val_data_step<N>.jsonl (validation at step 0 comes before any training step), and its loggers' folders (tensorboard/,
# wandb/, swanlab/, mlflow/), all of them the run's.
LAYOUT = RunLayout(files=re.compile(r"(train|val)_data_step\d+\.jsonl"), parts=EVERY_FOLDER)


# NeMo-RL's keys that become the board's, or that the board's line is made from.
MAPPED = {"content", "rewards", "input_lengths", "token_ids", "token_loss_mask", "advantages", "generation_logprobs", "prev_logprobs"}


NEMO_SUFFIX = " (NeMo-RL)"  # after a kept key named like one of the board's


# A folder with train_data_step<N>.jsonl or val_data_step<N>.jsonl files: those are read; other JSONL beside them is
# named in a note.
def recognise(folder: Folder) -> tuple[dict[str, FileStatus], RunFormat] | None:
    steps = [entry for entry in folder.jsonl if STEP_FILE.fullmatch(entry.name)]
    if not steps:
        return None
    problems = []
    others = [entry.name for entry in folder.jsonl if not STEP_FILE.fullmatch(entry.name)]
    if others:
        problems.append(("", 0, "note", f"{len(others)} other .jsonl file(s) beside NeMo-RL's train_data_step<N>.jsonl and val_data_step<N>.jsonl are not read"))
    identity, note = tokenizer_identity()
    if note:
        problems.append(("", 0, "note", note))
    contexts = {entry.path: (entry.name, [STEP_FILE.fullmatch(entry.name)[1], int(STEP_FILE.fullmatch(entry.name)[2])]) for entry in steps}
    return folder.sources(steps), RunFormat(NAME, step_lines, (identity,), tuple(problems), file_contexts=contexts)


# A train_data_step<N>.jsonl or val_data_step<N>.jsonl as the board's lines, line for line (a line that is not one of
# NeMo-RL's stays as it is: a bad line at its number, or the incomplete last line of a file being written).
def step_lines(data: bytes, context: tuple) -> bytes:
    identity, (mode, step) = context
    tokenizer = tokenizer_of(None if identity is None else tuple(identity))
    return b"\n".join(step_line(line, mode, step, tokenizer) for line in data.removeprefix(UTF8_BOM).split(b"\n"))


def step_line(line: bytes, mode: str, step: int, tokenizer) -> bytes:
    if not line.strip():
        return line
    try:
        fields = json.loads(line)  # NaN as Python's json writes it
        if not isinstance(fields, dict):
            return line
        fields = {key: one(value) for key, value in fields.items()}
        board = board_line(fields, step, tokenizer) if mode == "train" else val_line(fields, step)
    except (ValueError, TypeError, KeyError, OverflowError, RecursionError):  # not one of NeMo-RL's lines (ids < 0...)
        return line
    try:
        return json.dumps(board, ensure_ascii=False).encode()
    except UnicodeEncodeError:  # half a surrogate pair in a text: escaped (the board shows it as �)
        return json.dumps(board).encode()


# A value of the batch of one: its one element.
def one(value):
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def board_line(fields: dict, step: int, tokenizer) -> dict:
    content, ids = fields.get("content"), fields.get("token_ids")
    line = {"step": step, "prompt": None, "response": None, "reward": number(fields.get("rewards"))}
    if isinstance(ids, list):
        line |= token_fields(fields, ids, tokenizer)
    elif isinstance(content, list) and len(content) > 1:  # distillation: contents only, the last the generated one
        line["prompt"], line["response"] = messages_value(content[:-1]), content[-1]
        line["group_id"] = group_of_prompt(line["prompt"])
    else:
        line["prompt"] = content
    kept = {key: value for key, value in fields.items() if key not in MAPPED}
    line |= {(key + NEMO_SUFFIX if key in FORMAT_KEYS or key in line else key): value for key, value in kept.items()}
    if "input_lengths" in fields:
        line["input_length"] = fields["input_lengths"]
    return line | {"mode": "train"}


# A validation sample: its messages split at the first assistant message into prompt and response.
def val_line(fields: dict, step: int) -> dict:
    messages = fields["content"]
    if not isinstance(messages, list) or not all(isinstance(message, dict) for message in messages):
        raise TypeError("not a message log")
    split = next((i for i, message in enumerate(messages) if message.get("role") == "assistant"), len(messages))
    prompt, response = [message.get("content") for message in messages[:split]], messages[split:]
    line = {"step": step, "prompt": messages_value(prompt) if prompt else "", "reward": number(fields.get("rewards"))}
    line["response"] = response[0].get("content") if len(response) == 1 else [message.get("content") for message in response]
    if len(response) > 1:
        line["turns"] = [{"role": turn_role(message.get("role")), "text": as_text(message.get("content"))} for message in messages]
    line["group_id"] = group_of_prompt("val\n" + json.dumps(prompt, ensure_ascii=False))
    kept = {key: value for key, value in fields.items() if key not in ("content", "rewards")}
    line |= {(key + NEMO_SUFFIX if key in FORMAT_KEYS or key in line else key): value for key, value in kept.items()}
    return line | {"mode": "val"}


# A message's role as a turn's (a role the board does not know is the environment's).
def turn_role(role) -> str:
    return role if role in TURN_ROLES else "environment"


# The per-token fields and texts of a line with token ids.
def token_fields(fields: dict, ids: list, tokenizer) -> dict:
    length = fields.get("input_lengths")
    length = int(length) if isinstance(length, (int, float)) and not isinstance(length, bool) and 0 <= length <= len(ids) else len(ids)
    mask = [bool(flag) for flag in (fields.get("token_loss_mask") or [])[:length]]
    first = next((i for i, flag in enumerate(mask) if flag), None)
    content = fields.get("content")
    if first is None:  # nothing generated: the whole sequence is the prompt
        prompt = content if content is not None else (decoded(tokenizer, ids[:length]) if tokenizer else undecoded(ids[:length]))
        return {"prompt": messages_value(prompt) if isinstance(prompt, list) else prompt, "response": "", "group_id": ids_group(ids[:length])}
    generated = mask[first:]
    response_ids = ids[first:length]
    line = {}
    if all(generated) and isinstance(content, list) and len(content) > 1:  # single-turn: the last message generated
        line["prompt"], line["response"] = messages_value(content[:-1]), content[-1]
    elif tokenizer is not None:
        line["prompt"], line["response"] = decoded(tokenizer, ids[:first]), decoded(tokenizer, response_ids)
    else:
        line["prompt"] = messages_value(content) if isinstance(content, list) else undecoded(ids[:first])
        line["response"] = undecoded(response_ids)
    line["response_tokens"] = tokens_of(tokenizer, response_ids)
    trainer, sampler = token_values(fields.get("prev_logprobs"), first, length), token_values(fields.get("generation_logprobs"), first, length)
    if trainer is not None and sampler is not None and not any(value != 0 for value, flag in zip(trainer, generated) if flag) and any(value != 0 for value in sampler):
        line["logprobs"], line["trainer_logprobs_skipped"] = sampler, True  # force_on_policy_ratio: prev_logprobs are zeros
    else:
        line["logprobs"], line["sampler_logprobs"] = trainer, sampler
    if not all(generated):
        line["tool_mask"] = [int(flag) for flag in generated]
    advantages = token_values(fields.get("advantages"), first, length)
    if advantages is not None:
        trained = [value for value, flag in zip(advantages, generated) if flag and value is not None and not math.isnan(value)]
        line["advantage"] = math.fsum(trained) / len(trained) if trained else None
        if len(set(trained)) > 1:
            line["token_advantages"] = advantages
    line["group_id"] = ids_group(ids[:first])
    return {key: value for key, value in line.items() if value is not None}


# A per-token list over the response tokens, or None when absent.
def token_values(values, first: int, length: int) -> list | None:
    return [number(value) for value in values[first:length]] if isinstance(values, list) else None


def number(value):
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# Contents as a prompt: one is its text, several the list (shown as JSON).
def messages_value(contents: list):
    return contents[0] if len(contents) == 1 else contents


# The group of the samples of one prompt: its token ids (GRPO repeats each prompt num_generations_per_prompt times).
def ids_group(ids: list) -> str:
    return group_of_prompt(" ".join(str(i) for i in ids))
