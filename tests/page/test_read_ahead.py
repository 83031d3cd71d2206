"""Reading ahead: once a step is drawn, the steps either side of it are read in the background, so that moving the
step one either way reads nothing in the page's own run, and shows what a fresh read shows."""

import threading
import time

import pandas as pd
import streamlit as st

import rl_board.reading.snapshot
from bench.generate_run import write_run
from tests.support.page import batch_table, start, widget


def test_the_steps_either_side_are_read_ahead_and_shown_from_it(tmp_path, monkeypatch):
    write_run(tmp_path / "run", steps=6, samples=8, tokens=20, ranks=2)
    st.cache_resource.clear()
    reads, read_step_batch = [], rl_board.reading.snapshot.read_step_batch

    def counted(key, rows):
        reads.append((threading.current_thread().name, int(rows["step"].iloc[0])))
        return read_step_batch(key, rows)

    monkeypatch.setattr(rl_board.reading.snapshot, "read_step_batch", counted)
    app = start(tmp_path, monkeypatch)  # the first screen opens the run at its first step
    assert page_reads(reads) == [0]
    assert until(lambda: ("read-ahead", 1) in reads), reads  # the first step has one neighbour

    widget(app.slider, "Step Index(6 total steps)").set_value(1).run()
    assert not app.exception
    assert page_reads(reads) == [0]  # step 1 was drawn from what was read ahead
    shown = batch_table(app)
    assert until(lambda: ("read-ahead", 2) in reads), reads  # then step 1's neighbours: 0 is still cached, 2 is read
    assert ("read-ahead", 0) not in reads

    widget(app.slider, "Step Index(6 total steps)").set_value(4).run()  # two steps further: the page reads it itself
    assert page_reads(reads) == [0, 4]

    st.cache_resource.clear()  # step 1 read afresh shows the same table
    widget(app.slider, "Step Index(6 total steps)").set_value(1).run()
    pd.testing.assert_frame_equal(batch_table(app), shown)


def page_reads(reads: list[tuple[str, int]]) -> list[int]:
    return [step for thread, step in reads if thread != "read-ahead"]


def until(condition, seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False
