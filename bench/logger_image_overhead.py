"""Measures what rollout logging with images costs per training step, on the tiny VLM example
(examples/train_grpo_tiny_vlm.py).

The same seeded GRPO run is trained with logging off and on, alternately (off-on, then on-off), in one process;
each optimizer step is timed from one step's end to the next, the first few left out (start-up). The logger's own
work is timed too: its code on the training thread (wall time), and the CPU time of the writer thread's work on the
images (reading each image object of each line, hashing each distinct one, writing each new one once) and the
lines. `--pool-size` sets how many distinct images the run
draws its prompts from: the default 24 soon has every image written; a pool as large as the run's prompts makes
nearly every image new, so each step writes its images.

    python bench/logger_image_overhead.py --steps 80 --repeats 4 --pool-size 24
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path[1:1] = [str(Path(__file__).resolve().parents[1] / "examples")]
# First: they set offline mode and find rollout_logger.
from measure_logging_overhead import StepTimer, time_logger_methods  # noqa: E402
from train_grpo_tiny_vlm import build_trainer, image_dataset, save_tiny_vlm  # noqa: E402

import rollout_logger.images  # noqa: E402
import rollout_logger.writer  # noqa: E402
from rollout_logger import RolloutLoggerCallback  # noqa: E402

SKIPPED_STEPS = 3  # the first steps' times include start-up


class WriterClock:
    """CPU seconds the writer thread spends on images (`ImageFiles.resolve`; of that, writing the distinct images'
    files: `ImageFiles._store`) and on serialising lines (`json_line`). CPU time, not wall time: the thread runs at a
    lower priority, so on busy cores it waits, which costs training nothing."""

    def __init__(self):
        self.seconds = {"images": 0.0, "image files": 0.0, "lines": 0.0}
        self._time(rollout_logger.images.ImageFiles, "resolve", "images")
        self._time(rollout_logger.images.ImageFiles, "_store", "image files")
        self._time(rollout_logger.writer, "json_line", "lines")

    def _time(self, owner, name: str, key: str) -> None:
        function = getattr(owner, name)

        def timed(*args, **kwargs):
            start = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[key] += time.thread_time() - start

        setattr(owner, name, timed)


def timed_run(model_dir, output_dir, steps, seed, pool_size, logging_on, clock) -> dict:
    os.environ["SAVE_ROLLOUT_DATA"] = "true" if logging_on else "false"
    dataset = image_dataset(2 * steps, seed, pool_size=pool_size)
    trainer = build_trainer(model_dir, output_dir, steps, seed, dataset=dataset)
    timer = StepTimer()
    trainer.add_callback(timer)
    callback = RolloutLoggerCallback(trainer=trainer)
    logger_time = time_logger_methods(callback)
    trainer.add_callback(callback)
    before = dict(clock.seconds)
    trainer.train()
    result = {"durations": timer.durations[SKIPPED_STEPS:], "logger": logger_time[0], "steps": steps}
    if logging_on:
        result.update({key: seconds - before[key] for key, seconds in clock.seconds.items()})
        result["files"] = len(list((callback.run_dir / "images").iterdir()))
        lines = [json.loads(line) for path in callback.run_dir.glob("rollout_data_*.jsonl") for line in path.open()]
        result["entries"] = sum(len(line["images"]) for line in lines)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--pool-size", type=int, default=24, help="distinct images the prompts are drawn from")
    parser.add_argument("--warmup-steps", type=int, default=40, help="the example's supervised warm-up")
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()

    clock = WriterClock()
    runs = {False: [], True: []}
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = save_tiny_vlm(Path(scratch) / "warm_model", options.warmup_steps, options.seed)
        for repeat in range(options.repeats):
            for logging_on in (False, True) if repeat % 2 == 0 else (True, False):
                output_dir = Path(scratch) / f"run_{repeat}_{logging_on}"
                run = timed_run(
                    model_dir, output_dir, options.steps, options.seed, options.pool_size, logging_on, clock
                )
                runs[logging_on].append(run)
                mode = "on" if logging_on else "off"
                print(f"run {repeat}, logging {mode}: {statistics.mean(run['durations']):.4f} s/step", flush=True)

    durations = {logging_on: [d for run in results for d in run["durations"]] for logging_on, results in runs.items()}
    on_runs = runs[True]
    steps = sum(run["steps"] for run in on_runs)
    entries = statistics.mean(run["entries"] for run in on_runs) / options.steps
    files = statistics.mean(run["files"] for run in on_runs)
    print(
        f"\n{options.steps} steps a run, {options.repeats} runs each way, pool of {options.pool_size} images: "
        f"{entries:.0f} images logged a step, {files:.0f} distinct images written a run"
    )
    print("\n| logging | steps timed | steps/s (mean) | s/step (mean) | s/step (median) |\n|---|---|---|---|---|")
    for logging_on, values in durations.items():
        mean, median = statistics.mean(values), statistics.median(values)
        print(f"| {'on' if logging_on else 'off'} | {len(values)} | {1 / mean:.3f} | {mean:.4f} | {median:.4f} |")
    for name, average in (("mean", statistics.mean), ("median", statistics.median)):
        off, on = average(durations[False]), average(durations[True])
        print(f"wall-clock overhead ({name}): {100 * (on - off) / off:+.2f}%")

    step_time = statistics.mean(durations[False])
    for name, seconds in (
        ("training thread", sum(run["logger"] for run in on_runs)),
        ("writer thread, images", sum(run["images"] for run in on_runs)),
        ("writer thread, lines", sum(run["lines"] for run in on_runs)),
    ):
        per_step = seconds / steps
        print(
            f"logger's own work, {name}: {1000 * per_step:.3f} ms/step ({100 * per_step / step_time:.2f}% of a step)"
        )
    written = sum(run["files"] for run in on_runs)
    writing = sum(run["image files"] for run in on_runs)
    rest = sum(run["images"] for run in on_runs) - writing
    print(f"  of the images: writing each distinct image once {1000 * writing / written:.2f} ms an image")
    print(
        f"  and the rest (reading every image of every line, hashing each distinct one) {1000 * rest / steps:.3f} "
        f"ms/step ({100 * rest / steps / step_time:.2f}% of a step)"
    )


if __name__ == "__main__":
    main()
