"""The verl fork's rank files, <project>/<experiment>/rollout_data_rank0.jsonl: the original board's format with the
reward model's answer in rm_response (verl/utils/rl_logging_board_utils.py of zyang6/DeepEyes @ 3679418), read as they
are."""
import re

from rl_board.formats.base import Folder, RunFormat, RunLayout, named_rank_files
from rl_board.reading.storage import FileStatus

RANK_FILE = re.compile(r"rollout_data_rank\d+\.jsonl")


LAYOUT = RunLayout(files=RANK_FILE)  # <project>/<experiment>: each experiment folder a run, no parts


NAME = "verl fork's rollout_data_rank<r>.jsonl (the original board's format)"


def recognise(folder: Folder) -> tuple[dict[str, FileStatus], RunFormat] | None:
    return named_rank_files(folder, RANK_FILE, NAME)
