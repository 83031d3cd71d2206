"""OpenRLHF's rank files, data_rank<r>.jsonl: the original board's format as OpenRLHF's fork of it writes it (a <PAD>
token in its texts), read as they are."""
import re

from rl_board.formats.base import Folder, RunFormat, RunLayout, named_rank_files
from rl_board.reading.storage import FileStatus

RANK_FILE = re.compile(r"data_rank\d+\.jsonl")


LAYOUT = RunLayout(files=RANK_FILE)  # a folder the integration writes the rank files to, no parts


NAME = "OpenRLHF rank files (data_rank<r>.jsonl, the original board's format)"


def recognise(folder: Folder) -> tuple[dict[str, FileStatus], RunFormat] | None:
    return named_rank_files(folder, RANK_FILE, NAME)
