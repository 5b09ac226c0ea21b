"""Chapter 3 (biases): the measurements behind its tables.

A bias's unidentified parameters are measured as a difference: the measured U = P - rank J of
the layer with the bias minus that of the same layer without it, at every seed, next to what
the theorem says and to ``idlib.count``'s component for that bias (``BiasDifference``).
``rank_steps`` reads the table of all 16 bias subsets one bias at a time: how much the rank
grows when one bias is added to a subset that lacks it, against the theorems' prediction.
``published`` reads a shipped Hugging Face config for the real-model tables.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Iterable, Sequence

from ..lazy import torch

from ..attention import rope_frequencies
from ..config import AttentionConfig, ConfigError
from ..counting import count
from ..hf import model_from_hf
from ..report.parameters import Rule, between
from ..symmetry import rotation_matrix
from .census import CONFIG_DIR
from .rope import SeedRun, measure_seeds

CASES = ("none", "default", "second plane at 2 pi", "second plane at pi")
"""Frequencies of the key-bias-under-RoPE table: no RoPE, the standard ones, and the standard
ones with the second plane's angle replaced by 2 pi (the plane is fixed) or by pi."""

SUBSETS = tuple("".join(s) for r in range(5) for s in combinations("qkvo", r))
"""The 16 subsets of the biases {q, k, v, o}, as ``AttentionConfig.bias`` strings."""


def case_frequencies(config: AttentionConfig, case: str) -> torch.Tensor | None:
    """The frequencies of ``case`` (one of ``CASES``) for ``config``; None: the layer's own."""
    if case not in CASES:
        raise ValueError(f"case={case!r} must be one of {CASES}")
    if case in ("none", "default"):
        return None
    freqs = rope_frequencies(config).clone()
    if len(freqs) < 2:
        raise ValueError(f"case {case!r} needs at least two rotated planes (r >= 4); "
                         f"the layer rotates r={config.rotary_dim}")
    freqs[1] = 2 * math.pi if case == "second plane at 2 pi" else math.pi
    return freqs


def case_problem(config: AttentionConfig, case: str) -> str | None:
    """Why ``case`` does not fit ``config`` (None when it does): 'none' exactly without
    rotation, the two hand-made cases with at least two rotated planes."""
    if case not in CASES:
        return f"the case must be one of {CASES}"
    if (case == "none") != (config.rotary_dim == 0):
        return "'none' is the case without rotation (rope fraction 0), and only it"
    if case.startswith("second plane") and config.rotary_dim < 4:
        return f"{case!r} needs two rotated planes (r >= 4; this layer has r={config.rotary_dim})"
    return None


def fixed_dim(config: AttentionConfig, freqs: torch.Tensor | None) -> int:
    """dim Fix = dim ker(R(1) - I) for one head's rotation R(1), from its rank."""
    R1 = rotation_matrix(config, 1.0, freqs)
    eye = torch.eye(config.head_dim, dtype=torch.float64)
    return config.head_dim - int(torch.linalg.matrix_rank(R1 - eye).item())


@dataclass(frozen=True)
class BiasDifference:
    """One bias on one layer: U with it minus U without it, measured at every seed."""

    with_bias: SeedRun
    without: SeedRun
    theorem: int          # what the chapter's theorem says
    counted: int          # idlib.count's component for the bias

    @property
    def config(self) -> AttentionConfig:
        """The layer with the bias."""
        return self.with_bias.config

    @property
    def per_seed(self) -> tuple[int, ...]:
        """The measured difference at each seed."""
        return tuple(a.measured_unidentified - b.measured_unidentified
                     for a, b in zip(self.with_bias.checks, self.without.checks, strict=True))

    @property
    def measured(self) -> tuple[int, ...]:
        """The distinct measured differences, increasing."""
        return tuple(sorted(set(self.per_seed)))

    @property
    def certified(self) -> bool:
        return self.with_bias.certified and self.without.certified

    @property
    def agrees(self) -> bool:
        """Both layers certified at every seed and theorem = count = every measured difference."""
        return self.certified and self.measured == (self.theorem,) == (self.counted,)


def _difference(with_bias: AttentionConfig, without: AttentionConfig, component: str,
                theorem: int, seeds: Sequence[int],
                frequencies: torch.Tensor | None = None) -> BiasDifference:
    return BiasDifference(measure_seeds(with_bias, seeds, frequencies),
                          measure_seeds(without, seeds, frequencies), theorem,
                          count(with_bias, frequencies).component(component).unidentified)


def value_bias(fields: dict[str, Any], seeds: Sequence[int]) -> list[BiasDifference]:
    """The value bias of one layer, with an output bias and without (thm-bias-value):
    Gv unidentified with b_O, Gv - min(d, Gv) without."""
    out = []
    for o in ("o", ""):
        cfg = AttentionConfig(**fields, bias="v" + o)
        Gv = cfg.n_kv_heads * cfg.value_dim
        theorem = Gv if o else Gv - min(cfg.d_model, Gv)
        out.append(_difference(cfg, cfg.replace(bias=o), "b_V", theorem, seeds))
    return out


def key_bias_rope(fields: dict[str, Any], fraction: float, case: str,
                  seeds: Sequence[int]) -> BiasDifference:
    """The key bias of one layer under RoPE (thm-bias-rope): G dim Fix unidentified."""
    cfg = AttentionConfig(**fields, rope_fraction=fraction, bias="k")
    freqs = case_frequencies(cfg, case)
    theorem = cfg.n_kv_heads * fixed_dim(cfg, freqs)
    return _difference(cfg, cfg.replace(bias=""), "b_K", theorem, seeds, freqs)


def key_bias_sweep(fields: dict[str, Any], fractions: Iterable[float],
                   seeds: Sequence[int]) -> list[BiasDifference]:
    """The key bias over rope fractions, standard frequencies: G (k - r) unidentified."""
    out = []
    for fraction in fractions:
        cfg = AttentionConfig(**fields, rope_fraction=fraction, bias="k")
        theorem = cfg.n_kv_heads * (cfg.head_dim - cfg.rotary_dim)
        out.append(_difference(cfg, cfg.replace(bias=""), "b_K", theorem, seeds))
    return out


def subset_runs(fields: dict[str, Any], seeds: Sequence[int]) -> dict[str, SeedRun]:
    """Every one of the 16 bias subsets of one layer, measured at every seed."""
    return {b: measure_seeds(AttentionConfig(**fields, bias=b), seeds) for b in SUBSETS}


@dataclass(frozen=True)
class Step:
    """Adding ``bias`` to the subsets that lack it (and satisfy ``when``) of one layer."""

    config: AttentionConfig      # the layer without biases
    bias: str                    # 'q', 'k', 'v' or 'o'
    when: str                    # 'always', 'without o', 'with o', 'without v', 'with v'
    increases: tuple[int, ...]   # the distinct measured rank increases (all pairs, all seeds)
    predicted: int               # what the theorems say
    pairs: int                   # how many subsets the bias was added to

    @property
    def agrees(self) -> bool:
        return self.increases == (self.predicted,)


def predicted_step(config: AttentionConfig, bias: str, subset: str) -> int:
    """The rank increase when ``bias`` is added to ``subset`` of a layer without RoPE:
    q adds H min(k, d) (thm-bias-query), k nothing (thm-bias-key), v min(d, Gv) without an
    output bias and nothing with one, o d without a value bias and d - min(d, Gv) with one
    (thm-bias-value)."""
    if config.rotary_dim:
        raise ValueError("predicted_step: the theorems of the prediction are without RoPE")
    d, Gv = config.d_model, config.n_kv_heads * config.value_dim
    if bias == "q":
        return config.n_heads * min(config.head_dim, d)
    if bias == "k":
        return 0
    if bias == "v":
        return 0 if "o" in subset else min(d, Gv)
    if bias == "o":
        return d - min(d, Gv) if "v" in subset else d
    raise ValueError(f"bias={bias!r} must be one of 'q', 'k', 'v', 'o'")


def rank_steps(runs: dict[str, SeedRun]) -> list[Step]:
    """``subset_runs`` read one bias at a time (layers without RoPE)."""
    base = runs[""].config.replace(bias="")
    partner = {"v": "o", "o": "v"}
    steps = []
    for b in "qkvo":
        conditions = [("always", lambda s: True)] if b not in partner else [
            (f"without {partner[b]}", lambda s, p=partner[b]: p not in s),
            (f"with {partner[b]}", lambda s, p=partner[b]: p in s)]
        for when, holds in conditions:
            subsets = [s for s in SUBSETS if b not in s and holds(s)]
            added = {s: "".join(x for x in "qkvo" if x in s + b) for s in subsets}
            increases = {a.rank - c.rank for s in subsets
                         for a, c in zip(runs[added[s]].checks, runs[s].checks, strict=True)}
            predicted = {predicted_step(base, b, s) for s in subsets}
            if len(predicted) != 1:
                raise AssertionError(f"rank_steps: condition {when!r} splits the prediction")
            steps.append(Step(base, b, when, tuple(sorted(increases)), predicted.pop(),
                              len(subsets)))
    return steps


@dataclass(frozen=True)
class Published:
    """A shipped configuration: its display name, its one attention layer, its layer count."""

    name: str
    config: AttentionConfig
    layers: int


def published(file: str) -> Published:
    """A config of ``idlib/data/configs`` whose layers are all one softmax attention layer;
    ``ConfigError`` otherwise (a latent or mixed model, or a file that does not read)."""
    path = CONFIG_DIR / file
    if not path.is_file():
        raise ConfigError(f"{file!r} is not a file of idlib/data/configs")
    model = model_from_hf(path)
    layer = model.types[0].config if model.uniform else None
    if not isinstance(layer, AttentionConfig):
        raise ConfigError(f"{file!r}: its layers are not all one softmax attention layer")
    name = json.loads(path.read_text()).get("_name", file)
    return Published(str(name), layer, model.n_layers)


def published_problem(file: Any) -> str | None:
    """Why ``file`` cannot be a row of the real-model tables (None when it can)."""
    try:
        published(file)
    except ConfigError as e:
        return str(e)
    return None


# --- the chapter's knobs -----------------------------------------------------------------

def _builds(fields: Any, **fixed: Any) -> AttentionConfig | str:
    """The layer ``fields`` (with ``fixed``) builds, or why it does not."""
    try:
        return AttentionConfig(**fields, **fixed)
    except ConfigError as e:
        return str(e)
    except TypeError as e:
        return str(e).replace("AttentionConfig.__init__() ", "")


def rope_case_rule(rope_layer: Any) -> Rule:
    """Parameters-cell rule for one entry of ``rope_cases``: a (rope fraction, case) pair that
    fits the layer ``rope_layer`` (checked before it)."""
    def reason(x: Any) -> str | None:
        cfg = _builds(rope_layer, rope_fraction=x[0], bias="k")
        return cfg if isinstance(cfg, str) else case_problem(cfg, x[1])
    return Rule(f"a (rope fraction in [0, 1], case) pair, the case one of {CASES}",
                lambda x: isinstance(x, (list, tuple)) and len(x) == 2
                and between(0, 1).holds(x[0]) and x[1] in CASES, reason)


def fraction_rule(fields: Any) -> Rule:
    """Parameters-cell rule for one rope fraction of the layer ``fields`` (checked before)."""
    def reason(x: Any) -> str | None:
        cfg = _builds(fields, rope_fraction=x, bias="k")
        return cfg if isinstance(cfg, str) else None
    return Rule("a number in [0, 1]", between(0, 1).holds, reason)


SHIPPED = Rule(f"the name of a file of {CONFIG_DIR.name}/ (a model of one softmax layer type)",
               lambda x: isinstance(x, str), published_problem)
"""Parameters-cell rule for one entry of ``real_models``."""
