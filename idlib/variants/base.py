"""What a variant row is: its fields, its hooks into the forward pass and the count, its capabilities.

A row (:class:`Variant`) describes one mechanism of an attention layer and nothing else:

* ``fields``: the :class:`~idlib.config.AttentionConfig` fields it owns, each with its rule
  (:mod:`idlib.fields`); every field belongs to exactly one row.  ``relations`` checks the rules
  that tie its fields to the rest of the layer (one line naming the fields and the rule).
* ``active(config)``: whether the layer uses the mechanism.
* ``forward``: hooks ``stage -> f(flow)`` into the one forward pass of :mod:`idlib.attention`.
  The stages run in the order of :data:`STAGES`; within a stage the rows run in registry order.
  ``shapes`` gives the parameters the row adds (name -> shape), ``axes`` how a stack and a head
  permutation index them.
* ``refuse(config)``: the rule a layer breaks when its count is not derived (None: derived), and
  ``count``: hooks ``phase -> f(tally)`` into :func:`idlib.counting.count` (phases in the order
  of :data:`PHASES`).  A row's count hooks are its derivation (the book's theorem for it).
* ``capabilities``: what the rest of idlib may do with a layer that uses the row, each "no"
  unless declared (:data:`CAPABILITIES`); a row with modes (QK-norm) declares them per mode.
* ``text(config)``: the row's part of a one-line description of the layer ("" when inactive).

Hooks get a :class:`Flow` (forward) or a :class:`Tally` (count) and update it in place.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..lazy import torch

from ..fibers import Classes
from ..fields import Check

Config = Any           # an idlib.config.AttentionConfig (this module sits below config)
Params = dict[str, "torch.Tensor"]

# The forward pass, in order: what each stage does in the plain layer (idlib.variants.heads).
STAGES = (
    "inputs",      # X as the projections see it
    "kv",          # keys and values from another source (a latent)
    "project",     # Q_h = X W_Q^h; K_g, V_g = X W_K^g, X W_V^g unless already made
    "bias",        # projection biases
    "normalise",   # query/key norms
    "share",       # K_g, V_g repeated for the m heads of their group
    "rotate",      # position-dependent rotations of queries and keys
    "scores",      # S_h = Q_h K_h^T / sqrt(k)
    "transform",   # score transforms (caps, fixed position biases)
    "mask",        # masked scores (-inf)
    "extend",      # extra logits (sinks) appended to each row
    "softmax",     # A_h = softmax(S_h) over the last axis
    "trim",        # extra columns removed again
    "heads",       # Z_h = A_h V_h
    "gate",        # per-head output transforms
    "output",      # out = sum_h Z_h W_O^h, then the output bias
)
# The count, in order: widths (what each projection reads), fibers (per key/value group and set),
# components (name, total, unidentified).
PHASES = ("widths", "fibers", "components")
# What the rest of idlib asks of a row (each "no" unless the row declares it):
CAPABILITIES = (
    "structured",   # idlib.fastrank's route holds for the layer (per-group blocks, W_O eliminated)
    "closed_blocks",  # ... and its group blocks are written in closed form (else forward mode)
    "block",        # idlib.blockrank's route: its point, stages and closed-form diagonal blocks
    "symmetry",     # idlib.symmetry's group action and orbit tangent cover the mechanism
    "permute_heads",  # relabelling query heads (with their groups) is a symmetry
    "twin",         # the census may build a small twin keeping the mechanism
    "sdpa",         # attention.forward_sdpa computes the layer (torch's fused attention)
    "conservation",  # idlib.conservation's moment maps and balancing are derived for it
)


@dataclass
class Flow:
    """What the forward pass carries from stage to stage, for one layer (float64).

    X (B, n, d); q (B, H, n, k); k (B, G or H, n, k); v (B, G or H, n, v); scores and weights
    (B, H, n, n [+ extra columns]); heads (B, H, n, v); out (B, n, d).
    """

    config: Config
    params: Params
    X: torch.Tensor
    frequencies: torch.Tensor | None = None
    q: torch.Tensor | None = None
    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    scores: torch.Tensor | None = None
    weights: torch.Tensor | None = None
    heads: torch.Tensor | None = None
    out: torch.Tensor | None = None

    @property
    def positions(self) -> torch.Tensor:
        """Token positions 0 .. n - 1 (on the inputs' device)."""
        return torch.arange(self.X.shape[1], device=self.X.device)


@dataclass
class Tally:
    """The count of one layer while the rows build it (see :func:`idlib.counting.count`).

    Widths: d_in (what W_Q reads), b (what W_K, W_V read: d_in, or a latent C), a (W_Q's rows
    with a query bias), kv_in (rows of W_K, W_V or of the latent up projections), mm (query heads
    per key/value group and set), lat_extra (per up-projection column, a latent wider than d_in).
    Fibers, per key/value group and set: qk, q_bias, k_bias (key-bias dims softmax forgives),
    vo, and for the layer: v_bias, vo_fix, qk_layer (beyond the groups), qk_ones, vo_ones.
    """

    config: Config
    frequencies: Any = None
    classes: Classes | None = None
    d_in: int = 0
    b: int = 0
    a: int = 0
    kv_in: int = 0
    mm: int = 0
    lat_extra: int = 0
    lat_fiber: int = 0
    qk: int = 0
    q_bias: int = 0
    k_bias: int = 0
    vo: int = 0
    v_bias: int = 0
    vo_fix: int = 0
    qk_layer: int = 0
    qk_ones: int = 0
    vo_ones: int = 0
    gain: int = 0
    components: list = field(default_factory=list)


Hook = Callable[[Any], None]


@dataclass(frozen=True)
class Mode:
    """One mode of a row whose field takes several values (e.g. the kinds of QK-norm)."""

    name: str
    capabilities: frozenset[str] = frozenset()
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Variant:
    """One mechanism of an attention layer (see the module docstring)."""

    name: str
    summary: str
    fields: dict[str, Check]
    active: Callable[[Config], bool]
    forward: dict[str, Hook] = field(default_factory=dict)
    count: dict[str, Hook] = field(default_factory=dict)
    shapes: Callable[[Config], dict[str, tuple[int, ...]]] | None = None
    axes: Callable[[Config], dict[str, tuple[str | None, str | None]]] | None = None
    relations: Callable[[Config], None] | None = None
    refuse: Callable[[Config], str | None] | None = None
    capabilities: frozenset[str] = frozenset()
    mode: Callable[[Config], Mode] | None = None
    modes: tuple[Mode, ...] = ()          # every mode of a row with modes
    forgives_row_constants: bool = True   # softmax still forgives a constant added to a score row
    text: Callable[[Config], str] = lambda config: ""
    chapter: str = ""

    def __post_init__(self) -> None:
        unknown = set(self.forward) - set(STAGES) | set(self.count) - set(PHASES)
        unknown |= set(self.capabilities) - set(CAPABILITIES)
        if unknown:
            raise ValueError(f"variant {self.name!r}: unknown stage, phase or capability "
                             f"{sorted(unknown)}")

    def supports(self, capability: str, config: Config) -> bool:
        """Whether the row declares ``capability`` (for a row with modes: the layer's mode)."""
        if capability not in CAPABILITIES:
            raise ValueError(f"capability={capability!r} must be one of {', '.join(CAPABILITIES)}")
        declared = self.mode(config).capabilities if self.mode is not None else self.capabilities
        return capability in declared


def lead(config: Config, axis: str | None) -> tuple[int, ...]:
    """The leading axis a stack puts on a parameter: (L,) per layer, (L / S,) per key/value set."""
    if config.n_layers == 1 or axis is None:
        return ()
    return (config.n_layers,) if axis == "layer" else (config.n_kv_sets,)


# eps of every RMS normalisation.  0 (exact): the normalised vector is then invariant under a
# positive rescaling of its input, the symmetry every QK-norm / latent-norm count uses.  Models
# use eps ~ 1e-6; that breaks the rescaling only at relative order eps / mean(y^2), a
# near-symmetry that a Jacobian rank (with its gap rule) cannot tell from an exact one.
NORM_EPS = 0.0


def center(X: torch.Tensor) -> torch.Tensor:
    """X minus its mean over the feature axis (what a LayerNorm without affine does first)."""
    return X - X.mean(dim=-1, keepdim=True)


def rms_norm(y: torch.Tensor) -> torch.Tensor:
    """y / sqrt(mean(y^2) + NORM_EPS) over the last axis (no gain)."""
    return y / torch.sqrt(y.pow(2).mean(dim=-1, keepdim=True) + NORM_EPS)
