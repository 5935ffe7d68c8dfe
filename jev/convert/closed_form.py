"""GQA attention rewritten as MLA in closed form, from the source weights and a few calibration activations.

Per layer, with `u` the attention input before the input norm's gain (that gain is folded into every
attention projection, and the norm's weight set to ones):

- Query: `q_lora_rank = hidden_size` and `q_a_proj = I`, so `q_a_layernorm(u) = u` up to the norm's
  eps (u is already RMS-normalised); `q_b_proj` holds the original query rows as the no-RoPE part and
  their RoPE pairs as the RoPE part, every row times `sqrt((d_nope + d_rope) / d_head)` because MLA's
  softmax scale is `(d_nope + d_rope)^-1/2` where the source's was `d_head^-1/2`.
- Shared RoPE key (RoRoPE): for each kept frequency the KV groups' key pairs are mixed by the top
  eigenvector of their pooled 2 x 2 covariance. A real mix commutes with the pair's rotation, so the
  mixed pair is a rotating key, and each query head's RoPE part is its pair scaled by its group's
  weight in that mix: exact for the principal component. What is left of each group's key (the other
  components, and every pair of a dropped frequency) becomes the no-RoPE key.
- Joint K/V latent: the residual keys (scaled to the values' energy) and the values, stacked, are
  compressed by PCA of their second moment under the calibration inputs; the latent is whitened so
  its RMS stays near 1 from token to token, and `kv_a_layernorm`'s gain is fitted to what is left.
  At `kv_lora_rank = hidden_size` the latent is `u` itself and nothing is truncated.
- `o_proj`, the MLPs, the norms and the embeddings carry over unchanged; the indexer starts random.

Frequencies: Jev's RoPE slot `i` turns at `theta'^(-2i/d_r)`. Keeping the source's pairs
`0, m, 2m, ...` (stride `m`) matches them exactly with `theta' = theta^(m d_r / d_head)`.
"""

import math
from dataclasses import asdict, dataclass

import torch

from jev.convert.llama import LlamaTeacher, rms_norm
from jev.convert.source import LlamaSource, SourceConfig, SourceError
from jev.model import Model, ModelConfig

# Jev's latent norms (q_a_layernorm, kv_a_layernorm) use this eps, as DeepSeek's do.
LATENT_NORM_EPS = 1e-6


@dataclass(frozen=True)
class MLARanks:
    """The shape of the converted attention: what the cache and the indexer cost, and what is kept."""

    kv_lora_rank: int = 128
    qk_rope_head_dim: int = 32
    rope_stride: int = 1
    index_n_heads: int = 4
    index_head_dim: int = 32
    index_topk: int = 256

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class LayerStatistics:
    """Calibration statistics of one layer's attention input `u`: `E[u u^T]` (float64) and some rows of u."""

    second_moment: torch.Tensor
    sample: torch.Tensor


def target_config(source: SourceConfig, ranks: MLARanks) -> ModelConfig:
    """The DeepSeek-V3.2 config of the converted model: dense MLPs, MLA with `ranks`, tied as the source."""
    d_head, d_rope = source.head_dim, ranks.qk_rope_head_dim
    if ranks.rope_stride < 1 or ranks.rope_stride * d_rope > d_head:
        raise SourceError(
            f"qk_rope_head_dim {d_rope} at stride {ranks.rope_stride} asks for more than the {d_head // 2} "
            "RoPE pairs of a source head"
        )
    if ranks.kv_lora_rank > source.hidden_size:
        raise SourceError(f"kv_lora_rank {ranks.kv_lora_rank} exceeds hidden_size {source.hidden_size}")
    return ModelConfig(
        vocab_size=source.vocab_size,
        hidden_size=source.hidden_size,
        intermediate_size=source.intermediate_size,
        num_hidden_layers=source.num_hidden_layers,
        num_attention_heads=source.num_attention_heads,
        q_lora_rank=source.hidden_size,
        kv_lora_rank=ranks.kv_lora_rank,
        qk_nope_head_dim=d_head,
        qk_rope_head_dim=d_rope,
        v_head_dim=d_head,
        index_n_heads=ranks.index_n_heads,
        index_head_dim=ranks.index_head_dim,
        index_topk=ranks.index_topk,
        first_k_dense_replace=source.num_hidden_layers,
        max_position_embeddings=source.max_position_embeddings,
        rms_norm_eps=source.rms_norm_eps,
        rope_theta=source.rope_theta ** (ranks.rope_stride * d_rope / d_head),
        tie_word_embeddings=source.tie_word_embeddings,
        bos_token_id=source.bos_token_id,
        eos_token_id=source.eos_token_id,
        pad_token_id=source.pad_token_id,
    )


@torch.no_grad()
def collect_statistics(
    teacher: LlamaTeacher, blocks: torch.Tensor, sample_rows: int = 4096, batch_size: int = 4
) -> list[LayerStatistics]:
    """Run the teacher over `blocks [N, T]` and keep each layer's `E[u u^T]` and up to `sample_rows` rows of u."""
    cfg = teacher.config
    ones = torch.ones(cfg.hidden_size)
    moments = [torch.zeros(cfg.hidden_size, cfg.hidden_size, dtype=torch.float64) for _ in range(cfg.num_hidden_layers)]
    samples: list[list[torch.Tensor]] = [[] for _ in range(cfg.num_hidden_layers)]
    per_batch = max(1, sample_rows * batch_size // len(blocks))
    generator = torch.Generator().manual_seed(0)
    count = 0
    for start in range(0, len(blocks), batch_size):
        _, traces = teacher(blocks[start : start + batch_size], trace=True)
        for layer, trace in enumerate(traces):
            u = rms_norm(trace.residual, ones, cfg.rms_norm_eps).reshape(-1, cfg.hidden_size).double()
            moments[layer] += u.T @ u
            rows = torch.randperm(len(u), generator=generator)[:per_batch]
            samples[layer].append(u[rows].float())
        count += traces[0].residual.shape[0] * traces[0].residual.shape[1]
    return [LayerStatistics(m / count, torch.cat(s)[:sample_rows]) for m, s in zip(moments, samples, strict=True)]


def convert(source: LlamaSource, ranks: MLARanks, statistics: list[LayerStatistics], seed: int = 0) -> Model:
    """The converted model: carried-over weights, closed-form MLA, a randomly initialised indexer."""
    config = target_config(source.config, ranks)
    torch.manual_seed(seed)
    model = Model(config)
    w = source.weights
    state = {name: w[source_name] for name, source_name in carried_over(config).items()}
    for i in range(config.num_hidden_layers):
        src, dst = f"model.layers.{i}.", f"backbone.layers.{i}."
        state[dst + "input_layernorm.weight"] = torch.ones(config.hidden_size)
        gain = w[src + "input_layernorm.weight"].double()
        attention = convert_attention(
            {name: w[src + f"self_attn.{name}.weight"].double() for name in ("q_proj", "k_proj", "v_proj", "o_proj")},
            gain, statistics[i], source.config, ranks,
        )
        state.update({dst + "self_attn." + name: t.float() for name, t in attention.items()})
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or any(".indexer." not in name and name != "lm_head.weight" for name in missing):
        raise SourceError(f"conversion left weights unset: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return model.eval()


def carried_over(config: ModelConfig) -> dict[str, str]:
    """Jev's weights that are the source's as they are, each with the source's (Llama) name."""
    names = {"backbone.embed_tokens.weight": "model.embed_tokens.weight", "backbone.norm.weight": "model.norm.weight"}
    if not config.tie_word_embeddings:
        names["lm_head.weight"] = "lm_head.weight"
    for i in range(config.num_hidden_layers):
        src, dst = f"model.layers.{i}.", f"backbone.layers.{i}."
        names[dst + "post_attention_layernorm.weight"] = src + "post_attention_layernorm.weight"
        for name in ("gate_proj", "up_proj", "down_proj"):
            names[dst + f"mlp.{name}.weight"] = src + f"mlp.{name}.weight"
    return names


def equal_to_source(config: ModelConfig) -> dict[str, str]:
    """Every Jev weight the closed form sets to a source weight as it is (the carried-over ones and
    `o_proj`), with the source's name: what a converted folder can name in its base instead of storing."""
    names = carried_over(config)
    for i in range(config.num_hidden_layers):
        names[f"backbone.layers.{i}.self_attn.o_proj.weight"] = f"model.layers.{i}.self_attn.o_proj.weight"
    return names


def convert_attention(
    weights: dict[str, torch.Tensor],
    gain: torch.Tensor,
    statistics: LayerStatistics,
    source: SourceConfig,
    ranks: MLARanks,
) -> dict[str, torch.Tensor]:
    """One layer's MLA weights (float64) from its q/k/v/o projections and the input norm's `gain`."""
    d_head, d_rope, hidden = source.head_dim, ranks.qk_rope_head_dim, source.hidden_size
    n_heads, n_groups = source.num_attention_heads, source.num_key_value_heads
    group_of = [h // (n_heads // n_groups) for h in range(n_heads)]
    sigma = statistics.second_moment
    wq = (weights["q_proj"] * gain).view(n_heads, d_head, hidden)
    wk = (weights["k_proj"] * gain).view(n_groups, d_head, hidden)
    wv = (weights["v_proj"] * gain).view(n_groups, d_head, hidden)

    key_residual = wk.clone()
    k_rope = torch.zeros(d_rope, hidden, dtype=torch.float64)
    q_rope = torch.zeros(n_heads, d_rope, hidden, dtype=torch.float64)
    for slot in range(d_rope // 2):
        pair = slice(2 * slot * ranks.rope_stride, 2 * slot * ranks.rope_stride + 2)
        mix = _principal_mix(wk[:, pair], sigma)
        shared = torch.einsum("g,gph->ph", mix, wk[:, pair])
        k_rope[2 * slot : 2 * slot + 2] = shared
        key_residual[:, pair] -= mix.view(-1, 1, 1) * shared
        for h in range(n_heads):
            q_rope[h, 2 * slot : 2 * slot + 2] = mix[group_of[h]] * wq[h, pair]

    scale = math.sqrt((d_head + d_rope) / d_head)
    q_b = torch.cat((wq, q_rope), dim=1).reshape(-1, hidden) * scale
    down, up = _latent(key_residual.reshape(-1, hidden), wv.reshape(-1, hidden), sigma, ranks.kv_lora_rank, hidden)
    up_k, up_v = up.view(2, n_groups, d_head, -1)
    kv_b = torch.cat((up_k[group_of], up_v[group_of]), dim=1).reshape(-1, up.shape[-1])
    return {
        "q_a_proj.weight": torch.eye(hidden, dtype=torch.float64),
        "q_a_layernorm.weight": norm_gain(statistics.sample.double()),
        "q_b_proj.weight": q_b,
        "kv_a_proj_with_mqa.weight": torch.cat((down, k_rope)),
        "kv_a_layernorm.weight": norm_gain(statistics.sample.double() @ down.T),
        "kv_b_proj.weight": kv_b,
        "o_proj.weight": weights["o_proj"],
    }


def _principal_mix(pairs: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """`pairs [G, 2, D]`: the unit mix of the groups' key pairs holding most of their energy, `[G]`."""
    energy = torch.einsum("gpd,de,hpe->gh", pairs, sigma, pairs)
    mix = torch.linalg.eigh(energy).eigenvectors[:, -1]
    return mix if mix.sum() >= 0 else -mix


def _latent(
    keys: torch.Tensor, values: torch.Tensor, sigma: torch.Tensor, rank: int, hidden: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(down `[r, D]`, up `[rows(keys) + rows(values), r]`) with `[keys; values] ~= up @ down`.

    Keys are scaled to the values' mean energy before the PCA (keys dominate a plain one) and
    scaled back in `up`; the latent is whitened (each coordinate divided by its RMS, `up` scaled to
    match) so the norm after it rescales tokens less. At full rank the latent is the input itself.
    """
    if rank == hidden:
        return torch.eye(hidden, dtype=torch.float64), torch.cat((keys, values))
    key_energy = torch.einsum("rd,de,re->", keys, sigma, keys) / len(keys)
    value_energy = torch.einsum("rd,de,re->", values, sigma, values) / len(values)
    # no residual key at all (one KV head, every pair rotary) leaves nothing to balance
    alpha = torch.sqrt(key_energy / value_energy) if key_energy > 0 and value_energy > 0 else torch.tensor(1.0)
    stacked = torch.cat((keys / alpha, values))
    eigenvalues, eigenvectors = torch.linalg.eigh(stacked @ sigma @ stacked.T)
    top, spread = eigenvectors[:, -rank:], eigenvalues[-rank:].clamp(min=1e-12).sqrt()
    down = (top.T @ stacked) / spread.unsqueeze(1)
    up = top * spread
    up[: len(keys)] *= alpha
    return down, up


def norm_gain(latent: torch.Tensor) -> torch.Tensor:
    """The RMSNorm gain `[r]` that best undoes the norm on these latent rows `[N, r]`, per channel.

    Minimises `E[(g_j c_j / rms(c) - c_j)^2]`: `g_j = E[c_j^2 / rms] / E[c_j^2 / rms^2]`.
    """
    rms = (latent.pow(2).mean(-1, keepdim=True) + LATENT_NORM_EPS).sqrt()
    squares = latent.pow(2)
    return (squares / rms).mean(0) / (squares / rms.pow(2)).mean(0).clamp(min=1e-30)
