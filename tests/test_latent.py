"""Multi-head latent attention (DeepSeek V2 / V3): the closed form, its rules, and the real modules."""
import json
import re
from pathlib import Path

import pytest
import torch

from idlib import implementations as impl
from idlib.attention import latent_param_shapes, n_params
from idlib.cli import main
from idlib.config import ConfigError, LatentAttentionConfig
from idlib.counting import check_derived_latent, count

V2_LITE = LatentAttentionConfig(d_model=2048, n_heads=16, kv_latent=512, nope_dim=128, rope_dim=64,
                                value_dim=128)
V3 = V2_LITE.replace(d_model=7168, n_heads=128, q_latent=1536)
SMALL = impl.SMALL_LATENT


def test_v2_lite_by_hand():
    """Latent: 1 + C(C-1)/2 + C (scale, O(C), gain); per head n^2 + v^2; the RoPE commutant p."""
    C, H, n, v, p, d = 512, 16, 128, 128, 64, 2048
    c = count(V2_LITE)
    assert {x.name: (x.total, x.unidentified) for x in c.components} == {
        "kv_latent": (d * C + C, 1 + C * (C - 1) // 2 + C),
        "qk": (H * n * (d + C), H * n * n), "rope": (H * p * d + d * p, p),
        "vo": (H * v * (C + d), H * v * v)}
    assert (c.total, c.unidentified) == (13_763_072, 655_681) == (n_params(V2_LITE), 655_681)


def test_v3_by_hand():
    c = count(V3)
    CQ = 1536
    assert c.component("q_latent").unidentified == 1 + CQ * (CQ - 1) // 2 + CQ
    assert c.component("qk").total == 128 * 128 * (CQ + 512)
    assert (c.total, c.unidentified) == (187_107_328, 5_506_114)
    with_bias = count(V3.replace(bias=True))
    assert with_bias.total == c.total + CQ + 512 + 64 + 7168
    assert with_bias.unidentified == c.unidentified        # b_DQ, b_DKV, b_O, b_KR identified


@pytest.mark.parametrize("change, message", [
    (dict(rope_dim=3), "rope_dim=3 must be even"),
    (dict(kv_latent=0), "kv_latent=0 must be at least 1"),
    (dict(q_latent=2.5), "q_latent=2.5 must be an integer"),
    (dict(bias="yes"), "bias='yes' must be true or false"),
    (dict(kv_latent=1), "kv_latent=1 must be in 2..d_model=2048"),
    (dict(q_latent=4096), "q_latent=4096 must be in 2..d_model=2048"),
    (dict(kv_latent=2048, value_dim=8, nope_dim=8, n_heads=2), "kv_latent=2048 must be at most the 32 dims"),
    (dict(nope_dim=600), "nope_dim=600 must be at most 512"),
    (dict(value_dim=600), "value_dim=600 must be at most 512"),
])
def test_latent_rules(change, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        count(V2_LITE.replace(**change))


def test_module_parameters_are_the_shapes_counted():
    for q in (6, None):
        for bias in (False, True):
            built = impl.build("deepseek_v3", **SMALL, q_latent=q, bias=bias)
            own = {k: tuple(v.shape) for k, v in built.module.named_parameters()}
            assert own == latent_param_shapes(built.config)
            assert sum(v.numel() for v in built.module.parameters()) == count(built.config).total


@pytest.mark.parametrize("family", ["deepseek_v2", "deepseek_v3"])
@pytest.mark.parametrize("q_latent, bias, unidentified", [(6, False, 78), (6, True, 78), (None, False, 56),
                                                         (None, True, 56)])
def test_real_module_agrees(family, q_latent, bias, unidentified):
    """22 + 16 + 2 (9 + 9) + 4 = 78 with a query latent of 6; 16 + 36 + 4 = 56 without."""
    c = impl.check(family, **SMALL, q_latent=q_latent, bias=bias)
    assert c.agrees and c.certified and c.gap > 1e6
    assert c.unidentified == c.measured_unidentified == unidentified


def test_wider_heads_and_three_heads_agree():
    c = impl.check("deepseek_v3", d=10, H=3, kv_latent=6, q_latent=4, nope_dim=2, rope_dim=2,
                   value_dim=3, bias=True)
    assert (c.total, c.unidentified, c.measured_unidentified) == (380, 74, 74) and c.agrees


@pytest.mark.parametrize("family", ["deepseek_v2", "deepseek_v3"])
def test_group_action_leaves_the_real_output_unchanged(family):
    built = impl.build(family, **SMALL, q_latent=6, bias=True)
    r = impl.symmetry_check(built, seed=1)
    assert r["move"] > 0.3 and r["change"] < 1e-12


def test_latent_action_is_not_a_no_op_on_each_part():
    """Breaking the action (no inverse on the query side) changes the output: the test can fail."""
    built = impl.build("deepseek_v3", **SMALL, q_latent=6)
    moved = impl.latent_action(built, seed=0)
    moved["q_b_proj.weight"] = impl.parameters(built)["q_b_proj.weight"]
    X = impl.inputs(built.config, 0, n_sequences=2)
    with torch.no_grad():
        out, out2 = impl.forward(built, X), impl.forward(built, X, moved)
    assert float((out2 - out).abs().max() / out.abs().max()) > 1e-3


def test_v2_rotation_in_complex128():
    """DeepseekV2's own apply_rotary_emb rounds to complex64; idlib evaluates the same product in
    complex128 (the outputs agree to float32 round-off, not to float64)."""
    built = impl.build("deepseek_v2", **SMALL, q_latent=6)
    X = impl.inputs(built.config, 0, n_sequences=2)
    n = X.shape[1]
    with torch.no_grad():
        ours = impl.forward(built, X)
        theirs = impl._forward(built, X, None, torch.arange(n)[None].expand(2, n), impl._mask(n, True))
    assert 1e-12 < float((ours - theirs).abs().max()) < 1e-5


def test_latent_norm_eps_lifts_the_two_scale_directions():
    built = impl.build("deepseek_v3", **SMALL, q_latent=6, norm_eps=1e-2)
    m = impl.measure(built)
    assert m.n_params - m.rank == count(built.config).unidentified - 2


def test_command_line(capsys, tmp_path):
    path = Path(impl.__file__).parent.parent / "data" / "configs" / "deepseek-v2-lite.json"
    assert main(["count", "--config", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert (report["total"], report["unidentified"], err) == (13_763_072, 655_681, "")
    assert report["config"]["kv_latent"] == 512 and report["config"]["q_latent"] is None
    assert main(["verify", "--config", str(path), "--implementation", "transformers"]) == 0
    out, _ = capsys.readouterr()
    assert "family deepseek_v2" in out and out.rstrip().endswith("verdict: AGREES")
    assert "unidentified           56           56" in out


def test_check_derived_latent_accepts_the_shipped_models():
    check_derived_latent(V2_LITE)
    check_derived_latent(V3)


@pytest.mark.parametrize("change, message", [
    (dict(kv_latent=1), "kv_latent=1 must be in 2..d_model=2048 (the count for a latent wider than "
                        "the model, or of one dimension, is not derived)"),
    (dict(q_latent=1), "q_latent=1 must be in 2..d_model=2048"),
    (dict(kv_latent=2049), "kv_latent=2049 must be in 2..d_model=2048"),
    (dict(n_heads=1, nope_dim=8, value_dim=8, rope_dim=8, kv_latent=17),
     "kv_latent=17 must be at most the 16 dims its up projections write (the count for a latent "
     "they cannot all see is not derived)"),
    (dict(n_heads=1, nope_dim=8, value_dim=8, rope_dim=8, kv_latent=16, q_latent=17),
     "q_latent=17 must be at most the 16 dims its up projections write"),
    (dict(nope_dim=513), "nope_dim=513 must be at most 512 (the query input and kv_latent): the count "
                         "for a head wider than what it reads is not derived"),
    (dict(value_dim=513), "value_dim=513 must be at most 512 (d_model and kv_latent)"),
    (dict(q_latent=16, nope_dim=8, rope_dim=18), "rope_dim=18 must be at most 16 (the query input and d_model)"),
    (dict(q_latent=16, nope_dim=17), "nope_dim=17 must be at most 16 (the query input and kv_latent)"),
])
def test_latent_rules_name_the_field_and_the_rule(change, message):
    with pytest.raises(ConfigError) as e:
        count(V2_LITE.replace(**change))
    assert str(e.value).startswith(message)


@pytest.mark.parametrize("change", [
    dict(kv_latent=2, nope_dim=2, value_dim=2), dict(kv_latent=2048, nope_dim=64, value_dim=64),
    dict(q_latent=2, nope_dim=2, rope_dim=2),
    dict(q_latent=2048), dict(n_heads=1, nope_dim=8, value_dim=8, rope_dim=8, kv_latent=16),
    dict(n_heads=1, nope_dim=8, value_dim=8, rope_dim=8, kv_latent=16, q_latent=16),
    dict(nope_dim=512, value_dim=512), dict(q_latent=64, rope_dim=64, nope_dim=64),
])
def test_latent_rules_allow_their_bounds(change):
    """Each bound of check_derived_latent is inclusive, and both latents are checked."""
    c = V2_LITE.replace(**change)
    check_derived_latent(c)
    assert count(c).total == n_params(c)


def test_latent_count_with_a_rotation_fixed_plane():
    """A RoPE base of 1 turns every plane by 1 rad: one class of p/2 planes, commutant 2 (p/2)^2;
    the RoPE key bias is still identified (no plane is fixed by every rotation)."""
    c = V2_LITE.replace(rope_base=1.0, bias=True)
    comps = {x.name: x.unidentified for x in count(c).components}
    assert comps["rope"] == 2 * 32 ** 2 and comps["b_KR"] == 0
    frequencies = [0.0] * 31 + [1.0]      # 31 planes fixed by every rotation: 62 dims at +1
    comps = {x.name: x.unidentified for x in count(c, frequencies).components}
    assert comps["b_KR"] == 62 and comps["rope"] == 62 ** 2 + 2


def test_latent_components_with_biases_are_named_and_keep_their_config():
    c = count(V3.replace(bias=True))
    assert [x.name for x in c.components] == ["q_latent", "kv_latent", "qk", "rope", "vo", "b_DQ",
                                              "b_DKV", "b_KR", "b_O"]
    assert c.config == V3.replace(bias=True)
    assert [x.name for x in count(V2_LITE.replace(bias=True)).components][-3:] == ["b_DKV", "b_KR", "b_O"]
