"""What every `jev` command shares: the model it uses when none is named, and how it fails.

`models/default` lives in the source tree, not in the installed package (it is data), so a path
computed from the package's own location exists only in an editable install. A command without
`--model` therefore looks in the working directory first (a checkout, or a folder the model was
copied into), then in the source checkout the package runs from, and otherwise says to pass
`--model`. An error a user can fix (a wrong path, a bad input, a model that lacks a task) ends the
command with its message on stderr and exit code 2, never with a traceback; so does Ctrl-C (exit
code 130).
"""

import argparse
import sys
from pathlib import Path

from jev.model.checkpoint import CheckpointError
from jev.model.config import ConfigError
from jev.model.weights import WEIGHTS, WeightsError
from jev.schema import JevError

DEFAULT_MODEL = Path("models") / "default"
NO_SPECULATIVE_HELP = "write text fields by plain decoding, without the model's drafter (same text when greedy)"
MODEL_HELP = f"decider folder (default: {DEFAULT_MODEL} in the working directory, else in Jev's source checkout)"
_MANIFEST = "jev.json"
# jev.model's own errors are not JevErrors (that package imports nothing of the schema's).
_USER_ERRORS = (JevError, CheckpointError, ConfigError, WeightsError, OSError)


def default_model_folders() -> list[Path]:
    """Where a command looks for `models/default`, in order."""
    return list(dict.fromkeys([Path.cwd() / DEFAULT_MODEL, Path(__file__).resolve().parent.parent / DEFAULT_MODEL]))


def model_folder(given: Path | None, flag: str = "--model") -> Path:
    """The folder a command should load: `given` if it exists, else the first default that holds a model."""
    if given is not None:
        if not given.is_dir():
            raise JevError(f"{flag} {given}: no such folder; pass {flag} the model folder to use")
        return given
    for folder in default_model_folders():
        if (folder / _MANIFEST).is_file():
            return folder
    looked = ", ".join(str(folder) for folder in default_model_folders())
    raise JevError(f"no {flag} given and no model at {looked}; pass {flag} the model folder to use")


def run(args: argparse.Namespace) -> int:
    """Run a parsed command; a user's error is one `error: ...` message on stderr and exit code 2, and
    Ctrl-C one `interrupted` line and exit code 130 (the shell's for SIGINT)."""
    try:
        return args.func(args)
    except _USER_ERRORS as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def add_weights_option(parser: argparse.ArgumentParser) -> None:
    """`--weights`, as `jev decide`, `jev profile` and `jev serve` share it (`jev.model.weights`)."""
    parser.add_argument(
        "--weights", choices=WEIGHTS, default="auto",
        help="what the large matrix products' weights are stored as: float32 (as trained), fp16 (fbgemm: half "
        "the bytes, decoding 1.2-2.5x faster, a probability moving by about 1e-5 on average), bf16 (bfloat16 "
        "products, for a CPU with native bfloat16: faster decisions than fp16, slower decoding, a probability "
        "moving about ten times as far) or mixed (bf16's products for decisions and prompts, fp16's for "
        "decoding, int4's for weights on a 4-bit grid such as the base's Q4_1 MLPs); auto is mixed where "
        "fbgemm runs on a CPU with native bfloat16, fp16 where fbgemm runs without it, else float32; bf16 and "
        "mixed need a CPU with AVX-512 or AVX-NE-CONVERT (default: %(default)s)",
    )
