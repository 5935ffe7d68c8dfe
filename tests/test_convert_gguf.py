"""GGUF reading on a small GGUF the test writes with the `gguf` package, and `jev convert` end to end on it.

The file is written as llama.cpp writes one (Q/K rows permuted to interleaved pairs, one tensor
quantised to Q8_0); transformers' own GGUF loader is the independent reference for what it holds.
"""

import json

import gguf
import numpy as np
import pytest
import torch
from tokenizers import pre_tokenizers
from transformers import AutoModelForCausalLM, DeepseekV32ForCausalLM

from jev.cli import main
from jev.convert.llama import LlamaTeacher
from jev.convert.pipeline import corpus_blocks, interleaved_blocks
from jev.convert.source import SourceError, read_gguf
from jev.model import Model
from tests.test_convert import VOCAB, ids, tiny_llama
from tests.tiny import rel_err

pytestmark = pytest.mark.slow

BYTES = sorted(pre_tokenizers.ByteLevel.alphabet())
TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *BYTES] + [f"<unused{i}>" for i in range(VOCAB - 259)]
TEXT = "the quick brown fox jumps over the lazy dog 0123456789, " * 400


def llama_cpp_permute(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's `LlamaModel.permute`: transformers' half-split head rows to interleaved pairs."""
    return weight.reshape(n_heads, 2, weight.shape[0] // n_heads // 2, -1).swapaxes(1, 2).reshape(weight.shape)


def write_gguf(model, path) -> None:
    cfg = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(TOKENS)
    writer.add_token_types([3, 3, 3] + [1] * (VOCAB - 3))
    writer.add_token_merges([])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_chat_template("{{ messages }}")
    names = {"embed_tokens": "token_embd", "norm": "output_norm"}
    layer_names = {
        "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
        "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
    }
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight":
            continue
        array = tensor.numpy().astype(np.float32)
        parts = name.removeprefix("model.").removesuffix(".weight")
        if parts.startswith("layers."):
            _, layer, rest = parts.split(".", 2)
            target = f"blk.{layer}.{layer_names[rest]}.weight"
            if rest in ("self_attn.q_proj", "self_attn.k_proj"):
                heads = cfg.num_attention_heads if rest.endswith("q_proj") else cfg.num_key_value_heads
                array = llama_cpp_permute(array, heads)
        else:
            target = f"{names[parts]}.weight"
        if target == "blk.0.ffn_up.weight":  # one quantised tensor, so dequantisation is exercised
            writer.add_tensor(target, gguf.quants.quantize(array, gguf.GGMLQuantizationType.Q8_0),
                              raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(target, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture
def gguf_file(tmp_path):
    model = tiny_llama(tmp_path / "hf", kv_heads=2, eps=1e-6)
    path = tmp_path / "tiny.gguf"
    write_gguf(model, path)
    return path


def test_gguf_tokenizer_reads_specials_and_splits_digits(gguf_file):
    tokenizer = read_gguf(gguf_file).tokenizer
    encoding = tokenizer.encode("<|im_start|>ab 12<|im_end|>")
    assert encoding.tokens == ["<|im_start|>", "a", "b", "Ġ", "1", "2", "<|im_end|>"]
    assert tokenizer.decode(encoding.ids, skip_special_tokens=False) == "<|im_start|>ab 12<|im_end|>"


def test_gguf_source_computes_what_transformers_reads_from_it(gguf_file):
    reference = AutoModelForCausalLM.from_pretrained(
        gguf_file.parent, gguf_file=gguf_file.name, dtype=torch.float32
    ).eval()
    source = read_gguf(gguf_file)
    assert source.config.num_key_value_heads == 2 and source.config.tie_word_embeddings
    assert source.tokenizer_config["bos_token"] == "<|im_start|>"
    tokens = ids()
    with torch.no_grad():
        assert rel_err(LlamaTeacher(source)(tokens), reference(tokens).logits) <= 1e-5


def test_gguf_of_another_architecture_is_refused(tmp_path):
    writer = gguf.GGUFWriter(str(tmp_path / "x.gguf"), "gpt2")
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(SourceError, match="Llama-architecture"):
        read_gguf(tmp_path / "x.gguf")


@pytest.mark.slow
def test_convert_command_heals_resumes_and_writes_a_folder_transformers_loads(gguf_file, tmp_path):
    corpus, other = tmp_path / "corpus.txt", tmp_path / "other.txt"
    corpus.write_text(TEXT)
    other.write_text(TEXT.upper())
    out = tmp_path / "converted"
    args = ["convert", "--source", str(gguf_file), "--out", str(out), "--corpus", str(corpus), "--corpus", str(other),
            "--kv-lora-rank", "24", "--qk-rope-head-dim", "8", "--rope-stride", "1", "--index-n-heads", "8",
            "--index-head-dim", "8", "--index-topk", "16", "--block-size", "64", "--dsa-block-size", "96",
            "--calibration-blocks", "4", "--max-blocks", "64", "--device", "cpu",
            "--transfer-steps", "4", "--distill-steps", "3", "--indexer-steps", "3", "--batch-size", "2"]
    assert main(args) == 0
    provenance = json.loads((out / "convert.json").read_text())
    assert provenance["device"] == "cpu" and provenance["max_blocks"] == 64
    history = provenance["history"]
    assert [len(history[s]) for s in ("transfer", "distill", "indexer")] == [4, 3, 3]
    assert provenance["corpus"] == [[str(corpus)], [str(other)]]
    assert not (out / "heal_state").exists()

    model = Model.from_pretrained(out)
    assert model.config.kv_lora_rank == 24 and model.config.tie_word_embeddings
    tokens = ids(48, 2)
    reference = DeepseekV32ForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
    dense_reference = DeepseekV32ForCausalLM.from_pretrained(
        out, dtype=torch.float32, attn_implementation="eager", index_topk=4096
    ).eval()
    with torch.no_grad():
        assert rel_err(model(tokens), reference(tokens).logits) <= 1e-4
        with model.attending_every_key():
            dense = model(tokens)
        assert rel_err(dense, dense_reference(tokens).logits) <= 1e-4
        assert rel_err(dense, model(tokens)) > 1e-6, "top-16 of 48 keys should differ from dense attention"


def test_a_stopped_heal_continues_from_its_state(gguf_file, tmp_path, monkeypatch):
    from jev.convert import heal

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    out = tmp_path / "converted"
    args = ["convert", "--source", str(gguf_file), "--out", str(out), "--corpus", str(corpus), "--kv-lora-rank", "24",
            "--qk-rope-head-dim", "8", "--index-head-dim", "8", "--block-size", "64", "--dsa-block-size", "96",
            "--calibration-blocks", "4",
            "--transfer-steps", "4", "--distill-steps", "4", "--indexer-steps", "2", "--batch-size", "2",
            "--save-every", "1"]
    original = heal.distill_step
    calls = {"n": 0}

    def dies_after_two(*a):
        calls["n"] += 1
        if calls["n"] > 2:
            raise KeyboardInterrupt
        return original(*a)

    monkeypatch.setattr(heal, "STEPS", {**heal.STEPS, "distill": dies_after_two})
    assert main(args) == 130  # Ctrl-C: `jev` says `interrupted` and exits 130
    progress = heal.read_progress(out / "heal_state")
    assert (progress["stage"], progress["step"]) == ("distill", 2)
    monkeypatch.setattr(heal, "STEPS", {**heal.STEPS, "distill": original})
    assert main(args) == 0
    history = json.loads((out / "convert.json").read_text())["history"]
    assert [h["step"] for h in history["distill"]] == [1, 2, 3, 4]
    assert len(history["transfer"]) == 4 and len(history["indexer"]) == 2


def test_healing_further_starts_from_a_converted_folder_and_refuses_other_ranks(gguf_file, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    common = ["--source", str(gguf_file), "--corpus", str(corpus), "--kv-lora-rank", "24", "--qk-rope-head-dim", "8",
              "--index-head-dim", "8", "--block-size", "64", "--dsa-block-size", "96",
              "--calibration-blocks", "4", "--batch-size", "2"]
    first, longer = tmp_path / "first", tmp_path / "longer"
    steps = ["--transfer-steps", "2", "--distill-steps", "1", "--indexer-steps", "1"]
    assert main(["convert", "--out", str(first), *common, *steps]) == 0
    more = ["--transfer-steps", "0", "--distill-steps", "2", "--indexer-steps", "1", "--seed", "1"]
    assert main(["convert", "--out", str(longer), "--init", str(first), *more, *common]) == 0
    provenance = json.loads((longer / "convert.json").read_text())
    assert provenance["init"]["folder"] == str(first)
    assert len(provenance["init"]["provenance"]["history"]["transfer"]) == 2
    assert [len(provenance["history"][s]) for s in ("transfer", "distill", "indexer")] == [0, 2, 1]
    before, after = Model.from_pretrained(first).state_dict(), Model.from_pretrained(longer).state_dict()
    name = "backbone.layers.0.self_attn.kv_b_proj.weight"
    assert not torch.equal(before[name], after[name]), "distillation moved the attention it started from"
    assert torch.equal(before["backbone.layers.0.mlp.up_proj.weight"], after["backbone.layers.0.mlp.up_proj.weight"])
    other = [a if a != "24" else "16" for a in common]
    assert main(["convert", "--out", str(tmp_path / "x"), "--init", str(first), *more, *other]) == 2
    (longer / "convert.json").unlink()  # as a decider folder, fine-tuned after its conversion, has none
    again = tmp_path / "again"
    assert main(["convert", "--out", str(again), "--init", str(longer), *more, *common, "--precision", "bfloat16"]) == 0
    provenance = json.loads((again / "convert.json").read_text())
    assert provenance["init"] == {"folder": str(longer), "provenance": None} and provenance["heal"]["autocast"]


def test_healing_further_can_train_an_indexer_of_another_shape(gguf_file, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    common = ["--source", str(gguf_file), "--corpus", str(corpus), "--kv-lora-rank", "24", "--qk-rope-head-dim", "8",
              "--block-size", "64", "--dsa-block-size", "96",
              "--calibration-blocks", "4", "--batch-size", "2"]
    first, wider = tmp_path / "first", tmp_path / "wider"
    small = ["--index-n-heads", "2", "--index-head-dim", "8", "--index-topk", "32"]
    assert main(["convert", "--out", str(first), *common, *small, "--transfer-steps", "1", "--distill-steps", "1",
                 "--indexer-steps", "1"]) == 0
    large = ["--index-n-heads", "6", "--index-head-dim", "16", "--index-topk", "16"]
    only_indexer = ["--transfer-steps", "0", "--distill-steps", "0", "--indexer-steps", "2"]
    assert main(["convert", "--out", str(wider), "--init", str(first), *common, *large, *only_indexer]) == 0
    model = Model.from_pretrained(wider)
    assert (model.config.index_n_heads, model.config.index_head_dim, model.config.index_topk) == (6, 16, 16)
    assert model.backbone.layers[0].self_attn.indexer.wq_b.weight.shape[0] == 6 * 16
    before, after = Model.from_pretrained(first).state_dict(), model.state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before if ".indexer." not in name)
    assert json.loads((wider / "convert.json").read_text())["ranks"]["index_n_heads"] == 6
    fewer_keys = [*large[:-1], "8"]
    assert main(["convert", "--out", str(tmp_path / "k8"), "--init", str(wider), *common, *fewer_keys,
                 "--transfer-steps", "0", "--distill-steps", "0", "--indexer-steps", "0"]) == 0
    kept = Model.from_pretrained(tmp_path / "k8")
    assert kept.config.index_topk == 8 and kept.backbone.layers[0].self_attn.index_topk == 8
    assert all(torch.equal(t, kept.state_dict()[name]) for name, t in after.items())


def test_rows_are_drawn_from_the_corpus_groups_in_turn():
    large, small = list(range(1000, 1040)), list(range(2000, 2012))
    rows = interleaved_blocks([large, small], block_size=4, max_blocks=100, seed=7)
    assert (rows[:, 0] >= 2000).long().tolist() == [0, 1] * 10, "one row from each group in turn"
    assert sorted(rows[0::2].flatten().tolist()) == large, "the largest group's blocks once each, whole"
    small_rows = [tuple(row) for row in rows[1::2].tolist()]
    assert sorted(set(small_rows)) == [tuple(range(2000 + i, 2004 + i)) for i in (0, 4, 8)]
    assert small_rows[:3] == small_rows[3:6], "a group that runs out starts over in the same order"
    assert torch.equal(interleaved_blocks([large], 4, 100, seed=7), corpus_blocks(large, 4, 100, seed=7))
    assert len(interleaved_blocks([large, small], 4, max_blocks=5, seed=7)) == 5


def test_a_corpus_shorter_than_a_dsa_row_is_a_clear_error(gguf_file, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    args = ["convert", "--source", str(gguf_file), "--out", str(tmp_path / "out"), "--corpus", str(corpus),
            "--kv-lora-rank", "24", "--qk-rope-head-dim", "8", "--index-head-dim", "8", "--block-size", "64",
            "--dsa-block-size", "100000", "--calibration-blocks", "4"]
    assert main(args) == 2
    error = capsys.readouterr().err
    assert "fewer than one row of 100000" in error and "--dsa-block-size" in error
    assert not (tmp_path / "out").exists(), "nothing is written before the rows are known"


@pytest.mark.parametrize("device", ["gpu", "meta", *([] if torch.cuda.is_available() else ["cuda"])])
def test_a_device_this_machine_cannot_heal_on_is_a_clear_error(device, gguf_file, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    args = ["convert", "--source", str(gguf_file), "--out", str(tmp_path / "out"), "--corpus", str(corpus),
            "--device", device]
    assert main(args) == 2
    assert f"--device {device}" in capsys.readouterr().err.replace("'", "")
    assert not (tmp_path / "out").exists()


def test_the_sparse_stage_distills_under_dsa_and_leaves_the_indexers(gguf_file, tmp_path, monkeypatch):
    from jev.convert import heal
    from jev.model.indexer import Indexer

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    common = ["--source", str(gguf_file), "--corpus", str(corpus), "--kv-lora-rank", "24", "--qk-rope-head-dim", "8",
              "--index-head-dim", "8", "--index-topk", "16", "--block-size", "64", "--dsa-block-size", "96",
              "--calibration-blocks", "4", "--batch-size", "2", "--dsa-batch-size", "3"]
    rows = []
    steps = dict(heal.STEPS)
    monkeypatch.setattr(heal, "STEPS", {
        stage: lambda model, teacher, ids, stage=stage: rows.append((stage, tuple(ids.shape)))
        or steps[stage](model, teacher, ids)
        for stage in steps
    })
    first, sparse = tmp_path / "first", tmp_path / "sparse"
    assert main(["convert", "--out", str(first), *common, "--transfer-steps", "1", "--distill-steps", "1",
                 "--indexer-steps", "1"]) == 0
    selections = []
    for name in ("select", "select_mask"):  # a selection as indices, or as the mask a CPU's attention reads
        select = getattr(Indexer, name)
        counted = lambda self, *args, select=select, **kwargs: selections.append(1) or select(self, *args, **kwargs)  # noqa: E731
        monkeypatch.setattr(Indexer, name, counted)
    more = ["--transfer-steps", "0", "--distill-steps", "1", "--indexer-steps", "0", "--sparse-steps", "2"]
    assert main(["convert", "--out", str(sparse), "--init", str(first), *more, *common]) == 0
    assert rows == [("transfer", (2, 64)), ("distill", (2, 64)), ("indexer", (3, 96)),
                    ("distill", (2, 64)), ("sparse", (3, 96)), ("sparse", (3, 96))], "the DSA stages read longer rows"
    layers = Model.from_pretrained(first).config.num_hidden_layers
    assert len(selections) == 2 * layers, "only the sparse steps select keys: one selection per layer and step"
    history = json.loads((sparse / "convert.json").read_text())["history"]
    assert [len(history[s]) for s in ("transfer", "distill", "indexer", "sparse")] == [0, 1, 0, 2]
    before, after = Model.from_pretrained(first).state_dict(), Model.from_pretrained(sparse).state_dict()
    indexer = [name for name in before if ".indexer." in name]
    assert indexer and all(torch.equal(before[name], after[name]) for name in indexer)
    name = "backbone.layers.0.self_attn.kv_b_proj.weight"
    assert not torch.equal(before[name], after[name])
