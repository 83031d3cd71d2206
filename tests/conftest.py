"""Shared set-up: the project root on sys.path, offline Hugging Face, a private index cache per test, and the
markers by folder (browser, training; see pytest.ini). What tests share is in tests/support/."""

import itertools
import os
import re
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def private_index_cache(tmp_path, monkeypatch):
    """Each test gets an empty index cache, so no test sees another's."""
    cache = tmp_path / "index_cache"
    monkeypatch.setenv("RL_LOGGING_BOARD_CACHE", str(cache))
    return cache


# The folders whose tests share one kind of cost are marked here; a single test elsewhere that trains carries
# @pytest.mark.training, a slow one @pytest.mark.slow.
MARKERS_BY_FOLDER = {"browser": "browser", "logger": "training"}


def folder_marker(path: Path) -> str | None:
    """The marker of the folder of tests/ that `path` is or lies in."""
    tests = PROJECT / "tests"
    folder = next((folder for folder in (path, *path.parents) if folder.parent == tests), None)
    return folder and MARKERS_BY_FOLDER.get(folder.name)


def pytest_collection_modifyitems(config, items):
    for item in items:
        marker = folder_marker(item.path)
        if marker:
            item.add_marker(marker)


IDENTIFIER = r"(?:\w|[:+\-.\[\]\\/])+"  # a marker name as pytest's -m grammar spells it
KEYWORDS = {"and", "or", "not"}


def marker_expression_holds(markexpr: str, present: set[str]) -> bool:
    """Whether `-m markexpr` (names joined by and, or, not and parentheses) holds for a test with these markers: each
    name becomes True or False and what is left is evaluated as Python's own and/or/not, which have -m's precedence."""
    tokens = re.findall(f"\\(|\\)|{IDENTIFIER}", markexpr)
    if "".join(tokens) != re.sub(r"\s+", "", markexpr):
        raise ValueError(f"not a marker expression: {markexpr!r}")
    python = " ".join(token if token in KEYWORDS or token in "()" else str(token in present) for token in tokens)
    return bool(eval(python, {"__builtins__": {}}))  # only True, False, and, or, not and parentheses are left


def deselects_every_test_marked(markexpr: str, marker: str) -> bool:
    """Whether `-m markexpr` leaves out every test marked `marker`, whatever other markers it has."""
    names = set(re.findall(IDENTIFIER, markexpr)) - KEYWORDS
    if not markexpr or names & set(re.findall(f"({IDENTIFIER})\\s*\\(", markexpr)):
        return False  # no -m, or a marker with arguments: never assume
    others = sorted(names - {marker})
    if len(others) > 8:
        return False
    try:
        return not any(
            marker_expression_holds(markexpr, {marker, *(name for name, value in zip(others, values) if value)})
            for values in itertools.product((False, True), repeat=len(others))
        )
    except (ValueError, SyntaxError):  # an expression pytest itself will report
        return False


def pytest_ignore_collect(collection_path, config):
    """Folders whose tests `-m` deselects are not even imported: torch and trl alone take over 10 s to import, so
    `-m "not browser and not training and not slow"` stays a matter of seconds."""
    marker = folder_marker(collection_path)
    if marker and deselects_every_test_marked(config.getoption("markexpr", ""), marker):
        return True
    return None
