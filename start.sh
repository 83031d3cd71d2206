#!/usr/bin/env bash
# Serve the board: bash start.sh [PORT] [ROOT]
#   PORT  default 8901 (or $RL_LOGGING_BOARD_PORT)
#   ROOT  folder whose sub-folders are runs; default the bundled rollout_samples/ (or $RL_LOGGING_BOARD_ROOT)
# It listens on 127.0.0.1 only; set RL_LOGGING_BOARD_ADDRESS=0.0.0.0 to serve other machines.
set -euo pipefail
project="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
port="${1:-${RL_LOGGING_BOARD_PORT:-8901}}"
root="$(realpath -m "${2:-${RL_LOGGING_BOARD_ROOT:-$project/rollout_samples}}")"
address="${RL_LOGGING_BOARD_ADDRESS:-127.0.0.1}"
cd "$project"  # so Streamlit reads .streamlit/config.toml
exec python -m streamlit run rl_logging_board.py \
  --server.port "$port" --server.address "$address" --server.headless true \
  --browser.gatherUsageStats false -- --root "$root"
