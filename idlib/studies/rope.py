"""Helpers for chapters 4 (RoPE) and 5 (grouped K/V heads).

* Group actions with one matrix per head (``act_qk``, ``act_vo``), so a chapter can apply the
  symmetry of its theorem, or deliberately break it, on real tensors; ``output_change`` says
  by how much the layer's output moved.
* Random group elements: ``random_gl`` (all of GL(k)) and ``random_commutant`` (the matrices
  that commute with a rotation, via ``idlib.symmetry.commutant_basis``).
* Short sequences: ``softmax_budget`` (how many numbers per sequence carry the QK parameters
  to the output, from ``idlib.rank``) and ``short_causal_bounds`` (the QK fiber of a causal
  two-token sequence, chapter 4).
* Frequencies: ``frequency_condition`` (condition (F) of chapter 4: no plane's angle congruent
  to 0 or pi, no two planes' angles congruent up to sign, mod 2 pi), ``separation`` (how far
  a frequency vector is from breaking it), ``frequency_cases`` (the ways chapter 4 breaks it)
  and ``commutant_increase`` (what each way adds to the commutant, by the three rules of
  chapter 4's proof, independently of ``counting.rope_commutant_dim``).
* ``measure_seeds``: one configuration measured at several seeds, against its closed form
  (chapters 4 and 5).
"""
from __future__ import annotations

import cmath
import math
from dataclasses import dataclass
from typing import Any, Iterable

from ..lazy import torch

from ..attention import Params, forward
from ..verdict import Check, measure_and_check
from ..config import AttentionConfig
from ..counting import rotation_classes
from ..rank import measure, softmax_budget  # noqa: F401 (softmax_budget re-exported for chapter 4)
from ..symmetry import commutant_basis, linear_action


def random_gl(k: int, seed: int, scale: float = 0.5) -> torch.Tensor:
    """A generic invertible k x k matrix near the identity: I + scale * N(0, 1) / sqrt(k)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.eye(k, dtype=torch.float64) + scale * torch.randn(k, k, generator=gen, dtype=torch.float64) / math.sqrt(k)


def random_commutant(R: torch.Tensor, seed: int, scale: float = 0.5) -> torch.Tensor:
    """exp(scale / sqrt(k) Pi(G)), G a seeded k x k Gaussian and Pi the orthogonal projector
    onto the commutant {E : E R = R E}.

    Pi(G) has the law of sum_i c_i E_i (c_i ~ N(0, 1), E_i an orthonormal basis), but does not
    depend on which basis the SVD returns (that choice changes with the CPU), so the same seed
    gives the same matrix everywhere.  The exponential of an element of the commutant algebra
    commutes with R and is invertible.
    """
    k = R.shape[0]
    basis = commutant_basis(R).reshape(-1, k * k)             # orthonormal rows
    gen = torch.Generator().manual_seed(seed)
    G = torch.randn(k * k, generator=gen, dtype=torch.float64)
    E = (basis.T @ (basis @ G)).reshape(k, k)
    return torch.linalg.matrix_exp(scale * E / math.sqrt(k))


def act_qk(config: AttentionConfig, params: Params, A_heads: list[torch.Tensor],
           A_keys: list[torch.Tensor]) -> Params:
    """W_Q^h -> W_Q^h A_heads[h], W_K^g -> W_K^g A_keys[g]^{-T} (and b_Q, b_K alike).

    The theorem's symmetry is A_heads[h] = A_keys[g(h)]; other choices break it
    (``idlib.symmetry.linear_action`` applies the maps).
    """
    return linear_action(config, params, Q=torch.stack(A_heads),
                         K=torch.linalg.inv(torch.stack(A_keys)).transpose(-1, -2))


def act_vo(config: AttentionConfig, params: Params, B_values: list[torch.Tensor],
           B_heads: list[torch.Tensor]) -> Params:
    """W_V^g -> W_V^g B_values[g] (and b_V), W_O^h -> B_heads[h]^{-1} W_O^h."""
    return linear_action(config, params, V=torch.stack(B_values),
                         O=torch.linalg.inv(torch.stack(B_heads)))


def output_change(config: AttentionConfig, before: Params, after: Params, X: torch.Tensor,
                  frequencies: torch.Tensor | None = None) -> float:
    """max |f(after) - f(before)| / max |f(before)| over the inputs X."""
    y0 = forward(config, before, X, frequencies)
    y1 = forward(config, after, X, frequencies)
    return ((y1 - y0).abs().max() / y0.abs().max()).item()


def short_causal_bounds(d_model: int, head_dim: int, commutant_dim: int) -> tuple[int, int]:
    """Bounds on the QK fiber of one head seen only through causal two-token sequences.

    With s = max(0, 2k - d) (the dimension of col W_Q intersected with col W_K) and
    c = commutant_dim: max(c, s(s-1)/2) <= fiber <= c + s(s-1)/2 (chapter 4).
    """
    s = max(0, 2 * head_dim - d_model)
    anti = s * (s - 1) // 2
    return max(commutant_dim, anti), commutant_dim + anti


def separation(frequencies: torch.Tensor | list[float]) -> float:
    """Distance of the offset-1 eigenvalues z_i = e^{i theta_i} from a coincidence:
    min over i < j of |z_i - z_j|, |z_i - conj z_j|, and over i of |z_i - 1|, |z_i + 1|."""
    z = [cmath.exp(1j * float(t)) for t in frequencies]
    gaps = [abs(w - 1) for w in z] + [abs(w + 1) for w in z]
    gaps += [abs(a - b) for i, a in enumerate(z) for b in z[i + 1:]]
    gaps += [abs(a - b.conjugate()) for i, a in enumerate(z) for b in z[i + 1:]]
    return min(gaps)


def frequency_condition(frequencies: torch.Tensor | list[float], tol: float = 1e-9) -> bool:
    """Condition (F): no omega_l = 0 or pi (mod 2 pi), no omega_l = +-omega_l' (mod 2 pi), l != l'.

    Equivalently every class of ``counting.rotation_classes`` has one plane and no plane is
    fixed or reversed by R(1); then dim C(R(1)) = r + (k - r)^2.
    """
    mults, plus, minus = rotation_classes(frequencies, 0, tol)
    return plus == 0 and minus == 0 and all(mu == 1 for mu in mults)


FREQUENCY_CASES = ("default", "pair", "triple", "all", "reflected", "shifted", "zero", "pi")


def frequency_cases(omega: torch.Tensor) -> dict[str, torch.Tensor]:
    """Chapter 4's frequency vectors, from ``omega`` (at least three planes), by name:

    default (``omega`` itself), pair (omega_2 = omega_1), triple (omega_2 = omega_3 = omega_1),
    all (every frequency omega_1), reflected (omega_2 = 2 pi - omega_1), shifted
    (omega_2 = omega_1 + 2 pi), zero (omega_2 = 0) and pi (omega_2 = pi).
    """
    omega = torch.as_tensor(omega, dtype=torch.float64)
    if omega.ndim != 1 or len(omega) < 3:
        raise ValueError(f"frequency_cases: omega must list at least 3 frequencies, got "
                         f"shape {tuple(omega.shape)}")
    w1 = omega[0].item()

    def changed(*changes: tuple[int, float]) -> torch.Tensor:
        f = omega.clone()
        for i, value in changes:
            f[i] = value
        return f

    return {"default": omega.clone(), "pair": changed((1, w1)), "triple": changed((1, w1), (2, w1)),
            "all": torch.full_like(omega, w1), "reflected": changed((1, 2 * math.pi - w1)),
            "shifted": changed((1, w1 + 2 * math.pi)), "zero": changed((1, 0.0)),
            "pi": changed((1, math.pi))}


def commutant_increase(frequencies: torch.Tensor | list[float], pass_dims: int) -> int:
    """dim C(R(1)) - (r + (k - r)^2), by the three rules of chapter 4 (theorem thm-rope-group):

    each class of nu planes sharing one angle adds 2 nu (nu - 1); n_0 planes with angle 0 add
    (k - r + 2 n_0)^2 - (k - r)^2 - 2 n_0; n_pi planes with angle pi add (2 n_pi)^2 - 2 n_pi.
    Each term is zero exactly when its part of condition (F) holds.
    """
    mults, plus, minus = rotation_classes(frequencies, pass_dims)
    n_zero, n_pi = (plus - pass_dims) // 2, minus // 2
    return (sum(2 * nu * (nu - 1) for nu in mults)
            + (pass_dims + 2 * n_zero) ** 2 - pass_dims ** 2 - 2 * n_zero
            + (2 * n_pi) ** 2 - 2 * n_pi)


@dataclass(frozen=True)
class SeedRun:
    """One configuration measured at several seeds: the closed form against every measurement."""

    checks: tuple[Check, ...]

    @property
    def config(self) -> AttentionConfig:
        return self.checks[0].config

    @property
    def total(self) -> int:
        """P, closed form."""
        return self.checks[0].total

    @property
    def unidentified(self) -> int:
        """U, closed form (``idlib.count``)."""
        return self.checks[0].unidentified

    @property
    def measured(self) -> tuple[int, ...]:
        """The distinct measured U = P - rank J over the seeds, increasing."""
        return tuple(sorted({c.measured_unidentified for c in self.checks}))

    @property
    def gap(self) -> float:
        """The smallest gap over the seeds."""
        return min(c.gap for c in self.checks)

    @property
    def certified(self) -> bool:
        return all(c.certified for c in self.checks)

    @property
    def agrees(self) -> bool:
        """Every seed certified with rank J = I (``verdict.Check.agrees``)."""
        return all(c.agrees for c in self.checks)


def measure_seeds(config: AttentionConfig, seeds: Iterable[int],
                  frequencies: torch.Tensor | None = None, **measure_kw: Any) -> SeedRun:
    """``idlib.rank.measure`` at each seed, each paired with ``count(config, frequencies)``."""
    checks = tuple(measure_and_check(config, s, frequencies=frequencies, **measure_kw)
                   for s in seeds)
    if not checks:
        raise ValueError("measure_seeds: seeds must not be empty")
    return SeedRun(checks)
