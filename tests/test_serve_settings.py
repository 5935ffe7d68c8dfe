"""Settings: env variables, CLI flags over them, and refusals of nonsense values."""

import argparse

import pytest

from jev.cli import build_parser
from jev.serve.cli import settings_from_args
from jev.serve.settings import ServeSettings


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve", *argv])


def test_env_variables_then_flags(monkeypatch):
    monkeypatch.setenv("JEV_MAX_BATCH", "16")
    monkeypatch.setenv("JEV_MAX_WAIT_MS", "2.5")
    monkeypatch.setenv("JEV_API_KEY", "a, b,")
    settings = settings_from_args(parse("--max-batch", "4", "--request-timeout-s", "3"))
    assert settings.max_batch == 4 and settings.max_wait_ms == 2.5 and settings.request_timeout_s == 3
    assert settings.api_keys == ("a", "b")
    assert settings_from_args(parse("--api-key", "z")).api_keys == ("z",)
    args = parse("--model", "somewhere", "--port", "9000")
    assert args.func.__name__ == "run_serve" and args.port == 9000 and str(args.model) == "somewhere"


def test_bad_values_are_refused_naming_the_setting():
    with pytest.raises(ValueError, match="JEV_MAX_QUEUE"):
        ServeSettings.from_env({"JEV_MAX_QUEUE": "many"})
    with pytest.raises(ValueError, match="max_batch must be at least 1"):
        ServeSettings(max_batch=0)
    with pytest.raises(ValueError, match="cannot exceed max_queue"):
        ServeSettings(max_queue=4, max_batch_inputs=8)
    assert "api_keys" not in repr(ServeSettings(api_keys=("secret",))), "keys never reach logs"
