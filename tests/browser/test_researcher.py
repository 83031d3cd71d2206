"""A researcher's task in a real headless Chromium: find the highest-KL sample of the last step and read its tokens.

One click in the batch table must show that sample right under the table, its tokens readable as text (byte-level
BPE tokens decoded, a character cut at truncation shown as its bytes), and the group of its prompt below its tokens.
"""


import numpy as np
import pytest
from playwright.sync_api import sync_playwright

from tests.support import ARTIFACTS
from tests.support.browser import CHROMIUM, served_board
from tests.support.runs import sample, write_lines

LAST_STEP = 3
HIGHEST_KL = 5  # the sample of the last step whose tokens left the reference furthest
# 你好 in byte-level BPE (GPT-2, Llama 3, Qwen): each byte a printable character; the last token a cut character.
BYTE_LEVEL_TOKENS = ["ä½", "ł", "å¥½", "Ġworld", "Ċ", "Ġ3", "Ã"]


def lines_of_step(step: int) -> list[dict]:
    rng = np.random.default_rng(step)
    lines = []
    for index in range(8):
        shift = 2.0 if (step, index) == (LAST_STEP, HIGHEST_KL) else 0.1 * rng.random()
        logprobs = (-rng.random(len(BYTE_LEVEL_TOKENS))).tolist()
        lines.append(sample(
            step,
            reward=float(index % 4),
            prompt=f"prompt {index // 4} of step {step}",
            response=f"response {index} of step {step}",
            response_tokens=BYTE_LEVEL_TOKENS,
            logprobs=logprobs,
            ref_logprobs=[value - shift for value in logprobs],
            entropies=rng.random(len(BYTE_LEVEL_TOKENS)).tolist(),
            advantage=float(index % 4) - 1.5,
            group_id=f"20261124T000000Z-{step}-{index // 4}",
            rewards_per_func={"correct": float(index % 4)},
        ))
    return lines


@pytest.fixture(scope="module")
def board_url(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    write_lines(root / "grpo_run" / "rollout_data_rank_0.jsonl", [line for step in range(LAST_STEP + 1) for line in lines_of_step(step)])
    yield from served_board(root)


def test_from_the_batch_table_to_the_tokens_of_the_highest_kl_sample_in_one_click(board_url):
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1600, "height": 1000})  # a laptop's screen: what is in view matters
        page.goto(board_url)
        page.get_by_role("button", name="Load & View").wait_for(timeout=60_000)  # the first screen shows the chosen run
        slider = page.get_by_label(f"Step Index({LAST_STEP + 1} total steps)").get_by_role("slider")
        slider.focus(timeout=60_000)
        page.keyboard.press("End")  # the last step
        page.locator('[data-testid="stText"]').filter(has_text=f"response 0 of step {LAST_STEP}").first.wait_for(timeout=30_000)
        grid = page.locator('.st-key-batch_table [data-testid="stDataFrame"]')
        grid.scroll_into_view_if_needed()
        page.wait_for_timeout(1000)
        box = grid.bounding_box()
        page.mouse.click(box["x"] + 18, box["y"] + 35 * (HIGHEST_KL + 1) + 17)  # the selection box of its row

        # The sample is shown right under the table: the pair and the token table are the next things on the page.
        response = page.locator('[data-testid="stText"]').filter(has_text=f"response {HIGHEST_KL} of step {LAST_STEP}").first
        response.wait_for(timeout=30_000)
        assert page.get_by_label("Sample index in current step batch").input_value() == str(HIGHEST_KL)
        table_bottom = box["y"] + box["height"]
        assert 0 < response.bounding_box()["y"] - table_bottom < 400
        token_table = page.locator('.st-key-token_view_shown [data-testid="stDataFrame"]')
        token_table.wait_for(timeout=30_000)
        assert 0 < token_table.bounding_box()["y"] - table_bottom < 700

        # Its tokens read as text: 你好 from byte-level tokens, spaces and newlines as such, the cut character as bytes.
        page.locator(".st-key-token_view").get_by_role("radio", name="Response tokens").click()
        running_text = page.locator(".rl-running-text").first
        running_text.wait_for(timeout=30_000)
        text = running_text.inner_text()
        assert "你好" in text and " world" in text and "⟨0xC3⟩" in text and "Ġ" not in text and "ä½" not in text

        # Its group follows it: the prompt's other completions, each one click from the samples pair.
        heading = page.get_by_text(f"Group 1 of this step: 4 completion(s) of the prompt of sample #{HIGHEST_KL}.")
        heading.wait_for(timeout=30_000)
        for other in (4, 6, 7):
            assert page.get_by_role("button", name=f"#{other}", exact=True).is_visible()
        page.get_by_role("button", name="#7", exact=True).click()
        page.get_by_text("Group 1 of this step: 4 completion(s) of the prompt of sample #7.").wait_for(timeout=30_000)
        assert page.get_by_label("Sample index in current step batch").input_value() == "7"
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "researcher_path.png"), full_page=True)
        browser.close()
