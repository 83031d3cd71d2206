"""Trainers' rollout files, a module each, in a registry the store asks in order: the first whose recognise(folder)
takes a run folder says which of its files are read and how (RunFormat: as they are, or converted into the board's
JSONL by its convert function). Each module's LAYOUT (RunLayout) says, from a folder's listing alone, when the folder
is one run of the format and which of its sub-folders are that run's: list_runs asks run_layouts, so a trainer's
output folder is listed as one run, not as its sub-folders. Adding a format is a module here (recognise and LAYOUT),
its test and a row of the README's table.

    trl          TRL's completion logs (completions/completions_<step>.parquet)
    verl         verl's generation dumps (<step>.jsonl of rollout_data_dir / validation_data_dir)
    prime_rl     prime-rl's per-token exports (token_exports/step_<n>/rank_<r>.jsonl, complete steps) and its verifiers
                 traces (rollouts/step_<n>/<train|eval>/<all|effective>/traces.jsonl: verifiers_traces)
    nemo_rl      NeMo-RL's train_data_step<N>.jsonl
    rllm         rLLM's episode logs (episodes/<mode>_step_<n>_epoch_<e>/*.json), a line per trajectory
    roll         ROLL's rollout dumps (rollout_dump_data.step_<n>.jsonl), agentic and RLVR, a line per trajectory
    openrlhf     OpenRLHF's data_rank<r>.jsonl
    verl_fork    the verl fork's rollout_data_rank<r>.jsonl
    trackio      trackio's project databases (<project>.db): each logged trace a line (turns), metrics the history
    areal        AReaL's trajectory dumps (rollout/<version>/<task_id>.jsonl, eval-rollout/), a task file a group
    open_instruct  open-instruct's rollout traces (<run>_rollouts_<shard>.jsonl, token ids) and their metadata
    skyrl        SkyRL's evaluation dumps (dumped_evals/global_step_<N>_evals/<data_source>.jsonl); its pickles named, not read
    relax        Relax's rollout results (rollout_result/{train,eval}/<rollout_id>.jsonl)
    tinker       Tinker's rollout summaries (iteration_<N>/{train,eval_<label>}_rollout_summaries.jsonl), texts from
                 the logtree beside them where they can be attributed
    wandb_tables W&B run folders (offline or synced): every step's logged tables (TRL's completions table mapped, a
                 cumulative table's rows once), the transaction log run-<id>.wandb the history
    board_jsonl  the rollout logger's files and any other JSONL (the board's own format): last, it takes any folder
    base         RunFormat, RunLayout, Folder and what detectors share; conversion: converted files and their cache;
                 agent_turns: chat messages as the board's turns, and a conversion's notes
"""
import re

from rl_board.formats import (
    areal,
    board_jsonl,
    nemo_rl,
    open_instruct,
    openrlhf,
    prime_rl,
    relax,
    rllm,
    roll,
    skyrl,
    tinker,
    trackio,
    trl,
    verl,
    verl_fork,
    wandb_tables,
)
from rl_board.formats.base import Folder, RunFormat, RunLayout
from rl_board.reading.history import CHECKPOINT_FOLDER
from rl_board.reading.storage import FileStatus

FORMATS = (trl, verl, prime_rl, nemo_rl, rllm, roll, openrlhf, verl_fork, trackio, areal, open_instruct, skyrl, relax, tinker, wandb_tables, board_jsonl)


# Hugging Face's Trainer (TRL, and the rollout logger's runs) writes checkpoint-<n>/ (whose trainer_state.json is the
# run's history) and, reporting to TensorBoard, runs/<date>_<host>/ into the output folder: parts of whatever run that
# folder is (one with only a history included), never runs of their own.
TRAINER_OUTPUT = RunLayout(parts=re.compile(f"{CHECKPOINT_FOLDER.pattern}|runs"))


# The layouts that make a folder one run (none: it is not a run, at most a folder of runs), from its listing alone.
def run_layouts(folder: Folder) -> tuple[RunLayout, ...]:
    return tuple(module.LAYOUT for module in FORMATS if module.LAYOUT.takes(folder))


# A run's data files with their status, and their format, from one listing of the folder.
def run_sources(run_dir: str) -> tuple[dict[str, FileStatus], RunFormat]:
    folder = Folder.listed(run_dir)
    return next(found for found in (module.recognise(folder) for module in FORMATS) if found is not None)
