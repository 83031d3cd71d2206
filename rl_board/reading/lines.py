"""Decoding lines (runs in the worker processes): the first pass's scan for line ends and step hints, the summary
numbers of a line (rewards, lengths, mean log-prob, entropy, KL per estimator, fields outside the format), the texts
and the per-token lists read back later, and the KL estimators themselves. The line format's keys are the logger's
contract (rollout_logger/metadata.py)."""
import functools
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import msgspec
import msgspec.inspect
import numpy as np
import re2
import simdjson

from rl_board.text import json_kind, valid_text
from rollout_logger.metadata import FORMAT_KEYS, LOSS_PASS_TOKEN_KEYS

# KL estimators over log_ratio r = logp - ref_logp; the first is the original's, k3 the one TRL logs as kl.
KL_ESTIMATORS = {
    "kl": "exp(r) - 1 - r (the original board's kl)",
    "k1": "r (log ratio)",
    "k2": "r^2 / 2",
    "k3": "exp(-r) + r - 1 = exp(ref-logp) - (ref-logp) - 1 (TRL GRPO loss)",
}


# Per-token KL under each estimator, from r = logp - ref_logp (or Δ = logp - sampler_logp: the mismatch KL is "kl").
def kl_per_token(log_ratio: np.ndarray, estimator: str) -> np.ndarray:
    if estimator == "kl":
        return exp_minus_one_minus(log_ratio)
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    if estimator == "k3":
        return exp_minus_one_minus(-log_ratio)
    raise ValueError(f"unknown KL estimator {estimator!r}")


# e^x - 1 - x: +inf at x = ±inf, its limit there (computed term by term, at +inf it is inf - inf: NaN).
def exp_minus_one_minus(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        result = np.expm1(x)
        result -= x
    result[np.isposinf(x)] = np.inf
    return result


# Sums and NaN-aware means over consecutive segments (one per sample) of each row of a 2-D array (NaN where a segment
# holds both +inf and -inf).
def segment_sums_and_means(values: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sums = np.zeros((len(values), len(lengths)))
    counts = np.zeros((len(values), len(lengths)))
    nonempty = lengths > 0
    with np.errstate(invalid="ignore"):
        if nonempty.any():
            starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])[nonempty]
            present = ~np.isnan(values)
            if present.all():
                sums[:, nonempty] = np.add.reduceat(values, starts, axis=1)
                counts[:, nonempty] = lengths[nonempty]
            else:
                sums[:, nonempty] = np.add.reduceat(np.where(present, values, 0.0), starts, axis=1)
                counts[:, nonempty] = np.add.reduceat(present, starts, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / counts
    sums[counts == 0] = np.nan
    return sums, means


# Per sample, of the sampler-trainer mismatch Δ = logp - sampler_logp over the tokens with both (rl_board.mismatch):
# mean |Δ|, max |Δ|, ΣΔ (the log of the sequence's importance ratio), the mean mismatch KL exp(Δ) - 1 - Δ, the
# largest and smallest token ratio exp(Δ), the number of such tokens; and the mean weight the trainer applied.
MISMATCH_NUMBERS = [
    "avg_abs_mismatch", "max_abs_mismatch", "sum_mismatch", "avg_mismatch_kl", "max_is_ratio", "min_is_ratio",
    "mismatch_tokens", "avg_applied_is_ratio",
]


# Per sample, of its loss passes (rollout_logger's loss_passes, rl_board.update): how many, the tokens their PPO clip
# zeroed (summed over the passes), and Σ|update weight| over its tokens and passes.
UPDATE_NUMBERS = ["loss_passes", "clipped_tokens", "abs_update_weight"]


# Per sample with `turns` (an agent's trajectory, rl_board.trajectory): its turns, the tool calls its turns make, and
# its tool turns that are errors. Its `stop_reason` is a text field (text/stop_reason): a facet and a filter.
TURN_NUMBERS = ["turns", "tool_calls", "tool_errors"]


# Per sample with a `policy_version` (an asynchronous trainer's: the step whose policy sampled it; rl_board.staleness):
# the version, and its staleness, step - policy_version: how many steps the policy that trained the sample had moved on
# from the one that sampled it (0: on-policy).
STALENESS_NUMBERS = ["policy_version", "staleness"]


POLICY_VERSIONS = 2**53  # a version is an integer from 0 below this: a float (the index's numbers) holds it exactly


SCALAR_KEYS = ("reward", "ref_reward", "valid_reward", "ref_valid_reward", "advantage", "truncated")


TOKEN_KEYS = ("logprobs", "ref_logprobs", "entropies", "values", "token_rewards", "sampler_logprobs", "is_ratio")
TOKEN_KEYS += ("sampler_kept_logmass",)  # the log of the mass the sampler's truncation (top-k, top-p...) kept


SUMMARY_TOKEN_KEYS = ("logprobs", "ref_logprobs", "entropies", "sampler_logprobs", "is_ratio")  # the per-token lists the first pass reduces


# Per sample, the tokens with a k3 value (avg_kl_k3's denominator: a tool's token, or a null log-prob, has none): TRL's
# kl is a token mean over them (rl_board.metrics.trl_kl_by_step).
KL_TOKENS = "k3_tokens"


SUMMARY_NUMBERS = [
    "reward", "ref_reward", "valid_reward", "ref_valid_reward", "advantage", "truncated", "micro_batch", "prompt_key",
    "response_len", "ref_response_len", "response_tokens_len", "tool_tokens", "avg_logp", "avg_entropy",
    "avg_log_ratio", "sum_log_ratio", KL_TOKENS, *MISMATCH_NUMBERS, *UPDATE_NUMBERS, *TURN_NUMBERS, *STALENESS_NUMBERS, "extra_keys", "prompt_at", "prompt_bytes", "response_at", "response_bytes",
] + [f"{kind}_kl_{name}" for name in KL_ESTIMATORS for kind in ("avg", "sum")]


# The version of what the first pass gives of a line (its numbers, texts and fields, how they are computed): a logger's
# summaries file (rl_board.reading.summaries) of another version is not used. Raise it with any change to them.
SUMMARY_FORMAT = 3  # 3: numbers beyond a float's range read as ±inf with a note (a line with one was skipped)


# Per-line texts of the index besides the numbers: the group id, and the image paths as a JSON list (None: no images).
SUMMARY_TEXTS = ["group_id", "image_paths"]


# The per-token lists of values the policy had when sampling: none for tokens a tool wrote (tool_mask 0).
POLICY_TOKEN_KEYS = ("logprobs", "ref_logprobs", "entropies", "sampler_logprobs", "is_ratio")
POLICY_TOKEN_KEYS += ("sampler_kept_logmass",)


# The per-token lists of the sampler-trainer mismatch: the trainer's log-probs beside the sampler's, the
# importance-sampling weight the trainer applied, and the entropies (where the mismatch lives); and the log of the
# mass the sampler's truncation kept (the part of Δ that is its renormalisation); read by a pass of their own
# (rl_board.mismatch), not the first.
MISMATCH_TOKEN_KEYS = ("logprobs", "sampler_logprobs", "is_ratio", "entropies", "sampler_kept_logmass")


# `"step": <int>` (line_step_hints): a hint for choosing lines before parsing them (parsing has the last word).
STEP_KEY = re.compile(rb'"step"[ \t\r]*:')
LONG_LINE, LONG_LINE_STEP_KEY = 4096, re2.compile(STEP_KEY.pattern)  # RE2 searches twice as fast as re, but each call costs 2 µs
# "step" with a letter written as an escape ("st\u0065p"): no writer does it, but it is the same key once decoded.
ESCAPED_STEP_LETTER = re2.compile(rb"\\u00(?:7[034]|65)")
ESCAPED_STEP_KEY = re.compile(rb'"(?:s|\\u0073)(?:t|\\u0074)(?:e|\\u0065)(?:p|\\u0070)"[ \t\r]*:')
STEP_VALUE = re.compile(rb'[ \t\r]*(-?\d+)[ \t\r]*[,}]')


# The keys the first pass reads from every loaded line (everything the charts need for all steps).
# Tokens stay raw JSON there: counting them costs more than the rest of the line.
class RolloutSummary(msgspec.Struct, gc=False):
    prompt: Any
    response: Any
    reward: float | None
    step: int | float
    response_tokens: msgspec.Raw = msgspec.Raw()
    logprobs: list[float | None] | None = None
    ref_logprobs: list[float | None] | None = None
    entropies: list[float | None] | None = None
    sampler_logprobs: list[float | None] | None = None  # the sampler's (vLLM's, generate's) log-prob of each token
    is_ratio: list[float | None] | None = None  # the importance-sampling weight the trainer applied to each token
    ref_response: Any = None
    ref_reward: float | None = None
    valid_reward: float | None = None
    ref_valid_reward: float | None = None
    rewards_per_func: dict[str, float | None] | None = None
    advantage: float | None = None
    group_id: str | int | None = None
    truncated: bool | None = None
    micro_batch: Any = None  # which of its optimizer step's loss passes trained the line (rollout_logger), for TRL's kl
    tool_mask: msgspec.Raw = msgspec.Raw()  # per completion token, 0 where a tool wrote it (TRL's tools=)
    images: Any = None  # the prompt's images: paths in the run folder, or {"path", "width", "height"}


# The first pass's usual case: per-token lists kept raw, then parsed by simdjson straight into float arrays,
# without a Python float per token.
class RolloutSummaryRawArrays(RolloutSummary, gc=False):
    logprobs: msgspec.Raw = msgspec.Raw()
    ref_logprobs: msgspec.Raw = msgspec.Raw()
    entropies: msgspec.Raw = msgspec.Raw()
    sampler_logprobs: msgspec.Raw = msgspec.Raw()
    is_ratio: msgspec.Raw = msgspec.Raw()


# The texts of a line, for the tables of the step in view (its per-token lists are skipped, not parsed).
class RolloutTexts(msgspec.Struct, gc=False):
    prompt: Any
    response: Any
    step: int | float
    ref_response: Any = None
    ground_truth: Any = None
    images: Any = None


# A whole line, read only for the sample in view. The per-token lists the first pass does not check are taken as
# they are: one of the wrong type is left out with a note (aligned_token_arrays), not the sample's whole token view.
class Rollout(RolloutSummary):
    response_tokens: Any = None
    loss_passes: Any = None  # what each loss pass did with the tokens (rollout_logger; rl_board.update reads it)
    turns: Any = None  # an agent's trajectory, turn by turn (rl_board.trajectory reads it)
    stop_reason: Any = None  # why the trajectory ended (the index keeps it as text/stop_reason)
    policy_version: Any = None  # the step whose policy sampled it (the index keeps it, and its staleness)
    values: Any = None
    token_rewards: Any = None
    sampler_kept_logmass: Any = None  # log of the mass the sampler's top-k/top-p... kept
    ground_truth: Any = None


# The keys of a line the mismatch pass reads (rl_board.mismatch); a tool's tokens have none of these values.
class RolloutMismatch(msgspec.Struct, gc=False):
    step: int | float
    response_tokens: msgspec.Raw = msgspec.Raw()
    logprobs: list[float | None] | None = None
    sampler_logprobs: list[float | None] | None = None
    is_ratio: list[float | None] | None = None
    entropies: list[float | None] | None = None
    tool_mask: msgspec.Raw = msgspec.Raw()
    sampler_kept_logmass: Any = None  # as Rollout's


# One loss pass over a sample, as a line holds it; the per-token lists have a null at the tokens a tool wrote.
class LossPassRecord(msgspec.Struct, gc=False):
    step: int | float | None = None
    micro_batch: int | None = None
    policy_ratio: list[float | None] | None = None
    clipped: list[float | None] | None = None
    entropy_mask: list[float | None] | None = None
    update_weight: list[float | None] | None = None


# The keys of a line the update pass reads (rl_board.update).
class RolloutLossPasses(msgspec.Struct, gc=False):
    step: int | float
    loss_passes: msgspec.Raw = msgspec.Raw()  # loss_pass_records reads it


LOSS_PASSES_DECODER = msgspec.json.Decoder(RolloutLossPasses, strict=False)


# What the first pass reads of a turn (rl_board.trajectory reads it whole); anything else is skimmed.
class TurnCounts(msgspec.Struct, gc=False):
    role: Any = None
    tool_calls: Any = None
    error: Any = None


TURN_COUNTS_DECODER = msgspec.json.Decoder(list[TurnCounts], strict=False)


STOP_REASON_FIELD = "text/stop_reason"


LOSS_PASS_FIELDS_DECODER = msgspec.json.Decoder(list[dict[str, msgspec.Raw]])


# A line's loss_passes (raw JSON, or a Python value where the line needed Python's json), each pass's per-token
# lists as float arrays where simdjson takes them as they are (no Python float per token), else as lists; and how
# many of its elements are not the logger's pass objects (left out, the others kept). Raises ValueError on a value
# that is not a list.
def loss_pass_records(value, parser: simdjson.Parser) -> tuple[list[LossPassRecord], int]:
    if isinstance(value, msgspec.Raw):
        try:
            records = []
            for fields in LOSS_PASS_FIELDS_DECODER.decode(value):
                record = LossPassRecord(**{key: msgspec.json.decode(fields[key], type=int | float | None) for key in ("step", "micro_batch") if key in fields})
                for key in LOSS_PASS_TOKEN_KEYS:
                    setattr(record, key, flat_float_list(fields.get(key, msgspec.Raw()), parser))
                records.append(record)
            return records, 0
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError, RuntimeError, AttributeError, RecursionError):  # nulls, a nested list...
            try:
                value = raw_value(value)
            except (ValueError, RecursionError):
                raise ValueError("loss_passes is not valid JSON") from None
    if value is None:
        return [], 0
    if not isinstance(value, list):
        raise ValueError(f"loss_passes is a JSON {json_kind(value)}, not a list")
    records = []
    for element in value:  # one at a time: a pass of another shape leaves out itself alone
        try:
            records.append(converted(element, LossPassRecord))  # a number beyond a float's range: ±inf
        except (msgspec.ValidationError, ValueError, TypeError, OverflowError, RecursionError):
            pass
    return records, len(value) - len(records)


SUMMARY_DECODER = msgspec.json.Decoder(RolloutSummary, strict=False)


TEXTS_DECODER = msgspec.json.Decoder(RolloutTexts, strict=False)


ROLLOUT_DECODER = msgspec.json.Decoder(Rollout, strict=False)


MISMATCH_DECODER = msgspec.json.Decoder(RolloutMismatch, strict=False)


# A line as its top-level keys with their values still raw JSON: the first pass reads the summary's keys from it and
# keeps the others (EXTRA_PREFIX) at the cost of one skim of the line, as a struct alone would skim it.
LINE_FIELDS_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw])


SUMMARY_FIELDS = {field.encode_name: field.type for field in msgspec.structs.fields(RolloutSummaryRawArrays)}


SUMMARY_FIELD_DECODERS = {name: msgspec.json.Decoder(kind, strict=False) for name, kind in SUMMARY_FIELDS.items() if kind is not msgspec.Raw}


# The keys of the line format (FORMAT_KEYS, the logger's contract with the board, which the decoders above read); any
# other key is a field of the data the board keeps too: numbers (booleans as 0/1) as extra/<key> columns, short strings
# as text/<key> (facets when few distinct values); nested and long values are shown only in the sample view.


EXTRA_PREFIX, TEXT_PREFIX = "extra/", "text/"


EXTRA_FIELDS = 32  # kept per line, in the line's order


TEXT_FIELD_CHARACTERS = 64  # a longer string is a long value


# Columns of keys only some lines have (rewards/, extra/, text/) a file keeps, and a run: a key per line (an id used as
# the key) would otherwise make a column per line. A file's are those of its first FIELD_COLUMNS names, as they come
# in it, however it is read: a part read at once has columns for its first FIELD_COLUMNS names and the values of the
# others as (row, value) pairs (LineSummaries.more_fields), whose memory grows with the values, not the rows.
FIELD_COLUMNS = 256
FIELD_PREFIXES = ("rewards/", EXTRA_PREFIX, TEXT_PREFIX)


# The workers' results. The lines of a byte range: where each is, and the step a regex sees in it.
@dataclass
class ScannedLines:
    line_index: np.ndarray  # of each non-blank line among the range's lines, from 0
    offset: np.ndarray  # in the file
    length: np.ndarray  # without its newline
    step_hint: np.ndarray  # NaN where the regex finds no integer step
    physical_lines: int  # newlines in the range, blank lines included
    complete_end: int  # the file offset past the range's last newline


# The numbers the charts need of some lines, in the order asked; problems are (position, kind, reason).
@dataclass
class LineSummaries:
    good: np.ndarray  # bool: the line decoded into a sample
    step: np.ndarray
    numbers: dict[str, np.ndarray]  # SUMMARY_NUMBERS
    texts: dict[str, list]  # SUMMARY_TEXTS
    fields: dict[str, np.ndarray]  # columns of the keys some lines have: rewards/<function>, extra/<key>, text/<key>
    problems: list[tuple[int, str, str]]
    more_fields: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # names past FIELD_COLUMNS: (rows, values)


class BadLine(ValueError):
    """A line that cannot be loaded; the message says why."""


WHITESPACE_BYTES = frozenset(b" \t\r\x0b\x0c")  # what bytes.strip() strips, less the newline that ends a line


# Every newline-terminated line in data[:size]: offset, length and its step's hint (line_step_hints); a blank line
# (whitespace only) is no line.
def scan_lines(data, size: int, base: int) -> "ScannedLines":
    newlines = []
    position = data.find(b"\n", 0, size)
    while position >= 0:
        newlines.append(position)
        position = data.find(b"\n", position + 1, size)
    newlines = np.array(newlines, dtype=np.int64)
    starts = np.concatenate([[0], newlines[:-1] + 1]).astype(np.int64) if len(newlines) else newlines
    lengths = newlines - starts
    step_hints = line_step_hints(data, starts, newlines)
    blank, looked_at = np.zeros(len(newlines), dtype=bool), lengths < 256
    for i in np.flatnonzero(~looked_at):  # a long line is looked at only where it starts blank (a JSON line starts "{")
        looked_at[i] = data[starts[i]] in WHITESPACE_BYTES
    for i in np.flatnonzero(looked_at):
        blank[i] = not bytes(data[starts[i] : starts[i] + lengths[i]]).strip()
    return ScannedLines(
        line_index=np.flatnonzero(~blank),
        offset=starts[~blank] + base,
        length=lengths[~blank],
        step_hint=step_hints[~blank],
        physical_lines=len(newlines),
        complete_end=base + (int(newlines[-1]) + 1 if len(newlines) else 0),
    )


# The step each line's "step" key holds, before the line is parsed: it chooses the lines parsed at first (Max Samples
# Each Step a step), and a wrong one would leave a line out of its step unparsed (line_step_hint).
def line_step_hints(data, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    hints = np.full(len(ends), np.nan)
    escapes = [letter.start() for letter in ESCAPED_STEP_LETTER.finditer(data, 0, int(ends[-1]) if len(ends) else 0)]
    escaped = set(np.searchsorted(ends, escapes).tolist())  # the lines that may have such a key: none, as a rule
    for line, (start, end) in enumerate(zip(starts.tolist(), ends.tolist())):
        if line in escaped and any(b"\\u" in key.group() for key in ESCAPED_STEP_KEY.finditer(data, start, end)):
            continue  # a "step" key the search below cannot see: no hint
        hints[line] = line_step_hint(data, start, end)
    return hints


MOST_STEP_KEYS = 64


# The step a line's "step" keys give ("step" as a value, a token, is no key). A "step" key that is the first key of an
# object inside the line is passed over: each of the logger's loss passes begins so (naming its own optimizer step, a
# later one than the line's with num_iterations > 1). The hint is the value of the one other "step" key of the line;
# NaN (the line is parsed at once) where it has none, or two or more (a field's object or an agent's turn with "step"
# after other keys: either could be the line's), or more than MOST_STEP_KEYS keys (the loss passes of a line of a million
# tokens: parsing it costs less than looking at each), or its value is not an integer. Parsing has the last word.
def line_step_hint(data, start: int, end: int) -> float:
    first = LONG_LINE_STEP_KEY if end - start > LONG_LINE else STEP_KEY  # the keys after it are mostly near: re
    opening, own, key = data.find(b"{", start, end), None, first.search(data, start, end)  # the line's own object
    for _ in range(MOST_STEP_KEYS):
        if key is None:
            value = STEP_VALUE.match(data, own, end) if own is not None else None
            return float(value.group(1)) if value else math.nan  # a step too big for int64 becomes inf; 2.5, "3" or null give none
        at = key.start()
        before = at - 1
        while before > start and data[before] in b" \t\r":
            before -= 1
        if not (data[before] == ord("{") and before != opening):  # no object's first key inside the line
            if own is not None:
                return math.nan
            own = key.end()  # its value follows the colon
        key = STEP_KEY.search(data, at + 1, end)
    return math.nan


# Decode lines of data (which starts at file offset base) and reduce each to the per-sample numbers the charts need.
# A record is reduced as soon as it is decoded: its floats are freed at once and their memory reused.
def summarize_buffer(data, base: int, offsets: np.ndarray, lengths: np.ndarray) -> "LineSummaries":
    view, count = memoryview(data), len(offsets)
    numbers = {name: np.full(count, np.nan) for name in SUMMARY_NUMBERS}
    steps, good, texts = np.zeros(count, dtype=np.int64), np.zeros(count, dtype=bool), {name: [None] * count for name in SUMMARY_TEXTS}
    fields: dict[str, tuple[list, list]] = {}  # each name's rows and values, in the order the names come
    token_arrays: dict[str, list] = {key: [] for key in SUMMARY_TOKEN_KEYS}
    problems, parser = [], simdjson.Parser()
    for row, (offset, length) in enumerate(zip((offsets - base).tolist(), lengths.tolist())):
        try:
            record, note, line = decode_summary(view[offset : offset + length], parser)
            # Its texts written out: a value nested nearly as deep as a decoder takes overflows Python's stack here
            text_lengths = [text_length(text) if text is not None else np.nan for text in (record.response, record.ref_response)]
            key = prompt_key(record.prompt)
        except BadLine as error:
            problems.append((row, "skipped", str(error)))
            continue
        except RecursionError:
            problems.append((row, "skipped", "nested too deep to be read"))
            continue
        if note:
            problems.append((row, "note", note))
        good[row], steps[row] = True, record.step
        infinite = False  # a number read is ±inf: perhaps one beyond a float's range, which a note names
        for name in SCALAR_KEYS:
            value = getattr(record, name)
            if value is not None:
                numbers[name][row] = value
                infinite = infinite or math.isinf(value)
        numbers["response_len"][row], numbers["ref_response_len"][row] = text_lengths
        numbers["prompt_key"][row] = key
        if type(record.micro_batch) is int and abs(record.micro_batch) < 2**53:
            numbers["micro_batch"][row] = record.micro_batch
        if record.group_id is not None:
            texts["group_id"][row] = valid_text(str(record.group_id))
        if record.images is not None:
            texts["image_paths"][row] = json.dumps([image["path"] for image in image_references(record.images)[:IMAGES_SHOWN]])
        for name, score in (record.rewards_per_func or {}).items():
            add_field_value(fields, f"rewards/{valid_text(name)}", row, np.nan if score is None else score)
            infinite = infinite or (score is not None and math.isinf(score))
        numbers["extra_keys"][row] = sum(name not in FORMAT_KEYS for name in line)
        for name in ("prompt", "response"):  # where the texts are, for search to read them alone (valid UTF-8: no note)
            if note is None and isinstance(line.get(name), msgspec.Raw):
                numbers[f"{name}_at"][row] = raw_offset(data, bytes(line[name]), offset, offset + length)
                numbers[f"{name}_bytes"][row] = len(line[name])
        for name, value in extra_fields(line).items():
            add_field_value(fields, (TEXT_PREFIX if isinstance(value, str) else EXTRA_PREFIX) + name, row, value)
            infinite = infinite or (type(value) is float and math.isinf(value))
        if "loss_passes" in line:
            infinite = add_update_numbers(numbers, row, line["loss_passes"], problems, parser) or infinite
        if type(record) is RolloutSummary:  # the general way (the fast way's lists hold no infinity: simdjson refuses one)
            infinite = infinite or any(math.inf in values or -math.inf in values for values in (getattr(record, key) for key in SUMMARY_TOKEN_KEYS) if isinstance(values, list))
        if infinite and (places := numbers_beyond_range(view[offset : offset + length])):
            problems.append((row, "note", beyond_range_note(places)))
        if "turns" in line:
            add_turn_numbers(numbers, row, line["turns"], problems)
        if "policy_version" in line:
            add_staleness_numbers(numbers, row, record.step, line["policy_version"], problems)
        if "stop_reason" in line:
            reason = line["stop_reason"]
            reason = raw_value(reason) if isinstance(reason, msgspec.Raw) else reason
            if isinstance(reason, str):
                add_field_value(fields, STOP_REASON_FIELD, row, valid_text(reason[:TEXT_FIELD_CHARACTERS]))
        arrays, numbers["response_tokens_len"][row], notes = aligned_token_arrays(record, SUMMARY_TOKEN_KEYS)
        problems.extend((row, "note", text) for text in notes)
        if arrays["tool"] is not None:
            numbers["tool_tokens"][row] = arrays["tool"].sum()
        if arrays["logprobs"] is not None:
            for key, collected in token_arrays.items():
                if arrays[key] is not None:
                    collected.append((row, arrays[key], arrays["logprobs"]))
    add_token_statistics(numbers, token_arrays)
    columns, more_fields = field_columns(fields, count)
    return LineSummaries(good=good, step=steps, numbers=numbers, texts=texts, fields=columns, problems=problems, more_fields=more_fields)


# A line's value of a field beside the others of its name (a column is made once the part is read: one made per name
# as it came, a part long, cost a part's length for each of its lines' fields).
def add_field_value(fields: dict[str, tuple[list, list]], name: str, row: int, value):
    rows, values = fields.setdefault(name, ([], []))
    rows.append(row)
    values.append(value)


# The fields' rows and values of count lines as columns for the first FIELD_COLUMNS names, (rows, values) after them.
def field_columns(fields: dict[str, tuple[list, list]], count: int) -> tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]]]:
    columns, more = {}, {}
    for position, (name, (rows, values)) in enumerate(fields.items()):
        values = np.array(values, dtype=missing_values(name, 0).dtype)
        if position < FIELD_COLUMNS:
            columns[name] = missing_values(name, count)
            columns[name][rows] = values
        else:
            more[name] = (np.array(rows, dtype=np.int64), values)
    return columns, more


# Decode one line: msgspec first, then Python's json for NaN/Infinity, huge numbers, bad UTF-8 and a byte order mark
# (a file written by a Windows tool starts with one).
def decode_line(raw: bytes, decoder: msgspec.json.Decoder):
    note = None
    try:
        record = decoder.decode(raw)
    except (msgspec.DecodeError, ValueError, RecursionError):  # malformed, NaN/Infinity, huge numbers, bad UTF-8, BOM, deep nesting
        try:
            value, note = python_json(raw)
        except (ValueError, RecursionError) as error:
            raise BadLine(f"not valid JSON: {getattr(error, 'msg', error)} (column {getattr(error, 'colno', '?')})") from None
        if not isinstance(value, dict):
            raise BadLine(f"a JSON {json_kind(value)}, not an object")
        record, ignored = without_wrong_optional_keys(with_raw_fields(value, decoder.type), decoder.type)
        note = "; ".join(part for part in (note, *ignored) if part) or None
    return integer_step(record), note


# A line's record with each optional key of the wrong type (an advantage given as a list, a truncated of "yes", a
# rewards_per_func holding a string) left out, and a note for each: the rest of the line (its reward, its texts, its
# tokens) is kept, where the whole line was skipped. A required key (reward, step) of the wrong type, or an error that
# names no key of the line, still makes the line bad. Each pass leaves out one key, so the loop ends.
def without_wrong_optional_keys(value: dict, kind) -> tuple:
    ignored = []
    while True:
        try:
            return converted(value, kind), ignored
        except (msgspec.ValidationError, TypeError, OverflowError) as error:
            wrong = WRONG_KEY.search(str(error))
            key = wrong.group(1) if wrong else None
            if key not in value or key in REQUIRED_KEYS:
                raise BadLine(str(error)) from None
            value = {name: item for name, item in value.items() if name != key}
            ignored.append(f"{key} left out: {WRONG_KEY.sub('', str(error))}")


WRONG_KEY = re.compile(r" - at `\$\.([A-Za-z_][A-Za-z0-9_]*)\b[^`]*`")  # msgspec's "... - at `$.advantage`" / "`$.rewards_per_func[...]`"


REQUIRED_KEYS = {"prompt", "response", "reward", "step"}  # docs/data-format.md: a line without them is no sample


# A Python value (Python's json's) as `kind`, as msgspec converts it, but with each number beyond a float's range where
# `kind` has a float (an integer of 309 digits or more, or such a number written as text: "1e400") read as ±inf, as a
# float rounds it and as Python's json reads 1e400 written as a number: msgspec refuses them all, which skipped a line
# whose reward was 10**400 while a reward of 1e400 was read (docs/limits.md). An integer where `kind` has an int (a
# step) stays as it is. The load report's note on such numbers is numbers_beyond_range's.
def converted(value, kind):
    try:
        return msgspec.convert(value, kind, strict=False)
    except msgspec.ValidationError as error:
        if "out of range" not in str(error):
            raise
    return msgspec.convert(floats_in_range(value, type_info(kind)), kind, strict=False)


@functools.cache
def type_info(kind) -> msgspec.inspect.Type:
    return msgspec.inspect.type_info(kind)


JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


# A number written as text ("3", "0.5", "1e400"), as a line may write any: an integer where it has no fraction or
# exponent (as Python's json reads it), else a float; None for any other text.
def text_number(text: str) -> int | float | None:
    text = text.strip()
    if not JSON_NUMBER.fullmatch(text):
        return None
    return float(text) if any(mark in text for mark in ".eE") else json_integer(text)


# floats_in_range of one value of type `info` (msgspec.inspect's): a new value where something changed.
def floats_in_range(value, info):
    kinds = info.types if isinstance(info, msgspec.inspect.UnionType) else (info,)
    if type(value) in (int, str) and any(isinstance(kind, msgspec.inspect.FloatType) for kind in kinds):
        if type(value) is int and not any(isinstance(kind, msgspec.inspect.IntType) for kind in kinds):
            return as_float(value)
        if type(value) is str and JSON_NUMBER.fullmatch(value) and math.isinf(float(value)):
            return float(value)
        return value
    for kind in kinds:
        if isinstance(value, list) and isinstance(kind, msgspec.inspect.ListType):
            return [floats_in_range(item, kind.item_type) for item in value]
        if isinstance(value, dict) and isinstance(kind, msgspec.inspect.DictType):
            return {key: floats_in_range(item, kind.value_type) for key, item in value.items()}
        if isinstance(value, dict) and isinstance(kind, msgspec.inspect.StructType):
            fields = {field.encode_name: field.type for field in kind.fields}
            return {key: floats_in_range(item, fields[key]) if key in fields else item for key, item in value.items()}
    return value


# A JSON text's escapes of lone surrogates (valid JSON: "\ud83d", half an emoji) as "\ufffd", wherever they are, keys
# and nested values too: a lone surrogate cannot be UTF-8, which msgspec's matching of keys, Arrow and the caches need.
# (msgspec refuses such a line, so it comes this way: decode_line, line_fields.)
# Escaped backslashes are taken first, so "\\ud800" (a backslash, then text) stays as it is.
JSON_ESCAPE_OF_SURROGATES = re.compile(r"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|(\\u[dD][89a-fA-F][0-9a-fA-F]{2})")


def without_lone_surrogates(text: str) -> str:
    if "\\u" not in text:
        return text
    return JSON_ESCAPE_OF_SURROGATES.sub(lambda match: "\\ufffd" if match.group(1) else match.group(0), text)


# A line msgspec refuses (the board's, or a verl dump's), read by Python's json: a byte order mark dropped, bytes that are
# not UTF-8 and lone surrogates as �, with a note where the first bad byte is (None: all UTF-8); an integer of more than
# 4,000 digits infinite (json_integer). Raises ValueError or RecursionError where it is not JSON. `options`: json.loads's.
def python_json(raw, **options) -> tuple[object, str | None]:
    raw, note = bytes(raw), None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        text, note = raw.decode("utf-8", errors="replace"), f"invalid UTF-8 at byte {error.start} shown as �"
    return json.loads(without_lone_surrogates(text.removeprefix("\ufeff")), **{"parse_int": json_integer, **options}), note


# msgspec.convert cannot fill a field kept as raw JSON (the summary's response_tokens; a trajectory's turns, each
# element raw) from a Python value: give it the value's JSON (json's, which writes a lone surrogate as an escape where
# msgspec's encoder raises, and NaN as NaN).
def with_raw_fields(value: dict, struct_type) -> dict:
    for name, elements_raw in raw_field_names(struct_type):
        if name not in value:
            continue
        if not elements_raw:
            value[name] = raw_json(value[name])
        elif isinstance(value[name], list):
            value[name] = [raw_json(element) for element in value[name]]
    return value


# A Python value as the raw JSON a struct's msgspec.Raw field takes.
def raw_json(value) -> msgspec.Raw:
    return msgspec.Raw(json.dumps(value).encode())


# The keys of a struct kept as raw JSON, and whether it is their elements that are (list[msgspec.Raw]), found once:
# msgspec.structs.fields evaluates the struct's annotations at each call (0.15 ms, 85 % of a line of another kind's
# time: 300,000 such lines took 14 s).
@functools.cache
def raw_field_names(struct_type) -> tuple[tuple[str, bool], ...]:
    return tuple(
        (field_info.encode_name, field_info.type is not msgspec.Raw)
        for field_info in msgspec.structs.fields(struct_type)
        if field_info.type is msgspec.Raw or field_info.type in (list[msgspec.Raw], list[msgspec.Raw] | None)
    )


# A line's summary and its fields outside the format, the fast way where simdjson takes its per-token lists as they
# are (flat lists of finite numbers); any other line (null, NaN or a nested list in a list, huge numbers, bad JSON, a
# key missing or of the wrong type...) is decoded the general way, so both give the same record.
def decode_summary(raw, parser: simdjson.Parser):
    fields = None
    try:
        fields = LINE_FIELDS_DECODER.decode(raw)
        record = RolloutSummaryRawArrays(**{
            name: value if SUMMARY_FIELDS[name] is msgspec.Raw else SUMMARY_FIELD_DECODERS[name].decode(value)
            for name, value in fields.items() if name in SUMMARY_FIELDS
        })
        arrays = {key: flat_float_list(getattr(record, key), parser) for key in SUMMARY_TOKEN_KEYS}
    except (msgspec.DecodeError, ValueError, TypeError, AttributeError, RuntimeError, RecursionError):
        record, note = decode_line(raw, SUMMARY_DECODER)
        return record, note, line_fields(raw) if fields is None else fields  # a line with nulls in its lists was split already
    for key, array in arrays.items():
        setattr(record, key, array)
    return integer_step(record), None, fields


# Where a line's raw value is, from the line's start: the first place in data[start:end] holding the same bytes
# (found by its first 16 bytes, which is several times faster than looking for all of them).
def raw_offset(data, raw: bytes, start: int, end: int) -> int:
    at = data.find(raw[:16], start, end)
    if data[at : at + len(raw)] != raw:  # another place starts alike
        at = data.find(raw, start, end)
    return at - start


# A line's top-level keys and values (raw JSON, or Python values where msgspec refuses the line: NaN, bad UTF-8...).
def line_fields(raw) -> dict:
    try:
        return LINE_FIELDS_DECODER.decode(raw)
    except (msgspec.DecodeError, ValueError, RecursionError):
        try:
            value, _ = python_json(raw)
        except (ValueError, RecursionError):
            return {}
        return value if isinstance(value, dict) else {}


# The fields outside the format the index keeps: numbers (booleans as 0/1) and short strings, the first EXTRA_FIELDS.
def extra_fields(fields: dict) -> dict[str, float | str]:
    kept = {}
    for name, value in fields.items():
        if name in FORMAT_KEYS:
            continue
        if isinstance(value, msgspec.Raw):  # nested values are not parsed: the sample view reads them
            if bytes(memoryview(value)[:1]) in b"[{":
                continue
            value = raw_value(value)
        if isinstance(value, (bool, int, float)):
            kept[valid_text(name)] = as_float(value)
        elif isinstance(value, str) and len(value) <= TEXT_FIELD_CHARACTERS:
            kept[valid_text(name)] = valid_text(value)
        if len(kept) == EXTRA_FIELDS:
            break
    return kept


# A raw JSON list of numbers as a float array (None when the key is absent); raises on anything else.
# simdjson would flatten a nested list, so one is refused here.
def flat_float_list(raw: msgspec.Raw, parser: simdjson.Parser) -> np.ndarray | None:
    if not raw:
        return None
    text = bytes(raw)
    if text.find(b"[", 1) >= 0:
        raise ValueError("a nested list")
    value = parser.parse(text)
    if not isinstance(value, simdjson.Array):
        raise ValueError("not a list")
    return np.frombuffer(value.as_buffer(of_type="d"))


# A step is an integer (2.0 is 2) within int64 once it is a float, as the index holds it (2**63 - 1 rounds up to 2**63).
def integer_step(record):
    if isinstance(record.step, float):
        if math.isinf(record.step):  # 1e400, or an integer of more than 4,000 digits (json_integer)
            raise BadLine(f"step {record.step} is out of range")
        if not record.step.is_integer():
            raise BadLine(f"step {record.step} is not an integer")
        record.step = int(record.step)
    if not -(2**63) <= record.step < 2**63 or float(record.step) >= 2**63:
        raise BadLine(f"step {str(record.step)[:12]}… ({len(str(abs(record.step)))} digits) is out of range")
    return record


# Per-token arrays of a record cut to one common length, with a note for every mismatch; "tool" marks the tokens a
# tool wrote (None: no tool_mask), whose policy values are left out (NaN) whatever the line holds.
def aligned_token_arrays(record, keys=TOKEN_KEYS) -> tuple[dict, float, list[str]]:
    tool, notes = tool_flags(record.tool_mask)
    arrays = {key: token_values(key, getattr(record, key), notes) for key in keys}
    lengths = [len(array) for array in arrays.values() if array is not None]
    if 0 in lengths and any(lengths):  # an empty list beside others means absent
        arrays = {key: None if array is not None and not len(array) else array for key, array in arrays.items()}
    tokens = record.response_tokens
    if isinstance(tokens, msgspec.Raw):
        tokens = None if arrays["logprobs"] is not None or not tokens else raw_value(tokens)
    tokens = token_list(tokens, notes)
    if arrays["logprobs"] is None:
        length = float(len(tokens)) if tokens is not None else np.nan
        return dict.fromkeys(keys) | {"tool": tool}, length, notes
    length = min(len(array) for array in arrays.values() if array is not None)
    for key in keys[1:]:
        if arrays[key] is not None and len(arrays[key]) != len(arrays["logprobs"]):
            notes.append(f"{key} has {len(arrays[key])} values, logprobs {len(arrays['logprobs'])}: token values use the first {length}")
    if tokens is not None and len(tokens) > length + 1:  # one more is the format's trailing pad (docs/data-format.md)
        notes.append(f"response_tokens has {len(tokens)} entries, log-probs {length}: tokens clipped to {length}")
    elif tokens is not None and len(tokens) < length:
        notes.append(f"response_tokens has {len(tokens)} entries, log-probs {length}: missing tokens shown as '?'")
    arrays = {key: None if array is None else array[:length] for key, array in arrays.items()}
    if tool is not None:
        if len(tool) != length:
            notes.append(f"tool_mask has {len(tool)} entries, log-probs {length}: " + ("the rest are taken as sampled" if len(tool) < length else f"the first {length} are used"))
            tool = np.concatenate([tool, np.zeros(length, dtype=bool)])[:length]
        for key in POLICY_TOKEN_KEYS:
            if arrays.get(key) is not None:
                arrays[key] = np.where(tool, np.nan, arrays[key])
    return arrays | {"tool": tool}, float(length), notes


# A line's tool_mask (1: sampled by the policy, 0: written by a tool) as flags of tool tokens, or None without one;
# a mask that is not a flat list of 0/1 is ignored, with a note.
def tool_flags(raw: msgspec.Raw) -> tuple[np.ndarray | None, list[str]]:
    value = raw_value(raw) if raw else None
    if value is None:
        return None, []
    try:
        mask = np.asarray(value)
    except ValueError:  # a ragged list
        mask = np.asarray(None)
    if mask.ndim != 1 or mask.dtype.kind not in "biuf" or not np.isin(mask, (0, 1)).all():
        return None, ["tool_mask is not a list of 0 and 1: ignored, every token taken as sampled"]
    return mask == 0, []


# A line's UPDATE_NUMBERS from its loss_passes (raw JSON, or a Python value where the line needed Python's json); a
# value that is not a list of the logger's pass objects is ignored, with a note. Returns whether a per-token value of
# its passes is ±inf.
def add_update_numbers(numbers: dict, row: int, value, problems: list, parser: simdjson.Parser) -> bool:
    try:
        passes, left_out = loss_pass_records(value, parser)
    except ValueError:
        problems.append((row, "note", "loss_passes is not a list of loss-pass objects: ignored"))
        return False
    if left_out:
        problems.append((row, "note", f"loss_passes: {left_out} of its {len(passes) + left_out} elements are not loss-pass objects: left out"))
    numbers["loss_passes"][row] = len(passes)
    clipped = [np.asarray(p.clipped, dtype=float) for p in passes if p.clipped is not None]
    if clipped:
        numbers["clipped_tokens"][row] = sum(int(np.count_nonzero(np.nan_to_num(array))) for array in clipped)
    weights = [np.asarray(p.update_weight, dtype=float) for p in passes if p.update_weight is not None]
    if weights:
        numbers["abs_update_weight"][row] = sum(float(np.nansum(np.abs(array))) for array in weights)
    lists = [getattr(p, key) for p in passes for key in LOSS_PASS_TOKEN_KEYS]
    return any(np.isinf(np.asarray(values, dtype=float)).any() for values in lists if values is not None)


# A line's TURN_NUMBERS from its turns (raw JSON, or a Python value); a value that is not a list is ignored, and an
# element that is not an object (a string, a number, null) left out, each with a note (the sample view says more).
def add_turn_numbers(numbers: dict, row: int, value, problems: list):
    try:
        turns = TURN_COUNTS_DECODER.decode(value) if isinstance(value, msgspec.Raw) else msgspec.convert(value, list[TurnCounts], strict=False)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
        try:
            elements = raw_value(value) if isinstance(value, msgspec.Raw) else value
        except (ValueError, RecursionError):
            elements = None
        if not isinstance(elements, list):
            problems.append((row, "note", "turns is not a list of turn objects: ignored"))
            return
        turns = [msgspec.convert(turn, TurnCounts, strict=False) for turn in elements if isinstance(turn, dict)]
        if len(turns) < len(elements):
            problems.append((row, "note", f"turns: {len(elements) - len(turns)} of its {len(elements)} elements are not objects: left out"))
    numbers["turns"][row] = len(turns)
    numbers["tool_calls"][row] = sum(len(turn.tool_calls) for turn in turns if isinstance(turn.tool_calls, list))
    numbers["tool_errors"][row] = sum(turn.role == "tool" and has_error(turn.error) for turn in turns)


# Whether a turn's error is one: null, false, 0, "", [] and {} say there was none.
def has_error(value) -> bool:
    return bool(value)


# A line's STALENESS_NUMBERS from its policy_version (raw JSON, or a Python value) and step. A version that is not an
# integer from 0 (an integer-valued float is one, as a step is) is ignored, and one after the line's step has no
# staleness (its versions do not count the line's steps): each with a note. null is no version.
def add_staleness_numbers(numbers: dict, row: int, step: int, value, problems: list):
    value = raw_value(value) if isinstance(value, msgspec.Raw) else value
    if value is None:
        return
    if type(value) is str and (number := text_number(value)) is not None:
        value = number
    if type(value) is float and value.is_integer() and abs(value) < POLICY_VERSIONS:
        value = int(value)
    if type(value) is not int or not 0 <= value < POLICY_VERSIONS:
        problems.append((row, "note", f"policy_version is {version_kind(value)}, not an integer from 0 to 2^53: ignored"))
        return
    numbers["policy_version"][row] = value
    if value > step:
        problems.append((row, "note", f"policy_version {value} is after the line's step {step}: no staleness (its versions must count the line's steps)"))
        return
    numbers["staleness"][row] = step - value


# What a policy_version that cannot be used is, in words (never the digits of a huge integer).
def version_kind(value) -> str:
    if type(value) is int or (type(value) is float and value.is_integer()):
        return f"negative ({int(value)})" if -POLICY_VERSIONS < value < 0 else "an integer out of range"
    if type(value) is float:
        return f"a fraction ({value:.6g})" if math.isfinite(value) else f"not finite ({value})"
    return {bool: "a boolean", str: "a string", list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


# Per-sample sums and means of log ratio, each KL estimator (and k3's token count), logp and entropy, in a few numpy calls.
def add_token_statistics(numbers: dict, token_arrays: dict):
    def flat(key):
        owners = np.array([owner for owner, _, _ in token_arrays[key]], dtype=np.int64)
        lengths = np.array([len(values) for _, values, _ in token_arrays[key]], dtype=np.int64)
        return owners, lengths, np.concatenate([values for _, values, _ in token_arrays[key]])

    if token_arrays["logprobs"]:
        owners, lengths, logp = flat("logprobs")
        numbers["avg_logp"][owners] = segment_sums_and_means(logp[None], lengths)[1][0]
    if token_arrays["entropies"]:
        owners, lengths, entropy = flat("entropies")
        numbers["avg_entropy"][owners] = segment_sums_and_means(entropy[None], lengths)[1][0]
    if token_arrays["sampler_logprobs"]:
        owners, lengths, sampler_logp = flat("sampler_logprobs")
        delta = np.concatenate([logp for _, _, logp in token_arrays["sampler_logprobs"]]) - sampler_logp
        mismatch_kl = kl_per_token(delta, "kl")
        numbers["avg_abs_mismatch"][owners] = segment_sums_and_means(np.abs(delta)[None], lengths)[1][0]
        numbers["sum_mismatch"][owners] = segment_sums_and_means(delta[None], lengths)[0][0]
        numbers["avg_mismatch_kl"][owners] = segment_sums_and_means(mismatch_kl[None], lengths)[1][0]
        present = segment_sums_and_means((~np.isnan(delta)).astype(float)[None], lengths)[0][0]
        numbers["mismatch_tokens"][owners] = np.nan_to_num(present)
        for column, function, values in (("max_abs_mismatch", np.fmax, np.abs(delta)), ("max_is_ratio", np.fmax, delta), ("min_is_ratio", np.fmin, delta)):
            extremes = segment_reduce(function, values, lengths, np.nan)  # NaN also where all are NaN (fmax, fmin)
            with np.errstate(over="ignore"):  # Δ past 709: a ratio of inf
                numbers[column][owners] = extremes if column == "max_abs_mismatch" else np.exp(extremes)
    if token_arrays["is_ratio"]:
        owners, lengths, applied = flat("is_ratio")
        numbers["avg_applied_is_ratio"][owners] = segment_sums_and_means(applied[None], lengths)[1][0]
    if token_arrays["ref_logprobs"]:
        owners, lengths, ref_logp = flat("ref_logprobs")
        log_ratio = np.concatenate([logp for _, _, logp in token_arrays["ref_logprobs"]]) - ref_logp
        columns = [("log_ratio", "k1")] + [(f"kl_{name}", name) for name in KL_ESTIMATORS]
        for column, estimator in columns:  # one estimator at a time: stacking them copied 5 floats per token
            with np.errstate(over="ignore", invalid="ignore"):
                per_token = kl_per_token(log_ratio, estimator)
            sums, means = segment_sums_and_means(per_token[None], lengths)
            numbers[f"sum_{column}"][owners], numbers[f"avg_{column}"][owners] = sums[0], means[0]
            if estimator == "k3":
                present = segment_sums_and_means((~np.isnan(per_token)).astype(float)[None], lengths)[0][0]
                numbers[KL_TOKENS][owners] = np.nan_to_num(present)


# A function (np.add, np.fmax...) reduced over consecutive segments of the given lengths; `empty` for a segment of none.
def segment_reduce(function, values: np.ndarray, lengths: np.ndarray, empty: float) -> np.ndarray:
    result = np.full(len(lengths), empty)
    kept = lengths > 0
    if kept.any():
        result[kept] = function.reduceat(values, (np.cumsum(lengths) - lengths)[kept])
    return result


# A line's images as {"path", "width", "height"} (None where unknown): the logger writes dicts, other tools may write
# paths; one image alone may stand without a list. A path that is no string is None (shown as a problem).
def image_references(value) -> list[dict]:
    references = []
    for item in value if isinstance(value, list) else [value]:
        item = item if isinstance(item, dict) else {"path": item}
        size = {key: item.get(key) if type(item.get(key)) is int else None for key in ("width", "height")}
        path = item.get("path")
        references.append({"path": valid_text(path) if isinstance(path, str) else None, **size})
    return references


# The same prompt text gives the same key, held exactly by a float (53 bits): the lines of one prompt across the run
# are found from the index alone, then their texts compared.
def prompt_key(prompt) -> float:
    text = as_text(prompt)
    if text is None:
        return np.nan
    return float(int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 11)


# Text of a free-form field: strings as they are, anything else as JSON.
def as_text(value) -> str | None:
    if value is None:
        return None
    return valid_text(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))


# Characters in a free-form field as shown. A string's count needs no check: valid_text puts one � for each lone
# surrogate, and checking every response would be a noticeable share of the first pass.
def text_length(value) -> int:
    return len(value) if isinstance(value, str) else len(as_text(value) or "")


# Numbers beyond a float's range (docs/limits.md): |x| ≥ 2^1024 once rounded, 1e400 or an integer of 309 digits and more,
# read as ±inf (converted, as_float, float_array), the line kept. The load report notes where each is, for the numbers
# the index reads: the line format's (NUMBER_KEYS; written as text too: "1e400") and the fields outside the format.
# Found by a second, slower parse of a line that has a number read as ±inf, which tells 1e400 from Infinity.
class OutOfRange:
    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


def out_of_range_float(text: str):
    number = float(text)
    return OutOfRange(text) if math.isinf(number) else number


def out_of_range_integer(digits: str):
    number = json_integer(digits)
    return OutOfRange(digits) if math.isinf(as_float(number)) else number


NUMBER_KEYS = ("reward", "ref_reward", "valid_reward", "ref_valid_reward", "advantage", "rewards_per_func", *SUMMARY_TOKEN_KEYS, "loss_passes")


# Where a line's numbers beyond a float's range are, with each as written: [("reward", "1e400"), ("logprobs[3]", ...)],
# under `keys` and (`outside_format`) in the fields outside the format.
def numbers_beyond_range(raw, keys=NUMBER_KEYS, outside_format: bool = True) -> list[tuple[str, str]]:
    try:
        value, _ = python_json(raw, parse_float=out_of_range_float, parse_int=out_of_range_integer)
    except (ValueError, RecursionError):
        return []
    places = []

    def walk(item, path: str):
        if isinstance(item, OutOfRange):
            places.append((path, item.text))
        elif isinstance(item, str) and JSON_NUMBER.fullmatch(item) and math.isinf(float(item)):  # read as a number where the format has a float
            places.append((path, json.dumps(item)))
        elif isinstance(item, list):
            for position, element in enumerate(item):
                walk(element, f"{path}[{position}]")
        elif isinstance(item, dict):
            for key, element in item.items():
                walk(element, f"{path}.{valid_text(key)[:40]}")

    for key, item in value.items() if isinstance(value, dict) else ():
        if key == "loss_passes" and key in keys and isinstance(item, list):  # their per-token lists: a pass's step is an integer
            for position, record in enumerate(item):
                for name in LOSS_PASS_TOKEN_KEYS if isinstance(record, dict) else ():
                    walk(record.get(name), f"loss_passes[{position}].{name}")
        elif key in keys:
            walk(item, key)
        elif outside_format and key not in FORMAT_KEYS and isinstance(item, OutOfRange):
            places.append((valid_text(key)[:40], item.text))
    return places


def beyond_range_note(places: list[tuple[str, str]]) -> str:
    shown = "; ".join(f"{path} = {number_written(text)}" for path, text in places[:3])
    return f"beyond a float's range (±1.8e308), read as ±inf: {shown}" + (f"; and {len(places) - 3} more" if len(places) > 3 else "")


# A number as written, an integer of many digits cut as a step is (never thousands of digits in the load report).
def number_written(text: str) -> str:
    if len(text) <= 24:
        return text
    return f"{text[:12]}… ({len(text.lstrip('-'))} digits)" if text.lstrip("-").isdigit() else f"{text[:20]}…"


# A raw JSON value the first pass kept (it is valid JSON): msgspec refuses a lone surrogate escape, Python's json takes it.
# An integer of thousands of digits (json_integer) is infinite, as as_float makes any integer too big for a float.
def raw_value(raw: msgspec.Raw):
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, ValueError):  # a lone surrogate escape, bytes that are not UTF-8 (shown as �), a huge integer
        return json.loads(bytes(raw).decode(errors="replace"), parse_int=json_integer)


# An integer as Python's json reads it, but one of more than 4,000 digits a float (infinite): Python refuses to read an
# integer of more than 4,300 digits, which would stop the whole load.
def json_integer(digits: str) -> int | float:
    return int(digits) if len(digits) <= 4000 else float(digits)


# A list of numbers (null: NaN) as floats; an integer beyond a float's range is ±inf (as_float).
def float_array(values) -> np.ndarray | None:
    if values is None:
        return None
    try:
        return np.asarray(values, dtype=float)
    except OverflowError:
        if not isinstance(values, list):
            raise
        return np.asarray([as_float(value) if type(value) is int else value for value in values], dtype=float)


# A per-token list as floats (null: NaN), or None: absent, or not a flat list of numbers (a note says it is ignored).
def token_values(key: str, value, notes: list[str]) -> np.ndarray | None:
    try:
        array = float_array(value)
        if array is None or array.ndim == 1:
            return array
    except (TypeError, ValueError, OverflowError):  # text, objects, a ragged or nested list
        pass
    notes.append(f"{key} is not a list of numbers: ignored")
    return None


# The response's tokens as a list, or None: absent, or not a list (a note says it is ignored).
def token_list(tokens, notes: list[str]) -> list | None:
    if tokens is None or isinstance(tokens, list):
        return tokens
    notes.append("response_tokens is not a list: ignored")
    return None


# An index column of count missing values: None in a column of texts, NaN in a column of numbers.
def missing_values(name: str, count: int) -> np.ndarray:
    texts = name in SUMMARY_TEXTS or name.startswith(TEXT_PREFIX)
    return np.full(count, None, dtype=object) if texts else np.full(count, np.nan)


# Where values of an index column are missing (None, NaN).
def missing(values: np.ndarray) -> np.ndarray:
    return np.equal(values, None) if values.dtype == object else np.isnan(values)


# A byte range indexed in one read: its lines, and the summaries of the rows parsed on the way.
@dataclass
class IndexedChunk:
    lines: ScannedLines
    parsed_rows: np.ndarray
    summary: LineSummaries
    texts_places: tuple[np.ndarray, np.ndarray] | None = None  # each line's texts record in the texts file (a logger's)


# A JSON number as a float (a boolean as 0/1); an integer beyond a float's range is ±inf, as a float rounds it (float()
# raises instead).
def as_float(value: int | float) -> float:
    if type(value) is float:
        return value
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


IMAGES_SHOWN = 16  # of a line's images, beside its prompt (and kept in the index, for the load report's check)
