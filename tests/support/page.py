"""The page in Streamlit's AppTest: start it on a root, press Load & View, find a widget by its label, read the batch
table, a chart's Vega-Lite spec and its points."""

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow.ipc
from streamlit.proto.WidgetStates_pb2 import WidgetState
from streamlit.testing.v1 import AppTest
from streamlit.testing.v1.element_tree import Block

import rl_logging_board as board
from rl_board.reading.history import METRICS_FILES

APP = str(Path(board.__file__))


def start(root, monkeypatch) -> AppTest:
    monkeypatch.setenv("RL_LOGGING_BOARD_ROOT", str(root))
    app = AppTest.from_file(APP, default_timeout=120)
    app.run()
    assert not app.exception
    return app


def load_and_view(app: AppTest) -> AppTest:
    next(b for b in app.sidebar.button if b.label == "Load & View").click()
    app.run()
    assert not app.exception, app.exception
    return app


def widget(elements, label):
    matches = [element for element in elements if element.label == label]
    assert matches, f"no widget labelled {label!r} among {[e.label for e in elements]}"
    return matches[0]


# The batch table: the step's samples, one row each (the load report's tables are drawn only when opened).
def batch_table(app: AppTest):
    return next(frame.value for frame in app.dataframe if {"prompt", "response"} <= set(frame.value.columns))


# One of a region's views (the page's draw_view_choice): its name, and what it draws, nothing unless it is the one
# chosen (only that one is drawn).
@dataclass
class View:
    label: str
    shown: Block | None

    def get(self, element_type: str) -> list:
        return list(self.shown.get(element_type)) if self.shown is not None else []

    def __getattr__(self, elements: str):  # its elements of a kind, as a block's: view.dataframe, view.info
        if elements.startswith("_") or not hasattr(Block, elements):
            raise AttributeError(elements)
        return getattr(self.shown, elements) if self.shown is not None else []


# A region's views, in their order, by the key of the segmented control that picks them; none while it is not drawn.
def views(app: AppTest, key: str) -> list[View]:
    try:
        control, shown = app.get_by_key(key), app.get_by_key(f"{key}_shown")
    except KeyError:
        return []
    return [View(option, shown if position in control.indices else None) for position, option in enumerate(control.options)]


# The step curves' views (the step tables and the token area have views of their own).
def curve_views(app: AppTest) -> list[View]:
    return views(app, "curve_view")


# Open one of the token area's views (only the open one is drawn).
def open_token_view(app: AppTest, name: str) -> AppTest:
    app.session_state["token_view"] = name
    app.run()
    assert not app.exception, app.exception
    return app


def running_text(app: AppTest) -> str:
    [body] = [html.proto.body for html in app.get("html") if "class='rl-running-text'" in html.proto.body]
    return body


# A chart with its data put back into its spec: Streamlit sends the top-level data and the named datasets apart from
# the spec, as Arrow. The chart and each layer that name a dataset get its rows as values, as inline data has them.
def chart_spec(element) -> dict:
    spec = json.loads(element.proto.spec)
    if element.proto.data.data:
        spec["data"] = {"values": arrow_rows(element.proto.data.data)}
    datasets = {dataset.name: arrow_rows(dataset.data.data) for dataset in element.proto.datasets}
    for part in [spec, *spec.get("layer", [])]:
        if part.get("data", {}).get("name") in datasets:
            part["data"] = {"values": datasets[part["data"]["name"]]}
    return spec | ({"datasets": datasets} if datasets else {})


def arrow_rows(data: bytes) -> list[dict]:
    return pyarrow.ipc.open_stream(data).read_all().to_pylist()


def lines_of(run_dir: Path) -> list[dict]:
    paths = [path for path in sorted(run_dir.glob("*.jsonl")) if not path.match(METRICS_FILES)]
    return [json.loads(line) for path in paths for line in path.read_text().splitlines()]


def step_reward_chart(app: AppTest) -> dict:
    [tab] = [tab for tab in curve_views(app) if tab.label == "Step-Reward"]
    [element] = tab.get("vega_lite_chart")
    return chart_spec(element)


# A step curve's points by series: step -> the point.
def curve_points(spec: dict) -> dict[str, dict[int, dict]]:
    points = {}
    for point in spec["data"]["values"]:
        points.setdefault(point["series"], {})[point["step"]] = point
    return points


def loaded_caption(app) -> str:
    return next(caption.value for caption in app.caption if caption.value.startswith("Loaded "))


# A click on a table's row. AppTest cannot click a dataframe row: the row selection is sent as the browser sends it
# (the table's widget state, a JSON string) through AppTest's private _run, which fires the table's on_select; the
# browser tests click rows in Chromium.
def click_row(app: AppTest, frame, row: int) -> AppTest:
    states = app._tree.get_widget_states()
    states.widgets.append(WidgetState(id=frame.proto.id, string_value=json.dumps({"selection": {"rows": [row], "columns": []}})))
    app._run(states)
    assert not app.exception, app.exception
    return app
