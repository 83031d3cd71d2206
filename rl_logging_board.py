"""RL Logging Board: per-sample and per-token views of RL (GRPO/PPO) rollouts.

Run with `bash start.sh [PORT] [ROOT]`, or `streamlit run rl_logging_board.py -- --root <folder of runs>`. A run is a
folder of JSONL files (one per data-parallel rank); every line is one sampled response. Other trainers' files (TRL's
completion parquet, verl's dumps) are converted into such lines once; a folder may be on object storage (s3://...).
The README describes the format and each page area.

The data path:

    run folder, on disk or object storage (list_folder, read_range, read_spans)
    rank files (*.jsonl, or TRL's and verl's files converted: RunFormat, converted_file)
        ──> per-file index: each line's offset, length, step and summary numbers
        │                     (FileIndex, built by worker processes, cached on disk by IndexCache; a grown file is read
        │                      on from where it was left)
        └──> run snapshot: the selected lines of every step with their numbers, the load report (RunSnapshot, made
              by RunStore.load, one store per run folder shared by every session)
               ├──> step curves and metrics from the snapshot's numbers
               ├──> search: the texts of every loaded line, read once on the first search (RunTexts, only the prompt
               │     and response bytes the index located), filtered and sorted with the snapshot's numbers
               └──> step read-back: the texts of the step in view (StepBatch), the per-token lists of the sample in
                     view (SampleTokens), each read from its line's offset ──> tables, samples pair, token area

Sections, in order (each one's constants and types at its top):

    Page outline       main(): sidebar, load, metadata, load report, step curves, training metrics, search, step area;
                       launch options, network guard
    Page areas         one draw_* function per region; Settings (the sidebar's choices), StateKey (session-state keys)
    Cached loaders     run_store -> load_step_batch / load_sample_tokens -> cached tables and charts
    Figures            Vega-Lite specs and the token heat map (no Streamlit)
    Metrics            KL estimators, per-step statistics, groups, table and token values (no Streamlit)
    Text and tokens    display text, escaping, tokens shown as text (no Streamlit)
    Reading 1-9        decoding lines; the per-file index and its cache; the store and its workers; the run snapshot
                       and read-back; the training history; images; texts for search and lines for export; where
                       files are (disk or object storage); other trainers' files (no Streamlit: the workers import
                       this file)

Beside the rollouts, the trainer's own numbers (TrainingHistory, read by read_history from the logger's
rollout_metrics_*.jsonl, seed 004's training_log.json or Hugging Face's trainer_state.json) feed the Training metrics
area; runs chosen in Compare with are loaded through their own stores and drawn on the same step curves.
"""
import argparse
import base64
import codecs
import contextlib
import dataclasses
import fnmatch
import functools
import gc
import hashlib
import hmac
import html
import importlib
import io
import itertools
import json
import math
import multiprocessing
import os
import posixpath
import re
import stat
import sys
import threading
import time
import uuid
import warnings
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import fsspec
import msgspec
import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pyarrow as pa
import pyarrow.feather
import pyarrow.parquet
import re2
import simdjson
import streamlit as st
from PIL import Image, UnidentifiedImageError


# ====================================================================================================================
# Page outline: what the page shows, in order, and the fragments that let one part redraw alone.
# ====================================================================================================================


PROJECT_DIR = Path(__file__).resolve().parent


DEFAULT_ROOT = PROJECT_DIR / "rollout_samples"


LOOPBACK_ADDRESSES = {"127.0.0.1", "localhost", "::1"}


TOKEN_VARIABLE = "RL_LOGGING_BOARD_TOKEN"


# Texts keep every space and newline as written, but wrap as white-space: break-spaces instead of Streamlit's pre-wrap,
# in which Chromium lays out a long paragraph of mixed CJK and Latin text many times slower (bench/README.md), and a
# page lays out many times while a rerun arrives. Each token of the running text is isolated
# (a right-to-left override in one token must not reorder the tokens after it) and ends in a thin line, so token
# boundaries show without taking space. Set once for the page: a style sent with each running text would restyle the
# whole page on every sample change.
PAGE_STYLE = (
    "<style>[data-testid='stText'], [data-testid='stText'] * {white-space: break-spaces !important}"
    " .rl-running-text span {unicode-bidi: isolate; box-shadow: inset -1px 0 0 rgba(160, 160, 170, 0.45)}</style>"
)


# The page outline: sidebar choices, then each area of the loaded run.
def main():
    st.set_page_config(page_title="RL Logging Board", page_icon="📖", layout="wide")
    st.html(PAGE_STYLE)
    options = launch_options()
    settings = draw_sidebar(options.root, guard_network_access(options))
    if WORKERS > 1:
        worker_pool()  # spawning the workers takes about a second: do it while the user picks a run
    run = load_selected_run(settings)
    if run is None:
        return
    compared = load_compared_runs(settings)
    history, *compared_histories = (load_history(shown.history_dir, current_history_signature(shown.history_dir)) for shown in [run, *compared])
    if settings.live:
        watch_runs([run, *compared], [history, *compared_histories], settings.max_samples, settings.live_every)
    draw_run_metadata(run)
    run = draw_reward_weights(run)
    if run.report.empty and run.problems.empty and history.empty and history.problems.empty:
        st.warning(
            f"No `.jsonl` file and no training history in {markdown_literal(run.run_dir)}: a run is a folder of JSONL "
            f"files, one per rank, or a training output folder with {TRAINING_LOG} or {TRAINER_STATE}."
        )
        return
    draw_load_report(run, history)
    if run.samples.empty and not (run.report.empty and run.problems.empty):
        st.warning("No loadable sample in this run: open the load report above to see why.")
    runs = [(run_label(run.run_dir), run)] + [(run_label(other.run_dir), other) for other in compared]
    if settings.reward_curves and any(not shown.samples.empty for _, shown in runs):
        draw_step_curves(runs, history, settings)
    if settings.reward_curves:
        draw_training_metrics(run, compared, [history, *compared_histories], settings)
    if not run.samples.empty:
        draw_search(run, settings)
    if settings.response_compare and not run.samples.empty:
        draw_step_response(run, compared, settings)


# Parse `-- --root DIR` so start.sh and users can point the board at any folder.
def launch_options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="RL Logging Board")
    parser.add_argument(
        "--root",
        default=os.environ.get("RL_LOGGING_BOARD_ROOT", str(DEFAULT_ROOT)),
        help="folder whose sub-folders are runs (default: the bundled rollout_samples/)",
    )
    parser.add_argument(
        "--allow-any-root",
        action="store_true",
        default=os.environ.get("RL_LOGGING_BOARD_ALLOW_ANY_ROOT", "") not in ("", "0"),
        help="served beyond this machine, let Log(s) Root Path open folders outside --root too",
    )
    parser.add_argument(
        "--endpoint-url",
        default=None,
        help="S3-compatible store to open s3:// paths from (MinIO, R2...); default: the AWS_ENDPOINT_URL variable, else AWS",
    )
    options, _ = parser.parse_known_args(sys.argv[1:])
    if options.endpoint_url:  # before the workers start: they read it too
        os.environ["AWS_ENDPOINT_URL"] = options.endpoint_url
    return options


# Served beyond this machine, anyone who reaches the port could read every JSONL file the server can: the page then
# asks for the access token (RL_LOGGING_BOARD_TOKEN, in the URL as ?token=... or typed once per session) and opens
# only folders under the launch root, unless --allow-any-root says otherwise. Returns the folder runs must be under
# (None: any), or stops the page.
def guard_network_access(options: argparse.Namespace) -> str | None:
    if st.get_option("server.address") in LOOPBACK_ADDRESSES:
        return None
    token = os.environ.get(TOKEN_VARIABLE, "")
    if not token:
        st.error(f"This board is served beyond this machine without an access token: set {TOKEN_VARIABLE} (bash start.sh makes one) or serve it on 127.0.0.1.")
        st.stop()
    if not st.session_state.get(StateKey.TOKEN_ACCEPTED):
        given = st.query_params.get("token") or st.text_input("Access token", type="password", help=f"The server's {TOKEN_VARIABLE}; start.sh prints a link with it.")
        if not hmac.compare_digest(given.encode(), token.encode()):
            if given:
                st.error("Wrong access token.")
            st.stop()
        st.session_state[StateKey.TOKEN_ACCEPTED] = True
        st.rerun()  # drawn anew without the token box
    return None if options.allow_any_root else options.root


# Whether path lies inside folder once symbolic links and ".." are resolved. A URL is within a URL of the same store
# only; never within a local folder, nor a path within a URL.
def is_within(path, folder) -> bool:
    if is_remote(path) or is_remote(folder):
        if not (is_remote(path) and is_remote(folder)):
            return False
        normal = [posixpath.normpath(str(url).split("://", 1)[1]) for url in (path, folder)]
        same_store = str(path).split("://", 1)[0].lower() == str(folder).split("://", 1)[0].lower()
        return same_store and (normal[0] == normal[1] or normal[0].startswith(normal[1].rstrip("/") + "/"))
    return Path(os.path.realpath(Path(path).expanduser())).is_relative_to(os.path.realpath(Path(folder).expanduser()))


# The step in view and its samples. A fragment: picking a step, a table row or a group reruns only this part
# of the page, not the sidebar, the load and the step curves above.
@st.fragment
def draw_step_response(run: "RunSnapshot", compared: list["RunSnapshot"], settings: "Settings"):
    step = draw_step_selector(run, settings.live and settings.follow_latest)
    rows = run.step_rows(step)
    key = lines_key(rows)
    batch = load_step_batch(key, rows)
    if batch.problems:
        more = len(batch.problems) - 1
        st.warning(batch.problems[0] + (f" {more} more line(s) of this step could not be read back either." if more else ""))
        load_step_batch.clear(key, rows)  # lines that could not be read back are tried again next time
    if settings.show_charts:
        draw_batch_charts(batch)
    draw_step_tables(batch, settings, run.run_dir, step)
    draw_sample_view(run, compared, batch, step, settings)


# The sample in view, right under the table it is picked in, with its tokens and then its group's other completions.
# A fragment inside the step's: picking another sample or token metric redraws only this part, not the step's charts
# and tables above it.
@st.fragment
def draw_sample_view(run: "RunSnapshot", compared: list["RunSnapshot"], batch: "StepBatch", step: int, settings: "Settings"):
    sample = draw_samples_pair(run, batch, step, settings) if settings.show_samples_pair else chosen_sample(batch)
    draw_other_fields(batch.table.iloc[sample])
    draw_token_area(batch, sample, settings)
    draw_sample_group(batch, sample, settings)
    draw_prompt_history(run, compared, batch.table.iloc[sample], settings)


# ====================================================================================================================
# Page areas: one function per region, which draws it and returns the user's choices.
# ====================================================================================================================


# Every session-state key of the page, widgets' included, named once. remembered_choice adds ":chosen" and ":drawn"
# to a widget's key for the choice it keeps while the widget is not drawn.
class StateKey:
    LOADED_RUN = "loaded_run"  # the run folder Load & View opened
    PAGE_SHOWN = "page_shown"  # the page's first run is over: the browser warm-up may be drawn
    TOKEN_ACCEPTED = "token_accepted"  # this session gave the access token
    COMPARE_WITH = "compare_with"  # prefix: one choice per run shown
    LOAD_BUTTON = "load_button"
    METRIC_SERIES = "metric_series"
    METRIC_TABS = "metric_tabs"  # prefix: one per set of chosen metrics
    TRAINING_SUMMARY = "training_summary"
    SELECTED_STEP = "selected_step"  # the step in view
    LAST_STEP_SEEN = "last_step_seen"  # the run's last step when the page was last drawn (live mode)
    FOLLOWING = "following"  # Follow the latest step was on when the step selector was last drawn
    LAST_STEP_WHEN_CHOSEN = "last_step_when_chosen"  # the run's last step when the user chose the step in view
    STEP_SLIDER = "step_slider"
    STEP_SELECTBOX = "step_selectbox"
    SAMPLE_INDEX = "sample_index"  # the sample in view, an index into the step's batch
    STEP_TABLE = "step_table"
    BATCH_TABLE = "batch_table"
    GROUP_TABLE = "group_table"
    CURVE_TABS = "curve_tabs"
    REWARD_SERIES = "reward_series"  # prefix: one choice per set of options
    REWARD_WEIGHTS = "reward_weights"  # prefix: one per run
    KL_STATISTIC = "kl_statistic"
    KL_LOG_SCALE = "kl_log_scale"
    TOKEN_VIEW = "token_view"
    COLOUR_TOKENS_BY = "colour_tokens_by"
    TOKENS_SHOWN = "tokens_shown"
    METADATA_DETAILS = "metadata_details"
    PROMPT_HISTORY = "prompt_history"
    LOAD_REPORT_DETAILS = "load_report_details"
    SEARCH_QUERY = "search_query"
    SEARCH_PLACES = "search_places"
    SEARCH_REGEX = "search_regex"
    SEARCH_CASE = "search_case"
    SEARCH_FILTERS = "search_filters"
    SEARCH_FILTER = "search_filter"  # prefix: one widget per filter chosen
    SEARCH_SORT = "search_sort"
    SEARCH_ORDER = "search_order"
    SEARCH_TOP = "search_top"
    SEARCH_RESULTS = "search_results"  # prefix: one per set of results
    SEARCH_PICKED = "search_picked"  # a result was clicked: the whole page reruns to show it
    FIELD_SERIES = "field_series"
    FACET = "facet"
    FACET_SERIES = "facet_series"
    OTHER_FIELDS = "other_fields"


# The sidebar's choices, read by every area of the page.
@dataclass(frozen=True)
class Settings:
    root: str
    allowed_root: str | None  # served to the network: runs must be under it
    run_name: str | None
    compare_names: tuple  # other runs of the root drawn beside it on every step curve
    max_samples: int
    load_clicked: bool
    live: bool
    live_every: int
    follow_latest: bool
    reward_curves: bool
    variance_scale: float
    zero_shift: bool
    smoothing: float  # exponential moving average weight of step curves, 0: none
    response_compare: bool
    use_logp_as_kl: bool
    kl_estimator: str
    pad_token: str | None  # None: Drop Padding Token is off
    system_prompt_end: str | None  # None: Drop System Prompt is off
    show_charts: bool
    show_batch_samples: bool
    show_samples_pair: bool
    show_heat_map: bool


# Per-step series of the reward tab, in the original's order.
REWARD_SERIES = ["reward", "ref_reward", "valid_reward", "ref_valid_reward"]


KL_ESTIMATOR_LABELS = {"kl": "kl (original board)", "k1": "k1 (log ratio)", "k2": "k2 (r²/2)", "k3": "k3 (TRL's kl)"}


KL_STATISTICS = ["mean ± std", "median (25-75 %)"]


TOKEN_VIEWS = ["Token table", "Heat map", "Response tokens"]


# The running text shows this many tokens at a time: each token is an element the browser must check and lay out.
RUNNING_TEXT_TOKENS = 2000


# Search results listed at most (the downloads hold up to EXPORT_ROWS).
RESULTS_SHOWN = 1000


PROGRESS_AFTER_S, PROGRESS_EVERY_S = 0.3, 0.5
WARM_UP_AFTER_S = 1.0


# The original's sidebar, label for label, plus the live mode and KL estimator choices.
def draw_sidebar(default_root: str, allowed_root: str | None) -> "Settings":
    sidebar = st.sidebar
    sidebar.title("📖 RL Logging Board")
    root = sidebar.text_input("Log(s) Root Path", value=default_root)
    root = REMOTE_URL.sub(lambda scheme: scheme.group(0).lower(), root, count=1) if is_remote(root) else root  # S3:// as s3://
    if allowed_root is not None and not is_within(root, allowed_root):
        sidebar.warning(f"Served to the network, this board opens only folders under {markdown_literal(allowed_root)}.")
        root = allowed_root
    runs, listing_error = listed_runs(root)
    if listing_error:
        sidebar.error(markdown_literal(listing_error))
    run_name = sidebar.selectbox(
        "Choose Log Name", runs, index=(0 if runs[0] == "." else len(runs) - 1) if runs else None, format_func=lambda name: "(this folder)" if name == "." else one_line(name)
    )
    # Compared with the run shown: the loaded one, or the chosen one while none is (or while Load & View opens it; its
    # click is in the session state before the button is drawn).
    chosen_dir = joined(root, run_name) if run_name is not None else None
    shown_dir = st.session_state.get(StateKey.LOADED_RUN) if not st.session_state.get(StateKey.LOAD_BUTTON) else None
    shown_dir = shown_dir or chosen_dir
    others = [name for name in runs if joined(root, name) != shown_dir]
    compare_names = sidebar.multiselect(
        "Compare with",
        others,
        key=f"{StateKey.COMPARE_WITH}:{shown_dir}",
        format_func=lambda name: "(this folder)" if name == "." else one_line(name),
        help="Other runs of this root drawn beside the loaded one on every step curve and training metric, one line each.",
    )
    max_samples = sidebar.number_input(
        "Max Samples Each Step",
        min_value=1,
        max_value=10240,
        value=128,
        help="Downsample big batches so the page stays responsive: at most this many "
        "samples per step are loaded, taken evenly from every rank file.",
    )
    load_clicked = sidebar.button("Load & View", width="stretch", key=StateKey.LOAD_BUTTON)
    live = sidebar.toggle(
        "Live mode",
        value=False,
        help="Re-check the run every few seconds and pull in new steps while training writes.",
    )
    live_every = sidebar.slider("Live refresh (s)", 2, 60, 5, disabled=not live)
    follow_latest = sidebar.toggle(
        "Follow the latest step",
        value=False,
        disabled=not live,
        help="In live mode, show each new step as it arrives; off, the chosen step stays and new steps are announced.",
    )

    with sidebar.expander("🧩 module setting", expanded=True):
        reward_curves = st.checkbox("Reward 曲线图", value=True, help="Show the per-step curves.")
        variance_scale = st.slider(
            "Variance Scaling",
            0.1,
            1.0,
            0.2,
            help="The shaded band around each curve is mean ± std × this factor.",
        )
        zero_shift = st.checkbox(
            "Zero Shift",
            value=False,
            help="Shift every curve so its first point is 0, to compare trends.",
        )
        smoothing = st.slider(
            "Smoothing",
            0.0,
            0.99,
            0.0,
            step=0.01,
            help="Exponential moving average of every step curve, as in TensorBoard (0: none); the raw values stay faint behind.",
        )
        response_compare = st.checkbox("Response 对比", value=True, help="Show the per-step response area.")

    with sidebar.expander("⚙️ show details setting", expanded=True):
        use_logp_as_kl = st.checkbox(
            "Use LogP as KL",
            value=True,
            help="Step-KL plots the mean log_ratio (logp - ref_logp) instead of the mean kl.",
        )
        kl_estimator = st.selectbox(
            "KL estimator",
            list(KL_ESTIMATORS),
            index=list(KL_ESTIMATORS).index(default_kl_estimator(root, run_name)),
            format_func=KL_ESTIMATOR_LABELS.get,
            help="Used for kl in Step-KL (with Use LogP as KL off), the batch table and the token rows; k3 by default "
            "for runs the logger wrote from TRL, whose logged kl it is. With r = logp - ref_logp: "
            + "; ".join(f"{name} = {formula}" for name, formula in KL_ESTIMATORS.items()),
        )
        drop_padding = st.checkbox("Drop Padding Token", value=True)
        pad_token = st.text_input("Pad Token", value="<PAD>")
        drop_system_prompt = st.checkbox("Drop System Prompt", value=True)
        system_prompt_end = st.text_input("End Token of System Prompt", value="<endofsystem>")
        show_charts = st.checkbox("Show Charts", value=True)
        show_batch_samples = st.checkbox("Show Batch Samples", value=True)
        show_samples_pair = st.checkbox("Show Samples Pair", value=True)
        show_heat_map = st.checkbox("Show Heat Map", value=True)

    return Settings(
        root=root,
        allowed_root=allowed_root,
        run_name=run_name,
        compare_names=tuple(compare_names),
        max_samples=int(max_samples),
        load_clicked=load_clicked,
        live=live,
        live_every=live_every,
        follow_latest=follow_latest,
        reward_curves=reward_curves,
        variance_scale=variance_scale,
        zero_shift=zero_shift,
        smoothing=smoothing,
        response_compare=response_compare,
        use_logp_as_kl=use_logp_as_kl,
        kl_estimator=kl_estimator,
        pad_token=pad_token if drop_padding else None,
        system_prompt_end=system_prompt_end if drop_system_prompt else None,
        show_charts=show_charts,
        show_batch_samples=show_batch_samples,
        show_samples_pair=show_samples_pair,
        show_heat_map=show_heat_map,
    )


# TRL logs k3 as kl: a run whose metadata names a trl version starts on k3, so the board's numbers match TRL's.
def default_kl_estimator(root: str, run_name: str | None) -> str:
    if run_name is None:
        return "kl"
    meta = cached_meta(joined(root, run_name))
    return "k3" if meta and meta.get("trl_version") else "kl"


# Data loads on Load & View only; afterwards widget changes reuse it, and live mode refreshes it.
def load_selected_run(settings: "Settings"):
    root = settings.root if is_remote(settings.root) else str(Path(settings.root).expanduser())
    if is_remote(root) and listed_runs(root)[1]:
        return None  # the sidebar says why
    if not is_remote(root) and not Path(root).is_dir():
        st.warning(f"Log(s) Root Path {markdown_literal(root)} does not exist.")
        return None
    if settings.run_name is None:
        st.warning(f"No run in {markdown_literal(root)}. Put each run in its own folder, one JSONL file per rank:")
        st.code(f"{root}/\n└── my_run/\n    ├── rollout_data_rank_0.jsonl\n    └── rollout_data_rank_1.jsonl", language=None)
        return None
    if settings.load_clicked:
        st.session_state[StateKey.LOADED_RUN] = joined(root, settings.run_name)
        for key in (StateKey.LAST_STEP_SEEN, StateKey.LAST_STEP_WHEN_CHOSEN):  # new steps are counted in this run alone
            st.session_state.pop(key, None)
    run_dir = st.session_state.get(StateKey.LOADED_RUN)
    if run_dir is None:
        st.info("Please Press 「Load & View」Button to load log.")
        warm_up_browser()
        return None
    if valid_text(run_dir) != run_dir:
        st.warning(f"The name of {markdown_literal(run_dir)} is not valid UTF-8: rename the folder to open it.")
        return None
    if settings.allowed_root is not None and not is_within(run_dir, settings.allowed_root):  # e.g. a link out of the root
        st.warning(f"{markdown_literal(run_dir)} leads outside {markdown_literal(settings.allowed_root)}: served to the network, this board opens only folders under it.")
        return None
    if run_dir != joined(root, settings.run_name):
        st.caption(f"Showing {markdown_literal(run_dir)}; press Load & View to open {markdown_literal(settings.run_name)}.")
    try:
        snapshot = load_run(run_dir, settings.max_samples, settings.load_clicked or settings.live)
    except StorageError as error:
        st.error(markdown_literal(error))
        return None
    if settings.load_clicked:  # the original's toast; it counts the samples shown, as the load report's caption does
        shown, bad = len(snapshot.samples), int(snapshot.report["bad lines"].sum())
        st.toast(f"Loaded {shown} sample(s), success: {shown}, error: {bad}")
    return snapshot


# A run's snapshot from its shared store, brought up to date when asked (or first needed), with progress bars.
def load_run(run_dir: str, max_samples: int, refresh: bool) -> "RunSnapshot":
    store = run_store(run_dir)
    refresh = refresh or store.snapshot is None or store.snapshot.max_samples != max_samples
    if refresh and store.needs_work(max_samples):
        bars = [ProgressBar(), ProgressBar()]
        try:
            store.load(max_samples, files_progress=bars[0].show, samples_progress=bars[1].show)
        finally:
            for bar in bars:
                bar.clear()
    return store.snapshot


# The runs chosen to compare, loaded as the shown one is (from their index caches once indexed).
def load_compared_runs(settings: "Settings") -> list["RunSnapshot"]:
    run_dirs = [joined(settings.root, name) for name in settings.compare_names]
    run_dirs = [run_dir for run_dir in run_dirs if is_remote(run_dir) or Path(run_dir).is_dir()]
    if settings.allowed_root is not None:
        run_dirs = [run_dir for run_dir in run_dirs if is_within(run_dir, settings.allowed_root)]
    compared = []
    for run_dir in run_dirs:
        if run_dir != st.session_state.get(StateKey.LOADED_RUN):
            try:
                compared.append(load_run(run_dir, settings.max_samples, settings.live))
            except StorageError as error:
                st.warning(markdown_literal(error))
    return compared


# A run's name on charts and in tables: its folder's name.
def run_label(run_dir: str) -> str:
    return valid_text(Path(run_dir).name) or valid_text(run_dir)


# A progress bar for long loads: drawn once a load has taken PROGRESS_AFTER_S (a short one, such as a live
# refresh, would only shift the page down and up again), then redrawn at most every PROGRESS_EVERY_S: each
# redraw costs the browser CPU that the load, on the same cores, needs.
class ProgressBar:
    def __init__(self):
        self.element = st.empty()
        self.started_at, self.shown_at = time.monotonic(), -math.inf

    def show(self, fraction: float, text: str):
        now = time.monotonic()
        if now - self.started_at >= PROGRESS_AFTER_S and (now - self.shown_at >= PROGRESS_EVERY_S or fraction >= 1):
            self.shown_at = now
            self.element.progress(min(fraction, 1.0), text=f"[{fraction:.0%}] {text}")

    def clear(self):
        self.element.empty()


# Off-screen samples of every kind of element the loaded page draws (but the toast): the browser fetches and
# compiles their code while the user picks a run instead of after Load & View. Drawn by the fragment's own timer from
# a moment after the page opened, not in its first run: the browser paints nothing of a run before it has handled all
# of it, and these elements held back the first paint of Load & View by seconds (bench/README.md).
@st.fragment(run_every=WARM_UP_AFTER_S)
def warm_up_browser():
    if not st.session_state.get(StateKey.PAGE_SHOWN):
        st.session_state[StateKey.PAGE_SHOWN] = True
        return
    with st.container(key="warm_up"):
        st.html("<style>.st-key-warm_up {position: absolute; left: -10000px; width: 600px}</style>")
        draw_chart(st, {"data": {"values": [{"x": 0}]}, "mark": "bar", "encoding": {"x": {"field": "x", "type": "quantitative"}}})
        st.plotly_chart(go.Figure(go.Heatmap(z=[[0.0]])), width="stretch")
        st.dataframe(pd.DataFrame({"x": [0.0]}))
        st.multiselect("warm-up", ["x"], key="warm_up_multiselect", label_visibility="collapsed")
        st.metric("warm-up", "0")
        st.progress(0.0)


# Live mode: a fragment re-stats the files every few seconds and reruns the page when they changed (rollouts or
# training history, of the shown run or a compared one), or when another session watching the same run already loaded
# the change (the store is shared: it then has no work left).
def watch_runs(shown: list["RunSnapshot"], histories: list["TrainingHistory"], max_samples: int, every_seconds: int):
    @st.fragment(run_every=every_seconds)
    def check_for_new_lines():
        for run, history in zip(shown, histories):
            store = run_store(run.run_dir)
            try:
                changed = store.snapshot is not run or store.needs_work(max_samples) or current_history_signature(run.history_dir) != history.signature
            except OSError as error:  # object storage out of reach for now: said, and asked again next time
                st.caption(f"Live: {markdown_literal(error)}")
                continue
            if changed:
                st.rerun(scope="app")
        st.caption(f"Live: checked {time.strftime('%H:%M:%S')}, every {every_seconds} s.")

    check_for_new_lines()


# The run's metadata file (written by rollout_logger) tells what produced the data. A fragment: opening
# the expander draws the whole file, and nothing else.
@st.fragment
def draw_run_metadata(run: "RunSnapshot"):
    meta = run.meta
    if not meta:
        return
    known = [
        ("model", meta.get("model_name")),
        ("beta", meta.get("beta")),
        ("generations", meta.get("num_generations")),
        ("temperature", meta.get("temperature")),
        ("loss", meta.get("loss_type")),
        ("trl", meta.get("trl_version")),
    ]
    # The model's last path part (all of it on hover); the strip leaves the top right to the load toast.
    columns = st.columns([4, 2, 2, 2, 2, 2, 5])
    for column, (label, value) in zip(columns, known):
        shown = "—" if value is None else str(value)
        if label == "model":
            shown = shown.rstrip("/").rsplit("/", 1)[-1] or shown
        column.metric(label, markdown_literal(shown), help=None if value is None else markdown_literal(value))
    names, weights = meta.get("reward_funcs"), meta.get("reward_weights")
    if isinstance(names, list) and names:
        terms = [markdown_literal(name) for name in names]
        weights = [1.0] * len(names) if weights is None else weights  # TRL's default
        if isinstance(weights, list) and len(weights) == len(names) and all(type(w) in (int, float) and abs(w) < 1e300 for w in weights):
            terms = [f"{w:g} × {term}" for w, term in zip(weights, terms)]
        st.caption("Reward = " + " + ".join(terms))
    details = st.expander("Run metadata", on_change="rerun", key=StateKey.METADATA_DETAILS)
    if details.open:
        details.json(meta)


# TRL's completion logs hold each reward function's score, not the reward trained on: that is their sum weighted as
# GRPOConfig(reward_weights=...) was, with the weights the logger's metadata gives or the user types here.
def draw_reward_weights(run: "RunSnapshot") -> "RunSnapshot":
    if not run.reward_note:
        return run
    names = [column[len("rewards/") :] for column in run.reward_function_columns]
    defaults = {name: run.reward_weights.get(name, 1.0) for name in names}
    typed = st.text_input(
        "Reward weights",
        key=f"{StateKey.REWARD_WEIGHTS}:{run.run_dir}",
        placeholder=", ".join(f"{name}={weight:g}" for name, weight in defaults.items()),
        help="The reward functions' weights of the training run (GRPOConfig's reward_weights), as name=weight pairs: reward becomes their weighted sum.",
    )
    weights, problem = parsed_weights(typed, defaults)
    if problem:
        st.warning(markdown_literal(problem))
    if not weights:
        st.caption(markdown_literal(run.reward_note))
        return run
    note = reward_sum_note(weights, "Reward weights")
    st.caption(markdown_literal(note))
    reward = total_reward(run.samples, weights)
    samples = run.samples.assign(reward=reward, reward_gap=reward - run.samples["ref_reward"])
    return dataclasses.replace(run, samples=samples, version=run.version + (tuple(weights.items()),), reward_note=note)


# Weights typed as "name=weight, ..." for the reward functions of `defaults` (those not named keep their default), and
# what is wrong with the text, if anything (then no weights).
def parsed_weights(text: str, defaults: dict[str, float]) -> tuple[dict[str, float], str | None]:
    weights = {}
    for part in filter(None, (part.strip() for part in text.split(","))):
        name, equals, value = part.rpartition("=")
        name = name.strip()
        try:
            weight = float(value)
        except ValueError:
            weight = math.nan
        if not equals or name not in defaults or not math.isfinite(weight):
            return {}, f"Reward weights: {part!r} is not name=weight for a reward function of this run ({', '.join(defaults)})"
        weights[name] = weight
    return (defaults | weights if weights else {}), None


# How much of the run loaded, and every line or entry that did not, with its reason. A fragment: opening the report
# draws its tables, and only them.
@st.fragment
def draw_load_report(run: "RunSnapshot", history: "TrainingHistory"):
    report = run.report
    problems = pd.concat([frame for frame in (run.problems, history.problems) if len(frame)] or [run.problems], ignore_index=True)
    history_skipped = int((history.problems["kind"] == "skipped").sum())
    skipped = int(report["bad lines"].sum()) + history_skipped
    messages = []
    if not report.empty:
        incomplete = int(report["incomplete last line"].sum())
        message = (
            f"Loaded {len(run.samples)} sample(s) of {run.samples['step'].nunique()} step(s) from "
            f"{len(report)} file(s){f' ({markdown_literal(run.format)})' if run.format else ''}: {int(report['bad lines'].sum())} bad line(s) skipped"
        )
        if incomplete:
            message += f", {incomplete} file(s) end in an incomplete line (still being written?)"
        replaced = int(report["replaced by a newer launch"].sum())
        if replaced:
            message += f"; {replaced} line(s) of steps a resumed launch logged again left out (older launch)"
        if run.downsampled:
            message += f"; at most {run.max_samples} samples per step shown (Max Samples Each Step)"
        if run.image_problems:
            message += f"; {run.image_problems} image(s) cannot be shown"
        messages.append(message)
    if history.sources or len(history.problems):
        messages.append(
            f"training history from {', '.join(markdown_literal(name) for name in history.sources) or 'no readable file'}: "
            f"{len(history.train)} train and {len(history.eval)} eval step(s), {history_skipped} entr(ies) or file(s) skipped"
        )
    message = "; ".join(messages)
    if len(problems):
        message += f"; {len(problems)} issue(s) listed in the load report"
    (st.warning if skipped or run.image_problems else st.caption)(message[:1].upper() + message[1:] + ".")
    # A fixed label: Streamlit would close an expander whose label changed (a live run's counts do).
    details = st.expander("Load report", on_change="rerun", key=StateKey.LOAD_REPORT_DETAILS)
    if details.open:
        if not report.empty:
            details.dataframe(report, hide_index=True, width="stretch")
        if len(problems):
            details.dataframe(problems, hide_index=True, width="stretch")


# Tabs of per-step curves: mean over the step's samples with a std band, one line per run compared. A fragment:
# choosing the reward series or a tab redraws only the curves, and only the open tab's chart is drawn.
@st.fragment
def draw_step_curves(runs: list[tuple[str, "RunSnapshot"]], history: "TrainingHistory", settings: "Settings"):
    frames = [run.samples for _, run in runs]
    present = lambda column: any(column in frame and frame[column].notna().any() for frame in frames)  # noqa: E731
    tab_names = ["Step-Reward", "Step-KL", "Step-RespLen"]
    if present("group_id") or present("truncated"):
        tab_names.append("Step-Groups")
    if present("avg_entropy"):
        tab_names.append("Step-Entropy")
    field_columns = list(dict.fromkeys(column for _, run in runs for column in run.extra_columns))
    if field_columns:
        tab_names.append("Step-Fields")
    if runs[0][1].facets:
        tab_names.append("Step-Facets")
    tab = dict(zip(tab_names, st.tabs(tab_names, on_change="rerun", key=StateKey.CURVE_TABS)))
    open_tab = next(name for name, container in tab.items() if container.open)
    curve = dict(
        versions=tuple(run.version for _, run in runs),
        variance_scale=settings.variance_scale,
        zero_shift=settings.zero_shift,
        smoothing=settings.smoothing,
        _runs=[(name, run.samples) for name, run in runs],
    )
    with tab[open_tab]:
        if open_tab == "Step-Reward":
            function_columns = list(dict.fromkeys(column for _, run in runs for column in run.reward_function_columns))
            options = [name for name in REWARD_SERIES + function_columns if present(name)]
            key = StateKey.REWARD_SERIES + ":" + "|".join(options)  # a run with other series starts from the default
            # GRPO: each reward function beside the total, to see one traded for another.
            default = [n for n in options if n in REWARD_SERIES][:2] + [n for n in options if n in function_columns]
            remembered_choice(key, options, default or options[:1])
            chosen = st.multiselect("Reward series", options, key=key, format_func=one_line)
            draw_chart(st, cached_step_curve(chosen, "👾 Rewards Logging (Step level)", "reward", **curve))
        elif open_tab == "Step-Groups":
            draw_chart(st, cached_fraction_chart(curve["versions"], settings.smoothing, curve["_runs"]))
            st.caption(
                "zero-signal groups: prompts whose completions all got the same reward, so their "
                "advantages are 0 and they teach nothing. truncated: completions cut at the length limit."
            )
        elif open_tab == "Step-KL":
            draw_kl_curve(settings, curve, runs, history)
        elif open_tab == "Step-Fields":
            remembered_choice(StateKey.FIELD_SERIES, field_columns, field_columns[:3])
            chosen = st.multiselect("Fields", field_columns, key=StateKey.FIELD_SERIES, format_func=one_line, help="Numbers of the lines' keys outside the format (booleans as 0/1), e.g. log_extra columns or a reward's extras.")
            draw_chart(st, cached_step_curve(chosen, "👾 Other fields of the lines (Step level)", "value", **curve))
        elif open_tab == "Step-Facets":
            draw_facet_curve(runs[0][1], curve)
        else:
            column, title, unit, missing = {
                "Step-RespLen": (
                    "response_tokens_len",
                    "👾 Response Length Logging (tokens, Step level)",
                    "tokens",
                    "No token counts: the run has neither `response_tokens` nor `logprobs`.",
                ),
                "Step-Entropy": ("avg_entropy", "👾 Token Entropy (Step level)", "nats per token", None),
            }[open_tab]
            if present(column):
                draw_chart(st, cached_step_curve([column], title, unit, **curve))
            else:
                st.info(missing)


# A number per step for each value of a facet (a short text field such as data_source), from the shown run: e.g. the
# reward of each data source over training, with each value's sample count and mean below.
def draw_facet_curve(run: "RunSnapshot", curve: dict):
    facet_column, series_column = st.columns(2)
    fit_state(StateKey.FACET, run.facets)
    facet = facet_column.selectbox("Facet", run.facets, key=StateKey.FACET, format_func=filter_label)
    numbers = [column for column in ["reward", *run.reward_function_columns, "advantage", "response_tokens_len", "avg_entropy", "avg_log_ratio", *run.extra_columns] if run.samples[column].notna().any()]
    if not numbers:
        st.info("No number to draw per value: the loaded samples have no reward or other number.")
        return
    fit_state(StateKey.FACET_SERIES, numbers)
    series = series_column.selectbox("Series", numbers, key=StateKey.FACET_SERIES, format_func=one_line)
    values = run.samples[facet].dropna().unique().tolist()
    by_value = [(f"{facet.removeprefix(TEXT_PREFIX)} = {value}", run.samples[run.samples[facet] == value]) for value in sorted(values)]
    draw_chart(st, cached_step_curve([series], f"👾 {series} per {facet.removeprefix(TEXT_PREFIX)} (Step level)", series, **(curve | {"versions": (curve["versions"][0], facet), "_runs": by_value})))
    st.dataframe(facet_table(run.samples, facet, series), hide_index=True, width="stretch")


# Step-KL names what it plots: with Use LogP as KL (the original's default) the mean log ratio, which is no KL and
# ignores the estimator; otherwise the chosen estimator's mean. One token whose probability the policy raised a lot
# makes a step's mean spike (exp(r) - 1 - r grows exponentially), so a median and a log scale are offered.
def draw_kl_curve(settings: "Settings", curve: dict, runs: list[tuple[str, "RunSnapshot"]], history: "TrainingHistory"):
    if settings.use_logp_as_kl:
        column, name = "avg_log_ratio", "log_ratio (logp - ref_logp)"
        title = "👾 KL Logging (Step level): mean log ratio, logp - ref_logp (Use LogP as KL)"
        note = (
            "Use LogP as KL is on (the original's default): this is the mean of logp - ref_logp, which is no KL "
            "estimator and can be negative. Turn it off under ⚙️ show details setting to plot the KL estimator chosen there."
        )
    else:
        estimator = settings.kl_estimator
        column, name = f"avg_kl_{estimator}", f"kl ({estimator})"
        title = f"👾 KL Logging (Step level): mean KL per token, estimator {estimator}"
        note = f"{name} = {KL_ESTIMATORS[estimator]}, with r = logp - ref_logp per token, averaged over each response."
    if not any(samples[column].notna().any() for _, samples in curve["_runs"]):
        st.info("No KL: the run has no `logprobs` with `ref_logprobs`.")
        return
    statistic_column, scale_column = st.columns([3, 1])
    remembered_choice(StateKey.KL_STATISTIC, KL_STATISTICS, KL_STATISTICS[0])
    statistic = statistic_column.radio(
        "Per step", KL_STATISTICS, key=StateKey.KL_STATISTIC, horizontal=True,
        help="The median and its 25-75 % band are not moved by a few samples with a huge KL; the mean is what TRL logs.",
    )
    remembered_choice(StateKey.KL_LOG_SCALE, [False, True], False)
    log_scale = scale_column.toggle("Log scale", key=StateKey.KL_LOG_SCALE, help="A symmetric log scale: spikes and small values on one chart.")
    median = statistic == KL_STATISTICS[1]
    as_trl = not settings.use_logp_as_kl and settings.kl_estimator == "k3"
    lines = trl_kl_lines(runs, history) if as_trl else ()
    draw_chart(st, cached_step_curve([column], title, "nats per token", names={column: name}, median=median, log_scale=log_scale, lines=lines, **curve))
    if lines:
        note += (
            " Dashed: TRL's kl as it logs it, recomputed from the lines (each loss pass's token mean over all ranks, "
            "averaged over the step's passes; steps that reuse a generation have no lines), and as the trainer logged it."
        )
    if as_trl and any(shown.downsampled and shown.samples["micro_batch"].notna().any() for _, shown in runs):
        note += " TRL's kl is recomputed only for runs loaded whole: raise Max Samples Each Step to see it."
    st.caption(note)


# The dashed lines of Step-KL with k3: TRL's kl recomputed from each run's lines (where they say their loss pass and
# the run is loaded whole), and the trainer's own logged kl of the shown run. Hashable, for the chart's cache.
def trl_kl_lines(runs: list[tuple[str, "RunSnapshot"]], history: "TrainingHistory") -> tuple:
    lines = []
    for position, (name, run) in enumerate(runs):
        prefix = f"{name} · " if len(runs) > 1 else ""
        if not run.downsampled and run.samples["micro_batch"].notna().any():
            recomputed = trl_kl_by_step(run.samples, pooled_ranks=trl_pools_kl((run.meta or {}).get("trl_version")))
            lines.append((f"{prefix}TRL kl from the lines", tuple(recomputed.index.tolist()), tuple(recomputed.tolist())))
        if position == 0 and "kl" in history.train and history.train["kl"].notna().any():
            logged = history.train[["step", "kl"]].dropna()
            lines.append((f"{prefix}kl (trainer log)", tuple(logged["step"].tolist()), tuple(logged["kl"].tolist())))
    return tuple(lines)


# The trainer's own numbers on the step axis, each chosen metric a chart (a tab) with train and eval lines per run and
# the best checkpoint marked; the run's summary; CSV downloads of the histories and of the step curves' numbers (made when
# clicked). A fragment: choosing metrics redraws only this area.
@st.fragment
def draw_training_metrics(run: "RunSnapshot", compared: list["RunSnapshot"], all_histories: list["TrainingHistory"], settings: "Settings"):
    history = all_histories[0]  # the shown run's
    named = [(run_label(shown.run_dir), shown_history) for shown, shown_history in zip([run, *compared], all_histories)]
    histories = [(name, shown) for name, shown in named if not shown.empty]
    st.subheader("📈 Training metrics")
    if histories:
        options = list(dict.fromkeys(metric_name(column) for _, shown in histories for frame in (shown.train, shown.eval) for column in frame.columns[1:]))
        key = StateKey.METRIC_SERIES  # one choice, kept while new metrics arrive (live) and across runs that log it
        remembered_choice(key, options, [name for name in DEFAULT_METRICS if name in options] or options[:2])
        chosen = st.multiselect("Training metrics", options, key=key, format_func=one_line, help="Numbers the trainer logged; eval lines dashed, the best checkpoint a dashed rule.")
        versions = tuple((shown.run_dir, shown_history.signature) for shown, shown_history in zip([run, *compared], all_histories))
        if chosen:  # a tab per metric, only the open one drawn: each chart of several runs costs the browser a redraw
            tabs = st.tabs([markdown_literal(name) for name in chosen], on_change="rerun", key=StateKey.METRIC_TABS + ":" + "|".join(chosen))
            name, tab = next((name, tab) for name, tab in zip(chosen, tabs) if tab.open)
            draw_chart(tab, cached_metric_chart(name, versions, settings.smoothing, settings.zero_shift, histories))
        details = st.expander("Training summary", on_change="rerun", key=StateKey.TRAINING_SUMMARY)
        if details.open:
            with details:
                for name, shown in histories:
                    draw_history_summary(name, shown)
    else:
        st.caption(f"No training history in this folder: the logger's `{METRICS_FILES}`, `{TRAINING_LOG}` or `{TRAINER_STATE}` (in it or a `checkpoint-*` folder) would be shown here.")
    name = run_label(run.run_dir)
    downloads = st.columns(3)
    for column, label, frame, file_name in (
        (downloads[0], "Train history (CSV)", history.train, f"{name}_train_history.csv"),
        (downloads[1], "Eval history (CSV)", history.eval, f"{name}_eval_history.csv"),
    ):
        column.download_button(label, functools.partial(frame.to_csv, index=False), file_name=file_name, mime="text/csv", on_click="ignore", disabled=frame.empty)
    runs = [(run_label(shown.run_dir), shown.samples) for shown in [run, *compared] if not shown.samples.empty]
    downloads[2].download_button(
        "Per-step statistics (CSV)", lambda: step_statistics_table(runs).to_csv(index=False), file_name=f"{name}_step_statistics.csv",
        mime="text/csv", on_click="ignore", disabled=not runs, help="The numbers behind the step curves, of every run compared.",
    )


# A run's history as seed 004's summary prints it: configuration, entries, final values, best checkpoint.
def draw_history_summary(name: str, history: "TrainingHistory"):
    st.markdown(f"**{markdown_literal(name)}** · from {', '.join(markdown_literal(source) for source in history.sources)}")
    config, train, evaluation = st.columns(3)
    config.caption("Configuration")
    config.dataframe(pd.DataFrame({"key": list(history.config), "value": [json.dumps(value) for value in history.config.values()]}), hide_index=True, height=250)
    for column, title, frame in ((train, "Training history", history.train), (evaluation, "Validation history", history.eval)):
        if frame.empty:
            column.caption(f"{title}: no entries")
            continue
        column.caption(f"{title}: {len(frame)} entries, final step {int(frame['step'].iloc[-1])}")
        final = frame.drop(columns="step").ffill().iloc[-1].dropna()
        column.dataframe(pd.DataFrame({"final": final.index, "value": final.to_numpy()}), hide_index=True, height=250)
    best = history.best
    if best:
        metrics = ", ".join(f"{markdown_literal(key)} = {value:.6g}" for key, value in best["metrics"].items())
        step = "—" if best["step"] is None else best["step"]
        st.caption(f"Best checkpoint: step {step}" + (f", epoch {best['epoch']:g}" if "epoch" in best else "") + (f", {metrics}" if metrics else "") + f", path {markdown_literal(best['path'] or '—')}")


# Search the texts of every loaded sample of the run, filter and sort by its numbers and fields, download what is found.
# A fragment: typing and filtering redraw only this area; clicking a result shows that sample in the step area below.
@st.fragment
def draw_search(run: "RunSnapshot", settings: "Settings"):
    st.subheader("🔎 Find samples")
    query_column, place_column, option_column = st.columns([4, 1.3, 1.3], vertical_alignment="bottom")
    query = query_column.text_input(
        "Search prompt and response text", key=StateKey.SEARCH_QUERY, placeholder="a phrase, or a regular expression",
        help="Every loaded sample of every step. Case-insensitive unless Match case; a regular expression in RE2 syntax.",
    )
    places = place_column.selectbox("Search in", list(SEARCH_PLACES), key=StateKey.SEARCH_PLACES)
    regex = option_column.toggle("Regular expression", key=StateKey.SEARCH_REGEX, help=f"RE2 syntax (no look-around or backreferences): it runs in linear time; a search stops after {SEARCH_SECONDS:.0f} s.")
    match_case = option_column.toggle("Match case", key=StateKey.SEARCH_CASE)
    pattern = None
    if query:
        try:
            pattern = search_pattern(query, regex, match_case)
        except ValueError as error:  # under the row: inside the box's column it would push the row's other controls down
            st.error(f"Not a valid regular expression: {markdown_literal(error)}.")
    sample_filter, sort_by, highest, top = draw_search_filters(run, settings)
    if query and pattern is None:  # the filters alone would be taken for the search's results
        return
    if pattern is None and sample_filter == SampleFilter() and sort_by == "step":
        st.caption("Type text to find, or choose a filter or a column to sort by (e.g. the top 20 by avg_kl): every loaded sample of the run is looked at.")
        return
    mask = filter_mask(run.samples, sample_filter)
    found = None
    if pattern is not None:
        found = cached_search(run.version, query, regex, match_case, places, run)
        mask &= found.place > 0
    results = run.samples[mask]
    ordered = results.sort_values(sort_by, ascending=not highest, na_position="last", kind="stable").head(top)
    draw_search_results(run, results, ordered, found, sort_by, sample_filter)


# The search's filters and order: a widget for each filter chosen (a range of a number, values of a facet).
def draw_search_filters(run: "RunSnapshot", settings: "Settings") -> tuple["SampleFilter", str, bool, int]:
    samples, numbers = run.samples, filter_columns(run, settings.kl_estimator)
    flags = (["truncated"] if samples["truncated"].notna().any() else []) + (["zero-signal group"] if samples["group_id"].notna().any() else [])
    options = (["steps"] if len(run.steps) > 1 else []) + numbers + run.facets + flags
    filter_column, sort_column, order_column, top_column = st.columns([4, 1.5, 1.3, 1])
    fit_state(StateKey.SEARCH_FILTERS, options)
    chosen = filter_column.multiselect(
        "Filter by", options, key=StateKey.SEARCH_FILTERS, format_func=filter_label,
        help="Each filter chosen gets a control below; a sample must pass them all. A range leaves out samples without the number.",
    )
    steps, ranges, facets = (), [], []
    for name in chosen:
        key, label = f"{StateKey.SEARCH_FILTER}:{run.run_dir}:{name}", markdown_literal(filter_label(name))  # names come from the data
        if name == "steps":
            fit_range(key, run.steps[0], run.steps[-1], run.steps)
            steps = st.select_slider("Steps", run.steps, (run.steps[0], run.steps[-1]), key=key)
        elif name in numbers:
            values = finite(samples[name])
            low, high = (float(values.min()), float(values.max())) if values.size else (np.nan, np.nan)
            if not low < high:
                st.caption(f"{label}: " + (f"every finite value is {low:.6g}" if values.size else "no finite value") + ", nothing to filter.")
                continue
            fit_range(key, low, high)
            step = (high - low) / 200
            ranges.append((name, *st.slider(label, low, high, (low, high), step=step if 0 < step < np.inf else None, format="%.4g", key=key)))
        elif name in run.facets:
            values = sorted(samples[name].dropna().unique().tolist())
            fit_state(key, values)
            picked = st.multiselect(label, values, key=key, placeholder="every value", format_func=one_line)
            if picked:
                facets.append((name, tuple(picked)))
    sample_filter = SampleFilter(tuple(steps), tuple(ranges), tuple(facets), "truncated" in chosen, "zero-signal group" in chosen)
    fit_state(StateKey.SEARCH_SORT, ["step", *numbers])
    sort_by = sort_column.selectbox("Sort by", ["step", *numbers], key=StateKey.SEARCH_SORT, format_func=filter_label)
    highest = order_column.radio("Order", ["highest first", "lowest first"], key=StateKey.SEARCH_ORDER) == "highest first"
    top = top_column.number_input("Top N", 1, EXPORT_ROWS, RESULTS_SHOWN, key=StateKey.SEARCH_TOP, help=f"How many of the samples found, in this order, are the results (at most {EXPORT_ROWS:,}): the table shows the first {RESULTS_SHOWN:,}, the downloads hold them all.")
    return sample_filter, sort_by, highest, int(top)


# Keep a widget's kept value among what it offers now (another run loaded, a live run's new values): Streamlit refuses
# a value outside its options.
def fit_state(key: str, options: list):
    value = st.session_state.get(key)
    if isinstance(value, list) and any(item not in options for item in value):
        st.session_state[key] = [item for item in value if item in options]
    elif value is not None and not isinstance(value, list) and value not in options:
        del st.session_state[key]


# A range slider's value as a run grows: an end left at the old bound follows the new one (a live run's new steps and
# values are in), an end the user moved stays, within the new bounds (and on one of the options, if any).
def fit_range(key: str, low, high, options: list | None = None):
    value, old = st.session_state.get(key), st.session_state.get(f"{key}:bounds")
    st.session_state[f"{key}:bounds"] = (low, high)
    if value is None:
        return
    ends = [low if old and value[0] == old[0] else value[0], high if old and value[1] == old[1] else value[1]]
    ends = [min(max(end, low), high) for end in ends]
    if options is not None:
        ends = [min(options, key=lambda option: abs(option - end)) for end in ends]
    if tuple(ends) != tuple(value):
        st.session_state[key] = tuple(ends)


# A filter as the search's controls name it: the two flags in words, columns by their names (on one line).
def filter_label(column: str) -> str:
    return {"truncated": "truncated only", "zero-signal group": "in a zero-signal group"}.get(column) or one_line(column)


# How many samples were found and where, a chart of them per step, the results (a click shows one below) and downloads.
def draw_search_results(run: "RunSnapshot", results: pd.DataFrame, ordered: pd.DataFrame, found: "SearchResult | None", sort_by: str, sample_filter: "SampleFilter"):
    samples = run.samples
    message = f"**{len(results):,}** of {len(samples):,} loaded samples found, at {results['step'].nunique():,} of {len(run.steps):,} steps"
    if len(ordered) < len(results):
        message += f"; the results are the top {len(ordered):,} by {markdown_literal(sort_by)}"
    if found is not None:
        message += f" (searched in {found.seconds:.2f} s)"
    (st.markdown if found is None or found.searched == len(samples) else st.warning)(message + "." + (
        "" if found is None or found.searched == len(samples) else
        f" The search stopped after {SEARCH_SECONDS:.0f} s, at step {samples['step'].iat[found.searched]}: later steps were not searched."
    ))
    if results.empty:
        return
    draw_chart(st, matches_per_step_chart(results.groupby("step").size().reindex(run.steps, fill_value=0)))
    shown = ordered.head(RESULTS_SHOWN)
    columns = list(dict.fromkeys(["step", "sample", "reward", sort_by] + [column for column, *_ in sample_filter.ranges] + [column for column, _ in sample_filter.facets]))
    table = shown[columns].rename(columns=filter_label)
    if found is not None:
        table["found in"] = np.where(found.place[shown.index] == 1, "prompt", "response")
        table["match"] = match_snippets(run_texts(run.run_dir), shown, found.place[shown.index], found.start[shown.index], found.end[shown.index])
    table["file"], table["line"] = [Path(path).name for path in shown["path"]], shown["line"].to_numpy()
    key = f"{StateKey.SEARCH_RESULTS}:{hashlib.sha1(repr((run.version, shown.index.tolist())).encode()).hexdigest()}"
    st.dataframe(
        table, width="stretch", height=min(400, 38 + 35 * len(table)), hide_index=True, key=key,
        on_select=lambda: pick_search_result(key, shown["step"].tolist(), shown["sample"].tolist()), selection_mode="single-row",
        column_config={
            "sample": st.column_config.NumberColumn(help="Sample index in its step's batch"),
            "match": st.column_config.TextColumn(width="large", help="The text around the first match, which is between ⟦ ⟧"),
        },
    )
    st.caption(
        (f"The first {RESULTS_SHOWN:,} results are listed. " if len(shown) < len(ordered) else "")
        + "Click a row to show that sample in Each Step Response below. The downloads hold "
        + f"the {len(ordered):,} results" + (f" of {len(results):,} found: narrow the filter, or raise Top N (at most {EXPORT_ROWS:,}), to download others." if len(ordered) < len(results) else ".")
    )
    draw_downloads(ordered, "Results", f"{run_label(run.run_dir)}_search")
    if st.session_state.pop(StateKey.SEARCH_PICKED, False):
        st.rerun(scope="app")


# Clicking a result moves the step selector and the sample in view to it.
def pick_search_result(key: str, steps: list, samples: list):
    rows = st.session_state[key].selection.rows
    if rows:
        show_step(int(steps[rows[0]]))
        open_sample(int(samples[rows[0]]))
        st.session_state[StateKey.SEARCH_PICKED] = True


# Downloads of some lines: CSV and Parquet of their numbers and texts, JSONL of the lines as they are; each made
# when clicked. Beyond EXPORT_ROWS lines, or EXPORT_BYTES of JSONL, the page asks to narrow them instead.
def draw_downloads(rows: pd.DataFrame, what: str, name: str):
    too_many = len(rows) > EXPORT_ROWS
    too_large = too_many or int(rows["length"].sum()) + len(rows) > EXPORT_BYTES
    csv_column, jsonl_column, parquet_column, note_column = st.columns([1, 1, 1, 3])
    csv_column.download_button(f"{what} (CSV)", functools.partial(export_csv, rows), file_name=f"{name}.csv", mime="text/csv", on_click="ignore", disabled=too_many, icon=":material/download:", help="Each sample's numbers and fields, then its prompt and response")
    jsonl_column.download_button(f"{what} (JSONL)", functools.partial(export_jsonl, rows), file_name=f"{name}.jsonl", mime="application/jsonl", on_click="ignore", disabled=too_large, icon=":material/download:", help="The samples' lines as they are in the rank files, byte for byte")
    parquet_column.download_button(f"{what} (Parquet)", functools.partial(export_parquet, rows), file_name=f"{name}.parquet", mime="application/vnd.apache.parquet", on_click="ignore", disabled=too_many, icon=":material/download:", help="The CSV's table, typed")
    if too_large:
        note_column.caption(f"{len(rows):,} lines, {rows['length'].sum() / 2**20:,.0f} MB: more than a download holds ({EXPORT_ROWS:,} lines, {EXPORT_BYTES >> 20} MB of JSONL); narrow the filter.")


# The step in view: a slider over evenly spaced steps, a selectbox otherwise; kept across live refreshes, or moved to
# each new last step when following a live run. New steps the user has not looked at are announced with a way there.
def draw_step_selector(run: "RunSnapshot", follow_latest: bool) -> int:
    st.subheader("⚡️ Each Step Response")
    steps = run.steps
    previous = st.session_state.get(StateKey.SELECTED_STEP, steps[0])
    if previous not in steps:
        previous = min(steps, key=lambda s: abs(s - previous))
    # Following: to the latest step when following starts and whenever a new last step arrives.
    if follow_latest and (not st.session_state.get(StateKey.FOLLOWING) or steps[-1] != st.session_state.get(StateKey.LAST_STEP_SEEN)):
        show_step(steps[-1])
        previous = steps[-1]
    st.session_state[StateKey.LAST_STEP_SEEN], st.session_state[StateKey.FOLLOWING] = steps[-1], follow_latest
    label = f"Step Index({len(steps)} total steps)"
    if len(steps) == 1:
        step = steps[0]
    else:
        gaps = np.diff(steps)
        if (gaps == gaps[0]).all() and max(abs(steps[0]), abs(steps[-1])) < 2**53:  # the slider holds JS numbers
            step = st.slider(label, steps[0], steps[-1], previous, step=int(gaps[0]), key=StateKey.STEP_SLIDER)
        else:
            step = st.selectbox(label, steps, index=steps.index(previous), key=StateKey.STEP_SELECTBOX)
    step = int(step)
    if step != st.session_state.get(StateKey.SELECTED_STEP) or StateKey.LAST_STEP_WHEN_CHOSEN not in st.session_state:
        st.session_state[StateKey.LAST_STEP_WHEN_CHOSEN] = steps[-1]
    st.session_state[StateKey.SELECTED_STEP] = step
    newer = [s for s in steps if s > st.session_state[StateKey.LAST_STEP_WHEN_CHOSEN]]
    if newer and step != steps[-1]:
        message, button = st.columns([4, 1], vertical_alignment="center")
        message.info(f"{len(newer)} new step(s) since you chose step {step}; the latest is {steps[-1]}.")
        button.button("Show the latest step", on_click=show_step, args=(steps[-1],))
    return step


# Move the step selector (before it is drawn): its widgets take the step as their value (dropped, Streamlit would keep
# the browser's), and the step counts as chosen now, so only steps after the run's last are announced as new.
def show_step(step: int):
    st.session_state[StateKey.SELECTED_STEP] = step
    st.session_state.pop(StateKey.LAST_STEP_WHEN_CHOSEN, None)
    for key in (StateKey.STEP_SLIDER, StateKey.STEP_SELECTBOX):
        if key in st.session_state:
            st.session_state[key] = step


# Three charts of the step's batch: reward vs ref per sample, their gap, and the distribution.
def draw_batch_charts(batch: "StepBatch"):
    reward, gap, distribution = cached_batch_charts(batch.key, batch.table)
    left, middle, right = st.columns(3)
    draw_chart(left, reward)
    if gap is not None:
        draw_chart(middle, gap)
    else:
        middle.info("No `ref_reward` in this run: no reward gap.")
    draw_chart(right, distribution)


# The step's tables as tabs, only the open one drawn, right above the sample they pick: the batch (a row per sample)
# and, for GRPO, its groups (a row per prompt); then downloads of the step's lines.
def draw_step_tables(batch: "StepBatch", settings: "Settings", run_dir: str, step: int):
    names = (["Batch samples"] if settings.show_batch_samples else []) + (["Groups"] if batch.table["group"].notna().any() else [])
    if not names:
        return
    view = remembered_choice(StateKey.STEP_TABLE, names, names[0])
    tabs = st.tabs(names, key=StateKey.STEP_TABLE, on_change="rerun")
    with tabs[names.index(view)]:
        if view == "Batch samples":
            draw_batch_table(batch, settings)
        else:
            draw_groups(batch, settings)
    draw_downloads(batch.table, f"Step {step}", f"{run_label(run_dir)}_step_{step}")


# The batch table, sortable by every column; clicking a row shows that sample right below.
def draw_batch_table(batch: "StepBatch", settings: "Settings"):
    table = cached_table_view(batch.key, batch.table, settings.kl_estimator, settings.pad_token, settings.system_prompt_end)
    if any(batch.table["images"]):  # a thumbnail of each prompt's first image, right of the sample index
        thumbnails = [thumbnail_url(path, images) for path, images in zip(batch.table["path"], batch.table["images"])]
        table = table.assign(image=thumbnails)[["sample", "image", *table.columns[1:]]]
    st.container(key=StateKey.BATCH_TABLE).dataframe(
        table,
        width="stretch",
        height=360,
        hide_index=True,
        on_select=lambda: pick_sample_from_table(f"{StateKey.BATCH_TABLE}:{batch.key}"),
        selection_mode="single-row",
        key=f"{StateKey.BATCH_TABLE}:{batch.key}",  # a selection of another step's rows would stay highlighted
        column_config={
            "sample": st.column_config.NumberColumn(help="Sample index in current step batch", pinned=True),
            "image": st.column_config.ImageColumn(help="The prompt's first image; click the row for all of them beside the prompt below", width="small"),
            "group": st.column_config.NumberColumn(help="The sample's prompt group in this step (see Groups); group_id, at the right, is the id as logged"),
            "prompt": st.column_config.TextColumn(width="medium"),
            "response": st.column_config.TextColumn(width="large"),
        },
    )


# A line's images under its prompt, re-encoded on the server, each in a box `width` wide and sent whole, so that its
# fullscreen button shows it large; those that cannot be shown are one note saying why. The group view (details off)
# shows the images alone: the same bytes, so the same media URL, fetched and decoded once by the browser.
def draw_images(row: pd.Series, width: int, details: bool = True):
    notes, unshown = [], max(len(row["images"]) - IMAGES_SHOWN, 0)
    if unshown:
        notes.append(f"the {unshown} after the first {IMAGES_SHOWN}: too many to show")
    with st.container(horizontal=True, gap="small"):
        for number, reference in enumerate(row["images"][:IMAGES_SHOWN], 1):
            image = page_image(row["path"], reference, SHOWN_IMAGE_SIDE)
            if isinstance(image, str):
                notes.append(f"image {number}: {markdown_literal(shorten(reference['path'] or '', 80))}: {markdown_literal(image)}")
                unshown += 1
                continue
            size = f" · {reference['width']} × {reference['height']}" if reference["width"] and reference["height"] else ""
            st.container(width=width).image(image[0], caption=f"image {number}{size}" if details else None, width="content")
    if notes and details:
        st.caption(f"🖼️ {unshown} image(s) not shown:  \n" + "  \n".join(notes))


# The batch table's thumbnail of a line's first image, as a data URL of the re-encoded image (None: none shown).
def thumbnail_url(path: str, references: list[dict]) -> str | None:
    image = page_image(path, references[0], THUMBNAIL_SIDE) if references else None
    return None if image is None or isinstance(image, str) else f"data:{image[1]};base64,{base64.b64encode(image[0]).decode()}"


# GRPO groups of the step: which prompts gave every completion the same reward. Clicking a group shows its first
# completion below, with the group's other completions under its tokens.
def draw_groups(batch: "StepBatch", settings: "Settings"):
    groups = cached_group_table(batch.key, batch.table, settings.pad_token, settings.system_prompt_end)
    zero = int(groups["zero signal"].sum())
    st.caption(
        f"{len(groups)} prompt group(s), {zero} with no learning signal (every completion got the same reward, so every "
        "advantage is 0). Sort by reward spread; click a group to show its first completion below."
    )
    st.dataframe(
        groups,
        width="stretch",
        height=min(360, 38 + 35 * len(groups)),
        hide_index=True,
        on_select=lambda: pick_group_from_table(f"{StateKey.GROUP_TABLE}:{batch.key}", groups["samples"].tolist()),
        selection_mode="single-row",
        key=f"{StateKey.GROUP_TABLE}:{batch.key}",
        column_config={
            "group": st.column_config.NumberColumn(help="The group's number in this step (the batch table's group column)", pinned=True),
            "prompt": st.column_config.TextColumn(width="medium"),
            "samples": st.column_config.ListColumn(help="Sample indices of the group's completions, in batch order"),
            "rewards": st.column_config.ListColumn(help="The completions' rewards (4 significant digits), in the order of samples"),
            "group_id": st.column_config.TextColumn(help="The group id as logged"),
        },
    )


# The other completions of the sample's prompt, side by side, each a click away from the samples pair above.
def draw_sample_group(batch: "StepBatch", sample: int, settings: "Settings"):
    table = batch.table
    group = table["group"].iloc[sample]
    if pd.isna(group):
        return
    members = table[table["group"] == group]
    st.markdown(f"**Group {int(group)} of this step**: {len(members)} completion(s) of the prompt of sample #{sample}.")
    draw_images(table.iloc[sample], width=96, details=False)  # the samples pair above has the captions and notes
    columns = st.columns(min(len(members), 4))
    function_columns = [c for c in members.columns if c.startswith("rewards/")]
    for position, (index, member) in enumerate(members.iterrows()):
        with columns[position % len(columns)]:
            facts = [f"reward {member['reward']:.4g}"]
            facts += [f"{markdown_literal(c[8:])} {member[c]:.4g}" for c in function_columns if pd.notna(member[c])]
            if pd.notna(member["advantage"]):
                facts.append(f"adv {member['advantage']:+.3f}")
            if pd.notna(member["response_tokens_len"]):
                facts.append(f"{member['response_tokens_len']:.0f} tok")
            if index == sample:
                st.markdown(f"**#{index}** (shown above)")
            else:
                st.button(f"#{index}", key=f"open_sample_{index}", on_click=open_sample, args=(int(index),), help="Show this completion in the samples pair")
            st.caption(" · ".join(facts))
            st.text(as_written(clean_text(member["response"], settings.pad_token)))


# The original's samples pair: length metrics, the sample index, then prompt | response | ref | gap.
def draw_samples_pair(run: "RunSnapshot", batch: "StepBatch", step: int, settings: "Settings") -> int:
    table = batch.table
    previous_step = run.previous_step(step)
    lengths, ref_lengths = run.step_mean("response_len"), run.step_mean("ref_response_len")
    metric_columns = st.columns([1, 1, 3])
    for column, label, by_step in (
        (metric_columns[0], "Response Average Length", lengths),
        (metric_columns[1], "Ref Response Average Length", ref_lengths),
    ):
        value = by_step.get(step, np.nan)
        if np.isnan(value):
            column.metric(label, "—")
            continue
        delta = value - by_step[previous_step] if previous_step is not None and previous_step in by_step else 0.0
        column.metric(label, f"{value:.0f} chars", f"{delta:+.0f} chars", help="Mean length in characters.")
    chosen_sample(batch)
    with metric_columns[2]:
        sample = st.number_input("Sample index in current step batch", min_value=0, max_value=len(table) - 1, key=StateKey.SAMPLE_INDEX)
    row = table.iloc[int(sample)]
    prompt_column, response_column, ref_column, gap_column = st.columns([2, 3, 3, 1])
    with prompt_column:
        st.markdown("**Prompt**")
        draw_images(row, width=150)
        st.text(as_written(clean_text(row["prompt"], settings.pad_token, settings.system_prompt_end)))
        if isinstance(row["ground_truth"], str):
            st.caption("ground_truth")
            st.text(as_written(row["ground_truth"]))
    with response_column:
        tools = f" · {row['tool_tokens']:.0f} of {row['response_tokens_len']:.0f} tokens written by a tool" if row["tool_tokens"] > 0 else ""
        st.markdown(f":green[**Response**] · reward {row['reward']:.4g}{tools}")
        st.text(as_written(clean_text(row["response"], settings.pad_token)))
    with ref_column:
        st.markdown(":blue[**Ref Response**]")
        if isinstance(row["ref_response"], str):
            st.text(as_written(clean_text(row["ref_response"], settings.pad_token)))
        else:
            st.info("No `ref_response` in this sample.")
    with gap_column:
        st.markdown(":orange[**Reward Gap**]")
        gap = row["reward_gap"]
        st.markdown(f"## {gap:.4f}" if pd.notna(gap) else "—")
    return int(sample)


NESTED_SHOWN_BYTES = 50_000  # of a nested value's JSON: a larger one is shown cut, as text


# The sample's keys outside the format, nested and long values included; read from its line only while open.
def draw_other_fields(row: pd.Series):
    if not row["extra_keys"] > 0:
        return
    details = st.expander("Other fields of this line", on_change="rerun", key=StateKey.OTHER_FIELDS)
    if not details.open:
        return
    try:
        fields = load_other_fields(row["index_id"], row["path"], int(row["offset"]), int(row["length"]))
    except OSError as error:
        details.warning(read_back_problem(row["path"], row["line"], error))
        return
    short = {name: value for name, value in fields.items() if not isinstance(value, (dict, list)) and len(str(value)) <= TEXT_FIELD_CHARACTERS}
    if short:
        values = [valid_text(json.dumps(value, ensure_ascii=False)) for value in short.values()]
        details.dataframe(pd.DataFrame({"field": [valid_text(name) for name in short], "value": values}), hide_index=True)
    for name, value in fields.items():
        if name in short:
            continue
        details.caption(markdown_literal(name))
        text = valid_text(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
        if isinstance(value, str) or len(text) > NESTED_SHOWN_BYTES:
            details.text(as_written(shorten(text, NESTED_SHOWN_BYTES)))
        else:
            details.json(text, expanded=2)


PROMPT_HISTORY_LINES = 2000  # read back and sent to the page at most: the latest steps'


# "This prompt over training": every loaded line of the shown and compared runs whose prompt has the same text as the
# sample in view's, its rewards per step (a curve) and its responses (a table). Read back only while open.
def draw_prompt_history(run: "RunSnapshot", compared: list["RunSnapshot"], row: pd.Series, settings: "Settings"):
    details = st.expander("This prompt over training", on_change="rerun", key=StateKey.PROMPT_HISTORY)
    if not details.open:
        return
    if pd.isna(row["prompt_key"]):
        details.info("This sample has no prompt.")
        return
    rows = pd.concat(
        [shown.samples[shown.samples["prompt_key"] == row["prompt_key"]].assign(run=run_label(shown.run_dir)) for shown in [run, *compared]],
        ignore_index=True,
    )
    left_out = max(len(rows) - PROMPT_HISTORY_LINES, 0)
    rows = rows.sort_values("step", kind="stable").tail(PROMPT_HISTORY_LINES).reset_index(drop=True)
    # Its own cache key: the same lines read for the step view hold no run column.
    batch = load_step_batch("prompt history " + lines_key(rows), rows)
    table = batch.table[batch.table["prompt"] == row["prompt"]]  # the same text, not only the same key
    runs = table["run"].nunique()
    details.caption(
        f"{len(table)} completion(s) of this prompt at {table['step'].nunique()} step(s)"
        + (f" in {runs} run(s)" if compared else "") + (" (of the loaded samples: Max Samples Each Step)" if any(shown.downsampled for shown in [run, *compared]) else "")
        + (f"; the {left_out} earliest line(s) with its key are left out: the latest {PROMPT_HISTORY_LINES} are shown" if left_out else "")
    )
    draw_chart(details, prompt_reward_chart(table))
    shown = table.assign(response=[shorten(clean_text(text, settings.pad_token)) for text in table["response"]])
    columns = (["run"] if compared else []) + ["step", "reward", "advantage", "response"]
    details.dataframe(shown[[column for column in columns if shown[column].notna().any() or column == "response"]], hide_index=True, width="stretch")


# The sample in view, kept inside this step's batch (a table click or the index input set it).
def chosen_sample(batch: "StepBatch") -> int:
    sample = min(max(int(st.session_state.get(StateKey.SAMPLE_INDEX, 0)), 0), len(batch.table) - 1)
    st.session_state[StateKey.SAMPLE_INDEX] = sample
    return sample


# Every token of the chosen response: rows of metrics as a shaded table, a heat map and running text. A fragment
# inside the sample view's: choosing values or a view redraws only the token area.
@st.fragment
def draw_token_area(batch: "StepBatch", sample: int, settings: "Settings"):
    row = batch.table.iloc[sample]
    try:
        tokens = load_sample_tokens(row["index_id"], row["path"], int(row["offset"]), int(row["length"]), int(row["step"]))
    except OSError as error:
        st.warning(read_back_problem(row["path"], row["line"], error))
        return
    except BadLine as error:  # rewritten, or malformed where the first pass does not look (values, token_rewards)
        st.warning(f"{markdown_literal(Path(row['path']).name)} line {row['line']}: no token area, the line cannot be read in full ({markdown_literal(error)}); if the file was rewritten, press Load & View.")
        return
    if tokens is None:
        st.info(
            "No token area: this sample has no `logprobs`. Log `response_tokens` and `logprobs` "
            "(and `ref_logprobs` for KL) to see per-token values."
        )
        return
    rows = token_rows(tokens, settings.kl_estimator, settings.pad_token)
    for note in tokens.notes:
        st.warning(note)
    available = [name for name in TOKEN_ROWS if name in rows.values]
    chosen = st.multiselect(
        "Select show value(s)",
        available,
        default=[name for name in available if name != "advantage"] or available,
        help="; ".join(f"{name}: {TOKEN_ROWS[name]}" for name in available),
    )
    if not chosen or not len(rows.tokens):
        return
    view, tab = draw_token_view_tabs(settings.show_heat_map)
    with tab:
        if view == "Response tokens":
            draw_running_text(rows, chosen)
            return
        labels = [f"{i} - {visible_whitespace(token)}" for i, token in zip(rows.positions.tolist(), rows.tokens)]
        grid = pd.DataFrame({name: rows.values[name] for name in chosen}, index=pd.Index(labels, name="token"))
        if view == "Token table":
            caption = "A row per token; each bar shades the value within its column's range. Click a header to sort, e.g. by kl."
            if rows.positions[-1] >= len(rows.positions):  # a row stands for more than one token
                caption += " A run of one image placeholder token is one row (its values: their mean)."
            if rows.is_tool.any():
                caption += " Tokens a tool wrote (tool ✓) were not sampled by the policy: they have no values."
                grid.insert(0, "tool", rows.is_tool)
            st.caption(caption)
            st.dataframe(grid, width="stretch", height=min(420, 38 + 35 * len(grid)), column_config=shaded_columns(grid))
        else:
            st.caption(
                "Heat map: each row coloured within its own range (red above 0, blue below; a row of one value shows only "
                f"its sign); values on hover, and in the cells up to {VALUE_LABELLED_TOKENS} tokens."
            )
            st.plotly_chart(token_heatmap_figure(grid.T), width="stretch")


# The token views as tabs, only the open one drawn: the three at once cost the browser about twice what one does
# on every step or sample change.
def draw_token_view_tabs(show_heat_map: bool) -> tuple:
    names = [name for name in TOKEN_VIEWS if show_heat_map or name != "Heat map"]
    view = remembered_choice(StateKey.TOKEN_VIEW, names, names[0])
    tabs = st.tabs(names, key=StateKey.TOKEN_VIEW, on_change="rerun")
    return view, tabs[names.index(view)]


# The response as running text, each token coloured by one value, every value on hover.
def draw_running_text(rows: "TokenRows", chosen: list[str]):
    remembered_choice(StateKey.COLOUR_TOKENS_BY, chosen, "kl" if "kl" in chosen else chosen[0])
    metric = st.selectbox(
        "Colour tokens by",
        chosen,
        key=StateKey.COLOUR_TOKENS_BY,
        help="Each token's background shows this value; hover a token for all its values.",
    )
    shown = range(len(rows.tokens))
    if len(shown) > RUNNING_TEXT_TOKENS:  # each token is an element the browser must check and lay out
        windows = [shown[start : start + RUNNING_TEXT_TOKENS] for start in range(0, len(shown), RUNNING_TEXT_TOKENS)]
        remembered_choice(StateKey.TOKENS_SHOWN, windows, windows[0])
        shown = st.select_slider(
            "Tokens shown",
            windows,
            key=StateKey.TOKENS_SHOWN,
            format_func=lambda window: f"{window[0]}–{window[-1]}",
            help=f"The running text shows {RUNNING_TEXT_TOKENS} tokens at a time; the table and the heat map show them all.",
        )
    st.html(running_text_html(rows, metric, shown))


# Shade each metric column by where a value sits in that column's range (bars drawn by the grid: no Styler, no matplotlib).
def shaded_columns(grid: pd.DataFrame) -> dict:
    config = {}
    for name in grid.columns:
        if name == "tool":
            config[name] = st.column_config.CheckboxColumn("tool", help="Written by a tool (tool_mask 0), not sampled by the policy", pinned=True)
            continue
        values = grid[name].to_numpy(dtype=float)
        values = values[np.isfinite(values)]
        low, high = (values.min(), values.max()) if len(values) else (0.0, 1.0)
        config[name] = st.column_config.ProgressColumn(name, help=TOKEN_ROWS[name], format="%.6f", min_value=float(low), max_value=float(high if high > low else low + 1))
    return config


# Every chart on canvas: the browser paints its marks as pixels instead of building an SVG node per bar and point.
def draw_chart(where, spec: dict):
    where.vega_lite_chart(spec={**spec, "usermeta": {"embedOptions": {"renderer": "canvas"}}}, width="stretch")


# The user's choice in a widget that is not drawn in every run (a tab that is closed, a sample without logprobs, a
# heat map switched off), which Streamlit would forget: the widget's value is the user's when it differs from what
# was drawn last, and the choice returns whenever it fits the options again (a list: every member among them).
def remembered_choice(key: str, options: list, fallback):
    value = st.session_state.get(key)
    if value is not None and value != st.session_state.get(f"{key}:drawn"):
        st.session_state[f"{key}:chosen"] = value
    chosen = st.session_state.get(f"{key}:chosen")
    fits = all(item in options for item in chosen) if isinstance(chosen, list) else chosen in options
    value = chosen if chosen is not None and fits else fallback
    st.session_state[key] = st.session_state[f"{key}:drawn"] = value
    return value


# Clicking a batch-table row sets the sample index input below it.
def pick_sample_from_table(key: str):
    rows = st.session_state[key].selection.rows
    if rows:
        open_sample(int(rows[0]))


# Clicking a group row shows the group's first completion (and the group under it).
def pick_group_from_table(key: str, samples_of_rows: list):
    rows = st.session_state[key].selection.rows
    if rows:
        open_sample(int(samples_of_rows[rows[0]][0]))


def open_sample(sample: int):
    st.session_state[StateKey.SAMPLE_INDEX] = sample


# ====================================================================================================================
# Cached loaders: shared by reruns and sessions, each feeding the next (run store -> step batch -> tables and charts).
# ====================================================================================================================


# Object storage is asked again at most this often by what each rerun of the page wants (runs, history, images).
REMOTE_LISTING_SECONDS = 10


# An image of a line (its path relative to the line's file) as the page gets it, or why it cannot be shown.
def page_image(line_path: str, reference: dict, longest: int) -> tuple[bytes, str] | str:
    try:
        folder = os.path.dirname(line_path)
        file = remote_image(folder, reference["path"]) if is_remote(folder) else image_file(folder, reference["path"])
        return image_check(*file) or cached_image(*file, longest)
    except ImageProblem as error:
        return str(error)


# An image on object storage as image_file finds it, asked again every few seconds at most: a batch table's
# thumbnails would otherwise cost a request each on every rerun.
@st.cache_data(ttl=REMOTE_LISTING_SECONDS, max_entries=4096, show_spinner=False)
def remote_image(folder: str, path: str | None) -> tuple[str, int, int]:
    return image_file(folder, path)


# An image file re-encoded for the page, per file version and size: decoded once, whoever looks at it.
@st.cache_data(show_spinner=False, max_entries=2048)
def cached_image(path: str, size: int, mtime_ns: int, longest: int) -> tuple[bytes, str]:
    return encoded_image(path, longest)


# One store per run folder, shared by reruns and sessions: a run is indexed and held once, however many watch it.
@st.cache_resource(show_spinner=False)
def run_store(run_dir: str) -> "RunStore":
    return RunStore(run_dir)


# The step in view with its texts, read back once per set of lines (the key) and shared read-only: pickling it on
# every rerun would cost more than the page.
@st.cache_resource(show_spinner=False, max_entries=16)
def load_step_batch(key: str, _rows: pd.DataFrame) -> "StepBatch":
    return read_step_batch(key, _rows)


# The sample in view's tokens; index_id tells a line read anew from one at the same place in an older file.
@st.cache_resource(show_spinner=False, max_entries=64)
def load_sample_tokens(index_id: str, path: str, offset: int, length: int, step: int) -> "SampleTokens | None":
    return read_sample_tokens(path, offset, length, step)


# A run's texts for search, kept for the two runs searched last: the bench's large run's (51,200 samples) take 390 MB.
@st.cache_resource(show_spinner=False, max_entries=2)
def run_texts(run_dir: str) -> "RunTexts":
    return RunTexts()


# A search of a run's texts, per run version and query: filtering and sorting its results reads nothing again.
@st.cache_resource(show_spinner="Searching every loaded sample…", max_entries=8)
def cached_search(version: tuple, query: str, regex: bool, match_case: bool, places: str, _run: "RunSnapshot") -> "SearchResult":
    return search_samples(run_texts(_run.run_dir), _run.samples, search_pattern(query, regex, match_case), places)


# The sample in view's keys outside the format, read from its line.
@st.cache_resource(show_spinner=False, max_entries=16)
def load_other_fields(index_id: str, path: str, offset: int, length: int) -> dict:
    return {name: raw_value(value) if isinstance(value, msgspec.Raw) else value for name, value in line_fields(read_line(path, offset, length)).items() if name not in FORMAT_KEYS}


# The runs of a root and why they cannot be listed (None: they can). Object storage is listed at most every few
# seconds: each rerun of the page would otherwise ask the store again.
def listed_runs(root: str) -> tuple[list[str], str | None]:
    if is_remote(root):
        return listed_remote_runs(root)
    return (list_runs(root), None) if Path(root).expanduser().is_dir() else ([], None)


@st.cache_data(ttl=REMOTE_LISTING_SECONDS, max_entries=16, show_spinner=False)
def listed_remote_runs(root: str) -> tuple[list[str], str | None]:
    try:
        with storage_errors(root):
            if not remote_storage(root).isdir(root):
                return [], f"{root} was not found (no such bucket or folder), or cannot be listed"
        return list_runs(root), None
    except StorageError as error:
        return [], str(error)


# A run's history signature: on object storage a listing, asked at most every few seconds (each rerun wants it).
def current_history_signature(run_dir: str) -> tuple:
    return remote_history_signature(run_dir) if is_remote(run_dir) else history_signature(run_dir)


@st.cache_data(ttl=REMOTE_LISTING_SECONDS, max_entries=16, show_spinner=False)
def remote_history_signature(run_dir: str) -> tuple:
    return history_signature(run_dir)


# A run's metadata for the sidebar's defaults, read again every few seconds at most (each rerun asks for it).
@st.cache_data(ttl=REMOTE_LISTING_SECONDS, max_entries=64, show_spinner=False)
def cached_meta(run_dir: str) -> dict | None:
    return read_meta(run_dir)


# The training history of a folder, read again only when one of its files changed (history_signature); it keeps the
# signature it was read at, for live mode and the charts' cache.
@st.cache_resource(show_spinner=False, max_entries=32)
def load_history(run_dir: str, signature: tuple) -> "TrainingHistory":
    return dataclasses.replace(read_history(run_dir), signature=signature)


# A training metric's chart, per set of histories and curve settings.
@st.cache_resource(show_spinner=False, max_entries=64)
def cached_metric_chart(name, versions, smoothing, zero_shift, _histories) -> dict:
    return metric_chart(name, _histories, smoothing, zero_shift)


# Step charts change only with the runs and the curve settings, so a step or sample change reuses them.
@st.cache_resource(show_spinner=False, max_entries=64)
def cached_step_curve(columns, title, unit, versions, variance_scale, zero_shift, smoothing, _runs, names=None, median=False, log_scale=False, lines=()) -> dict:
    return step_curve_chart(_runs, columns, title, unit, variance_scale, zero_shift, smoothing, names, median, log_scale, lines)


@st.cache_resource(show_spinner=False, max_entries=8)
def cached_fraction_chart(versions, smoothing, _runs) -> dict:
    return step_fraction_chart([(name, group_signal_by_step(samples)) for name, samples in _runs], smoothing)


# The step's three batch charts, built once per set of lines.
@st.cache_resource(show_spinner=False, max_entries=16)
def cached_batch_charts(lines, _table) -> tuple:
    gap = reward_gap_chart(_table) if _table["ref_reward"].notna().any() else None
    return batch_reward_chart(_table), gap, reward_distribution_chart(_table)


# The batch table as shown, built once per set of lines and display setting.
@st.cache_resource(show_spinner=False, max_entries=16)
def cached_table_view(lines, _table, kl_estimator, pad_token, system_prompt_end) -> pd.DataFrame:
    return batch_table_view(_table, kl_estimator, pad_token, system_prompt_end)


# The groups table as shown, built once per set of lines and display setting.
@st.cache_resource(show_spinner=False, max_entries=16)
def cached_group_table(lines, _table, pad_token, system_prompt_end) -> pd.DataFrame:
    return group_table(_table, pad_token, system_prompt_end)


# ====================================================================================================================
# Figures: Vega-Lite specs and the plotly heat map, built from numbers; no Streamlit here.
# ====================================================================================================================

# Charts are Vega-Lite specs drawn by Streamlit's built-in Vega, which the browser draws several times faster than
# plotly figures (and not at all in a tab that is not open); the token heat map stays plotly, which draws it as one image
# where Vega would draw a mark per token and metric.


STEP_PALETTE = ["#e8927c", "#5fa8d3", "#b8de6f", "#f3c969", "#c39bd3", "#76d7c4", "#f1948a", "#85c1e9"]


# A chart's subtitle in a grey readable on the light and the dark theme (Vega's default is near-black), apart from the title.
SUBTITLE_STYLE = {"subtitleColor": "#9a9aa6", "subtitlePadding": 4}


# Scroll to zoom, drag to pan, double-click to reset, on every step chart.
ZOOM = [{"name": "zoom", "select": "interval", "bind": "scales"}]


# An axis title longer than the plot is tall would shrink the plot (to nothing, for a long field name): cut with "…".
AXIS_TITLE_PIXELS = 200


SAMPLE_AXIS = {"field": "sample_index", "type": "ordinal", "title": "sample index", "axis": {"labelOverlap": "greedy", "labelAngle": 0}}


# The token grid as a heat map, tokens along x as the original had them. Each metric's row is coloured within
# its own range, as the running text is (red above 0, blue below, stronger = larger |value| against the row's
# largest): one shared scale would leave every row but logp flat. The cells and the hover show the raw values.
# Up to LABELLED_TOKENS tokens every column is labelled with its token, and up to VALUE_LABELLED_TOKENS each cell with
# its value; past those a label is too narrow to read (the axis shows token indices instead, the same "#index" as the
# table and the running text), and the hover still gives each token and value. Fixed margins and no colour bar: plotly
# then lays the chart out once per redraw instead of measuring and placing its labels again.
LABELLED_TOKENS, VALUE_LABELLED_TOKENS = 100, 30


# One line per series (and run) with a mean ± std × scale band (or the median with its 25-75 % band), steps in
# numeric order; smoothed, the raw centre line stays faint behind.
def step_curve_chart(runs, columns, title, unit, variance_scale=0.2, zero_shift=False, smoothing=0.0, names=None, median=False, log_scale=False, lines=()) -> dict:
    points, shown, line_points = [], [], []
    by_run = len(runs) > 1 and len(columns) > 1  # several series of several runs: colour by run, dashes by series
    for run_name, samples in runs:
        for column in columns:
            if column not in samples:
                continue
            stats = step_stats(samples, column)
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
            centre, low, high = (smoothed(values, smoothing) for values in (centre, low, high))
            label = (names or {}).get(column, column)
            name = series_name(run_name, label, len(runs), len(columns))
            shown.append(run_name if by_run else name)
            points += [
                {"series": name, "colour": shown[-1], "order": list(dict.fromkeys(shown)).index(shown[-1]), "what": label, "step": int(step), "centre": json_number(c), "raw": faint(r, smoothing), "low": json_number(a), "high": json_number(b), "mean": json_number(m), "median": json_number(md), "std": json_number(sd), "n": int(n)}
                for step, c, r, a, b, m, md, sd, n in zip(stats.index, centre, raw, low, high, stats["mean"], stats["median"], stats["std"], stats["count"])
            ]
    for name, steps, values in lines:  # dashed lines without a band: (name, steps, values)
        raw = np.array(values, dtype=float)
        raw = raw - raw[0] if zero_shift and len(raw) else raw
        shown.append(name)
        line_points += [{"series": name, "colour": name, "order": len(dict.fromkeys(shown)) - 1, "step": int(step), "centre": json_number(c), "raw": faint(r, smoothing), "logged": json_number(r)} for step, c, r in zip(steps, smoothed(raw, smoothing), raw)]
    x = step_axis(pd.concat([samples["step"] for _, samples in runs if len(samples)]))
    band = "median, band 25-75 %" if median else f"mean, band ± std × {variance_scale:g}"
    y_scale = {"zero": False} | ({"type": "symlog"} if log_scale else {})
    colour = series_colour("colour")
    line = {
        "mark": {"type": "line", "point": len(points) == len(shown)},
        "params": ZOOM,
        "encoding": {
            "x": x,
            "y": {"field": "centre", "type": "quantitative"},
            "color": colour,
            "detail": {"field": "series"},
            **({"strokeDash": {"field": "what", "type": "nominal", "scale": {"domain": [(names or {}).get(column, column) for column in columns]}, "legend": {"orient": "bottom", "title": None, "labelLimit": 0}}} if by_run else {}),
            "tooltip": [{"field": "series"}, {"field": "step"}, {"field": "mean", "format": ".4g"}, {"field": "median", "format": ".4g"}, {"field": "std", "format": ".4g"}, {"field": "n"}],
        },
    }
    # The band is said under the title: an axis title longer than the plot is tall shrinks the plot and pushes the
    # chart's title off its canvas.
    return {
        "title": {"text": one_line(title), "subtitle": band, **SUBTITLE_STYLE},
        "height": 330,
        "padding": {"top": 12},  # a layered chart's title otherwise starts above its canvas, cut in half
        "data": {"values": points},
        "layer": [
            {"mark": {"type": "area", "opacity": 0.2}, "encoding": {"x": x, "y": {"field": "low", "type": "quantitative", "title": one_line(unit), "axis": {"titleLimit": AXIS_TITLE_PIXELS}, "scale": y_scale}, "y2": {"field": "high"}, "color": colour, "detail": {"field": "series"}}},
            raw_line_layer(x, colour),
            line,
            *([{
                "data": {"values": line_points},
                "mark": {"type": "line", "strokeDash": [6, 3], "point": len(line_points) < 60},
                "encoding": {"x": x, "y": {"field": "centre", "type": "quantitative"}, "color": colour, "tooltip": [{"field": "series"}, {"field": "step"}, {"field": "logged", "title": "value", "format": ".6g"}]},
            }] if line_points else []),
        ],
    }


# A curve's name: the series alone for one run, the run alone for one series, else both.
def series_name(run_name: str, series: str, runs: int, columns: int) -> str:
    if runs == 1:
        return series
    return run_name if columns == 1 else f"{run_name} · {series}"


# Each series (or run) its own colour, the same on every layer, in the order of the points' "order" field; the legend
# names them. The names are in the data, not the spec: adding a run then updates every chart instead of rebuilding it
# (raw_line_layer).
def series_colour(field_name: str = "series") -> dict:
    legend = {"orient": "bottom", "title": None, "symbolOpacity": 1, "labelLimit": 0}
    return {"field": field_name, "type": "nominal", "sort": {"field": "order", "op": "min"}, "scale": {"range": STEP_PALETTE}, "legend": legend}


# Smoothed curves keep their raw values visible, faintly, behind the smoothed line. The layer is always there (without
# values when nothing is smoothed): a chart whose spec keeps its shape is updated in place by the browser, where a
# changed spec is built anew, which costs several times more with a few charts of several runs (bench/README.md).
def raw_line_layer(x: dict, colour: dict) -> dict:
    return {"mark": {"type": "line", "opacity": 0.25, "strokeWidth": 1}, "encoding": {"x": x, "y": {"field": "raw", "type": "quantitative"}, "color": colour, "detail": {"field": "series"}}}


# A point's raw value for the faint line: only when the line beside it is smoothed.
def faint(value: float, smoothing: float) -> float | None:
    return json_number(value) if smoothing else None


# The step axis spans the runs' steps exactly: a "nice" domain ran past the last step.
def step_axis(steps: pd.Series) -> dict:
    first, last = int(steps.min()), int(steps.max())
    return {"field": "step", "type": "quantitative", "title": "step", "axis": {"format": "d", "tickMinStep": 1}, "scale": {"domain": [first, last]} if last > first else {"zero": False}}


# Fractions per step (in %) of zero-signal groups and of truncated completions, one line each per run.
def step_fraction_chart(runs: list[tuple[str, pd.DataFrame]], smoothing: float = 0.0) -> dict:
    points, order = [], itertools.count()
    for run_name, fractions in runs:
        for column in ("zero-signal groups", "truncated"):
            if column not in fractions or not fractions[column].notna().any():
                continue
            name, position = series_name(run_name, f"{column} (%)", len(runs), 2), next(order)
            raw = fractions[column].to_numpy() * 100
            points += [
                {"series": name, "order": position, "step": int(step), "percent": json_number(value), "raw": faint(r, smoothing)}
                for step, value, r in zip(fractions.index, smoothed(raw, smoothing), raw)
            ]
    x = step_axis(pd.concat([fractions.index.to_series() for _, fractions in runs if len(fractions)]))
    colour = series_colour()
    return {
        "title": "👾 GRPO learning signal (Step level)",
        "height": 330,
        "padding": {"top": 12},
        "data": {"values": points},
        "layer": [
            raw_line_layer(x, colour),
            {
                "mark": {"type": "line", "tooltip": True},
                "params": ZOOM,
                "encoding": {"x": x, "y": {"field": "percent", "type": "quantitative", "title": "% of groups / of completions"}, "color": colour},
            },
        ],
    }


# A prompt's completions over training: each completion's reward a point, their mean per step a line, per run.
def prompt_reward_chart(table: pd.DataFrame) -> dict:
    order = {run: position for position, run in enumerate(dict.fromkeys(table["run"]))}
    points = [{"run": run, "order": order[run], "step": int(step), "reward": json_number(reward)} for run, step, reward in zip(table["run"], table["step"], table["reward"])]
    means = table.groupby(["run", "step"])["reward"].mean().reset_index()
    lines = [{"run": run, "order": order[run], "step": int(step), "mean reward": json_number(reward)} for run, step, reward in zip(means["run"], means["step"], means["reward"])]
    x = step_axis(table["step"]) if len(table) else {"field": "step", "type": "quantitative"}
    colour = series_colour("run")
    return {
        "title": "Rewards of this prompt's completions, per step",
        "height": 260,
        "layer": [
            {"data": {"values": points}, "mark": {"type": "point", "opacity": 0.6}, "encoding": {"x": x, "y": {"field": "reward", "type": "quantitative", "scale": {"zero": False}}, "color": colour, "tooltip": [{"field": "run"}, {"field": "step"}, {"field": "reward", "format": ".4g"}]}},
            {"data": {"values": lines}, "mark": {"type": "line"}, "params": ZOOM, "encoding": {"x": x, "y": {"field": "mean reward", "type": "quantitative"}, "color": colour}},
        ],
    }


# How many samples a search found at each step: where in training a phrase appears, or a filter's samples lie.
def matches_per_step_chart(per_step: pd.Series) -> dict:
    return {
        "title": "Samples found per step",
        "height": 200,  # the title and axes included
        "data": {"values": [{"step": int(step), "samples": int(count)} for step, count in per_step.items()]},
        "mark": {"type": "bar", "color": STEP_PALETTE[1], "tooltip": True},
        "encoding": {
            "x": {"field": "step", "type": "ordinal", "title": "step", "axis": {"labelOverlap": "greedy", "labelAngle": 0}},  # a bar for every step, none found or not
            "y": {"field": "samples", "type": "quantitative", "title": "samples", "axis": {"tickMinStep": 1}},
        },
    }


# The metrics drawn first in the Training metrics area: GRPO's reward, loss, KL and learning rate (seed 004's lr).
DEFAULT_METRICS = ["reward", "loss", "kl", "learning_rate", "lr"]


# One chart of a metric: per run (a colour) its train line, its eval line (eval_<name> or val_<name>, dashed, with
# points) and its best checkpoint (a dashed rule).
def metric_chart(name: str, histories: list[tuple[str, "TrainingHistory"]], smoothing: float = 0.0, zero_shift: bool = False) -> dict:
    points, rules = [], []
    for position, (run_name, history) in enumerate(histories):
        for split, frame in (("train", history.train), ("eval", history.eval)):
            column = next((column for column in frame.columns[1:] if metric_name(column) == name), None)
            if column is None or not frame[column].notna().any():
                continue
            values = frame[["step", column]].dropna()
            raw = values[column].to_numpy()
            if zero_shift:
                raw = raw - raw[0]
            if split == "eval" and column in history.train:  # the same key in both (epoch): two series
                column += " (eval)"
            series = f"{run_name} · {column}" if len(histories) > 1 else column
            points += [
                {"series": series, "run": run_name, "order": position, "split": split, "single": len(raw) == 1, "step": int(step), "value": json_number(value), "raw": faint(r, smoothing), "logged": json_number(r)}
                for step, value, r in zip(values["step"], smoothed(raw, smoothing), raw)
            ]
        best = history.best
        if best and best.get("step") is not None:
            rules.append({"step": int(best["step"]), "best checkpoint": f"{run_name}: {best['path']}" if len(histories) > 1 else str(best["path"])})
    x = step_axis(pd.Series([point["step"] for point in points + rules] or [0]))
    colour = series_colour("run")
    tooltip = [{"field": "series"}, {"field": "step"}, {"field": "logged", "title": "value", "format": ".6g"}]
    layer = [
        raw_line_layer(x, colour),
        {"transform": [{"filter": "datum.split == 'train'"}], "mark": {"type": "line"}, "params": ZOOM,
         "encoding": {"x": x, "y": {"field": "value", "type": "quantitative", "title": None, "scale": {"zero": False}}, "color": colour, "tooltip": tooltip}},
        {"transform": [{"filter": "datum.split == 'train' && datum.single"}], "mark": {"type": "point", "filled": True},  # a line of one point draws nothing
         "encoding": {"x": x, "y": {"field": "value", "type": "quantitative"}, "color": colour, "tooltip": tooltip}},
        {"transform": [{"filter": "datum.split == 'eval'"}], "mark": {"type": "line", "point": True, "strokeDash": [5, 3]},
         "encoding": {"x": x, "y": {"field": "value", "type": "quantitative"}, "color": colour, "tooltip": tooltip}},
    ]
    if rules:
        layer.append({"data": {"values": rules}, "mark": {"type": "rule", "strokeDash": [2, 2], "color": "#888"}, "encoding": {"x": x, "tooltip": [{"field": "best checkpoint"}, {"field": "step"}]}})
    return {
        "title": one_line(name),
        "height": 260,
        "padding": {"top": 12},
        "data": {"values": points},
        "layer": layer,
    }


# A logged metric's name without its eval prefix: eval_loss (HF Trainer) and val_reward (seed 004) are drawn with loss
# and reward.
def metric_name(column: str) -> str:
    for prefix in ("eval_", "val_"):
        if column.startswith(prefix) and len(column) > len(prefix):
            return column[len(prefix):]
    return column


# Grouped bars of reward and ref_reward for each sample of the step.
def batch_reward_chart(table: pd.DataFrame) -> dict:
    series = [(column, name) for column, name in (("reward", "Reward"), ("ref_reward", "Ref Reward")) if table[column].notna().any()]
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
            "y": {"field": "reward", "type": "quantitative", "title": "reward"},
            "color": {"field": "series", "type": "nominal", "scale": {"domain": ["Reward", "Ref Reward"][: len(series)], "range": ["#1f4e9c", "#5fa8d3"]}, "legend": {"orient": "top", "title": None}},
        },
    }


# Bars of reward - ref_reward per sample, coloured by the gap.
def reward_gap_chart(table: pd.DataFrame) -> dict:
    values = [{"sample_index": int(index), "reward_gap": json_number(gap)} for index, gap in zip(table.index, table["reward_gap"])]
    return {
        "title": "Reward Gap (r - ref_r) in current batch",
        "height": 320,
        "data": {"values": values},
        "mark": {"type": "bar", "tooltip": True},
        "encoding": {
            "x": SAMPLE_AXIS,
            "y": {"field": "reward_gap", "type": "quantitative", "title": "reward - ref_reward"},
            "color": {"field": "reward_gap", "type": "quantitative", "scale": {"scheme": "blues"}, "legend": {"orient": "top", "title": None}},
        },
    }


# Histogram (as a density) with a fitted normal curve per series, both computed here with numpy. The data are
# named datasets, not part of the layers, so the spec is the same for every step with the same series and the
# browser swaps the data in the chart it has instead of building a new one.
def reward_distribution_chart(table: pd.DataFrame) -> dict:
    bars, curves, names, colours = [], [], [], []
    for column, name, colour in (("reward", "Rewards", "#e67e22"), ("ref_reward", "Ref Rewards", "#2e86c1")):
        values = finite(table[column])
        with np.errstate(over="ignore"):
            if not len(values) or not np.isfinite(values.max() - values.min()) or not np.isfinite(values.std()):
                continue  # no finite values, or a spread beyond float range (1e308 and -1e308)
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
        "legend": {"orient": "top", "title": None, "columns": 2, "labelLimit": 0},  # in one row, a third of the page cut it
    }
    return {
        "title": "Reward Distribution in current batch",
        "height": 320,
        "datasets": {"bars": bars, "curves": curves},
        "layer": [
            {
                "data": {"name": "bars"},
                "mark": {"type": "bar", "opacity": 0.6, "tooltip": True},
                "encoding": {"x": {"field": "start", "type": "quantitative", "title": "reward"}, "x2": {"field": "end"}, "y": {"field": "density", "type": "quantitative", "title": "density (share per unit of reward)"}, "y2": {"datum": 0}, "color": colour},
            },
            {
                "data": {"name": "curves"},
                "mark": {"type": "line"},
                "encoding": {"x": {"field": "x", "type": "quantitative"}, "y": {"field": "density", "type": "quantitative"}, "color": colour},
            },
        ],
    }


def token_heatmap_figure(grid: pd.DataFrame) -> go.Figure:
    labels = [html.escape(label if len(label) <= 24 else label[:23] + "…") for label in grid.columns]
    values = grid.to_numpy(dtype=float)
    bounds = largest_magnitude(values)
    labelled, valued = len(labels) <= LABELLED_TOKENS, len(labels) <= VALUE_LABELLED_TOKENS
    figure = go.Figure(
        go.Heatmap(
            z=np.where(np.isfinite(values), values / np.where(bounds > 0, bounds, 1.0)[:, None], np.nan),
            customdata=values,
            zmin=-1,
            zmax=1,
            showscale=False,
            x=labels if labelled else np.arange(len(labels)),
            y=list(grid.index),
            colorscale="balance",
            text=[[f"{value:.3g}" for value in row] for row in values.tolist()] if valued else None,
            texttemplate="%{text}" if valued else None,
            hovertemplate="%{y} at %{x}: %{customdata:.4g}<extra></extra>" if labelled else "%{y} at token #%{x}: %{customdata:.4g}<extra></extra>",
        )
    )
    figure.update_layout(
        height=(180 if labelled else 70) + 36 * len(grid.index),
        margin=dict(l=110, r=20, t=20, b=160 if labelled else 50),
        xaxis=dict(tickangle=-60, automargin=False) if labelled else dict(title="token index", automargin=False),
        yaxis=dict(autorange="reversed", automargin=False),
    )
    return figure


# JSON has no NaN: a missing number is null, which Vega leaves out.
def json_number(value) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


# ====================================================================================================================
# Metrics: numbers only (KL estimators, per-step statistics, groups, the batch and token tables' values).
# ====================================================================================================================


# KL estimators over log_ratio r = logp - ref_logp; the first is the original's, k3 the one TRL logs as kl.
KL_ESTIMATORS = {
    "kl": "exp(r) - 1 - r (the original board's kl)",
    "k1": "r (log ratio)",
    "k2": "r^2 / 2",
    "k3": "exp(-r) + r - 1 = exp(ref-logp) - (ref-logp) - 1 (TRL GRPO loss)",
}


# Rows of the token area: (name, what it is). Where the policy left the reference and was unsure come first, so the
# token table shows them without scrolling; advantage, the same on every token, is not shown until chosen.
TOKEN_ROWS = {
    "kl": "per-token KL under the chosen estimator",
    "log_ratio": "logp - ref_logp",
    "logp": "logprobs: log-prob of the token under the policy that sampled it",
    "ref_logp": "ref_logprobs: log-prob under the reference model",
    "entropy": "entropies: the policy's entropy at each position",
    "token_reward": "token_rewards: the per-token reward the policy was trained on",
    "token_value": "values: the critic's value of each token",
    "prob": "exp(logp)",
    "ref_prob": "exp(ref_logp)",
    "advantage": "the sample's advantage, the same on every token",
}


# Per-token KL under each estimator, from r = logp - ref_logp.
def kl_per_token(log_ratio: np.ndarray, estimator: str) -> np.ndarray:
    if estimator == "kl":
        return np.expm1(log_ratio) - log_ratio
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    if estimator == "k3":
        return np.expm1(-log_ratio) + log_ratio
    raise ValueError(f"unknown KL estimator {estimator!r}")


# Sums and NaN-aware means over consecutive segments (one per sample) of each row of a 2-D array.
def segment_sums_and_means(values: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sums = np.zeros((len(values), len(lengths)))
    counts = np.zeros((len(values), len(lengths)))
    nonempty = lengths > 0
    if nonempty.any():
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])[nonempty]
        present = ~np.isnan(values)
        if present.all():
            sums[:, nonempty] = np.add.reduceat(values, starts, axis=1)
            counts[:, nonempty] = lengths[nonempty]
        else:
            sums[:, nonempty] = np.add.reduceat(np.where(present, values, 0.0), starts, axis=1)
            counts[:, nonempty] = np.add.reduceat(present, starts, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / counts
    sums[counts == 0] = np.nan
    return sums, means


# Mean, std (population), median, quartiles and count of a column per step, over finite values only.
def step_stats(samples: pd.DataFrame, column: str) -> pd.DataFrame:
    values = samples[["step", column]].replace([np.inf, -np.inf], np.nan).dropna().groupby("step")[column]
    stats = values.agg(["mean", "median", "count"])
    stats["std"] = values.std(ddof=0)
    stats["q25"], stats["q75"] = values.quantile(0.25), values.quantile(0.75)
    return stats.sort_index()


# TensorBoard's smoothing: an exponential moving average debiased at the start (pandas' adjusted ewm is exactly that),
# over the finite values only; a missing value stays missing.
def smoothed(values: np.ndarray, weight: float) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    if not weight or not len(values):
        return values
    finite_values = np.where(np.isfinite(values), values, np.nan)
    result = pd.Series(finite_values).ewm(alpha=1 - weight, adjust=True, ignore_na=True).mean().to_numpy()
    return np.where(np.isnan(finite_values), np.nan, result)


# The per-step columns the step curves draw, each as its chart names it.
STEP_CURVE_COLUMNS = {
    **{name: name for name in REWARD_SERIES},
    "avg_log_ratio": "log_ratio",
    **{f"avg_kl_{name}": f"kl ({name})" for name in KL_ESTIMATORS},
    "response_tokens_len": "response tokens",
    "avg_entropy": "entropy",
}


# The numbers behind the step curves, every run compared: one row per run, series and step.
def step_statistics_table(runs: list[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    tables = []
    for run_name, samples in runs:
        columns = list(STEP_CURVE_COLUMNS) + sorted(column for column in samples.columns if column.startswith("rewards/"))
        for column in columns:
            if column in samples and samples[column].notna().any():
                stats = step_stats(samples, column).reset_index()
                tables.append(stats.assign(run=run_name, series=STEP_CURVE_COLUMNS.get(column, column)))
        fractions = group_signal_by_step(samples)
        for column in fractions.columns:
            values = fractions[column].dropna()
            tables.append(pd.DataFrame({"step": values.index, "mean": values.to_numpy(), "run": run_name, "series": f"{column} (fraction)"}))
    order = ["run", "series", "step", "mean", "std", "median", "q25", "q75", "count"]
    return pd.concat(tables, ignore_index=True).reindex(columns=order) if tables else pd.DataFrame(columns=order)


# TRL logs kl per loss pass (micro-batch) as the token mean of k3 over the sampled tokens (a tool's are left out)
# pooled over all ranks (since TRL 1.9; before, the mean of each rank's token mean), and per step the mean over its
# passes. From lines that say their pass (micro_batch), per step; a rank is a file.
def trl_kl_by_step(samples: pd.DataFrame, pooled_ranks: bool = True) -> pd.Series:
    lines = samples.dropna(subset=["micro_batch"])
    has_kl = lines["sum_kl_k3"].notna()  # a line without log-probs (e.g. masked when truncated) adds no token
    sampled = lines["response_tokens_len"] - lines["tool_tokens"].fillna(0)  # TRL's loss leaves tool tokens out
    tokens = pd.DataFrame({
        "kl": lines["sum_kl_k3"].where(has_kl, 0.0),
        "count": sampled.where(has_kl, 0.0),
        "step": lines["step"], "micro_batch": lines["micro_batch"], "path": lines["path"],
    })
    passes = tokens.groupby(["step", "micro_batch"] + ([] if pooled_ranks else ["path"]))[["kl", "count"]].sum()
    means = passes["kl"] / passes["count"].clip(lower=1)  # TRL: a pass without tokens counts as 0
    if not pooled_ranks:
        means = means.groupby(level=["step", "micro_batch"]).mean()
    return means.groupby(level="step").mean()


# TRL (1.9 on) pools each loss pass's kl over all ranks' tokens; before, it averaged each rank's token mean. Unknown: pooled.
POOLED_KL_SINCE = (1, 9)


def trl_pools_kl(trl_version) -> bool:
    match = re.match(r"(\d+)\.(\d+)", str(trl_version or ""))
    return match is None or (int(match.group(1)), int(match.group(2))) >= POOLED_KL_SINCE


# Per step, the share of groups with identical rewards and the share of truncated completions.
def group_signal_by_step(samples: pd.DataFrame) -> pd.DataFrame:
    result = pd.DataFrame(index=pd.Index(sorted(samples["step"].unique()), name="step"))
    grouped = samples.dropna(subset=["group_id"])
    if len(grouped):
        spread = grouped.groupby(["step", "group_id"])["reward"].agg(lambda r: np.nanmax(r) - np.nanmin(r) if r.notna().any() else np.nan)
        result["zero-signal groups"] = (spread == 0).groupby(level="step").mean()
    truncated = samples.dropna(subset=["truncated"])
    if len(truncated):
        result["truncated"] = truncated.groupby("step")["truncated"].mean()
    return result


# Per sample, whether its group (same step and group id) gave every completion the same reward: no learning signal,
# as Step-Groups counts it.
def zero_signal_members(samples: pd.DataFrame) -> np.ndarray:
    rewards = samples.groupby(["step", "group_id"])["reward"]
    return (rewards.transform("max") - rewards.transform("min") == 0).to_numpy()


# The numbers a search can be filtered and sorted by, those the run has: rewards, advantage, length, log ratio, the
# chosen KL estimator, entropy, and every number of a key outside the format.
def filter_columns(run: "RunSnapshot", kl_estimator: str) -> list[str]:
    columns = ["reward", *run.reward_function_columns, "advantage", "response_tokens_len", "response_len", "avg_log_ratio", f"avg_kl_{kl_estimator}", "avg_entropy", "tool_tokens"]
    return [column for column in columns + run.extra_columns if run.samples[column].notna().any()]


# What a search keeps besides its text: a step range, ranges of numbers, facet values, truncated completions, members
# of zero-signal groups; the default keeps every sample.
@dataclass(frozen=True)
class SampleFilter:
    steps: tuple = ()  # (first, last); () for all
    ranges: tuple = ()  # (column, low, high), each kept inclusive; a sample without the number is left out
    facets: tuple = ()  # (column, values)
    truncated: bool = False
    zero_signal: bool = False


# Which samples pass every part of the filter.
def filter_mask(samples: pd.DataFrame, chosen: SampleFilter) -> np.ndarray:
    mask = np.ones(len(samples), dtype=bool)
    if chosen.steps:
        mask &= samples["step"].between(*chosen.steps).to_numpy()
    for column, low, high in chosen.ranges:
        mask &= samples[column].between(low, high).to_numpy()
    for column, values in chosen.facets:
        mask &= samples[column].isin(values).to_numpy()
    if chosen.truncated:
        mask &= samples["truncated"].to_numpy() == 1
    if chosen.zero_signal:
        mask &= zero_signal_members(samples)
    return mask


# Per value of a facet: how many samples, and the mean of a number over those that have it.
def facet_table(samples: pd.DataFrame, facet: str, column: str) -> pd.DataFrame:
    grouped = samples.groupby(facet)[column]
    table = pd.DataFrame({"samples": samples.groupby(facet).size(), f"mean {column}": grouped.mean(), f"samples with {column}": grouped.count()})
    return table.rename_axis(facet).reset_index().sort_values("samples", ascending=False, kind="stable")  # text/<key>: no clash


# TRL's reward of a sample: the reward functions' scores times their weights (1 where none is given), summed
# skipping NaN (a function that did not score the sample); NaN where no function scored it.
def total_reward(samples: pd.DataFrame, weights: dict[str, float]) -> np.ndarray:
    columns = [column for column in samples.columns if column.startswith("rewards/")]
    if not columns:
        return samples["reward"].to_numpy(dtype=float)
    scores = samples[columns].to_numpy(dtype=float) * np.array([weights.get(column[len("rewards/") :], 1.0) for column in columns])
    return np.where(np.isnan(scores).all(axis=1), np.nan, np.nansum(scores, axis=1))


# What reward is, in words, for the page: the weighted sum and where the weights came from, or the plain sum.
def reward_sum_note(weights: dict[str, float] | None, source: str) -> str:
    if not weights:
        return "reward = the plain sum of the reward functions' scores (their weights are not known: type them in Reward weights)"
    return "reward = " + " + ".join(f"{weight:g} × {name}" for name, weight in weights.items()) + f" (weights from {source})"


# Groups numbered 0, 1, ... in batch order (NaN: no group): the ids as logged are long and alike.
def group_numbers(group_ids: pd.Series) -> np.ndarray:
    codes = pd.factorize(group_ids)[0]
    return np.where(codes >= 0, codes, np.nan)


# One row per prompt group of the step: the spread of its rewards (0: no learning signal) and its completions.
def group_table(table: pd.DataFrame, pad_token: str | None = None, system_prompt_end: str | None = None) -> pd.DataFrame:
    rows = []
    for group, members in table.groupby("group", sort=True):
        rewards = members["reward"]
        spread = rewards.max() - rewards.min()  # over the rewards there are, as the Step-Groups curve counts
        rows.append({
            "group": int(group),
            "prompt": shorten(clean_text(members["prompt"].iloc[0], pad_token, system_prompt_end), 200),
            "completions": len(members),
            "reward spread": spread,
            "reward std": rewards.std(ddof=0),
            "mean reward": rewards.mean(),
            "zero signal": bool(spread == 0),
            "truncated": members["truncated"].sum() if members["truncated"].notna().any() else np.nan,
            "samples": members.index.tolist(),
            "rewards": [f"{reward:.4g}" for reward in rewards],  # as the other reward columns show them
            "group_id": members["group_id"].iloc[0],
        })
    return pd.DataFrame(rows).sort_values("reward spread", ascending=False, kind="stable").reset_index(drop=True)


# The batch table's columns, the original's and GRPO's (absent ones hidden): first the short numbers that say which
# samples matter (reward, advantage, group, KL, entropy, length), then the texts, then the rest; the wide texts first
# would push them off-screen.
def batch_table_view(table: pd.DataFrame, kl_estimator: str, pad_token: str | None, system_prompt_end: str | None) -> pd.DataFrame:
    view = table.assign(
        sample=np.arange(len(table)),
        prompt=[shorten(clean_text(text, pad_token, system_prompt_end)) for text in table["prompt"]],
        response=[shorten(clean_text(text, pad_token)) for text in table["response"]],
        ref_response=[None if text is None else shorten(clean_text(text, pad_token)) for text in table["ref_response"]],
        avg_kl=table[f"avg_kl_{kl_estimator}"],
        sum_kl=table[f"sum_kl_{kl_estimator}"],
    )
    columns = ["sample", "reward", "advantage", "group"] + [c for c in table.columns if c.startswith("rewards/")]
    columns += ["avg_kl", "avg_log_ratio", "avg_entropy", "response_tokens_len", "tool_tokens", "truncated"]
    columns += sorted(c for c in table.columns if c.startswith((EXTRA_PREFIX, TEXT_PREFIX))) + ["prompt", "response", "ground_truth"]
    columns += ["valid_reward", "sum_log_ratio", "sum_kl", "ref_response", "ref_reward", "ref_valid_reward", "reward_gap", "valid_reward_gap", "group_id"]
    return view[[c for c in columns if view[c].notna().any()]]


# The token area's rows: the sample's tokens as shown, which are pads and which a tool wrote, where each starts in
# the response (a run of image placeholders is one row), and each metric (TOKEN_ROWS) per row.
@dataclass
class TokenRows:
    tokens: list[str]
    is_pad: np.ndarray
    is_tool: np.ndarray
    positions: np.ndarray
    values: dict[str, np.ndarray]


# Token rows for the area: metrics by name, tokens clipped to the log-prob length, trailing pads dropped.
def token_rows(tokens: "SampleTokens", estimator: str, pad_token: str | None) -> TokenRows:
    logp = tokens.logprobs
    values = {"logp": logp, "prob": np.exp(logp)}
    if tokens.ref_logprobs is not None:
        ref = tokens.ref_logprobs
        log_ratio = logp - ref
        values.update(log_ratio=log_ratio, kl=kl_per_token(log_ratio, estimator), ref_logp=ref, ref_prob=np.exp(ref))
    for name, per_token in (("token_reward", tokens.token_rewards), ("token_value", tokens.values), ("entropy", tokens.entropies)):
        if per_token is not None:
            values[name] = per_token
    if tokens.advantage is not None:
        values["advantage"] = np.full(len(logp), tokens.advantage)
    names = tokens.response_tokens
    is_pad = np.array([pad_token is not None and name == pad_token for name in names], dtype=bool)
    is_tool = np.zeros(len(names), dtype=bool) if tokens.tool is None else tokens.tool
    if is_tool.any():  # a tool's tokens have no value of any kind (advantage, a critic's value...) in the token views
        values = {name: np.where(is_tool, np.nan, array) for name, array in values.items()}
    keep = len(names)
    if pad_token is not None:
        while keep and is_pad[keep - 1]:
            keep -= 1
    names = names[:keep]
    # A row starts at each token but the second and later of a run of one image placeholder (<|image_pad|> x 1024).
    starts = np.array([i for i, name in enumerate(names) if not (i and name == names[i - 1] and IMAGE_PLACEHOLDER.fullmatch(name))], dtype=np.int64)
    counts = np.diff(np.append(starts, keep))
    if len(starts) == keep:
        return TokenRows(tokens=names, is_pad=is_pad[:keep], is_tool=is_tool[:keep], positions=starts, values={name: array[:keep] for name, array in values.items()})
    labels = [names[start] if count == 1 else f"{names[start]} × {count}" for start, count in zip(starts.tolist(), counts.tolist())]
    means = {name: segment_sums_and_means(np.asarray(array[:keep], dtype=float)[None], counts)[1][0] for name, array in values.items()}
    return TokenRows(
        tokens=labels, is_pad=np.logical_and.reduceat(is_pad[:keep], starts), is_tool=np.logical_and.reduceat(is_tool[:keep], starts),
        positions=starts, values=means,
    )


# The normal density fitted (mean, population std) to values, on a grid spanning them.
def normal_curve(values: np.ndarray, points: int = 200) -> tuple[np.ndarray, np.ndarray]:
    mean, std = values.mean(), values.std()
    if std == 0:
        return np.array([mean]), np.array([0.0])
    x = np.linspace(min(values.min(), mean - 3 * std), max(values.max(), mean + 3 * std), points)
    return x, np.exp(-0.5 * ((x - mean) / std) ** 2) / (std * math.sqrt(2 * math.pi))


def finite(series: pd.Series) -> np.ndarray:
    values = series.to_numpy(dtype=float)
    return values[np.isfinite(values)]


# The largest finite |value| along the last axis (0 where there is none): full colour in the running text and
# in each heat map row.
def largest_magnitude(values: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(values), np.abs(values), 0.0).max(axis=-1, initial=0.0)


# ====================================================================================================================
# Text and token display: texts and tokens as the page shows them, escaped; never HTML from the data.
# ====================================================================================================================


# GPT-2's byte-to-character table, inverted: printable bytes stand for themselves, the others (space, newline...)
# for the characters from U+0100 on, in byte order.
def byte_of_character() -> dict[str, int]:
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [byte for byte in range(256) if byte not in printable]
    return {chr(byte): byte for byte in printable} | {chr(256 + position): byte for position, byte in enumerate(others)}


def undecodable_bytes(error: UnicodeDecodeError) -> tuple[str, int]:
    return "".join(f"⟨0x{byte:02X}⟩" for byte in error.object[error.start : error.end]), error.end


BYTE_OF_CHARACTER = byte_of_character()


SENTENCEPIECE_BYTE = re.compile(r"<0x[0-9A-Fa-f]{2}>")


BYTE_LEVEL_WHITESPACE = re.compile("[\u0120\u010a\u0109]")  # Ġ Ċ ĉ: space, newline and tab in the byte table


CONTROL_CHARACTER = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # no text's own: shown as ⟨0x..⟩


UNDECODABLE = re.compile("⟨0x[0-9A-F]{2}⟩")


UNDECODABLE_BYTES = "rl_logging_board.undecodable"


codecs.register_error(UNDECODABLE_BYTES, undecodable_bytes)


# A model's image (or video) placeholder token, which its processor repeats once per image patch: <image>,
# <|image_pad|>, <image_soft_token>, <IMG_CONTEXT>, <|video_pad|>... A run of one is shown as one marker with its count.
IMAGE_PLACEHOLDER_NAME = r"<\|?[A-Za-z_]{0,24}(?:image|img|IMG|video|vision|patch)[A-Za-z_]{0,24}\|?>"  # bounded: linear time
IMAGE_PLACEHOLDER = re.compile(IMAGE_PLACEHOLDER_NAME)
IMAGE_PLACEHOLDER_RUN = re.compile(f"({IMAGE_PLACEHOLDER_NAME})\\1+")


# Where GitHub-flavoured Markdown would start a link of its own: "://", "www." and "@".
AUTOLINK_START = re.compile(r"(?<=:)(?=//)|(?i:(?<=www))(?=\.)|(?=@)")


# Characters that would take a name off its line or reorder it: line breaks (a newline and "===" under a caption made
# it a heading), the other control characters and the bidirectional marks and overrides.
NAME_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


VISIBLE_CONTROL = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


# A name from the data on one line, each of those characters shown as its escape (a newline as \n), as chart titles,
# options and labels show it: readable as written, and nothing in it can start a line of Markdown. A chart whose axis
# title held a line break was never drawn (Vega-Lite writes titles into expressions of the spec it compiles).
def one_line(text) -> str:
    return NAME_CONTROL.sub(lambda match: VISIBLE_CONTROL.get(match.group(), f"\\u{ord(match.group()):04x}"), valid_text(str(text)))


# A list item or heading the text would start ("- x", "+ x", "1. x"): its first character escaped.
LINE_START = re.compile(r"^(\s*)([-+]|\d{1,9}(?=\.))(?=\.?(\s|$))")


# Names from the data (group ids, reward functions, metric keys, model, file and folder names) in a caption, warning,
# tab, label or metric: on one line (one_line), with the Markdown characters of links, images, code, emphasis, maths,
# HTML entities and Streamlit's :colour[...] escaped, so a name like ![x](http://host/x) or fn&amp;1 shows as written and
# loads nothing. GitHub's autolinks (http://..., www.x.org, a@x.org) ignore escapes: an invisible space breaks each.
def markdown_literal(text) -> str:
    escaped = re.sub(r"([\\`*_{}\[\]()<>#!|~$:&])", r"\\\1", one_line(text))
    escaped = LINE_START.sub(lambda match: match.group(1) + (match.group(2) + "\\" if match.group(2)[0].isdigit() else "\\" + match.group(2)), escaped)
    return AUTOLINK_START.sub("\u200b", escaped)


# Table cells show the start of a text (the samples pair below shows all of it); sending whole
# responses for every row would cost more than the rest of the page.
def shorten(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# Display text: optionally cut the system prompt and remove pad tokens; a run of an image placeholder token as one
# marker, [<image> × 16].
def clean_text(text: str, pad_token: str | None = None, system_prompt_end: str | None = None) -> str:
    if system_prompt_end and system_prompt_end in text:
        text = text.split(system_prompt_end, 1)[1]
    if pad_token:
        text = text.replace(pad_token, "")
    return IMAGE_PLACEHOLDER_RUN.sub(lambda run: f"[{run.group(1)} × {len(run.group()) // len(run.group(1))}]", text)


# Text for st.text, which dedents and strips what it shows: a zero-width space at each end of a text that starts or
# ends with whitespace keeps its indentation and outer newlines as written (a code answer's, say).
def as_written(text: str) -> str:
    return f"\u200b{text}\u200b" if text[:1].isspace() or text[-1:].isspace() else text


# A newline or tab token would be an empty-looking label in the table and the heat map.
def visible_whitespace(token: str) -> str:
    return token.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


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
            hover = f"#{rows.positions[index]} {token!r}  " + "  ".join(f"{name}={column[index]:.4g}" for name, column in columns.items())
            style = f"background:{colours[index]}" + (";opacity:0.35" if rows.is_pad[index] else "")
        text = html.escape(token) or "\u200b"  # tokens are text already (readable_tokens); an empty one stays hoverable
        style += ";padding:0 0.1em" if not token else ""
        spans.append(f'<span title="{html.escape(hover)}" style="{style}">{text}</span>')
    legend = f"colour: {html.escape(metric)} (red above 0, blue below, stronger = larger); hover a token for all its values"
    if rows.is_tool.any():
        legend += f"; <span style='{TOOL_TOKEN_STYLE}'>dashed grey</span>: written by a tool, not sampled by the policy (no values)"
    return f"<div style='font-size:0.8em;opacity:0.7'>{legend}</div>" + "<div class='rl-running-text' style='white-space:break-spaces;line-height:1.9;font-family:monospace'>" + "".join(spans) + "</div>"


# Token colours: red for positive values, blue for negative, stronger the larger |value| is
# relative to the response's largest (so a KL spike or a very unlikely token stands out).
def diverging_colours(values: np.ndarray) -> list[str]:
    values = np.asarray(values, dtype=float)
    bound = largest_magnitude(values)
    if bound == 0:
        return ["transparent"] * len(values)
    scaled = values / bound
    colours = []
    for level in scaled:
        if not np.isfinite(level):
            colours.append("transparent")
        elif level >= 0:
            colours.append(f"rgba(220,60,60,{0.85 * level:.2f})")
        else:
            colours.append(f"rgba(60,110,230,{-0.85 * level:.2f})")
    return colours


# Tokens as the text they stand for. What tokenizer.convert_ids_to_tokens returns is often not text: byte-level BPE
# (GPT-2, Llama 3, Qwen) writes each byte as a printable character (a space as Ġ, é as Ã©, 你 as ä½ł), SentencePiece
# a space as ▁ and a byte as <0xE4>. The scheme is decided once per response, from its ordinary tokens (special ones
# such as <|im_end|> or <PAD> stay as written): SentencePiece when one has ▁ or is a byte, else byte-level when every
# character is in the byte table. Each token's bytes are then decoded in turn, a character shown on the token that
# completes it (a CJK character is often 2-3 tokens; the others show as empty), and bytes that are no character (one
# cut at truncation, or sampled early in training) or a control character as ⟨0xB6⟩ on the token where that shows.
# Text whose letters only happen to be in the byte table ("być": ć is byte 0x07) is shown as written: as bytes it
# holds control characters or invalid bytes, and nothing proves the byte table (a space or newline written as Ġ or Ċ,
# or a character of 2-4 bytes).
def readable_tokens(tokens: list[str]) -> list[str]:
    ordinary = [token for token in tokens if not is_special_token(token)]
    if any("▁" in token or SENTENCEPIECE_BYTE.fullmatch(token) for token in ordinary):
        to_bytes = sentencepiece_bytes
    elif ordinary and all(character in BYTE_OF_CHARACTER for token in ordinary for character in token):
        to_bytes = byte_level_bytes
    else:
        return tokens  # text already (a raw space, CJK...), or no ordinary token
    texts = decode_token_bytes([None if is_special_token(token) else to_bytes(token) for token in tokens], tokens)
    decoded = "".join(texts)
    if to_bytes is byte_level_bytes and (CONTROL_CHARACTER.search(decoded) or UNDECODABLE.search(decoded)):
        proof = any(BYTE_LEVEL_WHITESPACE.search(token) for token in ordinary) or not UNDECODABLE.sub("", decoded).isascii()
        if not proof:
            return tokens
    return [CONTROL_CHARACTER.sub(lambda match: f"⟨0x{ord(match.group()):02X}⟩", text) for text in texts]


# Each token's bytes decoded in order (None: a special token, kept as written); a character shows on the token that
# completes it, and bytes that cannot be one as ⟨0x..⟩ on the token where that is known.
def decode_token_bytes(byte_tokens: list[bytes | None], tokens: list[str]) -> list[str]:
    decoder = codecs.getincrementaldecoder("utf-8")(errors=UNDECODABLE_BYTES)
    texts = []
    for data, token in zip(byte_tokens, tokens):
        if data is None:  # a special token ends any character cut before it
            if texts:
                texts[-1] += decoder.decode(b"", final=True)
            decoder.reset()
            texts.append(token)
        else:
            texts.append(decoder.decode(data))
    if texts:
        texts[-1] += decoder.decode(b"", final=True)
    return texts


def is_special_token(token: str) -> bool:
    return len(token) > 2 and token[0] == "<" and token[-1] == ">" and not SENTENCEPIECE_BYTE.fullmatch(token)


def sentencepiece_bytes(token: str) -> bytes:
    if SENTENCEPIECE_BYTE.fullmatch(token):
        return bytes([int(token[3:5], 16)])
    return token.replace("▁", " ").encode("utf-8")


def byte_level_bytes(token: str) -> bytes:
    return bytes(BYTE_OF_CHARACTER[character] for character in token)


# ====================================================================================================================
# Reading, 1: decoding lines into the numbers the charts need (runs in the workers).
# ====================================================================================================================


SCALAR_KEYS = ("reward", "ref_reward", "valid_reward", "ref_valid_reward", "advantage", "truncated")


TOKEN_KEYS = ("logprobs", "ref_logprobs", "entropies", "values", "token_rewards")


SUMMARY_TOKEN_KEYS = TOKEN_KEYS[:3]  # the per-token lists the first pass reduces


SUMMARY_NUMBERS = [
    "reward", "ref_reward", "valid_reward", "ref_valid_reward", "advantage", "truncated", "micro_batch", "prompt_key",
    "response_len", "ref_response_len", "response_tokens_len", "tool_tokens", "avg_logp", "avg_entropy",
    "avg_log_ratio", "sum_log_ratio", "extra_keys", "prompt_at", "prompt_bytes", "response_at", "response_bytes",
] + [f"{kind}_kl_{name}" for name in KL_ESTIMATORS for kind in ("avg", "sum")]


# Per-line texts of the index besides the numbers: the group id, and the image paths as a JSON list (None: no images).
SUMMARY_TEXTS = ["group_id", "image_paths"]


# The per-token lists of values the policy had when sampling: none for tokens a tool wrote (tool_mask 0).
POLICY_TOKEN_KEYS = ("logprobs", "ref_logprobs", "entropies")


# `"step": <int>`, the last one in a line: a hint for choosing lines before parsing them (parsing has the last word).
STEP_PATTERN = re.compile(rb'"step"\s*:(\s*-?\d+\s*[,}])?')


# The keys the first pass reads from every loaded line (everything the charts need for all steps).
# Tokens stay raw JSON there: counting them costs more than the rest of the line.
class RolloutSummary(msgspec.Struct, gc=False):
    prompt: Any
    response: Any
    reward: float | None
    step: int | float
    response_tokens: msgspec.Raw = msgspec.Raw()
    logprobs: list[float | None] | None = None
    ref_logprobs: list[float | None] | None = None
    entropies: list[float | None] | None = None
    ref_response: Any = None
    ref_reward: float | None = None
    valid_reward: float | None = None
    ref_valid_reward: float | None = None
    rewards_per_func: dict[str, float | None] | None = None
    advantage: float | None = None
    group_id: str | int | None = None
    truncated: bool | None = None
    micro_batch: Any = None  # which of its optimizer step's loss passes trained the line (rollout_logger), for TRL's kl
    tool_mask: msgspec.Raw = msgspec.Raw()  # per completion token, 0 where a tool wrote it (TRL's tools=)
    images: Any = None  # the prompt's images: paths in the run folder, or {"path", "width", "height"}


# The first pass's usual case: per-token lists kept raw, then parsed by simdjson straight into float arrays,
# without a Python float per token.
class RolloutSummaryRawArrays(RolloutSummary, gc=False):
    logprobs: msgspec.Raw = msgspec.Raw()
    ref_logprobs: msgspec.Raw = msgspec.Raw()
    entropies: msgspec.Raw = msgspec.Raw()


# The texts of a line, for the tables of the step in view (its per-token lists are skipped, not parsed).
class RolloutTexts(msgspec.Struct, gc=False):
    prompt: Any
    response: Any
    step: int | float
    ref_response: Any = None
    ground_truth: Any = None
    images: Any = None


# A whole line, read only for the sample in view.
class Rollout(RolloutSummary):
    response_tokens: list[Any] | None = None
    values: list[float | None] | None = None
    token_rewards: list[float | None] | None = None
    ground_truth: Any = None


SUMMARY_DECODER = msgspec.json.Decoder(RolloutSummary, strict=False)


TEXTS_DECODER = msgspec.json.Decoder(RolloutTexts, strict=False)


ROLLOUT_DECODER = msgspec.json.Decoder(Rollout, strict=False)


# A line as its top-level keys with their values still raw JSON: the first pass reads the summary's keys from it and
# keeps the others (EXTRA_PREFIX) at the cost of one skim of the line, as a struct alone would skim it.
LINE_FIELDS_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw])
SUMMARY_FIELDS = {field.encode_name: field.type for field in msgspec.structs.fields(RolloutSummaryRawArrays)}
SUMMARY_FIELD_DECODERS = {name: msgspec.json.Decoder(kind, strict=False) for name, kind in SUMMARY_FIELDS.items() if kind is not msgspec.Raw}


# The keys of the line format, the board's, the logger's and the original's; any other key is a field of the data the
# board keeps too: numbers (booleans as 0/1) as extra/<key> columns, short strings as text/<key> (facets when few
# distinct values); nested and long values are shown only in the sample view.
FORMAT_KEYS = frozenset(field.encode_name for struct in (Rollout, RolloutTexts) for field in msgspec.structs.fields(struct)) | {"rank"}
EXTRA_PREFIX, TEXT_PREFIX = "extra/", "text/"
EXTRA_FIELDS = 32  # kept per line, in the line's order
TEXT_FIELD_CHARACTERS = 64  # a longer string is a long value
# Columns of keys only some lines have (rewards/, extra/, text/) a file keeps: a key per line (an id used as the key)
# would otherwise make a column per line.
FIELD_COLUMNS = 256


# The workers' results. The lines of a byte range: where each is, and the step a regex sees in it.
@dataclass
class ScannedLines:
    line_index: np.ndarray  # of each non-blank line among the range's lines, from 0
    offset: np.ndarray  # in the file
    length: np.ndarray  # without its newline
    step_hint: np.ndarray  # NaN where the regex finds no integer step
    physical_lines: int  # newlines in the range, blank lines included
    complete_end: int  # the file offset past the range's last newline


# The numbers the charts need of some lines, in the order asked; problems are (position, kind, reason).
@dataclass
class LineSummaries:
    good: np.ndarray  # bool: the line decoded into a sample
    step: np.ndarray
    numbers: dict[str, np.ndarray]  # SUMMARY_NUMBERS
    texts: dict[str, list]  # SUMMARY_TEXTS
    fields: dict[str, np.ndarray]  # columns of the keys some lines have: rewards/<function>, extra/<key>, text/<key>
    problems: list[tuple[int, str, str]]


class BadLine(ValueError):
    """A line that cannot be loaded; the message says why."""


# Every newline-terminated line in data[:size]: offset, length and, where a regex finds it once, its step.
def scan_lines(data, size: int, base: int) -> "ScannedLines":
    newlines = []
    position = data.find(b"\n", 0, size)
    while position >= 0:
        newlines.append(position)
        position = data.find(b"\n", position + 1, size)
    newlines = np.array(newlines, dtype=np.int64)
    starts = np.concatenate([[0], newlines[:-1] + 1]).astype(np.int64) if len(newlines) else newlines
    lengths = newlines - starts
    step_hints = np.full(len(newlines), np.nan)
    for i, (start, end) in enumerate(zip(starts.tolist(), newlines.tolist())):
        key = data.rfind(b'"step"', start, end)
        match = STEP_PATTERN.match(data, key, end) if key >= 0 else None
        if match and match.group(1):
            step_hints[i] = float(match.group(1).strip().rstrip(b",}"))  # a step too big for int64 becomes inf
    blank = np.zeros(len(newlines), dtype=bool)
    for i in np.flatnonzero(lengths < 256):
        blank[i] = not bytes(data[starts[i] : starts[i] + lengths[i]]).strip()
    return ScannedLines(
        line_index=np.flatnonzero(~blank),
        offset=starts[~blank] + base,
        length=lengths[~blank],
        step_hint=step_hints[~blank],
        physical_lines=len(newlines),
        complete_end=base + (int(newlines[-1]) + 1 if len(newlines) else 0),
    )


# Decode lines of data (which starts at file offset base) and reduce each to the per-sample numbers the charts need.
# A record is reduced as soon as it is decoded: its floats are freed at once and their memory reused.
def summarize_buffer(data, base: int, offsets: np.ndarray, lengths: np.ndarray) -> "LineSummaries":
    view, count = memoryview(data), len(offsets)
    numbers = {name: np.full(count, np.nan) for name in SUMMARY_NUMBERS}
    steps, good, texts = np.zeros(count, dtype=np.int64), np.zeros(count, dtype=bool), {name: [None] * count for name in SUMMARY_TEXTS}
    fields: dict[str, np.ndarray] = {}
    token_arrays: dict[str, list] = {key: [] for key in SUMMARY_TOKEN_KEYS}
    problems, parser = [], simdjson.Parser()
    for row, (offset, length) in enumerate(zip((offsets - base).tolist(), lengths.tolist())):
        try:
            record, note, line = decode_summary(view[offset : offset + length], parser)
        except BadLine as error:
            problems.append((row, "skipped", str(error)))
            continue
        if note:
            problems.append((row, "note", note))
        good[row], steps[row] = True, record.step
        for name in SCALAR_KEYS:
            value = getattr(record, name)
            if value is not None:
                numbers[name][row] = value
        numbers["response_len"][row] = text_length(record.response)
        numbers["prompt_key"][row] = prompt_key(record.prompt)
        if type(record.micro_batch) is int and abs(record.micro_batch) < 2**53:
            numbers["micro_batch"][row] = record.micro_batch
        if record.ref_response is not None:
            numbers["ref_response_len"][row] = text_length(record.ref_response)
        if record.group_id is not None:
            texts["group_id"][row] = valid_text(str(record.group_id))
        if record.images is not None:
            texts["image_paths"][row] = json.dumps([image["path"] for image in image_references(record.images)[:IMAGES_SHOWN]])
        for name, score in (record.rewards_per_func or {}).items():
            fields.setdefault(f"rewards/{valid_text(name)}", np.full(count, np.nan))[row] = np.nan if score is None else score
        numbers["extra_keys"][row] = sum(name not in FORMAT_KEYS for name in line)
        for name in ("prompt", "response"):  # where the texts are, for search to read them alone (valid UTF-8: no note)
            if note is None and isinstance(line.get(name), msgspec.Raw):
                numbers[f"{name}_at"][row] = raw_offset(data, bytes(line[name]), offset, offset + length)
                numbers[f"{name}_bytes"][row] = len(line[name])
        for name, value in extra_fields(line).items():
            column = (TEXT_PREFIX if isinstance(value, str) else EXTRA_PREFIX) + name
            if column in fields or len(fields) < FIELD_COLUMNS:
                fields.setdefault(column, missing_values(column, count))[row] = value
        arrays, numbers["response_tokens_len"][row], notes = aligned_token_arrays(record, SUMMARY_TOKEN_KEYS)
        problems.extend((row, "note", text) for text in notes)
        if arrays["tool"] is not None:
            numbers["tool_tokens"][row] = arrays["tool"].sum()
        if arrays["logprobs"] is not None:
            for key, collected in token_arrays.items():
                if arrays[key] is not None:
                    collected.append((row, arrays[key], arrays["logprobs"]))
    add_token_statistics(numbers, token_arrays)
    return LineSummaries(good=good, step=steps, numbers=numbers, texts=texts, fields=fields, problems=problems)


# Decode one line: msgspec first, then Python's json for NaN/Infinity, huge numbers, bad UTF-8 and a byte order mark
# (a file written by a Windows tool starts with one).
def decode_line(raw: bytes, decoder: msgspec.json.Decoder):
    note = None
    try:
        record = decoder.decode(raw)
    except (msgspec.DecodeError, ValueError, RecursionError):  # malformed, NaN/Infinity, huge numbers, bad UTF-8, BOM, deep nesting
        raw = bytes(raw)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            text = raw.decode("utf-8", errors="replace")
            note = f"invalid UTF-8 at byte {error.start} shown as �"
        try:
            value = json.loads(text.removeprefix("\ufeff"))
        except (ValueError, RecursionError) as error:
            raise BadLine(f"not valid JSON: {getattr(error, 'msg', error)} (column {getattr(error, 'colno', '?')})") from None
        if not isinstance(value, dict):
            raise BadLine(f"a JSON {type(value).__name__}, not an object")
        try:
            record = msgspec.convert(with_raw_fields(value, decoder.type), decoder.type, strict=False)
        except (msgspec.ValidationError, TypeError, OverflowError) as error:
            raise BadLine(str(error)) from None
    return integer_step(record), note


# msgspec.convert cannot fill a field kept as raw JSON (the summary's response_tokens) from a Python value: give it
# the value's JSON (json's, which writes a lone surrogate as an escape where msgspec's encoder raises).
def with_raw_fields(value: dict, struct_type) -> dict:
    for field_info in msgspec.structs.fields(struct_type):
        if field_info.type is msgspec.Raw and field_info.encode_name in value:
            value[field_info.encode_name] = msgspec.Raw(json.dumps(value[field_info.encode_name]).encode())
    return value


# A line's summary and its fields outside the format, the fast way where simdjson takes its per-token lists as they
# are (flat lists of finite numbers); any other line (null, NaN or a nested list in a list, huge numbers, bad JSON, a
# key missing or of the wrong type...) is decoded the general way, so both give the same record.
def decode_summary(raw, parser: simdjson.Parser):
    fields = None
    try:
        fields = LINE_FIELDS_DECODER.decode(raw)
        record = RolloutSummaryRawArrays(**{
            name: value if SUMMARY_FIELDS[name] is msgspec.Raw else SUMMARY_FIELD_DECODERS[name].decode(value)
            for name, value in fields.items() if name in SUMMARY_FIELDS
        })
        arrays = {key: flat_float_list(getattr(record, key), parser) for key in SUMMARY_TOKEN_KEYS}
    except (msgspec.DecodeError, ValueError, TypeError, AttributeError, RuntimeError, RecursionError):
        record, note = decode_line(raw, SUMMARY_DECODER)
        return record, note, line_fields(raw) if fields is None else fields  # a line with nulls in its lists was split already
    for key, array in arrays.items():
        setattr(record, key, array)
    return integer_step(record), None, fields


# Where a line's raw value is, from the line's start: the first place in data[start:end] holding the same bytes
# (found by its first 16 bytes, which is several times faster than looking for all of them).
def raw_offset(data, raw: bytes, start: int, end: int) -> int:
    at = data.find(raw[:16], start, end)
    if data[at : at + len(raw)] != raw:  # another place starts alike
        at = data.find(raw, start, end)
    return at - start


# A line's top-level keys and values (raw JSON, or Python values where msgspec refuses the line: NaN, bad UTF-8...).
def line_fields(raw) -> dict:
    try:
        return LINE_FIELDS_DECODER.decode(raw)
    except (msgspec.DecodeError, ValueError, RecursionError):
        try:
            value = json.loads(bytes(raw).decode("utf-8", errors="replace").removeprefix("\ufeff"))
        except (ValueError, RecursionError):
            return {}
        return value if isinstance(value, dict) else {}


# The fields outside the format the index keeps: numbers (booleans as 0/1) and short strings, the first EXTRA_FIELDS.
def extra_fields(fields: dict) -> dict[str, float | str]:
    kept = {}
    for name, value in fields.items():
        if name in FORMAT_KEYS:
            continue
        if isinstance(value, msgspec.Raw):  # nested values are not parsed: the sample view reads them
            if bytes(memoryview(value)[:1]) in b"[{":
                continue
            value = raw_value(value)
        if isinstance(value, (bool, int, float)):
            kept[valid_text(name)] = as_float(value)
        elif isinstance(value, str) and len(value) <= TEXT_FIELD_CHARACTERS:
            kept[valid_text(name)] = valid_text(value)
        if len(kept) == EXTRA_FIELDS:
            break
    return kept


# A raw JSON list of numbers as a float array (None when the key is absent); raises on anything else.
# simdjson would flatten a nested list, so one is refused here.
def flat_float_list(raw: msgspec.Raw, parser: simdjson.Parser) -> np.ndarray | None:
    if not raw:
        return None
    text = bytes(raw)
    if text.find(b"[", 1) >= 0:
        raise ValueError("a nested list")
    return np.frombuffer(parser.parse(text).as_buffer(of_type="d"))


# A step is an integer (2.0 is 2) within int64.
def integer_step(record):
    if isinstance(record.step, float):
        if not record.step.is_integer():
            raise BadLine(f"step {record.step} is not an integer")
        record.step = int(record.step)
    if not -(2**63) <= record.step < 2**63:
        raise BadLine(f"step {str(record.step)[:12]}… ({len(str(abs(record.step)))} digits) is out of range")
    return record


# Per-token arrays of a record cut to one common length, with a note for every mismatch; "tool" marks the tokens a
# tool wrote (None: no tool_mask), whose policy values are left out (NaN) whatever the line holds.
def aligned_token_arrays(record, keys=TOKEN_KEYS) -> tuple[dict, float, list[str]]:
    arrays = {key: float_array(getattr(record, key)) for key in keys}
    lengths = [len(array) for array in arrays.values() if array is not None]
    if 0 in lengths and any(lengths):  # an empty list beside others means absent
        arrays = {key: None if array is not None and not len(array) else array for key, array in arrays.items()}
    tokens = record.response_tokens
    if isinstance(tokens, msgspec.Raw):
        tokens = None if arrays["logprobs"] is not None or not tokens else raw_value(tokens)
    tool, notes = tool_flags(record.tool_mask)
    if arrays["logprobs"] is None:
        length = float(len(tokens)) if isinstance(tokens, list) else np.nan
        return dict.fromkeys(keys) | {"tool": tool}, length, notes
    length = len(arrays["logprobs"])
    for key in keys[1:]:
        if arrays[key] is not None and len(arrays[key]) != length:
            notes.append(f"{key} has {len(arrays[key])} values, logprobs {len(arrays['logprobs'])}: token values use the first {min(length, len(arrays[key]))}")
            length = min(length, len(arrays[key]))
    if tokens is not None and len(tokens) > length:
        notes.append(f"response_tokens has {len(tokens)} entries, log-probs {length}: tokens clipped to {length}")
    elif tokens is not None and len(tokens) < length:
        notes.append(f"response_tokens has {len(tokens)} entries, log-probs {length}: missing tokens shown as '?'")
    arrays = {key: None if array is None else array[:length] for key, array in arrays.items()}
    if tool is not None:
        if len(tool) != length:
            notes.append(f"tool_mask has {len(tool)} entries, log-probs {length}: " + ("the rest are taken as sampled" if len(tool) < length else f"the first {length} are used"))
            tool = np.concatenate([tool, np.zeros(length, dtype=bool)])[:length]
        for key in POLICY_TOKEN_KEYS:
            if arrays.get(key) is not None:
                arrays[key] = np.where(tool, np.nan, arrays[key])
    return arrays | {"tool": tool}, float(length), notes


# A line's tool_mask (1: sampled by the policy, 0: written by a tool) as flags of tool tokens, or None without one;
# a mask that is not a flat list of 0/1 is ignored, with a note.
def tool_flags(raw: msgspec.Raw) -> tuple[np.ndarray | None, list[str]]:
    value = raw_value(raw) if raw else None
    if value is None:
        return None, []
    try:
        mask = np.asarray(value)
    except ValueError:  # a ragged list
        mask = np.asarray(None)
    if mask.ndim != 1 or mask.dtype.kind not in "biuf" or not np.isin(mask, (0, 1)).all():
        return None, ["tool_mask is not a list of 0 and 1: ignored, every token taken as sampled"]
    return mask == 0, []


# Per-sample sums and means of log ratio, each KL estimator, logp and entropy, in a few numpy calls.
def add_token_statistics(numbers: dict, token_arrays: dict):
    def flat(key):
        owners = np.array([owner for owner, _, _ in token_arrays[key]], dtype=np.int64)
        lengths = np.array([len(values) for _, values, _ in token_arrays[key]], dtype=np.int64)
        return owners, lengths, np.concatenate([values for _, values, _ in token_arrays[key]])

    if token_arrays["logprobs"]:
        owners, lengths, logp = flat("logprobs")
        numbers["avg_logp"][owners] = segment_sums_and_means(logp[None], lengths)[1][0]
    if token_arrays["entropies"]:
        owners, lengths, entropy = flat("entropies")
        numbers["avg_entropy"][owners] = segment_sums_and_means(entropy[None], lengths)[1][0]
    if token_arrays["ref_logprobs"]:
        owners, lengths, ref_logp = flat("ref_logprobs")
        log_ratio = np.concatenate([logp for _, _, logp in token_arrays["ref_logprobs"]]) - ref_logp
        columns = [("log_ratio", "k1")] + [(f"kl_{name}", name) for name in KL_ESTIMATORS]
        for column, estimator in columns:  # one estimator at a time: stacking them copied 5 floats per token
            with np.errstate(over="ignore", invalid="ignore"):
                per_token = kl_per_token(log_ratio, estimator)
            sums, means = segment_sums_and_means(per_token[None], lengths)
            numbers[f"sum_{column}"][owners], numbers[f"avg_{column}"][owners] = sums[0], means[0]


# A line's images as {"path", "width", "height"} (None where unknown): the logger writes dicts, other tools may write
# paths; one image alone may stand without a list. A path that is no string is None (shown as a problem).
def image_references(value) -> list[dict]:
    references = []
    for item in value if isinstance(value, list) else [value]:
        item = item if isinstance(item, dict) else {"path": item}
        size = {key: item.get(key) if type(item.get(key)) is int else None for key in ("width", "height")}
        path = item.get("path")
        references.append({"path": valid_text(path) if isinstance(path, str) else None, **size})
    return references


# The same prompt text gives the same key, held exactly by a float (53 bits): the lines of one prompt across the run
# are found from the index alone, then their texts compared.
def prompt_key(prompt) -> float:
    text = as_text(prompt)
    if text is None:
        return np.nan
    return float(int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 11)


# Text of a free-form field: strings as they are, anything else as JSON.
def as_text(value) -> str | None:
    if value is None:
        return None
    return valid_text(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))


# Characters in a free-form field as shown. A string's count needs no check: valid_text puts one � for each lone
# surrogate, and checking every response would be a noticeable share of the first pass.
def text_length(value) -> int:
    return len(value) if isinstance(value, str) else len(as_text(value) or "")


# Text UTF-8 can carry: a lone surrogate (valid JSON: "\ud83d", e.g. an emoji cut in half) or a file name's undecodable
# byte becomes �. Tables, the page and the cache all need UTF-8, and would fail on the whole run for one such line.
def valid_text(text: str) -> str:
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


# A raw JSON value the first pass kept (it is valid JSON): msgspec refuses a lone surrogate escape, Python's json takes it.
def raw_value(raw: msgspec.Raw):
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, ValueError):  # a lone surrogate escape, or bytes that are not UTF-8 (shown as �)
        return json.loads(bytes(raw).decode(errors="replace"))


def float_array(values) -> np.ndarray | None:
    return None if values is None else np.asarray(values, dtype=float)


# ====================================================================================================================
# Reading, 2: the per-file index (where each line is, its step and numbers) and its cache on disk.
# ====================================================================================================================


CACHE_FORMAT = 5


LINE_COLUMNS = {"line": np.int64, "offset": np.int64, "length": np.int64, "step": float, "status": np.int8}


UNPARSED, GOOD, BAD = 0, 1, 2


INDEX_COLUMNS = list(LINE_COLUMNS) + SUMMARY_NUMBERS + SUMMARY_TEXTS


LAUNCH_PATTERN = re.compile(r"_rank_(\d+)_(.+)\.jsonl$")


# A file's identity when indexed: a replaced, truncated or rewritten file never matches it.
@dataclass
class FileIdentity:
    size: int
    mtime_ns: int
    inode: int
    device: int
    indexed_to: int
    head_hash: str
    tail_hash: str
    etag: str = ""  # an object's, on object storage (where mtime, inode and device are 0)


# Hash the first and last 4 KiB of the indexed bytes: enough to tell an append from a rewrite.
def read_identity(path: str, indexed_to: int, status: "FileStatus | None" = None) -> FileIdentity | None:
    try:
        status = status or file_status(path)
        head = bytes(read_range(path, 0, min(indexed_to, 4096))[0][: min(indexed_to, 4096)])
        tail_start = max(0, indexed_to - 4096)
        tail = bytes(read_range(path, tail_start, indexed_to)[0][: indexed_to - tail_start])
    except OSError:
        return None
    return FileIdentity(
        size=status.size,
        mtime_ns=status.mtime_ns,
        inode=status.inode,
        device=status.device,
        indexed_to=indexed_to,
        head_hash=hashlib.sha1(head).hexdigest(),
        tail_hash=hashlib.sha1(tail).hexdigest(),
        etag=status.etag,
    )


# One rank file: a row per line with where it is, its step and, once parsed, its numbers.
class FileIndex:
    def __init__(self, path: str):
        self.path = path
        self.launch = launch_of(path)
        self.reset()

    def reset(self):
        self.index_id = uuid.uuid4().hex  # new whenever the file is indexed from scratch: till then it only grew
        self.identity: FileIdentity | None = None
        self.indexed_to = 0
        self.physical_lines = 0
        self.incomplete_tail = 0
        self.lines = {name: np.array([], dtype=dtype) for name, dtype in LINE_COLUMNS.items()} | empty_summaries(0)
        self.problems: list[tuple[int, str, str]] = []

    # "same", "grew" (read on from indexed_to) or "new" (replaced, truncated, rewritten or never indexed). An object on
    # object storage is the same while its size and ETag are; one uploaded again with more bytes grew when the bytes
    # indexed are unchanged.
    def change(self, status: "FileStatus | None" = None) -> str:
        old = self.identity
        try:
            status = status or file_status(self.path)
        except OSError:
            return "same"
        if old is None or (status.inode, status.device) != (old.inode, old.device) or status.size < old.indexed_to:
            return "new"
        if (status.size, status.mtime_ns, status.etag) == (old.size, old.mtime_ns, old.etag):
            return "same"
        if status.size == old.size:  # touched or rewritten in place: appends always grow a file
            return "new"
        now = read_identity(self.path, old.indexed_to)
        if now is None or (now.head_hash, now.tail_hash) != (old.head_hash, old.tail_hash):
            return "new"
        return "grew"

    # Append indexed chunks (in file order) and settle what follows the last newline.
    def add_chunks(self, chunks: list["IndexedChunk"], size: int):
        first_rows = []
        parts = []
        rows = len(self.lines["offset"])
        for chunk in chunks:
            lines = chunk.lines
            parts.append({
                "line": lines.line_index + self.physical_lines + 1,
                "offset": lines.offset,
                "length": lines.length,
                "step": lines.step_hint,
                "status": np.full(len(lines.offset), UNPARSED, dtype=np.int8),
            } | empty_summaries(len(lines.offset)))
            first_rows.append(rows)
            rows += len(lines.offset)
            self.physical_lines += lines.physical_lines
            self.indexed_to = lines.complete_end
        if chunks:  # a rewards/<name> or extra column exists once a parsed line had it: missing in the new rows
            self.lines = {
                name: np.concatenate([column] + [part.get(name, missing_values(name, len(part["offset"]))) for part in parts])
                for name, column in self.lines.items()
            }
        for first_row, chunk in zip(first_rows, chunks):
            self.add_summaries(first_row + chunk.parsed_rows, chunk.summary)
        self.take_tail(size)

    # Bytes after the last newline: a complete JSON object is a last line without "\n"; anything else is still being written.
    def take_tail(self, size: int):
        self.incomplete_tail = 0
        if size <= self.indexed_to:
            return
        tail = bytes(read_range(self.path, self.indexed_to, size)[0][: size - self.indexed_to])
        if not tail.strip():
            return
        try:
            json.loads(tail.decode("utf-8", errors="replace"))
        except ValueError:
            self.incomplete_tail = 1
            return
        data = tail + b"\n"
        lines = dataclasses.replace(scan_lines(data, len(data), self.indexed_to), complete_end=size)
        summary = summarize_buffer(data, self.indexed_to, lines.offset, lines.length)
        self.add_chunks([IndexedChunk(lines, np.arange(len(lines.offset)), summary)], size)

    # Store parse results for rows of self.lines, in place.
    def add_summaries(self, rows: np.ndarray, result: "LineSummaries"):
        lines, good = self.lines, result.good
        lines["status"][rows] = np.where(good, GOOD, BAD)
        lines["step"][rows[good]] = result.step[good]
        fields = sum(name.startswith(("rewards/", EXTRA_PREFIX, TEXT_PREFIX)) for name in lines)
        for name, values in (result.numbers | result.texts | result.fields).items():
            if name not in lines and name in result.fields:
                if fields >= FIELD_COLUMNS:
                    continue
                fields += 1
            lines.setdefault(name, missing_values(name, len(lines["offset"])))[rows] = values
        self.problems += [(int(lines["line"][rows[i]]), kind, text) for i, kind, text in result.problems]

    # Where scanning resumes: past the newline that ends a last line taken without one.
    def scan_start(self) -> int:
        offsets, lengths = self.lines["offset"], self.lines["length"]
        if self.indexed_to and offsets.size and offsets[-1] + lengths[-1] == self.indexed_to:
            buffer, got = read_range(self.path, self.indexed_to, self.indexed_to + 1)
            if got and buffer[0] == ord("\n"):
                self.indexed_to += 1
        return self.indexed_to


# The summary columns of lines not parsed yet. Present from the start, so that storing a parse replaces columns
# instead of inserting them, which dominated loading runs of many small files.
def empty_summaries(count: int) -> dict:
    return {name: missing_values(name, count) for name in SUMMARY_NUMBERS + SUMMARY_TEXTS}


# An index column of count missing values: None in a column of texts, NaN in a column of numbers.
def missing_values(name: str, count: int) -> np.ndarray:
    texts = name in SUMMARY_TEXTS or name.startswith(TEXT_PREFIX)
    return np.full(count, None, dtype=object) if texts else np.full(count, np.nan)


# Index files survive server restarts in a cache folder outside the run (which may be read-only). One file per
# rank file, its facts in the table's own metadata: one atomic replace writes both, so a crash between two
# writes, or two servers sharing the folder, can never pair a table with another write's facts.
class IndexCache:
    def __init__(self):
        default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rl_logging_board"
        self.folder = Path(os.environ.get("RL_LOGGING_BOARD_CACHE") or default)
        self.error: str | None = None

    def path_of(self, path: str) -> Path:
        return self.folder / f"{hashlib.sha1(os.fsencode(canonical_path(path))).hexdigest()[:20]}.arrow"

    # The cached index of path, or None when absent, damaged or from another version of the board.
    def load(self, path: str) -> FileIndex | None:
        try:
            table = pyarrow.feather.read_table(self.path_of(path))
            meta = json.loads(table.schema.metadata[b"rl_logging_board"])
            if meta["format"] != CACHE_FORMAT or meta["path"] != canonical_path(path) or not set(INDEX_COLUMNS) <= set(table.column_names):
                return None
            index = FileIndex(path)
            index.identity = FileIdentity(**meta["identity"])
            index.indexed_to = int(meta["identity"]["indexed_to"])
            index.physical_lines = int(meta["physical_lines"])
            index.incomplete_tail = int(meta["incomplete_tail"])
            index.problems = [tuple(problem) for problem in meta["problems"]]
            index.lines = {name: np.array(column.to_numpy(zero_copy_only=False)) for name, column in zip(table.column_names, table.columns)}
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
            return None
        return index

    # Write atomically; a cache that cannot be written costs speed, never data.
    def save(self, index: FileIndex):
        if index.identity is None:
            return
        meta = dict(
            format=CACHE_FORMAT,
            path=canonical_path(index.path),
            identity=index.identity.__dict__,
            physical_lines=index.physical_lines,
            incomplete_tail=index.incomplete_tail,
            problems=index.problems,
        )
        columns = {name: pa.array(column, type=pa.string()) if column.dtype == object else column for name, column in index.lines.items()}
        table = pa.table(columns).replace_schema_metadata({"rl_logging_board": json.dumps(meta)})
        target = self.path_of(index.path)
        temporary = target.with_name(f"{target.name}.{uuid.uuid4().hex}.tmp")  # each writer its own
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            pyarrow.feather.write_feather(table, temporary, compression="uncompressed")
            os.replace(temporary, target)
        except OSError as error:
            self.error = f"index cache not written to {self.folder}: {error}"
            with contextlib.suppress(OSError):
                temporary.unlink()


_read_buffers = threading.local()


# Bytes [start, end) of a file in a buffer reused per thread: allocating 100 MB anew costs more than reading it.
def read_range(path: str, start: int, end: int) -> tuple[bytearray, int]:
    if is_remote(path):
        data = read_remote_range(path, start, end)
        return data, len(data)
    wanted = end - start
    buffer = getattr(_read_buffers, "buffer", None)
    if buffer is None or len(buffer) < wanted:
        buffer = _read_buffers.buffer = bytearray(wanted + wanted // 8)  # headroom: the next chunk is a few lines longer
    view, got = memoryview(buffer), 0
    with open(path, "rb", buffering=0) as file:
        file.seek(start)
        while got < wanted:
            count = file.readinto(view[got:wanted])
            if not count:
                break
            got += count
    return buffer, got


# A file as the index cache knows it: its real path, or its URL (with the S3 endpoint: two stores may share names).
def canonical_path(path: str) -> str:
    if not is_remote(path):
        return os.path.realpath(path)
    endpoint = os.environ.get("AWS_ENDPOINT_URL") if path.lower().startswith("s3://") else None
    return f"{path} at {endpoint}" if endpoint else path


def launch_of(path: str) -> str:
    match = LAUNCH_PATTERN.search(Path(path).name)
    return match.group(2) if match else ""


# "run_9" before "run_10": launch ids that are counters sort by number (the logger's timestamps sort either way).
def natural_order(text: str) -> list:
    return [int(part) if part.isdecimal() else part for part in re.split(r"(\d+)", text)]  # "²" is a digit, not a number


# ====================================================================================================================
# Reading, 3: the store of a run folder and its worker processes.
# ====================================================================================================================


PARALLEL_MIN_BYTES = 48 << 20


CHUNK_BYTES = 32 << 20


WORKERS = os.cpu_count() or 1
MODULE_NAME = Path(__file__).stem
# What a worker runs as it starts: it imports this file for the functions its tasks name, but only reads lines, so
# Streamlit and plotly are replaced by a stand-in whose decorators return the function as it is (importing them cost
# each worker about 40 MB and as much CPU as the rest of its start, while the page opens: bench/README.md).
WORKER_START = f"""
import importlib, sys, types

class PageLibraryStandIn(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):  # what import machinery and pickling ask of a real module
            raise AttributeError(name)
        return PageLibraryStandIn(name)

    def __call__(self, *args, **kwargs):  # a decorator, bare or with options
        bare = len(args) == 1 and callable(args[0]) and not kwargs
        return args[0] if bare else (lambda function: function)

for name in ("streamlit", "plotly", "plotly.graph_objects"):
    sys.modules[name] = PageLibraryStandIn(name)
importlib.import_module({MODULE_NAME!r})
"""


# A byte range indexed in one read: its lines, and the summaries of the rows parsed on the way.
@dataclass
class IndexedChunk:
    lines: ScannedLines
    parsed_rows: np.ndarray
    summary: LineSummaries


# A run folder, indexed incrementally: each load reads only what changed on disk since the last.
class RunStore:
    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self.files: dict[str, FileIndex] = {}
        self.cache = IndexCache()
        self.lock = threading.Lock()
        self.snapshot: "RunSnapshot | None" = None
        self.built_format = RunFormat("")  # the format the snapshot was built with: its notes, skipped files and weights
        self.conversions: dict[str, tuple] = {}  # source -> (its stamp, its conversion's path), as made or checked last
        self.failures: dict[str, tuple] = {}  # source -> ((status, context), problem) of its last failed conversion

    # The files to index, with their status: the rank files, or the conversions of another trainer's files (made here
    # when new or changed). One listing: a stat per file on disk, one request per folder on object storage. A file
    # whose name is not UTF-8 is listed in the load report instead (tables and caches need UTF-8).
    def current_files(self) -> tuple[dict[str, "FileStatus"], "RunFormat"]:
        sources, run_format = run_sources(self.run_dir)
        if run_format.convert is None:
            return sources, run_format
        folder = conversions_folder(self.cache, self.run_dir)
        with ThreadPoolExecutor(max_workers=CONVERSION_THREADS) as pool:  # on object storage the files are fetched at once
            results = list((pool.map if is_remote(self.run_dir) else map)(lambda item: self.conversion(*item, run_format, folder), sources.items()))
        run_format = dataclasses.replace(run_format, problems=run_format.problems + tuple(problem for _, problem in results if problem))
        return {path: file_status(path) for path, _ in results if path}, run_format

    # A source file's conversion, or the problem that stops it (tried again only once the file changed).
    def conversion(self, source: str, status: "FileStatus", run_format: "RunFormat", folder: Path) -> tuple[str | None, tuple | None]:
        failed = self.failures.get(source)
        if failed and failed[0] == (status, run_format.context):
            return None, failed[1]
        try:
            return converted_file(source, status, run_format, folder, self.conversions), None
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as error:  # e.g. a parquet file still being written
            reason = f"could not be read as {run_format.name} ({shorten(str(error), 200)}); still being written? It is read again when it changes"
            problem = (valid_text(source.rsplit("/", 1)[-1]), 0, "skipped", reason)
            self.failures[source] = ((status, run_format.context), problem)
            return None, problem

    # The run's files and format as listed now when load() would read anything, else None. Cheap: a listing.
    def pending(self, max_samples: int) -> tuple[dict[str, "FileStatus"], "RunFormat"] | None:
        listing, run_format = self.current_files()
        if self.snapshot is None or self.snapshot.max_samples != max_samples or list(listing) != list(self.files) or run_format != self.built_format:
            return listing, run_format
        return (listing, run_format) if any(self.files[path].change(status) != "same" for path, status in listing.items()) else None

    def needs_work(self, max_samples: int) -> bool:
        return self.pending(max_samples) is not None

    # Bring every file up to date, parse what the selection needs, and return an immutable snapshot.
    def load(self, max_samples: int, files_progress=None, samples_progress=None, parallel: bool | None = None) -> "RunSnapshot":
        with self.lock:
            pending = self.pending(max_samples)  # what is read: a write during the pass shows as a change next time
            if pending is None:
                return self.snapshot
            listing, run_format = pending
            self.files = {path: self.files.get(path) or self.cache.load(path) or FileIndex(path) for path in listing}
            changed = []
            for index in self.files.values():
                change = index.change(listing[index.path])
                if change == "new":
                    index.reset()
                if change != "same":
                    changed.append(index)
            jobs = []
            for index in changed:
                size = listing[index.path].size
                jobs.append((index, size, line_aligned_chunks(index.path, index.scan_start(), size)))
            if parallel is None:
                parallel = WORKERS > 1 and sum(size - index.indexed_to for index, size, _ in jobs) > PARALLEL_MIN_BYTES
            self.index_files(jobs, max_samples, parallel, files_progress, samples_progress)
            selected = self.parse_selected(max_samples, parallel, samples_progress)
            for index in changed:
                index.identity = read_identity(index.path, index.indexed_to, listing[index.path])
                self.cache.save(index)
            self.built_format = run_format
            self.snapshot = build_run(self.run_dir, self.files, selected, max_samples, run_format, self.cache.error)
            return self.snapshot

    # One pass over the new bytes of every changed file, chunks spread over the workers. Each chunk parses its file's
    # share of Max Samples Each Step per step: new lines are only in the changed files of a launch, so a step appended
    # to one rank file is parsed there in full, and one appended to every rank file a share in each.
    def index_files(self, jobs: list, max_samples: int, parallel: bool, files_progress, samples_progress):
        changed_per_launch = Counter(index.launch for index, _, _ in jobs)
        tasks = [
            (index_chunk, (index.path, start, end, math.ceil(max_samples / changed_per_launch[index.launch])))
            for index, _, chunks in jobs
            for start, end in chunks
        ]
        results = run_tasks(tasks, parallel)
        total_bytes = max(sum(end - start for _, _, chunks in jobs for start, end in chunks), 1)
        files_done, bytes_done, lines_done = len(self.files) - len(jobs), 0, 0
        for index, size, chunks in jobs:
            indexed = []
            for start, end in chunks:
                indexed.append(next(results))
                bytes_done += end - start
                lines_done += len(indexed[-1].lines.offset)
                if samples_progress:
                    samples_progress(bytes_done / total_bytes, f"Processing {lines_done} samples...")
            index.add_chunks(indexed, size)
            files_done += 1
            if files_progress:
                files_progress(files_done / len(self.files), f"Loading {files_done} / {len(self.files)} files...")
        if files_progress and not jobs:
            files_progress(1.0, f"Loading {len(self.files)} / {len(self.files)} files...")

    # Parse lines of unknown step first, then what the selection wants, until it wants nothing new
    # (a line that turns out bad makes room for the next one of its step); returns the selection.
    def parse_selected(self, max_samples: int, parallel: bool, progress) -> "Selection":
        unknown = {path: np.flatnonzero((index.lines["status"] == UNPARSED) & np.isnan(index.lines["step"])) for path, index in self.files.items()}
        self.parse_rows(unknown, parallel, progress)
        while True:
            wanted = select_lines(self.files, max_samples)
            todo = {path: rows[self.files[path].lines["status"][rows] == UNPARSED] for path, rows in wanted.rows.items()}
            if not any(len(rows) for rows in todo.values()):
                return wanted
            self.parse_rows(todo, parallel, progress)

    def parse_rows(self, todo: dict, parallel: bool, progress):
        tasks, owners = [], []
        for path, rows in todo.items():
            lines = self.files[path].lines
            offsets, lengths = lines["offset"], lines["length"]
            for part in batches_of_rows(rows, lengths):
                tasks.append((summarize_lines, (path, offsets[part], lengths[part])))
                owners.append((path, part))
        total, done = sum(len(part) for _, part in owners), 0
        for (path, part), result in zip(owners, run_tasks(tasks, parallel)):
            self.files[path].add_summaries(part, result)
            done += len(part)
            if progress:
                progress(done / total, f"Processing {done} / {total} more samples...")


# Worker: index bytes [start, end) of a file: every line's place and step, and the numbers of the
# lines that will likely be shown (the first parse_per_step of each step: a file's share of
# Max Samples Each Step), all in one read.
def index_chunk(path: str, start: int, end: int, parse_per_step: int) -> "IndexedChunk":
    gc.disable()  # decoding makes millions of short-lived objects and no cycles: collections only cost time
    try:
        return index_chunk_bytes(*read_range(path, start, end), start, parse_per_step)
    finally:
        gc.enable()


def index_chunk_bytes(buffer, size: int, start: int, parse_per_step: int) -> "IndexedChunk":
    lines = scan_lines(buffer, size, start)
    seen: dict[float, int] = {}
    parse = []
    for row, step in enumerate(lines.step_hint.tolist()):
        seen[step] = seen.get(step, 0) + 1
        if math.isnan(step) or seen[step] <= parse_per_step:
            parse.append(row)
    parse = np.array(parse, dtype=np.int64)
    return IndexedChunk(lines, parse, summarize_buffer(buffer, start, lines.offset[parse], lines.length[parse]))


# Worker: the numbers of some lines of a file (those a new selection wants and the first pass skipped), read one
# by one: the lines may lie far apart in a big file.
def summarize_lines(path: str, offsets: np.ndarray, lengths: np.ndarray) -> "LineSummaries":
    data = b"".join(read_spans([path] * len(offsets), offsets.tolist(), lengths.tolist()))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return summarize_buffer(data, 0, starts, lengths)


# Split bytes [start, end) into ~CHUNK_BYTES pieces that begin at line starts, for workers to scan alone.
def line_aligned_chunks(path: str, start: int, end: int) -> list[tuple[int, int]]:
    bounds, position = [start], start + CHUNK_BYTES
    while position < end:
        buffer, got = read_range(path, position, min(position + (1 << 16), end))
        newline = buffer.find(b"\n", 0, got)
        if newline < 0:
            position += got
            if not got:
                break
            continue
        position += newline + 1
        if position >= end:
            break
        bounds.append(position)
        position += CHUNK_BYTES
    bounds.append(end)
    return [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


# Rows to parse in batches of about 8 MB, so the progress bar moves and workers share the load.
def batches_of_rows(rows: np.ndarray, lengths: np.ndarray, batch_bytes: int = 8 << 20) -> list[np.ndarray]:
    if not len(rows):
        return []
    sizes = np.cumsum(lengths[rows])
    cuts = np.searchsorted(sizes, np.arange(batch_bytes, sizes[-1], batch_bytes))
    return [part for part in np.split(rows, cuts) if len(part)]


# Run (function, args) tasks on the worker processes, or here when small; yields results in task order.
def run_tasks(tasks: list, parallel: bool):
    if not parallel or len(tasks) < 2:
        for function, args in tasks:
            yield function(*args)
        return
    module = importlib.import_module(MODULE_NAME)
    futures = [worker_pool().submit(getattr(module, function.__name__), *args) for function, args in tasks]
    for future in futures:
        yield future.result()


# One pool of worker processes per server, kept by this file imported as a module (MODULE_NAME): the page runs it as
# __main__ too, anew on every rerun, and a pool cached there would be a new one each time; the lock keeps sessions
# opening at once from starting one each. Tasks name functions of that module, so they pickle by name; each worker
# imports it once, as it starts (WORKER_START), and main() starts them before the user presses Load & View. Spawned,
# never forked: forked from the server they would share its sockets and threads (the page's charts then sometimes
# never drew).
def worker_pool() -> ProcessPoolExecutor:
    module = importlib.import_module(MODULE_NAME)
    with module.WORKER_POOL_LOCK:
        return module.started_worker_pool()


WORKER_POOL_LOCK = threading.Lock()


@functools.cache
def started_worker_pool() -> ProcessPoolExecutor:
    pool = ProcessPoolExecutor(max_workers=WORKERS, mp_context=multiprocessing.get_context("spawn"), initializer=exec, initargs=(WORKER_START, {}))
    # A spawned process first runs its parent's __main__ again, which in the server is the page (Streamlit runs it as
    # __main__), Streamlit and plotly included: __main__'s file is hidden while the workers start (they all start on
    # these first tasks, long before one is idle), so they import only what WORKER_START asks for.
    main = sys.modules["__main__"]
    spec, file = main.__spec__, main.__dict__.pop("__file__", None)
    main.__spec__ = None
    try:
        for _ in range(WORKERS):
            pool.submit(int)
    finally:
        main.__spec__ = spec
        if file is not None:
            main.__file__ = file
    return pool


# ====================================================================================================================
# Reading, 4: the run snapshot the page draws, and the step's and sample's lines read back.
# ====================================================================================================================


FACET_VALUES = 50  # a short text field with more distinct values is a column, not a facet


REPORT_COLUMNS = [
    "file", "lines", "loaded", "bad lines", "not loaded (Max Samples Each Step)", "replaced by a newer launch", "incomplete last line",
]


# The lines a load shows, per file, and how many usable lines each file has that a newer launch replaced.
class Selection(NamedTuple):
    rows: dict[str, np.ndarray]
    replaced: dict[str, int]


# Which rows each file contributes. A resumed run starts a new launch at its checkpoint's step: every step an older
# launch logged from the newer launch's first step on was abandoned by training (re-logged, or a trajectory the resume
# dropped), so it is left out and counted. Then up to max_samples per step, taken round-robin over the rank files.
def select_lines(files: dict[str, FileIndex], max_samples: int) -> Selection:
    file_of, row, step, launch_of_row = [], [], [], []
    launches = sorted({index.launch for index in files.values()}, key=lambda launch: (natural_order(launch), launch))
    for position, index in enumerate(files.values()):
        lines = index.lines
        usable = np.flatnonzero((lines["status"] != BAD) & ~np.isnan(lines["step"]))
        file_of.append(np.full(len(usable), position))
        row.append(usable)
        step.append(lines["step"][usable])
        launch_of_row.append(np.full(len(usable), launches.index(index.launch)))
    paths = list(files)
    if not row:
        return Selection({}, {})
    file_of, row, step, launch_of_row = (np.concatenate(parts) for parts in (file_of, row, step, launch_of_row))
    first_step = np.full(len(launches), np.inf)
    np.minimum.at(first_step, launch_of_row, step)
    # A launch's lines end where any newer launch begins.
    ends = np.minimum.accumulate(first_step[::-1])[::-1]
    ends = np.append(ends[1:], np.inf)
    current = step < ends[launch_of_row]
    replaced = {paths[position]: int(count) for position, count in enumerate(np.bincount(file_of[~current], minlength=len(paths))) if count}
    file_of, row, step = file_of[current], row[current], step[current]
    _, step_of_row = np.unique(step, return_inverse=True)
    turn = position_in_group(np.lexsort((row, file_of, step_of_row)), step_of_row * len(files) + file_of)
    chosen = position_in_group(np.lexsort((file_of, turn, step_of_row)), step_of_row) < max_samples
    rows = {paths[position]: np.sort(row[chosen][file_of[chosen] == position]) for position in np.unique(file_of[chosen])}
    return Selection(rows, replaced)


# For each element, its position among the elements of the same group when taken in the given order
# (an order that keeps each group together: sorted by group first).
def position_in_group(order: np.ndarray, group: np.ndarray) -> np.ndarray:
    ordered = group[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    positions = np.empty(len(order), dtype=np.int64)
    positions[order] = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    return positions


# What the page draws: the selected, parsed samples of every step, and the load report.
@dataclass(frozen=True)
class RunSnapshot:
    run_dir: str
    samples: pd.DataFrame
    report: pd.DataFrame
    problems: pd.DataFrame
    meta: dict | None
    max_samples: int
    downsampled: bool
    version: tuple
    steps: list = field(default_factory=list)
    reward_function_columns: list = field(default_factory=list)
    extra_columns: list = field(default_factory=list)  # extra/<key>: numbers of keys outside the format
    facets: list = field(default_factory=list)  # text/<key> with at most FACET_VALUES distinct values
    image_problems: int = 0  # images named by the loaded lines that cannot be shown (rows of problems)
    format: str = ""  # how the files were read (RunFormat.name)
    reward_note: str = ""  # how reward was made from the reward functions' scores, where the board made it (TRL's files)
    history_dir: str = ""  # where its training history is: the run folder, or the output folder of TRL's completions/
    reward_weights: dict = field(default_factory=dict)  # TRL's: the weights reward was summed with ({}: all 1)

    def step_rows(self, step: int) -> pd.DataFrame:
        return self.samples[self.samples["step"] == step].reset_index(drop=True)

    def previous_step(self, step: int) -> int | None:
        position = self.steps.index(step)
        return self.steps[position - 1] if position else None

    def step_mean(self, column: str) -> dict:
        return self.samples.groupby("step")[column].mean().to_dict()


def build_run(run_dir: str, files: dict[str, FileIndex], selected: "Selection", max_samples: int, run_format: "RunFormat", cache_error: str | None = None) -> RunSnapshot:
    chosen, report, problems = [], [], []
    for path, index in files.items():
        rows = selected.rows.get(path, np.array([], dtype=np.int64))
        chosen.append(rows)
        status = index.lines["status"]
        name = valid_text(Path(path).name)
        bad, replaced = int((status == BAD).sum()), selected.replaced.get(path, 0)
        report.append([name, len(status), len(rows), bad, len(status) - len(rows) - bad - replaced, replaced, index.incomplete_tail])
        problems += [[name, line, kind, valid_text(text)] for line, kind, text in index.problems]
        if index.incomplete_tail:
            problems.append([name, index.physical_lines + 1, "incomplete", "the last line has no end yet: still being written, or cut off"])
    if cache_error:
        problems.append(["", 0, "note", cache_error])
    problems += [list(problem) for problem in run_format.problems]
    with contextlib.suppress(OSError):
        for entry in list_folder(run_dir):
            if entry.name.endswith(".jsonl") and valid_text(entry.name) != entry.name:
                problems.append([valid_text(entry.name), 0, "skipped", "the file name is not valid UTF-8: rename the file to load it"])
    names = list(dict.fromkeys(name for index in files.values() for name in index.lines))  # rewards/* differ by file
    samples = pd.DataFrame({
        name: np.concatenate([index.lines[name][rows] if name in index.lines else missing_values(name, len(rows)) for index, rows in zip(files.values(), chosen)])
        for name in names
    }) if files else pd.DataFrame(columns=list(LINE_COLUMNS))
    counts = [len(rows) for rows in chosen]
    samples["path"] = np.repeat(np.array(list(files), dtype=object), counts)  # one column each, not one per file
    samples["index_id"] = np.repeat(np.array([index.index_id for index in files.values()], dtype=object), counts)
    for column in SUMMARY_NUMBERS + SUMMARY_TEXTS:
        if column not in samples:
            samples[column] = np.nan
    samples["step"] = samples["step"].astype(np.int64)
    samples = samples.sort_values(["step", "path", "offset"], kind="stable").reset_index(drop=True)
    samples["sample"] = samples.groupby("step").cumcount()  # its index in the step's batch
    meta = read_meta(run_dir)
    reward_note, trl = "", run_format.convert is trl_completion_lines
    if trl:
        samples["reward"] = total_reward(samples, dict(run_format.weights))
        reward_note = reward_sum_note(dict(run_format.weights), "the logger's metadata")
    samples["reward_gap"] = samples["reward"] - samples["ref_reward"]
    samples["valid_reward_gap"] = samples["valid_reward"] - samples["ref_valid_reward"]
    report = pd.DataFrame(report, columns=REPORT_COLUMNS)
    missing_images = image_problems(samples)
    problems += missing_images
    return RunSnapshot(
        run_dir=run_dir,
        samples=samples,
        report=report,
        problems=pd.DataFrame(problems, columns=["file", "line", "kind", "reason"]),
        meta=meta,
        max_samples=max_samples,
        downsampled=bool(report["not loaded (Max Samples Each Step)"].sum()),
        version=(run_dir, max_samples, run_format.weights, tuple((path, index.identity and (index.identity.size, index.identity.mtime_ns, index.identity.etag)) for path, index in files.items())),
        steps=sorted(int(step) for step in samples["step"].unique()),
        reward_function_columns=sorted(column for column in samples.columns if column.startswith("rewards/")),
        extra_columns=sorted(column for column in samples.columns if column.startswith(EXTRA_PREFIX) and samples[column].notna().any()),
        facets=sorted(column for column in samples.columns if column.startswith(TEXT_PREFIX) and 1 <= samples[column].nunique() <= FACET_VALUES),
        image_problems=sum(kind == "image" for _, _, kind, _ in missing_images),
        format=run_format.name,
        reward_note=reward_note,
        history_dir=trl_output_folder(run_dir) if trl else run_dir,
        reward_weights=dict(run_format.weights),
    )


# The newest rollout_meta_*.json of the run, if the logger wrote one.
def read_meta(run_dir: str) -> dict | None:
    try:
        entries = list_folder(run_dir)
    except OSError:
        return None
    for entry in reversed(entries):
        if entry.is_dir or not fnmatch.fnmatch(entry.name, "rollout_meta*.json"):  # list_folder lists regular files: a FIFO would block the page forever
            continue
        try:
            value = json.loads(read_file(entry.path).decode("utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    return None


# Runs are the root's sub-folders; the root itself is one too when it holds rank files or a training history (a user
# pointed it at a run or at a training output folder, whose checkpoint-* folders are not runs of their own).
# On object storage, a folder is a run when it holds rank files or TRL's completions.
def list_runs(root: str) -> list[str]:
    entries = list_folder(root if is_remote(root) else str(Path(root).expanduser()))
    data = any(not entry.is_dir and (entry.name.endswith(".jsonl") or TRL_COMPLETIONS_FILE.fullmatch(entry.name)) for entry in entries)
    is_run = data or any(entry.is_dir and entry.name == TRL_COMPLETIONS_FOLDER for entry in entries)
    is_run = is_run or (not is_remote(root) and history_signature(Path(root).expanduser()) != ())
    part_of_run = lambda name: CHECKPOINT_FOLDER.fullmatch(name) or name == TRL_COMPLETIONS_FOLDER  # noqa: E731
    return (["."] if is_run else []) + [entry.name for entry in entries if entry.is_dir and not (is_run and part_of_run(entry.name))]


# Which lines a step shows, as a short key: the same key means the same bytes (as far as FileIndex.change
# can tell), so a live refresh that only appended to the files reuses the step's texts, charts and tables. The rewards
# are in it too: typed reward weights change them and not the lines.
def lines_key(rows: pd.DataFrame) -> str:
    lines = zip(rows["path"], rows["index_id"].tolist(), rows["offset"].tolist(), rows["length"].tolist(), rows["reward"].tolist())
    return hashlib.sha1(repr(list(lines)).encode()).hexdigest()


# A step's lines with their texts read back, for the tables and the samples pair; problems say which lines could not be.
@dataclass
class StepBatch:
    key: str
    table: pd.DataFrame
    problems: list[str]


# Read back the texts of a step's lines (the index keeps only numbers), each line checked to hold its step still.
def read_step_batch(key: str, rows: pd.DataFrame) -> StepBatch:
    texts = {name: [] for name in ("prompt", "response", "ref_response", "ground_truth")}
    images, problems, raw_lines = [], [], None
    with contextlib.suppress(OSError):  # all at once (on object storage, a few requests at the same time); else line by line, each saying why
        raw_lines = read_spans(rows["path"].tolist(), rows["offset"].tolist(), rows["length"].tolist())
    for position, (path, offset, length, line, step) in enumerate(zip(rows["path"], rows["offset"], rows["length"], rows["line"], rows["step"])):
        try:
            record, _ = decode_line(raw_lines[position] if raw_lines else read_line(path, offset, length), TEXTS_DECODER)
            ensure_same_step(record, step)
        except (OSError, BadLine) as error:
            problems.append(read_back_problem(path, line, error))
            record = None
        for name in texts:
            text = as_text(getattr(record, name)) if record else None
            texts[name].append(text or "" if name in ("prompt", "response") else text)
        images.append(image_references(record.images) if record and record.images is not None else [])
    if problems:  # the tables drawn from this batch are kept apart from those of a batch read in full
        key = hashlib.sha1(repr((key, problems)).encode()).hexdigest()
    return StepBatch(key=key, table=rows.assign(**texts, images=images, group=group_numbers(rows["group_id"])), problems=problems)


# The per-token arrays of the sample in view, cut to one length (notes say where they did not match), and its tokens
# as text.
@dataclass
class SampleTokens:
    logprobs: np.ndarray
    ref_logprobs: np.ndarray | None
    entropies: np.ndarray | None
    values: np.ndarray | None
    token_rewards: np.ndarray | None
    response_tokens: list[str]
    advantage: float | None
    notes: list[str]
    tool: np.ndarray | None = None  # which tokens a tool wrote (tool_mask 0); None: no tool_mask


# The per-token arrays of a sample, parsed only when it is shown; None without logprobs.
def read_sample_tokens(path: str, offset: int, length: int, step: int) -> "SampleTokens | None":
    record, _ = decode_line(read_line(path, offset, length), ROLLOUT_DECODER)
    ensure_same_step(record, step)
    return token_detail(record)


# The aligned per-token arrays of one sample, or None without logprobs.
def token_detail(record) -> "SampleTokens | None":
    arrays, length, notes = aligned_token_arrays(record)
    if arrays["logprobs"] is None:
        return None
    length = int(length)
    names = readable_tokens([valid_text(str(token)) for token in (record.response_tokens or [])])[:length]
    names += ["?"] * (length - len(names))
    return SampleTokens(**arrays, response_tokens=names, advantage=record.advantage, notes=notes)


# A line read back must still hold the step it was indexed with (as a float, as the index holds steps): a file
# rewritten in place with the same layout would otherwise mix new lines into old numbers.
def ensure_same_step(record, step: int):
    if float(record.step) != float(step):
        raise BadLine(f"it now holds step {record.step}, not {step}")


def read_line(path: str, offset: int, length: int) -> bytes:
    return read_spans([path], [offset], [length])[0]


def read_back_problem(path: str, line: int, error: Exception) -> str:
    return f"{markdown_literal(Path(path).name)} line {line} could not be read back ({markdown_literal(error)}); if the file was rewritten, press Load & View."



# ====================================================================================================================
# Reading, 5: the training history (the trainer's own logged numbers) from the logger's metrics files, seed 004's
# training_log.json or Hugging Face Trainer's trainer_state.json. Only these JSON files are read.
# ====================================================================================================================


METRICS_FILES = "rollout_metrics_*.jsonl"


TRAINING_LOG, TRAINER_STATE = "training_log.json", "trainer_state.json"


CHECKPOINT_FOLDER = re.compile(r"checkpoint-(\d+)")


PROBLEM_COLUMNS = ["file", "line", "kind", "reason"]


# The trainer's numbers of a run: one row per logged step of each kind, its configuration and best checkpoint.
@dataclass(frozen=True)
class TrainingHistory:
    sources: list  # the files read, relative to the folder
    train: pd.DataFrame  # "step", then one float column per logged number
    eval: pd.DataFrame
    config: dict
    best: dict  # {} or {"step", "path", "metrics": {name: value}} (+ "epoch")
    problems: pd.DataFrame  # file, line, kind, reason
    signature: tuple = ()  # history_signature of the files when read (set by load_history)

    @property
    def empty(self) -> bool:
        return self.train.empty and self.eval.empty


# Entries of one kind in file order. A step lower than one already seen starts a resumed run: what the earlier run
# logged from that step on is dropped, the later entry stands; entries of the same step merge key by key.
class HistorySeries:
    def __init__(self):
        self.rows: dict[int, dict] = {}

    def add(self, step: int, numbers: dict):
        if self.rows and step < max(self.rows):
            self.drop_from(step)
        self.rows.setdefault(step, {}).update(numbers)

    def drop_from(self, step: int):
        self.rows = {seen: row for seen, row in self.rows.items() if seen < step}

    def frame(self) -> pd.DataFrame:
        steps = sorted(self.rows)
        table = pd.DataFrame.from_records([self.rows[step] for step in steps], index=range(len(steps)))
        table.insert(0, "step", np.array(steps, dtype=np.int64))
        return table.astype({column: float for column in table.columns if column != "step"})


# The history of a run folder or training output folder, from the first source it holds (see this section's title).
def read_history(folder) -> TrainingHistory:
    if is_remote(folder):
        folder = mirrored_history(str(folder))
    folder, problems = Path(folder), []
    metrics_files = sorted(path for path in folder.glob(METRICS_FILES) if path.is_file())
    if metrics_files:
        return history_from_metrics_files(folder, metrics_files, problems)
    if (folder / TRAINING_LOG).is_file():
        log = read_json_file(folder / TRAINING_LOG, folder, problems)
        if log is not None:
            return history_from_training_log(TRAINING_LOG, log, problems)
    state_path, state = newest_trainer_state(folder, problems)
    if state is not None:
        return history_from_trainer_state(state_path, state, problems)
    empty = pd.DataFrame({"step": np.array([], dtype=np.int64)})
    return TrainingHistory([], empty, empty, {}, {}, pd.DataFrame(problems, columns=PROBLEM_COLUMNS))


# The files a history is read from, with their sizes and times: a cheap key that changes when any of them does.
def history_signature(folder) -> tuple:
    if is_remote(folder):
        with contextlib.suppress(OSError):  # the rollouts' load says why a run cannot be read
            return tuple((name, status.size, status.etag) for name, status in remote_history_files(str(folder)).items())
        return ()
    folder = Path(folder)
    paths = [*folder.glob(METRICS_FILES), *folder.glob("rollout_meta*.json"), folder / TRAINING_LOG, folder / TRAINER_STATE, *folder.glob(f"checkpoint-*/{TRAINER_STATE}")]
    signature = []
    for path in sorted(paths):
        with contextlib.suppress(OSError):
            status = path.stat()
            signature.append((str(path.relative_to(folder)), status.st_size, status.st_mtime_ns))
    return tuple(signature)


# A whole JSON file (NaN and Infinity allowed: the entries say which keys were left out); None with a problem row
# when it cannot be read, e.g. while a trainer rewrites it.
def read_json_file(path: Path, folder: Path, problems: list):
    name = valid_text(str(path.relative_to(folder)))
    try:
        value = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as error:
        problems.append([name, 0, "skipped", f"not readable as JSON ({error}): nothing taken from it"])
        return None
    if not isinstance(value, dict):
        problems.append([name, 0, "skipped", f"holds a JSON {type(value).__name__}, not an object: nothing taken from it"])
        return None
    return value


# The folder's own trainer_state.json or a checkpoint's, whichever reached the latest global_step (the folder's own
# wins a tie); checkpoints are tried newest first and an unreadable one is passed over.
def newest_trainer_state(folder: Path, problems: list) -> tuple[str | None, dict | None]:
    checkpoints = sorted(
        (path for path in folder.glob(f"checkpoint-*/{TRAINER_STATE}") if CHECKPOINT_FOLDER.fullmatch(path.parent.name) and path.is_file()),
        key=lambda path: int(path.parent.name.split("-")[1]),
        reverse=True,
    )
    found = []
    for path in ([folder / TRAINER_STATE] if (folder / TRAINER_STATE).is_file() else []) + checkpoints:
        state = read_json_file(path, folder, problems)
        if state is not None and not isinstance(state.get("log_history"), list):
            problems.append([valid_text(str(path.relative_to(folder))), 0, "skipped", "no log_history list: not a Trainer state"])
            state = None
        if state is not None:
            found.append((str(path.relative_to(folder)), state))
            if path.parent != folder:
                break
    if not found:
        return None, None
    return max(found, key=lambda item: global_step(item[1]))  # max keeps the first of equals: the folder's own


def global_step(state: dict) -> int:
    step = state.get("global_step")
    return step if type(step) is int else -1


# The logger's metrics files in launch order: train and eval lines, and checkpoint lines that name the best one.
def history_from_metrics_files(folder: Path, paths: list, problems: list) -> TrainingHistory:
    train, evaluation, best = HistorySeries(), HistorySeries(), {}
    for launch, path in enumerate(paths):
        name, resumed_at = valid_text(path.name), None
        try:
            data = path.read_bytes()
        except OSError as error:
            problems.append([name, 0, "skipped", f"could not be read ({error})"])
            continue
        lines = data.split(b"\n")
        if lines[-1].strip():
            problems.append([name, len(lines), "incomplete", "the last line has no end yet: still being written, or cut off"])
        for number, line in enumerate(lines[:-1], start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except (ValueError, RecursionError) as error:
                problems.append([name, number, "skipped", f"not valid JSON ({error})"])
                continue
            where = (name, number)
            if isinstance(entry, dict) and entry.get("kind") == "checkpoint":
                if isinstance(entry.get("best_model_checkpoint"), str):
                    best = {"path": entry["best_model_checkpoint"], "value": entry.get("best_metric")}
                continue
            step = history_entry_step(entry, where, problems)
            if step is None:
                continue
            evaluated = is_evaluation(entry)
            # A later launch (a resume) replaces what earlier ones logged, of either kind, from its first trained step on.
            if launch and resumed_at is None and not evaluated:
                resumed_at = step
                train.drop_from(step)
                evaluation.drop_from(step)
            (evaluation if evaluated else train).add(step, entry_numbers(entry, where, problems))
    eval_frame = evaluation.frame()
    if best:
        best = best_from_checkpoint(best["path"], None, best["value"], eval_frame)
    meta = read_meta(str(folder)) or {}
    config = meta.get("trainer_config") if isinstance(meta.get("trainer_config"), dict) else {}
    return TrainingHistory([path.name for path in paths], train.frame(), eval_frame, config, best, pd.DataFrame(problems, columns=PROBLEM_COLUMNS))


# Seed 004's training_log.json: config, train_history, val_history, and best_checkpoint (GRPO, DPO) or final_metrics
# (LoRA).
def history_from_training_log(name: str, log: dict, problems: list) -> TrainingHistory:
    frames = {}
    for key in ("train_history", "val_history"):
        series, entries = HistorySeries(), log.get(key, [])
        if not isinstance(entries, list):
            problems.append([name, 0, "skipped", f"{key} is not a list"])
            entries = []
        for position, entry in enumerate(entries):
            where = (name, 0, f"{key}[{position}]")
            step = history_entry_step(entry, where, problems)
            if step is not None:
                series.add(step, entry_numbers(entry, where, problems))
        frames[key] = series.frame()
    best, final = log.get("best_checkpoint"), log.get("final_metrics")
    if isinstance(best, dict):
        best = {
            "step": history_entry_step(best, (name, 0, "best_checkpoint"), []),
            "path": best.get("path") if isinstance(best.get("path"), str) else None,
            "metrics": {key: value for key, value in entry_numbers(best, (name, 0, "best_checkpoint"), problems).items() if key not in ("epoch", "samples")},
        } | ({"epoch": as_float(best["epoch"])} if type(best.get("epoch")) in (int, float) and math.isfinite(as_float(best["epoch"])) else {})
    elif isinstance(final, dict) and isinstance(final.get("best_checkpoint"), str):
        best = best_from_checkpoint(final["best_checkpoint"], None, final.get("best_metric"), frames["val_history"])
    else:
        best = {}
    config = log.get("config") if isinstance(log.get("config"), dict) else {}
    return TrainingHistory([name], frames["train_history"], frames["val_history"], config, best, pd.DataFrame(problems, columns=PROBLEM_COLUMNS))


# Hugging Face Trainer's state: log_history entries with eval_* keys are evaluations, the rest training.
def history_from_trainer_state(name: str, state: dict, problems: list) -> TrainingHistory:
    train, evaluation = HistorySeries(), HistorySeries()
    for position, entry in enumerate(state["log_history"]):
        where = (valid_text(name), 0, f"log_history[{position}]")
        step = history_entry_step(entry, where, problems)
        if step is not None:
            (evaluation if is_evaluation(entry) else train).add(step, entry_numbers(entry, where, problems))
    eval_frame = evaluation.frame()
    path = state.get("best_model_checkpoint")
    best = best_from_checkpoint(path, state.get("best_global_step"), state.get("best_metric"), eval_frame) if isinstance(path, str) else {}
    config = {key: value for key, value in state.items() if type(value) in (int, float, str, bool)}
    return TrainingHistory([valid_text(name)], train.frame(), eval_frame, config, best, pd.DataFrame(problems, columns=PROBLEM_COLUMNS))


# The best checkpoint from its path and metric value: the step is the checkpoint's number unless given, the metric is
# named after the eval metric (eval_*, val_*) holding that value (at that step if it can be), else "best_metric".
def best_from_checkpoint(path: str, step, value, eval_frame: pd.DataFrame) -> dict:
    numbers = CHECKPOINT_FOLDER.findall(path)
    step = step if type(step) is int else int(numbers[-1]) if numbers else None
    metrics = {}
    if type(value) in (int, float) and math.isfinite(as_float(value)):
        at_step = eval_frame[eval_frame["step"] == step]
        names = [column for column in eval_frame.columns[1:] if metric_name(column) != column]  # eval_*, val_*: not epoch
        matching = [column for table in (at_step, eval_frame) for column in names if np.isclose(table[column], value, rtol=1e-12, atol=0).any()]
        metrics[matching[0] if matching else "best_metric"] = float(value)
    return {"step": step, "path": path, "metrics": metrics}


# An evaluation's entry: the logger says so ("kind"); else its keys do: eval_* or, from Trainer.evaluate with another
# metric_key_prefix (e.g. "test"), <prefix>_runtime.
def is_evaluation(entry: dict) -> bool:
    if entry.get("kind") in ("train", "eval"):
        return entry["kind"] == "eval"
    return any(str(key).startswith("eval_") or (str(key).endswith("_runtime") and key != "train_runtime") for key in entry)


# A JSON number as a float (a boolean as 0/1); an integer too big for one is infinite.
def as_float(value: int | float) -> float:
    return value if type(value) is float else float(value) if abs(value) < 1e308 else math.inf if value > 0 else -math.inf


# An entry's step: an integer (2.0 is 2); None, with a problem row at where, for anything else.
def history_entry_step(entry, where: tuple, problems: list) -> int | None:
    step = entry.get("step") if isinstance(entry, dict) else None
    if type(step) is float and step.is_integer() and abs(step) < 2**63:
        step = int(step)
    if type(step) is int and -(2**63) <= step < 2**63:
        return step
    file, line, *within = where
    about = f"{within[0]}: " if within else ""
    reason = "not a JSON object" if not isinstance(entry, dict) else "no step" if "step" not in entry else f"step {shorten(repr(step), 40)} is not an integer within int64"
    problems.append([file, line, "skipped", f"{about}{reason}: entry left out"])
    return None


# The numbers of an entry (not step): other values (texts, lists) are not series; NaN and infinities are left out
# with a note.
def entry_numbers(entry: dict, where: tuple, problems: list) -> dict:
    numbers = {}
    for key, value in entry.items():
        if key in ("step", "kind") or type(value) not in (int, float):
            continue
        value = as_float(value)
        if math.isfinite(value):
            numbers[valid_text(str(key))] = value
        else:
            file, line, *within = where
            problems.append([file, line, "note", f"{within[0] + ': ' if within else ''}{key} is {value}: left out"])
    return numbers


# ====================================================================================================================
# Reading, 6: the prompts' images. A line names image files inside its run folder; each is checked, decoded by Pillow
# and re-encoded before the page gets it, so no file outside the run is read and no SVG or HTML reaches the page.
# ====================================================================================================================


# The raster formats the page shows; any other file (SVG, HTML, PDF, TIFF...) is never decoded.
RASTER_FORMATS = ["PNG", "JPEG", "GIF", "WEBP", "BMP"]


# Pillow's decompression-bomb bound (about 89 megapixels): a larger image is a problem, not a decode.
IMAGE_PIXEL_LIMIT = Image.MAX_IMAGE_PIXELS


IMAGE_FILE_LIMIT = 64 << 20  # bytes


# The longest side of an image as the page gets it, beside the prompt and in the batch table.
SHOWN_IMAGE_SIDE = 768
THUMBNAIL_SIDE = 64


IMAGES_SHOWN = 16  # of a line's images, beside its prompt (and kept in the index, for the load report's check)
IMAGES_CHECKED = 2000  # distinct images a load checks for the load report; the others are checked when shown


URL_OR_DRIVE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


class ImageProblem(ValueError):
    """An image that cannot be shown; the message says why."""


# The file an image path names, as (path, size, mtime) for the caches, if it is a regular file inside the folder of
# the line's file: no URL, absolute path, ".." or symbolic link out of it.
def image_file(folder: str, path: str | None) -> tuple[str, int, int]:
    if not path or "\x00" in path:
        raise ImageProblem("no file path")
    if URL_OR_DRIVE.match(path) or path.startswith(("/", "\\", "~")):
        raise ImageProblem("not a path inside the run folder (a URL or an absolute path): not read")
    if ".." in re.split(r"[\\/]", path):
        raise ImageProblem("'..' leads out of the run folder: not read")
    if is_remote(folder):
        return remote_image_file(joined(folder, path))
    base = os.path.realpath(folder)
    target = os.path.realpath(os.path.join(base, path))
    if not is_within(target, base):
        raise ImageProblem("a symbolic link out of the run folder: not read")
    try:
        status = os.stat(target)
    except OSError as error:
        raise ImageProblem("missing" if isinstance(error, FileNotFoundError) else f"cannot be read ({error.strerror})") from None
    if not stat.S_ISREG(status.st_mode):
        raise ImageProblem("not a regular file")
    if status.st_size > IMAGE_FILE_LIMIT:
        raise ImageProblem(f"{status.st_size >> 20} MB: larger than the {IMAGE_FILE_LIMIT >> 20} MB shown")
    return target, status.st_size, status.st_mtime_ns


# An image on object storage as image_file gives a local one (its ETag's hash for the mtime the caches key on).
def remote_image_file(target: str) -> tuple[str, int, int]:
    try:
        status = file_status(target)
    except StorageError as error:
        raise ImageProblem(str(error)) from None
    if status.size > IMAGE_FILE_LIMIT:
        raise ImageProblem(f"{status.size >> 20} MB: larger than the {IMAGE_FILE_LIMIT >> 20} MB shown")
    return target, status.size, int(hashlib.sha1(status.etag.encode()).hexdigest()[:15], 16)


# Why an image file cannot be shown (None: it can), from its header and Pillow's integrity check (a PNG's checksums;
# a JPEG decoded at 1/8 scale, which its format makes cheap), without decoding a PNG's pixels. Cached per file
# version: a live run's images are checked once.
@functools.lru_cache(maxsize=65536)
def image_check(path: str, size: int, mtime_ns: int) -> str | None:
    try:
        with opened_image(path) as image:
            if image.format == "JPEG":
                image.draft("RGB", (image.width // 8 or 1, image.height // 8 or 1))
                image.load()
            else:
                image.verify()
    except ImageProblem as error:
        return str(error)
    return None


# An image file's bytes as the page shows them: decoded, its longest side at most `longest`, re-encoded as JPEG (PNG
# where it has transparency); with its MIME type.
def encoded_image(path: str, longest: int) -> tuple[bytes, str]:
    with opened_image(path) as image:
        image.draft("RGB", (longest, longest))  # a JPEG decodes at a fraction of its size, when that suffices
        image.thumbnail((longest, longest))
        transparent = image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info
        image = image.convert("RGBA" if transparent else "RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG" if transparent else "JPEG", quality=90)
    return buffer.getvalue(), "image/png" if transparent else "image/jpeg"


# A raster image opened by Pillow (its header read), or ImageProblem: another format, too many pixels or corrupt.
@contextlib.contextmanager
def opened_image(path: str):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(read_file(path)) if is_remote(path) else path, formats=RASTER_FORMATS) as image:
                if image.width * image.height > IMAGE_PIXEL_LIMIT:
                    raise ImageProblem(f"{image.width} × {image.height} pixels: over the decompression-bomb limit of {IMAGE_PIXEL_LIMIT:,}")
                yield image
    except ImageProblem:
        raise
    except StorageError as error:
        raise ImageProblem(str(error)) from None
    except UnidentifiedImageError:
        raise ImageProblem(f"not a {', '.join(RASTER_FORMATS[:-1])} or {RASTER_FORMATS[-1]} image") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
        raise ImageProblem(f"over the decompression-bomb limit ({error})") from None
    except Exception as error:  # corrupt data: Pillow raises OSError, SyntaxError, struct.error, ValueError...
        raise ImageProblem(f"corrupt ({shorten(str(error) or type(error).__name__, 120)})") from None


# Every image the loaded lines name, checked once: each one that cannot be shown is a load-report row at the first
# line naming it, with how many lines do.
def image_problems(samples: pd.DataFrame) -> list[list]:
    named = samples.dropna(subset=["image_paths"])
    first, uses = {}, Counter()
    for file, line, paths in zip(named["path"], named["line"], named["image_paths"]):
        for path in json.loads(paths):
            key = (os.path.dirname(file), path)
            uses[key] += 1
            first.setdefault(key, (file, line))
    problems = []
    if any(is_remote(folder) for folder, _ in first):  # a request per image would hold the load up for long
        return [["", 0, "note", f"{len(first):,} images on object storage: each is checked when shown"]]
    if len(first) > IMAGES_CHECKED:
        problems.append(["", 0, "note", f"{len(first):,} distinct images: the first {IMAGES_CHECKED:,} were checked at load, the others are checked when shown"])
    for (folder, path), (file, line) in itertools.islice(first.items(), IMAGES_CHECKED):
        try:
            problem = image_check(*image_file(folder, path))
        except ImageProblem as error:
            problem = str(error)
        if problem:
            shown = shorten(repr(path), 120) if path else "an image without a path"
            problems.append([valid_text(Path(file).name), int(line), "image", f"{shown}: {problem}; {uses[folder, path]} line(s) name it"])
    return problems


# ====================================================================================================================
# Reading, 7: the run's texts for search, and its lines for export.
# ====================================================================================================================


SEARCH_PLACES = {"prompt and response": ("response", "prompt"), "response": ("response",), "prompt": ("prompt",)}  # looked at in this order
SEARCH_SECONDS = 10.0  # a search stops after this long and says so (RE2 runs in linear time: only a huge run gets there)
SEARCH_MEMORY = 64 << 20  # RE2's memory for one pattern: a larger one is refused as too complex
SEARCH_PROGRAM = 2_000  # RE2's size of a regular expression at most (ordinary ones are under 100): a larger one can take seconds per text
SNIPPET_BEFORE, SNIPPET_AFTER = 40, 80  # bytes of text shown before and after a match
EXPORT_ROWS = 10_000  # of an export; more, and the page asks to narrow the filter
EXPORT_BYTES = 100 << 20  # of original lines in a JSONL export
EXPORT_NUMBERS = [
    "reward", "ref_reward", "valid_reward", "ref_valid_reward", "reward_gap", "advantage", "group_id", "truncated", "response_len",
    "response_tokens_len", "tool_tokens", "avg_logp", "avg_entropy", "avg_log_ratio", "sum_log_ratio",
] + [f"{kind}_kl_{name}" for name in KL_ESTIMATORS for kind in ("avg", "sum")]


# A file's searched texts as UTF-8 in one buffer: a Python string per text would take several times the memory.
# The line at offsets[i] has its prompt at data[bounds[i, 0]:bounds[i, 1]] and its response at data[bounds[i, 1]:bounds[i, 2]].
@dataclass
class FileTexts:
    index_id: str
    offsets: np.ndarray
    bounds: np.ndarray
    data: bytes


# A run's texts, read on its first search and added to as more lines are loaded; shared by sessions.
class RunTexts:
    def __init__(self):
        self.lock = threading.Lock()
        self.files: dict[str, FileTexts] = {}

    # For each sample: the buffer its texts are in (an index into the list) and their bounds there.
    def of(self, samples: pd.DataFrame) -> tuple[list[bytes], np.ndarray, np.ndarray]:
        buffers, owner, bounds = [], np.zeros(len(samples), dtype=np.int64), np.zeros((len(samples), 3), dtype=np.int64)
        lines = samples[TEXT_SPAN_COLUMNS].to_numpy(dtype=float)
        with self.lock:
            for path, rows in samples.groupby("path", sort=False).indices.items():
                texts = self.updated(path, samples["index_id"].iat[rows[0]], lines[rows])
                owner[rows] = len(buffers)
                buffers.append(texts.data)
                bounds[rows] = texts.bounds[np.searchsorted(texts.offsets, lines[rows, 0])]
        return buffers, owner, bounds

    # The file's texts with those of the given lines (TEXT_SPAN_COLUMNS) read in; a file indexed anew starts over.
    def updated(self, path: str, index_id: str, lines: np.ndarray) -> FileTexts:
        known = self.files.get(path)
        if known is None or known.index_id != index_id:
            known = FileTexts(index_id, np.array([], dtype=np.int64), np.zeros((0, 3), dtype=np.int64), b"")
        lines = lines[~np.isin(lines[:, 0], known.offsets)]
        lines = lines[np.unique(lines[:, 0], return_index=True)[1]]
        if not len(lines):
            return known
        spans = lines[:, 3] + lines[:, 5]
        sizes = np.where(np.isnan(spans), lines[:, 1], spans).astype(np.int64)  # bytes each line's texts take to read
        parallel = WORKERS > 1 and int(sizes.sum()) > PARALLEL_MIN_BYTES
        tasks = [(read_texts, (path, lines[part])) for part in batches_of_rows(np.arange(len(lines)), sizes)]
        parts, text_sizes = [known.data], []
        for data, part_sizes in run_tasks(tasks, parallel):
            parts.append(data)
            text_sizes.append(part_sizes)
        ends = len(known.data) + np.cumsum(np.concatenate(text_sizes).ravel())  # prompt end, response end, prompt end, ...
        bounds = np.column_stack([np.r_[len(known.data), ends[1::2][:-1]], ends[0::2], ends[1::2]])
        offsets = np.concatenate([known.offsets, lines[:, 0].astype(np.int64)])
        order = np.argsort(offsets, kind="stable")
        self.files[path] = FileTexts(index_id, offsets[order], np.concatenate([known.bounds, bounds])[order], b"".join(parts))
        return self.files[path]


# Where a line's texts are: the line, then its prompt's and response's JSON values within it (NaN: not known).
TEXT_SPAN_COLUMNS = ["offset", "length", "prompt_at", "prompt_bytes", "response_at", "response_bytes"]


# The prompt and response of lines as UTF-8, one after the other, and their sizes (0 for a line that cannot be read).
# Where the index knows them, only the two values are read, not the whole line (whose token lists are most of it).
def read_texts(path: str, lines: np.ndarray) -> tuple[bytes, np.ndarray]:
    parts, sizes = [], np.zeros((len(lines), 2), dtype=np.int64)
    whole = np.isnan(lines[:, 2:]).any(axis=1)
    starts = np.where(whole[:, None], lines[:, [0]], lines[:, [0, 0]] + lines[:, [2, 4]]).astype(np.int64)
    lengths = np.where(whole[:, None], lines[:, 1:2] * [1, 0], lines[:, [3, 5]]).astype(np.int64)  # a whole line, then nothing
    try:
        raw = read_spans([path] * starts.size, starts.ravel().tolist(), lengths.ravel().tolist())
    except OSError:  # gone since it was loaded: the step view says so
        return b"", sizes
    for row, is_whole in enumerate(whole.tolist()):
        try:
            if is_whole:
                record, _ = decode_line(raw[2 * row], TEXTS_DECODER)
                texts = [(as_text(value) or "").encode() for value in (record.prompt, record.response)]
            else:
                texts = [json_text(raw[2 * row]), json_text(raw[2 * row + 1])]
        except (BadLine, msgspec.DecodeError, ValueError):  # the file changed since it was indexed
            continue
        parts += texts
        sizes[row] = [len(text) for text in texts]
    return b"".join(parts), sizes


# A field's text as UTF-8 from its raw JSON value (of a line that was valid UTF-8 when indexed): a string without
# escapes is its own bytes.
def json_text(raw: bytes) -> bytes:
    if raw[:1] == b'"' and raw[-1:] == b'"' and b"\\" not in raw:
        return raw[1:-1]
    value = raw_value(raw)
    try:
        return value.encode() if isinstance(value, str) else (as_text(value) or "").encode()
    except UnicodeEncodeError:  # a lone surrogate escape
        return valid_text(value).encode()


# A search's pattern in RE2 (linear time, so no pattern can stall the server): the text as it is, or a regular
# expression; case-insensitive unless match_case. Raises ValueError with RE2's reason for an invalid one.
def search_pattern(query: str, regex: bool, match_case: bool):
    options = re2.Options()
    options.literal, options.case_sensitive, options.max_mem = not regex, match_case, SEARCH_MEMORY
    options.log_errors = False
    try:
        pattern = re2.compile(valid_text(query).encode(), options)
    except re2.error as error:
        reason = error.args[0] if error.args else ""
        raise ValueError(reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)) from None
    if regex and pattern.programsize > SEARCH_PROGRAM:
        raise ValueError(f"too complex ({pattern.programsize:,} steps to RE2, at most {SEARCH_PROGRAM:,}): repeat less")
    return pattern


# Where the samples' texts match: per sample 0 (nowhere), 1 (its prompt) or 2 (its response, looked at first), with
# the match's byte span in that text; `searched` samples were searched, in step order, all unless SEARCH_SECONDS ran out.
@dataclass
class SearchResult:
    place: np.ndarray
    start: np.ndarray
    end: np.ndarray
    searched: int
    seconds: float


# Each text is searched on its own, so ^ and $ are its start and end and no match runs from one text into the next.
def search_samples(texts: RunTexts, samples: pd.DataFrame, pattern, places: str) -> SearchResult:
    began = time.perf_counter()
    buffers, owner, bounds = texts.of(samples)
    views = [memoryview(buffer) for buffer in buffers]
    where = {"response": (2, 1, 2), "prompt": (1, 0, 1)}  # code, and the bounds the text lies between
    fields = [where[name] for name in SEARCH_PLACES[places]]
    place, start, end = np.zeros(len(samples), dtype=np.int8), np.zeros(len(samples), dtype=np.int64), np.zeros(len(samples), dtype=np.int64)
    searched, deadline = len(samples), began + SEARCH_SECONDS
    for row, (buffer, text_bounds) in enumerate(zip(owner.tolist(), bounds.tolist())):
        if time.perf_counter() > deadline:
            searched = row
            break
        view = views[buffer]
        for code, first, last in fields:
            match = pattern.search(view[text_bounds[first] : text_bounds[last]])
            if match:
                place[row], (start[row], end[row]) = code, match.span()
                break
    return SearchResult(place, start, end, searched, time.perf_counter() - began)


# The text around each sample's match, on one line, the match between ⟦ ⟧ (shown as plain text, never as HTML).
def match_snippets(texts: RunTexts, samples: pd.DataFrame, place: np.ndarray, start: np.ndarray, end: np.ndarray) -> list[str]:
    buffers, owner, bounds = texts.of(samples)
    snippets = []
    for buffer, text_bounds, code, match_start, match_end in zip(owner.tolist(), bounds.tolist(), place.tolist(), start.tolist(), end.tolist()):
        if not code:
            snippets.append("")
            continue
        first, last = text_bounds[code - 1], text_bounds[code]
        text = buffers[buffer]
        parts = [
            text[max(first, first + match_start - SNIPPET_BEFORE) : first + match_start],
            text[first + match_start : first + match_end],
            text[first + match_end : min(last, first + match_end + SNIPPET_AFTER)],
        ]
        before, match, after = (part.decode("utf-8", errors="ignore") for part in parts)  # a character cut at the edge is left out
        snippet = ("…" if match_start > SNIPPET_BEFORE else "") + f"{before}⟦{match}⟧{after}" + ("…" if first + match_end + SNIPPET_AFTER < last else "")
        snippets.append(visible_whitespace(snippet))
    return snippets


# The rows as a table to export: the numbers the page shows of each sample, then its texts, read back (empty for a
# line that cannot be: the step view says why).
def export_table(rows: pd.DataFrame) -> pd.DataFrame:
    table = read_step_batch("export", rows).table.assign(file=[Path(path).name for path in rows["path"]])
    fields = sorted(column for column in table.columns if column.startswith(("rewards/", EXTRA_PREFIX, TEXT_PREFIX)))
    numbers = [column for column in EXPORT_NUMBERS + fields if table[column].notna().any()]
    texts = ["prompt", "response"] + [column for column in ("ref_response", "ground_truth") if table[column].notna().any()]
    return table[["step", "sample", "file", "line"] + numbers + texts].reset_index(drop=True)


def export_csv(rows: pd.DataFrame) -> str:
    return export_table(rows).to_csv(index=False)


def export_parquet(rows: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    export_table(rows).to_parquet(buffer, index=False)
    return buffer.getvalue()


# The rows' lines as they are in their files, byte for byte, one a line (a line that cannot be read is left out).
def export_jsonl(rows: pd.DataFrame) -> bytes:
    lines = []
    for path, offset, length in zip(rows["path"], rows["offset"].tolist(), rows["length"].tolist()):
        with contextlib.suppress(OSError):
            lines.append(read_line(path, offset, length) + b"\n")
    return b"".join(lines)


# ====================================================================================================================
# Reading, 8: where the files are. A path on this machine, or a URL of object storage (s3://, gs://, az://, hf://)
# read through fsspec: listed, and read by byte ranges in parallel (a run on S3 is never copied whole: the index
# reads each object once, a step its lines, search the texts' bytes).
# ====================================================================================================================


REMOTE_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+)://")


# The fsspec backend each protocol needs, named when it is not installed.
STORAGE_PACKAGES = {"s3": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs", "hf": "huggingface_hub"}


# S3 requests fail in seconds, not minutes, when the endpoint is down (botocore retries for long by default).
S3_CONFIG = {"connect_timeout": 5, "read_timeout": 60, "retries": {"max_attempts": 3, "mode": "standard"}}


# Lines closer than SPAN_GAP bytes are read from object storage in one request of at most SPAN_BLOCK bytes.
SPAN_GAP, SPAN_BLOCK = 1 << 16, 2 << 20


# Environment variables that hold secrets: their values are blanked out of any message shown.
SECRET_VARIABLES = re.compile(r"SECRET|TOKEN|PASSWORD|ACCESS_KEY|ACCOUNT_KEY|CREDENTIAL|SAS", re.IGNORECASE)
URL_USER_INFO = re.compile(r"(?<=://)[^/@\s]+@")


class StorageError(OSError):
    """Object storage could not be listed or read: the message says why, without any credential."""


# A file's size and version as listed: a local file's stat, or an object's size and ETag (mtime, inode and device 0).
class FileStatus(NamedTuple):
    size: int
    mtime_ns: int = 0
    inode: int = 0
    device: int = 0
    etag: str = ""


# A listed file or folder of a folder.
class Entry(NamedTuple):
    name: str
    path: str
    is_dir: bool
    status: FileStatus | None


def is_remote(path) -> bool:
    match = REMOTE_URL.match(str(path))
    return bool(match) and match.group(1).lower() != "file"


# One filesystem per protocol in each process (workers make their own). Credentials come from the backend's standard
# chain (environment, profile, instance role); S3's endpoint from AWS_ENDPOINT_URL, which --endpoint-url sets.
@functools.cache
def storage(protocol: str):
    if protocol not in STORAGE_PACKAGES:  # http://, ftp://...: not object storage, and a server should not fetch them
        raise StorageError(f"{protocol}:// is not object storage the board reads: s3://, gs://, az:// or hf://")
    options = {}
    if protocol == "s3":
        endpoint = os.environ.get("AWS_ENDPOINT_URL")
        options = {"config_kwargs": S3_CONFIG, "client_kwargs": {"endpoint_url": endpoint} if endpoint else {}}
    try:
        return fsspec.filesystem(protocol, **options)
    except ImportError:
        package = STORAGE_PACKAGES.get(protocol, "fsspec backend")
        raise StorageError(f"{protocol}:// paths need the {package} package: pip install {package}") from None


def remote_storage(path: str):
    return storage(REMOTE_URL.match(path).group(1).lower())


# A storage call's failure as a StorageError naming the path and what went wrong (never a credential).
@contextlib.contextmanager
def storage_errors(path: str):
    try:
        yield
    except StorageError:
        raise
    except FileNotFoundError:
        raise StorageError(f"{path} was not found (no such bucket, folder or object)") from None
    except PermissionError as error:
        raise StorageError(f"{path}: permission denied ({without_secrets(error)}); check the credentials") from None
    except Exception as error:  # network and service errors come as many types (botocore, aiohttp, asyncio)
        raise StorageError(f"{path} could not be read: {type(error).__name__}: {without_secrets(error)}") from None


def without_secrets(error: Exception) -> str:
    text = URL_USER_INFO.sub("…@", str(error))
    for name, value in os.environ.items():
        if SECRET_VARIABLES.search(name) and len(value) >= 4:
            text = text.replace(value, "…")
    return shorten(text, 300)


# The files and folders in a folder, sorted by name (hidden ones left out).
def list_folder(folder: str) -> list[Entry]:
    entries = []
    if is_remote(folder):
        remote = remote_storage(folder)
        with storage_errors(folder):
            listed = remote.ls(folder, detail=True, refresh=True)
        for item in listed:
            path = remote.unstrip_protocol(item["name"].rstrip("/"))
            is_dir = item.get("type") == "directory"
            status = None if is_dir else FileStatus(int(item.get("size") or 0), etag=str(item.get("ETag") or item.get("etag") or "").strip('"'))
            entries.append(Entry(path.rsplit("/", 1)[-1], path, is_dir, status))
    else:
        with os.scandir(folder) as found:
            for entry in found:
                with contextlib.suppress(OSError):
                    is_dir, is_file = entry.is_dir(), entry.is_file()
                    status = entry.stat() if is_file else None
                    if is_dir or is_file:
                        entries.append(Entry(entry.name, entry.path, is_dir, status and local_status(status)))
    return sorted((entry for entry in entries if not entry.name.startswith(".")), key=lambda entry: entry.name)


def local_status(status: os.stat_result) -> FileStatus:
    return FileStatus(status.st_size, status.st_mtime_ns, status.st_ino, status.st_dev)


def file_status(path: str) -> FileStatus:
    if not is_remote(path):
        return local_status(os.stat(path))
    with storage_errors(path):
        info = remote_storage(path).info(path, refresh=True)
    return FileStatus(int(info.get("size") or 0), etag=str(info.get("ETag") or info.get("etag") or "").strip('"'))


# A file or folder inside a folder, by name.
def joined(folder: str, name: str) -> str:
    if is_remote(folder):
        return folder if name == "." else f"{folder.rstrip('/')}/{name}"
    return str(Path(folder).expanduser() / name)


# A run's history files on object storage, by their path in the run folder, from one listing of all its objects.
def remote_history_files(run_dir: str) -> dict[str, FileStatus]:
    remote = remote_storage(run_dir)
    with storage_errors(run_dir):
        found = remote.find(run_dir, detail=True)
    prefix, files = remote._strip_protocol(run_dir).rstrip("/") + "/", {}
    for name, info in sorted(found.items()):
        relative = name[len(prefix) :] if name.startswith(prefix) else ""
        folder, _, file = relative.rpartition("/")
        top_level = not folder and (fnmatch.fnmatch(file, METRICS_FILES) or fnmatch.fnmatch(file, "rollout_meta*.json") or file in (TRAINING_LOG, TRAINER_STATE))
        if top_level or (CHECKPOINT_FOLDER.fullmatch(folder) and file == TRAINER_STATE):
            files[relative] = FileStatus(int(info.get("size") or 0), etag=str(info.get("ETag") or "").strip('"'))
    return files


# A run's history files on object storage, copied into a local folder (again only those that changed), to be read as
# a local run's are.
def mirrored_history(run_dir: str) -> Path:
    folder = IndexCache().folder / "history" / hashlib.sha1(os.fsencode(canonical_path(run_dir))).hexdigest()[:20]
    with contextlib.suppress(OSError):
        wanted = remote_history_files(run_dir)
        for path in folder.rglob("*"):
            if path.is_file() and str(path.relative_to(folder)).removesuffix(".etag") not in wanted:
                path.unlink()
        for relative, status in wanted.items():
            target, stamp = folder / relative, folder / f"{relative}.etag"
            if target.is_file() and stamp.is_file() and stamp.read_text() == f"{status.size} {status.etag}":
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(read_file(joined(run_dir, relative)))
            stamp.write_text(f"{status.size} {status.etag}")
    return folder


# Whole small files (metadata, another trainer's files to convert).
def read_file(path: str) -> bytes:
    if not is_remote(path):
        return Path(path).read_bytes()
    with storage_errors(path):
        return remote_storage(path).cat_file(path)


# Bytes [start, end) of an object, in one ranged request.
def read_remote_range(path: str, start: int, end: int) -> bytes:
    if end <= start:  # S3 would take an empty range for a suffix one
        return b""
    with storage_errors(path):
        return remote_storage(path).cat_file(path, start=start, end=end)


# The bytes of lines (each of its own file), in order: on disk one pread each; on object storage, lines of a file
# close together are read in one request, and all requests run at once.
def read_spans(paths: list[str], offsets: list[int], lengths: list[int]) -> list[bytes]:
    spans = [b""] * len(offsets)
    order = sorted(range(len(offsets)), key=lambda position: (paths[position], offsets[position]))
    if not any(is_remote(path) for path in paths):
        for path, positions in itertools.groupby(order, key=lambda position: paths[position]):
            with open(path, "rb") as file:
                for position in positions:
                    spans[position] = os.pread(file.fileno(), lengths[position], offsets[position])
        return spans
    blocks = []  # [path, start, end, [span positions]]
    for position in order:
        path, start, end = paths[position], offsets[position], offsets[position] + lengths[position]
        last = blocks[-1] if blocks else None
        if last and last[0] == path and start - last[2] <= SPAN_GAP and end - last[1] <= SPAN_BLOCK:
            last[2] = max(last[2], end)
            last[3].append(position)
        else:
            blocks.append([path, start, end, [position]])
    with storage_errors(paths[0]):
        data = remote_storage(paths[0]).cat_ranges(*(list(column) for column in zip(*(block[:3] for block in blocks))), on_error="return")
    for (path, start, _, positions), block in zip(blocks, data):
        if isinstance(block, Exception):
            with storage_errors(path):
                raise block
        for position in positions:
            spans[position] = block[offsets[position] - start : offsets[position] - start + lengths[position]]
    return spans


# ====================================================================================================================
# Reading, 9: other trainers' files, as they write them. TRL's completion logs (parquet) and verl's generation dumps
# are converted once into the board's lines, kept in the cache folder beside the indexes (redone when a file
# changes): the index, the step view, search and export then read them as they read rank files. The original board's
# integrations (OpenRLHF's data_rank<r>.jsonl, the verl fork's rollout_data_rank0.jsonl) write the board's format.
# ====================================================================================================================


CONVERSION_FORMAT = 2  # a conversion made by another version of this code is made again
CONVERSION_THREADS = 16  # files of a run on object storage fetched and converted at once


TRL_COMPLETIONS_FILE = re.compile(r"completions_\d+\.parquet")
TRL_COMPLETIONS_FOLDER = "completions"


VERL_DUMP_FILE = re.compile(r"\d+\.jsonl")
VERL_DUMP_KEYS = {"input", "output", "score", "step"}  # every line of RayPPOTrainer._dump_generations has them
# verl's keys as the board's. A reward_extra_info key of the same name as one of these (a validation dump's "reward",
# equal to its "score") is kept as a field, named VERL_EXTRA_SUFFIX after it.
VERL_KEYS = {"input": "prompt", "output": "response", "gts": "ground_truth", "score": "reward"}
VERL_EXTRA_SUFFIX = " (reward_extra_info)"
UTF8_BOM = b"\xef\xbb\xbf"


# How a run folder's files are read: which files, named how in the load report, converted by what (None: as they are).
@dataclass(frozen=True)
class RunFormat:
    name: str
    convert: Any = None  # (bytes of a source file, context) -> bytes of the board's JSONL lines
    context: tuple = ()  # what a conversion depends on besides the file (TRL: the reward functions' names)
    problems: tuple = ()  # load-report rows (file, line, kind, reason): notes, files that could not be converted
    weights: tuple = ()  # TRL: (name, weight) of each reward function, from the logger's metadata (none: unknown)


# A run's data files with their status, and their format, from one listing of the folder (and of its completions/
# folder for a TRL output folder).
def run_sources(run_dir: str) -> tuple[dict[str, FileStatus], RunFormat]:
    entries = list_folder(run_dir)
    files = [entry for entry in entries if not entry.is_dir and valid_text(entry.name) == entry.name]
    parquet = [entry for entry in files if TRL_COMPLETIONS_FILE.fullmatch(entry.name)]
    if not parquet and any(entry.is_dir and entry.name == TRL_COMPLETIONS_FOLDER for entry in entries):
        parquet = [entry for entry in list_folder(joined(run_dir, TRL_COMPLETIONS_FOLDER)) if not entry.is_dir and TRL_COMPLETIONS_FILE.fullmatch(entry.name)]
    jsonl = [entry for entry in files if entry.name.endswith(".jsonl") and not fnmatch.fnmatch(entry.name, METRICS_FILES)]
    if parquet:
        output = trl_output_folder(run_dir)
        run_format = trl_completions_format(run_dir, history_signature(run_dir), history_signature(output) if output != run_dir else ())
        if jsonl:
            note = f"{len(jsonl)} .jsonl file(s) beside TRL's completions are not read: put them in a run folder of their own to open them"
            run_format = dataclasses.replace(run_format, problems=run_format.problems + (("", 0, "note", note),))
        return {entry.path: entry.status for entry in parquet}, run_format
    sources = {entry.path: entry.status for entry in jsonl}
    if jsonl and all(VERL_DUMP_FILE.fullmatch(entry.name) for entry in jsonl):
        keys = next(filter(None, (first_line_keys(entry.path, entry.status) for entry in jsonl[:3])), set())  # the first may be empty yet
        if VERL_DUMP_KEYS <= keys:
            validation = "val" in run_label(run_dir).lower() or "0.jsonl" in {entry.name for entry in jsonl} or "reward" in keys
            kind = "validation" if validation else "training"
            return sources, RunFormat(f"verl generations dump ({kind}: rollout_data_dir / validation_data_dir, <step>.jsonl)", verl_lines, (kind,))
    names = [entry.name for entry in jsonl]
    if any(LAUNCH_PATTERN.search(name) for name in names):
        name = "rollout_logger JSONL (rollout_data_rank_<rank>_<launch>.jsonl)"
    elif names and all(re.fullmatch(r"data_rank\d+\.jsonl", name) for name in names):
        name = "OpenRLHF rank files (data_rank<r>.jsonl, the original board's format)"
    elif names and all(re.fullmatch(r"rollout_data_rank\d+\.jsonl", name) for name in names):
        name = "verl fork's rollout_data_rank<r>.jsonl (the original board's format)"
    else:
        name = "JSONL, the board's format"
    return sources, RunFormat(name)


# The top-level keys of a file's first line, however long (a reasoning model's line can be MBs), per file version;
# none for an empty file or a line that is not a JSON object.
@functools.lru_cache(maxsize=1024)
def first_line_keys(path: str, status: FileStatus) -> set:
    line, size = b"", 1 << 16
    while b"\n" not in line and len(line) < status.size:
        buffer, got = read_range(path, len(line), min(len(line) + size, status.size))
        if not got:  # cut short since it was listed
            break
        line += bytes(buffer[:got])
        size *= 2
    line = line.split(b"\n", 1)[0].removeprefix(UTF8_BOM)
    try:
        return set(LINE_FIELDS_DECODER.decode(line))
    except (msgspec.DecodeError, ValueError):
        return set()


# TRL's completion logs: the reward functions' names come from the logger's metadata or TRL's logged
# rewards/<name>/mean; without either, every float column between completion and advantage is taken as one. Made
# again only when the files they come from change (the signatures of the folder and of its parent).
@functools.lru_cache(maxsize=64)
def trl_completions_format(run_dir: str, *signatures: tuple) -> RunFormat:
    names = trl_reward_names(run_dir)
    note = "no rollout_meta or trainer_state.json names the reward functions: every float column between completion and advantage is taken as one"
    problems = () if names else (("", 0, "note", note),)
    weights = tuple((meta_reward_weights(read_meta(run_dir)) or {}).items())
    return RunFormat("TRL completion logs (log_completions=True: completions/completions_<step>.parquet)", trl_completion_lines, (tuple(names),), problems, weights)


def trl_reward_names(run_dir: str) -> list[str]:
    meta = read_meta(run_dir)
    if meta and isinstance(meta.get("reward_funcs"), list):
        return [str(name) for name in meta["reward_funcs"]]
    folder = trl_output_folder(run_dir)  # the output folder, also when its completions/ folder was opened
    _, state = newest_trainer_state(mirrored_history(folder) if is_remote(folder) else Path(folder), [])
    if state is not None:
        keys = (key for entry in state["log_history"] if isinstance(entry, dict) for key in entry)
        return list(dict.fromkeys(key[len("rewards/") : -len("/mean")] for key in keys if key.startswith("rewards/") and key.endswith("/mean")))
    return []


# One parquet file of GRPOTrainer.log() (columns step, prompt, completion, a column per reward function, the
# log_extra columns, advantage) as the board's lines: the reward functions' scores in rewards_per_func, their plain
# sum (NaN-skipping, as TRL sums; the weights are applied when the run loads) as reward, the prompt's completions a
# group, the other columns fields.
def trl_completion_lines(data: bytes, context: tuple) -> bytes:
    table = pyarrow.parquet.read_table(io.BytesIO(data))
    columns = table.column_names
    names = [name for name in context[0] if name in columns]
    if not context[0] and "completion" in columns:  # TRL writes the scores as floats; log_extra columns follow them
        between = columns[columns.index("completion") + 1 : columns.index("advantage") if "advantage" in columns else None]
        names = [name for name in between if pa.types.is_floating(table.schema.field(name).type)]
    lines = []
    for row in table.to_pylist():
        scores = {name: row.pop(name) for name in names}
        finite = [score for score in scores.values() if score is not None and not math.isnan(score)]
        line = {
            "step": row.pop("step", None),
            "prompt": row.pop("prompt", None),
            "response": completion_text(row.pop("completion", None)),
            "reward": math.fsum(finite) if finite else None,
            "rewards_per_func": scores,
            "advantage": row.pop("advantage", None),
        }
        line["group_id"] = group_of_prompt(line["prompt"])
        line |= {(f"{name} (log_extra)" if name in line or name in FORMAT_KEYS else name): value for name, value in row.items()}
        lines.append(msgspec.json.encode(line))
    return b"".join(line + b"\n" for line in lines)


# A completion as text: a chat completion of one assistant message is its content; others stay the message list.
def completion_text(completion):
    if isinstance(completion, list) and len(completion) == 1 and isinstance(completion[0], dict) and isinstance(completion[0].get("content"), str):
        return completion[0]["content"]
    return completion


# A TRL output folder opened at its completions/ folder: the output folder, where the checkpoints are.
def trl_output_folder(run_dir: str) -> str:
    folder, _, name = run_dir.rstrip("/").rpartition("/" if is_remote(run_dir) else os.sep)
    return folder if name == TRL_COMPLETIONS_FOLDER and folder else run_dir


# The weights the logger's metadata gives the reward functions, by name (None: it names none).
def meta_reward_weights(meta: dict | None) -> dict[str, float] | None:
    names, weights = (meta or {}).get("reward_funcs"), (meta or {}).get("reward_weights")
    if not isinstance(names, list) or not isinstance(weights, list) or len(names) != len(weights):
        return None
    if not all(type(weight) in (int, float) and math.isfinite(weight) for weight in weights):
        return None
    return {str(name): float(weight) for name, weight in zip(names, weights)}


# Completions of one prompt in a step form a group (GRPO's): the prompt's hash names it.
def group_of_prompt(prompt) -> str:
    return hashlib.blake2b((as_text(prompt) or "").encode(), digest_size=8).hexdigest()


# A verl dump (<step>.jsonl) with verl's keys renamed to the board's and each prompt's samples a group; line for line,
# so the load report's line numbers are the file's (a line that is not a JSON object stays as it is, a bad line).
def verl_lines(data: bytes, context: tuple) -> bytes:
    return b"\n".join(verl_line(line) for line in data.removeprefix(UTF8_BOM).split(b"\n"))


def verl_line(line: bytes) -> bytes:
    if not line.strip():
        return line
    try:
        fields = LINE_FIELDS_DECODER.decode(line)
        encode = msgspec.json.encode
    except (msgspec.DecodeError, ValueError):  # NaN, bad UTF-8: Python's json keeps both as they are
        try:
            fields = json.loads(line.decode("utf-8", errors="surrogateescape"))
        except (ValueError, RecursionError):
            return line
        encode = lambda value: json.dumps(value, ensure_ascii=False).encode("utf-8", errors="surrogateescape")  # noqa: E731
        if not isinstance(fields, dict):
            return line
    taken = {VERL_KEYS[key] for key in fields if key in VERL_KEYS}
    renamed = {VERL_KEYS.get(key) or (key + VERL_EXTRA_SUFFIX if key in taken else key): value for key, value in fields.items()}
    if "group_id" not in renamed and "prompt" in renamed:
        prompt = renamed["prompt"]
        renamed["group_id"] = group_of_prompt(raw_value(prompt) if isinstance(prompt, msgspec.Raw) else prompt)
    return encode(renamed)


# Where a run's conversions are kept: one folder per run in the cache folder.
def conversions_folder(cache: "IndexCache", run_dir: str) -> Path:
    return cache.folder / "converted" / hashlib.sha1(os.fsencode(canonical_path(run_dir))).hexdigest()[:20]


# A source file's conversion, made when the file (or what the conversion depends on) changed since the last one; a
# stamp beside it records what it was made from. Returns the conversion's path.
def converted_file(source: str, status: FileStatus, run_format: RunFormat, folder: Path, known: dict) -> str:
    name = source.rstrip("/").rsplit("/", 1)[-1]
    target = folder / (name if name.endswith(".jsonl") else f"{name}.jsonl")
    stamp_path = target.with_name(f"{target.name}.source")
    stamp = {"source": canonical_path(source), "status": list(status), "conversion": CONVERSION_FORMAT, "context": json.loads(json.dumps(run_format.context))}
    if known.get(source) == (stamp, str(target)) and target.is_file():
        return str(target)
    with contextlib.suppress(OSError, ValueError):
        if target.is_file() and json.loads(stamp_path.read_bytes()) == stamp:
            known[source] = (stamp, str(target))
            return str(target)
    data = run_format.convert(read_file(source), run_format.context)
    folder.mkdir(parents=True, exist_ok=True)
    for path, content in ((target, data), (stamp_path, json.dumps(stamp).encode())):
        temporary = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
        temporary.write_bytes(content)
        os.replace(temporary, path)
    known[source] = (stamp, str(target))
    return str(target)


if __name__ == "__main__":
    main()
