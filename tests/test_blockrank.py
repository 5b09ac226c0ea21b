"""The block route (idlib.blockrank): its closed-form blocks against torch.func, its certified rank
against the dense route and the closed form, and its refusals."""
import argparse
import json
import math

import pytest
import torch

import idlib.blockrank as br
import idlib.rank as rank
from idlib import cli, variants
from idlib.attention import flatten, forward, init_params, n_params, unflatten
from idlib.config import AttentionConfig
from idlib.counting import count
from idlib.rank import measure, measure_until_certified, sequence_jacobian, takes_block_route
from idlib.studies.sweep import PROFILES, sweep_configs

SUPPORTED = {   # one layer per supported variant, and their combinations
    "multi-head": dict(d_model=8, n_heads=2),
    "biases qkvo": dict(d_model=8, n_heads=2, bias="qkvo"),
    "biases qv, k != v": dict(d_model=10, n_heads=2, head_dim=4, value_dim=3, bias="qv"),
    "output bias, H v < d": dict(d_model=8, n_heads=2, head_dim=6, value_dim=3, bias="o"),
    "GQA + q, k biases": dict(d_model=8, n_heads=4, n_kv_heads=2, bias="qk"),
    "multi-query + biases": dict(d_model=8, n_heads=4, n_kv_heads=1, bias="qkv"),
    "partial RoPE + biases": dict(d_model=8, n_heads=2, rope_fraction=0.5, bias="kv"),
    "full RoPE, causal": dict(d_model=6, n_heads=3, rope_fraction=1.0, bias="vo", causal=True),
    "GQA, full RoPE, causal": dict(d_model=12, n_heads=4, n_kv_heads=2, head_dim=4, value_dim=3,
                                   rope_fraction=1.0, bias="qkvo", causal=True),
    "causal GQA": dict(d_model=8, n_heads=4, n_kv_heads=2, causal=True),
}
UNSUPPORTED = [dict(qk_norm="plain"), dict(softcap=30.0), dict(alibi=True), dict(sinks=True),
               dict(output_gate=True), dict(kv_latent=4), dict(input_centered=True),
               dict(n_layers=2)]


def _config(kw):
    return AttentionConfig(**kw)


@pytest.mark.parametrize("name", ["biases qkvo", "GQA, full RoPE, causal", "multi-query + biases"])
def test_blocks_are_the_jacobian_blocks(name):
    """Every stage's K (all groups) and Y against torch.func at the route's point; the absolute
    version bounds each entry; the later coordinates' columns vanish exactly (the triangle)."""
    config = _config(SUPPORTED[name])
    p = br.block_point(config, init_params(config, 0))
    theta = flatten(p)
    d, mv = config.d_model, config.group_size * config.value_dim

    def f(t, x):
        return forward(config, unflatten(config, t), x[None]).reshape(-1)

    for stage in br.stages(config):
        X = br.stage_inputs(config, stage, 0)
        N = X.shape[0] * X.shape[1]
        J = sequence_jacobian(f, theta, X).reshape(N, d, -1)
        terms = br.stage_terms(config, p, X, stage)
        Y, FY = br.y_block(config, terms, stage)
        K = br.stage_blocks(config, terms, stage, range(config.n_kv_heads))
        F = br.stage_blocks(config, terms, stage, range(config.n_kv_heads), absolute=True)
        for g in range(config.n_kv_heads):
            ref = J[:, g * mv:(g + 1) * mv][:, :, br.group_index(config, stage, g)].transpose(0, 1)
            assert torch.allclose(K[g], ref, rtol=0, atol=1e-13 * max(1.0, ref.abs().max().item()))
            assert (F[g] >= K[g].abs() * (1 - 1e-12)).all()
        for i, positions in enumerate(br.y_index(config, stage)):
            assert torch.allclose(J[:, torch.arange(d), positions], Y[:, i:i + 1].expand(N, d),
                                  rtol=0, atol=1e-13)
        assert (FY >= Y.abs()).all()
        later = br._later_index(config, stage)
        assert later.numel() == 0 or J[:, :, later].abs().max().item() == 0.0


@pytest.mark.parametrize("name", list(SUPPORTED))
def test_certified_rank_is_the_dense_rank_and_the_closed_form(name):
    config = _config(SUPPORTED[name])
    b = br.block_rank(config)
    dense = measure(config, method="dense")
    assert dense.certified and b.certified
    assert b.rank == b.closed_form == dense.rank == count(config).identified
    assert b.n_params == n_params(config) and b.gap >= 1e4
    assert b.block_sigma_lower.numel() == b.n_blocks and (b.block_sigma_lower > 0).all()
    assert b.n_rows == sum(s.n_tokens for s in br.stages(config)) * config.d_model


def test_the_bound_is_the_rank_of_the_jacobian_at_the_point():
    """At the route's own point and inputs, the dense rank of the whole J is the certified bound."""
    config = _config(SUPPORTED["GQA + q, k biases"])
    p = br.block_point(config, init_params(config, 0))
    X = torch.cat([br.stage_inputs(config, s, 0).reshape(-1, config.d_model)
                   for s in br.stages(config)])

    def f(t, x):
        return forward(config, unflatten(config, t), x[None]).reshape(-1)

    stage_rows = [br.stage_inputs(config, s, 0) for s in br.stages(config)]
    J = torch.cat([sequence_jacobian(f, flatten(p), x) for x in stage_rows])
    sv = torch.linalg.svdvals(J)
    r, gap = rank.rank_from_singular_values(sv, tuple(J.shape))
    b = br.block_rank(config)
    assert X.shape[0] * config.d_model == J.shape[0] == b.n_rows
    assert r == b.rank == count(config).identified and gap >= 1e4


def test_measure_takes_the_block_route_above_the_dense_threshold():
    config = AttentionConfig(d_model=24, n_heads=4)                 # 2,304 parameters
    assert n_params(config) > rank.AUTO_DENSE_MAX_PARAMS and takes_block_route(config)
    m = measure(config)
    assert m.method == "block" and m.certified and m.rank == count(config).identified
    assert m.singular_values.dtype == torch.float64
    assert torch.equal(m.singular_values, m.singular_values.sort().values)
    # given parameters or inputs are measured where they are: not by the block route
    assert not takes_block_route(config, params=init_params(config, 1))
    assert not takes_block_route(config, seq_len=5) and not takes_block_route(config, n_sequences=3)
    assert measure(AttentionConfig(d_model=8, n_heads=2)).method == "dense"       # small: dense
    forced = measure(AttentionConfig(d_model=8, n_heads=2, bias="qkvo"), method="block")
    assert forced.method == "block" and forced.certified and forced.rank == 208


def test_spread_attempts_stay_on_the_block_route(monkeypatch):
    seen = []
    real = br.block_rank

    def spy(config, params=None, seed=0, **kw):
        seen.append((seed, params is not None))
        out = real(config, params=params, seed=seed, **kw)
        return br.BlockRank(**{**out.__dict__, "certified": False, "gap": 1.0})

    monkeypatch.setattr(br, "block_rank", spy)
    monkeypatch.setattr(rank, "STRUCTURED_FALLBACK_MAX_PARAMS", 0)
    config = AttentionConfig(d_model=24, n_heads=4)
    m, attempts = measure_until_certified(config, seed=5, max_attempts=3, spread_from=1)
    assert m.method == "block" and not m.certified
    assert seen == [(5, False), (6, True), (7, True)]
    assert [a["qk_scale"] for a in attempts] == [1.0, 2.0, 2.0]


@pytest.mark.parametrize("kw", UNSUPPORTED, ids=lambda kw: ",".join(kw))
def test_undeclared_variants_never_take_the_route(kw):
    config = AttentionConfig(d_model=8, n_heads=2, **kw)
    assert not variants.supports(config, "block")
    rows = variants.named(variants.unsupported(config, "block"))
    assert br.applicable(config) == (f"variant(s) {rows}: no block structure declared (the block "
                                     "route takes a layer only when every variant in it declares it)")
    with pytest.raises(br.BlockError, match="no block structure declared"):
        measure(config, method="block")
    assert not takes_block_route(config)


def test_the_capability_is_declared_by_the_tested_rows_only():
    declaring = {row.name for row in variants.ROWS
                 if "block" in row.capabilities or any("block" in m.capabilities for m in row.modes)}
    assert declaring == {"heads", "bias", "rope", "causal"}
    assert "block" in variants.CAPABILITIES


@pytest.mark.parametrize("kw, message", [
    (dict(d_model=4, n_heads=1, head_dim=6), "head_dim=6 and value_dim=6 must be at most d_model=4"),
    (dict(d_model=4, n_heads=2, head_dim=2, value_dim=3), "n_heads * value_dim = 6 must be at most"),
])
def test_sizes_the_point_cannot_have_are_refused(kw, message):
    config = AttentionConfig(**kw)
    assert message in br.applicable(config)
    with pytest.raises(br.BlockError, match=message.split(" must")[0].replace("*", r"\*")):
        br.block_rank(config)


def test_a_wrong_block_is_caught_by_the_forward_pass(monkeypatch):
    real = br.stage_blocks

    def off_by_a_little(config, terms, stage, groups, absolute=False, row_order=True):
        K = real(config, terms, stage, groups, absolute, row_order)
        if not absolute and K.numel():
            K = K.clone()
            K[(0,) * K.dim()] += 1e-6
        return K

    monkeypatch.setattr(br, "stage_blocks", off_by_a_little)
    with pytest.raises(br.BlockError, match="differ from the layer's forward pass"):
        br.block_rank(AttentionConfig(d_model=8, n_heads=2))


def test_a_variant_the_blocks_do_not_model_is_caught(monkeypatch):
    """Soft-capped scores change every derivative through the scores: forcing the route onto such
    a layer must fail the check, never certify."""
    monkeypatch.setattr(br, "applicable", lambda config: None)
    with pytest.raises(br.BlockError, match="differ from the layer's forward pass"):
        br.block_rank(AttentionConfig(d_model=8, n_heads=2, softcap=2.0))


def test_a_degenerate_point_is_not_certified():
    """A head whose query weights vanish sees nothing of its QK parameters: the blocks' ranks sum
    below P - U and the route says so (never a rank it has only bounded)."""
    config = AttentionConfig(d_model=8, n_heads=2)
    params = init_params(config, 0)
    params["W_Q"] = params["W_Q"].clone()
    params["W_Q"][0] = 0.0
    b = br.block_rank(config, params=params)
    assert b.rank < b.closed_form and not b.certified
    m = measure(config, params=params, method="block")
    assert m.method == "block" and not m.certified and m.rank == b.rank


def test_certificate_is_a_lower_bound_on_the_scaled_block():
    """certify_block on blocks with known singular values: the bound never exceeds the smallest
    kept singular value of the scaled block and is within the search's factor 2 (mu / 4) of it."""
    gen = torch.Generator().manual_seed(0)
    n_out, N, c = 3, 20, 6
    U_, _ = torch.linalg.qr(torch.randn(n_out * N, c, generator=gen, dtype=torch.float64))
    V_, _ = torch.linalg.qr(torch.randn(c, c, generator=gen, dtype=torch.float64))
    s = torch.tensor([1.0, 0.5, 0.3, 0.1, 0.05, 1e-3], dtype=torch.float64)
    K = ((U_ * s) @ V_.T).reshape(n_out, N, c)
    Y = torch.zeros(N, 0, dtype=torch.float64)
    cert = br.certify_block(Y, Y, K, K.abs(), 1e-14)
    D = br.power_of_two_scale(K.abs().reshape(-1, c).norm(dim=0))
    true = torch.linalg.svdvals((K * D).reshape(-1, c))[-1].item()
    assert cert.rank == c and 0 < cert.sigma_lower <= true and cert.sigma_lower >= true / 2.01
    assert cert.gap >= 1e4 and cert.gap == cert.sigma_lower / max(cert.rounding, cert.tolerance)
    # a column in the span of the others is dropped, not certified
    K2 = torch.cat([K, K[..., :1] + K[..., 1:2]], -1)
    cert2 = br.certify_block(Y, Y, K2, K2.abs(), 1e-14)
    assert cert2.rank == c and cert2.kept.numel() == c
    # with Y: columns in span(I (x) Y) add nothing
    Yb = torch.randn(N, 2, generator=gen, dtype=torch.float64)
    K3 = torch.cat([K, torch.einsum("ny,jy->jn", Yb, torch.randn(n_out, 2, generator=gen,
                                                                    dtype=torch.float64))[..., None]], -1)
    cert3 = br.certify_block(Yb, Yb.abs(), K3, K3.abs(), 1e-14)
    assert cert3.rank == n_out * 2 + c


def test_rounding_bound_grows_with_the_scores():
    config = AttentionConfig(d_model=8, n_heads=2)
    stage = br.stages(config)[-1]
    p = br.block_point(config, init_params(config, 0))
    X = br.stage_inputs(config, stage, 0)
    small = br.stage_terms(config, p, X, stage).e_E
    large = br.stage_terms(config, p, 16 * X, stage).e_E
    assert 0 < small < large < 1e-9
    assert br.gamma(10) == pytest.approx(10 * 2.0 ** -53, rel=1e-12)


def test_explicit_cpu_device_and_results_on_the_cpu():
    config = AttentionConfig(d_model=8, n_heads=2, bias="qkvo")
    for method in ("dense", "structured", "block"):
        m = measure(config, method=method, device=torch.device("cpu"))
        assert m.certified and m.rank == 208 and m.singular_values.device.type == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_every_route_runs_on_cuda_in_float64():
    config = AttentionConfig(d_model=8, n_heads=4, n_kv_heads=2, rope_fraction=1.0, bias="qkvo",
                             causal=True)
    for method in ("dense", "structured", "block"):
        cpu = measure(config, method=method)
        gpu = measure(config, method=method, device="cuda")
        assert gpu.certified and gpu.rank == cpu.rank == count(config).identified
        assert math.isclose(math.log10(gpu.gap), math.log10(cpu.gap), abs_tol=1.0)
    b = br.block_rank(AttentionConfig(d_model=64, n_heads=8), device="cuda")
    assert b.certified and b.factors["device"].startswith("cuda")


def _verify_args(**kw):
    base = dict(attempts=1, spread_from=4, seed=0, max_params=None, device="cpu", method="auto")
    return argparse.Namespace(**(base | kw))


def test_cli_defaults_let_the_block_route_measure_large_layers():
    gpt2 = AttentionConfig(d_model=768, n_heads=12)
    args = _verify_args()
    cli.check_verify_args(args, gpt2)                    # within the defaults: nothing raised
    assert args.max_params == cli.BLOCK_MAX_PARAMS >= n_params(gpt2)
    assert args.device == torch.device("cpu")
    assert cli.measurement_bytes(gpt2) == br.estimated_bytes(gpt2) < 16e9
    assert cli.measurement_bytes(AttentionConfig(d_model=256, n_heads=16)) < 4e9
    args = _verify_args()
    cli.check_verify_args(args, AttentionConfig(d_model=24, n_heads=4, input_centered=True))
    assert args.max_params == cli.STRUCTURED_MAX_PARAMS


@pytest.mark.parametrize("device, message", [
    ("tpu", "--device='tpu' must be cpu or cuda"),
    ("cuda:x", "--device='cuda:x' must be cpu or cuda"),
])
def test_cli_bad_device_is_one_line(device, message, capsys):
    assert cli.main(["verify", "--d-model", "4", "--device", device]) == 2
    err = capsys.readouterr().err
    assert err.startswith("idlib: error: ") and message in err and len(err.splitlines()) == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_cli_cuda_without_a_gpu_is_one_line(capsys):
    assert cli.main(["verify", "--d-model", "4", "--device", "cuda"]) == 2
    assert "--device='cuda': no CUDA device is available here" in capsys.readouterr().err


def test_cli_verify_reports_the_route(capsys):
    assert cli.main(["verify", "--d-model", "24", "--heads", "4", "--json"]) == 0
    n = json.loads(capsys.readouterr().out)["numerical"]
    assert n["method"] == "block" and n["certified"] and n["rank"] == 2016
    assert cli.main(["verify", "--d-model", "8", "--heads", "2", "--method", "block", "--json"]) == 0
    n = json.loads(capsys.readouterr().out)["numerical"]
    assert n["method"] == "block" and n["certified"] and n["rank"] == 192


def test_cli_method_that_does_not_apply_is_one_line(capsys):
    assert cli.main(["verify", "--d-model", "8", "--heads", "2", "--qk-norm", "plain",
                     "--method", "block"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--method block does not apply to this layer: variant(s) " \
        "qk_norm (qk_norm): no block structure declared" in err


def test_on_the_agreement_sweep_the_route_finds_the_dense_rank():
    """Every fourth layer of the appendix's sweep (default profile) that the route applies to:
    a certified block rank is the dense route's certified rank and the closed form; an
    uncertified one is a lower bound on it (the route then falls back). At the full sweep,
    132 of the 149 layers it applies to are certified (the rest fall back)."""
    knobs = PROFILES["default"]
    configs = sweep_configs(knobs["n_configs"], 0, 24, knobs["max_params"], knobs["n_wide"],
                            knobs["max_params_wide"])[::4]
    taken = certified = 0
    for config in configs:
        if br.applicable(config) is not None:
            continue
        taken += 1
        b = br.block_rank(config, seed=0)
        dense = measure(config, seed=0, method="dense")
        assert dense.certified, config
        if b.certified:
            certified += 1
            assert b.rank == dense.rank == n_params(config) - count(config).unidentified, config
        else:
            assert b.rank <= dense.rank, config
    assert taken >= 30 and certified >= 0.75 * taken, (taken, certified)


def test_rows_in_any_order_and_scaling_in_place_certify_the_same():
    """stage_blocks(row_order=False) holds the same rows (the Gram matrices and column norms the
    certificate reads are those of the ordered block), and certify_stage gives the same
    certificate with K scaled in place."""
    config = AttentionConfig(d_model=12, n_heads=3, bias="qkvo")
    p = init_params(config, 0)
    for stage in br.stages(config)[2:4]:
        X = br.stage_inputs(config, stage, 0, torch.device("cpu"))
        terms = br.stage_terms(config, p, X, stage)
        groups = range(config.n_kv_heads)
        ordered = br.stage_blocks(config, terms, stage, groups)
        loose = br.stage_blocks(config, terms, stage, groups, row_order=False)
        G, c = ordered.shape[0], ordered.shape[-1]
        a, b = ordered.reshape(G, -1, c), loose.reshape(G, -1, c)
        assert torch.equal(a.sort(dim=1).values, b.sort(dim=1).values)
        assert not torch.equal(a, b)
        Y, FY = br.y_block(config, terms, stage)
        F = br.stage_blocks(config, terms, stage, groups, absolute=True, row_order=False)
        one = br.certify_stage(Y[:, :0], FY[:, :0], loose, F, terms.e_E)
        two = br.certify_stage(Y[:, :0], FY[:, :0], loose.clone(), F, terms.e_E,
                               scale_in_place=True)
        assert [(x.rank, x.sigma_lower, x.gap) for x in one] == \
            [(x.rank, x.sigma_lower, x.gap) for x in two]
