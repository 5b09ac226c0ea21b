"""The model types of ``transformers`` and what idlib does with each (the "Model types" page).

Grouped from :data:`idlib.hf.MODEL_TYPES` (a survey of every model type of the pinned
``transformers``: its attention code read and compared with the families of :mod:`idlib.hf`):
read (a family of its own, or the same attention code and fields as one), refused with the
mechanism that is not derived, derivable but without a reader row, or without a text softmax
attention layer.
"""
from __future__ import annotations

from collections import Counter, defaultdict

from ..hf import ALIASES, FAMILIES, MODEL_TYPES, MODEL_TYPES_VERSION

KINDS = {"read": "read: a family of idlib.hf", "same_as": "read as a family (same code and fields)",
         "derivable": "derivable, no reader row: read with `--family`",
         "refused": "refused: a mechanism not derived",
         "none": "no text softmax attention"}


def version() -> str:
    """The transformers version the table describes."""
    return MODEL_TYPES_VERSION


def kind_counts() -> list[list[str]]:
    """(what idlib does, number of model types) for each kind, in KINDS' order."""
    counts = Counter(rec["kind"] for rec in MODEL_TYPES.values())
    return [[text, str(counts[kind])] for kind, text in KINDS.items()] + \
        [["all", str(len(MODEL_TYPES))]]


def read_rows() -> list[list[str]]:
    """(family, the other model types read as it) for every family that has some."""
    others = defaultdict(list)
    for model_type, family in ALIASES.items():
        others[family].append(model_type)
    return [[f"`{f}`", ", ".join(f"`{m}`" for m in sorted(others[f]))]
            for f in sorted(FAMILIES) if others[f]]


def families_alone() -> list[str]:
    """The families no other model type is read as."""
    return sorted(set(FAMILIES) - set(ALIASES.values()))


def reason_rows(kind: str) -> list[list[str]]:
    """(model type, why) for every model type of ``kind`` ("refused" or "derivable")."""
    return [[f"`{m}`", rec["why"]] for m, rec in sorted(MODEL_TYPES.items()) if rec["kind"] == kind]


def without_attention() -> list[list[str]]:
    """(reason, number of model types, examples) for the model types with no text attention,
    grouped by the reason's first clause."""
    groups: dict[str, list[str]] = defaultdict(list)
    for m, rec in sorted(MODEL_TYPES.items()):
        if rec["kind"] == "none":
            groups[rec["why"].split(" - ")[0].split(":")[0].split("(")[0].strip()].append(m)
    return [[why, str(len(ms)), ", ".join(f"`{m}`" for m in ms[:4]) + (", ..." if len(ms) > 4 else "")]
            for why, ms in sorted(groups.items(), key=lambda kv: -len(kv[1]))]
