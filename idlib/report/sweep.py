"""The tables of the agreement sweep (appendix), captioned and labelled.

``all_configurations`` folds the full results (``studies.sweep.run_sweep``'s rows) into two
numbered tables that share the row number ``#``: the configurations, and what was counted and
measured for each (one table with every column would not fit a printed page). ``fragile``
tabulates the badly conditioned layer of the last section at several seeds.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from .tables import captioned, format_gap, markdown_table


def verdict(row: Mapping[str, Any]) -> str:
    """'yes' (certified and equal), 'DISAGREES' (certified, different) or 'NOT cert.'."""
    return "yes" if row["agrees"] else ("DISAGREES" if row["certified"] else "NOT cert.")


def all_configurations(rows: Sequence[Mapping[str, Any]]) -> str:
    """Both tables inside a closed ``<details>`` block (the HTML folds it, print shows it)."""
    configs = [r["config"] for r in rows]
    layers = [[i, c.d_model, c.n_heads, c.n_kv_heads, c.head_dim, c.value_dim, c.rotary_dim,
               f"{c.rope_base:g}" if c.rotary_dim else "-", c.bias or "-",
               "yes" if c.causal else "no"] for i, c in enumerate(configs)]
    results = [[i, r["total"], r["identified"], r["rank"], format_gap(r["gap"]),
                len(r.get("attempts", [None])), verdict(r)] for i, r in enumerate(rows)]
    first = captioned(markdown_table(["#", "$d$", "$H$", "$G$", "$k$", "$v$", "$r$", "$b$",
                                      "bias", "causal"], layers, align="rrrrrrrrll"),
                      f"The {len(rows)} random configurations of the sweep: widths, rotated "
                      "dimensions $r$ and rotary base $b$, biases, causal mask.",
                      "tab-sweep-configs")
    second = captioned(markdown_table(["#", "$P$", "$I$", "rank $J$", "gap $\\gamma$", "seeds",
                                       "agrees"], results, align="rrrrrrl"),
                       "For each configuration of {numref}`Table %s <tab-sweep-configs>` (same "
                       "`#`): parameters, closed-form identified count, the measured rank and "
                       "its gap (of the last attempt), the seeds tried, and the verdict.",
                       "tab-sweep-results")
    return (f"<details>\n<summary>All {len(rows)} configurations (click to open)</summary>\n\n"
            f"{first}\n\n<br>\n\n{second}\n\n</details>")


def fragile(rows: Sequence[Sequence[Any]], config: Any, closed: Any) -> str:
    """Rows [seed, plain Measurement, spread Measurement]; ``closed`` the Count of ``config``."""
    def cell(m: Any) -> str:
        flag = "certified" if m.certified else "not cert."
        if m.certified and m.rank != closed.identified:
            flag += ", DISAGREES"
        return f"{m.rank}, {format_gap(m.gap)} ({flag})"
    body = [[s, cell(plain), cell(spread)] for s, plain, spread in rows]
    return captioned(markdown_table(["seed", "plain point: rank, gap",
                                     "$W_Q, W_K$ doubled: rank, gap"], body, align="rll"),
                     f"One layer of width $d = {config.d_model}$ with $H = {config.n_heads}$ "
                     f"heads, $k = {config.head_dim}$, $v = {config.value_dim}$ "
                     f"({closed.total} parameters, closed form $I = {closed.identified}$), "
                     "measured at several seeds, at the random point and with its query and "
                     "key weights doubled.", "tab-sweep-fragile")
