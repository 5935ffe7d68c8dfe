"""Deciding: the decider, the decision model (one pass, every closed field), the model folder, and
applying its calibration."""
