"""A whole model's attention: its layers grouped by type, each type counted, the counts summed.

A model whose layers differ (RoPE on some and not on others, softmax attention on some and linear
attention on others) is a :class:`Model` of :class:`LayerType` s: the layer indices of the type,
and its one attention layer (an :class:`~idlib.config.AttentionConfig` or a
:class:`~idlib.config.LatentAttentionConfig`), or, for layers that are not softmax attention, the
reason they are not counted.  :func:`count_model` counts each type once and multiplies by its
number of layers: the model's total, identified and unidentified parameters are the sums (the
layers' parameters are disjoint, so their unidentified directions add up; chapter 8, Theorem
"Layer counts add up to a lower bound").  ``idlib.hf.model_from_hf`` reads a model from a
config file.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .config import AttentionConfig, LatentAttentionConfig
from .counting import Count, count
from .variants import text as layer_text

Layer = AttentionConfig | LatentAttentionConfig


def ranges(indices: tuple[int, ...], most: int | None = 4) -> str:
    """Layer indices as runs: (0, 1, 2, 4, 5) -> '0-2, 4-5'; beyond ``most`` runs the middle ones
    are elided: '0-2, 4-6, 8-10, ..., 32-34'."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = [str(a) if a == b else f"{a}-{b}" for a, b in runs]
    if most is not None and len(text) > most:
        text = text[:most - 1] + ["...", text[-1]]
    return ", ".join(text)


@dataclass(frozen=True)
class LayerType:
    """The layers of one type: their indices, and their attention layer or why they have none."""

    layers: tuple[int, ...]
    config: Layer | None
    reason: str = ""            # why these layers are not counted (config None)

    @property
    def label(self) -> str:
        n = len(self.layers)
        return f"layers {ranges(self.layers)} ({n} layer{'s' if n != 1 else ''})"

    def describe(self) -> str:
        """'layers 0-2, 4-6 (6 layers): d=... r=64 ...' or '...: not counted (reason)'."""
        if self.config is None:
            return f"{self.label}: not counted ({self.reason})"
        if isinstance(self.config, AttentionConfig):
            return f"{self.label}: {layer_text(self.config)}"
        return f"{self.label}: multi-head latent attention"


@dataclass(frozen=True)
class Model:
    """A model's attention layers, by type (``n_layers`` = num_hidden_layers, when the file says)."""

    name: str
    family: str
    n_layers: int
    types: tuple[LayerType, ...]
    layers_given: bool = True   # False: num_hidden_layers absent, one layer assumed
    ignored: tuple[str, ...] = ()   # fields of the file the family's code does not read

    @property
    def counted(self) -> tuple[LayerType, ...]:
        return tuple(t for t in self.types if t.config is not None)

    @property
    def uniform(self) -> bool:
        """Every layer the same softmax attention layer."""
        return len(self.types) == 1 and self.types[0].config is not None

    def layer(self, index: int) -> LayerType:
        """The type of layer ``index``."""
        for t in self.types:
            if index in t.layers:
                return t
        raise IndexError(f"layer {index} of a model with {self.n_layers} layers")


@dataclass(frozen=True)
class ModelCount:
    """Each counted layer type's count, and the model's sums over its layers."""

    model: Model
    counts: tuple[tuple[LayerType, Count], ...]

    @property
    def total(self) -> int:
        return sum(len(t.layers) * c.total for t, c in self.counts)

    @property
    def unidentified(self) -> int:
        return sum(len(t.layers) * c.unidentified for t, c in self.counts)

    @property
    def identified(self) -> int:
        return self.total - self.unidentified

    @property
    def share(self) -> float:
        """The unidentified share of the counted layers, unidentified / total."""
        return self.unidentified / self.total if self.total else 0.0

    @property
    def ratio(self) -> float:
        """The unidentified share under its old name (``share``)."""
        return self.share

    @property
    def counted_layers(self) -> int:
        return sum(len(t.layers) for t, _ in self.counts)

    def to_dict(self) -> dict[str, Any]:
        m = self.model
        return {"n_layers": m.n_layers, "n_layers_given": m.layers_given,
                "ignored_fields": list(m.ignored),
                "counted_layers": self.counted_layers, "total": self.total,
                "identified": self.identified, "unidentified": self.unidentified,
                "share": self.share,
                "layer_types": [{"layers": list(t.layers), "label": t.label,
                                 "config": None if t.config is None else t.config.to_dict(),
                                 "not_counted": t.reason or None,
                                 **({} if c is None else {"total": c.total, "identified": c.identified,
                                                          "unidentified": c.unidentified})}
                                for t, c in ((t, dict(self.counts).get(t)) for t in m.types)]}


def count_model(model: Model) -> ModelCount:
    """Count each layer type once (``idlib.counting.count``): refused types raise ConfigError."""
    return ModelCount(model, tuple((t, count(t.config)) for t in model.counted))
