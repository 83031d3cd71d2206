"""What the reading tests share: a tokenizer trained here (for formats that log token ids only), and no tokenizer
variable from the environment unless a test sets one."""

import pytest

from rl_board.tokenizer import TOKENIZER_VARIABLE
from tests.support.prime_rl_nemo_rl import build_tokenizer


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(autouse=True)
def no_tokenizer(monkeypatch):
    monkeypatch.delenv(TOKENIZER_VARIABLE, raising=False)
