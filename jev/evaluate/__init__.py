"""Evaluating a model folder: fitting its calibration (`jev calibrate`), reports (`jev report`) and the
baselines they are compared with (TF-IDF + LR, frozen all-MiniLM-L6-v2 + LR)."""
