"""Decide over HTTP with the typed client (start the server first: `make serve`).

    .venv/bin/python examples/client.py [URL]

The server's URL comes from the argument, else from `JEV_URL`, else `http://127.0.0.1:8000`.
"""

import os
import sys

from jev import Client
from schemas.chat import ChatDecision

url = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("JEV_URL", "http://127.0.0.1:8000")
messages = [{"message": "Bonjour, comment vas-tu ?"}, {"message": "Tell me a joke"}]
with Client(url) as client:
    results = client.decide_batch(ChatDecision, messages)
for result in results:
    print(result.value.language, result.value.topic, round(result.probs["topic"][result.value.topic], 3))
