"""Images beside the prompt and tokens a tool wrote, in a real headless Chromium served by start.sh: the prompt's images
are decoded <img> elements the server re-encoded (Streamlit media URLs), the batch table draws thumbnails on its
canvas, nothing of a hostile file reaches the page, and a tool's tokens are drawn dashed and uncoloured.

Screenshots of each page go to /tmp/vision_shots/ (RL_LOGGING_BOARD_SHOTS overrides it)."""

import base64
import io
import os
import re
import shutil
from pathlib import Path

import pytest
from PIL import Image
from playwright.sync_api import sync_playwright
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from rl_board.reading.images import THUMBNAIL_SIDE
from tests.conftest import PROJECT
from tests.support.browser import CHROMIUM, served_board
from tests.support.vision_tool_runs import HOSTILE_PATHS, write_tool_run, write_vision_run

SHOTS = Path(os.environ.get("RL_LOGGING_BOARD_SHOTS", "/tmp/vision_shots"))
HOSTILE_SAMPLE = 4  # step 1's samples: 0-1 the wide PNG, 2-3 a JPEG and a transparent PNG, 4-5 every hostile path
TOOL_TOKENS = ["<tool_response>", "4", "2", "</tool_response>"]  # tool_mask 0 in every line of write_tool_run
FILE_CONTENTS = ["alert(1)", "alert(2)", "alert(3)", 'onload="alert']  # what evil.svg and page.png hold

# The run has been drawn: the script is done.
SETTLED = "document.querySelector('[data-testid=\"stApp\"]').dataset.testScriptState === 'notRunning'"

# The samples pair's prompt column as the page shows it: its text, its images (each <img> with its load state and
# caption) and its notes on images not shown (a line each, without the invisible spaces that break autolinks); null
# before it is drawn.
PROMPT_COLUMN = """() => {
  const label = [...document.querySelectorAll('[data-testid="stMarkdownContainer"] p')].find(p => p.textContent.trim() === 'Prompt');
  const column = label && label.closest('[data-testid="stColumn"]');
  if (!column) return null;
  return {
    text: [...column.querySelectorAll('[data-testid="stText"]')].map(text => text.innerText).join('\\n'),
    images: [...column.querySelectorAll('[data-testid="stImageContainer"]')].map(element => {
      const img = element.querySelector('img'), caption = element.querySelector('[data-testid="stImageCaption"]');
      return {src: img ? img.src : null, complete: !!img && img.complete, naturalWidth: img ? img.naturalWidth : 0,
              naturalHeight: img ? img.naturalHeight : 0, width: img ? img.width : 0, caption: caption ? caption.innerText.trim() : null};
    }),
    notes: [...column.querySelectorAll('[data-testid="stCaptionContainer"]')].map(caption => caption.innerText.trim())
      .filter(caption => caption.startsWith('🖼️')).flatMap(caption => caption.replace(/\\u200b/g, '').split('\\n').slice(1).filter(Boolean)),
  };
}"""

# The batch table as Streamlit's grid exposes it: the header names and each row's cell texts of its accessible table
# (the grid itself is drawn on a canvas), and per row the pixels of the canvas close to the thumbnails' blue.
BATCH_TABLE = """() => {
  const table = document.querySelector('.st-key-batch_table table');
  const canvas = document.querySelector('.st-key-batch_table [data-testid="data-grid-canvas"]');
  if (!table || !canvas) return null;
  const header = [...table.querySelectorAll('th')].map(cell => cell.textContent);
  const rows = [...table.querySelectorAll('tbody tr')].map(row => [...row.querySelectorAll('td')].map(cell => cell.textContent));
  const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  const scale = canvas.width / canvas.getBoundingClientRect().width, rowHeight = 35 * scale;  // header and rows: 35 px
  const blue = rows.map((_, row) => {
    let count = 0;
    for (let y = Math.round((row + 1) * rowHeight + 3); y < Math.round((row + 2) * rowHeight - 3); y++)
      for (let x = 0; x < canvas.width; x++) {
        const i = 4 * (y * canvas.width + x);
        if (Math.abs(pixels[i] - 30) < 40 && Math.abs(pixels[i + 1] - 120) < 40 && Math.abs(pixels[i + 2] - 200) < 40) count++;
      }
    return count;
  });
  return {header, rows, blue};
}"""

# Each token span of the running text with its computed style.
RUNNING_TEXT = """() => [...document.querySelectorAll('.st-key-token_view_shown .rl-running-text > span')].map(span => {
  const style = getComputedStyle(span);
  return {text: span.textContent, outline: style.outlineStyle, background: style.backgroundColor, colour: style.color, fontStyle: style.fontStyle};
})"""


@pytest.fixture(scope="module")
def board_url(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    write_vision_run(root / "vlm")  # the last run of the root: the one Load & View opens
    write_tool_run(root / "tools")
    shutil.copytree(PROJECT / "rollout_samples" / "grpo_tiny_vlm_example", root / "bundled_vlm")
    yield from served_board(root)


@pytest.fixture(scope="module")
def chromium():
    assert Path(CHROMIUM).exists(), "install Chromium: apt-get install -y chromium (tests/run.sh does)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield browser
        browser.close()


# A new browser context (nothing shared with another test) and a page on the board with `run` loaded, recording the
# requests it makes, the media it gets (URL, content type) and any dialog a script opened.
@pytest.fixture
def open_run(chromium, board_url):
    contexts = []

    def opened(run: str, shown: str):
        context = chromium.new_context(viewport={"width": 1600, "height": 3000})
        contexts.append(context)
        page = context.new_page()
        page.requests, page.media, page.dialogs = [], [], []
        page.on("request", lambda request: page.requests.append(request.url))
        page.on("response", lambda response: page.media.append((response.url, response.headers.get("content-type"))) if response.url.startswith(board_url + "/media/") else None)
        page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
        finished = []  # the page's runs the server finished, of the whole script (not a fragment's, such as a timer's)
        page.on("websocket", lambda socket: socket.on("framereceived", lambda frame: finished.append(frame) if full_run_finished(frame) else None))

        # An action, and the wait for the script run it causes to finish: till then the page drawn before, settled,
        # passes for the new one on a busy machine.
        def rerun_by(action):
            before = len(finished)
            action()
            for _ in range(600):
                if len(finished) > before:
                    return
                page.wait_for_timeout(100)
            pytest.fail("no script run finished after the action")

        page.goto(board_url)
        if run != "vlm":  # the first screen shows vlm, the root's last run
            page.wait_for_function(f"() => ({SETTLED}) && ({shown})", timeout=60_000)
            page.get_by_label("Choose Log Name").click(timeout=60_000)
            rerun_by(lambda: page.get_by_role("option", name=run, exact=True).click())
            rerun_by(lambda: page.get_by_role("button", name="Load & View").click(timeout=60_000))
        page.wait_for_function(f"() => ({SETTLED}) && ({shown})", timeout=60_000)
        return page

    yield opened
    for context in contexts:
        context.close()


# The prompt column once `condition` (JavaScript over `column`) holds and the rerun has finished.
def full_run_finished(frame) -> bool:
    if not isinstance(frame, bytes):
        return False
    message = ForwardMsg.FromString(frame)
    return message.WhichOneof("type") == "script_finished" and message.script_finished == ForwardMsg.FINISHED_SUCCESSFULLY


def wait_for_prompt(page, condition: str) -> dict:
    page.wait_for_function(f"() => {{ const column = ({PROMPT_COLUMN})(); return ({SETTLED}) && column !== null && ({condition}); }}", timeout=60_000)
    return page.evaluate(f"({PROMPT_COLUMN})()")


IMAGES_LOADED = "column.images.length > 0 && column.images.every(image => image.complete && image.naturalWidth > 0)"


def show_sample(page, index: int, condition: str) -> dict:
    field = page.get_by_label("Sample index in current step batch")
    field.fill(str(index))
    field.press("Enter")
    return wait_for_prompt(page, condition)


def decoded_data_url(url: str) -> Image.Image:
    prefix, data = url.split(",", 1)
    assert prefix in ("data:image/jpeg;base64", "data:image/png;base64"), prefix
    image = Image.open(io.BytesIO(base64.b64decode(data)))
    image.load()
    return image


def assert_nothing_of_the_files_reached_the_page(page, board_url):
    html = page.content()
    assert not [content for content in FILE_CONTENTS if content in html]
    assert page.dialogs == []
    assert page.locator("svg script, svg[onload], [onload], iframe, object, embed").count() == 0
    scripts = page.evaluate("() => [...document.scripts].map(script => [script.src, script.textContent])")
    assert all(src.startswith(board_url + "/static/") or (not src and "alert" not in text) for src, text in scripts), scripts
    sources = page.evaluate("() => [...document.querySelectorAll('img')].map(img => img.currentSrc || img.src)")
    assert not [src for src in sources if "svg" in src or "images/" in src or src.startswith("file:")], sources
    assert page.media and all(kind in ("image/jpeg", "image/png") for _, kind in page.media), page.media
    outside = [url for url in page.requests if not url.startswith((board_url, "data:", "blob:"))]
    assert outside == []


def test_prompt_images_are_media_the_server_reencoded_and_the_batch_table_draws_thumbnails(open_run, board_url):
    page = open_run("vlm", "document.querySelector('.st-key-batch_table [data-testid=\"data-grid-canvas\"]')")
    column = wait_for_prompt(page, f"column.text.includes('(1.0)') && {IMAGES_LOADED}")
    [wide] = column["images"]
    assert wide["caption"] == "image 1 · 1200 × 500"
    assert re.fullmatch(re.escape(board_url) + r"/media/[0-9a-f]+\.jpg", wide["src"]), wide["src"]  # not a file path, nor SVG
    assert wide["width"] == 150 and wide["naturalWidth"] >= 150  # decoded, as sharp as it is shown
    assert wide["naturalHeight"] / wide["naturalWidth"] == pytest.approx(500 / 1200, abs=0.02)
    # Every image on the page (the group's, under it, too) is a decoded media image.
    page_images = "[...document.querySelectorAll('[data-testid=\"stImage\"] img')]"
    page.wait_for_function(f"() => {page_images}.length === 2 && {page_images}.every(img => img.complete && img.naturalWidth > 0)", timeout=30_000)
    sources = page.evaluate(f"() => {page_images}.map(img => img.src)")
    assert all(src.startswith(board_url + "/media/") for src in sources), sources

    # The batch table: an "image" column right of "sample", a re-encoded thumbnail as a data URL in each row whose
    # image can be shown, none in the hostile rows, and the thumbnails drawn on the grid's canvas in those rows.
    page.wait_for_function(f"() => {{ const table = ({BATCH_TABLE})(); return table && table.blue.slice(0, 4).every(count => count > 100); }}", timeout=30_000)
    table = page.evaluate(f"({BATCH_TABLE})()")
    assert table["header"][:2] == ["sample", "image"]
    thumbnails = [row[table["header"].index("image")] for row in table["rows"]]
    assert len(thumbnails) == 6 and thumbnails[HOSTILE_SAMPLE:] == ["", ""], [t[:40] for t in thumbnails]
    for url in thumbnails[:HOSTILE_SAMPLE]:
        thumbnail = decoded_data_url(url)
        assert max(thumbnail.size) == THUMBNAIL_SIDE
    assert table["blue"][HOSTILE_SAMPLE:] == [0, 0], table["blue"]
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "vlm_sample_0.png"), full_page=True)
    page.locator(".st-key-batch_table").screenshot(path=str(SHOTS / "vlm_batch_table.png"))

    # Two images, a JPEG and a transparent PNG (kept a PNG), each captioned with its size.
    column = show_sample(page, 2, f"column.text.includes('(1.1)') && column.images.length === 2 && {IMAGES_LOADED}")
    assert [image["caption"] for image in column["images"]] == ["image 1 · 320 × 240", "image 2 · 90 × 90"]
    assert column["images"][0]["src"].endswith(".jpg") and column["images"][1]["src"].endswith(".png")
    photo, clear = column["images"]
    assert photo["naturalHeight"] / photo["naturalWidth"] == pytest.approx(240 / 320, abs=0.02) and (clear["naturalWidth"], clear["naturalHeight"]) == (90, 90)
    assert column["notes"] == []
    page.screenshot(path=str(SHOTS / "vlm_sample_2.png"), full_page=True)
    assert_nothing_of_the_files_reached_the_page(page, board_url)


def test_the_sample_naming_every_hostile_path_notes_each_and_the_page_still_works(open_run, board_url):
    page = open_run("vlm", "document.querySelector('.st-key-token_view_shown [data-testid=\"stDataFrame\"] canvas')")
    wait_for_prompt(page, IMAGES_LOADED)
    column = show_sample(page, HOSTILE_SAMPLE, f"column.text.includes('(1.2)') && column.notes.length === {len(HOSTILE_PATHS)}")
    assert column["images"] == []
    for number, (note, (path, reason)) in enumerate(zip(column["notes"], HOSTILE_PATHS.items()), 1):
        assert note.startswith(f"image {number}: {path}: ") and reason in note, (note, path)
    # The rest of the page as usual: the response, the token area, the group's completions, no error.
    page.locator('.st-key-token_view_shown [data-testid="data-grid-canvas"]').wait_for(timeout=20_000)
    assert page.get_by_text("Group 2 of this step", exact=False).is_visible()
    assert page.locator('[data-testid="stException"]').count() == 0
    assert page.locator('[data-testid="stImage"]').count() == 0  # the group's images are left out too (the notes say why)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "vlm_hostile_sample.png"), full_page=True)
    assert_nothing_of_the_files_reached_the_page(page, board_url)
    # The page still answers: back to a sample with an image.
    show_sample(page, 0, f"column.text.includes('(1.0)') && {IMAGES_LOADED}")


def test_an_image_path_that_is_a_url_is_no_link_in_its_note(open_run):
    page = open_run("vlm", "document.querySelector('.st-key-token_view_shown [data-testid=\"stDataFrame\"] canvas')")
    show_sample(page, HOSTILE_SAMPLE, f"column.notes.length === {len(HOSTILE_PATHS)}")
    links = page.evaluate("() => [...document.querySelectorAll('a[href]')].map(a => a.href).filter(href => !href.startsWith(location.origin))")
    assert links == []


# Streamlit resizes an image given st.image(width=150) to 150 pixels on the server, and its fullscreen view shows that
# same 150-pixel image: the 768-pixel re-encode (board.SHOWN_IMAGE_SIDE) never reaches the page.
def test_the_fullscreen_view_of_a_prompt_image_shows_it_large(open_run):
    page = open_run("vlm", "document.querySelector('.st-key-token_view_shown [data-testid=\"stDataFrame\"] canvas')")
    wait_for_prompt(page, f"column.text.includes('(1.0)') && {IMAGES_LOADED}")
    frame = page.locator('[data-testid="stFullScreenFrame"]').filter(has=page.locator('[data-testid="stImage"]')).first
    frame.hover()
    frame.get_by_role("button", name="Fullscreen: image 1 · 1200 × 500").click()
    frame.get_by_role("button", name="Close fullscreen: image 1 · 1200 × 500").wait_for(timeout=10_000)
    page.wait_for_function("() => document.querySelector('[data-testid=\"stFullScreenFrame\"]:has([data-testid=\"stImage\"])').getBoundingClientRect().width >= innerWidth - 1")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "vlm_fullscreen.png"))
    # The image fills the view, as large as it fits with its proportions kept (object-fit: contain), whatever its size.
    box, fit = frame.locator("img").evaluate("img => [img.getBoundingClientRect(), getComputedStyle(img).objectFit]")
    viewport = page.viewport_size
    assert fit == "contain" and box["width"] >= 0.9 * viewport["width"] and box["height"] >= 0.8 * viewport["height"], (box, fit)


def test_tool_tokens_are_drawn_dashed_and_uncoloured_and_ticked_in_the_token_table(open_run):
    page = open_run("tools", "document.querySelector('.st-key-token_view_shown [data-testid=\"stDataFrame\"] canvas')"
                             " && document.body.innerText.includes('Step Index(2 total steps)')")
    # The token table (the open view): a "tool" column, ticked on the tool's tokens.
    header = "[...document.querySelectorAll('.st-key-token_view_shown th')].map(cell => cell.textContent)"
    page.wait_for_function(f"() => {header}.includes('tool')", timeout=30_000)  # the grid's accessible table comes after its canvas
    ticks = page.evaluate(f"() => {{ const column = {header}.indexOf('tool'); return [...document.querySelectorAll('.st-key-token_view_shown tbody tr')].map(row => row.querySelectorAll('td')[column].textContent); }}")
    assert ticks == ["false"] * 3 + ["true"] * 4 + ["false"] * 3, ticks

    page.locator(".st-key-token_view").get_by_role("radio", name="Response tokens").click()
    views = page.locator(".st-key-token_view_shown")
    page.wait_for_function(f"() => ({SETTLED}) && ({RUNNING_TEXT})().length === 10", timeout=30_000)
    spans = page.evaluate(f"({RUNNING_TEXT})()")
    tool = [span for span in spans if span["outline"] == "dashed"]
    assert [span["text"] for span in tool] == TOOL_TOKENS
    for span in tool:
        assert span["background"] == "rgba(0, 0, 0, 0)" and span["fontStyle"] == "italic" and span["colour"] == "rgb(138, 138, 153)", span
    for span in spans:
        if span not in tool:  # coloured by kl (red above 0, blue below), however faint
            assert span["outline"] == "none" and re.match(r"rgba?\((220, 60, 60|60, 110, 230)", span["background"]), span
    assert views.locator("span[style*='dashed']").count() == len(TOOL_TOKENS) + 1  # and the legend's sample
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "tools_running_text.png"), full_page=True)
    views.locator(".rl-running-text").screenshot(path=str(SHOTS / "tools_running_text_detail.png"))


def test_the_bundled_vlm_run_shows_each_prompt_image(open_run, board_url):
    page = open_run("bundled_vlm", "document.querySelector('.st-key-token_view_shown [data-testid=\"stDataFrame\"] canvas')")
    column = wait_for_prompt(page, IMAGES_LOADED)
    assert "[<image> × 16]" in column["text"] and "<image><image>" not in column["text"]
    [image] = column["images"]
    assert image["src"].startswith(board_url + "/media/") and image["caption"].startswith("image 1 · ")
