"""The documentation as a reader follows it: every link and anchor between the README and docs/ leads somewhere, and
the lists that name the code (the formats' modules, the logger's arguments) name what the code has."""

import ast
import re

import pytest

from rl_board.formats import FORMATS
from tests.support import PROJECT

DOCUMENTS = sorted([PROJECT / "README.md", PROJECT / "bench" / "README.md", *(PROJECT / "docs").glob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *#*$")
FENCE = re.compile(r"^(```|~~~)")


# A heading's anchor as GitHub makes it: its text without Markdown (links as their text), lower case, every character
# but letters, digits, "_", "-" and spaces dropped, spaces as "-"; a repeated one gets -1, -2, ...
def anchors(text: str) -> set[str]:
    found, seen = set(), {}
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        match = None if fenced else HEADING.match(line)
        if match:
            title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1))
            slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(text: str) -> list[str]:
    kept, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            kept += LINK.findall(re.sub(r"`[^`]*`", "", line))
    return kept


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(PROJECT)))
def test_every_link_of_a_document_leads_to_a_file_and_heading_that_exist(document):
    broken = []
    for target in links(document.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not this project's
            continue
        path, _, anchor = target.partition("#")
        file = (document.parent / path).resolve() if path else document
        if not file.exists():
            broken.append(f"{target}: no file {file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            broken.append(f"{target}: {file.name} has no heading of that anchor")
    assert not broken, "\n".join(broken)


def test_the_anchors_are_made_as_github_makes_them():
    text = "# Speed and size\n## AReaL, open-instruct and ROLL's RLVR dumps: GRPO samples\n## Step-Watch: patterns\n## `open_run`\n## Step-Watch: patterns\n```\n# not a heading\n```\n"
    assert anchors(text) == {"speed-and-size", "areal-open-instruct-and-rolls-rlvr-dumps-grpo-samples", "step-watch-patterns", "open_run", "step-watch-patterns-1"}


def test_the_formats_modules_are_listed_in_the_registry_s_order():
    """docs/formats.md names each format's module in the order the registry asks them."""
    text = (PROJECT / "docs" / "formats.md").read_text()
    sentence = text[text.index("Each format is a module of `rl_board/formats/`") :]
    sentence = sentence[: sentence.index("asked in that order")]
    listed = re.findall(r"`(\w+)\.py`", sentence)
    assert listed == [module.__name__.rsplit(".", 1)[1] for module in FORMATS]


def test_the_logger_s_arguments_are_those_docs_logger_md_names():
    """docs/logger.md gives RolloutLoggerCallback's signature: every argument, with its default."""
    source = ast.parse((PROJECT / "rollout_logger" / "callback.py").read_text())
    [init] = [node for node in ast.walk(source) if isinstance(node, ast.FunctionDef) and node.name == "__init__" and any(
        isinstance(parent, ast.ClassDef) and parent.name == "RolloutLoggerCallback" and node in parent.body for parent in ast.walk(source))]
    arguments = init.args.args[1:]
    defaults = [None] * (len(arguments) - len(init.args.defaults)) + init.args.defaults
    signature = ", ".join(argument.arg if default is None else f"{argument.arg}={ast.unparse(default)}" for argument, default in zip(arguments, defaults))
    documented = " ".join((PROJECT / "docs" / "logger.md").read_text().split())
    assert f"`RolloutLoggerCallback({signature})`" in documented
