"""The forward pass against PyTorch's attention and against an independent loop implementation."""
import math

import pytest
import torch

from idlib.attention import (flatten, forward, forward_sdpa, init_params, n_params, param_shapes,
                             param_slices, random_inputs, rope_frequencies, unflatten)
from idlib.config import AttentionConfig

CONFIGS = [
    dict(d_model=8),
    dict(d_model=8, n_heads=2, bias="qkvo"),
    dict(d_model=8, n_heads=4, causal=True),
    dict(d_model=8, n_heads=4, n_kv_heads=2, bias="kv"),
    dict(d_model=8, n_heads=4, n_kv_heads=1, causal=True, bias="o"),
    dict(d_model=6, n_heads=3, head_dim=5, value_dim=2, bias="qv"),
    dict(d_model=4, n_heads=2, head_dim=7, value_dim=9, causal=True),          # k, v > d
    dict(d_model=8, n_heads=2, rope_fraction=1.0, bias="qk"),
    dict(d_model=8, n_heads=2, n_kv_heads=1, head_dim=6, rope_fraction=2 / 3, causal=True,
         bias="qkvo"),
    dict(d_model=6, n_heads=2, rope_fraction=2 / 3, rope_base=100.0),
]


def _setup(kw, seed=0, n_seq=3, seq_len=7):
    config = AttentionConfig(**kw)
    return config, init_params(config, seed), random_inputs(config, n_seq, seq_len, seed)


@pytest.mark.parametrize("kw", CONFIGS, ids=str)
def test_forward_equals_sdpa(kw):
    config, p, X = _setup(kw)
    y, y_ref = forward(config, p, X), forward_sdpa(config, p, X)
    assert y.dtype == torch.float64 and y.shape == X.shape
    assert (y - y_ref).abs().max().item() <= 1e-12


def _rotation(k, r, freqs, pos):
    """The k x k RoPE matrix at one position: planes (i, i + r/2) turned by pos * theta_i."""
    R = torch.eye(k, dtype=torch.float64)
    for i in range(r // 2):
        a = pos * freqs[i].item()
        c, s = math.cos(a), math.sin(a)
        j = i + r // 2
        R[i, i], R[i, j], R[j, i], R[j, j] = c, -s, s, c
    return R


def _naive_forward(config, p, X):
    """Loops over sequences, heads and positions; no code shared with idlib.attention."""
    B, n, d = X.shape
    H, m, k, r = config.n_heads, config.group_size, config.head_dim, config.rotary_dim
    freqs = torch.tensor([config.rope_base ** (-2 * i / r) for i in range(r // 2)], dtype=torch.float64)
    rot = [_rotation(k, r, freqs, t) for t in range(n)]
    out = torch.zeros(B, n, d, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            g = h // m
            Q = X[b] @ p["W_Q"][h] + (p["b_Q"][h] if "b_Q" in p else 0)
            K = X[b] @ p["W_K"][g] + (p["b_K"][g] if "b_K" in p else 0)
            V = X[b] @ p["W_V"][g] + (p["b_V"][g] if "b_V" in p else 0)
            Q = torch.stack([rot[t] @ Q[t] for t in range(n)])
            K = torch.stack([rot[t] @ K[t] for t in range(n)])
            for i in range(n):
                keys = range(i + 1) if config.causal else range(n)
                s = torch.tensor([Q[i] @ K[j] / math.sqrt(k) for j in keys], dtype=torch.float64)
                w = torch.exp(s - s.max())
                w = w / w.sum()
                out[b, i] += sum(w[t] * V[j] for t, j in enumerate(keys)) @ p["W_O"][h]
    if "b_O" in p:
        out += p["b_O"]
    return out


@pytest.mark.parametrize("kw", CONFIGS, ids=str)
def test_forward_equals_independent_loops(kw):
    config, p, X = _setup(kw, seed=1, n_seq=2, seq_len=5)
    assert (forward(config, p, X) - _naive_forward(config, p, X)).abs().max().item() <= 1e-12


@pytest.mark.parametrize("d, H, bias, causal", [(8, 1, False, False), (8, 2, True, False),
                                                (12, 3, True, True), (6, 6, False, True)])
def test_forward_equals_torch_multihead_attention(d, H, bias, causal):
    """Plain multi-head attention is torch.nn.MultiheadAttention with the weights mapped."""
    config = AttentionConfig(d_model=d, n_heads=H, bias="qkvo" if bias else "", causal=causal)
    p = init_params(config, seed=2)
    X = random_inputs(config, 3, 6, seed=2)
    k = d // H
    mha = torch.nn.MultiheadAttention(d, H, bias=bias, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        # nn.Linear computes x W^T: rows h*k..(h+1)*k of W are head h's columns of W_Q[h]
        cat = lambda W: W.permute(1, 0, 2).reshape(d, H * k).T              # noqa: E731
        mha.in_proj_weight.copy_(torch.cat([cat(p["W_Q"]), cat(p["W_K"]), cat(p["W_V"])]))
        mha.out_proj.weight.copy_(p["W_O"].reshape(H * k, d).T)
        if bias:
            mha.in_proj_bias.copy_(torch.cat([p["b_Q"].reshape(-1), p["b_K"].reshape(-1),
                                              p["b_V"].reshape(-1)]))
            mha.out_proj.bias.copy_(p["b_O"])
    mask = torch.ones(6, 6, dtype=torch.bool).triu(1) if causal else None
    with torch.no_grad():
        y_ref, _ = mha(X, X, X, attn_mask=mask, need_weights=False)
    assert (forward(config, p, X) - y_ref).abs().max().item() <= 1e-12


def test_rope_scores_depend_on_relative_position_only():
    """Full RoPE: shifting every position by the same offset leaves q_i . k_j unchanged."""
    config = AttentionConfig(d_model=8, head_dim=8, rope_fraction=1.0)
    f = rope_frequencies(config)
    assert torch.allclose(f, torch.tensor([10000 ** (-2 * i / 8) for i in range(4)], dtype=torch.float64))
    q, kk = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    s = lambda i, j: (_rotation(8, 8, f, i) @ q) @ (_rotation(8, 8, f, j) @ kk)  # noqa: E731
    assert abs(s(2, 5) - s(7, 10)) <= 1e-12 and abs(s(2, 5) - s(2, 6)) > 1e-3


def test_causal_output_ignores_the_future():
    config, p, X = _setup(dict(d_model=6, n_heads=2, causal=True, bias="qkvo"))
    X2 = X.clone()
    X2[:, 4:] = torch.randn_like(X2[:, 4:])
    assert (forward(config, p, X)[:, :4] - forward(config, p, X2)[:, :4]).abs().max() <= 1e-14


def test_param_shapes_and_flat_vector():
    config = AttentionConfig(d_model=6, n_heads=4, n_kv_heads=2, head_dim=3, value_dim=5, bias="qkvo")
    shapes = param_shapes(config)
    assert shapes == {"W_Q": (4, 6, 3), "W_K": (2, 6, 3), "W_V": (2, 6, 5), "W_O": (4, 5, 6),
                      "b_Q": (4, 3), "b_K": (2, 3), "b_V": (2, 5), "b_O": (6,)}
    assert n_params(config) == 72 + 36 + 60 + 120 + 12 + 6 + 10 + 6
    p = init_params(config, seed=5)
    theta = flatten(p)
    assert theta.numel() == n_params(config)
    back = unflatten(config, theta)
    assert all(torch.equal(back[k], p[k]) for k in p)
    sl = param_slices(config)
    assert torch.equal(theta[sl["W_V"]].reshape(2, 6, 5), p["W_V"])
    assert torch.equal(init_params(config, seed=5)["W_Q"], p["W_Q"])          # seeded
    assert not torch.equal(init_params(config, seed=6)["W_Q"], p["W_Q"])


def test_forward_sdpa_runs_the_residual_stack():
    config = AttentionConfig(d_model=8, n_heads=2, n_layers=2, kv_share=2, causal=True)
    p = init_params(config, 0)
    X = random_inputs(config, 2, 5, 0)
    assert torch.allclose(forward_sdpa(config, p, X), forward(config, p, X), rtol=0, atol=1e-12)


def test_a_stack_passes_explicit_frequencies_to_every_layer():
    from idlib.attention import layer_config, layer_params
    config = AttentionConfig(d_model=8, n_heads=2, rope_fraction=1.0, n_layers=2, causal=True)
    p = init_params(config, 0)
    X = random_inputs(config, 2, 5, 0)
    freqs = torch.tensor([0.3, 1.1], dtype=torch.float64)
    Y = X
    for layer in range(2):
        Y = Y + forward(layer_config(config), layer_params(config, p, layer), Y, freqs)
    assert torch.allclose(forward(config, p, X, freqs), Y, rtol=0, atol=1e-13)
    assert not torch.allclose(forward(config, p, X), Y, atol=1e-6)


def test_softcap_is_c_tanh_of_the_scores():
    from idlib.attention import attention_weights, project
    config = AttentionConfig(d_model=8, n_heads=2, causal=True, softcap=0.5)
    p = init_params(config, 0)
    q, k, _ = project(config, p, random_inputs(config, 2, 5, 0))
    s = q @ k.transpose(-1, -2) / 2.0                       # head_dim 4
    s = 0.5 * torch.tanh(s / 0.5) + torch.full((5, 5), float("-inf")).triu(1)
    assert torch.allclose(attention_weights(config, q, k), torch.softmax(s, dim=-1), rtol=0, atol=1e-14)


def test_defaults_are_seed_zero_and_the_documented_laws():
    """init_params: weights N(0, 1/fan_in), biases N(0, 1/4), gains 1 + N(0, 1/4); inputs from
    seed 10_000 + seed; every default seed is 0."""
    config = AttentionConfig(d_model=8, n_heads=2, bias="qkvo", qk_norm="gain")
    p, p0 = init_params(config), init_params(config, 0)
    assert all(torch.equal(p[k], p0[k]) for k in p)
    big = init_params(AttentionConfig(d_model=64, n_heads=1, bias="qkvo", qk_norm="gain"), 0)
    assert abs(big["W_Q"].std().item() * math.sqrt(64) - 1) < 0.05
    assert abs(big["b_Q"].std().item() - 0.5) < 0.15 and abs(big["g_Q"].mean().item() - 1) < 0.2
    X = random_inputs(config, 2, 3)
    want = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(10_000), dtype=torch.float64)
    assert torch.equal(X, random_inputs(config, 2, 3, 0)) and torch.equal(X, want)
    assert torch.equal(random_inputs(config, 2, 3, 1),
                       torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(10_001), dtype=torch.float64))
