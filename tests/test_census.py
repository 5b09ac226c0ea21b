"""The census of published models (idlib.studies.census, idlib/data/configs): loading, counts, twins."""
from __future__ import annotations

import json
import re

import pytest

from idlib.studies import census
from idlib.config import ConfigError
from idlib.counting import count, unidentified_ratio_mha
from idlib.config import RULES, AttentionConfig
from idlib.report.tables import layer_text
from idlib.config import LatentAttentionConfig
from idlib.hf import config_from_file, config_from_hf

MODELS = {m.slug: m for m in census.load_models()}
ROWS = {r["slug"]: r for r in census.census_rows()}

# slug -> (P per layer, U per layer, printed shares: layer, without RoPE, grouping, QK-norm)
EXPECTED = {
    "bert-base": (2362368, 99840, ("4.23%", "-", "-", "-")),
    "deepseek-v2-lite": (13763072, 655681, ("4.76%", "-", "-", "-")),
    "falcon-7b": (41877504, 4160, ("0.0099%", "0.02%", "0.36%", "-")),
    "gemma-2-9b": (44040192, 526336, ("1.20%", "2.38%", "1.79%", "-")),
    "gemma-3-4b": (15729152, 262284, ("1.67%", "1.67%", "2.50%", "1.67%")),
    "gpt-neox-20b": (151019520, 933888, ("0.62%", "0.79%", "-", "-")),
    "gpt2": (2362368, 99840, ("4.23%", "-", "-", "-")),
    "llama-2-7b": (67108864, 528384, ("0.79%", "1.56%", "-", "-")),
    "llama-3-8b": (41943040, 132096, ("0.31%", "0.62%", "0.79%", "-")),
    "mistral-7b": (41943040, 132096, ("0.31%", "0.62%", "0.79%", "-")),
    "mixtral-8x7b": (41943040, 132096, ("0.31%", "0.62%", "0.79%", "-")),
    "olmo-2-7b": (67117056, 526338, ("0.78%", "0.79%", "-", "0.79%")),
    "phi-3-mini": (37748736, 297984, ("0.79%", "1.56%", "-", "-")),
    "qwen2.5-7b": (29364736, 66048, ("0.22%", "0.45%", "0.90%", "-")),
    "qwen3-8b": (41943296, 131176, ("0.31%", "0.31%", "0.78%", "0.31%")),
    "smollm2-1.7b": (16777216, 133120, ("0.79%", "1.56%", "-", "-")),
    "bloom-7b1": (67125248, 1056768, ("1.57%", "-", "-", "-")),
    "mpt-7b": (67108864, 1048576, ("1.56%", "-", "-", "-")),
    "gpt-oss-20b": (26550144, 33280, ("0.13%", "0.25%", "0.56%", "-")),
}
# models whose layers differ: slug -> (layers, counted, [(n layers, P, U) per counted type], shares)
BY_TYPE = {
    "command-r7b": (32, 32, [(24, 41943040, 132096), (8, 41943040, 262144)],
                    ("0.39%", "0.62%", "0.98%", "-")),
    "llama-4-scout": (48, 48, [(36, 62914560, 131632), (12, 62914560, 262144)],
                      ("0.26%", "0.34%", "0.78%", "0.26%")),
    "qwen3-next-80b-a3b": (48, 12, [(12, 27263488, 754)], ("0.0028%", "0.0029%", "0.01%", "0.27%")),
    "smollm3-3b": (36, 36, [(27, 10485760, 66048), (9, 10485760, 131072)],
                   ("0.78%", "1.25%", "1.96%", "-")),
}


def test_every_shipped_model_is_in_the_table_with_a_source():
    assert sorted(MODELS) == sorted(set(EXPECTED) | set(BY_TYPE))
    for m in MODELS.values():
        assert re.fullmatch(r"[\w.-]+/[\w.-]+/config\.json( \(text_config\))?", m.source), m.source
        assert m.checked_against and m.name
        assert m.confirmed == (not m.unconfirmed_fields)
    assert {s for s, m in MODELS.items() if not m.confirmed} == {
        "deepseek-v2-lite", "gemma-3-4b", "gpt-oss-20b", "llama-4-scout", "qwen3-next-80b-a3b",
        "smollm3-3b", "command-r7b"}


@pytest.mark.parametrize("slug", sorted(EXPECTED))
def test_counts_and_printed_shares(slug):
    r, (P, U, shares) = ROWS[slug], EXPECTED[slug]
    assert (r["per_layer_total"], r["per_layer_unidentified"]) == (P, U)
    assert (r["total"], r["unidentified"], r["identified"]) == (r["layers"] * P, r["layers"] * U,
                                                               r["layers"] * (P - U))
    assert r["share"] == U / P
    assert census.table_cells(r)[5:] == list(shares)


@pytest.mark.parametrize("slug", sorted(EXPECTED))
def test_every_shipped_config_is_what_count_reads(slug):
    """(A model whose layers differ has no single layer: config_from_hf refuses it, naming the types.)"""
    m = MODELS[slug]
    raw = json.loads(m.path.read_text())
    assert m.status == "exact" and config_from_file(m.path) == m.config == config_from_hf(raw)


@pytest.mark.parametrize("slug", sorted(BY_TYPE))
def test_models_whose_layers_differ_are_counted_type_by_type(slug):
    r, (L, counted, types, shares) = ROWS[slug], BY_TYPE[slug]
    assert (r["layers"], r["counted_layers"]) == (L, counted)
    assert [(len(t["layers"]), t["per_layer_total"], t["per_layer_unidentified"]) for t in r["types"]] \
        == types
    assert r["total"] == sum(n * P for n, P, _ in types)
    assert r["unidentified"] == sum(n * U for n, _, U in types)
    assert r["per_layer_total"] is None and census.table_cells(r)[2] == "by type"
    assert census.table_cells(r)[5:] == list(shares)
    assert MODELS[slug].config is None and MODELS[slug].status == "exact"


def test_the_2026_rows_by_hand():
    # gpt-oss-20b: 8 groups of 8 heads of 64, full RoPE: 64 commutant dims per group; GL(64) on
    # VO; sinks make the value bias identified, full RoPE the key bias
    assert 8 * (64 + 64 ** 2) == EXPECTED["gpt-oss-20b"][1]
    # Command R7B / SmolLM3: RoPE layers k + k^2 per group, NoPE layers 2 k^2 per group
    assert (8 * (128 + 128 ** 2), 8 * 2 * 128 ** 2) == tuple(U for _, _, U in BY_TYPE["command-r7b"][2])
    assert (4 * (128 + 128 ** 2), 4 * 2 * 128 ** 2) == tuple(U for _, _, U in BY_TYPE["smollm3-3b"][2])
    # Llama 4 Scout: RoPE layers with the L2 QK-norm: 64 planes (U(1) each) + m + 1 = 6 scales
    assert 8 * (64 + 6 + 128 ** 2) == BY_TYPE["llama-4-scout"][2][0][2]
    # Qwen3-Next: per group m + 1 = 9 scales; gains: 32 planes + 192 fixed dims; the gate leaves
    # only the diagonal of GL(256) on VO
    assert 2 * 9 + (32 + 192) + 2 * 256 == BY_TYPE["qwen3-next-80b-a3b"][2][0][2]
    # ALiBi changes nothing: BLOOM is GPT-2's count at its size, MPT Llama 2's without RoPE
    assert EXPECTED["bloom-7b1"][1] == 2 * 32 * 128 ** 2 + 2 * 32 * 128
    assert EXPECTED["mpt-7b"][1] == 2 * 32 * 128 ** 2


def test_gpt2_small_by_hand():
    """d = 768, 12 heads of 64, biases on q, k, v, o, no RoPE, no grouping: per head GL(k) on QK
    and on VO (k^2 each); b_K invisible to softmax (k per head); b_V absorbed by b_O (v per head)."""
    d, H, k = 768, 12, 64
    assert (4 * d * d + 3 * H * k + d, 2 * H * k * k + 2 * H * k) == EXPECTED["gpt2"][:2]
    assert ROWS["gpt2"]["layers"] == 12 and ROWS["gpt2"]["share_without_rope"] is None


def test_rotary_models_by_hand():
    # Llama 2 7B: 32 heads of 128, full RoPE with distinct frequencies: k + k^2 per head
    assert 32 * (128 + 128 ** 2) == EXPECTED["llama-2-7b"][1]
    assert ROWS["llama-2-7b"]["share_without_rope"] == unidentified_ratio_mha(32) == 1 / 64
    # Falcon 7B: one key/value group of 64: RoPE commutant 64, GL(64) on VO
    c = MODELS["falcon-7b"].config
    assert (c.n_heads, c.n_kv_heads, c.head_dim, c.rotary_dim) == (71, 1, 64, 64)
    assert 64 + 64 ** 2 == EXPECTED["falcon-7b"][1]
    # Qwen2.5 7B: 4 groups of 128, biases q, k, v: no key-bias freedom under full RoPE, the value
    # bias moves the output in all G v = 512 <= d directions
    assert 4 * (128 + 128 ** 2) == EXPECTED["qwen2.5-7b"][1]
    # GPT-NeoX 20B: 96-dim heads, 24 rotated: 2 * 12 + 72^2 on QK, 96^2 on VO, 72 key-bias and
    # 96 value-bias dims per head
    assert 64 * (24 + 72 ** 2 + 96 ** 2 + 72 + 96) == EXPECTED["gpt-neox-20b"][1]
    # Gemma 3 4B: QK-norm with gains: per group m + 1 = 3 scalings, GL(256) on VO; the gains
    # lose one dim per rotating plane (128)
    assert 4 * (3 + 256 ** 2) + 128 == EXPECTED["gemma-3-4b"][1]
    # OLMo 2 7B: QK-norm over all 32 heads together, gains per dim: 2 scales, 64 gain
    # exchanges per group (one per plane), GL(128) on VO; gains add (32 + 32) * 128 parameters
    assert (4 * 4096 ** 2 + 64 * 128, 2 + 32 * (64 + 128 ** 2)) == EXPECTED["olmo-2-7b"][:2]


def test_design_effects():
    assert ROWS["llama-3-8b"]["share_without_grouping"] == ROWS["llama-2-7b"]["share"]
    assert ROWS["qwen3-8b"]["share_without_qk_norm"] == ROWS["llama-3-8b"]["share"]
    c = MODELS["gpt-neox-20b"].config
    assert (c.rotary_dim, c.bias) == (24, "qkvo")
    assert count(c.replace(rope_fraction=1.0)).ratio < ROWS["gpt-neox-20b"]["share"] \
        < ROWS["gpt-neox-20b"]["share_without_rope"]


def test_statuses():
    assert {s for s, m in MODELS.items() if m.status != "exact"} == set()
    assert MODELS["olmo-2-7b"].config.qk_norm == "whole"
    assert isinstance(MODELS["deepseek-v2-lite"].config, LatentAttentionConfig)
    assert MODELS["qwen3-8b"].config.qk_norm == MODELS["gemma-3-4b"].config.qk_norm == "gain"


def test_format_and_json():
    rows = census.census_rows()
    assert json.loads(json.dumps(rows, allow_nan=False)) == rows
    lines = census.format_census(rows).splitlines()
    assert lines[0].split("  ")[0].strip() == "model" and [c for c in lines[0].split("  ") if c] == \
        [c.rjust(len(c)) for c in lines[0].split("  ") if c]
    header = [c.strip() for c in re.split(r"\s{2,}", lines[0].strip())]
    assert header == list(census.CENSUS_COLUMNS)
    gpt2 = next(line for line in lines if line.startswith("GPT-2"))
    assert re.split(r"\s{2,}", gpt2.strip()) == ["GPT-2 (124M)", "12", "2,362,368", "28,348,416",
                                                  "99,840", "4.23%", "-", "-", "-"]
    assert not any(": approximate:" in line or ": not representable:" in line for line in lines)
    deepseek = next(line for line in lines if line.startswith("DeepSeek-V2-Lite"))
    assert re.split(r"\s{2,}", deepseek.strip()) == ["DeepSeek-V2-Lite *", "27", "13,763,072",
                                                      "371,602,944", "655,681", "4.76%", "-", "-", "-"]


@pytest.mark.parametrize("slug, index", sorted(
    (s, i) for s, m in MODELS.items() for i, t in enumerate(m.model.counted)
    if not isinstance(t.config, LatentAttentionConfig)))
def test_twin_keeps_the_pattern(slug, index):
    c = MODELS[slug].model.counted[index].config
    t = census.twin(c)
    limit = census.TWIN_LARGE_PARAMS if c.output_gate else census.TWIN_MAX_PARAMS
    assert t.d_model <= 16 and count(t).total <= limit
    assert t.group_size == min(c.group_size, 8)
    assert (t.n_kv_heads == t.n_heads) == (c.n_kv_heads == c.n_heads)
    sizes = set(census.SIZE_FIELDS) | {"rope_base", "kv_latent"}    # what a twin may rescale
    kept = [name for name in RULES if name not in sizes]
    assert {n: getattr(t, n) for n in kept} == {n: getattr(c, n) for n in kept}


def test_a_twin_keeps_every_variant_field():
    """Every field that is not a size is carried: Gemma 2's soft-cap (left out before), sinks,
    ALiBi and the gate too; a variant without the twin capability has no twin."""
    gemma2 = MODELS["gemma-2-9b"].config
    assert gemma2.softcap == 50.0 and census.twin(gemma2).softcap == 50.0
    layer = AttentionConfig(d_model=64, n_heads=8, n_kv_heads=2, rope_fraction=1.0, bias="qkvo",
                            sinks=True, causal=True)
    t = census.twin(layer)
    assert (t.sinks, t.bias, t.group_size, t.causal) == (True, "qkvo", 4, True)
    gated = census.twin(AttentionConfig(d_model=64, n_heads=8, output_gate=True, alibi=True))
    assert gated.output_gate and gated.alibi


@pytest.mark.parametrize("slug, twin, identified, unidentified", [
    ("gpt2", "d=8 H=4 G=4 k=2 v=2 b_Q b_K b_V b_O causal", 240, 48),   # 2 * 4 * 2^2 + 4 * 2 + 4 * 2
    ("qwen2.5-7b", "d=14 H=7 G=1 k=2 v=2 r=2 b_Q b_K b_V causal", 460, 6),
    ("gemma-3-4b", "d=10 H=4 G=2 k=2 v=2 r=2 causal QK-norm gain", 229, 15)])
def test_twins_agree_with_measured_rank(slug, twin, identified, unidentified):
    r = census.twin_check(MODELS[slug].config, seed=0)
    assert layer_text(r["twin"]) == twin
    assert r["certified"] and r["gap"] >= 1e6 and r["agrees"]
    assert (r["rank"], r["closed_form_identified"]) == (identified, identified)
    assert (r["measured_unidentified"], r["closed_form_unidentified"]) == (unidentified, unidentified)
