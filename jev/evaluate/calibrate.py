"""`jev calibrate`: fit a task's calibrators and conformal sets on held-out rows and store them.

Only `jev.json` changes: the calibration is plain numbers beside the weights, so recalibrating
never touches the model, and the Decider applies it to every later decision of the task.
"""

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from jev.data.examples import Example, read_examples
from jev.decide.bundle import MANIFEST_FILE
from jev.decide.calibration import TaskCalibration, fit_calibration, label_arrays
from jev.decide.decider import Decider
from jev.schema import Task

BATCH = 32


def file_identity(path: Path) -> dict[str, object]:
    """Path, sha256, size and row count: enough to say exactly which data a number came from."""
    data = path.read_bytes()
    return {"path": str(path), "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
            "rows": sum(1 for line in data.splitlines() if line.strip())}


def raw_probabilities(decider: Decider, task: Task, examples: list[Example]) -> dict[str, np.ndarray]:
    """Uncalibrated head probabilities of every example, per closed field, in batches."""
    parts = [decider.probabilities(task, [e.token_ids for e in examples[i : i + BATCH]])
             for i in range(0, len(examples), BATCH)]
    return {f.name: np.concatenate([p[f.name] for p in parts]) for f in task.spec.closed_fields}


def held_out_probabilities(
    decider: Decider, task: Task, data: Path
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Raw head probabilities and labels of every row of `data`, per closed field."""
    examples, _ = read_examples(data, task, lambda t, d: decider.encode(t, d).token_ids)
    labels = label_arrays(task.spec.closed_fields, [e.label for e in examples])
    return raw_probabilities(decider, task, examples), labels


def calibrate(
    model_dir: Path,
    task_name: str,
    data: Path,
    method: str = "vector",
    target_precision: float | None = None,
    tasks: Sequence[Task] = (),
) -> TaskCalibration:
    """Fit on `data` (the calibration split), write it into the model's `jev.json`, return it.

    `tasks` overrides the tasks named in `jev.json` (as in `Decider.load`), e.g. to fit conformal
    sets at the coverage a task's policies declare.
    """
    decider = Decider.load(model_dir, tasks=tasks, check_policies=False)
    task = decider.task_for(task_name)
    raw, labels = held_out_probabilities(decider, task, data)
    calibration = fit_calibration(task, raw, labels, method, target_precision)
    calibration.data = file_identity(data)
    decider.manifest.calibrations[task.name] = calibration
    (model_dir / MANIFEST_FILE).write_text(decider.manifest.to_json())
    return calibration
