"""Writers that reproduce other trainers' rollout files byte for byte, so the board is tested against their real
layouts: verl's rollout and validation dumps, the original RL Logging Board's OpenRLHF rank files, and the
RLLoggingBoardLogger file of a verl fork. Every writer is deterministic (seeded)."""

import json
import os
import random
import re
import struct
import uuid
from pathlib import Path

# A toy math task: (question, answer, chance a sample is right at step 1). The first prompt of step 1 is always right
# and the third always wrong, so some groups score all-equal; the second is Chinese.
PROBLEMS = [
    ("What is 3+4?", "7", 1.0),
    ("计算 15 减去 8 等于多少？", "7", 0.5),
    ("What is 2^5 - 9?", "23", 0.0),
    ("What is 12*3?", "36", 0.5),
    ("What is 100/4?", "25", 0.6),
    ("What is 9+10?", "19", 0.4),
]

# Couplet continuations as a tokenizer splits them (a character a token, some words one), like the seed's poem task.
COUPLETS = [
    ("上相生坤位,中兴运泰开。", ["威", "仪", "如", "鹤", "梦", ",", "道德", "似", "桃", "梅", "。"]),
    ("春风吹柳绿,细雨润花红。", ["明", "月", "照", "松", "影", ",", "清", "泉", "映", "碧", "空", "。"]),
    ("山高云自在,水远路无穷。", ["鸟", "语", "花香", "里", ",", "人", "间", "乐", "事", "同", "。"]),
    ("一曲阳关调,千杯别故人。", ["长", "亭", "送", "远", "客", ",", "柳", "色", "又", "新", "春", "。"]),
]

# Qwen2.5's chat template around a user turn, as decoded with special tokens kept (the verl fork's logger).
QWEN_SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"

# A crude byte-level BPE: special tokens whole, digits one by one, words with their leading space, other characters
# one by one.
TOKEN = re.compile(r"<\|[a-z_]+\|>|\n+|\s?[A-Za-z]+|\d|\s?[^\sA-Za-z\d]|\s+")


# Torch tensors hold float32: .tolist() gives the float32 value as a Python float (-4.847491264343262).
def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


# Reference and critic models often run in bf16 (the seed's ref_logprobs and values: -4.84375, -0.61328125).
def bf16(x: float) -> float:
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", bits))[0]


# Per-token log-probs of a sampled response: mostly confident, always negative.
def policy_logprobs(length: int, rng: random.Random) -> list[float]:
    return [f32(-rng.expovariate(0.8) - 1e-5) for _ in range(length)]


# The reference model's log-probs stay close to the policy's (and keep their sign).
def reference_logprobs(logprobs: list[float], rng: random.Random) -> list[float]:
    return [bf16(lp * (1 + rng.gauss(0, 0.01))) for lp in logprobs]


# KL-penalised token rewards: -kl_coef * (logprob - ref_logprob), the sequence reward added on the last token.
def kl_token_rewards(logprobs, ref_logprobs, reward: float, kl_coef: float) -> list[float]:
    rewards = [f32(-kl_coef * (lp - ref)) for lp, ref in zip(logprobs, ref_logprobs)]
    rewards[-1] = f32(rewards[-1] + reward)
    return rewards


# ---------------------------------------------------------------------------------------------------------- verl


# verl's RayPPOTrainer._dump_generations, verl/trainer/ppo/ray_trainer.py at volcengine/verl commit
# b178a3cd56f58b2d502255daba591e92833930a7 (trainer.rollout_data_dir / trainer.validation_data_dir): an extra of the
# wrong length is dropped silently, one named like a base key ("score") overwrites that value in place, and the file is
# opened in the locale's encoding, as verl does.
def write_verl_dump(folder, global_step, inputs, outputs, gts, scores, reward_extra_infos: dict) -> Path:
    os.makedirs(folder, exist_ok=True)
    filename = os.path.join(folder, f"{global_step}.jsonl")
    n = len(inputs)
    base_data = {"input": inputs, "output": outputs, "gts": gts, "score": scores, "step": [global_step] * n}
    for k, v in reward_extra_infos.items():
        if len(v) == n:
            base_data[k] = v
    lines = []
    for i in range(n):
        entry = {k: v[i] for k, v in base_data.items()}
        lines.append(json.dumps(entry, ensure_ascii=False))
    with open(filename, "w") as f:
        f.write("\n".join(lines) + "\n")
    return Path(filename)


# verl's v1 trainer: _log_rollout_data's sort by TransferQueue key and the _write_generations it hands the lines to,
# verl/trainer/ppo/v1/trainer_base.py at verl-project/verl commit 1dda039b9c6311889a9c9a26040677e1254814f9. A key is
# {uid}_{session_id}_{index} (verl/trainer/ppo/v1/agent_loop_tq.py: the prompt's uuid4, the rollout among rollout.n,
# the agent loop's output); the lines are sorted by it and each has it as "uid".
def write_verl_v1_dump(folder, global_steps, keys, inputs, outputs, gts, scores) -> Path:
    sort_keys = []
    for key in keys:
        parts = key.rsplit("_", 2)
        if len(parts) == 3:
            sort_keys.append((parts[0], int(parts[1]), int(parts[2])))
        else:
            sort_keys.append((key, 0, 0))
    sorted_indices = sorted(range(len(sort_keys)), key=lambda i: sort_keys[i])
    inputs = [inputs[i] for i in sorted_indices]
    outputs = [outputs[i] for i in sorted_indices]
    gts = [gts[i] for i in sorted_indices]
    scores = [scores[i] for i in sorted_indices]
    reward_extra_infos_dict = {"uid": [keys[i] for i in sorted_indices]}
    os.makedirs(folder, exist_ok=True)
    filename = os.path.join(folder, f"{global_steps}.jsonl")
    n = len(inputs)
    base_data = {"input": inputs, "output": outputs, "gts": gts, "score": scores, "step": [global_steps] * n}
    for k, v in reward_extra_infos_dict.items():
        if len(v) == n:
            base_data[k] = v
    with open(filename, "w") as f:
        for i in range(n):
            entry = {k: v[i] for k, v in base_data.items()}
            f.write(json.dumps(entry, ensure_ascii=False) + "\n")
    return Path(filename)


# A verl v1 run's rollout_data_dir: each step's prompts (uuid4s from the seeded rng) with n rollouts each, in the order
# the agent loops finish (shuffled); `drawn_twice` prompts of a step are the same problem again, under a uid of its
# own; `outputs` agent-loop outputs per rollout (a multi-output loop puts each in TransferQueue under its index).
def verl_v1_run(folder, steps=2, n=4, prompts_per_step=3, drawn_twice=1, outputs=1, seed=0) -> Path:
    rng = random.Random(seed)
    folder = Path(folder)
    for step in range(1, steps + 1):
        problems = step_problems(step, prompts_per_step)
        problems += problems[:drawn_twice]
        rows = []
        for problem in problems:
            uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            for session_id in range(n):
                pred = math_answer(problem, step, rng)
                for index in range(outputs):
                    rows.append((f"{uid}_{session_id}_{index}", verl_input(problem[0]), math_output(problem[0], pred, rng), problem[1], 1.0 if pred == problem[1] else 0.0))
        rng.shuffle(rows)
        keys, inputs, texts, gts, scores = (list(column) for column in zip(*rows))
        write_verl_v1_dump(folder, step, keys, inputs, texts, gts, scores)
    return folder


# verl decodes prompts with skip_special_tokens=True: Qwen3's <|im_start|>/<|im_end|> vanish, the newlines stay.
def verl_input(question: str) -> str:
    return f"user\n{question} Put the final answer in \\boxed{{}}.\nassistant\n"


# A response as verl decodes it (skip_special_tokens drops <|im_end|>; Qwen3's <think> is not special, so it stays).
def math_output(question: str, pred: str, rng: random.Random) -> str:
    if not question.isascii():
        return f"<think>\n逐步计算：{question}\n结果是 {pred}。\n</think>\n\n答案：\\boxed{{{pred}}}"
    if rng.random() < 0.5:
        return f'<think>\nThe question says "{question}", so I work it out.\n</think>\n\nIt is \\boxed{{{pred}}}.'
    return f"<think>\nLet me compute it.\n</think>\n\n\\boxed{{{pred}}}"


# One sampled answer: right with a chance that grows with the step; a wrong one is off by a little.
def math_answer(problem, step: int, rng: random.Random) -> str:
    _, answer, base = problem
    right = rng.random() < min(1.0, base + 0.1 * (step - 1))
    return answer if right else str(int(answer) + rng.choice((-2, -1, 1, 3)))


# A batch as verl hands it to _dump_generations: samples of one prompt next to each other (repeat(interleave=True)).
def math_batch(problems, n: int, step: int, rng: random.Random) -> dict:
    batch = {"inputs": [], "outputs": [], "gts": [], "scores": [], "acc": [], "pred": []}
    for problem in problems:
        for _ in range(n):
            pred = math_answer(problem, step, rng)
            batch["inputs"].append(verl_input(problem[0]))
            batch["outputs"].append(math_output(problem[0], pred, rng))
            batch["gts"].append(problem[1])
            batch["acc"].append(pred == problem[1])
            batch["pred"].append(pred)
            batch["scores"].append(1.0 if pred == problem[1] else 0.0)
    return batch


# Training dumps carry the reward function's extras (acc, pred); validation's dict starts with "reward" (_validate).
def dump_math_batch(folder, step: int, batch: dict, validation: bool) -> Path:
    extras = {"reward": batch["scores"]} if validation else {}
    extras.update(acc=batch["acc"], pred=batch["pred"])
    return write_verl_dump(folder, step, batch["inputs"], batch["outputs"], batch["gts"], batch["scores"], extras)


# The prompts of a training step, going round the problem list.
def step_problems(step: int, prompts_per_step: int) -> list:
    first = (step - 1) * prompts_per_step
    return [PROBLEMS[(first + j) % len(PROBLEMS)] for j in range(prompts_per_step)]


# A verl run with rollout_data_dir=<folder>/rollout (steps from 1) and validation_data_dir=<folder>/validation (step 0
# is val_before_train); validation samples once per problem (val_kwargs.n defaults to 1).
def verl_run(folder, steps=4, n=4, prompts_per_step=3, validation_steps=(0, 2, 4), seed=0) -> Path:
    rng = random.Random(seed)
    folder = Path(folder)
    for step in range(1, steps + 1):
        batch = math_batch(step_problems(step, prompts_per_step), n, step, rng)
        dump_math_batch(folder / "rollout", step, batch, validation=False)
    for step in validation_steps:
        dump_math_batch(folder / "validation", step, math_batch(PROBLEMS, 1, step, rng), validation=True)
    return folder


# ------------------------------------------------------------------------------------------------------- OpenRLHF


# One line of the original RL Logging Board's README section 2.1 example (OpenRLHF), keys in its order: the prompt
# left-padded, and a padded response keeps one trailing <PAD> in response_tokens, one more token than logprobs.
def openrlhf_sample(couplet, reference, step: int, padded: bool, rng: random.Random) -> dict:
    first_line, tokens = couplet
    logprobs = policy_logprobs(len(tokens) + 1, rng)
    ref_logprobs = reference_logprobs(logprobs, rng)
    reward = f32(rng.gauss(0.2 * step - 0.5, 0.6))
    pad = ["<PAD>"] if padded else []
    return {
        "prompt": f"<PAD>请编写“{first_line}”的下一句,要求押韵。",
        "response": "".join(tokens + ["<EOD>"] + pad),
        "response_tokens": tokens + ["<EOD>"] + pad,
        "logprobs": logprobs,
        "ref_logprobs": ref_logprobs,
        "values": [bf16(rng.gauss(-0.3, 0.25)) for _ in logprobs],
        "token_rewards": kl_token_rewards(logprobs, ref_logprobs, reward, kl_coef=0.2),
        "reward": reward,
        "step": step,
        "ref_response": "".join(reference[1]) + "<EOD>",
        "ref_reward": f32(rng.gauss(0.0, 0.6)),
    }


# One rank's batch of a step: responses shorter than the batch's longest were padded.
def openrlhf_batch(step: int, rank: int, per_rank: int, rng: random.Random) -> list[dict]:
    first = (step * 7 + rank * per_rank) % len(COUPLETS)
    couplets = [COUPLETS[(first + i) % len(COUPLETS)] for i in range(per_rank)]
    longest = max(len(tokens) for _, tokens in couplets)
    return [
        openrlhf_sample(c, COUPLETS[(first + i + 1) % len(COUPLETS)], step, len(c[1]) < longest, rng)
        for i, c in enumerate(couplets)
    ]


# data_rank{r}.jsonl, one per data-parallel rank, each step appended (json.dumps(..., ensure_ascii=False) + "\n").
def write_openrlhf_rank_files(folder, steps, ranks=2, per_rank=2, seed=1) -> list[Path]:
    rng = random.Random(seed)
    os.makedirs(folder, exist_ok=True)
    paths = [Path(folder) / f"data_rank{r}.jsonl" for r in range(ranks)]
    for step in range(1, steps + 1):
        for rank, path in enumerate(paths):
            with open(path, "a", encoding="utf-8") as f:
                for sample in openrlhf_batch(step, rank, per_rank, rng):
                    f.write(json.dumps(sample, ensure_ascii=False) + "\n")
    return paths


# --------------------------------------------------------------------------------------------------- verl fork


# tokenizer.decode([token]) one token at a time: an emoji split over two byte tokens decodes to two U+FFFD.
def decoded_tokens(text: str) -> list[str]:
    tokens = []
    for token in TOKEN.findall(text):
        tokens += [token[:-1] + "\ufffd", "\ufffd"] if len(token[-1].encode()) == 4 else [token]
    return tokens


# A generative reward model's critique: long, several paragraphs, quotes and newlines.
def rm_critique(question: str, pred: str, answer: str) -> str:
    verdict = "correct" if pred == answer else "incorrect"
    steps = "\n".join(f'Step {i}: the response restates "{question}" and checks term {i}; fine.' for i in range(1, 21))
    return (
        f"## Analysis\nThe task is: {question}\nThe reference answer is {answer}; the response concludes {pred}.\n\n"
        f"{steps}\n\n## Verdict\nThe final answer is {verdict}. Score: {1 if verdict == 'correct' else 0}"
    )


# A line as the fork's logger builds it (decode keeps special tokens; the EOS is inside the valid response).
def fork_sample(problem, step: int, critic: bool, rng: random.Random) -> dict:
    question, answer, _ = problem
    pred = math_answer(problem, step, rng)
    text = math_output(question, pred, rng) + (" 🧮" if not question.isascii() else "") + "<|im_end|>"
    tokens = decoded_tokens(text)
    logprobs = policy_logprobs(len(tokens), rng)
    reward = 1.0 if pred == answer else 0.0
    sample = {
        "step": step,
        "prompt": f"{QWEN_SYSTEM}<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n",
        "response": text,
        "response_tokens": tokens,
        "logprobs": logprobs,
        "token_rewards": kl_token_rewards(logprobs, reference_logprobs(logprobs, rng), reward, kl_coef=0.001),
        "reward": reward,
        "ground_truth": answer,
    }
    if critic:
        sample["values"] = [f32(rng.gauss(0.4, 0.2)) for _ in tokens]
    sample["rm_response"] = rm_critique(question, pred, answer)
    return sample


# <root>/<project>/<experiment>/rollout_data_rank0.jsonl as RLLoggingBoardLogger.log appends it once a step, from the
# verl fork's verl/utils/rl_logging_board_utils.py (zyang6/DeepEyes at 3679418674c47bf7aef508912e38f01e2d9ae610; the
# files dddraxxx/RLLoggingBoard reads): keys step, prompt, response, response_tokens, logprobs, token_rewards, reward,
# then ground_truth, values (with a critic), rm_response.
def write_verl_fork_run(root, project, experiment, steps, n=4, prompts_per_step=3, critic=True, seed=2) -> Path:
    rng = random.Random(seed)
    save_path = os.path.join(root, project, experiment)
    os.makedirs(save_path, exist_ok=True)
    for step in range(1, steps + 1):
        batch = [p for p in step_problems(step, prompts_per_step) for _ in range(n)]
        with open(os.path.join(save_path, "rollout_data_rank0.jsonl"), "a") as f:
            for problem in batch:
                f.write(f"{json.dumps(fork_sample(problem, step, critic, rng), ensure_ascii=False)}\n")
    return Path(save_path)
