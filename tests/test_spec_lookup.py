"""The n-gram lookup drafter: what it copies, and that decoding with it is plain decoding's."""

import pytest
import torch

from jev.generate.accept import SamplingSettings
from jev.generate.drafters import load_drafter
from jev.generate.drafters.lookup import LookupDrafter
from jev.generate.loop import generate
from jev.generate.scheduler import LoadAwareScheduler, VerifyProfile
from tests.tiny import random_model, tiny_config

pytestmark = pytest.mark.usefixtures("one_thread")


def proposed(prompt: list[int], k: int, max_ngram: int = 3) -> tuple[list[int], list[float]]:
    """What the drafter proposes after `prompt` (its last token pending)."""
    drafter = LookupDrafter(vocab_size=50, max_ngram=max_ngram, hold=0.5)
    drafter.start([prompt], len(prompt) + k)
    draft = drafter.propose(
        torch.tensor([prompt[-1]]), torch.tensor([True]), SamplingSettings.build(1), torch.zeros(1, k)
    )
    assert torch.equal(draft.probs.argmax(-1), draft.tokens) and torch.equal(draft.probs.sum(-1), torch.ones(1, k))
    return draft.tokens[0].tolist(), draft.survival[0].tolist()


def test_copies_what_followed_the_longest_suffix_where_it_last_occurred() -> None:
    # (7, 8) last occurred at the start; 8 alone occurred later, followed by 2: the longer match wins.
    assert proposed([7, 8, 9, 1, 8, 2, 3, 7, 8], 2) == ([9, 1], [0.5, 0.25])
    assert proposed([7, 8, 9, 1, 8, 2, 3, 7, 8], 2, max_ngram=1) == ([2, 3], [0.5, 0.25])
    # Of two occurrences of the same n-gram, the latest.
    assert proposed([4, 5, 6, 4, 5, 9, 4, 5], 1)[0] == [9]


def test_a_copy_reaching_the_end_of_the_text_repeats_it() -> None:
    assert proposed([20, 3, 4, 3], 5)[0] == [4, 3, 4, 3, 4]
    assert proposed([20, 6, 6], 3)[0] == [6, 6, 6], "the occurrence one token back counts"


def test_no_earlier_occurrence_drafts_nothing_worth_verifying() -> None:
    survival = proposed([1, 2, 3, 4], 3)[1]
    assert survival == [0.0, 0.0, 0.0]
    assert LoadAwareScheduler(VerifyProfile.by_positions((1, 100), (1.0, 1.0))).verify_lengths(
        torch.tensor([survival], dtype=torch.float64), torch.tensor([True])
    ).tolist() == [0]


def test_commits_extend_the_text_it_looks_up_in() -> None:
    drafter = LookupDrafter(vocab_size=50)
    drafter.start([[1, 2, 3], [5, 6]], 16)
    settings, both = SamplingSettings.build(2), torch.tensor([True, True])
    drafter.propose(torch.tensor([3, 6]), both, settings, torch.zeros(2, 2))
    # Row 0 committed its pending 3 and one draft (9); row 1 only its pending 6.
    drafter.commit(torch.tensor([[3, 9, 0], [6, 0, 0]]), torch.tensor([2, 1]))
    draft = drafter.propose(torch.tensor([3, 5]), both, settings, torch.zeros(2, 2))
    assert draft.tokens.tolist() == [[9, 3], [6, 5]]  # row 0: 1 2 3 9 3 -> 9 3; row 1: 5 6 5 -> 6 5


@pytest.mark.parametrize("policy", [None, "load_aware"])
def test_greedy_decoding_with_it_writes_plain_decodings_text(policy) -> None:
    """A random target's greedy text falls into loops, which the drafter copies: drafts are accepted."""
    target = random_model(tiny_config(vocab_size=64), seed=2)
    prompts = [[5, 9, 5, 9, 5], [1, 2, 3], [7] * 6, [3, 4, 3, 4, 8, 3, 4]]
    plain = generate(target, prompts, 24, temperature=0.0, seed=0)
    scheduler = LoadAwareScheduler(VerifyProfile.by_positions((1, 1000), (1.0, 1.0))) if policy else None
    drafted = generate(
        target, prompts, 24, temperature=0.0, seed=0, drafter=LookupDrafter(64), draft_len=4, policy=scheduler
    )
    assert drafted.tokens == plain.tokens
    assert drafted.stats.accepted > 0 and drafted.stats.target_passes < plain.stats.target_passes


def test_rejects_settings_that_cannot_draft() -> None:
    with pytest.raises(ValueError, match="max_ngram"):
        LookupDrafter(50, max_ngram=0)
    with pytest.raises(ValueError, match="hold"):
        LookupDrafter(50, hold=0.0)


def test_a_generations_drafter_passes_are_its_own() -> None:
    """One drafter serves many calls (a service's does); each call's stats count its own passes."""
    target = random_model(tiny_config(vocab_size=64), seed=2)
    drafter = LookupDrafter(64)
    first = generate(target, [[5, 9, 5, 9, 5]], 12, temperature=0.0, drafter=drafter, draft_len=3)
    again = generate(target, [[5, 9, 5, 9, 5]], 12, temperature=0.0, drafter=drafter, draft_len=3)
    assert first.stats.drafter_passes == again.stats.drafter_passes == first.stats.target_passes - 1


def test_a_lookup_drafter_folder_holds_only_its_settings(tmp_path) -> None:
    (tmp_path / "drafter.json").write_text('{"kind": "lookup", "max_ngram": 2, "hold": 0.4}')
    drafter = load_drafter(tmp_path, random_model(tiny_config(vocab_size=64), seed=2))
    assert isinstance(drafter, LookupDrafter)
    assert (drafter.vocab_size, drafter.max_ngram, drafter.hold) == (64, 2, 0.4)
