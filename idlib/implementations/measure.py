"""Measuring the real modules the way idlib measures its own layer: the Jacobian of the module's
outputs with respect to its own parameters (one flat vector, ``torch.func.functional_call``), on
the seeded inputs of :func:`idlib.attention.random_inputs` with :mod:`idlib.rank`'s sizes, its
dense SVD, and the rank and gap by :func:`idlib.certify.rank_from_singular_values`;
:func:`check` pairs it with the closed form (:mod:`idlib.verdict`).

A Hugging Face config is checked layer type by layer type (:func:`check_model_of`): each counted
type of :func:`idlib.hf.model_from_hf` gets a small twin with the file's structure (its layer
types, NoPE layers, QK-norm and ALiBi flags) built at the type's first layer, whose read-back must
be the file's type up to sizes; :func:`check_family_of` is the one-type case.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..lazy import torch

from ..attention import n_params, random_inputs
from ..certify import is_certified, rank_from_singular_values
from ..config import AttentionConfig, ConfigError, LatentAttentionConfig
from ..hf import Family, attention_fields_from_hf, family_of, model_from_hf
from ..model import LayerType, Model
from ..rank import default_n_sequences, default_seq_len, sequence_jacobian
from ..verdict import Check, check as verdict_check
from .modules import (FLOAT32_INSIDE, SPECS, Built, _mask, build, forward, module_classes,
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


def jacobian(built: Built, X: torch.Tensor, float64: bool = True) -> torch.Tensor:
    """d vec(output) / d theta over the module's own parameters, (B n d, P), by
    :func:`idlib.rank.sequence_jacobian` (one sequence at a time, vmapped); ``float64=False``:
    of the module's own path, float32 steps included (the controls)."""
    params = parameters(built)
    names = list(params)
    shapes = [params[k].shape for k in names]
    sizes = [params[k].numel() for k in names]
    theta = torch.cat([params[k].reshape(-1) for k in names])
    target = module_classes().BertWrap(built.module) if built.family == "bert" else built.module

    def f(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        ps = {k: c.reshape(s) for k, c, s in zip(names, t.split(sizes), shapes)}
        if built.family == "bert":
            return torch.func.functional_call(target, ps, (x[None], _mask(x.shape[0], False))).reshape(-1)
        return forward(built, x[None], ps, float64=float64).reshape(-1)

    return sequence_jacobian(f, theta, X)


def measure(built: Built, seed: int = 0, float64: bool = True) -> ModuleMeasurement:
    """Certified rank of the real module's Jacobian at its (seeded) weights, on seeded inputs
    (``float64=False``: of its own path, float32 steps included; not certified as a rule)."""
    X = inputs(built.config, seed)
    with torch.no_grad():
        J = jacobian(built, X, float64)
    sv = torch.linalg.svdvals(J)
    rank, gap = rank_from_singular_values(sv, tuple(J.shape))
    return ModuleMeasurement(rank, J.shape[1], J.shape[0], gap, is_certified(gap), sv)


def check(family: str, seed: int = 0, **layer: Any) -> Check:
    """The closed form of the layer idlib reads from the family's config, against the real module."""
    built = build(family, seed=seed, **layer)
    return verdict_check(built.config, measure(built, seed), label=family)


def _model_of(data: Any, name: str, family: str | None) -> tuple[str, Family, Model]:
    """(family, its idlib.hf row, the whole model read from the config), refused where the
    family's module is not measured."""
    _, fam, row = family_of(data, name, family)
    if fam in FLOAT32_INSIDE:
        raise ConfigError(f"{name}: family {fam!r} cannot be measured in float64: {FLOAT32_INSIDE[fam]}")
    if fam not in SPECS:
        raise ConfigError(f"{name}: family {fam!r} has no real-implementation check (known: "
                          f"{', '.join(sorted(SPECS))})")
    return fam, row, model_from_hf(data, family)


# fields read by idlib.hf that switch a mechanism on or off for every layer (beyond sizes and
# biases, which small_layer carries): a file's twin copies them when the file has them
FLAG_FIELDS = ("use_bidirectional_attention", "is_decoder", "attn_logit_softcapping")
SIZES = ("d_model", "n_heads", "n_kv_heads", "head_dim", "value_dim")


def small_model_layer(data: Any, kind: LayerType, name: str = "config",
                      family: str | None = None) -> tuple[str, dict[str, Any]]:
    """(family, keyword arguments of :func:`build`) for the small twin of one layer type of a
    Hugging Face config: :func:`small_layer` of the type's layer (sizes, biases, rotary share;
    a NoPE type is sized with the file's rotary share, which its config keeps for the other
    layers), the file's per-layer structure (``Spec.structure``: layer_types, no_rope_layers,
    sliding_window, ... and the number of layers), its on/off flags (QK-norm, ALiBi,
    :data:`FLAG_FIELDS`), and ``layer_idx`` = the type's first layer."""
    text, fam, row = family_of(data, name, family)
    if isinstance(kind.config, LatentAttentionConfig):
        return fam, dict(small_latent_layer(kind.config), layer_idx=kind.layers[0])
    frac = None
    if kind.config.rope_fraction == 0 and not kind.config.alibi and row.rotary:
        frac = attention_fields_from_hf(data, name, family)["rope_fraction"] or None
    layer = small_layer(kind.config, fam, rope_fraction=frac)
    spec = SPECS[fam]
    flags = FLAG_FIELDS + tuple(f[0] for f in (row.qk_norm_flag, row.alibi) if f is not None)
    for key in spec.structure + flags:
        if key in text and key not in layer:
            layer[key] = text[key]
    if spec.structure:
        layer[spec.layers_field] = model_from_hf(data, family).n_layers
    return fam, dict(layer, layer_idx=kind.layers[0])


def _shape_free(config: Any) -> Any:
    """A layer's fields other than its sizes (a reason string for a layer that is not counted)."""
    if isinstance(config, AttentionConfig):
        return {k: v for k, v in config.to_dict().items() if k not in SIZES}
    return config


def _check_kind(data: Any, model: Model, kind: LayerType, name: str, family: str | None, seed: int,
                label: str) -> Check:
    fam, layer = small_model_layer(data, kind, name, family)
    built = build(fam, seed=seed, **layer)
    if isinstance(kind.config, AttentionConfig):
        # the twin's layers must read as the file's, sizes aside: the built layer, and every layer
        # where the twin copies the file's per-layer structure
        twin = model_from_hf(built.hf_config.to_dict())
        layers = range(model.n_layers) if SPECS[fam].structure else [kind.layers[0]]
        for i in layers:
            t, f = model.layer(i), twin.layer(i)
            want, got = _shape_free(t.config or t.reason), _shape_free(f.config or f.reason)
            if want == got:
                continue
            if isinstance(want, dict) and isinstance(got, dict):
                diff = ", ".join(f"{k}: {want.get(k)!r} in the file, {got.get(k)!r} in the twin"
                                 for k in sorted(set(want) | set(got)) if want.get(k) != got.get(k))
            else:
                diff = f"{want!r} in the file, {got!r} in the twin"
            raise ConfigError(f"{name}: the small twin's layer {i} does not read as the file's "
                              f"layer {i} ({diff})")
    return verdict_check(built.config, measure(built, seed), label=label)


def check_model_of(data: Any, name: str = "config", family: str | None = None,
                   seed: int = 0) -> list[tuple[LayerType, Check]]:
    """The real-implementation check of a Hugging Face config, one per counted layer type
    (:func:`idlib.hf.model_from_hf`; types that are not softmax attention are not checked): the
    family's module at the small layer :func:`small_model_layer` picks, with the file's structure
    and the layer kind of the type, against the closed form of what idlib reads from that small
    layer (which must read as the file's type, sizes aside)."""
    fam, _, model = _model_of(data, name, family)
    counted = model.counted
    if not counted:
        raise ConfigError(f"{name}: no layer is softmax attention ({model.types[0].reason})")
    return [(kind, _check_kind(data, model, kind, name, family, seed,
                               fam if len(counted) == 1 else f"{fam} {kind.label}"))
            for kind in counted]


def check_family_of(data: Any, name: str = "config", family: str | None = None, seed: int = 0) -> Check:
    """The real-implementation check of a Hugging Face config whose softmax-attention layers are
    all alike (:func:`check_model_of` with exactly one layer type)."""
    fam, _, model = _model_of(data, name, family)
    counted = model.counted
    if len(counted) != 1:
        kinds = "; ".join(t.describe() for t in counted) or model.types[0].reason
        raise ConfigError(f"{name}: its layers differ ({len(counted)} counted types: {kinds}); "
                          "check each layer type with check_model_of")
    return _check_kind(data, model, counted[0], name, family, seed, fam)
