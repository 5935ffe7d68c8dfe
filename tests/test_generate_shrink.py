"""A batch that shrinks as its sequences finish (`generate(shrink=True)`, the default) writes exactly
what the whole batch writes, with every kind of drafter, while its later passes read fewer rows."""

import pytest
import torch
from test_spec_dspark import PROMPTS, V
from test_spec_dspark import drafter as dspark_drafter
from test_spec_eagle import drafter as eagle_drafter
from test_spec_statistical import peaked_model

from jev.generate.drafters import Drafter
from jev.generate.drafters.autoregressive import AutoregressiveDrafter
from jev.generate.drafters.lookup import LookupDrafter
from jev.generate.loop import generate
from jev.generate.scheduler import FixedLength
from jev.model import Model

BUDGETS = [1 + (3 * i) % 10 for i in range(len(PROMPTS))]  # sequences finish in different rounds
STOP = [5]
KINDS = ("plain", "autoregressive", "dspark", "eagle", "lookup")

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def target() -> Model:
    return peaked_model(2, seed=0).double()


def new_drafter(kind: str, target: Model) -> Drafter | None:
    """A fresh drafter of `kind`: each run starts from the same drafter state."""
    if kind == "autoregressive":  # the target itself: a drafter that kept the wrong rows would miss
        return AutoregressiveDrafter(peaked_model(2, seed=0).double())
    if kind == "dspark":
        return dspark_drafter(target)
    if kind == "eagle":
        return eagle_drafter(target)
    return LookupDrafter(V) if kind == "lookup" else None


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("kind", KINDS)
def test_a_shrinking_batch_writes_what_the_whole_batch_writes(target: Model, kind: str, temperature: float) -> None:
    """Same tokens, same counts (so each drafter drafted the same tokens for the same sequences after
    `keep`), and the same cache, row by row, as the batch that never shrinks."""
    whole, shrunk = (
        generate(
            target, PROMPTS, BUDGETS, temperature=temperature, seed=list(range(len(PROMPTS))),
            drafter=new_drafter(kind, target), draft_len=3, stop=STOP, shrink=shrink,
        )
        for shrink in (False, True)
    )
    assert shrunk.tokens == whole.tokens
    assert len({len(tokens) for tokens in whole.tokens}) > 3  # the rows did finish apart
    for counter in ("target_passes", "rounds", "drafted", "verified", "accepted", "bonus"):
        assert getattr(shrunk.stats, counter) == getattr(whole.stats, counter), counter
    if kind != "plain":
        assert shrunk.stats.accepted > 0
    assert torch.equal(shrunk.cache.lengths, whole.cache.lengths)
    for row, n in enumerate(whole.cache.lengths.tolist()):
        got, want = shrunk.cache.latent[:, row, :n], whole.cache.latent[:, row, :n]
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shrink", [False, True])
def test_finished_sequences_leave_the_passes(target: Model, shrink: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three of four sequences end after one token: with `shrink`, the last one's later passes read
    one row, not four; without, every pass reads all four."""
    rows_read = []
    read = target.hidden_states

    def counting(input_ids: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        rows_read.append(input_ids.shape[0])
        return read(input_ids, *args, **kwargs)

    monkeypatch.setattr(target, "hidden_states", counting)
    out = generate(target, PROMPTS[:4], [1, 1, 1, 6], temperature=0.0, shrink=shrink)
    assert [len(tokens) for tokens in out.tokens] == [1, 1, 1, 6]
    assert rows_read[-5:] == [1] * 5 if shrink else set(rows_read) == {4}
    assert out.cache.batch_size == 4


class DraftsLater(FixedLength):
    """Drafts nothing while half the prompts or more are active: the batch shrinks before its first draft."""

    def draft_depth(self, active: torch.Tensor, draft_len: int) -> int:
        return draft_len if int(active.sum()) < len(PROMPTS) // 2 else 0


@pytest.mark.parametrize("kind", KINDS[1:])
def test_a_batch_shrinks_before_its_first_draft(target: Model, kind: str) -> None:
    """A drafter that has drafted nothing in this generation, and last drafted for a batch of another
    size, keeps the right rows when the batch shrinks."""
    def run(shrink: bool) -> list[list[int]]:
        drafter = new_drafter(kind, target)
        generate(target, PROMPTS[:1], 4, temperature=0.0, drafter=drafter, draft_len=3)
        out = generate(target, PROMPTS, BUDGETS, temperature=0.0, drafter=drafter, draft_len=3,
                       policy=DraftsLater(), stop=STOP, shrink=shrink)
        assert out.stats.drafted > 0
        return out.tokens

    assert run(shrink=True) == run(shrink=False)
