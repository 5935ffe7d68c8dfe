"""Monte-Carlo losslessness of the real torch path, and the power to catch known-wrong variants.

Target: a tiny random `Model` (V = 16); drafter: another, one layer. Each configuration runs
`generate` on N copies of one prompt as ONE batch and compares the joint histogram of the first
two emitted tokens (256 cells) with the target's exact joint law by chi-square (cells expected
below 5 pooled), Holm-corrected across configurations. N per configuration is
`JEV_SPEC_SAMPLES` (default 20,000: the issue's 10^6 x 20 configurations takes ~15 minutes of
CPU here, so the default is what fits the ~60 s test budget; set the variable for the full run).
Each mutation test patches one known bug into the same path and must be flagged at p < 1e-6.
"""

import os
from dataclasses import dataclass, replace

import pytest
import torch
from conftest import random_model, tiny_config
from scipy import stats

from jev.engine import accept
from jev.engine import generate as generate_module
from jev.engine.accept import SamplingSettings, warp
from jev.engine.drafters import Draft
from jev.engine.drafters.autoregressive import AutoregressiveDrafter
from jev.engine.generate import generate
from jev.engine.scheduler import FixedLength, LoadAwareScheduler, VerifyProfile
from jev.model import Model

V = 16
SAMPLES = int(os.environ.get("JEV_SPEC_SAMPLES", "20000"))
CORRECT_RECOVERY = accept.recovery_distribution
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


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: on a shared 2-core machine, OpenMP waits cost more than they save."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def peaked_model(layers: int, seed: int) -> Model:
    """A random tiny model with its logits scaled up, so p and q are far from uniform and differ."""
    model = random_model(tiny_config(**SMALL, num_hidden_layers=layers), seed=seed)
    with torch.no_grad():
        model.lm_head.weight.mul_(3.0)
    return model


@pytest.fixture(scope="module")
def models() -> tuple[Model, Model]:
    return peaked_model(2, seed=0), peaked_model(1, seed=1)


class RandomLengths:
    """Verify a uniformly random prefix length 0..K, blind to the drafted tokens."""

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    def draft_depth(self, n_active: int, draft_len: int) -> int:
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
    return LoadAwareScheduler(VerifyProfile(tokens, (1.0, 1.0, 0.5, 0.25)))


@dataclass(frozen=True)
class Config:
    k: int
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    policy: str = "fixed"
    prompt: tuple[int, ...] = (3, 1, 4)

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
    draft = patch.pop("drafter_wrapper", lambda d: d)(AutoregressiveDrafter(drafter))
    out = generate(
        target,
        [list(config.prompt)] * n,
        2,
        temperature=config.temperature,
        top_k=config.top_k,
        top_p=config.top_p,
        seed=seed,
        drafter=draft,
        draft_len=config.k,
        policy=config.make_policy(),
    )
    pairs = torch.tensor(out.tokens)
    return torch.bincount(pairs[:, 0] * V + pairs[:, 1], minlength=V * V).view(V, V)


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


def test_first_two_tokens_match_the_target_law(models: tuple[Model, Model]) -> None:
    target, drafter = models
    p_values = [
        chi_square_p(sampled_joint(target, drafter, config, SAMPLES, seed=100 + i), target_joint(target, config))
        for i, config in enumerate(CONFIGS)
    ]
    adjusted = holm(p_values)
    assert min(adjusted) > 1e-3, dict(zip(map(str, CONFIGS), p_values, strict=True))


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

    def start(self, prompts: list[list[int]], max_len: int) -> None:
        self.inner.start(prompts, max_len)

    def propose(self, pending, active, settings, uniforms) -> Draft:
        draft = self.inner.propose(pending, active, settings, uniforms)
        own = draft.probs.gather(-1, draft.tokens.unsqueeze(-1)).squeeze(-1).double()
        return replace(draft, survival=own.cumprod(1))

    def commit(self, tokens: torch.Tensor, counts: torch.Tensor) -> None:
        self.inner.commit(tokens, counts)


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
    p_value = chi_square_p(sampled_joint(target, drafter, config, SAMPLES, seed=7, **extra), law)
    assert p_value < 1e-6, f"{name} not caught: p = {p_value:.3g}"
