"""What a decision returns: the user's own typed model, every probability behind it, and its cost.

`Decided` is a pydantic generic so `Decided[MailDecision]` validates `value` as a `MailDecision`
(the client rebuilds typed results from JSON this way) while the engine can fill it directly.
"""

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from jev.schema.policy import FieldOutcome

DecisionT = TypeVar("DecisionT", bound=BaseModel)


class Usage(BaseModel):
    """What one decision cost: tokens read, sequential forward passes its batch ran, time queued and
    computing; for text fields, the tokens it generated and the tokens per target pass of that
    generation (speculative decoding makes this exceed 1)."""

    model_config = ConfigDict(frozen=True)

    input_tokens: int = Field(ge=0)
    forward_passes: int = Field(ge=0)
    generated_tokens: int = Field(default=0, ge=0)
    accepted_length: float = Field(default=0.0, ge=0)
    queue_ms: float = Field(default=0.0, ge=0)
    compute_ms: float = Field(default=0.0, ge=0)


class Decided(BaseModel, Generic[DecisionT]):
    """A decision: `value` is an instance of the decision model.

    `probs[field][value]` is the calibrated probability of each wire value (Enum members as their
    `.value`, None for null) of every closed field, by dotted field name; for a multi-label field,
    `probs[field][label]` is P(label in the set), so those do not sum to 1. `outcomes[field]` is
    the field's policy outcome: `value` always holds the most probable answer, and an abstained
    field is marked there, explicitly. `model` names the model, schema and calibrators used.
    """

    model_config = ConfigDict(frozen=True)

    value: DecisionT
    probs: dict[str, dict[Any, float]]
    outcomes: dict[str, FieldOutcome] = Field(default_factory=dict)
    usage: Usage
    model: dict[str, Any] = Field(default_factory=dict)

    @property
    def abstained(self) -> list[str]:
        """The fields whose policy says not to act on the value."""
        return [name for name, outcome in self.outcomes.items() if outcome.abstained]
