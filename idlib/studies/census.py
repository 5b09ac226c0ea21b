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
from fractions import Fraction
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
from ..report import tables as _t
from ..report.layers import layer_label
from ..report.tables import format_gap, format_share

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


# -- chapter 8: its tables, figures and the numbers its prose pastes --------------------------
# Every function below returns what a cell of chapters/08_census.ipynb shows: a numbered table
# (MyST, ``idlib.report.tables.captioned``), a figure, or text for ``{glue:text}``; the chapter's
# words around those numbers are checked in tests/test_census_statements.py.

def data_table(models: list[CensusModel]) -> str:
    """The shipped configs: model, model_type, repository, fields not confirmed (numbered)."""
    t = _t
    rows = [[m.name, f"`{m.model_type}`", m.source.replace("/config.json", ""),
             ", ".join(f"`{f}`" for f in m.unconfirmed_fields) or "-"] for m in models]
    return t.captioned(t.markdown_table(
        ["model", "model_type", "Hugging Face repository (config.json)", "not confirmed"],
        rows, align="llll"),
        "The census models: the Hugging Face repository each config comes from, and the "
        "fields whose values were seen only in third-party copies.", "tab-census-data",
        widths=(18, 16, 34, 32))


def rope_schedules(models: list[CensusModel]) -> list[tuple[str, AttentionConfig | LatentAttentionConfig]]:
    """(name, layer) for every RoPE schedule of the census: each model's first rotary layer
    type, and a second line for a model whose local layers use their own base (Gemma 3)."""
    out = []
    for m in models:
        rotary = [t.config for t in (m.model.counted if m.model else ())
                  if frequencies_generic(t.config)[0] is not None]
        if not rotary:
            continue
        out.append((m.name, rotary[0]))
        local = m.hf.get("text_config", m.hf).get("rope_local_base_freq")
        if local is not None:
            out.append((f"{m.name}, local layers", rotary[0].replace(rope_base=float(local))))
    return out


def angle_margin(config: AttentionConfig | LatentAttentionConfig) -> tuple[float, str]:
    """The closest the folded RoPE angles come to a coincidence (the margin of
    :func:`frequencies_generic`) and where: 'plane l to 0', 'plane l to pi' or 'planes l, l''
    (planes numbered from 1, the fastest first), with ', the two slowest' when those are the
    last two planes."""
    if isinstance(config, LatentAttentionConfig):
        config = config.rope_head()
    two_pi = 2 * math.pi
    omegas = [float(x) for x in rope_frequencies(config)]
    if not omegas:
        raise ValueError("angle_margin: the layer has no RoPE")
    folded = sorted((min(w % two_pi, two_pi - w % two_pi), l + 1) for l, w in enumerate(omegas))
    cands = [(folded[0][0], f"plane {folded[0][1]} to 0"),
             (math.pi - folded[-1][0], f"plane {folded[-1][1]} to pi")]
    n = len(omegas)
    for (a, la), (b, lb) in zip(folded, folded[1:]):
        lo, hi = sorted((la, lb))
        where = f"planes {lo}, {hi}" + (", the two slowest" if (lo, hi) == (n - 1, n) else "")
        cands.append((b - a, where))
    return min(cands)


def angles_table(models: list[CensusModel]) -> tuple[str, dict[str, str]]:
    """The RoPE schedules against conditions (a) and (b) (numbered table) and, for the prose,
    how many meet them and how many have their closest coincidence between the two slowest
    planes."""
    t = _t
    rows, ok, slow = [], 0, 0
    for name, config in rope_schedules(models):
        holds = frequencies_generic(config)[0]
        c = config.rope_head() if isinstance(config, LatentAttentionConfig) else config
        margin, where = angle_margin(config)
        ok += bool(holds)
        slow += where.endswith("the two slowest")
        rows.append([name, f"{c.rope_base:g}", c.rotary_dim, "yes" if holds else "NO",
                     f"{margin:.1e}", where.replace(" pi", " $\\pi$")])
    table = t.captioned(t.markdown_table(
        ["model", "base $b$", "$r$", "(a) and (b)", "closest (rad)", "where"], rows,
        align="lrrlrl"),
        "The RoPE angles of every census model against conditions (a) and (b) of "
        "{prf:ref}`thm-census-gqa-rope`: the $r/2$ angles folded into $[0, \\pi]$, and the "
        "smallest distance between two of them or to $0$ or $\\pi$ (planes numbered from the "
        "fastest).", "tab-census-angles")
    n = len(rows)
    return table, {"census-schedules-ok": f"{ok} of {n}", "census-schedules-slow": f"{slow} of {n}"}


def plain_rotary(config: Any) -> bool:
    """Is the layer counted by the census theorem's closed form: no biases, full RoPE, v = k,
    no QK-norm, no latent? (Other variants may be on when they change no count here: Gemma 2's
    soft-cap, without a key bias.)"""
    return (isinstance(config, AttentionConfig) and config.rotary_dim == config.head_dim > 0
            and not config.bias and config.value_dim == config.head_dim
            and not variants.BY_NAME["qk_norm"].active(config) and config.kv_latent is None)


def closed_form_table(models: list[CensusModel]) -> tuple[str, dict[str, str]]:
    """The census theorem's share (1 + k)/(2d(m + 1)), and k/(d(m + 1)) without RoPE, against
    the count of every census layer it applies to, in exact fractions (numbered table)."""
    from fractions import Fraction
    t = _t
    rows, equal = [], 0
    for m in models:
        c = m.config
        if c is None or not plain_rotary(c):
            continue
        n, nope = count(c), count(c.replace(rope_fraction=0.0))
        formula = Fraction(1 + c.head_dim, 2 * c.d_model * (c.group_size + 1))
        no_rope = Fraction(c.head_dim, c.d_model * (c.group_size + 1))
        same = (Fraction(n.unidentified, n.total) == formula,
                Fraction(nope.unidentified, nope.total) == no_rope)
        equal += all(same)
        rows.append([m.name, c.group_size, t.format_fraction(n.unidentified, n.total),
                     str(formula), "yes" if same[0] else "NO",
                     t.format_fraction(nope.unidentified, nope.total),
                     "yes" if same[1] else "NO"])
    table = t.captioned(t.markdown_table(
        ["model", "$m$", "$U/P$ (count)", "$(1+k)/(2d(m+1))$", "equal", "$U/P$, no RoPE",
         "$= k/(d(m+1))$"], rows, align="lrrrlrl"),
        "The closed form of {prf:ref}`thm-census-gqa-rope` against the count of every census "
        "layer it applies to (no biases, full RoPE, $v = k$, no QK-norm), and the share "
        "without RoPE, as exact fractions.", "tab-census-formula")
    return table, {"census-formula-rows": f"{equal} of {len(rows)}"}


def _generic(m: CensusModel) -> bool | None:
    """Conditions (a), (b) on every rotary layer type of a model (None: no RoPE)."""
    verdicts = {frequencies_generic(t.config)[0] for t in (m.model.counted if m.model else ())}
    verdicts.discard(None)
    return None if not verdicts else all(verdicts)


def census_markdown(rows: list[dict[str, Any]], models: list[CensusModel]) -> tuple[str, list[str]]:
    """The census (numbered table) and the lines printed under it: per layer type of the models
    whose layers differ, then the footnotes."""
    t = _t
    generic = {m.slug: _generic(m) for m in models}
    angles = {True: "hold", False: "FAIL", None: "no RoPE"}
    body = []
    for r in rows:
        cells = table_cells(r)
        body.append([cells[0], cells[1], cells[2], cells[3], cells[4], cells[5],
                     angles[generic.get(r["slug"])]])
    table = t.captioned(t.markdown_table(
        ["model", "$L$", "$P$ per layer", "$P$, all layers", "$U$ per layer", "$U/P$",
         "RoPE (a), (b)"], body, align="lrrrrrl"),
        "The census: attention parameters $P$ and unidentified parameters $U$ of one layer "
        "and of all $L$ layers, the unidentified share, and conditions (a), (b) of "
        "{prf:ref}`thm-census-gqa-rope` on the model's RoPE angles. \"by type\": the layers "
        "differ (listed under the table); * some config values were read from third-party "
        "copies only.", "tab-census")
    notes = type_lines(rows)
    notes += [textwrap.fill(f"{r['name']}: {r['status']}: {r['reason']}.", 76,
                            subsequent_indent="  ") for r in rows if r["status"] != "exact"]
    return table, notes


def effects_markdown(rows: list[dict[str, Any]]) -> str:
    """The share of every exact row with one design choice undone (numbered table)."""
    t = _t
    body = [[r["name"], *(r["share_text"][key] for key in SHARE_KEYS)]
            for r in rows if r["status"] == "exact"]
    return t.captioned(t.markdown_table(["model", "$U/P$", "no RoPE", "no grouping",
                                         "no QK-norm"], body, align="lrrrr"),
                       "The unidentified share of each model's attention as published and with "
                       "one design choice undone (\"-\": the model does not use it).",
                       "tab-census-effects")


def extremes(rows: list[dict[str, Any]], n: int = 3) -> dict[str, str]:
    """The largest and smallest shares among the exact rows, for the prose: 'census-largest'
    (the n largest, in order, with their shares), 'census-smallest' (the smallest), and the
    exact rows' total."""
    t = _t
    exact = sorted((r for r in rows if r["status"] == "exact"),
                   key=lambda r: (-Fraction(r["unidentified"], r["total"]), r["name"]))
    text = lambda r: f"{r['name']} ({t.format_share(r['unidentified'], r['total'])})"  # noqa: E731
    top = [text(r) for r in exact[:n]]
    P = sum(r["total"] for r in exact)
    U = sum(r["unidentified"] for r in exact)
    return {"census-largest": ", ".join(top[:-1]) + " and " + top[-1],
            "census-smallest": text(exact[-1]),
            "census-exact-share": t.format_share(U, P),
            "census-exact-rows": str(len(exact))}


def _rotary_share(model: Model) -> str:
    """How much of the model RoPE covers, in words, '' when every dimension of every layer."""
    types = model.counted
    rotary = [t for t in types if isinstance(t.config, AttentionConfig) and t.config.rotary_dim]
    n_layers = sum(len(t.layers) for t in types)
    n_rotary = sum(len(t.layers) for t in rotary)
    parts = []
    if n_rotary < n_layers:
        parts.append(f"RoPE on {n_rotary} of {n_layers} layers")
    fracs = {Fraction(t.config.rotary_dim, t.config.head_dim) for t in rotary}
    if fracs != {1}:
        parts.append("rotary share " + ", ".join(str(f) for f in sorted(fracs)))
    return ", ".join(parts)


def effect_summary(rows: list[dict[str, Any]], models: list[CensusModel]) -> dict[str, str]:
    """The effect of each design choice as factors (share without it / share with it), in words
    for the prose: RoPE where it covers every dimension of every layer and there is no QK-norm
    ('census-rope-full': the range, 'census-rope-full-n'), RoPE elsewhere ('census-rope-other',
    per model), grouping ('census-grouping': largest factor, model and m), QK-norm where RoPE
    covers everything ('census-qkn-full') and elsewhere ('census-qkn-other')."""
    by_slug = {m.slug: m for m in models}
    full, other, qkn_full, qkn_other, grouping = [], [], [], [], []
    for r in rows:
        if r["status"] != "exact" or r["share_without_rope"] is None and \
                r["share_without_grouping"] is None and r["share_without_qk_norm"] is None:
            continue
        m = by_slug[r["slug"]].model
        where = _rotary_share(m)
        qkn = r["share_without_qk_norm"] is not None
        if r["share_without_rope"] is not None:
            f = r["share_without_rope"] / r["share"]
            if not where and not qkn:
                full.append(f)
            else:
                why = ", ".join(x for x in (where, "QK-norm" if qkn else "") if x)
                other.append(f"{r['name']} {f:.2f} ({why})")
        if qkn:
            f = r["share_without_qk_norm"] / r["share"]
            (qkn_full if not where else qkn_other).append(
                (f, r["name"] + ("" if not where else f" ({where})")))
        if r["share_without_grouping"] is not None:
            groups = {t.config.group_size for t in m.counted}
            grouping.append((r["share_without_grouping"] / r["share"], r["name"],
                             ", ".join(str(g) for g in sorted(groups))))
    f_max, name, m_text = max(grouping)
    return {
        "census-rope-full": f"{min(full):.2f} to {max(full):.2f}",
        "census-rope-full-n": str(len(full)),
        "census-rope-other": "; ".join(other),
        "census-grouping": f"{f_max:.1f} for {name} (group size {m_text})",
        "census-grouping-n": str(len(grouping)),
        "census-qkn-full": f"{min(f for f, _ in qkn_full):.2f} to {max(f for f, _ in qkn_full):.2f} "
                           f"({', '.join(n for _, n in qkn_full)})",
        "census-qkn-other": "; ".join(f"{n}: {f:.1f}" for f, n in qkn_other)}


def grouping_factors(rows: list[dict[str, Any]], models: list[CensusModel]) -> list[tuple[str, int, Fraction]]:
    """(name, m, share without grouping / share) of every exact uniform row with grouping."""
    out = []
    for r in rows:
        m = next(x for x in models if x.slug == r["slug"])
        if r["status"] != "exact" or r["share_without_grouping"] is None or m.config is None:
            continue
        ours = count(m.config)
        ungrouped = count(m.config.replace(n_kv_heads=m.config.n_heads))
        out.append((r["name"], m.config.group_size,
                    Fraction(ungrouped.unidentified, ungrouped.total)
                    / Fraction(ours.unidentified, ours.total)))
    return out


def effects_size(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """The figure size (inches) of :func:`draw_effects` for these rows."""
    return 7.0, 0.36 * sum(r["share"] is not None for r in rows) + 1.6


def draw_effects(ax: Any, rows: list[dict[str, Any]], colors: dict[str, str]) -> None:
    """Each model's share as published (grey rings, drawn on top, so a marker that coincides
    shows inside) and with one design choice undone (filled markers, each kind a little above
    or below the model's line, so that equal values stay visible), log axis."""
    shown = [r for r in rows if r["share"] is not None]
    y = list(range(len(shown)))
    marks = [("share_without_rope", "no RoPE", colors["rope"], ">"),
             ("share_without_grouping", "no grouping", colors["gqa"], "s"),
             ("share_without_qk_norm", "no QK-norm", colors["baseline"], "D")]
    for i, r in enumerate(shown):
        xs = [100 * r[k] for k in SHARE_KEYS if r[k] is not None]
        ax.plot([min(xs), max(xs)], [i, i], color=colors["unidentified"], lw=0.8, zorder=1)
    ax.scatter([100 * r["share"] for r in shown], y, s=130, facecolors="none",
               edgecolors=colors["unidentified"], linewidths=1.8, label="as published",
               zorder=4)
    for (key, label, color, marker), dy in zip(marks, (-0.22, 0.0, 0.22)):
        pts = [(100 * r[key], i + dy) for i, r in enumerate(shown) if r[key] is not None]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], color=color, marker=marker,
                   s=28, label=label, zorder=3)
    ax.set_yticks(y, [r["name"] for r in shown])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel(r"unidentified share of one layer, $U/P$ (%)")
    ax.legend(loc="lower center", bbox_to_anchor=(0.4, 1.0), ncol=2)


def twin_markdown(checks: list[dict[str, Any]]) -> str:
    """Every twin's closed form against its measured rank, every seed (numbered table)."""
    t = _t
    body = [[", ".join(ch["models"]), layer_label(ch["twin"]), run["seed"], run["n_params"],
             run["closed_form_identified"], run["rank"],
             f"{run['closed_form_unidentified']} / {run['measured_unidentified']}",
             t.format_gap(run["gap"]), "yes" if run["certified"] else "NOT certified"]
            for ch in checks for run in ch["runs"]]
    return t.captioned(t.markdown_table(
        ["models", "twin (layer measured)", "seed", "$P$", "$I$ (closed form)", "rank $J$",
         "$U$ closed / measured", "gap $\\gamma$", "certified"], body, align="llrrrrrrl"),
        "Each distinct twin: the closed-form identified count $I$ against the measured rank of "
        "$J$, the gap $\\gamma$ at the cut and whether it is certified, at every seed.",
        "tab-census-twins")


def twin_label(check: dict[str, Any]) -> str:
    """A short name for a twin: its first model ('RoPE layers' / 'NoPE layers' for a type of a
    model whose layers differ) and '+n' for n more models that share it."""
    first = check["models"][0]
    if " (layers " in first:
        kind = "RoPE layers" if check["twin"].rotary_dim else "NoPE layers"
        first = f"{first.split(' (layers ')[0]}, {kind}"
    more = len(check["models"]) - 1
    return first + (f" +{more}" if more else "")


def twins_size(checks: list[dict[str, Any]]) -> tuple[float, float]:
    """The figure size (inches) of :func:`draw_twins`."""
    return 7.0, 0.4 * len(checks) + 1.4


def draw_twins(ax: Any, checks: list[dict[str, Any]], colors: dict[str, str]) -> None:
    """U of each twin: closed form (bars) and measured at every seed (marks)."""
    y = list(range(len(checks)))
    ax.barh(y, [c["runs"][0]["closed_form_unidentified"] for c in checks],
            color=colors["closed_form"], alpha=0.8, label="closed form")
    for i, c in enumerate(checks):
        vals = [r["measured_unidentified"] for r in c["runs"]]
        ax.scatter(vals, [i] * len(vals), color=colors["measured"], marker="|", s=300,
                   zorder=3, label="measured: $P$ - rank $J$" if i == 0 else None)
    ax.set_yticks(y, [twin_label(c) for c in checks])
    ax.invert_yaxis()
    ax.set_xlabel("unidentified parameters $U$ of the twin")
    ax.legend(loc="lower center", bbox_to_anchor=(0.4, 1.0), ncol=2)


def twin_summary(checks: list[dict[str, Any]]) -> dict[str, str]:
    """For the prose: how many twins agree, certified, at every seed, and the smallest gap."""
    runs = [r for c in checks for r in c["runs"]]
    return {"census-twins": str(len(checks)), "census-twin-runs": str(len(runs)),
            "census-twins-agree": f"{sum(c['agrees'] for c in checks)} of {len(checks)}",
            "census-twin-smallest-gap": format_gap(min(r["gap"] for r in runs))}


def beyond_attention(row: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """For a pre-norm RMSNorm model with two norms per block (the row of Llama 3 8B): the lines
    that put its norm gains and the residual-stream rotation beside the census count, and the
    numbers the prose pastes."""
    t = _t
    d, L = row["config"]["d_model"], row["layers"]
    parts = {"attention (census)": (row["total"], row["unidentified"]),
             "norm gains, 2 per block": (2 * L * d, 2 * L * d),
             "residual-stream rotation": (0, d * (d - 1) // 2)}
    P = sum(p for p, _ in parts.values())
    U = sum(u for _, u in parts.values())
    lines = [f"{part:25s} P {p:>13,}  U {u:>10,}"
             for part, (p, u) in list(parts.items()) + [("together", (P, U))]]
    rotation = parts["residual-stream rotation"][1] / row["unidentified"]
    gains = parts["norm gains, 2 per block"][1] / U
    lines += [f"rotation / attention unidentified: {rotation:.2f}",
              f"U/P together {t.format_share(U, P)}; attention alone "
              f"{t.format_share(row['unidentified'], row['total'])}"]
    return lines, {"census-rotation-ratio": f"{rotation:.2f}",
                   "census-gains-part": f"{100 * gains:.1f}%",
                   "census-together-share": t.format_share(U, P),
                   "census-attention-share": t.format_share(row["unidentified"], row["total"])}


def group_sizes(models: list[CensusModel]) -> dict[int, list[str]]:
    """The census models by group size m (every counted layer type of a model shares one m;
    latent layers have none)."""
    out: dict[int, list[str]] = {}
    for m in models:
        sizes = {t.config.group_size for t in (m.model.counted if m.model else ())
                 if isinstance(t.config, AttentionConfig)}
        for g in sizes:
            out.setdefault(g, []).append(m.name)
    return dict(sorted(out.items()))
