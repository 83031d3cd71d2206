"""Runs as Tinker (thinking-machines-lab/tinker-cookbook @ 9dfcc3a2cf44432d621a01005073dc6d76a1e87a) writes them, by
copies of its writers' code paths (the package needs the tinker client and a service to sample from):

- tinker_cookbook/utils/logtree.py: Node, Trace.to_dict, init_trace, scope_header, scope_header_decorator,
  scope_disable, optional_enable_logging, log_text, log_formatter, table_from_dict, _table_from_list_of_lists (the
  HTML file itself is not written: only the JSON the store keeps);
- tinker_cookbook/utils/logtree_formatters.py: ConversationFormatter (to_data, with content_to_jsonable and
  message_to_jsonable of tinker_cookbook/renderers/base.py);
- tinker_cookbook/rl/problem_env.py: ProblemEnv.step's logging (Prompt, Policy Response, Reward) and its reward;
- tinker_cookbook/rl/rollouts.py: do_group_rollout (the "Group Rollout" scope, the envs rolled out concurrently by
  asyncio.gather as FailFast.execute does, "Trajectory Details"), _log_single_trajectory_details,
  _do_group_rollout_and_filter_constant_reward_impl (optional_enable_logging, constant-reward groups dropped);
- tinker_cookbook/rl/rollout_logging.py: serialize_rollout_summaries and _json_safe;
- tinker_cookbook/stores/training_store.py: TrainingRunStore.write_rollouts, write_logtree (_write_json);
- tinker_cookbook/rl/train.py: _get_logtree_scope, the training loop's group workers (the first num_groups_to_log
  builders logged, groups taken in the order they finish, as the streaming trainer takes them) and
  run_single_evaluation / RLTestSetEvaluator.eval_token_completer (tinker_cookbook/rl/metric_util.py: the summaries
  written inside the logtree scope, the logtree when it closes).

Sampling is a toy: each env's "policy" answers with a planned text after a random delay, so that envs and groups
finish out of order as Tinker's do. The truth (which text each trajectory had) is returned beside the run, never
written: the files do not say it.
"""
import asyncio
import html as html_module
import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

# ------------------------------------------------------------------------------------------ utils/logtree.py (copy)

_current_trace: ContextVar["Trace | None"] = ContextVar("lt_current_trace", default=None)
_container_stack: ContextVar["tuple[Node, ...]"] = ContextVar("lt_container_stack", default=())
_header_depth: ContextVar["tuple[int, ...]"] = ContextVar("lt_header_depth", default=())
_logging_disabled: ContextVar[bool] = ContextVar("lt_logging_disabled", default=False)


@dataclass
class Node:
    tag: str
    attrs: dict[str, str] = field(default_factory=dict)
    children: list["Node | str"] = field(default_factory=list)
    data: dict[str, Any] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        if self.data is not None:
            children = [child.to_dict() for child in self.children if isinstance(child, Node)]
        else:
            children = [child if isinstance(child, str) else child.to_dict() for child in self.children]
        d: dict[str, Any] = {"tag": self.tag, "attrs": dict(self.attrs), "children": children}
        if self.data is not None:
            d["data"] = self.data
        return d


class Trace:
    def __init__(self, title: str, path, write_on_error: bool):
        self.title = title
        self.path = Path(path) if path is not None else None
        self.write_on_error = write_on_error
        self.started_at = datetime.now()
        self.root = Node("body", {"class": "lt-root"})

    def to_dict(self) -> dict[str, Any]:
        return {"title": self.title, "started_at": self.started_at.isoformat(), "path": str(self.path) if self.path is not None else None, "root": self.root.to_dict()}


def _append(node: Node) -> None:
    stack = _container_stack.get()
    if not stack:
        raise RuntimeError("No active container to append to")
    stack[-1].children.append(node)


def _next_header_level() -> int:
    depth = _header_depth.get()
    current = depth[-1] if depth else 1
    return min(6, current + 1)


def _is_logging_enabled() -> bool:
    return _current_trace.get() is not None and not _logging_disabled.get()


@contextmanager
def _in_container(node: Node) -> Iterator[None]:
    token = _container_stack.set(_container_stack.get() + (node,))
    try:
        yield
    finally:
        _container_stack.reset(token)


@contextmanager
def init_trace(title: str, path=None, *, write_on_error: bool = True) -> Iterator[Trace]:
    trace = Trace(title, path, write_on_error=write_on_error)
    tok_t = _current_trace.set(trace)
    tok_s = _container_stack.set((trace.root,))
    tok_h = _header_depth.set((1,))
    _append(Node("h1", {"class": "lt-title"}, [html_module.escape(title)]))
    _append(Node("div", {"class": "lt-subtitle"}, [f"Generated {trace.started_at.isoformat(timespec='seconds')}"]))
    try:
        yield trace
    finally:
        _header_depth.reset(tok_h)
        _container_stack.reset(tok_s)
        _current_trace.reset(tok_t)


@contextmanager
def scope_header(title: str, **attrs: Any) -> Iterator[None]:
    if not _is_logging_enabled():
        yield
        return
    section = Node("section", {"class": "lt-section"})
    _append(section)
    tok_h = None
    try:
        with _in_container(section):
            h = _next_header_level()
            _append(Node(f"h{h}", {"class": f"lt-h{h}"}, [html_module.escape(title)]))
            tok_h = _header_depth.set(_header_depth.get() + (h,))
            body = Node("div", {"class": "lt-section-body"})
            _append(body)
            with _in_container(body):
                yield
    finally:
        if tok_h is not None:
            _header_depth.reset(tok_h)


def scope_header_decorator(title: str):
    def _wrap(fn):
        async def aw(*args, **kwargs):
            if not _is_logging_enabled():
                return await fn(*args, **kwargs)
            with scope_header(title):
                return await fn(*args, **kwargs)
        return aw
    return _wrap


@contextmanager
def scope_disable() -> Iterator[None]:
    token = _logging_disabled.set(True)
    try:
        yield
    finally:
        _logging_disabled.reset(token)


@contextmanager
def optional_enable_logging(enable: bool) -> Iterator[None]:
    if enable:
        yield
    else:
        with scope_disable():
            yield


def log_text(text: str) -> None:
    if not _is_logging_enabled():
        return
    _append(Node("p", {"class": "lt-p"}, [html_module.escape(text)]))


def log_formatter(formatter) -> None:
    if not _is_logging_enabled():
        return
    container = Node("div", {})
    container.children.append(formatter.to_html())
    data = formatter.to_data()
    if data is not None:
        container.data = data
    _append(container)


def table_from_dict(data, *, caption=None, key_header="key", value_header="value") -> None:
    if not _is_logging_enabled():
        return
    items = list(data.items())
    rows = [[key_header, value_header]] + [[str(k), str(v)] for k, v in items]
    _table_from_list_of_lists(rows, caption=caption, has_header=True)


def _table_from_list_of_lists(rows, *, caption=None, has_header=False) -> None:
    if not rows:
        return
    if caption:
        _append(Node("div", {"class": "lt-table-caption"}, [html_module.escape(caption)]))
    table_node = Node("table", {"class": "lt-table"})
    if has_header:
        thead = Node("thead")
        tr = Node("tr")
        for cell in rows[0]:
            tr.children.append(Node("th", {}, [html_module.escape(str(cell))]))
        thead.children.append(tr)
        table_node.children.append(thead)
        rows = rows[1:]
    tbody = Node("tbody")
    for row in rows:
        tr = Node("tr")
        for cell in row:
            tr.children.append(Node("td", {}, [html_module.escape(str(cell))]))
        tbody.children.append(tr)
    table_node.children.append(tbody)
    _append(table_node)


# ------------------------------------------------------- logtree_formatters.py and renderers/base.py (copies, parts)

def content_to_jsonable(content):
    if isinstance(content, str):
        return content
    result = []
    for part in content:
        if part["type"] == "text":
            result.append({"type": "text", "text": part["text"]})
        elif part["type"] == "thinking":
            result.append({"type": "thinking", "thinking": part["thinking"]})
    return result


def message_to_jsonable(message) -> dict[str, Any]:
    return {"role": message["role"], "content": content_to_jsonable(message["content"])}


@dataclass
class ConversationFormatter:
    messages: list

    def to_html(self) -> str:
        return '<div class="lt-conversation">' + "".join(f'<div class="lt-message">{html_module.escape(str(m["content"]))}</div>' for m in self.messages) + "</div>"

    def to_data(self) -> dict[str, Any]:
        return {"type": "conversation", "messages": [message_to_jsonable(msg) for msg in self.messages]}


# ------------------------------------------------------------------------- the rollout types (rl/types.py, parts)

@dataclass
class ModelInput:
    length: int


@dataclass
class TokensWithLogprobs:
    tokens: list[int]


@dataclass
class Transition:
    ob: ModelInput
    ac: TokensWithLogprobs
    reward: float
    episode_done: bool
    metrics: dict = field(default_factory=dict)
    logs: dict = field(default_factory=dict)


@dataclass
class Trajectory:
    transitions: list[Transition]
    final_ob: ModelInput
    text: str = ""  # the truth, for the tests (never written): the answer's text,
    question: str = ""  # its question
    builder_index: int = 0  # and the position of its group's builder in the batch


@dataclass
class TrajectoryGroup:
    trajectories_G: list[Trajectory]
    final_rewards_G: list[float]
    metrics_G: list[dict]

    def get_total_rewards(self) -> list[float]:
        return [sum(t.reward for t in traj.transitions) + final for traj, final in zip(self.trajectories_G, self.final_rewards_G)]


# --------------------------------------------------------------------------------- rl/problem_env.py (a toy copy)

class ProblemEnv:  # ProblemEnv.step's reward and logging; a question "What is a+b?", answered as \boxed{n}
    format_coef = 0.1

    def __init__(self, a: int, b: int, answer: str, delay: float, builder_index: int):
        self.a, self.b, self.answer, self.delay, self.builder_index = a, b, answer, delay, builder_index

    def get_question(self) -> str:
        return f"What is {self.a}+{self.b}? Write the answer as \\boxed{{n}}."

    async def rollout(self) -> Trajectory:  # initial_observation, the policy's sample, step
        convo = [{"role": "user", "content": self.get_question()}]
        await asyncio.sleep(self.delay)
        message = {"role": "assistant", "content": self.answer}
        content = self.answer
        boxed = content.startswith("\\boxed{") and content.endswith("}")
        correct_format = float(boxed)
        correct_answer = float(content.removeprefix("\\boxed{").removesuffix("}") == str(self.a + self.b))
        total_reward = self.format_coef * (correct_format - 1) + correct_answer
        with scope_header("Prompt"):
            log_formatter(ConversationFormatter(messages=convo))
        with scope_header("Policy Response"):
            log_formatter(ConversationFormatter(messages=[message]))
        with scope_header("Reward"):
            table_from_dict({"reference_answer": str(self.a + self.b), "format_valid": bool(correct_format), "correct": bool(correct_answer),
                             "format_coef": self.format_coef, "reward": f"{total_reward:.3f}"}, caption="Reward components")
        prompt_tokens = len(self.get_question().split()) + 4
        transition = Transition(ModelInput(prompt_tokens), TokensWithLogprobs(list(range(len(content)))), total_reward, True, {"format": correct_format, "correct": correct_answer})
        return Trajectory([transition], ModelInput(0), text=content, question=self.get_question(), builder_index=self.builder_index)


# ------------------------------------------------------------------------------------------ rl/rollouts.py (copy)

def _log_single_trajectory_details(traj: Trajectory, final_reward: float) -> None:
    with scope_header("Episode Details"):
        for turn_idx, transition in enumerate(traj.transitions, start=1):
            with scope_header(f"Turn {turn_idx}"):
                table_from_dict({"ob_len": transition.ob.length, "ac_len": len(transition.ac.tokens), "step_reward": f"{transition.reward:.3f}"}, caption="Step stats")
        table_from_dict({"num_turns": len(traj.transitions), "final_ob_len": traj.final_ob.length, "sum_step_rewards": f"{sum(t.reward for t in traj.transitions):.3f}",
                         "final_group_reward": f"{final_reward:.3f}", "total_return": f"{sum(t.reward for t in traj.transitions) + final_reward:.3f}"}, caption="Episode totals")


@scope_header_decorator("Group Rollout")
async def do_group_rollout(envs: list[ProblemEnv]) -> TrajectoryGroup:
    trajectories = list(await asyncio.gather(*[env.rollout() for env in envs]))  # FailFast.execute
    rewards_G = [0.0 for _ in trajectories]  # ProblemGroupBuilder.compute_group_rewards
    metrics_G: list[dict] = [{} for _ in trajectories]
    with scope_header("Trajectory Details"):
        for traj_idx, (traj, final_reward) in enumerate(zip(trajectories, rewards_G, strict=True)):
            with scope_header(f"Trajectory {traj_idx} Episode"):
                _log_single_trajectory_details(traj, final_reward)
    return TrajectoryGroup(trajectories, rewards_G, metrics_G)


async def do_group_rollout_and_filter_constant_reward(envs, do_remove_constant_reward_groups: bool, enable_logging: bool, delay: float) -> TrajectoryGroup | None:
    await asyncio.sleep(delay)
    with optional_enable_logging(enable_logging):
        trajectory_group = await do_group_rollout(envs)
    if do_remove_constant_reward_groups and len(set(trajectory_group.get_total_rewards())) == 1:
        return None
    return trajectory_group


# ------------------------------------------------------------------------------------- rl/rollout_logging.py (copy)

def _json_safe(value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return str(value)


def serialize_rollout_summaries(*, split, iteration, trajectory_groups_P, taglist_P, sampling_client_steps_P=None) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for group_idx, (trajectory_group, tags) in enumerate(zip(trajectory_groups_P, taglist_P, strict=True)):
        total_rewards_G = trajectory_group.get_total_rewards()
        sampling_step = sampling_client_steps_P[group_idx] if sampling_client_steps_P is not None else None
        for traj_idx, trajectory in enumerate(trajectory_group.trajectories_G):
            steps = []
            for step_idx, transition in enumerate(trajectory.transitions):
                steps.append({"step_idx": step_idx, "ob_len": transition.ob.length, "ac_len": len(transition.ac.tokens), "reward": transition.reward,
                              "episode_done": transition.episode_done, "metrics": transition.metrics, "logs": transition.logs})
            records.append(_json_safe({
                "schema_version": 1, "split": split, "iteration": iteration, "group_idx": group_idx, "traj_idx": traj_idx, "tags": list(tags),
                "sampling_client_step": sampling_step, "total_reward": total_rewards_G[traj_idx], "final_reward": trajectory_group.final_rewards_G[traj_idx],
                "trajectory_metrics": trajectory_group.metrics_G[traj_idx], "steps": steps, "final_ob_len": trajectory.final_ob.length,
            }))
    return records


# ----------------------------------------------------------------------------- stores/training_store.py (copy)

class TrainingRunStore:
    def __init__(self, log_path: Path):
        self.log_path = log_path

    @staticmethod
    def _iter_dir(iteration: int) -> str:
        return f"iteration_{iteration:06d}"

    def write_rollouts(self, iteration: int, records: list[dict[str, Any]], base_name: str = "train") -> None:
        lines = [json.dumps(r) for r in records]
        data = ("\n".join(lines) + "\n").encode("utf-8") if lines else b""
        path = self.log_path / self._iter_dir(iteration) / f"{base_name}_rollout_summaries.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def write_logtree(self, iteration: int, data: dict[str, Any], base_name: str = "train") -> None:
        path = self.log_path / self._iter_dir(iteration) / f"{base_name}_logtree.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(json.dumps(data, indent=2).encode("utf-8"))


# ------------------------------------------------------------------------------------------ rl/train.py (copy, parts)

@contextmanager
def _get_logtree_scope(output_dir: Path, num_groups_to_log: int, f_name: str, scope_name: str, iteration: int, store: TrainingRunStore):
    if num_groups_to_log <= 0:
        yield
        return
    logtree_trace = None
    try:
        with init_trace(scope_name, path=str(output_dir / f"{f_name}.html")) as logtree_trace:
            log_text("This HTML log was generated by logtree during RL training.")
            yield
    finally:
        if logtree_trace is not None and store is not None:
            store.write_logtree(iteration, logtree_trace.to_dict(), base_name=f_name)


@dataclass
class Builder:  # a ProblemGroupBuilder: one question, a planned answer per env
    a: int
    b: int
    answers: list[str]
    tag: str = "arithmetic"

    def make_envs(self, rng: random.Random, index: int) -> list[ProblemEnv]:
        return [ProblemEnv(self.a, self.b, answer, rng.uniform(0, 0.004), index) for answer in self.answers]


async def train_iteration(store: TrainingRunStore, i_batch: int, builders: list[Builder], num_groups_to_log: int, remove_constant_reward_groups: bool, rng: random.Random):
    finished: list[tuple[Builder, TrajectoryGroup]] = []  # as the streaming trainer takes them off its queue
    with _get_logtree_scope(store.log_path / store._iter_dir(i_batch), num_groups_to_log, "train", f"RL Iteration {i_batch}", i_batch, store):
        async def worker(builder: Builder, index: int, delay: float):
            group = await do_group_rollout_and_filter_constant_reward(builder.make_envs(rng, index), remove_constant_reward_groups, index < num_groups_to_log, delay)
            if group is not None:
                finished.append((builder, group))
        await asyncio.gather(*[worker(builder, i, rng.uniform(0, 0.004)) for i, builder in enumerate(builders)])
    records = serialize_rollout_summaries(split="train", iteration=i_batch, trajectory_groups_P=[group for _, group in finished],
                                          taglist_P=[[builder.tag] for builder, _ in finished], sampling_client_steps_P=[i_batch] * len(finished))
    store.write_rollouts(i_batch, records, base_name="train")
    return [group for _, group in finished]


async def evaluate(store: TrainingRunStore, i_batch: int, label: str, builders: list[Builder], num_groups_to_log: int, rng: random.Random):
    eval_base_name = f"eval_{label}"
    with _get_logtree_scope(store.log_path / store._iter_dir(i_batch), num_groups_to_log, eval_base_name, f"Running evaluation {label} {i_batch}", i_batch, store):
        async def run_group_rollout(builder: Builder, group_idx: int):
            with optional_enable_logging(enable=group_idx < num_groups_to_log):
                return await do_group_rollout(builder.make_envs(rng, group_idx))
        results = await asyncio.gather(*[run_group_rollout(builder, group_idx) for group_idx, builder in enumerate(builders)])
        records = serialize_rollout_summaries(split=f"eval/{label}", iteration=i_batch, trajectory_groups_P=list(results), taglist_P=[[builder.tag] for builder in builders],
                                              sampling_client_steps_P=[i_batch] * len(results))
        store.write_rollouts(i_batch, records, base_name=eval_base_name)
    return list(results)


# --------------------------------------------------------------------------------------------------------- the runs

ANSWERS = ("\\boxed{{{right}}}", "\\boxed{{{wrong}}}", "{right}", "{wrong}", "\\boxed{{{other}}}")  # rewards 1.0, 0.0, 0.9, -0.1, 0.0


# A group's planned answers: each a choice among ANSWERS (0: right and boxed, 1: wrong, 2: right unboxed, 3: wrong
# unboxed, 4: another wrong answer, boxed: the reward of choice 1, another text), for the question a+b.
def builder(a: int, b: int, choices: list[int]) -> Builder:
    return Builder(a, b, [ANSWERS[choice].format(right=a + b, wrong=a + b + 1, other=a + b + 2) for choice in choices])


# Tinker's log_path: iterations of training (and an evaluation at some), written by the copies above. Returns the folder
# and the truth: {(iteration, base_name, group_idx, traj_idx): (question, answer text, logged)}, where logged says
# the group's builder was among the first num_groups_to_log of its batch (its texts are in the logtree).
def tinker_run(log_path: Path, plans: list[list[list[int]]], eval_plans: dict | None = None, num_groups_to_log: int = 4,
               remove_constant_reward_groups: bool = True, seed: int = 0) -> tuple[Path, dict]:
    rng = random.Random(seed)
    store = TrainingRunStore(log_path)
    truth = {}
    for i_batch, plan in enumerate(plans):
        if eval_plans and i_batch in eval_plans:
            builders = [builder(3 + g, 4 + i_batch, choices) for g, choices in enumerate(eval_plans[i_batch])]
            groups = asyncio.run(evaluate(store, i_batch, "test", builders, num_groups_to_log, rng))
            truth |= trajectory_truth(i_batch, "eval_test", groups, num_groups_to_log)
        builders = [builder(1 + g, 2 + i_batch, choices) for g, choices in enumerate(plan)]
        groups = asyncio.run(train_iteration(store, i_batch, builders, num_groups_to_log, remove_constant_reward_groups, rng))
        truth |= trajectory_truth(i_batch, "train", groups, num_groups_to_log)
    return log_path, truth


def trajectory_truth(i_batch: int, base_name: str, groups: list[TrajectoryGroup], num_groups_to_log: int) -> dict:
    return {(i_batch, base_name, group_idx, traj_idx): (trajectory.question, trajectory.text, trajectory.builder_index < num_groups_to_log)
            for group_idx, group in enumerate(groups) for traj_idx, trajectory in enumerate(group.trajectories_G)}
