"""Text fields: written after the closed fields, continuing the decision pass's latent cache.

The decision pass reads `[input][field queries]` into the cache, so it is the prefill. The query
tokens are rolled back (`LatentCache.truncate`), and the answer as the language model learned it
(`jev.generate.answer`) follows the input: the decided closed values, then each text field's opening
quote, after which `generate` writes the content (plain or speculative) until a token holding a
quote, or the field's token limit. A second text field continues after the first one's closing
syntax, in the same cache.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from tokenizers import Tokenizer

from jev.generate.answer import AnswerTokens
from jev.generate.drafters.protocol import Drafter, ReadsTargetStates
from jev.generate.loop import TargetState, generate
from jev.generate.scheduler import VerifyPolicy
from jev.model import LatentCache, Model
from jev.ragged import concat_rows, pad_rows
from jev.schema.answer import parse_text


@dataclass(frozen=True)
class TextSettings:
    """How text fields are generated: greedy by default, so a decision is reproducible; no trigram of
    a field's text is written twice (`jev.generate.repeats`), so greedy decoding cannot loop."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    draft_len: int = 4
    no_repeat_ngram: int = 3


@dataclass
class WrittenTexts:
    """Each row's texts by field name, its generated tokens, and the batch's sequential passes."""

    texts: list[dict[str, str]]
    generated_tokens: list[int]
    forward_passes: int = 0
    rounds: int = 0
    accepted: int = 0
    truncated: list[list[str]] = field(default_factory=list)

    @property
    def accepted_length(self) -> float:
        """Tokens per sequence per target pass (bonus counted); 1.0 for plain decoding."""
        return (self.accepted + self.rounds) / self.rounds if self.rounds else 0.0


def cache_room(answer: AnswerTokens, input_lengths: Sequence[int], draft_len: int) -> int:
    """Positions a decision needs: input, field queries, the whole answer, and one round's drafts."""
    queries = len(answer.spec.closed_fields)
    return max(input_lengths) + max(queries, answer.max_tokens) + draft_len + 1


def write_texts(
    model: Model,
    tokenizer: Tokenizer,
    answer: AnswerTokens,
    token_ids: Sequence[Sequence[int]],
    closed: Sequence[Mapping[str, Any]],
    cache: LatentCache,
    settings: TextSettings,
    drafter: Drafter | None = None,
    policy: VerifyPolicy | None = None,
    input_states: torch.Tensor | None = None,
) -> WrittenTexts:
    """Write every text field of a batch whose decision pass filled `cache` (inputs + query tokens).

    `input_states [B, W, D]`, the decision pass's final states of the inputs, join the first field's
    target states for a drafter that reads them, so it sees the whole input, not only the answer so far."""
    batch = len(token_ids)
    cache.truncate([len(ids) for ids in token_ids])
    prompts = [[*ids, *answer.text_prefix(values)] for ids, values in zip(token_ids, closed, strict=True)]
    written = WrittenTexts([{} for _ in range(batch)], [0] * batch, truncated=[[] for _ in range(batch)])
    n_closed = len(answer.spec.closed_fields)
    for i, spec in enumerate(answer.spec.text_fields):
        read = _feed(model, cache, prompts)
        written.forward_passes += 0 if read is None else 1
        if i == 0 and input_states is not None and isinstance(drafter, ReadsTargetStates):
            given = (input_states, torch.tensor(list(map(len, token_ids))))
            read = given if read is None else concat_rows(*given, *read)
        generation = generate(
            model, prompts, spec.max_tokens + 1, temperature=settings.temperature, top_p=settings.top_p,
            top_k=settings.top_k, seed=settings.seed, drafter=drafter, draft_len=settings.draft_len,
            stop=answer.text_end, policy=policy, state=TargetState.cached(model, cache, prompts, *(read or ())),
            no_repeat_ngram=settings.no_repeat_ngram,
        )
        stats = generation.stats
        written.forward_passes += stats.target_passes
        written.rounds += stats.rounds
        written.accepted += stats.accepted
        after = answer.syntax[n_closed + i + 1]
        for row, tokens in enumerate(generation.tokens):
            ended = bool(tokens) and tokens[-1] in answer.text_end
            content = tokens[:-1] if ended else tokens[: spec.max_tokens]
            text = tokenizer.decode(tokens if ended else content, skip_special_tokens=True).split('"')[0]
            written.texts[row][spec.name] = parse_text(text)
            written.generated_tokens[row] += len(tokens)
            if not ended:
                written.truncated[row].append(spec.name)
            prompts[row] += [*content, *after]
    return written


def _feed(model: Model, cache: LatentCache, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Read every prompt's tokens the cache lacks, but the last, in one pass. Returns the hidden
    states `[B, T, D]` of the positions read and how many each prompt read `[B]` (for a drafter that
    reads target states), or None when some prompt had nothing to read and no pass ran for it."""
    unread = [prompt[n:] for prompt, n in zip(prompts, cache.lengths.tolist(), strict=True)]
    if min(map(len, unread)) <= 1:
        if max(map(len, unread)) > 1:
            raise ValueError("text prompts must all need reading, or none")
        return None
    tokens, lengths = pad_rows([prompt[:-1] for prompt in unread])
    return model.hidden_states(tokens.to(model.device), cache=cache, lengths=lengths.to(model.device)), lengths
