"""Measures what rollout logging costs per training step, on the tiny example run (see train_grpo_tiny.py).

The same seeded GRPO run is trained with logging off and on, alternately (off-on, then on-off), in one process;
each optimizer step is timed from one step's end to the next. Both runs train identically (same losses), so the
difference is the logger's cost. On a busy machine that difference drowns in noise, so the logger's own work is also
timed directly: its code on the training thread, and serialising and writing the lines and their summaries (which its
writer thread does).

With `--compare sampler_logprobs`, both runs log, without and with the sampler's log-probs (the callback's
`sampler_logprobs` option), and the time `generate` spends in the recorder of those log-probs is timed too.
Whole runs are at the mercy of a shared machine's load, which changes from one run to the next; so `generate` is
also timed on a training batch's prompts alternately without and with the recorder, call by call. With `--top-p`
below 1 the runs sample from the top-p share, and the recorder also records the mass top-p kept
(`sampler_kept_logmass`), whose part of its time is timed apart; `--compare kept_logmass` trains with the sampler's
log-probs, alternately without and with the kept mass (the recorder as it was before it recorded it, and as it is).

    python examples/measure_logging_overhead.py --steps 300 --repeats 4 --seed 0
    python examples/measure_logging_overhead.py --compare sampler_logprobs --steps 300 --repeats 4 --seed 0
    python examples/measure_logging_overhead.py --compare sampler_logprobs --steps 300 --repeats 4 --seed 0 --top-p 0.9
    python examples/measure_logging_overhead.py --compare kept_logmass --steps 300 --repeats 4 --seed 0 --top-p 0.9
"""

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
import unittest.mock
from collections import defaultdict
from pathlib import Path

import torch
from train_grpo_tiny import build_trainer, save_warm_model  # before transformers: offline mode, rollout_logger found
from transformers import TrainerCallback

from rl_board.reading.summaries import batch_record
from rollout_logger import RolloutLoggerCallback, sampler
from rollout_logger.sampler import GenerateLogprobs, SampledTokenLogprobs
from rollout_logger.writer import json_line


class StepTimer(TrainerCallback):
    """Seconds between consecutive ends of optimizer steps; and, of each total `totals` gives (the logger's work timed
    directly), what it grew by in each of those steps (`per_step`): a median of those is not inflated by the few steps
    another job on a shared machine slowed down, as a mean is."""

    def __init__(self, totals=dict):
        self.durations, self._last = [], None
        self.totals, self.per_step, self._last_totals = totals, defaultdict(list), None

    def on_step_end(self, args, state, control, **kwargs):
        now, totals = time.perf_counter(), self.totals()
        if self._last is not None:
            self.durations.append(now - self._last)
            for name, total in totals.items():
                self.per_step[name].append(total - self._last_totals[name])
        self._last, self._last_totals = now, totals


# The callback's methods that run on the training thread, wrapped by time_logger_methods.
TRAINING_THREAD_METHODS = ("_start_records", "_finish_pass", "on_step_end", "on_log", "on_save")


def time_logger_methods(callback: RolloutLoggerCallback) -> list[float]:
    """Wraps (on this instance) the methods where the logger works on the training thread; returns the time spent."""
    spent = [0.0]
    for name in TRAINING_THREAD_METHODS:
        method = getattr(callback, name)

        def timed(*args, _method=method, **kwargs):
            start = time.perf_counter()
            try:
                return _method(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start

        setattr(callback, name, timed)
    return spent


# The recorder's methods `generate` calls: the sampled tokens' log-probs at every step, and, where a warper truncates
# (top-k, top-p...), their log-probs before it (for the kept mass, `sampler_kept_logmass`).
RECORDER_METHODS = {"__call__": 0, "before_truncation": 1}


@contextlib.contextmanager
def timed_logits_processor(spent: list[float]):
    """Adds to `spent[0]` the time of each call of the sampler's log-probs recorder, inside `generate`, and to
    `spent[1]` that of its kept-mass part. This timing patches the recorder's class for the block: the logger itself
    changes no class."""
    methods = {
        name: vars(SampledTokenLogprobs)[name] for name in RECORDER_METHODS if name in vars(SampledTokenLogprobs)
    }

    def timed(method, name):
        def call(self, *args):
            start = time.perf_counter()
            try:
                return method(self, *args)
            finally:
                elapsed = time.perf_counter() - start
                spent[0] += elapsed
                spent[1] += elapsed * RECORDER_METHODS[name]

        return call

    for name, method in methods.items():
        setattr(SampledTokenLogprobs, name, timed(method, name))
    try:
        yield
    finally:
        for name, method in methods.items():
            setattr(SampledTokenLogprobs, name, method)


def writing_time(run_dir: Path) -> float:
    """Seconds to do again what the writer thread did with a run's lines, a step's batch at a time: serialise and
    write them, and make their summaries and texts records (the board's summary of each line, `summaries=True`)."""
    spent = 0.0
    with tempfile.TemporaryFile() as file:
        for path in run_dir.glob("rollout_data_rank_*.jsonl"):
            batches = defaultdict(list)
            for line in path.read_bytes().splitlines(keepends=True):
                batches[json.loads(line)["step"]].append(line)
            written = 0
            for lines in batches.values():
                records = [json.loads(line) for line in lines]
                start = time.perf_counter()
                data = b"".join(json_line(record) for record in records)
                file.write(data)
                file.flush()
                batch_record(data, written, 0)
                spent += time.perf_counter() - start
                written += len(data)
    return spent


def timed_run(
    model_dir: Path,
    output_dir: Path,
    steps: int,
    seed: int,
    logging_on: bool,
    sampler_logprobs: bool = True,
    top_p: float = 1.0,
    kept_logmass: bool = True,
) -> dict:
    os.environ["SAVE_ROLLOUT_DATA"] = "true" if logging_on else "false"
    trainer = build_trainer(model_dir, output_dir, steps, seed, top_p=top_p)
    timer = StepTimer()
    trainer.add_callback(timer)
    callback = RolloutLoggerCallback(trainer=trainer, sampler_logprobs=sampler_logprobs)
    logger_time = time_logger_methods(callback)
    trainer.add_callback(callback)
    processor_time = [0.0, 0.0]
    timer.totals = lambda: {
        "training thread": logger_time[0] + processor_time[0],
        "of it, in generate's recorder": processor_time[0],
        "of that, the kept mass": processor_time[1],
    }
    with timed_logits_processor(processor_time), contextlib.nullcontext() if kept_logmass else without_kept_mass():
        trainer.train()
    return {
        "durations": timer.durations,
        "per step": timer.per_step,
        "steps": steps,
        "training thread": logger_time[0] + processor_time[0],
        "of it, in generate's recorder": processor_time[0],
        "of that, the kept mass": processor_time[1],
        "writer thread": writing_time(callback.run_dir) if logging_on else 0.0,
    }


def without_kept_mass():
    """The recorder as it was before it recorded the kept mass: no truncating warper found, the processors run as one
    list (a patch of the logger's module for the block, for this measurement only)."""
    return unittest.mock.patch.object(sampler, "truncation_start", lambda processors: (None, ""))


def generate_times(
    model_dir: Path, output_dir: Path, calls: int, seed: int, top_p: float = 1.0
) -> tuple[float, float, float | None]:
    """Seconds of `generate` on a training batch's prompts, as TRL calls it, without and with the sampler's log-probs
    recorder, alternately, call by call, each pair on the same seed: the median without, and the median of each pair's
    difference. Where `generate` truncates (`top_p` < 1), each round has a third call, the recorder without the kept
    mass (as the logger was before it recorded it), in turn before and after the full recorder: the median of the
    differences the kept mass makes (None otherwise)."""
    trainer = build_trainer(model_dir, output_dir, 1, seed, top_p=top_p)
    prompts = trainer.train_dataset["prompt"][: trainer.args.per_device_train_batch_size // trainer.num_generations]
    prompts = [prompt for prompt in prompts for _ in range(trainer.num_generations)]
    inputs = trainer.processing_class(prompts, return_tensors="pt", padding=True, padding_side="left")
    recorder = GenerateLogprobs(trainer.model)
    arms = ("off", "on", "on without the kept mass") if top_p < 1 else ("off", "on")
    times = {arm: [] for arm in arms}
    with torch.no_grad():
        for call in range(len(arms) * calls):
            order = arms if call // len(arms) % 2 == 0 else arms[:1] + arms[:0:-1]  # each round's two recorders swapped
            arm = order[call % len(arms)]
            torch.manual_seed(seed + call // len(arms))
            without = without_kept_mass() if arm == "on without the kept mass" else contextlib.nullcontext()
            start = time.perf_counter()
            with recorder.recording(trainer.model) if arm != "off" else contextlib.nullcontext(), without:
                trainer.model.generate(**inputs, generation_config=trainer.generation_config)
            times[arm].append(time.perf_counter() - start)
    off = statistics.median(times["off"])
    added = statistics.median(on - off for off, on in zip(times["off"], times["on"]))
    if len(arms) == 2:
        return off, added, None
    kept = statistics.median(on - without for without, on in zip(times["on without the kept mass"], times["on"]))
    return off, added, kept


OWN_WORK = ("training thread", "of it, in generate's recorder", "of that, the kept mass", "writer thread")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--warmup-steps", type=int, default=60, help="the example's supervised warm-up")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--top-p", type=float, default=1.0, help="sample from the top-p share (< 1: the kept mass is recorded too)"
    )
    parser.add_argument(
        "--compare",
        choices=("logging", "sampler_logprobs", "kept_logmass"),
        default="logging",
        help="logging: off against on (default options); sampler_logprobs: logging on, without against with; "
        "kept_logmass (with --top-p < 1): logging the sampler's log-probs, without against with the kept mass",
    )
    options = parser.parse_args()
    if options.compare == "kept_logmass" and options.top_p >= 1:
        parser.error("--compare kept_logmass needs --top-p below 1: without truncation there is no kept mass")

    runs = {False: [], True: []}  # by whether the compared setting is on
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = save_warm_model(Path(scratch) / "warm_model", options.warmup_steps, options.seed)
        for repeat in range(options.repeats):
            for on in (False, True) if repeat % 2 == 0 else (True, False):
                if options.compare == "logging":
                    settings = {"logging_on": on}
                elif options.compare == "sampler_logprobs":
                    settings = {"logging_on": True, "sampler_logprobs": on}
                else:
                    settings = {"logging_on": True, "kept_logmass": on}
                output_dir = Path(scratch) / f"run_{repeat}_{on}"
                run = timed_run(model_dir, output_dir, options.steps, options.seed, top_p=options.top_p, **settings)
                runs[on].append(run)
                mode = "on" if on else "off"
                mean = statistics.mean(run["durations"])
                print(f"run {repeat}, {options.compare} {mode}: {mean:.5f} s/step", flush=True)
        if options.compare != "logging":
            generate = generate_times(
                model_dir, Path(scratch) / "generate", 100 * options.repeats, options.seed, options.top_p
            )

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
    # The same per step, as the median of the steps (the writer thread's work is timed apart, not per step).
    print(f"\n| median of the steps | {options.compare} off, ms | on, ms | added: % of a step |\n|---|---|---|---|")
    for name in OWN_WORK[:-1]:
        off, on = (statistics.median(t for run in runs[arm] for t in run["per step"][name]) for arm in runs)
        print(f"| {name} | {1000 * off:.3f} | {1000 * on:.3f} | {100 * (on - off) / step_time:.2f}% |")
    if options.compare != "logging":
        (off, added, kept), pairs = generate, 100 * options.repeats
        print(
            f"\ngenerate on a training batch, {pairs} times without and with the recorder, alternately: median "
            f"{1000 * off:.3f} ms without, {1000 * added:+.3f} ms with (median of the pairs' differences): "
            f"{100 * added / step_time:+.2f}% of a step"
        )
        if kept is not None:
            print(
                f"of it, the kept mass (the recorder with it against without it, {pairs} times each, alternately): "
                f"{1000 * kept:+.3f} ms, {100 * kept / step_time:+.2f}% of a step"
            )


if __name__ == "__main__":
    main()
