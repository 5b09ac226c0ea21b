"""Chapter 10 helpers: the attention people run in 2026, as variant rows, measured.

``variant_rows`` lays out the registry of :mod:`idlib.variants` (one row per mechanism: its
fields, the stages of the forward pass it hooks into, its capabilities) for the chapter's first
table.  ``module_checks`` writes a small config with a family's own ``transformers`` config
class, reads it with :func:`idlib.hf.model_from_hf` (layer type by layer type) and measures each
counted type on the family's module (:func:`idlib.implementations.check_model_of`).
"""
from __future__ import annotations

from typing import Any

from .. import implementations, variants
from ..model import LayerType
from ..verdict import Check

# short names for the table (its caption spells them out)
CAPABILITY_NAMES = {"structured": "fast", "closed_blocks": "closed", "symmetry": "group",
                    "permute_heads": "relabel", "twin": "twin", "sdpa": "sdpa",
                    "conservation": "balance"}


def variant_rows() -> list[list[str]]:
    """One row per variant: name, fields, forward stages, count phases, capabilities declared
    (a row with modes: those of its most capable mode, marked "by mode")."""
    rows = []
    for row in variants.ROWS:
        if row.modes:
            caps = sorted(set().union(*(m.capabilities for m in row.modes)))
            note = " (by mode)"
        else:
            caps, note = sorted(row.capabilities), ""
        rows.append([row.name, ", ".join(f"`{f}`" for f in row.fields),
                     ", ".join(row.forward) or "-", ", ".join(row.count) or "-",
                     ", ".join(CAPABILITY_NAMES[c] for c in variants.CAPABILITIES if c in caps)
                     + note])
    return rows


def module_checks(cases: list[tuple[str, str, dict[str, Any]]],
                  seed: int = 0) -> list[tuple[str, LayerType, Check]]:
    """(label, layer type, check) for every counted layer type of every case (label, transformers
    config class, its keyword arguments), measured on the family's own module."""
    import transformers                      # the [hf] extra: only where real modules are measured
    out = []
    for label, cls, kw in cases:
        data = getattr(transformers, cls)(**kw).to_dict()
        for t, c in implementations.check_model_of(data, label, seed=seed):
            out.append((label, t, c))
    return out
