"""The rollout logger on vision-language and tool-calling rollouts: image files and entries, exact log-probs of a
tiny LLaVA-style model under the same pixels, reward functions' `log_extra` columns and `log_metric` metrics, and
(without a model that calls tools) the tool mask; the image example run and its bundled run."""

import io
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy
import pytest
import torch
import trl
from datasets import Dataset
from PIL import Image
from transformers import LlavaForConditionalGeneration, LlavaProcessor
from trl import GRPOTrainer
from trl.data_utils import prepare_multimodal_messages

import rl_board
import rollout_logger.callback
import rollout_logger.images
import rollout_logger.writer
from examples.train_grpo_tiny_vlm import COLOURS, build_trainer, image_pool, save_tiny_vlm
from rollout_logger import RolloutLoggerCallback
from rollout_logger.images import ImageFiles, content_hash
from rollout_logger.writer import JsonlWriter, json_line
from tests.support import PROJECT
from tests.support.logger_runs import GenerationRecorder, Rescorer, make_trainer, max_difference, read_records

BUNDLED = PROJECT / "rollout_samples" / "grpo_tiny_vlm_example"
IMAGE_PATH = re.compile(r"images/[0-9a-f]{32}\.(png|jpg)")
TOKENS_PER_IMAGE = 16  # the tiny model's 56 x 56 pixels in 14-pixel patches
HAS_LOG_EXTRA = hasattr(GRPOTrainer, "_log_completion_extra")
needs_log_extra = pytest.mark.skipif(not HAS_LOG_EXTRA, reason="this TRL passes reward functions no log_extra")
POOL = image_pool(24, seed=0)
# Pool images by what they test: the sizes cycle (56, 120, 300, 1000 px wide), every fifth is a JPEG.
BIG_PNG, BIG_JPEG, SMALL_JPEG, SMALL_PNG = 3, 19, 4, 1


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory):
    return save_tiny_vlm(tmp_path_factory.mktemp("vlm") / "model", warmup_steps=40, seed=0)


def pool_dataset(rows: list[list[int]], column: str):
    """One conversational prompt per row with an image placeholder per pool image of the row, in an `image` column
    (one image a row) or an `images` column."""
    data = {
        "prompt": [
            [
                {
                    "role": "user",
                    "content": [{"type": "image"}] * len(row) + [{"type": "text", "text": "What colour is the shape?"}],
                }
            ]
            for row in rows
        ],
        "colour": [POOL[row[0]][1] for row in rows],
    }
    images = [[POOL[index][0] for index in row] for row in rows]
    data[column] = [row[0] for row in images] if column == "image" else images
    return Dataset.from_dict(data)


def run_vlm(vlm_dir, output_dir, dataset, reward_funcs=None, **settings):
    """A logged GRPO run of the tiny VLM on `dataset`, each row once: (trainer, recorder, records, run folder)."""
    steps = len(dataset) // 2  # 2 prompts x 4 completions a step (a generation batch of 8)
    settings = {"per_device_train_batch_size": 8, **settings}
    trainer = build_trainer(
        vlm_dir, output_dir, steps, learning_rate=1e-2, dataset=dataset, reward_funcs=reward_funcs, **settings
    )
    generations = GenerationRecorder(trainer)
    callback = RolloutLoggerCallback(trainer, enabled=True, save_dir=output_dir / "rollouts", exp_name="vlm")
    trainer.add_callback(callback)
    trainer.train()
    [records] = read_records(callback.run_dir).values()
    return trainer, generations, records, callback.run_dir


def decoded_images(dataset, column: str) -> dict[str, Image.Image]:
    """Content hash -> image, as the trainer received them from the dataset (a JPEG is decoded again from its bytes)."""
    images = [image for row in dataset[column] for image in (row if column == "images" else [row])]
    return {content_hash(image): image for image in images}


def assert_image_entries(records, run_dir, originals: dict[str, Image.Image]):
    """Each line's images: paths to files in the run folder named by content hash, `.jpg` for a JPEG, at most 768 px
    and otherwise the original size; every file in the folder is referenced; 16 image tokens per image."""
    referenced = set()
    for record in records:
        assert record["prompt"].count("<image>") == TOKENS_PER_IMAGE * len(record["images"]) > 0
        for entry in record["images"]:
            assert IMAGE_PATH.fullmatch(entry["path"]) and set(entry) == {"path", "width", "height"}
            original = originals[Path(entry["path"]).stem]
            assert (entry["width"], entry["height"]) == original.size
            assert entry["path"].endswith(".jpg") == (original.format == "JPEG")
            referenced.add(entry["path"])
    assert sorted(f"images/{path.name}" for path in (run_dir / "images").iterdir()) == sorted(referenced)
    for path in referenced:
        original = originals[Path(path).stem]
        with Image.open(run_dir / path) as written:
            if max(original.size) <= 768:
                assert written.size == original.size
                if path.endswith(".png"):  # lossless: the very pixels the model saw
                    assert content_hash(written.convert(original.mode)) == Path(path).stem
            else:
                scale = 768 / max(original.size)
                assert max(written.size) == 768
                assert written.size == pytest.approx([side * scale for side in original.size], abs=1)


def assert_exact_with_pixels(trainer, generations, records, vlm_dir, originals):
    """Log-probs, reference log-probs and entropies of every line equal a fresh forward pass of the generating
    weights over the prompt and completion, with pixel values the processor makes of the original images."""
    processor = LlavaProcessor.from_pretrained(vlm_dir)
    rescorer = Rescorer(
        trainer.temperature, LlavaForConditionalGeneration.from_pretrained(vlm_dir), processor.tokenizer
    )
    differences = []
    for record in records:
        images = [originals[Path(entry["path"]).stem] for entry in record["images"]]
        pixels = processor.image_processor(images=images, return_tensors="pt")["pixel_values"]
        logprobs, entropies = rescorer.logprobs_and_entropies(
            generations.weights[record["step"]], record, pixel_values=pixels
        )
        reference = rescorer.logprobs(rescorer.initial_weights, record, pixel_values=pixels)
        differences += [
            max_difference(record["logprobs"], logprobs),
            max_difference(record["entropies"], entropies),
            max_difference(record["ref_logprobs"], reference),
        ]
    assert max(differences) < 1e-5


# ---------------------------------------------------------------- an image column


@pytest.fixture(scope="module")
def image_column_run(vlm_dir, tmp_path_factory):
    """Two steps on four prompts with one image each: a large PNG and a large JPEG (both downscaled), a small JPEG and
    a small PNG; beta > 0, two loss passes a step (the pixels split between them), the example's reward functions
    (with `log_extra` and `log_metric` where TRL has them)."""
    dataset = pool_dataset([[BIG_PNG], [BIG_JPEG], [SMALL_JPEG], [SMALL_PNG]], "image")
    trainer, generations, records, run_dir = run_vlm(
        vlm_dir,
        tmp_path_factory.mktemp("image_column"),
        dataset,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
    )
    return dict(
        trainer=trainer,
        generations=generations,
        records=records,
        run_dir=run_dir,
        originals=decoded_images(dataset, "image"),
    )


def test_image_column_lines_and_files(image_column_run):
    records, run_dir, originals = (image_column_run[key] for key in ("records", "run_dir", "originals"))
    assert len(records) == 16 and {record["step"] for record in records} == {1, 2}
    assert all(len(record["images"]) == 1 for record in records)
    assert_image_entries(records, run_dir, originals)
    sizes = {(entry["width"], entry["height"]) for record in records for entry in record["images"]}
    assert sizes == {POOL[index][0].size for index in (BIG_PNG, BIG_JPEG, SMALL_JPEG, SMALL_PNG)}
    suffixes = sorted(path.suffix for path in (run_dir / "images").iterdir())
    assert suffixes == [".jpg", ".jpg", ".png", ".png"]  # one file per distinct image, though 4 lines share each
    assert all(
        list(record)[:3] == ["prompt", "images", "response"] and "tool_mask" not in record for record in records
    )


def test_image_column_logprobs_are_exact(image_column_run, vlm_dir):
    run = image_column_run
    assert {record["micro_batch"] for record in run["records"]} == {0, 1}
    assert_exact_with_pixels(run["trainer"], run["generations"], run["records"], vlm_dir, run["originals"])
    # Each step generated with new weights, so the comparison tells the generating weights from the others.
    first, second = (run["generations"].weights[step] for step in (1, 2))
    assert any(not torch.equal(first[name], second[name]) for name in first)


@needs_log_extra
def test_log_extra_columns_are_keys_of_the_lines(image_column_run):
    """The example's reward functions log the expected colour and the shape's share of the image per sample."""
    records = image_column_run["records"]
    for record in records:
        assert list(record)[-2:] == ["expected_colour", "shape_share"]
        assert record["expected_colour"] in COLOURS and 0 < record["shape_share"] < 1
    by_image = {}
    for record in records:
        by_image.setdefault(record["images"][0]["path"], set()).add(record["expected_colour"])
    assert all(len(colours) == 1 for colours in by_image.values())


@needs_log_extra
def test_log_metric_reaches_the_metrics_file(image_column_run):
    """`log_metric("colour_accuracy", ...)` is in each training step's metrics line, as in the trainer's history."""
    [path] = image_column_run["run_dir"].glob("rollout_metrics_*.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    logged = {line["step"]: line["colour_accuracy"] for line in lines if line["kind"] == "train" and "loss" in line}
    history = image_column_run["trainer"].state.log_history
    assert logged == {entry["step"]: entry["colour_accuracy"] for entry in history if "colour_accuracy" in entry}
    assert sorted(logged) == [1, 2]
    for step, accuracy in logged.items():  # the mean of the step's samples' colour_named scores
        scores = [r["rewards_per_func"]["colour_named"] for r in image_column_run["records"] if r["step"] == step]
        assert accuracy == pytest.approx(sum(scores) / len(scores))


# ---------------------------------------------------------------- an images column, log_extra's edge cases


def colour_with_extras(completions, colour, log_extra=None, **kwargs):
    """Scores the colour, and logs a column named like a logger key, a column with one value for the whole batch and
    NumPy values."""
    answers = [completion[-1]["content"].split()[:1] for completion in completions]
    scores = [float(answer == [expected]) for answer, expected in zip(answers, colour)]
    if log_extra is not None:
        log_extra("reward", [10 * score for score in scores])
        log_extra("first_only", [numpy.float32(0.5)])
        log_extra("pair", [numpy.arange(2)] * len(scores))
    return scores


@pytest.fixture(scope="module")
def images_column_run(vlm_dir, tmp_path_factory):
    """One step on two prompts with two images each (one image in both prompts)."""
    dataset = pool_dataset([[BIG_PNG, SMALL_PNG], [BIG_JPEG, BIG_PNG]], "images")
    try:
        trainer, generations, records, run_dir = run_vlm(
            vlm_dir, tmp_path_factory.mktemp("images_column"), dataset, reward_funcs=[colour_with_extras]
        )
    except ValueError as error:  # TRL 0.29 gives a LLaVA model all the batch's pixels for each sample
        if "Image features and image tokens do not match" not in str(error):
            raise
        pytest.skip(f"TRL {trl.__version__} cannot train a LLaVA model on several images per prompt")
    return dict(
        trainer=trainer,
        generations=generations,
        records=records,
        run_dir=run_dir,
        originals=decoded_images(dataset, "images"),
    )


def test_images_column_lines_list_the_images_in_prompt_order(images_column_run, vlm_dir):
    run = images_column_run
    records, originals = run["records"], run["originals"]
    assert len(records) == 8
    sizes = {tuple((entry["width"], entry["height"]) for entry in record["images"]) for record in records}
    assert sizes == {
        (POOL[BIG_PNG][0].size, POOL[SMALL_PNG][0].size),
        (POOL[BIG_JPEG][0].size, POOL[BIG_PNG][0].size),
    }
    assert_image_entries(records, run["run_dir"], originals)
    assert len(list((run["run_dir"] / "images").iterdir())) == 3
    assert_exact_with_pixels(run["trainer"], run["generations"], records, vlm_dir, originals)


@needs_log_extra
def test_log_extra_edge_cases(images_column_run):
    """A column named like a logger key gets the prefix `extra_`; a short column is null for the samples it lacks;
    NumPy values are plain JSON."""
    records = images_column_run["records"]
    for record in records:
        assert record["extra_reward"] == 10 * record["rewards_per_func"]["colour_with_extras"]
        assert record["reward"] == record["rewards_per_func"]["colour_with_extras"]
        assert record["pair"] == [0, 1]
    assert sorted(record["first_only"] is None for record in records) == [False] + [True] * 7  # the first sample's
    assert {record["first_only"] for record in records} == {0.5, None}


# ---------------------------------------------------------------- which images, in which order (no training)


RED, GREEN, BLUE = (Image.new("RGB", (4, 4), colour) for colour in ("red", "green", "blue"))
QUESTION = {"type": "text", "text": "What colour?"}


def test_prompt_images_in_the_order_the_prompt_shows_them():
    prompt_images = rollout_logger.callback._prompt_images
    inputs = [
        {  # image parts already in the prompt, no column image
            "prompt": [
                {
                    "role": "user",
                    "content": [{"type": "image", "image": RED}, QUESTION, {"type": "image", "image": BLUE}],
                }
            ],
            "images": None,
        },
        {  # column images fill the placeholders in order
            "prompt": [
                {"role": "system", "content": "Answer in one word."},
                {"role": "user", "content": [{"type": "image"}, QUESTION, {"type": "image"}]},
            ],
            "images": [BLUE, GREEN],
        },
        {"prompt": [{"role": "user", "content": "What colour?"}], "images": [GREEN, BLUE]},  # placed before the text
        {"prompt": [{"role": "user", "content": "No image."}], "images": []},
    ]
    assert prompt_images(inputs, 4) == [[RED, BLUE], [BLUE, GREEN], [GREEN, BLUE], []]
    assert prompt_images([{"prompt": "a plain prompt", "image": RED}], 1) == [[RED]]
    assert prompt_images([{"prompt": "no images"}], 1) is None
    with pytest.raises(RuntimeError, match="4 samples for 1 dataset rows"):
        prompt_images(inputs[:1], 4)


def test_a_column_image_after_an_image_part_of_the_prompt():
    """Where TRL keeps the image parts a prompt holds and fills only its placeholders (not TRL 0.29)."""
    prompt = [{"role": "user", "content": [{"type": "image", "image": RED}, {"type": "image"}, QUESTION]}]
    try:
        prepare_multimodal_messages(prompt, [GREEN])
    except ValueError:
        pytest.skip(f"TRL {trl.__version__} takes no column image beside an image part of the prompt")
    assert rollout_logger.callback._prompt_images([{"prompt": prompt, "image": GREEN}], 1) == [[RED, GREEN]]


def test_a_pass_through_wrapper_is_read_as_the_class_method():
    """The batch's rows are read by name also through a wrapper taking `*args, **kwargs` (a profiler's, a test's)."""

    class Trainer:
        def _generate_and_score_completions(self, inputs):
            return inputs

    trainer = Trainer()
    trainer._generate_and_score_completions = lambda *args, **kwargs: None
    read = rollout_logger.callback._argument_reader(trainer, "_generate_and_score_completions", "inputs")
    assert read(([1],), {}) == [1] and read((), {"inputs": [2]}) == [2]


# ---------------------------------------------------------------- the image files (no training)


def shapes(size, mode="RGB") -> Image.Image:
    image = Image.new("RGB", size, "white")
    for index in range(0, size[0], 37):
        image.paste((index % 255, 80, 200), (index, index % size[1], index + 20, min(size[1], index % size[1] + 30)))
    return image.convert(mode)


def as_jpeg(image) -> Image.Image:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=95)
    return Image.open(io.BytesIO(buffer.getvalue()))


def test_image_files_each_written_once_downscaled(tmp_path, monkeypatch):
    big, jpeg = shapes((1600, 900)), as_jpeg(shapes((900, 1200)))
    rgba, palette = shapes((50, 40), "RGBA"), shapes((30, 20), "P")
    digest = rollout_logger.images._digest
    hashed = []
    monkeypatch.setattr(rollout_logger.images, "_digest", lambda *args: hashed.append(args) or digest(*args))
    warnings = []
    files = ImageFiles(tmp_path, lambda kind, message: warnings.append(kind))
    records = [
        {"images": [big]},
        {"images": [big.copy()]},  # as a dataset gives each of a prompt's completions its own copy
        {"images": [jpeg, big]},
        {"images": [rgba, palette]},
        {"prompt": "no images"},
    ]
    files.resolve(records)
    # Hashed: each image object once, and not a copy of the image just before it.
    assert len(hashed) == 4 and not warnings
    [(first,), (copy,), (second, again), (third, fourth)] = [record["images"] for record in records[:4]]
    assert first is again is copy
    assert first == {"path": f"images/{content_hash(big)}.png", "width": 1600, "height": 900}
    assert second == {"path": f"images/{content_hash(jpeg)}.jpg", "width": 900, "height": 1200}
    assert records[4] == {"prompt": "no images"}
    expected = {
        first["path"]: (768, 432),
        second["path"]: (576, 768),
        third["path"]: (50, 40),
        fourth["path"]: (30, 20),
    }
    assert sorted(f"images/{path.name}" for path in (tmp_path / "images").iterdir()) == sorted(expected)
    for path, size in expected.items():
        with Image.open(tmp_path / path) as written:
            assert written.size == size
            assert written.format == ("JPEG" if path.endswith(".jpg") else "PNG")
    for image, entry in ((rgba, third), (palette, fourth)):  # lossless, mode and palette kept
        with Image.open(tmp_path / entry["path"]) as written:
            assert written.mode == image.mode and content_hash(written) == content_hash(image)


def test_image_files_are_kept_across_launches_and_ranks(tmp_path):
    """A file already there (an earlier launch, another rank) is not written again; ranks racing on the same images
    each rename a whole file of their own into place, and leave no temporary file."""
    images = [shapes((300 + index, 200)) for index in range(12)]
    first = ImageFiles(tmp_path, lambda kind, message: pytest.fail(message))
    records = [{"images": images[:4]}]
    first.resolve(records)
    written = {path.name: path.stat().st_mtime_ns for path in (tmp_path / "images").iterdir()}
    resumed = ImageFiles(tmp_path, lambda kind, message: pytest.fail(message))
    again = [{"images": images[:4]}]
    resumed.resolve(again)
    assert again == records and {p.name: p.stat().st_mtime_ns for p in (tmp_path / "images").iterdir()} == written

    ranks = [ImageFiles(tmp_path, lambda kind, message: pytest.fail(message)) for _ in range(2)]
    threads = [threading.Thread(target=rank.resolve, args=([{"images": list(images)}],)) for rank in ranks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    names = sorted(path.name for path in (tmp_path / "images").iterdir())
    assert names == sorted(f"{content_hash(image)}.png" for image in images)  # no temporary file left
    for name in names:
        with Image.open(tmp_path / "images" / name) as written:
            written.load()


def test_image_io_error_warns_once_and_lines_go_on(tmp_path, monkeypatch):
    """A failed write leaves neither the file nor its temporary file; from then on no image is written (null
    paths), with one warning."""
    def disk_full(source, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("rollout_logger.images.os.replace", disk_full)
    warnings = []
    files = ImageFiles(tmp_path, lambda kind, message: warnings.append((kind, message)))
    records = [{"images": [shapes((40, 40)), shapes((41, 40))]}]
    files.resolve(records)
    monkeypatch.undo()
    later = [{"images": [shapes((42, 40))]}]
    files.resolve(later)
    assert [entry["path"] for entry in records[0]["images"] + later[0]["images"]] == [None, None, None]
    assert records[0]["images"][1] == {"path": None, "width": 41, "height": 40}
    [(kind, message)] = warnings
    assert kind == "image-io" and "No space left on device" in message
    assert list((tmp_path / "images").iterdir()) == []


def test_an_image_pillow_cannot_encode_loses_only_its_own_file(tmp_path, monkeypatch):
    """An image Pillow fails to encode, or a check of the folder that raises, is one image without its file: the
    others are written, and no image object is left in a line. A 32-bit integer image (which PNG cannot hold as it is)
    is written converted."""
    warnings = []
    files = ImageFiles(tmp_path, lambda kind, message: warnings.append(kind))
    save = Image.Image.save
    monkeypatch.setattr(Image.Image, "save", lambda self, *args, **kwargs: (_ for _ in ()).throw(ValueError("cannot encode")) if self.size == (20, 20) else save(self, *args, **kwargs))
    records = [{"images": [shapes((20, 20)), shapes((30, 20)), Image.new("I", (25, 20))]}]
    files.resolve(records)
    assert [entry["path"] is None for entry in records[0]["images"]] == [True, False, False]
    monkeypatch.setattr(Path, "exists", lambda self: (_ for _ in ()).throw(PermissionError(13, "Permission denied")))
    later = [{"images": [shapes((31, 20))]}]
    files.resolve(later)
    assert later[0]["images"] == [{"path": None, "width": 31, "height": 20}]
    assert warnings == ["image-encode", "image-encode"]


def test_images_that_are_not_pil_images_are_listed_without_a_file(tmp_path):
    warnings = []
    files = ImageFiles(tmp_path, lambda kind, message: warnings.append(kind))
    records = [{"images": ["https://example.com/cat.png", numpy.zeros((2, 2, 3))]}, {"images": ["/data/dog.jpg"]}]
    files.resolve(records)
    assert records[0]["images"] == [
        {"path": None, "width": None, "height": None, "note": "not a PIL image: https://example.com/cat.png"},
        {"path": None, "width": None, "height": None, "note": "not a PIL image (ndarray)"},
    ]
    assert records[1]["images"][0]["note"] == "not a PIL image: /data/dog.jpg"
    assert warnings == ["image-type"] * 3 and not (tmp_path / "images").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own priority is Linux's")
def test_the_writer_thread_yields_to_training(tmp_path):
    """Hashing and encoding images on busy cores take idle time, not training's: the writer thread runs niced."""
    writer = JsonlWriter(tmp_path / "lines.jsonl", lambda kind, message: pytest.fail(message))
    writer.write([{"step": 1}])
    deadline = time.monotonic() + 10
    while not (tmp_path / "lines.jsonl").read_bytes() and time.monotonic() < deadline:  # the thread has started
        time.sleep(0.01)
    expected = min(19, os.getpriority(os.PRIO_PROCESS, 0) + rollout_logger.writer.WRITER_NICENESS)
    assert os.getpriority(os.PRIO_PROCESS, writer._thread.native_id) == expected
    writer.close()


# ---------------------------------------------------------------- tool masks (no model that calls tools)


def test_tool_mask_lines(tmp_path):
    """Given TRL's generation output with a `tool_mask` (1: sampled by the policy, 0: a tool's result): each line has
    the mask over its tokens, even all ones, and null per-token values where a tool wrote; a truncated completion
    TRL masked (its tool mask zeroed too) has neither a mask nor per-token values."""
    trainer = make_trainer(tmp_path, max_completion_length=6)
    callback = RolloutLoggerCallback(trainer, enabled=True, save_dir=tmp_path / "rollouts", exp_name="tools")
    callback.on_train_begin(trainer.args, trainer.state, trainer.control)
    eos = trainer.processing_class.eos_token_id
    sampled = [[5, 6, 7, 8, eos], [5, 6, eos], [5, 6, 7, 8, 9, 10]]
    completion_mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0]])
    tool_mask = torch.tensor([[1, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]])  # padded with 1, as TRL
    prompt_ids = torch.tensor(trainer.processing_class("sort 3 1 2 :")["input_ids"]).repeat(3, 1)
    output = {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones_like(prompt_ids),
        "completion_ids": torch.tensor([ids + [eos] * (6 - len(ids)) for ids in sampled]),
        "completion_mask": completion_mask,
        "advantages": torch.tensor([0.5, -0.5, 0.0]),
        "ref_per_token_logps": -torch.rand(3, 6),
        "tool_mask": tool_mask,
    }
    callback._batch_inputs = [{"prompt": "sort 3 1 2 :"}] * 3
    # what _calculate_rewards saw: the completion ids, the rewards, log_extra columns, and the prompts and completions
    # (texts here: no conversation, so no turns)
    callback._scored = (sampled, torch.tensor([[1.0, 0.5]] * 3), {}, (["sort 3 1 2 :"] * 3, ["a", "b", "c"]))
    callback._start_records(output, 1)
    logps, entropies = (-torch.rand(3, 6)).requires_grad_(), torch.rand(3, 6)
    samples = output[rollout_logger.callback.SAMPLE_KEY].tolist()
    loss_pass = rollout_logger.callback.LossPass(samples, output, 0, logps=logps, entropies=entropies)
    loss = (logps * completion_mask * tool_mask).sum()  # a loss whose gradient is 1 at each sampled token
    callback._finish_pass(loss_pass, loss)
    callback.on_train_end(trainer.args, trainer.state, trainer.control)
    [lines] = read_records(callback.run_dir).values()

    first, second, truncated = lines
    assert first["tool_mask"] == [1, 0, 0, 1, 1] and list(first)[2:4] == ["response_tokens", "tool_mask"]
    per_token = {"logprobs": logps.detach(), "ref_logprobs": output["ref_per_token_logps"], "entropies": entropies}
    for key, values in per_token.items():
        expected = values[0, :5].tolist()
        assert first[key][1:3] == [None, None]
        assert [first[key][i] for i in (0, 3, 4)] == pytest.approx([expected[i] for i in (0, 3, 4)])
        assert second[key] == pytest.approx(values[1, :3].tolist())
    assert second["tool_mask"] == [1, 1, 1]
    [loss_pass] = first["loss_passes"]  # a tool's tokens have no update values either
    assert loss_pass["update_weight"] == [-1.0, None, None, -1.0, -1.0] and loss_pass["clipped"] == [0, None, None, 0, 0]
    assert second["loss_passes"][0]["update_weight"] == [-1.0] * 3
    assert truncated["truncated"] and len(truncated["response_tokens"]) == 6
    assert not {"tool_mask", "logprobs", "ref_logprobs", "entropies"} & set(truncated)
    assert truncated["loss_passes"] == [{"step": 1, "micro_batch": 0}]  # trained, with no per-token values
    assert b"null" in json_line({"logprobs": [float("nan"), None]}) and json_line({"x": [None]}) == b'{"x":[null]}\n'


def test_images_a_tool_returned_are_listed_on_its_turn(tmp_path):
    """A multimodal tool result, as TRL's tool loop (grpo_trainer.py, `_tool_call_loop`, TRL 1.16) puts it into the
    completion: `{"role": "tool", "name": ..., "content": [{"type": "image", "image": <PIL>}, {"type": "text", ...}]}`.
    Its image is written once into the run folder and listed on the tool's turn; the prompt's image (placed by TRL's
    own `prepare_multimodal_messages`) on the prompt's turn, the same entry as the line's `images`; the board lists
    both per turn and reads their files. (A real run needs a vision model that calls tools, and TRL 1.16 fails on
    image results with a text-only one: KeyError 'pixel_values' in `_generate_and_score_completions`.)"""
    trainer = make_trainer(tmp_path, max_completion_length=6)
    trainer.tools = [lambda shape: shapes((300, 200), "RGBA")]  # the run's draw tool: turns are made for a trainer with tools
    callback = RolloutLoggerCallback(trainer, enabled=True, save_dir=tmp_path / "rollouts", exp_name="tool_images")
    callback.on_train_begin(trainer.args, trainer.state, trainer.control)
    eos = trainer.processing_class.eos_token_id
    picture, drawn = shapes((120, 90)), shapes((300, 200), "RGBA")
    question = [{"role": "user", "content": "draw a circle"}]
    completions = [
        [
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "draw", "arguments": {"shape": "circle"}}}]},
            {"role": "tool", "name": "draw", "content": [{"type": "image", "image": drawn}, {"type": "text", "text": "a circle"}]},
            {"role": "assistant", "content": "done"},
        ],
        [{"role": "assistant", "content": "no"}],
    ]
    sampled = [[5, 6, 7, 8, eos], [5, 6, eos]]
    tool_mask = torch.tensor([[1, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    prompt_ids = torch.tensor(trainer.processing_class("draw a circle")["input_ids"]).repeat(2, 1)
    output = {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones_like(prompt_ids),
        "completion_ids": torch.tensor([ids + [eos] * (6 - len(ids)) for ids in sampled]),
        "completion_mask": torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]]),
        "advantages": torch.tensor([0.5, -0.5]),
        "tool_mask": tool_mask,
    }
    callback._batch_inputs = [{"prompt": question, "image": picture}] * 2
    prompts = [prepare_multimodal_messages(question, images=[picture])] * 2
    callback._scored = (sampled, torch.tensor([[1.0], [0.0]]), {}, (prompts, completions))
    callback._start_records(output, 1)
    samples = output[rollout_logger.callback.SAMPLE_KEY].tolist()
    loss_pass = rollout_logger.callback.LossPass(samples, output, 0, logps=(-torch.rand(2, 6)).requires_grad_(), entropies=torch.rand(2, 6))
    callback._finish_pass(loss_pass, loss_pass.logps.sum())
    callback.on_train_end(trainer.args, trainer.state, trainer.control)
    [(first, second)] = read_records(callback.run_dir).values()

    [prompt_entry] = first["images"]
    assert prompt_entry == {"path": f"images/{content_hash(picture)}.png", "width": 120, "height": 90}
    assert [turn["role"] for turn in first["turns"]] == ["user", "assistant", "tool", "assistant"]
    assert first["turns"][0]["images"] == [prompt_entry] and second["turns"][0]["images"] == [prompt_entry]
    tool_turn = first["turns"][2]
    assert tool_turn["text"] == "a circle" and tool_turn["tool_name"] == "draw"
    assert tool_turn["images"] == [{"path": f"images/{content_hash(drawn)}.png", "width": 300, "height": 200}]
    assert (tool_turn["token_start"], tool_turn["token_end"]) == (1, 3)
    assert not any("images" in turn for turn in first["turns"][1::2] + second["turns"][1:])
    with Image.open(callback.run_dir / tool_turn["images"][0]["path"]) as written:
        assert content_hash(written) == content_hash(drawn)  # lossless: an RGBA PNG
    assert sorted(path.name for path in (callback.run_dir / "images").iterdir()) == sorted(
        f"{content_hash(image)}.png" for image in (picture, drawn)
    )

    run = rl_board.open_run(callback.run_dir)
    turns = max((run.turns(1, sample) for sample in range(2)), key=len)
    assert [len(images) for images in turns["images"]] == [1, 0, 1, 0]
    assert turns["images"].iloc[2] == [tool_turn["images"][0]]


# ---------------------------------------------------------------- the example and its bundled run


def test_the_vlm_example_runs_and_logs_its_images(tmp_path):
    environment = {**os.environ, "SAVE_ROLLOUT_DATA": "true", "EXP_NAME": "vlm"}
    command = [sys.executable, str(PROJECT / "examples" / "train_grpo_tiny_vlm.py"), "--output-dir", str(tmp_path)]
    subprocess.run(command + ["--steps", "3", "--warmup-steps", "5"], env=environment, check=True, capture_output=True)
    run_dir = tmp_path / "rollout_samples" / "vlm"
    [records] = read_records(run_dir).values()
    assert len(records) == 48 and {record["step"] for record in records} == {1, 2, 3}
    assert_bundle_like(run_dir, records, extras=HAS_LOG_EXTRA)


def assert_bundle_like(run_dir, records, extras: bool):
    """Every line's images are files of the run folder (and every file is some line's), at most 768 px; the prompt
    holds 16 image tokens per image; with `extras`, the reward functions' extra columns and metric."""
    referenced = set()
    for record in records:
        assert record["prompt"].count("<image>") == TOKENS_PER_IMAGE * len(record["images"]) == TOKENS_PER_IMAGE
        referenced |= {entry["path"] for entry in record["images"]}
        assert len(record["logprobs"]) == len(record["ref_logprobs"]) == len(record["response_tokens"])
        if extras:
            assert record["expected_colour"] in COLOURS and 0 < record["shape_share"] < 1
    assert sorted(f"images/{path.name}" for path in (run_dir / "images").iterdir()) == sorted(referenced)
    for path in referenced:
        with Image.open(run_dir / path) as written:
            assert max(written.size) <= 768
    [metrics] = run_dir.glob("rollout_metrics_*.jsonl")
    train = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert all("colour_accuracy" in line for line in train if "loss" in line) == extras


@pytest.mark.skipif(not BUNDLED.is_dir(), reason="no bundled VLM example run")
def test_bundled_vlm_example_run():
    names = sorted(path.name for path in BUNDLED.iterdir())
    [data] = [name for name in names if name.startswith("rollout_data_")]
    launch_id = re.fullmatch(r"rollout_data_rank_0_(\d{8}T\d{6}Z)\.jsonl", data).group(1)
    assert names == ["images", data, f"rollout_meta_{launch_id}.json", f"rollout_metrics_{launch_id}.jsonl"]
    size = sum(path.stat().st_size for path in BUNDLED.rglob("*") if path.is_file())
    assert size < 5_000_000
    records = [json.loads(line) for line in (BUNDLED / data).read_text().splitlines()]
    meta = json.loads((BUNDLED / f"rollout_meta_{launch_id}.json").read_text())
    assert meta["reward_funcs"] == ["colour_named", "one_colour_word"] and meta["beta"] > 0
    assert sorted({record["step"] for record in records}) == list(range(1, meta["trainer_config"]["max_steps"] + 1))
    assert_bundle_like(BUNDLED, records, extras=True)  # recorded with a TRL that has log_extra and log_metric
    entries = [entry for record in records for entry in record["images"]]
    assert any(entry["path"].endswith(".jpg") for entry in entries)
    assert any(entry["width"] > 768 for entry in entries)  # written downscaled

    import rl_logging_board as board

    run = board.RunStore(str(BUNDLED)).load(10240)
    assert run.problems.empty, run.problems
    assert len(run.samples) == len(records) and run.report["bad lines"].sum() == 0
