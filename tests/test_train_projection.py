"""Gradient projection for the answer objective, against float64 algebra and separate backward passes."""

import torch

from jev.train.distributed import Distributed
from jev.train.projection import project_conflict, set_projected_gradients


def test_a_conflicting_gradient_loses_exactly_its_component_along_the_primary() -> None:
    primary = torch.tensor([1.0, 2.0, -1.0], dtype=torch.float64)
    secondary = torch.tensor([-3.0, 0.5, 2.0], dtype=torch.float64)
    out = project_conflict(primary, secondary)
    expected = secondary - primary * (secondary @ primary) / (primary @ primary)
    assert torch.allclose(out, expected)
    assert abs(float(out @ primary)) < 1e-12


def test_an_agreeing_gradient_or_a_zero_primary_leaves_the_secondary_alone() -> None:
    primary = torch.tensor([1.0, 0.0])
    secondary = torch.tensor([0.5, 3.0])
    assert project_conflict(primary, secondary) is secondary
    assert torch.equal(project_conflict(torch.zeros(2), -secondary), -secondary)


def test_gradients_match_separate_backward_passes_and_spare_unreached_parameters() -> None:
    torch.manual_seed(0)
    shared, head, unused = (torch.nn.Parameter(torch.randn(4, dtype=torch.float64)) for _ in range(3))
    x = torch.randn(4, dtype=torch.float64)

    def losses() -> tuple[torch.Tensor, torch.Tensor]:
        return (shared * x).sum() ** 2 + (head * x).sum(), -(shared * x).sum() * 3

    first, second = losses()
    first.backward()
    primary = torch.cat([shared.grad, head.grad])
    shared.grad, head.grad = None, None
    second.backward()
    answer = torch.cat([shared.grad, torch.zeros(4, dtype=torch.float64)])
    shared.grad = None
    assert float(primary @ answer) < 0

    projected = set_projected_gradients([shared, head, unused], *losses(), Distributed())
    expected = primary + answer - primary * (answer @ primary) / (primary @ primary)
    assert projected
    assert torch.allclose(torch.cat([shared.grad, head.grad]), expected)
    assert unused.grad is None
