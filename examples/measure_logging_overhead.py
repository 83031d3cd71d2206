"""Measures what rollout logging costs per training step, on the tiny example run (see train_grpo_tiny.py).

The same seeded GRPO run is trained with logging off and on, alternately (off-on, then on-off), in one process;
each optimizer step is timed from one step's end to the next. Both runs train identically (same losses), so the
difference is the logger's cost. On a busy machine that difference drowns in noise, so the logger's own work is also
timed directly: its code on the training thread, and serialising and writing the lines (which its writer thread does).

    python examples/measure_logging_overhead.py --steps 300 --repeats 4 --seed 0
"""

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from train_grpo_tiny import build_trainer, save_warm_model  # first: it sets offline mode and finds rollout_logger
from transformers import TrainerCallback

from rollout_logger import RolloutLoggerCallback
from rollout_logger.writer import json_line


class StepTimer(TrainerCallback):
    """Seconds between consecutive ends of optimizer steps."""

    def __init__(self):
        self.durations, self._last = [], None

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        if self._last is not None:
            self.durations.append(now - self._last)
        self._last = now


def time_logger_methods(callback: RolloutLoggerCallback) -> list[float]:
    """Wraps (on this instance) the methods where the logger works on the training thread; returns the time spent."""
    spent = [0.0]
    for name in ("_start_records", "_finish_records", "on_step_end", "on_log", "on_save"):
        method = getattr(callback, name)

        def timed(*args, _method=method, **kwargs):
            start = time.perf_counter()
            try:
                return _method(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start

        setattr(callback, name, timed)
    return spent


def writing_time(run_dir: Path) -> float:
    """Seconds to serialise and write a run's lines again, as the writer thread did."""
    lines = [line for path in run_dir.glob("*.jsonl") for line in path.read_bytes().splitlines()]
    records = [json.loads(line) for line in lines]
    with tempfile.TemporaryFile() as file:
        start = time.perf_counter()
        file.write(b"".join(json_line(record) for record in records))
        file.flush()
        return time.perf_counter() - start


def timed_run(model_dir: Path, output_dir: Path, steps: int, seed: int, logging_on: bool) -> dict:
    os.environ["SAVE_ROLLOUT_DATA"] = "true" if logging_on else "false"
    trainer = build_trainer(model_dir, output_dir, steps, seed)
    timer = StepTimer()
    trainer.add_callback(timer)
    callback = RolloutLoggerCallback(trainer=trainer)
    logger_time = time_logger_methods(callback)
    trainer.add_callback(callback)
    trainer.train()
    result = {"durations": timer.durations, "logger": logger_time[0], "steps": steps}
    if logging_on:
        result["writer"] = writing_time(callback.run_dir)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--warmup-steps", type=int, default=60, help="the example's supervised warm-up")
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()

    runs = {False: [], True: []}
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = save_warm_model(Path(scratch) / "warm_model", options.warmup_steps, options.seed)
        for repeat in range(options.repeats):
            for logging_on in (False, True) if repeat % 2 == 0 else (True, False):
                output_dir = Path(scratch) / f"run_{repeat}_{logging_on}"
                run = timed_run(model_dir, output_dir, options.steps, options.seed, logging_on)
                runs[logging_on].append(run)
                mode = "on" if logging_on else "off"
                print(f"run {repeat}, logging {mode}: {statistics.mean(run['durations']):.5f} s/step", flush=True)

    durations = {logging_on: [d for run in results for d in run["durations"]] for logging_on, results in runs.items()}
    print("\n| logging | steps timed | mean s/step | median s/step |\n|---|---|---|---|")
    for logging_on, values in durations.items():
        mean, median = statistics.mean(values), statistics.median(values)
        print(f"| {'on' if logging_on else 'off'} | {len(values)} | {mean:.5f} | {median:.5f} |")
    for name, average in (("mean", statistics.mean), ("median", statistics.median)):
        off, on = average(durations[False]), average(durations[True])
        print(f"wall-clock overhead ({name}): {100 * (on - off) / off:+.2f}%")

    steps = sum(run["steps"] for run in runs[True])
    step_time = statistics.mean(durations[False])
    for name, seconds in (
        ("training thread", sum(run["logger"] for run in runs[True])),
        ("writer thread", sum(run["writer"] for run in runs[True])),
    ):
        per_step = seconds / steps
        print(
            f"logger's own work, {name}: {1000 * per_step:.3f} ms/step ({100 * per_step / step_time:.2f}% of a step)"
        )


if __name__ == "__main__":
    main()
