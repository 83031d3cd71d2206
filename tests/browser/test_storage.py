"""The board served by start.sh on an s3:// root (a real S3 server, moto), in a real headless Chromium: the VLM run
loads from S3, its charts draw, the prompt's image is read from S3 and shown, and the step slider brings in another
step's batch. A screenshot goes to tests/artifacts/s3_vlm_run.png."""

import json
import urllib.request
import uuid

import pytest

import rl_logging_board as board
from rl_board.reading.images import SHOWN_IMAGE_SIDE
from rl_board.reading.snapshot import read_step_batch
from rl_board.reading.store import RunStore
from tests.support import ARTIFACTS, PROJECT
from tests.support.browser import CHARTS_DRAWN, browser, served_board  # noqa: F401  (browser: a fixture)
from tests.support.s3_server import make_bucket, s3_server, upload_folder  # noqa: F401  (s3_server: a fixture)

RUN = "grpo_tiny_vlm_example"

# The samples pair's prompt images once each has loaded: their URLs and sizes, in order (null until then).
PROMPT_IMAGES = """() => {
  const label = [...document.querySelectorAll('[data-testid="stMarkdownContainer"] p')].find(p => p.textContent.trim() === 'Prompt');
  const images = label ? [...label.closest('[data-testid="stColumn"]').querySelectorAll('[data-testid="stImage"] img')] : [];
  if (!images.length || !images.every(img => img.complete && img.naturalWidth > 0)) return null;
  return images.map(img => ({src: img.src, naturalWidth: img.naturalWidth}));
}"""


# The board served by start.sh on the bucket's runs, with the S3 server's endpoint and credentials: its URL.
@pytest.fixture(scope="module")
def board_url(s3_server, tmp_path_factory):
    bucket = make_bucket(s3_server.endpoint_url, f"browser-{uuid.uuid4().hex[:12]}")
    upload_folder(s3_server.endpoint_url, PROJECT / "rollout_samples" / RUN, f"s3://{bucket}/runs/{RUN}")
    yield from served_board(f"s3://{bucket}/runs", tmp_path_factory.mktemp("cache"))  # the fixture's credentials and endpoint are in the environment


# The prompt images of a step's first sample, as the page's server re-encodes them from the run on disk (the files
# uploaded to S3).
def expected_images(step: int) -> list[bytes]:
    run = RunStore(str(PROJECT / "rollout_samples" / RUN)).load(128)
    row = read_step_batch("local", run.step_rows(step)).table.iloc[0]
    return [board.page_image(row["path"], reference, SHOWN_IMAGE_SIDE)[0] for reference in row["images"]]


# The prompt images once shown (and, with `other_than`, once the first is not that URL any more): fetched from the server.
def shown_images(page, other_than: str = "") -> list[bytes]:
    condition = f"() => {{ const images = ({PROMPT_IMAGES})(); return images && images[0].src !== {json.dumps(other_than)} && images; }}"
    images = page.wait_for_function(condition, timeout=60_000).json_value()
    return [urllib.request.urlopen(image["src"]).read() for image in images], images[0]["src"]


def test_a_vlm_run_on_s3_draws_shows_its_images_and_follows_the_step_slider(browser, board_url):
    """Load & View on the S3 run: charts drawn, the prompt's image from S3 shown; the slider's last step shows its own."""
    context = browser.new_context(viewport={"width": 1600, "height": 4200})
    page = context.new_page()
    requests = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(board_url)
    page.get_by_role("button", name="Load & View").wait_for(timeout=60_000)  # the first screen shows the chosen run
    page.wait_for_function(CHARTS_DRAWN, timeout=60_000)
    first, first_url = shown_images(page)
    assert first == expected_images(1)
    page.get_by_label("Step Index(100 total steps)").get_by_role("slider").focus()
    page.keyboard.press("End")
    last, _ = shown_images(page, other_than=first_url)
    assert last == expected_images(100) != first
    page.wait_for_function(CHARTS_DRAWN, timeout=60_000)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "s3_vlm_run.png"), full_page=True)
    assert [url for url in requests if not url.startswith((board_url, "data:", "blob:"))] == []
    assert page.locator('[data-testid="stException"], [data-testid="stAlertContentError"]').count() == 0
    context.close()
