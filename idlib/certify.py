"""The certification rule, and one record of "closed form against measured rank".

A Jacobian J (m x P) has numerical rank r = #{sigma_i > tau}, tau = sigma_1 max(m, P) eps the
round-off tolerance (the convention of ``torch.linalg.matrix_rank``).  The rank is a fact only
with its gap

    gamma = sigma_r / max(sigma_{r+1}, tau),

how far the smallest singular value kept stands above both the next one and round-off; it is
``certified`` when gamma >= ``CERTIFY_GAP`` = 1e4.  A route that only bounds the singular values
(:mod:`idlib.fastrank`) certifies with a lower bound on gamma, the same rule.

``Check`` pairs a configuration's closed form (:func:`idlib.counting.count`) with a measurement
and decides, once, whether they ``agree``: certified, the same number of parameters, and the
measured rank equal to the closed-form identified count I = P - U.  Every table, the command
line, the sweep and the census read that one field.

This module sits below :mod:`idlib.rank` and :mod:`idlib.fastrank` (both import it; it imports
neither): the retry loop that measures until certified, which needs ``measure``, lives in
:mod:`idlib.rank`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from .config import AttentionConfig
from .counting import count

CERTIFY_GAP = 1e4
CERTIFY_GAP_TEXT = f"1e{round(math.log10(CERTIFY_GAP))}"   # "1e4", as the book prints it
GAP_SHOWN = 1e8                                             # larger gaps print as "> 1e8"


def roundoff_tolerance(sigma_max: float, shape: tuple[int, int]) -> float:
    """tau = sigma_max max(m, n) eps: singular values at or below it are round-off."""
    return sigma_max * max(shape) * torch.finfo(torch.float64).eps


def rank_from_singular_values(sv: torch.Tensor, shape: tuple[int, int],
                              scale: float = 0.0) -> tuple[int, float]:
    """(rank, gap): rank = #{sigma > tau}; gap = sigma_r / max(sigma_{r+1}, tau) (= sigma_r / tau).

    tau = ``roundoff_tolerance(max(sigma_1, scale), shape)``: ``scale`` is the size of what the
    matrix was computed from (a difference of larger terms is round-off up to their size, not its
    own).  A zero matrix has rank 0 and gap inf; a matrix that is round-off throughout has rank 0
    and gap tau / sigma_1.
    """
    sv = sv.sort(descending=True).values
    if sv.numel() == 0 or sv[0] == 0:
        return 0, math.inf
    tol = roundoff_tolerance(max(sv[0].item(), scale), shape)
    rank = int((sv > tol).sum())
    if rank == 0:
        return 0, tol / sv[0].item()
    below = sv[rank].item() if rank < sv.numel() else 0.0
    return rank, sv[rank - 1].item() / max(below, tol)


def is_certified(gap: float) -> bool:
    """gamma >= CERTIFY_GAP (a lower bound on gamma will do)."""
    return gap >= CERTIFY_GAP


def format_gap(gap: float) -> str:
    """The gap as the book prints it: 'inf' (a zero Jacobian), '> 1e8', or its decade ('1e4-1e5').

    The decade is what the certificate needs; printing no more digits keeps the stored outputs
    identical wherever they re-execute.
    """
    if math.isinf(gap):
        return "inf"
    if gap > GAP_SHOWN:
        return "> 1e8"
    e = math.floor(math.log10(gap)) if gap > 0 else -99
    return f"1e{e}-1e{e + 1}"


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
