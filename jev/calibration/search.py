"""A bounded 1-D minimiser for the temperature fit.

scipy is not a dependency of Jev, and the temperature NLL is unimodal in log T (it is convex in
1/T, and log is monotone), so golden-section search is enough: it needs no derivatives, cannot
diverge, and its error shrinks by a fixed factor every step.
"""

from __future__ import annotations

import math
from collections.abc import Callable

_INV_PHI = (math.sqrt(5.0) - 1.0) / 2.0


def golden_section_minimize(
    f: Callable[[float], float], lo: float, hi: float, *, xtol: float = 1e-9, max_iter: int = 200
) -> float:
    """Return x in [lo, hi] minimising a unimodal `f` to within `xtol`.

    The end points are candidates too, so a minimum on a bound is returned exactly.
    """
    if not lo < hi:
        raise ValueError(f"need lo < hi, got lo={lo}, hi={hi}")
    a, b = lo, hi
    c = b - _INV_PHI * (b - a)
    d = a + _INV_PHI * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(max_iter):
        if b - a <= xtol:
            break
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - _INV_PHI * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + _INV_PHI * (b - a)
            fd = f(d)
    candidates = [(fc, c), (fd, d), (f(lo), lo), (f(hi), hi)]
    return min(candidates)[1]
