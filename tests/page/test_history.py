"""The board's training history, run comparison and prompt history, driven through Streamlit's AppTest.

Every number checked is worked out here from the files the test wrote (json and plain Python loops), never from the
board's own helpers: the Training metrics charts and CSV downloads against training_log.json, trainer_state.json and
rollout_metrics_*.jsonl; the compared step curves, Zero Shift, Smoothing and the per-step statistics against the
rollout lines; "This prompt over training" against the lines with that prompt.
"""

import io
import json
import statistics
from pathlib import Path

import pandas as pd
import pytest
import streamlit.testing.v1.app_test as app_test
from streamlit.runtime.media_file_manager import MediaFileManager
from streamlit.testing.v1 import AppTest

from bench.generate_run import write_run
from rl_board.reading.storage import StorageError
from rl_board.reading.store import RunStore
from rl_board.text import markdown_literal, one_line
from rl_logging_board import DEFAULT_ROOT
from tests.support.page import (
    chart_spec,
    curve_points,
    curve_views,
    lines_of,
    load_and_view,
    start,
    step_reward_chart,
    widget,
)
from tests.support.runs import sample, write_lines
from tests.support.vision_tool_runs import QUESTION, write_one_question_runs

# A seed 004 GRPO training_log.json: a few train entries, val_history with val_reward, the best checkpoint's path.
SEED004_LOG = {
    "config": {"model_path": "Qwen/Qwen2.5-0.5B-Instruct", "num_generations": 4, "temperature": 0.7, "kl_coef": 0.04},
    "train_history": [
        {"step": 10, "epoch": 1, "samples": 40, "loss": 0.5222, "reward": 1.5176, "kl": 0.0046, "lr": 3.33e-06},
        {"step": 20, "epoch": 1, "samples": 80, "loss": 0.5091, "reward": 1.5433, "kl": 0.0056, "lr": 6.67e-06},
        {"step": 30, "epoch": 1, "samples": 120, "loss": 0.5634, "reward": 1.8001, "kl": 0.0081, "lr": 1e-05},
        {"step": 40, "epoch": 2, "samples": 160, "loss": 0.4905, "reward": 1.9707, "kl": 0.0093, "lr": 1e-05},
    ],
    "val_history": [
        {"step": 20, "epoch": 1, "samples": 80, "val_reward": 1.6094},
        {"step": 40, "epoch": 2, "samples": 160, "val_reward": 1.9134},
    ],
    "best_checkpoint": {"step": 40, "epoch": 2, "samples": 160, "val_reward": 1.9134, "path": "outputs/grpo/best"},
}


# ---------------------------------------------------------------------------------------------------- helpers


# Every Vega-Lite chart under an element (the app, a tab, an expander) by its title's text.
def charts_by_title(parent) -> dict[str, dict]:
    charts = {}
    for element in parent.get("vega_lite_chart"):
        spec = chart_spec(element)
        title = spec.get("title")
        charts[title["text"] if isinstance(title, dict) else title] = spec
    return charts


# The chart of every chosen training metric: each is a view, drawn only while chosen, so each is chosen in turn.
def metric_charts(app: AppTest) -> dict[str, dict]:
    chosen = widget(app.multiselect, "Training metrics").value
    charts = {}
    for name in chosen:
        app.session_state["metric_view"] = name
        app.run()
        assert not app.exception, app.exception
        charts[name] = charts_by_title(app)[name]
    assert all(name not in charts_by_title(app) for name in chosen[:-1])  # the views not chosen have no chart
    return charts


# A metric chart's (step, value) pairs of one split, per series.
def metric_points(spec: dict, split: str) -> dict[str, list]:
    points = {}
    for point in spec["data"]["values"]:
        if point["split"] == split:
            points.setdefault(point["series"], []).append((point["step"], point["value"]))
    return points


# Captions show names from the data escaped for Markdown; the backslashes go for comparing with the file's text.
def unescaped(text: str) -> str:
    return text.replace("\\", "")


def mean_reward_by_step(lines: list[dict]) -> dict[int, float]:
    steps = sorted({line["step"] for line in lines})
    return {step: statistics.fmean(line["reward"] for line in lines if line["step"] == step) for step in steps}


# TensorBoard's smoothing, written out: s_t = w * s_(t-1) + (1 - w) * x_t from s_0 = 0, debiased by 1 - w^t.
def ema(values: list[float], weight: float) -> list[float]:
    smoothed, state = [], 0.0
    for t, value in enumerate(values, start=1):
        state = weight * state + (1 - weight) * value
        smoothed.append(state / (1 - weight**t))
    return smoothed


def open_expander(app: AppTest, key: str) -> AppTest:
    app.session_state[key] = True
    app.run()
    assert not app.exception, app.exception
    return app


@pytest.fixture
def downloads(monkeypatch):
    """What a download button serves, as a table, got as the browser gets it. AppTest gives each run a fresh media file
    manager and drops it after the run: the managers are kept here. A button drawn with its file has the file's URL;
    one whose file is made on click has a deferred file id, which the manager of the run that drew it (the latest)
    turns into the file, as the server does when the button is clicked."""
    managers = []

    class KeptManager(MediaFileManager):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            managers.append(self)

    monkeypatch.setattr(app_test, "MediaFileManager", KeptManager)

    def download(app: AppTest, label: str) -> pd.DataFrame:
        button = widget(app.get("download_button"), label)
        assert not button.proto.disabled, f"{label} is disabled"
        manager = managers[-1]
        url = button.proto.url or manager.execute_deferred(button.proto.deferred_file_id)
        file = manager.read_file(url.rsplit("/", 1)[-1])
        assert file is not None, f"{label}: no file at {url}"
        return pd.read_csv(io.BytesIO(file.content))

    return download


def entries_with(entries: list[dict], key: str) -> list[tuple]:
    return [(entry["step"], entry[key]) for entry in entries if key in entry]


# ------------------------------------------------------------------------------------ history-only training folders


def test_a_seed004_training_log_alone_opens_with_its_metrics_summary_and_downloads(tmp_path, monkeypatch, downloads):
    run_dir = tmp_path / "runs" / "seed004_grpo"
    run_dir.mkdir(parents=True)
    (run_dir / "training_log.json").write_text(json.dumps(SEED004_LOG, indent=2))
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    train, val = SEED004_LOG["train_history"], SEED004_LOG["val_history"]
    assert not app.warning and not curve_views(app) and not [s for s in app.slider if s.label.startswith("Step Index")]
    assert any("4 train and 2 eval step(s), 0 entr(ies) or file(s) skipped" in c.value for c in app.caption)

    metrics = widget(app.multiselect, "Training metrics")
    assert metrics.options == ["epoch", "samples", "loss", "reward", "kl", "lr"]  # val_reward is drawn with reward
    assert metrics.value == ["reward", "loss", "kl", "lr"]
    charts = metric_charts(app)
    assert set(charts) == {"reward", "loss", "kl", "lr"}
    for name in ("reward", "loss", "kl", "lr"):
        assert metric_points(charts[name], "train") == {name: entries_with(train, name)}
    assert metric_points(charts["reward"], "eval") == {"val_reward": entries_with(val, "val_reward")}
    assert metric_points(charts["loss"], "eval") == {}
    [rule] = [layer for layer in charts["reward"]["layer"] if layer["mark"]["type"] == "rule"]
    assert rule["data"]["values"] == [{"step": 40, "best checkpoint": "outputs/grpo/best"}]
    metrics.set_value(["samples"]).run()  # any logged number can be drawn
    charts = metric_charts(app)
    assert list(charts) == ["samples"]
    assert metric_points(charts["samples"], "train") == {"samples": entries_with(train, "samples")}
    assert metric_points(charts["samples"], "eval") == {"samples (eval)": entries_with(val, "samples")}  # the same key in both

    assert not widget(app.expander, "Training summary").caption  # drawn when opened
    summary = widget(open_expander(app, "training_summary").expander, "Training summary")
    captions = [unescaped(caption.value) for caption in summary.caption]
    assert "Training history: 4 entries, final step 40" in captions
    assert "Validation history: 2 entries, final step 40" in captions
    assert "Best checkpoint: step 40, epoch 2, val_reward = 1.9134, path outputs/grpo/best" in captions
    config, final_train, final_val = (frame.value for frame in summary.dataframe)
    assert config["key"].tolist() == list(SEED004_LOG["config"])
    assert config["value"].tolist() == [json.dumps(value) for value in SEED004_LOG["config"].values()]
    assert dict(zip(final_train["final"], final_train["value"])) == {k: v for k, v in train[-1].items() if k != "step"}
    assert dict(zip(final_val["final"], final_val["value"])) == {k: v for k, v in val[-1].items() if k != "step"}

    train_csv, eval_csv = downloads(app, "Train history (CSV)"), downloads(app, "Eval history (CSV)")
    assert train_csv.to_dict("records") == train  # every entry, every key, as logged
    assert eval_csv.to_dict("records") == val
    assert widget(app.get("download_button"), "Per-step statistics (CSV)").proto.disabled  # no rollouts, no statistics
    assert not app.exception


def trainer_state(global_step: int, log_history: list[dict]) -> dict:
    return {
        "best_global_step": 20, "best_metric": 1.7125, "best_model_checkpoint": "out/sft/checkpoint-20", "epoch": 0.5,
        "eval_steps": 10, "global_step": global_step, "logging_steps": 5, "max_steps": 20, "train_batch_size": 16,
        "log_history": log_history,
    }


HF_LOG_HISTORY = [
    {"epoch": 0.125, "grad_norm": 3.25, "learning_rate": 4e-05, "loss": 2.3125, "step": 5},
    {"epoch": 0.25, "grad_norm": 2.5, "learning_rate": 3e-05, "loss": 1.9375, "step": 10},
    {"epoch": 0.25, "eval_loss": 2.0625, "eval_runtime": 0.0119, "step": 10},
    {"epoch": 0.375, "grad_norm": 1.75, "learning_rate": 2e-05, "loss": 1.625, "step": 15},
    {"epoch": 0.5, "grad_norm": 1.5, "learning_rate": 1e-05, "loss": 1.4375, "step": 20},
    {"epoch": 0.5, "eval_loss": 1.7125, "eval_runtime": 0.0118, "step": 20},
]


def test_a_hugging_face_trainer_state_in_the_newest_checkpoint_opens(tmp_path, monkeypatch, downloads):
    run_dir = tmp_path / "runs" / "sft_tiny"
    older = [dict(entry, loss=9.0) if "loss" in entry else entry for entry in HF_LOG_HISTORY[:3]]  # must not be drawn
    for name, state in (("checkpoint-10", trainer_state(10, older)), ("checkpoint-20", trainer_state(20, HF_LOG_HISTORY))):
        (run_dir / name).mkdir(parents=True)
        (run_dir / name / "trainer_state.json").write_text(json.dumps(state))
    (run_dir / "checkpoint-20" / "training_args.bin").write_bytes(b"not a pickle")  # never read
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    train = [entry for entry in HF_LOG_HISTORY if "eval_loss" not in entry]
    assert not app.warning and any("checkpoint-20/trainer_state.json" in unescaped(c.value) for c in app.caption)
    assert widget(app.multiselect, "Training metrics").value == ["loss", "learning_rate"]
    charts = metric_charts(app)
    assert metric_points(charts["loss"], "train") == {"loss": entries_with(train, "loss")}
    assert metric_points(charts["loss"], "eval") == {"eval_loss": entries_with(HF_LOG_HISTORY, "eval_loss")}
    assert metric_points(charts["learning_rate"], "train") == {"learning_rate": entries_with(train, "learning_rate")}
    [rule] = [layer for layer in charts["loss"]["layer"] if layer["mark"]["type"] == "rule"]
    assert rule["data"]["values"] == [{"step": 20, "best checkpoint": "out/sft/checkpoint-20"}]
    summary = widget(open_expander(app, "training_summary").expander, "Training summary")
    captions = [unescaped(caption.value) for caption in summary.caption]
    assert "Training history: 4 entries, final step 20" in captions and "Validation history: 2 entries, final step 20" in captions
    assert "Best checkpoint: step 20, eval_loss = 1.7125, path out/sft/checkpoint-20" in captions
    assert downloads(app, "Train history (CSV)").to_dict("records") == train
    assert downloads(app, "Eval history (CSV)").to_dict("records") == [entry for entry in HF_LOG_HISTORY if "eval_loss" in entry]
    assert not app.exception


# With rollouts the load report lists the unreadable history; without them, the folder's only file is that history,
# and the page still has to say what is wrong with it instead of "no training history".
@pytest.mark.parametrize("with_rollouts", [True, False])
def test_a_truncated_training_log_is_a_load_report_row(tmp_path, monkeypatch, with_rollouts):
    run_dir = tmp_path / "runs" / "run"
    run_dir.mkdir(parents=True)
    whole = json.dumps(SEED004_LOG, indent=2)
    (run_dir / "training_log.json").write_text(whole[: len(whole) // 2])  # a trainer killed while writing it
    if with_rollouts:
        write_lines(run_dir / "rollout_data_rank_0.jsonl", [sample(1), sample(2)])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    assert not [w for w in app.warning if "no training history" in w.value]
    assert any("1 entr(ies) or file(s) skipped" in w.value for w in app.warning)
    open_expander(app, "load_report_details")
    problems = widget(app.expander, "Load report").dataframe[-1].value
    assert problems[["file", "line", "kind"]].values.tolist() == [["training_log.json", 0, "skipped"]]
    assert problems["reason"].iloc[0].startswith("not readable as JSON")
    assert widget(app.get("download_button"), "Train history (CSV)").proto.disabled  # nothing taken from it
    assert not app.exception


# ---------------------------------------------------------------------------------------------- comparing runs


RUN_STEPS = {"alpha": 4, "beta": 5, "gamma": 3}  # gamma, the last, is the one loaded


@pytest.fixture
def three_runs(tmp_path):
    for seed, (name, steps) in enumerate(RUN_STEPS.items()):
        write_run(tmp_path / "runs" / name, steps=steps, samples=4, tokens=6, ranks=1, seed=seed, grpo=True, workers=1)
    return tmp_path / "runs"


def compare(app: AppTest, names: list[str]) -> AppTest:
    widget(app.sidebar.multiselect, "Compare with").set_value(names).run()
    assert not app.exception, app.exception
    return app


def test_compared_runs_each_get_a_step_curve_with_zero_shift_smoothing_and_statistics(three_runs, monkeypatch, downloads):
    app = start(three_runs, monkeypatch)
    widget(app.checkbox, "Response 对比").uncheck()  # the step's samples are not what this test reads: not drawn
    load_and_view(app)
    assert widget(app.sidebar.multiselect, "Compare with").options == ["alpha", "beta"]  # the other runs
    compare(app, ["alpha", "beta"])
    runs = ["gamma", "alpha", "beta"]  # the loaded run first
    means = {name: mean_reward_by_step(lines_of(three_runs / name)) for name in runs}
    widget(app.multiselect, "Reward series").set_value(["reward"]).run()
    chart = step_reward_chart(app)
    assert [layer["encoding"]["color"]["field"] for layer in chart["layer"][:3]] == ["colour"] * 3  # band, raw, line
    assert {point["colour"] for point in chart["data"]["values"]} == set(runs)  # one colour per run
    points = curve_points(chart)
    assert set(points) == set(runs)
    for name in runs:
        assert list(points[name]) == list(means[name])
        assert [p["centre"] for p in points[name].values()] == pytest.approx(list(means[name].values()))

    widget(app.checkbox, "Zero Shift").check().run()  # each run from its own first step
    points = curve_points(step_reward_chart(app))
    for name in runs:
        shifted = [value - means[name][0] for value in means[name].values()]
        assert [p["centre"] for p in points[name].values()] == pytest.approx(shifted)
        assert all(p["raw"] is None for p in points[name].values())  # no faint line without smoothing

    widget(app.slider, "Smoothing").set_value(0.6).run()
    weight = widget(app.slider, "Smoothing").value
    chart = step_reward_chart(app)
    # raw line faint behind; a one-point line's point; the points a click finds; the steps' extent; dashed lines and their points
    assert [layer["encoding"].get("y", {}).get("field") for layer in chart["layer"]] == ["low", "raw", "centre", "centre", "centre", None, "centre", "centre"]
    points = curve_points(chart)
    for name in runs:
        shifted = [value - means[name][0] for value in means[name].values()]
        assert [p["raw"] for p in points[name].values()] == pytest.approx(shifted)
        assert [p["centre"] for p in points[name].values()] == pytest.approx(ema(shifted, weight))
        assert [p["mean"] for p in points[name].values()] == pytest.approx(list(means[name].values()))  # the tooltip's
    widget(app.checkbox, "Zero Shift").uncheck().run()
    points = curve_points(step_reward_chart(app))
    for name in runs:
        assert [p["centre"] for p in points[name].values()] == pytest.approx(ema(list(means[name].values()), weight))
    widget(app.sidebar.checkbox, "Reward 曲线图").uncheck().run()  # the curves and their settings hidden, then shown
    assert not app.main.slider or "Smoothing" not in [slider.label for slider in app.main.slider]
    widget(app.sidebar.checkbox, "Reward 曲线图").check().run()
    assert widget(app.slider, "Smoothing").value == weight  # kept
    assert [p["centre"] for p in curve_points(step_reward_chart(app))[runs[0]].values()] == pytest.approx(ema(list(means[runs[0]].values()), weight))

    table = downloads(app, "Per-step statistics (CSV)")
    assert list(table.columns) == ["run", "series", "step", "mean", "std", "median", "q25", "q75", "count"]
    assert set(table["run"]) == set(runs)
    for name in runs:
        rewards = table[(table["run"] == name) & (table["series"] == "reward")]
        lines = lines_of(three_runs / name)
        assert rewards["step"].tolist() == list(means[name])
        assert rewards["mean"].tolist() == pytest.approx(list(means[name].values()))  # unsmoothed, unshifted
        assert rewards["count"].tolist() == [sum(line["step"] == step for line in lines) for step in means[name]]
        stds = [statistics.pstdev([line["reward"] for line in lines if line["step"] == step]) for step in means[name]]
        assert rewards["std"].tolist() == pytest.approx(stds)

    widget(app.slider, "Smoothing").set_value(0.0).run()
    widget(app.multiselect, "Reward series").set_value(["reward", "ref_reward"]).run()  # several series: run · series
    names = [f"{name} · {series}" for name in runs for series in ("reward", "ref_reward")]
    assert set(curve_points(step_reward_chart(app))) == set(names)
    for tab, series in (("Step-KL", [""]), ("Step-RespLen", [""]), ("Step-Entropy", [""]), ("Step-Groups", [" · zero-signal groups (%)", " · truncated (%)"])):
        app.session_state["curve_view"] = tab
        app.run()
        [element] = [t for t in curve_views(app) if t.label == tab][0].get("vega_lite_chart")
        assert set(curve_points(chart_spec(element))) == {name + suffix for name in runs for suffix in series}, tab
    compare(app, [])
    assert set(downloads(app, "Per-step statistics (CSV)")["run"]) == {"gamma"}
    assert not app.exception


# Compared runs whose store fails (a bucket that went away, refused credentials): one warning names each, in the one
# place the compared runs' loads have whatever their number, and the runs that load are drawn.
def test_compared_runs_that_fail_to_load_are_named_in_one_warning_and_the_others_drawn(three_runs, monkeypatch):
    def failing_load(store, max_samples, *args, **kwargs):
        if Path(store.run_dir).name in failing:
            raise StorageError(f"{store.run_dir}: permission denied")
        return loading(store, max_samples, *args, **kwargs)

    def colours(app) -> set:  # a run alone: a colour per series; runs compared: a colour per run
        return {point["colour"] for point in step_reward_chart(app)["data"]["values"]}

    app = load_and_view(start(three_runs, monkeypatch))
    widget(app.multiselect, "Reward series").set_value(["reward"]).run()
    loading, failing = RunStore.load, {"alpha", "beta"}
    monkeypatch.setattr(RunStore, "load", failing_load)
    for chosen in (["alpha"], ["alpha", "beta"]):
        compare(app, chosen)
        assert [warning.value for warning in app.warning] == ["\n\n".join(markdown_literal(f"{three_runs / name}: permission denied") for name in chosen)]
        assert colours(app) == {"reward"}  # the loaded run alone
    failing = {"alpha"}
    compare(app, ["beta", "alpha"])
    assert [warning.value for warning in app.warning] == [markdown_literal(f"{three_runs / 'alpha'}: permission denied")]
    assert colours(app) == {"gamma", "beta"}


# Training metrics of compared runs: a line per run, named by run, from each run's own metrics file.
def test_compared_runs_each_get_a_training_metric_line(three_runs, monkeypatch, downloads):
    rewards = {"alpha": [0.1, 0.3], "gamma": [0.5, 0.4, 0.8]}  # beta logged none: no line
    for name, values in rewards.items():
        entries = [{"step": step, "kind": "train", "reward": value} for step, value in enumerate(values)]
        write_lines(three_runs / name / "rollout_metrics_20261124T000000Z.jsonl", entries)
    app = compare(load_and_view(start(three_runs, monkeypatch)), ["alpha", "beta"])
    assert widget(app.multiselect, "Training metrics").value == ["reward"]
    train = metric_points(metric_charts(app)["reward"], "train")
    assert train == {f"{name} · reward": list(enumerate(values)) for name, values in rewards.items()}
    assert [unescaped(m.value) for m in widget(open_expander(app, "training_summary").expander, "Training summary").markdown] == [
        "**gamma** · from rollout_metrics_20261124T000000Z.jsonl", "**alpha** · from rollout_metrics_20261124T000000Z.jsonl"]
    # The train history's download holds every run that has one, each row under its run.
    table = downloads(app, "Train history (CSV)")
    assert table[["run", "step", "reward"]].values.tolist() == [[name, step, value] for name in ("gamma", "alpha") for step, value in enumerate(rewards[name])]


# A root that is a run, grpo, holding a run grpo of its own: both named "grpo", their step curves, metric lines and CSV
# rows were one (a line zigzagging between the two runs' values). Now each is named by as many folders as tell it
# apart; a metric the trainer named "run" keeps its values in the CSV beside the run column.
def test_compared_runs_of_one_folder_name_stay_apart(tmp_path, monkeypatch, downloads):
    root = tmp_path / "coll" / "grpo"
    for folder, reward in ((root, 0.0), (root / "grpo", 1.0)):
        write_lines(folder / "rollout_data_rank_0.jsonl", [sample(step, reward=reward) for step in (1, 2, 3)])
        write_lines(folder / "rollout_metrics_20261124T000000Z.jsonl", [{"step": step, "kind": "train", "loss": reward, "run": 7.0 + reward} for step in (1, 2, 3)])
    app = start(root, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").set_value(".").run()
    app = compare(load_and_view(app), ["grpo"])
    points = curve_points(step_reward_chart(app))
    assert {name: [point["centre"] for point in steps.values()] for name, steps in points.items()} == {"coll/grpo": [0.0] * 3, "grpo/grpo": [1.0] * 3}
    train = metric_points(metric_charts(app)["loss"], "train")
    assert train == {"coll/grpo · loss": [(step, 0.0) for step in (1, 2, 3)], "grpo/grpo · loss": [(step, 1.0) for step in (1, 2, 3)]}
    table = downloads(app, "Train history (CSV)")
    assert table[["run", "step", "loss", "run (metric)"]].values.tolist() == [[name, step, loss, 7.0 + loss] for name, loss in (("coll/grpo", 0.0), ("grpo/grpo", 1.0)) for step in (1, 2, 3)]


# Two metric keys that show alike, a line break and a written "\n": Streamlit's select widgets tell options apart by
# their labels, so before their labels differed the second could not be chosen (choosing it chose the first).
def test_metrics_whose_names_show_alike_can_each_be_chosen_and_viewed(tmp_path, monkeypatch):
    names = ["a\nb", "a\\nb"]
    run = tmp_path / "runs" / "alike"
    write_lines(run / "rollout_data_rank_0.jsonl", [sample(step, reward=1.0) for step in range(3)])
    write_lines(run / "rollout_metrics_20261124T000000Z.jsonl", [{"step": step, "kind": "train", names[0]: step, names[1]: 10 + step} for step in range(3)])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    metrics = widget(app.multiselect, "Training metrics")
    assert metrics.options == ["a\\nb", "a\\nb (2)"]
    for name, first in zip(names, (0, 10)):
        widget(app.multiselect, "Training metrics").set_value([names[1 - names.index(name)], name]).run()
        assert widget(app.multiselect, "Training metrics").value == [names[1 - names.index(name)], name]
        views = next(choice for choice in app.get("button_group") if choice.key == "metric_view")
        assert views.options == [markdown_literal(names[1 - names.index(name)]), markdown_literal(name) + " (2)"]
        views.set_value(name).run()
        assert not app.exception and views.value == name
        train = metric_points(charts_by_title(app)[one_line(name)], "train")  # both titled as they show
        assert [values for values in train.values()] == [[(step, first + step) for step in range(3)]]

# ---------------------------------------------------------------------------------------------- prompt history


PROMPT = "<PAD>Solve: 12 * 7 = ?<endofsystem>Answer with a number."
NEAR_PROMPT = PROMPT + " "  # one space more: another prompt


def prompt_lines(rewards: dict[int, list[tuple[str, float]]]) -> list[dict]:
    lines = []
    for step, completions in rewards.items():
        for index, (prompt, reward) in enumerate(completions):
            lines.append(sample(step, reward=reward, prompt=prompt, response=f"{reward} at {step}.{index}", advantage=reward - 0.5))
    return lines


def test_this_prompt_over_training_lists_every_line_of_the_prompt_in_the_shown_and_compared_runs(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    shown = prompt_lines({1: [(PROMPT, 0.1), (NEAR_PROMPT, 0.2)], 2: [("other", 0.3), (PROMPT, 0.7)], 3: [(PROMPT, 0.4), (PROMPT, 0.9)]})
    compared = prompt_lines({2: [(PROMPT, 0.35), ("other", 0.0)], 4: [(NEAR_PROMPT, 0.6), (PROMPT, 0.8)]})
    write_lines(root / "c_shown" / "rollout_data_rank_0.jsonl", shown[:3])
    write_lines(root / "c_shown" / "rollout_data_rank_1.jsonl", shown[3:])
    write_lines(root / "a_compared" / "r.jsonl", compared)
    write_lines(root / "b_not_compared" / "r.jsonl", prompt_lines({1: [(PROMPT, 0.55)]}))
    app = load_and_view(start(root, monkeypatch))  # step 1, sample 0: PROMPT
    assert not [e for e in app.expander if e.label == "This prompt over training" and e.dataframe]  # drawn when opened
    open_expander(app, "prompt_history")

    def expected(lines, run=None) -> list[tuple]:
        return sorted(((run,) if run else ()) + (line["step"], line["reward"], line["advantage"], line["response"]) for line in lines if line["prompt"] == PROMPT)

    details = widget(app.expander, "This prompt over training")
    assert len(expected(shown)) == 4  # steps 1, 2 and twice 3; not the near prompt nor the other
    assert [c.value for c in details.caption] == ["4 completion(s) of this prompt at 3 step(s)"]
    table = details.dataframe[0].value
    assert list(table.columns) == ["step", "reward", "advantage", "response"]
    assert sorted(map(tuple, table.values.tolist())) == expected(shown)
    [points, means] = (layer["data"]["values"] for layer in chart_spec(details.get("vega_lite_chart")[0])["layer"])
    assert sorted((p["step"], p["reward"]) for p in points) == [row[:2] for row in expected(shown)]
    assert [(m["step"], m["mean reward"]) for m in means] == pytest.approx([(1, 0.1), (2, 0.7), (3, 0.65)])

    compare(app, ["a_compared"])
    details = widget(app.expander, "This prompt over training")
    assert [c.value for c in details.caption] == ["6 completion(s) of this prompt at 4 step(s) in 2 run(s)"]
    table = details.dataframe[0].value
    assert list(table.columns) == ["run", "step", "reward", "advantage", "response"]
    assert sorted(map(tuple, table.values.tolist())) == sorted(expected(shown, "c_shown") + expected(compared, "a_compared"))
    assert not app.exception


# ---------------------------------------------------------------------------------------------- live mode


def test_live_mode_draws_a_metric_step_appended_to_the_metrics_file(tmp_path, monkeypatch, downloads):
    run_dir = tmp_path / "runs" / "live_run"
    write_lines(run_dir / "rollout_data_rank_0.jsonl", [sample(step, reward=step / 10) for step in (1, 2, 3)])
    metrics = write_lines(run_dir / "rollout_metrics_20261124T000000Z.jsonl", [{"step": step, "kind": "train", "reward": step / 10, "loss": 1 / step} for step in (1, 2, 3)])
    app = load_and_view(start(tmp_path / "runs", monkeypatch))
    widget(app.toggle, "Live mode").set_value(True).run()
    assert metric_points(charts_by_title(app)["reward"], "train") == {"reward": [(1, 0.1), (2, 0.2), (3, 0.3)]}
    with open(metrics, "a") as file:
        file.write(json.dumps({"step": 4, "kind": "train", "reward": 0.9, "loss": 0.2}) + "\n")
        file.write(json.dumps({"step": 4, "kind": "eval", "eval_reward": 0.85}) + "\n")
    app.run()
    charts = metric_charts(app)
    assert metric_points(charts["reward"], "train") == {"reward": [(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.9)]}
    assert metric_points(charts["reward"], "eval") == {"eval_reward": [(4, 0.85)]}
    assert metric_points(charts["loss"], "train")["loss"][-1] == (4, 0.2)
    assert downloads(app, "Train history (CSV)")["step"].tolist() == [1, 2, 3, 4]
    assert not app.exception


# A prompt whose lines are exactly its step's (one prompt per step, as GRPO with batch = num_generations logs): the
# step view has read those lines already, and the prompt history reads them again with their run.
def test_the_prompt_history_of_a_prompt_that_fills_its_step(tmp_path, monkeypatch):
    run_dir = tmp_path / "runs" / "one_prompt_per_step"
    write_lines(run_dir / "r.jsonl", prompt_lines({step: [(f"prompt {step}", 0.25 * index) for index in range(4)] for step in (1, 2, 3)}))
    app = open_expander(load_and_view(start(tmp_path / "runs", monkeypatch)), "prompt_history")
    details = widget(app.expander, "This prompt over training")
    assert details.caption[0].value.startswith("4 completion(s) of this prompt at 1 step(s)")
    assert details.dataframe[0].value["reward"].tolist() == [0.0, 0.25, 0.5, 0.75]


def image_paths(line: dict) -> list[str]:
    return [image["path"] if isinstance(image, dict) else image for image in line.get("images") or []]


# One question asked of different pictures (a VLM run): the red picture's history is the lines of the question and
# that picture, in the shown run and, compared, the other run's red picture at the same path; not the blue picture's,
# both pictures', none's, nor a copy of the red file under another path (images are known by their paths). Before,
# every line of the question was listed.
def test_this_prompt_over_training_tells_one_question_of_different_pictures_apart(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    lines = write_one_question_runs(root / "c_shown", root / "a_compared")
    app = open_expander(load_and_view(start(root, monkeypatch)), "prompt_history")  # step 1, sample 0: the red picture
    assert image_paths(lines["c_shown"][0]) == ["images/red.png"]

    def expected(runs: list[str]) -> list[tuple]:
        return sorted((run, line["step"], line["reward"]) for run in runs for line in lines[run] if line["prompt"] == QUESTION and image_paths(line) == ["images/red.png"])

    details = widget(app.expander, "This prompt over training")
    assert [c.value for c in details.caption] == ["3 completion(s) of this prompt at 3 step(s)"]
    assert sorted(("c_shown", step, reward) for step, reward in details.dataframe[0].value[["step", "reward"]].values.tolist()) == expected(["c_shown"])
    [points, _] = (layer["data"]["values"] for layer in chart_spec(details.get("vega_lite_chart")[0])["layer"])
    assert sorted(("c_shown", p["step"], p["reward"]) for p in points) == expected(["c_shown"])

    compare(app, ["a_compared"])
    details = widget(app.expander, "This prompt over training")
    assert [c.value for c in details.caption] == ["4 completion(s) of this prompt at 3 step(s) in 2 run(s)"]
    assert sorted(map(tuple, details.dataframe[0].value[["run", "step", "reward"]].values.tolist())) == expected(["c_shown", "a_compared"])
    assert not app.exception


# The bundled VLM run asks one question of 24 pictures, each file named by its content's hash: the history of the
# sample in view (step 1's first) is the lines of the question and its picture, not the run's 1,600 lines.
def test_this_prompt_over_training_of_the_bundled_vlm_run_is_its_pictures(monkeypatch):
    app = open_expander(load_and_view(start(DEFAULT_ROOT, monkeypatch)), "prompt_history")
    assert widget(app.sidebar.selectbox, "Choose Log Name").value == "grpo_tiny_vlm_example"
    [run_file] = (DEFAULT_ROOT / "grpo_tiny_vlm_example").glob("rollout_data_rank_*.jsonl")
    lines = [json.loads(text) for text in run_file.read_text("utf-8").splitlines()]
    in_view = next(line for line in lines if line["step"] == 1)
    same = [line for line in lines if line["prompt"] == in_view["prompt"] and image_paths(line) == image_paths(in_view)]
    assert len(same) < sum(line["prompt"] == in_view["prompt"] for line in lines) == len(lines)
    details = widget(app.expander, "This prompt over training")
    assert [c.value for c in details.caption] == [f"{len(same)} completion(s) of this prompt at {len({line['step'] for line in same})} step(s)"]
    table = details.dataframe[0].value
    assert sorted(zip(table["step"], table["reward"], table["advantage"])) == sorted((line["step"], line["reward"], line["advantage"]) for line in same)
