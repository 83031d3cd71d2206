"""The server's part of many sessions changing the step and the sample at the same moment, without their browsers.

With a browser per session, the pages take the cores (on 2 cores, 8 pages are most of an 8-session step change) or
need a machine of many cores (bench/concurrent_sessions.py --browser-cpus). This bench measures what the server alone
makes each session wait, on any machine: a real page (Chromium) opens the medium run of bench/run_bench.py and changes
the step twice and the sample twice, and the messages it sent the server are kept. Then SESSIONS websocket clients, in
one asyncio process and without a browser, each open a session of their own with the page's first message; ROUNDS
times they all send the same step change at the same moment (the two steps in turn), then the same for the sample. A
session's time runs from its message sent until the server's message that the rerun finished: the server's part. A
rerun that ended otherwise, drew an exception or drew nothing stops the bench. The first round of each change is not
counted (the first session to ask reads the step), in the times or in the server's CPU. The clients' own CPU is a few
milliseconds a round; with --server-cpus the server and its workers run on cores of their own.

    python bench/server_sessions.py                                 # 1, 4 and 8 sessions, 10 rounds each change
    python bench/server_sessions.py --sessions 8 --rounds 20 --server-cpus 0,1
"""

import argparse
import asyncio
import os
import re
import statistics
import sys
import time
from pathlib import Path

import websockets
from playwright.sync_api import sync_playwright
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))
from bench.run_bench import (  # noqa: E402
    CHROMIUM,
    SIZES,
    VIEWPORT,
    child_pids,
    cpu_list,
    cpu_seconds,
    cpu_since,
    free_port,
    generated_run,
    loaded_condition,
    start_server,
)

PAUSE_S = 0.3  # between rounds: under the page's read-ahead delay (1 s), so no step is read ahead meanwhile


# The reruns a real page asks for: its first run, two step changes (the slider moved right twice) and two sample
# changes (samples 5 and 6 of the step then in view), each the last rerun request the action sent.
def recorded_messages(url: str, steps: int) -> dict[str, bytes | list[bytes]]:
    sent: list[bytes] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(**CHROMIUM)
        page = browser.new_page(viewport=VIEWPORT)
        page.on("websocket", lambda socket: socket.on("framesent", lambda payload: sent.append(payload) if isinstance(payload, bytes) else None))
        page.goto(url)
        page.wait_for_function(loaded_condition(steps), timeout=600_000, polling=500)
        page.wait_for_timeout(2000)
        opening = reruns(sent)[0]

        def rerun_after(action) -> bytes:
            for _ in range(5):  # a key pressed while the page is still busy can be lost: press it again
                before = len(sent)
                action()
                for _ in range(50):
                    page.wait_for_timeout(100)
                    if reruns(sent[before:]):
                        break
                page.wait_for_timeout(2000)
                if asked := reruns(sent[before:]):
                    return asked[-1]
            raise SystemExit("the page sent no rerun request")

        slider = page.get_by_label(re.compile(r"Step Index\(")).get_by_role("slider")
        step_changes = [rerun_after(lambda: slider.press("ArrowRight")) for _ in range(2)]
        field = page.get_by_label("Sample index in current step batch")
        sample_changes = []
        for index in (5, 6):
            field.fill(str(index))
            sample_changes.append(rerun_after(lambda: field.press("Enter")))
        browser.close()
    return {"opening": opening, "step": step_changes, "sample": sample_changes}


def reruns(messages: list[bytes]) -> list[bytes]:
    asked = []
    for raw in messages:
        message = BackMsg()
        message.ParseFromString(raw)
        if message.WhichOneof("type") == "rerun_script":
            asked.append(raw)
    return asked


FINISHED = {ForwardMsg.FINISHED_SUCCESSFULLY, ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY}


# Reads the server's messages until the rerun's end. A rerun that ended otherwise (stopped early, a compile error), drew
# an exception, or drew nothing (a fragment the session does not have) stops the bench: its time would not be a rerun's.
async def until_finished(socket):
    drawn = 0
    while True:
        message = ForwardMsg()
        message.ParseFromString(await socket.recv())
        kind = message.WhichOneof("type")
        if kind == "delta" and message.delta.WhichOneof("type") == "new_element":
            if message.delta.new_element.WhichOneof("type") == "exception":
                raise SystemExit(f"the rerun drew an exception: {message.delta.new_element.exception.message}")
            drawn += 1
        if kind == "script_finished":
            if message.script_finished not in FINISHED or not drawn:
                raise SystemExit(f"the rerun ended as {ForwardMsg.ScriptFinishedStatus.Name(message.script_finished)}, {drawn} element(s) drawn")
            return


# SESSIONS sessions, each opened with the page's first run, then ROUNDS rounds of each change, all sessions sending it
# together. Returns, per change, each counted round's times and the server's CPU a session and counted round.
async def sessions_together(url: str, messages: dict, count: int, rounds: int, server_pids: list[int]) -> dict:
    times = {change: [] for change in ("step", "sample")}
    cpu = {}
    opened = asyncio.Barrier(count + 1)
    go = {(change, round_): asyncio.Event() for change in times for round_ in range(rounds)}
    ready = {key: asyncio.Barrier(count + 1) for key in go}

    async def session():
        async with websockets.connect(url.replace("http", "ws") + "/_stcore/stream", subprotocols=["streamlit"], max_size=None) as socket:
            await socket.send(messages["opening"])
            await until_finished(socket)
            await opened.wait()
            for change in times:
                for round_ in range(rounds):
                    await ready[change, round_].wait()
                    await go[change, round_].wait()
                    sent = time.perf_counter()
                    await socket.send(messages[change][round_ % 2])
                    await until_finished(socket)
                    if round_:
                        times[change].append(time.perf_counter() - sent)

    async def conductor():
        await opened.wait()
        for change in times:
            for round_ in range(rounds):
                await ready[change, round_].wait()
                if round_ == 1:  # the first round, not counted, answered
                    before = cpu_seconds(server_pids)
                await asyncio.sleep(PAUSE_S)
                go[change, round_].set()
            while len(times[change]) < count * (rounds - 1):  # the last round answered
                await asyncio.sleep(0.01)
            cpu[change] = cpu_since(before, server_pids) / (count * (rounds - 1))

    await asyncio.gather(conductor(), *(session() for _ in range(count)))
    return {change: (times[change], cpu[change]) for change in times}


def quantiles(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered):.3f} / {p95:.3f} / {ordered[-1]:.3f}"


def main(options):
    steps = SIZES["medium"][0]
    root = generated_run("medium")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_server(port, root, root / "cache", cpus=options.server_cpus)
    try:
        messages = recorded_messages(url, steps)
        server_pids = [server.pid, *child_pids(server.pid)]
        results = {}
        for count in options.sessions:
            results[count] = asyncio.run(sessions_together(url, messages, count, options.rounds, server_pids))
            step, sample = results[count]["step"][0], results[count]["sample"][0]
            print(f"{count} session(s): step change {quantiles(step)} s, sample change {quantiles(sample)} s", file=sys.stderr, flush=True)
    finally:
        server.terminate()
        server.wait(timeout=60)
    cores = ",".join(str(cpu) for cpu in sorted(options.server_cpus or os.sched_getaffinity(0)))
    print(f"\nThe medium run ({steps} steps × {SIZES['medium'][1]} samples), the server on cores {cores}, {options.rounds - 1} counted rounds of each change.\n")
    print("| sessions changing together | " + " | ".join(str(count) for count in options.sessions) + " |")
    print("|---|" + "---:|" * len(options.sessions))
    for change in ("step", "sample"):
        print(f"| {change} change, server part: p50 / p95 / max (s) | " + " | ".join(quantiles(results[count][change][0]) for count in options.sessions) + " |")
        print(f"| {change} change, server CPU a session (s) | " + " | ".join(f"{results[count][change][1]:.3f}" for count in options.sessions) + " |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--rounds", type=lambda text: max(2, int(text)), default=10, help="of each change; the first is not counted (at least 2)")
    parser.add_argument("--server-cpus", type=cpu_list, help="cores for the server and its workers, as taskset writes them (0-1,4); default: every core")
    main(parser.parse_args())
