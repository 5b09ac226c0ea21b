"""A census of published models: how much of their attention no data can identify.

Each shipped file under ``idlib/data/configs/`` is the attention part of a published Hugging Face
``config.json`` (values copied, nothing derived), plus keys starting with ``_`` that record where
it comes from (``_source``: repository and path on the Hub; ``_checked_against``: where the values
were read; ``_confirmed`` / ``_unconfirmed_fields``; ``_notes``).  ``idlib.hf.config_from_hf``
ignores the ``_`` keys, so every file also works as ``python -m idlib count --config FILE``.

For each model the census gives the closed-form count of one attention layer
(:func:`idlib.counting.count`), the whole model's attention (``num_hidden_layers`` layers, each
counted on its own), the unidentified share, and the share the same layer would have without
its RoPE, without its key/value grouping and without its QK-norm: the effect of each design
choice.  :func:`twin` builds a small layer with the same head/group pattern, rotary share,
biases and norms, small enough for :func:`idlib.rank.measure` to confirm its count.

What the config does not say but the architecture fixes (QK-norm in Qwen3 and Gemma 3) is read
from the family table of :mod:`idlib.hf`; multi-head latent attention (DeepSeek) is a
:class:`~idlib.config.LatentAttentionConfig`, counted exactly by
:func:`idlib.counting.count_latent` (its twin is measured on the real module, chapter 9).  A
config the reader refuses is marked ``not representable`` with the reason, never silently
adjusted.
"""
from __future__ import annotations

import json
import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..attention import n_params, rope_frequencies
from ..verdict import measure_and_check
from .. import variants
from ..config import RULES, AttentionConfig, ConfigError, LatentAttentionConfig
from ..counting import check_derived, count
from ..hf import model_from_hf
from ..model import Model, count_model
from ..report.tables import format_share

CONFIG_DIR = Path(__file__).resolve().parent.parent / "data" / "configs"

# What a twin changes: the sizes (the fields of the heads row); every other field is kept.
SIZE_FIELDS = tuple(variants.heads.ROW.fields)


@dataclass(frozen=True)
class CensusModel:
    """One shipped config and the attention layer the census counts for it."""

    slug: str
    name: str
    source: str
    checked_against: str
    confirmed: bool
    unconfirmed_fields: tuple[str, ...]
    notes: str
    model_type: str
    n_layers: int
    hf: dict[str, Any] = field(repr=False)
    config: AttentionConfig | LatentAttentionConfig | None   # the layer, when every layer is alike
    status: str                 # "exact" or "not representable"
    reason: str = ""            # why a row is not representable
    model: Model | None = None  # every layer, by type (idlib.model)

    @property
    def path(self) -> Path:
        return CONFIG_DIR / f"{self.slug}.json"


def _text_config(data: dict[str, Any]) -> dict[str, Any]:
    if "text_config" in data and "hidden_size" not in data:
        return data["text_config"]
    return data


def _build(data: dict[str, Any], name: str) -> tuple[Model | None, str, str]:
    """(model, status, reason) for one HF config dict: every layer read, by type."""
    try:
        model = model_from_hf(data)
        count_model(model)                   # every counted type derived, or refused here
        return model, "exact", ""
    except ConfigError as e:
        return None, "not representable", str(e)


def load_model(path: str | Path) -> CensusModel:
    path = Path(path)
    data = json.loads(path.read_text())
    text = _text_config(data)
    model, status, reason = _build(data, path.name)
    cfg = model.counted[0].config if model is not None and model.uniform else None
    return CensusModel(
        slug=path.stem, name=data.get("_name", path.stem), source=data.get("_source", ""),
        checked_against=data.get("_checked_against", ""), confirmed=bool(data.get("_confirmed", False)),
        unconfirmed_fields=tuple(data.get("_unconfirmed_fields", ())), notes=data.get("_notes", ""),
        model_type=str(text.get("model_type") or data.get("model_type", "")),
        n_layers=model.n_layers if model is not None else
        int(text.get("num_hidden_layers") or text.get("n_layer") or 1),
        hf=data, config=cfg, status=status, reason=reason, model=model)


def load_models(directory: str | Path = CONFIG_DIR) -> list[CensusModel]:
    """Every shipped model, sorted by file name."""
    return [load_model(p) for p in sorted(Path(directory).glob("*.json"))]


# -- the effect of each design choice -------------------------------------------------------

def _share(config: AttentionConfig | None) -> tuple[int, int] | None:
    """(U, P) of a layer, None for no layer."""
    if config is None:
        return None
    c = count(config)
    return c.unidentified, c.total


def _without(config: AttentionConfig, **changes: Any) -> AttentionConfig | None:
    """The same layer with one design choice undone; None if that leaves no valid layer."""
    try:
        return config.replace(**changes)
    except ConfigError:
        return None


def design_effects(config: AttentionConfig | LatentAttentionConfig) -> dict[str, tuple[int, int] | None]:
    """(U, P) with each of the layer's design choices undone (None: not used; a latent layer
    has no RoPE-free, ungrouped or un-normalised version of itself)."""
    out: dict[str, tuple[int, int] | None] = {"without_rope": None, "without_grouping": None,
                                    "without_qk_norm": None}
    if isinstance(config, LatentAttentionConfig):
        return out
    if config.rotary_dim:
        out["without_rope"] = _share(_without(config, rope_fraction=0.0))
    if config.n_kv_heads != config.n_heads:
        out["without_grouping"] = _share(_without(config, n_kv_heads=config.n_heads))
    if variants.BY_NAME["qk_norm"].active(config):
        out["without_qk_norm"] = _share(_without(config, qk_norm="none"))
    return out


def _model_effects(model: Model) -> dict[str, tuple[int, int] | None]:
    """(U, P) of the whole model (its counted layers) with each design choice undone in every layer
    type that uses it (the others as they are); None when no type uses it."""
    out: dict[str, tuple[int, int] | None] = {}
    per_type = [(len(t.layers), t.config, design_effects(t.config)) for t in model.counted]
    for key in ("without_rope", "without_grouping", "without_qk_norm"):
        if all(effects[key] is None for _, _, effects in per_type):
            out[key] = None
            continue
        U = P = 0
        for n, config, effects in per_type:
            u, p = effects[key] if effects[key] is not None else _share(config)
            U, P = U + n * u, P + n * p
        out[key] = (U, P)
    return out


def census_row(model: CensusModel) -> dict[str, Any]:
    """One row of the census (integers exact; shares as floats U / P, and as printed by
    ``format_share`` in ``share_text``; None where not applicable).  A model whose layers differ
    is counted type by type (``types``); its per-layer columns are None and its shares are those
    of its counted layers together; layers that are not softmax attention are not counted
    (``not_counted``)."""
    row: dict[str, Any] = {
        "slug": model.slug, "name": model.name, "model_type": model.model_type,
        "layers": model.n_layers, "status": model.status, "reason": model.reason,
        "source": model.source, "confirmed": model.confirmed,
        "unconfirmed_fields": list(model.unconfirmed_fields)}
    m = model.model
    if m is None:
        row.update({k: None for k in ("config", "per_layer_total", "per_layer_identified",
                                      "per_layer_unidentified", "total", "identified",
                                      "unidentified", "share", "share_without_rope",
                                      "share_without_grouping", "share_without_qk_norm",
                                      "types", "counted_layers", "not_counted")})
        row["share_text"] = {k: "-" for k in SHARE_KEYS}
        return row
    mc = count_model(m)
    effects = _model_effects(m)
    uniform = model.config is not None
    c = count(model.config) if uniform else None
    row.update({
        "config": model.config.to_dict() if uniform else None,
        "per_layer_total": c.total if uniform else None,
        "per_layer_identified": c.identified if uniform else None,
        "per_layer_unidentified": c.unidentified if uniform else None,
        "total": mc.total, "identified": mc.identified, "unidentified": mc.unidentified,
        "counted_layers": mc.counted_layers,
        "types": [{"layers": list(t.layers), "label": t.label, "config": t.config.to_dict(),
                   "per_layer_total": k.total, "per_layer_unidentified": k.unidentified,
                   "share_text": format_share(k.unidentified, k.total)} for t, k in mc.counts],
        "not_counted": [{"layers": list(t.layers), "label": t.label, "reason": t.reason}
                        for t in m.types if t.config is None],
        "share": mc.share,
        "share_without_rope": _ratio(effects["without_rope"]),
        "share_without_grouping": _ratio(effects["without_grouping"]),
        "share_without_qk_norm": _ratio(effects["without_qk_norm"]),
        "share_text": {"share": format_share(mc.unidentified, mc.total),
                       **{"share_" + k: "-" if v is None else format_share(*v)
                          for k, v in effects.items()}}})
    return row


SHARE_KEYS = ("share", "share_without_rope", "share_without_grouping", "share_without_qk_norm")


def _ratio(counts: tuple[int, int] | None) -> float | None:
    return None if counts is None else counts[0] / counts[1]


def census_rows(directory: str | Path = CONFIG_DIR) -> list[dict[str, Any]]:
    """The census, one dict per shipped model (what ``python -m idlib census --json`` prints)."""
    return [census_row(m) for m in load_models(directory)]


def _big(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


CENSUS_COLUMNS = ("model", "layers", "params/layer", "params (all layers)", "unidentified/layer",
                  "share", "no RoPE", "no grouping", "no QK-norm")


def table_cells(row: dict[str, Any]) -> list[str]:
    """The printed cells of one row, in the order of :data:`CENSUS_COLUMNS`."""
    mark = {"exact": "", "not representable": " (not counted)"}
    layers = str(row["layers"])
    if row.get("counted_layers") is not None and row["counted_layers"] != row["layers"]:
        layers = f"{row['counted_layers']} of {row['layers']}"
    by_type = row.get("types") and row["per_layer_total"] is None
    return [row["name"] + mark[row["status"]] + ("" if row["confirmed"] else " *"),
            layers, "by type" if by_type else _big(row["per_layer_total"]), _big(row["total"]),
            "by type" if by_type else _big(row["per_layer_unidentified"]),
            *(row["share_text"][k] for k in SHARE_KEYS)]


def format_census(rows: list[dict[str, Any]]) -> str:
    """A plain-text table of :func:`census_rows`, with its footnotes."""
    body = [list(CENSUS_COLUMNS)] + [table_cells(r) for r in rows]
    widths = [max(len(line[i]) for line in body) for i in range(len(CENSUS_COLUMNS))]
    fmt = lambda line: "  ".join(  # noqa: E731
        cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths)))
    lines = [fmt(body[0]), "-" * len(fmt(body[0]))] + [fmt(line) for line in body[1:]]
    lines.append("share = unidentified / total parameters of the counted attention layers (one "
                 "layer's share when every layer is alike); '-' = the model does not use that design "
                 "choice.")
    for r in rows:
        if r.get("types") and r["per_layer_total"] is None:
            for t in r["types"]:
                lines.append(f"{r['name']}, {t['label']}: {_big(t['per_layer_total'])} parameters, "
                             f"{_big(t['per_layer_unidentified'])} unidentified per layer "
                             f"({t['share_text']})")
        for t in r.get("not_counted") or ():
            lines.append(f"{r['name']}, {t['label']}: not counted ({t['reason']})")
    if any(not r["confirmed"] for r in rows):
        lines.append("* some config values were read from third-party copies only "
                     "(see the file's _unconfirmed_fields).")
    for r in rows:
        if r["status"] != "exact":
            lines.append(f"{r['name']}: {r['status']}: {r['reason']}.")
    return "\n".join(lines)


def census_table(directory: str | Path = CONFIG_DIR) -> str:
    """The census as text (what ``python -m idlib census`` prints)."""
    return format_census(census_rows(directory))


# -- scaled-down twins ----------------------------------------------------------------------

TWIN_WIDTHS = range(8, 17)
TWIN_MAX_PARAMS = 1200
TWIN_LARGE_PARAMS = 2048        # idlib.rank.AUTO_DENSE_MAX_PARAMS: a twin keeps its full spectrum


def _pattern(config: AttentionConfig) -> list[tuple[int, int]]:
    """Candidate (G, m) of a twin: the real group size m (up to 8), one or two groups."""
    G, m = config.n_kv_heads, config.group_size
    if m == 1:                                   # plain multi-head attention: keep G = H
        return [(h, 1) for h in (4, 3, 2)] if G >= 4 else [(G, 1)]
    m_t = min(m, 8)
    return [(g, m_t) for g in ((2, 1) if G >= 2 else (1,))]


def _twin_latent(C: int, config: AttentionConfig, k: int, d: int) -> int:
    """The twin's latent width: where C sits between head_dim and d_model (log scale), kept."""
    k0, d0 = config.head_dim, config.d_model
    if k0 < C < d0:
        return max(k + 1, min(d - 1, round(k * (d / k) ** (math.log(C / k0) / math.log(d0 / k0)))))
    return max(1, round(C / d0 * d))


def twin(config: AttentionConfig, widths: range = TWIN_WIDTHS,
         max_params: int | None = None) -> AttentionConfig:
    """A small layer with the same head/group pattern, rotary share, biases and norms.

    Keeps: group size m = H/G (capped at 8; G = H stays G = H), the query width relative to the
    model width H k / d (as closely as small integers allow), v / k, and every field that is not
    a size (``SIZE_FIELDS``): the rotary share r / k, the RoPE base, the biases, the causal mask
    and every variant (QK-norm, soft-cap, sinks, ...; the latent width relative to d).  A layer
    using a variant whose row does not declare "twin" has none (ConfigError).  ``max_params``:
    at most TWIN_MAX_PARAMS, or, when no twin fits (a gated layer of groups of 8: its gate is a
    second query projection), at most TWIN_LARGE_PARAMS (still the dense route's size).  Among the candidates with the closest H k / d it prefers more
    heads, then fewer parameters.
    """
    target = config.n_heads * config.head_dim / config.d_model
    v_over_k = config.value_dim / config.head_dim
    frac = config.rope_fraction
    missing = variants.unsupported(config, "twin")
    if missing:
        raise ConfigError(f"no twin of a layer with the variant(s) {variants.named(missing)} "
                          "(their rows declare no twin)")
    extra = {name: getattr(config, name) for name in RULES if name not in SIZE_FIELDS}
    latent = extra.get("kv_latent")
    best = None
    for d in widths:
        for G, m in _pattern(config):
            H = G * m
            for k in range(1, d + 1):
                r = frac * k
                if abs(r - round(r)) > 1e-9 or round(r) % 2 or (frac and round(r) == 0):
                    continue
                v = v_over_k * k
                if abs(v - round(v)) > 1e-9 or round(v) < 1:
                    continue
                # one rotating plane has theta_0 = base^0 = 1 whatever the base: use the default
                base = config.rope_base if round(r) > 2 else 10000.0
                kw = dict(extra, d_model=d, n_heads=H, n_kv_heads=G, head_dim=k,
                          value_dim=int(round(v)), rope_base=base)
                if latent is not None:
                    kw["kv_latent"] = _twin_latent(latent, config, k, d)
                try:
                    cand = AttentionConfig(**kw)
                    check_derived(cand)          # a twin must have a derived count
                except (ConfigError, TypeError):
                    continue
                p = n_params(cand)
                if p > (TWIN_MAX_PARAMS if max_params is None else max_params):
                    continue
                key = (round(abs(math.log(H * k / d / target)), 9), -H, p, d)
                if best is None or key < best[0]:
                    best = (key, cand)
    if best is None:
        if max_params is None:
            return twin(config, widths, TWIN_LARGE_PARAMS)
        raise ConfigError(f"no twin of {config} with d_model in {widths.start}..{widths.stop - 1} "
                          f"and at most {max_params} parameters")
    return best[1]


def twin_check(config: AttentionConfig, seed: int = 0) -> dict[str, Any]:
    """Closed-form count of ``twin(config)`` against its measured Jacobian rank."""
    t = twin(config)
    return {"twin": t, **_check_twin(t, seed)}


def twin_checks(models: list[CensusModel], seeds: tuple[int, ...] = (0,)) -> list[dict[str, Any]]:
    """One check per distinct twin (models whose twins coincide share it), over ``seeds``."""
    groups: dict[AttentionConfig, list[str]] = {}
    for m in models:
        types = m.model.counted if m.model is not None else ()
        for t in types:
            if isinstance(t.config, AttentionConfig):   # latent twins: on the real module (ch. 9)
                name = m.name if len(types) == 1 else f"{m.name} ({t.label})"
                groups.setdefault(twin(t.config), []).append(name)
    out = []
    for t, names in groups.items():
        runs = [_check_twin(t, seed) for seed in seeds]
        out.append({"models": names, "twin": t, "runs": runs,
                    "agrees": all(r["agrees"] for r in runs)})
    return out


def _check_twin(t: AttentionConfig, seed: int) -> dict[str, Any]:
    c = measure_and_check(t, seed)
    return {"seed": seed, "n_params": c.total, "closed_form_identified": c.identified,
            "closed_form_unidentified": c.unidentified, "rank": c.rank,
            "measured_unidentified": c.measured_unidentified, "gap": c.gap,
            "certified": c.certified, "agrees": c.agrees}


# -- the frequency condition of the census theorem --------------------------------------------

def frequencies_generic(config: AttentionConfig | LatentAttentionConfig, frequencies: Any = None,
                        tol: float = 1e-12) -> tuple[bool | None, str]:
    """Do the layer's RoPE angles meet the condition of the census theorem? (verdict, reason).

    Offsets are integers, so R(i) = R(1)^i and the commutant of every R(i) is that of R(1), whose
    planes turn by omega_l = b^(-2(l-1)/r), l = 1..r/2. The commutant is one C* per plane (2 real
    dims each) iff (1) no omega_l = 0 or pi mod 2 pi and (2) no omega_l = +-omega_l' mod 2 pi,
    l != l'. Folding phi_l = min(omega_l mod 2 pi, 2 pi - omega_l mod 2 pi) in [0, pi] makes both
    "every phi_l in (0, pi), all distinct"; after sorting, the margin is the smallest distance
    of a phi to 0, to pi or to its neighbour (a coincidence when below ``tol``). None: no RoPE.
    ``frequencies`` (the omega_l) replace the config's schedule, as in ``count``.  A latent layer
    (DeepSeek) is judged by its RoPE parts (``LatentAttentionConfig.rope_head``).
    """
    if isinstance(config, LatentAttentionConfig):
        config = config.rope_head()
    r = config.rotary_dim
    if not r:
        return None, "no RoPE: the condition does not apply"
    two_pi = 2 * math.pi
    folded = sorted(min(w % two_pi, two_pi - w % two_pi)
                    for w in (float(x) for x in (rope_frequencies(config) if frequencies is None
                                                 else frequencies)))
    gaps = [folded[0], math.pi - folded[-1]] + [b - a for a, b in zip(folded, folded[1:])]
    margin = min(gaps)
    where = f"b={config.rope_base:g}, r={r}: {r // 2} angles"
    if margin < tol:
        return False, f"{where}, two coincide up to sign or one is 0 or pi mod 2 pi ({margin:.1e})"
    return True, f"{where} in (0, pi), distinct up to sign; closest coincidence {margin:.1e} rad"


def type_lines(rows: list[dict[str, Any]], width: int = 76) -> list[str]:
    """For the census table's rows whose layers differ: one line per counted layer type (its
    parameters, unidentified count and share per layer) and per type not counted (why)."""
    out = []
    for r in rows:
        for t in r["types"] if r.get("types") and r["per_layer_total"] is None else ():
            out.append(f"{r['name']}, {t['label']}: P {t['per_layer_total']:,}, "
                       f"U {t['per_layer_unidentified']:,} per layer ({t['share_text']})")
        for t in r.get("not_counted") or ():
            out.append(f"{r['name']}, {t['label']}: not counted ({t['reason']})")
    return [textwrap.fill(line, width, subsequent_indent="  ") for line in out]
