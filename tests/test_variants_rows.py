"""The variant rows (idlib.variants): every field in exactly one row, every capability answered,
the allow-lists honoured (structured route, symmetry, sdpa, twins), and no variant name compared
as a string outside the rows."""
from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest
import torch

from idlib import variants
from idlib.attention import forward, forward_sdpa, init_params, param_shapes, random_inputs
from idlib.cli import LAYER_FLAGS
from idlib.config import AttentionConfig, ConfigError
from idlib.counting import count
from idlib.fastrank import StructureError, applicable, structured_rank
from idlib.rank import measure
from idlib.symmetry import chart, permute_heads

ROOT = Path(__file__).resolve().parents[1]

# one layer per row, with the row active (and its neighbours plain where they can be)
EXAMPLES = {
    "heads": dict(d_model=8, n_heads=4, n_kv_heads=2),
    "rope": dict(d_model=8, n_heads=2, rope_fraction=0.5),
    "bias": dict(d_model=8, n_heads=2, bias="qkvo"),
    "causal": dict(d_model=8, n_heads=2, causal=True),
    "qk_norm": dict(d_model=8, n_heads=2, qk_norm="gain"),
    "latent": dict(d_model=8, n_heads=2, kv_latent=3),
    "centred": dict(d_model=8, n_heads=2, input_centered=True),
    "stack": dict(d_model=8, n_heads=2, n_layers=2, kv_share=2),
    "softcap": dict(d_model=8, n_heads=2, softcap=2.0),
    "alibi": dict(d_model=8, n_heads=2, alibi=True, causal=True),
    "sinks": dict(d_model=8, n_heads=2, sinks=True, bias="qkvo"),
    "gate": dict(d_model=8, n_heads=2, output_gate=True, bias="qv"),
}


def test_every_field_belongs_to_exactly_one_row():
    owners = {f.name: [row.name for row in variants.ROWS if f.name in row.fields]
              for f in fields(AttentionConfig)}
    assert {name: rows for name, rows in owners.items() if len(rows) != 1} == {}
    declared = [name for row in variants.ROWS for name in row.fields]
    assert sorted(declared) == sorted(f.name for f in fields(AttentionConfig))


def test_every_row_answers_every_capability():
    for row in variants.ROWS:
        config = AttentionConfig(**EXAMPLES[row.name])
        assert row.active(config), row.name
        answers = {cap: row.supports(cap, config) for cap in variants.CAPABILITIES}
        assert all(isinstance(a, bool) for a in answers.values())
        with pytest.raises(ValueError, match="capability='flying' must be one of"):
            row.supports("flying", config)
    assert set(EXAMPLES) == {row.name for row in variants.ROWS}


def test_a_row_declaring_an_unknown_stage_is_refused():
    with pytest.raises(ValueError, match=r"variant 'x': unknown stage, phase or capability \['fly'\]"):
        variants.Variant("x", "", {}, lambda c: True, forward={"fly": lambda f: None})


def test_every_field_has_a_command_line_flag():
    assert sorted(name for _, name, _, _ in LAYER_FLAGS) == sorted(f.name for f in fields(AttentionConfig))


def test_the_registry_orders_the_text_and_the_components():
    c = AttentionConfig(d_model=8, n_heads=4, n_kv_heads=2, rope_fraction=1.0, bias="qkvo",
                        causal=True, qk_norm="gain", sinks=True)
    assert variants.text(c) == "d=8 H=4 G=2 k=2 v=2 r=2 b_Q b_K b_V b_O causal QK-norm gain sinks"
    assert [x.name for x in count(c).components] == ["qk", "vo", "b_Q", "b_K", "b_V", "b_O", "g_QK",
                                                      "sinks"]
    assert list(param_shapes(c)) == ["W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "g_Q",
                                     "g_K", "sinks"]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_structured_route_takes_a_layer_only_when_every_row_declares_it(name):
    config = AttentionConfig(**EXAMPLES[name])
    declared = variants.supports(config, "structured")
    assert (applicable(config) is None) == (declared and config.n_heads * config.value_dim <= config.d_model)
    if not declared:
        rows = variants.named(variants.unsupported(config, "structured"))
        assert applicable(config).startswith(f"variant(s) {rows}: no structured Jacobian blocks")
        params = init_params(config, 0)
        with pytest.raises(StructureError, match="no structured Jacobian blocks"):
            structured_rank(config, params, random_inputs(config, 4, 10, 0))


def test_new_variants_never_take_the_structured_route():
    for kw in (dict(alibi=True), dict(sinks=True), dict(output_gate=True)):
        config = AttentionConfig(d_model=8, n_heads=2, **kw)
        assert applicable(config) is not None
        with pytest.raises(StructureError):
            measure(config, method="structured")
        assert measure(config, method="auto").method == "dense"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_forward_sdpa_equals_forward_on_every_row_declaring_it(name):
    config = AttentionConfig(**EXAMPLES[name])
    params, X = init_params(config, 1), random_inputs(config, 3, 7, 1)
    if not variants.supports(config, "sdpa"):
        with pytest.raises(ValueError, match="no scaled_dot_product_attention form"):
            forward_sdpa(config, params, X)
        return
    assert (forward_sdpa(config, params, X) - forward(config, params, X)).abs().max() < 1e-12


def test_forward_sdpa_takes_explicit_frequencies():
    config = AttentionConfig(d_model=8, n_heads=2, rope_fraction=1.0, alibi=True, causal=True)
    params, X = init_params(config, 0), random_inputs(config, 2, 6, 0)
    freqs = torch.tensor([0.3, 0.3], dtype=torch.float64)
    out = forward(config, params, X, freqs)
    assert (forward_sdpa(config, params, X, freqs) - out).abs().max() < 1e-12
    assert (forward(config, params, X) - out).abs().max() > 1e-3


def test_forward_sdpa_refuses_softcap_by_its_row():
    config = AttentionConfig(d_model=8, n_heads=2, softcap=0.5)
    with pytest.raises(ValueError, match=r"^forward_sdpa: the variant\(s\) softcap have no"):
        forward_sdpa(config, init_params(config, 0), random_inputs(config, 1, 4, 0))


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_symmetry_and_head_permutations_follow_the_rows(name):
    config = AttentionConfig(**EXAMPLES[name])
    params, X = init_params(config, 2), random_inputs(config, 2, 6, 2)
    if variants.supports(config, "symmetry"):
        chart(config, params)
    else:
        with pytest.raises(NotImplementedError, match="is not implemented here"):
            chart(config, params)
    perm = [1, 0] if config.n_heads == 2 else [2, 3, 0, 1]
    if variants.supports(config, "permute_heads"):
        moved = permute_heads(config, params, perm)
        assert (forward(config, moved, X) - forward(config, params, X)).abs().max() < 1e-12
    else:
        with pytest.raises(ValueError, match="depend on the head index"):
            permute_heads(config, params, perm)


def test_alibi_slopes_follow_the_head_index():
    """The reason ALiBi declares no head permutation: swapping heads changes the output."""
    config = AttentionConfig(d_model=8, n_heads=2, alibi=True)
    params, X = init_params(config, 0), random_inputs(config, 2, 6, 0)
    swapped = {n: p.flip(0) if n in ("W_Q", "W_K", "W_V", "W_O") else p for n, p in params.items()}
    assert (forward(config, swapped, X) - forward(config, params, X)).abs().max() > 1e-3


def test_refusals_name_the_rule():
    cases = [(dict(sinks=True, n_layers=2), "sinks=True is derived for one layer"),
             (dict(sinks=True, qk_norm="whole"), "sinks=True with qk_norm='whole' is not derived"),
             (dict(sinks=True, head_dim=9), "sinks=True needs head_dim=9 and value_dim=9 at most"),
             (dict(output_gate=True, value_dim=9), "output_gate=True needs value_dim=9 at most"),
             (dict(output_gate=True, kv_latent=3), "output_gate=True is derived for one layer")]
    for kw, message in cases:
        with pytest.raises(ConfigError, match="^" + re.escape(message)):
            count(AttentionConfig(d_model=8, n_heads=2, **kw))


# Names a variant takes in a field (qk_norm modes); comparing them belongs in the rows.
MODE_NAMES = ("plain", "gain", "whole", "layernorm", "layernorm_shared")
COMPARISON = re.compile(r"qk_norm\s*(==|!=|\bin\b|\.startswith)|"
                        r"(==|!=)\s*[\"'](" + "|".join(MODE_NAMES) + r")[\"']")


def test_no_variant_name_is_compared_outside_the_rows():
    offenders = []
    for path in sorted((ROOT / "idlib").rglob("*.py")):
        if "variants" in path.relative_to(ROOT / "idlib").parts[:1]:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if COMPARISON.search(code):
                offenders.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert offenders == []
