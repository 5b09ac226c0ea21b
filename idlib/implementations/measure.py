"""Measuring the real modules the way idlib measures its own layer: the Jacobian of the module's
outputs with respect to its own parameters (one flat vector, ``torch.func.functional_call``), on
the seeded inputs of :func:`idlib.attention.random_inputs` with :mod:`idlib.rank`'s sizes, its
dense SVD, and the rank and gap by :func:`idlib.certify.rank_from_singular_values`;
:func:`check` pairs it with the closed form (:mod:`idlib.verdict`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from ..attention import n_params, random_inputs
from ..certify import is_certified, rank_from_singular_values
from ..config import AttentionConfig, ConfigError, LatentAttentionConfig
from ..hf import config_from_hf, family_of
from ..rank import default_n_sequences, default_seq_len, sequence_jacobian
from ..verdict import Check, check as verdict_check
from .modules import (DTYPE, FLOAT32_INSIDE, SPECS, Built, _BertWrap, _mask, build, forward,
                      parameters, small_latent_layer, small_layer)

@dataclass(frozen=True)
class ModuleMeasurement:
    """Rank of the real module's Jacobian (the fields verdict.Check reads)."""

    rank: int
    n_params: int
    n_rows: int
    gap: float
    certified: bool
    singular_values: torch.Tensor


def inputs(config: AttentionConfig | LatentAttentionConfig, seed: int = 0, n_sequences: int | None = None,
           seq_len: int | None = None) -> torch.Tensor:
    """The seeded N(0, 1) inputs of :func:`idlib.attention.random_inputs`, as many as
    :func:`idlib.rank.measure` takes for this layer (a latent layer: d_model + 2 tokens, and 1.5
    times as many output rows as parameters)."""
    latent = isinstance(config, LatentAttentionConfig)
    n = (config.d_model + 2 if latent else default_seq_len(config)) if seq_len is None else seq_len
    if n_sequences is not None:
        B = n_sequences
    else:
        B = math.ceil(1.5 * n_params(config) / (n * config.d_model)) + 1 if latent else \
            default_n_sequences(config, n)
    return random_inputs(config, B, n, seed)


def jacobian(built: Built, X: torch.Tensor) -> torch.Tensor:
    """d vec(output) / d theta over the module's own parameters, (B n d, P), by
    :func:`idlib.rank.sequence_jacobian` (one sequence at a time, vmapped)."""
    params = parameters(built)
    names = list(params)
    shapes = [params[k].shape for k in names]
    sizes = [params[k].numel() for k in names]
    theta = torch.cat([params[k].reshape(-1) for k in names])
    target = _BertWrap(built.module) if built.family == "bert" else built.module

    def f(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        ps = {k: c.reshape(s) for k, c, s in zip(names, t.split(sizes), shapes)}
        if built.family == "bert":
            return torch.func.functional_call(target, ps, (x[None], _mask(x.shape[0], False))).reshape(-1)
        return forward(built, x[None], ps).reshape(-1)

    return sequence_jacobian(f, theta, X)


def measure(built: Built, seed: int = 0) -> ModuleMeasurement:
    """Certified rank of the real module's Jacobian at its (seeded) weights, on seeded inputs."""
    X = inputs(built.config, seed)
    with torch.no_grad():
        J = jacobian(built, X)
    sv = torch.linalg.svdvals(J)
    rank, gap = rank_from_singular_values(sv, tuple(J.shape))
    return ModuleMeasurement(rank, J.shape[1], J.shape[0], gap, is_certified(gap), sv)


def check(family: str, seed: int = 0, **layer: Any) -> Check:
    """The closed form of the layer idlib reads from the family's config, against the real module."""
    built = build(family, seed=seed, **layer)
    return verdict_check(built.config, measure(built, seed), label=family)


def check_family_of(data: Any, name: str = "config", family: str | None = None, seed: int = 0) -> Check:
    """The real-implementation check of a Hugging Face config: its family's module at the small
    layer :func:`small_layer` picks, against the closed form of what idlib reads from it."""
    _, fam, _ = family_of(data, name, family)
    if fam in FLOAT32_INSIDE:
        raise ConfigError(f"{name}: family {fam!r} cannot be measured in float64: {FLOAT32_INSIDE[fam]}")
    if fam not in SPECS:
        raise ConfigError(f"{name}: family {fam!r} has no real-implementation check (known: "
                          f"{', '.join(sorted(SPECS))})")
    config = config_from_hf(data, family=family)
    layer = small_latent_layer(config) if isinstance(config, LatentAttentionConfig) else \
        small_layer(config, fam)
    return check(fam, seed=seed, **layer)


