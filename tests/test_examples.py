"""The scripts in examples/ run as their docstrings say, from the repository's root."""

import ast
import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
import uvicorn

from jev import Decider
from jev.serve.app import create_app
from jev.serve.settings import ServeSettings
from schemas.chat import ChatDecision
from tests.serving import free_port, wait_ready

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "default"


def run_example(name: str, *args: str, env: dict[str, str] | None = None) -> list[str]:
    done = subprocess.run([sys.executable, f"examples/{name}", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def test_decide_example_prints_a_typed_mail_decision():
    value, probs, outcome, usage = run_example("decide.py")
    assert value.startswith("kind=") and "subject=" in value
    assert set(ast.literal_eval(probs)) == {"easy_ham", "hard_ham", "spam"}
    assert outcome.startswith("abstained=") and "decision_passes=1 " in usage


def test_backbone_example_decodes_over_the_latent_cache():
    lines = run_example("backbone.py")
    assert lines[0].startswith("cache numbers per token per layer") and "greedy continuation" in lines[1]


@pytest.fixture(scope="module")
def server():
    """The shipped model under uvicorn on loopback (no drafter: the example decides chat only)."""
    decider = Decider.load(MODEL, speculative=False)
    app = create_app(decider, ServeSettings(max_wait_ms=1))
    port = free_port()
    runner = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=base, timeout=5) as http:
        wait_ready(http.get, timeout=120)
    yield base, decider
    runner.should_exit = True
    thread.join(10)


@pytest.mark.parametrize("how", ["argument", "JEV_URL"])
def test_client_example_takes_the_url_from_an_argument_or_jev_url(server, how):
    base, decider = server
    lines = run_example("client.py", base) if how == "argument" else run_example("client.py", env={"JEV_URL": base})
    messages = [{"message": "Bonjour, comment vas-tu ?"}, {"message": "Tell me a joke"}]
    expected = [decider.decide(ChatDecision, m) for m in messages]
    assert [line.split()[:2] for line in lines] == [[r.value.language, r.value.topic] for r in expected]
