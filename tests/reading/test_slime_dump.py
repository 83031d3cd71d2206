"""slime's debug rollout dumps (pickles the board never opens) converted in the training environment by
examples/convert_slime_rollout_dump.py, then opened by the board: each sample's text, rewards, tokens, log-probs and
environment tokens as slime kept them. The dumps are written as slime writes them (slime/ray/rollout.py,
`save_debug_rollout_data`: torch.save of {"rollout_id", "samples": [Sample.to_dict()]}, evaluation as eval_<id>)."""

import dataclasses
import sys
from enum import Enum
from pathlib import Path

import pytest
import torch

import rl_board
from tests.support import PROJECT

sys.path.insert(0, str(PROJECT / "examples"))
from convert_slime_rollout_dump import convert  # noqa: E402


class Status(Enum):  # slime/utils/types.py, Sample.Status
    PENDING = "pending"
    COMPLETED = "completed"
    TRUNCATED = "truncated"
    ABORTED = "aborted"


@dataclasses.dataclass
class Sample:  # the fields of slime/utils/types.py's Sample that a rollout fills
    group_index: int | None = None
    index: int | None = None
    prompt: str | list = ""
    tokens: list = dataclasses.field(default_factory=list)
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: float | dict | None = None
    loss_mask: list | None = None
    status: Status = Status.PENDING
    metadata: dict = dataclasses.field(default_factory=dict)
    rollout_log_probs: list | None = None

    def to_dict(self):
        value = self.__dict__.copy()
        value["status"] = self.status.value
        return value


def save_debug_rollout_data(path_template: str, rollout_id, data, evaluation: bool = False):
    """slime's writer: the samples of one rollout (an evaluation's by dataset)."""
    path = Path(path_template.format(rollout_id=("eval_" if evaluation else "") + str(rollout_id)))
    path.parent.mkdir(parents=True, exist_ok=True)
    if evaluation:
        dump_data = dict(samples=[sample.to_dict() for dataset_name, info in data.items() for sample in info["samples"]])
    else:
        dump_data = dict(samples=[sample.to_dict() for sample in data])
    torch.save(dict(rollout_id=rollout_id, **dump_data), path)


def rollout(rollout_id: int) -> list[Sample]:
    samples = []
    for group in range(2):
        for index in range(2):
            response_ids = [10 + index, 11, 12, 13]
            samples.append(Sample(
                group_index=group, index=2 * group + index, prompt=[{"role": "user", "content": f"q{rollout_id}.{group}"}],
                tokens=[1, 2, 3] + response_ids, response=f"answer {index}", response_length=4, label="42",
                reward={"accuracy": float(index), "format": 0.5} if group else float(index),
                loss_mask=[1, 0, 0, 1] if index else [1, 1, 1, 1], status=Status.TRUNCATED if index else Status.COMPLETED,
                metadata={"source": "math", "nested": {"x": 1}}, rollout_log_probs=[-0.1, -0.2, -0.3, -0.4],
            ))
    return samples


def test_converted_slime_dumps_open_with_their_samples(tmp_path):
    template = str(tmp_path / "dumps" / "rollout_data_{rollout_id}.pt")
    for rollout_id in (0, 1):
        save_debug_rollout_data(template, rollout_id, rollout(rollout_id))
    save_debug_rollout_data(template, 1, {"math": {"samples": rollout(1)[:2]}}, evaluation=True)
    written = convert(sorted((tmp_path / "dumps").glob("*.pt")), tmp_path / "run")
    assert written == {str(tmp_path / "run"): 8, str(tmp_path / "run" / "eval"): 2}
    run = rl_board.open_run(tmp_path / "run")
    assert run.steps == [0, 1] and len(run.samples) == 8
    step = run.step(1)
    assert step["prompt"].tolist()[0] == "user: q1.0" and step["response"].tolist()[:2] == ["answer 0", "answer 1"]
    assert step["reward"].tolist() == [0.0, 1.0, 0.5, 1.5]  # a dict reward: its functions' sum
    assert step["rewards/accuracy"].tolist()[2:] == [0.0, 1.0]
    assert step["text/stop_reason"].tolist() == ["stop", "length"] * 2 and step["text/source"].tolist() == ["math"] * 4
    tokens = run.tokens(1, 1)
    assert tokens["token"].tolist() == ["11", "11", "12", "13"] and tokens["tool"].tolist() == [False, True, True, False]
    assert tokens["logp"].tolist()[0] == pytest.approx(-0.1) and tokens["logp"].isna().tolist() == [False, True, True, False]
    assert rl_board.open_run(tmp_path / "run" / "eval").steps == [1]
