"""`LookupDrafter`: drafts by copying what followed the text's latest n-gram where it appeared before.

A mail's subject line often repeats words of its body (a quoted `Re:` line, a list's tag), and a
greedy target repeats itself (`[ILUG] [ILUG] ...`); a drafter that copies needs no weights and
costs next to nothing. Each round, for each sequence, the longest suffix of its text (prompt,
emitted tokens, pending token) of at most `max_ngram` tokens that occurred before is looked up, and
the K tokens that followed its latest earlier occurrence are proposed; where the copy reaches the
end of the text it continues from the copy's start, so a repeating pattern is drafted as repeating.

Its proposals are deterministic, so q is one-hot at each drafted token: the accept rule keeps draft
x with probability p(x) and draws a rejection's correction from p without x, which is exactly the
target's distribution, at every temperature. A sequence with no earlier occurrence drafts nothing
worth verifying (survival 0); a copied draft's survival is `hold ** j`, a prior that the load-aware
scheduler calibrates against the acceptance it has seen once it has seen rounds.
"""

import torch

from jev.generate.accept import SamplingSettings
from jev.generate.drafters.protocol import Draft


class _Text:
    """One sequence's tokens and, per n-gram that has a successor, where its latest occurrence ended."""

    def __init__(self, tokens: list[int], max_ngram: int) -> None:
        self.tokens: list[int] = []
        self.latest: dict[tuple[int, ...], int] = {}
        self.max_ngram = max_ngram
        self.extend(tokens)

    def extend(self, tokens: list[int]) -> None:
        for token in tokens:
            end = len(self.tokens)
            for n in range(1, min(self.max_ngram, end) + 1):
                self.latest[tuple(self.tokens[end - n : end])] = end
            self.tokens.append(token)

    def copy_after(self, pending: int, k: int) -> tuple[list[int], int]:
        """The k tokens that followed the latest earlier occurrence of the longest suffix of the text
        plus `pending`, and that suffix's length (0: none occurred, k zeros)."""
        text = [*self.tokens, pending]
        end = len(text)
        for n in range(min(self.max_ngram, end - 1), 0, -1):
            suffix = tuple(text[end - n :])
            # The occurrence one token back ends where `latest` has no successor for it yet.
            start = end - 1 if tuple(text[end - 1 - n : end - 1]) == suffix else self.latest.get(suffix)
            if start is not None:
                period = end - start
                return [text[start + j % period] for j in range(k)], n
        return [0] * k, 0


class LookupDrafter:
    """Drafts by n-gram lookup in each sequence's own text (see the module docstring)."""

    def __init__(self, vocab_size: int, max_ngram: int = 3, hold: float = 0.6) -> None:
        if max_ngram < 1 or not 0.0 < hold <= 1.0:
            raise ValueError(f"max_ngram must be >= 1 and hold in (0, 1]; got {max_ngram}, {hold}")
        self.vocab_size, self.max_ngram, self.hold = vocab_size, max_ngram, hold
        self.passes = 0
        self._texts: list[_Text] = []

    def start(self, prompts: list[list[int]], max_len: int) -> None:
        self._texts = [_Text(prompt[:-1], self.max_ngram) for prompt in prompts]

    def propose(
        self, pending: torch.Tensor, active: torch.Tensor, settings: SamplingSettings, uniforms: torch.Tensor
    ) -> Draft:
        k = uniforms.shape[1]
        if k < 1:
            raise ValueError("propose needs at least one draft position")
        tokens = torch.zeros(len(self._texts), k, dtype=torch.int64)
        survival = torch.zeros(len(self._texts), k, dtype=torch.float64)
        decay = self.hold ** torch.arange(1, k + 1, dtype=torch.float64)
        for row, (text, is_active) in enumerate(zip(self._texts, active.tolist(), strict=True)):
            if is_active:
                copied, matched = text.copy_after(int(pending[row]), k)
                tokens[row] = torch.tensor(copied)
                survival[row] = decay if matched else 0.0
        self.passes += 1
        probs = torch.nn.functional.one_hot(tokens, self.vocab_size).to(torch.float32)
        return Draft(tokens=tokens, probs=probs, survival=survival)

    def commit(self, tokens: torch.Tensor, counts: torch.Tensor) -> None:
        for text, row, count in zip(self._texts, tokens.tolist(), counts.tolist(), strict=True):
            text.extend(row[:count])

    def keep(self, rows: torch.Tensor) -> None:
        self._texts = [self._texts[row] for row in rows.tolist()]
