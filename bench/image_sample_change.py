"""Time a sample change when every prompt has 4 images, in a real browser, and print a table.

Writes (under a temporary folder) a run whose prompts each name 4 distinct PIL-drawn images (640 x 480 PNGs, as
rollout_logger writes an image not decoded from a JPEG), and the same run without images for reference. Then, for
each of REPEATS repeats, a new server started by start.sh (so the board's image cache starts empty) and a new Chromium
page (bench/run_bench.py's Board): Load & View of the run, then sample changes at its latest step, where it opens (index input):
  - first view: a sample of a prompt not shown yet, so its 4 images are decoded and re-encoded for the page;
  - cached view: a sample shown before (the board's image cache, and the browser's, have its images);
  - the run without images: the same sample changes, for what the images add.
Each time is run_bench.py's (Board.timed), from the rerun request the change sends until the page has received the
run's last message and its main thread is done drawing, here extended to the moment every image of the new sample is
loaded: the prompt column shows the new sample's text and its 4 images (each <img> complete, naturalWidth > 0, none
left from the previous sample) with their captions, and every image on the page (the group's too) is loaded; that
moment is taken in the page, checked every animation frame (within ~16 ms). Also the server's part (request to the
run's last message) and the CPU seconds of the server and the browser, and, in this process, what the server does per
image on a first view: the board's decode + re-encode. Prints medians over the repeats of each repeat's median.

    python bench/image_sample_change.py              # 3 repeats
    python bench/image_sample_change.py --repeats 5
"""

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw
from playwright.sync_api import sync_playwright

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))
from bench.run_bench import FRAME_SEEN, QUIET_MS, Board, browser_pids, child_pids, cpu_seconds, cpu_since  # noqa: E402

STEPS, PROMPTS, GENERATIONS, IMAGES, SIZE = 3, 8, 2, 4, (640, 480)
FIRST_VIEWS = [2, 4, 6, 8, 10]  # samples of prompts 1-5 of the step shown, the latest (two completions a prompt); sample 0 is shown at load
CACHED_VIEWS = [0, 2, 4, 6, 8]  # each shown before, and none the sample just before it
TARGET = 0.2
PLACEHOLDERS = 64

# The prompt column of the samples pair: its text and its images (src, loaded, caption); null before it is drawn.
PROMPT_COLUMN = """(() => {
  const label = [...document.querySelectorAll('[data-testid="stMarkdownContainer"] p')].find(p => p.textContent.trim() === 'Prompt');
  const column = label && label.closest('[data-testid="stColumn"]');
  if (!column) return null;
  return {
    text: [...column.querySelectorAll('[data-testid="stText"]')].map(text => text.textContent).join('\\n'),
    images: [...column.querySelectorAll('[data-testid="stImageContainer"]')].map(element => {
      const img = element.querySelector('img'), caption = element.querySelector('[data-testid="stImageCaption"]');
      return {src: img ? img.src : '', loaded: !!img && img.complete && img.naturalWidth > 0, caption: caption ? caption.textContent.trim() : ''};
    }),
  };
})()"""


def drawn_image(seed: int) -> Image.Image:
    """A 640 x 480 picture of its own: a gradient, shapes and a little noise (so it compresses as a photo-like PNG)."""
    rng = np.random.default_rng(seed)
    width, height = SIZE
    y, x = np.mgrid[0:height, 0:width]
    start, end = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
    mix = (x / width * 0.7 + y / height * 0.3)[..., None]
    pixels = start * (1 - mix) + end * mix + rng.normal(0, 6, (height, width, 3))
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(12):
        x0, y0 = rng.integers(0, width - 40), rng.integers(0, height - 40)
        box = [x0, y0, x0 + rng.integers(20, 200), y0 + rng.integers(20, 150)]
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=colour)
    draw.text((10, 10), f"image {seed}", fill=(255, 255, 255))
    return image


def write_runs(root: Path) -> tuple[Path, Path]:
    """root/images: STEPS x PROMPTS prompts of IMAGES distinct images each, GENERATIONS completions a prompt; root/text:
    the same lines without images."""
    with_images, text_only = root / "images", root / "text"
    (with_images / "images").mkdir(parents=True)
    text_only.mkdir()
    rng = np.random.default_rng(0)
    lines = []
    for step in range(1, STEPS + 1):
        for prompt in range(PROMPTS):
            images = []
            for number in range(IMAGES):
                seed = ((step - 1) * PROMPTS + prompt) * IMAGES + number
                name = f"images/{seed:04d}.png"
                drawn_image(seed).save(with_images / name)
                images.append({"path": name, "width": SIZE[0], "height": SIZE[1]})
            text = "<|im_start|>user\n" + ("<|vision_start|>" + "<|image_pad|>" * PLACEHOLDERS + "<|vision_end|>") * IMAGES
            text += f"What differs between these pictures? ({step}.{prompt})<|im_end|>\n<|im_start|>assistant\n"
            for _ in range(GENERATIONS):
                tokens = ["The", " second", " one", " has", " more", " circles", "."]
                logprobs = rng.normal(-1, 0.3, len(tokens)).tolist()
                lines.append({
                    "prompt": text, "response": "".join(tokens), "response_tokens": tokens, "logprobs": logprobs,
                    "ref_logprobs": (np.array(logprobs) + rng.normal(0, 0.1, len(tokens))).tolist(),
                    "reward": float(rng.random()), "group_id": f"{step}-{prompt}", "step": step, "images": images,
                })
    for run, keep in ((with_images, True), (text_only, False)):
        with open(run / "rollout_data_rank_0.jsonl", "w") as file:
            file.writelines(json.dumps(line if keep else {k: v for k, v in line.items() if k != "images"}) + "\n" for line in lines)
    return with_images, text_only


def marker(sample: int) -> str:
    return f"? ({STEPS}.{sample // GENERATIONS})"  # the prompt text of the sample at the step shown: a run opens at its latest


PAGE_IMAGES = "[...document.querySelectorAll('[data-testid=\"stImage\"] img')]"


# The page shows `sample` (None: any): the prompt column has its text and, with images, its IMAGES images captioned in
# order, and every image on the page (the prompt's and the group's, 2 x IMAGES) is loaded and none is one the page
# showed before the change (`previous`).
def shown_condition(sample: int | None, images: bool, previous: list[str]) -> str:
    condition = "true" if sample is None else f"column.text.includes({json.dumps(marker(sample))})"
    if images:
        captions = [f"image {number} · {SIZE[0]} × {SIZE[1]}" for number in range(1, IMAGES + 1)]
        condition += (
            f" && column.images.length === {IMAGES} && {json.dumps(captions)}.every((caption, index) => column.images[index].caption === caption)"
            f" && {PAGE_IMAGES}.length === {2 * IMAGES}"
            f" && {PAGE_IMAGES}.every(img => img.complete && img.naturalWidth > 0 && !{json.dumps(previous)}.includes(img.src))"
        )
    return f"(() => {{ const column = {PROMPT_COLUMN}; return column !== null && {condition}; }})()"


class ImageBoard(Board):
    """Board, with an action timed until a page-side condition first held (the images loaded) as well as drawn."""

    def timed_until(self, action, condition: str) -> float:
        server_before = cpu_seconds([self.server.pid, *child_pids(self.server.pid)])
        browser_before = cpu_seconds(browser_pids())
        armed = self.page.evaluate("() => performance.now()")
        action()
        # The first frame at which `condition` held after the request, kept in the page; then drawn and quiet, as in
        # run_bench.py's done_condition.
        self.page.wait_for_function(f"""() => {{
            const bench = window.__bench, sent = bench.firstSentAfter({armed});
            if (!(sent > 0) || bench.received <= sent) return false;
            if (document.querySelector('[data-testid="stApp"]').dataset.testScriptState !== 'notRunning') return false;
            if (!(bench.shown > sent)) {{
                if (!({condition})) return false;
                bench.shown = performance.now();
            }}
            return {FRAME_SEEN} && performance.now() - Math.max(bench.busy, bench.received, bench.shown) > {QUIET_MS};
        }}""", timeout=120_000, polling="raf")
        sent, received, busy, shown = self.page.evaluate(
            f"() => [window.__bench.firstSentAfter({armed}), window.__bench.received, window.__bench.busy, window.__bench.shown]")
        self.server_seconds = (received - sent) / 1000
        self.after_server = (shown - received) / 1000  # images fetched, decoded, laid out after the run's last message
        self.server_cpu = cpu_since(server_before, [self.server.pid, *child_pids(self.server.pid)])
        self.browser_cpu = cpu_since(browser_before, browser_pids())
        return (max(busy, received, shown) - sent) / 1000

    def page_images(self) -> list[str]:
        return self.page.evaluate(f"() => {PAGE_IMAGES}.map(img => img.src)")

    def open_run(self, name: str, images: bool):
        self.page.get_by_label("Choose Log Name").click()
        self.page.get_by_role("option", name=name, exact=True).click()
        label = f"Step Index({STEPS} total steps)"
        loaded = (f"[...document.querySelectorAll('[data-testid=\"stWidgetLabel\"]')].some(label => label.textContent.includes({json.dumps(label)}))"
                  f" && {shown_condition(None, images, [])}")
        return self.timed_until(lambda: self.page.get_by_role("button", name="Load & View").click(), loaded)

    def show_sample(self, sample: int, images: bool) -> float:
        previous = self.page_images()
        field = self.page.get_by_label("Sample index in current step batch")
        assert int(field.input_value()) != sample, "no change, no rerun"
        field.fill(str(sample))
        return self.timed_until(lambda: field.press("Enter"), shown_condition(sample, images, previous))


ROWS = {  # row name: target
    "sample change, first view (s)": TARGET,
    "sample change, cached view (s)": TARGET,
    "sample change, run without images (s)": None,
    "first view, server part (s)": None,
    "cached view, server part (s)": None,
    "without images, server part (s)": None,
    "first view, images loaded after the run's last message (s)": None,
    "cached view, images loaded after the run's last message (s)": None,
    "first view, CPU: server (s)": None,
    "first view, CPU: browser (s)": None,
    "cached view, CPU: server (s)": None,
    "cached view, CPU: browser (s)": None,
    "without images, CPU: server (s)": None,
    "without images, CPU: browser (s)": None,
}


def measure(root: Path, repeats: int) -> dict[str, list[float]]:
    rows: dict[str, list[float]] = {name: [] for name in ROWS}
    with sync_playwright() as playwright:
        for repeat in range(repeats):
            board = ImageBoard(root, root / f".cache-{repeat}", playwright)  # a new server: the image cache is empty
            try:
                board.show_page()
                for run, images, views in (("images", True, [("first view", FIRST_VIEWS), ("cached view", CACHED_VIEWS)]),
                                           ("text", False, [("without images", FIRST_VIEWS)])):
                    board.open_run(run, images)
                    shown = int(board.page.get_by_label("Sample index in current step batch").input_value())
                    if shown == views[0][1][0]:  # the board kept the previous run's sample: start from another
                        board.show_sample(1, images)
                    for name, samples in views:
                        totals, server, after, server_cpu, browser_cpu = [], [], [], [], []
                        for sample in samples:
                            totals.append(board.show_sample(sample, images))
                            server.append(board.server_seconds)
                            after.append(board.after_server)
                            server_cpu.append(board.server_cpu)
                            browser_cpu.append(board.browser_cpu)
                        row = "sample change, run without images (s)" if name == "without images" else f"sample change, {name} (s)"
                        rows[row].append(statistics.median(totals))
                        rows[f"{name}, server part (s)"].append(statistics.median(server))
                        if images:
                            rows[f"{name}, images loaded after the run's last message (s)"].append(statistics.median(after))
                        rows[f"{name}, CPU: server (s)"].append(statistics.median(server_cpu))
                        rows[f"{name}, CPU: browser (s)"].append(statistics.median(browser_cpu))
                        print(f"repeat {repeat + 1}: {name}: " + ", ".join(f"{t:.3f}" for t in totals) + " s", file=sys.stderr, flush=True)
            finally:
                board.close()
    return rows


# What the server does per image on a first view, in this process: the board's decode + re-encode (the samples pair
# and the group view show the same bytes). Streamlit sends them as they are.
def server_image_costs(run: Path, repeats: int) -> dict[str, float]:
    from rl_board.reading.images import SHOWN_IMAGE_SIDE, encoded_image

    costs = []
    for path in sorted((run / "images").glob("*.png"))[:IMAGES * repeats]:
        started = time.perf_counter()
        data, _ = encoded_image(str(path), SHOWN_IMAGE_SIDE)
        costs.append(time.perf_counter() - started)
        assert Image.open(io.BytesIO(data)).size == SIZE
    return {"board: decode + re-encode an image (first view only)": statistics.median(costs)}


def print_table(rows: dict[str, list[float]], costs: dict[str, float], repeats: int):
    print(f"\n{STEPS} steps x {PROMPTS} prompts x {GENERATIONS} completions, {IMAGES} distinct {SIZE[0]} x {SIZE[1]} PNGs a prompt; "
          f"median of {repeats} repeats (each the median of {len(FIRST_VIEWS)} changes); {os.cpu_count()} cores")
    print("| measure | median | every repeat | target | met? |\n|---|---|---|---|---|")
    for name, target in ROWS.items():
        values = rows[name]
        if not values:
            continue
        value = statistics.median(values)
        met = "" if target is None else ("yes" if value <= target else "no")
        print(f"| {name} | {value:.3f} | {' / '.join(f'{v:.3f}' for v in values)} | {'' if target is None else f'<= {target:g}'} | {met} |")
    print("\n| server work per image (this process, median) | s | for the 4 images of a sample (s) |\n|---|---|---|")
    for name, seconds in costs.items():
        print(f"| {name} | {seconds:.4f} | {IMAGES * seconds:.3f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="image_sample_change-") as folder:
        root = Path(folder)
        started = time.monotonic()
        run, _ = write_runs(root)
        print(f"wrote the runs in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
        measured = measure(root, options.repeats)
        costs = server_image_costs(run, options.repeats)
    print_table(measured, costs, options.repeats)
