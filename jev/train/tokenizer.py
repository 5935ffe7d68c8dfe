"""Byte-level BPE tokenizer training (HF `tokenizers`; the files are read and written by `jev.tokenizer`).

Byte-level means every string, in any script, encodes without an unknown token and decodes back
to exactly itself. No normalizer runs (it would change the text) and no post-processor adds
tokens: Jev places `<bos>` itself, so encoding a text gives only that text's tokens.

`jev.tokenizer.save_tokenizer` writes a small `tokenizer_config.json` beside it naming the special
tokens, so that transformers' `AutoTokenizer` (and tools built on it, such as Outlines) knows
`<bos>`, `<eos>` and `<pad>`.
"""

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from jev.tokenizer import SPECIAL_TOKENS, check_jev_specials


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
    check_jev_specials(tokenizer, "the trained tokenizer")
    return tokenizer
