"""Monte-Carlo losslessness of the real torch path, and the power to catch known-wrong variants.

Target: a tiny random `Model` (V = 16, two layers); drafter: another, one layer (or, in three
configurations, the n-gram lookup drafter, whose q is one-hot); both models with their logits
scaled up, so p and q are peaked and differ. Each configuration runs `generate` on `SAMPLES` copies
of one prompt, in calls of `CHUNK` rows, and compares the joint histogram of the first two emitted
tokens (256 cells) with the target's exact joint law by chi-square (cells expected below 5 pooled).
The configurations form one family, Holm-corrected at level `ALPHA`: Holm rejects some hypothesis
iff the smallest p-value is at most `ALPHA / m`, so each configuration is its own test of `p >
ALPHA / m`, the same criterion, split so that xdist spreads the configurations over workers. Each
mutation test patches one known bug into the same path and must be flagged at p < 1e-6 from
`POWER_SAMPLES` sequences (its p-values are below 1e-200).

Cost: a row costs the ops its tokens go through, about 26 us on one core here whatever the batch,
so the models are as narrow as `Model` allows (one head, widths 2 to 8; twice as fast as 32 wide).
Calls of 2 * 10^4 rows or more cost least per row, and 20,000 is the batch the load-aware profile
below is drawn for. The issue's 10^6 sequences per configuration (`JEV_SPEC_SAMPLES=1000000`)
take about 10 CPU-minutes for the 23 configurations; the default 250,000 takes about 2.
"""

import os
from dataclasses import dataclass, replace

import pytest
import torch
from scipy import stats

from jev.generate import accept
from jev.generate import loop as generate_module
from jev.generate.accept import SamplingSettings, warp
from jev.generate.drafters import Draft
from jev.generate.drafters.autoregressive import AutoregressiveDrafter
from jev.generate.drafters.lookup import LookupDrafter
from jev.generate.loop import generate
from jev.generate.scheduler import FixedLength, LoadAwareScheduler, VerifyProfile
from jev.model import Model
from tests.tiny import random_model, tiny_config

V = 16
SAMPLES = int(os.environ.get("JEV_SPEC_SAMPLES", "250000"))
POWER_SAMPLES = 20_000
CHUNK = 20_000
ALPHA = 1e-3
CORRECT_RECOVERY = accept.recovery_distribution
# `peaked_model`'s default shape (the DSpark tests' target); the tests here use the cheaper LEAN.
SMALL = dict(
    vocab_size=V,
    hidden_size=32,
    intermediate_size=48,
    num_attention_heads=2,
    q_lora_rank=16,
    kv_lora_rank=16,
    qk_nope_head_dim=8,
    qk_rope_head_dim=4,
    v_head_dim=8,
    index_n_heads=2,
    index_head_dim=8,
)
LEAN = dict(
    vocab_size=V,
    hidden_size=8,
    intermediate_size=8,
    num_attention_heads=1,
    q_lora_rank=4,
    kv_lora_rank=4,
    qk_nope_head_dim=2,
    qk_rope_head_dim=2,
    v_head_dim=2,
    index_n_heads=1,
    index_head_dim=4,
)
LEAN_SCALE = 6.0


pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]


def peaked_model(layers: int, seed: int, shape: dict[str, int] = SMALL, scale: float = 3.0) -> Model:
    """A random tiny model with its logits scaled up, so p and q are far from uniform and differ."""
    model = random_model(tiny_config(**shape, num_hidden_layers=layers), seed=seed)
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model


@pytest.fixture(scope="module")
def models() -> tuple[Model, Model]:
    return peaked_model(2, 0, LEAN, LEAN_SCALE), peaked_model(1, 1, LEAN, LEAN_SCALE)


class RandomLengths(FixedLength):
    """Verify a uniformly random prefix length 0..K, blind to the drafted tokens."""

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    def draft_depth(self, active: torch.Tensor, draft_len: int) -> int:
        return draft_len

    def verify_lengths(self, survival: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        k = survival.shape[1]
        return torch.randint(0, k + 1, (survival.shape[0],), generator=self.generator)


class Threshold(FixedLength):
    """Verify the prefix whose estimated survival stays at or above `level`."""

    def __init__(self, level: float) -> None:
        self.level = level

    def verify_lengths(self, survival: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        return (survival >= self.level).to(torch.int64).cumprod(1).sum(1)


def load_aware() -> LoadAwareScheduler:
    """A synthetic profile: flat up to 2 tokens per sequence of 20k, then pass time grows linearly."""
    tokens = (1, 40_000, 80_000, 160_000)
    return LoadAwareScheduler(VerifyProfile.by_positions(tokens, (1.0, 1.0, 0.5, 0.25)))


@dataclass(frozen=True)
class Config:
    k: int
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    policy: str = "fixed"
    prompt: tuple[int, ...] = (3, 1, 4)
    lookup: bool = False  # the n-gram lookup drafter instead of the drafter model

    def make_policy(self):
        return {
            "fixed": FixedLength,
            "random": lambda: RandomLengths(11),
            "threshold": lambda: Threshold(0.1),
            "load_aware": load_aware,
        }[self.policy]()


CONFIGS = [
    *(Config(k, prompt=(k, 2, 7)) for k in range(1, 6)),
    Config(3, temperature=0.7),
    Config(3, temperature=1.5),
    Config(2, top_k=5),
    Config(4, top_p=0.8),
    Config(3, temperature=0.7, top_k=6, top_p=0.9, prompt=(9, 9)),
    Config(4, policy="random"),
    Config(5, temperature=1.5, top_p=0.9, policy="random"),
    Config(2, top_k=4, policy="random", prompt=(5,)),
    Config(3, policy="threshold"),
    Config(4, policy="load_aware"),
    Config(1, temperature=0.7, top_p=0.6),
    Config(5, temperature=0.7, top_k=3),
    Config(2, temperature=1.5, prompt=(15, 0, 8, 8)),
    Config(3, top_k=8, top_p=0.95, policy="random"),
    Config(4, temperature=1.2, prompt=(1,)),
    Config(3, prompt=(5, 2, 5, 2), lookup=True),
    Config(2, temperature=0.7, top_k=5, prompt=(4, 4), lookup=True),
    Config(4, policy="load_aware", prompt=(1, 2, 3, 1, 2), lookup=True),
]


@torch.no_grad()
def target_joint(model: Model, config: Config) -> torch.Tensor:
    """`[V, V]` P(t1, t2) under plain decoding, from cache-free forward passes in float64."""
    model = model.double()
    settings = SamplingSettings.build(1, config.temperature, config.top_k, config.top_p)
    prompt = torch.tensor([config.prompt])
    first = warp(model(prompt)[:, -1], settings)[0]
    continued = torch.cat((prompt.expand(V, -1), torch.arange(V).view(V, 1)), dim=1)
    second = warp(model(continued)[:, -1], SamplingSettings.build(V, config.temperature, config.top_k, config.top_p))
    model.float()
    return first.view(V, 1) * second


def sampled_joint(target: Model, drafter: Model, config: Config, n: int, seed: int, **patch) -> torch.Tensor:
    """`[V, V]` counts of the first two tokens of n sequences, from `generate` calls of `CHUNK` rows;
    call c is seeded `seed * 1000 + c`, and one policy and one drafter serve every call."""
    inner = LookupDrafter(V) if config.lookup else AutoregressiveDrafter(drafter)
    draft = patch.pop("drafter_wrapper", lambda d: d)(inner)
    policy = config.make_policy()
    counts = torch.zeros(V * V, dtype=torch.int64)
    for chunk, start in enumerate(range(0, n, CHUNK)):
        out = generate(
            target,
            [list(config.prompt)] * min(CHUNK, n - start),
            2,
            temperature=config.temperature,
            top_k=config.top_k,
            top_p=config.top_p,
            seed=seed * 1000 + chunk,
            drafter=draft,
            draft_len=config.k,
            policy=policy,
        )
        pairs = torch.tensor(out.tokens)
        counts += torch.bincount(pairs[:, 0] * V + pairs[:, 1], minlength=V * V)
    return counts.view(V, V)


def chi_square_p(counts: torch.Tensor, law: torch.Tensor) -> float:
    """Pearson chi-square p-value; expected counts under 5 pooled into one cell; mass off-support fails."""
    observed, expected = counts.flatten().double(), counts.sum() * law.flatten()
    if bool((observed[expected == 0] > 0).any()):
        return 0.0
    small = expected < 5
    observed = torch.cat((observed[~small], observed[small].sum().view(1)))
    expected = torch.cat((expected[~small], expected[small].sum().view(1)))
    keep = expected > 0
    expected = expected[keep] * observed[keep].sum() / expected[keep].sum()
    return float(stats.chisquare(observed[keep].numpy(), expected.numpy()).pvalue)


def holm(p_values: list[float]) -> list[float]:
    """Holm step-down adjusted p-values, in the input order."""
    order = sorted(range(len(p_values)), key=p_values.__getitem__)
    adjusted, running = [0.0] * len(p_values), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


@pytest.mark.parametrize("index", range(len(CONFIGS)))
def test_first_two_tokens_match_the_target_law(index: int, models: tuple[Model, Model]) -> None:
    """One configuration of the Holm family: `p > ALPHA / m` (see the module docstring)."""
    target, drafter = models
    config = CONFIGS[index]
    counts = sampled_joint(target, drafter, config, SAMPLES, seed=100 + index)
    p_value = chi_square_p(counts, target_joint(target, config))
    assert p_value > ALPHA / len(CONFIGS), f"{config}: p = {p_value:.3g}"


def residual_from_p(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return p


def unnormalised_residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return (p - q).clamp(min=0)


def in_place_residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    residual = p.sub_(q).clamp_(min=0)
    return residual.div_(residual.sum(-1, keepdim=True).clamp(min=1e-30))


def warp_without_temperature(logits: torch.Tensor, settings: SamplingSettings) -> torch.Tensor:
    return warp(logits, replace(settings, temperature=torch.ones_like(settings.temperature)))


def warp_without_top_p(logits: torch.Tensor, settings: SamplingSettings) -> torch.Tensor:
    return warp(logits, replace(settings, top_p=torch.ones_like(settings.top_p)))


def top_p_after_residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    residual = CORRECT_RECOVERY(p, q)
    return warp(residual.log(), SamplingSettings.build(residual.shape[0], top_p=0.6))


class Retrospective:
    """A drafter whose survival reads each drafted token's own q(x_j): a scheduler using it looks at x_j."""

    def __init__(self, inner: AutoregressiveDrafter) -> None:
        self.inner = inner

    @property
    def passes(self) -> int:
        return self.inner.passes

    def start(self, prompts: list[list[int]], max_len: int) -> None:
        self.inner.start(prompts, max_len)

    def propose(self, pending, active, settings, uniforms) -> Draft:
        draft = self.inner.propose(pending, active, settings, uniforms)
        own = draft.probs.gather(-1, draft.tokens.unsqueeze(-1)).squeeze(-1).double()
        return replace(draft, survival=own.cumprod(1))

    def commit(self, tokens: torch.Tensor, counts: torch.Tensor) -> None:
        self.inner.commit(tokens, counts)

    def keep(self, rows: torch.Tensor) -> None:
        self.inner.keep(rows)


MUTATIONS = {
    "residual drawn from p": (Config(3), {(accept, "recovery_distribution"): residual_from_p}),
    "missing renormalisation": (Config(3), {(accept, "recovery_distribution"): unnormalised_residual}),
    "temperature not applied to p": (Config(3, temperature=0.6), {(generate_module, "warp"): warp_without_temperature}),
    "top-p applied after the residual": (
        Config(3, top_p=0.6),
        {(generate_module, "warp"): warp_without_top_p, (accept, "recovery_distribution"): top_p_after_residual},
    ),
    "p mutated in place": (Config(3, policy="random"), {(accept, "recovery_distribution"): in_place_residual}),
    "retrospective scheduler": (Config(3, policy="threshold"), {"drafter_wrapper": Retrospective}),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_known_wrong_variants_are_caught(
    name: str, models: tuple[Model, Model], monkeypatch: pytest.MonkeyPatch
) -> None:
    target, drafter = models
    config, patches = MUTATIONS[name]
    extra = {}
    for key, value in patches.items():
        if key == "drafter_wrapper":
            extra[key] = value
        else:
            monkeypatch.setattr(*key, value)
    law = target_joint(target, config)
    p_value = chi_square_p(sampled_joint(target, drafter, config, POWER_SAMPLES, seed=7, **extra), law)
    assert p_value < 1e-6, f"{name} not caught: p = {p_value:.3g}"
