"""Chapter 9 helpers: the closed forms against the attention modules of ``transformers``.

Every function returns what a cell of chapters/09_implementations.ipynb shows (a numbered
table, MyST, ``idlib.report.tables.captioned``; a figure) and the numbers its prose pastes
(``{glue:text}``); tests/test_implementations_statements.py checks the words around them.
Needs the ``[hf]`` extra (transformers), as :mod:`idlib.implementations` does.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from .. import hf
from .. import implementations as impl
from ..config import AttentionConfig
from ..counting import count
from ..rank import measure
from ..report.layers import layer_label
from ..report.tables import (captioned, format_gap, format_roundoff, format_share,
                             markdown_table)
from ..verdict import Check
from . import census

# the families whose small layer rotates half of each head (they rotate part of it)
PARTIAL = ("phi", "gpt_neox", "stablelm", "persimmon", "glm")


def hf_families_table() -> str:
    """Every family idlib.hf reads, from its table (numbered)."""
    rows = [[f"`{r['model_type']}`", r["positions"], r["biases"], r["qk_norm"], r["causal"],
             r["kv_heads default"]] for r in hf.family_table()]
    return captioned(markdown_table(
        ["model_type", "positions", "biases", "QK-norm", "causal", "$G$ when absent"], rows,
        align="llllll"), "Every family `idlib.hf` reads, from its table: how it encodes "
        "positions, which flag switches which biases, its QK-norm, whether it is causal, and "
        "the number of key/value heads its config class assumes when the field is absent.",
        "tab-impl-hf")


def read_examples() -> list[tuple[str, Any]]:
    """(name, config object) written by transformers' own config classes, both layouts."""
    T = impl._transformers()
    return [
        ("Phi-2", T.PhiConfig(hidden_size=2560, num_attention_heads=32, rope_parameters={
            "rope_theta": 1e4, "partial_rotary_factor": 0.4})),
        ("StableLM, q/k/v biases", T.StableLmConfig(hidden_size=4096, num_attention_heads=32,
                                                    use_qkv_bias=True)),
        ("GPT-J 6B", T.GPTJConfig(n_embd=4096, n_head=16, rotary_dim=64)),
        ("T5 3B", T.T5Config(d_model=1024, d_kv=128, num_heads=32)),
        ("GLM", T.GlmConfig(hidden_size=4096, num_attention_heads=32, num_key_value_heads=2)),
        ("Qwen2-VL", T.Qwen2VLConfig(text_config=dict(hidden_size=8192, num_attention_heads=64,
                                                      num_key_value_heads=8))),
        ("Gemma 3 4B", T.Gemma3Config(text_config=dict(hidden_size=2560, num_attention_heads=8,
                                                       num_key_value_heads=4, head_dim=256))),
    ]


def read_table() -> str:
    """The layer idlib.hf reads from each example config, and its count (numbered)."""
    rows = []
    for name, cfg in read_examples():
        c = hf.config_from_hf(cfg.to_dict())
        n = count(c)
        rows.append([name, layer_label(c), f"{n.total:,}", f"{n.unidentified:,}",
                     format_share(n.unidentified, n.total)])
    return captioned(markdown_table(["config", "read", "$P$", "$U$", "$U/P$"], rows,
                                    align="llrrr"),
                     "Configs written by `transformers`' own config classes (`to_dict()`), the "
                     "layer `idlib.hf` reads from each, and its count.", "tab-impl-read")


def small(family: str) -> dict[str, Any]:
    """The small layer of the families table: d = 8, two heads of 4, half the dims rotated where
    the family rotates part of each head, the family's biases on (Gemma 2: off)."""
    return dict(d=8, H=2, G=2, k=4, rope_fraction=0.5 if family in PARTIAL else 1.0,
                bias=family != "gemma2")


def families() -> list[str]:
    """The families of the first table: every non-latent family measured since chapter 9,
    and Gemma 2 with biases (its soft-cap with a key bias)."""
    return sorted(f for f, s in impl.SPECS.items()
                  if not s.latent and f not in impl.FAMILIES_2026) + ["gemma2 + b_K"]


def group_action(built: Any, seeds: Sequence[int]) -> tuple[float, float]:
    """(largest relative output change, smallest relative move) of a random element of idlib's
    symmetry group applied to the module's weights, over ``seeds``."""
    r = [impl.symmetry_check(built, seed=s) for s in seeds]
    return max(x["change"] for x in r), min(x["move"] for x in r)


@dataclass(frozen=True)
class FamilyRun:
    family: str
    check: Check          # the first seed's, or the first that disagrees
    change: float         # largest relative output change under the group action
    move: float           # smallest relative move of the weights


def family_runs(seeds: Sequence[int], seed: int) -> list[FamilyRun]:
    """Every family of :func:`families`, measured at every seed, its group action at ``seed``."""
    out = []
    for f in families():
        fam, kw = (f, small(f)) if f in impl.SPECS else ("gemma2", dict(small("gemma2"),
                                                                          bias=True))
        runs = [impl.check(fam, seed=s, **kw) for s in seeds]
        chosen = next((c for c in runs if not c.agrees), runs[0])
        change, move = group_action(impl.build(fam, seed=seed, **kw), seeds)
        out.append(FamilyRun(f, chosen, change, move))
    return out


def families_table(runs: Sequence[FamilyRun]) -> str:
    rows = []
    for r in runs:
        c = r.check
        rows.append([f"`{r.family}`: `{impl.SPECS[r.family.split()[0]].attention}`",
                     layer_label(c.config), c.total, c.unidentified, c.measured_unidentified,
                     format_gap(c.gap), "yes" if c.agrees else "NO", f"{r.move:.1f}",
                     format_roundoff(r.change)])
    return captioned(markdown_table(
        ["family: module", "layer", "$P$", "$U$ closed form", "$U$ measured", "gap $\\gamma$",
         "agrees", "move", "output change"], rows, align="llrrrrlrr"),
        "The `transformers` attention modules: closed form against the measured rank of their "
        "own Jacobian; *move* = $|\\theta' - \\theta|/|\\theta|$ of a random element of idlib's "
        "symmetry group applied to the module's weights, *output change* = the largest change "
        "of the module's output it causes, relative.", "tab-impl-families")


def families_summary(runs: Sequence[FamilyRun], n_seeds: int) -> dict[str, str]:
    """For the prose: the number of families (Gemma 2 with biases counted once with Gemma 2),
    how many rows agree, the range of the moves and whether every output change is round-off."""
    names = {r.family.split()[0] for r in runs}
    moves = [r.move for r in runs]
    changes = [r.change for r in runs]
    roundoff = all(format_roundoff(c).startswith("<") for c in changes)
    return {"impl-n-families": str(len(names)), "impl-n-rows": str(len(runs)),
            "impl-families-agree": f"{sum(r.check.agrees for r in runs)} of {len(runs)}",
            "impl-seeds": str(n_seeds),
            "impl-move-range": f"{min(moves):.1f} to {max(moves):.1f}",
            "impl-change": (f"below {format_roundoff(0.0)[2:]}" if roundoff else
                            f"up to {max(changes):.1e}")}


def qk_layernorm_families() -> list[str]:
    """The families whose per-head QK LayerNorm is switched by a config flag."""
    return [key for key, f in sorted(hf.FAMILIES.items())
            if f.qk_norm_flag is not None and "layernorm" in f.qk_norm_flag[1]]


def qk_layernorm_summary(runs: Sequence[FamilyRun]) -> dict[str, str]:
    """Which of those families the first table measures (with the norm off) and which not."""
    fams = qk_layernorm_families()
    names = {r.family for r in runs}
    shown = [f"`{f}`" for f in fams if f in names]
    missing = [f"`{f}`" for f in fams if f not in names]
    join = lambda xs: ", ".join(xs[:-1]) + " and " + xs[-1] if len(xs) > 1 else "".join(xs)  # noqa: E731
    return {"impl-qkln-all": join([f"`{f}`" for f in fams]),
            "impl-qkln-first": join(shown) or "none of them",
            "impl-qkln-not-first": join(missing) or "none"}


def census_twins(seed: int) -> tuple[str, list[Check]]:
    """Every census model's twin on its own module (numbered table) and the checks."""
    rows, twins = [], []
    for m in census.load_models():
        for _, c in impl.check_model_of(m.hf, m.slug, seed=seed):
            twins.append(c)
            rows.append([m.name, f"`{c.label}`", layer_label(c.config), c.unidentified,
                         c.measured_unidentified, format_gap(c.gap),
                         "yes" if c.agrees else "NO"])
    table = captioned(markdown_table(
        ["model", "family", "twin", "$U$ closed form", "$U$ measured", "gap $\\gamma$",
         "agrees"], rows, align="lllrrrl"),
        "The census models' twins on their own `transformers` modules, one row per layer "
        "type.", "tab-impl-census")
    return table, twins


def _idlib_row(cfg: AttentionConfig, seed: int) -> list[Any]:
    m, n = measure(cfg, seed=seed, method="dense"), count(cfg)
    ok = m.certified and m.rank == n.identified
    return [n.total, n.unidentified, m.n_params - m.rank, format_gap(m.gap),
            "yes" if ok else "NO"], ok


# (where, layer): idlib's layer (AttentionConfig fields, qk_norm="whole" added) or a family's
# module (impl.check keyword arguments)
WHOLE_NORM = [("idlib", dict(d_model=8, n_heads=2, head_dim=4, causal=True)),
              ("idlib", dict(d_model=8, n_heads=2, head_dim=4, rope_fraction=0.5, bias="qkvo",
                             causal=True)),
              ("idlib", dict(d_model=9, n_heads=3, n_kv_heads=1, head_dim=3, bias="kv")),
              ("olmo2", dict(d=8, H=4, G=2, k=2)), ("olmo2", dict(d=8, H=2, G=2, k=4, bias=True)),
              ("olmoe", dict(d=8, H=2, G=1, k=4, bias=True))]


def whole_norm_table(seed: int) -> tuple[str, dict[str, str]]:
    """The QK-norm over all heads: idlib's layer and the OLMo 2 / OLMoE modules (numbered)."""
    rows, ok = [], []
    for where, kw in WHOLE_NORM:
        if where == "idlib":
            cfg = AttentionConfig(**kw, qk_norm="whole")
            cells, agrees = _idlib_row(cfg, seed)
            rows.append(["idlib", layer_label(cfg)] + cells)
        else:
            c = impl.check(where, seed=seed, **kw)
            agrees = c.agrees
            rows.append([f"`{impl.SPECS[where].attention}`", layer_label(c.config),
                         count(c.config).total, c.unidentified, c.measured_unidentified,
                         format_gap(c.gap), "yes" if c.agrees else "NO"])
        ok.append(agrees)
    table = captioned(markdown_table(
        ["layer of", "layer", "$P$", "$U$ closed form", "$U$ measured", "gap $\\gamma$",
         "agrees"], rows, align="llrrrrl"),
        "QK-norm over all heads (`qk_norm=\"whole\"`) on idlib's layer and on the OLMo 2 and "
        "OLMoE modules: the count of {prf:ref}`thm-impl-whole` against the certified rank.",
        "tab-impl-whole")
    return table, {"impl-whole-agree": f"{sum(ok)} of {len(ok)}"}


MLA_LAYERS = [("deepseek_v3", dict(q_latent=6)), ("deepseek_v3", dict(q_latent=6, bias=True)),
              ("deepseek_v3", dict(q_latent=None)), ("deepseek_v2", dict(q_latent=None)),
              ("deepseek_v2", dict(q_latent=None, bias=True)),
              ("deepseek_v2", dict(q_latent=6, bias=True)),
              ("deepseek_v3", dict(d=10, H=3, kv_latent=6, q_latent=4, nope_dim=2, rope_dim=2,
                                   value_dim=3, bias=True))]


def mla_table(seeds: Sequence[int], seed: int) -> tuple[str, dict[str, str]]:
    """Multi-head latent attention on both DeepSeek modules (numbered), and the tally."""
    rows, ok = [], []
    for fam, kw in MLA_LAYERS:
        kw = {**impl.SMALL_LATENT, **kw}
        runs = [impl.check(fam, seed=s, **kw) for s in seeds]
        c = next((r for r in runs if not r.agrees), runs[0])
        change, move = group_action(impl.build(fam, seed=seed, **kw), seeds)
        parts = " + ".join(str(x.unidentified) for x in count(c.config).components
                           if x.unidentified)
        ok.append(c.agrees and format_roundoff(change).startswith("<"))
        rows.append([fam[-2:].upper(), layer_label(c.config), c.total,
                     f"{parts} = {c.unidentified}", c.measured_unidentified,
                     format_gap(c.gap), "yes" if c.agrees else "NO", f"{move:.1f}",
                     format_roundoff(change)])
    table = captioned(markdown_table(
        ["module", "layer", "$P$", "$U$ closed form", "$U$ measured", "gap $\\gamma$",
         "agrees", "move", "output change"], rows, align="llrrrrlrr"),
        "Multi-head latent attention on `DeepseekV2Attention` (V2) and `DeepseekV3Attention` "
        "(V3): the closed form as the terms $\\lambda(d_c') + \\lambda(d_c) + Hn^2 + p + Hv^2$ "
        "of the theorem, against the measured rank; *move* and *output change* for the group "
        "action of its proof (`impl.latent_action`) on the module's weights, as in "
        "{numref}`Table %s <tab-impl-families>`.", "tab-impl-mla")
    return table, {"impl-mla-agree": f"{sum(ok)} of {len(ok)}"}


def mla_full_size() -> str:
    """DeepSeek-V2-Lite (the census file) and DeepSeek-V3 (its config class's defaults) at
    full size, term by term (numbered)."""
    T = impl._transformers()
    full = [("DeepSeek-V2-Lite", next(m.config for m in census.load_models()
                                      if m.slug == "deepseek-v2-lite")),
            ("DeepSeek-V3", hf.config_from_hf(T.DeepseekV3Config().to_dict()))]
    rows = []
    for name, cfg in full:
        n = count(cfg)
        parts = {x.name: x.unidentified for x in n.components}
        rows.append([name, f"{n.total:,}", f"{parts.get('q_latent', 0):,}",
                     f"{parts['kv_latent']:,}", f"{parts['qk'] + parts['vo']:,}",
                     f"{parts['rope']:,}", f"{n.unidentified:,}",
                     format_share(n.unidentified, n.total),
                     "hold" if census.frequencies_generic(cfg)[0] else "FAIL"])
    return captioned(markdown_table(
        ["model", "$P$ per layer", "$\\lambda(d_c')$", "$\\lambda(d_c)$", "$H(n^2 + v^2)$",
         "$p$", "$U$ per layer", "$U/P$", "angles (a), (b)"], rows, align="lrrrrrrrl"),
        "Multi-head latent attention at full size, term by term ({prf:ref}`thm-impl-mla`), and "
        "conditions (a), (b) of {prf:ref}`thm-census-gqa-rope` on the angles of the RoPE part.",
        "tab-impl-mla-full")


SOFTCAP = [("no RoPE, biases $b_Q$ $b_K$ $b_V$ $b_O$", dict(d_model=6, n_heads=2, bias="qkvo", causal=True)),
           ("half rotated, biases $b_Q$ $b_K$ $b_V$ $b_O$", dict(d_model=6, n_heads=2, head_dim=4,
                                                rope_fraction=0.5, bias="qkvo", causal=True)),
           ("grouped, half rotated, $b_K$", dict(d_model=8, n_heads=4, n_kv_heads=2,
                                                head_dim=4, rope_fraction=0.5, bias="k",
                                                causal=True))]
SOFTCAP_NO_KEY_BIAS = [dict(d_model=6, n_heads=2),
                       dict(d_model=6, n_heads=2, head_dim=4, rope_fraction=0.5),
                       dict(d_model=8, n_heads=4, n_kv_heads=2, head_dim=4, rope_fraction=1.0,
                            bias="qvo")]


def softcap_table(seed: int) -> tuple[str, dict[str, str]]:
    """Capped against uncapped scores on idlib's layer, with a key bias (numbered)."""
    rows, ok, drops = [], [], []
    for name, kw in SOFTCAP:
        counts = []
        for cap in (None, 50.0):
            c = AttentionConfig(**kw, softcap=cap)
            cells, agrees = _idlib_row(c, seed)
            ok.append(agrees)
            counts.append(cells[1])
            rows.append([name, "-" if cap is None else f"{cap:g}"] + cells)
        drops.append(counts[0] - counts[1])
    table = captioned(markdown_table(
        ["layer", "cap", "$P$", "$U$ closed form", "$U$ measured", "gap $\\gamma$", "agrees"],
        rows, align="llrrrrl"),
        "Soft-capped scores ($s_{\\max} = 50$) against the same layer uncapped, on idlib's layer: "
        "{prf:ref}`thm-impl-softcap`'s count against the certified rank.", "tab-impl-softcap")
    return table, {"impl-softcap-agree": f"{sum(ok)} of {len(ok)}",
                   "impl-softcap-drops": ", ".join(str(x) for x in drops)}


def softcap_no_key_bias_table(seed: int) -> str:
    """Capped and uncapped layers without a key bias: the same count (numbered)."""
    rows = []
    for kw in SOFTCAP_NO_KEY_BIAS:
        for cap in (None, 50.0):
            c = AttentionConfig(**kw, causal=True, softcap=cap)
            cells, _ = _idlib_row(c, seed)
            rows.append([layer_label(c), "-" if cap is None else f"{cap:g}"] + cells[1:])
    return captioned(markdown_table(
        ["layer", "cap", "$U$ closed form", "$U$ measured", "gap $\\gamma$", "agrees"], rows,
        align="llrrrl"), "Layers without a key bias, capped and uncapped: the same count.",
        "tab-impl-softcap-nobias")


EPS_VALUES = (0.0, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2)


@dataclass(frozen=True)
class EpsStudy:
    """Singular values of the real Qwen3 module against its QK-norm's epsilon (delta)."""

    deltas: tuple[float, ...]
    n_scale: int                      # G(m + 1)
    scale: tuple[tuple[float, ...], ...]   # per delta: the n_scale values sigma / sigma_1
    smallest_identified: tuple[float, ...]   # per delta: sigma_I / sigma_1
    extra_rank: tuple[int, ...]       # per delta: measured rank - closed-form I


def eps_study(seed: int, deltas: Sequence[float] = EPS_VALUES) -> EpsStudy:
    scale, low, extra = [], [], []
    n_scale = 0
    for delta in deltas:
        built = impl.build("qwen3", seed=seed, norm_eps=delta, d=8, H=2, G=1, k=4)
        m, identified = impl.measure(built, seed), count(built.config).identified
        n_scale = built.config.n_kv_heads * (built.config.group_size + 1)
        sv = m.singular_values / m.singular_values[0]
        scale.append(tuple(float(x) for x in sv[identified:identified + n_scale]))
        low.append(float(sv[identified - 1]))
        extra.append(int(m.rank - identified))
    return EpsStudy(tuple(deltas), n_scale, tuple(scale), tuple(low), tuple(extra))


def eps_lines(study: EpsStudy, at: float = 1e-6) -> tuple[list[str], dict[str, str]]:
    """What the cell prints under the figure, and the numbers the prose pastes."""
    i = study.deltas.index(at)
    ratios = [x / at for x in study.scale[i]]
    decades = math.log10(study.smallest_identified[i] / max(study.scale[i]))
    # log-log slope of each scale direction over the deltas up to 1e-4 (least squares)
    pts = [(math.log10(d), j) for j, d in enumerate(study.deltas) if 0 < d <= 1e-4]
    slopes = []
    for k in range(study.n_scale):
        xs = [x for x, _ in pts]
        ys = [math.log10(study.scale[j][k]) for _, j in pts]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slopes.append(sum((x - mx) * (y - my) for x, y in zip(xs, ys))
                      / sum((x - mx) ** 2 for x in xs))
    lines = ["extra rank over the closed form I: "
             + ", ".join(f"{d:g}: {e}" for d, e in zip(study.deltas, study.extra_rank)),
             f"sigma / (delta sigma_1) at delta = {at:g}: "
             + ", ".join(f"{r:.2f}" for r in ratios),
             f"at delta = {at:g} the largest scale direction is {decades:.1f} decades below "
             f"sigma_I",
             "log-log slopes of the scale directions up to delta = 1e-4: "
             + ", ".join(f"{x:.2f}" for x in slopes)]
    return lines, {"impl-eps-n": str(study.n_scale),
                   "impl-eps-slopes": ", ".join(f"{x:.2f}" for x in slopes),
                   "impl-eps-ratios": f"{min(ratios):.2f} to {max(ratios):.2f}",
                   "impl-eps-decades": f"{decades:.1f}"}


def draw_eps(ax: Any, study: EpsStudy, colors: dict[str, str]) -> None:
    """The scale directions' singular values and sigma_I against delta (log-log), with the
    line sigma = delta sigma_1 for reference."""
    pos = [(i, d) for i, d in enumerate(study.deltas) if d > 0]
    xs = [d for _, d in pos]
    for j in range(study.n_scale):
        ax.loglog(xs, [study.scale[i][j] for i, _ in pos], "o-", color=colors["unidentified"],
                  label="scale directions" if j == 0 else None)
    ax.loglog(xs, [study.smallest_identified[i] for i, _ in pos], "s--",
              color=colors["closed_form"], label=r"$\sigma_I$, smallest identified")
    ax.loglog(xs, xs, ":", color=colors["baseline"], label=r"$\sigma = \delta\,\sigma_1$")
    ax.set_xlabel(r"norm epsilon $\delta$")
    ax.set_ylabel(r"$\sigma / \sigma_1$")
    ax.legend()
