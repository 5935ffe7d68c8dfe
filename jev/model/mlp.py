"""The feed-forward blocks: a dense SwiGLU MLP and DeepSeek's MoE with a sigmoid router."""

import torch
import torch.nn.functional as F
from torch import nn

from jev.model.config import ModelConfig


class MLP(nn.Module):
    """SwiGLU: `down(silu(gate(x)) * up(x))`. Shapes `[..., D] -> [..., D]`."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Router(nn.Module):
    """DeepSeek-V3's auxiliary-loss-free router.

    Scores are `sigmoid(W x)`; the choice adds `e_score_correction_bias` (a load-balancing bias
    learned outside the gradient), is limited to the `topk_group` expert groups whose top-2 scores
    sum highest, and the chosen experts are weighted by their unbiased scores, normalised when
    `norm_topk_prob`, times `routed_scaling_factor`.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.weight = nn.Parameter(torch.zeros(config.n_routed_experts, config.hidden_size))
        self.register_buffer("e_score_correction_bias", torch.zeros(config.n_routed_experts))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`x [N, D]` -> (expert weights `[N, k]`, expert indices `[N, k]`)."""
        cfg = self.config
        scores = F.linear(x.float(), self.weight.float()).sigmoid()
        biased = scores + self.e_score_correction_bias
        grouped = biased.view(-1, cfg.n_group, cfg.n_routed_experts // cfg.n_group)
        group_scores = grouped.topk(2, dim=-1).values.sum(-1)
        top_groups = group_scores.topk(cfg.topk_group, dim=-1, sorted=False).indices
        group_mask = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, top_groups, True)
        expert_mask = group_mask.repeat_interleave(cfg.n_routed_experts // cfg.n_group, dim=1)
        chosen = biased.masked_fill(~expert_mask, float("-inf")).topk(cfg.num_experts_per_tok, dim=-1, sorted=False)
        weights = scores.gather(1, chosen.indices)
        if cfg.norm_topk_prob:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        return weights * cfg.routed_scaling_factor, chosen.indices


class MoE(nn.Module):
    """Routed experts plus always-on shared experts. Shapes `[B, T, D] -> [B, T, D]`."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.gate = Router(config)
        self.experts = nn.ModuleList(
            MLP(config.hidden_size, config.moe_intermediate_size) for _ in range(config.n_routed_experts)
        )
        self.shared_experts = MLP(config.hidden_size, config.moe_intermediate_size * config.n_shared_experts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        weights, chosen = self.gate(flat)
        routed = torch.zeros_like(flat)
        for expert_id in chosen.unique().tolist():
            token, slot = torch.where(chosen == expert_id)
            out = self.experts[expert_id](flat[token]) * weights[token, slot, None]
            routed.index_add_(0, token, out.to(routed.dtype))
        return routed.view_as(x) + self.shared_experts(x)
