"""The agreement sweep: random valid configurations, closed form against measured Jacobian rank.

``sweep_configs`` draws distinct valid :class:`AttentionConfig` s that span every field (query
heads, key/value groups, head and value widths below, at and above d/H and above d, rotary
shares, rotary bases, every bias subset, causal masks); ``run_sweep`` measures each and
compares; ``tally`` counts the agreements and lists the rest; ``coverage`` shows the reach;
``PROFILES`` holds the appendix's profile-dependent knobs.
Every row that does not agree is a bug in the closed form or in the measurement.
"""
from __future__ import annotations

import itertools
import random
from collections import Counter
from contextlib import contextmanager
from typing import Any, Iterable

from ..lazy import torch

from ..attention import n_params
from ..verdict import measure_and_check
from ..config import AttentionConfig, ConfigError
from ..rank import measure_until_certified, spread_params  # noqa: F401 (re-exported)
from ..report.parameters import ParameterError

PROFILES = {
    "default": dict(n_configs=240, max_params=400, n_wide=12, max_params_wide=700),
    "full": dict(n_configs=800, max_params=1000, n_wide=40, max_params_wide=1600),
}
"""The appendix's profile-dependent knobs (``report.parameters.with_profile`` fills the None ones)."""

# all 16 subsets of "qkvo", in a fixed order
BIAS_SUBSETS = tuple("".join(c for c, on in zip("qkvo", bits) if on)
                     for bits in itertools.product((0, 1), repeat=4))
# rotary bases: the usual 10^4, a small and a large one, and base 1 (every frequency equal to 1)
ROPE_BASES = (10000.0, 10000.0, 10000.0, 100.0, 500000.0, 1.0)


def _width(rng: random.Random, d: int, H: int, mode: str) -> int | None:
    """A head width relative to d/H: None (the default d/H), below, above d/H (<= d), above d."""
    share = d // H
    if mode == "default" and d % H == 0:
        return None
    if mode == "below" and share >= 2:
        return rng.randint(1, share - 1)
    if mode == "above" and share + 1 <= d:
        return rng.randint(share + 1, d)
    if mode == "wider":
        return rng.randint(d + 1, d + 4)
    return rng.randint(1, max(1, share))


def width_mode(config: AttentionConfig, width: int) -> str:
    """Where a head width sits: 'below' d/H, 'at' d/H, 'above' d/H (<= d) or 'wider' than d."""
    d, H = config.d_model, config.n_heads
    if width > d:
        return "wider"
    if width * H == d:
        return "at"
    return "below" if width * H < d else "above"


def random_config(rng: random.Random, max_d: int = 24, bias: str | None = None,
                  causal: bool | None = None, d_model: int | None = None) -> AttentionConfig:
    """One random valid config (fields not given are drawn)."""
    while True:
        d = d_model if d_model is not None else rng.randint(1, max_d)
        H = rng.choice((1, 1, 2, 2, 3, 4, 4, 5, 6, 6, 8))
        proper = [g for g in range(2, H) if H % g == 0]          # grouped-query choices
        u = rng.random()
        G = H if u < 0.4 else 1 if u < 0.65 or not proper else rng.choice(proper)
        modes = ("default", "default", "below", "above", "wider")
        k = _width(rng, d, H, rng.choice(modes))
        v = None if rng.random() < 0.35 else _width(rng, d, H, rng.choice(modes))
        kk = k if k is not None else d // H
        rope_fraction, rope_base = 0.0, 10000.0
        if 2 <= kk <= d and rng.random() < 0.7:
            r = kk - kk % 2 if rng.random() < 0.5 else 2 * rng.randint(1, kk // 2)
            rope_fraction, rope_base = r / kk, rng.choice(ROPE_BASES)
        try:
            return AttentionConfig(
                d_model=d, n_heads=H, n_kv_heads=G, head_dim=k, value_dim=v,
                rope_fraction=rope_fraction, rope_base=rope_base,
                bias=rng.choice(BIAS_SUBSETS) if bias is None else bias,
                causal=rng.random() < 0.5 if causal is None else causal)
        except ConfigError:
            continue


def sweep_configs(n: int, seed: int = 0, max_d: int = 24, max_params: int = 600,
                  n_wide: int | None = None, max_params_wide: int | None = None,
                  max_tries: int = 200_000) -> list[AttentionConfig]:
    """``n`` distinct valid configs with d_model <= max_d and at most ``max_params`` parameters.

    The bias subset cycles through all 16 subsets and the causal flag alternates every 16
    configs, so both are covered evenly; ``n_wide`` configs (default n // 20, at least one) have
    d_model = max_d exactly, with up to ``max_params_wide`` (default 2 max_params) parameters.
    """
    rng = random.Random(seed)
    n_wide = max(1, n // 20) if n_wide is None else n_wide
    max_params_wide = 2 * max_params if max_params_wide is None else max_params_wide
    wide_slots = set(round(i * n / n_wide) for i in range(n_wide)) if n_wide else set()
    out: list[AttentionConfig] = []
    seen: set[AttentionConfig] = set()
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > max_tries:
            raise RuntimeError(f"sweep_configs: found only {len(out)} distinct configs of {n} "
                               f"(max_d={max_d}, max_params={max_params})")
        i = len(out)
        wide = i in wide_slots
        cfg = random_config(rng, max_d, bias=BIAS_SUBSETS[i % 16], causal=bool((i // 16) % 2),
                            d_model=max_d if wide else None)
        if cfg in seen or n_params(cfg) > (max_params_wide if wide else max_params):
            continue
        seen.add(cfg)
        out.append(cfg)
    return out


@contextmanager
def torch_threads(n: int | None):
    """Run the block with ``n`` intra-op torch threads (None: leave the setting alone)."""
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_sweep(configs: Iterable[AttentionConfig], seed: int = 0, max_attempts: int = 1,
              spread_from: int | None = None, threads: int | None = 1) -> list[dict[str, Any]]:
    """Closed form against measured rank for each config: one dict per config.

    Each config is measured at seeds seed, seed + 1, ... until its rank is certified, at most
    ``max_attempts`` times, with spread query/key weights from attempt ``spread_from`` on (see
    ``idlib.rank.measure_until_certified``; ``attempts`` holds every try); each row is an
    ``idlib.verdict.Check`` as a dict, whose ``agrees`` means certified and equal.
    ``threads``: torch threads while measuring.  The sweep's Jacobians are small (a few hundred
    columns), where one thread is several times faster than two, and much faster when other
    processes share the cores (measured: 25 s against 140 s for the appendix's default sweep
    on a loaded 2-core machine); ranks do not depend on it.
    """
    with torch_threads(threads):
        return [measure_and_check(cfg, seed, max_attempts, spread_from).as_dict() for cfg in configs]


def tally(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Agreements, certified ranks, the smallest gap and the configs' reach.

    ``disagreements``: certified ranks that differ from the closed form (bugs);
    ``not_certified``: configs whose every attempt was uncertified (no verdict either way).
    """
    cfgs = [r["config"] for r in rows]
    return {"n": len(rows), "agree": sum(r["agrees"] for r in rows),
            "certified": sum(r["certified"] for r in rows),
            "min_gap": min(r["gap"] for r in rows),
            "max_d": max(c.d_model for c in cfgs), "max_params": max(r["total"] for r in rows),
            "distinct": len(set(cfgs)),
            "retried": [r for r in rows if len(r.get("attempts", ())) > 1],
            "not_certified": [r for r in rows if not r["certified"]],
            "disagreements": [r for r in rows if r["certified"] and not r["agrees"]]}


def coverage(configs: Iterable[AttentionConfig]) -> dict[str, Counter]:
    """How many configs fall in each category of each field (to show the sweep spans them)."""
    cats: dict[str, Counter] = {k: Counter() for k in
                                ("n_heads", "group_size", "head_dim", "value_dim", "rope",
                                 "rope_base", "bias", "causal")}
    for c in configs:
        cats["n_heads"][c.n_heads] += 1
        cats["group_size"]["MHA (G = H)" if c.n_kv_heads == c.n_heads else
                           "MQA (G = 1)" if c.n_kv_heads == 1 else "GQA"] += 1
        cats["head_dim"][width_mode(c, c.head_dim)] += 1
        cats["value_dim"][width_mode(c, c.value_dim) + ("" if c.value_dim == c.head_dim else ", != k")] += 1
        cats["rope"]["none" if not c.rotary_dim else "full" if c.rotary_dim == c.head_dim else "partial"] += 1
        if c.rotary_dim:
            cats["rope_base"][f"{c.rope_base:g}"] += 1
        cats["bias"][c.bias or "none"] += 1
        cats["causal"][c.causal] += 1
    return cats


def check_draws(n_configs: int, seed: int, max_d: int, max_params: int, n_wide: int,
                max_params_wide: int) -> None:
    """Raise ``ParameterError`` naming the knobs when ``sweep_configs`` cannot draw that many
    distinct configurations within the caps (the appendix's parameters cell calls it, so that
    such knobs fail there, before any measurement)."""
    try:
        sweep_configs(n_configs, seed, max_d, max_params, n_wide, max_params_wide)
    except RuntimeError as e:
        raise ParameterError(f"n_configs={n_configs}, max_d={max_d}, max_params={max_params}, "
                             f"n_wide={n_wide}, max_params_wide={max_params_wide}: "
                             f"{e}") from None
