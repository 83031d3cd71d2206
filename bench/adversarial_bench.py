"""Opening input of shapes that made the board's work grow faster than the input: keys outside the format that are
many (a key per line, an id used as the key, and a reward function named per line: in one rank file written by the
logger's writer, opened from its summaries files and parsed; in each of 40 small rank files, which share one cache
file), short lines each with a few ordinary keys outside the format, a step whose first lines are bad, a JSONL of
another kind in a run folder (every line a problem), a long training history stepping back now and then (resumes),
a W&B transaction log with one big record, a verifiers trace (prime-rl's rollouts) of many nodes in a chain, a
prime-rl step of many token exports cut at seq_len, an agent's lines whose turns hold "step" keys of their own, and
lines of a million "step" keys.

Each case runs in a fresh process with an empty index cache, so that its peak memory is its own: runs are opened with
RunStore.load as the page calls it (no worker processes), the history with read_history, the W&B log with read_log.
Median of --repeats. --board points at another checkout of the board, to time it on the same input. Prints a
markdown table.

    python bench/adversarial_bench.py
    python bench/adversarial_bench.py --board /path/to/another/checkout --repeats 1
"""

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

FOLDER = PROJECT / "bench" / "runs" / "adversarial"
RANK_FILES = 40
MEASURE = """
import resource, sys, time
sys.path.insert(0, {board!r})
start = time.perf_counter()
{code}
seconds = time.perf_counter() - start
print(seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, result)
"""
OPEN_RUN = """
from rl_board.reading.store import RunStore
snapshot = RunStore({path!r}).load({max_samples}, parallel=False)
fields = sum(name.startswith(("rewards/", "extra/", "text/")) for name in snapshot.samples)
result = f"{{len(snapshot.samples):,}} samples, {{fields}} field columns, {{len(snapshot.problems):,}} load report rows"
"""
READ_HISTORY = """
from rl_board.reading.history import read_history
history = read_history({path!r})
result = f"{{len(history.train):,}} train rows, {{len(history.eval):,}} eval rows"
"""
READ_WANDB_LOG = """
from rl_board.reading.wandb_log import read_log
log = read_log(open({path!r}, "rb").read())
result = f"{{len(log.config):,}} config keys"
"""


# A line of the logger's format with a key of its own and a reward function of its own.
def keyed_line(row: int, step: int) -> dict:
    return {"prompt": f"question {row}", "response": "answer", "reward": 1.0, "step": step, "rewards_per_func": {f"check_{row}": 0.5}, f"id_{row}": row}


def key_per_line_run(folder: Path, lines: int, summaries: bool) -> Path:
    from rollout_logger.metadata import SUMMARIES_SUFFIX
    from rollout_logger.writer import JsonlWriter

    folder.mkdir(parents=True)
    path = folder / "rollout_data_rank_0.jsonl"
    writer = JsonlWriter(path, lambda kind, message: print(message, file=sys.stderr), summaries=path.with_name(path.name + SUMMARIES_SUFFIX) if summaries else None)
    for start in range(0, lines, 32):  # a batch of 32 lines a write, a step of 64
        writer.write([keyed_line(row, row // 64) for row in range(start, min(start + 32, lines))])
    writer.close()
    return folder


def key_per_line_ranks(folder: Path, lines: int) -> Path:
    folder.mkdir(parents=True)
    for rank in range(RANK_FILES):
        rows = range(rank * lines // RANK_FILES, (rank + 1) * lines // RANK_FILES)
        (folder / f"rollout_data_rank_{rank}.jsonl").write_text("".join(json.dumps(keyed_line(row, row % (lines // RANK_FILES) // 16)) + "\n" for row in rows))
    return folder


def jsonl_run(folder: Path, lines) -> Path:
    folder.mkdir(parents=True)
    with open(folder / "rollout_data_rank_0.jsonl", "w") as file:
        file.writelines(json.dumps(line) + "\n" for line in lines)
    return folder


def ordinary_keys(lines: int):
    sources = ["gsm8k", "math", "aime"]
    for row in range(lines):
        yield {
            "prompt": f"question {row}", "response": "answer", "reward": row % 3 / 2, "step": row // 64,
            "rewards_per_func": {"accuracy": float(row % 2), "format": 1.0}, "data_source": sources[row % 3], "difficulty": row % 5,
            "acc": bool(row % 2), "pred": str(row % 10),
        }


def bad_step(steps: int, per_step: int, bad: int):
    for step in range(steps):
        if step == steps // 2:  # a reward service down for a while: its first lines say so
            yield from ({"prompt": "p", "response": "r", "reward": "N/A", "step": step} for _ in range(bad))
        yield from ({"prompt": "p", "response": "r", "reward": 1.0, "step": step} for _ in range(per_step))


def another_kind(lines: int):
    yield from ({"text": f"a dataset's row {row}", "label": row % 2} for row in range(lines))
    yield from ({"prompt": "p", "response": "r", "reward": 1.0, "step": step} for step in range(100))


# An agent's lines: its own step first, then turns that number themselves with a "step" key of their own (after other
# keys), the steps interleaved as a rank's lines are with several rank files' steps.
def agent_steps(steps: int, per_step: int):
    for number in range(per_step):
        for step in range(steps):
            turns = [{"role": "agent", "action": "look", "step": turn} for turn in range(1 + (step + number) % 6)]
            yield {"step": step, "prompt": f"maze {number}", "response": "out", "reward": float(number % 2), "turns": turns}


# Lines of an environment's events, each numbered with a "step" key of its own.
def many_step_keys(lines: int, keys: int):
    for step in range(lines):
        yield {"step": step, "prompt": "p", "response": "r", "reward": 1.0, "events": [{"kind": "tick", "step": event} for event in range(keys)]}


# A trainer_state.json of `entries` logged steps that go back 5 steps every 1,000 (a resume).
def long_history(folder: Path, entries: int) -> Path:
    folder.mkdir(parents=True)
    log, step = [], 0
    for entry in range(entries):
        step = step - 5 if entry % 1000 == 999 else step + 1
        log.append({"step": step, "loss": 1 / (entry + 1), "reward": entry % 7 / 7, "kl": 0.01, "grad_norm": 1.0, "learning_rate": 1e-6})
    (folder / "trainer_state.json").write_text(json.dumps({"log_history": log, "global_step": step}))
    return folder


# A W&B transaction log of one config record of `items` items of 1 kB, as wandb's own DataStore writes it.
def wandb_log(folder: Path, items: int) -> Path:
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal.datastore import DataStore

    folder.mkdir(parents=True)
    record = wandb_internal_pb2.Record()
    for index in range(items):
        item = record.config.update.add()
        item.key, item.value_json = f"key_{index}", json.dumps("x" * 1000)
    store = DataStore()
    store.open_for_write(str(folder / "run-big.wandb"))
    store.write(record)
    store.close()
    return folder / "run-big.wandb"


# A prime-rl run folder of one step whose traces file holds one episode of `nodes` messages in a chain (a long agent
# episode), as verifiers writes a trace's nodes.
def chain_trace(folder: Path, nodes: int) -> Path:
    traces = folder / "rollouts" / "step_1" / "train" / "all"
    traces.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("")
    chain = [
        {"parent": index - 1 if index else None, "message": {"role": "assistant" if index % 2 else "user", "content": f"m{index}"},
         "token_ids": [index % 1000, 7], "mask": [index % 2 == 1] * 2, "logprobs": [-0.1, -0.2] if index % 2 else None}
        for index in range(nodes)
    ]
    record = {"id": "e1", "group": {"id": "g1"}, "traces": [{"id": "t1", "nodes": chain, "rewards": {"r": {"score": 1.0, "weight": 1.0}}}]}
    (traces / "traces.jsonl").write_text(json.dumps(record) + "\n")
    return folder


# A prime-rl step of `sequences` token exports, each one token shorter than its trace's branch (cut at seq_len).
def cut_exports(folder: Path, sequences: int) -> Path:
    exports, traces = folder / "token_exports" / "step_1", folder / "rollouts" / "step_1" / "train" / "effective"
    exports.mkdir(parents=True)
    traces.mkdir(parents=True)
    records, lines = [], []
    for index in range(sequences):
        prompt, response = [index // 1000 + 1, index % 1000 + 1, 5, 6], [(index * 7 + k) % 30000 + 2 for k in range(64)]
        nodes = [{"parent": None, "message": {"role": "user", "content": f"q{index}"}, "token_ids": prompt, "mask": [False] * 4},
                 {"parent": 0, "message": {"role": "assistant", "content": f"a{index}"}, "token_ids": response, "mask": [True] * 64, "logprobs": [-0.5] * 64}]
        records.append(json.dumps({"id": f"e{index}", "group": {"id": f"g{index // 4}"}, "traces": [{"id": "t", "nodes": nodes, "rewards": {"r": {"score": 1.0}}}]}))
        lines.append(json.dumps({"schema_version": 1, "step": 1, "rank": 0, "token_ids": prompt + response[:-1], "loss_mask": [False] * 4 + [True] * 63,
                                 "advantages": [0.0] * 4 + [0.5] * 63, "trainer_logprobs": [0.0] * 4 + [-0.5] * 63}))
    (traces / "traces.jsonl").write_text("\n".join(records) + "\n")
    (exports / "rank_0.jsonl").write_text("\n".join(lines) + "\n")
    (exports / "STABLE").write_text("")
    return folder


def measure(board: str, code: str, repeats: int) -> tuple[float, float, str]:
    seconds, memory = [], []
    for _ in range(repeats):
        cache = FOLDER / "cache"
        shutil.rmtree(cache, ignore_errors=True)
        output = subprocess.run([sys.executable, "-c", MEASURE.format(board=board, code=code)], env={"RL_LOGGING_BOARD_CACHE": str(cache), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True)
        spent, peak, result = output.stdout.strip().split(" ", 2)
        seconds.append(float(spent))
        memory.append(float(peak))
    return statistics.median(seconds), statistics.median(memory), result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--board", default=str(PROJECT), help="the checkout of the board to time (default: this one)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lines", type=int, default=16000, help="lines of each key-per-line run")
    arguments = parser.parse_args()
    shutil.rmtree(FOLDER, ignore_errors=True)
    lines = arguments.lines
    cases = [
        (f"a key per line, {lines:,} lines, from the logger's summaries", OPEN_RUN, key_per_line_run(FOLDER / "summaries", lines, True), 128),
        (f"a key per line, {lines:,} lines, parsed", OPEN_RUN, key_per_line_run(FOLDER / "parsed", lines, False), 128),
        (f"a key per line, {lines:,} lines in {RANK_FILES} rank files", OPEN_RUN, key_per_line_ranks(FOLDER / "ranks", lines), 128),
        ("80,000 short lines, 6 keys outside the format each", OPEN_RUN, jsonl_run(FOLDER / "ordinary", ordinary_keys(80_000)), 128),
        ("a step of 8,000 bad lines among 400,000, 16 samples a step", OPEN_RUN, jsonl_run(FOLDER / "bad_step", bad_step(1000, 400, 8000)), 16),
        ("300,000 lines of another kind beside 100 of the board's", OPEN_RUN, jsonl_run(FOLDER / "another_kind", another_kind(300_000)), 128),
        ("an agent's 20,000 lines of 100 steps, turns numbered with \"step\" keys, 16 samples a step", OPEN_RUN, jsonl_run(FOLDER / "agent", agent_steps(100, 200)), 16),
        ("8 lines of 1,000,000 events, each with a \"step\" key", OPEN_RUN, jsonl_run(FOLDER / "step_keys", many_step_keys(8, 1_000_000)), 128),
        ("a trainer_state.json of 80,000 entries, resumed every 1,000", READ_HISTORY, long_history(FOLDER / "history", 80_000), 0),
        ("a W&B log of one 64 MB record", READ_WANDB_LOG, wandb_log(FOLDER / "wandb", 64_000), 0),
        ("a verifiers trace of 64,000 nodes in a chain (prime-rl)", OPEN_RUN, chain_trace(FOLDER / "chain", 64_000), 128),
        ("a prime-rl step of 4,000 token exports cut at seq_len", OPEN_RUN, cut_exports(FOLDER / "cut", 4000), 1 << 20),
    ]
    print(f"board: {arguments.board}; a fresh process each, median of {arguments.repeats}\n")
    print("| input | time (s) | peak memory (GiB) | result |")
    print("|---|---:|---:|---|")
    for name, code, path, max_samples in cases:
        seconds, memory, result = measure(arguments.board, code.format(path=str(path), max_samples=max_samples), arguments.repeats)
        print(f"| {name} | {seconds:.2f} | {memory:.2f} | {result} |", flush=True)
    shutil.rmtree(FOLDER, ignore_errors=True)


if __name__ == "__main__":
    main()
