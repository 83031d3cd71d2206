#!/usr/bin/env bash
# Install what the tests need on a fresh machine, then run every test: bash tests/run.sh [pytest arguments]
# - Chromium and the CJK and emoji fonts for the browser tests, with apt-get (as root, else through sudo), only
#   when one is missing. Chromium comes from Debian; Playwright only drives it (never `playwright install`).
# - tests/requirements.txt into the project's own .venv (created here on the first run), again only when a requirements
#   file changes; an active virtual environment is left as it is (its torch would be replaced by the pinned CPU wheel).
#   pytest runs in .venv, and so does the server the browser tests start with start.sh (RL_LOGGING_BOARD_PYTHON).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

as_root() {
  if [ "$(id -u)" = 0 ]; then
    "$@"
  elif command -v sudo >/dev/null; then
    sudo "$@"
  else
    echo "tests/run.sh: this needs root: $*" >&2
    return 1
  fi
}

apt_install() {
  echo "tests/run.sh: apt-get install $*" >&2
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# The Debian packages the browser tests need that are not installed, one a line. fc-list's output is taken
# whole before it is searched: `fc-list | grep -q ...` under pipefail fails whenever grep exits at the first
# match before fc-list has written everything (fc-list dies of SIGPIPE).
missing_system_packages() {
  local fonts
  fonts="$(fc-list : family 2>/dev/null || true)"
  fonts="${fonts,,}"
  [ -x /usr/bin/chromium ] || echo chromium
  [[ $fonts == *"noto sans cjk"* ]] || echo fonts-noto-cjk
  [[ $fonts == *"noto color emoji"* ]] || echo fonts-noto-color-emoji
}

missing="$(missing_system_packages)"
if [ -n "$missing" ]; then
  # shellcheck disable=SC2086  # one package a word
  apt_install $missing
fi

if [ -n "${VIRTUAL_ENV:-}" ] && [ "$(realpath -m "$VIRTUAL_ENV")" != "$(realpath -m "$PWD/.venv")" ]; then
  echo "tests/run.sh: testing in $PWD/.venv, not in the active $VIRTUAL_ENV, which is left as it is" >&2
fi
export VIRTUAL_ENV="$PWD/.venv"
if ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
  echo "tests/run.sh: creating the virtual environment .venv (first run only)" >&2
  rm -rf .venv  # a half-made one (an interrupted first run, or python3-venv missing then)
  if ! python3 -m venv .venv; then
    rm -rf .venv
    apt_install python3-venv  # Debian/Ubuntu ship Python's venv module as a package of its own
    python3 -m venv .venv
  fi
fi
export PATH="$VIRTUAL_ENV/bin:$PATH"
stamp="$VIRTUAL_ENV/.rl-logging-board-test-requirements"
want="$(sha256sum requirements.txt tests/requirements.txt)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  echo "tests/run.sh: installing tests/requirements.txt into $VIRTUAL_ENV (first run, or a requirements file changed)" >&2
  python -m pip install -q --disable-pip-version-check -r tests/requirements.txt
  printf '%s\n' "$want" >"$stamp"
  sha256sum requirements.txt >"$VIRTUAL_ENV/.rl-logging-board-requirements"  # start.sh's stamp: its requirements are in
fi

export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
python -m pytest "$@"
# The logger's tests again on the oldest TRL pyproject.toml claims (the run above has tests/requirements.txt's newest);
# skipped when arguments pick tests.
[ $# -gt 0 ] || bash tests/run_logger_tests_on_oldest_trl.sh
