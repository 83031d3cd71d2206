"""What the agent formats share (prime-rl's verifiers traces, rLLM's episodes, ROLL's agentic dumps, TRL's tool
loops): chat messages as the board's turns (rollout_logger/metadata.py, above TURN_ROLES: {"role", "text",
"token_start"/"token_end", "tool_calls": [{"name", "arguments", "id"}], "tool_name", "tool_call_id", "error", "reward",
"advantage"}), and the notes a conversion gives the load report about what it could not take as it was (Notes: one per
line, with the line's number in the converted file).

A message is OpenAI's chat format (content a text or a list of parts; an assistant's tool_calls as {"id", "type",
"function": {"name", "arguments"}}; a tool's tool_call_id and name; an assistant's reasoning as reasoning_content or
reasoning, or a thinking part) or verifiers' (tool_calls as {"id", "name", "arguments"}). Tool-call arguments are a
JSON object, or the text as written when it is not valid JSON (a note); a role the board does not know is shown as an
environment turn (a note); a line keeps at most MAX_TURNS turns (a note counts the rest)."""
import json
import math

from rollout_logger.metadata import REASONING_KEYS, TURN_ROLES, thought, with_reasoning

MAX_TURNS = 1000  # turns kept per line: the page shows a trajectory turn by turn, and a runaway agent can make 10,000s


# Roles other trainers write, as the board's.
ROLE_ALIASES = {"developer": "system", "function": "tool", "ipython": "tool", "observation": "environment", "env": "environment", "human": "user", "model": "assistant"}


# What one line's conversion could not take as it was: reasons, in order, made one note of the load report.
class LineNotes:
    def __init__(self):
        self.reasons: list[str] = []
        self.counts: dict[str, int] = {}

    def add(self, reason: str):
        if reason not in self.counts:
            self.reasons.append(reason)
        self.counts[reason] = self.counts.get(reason, 0) + 1

    def text(self) -> str:
        return "; ".join(reason if self.counts[reason] == 1 else f"{reason} ({self.counts[reason]}×)" for reason in self.reasons)


# The notes of a converted file: (line number in the conversion, reason), as RunFormat.convert returns them beside
# the lines.
class Notes:
    def __init__(self):
        self.rows: list[tuple[int, str]] = []

    def add(self, line: int, notes: "LineNotes | str"):
        text = notes if isinstance(notes, str) else notes.text()
        if text:
            self.rows.append((line, text))


# A message's content as text: a string as it is, a list of parts joined (a thinking part as <think>...</think>, an
# image part as [image]), else JSON.
def content_text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict) and part.get("type") == "thinking" and isinstance(part.get("thinking"), str):  # Tinker's renderers' ThinkingPart
                parts.append(thought(part["thinking"]))
            elif isinstance(part, dict) and part.get("type") in ("image_url", "image", "input_image"):
                parts.append("[image]")
            else:
                parts.append(json.dumps(part, ensure_ascii=False, default=str))
        return "".join(parts)
    return json.dumps(content, ensure_ascii=False, default=str)


def board_role(role, notes: LineNotes) -> str:
    if role in TURN_ROLES:
        return role
    alias = ROLE_ALIASES.get(role) if isinstance(role, str) else None
    if alias:
        return alias
    notes.add(f"unknown role {str(role)[:40]!r} shown as an environment turn")
    return "environment"


# Tool-call arguments as a JSON object, or the text as written (a note) when they are not valid JSON.
def parsed_arguments(arguments, notes: LineNotes):
    if not isinstance(arguments, str):
        return arguments
    try:
        return json.loads(arguments)
    except (ValueError, RecursionError):
        notes.add("tool-call arguments that are not valid JSON kept as text")
        return arguments


# An assistant message's tool calls as the board's [{"name", "arguments", "id"}] (None: it makes none).
def tool_calls(raw, notes: LineNotes) -> list | None:
    if not raw:
        return None
    if not isinstance(raw, list):
        notes.add("tool_calls that are not a list left out")
        return None
    calls = []
    for call in raw:
        if not isinstance(call, dict):
            notes.add("a tool call that is not an object left out")
            continue
        function = call.get("function") if isinstance(call.get("function"), dict) else call
        entry = {"name": function.get("name"), "arguments": parsed_arguments(function.get("arguments"), notes)}
        if call.get("id") is not None:
            entry["id"] = call["id"]
        calls.append(entry)
    return calls or None


# A chat message as a turn (no token span): role, text, and what applies of tool calls, the tool's name and call id.
def message_turn(message, notes: LineNotes) -> dict:
    if not isinstance(message, dict):
        notes.add("a message that is not an object shown as an environment turn")
        return {"role": "environment", "text": content_text(message)}
    turn = {"role": board_role(message.get("role"), notes), "text": message_text(message)}
    calls = tool_calls(message.get("tool_calls"), notes)
    if calls:
        turn["tool_calls"] = calls
    if turn["role"] == "tool":
        if isinstance(message.get("name"), str):
            turn["tool_name"] = message["name"]
        if message.get("tool_call_id") is not None:
            turn["tool_call_id"] = message["tool_call_id"]
    return turn


# At most MAX_TURNS turns, with a note counting the rest.
def kept_turns(turns: list, notes: LineNotes) -> list:
    if len(turns) > MAX_TURNS:
        notes.add(f"{len(turns)} turns: the first {MAX_TURNS} kept")
        return turns[:MAX_TURNS]
    return turns


# A finite float, or None (a missing value).
def finite(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


# A board line as JSON: UTF-8, or escaped where a text holds half a surrogate pair (the board shows it as �).
def encoded(line: dict) -> bytes:
    try:
        return json.dumps(line, ensure_ascii=False, default=str).encode()
    except UnicodeEncodeError:
        return json.dumps(line, default=str).encode()


# A conversation as a line's prompt or response: one plain message (its role, its text, its reasoning alone) as its
# text (message_text), anything else (tool calls, several messages, images) as the messages themselves.
def messages_value(messages: list):
    if len(messages) == 1 and is_plain_message(messages[0]):
        return message_text(messages[0])
    return messages


# Whether a message is a text and nothing else the board would lose as text: its content a string, text and thinking
# parts, or none (a sampler stopped mid-thought); besides it only its role and one reasoning text.
def is_plain_message(message) -> bool:
    if not isinstance(message, dict) or set(message) - {"role", "content", *REASONING_KEYS}:
        return False
    given = [message[key] for key in REASONING_KEYS if message.get(key) not in (None, "")]
    if not all(isinstance(reasoning, str) for reasoning in given) or len(set(given)) > 1:  # a summary object, or two texts
        return False
    content = message.get("content")
    if isinstance(content, list):
        return all(isinstance(part, dict) and part.get("type") in ("text", "thinking") and isinstance(part.get(part["type"]), str) for part in content)
    return content is None or isinstance(content, str)


# A message's text (content_text) with its reasoning before it (rollout_logger.metadata's with_reasoning: the logger's
# turns show it so too).
def message_text(message: dict) -> str:
    return with_reasoning(message, content_text(message.get("content")))



