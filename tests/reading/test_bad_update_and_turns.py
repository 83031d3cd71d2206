"""Bad loss passes and bad turns from untrusted files: the run opens, the bad parts are counted or noted, the rest is
shown (found by a review: each of these raised)."""

import warnings

import pytest

import rl_board
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
    ]
    write_lines(tmp_path / "run" / "rollout_data_rank_0.jsonl", [sample(1, logprobs=[-1.0, -2.0], response_tokens=["a", "b"], turns=turns)])
    run = rl_board.open_run(tmp_path / "run")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = run.turns(1, 0)
    notes = " ".join(str(warning.message) for warning in caught)
    assert table["tool_arguments"].iloc[0] == DEEP  # too deep to parse: kept as written
    assert "turn 1: token span" in notes and "turn 3: token span [1, 500) goes past" in notes
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
