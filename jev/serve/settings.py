"""What an operator can tune: batching, limits, deadlines and API keys, each with an env variable.

Every setting has a `JEV_*` environment variable (the CLI's flags override them), so a container
is configured without a command line. `JEV_API_KEY` may hold several keys separated by commas,
which lets keys rotate without downtime.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields


@dataclass(frozen=True)
class ServeSettings:
    """`max_batch`/`max_wait_ms`: a batch runs when it is full or its oldest request waited this long
    (`max_batch=1` turns batching off). `max_queue`: inputs waiting at most; more get 429.
    `request_timeout_s`: a request still unanswered then gets 504 and its queued work is dropped.
    `max_body_bytes`: larger bodies get 413. `max_json_depth`: bodies whose arrays and objects nest deeper
    get 400 before they are decoded. `max_batch_inputs`: the most inputs in one batch request.
    `retry_after_s`: what 429 and 503 tell clients to wait. `api_keys`: empty means no auth.
    `drain_timeout_s`: how long shutdown waits for queued work to finish."""

    max_batch: int = 32
    max_wait_ms: float = 5.0
    max_queue: int = 1024
    request_timeout_s: float = 30.0
    max_body_bytes: int = 1_000_000
    max_json_depth: int = 32
    max_batch_inputs: int = 64
    retry_after_s: int = 1
    drain_timeout_s: float = 30.0
    api_keys: tuple[str, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        for name in ("max_batch", "max_queue", "max_body_bytes", "max_json_depth", "max_batch_inputs", "retry_after_s"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("max_wait_ms", "request_timeout_s", "drain_timeout_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.max_batch_inputs > self.max_queue:
            raise ValueError(f"max_batch_inputs ({self.max_batch_inputs}) cannot exceed max_queue ({self.max_queue})")
        object.__setattr__(self, "api_keys", tuple(k for k in self.api_keys if k))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> "ServeSettings":
        """Settings from `JEV_<NAME>` variables, then `overrides` (None values are ignored)."""
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = env.get(env_name(f.name))
            if raw is None or raw == "":
                continue
            if f.name == "api_keys":
                values[f.name] = tuple(k.strip() for k in raw.split(","))
            else:
                values[f.name] = _parse(f.name, raw, int if f.type in (int, "int") else float)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]


def env_name(setting: str) -> str:
    """`max_batch` -> `JEV_MAX_BATCH`; `api_keys` -> `JEV_API_KEY` (a comma-separated list)."""
    return "JEV_API_KEY" if setting == "api_keys" else f"JEV_{setting.upper()}"


def _parse(name: str, raw: str, kind: type) -> int | float:
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"{env_name(name)}={raw!r} is not a valid {kind.__name__}") from None
