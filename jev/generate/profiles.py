"""The load-aware scheduler's verify-pass profile: measured once per model and machine, off the request path.

A profile is a property of the hardware as much as of the model, so it is stored per model id and
machine key (CPU model, thread count, device, dtype, torch version) in Jev's cache folder
(`$JEV_CACHE_DIR`, else `$XDG_CACHE_HOME/jev`, else `~/.cache/jev`), not in the model folder: a
model folder is shared (git, a read-only install) and its machines differ.

Where none is stored, `ProfileMeasurement` measures it on a background thread while the decider
serves text fields by plain decoding. Each timed pass takes the decider's compute lock, so the
profile never times a pass that shares the CPU with a decision, a decision waits for at most one
pass of it, and no decision's `usage.compute_ms` counts it.
"""

import atexit
import hashlib
import json
import os
import platform
import threading
from contextlib import AbstractContextManager
from pathlib import Path

import torch

from jev.generate.scheduler import VerifyProfile
from jev.model import Model

# Raised when the same stored weights' form starts to cost differently per pass (2: mixed extends
# caches through int4 where a weight is on a 4-bit grid; 3: attention through torch's fused kernel,
# mixed extends 8 or more caches in bfloat16, and a profile is timed by sequences and width), so
# profiles measured before are re-measured.
PROFILE_VERSION = 3


def cache_dir() -> Path:
    """Where Jev keeps what it measured on this machine."""
    if os.environ.get("JEV_CACHE_DIR"):
        return Path(os.environ["JEV_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "jev"


def machine_key(model: Model) -> str:
    """A short id of what a pass's speed depends on besides the weights: the processor, the threads
    torch uses, the device, the dtype, the stored weights' form, whether cached passes are replayed as
    traced graphs, and the torch build."""
    parts = [
        processor_name(), str(os.cpu_count()), str(torch.get_num_threads()), str(model.device),
        str(model.dtype), torch.__version__, str(PROFILE_VERSION),
    ]
    if model.weights != "float32":
        parts.append(model.weights)
    if model.step_graphs is not None:
        parts.append("replayed")
    if model.device.type == "cuda":
        parts.append(torch.cuda.get_device_name(model.device))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def processor_name() -> str:
    """The CPU's model name (`/proc/cpuinfo` on Linux; `platform.processor()` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def profile_file(model_id: str, model: Model, context: int, width: int) -> Path:
    """Where the profile of `model_id` on this machine, measured at this context and row width, is kept."""
    return cache_dir() / "profiles" / f"{model_id}-{machine_key(model)}-c{context}-w{width}.json"


def load_profile(file: Path) -> VerifyProfile | None:
    """The profile stored in `file` (see `profile_file`), or None (none yet, or unreadable)."""
    try:
        saved = json.loads(file.read_text())
        seconds = tuple(tuple(float(t) for t in row) for row in saved["seconds"])
        return VerifyProfile(tuple(saved["rows"]), tuple(saved["widths"]), seconds)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_profile(file: Path, profile: VerifyProfile) -> None:
    """Store `profile` in `file`, atomically (a reader sees the old file or the new one); a read-only
    cache folder is not an error, the profile is then measured again next time."""
    saved = {"rows": list(profile.rows), "widths": list(profile.widths), "seconds": [list(r) for r in profile.seconds]}
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        partial = file.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(saved) + "\n")
        partial.replace(file)
    except OSError:
        pass


class MeasurementStopped(Exception):
    """Raised inside a measurement that was asked to stop: it ends without storing anything."""


class _StoppableLock:
    """The compute lock, refusing any further pass once `stopped` is set."""

    def __init__(self, lock: AbstractContextManager, stopped: threading.Event) -> None:
        self.lock, self.stopped = lock, stopped

    def __enter__(self) -> None:
        self.lock.__enter__()
        if self.stopped.is_set():
            self.lock.__exit__(None, None, None)
            raise MeasurementStopped

    def __exit__(self, *exc: object) -> None:
        self.lock.__exit__(*exc)


class ProfileMeasurement:
    """Measures a model's verify profile on a daemon thread, each timed pass under `lock`, and stores
    it in `file` (None: a model never saved, whose profile is kept only in memory). The file is named
    when the measurement starts, so a cache folder changed meanwhile does not receive it.

    A process that exits meanwhile stops it after the pass under way (`stop`, run at exit): torch
    must not be running on a thread while the interpreter shuts down, and half a profile is not stored.
    """

    def __init__(
        self, model: Model, file: Path | None, lock: AbstractContextManager, context: int, width: int
    ) -> None:
        self.profile: VerifyProfile | None = None
        self.error: BaseException | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._measure, args=(model, file, _StoppableLock(lock, self._stopped), context, width),
            name="jev-profile", daemon=True,
        )
        atexit.register(self.stop)
        self._thread.start()

    def _measure(
        self, model: Model, file: Path | None, lock: AbstractContextManager, context: int, width: int
    ) -> None:
        try:
            profile = VerifyProfile.measure(model, context=context, width=width, lock=lock)
        except MeasurementStopped:
            return
        except Exception as error:  # a failed profile leaves text fields on plain decoding, never a request
            self.error = error
            return
        finally:
            atexit.unregister(self.stop)  # nothing left to stop at exit
        if file is not None:
            save_profile(file, profile)
        self.profile = profile

    def wait(self, timeout: float | None = None) -> VerifyProfile | None:
        """Block until the measurement ends (or `timeout` seconds); the profile, or None if not yet done."""
        self._thread.join(timeout)
        return self.profile

    def stop(self, timeout: float = 60.0) -> None:
        """End the measurement after the pass under way, storing nothing unless it had finished."""
        self._stopped.set()
        self._thread.join(timeout)
