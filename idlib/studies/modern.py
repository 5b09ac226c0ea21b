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
from ..hf import model_from_hf
from ..model import LayerType, count_model
from ..report.layers import layer_label
from ..report.tables import captioned, format_gap, format_share, markdown_table
from ..verdict import Check
from .variants import labelled_checks

# short names for the table (its caption spells them out)
CAPABILITY_NAMES = {"structured": "fast", "closed_blocks": "closed", "block": "block",
                    "symmetry": "group",
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
    transformers = implementations._transformers()   # the [hf] extra, imported quietly
    out = []
    for label, cls, kw in cases:
        data = getattr(transformers, cls)(**kw).to_dict()
        for t, c in implementations.check_model_of(data, label, seed=seed):
            out.append((label, t, c))
    return out


SMALL = dict(hidden_size=16, num_attention_heads=4, num_key_value_heads=2)
# (label, a config dict as the family's config class would write it): models whose layers differ
MIXED = [("SmolLM3, no_rope_layers 0, 0", dict(model_type="smollm3", **SMALL, num_hidden_layers=2,
                                                no_rope_layers=[0, 0])),
         ("SmolLM3, the default", dict(model_type="smollm3", **SMALL, num_hidden_layers=8)),
         ("Command R7B", dict(model_type="cohere2", **SMALL, head_dim=4, num_hidden_layers=4)),
         ("EXAONE 4", dict(model_type="exaone4", **SMALL, head_dim=4, num_hidden_layers=4)),
         ("Llama 4", dict(model_type="llama4_text", **SMALL, head_dim=4, num_hidden_layers=4)),
         ("Qwen3-Next", dict(model_type="qwen3_next", **SMALL, head_dim=8, num_hidden_layers=4))]
# (label, transformers config class, its keyword arguments): the modules of chapter 10
MODULE_CASES = [
    ("bloom", "BloomConfig", dict(hidden_size=16, n_head=4)),
    ("mpt", "MptConfig", dict(d_model=16, n_heads=4)),
    ("falcon, alibi", "FalconConfig", dict(hidden_size=16, num_attention_heads=4, alibi=True,
                                           bias=True)),
    ("gpt_oss", "GptOssConfig", dict(SMALL, head_dim=4, num_hidden_layers=2)),
    ("qwen3_next", "Qwen3NextConfig", dict(SMALL, head_dim=8, num_hidden_layers=4)),
    ("llama4_text", "Llama4TextConfig", dict(SMALL, head_dim=4, num_hidden_layers=4)),
    ("smollm3", "SmolLM3Config", dict(SMALL, num_hidden_layers=4)),
    ("cohere2", "Cohere2Config", dict(SMALL, head_dim=4, num_hidden_layers=4)),
    ("exaone4", "Exaone4Config", dict(SMALL, head_dim=4, num_hidden_layers=4)),
    ("helium", "HeliumConfig", dict(SMALL, head_dim=4, attention_bias=True)),
    ("ernie4_5", "Ernie4_5Config", dict(SMALL, head_dim=4, use_bias=True)),
    ("codegen", "CodeGenConfig", dict(n_embd=16, n_head=4, rotary_dim=2)),
    ("ministral", "MinistralConfig", dict(SMALL, head_dim=4)),
    ("seed_oss", "SeedOssConfig", dict(SMALL, head_dim=4)),
    ("granitemoe", "GraniteMoeConfig", dict(SMALL, attention_bias=True)),
    ("nemotron", "NemotronConfig", dict(SMALL, head_dim=4)),
    ("olmo3", "Olmo3Config", dict(SMALL)),
    # modules that round inside the attention forward (measured since the float64 patches)
    ("cohere", "CohereConfig", dict(SMALL)),
    ("gptj", "GPTJConfig", dict(n_embd=16, n_head=4, rotary_dim=2)),
    # the per-head QK LayerNorms of chapter 9, switched on
    ("cohere, use_qk_norm", "CohereConfig", dict(SMALL, use_qk_norm=True)),
    ("stablelm, qk_layernorm", "StableLmConfig", dict(hidden_size=16, num_attention_heads=4,
                                                      num_key_value_heads=4, qk_layernorm=True,
                                                      partial_rotary_factor=0.5)),
    ("phi, qk_layernorm", "PhiConfig", dict(hidden_size=16, num_attention_heads=4,
                                            qk_layernorm=True, partial_rotary_factor=0.5)),
    ("persimmon, qk_layernorm", "PersimmonConfig", dict(hidden_size=16, num_attention_heads=4,
                                                        qk_layernorm=True,
                                                        partial_rotary_factor=0.5)),
]


def mixed_rows(layer_text: Any) -> list[list[Any]]:
    """Rows of the chapter's table of models whose layers differ: per layer type its layers, layer
    and per-layer P and U; per model the sums over its counted layers (``layer_text`` formats a
    layer)."""
    rows: list[list[Any]] = []
    for name, data in MIXED:
        mc = count_model(model_from_hf(data))
        for t, c in mc.counts:
            rows.append([name, t.label, layer_text(t.config), c.total, c.unidentified])
        for t in mc.model.types:
            if t.config is None:
                rows.append([name, t.label, "not counted: linear attention", "-", "-"])
        rows.append([f"{name}: model", f"{mc.counted_layers} counted", "", mc.total,
                     mc.unidentified])
    return rows


# -- the chapter's tables of idlib's own layer -----------------------------------------------
OWN_HEADERS = ["configuration", "layer measured", "$P$", "$U$ (closed form)", "$U$ (measured)",
               "$U/P$", "gap $\\gamma$", "agrees"]


def own_table(entries: list[tuple[str, dict[str, Any]]], seeds: list[int], caption: str,
              name: str) -> str:
    """Closed form against the measured rank of idlib's layer for (label, fields) entries, at
    every seed: a numbered table of the first seed's checks, the tally over every seed
    appended to the caption ('5 of 5 agree (1 seed)')."""
    runs = [labelled_checks(entries, seed=s) for s in seeds]
    rows = [[c.label, layer_label(c.config), c.total, c.unidentified, c.measured_unidentified,
             format_share(c.unidentified, c.total), format_gap(c.gap),
             "yes" if c.agrees else "NO"] for c in runs[0]]
    agree = sum(c.agrees for run in runs for c in run)
    n = len(seeds)
    tally = f"{agree} of {sum(map(len, runs))} agree ({n} seed{'s' if n != 1 else ''})"
    return captioned(markdown_table(OWN_HEADERS, rows, align="llrrrrrl"),
                     f"{caption} {tally}.", name)


def mixed_table(layer_text: Any) -> str:
    """The models whose layers differ, read layer by layer and counted type by type
    (numbered)."""
    return captioned(markdown_table(
        ["config", "layers", "layer", "$P$ per layer", "$U$ per layer"], mixed_rows(layer_text),
        align="lllrr"), "Models whose layers differ, read layer by layer "
        "(`idlib.hf.model_from_hf`) and counted type by type; the model rows are the sums over "
        "the counted layers.", "tab-new-mixed")


def modules_table(checks: list[tuple[str, LayerType, Check]]) -> str:
    """The families' own modules, one row per layer type (numbered)."""
    rows = [[label, t.label, layer_label(c.config), c.total, c.unidentified,
             c.measured_unidentified, format_gap(c.gap), "yes" if c.agrees else "NO"]
            for label, t, c in checks]
    return captioned(markdown_table(
        ["family", "layers", "layer measured", "$P$", "$U$ (closed form)", "$U$ (measured)",
         "gap $\\gamma$", "agrees"], rows, align="lllrrrrl"),
        "The 2026 mechanisms on the families' own modules, one row per layer type: the closed "
        "form of the layer idlib reads from the config against the certified rank of the "
        "module.", "tab-new-modules")


def rope_free(data: dict[str, Any]) -> bool:
    """Does every counted layer of a config read without RoPE?"""
    return all(not t.config.rotary_dim for t in model_from_hf(data).counted)
