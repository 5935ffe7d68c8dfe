"""What a task declares about answering a field, and what the decision says it did.

`FieldPolicy` is the declaration (in the task): answer only above a calibrated confidence, and/or
return a conformal prediction set at a promised coverage. `FieldOutcome` is the result for one
field of one decision: the value always holds the most probable answer (so it is an instance of
the user's model), and the outcome says whether to act on it.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class FieldPolicy(BaseModel):
    """`abstain_below`: abstain when the top calibrated probability is lower. `conformal_coverage`:
    also return the smallest value set that contains the true value with this probability."""

    model_config = ConfigDict(frozen=True)

    abstain_below: float | None = Field(default=None, gt=0, le=1)
    conformal_coverage: float | None = Field(default=None, gt=0, lt=1)


class FieldOutcome(BaseModel):
    """One field's policy outcome: answered or abstained, with the evidence for either."""

    model_config = ConfigDict(frozen=True)

    abstained: bool = False
    confidence: float = Field(ge=0, le=1, description="the top calibrated probability")
    threshold: float | None = Field(default=None, description="the abstain_below threshold applied, if any")
    prediction_set: list[Any] | None = Field(default=None, description="conformal set of values, if declared")
    coverage: float | None = Field(default=None, description="the coverage the conformal set promises")
