"""Agent trajectories turn by turn: a line's `turns` (rollout_logger/metadata.py: each turn's role, text, tool calls,
tool result or error, its images, and its span of the response's tokens) as a table a row per turn, with each turn's own numbers
from the line's per-token values over its span (tokens, mean log-prob, KL, entropy, sampler-trainer mismatch); and,
over a run, each tool call and result (the Step-Tools tab: per step and per tool name, calls and success rate).

A policy turn that makes several tool calls is a row per call (the same `turn`); a tool's turn carries its result.
Spans are checked against the tokens: one that does not fit (past the end, reversed, not integers) keeps its row
without numbers, and a note says so; an unknown role is shown as given, with a note."""
import json
from dataclasses import dataclass

import msgspec
import numpy as np
import pandas as pd

from rl_board.reading.lines import (
    BadLine,
    as_float,
    decode_line,
    has_error,
    image_references,
    integer_step,
    kl_per_token,
    python_json,
    text_number,
)
from rl_board.reading.snapshot import SampleTokens, ensure_same_step, lines_read_back, read_line
from rl_board.text import json_kind
from rollout_logger.metadata import TURN_ROLES

TURN_COLUMNS = ["turn", "role", "text", "tool_name", "tool_arguments", "tool_result", "error", "images", "token_start", "token_end"]
NUMBER_COLUMNS = ["tokens", "mean_logp", "mean_kl", "mean_entropy", "mean_abs_mismatch", "reward", "advantage"]


# A turn as a line holds it: every key optional, any type (a turn is checked when read, never trusted).
class Turn(msgspec.Struct, gc=False):
    role: object = None
    text: object = None
    token_start: object = None
    token_end: object = None
    tool_calls: object = None
    tool_name: object = None
    tool_call_id: object = None
    error: object = None
    images: object = None
    reward: object = None
    advantage: object = None


class RolloutTurns(msgspec.Struct, gc=False):
    step: int | float
    turns: list[Turn | None] | None = None  # None: an element that is no object (left out where it is, with a note)
    stop_reason: object = None


TURNS_DECODER = msgspec.json.Decoder(RolloutTurns, strict=False)


class RolloutRawTurns(msgspec.Struct, gc=False):
    step: int | float
    turns: list[msgspec.Raw] | None = None
    stop_reason: object = None


RAW_TURNS_DECODER = msgspec.json.Decoder(RolloutRawTurns, strict=False)


# A line's turns, and notes on its elements that are no turn (a string, a number, null: each left out where it is, the
# others kept). The turns together in one decode; where one is of another shape, each on its own.
def decoded_turns(raw: bytes) -> tuple[RolloutTurns, list[str]]:
    try:
        record = integer_step(TURNS_DECODER.decode(raw))
    except (msgspec.DecodeError, ValueError, RecursionError):  # also what only Python's json reads (NaN): as a line is
        raw_record, _ = decode_line(raw, RAW_TURNS_DECODER)
        record = RolloutTurns(raw_record.step, None if raw_record.turns is None else [turn_of(turn) for turn in raw_record.turns], raw_record.stop_reason)
    notes = [f"turn {number} is a JSON {json_kind(turn)}, not an object: left out" for number, turn in enumerate(record.turns or []) if not isinstance(turn, Turn)]
    record.turns = None if record.turns is None else [turn if isinstance(turn, Turn) else None for turn in record.turns]
    return record, notes[:NOTED_TURNS] + ([f"{len(notes) - NOTED_TURNS} more turns are not objects"] if len(notes) > NOTED_TURNS else [])


TURN_DECODER = msgspec.json.Decoder(Turn, strict=False)


# A turn as a Turn, or what it is instead (a Python value): a string, a number, null, a list.
def turn_of(raw: msgspec.Raw):
    try:
        return TURN_DECODER.decode(raw)
    except (msgspec.DecodeError, ValueError, RecursionError):
        try:
            value, _ = python_json(raw)
        except (ValueError, RecursionError):
            return None
        return msgspec.convert(value, Turn, strict=False) if isinstance(value, dict) else value


# A sample's trajectory: a row per turn (a row per call of a turn that makes several), why it ended, and notes on
# what in its turns could not be used.
@dataclass(frozen=True)
class Trajectory:
    table: pd.DataFrame  # TURN_COLUMNS (+ NUMBER_COLUMNS once numbered)
    stop_reason: str | None
    notes: list[str]

    @property
    def turns(self) -> int:
        return int(self.table["turn"].nunique()) if len(self.table) else 0


def read_trajectory(path: str, offset: int, length: int, step: int) -> Trajectory | None:
    """The trajectory of the line at offset (None: the line has no turns); BadLine if it no longer holds `step`."""
    record, notes = decoded_turns(read_line(path, offset, length))
    ensure_same_step(record, step)
    return trajectory_of(record.turns, record.stop_reason, notes) if record.turns else None


def trajectory_of(turns: list[Turn | None], stop_reason=None, notes: list[str] = ()) -> Trajectory:
    rows, notes = [], list(notes)
    for number, turn in enumerate(turns):
        if turn is None:  # no object: its note is the reader's
            continue
        role = text_of(turn.role) or "?"
        if role not in TURN_ROLES:
            notes.append(f"turn {number}: role {role!r} is none of {', '.join(TURN_ROLES)}; shown as given")
        start, end = span_of(turn, number, notes)
        base = {"turn": number, "role": role, "text": text_of(turn.text) or "", "tool_name": None, "tool_arguments": None, "tool_result": None,
                "error": text_of(turn.error) if has_error(turn.error) else None, "images": image_references(turn.images) if turn.images is not None else [], "token_start": start, "token_end": end, "reward": number_of(turn.reward), "advantage": number_of(turn.advantage)}
        if role == "tool":
            base |= {"tool_name": text_of(turn.tool_name), "tool_result": base["text"]}
        calls = turn.tool_calls if isinstance(turn.tool_calls, list) else []
        if turn.tool_calls is not None and not isinstance(turn.tool_calls, list):
            notes.append(f"turn {number}: tool_calls is not a list; left out")
        if not calls:
            rows.append(base)
        for call in calls:
            call = call if isinstance(call, dict) else {"name": None, "arguments": call}
            function = call.get("function") if isinstance(call.get("function"), dict) else call  # OpenAI's nesting
            rows.append(base | {"tool_name": text_of(function.get("name")), "tool_arguments": arguments_text(function.get("arguments"))})
    table = pd.DataFrame(rows, columns=TURN_COLUMNS + ["reward", "advantage"])
    texts = ["role", "text", "tool_name", "tool_arguments", "tool_result", "error"]
    table[texts] = table[texts].astype(object).where(table[texts].notna(), None)  # None, not NaN, for no text
    return Trajectory(table=table.astype({"token_start": "Int64", "token_end": "Int64"}), stop_reason=text_of(stop_reason), notes=notes)


# A turn's span of the response's tokens, (None, None) when it has none or it is not two integers, start ≤ end.
def span_of(turn: Turn, number: int, notes: list) -> tuple:
    start, end = turn.token_start, turn.token_end
    if start is None and end is None:
        return None, None
    if not (type(start) is int and type(end) is int and 0 <= start <= end < 2**53):
        written = ", ".join(json.dumps(value[:20]) if isinstance(value, str) else str(value)[:20] for value in (start, end))  # "1": text, not 1
        notes.append(f"turn {number}: token span [{written}) is not two integers 0 ≤ start ≤ end; no numbers")
        return None, None
    return start, end


# A tool call's arguments as the table shows them: JSON, pretty, keys as written; a string as written (a call whose
# arguments are not valid JSON keeps its text).
def arguments_text(arguments) -> str | None:
    if arguments is None:
        return None
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return arguments
    try:
        return json.dumps(arguments, ensure_ascii=False, indent=1)
    except (ValueError, RecursionError):  # nested too deep to write out again
        return text_of(str(arguments)[:10_000])


def text_of(value) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


# A turn's reward or advantage: a number, or one written as text ("0.5", "1e400"); NaN for anything else.
def number_of(value) -> float:
    value = text_number(value) if isinstance(value, str) else value
    return as_float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else np.nan  # 10**400, 1e400: inf


# Each turn's numbers from the sample's per-token values over its span (NaN without tokens or a span; a span past the
# tokens gets numbers over the part that fits, and a note): tokens, mean logp, mean KL under `estimator`, mean
# entropy, mean |Δ| of the sampler-trainer mismatch, over the tokens that have each value (a tool's have none). An
# infinite value counts, as in the sample's own means: a token of probability 0 makes its turn's mean logp -inf (one of
# +inf and one of -inf: NaN).
def numbered(trajectory: Trajectory, tokens: SampleTokens | None, estimator: str = "k3") -> Trajectory:
    table, notes = trajectory.table.copy(), list(trajectory.notes)
    for column in NUMBER_COLUMNS[:5]:
        table[column] = np.nan
    if tokens is None:
        return Trajectory(table=table, stop_reason=trajectory.stop_reason, notes=notes)
    length = len(tokens.logprobs)
    per_token = {"mean_logp": tokens.logprobs}
    if tokens.ref_logprobs is not None:
        per_token["mean_kl"] = kl_per_token(tokens.logprobs - tokens.ref_logprobs, estimator)
    if tokens.entropies is not None:
        per_token["mean_entropy"] = tokens.entropies
    if tokens.sampler_logprobs is not None:
        per_token["mean_abs_mismatch"] = np.abs(tokens.logprobs - tokens.sampler_logprobs)
    spanned = table["token_start"].notna().to_numpy()
    raw_starts = [int(value) if ok else 0 for value, ok in zip(table["token_start"].tolist(), spanned)]  # exact ints: < 2**53
    raw_ends = [int(value) if ok else 0 for value, ok in zip(table["token_end"].tolist(), spanned)]
    past = [(turn, start, end) for turn, start, end, ok in zip(table["turn"].tolist(), raw_starts, raw_ends, spanned) if ok and end > length]
    for turn, start, end in list(dict.fromkeys(past))[:NOTED_TURNS]:
        notes.append(f"turn {turn}: token span [{start}, {end}) goes past the response's {length} tokens; numbers over the tokens it has")
    if len(past) > NOTED_TURNS:
        notes.append(f"{len(past) - NOTED_TURNS} more turns' spans go past the response's tokens")
    starts = np.minimum(np.asarray(raw_starts, dtype=np.int64), length)
    ends = np.minimum(np.asarray(raw_ends, dtype=np.int64), length)
    table["tokens"] = np.where(spanned, np.maximum(ends - starts, 0), np.nan)

    def over_spans(values: np.ndarray) -> np.ndarray:  # each span's sum from prefix sums: one pass however many turns
        sums = np.concatenate([[0], np.cumsum(values)])
        return sums[ends] - sums[starts]

    for column, values in per_token.items():
        count, above, below = (over_spans(kind) for kind in (~np.isnan(values), values == np.inf, values == -np.inf))
        with np.errstate(invalid="ignore", divide="ignore"):
            means = over_spans(np.where(np.isfinite(values), values, 0.0)) / count
        means = np.where(above > 0, np.where(below > 0, np.nan, np.inf), np.where(below > 0, -np.inf, means))
        table[column] = np.where(spanned & (count > 0), means, np.nan)
    return Trajectory(table=table, stop_reason=trajectory.stop_reason, notes=notes)


# Every tool call and tool result of the samples (a snapshot's rows: path, offset, length, step, line), a row each:
# `sample` (its position in the samples given), step, kind ("call" or "result"), tool (name), error (a result's); and the lines
# that could not be read back.
@dataclass(frozen=True)
class ToolEvents:
    table: pd.DataFrame
    problems: list[str]


# Turns whose span goes past the tokens named one by one in a trajectory's notes; the rest are counted.
NOTED_TURNS = 20


def read_tool_events(samples: pd.DataFrame) -> ToolEvents:
    rows, problems = [], []
    for position, raw, step, place in lines_read_back(samples):
        if b'"turns"' not in raw:
            continue
        try:
            record, _ = decoded_turns(raw)
            ensure_same_step(record, step)
        except BadLine as error:
            problems.append(f"{place}: {error}")
            continue
        rows += [(position, step, *event) for event in tool_events(record.turns or [])]
    return ToolEvents(table=pd.DataFrame(rows, columns=["sample", "step", "kind", "tool", "error"]), problems=problems)


# A trajectory's tool calls and results, as (kind, tool name, error), straight from its turns (no table: a run's
# pass reads every line with turns).
def tool_events(turns: list[Turn | None]) -> list[tuple]:
    events = []
    for turn in turns:
        if turn is None:
            continue
        if turn.role == "tool":
            events.append(("result", shortened_name(turn.tool_name), text_of(turn.error) if has_error(turn.error) else None))
        if isinstance(turn.tool_calls, list):  # a tool's turn that calls on is counted as the index counts it
            for call in turn.tool_calls:
                function = call.get("function") if isinstance(call, dict) and isinstance(call.get("function"), dict) else call
                events.append(("call", shortened_name(function.get("name") if isinstance(function, dict) else None), None))
    return events


def shortened_name(name) -> str:
    return (text_of(name) or "?")[:TOOL_NAME_CHARACTERS]


TOOL_NAME_CHARACTERS = 64
# Tool names with a series of their own in Step-Tools, the most called first; a policy that invents names (each a
# call TRL answers "not found") would otherwise add two series per name.
TOOLS_SHOWN = 20


# Per step (of the samples with turns): turns, tool calls and tool errors per sample and the error rate (index
# numbers); per tool name (from the tool events): its calls per sample and its success rate (results without an error
# over results), columns "calls per sample: <tool>" and "success rate: <tool>".
TOOL_SERIES = {
    "turns per sample": "turns of a trajectory, prompt's included, per sample with turns",
    "tool calls per sample": "tool calls the policy made per sample with turns",
    "tool error rate": "tool results that were errors, over all tool results",
}


def tools_by_step(samples: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    with_turns = samples[samples["turns"] > 0]
    if with_turns.empty:
        return pd.DataFrame(columns=list(TOOL_SERIES))
    grouped = with_turns.groupby("step")
    result = pd.DataFrame({"turns per sample": grouped["turns"].mean(), "tool calls per sample": grouped["tool_calls"].mean()})
    results = events[events["kind"] == "result"]
    counts = results.groupby("step").agg(results=("kind", "size"), errors=("error", lambda errors: errors.notna().sum()))
    result["tool error rate"] = (counts["errors"] / counts["results"]).reindex(result.index)
    sizes = grouped.size()
    calls = events[events["kind"] == "call"]
    shown = calls["tool"].value_counts().index[:TOOLS_SHOWN].tolist()
    call_counts = calls[calls["tool"].isin(shown)].groupby(["step", "tool"]).size().unstack(fill_value=0)
    answered = results[results["tool"].isin(shown)].assign(ok=lambda table: table["error"].isna())
    success = answered.groupby(["step", "tool"])["ok"].mean().unstack()
    for tool in shown:
        counts = call_counts[tool] if tool in call_counts else pd.Series(dtype=float)
        result[f"calls per sample: {tool}"] = (counts.reindex(result.index, fill_value=0) / sizes).astype(float)
        result[f"success rate: {tool}"] = (success[tool] if tool in success else pd.Series(dtype=float)).reindex(result.index)
    return result


# Per tool name over the samples: calls, results, errors and success rate, most called first.
def tool_summary(events: pd.DataFrame) -> pd.DataFrame:
    calls = events[events["kind"] == "call"].groupby("tool").size().rename("calls")
    results = events[events["kind"] == "result"].groupby("tool")["error"].agg(results="size", errors=lambda errors: errors.notna().sum())
    table = pd.concat([calls, results], axis=1).fillna(0).astype(int)
    table["success rate"] = np.where(table["results"] > 0, 1 - table["errors"] / table["results"].where(table["results"] > 0, 1), np.nan)
    return table.sort_values("calls", ascending=False, kind="stable").reset_index(names="tool")
