"""Makes rollout_samples/from_verl_rollout_data/ and from_verl_validation_data/: verl's generation dumps, as verl writes them.

verl writes one `<global_step>.jsonl` per step into `trainer.rollout_data_dir` (training, from step 1) and
`trainer.validation_data_dir` (validation, step 0 before training, then every test_freq steps), with the keys input,
output, gts, score, step and each reward_extra_info list (`RayPPOTrainer._dump_generations`). The writer here,
tests/support/other_trainers.py's `write_verl_dump`, is that function line for line; the run is a toy math task with `acc`
and `pred` extras. verl itself needs GPUs and Ray, which this project's machine does not have.

    python examples/make_verl_dump_example.py --steps 12
"""

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))  # `tests` as a package of this checkout

from tests.support.other_trainers import verl_run  # noqa: E402

DESTINATIONS = {"rollout": PROJECT / "rollout_samples" / "from_verl_rollout_data", "validation": PROJECT / "rollout_samples" / "from_verl_validation_data"}


# The two dump folders of one run, each bundled as a run of its own (a verl user opens either folder, or their parent).
def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        verl_run(folder, steps=args.steps, n=4, prompts_per_step=4, validation_steps=tuple(range(0, args.steps + 1, 4)))
        for name, destination in DESTINATIONS.items():
            shutil.rmtree(destination, ignore_errors=True)
            shutil.copytree(Path(folder) / name, destination)
            print(f"{destination}: {len(list(destination.glob('*.jsonl')))} files")


if __name__ == "__main__":
    main()
