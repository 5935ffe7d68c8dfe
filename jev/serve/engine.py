"""The server's one door into the engine: encode an input, decide already-encoded inputs, warm up.

The batcher must validate and tokenise each request on arrival (so a bad input fails alone, and
before it takes a queue slot) and decide many requests later in one pass. `Decider.decide_batch`
does both at once, so this adapter uses `Decider.encode` and `Decider.decide_encoded` apart.
"""

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from jev.decide.decider import Decider, Encoded, load_apart
from jev.schema import Decided, Task


class Engine:
    """A loaded decider plus the ids that name what it serves."""

    def __init__(self, decider: Decider, name: str = "in-memory") -> None:
        self.decider = decider
        self.name = name
        self.model_id = decider.model_id
        self.calibrations = {task: decider.model_info(decider.tasks[task])["calibration"] for task in decider.tasks}
        self.calibrator_ids = {
            task: _fingerprint(identity) if identity else None for task, identity in self.calibrations.items()
        }

    @classmethod
    def load(cls, folder: str | Path, speculative: bool = True, weights: str = "float32") -> "Engine":
        """Load a decider folder; `speculative=False` writes text fields without its drafter, and
        `weights` says what its large matrices are stored as (`jev.model.weights`). Its decode steps are
        replayed as traced graphs (`jev.model.step_graphs`). It loads in a thread of its own
        (`load_apart`): the batcher decides on another."""
        path = Path(folder)
        decider = load_apart(path, speculative=speculative, weights=weights, replay=True)
        return cls(decider, path.resolve().name)

    @property
    def tasks(self) -> dict[str, Task]:
        return self.decider.tasks

    def max_input_tokens(self, task: Task) -> int:
        return self.decider.manifest.tasks[task.name].max_input_tokens

    def calibration_metrics(self, task: str) -> dict[str, Any]:
        """The metrics `jev calibrate` stored for a task, empty when it is not calibrated."""
        calibration = self.decider.calibrations.get(task)
        return calibration.metrics if calibration else {}

    def encode(self, task: Task, data: BaseModel | dict[str, Any]) -> Encoded:
        """Validate, render and tokenise; raises InvalidInputError or InputTooLongError."""
        return self.decider.encode(task, data)

    def run(self, task: Task, batch: list[Encoded]) -> list[Decided]:
        """Decide encoded inputs of one task in one forward pass, in order."""
        return self.decider.decide_encoded(task, batch)

    def warm_up(self) -> None:
        """One pass per task on a one-token input, so the first real request pays no first-call costs."""
        for task in self.tasks.values():
            self.run(task, [Encoded([self.decider.bos_id], truncated=False)])


def _fingerprint(data: Any) -> str:
    """A short stable id for a calibration's identity, so replicas serving one model report one id."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
