"""What a closed field's kind means for its head, in one place: loss, decision, confidence, calibrator.

To the model there are two kinds of closed field (`jev.schema` names the user-facing ones):

- one of several values (`Literal`, `Enum`, `bool`, bounded `int`): one softmax over the values,
  cross-entropy, the most probable value, and confidence its probability. Calibrated by temperature,
  or by the chosen binary method when there are two values; conformal sets apply.
- any of several labels (a multi-label set): one sigmoid per label, binary cross-entropy per label,
  every label with p >= 0.5, and confidence the least certain label's probability of its own call.
  Each label is calibrated as its own binary problem; no conformal set.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from jev.calibration.calibrators import DISTRIBUTION_METHODS
from jev.schema import FieldSpec


@dataclass(frozen=True)
class ClosedKind:
    """How one kind of closed field trains, decides and is calibrated."""

    multilabel: bool

    def loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Mean loss of a head's `logits [B, n]` against `target` (`[B]` indices, or `[B, n]` 0/1)."""
        if self.multilabel:
            return F.binary_cross_entropy_with_logits(logits, target.float())
        return F.cross_entropy(logits, target)

    def correct(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """`[B]` whether the head's decision is exactly the target (every label, for multi-label)."""
        if self.multilabel:
            return ((logits > 0).long() == target).all(-1)
        return logits.argmax(-1) == target

    def choose(self, table: Mapping[Any, float]) -> Any:
        """The decision from calibrated probabilities by value."""
        if self.multilabel:
            return [label for label, p in table.items() if p >= 0.5]
        return max(table, key=table.__getitem__)

    def confidence(self, table: Mapping[Any, float]) -> float:
        """How sure the decision is, in [0, 1]: what an abstain threshold is compared with."""
        if self.multilabel:
            return min((max(p, 1.0 - p) for p in table.values()), default=1.0)
        return max(table.values())

    def calibration_method(self, n_values: int, method: str) -> str:
        """`method` where it fits the field: any method for one probability at a time (binary and
        multi-label fields), else a method over whole distributions (temperature for the others)."""
        fits = self.multilabel or n_values == 2 or method in DISTRIBUTION_METHODS
        return method if fits else "temperature"


ONE_OF = ClosedKind(multilabel=False)
ANY_OF = ClosedKind(multilabel=True)


def kind_of(spec: FieldSpec) -> ClosedKind:
    """The closed kind of a field."""
    if not spec.is_closed:
        raise ValueError(f"field {spec.name!r} is a {spec.kind} field, not a closed one")
    return ANY_OF if spec.kind == "multilabel" else ONE_OF
