"""Smaller weights (`jev.model.quantized`): which products change, each product against its stored
weights in float64, that a row's result never depends on its batch, the whole model and its cache
against float32, a decider folder loaded with them, and the refusals."""

import pytest
import torch
from torch import nn

from jev.decide.decider import Decider
from jev.generate.profiles import machine_key
from jev.model.quantized import QUANTIZED_LINEARS, Fp16Linear, Int8Linear, QuantizeError, quantize
from tests.serving import TASKS, tiny_decider
from tests.tiny import random_model, tiny_config

SMALLER = ("fp16", "int8")


@pytest.mark.parametrize("weights", SMALLER)
def test_only_the_named_products_change(tiny_model, weights):
    embedding = tiny_model.backbone.embed_tokens.weight.clone()
    replaced = quantize(tiny_model, weights)
    assert len(replaced) == 7 * len(tiny_model.backbone.layers) + 1 and "lm_head" in replaced
    kind = Fp16Linear if weights == "fp16" else Int8Linear
    for name, module in tiny_model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if leaf in QUANTIZED_LINEARS:
            assert isinstance(module, kind), name
        elif leaf in {"kv_b_proj", "wq_b", "wk", "weights_proj"}:
            assert type(module) is nn.Linear, name
    assert torch.equal(tiny_model.backbone.embed_tokens.weight, embedding)
    assert tiny_model.weights == weights and tiny_model.dtype == torch.float32


def test_fp16_product_is_the_float16_weights_in_float32():
    linear = nn.Linear(48, 40, bias=False)
    x = torch.randn(3, 5, 48)
    exact = x.double() @ linear.weight.detach().half().double().T
    torch.testing.assert_close(Fp16Linear(linear)(x).double(), exact, atol=1e-5, rtol=1e-5)


def test_int8_product_rounds_weights_per_output_row_and_activations_per_input_row():
    torch.manual_seed(0)
    linear = nn.Linear(64, 40, bias=False)
    weight = linear.weight.detach().clone()
    int8 = Int8Linear(linear)
    stored = int8.inner.weight().dequantize()
    assert ((stored - weight).abs() <= weight.abs().amax(1, keepdim=True) / 254 + 1e-7).all()
    x = torch.randn(6, 64) * torch.logspace(-2, 2, 6).unsqueeze(1)  # rows four decades apart
    exact = x.double() @ stored.double().T
    error = (int8(x).double() - exact).abs().amax(1) / exact.abs().amax(1)
    assert (error < 0.03).all()  # every row keeps its own precision, the smallest as the largest


@pytest.mark.parametrize("weights", SMALLER)
def test_a_row_does_not_depend_on_its_batch(weights):
    linear = nn.Linear(64, 40, bias=False)
    product = Fp16Linear(linear) if weights == "fp16" else Int8Linear(linear)
    x = torch.randn(8, 64)
    x[3] *= 1000  # an outlier row, as the bos token's states are
    together = product(x)
    for row in range(8):
        torch.testing.assert_close(product(x[row : row + 1])[0], together[row], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("weights", "max_kl"), [("fp16", 1e-5), ("int8", 0.02)])
def test_the_model_stays_close_to_float32(weights, max_kl):
    model = random_model(tiny_config(), seed=0)
    ids = torch.randint(0, model.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        reference = torch.log_softmax(model(ids).double(), -1)
        quantize(model, weights)
        got = torch.log_softmax(model(ids).double(), -1)
    assert (reference.exp() * (reference - got)).sum(-1).max() < max_kl


@pytest.mark.parametrize("weights", SMALLER)
def test_decoding_through_the_cache_matches_a_cache_free_pass(weights):
    model = random_model(tiny_config(), seed=1)
    quantize(model, weights)
    ids = torch.randint(0, model.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        whole = model(ids)
        cache = model.new_cache(1, 16)
        pieces = [model(ids[:, :8], cache=cache), *(model(ids[:, i : i + 1], cache=cache) for i in range(8, 12))]
    torch.testing.assert_close(torch.cat(pieces, 1), whole, atol=2e-4, rtol=2e-4)


def test_a_decider_folder_loads_with_smaller_weights(tmp_path):
    tiny_decider().save(tmp_path / "model")
    ticket = [TASKS["tests.serving:TICKET"]]
    data = {"text": "my invoice is wrong", "customer": {"name": "Ada"}}
    float32 = Decider.load(tmp_path / "model", tasks=ticket)
    fp16 = Decider.load(tmp_path / "model", tasks=ticket, weights="fp16")
    assert fp16.model.weights == "fp16" and fp16.model_id == f"{float32.model_id}-fp16"
    expected, got = float32.decide("ticket", data), fp16.decide("ticket", data)
    assert got.model["model_id"] == fp16.model_id
    for field, probabilities in expected.probs.items():
        for value, probability in probabilities.items():
            assert got.probs[field][value] == pytest.approx(probability, abs=1e-4)


def test_refusals(tmp_path):
    model = random_model(tiny_config())
    key = machine_key(model)
    assert quantize(model, "float32") == [] and machine_key(model) == key
    with pytest.raises(QuantizeError, match="one of"):
        quantize(model, "int4")
    quantize(model, "int8")
    assert machine_key(model) != key  # its verify profile is measured apart from the float one's
    with pytest.raises(QuantizeError, match="int8 already"):
        quantize(model, "fp16")
    with pytest.raises(ValueError, match="inference only"):
        model.save_pretrained(tmp_path)
    with pytest.raises(QuantizeError, match="float32 model"):
        quantize(random_model(tiny_config()).to(torch.bfloat16), "fp16")
