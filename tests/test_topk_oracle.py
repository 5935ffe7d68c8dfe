"""The bookkeeping of `benchmarks/topk_oracle.py`: which queries each band of positions counts."""

import torch

from benchmarks.topk_oracle import Missed, position_bands


def test_bands_double_from_k_to_the_window():
    assert position_bands(256, 1024) == [(256, 512), (512, 1024)]
    assert position_bands(256, 1500) == [(256, 512), (512, 1024), (1024, 1500)]
    assert position_bands(1024, 1024) == []


def test_missed_mass_is_averaged_per_band_and_over_every_query():
    missed = Missed(position_bands(2, 8))
    mass = torch.zeros(2, 8)
    mass[:, 2:4] = 0.1
    mass[0, 4:] = 0.5  # half of the second band's queries
    missed.add(mass)
    missed.add(torch.zeros(1, 8))
    bands = missed.by_band()
    assert list(bands) == ["2-3", "4-7"]
    assert abs(bands["2-3"] - 0.4 / 6) < 1e-6 and abs(bands["4-7"] - 2.0 / 12) < 1e-6
    assert abs(missed.mean - 2.4 / 24) < 1e-6
