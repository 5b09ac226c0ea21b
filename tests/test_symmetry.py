"""idlib.symmetry: the group acts without changing the layer, breaking it does change the layer,
and the orbit's tangent has exactly the counted dimension."""
import math

import pytest
import torch

from idlib.attention import apply_rope, flatten, forward, init_params, n_params, random_inputs
from idlib.config import AttentionConfig
from idlib.counting import count, rope_commutant_dim
from idlib.rank import jacobian
from idlib.symmetry import (GROUP_AXIS, HEAD_AXIS, _config_chart, act, chart, commutant_basis, gain_exchange_basis,
                            gl_action, gl_blocks, gl_only, gl_tangent, linear_action, n_coordinates,
                            null_space, orbit_generators, permute_heads, random_group_element,
                            rotation_matrix, tangent_basis)

torch.set_num_threads(1)
F64 = torch.float64


@pytest.fixture(autouse=True)
def fresh_charts():
    """Charts are cached per config: let every test build its own (a mutant in the chart code
    must not hide behind a chart cached by another test or by a forked parent process)."""
    _config_chart.cache_clear()

CONFIGS = [
    dict(d_model=4),
    dict(d_model=6, n_heads=3),
    dict(d_model=8, n_heads=4, n_kv_heads=2),
    dict(d_model=8, n_heads=4, n_kv_heads=1, bias="qkvo"),
    dict(d_model=6, n_heads=3, rope_fraction=1.0, bias="qk"),
    dict(d_model=8, n_heads=2, rope_fraction=0.5, bias="kv", causal=True),
    dict(d_model=4, n_heads=2, head_dim=6, value_dim=5, bias="qv"),     # k, v > d: null moves
    dict(d_model=5, n_heads=2, n_kv_heads=1, head_dim=3, value_dim=7, bias="v"),    # v > d, no output bias
    dict(d_model=6, n_heads=3, head_dim=1, value_dim=1, bias="vo"),     # smallest heads
    dict(d_model=6, n_heads=2, qk_norm="plain", bias="qk"),
    dict(d_model=6, n_heads=2, n_kv_heads=1, head_dim=4, rope_fraction=0.5, qk_norm="gain"),
    dict(d_model=5, n_heads=2, head_dim=4, value_dim=6, input_centered=True, bias="qkvo"),
    dict(d_model=4, n_heads=2, n_kv_heads=1, n_layers=3, kv_share=3, rope_fraction=1.0, bias="qk"),
    dict(d_model=3, n_heads=2, head_dim=5, bias="k"),                  # k > d without a query bias
    dict(d_model=4, n_heads=2, head_dim=4, n_layers=2, kv_share=2, qk_norm="gain", rope_fraction=0.5),
    dict(d_model=4, n_heads=1, head_dim=2, n_layers=4, kv_share=2, qk_norm="gain"),     # two sets
]
# only the GL blocks: the generators are built in closed form
GL_ONLY = [dict(d_model=8, n_heads=2), dict(d_model=8, n_heads=4, n_kv_heads=2, head_dim=4),
           dict(d_model=8, n_heads=2, rope_fraction=0.5, bias="q"),
           dict(d_model=6, n_heads=3, n_kv_heads=1, head_dim=2, value_dim=3, bias="qo"),
           dict(d_model=4, n_heads=2, n_layers=2), dict(d_model=4, n_heads=2, n_layers=2, kv_share=2),
           dict(d_model=4, n_heads=2, n_kv_heads=1, n_layers=3, kv_share=3, rope_fraction=1.0, bias="q")]
GQA = AttentionConfig(d_model=8, n_heads=4, n_kv_heads=2, head_dim=3, value_dim=5, bias="qkvo")


def _rel_change(config, p, q):
    X = random_inputs(config, 3, 7, seed=1)
    y0, y1 = forward(config, p, X), forward(config, q, X)
    return ((y1 - y0).abs().max() / y0.abs().max()).item()


def _random(shape, seed, scale=0.4):
    """I + scale N(0, 1) / sqrt(n): invertible, well away from the identity."""
    n = shape[-1]
    g = torch.Generator().manual_seed(seed)
    return torch.eye(n, dtype=F64) + scale * torch.randn(*shape, generator=g, dtype=F64) / math.sqrt(n)


# --- the group action --------------------------------------------------------------------------

@pytest.mark.parametrize("kw", CONFIGS, ids=str)
def test_group_element_leaves_output_unchanged(kw):
    config = AttentionConfig(**kw)
    p = init_params(config, seed=3)
    q = random_group_element(config, p, seed=4)
    moved = ((flatten(q) - flatten(p)).norm() / flatten(p).norm()).item()
    assert moved > 1e-2                      # a real move, not the identity
    assert _rel_change(config, p, q) <= 1e-10
    r = random_group_element(config, p, seed=5)
    assert (flatten(r) - flatten(q)).norm() > 1e-2 * flatten(p).norm()     # the seed matters


@pytest.mark.parametrize("kw", CONFIGS, ids=str)
def test_zero_coordinates_are_the_identity_and_minus_c_undoes_c_on_the_gl_blocks(kw):
    config = AttentionConfig(**kw)
    p = init_params(config, seed=2)
    ch = chart(config, p)
    n = n_coordinates(ch)
    assert n == sum(ch.sizes.values()) > 0
    assert (flatten(act(config, p, torch.zeros(n, dtype=F64), ch)) - flatten(p)).abs().max() < 1e-13
    c = torch.zeros(n, dtype=F64)
    gl = ch.sizes["qk"] + ch.sizes["vo"]
    c[:gl] = 0.3 * torch.randn(gl, generator=torch.Generator().manual_seed(0), dtype=F64)
    there = act(config, p, c, ch)
    assert (flatten(there) - flatten(p)).norm() > 1e-2
    back = act(config, there, -c, ch)                  # exp(-E) = exp(E)^{-1}
    assert (flatten(back) - flatten(p)).abs().max() < 1e-12


def test_gl_action_is_the_symmetry_and_dropping_an_inverse_breaks_it():
    p, G, H = init_params(GQA, 1), GQA.n_kv_heads, GQA.n_heads
    A, B = _random((G, 3, 3), 10), _random((G, 5, 5), 11)
    group = [h // GQA.group_size for h in range(H)]
    q = gl_action(GQA, p, A, B)
    assert _rel_change(GQA, p, q) < 1e-10
    # the formulas, tensor by tensor
    assert torch.allclose(q["W_Q"][3], p["W_Q"][3] @ A[1], atol=1e-14, rtol=0)
    assert torch.allclose(q["W_K"][1], p["W_K"][1] @ torch.linalg.inv(A[1]).T, atol=1e-14, rtol=0)
    assert torch.allclose(q["b_K"][1], p["b_K"][1] @ torch.linalg.inv(A[1]).T, atol=1e-14, rtol=0)
    assert torch.allclose(q["W_V"][0], p["W_V"][0] @ B[0], atol=1e-14, rtol=0)
    assert torch.allclose(q["b_V"][1], p["b_V"][1] @ B[1], atol=1e-14, rtol=0)
    assert torch.allclose(q["W_O"][2], torch.linalg.solve(B[1], p["W_O"][2]), atol=1e-12, rtol=0)
    assert torch.equal(q["b_O"], p["b_O"])
    # every way of getting the action wrong changes the layer's output
    A_inv_T, B_inv = torch.linalg.inv(A).mT, torch.linalg.inv(B)
    broken = {"K without inverse": dict(Q=A[group], K=A),
              "K without transpose": dict(Q=A[group], K=torch.linalg.inv(A)),
              "O with B, not B^-1": dict(V=B, O=B[group]),
              "O from another group": dict(V=B, O=B_inv[[1 - g for g in group]]),
              "one head off its group": dict(Q=torch.cat([A[group][:3], A[:1]]), K=A_inv_T)}
    for name, maps in broken.items():
        assert _rel_change(GQA, p, linear_action(GQA, p, **maps)) > 1e-3, name
    exact = linear_action(GQA, p, Q=A[group], K=A_inv_T, V=B, O=B_inv[group])
    assert _rel_change(GQA, p, exact) < 1e-10


def test_gl_action_on_a_stack_uses_each_key_value_set():
    config = AttentionConfig(d_model=4, n_heads=2, n_kv_heads=1, n_layers=4, kv_share=2)
    p = init_params(config, 3)
    A, B = _random((2, 2, 2), 12), _random((2, 2, 2), 13)         # (sets G, k, k): 2 sets of 1 group
    q = gl_action(config, p, A, B)
    assert _rel_change(config, p, q) < 1e-10
    assert torch.allclose(q["W_Q"][3, 1], p["W_Q"][3, 1] @ A[1], atol=1e-14, rtol=0)     # layer 3 reads set 1
    assert torch.allclose(q["W_Q"][1, 0], p["W_Q"][1, 0] @ A[0], atol=1e-14, rtol=0)     # layer 1 reads set 0
    assert torch.allclose(q["W_O"][2, 1], torch.linalg.solve(B[1], p["W_O"][2, 1]), atol=1e-12, rtol=0)
    K = torch.linalg.inv(A).mT                       # flat query heads l H + h: 0-3 read set 0, 4-7 set 1
    assert _rel_change(config, p, linear_action(config, p, Q=A[[0] * 4 + [1] * 4], K=K)) < 1e-10
    assert _rel_change(config, p, linear_action(config, p, Q=A[[0, 0, 1, 1] * 2], K=K)) > 1e-3


@pytest.mark.parametrize("kw", GL_ONLY, ids=str)
def test_gl_tangent_is_the_derivative_of_gl_action(kw):
    config = AttentionConfig(**kw)
    p = init_params(config, 4)
    ch = chart(config, p)
    assert gl_only(ch)
    c = torch.randn(n_coordinates(ch), generator=torch.Generator().manual_seed(1), dtype=F64)
    E, C = gl_blocks(config, c, ch)
    xi = flatten(gl_tangent(config, p, E, C))
    t = 1e-4
    diff = (flatten(act(config, p, t * c, ch)) - flatten(act(config, p, -t * c, ch))) / (2 * t)
    assert (diff - xi).abs().max() < 1e-6 * xi.abs().max()          # central difference: O(t^2)
    # batches: one tangent vector per leading index
    cs = torch.stack([c, 2 * c, -c])
    batch = gl_tangent(config, p, *gl_blocks(config, cs, ch))
    for i, s in enumerate((1.0, 2.0, -1.0)):
        assert torch.allclose(torch.cat([v[i].reshape(-1) for v in batch.values()]), s * xi, atol=1e-13, rtol=0)


@pytest.mark.parametrize("kw", GL_ONLY, ids=str)
def test_closed_form_generators_equal_the_autodiff_derivative_of_act(kw):
    config = AttentionConfig(**kw)
    p = init_params(config, 5)
    ch = chart(config, p)
    zero = torch.zeros(n_coordinates(ch), dtype=F64)
    J = torch.func.jacfwd(lambda c: flatten(act(config, p, c, ch)))(zero)
    T = orbit_generators(config, p)
    assert T.shape == (n_params(config), n_coordinates(ch))
    assert (T - J).abs().max() < 1e-12


def test_tangent_vectors_are_float64_with_zeros_off_the_gl_factors():
    config = AttentionConfig(d_model=4, n_heads=2, bias="qkvo")
    p = init_params(config, 0)
    E, C = torch.ones(2, 2, 2, dtype=F64), torch.ones(2, 2, 2, dtype=F64)
    xi = gl_tangent(config, p, E, C)
    assert all(t.dtype == F64 for t in xi.values())
    assert torch.equal(xi["b_O"], torch.zeros(4, dtype=F64))
    assert torch.allclose(xi["b_V"][1], p["b_V"][1] @ C[1], atol=1e-15, rtol=0) and xi["b_V"].abs().max() > 0


def test_the_other_coordinate_blocks_act_by_their_formulas():
    """Null moves, key-bias, value-bias and all-ones moves: act(c) - params, block by block."""
    def moved(config, p, block, z):
        ch = chart(config, p)
        c = torch.zeros(n_coordinates(ch), dtype=F64)
        start = sum(size for name, size in ch.sizes.items() if list(ch.sizes).index(name) <
                    list(ch.sizes).index(block))
        c[start:start + ch.sizes[block]] = z
        q = act(config, p, c, ch)
        return ch, {n: q[n] - p[n] for n in p}

    wide = AttentionConfig(d_model=3, n_heads=2, head_dim=5, value_dim=4, bias="qk")
    p = init_params(wide, 1)
    z = torch.linspace(-1, 1, 2 * 4 * 2, dtype=F64)              # Y_h: (d + 1, k - d) per head
    ch, dp = moved(wide, p, "qk_null", z)
    Y = z.reshape(2, 4, 2)
    for h in range(2):
        assert torch.allclose(dp["W_Q"][h], Y[h][:3] @ ch.qk_null[h].T, atol=1e-14, rtol=0)
        assert torch.allclose(dp["b_Q"][h], Y[h][3] @ ch.qk_null[h].T, atol=1e-14, rtol=0)
    z = torch.linspace(-1, 1, 2 * 1 * 3, dtype=F64)              # Y_h: (v - d, d) per head
    ch, dp = moved(wide, p, "vo_null", z)
    for h in range(2):
        assert torch.allclose(dp["W_O"][h], ch.vo_null[h] @ z.reshape(2, 1, 3)[h], atol=1e-14, rtol=0)
    # key bias along the dimensions no rotation moves; value bias with an output bias
    biased = AttentionConfig(d_model=4, n_heads=2, head_dim=2, value_dim=2, bias="kvo")
    p = init_params(biased, 2)
    z = torch.tensor([0.5, -1.0, 2.0, 0.25], dtype=F64)
    ch, dp = moved(biased, p, "b_K", z)
    assert torch.allclose(dp["b_K"], z.reshape(2, 2) @ ch.k_fixed.T, atol=1e-14, rtol=0)
    ch, dp = moved(biased, p, "b_V", z)
    assert torch.allclose(dp["b_V"], z.reshape(2, 2), atol=1e-14, rtol=0)
    assert torch.allclose(dp["b_O"], -(z.reshape(2, 1, 2) @ p["W_O"]).sum(0)[0], atol=1e-14, rtol=0)
    # centred inputs: the all-ones direction u = 1 / sqrt(d) of W_Q, W_K, W_V
    centred = AttentionConfig(d_model=3, n_heads=1, head_dim=2, value_dim=2, input_centered=True)
    p = init_params(centred, 3)
    z = torch.arange(1.0, 7.0, dtype=F64)                        # z_Q (k), z_K (k), z_V (v)
    ch, dp = moved(centred, p, "ones", z)
    u = torch.full((3, 1), 3 ** -0.5, dtype=F64)
    assert torch.allclose(dp["W_Q"][0], u * z[None, :2], atol=1e-15, rtol=0)
    assert torch.allclose(dp["W_K"][0], u * z[None, 2:4], atol=1e-15, rtol=0)
    assert torch.allclose(dp["W_V"][0], u * z[None, 4:], atol=1e-15, rtol=0)


def test_frequencies_reach_the_chart_the_tangent_and_the_random_element():
    config = AttentionConfig(d_model=6, n_heads=1, head_dim=4, rope_fraction=1.0)
    p = init_params(config, 0)
    # omega = (pi/2, 0.3): R(1) has distinct planes (commutant 4) but R(2) a plane at pi
    quarter = torch.tensor([math.pi / 2, 0.3], dtype=F64)
    assert chart(config, p, quarter).sizes["qk"] == 4
    equal = torch.tensor([0.7, 0.7], dtype=F64)                   # two equal planes: commutant 8
    assert chart(config, p, equal).sizes["qk"] == 8 and chart(config, p).sizes["qk"] == 4
    assert orbit_generators(config, p, equal).shape == (n_params(config), 8 + 16)
    assert tangent_basis(config, p, equal).shape[1] == count(config, equal).unidentified == 24
    assert tangent_basis(config, p).shape[1] == count(config).unidentified == 20
    q = random_group_element(config, p, seed=1, frequencies=equal)
    X = random_inputs(config, 3, 7, seed=1)
    y0 = forward(config, p, X, equal)
    assert ((forward(config, q, X, equal) - y0).abs().max() / y0.abs().max()) < 1e-10
    assert _rel_change(config, p, q) > 1e-3            # not a symmetry at the default frequencies


@pytest.mark.parametrize("kw", [CONFIGS[11], CONFIGS[-1], CONFIGS[3]], ids=str)
def test_random_group_element_law(kw):
    """Coordinates N(0, scale^2 / w) from a generator seeded by ``seed``, in chart order:
    w = k (QK block), v (VO block), 1 (scales, gains), d (every other block); scale 0.5."""
    config = AttentionConfig(**kw)
    p = init_params(config, 0)
    ch = chart(config, p)
    gen = torch.Generator().manual_seed(7)
    widths = {"qk": config.head_dim, "vo": config.value_dim, "qk_scale": 1, "gain": 1}
    c = torch.cat([0.5 / widths.get(name, config.d_model) ** 0.5
                   * torch.randn(size, generator=gen, dtype=F64) for name, size in ch.sizes.items()])
    expected = flatten(act(config, p, c, ch))
    assert torch.equal(flatten(random_group_element(config, p, seed=7)), expected)
    assert torch.equal(flatten(random_group_element(config, p, seed=7, scale=0.5)), expected)
    assert torch.equal(flatten(random_group_element(config, p)),
                       flatten(random_group_element(config, p, seed=0)))          # default seed 0


def test_gl_blocks_read_the_coordinates_in_chart_order():
    config = AttentionConfig(d_model=4, n_heads=2, n_kv_heads=1, head_dim=2, value_dim=3)
    ch = chart(config, init_params(config, 0))
    assert ch.sizes["qk"] == 4 and ch.sizes["vo"] == 9 and n_coordinates(ch) == 13
    c = torch.arange(13, dtype=F64)
    E, C = gl_blocks(config, c, ch)
    assert torch.allclose(E[0], torch.einsum("c,cij->ij", c[:4], ch.qk_basis), atol=1e-15, rtol=0)
    assert torch.equal(C[0], torch.arange(4, 13, dtype=F64).reshape(3, 3))


# --- the chart ------------------------------------------------------------------------------

def test_chart_sizes_and_cache():
    config = AttentionConfig(d_model=6, n_heads=4, n_kv_heads=2, head_dim=4, value_dim=2,
                             rope_fraction=0.5, bias="qkv")
    ch = chart(config, init_params(config, 0))
    # commutant of R(1) with r = 2 rotated and 2 passed dims: 2 + 2^2 = 6 per group
    assert ch.sizes == {"qk": 2 * 6, "vo": 2 * 4, "qk_null": 0, "vo_null": 0, "b_K": 2 * 2,
                        "b_V": 2 * 2, "qk_scale": 0, "gain": 0, "ones": 0}
    assert ch.k_fixed.shape == (4, 2) and not gl_only(ch)
    assert chart(config, init_params(config, 1)) is ch                 # cached: no null moves
    assert ch.qk_null == [] and ch.vo_null == []
    square = AttentionConfig(d_model=4, n_heads=1)                     # k = v = d: still no null move
    assert chart(square, init_params(square, 0)) is chart(square, init_params(square, 1))
    for kw, qk, vo in ((dict(head_dim=3, value_dim=4), 0, 1), (dict(head_dim=4, value_dim=3), 1, 0)):
        edge = AttentionConfig(d_model=3, n_heads=1, **kw)              # one width = d, one > d
        ce = chart(edge, init_params(edge, 0))
        assert (len(ce.qk_null), len(ce.vo_null)) == (qk, vo)
    gain = AttentionConfig(d_model=6, n_heads=2, qk_norm="gain")
    assert chart(gain, init_params(gain, 0)).sizes["qk"] == 0
    assert chart(gain, init_params(gain, 0)).sizes["gain"] == 3 and \
        chart(gain, init_params(gain, 0)).sizes["qk_scale"] == 4
    wide = AttentionConfig(d_model=3, n_heads=1, head_dim=5, value_dim=4, bias="q")
    c0, c1 = chart(wide, init_params(wide, 0)), chart(wide, init_params(wide, 1))
    assert c0.sizes["qk_null"] == 1 * 4 * 2 and c0.sizes["vo_null"] == 1 * 1 * 3
    assert [N.shape for N in c0.qk_null] == [(5, 2)] and [M.shape for M in c0.vo_null] == [(4, 1)]
    assert (init_params(wide, 0)["W_K"][0] @ c0.qk_null[0]).abs().max() < 1e-12
    assert (c0.qk_null[0] - c1.qk_null[0]).abs().max() > 1e-3          # they follow the point


def test_latent_layers_are_refused():
    config = AttentionConfig(d_model=4, n_heads=2, kv_latent=2)
    p = init_params(config, 0)
    for call in (lambda: chart(config, p), lambda: linear_action(config, p),
                 lambda: gl_action(config, p, torch.eye(2, dtype=F64)[None].repeat(2, 1, 1),
                                   torch.eye(2, dtype=F64)[None].repeat(2, 1, 1))):
        with pytest.raises(NotImplementedError) as err:
            call()
        assert str(err.value) == (
            "idlib.symmetry: the group action for the variant(s) latent (kv_latent, latent_norm) is "
            "not implemented here; their counts are checked against the measured rank instead")


# --- the tangent ----------------------------------------------------------------------------

@pytest.mark.parametrize("kw", CONFIGS, ids=str)
def test_tangent_dimension_is_the_count_and_lies_in_the_jacobian_kernel(kw):
    config = AttentionConfig(**kw)
    p = init_params(config, seed=5)
    T = tangent_basis(config, p)
    assert T.shape == (n_params(config), count(config).unidentified)
    assert torch.allclose(T.T @ T, torch.eye(T.shape[1], dtype=T.dtype), atol=1e-10, rtol=0)
    J = jacobian(config, p, random_inputs(config, 4, config.d_model + 2, seed=6))
    assert (J @ T).abs().max().item() <= 1e-9 * J.abs().max().item()
    gens = orbit_generators(config, p)
    assert torch.linalg.matrix_rank(gens).item() == T.shape[1]
    assert (gens - T @ (T.T @ gens)).abs().max() < 1e-9 * gens.abs().max()   # same span


def test_tangent_dimension_for_known_closed_forms():
    # plain MHA: U = H (k^2 + v^2); one group of H heads: U = k^2 + v^2
    assert tangent_basis(AttentionConfig(d_model=8, n_heads=2), init_params(
        AttentionConfig(d_model=8, n_heads=2), 0)).shape[1] == 2 * (16 + 16)
    mqa = AttentionConfig(d_model=8, n_heads=4, n_kv_heads=1, head_dim=2, value_dim=3)
    assert tangent_basis(mqa, init_params(mqa, 0)).shape[1] == 4 + 9


# --- building blocks ------------------------------------------------------------------------

def test_null_space_is_an_orthonormal_kernel():
    M = torch.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]], dtype=F64)       # rank 1
    N = null_space(M)
    assert N.shape == (3, 2)
    assert (M @ N).abs().max() < 1e-14
    assert torch.allclose(N.T @ N, torch.eye(2, dtype=F64), atol=1e-14, rtol=0)
    assert null_space(torch.eye(3, dtype=F64)).shape == (3, 0)
    empty = null_space(torch.zeros(0, 4, dtype=F64))
    assert empty.dtype == F64 and torch.equal(empty, torch.eye(4, dtype=F64))
    tiny = torch.diag(torch.tensor([1.0, 1e-12], dtype=F64))
    assert null_space(tiny).shape == (2, 1) and null_space(tiny, rtol=1e-13).shape == (2, 0)
    # the threshold is rtol * max(sigma_1, 1): relative above 1, absolute below
    big = torch.diag(torch.tensor([100.0, 1e-9], dtype=F64))
    assert null_space(big, rtol=1e-10).shape == (2, 1)
    small = torch.diag(torch.tensor([1.0, 1.5e-10], dtype=F64))
    assert null_space(small, rtol=1e-10).shape == (2, 0)


def test_null_space_basis_depends_on_the_kernel_alone():
    """Two matrices with one kernel give one basis (the SVD's own basis of a repeated singular
    value is LAPACK's choice: a random group element drawn in it moved differently on the CI
    machine); the canonical basis is Gram-Schmidt of P e_1, P e_2, ... in order."""
    gen = torch.Generator().manual_seed(0)
    M = torch.randn(3, 7, generator=gen, dtype=F64)
    U = torch.randn(3, 3, generator=gen, dtype=F64)
    N, N2 = null_space(M), null_space(U @ M)
    assert (N - N2).abs().max() < 1e-12
    svd_basis = torch.linalg.svd(M, full_matrices=True)[2][3:].T
    assert (svd_basis - N).abs().max() > 0.1              # the SVD's basis is another one
    P = N @ N.T
    G = P[:, :4].clone()                                   # Gram-Schmidt of P e_1 .. P e_4
    for j in range(4):
        G[:, j] -= G[:, :j] @ (G[:, :j].T @ G[:, j])
        G[:, j] /= G[:, j].norm()
    assert (G - N).abs().max() < 1e-12
    # a skipped unit vector: e_1 in the row space, P e_1 = 0; the basis starts at P e_2
    D = null_space(torch.tensor([[1.0, 0.0, 0.0]], dtype=F64))
    assert torch.allclose(D, torch.eye(3, dtype=F64)[:, 1:], atol=1e-15, rtol=0)
    # the commutant of a partial rotation: (e_00 + e_11)/sqrt 2, the rotation generator, ...
    R = torch.tensor([[0.6, 0.8, 0, 0], [-0.8, 0.6, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]], dtype=F64)
    E = commutant_basis(R)
    assert E.shape == (6, 4, 4)
    assert torch.allclose(E[0], torch.diag(torch.tensor([1, 1, 0, 0], dtype=F64)) / 2 ** 0.5,
                          atol=1e-14, rtol=0)


def test_null_space_at_its_extremes():
    """Kernel = the whole space: the identity (not the SVD's basis of it); a one-dimensional kernel:
    the unit vector whose first non-zero coordinate is positive (P e_1 normalised), whichever sign
    the SVD returns."""
    tiny = 1e-12 * torch.randn(2, 3, generator=torch.Generator().manual_seed(1), dtype=F64)
    assert torch.equal(null_space(tiny), torch.eye(3, dtype=F64))      # below rtol: rank 0
    for sign in (1.0, -1.0):
        M = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, sign]], dtype=F64)     # kernel (sign, -sign, 1)
        N = null_space(M)
        want = torch.tensor([[sign], [-sign], [1.0]], dtype=F64) * sign / 3 ** 0.5
        assert N.shape == (3, 1) and torch.allclose(N, want, atol=1e-15, rtol=0)


def test_rotation_matrix_is_apply_rope():
    config = AttentionConfig(d_model=8, n_heads=1, head_dim=6, rope_fraction=2 / 3)
    freqs = torch.tensor([0.7, 0.2], dtype=F64)
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(0), dtype=F64)
    for t in (1.0, 3.0):
        R = rotation_matrix(config, t, freqs)
        assert torch.allclose(x @ R, apply_rope(x, freqs, torch.full((5,), t, dtype=F64)), atol=1e-14, rtol=0)
        assert torch.allclose(R @ R.T, torch.eye(6, dtype=F64), atol=1e-14, rtol=0)
    R1 = rotation_matrix(config, 1.0, freqs)
    assert torch.allclose(R1 @ R1, rotation_matrix(config, 2.0, freqs), atol=1e-14, rtol=0)
    assert torch.equal(R1[4:, 4:], torch.eye(2, dtype=F64)) and R1[:4, 4:].abs().max() == 0
    assert abs(R1[0, 0].item() - math.cos(0.7)) < 1e-15
    assert torch.equal(rotation_matrix(AttentionConfig(d_model=4), 1.0), torch.eye(4, dtype=F64))
    assert torch.equal(rotation_matrix(config, frequencies=freqs), R1)                 # default t = 1


def test_commutant_of_distinct_and_repeated_frequencies():
    config = AttentionConfig(d_model=8, head_dim=8, rope_fraction=0.75)   # r = 6, 2 pass dims
    distinct = torch.tensor([1.0, 0.3, 0.05], dtype=torch.float64)
    repeated = torch.tensor([1.0, 1.0, 0.05], dtype=torch.float64)
    for freqs, expected in [(distinct, 6 + 4), (repeated, 2 * 4 + 2 + 4)]:
        R = rotation_matrix(config, 1.0, freqs)
        basis = commutant_basis(R)
        assert basis.shape[0] == rope_commutant_dim(freqs, 2) == expected
        assert (basis @ R - R @ basis).abs().max() < 1e-12
        flat = basis.reshape(expected, -1)
        assert torch.allclose(flat @ flat.T, torch.eye(expected, dtype=F64), atol=1e-12, rtol=0)


def test_gain_exchange_basis_ties_each_rotated_pair():
    config = AttentionConfig(d_model=6, head_dim=6, rope_fraction=2 / 3)     # pairs (0,2), (1,3); 4, 5 free
    B = gain_exchange_basis(rotation_matrix(config, 1.0))
    assert B.tolist() == [[1, 0, 0, 0], [0, 1, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0],
                          [0, 0, 1, 0], [0, 0, 0, 1]]
    assert gain_exchange_basis(torch.eye(3, dtype=F64)).tolist() == torch.eye(3).tolist()


def test_head_permutation_is_a_symmetry_and_bad_permutations_are_refused():
    config = AttentionConfig(d_model=8, n_heads=4, n_kv_heads=2, bias="qkvo")
    p = init_params(config, seed=0)
    q = permute_heads(config, p, [3, 2, 1, 0])          # swaps the two groups and heads inside
    assert _rel_change(config, p, q) <= 1e-12
    assert torch.equal(q["W_Q"][0], p["W_Q"][3]) and torch.equal(q["W_O"][1], p["W_O"][2])
    assert torch.equal(q["W_K"][0], p["W_K"][1]) and torch.equal(q["b_V"][1], p["b_V"][0])
    assert torch.equal(q["b_O"], p["b_O"])
    assert HEAD_AXIS == ("W_Q", "W_O", "b_Q") and GROUP_AXIS == ("W_K", "W_V", "b_K")
    with pytest.raises(ValueError, match="must map each key/value group onto one group"):
        permute_heads(config, p, [0, 2, 1, 3])
    with pytest.raises(ValueError, match="must be a permutation"):
        permute_heads(config, p, [0, 0, 1, 2])
    stack = AttentionConfig(d_model=4, n_heads=2, n_layers=2)
    ps = init_params(stack, 1)
    qs = permute_heads(stack, ps, [1, 0])
    assert torch.equal(qs["W_Q"][1, 0], ps["W_Q"][1, 1]) and torch.equal(qs["W_V"][0, 1], ps["W_V"][0, 0])
    assert _rel_change(stack, ps, qs) <= 1e-12
    latent = AttentionConfig(d_model=4, n_heads=2, head_dim=2, kv_latent=3, bias="v")
    pl = init_params(latent, 2)
    ql = permute_heads(latent, pl, [1, 0])
    assert torch.equal(ql["W_UK"][0], pl["W_UK"][1]) and torch.equal(ql["W_UV"][1], pl["W_UV"][0])
    assert torch.equal(ql["b_V"][0], pl["b_V"][1]) and torch.equal(ql["W_DKV"], pl["W_DKV"])
    assert _rel_change(latent, pl, ql) <= 1e-12


def test_unsupported_group_actions_say_where_the_count_is_checked():
    unsupported = ("idlib.symmetry: the group action for the variant(s) {} is not implemented "
                   "here; their counts are checked against the measured rank instead")
    cases = [(dict(qk_norm="whole"), unsupported.format("qk_norm (qk_norm)")),
             (dict(qk_norm="layernorm", rope_fraction=1.0, head_dim=4),
              unsupported.format("qk_norm (qk_norm)")),
             (dict(sinks=True), unsupported.format("sinks (sinks)")),
             (dict(output_gate=True), unsupported.format("gate (output_gate)")),
             (dict(sinks=True, output_gate=True, kv_latent=3),
              unsupported.format("latent (kv_latent, latent_norm), sinks (sinks), gate (output_gate)"))]
    for kw, message in cases:
        config = AttentionConfig(d_model=8, n_heads=2, **kw)
        with pytest.raises(NotImplementedError) as e:
            random_group_element(config, init_params(config, 0))
        assert str(e.value) == message


@pytest.mark.parametrize("kv_share", [1, 2])
def test_gain_exchange_in_a_stack_moves_each_run_together(kv_share):
    """A stack with QK-norm gains: layers of one key/value run share the exchange exp(s)."""
    config = AttentionConfig(d_model=8, n_heads=2, qk_norm="gain", n_layers=2, kv_share=kv_share)
    p = init_params(config, 0)
    q = random_group_element(config, p, seed=1)
    X = random_inputs(config, 2, 6, 0)
    assert torch.allclose(forward(config, q, X), forward(config, p, X), rtol=0, atol=1e-12)
    ratio = q["g_Q"] / p["g_Q"]                              # (layers, k)
    assert not torch.allclose(ratio, torch.ones_like(ratio))
    assert torch.allclose(ratio[0], ratio[1]) == (kv_share == 2)
