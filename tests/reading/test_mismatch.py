"""The sampler-trainer mismatch read from the lines (sampler_logprobs beside logprobs, is_ratio): each sample's numbers
in the index, the per-step table under each of TRL's four corrections at thresholds, the largest |Δ| tokens and the
token columns of the Python API, each against a plain recomputation from the raw lines (null values, tool tokens and
a line without sampler log-probs included); and Δ split into the renormalisation of a truncated distribution and
drift where lines carry the kept mass (sampler_kept_logmass; some lines do, some not)."""

import math
import warnings

import numpy as np
import pandas as pd
import pytest

import rl_board
from rl_board.mismatch import (
    BUCKETS,
    CORRECTIONS,
    largest_mismatches,
    mismatch_by_bucket,
    mismatch_by_step,
    read_mismatch_tokens,
    renormalisation_split,
    sample_sums,
)
from tests.support.runs import sample, write_lines


# Per line, Δ = logp - sampler_logp at the tokens where both are numbers and no tool wrote the token (None elsewhere).
def deltas(line: dict) -> list[float | None]:
    if "sampler_logprobs" not in line:
        return []
    mask = line.get("tool_mask") or [1] * len(line["logprobs"])
    return [
        logp - sampler if logp is not None and sampler is not None and sampled else None
        for logp, sampler, sampled in zip(line["logprobs"], line["sampler_logprobs"], mask)
    ]


@pytest.fixture(scope="module")
def run_lines(tmp_path_factory):
    rng = np.random.default_rng(7)
    lines = []
    for step in (1, 2, 3):
        for index in range(6):
            length = int(rng.integers(3, 12))
            logprobs = [float(-rng.exponential(1.5)) for _ in range(length)]
            entropies = [float(rng.exponential(0.5)) for _ in range(length)]
            line = sample(step, reward=index / 6, response_tokens=[f"t{k}" for k in range(length)], logprobs=logprobs, entropies=entropies)
            if index == 5:  # a line of another sampler, without its log-probs
                lines.append(line)
                continue
            sampler = [logp + float(rng.normal(0, 0.6)) for logp in logprobs]
            if index == 1:
                sampler[0] = None  # the sampler could not score a token
            if index == 2:
                line["tool_mask"] = [1] + [0] * (length - 2) + [1]  # a tool wrote the middle: no values there
                logprobs[1] = sampler[1] = entropies[1] = None
            line |= {"sampler_logprobs": sampler, "is_ratio": [float(min(math.exp(d), 2.0)) if d is not None else 1.0 for d in deltas(line | {"sampler_logprobs": sampler})]}
            if index < 3:  # a sampler that truncated: the log of the mass kept at each token (none at a tool's)
                kept = [0.0 if k % 4 == 3 else float(-rng.exponential(0.2)) for k in range(length)]
                line["sampler_kept_logmass"] = [None if index == 2 and 0 < k < length - 1 else value for k, value in enumerate(kept)]
            lines.append(line)
    root = tmp_path_factory.mktemp("mismatch")
    write_lines(root / "run" / "rollout_data_rank_0.jsonl", lines)
    return rl_board.open_run(root / "run"), lines


def test_each_sample_has_its_mismatch_numbers(run_lines):
    run, lines = run_lines
    samples = run.samples
    assert len(samples) == len(lines)
    for (_, row), line in zip(samples.iterrows(), lines):
        present = np.array([d for d in deltas(line) if d is not None])
        if not len(present):
            assert math.isnan(row["avg_abs_mismatch"]) and math.isnan(row["sum_mismatch"])
            continue
        assert row["avg_abs_mismatch"] == pytest.approx(np.abs(present).mean())
        assert row["max_abs_mismatch"] == pytest.approx(np.abs(present).max())
        assert row["sum_mismatch"] == pytest.approx(present.sum())
        assert row["avg_mismatch_kl"] == pytest.approx(np.mean(np.exp(present) - 1 - present))
        assert row["max_is_ratio"] == pytest.approx(np.exp(present.max())) and row["min_is_ratio"] == pytest.approx(np.exp(present.min()))
        assert row["mismatch_tokens"] == len(present)
        sampled = [ratio for ratio, sampled in zip(line["is_ratio"], line.get("tool_mask") or [1] * len(line["is_ratio"])) if sampled]
        assert row["avg_applied_is_ratio"] == pytest.approx(np.mean(sampled))


# TRL's correction written out per sample (grpo_trainer.py): a missing Δ counts as 0; a sequence's ratio is exp(ΣΔ).
def weights(line_deltas: list, mode: str, low: float | None, high: float | None) -> list[float]:
    filled = [0.0 if d is None else d for d in line_deltas]
    ratios = [math.exp(sum(filled))] * len(filled) if mode.startswith("sequence") else [math.exp(d) for d in filled]
    low, high = (-math.inf if low is None else low), (math.inf if high is None else high)
    if mode.endswith("truncate"):
        return [min(max(r, low), high) for r in ratios]
    return [0.0 if r < low or r > high else r for r in ratios]


@pytest.mark.parametrize("mode", list(CORRECTIONS))
@pytest.mark.parametrize("low, high", [(0.8, 1.25), (None, 1.5), (0.5, None)])
def test_the_step_table_under_each_correction_is_the_recomputation(run_lines, mode, low, high):
    run, lines = run_lines
    tokens = read_mismatch_tokens(run.snapshot.samples)
    assert not tokens.problems
    table = mismatch_by_step(run.snapshot.samples["step"].to_numpy(), tokens, mode, low, high)
    assert table.index.tolist() == [1, 2, 3]
    for step in (1, 2, 3):
        step_lines = [line for line in lines if line["step"] == step]
        kept, changed, sequences_changed, sequence_ratios, corrected, applied = [], [], [], [], [], []
        for line in step_lines:
            line_deltas = deltas(line)
            if not line_deltas:
                continue
            line_weights = weights(line_deltas, mode, low, high)
            raw = weights(line_deltas, mode, None, None)
            bounds = (-math.inf if low is None else low, math.inf if high is None else high)
            flags = [not bounds[0] <= r <= bounds[1] for r, d in zip(raw, line_deltas) if d is not None]  # clipped or masked
            kept += [d for d in line_deltas if d is not None]
            changed += flags
            sequences_changed.append(any(flags))
            sequence_ratios.append(raw[0])
            corrected += [w for w, d in zip(line_weights, line_deltas) if d is not None]
            applied += [a for a, d in zip(line["is_ratio"], line_deltas) if d is not None]
        kept = np.array(kept)
        row = table.loc[step]
        assert row["mean |Δ|"] == pytest.approx(np.abs(kept).mean())
        assert row["mismatch KL"] == pytest.approx(np.mean(np.exp(kept) - 1 - kept))
        assert row["max ratio"] == pytest.approx(np.exp(kept.max())) and row["min ratio"] == pytest.approx(np.exp(kept.min()))
        assert row["tokens corrected (%)"] == pytest.approx(100 * np.mean(changed))
        assert row["sequences corrected (%)"] == pytest.approx(100 * np.mean(sequences_changed))
        ratios = np.array(sequence_ratios) if mode.startswith("sequence") else np.exp(kept)
        assert row["effective sample size (%)"] == pytest.approx(100 * ratios.sum() ** 2 / (len(ratios) * (ratios**2).sum()))
        assert row["mean weight at these thresholds"] == pytest.approx(np.mean(corrected))
        assert row["mean applied weight"] == pytest.approx(np.mean(applied))
        assert row["tokens"] == len(kept)


def test_the_largest_mismatches_are_the_run_s_largest_deltas(run_lines):
    run, lines = run_lines
    tokens = read_mismatch_tokens(run.snapshot.samples)
    largest = largest_mismatches(tokens, 5)
    every = sorted(((abs(d), index, position, d) for index, line in enumerate(lines) for position, d in enumerate(deltas(line)) if d is not None), reverse=True)
    assert [(sample, position) for sample, position in zip(largest["sample"], largest["position"])] == [(index, position) for _, index, position, _ in every[:5]]
    assert largest["Δ"].tolist() == pytest.approx([d for *_, d in every[:5]])
    assert largest["ratio"].tolist() == pytest.approx([math.exp(d) for *_, d in every[:5]])


# Among tokens of equal |Δ| the earlier (sample, then position) comes first, and the cut at the count keeps the earlier
# ones, in one block of tokens or across several: Δ of three sizes (exact in binary), so most tokens tie.
@pytest.mark.parametrize("block", [None, 50])
def test_the_largest_mismatches_keep_the_earlier_token_on_a_tie(tmp_path, monkeypatch, block):
    if block:
        monkeypatch.setattr("rl_board.mismatch.TOKENS_PER_PASS", block)
    rng = np.random.default_rng(0)
    lines = []
    for index in range(20):
        size = int(rng.integers(3, 12))
        delta = rng.choice([0.25, 0.5, 1.0], size=size, p=[0.6, 0.3, 0.1]) * rng.choice([-1.0, 1.0], size=size)
        lines.append(sample(1 + index // 10, response_tokens=["t"] * size, logprobs=(delta - 1.0).tolist(), sampler_logprobs=[-1.0] * size))
    run = rl_board.open_run(str(write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", lines).parent))
    largest = largest_mismatches(read_mismatch_tokens(run.snapshot.samples), 20)
    every = sorted((-abs(d), index, position, d) for index, line in enumerate(lines) for position, d in enumerate(deltas(line)))
    assert list(zip(largest["sample"], largest["position"])) == [(index, position) for _, index, position, _ in every[:20]]
    assert largest["Δ"].tolist() == [d for *_, d in every[:20]]


def test_the_api_token_rows_have_the_sampler_columns(run_lines):
    run, lines = run_lines
    step_lines = [line for line in lines if line["step"] == 1]
    for index in (1, 2, 5):
        line, frame = step_lines[index], run.tokens(1, index)
        if index == 5:
            assert "sampler_logp" not in frame and "delta" not in frame
            continue
        expected = [np.nan if d is None else d for d in deltas(line)]
        np.testing.assert_allclose(frame["delta"], expected)
        np.testing.assert_allclose(frame["is_ratio"], np.exp(expected))
        np.testing.assert_allclose(frame["mismatch_kl"], np.expm1(expected) - np.array(expected))
        sampled = line.get("tool_mask") or [1] * len(expected)
        np.testing.assert_allclose(frame["applied_is_ratio"], [ratio if keep else np.nan for ratio, keep in zip(line["is_ratio"], sampled)])
        assert frame["tool"].tolist() == [not keep for keep in sampled]


# Each bucket holds the tokens whose position, entropy or turn (1 + the runs of tool tokens before it) is in its range.
@pytest.mark.parametrize("by", ["position", "entropy", "turn"])
def test_the_mismatch_by_bucket_is_the_recomputation(run_lines, by):
    run, lines = run_lines
    table = mismatch_by_bucket(read_mismatch_tokens(run.snapshot.samples), by)
    edges = BUCKETS[by]
    buckets = {}
    for line in lines:
        mask = line.get("tool_mask") or [1] * len(line["logprobs"])
        turn, previous_tool = 1, False
        for position, (d, entropy, sampled) in enumerate(zip(deltas(line), line["entropies"], mask)):
            turn += (not sampled) and not previous_tool
            previous_tool = not sampled
            value = {"position": position, "entropy": entropy, "turn": turn}[by]
            if d is None or value is None:
                continue
            bucket = next(i for i, (low, high) in enumerate(zip(edges, edges[1:])) if low <= value < high)
            buckets.setdefault(bucket, []).append(d)
    assert table["tokens"].tolist() == [len(buckets[b]) for b in sorted(buckets)]
    assert table["mean |Δ|"].tolist() == pytest.approx([np.mean(np.abs(buckets[b])) for b in sorted(buckets)])
    assert table["max |Δ|"].tolist() == pytest.approx([np.max(np.abs(buckets[b])) for b in sorted(buckets)])
    if by == "turn":
        assert table.index.tolist() == ["1", "2"]  # the tool line's last token is in its second turn


# A run of millions of tokens is reduced a block of samples at a time: blocks of a few tokens give the same numbers.
def test_the_numbers_are_the_same_reduced_a_few_tokens_at_a_time(run_lines, monkeypatch):
    import rl_board.mismatch as mismatch

    run, _ = run_lines
    tokens = read_mismatch_tokens(run.snapshot.samples)
    steps = run.snapshot.samples["step"].to_numpy()
    tables = lambda: [mismatch_by_step(steps, tokens, mode, 0.8, 1.25) for mode in CORRECTIONS] + [mismatch_by_bucket(tokens, by) for by in BUCKETS] + [largest_mismatches(tokens, 12)]  # noqa: E731
    whole = tables()
    monkeypatch.setattr(mismatch, "TOKENS_PER_PASS", 7)
    assert len(mismatch.sample_blocks(tokens.lengths)) > 5
    blocks = tables()
    for expected, table in zip(whole, blocks):
        pd.testing.assert_frame_equal(table, expected, check_exact=False, rtol=1e-12)


# An infinite Δ (a sampled token the sampler gave no probability) is a Δ: counted, clipped or masked as TRL does
# (its nan_to_num leaves ±inf at the float's bounds); a bf16 entropy a hair below 0 falls in the first bucket.
def test_an_infinite_delta_counts_and_a_negative_entropy_is_bucketed(tmp_path):
    line = sample(1, response_tokens=["a", "b", "c"], logprobs=[-1.0, -2.0, -0.5], sampler_logprobs=[float("-inf"), -2.5, -0.5], entropies=[-1e-6, 0.3, 0.02])
    write_lines(tmp_path / "run" / "r.jsonl", [line])
    run = rl_board.open_run(tmp_path / "run")
    assert run.samples["mismatch_tokens"].tolist() == [3] and run.samples["max_is_ratio"].tolist() == [math.inf]
    tokens = read_mismatch_tokens(run.snapshot.samples)
    steps = run.snapshot.samples["step"].to_numpy()
    truncated = mismatch_by_step(steps, tokens, "token_truncate", 0.5, 2.0)
    assert truncated["tokens"].tolist() == [3] and truncated["tokens corrected (%)"].tolist() == pytest.approx([100 / 3])
    assert truncated["mean weight at these thresholds"].tolist() == pytest.approx([(2.0 + math.exp(0.5) + 1.0) / 3])  # inf clipped to C_max
    masked = mismatch_by_step(steps, tokens, "token_mask", 0.5, 2.0)
    assert masked["mean weight at these thresholds"].tolist() == pytest.approx([(0.0 + math.exp(0.5) + 1.0) / 3])
    assert largest_mismatches(tokens, 1)["position"].tolist() == [0]
    assert mismatch_by_bucket(tokens, "entropy")["tokens"].sum() == 3


# A sequence whose ΣΔ overflows exp(ΣΔ)² (8,000 tokens of Δ = 0.05: ΣΔ = 400) still has an effective sample size: with
# one ratio that dominates the others, 1/n of the sequences; a token of Δ = 400 likewise among the tokens.
def test_the_effective_sample_size_does_not_overflow(tmp_path):
    long = sample(1, response_tokens=["t"] * 8000, logprobs=[-1.0] * 8000, sampler_logprobs=[-1.05] * 8000)
    short = [sample(1, response_tokens=["a", "b"], logprobs=[-1.0, -1.0], sampler_logprobs=[-1.0, -1.0]) for _ in range(2)]
    spike = sample(2, response_tokens=["a", "b", "c"], logprobs=[-1.0, -1.0, -1.0], sampler_logprobs=[-401.0, -1.0, -1.0])
    write_lines(tmp_path / "run" / "r.jsonl", [long, *short, spike])
    run = rl_board.open_run(tmp_path / "run")
    tokens = read_mismatch_tokens(run.snapshot.samples)
    steps = run.snapshot.samples["step"].to_numpy()
    sequences = mismatch_by_step(steps, tokens, "sequence_mask", None, None)
    assert sequences.loc[1, "effective sample size (%)"] == pytest.approx(100 / 3)
    per_token = mismatch_by_step(steps, tokens, "token_mask", None, None)
    assert per_token.loc[2, "effective sample size (%)"] == pytest.approx(100 / 3)
    ratios = np.exp([0.05] * 8000 + [0.0] * 4)  # token level, step 1: no overflow, the formula as it is
    assert per_token.loc[1, "effective sample size (%)"] == pytest.approx(100 * ratios.sum() ** 2 / (len(ratios) * (ratios**2).sum()))


# A Δ past exp's range (800: the sampler's log-prob -801) is a ratio of inf in the largest mismatches, without numpy's
# overflow warning at every draw.
def test_the_largest_mismatches_of_a_huge_delta_have_an_infinite_ratio_without_a_warning(tmp_path):
    write_lines(tmp_path / "run" / "r.jsonl", [sample(1, response_tokens=["a", "b"], logprobs=[-1.0, -1.0], sampler_logprobs=[-801.0, -1.5])])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run = rl_board.open_run(tmp_path / "run", parallel=False)
        largest = largest_mismatches(read_mismatch_tokens(run.snapshot.samples), 5)
    assert run.samples["max_is_ratio"].tolist() == [math.inf]
    assert largest["Δ"].tolist() == [800.0, 0.5] and largest["ratio"].tolist() == [math.inf, pytest.approx(math.exp(0.5))]


# Infinite ratios, the bug the tab is for: a sampled token the sampler gave no probability (Δ = +inf), or the trainer
# none (Δ = -inf). e^Δ - 1 - Δ is +inf at either (computed term by term it was inf - inf: NaN, and the token dropped
# from the means, the step's KL blank); a ratio of +inf outweighs the finite ones in the effective sample size (its
# limit), a sample whose every ratio is 0 (Δ = -inf) weighs nothing (it was NaN for the whole step); and the trainer's
# applied weights are means of the values the lines hold (1e39 was cast to float32's inf and left out).
def test_infinite_ratios_give_the_limits_of_the_numbers(tmp_path):
    spike = sample(1, response_tokens=["a", "b", "c"], logprobs=[-0.1, -0.2, -0.3], sampler_logprobs=[-0.15, float("-inf"), -0.3], is_ratio=[1.0, 1e39, 1.0])
    finite = sample(1, response_tokens=["a", "b"], logprobs=[-0.1, -0.2], sampler_logprobs=[-0.2, -0.2], is_ratio=[1.0, float("inf")])
    zero = sample(2, response_tokens=["a"], logprobs=[float("-inf")], sampler_logprobs=[-0.1])
    other = sample(2, response_tokens=["a", "b"], logprobs=[-0.1, -0.2], sampler_logprobs=[-0.2, -0.2])
    write_lines(tmp_path / "run" / "r.jsonl", [spike, finite, zero, other])
    run = rl_board.open_run(tmp_path / "run")
    kl = lambda delta: math.expm1(delta) - delta  # noqa: E731
    assert run.samples["avg_mismatch_kl"].tolist()[:2] == [math.inf, pytest.approx((kl(0.1) + 0) / 2)]
    assert run.samples["avg_mismatch_kl"].iloc[2] == math.inf  # Δ = -inf: e^-inf - 1 + inf
    assert run.samples["avg_applied_is_ratio"].tolist()[:2] == [pytest.approx(1e39 / 3), math.inf]
    tokens = read_mismatch_tokens(run.snapshot.samples)
    steps = run.snapshot.samples["step"].to_numpy()
    for mode in CORRECTIONS:
        table = mismatch_by_step(steps, tokens, mode, None, None)
        assert table.loc[1, "mismatch KL"] == math.inf and table.loc[2, "mismatch KL"] == math.inf
        assert table.loc[1, "mean applied weight"] == math.inf
        ratios = {1: [math.exp(0.05), math.inf, 1.0, math.exp(0.1), 1.0], 2: [0.0, math.exp(0.1), 1.0]}
        if mode.startswith("sequence"):
            ratios = {1: [math.inf, math.exp(0.1)], 2: [0.0, math.exp(0.1)]}
        expected = {step: 100 * sum(r) ** 2 / (len(r) * sum(x * x for x in r)) if math.inf not in r else 100 * r.count(math.inf) / len(r) for step, r in ratios.items()}
        assert table["effective sample size (%)"].to_dict() == pytest.approx(expected), mode
    assert mismatch_by_step(steps[:1], read_mismatch_tokens(run.snapshot.samples.iloc[:1]), "token_mask", None, None).loc[1, "mean applied weight"] == pytest.approx(1e39 / 3)
    # a ratio of 0 (Δ = -inf) is outside a band from 0.5: masked or clipped, so corrected (masked to 0 it was counted
    # unchanged); at step 2 the sample of one such token, and 1 token of 3
    for mode in CORRECTIONS:
        table = mismatch_by_step(steps, tokens, mode, 0.5, 2.0)
        assert table.loc[2, ["tokens corrected (%)", "sequences corrected (%)"]].tolist() == pytest.approx([100 / 3, 50.0]), mode
    assert mismatch_by_bucket(tokens, "position")["mismatch KL"].tolist() == [math.inf]
    assert run.tokens(1, 0)["mismatch_kl"].tolist() == [pytest.approx(kl(0.05)), math.inf, 0.0]


# Per line, (Δ, log M) at the tokens with both (and no tool wrote); nothing for a line without the kept mass.
def splits(line: dict) -> list[tuple[float, float]]:
    return [(d, kept) for d, kept in zip(deltas(line), line.get("sampler_kept_logmass") or []) if d is not None and kept is not None]


def test_the_step_table_splits_delta_into_renormalisation_and_drift(run_lines):
    run, lines = run_lines
    tokens = read_mismatch_tokens(run.snapshot.samples)
    table = mismatch_by_step(run.snapshot.samples["step"].to_numpy(), tokens, "token_mask", 0.5, 2.0)
    for step in (1, 2, 3):
        pairs = np.array([pair for line in lines if line["step"] == step for pair in splits(line)])
        assert len(pairs) and len(pairs) < table.loc[step, "tokens"]  # lines without the kept mass are not in it
        assert table.loc[step, "Δ from renormalisation"] == pytest.approx(np.mean(-pairs[:, 1]))
        assert table.loc[step, "drift (Δ − log kept mass)"] == pytest.approx(np.mean(np.abs(pairs[:, 0] - pairs[:, 1])))
    pairs = np.array([pair for line in lines for pair in splits(line)])
    split = renormalisation_split(sample_sums(tokens))
    assert split["tokens"] == len(pairs)
    assert split["mean |Δ|"] == pytest.approx(np.mean(np.abs(pairs[:, 0])))
    assert split["Δ from renormalisation"] == pytest.approx(np.mean(-pairs[:, 1]))
    assert split["drift (Δ − log kept mass)"] == pytest.approx(np.mean(np.abs(pairs[:, 0] - pairs[:, 1])))
    largest = largest_mismatches(tokens, 30)
    for (_, row) in largest.iterrows():
        line = lines[int(row["sample"])]
        kept = (line.get("sampler_kept_logmass") or [None] * len(line["logprobs"]))[int(row["position"])]
        if kept is None:
            assert np.isnan(row["log kept mass"]) and np.isnan(row["drift"])
        else:
            assert (row["log kept mass"], row["drift"]) == pytest.approx((kept, row["Δ"] - kept))
    assert largest["log kept mass"].notna().any() and largest["log kept mass"].isna().any()


def test_without_kept_mass_there_is_no_split(tmp_path):
    line = sample(1, response_tokens=["a", "b"], logprobs=[-1.0, -2.0], sampler_logprobs=[-0.9, -2.5])
    write_lines(tmp_path / "run" / "r.jsonl", [line])
    run = rl_board.open_run(tmp_path / "run")
    tokens = read_mismatch_tokens(run.snapshot.samples)
    assert tokens.kept_logmass is None and renormalisation_split(sample_sums(tokens)) is None
    table = mismatch_by_step(run.snapshot.samples["step"].to_numpy(), tokens, "token_mask", 0.5, 2.0)
    assert table["Δ from renormalisation"].isna().all() and table["drift (Δ − log kept mass)"].isna().all()
    assert table["mean |Δ|"].tolist() == pytest.approx([0.3])
    assert "kept_logmass" not in run.tokens(1, 0) and "drift" not in run.tokens(1, 0)


def test_the_api_token_rows_have_the_kept_mass_and_the_drift(run_lines):
    run, lines = run_lines
    step_lines = [line for line in lines if line["step"] == 2]
    for index in (0, 2, 3):
        line, frame = step_lines[index], run.tokens(2, index)
        if index == 3:
            assert "kept_logmass" not in frame and "drift" not in frame and "delta" in frame
            continue
        sampled = line.get("tool_mask") or [1] * len(line["logprobs"])
        kept = [np.nan if value is None or not keep else value for value, keep in zip(line["sampler_kept_logmass"], sampled)]
        np.testing.assert_allclose(frame["kept_logmass"], kept)
        expected = [np.nan if d is None else d for d in deltas(line)]
        np.testing.assert_allclose(frame["drift"], np.array(expected) - np.array(kept))
