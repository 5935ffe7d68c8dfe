"""Tokenizer files, read and written the same way by every part of Jev.

A model folder holds `tokenizer.json` (HF `tokenizers`) and `tokenizer_config.json` (its special
tokens and chat template, for transformers' `AutoTokenizer`). A tokenizer Jev trains itself
(`jev.train.tokenizer`) has fixed special ids shared with `ModelConfig`'s defaults; a converted
model brings its own tokenizer, config and ids (`config.json`'s `bos_token_id`/`eos_token_id`).
"""

import json
from pathlib import Path

from tokenizers import Tokenizer

from jev.schema import JevError

TOKENIZER_FILE = "tokenizer.json"
TRANSFORMERS_CONFIG_FILE = "tokenizer_config.json"
# Jev's own tokenizers: the trainer assigns the special tokens the first ids in this order
# (`ModelConfig`'s bos_token_id=0, eos_token_id=1).
SPECIAL_TOKENS = ("<bos>", "<eos>", "<pad>")
BOS_ID, EOS_ID, PAD_ID = 0, 1, 2


class TokenizerError(JevError, RuntimeError):
    """A tokenizer file that is missing or unreadable, or lacks the special tokens it needs."""


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Read `tokenizer.json`, or the one in a model folder."""
    path = Path(path)
    file = path / TOKENIZER_FILE if path.is_dir() else path
    if not file.is_file():
        raise TokenizerError(f"no tokenizer at {file}")
    try:
        return Tokenizer.from_file(str(file))
    except Exception as exc:  # tokenizers raises a bare Exception for malformed JSON
        raise TokenizerError(f"cannot read tokenizer {file}: {exc}") from exc


def check_jev_specials(tokenizer: Tokenizer, where: str) -> None:
    """Refuse a tokenizer without Jev's own special ids (one Jev trained, or meant to train with)."""
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        found = tokenizer.token_to_id(token)
        if found != expected_id:
            raise TokenizerError(f"{where}: {token} must have id {expected_id}, has {found}")


def jev_tokenizer_config() -> dict:
    """The transformers tokenizer config of a tokenizer Jev trained. It adds no tokens when encoding
    (the tokenizer has no post-processor), like Jev."""
    bos, eos, pad = SPECIAL_TOKENS
    return {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos, "pad_token": pad}


def load_tokenizer_config(folder: Path) -> dict:
    """The folder's `tokenizer_config.json` (its special tokens and chat template), Jev's own if it has none."""
    file = Path(folder) / TRANSFORMERS_CONFIG_FILE
    if not file.exists():
        return jev_tokenizer_config()
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise TokenizerError(f"{file} is not JSON: {exc}") from exc


def save_tokenizer(tokenizer: Tokenizer, folder: str | Path, config: dict | None = None) -> Path:
    """Write `folder/tokenizer.json` and `tokenizer_config.json` (`config`, else Jev's own); return
    the tokenizer's path. Without the config, `AutoTokenizer` loads no bos, eos or pad token."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / TOKENIZER_FILE))
    (folder / TRANSFORMERS_CONFIG_FILE).write_text(json.dumps(config or jev_tokenizer_config(), indent=2) + "\n")
    return folder / TOKENIZER_FILE
