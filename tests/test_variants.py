"""Chapter 7 variants: QK-norm, latent K/V, centred inputs, cross-layer K/V sharing.

Every closed-form count below is checked against the measured Jacobian rank (certified gap).
"""
import math

import pytest
import torch

from idlib.attention import (flatten, forward, forward_sdpa, init_params, layer_params, n_params,
                             param_shapes, random_inputs)
from idlib.config import AttentionConfig, ConfigError
from idlib.counting import (count, factor_fiber, gain_fiber, latent_fiber,
                            orthogonal_commutant_dim)
from idlib.rank import measure
from idlib.studies.variants import labelled_checks
from idlib.symmetry import chart, permute_heads, random_group_element, tangent_basis

# (config fields, total parameters, closed-form unidentified); each is measured below
GRID = [
    (dict(d_model=6, n_heads=2, qk_norm="plain"), 144, 28),
    (dict(d_model=6, n_heads=2, qk_norm="gain"), 150, 25),
    (dict(d_model=6, n_heads=2, qk_norm="plain", bias="qk"), 156, 28),
    (dict(d_model=6, n_heads=4, n_kv_heads=2, head_dim=2, value_dim=3, qk_norm="plain",
          rope_fraction=1.0, bias="qkvo"), 204, 32),
    (dict(d_model=6, n_heads=2, n_kv_heads=1, head_dim=4, qk_norm="gain", rope_fraction=0.5,
          bias="k"), 156, 22),
    (dict(d_model=5, n_heads=2, head_dim=5, value_dim=2, qk_norm="plain", rope_fraction=0.4,
          causal=True), 140, 20),
    (dict(d_model=6, n_heads=2, head_dim=2, kv_latent=3), 90, 25),
    (dict(d_model=6, n_heads=2, head_dim=2, kv_latent=3, latent_norm=True), 90, 20),
    (dict(d_model=5, n_heads=1, head_dim=1, value_dim=1, kv_latent=4), 38, 20),
    (dict(d_model=4, n_heads=2, head_dim=2, kv_latent=6), 104, 56),
    (dict(d_model=6, n_heads=2, n_kv_heads=1, head_dim=4, value_dim=3, kv_latent=2, bias="qv"), 121, 55),
    (dict(d_model=6, n_heads=2, head_dim=2, kv_latent=4, rope_fraction=1.0, bias="kvo"), 118, 32),
    (dict(d_model=6, n_heads=2, head_dim=2, value_dim=1, kv_latent=5, latent_norm=True,
          qk_norm="gain"), 100, 19),
    (dict(d_model=6, n_heads=2, input_centered=True), 144, 54),
    (dict(d_model=5, n_heads=2, head_dim=4, value_dim=6, input_centered=True, bias="qkvo"), 233, 148),
    (dict(d_model=6, n_heads=2, n_kv_heads=1, head_dim=4, input_centered=True, rope_fraction=1.0,
          bias="qk"), 156, 36),
    (dict(d_model=6, n_heads=2, head_dim=2, input_centered=True, kv_latent=3, qk_norm="plain"), 90, 30),
    (dict(d_model=4, n_heads=2, n_layers=2), 128, 32),
    (dict(d_model=4, n_heads=2, n_layers=2, kv_share=2), 96, 16),
    (dict(d_model=4, n_heads=2, n_kv_heads=1, n_layers=3, kv_share=3, rope_fraction=1.0, bias="qk"), 126, 6),
    (dict(d_model=4, n_heads=2, head_dim=4, n_layers=2, kv_share=2, qk_norm="gain",
          rope_fraction=0.5), 204, 41),
    (dict(d_model=3, n_heads=1, head_dim=5, n_layers=2, kv_share=2, bias="q"), 100, 58),
]


@pytest.mark.parametrize("fields,total,unidentified", GRID, ids=[str(i) for i in range(len(GRID))])
def test_count_equals_measured_rank(fields, total, unidentified):
    c = AttentionConfig(**fields)
    cnt = count(c)
    assert (cnt.total, cnt.unidentified) == (total, unidentified)
    assert cnt.total == n_params(c)
    assert all(0 <= comp.unidentified <= comp.total for comp in cnt.components)
    m = measure(c, seed=0)
    assert m.certified, m.describe()
    assert m.unidentified == unidentified, m.describe()


def test_building_blocks():
    freqs = torch.tensor([1.0, 0.1])
    assert orthogonal_commutant_dim(freqs, 2) == 1 + 1 + 1      # U(1) x U(1) x O(2)
    assert gain_fiber(freqs, 2) == 2 + 2                         # one per plane, one per pass dim
    assert gain_fiber(torch.tensor([0.5, 0.5, 0.5]), 1) == 3 + 1  # repeated: still one per plane
    assert orthogonal_commutant_dim(torch.tensor([0.5, 0.5]), 0) == 4   # U(2)
    assert latent_fiber(6, 3, 8, False) == (3, 9, 0)            # bottleneck: GL(3)
    assert latent_fiber(6, 3, 2, False) == (6, 18 + 6 - 12, 0)  # C >= N: factorisation fiber
    assert latent_fiber(4, 6, 8, False) == (4, 24, 2)           # C > d: W_DKV all unidentified
    assert latent_fiber(6, 3, 8, True) == (3, 4, 0)             # O(3) and one scale
    assert latent_fiber(6, 4, 4, False) == (6, 16, 0)           # C = N < d: the factorisation


def test_building_blocks_with_rotations_by_0_and_pi():
    """Planes turned by pi (eigenvalue -1) or 0 (+1) count like pass-through dims; counts are ints."""
    pi = math.pi
    values = [orthogonal_commutant_dim([pi, pi, 1.0], 0),      # U(1) x O(4) on the two pi planes
              orthogonal_commutant_dim([0.0], 1),              # O(3): a fixed plane and a pass dim
              gain_fiber([pi], 0), gain_fiber([0.0, pi], 1), latent_fiber(6, 3, 8, True)[1]]
    assert values == [1 + 6, 3, 2, 3 + 2, 4] and all(type(x) is int for x in values)


def test_defaults_and_old_counts_unchanged():
    c = AttentionConfig(d_model=8, n_heads=2)
    assert (c.qk_norm, c.kv_latent, c.latent_norm, c.input_centered, c.n_layers, c.kv_share) == \
        ("none", None, False, False, 1, 1)
    assert count(c).ratio == 1 / 4
    assert [x.name for x in count(c).components] == ["qk", "vo"]
    assert list(param_shapes(c)) == ["W_Q", "W_K", "W_V", "W_O"]
    assert count(AttentionConfig(d_model=6, n_heads=4, n_kv_heads=2, head_dim=4, bias="qkvo",
                                 rope_fraction=0.5)).unidentified == 2 * (2 + 4) + 2 * 16 + 2 * 2 + 2 * 4


def test_qk_norm_counts():
    # per group O(k) and m + 1 scalings; H = 2 groups of m = 1, k = 3, d = 6
    c = AttentionConfig(d_model=6, n_heads=2, qk_norm="plain")
    assert count(c).component("qk").unidentified == 2 * (3 + 2)
    g = count(c.replace(qk_norm="gain"))
    assert g.component("qk").unidentified == 2 * 2 and g.component("g_QK").unidentified == 3
    assert count(c.replace(bias="k", qk_norm="none")).component("b_K").unidentified == 6  # no norm: all
    assert count(c.replace(bias="k", qk_norm="plain")).component("b_K").unidentified == 0


@pytest.mark.parametrize("fields,message", [
    (dict(d_model=4, qk_norm="rms"), "qk_norm='rms' must be one of none, plain, gain"),
    (dict(d_model=4, n_heads=4, qk_norm="plain"), "needs head_dim >= 2"),
    (dict(d_model=4, head_dim=5, qk_norm="gain"), "needs head_dim=5 at most the input dimension 4"),
    (dict(d_model=4, head_dim=4, qk_norm="plain", input_centered=True), "at most the input dimension 3"),
    (dict(d_model=4, kv_latent=0), "kv_latent=0 must be at least 1"),
    (dict(d_model=4, head_dim=4, kv_latent=2, rope_fraction=1.0), "at most kv_latent=2 when rope_fraction"),
    (dict(d_model=4, head_dim=4, kv_latent=2, qk_norm="plain"), "at most kv_latent=2"),
    (dict(d_model=4, kv_latent=5, latent_norm=True), "latent_norm=True needs 2 <= kv_latent <= 4"),
    (dict(d_model=4, latent_norm=True), "latent_norm=True needs kv_latent"),
    (dict(d_model=4, latent_norm=1), "latent_norm=1 must be true or false"),
    (dict(d_model=1, input_centered=True), "input_centered=True needs d_model >= 2"),
    (dict(d_model=4, head_dim=4, rope_fraction=1.0, input_centered=True), "at most d_model - 1 = 3"),
    (dict(d_model=4, n_layers=0), "n_layers=0 must be at least 1"),
    (dict(d_model=4, n_layers=3, kv_share=2), "kv_share=2 must divide n_layers=3"),
    (dict(d_model=4, n_layers=2, kv_latent=2), "kv_latent with n_layers > 1 is not derived"),
    (dict(d_model=4, n_layers=2, input_centered=True), "input_centered=True with n_layers > 1"),
    (dict(d_model=4, n_layers=2, bias="qo"), "value and output biases (letters v, o)"),
])
def test_refusals(fields, message):   # a layer rule (AttentionConfig) or a count rule (count)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        count(AttentionConfig(**fields))


def test_forward_variants_agree_with_sdpa_and_definitions():
    c = AttentionConfig(d_model=6, n_heads=4, n_kv_heads=2, head_dim=4, rope_fraction=0.5, bias="qkv",
                        qk_norm="gain", kv_latent=5, latent_norm=True, causal=True)
    p, X = init_params(c, 1), random_inputs(c, 2, 5, 1)
    assert (forward(c, p, X) - forward_sdpa(c, p, X)).abs().max() < 1e-12
    # qk_norm: scaling a query head (weights and bias) changes nothing
    q = dict(p, W_Q=p["W_Q"] * 3.0, b_Q=p["b_Q"] * 3.0)
    assert (forward(c, q, X) - forward(c, p, X)).abs().max() < 1e-12
    # input_centered: the layer ignores the mean of each token
    cc = AttentionConfig(d_model=5, n_heads=1, input_centered=True, bias="q")
    pc, Xc = init_params(cc, 2), random_inputs(cc, 2, 4, 2)
    assert Xc.mean(-1).abs().max() < 1e-15
    assert (forward(cc, pc, Xc + 7.0) - forward(cc, pc, Xc)).abs().max() < 1e-12
    # a latent wide enough is the plain layer with W_K = W_DKV W_UK, W_V = W_DKV W_UV
    cl = AttentionConfig(d_model=4, n_heads=2, kv_latent=4)
    pl, Xl = init_params(cl, 3), random_inputs(cl, 2, 4, 3)
    plain = {"W_Q": pl["W_Q"], "W_K": pl["W_DKV"] @ pl["W_UK"], "W_V": pl["W_DKV"] @ pl["W_UV"], "W_O": pl["W_O"]}
    assert (forward(cl, pl, Xl) - forward(AttentionConfig(d_model=4, n_heads=2), plain, Xl)).abs().max() < 1e-12


def test_stack_forward_is_residual_layers_with_shared_kv():
    c = AttentionConfig(d_model=4, n_heads=2, n_layers=4, kv_share=2, bias="qk", qk_norm="gain")
    p = init_params(c, 0)
    assert p["W_Q"].shape == (4, 2, 4, 2) and p["W_K"].shape == (2, 2, 4, 2)
    assert p["g_Q"].shape == (4, 2) and p["g_K"].shape == (2, 2)
    one = c.replace(n_layers=1, kv_share=1)
    X = random_inputs(c, 2, 5, 0)
    Y = X
    for layer in range(4):
        lp = layer_params(c, p, layer)
        assert torch.equal(lp["W_K"], p["W_K"][layer // 2])
        Y = Y + forward(one, lp, Y)
    assert (forward(c, p, X) - Y).abs().max() < 1e-12
    assert (forward_sdpa(c, p, X) - Y).abs().max() < 1e-12


SYMMETRY = [dict(d_model=5, n_heads=2, qk_norm="plain", bias="qk", rope_fraction=0.5, head_dim=4),
            dict(d_model=6, n_heads=4, n_kv_heads=2, qk_norm="gain", rope_fraction=1.0, bias="qkvo",
                 causal=True, head_dim=2),
            dict(d_model=4, n_heads=2, head_dim=5, value_dim=5, input_centered=True, bias="qkv"),
            dict(d_model=5, n_heads=2, head_dim=2, input_centered=True, qk_norm="gain", bias="ko"),
            dict(d_model=4, n_heads=2, n_kv_heads=1, n_layers=3, kv_share=3, rope_fraction=1.0, bias="qk",
                 head_dim=4),
            dict(d_model=3, n_heads=2, head_dim=4, n_layers=2, kv_share=2, bias="q"),
            dict(d_model=4, n_heads=2, n_layers=2, kv_share=2, qk_norm="plain", head_dim=2)]


@pytest.mark.parametrize("fields", SYMMETRY, ids=[str(i) for i in range(len(SYMMETRY))])
def test_symmetry_group_and_tangent(fields):
    c = AttentionConfig(**fields)
    p, X = init_params(c, 4), random_inputs(c, 3, 6, 4)
    q = random_group_element(c, p, seed=5)
    y = forward(c, p, X)
    assert (flatten(q) - flatten(p)).norm() > 0.1 * flatten(p).norm()
    assert ((forward(c, q, X) - y).abs().max() / y.abs().max()) < 1e-10
    assert tangent_basis(c, p).shape[1] == count(c).unidentified


def test_symmetry_latent_not_implemented_and_permutation():
    c = AttentionConfig(d_model=4, n_heads=2, kv_latent=2)
    with pytest.raises(NotImplementedError, match=r"latent \(kv_latent, latent_norm\)"):
        chart(c, init_params(c, 0))
    X = random_inputs(c, 2, 4, 0)
    for cfg in (c, AttentionConfig(d_model=4, n_heads=2, n_layers=2, kv_share=2, qk_norm="gain")):
        p = init_params(cfg, 0)
        assert (forward(cfg, permute_heads(cfg, p, [1, 0]), X) - forward(cfg, p, X)).abs().max() < 1e-12


def test_factor_fiber_reused():
    # the stack's shared K/V: the S layers' heads act like S m heads of one group
    c = AttentionConfig(d_model=3, n_heads=1, head_dim=5, n_layers=2, kv_share=2)
    assert count(c).component("qk").unidentified == factor_fiber(3, 3, 5, 2)


# --- idlib.studies.variants: chapter 7's labelled checks ---------------------------------------

def test_labelled_checks_pair_each_label_with_its_closed_form_and_measurement():
    entries = [("plain layer", dict(d_model=6, n_heads=2)),
               ("QK-norm plain", dict(d_model=6, n_heads=2, qk_norm="plain")),
               ("C = 3 < min(d, N)", dict(d_model=6, n_heads=2, head_dim=2, kv_latent=3))]
    checks = labelled_checks(entries, seed=1)
    assert [c.label for c in checks] == ["plain layer", "QK-norm plain", "C = 3 < min(d, N)"]
    assert [c.config for c in checks] == [AttentionConfig(**f) for _, f in entries]
    # P and U: plain H (k^2 + v^2) = 2 (9 + 9); QK-norm keeps O(k) and m + 1 scales per group
    assert [(c.total, c.unidentified) for c in checks] == [(144, 36), (144, 28), (90, 25)]
    assert [c.measured_unidentified for c in checks] == [36, 28, 25]
    assert all(c.certified and c.agrees and c.gap >= 1e4 for c in checks)
    assert checks[0].gap == measure(AttentionConfig(d_model=6, n_heads=2), seed=1).gap
    assert labelled_checks(entries[:1], seed=0)[0].gap != checks[0].gap     # the seed is used
    assert labelled_checks([], seed=0) == []


def test_labelled_checks_refuse_a_bad_layer_by_its_field():
    with pytest.raises(ConfigError, match="kv_latent=0 must be at least 1"):
        labelled_checks([("bad", dict(d_model=4, kv_latent=0))])


@pytest.mark.parametrize("qk_norm", ["layernorm", "layernorm_shared", "whole", "plain", "gain"])
def test_qk_norms_are_the_formulas_they_name(qk_norm):
    """project() against torch's own layer_norm / an explicit RMS over the named axes (eps = 0)."""
    from idlib.attention import project
    F = torch.nn.functional
    config = AttentionConfig(d_model=8, n_heads=2, head_dim=4, qk_norm=qk_norm)
    p = init_params(config, 1)
    X = random_inputs(config, 2, 5, 0)
    q, k, _ = project(config, p, X)
    q0 = torch.einsum("bnd,hdk->bhnk", X, p["W_Q"])
    rms = lambda y, dims: y / y.pow(2).mean(dim=dims, keepdim=True).sqrt()  # noqa: E731
    want = {"layernorm": lambda: F.layer_norm(q0, (4,), eps=0.0) * p["g_Q"][:, None, :],
            "layernorm_shared": lambda: F.layer_norm(q0, (4,), p["g_Q"], p["c_Q"], eps=0.0),
            "whole": lambda: p["g_Q"][:, None, :] * rms(q0, (1, 3)),
            "plain": lambda: rms(q0, -1), "gain": lambda: rms(q0, -1) * p["g_Q"]}[qk_norm]()
    assert torch.allclose(q, want, rtol=1e-10, atol=1e-12)
    assert k.shape == q.shape


@pytest.mark.parametrize("qk_norm", ["gain", "whole", "layernorm", "layernorm_shared"])
def test_gains_with_a_repeated_frequency_match_the_measured_rank(qk_norm):
    """Two planes with one frequency: the rotations that mix them do not commute with generic
    gains, so the gains keep one exchange per plane (the count once used one per class)."""
    config = AttentionConfig(d_model=8, n_heads=2, qk_norm=qk_norm, rope_fraction=1.0)
    freqs = torch.tensor([0.7, 0.7], dtype=torch.float64)
    m = measure(config, frequencies=freqs)
    assert m.certified and m.rank == count(config, freqs).identified
    # ... and the gains' exchanges are those of two distinct frequencies (one per plane)
    gains = {c.name: c.unidentified for c in count(config, freqs).components}["g_QK"]
    assert gains == {c.name: c.unidentified for c in count(config).components}["g_QK"]
