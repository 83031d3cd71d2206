"""verl's generation dumps: RayPPOTrainer._dump_generations writes trainer.rollout_data_dir (and
trainer.validation_data_dir) as one <global_step>.jsonl per step, a line per sample with input, output, gts, score,
step and each reward_extra_info key (verl/trainer/ppo/ray_trainer.py @ b178a3c). Told by those keys, not by the file
names alone. The v1 trainer (verl-project/verl @ 1dda039, verl/trainer/ppo/v1/trainer_base.py: _log_rollout_data,
_validate, _write_generations) adds a uid to every line: its TransferQueue key {uid}_{session_id}_{index}
(verl/trainer/ppo/v1/agent_loop_tq.py), the prompt's uuid4 (the GRPO group _compute_advantage groups by), the rollout
among rollout.n, the output of a multi-output agent loop; the lines sorted by it. Its prompt part is the group: one
prompt drawn twice in a batch is two groups. Without a uid, a step's samples of one prompt text are a group.
RayPPOTrainer at 1dda039 writes the file on a thread of its own (_write_generations: opened with "w", a line at a time,
so a live board sees a step's file grow), json.dumps(default=str): a value JSON cannot hold (a NumPy array as ground
truth) is its str, shown as that text; and its request_id (one per request, not a group) is kept as a field."""
import json
import re

import msgspec

from rl_board.formats.base import UTF8_BOM, Folder, RunFormat, RunLayout, first_line_keys, group_of_prompt
from rl_board.reading.lines import LINE_FIELDS_DECODER, python_json, raw_value
from rl_board.reading.storage import FileStatus, run_label

DUMP_FILE = re.compile(r"\d+\.jsonl")


# rollout_data_dir and validation_data_dir hold nothing but the dumps: a folder of them is a run, with no parts.
LAYOUT = RunLayout(files=DUMP_FILE)


DUMP_KEYS = {"input", "output", "score", "step"}  # every line of RayPPOTrainer._dump_generations has them


# verl's keys as the board's. A reward_extra_info key of the same name as one of these (a validation dump's "reward",
# equal to its "score") is kept as a field, named EXTRA_SUFFIX after it.
KEYS = {"input": "prompt", "output": "response", "gts": "ground_truth", "score": "reward"}


EXTRA_SUFFIX = " (reward_extra_info)"


# Every JSONL file named <step>.jsonl and a first line with verl's keys (the first file may be empty yet). A validation
# dump: its folder's name says val, or it has step 0, or its lines a reward (reward_extra_info's).
def recognise(folder: Folder) -> tuple[dict[str, FileStatus], RunFormat] | None:
    jsonl = folder.jsonl
    if not jsonl or not all(DUMP_FILE.fullmatch(entry.name) for entry in jsonl):
        return None
    keys = next(filter(None, (first_line_keys(entry.path, entry.status) for entry in jsonl[:3])), set())
    if not DUMP_KEYS <= keys:
        return None
    validation = "val" in run_label(folder.run_dir).lower() or "0.jsonl" in {entry.name for entry in jsonl} or "reward" in keys
    kind = "validation" if validation else "training"
    return folder.sources(jsonl), RunFormat(f"verl generations dump ({kind}: rollout_data_dir / validation_data_dir, <step>.jsonl)", dump_lines, (kind,))


# A verl dump (<step>.jsonl) with verl's keys renamed to the board's and each prompt's samples a group (the v1
# trainer's uid's prompt part, else the prompt text); line for line,
# so the load report's line numbers are the file's (a line that is not a JSON object stays as it is, a bad line), and
# the notes of its lines at their numbers.
def dump_lines(data: bytes, context: tuple) -> tuple[bytes, list]:
    converted, notes = [], []
    for number, line in enumerate(data.removeprefix(UTF8_BOM).split(b"\n"), start=1):
        line, note = dump_line(line)
        converted.append(line)
        if note:
            notes.append((number, note))
    return b"\n".join(converted), notes


# A line as the board's, and a note on what it could not keep as it was (None: all of it). A line msgspec refuses (a
# NaN score, bytes that are not UTF-8, a lone surrogate escape such as half an emoji) is read by Python's json as the
# board reads its own lines: bad bytes and lone surrogates are shown as �, the bad bytes with the board's note.
def dump_line(line: bytes) -> tuple[bytes, str | None]:
    note = None
    if not line.strip():
        return line, note
    try:
        fields = LINE_FIELDS_DECODER.decode(line)
        encode = msgspec.json.encode
    except (msgspec.DecodeError, ValueError):
        try:
            fields, note = python_json(line)
        except (ValueError, RecursionError):
            return line, None
        if not isinstance(fields, dict):
            return line, None
        encode = lambda value: json.dumps(value, ensure_ascii=False).encode()  # noqa: E731
    taken = {KEYS[key] for key in fields if key in KEYS}
    renamed = {KEYS.get(key) or (key + EXTRA_SUFFIX if key in taken else key): value for key, value in fields.items()}
    uid = renamed.get("uid")
    uid = raw_value(uid) if isinstance(uid, msgspec.Raw) else uid
    if "group_id" not in renamed and isinstance(uid, str):
        renamed["group_id"] = prompt_uid(uid)
    elif "group_id" not in renamed and "prompt" in renamed:
        prompt = renamed["prompt"]
        renamed["group_id"] = group_of_prompt(raw_value(prompt) if isinstance(prompt, msgspec.Raw) else prompt)
    return encode(renamed), note


# The prompt's uid in verl v1's key {uid}_{session_id}_{index} (a key of another shape is its own group).
def prompt_uid(key: str) -> str:
    parts = key.rsplit("_", 2)
    return parts[0] if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit() else key
