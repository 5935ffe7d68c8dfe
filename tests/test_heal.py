"""The healing's loss and arithmetic: the next-token KL against a float64 reference, and a healing run
under bfloat16 autocast against the same run in float32."""

import pytest
import torch

from jev.convert.closed_form import MLARanks, collect_statistics, convert
from jev.convert.heal import KL_ROWS, HealSettings, heal, next_token_kl
from jev.convert.llama import LlamaTeacher
from jev.convert.source import read_llama_folder
from jev.model.precision import resolve_autocast
from tests.test_convert import ids, tiny_llama


def reference_kl(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    log_p = torch.log_softmax(target.double(), dim=-1)
    log_q = torch.log_softmax(logits.double(), dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(-1).mean()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_next_token_kl_and_its_gradient_equal_float64(dtype):
    generator = torch.Generator().manual_seed(0)
    rows = 3 * KL_ROWS + 5  # several chunks and a short last one
    target = 4 * torch.randn(rows // 2 + 1, 2, 97, generator=generator)[: rows // 2 + 1]
    logits = (target + torch.randn(target.shape, generator=generator)).to(dtype).requires_grad_(True)
    loss = next_token_kl(logits, target)
    (2.0 * loss).backward()
    exact = logits.detach().double().requires_grad_(True)
    expected = reference_kl(exact, target)
    (2.0 * expected).backward()
    assert loss.dtype == torch.float32 and loss.item() == pytest.approx(expected.item(), rel=1e-5)
    tolerance = 1e-6 if dtype == torch.float32 else 1e-2
    assert logits.grad.dtype == dtype
    assert torch.allclose(logits.grad.double(), exact.grad, atol=tolerance * exact.grad.abs().max().item())


def test_next_token_kl_is_zero_at_the_target_and_leaves_the_target_alone():
    target = torch.randn(2, 40, 50, requires_grad=True)
    logits = target.detach().clone().requires_grad_(True)
    loss = next_token_kl(logits, target)
    loss.backward()
    assert abs(loss.item()) < 1e-6 and target.grad is None
    assert logits.grad.abs().max() < 1e-6


def test_precision_names_resolve_and_a_wrong_one_is_refused():
    assert resolve_autocast("float32") is False and resolve_autocast("bfloat16") is True
    assert resolve_autocast("auto", "cuda") is True and resolve_autocast("float32", "cuda:1") is False
    with pytest.raises(ValueError, match="auto, float32, bfloat16"):
        resolve_autocast("fp8")


def _source_and_model(folder):
    tiny_llama(folder, kv_heads=2)
    source = read_llama_folder(folder)
    teacher = LlamaTeacher(source).eval()
    ranks = MLARanks(kv_lora_rank=16, qk_rope_head_dim=8, index_n_heads=2, index_head_dim=8, index_topk=16)
    return teacher, convert(source, ranks, collect_statistics(teacher, ids(64, 4, seed=7)))


def test_healing_under_bfloat16_autocast_tracks_float32(tmp_path):
    """The same run in both arithmetics: each stage's losses agree within bfloat16's rounding, the
    weights stay float32, and the layer-wise transfer learns under autocast."""
    teacher, closed_form = _source_and_model(tmp_path / "source")
    rows = ids(64, 16, seed=3)
    blocks = {"transfer": rows, "distill": rows, "indexer": rows, "sparse": rows}
    histories = {}
    for autocast in (False, True):
        model = type(closed_form)(closed_form.config)
        model.load_state_dict(closed_form.state_dict())
        settings = HealSettings(transfer_steps=4, distill_steps=6, indexer_steps=3, sparse_steps=2, batch_size=2,
                                dsa_batch_size=2, warmup=1, autocast=autocast)
        histories[autocast] = heal(model, teacher, blocks, settings, tmp_path / f"state{autocast}", log=lambda _: None)
        assert all(p.dtype == torch.float32 for p in model.parameters())
    for stage in ("transfer", "distill", "indexer", "sparse"):
        full = [h["loss"] for h in histories[False][stage]]
        half = [h["loss"] for h in histories[True][stage]]
        assert half == pytest.approx(full, rel=0.05, abs=1e-3), stage
    transfer = [h["loss"] for h in histories[True]["transfer"]]
    assert transfer[-1] < transfer[0]
