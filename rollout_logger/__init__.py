"""Training-side logger for the RL Logging Board: exact per-token rollout logs from TRL's GRPOTrainer.

Add one line to a GRPO training script and run it with `SAVE_ROLLOUT_DATA=true` (or pass `enabled=True`):

    trainer.add_callback(RolloutLoggerCallback(trainer=trainer))
"""

from .callback import RolloutLoggerCallback, rollout_logging_enabled


__version__ = "0.1.0"
__all__ = ["RolloutLoggerCallback", "rollout_logging_enabled"]
