"""The board served to a network (`RL_LOGGING_BOARD_ADDRESS=0.0.0.0 bash start.sh`) in a real headless Chromium: the
link's token is accepted and then dropped from the address bar, and the server opens no
connection and looks up no name beyond this machine: Python's audit hooks, installed in the server and its worker
processes by a sitecustomize module, record every socket connect and name lookup while a run is opened."""

import json
import os
import socket
import urllib.parse
from pathlib import Path

import pytest

from bench.generate_run import write_run
from tests.support.browser import CHARTS_DRAWN, browser, served_board  # noqa: F401  (browser: a fixture)
from tests.support.s3_server import environment

TOKEN = "network-test-token"
LOOPBACK_NAMES = {None, "", "localhost", "127.0.0.1", "::1", "0.0.0.0", "::"}
AUDIT = """
import json, os, sys

_log = open(os.environ["RL_TEST_SOCKET_LOG"], "a", buffering=1)
_log.write(json.dumps(["started", sys.argv[:1]]) + "\\n")


def _record(event, args):
    if event == "socket.connect":
        address = args[1]
        shown = address if isinstance(address, str) else repr(address) if isinstance(address, bytes) else list(address)[:2]
        _log.write(json.dumps(["connect", shown]) + "\\n")
    elif event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr"):
        host = args[0]
        _log.write(json.dumps([event, host if isinstance(host, str) or host is None else repr(host)]) + "\\n")


sys.addaudithook(_record)
"""


@pytest.fixture(scope="module")
def network_board(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    write_run(root / "grpo_run", steps=3, samples=8, tokens=20, ranks=2, grpo=True, workers=1)
    hooks = tmp_path_factory.mktemp("hooks")
    (hooks / "sitecustomize.py").write_text(AUDIT)
    log = hooks / "sockets.jsonl"
    settings = {
        "RL_LOGGING_BOARD_ADDRESS": "0.0.0.0",
        "RL_LOGGING_BOARD_TOKEN": TOKEN,
        "RL_LOGGING_BOARD_HOST": "board.example.invalid",  # what the link names; never looked up
        "RL_TEST_SOCKET_LOG": str(log),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")])),
    }
    with environment(settings):
        served = served_board(root)
        url = next(served)
    yield url, log
    next(served, None)


def is_loopback(address) -> bool:
    if isinstance(address, str):  # a Unix socket's path
        return True
    host = address[0]
    return host in LOOPBACK_NAMES or host.startswith("127.")


def test_served_to_a_network_the_token_leaves_the_address_and_nothing_leaves_the_machine(browser, network_board):  # noqa: F811
    url, log = network_board
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    page = context.new_page()
    page.goto(f"{url}/?token={TOKEN}")
    page.get_by_role("button", name="Load & View").wait_for(timeout=60_000)  # the first screen shows the chosen run
    page.wait_for_function(CHARTS_DRAWN, timeout=60_000)
    assert "token" not in page.url and page.get_by_label("Access token").count() == 0
    context.close()
    # A page of another origin opening the board's socket (any web site the user visits can): Streamlit looked up the
    # machine's external address (checkip.amazonaws.com) and its route out (8.8.8.8) to compare with the origin.
    port = urllib.parse.urlsplit(url).port
    with socket.create_connection(("127.0.0.1", port), timeout=30) as knock:
        knock.sendall(b"GET /_stcore/stream HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nOrigin: http://evil.example.invalid\r\n\r\n" % port)
        assert b" 403 " in knock.recv(4096).split(b"\r\n", 1)[0]
    events = [json.loads(line) for line in Path(log).read_text().splitlines()]
    assert any(event[0] == "started" for event in events), "the server did not load the audit hook"
    assert [event for event in events if event[0] == "connect" and not is_loopback(event[1])] == []
    assert [event for event in events if event[0].startswith("socket.") and event[1] not in LOOPBACK_NAMES] == []


def websocket_answer(port: int, host: str) -> bytes:
    """The status line the board's socket answers a page at http://host:port (Host and Origin alike: same origin)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as knock:
        knock.sendall(
            f"GET /_stcore/stream HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
            f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nOrigin: http://{host}:{port}\r\n\r\n".encode()
        )
        return knock.recv(4096).split(b"\r\n", 1)[0]


# Served to this machine alone (no token), a web site whose name is made to resolve here (DNS rebinding) loaded the
# page at its own origin, and its socket was answered: the site's script could read every run the server can. The
# socket answers only this machine's own names, and those RL_LOGGING_BOARD_ALLOWED_HOSTS adds (a proxy's).
def test_served_here_the_socket_answers_only_this_machine_s_names(tmp_path_factory):
    root = tmp_path_factory.mktemp("local_runs")
    write_run(root / "run", steps=1, samples=2, tokens=4, ranks=1, workers=1)
    with environment({"RL_LOGGING_BOARD_ALLOWED_HOSTS": "hub.example.invalid"}):
        served = served_board(root)
        port = urllib.parse.urlsplit(next(served)).port
        answers = {host: websocket_answer(port, host) for host in ("127.0.0.1", "localhost", "hub.example.invalid", "rebound.example.invalid")}
        next(served, None)
    assert [host for host, answer in answers.items() if b" 101 " in answer] == ["127.0.0.1", "localhost", "hub.example.invalid"]
    assert b" 403 " in answers["rebound.example.invalid"]
