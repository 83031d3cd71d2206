"""One rank of the two-process test: `torchrun --nproc_per_node 2 tests/support/logger_two_ranks.py MODEL_DIR OUTPUT_DIR
[main-only]` (main-only: the logger enabled on rank 0 alone, `enabled=trainer.accelerator.is_main_process`).

Each rank samples 6 completions per step, with 4 per prompt: the middle prompt's group spans both ranks. Each step
trains them in two loss passes of 3 per rank (gradient accumulation 2). Rank 0 saves the trainer's log history to
OUTPUT_DIR/log_history.json.
"""

import json
import sys
from pathlib import Path

import torch.distributed

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rollout_logger import RolloutLoggerCallback  # noqa: E402
from tests.support.logger_runs import add_logger, make_trainer  # noqa: E402

if __name__ == "__main__":
    model_dir, output_dir = sys.argv[1:3]
    trainer = make_trainer(
        output_dir, model_dir=model_dir, per_device_train_batch_size=3, gradient_accumulation_steps=2, max_steps=2
    )
    if sys.argv[3:] == ["main-only"]:
        trainer.add_callback(RolloutLoggerCallback(trainer, enabled=trainer.accelerator.is_main_process))
    else:
        add_logger(trainer)
    trainer.train()
    if trainer.is_world_process_zero():
        (Path(output_dir) / "log_history.json").write_text(json.dumps(trainer.state.log_history))
    # Left to interpreter exit, gloo's threads were sometimes torn down mid-flight ("terminate called without an active
    # exception", the rank aborted after training had finished).
    torch.distributed.destroy_process_group()
