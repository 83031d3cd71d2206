"""Runs written for the search tests, with what a plain reading of their lines finds: needles at known lines (decoys
beside them), fields outside the format, the bundled runs copied, and the KL a line's numbers give."""

import json
import math
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from rl_board.reading.search import (
    RunTexts,
    SearchResult,
    search_pattern,
    search_samples,
)

# Each test loads runs it wrote under tmp_path (bundled runs are copied there first); conftest's private_index_cache
# sets RL_LOGGING_BOARD_CACHE to the test's own tmp folder for every load.
from tests.support import PROJECT
from tests.support.runs import load, sample, write_lines

RANK_FILES = ("rollout_data_rank_0.jsonl", "rollout_data_rank_1.jsonl")


STEPS = (1, 2, 3)


EVERYWHERE = "prompt and response"


# The needles: name -> (step, rank file, the line: prompt/response over a filler's, or the raw line as bytes). Decoys
# hold text a wrong search would find.
NEEDLES = {
    "haystack_mixed": (1, 0, {"response": "looking for the HayStack here"}),
    "haystack_lower": (2, 1, {"prompt": "find it", "response": "a haystack, in lower case"}),
    "special": (1, 1, {"response": "literally a+b (c)?[x] in the text"}),
    "special_as_regex": (3, 0, {"response": "aab cx matches the pattern read as a regex"}),
    "dollar": (2, 0, {"response": "it costs $1.50 today"}),
    "dollar_decoy": (2, 0, {"response": "it costs $1x50 today"}),
    "tool_call": (3, 1, {"response": '<tool_call>\n  {"name": "add", "arguments": {"a": 1}}\n</tool_call>'}),
    "tool_decoy": (1, 0, {"response": "<tool_call> no arguments </tool_call>"}),
    "cjk": (2, 1, {"response": "请写两句押韵诗句。"}),
    "cjk_decoy": (3, 1, {"response": "押韵 诗句, with a space between"}),
    "prompt_only": (3, 0, {"prompt": "a zebra crossing in the prompt", "response": "nothing to see"}),
    "newline": (1, 0, {"response": "first line\nsecond line"}),
    "anchors": (2, 0, {"prompt": "alpha prompt end", "response": "omega response here"}),
    "anchor_decoy": (3, 1, {"prompt": "beta\nalpha prompt end\nmore", "response": "text\nomega response here\nmore"}),
    "boundary": (1, 1, {"prompt": "the prompt ends with foo", "response": "bar begins the response"}),
    "chat": (2, 1, {"prompt": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "光速是多少？"}], "response": "about 3e8 m/s"}),
    "chat_compact": (3, 0, b'{"prompt":[{"role":"user","content":"\\u5149\\u901f, again"}],"response":"the same","reward":0.5,"step":3}'),
    "nan": (3, 1, b'{"prompt": "a prompt", "response": "a needle beside NaN", "reward": NaN, "step": 3}'),
    "escapes": (1, 1, b'{"prompt": "say \\"hi\\"\\nthen caf\\u00e9, \xe4\xb8\xad\xe6\x96\x87", "response": "quoted, with commas", "reward": 0.25, "step": 1}'),
    "long_cjk": (1, 0, {"response": "中" * 100 + "a针在这里" + "文" * 100}),
    "csv_hard": (2, 0, {"response": 'comma, "quoted", and\nnewline 中文, then a tab\tand more'}),
}


# (query, regex, match case, places, the needles it must find and nothing else)
QUERIES = [
    pytest.param("haystack", False, False, EVERYWHERE, {"haystack_mixed", "haystack_lower"}, id="substring-any-case"),
    pytest.param("HAYSTACK", False, False, EVERYWHERE, {"haystack_mixed", "haystack_lower"}, id="upper-query-any-case"),
    pytest.param("HayStack", False, True, EVERYWHERE, {"haystack_mixed"}, id="match-case"),
    pytest.param("haystack", False, True, EVERYWHERE, {"haystack_lower"}, id="match-case-lower"),
    pytest.param("a+b (c)?[x]", False, False, EVERYWHERE, {"special"}, id="special-characters-literally"),
    pytest.param("a+b (c)?[x]", True, False, EVERYWHERE, {"special_as_regex"}, id="same-text-as-regex"),
    pytest.param("$1.50", False, False, EVERYWHERE, {"dollar"}, id="dollar-literally"),
    pytest.param(r"tool_call>\s*\{", True, False, EVERYWHERE, {"tool_call"}, id="regex"),
    pytest.param("押韵诗句", False, False, EVERYWHERE, {"cjk"}, id="cjk"),
    pytest.param("zebra crossing", False, False, EVERYWHERE, {"prompt_only"}, id="prompt-match"),
    pytest.param("zebra crossing", False, False, "response", set(), id="prompt-match-not-in-responses"),
    pytest.param("zebra crossing", False, False, "prompt", {"prompt_only"}, id="prompt-match-in-prompts"),
    pytest.param("omega response", False, False, "prompt", set(), id="response-match-not-in-prompts"),
    pytest.param("line\nsecond", False, False, EVERYWHERE, {"newline"}, id="across-a-newline"),
    pytest.param(r"first line\s+second", True, False, EVERYWHERE, {"newline"}, id="regex-across-a-newline"),
    pytest.param("^omega", True, False, EVERYWHERE, {"anchors"}, id="caret-is-the-response-start"),
    pytest.param("end$", True, False, EVERYWHERE, {"anchors"}, id="dollar-is-the-prompt-end"),
    pytest.param("^alpha prompt end$", True, False, EVERYWHERE, {"anchors"}, id="both-anchors-not-per-line"),
    pytest.param("foo$", True, False, EVERYWHERE, {"boundary"}, id="prompt-end-alone"),
    pytest.param("^bar", True, False, EVERYWHERE, {"boundary"}, id="response-start-alone"),
    pytest.param("foobar", False, False, EVERYWHERE, set(), id="not-across-prompt-and-response"),
    pytest.param(r"foo\s*bar", True, False, EVERYWHERE, set(), id="regex-not-across-prompt-and-response"),
    pytest.param('"role": "user"', False, False, EVERYWHERE, {"chat", "chat_compact"}, id="chat-messages-as-json"),
    pytest.param("光速", False, False, "prompt", {"chat", "chat_compact"}, id="chat-messages-unescaped"),
    pytest.param("beside nan", False, False, EVERYWHERE, {"nan"}, id="line-with-nan"),
    pytest.param('say "hi"\nthen café', False, False, EVERYWHERE, {"escapes"}, id="escapes-unescaped"),
    pytest.param("CAFÉ, 中文", False, False, EVERYWHERE, {"escapes"}, id="non-ascii-any-case"),
]


# The needle run: two rank files, three steps, three fillers per file and step with the needles among them; rank 1
# starts with a bad line and a blank line, so line numbers are not sample positions. Returns name -> (file, line).
def write_needle_run(run_dir: Path) -> dict:
    positions = {}
    for rank, name in enumerate(RANK_FILES):
        lines = [b"not json\n", b"\n"] if rank == 1 else []
        for step in STEPS:
            fillers = [sample(step, reward=i / 4, prompt=f"question {step}.{rank}.{i}: write the next line", response=f"an ordinary answer, number {i}") for i in range(3)]
            lines.append(fillers[0])
            for needle, (needle_step, needle_rank, content) in NEEDLES.items():
                if (needle_step, needle_rank) == (step, rank):
                    lines.append(content + b"\n" if isinstance(content, bytes) else sample(step, reward=0.75, **content))
                    positions[needle] = (name, len(lines))
            lines += fillers[1:]
        write_lines(run_dir / name, lines)
    return positions


# Every physical line of the run's rank files by (file, line number from 1), as bytes.
def raw_lines(run_dir: Path) -> dict:
    return {(path.name, number): line for path in sorted(run_dir.glob("*.jsonl")) for number, line in enumerate(path.read_bytes().split(b"\n"), start=1)}


# The lines that are samples, parsed by json (NaN included), by (file, line).
def records(run_dir: Path) -> dict:
    parsed = {}
    for position, line in raw_lines(run_dir).items():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and {"prompt", "response", "reward", "step"} <= set(record):
            parsed[position] = record
    return parsed


def text_of(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


# The plain way: Python's re over each text alone, json-decoded.
def plain_search(lines: dict, query: str, regex: bool, match_case: bool, places: str) -> set:
    pattern = re.compile(query if regex else re.escape(query), 0 if match_case else re.IGNORECASE)
    names = [name for name in ("prompt", "response") if name in places]
    return {position for position, record in lines.items() if any(pattern.search(text_of(record[name])) for name in names)}


def positions_of(rows: pd.DataFrame) -> set:
    return {(Path(path).name, int(line)) for path, line in zip(rows["path"], rows["line"])}


def search(run, query: str, regex=False, match_case=False, places=EVERYWHERE) -> SearchResult:
    return search_samples(RunTexts(), run.samples, search_pattern(query, regex, match_case), places)


def found(run, *args, **kwargs) -> set:
    return positions_of(run.samples[search(run, *args, **kwargs).place > 0])


@pytest.fixture
def needle_run(tmp_path):
    run_dir = tmp_path / "runs" / "needles"
    return run_dir, write_needle_run(run_dir)


# A bundled run, copied under tmp_path so that nothing is written beside the original.
def bundled(tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(PROJECT / "rollout_samples" / name, tmp_path / "runs" / name))


# The queries also typed into the page (each one a rerun of it).
PAGE_QUERIES = {
    "substring-any-case", "match-case", "special-characters-literally", "same-text-as-regex", "regex", "cjk", "prompt-match",
    "prompt-match-not-in-responses", "not-across-prompt-and-response", "chat-messages-as-json",
}


# The fields run: numbers, booleans, a huge integer, short and long strings, a nested value, a key that is a number on
# some lines and a string on others, strings with 50 and 51 distinct values, and one line with 40 keys outside the format.
def write_fields_run(run_dir: Path) -> list[dict]:
    lines = []
    for step in (1, 2):
        for i in range(30):
            n = len(lines)
            lines.append(sample(
                step, reward=i / 10, flag=i % 2 == 0, count=i + step, score=i / 7 - 1, huge=2**70 + i, label="xyz"[i % 3],
                ident=f"id-{n}", fifty=f"v{n % 50}", fiftyone=f"w{n % 51}", mixed=i if i % 2 else f"m{i}",
                nested={"a": [1, 2, {"b": "deep"}]}, long="; ".join(["long text"] * 10), edge64="é" * 64, edge65="é" * 65,
            ))
    lines.append(sample(2, reward=0.0, **{f"k{k:02d}": k for k in range(40)}))
    write_lines(run_dir / "r.jsonl", lines)
    return lines


FORMAT_USED = {"prompt", "response", "reward", "step"}


# The bundled generated_every_key run, loaded whole.
def bundled_every_key(tmp_path):
    run_dir = bundled(tmp_path, "generated_every_key")
    return run_dir, load(run_dir), records(run_dir)


# A line's mean KL per token over the tokens the policy sampled (tool_mask 1), from its log-probs.
def kl_of(line: dict, estimator="kl") -> float:
    sampled = line.get("tool_mask") or [1] * len(line["logprobs"])
    ratios = [a - b for a, b, keep in zip(line["logprobs"], line["ref_logprobs"], sampled) if keep]
    formula = {"kl": lambda r: math.expm1(r) - r, "k3": lambda r: math.exp(-r) + r - 1}[estimator]
    return math.fsum(formula(r) for r in ratios) / len(ratios)


# A run's rank file lines as given (dicts or raw bytes), under root/name; the run's folder.
def write_run_lines(root: Path, name: str, lines: list, file=RANK_FILES[0]) -> Path:
    write_lines(root / name / file, [line if isinstance(line, bytes) else json.dumps(line).encode() + b"\n" for line in lines])
    return root / name


# The lines as shown: bytes that are not UTF-8 decoded as �, then json (NaN included), by (file, line).
def shown_records(run_dir: Path) -> dict:
    return {(path.name, number): json.loads(line.decode(errors="replace")) for path in sorted(run_dir.glob("*.jsonl")) for number, line in enumerate(path.read_bytes().splitlines(), start=1)}


BAD_UTF8_FIELDS = b'{"prompt": "p1", "response": "r1", "reward": 1, "step": 1, "source": "caf\xe9", "info": {"source": "caf\xe9", "n": [1, "\xff"]}}\n'


MARKDOWN_KEY = "![x](http://example.invalid/a.png) **b**"
