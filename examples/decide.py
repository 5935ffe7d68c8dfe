"""Decide a mail in-process with the shipped model: a typed result and every value's probability.

    .venv/bin/python examples/decide.py
"""

from jev import Decider
from schemas.mail import MailDecision

decider = Decider.load("models/default")
result = decider.decide(MailDecision, {"body": "Congratulations! You won a free cruise. Click here to claim."})
print(result.value)
print(result.probs["kind"])
print(result.outcomes["kind"])
print(result.usage)
