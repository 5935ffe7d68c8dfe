"""What a frozen backbone's hidden states already know: mean-pooled states of a layer + LR, per field.

The MiniLM anchor's recipe (`jev.evaluate.baseline.minilm_probabilities`: LogisticRegression with C
picked on valid, calibrated on calib, scored on test), with the features taken from a converted
Jev folder instead: each row's rendered input, `bos` first as the decider reads it, at most 256
tokens, through the model once; the residual stream after each chosen layer (the final-normed
state for the last) averaged over the row's tokens. It says which depths carry a field before any
fine-tuning, which is where a recipe that freezes the lower layers can start.

    python -m benchmarks.probe --model runs/smollm2-mla --data data --task chat --layers 6 12 18 24 30

`--task sotu` reads the rows `benchmarks/own_task.py` builds (`--data runs/own`): whether a user's own
task is held back by its recipe or by what the backbone's states carry.
"""

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from benchmarks.accuracy import anchor_scores
from jev.evaluate.baseline import minilm_probabilities, read_labelled_texts
from jev.model import Model
from jev.schema import load_task
from jev.tokenizer import load_tokenizer

MAX_TOKENS = 256
BATCH = 32
TASKS = {"mail": "schemas.mail:TASK", "chat": "schemas.chat:TASK", "sotu": "examples.sotu:TASK"}


@torch.no_grad()
def pooled_states(model: Model, rows: Sequence[list[int]], layers: Sequence[int]) -> dict[int, np.ndarray]:
    """Per layer, the mean over each row's tokens of the residual stream after that layer `[n, D]`."""
    last = model.config.num_hidden_layers
    seen: dict[int, torch.Tensor] = {}
    def keep(layer: int):
        return lambda _module, _inputs, out: seen.update({layer: out})

    hooks = [model.backbone.layers[layer - 1].register_forward_hook(keep(layer)) for layer in layers if layer < last]
    pooled: dict[int, list[torch.Tensor]] = {layer: [] for layer in layers}
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    try:
        for start in range(0, len(order), BATCH):
            batch = [rows[i] for i in order[start : start + BATCH]]
            lengths = torch.tensor([len(r) for r in batch])
            ids = torch.zeros(len(batch), int(lengths.max()), dtype=torch.long)
            for i, r in enumerate(batch):
                ids[i, : len(r)] = torch.tensor(r)
            final = model.hidden_states(ids, lengths=lengths)
            mask = (torch.arange(ids.shape[1]) < lengths.unsqueeze(1)).unsqueeze(-1).float()
            for layer in layers:
                states = final if layer == last else seen[layer]
                pooled[layer].append((states.float() * mask).sum(1) / lengths.unsqueeze(1))
    finally:
        for hook in hooks:
            hook.remove()
    back = np.argsort(order)
    return {layer: torch.cat(chunks).numpy()[back] for layer, chunks in pooled.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=Path("runs/smollm2-mla"))
    parser.add_argument("--data", type=Path, default=Path("data"))
    parser.add_argument("--task", choices=sorted(TASKS), default="chat")
    parser.add_argument("--layers", type=int, nargs="+", default=[6, 12, 18, 24, 30])
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args()

    model = Model.from_pretrained(args.model)
    tokenizer = load_tokenizer(args.model)
    task = load_task(TASKS[args.task])
    splits = {s: read_labelled_texts(args.data / args.task / f"{s}.jsonl", task) for s in ("train", "valid", "calib")}
    test = read_labelled_texts(args.data / args.task / "test.jsonl", task)
    every = [*splits["train"].texts, *splits["valid"].texts, *splits["calib"].texts, *test.texts]
    began = time.perf_counter()
    bos = model.config.bos_token_id
    rows = [[bos, *encoding.ids][:MAX_TOKENS] for encoding in tokenizer.encode_batch(every)]
    features = pooled_states(model, rows, args.layers)
    seconds = time.perf_counter() - began
    print(f"embedded {len(rows)} rows in {seconds:.0f} s", flush=True)
    by_text: dict[int, dict[str, np.ndarray]] = {
        layer: dict(zip(every, vectors, strict=True)) for layer, vectors in features.items()
    }
    results: dict = {"model": str(args.model), "task": args.task, "rows": len(rows), "seconds": round(seconds),
                     "layers": {}}
    for layer in args.layers:
        def embed(texts: Sequence[str], layer: int = layer) -> np.ndarray:
            return np.stack([by_text[layer][t] for t in texts])

        probs = minilm_probabilities(task, splits["train"], splits["valid"], splits["calib"], test.texts, embed)
        results["layers"][layer] = {}
        for spec in task.spec.closed_fields:
            y = np.array([row[spec.name] for row in test.labels])
            raw, calibrated = anchor_scores(probs[spec.name], y)
            results["layers"][layer][spec.name] = {"raw": raw, "calibrated": calibrated, "C": probs[spec.name].C}
        print(layer, results["layers"][layer], flush=True)
    markdown = render(results)
    print(markdown)
    if not args.no_write:
        from benchmarks.report import write_results

        write_results(f"probe_{args.task}", results, markdown)


def render(results: dict) -> str:
    fields = list(next(iter(results["layers"].values())))
    lines = [
        f"`{results['model']}`, frozen: each `{results['task']}` row's mean-pooled residual stream after a layer, "
        "LogisticRegression with C picked on valid, calibrated on calib, scored on test (the MiniLM anchor's "
        f"recipe). Embedding all {results['rows']} rows once took {results['seconds']} s.",
        "",
        "| layer | " + " | ".join(f"{f} acc % / cal. ECE %" for f in fields) + " |",
        "|---|" + "---|" * len(fields),
    ]
    for layer, scores in results["layers"].items():
        cells = []
        for f in fields:
            calibrated = scores[f]["calibrated"]
            ece = "—" if calibrated is None else f"{100 * calibrated['ece']:.1f}"
            cells.append(f"{100 * scores[f]['raw']['accuracy']:.1f} / {ece}")
        lines.append(f"| {layer} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
