"""Token ids as text, for the formats that log token ids and no text (prime-rl's token exports, NeMo-RL's multi-turn
train_data_step lines): a tokenizer.json read with the `tokenizers` package (never transformers or torch), named by a
path or by a model already in the local Hugging Face cache (nothing is downloaded). For now the spec comes from the
environment variable RL_LOGGING_BOARD_TOKENIZER; a format puts the tokenizer's identity (tokenizer_identity) in its
RunFormat.context, so its conversions are made again when the tokenizer changes. Without one, ids are shown as ids."""
import functools
import os
from pathlib import Path

TOKENIZER_VARIABLE = "RL_LOGGING_BOARD_TOKENIZER"


IDS_SHOWN = 16  # ids an undecoded text shows before "…"


# The spec of the tokenizer to decode with ("" for none).
def tokenizer_spec() -> str:
    return os.environ.get(TOKENIZER_VARIABLE, "").strip()


# The local Hugging Face hub cache, as huggingface_hub finds it (HF_HUB_CACHE, else HF_HOME/hub, else
# $XDG_CACHE_HOME/huggingface/hub or ~/.cache/huggingface/hub).
def hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface")
    return Path(home).expanduser() / "hub"


# The tokenizer.json a spec names: the file itself, a folder holding one (a checkpoint, a saved tokenizer), or a model
# id (org/name) in the local hub cache: the snapshot its refs/main names, else the newest snapshot with one. None when
# there is none.
def tokenizer_file(spec: str) -> Path | None:
    if not spec:
        return None
    path = Path(spec).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        return path / "tokenizer.json" if (path / "tokenizer.json").is_file() else None
    model = hub_cache() / ("models--" + spec.strip("/").replace("/", "--"))
    snapshots = model / "snapshots"
    try:
        main = (model / "refs" / "main").read_text().strip()
    except OSError:
        main = ""
    if main and (snapshots / main / "tokenizer.json").is_file():
        return snapshots / main / "tokenizer.json"
    found = sorted(snapshots.glob("*/tokenizer.json"), key=lambda file: file.stat().st_mtime_ns if file.exists() else 0)
    return found[-1] if found else None


# What a conversion that decodes depends on: the tokenizer file's path, size and modification time (None without a
# tokenizer), and a note for the load report when the spec names none.
def tokenizer_identity(spec: str | None = None) -> tuple[tuple | None, str]:
    spec = tokenizer_spec() if spec is None else spec
    if not spec:
        return None, ""
    path = tokenizer_file(spec)
    if path is None:
        return None, f"{TOKENIZER_VARIABLE}={spec!r} names no tokenizer.json (a file, a folder with one, or a model in the local Hugging Face cache): token ids are shown undecoded"
    status = path.stat()
    identity = (str(path.resolve()), status.st_size, status.st_mtime_ns)
    try:
        read_tokenizer(*identity)
    except Exception as error:  # tokenizers raises Exception itself for a file it cannot parse
        return None, f"{TOKENIZER_VARIABLE}: {path} could not be read as a tokenizer ({str(error)[:200]}): token ids are shown undecoded"
    return identity, ""


# The tokenizer of an identity (tokenizer_identity's), read once per version of the file; None for none.
def tokenizer_of(identity):
    return None if identity is None else read_tokenizer(*identity)


@functools.lru_cache(maxsize=4)
def read_tokenizer(path: str, size: int, mtime_ns: int):
    from tokenizers import Tokenizer  # imported when a tokenizer is used: the board starts without it

    return Tokenizer.from_file(path)


# Each id as its token, as convert_ids_to_tokens gives it ("Ġthe", "▁the", "<|im_end|>": the board shows them as
# text); an id the vocabulary lacks as <id N>.
def token_texts(tokenizer, ids: list[int]) -> list[str]:
    return [tokenizer.id_to_token(i) or f"<id {i}>" for i in ids]


# The ids decoded, special tokens kept.
def decoded(tokenizer, ids: list[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False)


# A text standing for ids that could not be decoded: the first ids and how many there are.
def undecoded(ids: list[int]) -> str:
    shown = " ".join(str(i) for i in ids[:IDS_SHOWN])
    more = f" … ({len(ids)} tokens)" if len(ids) > IDS_SHOWN else ""
    return f"<token ids, not decoded (no tokenizer: see {TOKENIZER_VARIABLE}): {shown}{more}>"


# The ids as the board's tokens: decoded with the tokenizer, else each id as a string.
def tokens_of(tokenizer, ids: list[int]) -> list[str]:
    return token_texts(tokenizer, ids) if tokenizer is not None else [str(i) for i in ids]


# The ids as a text: decoded with the tokenizer, else the placeholder.
def text_of(tokenizer, ids: list[int]) -> str:
    return decoded(tokenizer, ids) if tokenizer is not None else undecoded(ids)
