"""Chapter 7 helpers: closed-form counts of the modern variants against measured ranks.

Chapter 7 holds its configurations (for each variant a plain reference first, then layers chosen
to cross every regime of the count) as (key, label, AttentionConfig fields) triples: the key
names the row in the chapter's prose (``glue_values``), the label in its table and figure (it
may hold TeX between dollars, which both MathJax and matplotlib typeset).  ``run_section``
measures each at every seed and pairs it with its closed form (``idlib.verdict.Check``);
``section_table`` prints a section as a numbered table, ``draw_summary`` plots every section.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..config import AttentionConfig
from ..report.layers import layer_label
from ..report.tables import captioned, format_gap, format_share, markdown_table
from ..verdict import Check, measure_and_check

HEADERS = ("configuration", "layer measured", "$P$", "$U$ (closed form)", "$U$ (measured)",
           "$U/P$", "gap $\\gamma$", "certified")


def labelled_checks(entries: list[tuple[str, dict]], seed: int = 0) -> list[Check]:
    """A labelled check (closed form against the rank measured at ``seed``) per (label, fields)."""
    out = []
    for label, fields in entries:
        config = AttentionConfig(**fields)
        out.append(measure_and_check(config, seed, label=label))
    return out


@dataclass(frozen=True)
class Section:
    """The checks of one section of the chapter: ``per_seed[i][j]`` is entry j at seed i."""

    name: str
    keys: tuple[str, ...]
    seeds: tuple[int, ...]
    per_seed: tuple[tuple[Check, ...], ...]

    @property
    def first(self) -> dict[str, Check]:
        """The checks at the first seed, by key (what the table and the prose show)."""
        return dict(zip(self.keys, self.per_seed[0]))

    @property
    def agree(self) -> int:
        """Measurements (every entry, every seed) certified and equal to the closed form."""
        return sum(c.agrees for checks in self.per_seed for c in checks)

    @property
    def n_measurements(self) -> int:
        return sum(len(checks) for checks in self.per_seed)

    def tally(self) -> str:
        """'8 of 8 measurements certified and equal to the closed form (1 seed)'."""
        n = len(self.seeds)
        return (f"{self.agree} of {self.n_measurements} measurements certified and equal to "
                f"the closed form ({n} seed{'s' if n != 1 else ''})")


def run_section(name: str, entries: Sequence[tuple[str, str, dict[str, Any]]],
                seeds: Sequence[int]) -> Section:
    """Measure every (key, label, fields) entry at every seed."""
    keys = tuple(k for k, _, _ in entries)
    if len(set(keys)) != len(keys):
        raise ValueError(f"run_section: duplicate keys in {keys}")
    pairs = [(label, fields) for _, label, fields in entries]
    per_seed = tuple(tuple(labelled_checks(pairs, seed=s)) for s in seeds)
    return Section(name, keys, tuple(seeds), per_seed)


def section_rows(section: Section) -> list[list[Any]]:
    """The table's rows: the first seed's checks (the tally counts every seed)."""
    return [[c.label, layer_label(c.config), c.total, c.unidentified, c.measured_unidentified,
             format_share(c.unidentified, c.total), format_gap(c.gap),
             "yes" if c.certified else "no"] for c in section.per_seed[0]]


def section_table(section: Section, caption: str, name: str) -> str:
    """The section as a numbered table (MyST), its tally appended to the caption."""
    table = markdown_table(HEADERS, section_rows(section), align="llrrrrrl")
    return captioned(table, f"{caption} {section.tally()}.", name)


def glue_values(prefix: str, section: Section) -> dict[str, str]:
    """Text the chapter's prose pastes (``{glue:text}``), per entry key: '<prefix>-<key>-U'
    (closed-form U), '-P', '-share' (U/P as printed) and '-measured' (P - rank J)."""
    out = {}
    for key, c in section.first.items():
        out[f"{prefix}-{key}-U"] = str(c.unidentified)
        out[f"{prefix}-{key}-P"] = str(c.total)
        out[f"{prefix}-{key}-share"] = format_share(c.unidentified, c.total)
        out[f"{prefix}-{key}-measured"] = str(c.measured_unidentified)
    out[f"{prefix}-tally"] = f"{section.agree} of {section.n_measurements}"
    return out


def disagreements(sections: Sequence[Section]) -> list[str]:
    """'section: label (seed s)' for every measurement not certified equal to its closed form."""
    return [f"{s.name}: {c.label} (seed {seed})" for s in sections
            for seed, checks in zip(s.seeds, s.per_seed) for c in checks if not c.agrees]


def summary_size(sections: Sequence[Section]) -> tuple[float, float]:
    """The figure size (inches) of :func:`draw_summary`."""
    return 7.0, 0.32 * sum(len(s.keys) for s in sections) + 1.2


def draw_summary(ax: Any, sections: Sequence[Section], colors: dict[str, str]) -> None:
    """Every configuration's share U/P: closed form (bars) and measured at every seed (dots)."""
    rows = [(s, i) for s in sections for i in range(len(s.keys))]
    y = list(range(len(rows)))[::-1]
    closed = [100 * s.per_seed[0][i].unidentified / s.per_seed[0][i].total for s, i in rows]
    ax.barh(y, closed, color=colors["closed_form"], alpha=0.8, label="closed form")
    for k, (s, i) in enumerate(rows):
        measured = [100 * checks[i].measured_unidentified / checks[i].total
                    for checks in s.per_seed]
        ax.plot(measured, [y[k]] * len(measured), "o", color=colors["measured"], ms=5,
                label="measured (every seed)" if k == 0 else None)
    ax.set_yticks(y, [f"{s.name}: {s.per_seed[0][i].label}" for s, i in rows])
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel(r"unidentified share $U/P$ (%)")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2)


# -- the chapter's configurations: (key, label, AttentionConfig fields) ------------------------
# A reference layer first, then layers chosen to cross every regime of each count. The keys
# name the rows in the prose (``glue_values``) and in tests/test_variants_statements.py, which
# checks the chapter's comparisons against these counts.

_ROPE_HEAD = dict(d_model=6, n_heads=2, n_kv_heads=1, head_dim=4, rope_fraction=0.5)
_GQA = dict(d_model=6, n_heads=6, n_kv_heads=2, head_dim=2)
QK_NORM = [
    ("plain", "plain layer", dict(d_model=6, n_heads=2)),
    ("qkn", "QK-norm plain", dict(d_model=6, n_heads=2, qk_norm="plain")),
    ("qkn-gain", "QK-norm gain", dict(d_model=6, n_heads=2, qk_norm="gain")),
    ("bias", "plain, $b_Q$ $b_K$", dict(d_model=6, n_heads=2, bias="qk")),
    ("qkn-bias", "QK-norm plain, $b_Q$ $b_K$", dict(d_model=6, n_heads=2, bias="qk", qk_norm="plain")),
    ("rope", "RoPE", dict(_ROPE_HEAD)),
    ("rope-qkn", "RoPE, QK-norm plain", dict(_ROPE_HEAD, qk_norm="plain")),
    ("rope-qkn-gain", "RoPE, QK-norm gain", dict(_ROPE_HEAD, qk_norm="gain")),
    ("gqa", "GQA, $m = 3$, $k = 2$", dict(_GQA)),
    ("gqa-qkn", "GQA, $m = 3$, $k = 2$, QK-norm plain", dict(_GQA, qk_norm="plain")),
]

_BASE = dict(d_model=6, n_heads=2, head_dim=2)             # N = G(k + v) = 8 > d = 6
_WIDE = dict(_BASE, d_model=8, value_dim=1)                # N = 6 < d = 8
_NARROW = dict(d_model=6, n_heads=2, n_kv_heads=1, head_dim=3, value_dim=3)
LATENT = [
    ("plain", "plain layer", dict(_BASE)),
    ("c3", r"$d_c = 3 < \min(d, N)$", dict(_BASE, kv_latent=3)),
    ("c3-norm", "$d_c = 3$, latent norm", dict(_BASE, kv_latent=3, latent_norm=True)),
    ("c7", r"$N = 6 \leq d_c = 7 \leq d = 8$", dict(_WIDE, kv_latent=7)),
    ("c7-norm", "$d_c = 7$, latent norm", dict(_WIDE, kv_latent=7, latent_norm=True)),
    ("c6", "$d_c = d = 6 < N = 8$", dict(_BASE, kv_latent=6)),
    ("c8", "$d_c = 8 > d$", dict(_BASE, kv_latent=8)),
    ("c2", "$d_c = 2 < k = 3$, $b_Q$ $b_V$", dict(_NARROW, kv_latent=2, bias="qv")),
    ("c4-rope", "$d_c = 4$, RoPE, QK-norm",
     dict(_BASE, kv_latent=4, rope_fraction=1.0, qk_norm="plain")),
]

_BIASED = dict(d_model=5, n_heads=2, head_dim=4, value_dim=6, bias="qkvo")
CENTRED = [
    ("plain", "plain layer", dict(d_model=6, n_heads=2)),
    ("centred", "centred", dict(d_model=6, n_heads=2, input_centered=True)),
    ("bias", "plain, biases $b_Q$ $b_K$ $b_V$ $b_O$", dict(_BIASED)),
    ("centred-bias", "centred, biases $b_Q$ $b_K$ $b_V$ $b_O$", dict(_BIASED, input_centered=True)),
    ("centred-rope", "centred, RoPE", dict(d_model=6, n_heads=2, n_kv_heads=1, head_dim=4,
                                          rope_fraction=1.0, input_centered=True)),
    ("centred-qkn", "centred, QK-norm gain", dict(d_model=5, n_heads=2, head_dim=2, qk_norm="gain",
                                                  bias="ko", input_centered=True)),
]
# (reference key, centred key): what centring adds, against Hk + Gk + Gv
CENTRED_PAIRS = (("plain", "centred"), ("bias", "centred-bias"))

STACK = [
    ("s1", "$L = 2$, $L_{kv} = 1$", dict(d_model=4, n_heads=2, n_layers=2)),
    ("s2", "$L = 2$, $L_{kv} = 2$", dict(d_model=4, n_heads=2, n_layers=2, kv_share=2)),
    ("s3-gqa", "$L = 3$, $L_{kv} = 3$, GQA, RoPE, $b_Q$ $b_K$",
     dict(d_model=4, n_heads=2, n_kv_heads=1, n_layers=3, kv_share=3, rope_fraction=1.0,
          bias="qk")),
    ("s2-wide", "$L = 2$, $L_{kv} = 2$, $k = 5 > d$",
     dict(d_model=3, n_heads=1, head_dim=5, n_layers=2, kv_share=2, bias="q")),
    ("s2-qkn", "$L = 2$, $L_{kv} = 2$, QK-norm gain, RoPE",
     dict(d_model=4, n_heads=2, head_dim=4, n_layers=2, kv_share=2, qk_norm="gain",
          rope_fraction=0.5)),
]


def ones_components(config: AttentionConfig) -> int:
    """Hk + Gk + Gv: the all-ones components of the input-side weights of a layer without a
    latent (what the centred-input theorem of chapter 7 adds to the narrower layer's count)."""
    return config.n_heads * config.head_dim + config.n_kv_heads * (config.head_dim
                                                                   + config.value_dim)


def centring_glue(section: Section) -> dict[str, str]:
    """For each pair of CENTRED_PAIRS: what centring adds to the count ('var-cen-<ref>-added')
    and Hk + Gk + Gv of the layer ('var-cen-<ref>-ones')."""
    c = section.first
    out = {}
    for ref, centred in CENTRED_PAIRS:
        out[f"var-cen-{ref}-added"] = str(c[centred].unidentified - c[ref].unidentified)
        out[f"var-cen-{ref}-ones"] = str(ones_components(c[centred].config))
    return out


def qk_bias_glue(section: Section) -> dict[str, str]:
    """What a query and key bias add to the count without QK-norm ('var-qk-bias-added') and
    with it ('var-qk-qkn-bias-added')."""
    c = section.first
    return {"var-qk-bias-added": str(c["bias"].unidentified - c["plain"].unidentified),
            "var-qk-qkn-bias-added": str(c["qkn-bias"].unidentified - c["qkn"].unidentified)}
