"""`jev serve`: run the decision service under uvicorn.

Each flag has an environment variable (`JEV_MAX_BATCH`, `JEV_MAX_WAIT_MS`, `JEV_MAX_QUEUE`,
`JEV_REQUEST_TIMEOUT_S`, `JEV_MAX_BODY_BYTES`, `JEV_MAX_JSON_DEPTH`, `JEV_MAX_BATCH_INPUTS`, `JEV_RETRY_AFTER_S`,
`JEV_DRAIN_TIMEOUT_S`, `JEV_API_KEY` comma-separated); a flag given on the command line wins.
"""

import argparse
import sys
from dataclasses import fields
from pathlib import Path

from jev.command import MODEL_HELP, NO_SPECULATIVE_HELP, add_weights_option, model_folder, run
from jev.schema import JevError
from jev.serve.settings import ServeSettings, env_name


def add_commands(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `serve`; the handler is stored as `args.func` and returns an exit code."""
    parser = subparsers.add_parser(
        "serve", help="serve a model over HTTP",
        description="Serve a decider folder: decisions, tasks, models, health, metrics and a page at /.",
    )
    parser.add_argument("--model", type=Path, default=None, help=MODEL_HELP)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    parser.add_argument("--no-speculative", action="store_true", help=NO_SPECULATIVE_HELP)
    add_weights_option(parser)
    for f in fields(ServeSettings):
        if f.name == "api_keys":
            parser.add_argument("--api-key", dest="api_keys", action="append",
                                help="accept this API key (repeatable; env JEV_API_KEY, comma-separated)")
            continue
        flag = "--" + f.name.replace("_", "-")
        parser.add_argument(flag, type=int if f.default.__class__ is int else float, default=None,
                            help=f"default {f.default} (env {env_name(f.name)})")
    parser.set_defaults(func=run_serve)
    return parser


def settings_from_args(args: argparse.Namespace) -> ServeSettings:
    overrides = {f.name: getattr(args, f.name, None) for f in fields(ServeSettings)}
    if overrides["api_keys"]:
        overrides["api_keys"] = tuple(overrides["api_keys"])
    try:
        return ServeSettings.from_env(**overrides)
    except ValueError as error:
        raise JevError(f"serve settings: {error}") from None


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from jev.serve.app import create_app
    from jev.serve.engine import Engine

    settings = settings_from_args(args)
    engine = Engine.load(model_folder(args.model), speculative=not args.no_speculative, weights=args.weights)
    app = create_app(engine, settings)
    uvicorn.run(
        app, host=args.host, port=args.port, log_level=args.log_level,
        timeout_graceful_shutdown=int(settings.drain_timeout_s) or None,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m jev.serve.cli ...`, the same as `jev serve ...`."""
    parser = argparse.ArgumentParser(prog="jev")
    add_commands(parser.add_subparsers(dest="command", required=True))
    return run(parser.parse_args(["serve", *(sys.argv[1:] if argv is None else argv)]))


if __name__ == "__main__":
    sys.exit(main())
