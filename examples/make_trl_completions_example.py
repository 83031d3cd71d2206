"""Makes rollout_samples/from_trl_log_completions/: what TRL's own completion logging writes, from a real GRPO run.

The tiny offline sorting run of tests/support/trl_completions_run.py (plain-text prompts; reward functions sorted_digits and
same_digits weighted 1.0 and 0.5; same_digits also logs the columns `words` and `verdict` through TRL's `log_extra`)
trains into a temporary folder with `GRPOConfig(log_completions=True)`. Only TRL's
completions/completions_<step:05d>.parquet files and each checkpoint-<step>/trainer_state.json are copied, in the
same layout; the folder is replaced. It takes a few seconds on 2 CPU cores, offline.

    python examples/make_trl_completions_example.py --steps 8 --save-steps 3
"""

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here needs the Hugging Face Hub
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))  # `tests` and `examples` as packages of this checkout

from tests.support.trl_completions_run import trl_completions_run  # noqa: E402

DESTINATION = PROJECT / "rollout_samples" / "from_trl_log_completions"


# The viewer needs TRL's completion tables and logged metrics, not the weights, optimizer or tokenizer.
def copy_logs(run_dir: Path, destination: Path) -> list[Path]:
    shutil.rmtree(destination, ignore_errors=True)
    copied = []
    for source in sorted(run_dir.glob("completions/completions_*.parquet")) + sorted(
        run_dir.glob("checkpoint-*/trainer_state.json")
    ):
        target = destination / source.relative_to(run_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        copied.append(Path(shutil.copy2(source, target)))
    return copied


# Trains in a temporary folder and keeps only the logs.
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8, help="GRPO optimizer steps, one completions file each")
    parser.add_argument("--save-steps", type=int, default=3, help="a checkpoint's trainer_state.json every N steps")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trl_completions_") as temporary:
        run_dir = trl_completions_run(Path(temporary) / "run", max_steps=options.steps, save_steps=options.save_steps)
        for path in copy_logs(run_dir, DESTINATION):
            print(path.relative_to(PROJECT))


if __name__ == "__main__":
    main()
