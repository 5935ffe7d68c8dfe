"""Half-size weights (`jev.model.weights`, fp16, bf16 and mixed): which products change, a product
against its rounded weights in float64, that a row's result never depends on its batch (beyond
float32's rounding through fbgemm's AVX2 kernels), that mixed takes bf16's products in fresh passes
and fp16's when extending a few caches (int4's for a weight on a 4-bit grid, found exactly) and bf16's
in fixed row blocks when extending many, the whole model and its cache against float32, greedy
speculative decoding on them against plain, a decider folder and `jev decide` on them, what `auto`
picks, and the refusals."""

import json

import pytest
import torch
from jev.kernels import ops
from torch import nn

from jev.decide.decider import Decider
from jev.generate.accept import SamplingSettings
from jev.generate.drafters import load_drafter
from jev.generate.drafters.autoregressive import AutoregressiveDrafter
from jev.generate.drafters.vocabulary import target_head_rows
from jev.generate.loop import generate
from jev.generate.profiles import machine_key
from jev.model import mla as mla_module
from jev.model import weights as weights_module
from jev.model.weights import (
    LARGE_LINEARS,
    STORED,
    Fp16Linear,
    Int4Linear,
    WeightsError,
    auto_weights,
    bfloat16_packing,
    extending_block,
    int4_grid,
    packed_bfloat16,
    packed_product,
    store_weights,
)
from tests.hardware import AUTO, CPU_FLAGS, FBGEMM_AVX512, needs_bfloat16_packing, weights_cases
from tests.serving import TASKS, tiny_decider
from tests.tiny import random_model, tiny_config

HALF = ["fp16", "bf16", "mixed"]
MLPS = ("gate_proj", "up_proj", "down_proj")


def on_grid(linear: nn.Linear, seed: int = 0) -> nn.Linear:
    """The linear with its weight moved onto a 4-bit grid per 32 inputs, as Q4_1 dequantizes: a scale
    and an offset per block, the block's minimum and maximum among its values."""
    generator = torch.Generator().manual_seed(seed)
    rows, inputs = linear.weight.shape
    codes = torch.randint(0, 16, (rows, inputs // 32, 32), generator=generator)
    codes[..., 0], codes[..., 1] = 0, 15
    scale = torch.rand(rows, inputs // 32, 1, generator=generator) * 0.05 + 0.01
    low = -torch.rand(rows, inputs // 32, 1, generator=generator) * 0.4
    with torch.no_grad():
        linear.weight.copy_((low + codes * scale).view(rows, inputs))
    return linear


def with_mlps_on_grid(model):
    for layer in model.backbone.layers:
        for name in MLPS:
            on_grid(getattr(layer.mlp, name), seed=len(name))
    return model


@pytest.mark.parametrize("weights", weights_cases(HALF))
def test_only_the_named_products_change(tiny_model, weights):
    embedding = tiny_model.backbone.embed_tokens.weight.clone()
    changed = store_weights(tiny_model, weights)
    assert len(changed) == 7 * len(tiny_model.backbone.layers) + 1 and "lm_head" in changed
    for name, module in tiny_model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if leaf in LARGE_LINEARS:
            assert isinstance(module, STORED[weights]), name
        elif leaf in {"kv_b_proj", "wq_b", "wk", "weights_proj"}:
            assert type(module) is nn.Linear, name
    assert torch.equal(tiny_model.backbone.embed_tokens.weight, embedding)
    assert tiny_model.weights == weights and tiny_model.dtype == torch.float32
    # Inference only: with autograd on, a pass records nothing (it once recorded every op, at 350x the time).
    assert not any(parameter.requires_grad for parameter in tiny_model.parameters())
    cache = tiny_model.new_cache(1, 8)
    assert tiny_model(torch.tensor([[1, 2, 3]]), cache=cache).grad_fn is None


def test_a_float16_product_is_its_float16_weights_in_float32():
    linear = nn.Linear(48, 40, bias=False)
    x = torch.randn(3, 5, 48)
    exact = x.double() @ linear.weight.detach().half().double().T
    got = STORED["fp16"](linear)(x)
    assert got.shape == (3, 5, 40)
    torch.testing.assert_close(got.double(), exact, atol=1e-5, rtol=1e-5)


@needs_bfloat16_packing
def test_a_bfloat16_product_is_its_rounded_operands_multiplied_exactly():
    linear = nn.Linear(48, 40, bias=False)
    x = torch.randn(3, 5, 48)
    exact = x.bfloat16().double() @ linear.weight.detach().bfloat16().double().T
    got = STORED["bf16"](linear)(x)
    assert got.shape == (3, 5, 40) and got.dtype == torch.float32
    # the products are exact in float32; the sum's rounding, and the result's to bfloat16, remain
    torch.testing.assert_close(got.double(), exact, atol=2e-2, rtol=1e-2)


@needs_bfloat16_packing
@pytest.mark.parametrize("rows", [1, 5, 128, 300])
def test_a_packed_bfloat16_weight_multiplies_as_torch_mm_on_the_plain_one(rows):
    weight = torch.randn(1536, 576) * 0.05
    x = torch.randn(rows, 576).bfloat16()
    assert torch.equal(packed_product(x, packed_bfloat16(weight)), torch.mm(x, weight.bfloat16().T))


def test_a_weight_on_a_4_bit_grid_gives_back_its_codes_and_others_none():
    linear = on_grid(nn.Linear(96, 48, bias=False))
    codes, scale, low = int4_grid(linear.weight)
    assert codes.shape == (48, 96) and scale.shape == low.shape == (48, 3)
    assert int(codes.min()) == 0 and int(codes.max()) == 15
    rebuilt = low.repeat_interleave(32, 1) + codes * scale.repeat_interleave(32, 1)
    torch.testing.assert_close(rebuilt, linear.weight.detach(), atol=1e-6, rtol=0)
    assert int4_grid(nn.Linear(96, 48, bias=False).weight) is None  # off any grid
    assert int4_grid(on_grid(nn.Linear(96, 40, bias=False)).weight) is None  # rows not packable in 16s
    for row in (3, 40):  # among the rows tried first, and past them
        nudged = linear.weight.detach().clone()
        nudged[row, 7] += 0.3 * scale[row, 0]
        assert int4_grid(nudged) is None


def test_an_int4_product_is_its_codes_with_bfloat16_scales_on_bfloat16_inputs():
    linear = on_grid(nn.Linear(96, 48, bias=False))
    codes, scale, low = int4_grid(linear.weight)
    x = torch.randn(3, 5, 96)
    scale, zero = scale.bfloat16().double(), (low + 8 * scale).bfloat16().double()
    weight = (codes.double() - 8) * scale.repeat_interleave(32, 1) + zero.repeat_interleave(32, 1)
    exact = x.bfloat16().double() @ weight.T
    got = Int4Linear(int4_grid(linear.weight))(x)
    assert got.shape == (3, 5, 48) and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), exact, atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize("weights", ["fp16", "int4"])
@pytest.mark.parametrize(("rows", "inputs"), [(1536, 576), (576, 1536), (160, 576)])
def test_a_row_does_not_depend_on_its_batch(weights, rows, inputs):
    """int4, and fp16 through fbgemm's AVX-512 kernels, multiply a row alike in any batch; fbgemm's AVX2
    kernels for a batch's last one or two rows round otherwise, within float32's error."""
    generator = torch.Generator().manual_seed(rows + inputs)
    linear = nn.Linear(inputs, rows, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(rows, inputs, generator=generator) * 0.05)
    product = Int4Linear(int4_grid(on_grid(linear).weight)) if weights == "int4" else STORED[weights](linear)
    x = torch.randn(70, inputs, generator=generator)
    x[3] *= 1000  # an outlier row, as the bos token's states are
    together = product(x)
    # float32's accumulation error bound over the fp16-rounded weight (|x| |W|^T K eps), per output
    rounding = x.abs() @ linear.weight.detach().half().float().abs().T * inputs * torch.finfo(torch.float32).eps
    for part in (slice(0, 1), slice(3, 4), slice(5, 13), slice(0, 33), slice(10, 70)):
        alone = product(x[part])
        if weights == "int4" or FBGEMM_AVX512:
            assert torch.equal(alone, together[part]), part
        else:  # fbgemm on AVX2: a batch's last one or two rows take other kernels, within float32's rounding
            assert bool(((alone - together[part]).abs() <= rounding[part]).all()), part


def bfloat16_product(generator: torch.Generator) -> tuple[nn.Linear, nn.Module]:
    """A random 1536 -> 576 linear, a shape whose kernel oneDNN picks by the row count, and its bf16 form."""
    linear = nn.Linear(1536, 576, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(576, 1536, generator=generator) * 0.05)
    return linear, STORED["bf16"](linear)


@needs_bfloat16_packing
def test_a_bfloat16_row_depends_on_its_batch_only_through_the_block_size_and_by_a_rounding():
    generator = torch.Generator().manual_seed(0)
    _, product = bfloat16_product(generator)
    x = torch.randn(48, 1536, generator=generator)
    alone = product(x[:1])
    for offset in (0, 7, 15):  # in a block of 16 rows, wherever it sits and whatever its neighbours
        block = torch.randn(16, 1536, generator=generator)
        block[offset] = x[0]
        assert torch.equal(product(block)[offset], product(x[:16])[0])
    # blocks of other sizes may round the sum differently: at most a step of bfloat16 apart
    torch.testing.assert_close(product(x)[:1], alone, rtol=2**-7, atol=1e-6)


@needs_bfloat16_packing
def test_bfloat16_products_cross_row_blocks_per_row_and_take_few_shapes(monkeypatch):
    linear = nn.Linear(64, 48, bias=False)
    product = STORED["bf16"](linear)
    block = weights_module.ROW_BLOCK
    x = torch.randn(2 * block + 152, 64)  # two blocks and 152 more rows, multiplied as 160
    together = product(x)
    for rows in (slice(block - 6, block + 4), slice(block - 1, block), slice(-1, None), slice(0, block + 1)):
        assert torch.equal(product(x[rows]), together[rows]), rows
    exact = x.bfloat16().double() @ linear.weight.detach().bfloat16().double().T
    torch.testing.assert_close(together.double(), exact, atol=2e-2, rtol=1e-2)
    seen = set()

    def counting(rows: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
        seen.add(rows.shape[0])
        return packed_product(rows, packed)

    monkeypatch.setattr(weights_module, "packed_product", counting)
    for n in range(1, block + 104):
        product(torch.randn(n, 64))
    # as they come up to 16, then rounded up to 16s up to 256, 64s up to 1024 and 256s up to a block
    expected = set(range(1, 17)) | set(range(32, 257, 16)) | set(range(320, 1025, 64))
    assert seen == expected | set(range(1280, block + 1, 256))


@needs_bfloat16_packing
def test_a_batched_extension_multiplies_every_row_alike_in_fixed_blocks():
    """A generation's plain steps (one row per sequence) and verify passes (several) share the block."""
    assert [extending_block(n) for n in (1, 7, 8, 16, 17, 32, 33, 64, 200)] == [None] * 2 + [16, 16, 32, 32, 64, 64, 64]
    generator = torch.Generator().manual_seed(1)
    linear, product = bfloat16_product(generator)
    x = torch.randn(200, 1536, generator=generator)
    for block in (16, 32, 64):
        steps = product.in_blocks_of(x[:block], block)
        for rows in (1, 3, block + 5, 200):
            assert torch.equal(product.in_blocks_of(x[:rows], block), steps[:rows] if rows <= block else
                               torch.cat([steps, product.in_blocks_of(x[block:rows], block)])), (block, rows)
    exact = x.bfloat16().double() @ linear.weight.detach().bfloat16().double().T
    torch.testing.assert_close(product.in_blocks_of(x, 64).double(), exact, atol=2e-2, rtol=1e-2)


@needs_bfloat16_packing
@pytest.mark.parametrize("sequences", [2, 8])
def test_mixed_extends_many_caches_in_bfloat16_blocks_and_few_in_float16(monkeypatch, sequences):
    model = random_model(tiny_config(), seed=2)
    store_weights(model, "mixed")
    ids = torch.randint(0, 97, (sequences, 9), generator=torch.Generator().manual_seed(2))
    cache = model.new_cache(sequences, 12)
    shapes = []

    def recording(rows: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
        shapes.append(rows.shape[0])
        return packed_product(rows, packed)

    monkeypatch.setattr(weights_module, "packed_product", recording)
    with torch.inference_mode():
        model(ids[:, :8], cache=cache)
        shapes.clear()
        model(ids[:, 8:], cache=cache)
    assert set(shapes) == ({16} if sequences == 8 else set())


@pytest.mark.parametrize(("weights", "bound"), weights_cases([("fp16", 1e-5), ("bf16", 1e-3), ("mixed", 1e-3)]))
def test_the_model_stays_close_to_float32(weights, bound):
    model = random_model(tiny_config(), seed=0)
    ids = torch.randint(0, model.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        reference = torch.log_softmax(model(ids).double(), -1)
        store_weights(model, weights)
        got = torch.log_softmax(model(ids).double(), -1)
    kl = (reference.exp() * (reference - got)).sum(-1)
    assert 0 < kl.max() < bound  # changed, and only by the rounding of the weights (and bf16's inputs)


@needs_bfloat16_packing
@pytest.mark.parametrize("attention", [mla_module.fused_causal_attention, mla_module.explicit_causal_attention])
def test_a_fresh_bfloat16_pass_stays_close_to_float32_through_either_attention(monkeypatch, attention):
    # a CPU with AMX takes SDPA's fused kernel, one without the explicit form: both are checked here
    calls = []

    def counted(*args):
        calls.append(args[0].dtype)
        return attention(*args)

    monkeypatch.setattr(mla_module, "causal_attention_bfloat16", counted)
    model = random_model(tiny_config(), seed=3)
    ids = torch.randint(0, model.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        reference = torch.log_softmax(model(ids).double(), -1)
        store_weights(model, "bf16")
        got = torch.log_softmax(model(ids).double(), -1)
    assert calls == [torch.bfloat16] * model.config.num_hidden_layers
    kl = (reference.exp() * (reference - got)).sum(-1)
    assert 0 < kl.max() < 1e-3


@needs_bfloat16_packing
def test_mixed_multiplies_fresh_passes_in_bfloat16_and_cache_extensions_in_float16():
    models = {}
    for weights in HALF:
        models[weights] = random_model(tiny_config(), seed=2)
        store_weights(models[weights], weights)
    ids = torch.randint(0, 97, (2, 10), generator=torch.Generator().manual_seed(2))
    caches = {weights: model.new_cache(2, 16) for weights, model in models.items()}
    with torch.inference_mode():
        prompt = {weights: model(ids[:, :8], cache=caches[weights]) for weights, model in models.items()}
        assert torch.equal(prompt["mixed"], prompt["bf16"]) and not torch.equal(prompt["mixed"], prompt["fp16"])
        # an fp16 step reading the cache that the bf16 prompt pass wrote is what mixed computes
        reference = models["fp16"](ids[:, 8:], cache=caches["bf16"])
        step = models["mixed"](ids[:, 8:], cache=caches["mixed"])
    assert torch.equal(step, reference)


# bf16: a cache-free pass computes attention and MLPs in bfloat16, a decode step in float32 (with
# bfloat16 products), so they agree to bfloat16's precision only.
@pytest.mark.parametrize(("weights", "tolerance"), weights_cases([("fp16", 1e-4), ("bf16", 2e-2)]))
def test_decoding_through_the_cache_matches_a_cache_free_pass(weights, tolerance):
    model = random_model(tiny_config(), seed=1)
    store_weights(model, weights)
    ids = torch.randint(0, model.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        whole = model(ids)
        cache = model.new_cache(1, 16)
        pieces = [model(ids[:, :8], cache=cache), *(model(ids[:, i : i + 1], cache=cache) for i in range(8, 12))]
    torch.testing.assert_close(torch.cat(pieces, 1), whole, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize(("weights", "tolerance"), weights_cases([("fp16", 1e-4), ("bf16", 1e-2), ("mixed", 1e-2)]))
def test_a_decider_folder_loads_with_half_size_weights(tmp_path, weights, tolerance):
    tiny_decider().save(tmp_path / "model")
    ticket = [TASKS["tests.serving:TICKET"]]
    data = {"text": "my invoice is wrong", "customer": {"name": "Ada"}}
    float32 = Decider.load(tmp_path / "model", tasks=ticket)
    half = Decider.load(tmp_path / "model", tasks=ticket, weights=weights)
    assert half.model.weights == weights and half.model_id == f"{float32.model_id}-{weights}"
    expected, got = float32.decide("ticket", data), half.decide("ticket", data)
    assert got.model["model_id"] == half.model_id
    for field, probabilities in expected.probs.items():
        for value, probability in probabilities.items():
            assert got.probs[field][value] == pytest.approx(probability, abs=tolerance)


def test_bfloat16_packing_is_found_where_onednn_names_the_cpu_it_needs():
    needed = {"avx512bw", "avx512vl", "avx512dq"} <= CPU_FLAGS or "avx_ne_convert" in CPU_FLAGS
    assert bfloat16_packing() == needed


def test_auto_is_mixed_or_fp16_where_fbgemm_runs_and_float32_elsewhere():
    model = random_model(tiny_config())
    assert store_weights(model, "auto") and model.weights == AUTO
    assert store_weights(model, "auto") == [] and auto_weights(model) == "float32"
    half = random_model(tiny_config()).to(torch.bfloat16)
    assert store_weights(half, "auto") == [] and half.weights == "float32"


def test_refusals(tmp_path, monkeypatch, capsys):
    model = random_model(tiny_config())
    key = machine_key(model)
    assert store_weights(model, "float32") == [] and machine_key(model) == key
    with pytest.raises(WeightsError, match="one of"):
        store_weights(model, "int8")
    store_weights(model, "fp16")
    assert machine_key(model) != key  # its verify profile is measured apart from the float one's
    with pytest.raises(WeightsError, match="fp16 already"):
        store_weights(model, "fp16")
    with pytest.raises(ValueError, match="inference only"):
        model.save_pretrained(tmp_path)
    for weights in HALF:
        with pytest.raises(WeightsError, match="float32 model"):
            store_weights(random_model(tiny_config()).to(torch.bfloat16), weights)
    monkeypatch.setattr(weights_module, "bfloat16_packing", lambda: False)  # an AVX2-only CPU
    assert auto_weights(random_model(tiny_config())) == "fp16"
    for weights in ("bf16", "mixed"):
        with pytest.raises(WeightsError, match=r"AVX-512 BW, VL and DQ, or AVX-NE-CONVERT.*use fp16 or auto"):
            store_weights(random_model(tiny_config()), weights)
    from jev.cli import main

    tiny_decider().save(tmp_path / "model")
    data = json.dumps({"text": "my invoice is wrong", "customer": {"name": "Ada"}})
    assert main(["decide", "--model", str(tmp_path / "model"), "--task", "ticket", "--weights", "mixed", data]) == 2
    assert capsys.readouterr().err.startswith("error: mixed weights need a CPU that oneDNN packs bfloat16")
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    assert auto_weights(random_model(tiny_config())) == "fp16"
    for weights in ("bf16", "mixed"):
        with pytest.raises(WeightsError, match="oneDNN"):
            store_weights(random_model(tiny_config()), weights)


@pytest.mark.parametrize(
    ("argv", "suffix"),
    [([], "-auto"), (["--weights", "float32"], ""),
     pytest.param(["--weights", "bf16"], "-bf16", marks=needs_bfloat16_packing)],
)
def test_jev_decide_runs_on_half_size_weights_unless_told_otherwise(tmp_path, capsys, argv, suffix):
    from jev.cli import main

    tiny_decider().save(tmp_path / "model")
    data = json.dumps({"text": "my invoice is wrong", "customer": {"name": "Ada"}})
    assert main(["decide", "--model", str(tmp_path / "model"), "--task", "ticket", *argv, data]) == 0
    answer = json.loads(capsys.readouterr().out)
    suffix = suffix.replace("auto", AUTO)
    assert answer["model"]["model_id"] == Decider.load(tmp_path / "model").model_id + suffix


@needs_bfloat16_packing
def test_mixed_extends_a_cache_through_int4_exactly_where_a_weight_is_on_a_4_bit_grid():
    model = with_mlps_on_grid(random_model(tiny_config(), seed=0))
    store_weights(model, "mixed")
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] in LARGE_LINEARS:
            expected = Int4Linear if name.rsplit(".", 1)[-1] in MLPS else Fp16Linear
            assert type(module.extending) is expected, name


@pytest.mark.parametrize("weights", weights_cases([*HALF, "mixed, MLPs on a 4-bit grid"]))
def test_greedy_speculative_decoding_on_half_size_weights_equals_plain(one_thread, weights):
    target = random_model(tiny_config(), seed=0)
    if weights.endswith("grid"):
        weights = "mixed"
        with_mlps_on_grid(target)
    store_weights(target, weights)
    drafter = AutoregressiveDrafter(random_model(tiny_config(num_hidden_layers=1), seed=1))
    prompts = [[(7 * i + 3 * j) % 97 for j in range(1 + (5 * i) % 11)] for i in range(8)]
    plain = generate(target, prompts, 16, temperature=0.0)
    for draft_len in (1, 4):
        spec = generate(target, prompts, 16, temperature=0.0, drafter=drafter, draft_len=draft_len)
        assert spec.stats.drafted > 0 and spec.tokens == plain.tokens


@pytest.mark.parametrize("weights", weights_cases(["fp16", "mixed"]))
def test_an_autoregressive_drafter_loads_in_its_targets_form(tmp_path, one_thread, weights):
    random_model(tiny_config(num_hidden_layers=1), seed=1).save_pretrained(tmp_path / "drafter")
    target = random_model(tiny_config(), seed=0)
    store_weights(target, weights)
    eager = load_drafter(tmp_path / "drafter", target)
    target.replay_cached_passes()
    replayed = load_drafter(tmp_path / "drafter", target)
    assert eager.model.weights == replayed.model.weights == weights
    assert eager.model.step_graphs is None and replayed.model.step_graphs is not None
    prompts = [[(7 * i + 3 * j) % 97 for j in range(2 + (5 * i) % 11)] for i in range(3)]
    pending, active = torch.tensor([prompt[-1] for prompt in prompts]), torch.ones(3, dtype=torch.bool)
    uniforms = torch.rand(3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    drafts = []
    for drafter in (eager, replayed):
        drafter.start(prompts, 32)
        drafts.append(drafter.propose(pending, active, SamplingSettings.build(3, temperature=0.8), uniforms))
    assert torch.equal(drafts[0].tokens, drafts[1].tokens) and torch.equal(drafts[0].probs, drafts[1].probs)
    plain = generate(target, prompts, 12, temperature=0.0)
    spec = generate(target, prompts, 12, temperature=0.0, drafter=replayed, draft_len=3)
    assert spec.stats.drafted > 0 and spec.tokens == plain.tokens
    random_model(tiny_config(num_hidden_layers=1, vocab_size=64), seed=1).save_pretrained(tmp_path / "other")
    with pytest.raises(ValueError, match="not the target's"):
        load_drafter(tmp_path / "other", target)


@needs_bfloat16_packing
def test_a_bfloat16_pass_that_selects_keys_stays_close_to_float32(monkeypatch):
    # index_topk 4 of 24 keys: every layer's indexer selects, reading the bfloat16 branch's inputs
    model = random_model(tiny_config(index_topk=4), seed=3)
    ids = torch.randint(0, model.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(3))
    dense_prefill, fused_sparse = mla_module.DENSE_PREFILL_MAX_KEYS, ops.FUSED_SPARSE_MAX_KEYS

    def log_probs(path: str) -> torch.Tensor:
        cache = None if path == "cache-free" else model.new_cache(2, 32)
        # "sparse prefill" gathers the selected latents from the cache instead of masking the keys
        monkeypatch.setattr(mla_module, "DENSE_PREFILL_MAX_KEYS", 0 if path == "sparse prefill" else dense_prefill)
        monkeypatch.setattr(ops, "FUSED_SPARSE_MAX_KEYS", 0 if path == "sparse prefill" else fused_sparse)
        return torch.log_softmax(model(ids, cache=cache).double(), -1)

    paths = ("cache-free", "prefill", "sparse prefill")
    with torch.inference_mode():
        reference = {path: log_probs(path) for path in paths}
        store_weights(model, "mixed")
        got = {path: log_probs(path) for path in paths}
    # a prefill reads back from the cache exactly what a cache-free pass computed
    assert torch.equal(got["prefill"], got["cache-free"])
    for path in paths:
        kl = (reference[path].exp() * (reference[path] - got[path])).sum(-1)
        # bfloat16's rounding moves most positions by little; where it flips a near tie of the
        # indexer's scores, another key is attended, and the position moves further
        assert 0 < kl.median() < 1e-4 and kl.max() < 0.05, path


@pytest.mark.parametrize("weights", weights_cases(["float32", *HALF]))
def test_rows_of_the_lm_head_stored_like_it_give_its_logits_for_those_rows(weights):
    """A drafter's vocabulary head: the target head's rows in the head's own form (with mixed weights,
    following the pass kind), so its logits are the target head's at those tokens."""
    model = random_model(tiny_config(), seed=4)
    store_weights(model, weights)
    vocab = torch.tensor([0, 3, 5, 17, 40, 96])
    rows = nn.Linear(model.config.hidden_size, len(vocab), bias=False)
    rows.weight = nn.Parameter(target_head_rows(model, vocab).detach().clone(), requires_grad=False)
    stored = weights_module.stored_like(rows, model.lm_head)
    assert type(stored) is type(model.lm_head)
    x = torch.randn(3, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        if weights == "mixed":
            cache = model.new_cache(1, 4)
            model(torch.tensor([[1, 2]]), cache=cache)
            model(torch.tensor([[3]]), cache=cache)  # a pass extending a cache: fp16 products
            assert not stored.kind.fresh and stored.kind.block is None
        torch.testing.assert_close(stored(x), model.lm_head(x)[:, vocab], rtol=1e-6, atol=1e-6)
