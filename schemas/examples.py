"""An example task that uses every kind of decision field: support-ticket triage.

It shows an Enum, an Optional, a bounded int, a multi-label set, a nested model and a `str` text
field. The text field (`summary`) needs the generation path, so this task compiles but
`TASK.spec.require_closed_only()` refuses it until speculative decoding lands.
"""

from enum import Enum
from typing import Literal

from pydantic import BaseModel, Field

from jev.schema import Task


class Priority(Enum):
    LOW = "low"
    NORMAL = "normal"
    URGENT = "urgent"


class Customer(BaseModel):
    plan: Literal["free", "pro", "enterprise"] = Field(description="The plan the customer seems to be on.")
    churn_risk: bool = Field(description="The customer threatens to leave.")


class TicketInput(BaseModel):
    subject: str = Field(min_length=1, description="The ticket's subject line.")
    body: str = Field(min_length=1, description="The ticket's text.")


class TicketDecision(BaseModel):
    priority: Priority
    team: Literal["billing", "technical", "account"] | None = Field(
        description="The team to route to; None when no team fits and a person must look."
    )
    severity: int = Field(ge=1, le=5, description="1 (cosmetic) to 5 (service down).")
    products: set[Literal["web", "mobile", "api"]] = Field(description="The products the ticket concerns.")
    customer: Customer
    summary: str = Field(description="One sentence for the queue view.")


TASK = Task(
    name="ticket",
    input_model=TicketInput,
    decision_model=TicketDecision,
    description="Triage a support ticket: priority, team, severity, products, customer, summary.",
)
