"""The certification rule, and one record of "closed form against measured rank".

A Jacobian J (m x P) has numerical rank r = #{sigma_i > tau}, tau = sigma_1 max(m, P) eps the
round-off tolerance (the convention of ``torch.linalg.matrix_rank``).  The rank is a fact only
with its gap

    gamma = sigma_r / max(sigma_{r+1}, tau),

how far the smallest singular value kept stands above both the next one and round-off; it is
``certified`` when gamma >= ``CERTIFY_GAP`` = 1e4.  A route that only bounds the singular values
(:mod:`idlib.fastrank`) certifies with a lower bound on gamma, the same rule.

This module sits below :mod:`idlib.rank` and :mod:`idlib.fastrank` (both import it; it imports
neither).  The verdict that pairs a measurement with the closed form, ``Check``, lives above
both in :mod:`idlib.verdict`.
"""
from __future__ import annotations

import math

from .lazy import torch


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
