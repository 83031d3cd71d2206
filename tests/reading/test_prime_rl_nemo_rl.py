"""The board opening prime-rl's token exports (with its traces) and NeMo-RL's train_data_step files as those trainers
write them (tests/support/prime_rl_nemo_rl.py runs their own writing code on a toy GRPO batch).

Every number and text checked is worked out here from the raw files (json.loads of each line, the traces walked
here), never from the board's converters: Δ = trainer - inference per token, the weight prime-rl's loss applied, the
per-sample mean |Δ|, rewards, advantages, texts, and the token ids decoded with the tokenizer that made them."""

import json
import math
import os
import time
from pathlib import Path

import numpy as np
import pytest

import rl_board
from rl_board.formats import FORMATS, board_jsonl, nemo_rl, prime_rl
from rl_board.formats.verifiers_traces import Branch, Branches, episode_branches
from rl_board.reading.search import export_jsonl
from rl_board.tokenizer import TOKENIZER_VARIABLE, tokenizer_identity, tokenizer_of
from tests.support.prime_rl_nemo_rl import QUESTIONS, nemo_rl_run, prime_rl_run, save_tokenizer
from tests.support.s3_server import make_bucket, s3_server, upload_folder  # noqa: F401  (s3_server: a fixture)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


# A step's lines as the board converted them (what a JSONL download of the step gives).
def exported_lines(run, step: int) -> list[dict]:
    return [json.loads(line) for line in export_jsonl(run.snapshot.step_rows(step)).decode("utf-8").splitlines()]


def first_loss(mask) -> int:
    return next(i for i, flag in enumerate(mask) if flag)


def problems(run, kind: str) -> list[list]:
    return run.problems[run.problems["kind"] == kind].values.tolist()


# ------------------------------------------------------------------------------------------------------ prime-rl


# The raw export line each loaded sample came from: (sample row, line) in the run's order.
def prime_rl_sources(run, run_dir: Path) -> list[tuple]:
    found = []
    for row in run.samples.itertuples():
        assert Path(row.source_file).is_relative_to(run_dir / "token_exports")  # the export the conversion was made from
        found.append((row, lines(Path(row.source_file))[row.line - 1]))
    return found


# Each trace's branch (a chain here: its nodes in order) by its tokens, walked here from the traces file.
def trace_branches(run_dir: Path, step: int) -> list[tuple]:
    branches = []
    for episode in lines(run_dir / "rollouts" / f"step_{step}" / "train" / "effective" / "traces.jsonl"):
        for trace in episode["traces"]:
            tokens = [t for node in trace["nodes"] for t in node["token_ids"]]
            branches.append((tokens, episode, trace))
    return branches


def trace_of(run_dir: Path, step: int, ids: list[int]):
    return next((episode, trace, tokens) for tokens, episode, trace in trace_branches(run_dir, step) if tokens[: len(ids)] == ids)


def test_prime_rl_tokens_are_the_trainer_s_and_the_inference_engine_s_logprobs(tmp_path, tokenizer):
    """Each exported sequence is a sample; on its response tokens Δ is trainer_logprobs - inference_logprobs, the applied
    weight prime-rl's default loss gave it (importance_ratio, 0 where DPPO masked it), tokens off the loss mask are tool
    tokens; mean |Δ|, the advantage over the loss tokens, and the step is the folder's."""
    run_dir = prime_rl_run(tmp_path / "run", tokenizer, steps=(1, 2), ranks=2)
    run = rl_board.open_run(run_dir)
    assert run.format == prime_rl.NAME
    assert run.steps == [1, 2]
    sources = prime_rl_sources(run, run_dir)
    assert len(sources) == 2 * len(QUESTIONS) * 2 and run.problems.empty
    masked = 0
    for row, raw in sources:
        assert row.step == raw["step"] == int(Path(row.source_file).parent.name.removeprefix("step_"))
        first = first_loss(raw["loss_mask"])
        trainer, inference = (np.array(raw[key][first:], dtype=float) for key in ("trainer_logprobs", "inference_logprobs"))
        loss = np.array(raw["loss_mask"][first:])
        expected = np.where(loss, trainer - inference, np.nan)
        tokens = run.tokens(row.step, row.sample)
        np.testing.assert_array_equal(tokens["delta"].to_numpy(), expected)
        np.testing.assert_array_equal(tokens["sampler_logp"].to_numpy(), np.where(loss, inference, np.nan))
        np.testing.assert_array_equal(tokens["logp"].to_numpy(), np.where(loss, trainer, np.nan))
        assert tokens["tool"].tolist() == (~loss).tolist()
        applied = np.array([0.0 if dropped else ratio for ratio, dropped in zip(raw["importance_ratio"][first:], raw["is_masked"][first:])])
        np.testing.assert_allclose(tokens["applied_is_ratio"].to_numpy(), np.where(loss, applied, np.nan), rtol=0, atol=0)
        masked += sum(raw["is_masked"][first:])
        assert row.avg_abs_mismatch == pytest.approx(np.abs(trainer - inference)[loss].mean(), rel=1e-12)
        trained = [a for a, flag in zip(raw["advantages"], raw["loss_mask"]) if flag]
        assert row.advantage == pytest.approx(sum(trained) / len(trained), abs=1e-12)
        shown = run.samples.loc[row.Index]  # (itertuples names the columns with a "/" by position)
        assert shown["extra/prompt_tokens"] == first and shown["extra/masked_tokens"] == sum(raw["is_masked"])
        assert shown["extra/micro_step"] == raw["micro_step"] and shown["text/env_name"] == raw["env_name"]
    assert masked > 0  # some tokens were dropped by the trust region: their weight is 0 above
    exported = {(line["step"], line["export_sequence_idx"], line["rank"]): line for step in run.steps for line in exported_lines(run, step)}
    varying = 0
    for row, raw in sources:
        first, line = first_loss(raw["loss_mask"]), exported[(raw["step"], raw["export_sequence_idx"], raw["rank"])]
        trained = {a for a, flag in zip(raw["advantages"], raw["loss_mask"]) if flag}
        varying += len(trained) > 1
        assert line.get("token_advantages") == (raw["advantages"][first:] if len(trained) > 1 else None)
    assert varying == 4  # the multi-turn groups' sequences: a later turn's credit differs


def test_prime_rl_samples_take_their_reward_texts_and_group_from_the_matching_trace(tmp_path, tokenizer):
    """An exported sequence matched to its trace (the branch whose tokens it is) shows the trace's messages as prompt and
    response, its reward (scores times weights, summed), each reward's score and its episode's group."""
    run_dir = prime_rl_run(tmp_path / "run", tokenizer, steps=(1,), ranks=2)
    run = rl_board.open_run(run_dir)
    table = run.step(1)
    for row, raw in prime_rl_sources(run, run_dir):
        episode, trace, _ = trace_of(run_dir, 1, raw["token_ids"])
        nodes = trace["nodes"]
        assert row.reward == sum(r["score"] * r["weight"] for r in trace["rewards"].values())
        shown = run.samples.loc[row.Index]
        assert shown["rewards/correct"] == trace["rewards"]["correct"]["score"]
        assert shown["rewards/format"] == trace["rewards"]["format"]["score"]
        assert shown["group_id"] == episode["group"]["id"]
        texts = table[table["sample"] == row.sample].iloc[0]
        assert texts["prompt"] == nodes[0]["message"]["content"]
        response = [node["message"] for node in nodes[1:]]
        assert texts["response"] == (response[0]["content"] if len(response) == 1 else json.dumps(response, ensure_ascii=False))


def test_prime_rl_sequence_cut_at_seq_len_still_finds_its_trace(tmp_path, tokenizer):
    """The trainer cuts a sequence longer than seq_len: the export starts its trace's tokens, and still takes its reward."""
    run_dir = prime_rl_run(tmp_path / "run", tokenizer, steps=(1,), ranks=1, seq_len=50)
    run = rl_board.open_run(run_dir)
    cut = 0
    for row, raw in prime_rl_sources(run, run_dir):
        _, trace, tokens = trace_of(run_dir, 1, raw["token_ids"])
        assert row.reward == sum(r["score"] * r["weight"] for r in trace["rewards"].values())
        if len(tokens) > len(raw["token_ids"]):
            cut += 1
            assert run.samples.loc[row.Index, "extra/cut_tokens"] == len(tokens) - len(raw["token_ids"])
    assert cut == 2  # the multi-turn group's two sequences


# A sequence cut at seq_len is the first branch (in the traces' order) whose tokens it starts: found among sorted tokens,
# the same branch a look at each in turn finds (4,000 sequences of a step took 14 s so), over random branches sharing
# prefixes; and a trace of 64,000 nodes in a chain is walked once per branch (a list's `in` made it N² steps: 14 s).
def test_a_cut_sequence_finds_the_first_branch_it_starts_and_a_long_chain_is_walked_once():
    rng = np.random.default_rng(0)
    branches = [Branch(nodes=[], ends=np.array([]), tokens=rng.integers(0, 3, size=int(rng.integers(1, 9))), rewards={}, shown={"episode_id": index, "trace_id": 0}, metrics={}, trace={}) for index in range(400)]
    found = Branches(branches)
    for _ in range(2000):
        tokens = rng.integers(0, 3, size=int(rng.integers(0, 9)))
        exact = next((branch for branch in found.branches if np.array_equal(branch.tokens, tokens)), None)
        longer = next((branch for branch in found.branches if len(branch.tokens) > len(tokens) and np.array_equal(branch.tokens[: len(tokens)], tokens)), None)
        assert found.find(tokens.tolist()) is (exact or longer)
    nodes = [{"parent": index - 1 if index else None, "message": {"role": "assistant" if index % 2 else "user", "content": f"m{index}"}, "token_ids": [index % 1000, 7], "mask": [index % 2 == 1] * 2} for index in range(64_000)]
    start = time.perf_counter()
    [branch] = episode_branches({"id": "e", "group": {"id": "g"}, "traces": [{"id": "t", "nodes": nodes, "rewards": {}}]})
    assert time.perf_counter() - start < 5  # 0.5 s here
    assert len(branch.nodes) == 64_000 and branch.tokens[:4].tolist() == [0, 7, 1, 7]


def test_prime_rl_step_without_stable_is_left_out_and_reported_until_marked(tmp_path, tokenizer):
    """A step folder without STABLE is being written: none of its lines are shown, the load report names it; once
    STABLE is touched the step shows. A rank file changed after STABLE (a resumed trainer writing the step again) is
    left out the same way until STABLE is touched again."""
    run_dir = prime_rl_run(tmp_path / "run", tokenizer, steps=(1, 2, 3), ranks=2, unstable=(3,))
    assert (run_dir / "token_exports" / "step_3" / "rank_0.jsonl").stat().st_size > 0
    run = rl_board.open_run(run_dir)
    assert run.steps == [1, 2]
    [[file, line, kind, reason]] = problems(run, "skipped")
    assert (file, line, kind) == ("step_3/", 0, "skipped") and "STABLE" in reason
    (run_dir / "token_exports" / "step_3" / "STABLE").touch()
    run = rl_board.open_run(run_dir)
    assert run.steps == [1, 2, 3] and problems(run, "skipped") == []
    assert len(run.step(3)) == len(lines(run_dir / "token_exports/step_3/rank_0.jsonl")) + len(lines(run_dir / "token_exports/step_3/rank_1.jsonl"))
    stable = (run_dir / "token_exports" / "step_2" / "STABLE").stat().st_mtime_ns
    rewritten = run_dir / "token_exports" / "step_2" / "rank_1.jsonl"
    os.utime(rewritten, ns=(stable + 10**9, stable + 10**9))
    run = rl_board.open_run(run_dir)
    assert run.steps == [1, 3]
    [[file, line, kind, reason]] = problems(run, "skipped")
    assert (file, kind) == ("step_2/", "skipped") and "rank_1.jsonl" in reason and "STABLE" in reason
    os.utime(run_dir / "token_exports" / "step_2" / "STABLE", ns=(stable + 2 * 10**9, stable + 2 * 10**9))
    assert rl_board.open_run(run_dir).steps == [1, 2, 3]


def test_prime_rl_token_exports_folder_opens_alone(tmp_path, tokenizer):
    """Opened at its token_exports/ folder, the run is the same (its traces found beside it)."""
    run_dir = prime_rl_run(tmp_path / "run", tokenizer, steps=(1,), ranks=1)
    whole, alone = rl_board.open_run(run_dir), rl_board.open_run(run_dir / "token_exports")
    assert alone.format == prime_rl.NAME
    columns = ["step", "reward", "advantage", "avg_abs_mismatch", "group_id"]
    assert alone.samples[columns].equals(whole.samples[columns])


def test_prime_rl_run_on_s3_reads_the_same_steps_traces_and_report(tmp_path, tokenizer, s3_server):
    """On object storage the step folders, their STABLE markers and the traces are found as on disk."""
    run_dir = prime_rl_run(tmp_path / "run", tokenizer, steps=(1, 2), ranks=2, unstable=(2,))
    bucket = make_bucket(s3_server.endpoint_url, "prime-rl-run")
    upload_folder(s3_server.endpoint_url, run_dir, f"s3://{bucket}/outputs/run")
    local, remote = rl_board.open_run(run_dir), rl_board.open_run(f"s3://{bucket}/outputs/run")
    assert remote.format == prime_rl.NAME and remote.steps == local.steps == [1]
    assert remote.problems.values.tolist() == local.problems.values.tolist() == [["step_2/", 0, "skipped", problems(local, "skipped")[0][3]]]
    columns = ["step", "line", "reward", "advantage", "avg_abs_mismatch", "group_id", "rewards/correct"]
    assert remote.samples[columns].equals(local.samples[columns]) and local.samples["reward"].notna().all()


def test_prime_rl_token_ids_show_as_ids_without_a_tokenizer_and_decoded_with_one(tmp_path, tokenizer, monkeypatch):
    """Without traces the exports hold token ids only: the tokens are the ids and the texts say they were not decoded;
    with RL_LOGGING_BOARD_TOKENIZER naming the tokenizer (its file, or a model in the local cache) they are decoded."""
    run_dir = prime_rl_run(tmp_path / "run", tokenizer, steps=(1,), ranks=1, traces=False)
    run = rl_board.open_run(run_dir)
    table = run.step(1)
    sources = prime_rl_sources(run, run_dir)
    for row, raw in sources:
        first = first_loss(raw["loss_mask"])
        assert run.tokens(1, row.sample)["token"].tolist() == [str(i) for i in raw["token_ids"][first:]]
        texts = table[table["sample"] == row.sample].iloc[0]
        assert texts["response"].startswith("<token ids, not decoded") and " ".join(map(str, raw["token_ids"][first:][:16])) in texts["response"]
        assert " ".join(map(str, raw["token_ids"][:first][:16])) in texts["prompt"]
        assert math.isnan(row.reward)
    path = save_tokenizer(tmp_path / "tok")
    hub = tmp_path / "hub"
    snapshot = hub / "models--toy--bpe" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "tokenizer.json").write_bytes(path.read_bytes())
    (hub / "models--toy--bpe" / "refs").mkdir()
    (hub / "models--toy--bpe" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    for spec in (str(path), "toy/bpe"):
        monkeypatch.setenv(TOKENIZER_VARIABLE, spec)
        run = rl_board.open_run(run_dir)
        table = run.step(1)
        for row, raw in prime_rl_sources(run, run_dir):
            first = first_loss(raw["loss_mask"])
            texts = table[table["sample"] == row.sample].iloc[0]
            assert texts["response"] == tokenizer.decode(raw["token_ids"][first:], skip_special_tokens=False)
            assert texts["prompt"] == tokenizer.decode(raw["token_ids"][:first], skip_special_tokens=False)
            shown = run.tokens(1, row.sample)["token"].tolist()
            if texts["response"].isascii():
                assert shown == [tokenizer.decode([i], skip_special_tokens=False) for i in raw["token_ids"][first:]]
            assert "".join(shown) == texts["response"]
    (tmp_path / "broken.json").write_text('{"not": "a tokenizer"}')
    for spec, said in (("toy/missing", "names no tokenizer.json"), (str(tmp_path / "broken.json"), "could not be read as a tokenizer")):
        monkeypatch.setenv(TOKENIZER_VARIABLE, spec)
        run = rl_board.open_run(run_dir)
        assert [reason for _, _, _, reason in problems(run, "note") if spec in reason and said in reason] != []
        assert run.step(1)["response"].str.startswith("<token ids, not decoded").all()


def test_a_tokenizer_spec_names_a_file_a_folder_or_a_cached_model_and_never_downloads(tmp_path, tokenizer, monkeypatch):
    path = save_tokenizer(tmp_path / "tok")
    ids = tokenizer.encode("What is 12*3?").ids
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    for spec in (str(path), str(path.parent)):
        assert tokenizer_of(tokenizer_identity(spec)[0]).decode(ids) == "What is 12*3?"
    assert tokenizer_identity("Qwen/Qwen2.5-0.5B")[0] is None  # not in the (empty) local cache: nothing fetched
    assert tokenizer_identity("")[0] is None


def test_prime_rl_another_loss_has_no_applied_weight(tmp_path, tokenizer):
    """With a loss other than the default one prime-rl exports no mask: Δ is shown, the applied weight is unknown."""
    run_dir = prime_rl_run(tmp_path / "run", tokenizer, steps=(1,), ranks=1, loss="ipo")
    run = rl_board.open_run(run_dir)
    for row, raw in prime_rl_sources(run, run_dir):
        assert all(flag is None for flag in raw["is_masked"])
        tokens = run.tokens(1, row.sample)
        assert "applied_is_ratio" not in tokens and "sampler_logp" in tokens
        assert np.isfinite(tokens["delta"]).sum() == sum(raw["loss_mask"])
    assert run.samples["avg_applied_is_ratio"].isna().all() and run.samples["avg_abs_mismatch"].notna().all()


def test_prime_rl_bad_line_keeps_its_line_number(tmp_path, tokenizer):
    run_dir = prime_rl_run(tmp_path / "run", tokenizer, steps=(1,), ranks=1)
    path = run_dir / "token_exports" / "step_1" / "rank_0.jsonl"
    text = path.read_text("utf-8").splitlines()
    text.insert(2, '{"schema_version": 1, "step": 1, "token_ids": [1, 2]}')  # no loss_mask: not an export line
    path.write_text("\n".join(text) + "\n", "utf-8")
    (path.parent / "STABLE").touch()
    run = rl_board.open_run(run_dir)
    assert [(file, line) for file, line, _, _ in problems(run, "skipped")] == [("step_1.rank_0.jsonl", 3)]
    assert sorted(run.samples["line"]) == [n for n in range(1, len(text) + 1) if n != 3]


# ------------------------------------------------------------------------------------------------------- NeMo-RL


def nemo_sources(run, run_dir: Path) -> list[tuple]:
    return [(row, {key: value[0] if isinstance(value, list) and len(value) == 1 else value for key, value in lines(run_dir / Path(row.file).name)[row.line - 1].items()})
            for row in run.samples.itertuples()]


def test_nemo_rl_lines_give_the_trainer_s_and_the_generation_s_logprobs_rewards_and_advantages(tmp_path, tokenizer):
    """Each line is a sample of the step its file names: on the generated tokens Δ is prev_logprobs -
    generation_logprobs, tokens between them not generated (a tool's) are tool tokens, padding is cut at input_lengths;
    reward is rewards, advantage the mean of advantages over the generated tokens, the samples of a prompt a group; a
    single-turn sample's texts are its contents, a multi-turn one's response its ids (no tokenizer)."""
    run_dir = nemo_rl_run(tmp_path / "logs", tokenizer, steps=2)
    run = rl_board.open_run(run_dir)
    assert run.format == nemo_rl.NAME and run.steps == [1, 2]
    assert not problems(run, "note")
    sources = nemo_sources(run, run_dir)
    assert len(sources) == 2 * len(QUESTIONS) * 2
    tables = {step: run.step(step) for step in run.steps}
    for row, raw in sources:
        assert Path(row.file).name == f"train_data_step{row.step}.jsonl"
        length, mask = raw["input_lengths"], raw["token_loss_mask"]
        assert len(raw["token_ids"]) > length  # padded to the batch
        first = first_loss(mask)
        generated = np.array(mask[first:length], dtype=bool)
        trainer, generation = (np.array(raw[key][first:length], dtype=float) for key in ("prev_logprobs", "generation_logprobs"))
        tokens = run.tokens(row.step, row.sample)
        np.testing.assert_array_equal(tokens["delta"].to_numpy(), np.where(generated, trainer - generation, np.nan))
        assert tokens["token"].tolist() == [str(i) for i in raw["token_ids"][first:length]]
        assert row.avg_abs_mismatch == pytest.approx(np.abs(trainer - generation)[generated].mean(), rel=1e-12)
        assert row.reward == raw["rewards"]
        trained = [a for a, flag in zip(raw["advantages"], mask) if flag]
        assert row.advantage == pytest.approx(sum(trained) / len(trained), abs=1e-12)
        texts = tables[row.step][tables[row.step]["sample"] == row.sample].iloc[0]
        if generated.all():
            assert (texts["prompt"], texts["response"]) == (raw["content"][0], raw["content"][-1])
        else:
            assert texts["response"].startswith("<token ids, not decoded")
    for step in run.steps:
        exported = exported_lines(run, step)
        raws = [raw for row, raw in sources if row.step == step]
        assert [line["idx"] for line in exported] == [raw["idx"] for raw in raws] == list(range(len(raws)))
        for line, raw in zip(exported, raws):
            first, length = first_loss(raw["token_loss_mask"]), raw["input_lengths"]
            trained = {a for a, flag in zip(raw["advantages"], raw["token_loss_mask"]) if flag}
            assert line.get("token_advantages") == (raw["advantages"][first:length] if len(trained) > 1 else None)
            assert (line["sample_loss_mask"], line["input_length"]) == (raw["sample_loss_mask"], length)
    groups = run.samples.groupby("step")["group_id"].apply(lambda ids: sorted(ids.value_counts().tolist()))
    assert groups.tolist() == [[2] * len(QUESTIONS)] * 2


def test_nemo_rl_validation_samples_are_in_the_run_at_their_step_with_mode_val(tmp_path, tokenizer):
    """val_data_step<N>.jsonl's samples show at step N with text/mode = val (training's: train): reward, texts split at
    the first assistant message, a multi-turn sample's turns, and a prompt's repeated samples a group of their own."""
    run_dir = nemo_rl_run(tmp_path / "logs", tokenizer, steps=2, val_steps=(0, 2))
    run = rl_board.open_run(run_dir)
    assert run.steps == [0, 1, 2] and not problems(run, "note")
    samples = run.samples
    for step in (0, 2):
        raws = lines(run_dir / f"val_data_step{step}.jsonl")
        shown = samples[(samples["step"] == step) & (samples["text/mode"] == "val")]
        assert len(shown) == len(raws) == 2 * len(QUESTIONS) and Path(shown["file"].iloc[0]).name == f"val_data_step{step}.jsonl"
        assert shown["reward"].tolist() == [raw["rewards"][0] for raw in raws]
        table = run.step(step)
        table = table[table["sample"].isin(shown["sample"])]
        for (_, texts), raw in zip(table.iterrows(), raws):
            [messages] = raw["content"]
            assert messages[0]["role"] == "user" and texts["prompt"] == messages[0]["content"]
            if len(messages) == 2:
                assert texts["response"] == messages[1]["content"]
            else:  # the multi-turn question: assistant, tool, assistant
                assert json.loads(texts["response"]) == [message["content"] for message in messages[1:]]
        prompts = [raw["content"][0][0]["content"] for raw in raws]
        ids = shown["group_id"].tolist()
        assert len(set(zip(prompts, ids))) == len(set(prompts)) == len(set(ids)) == len(QUESTIONS)
        assert not set(ids) & set(samples[(samples["step"] == step) & (samples["text/mode"] == "train")]["group_id"])
    assert (samples[samples["step"] == 1]["text/mode"] == "train").all() and len(samples[samples["step"] == 1]) == len(lines(run_dir / "train_data_step1.jsonl"))
    multi_turn = samples[(samples["text/mode"] == "val") & (samples["step"] == 0)].iloc[0]
    [messages] = lines(run_dir / "val_data_step0.jsonl")[0]["content"]
    turns = run.turns(0, multi_turn["sample"]).drop_duplicates("turn")
    assert (turns["role"].tolist(), turns["text"].tolist()) == ([m["role"] for m in messages], [m["content"] for m in messages])


def test_nemo_rl_multi_turn_sample_decoded_with_a_tokenizer(tmp_path, tokenizer, monkeypatch):
    run_dir = nemo_rl_run(tmp_path / "logs", tokenizer, steps=1)
    monkeypatch.setenv(TOKENIZER_VARIABLE, str(save_tokenizer(tmp_path / "tok")))
    run = rl_board.open_run(run_dir)
    table = run.step(1)
    multi = 0
    for row, raw in nemo_sources(run, run_dir):
        length, first = raw["input_lengths"], first_loss(raw["token_loss_mask"])
        texts = table[table["sample"] == row.sample].iloc[0]
        if not all(raw["token_loss_mask"][first:length]):
            multi += 1
            assert texts["response"] == tokenizer.decode(raw["token_ids"][first:length], skip_special_tokens=False)
            assert texts["prompt"] == tokenizer.decode(raw["token_ids"][:first], skip_special_tokens=False)
            assert "<|im_start|>tool" in texts["response"] and texts["response"].endswith("<|im_end|>")
        assert "".join(run.tokens(1, row.sample)["token"]) == tokenizer.decode(raw["token_ids"][first:length], skip_special_tokens=False)
    assert multi == 2


# The Python API's tokenizer= is the same setting as the variable (the page's --tokenizer).
def test_open_run_takes_the_tokenizer(tmp_path, tokenizer, monkeypatch):
    monkeypatch.setenv(TOKENIZER_VARIABLE, "")  # open_run sets it for the process: put back after the test
    run_dir = nemo_rl_run(tmp_path / "logs", tokenizer, steps=1)
    undecoded = rl_board.open_run(run_dir)
    assert all(token.isdigit() for sample in range(len(undecoded.step(1))) for token in undecoded.tokens(1, sample)["token"])
    run = rl_board.open_run(run_dir, tokenizer=str(save_tokenizer(tmp_path / "tok")))
    for row, raw in nemo_sources(run, run_dir):
        first, length = first_loss(raw["token_loss_mask"]), raw["input_lengths"]
        assert "".join(run.tokens(1, row.sample)["token"]) == tokenizer.decode(raw["token_ids"][first:length], skip_special_tokens=False)


def test_nemo_rl_skipped_prev_logprobs_are_not_taken_for_the_trainer_s(tmp_path, tokenizer):
    """force_on_policy_ratio leaves prev_logprobs zeros: no mismatch is shown, logprobs are the generation's."""
    run_dir = nemo_rl_run(tmp_path / "logs", tokenizer, steps=1, skip_prev_logprobs=True)
    run = rl_board.open_run(run_dir)
    assert run.samples["avg_abs_mismatch"].isna().all()
    for row, raw in nemo_sources(run, run_dir):
        first, length = first_loss(raw["token_loss_mask"]), raw["input_lengths"]
        assert set(raw["prev_logprobs"]) == {0.0}
        generated = np.array(raw["token_loss_mask"][first:length], dtype=bool)
        np.testing.assert_array_equal(run.tokens(1, row.sample)["logp"].to_numpy(), np.where(generated, raw["generation_logprobs"][first:length], np.nan))
        assert run.samples.loc[row.Index, "extra/trainer_logprobs_skipped"] == 1


def test_nemo_rl_file_being_written_and_a_nan_reward(tmp_path, tokenizer):
    """A file cut mid-line (NeMo-RL writes a line at a time with "w") shows its whole lines and reports the last as
    incomplete; a NaN reward (json.dumps writes NaN) is no reward."""
    run_dir = nemo_rl_run(tmp_path / "logs", tokenizer, steps=1)
    path = run_dir / "train_data_step1.jsonl"
    text = path.read_text("utf-8").splitlines()
    text[1] = text[1].replace('"rewards": [1.0]', '"rewards": [NaN]').replace('"rewards": [0.0]', '"rewards": [NaN]')
    assert "NaN" in text[1]
    path.write_text("\n".join(text[:5]) + "\n" + text[5][:100], "utf-8")
    run = rl_board.open_run(run_dir)
    assert sorted(run.samples["line"]) == [1, 2, 3, 4, 5]
    assert [(file, line) for file, line, _, _ in problems(run, "incomplete")] == [("train_data_step1.jsonl", 6)]
    assert math.isnan(run.samples.set_index("line").loc[2, "reward"])


def test_registry_asks_the_new_formats_before_the_board_s_own_jsonl():
    assert FORMATS[-1] is board_jsonl and FORMATS.index(prime_rl) < FORMATS.index(board_jsonl) and FORMATS.index(nemo_rl) < FORMATS.index(board_jsonl)
