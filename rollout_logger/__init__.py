"""Training-side logger for the RL Logging Board: exact per-token rollout logs from TRL's GRPOTrainer.

Add one line to a GRPO training script and run it with `SAVE_ROLLOUT_DATA=true` (or pass `enabled=True`):

    trainer.add_callback(RolloutLoggerCallback(trainer=trainer))

`rollout_logger.metadata`, the line format the board reads, imports without torch or TRL: the callback is imported
when it is first asked for.
"""

__version__ = "0.1.0"
__all__ = ["RolloutLoggerCallback", "rollout_logging_enabled"]


def __getattr__(name: str):
    if name in __all__:
        from . import callback

        return getattr(callback, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
