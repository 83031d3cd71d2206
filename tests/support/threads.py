"""A server's turn (rl_board.reading.workers.Turns) held by another thread, as another session's work holds it."""

import contextlib
import threading

from rl_board.reading.workers import Turns


# Yields once another thread has the turn; that thread leaves it when the block ends.
@contextlib.contextmanager
def turn_held_elsewhere(turns: Turns):
    holding, release = threading.Event(), threading.Event()

    def hold():
        with turns.turn():
            holding.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(10)
    try:
        yield
    finally:
        release.set()
        holder.join(60)
