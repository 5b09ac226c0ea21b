"""One verdict: a layer's closed form against its measured Jacobian rank.

``Check`` pairs a configuration's closed form (:func:`idlib.counting.count`) with a measurement
and decides, once, whether they ``agree``: certified, the same number of parameters, and the
measured rank equal to the closed-form identified count I = P - U.  :func:`measure_and_check`
measures (at successive seeds until certified, :func:`idlib.rank.measure_until_certified`) and
pairs; the command line, the tables, the sweep, the census twins, the RoPE and variant studies
and the real-implementation checks all read this one record.

This module sits above :mod:`idlib.counting` and :mod:`idlib.rank`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from .lazy import torch

from .arguments import FREQUENCIES, LAYER, SEED, accepts, integer
from .config import AttentionConfig
from .counting import count
from .rank import measure_until_certified


class Measurement(Protocol):
    """What a check needs of a measurement (``idlib.rank.RankMeasurement`` has it)."""

    rank: int
    n_params: int
    gap: float
    certified: bool


@dataclass(frozen=True)
class Check:
    """One configuration: the closed form (P, I, U) against one measured rank, and the verdict.

    ``agrees`` = certified and the measured P equals the closed-form P and rank J = I; it is
    computed here, once.  ``attempts`` lists every measurement tried (seed, qk_scale, rank, gap,
    certified), the last one being ``measurement``; ``label`` names the row in a table.
    """

    config: AttentionConfig
    total: int                 # P, closed form
    identified: int            # I = P - U, closed form (= rank J when the closed form is right)
    measurement: Any           # a Measurement: rank, n_params, gap, certified
    attempts: tuple = ()
    label: str = ""
    agrees: bool = field(init=False)

    def __post_init__(self) -> None:
        m = self.measurement
        object.__setattr__(self, "agrees", bool(m.certified and m.n_params == self.total
                                                and m.rank == self.identified))

    @property
    def unidentified(self) -> int:
        """U = P - I, closed form."""
        return self.total - self.identified

    @property
    def rank(self) -> int:
        """Measured rank of J."""
        return self.measurement.rank

    @property
    def n_params(self) -> int:
        """Measured number of columns of J."""
        return self.measurement.n_params

    @property
    def measured_unidentified(self) -> int:
        """Measured n_params - rank J."""
        return self.measurement.n_params - self.measurement.rank

    @property
    def gap(self) -> float:
        return self.measurement.gap

    @property
    def certified(self) -> bool:
        return bool(self.measurement.certified)

    @property
    def seed(self) -> int | None:
        """Seed of the reported measurement (None when no attempts were recorded)."""
        return self.attempts[-1]["seed"] if self.attempts else None

    def as_dict(self) -> dict[str, Any]:
        """The check as a plain dict (the sweep's rows)."""
        return {"config": self.config, "total": self.total, "identified": self.identified,
                "unidentified": self.unidentified, "rank": self.rank, "n_params": self.n_params,
                "measured_unidentified": self.measured_unidentified, "gap": self.gap,
                "certified": self.certified, "seed": self.seed, "attempts": list(self.attempts),
                "agrees": self.agrees}


def check(config: AttentionConfig, measurement: Measurement, attempts: Any = (),
          frequencies: torch.Tensor | None = None, label: str = "") -> Check:
    """Pair ``measurement`` with ``count(config, frequencies)``."""
    c = count(config, frequencies)
    return Check(config, c.total, c.identified, measurement, tuple(attempts), label)


@accepts(config=LAYER, seed=SEED, attempts=integer(1, 10 ** 6),
         spread_from=integer(0, 10 ** 6, none=True), frequencies=FREQUENCIES)
def measure_and_check(config: AttentionConfig, seed: int = 0, attempts: int = 1,
                      spread_from: int | None = None, frequencies: torch.Tensor | None = None,
                      label: str = "", **measure_kw: Any) -> Check:
    """Measure the layer's Jacobian rank (at seeds seed, seed + 1, ... until certified, at most
    ``attempts`` measurements) and pair it with the closed form: the one verdict."""
    m, tries = measure_until_certified(config, seed, attempts, spread_from,
                                       frequencies=frequencies, **measure_kw)
    return check(config, m, tries, frequencies, label)
