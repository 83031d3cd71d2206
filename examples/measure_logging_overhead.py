"""Measures what rollout logging costs per training step, on the tiny example run (see train_grpo_tiny.py).

The same seeded GRPO run is trained with logging off and on, alternately (off-on, then on-off), in one process;
each optimizer step is timed from one step's end to the next. Both runs train identically (same losses), so the
difference is the logger's cost. On a busy machine that difference drowns in noise, so the logger's own work is also
timed directly: its code on the training thread, and serialising and writing the lines (which its writer thread does).

With `--compare sampler_logprobs`, both runs log, without and with the sampler's log-probs (the callback's
`sampler_logprobs` option), and the time `generate` spends in the recorder of those log-probs is timed too.
Whole runs are at the mercy of a shared machine's load, which changes from one run to the next; so `generate` is
also timed on a training batch's prompts alternately without and with the recorder, call by call.

    python examples/measure_logging_overhead.py --steps 300 --repeats 4 --seed 0
    python examples/measure_logging_overhead.py --compare sampler_logprobs --steps 300 --repeats 4 --seed 0
"""

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from train_grpo_tiny import build_trainer, save_warm_model  # before transformers: offline mode, rollout_logger found
from transformers import TrainerCallback

from rollout_logger import RolloutLoggerCallback
from rollout_logger.sampler import GenerateLogprobs, SampledTokenLogprobs
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


@contextlib.contextmanager
def timed_logits_processor(spent: list[float]):
    """Adds to `spent[0]` the time of each call of the sampler's log-probs recorder, inside `generate`. This timing
    patches the recorder's class for the block: the logger itself changes no class."""
    call = SampledTokenLogprobs.__call__

    def timed(self, input_ids, scores):
        start = time.perf_counter()
        try:
            return call(self, input_ids, scores)
        finally:
            spent[0] += time.perf_counter() - start

    SampledTokenLogprobs.__call__ = timed
    try:
        yield
    finally:
        SampledTokenLogprobs.__call__ = call


def writing_time(run_dir: Path) -> float:
    """Seconds to serialise and write a run's lines again, as the writer thread did."""
    lines = [line for path in run_dir.glob("*.jsonl") for line in path.read_bytes().splitlines()]
    records = [json.loads(line) for line in lines]
    with tempfile.TemporaryFile() as file:
        start = time.perf_counter()
        file.write(b"".join(json_line(record) for record in records))
        file.flush()
        return time.perf_counter() - start


def timed_run(
    model_dir: Path, output_dir: Path, steps: int, seed: int, logging_on: bool, sampler_logprobs: bool = True
) -> dict:
    os.environ["SAVE_ROLLOUT_DATA"] = "true" if logging_on else "false"
    trainer = build_trainer(model_dir, output_dir, steps, seed)
    timer = StepTimer()
    trainer.add_callback(timer)
    callback = RolloutLoggerCallback(trainer=trainer, sampler_logprobs=sampler_logprobs)
    logger_time = time_logger_methods(callback)
    trainer.add_callback(callback)
    processor_time = [0.0]
    with timed_logits_processor(processor_time):
        trainer.train()
    return {
        "durations": timer.durations,
        "steps": steps,
        "training thread": logger_time[0] + processor_time[0],
        "of it, in generate's recorder": processor_time[0],
        "writer thread": writing_time(callback.run_dir) if logging_on else 0.0,
    }


def generate_times(model_dir: Path, output_dir: Path, calls: int, seed: int) -> tuple[float, float]:
    """Seconds of `generate` on a training batch's prompts, as TRL calls it, without and with the sampler's log-probs
    recorder, alternately, call by call, each pair on the same seed: the median without, and the median of each pair's
    difference."""
    trainer = build_trainer(model_dir, output_dir, 1, seed)
    prompts = trainer.train_dataset["prompt"][: trainer.args.per_device_train_batch_size // trainer.num_generations]
    prompts = [prompt for prompt in prompts for _ in range(trainer.num_generations)]
    inputs = trainer.processing_class(prompts, return_tensors="pt", padding=True, padding_side="left")
    recorder = GenerateLogprobs(trainer.model)
    times = {False: [], True: []}
    with torch.no_grad():
        for call in range(2 * calls):
            on = call % 2 == 1
            torch.manual_seed(seed + call // 2)
            start = time.perf_counter()
            with recorder.recording(trainer.model) if on else contextlib.nullcontext():
                trainer.model.generate(**inputs, generation_config=trainer.generation_config)
            times[on].append(time.perf_counter() - start)
    return statistics.median(times[False]), statistics.median(on - off for off, on in zip(times[False], times[True]))


OWN_WORK = ("training thread", "of it, in generate's recorder", "writer thread")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--warmup-steps", type=int, default=60, help="the example's supervised warm-up")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--compare",
        choices=("logging", "sampler_logprobs"),
        default="logging",
        help="logging: off against on (default options); sampler_logprobs: logging on, without against with",
    )
    options = parser.parse_args()

    runs = {False: [], True: []}  # by whether the compared setting is on
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = save_warm_model(Path(scratch) / "warm_model", options.warmup_steps, options.seed)
        for repeat in range(options.repeats):
            for on in (False, True) if repeat % 2 == 0 else (True, False):
                if options.compare == "logging":
                    settings = {"logging_on": on}
                else:
                    settings = {"logging_on": True, "sampler_logprobs": on}
                output_dir = Path(scratch) / f"run_{repeat}_{on}"
                run = timed_run(model_dir, output_dir, options.steps, options.seed, **settings)
                runs[on].append(run)
                mode = "on" if on else "off"
                mean = statistics.mean(run["durations"])
                print(f"run {repeat}, {options.compare} {mode}: {mean:.5f} s/step", flush=True)
        if options.compare == "sampler_logprobs":
            generate = generate_times(model_dir, Path(scratch) / "generate", 100 * options.repeats, options.seed)

    durations = {on: [d for run in results for d in run["durations"]] for on, results in runs.items()}
    print(f"\n| {options.compare} | steps timed | mean s/step | median s/step |\n|---|---|---|---|")
    for on, values in durations.items():
        mean, median = statistics.mean(values), statistics.median(values)
        print(f"| {'on' if on else 'off'} | {len(values)} | {mean:.5f} | {median:.5f} |")
    for name, average in (("mean", statistics.mean), ("median", statistics.median)):
        off, on = average(durations[False]), average(durations[True])
        print(f"wall-clock overhead ({name}): {100 * (on - off) / off:+.2f}%")

    # The logger's own work, timed directly: what the compared setting adds per step, against the median step without
    # it (a spike of the machine's load inflates the mean).
    step_time = statistics.median(durations[False])
    print(f"\n| logger's own work | {options.compare} off, ms/step | on, ms/step | added: % of a step |")
    print("|---|---|---|---|")
    for name in OWN_WORK:
        off, on = (sum(run[name] for run in runs[arm]) / sum(run["steps"] for run in runs[arm]) for arm in runs)
        print(f"| {name} | {1000 * off:.3f} | {1000 * on:.3f} | {100 * (on - off) / step_time:.2f}% |")
    if options.compare == "sampler_logprobs":
        (off, added), pairs = generate, 100 * options.repeats
        print(
            f"\ngenerate on a training batch, {pairs} times without and with the recorder, alternately: median "
            f"{1000 * off:.3f} ms without, {1000 * added:+.3f} ms with (median of the pairs' differences): "
            f"{100 * added / step_time:+.2f}% of a step"
        )


if __name__ == "__main__":
    main()
