"""The mail task: is a mail spam, does it come from a mailing list, is it a reply; and a subject line.

Data: the SpamAssassin public corpus (`jev data fetch && jev data prepare`; see docs/data.md).
Mails can run to many thousand tokens and their first lines carry most of the signal, so the task
declares truncation: an over-long body is cut to the model's input limit instead of refused.
The model sees only the body; `subject` is generated after the closed fields, trained on the
mails' real subject lines.
"""

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from jev.schema import FieldPolicy, MaxTokens, Task


class MailInput(BaseModel):
    body: str = Field(min_length=1, description="The mail's text without headers (decoded parts, HTML tags stripped).")


class MailDecision(BaseModel):
    kind: Literal["easy_ham", "hard_ham", "spam"] = Field(
        description="spam, ham that is easy to tell from spam, or ham that looks like spam."
    )
    mailing_list: bool = Field(description="The mail was sent through a mailing list.")
    reply: bool = Field(description="The mail replies to an earlier one.")
    subject: Annotated[str, MaxTokens(32)] = Field(description="A subject line for the mail.")


TASK = Task(
    name="mail",
    input_model=MailInput,
    decision_model=MailDecision,
    description="Triage a mail from its body: spam or ham, mailing list or not, reply or not.",
    truncate=True,
    policies={"kind": FieldPolicy(abstain_below=0.7, conformal_coverage=0.95)},
)
