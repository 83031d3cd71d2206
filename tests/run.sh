#!/usr/bin/env bash
# Install what the tests need on a fresh machine (as root), then run every test.
# Chromium comes from Debian; Playwright only drives it (never `playwright install`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! [ -x /usr/bin/chromium ] || ! fc-list 2>/dev/null | grep -qi "Noto Sans CJK"; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-cjk fonts-noto-color-emoji >/dev/null
fi
python -m pip install -q --disable-pip-version-check -r tests/requirements.txt
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
python -m pytest "$@"
