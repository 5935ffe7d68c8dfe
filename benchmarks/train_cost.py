"""What fine-tuning costs per row on this machine, recipe against full fine-tuning, in one run.

    python -m benchmarks.train_cost --base models/default --data data/mail/train.jsonl --threads 2

On `--rows` mail bodies cut to `--tokens` tokens it times: a training step through every layer
(full fine-tuning, the issue's reference point); the same step with every backbone weight frozen but
the gradient still carried down through every layer, which is what low-rank adapters in every
layer cannot do without (a lower bound on their step: the adapters' own products come on top); the
recipe's one-off pass of each row to the query layer, and the recipe's training step on the cached
states (the layers above only), in the arithmetic `jev train decide` uses (`--precision auto`:
bfloat16 autocast where the CPU has native bfloat16). From those per-row costs it projects a user's
run of 5,000 such rows for 1-3 epochs.
"""

import argparse
import json
import time
from pathlib import Path

import torch

from benchmarks.report import write_results
from jev.data.examples import Example
from jev.decide.decider import Decider
from jev.model.precision import PRECISIONS, bfloat16_autocast, native_bfloat16, resolve_autocast
from jev.train.decide import field_losses, with_lower_states
from schemas.mail import TASK as MAIL

PROJECTED_ROWS = 5000


def rows_of(decider: Decider, path: Path, n: int, tokens: int) -> list[Example]:
    """The first `n` mail bodies long enough for `tokens` tokens, cut to exactly that many (the
    decider's own input limit would cut them shorter)."""
    examples = []
    with path.open(encoding="utf-8") as file:
        for line in file:
            row = json.loads(line)
            ids = [decider.bos_id, *decider.tokenizer.encode(row["input"]["body"]).ids]
            if len(ids) >= tokens:
                examples.append(Example(ids[:tokens], MAIL.spec.encode_label({**row["label"], "subject": ""})))
            if len(examples) == n:
                return examples
    raise SystemExit(f"{path} has fewer than {n} rows of {tokens} tokens")


def step_seconds(decider: Decider, batch: list[Example], cached: bool, repeats: int, autocast: bool) -> float:
    """Mean seconds of one forward + backward + optimizer-free step over `batch`."""
    network = decider.decision_model.train()
    lowers = [e.lower_states.float() for e in batch] if cached else None

    def step() -> None:
        with bfloat16_autocast(autocast):
            outputs = network("mail", [e.token_ids for e in batch], training=True, lower_states=lowers)
            loss = field_losses(MAIL, outputs.logits, batch) + outputs.indexer_loss
        loss.backward()
        network.zero_grad(set_to_none=True)

    step()
    started = time.perf_counter()
    for _ in range(repeats):
        step()
    return (time.perf_counter() - started) / repeats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, default=Path("models/default"), help="a decider with the mail task")
    parser.add_argument("--data", type=Path, default=Path("data/mail/train.jsonl"))
    parser.add_argument("--rows", type=int, default=16, help="rows per timed batch (default: %(default)s)")
    parser.add_argument("--tokens", type=int, default=200, help="tokens per row (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="timed steps per variant (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default: %(default)s)")
    parser.add_argument(
        "--precision", choices=PRECISIONS, default="auto",
        help="arithmetic of the steps and the pass, as `jev train decide --precision` (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    autocast = resolve_autocast(args.precision)
    torch.set_num_threads(args.threads)
    decider = Decider.load(args.base, speculative=False, check_policies=False)
    layer = decider.decision_model.query_layer
    batch = rows_of(decider, args.data, args.rows, args.tokens)
    for parameter in decider.model.parameters():
        parameter.requires_grad_(True)
    full = step_seconds(decider, batch, cached=False, repeats=args.repeats, autocast=autocast) / len(batch)
    for parameter in decider.model.parameters():
        parameter.requires_grad_(False)
    carried = decider.model.backbone.embed_tokens.register_forward_hook(lambda _m, _i, out: out.requires_grad_())
    frozen = step_seconds(decider, batch, cached=False, repeats=args.repeats, autocast=autocast) / len(batch)
    carried.remove()
    for parameter in decider.model.parameters():
        parameter.requires_grad_(True)
    started = time.perf_counter()
    with bfloat16_autocast(autocast):
        batch = with_lower_states(decider.decision_model, batch, len(batch), "rows to the query layer")
    lower = (time.perf_counter() - started) / len(batch)
    upper = step_seconds(decider, batch, cached=True, repeats=args.repeats, autocast=autocast) / len(batch)
    layers = decider.model.config.num_hidden_layers
    arithmetic = f"{'bfloat16 autocast' if autocast else 'float32'} (native bfloat16 on this CPU: {native_bfloat16()})"
    lines = [f"{len(batch)} rows of {args.tokens} tokens, {arithmetic}, "
             f"query layer {layer} of {layers}.", "", "| per row | seconds |", "|---|---|",
             f"| full fine-tuning step (every layer) | {full:.3f} |",
             f"| every weight frozen, gradient through every layer (adapters' floor) | {frozen:.3f} |",
             f"| recipe: pass to layer {layer}, once per row | {lower:.3f} |",
             f"| recipe: step on the cached states | {upper:.3f} |", "",
             f"Projected for {PROJECTED_ROWS} such rows (validation passes not counted):", "",
             "| epochs | full fine-tuning, min | adapters' floor, min | recipe, min |", "|---|---|---|---|"]
    lines += [f"| {epochs} | {PROJECTED_ROWS * full * epochs / 60:.1f} | {PROJECTED_ROWS * frozen * epochs / 60:.1f} | "
              f"{PROJECTED_ROWS * (lower + upper * epochs) / 60:.1f} |" for epochs in (1, 2, 3)]
    markdown = "\n".join(lines)
    print(markdown)
    write_results("train_cost", {"full_s_per_row": full, "frozen_s_per_row": frozen, "lower_s_per_row": lower,
                                 "upper_s_per_row": upper, "rows": len(batch), "tokens": args.tokens,
                                 "query_layer": layer, "autocast": autocast}, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
