"""Bad loss passes and bad turns from untrusted files: the run opens, the bad parts are counted or noted, the rest is
shown (found by a review: each of these raised)."""

import json
import warnings

import pandas as pd
import pytest

import rl_board
from rl_board.update import token_update
from tests.support.runs import sample, write_lines

DEEP = "[" * 3000 + "]" * 3000


def test_bad_loss_passes_are_skipped_and_the_rest_counted(tmp_path):
    good = {"step": 1, "micro_batch": 0, "clipped": [0, 1], "update_weight": [0.5, 0.0]}
    lines = [
        sample(1, logprobs=[-1.0, -2.0], response_tokens=["a", "b"], loss_passes=[good]),
        sample(1, logprobs=[-1.0, -2.0], response_tokens=["a", "b"], loss_passes=[{"step": 1, "clipped": None}]),
        sample(1, logprobs=[-1.0, -2.0], response_tokens=["a", "b"], loss_passes=[{"step": 2.5, "clipped": [0, 0]}, good]),
        sample(1, logprobs=[-1.0, -2.0], response_tokens=["a", "b"], loss_passes=[{"step": 10**30, "clipped": [1, 1]}]),
        sample(1, logprobs=[-1.0, -2.0], response_tokens=["a", "b"], loss_passes="not a list"),
        sample(1, logprobs=[-1.0, -2.0], response_tokens=["a", "b"], loss_passes=[{"step": 1, "policy_ratio": [1e400, 1.0], "clipped": [0, 0]}]),
    ]
    write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", lines)
    run = rl_board.open_run(tmp_path / "run")
    assert len(run.samples) == 6 and "loss_passes is not a list of loss-pass objects: ignored" in run.problems["reason"].tolist()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        by_step = run.update_by_step().set_index("step")
    assert [str(warning.message) for warning in caught if "loss pass's step" in str(warning.message)]  # 2.5 and 10**30
    # step 1's passes by micro-batch, as TRL pools a pass: micro-batch 0, the two good passes (2 of 4 tokens clipped
    # high); none, the null one (no tokens) and the overflowing ratio's (0 of 2); the mean of the two
    assert by_step.loc[1, "clip_ratio/high_mean"] == pytest.approx((2 / 4 + 0 / 2) / 2)


def test_bad_turns_are_noted_and_the_tools_counted(tmp_path):
    turns = [
        {"role": "assistant", "text": "a", "tool_calls": [{"name": "deep", "arguments": DEEP}], "token_start": 0, "token_end": 1},
        {"role": "tool", "tool_name": "deep", "text": "r", "token_start": 10**23, "token_end": 10**23},
        {"role": "tool", "tool_name": "deep", "text": "r", "token_start": 2**63 - 1, "token_end": 2**63 - 1, "error": "boom"},
        {"role": "assistant", "text": "b", "token_start": 1, "token_end": 500},
        {"role": "assistant", "text": "c", "token_start": "1", "token_end": 2},
    ]
    write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", [sample(1, logprobs=[-1.0, -2.0], response_tokens=["a", "b"], turns=turns)])
    run = rl_board.open_run(tmp_path / "run")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = run.turns(1, 0)
    notes = " ".join(str(warning.message) for warning in caught)
    assert table["tool_arguments"].iloc[0] == DEEP  # too deep to parse: kept as written
    assert "turn 1: token span" in notes and "turn 3: token span [1, 500) goes past" in notes
    assert 'turn 4: token span ["1", 2) is not two integers' in notes  # a text, said so (it read [1, 2))
    assert table["tokens"].tolist()[3] == 1 and table["mean_logp"].tolist()[3] == pytest.approx(-2.0)
    summary = run.tool_summary().set_index("tool")
    assert summary.loc["deep", ["calls", "results", "errors"]].tolist() == [1, 2, 1]


# A turn that is no object (a bare string, null, a number) is left out where it is, with a note, and the trajectory
# keeps its other turns (before, the whole list was dropped: no table, no counts); an error of null, false, 0, "" or
# an empty list or object is no error (they counted as errors); a turn's reward written as text is a number, as every
# number of a line may be; a tool's turn that calls a tool counts its call where the index counts it.
def test_a_turn_of_another_shape_leaves_out_itself_and_errors_are_what_they_say(tmp_path):
    turns = [
        {"role": "user", "text": "q"}, "a bare string", None, 5,
        {"role": "assistant", "text": "call", "tool_calls": [{"name": "calc", "arguments": {"x": 1}}], "reward": "0.5", "advantage": "1e400"},
        {"role": "tool", "tool_name": "calc", "text": "1", "error": False},
        {"role": "tool", "tool_name": "calc", "text": "2", "error": ""},
        {"role": "tool", "tool_name": "calc", "text": "3", "error": 0},
        {"role": "tool", "tool_name": "calc", "text": "4", "error": {}},
        {"role": "tool", "tool_name": "calc", "text": "5", "error": "boom"},
        {"role": "tool", "tool_name": "calc", "text": "6", "tool_calls": [{"name": "search", "arguments": "{}"}]},
    ]
    write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", [sample(1, turns=turns), sample(1, turns=["only a string"])])
    run = rl_board.open_run(tmp_path / "run")
    assert run.samples["turns"].tolist() == [8, 0] and run.samples["tool_calls"].tolist() == [2, 0] and run.samples["tool_errors"].tolist() == [1, 0]
    assert run.problems["reason"].tolist() == ["turns: 3 of its 11 elements are not objects: left out", "turns: 1 of its 1 elements are not objects: left out"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = run.turns(1, 0)
    notes = [str(warning.message) for warning in caught]
    assert all(f"turn {number} is a JSON {kind}, not an object: left out" in " ".join(notes) for number, kind in ((1, "string"), (2, "null"), (3, "number")))
    assert table["turn"].tolist() == [0, 4, 5, 6, 7, 8, 9, 10] and table["text"].tolist()[:2] == ["q", "call"]
    assert table["error"].tolist()[2:8] == [None, None, None, None, "boom", None]
    assert table["reward"].tolist()[1] == 0.5 and table["advantage"].tolist()[1] == float("inf")
    summary = run.tool_summary().set_index("tool")
    assert summary.loc["calc", ["calls", "results", "errors"]].tolist() == [1, 6, 1] and summary.loc["search", "calls"] == 1


# A token of probability 0 (logp -inf; a sampler's -inf, Δ = +inf) counts in its turn's means as in the sample's: they
# were means over the finite tokens alone, with no note. NaN (no value) is left out; +inf beside -inf is NaN.
def test_a_turn_s_means_count_its_infinite_tokens_as_the_sample_s_do(tmp_path):
    inf = float("inf")
    turns = [
        {"role": "assistant", "text": "ab", "token_start": 0, "token_end": 2},
        {"role": "assistant", "text": "cd", "token_start": 2, "token_end": 4},
        {"role": "assistant", "text": "ef", "token_start": 4, "token_end": 6},
    ]
    line = sample(
        1, response_tokens=list("abcdef"), turns=turns,
        logprobs=[-inf, -1.0, -1.0, -2.0, inf, -inf], ref_logprobs=[-1.0] * 6, sampler_logprobs=[-1.0, -inf, -1.5, None, -1.0, -1.0],
    )
    write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", [line])
    run = rl_board.open_run(tmp_path / "run")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = run.turns(1, 0)
    assert not caught and table["tokens"].tolist() == [2, 2, 2]
    assert table["mean_logp"].tolist()[:2] == [-inf, -1.5] and pd.isna(table["mean_logp"].tolist()[2])
    assert table["mean_kl"].tolist()[0] == inf and table["mean_abs_mismatch"].tolist()[:2] == [inf, 0.5]  # the None: no value
    assert run.samples["avg_logp"].isna().all() and run.samples["avg_abs_mismatch"].tolist() == [inf]


# A line msgspec refuses (a bare NaN anywhere in it: trackio's "NaN" metadata, rLLM's json.dumps of a NaN metric) keeps
# its turns: they were left out of the turn view, silently, while the samples table counted them.
def test_a_line_with_a_nan_elsewhere_keeps_its_turns(tmp_path):
    turns = [{"role": "user", "text": "2+2?", "reward": float("nan")}, "a bare string", {"role": "assistant", "text": "4", "reward": 1.0}]
    write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", [sample(1, turns=turns, reward_std=float("nan"))])
    assert b"NaN" in (tmp_path / "run" / "rollout_data_rank_0.jsonl").read_bytes()
    run = rl_board.open_run(tmp_path / "run")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = run.turns(1, 0)
    assert run.samples["turns"].tolist() == [2] and table["text"].tolist() == ["2+2?", "4"] and table["reward"].tolist()[1] == 1.0
    assert [str(warning.message) for warning in caught] == ["turn 1 is a JSON string, not an object: left out"]


# A pass's tokens are those any of its lists has a value at: a ratio that overflowed to null still has its clip, so
# the clip shares stay shares (they came to 200 %: the clipped tokens over the tokens with a ratio); lists of
# different lengths are counted over the longest, with a note. A pass of another shape leaves out itself alone (the
# line's good passes were lost with it), a pass without its step is noted, and an infinite ratio is the step's
# largest (it was the largest finite one).
def test_a_pass_s_tokens_are_those_with_any_value_and_a_bad_pass_leaves_out_itself(tmp_path):
    good = {"step": 1, "micro_batch": 0, "policy_ratio": [1.0, 1.0], "clipped": [0, 0]}
    lines = [
        sample(1, advantage=-1.0, loss_passes=[{"step": 1, "micro_batch": 0, "policy_ratio": [0.5, None, None, None], "clipped": [-1, -1, 0, 0]}]),
        sample(1, advantage=-1.0, loss_passes=[good, {"step": "a"}, 5, {"micro_batch": 0, "clipped": [1, 1]}]),
        sample(2, advantage=-1.0, loss_passes=[{"step": 2, "micro_batch": 0, "policy_ratio": [0.5, 0.5], "clipped": [-1, -1, 0, 0]}]),
        sample(3, advantage=1.0, loss_passes=[{"step": 3, "micro_batch": 0, "policy_ratio": [1.0, float("inf"), None], "clipped": [0, 1, 1]}]),
    ]
    write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", lines)
    run = rl_board.open_run(tmp_path / "run")
    assert run.samples["loss_passes"].tolist() == [1, 2, 1, 1]
    assert "loss_passes: 2 of its 4 elements are not loss-pass objects: left out" in run.problems["reason"].tolist()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        by_step = run.update_by_step().set_index("step")
    notes = " ".join(str(warning.message) for warning in caught)
    assert "2 of its loss passes are not loss-pass objects" in notes and "a loss pass without its step" in notes
    assert "per-token lists are of different lengths" in notes
    assert by_step.loc[1, "clip_ratio/low_mean"] == pytest.approx(2 / 6)  # step 1: one pass of 4 + 2 tokens, 2 clipped
    assert by_step.loc[2, "clip_ratio/low_mean"] == pytest.approx(2 / 4)
    assert by_step.loc[3, "clip_ratio/high_mean"] == pytest.approx(2 / 3) and by_step.loc[3, "max_ratio"] == float("inf")


# A token's update over its passes is over the passes with a value there: a pass a token short blanked the token's Σ
# weight, its clip count and its ratio, which an earlier pass has.
def test_a_token_s_update_is_over_the_passes_that_have_it():
    passes = [
        {"step": 1, "policy_ratio": [1.1, 1.3], "clipped": [0, 1], "update_weight": [0.1, 0.2]},
        {"step": 2, "policy_ratio": [1.2, 1.4], "clipped": [1, 0], "update_weight": [0.3, 0.4]},
        {"step": 3, "policy_ratio": [0.9], "clipped": [-1], "update_weight": [0.5]},
    ]
    update = token_update(passes, 2)
    assert update["policy_ratio"].tolist() == [0.9, 1.4] and update["clipped"].tolist() == [0.0, 1.0]
    assert update["update_weight"].tolist() == pytest.approx([0.9, 0.6])
    assert token_update([{"step": 1, "clipped": [None, 1]}], 2)["clipped"][0] != token_update([{"step": 1, "clipped": [None, 1]}], 2)["clipped"][0]  # none: NaN


# TRL before 1.9 logged each clip share as the mean of the ranks' shares, since as the tokens of all ranks pooled
# (as its kl: rl_board.metrics.trl_pools_ranks); a run's trl_version says which it recomputes.
@pytest.mark.parametrize(("trl_version", "expected"), [("0.29.0", (1 / 1 + 0 / 3) / 2), ("1.9.0", 1 / 4), (None, 1 / 4)])
def test_clip_shares_pool_the_ranks_as_the_run_s_trl_version_did(tmp_path, trl_version, expected):
    for rank, clipped in enumerate([[1], [0, 0, 0]]):
        line = sample(1, advantage=1.0, loss_passes=[{"step": 1, "micro_batch": 0, "policy_ratio": [2.0] * len(clipped), "clipped": clipped}])
        write_lines(tmp_path / "run" / f"rollout_data_rank_{rank}.jsonl", [line])
    (tmp_path / "run" / "rollout_meta_1.json").write_text(json.dumps({"trl_version": trl_version} if trl_version else {}))
    assert rl_board.open_run(tmp_path / "run").update_by_step()["clip_ratio/high_mean"].tolist() == pytest.approx([expected])


# A clip written as another number than -1 or +1 (2, -0.5: another writer's) counted in the sample's clipped tokens but
# in no clip share: any below 0 is a low clip and any above 0 a high one, as the index counts a clip.
def test_a_clip_of_another_number_counts_as_its_sign(tmp_path):
    write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", [sample(1, advantage=1.0, loss_passes=[{"step": 1, "micro_batch": 0, "clipped": [2, -0.5, 0, 0]}])])
    run = rl_board.open_run(tmp_path / "run")
    by_step = run.update_by_step().set_index("step")
    assert run.samples["clipped_tokens"].tolist() == [2]
    assert (by_step.loc[1, "clip_ratio/low_mean"], by_step.loc[1, "clip_ratio/high_mean"], by_step.loc[1, "clip_ratio/region_mean"]) == (0.25, 0.25, 0.5)
