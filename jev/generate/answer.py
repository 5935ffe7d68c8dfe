"""The answer text (`jev.schema.answer`) as token ids, segment by segment.

JSON syntax depends only on the schema, so a task's answer is always
`syntax[0] value[0] syntax[1] value[1] ... syntax[F] <eos>`, where each `value[i]` is the token
sequence of one field's value segment. Training targets, the prefix a text field is generated
after, constrained decoding and exact scoring are all built from these same pieces.
"""

from collections.abc import Mapping
from functools import cached_property
from typing import Any

from tokenizers import Tokenizer

from jev.schema import DecisionSpec, FieldSpec
from jev.schema.answer import answer_fields, answer_segments, is_text_end, text_content, value_text


class AnswerTokens:
    """Token ids of one decision schema's answers under one tokenizer."""

    def __init__(self, spec: DecisionSpec, tokenizer: Tokenizer, eos_id: int) -> None:
        """`eos_id` ends every answer: the model's end-of-sequence token (its config's `eos_token_id`)."""
        self.spec = spec
        self.tokenizer = tokenizer
        if not 0 <= eos_id < tokenizer.get_vocab_size(with_added_tokens=True):
            raise ValueError(f"eos_id {eos_id} is not a token of the tokenizer")
        self.eos = eos_id
        self.fields = answer_fields(spec)
        placeholder = {f.name: _placeholder(f) for f in self.fields}
        pieces = [s.text for s in answer_segments(spec, placeholder) if s.field is None]
        self.syntax: list[list[int]] = [self._ids(text) for text in pieces]

    def value_ids(self, spec: FieldSpec, value: Any) -> list[int]:
        """The tokens of one closed field's value segment (python or wire value)."""
        return self._ids(value_text(spec, value))

    def text_ids(self, spec: FieldSpec, text: str) -> list[int]:
        """The tokens of a text field's content, cut to the field's token limit."""
        return self._ids(text_content(text))[: spec.max_tokens]

    def choices(self, spec: FieldSpec) -> list[list[int]]:
        """Every value's token sequence of a single-choice field, in the head's value order."""
        if spec.kind in ("multilabel", "text"):
            raise ValueError(f"{spec.name} is a {spec.kind} field; only single-choice fields have a list of values")
        return [self.value_ids(spec, v) for v in spec.values]

    def encode(self, values: Mapping[str, Any]) -> list[int]:
        """The whole answer for `values` (every field, dotted names), ending with `<eos>`."""
        ids = list(self.syntax[0])
        for i, spec in enumerate(self.fields):
            value = values[spec.name]
            ids += self.text_ids(spec, value) if spec.kind == "text" else self.value_ids(spec, value)
            ids += self.syntax[i + 1]
        return [*ids, self.eos]

    def text_prefix(self, closed: Mapping[str, Any]) -> list[int]:
        """The answer up to the first text field's content: every closed value written, the quote opened."""
        ids = list(self.syntax[0])
        for i, spec in enumerate(self.spec.closed_fields):
            ids += self.value_ids(spec, closed[spec.name]) + self.syntax[i + 1]
        return ids

    @cached_property
    def max_tokens(self) -> int:
        """An upper bound on any answer's length in tokens (every label of a multi-label field set)."""
        total = sum(len(ids) for ids in self.syntax) + 1
        for spec in self.fields:
            if spec.kind == "text":
                total += spec.max_tokens + 1
            elif spec.kind == "multilabel":
                total += len(self.value_ids(spec, spec.values))
            else:
                total += max(len(ids) for ids in self.choices(spec))
        return total

    @cached_property
    def text_end(self) -> frozenset[int]:
        """Tokens that end a generated text value: any token holding a `"`, and `<eos>`."""
        ends = {i for i in range(self.tokenizer.get_vocab_size()) if is_text_end(self.tokenizer.decode([i]))}
        return frozenset({*ends, self.eos})

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids if text else []


def _placeholder(spec: FieldSpec) -> Any:
    """Any valid value: only the syntax around it is read."""
    if spec.kind == "text":
        return ""
    return [] if spec.kind == "multilabel" else spec.values[0]
