"""A TRL GRPO output folder whose evaluation at a training step overwrote that step's completions file, written by a copy
of the writer's code path (huggingface/trl @ f2cd57710ae345ea6428ae95363267fcf38a3dc8, trl/trainer/grpo_trainer.py):
GRPOTrainer._logs (lines 1055-1062: deques of generation_batch_size entries), which _generate_and_score_completions
extends in training and in evaluation alike (lines 2753-2763), and log() (lines 3272-3325), which writes
completions/completions_<global_step:05d>.parquet in either mode. Hugging Face's Trainer._maybe_log_save_evaluate logs
the training step, then evaluates: evaluate() calls log() in eval mode at the same global step, so the file of that
step is written again, with the eval rows. The history is the Trainer's own: TrainerState.log_history as Trainer.log
appends to it (the logs and "step"; eval keys prefixed eval_) saved by TrainerState.save_to_json into
checkpoint-<step>/trainer_state.json.
"""

import os
from collections import defaultdict, deque
from pathlib import Path

GENERATION_BATCH_SIZE = 4

NUM_GENERATIONS, NUM_GENERATIONS_EVAL = 2, 1

EVAL_STEP = 2  # eval_strategy="steps", eval_steps=2, logging_steps=1, max_steps=3


def write_trl_eval_run(output_dir: Path) -> Path:
    import pandas as pd
    from transformers.trainer_callback import TrainerState

    os.makedirs(os.path.join(output_dir, "completions"), exist_ok=True)
    size = GENERATION_BATCH_SIZE
    logs = {"prompt": deque(maxlen=size), "completion": deque(maxlen=size), "rewards": defaultdict(lambda: deque(maxlen=size)), "advantages": deque(maxlen=size), "extra": defaultdict(lambda: deque(maxlen=size))}
    state = TrainerState(max_steps=3, logging_steps=1, eval_steps=EVAL_STEP, save_steps=3)

    def generate(prompts, num_generations, mode):  # what _generate_and_score_completions appends to the deques
        for prompt in prompts:
            for index in range(num_generations):
                logs["prompt"].append(prompt)
                logs["completion"].append(f"{mode} completion {index} of {prompt}")
                logs["rewards"]["accuracy"].append(1.0 if index == 0 else 0.0)
                logs["advantages"].append(0.5 - index)

    def log(metrics, mode):  # GRPOTrainer.log: Trainer.log's log_history entry, then the parquet, as written
        if mode == "eval":
            metrics = {f"eval_{key}": value for key, value in metrics.items()}
        state.log_history.append({**metrics, "epoch": state.global_step / 3, "step": state.global_step})
        table = {
            "step": [state.global_step] * len(logs["prompt"]),
            "prompt": logs["prompt"],
            "completion": logs["completion"],
            **logs["rewards"],
            **logs["extra"],
            "advantage": logs["advantages"],
        }
        df_base = pd.DataFrame(table)
        df_base.to_parquet(os.path.join(output_dir, "completions", f"completions_{state.global_step:05d}.parquet"))

    for step in (1, 2, 3):
        state.global_step = step
        generate([f"train question {2 * step - 1}", f"train question {2 * step}"], NUM_GENERATIONS, "train")
        log({"loss": 0.1 * step, "reward": 0.5, "rewards/accuracy/mean": 0.5}, "train")
        if step == EVAL_STEP:
            generate(["eval question 1", "eval question 2", "eval question 3"], NUM_GENERATIONS_EVAL, "eval")
            log({"loss": 0.2, "reward": 1.0, "rewards/accuracy/mean": 1.0, "runtime": 0.5}, "eval")
    checkpoint = Path(output_dir) / f"checkpoint-{state.global_step}"
    checkpoint.mkdir()
    state.save_to_json(str(checkpoint / "trainer_state.json"))
    return Path(output_dir)
