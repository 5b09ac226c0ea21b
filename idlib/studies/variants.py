"""Chapter 7 helpers: closed-form counts of the modern variants against measured ranks.

``SECTIONS`` holds, for each variant, small configurations (a plain reference first) chosen to
cross every regime of the count; ``compare`` measures them; ``markdown_table`` prints them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import AttentionConfig
from ..counting import count
from ..rank import format_gap as gap_decade, measure

BASE = dict(d_model=6, n_heads=2, head_dim=2)

SECTIONS: dict[str, list[tuple[str, dict]]] = {
    "qk_norm": [
        ("plain layer", dict(d_model=6, n_heads=2)),
        ("QK-norm plain", dict(d_model=6, n_heads=2, qk_norm="plain")),
        ("QK-norm gain", dict(d_model=6, n_heads=2, qk_norm="gain")),
        ("plain, b_K", dict(d_model=6, n_heads=2, bias="qk")),
        ("QK-norm plain, b_K", dict(d_model=6, n_heads=2, bias="qk", qk_norm="plain")),
        ("RoPE", dict(d_model=6, n_heads=2, n_kv_heads=1, head_dim=4, rope_fraction=0.5)),
        ("RoPE, QK-norm plain", dict(d_model=6, n_heads=2, n_kv_heads=1, head_dim=4, rope_fraction=0.5,
                                     qk_norm="plain")),
        ("RoPE, QK-norm gain", dict(d_model=6, n_heads=2, n_kv_heads=1, head_dim=4, rope_fraction=0.5,
                                    qk_norm="gain")),
    ],
    "latent": [
        ("plain layer", dict(BASE)),
        ("C = 3 < min(d, N)", dict(BASE, kv_latent=3)),
        ("C = 3, latent norm", dict(BASE, kv_latent=3, latent_norm=True)),
        ("N = 6 <= C = 7 <= d = 8", dict(BASE, d_model=8, value_dim=1, kv_latent=7)),
        ("C = 7, latent norm", dict(BASE, d_model=8, value_dim=1, kv_latent=7, latent_norm=True)),
        ("C = 8 > d", dict(BASE, kv_latent=8)),
        ("C = 2 < k = 3, b_Q b_V", dict(d_model=6, n_heads=2, n_kv_heads=1, head_dim=3, value_dim=3,
                                         kv_latent=2, bias="qv")),
        ("C = 4, RoPE, QK-norm", dict(BASE, kv_latent=4, rope_fraction=1.0, qk_norm="plain")),
    ],
    "centered": [
        ("plain layer", dict(d_model=6, n_heads=2)),
        ("centred", dict(d_model=6, n_heads=2, input_centered=True)),
        ("plain, biases qkvo", dict(d_model=5, n_heads=2, head_dim=4, value_dim=6, bias="qkvo")),
        ("centred, biases qkvo", dict(d_model=5, n_heads=2, head_dim=4, value_dim=6, bias="qkvo",
                                      input_centered=True)),
        ("centred, RoPE", dict(d_model=6, n_heads=2, n_kv_heads=1, head_dim=4, rope_fraction=1.0,
                               input_centered=True)),
        ("centred, QK-norm gain", dict(d_model=5, n_heads=2, head_dim=2, qk_norm="gain", bias="ko",
                                       input_centered=True)),
    ],
    "stack": [
        ("L = 2, S = 1", dict(d_model=4, n_heads=2, n_layers=2)),
        ("L = 2, S = 2", dict(d_model=4, n_heads=2, n_layers=2, kv_share=2)),
        ("L = 3, S = 3, GQA, RoPE, b_Q b_K", dict(d_model=4, n_heads=2, n_kv_heads=1, n_layers=3, kv_share=3,
                                                rope_fraction=1.0, bias="qk")),
        ("L = 2, S = 2, k = 5 > d", dict(d_model=3, n_heads=1, head_dim=5, n_layers=2, kv_share=2, bias="q")),
        ("L = 2, S = 2, QK-norm gain, RoPE", dict(d_model=4, n_heads=2, head_dim=4, n_layers=2, kv_share=2,
                                                 qk_norm="gain", rope_fraction=0.5)),
    ],
}


@dataclass(frozen=True)
class Row:
    label: str
    config: AttentionConfig
    total: int
    closed: int
    measured: int
    gap: float
    certified: bool

    @property
    def agrees(self) -> bool:
        return self.certified and self.closed == self.measured


def compare(entries: list[tuple[str, dict]], seed: int = 0) -> list[Row]:
    """Closed-form unidentified count and measured n_params - rank for each (label, fields)."""
    rows = []
    for label, fields in entries:
        c = AttentionConfig(**fields)
        cnt, m = count(c), measure(c, seed=seed)
        rows.append(Row(label, c, cnt.total, cnt.unidentified, m.unidentified, m.gap, m.certified))
    return rows


def markdown_table(rows: list[Row]) -> str:
    head = ("| configuration | parameters | unidentified (closed form) | unidentified (measured) "
            "| share | gap | certified |\n|---|---|---|---|---|---|---|\n")
    return head + "".join(
        f"| {r.label} | {r.total} | {r.closed} | {r.measured} | {r.closed / r.total:.3f} "
        f"| {gap_decade(r.gap)} | {'yes' if r.certified else 'no'} |\n" for r in rows)
