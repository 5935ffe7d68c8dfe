"""Why could writing the answer cost the heads? The gradients at the start of the answer epoch.

Two readings are told apart here, on the base the answer epoch continues (`runs/default4`):

- Adam dilution: the answer loss adds to each backbone parameter's second moment, so the heads'
  steps shrink by sqrt(v_decision / (v_decision + v_answer)) ("decision step kept"). The second
  moments are per-step mean squares, averaged over the tasks in the proportion of their batches.
- Conflict: the expected gradients (summed over batches) of the answer loss and of each field's
  loss point against each other (negative cosine).

    python -m benchmarks.answer_gradients --base runs/default4 --batches 12
"""

import argparse
import math
import random
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.report import write_results
from jev.engine.answer import AnswerTokens
from jev.engine.bundle import load_tokenizer
from jev.engine.decider import Decider
from jev.model import Model
from jev.schema import Task, load_task
from jev.train.decide import answers_of, batches, continue_heads, field_loss_terms
from jev.train.examples import Example, read_examples

TASKS = ("mail", "chat")
TASK_REFERENCES = ("schemas.mail:TASK", "schemas.chat:TASK")
MAX_INPUT_TOKENS = 192  # the shipped recipe's --max-input-tokens
BATCH_SIZE = 16  # and its --batch-size


def step_losses(decider: Decider, task: Task, batch: list[Example], answer_weight: float) -> dict[str, torch.Tensor]:
    """The losses of one training step: each field's, the decision pass's total (fields plus the
    indexers' KL) and the weighted answer loss."""
    out = decider.decision_model(task.name, [e.token_ids for e in batch], training=True, answers=answers_of(batch))
    fields = {f"{task.name}.{name}": loss for name, loss in field_loss_terms(task, out.logits, batch).items()}
    return {**fields, "decision": sum(fields.values()) + out.indexer_loss, "answer": answer_weight * out.answer_loss}


def decision_step_kept(ms_decision: dict[str, float], ms_answer: dict[str, float]) -> list[float]:
    """Per parameter, the factor sqrt(v_decision / (v_decision + v_answer)) the answer loss puts on the
    heads' Adam steps (1: no dilution)."""
    return [math.sqrt(d / (d + ms_answer.get(name, 0.0))) for name, d in ms_decision.items() if d > 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, default=Path("runs/default4"))
    parser.add_argument("--data", type=Path, default=Path("data"))
    parser.add_argument("--batches", type=int, default=12, help="training batches per task")
    parser.add_argument("--answer-weight", type=float, default=0.3)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    tasks = {reference: load_task(reference) for reference in TASK_REFERENCES}
    decider = Decider.new(Model.from_pretrained(args.base), load_tokenizer(args.base), tasks, MAX_INPUT_TOKENS)
    continue_heads(decider, args.base)  # as `jev train decide --base` starts: the base's heads, today's schemas
    decider.decision_model.train()
    params = {n: p for n, p in decider.decision_model.named_parameters() if n.startswith("model.backbone.layers")}
    mean_square: dict[str, dict[str, float]] = {}
    summed: dict[str, torch.Tensor] = {}
    share = {}
    for name in TASKS:
        task = decider.tasks[name]
        answer = AnswerTokens(task.spec, decider.tokenizer, decider.model.config.eos_token_id).encode
        examples, _ = read_examples(args.data / name / "train.jsonl", task,
                                    lambda t, d: decider.encode(t, d).token_ids, answer=answer)
        share[name] = math.ceil(len(examples) / BATCH_SIZE)
        for batch in batches(examples, BATCH_SIZE, random.Random(0))[: args.batches]:
            for key, loss in step_losses(decider, task, batch, args.answer_weight).items():
                decider.decision_model.zero_grad(set_to_none=True)
                loss.backward(retain_graph=True)
                grads = {n: p.grad if p.grad is not None else torch.zeros_like(p) for n, p in params.items()}
                label = key if "." in key else f"{name}.{key}"
                squares = mean_square.setdefault(label, {})
                for n, g in grads.items():
                    squares[n] = squares.get(n, 0.0) + float(g.pow(2).mean()) / args.batches
                summed[label] = summed.get(label, 0) + torch.cat([g.flatten() for g in grads.values()])

    total = sum(share.values())

    def pooled(kind: str) -> dict[str, float]:
        return {n: sum(share[t] / total * mean_square[f"{t}.{kind}"][n] for t in TASKS) for n in params}

    kept = decision_step_kept(pooled("decision"), pooled("answer"))
    quartiles = statistics.quantiles(kept, n=4)

    def rms_ratio(a: str, b: str) -> float:
        return statistics.median(math.sqrt(mean_square[a][n] / mean_square[b][n])
                                 for n in params if mean_square[b][n] > 0)

    lines = [
        f"Base `{args.base}`, {args.batches} training batches of {BATCH_SIZE} per task, "
        f"answer weight {args.answer_weight}, {len(params)} backbone-layer parameters.",
        "",
        f"Decision step kept under Adam (median, quartiles): {quartiles[1]:.3f} "
        f"({quartiles[0]:.3f}, {quartiles[2]:.3f}).",
        "",
        "Median per-parameter RMS ratios: "
        + ", ".join(f"{t} answer / {t} decision {rms_ratio(f'{t}.answer', f'{t}.decision'):.2f}" for t in TASKS)
        + f", chat decision / mail decision {rms_ratio('chat.decision', 'mail.decision'):.2f}.",
        "",
    ]
    rows = [k for k in summed if not k.endswith(".decision")]
    lines += ["| cosine of expected gradients | " + " | ".join(f"`{k}`" for k in rows) + " |",
              "|---|" + "---|" * len(rows)]
    cosines = {a: {b: float(F.cosine_similarity(summed[a], summed[b], dim=0)) for b in rows} for a in rows}
    lines += [f"| `{a}` | " + " | ".join(f"{cosines[a][b]:+.2f}" for b in rows) + " |" for a in rows]
    markdown = "\n".join(lines)
    print(markdown)
    if not args.no_write:
        write_results("answer_gradients", {"decision_step_kept_quartiles": quartiles, "cosines": cosines}, markdown)


if __name__ == "__main__":
    main()
