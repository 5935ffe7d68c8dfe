"""The DeepSeek-V3.2 backbone (MLA + DSA, dense MLP or MoE) and its latent cache."""

from jev.model.cache import CacheFullError, LatentCache
from jev.model.checkpoint import CheckpointError
from jev.model.config import ConfigError, ModelConfig
from jev.model.transformer import Model

__all__ = ["CacheFullError", "CheckpointError", "ConfigError", "LatentCache", "Model", "ModelConfig"]
