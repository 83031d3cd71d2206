"""Time the search of "🔎 Find samples" on big runs in a real browser, and the server's part of it in-process.

For each run size (run_bench.py's generated runs: medium = 100 steps x 128 samples, large = 200 x 256 loaded with
Max Samples Each Step 256, i.e. every sample) it first indexes the run with the board's own RunStore into
bench/runs/search-cache-SIZE (so every server below opens it with the index cache warm, as a user reopening a run
has it) and times the board's search functions in a separate process (--server-side), with the expected number of
samples found for each query. Then, per repeat, a fresh server (start.sh) and a fresh Chromium page, timed as
run_bench.py times (Board.timed: the browser's rerun request until its main thread has finished drawing):
  - Load & View (not a target here);
  - the first search: a phrase typed into "Search prompt and response text" and Enter, until the results are drawn
    (the "N of M loaded samples found" line with the expected N); the run's texts are read on this search;
  - refined searches: other phrases (a word added, a CJK pair, another pair), each a search not cached yet;
  - a filter with the same query: "steps" added to Filter by, then its range narrowed by one step (3 times);
    then Sort by avg_kl;
  - regular-expression searches: Regular expression turned on (the same text as a pattern), then 3 patterns;
  - the server's peak memory (VmHWM) and resident memory (VmRSS) after searching, and its worker processes'.
Each action also gets its server part, the "searched in S s" the page prints, and the CPU seconds it cost the server
(with its workers) and Chromium. It prints medians. Needs Chromium (/usr/bin/chromium) and the test requirements.
About 3 minutes on 2 cores once the runs exist; the first time also generates them (the large run: 4.6 GB, about
20 s) and indexes them (about 10 s).

    python bench/search_bench.py                  # medium and large, 3 repeats
    python bench/search_bench.py --sizes medium   # just one
    python bench/search_bench.py --screenshots    # also saves the page after the first and the last search
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from playwright.sync_api import sync_playwright

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))
from bench.run_bench import SIZES, Board, child_pids, generated_run, status_gib  # noqa: E402

MAX_SAMPLES = {"medium": 128, "large": 256}  # every sample of the run
FIRST = "reward policy"
REFINED = ["reward policy token", "model value", "押韵 诗句"]  # the last has > 1,000 results: sorting shows in the message
REGEXES = [r"answer \w+ because", r"(押韵|诗句) 上相", r"policy (token|value) \w+ step"]
NARROWED = 3  # the steps filter's range narrowed this many times, one step each

TARGETS = {
    "first search (s)": {"medium": "<= 1", "large": "<= 3"},
    "refined search (s)": {"medium": "<= 0.3", "large": "<= 1"},
    "server peak memory (GiB, VmHWM)": {"medium": "<= 0.6", "large": "<= 1.5"},
}
EXTRA_ROWS = [
    "first search, server part (s)",
    "first search, 'searched in' on the page (s)",
    "first search, CPU: server (s)",
    "first search, CPU: browser (s)",
    "refined search, server part (s)",
    "refined search, 'searched in' on the page (s)",
    "refined search, CPU: server (s)",
    "refined search, CPU: browser (s)",
    *(f"refined search '{query}' (s)" for query in REFINED),
    "filter: 'steps' added to Filter by (s)",
    "filter: 'steps' added, server part (s)",
    "filter: 'steps' added, CPU: browser (s)",
    "filter: step range narrowed, same query (s)",
    "filter: step range narrowed, server part (s)",
    "sort by avg_kl, same query (s)",
    "regular expression turned on, same text (s)",
    "regular-expression search (s)",
    "regular-expression search, server part (s)",
    "regular-expression search, 'searched in' on the page (s)",
    "Load & View, index cache warm (s)",
    "server RSS after Load & View (GiB)",
    "server RSS after searching (GiB)",
    "worker peak memory (GiB, VmHWM, all)",
    "server + workers RSS after searching (GiB)",
]
# The server-side part alone, in a process of its own (the board's functions, no Streamlit page).
SERVER_ROWS = [
    "in-process: RunStore.load from the index cache (s)",
    "in-process: texts read, RunTexts.of -> read_texts on the workers (s)",
    "in-process: texts held (MB)",
    "in-process: search_samples, first phrase, texts held (s)",
    "in-process: search_samples, refined phrase, texts held (s)",
    "in-process: search_samples, regular expression, texts held (s)",
    "in-process: filter_mask + sort, steps filter, sort by avg_kl (s)",
    "in-process: match_snippets, the 1,000 rows shown (s)",
    "in-process: results table to Arrow, st.dataframe's conversion (s)",
    "in-process: peak memory of that process (GiB)",
]


# ------------------------------------------------------------------------------------------------------------------
# The server's part alone: run as `search_bench.py --server-side SIZE` with RL_LOGGING_BOARD_CACHE set.
# ------------------------------------------------------------------------------------------------------------------


def server_side(size: str, repeats: int) -> dict:
    import resource

    from streamlit.dataframe_util import convert_pandas_df_to_arrow_bytes

    import rl_logging_board as board
    from rl_board.metrics import SampleFilter, filter_columns, filter_mask
    from rl_board.reading.search import RunTexts, match_snippets, search_pattern, search_samples
    from rl_board.reading.store import RunStore
    from rl_board.reading.workers import WORKERS, worker_pool

    run_dir = str((generated_run(size) / "run").resolve())  # as start.sh names it to the server (the index cache is per path)
    started = time.perf_counter()
    run = RunStore(run_dir).load(MAX_SAMPLES[size])  # indexes the run into the cache the first time
    print(f"{size}: run indexed/loaded in-process in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    samples = run.samples
    estimator = board.default_kl_estimator(run_dir)  # the page's KL estimator
    sort_column = next(column for column in filter_columns(run, estimator) if column.startswith("avg_kl"))
    if WORKERS > 1:  # the server starts its workers before Load & View: here they are ready before timing
        pool = worker_pool()
        for future in [pool.submit(int) for _ in range(4 * WORKERS)]:
            future.result()
    queries = [(FIRST, False), *((query, False) for query in REFINED), *((pattern, True) for pattern in REGEXES)]
    rows = {name: [] for name in SERVER_ROWS}
    counts = {}
    for _ in range(repeats):
        started = time.perf_counter()
        run = RunStore(run_dir).load(MAX_SAMPLES[size])
        rows["in-process: RunStore.load from the index cache (s)"].append(time.perf_counter() - started)
        texts = RunTexts()
        started = time.perf_counter()
        buffers, _, _ = texts.of(samples)
        rows["in-process: texts read, RunTexts.of -> read_texts on the workers (s)"].append(time.perf_counter() - started)
        rows["in-process: texts held (MB)"].append(sum(len(buffer) for buffer in buffers) / 1e6)
        seconds, found = {}, {}
        for query, regex in queries:
            found[query] = search_samples(texts, samples, search_pattern(query, regex, False), "prompt and response")
            seconds[query] = found[query].seconds
            steps = samples["step"].to_numpy()[found[query].place > 0]
            counts[query] = {int(step): int(count) for step, count in zip(*np.unique(steps, return_counts=True))}
        rows["in-process: search_samples, first phrase, texts held (s)"].append(seconds[FIRST])
        rows["in-process: search_samples, refined phrase, texts held (s)"].append(statistics.median(seconds[q] for q in REFINED))
        rows["in-process: search_samples, regular expression, texts held (s)"].append(statistics.median(seconds[q] for q in REGEXES))
        # The page's work on the last refined search once found (draw_search, draw_search_results): filter, sort,
        # snippets of the rows shown, the table as Arrow.
        found = found[REFINED[-1]]
        started = time.perf_counter()
        mask = filter_mask(samples, SampleFilter(steps=(run.steps[NARROWED], run.steps[-1]))) & (found.place > 0)
        ordered = samples[mask].sort_values(sort_column, ascending=False, na_position="last", kind="stable").head(board.RESULTS_SHOWN)
        rows["in-process: filter_mask + sort, steps filter, sort by avg_kl (s)"].append(time.perf_counter() - started)
        shown = ordered.head(board.RESULTS_SHOWN)
        started = time.perf_counter()
        snippets = match_snippets(texts, shown, found.place[shown.index], found.start[shown.index], found.end[shown.index])
        rows["in-process: match_snippets, the 1,000 rows shown (s)"].append(time.perf_counter() - started)
        table = shown[["step", "sample", "reward", sort_column]].copy()
        table["found in"] = np.where(found.place[shown.index] == 1, "prompt", "response")
        table["match"] = snippets
        table["file"], table["line"] = [Path(path).name for path in shown["path"]], shown["line"].to_numpy()
        started = time.perf_counter()
        convert_pandas_df_to_arrow_bytes(table)
        rows["in-process: results table to Arrow, st.dataframe's conversion (s)"].append(time.perf_counter() - started)
        rows["in-process: peak memory of that process (GiB)"].append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
        del texts, buffers
    return {"rows": {name: statistics.median(values) for name, values in rows.items()}, "counts": counts, "samples": len(samples), "steps": run.steps, "sort_column": sort_column}


def run_server_side(size: str, repeats: int, cache: Path) -> dict:
    env = dict(os.environ, RL_LOGGING_BOARD_CACHE=str(cache))
    cache.mkdir(parents=True, exist_ok=True)
    out = cache / "search-server-side.json"
    subprocess.run([sys.executable, __file__, "--server-side", size, "--repeats", str(repeats), "--json", str(out)], env=env, cwd=PROJECT, check=True)
    return json.loads(out.read_text())


# ------------------------------------------------------------------------------------------------------------------
# Through a real server and Chromium.
# ------------------------------------------------------------------------------------------------------------------


# The page shows "N of M loaded samples found" (N with thousands separators), the query's results drawn.
def found_condition(found: int, total: int, also: str = "") -> str:
    text = f"{found:,} of {total:,} loaded samples found"
    return f"[...document.querySelectorAll('[data-testid=\"stMarkdownContainer\"]')].some(e => e.textContent.includes({json.dumps(text)}) && e.textContent.includes({json.dumps(also)}))"


class SearchBoard(Board):
    """run_bench's Board, with the search area's widgets."""

    def search(self, query: str, found: int, total: int) -> float:
        field = self.page.get_by_role("textbox", name="Search prompt and response text", exact=True)
        field.fill(query)
        return self.timed(lambda: field.press("Enter"), found_condition(found, total))

    # The "(searched in S s)" of the results' message.
    def searched_in(self) -> float:
        text = self.page.evaluate("() => [...document.querySelectorAll('[data-testid=\"stMarkdownContainer\"]')].map(e => e.textContent).find(t => t.includes('searched in')) || ''")
        match = re.search(r"searched in ([\d.]+) s", text)
        return float(match.group(1)) if match else float("nan")

    # Picks `option` in the select box or multiselect labelled `label` (typed, then Enter), timed.
    def choose(self, label: str, option: str, condition: str = "true") -> float:
        box = self.page.get_by_role("combobox", name=label)
        box.click()
        box.fill(option)
        seconds = self.timed(lambda: box.press("Enter"), condition)
        box.press("Escape")  # closes the options list; sends nothing
        return seconds

    def narrow_steps(self, found: int, total: int) -> float:
        self.page.get_by_label("Steps", exact=True).get_by_role("slider").first.focus()
        return self.timed(lambda: self.page.keyboard.press("ArrowRight"), found_condition(found, total))

    def toggle_regex(self) -> float:
        return self.timed(lambda: self.page.get_by_text("Regular expression", exact=True).click())

    def exceptions(self) -> int:
        return self.page.locator('[data-testid="stException"]').count()

    # Resident memory now (VmRSS, GiB) and peak (VmHWM) of the server's worker processes (and resource tracker).
    def workers(self, field: str) -> float:
        total = 0.0
        for pid in child_pids(self.server.pid):
            try:
                total += status_gib(pid, field)
            except OSError:  # ended since it was listed
                pass
        return total


def measure(size: str, repeats: int, screenshots: bool = False) -> dict:
    steps_count = SIZES[size][0]
    root = generated_run(size)
    cache = root.parent / f"search-cache-{size}"  # outside the root folder, whose runs the page lists
    size_gb = sum(p.stat().st_size for p in (root / "run").glob("*.jsonl")) / 1e9
    started = time.perf_counter()
    side = run_server_side(size, repeats, cache)
    print(f"{size}: server side timed in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    total, steps, counts = side["samples"], side["steps"], side["counts"]

    def expected(query: str, first_step: int | None = None) -> int:
        return sum(count for step, count in counts[query].items() if first_step is None or int(step) >= first_step)

    rows: dict[str, list[float]] = {name: [] for name in [*TARGETS, *EXTRA_ROWS]}
    exceptions = 0
    with sync_playwright() as playwright:
        for repeat in range(repeats):
            board = SearchBoard(root, cache, playwright)  # a fresh server: the run's texts are not read yet
            try:
                board.show_page()
                if MAX_SAMPLES[size] != 128:
                    board.set_max_samples(MAX_SAMPLES[size])
                rows["Load & View, index cache warm (s)"].append(board.load(steps_count))
                rows["server RSS after Load & View (GiB)"].append(status_gib(board.server.pid, "VmRSS"))

                rows["first search (s)"].append(board.search(FIRST, expected(FIRST), total))
                rows["first search, server part (s)"].append(board.server_seconds)
                rows["first search, 'searched in' on the page (s)"].append(board.searched_in())
                rows["first search, CPU: server (s)"].append(board.server_cpu)
                rows["first search, CPU: browser (s)"].append(board.browser_cpu)
                if screenshots:
                    board.page.screenshot(path=str(root.parent / f"search-{size}-{repeat + 1}-first.png"), full_page=True)

                refined = [(board.search(query, expected(query), total), board.server_seconds, board.searched_in(), board.server_cpu, board.browser_cpu) for query in REFINED]
                for name, values in zip(["refined search (s)", "refined search, server part (s)", "refined search, 'searched in' on the page (s)", "refined search, CPU: server (s)", "refined search, CPU: browser (s)"], zip(*refined)):
                    rows[name].append(statistics.median(values))
                for query, (seconds, *_) in zip(REFINED, refined):
                    rows[f"refined search '{query}' (s)"].append(seconds)

                query = REFINED[-1]
                rows["filter: 'steps' added to Filter by (s)"].append(board.choose("Filter by", "steps", found_condition(expected(query), total)))
                rows["filter: 'steps' added, server part (s)"].append(board.server_seconds)
                rows["filter: 'steps' added, CPU: browser (s)"].append(board.browser_cpu)
                narrowed = [(board.narrow_steps(expected(query, steps[index]), total), board.server_seconds) for index in range(1, NARROWED + 1)]
                rows["filter: step range narrowed, same query (s)"].append(statistics.median(seconds for seconds, _ in narrowed))
                rows["filter: step range narrowed, server part (s)"].append(statistics.median(part for _, part in narrowed))
                first_step = steps[NARROWED]
                rows["sort by avg_kl, same query (s)"].append(board.choose("Sort by", side["sort_column"], found_condition(expected(query, first_step), total, f"by {side['sort_column']}")))

                rows["regular expression turned on, same text (s)"].append(board.toggle_regex())
                regexes = [(board.search(pattern, expected(pattern, first_step), total), board.server_seconds, board.searched_in()) for pattern in REGEXES]
                for name, values in zip(["regular-expression search (s)", "regular-expression search, server part (s)", "regular-expression search, 'searched in' on the page (s)"], zip(*regexes)):
                    rows[name].append(statistics.median(values))

                rows["server peak memory (GiB, VmHWM)"].append(status_gib(board.server.pid, "VmHWM"))
                rows["server RSS after searching (GiB)"].append(status_gib(board.server.pid, "VmRSS"))
                rows["worker peak memory (GiB, VmHWM, all)"].append(board.workers("VmHWM"))
                rows["server + workers RSS after searching (GiB)"].append(status_gib(board.server.pid, "VmRSS") + board.workers("VmRSS"))
                exceptions += board.exceptions()
                if screenshots:
                    board.page.screenshot(path=str(root.parent / f"search-{size}-{repeat + 1}-last.png"), full_page=True)
                print(
                    f"{size} #{repeat + 1}: first search {rows['first search (s)'][-1]:.2f} s, refined {rows['refined search (s)'][-1]:.2f} s,"
                    f" narrowed {rows['filter: step range narrowed, same query (s)'][-1]:.2f} s, regex {rows['regular-expression search (s)'][-1]:.2f} s,"
                    f" server peak {rows['server peak memory (GiB, VmHWM)'][-1]:.2f} GiB",
                    file=sys.stderr, flush=True,
                )
            finally:  # a failed action leaves no server behind
                board.close()
    result = {"size_gb": size_gb, "samples": total, "exceptions": exceptions, **{name: statistics.median(values) for name, values in rows.items()}}
    result["every first search"] = ", ".join(f"{value:.2f}" for value in rows["first search (s)"])
    result["every refined search"] = ", ".join(f"{value:.2f}" for value in rows["refined search (s)"])
    result["found"] = {query: expected(query) for query in counts}
    return result | side["rows"]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["medium", "large"], choices=list(MAX_SAMPLES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--screenshots", action="store_true", help="save the page after the first and the last search (bench/runs/search-SIZE-*.png)")
    parser.add_argument("--server-side", choices=list(MAX_SAMPLES), help=argparse.SUPPRESS)  # the in-process part...
    parser.add_argument("--json", help=argparse.SUPPRESS)  # ...written here
    options = parser.parse_args()
    if options.server_side:
        Path(options.json).write_text(json.dumps(server_side(options.server_side, options.repeats)))
        sys.exit()
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    results = {size: measure(size, options.repeats, options.screenshots) for size in options.sizes}
    sizes = list(results)
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=PROJECT, capture_output=True, text=True).stdout.strip()
    print(f"\nboard at {commit}; median of {options.repeats}; Max Samples Each Step = every sample ({', '.join(f'{s} {MAX_SAMPLES[s]}' for s in sizes)}); {os.cpu_count()} cores; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after; took {time.perf_counter() - started:.0f} s")
    print("| measure | " + " | ".join(f"{s} ({results[s]['samples']:,} samples, {results[s]['size_gb']:.2f} GB)" for s in sizes) + " | target |")
    print("|---|" + "---|" * len(sizes) + "---|")
    for name in [*TARGETS, *EXTRA_ROWS, *SERVER_ROWS]:
        digits = 0 if name.endswith("(MB)") else 3 if name.endswith("(s)") and name.startswith("in-process") else 2
        cells = " | ".join(f"{results[s][name]:.{digits}f}" for s in sizes)
        target = " / ".join(TARGETS.get(name, {}).get(s, "") for s in sizes).strip(" /")
        print(f"| {name} | {cells} | {target} |")
    print("\nevery first search (s): " + "; ".join(f"{s} {results[s]['every first search']}" for s in sizes))
    print("every refined search (s, median of a repeat's 3 queries): " + "; ".join(f"{s} {results[s]['every refined search']}" for s in sizes))
    print("samples found: " + "; ".join(f"{s}: " + ", ".join(f"{query!r} {results[s]['found'][query]:,}" for query in [FIRST, *REFINED, *REGEXES]) for s in sizes))
    print("exception elements on the page: " + ", ".join(f"{s} {results[s]['exceptions']}" for s in sizes))
