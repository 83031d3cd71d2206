#!/usr/bin/env bash
# Run the rollout logger's tests on the oldest TRL that pyproject.toml claims (the `trl>=X` of its dependencies):
#   bash tests/run_logger_tests_on_oldest_trl.sh [pytest arguments]
# The test environment (tests/requirements.txt) has the newest claimed TRL. This installs TRL X alone, without its
# dependencies, into .test_envs/trl-X (git-ignored, kept for the next run) and puts it in front of that environment
# on PYTHONPATH, so these tests, and the processes they start, import TRL X and everything else as before.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

oldest="$(sed -n 's/^ *"trl>=\([0-9.]*\).*/\1/p' pyproject.toml)"
if [ -z "$oldest" ]; then
  echo "tests/run_logger_tests_on_oldest_trl.sh: no \"trl>=...\" in pyproject.toml's dependencies" >&2
  exit 1
fi
overlay="$PWD/.test_envs/trl-$oldest"
if ! [ -d "$overlay/trl" ]; then
  echo "tests/run_logger_tests_on_oldest_trl.sh: installing trl==$oldest into $overlay" >&2
  rm -rf "$overlay" "$overlay.partial"
  python -m pip install -q --disable-pip-version-check --no-deps --target "$overlay.partial" "trl==$oldest"
  mv "$overlay.partial" "$overlay"  # only a whole install counts
fi

export PYTHONPATH="$overlay${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
python - "$overlay" <<'EOF'
import sys, trl
assert trl.__file__.startswith(sys.argv[1]), f"TRL {trl.__version__} is imported from {trl.__file__}"
print(f"TRL {trl.__version__} from {trl.__file__}", file=sys.stderr)
EOF
python -m pytest tests/logger "$@"
