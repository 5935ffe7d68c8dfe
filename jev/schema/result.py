"""What a decision returns: the user's own typed model, every probability behind it, and its cost.

`Decided` is a pydantic generic so `Decided[MailDecision]` validates `value` as a `MailDecision`
(the client rebuilds typed results from JSON this way) while the engine can fill it directly.
"""

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

DecisionT = TypeVar("DecisionT", bound=BaseModel)


class Usage(BaseModel):
    """What one decision cost: tokens read, forward passes run, time queued and computing."""

    model_config = ConfigDict(frozen=True)

    input_tokens: int = Field(ge=0)
    forward_passes: int = Field(ge=0)
    queue_ms: float = Field(default=0.0, ge=0)
    compute_ms: float = Field(default=0.0, ge=0)


class Decided(BaseModel, Generic[DecisionT]):
    """A decision: `value` is an instance of the decision model.

    `probs[field][value]` is the calibrated probability of each wire value (Enum members as their
    `.value`, None for null) of every closed field, by dotted field name; for a multi-label field,
    `probs[field][label]` is P(label in the set), so those do not sum to 1. `model` says which
    model and calibration produced it (free-form for now).
    """

    model_config = ConfigDict(frozen=True)

    value: DecisionT
    probs: dict[str, dict[Any, float]]
    usage: Usage
    model: dict[str, Any] = Field(default_factory=dict)
