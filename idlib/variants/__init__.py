"""The variants of attention as data: one row per mechanism, and the questions the rest of idlib
asks them.  See :mod:`idlib.variants.base` for what a row declares.

The registry :data:`ROWS` is ordered: forward hooks of one stage, and count hooks of one phase,
run in this order; so do the parts of :func:`text`.  Every ``AttentionConfig`` field belongs to
exactly one row (``tests/test_variants_rows.py``).  Code outside this package asks the rows
(``supports``, ``refusal``, ``hooks``, ``shapes``, ``axes``); it never compares variant names.

Adding a variant: a module here with its ``ROW`` (fields, forward hooks, refusal, count hooks,
capabilities, text), its field in ``AttentionConfig``, its place in ``ROWS``; its tests; its
section of the book (the guide: ``chapters/new_variant.md``).
"""
from __future__ import annotations

from typing import Any

from .base import (CAPABILITIES, NORM_EPS, PHASES, STAGES, Flow, Hook, Mode, Tally, Variant,
                   center, rms_norm)
from . import alibi, bias, causal, centred, gate, heads, latent, qk_norm, rope, sinks, softcap, stack

ROWS: tuple[Variant, ...] = (heads.ROW, rope.ROW, bias.ROW, causal.ROW,
                             qk_norm.ROW, latent.ROW, centred.ROW, stack.ROW,
                             softcap.ROW, alibi.ROW, sinks.ROW, gate.ROW)
BY_NAME = {row.name: row for row in ROWS}

__all__ = ["ROWS", "BY_NAME", "CAPABILITIES", "PHASES", "STAGES", "Flow", "Hook", "Mode", "Tally",
           "Variant", "NORM_EPS", "center", "rms_norm", "active", "supports", "unsupported", "named",
           "refusal", "forgives_row_constants", "hooks", "count_hooks", "shapes", "axes", "text", "rules", "row_of"]


def active(config: Any) -> tuple[Variant, ...]:
    """The rows the layer uses, in registry order."""
    return tuple(row for row in ROWS if row.active(config))


def unsupported(config: Any, capability: str) -> tuple[str, ...]:
    """Names of the rows the layer uses that do not declare ``capability``."""
    return tuple(row.name for row in active(config) if not row.supports(capability, config))


def named(rows: tuple[str, ...]) -> str:
    """Row names with their fields, for a message: 'latent (kv_latent, latent_norm)'."""
    return ", ".join(f"{name} ({', '.join(BY_NAME[name].fields)})" for name in rows)


def supports(config: Any, capability: str) -> bool:
    """Whether every row the layer uses declares ``capability`` (an allow-list)."""
    return not unsupported(config, capability)


def refusal(config: Any) -> str | None:
    """The first rule the layer breaks for its count to be derived (None: derived)."""
    for row in active(config):
        if row.refuse is not None:
            reason = row.refuse(config)
            if reason is not None:
                return reason
    return None


def forgives_row_constants(config: Any) -> bool:
    """Whether the layer's weights still ignore a constant added to a row of scores (a key-bias
    move in the dims every rotation fixes): no row the layer uses declares otherwise."""
    return all(row.forgives_row_constants for row in active(config))


def hooks(config: Any, stage: str) -> list[Hook]:
    """The forward hooks of ``stage``, in registry order."""
    return [row.forward[stage] for row in active(config) if stage in row.forward]


def count_hooks(config: Any, phase: str) -> list[Hook]:
    """The count hooks of ``phase``, in registry order."""
    return [row.count[phase] for row in active(config) if phase in row.count]


def shapes(config: Any) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every parameter of the layer, row by row."""
    out: dict[str, tuple[int, ...]] = {}
    for row in active(config):
        if row.shapes is not None:
            out.update(row.shapes(config))
    return out


def axes(config: Any) -> dict[str, tuple[str | None, str | None]]:
    """Name -> (stack axis: "layer", "set" or None; head axis: "head", "group" or None)."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for row in active(config):
        if row.axes is not None:
            out.update(row.axes(config))
    return out


def text(config: Any) -> str:
    """The layer in the book's notation, e.g. 'd=6 H=2 G=1 k=4 v=4 r=2 b_Q b_K causal QK-norm gain'."""
    return " ".join(part for part in (row.text(config) for row in active(config)) if part)


def rules() -> dict[str, Any]:
    """Field -> its rule (idlib.fields), from every row."""
    return {name: check for row in ROWS for name, check in row.fields.items()}


def row_of(field_name: str) -> Variant:
    """The row that owns an AttentionConfig field."""
    for row in ROWS:
        if field_name in row.fields:
            return row
    raise KeyError(field_name)
