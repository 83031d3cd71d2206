"""The images of vision-language rollouts: each distinct image written once into the run folder, off the training
thread."""

from __future__ import annotations

import hashlib
import io
import os
import uuid
from pathlib import Path
from typing import Any, Callable

try:
    from PIL import Image
except ImportError:  # a text-only training environment: no image can be a PIL image
    Image = None


IMAGES_FOLDER = "images"
MAX_SIDE = 768  # pixels; a larger image is written downscaled, its line keeps the original size
JPEG_QUALITY = 90
PNG_MODES = {"1", "L", "LA", "I;16", "P", "RGB", "RGBA"}  # those Pillow writes as PNG
JPEG_MODES = {"L", "RGB", "CMYK"}


def content_hash(image) -> str:
    """32 hex characters that name an image by its decoded content: mode, size, palette and pixel bytes."""
    return _digest(_layout(image), image.tobytes())


def _layout(image) -> tuple:
    """What, beside its pixel bytes, makes an image's content: mode, size and palette."""
    return image.mode, image.size, bytes(image.getpalette() or ()) if image.mode in ("P", "PA") else b""


def _digest(layout: tuple, pixels: bytes) -> str:
    mode, (width, height), palette = layout
    digest = hashlib.blake2b(f"{mode} {width}x{height}\n".encode(), digest_size=16)
    digest.update(palette)
    digest.update(pixels)
    return digest.hexdigest()


class ImageFiles:
    """
    Turns the images of a batch's records into line entries, writing each distinct image once into
    `<run_dir>/images/`. Runs on the writer thread, so hashing, downscaling and encoding never hold up training.

    A record's `"images"`, and each of its `"turns"`' `"images"`, hold image objects; they are replaced by one entry
    each, in order:
    `{"path": "images/<content hash>.<png or jpg>", "width": W, "height": H}` for a PIL image, with its original size
    and a path relative to the run folder. The file is the image downscaled to at most 768 px on its longest side,
    a JPEG (quality 90) when the image was decoded from one, else a PNG. It is written under a temporary name and
    renamed into place, so that ranks writing the same image, or a crash, never leave a partial file; a file already
    there (another rank, an earlier launch) is kept. An image that is not a PIL image (a path or URL the processor
    loads itself) is recorded without a file, `{"path": null, "width": null, "height": null, "note": ...}`, with one
    warning. An I/O error costs one warning and stops the writing of images for the launch (their paths are null);
    the lines are still written.

    Args:
        run_dir (`Path`):
            The folder that holds the run's rollout files.
        warn (`Callable[[str, str], None]`):
            Reports a problem once per kind: `"image-type"`, `"image-encode"` or `"image-io"`, and a message.
    """

    def __init__(self, run_dir: Path, warn: Callable[[str, str], None]):
        self.directory = Path(run_dir) / IMAGES_FOLDER
        self._warn = warn
        self._present: set[str] = set()  # file names known to be in the folder
        self._failed = False  # an I/O error: no more files are written
        self._previous: tuple | None = None  # (content key, pixel bytes, entry) of the batch's last PIL image

    def resolve(self, records: list[dict]) -> None:
        """Replaces each record's image objects by their entries, writing the images not yet in the folder."""
        entries = {}  # id(image) -> entry: an image object several samples share is read once
        self._previous = None
        for record in records:
            holders = [record, *(turn for turn in record.get("turns") or () if isinstance(turn, dict))]
            for holder in holders:
                if holder.get("images") is None:
                    continue
                try:
                    for image in holder["images"]:
                        if id(image) not in entries:
                            entries[id(image)] = self._entry(image)
                    holder["images"] = [entries[id(image)] for image in holder["images"]]
                except Exception as error:  # never an image object left in a line: it would lose the whole line
                    self._warn("image-encode", f"images could not be logged ({error!r}); their lines are written without them")
                    holder["images"] = [{"path": None, "width": None, "height": None} for _ in holder["images"]]
        self._previous = None  # its pixels are not kept beyond the batch

    def _entry(self, image: Any) -> dict:
        if Image is None or not isinstance(image, Image.Image):
            kind = type(image).__name__
            self._warn("image-type", f"an image that is not a PIL image ({kind}) is logged without its file")
            note = f"not a PIL image: {image[:200]}" if isinstance(image, str) else f"not a PIL image ({kind})"
            return {"path": None, "width": None, "height": None, "note": note}
        try:
            key, pixels = (_layout(image), image.format in ("JPEG", "MPO")), image.tobytes()  # MPO: a phone's JPEG
        except Exception as error:  # e.g. a lazily opened file that is gone or cut short
            self._warn("image-encode", f"an image could not be read and is logged without its file ({error!r})")
            return {"path": None, "width": image.width, "height": image.height}
        # The dataset gives each of a prompt's num_generations samples an image object of its own, one after the
        # other: the same pixels as the previous image's are not hashed again.
        if self._previous is not None and self._previous[:2] == (key, pixels):
            return self._previous[2]
        name = f"{_digest(key[0], pixels)}.{'jpg' if key[1] else 'png'}"
        entry = {"path": None, "width": image.width, "height": image.height}
        if name in self._present or self._store(image, name):
            entry["path"] = f"{IMAGES_FOLDER}/{name}"
        self._previous = (key, pixels, entry)
        return entry

    def _store(self, image, name: str) -> bool:
        """Writes the image's file unless it is there already; whether the file is there. An image Pillow cannot
        encode loses its file alone; only an error of the file system stops the writing of images."""
        path = self.directory / name
        if self._failed:
            return False
        try:
            there = path.exists()
            if not there:
                encoded = io.BytesIO()
                jpeg = path.suffix == ".jpg"
                _downscaled(image, jpeg).save(encoded, format="JPEG" if jpeg else "PNG", quality=JPEG_QUALITY)
        except Exception as error:  # Pillow cannot encode this image (or the check raised): lose its file, keep the rest
            self._warn("image-encode", f"an image could not be written and is logged without its file ({error!r})")
            return False
        if not there:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._write(encoded.getbuffer(), path)
            except OSError as error:
                self._failed = True
                self._warn("image-io", f"writing {path} failed ({error}); no more images are written")
                return False
        self._present.add(name)
        return True

    def _write(self, data, path: Path) -> None:
        """Writes under a temporary name of its own in the same folder, then renames it into place (atomic on one file
        system)."""
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            with open(temporary, "xb") as file:
                file.write(data)
            os.replace(temporary, path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise


def _downscaled(image, jpeg: bool):
    """The image, or a copy of it, with its longest side at most `MAX_SIDE` and in a mode the file format holds."""
    modes = JPEG_MODES if jpeg else PNG_MODES
    copy = image if image.mode in modes else image.convert("RGBA" if "A" in image.mode and not jpeg else "RGB")
    if max(copy.size) <= MAX_SIDE:
        return copy
    copy = copy.copy() if copy is image else copy
    copy.thumbnail((MAX_SIDE, MAX_SIDE), Image.Resampling.LANCZOS)
    return copy
