"""Byte-level BPE tokenizer training and loading (HF `tokenizers`, saved as `tokenizer.json`).

Byte-level means every string, in any script, encodes without an unknown token and decodes back
to exactly itself. No normalizer runs (it would change the text) and no post-processor adds
tokens: Jev places `<bos>` itself, so encoding a text gives only that text's tokens.

Beside it goes a small `tokenizer_config.json` naming the special tokens, so that transformers'
`AutoTokenizer` (and tools built on it, such as Outlines) knows `<bos>`, `<eos>` and `<pad>`;
Jev itself reads only `tokenizer.json`.
"""

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from jev.schema import JevError

TOKENIZER_FILE = "tokenizer.json"
TRANSFORMERS_CONFIG_FILE = "tokenizer_config.json"
# Fixed ids shared with `ModelConfig` (bos_token_id=0, eos_token_id=1): the trainer assigns
# special tokens the first ids in this order.
SPECIAL_TOKENS = ("<bos>", "<eos>", "<pad>")
BOS_ID, EOS_ID, PAD_ID = 0, 1, 2


class TokenizerError(JevError, RuntimeError):
    """A tokenizer file that is missing, unreadable or lacks Jev's special tokens."""


def train_tokenizer(texts: Iterable[str], vocab_size: int = 8192) -> Tokenizer:
    """Learn a byte-level BPE vocabulary of at most `vocab_size` tokens from `texts`.

    The same texts in the same order give the same tokenizer. A small corpus may yield fewer
    tokens than asked for (BPE stops when no pair repeats).
    """
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be at least {256 + len(SPECIAL_TOKENS)} (all bytes + specials)")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    _check_special_tokens(tokenizer, "the trained tokenizer")
    return tokenizer


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Read `tokenizer.json` (or a model folder holding it), refusing files without Jev's special ids."""
    path = Path(path)
    file = path / TOKENIZER_FILE if path.is_dir() else path
    if not file.is_file():
        raise TokenizerError(f"no tokenizer at {file}")
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as exc:  # tokenizers raises a bare Exception for malformed JSON
        raise TokenizerError(f"cannot read tokenizer {file}: {exc}") from exc
    _check_special_tokens(tokenizer, str(file))
    return tokenizer


def save_tokenizer(tokenizer: Tokenizer, folder: str | Path) -> Path:
    """Write `folder/tokenizer.json` and its transformers config; return the tokenizer's path."""
    file = Path(folder) / TOKENIZER_FILE
    file.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(file))
    save_transformers_config(file.parent)
    return file


def save_transformers_config(folder: str | Path) -> Path:
    """Write `folder/tokenizer_config.json`: without it `AutoTokenizer` loads no bos, eos or pad token.

    It adds no tokens when encoding (the tokenizer has no post-processor), like Jev.
    """
    file = Path(folder) / TRANSFORMERS_CONFIG_FILE
    file.write_text(json.dumps(jev_tokenizer_config(), indent=2) + "\n")
    return file


def jev_tokenizer_config() -> dict:
    """The transformers tokenizer config of a tokenizer `train_tokenizer` made."""
    bos, eos, pad = SPECIAL_TOKENS
    return {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos, "pad_token": pad}


def _check_special_tokens(tokenizer: Tokenizer, where: str) -> None:
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        found = tokenizer.token_to_id(token)
        if found != expected_id:
            raise TokenizerError(f"{where}: {token} must have id {expected_id}, has {found}")
