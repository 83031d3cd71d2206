"""Turns: threads do their work one at a time, each waiting for its turn no longer than its bound, and a thread's work
inside its own turn goes on in it."""

import threading
import time

import pytest

from rl_board.reading.workers import Turns
from tests.support.threads import turn_held_elsewhere


def test_work_in_turns_never_overlaps_and_each_had_its_turn():
    turns, spans, lock = Turns(wait=10), [], threading.Lock()
    start = threading.Barrier(6)

    def work():
        start.wait()
        with turns.turn() as had:
            began = time.monotonic()
            time.sleep(0.05)
            with lock:
                spans.append((began, time.monotonic(), had))

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    spans.sort()
    assert len(spans) == 6 and all(had for _, _, had in spans)
    assert all(later_began >= ended for (_, ended, _), (later_began, _, _) in zip(spans, spans[1:]))


def test_a_thread_goes_ahead_once_its_wait_runs_out():
    turns = Turns(wait=0.3)
    with turn_held_elsewhere(turns):
        asked = time.monotonic()
        with turns.turn() as had:
            waited = time.monotonic() - asked
    assert not had and 0.3 <= waited < 5
    with turns.turn() as had:  # the turn the holder left is free again
        assert had


def test_work_inside_the_threads_own_turn_does_not_wait():
    turns = Turns(wait=5)
    with turns.turn() as outer:
        asked = time.monotonic()
        with turns.turn() as inner:
            assert time.monotonic() - asked < 1
    assert outer and inner


def test_work_inside_a_turn_that_went_ahead_does_not_wait_again():
    turns = Turns(wait=0.3)
    with turn_held_elsewhere(turns):
        asked = time.monotonic()
        with turns.turn() as outer, turns.turn() as inner, turns.turn() as innermost:
            waited = time.monotonic() - asked
    assert (outer, inner, innermost) == (False, False, False) and 0.3 <= waited < 0.9  # not three waits


def test_a_turn_whose_work_fails_is_left_to_the_next():
    turns = Turns(wait=5)
    with pytest.raises(ZeroDivisionError), turns.turn():
        1 / 0
    other = []
    thread = threading.Thread(target=lambda: other.append(turns.lock.acquire(timeout=0)))
    thread.start()
    thread.join(10)
    assert other == [True]
