"""The model types of ``transformers`` and what idlib does with each (the "Model types" page).

Grouped from :data:`idlib.hf.MODEL_TYPES` (a survey of every model type of the pinned
``transformers``: its attention code read and compared with the families of :mod:`idlib.hf`):
read (a family of its own, the same attention code and fields as one, or a family's attention
code with the defaults of its own config class), refused with the mechanism or structure that is
not derived, or without a text softmax attention layer.
"""
from __future__ import annotations

from collections import Counter, defaultdict

from ..hf import ALIASES, FAMILIES, MODEL_TYPES, MODEL_TYPES_VERSION, OWN_DEFAULTS

KINDS = {"read": "read: a family of idlib.hf", "same_as": "read as a family (same code and fields)",
         "own_defaults": "read as a family, with its own config defaults",
         "refused": "refused: a mechanism or structure not derived",
         "none": "no text softmax attention"}


def version() -> str:
    """The transformers version the table describes."""
    return MODEL_TYPES_VERSION


def counts() -> dict[str, int]:
    """Model types per kind (KINDS' keys), "all" and "read in all" (the first three kinds)."""
    c = Counter(rec["kind"] for rec in MODEL_TYPES.values())
    out = {kind: c[kind] for kind in KINDS}
    return {**out, "all": len(MODEL_TYPES), "read in all": out["read"] + out["same_as"] + out["own_defaults"]}


def kind_counts() -> list[list[str]]:
    """(what idlib does, number of model types) for each kind, in KINDS' order."""
    c = counts()
    return [[text, str(c[kind])] for kind, text in KINDS.items()] + [["all", str(c["all"])]]


def read_rows() -> list[list[str]]:
    """(family, the model types read as it with the same fields, those read with their own
    defaults) for every family that has some."""
    same, own = defaultdict(list), defaultdict(list)
    for model_type, family in ALIASES.items():
        same[family].append(model_type)
    for model_type, rec in MODEL_TYPES.items():
        if rec["kind"] == "own_defaults":
            own[rec["family"]].append(model_type)
    return [[f"`{f}`", ", ".join(f"`{m}`" for m in sorted(same[f])) or "-",
             ", ".join(f"`{m}`" for m in sorted(own[f])) or "-"]
            for f in sorted(FAMILIES) if same[f] or own[f]]


def families_alone() -> list[str]:
    """The families no other model type is read as."""
    others = set(ALIASES.values()) | {rec["family"] for rec in MODEL_TYPES.values()
                                      if rec["kind"] == "own_defaults"}
    return sorted(set(FAMILIES) - others)


def own_rows() -> list[list[str]]:
    """(model type, family, how its code uses the family's, the defaults of its own config class
    that differ from the family's) for every model type read with its own defaults."""
    rows = []
    for m, rec in sorted(MODEL_TYPES.items()):
        if rec["kind"] != "own_defaults":
            continue
        fam, mine = FAMILIES[rec["family"]], OWN_DEFAULTS[m]
        differ = []
        none = {"kv_default": "one per query head", "head_dim_default": "hidden / heads",
                "softcap": "none"}
        for key, label in (("kv_default", "kv heads"), ("head_dim_default", "head_dim"),
                           ("rope_theta", "RoPE base"), ("rope_fraction", "rotary share"),
                           ("softcap", "soft-cap")):
            if key in rec["row"] and getattr(mine, key) != getattr(fam, key):
                value = getattr(mine, key)
                differ.append(f"{label} {none[key] if value is None else f'{value:g}'}")
        for (key, letters, default), (_, _, theirs) in zip(mine.bias_flags, fam.bias_flags):
            if default != theirs:
                differ.append(f"{key} {str(default).lower()}")
        rows.append([f"`{m}`", f"`{rec['family']}`", rec["why"], ", ".join(differ) or "-"])
    return rows


def reason_rows(kind: str) -> list[list[str]]:
    """(model type, why) for every model type of ``kind`` ("refused")."""
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
