"""What changed between two sides, A and B (two step windows of one run, two runs, two evaluation steps of a validation
run): every prompt seen on both sides, matched by its text and its images, with its samples, mean reward, pass rate
(the share of its samples whose reward, or a chosen reward function, is at least a threshold) and mean length on each
side; whether it regressed, was newly solved, improved or stayed unchanged; then one prompt's responses on each side,
word by word.

A prompt is its text and its images, in order, by their paths as the lines write them, as in "This prompt over
training" (rl_board.reading.snapshot's index_images, prompt_lines): in a vision-language run one question asked of two
pictures is two prompts. Matching uses the index alone (its prompt key, a hash of the prompt's text, and the paths of
a line's first IMAGES_SHOWN images, those it keeps: images past them are not compared); then one line per prompt and
side is read back for the prompt's text, which must be the same on both sides (a key shared by two texts is left out
and counted). A response's words are compared as text (nothing of a rollout is ever markup): their longest common
subsequence, by rapidfuzz's bit-parallel LCS, whose time and memory grow with the words of both responses multiplied,
so only each response's first DIFF_WORDS words are compared."""
import itertools
import json
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
from rapidfuzz.distance import Indel

from rl_board.reading.search import TEXT_SPAN_COLUMNS, read_texts
from rl_board.reading.snapshot import NO_IMAGES, index_images

PROMPT = ["prompt_key", "image_paths"]  # a prompt in the index: its text's key and its images' paths (index_images)
CHANGE_COLUMNS = ["prompt", "samples_a", "samples_b", "reward_a", "reward_b", "pass_a", "pass_b", "length_a", "length_b", "change", "pass_change", "status"]
# A prompt's status from its pass rates on A and B, in the order the counts are shown.
STATUSES = {
    "regressed": "its pass rate fell",
    "newly solved": "no sample passed on A, some on B",
    "improved": "its pass rate rose (some samples passed on A already)",
    "unchanged": "the same pass rate",
    "no pass rate": "samples on A or on B all lack a value of the pass column (a reward not scored)",
}
NO_PASS_RATE = "no pass rate"


# Two sides' prompts, a row each (CHANGE_COLUMNS, with `images` after the prompt where a prompt has images: their
# paths; indexed by PROMPT), and what could not be compared.
@dataclass(frozen=True)
class PromptChanges:
    table: pd.DataFrame
    only_a: int  # prompts seen on A alone
    only_b: int
    collisions: int  # keys whose texts differ between the sides: left out
    length_unit: str  # "tokens" or "characters"
    without_prompt: int = 0  # samples (lines) of either side whose line has no prompt (null): left out

    # What the table leaves out, as the page's caption and the API's warning say it.
    def left_out(self) -> str:
        parts = [f"{self.only_a:,} prompt(s) only on A", f"{self.only_b:,} only on B"]
        parts += [f"{self.collisions:,} whose texts differ under one key"] * bool(self.collisions)
        parts += [f"{self.without_prompt:,} sample(s) without a prompt"] * bool(self.without_prompt)
        return ", ".join(parts) + ": left out"

    # Prompts per status; "no pass rate" only where there are some.
    def counts(self) -> dict[str, int]:
        counted = {status: int((self.table["status"] == status).sum()) for status in STATUSES}
        return counted if counted[NO_PASS_RATE] else {status: count for status, count in counted.items() if status != NO_PASS_RATE}


# The samples of a side: a snapshot's rows in a window of steps (both ends included; None: every step) and, where
# given, those whose column (a facet: text/mode, text/split) has a value (e.g. the validation samples a run mixes in).
def side_rows(samples: pd.DataFrame, steps: tuple[int, int] | None = None, where: tuple[str, str] | None = None) -> pd.DataFrame:
    if steps is not None:
        samples = samples[(samples["step"] >= steps[0]) & (samples["step"] <= steps[1])]
    if where is not None:
        samples = samples[samples[where[0]] == where[1]] if where[0] in samples else samples.iloc[:0]
    return samples


# A threshold to start from: 1 when every reward of the column is 0 or 1 (a correctness reward), else the midpoint of
# the finite values seen on both sides (a reward of ±inf made it ±inf or NaN, which the page's number box refuses).
def default_threshold(a: pd.DataFrame, b: pd.DataFrame, column: str = "reward") -> float:
    values = pd.concat([a[column], b[column]]).to_numpy(dtype=float, na_value=np.nan)
    values = values[np.isfinite(values)]
    if not len(values) or np.isin(values, [0, 1]).all():
        return 1.0
    return float(values.min() / 2 + values.max() / 2)  # halves first: 1e308 + 1e308 is inf


def prompt_changes(a: pd.DataFrame, b: pd.DataFrame, threshold: float, column: str = "reward") -> PromptChanges:
    """Every prompt (its text and its images) with samples on both sides (snapshot rows: prompt_key, image_paths,
    reward, the lines' places), its numbers on each, sorted by the change of mean reward (the worst first). A sample
    without a value of `column` counts in `samples_*` but not in `pass_*`."""
    length = "response_tokens_len" if a["response_tokens_len"].notna().any() and b["response_tokens_len"].notna().any() else "response_len"
    a, b = (side.assign(image_paths=index_images(side)) for side in (a, b))
    sides = [side_numbers(side, threshold, column, length) for side in (a, b)]
    prompts = sides[0].index.intersection(sides[1].index)
    only_a, only_b = len(sides[0].index.difference(prompts)), len(sides[1].index.difference(prompts))
    texts = [prompt_texts(first_lines(side, prompts)) for side in (a, b)]
    same = prompts[[texts[0].get(prompt) is not None and texts[0].get(prompt) == texts[1].get(prompt) for prompt in prompts]]
    collisions = len(prompts) - len(same)
    table = sides[0].reindex(same).add_suffix("_a").join(sides[1].reindex(same).add_suffix("_b"))
    table.insert(0, "prompt", [texts[0][prompt] for prompt in same])
    with_images = any(images != NO_IMAGES for _, images in same)
    if with_images:
        table.insert(1, "images", [json.loads(images) for _, images in same])
    table["change"] = table["reward_b"] - table["reward_a"]
    table["pass_change"] = table["pass_b"] - table["pass_a"]
    table["status"] = statuses(table["pass_a"].to_numpy(), table["pass_b"].to_numpy())
    columns = [CHANGE_COLUMNS[0], "images", *CHANGE_COLUMNS[1:]] if with_images else CHANGE_COLUMNS
    table = table[columns].sort_values(["change", "pass_change"], kind="stable", na_position="last")
    without_prompt = len(pd.concat([side.loc[side["prompt_key"].isna(), ["path", "offset"]] for side in (a, b)]).drop_duplicates())  # once where the sides overlap
    return PromptChanges(table=table, only_a=only_a, only_b=only_b, collisions=collisions, length_unit="tokens" if length == "response_tokens_len" else "characters", without_prompt=without_prompt)


# Per prompt of a side (PROMPT): samples, mean reward (of its finite rewards, as This prompt over training's and the
# step curves' means: one ±inf would make it ±inf, +inf beside -inf NaN), pass rate over the samples with a value (+inf
# passes), mean length.
def side_numbers(samples: pd.DataFrame, threshold: float, column: str, length: str) -> pd.DataFrame:
    keyed = samples[samples["prompt_key"].notna()]
    valued = keyed[column].notna()
    rewards = keyed["reward"].to_numpy(dtype=float, na_value=np.nan)
    numbers = pd.DataFrame({
        "prompt_key": keyed["prompt_key"].to_numpy(),
        "image_paths": keyed["image_paths"].to_numpy(),
        "reward": np.where(np.isfinite(rewards), rewards, np.nan),
        "passed": np.where(valued, keyed[column].to_numpy(dtype=float) >= threshold, np.nan),
        "length": keyed[length].to_numpy(dtype=float),
    })
    grouped = numbers.groupby(PROMPT, sort=False)
    return pd.DataFrame({"samples": grouped.size(), "reward": grouped["reward"].mean(), "pass": grouped["passed"].mean(), "length": grouped["length"].mean()})


def statuses(pass_a: np.ndarray, pass_b: np.ndarray) -> np.ndarray:
    return np.select(
        [pass_b < pass_a, (pass_a == 0) & (pass_b > 0), pass_b > pass_a, pass_b == pass_a],
        ["regressed", "newly solved", "improved", "unchanged"],
        default=NO_PASS_RATE,  # no sample of a side has the column's value
    )


# The first line (in the snapshot's order) of each of the prompts (PROMPT) on a side.
def first_lines(samples: pd.DataFrame, prompts: pd.MultiIndex) -> pd.DataFrame:
    rows = samples[~samples[PROMPT].duplicated().to_numpy()]
    return rows[pd.MultiIndex.from_arrays([rows[name] for name in PROMPT]).isin(prompts)]


# The prompt text of each line, by its prompt (PROMPT); only the prompt's bytes of each line are read where the index
# knows them. A line that can no longer be read has none.
def prompt_texts(rows: pd.DataFrame) -> dict[tuple[float, str], str]:
    texts = {}
    for path, part in rows.groupby("path", sort=False):
        data, sizes, read = read_texts(path, part[TEXT_SPAN_COLUMNS].to_numpy(dtype=float))
        ends = np.cumsum(sizes.ravel())
        starts = ends - sizes.ravel()
        for row, prompt in enumerate(zip(part["prompt_key"].tolist(), part["image_paths"].tolist())):
            if read[row]:
                texts[prompt] = data[starts[2 * row] : ends[2 * row]].decode("utf-8", "replace")
    return texts


WORDS = re.compile(r"\s+|[^\s]+")  # a text as its words and the whitespace between them, each a run of its own
WORD = re.compile(r"\S+")
# Words of each response compared; the rest is shown unmarked, with a note. The LCS of two responses of 10,000 words
# (about 20,000 runs of words and whitespace each) takes about 0.1 s and 50 MB; difflib took 54 s on two of 43,000
# runs (a reasoning model's 32,000 tokens: docs/speed.md, "Long texts").
DIFF_WORDS = 10_000


def word_diff(a: str, b: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]], bool]:
    """A's and B's text as runs of (kind, text): kind "same", "removed" (A's words B does not have) or "added" (B's
    words A does not have), as their longest common subsequence of words and whitespace has them. True when a response
    was longer than DIFF_WORDS words, whose rest is "same"."""
    (head_a, rest_a), (head_b, rest_b) = compared_words(a), compared_words(b)
    codes = {}  # each distinct word a number, so that words are compared by their text, never by a hash
    codes_a, codes_b = [codes.setdefault(word, len(codes)) for word in head_a], [codes.setdefault(word, len(codes)) for word in head_b]
    runs_a, runs_b = [], []
    for kind, start_a, end_a, start_b, end_b in Indel.opcodes(codes_a, codes_b):  # "equal", "delete" or "insert"
        runs_a.append(("same" if kind == "equal" else "removed", "".join(head_a[start_a:end_a])))
        runs_b.append(("same" if kind == "equal" else "added", "".join(head_b[start_b:end_b])))
    return joined_runs(runs_a + [("same", rest_a)]), joined_runs(runs_b + [("same", rest_b)]), bool(rest_a or rest_b)


def compared_words(text: str) -> tuple[list[str], str]:
    """A text's first DIFF_WORDS words and the whitespace around them as runs (WORDS), and the rest of the text."""
    past = next(itertools.islice(WORD.finditer(text), DIFF_WORDS, None), None)  # the first word not compared
    end = past.start() if past else len(text)
    return WORDS.findall(text[:end]), text[end:]


def joined_runs(runs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The runs without the empty ones, each joined to those of the same kind next to it."""
    return [(kind, "".join(text for _, text in same)) for kind, same in itertools.groupby((run for run in runs if run[1]), key=lambda run: run[0])]


def runs_between(runs: list[tuple[str, str]], start: int, end: int) -> list[tuple[str, str]]:
    """The runs' characters from start to end (a part of a long response to draw), each piece keeping its kind."""
    pieces, offset = [], 0
    for kind, text in runs:
        piece = text[max(start - offset, 0) : max(end - offset, 0)]
        offset += len(text)
        if piece:
            pieces.append((kind, piece))
    return pieces
