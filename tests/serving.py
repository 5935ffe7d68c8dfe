"""Shared pieces of the serve and client tests (no tests here): tiny deciders, slow engines, a server process.

The tiny decider is random, so its answers mean nothing; the tests check plumbing, types and
equalities, never the decisions themselves.
"""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Literal

import httpx
import torch
from pydantic import BaseModel, Field

from jev.decide.decider import Decider, Encoded
from jev.schema import Decided, Task
from jev.serve.engine import Engine
from schemas.mail import TASK as MAIL_TASK
from tests.tiny import random_model, tiny_config, tiny_tokenizer

ROOT = Path(__file__).resolve().parent.parent
MAX_INPUT_TOKENS = 96


class Priority(Enum):
    LOW = "low"
    HIGH = "high"


class Routing(BaseModel):
    team: Literal["billing", "tech"]
    escalate: bool


class Customer(BaseModel):
    name: str = Field(min_length=1)
    plan: Literal["free", "pro"] = "free"


class TicketInput(BaseModel):
    text: str = Field(description="What the customer wrote.")
    customer: Customer
    attachments: int = Field(default=0, ge=0, le=10)


class TicketDecision(BaseModel):
    priority: Priority
    severity: int = Field(ge=1, le=4)
    tags: set[Literal["refund", "bug", "login"]]
    sentiment: Literal["pos", "neg"] | None
    routing: Routing


class ShortInput(BaseModel):
    text: str


TICKET = Task(name="ticket", input_model=TicketInput, decision_model=TicketDecision, description="Route a ticket.")
STRICT = Task(name="strict", input_model=ShortInput, decision_model=Routing, description="No truncation.")
TASKS = {
    "tests.serving:TICKET": TICKET, "tests.serving:STRICT": STRICT,
    "schemas.mail:TASK": MAIL_TASK,
}


def ticket(text: str, name: str = "Ada") -> dict:
    return {"text": text, "customer": {"name": name}}


def tiny_decider(seed: int = 0) -> Decider:
    """A random decider over three tasks, heads drawn wide so probabilities differ visibly.

    Attention stays dense (index_topk above the length): with a small top-k, a random model's
    near-tied indexer scores flip with the padded shape of a batch, and answers would depend on
    their batch neighbours by ~1e-3, which tests comparing batched with single answers cannot tell
    from a serving bug.
    """
    model = random_model(tiny_config(vocab_size=400, max_position_embeddings=128), seed=seed)
    decider = Decider.new(model, tiny_tokenizer(), TASKS, max_input_tokens=MAX_INPUT_TOKENS, max_batch=8)
    torch.manual_seed(seed)
    with torch.no_grad():
        for heads in decider.decision_model.heads.values():
            for param in heads.parameters():
                param.normal_(std=1.0)
    return decider


class GatedEngine(Engine):
    """An engine whose passes wait for `gate` (tests hold work in flight); `entered` is set when a
    pass starts, and `sizes` records each pass's batch size."""

    def __init__(self, decider: Decider) -> None:
        super().__init__(decider)
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.sizes: list[int] = []

    def run(self, task: Task, batch: list[Encoded]) -> list[Decided]:
        self.entered.set()
        self.gate.wait(30)
        self.sizes.append(len(batch))
        return super().run(task, batch)


def wait_ready(get, timeout: float = 30.0) -> None:
    """Poll `/health/ready` through `get(path) -> response` until it answers 200."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if get("/health/ready").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise TimeoutError("the server did not become ready")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server_process(model_dir: Path, *args: str, env: dict[str, str] | None = None):
    """`jev serve` in a child process on an ephemeral loopback port; yields (base_url, process)."""
    port = free_port()
    command = [sys.executable, "-m", "jev.serve.cli", "--model", str(model_dir), "--port", str(port),
               "--log-level", "warning", *args]
    threads = str(torch.get_num_threads())  # as this process: sums then add up in the same order
    child_env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": threads, **(env or {})}
    process = subprocess.Popen(command, cwd=ROOT, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=5) as http:
            wait_ready(lambda path: _alive(process) and http.get(path), timeout=60)
        yield base, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        process.stdout.close()


def _alive(process: subprocess.Popen) -> bool:
    if process.poll() is not None:
        raise RuntimeError(f"the server exited with {process.returncode}: {process.stdout.read().decode()[-3000:]}")
    return True
