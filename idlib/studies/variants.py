"""Chapter 7 helpers: closed-form counts of the modern variants against measured ranks.

Chapter 7 holds its configurations (for each variant a plain reference first, then layers chosen
to cross every regime of the count) as (label, AttentionConfig fields) pairs;
``labelled_checks`` measures each and pairs it with its closed form (``idlib.verdict.Check``,
labelled for the chapter's tables, which ``idlib.report.tables.markdown_table`` prints).
"""
from __future__ import annotations

from ..verdict import Check, measure_and_check
from ..config import AttentionConfig


def labelled_checks(entries: list[tuple[str, dict]], seed: int = 0) -> list[Check]:
    """A labelled check (closed form against the rank measured at ``seed``) per (label, fields)."""
    out = []
    for label, fields in entries:
        config = AttentionConfig(**fields)
        out.append(measure_and_check(config, seed, label=label))
    return out
