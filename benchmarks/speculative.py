"""Speculative decoding of free text: acceptance, drafter cost and tokens/s against plain decoding.

Prompts are real held-out mail (`data/mail/test.jsonl`), in one of two forms:

- `--prompts body`: subject, then body, cut to `--prompt-tokens`; the model continues the body;
- `--prompts subject`: exactly what the `mail` task's text field continues from (the encoded
  body, then the answer JSON with the mail's true closed values up to `"subject": "`); generation
  stops at the closing quote, as in a served decision.

For each batch size, plain decoding, every fixed draft length and the load-aware scheduler
generate up to `--new-tokens` per prompt (each batch going on over its active sequences alone once
half of them have finished, as `generate` does; "plain, whole batch" is plain decoding without that,
every pass over the whole batch), over `ceil(--min-prompts / batch)` disjoint groups of
`batch` prompts decoded one group after another (at least `--min-groups`), so that a small batch
is not one mail's few tokens (a subject line is 5-15) and a large one is not one group's draw.
The scheduler first serves one batch of 32 other held-out prompts, as a running service's
scheduler has seen traffic (it learns round costs and realised acceptance). Reported:

- tau: mean accepted length per target pass per sequence, the bonus/correction token COUNTED
  (so plain decoding is 1.0); and the i.i.d. prediction `(1 - a^(k+1)) / (1 - a)` from the
  measured acceptance rate a = accepted / verified;
- conditional acceptance per draft position (position j accepted given it was verified and 1..j-1
  were accepted); the results file also holds the survival per position (1..j all accepted given j
  was verified), whose sum at a fixed length is the drafts accepted per round;
- c: one drafter pass's time relative to one target verify pass;
- tokens/s (all sequences together), and speedup over plain decoding at the same batch size. The
  machine's speed drifts by more than the differences measured, so every policy decodes a group
  before the next group starts, in order for one group and in reverse order for the next (plain,
  k = 1, ..., load-aware, then load-aware, ..., plain), and the whole is run `--repeats` times; each
  policy's rate is its tokens over its seconds in a repeat, and the table reports the mean over the
  repeats. So the policies of a row are timed seconds apart, and a drift that is linear in time
  falls on them alike. The other columns pool every repeat;
- each repeat samples with its own seed (its number), the same for every policy. At T > 0 a
  policy's texts follow its draws, so a seed fixed for every run gave each fixed length the same
  texts in every run, and one lucky draw stood in all of them: the 12 bodies k = 3 continued at
  one sequence took it 204 target passes under seed 0 and 231 to 255 under seeds 1 to 7
  (`runs/seeds54.py`, 2026-12-07), and the load-aware scheduler, whose draws follow its decisions,
  was measured against that one draw;
- target passes: the passes the longest sequence of each group needed, summed over the groups and runs.
  At T > 0 with a stop token the policies sample different texts (each exactly from the model's
  distribution, not the same draws), so a group's time follows its longest sample, and speed-ups
  compare different texts;
  greedy runs write the same text under every policy;
- every policy's caches have the same room, for the longest draft length: a cache's size (its
  layout in memory) can move a run's speed, which the policies should not differ by;
- ms/round: the runs' wall time per target pass, that is, per round (drafting, the verify
  pass and the accept rule): what a round costs, apart from the tokens it yields.

The drafter folder may hold any kind (autoregressive, DSpark or EAGLE; `jev.generate.drafters.load_drafter`
reads which); `--lookup` drafts by n-gram lookup in each prompt and its text instead. Draft lengths
past what a DSpark drafter was trained to draft in one pass are skipped. The target replays its
cached passes as traced graphs where `jev serve` does (`jev.model.step_graphs`).

    python -m benchmarks.speculative --target models/default --drafter models/default/drafter --prompts subject
"""

import argparse
import json
import math
import time
from dataclasses import fields
from itertools import zip_longest
from pathlib import Path
from typing import Any

import torch

from benchmarks.report import write_results
from jev.command import add_weights_option
from jev.decide.decider import Decider
from jev.generate.drafters import Drafter, drafter_kind, load_drafter
from jev.generate.drafters.lookup import LookupDrafter
from jev.generate.loop import GenerationStats, TargetState, generate
from jev.generate.scheduler import LoadAwareScheduler, VerifyPolicy, VerifyProfile
from jev.model import Model
from jev.model.weights import store_weights
from jev.tokenizer import load_tokenizer

WARM_UP = 32


def mail_prompts(path: Path, tokenizer, bos: int, count: int, prompt_tokens: int) -> list[list[int]]:
    """The model's `bos` + subject + body of the first `count` held-out mails, cut to `prompt_tokens` ids."""
    prompts = []
    with path.open() as rows:
        for line in rows:
            row = json.loads(line)
            text = f"Subject: {row.get('subject') or ''}\n\n{row['input'].get('body', '')}"
            prompts.append([bos, *tokenizer.encode(text).ids][:prompt_tokens])
            if len(prompts) == count:
                break
    return prompts


def subject_prompts(decider: Decider, path: Path, count: int) -> tuple[list[list[int]], frozenset[int]]:
    """The first `count` held-out mails as the subject field continues from them, and the stop tokens."""
    task = decider.tasks["mail"]
    answer = decider.answer_tokens(task)
    prompts = []
    with path.open() as rows:
        for line in rows:
            row = json.loads(line)
            closed = task.spec.values_of({**row["label"], "subject": ""})
            prompts.append([*decider.encode(task, row["input"]).token_ids, *answer.text_prefix(closed)])
            if len(prompts) == count:
                break
    return prompts, answer.text_end


def decode(
    target: Model,
    prompts: list[list[int]],
    new_tokens: int,
    temperature: float,
    drafter: Drafter | None,
    draft_len: int,
    policy: VerifyPolicy | None,
    stop: frozenset[int] = frozenset(),
    room: int = 0,
    shrink: bool = True,
    seed: int = 0,
) -> tuple[float, int, GenerationStats]:
    """Decode one group of prompts, sampling with `seed`: (wall seconds, tokens emitted, counters). The
    caches hold the prompts, the new tokens and `room` drafts more (at least `draft_len`)."""
    # The prompts are read first and not timed: a subject line is a few tokens after a prompt of a
    # hundred or more, and a run whose samples stop sooner would otherwise spread the same prefill
    # over fewer tokens.
    # Inference mode, as `jev serve` writes text fields (`Decider`): under `no_grad` alone a pass costs more.
    with torch.inference_mode():
        state = TargetState.prefill(target, prompts, max(map(len, prompts)) + new_tokens + max(room, draft_len) + 1)
        started = time.perf_counter()
        out = generate(
            target,
            prompts,
            new_tokens,
            temperature=temperature,
            seed=seed,
            drafter=drafter,
            draft_len=draft_len,
            policy=policy,
            stop=stop,
            state=state,
            shrink=shrink,
        )
        return time.perf_counter() - started, sum(len(t) for t in out.tokens), out.stats


def measures(decoded: list[tuple[float, int, GenerationStats]], draft_len: int, drafted: bool) -> dict[str, Any]:
    """The table's columns for groups decoded as `decode` returned them."""
    wall, emitted = sum(w for w, _, _ in decoded), sum(e for _, e, _ in decoded)
    s = summed([stats for _, _, stats in decoded])
    rate = s.accepted / s.verified if s.verified else None
    verify_pass = s.verify_seconds / max(s.target_passes, 1)  # the prompts were read before: no prefill pass
    result = {
        "tokens_per_second": emitted / wall,
        "tokens": emitted,
        "tau_with_bonus": s.mean_accepted_length,
        "acceptance_rate": rate,
        "conditional_acceptance": s.conditional_acceptance,
        "survival": s.survival,
        "target_passes": s.target_passes,
        "verified_per_round": s.verified / s.rounds if s.rounds else 0.0,
        "ms_per_round": 1e3 * wall / max(s.target_passes, 1),
    }
    if drafted and s.drafter_passes:
        result["drafter_cost_c"] = (s.draft_seconds / s.drafter_passes) / verify_pass
    if rate is not None and rate < 1:
        result["tau_predicted_iid"] = (1 - rate ** (draft_len + 1)) / (1 - rate)
    return result


def summed(stats: list[GenerationStats]) -> GenerationStats:
    """The counters of several `generate` calls as one call's (per-position counts added)."""
    total = GenerationStats()
    for s in stats:
        for name in (f.name for f in fields(GenerationStats)):
            mine, theirs = getattr(total, name), getattr(s, name)
            if isinstance(mine, list):
                setattr(total, name, [a + b for a, b in zip_longest(mine, theirs, fillvalue=0)])
            else:
                setattr(total, name, mine + theirs)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=Path, default=Path("models/default"))
    parser.add_argument("--drafter", type=Path, default=None, help="default: TARGET/drafter")
    parser.add_argument(
        "--lookup", action="store_true", help="draft with the n-gram lookup drafter (no weights) instead of --drafter"
    )
    parser.add_argument("--data", type=Path, default=Path("data/mail/test.jsonl"))
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument(
        "--min-prompts", type=int, default=16, help="each batch size decodes ceil(this / batch) groups of prompts"
    )
    parser.add_argument("--min-groups", type=int, default=1, help="and at least this many groups")
    parser.add_argument("--draft-lens", type=int, nargs="+", default=[1, 2, 3, 4, 5, 7])
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--prompts", choices=("body", "subject"), default="body")
    add_weights_option(parser)
    parser.add_argument("--repeats", type=int, default=2, help="runs over every group and policy")
    parser.add_argument("--name", default="speculative", help="the results file and docs section to write")
    parser.add_argument("--no-write", action="store_true", help="print only; leave results and docs alone")
    args = parser.parse_args()
    groups_of = {batch: max(math.ceil(args.min_prompts / batch), args.min_groups) for batch in args.batches}
    needed = max(batch * groups_of[batch] for batch in args.batches)

    if args.prompts == "subject":
        decider = Decider.load(args.target, check_policies=False, speculative=False, weights=args.weights, replay=True)
        target = decider.model
        prompts, stop = subject_prompts(decider, args.data, needed + WARM_UP)
    else:
        target = Model.from_pretrained(args.target).eval()
        store_weights(target, args.weights)
        target.replay_cached_passes()
        tokenizer, count = load_tokenizer(args.target), needed + WARM_UP
        prompts = mail_prompts(args.data, tokenizer, target.config.bos_token_id, count, args.prompt_tokens)
        stop = frozenset()
    drafter_path = args.drafter or args.target / "drafter"
    drafter = LookupDrafter(target.config.vocab_size) if args.lookup else load_drafter(drafter_path, target)
    most = getattr(drafter, "max_draft_len", max(args.draft_lens))
    if any(k > most for k in args.draft_lens):
        print(f"skipping draft lengths above {most}: the drafter drafts at most {most} tokens per pass")
        args.draft_lens = [k for k in args.draft_lens if k <= most]
    longest = max(args.draft_lens)
    rows = sorted({*args.batches, WARM_UP})  # the warm-up run's batch too
    profile = VerifyProfile.measure(target, rows, context=args.prompt_tokens, width=longest + 1)
    scheduler = LoadAwareScheduler(profile)

    prompts, warm = prompts[:needed], prompts[needed:]
    decode(target, prompts[:1], 2, args.temperature, drafter, 1, None)  # warm-up: first-call allocations
    # The scheduler learns acceptance and round costs as it runs; a service's has seen traffic.
    decode(target, warm, args.new_tokens, args.temperature, drafter, longest, scheduler, stop)
    kind = "lookup" if args.lookup else drafter_kind(drafter_path)
    settings = {**{k: str(v) for k, v in vars(args).items()}, "drafter_kind": kind}
    results: dict[str, Any] = {"settings": settings, "runs": {}}
    rows = []
    policies = {
        "plain": (None, 0, None, True),
        "plain, whole batch": (None, 0, None, False),
        **{f"k={k}": (drafter, k, None, True) for k in args.draft_lens},
        "load-aware": (drafter, longest, scheduler, True),
    }
    for batch in args.batches:
        groups = [prompts[g * batch : (g + 1) * batch] for g in range(groups_of[batch])]
        order = list(policies)
        # Per repeat and policy: what `decode` returned for each group.
        decoded = [{name: [] for name in order} for _ in range(args.repeats)]
        for repeat in range(args.repeats):
            for g, group in enumerate(groups):
                for name in order if (repeat + g) % 2 == 0 else order[::-1]:
                    policy_drafter, k, policy, shrink = policies[name]
                    decoded[repeat][name].append(
                        decode(target, group, args.new_tokens, args.temperature, policy_drafter, k, policy, stop,
                               longest, shrink, seed=repeat)
                    )
        runs: dict[str, dict[str, Any]] = {}
        for name in order:
            policy_drafter, k, _, _ = policies[name]
            rates = [measures(by_name[name], k, False)["tokens_per_second"] for by_name in decoded]
            runs[name] = measures([d for by_name in decoded for d in by_name[name]], k, policy_drafter is not None)
            runs[name]["tokens_per_second_runs"] = rates
            runs[name]["tokens_per_second"] = sum(rates) / len(rates)
        plain = runs["plain"]
        results["runs"][str(batch)] = runs
        for name, r in runs.items():
            cond = ", ".join(f"{a:.2f}" for a in r["conditional_acceptance"][:7])
            speedup = r["tokens_per_second"] / plain["tokens_per_second"]
            rows.append(
                f"| {batch} | {name} | {r['tokens_per_second']:.1f} | {speedup:.2f} "
                f"| {r['tau_with_bonus']:.2f} | {_fmt(r.get('tau_predicted_iid'))} | {_fmt(r.get('acceptance_rate'))} "
                f"| {cond} | {_fmt(r.get('drafter_cost_c'))} | {r['verified_per_round']:.2f} | {r['target_passes']} "
                f"| {r['ms_per_round']:.1f} |"
            )
    markdown = (
        f"Drafter: {settings['drafter_kind']}; target weights: {target.weights}. "
        "tau counts the bonus/correction token (plain decoding = 1.00). "
        f"Prompts: held-out mail ({args.prompts}), T={args.temperature}. "
        f"tok/s: the mean of {args.repeats} runs per policy, each group decoded by every policy in turn, "
        "in order and in reverse order by turns, each run sampling with its own seed; the other columns pool the runs. "
        f"Prompts per batch size: {', '.join(f'{b} x {groups_of[b]}' for b in args.batches)} (batch x groups).\n\n"
        "| batch | policy | tok/s | speedup | tau | tau iid | accept rate | conditional acceptance by position "
        "| c | verified/round | target passes | ms/round |\n" + "|---" * 12 + "|\n" + "\n".join(rows)
    )
    print(markdown)
    if not args.no_write:
        write_results(args.name, results, markdown)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
