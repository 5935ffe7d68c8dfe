"""Decide over HTTP with the typed client (start the server first: `make serve`).

    .venv/bin/python examples/client.py
"""

from jev import Client
from schemas.chat import ChatDecision

messages = [{"message": "Bonjour, comment vas-tu ?"}, {"message": "Tell me a joke"}]
with Client("http://127.0.0.1:8000") as client:
    results = client.decide_batch(ChatDecision, messages)
for result in results:
    print(result.value.language, result.value.topic, round(result.probs["topic"][result.value.topic], 3))
