"""Tables and generated sentences of Chapter 1 (one head) and Chapter 2 (many heads).

Each table function takes the measurements (``SeedRun``: one configuration at every seed) and
returns the captioned MyST table (``tables.captioned``) that the chapter displays; each
``*_verdict`` returns the sentence of the prose that states what the measurements show,
counted from them, for the chapter to glue (``myst_nb.glue``). Nothing here measures.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from .prose import seeds_text, tally
from .runs import RUN_HEADERS, distinct, run_cells
from .tables import (captioned, format_certified, format_fraction, format_gap, format_share,
                     markdown_table)

# Annotations name the measurement records of idlib.studies (SeedRun, BiasDifference, Step,
# Published) without importing them: report sits below studies and never imports it.

_SPREAD = ("gap $\\gamma$: the smallest over the seeds; cert.: every seed certified, "
           "$\\gamma \\ge 10^4$")


def _shares(run: SeedRun) -> str:
    """The measured share(s) U/P over the seeds, as a percentage and an exact fraction."""
    return "; ".join(f"{format_share(u, run.total)} ({format_fraction(u, run.total)})"
                     for u in run.measured)


# --- Chapter 1 ------------------------------------------------------------------------------

def single_head_table(runs: Sequence[SeedRun], seeds: Sequence[int]) -> str:
    """tab-sh-count: one head with k = v = d, one row per width."""
    rows = [[r.config.d_model, *run_cells(r), "1/2"] for r in runs]
    table = markdown_table(["$d$", *RUN_HEADERS, "theorem"], rows)
    caption = ("One head, $k = v = d$: closed form against measurement at "
               f"{seeds_text(seeds)}. $P = 4d^2$ parameters; $I = 2d^2$ identified by "
               "{prf:ref}`thm-sh-count`; rank $J$: the distinct measured ranks over the seeds; "
               + _SPREAD + "; $U/P$ the unidentified share, "
               "and its exact value by the theorem.")
    return captioned(table, caption, "tab-sh-count")


def single_head_verdict(runs: Sequence[SeedRun], seeds: Sequence[int]) -> str:
    """What tab-sh-count shows, counted: closed form 2d^2, rank = closed form, share 1/2."""
    n = len(runs)
    two_d2 = sum(r.total - r.unidentified == 2 * r.config.d_model ** 2 for r in runs)
    agree = sum(r.agrees for r in runs)
    half = sum(Fraction(r.unidentified, r.total) == Fraction(1, 2) for r in runs)
    return (f"The closed form (`idlib.count`, which implements the theorem) equals $2d^2$ in "
            f"{tally(two_d2, n, 'row')} of {{numref}}`tab-sh-count`; the measured rank "
            f"equals the closed form, with a certified gap at each of the "
            f"{len(seeds)} {'seed' if len(seeds) == 1 else 'seeds'}, in "
            f"{tally(agree, n, 'row')}; and the unidentified share is exactly one half in "
            f"{tally(half, n, 'row')}.")


# --- Chapter 2 ------------------------------------------------------------------------------

def general_table(runs: Sequence[SeedRun], formula: Sequence[int],
                  seeds: Sequence[int]) -> str:
    """tab-mh-general: head widths other than d/H; ``formula`` is U from eq-mh-count, computed
    by the chapter itself, one entry per run."""
    rows = [[r.config.d_model, r.config.n_heads, r.config.head_dim, r.config.value_dim,
             r.total, u, r.unidentified, distinct(r.measured), format_gap(r.gap),
             format_certified(r.certified)] for r, u in zip(runs, formula, strict=True)]
    table = markdown_table(["$d$", "$H$", "$k$", "$v$", "$P$", "$U$ formula", "$U$ count",
                            "$U$ meas.", "gap $\\gamma$", "cert."], rows)
    caption = (f"Head widths other than $d/H$, at {seeds_text(seeds)}. $U$ formula: "
               "{eq}`eq-mh-count` computed in the chapter; $U$ count: `idlib.count`; $U$ "
               "meas.: $P - \\operatorname{rank} J$, its distinct values over the seeds; " + _SPREAD
               + ".")
    return captioned(table, caption, "tab-mh-general")


def ratio_table(sweep: dict[int, Sequence[SeedRun]], seeds: Sequence[int]) -> str:
    """tab-mh-ratio: k = v = d/H for every divisor H of each width d."""
    rows = [[d, r.config.n_heads, r.config.head_dim, r.total, r.unidentified,
             distinct(r.measured), format_gap(r.gap), format_certified(r.certified),
             _shares(r), format_fraction(1, 2 * r.config.n_heads)]
            for d, runs in sweep.items() for r in runs]
    table = markdown_table(["$d$", "$H$", "$d/H$", "$P$", "$U$ closed", "$U$ meas.",
                            "gap $\\gamma$", "cert.", "$U/P$ meas.", "$1/(2H)$"], rows)
    caption = ("Claim C2: $k = v = d/H$ for every divisor $H$ of each width $d$, at "
               f"{seeds_text(seeds)}. $U$ closed: the closed form $2d^2/H$; $U$ meas.: "
               "$P - \\operatorname{rank} J$, its distinct values over the seeds; " + _SPREAD
               + "; $U/P$ meas.: the measured "
               "share, then the prediction of {prf:ref}`thm-mh-ratio`.")
    return captioned(table, caption, "tab-mh-ratio")


def floor_table(floor: Sequence[SeedRun], seeds: Sequence[int]) -> str:
    """tab-mh-floor: H = d, one dimension per head (k = v = 1)."""
    rows = [[r.config.d_model, r.config.n_heads, r.config.head_dim, r.unidentified,
             distinct(r.measured), 2 * r.config.d_model, _shares(r), format_gap(r.gap),
             format_certified(r.certified)] for r in floor]
    table = markdown_table(["$d$", "$H$", "$k = v$", "$U$ closed", "$U$ meas.", "$2d$",
                            "$U/P$ meas.", "gap $\\gamma$", "cert."], rows)
    caption = ("Claim C3 at its floor, $H = d$: two scalings per head, $U = 2H = 2d$, "
               f"$U/P = 1/(2d)$ ({{prf:ref}}`thm-mh-never`); at {seeds_text(seeds)}.")
    return captioned(table, caption, "tab-mh-floor")


def on_the_line(sweep: dict[int, Sequence[SeedRun]]) -> tuple[int, int]:
    """(how many runs measure U/P = 1/(2H) exactly at every seed, how many runs)."""
    runs = [r for rs in sweep.values() for r in rs]
    hits = sum(all(Fraction(c.measured_unidentified, c.total) == Fraction(1, 2 * c.config.n_heads)
                   for c in r.checks) for r in runs)
    return hits, len(runs)


def ratio_verdict(sweep: dict[int, Sequence[SeedRun]]) -> str:
    """What fig-mh-ratio shows, counted."""
    hits, n = on_the_line(sweep)
    return (f"the measured share equals $1/(2H)$ exactly, at every seed, for "
            f"{tally(hits, n, 'point')}")


def single_head_summary(runs: Sequence[SeedRun]) -> str:
    """The summary's line on tab-sh-count, counted."""
    agree = sum(r.agrees for r in runs)
    return (f"the rank of $J$ equals the closed form $I = 2d^2$, certified at every seed, "
            f"for {tally(agree, len(runs), 'width')} of {{numref}}`tab-sh-count`")


def general_verdict(runs: Sequence[SeedRun], formula: Sequence[int]) -> str:
    """What tab-mh-general shows, counted: formula = count = measured at every seed."""
    hits = sum(u == r.unidentified and r.agrees for r, u in zip(runs, formula, strict=True))
    return (f"In {tally(hits, len(runs), 'row')} of {{numref}}`tab-mh-general` the formula, "
            "the library's count and the measured $U$ agree, with every seed certified.")


def wide_text(runs: Sequence[SeedRun]) -> str:
    """How many layers of tab-mh-general have query/key heads at least as wide as the model."""
    n = sum(r.config.head_dim >= r.config.d_model for r in runs)
    return "no such configuration" if n == 0 else \
        f"{n} such {'configuration' if n == 1 else 'configurations'}"


def all_verdict(runs: Sequence[SeedRun], seeds: Sequence[int]) -> str:
    """The summary's line on every measurement of the chapter, counted."""
    agree = sum(r.agrees for r in runs)
    return (f"the rank of $J$ equals the closed form, certified at each of the {len(seeds)} "
            f"{'seed' if len(seeds) == 1 else 'seeds'}, for "
            f"{tally(agree, len(runs), 'configuration')} of this chapter's tables")
