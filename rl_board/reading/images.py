"""The prompts' images: a line names image files inside its run folder; each is checked (inside the folder, a raster
format, size and pixel limits), decoded by Pillow and encoded again before the page shows it, so no file's own bytes
(an SVG, HTML named .png) ever reach the browser."""
import contextlib
import functools
import hashlib
import io
import itertools
import json
import os
import re
import stat
import warnings
from collections import Counter
from pathlib import Path

import pandas as pd
from PIL import Image, UnidentifiedImageError

from rl_board.reading.storage import StorageError, file_status, is_remote, is_within, joined, read_file
from rl_board.text import shorten, valid_text

# The raster formats the page shows; any other file (SVG, HTML, PDF, TIFF...) is never decoded.
RASTER_FORMATS = ["PNG", "JPEG", "GIF", "WEBP", "BMP"]


# The largest image decoded (8K UHD is 33 megapixels): a larger one is a problem, not a decode. Pillow's own bound
# (about 89 megapixels) let a 260 kB PNG of 9,450 × 9,450 take 270 MB and 0.75 s to show, each time a session asked.
IMAGE_PIXEL_LIMIT = 40_000_000


IMAGE_FILE_LIMIT = 64 << 20  # bytes


# The longest side of an image as the page gets it, beside the prompt and in the batch table.
SHOWN_IMAGE_SIDE = 768


THUMBNAIL_SIDE = 64


IMAGES_CHECKED = 2000  # distinct images a load checks for the load report; the others are checked when shown


URL_OR_DRIVE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


class ImageProblem(ValueError):
    """An image that cannot be shown; the message says why."""


# The file an image path names, as (path, size, mtime) for the caches, if it is a regular file inside the folder of
# the line's file: no URL, absolute path, ".." or symbolic link out of it.
def image_file(folder: str, path: str | None) -> tuple[str, int, int]:
    if not path or "\x00" in path:
        raise ImageProblem("no file path")
    if URL_OR_DRIVE.match(path) or path.startswith(("/", "\\", "~")):
        raise ImageProblem("not a path inside the run folder (a URL or an absolute path): not read")
    if ".." in re.split(r"[\\/]", path):
        raise ImageProblem("'..' leads out of the run folder: not read")
    if is_remote(folder):
        return remote_image_file(joined(folder, path))
    base = os.path.realpath(folder)
    target = os.path.realpath(os.path.join(base, path))
    if not is_within(target, base):
        raise ImageProblem("a symbolic link out of the run folder: not read")
    try:
        status = os.stat(target)
    except OSError as error:
        raise ImageProblem("missing" if isinstance(error, FileNotFoundError) else f"cannot be read ({error.strerror})") from None
    if not stat.S_ISREG(status.st_mode):
        raise ImageProblem("not a regular file")
    if status.st_size > IMAGE_FILE_LIMIT:
        raise ImageProblem(f"{status.st_size >> 20} MB: larger than the {IMAGE_FILE_LIMIT >> 20} MB shown")
    return target, status.st_size, status.st_mtime_ns


# An image on object storage as image_file gives a local one (its ETag's hash for the mtime the caches key on).
def remote_image_file(target: str) -> tuple[str, int, int]:
    try:
        status = file_status(target)
    except StorageError as error:
        raise ImageProblem(str(error)) from None
    if status.size > IMAGE_FILE_LIMIT:
        raise ImageProblem(f"{status.size >> 20} MB: larger than the {IMAGE_FILE_LIMIT >> 20} MB shown")
    return target, status.size, int(hashlib.sha1(status.etag.encode()).hexdigest()[:15], 16)


# Why an image file cannot be shown (None: it can), from its header and Pillow's integrity check (a PNG's checksums;
# a JPEG decoded at 1/8 scale, which its format makes cheap), without decoding a PNG's pixels. Cached per file
# version: a live run's images are checked once.
@functools.lru_cache(maxsize=65536)
def image_check(path: str, size: int, mtime_ns: int) -> str | None:
    try:
        with opened_image(path) as image:
            if image.format == "JPEG":
                image.draft("RGB", (image.width // 8 or 1, image.height // 8 or 1))
                image.load()
            else:
                image.verify()
    except ImageProblem as error:
        return str(error)
    return None


# An image file's bytes as the page shows them: decoded, its longest side at most `longest`, re-encoded as JPEG (PNG
# where it has transparency); with its MIME type.
def encoded_image(path: str, longest: int) -> tuple[bytes, str]:
    with opened_image(path) as image:
        image.draft("RGB", (longest, longest))  # a JPEG decodes at a fraction of its size, when that suffices
        image.thumbnail((longest, longest))
        transparent = image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info
        image = image.convert("RGBA" if transparent else "RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG" if transparent else "JPEG", quality=90)
    return buffer.getvalue(), "image/png" if transparent else "image/jpeg"


# A raster image opened by Pillow (its header read), or ImageProblem: another format, too many pixels or corrupt.
@contextlib.contextmanager
def opened_image(path: str):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(read_file(path)) if is_remote(path) else path, formats=RASTER_FORMATS) as image:
                if image.width * image.height > IMAGE_PIXEL_LIMIT:
                    raise ImageProblem(f"{image.width} × {image.height} pixels: over the decompression-bomb limit of {IMAGE_PIXEL_LIMIT:,}")
                yield image
    except ImageProblem:
        raise
    except StorageError as error:
        raise ImageProblem(str(error)) from None
    except UnidentifiedImageError:
        raise ImageProblem(f"not a {', '.join(RASTER_FORMATS[:-1])} or {RASTER_FORMATS[-1]} image") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
        raise ImageProblem(f"over the decompression-bomb limit ({error})") from None
    except Exception as error:  # corrupt data: Pillow raises OSError, SyntaxError, struct.error, ValueError...
        raise ImageProblem(f"corrupt ({shorten(str(error) or type(error).__name__, 120)})") from None


# Every image the loaded lines name, checked once: each one that cannot be shown is a load-report row at the first
# line naming it, with how many lines do.
def image_problems(samples: pd.DataFrame) -> list[list]:
    named = samples["image_paths"].notna().to_numpy()  # only its three columns are taken: not every sample's whole row
    first, uses = {}, Counter()
    for file, line, paths in zip(samples["path"][named], samples["line"][named], samples["image_paths"][named]):
        for path in json.loads(paths):
            key = (os.path.dirname(file), path)
            uses[key] += 1
            first.setdefault(key, (file, line))
    problems = []
    if any(is_remote(folder) for folder, _ in first):  # a request per image would hold the load up for long
        return [["", 0, "note", f"{len(first):,} images on object storage: each is checked when shown"]]
    if len(first) > IMAGES_CHECKED:
        problems.append(["", 0, "note", f"{len(first):,} distinct images: the first {IMAGES_CHECKED:,} were checked at load, the others are checked when shown"])
    for (folder, path), (file, line) in itertools.islice(first.items(), IMAGES_CHECKED):
        try:
            problem = image_check(*image_file(folder, path))
        except ImageProblem as error:
            problem = str(error)
        if problem:
            shown = shorten(repr(path), 120) if path else "an image without a path"
            problems.append([valid_text(Path(file).name), int(line), "image", f"{shown}: {problem}; {uses[folder, path]} line(s) name it"])
    return problems
