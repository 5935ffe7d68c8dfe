"""How often DSpark drafters' drafts hold on the target's own subject lines and body continuations.

    python -m benchmarks.drafter_acceptance --model models/default --drafters models/default/drafter runs/d2

`benchmarks/speculative.py` times decoding on 16 mails; its acceptance columns are one sampled run
each, too few drafts to tell two drafters a few points apart. Here the target first writes, plainly,
the subject line of every test mail and a 32-token continuation of every test body (its first 64
tokens, as `--prompts body` reads them), once at T = 1 and once greedy. Then each drafter drafts a
block at every token of those texts from the target's state before it, its Markov head reading the
written tokens, as it would had every draft before been kept; for each drafted position:
- on the T = 1 texts, the chance the accept rule keeps it, sum min(p, q) with q over the drafter's
  vocabulary: its mean is the served rate of a first draft;
- on the greedy texts, whether its most likely token is the target's: exactly whether a greedy
  draft holds.
Then each text is decoded in rounds of k drafts, as `generate` decodes it: a round keeps its drafts
while they hold and adds the bonus token. Greedy, this is exactly what decoding would keep; at
T = 1 each draft is kept with its chance (the text itself stays the target's sample).
"""

import argparse
from pathlib import Path

import numpy as np
import torch

from benchmarks.report import write_results
from benchmarks.speculative import mail_prompts, subject_prompts
from jev.command import add_weights_option
from jev.decide.decider import Decider
from jev.generate.drafters import load_drafter
from jev.generate.drafters.dspark import DSparkDrafter
from jev.generate.loop import generate
from jev.model import Model
from jev.tokenizer import load_tokenizer

NEW_TOKENS = 32
BODY_TOKENS = 64
BATCH = 32
DRAFT_LENS = (1, 3, 5, 7)
DRAWS = 16


def written(
    model: Model, prompts: list[list[int]], temperature: float, stop: frozenset[int]
) -> list[tuple[list[int], int, int]]:
    """Each prompt with the target's own continuation, and its span [first anchor, last written token]."""
    spans = []
    for start in range(0, len(prompts), BATCH):
        batch = prompts[start : start + BATCH]
        texts = generate(model, batch, NEW_TOKENS, temperature=temperature, seed=start, stop=stop).tokens
        spans += [(prompt + text, len(prompt), len(prompt) + len(text) - 1)
                  for prompt, text in zip(batch, texts, strict=True) if len(text) > 1]
    return spans


@torch.no_grad()
def chances(
    model: Model, drafters: list[DSparkDrafter], ids: list[int], first: int, last: int, greedy: bool
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """For anchors first..last-1, per drafter, each drafted position's chance to hold `[N, K]` (greedy:
    1 where its top token is the target's); and which positions lie inside the text `[N, K]`. One
    target pass serves every drafter."""
    k = drafters[0].max_draft_len
    tokens = torch.tensor([ids])
    hidden = model.hidden_states(tokens)[0]
    anchors = torch.arange(first, last)
    offsets = (anchors.unsqueeze(1) + torch.arange(k)).clamp(max=len(ids) - 1)
    inside = anchors.unsqueeze(1) + torch.arange(k) + 1 <= last
    # Each position's p once; a position is drafted from up to k anchors.
    p = torch.softmax(model.lm_head(hidden[first:]).float(), dim=-1)[(offsets - first).flatten()]
    previous = model.embed(tokens[0, offsets])
    measured = []
    for drafter in drafters:
        lm_head = model.lm_head if drafter.vocabulary is None else drafter.vocabulary
        logits, _ = drafter.head(hidden[anchors - 1], previous, lm_head)
        q = torch.softmax(logits.flatten(0, 1).float(), dim=-1)
        if drafter.vocabulary is not None:
            q = drafter.vocabulary.spread(q)
        held = p.argmax(-1) == q.argmax(-1) if greedy else torch.minimum(p, q).sum(-1)
        measured.append(held.double().view(len(anchors), k))
    return measured, inside


def rounds_tau(
    held: torch.Tensor, inside: torch.Tensor, k: int, rng: np.random.Generator | None = None, draws: int = 1
) -> tuple[int, int]:
    """Decode one text in rounds of k drafts from its first token: a round at anchor a keeps drafts
    while they hold and adds the bonus token, and the next round starts after them. Greedy (`rng`
    None), `held` is 0/1 and the rounds are exact; at T = 1 each draft holds with its chance, drawn
    `draws` times with `rng`. -> (tokens, rounds) over the draws."""
    chance = (held[:, :k] * inside[:, :k]).numpy()
    tokens = rounds = 0
    for _ in range(draws):
        anchor = 0
        while anchor < len(chance):
            kept = chance[anchor] > (0.5 if rng is None else rng.random(k))
            accepted = k if kept.all() else int(kept.argmin())
            tokens, rounds, anchor = tokens + accepted + 1, rounds + 1, anchor + accepted + 1
    return tokens, rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--drafters", type=Path, nargs="+", default=None, help="default: MODEL/drafter")
    parser.add_argument("--data", type=Path, default=Path("data/mail/test.jsonl"))
    parser.add_argument("--mails", type=int, default=None, help="the first test mails only (default: all)")
    add_weights_option(parser)
    parser.add_argument("--name", default="drafter_acceptance", help="the results file and docs section to write")
    parser.add_argument("--no-write", action="store_true", help="print only; leave results and docs alone")
    args = parser.parse_args()

    decider = Decider.load(args.model, check_policies=False, speculative=False, weights=args.weights)
    model = decider.model
    folders = args.drafters or [args.model / "drafter"]
    drafters = [load_drafter(folder, model) for folder in folders]
    for folder, drafter in zip(folders, drafters, strict=True):
        if not isinstance(drafter, DSparkDrafter) or drafter.max_draft_len != drafters[0].max_draft_len:
            raise SystemExit(f"{folder}: DSpark drafters of one draft length are measured here")
    count = args.mails or sum(1 for _ in args.data.open())
    subjects, stop = subject_prompts(decider, args.data, count)
    bos = model.config.bos_token_id
    bodies = mail_prompts(args.data, load_tokenizer(args.model), bos, count, BODY_TOKENS)
    rng = np.random.default_rng(0)
    results, lines = {}, []
    for region, prompts, ends in (("subject", subjects, stop), ("body", bodies, frozenset())):
        for temperature in (1.0, 0.0):
            spans = written(model, prompts, temperature, ends)
            parts = [chances(model, drafters, *span, greedy=temperature == 0) for span in spans]
            sampled = (rng, DRAWS) if temperature else (None, 1)
            for d, folder in enumerate(folders):
                first = float(torch.cat([held[d][:, 0] for held, _ in parts]).mean())
                tau = {}
                for k in DRAFT_LENS:
                    counts = [rounds_tau(held[d], inside, k, *sampled) for held, inside in parts]
                    tau[k] = sum(t for t, _ in counts) / sum(r for _, r in counts)
                results[f"{folder}:{region}:T={temperature:g}"] = {"anchors": sum(len(h[d]) for h, _ in parts),
                                                                   "first_draft": first, "tau": tau}
                lines.append(f"| {folder} | {region} | {temperature:g} | {100 * first:.1f} | "
                             + " | ".join(f"{tau[k]:.2f}" for k in DRAFT_LENS) + " |")
    markdown = (
        f"`{args.model}` ({model.weights} weights) and its drafters, on the target's own subject lines and "
        f"{NEW_TOKENS}-token body continuations of {count} test mails (`{args.data}`), written at T = 1 and "
        "greedy. First draft: how often it holds over every token of the texts (T = 1: the mean of sum "
        "min(p, q); greedy: the share whose top token is the target's). tau: tokens per target pass, the "
        "bonus token included, decoding each text in rounds of k drafts (greedy exact; T = 1 each draft "
        f"kept with its chance, {DRAWS} draws a text).\n\n"
        "| drafter | text | T | first draft holds % | "
        + " | ".join(f"tau k = {k}" for k in DRAFT_LENS) + " |\n|---|---|---|---|"
        + "---|" * len(DRAFT_LENS) + "\n" + "\n".join(lines)
    )
    print(markdown)
    if not args.no_write:
        write_results(args.name, results, markdown)


if __name__ == "__main__":
    main()
