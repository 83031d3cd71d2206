"""The read-ahead thread: it runs the latest job it was given after its delay, drops the older ones not yet started,
and goes on after a job that fails."""

import threading
import time

from rl_board.reading.workers import LatestJobThread


def test_only_the_latest_job_given_during_the_delay_runs():
    ran, done = [], threading.Event()
    thread = LatestJobThread(delay=0.3)
    for number in range(5):
        thread.submit(lambda number=number: ran.append(number))
    thread.submit(done.set)
    assert done.wait(10)
    time.sleep(0.5)
    assert ran == []  # the five older jobs were replaced before they started


def test_a_job_that_fails_does_not_stop_the_thread():
    done = threading.Event()
    thread = LatestJobThread(delay=0.01)
    thread.submit(lambda: 1 / 0)
    time.sleep(0.3)
    thread.submit(done.set)
    assert done.wait(10)


def test_a_job_waits_for_the_delay():
    started, given = [], time.monotonic()
    done = threading.Event()
    thread = LatestJobThread(delay=0.4)
    thread.submit(lambda: (started.append(time.monotonic()), done.set()))
    assert done.wait(10)
    assert started[0] - given >= 0.4


def test_jobs_given_faster_than_the_delay_wait_until_they_stop():
    ran = []
    thread = LatestJobThread(delay=0.3)
    for number in range(8):  # one every 0.1 s: none runs meanwhile
        thread.submit(lambda number=number: ran.append((number, time.monotonic())))
        time.sleep(0.1)
    stopped = time.monotonic()
    assert ran == []
    deadline = time.monotonic() + 10
    while not ran and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [number for number, _ in ran] == [7] and ran[0][1] - stopped >= 0.15
