"""The measurement: rank of the Jacobian of the layer's outputs with respect to all parameters.

J[(sequence, token, feature), parameter] at generic parameters and inputs; its rank is the
functional dimension.  The rank counts the singular values above the round-off tolerance
tau = sigma_1 max(m, P) eps (m rows, P columns; the convention of ``torch.linalg.matrix_rank``),
and is only a fact with its gap

    gap = sigma_r / max(sigma_{r+1}, tau),

how far the smallest singular value kept stands above both the next one and round-off.  The cut
is ``certified`` when the gap is at least ``CERTIFY_GAP`` = 1e4.  In the dense route
sigma_{r+1} <= tau by the rank's definition, so the gap is sigma_r / tau: it is made of sigma_1
and sigma_r, which float64 computes to many digits, and not of sigma_{r+1}, which is round-off
whose digits change with the CPU, the BLAS kernels and the thread count (by a factor of several
between an AMD and an Intel machine).  So the gap, and the certificate, re-execute identically.

Three routes (``measure(method=...)``): "dense" forms J and takes all its singular values;
"structured" (:mod:`idlib.fastrank`) decides the rank from one small problem per key/value
group and certifies a lower bound on the gap of J itself, without forming J (16,384
parameters in under a minute, 65,536 in about six on 2 cores); "block" (:mod:`idlib.blockrank`)
certifies rank J >= P - U at a point of its own choosing, where J is block lower-triangular
with small diagonal blocks, each certified on its own -- with the symmetry's rank J <= P - U
that is the generic rank (262,144 parameters in under a minute, GPT-2 small's layer in
minutes).  "auto" takes the dense route up to ``AUTO_DENSE_MAX_PARAMS`` parameters (so small
layers keep their full spectrum); above, the block route where it applies (every variant row
declares "block"; ``params``, ``seq_len`` and ``n_sequences`` not given, since it measures at
its own point on its own inputs), then the structured one, falling back to structured (up to
``STRUCTURED_FALLBACK_MAX_PARAMS``) and to dense (up to ``DENSE_FALLBACK_MAX_PARAMS``) when a
route does not apply or cannot certify.  ``device``: where the measurement runs (float64;
e.g. ``torch.device("cuda")``).

The tolerance, the rank rule, the threshold and the gap's format live in :mod:`idlib.certify`
(re-exported here); ``measure_until_certified`` measures at successive seeds until certified.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .lazy import torch

from . import blockrank, fastrank
from .arguments import (DEVICE, FREQUENCIES, LAYER, OPTIONAL_PARAMS, OPTIONAL_SIZE, SEED,
                        accepts, available_memory, integer, one_of)
from .attention import (flatten, forward, init_params, n_params, param_shapes, random_inputs,
                        unflatten, Params)
from .certify import (CERTIFY_GAP, CERTIFY_GAP_TEXT, GAP_SHOWN, format_gap,  # noqa: F401 (re-exported)
                      is_certified, rank_from_singular_values, roundoff_tolerance)
from .config import AttentionConfig, ConfigError
from .counting import count

AUTO_DENSE_MAX_PARAMS = 2048     # "auto": dense (full spectrum) up to here, block or structured above
DENSE_FALLBACK_MAX_PARAMS = 6000  # "auto" never falls back to the dense SVD above this size
STRUCTURED_MAX_PARAMS = 70000     # measured by default where idlib.fastrank applies (no J formed)
STRUCTURED_FALLBACK_MAX_PARAMS = 70000   # "auto" never falls back from the block route above this
BLOCK_MAX_PARAMS = 5_000_000      # where idlib.blockrank applies (GPT-2 small's layer in minutes)
METHODS = ("auto", "dense", "structured", "block")


def default_seq_len(config: AttentionConfig) -> int:
    """Tokens per sequence: d_model + 2, so that one query's keys span the input space.

    Shorter causal sequences can leave directions unseen (chapter 4 measures how many).
    """
    return config.d_model + 2


@dataclass(frozen=True)
class RankMeasurement:
    rank: int
    n_params: int
    n_rows: int
    singular_values: torch.Tensor
    gap: float
    certified: bool
    method: str = "dense"
    """Which route measured it.  "dense": ``singular_values`` are all of J's and ``gap`` is
    sigma_r / max(sigma_{r+1}, tau).  "structured": ``gap`` is a lower bound on that ratio and
    ``singular_values`` are the bounds it rests on: first a lower bound on sigma_r, then upper
    bounds on sigma_{r+1}, ..., sigma_{n_params} (see :mod:`idlib.fastrank`).  "block": J at the
    route's own point; ``rank`` is the certified lower bound sum_b rank E_b over the diagonal
    blocks, ``gap`` the smallest block's certified sigma_r / max(rounding, tau) (the same ratio,
    for each block), ``singular_values`` each block's certified lower bound on its smallest kept
    singular value (scaled columns), ascending; certified only when the bound is P - U (see
    :mod:`idlib.blockrank`)."""

    @property
    def unidentified(self) -> int:
        """n_params - rank (only meaningful when certified)."""
        return self.n_params - self.rank

    def describe(self) -> str:
        """One line, with the gap's decade (see ``format_gap``)."""
        status = "certified" if self.certified else "NOT certified"
        return f"rank {self.rank} of {self.n_params} (gap {format_gap(self.gap)}, {status})"


def sequence_jacobian(f: Any, theta: torch.Tensor, X: torch.Tensor, chunk: int = 64) -> torch.Tensor:
    """d vec(f(theta, x) for x in X) / d theta, shape (B * outputs per sequence, theta.numel()).

    ``f(theta, x)`` is one sequence's flattened output.  Each sequence's outputs depend on that
    sequence alone, so the Jacobian is taken one sequence at a time (reverse mode) and vmapped
    over ``chunk`` sequences.  idlib's layer (:func:`jacobian`) and the real modules
    (``idlib.implementations.jacobian``) are both measured by it.
    """
    per_sequence = torch.func.vmap(torch.func.jacrev(f), in_dims=(None, 0))
    blocks = [per_sequence(theta, X[i:i + chunk]) for i in range(0, X.shape[0], chunk)]
    return torch.cat(blocks).reshape(-1, theta.numel())


def jacobian(config: AttentionConfig, params: Params, X: torch.Tensor,
             frequencies: torch.Tensor | None = None, chunk: int = 64) -> torch.Tensor:
    """d vec(forward(X)) / d theta, shape (B * n * d_model, n_params) (``sequence_jacobian``)."""
    def f(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return forward(config, unflatten(config, t), x[None], frequencies).reshape(-1)

    return sequence_jacobian(f, flatten(params).detach(), X, chunk)


def softmax_budget(seq_len: int, causal: bool) -> int:
    """Sum over queries of (keys seen - 1): the numbers per sequence and head through which the
    QK parameters reach the output (a softmax over kappa scores has kappa - 1 free values)."""
    n = seq_len
    return n * (n - 1) // 2 if causal else n * (n - 1)


def default_n_sequences(config: AttentionConfig, seq_len: int, oversample: float = 1.5) -> int:
    """Enough sequences for full rank to be possible, with a margin ``oversample``.

    Three bounds: rows B n d at least n_params; since one head's attention pattern reaches the
    output only through its min(v, d) value directions, B n min(v, d) at least the 2 d (k + v)
    parameters of one head; and the softmax budget B H sum_i (keys_i - 1) at least the
    (H + G) d k query/key parameters (short sequences carry little of them).
    """
    d, k, v = config.d_model, config.head_dim, config.value_dim
    rows_bound = n_params(config) / (seq_len * d)
    head_bound = 2 * d * (k + v) / (seq_len * min(v, d))
    budget = config.n_heads * softmax_budget(seq_len, config.causal)
    qk_bound = (config.n_heads + config.n_kv_heads) * d * k / budget if budget else 0.0
    return math.ceil(oversample * max(rows_bound, head_bound, qk_bound)) + 1


def takes_block_route(config: AttentionConfig, method: str = "auto", params: Params | None = None,
                      seq_len: int | None = None, n_sequences: int | None = None) -> bool:
    """Whether ``measure`` tries the block route first: method "block", or "auto" above
    ``AUTO_DENSE_MAX_PARAMS`` parameters for a layer the route applies to
    (``blockrank.applicable``) when no parameters or inputs were given (it measures at its own
    point, on its own inputs)."""
    if method == "block":
        return True
    return (method == "auto" and params is None and seq_len is None and n_sequences is None
            and n_params(config) > AUTO_DENSE_MAX_PARAMS and blockrank.applicable(config) is None)


def default_max_params(config: AttentionConfig, method: str = "auto") -> int:
    """The largest layer ``measure`` takes unless told otherwise, by the route that measures
    it (``method``, or the one "auto" takes): 5,000,000 parameters by the block route, 70,000
    by the structured engine, 6,000 where only the dense SVD applies."""
    by_method = {"dense": DENSE_FALLBACK_MAX_PARAMS, "structured": STRUCTURED_MAX_PARAMS,
                 "block": BLOCK_MAX_PARAMS}
    if method != "auto":
        return by_method[method]
    if blockrank.applicable(config) is None:
        return BLOCK_MAX_PARAMS
    if fastrank.applicable(config) is None:
        return STRUCTURED_MAX_PARAMS
    return DENSE_FALLBACK_MAX_PARAMS


def measurement_bytes(config: AttentionConfig, seq_len: int | None = None,
                      n_sequences: int | None = None, method: str = "auto") -> int:
    """An estimate of the memory ``measure`` needs (float64), before anything is built.

    Dense route: J (rows x P, rows = B n d) and the SVD's copy of it, plus a min(rows, P)^2
    workspace.  Structured route (idlib.fastrank): per group a (B n m v) x P_g Jacobian, three
    copies, P x U lifted kernel columns and J V (rows x U), U = count(config).unidentified
    (P where the count is not derived).  Block route (idlib.blockrank): one stage at a time
    (``blockrank.estimated_bytes``).  "auto" may take several: the largest of those it may
    take; ``method`` forces one.
    """
    P = n_params(config)
    n = default_seq_len(config) if seq_len is None else seq_len
    B = default_n_sequences(config, n) if n_sequences is None else n_sequences
    rows = B * n * config.d_model
    dense = 8 * (2 * rows * P + min(rows, P) ** 2)
    if method == "dense":
        return dense
    if method == "block":
        return blockrank.estimated_bytes(config)
    block = takes_block_route(config, method, None, seq_len, n_sequences)
    if block and P > STRUCTURED_FALLBACK_MAX_PARAMS:
        return blockrank.estimated_bytes(config)
    if fastrank.applicable(config) is not None or \
            (method == "auto" and P <= AUTO_DENSE_MAX_PARAMS):
        return max(dense, blockrank.estimated_bytes(config)) if block else dense
    per_group = B * n * config.group_size * config.value_dim * (P // config.n_kv_heads + 1)
    try:
        U = count(config).unidentified
    except ConfigError:
        U = P
    structured = 8 * (3 * per_group + 3 * P * U + 2 * rows * U)
    if method == "structured":
        return structured
    if block:
        structured = max(structured, blockrank.estimated_bytes(config))
    return max(structured, dense) if P <= DENSE_FALLBACK_MAX_PARAMS else structured


def check_measurable(config: AttentionConfig, max_params: int | None = None,
                     seq_len: int | None = None, n_sequences: int | None = None,
                     method: str = "auto", memory: int | None = None) -> None:
    """Refuse, before anything is built, a layer larger than ``max_params`` (None: the default
    of :func:`default_max_params`) or one whose measurement would not fit in ``memory`` bytes
    (None: the memory available now).  A forced ``method`` that does not apply to the layer is
    left to its engine, which refuses it by name."""
    rule = {"block": blockrank.applicable, "structured": fastrank.applicable}.get(
        method, lambda c: None)(config)
    if rule is not None:
        return        # the forced route refuses the layer itself (BlockError, StructureError)
    P, limit = n_params(config), default_max_params(config, method) if max_params is None \
        else max_params
    if P > limit:
        raise ConfigError(f"measure: the layer has {P} parameters, more than max_params={limit} "
                          "(pass a larger max_params to insist)")
    need = measurement_bytes(config, seq_len, n_sequences, method)
    have = available_memory() if memory is None else memory
    if need > have:
        raise ConfigError(f"measure: measuring the layer's {P} parameters needs about "
                          f"{need / 1e9:.3g} GB, more than the {have / 1e9:.3g} GB available")


def block_measurement(config: AttentionConfig, seed: int, params: Params | None,
                      frequencies: torch.Tensor | None, device: torch.device | None) -> RankMeasurement:
    """The block route (:func:`idlib.blockrank.block_rank`) as a RankMeasurement."""
    b = blockrank.block_rank(config, params=params, seed=seed, frequencies=frequencies, device=device)
    return RankMeasurement(rank=b.rank, n_params=b.n_params, n_rows=b.n_rows,
                           singular_values=b.block_sigma_lower.cpu(), gap=b.gap,
                           certified=b.certified, method="block")


def structured_measurement(config: AttentionConfig, params: Params, X: torch.Tensor,
                           frequencies: torch.Tensor | None) -> RankMeasurement:
    """The structured route (:func:`idlib.fastrank.structured_rank`) as a RankMeasurement."""
    s = fastrank.structured_rank(config, params, X, frequencies)
    return RankMeasurement(
        rank=s.rank, n_params=s.n_params, n_rows=s.n_rows,
        singular_values=torch.cat([torch.tensor([s.sigma_r_lower], dtype=torch.float64),
                                   s.kernel_singular_values.cpu().sort(descending=True).values]),
        gap=s.gap, certified=is_certified(s.gap), method="structured")


@accepts(config=LAYER, seed=SEED, seq_len=OPTIONAL_SIZE, n_sequences=OPTIONAL_SIZE,
         params=OPTIONAL_PARAMS, frequencies=FREQUENCIES, method=one_of(*METHODS),
         max_params=OPTIONAL_SIZE, device=DEVICE)
def measure(config: AttentionConfig, seed: int = 0, seq_len: int | None = None,
            n_sequences: int | None = None, params: Params | None = None,
            frequencies: torch.Tensor | None = None, method: str = "auto",
            max_params: int | None = None,
            device: torch.device | str | None = None) -> RankMeasurement:
    """Jacobian rank at seeded generic parameters on seeded Gaussian inputs (float64).

    ``method``: "auto" (default), "dense", "structured" or "block" (see the module docstring).
    "block" measures at its own point built from ``params`` (or ``init_params(config, seed)``:
    their query and key weights and biases) on its own inputs.  A layer larger than
    ``max_params`` (default :func:`default_max_params`) or whose measurement would not fit in
    memory is refused before anything is built (:func:`check_measurable`).  ``device``: where
    every tensor of the measurement lives (default the CPU); the result's tensors are on the CPU.
    """
    device = None if device is None else torch.device(device)
    memory = None if device is None or device.type == "cpu" else \
        torch.cuda.mem_get_info(device)[0]
    check_measurable(config, max_params, seq_len, n_sequences, method, memory)
    params = None if params is None else {name: params[name] for name in param_shapes(config)}
    P = n_params(config)
    if takes_block_route(config, method, params, seq_len, n_sequences):
        try:
            m = block_measurement(config, seed, params, frequencies, device)
        except blockrank.BlockError:
            if method == "block" or P > STRUCTURED_FALLBACK_MAX_PARAMS:
                raise            # no other route may take a layer this large
        else:
            if m.certified or method == "block" or P > STRUCTURED_FALLBACK_MAX_PARAMS:
                return m
    params = init_params(config, seed) if params is None else params
    seq_len = default_seq_len(config) if seq_len is None else seq_len
    n_sequences = default_n_sequences(config, seq_len) if n_sequences is None else n_sequences
    X = random_inputs(config, n_sequences, seq_len, seed)
    if device is not None:
        params = {name: t.to(device) for name, t in params.items()}
        X, frequencies = X.to(device), None if frequencies is None else frequencies.to(device)
    if method == "structured" or (method == "auto" and P > AUTO_DENSE_MAX_PARAMS):
        try:
            m = structured_measurement(config, params, X, frequencies)
        except fastrank.StructureError:
            if method == "structured":
                raise
        else:
            if m.certified or method == "structured" or P > DENSE_FALLBACK_MAX_PARAMS:
                return m
    J = jacobian(config, params, X, frequencies)
    sv = torch.linalg.svdvals(J).cpu()
    rank, gap = rank_from_singular_values(sv, tuple(J.shape))
    return RankMeasurement(rank=rank, n_params=J.shape[1], n_rows=J.shape[0],
                           singular_values=sv, gap=gap, certified=is_certified(gap))


SPREAD_QK_SCALE = 2.0


def spread_params(config: AttentionConfig, seed: int, qk_scale: float = SPREAD_QK_SCALE) -> Params:
    """init_params(config, seed) with the query and key weights multiplied by ``qk_scale``.

    Another generic point (any continuous law of parameters is as good for the appendix's
    theorem), but with the scores spread ``qk_scale**2`` times wider: layers of many tiny heads
    (d = 1) whose score scalars a_h = w_Q w_K crowd near zero are far better conditioned there.
    """
    p = dict(init_params(config, seed))
    for name in ("W_Q", "W_K", "W_UK"):
        if name in p:
            p[name] = qk_scale * p[name]
    return p


@accepts(config=LAYER, seed=SEED, max_attempts=integer(1, 10 ** 6),
         spread_from=integer(0, 10 ** 6, none=True))
def measure_until_certified(config: AttentionConfig, seed: int = 0, max_attempts: int = 1,
                            spread_from: int | None = None,
                            **measure_kw: Any) -> tuple[RankMeasurement, list[dict[str, Any]]]:
    """Measure at seeds seed, seed + 1, ... until a rank is certified (at most ``max_attempts``).

    Attempt i (0-based) measures at seed + i with ``init_params``; from attempt ``spread_from``
    on (None: never) the parameters are ``spread_params`` (query/key weights doubled).  Returns
    the last measurement (the certified one, if any) and every attempt as {seed, qk_scale, rank,
    gap, certified}.  Where "auto" takes the block route (``takes_block_route``), so do the
    spread attempts (at their spread query and key weights).  ``params`` given: every attempt
    measures at those parameters (only the inputs change with the seed).  Legitimate because one certified generic point fixes the generic rank
    (appendix, thm-sweep-one-point): an uncertified cut is evidence of nothing, and every
    attempt is returned so that none is hidden; a certified rank that differs from the closed
    form is reported as a disagreement (``idlib.certify.check``), never retried away.
    """
    attempts: list[dict[str, Any]] = []
    given = measure_kw.pop("params", None)
    block = given is None and takes_block_route(config, measure_kw.get("method", "auto"), None,
                                                measure_kw.get("seq_len"), measure_kw.get("n_sequences"))
    for i in range(max(1, max_attempts)):
        s = seed + i
        spread = given is None and spread_from is not None and i >= spread_from
        params = given if given is not None else spread_params(config, s) if spread else None
        kw = dict(measure_kw, method="block") if spread and block else measure_kw
        m = measure(config, seed=s, params=params, **kw)
        attempts.append({"seed": s, "qk_scale": SPREAD_QK_SCALE if spread else 1.0, "rank": m.rank,
                         "gap": m.gap, "certified": bool(m.certified)})
        if m.certified:
            break
    return m, attempts
