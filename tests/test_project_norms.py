"""attention.project with LayerNorm query/key norms and gains away from 1, against the formula
q_h = LN(x W_Q^h) * g_Q^h (per head) or LN(x W_Q^h) * g_Q + c_Q (shared), then RoPE."""
import pytest
import torch

from idlib.attention import apply_rope, init_params, project, random_inputs, rope_frequencies
from idlib.config import AttentionConfig


def _ln(y):
    y = y - y.mean(-1, keepdim=True)
    return y / y.pow(2).mean(-1, keepdim=True).sqrt()


@pytest.mark.parametrize("qk_norm", ["layernorm", "layernorm_shared"])
def test_layernorm_gains_and_shifts_enter_as_the_formula_says(qk_norm):
    config = AttentionConfig(d_model=8, n_heads=4, n_kv_heads=2, qk_norm=qk_norm, rope_fraction=1.0)
    params = dict(init_params(config, 0))
    gen = torch.Generator().manual_seed(1)
    for name in [n for n in ("g_Q", "g_K", "c_Q", "c_K") if n in params]:
        params[name] = 0.5 + torch.rand(params[name].shape, generator=gen, dtype=torch.float64)
    X = random_inputs(config, 2, 5, 0)
    q, k, v = project(config, params, X)
    qq = _ln(torch.einsum("bnd,hdk->bhnk", X, params["W_Q"]))
    kk = _ln(torch.einsum("bnd,gdk->bgnk", X, params["W_K"]))
    if qk_norm == "layernorm":
        qq, kk = qq * params["g_Q"][:, None, :], kk * params["g_K"][:, None, :]
    else:
        qq, kk = qq * params["g_Q"] + params["c_Q"], kk * params["g_K"] + params["c_K"]
    kk = kk.repeat_interleave(config.group_size, dim=1)
    pos, freqs = torch.arange(5), rope_frequencies(config)
    assert torch.allclose(q, apply_rope(qq, freqs, pos), rtol=0, atol=1e-13)
    assert torch.allclose(k, apply_rope(kk, freqs, pos), rtol=0, atol=1e-13)


def test_project_takes_one_layer():
    config = AttentionConfig(d_model=8, n_heads=2, n_layers=2)
    with pytest.raises(ValueError) as err:
        project(config, init_params(config, 0), random_inputs(config, 1, 3, 0))
    assert str(err.value) == "project() takes one layer; use layer_params(config, params, l)"
