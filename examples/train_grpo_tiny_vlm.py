"""A tiny vision-language GRPO run on CPU with rollout logging on: the RL Logging Board's image example.

A LLaVA-style model (a one-layer CLIP vision tower, a two-layer Llama decoder, random weights) and a byte-level BPE
tokenizer trained here learn to name the colour of a shape drawn with PIL ("What colour is the shape?" ->
" red"). A short supervised warm-up teaches the answer format and only a start at the colours (the right one about
40 % likely); then TRL's GRPOTrainer, scored by two reward functions and held near the warm-up model by a KL penalty
(beta > 0), raises that to about 65 % in 100 steps. The images come in several sizes, one of them larger than the
logger's 768 px, and some are JPEGs. The reward functions also log a per-sample diagnostic (`log_extra`) and a
metric (`log_metric`) where TRL has them. Everything runs offline on 2 CPU cores in a few minutes.

    python examples/train_grpo_tiny_vlm.py --output-dir runs/grpo_tiny_vlm --steps 100 --seed 0

Rollouts, their images and the trainer's logged metrics go to <output-dir>/rollout_samples/<EXP_NAME or the output
folder's name>/ (ROLLOUT_SAVE_DIR changes the root); run with SAVE_ROLLOUT_DATA=false for the same training
without them.
"""

import argparse
import io
import os
import random
import sys
from pathlib import Path


os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here needs the Hugging Face Hub
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # `rollout_logger` from this checkout, if not installed

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from PIL import Image, ImageDraw  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import (  # noqa: E402
    CLIPImageProcessorPil,
    CLIPVisionConfig,
    LlamaConfig,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaProcessor,
    PreTrainedTokenizerFast,
    set_seed,
)
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from rollout_logger import RolloutLoggerCallback  # noqa: E402


COLOURS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (230, 200, 40)}
SHAPES = ("circle", "square", "triangle")
# Image sizes, cycled over the images: the last is larger than the logger's 768 px, so its file is downscaled.
SIZES = ((56, 56), (120, 90), (300, 200), (1000, 800))
JPEG_EVERY = 5  # every fifth image is a JPEG (logged as .jpg), the others PNGs
QUESTION = "What colour is the shape?"
IMAGE_TOKEN = "<image>"
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<image>{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# ---------------------------------------------------------------- the task


def draw_shape(colour: str, shape: str, size: tuple[int, int], rng: random.Random) -> Image.Image:
    """A shape of one colour on a light background, covering about a third to two thirds of the shorter side."""
    width, height = size
    image = Image.new("RGB", size, (245, 245, 240))
    side = rng.uniform(0.35, 0.7) * min(size)
    left, top = rng.uniform(0, width - side), rng.uniform(0, height - side)
    box = (left, top, left + side, top + side)
    draw = ImageDraw.Draw(image)
    if shape == "circle":
        draw.ellipse(box, fill=COLOURS[colour])
    elif shape == "square":
        draw.rectangle(box, fill=COLOURS[colour])
    else:
        draw.polygon([(left, top + side), (left + side / 2, top), (left + side, top + side)], fill=COLOURS[colour])
    return image


def as_jpeg(image: Image.Image) -> Image.Image:
    """The image as a decoded JPEG file (its `format` is "JPEG", as a JPEG in a dataset is)."""
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return Image.open(io.BytesIO(buffer.getvalue()))


def image_pool(count: int, seed: int = 0) -> list[tuple[Image.Image, str, str]]:
    """`count` distinct images (image, colour, shape): every colour and shape, the sizes cycled, some JPEGs."""
    rng = random.Random(seed + 3)
    pool = []
    for index in range(count):
        colour, shape = list(COLOURS)[index % len(COLOURS)], SHAPES[index % len(SHAPES)]
        image = draw_shape(colour, shape, SIZES[index % len(SIZES)], rng)
        pool.append((as_jpeg(image) if index % JPEG_EVERY == JPEG_EVERY - 1 else image, colour, shape))
    return pool


def image_dataset(size: int, seed: int = 0, pool_size: int = 24) -> Dataset:
    """Conversational prompts with an image placeholder, an `image` column and the expected `colour`; the images are
    drawn from a pool, so the same image comes back in later steps."""
    pool = image_pool(pool_size, seed)
    rng = random.Random(seed + 4)
    rows = [pool[rng.randrange(pool_size)] for _ in range(size)]
    prompt = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
    return Dataset.from_dict(
        {
            "prompt": [prompt] * size,
            "image": [image for image, _, _ in rows],
            "colour": [colour for _, colour, _ in rows],
            "shape": [shape for _, _, shape in rows],
        }
    )


def _text(completion) -> str:
    return completion if isinstance(completion, str) else completion[-1]["content"]


def colour_named(completions, colour, log_extra=None, log_metric=None, **kwargs) -> list[float]:
    """1 when the answer's first word is the shape's colour. Logs the expected colour per sample and the batch's
    accuracy (TRL passes `log_extra` and `log_metric` since after 0.29; before, neither)."""
    scores = [float(_text(c).split()[:1] == [expected]) for c, expected in zip(completions, colour)]
    if log_extra is not None:
        log_extra("expected_colour", list(colour))
    if log_metric is not None:
        log_metric("colour_accuracy", sum(scores) / len(scores))
    return scores


def one_colour_word(completions, image, log_extra=None, **kwargs) -> list[float]:
    """The format reward: 1 when the answer is exactly one colour word. Logs, per sample, the share of the image the
    shape covers: a stand-in for a per-sample diagnostic (how much there was to see)."""
    scores = [float(len(words := _text(c).split()) == 1 and words[0] in COLOURS) for c in completions]
    if log_extra is not None:
        log_extra("shape_share", [round(shape_share(picture), 4) for picture in image])
    return scores


def shape_share(image: Image.Image) -> float:
    """The fraction of the image's pixels that are not background, on a 32 x 32 thumbnail."""
    small = image.convert("RGB").resize((32, 32), Image.Resampling.NEAREST).tobytes()
    return sum(1 for pixel in range(0, len(small), 3) if min(small[pixel : pixel + 3]) < 200) / (32 * 32)


# ---------------------------------------------------------------- tokenizer, processor and model


def build_tokenizer(seed: int = 0) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on the task's text, with a chat template that writes <image> per image."""
    rng = random.Random(seed)
    corpus = [f"user\n{QUESTION}\nassistant\n {rng.choice(list(COLOURS))}" for _ in range(500)]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    bpe = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>", IMAGE_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(corpus, bpe)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens={"image_token": IMAGE_TOKEN},
        chat_template=CHAT_TEMPLATE,
        model_input_names=["input_ids", "attention_mask"],
    )


def build_processor(tokenizer: PreTrainedTokenizerFast) -> LlavaProcessor:
    """56 x 56 pixels in 14-pixel patches: 16 image tokens per image (the CLIP tower's 17 features less its CLS)."""
    image_processor = CLIPImageProcessorPil(size={"shortest_edge": 56}, crop_size={"height": 56, "width": 56})
    return LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
        patch_size=14,
        vision_feature_select_strategy="default",
        image_token=IMAGE_TOKEN,
        num_additional_image_tokens=1,
    )


def build_model(tokenizer: PreTrainedTokenizerFast, seed: int = 0) -> LlavaForConditionalGeneration:
    """About 120k parameters: a one-layer CLIP tower (hidden size 32) and a two-layer Llama decoder (hidden size 64)."""
    set_seed(seed)
    config = LlavaConfig(
        text_config=LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=len(tokenizer),
            max_position_embeddings=128,
            bos_token_id=None,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        ),
        vision_config=CLIPVisionConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=56,
            patch_size=14,
        ),
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    return LlavaForConditionalGeneration(config)


def warm_up(model, processor: LlavaProcessor, steps: int, seed: int = 0, batch_size: int = 16) -> None:
    """Supervised fine-tuning on correct answers (loss on the answer only), on images of another pool: short, so it
    teaches the format and only a start at the colours (the right one is about 40 % likely after 40 steps)."""
    rng = random.Random(seed + 1)
    pool = image_pool(24, seed + 100)
    tokenizer = processor.tokenizer
    prompt = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        rows = [rng.choice(pool) for _ in range(batch_size)]
        images = [image for image, _, _ in rows]
        answers = [f" {colour}{tokenizer.eos_token}" for _, colour, _ in rows]
        batch = processor(
            images=images, text=[prompt + answer for answer in answers], padding=True, return_tensors="pt"
        )
        prompt_length = len(processor(images=images[:1], text=[prompt])["input_ids"][0])
        labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        labels[:, :prompt_length] = -100
        model(**batch, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def save_tiny_vlm(directory: Path, warmup_steps: int, seed: int = 0) -> Path:
    """Builds, warms up and saves the model and its processor (GRPO with beta > 0 loads its reference model from
    disk)."""
    tokenizer = build_tokenizer(seed)
    processor = build_processor(tokenizer)
    model = build_model(tokenizer, seed)
    warm_up(model, processor, warmup_steps, seed)
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


# ---------------------------------------------------------------- training


def build_trainer(
    model_dir: Path,
    output_dir: Path,
    steps: int,
    seed: int = 0,
    learning_rate: float = 1e-3,
    dataset: Dataset | None = None,
    reward_funcs: list | None = None,
    **overrides,
) -> GRPOTrainer:
    """GRPO on the colour task: 4 images x 4 completions per step, two reward functions, beta > 0, all on CPU. Tests
    pass a dataset and reward functions of their own, and other settings."""
    settings = dict(
        output_dir=str(output_dir),
        use_cpu=True,
        bf16=False,
        seed=seed,
        max_steps=steps,
        per_device_train_batch_size=16,
        num_generations=4,
        max_completion_length=4,
        temperature=1.0,
        beta=0.04,
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        gradient_checkpointing=False,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
    )
    settings.update(overrides)
    args = GRPOConfig(**settings)
    prompts_per_step = args.per_device_train_batch_size // args.num_generations
    return GRPOTrainer(
        model=str(model_dir),
        reward_funcs=reward_funcs or [colour_named, one_colour_word],
        args=args,
        train_dataset=image_dataset(prompts_per_step * steps, seed) if dataset is None else dataset,
        processing_class=LlavaProcessor.from_pretrained(model_dir),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--output-dir",
        default="runs/grpo_tiny_vlm",
        help="the warm-up model, TRL's output and (by default) the rollouts",
    )
    parser.add_argument("--steps", type=int, default=100, help="GRPO optimizer steps")
    parser.add_argument("--warmup-steps", type=int, default=40, help="supervised warm-up steps before GRPO")
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="GRPO's (constant) learning rate")
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()
    os.environ.setdefault("SAVE_ROLLOUT_DATA", "true")  # this example exists to show the logging

    output_dir = Path(options.output_dir)
    model_dir = save_tiny_vlm(output_dir / "warm_model", options.warmup_steps, options.seed)
    trainer = build_trainer(model_dir, output_dir, options.steps, options.seed, options.learning_rate)
    trainer.add_callback(RolloutLoggerCallback(trainer=trainer))  # the one line that turns on rollout logging
    trainer.train()

    rewards = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]
    quarter = max(1, len(rewards) // 4)
    first, last = sum(rewards[:quarter]) / quarter, sum(rewards[-quarter:]) / quarter
    print(f"mean reward: first {quarter} steps {first:.3f}, last {quarter} steps {last:.3f}")


if __name__ == "__main__":
    main()
