"""The board's own JSONL (docs/data-format.md): the rollout logger's rank files,
rollout_data_rank_<rank>_<launch>.jsonl, or any folder of JSONL files, one per rank, read as they are. Asked last: it
takes every folder (one without JSONL has no sources)."""
import re

from rl_board.formats.base import Folder, RunFormat, RunLayout
from rl_board.reading.storage import FileStatus
from rollout_logger.metadata import RANK_FILE_PATTERN, SUMMARIES_SUFFIX, TEXTS_SUFFIX

LOGGER_NAME = "rollout_logger JSONL (rollout_data_rank_<rank>_<launch>.jsonl)"


NAME = "JSONL, the board's format"


# Any JSONL file (a rank file, the logger's metrics) makes its folder a run; its sub-folders may be runs of their own.
LAYOUT = RunLayout(files=re.compile(r".*\.jsonl", re.DOTALL))


# A JSONL file's summaries and texts files (the logger's) are its name + SUMMARIES_SUFFIX and + TEXTS_SUFFIX.
def recognise(folder: Folder) -> tuple[dict[str, FileStatus], RunFormat]:
    logger = any(RANK_FILE_PATTERN.search(entry.name) for entry in folder.jsonl)
    listed = {entry.name: entry for entry in folder.files}
    summaries = {entry.path: listed[entry.name + SUMMARIES_SUFFIX] for entry in folder.jsonl if entry.name + SUMMARIES_SUFFIX in listed}
    texts = {entry.path: listed[entry.name + TEXTS_SUFFIX].status for entry in folder.jsonl if entry.name + TEXTS_SUFFIX in listed}
    return folder.sources(folder.jsonl), RunFormat(LOGGER_NAME if logger else NAME, summaries=summaries, texts=texts)
