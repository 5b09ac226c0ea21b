"""The "Count your own model" page: the command it runs, and what a reader needs to call idlib.

- :func:`idlib_command` runs the installed ``idlib`` command (the console script of the
  environment the book runs in) and prints the command line, its output as written and its
  exit code;
- :data:`FIELD_MEANINGS` says what each ``AttentionConfig`` field means, in the book's notation,
  and :func:`field_rows` makes the page's table of fields from the dataclass itself (a field
  added to ``AttentionConfig`` without a meaning here is refused, so the table never misses
  one).
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from ..config import AttentionConfig

# Every field of AttentionConfig, in the book's notation (the notation page); Markdown.
FIELD_MEANINGS = {
    "d_model": "model width $d$",
    "n_heads": "query heads $H$",
    "n_kv_heads": "key/value heads (groups) $G$; $G$ divides $H$",
    "head_dim": "query/key head dimension $k$",
    "value_dim": "value head dimension $v$",
    "rope_fraction": "fraction $r/k$ of each query/key head's dimensions that RoPE rotates",
    "rope_base": "RoPE base $b$: $\\omega_l = b^{-2(l-1)/r}$",
    "bias": "the projections with a bias: any of the letters `q`, `k`, `v`, `o`",
    "causal": "causal mask",
    "qk_norm": "QK-norm: `none`, `plain`, `gain` (per head), `whole` (over all heads), "
               "`layernorm` or `layernorm_shared`",
    "kv_latent": "latent width $C$: keys and values read a shared latent of width $C$",
    "latent_norm": "RMS-normalise the latent",
    "input_centered": "the layer sees centred inputs (a LayerNorm without affine in front)",
    "n_layers": "layers $L$ of a residual stack",
    "kv_share": "sharing factor $S$: each run of $S$ layers shares one set of key/value projections",
    "softcap": "soft-cap of the scores: at 50 (Gemma 2's value) each score becomes "
               "$50 \\tanh(\\text{score}/50)$; none: no cap",
    "alibi": "ALiBi: a fixed linear penalty on the offset added to each head's scores",
    "sinks": "attention sinks: one learned logit per query head in the softmax's denominator",
    "output_gate": "a logistic gate, computed from the token, on each head's output (Qwen3-Next)",
}

def _default(field: dataclasses.Field) -> str:
    if field.default is dataclasses.MISSING:
        return "required"
    if field.default == "":
        return "none (`''`)"
    if field.default is None:
        return {"n_kv_heads": "$H$", "head_dim": "$d/H$", "value_dim": "$k$"}.get(field.name, "none")
    return f"`{field.default!r}`"


def field_rows() -> list[list[str]]:
    """(field, default, meaning) of every AttentionConfig field, in the dataclass's order."""
    names = [f.name for f in dataclasses.fields(AttentionConfig)]
    if set(names) != set(FIELD_MEANINGS):
        raise ValueError(f"FIELD_MEANINGS must cover exactly the fields of AttentionConfig: missing "
                         f"{sorted(set(names) - set(FIELD_MEANINGS))}, extra "
                         f"{sorted(set(FIELD_MEANINGS) - set(names))}")
    return [[f"`{f.name}`", _default(f), FIELD_MEANINGS[f.name]]
            for f in dataclasses.fields(AttentionConfig)]


def command() -> Path:
    """The ``idlib`` command of the running Python's environment (``pip install`` puts it there)."""
    return Path(sys.executable).with_name("idlib")


def idlib_command(*args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``idlib ARGS`` in ``cwd``; print ``$ idlib ARGS``, its output as written, its exit code."""
    args = [str(a) for a in args]
    env = dict(os.environ, COLUMNS="100")
    run = subprocess.run([str(command()), *args], cwd=cwd, capture_output=True, text=True, env=env)
    print("$ idlib " + " ".join(args))
    print(run.stdout + run.stderr + f"[exit code {run.returncode}]")
    return run


def idlib_json(*args, cwd: Path | None = None) -> tuple[int, dict]:
    """Run ``idlib ARGS --json`` in ``cwd``: its exit code and the object it printed (nothing shown)."""
    run = subprocess.run([str(command()), *map(str, args), "--json"], cwd=cwd, capture_output=True,
                         text=True)
    return run.returncode, json.loads(run.stdout)
