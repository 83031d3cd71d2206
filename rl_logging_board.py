"""RL Logging Board: per-sample and per-token views of RL (GRPO/PPO) rollouts.

Run with `bash start.sh [PORT] [ROOT]`, or `streamlit run rl_logging_board.py -- --root <folder of runs>`. A run is a
folder of JSONL files (one per data-parallel rank); every line is one sampled response. Other trainers' files (TRL's
completion parquet, verl's dumps) are converted into such lines once; a folder may be on object storage (s3://...).
docs/data-format.md describes the format, and docs/page.md each page area.

This file is the page only: main() as its outline, one draw_* function per region (each returns the user's choices),
the cached loaders that feed one another (run_store -> load_step_batch / load_sample_tokens -> cached tables and
charts), widgets and session state. Everything beneath it, without Streamlit, is the rl_board package: its
__init__ docstring is the map (reading, formats, history, search, metrics, figures).

Sections, in order:

    Page outline       main(): sidebar, load, metadata, load report, step curves, training metrics, search, step area;
                       launch options, network guard
    Page areas         one draw_* function per region; Settings (the sidebar's choices), StateKey (session-state keys)
    Cached loaders     shared by reruns and sessions: stores, step batches, sample tokens, charts and tables
"""
import argparse
import base64
import collections
import dataclasses
import functools
import hashlib
import hmac
import json
import math
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import streamlit as st
import streamlit.components.v1 as components
from streamlit.dataframe_util import convert_pandas_df_to_arrow_table
from streamlit.delta_generator import DeltaGenerator
from streamlit.runtime.scriptrunner import add_script_run_ctx, get_script_run_ctx

from rl_board.changes import (
    DIFF_WORDS,
    STATUSES,
    PromptChanges,
    default_threshold,
    prompt_changes,
    runs_between,
    side_rows,
    word_diff,
)
from rl_board.figures import (
    HEAT_MAP_COLUMNS,
    PICK_STEP,
    VALUE_LABELLED_TOKENS,
    batch_charts_left_out,
    batch_reward_chart,
    marked_words_html,
    matches_per_step_chart,
    metric_chart,
    mismatch_bucket_chart,
    prompt_reward_chart,
    reward_distribution_chart,
    reward_gap_chart,
    running_text_html,
    signal_chart,
    staleness_share_chart,
    step_curve_chart,
    step_fraction_chart,
    step_table_chart,
    token_heatmap_figure,
    tokens_per_column,
)
from rl_board.metrics import (
    REWARD_SERIES,
    STEP_CURVE_COLUMNS,
    TOKEN_ROWS,
    SampleFilter,
    TokenRows,
    batch_table_view,
    facet_table,
    few_reward_values,
    filter_columns,
    filter_mask,
    finite,
    group_signal_by_step,
    group_table,
    largest_changes,
    step_statistics_table,
    step_stats,
    token_rows,
    trl_kl_by_step,
    trl_pools_ranks,
    turn_rows,
)
from rl_board.mismatch import (
    CORRECTIONS,
    DEFAULT_CORRECTION,
    DRIFT,
    RENORMALISATION,
    MismatchTokens,
    largest_mismatches,
    mismatch_by_bucket,
    mismatch_by_step,
    read_mismatch_tokens,
    renormalisation_split,
    sample_sums,
)
from rl_board.reading.history import (
    TRAINER_STATE,
    TRAINING_LOG,
    TrainingHistory,
    history_signature,
    metric_name,
    read_history,
    read_meta,
)
from rl_board.reading.images import (
    SHOWN_IMAGE_SIDE,
    THUMBNAIL_SIDE,
    ImageProblem,
    encoded_image,
    image_check,
    image_file,
)
from rl_board.reading.lines import (
    FORMAT_KEYS,
    IMAGES_SHOWN,
    KL_ESTIMATORS,
    TEXT_FIELD_CHARACTERS,
    TEXT_PREFIX,
    BadLine,
    line_fields,
    raw_value,
)
from rl_board.reading.search import (
    SEARCH_PLACES,
    SEARCH_SECONDS,
    RunTexts,
    SearchResult,
    export_csv,
    export_jsonl,
    export_parquet,
    match_snippets,
    search_pattern,
    search_samples,
    spreadsheet_csv,
)
from rl_board.reading.snapshot import (
    RunSnapshot,
    SampleTokens,
    StepBatch,
    holds_prompt,
    lines_key,
    prompt_lines,
    read_back_problem,
    read_line,
    read_sample_tokens,
    read_step_batch,
    reward_sum_note,
    total_reward,
    unread_lines_note,
)
from rl_board.reading.storage import (
    StorageError,
    is_remote,
    is_within,
    joined,
    link_leading_outside,
    lower_scheme,
    remote_storage,
    run_label,
    run_labels,
    shown_url,
    storage_errors,
)
from rl_board.reading.store import RunStore, list_runs
from rl_board.reading.workers import WORKERS, LatestJobThread, Turns, worker_pool
from rl_board.signals import DEFAULT_WINDOW, EXAMPLES_PER_STEP, SIGNALS, firing_examples, signals_by_step
from rl_board.staleness import STALENESS_SERIES, staleness_by_step, staleness_distribution
from rl_board.text import (
    as_written,
    clean_text,
    distinct_labels,
    markdown_code_block,
    markdown_literal,
    number_text,
    one_line,
    shorten,
    significant_format,
    system_prompt_span,
    token_label,
    valid_text,
    visible_whitespace,
)
from rl_board.tokenizer import TOKENIZER_VARIABLE
from rl_board.trajectory import (
    TOOL_SERIES,
    ToolEvents,
    Trajectory,
    numbered,
    read_tool_events,
    read_trajectory,
    tool_summary,
    tools_by_step,
)
from rl_board.update import UPDATE_SERIES, LossPasses, read_loss_passes, sample_shares, sequence_level, update_by_step
from rl_board.watch import (
    WatchPattern,
    remove_pattern,
    save_pattern,
    saved_patterns,
    step_hits,
    watch_counts,
    watch_file,
    watch_pattern,
)
from rollout_logger.metadata import IMPORTANCE_SAMPLING_META_KEY, METRICS_FILES

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
# The sidebar's chosen runs (Compare with) show their whole names, wrapped, instead of a few letters and "…". What a
# pick scrolls to (scroll_into_view) stops below the page's fixed header, the step selector with its heading. The run's
# facts (model, beta, ...) in a smaller type, which fits a 1280 px screen. A chosen pill or view stands out (the theme's
# grey primary colour drew it as the others, so all of What changed's pills chosen looked as none), in the theme's
# text colour on a grey that shows on a dark or a light background. An image opened full screen (its frame then has a
# height) fills the view, however small it is.
PAGE_STYLE = (
    "<style>[data-testid='stText'], [data-testid='stText'] * {white-space: break-spaces !important}"
    " .rl-running-text span {unicode-bidi: isolate; box-shadow: inset -1px 0 0 rgba(160, 160, 170, 0.45)}"
    " [data-testid='stSidebar'] [data-tag] {max-width: 100%; height: auto}"
    " [data-testid='stSidebar'] [data-tag] span[title] {max-width: none; overflow: visible; white-space: normal; overflow-wrap: anywhere}"
    " .st-key-step_slider, .st-key-step_selectbox {scroll-margin-top: 130px} .st-key-sample_index {scroll-margin-top: 80px}"
    " .st-key-run_facts [data-testid='stMetricValue'] {font-size: 1.6rem}"
    " [data-testid='stButtonGroup'] button[data-selected]:not([data-disabled]) {background-color: rgba(128, 128, 135, 0.35); color: inherit}"
    " [data-testid='stFullScreenFrame'] > div[height] [data-testid='stImageContainer'] {width: 100%}"
    " [data-testid='stFullScreenFrame'] > div[height] [data-testid='stImageContainer'] img"
    " {width: 100% !important; height: calc(100vh - 6rem); object-fit: contain}</style>"
)


# A fragment of the step area, drawn in the server's turns (session_turns): under one interpreter, sessions that change
# the step together are otherwise all drawn at the end (bench/server_sessions.py). The turn is taken inside the
# fragment, so that its own reruns (a step or a sample change) take it too, not only the page's.
def step_area_fragment(draw):
    @functools.wraps(draw)
    def drawn_in_turn(*args, **kwargs):
        with session_turns().turn():
            return draw(*args, **kwargs)

    return st.fragment(drawn_in_turn)


# The page outline: sidebar choices, then each area of the loaded run.
def main():
    st.set_page_config(page_title="RL Logging Board", page_icon="📖", layout="wide")
    st.html(PAGE_STYLE)
    options = launch_options()
    settings, view_box = draw_sidebar(options.root, guard_network_access(options))
    if WORKERS > 1:
        worker_pool()  # spawning the workers takes about a second: do it while the user picks a run
    run, compared = draw_run(settings)
    draw_samples(run, compared, settings, view_box)


# The run in view and those compared with it, over training: its load, its report and its curves, and the search of
# its samples; (None, []) with nothing to show.
def draw_run(settings: "Settings") -> tuple["RunSnapshot | None", list["RunSnapshot"]]:
    run = load_selected_run(settings)
    if run is None:
        return None, []
    compared = load_compared_runs(settings)
    history_dirs = [history_folder(shown, settings.allowed_root) for shown in [run, *compared]]
    history, *compared_histories = (load_history(folder, current_history_signature(folder)) for folder in history_dirs)
    if settings.live:
        watch_runs([run, *compared], [history, *compared_histories], history_dirs, settings.max_samples, settings.live_every)
    draw_run_metadata(run)
    run = draw_reward_weights(run)
    if run.report.empty and run.problems.empty and history.empty and history.problems.empty:
        st.warning(
            f"No `.jsonl` file and no training history in {markdown_literal(run.run_dir)}: a run is a folder of JSONL "
            f"files, one per rank, or a training output folder with {TRAINING_LOG} or {TRAINER_STATE}."
        )
        return None, []
    draw_load_report(run, history)
    if run.samples.empty and not (run.report.empty and run.problems.empty):
        st.warning("No loadable sample in this run: open the load report above to see why.")
    runs = named_runs([run, *compared])
    if settings.reward_curves:
        draw_curves(runs, [history, *compared_histories], settings)
    if not run.samples.empty:
        draw_search(run, settings)
    return run, compared


# The run's samples: what changed between two runs, and the step area. A fragment that also draws the sidebar's settings
# of how samples are shown (in their place there), so that changing one reruns only this part of the page, not the
# load and the curves.
@st.fragment
def draw_samples(run: "RunSnapshot | None", compared: list["RunSnapshot"], settings: "Settings", view_box: DeltaGenerator):
    settings = dataclasses.replace(settings, view=draw_view_settings(view_box))
    has_samples = run is not None and not run.samples.empty
    if has_samples:
        draw_changes(run, compared, settings)
    if has_samples and settings.response_compare:
        draw_step_response(run, compared, settings)
    else:
        st.session_state.pop(StateKey.SCROLL_TO, None)  # no step area: a pick has nothing to scroll to, now or later


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
    parser.add_argument(
        "--tokenizer",
        default=None,
        help="decode the formats that log token ids only (prime-rl, NeMo-RL): a tokenizer.json, a folder with one, or a "
        "model in the local Hugging Face cache (never downloaded); default: the RL_LOGGING_BOARD_TOKENIZER variable",
    )
    options, _ = parser.parse_known_args(sys.argv[1:])
    options.root = shown_url(options.root)  # credentials in its URL are not read (storage says where they go), nor shown
    if options.endpoint_url:  # before the workers start: they read it too
        os.environ["AWS_ENDPOINT_URL"] = options.endpoint_url
    if options.tokenizer:
        os.environ[TOKENIZER_VARIABLE] = options.tokenizer
    return options


# Served beyond this machine, anyone who reaches the port could read every JSONL file the server can: the page then
# asks for the access token (RL_LOGGING_BOARD_TOKEN, in the URL as ?token=..., dropped from it once accepted, or typed
# once per session) and opens
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
        linked = st.query_params.get("token", "")
        if not (linked and hmac.compare_digest(linked.encode(), token.encode())):
            if linked:
                st.error("Wrong access token in the link.")
            typed = st.text_input("Access token", type="password", help=f"The server's {TOKEN_VARIABLE}; start.sh prints a link with it.")
            if not hmac.compare_digest(typed.encode(), token.encode()):
                if typed:
                    st.error("Wrong access token.")
                st.stop()
        st.session_state[StateKey.TOKEN_ACCEPTED] = True
        st.query_params.pop("token", None)  # accepted: out of the address bar and the browser's history
        st.rerun()  # drawn anew without the token box
    return None if options.allow_any_root else options.root


# The step in view and its samples. A fragment: picking a step, a table row or a group reruns only this part
# of the page, not the sidebar, the load and the step curves above.
@step_area_fragment
def draw_step_response(run: "RunSnapshot", compared: list["RunSnapshot"], settings: "Settings"):
    step = draw_step_selector(run, settings.live and settings.follow_latest)
    rows = run.step_rows(step)
    key = lines_key(rows)
    batch = load_step_batch(key, rows)
    unread = st.empty()  # always there (STABLE_LAYOUT)
    if batch.problems:
        unread.warning(markdown_literal(unread_lines_note(batch.problems, RELOAD)))
        load_step_batch.clear(key, rows)  # lines that could not be read back are tried again next time
    if settings.view.show_charts:
        draw_batch_charts(run, batch)
    draw_step_tables(batch, settings, run.run_dir, step)
    draw_sample_view(run, compared, batch, step, settings)
    read_ahead(run, step, settings)
    if st.session_state.get(StateKey.SCROLL_TO, ([], 0))[0]:
        scroll_into_view(*st.session_state[StateKey.SCROLL_TO])
        st.session_state[StateKey.SCROLL_TO] = ([], st.session_state[StateKey.SCROLL_TO][1])  # done; its number goes on


# A line of the step in view that could not be read back, as a warning says it.
def unread_line_text(row: pd.Series, error: Exception) -> str:
    return markdown_literal(unread_lines_note([read_back_problem(row["path"], row["line"], error)], RELOAD))


# The steps either side of the one in view, read in the background while the user looks at it: their lines' texts,
# tables and charts, and the tokens of the sample in view, into the caches the step area reads, so that moving the
# step one either way draws from them. The job carries this run's context: Streamlit's caches expect one.
def read_ahead(run: "RunSnapshot", step: int, settings: "Settings"):
    position = run.steps.index(step)
    neighbours = [run.steps[p] for p in (position + 1, position - 1) if 0 <= p < len(run.steps)]
    sample, context = st.session_state.get(StateKey.SAMPLE_INDEX, 0), get_script_run_ctx()

    def read_neighbours():
        add_script_run_ctx(threading.current_thread(), context)
        counted = cached_few_reward_values(run.version, run.samples)
        for neighbour in neighbours:
            rows = run.step_rows(neighbour)
            batch = load_step_batch(lines_key(rows), rows)
            if batch.problems:
                continue
            if settings.view.show_charts:
                cached_batch_charts(batch.key, counted, batch.table)
            if settings.view.show_batch_samples:
                cached_table_view(batch.key, batch.table, settings.kl_estimator, settings.view.pad_token, settings.view.system_prompt_end)
            row = batch.table.iloc[min(max(int(sample), 0), len(batch.table) - 1)]
            load_sample_tokens(row["index_id"], row["path"], int(row["offset"]), int(row["length"]), int(row["step"]))

    read_ahead_thread().submit(read_neighbours)


# The sample in view, right under the table it is picked in, with its tokens and then its group's other completions.
# A fragment inside the step's: picking another sample or token metric redraws only this part, not the step's charts
# and tables above it.
@step_area_fragment
def draw_sample_view(run: "RunSnapshot", compared: list["RunSnapshot"], batch: "StepBatch", step: int, settings: "Settings"):
    sample = draw_samples_pair(run, batch, step, settings) if settings.view.show_samples_pair else chosen_sample(batch)
    draw_other_fields(batch.table.iloc[sample])
    span = draw_trajectory(batch, sample, settings)
    draw_token_area(batch, sample, settings, span)
    draw_sample_group(batch, sample, settings)
    draw_prompt_history(run, compared, batch.table.iloc[sample], settings)


# ====================================================================================================================
# Page areas: one function per region, which draws it and returns the user's choices.
# ====================================================================================================================


# Every session-state key of the page, widgets' included, named once. remembered_choice adds ":chosen" and ":drawn"
# to a widget's key for the choice it keeps while the widget is not drawn.
class StateKey:
    LOADED_RUN = "loaded_run"  # the run folder Load & View opened
    TOKEN_ACCEPTED = "token_accepted"  # this session gave the access token
    COMPARE_WITH = "compare_with"  # prefix: one choice per run shown
    LOAD_BUTTON = "load_button"
    METRIC_SERIES = "metric_series"
    METRIC_VIEW = "metric_view"  # the training metric shown
    TRAINING_SUMMARY = "training_summary"
    SELECTED_STEP = "selected_step"  # the step the user chose: the step in view, or one the run lacks for now
    STEP_STANDING_IN = "step_standing_in"  # the step shown in place of a chosen one the run lacks (None: the chosen one is shown)
    LAST_STEP_SEEN = "last_step_seen"  # the run's last step when the page was last drawn (live mode)
    FOLLOWING = "following"  # Follow the latest step was on when the step selector was last drawn
    LAST_STEP_WHEN_CHOSEN = "last_step_when_chosen"  # the run's last step when the user chose the step in view
    STEP_SLIDER = "step_slider"
    STEP_SELECTBOX = "step_selectbox"
    PICKED_ROW = "picked_row"  # the row of a table of samples clicked last: (the table's key, its generation, step, sample)
    SAMPLE_INDEX = "sample_index"  # the sample in view, an index into the step's batch
    STEP_TABLE = "step_table"
    BATCH_TABLE = "batch_table"  # the batch table's box
    BATCH_ROWS = "batch_rows"  # the batch table; its selection, the row picked (of the step in view or one before)
    GROUP_TABLE = "group_table"
    GROUP_MEMBER = "group_member"  # prefix: a button per place in the sample's group
    GROUP_PART = "group_part"  # which GROUP_SHOWN of a large group's completions are drawn
    GROUP_PART_FOR = "group_part_for"  # the step batch and sample GROUP_PART was last set for
    CURVE_VIEW = "curve_view"
    REWARD_SERIES = "reward_series"  # prefix: one choice per set of options
    REWARD_WEIGHTS = "reward_weights"  # prefix: one per run
    KL_STATISTIC = "kl_statistic"
    KL_LOG_SCALE = "kl_log_scale"
    TOKEN_VIEW = "token_view"
    TOKEN_TABLE = "token_table"
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
    SEARCH_DOWNLOADS = "search_downloads"  # prefix: the results' download buttons
    STEP_DOWNLOADS = "step_downloads"  # prefix: the step's download buttons
    STEP_PICKED = "step_picked"  # a search result, a curve's point or a jump was clicked: the whole page reruns to show it
    LARGEST_CHANGES = "largest_changes"
    SCROLL_TO = "scroll_to"  # (keys, number): the elements a pick brings into view once drawn, the first found
    FIELD_SERIES = "field_series"
    FACET = "facet"
    FACET_SERIES = "facet_series"
    OTHER_FIELDS = "other_fields"
    CURVE_LOOK = "curve_look:"  # prefix: one per curve setting
    MISMATCH = "mismatch"  # prefix: Step-Mismatch's choices, the correction's per run
    UPDATE = "update"  # prefix: Step-Update's choices
    TOOLS = "tools"  # prefix: Step-Tools' choices
    STALENESS = "staleness"  # prefix: Step-Staleness' choices
    SIGNALS = "signals"  # prefix: Step-Signals' choices
    TRAJECTORY = "trajectory"  # prefix: the turn picked in a sample's trajectory, per sample
    CHANGES = "changes"  # What changed between A and B: the expander, and a prefix for its choices
    WATCH = "watch"  # prefix: Step-Watch's form, the step whose hits are listed, the hits table


# How the curves are drawn, chosen above them.
@dataclass(frozen=True)
class CurveLook:
    variance_scale: float  # the band is mean ± std × this
    zero_shift: bool  # every line starts at 0
    smoothing: float  # exponential moving average weight, 0: none


# The curve settings' first values: the original's (Variance Scaling, Zero Shift), and no smoothing.
CURVE_LOOK_DEFAULTS = {"variance_scale": 0.2, "zero_shift": False, "smoothing": 0.0}


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
    response_compare: bool
    use_logp_as_kl: bool
    kl_estimator: str
    view: "ViewSettings | None" = None  # drawn by draw_samples, for the areas it draws


# The sidebar's choices of how samples are shown, read by the samples' areas (draw_samples).
@dataclass(frozen=True)
class ViewSettings:
    pad_token: str | None  # None: Drop Padding Token is off
    system_prompt_end: str | None  # None: Drop System Prompt is off
    show_charts: bool
    show_batch_samples: bool
    show_samples_pair: bool
    show_heat_map: bool
    whole_texts: bool  # Show Whole Texts: texts over TEXT_SHOWN characters drawn whole (draw_text)


KL_ESTIMATOR_LABELS = {"kl": "kl (original board)", "k1": "k1 (log ratio)", "k2": "k2 (r²/2)", "k3": "k3 (TRL's kl)"}


KL_STATISTICS = ["mean ± std", "median (25-75 %)"]


TOKEN_VIEWS = ["Token table", "Heat map", "Response tokens"]


# The running text shows this many tokens at a time: each token is an element the browser must check and lay out.
RUNNING_TEXT_TOKENS = 2000


# The token views show at most this many tokens of a response: a runaway generation logged whole (one line of 16.7
# million tokens) took 63 s and 7.5 GiB of the server to show, its token table 657 MB sent to the browser. The line's
# numbers in the index, the step's charts and the downloads have all its tokens, as has rl_board's Run.tokens.
TOKEN_VIEW_TOKENS = 1 << 20


# Step-Mismatch's series, per step (rl_board.mismatch.mismatch_by_step).
MISMATCH_SERIES = {
    "mean |Δ|": "mean of |logp - sampler_logp| over the step's tokens",
    RENORMALISATION: "mean of -log M, M the mass the sampler's top-k/top-p kept at the token (sampler_kept_logmass): the part of Δ that is the truncated distribution's renormalisation",
    DRIFT: "mean of |Δ - log M|: the sampler-trainer difference without the renormalisation (numeric drift: kernels, bf16, a cache)",
    "mismatch KL": "mean of exp(Δ) - 1 - Δ: KL(sampler ‖ trainer), k3 on the sampler's tokens",
    "max ratio": "the largest token ratio exp(Δ)",
    "min ratio": "the smallest token ratio exp(Δ)",
    "tokens corrected (%)": "tokens whose weight the correction changes (clipped or masked)",
    "sequences corrected (%)": "sequences with a token whose weight the correction changes",
    "effective sample size (%)": "(Σr)² / (n Σr²) of the raw ratios at the correction's level (tokens or sequences)",
    "mean weight at these thresholds": "mean weight of the step's tokens under the correction chosen",
    "mean applied weight": "mean of the lines' is_ratio: the weight the trainer applied",
}


# Of the shown run's tokens, the largest |Δ| listed.
LARGEST_MISMATCHES = 20


# Of a step's samples, those with the largest share of its update listed.
UPDATE_DRIVERS = 20


# Search results listed at most (the downloads hold up to EXPORT_ROWS).
RESULTS_SHOWN = 1000


EXPORT_ROWS = 10_000  # of a download; more, and the page asks to narrow the filter


EXPORT_BYTES = 100 << 20  # of original lines in a JSONL download


PROGRESS_AFTER_S, PROGRESS_EVERY_S = 0.3, 0.5


# Seconds the user stays on a step before its neighbours are read ahead: by then the browser has drawn it.
READ_AHEAD_DELAY = 1.0

# What to do about a file rewritten since it was loaded (a line no longer where the index has it).
RELOAD = "press Load & View"

# The step selector's widgets: a slider over evenly spaced steps, a select box otherwise.
STEP_WIDGETS = (StateKey.STEP_SLIDER, StateKey.STEP_SELECTBOX)

# STABLE_LAYOUT: an element drawn in one rerun and not the next (a progress bar, a notice) moves every element after it
# to another place in the page, where the browser builds it anew: charts and grids drawn again from nothing, and the
# page jumping as they take their heights (a live refresh scrolled it by 500-800 px). Such elements get a place that
# is always there.

# The step in view of a run opened after another: its latest, whichever it is.
OPEN_AT_LATEST = "latest"


# The original's sidebar, label for label, plus the live mode and KL estimator choices.
def draw_sidebar(default_root: str, allowed_root: str | None) -> tuple["Settings", DeltaGenerator]:
    sidebar = st.sidebar
    sidebar.title("📖 RL Logging Board")
    root = sidebar.text_input("Log(s) Root Path", value=default_root)
    root = lower_scheme(root)  # S3:// as s3://
    if allowed_root is not None and not is_within(root, allowed_root):
        sidebar.warning(f"Served to the network, this board opens only folders under {markdown_literal(allowed_root)}.")
        root = allowed_root
    runs, listing_error = listed_runs(root)
    if listing_error:
        sidebar.error(markdown_literal(listing_error))
    misnamed = [name for name in runs if valid_text(name) != name]  # a widget's options must be UTF-8: said, not listed
    if misnamed:
        runs = [name for name in runs if name not in misnamed]
        sidebar.caption(f"Not listed, its name not valid UTF-8 (rename the folder to open it): {', '.join(markdown_literal(valid_text(name)) for name in misnamed)}")
    run_name = sidebar.selectbox(
        "Choose Log Name", runs, index=(0 if runs[0] == "." else len(runs) - 1) if runs else None, format_func=distinct_labels(runs, run_option_label)
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
        format_func=distinct_labels(others, run_option_label),
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
        reward_curves = st.checkbox("Reward 曲线图", value=True, help="Show the per-step curves (how they are drawn is set above them).")
        response_compare = st.checkbox("Response 对比", value=True, help="Show the per-step response area.")

    with sidebar.expander("⚙️ show details setting", expanded=True) as view_box:
        estimator = default_kl_estimator(shown_dir)  # the shown run's: browsing the names changes nothing
        use_logp_as_kl = st.checkbox(
            "Use LogP as KL",
            value=estimator == "kl",  # on for the original's runs, as it was; off for TRL's, whose kl the estimator gives
            help="Step-KL plots the mean log_ratio (logp - ref_logp) instead of the mean kl of the KL estimator below.",
        )
        kl_estimator = st.selectbox(
            "KL estimator",
            list(KL_ESTIMATORS),
            index=list(KL_ESTIMATORS).index(estimator),
            format_func=KL_ESTIMATOR_LABELS.get,
            help="Used for kl in Step-KL (with Use LogP as KL off), the batch table and the token rows; k3 by default "
            "for runs the logger wrote from TRL, whose logged kl it is. With r = logp - ref_logp: "
            + "; ".join(f"{name} = {formula}" for name, formula in KL_ESTIMATORS.items()),
        )

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
        response_compare=response_compare,
        use_logp_as_kl=use_logp_as_kl,
        kl_estimator=kl_estimator,
    ), view_box


# The rest of the sidebar's show details setting: how the samples are shown, drawn in `view_box` by draw_samples.
def draw_view_settings(view_box: DeltaGenerator) -> "ViewSettings":
    with view_box:
        drop_padding = st.checkbox("Drop Padding Token", value=True)
        pad_token = st.text_input("Pad Token", value="<PAD>")
        drop_system_prompt = st.checkbox("Drop System Prompt", value=True)
        system_prompt_end = st.text_input("End Token of System Prompt", value="<endofsystem>")
        return ViewSettings(
            pad_token=pad_token if drop_padding else None,
            system_prompt_end=system_prompt_end if drop_system_prompt else None,
            show_charts=st.checkbox("Show Charts", value=True),
            show_batch_samples=st.checkbox("Show Batch Samples", value=True),
            show_samples_pair=st.checkbox("Show Samples Pair", value=True),
            show_heat_map=st.checkbox("Show Heat Map", value=True),
            whole_texts=st.checkbox(
                "Show Whole Texts",
                value=False,
                help=f"A prompt, response or reference over {TEXT_SHOWN:,} characters shows its first and last {TEXT_SHOWN // 2:,}, "
                "and how many lie between; on, every text is shown whole (the page then takes longer to draw).",
            ),
        )


# TRL logs k3 as kl: a run whose metadata names a trl version starts on k3, and Step-KL plots it (Use LogP as KL off),
# so the board's numbers match TRL's; the original's runs start as it did (its kl, Use LogP as KL on).
def default_kl_estimator(run_dir: str | None) -> str:
    if run_dir is None:
        return "kl"
    meta = cached_meta(run_dir)
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
    opening = settings.load_clicked or StateKey.LOADED_RUN not in st.session_state  # the first screen opens the chosen run
    if opening:
        chosen_dir = joined(root, settings.run_name)
        if st.session_state.get(StateKey.LOADED_RUN, chosen_dir) != chosen_dir:
            forget_the_place()
        st.session_state[StateKey.LOADED_RUN] = chosen_dir
        for key in (StateKey.LAST_STEP_SEEN, StateKey.LAST_STEP_WHEN_CHOSEN):  # new steps are counted in this run alone
            st.session_state.pop(key, None)
    run_dir = st.session_state[StateKey.LOADED_RUN]
    if settings.allowed_root is not None and not is_within(run_dir, settings.allowed_root):  # e.g. a link out of the root
        st.warning(f"{markdown_literal(run_dir)} leads outside {markdown_literal(settings.allowed_root)}: served to the network, this board opens only folders under it.")
        return None
    if settings.allowed_root is not None and (link := link_out_of_root(run_dir, settings.allowed_root)):
        st.warning(f"{markdown_literal(link)} is a link that leads outside {markdown_literal(settings.allowed_root)}: served to the network, this board opens no run holding one.")
        return None
    other_choice = st.empty()  # always there (STABLE_LAYOUT): picking another name must not rebuild the page below
    if run_dir != joined(root, settings.run_name):
        other_choice.caption(f"Showing {markdown_literal(run_dir)}; press Load & View to open {markdown_literal(settings.run_name)}.")
    try:
        snapshot = load_run(run_dir, settings.max_samples, opening or settings.live, [ProgressBar(), ProgressBar()])
    except OSError as error:
        st.error(markdown_literal(load_failure(run_dir, error)))
        return None
    if opening:  # the original's toast; it counts the samples shown, as the load report's caption does
        shown, bad = len(snapshot.samples), int(snapshot.report["bad lines"].sum())
        st.toast(f"Loaded {shown} sample(s), success: {shown}, error: {bad}")
    return snapshot


# Why a run could not be loaded: object storage's message as it is (it names the run, without credentials), a disk's
# error (an I/O error, an NFS handle gone stale) with the run's folder.
def load_failure(run_dir: str, error: OSError) -> str:
    return str(error) if isinstance(error, StorageError) else f"{run_dir} could not be read ({error}): it is read again at the next load or refresh."


# A run opened after another starts at its latest step, its first sample and no search: the place in the other run
# means nothing in it. (The session's first run opens at its first step, as the original opened a run.)
# Widgets drawn before get their values set, not dropped: a dropped one would take the browser's value back.
def forget_the_place():
    for key, value in ((StateKey.SAMPLE_INDEX, 0), (StateKey.SEARCH_QUERY, ""), (StateKey.SEARCH_FILTERS, []), (StateKey.SEARCH_SORT, "step")):
        if key in st.session_state:
            st.session_state[key] = value
    st.session_state[StateKey.SELECTED_STEP] = OPEN_AT_LATEST


# A run's snapshot from its shared store, brought up to date when asked (or first needed), with progress bars: the
# caller's, always there, so the elements below keep their places (STABLE_LAYOUT).
def load_run(run_dir: str, max_samples: int, refresh: bool, bars: list["ProgressBar"]) -> "RunSnapshot":
    store = run_store(run_dir)
    if (refresh or max_samples not in store.snapshots) and store.needs_work(max_samples):
        try:
            store.load(max_samples, files_progress=bars[0].show, samples_progress=bars[1].show)
        finally:
            for bar in bars:
                bar.clear()
    return store.snapshots.get(max_samples) or store.load(max_samples)  # the newest: another session may have loaded meanwhile


# Where a run's training history is read: its own (TRL's completions/ take the folder above), but never outside the
# root a board served to the network opens (the run folder's own then).
def history_folder(run: "RunSnapshot", allowed_root: str | None) -> str:
    if allowed_root is None or run.history_dir == run.run_dir:
        return run.history_dir
    return run.history_dir if confined(run.history_dir, allowed_root) else run.run_dir


# Whether a folder lies under the root a board served to the network opens, no link under it leading out.
def confined(folder: str, allowed_root: str) -> bool:
    return is_within(folder, allowed_root) and not link_out_of_root(folder, allowed_root)


# A link under a folder that leads outside the root a board served to the network opens (link_leading_outside), looked
# for at most every few seconds: a folder of many checkpoints takes a while to walk, and each rerun asks.
@st.cache_data(ttl=10, show_spinner=False)
def link_out_of_root(folder: str, root: str) -> str | None:
    return link_leading_outside(folder, root)


# The runs chosen to compare, loaded as the shown one is (from their index caches once indexed).
def load_compared_runs(settings: "Settings") -> list["RunSnapshot"]:
    run_dirs = [joined(settings.root, name) for name in settings.compare_names]
    run_dirs = [run_dir for run_dir in run_dirs if is_remote(run_dir) or Path(run_dir).is_dir()]
    if settings.allowed_root is not None:
        run_dirs = [run_dir for run_dir in run_dirs if confined(run_dir, settings.allowed_root)]
    # One place for their problems and one pair of progress bars, always there (STABLE_LAYOUT): a run added, or a store
    # failing for one refresh, must not move the page below, where the browser would build every element anew.
    problems, bars = st.empty(), [ProgressBar(), ProgressBar()]
    compared, failures = [], []
    for run_dir in run_dirs:
        if run_dir != st.session_state.get(StateKey.LOADED_RUN):
            try:
                compared.append(load_run(run_dir, settings.max_samples, settings.live, bars))
            except OSError as error:
                failures.append(markdown_literal(load_failure(run_dir, error)))
    if failures:
        problems.warning("\n\n".join(failures))
    return compared


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

    def clear(self):  # a later load is timed from here
        self.element.empty()
        self.started_at, self.shown_at = time.monotonic(), -math.inf


# Live mode: a fragment re-stats the files every few seconds and reruns the page when they changed (rollouts or
# training history, of the shown run or a compared one), or when another session watching the same run already loaded
# the change (the store is shared: it then has no work left).
def watch_runs(shown: list["RunSnapshot"], histories: list["TrainingHistory"], history_dirs: list[str], max_samples: int, every_seconds: int):
    @st.fragment(run_every=every_seconds)
    def check_for_new_lines():
        for run, history, history_dir in zip(shown, histories, history_dirs):
            store = run_store(run.run_dir)
            try:
                changed = store.snapshots.get(max_samples) is not run or store.needs_work(max_samples) or current_history_signature(history_dir) != history.signature
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
    columns = st.container(key="run_facts").columns([4, 2, 3, 3, 2, 2, 1])
    for column, (label, value) in zip(columns, known):
        shown = "—" if value is None else str(value)
        if label == "model":
            shown = shown.rstrip("/").rsplit("/", 1)[-1] or shown
        column.metric(label, markdown_literal(shown), help=None if value is None else markdown_literal(value))
    names, weights = meta.get("reward_funcs"), meta.get("reward_weights")
    if isinstance(names, list) and names:  # the weights as the logger writes them (GRPOConfig's, 1 each by default)
        terms = [markdown_literal(name) for name in names]
        if isinstance(weights, list) and len(weights) == len(names) and all(type(w) in (int, float) and abs(w) < 1e300 for w in weights):
            st.caption("Reward = " + " + ".join(f"{w:g} × {term}" for w, term in zip(weights, terms)))
        else:
            unknown = "gives no weights" if weights is None else "gives no finite weight for each"
            st.caption(f"Reward functions: {', '.join(terms)} (the run's metadata {unknown})")
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
    skipped = int(report["bad lines"].sum()) + history.skipped
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
            f"{len(history.train)} train and {len(history.eval)} eval step(s), {history.skipped} entr(ies) or file(s) skipped"
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


# The step curves and the trainer's metrics, with how they are drawn above them. A fragment: a curve setting, a reward
# series or a view redraws only the curves; a slider moved with the keyboard, which sends each key press, reruns only
# this part, not the page.
@st.fragment
def draw_curves(runs: list[tuple[str, "RunSnapshot"]], histories: list["TrainingHistory"], settings: "Settings"):
    rerun_page_if_a_step_was_picked()
    look = draw_curve_settings()
    if any(not shown.samples.empty for _, shown in runs):
        draw_step_curves(runs, histories, settings, look)
    draw_training_metrics([shown for _, shown in runs], histories, look)


# The original's Variance Scaling and Zero Shift, and Smoothing, in a row above the curves they change; their values
# are kept while Reward 曲线图 hides the curves.
def draw_curve_settings() -> CurveLook:
    keys = {name: StateKey.CURVE_LOOK + name for name in CURVE_LOOK_DEFAULTS}
    keep_while_hidden({key: CURVE_LOOK_DEFAULTS[name] for name, key in keys.items()})
    band, shift, smooth = st.columns([4, 2, 4], vertical_alignment="bottom")
    look = CurveLook(
        variance_scale=band.slider(
            "Variance Scaling", 0.1, 1.0, key=keys["variance_scale"], help="The shaded band around each curve is mean ± std × this factor.",
        ),
        zero_shift=shift.checkbox("Zero Shift", key=keys["zero_shift"], help="Shift every curve so its first point is 0, to compare trends."),
        smoothing=smooth.slider(
            "Smoothing", 0.0, 0.99, step=0.01, key=keys["smoothing"],
            help="Exponential moving average of every step curve and training metric, as in TensorBoard (0: none); the raw values stay faint behind.",
        ),
    )
    kept_while_hidden(list(keys.values()))
    return look


# Widgets drawn only in a chosen view or an open area lose their values when it closes (Streamlit drops a widget's state when
# it is not drawn): before drawing them, each missing value is set back (to its default the first time), and only
# then: a value the page sets is sent to the browser, where it would undo a key press made while the area redraws.
def keep_while_hidden(defaults: dict):
    for key, default in defaults.items():
        if key not in st.session_state:
            st.session_state[key] = st.session_state.get(key + ":kept", default)


# After drawing them: their values, kept for when they are drawn again.
def kept_while_hidden(keys: list[str]):
    for key in keys:
        st.session_state[key + ":kept"] = st.session_state[key]


# Views of per-step curves: mean over the step's samples with a std band, one line per run compared; only the chosen
# view's chart is drawn.
def draw_step_curves(runs: list[tuple[str, "RunSnapshot"]], histories: list["TrainingHistory"], settings: "Settings", look: CurveLook):
    present = lambda column: any(run.has_values(column) for _, run in runs)  # noqa: E731
    view_names = ["Step-Reward", "Step-KL", "Step-RespLen"]
    if present("group_id") or present("truncated"):
        view_names.append("Step-Groups")
    if present("avg_entropy"):
        view_names.append("Step-Entropy")
    field_columns = list(dict.fromkeys(column for _, run in runs for column in run.extra_columns))
    if field_columns:
        view_names.append("Step-Fields")
    if present("avg_abs_mismatch"):
        view_names.append("Step-Mismatch")
    if any(run.has_positive("loss_passes") for _, run in runs):
        view_names.append("Step-Update")
    if any(run.has_positive("turns") for _, run in runs):
        view_names.append("Step-Tools")
    if present("policy_version"):
        view_names.append("Step-Staleness")
    if runs[0][1].facets:
        view_names.append("Step-Facets")
    if len(runs[0][1].steps) >= 2 * DEFAULT_WINDOW:
        view_names.append("Step-Signals")
    view_names.append("Step-Watch")  # a watch pattern is a search: every run with samples has one
    view_name, shown = draw_view_choice("Curves", view_names, StateKey.CURVE_VIEW)
    steps = runs[0][1].steps  # a click on a curve shows the shown run's step nearest it
    curve = dict(
        versions=tuple(run.version for _, run in runs),
        variance_scale=look.variance_scale,
        zero_shift=look.zero_shift,
        smoothing=look.smoothing,
        _runs=[(name, run.samples) for name, run in runs],
    )
    with shown:
        if view_name == "Step-Reward":
            function_columns = list(dict.fromkeys(column for _, run in runs for column in run.reward_function_columns))
            options = [name for name in REWARD_SERIES + function_columns if present(name)]
            key = StateKey.REWARD_SERIES + ":" + "|".join(options)  # a run with other series starts from the default
            # GRPO: each reward function beside the total, to see one traded for another.
            default = [n for n in options if n in REWARD_SERIES][:2] + [n for n in options if n in function_columns]
            remembered_choice(key, options, default or options[:1])
            chosen = st.multiselect("Reward series", options, key=key, format_func=distinct_labels(options))
            draw_chart(st, cached_step_curve(chosen, "👾 Rewards Logging (Step level)", "reward", **curve), steps)
            draw_largest_changes(runs[0][1], chosen[:1])
        elif view_name == "Step-Groups":
            draw_chart(st, cached_fraction_chart(curve["versions"], look.smoothing, curve["_runs"]), steps)
            st.caption(
                "zero-signal groups: prompts whose completions all got the same reward, so their "
                "advantages are 0 and they teach nothing. truncated: completions cut at the length limit."
            )
        elif view_name == "Step-KL":
            draw_kl_curve(settings, curve, runs, histories)
        elif view_name == "Step-Fields":
            remembered_choice(StateKey.FIELD_SERIES, field_columns, field_columns[:3])
            chosen = st.multiselect("Fields", field_columns, key=StateKey.FIELD_SERIES, format_func=distinct_labels(field_columns), help="Numbers of the lines' keys outside the format (booleans as 0/1), e.g. log_extra columns or a reward's extras.")
            draw_chart(st, cached_step_curve(chosen, "👾 Other fields of the lines (Step level)", "value", **curve), steps)
        elif view_name == "Step-Facets":
            draw_facet_curve(runs[0][1], curve)
        elif view_name == "Step-Mismatch":
            draw_mismatch(runs, look)
        elif view_name == "Step-Update":
            draw_update(runs, histories[0], look)
        elif view_name == "Step-Tools":
            draw_tools(runs, look)
        elif view_name == "Step-Watch":
            draw_watch(runs, look, settings)
        elif view_name == "Step-Staleness":
            draw_staleness(runs, look)
        elif view_name == "Step-Signals":
            draw_signals(runs, look, settings.kl_estimator)
        else:
            column, title, unit, missing = {
                "Step-RespLen": (
                    "response_tokens_len",
                    "👾 Response Length Logging (tokens, Step level)",
                    "tokens",
                    "No token counts: the run has neither `response_tokens` nor `logprobs`.",
                ),
                "Step-Entropy": ("avg_entropy", "👾 Token Entropy (Step level)", "nats per token", None),
            }[view_name]
            if present(column):
                draw_chart(st, cached_step_curve([column], title, unit, **curve), steps)
                draw_largest_changes(runs[0][1], [column])
            else:
                st.info(missing)


# A number per step for each value of a facet (a short text field such as data_source), from the shown run: e.g. the
# reward of each data source over training, with each value's sample count and mean below.
def draw_facet_curve(run: "RunSnapshot", curve: dict):
    facet_column, series_column = st.columns(2)
    fit_state(StateKey.FACET, run.facets)
    facet = facet_column.selectbox("Facet", run.facets, key=StateKey.FACET, format_func=distinct_labels(run.facets, filter_label))
    numbers = [column for column in ["reward", *run.reward_function_columns, "advantage", "response_tokens_len", "avg_entropy", "avg_log_ratio", *run.extra_columns] if run.has_values(column)]
    if not numbers:
        st.info("No number to draw per value: the loaded samples have no reward or other number.")
        return
    fit_state(StateKey.FACET_SERIES, numbers)
    series = series_column.selectbox("Series", numbers, key=StateKey.FACET_SERIES, format_func=distinct_labels(numbers))
    values = run.samples[facet].dropna().unique().tolist()
    by_value = [(f"{facet.removeprefix(TEXT_PREFIX)} = {value}", run.samples[run.samples[facet] == value]) for value in sorted(values)]
    draw_chart(st, cached_step_curve([series], f"👾 {series} per {facet.removeprefix(TEXT_PREFIX)} (Step level)", series, dashes_named=False, **(curve | {"versions": (curve["versions"][0], facet), "_runs": by_value})), run.steps)
    st.dataframe(facet_table(run.samples, facet, series), hide_index=True, width="stretch")


# Step-Mismatch: where the sampler and the trainer disagreed, per step, under the correction and thresholds the user
# picks (the shown run's own by default: its metadata's, else TRL's defaults), each run compared a line; then the
# shown run's tokens with the largest |Δ|, each row a click to its sample.
def draw_mismatch(runs: list[tuple[str, "RunSnapshot"]], look: CurveLook):
    shown_name, shown = runs[0]
    applied = ((shown.meta or {}).get(IMPORTANCE_SAMPLING_META_KEY) or {})
    mode, clip_min, clip_max = DEFAULT_CORRECTION
    if applied.get("mode") in CORRECTIONS:  # the metadata's bounds as numbers the inputs take (TRL keeps an int as given)
        mode, clip_min, clip_max = applied["mode"], *(threshold(applied.get(name)) for name in ("clip_min", "clip_max"))
    mode_column, low_column, high_column, series_column = st.columns([3, 2, 2, 3], vertical_alignment="bottom")
    key = f"{StateKey.MISMATCH}:{shown.run_dir}:"  # each run starts from its own correction
    keep_while_hidden({key + "mode": mode, key + "clip_min": clip_min, key + "clip_max": clip_max})
    mode = mode_column.selectbox(
        "Correction", list(CORRECTIONS), key=key + "mode",
        help="How the ratio r = exp(Δ) is corrected, TRL's vllm_importance_sampling_mode names: " + "; ".join(f"{name}: {text}" for name, text in CORRECTIONS.items()),
    )
    clip_min = low_column.number_input("C_min", min_value=0.0, step=0.1, format="%.4g", key=key + "clip_min", help="Lower threshold of the ratio; empty: none.")
    clip_max = high_column.number_input("C_max", min_value=0.0, step=0.1, format="%.4g", key=key + "clip_max", help="Upper threshold of the ratio; empty: none.")
    kept_while_hidden([key + "mode", key + "clip_min", key + "clip_max"])
    tables = []
    for name, run in runs:
        if run.has_values("avg_abs_mismatch"):
            tokens = cached_mismatch_tokens(run.version, run.samples)
            sums = cached_mismatch_sums(run.version, tokens)
            table = cached_mismatch_by_step(run.version, mode, clip_min, clip_max, run.samples["step"].to_numpy(), tokens, sums)
            if len(table):
                tables.append((name, table))
    options = [name for name in MISMATCH_SERIES if any(table[name].notna().any() for _, table in tables)]  # no is_ratio: no applied weight
    if not options:  # the index saw log-probs the lines no longer hold (rewritten), or none has a number
        problems = cached_mismatch_tokens(shown.version, shown.samples).problems
        st.warning("No token has both log-probs now" + (f": {len(problems)} line(s) could not be read back, e.g. {markdown_literal(problems[0])}; if the files were rewritten, press Load & View." if problems else "."))
        return
    remembered_choice(StateKey.MISMATCH + ":series", options, options[0])
    series = series_column.selectbox("Per step", options, key=StateKey.MISMATCH + ":series", help="; ".join(f"{name}: {MISMATCH_SERIES[name]}" for name in options))
    draw_chart(st, step_table_chart(tables, [series], f"👾 Sampler-trainer mismatch (Step level): {series}", series, look.smoothing), shown.steps)
    note = f"Δ = logp - sampler_logp per token (trainer minus sampler); thresholds applied to the raw ratios under {mode}: {CORRECTIONS[mode]}."
    if applied:
        note += f" The trainer applied {markdown_literal(applied.get('mode'))} at [{markdown_literal(applied.get('clip_min'))}, {markdown_literal(applied.get('clip_max'))}] (its weights: mean applied weight)."
    st.caption(note)
    if shown.has_values("avg_abs_mismatch"):
        tokens = cached_mismatch_tokens(shown.version, shown.samples)
        draw_renormalisation_split(shown_name, shown, tokens)
        draw_where_the_mismatch_lives(shown_name, tokens)
        draw_largest_mismatches(shown_name, shown, tokens)


# Step-Tools: an agent's trajectories per step, each run compared a line: turns and tool calls per sample, the tool
# error rate, and per tool name its calls per sample and success rate; the shown run's tools in a table.
def draw_tools(runs: list[tuple[str, "RunSnapshot"]], look: CurveLook):
    shown_name, shown = runs[0]
    tables = []
    for name, run in runs:
        if run.has_values("turns"):
            events = cached_tool_events(run.version, run.samples)
            tables.append((name, cached_tools_by_step(run.version, run.samples, events.table)))
    options = list(dict.fromkeys(column for _, table in tables for column in table if table[column].notna().any()))
    if not options:
        st.info("No sample with turns has a number to draw.")
        return
    remembered_choice(StateKey.TOOLS + ":series", options, options[0] if "tool calls per sample" not in options else "tool calls per sample")
    series = st.selectbox("Per step", options, key=StateKey.TOOLS + ":series", format_func=distinct_labels(options), help="; ".join(f"{name}: {text}" for name, text in TOOL_SERIES.items()) + "; calls per sample: <tool> and success rate: <tool> (results without an error over results), per tool name.")
    draw_chart(st, step_table_chart(tables, [series], f"👾 Agent trajectories (Step level): {series}", series, look.smoothing), shown.steps)
    events = cached_tool_events(shown.version, shown.samples)
    if events.problems:
        st.warning(f"{len(events.problems)} line(s) could not be read back for their turns, e.g. {markdown_literal(events.problems[0])}; if the files were rewritten, press Load & View.")
    summary = tool_summary(events.table)
    if len(summary):
        st.markdown(f"**Tools** of {markdown_literal(shown_name)}, over its loaded samples")
        st.dataframe(summary, hide_index=True, width="stretch", height=min(300, 38 + 35 * len(summary)),
                     column_config={"success rate": st.column_config.ProgressColumn(format="%.3g", min_value=0.0, max_value=1.0, help="results without an error over results")})
    st.caption("Samples with turns only. A call the trainer did not run (the tool limit, a result that did not fit) counts as a call without a result.")


# Step-Watch: the root's watch patterns (saved searches: "I cannot", a format tag, a known exploit) as curves of their
# hit rate per step, each run compared a line; a click on a point lists the shown run's hits at that step, each row a
# click to its sample. The patterns are kept per root (Log(s) Root Path) in a file in the index cache's folder.
def draw_watch(runs: list[tuple[str, "RunSnapshot"]], look: CurveLook, settings: "Settings"):
    shown = runs[0][1]
    saved = saved_patterns(settings.root)
    for problem in saved.problems:
        st.warning(f"Watch patterns: {markdown_literal(problem)}")
    draw_watch_patterns(settings.root, saved.patterns)
    if not saved.patterns:
        st.info("No watch pattern for this root yet: add one above (a phrase such as I cannot, a format tag, a known exploit) to see the share of each step's samples it matches.")
        return
    tables = [
        (name, pd.DataFrame({watch.name: whole_or_stopped(cached_watch_counts, run.version, watch, run)["rate"] for watch in saved.patterns}))
        for name, run in runs if not run.samples.empty
    ]
    spec = step_table_chart(tables, [watch.name for watch in saved.patterns], "👾 Watch patterns (Step level): share of samples matching", "share of samples", look.smoothing)
    key = f"{StateKey.WATCH}:chart"  # the chart keeps its zoom as patterns come and go
    st.vega_lite_chart(spec={**spec, "usermeta": {"embedOptions": {"renderer": "canvas"}}}, width="stretch", key=key, on_select=lambda: pick_watch_step(key, shown.steps), selection_mode=[PICK_STEP])
    unreached = sum(int(table.isna().all(axis=1).sum()) for _, table in tables)
    st.caption(
        "Each point: the share of the step's loaded samples whose field the pattern matches (RE2, each text on its own). Click a point to list the step's hits below."
        + (f" The search stops after {SEARCH_SECONDS:.0f} s: {unreached} step(s) were not reached and have no point." if unreached else "")
    )
    if not shown.samples.empty:
        draw_watch_hits(shown, saved.patterns)


# The form that saves a watch pattern for the root (one of the same name is replaced), and the saved ones, each a
# click to remove; the messages of the last change.
def draw_watch_patterns(root: str, patterns: list["WatchPattern"]):
    key = StateKey.WATCH + ":"
    with st.expander(f"Watch patterns of this root ({len(patterns)} saved)", expanded=not patterns):
        with st.form(key + "form", border=False):
            name_column, pattern_column, field_column, option_column = st.columns([2, 3.4, 1.8, 2.8], vertical_alignment="bottom")
            name_column.text_input("Name", key=key + "name", placeholder="refusal", max_chars=80)
            pattern_column.text_input("Pattern", key=key + "pattern", placeholder=r"I cannot|I can't", help="RE2 syntax (no look-around or backreferences), or the text as it is with Regular expression off.")
            field_column.selectbox("Field", list(SEARCH_PLACES), index=list(SEARCH_PLACES).index("response"), key=key + "field")
            option_column.toggle("Regular expression (RE2)", value=True, key=key + "regex")
            option_column.toggle("Case-sensitive", value=True, key=key + "case", help="Off: upper and lower case match alike.")
            st.form_submit_button("Save pattern", on_click=add_watch_pattern, args=(root,), icon=":material/add:")
        kind, message = st.session_state.pop(key + "message", (None, ""))
        if kind:
            (st.success if kind == "success" else st.error)(markdown_literal(message))
        if patterns:
            listed = pd.DataFrame([{"name": w.name, "pattern": w.pattern, "field": w.field, "regular expression": w.regex, "match case": w.match_case} for w in patterns])
            st.dataframe(listed, hide_index=True, width="stretch", height=min(300, 38 + 35 * len(listed)))
            names = [watch.name for watch in patterns]
            fit_state(key + "remove", names)
            remove_column, button_column = st.columns([4, 1], vertical_alignment="bottom")
            remove_column.selectbox("Remove a saved pattern", names, key=key + "remove", format_func=distinct_labels(names))
            button_column.button("Remove", on_click=drop_watch_pattern, args=(root,), icon=":material/delete:", width="stretch")
        st.caption(f"Kept for {markdown_literal(root)} in {markdown_literal(watch_file())}, never in a run folder.")


# The form's pattern saved (its fields emptied for the next), or what is wrong with it.
def add_watch_pattern(root: str):
    key, state = StateKey.WATCH + ":", st.session_state
    try:
        watch = watch_pattern(state[key + "name"], state[key + "pattern"], state[key + "field"], state[key + "regex"], state[key + "case"])
        note = save_pattern(root, watch)
    except ValueError as error:
        state[key + "message"] = ("error", f"Not saved: {error}")
        return
    state[key + "message"] = ("success", f"Saved {watch.name}. {note}".strip())
    state[key + "name"] = state[key + "pattern"] = ""


def drop_watch_pattern(root: str):
    key = StateKey.WATCH + ":"
    try:
        note = remove_pattern(root, st.session_state[key + "remove"])
    except ValueError as error:
        st.session_state[key + "message"] = ("error", f"Not removed: {error}")
        return
    st.session_state[key + "message"] = ("success", f"Removed {st.session_state[key + 'remove']}. {note}".strip())


# A click on the watch chart: the hits listed are those of the shown run's step nearest it.
def pick_watch_step(key: str, steps: list[int]):
    points = st.session_state[key].selection.get(PICK_STEP) or []
    if points and points[0].get("step") is not None:
        st.session_state[StateKey.WATCH + ":step"] = min(steps, key=lambda step: abs(step - int(points[0]["step"])))


# The shown run's hits at one step, a row per pattern and sample it matches, with the text around the match; a click
# shows the sample in the step area.
def draw_watch_hits(run: "RunSnapshot", patterns: list["WatchPattern"]):
    key = StateKey.WATCH + ":step"
    fit_state(key, run.steps)
    st.session_state.setdefault(key, run.steps[-1])
    step = st.selectbox("Hits at step", run.steps, key=key, help="A click on a point of the chart picks its step.")
    hits, stopped = whole_or_stopped(cached_step_hits, run.version, tuple(patterns), step, run)
    samples = int((run.samples["step"] == step).sum())
    st.markdown(f"Step {step}, of its {samples:,} loaded samples: " + ", ".join(
        f"{markdown_literal(watch.name)} matches **{int((hits['pattern'] == watch.name).sum()):,}**" for watch in patterns
    ) + ".")
    if stopped:
        st.warning(f"The search of {', '.join(markdown_literal(name) for name in stopped)} stopped after {SEARCH_SECONDS:.0f} s, before the step's last sample: its hits here are those of the samples before.")
    if hits.empty:
        return
    table = pd.DataFrame({
        "pattern": hits["pattern"].to_numpy(), "step": hits["step"].to_numpy(), "sample": hits["sample"].to_numpy(), "reward": hits["reward"].to_numpy(),
        "found in": hits["found in"].to_numpy(), "match": hits["match"].to_numpy(), "file": [Path(path).name for path in hits["path"]], "line": hits["line"].to_numpy(),
    })
    draw_sample_rows(table, f"{StateKey.WATCH}:hits:{run.version}:{step}", {"match": MATCH_COLUMN})
    st.caption("Click a row to show that sample in Each Step Response below.")


# Step-Staleness: an asynchronous trainer's samples, how many steps old the policy that sampled each was when the step
# trained it (step - policy_version), per step, each run compared a line; then the shown run's samples by staleness.
def draw_staleness(runs: list[tuple[str, "RunSnapshot"]], look: CurveLook):
    shown_name, shown = runs[0]
    tables = [(name, cached_staleness_by_step(run.version, run.samples)) for name, run in runs if run.has_values("staleness")]
    if not tables:
        st.info("No sample has a staleness: every policy_version is after its line's step (the versions must count the lines' steps); the load report names the lines.")
        return
    options = list(STALENESS_SERIES)
    remembered_choice(StateKey.STALENESS + ":series", options, options[0])
    series = st.selectbox("Per step", options, key=StateKey.STALENESS + ":series", help="; ".join(f"{name}: {text}" for name, text in STALENESS_SERIES.items()))
    draw_chart(st, step_table_chart(tables, [series], f"👾 Staleness (Step level): {series}", series, look.smoothing), shown.steps)
    if shown.has_values("staleness"):
        distribution = cached_staleness_distribution(shown.version, shown.samples)
        draw_chart(st, staleness_share_chart(distribution, f"Samples by staleness of {shown_name}"), shown.steps, kind="staleness")
    st.caption(
        "Staleness = the line's step − its policy_version: how many steps the policy being trained had moved on from the one that "
        "sampled it (0: on-policy). Samples with a policy_version only; filter and sort by staleness in Find samples."
    )


# The sample's trajectory, when its line has turns: a line per turn (a row per call of a turn that makes several)
# with its numbers over its span of tokens; a click opens the turn (its text, tool call, result or error) and limits
# the token area below to its tokens. Returns the span of tokens the token area shows and a caption saying which, or
# None (every token). A long trajectory's token area shows its first tokens until a turn is picked.
def draw_trajectory(batch: "StepBatch", sample: int, settings: "Settings") -> tuple[int, int, str] | None:
    row = batch.table.iloc[sample]
    if not row["turns"] > 0:
        return None
    try:
        trajectory = load_sample_trajectory(row["index_id"], row["path"], int(row["offset"]), int(row["length"]), int(row["step"]))
        tokens = load_sample_tokens(row["index_id"], row["path"], int(row["offset"]), int(row["length"]), int(row["step"])) if trajectory else None
    except (OSError, BadLine) as error:
        st.warning(unread_line_text(row, error))
        return None
    if trajectory is None:
        return None
    trajectory = numbered(trajectory, tokens, settings.kl_estimator)
    table = trajectory.table
    stopped = f" · stopped: {markdown_literal(trajectory.stop_reason)}" if trajectory.stop_reason else ""
    errors = int(table.loc[table["role"] == "tool", "error"].notna().sum())
    st.markdown(f"**Trajectory** · {trajectory.turns} turn(s) · {int(table['tool_arguments'].notna().sum())} tool call(s) · {errors} tool error(s){stopped}")
    for note in trajectory.notes[:5]:
        st.warning(markdown_literal(note))
    if len(trajectory.notes) > 5:
        st.warning(f"{len(trajectory.notes) - 5} more notes on this trajectory's turns.")
    view = pd.DataFrame({
        "turn": table["turn"], "role": table["role"], "tool": table["tool_name"].fillna(""),  # a turn of no tool: blank, not "None"
        "text": [shorten(one_line(text), 120) for text in table["text"]],
        "tokens": table["tokens"], "mean logp": table["mean_logp"], "mean kl": table["mean_kl"], "mean entropy": table["mean_entropy"],
        "mean |Δ|": table["mean_abs_mismatch"], "reward": table["reward"], "advantage": table["advantage"],
        "error": ["" if error is None else shorten(one_line(error), 80) for error in table["error"]],
        "images": [len(images) or None for images in table["images"]],
    })
    view = view[[column for column in view if column in ("turn", "role", "text") or (view[column].notna() & view[column].ne("")).any()]]
    key = f"{StateKey.TRAJECTORY}:{row['index_id']}:{row['offset']}"
    picked = st.dataframe(view, hide_index=True, width="stretch", height=min(420, 38 + 35 * len(view)), key=key, on_select="rerun", selection_mode="single-row")
    chosen = picked.selection.rows
    length = len(tokens.logprobs) if tokens is not None else 0
    if not chosen:
        st.caption("A row per turn (a row per call of a turn that calls several tools). Click one to read it whole and see only its tokens below.")
        if length > LONG_TRAJECTORY_TOKENS:
            return 0, LONG_TRAJECTORY_TOKENS, f"The first {LONG_TRAJECTORY_TOKENS:,} of this trajectory's {length:,} tokens: click a turn above to see its own."
        return None
    turn = table.iloc[chosen[0]]
    draw_turn(turn, row["path"], settings.view.whole_texts)
    start, end = turn["token_start"], turn["token_end"]
    if pd.isna(start) or int(start) >= length:
        return None
    return int(start), min(int(end), length), f"The tokens of the turn picked in the trajectory above: positions {int(start)} to {min(int(end), length) - 1}."


# One turn: its role, text (a long one cut unless whole_texts: draw_text), the tool call (name and arguments as JSON),
# the result or the error, all as text; its images (a tool's, a prompt message's), read from the folder of its line's file.
def draw_turn(turn: pd.Series, line_path: str, whole_texts: bool):
    tool = f" · {markdown_literal(turn['tool_name'])}" if turn["tool_name"] else ""
    st.markdown(f"**Turn {int(turn['turn'])}** · {markdown_literal(turn['role'])}{tool}")
    if turn["tool_arguments"] is not None:
        st.caption("tool call arguments")
        st.code(turn["tool_arguments"], language="json")
    if turn["error"] is not None:
        st.error("Tool error:\n" + markdown_code_block(turn["error"]))  # a traceback's lines as written
    if turn["text"]:
        draw_text(turn["text"], whole_texts)
    elif turn["tool_arguments"] is None and not turn["images"]:
        st.caption("(no text)")
    if turn["images"]:
        draw_images(pd.Series({"images": turn["images"], "path": line_path}), width=150)


# Step-Update: what the loss passes did with the tokens, per optimizer step (each run compared a line): the shares
# PPO's clip zeroed, as TRL logs them, checked against the run's own logged clip_ratio/*; the share the entropy mask
# dropped; how concentrated the update was. Then the samples that drove one step's update, each row a click.
def draw_update(runs: list[tuple[str, "RunSnapshot"]], history: "TrainingHistory", look: CurveLook):
    shown = runs[0][1]
    tables = []
    for name, run in runs:
        if (run.samples["loss_passes"] > 0).any():
            passes = cached_loss_passes(run.version, run.samples)
            meta = run.meta or {}
            tables.append((name, cached_update_by_step(run.version, sequence_level(meta), meta.get("loss_type"), trl_pools_ranks(meta.get("trl_version")), passes.table).set_index("step")))
    options = [name for name in UPDATE_SERIES if any(name in table and table[name].notna().any() for _, table in tables)]
    if not options:  # the index saw loss passes the lines no longer hold (rewritten)
        problems = cached_loss_passes(shown.version, shown.samples).problems
        st.warning("No loss pass can be read now" + (f": {len(problems)} line(s) could not be read back, e.g. {markdown_literal(problems[0])}; if the files were rewritten, press Load & View." if problems else "."))
        return
    remembered_choice(StateKey.UPDATE + ":series", options, options[0] if "clip_ratio/region_mean" not in options else "clip_ratio/region_mean")
    series = st.selectbox("Per step", options, key=StateKey.UPDATE + ":series", help="; ".join(f"{name}: {UPDATE_SERIES[name]}" for name in options))
    draw_chart(st, step_table_chart(tables, [series], f"👾 What the loss passes did (Step level): {series}", series, look.smoothing), shown.steps)
    shown_table = next((table for name, table in tables if name == runs[0][0]), None)
    st.caption(update_note(shown_table, history, series, (shown.meta or {}).get("trainer_config") or {}, shown.downsampled))
    if (shown.samples["loss_passes"] > 0).any():
        passes = cached_loss_passes(shown.version, shown.samples)
        if passes.notes:
            st.warning(f"{len(passes.notes)} loss pass(es) read in part or left out, e.g. {markdown_literal(passes.notes[0])}.")
        if not passes.table.empty:
            draw_update_drivers(shown, passes)


# What the curve is, and for TRL's clip metrics whether the run's own logged values agree with the lines.
def update_note(table: pd.DataFrame | None, history: "TrainingHistory", series: str, trainer_config: dict, downsampled: bool) -> str:
    note = "Steps are the optimizer steps the loss passes ran in. Update weight: -∂loss/∂logp of a token in its pass's loss (0 where a clip or a mask zeroed it)."
    if table is None or series not in table:
        return note
    if trainer_config.get("logging_steps", 1) != 1:  # TRL's logged value then averages the passes of several steps
        return note + f" The trainer logged every {markdown_literal(trainer_config['logging_steps'])} steps: its values average several steps' passes, so they are not compared here."
    if downsampled and series in history.train:  # the shares of the samples loaded, not of the trainer's batch
        return note + " Max Samples Each Step left samples out: these are the loaded samples' shares, not the trainer's, so its logged values are not compared here (raise it to compare)."
    logged = history.train.set_index("step")[series].dropna() if series in history.train else pd.Series(dtype=float)
    both = table[series].dropna().index.intersection(logged.index)
    if len(both):
        difference = float((table.loc[both, series] - logged.loc[both]).abs().max())
        note += f" The trainer logged {series} at {len(both)} of these steps; the largest difference from the lines' recomputation is {difference:.2g}."
    return note


# The samples that drove one step's update: each one's share of the step's Σ|update weight|, largest first; a click
# shows the sample (its token table has each token's update weight, clip and ratio).
def draw_update_drivers(run: "RunSnapshot", passes: "LossPasses"):
    steps = sorted(passes.table["step"].unique().tolist())
    fit_state(StateKey.UPDATE + ":step", steps)
    step = st.selectbox("Samples that drove the update of step", steps, index=len(steps) - 1, key=StateKey.UPDATE + ":step")
    shares = cached_sample_shares(run.version, passes.table)
    top = shares[shares["step"] == step].head(UPDATE_DRIVERS)
    rows = run.samples.iloc[top["sample"].to_numpy()]
    table = pd.DataFrame({
        "step": rows["step"].to_numpy(), "sample": rows["sample"].to_numpy(), "share of |update|": top["share"].to_numpy(),
        "reward": rows["reward"].to_numpy(), "advantage": rows["advantage"].to_numpy(), "tokens": top["tokens"].to_numpy(),
        "clipped low": top["clipped_low"].to_numpy(), "clipped high": top["clipped_high"].to_numpy(), "entropy-masked": top["entropy_dropped"].to_numpy(),
    })
    table = table[[column for column in table if table[column].notna().any()]]
    if passes.problems:
        st.warning(f"{len(passes.problems)} line(s) could not be read back for the loss passes, e.g. {markdown_literal(passes.problems[0])}; if the files were rewritten, press Load & View.")
    draw_sample_rows(table, f"{StateKey.UPDATE}:drivers:{run.version}:{step}", {
        "step": st.column_config.NumberColumn(help="The step that generated the sample (its batch in Each Step Response)"),
        "share of |update|": st.column_config.ProgressColumn(format="%.3g", min_value=0.0, max_value=1.0, help="Σ|update weight| of the sample's tokens in this step's passes, over the step's"),
    })
    st.caption(f"The {len(table)} samples with the largest share of step {step}'s update. Click a row to show the sample below; its token table has update_weight, clipped and policy_ratio per token.")


# The windows Step-Signals offers (those that fit twice in the shown run's steps), and the rows of examples it lists.
SIGNAL_WINDOWS, FIRING_ROWS = (3, 5, 10, 20, 50), 300


# Step-Signals: whether the policy may be gaming its reward, a number per step for each signal (rl_board.signals) with
# the steps where its stated rule fired marked, each run compared a line; then the shown run's firings with example
# samples, each row a click to its sample.
def draw_signals(runs: list[tuple[str, "RunSnapshot"]], look: CurveLook, kl_estimator: str):
    shown_name, shown = runs[0]
    signal_column, window_column = st.columns([3, 1], vertical_alignment="bottom")
    windows = [width for width in SIGNAL_WINDOWS if 2 * width <= len(shown.steps)]
    remembered_choice(StateKey.SIGNALS + ":window", windows, DEFAULT_WINDOW)
    window = window_column.selectbox("Window (steps)", windows, key=StateKey.SIGNALS + ":window", help="Each rule compares the last W loaded steps with the W before (or the run's first W).")
    kl_column = f"avg_kl_{kl_estimator}"
    tables = [(name, cached_signals(run.version, window, kl_column, run.samples, run.reward_function_columns)) for name, run in runs]
    options = [name for name in SIGNALS if any((table["signal"] == name).any() for _, table in tables)]
    if not options:
        st.info("No signal can be computed: the loaded samples have no reward.")
        return
    remembered_choice(StateKey.SIGNALS + ":signal", options, options[0])
    signal = signal_column.selectbox("Signal", options, key=StateKey.SIGNALS + ":signal", help="Whether the policy may be gaming its reward; each signal's rule is under its chart.")
    by_step = [(name, table[table["signal"] == signal].set_index("step")[["value", "fired"]]) for name, table in tables if (table["signal"] == signal).any()]
    draw_chart(st, signal_chart(by_step, signal, SIGNALS[signal].unit, SIGNALS[signal].thresholds, look.smoothing), shown.steps)
    st.caption(f"**Rule:** {SIGNALS[signal].rule(window, kl_column)} Fired steps are marked ▲; dashed: the threshold.")
    shown_table = tables[0][1]
    if (shown_table["signal"] == signal).any():
        draw_signal_firings(shown_name, shown, shown_table, signal, window, kl_column)


# Where the shown run's signal fired: each firing step's example samples (the step's samples that show the pattern,
# highest reward first), each row a click that shows the sample.
def draw_signal_firings(name: str, run: "RunSnapshot", table: pd.DataFrame, signal: str, window: int, kl_column: str):
    fired = table.loc[(table["signal"] == signal) & table["fired"], "step"].tolist()
    if not fired:
        st.markdown(f"**Where it fired** · {markdown_literal(name)}: nowhere in its {len(run.steps)} loaded steps.")
        return
    examples = cached_signal_examples(run.version, window, kl_column, signal, run.samples, table)
    listed = examples.head(FIRING_ROWS)
    st.markdown(f"**Where it fired** · {markdown_literal(name)}: {len(fired)} of its {len(run.steps)} loaded steps, first at step {fired[0]}.")
    draw_sample_rows(listed.rename(columns={"value": f"value ({SIGNALS[signal].unit})"}), f"{StateKey.SIGNALS}:firings:{run.version}:{signal}:{window}:{kl_column}",
                     {"step": st.column_config.NumberColumn(help="A step where the signal fired")})
    without = len(set(fired) - set(examples["step"]))
    st.caption(
        (f"The first {len(listed)} of {len(examples)} rows. " if len(listed) < len(examples) else "")
        + f"Up to {EXAMPLES_PER_STEP} samples per firing step that show the pattern, highest reward first"
        + (f" ({without} firing step(s) have none)" if without else "") + ". Click a row to show that sample below."
    )


# How much of the shown run's mean |Δ| is the renormalisation of the sampler's truncated distribution (top-k, top-p...),
# and how much numeric drift, where its lines carry the mass the truncation kept; else a caption says what that needs.
def draw_renormalisation_split(name: str, run: "RunSnapshot", tokens: "MismatchTokens"):
    split = renormalisation_split(cached_mismatch_sums(run.version, tokens))
    if split is None:
        st.caption(
            "Δ is not split into the renormalisation of a truncated distribution (top-k, top-p) and numeric drift: that needs the "
            "sampler's kept mass per token (`sampler_kept_logmass`), which rollout_logger records with transformers' `generate` "
            "where it truncates; vLLM returns none. Without truncation, Δ is all drift."
        )
        return
    mean, renormalisation, drift = split["mean |Δ|"], split[RENORMALISATION], split[DRIFT]
    share = f" ({100 * renormalisation / mean:.0f} %)" if mean > 0 and math.isfinite(mean) else ""
    st.markdown(
        f"**Renormalisation:** of mean |Δ| = {number_text(mean)} over {markdown_literal(name)}'s {split['tokens']:,} tokens "
        f"with the sampler's kept mass, {number_text(renormalisation)}{share} is the renormalisation of its truncated distribution "
        f"(mean −log kept mass); the drift, mean |Δ − log kept mass|, is {number_text(drift)}. *Per step* draws both."
    )


# A Step-Mismatch threshold from the run's metadata: a number (an int as TRL may keep it) not below 0, or None.
def threshold(value) -> float | None:
    return max(float(value), 0.0) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else None


# The shown run's mismatch by token position, by the trainer's entropy at the token, by assistant turn (tool runs):
# whether it grows along long responses, sits on uncertain tokens, or on the turns after a tool's answer.
def draw_where_the_mismatch_lives(name: str, tokens: "MismatchTokens"):
    options = {"position": "position in the response"}
    if np.isfinite(tokens.entropy).any():
        options["entropy"] = "the trainer's entropy at the token (nats)"
    if len(tokens.turn) and tokens.turn.max() > 1:
        options["turn"] = "assistant turn (a tool's answer ends one)"
    remembered_choice(StateKey.MISMATCH + ":by", list(options), "position")
    by = st.radio("Where it lives, by", list(options), key=StateKey.MISMATCH + ":by", format_func=options.get, horizontal=True)
    draw_chart(st, mismatch_bucket_chart(mismatch_by_bucket(tokens, by), f"Mean |Δ| of {name}'s tokens by {options[by]}"))


# The shown run's tokens with the largest |Δ|: each row a click that shows its sample in the step area.
def draw_largest_mismatches(name: str, run: "RunSnapshot", tokens: "MismatchTokens"):
    if tokens.problems:
        st.warning(f"{len(tokens.problems)} line(s) could not be read back for the mismatch, e.g. {markdown_literal(tokens.problems[0])}; if the files were rewritten, press Load & View.")
    largest = largest_mismatches(tokens, LARGEST_MISMATCHES)
    rows = run.samples.iloc[largest["sample"].to_numpy()]
    table = pd.DataFrame({
        "step": rows["step"].to_numpy(), "sample": rows["sample"].to_numpy(), "token position": largest["position"].to_numpy(),
        "token": [token_at(row, position) for (_, row), position in zip(rows.iterrows(), largest["position"].tolist())],
        "Δ": largest["Δ"].to_numpy(), "ratio exp(Δ)": largest["ratio"].to_numpy(),
    })
    if "log kept mass" in largest:  # how much of each Δ is the sampler's renormalisation, how much drift
        table["log kept mass"], table["drift"] = largest["log kept mass"].to_numpy(), largest["drift"].to_numpy()
    st.markdown(f"**Largest mismatches** of {markdown_literal(name)}: the {len(table)} tokens with the largest |Δ|")
    draw_sample_rows(table, f"{StateKey.MISMATCH}:largest:{run.version}")
    st.caption("Click a row to show that sample in Each Step Response below; its token table has the sampler's log-prob, Δ and the ratio of every token.")


# A sample's token at a position, as the token table shows it ("" where its line cannot be read back now).
def token_at(row: pd.Series, position: int) -> str:
    try:
        tokens = load_sample_tokens(row["index_id"], row["path"], int(row["offset"]), int(row["length"]), int(row["step"]))
    except (OSError, BadLine):
        return ""
    return visible_whitespace(tokens.response_tokens[position]) if tokens is not None and position < len(tokens.response_tokens) else ""


# Step-KL names what it plots: with Use LogP as KL (the original's default) the mean log ratio, which is no KL and
# ignores the estimator; otherwise the chosen estimator's mean. One token whose probability the policy raised a lot
# makes a step's mean spike (exp(r) - 1 - r grows exponentially), so a median and a log scale are offered.
def draw_kl_curve(settings: "Settings", curve: dict, runs: list[tuple[str, "RunSnapshot"]], histories: list["TrainingHistory"]):
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
    if not any(run.has_values(column) for _, run in runs):
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
    lines = trl_kl_lines(runs, histories) if as_trl else ()
    draw_chart(st, cached_step_curve([column], title, "nats per token", names={column: name}, median=median, log_scale=log_scale, lines=lines, **curve), runs[0][1].steps)
    draw_largest_changes(runs[0][1], [column], median)
    if lines:
        note += (
            " Dashed: TRL's kl as it logs it, recomputed from the lines (each loss pass's token mean over all ranks, "
            "averaged over the step's passes; steps that reuse a generation have no lines), and as the trainer logged it."
        )
    if as_trl and any(shown.downsampled and shown.has_values("micro_batch") for _, shown in runs):
        note += " TRL's kl is recomputed only for runs loaded whole: raise Max Samples Each Step to see it."
    st.caption(note)


# The dashed lines of Step-KL with k3: TRL's kl recomputed from each run's lines (where they say their loss pass and
# the run is loaded whole), and each run's kl as its trainer logged it. Hashable, for the chart's cache.
def trl_kl_lines(runs: list[tuple[str, "RunSnapshot"]], histories: list["TrainingHistory"]) -> tuple:
    lines = []
    for (name, run), history in zip(runs, histories):
        prefix = f"{name} · " if len(runs) > 1 else ""
        if not run.downsampled and run.has_values("micro_batch"):
            recomputed = trl_kl_by_step(run.samples, pooled_ranks=trl_pools_ranks((run.meta or {}).get("trl_version")))
            lines.append((f"{prefix}TRL kl from the lines", tuple(recomputed.index.tolist()), tuple(recomputed.tolist())))
        if "kl" in history.train and history.train["kl"].notna().any():
            logged = history.train[["step", "kl"]].dropna()
            lines.append((f"{prefix}kl (trainer log)", tuple(logged["step"].tolist()), tuple(logged["kl"].tolist())))
    return tuple(lines)


# The trainer's own numbers on the step axis, each chosen metric a chart (a view) with train and eval lines per run and
# the best checkpoint marked; the run's summary; CSV downloads of the histories and of the step curves' numbers (made when
# clicked).
def draw_training_metrics(shown_runs: list["RunSnapshot"], all_histories: list["TrainingHistory"], look: CurveLook):
    run = shown_runs[0]
    names = [name for name, _ in named_runs(shown_runs)]
    named = list(zip(names, all_histories))
    histories = [(name, shown) for name, shown in named if not shown.empty]
    st.subheader("📈 Training metrics")
    if histories:
        options = list(dict.fromkeys(metric_name(column) for _, shown in histories for frame in (shown.train, shown.eval) for column in frame.columns[1:]))
        key = StateKey.METRIC_SERIES  # one choice, kept while new metrics arrive (live) and across runs that log it
        remembered_choice(key, options, [name for name in DEFAULT_METRICS if name in options] or options[:2])
        chosen = st.multiselect("Training metrics", options, key=key, format_func=distinct_labels(options), help="Numbers the trainer logged; eval lines dashed, the best checkpoint a dashed rule.")
        versions = tuple((shown.run_dir, shown_history.signature) for shown, shown_history in zip(shown_runs, all_histories))
        if chosen:  # a view per metric, only the open one drawn: each chart of several runs costs the browser a redraw
            name, shown = draw_view_choice("Training metric", chosen, StateKey.METRIC_VIEW, markdown_literal)
            draw_chart(shown, cached_metric_chart(name, versions, look.smoothing, look.zero_shift, histories), run.steps, "metric")
        details = st.expander("Training summary", on_change="rerun", key=StateKey.TRAINING_SUMMARY)
        if details.open:
            with details:
                for name, shown in histories:
                    draw_history_summary(name, shown)
    else:
        st.caption(f"No training history in this folder: the logger's `{METRICS_FILES}`, `{TRAINING_LOG}` or `{TRAINER_STATE}` (in it or a `checkpoint-*` folder) would be shown here.")
    name = run_label(run.run_dir)
    downloads = st.columns(3)
    for column, label, split, file_name in (
        (downloads[0], "Train history (CSV)", "train", f"{name}_train_history.csv"),
        (downloads[1], "Eval history (CSV)", "eval", f"{name}_eval_history.csv"),
    ):
        frames = [(shown_name, getattr(shown, split)) for shown_name, shown in named if not getattr(shown, split).empty]
        column.download_button(
            label, functools.partial(history_csv, frames, len(named) > 1), file_name=file_name, mime="text/csv", on_click="ignore", disabled=not frames,
            help="The shown run's, and each compared run's with a run column." if len(named) > 1 else None,
        )
    runs = [(name, shown.samples) for name, shown in zip(names, shown_runs) if not shown.samples.empty]
    downloads[2].download_button(
        "Per-step statistics (CSV)", lambda: spreadsheet_csv(step_statistics_table(runs)), file_name=f"{name}_step_statistics.csv",
        mime="text/csv", on_click="ignore", disabled=not runs, help="The numbers behind the step curves, of every run compared.",
    )


# A history download: the shown run's frame as read, or with compared runs, every run's rows under a run column (a
# metric the trainer named "run" then "run (metric)").
def history_csv(frames: list[tuple[str, pd.DataFrame]], by_run: bool) -> str:
    if not by_run:
        return spreadsheet_csv(frames[0][1])
    frames = [(name, frame.rename(columns={"run": "run (metric)"})) for name, frame in frames]
    return spreadsheet_csv(pd.concat([frame.assign(run=name)[["run", *frame.columns]] for name, frame in frames], ignore_index=True))


# A run's history as seed 004's summary prints it: configuration, entries, final values, best checkpoint.
def draw_history_summary(name: str, history: "TrainingHistory"):
    st.markdown(f"**{markdown_literal(name)}** · from {', '.join(markdown_literal(source) for source in history.sources)}")
    config = st.container()  # its own row: three tables side by side cut the values to a few letters at 1280 px
    train, evaluation = st.columns(2)
    config.caption("Configuration")
    config.dataframe(pd.DataFrame({"key": list(history.config), "value": [json.dumps(value) for value in history.config.values()]}), hide_index=True, height=250, width="stretch")
    for column, title, frame in ((train, "Training history", history.train), (evaluation, "Validation history", history.eval)):
        if frame.empty:
            column.caption(f"{title}: no entries")
            continue
        column.caption(f"{title}: {len(frame)} entries, final step {int(frame['step'].iloc[-1])}")
        final = frame.drop(columns="step").ffill().iloc[-1].dropna()
        column.dataframe(pd.DataFrame({"final": final.index, "value": final.to_numpy()}), hide_index=True, height=250, width="stretch")
    best = history.best
    if best:
        metrics = ", ".join(f"{markdown_literal(key)} = {value:.6g}" for key, value in best["metrics"].items())
        step = "—" if best["step"] is None else best["step"]
        st.caption(f"Best checkpoint: step {step}" + (f", epoch {best['epoch']:g}" if "epoch" in best else "") + (f", {metrics}" if metrics else "") + f", path {markdown_literal(best['path'] or '—')}")


# Search the texts of every loaded sample of the run, filter and sort by its numbers and fields, download what is found.
# A fragment: typing and filtering redraw only this area; clicking a result shows that sample in the step area below.
@st.fragment
def draw_search(run: "RunSnapshot", settings: "Settings"):
    rerun_page_if_a_step_was_picked()
    st.subheader("🔎 Find samples")
    query_column, place_column, option_column = st.columns([3, 1.6, 1.6], vertical_alignment="bottom")  # at 1280 px: "prompt and response", "Regular expression" whole
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
        found = whole_or_stopped(cached_search, run.version, query, regex, match_case, places, run)
        mask &= found.place > 0
    results = run.samples[mask]
    ordered = results.sort_values(sort_by, ascending=not highest, na_position="last", kind="stable").head(top)
    # The results table is keyed by the search that made it: a live refresh keeps the table (and the page where it was)
    # while new lines join its results; another search makes a new table, with no row selected.
    search_key = hashlib.sha1(repr((run.run_dir, query, places, regex, match_case, sample_filter, sort_by, highest, top)).encode()).hexdigest()
    draw_search_results(run, results, ordered, found, sort_by, sample_filter, f"{StateKey.SEARCH_RESULTS}:{search_key}")


# The search's filters and order: a widget for each filter chosen (a range of a number, values of a facet).
def draw_search_filters(run: "RunSnapshot", settings: "Settings") -> tuple["SampleFilter", str, bool, int]:
    samples, numbers = run.samples, filter_columns(run, settings.kl_estimator)
    flags = (["truncated"] if run.has_values("truncated") else []) + (["zero-signal group"] if run.has_values("group_id") else [])
    options = (["steps"] if len(run.steps) > 1 else []) + numbers + run.facets + flags
    filter_column, sort_column, order_column, top_column = st.columns([4, 1.5, 1.3, 1])
    fit_state(StateKey.SEARCH_FILTERS, options)
    chosen = filter_column.multiselect(
        "Filter by", options, key=StateKey.SEARCH_FILTERS, format_func=distinct_labels(options, filter_label),
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
                infinite = int(np.isinf(samples[name].to_numpy(dtype=float, na_value=np.nan)).sum())
                beyond = f" and {infinite} ±inf (sort by it to find them)" if infinite else ""
                st.caption(f"{label}: " + (f"every finite value is {low:.6g}" if values.size else "no finite value") + beyond + ", nothing to filter.")
                continue
            fit_range(key, low, high)
            step = (high - low) / 200
            chosen_low, chosen_high = st.slider(label, low, high, (low, high), step=step if 0 < step < np.inf else None, format="%.4g", key=key, help="At an end, the range goes on past it: ±inf values are in it")
            ranges.append((name, -np.inf if chosen_low <= low else chosen_low, np.inf if chosen_high >= high else chosen_high))  # the ends: the finite extremes
        elif name in run.facets:
            values = sorted(samples[name].dropna().unique().tolist())
            fit_state(key, values)
            picked = st.multiselect(label, values, key=key, placeholder="every value", format_func=distinct_labels(values))
            if picked:
                facets.append((name, tuple(picked)))
    sample_filter = SampleFilter(tuple(steps), tuple(ranges), tuple(facets), "truncated" in chosen, "zero-signal group" in chosen)
    fit_state(StateKey.SEARCH_SORT, ["step", *numbers])
    sort_by = sort_column.selectbox("Sort by", ["step", *numbers], key=StateKey.SEARCH_SORT, format_func=distinct_labels(["step", *numbers], filter_label))
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


# Runs shown together, each with its name on the page's charts, tables and downloads: apart where two share a folder
# name (run_labels).
def named_runs(runs: list["RunSnapshot"]) -> list[tuple[str, "RunSnapshot"]]:
    return list(zip(run_labels([shown.run_dir for shown in runs]), runs))


# A run of the root as the run choices name it: the root itself as "(this folder)".
def run_option_label(name: str) -> str:
    return "(this folder)" if name == "." else one_line(name)


# A facet's value as the sides of "what changed" name it, or every sample.
def facet_value_label(item: tuple[str, object] | None) -> str:
    return "every sample" if item is None else one_line(f"{item[0].removeprefix(TEXT_PREFIX)} = {item[1]}")


# How many samples were found and where, a chart of them per step, the results (a click shows one below) and downloads.
def draw_search_results(run: "RunSnapshot", results: pd.DataFrame, ordered: pd.DataFrame, found: "SearchResult | None", sort_by: str, sample_filter: "SampleFilter", key: str):
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
    draw_sample_rows(table, key, {"match": MATCH_COLUMN})
    st.caption(
        (f"The first {RESULTS_SHOWN:,} results are listed. " if len(shown) < len(ordered) else "")
        + "Click a row to show that sample in Each Step Response below. The downloads hold "
        + f"the {len(ordered):,} result(s)" + (f" of {len(results):,} found: narrow the filter, or raise Top N (at most {EXPORT_ROWS:,}), to download others." if len(ordered) < len(results) else ".")
    )
    draw_downloads(ordered, "Results", f"{run_label(run.run_dir)}_search", StateKey.SEARCH_DOWNLOADS)


# A table of samples (with their step and sample columns), each row a click that shows that sample in Each Step Response.
# The row clicked stays checked while it holds the sample it showed: where a live refresh moved the rows (new results
# above it), the table is drawn anew with none checked (the check stayed on the row's place, over another sample, and a
# click there did nothing).
def draw_sample_rows(table: pd.DataFrame, key: str, column_config: dict | None = None):
    picked_key, generation, *picked = st.session_state.get(StateKey.PICKED_ROW, (None, 0))
    generation, picked = (generation, picked) if picked_key == key else (0, [])
    rows = st.session_state[f"{key}:{generation}"].selection.rows if f"{key}:{generation}" in st.session_state else []
    if rows and picked and (rows[0] >= len(table) or [table["step"].iat[rows[0]], table["sample"].iat[rows[0]]] != picked):
        generation += 1
        st.session_state[StateKey.PICKED_ROW] = (key, generation)
    st.dataframe(
        table, hide_index=True, width="stretch", height=min(400, 38 + 35 * len(table)), key=f"{key}:{generation}", selection_mode="single-row",
        on_select=lambda: pick_search_result(key, generation, table["step"].tolist(), table["sample"].tolist()),
        column_config={"sample": st.column_config.NumberColumn(help="Sample index in its step's batch")} | (column_config or {}),
    )


# A search's text around its first match, in a table of samples.
MATCH_COLUMN = st.column_config.TextColumn(width="large", help="The text around the first match, which is between ⟦ ⟧")


# Clicking a result (of a search, or a largest mismatch) moves the step selector and the sample in view to it.
def pick_search_result(key: str, generation: int, steps: list, samples: list):
    rows = st.session_state[f"{key}:{generation}"].selection.rows
    if rows:
        st.session_state[StateKey.PICKED_ROW] = (key, generation, steps[rows[0]], samples[rows[0]])
        show_step(int(steps[rows[0]]))
        open_sample(int(samples[rows[0]]))
        st.session_state[StateKey.STEP_PICKED] = True
        scroll_to_when_drawn([StateKey.SAMPLE_INDEX, StateKey.STEP_SLIDER, StateKey.STEP_SELECTBOX])  # the sample, or its step


# Downloads of some lines: CSV and Parquet of their numbers and texts, JSONL of the lines as they are; each made
# when clicked. Beyond EXPORT_ROWS lines, or EXPORT_BYTES of JSONL, the page asks to narrow them instead.
def draw_downloads(rows: pd.DataFrame, what: str, name: str, key: str):
    too_many = len(rows) > EXPORT_ROWS
    too_large = too_many or int(rows["length"].sum()) + len(rows) > EXPORT_BYTES
    row = st.container(horizontal=True, vertical_alignment="center")  # each button as wide as its label, at any page width
    # Keyed: the same buttons with new labels and files on the next step (unkeyed, the browser built them anew each time)
    row.download_button(f"{what} (CSV)", functools.partial(export_csv, rows), file_name=f"{name}.csv", mime="text/csv", on_click="ignore", disabled=too_many, icon=":material/download:", help="Each sample's numbers and fields, then its prompt and response", width="content", key=f"{key}:csv")
    row.download_button(f"{what} (JSONL)", functools.partial(export_jsonl, rows), file_name=f"{name}.jsonl", mime="application/jsonl", on_click="ignore", disabled=too_large, icon=":material/download:", help="The samples' lines as they are in the rank files, byte for byte", width="content", key=f"{key}:jsonl")
    row.download_button(f"{what} (Parquet)", functools.partial(export_parquet, rows), file_name=f"{name}.parquet", mime="application/vnd.apache.parquet", on_click="ignore", disabled=too_many, icon=":material/download:", help="The CSV's table, typed", width="content", key=f"{key}:parquet")
    if too_large:
        row.caption(f"{len(rows):,} lines, {rows['length'].sum() / 2**20:,.0f} MB: more than a download holds ({EXPORT_ROWS:,} lines, {EXPORT_BYTES >> 20} MB of JSONL); narrow the filter.")


# What changed between A and B (two step windows of the shown run, or two runs): every prompt (its text and images)
# seen on both sides with its numbers on each, counted as regressed, newly solved, improved, unchanged or without a pass
# rate; a click on a prompt shows its images and its responses on each side, word by word. Nothing is computed while it
# is closed.
def draw_changes(run: "RunSnapshot", compared: list["RunSnapshot"], settings: "Settings"):
    details = st.expander("🔀 What changed between A and B: the prompts that regressed or were newly solved", key=StateKey.CHANGES, on_change="rerun")
    if not details.open:
        return
    with details:
        runs = dict(named_runs([run, *compared]))
        (run_a, steps_a, where_a), (run_b, steps_b, where_b) = draw_change_sides(runs)
        a, b = side_rows(runs[run_a].samples, steps_a, where_a), side_rows(runs[run_b].samples, steps_b, where_b)
        functions = [column for column in dict.fromkeys([*runs[run_a].reward_function_columns, *runs[run_b].reward_function_columns]) if column in a and column in b]
        column, threshold = draw_pass_rule(["reward", *functions], a, b)
        if a.empty or b.empty:
            st.info("A side has no loaded sample: widen its steps.")
            return
        changes = cached_prompt_changes((runs[run_a].version, steps_a, where_a, runs[run_b].version, steps_b, where_b, column, threshold), a, b)
        counted = changes.counts()
        for place, (status, count) in zip(st.columns(len(counted)), counted.items()):
            place.metric(status, f"{count:,}", help=f"Prompts whose {STATUSES[status]}")
        st.caption(
            f"{len(changes.table):,} prompts on both sides, matched by their text{' and images' if 'images' in changes.table else ''}; pass: {markdown_literal(column)} ≥ {threshold:g}. "
            f"change = mean reward on B − on A (of the finite rewards); length in {changes.length_unit}. {changes.left_out()}."
        )
        if changes.table.empty:
            return
        shown_statuses = st.pills("Show", list(STATUSES), selection_mode="multi", default=list(STATUSES), key=StateKey.CHANGES + ":statuses")
        table = changes.table[changes.table["status"].isin(shown_statuses)]
        shown_columns = [CHANGES_SHOWN[0], "images", *CHANGES_SHOWN[1:]] if "images" in table else CHANGES_SHOWN
        view = table.assign(prompt=change_prompts(table["prompt"], settings.view)).reset_index(drop=True)[shown_columns]
        key = f"{StateKey.CHANGES}:table:" + hashlib.sha1(repr((run_a, steps_a, where_a, run_b, steps_b, where_b, column, threshold, shown_statuses)).encode()).hexdigest()
        picked = st.dataframe(
            view, hide_index=True, width="stretch", height=min(420, 38 + 35 * len(view)), key=key, on_select="rerun", selection_mode="single-row",
            column_config={name: st.column_config.NumberColumn(format=significant_format(changes.table[name], 4)) for name in ["reward_a", "reward_b", "pass_a", "pass_b", "change", "pass_change"]}
            | {"length_a": st.column_config.NumberColumn(format="%.1f"), "length_b": st.column_config.NumberColumn(format="%.1f"), "prompt": st.column_config.TextColumn(width="medium"),
               "images": st.column_config.ListColumn(width="small", help="The prompt's images, in order, by their paths as the lines write them: the same text with other images is another prompt; click the row to see them")},
        )
        buttons = st.container(horizontal=True)
        buttons.download_button("Prompts (CSV)", functools.partial(spreadsheet_csv, table), file_name=f"changes_{run_a}_{run_b}.csv".replace("/", "_"), mime="text/csv", on_click="ignore", icon=":material/download:", help="The table as shown (its statuses), the prompts whole")
        buttons.download_button("Prompts (Parquet)", functools.partial(lambda rows: rows.to_parquet(index=False), table), file_name=f"changes_{run_a}_{run_b}.parquet".replace("/", "_"), mime="application/vnd.apache.parquet", on_click="ignore", icon=":material/download:", help="The CSV's table, typed")
        if not picked.selection.rows:
            st.caption("Sorted by change, the worst first; click a column to sort by it. Click a prompt to see its responses on A and B, word by word.")
            return
        prompt = table.reset_index().iloc[picked.selection.rows[0]]  # its numbers, with its text key and images
        draw_prompt_sides(prompt_lines(a, prompt), prompt_lines(b, prompt), prompt, functions, settings)


# What changed's prompts as the batch and group tables show them (Pad Token, Drop System Prompt), but those that would
# then read alike (prompts that differ only in their system prompt) with their system prompt. Prompts alike in all
# that a cell shows (their first 120 characters) still look alike, as in the batch table.
def change_prompts(prompts: pd.Series, view: "ViewSettings") -> list[str]:
    cleaned = [clean_text(text, view.pad_token, view.system_prompt_end) for text in prompts]
    texts_of = collections.defaultdict(set)  # the prompts each cleaned text stands for
    for text, shown in zip(prompts, cleaned):
        texts_of[shown].add(text)
    return [shorten(clean_text(text, view.pad_token) if len(texts_of[shown]) > 1 else shown, 120) for text, shown in zip(prompts, cleaned)]


# A and B: a run each (when runs are compared), a window of its steps and, in a run with facets, optionally one facet's
# value (a run that mixes validation samples in: text/mode = val). By default, with a compared run, all of the shown
# run against all of the other; else the shown run's first half against its second.
def draw_change_sides(runs: dict[str, "RunSnapshot"]) -> list[tuple[str, tuple[int, int], tuple[str, str] | None]]:
    names = list(runs)
    sides = []
    for side, place, default_run in zip("AB", st.columns(2), [names[0], names[min(1, len(names) - 1)]]):
        run_key, steps_key = f"{StateKey.CHANGES}:{side}:run", f"{StateKey.CHANGES}:{side}:steps"
        fit_state(run_key, names)
        name = place.selectbox(f"{side}: run", names, index=names.index(default_run), key=run_key, format_func=distinct_labels(names)) if len(names) > 1 else names[0]
        steps = runs[name].steps
        halves = len(names) > 1 and default_run != names[0] if side == "B" else len(names) > 1
        middle = steps[max(len(steps) // 2 - 1, 0)]
        default = (steps[0], steps[-1]) if halves else ((steps[0], middle) if side == "A" else (steps[min(len(steps) // 2, len(steps) - 1)], steps[-1]))
        fit_range(steps_key, steps[0], steps[-1], steps)
        if len(steps) > 1:
            chosen = place.select_slider(f"{side}: steps", steps, value=st.session_state.get(steps_key, default), key=steps_key)
        else:
            chosen = (steps[0], steps[0])
        samples = runs[name].samples
        values = [None] + [(facet, value) for facet in runs[name].facets for value in sorted(samples[facet].dropna().unique())]
        where = None
        if len(values) > 1:
            where_key = f"{StateKey.CHANGES}:{side}:where"
            fit_state(where_key, values)
            where = place.selectbox(f"{side}: samples", values, key=where_key, format_func=distinct_labels(values, facet_value_label),
                                    help="Only the samples whose facet has this value, e.g. a run's validation samples (mode = val)")
        sides.append((name, tuple(int(step) for step in chosen), where))
    return sides


# What passing means: a reward (the total, or one function such as a correctness check) at least a threshold.
def draw_pass_rule(columns: list[str], a: pd.DataFrame, b: pd.DataFrame) -> tuple[str, float]:
    column_place, threshold_place = st.columns(2)
    fit_state(f"{StateKey.CHANGES}:pass_column", columns)
    column = column_place.selectbox("Pass on", columns, key=f"{StateKey.CHANGES}:pass_column", format_func=distinct_labels(columns), help="The reward, or one reward function (e.g. a correctness check), that says whether a sample passed")
    default = default_threshold(a, b, column) if not (a.empty or b.empty) else 1.0
    threshold_key = f"{StateKey.CHANGES}:threshold:{column}"
    threshold = threshold_place.number_input("Pass when at least", value=st.session_state.get(threshold_key, default), key=threshold_key, format="%g", help="A sample passes when its value is at least this: 1 by default for a 0/1 reward, else the middle of the values seen")
    return column, float(threshold)


# One prompt's responses on A and B side by side: each side's response picked among its samples (the highest reward
# first), its numbers, and its words marked against the other's: removed (A's, not in B's) and added (B's).
def draw_prompt_sides(a: pd.DataFrame, b: pd.DataFrame, numbers: pd.Series, functions: list[str], settings: "Settings"):
    st.markdown(f"**Prompt** · {numbers['status']} · pass {number_text(numbers['pass_a'], '.3g')} → {number_text(numbers['pass_b'], '.3g')} · mean reward {number_text(numbers['reward_a'])} → {number_text(numbers['reward_b'])}")
    images = st.container()  # the prompt's images, as A's response's line holds them, once it is read back
    draw_text(clean_text(numbers["prompt"], settings.view.pad_token), settings.view.whole_texts)
    responses = []
    for side, rows, place in zip("AB", (a, b), st.columns(2)):
        rows = rows.sort_values("reward", ascending=False, kind="stable").head(PROMPT_SIDE_LINES)
        batch = load_step_batch(f"changes {side} " + lines_key(rows), rows)
        labels = [f"step {step} · sample {sample} · reward {number_text(reward)}" for step, sample, reward in zip(batch.table["step"], batch.table["sample"], batch.table["reward"])]
        choice = place.selectbox(f"{side}'s response", range(len(labels)), format_func=distinct_labels(range(len(labels)), labels.__getitem__), key=f"{StateKey.CHANGES}:{side}:response:{lines_key(rows)}")
        row = batch.table.iloc[choice]
        if side == "A" and row["images"]:
            with images:
                draw_images(row, width=150)
        shown = [name for name in ["reward", *functions, "advantage", "response_tokens_len", f"avg_kl_{settings.kl_estimator}"] if name in row.index and pd.notna(row[name])]
        place.caption(" · ".join(f"{markdown_literal(name)} {number_text(row[name])}" for name in shown))
        responses.append((place, clean_text(row["response"] or "", settings.view.pad_token)))
    runs_a, runs_b, cut = word_diff(responses[0][1], responses[1][1])
    for (place, _), runs in zip(responses, (runs_a, runs_b)):
        with place:
            draw_marked_words(runs, settings.view.whole_texts)
    st.caption("Words of A's response not in B's are marked red, B's not in A's green." + (f" Only the first {DIFF_WORDS:,} words of each are compared." if cut else ""))


# The step in view: a slider over evenly spaced steps, a selectbox otherwise; kept across live refreshes, or moved to
# each new last step when following a live run. New steps the user has not looked at are announced with a way there.
def draw_step_selector(run: "RunSnapshot", follow_latest: bool) -> int:
    st.subheader("⚡️ Each Step Response")
    steps = run.steps
    if st.session_state.get(StateKey.SELECTED_STEP) == OPEN_AT_LATEST:
        show_step(steps[-1])
    chosen = st.session_state.get(StateKey.SELECTED_STEP, steps[0])
    previous = chosen if chosen in steps else min(steps, key=lambda s: abs(s - chosen))  # the nearest, while it is not there
    standing_in = st.session_state.get(StateKey.STEP_STANDING_IN)
    if standing_in is not None and all(st.session_state[key] == standing_in for key in STEP_WIDGETS if key in st.session_state):
        set_step_widgets(previous)  # the chosen step back, or a nearer one standing in (a select box keeps its value else)
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
    # A step the user chose stays chosen while the run lacks it (a resumed launch drops the steps the one before logged
    # after its checkpoint, until it logs them again): the nearest is shown meanwhile, and the chosen one once it is back.
    if step != previous or StateKey.LAST_STEP_WHEN_CHOSEN not in st.session_state:
        st.session_state[StateKey.LAST_STEP_WHEN_CHOSEN] = steps[-1]
        st.session_state[StateKey.SELECTED_STEP] = chosen = step
    st.session_state[StateKey.STEP_STANDING_IN] = step if chosen != step else None
    chosen_at = st.session_state[StateKey.LAST_STEP_WHEN_CHOSEN]  # read once: a session state lookup a step took 0.2 s at 20,000 steps
    newer = [s for s in steps if s > chosen_at]
    notice = st.empty()  # always there, so the elements below keep their places (STABLE_LAYOUT)
    if chosen != step:
        notice.info(f"Step {chosen} is not in the run now (a resumed launch replaces the steps logged after its checkpoint until it logs them again; or its file is gone): step {step} is shown, and step {chosen} once it is back.")
    elif newer and step != steps[-1]:
        message, button = notice.container().columns([4, 1], vertical_alignment="center")
        message.info(f"{len(newer)} new step(s) since you chose step {step}; the latest is {steps[-1]}.")
        button.button("Show the latest step", on_click=show_step, args=(steps[-1],))
    return step


# Move the step selector (before it is drawn): its widgets take the step as their value (dropped, Streamlit would keep
# the browser's), and the step counts as chosen now, so only steps after the run's last are announced as new.
def show_step(step: int):
    st.session_state[StateKey.SELECTED_STEP] = step
    st.session_state.pop(StateKey.LAST_STEP_WHEN_CHOSEN, None)
    set_step_widgets(step)


# The step selector's widgets (the one drawn) show the step when next drawn.
def set_step_widgets(step: int):
    for key in STEP_WIDGETS:
        if key in st.session_state:
            st.session_state[key] = step


# The step's batch charts: reward (and ref_reward) per sample, their gap where the run has ref_reward, the distribution.
def draw_batch_charts(run: "RunSnapshot", batch: "StepBatch"):
    counted = cached_few_reward_values(run.version, run.samples)
    *charts, left_out = cached_batch_charts(batch.key, counted, batch.table)
    charts = [chart for chart in charts if chart is not None]  # no gap without ref_reward
    for column, chart in zip(st.columns(len(charts)), charts):
        draw_chart(column, chart)
    note = st.empty()  # always there (STABLE_LAYOUT)
    if left_out:
        note.caption(left_out)


# The step's tables as views, only the chosen one drawn, right above the sample they pick: the batch (a row per sample)
# and, for GRPO, its groups (a row per prompt); then downloads of the step's lines.
def draw_step_tables(batch: "StepBatch", settings: "Settings", run_dir: str, step: int):
    names = (["Batch samples"] if settings.view.show_batch_samples else []) + (["Groups"] if batch.table["group"].notna().any() else [])
    if not names:
        return
    view, shown = draw_view_choice("Step table", names, StateKey.STEP_TABLE)
    with shown:
        if view == "Batch samples":
            draw_batch_table(batch, settings)
        else:
            draw_groups(batch, settings)
    draw_downloads(batch.table, f"Step {step}", f"{run_label(run_dir)}_step_{step}", StateKey.STEP_DOWNLOADS)


# The batch table, sortable by every column; clicking a row shows that sample right below.
def draw_batch_table(batch: "StepBatch", settings: "Settings"):
    table, shown = cached_table_view(batch.key, batch.table, settings.kl_estimator, settings.view.pad_token, settings.view.system_prompt_end)
    if any(batch.table["images"]):  # a thumbnail of each prompt's first image, right of the sample index: this session's
        thumbnails = [thumbnail_url(path, images) for path, images in zip(batch.table["path"], batch.table["images"])]
        shown = table.assign(image=thumbnails)[["sample", "image", *table.columns[1:]]]
    st.container(key=StateKey.BATCH_TABLE).dataframe(
        shown,
        width="stretch",
        height=min(360, 38 + 35 * len(table)),  # a step of few samples without empty rows below them
        hide_index=True,
        on_select=lambda: pick_sample_from_table(StateKey.BATCH_ROWS),
        selection_mode="single-row",
        key=StateKey.BATCH_ROWS,  # one key for every step: the browser refills its grid instead of building a new one
        column_config={
            **{column: st.column_config.Column(width=header_width(column)) for column in table.select_dtypes("number").columns},
            "sample": st.column_config.NumberColumn(help="Sample index in current step batch", pinned=True, width=header_width("sample")),
            "image": st.column_config.ImageColumn(help="The prompt's first image; click the row for all of them beside the prompt below", width="small"),
            "group": st.column_config.NumberColumn(help="The sample's prompt group in this step (see Groups); group_id, at the right, is the id as logged", width=header_width("group")),
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
    groups = cached_group_table(batch.key, batch.table, settings.view.pad_token, settings.view.system_prompt_end)
    zero, without_reward = int(groups["zero signal"].sum()), int(groups["zero signal"].isna().sum())
    st.caption(
        f"{len(groups)} prompt group(s), {zero} with no learning signal (every completion got the same reward, so every "
        "advantage is 0)" + (f", {without_reward} without any reward (neither: left out of Step-Groups' share)" if without_reward else "")
        + ". Sort by reward spread; click a group to show its first completion below."
    )
    st.dataframe(
        groups,
        width="stretch",
        height=min(360, 38 + 35 * len(groups)),
        hide_index=True,
        on_select=lambda: pick_group_from_table(StateKey.GROUP_TABLE, groups["samples"].tolist()),
        selection_mode="single-row",
        key=StateKey.GROUP_TABLE,
        column_config={
            "group": st.column_config.NumberColumn(help="The group's number in this step (the batch table's group column)", pinned=True),
            "prompt": st.column_config.TextColumn(width="medium"),
            "samples": st.column_config.ListColumn(help="Sample indices of the group's completions, in batch order"),
            "rewards": st.column_config.ListColumn(help="The completions' rewards (4 significant digits), in the order of samples"),
            "group_id": st.column_config.TextColumn(help="The group id as logged"),
        },
    )


GROUP_SHOWN = 16  # completions of a group drawn at once: each costs the browser about 10 ms of every step change
NO_BREAK = "\u00a0"  # a space a line does not break at


# The other completions of the sample's prompt, side by side, each a click away from the samples pair above. Of a group
# over GROUP_SHOWN (a run of 256 generations a prompt, or one whose group id is the step: 1,024 completions took 11 s a
# step change), GROUP_SHOWN at a time, those holding the sample first.
def draw_sample_group(batch: "StepBatch", sample: int, settings: "Settings"):
    table = batch.table
    group = table["group"].iloc[sample]
    if pd.isna(group):
        return
    members = table[table["group"] == group]
    st.markdown(f"**Group {int(group)} of this step**: {len(members)} completion(s) of the prompt of sample #{sample}.")
    part, size = st.empty(), len(members)  # the part's place always there (STABLE_LAYOUT)
    if size > GROUP_SHOWN:
        if st.session_state.get(StateKey.GROUP_PART_FOR) != (batch.key, sample) or StateKey.GROUP_PART not in st.session_state:  # another sample, or back from a part not drawn: the part holding it
            st.session_state[StateKey.GROUP_PART] = members.index.get_loc(sample) // GROUP_SHOWN * GROUP_SHOWN
            st.session_state[StateKey.GROUP_PART_FOR] = (batch.key, sample)
        start = part.selectbox(
            "Completions shown", range(0, size, GROUP_SHOWN), key=StateKey.GROUP_PART, format_func=lambda start: f"{start + 1}-{min(start + GROUP_SHOWN, size)} of {size:,}",
            help=f"A group's completions are drawn {GROUP_SHOWN} at a time, in batch order; the Groups table lists the group's samples and rewards",
            width=240,
        )
        members = members.iloc[start : start + GROUP_SHOWN]
    draw_images(table.iloc[sample], width=96, details=False)  # the samples pair above has the captions and notes
    columns = st.columns(min(len(members), 4))
    function_columns = [c for c in members.columns if c.startswith("rewards/")]
    for position, (index, member) in enumerate(members.iterrows()):
        with columns[position % len(columns)]:
            facts = [f"reward {number_text(member['reward'])}"]
            facts += [f"{markdown_literal(c[8:])} {number_text(member[c])}" for c in function_columns if pd.notna(member[c])]
            if pd.notna(member["advantage"]):
                facts.append(f"adv {number_text(member['advantage'], '+.3g')}")
            if pd.notna(member["response_tokens_len"]):
                facts.append(f"{member['response_tokens_len']:.0f} tok")
            facts = [fact.replace(" ", NO_BREAK) for fact in facts]  # a narrow column wraps between facts, not inside one
            # A button in every place, keyed by the place: another sample or step relabels it, where a new key or a
            # markdown in a button's place would be a new element, built anew by the browser.
            shown = index == sample
            st.button(f"#{index} (shown above)" if shown else f"#{index}", key=f"{StateKey.GROUP_MEMBER}:{position}", on_click=open_sample, args=(int(index),),
                      disabled=shown, help="Show this completion in the samples pair")
            st.caption(" · ".join(facts))
            draw_text(clean_text(member["response"], settings.view.pad_token), settings.view.whole_texts)


# The original's samples pair: length metrics, the sample index, then prompt | response | ref | gap.
def draw_samples_pair(run: "RunSnapshot", batch: "StepBatch", step: int, settings: "Settings") -> int:
    table = batch.table
    previous_step = run.previous_step(step)
    has_ref = run.has_values("ref_response_len")  # a run without references gets no empty slots for them
    has_gap = run.has_values("reward_gap")
    lengths = [("Response Average Length", "response_len")] + ([("Ref Response Average Length", "ref_response_len")] if has_ref else [])
    metric_columns = st.columns([1] * len(lengths) + [1.4])  # a length's value whole at 1280 px: "2,496.41"
    for column, (label, length_column) in zip(metric_columns, lengths):
        by_step = run.step_mean(length_column)
        value = by_step.get(step, np.nan)
        if np.isnan(value):
            column.metric(label, "—")
            continue
        delta = value - by_step[previous_step] if previous_step is not None and previous_step in by_step else None
        column.metric(label, f"{value:,.2f}".rstrip("0").rstrip("."), None if delta is None else number_text(delta, "+,.2f"), help="Mean length in characters; the change from the step before.")
    chosen_sample(batch)
    with metric_columns[-1]:
        sample = st.number_input("Sample index in current step batch", min_value=0, max_value=len(table) - 1, key=StateKey.SAMPLE_INDEX)
    row = table.iloc[int(sample)]
    prompt_column, response_column, *others = st.columns([2, 3] + ([3] if has_ref else []) + ([1.3] if has_gap else []))
    ref_column = others.pop(0) if has_ref else None
    gap_column = others.pop(0) if has_gap else None
    with prompt_column:
        st.markdown("**Prompt**")
        draw_images(row, width=150)
        draw_text(clean_text(row["prompt"], settings.view.pad_token, settings.view.system_prompt_end), settings.view.whole_texts)
        if settings.view.system_prompt_end is not None and system_prompt_span(row["prompt"], settings.view.system_prompt_end) is None:
            st.caption("No system prompt to drop: no End Token of System Prompt, ChatML or Llama 3 system turn.")
        if isinstance(row["ground_truth"], str):
            st.caption("ground_truth")
            draw_text(row["ground_truth"], settings.view.whole_texts)
    with response_column:
        tools = f" · {row['tool_tokens']:.0f} of {row['response_tokens_len']:.0f} tokens written by a tool" if row["tool_tokens"] > 0 else ""
        st.markdown(f":green[**Response**] · reward {number_text(row['reward'])}{tools}")
        draw_text(clean_text(row["response"], settings.view.pad_token), settings.view.whole_texts)
    if ref_column:
        with ref_column:
            st.markdown(":blue[**Ref Response**]")
            if isinstance(row["ref_response"], str):
                draw_text(clean_text(row["ref_response"], settings.view.pad_token), settings.view.whole_texts)
            else:
                st.info("No `ref_response` in this sample.")
    if gap_column:
        with gap_column:
            st.markdown(":orange[**Reward Gap**]")
            gap = row["reward_gap"]
            st.markdown(f"### {number_text(gap)}" if pd.notna(gap) else "—")  # "-0.8068" on one line at 1280 px
    return int(sample)


TEXT_SHOWN = 20_000  # characters of a text of the data drawn whole; a longer one shows its start and its end (draw_text)


# A text of the data, as written. One over TEXT_SHOWN characters shows its first and last TEXT_SHOWN / 2 and how many lie
# between, unless Show Whole Texts is on: the browser lays a text out again whenever the page around it changes, many
# times while a rerun arrives, so its time grows with the texts' length times the page's changes (a step of 8
# 32,000-token responses: the page took 221 s to open, 8.6 s with them cut; docs/speed.md, "Long texts"). Always two
# elements, so that the elements below keep their places whichever a text is.
def draw_text(text: str, whole: bool):
    draw_start_and_end(len(text), whole, lambda start, end: st.text(as_written(text[start:end])))


# A response with its words marked against the other side's (What changed), cut as draw_text cuts a text.
def draw_marked_words(runs: list[tuple[str, str]], whole: bool):
    draw_start_and_end(sum(len(text) for _, text in runs), whole, lambda start, end: st.html(marked_words_html(runs_between(runs, start, end))))


# Draw a text of `length` characters whole, or its first and last TEXT_SHOWN / 2 (draw_part(start, end) draws a part).
def draw_start_and_end(length: int, whole: bool, draw_part):
    cut = not whole and length > TEXT_SHOWN
    draw_part(0, TEXT_SHOWN // 2 if cut else length)
    rest = st.empty()
    if cut:
        with rest.container():
            st.caption(f"… {length - TEXT_SHOWN:,} of its {length:,} characters not shown here: Show Whole Texts, in the sidebar, shows them …")
            draw_part(length - TEXT_SHOWN // 2, length)


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
        details.warning(unread_line_text(row, error))
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


CHANGES_SHOWN = ["prompt", "status", "change", "pass_a", "pass_b", "reward_a", "reward_b", "samples_a", "samples_b", "length_a", "length_b", "pass_change"]  # What changed's table, in this order
LONG_TRAJECTORY_TOKENS = 30_000  # a trajectory with more tokens shows these first in the token area until a turn is picked
PROMPT_SIDE_LINES = 64  # of a prompt's lines on each side of What changed, read back at most: the highest rewards
PROMPT_HISTORY_LINES = 2000  # read back and sent to the page at most: the latest steps'


# "This prompt over training": every loaded line of the shown and compared runs whose prompt has the same text and the
# same images as the sample in view's, its rewards per step (a curve) and its responses (a table). Read back only while open.
def draw_prompt_history(run: "RunSnapshot", compared: list["RunSnapshot"], row: pd.Series, settings: "Settings"):
    details = st.expander("This prompt over training", on_change="rerun", key=StateKey.PROMPT_HISTORY)
    if not details.open:
        return
    if pd.isna(row["prompt_key"]):
        details.info("This sample has no prompt.")
        return
    rows = pd.concat(
        [prompt_lines(shown.samples, row).assign(run=name) for name, shown in named_runs([run, *compared])],
        ignore_index=True,
    )
    left_out = max(len(rows) - PROMPT_HISTORY_LINES, 0)
    rows = rows.sort_values("step", kind="stable").tail(PROMPT_HISTORY_LINES).reset_index(drop=True)
    # Its own cache key: the same lines read for the step view hold no run column.
    batch = load_step_batch("prompt history " + lines_key(rows), rows)
    table = batch.table[holds_prompt(batch.table, row)]  # the same text and images, not only the same key
    runs = table["run"].nunique()
    details.caption(
        f"{len(table)} completion(s) of this prompt at {table['step'].nunique()} step(s)"
        + (f" in {runs} run(s)" if compared else "") + (" (of the loaded samples: Max Samples Each Step)" if any(shown.downsampled for shown in [run, *compared]) else "")
        + (f"; the {left_out} earliest line(s) with its key and images are left out: the latest {PROMPT_HISTORY_LINES} are shown" if left_out else "")
    )
    draw_chart(details, prompt_reward_chart(table))
    shown = table.assign(response=[shorten(clean_text(text, settings.view.pad_token)) for text in table["response"]])
    columns = (["run"] if compared else []) + ["step", "reward", "advantage", "response"]
    details.dataframe(shown[[column for column in columns if shown[column].notna().any() or column == "response"]], hide_index=True, width="stretch")


# The sample in view, kept inside this step's batch (a table click or the index input set it).
def chosen_sample(batch: "StepBatch") -> int:
    sample = min(max(int(st.session_state.get(StateKey.SAMPLE_INDEX, 0)), 0), len(batch.table) - 1)
    set_widget_value(StateKey.SAMPLE_INDEX, sample)
    return sample


# Every token of the chosen response: rows of metrics as a shaded table, a heat map and running text. A fragment
# inside the sample view's: choosing values or a view redraws only the token area.
@step_area_fragment
def draw_token_area(batch: "StepBatch", sample: int, settings: "Settings", span: tuple[int, int, str] | None = None):
    row = batch.table.iloc[sample]
    try:
        tokens = load_sample_tokens(row["index_id"], row["path"], int(row["offset"]), int(row["length"]), int(row["step"]))
    except OSError as error:
        st.warning(unread_line_text(row, error))
        return
    except BadLine as error:  # rewritten since it was indexed (its step changed, or it is no JSON object now)
        st.warning(f"{markdown_literal(Path(row['path']).name)} line {row['line']}: no token area, the line cannot be read in full ({markdown_literal(error)}); if the file was rewritten, press Load & View.")
        return
    if tokens is None:
        st.info(
            "No token area: this sample has no `logprobs`. Log `response_tokens` and `logprobs` "
            "(and `ref_logprobs` for KL) to see per-token values."
        )
        return
    rows = token_rows(tokens, settings.kl_estimator, settings.view.pad_token)
    merged_rows = len(rows.positions) and rows.positions[-1] >= len(rows.positions)  # a row stands for more than one token
    if span is not None:
        rows = turn_rows(rows, span[0], span[1])
        st.caption(span[2])
    for note in tokens.notes:
        st.warning(note)
    if not len(rows.tokens):
        st.info("No tokens to show: the response (or the turn picked) has none, or only the pad tokens Drop Padding Token drops.")
        return
    available = [name for name in TOKEN_ROWS if name in rows.values]
    chosen = st.multiselect(
        "Select show value(s)",
        available,
        default=[name for name in available if name != "advantage"] or available,
        help="; ".join(f"{name}: {TOKEN_ROWS[name]}" for name in available),
    )
    if not chosen:
        return
    view, shown = draw_view_choice("Token view", [name for name in TOKEN_VIEWS if settings.view.show_heat_map or name != "Heat map"], StateKey.TOKEN_VIEW)
    with shown:
        if view == "Response tokens":
            draw_running_text(rows, chosen)
            return
        if view == "Token table":
            caption = "A row per token; each bar shades the value within its column's range. Click a header to sort, e.g. by kl."
            if merged_rows:
                caption += " A run of one image placeholder token is one row (its values: their mean)."
            if rows.is_tool.any():
                caption += " Tokens a tool wrote (tool ✓) were not sampled by the policy: they have no values."
            st.caption(caption)
            shown_rows = (row["index_id"], int(row["offset"]), settings.kl_estimator, settings.view.pad_token, span)
            table, column_config = cached_token_table(shown_rows, rows, tuple(chosen))
            st.dataframe(table, width="stretch", height=min(420, 38 + 35 * table.num_rows), column_config=column_config, key=StateKey.TOKEN_TABLE)  # keyed: refilled, not built anew
        else:
            caption = (
                "Heat map: each row coloured within its own range (red above 0, blue below; a row of one value shows only "
                f"its sign); values on hover, and in the cells up to {VALUE_LABELLED_TOKENS} tokens."
            )
            if (size := tokens_per_column(len(rows.tokens))) > 1:
                caption += f" Over {HEAT_MAP_COLUMNS} tokens, a cell is a stretch of {size} tokens, shown by its value of largest size (its token on hover); the table has them all."
            st.caption(caption)
            st.plotly_chart(token_heatmap_figure(rows, chosen), width="stretch")


# The chosen values of a sample's tokens, a row per token labelled by its place and its text (whitespace made visible).
def token_grid(rows: "TokenRows", chosen: list[str]) -> pd.DataFrame:
    labels = [token_label(i, token) for i, token in zip(rows.positions.tolist(), rows.tokens)]
    return pd.DataFrame({name: rows.values[name] for name in chosen}, index=pd.Index(labels, name="token"))


# A region's views, only the chosen one drawn (drawing them all cost the browser about twice what one does on every
# step or sample change), picked with a segmented control above them; the choice is kept while the region is not
# drawn. Not st.tabs: the browser redraws a tab group, its labels and its panel on every rerun of the page or of any
# fragment, wherever it is (about 9 ms a group on 2 cores: bench/streamlit_floor.py), a segmented control only when it
# changes. Returns the view chosen and the container to draw it in.
def draw_view_choice(label: str, names: list[str], key: str, format_func=str) -> tuple[str, DeltaGenerator]:
    view = remembered_choice(key, names, names[0])
    st.segmented_control(label, names, key=key, format_func=distinct_labels(names, format_func), label_visibility="collapsed", required=True)
    return view, st.container(key=f"{key}_shown")


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
# A column holding ±inf (a token the trainer gives no probability: logp -inf, its KL inf) is not shaded: the grid's bar
# cells leave a value they cannot format blank, its number cells write Infinity.
def shaded_columns(grid: pd.DataFrame) -> dict:
    config = {}
    for name in grid.columns:
        if name == "tool":
            config[name] = st.column_config.CheckboxColumn("tool", help="Written by a tool (tool_mask 0), not sampled by the policy", pinned=True)
            continue
        values = grid[name].to_numpy(dtype=float)
        if np.isinf(values).any():
            config[name] = st.column_config.NumberColumn(name, help=f"{TOKEN_ROWS[name]}. Not shaded: it holds ±inf (Infinity)", format=significant_format(values))
            continue
        values = values[np.isfinite(values)]
        low, high = (values.min(), values.max()) if len(values) else (0.0, 1.0)
        config[name] = st.column_config.ProgressColumn(name, help=TOKEN_ROWS[name], format=significant_format(values), min_value=float(low), max_value=float(high if high > low else low + 1))
    return config


# A cached chart's data as the Arrow tables Streamlit sends, made once with the chart: given points, Streamlit converts
# them on every rerun that draws the chart (60 ms a rerun for the step curves of a run of 880 steps).
def arrow_data(spec: dict) -> dict:
    spec = dict(spec)
    if isinstance(spec.get("data"), dict) and isinstance(spec["data"].get("values"), list):
        spec["data"] = {**spec["data"], "values": pa.Table.from_pandas(pd.DataFrame(spec["data"]["values"]))}
    if "datasets" in spec:
        spec["datasets"] = {name: pa.Table.from_pandas(pd.DataFrame(points)) for name, points in spec["datasets"].items()}
    return spec


# Every chart on canvas: the browser paints its marks as pixels instead of building an SVG node per bar and point.
def draw_chart(where, spec: dict, steps: list[int] | None = None, kind: str = "curve"):
    spec = {**spec, "usermeta": {"embedOptions": {"renderer": "canvas"}}}
    if not steps:
        where.vega_lite_chart(spec=spec, width="stretch")
        return
    # A step chart: a click shows the nearest of `steps`. Keyed by its kind and title (one chart per title of a kind at
    # a time), so a chart keeps its zoom across picks; a second click on the point already picked does nothing.
    title = spec["title"]["text"] if isinstance(spec["title"], dict) else spec["title"]
    key = f"{kind}_chart:{title}"
    where.vega_lite_chart(spec=spec, width="stretch", key=key, on_select=lambda: pick_step_on_chart(key, steps), selection_mode=[PICK_STEP])


# A click on a step chart: the step area shows the nearest step of the run (the chart may be another run's).
def pick_step_on_chart(key: str, steps: list[int]):
    points = st.session_state[key].selection.get(PICK_STEP) or []
    if points and points[0].get("step") is not None:
        pick_step(int(points[0]["step"]), steps)


# A step picked on a chart or among the largest changes: the step area shows the run's nearest step.
def pick_step(step: int | None, steps: list[int]):
    if step is None or not steps:
        return
    show_step(min(steps, key=lambda candidate: abs(candidate - step)))
    st.session_state[StateKey.STEP_PICKED] = True
    scroll_to_when_drawn([StateKey.STEP_SLIDER, StateKey.STEP_SELECTBOX])


# A pick's step or sample is drawn in the page's next run, screens below what was clicked: scroll_into_view brings it
# up then. Each pick is numbered, so the same target picked twice in a row scrolls twice.
def scroll_to_when_drawn(keys: list[str]):
    st.session_state[StateKey.SCROLL_TO] = (keys, st.session_state.get(StateKey.SCROLL_TO, ([], 0))[1] + 1)


# Bring the first of these keyed elements that is drawn to the top of the view: a pick's step or sample is screens
# below the chart or result clicked. A script in a component's frame (of the page's own origin) scrolls the page; it
# holds only element keys, no text of the run.
def scroll_into_view(keys: list[str], number: int):
    selectors = [f".st-key-{key}" for key in keys]
    # Again after the charts below have taken their heights, which moves the target (STABLE_LAYOUT).
    # The pick's number makes each pick's frame new: the same frame drawn again would not run its script again.
    components.html(
        f"<script>/* pick {number} */ let tries = 0; const scroll = () => {{ const document = window.parent.document;"
        f" const target = {json.dumps(selectors)}.map(selector => document.querySelector(selector)).find(Boolean);"
        " if (!target) { if (++tries < 50) setTimeout(scroll, 100); return; }"
        " for (const wait of [0, 400, 1000]) setTimeout(() => target.scrollIntoView({block: 'start'}), wait); }; scroll();</script>",
        height=0,
    )


# A fragment whose click moved the step (a callback, before the fragment reruns) hands over to the whole page, whose
# step area shows the step.
def rerun_page_if_a_step_was_picked():
    if st.session_state.pop(StateKey.STEP_PICKED, False):
        st.rerun(scope="app")


# The steps where the shown run's first series changed most from the step before, each a click away: the jump to look
# at on a curve of hundreds of steps.
def draw_largest_changes(run: "RunSnapshot", columns: list[str], median: bool = False):
    if not columns or columns[0] not in run.samples:
        return
    changes = cached_largest_changes(run.version, columns[0], median, run.samples)
    if changes.empty:
        return
    labels = {int(step): f"step {step}: {number_text(change, '+.3g')}" for step, change in changes.items()}
    st.pills(
        f"Largest changes of {markdown_literal(STEP_CURVE_COLUMNS.get(columns[0], columns[0]))} ({'median' if median else 'mean'}, from the step before)",
        list(labels), format_func=labels.get, key=StateKey.LARGEST_CHANGES, on_change=pick_largest_change, args=(run.steps,),
        help="Click one to show that step below; a click on a curve shows the step nearest it.",
    )


# A step picked among the largest changes; the pill goes back to unselected, so it can be picked again later.
def pick_largest_change(steps: list[int]):
    pick_step(st.session_state[StateKey.LARGEST_CHANGES], steps)
    st.session_state[StateKey.LARGEST_CHANGES] = None


# The user's choice in a widget that is not drawn in every run (a view not chosen, a sample without logprobs, a
# heat map switched off), which Streamlit would forget: the widget's value is the user's when it differs from what
# was drawn last, and the choice returns whenever it fits the options again (a list: every member among them).
def remembered_choice(key: str, options: list, fallback):
    value = st.session_state.get(key)
    if value is not None and value != st.session_state.get(f"{key}:drawn"):
        st.session_state[f"{key}:chosen"] = value
    chosen = st.session_state.get(f"{key}:chosen")
    fits = all(item in options for item in chosen) if isinstance(chosen, list) else chosen in options
    value = chosen if chosen is not None and fits else fallback
    if value != st.session_state.get(f"{key}:drawn"):  # a choice new to the page is sent with the widget, once
        st.session_state[key] = value
    else:
        set_widget_value(key, value)
    st.session_state[f"{key}:drawn"] = value
    return value


# A widget's value set by the page, only where it differs: a value the page sets is sent to the browser again, which
# draws the widget anew, in every run that sets it.
def set_widget_value(key: str, value):
    if st.session_state.get(key) != value:
        st.session_state[key] = value


# A number column wide enough for its name and the sort arrow and menu a sorted column's header adds: sized to its
# numbers alone, a sorted column's header read "↑ re ⋮".
def header_width(name: str) -> int:
    return 8 * len(name) + 48


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


# The turns the server's sessions take to draw their step areas, one at a time (rl_board.reading.workers.Turns); a
# session waits for its turn at most about five cached step changes' time (0.05 s each on 2 cores), then goes ahead.
@st.cache_resource(show_spinner=False)
def session_turns() -> "Turns":
    return Turns(wait=0.25)


# One read-ahead thread per server, shared by the sessions: it starts the latest job once the user has stayed on a
# step a moment, so the browser draws the step in view first.
@st.cache_resource(show_spinner=False)
def read_ahead_thread() -> "LatestJobThread":
    return LatestJobThread(delay=READ_AHEAD_DELAY)


# What changed between two sides, per version of each run and choice of steps and pass rule.
@st.cache_resource(show_spinner="Matching the prompts of A and B…", max_entries=8)
def cached_prompt_changes(choices: tuple, _a: pd.DataFrame, _b: pd.DataFrame) -> "PromptChanges":
    return prompt_changes(_a, _b, choices[-1], choices[-2])


# The sample in view's tokens (its first TOKEN_VIEW_TOKENS); index_id tells a line read anew from one at the same place
# in an older file.
@st.cache_resource(show_spinner=False, max_entries=64)
def load_sample_tokens(index_id: str, path: str, offset: int, length: int, step: int) -> "SampleTokens | None":
    return read_sample_tokens(path, offset, length, step, TOKEN_VIEW_TOKENS)


# A run's texts for search, kept for the two runs searched last: the bench's large run's (51,200 samples) take 390 MB.
@st.cache_resource(show_spinner=False, max_entries=2)
def run_texts(run_dir: str) -> "RunTexts":
    return RunTexts()


# A search of a run's texts, per run version and query: filtering and sorting its results reads nothing again.
@st.cache_resource(show_spinner="Searching every loaded sample…", max_entries=8)
def cached_search(version: tuple, query: str, regex: bool, match_case: bool, places: str, _run: "RunSnapshot") -> "SearchResult":
    found = search_samples(run_texts(_run.run_dir), _run.samples, search_pattern(query, regex, match_case), places)
    return stopped_if(found.searched < len(_run.samples), found)


# What a cached search found, or what it found before its deadline stopped it: the cache keeps only whole searches, so
# that the same search again (a machine less busy) searches again.
class StoppedSearch(Exception):
    def __init__(self, found):
        self.found = found


def stopped_if(stopped: bool, found):
    if stopped:
        raise StoppedSearch(found)
    return found


# What a cached search found, or what it found before it stopped a little while ago (STOPPED_KEPT_SECONDS): every rerun
# (a widget changed, a live refresh) would search again for the whole deadline.
def whole_or_stopped(cached_search_function, *args):
    asked = (cached_search_function.__name__, *(arg for arg in args if not isinstance(arg, RunSnapshot)))
    now, stopped_searches = time.monotonic(), recently_stopped_searches()
    if asked in stopped_searches and now - stopped_searches[asked][0] < STOPPED_KEPT_SECONDS:
        return stopped_searches[asked][1]
    try:
        return cached_search_function(*args)
    except StoppedSearch as stopped:
        for old in [key for key, (when, _) in list(stopped_searches.items()) if now - when >= STOPPED_KEPT_SECONDS]:
            stopped_searches.pop(old, None)
        stopped_searches[asked] = (now, stopped.found)
        return stopped.found


STOPPED_KEPT_SECONDS = 60


# The searches that stopped at their deadline, by what was asked: (when, what they found). Shared by sessions.
@st.cache_resource(show_spinner=False)
def recently_stopped_searches() -> dict:
    return {}


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
    return arrow_data(metric_chart(name, _histories, smoothing, zero_shift))


# Step charts change only with the runs and the curve settings, so a step or sample change reuses them.
@st.cache_resource(show_spinner=False, max_entries=64)
def cached_step_curve(columns, title, unit, versions, variance_scale, zero_shift, smoothing, _runs, names=None, median=False, log_scale=False, lines=(), dashes_named=True) -> dict:
    return arrow_data(step_curve_chart(_runs, columns, title, unit, variance_scale, zero_shift, smoothing, names, median, log_scale, lines, dashes_named))


# A number's largest changes from step to step, once per run version, series and statistic: not at every rerun.
@st.cache_resource(show_spinner=False, max_entries=16)
def cached_largest_changes(version, column: str, median: bool, _samples: pd.DataFrame) -> pd.Series:
    return largest_changes(step_stats(_samples, column)["median" if median else "mean"])


# A run's per-token mismatch, read once per run version (a pass over its loaded lines).
@st.cache_resource(show_spinner=False, max_entries=2)  # a run of 25 M tokens holds 0.5 GB; live mode makes versions
def cached_mismatch_tokens(version, _samples: pd.DataFrame) -> "MismatchTokens":
    return read_mismatch_tokens(_samples)


# Its per-sample sums, the same at every threshold.
@st.cache_resource(show_spinner=False, max_entries=4)
def cached_mismatch_sums(version, _tokens: "MismatchTokens") -> dict:
    return sample_sums(_tokens)


@st.cache_resource(show_spinner=False, max_entries=16)
def cached_mismatch_by_step(version, mode: str, clip_min, clip_max, _steps: np.ndarray, _tokens: "MismatchTokens", _sums: dict) -> pd.DataFrame:
    return mismatch_by_step(_steps, _tokens, mode, clip_min, clip_max, _sums)


# A sample's trajectory, read only while shown.
@st.cache_data(show_spinner=False, max_entries=64)
def load_sample_trajectory(index_id: str, path: str, offset: int, length: int, step: int) -> "Trajectory | None":
    return read_trajectory(path, offset, length, step)


# A run's tool calls and results, read once per run version (a pass over its lines with turns).
@st.cache_resource(show_spinner=False, max_entries=4)
def cached_tool_events(version, _samples: pd.DataFrame) -> "ToolEvents":
    return read_tool_events(_samples[_samples["turns"] > 0])


@st.cache_resource(show_spinner=False, max_entries=8)
def cached_tools_by_step(version, _samples: pd.DataFrame, _events: pd.DataFrame) -> pd.DataFrame:
    return tools_by_step(_samples, _events)


# A run's loss passes, read once per run version (a pass over its loaded lines).
@st.cache_resource(show_spinner=False, max_entries=4)
def cached_loss_passes(version, _samples: pd.DataFrame) -> "LossPasses":
    return read_loss_passes(_samples)


@st.cache_resource(show_spinner=False, max_entries=8)
def cached_update_by_step(version, sequence: bool, loss_type, pooled_ranks: bool, _passes: pd.DataFrame) -> pd.DataFrame:
    return update_by_step(_passes, sequence, loss_type, pooled_ranks)


@st.cache_resource(show_spinner=False, max_entries=4)
def cached_sample_shares(version, _passes: pd.DataFrame) -> pd.DataFrame:
    return sample_shares(_passes)


@st.cache_resource(show_spinner=False, max_entries=8)
def cached_fraction_chart(versions, smoothing, _runs) -> dict:
    return arrow_data(step_fraction_chart([(name, group_signal_by_step(samples)) for name, samples in _runs], smoothing))


# The step's three batch charts and their note of the ±inf values they leave out, built once per set of lines.
@st.cache_resource(show_spinner=False, max_entries=16)
def cached_batch_charts(lines, counted, _table) -> tuple:
    gap = arrow_data(reward_gap_chart(_table)) if _table["ref_reward"].notna().any() else None
    return arrow_data(batch_reward_chart(_table)), gap, arrow_data(reward_distribution_chart(_table, counted)), batch_charts_left_out(_table)


# Whether the run's rewards take a few values (counted per value in the batch's distribution), once per run version.
@st.cache_resource(show_spinner=False, max_entries=16)
def cached_few_reward_values(version, _samples: pd.DataFrame) -> bool:
    return few_reward_values(_samples)


# A sample's token table as Streamlit sends it (the tool column first where a tool wrote tokens) and its columns' shading
# and widths (the token column wide enough for <|endoftext|> whole), made once per sample in view (its line, KL
# estimator, pad token and turn) and choice of values: each session and rerun showing it sends it as it is.
@st.cache_resource(show_spinner=False, max_entries=16)
def cached_token_table(shown_rows, _rows: "TokenRows", chosen: tuple[str, ...]) -> tuple[pa.Table, dict]:
    grid = token_grid(_rows, list(chosen))
    if _rows.is_tool.any():
        grid.insert(0, "tool", _rows.is_tool)
    return convert_pandas_df_to_arrow_table(grid), {"_index": st.column_config.TextColumn(width="medium")} | shaded_columns(grid)


# The batch table as shown, built once per set of lines and display setting, with the Arrow table Streamlit sends
# (its own conversion, so the same bytes): given the frame, it converted it again for every session showing the step.
@st.cache_resource(show_spinner=False, max_entries=16)
def cached_table_view(lines, _table, kl_estimator, pad_token, system_prompt_end) -> tuple[pd.DataFrame, pa.Table]:
    view = batch_table_view(_table, kl_estimator, pad_token, system_prompt_end)
    return view, convert_pandas_df_to_arrow_table(view)


# The groups table as shown, built once per set of lines and display setting.
@st.cache_resource(show_spinner=False, max_entries=16)
def cached_group_table(lines, _table, pad_token, system_prompt_end) -> pd.DataFrame:
    return group_table(_table, pad_token, system_prompt_end)


# A watch pattern's hits per step in a run, once per run version and pattern (a search of every loaded text).
@st.cache_resource(show_spinner="Searching every loaded sample…", max_entries=64)
def cached_watch_counts(version, watch: "WatchPattern", _run: "RunSnapshot") -> pd.DataFrame:
    counts = watch_counts(run_texts(_run.run_dir), _run.samples, watch)
    return stopped_if(bool(counts["hits"].isna().any()), counts)


# The patterns' hits at one step of a run, with their snippets: picking another step searches only that step's texts.
@st.cache_resource(show_spinner=False, max_entries=16)
def cached_step_hits(version, watches: tuple, step: int, _run: "RunSnapshot") -> tuple[pd.DataFrame, list[str]]:
    hits, stopped = step_hits(run_texts(_run.run_dir), _run.samples, list(watches), step)
    return stopped_if(bool(stopped), (hits, stopped))


# A run's staleness per step and its samples by staleness, once per run version.
@st.cache_resource(show_spinner=False, max_entries=8)
def cached_staleness_by_step(version, _samples: pd.DataFrame) -> pd.DataFrame:
    return staleness_by_step(_samples)


@st.cache_resource(show_spinner=False, max_entries=4)
def cached_staleness_distribution(version, _samples: pd.DataFrame) -> pd.DataFrame:
    return staleness_distribution(_samples)


# A run's signals per step, once per run version, window and KL column.
@st.cache_resource(show_spinner=False, max_entries=8)
def cached_signals(version, window: int, kl_column: str, _samples: pd.DataFrame, _reward_functions: list) -> pd.DataFrame:
    return signals_by_step(_samples, _reward_functions, kl_column, window)


@st.cache_resource(show_spinner=False, max_entries=8)
def cached_signal_examples(version, window: int, kl_column: str, signal: str, _samples: pd.DataFrame, _table: pd.DataFrame) -> pd.DataFrame:
    return firing_examples(_samples, _table, signal, kl_column)


# The metrics drawn first in the Training metrics area: GRPO's reward, loss, KL and learning rate (seed 004's lr).
DEFAULT_METRICS = ["reward", "loss", "kl", "learning_rate", "lr"]


if __name__ == "__main__":
    main()
