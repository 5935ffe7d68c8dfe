"""Jev: typed decisions with calibrated probabilities from one forward pass of an MLA + DSA transformer."""

from jev.engine.decider import Decider
from jev.model import LatentCache, Model, ModelConfig
from jev.schema import Decided, Task, Usage

__all__ = ["Decided", "Decider", "LatentCache", "Model", "ModelConfig", "Task", "Usage"]
