"""Runs written for the board's image and tool-token tests: a vision-language run whose lines name good and hostile
image files, and a tool-use run whose lines flag the tokens a tool wrote (tool_mask 0, null values there)."""

import json
import os
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

PLACEHOLDERS = 64  # <|image_pad|> tokens per image in the prompts, as a Qwen2-VL processor writes them


def png_header_only(path: Path, width: int, height: int):
    """A PNG whose header claims width x height (a decompression bomb when large) and whose data is cut short."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b""))


def draw_images(images: Path) -> dict[str, tuple[int, int]]:
    """Good images (a wide PNG, a JPEG photo, a transparent PNG) and hostile files; their sizes by name."""
    images.mkdir(parents=True)
    sizes = {"wide.png": (1200, 500), "photo.jpg": (320, 240), "clear.png": (90, 90)}
    for name, size in sizes.items():
        mode = "RGBA" if name == "clear.png" else "RGB"
        image = Image.new(mode, size, (30, 120, 200, 0) if mode == "RGBA" else (30, 120, 200))
        ImageDraw.Draw(image).ellipse([size[0] // 4, size[1] // 4, size[0] // 2, size[1] // 2], fill=(240, 200, 40, 255))
        image.save(images / name, quality=90)
    (images / "evil.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>alert(2)</script></svg>')
    (images / "page.png").write_text("<html><script>alert(3)</script></html>")  # HTML named .png
    good = (images / "wide.png").read_bytes()
    (images / "corrupt.png").write_bytes(good[: len(good) // 2])
    png_header_only(images / "bomb.png", 20_000, 20_000)
    outside = images.parent.parent / "outside.png"
    Image.new("RGB", (8, 8), (255, 0, 0)).save(outside)
    os.symlink(outside, images / "link.png")
    return sizes


HOSTILE_PATHS = {
    "../outside.png": "'..' leads out",
    "/etc/passwd": "absolute",
    "images/link.png": "symbolic link",
    "images/evil.svg": "not a PNG",
    "images/page.png": "not a PNG",
    "images/corrupt.png": "corrupt",
    "images/bomb.png": "decompression-bomb",
    "images/missing.png": "missing",
    "https://example.com/cat.png": "a URL",
}


def write_vision_run(run_dir: Path, steps: int = 2, generations: int = 2) -> list[dict]:
    """A GRPO run of VLM lines, three prompts a step: one names a wide PNG, one a JPEG and a transparent PNG, one every
    hostile path; returns the lines."""
    sizes = draw_images(run_dir / "images")
    prompts = [
        [("images/wide.png", "wide.png")],
        [("images/photo.jpg", "photo.jpg"), ("images/clear.png", "clear.png")],
        [(path, None) for path in HOSTILE_PATHS],
    ]
    rng = np.random.default_rng(0)
    lines = []
    for step in range(1, steps + 1):
        for prompt, chosen in enumerate(prompts):
            text = "<|im_start|>user\n" + "".join("<|vision_start|>" + "<|image_pad|>" * PLACEHOLDERS + "<|vision_end|>" for _ in chosen)
            text += f"What colour is the circle? ({step}.{prompt})<|im_end|>\n<|im_start|>assistant\n"
            images = [{"path": path, "width": sizes[name][0], "height": sizes[name][1]} if name else {"path": path} for path, name in chosen]
            for generation in range(generations):
                tokens = ["The", " circle", " is", " yellow", "."]
                logprobs = rng.normal(-1, 0.3, len(tokens)).tolist()
                lines.append({
                    "prompt": text, "response": "".join(tokens), "response_tokens": tokens, "logprobs": logprobs,
                    "ref_logprobs": (np.array(logprobs) + rng.normal(0, 0.1, len(tokens))).tolist(),
                    "reward": float(rng.random()), "group_id": f"{step}-{prompt}", "step": step, "images": images,
                })
    with open(run_dir / "rollout_data_rank_0.jsonl", "w") as file:
        file.writelines(json.dumps(line) + "\n" for line in lines)
    return lines


QUESTION = "<|vision_start|><|image_pad|><|vision_end|>What is in this picture?"


def picture(run_dir: Path, name: str, colour: tuple[int, int, int]) -> str:
    """A small PNG in the run's images folder; its path as a line names it."""
    (run_dir / "images").mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), colour).save(run_dir / "images" / name)
    return f"images/{name}"


def question_line(step: int, reward: float, images=None, prompt: str = QUESTION) -> dict:
    return {"prompt": prompt, "response": f"{reward} at {step}", "reward": reward, "step": step, **({} if images is None else {"images": images})}


def write_one_question_runs(shown: Path, compared: Path) -> dict[str, list[dict]]:
    """Two VLM runs whose lines ask one question of different pictures: in the shown run a red and a blue one, both
    in order and reversed, none (absent, and an empty list) and another question; in the compared run the red one
    under the same path, a copy of its file under another path, the blue one and none. The lines by run."""
    red, blue = picture(shown, "red.png", (255, 0, 0)), picture(shown, "blue.png", (0, 0, 255))
    picture(compared, "red.png", (255, 0, 0))
    red_copy = picture(compared, "red_copy.png", (255, 0, 0))
    lines = {
        shown.name: [
            question_line(1, 0.1, [{"path": red, "width": 8, "height": 8}]), question_line(1, 0.2, [{"path": blue, "width": 8, "height": 8}]),
            question_line(2, 0.3, [red]), question_line(2, 0.4, [blue]), question_line(2, 0.5, [red, blue]), question_line(2, 0.6, [blue, red]),
            question_line(3, 0.7), question_line(3, 0.8, []), question_line(3, 0.9, [red]), question_line(3, 1.0, [red], prompt="Another question"),
        ],
        compared.name: [question_line(2, 0.15, [red]), question_line(3, 0.25, [red_copy]), question_line(4, 0.35, [blue]), question_line(4, 0.45)],
    }
    for run_dir in (shown, compared):
        with open(run_dir / "rollout_data_rank_0.jsonl", "w") as file:
            file.writelines(json.dumps(line) + "\n" for line in lines[run_dir.name])
    return lines


def write_tool_run(run_dir: Path, steps: int = 2, samples: int = 4) -> list[dict]:
    """A run whose responses call a tool: the tool's result tokens have tool_mask 0 and null per-token values (as the
    logger writes them), except one line of another writer that left values there, which the board must ignore."""
    run_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    lines = []
    for step in range(1, steps + 1):
        for sample in range(samples):
            tokens = ["<tool_call>", '{"name": "add"}', "</tool_call>", "<tool_response>", "4", "2", "</tool_response>", "Answer", ":", " 42"]
            mask = [1, 1, 1, 0, 0, 0, 0, 1, 1, 1]
            logprobs = rng.normal(-1, 0.5, len(tokens))
            ref_logprobs = logprobs + rng.normal(0, 0.2, len(tokens))
            keep_values = step == steps and sample == samples - 1  # another writer's line: values on tool tokens too
            line = {
                "prompt": f"What is 40 + 2? ({step}.{sample})", "response": "".join(tokens), "response_tokens": tokens,
                "logprobs": [value if flag or keep_values else None for value, flag in zip(logprobs.tolist(), mask)],
                "ref_logprobs": [value if flag or keep_values else None for value, flag in zip(ref_logprobs.tolist(), mask)],
                "entropies": [abs(value) if flag or keep_values else None for value, flag in zip(rng.normal(1, 0.2, len(tokens)).tolist(), mask)],
                "tool_mask": mask, "reward": float(sample % 2), "group_id": f"{step}", "step": step, "micro_batch": 0,
            }
            lines.append(line)
    with open(run_dir / "rollout_data_rank_0.jsonl", "w") as file:
        file.writelines(json.dumps(line) + "\n" for line in lines)
    return lines
