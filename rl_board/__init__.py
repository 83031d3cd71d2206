"""RL Logging Board's engine: everything beneath the page (rl_logging_board.py), without Streamlit. The Python API:

    import rl_board
    run = rl_board.open_run("rollout_samples/grpo_tiny_example")  # run.samples, run.step(s), run.tokens(s, i), run.history
    rl_board.pattern_rate(run, r"I cannot", field="response")     # per step, the share of samples the pattern matches

The map, by the data path (each module's docstring says more; only the page imports Streamlit):

    run folder, on disk or object storage      reading/storage.py   list_folder, read_range, read_spans, StorageError
    which files, in which trainer's format     formats/             a module per format in a registry (16: TRL,
                                                                    verl, prime-rl, NeMo-RL, OpenRLHF, W&B tables...,
                                                                    its docstring lists them); conversion.py turns
                                                                    other trainers' files into the board's JSONL
    what a line holds                          reading/lines.py     decoding: the first pass's numbers, texts, tokens;
                                                                    KL estimators per token (the line format itself is
                                                                    rollout_logger/metadata.py, shared with the logger)
    where each line is                         reading/index.py     FileIndex (offset, step, numbers), IndexCache on disk
    the logger's index beside each rank file   reading/summaries.py a batch's summaries record (the logger writes
                                                                    it), read back as the chunk a parse gives
    indexed on worker processes                reading/workers.py   the spawned pool, index_chunk, run_tasks; the
                                                                    read-ahead thread, the sessions' Turns
    a run folder kept up to date               reading/store.py     RunStore.load -> RunSnapshot; list_runs
    the samples the page draws, read back      reading/snapshot.py  RunSnapshot, StepBatch (a step's texts),
                                                                    SampleTokens (a sample's per-token lists)
    the trainer's own numbers                  reading/history.py   TrainingHistory from the logger's metrics files,
                                                                    training_log.json, trainer_state.json, trackio's
                                                                    databases (reading/trackio_db.py opens them)
    the prompts' images                        reading/images.py    checked inside the run folder, decoded by Pillow
    search and export                          reading/search.py    RunTexts, RE2 search, CSV/JSONL/Parquet exports
    numbers for the charts and tables          metrics.py           step statistics, groups, filters, token rows
    the sampler against the trainer            mismatch.py          per-token Δ = logp - sampler_logp, TRL's
                                                                    corrections at chosen thresholds, per step,
                                                                    by bucket, the largest |Δ|
    which tokens drove each update             update.py            the loss passes' clip, masks and update weights:
                                                                    TRL's clip fractions per step, each sample's share
    agent trajectories                         trajectory.py        a line's turns with each turn's numbers; tool
                                                                    calls and results per step and per tool
    what changed between two sides             changes.py           per prompt on both: reward, pass rate, length,
                                                                    regressed / newly solved; a word-level diff
    watch patterns (reward hacking)            watch.py             a saved search's hit rate per step, a step's hits;
                                                                    the saved patterns per root, in the cache folder
    how old the sampling policy was            staleness.py         an asynchronous run's step - policy_version per
                                                                    sample (TRL's async model_version), per step
    is the policy gaming the reward            signals.py           per step over trailing windows: reward functions
                                                                    diverging, length with reward, zero-signal groups,
                                                                    entropy, KL accelerating, advantage skew; stated
                                                                    rules, fired steps, example samples
    the charts                                 figures.py           Vega-Lite specs, the token heat map, running text
    text as the page shows it                  text.py              escaping (markdown_literal, one_line), tokens
    the API                                    run.py               open_run, list_runs, Run, prompt_changes
    a root indexed ahead of time               indexing.py          every run's cache, fully parsed, on the pool or
                                                                    Dask (`python -m rl_board index`: __main__.py)
"""

__all__ = ["Run", "list_runs", "open_run", "pattern_rate", "prompt_changes"]


# The module each name of the API is in.
API_MODULES = {"Run": "run", "list_runs": "run", "open_run": "run", "pattern_rate": "watch", "prompt_changes": "run"}


# The API is imported when first asked for: a worker process imports rl_board.reading.workers, and with it this
# module, and needs none of it (the store, the formats, pyarrow and Pillow stay out of its memory and start-up).
def __getattr__(name: str):
    if name in API_MODULES:
        import importlib

        return getattr(importlib.import_module(f"rl_board.{API_MODULES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# The API's names among the module's own, before they are imported: for dir(), help() and a notebook's completion.
def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
