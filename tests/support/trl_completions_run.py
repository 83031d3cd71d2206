"""Real completion logs of TRL's GRPOTrainer (`GRPOConfig(log_completions=True)`) from a tiny offline run.

With `log_completions=True`, TRL's `GRPOTrainer.log()` (trl/trainer/grpo_trainer.py) writes, at every logging step,
`<output_dir>/completions/completions_<global_step:05d>.parquet` (the folder is made in `GRPOTrainer.__init__`):
one row per sample of the latest generation batch, with the columns `step` (the global step at logging time),
`prompt`, `completion` (strings, or lists of chat messages for a conversational dataset), one column per reward
function, named after the function, holding its unweighted reward, the columns reward functions added with the
`log_extra(column, values)` callable that `GRPOTrainer._calculate_rewards` passes them (sorted by name), and
`advantage`. The rows come from deques of `generation_batch_size` entries, so a file holds only the last generation
batch before it is written, in TRL's group order (each group `num_generations` consecutive rows); a step that trains on
a batch generated before (`num_iterations > 1`) writes that batch's rows again; an evaluation's log() rewrites the
file of its step with eval samples. With
`save_strategy="steps"`, each `<output_dir>/checkpoint-<step>/trainer_state.json` holds the logged metrics
(`log_history`) up to that step.
"""

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import datasets
import pyarrow.parquet

from examples import train_grpo_tiny
from rollout_logger import RolloutLoggerCallback
from tests.support.logger_runs import make_trainer

EXTRA_COLUMNS = ("words", "verdict")  # what `same_digits` adds to the completions table


# Says, for the completions table, what a completion did with its prompt's digits.
def verdict(prompt, completion) -> str:
    written, wanted = train_grpo_tiny._text(completion).split(), train_grpo_tiny._prompt_digits(prompt)
    if written == sorted(wanted):
        return "sorted"
    return "unsorted" if sorted(written) == sorted(wanted) else "wrong digits"


# The example's `same_digits` under its own name (TRL names the reward column after the function), also logging
# through TRL's `log_extra` a numeric and a string column per completion.
def same_digits(prompts, completions, log_extra, **kwargs) -> list[float]:
    log_extra("words", [len(train_grpo_tiny._text(completion).split()) for completion in completions])
    log_extra("verdict", [verdict(prompt, completion) for prompt, completion in zip(prompts, completions)])
    return train_grpo_tiny.same_digits(prompts, completions)


# Trains the tiny model a few GRPO steps with TRL's completion logging on, checkpointing every `save_steps`.
def trl_completions_run(
    output_dir, conversational=False, max_steps=3, save_steps=2, reward_weights=(1.0, 0.5), model_dir=None
) -> Path:
    """TRL's output folder: `completions/completions_<step:05d>.parquet` for every step (8 rows each: 2 prompts x
    4 completions) and `checkpoint-<step>/` every `save_steps` steps; the reward columns are `sorted_digits` and
    `same_digits`, the extra ones `EXTRA_COLUMNS`."""
    trainer = make_trainer(
        output_dir,
        reward_funcs=(train_grpo_tiny.sorted_digits, same_digits),
        conversational=conversational,
        model_dir=model_dir,
        max_steps=max_steps,
        reward_weights=list(reward_weights),
        log_completions=True,
        num_completions_to_print=0,  # rich (when installed) would print a table of the samples at every step
        save_strategy="steps",
        save_steps=save_steps,
        save_only_model=True,  # the checkpoints are for their trainer_state.json
    )
    trainer.train()
    return Path(output_dir)


# Trains the tiny model 4 GRPO steps on 4 prompts repeated 4 times (4 prompts x 4 completions per batch: one prompt is
# drawn twice in step 3's batch), each batch trained on twice (num_iterations=2: generated at steps 1 and 3), with TRL's
# completion logging and the rollout logger in its default folder, <output_dir>/rollout_samples/<run name>/.
def trl_reused_batches_run(output_dir, model_dir=None) -> Path:
    """TRL's output folder: `completions/completions_<step:05d>.parquet` for steps 1 to 4 (16 rows each; 2 and 4
    repeat 1 and 3), `checkpoint-4/` and the logger's `rollout_samples/<run name>/` with its metadata (reward weights
    1.0 and 0.5, num_generations 4)."""
    prompts = train_grpo_tiny.prompt_dataset(4, seed=0)
    trainer = make_trainer(
        output_dir,
        reward_funcs=(train_grpo_tiny.sorted_digits, same_digits),
        model_dir=model_dir,
        train_dataset=datasets.concatenate_datasets([prompts] * 4),
        max_steps=4,
        per_device_train_batch_size=16,
        num_iterations=2,
        reward_weights=[1.0, 0.5],
        log_completions=True,
        num_completions_to_print=0,
        save_strategy="steps",
        save_steps=4,
        save_only_model=True,
    )
    trainer.add_callback(RolloutLoggerCallback(trainer=trainer, enabled=True))
    trainer.train()
    return Path(output_dir)


# One run per variant per test session, removed at exit, for any test module to read.
@functools.cache
def shared_trl_completions_run(conversational: bool = False) -> Path:
    directory = Path(tempfile.mkdtemp(prefix="trl_completions_"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return trl_completions_run(directory / "run", conversational=conversational)


# The parquet files' rows by step, in file order: {step: [row dict, ...]}.
def parquet_steps(folder: Path) -> dict[int, list[dict]]:
    steps = {}
    for path in sorted(folder.glob("completions_*.parquet")):
        rows = pyarrow.parquet.read_table(path).to_pylist()
        steps.setdefault(rows[0]["step"], []).extend(rows)
    return steps
