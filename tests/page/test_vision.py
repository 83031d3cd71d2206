"""Images beside the prompt and tokens a tool wrote: what the board reads of them, what it refuses, and what the page
shows (AppTest)."""

import base64
import io
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import rl_logging_board as board
from rl_board.figures import TOOL_TOKEN_STYLE
from rl_board.metrics import token_rows, trl_kl_by_step
from rl_board.reading.images import SHOWN_IMAGE_SIDE, THUMBNAIL_SIDE, image_check
from rl_board.reading.lines import image_references
from rl_board.reading.snapshot import SampleTokens
from rl_board.reading.store import RunStore
from rl_board.text import clean_text
from tests.support.page import batch_table, load_and_view, open_token_view, running_text, start, widget
from tests.support.vision_tool_runs import (
    HOSTILE_PATHS,
    PLACEHOLDERS,
    png_header_only,
    write_tool_run,
    write_vision_run,
)

OPENED: list[str] | None = None  # while a list, every file Python opens is added to it (an audit hook stays for good)


def record_opened_files(event, arguments):
    if OPENED is not None and event == "open" and isinstance(arguments[0], (str, bytes, os.PathLike)):
        OPENED.append(os.path.realpath(os.fsdecode(arguments[0])))


sys.addaudithook(record_opened_files)


@pytest.fixture
def vision_root(tmp_path):
    root = tmp_path / "runs"
    lines = write_vision_run(root / "vlm")
    return root, lines


def decoded(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def test_hostile_image_paths_are_refused_without_reading_anything_outside_the_run(vision_root):
    global OPENED
    root, _ = vision_root
    line_file = str(root / "vlm" / "rollout_data_rank_0.jsonl")
    OPENED = []
    try:
        answers = {path: board.page_image(line_file, {"path": path}, SHOWN_IMAGE_SIDE) for path in HOSTILE_PATHS}
    finally:
        opened, OPENED = OPENED, None
    for path, reason in HOSTILE_PATHS.items():
        assert isinstance(answers[path], str) and reason in answers[path], (path, answers[path])
    run_folder = os.path.realpath(root / "vlm")
    python = tuple(os.path.realpath(prefix) for prefix in {sys.prefix, sys.base_prefix})  # Pillow's plugins importing
    data_files = [path for path in opened if not path.startswith(python)]
    assert data_files and all(Path(path).is_relative_to(run_folder) for path in data_files), data_files
    assert not any(path.endswith(("outside.png", "passwd")) for path in opened)


def test_images_are_decoded_and_reencoded_no_larger_than_shown(vision_root):
    root, _ = vision_root
    line_file = str(root / "vlm" / "rollout_data_rank_0.jsonl")
    wide, mime = board.page_image(line_file, {"path": "images/wide.png"}, SHOWN_IMAGE_SIDE)
    assert mime == "image/jpeg" and decoded(wide).size == (768, 320)  # 1200 x 500 down to a longest side of 768
    clear, mime = board.page_image(line_file, {"path": "images/clear.png"}, SHOWN_IMAGE_SIDE)
    assert mime == "image/png" and decoded(clear).mode == "RGBA" and decoded(clear).size == (90, 90)
    thumbnail, _ = board.page_image(line_file, {"path": "./images/photo.jpg"}, THUMBNAIL_SIDE)
    assert max(decoded(thumbnail).size) == THUMBNAIL_SIDE
    pixel = decoded(board.page_image(line_file, {"path": "images/photo.jpg"}, 768)[0]).getpixel((2, 2))
    assert np.allclose(pixel, (30, 120, 200), atol=6)  # the image's own colours, not a placeholder


# A small PNG of 9,450 × 9,450 passed Pillow's bomb bound (89 megapixels) and took 270 MB and 0.75 s to decode, each
# time shown: an image over 40 megapixels is refused from its header; an 8K frame (33 megapixels) is not.
def test_an_image_over_40_megapixels_is_refused_from_its_header(tmp_path):
    png_header_only(tmp_path / "big.png", 9450, 9450)
    problem = image_check(str(tmp_path / "big.png"), 1, 1)
    assert problem and "9450 × 9450 pixels: over the decompression-bomb limit of 40,000,000" in problem
    png_header_only(tmp_path / "8k.png", 7680, 4320)  # cut short: corrupt, but not refused for its size
    assert "over the decompression-bomb limit" not in (image_check(str(tmp_path / "8k.png"), 1, 1) or "")


def test_image_references_take_the_loggers_dicts_bare_paths_and_junk():
    assert image_references([{"path": "images/a.png", "width": 10, "height": 20}]) == [{"path": "images/a.png", "width": 10, "height": 20}]
    assert image_references("images/b.jpg") == [{"path": "images/b.jpg", "width": None, "height": None}]
    assert image_references([3, {"path": ["x"], "width": "10"}]) == [{"path": None, "width": None, "height": None}] * 2


def test_the_page_shows_images_thumbnails_and_counts_those_it_cannot_show(vision_root, monkeypatch):
    root, lines = vision_root
    app = start(root, monkeypatch)
    widget(app.sidebar.selectbox, "Choose Log Name").set_value("vlm")
    app = load_and_view(app)
    [warning] = [w.value for w in app.warning if "Loaded" in w.value]
    assert f"{len(HOSTILE_PATHS)} image(s) cannot be shown" in warning
    app.session_state[board.StateKey.LOAD_REPORT_DETAILS] = True
    app.run()
    _, problems = (frame.value for frame in widget(app.expander, "Load report").dataframe)
    rows = problems[problems["kind"] == "image"]
    assert len(rows) == len(HOSTILE_PATHS)
    for path, reason in HOSTILE_PATHS.items():
        [row] = [text for text in rows["reason"] if text.startswith(repr(path))]
        assert reason in row and "4 line(s) name it" in row  # the hostile prompt's 2 completions at each of 2 steps

    # Sample 0: the wide PNG beside the prompt, its original size in the caption, the placeholders as one marker.
    images = app.get("image")
    pair = images[0].proto.imgs
    assert [image.caption for image in pair] == ["image 1 · 1200 × 500"]
    prompt = next(text.value for text in app.text if "What colour" in text.value)
    assert f"<|vision_start|>[<|image_pad|> × {PLACEHOLDERS}]<|vision_end|>" in prompt and "<|image_pad|><|image_pad|>" not in prompt
    table = batch_table(app)
    assert list(table.columns[:2]) == ["sample", "image"]
    step_lines = [line for line in lines if line["step"] == 1]
    for url, line in zip(table["image"], step_lines):
        if line["images"][0]["path"] in HOSTILE_PATHS:
            assert not isinstance(url, str)  # no thumbnail for an image that cannot be shown
            continue
        prefix, data = url.split(",", 1)
        assert prefix == "data:image/jpeg;base64" and max(decoded(base64.b64decode(data)).size) <= THUMBNAIL_SIDE

    # The sample naming every hostile path: a note for each, the rest of the page as usual.
    app.session_state[board.StateKey.SAMPLE_INDEX] = 4
    app.run()
    assert not app.exception
    [notes] = [caption.value for caption in app.caption if caption.value.startswith("🖼️")]
    assert notes.startswith(f"🖼️ {len(HOSTILE_PATHS)} image(s) not shown:") and len(notes.split("  \n")) == 1 + len(HOSTILE_PATHS)
    assert not any(element.proto.imgs for element in app.get("image"))
    assert any(frame.value.index.name == "token" for frame in app.dataframe)  # the token area is there


def test_a_run_of_image_placeholders_is_one_marker_in_text_and_in_the_token_rows():
    text = "<|vision_start|>" + "<|image_pad|>" * 1024 + "<|vision_end|>Describe. <image><image> and <img>"
    assert clean_text(text) == "<|vision_start|>[<|image_pad|> × 1024]<|vision_end|>Describe. [<image> × 2] and <img>"
    names = ["Look", ":", *["<image>"] * 16, "done", "<image>"]
    count = len(names)
    tokens = SampleTokens(
        response_tokens=names, logprobs=np.full(count, -1.0), ref_logprobs=np.full(count, -1.5), entropies=None,
        values=None, token_rewards=None, advantage=None, notes=[], tool=np.array([False, False] + [True] * 16 + [False, False]),
    )
    rows = token_rows(tokens, "k1", None)
    assert rows.tokens == ["Look", ":", "<image> × 16", "done", "<image>"]
    assert rows.positions.tolist() == [0, 1, 2, 18, 19] and rows.is_tool.tolist() == [False, False, True, False, False]
    # A tool's tokens have no value of any kind, not even the sample's advantage.
    assert np.isnan(rows.values["kl"][2]) and rows.values["kl"][[0, 1, 3, 4]].tolist() == pytest.approx([0.5] * 4)
    tokens.advantage = 0.25
    assert np.isnan(token_rows(tokens, "k1", None).values["advantage"]).tolist() == [False, False, True, False, False]
    # A name that only looks like a placeholder's start costs linear time (no backtracking over a long run).
    hostile = "<" + "image" * 20_000
    assert clean_text(hostile) == hostile


def test_a_truncated_jpeg_is_counted_at_load_and_a_line_names_at_most_16_images(tmp_path):
    run = tmp_path / "run"
    (run / "images").mkdir(parents=True)
    Image.new("RGB", (640, 480), (200, 30, 30)).save(run / "images" / "photo.jpg", quality=90)
    data = (run / "images" / "photo.jpg").read_bytes()
    (run / "images" / "cut.jpg").write_bytes(data[: len(data) // 2])
    line = {"prompt": "p", "response": "r", "reward": 1.0, "step": 1, "images": ["images/photo.jpg"] * 19 + ["images/cut.jpg"]}
    (run / "data.jsonl").write_text(json.dumps(line) + "\n" + json.dumps({**line, "images": ["images/cut.jpg"]}) + "\n")
    snapshot = RunStore(str(run)).load(max_samples=100)
    assert json.loads(snapshot.samples["image_paths"][0]) == ["images/photo.jpg"] * 16  # the images a page shows
    [problem] = snapshot.problems[snapshot.problems["kind"] == "image"]["reason"].tolist()
    assert problem.startswith("'images/cut.jpg': corrupt") and snapshot.image_problems == 1


def test_tool_tokens_have_no_values_and_no_part_in_any_statistic(tmp_path):
    lines = write_tool_run(tmp_path / "tools")
    store = RunStore(str(tmp_path / "tools"))
    samples = store.load(max_samples=1000).samples
    assert samples["tool_tokens"].tolist() == [4.0] * len(lines)
    for (_, sample), line in zip(samples.iterrows(), lines):
        sampled = np.array(line["tool_mask"]) == 1
        log_ratio = np.array(line["logprobs"], dtype=float)[sampled] - np.array(line["ref_logprobs"], dtype=float)[sampled]
        assert sample["avg_kl_k3"] == pytest.approx(np.mean(np.expm1(-log_ratio) + log_ratio), rel=1e-12)
        assert sample["sum_kl_k3"] == pytest.approx(np.sum(np.expm1(-log_ratio) + log_ratio), rel=1e-12)
        assert sample["avg_log_ratio"] == pytest.approx(log_ratio.mean(), rel=1e-12)
        assert sample["avg_entropy"] == pytest.approx(np.array(line["entropies"], dtype=float)[sampled].mean(), rel=1e-12)
    for step, kl in trl_kl_by_step(samples).items():
        tokens = [
            np.expm1(-(r := np.array(line["logprobs"], dtype=float) - np.array(line["ref_logprobs"], dtype=float))) + r
            for line in lines if line["step"] == step
        ]
        sampled = [np.array(line["tool_mask"]) == 1 for line in lines if line["step"] == step]
        assert kl == pytest.approx(np.concatenate([t[m] for t, m in zip(tokens, sampled)]).mean(), rel=1e-12)


def test_a_tool_mask_that_is_not_zeros_and_ones_is_noted_and_ignored(tmp_path):
    run = tmp_path / "odd"
    run.mkdir()
    base = {"prompt": "p", "response": "ab", "response_tokens": ["a", "b"], "logprobs": [-1.0, -2.0], "ref_logprobs": [-1.5, -2.0], "reward": 1.0, "step": 1}
    odd = [{**base, "tool_mask": mask} for mask in ([1, 2], "01", [[1], [0]], [1, 0, 1], [0], None)]
    (run / "data.jsonl").write_text("".join(json.dumps(line) + "\n" for line in odd))
    snapshot = RunStore(str(run)).load(max_samples=1000)
    assert len(snapshot.samples) == len(odd)
    reasons = snapshot.problems["reason"].tolist()
    assert sum("tool_mask is not a list of 0 and 1" in reason for reason in reasons) == 3
    assert any("tool_mask has 3 entries, log-probs 2: the first 2 are used" in reason for reason in reasons)
    assert any("tool_mask has 1 entries, log-probs 2: the rest are taken as sampled" in reason for reason in reasons)
    assert snapshot.samples["avg_log_ratio"].tolist() == pytest.approx([0.25, 0.25, 0.25, 0.5, 0.0, 0.25])  # ignored x3, a tool token x2, none


def test_the_token_area_marks_tool_tokens_and_colours_only_sampled_ones(tmp_path, monkeypatch):
    write_tool_run(tmp_path / "runs" / "tools")
    app = start(tmp_path / "runs", monkeypatch)
    app = load_and_view(app)
    header = next(m.value for m in app.markdown if "Response" in m.value and "reward" in m.value)
    assert "4 of 10 tokens written by a tool" in header
    assert batch_table(app)["tool_tokens"].tolist() == [4.0] * 4
    grid = next(frame.value for frame in app.dataframe if frame.value.index.name == "token")
    assert grid["tool"].tolist() == [False] * 3 + [True] * 4 + [False] * 3
    assert grid.loc[grid["tool"], "kl"].isna().all() and grid.loc[~grid["tool"], "kl"].notna().all()
    page = running_text(open_token_view(app, "Response tokens"))
    assert page.count(TOOL_TOKEN_STYLE) == 4 + 1  # the four tool tokens and the legend
    assert "written by a tool, not sampled: no values" in page


def test_the_bundled_vlm_run_opens_with_each_prompts_image(monkeypatch):
    app = load_and_view(start(board.DEFAULT_ROOT, monkeypatch))  # preselected: the last bundled run by name
    assert widget(app.sidebar.selectbox, "Choose Log Name").value == "grpo_tiny_vlm_example"
    assert not [w.value for w in app.warning if "image" in w.value]  # every image of the run can be shown
    [caption] = [image.caption for image in app.get("image")[0].proto.imgs]
    assert caption.startswith("image 1 · ")
    prompt = next(text.value for text in app.text if "What colour" in text.value)
    assert "[<image> × 16]" in prompt
    assert batch_table(app)["image"].str.startswith("data:image/").all()
