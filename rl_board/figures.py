"""The charts, built from numbers and names as data (no Streamlit): Vega-Lite specs for the step curves, the training
metrics, the batch charts and search matches; the plotly token heat map; the running text of a response as escaped
HTML spans coloured by a token metric."""
import html
import itertools
import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from rl_board.metrics import TokenRows, finite, normal_curve, smoothed, step_stats
from rl_board.reading.history import TrainingHistory, metric_name
from rl_board.text import largest_magnitude, number_text, one_line, token_label

STEP_PALETTE = ["#e8927c", "#5fa8d3", "#b8de6f", "#f3c969", "#c39bd3", "#76d7c4", "#f1948a", "#85c1e9"]


# A chart's subtitle in a grey readable on the light and the dark theme (Vega's default is near-black), apart from the title.
SUBTITLE_STYLE = {"subtitleColor": "#9a9aa6", "subtitlePadding": 4}


# Scroll to zoom, drag to pan, double-click to reset, on every step chart.
ZOOM = [{"name": "zoom", "select": "interval", "bind": "scales"}]

# A click on a step chart picks the step of the point nearest the pointer (a point of a 400-step curve is under 3 px
# wide), and the page shows that step: the page names the selection to Streamlit (selection_mode) to hear of a click.
PICK_STEP = "pick_step"


# The layer of a step chart that a click and a hover find the nearest point of: invisible points with the tooltip.
# Vega-Lite's nearest (a Voronoi diagram over the points) works on point marks, not lines.
def nearest_point_layer(x: dict, y_field: str, tooltip: list, transform: list | None = None) -> dict:
    return {
        **({"transform": transform} if transform else {}),
        "mark": {"type": "point", "opacity": 0},
        "params": [{"name": PICK_STEP, "select": {"type": "point", "encodings": ["x"], "on": "click", "nearest": True}}],
        "encoding": {"x": x, "y": {"field": y_field, "type": "quantitative"}, "tooltip": tooltip},
    }


# A step curve's dashed lines (a trainer's logged kl) have their points marked while they hold fewer points than this.
LINE_POINTS_MARKED = 60

# The heights of the step curves and of the training metrics' charts, their titles, axes and legends included.
STEP_CURVE_HEIGHT, METRIC_CHART_HEIGHT = 460, 360


# An axis title longer than the plot is tall would shrink the plot (to nothing, for a long field name): cut with "…".
AXIS_TITLE_PIXELS = 200


SAMPLE_AXIS = {"field": "sample_index", "type": "ordinal", "title": "sample index", "axis": {"labelOverlap": "greedy", "labelAngle": 0}}


# The labels of a value axis (or a gradient legend) of a chart's `scale` ("x", "y", "color"), docs/page.md#numbers-as-shown:
# d3's for the ticks' spacing, without trailing zeros (0, 0.5, 1, 1.5, 1,000: a zero is 0, never 0.0000000); where the
# scale's domain lies within ±0.001 (a KL of 3e-8, a learning rate of 1e-6), in exponent form (0, 2e-8, −4e-8), as
# fixed decimals put a row of zeros before the digits there, with as many significant digits as the domain's width
# needs to tell its ticks apart (1.0002e-4 beside 1.0004e-4; a gradient legend's ends, −1.7e-7 and 8e-7, as d3's fixed
# labels would round them). Decided in the browser from the domain drawn: a spec whose numbers changed would be built
# anew instead of having its data swapped (raw_line_layer).
def value_labels(scale: str) -> dict:
    first, last = f"domain('{scale}')[0]", f"peek(domain('{scale}'))"
    size, width = f"max(abs({first}), abs({last}))", f"abs({last} - {first})"
    digits = f"({width} > 0 ? clamp(floor(log({size}) / LN10) - floor(log({width}) / LN10) + 2, 1, 15) : 6)"
    return {"format": ",~f", "labelExpr": f"datum.value == 0 ? '0' : {size} < 1e-3 ? format(datum.value, '.' + {digits} + '~e') : datum.label"}


# The token grid as a heat map, tokens along x as the original had them. Each metric's row is coloured within
# its own range, as the running text is (red above 0, blue below, stronger = larger |value| against the row's
# largest): one shared scale would leave every row but logp flat. The cells and the hover show the raw values.
# Up to LABELLED_TOKENS tokens every column is labelled with its token, and up to VALUE_LABELLED_TOKENS each cell with
# its value; past those a label is too narrow to read (the axis shows token indices instead, the rows' positions: the
# same "#index" as the table and the running text), and the hover still gives each token and value. Fixed margins and
# no colour bar: plotly then lays the chart out once per redraw instead of measuring and placing its labels again.
LABELLED_TOKENS, VALUE_LABELLED_TOKENS = 100, 30

# Past this many tokens, each of the heat map's columns is a stretch of consecutive tokens, coloured by the value of
# largest magnitude of each row in it (its token on hover): plotly draws a cell narrower than a pixel over its
# neighbours, so a heat map of 4,000 tokens about 1,000 pixels wide showed one KL spike of four, and one of 1,000,000
# tokens nothing at all (after 8 s). 500 columns are at least 1.5 pixels each on a 1280-pixel screen.
HEAT_MAP_COLUMNS = 500


LINE_WIDTH, LINE_WIDENING = 1.5, 2.0  # pixels: a dashed line without a band, and more for each later one over it
LINES_COINCIDE = 0.005  # two lines whose values at a step differ by less than this share of their range: one drawn over the other
LINES_COINCIDE_STEPS = 0.9  # the share of their shared steps at which two lines must be so to coincide (every run's kl is 0 at its first)


# The widths of the dashed lines without a band, (name, steps, values) each: LINE_WIDTH, wider by LINE_WIDENING for
# each later line that coincides with it (TRL's kl recomputed from the lines and as the trainer logged it), so that
# the one drawn first shows around those drawn over it.
def line_widths(lines) -> list[float]:
    finite = np.concatenate([np.asarray(values, dtype=float) for _, _, values in lines] or [np.array([])])
    finite = finite[np.isfinite(finite)]
    tolerance = LINES_COINCIDE * (finite.max() - finite.min()) if len(finite) else 0.0
    by_step = [dict(zip(np.asarray(steps).tolist(), np.asarray(values, dtype=float).tolist())) for _, steps, values in lines]
    return [LINE_WIDTH + LINE_WIDENING * sum(coincide(line, later, tolerance) for later in by_step[position + 1 :]) for position, line in enumerate(by_step)]


# Whether a later line ({step: value}) lies over most of a line: it has a value at half its steps or more, within
# `tolerance` of the line's at nearly every one (lines that cross, meet at a step, or one just begun, do not coincide).
def coincide(one: dict, other: dict, tolerance: float) -> bool:
    shared = [(value, other[step]) for step, value in one.items() if step in other and math.isfinite(value) and math.isfinite(other[step])]
    finite = sum(math.isfinite(value) for value in one.values())
    return 2 * len(shared) >= finite > 0 and sum(abs(a - b) <= tolerance for a, b in shared) >= LINES_COINCIDE_STEPS * len(shared)


# One line per series (and run) with a mean ± std × scale band (or the median with its 25-75 % band), steps in
# numeric order; smoothed, the raw centre line stays faint behind. Several runs (or a facet's values, as runs) are
# coloured, their series dashed, the dashes named in a legend unless dashes_named is False (a facet's one series,
# named in the title). The dashed lines without a band (`lines`) that coincide are drawn each narrower than the one
# before (line_widths), so both show.
def step_curve_chart(runs, columns, title, unit, variance_scale=0.2, zero_shift=False, smoothing=0.0, names=None, median=False, log_scale=False, lines=(), dashes_named=True) -> dict:
    points, shown, line_points, left_out_series = [], [], [], []
    by_run = len(runs) > 1  # several runs: colour by run, dashes by series (so a series chosen or not keeps the spec)
    longest = max([samples["step"].nunique() for _, samples in runs] + [len(steps) for _, steps, _ in lines], default=0)  # for the note
    for run_name, samples in runs:
        for column in columns:
            if column not in samples:
                continue
            stats = step_stats(samples, column)
            label = (names or {}).get(column, column)
            name = series_name(run_name, label, len(runs), len(columns))
            left_out_series.append((name, samples["step"].to_numpy(), samples[column].to_numpy(dtype=float, na_value=np.nan), column == "reward"))
            if stats.empty:
                continue
            if median:
                centre, low, high = (stats[name].to_numpy() for name in ("median", "q25", "q75"))
            else:
                centre, spread = stats["mean"].to_numpy(), stats["std"].to_numpy() * variance_scale
                low, high = centre - spread, centre + spread
            if zero_shift:
                centre, low, high = centre - centre[0], low - centre[0], high - centre[0]
            raw = centre
            change = np.diff(raw, prepend=np.nan)  # from the step before, unsmoothed
            centre, low, high = (smoothed(values, smoothing) for values in (centre, low, high))
            shown.append(run_name if by_run else name)
            order = list(dict.fromkeys(shown)).index(shown[-1])
            drawn = steps_drawn(len(stats), [centre, low, high] + ([raw] if smoothing else []))
            faint_raw = json_numbers(raw[drawn]) if smoothing else [None] * len(drawn)
            single = len(stats) == 1  # a line of one point draws nothing: the point is marked instead
            points += [
                {"series": name, "colour": shown[-1], "order": order, "what": label, "what_order": columns.index(column), "single": single, "step": step, "centre": c, "raw": r, "low": a, "high": b, "mean": m, "median": md, "std": sd, "n": n, "change": d}
                for step, c, r, a, b, m, md, sd, n, d in zip(
                    stats.index[drawn].tolist(), json_numbers(centre[drawn]), faint_raw, json_numbers(low[drawn]), json_numbers(high[drawn]), json_numbers(stats["mean"].to_numpy()[drawn]),
                    json_numbers(stats["median"].to_numpy()[drawn]), json_numbers(stats["std"].to_numpy()[drawn]), stats["count"].to_numpy()[drawn].tolist(), json_numbers(change[drawn]),
                )
            ]
    marked = sum(len(steps) for _, steps, _ in lines) < LINE_POINTS_MARKED
    for (name, steps, values), width in zip(lines, line_widths(lines)):  # dashed lines without a band: (name, steps, values)
        raw = np.array(values, dtype=float)
        left_out_series.append((name, np.asarray(steps), raw, False))
        first = raw[np.isfinite(raw)][:1]  # shifted by its first finite value: a first inf or None would blank the line
        raw = raw - first[0] if zero_shift and len(first) else raw
        shown.append(name)
        line = smoothed(raw, smoothing)
        drawn = steps_drawn(len(raw), [line] + ([raw] if smoothing else []))
        line_points += [{"series": name, "colour": name, "order": len(dict.fromkeys(shown)) - 1, "marked": marked, "width": width, "step": int(step), "centre": json_number(c), "raw": faint(r, smoothing), "logged": json_number(r)}
                        for step, c, r in zip(np.asarray(steps)[drawn], line[drawn], raw[drawn])]
    x = STEP_AXIS
    band = "median, band 25-75 %" if median else f"mean, band ± std × {variance_scale:g}"
    left_out = [note for note in [steps_drawn_note(longest)] if note] + left_out_notes(left_out_series)  # below the band's line
    y_scale = {"zero": False, "padding": 8} | ({"type": "symlog"} if log_scale else {})  # a line at the domain's end (a 0/1 reward) off the frame
    colour = series_colour("colour")
    line = {
        "mark": {"type": "line"},
        "params": ZOOM,
        "encoding": {
            "x": x,
            "y": {"field": "centre", "type": "quantitative"},
            "color": colour,
            "detail": {"field": "series"},
            **({"strokeDash": {"field": "what", "type": "nominal", "sort": {"field": "what_order", "op": "min"}, "legend": {"orient": "bottom", "title": None, "labelLimit": 0} if dashes_named else None}} if by_run else {}),
        },
    }
    centre = {"field": "centre", "type": "quantitative"}
    line_tooltip = [{"field": "series"}, {"field": "step"}, {"field": "logged", "title": "value", "format": ".6g"}]
    tooltip = [
        {"field": "series"}, {"field": "step"}, {"field": "median" if median else "mean", "format": ".4g"},
        {"field": "change", "title": "change from the step before", "format": "+.4g"},
        {"field": "mean" if median else "median", "format": ".4g"}, {"field": "std", "format": ".4g"}, {"field": "n", "title": "samples"},
    ]
    # The band is said under the title: an axis title longer than the plot is tall shrinks the plot and pushes the
    # chart's title off its canvas.
    return {
        "title": {"text": one_line(title), "subtitle": [band, *left_out] if left_out else band, **SUBTITLE_STYLE},
        "height": STEP_CURVE_HEIGHT,
        "padding": {"top": 12},  # a layered chart's title otherwise starts above its canvas, cut in half
        "config": STACKED_LEGENDS,
        "data": {"name": POINTS},
        "datasets": {POINTS: points, STEP_EXTENT: step_extent(pd.concat([samples["step"] for _, samples in runs if len(samples)])), "lines": line_points},
        "layer": [
            {"mark": {"type": "area", "opacity": 0.2}, "encoding": {"x": x, "y": {"field": "low", "type": "quantitative", "title": one_line(unit), "axis": {"titleLimit": AXIS_TITLE_PIXELS, **value_labels("y")}, "scale": y_scale}, "y2": {"field": "high"}, "color": colour, "detail": {"field": "series"}}},
            raw_line_layer(x, colour),
            line,
            {"transform": [{"filter": "datum.single"}], "mark": {"type": "point", "filled": True, "opacity": 1}, "encoding": {"x": x, "y": centre, "color": colour}},
            nearest_point_layer(x, "centre", tooltip),
            step_extent_layer(),
            # The lines always there (a trainer's kl logged from a later step on adds no layer), their points marked when few.
            {"data": {"name": "lines"}, "mark": {"type": "line", "strokeDash": [6, 3]}, "encoding": {"x": x, "y": centre, "color": colour, "strokeWidth": {"field": "width", "type": "quantitative", "scale": None, "legend": None}, "tooltip": line_tooltip}},
            {"data": {"name": "lines"}, "transform": [{"filter": "datum.marked"}], "mark": {"type": "point", "filled": True, "opacity": 1}, "encoding": {"x": x, "y": centre, "color": colour, "tooltip": line_tooltip}},
        ],
    }


# Where values are ±inf, which no chart can draw and every mean, spread, histogram and bar leaves out (a reward
# function's overflow, a token the trainer gives no probability): the places of the first `listed`, each with its sign,
# and how many more ("3 (+inf), 4 (−inf) and 2 more"); None where there are none. A chart says where they are, so that
# the samples a run most needs looked at do not vanish from it.
def infinite_places(places, values, listed: int = 5) -> str | None:
    values = np.asarray(values, dtype=float)
    return listed_places([f"{places[i]} ({'+' if values[i] > 0 else '−'}inf)" for i in np.flatnonzero(np.isinf(values)).tolist()], listed)


# The first `listed` of some places, and how many more ("3, 4 and 2 more"); None for none.
def listed_places(places: list, listed: int = 5) -> str | None:
    if not places:
        return None
    return ", ".join(str(place) for place in places[:listed]) + (f" and {len(places) - listed} more" if len(places) > listed else "")


# A step chart's notes of the values its means, spreads, bands and lines leave out, a line per series holding any (up
# to `series_listed`, then how many more): ±inf, and where the series is one every line must give a number for (the
# reward, which the format requires), the samples without one (NaN or null written, or no reward function scoring it):
# "reward: 6 values ±inf and 2 without a number, left out (steps 1, 2, 3)". Each series: (name, steps, values, required).
def left_out_notes(series: list[tuple[str, np.ndarray, np.ndarray, bool]], listed: int = 5, series_listed: int = 3) -> list[str]:
    notes = []
    for name, steps, values, required in series:
        infinite, numberless = np.isinf(values), np.isnan(values) if required else np.zeros(len(values), dtype=bool)
        if not (infinite.any() or numberless.any()):
            continue
        at = np.unique(steps[infinite | numberless])
        shown = ", ".join(str(step) for step in at[:listed].tolist()) + (", …" if len(at) > listed else "")
        counts = []
        if infinite.any():
            counts.append(f"{int(infinite.sum())} value{'s' if infinite.sum() > 1 else ''} ±inf")
        if numberless.any():
            counts.append(f"{int(numberless.sum())} without a number")
        notes.append(one_line(f"{name}: {' and '.join(counts)}, left out (step{'s' if len(at) > 1 else ''} {shown})"))
    if len(notes) > series_listed:
        return notes[:series_listed] + [f"and {len(notes) - series_listed} more series with values left out"]
    return notes


# Legends below a chart one above the other, centred: side by side, the runs' colours and the series' dashes ran past
# the right edge of a chart 1,000 px wide.
STACKED_LEGENDS = {"legend": {"layout": {"bottom": {"direction": "vertical", "anchor": "middle"}}}}


# A curve's name: the series alone for one run, the run alone for one series, else both.
def series_name(run_name: str, series: str, runs: int, columns: int) -> str:
    if runs == 1:
        return series
    return run_name if columns == 1 else f"{run_name} · {series}"


# A legend of many names (a facet's values, runs compared) in rows of LEGEND_COLUMNS, each name cut at
# LEGEND_LABEL_PIXELS (a point's tooltip names it whole): in one row, ten facet values ran past both edges of a 1280-wide page's
# chart. Three fit that chart; fewer names stay in one row.
LEGEND_COLUMNS, LEGEND_LABEL_PIXELS = 3, 210


# Each series (or run) its own colour, the same on every layer, in the order of the points' "order" field; the legend
# names them. The names are in the data, not the spec: adding a run then updates every chart instead of rebuilding it
# (raw_line_layer).
def series_colour(field_name: str = "series") -> dict:
    legend = {"orient": "bottom", "title": None, "symbolOpacity": 1, "labelLimit": LEGEND_LABEL_PIXELS, "columns": LEGEND_COLUMNS}
    return {"field": field_name, "type": "nominal", "sort": {"field": "order", "op": "min"}, "scale": {"range": STEP_PALETTE}, "legend": legend}


# Smoothed curves keep their raw values visible, faintly, behind the smoothed line. The layer is always there (without
# values when nothing is smoothed): a chart whose spec keeps its shape is updated in place by the browser, where a
# changed spec is built anew, which costs several times more with a few charts of several runs (bench/README.md).
def raw_line_layer(x: dict, colour: dict) -> dict:
    return {"mark": {"type": "line", "opacity": 0.25, "strokeWidth": 1}, "encoding": {"x": x, "y": {"field": "raw", "type": "quantitative"}, "color": colour, "detail": {"field": "series"}}}


# A point's raw value for the faint line: only when the line beside it is smoothed.
def faint(value: float, smoothing: float) -> float | None:
    return json_number(value) if smoothing else None


# The step axis of every step chart. Its domain is the steps in the chart's data, not numbers written in the spec: a
# spec that keeps its shape as steps are appended is updated in place by the browser (its data swapped in the Vega view
# it has), where a changed spec is built anew (raw_line_layer). Not "nice": a nice domain ran past the last step.
STEP_AXIS = {"field": "step", "type": "quantitative", "title": "step", "axis": {"format": "d", "tickMinStep": 1}, "scale": {"zero": False, "nice": False}}

# A step chart's data are named datasets, its points (the top-level data) among them: Streamlit sends data apart from
# the spec, and where a spec has both unnamed data and one named dataset, the browser puts the unnamed rows into that
# dataset (Streamlit 1.67's ArrowVegaLiteChart, for Altair's charts), so a chart has one kind or the other.
POINTS = "points"
STEP_EXTENT = "step_extent"  # step_extent_layer's


# An invisible layer of the first and the last step of a run (its dataset: step_extent), so that the step axis spans
# the run's steps whether or not each series has a value at both ends. Points of no size: a transparent rule would
# still take the hover and clicks along its pixel column.
def step_extent_layer() -> dict:
    return {"data": {"name": STEP_EXTENT}, "mark": {"type": "point", "size": 0, "opacity": 0}, "encoding": {"x": STEP_AXIS}}  # nothing to hover or click


def step_extent(steps: pd.Series) -> list[dict]:
    return [{"step": int(steps.min())}, {"step": int(steps.max())}] if len(steps) else []


# A step chart draws a series of many steps by some of them: every point is a browser's work on each change of the
# chart, and a run of 20,000 steps took 37 s to open in Chromium and 25 s to turn Zero Shift on. A series of more than
# 2 × STEP_BINS steps is cut into at most STEP_BINS stretches of its consecutive steps, and each stretch is drawn by
# the steps holding the least and the largest finite value of each line drawn (the series' first and last step too);
# a shorter series in the same chart (an eval line, a run compared that has just begun) is drawn whole. A spike stays,
# at its step, every point drawn is a step's own numbers (its tooltip true), and the line's envelope is the whole
# series' at the chart's width; the chart says so, in words that stay the same as steps are added (a changed spec is
# built anew by the browser, where a new step's data are swapped in).
STEP_BINS = 250
STEPS_DRAWN_NOTE = f"a series of more than {2 * STEP_BINS} steps: drawn by the steps of least and largest value of each of {STEP_BINS} stretches"


def steps_per_bin(count: int) -> int:
    return max(1, math.ceil(count / STEP_BINS))


# The positions of the points a series of `count` steps draws (steps_per_bin(count) steps a stretch), given the lines
# drawn from it (arrays of `count` values): all of them while a stretch is 2 steps.
def steps_drawn(count: int, lines: list[np.ndarray]) -> np.ndarray:
    size = steps_per_bin(count)
    if size <= 2:
        return np.arange(count)
    stretches = math.ceil(count / size)
    kept = [np.array([0, count - 1])]
    for values in lines:
        grid = np.full(stretches * size, np.nan)
        grid[:count] = values
        grid = grid.reshape(stretches, size)
        finite = np.isfinite(grid)
        rows = np.flatnonzero(finite.any(axis=1))
        starts = rows * size
        kept += [starts + np.where(finite, grid, np.inf)[rows].argmin(axis=1), starts + np.where(finite, grid, -np.inf)[rows].argmax(axis=1)]
    return np.unique(np.concatenate(kept))


# Each of a bar chart's steps (sorted, distinct) as the stretch of steps_per_bin consecutive steps it lies in: the
# stretch's first step and its "first–last" label.
def step_stretches(steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    size = steps_per_bin(len(steps))
    starts = np.arange(len(steps)) // size * size
    first, last = steps[starts], steps[np.minimum(starts + size, len(steps)) - 1]
    return first, np.array([f"{a}–{b}" for a, b in zip(first.tolist(), last.tolist())])


# The chart's note of its drawn steps (steps_drawn), its longest series `longest` steps; None while every step is drawn.
def steps_drawn_note(longest: int) -> str | None:
    return STEPS_DRAWN_NOTE if steps_per_bin(longest) > 2 else None


# Numbers already reduced per step (a table indexed by step, a column per series), one line per series and run.
def step_table_chart(runs: list[tuple[str, pd.DataFrame]], columns: list[str], title: str, y_title: str, smoothing: float = 0.0) -> dict:
    points, order, left_out_series = [], itertools.count(), []
    longest = max((len(table) for _, table in runs), default=0)
    for run_name, table in runs:
        for column in columns:
            if column not in table or not table[column].notna().any():
                continue
            name, position = series_name(run_name, column, len(runs), len(columns)), next(order)
            raw = table[column].to_numpy(dtype=float)
            left_out_series.append((name, table.index.to_numpy(), raw, False))
            line = smoothed(raw, smoothing)
            drawn = steps_drawn(len(raw), [line] + ([raw] if smoothing else []))
            points += [
                {"series": name, "order": position, "step": int(step), "value": json_number(value), "raw": faint(r, smoothing)}
                for step, value, r in zip(table.index[drawn], line[drawn], raw[drawn])
            ]
    x = STEP_AXIS
    colour = series_colour()
    left_out = [note for note in [steps_drawn_note(longest)] if note] + left_out_notes(left_out_series)
    title = one_line(title)  # names from the data in it (a tool, a run folder): a line break stops Vega
    return {
        "title": {"text": title, "subtitle": left_out, **SUBTITLE_STYLE} if left_out else title,
        "height": STEP_CURVE_HEIGHT,
        "padding": {"top": 12},
        "data": {"name": POINTS},
        "datasets": {POINTS: points, STEP_EXTENT: step_extent(pd.concat([table.index.to_series() for _, table in runs if len(table)]))},
        "layer": [
            raw_line_layer(x, colour),
            {
                "mark": {"type": "line"},
                "params": ZOOM,
                "encoding": {"x": x, "y": {"field": "value", "type": "quantitative", "title": one_line(y_title), "axis": {"titleLimit": AXIS_TITLE_PIXELS, **value_labels("y")}}, "color": colour},
            },
            nearest_point_layer(x, "value", [{"field": "series"}, {"field": "step"}, {"field": "value", "format": ".4g"}]),
            step_extent_layer(),
        ],
    }


# A signal's value per step (rl_board.signals: a table per run indexed by step, with value and fired), one line per
# run, the steps where it fired marked with a red triangle, and its thresholds as dashed rules.
def signal_chart(runs: list[tuple[str, pd.DataFrame]], signal: str, unit: str, thresholds: tuple, smoothing: float = 0.0) -> dict:
    spec = step_table_chart([(name, table.rename(columns={"value": signal})) for name, table in runs], [signal], f"👾 Signals (Step level): {signal}", unit, smoothing)
    x = spec["layer"][0]["encoding"]["x"]
    fired = [
        {"series": series_name(name, signal, len(runs), 1), "step": int(step), "value": json_number(value)}
        for name, table in runs for step, value in table.loc[table["fired"], "value"].items()
    ]
    spec["datasets"]["fired"] = fired
    spec["layer"] += [
        {"data": {"values": [{"threshold": threshold} for threshold in thresholds]}, "mark": {"type": "rule", "strokeDash": [6, 4], "color": "#9a9aa6"}, "encoding": {"y": {"field": "threshold", "type": "quantitative"}}},
        {
            "data": {"name": "fired"},
            "mark": {"type": "point", "shape": "triangle-up", "filled": True, "size": 90, "color": "#d62728", "opacity": 0.9},
            "encoding": {"x": x, "y": {"field": "value", "type": "quantitative"}, "tooltip": [{"field": "series"}, {"field": "step"}, {"field": "value", "title": "fired at", "format": ".4g"}]},
        },
    ]
    return spec


# Mean |Δ| of the sampler-trainer mismatch per bucket of tokens (rl_board.mismatch.mismatch_by_bucket), in order, with
# each bucket's token count, largest |Δ| and mismatch KL on hover.
def mismatch_bucket_chart(table: pd.DataFrame, title: str) -> dict:
    by = table.index.name
    values = [
        {by: str(label), "order": position, "mean |Δ|": json_number(row["mean |Δ|"]), "max |Δ|": json_number(row["max |Δ|"]), "mismatch KL": json_number(row["mismatch KL"]), "tokens": int(row["tokens"])}
        for position, (label, row) in enumerate(table.iterrows())
    ]
    return {
        "title": one_line(title),  # names from the data in it (a tool, a run folder): a line break stops Vega
        "height": 240,
        "data": {"values": values},
        "mark": {"type": "bar"},
        "encoding": {
            "x": {"field": by, "type": "ordinal", "sort": {"field": "order"}, "axis": {"labelAngle": 0}},
            "y": {"field": "mean |Δ|", "type": "quantitative", "axis": value_labels("y")},
            "tooltip": [{"field": by}, {"field": "tokens", "format": ","}, {"field": "mean |Δ|", "format": ".4g"}, {"field": "max |Δ|", "format": ".4g"}, {"field": "mismatch KL", "format": ".4g"}],
        },
    }


# Fractions per step (in %) of zero-signal groups and of truncated completions, one line each per run.
def step_fraction_chart(runs: list[tuple[str, pd.DataFrame]], smoothing: float = 0.0) -> dict:
    columns = ["zero-signal groups", "truncated"]
    percents = [(name, (fractions.reindex(columns=columns) * 100).add_suffix(" (%)")) for name, fractions in runs]
    return step_table_chart(percents, [f"{column} (%)" for column in columns], "👾 GRPO learning signal (Step level)", "% of groups / of completions", smoothing)


# A prompt's completions over training: each completion's reward a point, their mean per step a line, per run.
def prompt_reward_chart(table: pd.DataFrame) -> dict:
    order = {run: position for position, run in enumerate(dict.fromkeys(table["run"]))}
    points = [{"run": run, "order": order[run], "step": int(step), "reward": json_number(reward)} for run, step, reward in zip(table["run"], table["step"], table["reward"])]
    rewards = table["reward"].to_numpy(dtype=float, na_value=np.nan)
    finite_rewards = table.assign(reward=np.where(np.isfinite(rewards), rewards, np.nan))  # the means, as the step curves', of the finite
    means = finite_rewards.groupby(["run", "step"])["reward"].mean().reset_index()
    lines = [{"run": run, "order": order[run], "step": int(step), "mean reward": json_number(reward)} for run, step, reward in zip(means["run"], means["step"], means["reward"])]
    left_out = left_out_notes([(run, part["step"].to_numpy(), part["reward"].to_numpy(dtype=float, na_value=np.nan), True) for run, part in table.groupby("run", sort=False)])
    x = STEP_AXIS
    colour = series_colour("run")
    title = "Rewards of this prompt's completions, per step"
    return {
        "title": {"text": title, "subtitle": left_out, **SUBTITLE_STYLE} if left_out else title,
        "height": 320,
        "padding": {"top": 12},  # a layered chart's title otherwise starts above its canvas, cut in half
        "datasets": {POINTS: points, "means": lines},  # another prompt's: the same spec, its data swapped
        "layer": [
            {"data": {"name": POINTS}, "mark": {"type": "point", "opacity": 0.6}, "encoding": {"x": x, "y": {"field": "reward", "type": "quantitative", "scale": {"zero": False, "padding": 10}, "axis": value_labels("y")}, "color": colour, "tooltip": [{"field": "run"}, {"field": "step"}, {"field": "reward", "format": ".4g"}]}},
            {"data": {"name": "means"}, "mark": {"type": "line"}, "params": ZOOM, "encoding": {"x": x, "y": {"field": "mean reward", "type": "quantitative"}, "color": colour}},
        ],
    }


STEP_LABELS = 12  # labels on a bar chart's step axis at most, give or take one


# A round stretch of steps between labels (1, 2 or 5 × 10^k steps), about a STEP_LABELS-th of the axis' steps, in
# Vega's expression language (no variables): of the steps `domain('x')`, first to last.
STEP_SPAN = f"max(1, (peek(domain('x')) - domain('x')[0]) / {STEP_LABELS})"
STEP_DECADE = f"pow(10, floor(log({STEP_SPAN}) / LN10))"
ROUND_STEPS = f"({STEP_SPAN} <= {STEP_DECADE} ? 1 : {STEP_SPAN} <= 2 * {STEP_DECADE} ? 2 : {STEP_SPAN} <= 5 * {STEP_DECADE} ? 5 : 10) * {STEP_DECADE}"


# A bar chart's step axis: a bar for every step, a label on the first step and on the first of each round stretch
# (steps 1, 10, 20, ... of 100; 99, 110, 120, ... of 99 to 198; the first stretch of steps in each 2,000 of a binned
# 20,000), whatever steps the data has (Vega's overlap rule spaced them unevenly, and a label every so many bars fell
# on steps 1, 35, 69, ...). Which steps are labelled is worked out in the browser from the steps the data has: written
# into the spec, they would change it with each step a run adds, and the browser would build the chart anew instead
# of swapping its data.
STEP_BAR_AXIS = {
    "field": "step", "type": "ordinal", "title": "step",
    "axis": {
        "labelAngle": 0,
        "labelOverlap": "greedy",  # a first step just below a round one hides that one alone (the default rule hid every other)
        "labelExpr": f"indexof(domain('x'), datum.value) == 0 || floor(datum.value / ({ROUND_STEPS})) != floor(domain('x')[indexof(domain('x'), datum.value) - 1] / ({ROUND_STEPS})) ? datum.label : ''",
    },
}


# How many samples a search found at each step: where in training a phrase appears, or a filter's samples lie. Past
# 2 × STEP_BINS steps, a bar per stretch of steps_per_bin consecutive steps, the samples found in it (20,000 bars of a
# 20,000-step run were each a tenth of a pixel, and a search's page took 3 s).
def matches_per_step_chart(per_step: pd.Series) -> dict:
    size = steps_per_bin(len(per_step))
    if size <= 2:
        values = [{"step": int(step), "samples": int(count)} for step, count in per_step.items()]
        title, tooltip = "Samples found per step", True
    else:
        first, labels = step_stretches(per_step.index.to_numpy())
        stretches = pd.Series(per_step.to_numpy()).groupby([first, labels], sort=False).sum()
        values = [{"step": int(step), "steps": label, "samples": int(count)} for (step, label), count in stretches.items()]
        title = {"text": f"Samples found per {size:,} steps", "subtitle": f"a bar for each stretch of {size:,} steps, at its first step", **SUBTITLE_STYLE}
        tooltip = [{"field": "steps", "type": "nominal"}, {"field": "samples", "type": "quantitative"}]
    return {
        "title": title,
        "height": 200,  # the title and axes included
        "data": {"values": values},
        "mark": {"type": "bar", "color": STEP_PALETTE[1], "tooltip": True},
        "encoding": {
            "x": STEP_BAR_AXIS,  # a bar for every step (or stretch of steps), none found or not
            "y": {"field": "samples", "type": "quantitative", "title": "samples", "axis": {"tickMinStep": 1}},
            **({} if tooltip is True else {"tooltip": tooltip}),
        },
    }


# One chart of a metric: per run (a colour) its train line, its eval line (eval_<name> or val_<name>, dashed, with
# points) and its best checkpoint (a dashed rule).
def metric_chart(name: str, histories: list[tuple[str, "TrainingHistory"]], smoothing: float = 0.0, zero_shift: bool = False) -> dict:
    points, rules, series_values = [], [], []
    for position, (run_name, history) in enumerate(histories):
        for split, frame in (("train", history.train), ("eval", history.eval)):
            column = next((column for column in frame.columns[1:] if metric_name(column) == name), None)
            if column is not None and frame[column].notna().any():
                series_values.append((position, run_name, split, column, frame[["step", column]].dropna()))
    longest = max((len(values) for *_, values in series_values), default=0)
    for position, run_name, split, column, values in series_values:
        raw = values[column].to_numpy(dtype=float)
        if zero_shift:
            raw = raw - raw[0]
        if split == "eval" and column in histories[position][1].train:  # the same key in both (epoch): two series
            column += " (eval)"
        series = f"{run_name} · {column}" if len(histories) > 1 else column
        line = smoothed(raw, smoothing)
        drawn = steps_drawn(len(raw), [line] + ([raw] if smoothing else []))
        points += [
            {"series": series, "run": run_name, "order": position, "split": split, "single": len(raw) == 1, "step": int(step), "value": json_number(value), "raw": faint(r, smoothing), "logged": json_number(r)}
            for step, value, r in zip(values["step"].to_numpy()[drawn], line[drawn], raw[drawn])
        ]
    for run_name, history in histories:
        best = history.best
        if best and best.get("step") is not None:
            rules.append({"step": int(best["step"]), "best checkpoint": f"{run_name}: {best['path']}" if len(histories) > 1 else str(best["path"])})
    x = STEP_AXIS
    colour = series_colour("run")
    tooltip = [{"field": "series"}, {"field": "step"}, {"field": "logged", "title": "value", "format": ".6g"}]
    layer = [
        raw_line_layer(x, colour),
        {"transform": [{"filter": "datum.split == 'train'"}], "mark": {"type": "line"}, "params": ZOOM,
         "encoding": {"x": x, "y": {"field": "value", "type": "quantitative", "title": None, "scale": {"zero": False}, "axis": value_labels("y")}, "color": colour}},
        {"transform": [{"filter": "datum.split == 'train' && datum.single"}], "mark": {"type": "point", "filled": True},  # a line of one point draws nothing
         "encoding": {"x": x, "y": {"field": "value", "type": "quantitative"}, "color": colour, "tooltip": tooltip}},
        {"transform": [{"filter": "datum.split == 'eval'"}], "mark": {"type": "line", "point": True, "strokeDash": [5, 3]},
         "encoding": {"x": x, "y": {"field": "value", "type": "quantitative"}, "color": colour}},
        nearest_point_layer(x, "value", [{"field": "series"}, {"field": "split"}, *tooltip[1:]]),
        {"data": {"name": "best"}, "mark": {"type": "rule", "strokeDash": [2, 2], "color": "#888"}, "encoding": {"x": x, "tooltip": [{"field": "best checkpoint"}, {"field": "step"}]}},
    ]
    note = steps_drawn_note(longest)
    return {
        "title": {"text": one_line(name), "subtitle": note, **SUBTITLE_STYLE} if note else one_line(name),
        "height": METRIC_CHART_HEIGHT,
        "padding": {"top": 12},
        "data": {"name": POINTS},
        "datasets": {POINTS: points, "best": rules},  # a checkpoint's rule, when there is one: a chart keeps its shape
        "layer": layer,
    }


# Each step's samples by staleness (rl_board.staleness.staleness_distribution), as stacked bars of shares: on-policy
# (0) at the bottom, staler above in darker shades; the values from STALENESS_SHADES on are one part of a bar. A click
# on a bar shows its step.
STALENESS_SHADES = 8


# Past 2 × STEP_BINS steps, a bar per stretch of steps_per_bin consecutive steps (at its first step; the share of the
# stretch's samples), as the search's chart of samples found.
def staleness_share_chart(distribution: pd.DataFrame, title: str) -> dict:
    lumped = distribution.assign(staleness=distribution["staleness"].clip(upper=STALENESS_SHADES))
    steps = np.sort(lumped["step"].unique())
    size = steps_per_bin(len(steps))
    if size > 2:
        first, labels = step_stretches(steps)
        place = np.searchsorted(steps, lumped["step"])
        lumped = lumped.assign(step=first[place], steps=labels[place])
        title = {"text": one_line(title), "subtitle": f"a bar for each stretch of {size:,} steps, at its first step", **SUBTITLE_STYLE}
        share_title = "share of the steps' samples"
    else:
        lumped = lumped.assign(steps=lumped["step"].astype(str))
        title = one_line(title)  # names from the data in it (a tool, a run folder): a line break stops Vega
        share_title = "share of the step's samples"
    parts = lumped.groupby(["step", "steps", "staleness"])["samples"].sum().reset_index()
    parts["share"] = parts["samples"] / parts.groupby("step")["samples"].transform("sum")
    label = lambda staleness: f"≥ {STALENESS_SHADES}" if staleness == STALENESS_SHADES else str(staleness)  # noqa: E731
    values = [
        {"step": int(step), "steps": stretch, "staleness": label(int(staleness)), "order": int(staleness), "samples": int(samples), "share": json_number(share)}
        for step, stretch, staleness, samples, share in zip(parts["step"], parts["steps"], parts["staleness"], parts["samples"], parts["share"])
    ]
    labels = [label(staleness) for staleness in sorted(parts["staleness"].unique().tolist())]
    return {
        "title": title,
        "height": 300,
        "padding": {"top": 24},  # a title otherwise starts above its canvas, cut in half
        "data": {"values": values},
        "mark": {"type": "bar"},
        "params": [{"name": PICK_STEP, "select": {"type": "point", "encodings": ["x"], "on": "click"}}],
        "encoding": {
            "x": STEP_BAR_AXIS,
            "y": {"field": "share", "type": "quantitative", "title": share_title, "scale": {"domain": [0, 1]}, "axis": {"format": ".0%"}},
            "color": {"field": "staleness", "type": "ordinal", "title": "staleness", "sort": labels, "scale": {"domain": labels, "range": staleness_colours(labels)}},
            "order": {"field": "order", "type": "quantitative"},
            "tooltip": [{"field": "steps", "title": "step"}, {"field": "staleness"}, {"field": "samples", "format": ","}, {"field": "share", "format": ".1%"}],
        },
    }


# On-policy in the step curves' blue; stale from yellow (1) to dark red (the stalest shown), by staleness.
def staleness_colours(labels: list[str]) -> list[str]:
    low, high = np.array([0xF3, 0xC9, 0x69]), np.array([0x9B, 0x1C, 0x1C])
    values = [int(label.removeprefix("≥ ")) for label in labels]
    stalest = max(values)
    colours = []
    for staleness in values:
        shade = low + (high - low) * (staleness - 1) / max(stalest - 1, 1)
        colours.append(STEP_PALETTE[1] if staleness == 0 else "#" + "".join(f"{round(channel):02x}" for channel in shade))
    return colours


# The batch charts' note of what they leave out; None where they draw everything: the samples without a reward (NaN
# or null written), the ±inf rewards, ref_rewards and gaps, by sample, and a series whose values lie too far apart for
# the distribution (distribution_values).
def batch_charts_left_out(table: pd.DataFrame) -> str | None:
    samples, notes = table.index.tolist(), []
    rewards = table["reward"].to_numpy(dtype=float, na_value=np.nan)
    if places := listed_places([samples[i] for i in np.flatnonzero(np.isnan(rewards)).tolist()]):  # a reward the format requires
        notes.append(f"reward without a number at sample{'s' if np.isnan(rewards).sum() > 1 else ''} {places}")
    for column in ("reward", "ref_reward", "reward_gap"):
        if places := infinite_places(samples, table[column]):
            notes.append(f"{column} at sample{'s' if np.isinf(table[column].to_numpy(dtype=float)).sum() > 1 else ''} {places}")
    for column in ("reward", "ref_reward"):
        values = finite(table[column])
        if len(values) and distribution_values(table[column]) is None:
            notes.append(f"{column}'s distribution: its values, {number_text(values.min())} to {number_text(values.max())}, span more than a float holds")
    return "Not in the charts: " + "; ".join(notes) + "." if notes else None


# Up to SAMPLE_BARS samples a step, the batch's reward and gap charts draw a bar per sample; beyond, a bar per bin of
# consecutive samples (at most SAMPLE_BINS bins, a few pixels wide each), the mean of their finite values. A bar per
# sample of a step of 8,192 samples cost the browser about 2 s of CPU a step change (bench/README.md, "Steps of many
# samples"), and drew bars a tenth of a pixel wide.
SAMPLE_BARS, SAMPLE_BINS = 256, 64


# Grouped bars of reward and ref_reward for each sample of the step (each bin of samples, in a step of many).
def batch_reward_chart(table: pd.DataFrame) -> dict:
    series = [(column, name) for column, name in (("reward", "Reward"), ("ref_reward", "Ref Reward")) if table[column].notna().any()]
    colour = {"field": "series", "type": "nominal", "scale": {"domain": ["Reward", "Ref Reward"][: len(series)], "range": ["#1f4e9c", "#5fa8d3"]}, "legend": {"orient": "top", "title": None}}
    if len(table) > SAMPLE_BARS:
        bins = [row | {"series": name} for position, (column, name) in enumerate(series) for row in sample_bins(table[column], position, len(series))]
        return binned_samples_chart("Reward in current batch samples", bins, len(table), "reward", colour)
    values = [
        {"sample_index": int(index), "series": name, "reward": json_number(value)}
        for column, name in series
        for index, value in zip(table.index, table[column])
    ]
    return {
        "title": "Reward in current batch samples",
        "height": 320,
        "data": {"values": values},
        "mark": {"type": "bar", "tooltip": True},
        "encoding": {
            "x": SAMPLE_AXIS,
            "xOffset": {"field": "series", "sort": [name for _, name in series]},
            "y": {"field": "reward", "type": "quantitative", "title": "reward", "axis": value_labels("y")},
            "color": colour,
        },
    }


# Bars of reward - ref_reward per sample (each bin of samples, in a step of many), coloured by the gap.
def reward_gap_chart(table: pd.DataFrame) -> dict:
    colour = {"type": "quantitative", "scale": {"scheme": "blues"}, "legend": {"orient": "top", "title": None, "gradientLength": {"expr": "min(200, width - 20)"}, **value_labels("color")}}
    if len(table) > SAMPLE_BARS:
        return binned_samples_chart("Reward Gap (r - ref_r) in current batch", sample_bins(table["reward_gap"]), len(table), "reward - ref_reward", {"field": "mean", **colour})
    values = [{"sample_index": int(index), "reward_gap": json_number(gap)} for index, gap in zip(table.index, table["reward_gap"])]
    return {
        "title": "Reward Gap (r - ref_r) in current batch",
        "height": 320,
        "data": {"values": values},
        "mark": {"type": "bar", "tooltip": True},
        "encoding": {
            "x": SAMPLE_AXIS,
            "y": {"field": "reward_gap", "type": "quantitative", "title": "reward - ref_reward", "axis": value_labels("y")},
            "color": {"field": "reward_gap", **colour},
        },
    }


# How many consecutive samples make a bin of the batch charts in a step of `count` samples: at most SAMPLE_BINS bins.
def samples_per_bin(count: int) -> int:
    return max(1, math.ceil(count / SAMPLE_BINS))


# A series of a step's samples in bins of samples_per_bin: each bin's first and last sample, how many of its values are
# finite, their mean, least and largest (None where none is), and where the series' bar lies in the bin (its place
# among `of` series side by side, `start` to `end`, in samples).
def sample_bins(values: pd.Series, place: int = 0, of: int = 1) -> list[dict]:
    size, numbers = samples_per_bin(len(values)), values.to_numpy(dtype=float)
    rows = []
    for first in range(0, len(numbers), size):
        count = min(size, len(numbers) - first)
        shown = numbers[first : first + count]
        shown = shown[np.isfinite(shown)]
        rows.append({
            "samples": f"{first}–{first + count - 1}",
            "start": first + place * count / of, "end": first + (place + 1) * count / of,
            "finite": len(shown),
            "mean": math.fsum(shown / len(shown)) if len(shown) else None,  # divided first: a sum of 1e308s overflows
            "least": float(shown.min()) if len(shown) else None,
            "largest": float(shown.max()) if len(shown) else None,
        })
    return rows


# A chart of sample_bins over a step of `count` samples: a bar to each bin's mean; its count, least and largest on hover.
def binned_samples_chart(title: str, bins: list[dict], count: int, value_title: str, colour: dict) -> dict:
    tooltip = [
        {"field": "samples", "type": "nominal", "title": "samples"},
        *([{"field": "series", "type": "nominal"}] if colour.get("field") == "series" else []),
        {"field": "finite", "type": "quantitative", "title": "finite values"},
        *({"field": field, "type": "quantitative", "format": ",.6~g"} for field in ("mean", "least", "largest")),
    ]
    return {
        "title": {"text": title, "subtitle": f"each bar the mean of {samples_per_bin(count)} samples", **SUBTITLE_STYLE},
        "height": 320,
        "data": {"values": bins},
        "mark": {"type": "bar"},
        "encoding": {
            "x": {"field": "start", "type": "quantitative", "title": "sample index", "scale": {"nice": False, "zero": False}, "axis": {"tickMinStep": 1, "format": "d"}},
            "x2": {"field": "end"},
            "y": {"field": "mean", "type": "quantitative", "title": value_title, "axis": value_labels("y")},
            "y2": {"datum": 0},  # from 0, as a bar per sample is (with x and x2 both given, Vega-Lite would draw it across)
            "color": colour,
            "tooltip": tooltip,
        },
    }


# Histogram (as a density) with a fitted normal curve per series, both computed here with numpy; `counted` (a run
# whose rewards take a few values: metrics.few_reward_values) counts them instead (reward_count_chart). The data are named datasets, not part of the layers, so the spec is the same for every step with the same series and the
# browser swaps the data in the chart it has instead of building a new one.
def reward_distribution_chart(table: pd.DataFrame, counted: bool = False) -> dict:
    shown = []
    for column, name, colour in (("reward", "Reward", "#e67e22"), ("ref_reward", "Ref Reward", "#2e86c1")):
        values = distribution_values(table[column])
        if values is not None:
            shown.append((name, colour, values))
    if counted:
        return reward_count_chart(shown)
    bars, curves, names, colours = [], [], [], []
    for name, colour, values in shown:
        names += [name, f"{name} normal fit"]
        colours += [colour, colour]
        density, edges = np.histogram(values, bins="auto", density=True)
        bars += [{"series": name, "start": float(a), "end": float(b), "density": float(d)} for a, b, d in zip(edges[:-1], edges[1:], density)]
        x, fit = normal_curve(values)
        curves += [{"series": f"{name} normal fit", "x": float(a), "density": float(d)} for a, d in zip(x, fit)]
    colour = {
        "field": "series",
        "type": "nominal",
        "scale": {"domain": names, "range": colours},
        # The bars' series alone, each in its colour (the fit's line is drawn in it too, and its tooltip names it): four
        # names in one row or two ran past a 1280-wide page's third; each cut within half the chart's width.
        "legend": {"orient": "top", "title": None, "values": [name for name, _, _ in shown], "labelLimit": 0},
    }
    return {
        "title": "Reward Distribution in current batch",
        "height": 320,
        "datasets": {"bars": bars, "curves": curves},
        "layer": [
            {
                "data": {"name": "bars"},
                "mark": {"type": "bar", "opacity": 0.6, "tooltip": True},
                "encoding": {"x": {"field": "start", "type": "quantitative", "title": "reward", "axis": {**value_labels("x"), "labelFlush": True}}, "x2": {"field": "end"}, "y": {"field": "density", "type": "quantitative", "title": "density (share per unit of reward)", "axis": value_labels("y")}, "y2": {"datum": 0}, "color": colour},
            },
            {
                "data": {"name": "curves"},
                "mark": {"type": "line", "tooltip": True},
                "encoding": {"x": {"field": "x", "type": "quantitative"}, "y": {"field": "density", "type": "quantitative"}, "color": colour},
            },
        ],
    }


# A series' values for the batch's distribution: its finite ones; None where it has none or they span more than a
# float holds (1e308 and -1e308), which no histogram or normal fit can.
def distribution_values(series: pd.Series) -> np.ndarray | None:
    values = finite(series)
    with np.errstate(over="ignore"):
        if not len(values) or not np.isfinite(values.max() - values.min()) or not np.isfinite(values.std()):
            return None
    return values


# Rewards of a few values (0/1 correctness, a sum of such scores): how many samples got each, side by side per series.
# A normal fit over such values describes nothing.
def reward_count_chart(shown: list[tuple[str, str, np.ndarray]]) -> dict:
    bars = [
        {"series": name, "reward": float(value), "samples": int(count)}
        for name, _, values in shown
        for value, count in zip(*np.unique(values, return_counts=True))
    ]
    colour = {"field": "series", "type": "nominal", "scale": {"domain": [name for name, _, _ in shown], "range": [colour for _, colour, _ in shown]}, "legend": {"orient": "top", "title": None, "labelLimit": 0}}
    return {
        "title": "Reward Distribution in current batch",
        "height": 320,
        "data": {"values": bars},
        "mark": {"type": "bar", "tooltip": True},
        "encoding": {
            "x": {"field": "reward", "type": "ordinal", "title": "reward", "axis": {"labelAngle": 0, "format": ".4~g"}},
            "xOffset": {"field": "series"},
            "y": {"field": "samples", "type": "quantitative", "title": "samples", "axis": {"tickMinStep": 1}},
            "color": colour,
        },
    }


def token_heatmap_figure(rows: TokenRows, chosen: list[str]) -> go.Figure:
    values = np.array([rows.values[name] for name in chosen], dtype=float).reshape(len(chosen), len(rows.tokens))
    bounds = largest_magnitude(values)[:, None]  # each row's range, of all its tokens
    labelled, valued = len(rows.tokens) <= LABELLED_TOKENS, len(rows.tokens) <= VALUE_LABELLED_TOKENS
    edges = np.append(rows.positions, rows.positions[-1] + 1) if len(rows.tokens) else rows.positions
    text = [[number_text(value, ".3g") for value in row] for row in values.tolist()] if valued else None
    if tokens_per_column(len(rows.tokens)) > 1:
        x, values, hover = token_stretches(values, rows, edges)
        hovertemplate = "%{y}, tokens %{customdata[1]}: %{customdata[0]}%{customdata[2]}<extra></extra>"
    elif labelled:
        x, hover, hovertemplate = [heat_map_label(rows, place) for place in range(len(rows.tokens))], values, "%{y} at %{x}: %{customdata:.4g}<extra></extra>"
    else:  # a column per row, from its first token to the next row's (a run of image placeholders is one row)
        x, hover, hovertemplate = edges, values, "%{y} at token #%{text}: %{customdata:.4g}<extra></extra>"
        text = [[str(position) for position in rows.positions.tolist()]] * len(chosen)
    figure = go.Figure(
        go.Heatmap(
            z=scaled_to_largest(values, bounds),
            customdata=hover,
            zmin=-1,
            zmax=1,
            showscale=False,
            x=x,
            y=list(chosen),
            colorscale="balance",
            text=text,
            texttemplate="%{text}" if valued else None,
            hovertemplate=hovertemplate,
        )
    )
    figure.update_layout(
        height=(180 if labelled else 70) + 36 * len(chosen),
        margin=dict(l=110, r=20, t=20, b=160 if labelled else 50),
        xaxis=dict(tickangle=-60, automargin=False) if labelled else dict(title="token index", automargin=False),
        yaxis=dict(autorange="reversed", automargin=False),
    )
    return figure


# The heat map's label of the token in row `place`: its token_label, cut to 24 characters, escaped for plotly, which
# reads its labels as a little HTML (< > & escaped, its tags stay text; quotes left as they are: plotly knows no
# &quot;, which it would show as written).
def heat_map_label(rows: TokenRows, place: int) -> str:
    label = token_label(int(rows.positions[place]), rows.tokens[place])
    return html.escape(label if len(label) <= 24 else label[:23] + "…", quote=False)


# How many tokens each of the heat map's columns shows, of `count`.
def tokens_per_column(count: int) -> int:
    return max(1, -(-count // HEAT_MAP_COLUMNS))


# The heat map's columns past HEAT_MAP_COLUMNS rows: stretches of consecutive rows (the last may be shorter), each
# metric's cell the value of largest magnitude in it (±inf the largest; NaN where the stretch has no value), from the
# first token of its first row to the next stretch's (`edges`: each row's first token, then the last row's end).
# Returns those edges, the values, and each cell's hover data as text (plotly's JSON has no inf or NaN): the value,
# the stretch's tokens, and which token the value is from.
def token_stretches(values: np.ndarray, rows: TokenRows, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, list]:
    size = tokens_per_column(values.shape[1])
    starts = np.arange(0, values.shape[1], size)
    padded = np.pad(values, ((0, 0), (0, len(starts) * size - values.shape[1])), constant_values=np.nan)
    stretches = padded.reshape(len(values), len(starts), size)
    magnitude = np.abs(stretches)
    largest = np.where(np.isnan(magnitude), -1.0, magnitude).argmax(axis=2)  # the first of equals
    kept = np.take_along_axis(stretches, largest[..., None], axis=2)[..., 0]
    stretch_edges = np.append(edges[starts], edges[-1])
    spans = [f"#{first}–#{end - 1}" for first, end in zip(stretch_edges[:-1].tolist(), stretch_edges[1:].tolist())]
    hover = [
        [
            ["no value", span, ""] if math.isnan(value) else [number_text(value, ".4g"), span, f" at {heat_map_label(rows, start + offset)} (the stretch's largest in size)"]
            for value, span, start, offset in zip(row, spans, starts.tolist(), offsets)
        ]
        for row, offsets in zip(kept.tolist(), largest.tolist())
    ]
    return stretch_edges, kept, hover


# JSON has no NaN: a missing number is null, which Vega leaves out.
def json_number(value) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


# json_number of each of many values, as a list.
def json_numbers(values) -> list:
    values = np.asarray(values, dtype=float)
    numbers = values.tolist()
    for position in np.flatnonzero(~np.isfinite(values)).tolist():
        numbers[position] = None
    return numbers


# Tokens a tool wrote: no colour (they have no values), a dashed frame inside the token's box and grey italics.
TOOL_TOKEN_STYLE = "background:transparent;outline:1px dashed #8a8a99;outline-offset:-1px;padding:0 2px;color:#8a8a99;font-style:italic"


# The response as running text, each token's background by a metric, value on hover; text escaped.
def running_text_html(rows: "TokenRows", metric: str, shown: range | None = None) -> str:
    colours = diverging_colours(rows.values[metric])  # scaled over the whole response, so windows compare
    columns = {name: np.asarray(column, dtype=float).tolist() for name, column in rows.values.items()}  # Python floats format faster
    spans = []
    for index in shown or range(len(rows.tokens)):
        token = rows.tokens[index]
        if rows.is_tool[index]:
            hover, style = f"#{rows.positions[index]} {token!r}  written by a tool, not sampled: no values", TOOL_TOKEN_STYLE
        else:
            hover = f"#{rows.positions[index]} {token!r}  " + "  ".join(f"{name}={number_text(column[index])}" for name, column in columns.items())
            style = f"background:{colours[index]}" + (";opacity:0.35" if rows.is_pad[index] else "")
        text = html.escape(token) or "\u200b"  # tokens are text already (readable_tokens); an empty one stays hoverable
        style += ";padding:0 0.1em" if not token else ""
        spans.append(f'<span title="{html.escape(hover)}" style="{style}">{text}</span>')
    legend = f"colour: {html.escape(metric)} (red above 0, blue below, stronger = larger); hover a token for all its values"
    if rows.is_tool.any():
        legend += f"; <span style='{TOOL_TOKEN_STYLE}'>dashed grey</span>: written by a tool, not sampled by the policy (no values)"
    return f"<div style='font-size:0.8em;opacity:0.7'>{legend}</div>" + "<div class='rl-running-text' style='white-space:break-spaces;line-height:1.9;font-family:monospace'>" + "".join(spans) + "</div>"


# The word diff's marks: removed (A's words B lacks) red, added (B's words A lacks) green, light enough to read through.
WORD_DIFF_BACKGROUNDS = {"removed": "rgba(220,60,60,0.35)", "added": "rgba(60,170,90,0.35)"}


# Runs of words (rl_board.changes.word_diff's) as the page shows a response: its text as written, escaped (never
# markup, nor Markdown: a line of "===" under another is no heading), every space, tab and line kept, and the removed
# and added runs marked.
def marked_words_html(runs: list[tuple[str, str]]) -> str:
    parts = [f'<span style="background:{WORD_DIFF_BACKGROUNDS[kind]}">{html.escape(text)}</span>' if kind in WORD_DIFF_BACKGROUNDS else html.escape(text) for kind, text in runs]
    return "<div class='rl-word-diff' style='white-space:break-spaces;overflow-wrap:anywhere'>" + ("".join(parts) or "(empty)") + "</div>"  # a long URL wraps in its column


# Values over the largest finite magnitude (`bounds`; where it is 0, the values as they are), -1 to 1 for colouring: ±inf
# at the ends, beyond every finite value; NaN (no value) stays NaN.
def scaled_to_largest(values: np.ndarray, bounds) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.clip(values / np.where(bounds > 0, bounds, 1.0), -1.0, 1.0)


# Token colours: red for positive values, blue for negative, stronger the larger |value| is
# relative to the response's largest (so a KL spike or a very unlikely token stands out).
def diverging_colours(values: np.ndarray) -> list[str]:
    values = np.asarray(values, dtype=float)
    scaled = scaled_to_largest(values, largest_magnitude(values))
    colours = []
    for level in scaled:
        if not np.isfinite(level):
            colours.append("transparent")
        elif level >= 0:
            colours.append(f"rgba(220,60,60,{0.85 * level:.2f})")
        else:
            colours.append(f"rgba(60,110,230,{-0.85 * level:.2f})")
    return colours
