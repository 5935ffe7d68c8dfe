"""`ModelConfig`: every dimension of a DeepSeek-V3.2 model, read from and written to `config.json`.

The file format is transformers' `DeepseekV32Config`, so a folder Jev writes loads in transformers
and a real DeepSeek-V3.2 folder loads in Jev. Values Jev cannot honour exactly (an FP8
quantisation config, attention biases, another activation) are refused with the field's name
rather than silently ignored.
"""

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A `config.json` value that is unknown, missing or contradicts another value."""


# Keys transformers or DeepSeek write that do not change the computation Jev performs.
_IGNORED_KEYS = frozenset(
    {
        "architectures", "auto_map", "dtype", "torch_dtype", "transformers_version", "use_cache",
        "output_router_logits", "initializer_range", "head_dim", "qk_head_dim", "layer_types",
        "num_nextn_predict_layers", "ep_size", "rope_interleave", "aux_loss_alpha", "seq_aux",
        "pretraining_tp", "router_aux_loss_coef", "_name_or_path", "model_type", "attention_dropout",
        "moe_layer_freq", "scoring_func", "topk_method", "hidden_act", "attention_bias", "mlp_bias",
        "rope_theta", "rope_scaling", "rope_parameters", "quantization_config", "num_key_value_heads",
    }
)

# Keys accepted only with the value DeepSeek-V3.2 (and Jev) computes with.
_REQUIRED_VALUES: dict[str, Any] = {
    "model_type": "deepseek_v32",
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "scoring_func": "sigmoid",
    "topk_method": "noaux_tc",
    "moe_layer_freq": 1,
    "attention_dropout": 0.0,
}

_YARN_KEYS = frozenset(
    {"factor", "original_max_position_embeddings", "mscale", "mscale_all_dim", "beta_fast", "beta_slow",
     "truncate", "attention_factor"}
)


@dataclass
class ModelConfig:
    """The architecture's dimensions, named as in transformers' `DeepseekV32Config`."""

    vocab_size: int = 8192
    hidden_size: int = 256
    intermediate_size: int = 640
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    q_lora_rank: int = 64
    kv_lora_rank: int = 64
    qk_nope_head_dim: int = 32
    qk_rope_head_dim: int = 16
    v_head_dim: int = 32
    index_n_heads: int = 4
    index_head_dim: int = 16
    index_topk: int = 64
    first_k_dense_replace: int = 4
    moe_intermediate_size: int = 128
    n_routed_experts: int = 0
    n_shared_experts: int = 1
    num_experts_per_tok: int = 2
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    norm_topk_prob: bool = True
    max_position_embeddings: int = 4096
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    tie_word_embeddings: bool = False
    bos_token_id: int | None = 0
    eos_token_id: int | None = 1
    pad_token_id: int | None = 2
    mlp_layer_types: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.mlp_layer_types:
            n_dense = min(self.first_k_dense_replace, self.num_hidden_layers)
            self.mlp_layer_types = ["dense"] * n_dense + ["sparse"] * (self.num_hidden_layers - n_dense)
        self.validate()

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def rope_type(self) -> str:
        return (self.rope_scaling or {}).get("rope_type", "default")

    def validate(self) -> None:
        """Refuse contradictory values, naming the field."""
        positive = [
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
            "index_n_heads", "index_head_dim", "index_topk", "max_position_embeddings",
        ]
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.qk_rope_head_dim % 2:
            raise ConfigError(f"qk_rope_head_dim must be even (RoPE rotates pairs), got {self.qk_rope_head_dim}")
        if self.index_head_dim < self.qk_rope_head_dim:
            raise ConfigError(
                f"index_head_dim ({self.index_head_dim}) must be at least qk_rope_head_dim "
                f"({self.qk_rope_head_dim}): the indexer applies RoPE to its first qk_rope_head_dim dims"
            )
        if len(self.mlp_layer_types) != self.num_hidden_layers:
            raise ConfigError(
                f"mlp_layer_types has {len(self.mlp_layer_types)} entries for {self.num_hidden_layers} layers"
            )
        unknown = sorted(set(self.mlp_layer_types) - {"dense", "sparse"})
        if unknown:
            raise ConfigError(f"mlp_layer_types may hold 'dense' or 'sparse', got {unknown}")
        if "sparse" in self.mlp_layer_types:
            self._validate_moe()
        if self.rope_type not in ("default", "yarn"):
            raise ConfigError(f"rope_parameters.rope_type must be 'default' or 'yarn', got {self.rope_type!r}")
        if self.rope_type == "yarn":
            self._validate_yarn()

    def _validate_moe(self) -> None:
        if self.n_routed_experts <= 0:
            raise ConfigError("n_routed_experts must be positive when mlp_layer_types has 'sparse' (MoE) layers")
        if self.n_group <= 0 or self.n_routed_experts % self.n_group:
            raise ConfigError(f"n_routed_experts ({self.n_routed_experts}) must divide into n_group ({self.n_group})")
        if self.n_routed_experts // self.n_group < 2:
            raise ConfigError("each expert group needs at least 2 experts (groups are scored by their top 2)")
        if not 0 < self.topk_group <= self.n_group:
            raise ConfigError(f"topk_group ({self.topk_group}) must be between 1 and n_group ({self.n_group})")
        reachable = self.topk_group * self.n_routed_experts // self.n_group
        if not 0 < self.num_experts_per_tok <= reachable:
            raise ConfigError(
                f"num_experts_per_tok ({self.num_experts_per_tok}) must be between 1 and the "
                f"{reachable} experts in topk_group groups"
            )

    def _validate_yarn(self) -> None:
        scaling = self.rope_scaling or {}
        unknown = sorted(set(scaling) - _YARN_KEYS - {"rope_type", "rope_theta", "type"})
        if unknown:
            raise ConfigError(f"rope_parameters has unknown keys for yarn: {unknown}")
        for key in ("factor", "original_max_position_embeddings"):
            if not isinstance(scaling.get(key), int | float) or scaling[key] <= 0:
                raise ConfigError(f"rope_parameters.{key} must be a positive number for yarn")

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "ModelConfig":
        """Read a transformers `config.json` dict (old `rope_scaling` or new `rope_parameters` form)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known - _IGNORED_KEYS)
        if unknown:
            raise ConfigError(f"unknown config keys {unknown}: Jev reads DeepSeek-V3.2 configs only")
        if raw.get("quantization_config"):
            raise ConfigError("quantization_config is set: Jev loads float weights, not FP8-quantised ones")
        for key, expected in _REQUIRED_VALUES.items():
            if key in raw and raw[key] is not None and raw[key] != expected:
                raise ConfigError(f"{key} must be {expected!r}, got {raw[key]!r}")
        n_kv = raw.get("num_key_value_heads")
        if n_kv is not None and n_kv != raw.get("num_attention_heads", n_kv):
            raise ConfigError("num_key_value_heads must equal num_attention_heads: MLA has no grouped KV heads")
        if raw.get("q_lora_rank", 1) in (None, 0):
            raise ConfigError("q_lora_rank must be set: the DSA indexer reads the compressed query")
        values = {k: v for k, v in raw.items() if k in known and k not in ("rope_theta", "rope_scaling")}
        values.pop("num_key_value_heads", None)
        values["rope_theta"], values["rope_scaling"] = _read_rope(raw)
        if values.get("eos_token_id") is not None and isinstance(values["eos_token_id"], list):
            values["eos_token_id"] = values["eos_token_id"][0]
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The transformers `config.json` form (`rope_parameters`, v5 layout)."""
        out = {k: v for k, v in asdict(self).items() if k not in ("rope_theta", "rope_scaling")}
        rope = {"rope_type": "default", "rope_theta": self.rope_theta}
        if self.rope_scaling:
            rope = {**self.rope_scaling, "rope_theta": self.rope_theta}
        out.update(
            architectures=["DeepseekV32ForCausalLM"],
            model_type="deepseek_v32",
            num_key_value_heads=self.num_attention_heads,
            hidden_act="silu",
            attention_bias=False,
            mlp_bias=False,
            rope_parameters=rope,
        )
        return out

    @classmethod
    def load(cls, path: str | Path) -> "ModelConfig":
        path = Path(path)
        file = path / "config.json" if path.is_dir() else path
        try:
            raw = json.loads(file.read_text())
        except FileNotFoundError as exc:
            raise ConfigError(f"no config.json at {file}") from exc
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{file} is not valid JSON: {exc}") from exc
        return cls.from_dict(raw)

    def save(self, path: str | Path) -> None:
        Path(path, "config.json").write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")


def _read_rope(raw: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """Normalise the two spellings of the RoPE settings to (theta, yarn parameters or None)."""
    params = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
    theta = params.pop("rope_theta", raw.get("rope_theta", 10000.0))
    rope_type = params.pop("rope_type", params.pop("type", "default"))
    if rope_type == "default":
        if params:
            raise ConfigError(f"rope_parameters has scaling keys {sorted(params)} but rope_type is 'default'")
        return float(theta), None
    return float(theta), {"rope_type": rope_type, **params}


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature correction `0.1 * mscale * ln(scale) + 1` (1 when not stretched)."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0
