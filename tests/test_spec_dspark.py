"""The DSpark drafter: lossless under the shared accept rule, non-anticipating survival, the Markov
head's effect, calibration, its folder, and `jev train drafter --kind dspark`."""

import argparse
import json
import math
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
from test_spec_statistical import Config, chi_square_p, holm, peaked_model, target_joint

from jev.cli import build_parser
from jev.generate.accept import SamplingSettings, sample_from, warp
from jev.generate.drafters import Draft, ReadsTargetStates, load_drafter
from jev.generate.drafters.autoregressive import AutoregressiveDrafter
from jev.generate.drafters.dspark import DSparkConfig, DSparkDrafter, DSparkHead
from jev.generate.loop import TargetState, generate
from jev.generate.scheduler import LoadAwareScheduler, VerifyProfile
from jev.model import LatentCache, Model
from jev.ragged import pad_rows
from jev.schema import JevError
from jev.tokenizer import save_tokenizer
from jev.train.dspark import (
    acceptance_outcomes,
    calibrate,
    dspark_loss,
    fit_survival_calibration,
    kl_by_tenth,
    position_weights,
    survival_ece,
    target_states,
)
from tests.tiny import random_model, tiny_config, tiny_tokenizer

V = 16
PROMPTS = [[(7 * i + 3 * j) % V for j in range(2 + (5 * i) % 11)] for i in range(16)]
NEW = 16


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def target() -> Model:
    """A peaked 16-token target: random drafts are accepted often enough to exercise every path."""
    return peaked_model(2, seed=0).double()


def random_head(target: Model, markov_rank: int = 8, positions: int = 5, seed: int = 1) -> DSparkHead:
    """Random weights; the Markov head's drawn wide so its bias is of the order of the logits."""
    torch.manual_seed(seed)
    config = DSparkConfig.for_target(target.config, width=32, heads=2, positions=positions, markov_rank=markov_rank)
    head = DSparkHead(config)
    with torch.no_grad():
        for name, param in head.named_parameters():
            param.normal_(std=1.0 if name.startswith("markov") else 0.3)
    return head.to(target.dtype).eval().requires_grad_(False)


def drafter(target: Model, vocab: list[int] | None = None, **head) -> DSparkDrafter:
    return DSparkDrafter(random_head(target, **head), target, vocab=None if vocab is None else torch.tensor(vocab))


# A vocabulary of 10 of the target's 16 tokens: the rest only ever come through the residual.
VOCAB = [0, 1, 2, 4, 6, 7, 9, 11, 12, 15]


@torch.no_grad()
def hidden_and_pending(target: Model, batch: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    prompts = torch.tensor([[(3 * b + j) % V for j in range(5)] for b in range(batch)])
    return target.hidden_states(prompts[:, :-1])[:, -1], prompts[:, -1]


@pytest.mark.parametrize("vocab", [None, VOCAB])
@pytest.mark.parametrize("markov_rank", [0, 8])
@pytest.mark.parametrize("draft_len", [1, 3, 5])
def test_greedy_speculative_equals_plain(target: Model, draft_len: int, markov_rank: int, vocab) -> None:
    plain = generate(target, PROMPTS, NEW, temperature=0.0)
    spark = drafter(target, vocab, markov_rank=markov_rank)
    spec = generate(target, PROMPTS, NEW, temperature=0.0, drafter=spark, draft_len=draft_len)
    assert spec.tokens == plain.tokens
    assert spec.stats.accepted > 0
    assert spark.passes == spec.stats.target_passes - 1
    lengths = plain.cache.lengths.tolist()
    assert spec.cache.lengths.tolist() == lengths
    for row, n in enumerate(lengths):
        torch.testing.assert_close(spec.cache.latent[:, row, :n], plain.cache.latent[:, row, :n], rtol=1e-9, atol=1e-9)


def prefilled(target: Model, draft_len: int) -> tuple[LatentCache, torch.Tensor, torch.Tensor]:
    """A cache holding every prompt but its last token, the hidden states of those tokens and their counts."""
    cache = target.new_cache(len(PROMPTS), max(map(len, PROMPTS)) + NEW + draft_len + 1)
    tokens, lengths = pad_rows([prompt[:-1] for prompt in PROMPTS])
    return cache, target.hidden_states(tokens, cache=cache, lengths=lengths), lengths


def test_greedy_from_a_given_cache_starts_with_a_plain_step(target: Model) -> None:
    """No prefill pass runs, so the first round has no target state: it drafts nothing."""
    plain = generate(target, PROMPTS, NEW, temperature=0.0)
    draft_len = 3
    cache, _, _ = prefilled(target, draft_len)
    spark = drafter(target)
    state = TargetState.cached(target, cache, PROMPTS)
    spec = generate(target, PROMPTS, NEW, temperature=0.0, drafter=spark, draft_len=draft_len, state=state)
    assert spec.tokens == plain.tokens
    assert spark.passes == spec.stats.target_passes - 1
    assert spec.stats.verified_at and spec.stats.accepted > 0


def test_a_one_token_prompt_delays_drafting_by_one_round(target: Model) -> None:
    prompts = [[3], [4, 5, 6]]
    spark = drafter(target)
    spec = generate(target, prompts, 8, temperature=0.0, drafter=spark, draft_len=3)
    assert spec.tokens == generate(target, prompts, 8, temperature=0.0).tokens
    assert spark.passes == spec.stats.target_passes - 2


def test_mixed_settings_and_the_load_aware_scheduler(target: Model) -> None:
    """Greedy rows stay identical to plain greedy next to sampled rows under a survival-reading policy."""
    temperatures = [0.0, 1.0] * 8
    plain = generate(target, PROMPTS, NEW, temperature=0.0)
    scheduler = LoadAwareScheduler(VerifyProfile.by_positions((1, 20, 40), (1.0, 1.0, 0.4)))
    spec = generate(
        target,
        PROMPTS,
        NEW,
        temperature=temperatures,
        seed=list(range(16)),
        drafter=drafter(target),
        draft_len=4,
        policy=scheduler,
    )
    for row in range(0, 16, 2):
        assert spec.tokens[row] == plain.tokens[row]


def test_only_the_state_reading_drafter_is_observed(target: Model) -> None:
    assert isinstance(drafter(target), ReadsTargetStates)
    assert not isinstance(AutoregressiveDrafter(target), ReadsTargetStates)


MIXED_SETTINGS = {"temperature": [0.7, 1.0, 1.3, 0.0, 1.0, 0.9], "top_k": [0, 5, 0, 0, 3, 0],
                  "top_p": [1.0, 1.0, 0.8, 1.0, 1.0, 0.9]}


@pytest.mark.parametrize("greedy", [False, True])
def test_q_is_exactly_what_each_token_was_drawn_from(target: Model, greedy: bool) -> None:
    """Teacher-forcing the drafted tokens reproduces q and the survival estimates, and the tokens are
    the inverse-CDF draws from q: in a mixed batch, and in a greedy one, which draws the argmaxes and
    returns no q (its verdict never reads one)."""
    spark = drafter(target)
    hidden, pending = hidden_and_pending(target)
    settings = SamplingSettings.build(6, **({"temperature": 0.0} if greedy else MIXED_SETTINGS))
    uniforms = torch.rand(6, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    draft = spark.draft(hidden, pending, settings, uniforms)
    previous = torch.cat((pending.view(-1, 1), draft.tokens[:, :-1]), dim=1)
    logits, acceptance = spark.head(hidden, target.embed(previous), target.lm_head)
    q = warp(logits, settings)
    if greedy:
        assert draft.probs is None
    else:
        torch.testing.assert_close(draft.probs, q, rtol=0, atol=1e-12)
    torch.testing.assert_close(draft.survival, torch.sigmoid(acceptance).cumprod(dim=1), rtol=0, atol=1e-12)
    for j in range(4):
        assert torch.equal(draft.tokens[:, j], sample_from(q[:, j], uniforms[:, j]))


@pytest.mark.parametrize("greedy", [False, True])
@pytest.mark.parametrize("markov_rank", [0, 8])
def test_a_vocabulary_drafts_its_tokens_from_the_head_over_them_alone(
    target: Model, markov_rank: int, greedy: bool
) -> None:
    """q is the warp of the target head's logits at the vocabulary's tokens (zero elsewhere), and each
    token the inverse-CDF draw from that q over the whole vocabulary."""
    spark = drafter(target, VOCAB, markov_rank=markov_rank)
    hidden, pending = hidden_and_pending(target)
    settings = SamplingSettings.build(6, **({"temperature": 0.0} if greedy else MIXED_SETTINGS))
    uniforms = torch.rand(6, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    draft = spark.draft(hidden, pending, settings, uniforms)
    assert bool(torch.isin(draft.tokens, torch.tensor(VOCAB)).all())
    previous = torch.cat((pending.view(-1, 1), draft.tokens[:, :-1]), dim=1)
    logits, _ = spark.head(hidden, target.embed(previous), target.lm_head)
    q = torch.zeros(6, 4, V, dtype=logits.dtype)
    q[..., VOCAB] = warp(logits[..., VOCAB], settings)
    if greedy:
        assert draft.probs is None
    else:
        torch.testing.assert_close(draft.probs, q, rtol=0, atol=1e-12)
    for j in range(4):
        assert torch.equal(draft.tokens[:, j], sample_from(q[:, j], uniforms[:, j]))
    for wrong in ([3, 2], [0, V], [[1, 2]]):
        with pytest.raises(ValueError, match="vocabulary"):
            drafter(target, wrong)


@pytest.mark.parametrize("calibrated", [False, True])
def test_survival_is_non_increasing_and_blind_to_the_token_it_rates(target: Model, calibrated: bool) -> None:
    spark = drafter(target)
    if calibrated:
        raw = torch.linspace(0.0, 1.0, 50, dtype=torch.float64)
        spark.calibration = fit_survival_calibration(raw, (raw > 0.3).to(torch.int64) * (raw < 0.9))
    hidden, pending = hidden_and_pending(target)
    settings = SamplingSettings.build(6)
    uniforms = torch.rand(6, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    base = spark.draft(hidden, pending, settings, uniforms)
    assert bool((base.survival[:, 1:] <= base.survival[:, :-1]).all())
    assert bool(((base.survival >= 0) & (base.survival <= 1)).all())
    for j in range(5):
        moved = uniforms.clone()
        moved[:, j] = (moved[:, j] + 0.5) % 1.0
        other = spark.draft(hidden, pending, settings, moved)
        assert bool((other.tokens[:, j] != base.tokens[:, j]).any())
        assert torch.equal(other.survival[:, : j + 1], base.survival[:, : j + 1])
        if j < 4 and not calibrated:
            assert not torch.equal(other.survival[:, j + 1], base.survival[:, j + 1])


def test_markov_head_conditions_q_on_the_previous_draft(target: Model) -> None:
    spark = drafter(target)
    hidden, pending = hidden_and_pending(target)
    settings = SamplingSettings.build(6)
    uniforms = torch.full((6, 2), 0.1, dtype=torch.float64)
    first = spark.draft(hidden, pending, settings, uniforms)
    uniforms[:, 0] = 0.9
    second = spark.draft(hidden, pending, settings, uniforms)
    changed = first.tokens[:, 0] != second.tokens[:, 0]
    assert bool(changed.any())
    assert torch.equal(first.probs[:, 0], second.probs[:, 0])
    assert bool(((first.probs[changed, 1] - second.probs[changed, 1]).abs().amax(-1) > 1e-3).all())


def test_without_the_markov_head_q_is_the_parallel_stage_alone(target: Model) -> None:
    spark = drafter(target, markov_rank=0)
    assert not hasattr(spark.head, "markov_in")
    hidden, pending = hidden_and_pending(target)
    settings = SamplingSettings.build(6, temperature=0.8)
    uniforms = torch.full((6, 3), 0.1, dtype=torch.float64)
    first = spark.draft(hidden, pending, settings, uniforms)
    uniforms[:, 0] = 0.9
    second = spark.draft(hidden, pending, settings, uniforms)
    assert bool((first.tokens[:, 0] != second.tokens[:, 0]).any())
    assert torch.equal(first.probs, second.probs)
    outputs = spark.head.decode(spark.head.block(hidden, target.embed(pending))[:, :3])
    base = target.lm_head(outputs)
    assert torch.equal(spark.head.logits(outputs, target.embed(first.tokens), target.lm_head), base)
    assert torch.equal(first.probs, warp(base, settings))


@torch.no_grad()
def test_the_loss_reads_the_target_at_each_drafted_position_from_states_kept_once(target: Model) -> None:
    """The training loss from the kept states equals an explicit loop over anchors that runs the whole
    target for p and the drafter one anchor at a time, with the anchors drawn from the same seed."""
    head, k, anchors = random_head(target, positions=3), 3, 4
    inputs = torch.tensor([[(5 * b + 3 * j + j * j) % V for j in range(12)] for b in range(3)])
    states = target_states(target, inputs, 2, target.dtype)
    kl, tv, _, label = dspark_loss(
        head, target.lm_head, target.backbone.embed_tokens, inputs, states, anchors, torch.Generator().manual_seed(7)
    )
    draw = torch.Generator().manual_seed(7)
    starts = torch.randint(1, inputs.shape[1] - k + 1, (len(inputs), anchors), generator=draw)
    p_log = torch.log_softmax(target(inputs), dim=-1)
    kls, accepted = [], []
    for row, start in ((b, int(s)) for b in range(len(inputs)) for s in starts[b]):
        tokens = inputs[row, start : start + k]
        hidden = target.hidden_states(inputs[row : row + 1, :start])[:, -1]
        logits, _ = head(hidden, target.embed(tokens.unsqueeze(0)), target.lm_head)
        q_log, p = torch.log_softmax(logits[0], dim=-1), p_log[row, start : start + k]
        kls.append((p.exp() * (p - q_log)).sum(-1))
        accepted.append(torch.minimum(p.exp(), q_log.exp()).sum(-1))
    # The loss takes its log-softmaxes in float32 (the target here is float64).
    torch.testing.assert_close(kl.double(), torch.stack(kls).mean(0), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(label.double(), torch.stack(accepted).mean(0), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(tv.double(), 1 - torch.stack(accepted).mean(0), rtol=1e-5, atol=1e-6)
    assert kl.shape == tv.shape == (k,)


def test_position_weights_decay_as_dspark_weighs_its_positions() -> None:
    """exp(-(j - 1) / gamma) scaled to a mean of 1, against the values written out; gamma 0: all alike."""
    weights = position_weights(3, 4.0)
    raw = [1.0, math.exp(-0.25), math.exp(-0.5)]
    torch.testing.assert_close(weights, torch.tensor([w * 3 / sum(raw) for w in raw]))
    assert position_weights(3, 0.0).tolist() == [1.0, 1.0, 1.0]


def test_isotonic_calibration_matches_pool_adjacent_violators() -> None:
    """Three raw levels; the middle one's rate is below the first's, so those two pool (by hand)."""
    raw = torch.tensor([0.2] * 10 + [0.5] * 30 + [0.8] * 20, dtype=torch.float64)
    outcome = torch.tensor([1] * 4 + [0] * 6 + [1] * 6 + [0] * 24 + [1] * 18 + [0] * 2)
    calibration = fit_survival_calibration(raw, outcome)
    pooled = (4 + 6) / (10 + 30)
    got = calibration.predict_proba(np.array([0.2, 0.5, 0.8]))
    np.testing.assert_allclose(got, [pooled, pooled, 18 / 20], rtol=0, atol=1e-12)


def test_survival_ece_by_hand() -> None:
    survival = torch.tensor([0.05, 0.05, 0.95, 0.95, 0.95], dtype=torch.float64)
    outcome = torch.tensor([0, 1, 1, 1, 0])
    want = (2 / 5) * abs(0.5 - 0.05) + (3 / 5) * abs(2 / 3 - 0.95)
    assert survival_ece(survival, outcome, n_bins=10) == pytest.approx(want, abs=1e-12)


def test_calibration_on_held_out_outcomes(target: Model) -> None:
    """Outcomes are accepted prefixes; on its own fit half the isotonic map keeps the mean outcome."""
    spark = drafter(target)
    blocks = torch.randint(0, V, (6, 24), generator=torch.Generator().manual_seed(0))
    raw, accepted = acceptance_outcomes(spark, blocks, 3, torch.Generator().manual_seed(0))
    assert raw.shape == accepted.shape == (8, 6, 5)
    assert bool((accepted[..., 1:] <= accepted[..., :-1]).all()) and 0 < int(accepted.sum()) < accepted.numel()
    report = calibrate(spark, blocks, 3, seed=0)
    fit_raw, fit_accepted = raw[0::2], accepted[0::2]
    mapped = spark.calibrated(fit_raw.flatten(0, 1))
    assert float(mapped.mean()) == pytest.approx(float(fit_accepted.double().mean()), abs=1e-9)
    assert report["held_out_tau_t1"] == pytest.approx(1 + float(accepted.sum(-1).double().mean()))
    assert 0 <= report["ece_calibrated"] <= 1 and 0 <= report["ece_raw"] <= 1


def test_outcomes_from_the_followed_cache_equal_verifying_each_anchor_from_scratch(target: Model) -> None:
    """The reference re-reads the whole text before every anchor, as a plain target pass would."""
    spark = drafter(target)
    blocks = torch.randint(0, V, (4, 20), generator=torch.Generator().manual_seed(3))
    raw, accepted = acceptance_outcomes(spark, blocks, 3, torch.Generator().manual_seed(5))
    generator, settings, k = torch.Generator().manual_seed(5), SamplingSettings.build(4), spark.max_draft_len
    with torch.no_grad():
        hidden = target.hidden_states(blocks)
        for a, i in enumerate(range(1, blocks.shape[1], 3)):
            uniforms = torch.rand(4, 2 * k, generator=generator, dtype=torch.float64)
            draft = spark.draft(hidden[:, i - 1], blocks[:, i], settings, uniforms[:, :k])
            p = warp(target(torch.cat((blocks[:, : i + 1], draft.tokens), dim=1))[:, i : i + k], settings)
            ratio = torch.minimum(p.gather(-1, draft.tokens.unsqueeze(-1)) / draft.probs.gather(
                -1, draft.tokens.unsqueeze(-1)), torch.ones(())).squeeze(-1)
            assert torch.equal(raw[a], draft.survival)
            assert torch.equal(accepted[a], (uniforms[:, k:] < ratio).to(torch.int64).cumprod(dim=1)), a


def test_a_packed_drafter_drafts_within_q8_rounding(tmp_path: Path) -> None:
    from jev.convert.export import pack_folder

    target = random_model(tiny_config(vocab_size=V, hidden_size=64), seed=2)
    target.save_pretrained(tmp_path)
    head = random_head(target, markov_rank=32).float()
    DSparkDrafter(head, target).save(tmp_path / "drafter")
    size = (tmp_path / "drafter" / "dspark.safetensors").stat().st_size
    packed = pack_folder(tmp_path)
    assert "drafter/fuse.weight" in packed and "drafter/markov_in.weight" in packed
    assert (tmp_path / "drafter" / "dspark.safetensors").stat().st_size < 0.6 * size
    loaded = load_drafter(tmp_path / "drafter", target)
    for name, weight in head.state_dict().items():
        got = loaded.head.state_dict()[name]
        scale = weight.abs().amax() if weight.dim() == 2 else 0.0
        assert (got - weight).abs().max() <= scale / 127, name
    hidden, pending = hidden_and_pending(target)
    settings = SamplingSettings.build(6, temperature=0.9)
    uniforms = torch.rand(6, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    want, got = DSparkDrafter(head, target).draft(hidden, pending, settings, uniforms), loaded.draft(
        hidden, pending, settings, uniforms
    )
    assert (got.probs - want.probs).abs().max() < 0.05


@pytest.mark.parametrize("vocab", [None, VOCAB])
def test_folder_round_trip_through_the_loader(target: Model, tmp_path: Path, vocab) -> None:
    spark = drafter(target, vocab)
    raw = torch.linspace(0.0, 1.0, 20, dtype=torch.float64)
    spark.calibration = fit_survival_calibration(raw, (raw > 0.5).to(torch.int64))
    spark.save(tmp_path / "spark", {"note": "test"})
    loaded = load_drafter(tmp_path / "spark", target)
    assert isinstance(loaded, DSparkDrafter)
    assert json.loads((tmp_path / "spark" / "drafter.json").read_text()) == {"kind": "dspark", "note": "test"}
    hidden, pending = hidden_and_pending(target)
    settings = SamplingSettings.build(6, temperature=0.9)
    uniforms = torch.rand(6, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    want, got = spark.draft(hidden, pending, settings, uniforms), loaded.draft(hidden, pending, settings, uniforms)
    assert torch.equal(got.tokens, want.tokens) and torch.equal(got.probs, want.probs)
    assert torch.equal(got.survival, want.survival)

    random_model(tiny_config(vocab_size=V), seed=3).save_pretrained(tmp_path / "ar")
    assert isinstance(load_drafter(tmp_path / "ar", target), AutoregressiveDrafter)
    (tmp_path / "ar" / "drafter.json").write_text('{"kind": "medusa"}')
    with pytest.raises(ValueError, match="unknown drafter kind"):
        load_drafter(tmp_path / "ar", target)
    with pytest.raises(ValueError, match="hidden size"):
        DSparkDrafter(random_head(target), random_model(tiny_config(vocab_size=V)))


def test_drafts_past_the_trained_positions_are_refused(target: Model) -> None:
    hidden, pending = hidden_and_pending(target)
    with pytest.raises(ValueError, match="1 to 5 tokens"):
        drafter(target).draft(hidden, pending, SamplingSettings.build(6), torch.zeros(6, 6, dtype=torch.float64))


def dspark_joint(target: Model, spark: DSparkDrafter, config: Config, n: int, seed: int) -> torch.Tensor:
    out = generate(
        target,
        [list(config.prompt)] * n,
        2,
        temperature=config.temperature,
        top_k=config.top_k,
        top_p=config.top_p,
        seed=seed,
        drafter=spark,
        draft_len=config.k,
        policy=config.make_policy(),
    )
    pairs = torch.tensor(out.tokens)
    return torch.bincount(pairs[:, 0] * V + pairs[:, 1], minlength=V * V).view(V, V)


SAMPLED = [Config(3), Config(4, temperature=0.7, top_p=0.8, policy="threshold"), Config(2, top_k=5, policy="random")]


@pytest.mark.slow
def test_sampled_output_has_the_target_law() -> None:
    """Joint law of the first two tokens vs the target's exact law (chi-square, Holm), float32 as served;
    the last run drafts over a vocabulary of 10 of the 16 tokens, the others only ever emitted by
    the residual."""
    target = peaked_model(2, seed=0)
    spark = DSparkDrafter(random_head(target), target)
    runs = [(spark, config) for config in SAMPLED]
    runs.append((DSparkDrafter(random_head(target), target, vocab=torch.tensor(VOCAB)), Config(3)))
    p_values = [
        chi_square_p(dspark_joint(target, drafts, config, 12_000, seed=50 + i), target_joint(target, config))
        for i, (drafts, config) in enumerate(runs)
    ]
    assert min(holm(p_values)) > 1e-3, p_values


class MarkovlessQ(DSparkDrafter):
    """Samples with the Markov head but reports q without it: the accept rule is then not lossless."""

    @torch.no_grad()
    def draft(self, hidden, pending, settings, uniforms):
        honest = super().draft(hidden, pending, settings, uniforms)
        states = self.head.block(hidden, self.target.embed(pending))[:, : uniforms.shape[1]]
        return Draft(honest.tokens, warp(self.target.lm_head(self.head.decode(states)), settings), honest.survival)


def test_a_misreported_q_is_caught() -> None:
    target = peaked_model(2, seed=0)
    spark = MarkovlessQ(random_head(target), target)
    config = Config(3)
    p_value = chi_square_p(dspark_joint(target, spark, config, 12_000, seed=9), target_joint(target, config))
    assert p_value < 1e-6


TEXT = ["Win a free cruise now!", "Meeting moved to Tuesday, see agenda.", "Re: patch for the kernel build"]


def train_args(tmp_path: Path, out: str, *extra: str) -> argparse.Namespace:
    return build_parser().parse_args(
        [
            "train",
            "drafter",
            "--kind",
            "dspark",
            "--target",
            str(tmp_path / "target"),
            "--corpus",
            str(tmp_path / "corpus.txt"),
            "--out",
            str(tmp_path / out),
            "--steps",
            "40",
            "--batch-size",
            "4",
            "--block-size",
            "32",
            "--hidden-size",
            "64",
            "--positions",
            "4",
            "--markov-rank",
            "16",
            "--anchors",
            "8",
            "--lr",
            "3e-3",
            *extra,
        ]
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp_path = tmp_path_factory.mktemp("dspark")
    tokenizer = tiny_tokenizer()
    target = random_model(tiny_config(vocab_size=tokenizer.get_vocab_size()), seed=0)
    target.save_pretrained(tmp_path / "target")
    save_tokenizer(tokenizer, tmp_path / "target")
    config = {**json.loads((tmp_path / "target" / "tokenizer_config.json").read_text()), "chat_template": "{{ x }}"}
    (tmp_path / "target" / "tokenizer_config.json").write_text(json.dumps(config))
    (tmp_path / "corpus.txt").write_text("\n".join(TEXT * 60))
    args = train_args(tmp_path, "spark")
    assert args.func(args) == 0
    return tmp_path


@pytest.mark.slow
def test_drafter_command_distils_calibrates_and_drafts(trained: Path) -> None:
    provenance = json.loads((trained / "spark" / "drafter.json").read_text())
    assert provenance["kind"] == "dspark" and provenance["markov"] is True
    assert provenance["final_kl"] < 0.5 * provenance["first_kl"]
    curve = provenance["kl_by_tenth"]
    assert len(curve) == 10 and curve[0] > curve[-1]
    calibration = provenance["calibration"]
    assert calibration["anchors"] > 0 and 1 <= calibration["held_out_tau_t1"] <= 5
    assert not (trained / "spark" / "tokenizer.json").exists(), "it drafts in the target's vocabulary, through its head"
    saved = json.loads((trained / "spark" / "dspark.json").read_text())
    assert saved["config"]["positions"] == 4 and saved["survival_calibration"]["method"] == "isotonic"

    target = Model.from_pretrained(trained / "target")
    spark = load_drafter(trained / "spark", target)
    assert isinstance(spark, DSparkDrafter) and spark.calibration is not None
    prompts = [tiny_tokenizer().encode(t).ids[:4] for t in TEXT]
    plain = generate(target, prompts, 8, temperature=0.0)
    assert generate(target, prompts, 8, temperature=0.0, drafter=spark, draft_len=4).tokens == plain.tokens


def test_no_markov_flag_trains_the_parallel_only_ablation(trained: Path) -> None:
    args = train_args(trained, "parallel", "--no-markov", "--steps", "5")
    assert args.func(args) == 0
    provenance = json.loads((trained / "parallel" / "drafter.json").read_text())
    assert provenance["markov"] is False and provenance["config"]["markov_rank"] == 0
    assert not hasattr(load_drafter(trained / "parallel", Model.from_pretrained(trained / "target")).head, "markov_in")
    whole = json.loads((trained / "spark" / "dspark.json").read_text())
    assert whole["vocab"] is None, "the default vocabulary (8,192) holds the whole tiny one"


def test_a_vocabulary_size_keeps_the_most_frequent_training_tokens(trained: Path) -> None:
    args = train_args(trained, "frequent", "--no-markov", "--steps", "5", "--vocab-size", "12")
    assert args.func(args) == 0
    vocab = json.loads((trained / "frequent" / "dspark.json").read_text())["vocab"]
    assert json.loads((trained / "frequent" / "drafter.json").read_text())["vocab_size"] == len(vocab) == 12
    counts = Counter(token for text in TEXT for token in tiny_tokenizer().encode(text).ids)
    assert {token for token, _ in counts.most_common(5)} <= set(vocab), "the corpus's commonest tokens"
    target = Model.from_pretrained(trained / "target")
    spark = load_drafter(trained / "frequent", target)
    assert isinstance(spark, DSparkDrafter) and spark.vocabulary.vocab.tolist() == vocab
    prompts = [tiny_tokenizer().encode(t).ids[:4] for t in TEXT]
    spec = generate(target, prompts, 8, temperature=0.0, drafter=spark, draft_len=4)
    assert spec.tokens == generate(target, prompts, 8, temperature=0.0).tokens


def test_weights_and_precision_are_refused_for_the_autoregressive_kind(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["train", "drafter", "--target", str(tmp_path), "--corpus", str(tmp_path), "--out", str(tmp_path / "d"),
         "--kind", "autoregressive", "--weights", "fp16"]
    )
    with pytest.raises(JevError, match="--weights: not options of --kind autoregressive"):
        args.func(args)


def test_a_given_cache_with_its_hidden_states_drafts_from_the_first_round(target: Model) -> None:
    plain = generate(target, PROMPTS, NEW, temperature=0.0)
    draft_len = 3
    cache, states, counts = prefilled(target, draft_len)
    spark = drafter(target)
    spec = generate(
        target, PROMPTS, NEW, temperature=0.0, drafter=spark, draft_len=draft_len,
        state=TargetState.cached(target, cache, PROMPTS, states, counts),
    )
    assert spec.tokens == plain.tokens
    assert spark.passes == spec.stats.target_passes, "every round drafted, the first one included"


def test_kl_by_tenth_averages_each_tenth_of_the_steps() -> None:
    losses = [float(i) for i in range(25)]
    curve = kl_by_tenth(losses)
    parts = [losses[0:2], losses[2:5], losses[5:8], losses[8:10], losses[10:12], losses[12:15], losses[15:18],
             losses[18:20], losses[20:22], losses[22:25]]
    assert curve == pytest.approx([sum(part) / len(part) for part in parts])
    assert kl_by_tenth([3.0, 1.0]) == [3.0, 1.0]


def test_the_commands_defaults_are_the_shipped_drafters_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """`jev train drafter` with no kind or shape trains what `models/default/drafter` records its first
    stage was trained as (the KL run its TV steps started from): a user's own drafter starts from the
    recipe that ships."""
    root = Path(__file__).resolve().parent.parent
    shipped = json.loads((root / "models" / "default" / "drafter" / "drafter.json").read_text())["init"]["trained"]
    built: list = []
    monkeypatch.setattr("jev.train.cli.distill_dspark", lambda settings: built.append(settings) or settings.out)
    args = build_parser().parse_args(
        ["train", "drafter", "--target", str(root / "models" / "default"), "--corpus", "c.jsonl", "--out", "d"]
    )
    assert args.func(args) == 0
    settings = built[0]
    assert asdict(settings.config) == pytest.approx(shipped["config"])
    recorded = ("steps", "block_size", "batch_size", "anchors", "vocab_size", "lr", "seed", "markov")
    assert {name: shipped[name] for name in recorded} == {
        **{name: getattr(settings, name) for name in recorded[:-1]}, "markov": settings.config.markov_rank > 0
    }


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["tv", "kl+tv"])
def test_training_by_the_rejection_chance_keeps_more_drafts_than_by_kl(trained: Path, objective: str) -> None:
    """The same run as the KL one (`trained`'s "spark"), trained by TV or KL + TV: its drafted
    distributions overlap the target's more, sum min(p, q) over its last steps' anchors."""
    args = train_args(trained, objective, "--objective", objective)
    assert args.func(args) == 0
    by_kl, by_tv = (json.loads((trained / name / "drafter.json").read_text()) for name in ("spark", objective))
    assert by_tv["objective"] == objective and by_kl["objective"] == "kl"
    overlap = [sum(run["train_acceptance_by_position_t1"]) for run in (by_kl, by_tv)]
    assert overlap[1] > overlap[0] + 0.03, overlap


@pytest.mark.slow
def test_a_run_can_start_from_a_trained_drafter(trained: Path) -> None:
    """`--init` starts from the KL run's weights: its first steps' KL is near where that run ended,
    not where a random drafter starts; and it records the run it started from."""
    args = train_args(trained, "continued", "--init", str(trained / "spark"), "--objective", "tv", "--steps", "5")
    assert args.func(args) == 0
    before, after = (json.loads((trained / name / "drafter.json").read_text()) for name in ("spark", "continued"))
    assert after["first_kl"] < 2 * before["final_kl"] < before["first_kl"]
    assert after["init"] == {"folder": str(trained / "spark"), "trained": before}


def test_a_drafter_of_another_shape_is_refused_as_a_start(trained: Path) -> None:
    args = train_args(trained, "other", "--init", str(trained / "spark"), "--markov-rank", "8")
    with pytest.raises(JevError, match=r"holds a drafter of shape .*markov_rank=16.*the options give .*markov_rank=8"):
        args.func(args)
    args = train_args(trained, "other", "--init", str(trained / "target"))
    with pytest.raises(JevError, match="not a DSpark drafter folder"):
        args.func(args)
