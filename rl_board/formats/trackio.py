"""trackio's project databases: trackio (pip trackio 0.43.0; gradio-app/trackio, whose sqlite_storage.py and trace.py
at 2a027522c487b16755d1cdf12e1ae45a9b6eb15a, 0.36.0, hold the same tables without the spans column) keeps each
project in <TRACKIO_DIR>/<project>.db (TRACKIO_DIR: $HF_HOME/trackio unless set; SQLiteStorage.init_db in
trackio/sqlite_storage.py), beside <project>.lock and the folders traces/ (each trace again as a session file for
the Hub's viewer), media/, artifacts/ and inbox/. Every run of the project is in it: the metrics table (one row per
trackio.log: run_id, run_name, step, metrics as JSON) is the run's training history (reading/history.py), and the
traces table (trackio >= 0.26; 0.25 kept traces in metrics rows, not read here) one row per trackio.Trace logged
(trackio/trace.py: OpenAI-style messages, a metadata dict, and from 0.37 spans; _split_trace_metrics in sqlite_storage.py): id, run_id, run_name, step, key (the name it
was logged under), trace_index, messages, metadata, spans, as orjson JSON with non-finite numbers as "NaN",
"Infinity" strings. Who writes traces: TRL's async GRPO (log_rollout_traces in
trl/experimental/async_grpo/async_grpo_trainer.py, huggingface/trl @ f2cd57710ae345ea6428ae95363267fcf38a3dc8) logs
up to 16 rollouts per model version as {"rollouts": [Trace]} at step = the policy version: messages the prompt and the
completion (assistant turns with tool_calls whose arguments are objects, tool results {"role": "tool", "name",
"content"} whose content is str({"error": ...}) when the tool raised: async_rollout_worker.py), metadata reward,
reward_std, rewards/<function>, advantage, group_id, model_version, prompt_tokens, completion_tokens and
tools/call_frequency, tools/failure_frequency. verl (volcengine/verl @ b178a3cd56f58b2d502255daba591e92833930a7) logs
only metrics to trackio (verl/utils/tracking.py): its rollout traces go to weave or mlflow (verl/utils/rollout_trace.py).

A folder holding <name>.db files (TRACKIO_DIR itself, or a folder of copies) is one run; its traces/, media/,
artifacts/ and inbox/ are that run's. Every database of it, and every trackio run of each, is in that board run, told
apart by the fields trackio_project (the database's name) and trackio_run (the run's name; a name two runs share gets
the start of its id after it): both are facets. A trace becomes a line, in the order they were logged: turns (each
message a turn, as rollout_logger/metadata.py says), prompt (the leading system and user messages) and response (the
rest) as text, step, reward, advantage, rewards_per_func (rewards/<name>), group_id (the metadata's, else the prompt,
within its run), stop_reason (the metadata's stop_reason or finish_reason), truncated, policy_version (the metadata's,
else TRL's model_version: with step the version when the trainer took the sample, step - policy_version is TRL's
staleness), and the other metadata keys as fields. No tokens: a trace holds text. Bad input is counted in the load report, line by line where a trace has it: a
message with a role the board does not know (an environment turn), tool arguments that are not valid JSON (kept as
written), a trace of more than MAX_TURNS messages (the first MAX_TURNS are turns), a trace whose messages are not JSON
(left out), a database that is not SQLite or not trackio's (not read), one locked by a writer's commit (read at the
next refresh). On object storage the databases are not read (SQLite needs a file): the load report says so."""
import ast
import json
import math
import re
import sqlite3
import threading
import time
from dataclasses import dataclass

import rl_board.reading.trackio_db as trackio_db
from rl_board.formats.agent_turns import with_reasoning
from rl_board.formats.base import Folder, RunFormat, RunLayout, group_of_prompt
from rl_board.reading.storage import FileStatus, is_remote
from rl_board.text import shorten, valid_text
from rollout_logger.metadata import FORMAT_KEYS

NAME = "trackio databases (<project>.db: traces, metrics)"


DATABASE = re.compile(r".+\.db", re.DOTALL)


# TRACKIO_DIR holds <project>.db and <project>.lock, and trackio's own folders: all of them this run's.
LAYOUT = RunLayout(files=DATABASE, parts=re.compile(r"traces|media|artifacts|inbox"))


CONVERSION = 2  # the conversion's version: a change makes every database's conversion again


MAX_TURNS = 2000  # turns of one trace: a longer one keeps its first MAX_TURNS (its text keeps every message)


PROBLEM_ROWS = 20  # per database and kind of problem; the others are counted in one more row


REMOTE = (
    "trackio's databases are SQLite files, which are read on disk only: this run is on object storage, so its "
    "traces and metrics are not read. Copy the folder to disk (e.g. aws s3 sync) and open the copy."
)


# --------------------------------------------------------------------------------------------- the run's files


# A database read: its status when read (the conversion's stamp), its lines (until converted), its load-report rows.
@dataclass
class Parsed:
    status: FileStatus
    lines: bytes | None
    problems: tuple
    made: float


parsed: dict[str, Parsed] = {}  # by database path: the last read of each
parsed_lock = threading.Lock()


KEPT_LINES_S = 60.0  # lines read by recognise and not yet converted are dropped after this (converted: read again)


# A folder with <name>.db files in it. If none of them is trackio's and the folder has JSONL files, it is not taken
# (another format reads those); else every database is named in the load report, read or not.
def recognise(folder: Folder) -> tuple[dict[str, FileStatus], RunFormat] | None:
    databases = [entry for entry in folder.files if DATABASE.fullmatch(entry.name)]
    if not databases:
        return None
    if is_remote(folder.run_dir):
        return {}, RunFormat(NAME, problems=(("", 0, "skipped", REMOTE),))
    sources, contexts, problems, trackio = {}, {}, [], False
    for entry in databases:
        name = valid_text(entry.name)
        result = database(entry.path, name)
        if isinstance(result, str):
            problems.append((name, 0, "skipped", result))
            continue
        trackio = True
        if result is None:
            problems.append((name, 0, "note", "no traces in it (trackio.Trace was never logged): its metrics are the run's Training metrics"))
            continue
        sources[entry.path] = result.status
        contexts[entry.path] = (name, {"status": list(result.status)})
        problems += result.problems
    if not trackio and folder.jsonl:
        return None
    if folder.jsonl:
        problems.append(("", 0, "note", f"{len(folder.jsonl)} .jsonl file(s) beside trackio's databases are not read"))
    return sources, RunFormat(NAME, trace_lines, (CONVERSION,), tuple(problems), reads_path=True, file_contexts=contexts)


# A database as read now (from the last read while it is unchanged); None when it is trackio's without traces; a
# reason when it is not read.
def database(path: str, name: str) -> Parsed | None | str:
    try:
        with trackio_db.read(path) as connection:
            available = trackio_db.tables(connection)
            if not available & {"metrics", "traces"}:
                return "not trackio's database (no metrics or traces table): not read"
            if "traces" not in available:
                return None
            status = trackio_db.content_status(path, connection, True)
            with parsed_lock:
                known = parsed.get(path)
                if known is not None and known.status == status:
                    if known.lines is not None and time.monotonic() - known.made > KEPT_LINES_S:
                        known.lines = None
                    return known
            rows, labels = trace_rows(connection)
    except sqlite3.OperationalError as error:
        if "locked" in str(error) or "busy" in str(error):
            return "locked by a writer's commit: read again at the next refresh"
        return f"not readable as a SQLite database ({shorten(str(error), 200)}): not read"
    except (sqlite3.Error, OSError) as error:
        return f"not readable as a SQLite database ({shorten(str(error), 200)}): not read"
    lines, problems = converted(rows, labels, name)
    found = Parsed(status, lines, problems, time.monotonic())
    with parsed_lock:
        parsed[path] = found
    return found


# The traces table's rows in the order they were logged, read at once (the read transaction ends before they are
# converted), and the database's runs by name. Columns that an older trackio did not write are None.
def trace_rows(connection: sqlite3.Connection) -> tuple[list, dict]:
    names = trackio_db.columns(connection, "traces")
    if not {"step", "messages"} <= names:
        raise sqlite3.DatabaseError("its traces table has no step or messages column")
    wanted = [trackio_db.run_key_column(connection, "traces"), "step", "messages", "metadata", "spans", "key", "id"]
    selected = ", ".join(name if name in names else "NULL" for name in wanted)
    rows = connection.execute(f"SELECT {selected} FROM traces ORDER BY rowid").fetchall()
    return rows, trackio_db.run_names(connection, trackio_db.tables(connection))


# A database's conversion: its lines from the last read while the database is unchanged, else read again.
def trace_lines(path: str, context: tuple) -> bytes:
    _, extra = context
    status = FileStatus(*extra["status"])
    with parsed_lock:
        known = parsed.get(path)
        if known is not None and known.status == status and known.lines is not None:
            lines, known.lines = known.lines, None
            return lines
    with trackio_db.read(path) as connection:
        rows, labels = trace_rows(connection)
    return converted(rows, labels, path.rsplit("/", 1)[-1])[0]


# ------------------------------------------------------------------------------------------------ the traces


# The rows as the board's lines, one per trace (a trace left out is a row of the load report instead), and the load
# report's rows: per kind of problem, the lines it is on.
def converted(rows: list, labels: dict, name: str) -> tuple[bytes, tuple]:
    lines, problems, project = [], {}, name.removesuffix(".db")
    for run_key, step, messages, metadata, spans, key, trace_id in rows:
        run = labels.get(str(run_key), valid_text(str(run_key)))
        found = []
        try:
            line = trace_line(step, json.loads(messages), loaded(metadata, {}), loaded(spans, []), found)
        except (ValueError, TypeError, RecursionError) as error:
            reason = f"trace {shorten(valid_text(str(trace_id)), 120)} of run {run} at step {step}: not read ({shorten(valid_text(str(error)), 120)}); left out"
            problems.setdefault(("skipped", "trace not read"), []).append((0, reason))
            continue
        line |= {"trackio_project": project, "trackio_run": run}
        line |= {name: valid_text(str(value)) for name, value in (("trace_key", key), ("trace_id", trace_id)) if value is not None}
        line["group_id"] = f"{project}/{run}/{line['group_id']}" if "group_id" in line else group_of_prompt(f"{project}\n{run}\n{line['prompt']}")
        lines.append(encoded(line))
        for kind, reason in found:
            problems.setdefault(("note", kind), []).append((len(lines), reason))
    return b"\n".join(lines) + (b"\n" if lines else b""), problem_rows(problems, name)


def loaded(value, default):
    if value is None:
        return default
    return json.loads(value)


# The load report's rows: each problem's line, up to PROBLEM_ROWS of each kind, then how many more.
def problem_rows(problems: dict, file: str) -> tuple:
    rows = []
    for (kind, what), found in problems.items():
        rows += [(file, line, kind, reason) for line, reason in found[:PROBLEM_ROWS]]
        if len(found) > PROBLEM_ROWS:
            rows.append((file, 0, kind, f"{len(found) - PROBLEM_ROWS} more trace(s) with the same problem ({what})"))
    return tuple(rows)


# A line as JSON: UTF-8, or escaped where a text holds half a surrogate pair (the board shows it as �).
def encoded(line: dict) -> bytes:
    try:
        return json.dumps(line, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return json.dumps(line).encode()


# The board's roles for the roles messages are written with (lower-cased); another role is an environment turn.
ROLES = {
    "system": "system", "developer": "system",
    "user": "user", "human": "user",
    "assistant": "assistant", "model": "assistant",
    "tool": "tool", "function": "tool", "ipython": "tool", "toolresult": "tool", "tool_result": "tool",
    "environment": "environment", "env": "environment",
}


PROMPT_ROLES = ("system", "user")


OWN_KEYS = {"trackio_project", "trackio_run", "trace_key", "trace_id", "turns_left_out"}


METADATA_SUFFIX = " (metadata)"  # after a metadata key named like one of the line's


# stop_reason: the contract's words for the common spellings; any other word is kept as written.
STOP_WORDS = {"eos": "stop", "end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "max_length": "length", "max_tool_calls": "tool_limit"}


def trace_line(step, messages, metadata, spans, problems: list) -> dict:
    if isinstance(step, bool) or not isinstance(step, int):
        raise ValueError(f"its step {shorten(repr(step), 40)} is not an integer")
    if not isinstance(messages, list):
        raise ValueError("its messages are not a list")
    metadata = metadata if isinstance(metadata, dict) else {}
    spans = [span for span in spans if isinstance(span, dict)] if isinstance(spans, list) else []
    turns = message_turns(messages, spans, problems) if messages else span_turns(spans, problems)
    prompt_end = next((i for i, turn in enumerate(turns) if turn["role"] not in PROMPT_ROLES), len(turns))
    line = {"step": step, "prompt": transcript(turns[:prompt_end]), "response": transcript(turns[prompt_end:])}
    values = {str(key): trackio_db.number_of(value) for key, value in metadata.items()}
    used = set()  # the metadata keys the line's own keys were made from (one that is not usable stays a field)
    line["reward"] = finite(values.get("reward"))
    advantage = finite(values.get("advantage"))
    if advantage is not None:
        line["advantage"] = advantage
    used |= {key for key in ("reward", "advantage") if key in values and is_number(values[key])}
    scores = {key: value for key, value in values.items() if key.startswith("rewards/") and len(key) > len("rewards/") and is_number(value)}
    if scores:
        line["rewards_per_func"] = {key.removeprefix("rewards/"): finite(value) for key, value in scores.items()}
        used |= set(scores)
    group = values.get("group_id")
    if isinstance(group, (str, int)) and not isinstance(group, bool):
        line["group_id"] = valid_text(str(group))
        used.add("group_id")
    stop_key = "stop_reason" if "stop_reason" in values else "finish_reason"
    stop = values.get(stop_key)
    if isinstance(stop, str) and stop:
        line["stop_reason"] = STOP_WORDS.get(stop.lower(), shorten(valid_text(stop), 64))
        used.add(stop_key)
    version_key = "policy_version" if "policy_version" in values else "model_version"
    if values.get(version_key) is not None:  # TRL's version of the policy that sampled it; the index checks the value
        line["policy_version"] = values[version_key]
        used.add(version_key)
    truncated = values.get("truncated")
    if isinstance(truncated, bool):
        line["truncated"] = truncated
        used.add("truncated")
    elif line.get("stop_reason") == "length":
        line["truncated"] = True
    if len(turns) > MAX_TURNS:
        problems.append(("long trace", f"{len(turns)} messages: the first {MAX_TURNS} are its turns (its response text has them all)"))
        line["turns_left_out"] = len(turns) - MAX_TURNS
        turns = turns[:MAX_TURNS]
    line["turns"] = turns
    taken = FORMAT_KEYS | OWN_KEYS | set(line)
    for key, value in values.items():
        if key in used:
            continue
        key = valid_text(key)
        line[key + METADATA_SUFFIX if key in taken else key] = value
    return line


def is_number(value) -> bool:  # or null
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def finite(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


# Each message a turn. A tool's turn is matched to its tool span (by its tool_call_id, else the next in start order,
# as trackio's agent_sessions.py pairs them) for its name and whether it failed.
def message_turns(messages: list, spans: list, problems: list) -> list:
    tool_spans = sorted((span for span in spans if str(span.get("kind") or "").lower() == "tool"), key=span_start)
    by_id = {str(span.get("id")): index for index, span in enumerate(tool_spans) if span.get("id") is not None}
    names_by_call, turns, used_spans, next_span = {}, [], set(), 0
    for position, message in enumerate(messages):
        if not isinstance(message, dict):
            problems.append(("not a message", f"message {position} is a JSON {type(message).__name__}, not an object: an environment turn"))
            turns.append({"role": "environment", "text": content_text(message)})
            continue
        written = message.get("role")
        role = ROLES.get(str(written).lower()) if isinstance(written, str) else None
        if role is None:
            problems.append(("unknown role", f"message {position} has the role {shorten(valid_text(repr(written)), 40)}, not one the board knows: an environment turn"))
            role = "environment"
        turn = {"role": role, "text": message_text(message)}
        if role == "assistant":
            calls = tool_calls(message, position, problems)
            if calls:
                turn["tool_calls"] = calls
                names_by_call |= {call["id"]: call["name"] for call in calls if call["id"] is not None}
        elif role == "tool":
            call_id = message.get("tool_call_id", message.get("toolCallId"))
            call_id = None if call_id is None else valid_text(str(call_id))
            index = by_id.get(call_id) if call_id is not None else None
            if index is None or index in used_spans:
                while next_span in used_spans:
                    next_span += 1
                index = next_span if next_span < len(tool_spans) else None
            span = None if index is None else tool_spans[index]
            used_spans.add(index)
            name = message.get("name", message.get("tool_name"))
            name = valid_text(str(name)) if name is not None else names_by_call.get(call_id) or (span and span.get("name") and valid_text(str(span["name"])))
            if name:
                turn["tool_name"] = name
            if call_id is not None:
                turn["tool_call_id"] = call_id
            error = tool_error(message, span, turn["text"])
            if error is not None:
                turn["error"] = error
        turns.append(turn)
    return turns


def span_start(span: dict) -> str:
    start = span.get("start_time", span.get("startTime"))
    return "" if start is None else str(start)


# A trace of spans and no messages (trackio draws it from them): a generation span is an assistant turn (its
# output), a tool span an assistant turn calling the tool (its input) and the tool's turn (its output or error).
def span_turns(spans: list, problems: list) -> list:
    turns = []
    for span in sorted(spans, key=span_start):
        kind = str(span.get("kind") or "").lower()
        if kind == "generation":
            output = span.get("output")
            if isinstance(output, dict):
                output = next((output[key] for key in ("text", "content", "message", "output") if output.get(key) is not None), output)
            turns.append({"role": "assistant", "text": content_text(output)})
        elif kind == "tool":
            call_id = None if span.get("id") is None else valid_text(str(span["id"]))
            name = valid_text(str(span.get("name") or "tool"))
            turns.append({"role": "assistant", "text": "", "tool_calls": [{"name": name, "arguments": arguments(span.get("input"), problems, "a tool span's input"), "id": call_id}]})
            turn = {"role": "tool", "text": content_text(span.get("output")), "tool_name": name}
            if call_id is not None:
                turn["tool_call_id"] = call_id
            error = tool_error({}, span, turn["text"])
            if error is not None:
                turn["error"] = error
            turns.append(turn)
    return turns


# A message's content as text (a list of parts joined, trackio's media objects as [image: caption]), with its
# reasoning before it as every agent format shows it (agent_turns.with_reasoning).
def message_text(message: dict) -> str:
    return valid_text(with_reasoning(message, content_text(message.get("content"))))


# trackio's content_text (agent_sessions.py): a string, a list of parts (their texts, one a line), a media object as a
# placeholder, a part's text, content, output or value, else the JSON.
def content_text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, list):
        return "\n".join(part for part in (content_text(item) for item in value) if part)
    if isinstance(value, dict):
        kind = value.get("_type")
        if isinstance(kind, str) and kind.startswith("trackio."):
            caption = value.get("caption") or value.get("file_path") or ""
            return f"[{valid_text(kind.split('.', 1)[1])}{': ' + valid_text(str(caption)) if caption else ''}]"
        for key in ("text", "content", "output", "value"):
            if isinstance(value.get(key), str):
                return valid_text(value[key])
        return valid_text(json.dumps(value, ensure_ascii=False))
    return valid_text(str(value))


# An assistant message's OpenAI-style tool calls ({"id", "type", "function": {"name", "arguments"}}, or the function's
# keys on the call itself; a legacy function_call) as the turn's [{"name", "arguments", "id"}].
def tool_calls(message: dict, position: int, problems: list) -> list:
    calls = message.get("tool_calls", message.get("toolCalls"))
    if calls is None and isinstance(message.get("function_call"), dict):
        calls = [{"function": message["function_call"]}]
    if not calls:
        return []
    if not isinstance(calls, list):
        problems.append(("bad tool calls", f"message {position}: its tool_calls are not a list: left out"))
        return []
    found = []
    for call in calls:
        if not isinstance(call, dict):
            problems.append(("bad tool calls", f"message {position}: a tool call is not an object: left out"))
            continue
        function = call["function"] if isinstance(call.get("function"), dict) else call
        name = function.get("name")
        found.append({
            "name": None if name is None else valid_text(str(name)),
            "arguments": arguments(function.get("arguments"), problems, f"message {position}: the arguments of {shorten(valid_text(str(name)), 40)}"),
            "id": None if call.get("id") is None else valid_text(str(call["id"])),
        })
    return found


# Tool arguments: an object as it is; a string parsed when it is a JSON object, else kept as written (invalid JSON
# counted).
def arguments(value, problems: list, what: str):
    if not isinstance(value, str):
        return value
    try:
        parsed_value = json.loads(value)
    except (ValueError, RecursionError):
        problems.append(("invalid tool arguments", f"{what} are not valid JSON: kept as written"))
        return valid_text(value)
    return parsed_value if isinstance(parsed_value, dict) else valid_text(value)


FAILED = ("error", "failed")


ERROR_RESULT = re.compile(r"""\s*\{\s*["']error["']\s*:""")  # TRL's failed tool: str({"error": message})


ERROR_RESULT_CHARS = 1 << 16


# A tool turn's error: the message's or its span's error, or their failed status (trackio's _message_is_error and
# _span_is_error), or a result that is only {"error": message} (TRL's async GRPO writes str() of that dict); None
# when the tool did not fail.
def tool_error(message: dict, span: dict | None, text: str) -> str | None:
    for source in (message, span or {}):
        error = source.get("error")
        if error:
            return content_text(error) if not isinstance(error, bool) else "failed"
    for source in (message, span or {}):
        status = str(source.get("status") or "").lower()
        if source.get("is_error") is True or source.get("isError") is True or status in FAILED:
            return status if status in FAILED else "failed"
    if len(text) <= ERROR_RESULT_CHARS and ERROR_RESULT.match(text):
        for parse in (json.loads, ast.literal_eval):
            try:
                result = parse(text)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(result, dict) and list(result) == ["error"]:
                return content_text(result["error"])
    return None


# Turns as text: one turn of text alone is its text; others a transcript, a block per turn: [role] (a tool's
# [tool: name], with "error: ..." when it failed), its text, and an assistant's calls as "→ name(arguments)".
def transcript(turns: list) -> str:
    if len(turns) == 1 and set(turns[0]) == {"role", "text"}:
        return turns[0]["text"]
    blocks = []
    for turn in turns:
        header = f"[{turn['role']}" + (f": {turn['tool_name']}" if turn.get("tool_name") else "") + "]"
        if "error" in turn:
            header += f" error: {shorten(turn['error'], 200)}"
        parts = [header] + ([turn["text"]] if turn["text"] else [])
        for call in turn.get("tool_calls") or []:
            shown = call["arguments"] if isinstance(call["arguments"], str) else json.dumps(call["arguments"], ensure_ascii=False)
            parts.append(f"→ {call['name']}({shown})")
        blocks.append("\n".join(parts))
    return "\n\n".join(blocks)
