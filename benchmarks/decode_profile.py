"""Where a plain decode step's time goes: torch's profiler over greedy decoding at batch 1.

It continues one test mail's subject prompt (as `benchmarks/decode_anchor.py` does, and timed
the same way, after the prompt is read) for `--new-tokens` tokens, then again under
`torch.profiler`, and reports the step's wall time and the ops that take the most time of their
own, with their call counts per step. The step is replayed as a traced graph, as `jev serve` runs
it (`jev.model.step_graphs`); the profiler still sees each aten call the graph makes.

    python -m benchmarks.decode_profile --model models/default [--weights float32]
"""

import argparse
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.decode_anchor import jev_rate
from benchmarks.speculative import subject_prompts
from jev.command import add_weights_option
from jev.decide.decider import Decider
from jev.generate.loop import TargetState, generate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--data", type=Path, default=Path("data/mail/test.jsonl"))
    parser.add_argument("--new-tokens", type=int, default=20)
    parser.add_argument("--top", type=int, default=12)
    add_weights_option(parser)
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args()

    decider = Decider.load(args.model, check_policies=False, speculative=False, weights=args.weights, replay=True)
    model = decider.model
    prompt = subject_prompts(decider, args.data, 1)[0][0]

    with torch.inference_mode():
        jev_rate(model, prompt, args.new_tokens, None, 0)  # warm-up
        step_ms = 1000 / jev_rate(model, prompt, args.new_tokens, None, 0)[0]
        state = TargetState.prefill(model, [prompt], len(prompt) + args.new_tokens + 2)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            steps = len(generate(model, [prompt], args.new_tokens, temperature=0.0, state=state).tokens[0])
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    lines = [
        f"Greedy decode at batch 1 of `{args.model}` ({model.weights} weights), {steps} tokens after one test "
        f"mail's subject prompt: {step_ms:.1f} ms a step unprofiled (prompt read first, not timed). The profiled "
        f"run's ops by their own time, over its {steps} steps:",
        "",
        "| op | share of own time | ms per step | calls per step |",
        "|---|---|---|---|",
    ]
    for event in events[: args.top]:
        lines.append(f"| `{event.key}` | {100 * event.self_cpu_time_total / total:.1f}% "
                     f"| {event.self_cpu_time_total / 1000 / steps:.2f} | {event.count / steps:.0f} |")
    calls = sum(e.count for e in events) / steps
    lines += ["", f"All ops: {calls:.0f} calls per step, {total / 1000 / steps:.1f} ms of own time per step."]
    markdown = "\n".join(lines)
    print(markdown)
    if not args.no_write:
        from benchmarks.report import write_results

        write_results("decode_profile", {"step_ms": step_ms, "calls_per_step": calls}, markdown)


if __name__ == "__main__":
    main()
