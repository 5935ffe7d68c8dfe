"""What a decision returns: the user's own typed model, every probability behind it, and its cost.

`Decided` is a pydantic generic so `Decided[MailDecision]` validates `value` as a `MailDecision`
(the client rebuilds typed results from JSON this way) while the engine can fill it directly.
"""

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict  # pydantic needs it, not typing's, before Python 3.12

from jev.schema.policy import FieldOutcome

DecisionT = TypeVar("DecisionT", bound=BaseModel)


class Usage(BaseModel):
    """What one decision cost, with the decision and the writing of text fields apart.

    `decision_passes` is the forward pass that decided every closed field (one, shared by the
    batch the input ran in). `generation_passes` are the sequential target passes that wrote the
    text fields afterwards, continuing that pass's cache (0 for a task without text fields);
    `generated_tokens` counts the tokens they wrote and `accepted_length` the tokens per target
    pass (above 1 when speculative drafts are accepted). `queue_ms` is time waiting for a batch,
    `compute_ms` the batch's time computing.
    """

    model_config = ConfigDict(frozen=True)

    input_tokens: int = Field(ge=0)
    decision_passes: int = Field(ge=0)
    generation_passes: int = Field(default=0, ge=0)
    generated_tokens: int = Field(default=0, ge=0)
    accepted_length: float = Field(default=0.0, ge=0)
    queue_ms: float = Field(default=0.0, ge=0)
    compute_ms: float = Field(default=0.0, ge=0)


class DecisionSource(TypedDict, total=False):
    """What produced a decision (`Decided.model`): the model, the schema, the calibration's identity,
    whether the input was cut to the model's limit and which text fields ran out of tokens. A
    decision from the service also names the task, the served folder (`name`) and the calibrator."""

    model_id: str
    schema_hash: str
    calibrated: bool
    calibration: dict[str, Any] | None
    truncated_input: bool
    truncated_texts: list[str]
    task: str
    name: str
    calibrator_id: str | None


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
    model: DecisionSource = Field(default_factory=DecisionSource)

    @property
    def abstained(self) -> list[str]:
        """The fields whose policy says not to act on the value."""
        return [name for name, outcome in self.outcomes.items() if outcome.abstained]
