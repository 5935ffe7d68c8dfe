"""`jev convert`: a pretrained Llama-architecture LM (GGUF or a transformers folder) as a DeepSeek-V3.2 model.

Embeddings, norms and MLPs carry over; grouped-query attention becomes MLA (one shared RoPE key, a
joint K/V latent with its norm) initialised in closed form, then healed by layer-wise attention
transfer and distillation against the original; the DSA indexer learns the warm-up objective.
"""
