"""Tables and generated sentences of Chapter 3 (biases).

The measurements come from ``idlib.studies.biases``; each function here returns either a
captioned MyST table (``tables.captioned``) or the sentence of the prose that states what a
table shows, counted from the measurements, for the chapter to glue (``myst_nb.glue``).
"""
from __future__ import annotations

from typing import Sequence

from ..config import AttentionConfig
from ..counting import count
from .prose import listing, seeds_text, tally
from .runs import distinct
from .tables import (ROUNDOFF_SHOWN, captioned, comparison_table, format_certified,
                     format_share, markdown_table)

# Annotations name the measurement records of idlib.studies (SeedRun, BiasDifference, Step,
# Published) without importing them: report sits below studies and never imports it.

CASE_SHOWN = {"none": "none", "default": "$b^{-2(l-1)/r}$",
              "second plane at 2 pi": "$\\omega_2 = 2\\pi$",
              "second plane at pi": "$\\omega_2 = \\pi$"}
"""How the frequencies of each case of ``idlib.studies.biases.CASES`` are shown."""

_DIFFERENCE = ("meas.: the measured $U$ with the bias minus the measured $U$ without, its "
               "distinct values over the seeds; cert.: both ranks certified (gap "
               "$\\gamma \\ge 10^4$) at every seed")


def layer_math(config: AttentionConfig, value: bool = False) -> str:
    """A layer in inline math: '$d = 8$, $H = 4$, $G = 2$, $k = 2$, causal, RoPE $r = 2$'
    ($v$ too where it differs from $k$, or with ``value``)."""
    c = config
    parts = [f"$d = {c.d_model}$", f"$H = {c.n_heads}$", f"$G = {c.n_kv_heads}$",
             f"$k = {c.head_dim}$"]
    if value or c.value_dim != c.head_dim:
        parts.append(f"$v = {c.value_dim}$")
    if c.causal:
        parts.append("causal")
    if c.rotary_dim:
        parts.append(f"RoPE $r = {c.rotary_dim}$")
    return ", ".join(parts)


def value_table(rows: Sequence[BiasDifference], seeds: Sequence[int]) -> str:
    """tab-bias-value: the value bias of each layer, with and without an output bias."""
    cells = []
    for r in rows:
        c = r.config
        cells.append([c.d_model, c.n_heads, c.n_kv_heads, c.value_dim,
                      c.n_kv_heads * c.value_dim, "yes" if "o" in c.bias else "no",
                      r.theorem, r.counted, distinct(r.measured),
                      format_certified(r.certified)])
    table = markdown_table(["$d$", "$H$", "$G$", "$v$", "$Gv$", "$b_O$", "theorem", "count",
                            "meas.", "cert."], cells)
    caption = ("Unidentified value-bias parameters, with and without an output bias $b_O$, "
               f"at {seeds_text(seeds)}. theorem: {{prf:ref}}`thm-bias-value`; count: "
               f"`idlib.count`; {_DIFFERENCE}.")
    return captioned(table, caption, "tab-bias-value")


def value_verdict(rows: Sequence[BiasDifference]) -> str:
    """What tab-bias-value shows, counted, and which of its layers have Gv > d."""
    agree = sum(r.agrees for r in rows)
    wide = [r.config for r in rows if "o" not in r.config.bias
            and r.config.n_kv_heads * r.config.value_dim > r.config.d_model]
    where = ("no layer of the table has $Gv > d$" if not wide else
             "in the table: " + listing(layer_math(c, value=True) for c in wide))
    return (f"The measured count equals the theorem and `count` in "
            f"{tally(agree, len(rows), 'row')} of {{numref}}`tab-bias-value`. Without an "
            f"output bias the value bias is redundant only when $Gv > d$ ({where}).")


def subset_table(runs: dict[str, SeedRun], number: int, seeds: Sequence[int]) -> str:
    """tab-bias-subsets-<number>: the 16 bias subsets of one layer (the first seed's rank,
    the gap the smallest over the seeds)."""
    worst = [min(r.checks, key=lambda c: (c.agrees, c.gap)) for r in runs.values()]
    redundant = lambda cfg: sum(p.unidentified for p in count(cfg).components
                                if p.name.startswith("b_"))
    table = comparison_table(worst, {"bias": lambda cfg: cfg.bias or "none",
                                     "$U_b$": redundant})
    layer = layer_math(next(iter(runs.values())).config)
    caption = (f"All 16 bias subsets of the layer {layer}, at {seeds_text(seeds)}. $U_b$: "
               "redundant bias parameters (closed form); $P$, $I$, $U/P$ as in "
               "{numref}`tab-sh-count`; rank $J$, gap $\\gamma$ and cert.: the seed with the "
               "smallest gap (a seed that disagrees, if any).")
    return captioned(table, caption, f"tab-bias-subsets-{number}")


STEP_WHEN = {"always": "always", "without o": "no $b_O$", "with o": "with $b_O$",
             "without v": "no $b_V$", "with v": "with $b_V$"}
STEP_RULE = {"q": "H \\min(k, d)", "k": "", ("v", "without o"): "\\min(d, Gv)",
             ("v", "with o"): "", ("o", "without v"): "d",
             ("o", "with v"): "d - \\min(d, Gv)"}
"""The theorems' rank increase (TeX; empty: none) when a bias is added (and when)."""


def steps_table(steps_by_layer: Sequence[Sequence[Step]], seeds: Sequence[int]) -> str:
    """tab-bias-steps: the subset tables read one bias at a time."""
    cells = []
    for number, steps in enumerate(steps_by_layer, start=1):
        for s in steps:
            rule = STEP_RULE[s.bias] if s.bias in STEP_RULE else STEP_RULE[(s.bias, s.when)]
            cells.append([number, f"$b_{s.bias.upper()}$", STEP_WHEN[s.when], s.pairs,
                          distinct(s.increases),
                          f"${rule} = {s.predicted}$" if rule else str(s.predicted),
                          "yes" if s.agrees else "NO"])
    table = markdown_table(["layer", "added", "when", "pairs", "rank increase",
                            "theorem", "agrees"], cells, align="rllrrrl")
    caption = ("The subset tables read one bias at a time: the increase of the measured rank "
               "when one bias is added to a subset that lacks it (pairs: how many subsets; "
               f"the distinct increases over all pairs and {seeds_text(seeds)}), against "
               "{prf:ref}`thm-bias-query`, {prf:ref}`thm-bias-key` and "
               "{prf:ref}`thm-bias-value`. Layer: " + listing(
                   f"{n} that of {{numref}}`tab-bias-subsets-{n}`"
                   for n, steps in enumerate(steps_by_layer, start=1) if steps) + ".")
    return captioned(table, caption, "tab-bias-steps")


def steps_verdict(steps_by_layer: Sequence[Sequence[Step]]) -> str:
    steps = [s for layer in steps_by_layer for s in layer]
    agree = sum(s.agrees for s in steps)
    return (f"The measured increase equals the prediction in {tally(agree, len(steps), 'row')} "
            "of {numref}`tab-bias-steps`.")


def rope_table(rows: Sequence[BiasDifference], cases: Sequence[str],
               seeds: Sequence[int]) -> str:
    """tab-bias-rope: the key bias under RoPE, one row per case."""
    cells = [[r.config.rope_fraction, r.config.rotary_dim, CASE_SHOWN[case],
              r.config.n_kv_heads * r.config.head_dim, r.theorem, r.counted,
              distinct(r.measured), format_certified(r.certified)]
             for r, case in zip(rows, cases, strict=True)]
    table = markdown_table(["$r/k$", "$r$", "frequencies", "$Gk$",
                            "$G \\dim\\mathrm{Fix}$", "count", "meas.", "cert."], cells)
    layer = layer_math(rows[0].config.replace(rope_fraction=0.0))
    caption = (f"Unidentified key-bias parameters under RoPE, layer {layer}, "
               f"at {seeds_text(seeds)}. $G \\dim\\mathrm{{Fix}}$ from $R(1)$ "
               f"({{prf:ref}}`thm-bias-rope`); count: `idlib.count`; {_DIFFERENCE}.")
    return captioned(table, caption, "tab-bias-rope")


def difference_verdict(rows: Sequence[BiasDifference], label: str, theorem: str,
                       sentence: bool = True) -> str:
    """'The measured count equals <theorem> and `count` ... in all 5 rows of <label>.' (a
    sentence), or the same clause without its capital and full stop."""
    agree = sum(r.agrees for r in rows)
    text = (f"the measured count equals {theorem} and `count`, every rank certified, in "
            f"{tally(agree, len(rows), 'row')} of {label}")
    return text[0].upper() + text[1:] + "." if sentence else text


def published_table(models: Sequence[Published]) -> str:
    """tab-bias-models: the shipped configurations read."""
    cells = [[m.name, m.config.d_model, m.config.n_heads, m.config.n_kv_heads,
              m.config.head_dim, m.config.rope_fraction, m.config.bias or "none", m.layers]
             for m in models]
    table = markdown_table(["model", "$d$", "$H$", "$G$", "$k$", "$r/k$", "biases", "$L$"],
                           cells, align="l" + "r" * 7)
    caption = ("Published configurations (`idlib/data/configs`): width $d$, heads $H$ and "
               "$G$, head dimension $k$, rope fraction $r/k$, biases, layers $L$.")
    return captioned(table, caption, "tab-bias-models")


def _bias_counts(config: AttentionConfig) -> dict[str, int]:
    return {p.name: p.unidentified for p in count(config).components
            if p.name.startswith("b_")}


def _bias_math(name: str) -> str:
    """'b_K' -> '$b_K$'."""
    return f"${name}$"


def real_table(models: Sequence[Published]) -> str:
    """tab-bias-real: the redundant biases of each published layer (closed form)."""
    cells = []
    for m in models:
        c = count(m.config)
        unid = _bias_counts(m.config)
        U_b = sum(unid.values())
        U_W = c.component("qk").unidentified + c.component("vo").unidentified
        by_bias = " + ".join(f"{n:,} ({_bias_math(b)})" for b, n in unid.items() if n) or "0"
        cells.append([m.name, f"{c.total:,}", by_bias, format_share(U_b, c.total),
                      format_share(U_W, c.total), f"{m.layers * U_b:,}"])
    table = markdown_table(["model", "$P$", "$U_b$", "$U_b/P$", "$U_W/P$", "$L\\,U_b$"],
                           cells, align="lrrrrr")
    caption = ("Redundant biases of {numref}`tab-bias-models` (closed form). $P$: attention "
               "parameters per layer; $U_b$: unidentified bias parameters, by bias; $U_b/P$ "
               "their share; $U_W/P$ the share of the weights' unidentified directions (QK "
               "and VO); $L\\,U_b$: over all layers.")
    return captioned(table, caption, "tab-bias-real")


def real_verdicts(models: Sequence[Published]) -> str:
    """One sentence per published layer: which of its biases are redundant, and why."""
    sentences = []
    for m in models:
        c, cfg = count(m.config), m.config
        unid = _bias_counts(cfg)
        present = [b for b in unid]
        redundant = [b for b, n in unid.items() if n]
        U_b = sum(unid.values())
        U_W = c.component("qk").unidentified + c.component("vo").unidentified
        if not present:
            sentences.append(f"{m.name} has no attention biases.")
            continue
        if not redundant:
            why = []
            if "b_K" in unid:
                why.append(f"RoPE on $r = {cfg.rotary_dim}$ of $k = {cfg.head_dim}$ "
                           "dimensions identifies the key bias ({prf:ref}`thm-bias-rope`)")
            if "b_V" in unid:
                Gv = cfg.n_kv_heads * cfg.value_dim
                why.append(f"without an output bias and with $Gv = {Gv:,} \\le d = "
                           f"{cfg.d_model:,}$ the value bias is identified "
                           "({prf:ref}`thm-bias-value`)")
            reason = f": {listing(why)}" if why else ""
            sentences.append(f"In the {m.name} layer none of the biases is redundant{reason}.")
            continue
        whole = all(unid[b] == _size(cfg, b) for b in redundant)
        names = listing(_NAMES[b] for b in redundant)
        sentences.append(
            f"In the {m.name} layer the {names} "
            f"{'bias is' if len(redundant) == 1 else 'biases are'} "
            f"{'entirely' if whole else 'partly'} redundant "
            f"({' + '.join(f'{unid[b]:,}' for b in redundant)} parameters): together "
            f"{format_share(U_b, c.total)} of the attention parameters, against "
            f"{format_share(U_W, c.total)} for the weights' own unidentified directions.")
    return " ".join(sentences)


_NAMES = {"b_Q": "query", "b_K": "key", "b_V": "value", "b_O": "output"}


def _size(config: AttentionConfig, bias: str) -> int:
    """The number of parameters of one bias of a layer."""
    c = config
    return {"b_Q": c.n_heads * c.head_dim, "b_K": c.n_kv_heads * c.head_dim,
            "b_V": c.n_kv_heads * c.value_dim, "b_O": c.d_model}[bias]


def key_demo_verdict(demo: Sequence[tuple[AttentionConfig, float]]) -> str:
    """What the key-bias demonstration shows, counted: (layer, output change) pairs."""
    still = [c for c, diff in demo if diff < ROUNDOFF_SHOWN]
    layers = "; ".join(layer_math(c) for c in still)
    return (f"Replacing the key bias moved the output by less than $10^{{-12}}$ of its size "
            f"(round-off) for {tally(len(still), len(demo), 'layer')} of the demonstration"
            + (f" ({layers})." if still else "."))


def subsets_verdict(runs: Sequence[SeedRun]) -> str:
    """What the subset tables show, counted."""
    agree = sum(r.agrees for r in runs)
    return (f"In the subset tables the measured rank equals the closed form, certified at "
            f"every seed, in {tally(agree, len(runs), 'row')}.")
