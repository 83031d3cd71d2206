#!/usr/bin/env bash
# Serve the board: bash start.sh [PORT] [ROOT] [-- PAGE OPTIONS]
#   PORT  default 8901 (or $RL_LOGGING_BOARD_PORT)
#   ROOT  folder whose sub-folders are runs, or an s3:// (gs://, az://, hf://) URL; default the bundled
#         rollout_samples/ (or $RL_LOGGING_BOARD_ROOT). S3: credentials from the usual AWS chain, AWS_ENDPOINT_URL for
#         an S3-compatible store
#   PAGE OPTIONS  after --, passed to the page: --tokenizer, --endpoint-url, --allow-any-root (docs/launch.md)
# It listens on 127.0.0.1 only; set RL_LOGGING_BOARD_ADDRESS=0.0.0.0 to serve other machines. Served so, the page asks
# for RL_LOGGING_BOARD_TOKEN (made here and printed with the link when unset) and opens only folders under ROOT
# (RL_LOGGING_BOARD_ALLOW_ANY_ROOT=1 lifts that); the link names RL_LOGGING_BOARD_HOST, else this machine's name.
# Python: the project's own .venv, created on the first run; an active virtual environment (a training one, say) is
# left as it is. requirements.txt is installed into .venv on the first run and again only when the file changes (a
# stamp file in it), so later starts install nothing. RL_LOGGING_BOARD_PYTHON=/path/to/python runs the board with
# that interpreter as it is, installing nothing (e.g. "$VIRTUAL_ENV/bin/python" for the active environment).
set -euo pipefail
project="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
given=()
page_options=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then
    shift
    page_options=("$@")
    break
  fi
  given+=("$1")
  shift
done
refuse() {
  echo "start.sh: $1 (usage: bash start.sh [PORT] [ROOT] [-- PAGE OPTIONS])" >&2
  exit 2
}
[ "${#given[@]}" -le 2 ] || refuse "more than a port and a root before --: ${given[*]}"
for argument in ${given[@]+"${given[@]}"}; do
  case "$argument" in -*) refuse "$argument before --: the page's options go after --" ;; esac
done
for option in ${page_options[@]+"${page_options[@]}"}; do
  case "$option" in --root | --root=*) refuse "--root after --: give ROOT as the second argument" ;; esac
done
port="${given[0]-${RL_LOGGING_BOARD_PORT:-8901}}"
number="${port#"${port%%[!0]*}"}"  # without leading zeros (08080 is 8080)
case "$port" in "" | *[!0-9]*) number="" ;; esac
case "$number" in "" | ??????*) refuse "the port is not a number from 1 to 65535: '$port'" ;; esac
[ "$number" -le 65535 ] || refuse "the port is not a number from 1 to 65535: '$port'"
port="$number"
root="${given[1]-${RL_LOGGING_BOARD_ROOT:-$project/rollout_samples}}"
[ -n "$root" ] || refuse "ROOT is empty"
case "$root" in
  *://*) ;;  # object storage (s3://bucket/prefix): a URL, not a path on this machine
  *) root="$(realpath -m "$root")" ;;
esac
address="${RL_LOGGING_BOARD_ADDRESS:-127.0.0.1}"
cd "$project"  # so Streamlit reads .streamlit/config.toml

if [ -n "${RL_LOGGING_BOARD_PYTHON:-}" ]; then
  python="$RL_LOGGING_BOARD_PYTHON"
else
  env="$project/.venv"
  python="$env/bin/python"
  if [ -n "${VIRTUAL_ENV:-}" ] && [ "$(realpath -m "$VIRTUAL_ENV")" != "$(realpath -m "$env")" ]; then
    echo "start.sh: running in $env, not in the active $VIRTUAL_ENV, which is left as it is" \
      "(RL_LOGGING_BOARD_PYTHON=\"\$VIRTUAL_ENV/bin/python\" runs the board there, installing nothing)" >&2
  fi
  stamp="$env/.rl-logging-board-requirements"
  want="$(sha256sum requirements.txt)"
  if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
    if ! "$python" -m pip --version >/dev/null 2>&1; then
      echo "start.sh: creating the virtual environment $env (first run only)" >&2
      rm -rf "$env"  # a half-made one (an interrupted first run, or python3-venv missing then)
      if ! command -v python3 >/dev/null || ! python3 -m venv "$env"; then
        rm -rf "$env"
        echo "start.sh: could not create $env with python3 -m venv. On Debian/Ubuntu install the venv module" \
          "(sudo apt install python3-venv), then run again." >&2
        exit 1
      fi
    fi
    echo "start.sh: installing requirements.txt into $env (first run, or requirements.txt changed)" >&2
    "$python" -m pip install --disable-pip-version-check -r requirements.txt >&2
    printf '%s\n' "$want" >"$stamp"
  fi
fi

# Served beyond this machine, Streamlit would look up the machine's external address for its start-up banner (a DNS
# query, then a request to checkip.amazonaws.com): the address users open is given instead (browser.serverAddress:
# RL_LOGGING_BOARD_HOST, else this machine's name). A page of another origin opening the board's socket made Streamlit
# look up both addresses to compare them with its origin; the preamble below answers that neither is known, so the
# server makes no outbound call, and such a page is refused.
served=()
case "$address" in
  127.0.0.1 | localhost | ::1)
    # Served to this machine alone, without a token: the page's socket answers only a page opened at this machine's own
    # names, so that a web site whose name is made to point here (DNS rebinding) cannot read the runs. A proxy that
    # forwards another name here (JupyterHub's, say) adds it: RL_LOGGING_BOARD_ALLOWED_HOSTS=name,name2.
    IFS=, read -r -a extra_hosts <<<"${RL_LOGGING_BOARD_ALLOWED_HOSTS:-}"
    for allowed in localhost 127.0.0.1 ::1 ${extra_hosts[@]+"${extra_hosts[@]}"}; do
      served+=(--server.allowedHosts "$allowed")
    done
    ;;
  *)
    if [ -z "${RL_LOGGING_BOARD_TOKEN:-}" ]; then
      RL_LOGGING_BOARD_TOKEN="$("$python" -c 'import secrets; print(secrets.token_urlsafe(18))')"
      export RL_LOGGING_BOARD_TOKEN
    fi
    host="${RL_LOGGING_BOARD_HOST:-$(hostname)}"
    served=(--browser.serverAddress "$host" --server.allowedHosts "*")  # any name users open it by: the token guards it
    echo "start.sh: served beyond this machine; open http://$host:$port/?token=$RL_LOGGING_BOARD_TOKEN" >&2
    ;;
esac

# Streamlit runs the page's file afresh for each session; its libraries (numpy, pandas, pyarrow, the engine) are
# imported here first, and the worker processes started, so the first page after a (re)start does not wait for them.
# The page module imported outside a session warns that its caches have no server yet: those warnings are not shown.
# Streamlit's one-time check, at a session's first element, that it is not run from a bare Python prompt reads the
# source of every frame on the stack (0.1 s): it is answered here instead.
# shellcheck disable=SC2016
exec "$python" -c '
import logging, sys
logging.disable(logging.WARNING)
import rl_logging_board
logging.disable(logging.NOTSET)
import streamlit.delta_generator
import streamlit.emojis  # the page icon is checked against its pattern: compiling it took the first page 50-120 ms
import streamlit.net_util
streamlit.net_util.get_external_ip = streamlit.net_util.get_internal_ip = lambda: None  # no outbound lookup: see served=() above
from rl_board.reading.workers import WORKERS, worker_pool
from streamlit.web.cli import main
if WORKERS > 1:
    worker_pool()
streamlit.delta_generator._use_warning_has_been_displayed = True
sys.argv[0] = "streamlit"
sys.exit(main())
' run rl_logging_board.py \
  --server.port "$port" --server.address "$address" --server.headless true \
  --browser.gatherUsageStats false ${served[@]+"${served[@]}"} -- --root "$root" ${page_options[@]+"${page_options[@]}"}
