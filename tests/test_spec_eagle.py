"""The EAGLE drafter: lossless under the shared accept rule, each draft equal to the layer run
cache-free over the target's states, q zero outside its vocabulary, its folder, and
`jev train drafter --kind eagle`."""

import json
from collections import Counter
from pathlib import Path

import pytest
import torch
from test_spec_dspark import NEW, PROMPTS, V
from test_spec_statistical import Config, chi_square_p, peaked_model, target_joint

from jev.cli import build_parser
from jev.convert.export import pack_folder
from jev.generate.accept import SamplingSettings, warp
from jev.generate.drafters import ReadsTargetStates, load_drafter
from jev.generate.drafters.eagle import EagleDrafter, EagleNet, eagle_config
from jev.generate.loop import TargetState, generate
from jev.model import Model
from jev.model.weights import store_weights
from jev.ragged import concat_rows, pad_rows
from jev.schema import JevError
from jev.tokenizer import save_tokenizer
from jev.train.eagle import eagle_loss, frequent_tokens
from tests.tiny import random_model, tiny_config, tiny_tokenizer

VOCAB = torch.tensor([0, 1, 2, 3, 4, 5, 7, 8, 9, 11, 12, 14])  # 4 of the 16 tokens q never drafts

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def target() -> Model:
    """The DSpark tests' peaked 16-token target."""
    return peaked_model(2, seed=0).double()


def random_net(target: Model, seed: int = 1) -> EagleNet:
    torch.manual_seed(seed)
    net = EagleNet(eagle_config(target.config, len(VOCAB)), VOCAB)
    with torch.no_grad():
        for param in net.parameters():
            param.normal_(std=0.3)
    return net.to(target.dtype).attach(target).eval().requires_grad_(False)


def drafter(target: Model, seed: int = 1) -> EagleDrafter:
    return EagleDrafter(random_net(target, seed), target)


@pytest.mark.parametrize("draft_len", [1, 3, 6])
def test_greedy_speculative_equals_plain(target: Model, draft_len: int) -> None:
    plain = generate(target, PROMPTS, NEW, temperature=0.0)
    eagle = drafter(target)
    spec = generate(target, PROMPTS, NEW, temperature=0.0, drafter=eagle, draft_len=draft_len)
    assert spec.tokens == plain.tokens
    assert spec.stats.accepted > 0
    assert spec.cache.lengths.tolist() == plain.cache.lengths.tolist()
    assert isinstance(eagle, ReadsTargetStates)


class Recording(EagleDrafter):
    """Keeps, per round, how many entries each sequence had read and the first draft's q."""

    def __init__(self, net: EagleNet, target: Model) -> None:
        super().__init__(net, target)
        self.rounds: list[tuple[list[int], torch.Tensor]] = []

    def propose(self, pending, active, settings, uniforms):
        draft = super().propose(pending, active, settings, uniforms)
        self.rounds.append((self._base.tolist(), draft.probs[:, 0]))
        return draft


@torch.no_grad()
def test_every_first_draft_is_the_layer_run_cache_free_over_the_target_states(target: Model) -> None:
    """Across rounds of accepted and rejected drafts, the drafter's entries are exactly (the target's state
    at t, token t + 1) for the whole committed text: no drafted entry survives a rollback."""
    prompts = PROMPTS[:5]
    eagle = Recording(random_net(target), target)
    out = generate(target, prompts, NEW, temperature=0.0, drafter=eagle, draft_len=3)
    settings = SamplingSettings.build(1, 0.0)
    assert len(eagle.rounds) > 3
    compared = 0
    for read, q in eagle.rounds:
        for row, prompt in enumerate(prompts):
            text = torch.tensor([[*prompt, *out.tokens[row]]])
            n = read[row]  # entries (f_t, x_{t+1}) for t < n; x_n is the pending token
            if n + 1 > text.shape[1] or n == 0:
                continue
            states = target.hidden_states(text[:, :n])
            inputs = eagle.net.inputs(states, target.embed(text[:, 1 : n + 1]))
            predicted = eagle.net.layer.hidden_states(inputs_embeds=inputs)[:, -1]
            small = warp(eagle.net.layer.lm_head(predicted), settings)
            want = torch.zeros(1, V, dtype=small.dtype).index_copy_(1, VOCAB, small)
            torch.testing.assert_close(q[row : row + 1], want)
            compared += 1
    assert compared > 3 * len(prompts)


def test_q_is_zero_outside_the_vocabulary_and_sums_to_one(target: Model) -> None:
    eagle = drafter(target)
    state = TargetState.prefill(target, PROMPTS, 40)
    eagle.start(PROMPTS, 40)
    eagle.observe(state.states, state.followers(PROMPTS), state.counts)
    active = torch.ones(len(PROMPTS), dtype=torch.bool)
    uniforms = torch.rand(len(PROMPTS), 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    draft = eagle.propose(state.pending, active, SamplingSettings.build(len(PROMPTS), 1.0), uniforms)
    outside = torch.ones(V, dtype=torch.bool).index_fill_(0, VOCAB, False)
    assert float(draft.probs[..., outside].abs().max()) == 0.0
    torch.testing.assert_close(draft.probs.sum(-1), torch.ones(len(PROMPTS), 4, dtype=draft.probs.dtype))
    assert bool(torch.isin(draft.tokens, VOCAB).all())
    assert bool((draft.survival[:, 1:] <= draft.survival[:, :-1]).all())


def test_a_given_cache_with_its_states_drafts_from_the_first_round(target: Model) -> None:
    """The decision path: the cache comes filled, with the states of only its last few positions."""
    plain = generate(target, PROMPTS, NEW, temperature=0.0)
    cache = target.new_cache(len(PROMPTS), max(map(len, PROMPTS)) + NEW + 4)
    tokens, lengths = pad_rows([prompt[:-1] for prompt in PROMPTS])
    target.hidden_states(tokens[:, :1], cache=cache, lengths=lengths.clamp(max=1))
    rest, counts = pad_rows([prompt[1:-1] for prompt in PROMPTS])
    states = target.hidden_states(rest, cache=cache, lengths=counts)
    eagle = drafter(target)
    spec = generate(
        target, PROMPTS, NEW, temperature=0.0, drafter=eagle, draft_len=3,
        state=TargetState.cached(target, cache, PROMPTS, states, counts),
    )
    assert spec.tokens == plain.tokens


def test_cached_state_refuses_more_states_than_cached_tokens(target: Model) -> None:
    cache = target.new_cache(1, 10)
    target.hidden_states(torch.tensor([[1, 2]]), cache=cache)
    states = torch.zeros(1, 3, target.config.hidden_size, dtype=target.dtype)
    with pytest.raises(ValueError, match="states for"):
        TargetState.cached(target, cache, [[1, 2, 3]], states, torch.tensor([3]))


@pytest.mark.slow
def test_sampled_output_has_the_target_law() -> None:
    """Joint law of the first two tokens vs the target's exact law (chi-square), float32 as served."""
    target = peaked_model(2, seed=0)
    eagle = EagleDrafter(random_net(target), target)
    config = Config(3, temperature=0.8, top_p=0.9)
    out = generate(
        target, [list(config.prompt)] * 12_000, 2, temperature=config.temperature, top_p=config.top_p, seed=5,
        drafter=eagle, draft_len=config.k,
    )
    pairs = torch.tensor(out.tokens)
    joint = torch.bincount(pairs[:, 0] * V + pairs[:, 1], minlength=V * V).view(V, V)
    assert chi_square_p(joint, target_joint(target, config)) > 1e-3


def test_concat_rows_of_vectors_equals_a_loop() -> None:
    a, b = torch.randn(3, 4, 2), torch.randn(3, 5, 2)
    a_n, b_n = torch.tensor([0, 4, 2]), torch.tensor([3, 0, 5])
    out, n = concat_rows(a, a_n, b, b_n)
    assert n.tolist() == [3, 4, 7] and out.shape == (3, 7, 2)
    for row in range(3):
        want = torch.cat((a[row, : a_n[row]], b[row, : b_n[row]]))
        torch.testing.assert_close(out[row, : n[row]], want)
        assert float(out[row, n[row] :].abs().sum()) == 0.0


def test_frequent_tokens_by_count_then_lower_id() -> None:
    blocks = torch.tensor([[5, 5, 5, 2, 2, 9, 9, 1], [7, 7, 7, 0, 3, 3, 3, 1]])
    counts = Counter(blocks.flatten().tolist())
    want = sorted(sorted(range(12), key=lambda t: (-counts.get(t, 0), t))[:5])
    assert frequent_tokens(blocks, 5, 12).tolist() == want == [1, 2, 3, 5, 7]
    with pytest.raises(ValueError, match="1 to 12"):
        frequent_tokens(blocks, 13, 12)


def test_folder_round_trip_packed_and_without_the_target_rows(target: Model, tmp_path: Path) -> None:
    folder = tmp_path / "model"
    target.float().save_pretrained(folder)
    target = Model.from_pretrained(folder)
    eagle = EagleDrafter(random_net(target), target)
    eagle.save(folder / "drafter", {"steps": 0})
    loaded = load_drafter(folder / "drafter", target)
    assert isinstance(loaded, EagleDrafter)
    for name, tensor in eagle.net.state_dict().items():
        torch.testing.assert_close(loaded.net.state_dict()[name], tensor)
    saved = json.loads((folder / "drafter" / "eagle.json").read_text())
    assert saved["vocab"] == VOCAB.tolist()
    assert not any("embed_tokens" in name or "lm_head" in name for name in eagle.net.state_dict_to_save())
    fp16 = Model.from_pretrained(folder)
    store_weights(fp16, "fp16")
    stored = load_drafter(folder / "drafter", fp16)
    assert isinstance(stored, EagleDrafter) and stored.net.layer.weights == "fp16"
    plain = generate(fp16, PROMPTS, 8, temperature=0.0)
    assert generate(fp16, PROMPTS, 8, temperature=0.0, drafter=stored, draft_len=3).tokens == plain.tokens
    packed = pack_folder(folder)
    assert "drafter/fuse.weight" in packed
    repacked = load_drafter(folder / "drafter", target)
    plain = generate(target, PROMPTS, 8, temperature=0.0)
    assert generate(target, PROMPTS, 8, temperature=0.0, drafter=repacked, draft_len=3).tokens == plain.tokens


TEXT = ["Win a free cruise now!", "Meeting moved to Tuesday, see agenda.", "Re: patch for the kernel build"]


def test_drafter_command_distils_an_eagle_layer(tmp_path: Path) -> None:
    tokenizer = tiny_tokenizer()
    target = random_model(tiny_config(vocab_size=tokenizer.get_vocab_size()), seed=0)
    target.save_pretrained(tmp_path / "target")
    save_tokenizer(tokenizer, tmp_path / "target")
    (tmp_path / "corpus.txt").write_text("\n".join(TEXT * 60))
    args = build_parser().parse_args(
        ["train", "drafter", "--kind", "eagle", "--target", str(tmp_path / "target"), "--corpus",
         str(tmp_path / "corpus.txt"), "--out", str(tmp_path / "eagle"), "--steps", "40", "--block-size", "32",
         "--vocab-size", "40", "--lr", "3e-3", "--precision", "float32"]
    )
    assert args.func(args) == 0
    provenance = json.loads((tmp_path / "eagle" / "drafter.json").read_text())
    assert provenance["kind"] == "eagle" and provenance["vocab_size"] == 40
    assert provenance["final"]["first_ce"] < provenance["first"]["first_ce"]
    assert 0 < provenance["held_out"]["first_acceptance"] <= 1
    target = Model.from_pretrained(tmp_path / "target")
    eagle = load_drafter(tmp_path / "eagle", target)
    assert isinstance(eagle, EagleDrafter) and len(eagle.net.vocab) == 40
    prompts = [tokenizer.encode(t).ids[:4] for t in TEXT]
    plain = generate(target, prompts, 8, temperature=0.0)
    assert generate(target, prompts, 8, temperature=0.0, drafter=eagle, draft_len=4).tokens == plain.tokens


@pytest.mark.parametrize(
    ("kind", "option", "refused"),
    [("eagle", ["--hidden-size", "64", "--anchors", "4"], "--anchors, --hidden-size"),
     ("autoregressive", ["--vocab-size", "100"], "--vocab-size"),
     ("dspark", ["--feature-weight", "0.5"], "--feature-weight")],
)
def test_another_kinds_options_are_refused(tmp_path: Path, kind: str, option: list[str], refused: str) -> None:
    args = build_parser().parse_args(
        ["train", "drafter", "--kind", kind, "--target", str(tmp_path), "--corpus", str(tmp_path), "--out",
         str(tmp_path / "d"), *option]
    )
    with pytest.raises(JevError, match=f"{refused}: not options of --kind {kind}"):
        args.func(args)


@torch.no_grad()
def test_the_loss_equals_an_explicit_loop_over_positions(target: Model) -> None:
    """Both passes' cross-entropies, position by position with a cache-free layer over the entries before
    each: the first reads the target's states, the second the first pass's predictions from position 1."""
    net = random_net(target)
    inputs = torch.tensor([[(5 * j + b) % V for j in range(9)] for b in range(3)])
    hidden = target.hidden_states(inputs)
    _, measured = eagle_loss(net, target.lm_head, target.backbone.embed_tokens, inputs, hidden, 1.0)
    p = target.lm_head(hidden[:, 1:]).softmax(-1)[..., VOCAB]
    features = hidden[:, :-1]
    for name in ("first", "second"):
        entries = net.inputs(features, target.embed(inputs[:, 1:]))
        predicted = torch.stack(
            [net.layer.hidden_states(inputs_embeds=entries[:, : t + 1])[:, t] for t in range(entries.shape[1])], dim=1
        )
        q_log = net.layer.lm_head(predicted).log_softmax(-1)
        assert float(measured[f"{name}_ce"]) == pytest.approx(float(-(p * q_log).sum(-1).mean()), rel=1e-6)
        features = torch.cat((hidden[:, :1], predicted[:, :-1]), dim=1)
