"""Shared set-up: the project root on sys.path, offline Hugging Face, and a private index cache per test."""

import os
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
