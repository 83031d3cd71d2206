"""W&B offline runs written by wandb itself (pip wandb, tests/requirements.txt): wandb.init(mode="offline"),
wandb.log, run.finish, in a process of its own (wandb starts its wandb-core service), with no network.

- grpo: what a TRL GRPO run with report_to="wandb" and log_completions=True logs. The config as Hugging Face's
  WandbCallback.setup gives it (the TrainingArguments' dict: GRPOConfig's num_generations, reward_weights); every
  Trainer log as WandbCallback.on_log logs it (transformers/integrations/integration_utils.py: rewrite_logs' names
  train/<key>, eval/<key>, and train/global_step, on W&B's own step counter), with TRL's metrics
  (rewards/<function>/mean and /std, reward, reward_std); then the completions table as GRPOTrainer.log builds and
  logs it (trl/trainer/grpo_trainer.py of trl 1.16.0: df_base = pd.DataFrame({"step", "prompt", "completion",
  **rewards, **extra, "advantage"}), logging_backend.log({"completions": logging_backend.Table(dataframe=df)}), no
  step); prompts and completions as chat messages, a reward function that gave None (NaN), a log_extra text column.
  Besides, a table of another program under a key with "/" (eval/answers), an eval log, and trainer.predict()'s
  test/<key> row (WandbCallback.on_predict: no train/global_step; W&B's step_sync adds it).
- bare: a completions table logged with no metrics at all (no reward function named), and log_unique_prompts' one row
  per prompt.
- openrlhf: OpenRLHF's WandbLogger (openrlhf/utils/logging_utils.py, OpenRLHF/OpenRLHF @ 3c3be623, lines 62-97, with
  the sample openrlhf/trainer/ppo_trainer.py logs): a cumulative table train/generated_samples (global_step, text,
  reward), each step's the one before plus a row, logged before that step's train/global_step row.
- grpo_evaluation: a GRPO run that evaluates at a step: the evaluation's metrics, then its completions table under the
  same key (GRPOTrainer.log in evaluation), then another table.
- per_step: a table of each step's own rows without a step column, a row of step 2 equal to one of step 1, step 3's
  all as step 2's.
- trl_callback: TRL's LogCompletionsCallback.on_step_end (trl/trainer/callbacks.py, huggingface/trl @ f2cd577, ~290-336):
  a cumulative completions table whose step column is text (str(state.global_step)), after WandbCallback's
  train/global_step row.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import PROJECT

QUESTIONS = ["What is 3+4?", "计算 15 减去 8 等于多少？", "Name a prime > 10."]

REWARD_FUNCTIONS = ["accuracy", "format"]

REWARD_WEIGHTS = [1.0, 0.5]

NUM_GENERATIONS = 2

STEPS = (1, 2, 3)  # the Trainer's global steps at which the GRPO run logs (logging_steps=1)

REASONING_STEP = 3  # its completions are a reasoning model's: reasoning_content beside the content


# The rows GRPOTrainer._logs holds at a logging step: NUM_GENERATIONS completions of each prompt, in order.
def completions_rows(step: int) -> dict:
    prompts, completions, accuracy, formats, solutions, advantages = [], [], [], [], [], []
    for question_index, question in enumerate(QUESTIONS):
        for generation in range(NUM_GENERATIONS):
            prompts.append([{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": question}])
            if step == REASONING_STEP:  # parse_response's message of a reasoning model (trl 1.16.0): a table's rows all have the key
                completions.append([{"role": "assistant", "reasoning_content": f"thinking at step {step}", "content": f"answer {question_index}.{generation}"}])
            else:
                completions.append([{"role": "assistant", "content": f"<think>step {step}</think> answer {question_index}.{generation}"}])
            accuracy.append(float("nan") if (step, question_index, generation) == (2, 1, 0) else float((step + generation) % 2))
            formats.append(0.25 * (question_index + 1))
            solutions.append(f"solution {question_index}")
            advantages.append(0.5 - generation + 0.125 * step)
    return {"prompt": prompts, "completion": completions, "rewards": {"accuracy": accuracy, "format": formats}, "extra": {"solution": solutions}, "advantages": advantages}


def write_grpo():
    import pandas as pd
    import wandb

    config = {"output_dir": "out", "learning_rate": 1e-6, "num_generations": NUM_GENERATIONS, "reward_weights": REWARD_WEIGHTS, "log_completions": True}
    run = wandb.init(mode="offline", project="grpo", config=config)
    run.define_metric("train/global_step")  # WandbCallback.setup
    run.define_metric("*", step_metric="train/global_step", step_sync=True)
    for step in STEPS:
        logs = {"loss": 0.5 / step, "reward": 0.25 * step, "reward_std": 0.1, "learning_rate": 1e-6}
        logs |= {f"rewards/{name}/mean": 0.1 * step + index for index, name in enumerate(REWARD_FUNCTIONS)}
        logs |= {f"rewards/{name}/std": 0.01 for name in REWARD_FUNCTIONS}
        run.log({**{f"train/{key}": value for key, value in logs.items()}, "train/global_step": step})  # on_log
        rows = completions_rows(step)
        table = {  # GRPOTrainer.log
            "step": [step] * len(rows["prompt"]),
            "prompt": rows["prompt"],
            "completion": rows["completion"],
            **rows["rewards"],
            **rows["extra"],
            "advantage": rows["advantages"],
        }
        df_base = pd.DataFrame(table)
        run.log({"completions": wandb.Table(dataframe=df_base)})
        if step == 2:
            run.log({"eval/loss": 0.75, "train/global_step": step})  # on_log of an evaluation
            run.log({"eval/answers": wandb.Table(columns=["question", "answer", "score", "prompt"], data=[[q, f"a{i}", i / 2, "p"] for i, q in enumerate(QUESTIONS)])})
    from transformers.integrations.integration_utils import rewrite_logs

    run.log(rewrite_logs({"test_loss": 0.6, "test_runtime": 2.0}))  # WandbCallback.on_predict: no train/global_step
    run.summary["train_runtime"] = 12.5
    run.finish()


EVALUATED_STEP = 1  # the global step the grpo_evaluation run evaluates at


EVAL_ROWS = 4  # the evaluation's completions: fewer than a training batch's (len(QUESTIONS) * NUM_GENERATIONS)


# A GRPO run that evaluates (eval_strategy="steps"): at EVALUATED_STEP, after the step's training metrics and table,
# WandbCallback.on_log logs the evaluation's metrics (eval/<key>, with train/global_step), then GRPOTrainer.log (in
# evaluation) logs its completions buffer under the same key: GRPOTrainer._logs, deques of maxlen
# generation_batch_size never cleared (trl/trainer/grpo_trainer.py @ f2cd577, 1055-1062), so EVAL_ROWS evaluation
# rows after the tail of the step's training batch; another program's table after it.
def write_grpo_evaluation():
    import collections

    import pandas as pd
    import wandb

    run = wandb.init(mode="offline", project="grpo", config={"num_generations": NUM_GENERATIONS, "reward_weights": REWARD_WEIGHTS})
    run.define_metric("train/global_step")
    run.define_metric("*", step_metric="train/global_step", step_sync=True)
    logs = collections.deque(maxlen=len(QUESTIONS) * NUM_GENERATIONS)  # a row each, as the _logs deques together hold them

    def generated(step: int, question: str, count: int):
        rows = completions_rows(step)
        for index in range(count):
            prompt = [{"role": "user", "content": f"{question} {index // NUM_GENERATIONS}"}]
            logs.append((step, prompt, rows["completion"][index], rows["rewards"]["accuracy"][index], rows["rewards"]["format"][index], rows["advantages"][index]))

    def logged_table():  # GRPOTrainer.log's df_base, "step" the Trainer's global step when it logs
        return pd.DataFrame([dict(zip(["step", "prompt", "completion", *REWARD_FUNCTIONS, "advantage"], (step, *row[1:]))) for row in logs])

    for step in (1, 2):
        generated(step, "train question", logs.maxlen)
        run.log({"train/loss": 0.5 / step, **{f"train/rewards/{name}/mean": 0.5 for name in REWARD_FUNCTIONS}, "train/global_step": step})
        run.log({"completions": wandb.Table(dataframe=logged_table())})
        if step == EVALUATED_STEP:
            generated(step, "eval question", EVAL_ROWS)
            run.log({"eval/loss": 0.75, "eval/reward": 0.25, "train/global_step": step})
            run.log({"completions": wandb.Table(dataframe=logged_table())})
            run.log({"eval/answers": wandb.Table(columns=["question", "answer"], data=[["q", "a"]])})
    run.finish()


PER_STEP_ROWS = {
    1: [["What is 2+2?", "4", 1.0], ["Capital of France?", "Lyon", 0.0]],
    2: [["What is 2+2?", "4", 1.0], ["Capital of France?", "Paris", 1.0]],
    3: [["What is 2+2?", "4", 1.0], ["Capital of France?", "Paris", 1.0]],
}


# A table of each step's own rows, without a step column, one row of step 2 equal to one of step 1 and step 3's all
# as step 2's (a greedy policy answering the same way again): not cumulative.
def write_per_step():
    import wandb

    run = wandb.init(mode="offline", project="per_step")
    for step, rows in PER_STEP_ROWS.items():
        run.log({"train/loss": 1.0 / step, "train/global_step": step})
        run.log({"samples": wandb.Table(columns=["prompt", "response", "reward"], data=rows)})
    run.finish()


def write_bare():
    import pandas as pd
    import wandb

    run = wandb.init(mode="offline", project="bare")
    for step in (5, 10):
        rows = completions_rows(step)
        df = pd.DataFrame({"step": [step] * 6, "prompt": rows["prompt"], "completion": rows["completion"], **rows["rewards"], "advantage": rows["advantages"]})
        df = df[~df["prompt"].astype(str).duplicated()]  # log_unique_prompts
        run.log({"completions": wandb.Table(dataframe=df)})
    run.finish()


OPENRLHF_STEPS = (1, 2, 3)


# OpenRLHF's WandbLogger as it logs (its __init__ but wandb.login and the args; log_train as written), fed what
# PPOTrainer's status carries: generated_samples = [text, reward] of one sample.
def write_openrlhf():
    import wandb

    class WandbLogger:
        def __init__(self) -> None:
            wandb.init(mode="offline", project="openrlhf", name="run", config={"n_samples_per_prompt": 2}, reinit=True)
            wandb.define_metric("train/global_step")
            wandb.define_metric("train/*", step_metric="train/global_step", step_sync=True)
            wandb.define_metric("eval/epoch")
            wandb.define_metric("eval/*", step_metric="eval/epoch", step_sync=True)
            self.handle = wandb
            self.samples_table = wandb.Table(columns=["global_step", "text", "reward"])

        def log_train(self, global_step, logs_dict) -> None:
            logs_dict = dict(logs_dict)
            generated_samples = logs_dict.pop("generated_samples", None)
            if generated_samples:
                new_table = self.handle.Table(columns=self.samples_table.columns, data=self.samples_table.data)
                new_table.add_data(global_step, *generated_samples)
                self.samples_table = new_table
                self.handle.log({"train/generated_samples": new_table})
            metrics = {k: v for k, v in logs_dict.items() if v is not None}
            logs = {"train/%s" % k: v for k, v in {**metrics, "global_step": global_step}.items()}
            self.handle.log(logs)

    logger = WandbLogger()
    for step in OPENRLHF_STEPS:
        sample = [f"<|user|>question {step}<|assistant|>answer {step}", 0.25 * step - 0.5]
        logger.log_train(step, {"policy_loss": 0.1 * step, "reward": 0.5 * step, "generated_samples": sample})
    wandb.finish()


TRL_CALLBACK_STEPS = (10, 20, 30)


# TRL's LogCompletionsCallback.on_step_end at each of its steps (generation faked: two prompts, a completion each),
# after Hugging Face's WandbCallback.on_log row of that step.
def write_trl_callback():
    import pandas as pd
    import wandb

    run = wandb.init(mode="offline", project="dpo")
    run.define_metric("train/global_step")  # WandbCallback.setup
    run.define_metric("*", step_metric="train/global_step", step_sync=True)
    table_rows = []  # the callback's self.table
    for global_step in TRL_CALLBACK_STEPS:
        run.log({"train/loss": 1.0 / global_step, "train/global_step": global_step})
        prompts = [f"question {index}" for index in range(2)]
        completions = [f"answer to question {index} at {global_step}" for index in range(2)]
        data = list(zip([str(global_step)] * len(prompts), prompts, completions, strict=True))
        table_rows.extend(data)
        table = pd.DataFrame(columns=["step", "prompt", "completion"], data=table_rows)
        wandb.log({"completions": table})
    run.finish()


# Runs wandb in a process of its own, writing `what` (write_grpo, write_bare, write_openrlhf, write_trl_callback) into folder/wandb/offline-run-*;
# returns that run folder.
def write_wandb(folder: Path, what: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, "WANDB_DIR": str(folder), "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true", "PYTHONPATH": str(PROJECT)}
    environment.pop("WANDB_API_KEY", None)
    code = f"from tests.support import wandb_runs as w; w.{what}()"
    subprocess.run([sys.executable, "-c", code], cwd=folder, env=environment, check=True, capture_output=True, timeout=300)
    (run_folder,) = (folder / "wandb").glob("offline-run-*")
    return run_folder


# A run's table files as written: {path: {"columns", "data"}} (Python's json: W&B writes NaN as NaN).
def table_files(run_folder: Path) -> dict[Path, dict]:
    return {path: json.loads(path.read_text()) for path in sorted((run_folder / "files" / "media" / "table").rglob("*.table.json"))}
