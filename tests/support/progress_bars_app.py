"""A page of progress bars for tests/page/test_app.py: one short load, then two long ones (one cut short)."""

import rl_logging_board as board

if __name__ == "__main__":  # spawned worker processes import this file as their main module: nothing to run there
    defaults = board.PROGRESS_AFTER_S, board.PROGRESS_EVERY_S
    try:
        board.PROGRESS_AFTER_S, board.PROGRESS_EVERY_S = 60.0, 60.0
        short = board.ProgressBar()
        short.show(1.0, "Loading 1 / 1 files...")
        board.PROGRESS_AFTER_S = 0.0
        finished, interrupted = board.ProgressBar(), board.ProgressBar()
        for fraction in (0.1, 0.2, 0.3):
            interrupted.show(fraction, "Processing samples...")
        for fraction in (0.25, 0.5, 1.0):
            finished.show(fraction, "Loading 4 / 4 files...")
    finally:
        board.PROGRESS_AFTER_S, board.PROGRESS_EVERY_S = defaults
