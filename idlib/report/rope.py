"""The tables of chapter 4 (RoPE) and of its section on measurement, captioned and labelled.

Each function takes what a cell computed and returns a numbered MyST table
(``tables.captioned``) for ``display(Markdown(...))``: its headers, the TeX of its row labels
and its caption live here, so the chapter shows the computation and not the formatting. The
label of each is the one the text cites, {numref}`Table %s <tab-rope-...>`.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

from .plotting import COLORS
from .tables import (captioned, format_certified, format_fraction, format_gap, format_roundoff,
                     format_share, markdown_table)

IDENTITIES = {"apply_rope": "`apply_rope`$(x, i) = x R(i)$",
              "product": "$R(i) R(j) = R(i + j)$",
              "transpose": "$R(i)^\\top = R(-i)$",
              "scores": "$q_i \\kappa_j^\\top = x_i M(i-j) x_j^\\top$"}

MOVES = {"commutant": "RoPE, $A \\in \\mathcal{C}(R(1))$", "generic": "RoPE, generic $A$",
         "plain": "no RoPE, generic $A$"}

FREQUENCY_CASES = {"default": "default (base $10^4$)", "pair": "$\\omega_2 = \\omega_1$",
                   "triple": "$\\omega_2 = \\omega_3 = \\omega_1$", "all": "all equal",
                   "reflected": "$\\omega_2 = 2\\pi - \\omega_1$",
                   "shifted": "$\\omega_2 = \\omega_1 + 2\\pi$", "zero": "$\\omega_2 = 0$",
                   "pi": "$\\omega_2 = \\pi$"}

SPECTRA = {"none": "no RoPE", "base 1e4": "RoPE, base $10^4$", "base 10": "RoPE, base $10$"}


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _classes(nus: Sequence[int]) -> str:
    return "+".join(map(str, nus)) or "-"


def _mask(causal: bool) -> str:
    return "causal" if causal else "none"


def identities(errors: Mapping[str, float], offsets: range, n_tokens: int) -> str:
    """The rotation's identities against ``apply_rope`` (errors by the keys of IDENTITIES)."""
    rows = [[IDENTITIES[name], format_roundoff(err)] for name, err in errors.items()]
    return captioned(markdown_table(["identity", "largest error"], rows, align="lr"),
                     f"The identities of the rotation $R(i)$: largest absolute error over the "
                     f"offsets $i, j$ from {offsets.start} to {offsets.stop - 1} and, for the "
                     f"scores, over the token pairs of one sequence of {n_tokens} tokens.",
                     "tab-rope-identities")


def commutant(rows: Iterable[Sequence[int]], k: int) -> str:
    """Rows [r, k - r, r + (k - r)^2, rope_commutant_dim, numerical dimension]."""
    return captioned(markdown_table(
        ["$r$", "$k - r$", "$r + (k - r)^2$", "`rope_commutant_dim`",
         "numerical $\\dim \\mathcal{C}(R(1))$"], rows),
        f"The dimension of the commutant $\\mathcal{{C}}(R(1))$ for every rotary width $r$ of "
        f"a head of width $k = {k}$: the closed form, the library's count and the dimension "
        "of the null space of $E \\mapsto E R(1) - R(1) E$.", "tab-rope-commutant")


def moves(results: Mapping[str, Mapping[str, float]]) -> str:
    """One row per move (keys of MOVES): commutator, change of W_Q, change of the output."""
    rows = [[MOVES[name], format_roundoff(m["commutator"], 2), f"{m['weights']:.2f}",
             format_roundoff(m["output"], 2)] for name, m in results.items()]
    return captioned(markdown_table(
        ["layer, move", "$\\lVert AR(1) - R(1)A\\rVert / \\lVert R(1)A\\rVert$",
         "change of $W_Q$", "change of the output"], rows, align="lrrr"),
        "Three moves $(W_Q, W_K) \\mapsto (W_Q A, W_K A^{-\\top})$ of one fully rotated head: "
        "how far $A$ is from commuting with $R(1)$, and the relative change (largest entry) "
        "of $W_Q$ and of the layer's output on random sequences.", "tab-rope-moves")


def fraction(sweep: Sequence[Mapping[str, Any]], d_model: int, n_seeds: int) -> str:
    """The rotary-fraction sweep: dicts with H, k, r, run (a SeedRun) and theorem."""
    rows = [[s["H"], s["k"], s["r"], s["run"].total, s["theorem"], s["run"].unidentified,
             ", ".join(map(str, s["run"].measured)), format_gap(s["run"].gap),
             format_certified(s["run"].certified), format_share(s["theorem"], s["run"].total)]
            for s in sweep]
    return captioned(markdown_table(
        ["$H$", "$k$", "$r$", "$P$", "$U$ (theorem)", "$U$ (`count`)", "$U$ (measured)",
         "smallest $\\gamma$", "cert.", "$U/P$"], rows),
        f"The count with RoPE on a layer of width $d = {d_model}$ with $H$ heads of width "
        f"$k = d/H$, for every rotary width $r$: {{prf:ref}}`thm-rope-count`, `idlib.count`, "
        f"and the measured $U = P - \\operatorname{{rank}} J$ at {n_seeds} seed(s) (the "
        "distinct values), with the smallest gap over the seeds.", "tab-rope-fraction")


def key_bias(rows: Sequence[Mapping[str, Any]], d_model: int) -> str:
    """Dicts with r, nu_plus, closed (a Count) and m (a Measurement), one per rotary width."""
    body = [[x["r"], x["nu_plus"], x["closed"].component("b_K").unidentified,
             x["closed"].unidentified, x["m"].unidentified, f"{x['m'].rank} of {x['m'].n_params}",
             format_gap(x["m"].gap), format_certified(x["m"].certified)] for x in rows]
    return captioned(markdown_table(
        ["$r$", "$\\nu_+$", "$b_K$ unidentified (`count`)", "$U$ (`count`)", "$U$ (measured)",
         "rank $J$", "gap $\\gamma$", "cert."], body),
        f"One head of width $d = k = {d_model}$ with a key bias at three rotary widths $r$: "
        "$\\nu_+$, the dimensions no rotation moves; the key-bias part of the count "
        "({prf:ref}`thm-rope-key-bias`) and the whole count against the measured rank.",
        "tab-rope-key-bias")


def repeated(rows: Sequence[Mapping[str, Any]], k: int) -> str:
    """Dicts with name (keys of FREQUENCY_CASES), F, classes (rotation_classes), closed,
    numeric, increase, counted and m, one per frequency vector."""
    body = [[FREQUENCY_CASES[x["name"]], _yes(x["F"]), _classes(x["classes"][0]),
             f"{x['classes'][1]}, {x['classes'][2]}", f"{x['closed']}, {x['numeric']}",
             x["increase"], f"{x['counted']}, {x['m'].unidentified}", format_gap(x["m"].gap),
             format_certified(x["m"].certified)] for x in rows]
    return captioned(markdown_table(
        ["frequencies", "(F)", "$\\nu_z$", "$\\nu_+, \\nu_-$",
         "$\\dim\\mathcal{C}$: closed, numerical", "increase (rules)",
         "$U$: `count`, measured", "gap $\\gamma$", "cert."], body, align="llrrrrrrr"),
        f"Frequency coincidences in one fully rotated head of width $k = {k}$: condition (F), "
        "the classes of $R(1)$, the commutant's dimension in closed form "
        "({eq}`eq-rope-commutant`) and numerically, the increase over $r + (k - r)^2$ that "
        "{eq}`eq-rope-increase` predicts, and the layer's count against the measured rank.",
        "tab-rope-repeated")


def merged(rows: Iterable[Sequence[int]]) -> str:
    """Rows [nu, dim C, increase, 2 nu (nu - 1)]."""
    return captioned(markdown_table(["$\\nu$", "$\\dim\\mathcal{C}$", "increase",
                                     "$2\\nu(\\nu - 1)$"], rows),
                     "The first $\\nu$ frequencies of one fully rotated head merged into one "
                     "class: the commutant's dimension (`rope_commutant_dim`) and its increase "
                     "over distinct frequencies.", "tab-rope-merged")


def zero_frequency(changed: Any, default: Any, dims: Sequence[int], measured: Any) -> str:
    """A key-bias head with omega_2 = 0 (``changed``, a Count) against the default frequencies
    (``default``); ``dims`` = (dim C with omega_2 = 0, dim C by default)."""
    rows = [["$b_K$ unidentified", changed.component("b_K").unidentified,
             default.component("b_K").unidentified],
            ["$\\dim\\mathcal{C}(R(1))$", dims[0], dims[1]],
            ["$U$ (`count`)", changed.unidentified, default.unidentified],
            ["$U$ (measured)", measured.unidentified, "-"]]
    return captioned(markdown_table(["", "$\\omega_2 = 0$", "default frequencies"], rows,
                                    align="lrr"),
                     "One fully rotated head with a key bias, with its second frequency set to "
                     "$0$ and with the default frequencies.", "tab-rope-zero-frequency")


def share(rows: Iterable[Sequence[Any]]) -> str:
    """Rows [d, Count of one fully rotated head of width d]."""
    body = [[d, c.unidentified, c.total, format_share(c.unidentified, c.total),
             format_fraction(c.unidentified, c.total), format_fraction(1 + d, 4 * d)]
            for d, c in rows]
    return captioned(markdown_table(["$d$", "$U$", "$P$", "$U/P$", "$U/P$ (fraction)",
                                     "$(1+d)/(4d)$"], body),
                     "The unidentified share of one fully rotated head ($k = v = d$), from "
                     "`count`, next to $(1 + d)/(4d)$.", "tab-rope-share")


# --- the section on measurement -----------------------------------------------------------

def bases(rows: Sequence[Mapping[str, Any]], d_model: int) -> str:
    """Dicts with base, f (frequencies), sep, mu (class sizes), F, counted and m."""
    body = [[f"{s['base']:.7g}", f"{s['f'].min().item():.2e}", f"{s['sep']:.2e}", _yes(s["F"]),
             _classes(s["mu"]), f"{s['counted']}, {s['m'].unidentified}", format_gap(s["m"].gap),
             format_certified(s["m"].certified)] for s in rows]
    return captioned(markdown_table(
        ["base $b$", "slowest $\\omega_l$", "separation", "(F)", "$\\nu_z$",
         "$U$: `count`, measured", "gap $\\gamma$", "cert."], body),
        f"One fully rotated head of width $d = k = r = {d_model}$ for each rotary base $b$: "
        "its slowest frequency, the separation of its frequencies, condition (F), the "
        "classes of $R(1)$, and the count against the measured rank (sequences of $d + 2$ "
        "tokens).", "tab-rope-bases")


def long_sequences(rows: Iterable[Mapping[str, Any]]) -> str:
    """Dicts with base, n, m (a Measurement), counted, sigma and tau (growth factors)."""
    body = [[f"{x['base']:g}", x["n"], f"{x['m'].rank} of {x['m'].n_params}",
             x["m"].unidentified, x["counted"], format_gap(x["m"].gap),
             format_certified(x["m"].certified), f"{x['sigma']:.0f}x", f"{x['tau']:.0f}x"]
            for x in rows]
    return captioned(markdown_table(
        ["base $b$", "$n$", "rank $J$", "$U$ (measured)", "$U$ (`count`)", "gap $\\gamma$",
         "cert.", "$\\sigma_I$ grew", "$\\tau$ grew"], body),
        "The bases whose cut was not certified (or, if every cut was, the largest base), "
        "measured again on longer sequences of $n$ tokens: the smallest kept singular value "
        "$\\sigma_I$ and the round-off tolerance $\\tau$, each relative to the first line of "
        "its base.", "tab-rope-long")


def starved(rows: Iterable[Sequence[Any]], d_model: int) -> str:
    """Rows [causal, n, n_seq, budget, floor, U measured, gap, certified]."""
    body = [[_mask(r[0]), *r[1:6], format_gap(r[6]), format_certified(r[7])] for r in rows]
    return captioned(markdown_table(
        ["mask", "$n$", "$n_{\\text{seq}}$", "budget per sequence",
         "floor $U_1 - n_{\\text{seq}} \\cdot$ budget", "$U$ (measured)", "gap $\\gamma$",
         "cert."], body, align="lrrrrrrr"),
        f"One fully rotated head of width $d = {d_model}$ on sequences of two and three "
        "tokens: the default number of sequences, then deliberately too few; the floor below "
        "which the measured $U$ cannot go, and the measured $U$ with its gap.",
        "tab-rope-starved")


def seqlen(rows: Iterable[Sequence[Any]], d_model: int) -> str:
    """Rows [causal, n, n_seq, (lo, hi) of U, U measured, gap, certified, within]."""
    body = [[_mask(r[0]), r[1], r[2], str(r[3][0]) if r[3][0] == r[3][1]
             else f"{r[3][0]} to {r[3][1]}", r[4], format_gap(r[5]), format_certified(r[6]),
             _yes(r[7])] for r in rows]
    return captioned(markdown_table(
        ["mask", "$n$", "$n_{\\text{seq}}$", "theorem: $U = U_{QK} + v^2$", "$U$ (measured)",
         "gap $\\gamma$", "cert.", "within"], body, align="lrrrrrrr"),
        f"One fully rotated head of width $d = {d_model}$ on sequences of $n$ tokens (the "
        "default number of them): the value or bounds of {prf:ref}`thm-rope-seqlen` against "
        "the measured $U$.", "tab-rope-seqlen")


def budget(rows: Iterable[Sequence[Any]]) -> str:
    """Rows [causal, n, n_seq, budget, numbers in all, 2dk]."""
    body = [[_mask(r[0]), *r[1:]] for r in rows]
    return captioned(markdown_table(
        ["mask", "$n$", "default $n_{\\text{seq}}$", "budget per sequence", "numbers in all",
         "$2dk$ query/key parameters"], body, align="lrrrrr"),
        "At the default length $n = d + 2$: how many numbers the attention weights of the "
        "default number of sequences pass to the output, against the query/key parameters "
        "they must carry.", "tab-rope-budget")


def spectra(rows: Sequence[Mapping[str, Any]], d_model: int) -> str:
    """Dicts with name (keys of SPECTRA), slowest (frequency or None), closed (a Count), m."""
    body = [[SPECTRA[x["name"]], "-" if x["slowest"] is None else f"{x['slowest']:.2e}",
             x["closed"].unidentified, x["closed"].identified, f"{x['m'].rank} of {x['m'].n_params}",
             format_gap(x["m"].gap), format_certified(x["m"].certified), f"{x['ratio']:.1e}"]
            for x in rows]
    return captioned(markdown_table(
        ["layer", "slowest $\\omega_l$", "$U$ (`count`)", "$I$ (`count`)", "rank $J$",
         "gap $\\gamma$", "cert.", "$\\sigma_I / \\sigma_1$"], body, align="lrrrrrrr"),
        f"One head of width $d = {d_model}$ with and without RoPE: the count, the measured "
        "rank with its gap, and the smallest kept singular value relative to the largest.",
        "tab-rope-spectra")


def half_pi(dims: Sequence[int], qk_unidentified: int, m: Any) -> str:
    """The exercise with omega_1 = pi/2 on two tokens: (dim C(R(1)), dim C(R(2))), f, m."""
    return captioned(markdown_table(
        ["$\\dim\\mathcal{C}(R(1))$", "$\\dim\\mathcal{C}(R(2))$", "measured $U_{QK}$",
         "rank $J$", "gap $\\gamma$", "cert."],
        [[dims[0], dims[1], qk_unidentified, f"{m.rank} of {m.n_params}", format_gap(m.gap),
          format_certified(m.certified)]]),
        "One fully rotated head with $\\omega_1 = \\pi/2$ on two tokens without a mask: the "
        "bounds of {prf:ref}`thm-rope-seqlen` (part 2) and the measured query/key part.",
        "tab-rope-half-pi")


# --- figures ----------------------------------------------------------------------------------

GAP_FAMILIES = (  # (legend, member, marker, label offset in points, label alignment)
    ("$1 < b < 2$: frequencies nearly equal", lambda b: 1 < b < 2, "^", (-14, 10), "right"),
    ("$2 \\leq b \\leq 100$ or $b < 1$", lambda b: b < 1 or 2 <= b <= 100, "o", (12, 8), "left"),
    ("$b > 100$: slowest frequency near 0", lambda b: b > 100, "s", (14, -12), "left"))


def plot_gap(ax: Any, rows: Sequence[Mapping[str, Any]], certify_gap: float,
             label_below: float = 1e8) -> None:
    """The gap of each base's measured rank against the separation of its frequencies
    (``bases``' rows; separation 0, base 1, left out), one marker per family of bases, the
    points with a gap below ``label_below`` labelled off their markers (a leader line to
    each), and the certification threshold dashed."""
    for legend, member, marker, offset, ha in GAP_FAMILIES:
        pts = [s for s in rows if s["sep"] > 0 and member(s["base"])]
        ax.loglog([s["sep"] for s in pts], [s["m"].gap for s in pts], marker, mfc="none",
                  color=COLORS["measured"], label=legend)
        for s in (s for s in pts if s["m"].gap < label_below):
            b = s["base"]
            text = f"10^{{{math.log10(b):.0f}}}" if b >= 100 else f"{b:.7g}"
            ax.annotate(f"$b = {text}$", (s["sep"], s["m"].gap), xytext=offset,
                        textcoords="offset points", ha=ha, va="center",
                        arrowprops=dict(arrowstyle="-", lw=0.6, color="0.5"))
    gaps = [s["m"].gap for s in rows if s["sep"] > 0]
    if gaps:                             # room below the lowest point for its label
        ax.set_ylim(bottom=min(min(gaps), certify_gap) / 10)
    ax.axhline(certify_gap, color=COLORS["unidentified"], ls="--", lw=1,
               label=f"certification threshold $10^{{{math.log10(certify_gap):.0f}}}$")
    ax.set_xlabel("separation of the frequencies")
    ax.set_ylabel("gap $\\gamma$ at the measured rank")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
