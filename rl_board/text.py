"""Text as the page shows it, never as HTML from the data: names escaped for Markdown (markdown_literal) and kept on
one line (one_line), texts shortened and cleaned (pad tokens, system prompt, image placeholder runs), tokens made
readable (byte-level and SentencePiece bytes decoded, special tokens kept), invalid UTF-8 shown as U+FFFD; numbers
as shown (number_text, significant_format: docs/page.md#numbers-as-shown)."""
import codecs
import math
import re
from collections.abc import Callable

import numpy as np


# The largest finite |value| along the last axis (0 where there is none): full colour in the running text and
# in each heat map row.
def largest_magnitude(values: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(values), np.abs(values), 0.0).max(axis=-1, initial=0.0)


# A number in the page's text (a caption, a label, a hover) as `spec` writes it (".4g", "+.3g", ",.2f"), without a
# minus on a zero: -0.0 (a negated zero advantage) or a negative that rounds to zero ("-0.00" reads as a value that is
# not there). Python 3.11's "z" option does this; the board runs on 3.10 too.
def number_text(value: float, spec: str = ".4g") -> str:
    text = format(value, spec)
    if text[:2] == "-0" and math.isfinite(value) and not re.search("[1-9]", text.partition("e")[0]):
        return format(0.0, spec)
    return text


# A decoded JSON value's kind as JSON names it, for a message about a line or file that holds the wrong one: "a JSON
# null", not Python's "NoneType".
def json_kind(value) -> str:
    return {type(None): "null", bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object"}.get(type(value), type(value).__name__)


# The format (printf's, as Streamlit's table columns take it: sprintf-js in the browser) that shows each of a column's
# numbers with `digits` significant digits: %g, which writes 3e-8, -1.23457e-7, 0.000123457, 0.999988, -12.3457, 2
# (never a row of zeros for a small value, nor -0 for a zero). A column with a value of 10^digits or more in size is
# in exponent form instead (4.85165e+8): JavaScript's %g writes 123456789 as 123457000, digits that were never there.
def significant_format(values, digits: int = 6) -> str:
    values = np.asarray(values, dtype=float)
    sizes = np.abs(values[np.isfinite(values)])
    return f"%.{digits}g" if not len(sizes) or sizes.max() < 10**digits else f"%.{digits - 1}e"


# GPT-2's byte-to-character table, inverted: printable bytes stand for themselves, the others (space, newline...)
# for the characters from U+0100 on, in byte order.
def byte_of_character() -> dict[str, int]:
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [byte for byte in range(256) if byte not in printable]
    return {chr(byte): byte for byte in printable} | {chr(256 + position): byte for position, byte in enumerate(others)}


def undecodable_bytes(error: UnicodeDecodeError) -> tuple[str, int]:
    return "".join(f"⟨0x{byte:02X}⟩" for byte in error.object[error.start : error.end]), error.end


BYTE_OF_CHARACTER = byte_of_character()


SENTENCEPIECE_BYTE = re.compile(r"<0x[0-9A-Fa-f]{2}>")


BYTE_LEVEL_WHITESPACE = re.compile("[\u0120\u010a\u0109]")  # Ġ Ċ ĉ: space, newline and tab in the byte table


CONTROL_CHARACTER = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # no text's own: shown as ⟨0x..⟩


UNDECODABLE = re.compile("⟨0x[0-9A-F]{2}⟩")


UNDECODABLE_BYTES = "rl_logging_board.undecodable"


codecs.register_error(UNDECODABLE_BYTES, undecodable_bytes)


# A model's image (or video) placeholder token, which its processor repeats once per image patch: <image>,
# <|image_pad|>, <image_soft_token>, <IMG_CONTEXT>, <|video_pad|>... A run of one is shown as one marker with its count.
IMAGE_PLACEHOLDER_NAME = r"<\|?[A-Za-z_]{0,24}(?:image|img|IMG|video|vision|patch)[A-Za-z_]{0,24}\|?>"  # bounded: linear time


IMAGE_PLACEHOLDER = re.compile(IMAGE_PLACEHOLDER_NAME)


IMAGE_PLACEHOLDER_RUN = re.compile(f"({IMAGE_PLACEHOLDER_NAME})\\1+")


# Where GitHub-flavoured Markdown would start a link of its own: "://", "www." and "@".
AUTOLINK_START = re.compile(r"(?<=:)(?=//)|(?i:(?<=www))(?=\.)|(?=@)")

# What Streamlit's Markdown replaces in its text after the escapes are read: :material/<name>: and :streamlit: become
# icons (a name like :material/verified: drew a check mark), and ->, <-, <->, --, >=, <=, ~= between spaces arrows and
# signs. An invisible space after the first character keeps each as written.
STREAMLIT_REPLACED = re.compile(r":(?=material/|streamlit:)|(?<!\S)[-<>~](?=(?:->|[->=])(?!\S))")


# Characters that would take a name off its line or reorder it: line breaks (a newline and "===" under a caption made
# it a heading), the other control characters and the bidirectional marks and overrides.
NAME_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


VISIBLE_CONTROL = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


# A name from the data on one line, each of those characters shown as its escape (a newline as \n), as chart titles,
# options and labels show it: readable as written, and nothing in it can start a line of Markdown. A chart whose axis
# title held a line break was never drawn (Vega-Lite writes titles into expressions of the spec it compiles).
def one_line(text) -> str:
    return NAME_CONTROL.sub(lambda match: VISIBLE_CONTROL.get(match.group(), f"\\u{ord(match.group()):04x}"), valid_text(str(text)))


# Each option's label, where names from the data can show alike (a line break and a written "\n" both show as \n, 1 and
# "1" as 1): Streamlit's select widgets tell options apart by their labels, so of two alike the second could not be
# chosen. A label already taken gets a number: "a\nb", "a\nb (2)".
def distinct_labels(options, label=one_line) -> Callable[[object], str]:
    labels, taken = {}, set()
    for option in options:
        if (type(option), option) in labels:  # True and 1 are equal, and alike as keys
            continue
        shown = text = label(option)
        count = 1
        while text in taken:
            count += 1
            text = f"{shown} ({count})"
        taken.add(text)
        labels[type(option), option] = text
    return lambda option: labels.get((type(option), option)) or label(option)


# A list item or heading the text would start ("- x", "+ x", "1. x"): its first character escaped.
LINE_START = re.compile(r"^(\s*)([-+]|\d{1,9}(?=\.))(?=\.?(\s|$))")


# Names from the data (group ids, reward functions, metric keys, model, file and folder names) in a caption, warning,
# view, label or metric: on one line (one_line), with the Markdown characters of links, images, code, emphasis, maths,
# HTML entities and Streamlit's :colour[...] escaped, so a name like ![x](http://host/x) or fn&amp;1 shows as written and
# loads nothing. GitHub's autolinks (http://..., www.x.org, a@x.org) and Streamlit's icons and arrows (STREAMLIT_REPLACED)
# ignore escapes: an invisible space breaks each.
def markdown_literal(text) -> str:
    escaped = re.sub(r"([\\`*_{}\[\]()<>#!|~$:&])", r"\\\1", STREAMLIT_REPLACED.sub(lambda match: match.group() + "\u200b", one_line(text)))
    escaped = LINE_START.sub(lambda match: match.group(1) + (match.group(2) + "\\" if match.group(2)[0].isdigit() else "\\" + match.group(2)), escaped)
    return AUTOLINK_START.sub("\u200b", escaped)


# A text from the data inside a Markdown element (an error box) as written, every line and space: a fenced code block
# whose fence is longer than any run of backticks in the text, so nothing in it can close the block.
def markdown_code_block(text) -> str:
    text = valid_text(str(text))
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall("`+", text)), default=0))
    return f"{fence}\n{text}\n{fence}"


# Table cells show the start of a text (the samples pair below shows all of it); sending whole
# responses for every row would cost more than the rest of the page.
def shorten(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# The system turn of the common chat templates, as (its start, its end): ChatML (Qwen and many others) and Llama 3.
# Drop System Prompt looks for one at the start of a prompt (after Llama 3's <|begin_of_text|>) where the prompt has no
# End Token of System Prompt.
CHAT_TEMPLATE_SYSTEM_TURNS = (("<|im_start|>system\n", "<|im_end|>"), ("<|start_header_id|>system<|end_header_id|>", "<|eot_id|>"))
BEGIN_OF_TEXT = "<|begin_of_text|>"


# Where a prompt's system prompt ends: after the End Token of System Prompt (the original's way: all before it goes),
# else after a chat template's system turn at the prompt's start; None if it has neither. Plain searches, so a long
# prompt costs time in proportion to its length.
def system_prompt_span(text: str, system_prompt_end: str) -> tuple[int, int] | None:
    if system_prompt_end and system_prompt_end in text:
        return 0, text.index(system_prompt_end) + len(system_prompt_end)
    start = len(text) - len(text.lstrip())
    start += len(BEGIN_OF_TEXT) if text.startswith(BEGIN_OF_TEXT, start) else 0
    for opening, closing in CHAT_TEMPLATE_SYSTEM_TURNS:
        if text.startswith(opening, start):
            stop = text.find(closing, start + len(opening))
            if stop >= 0:
                stop += len(closing)
                return 0, stop + text.startswith("\n", stop)  # with the line break that ends the turn
    return None


# Display text: optionally cut the system prompt and remove pad tokens; a run of an image placeholder token as one
# marker, [<image> × 16].
def clean_text(text: str, pad_token: str | None = None, system_prompt_end: str | None = None) -> str:
    span = system_prompt_span(text, system_prompt_end) if system_prompt_end is not None else None
    if span:
        text = text[span[1]:]
    if pad_token:
        text = text.replace(pad_token, "")
    return IMAGE_PLACEHOLDER_RUN.sub(lambda run: f"[{run.group(1)} × {len(run.group()) // len(run.group(1))}]", text)


# Text for st.text, which dedents and strips what it shows: a zero-width space at each end of a text that starts or
# ends with whitespace keeps its indentation and outer newlines as written (a code answer's, say).
def as_written(text: str) -> str:
    return f"\u200b{text}\u200b" if text[:1].isspace() or text[-1:].isspace() else text


# A newline or tab token would be an empty-looking label in the table and the heat map.
def visible_whitespace(token: str) -> str:
    return token.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


# A token as the token table and the heat map label it: its place in the response and its text.
def token_label(position: int, token: str) -> str:
    return f"{position} - {visible_whitespace(token)}"


# Tokens as the text they stand for. What tokenizer.convert_ids_to_tokens returns is often not text: byte-level BPE
# (GPT-2, Llama 3, Qwen) writes each byte as a printable character (a space as Ġ, é as Ã©, 你 as ä½ł), SentencePiece
# a space as ▁ and a byte as <0xE4>. The scheme is decided once per response, from its ordinary tokens (special ones
# such as <|im_end|> or <PAD> stay as written): SentencePiece when one has ▁ or is a byte, else byte-level when every
# character is in the byte table. Each token's bytes are then decoded in turn, a character shown on the token that
# completes it (a CJK character is often 2-3 tokens; the others show as empty), and bytes that are no character (one
# cut at truncation, or sampled early in training) or a control character as ⟨0xB6⟩ on the token where that shows.
# Text whose letters only happen to be in the byte table ("być": ć is byte 0x07) is shown as written: as bytes it
# holds control characters or invalid bytes, and nothing proves the byte table (a space or newline written as Ġ or Ċ,
# or a character of 2-4 bytes).
def readable_tokens(tokens: list[str]) -> list[str]:
    ordinary = [token for token in tokens if not is_special_token(token)]
    if any("▁" in token or SENTENCEPIECE_BYTE.fullmatch(token) for token in ordinary):
        to_bytes = sentencepiece_bytes
    elif ordinary and all(character in BYTE_OF_CHARACTER for token in ordinary for character in token):
        to_bytes = byte_level_bytes
    else:
        return tokens  # text already (a raw space, CJK...), or no ordinary token
    texts = decode_token_bytes([None if is_special_token(token) else to_bytes(token) for token in tokens], tokens)
    decoded = "".join(texts)
    if to_bytes is byte_level_bytes and (CONTROL_CHARACTER.search(decoded) or UNDECODABLE.search(decoded)):
        proof = any(BYTE_LEVEL_WHITESPACE.search(token) for token in ordinary) or not UNDECODABLE.sub("", decoded).isascii()
        if not proof:
            return tokens
    return [CONTROL_CHARACTER.sub(lambda match: f"⟨0x{ord(match.group()):02X}⟩", text) for text in texts]


# Each token's bytes decoded in order (None: a special token, kept as written); a character shows on the token that
# completes it, and bytes that cannot be one as ⟨0x..⟩ on the token where that is known.
def decode_token_bytes(byte_tokens: list[bytes | None], tokens: list[str]) -> list[str]:
    decoder = codecs.getincrementaldecoder("utf-8")(errors=UNDECODABLE_BYTES)
    texts = []
    for data, token in zip(byte_tokens, tokens):
        if data is None:  # a special token ends any character cut before it
            if texts:
                texts[-1] += decoder.decode(b"", final=True)
            decoder.reset()
            texts.append(token)
        else:
            texts.append(decoder.decode(data))
    if texts:
        texts[-1] += decoder.decode(b"", final=True)
    return texts


def is_special_token(token: str) -> bool:
    return len(token) > 2 and token[0] == "<" and token[-1] == ">" and not SENTENCEPIECE_BYTE.fullmatch(token)


def sentencepiece_bytes(token: str) -> bytes:
    if SENTENCEPIECE_BYTE.fullmatch(token):
        return bytes([int(token[3:5], 16)])
    return token.replace("▁", " ").encode("utf-8")


def byte_level_bytes(token: str) -> bytes:
    return bytes(BYTE_OF_CHARACTER[character] for character in token)


# Text UTF-8 can carry: a lone surrogate (valid JSON: "\ud83d", e.g. an emoji cut in half) or a file name's undecodable
# byte becomes �. Tables, the page and the cache all need UTF-8, and would fail on the whole run for one such line.
def valid_text(text: str) -> str:
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
