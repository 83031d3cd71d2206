"""OpenRLHF's rank files, data_rank<r>.jsonl: the original board's format as OpenRLHF's fork of it writes it (a <PAD>
token in its texts), read as they are."""
import re

from rl_board.formats.base import Folder, RunFormat
from rl_board.reading.storage import FileStatus

RANK_FILE = re.compile(r"data_rank\d+\.jsonl")


NAME = "OpenRLHF rank files (data_rank<r>.jsonl, the original board's format)"


def recognise(folder: Folder) -> tuple[dict[str, FileStatus], RunFormat] | None:
    if folder.jsonl and all(RANK_FILE.fullmatch(entry.name) for entry in folder.jsonl):
        return folder.sources(folder.jsonl), RunFormat(NAME)
    return None
