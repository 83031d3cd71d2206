"""The board opening Tinker's rollouts as its writers write them (copies of their code paths, tests/support/tinker_runs.py):
samples, rewards, groups and fields checked against the raw summaries (json.loads of each line here, never the
converter), texts against the truth the writer knew (which answer each trajectory gave: the files never say it), a
response attached only where its reward tells whose it is, never to the wrong trajectory, and bad or partial files
counted in the load report."""

import json
from collections import Counter
from pathlib import Path

import rl_board
from rl_board.formats import tinker
from rl_board.reading.search import export_jsonl
from tests.support.tinker_runs import tinker_run

# Training batches (a group's answers per env: tests/support/tinker_runs.py's ANSWERS), with an evaluation before
# iteration 1. Iteration 0: rewards all distinct; tied with the same texts; constant (dropped, but logged); tied with
# different texts (0.0: \boxed{wrong} and \boxed{other}); one past num_groups_to_log (never logged).
PLANS = [[[0, 1, 2, 3], [0, 0, 1, 1], [1, 1, 1, 1], [1, 4, 0, 2], [3, 2, 0, 1]],
         [[0, 1, 4, 2], [3, 3, 0, 2]]]
EVALS = {1: [[0, 1], [1, 4], [2, 2]]}


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


# Every loaded line as the board converted it (what a JSONL download gives).
def board_lines(run) -> list[dict]:
    return [json.loads(line) for step in run.steps for line in export_jsonl(run.snapshot.step_rows(step)).decode("utf-8").splitlines()]


# The raw summaries: (iteration, base name, record) of every line of every iteration's files.
def raw_summaries(log_path: Path) -> list[tuple[int, str, dict]]:
    return [(int(folder.name.split("_")[1]), path.name.removesuffix("_rollout_summaries.jsonl"), record)
            for folder in sorted(log_path.glob("iteration_*")) for path in sorted(folder.glob("*_rollout_summaries.jsonl")) for record in lines(path)]


def test_summaries_are_a_line_per_trajectory_with_the_texts_the_logtree_can_attribute(tmp_path):
    log_path, truth = tinker_run(tmp_path / "runs" / "math", PLANS, EVALS, num_groups_to_log=4)
    run = rl_board.open_run(log_path)
    raw = raw_summaries(log_path)
    assert run.format == tinker.NAME and run.steps == sorted({step for step, _, _ in raw}) == [0, 1]
    shown = sorted(board_lines(run), key=lambda line: (line["step"], line["group_id"], line["traj_idx"]))
    raw = sorted(raw, key=lambda item: (item[0], f"{item[1]}:{item[2]['group_idx']}", item[2]["traj_idx"]))
    assert len(shown) == len(raw) == len(truth)
    attributed = 0
    for line, (step, base, record) in zip(shown, raw):
        assert (line["step"], line["group_id"], line["split"], line["reward"]) == (step, f"{base}:{record['group_idx']}", record["split"], record["total_reward"])
        assert (line["final_reward"], line["final_ob_len"], line["steps"], line["policy_version"]) == (record["final_reward"], record["final_ob_len"], record["steps"], record["sampling_client_step"])
        assert line["tags"] == ", ".join(record["tags"]) and line["num_turns"] == len(record["steps"]) and line["ac_tokens"] == sum(turn["ac_len"] for turn in record["steps"])
        assert (line["correct"], line["format"]) == (record["steps"][0]["metrics"]["correct"], record["steps"][0]["metrics"]["format"])
        question, answer, logged = truth[(step, base, record["group_idx"], record["traj_idx"])]
        if not logged:
            assert (line["prompt"], line["response"], line["logtree"]) == (None, None, "not logged")
            continue
        assert line["prompt"] == question and line["ground_truth"] == str(int(question.split()[2].split("+")[0]) + int(question.split()[2].split("+")[1].rstrip("?")))
        # attributable: its reward unique in the group, or every trajectory with its reward gave the same text
        group = [other for s, b, other in raw if (s, b, other["group_idx"]) == (step, base, record["group_idx"])]
        tied = [truth[(step, base, other["group_idx"], other["traj_idx"])][1] for other in group if f"{other['total_reward']:.3f}" == f"{record['total_reward']:.3f}"]
        if len(set(tied)) == 1:
            assert (line["response"], line["logtree"]) == (answer, "response attributed")
            attributed += 1
        else:
            assert (line["response"], line["logtree"]) == (None, "prompt only")
    assert attributed and any(line["response"] is None and line["logtree"] == "prompt only" for line in shown)
    notes = run.problems[run.problems["kind"] == "note"]
    tied_notes = notes[notes["reason"].str.contains("share the reward 0.000")]
    assert sorted(tied_notes["file"]) == ["iteration_000000_train_rollout_summaries.jsonl", "iteration_000001_eval_test_rollout_summaries.jsonl",
                                          "iteration_000001_train_rollout_summaries.jsonl"]
    dropped = notes[notes["reason"].str.contains("match no one group")]  # iteration 0's constant group, logged, not in the summaries
    assert dropped["file"].tolist() == ["iteration_000000_train_rollout_summaries.jsonl"] and dropped["reason"].str.startswith("1 of the logtree's 4 groups").all()
    samples = run.samples
    assert Counter(samples["text/split"]) == Counter(record["split"] for _, _, record in raw)
    assert samples.groupby(["step", "group_id"]).size().sort_index().tolist() == [
        count for _, count in sorted(Counter((step, f"{base}:{record['group_idx']}") for step, base, record in raw).items())]
    assert (samples["staleness"] == 0).all()
    assert rl_board.list_runs(log_path) == [str(log_path)] and rl_board.list_runs(log_path.parent) == [str(log_path)]
    alone = rl_board.open_run(log_path / "iteration_000001")
    assert alone.steps == [1] and sorted(alone.samples["reward"]) == sorted(record["total_reward"] for step, _, record in raw if step == 1)


def test_bad_lines_and_a_logtree_being_written_are_counted_never_fatal(tmp_path):
    log_path, truth = tinker_run(tmp_path / "log", [PLANS[0]], num_groups_to_log=4)
    folder = log_path / "iteration_000000"
    summaries, logtree = folder / "train_rollout_summaries.jsonl", folder / "train_logtree.json"
    raw = summaries.read_text("utf-8").splitlines()
    bad = {**json.loads(raw[1]), "total_reward": "high"}
    summaries.write_text("\n".join([raw[0], "{not json", json.dumps(bad), *raw[2:]]) + "\n" + raw[2][:40], "utf-8")
    complete = logtree.read_bytes()
    logtree.write_bytes(complete[: len(complete) // 2])  # the logtree cut off while being written
    run = rl_board.open_run(log_path)
    kept = [json.loads(line) for line in summaries.read_text("utf-8").splitlines()[:-1] if line.startswith("{\"")]
    assert len(run.samples) == len(kept) == len(raw)
    assert run.samples["reward"].isna().sum() == 1  # "high" is not a reward
    kinds = run.problems.groupby("kind").size().to_dict()
    assert kinds.get("incomplete") == 1 and kinds.get("note") == 1 and sum(kinds.values()) == 3
    assert run.problems[run.problems["kind"] == "note"]["reason"].str.contains("train_logtree.json could not be read").all()
    assert (run.samples["text/logtree"] == "not logged").all()
    logtree.write_bytes(complete)  # finished: the texts come
    again = rl_board.open_run(log_path)
    shown = board_lines(again)
    assert {line["logtree"] for line in shown} == {"not logged", "prompt only", "response attributed"}
    for line in shown:
        if line["response"] is not None and line["group_idx"] is not None:
            assert line["response"] == truth[(0, "train", line["group_idx"], line["traj_idx"])][1]  # never another's
    logtree.unlink()
    without = rl_board.open_run(log_path)
    assert without.problems["reason"].str.contains("have no logtree").sum() == 1 and (without.samples["text/logtree"] == "not logged").all()


def test_groups_alike_in_every_length_and_reward_get_no_texts(tmp_path):
    # two questions answered alike (\boxed{right}, \boxed{wrong}: the same lengths and rewards): which logged group is
    # which summaries' group the logtree does not say, so neither gets texts
    log_path, truth = tinker_run(tmp_path / "log", [[[0, 1], [0, 1], [0, 2]]], num_groups_to_log=4)
    run = rl_board.open_run(log_path)
    shown = board_lines(run)
    raw = {(record["group_idx"], record["traj_idx"]): record for _, _, record in raw_summaries(log_path)}
    alike = {group for group, _ in raw if [raw[(group, t)]["steps"][0]["ac_len"] for t in (0, 1)] == [9, 9] and raw[(group, 1)]["total_reward"] == 0.0}
    assert len(alike) == 2
    for line in shown:
        if line["group_idx"] in alike:
            assert (line["prompt"], line["response"], line["logtree"]) == (None, None, "not logged")
        else:
            assert (line["prompt"], line["response"]) == truth[(0, "train", line["group_idx"], line["traj_idx"])][:2]
    assert run.problems["reason"].str.startswith("2 of the logtree's 3 groups match no one group").sum() == 1
