"""The rules of ``counting.check_derived``, word for word and at their boundaries, and the
components ``count`` reports for the layers with extra parameters (norm gains, latent)."""
import math

import pytest
import torch

from idlib.attention import n_params, param_shapes
from idlib.config import AttentionConfig, ConfigError
from idlib.counting import count

LN = ("qk_norm='layernorm' is derived for one layer with RoPE, without latent or centred inputs, "
      "and with head_dim >= 3 (got {k}; without RoPE the centred heads have more symmetry, not derived)")
WHOLE = ("qk_norm='whole' is derived for one layer without latent or centred inputs and with "
         "n_heads * head_dim = {hk} at most d_model = 8")
LATENT_NORM = ("latent_norm=True needs 2 <= kv_latent <= 8 (the input dimension; got kv_latent={C}): the "
               "count for other latent widths is not derived")
STACK_BIAS = ("bias='{b}' with n_layers > 1: value and output biases (letters v, o) shift the residual "
              "stream between layers; that count is not derived")

# (layer, the refusal word for word); each layer breaks exactly one condition of its rule
REFUSED = [
    (dict(d_model=4, n_heads=1, head_dim=6, rope_fraction=1.0),
     "head_dim=6 must be at most d_model=4 when rope_fraction > 0 (the count for a rotary head wider "
     "than the model is not derived)"),
    (dict(d_model=4, n_heads=1, head_dim=4, rope_fraction=1.0, input_centered=True),
     "head_dim=4 must be at most d_model - 1 = 3 when rope_fraction > 0 and input_centered=True (the "
     "count is not derived)"),
    (dict(d_model=8, n_heads=2, qk_norm="layernorm", rope_fraction=1.0, n_layers=2), LN.format(k=4)),
    (dict(d_model=8, n_heads=2, qk_norm="layernorm", rope_fraction=1.0, kv_latent=6), LN.format(k=4)),
    (dict(d_model=8, n_heads=2, qk_norm="layernorm", rope_fraction=1.0, input_centered=True), LN.format(k=4)),
    (dict(d_model=8, n_heads=4, qk_norm="layernorm", rope_fraction=1.0), LN.format(k=2)),
    (dict(d_model=8, n_heads=2, qk_norm="layernorm"), LN.format(k=4)),
    (dict(d_model=8, n_heads=2, qk_norm="layernorm_shared"), LN.format(k=4).replace("'layernorm'", "'layernorm_shared'")),
    (dict(d_model=8, n_heads=2, qk_norm="whole", n_layers=2), WHOLE.format(hk=8)),
    (dict(d_model=8, n_heads=2, qk_norm="whole", kv_latent=6), WHOLE.format(hk=8)),
    (dict(d_model=8, n_heads=2, head_dim=3, qk_norm="whole", input_centered=True), WHOLE.format(hk=6)),
    (dict(d_model=8, n_heads=2, head_dim=6, qk_norm="whole"), WHOLE.format(hk=12)),
    (dict(d_model=4, n_heads=4, qk_norm="plain"),
     "qk_norm='plain' needs head_dim >= 2 (a normalised 1-dim head is a sign; its count is not derived)"),
    (dict(d_model=4, n_heads=1, head_dim=5, qk_norm="plain"),
     "qk_norm='plain' needs head_dim=5 at most the input dimension 4 (d_model); the count for a wider "
     "normalised head is not derived"),
    (dict(d_model=4, n_heads=1, head_dim=4, qk_norm="gain", input_centered=True),
     "qk_norm='gain' needs head_dim=4 at most the input dimension 3 (d_model - 1, input_centered); the "
     "count for a wider normalised head is not derived"),
    (dict(d_model=8, n_heads=2, head_dim=4, kv_latent=3, rope_fraction=1.0),
     "head_dim=4 must be at most kv_latent=3 when rope_fraction > 0 (the count for a rotary head wider "
     "than the latent is not derived)"),
    (dict(d_model=8, n_heads=2, head_dim=4, kv_latent=3, qk_norm="plain"),
     "qk_norm='plain' needs head_dim=4 at most kv_latent=3 (the count for a normalised head wider than "
     "the latent is not derived)"),
    (dict(d_model=8, n_heads=2, kv_latent=1, latent_norm=True), LATENT_NORM.format(C=1)),
    (dict(d_model=8, n_heads=2, kv_latent=9, latent_norm=True), LATENT_NORM.format(C=9)),
    (dict(d_model=4, n_heads=1, head_dim=5, softcap=30.0, bias="k"),
     "softcap with a key bias needs head_dim=5 at most the input dimension 4 (the count for a wider "
     "capped head is not derived)"),
    (dict(d_model=8, n_heads=2, n_layers=2, input_centered=True),
     "input_centered=True with n_layers > 1 is not derived (only the first layer of a residual stack "
     "sees centred inputs)"),
    (dict(d_model=8, n_heads=2, n_layers=2, bias="v"), STACK_BIAS.format(b="v")),
    (dict(d_model=8, n_heads=2, n_layers=2, bias="qo"), STACK_BIAS.format(b="qo")),
]

# each rule's boundary, on the derived side (the refused layers above, one step inside)
DERIVED = [
    dict(d_model=4, n_heads=1, head_dim=4, rope_fraction=1.0),                     # k = d
    dict(d_model=5, n_heads=1, head_dim=4, rope_fraction=1.0, input_centered=True),  # k = d - 1
    dict(d_model=8, n_heads=2, qk_norm="layernorm", rope_fraction=1.0),
    dict(d_model=6, n_heads=2, head_dim=3, qk_norm="layernorm", rope_fraction=2 / 3),  # k = 3
    dict(d_model=8, n_heads=2, qk_norm="whole"),                                   # H k = d
    dict(d_model=8, n_heads=4, qk_norm="plain"),                                   # k = 2
    dict(d_model=4, n_heads=1, head_dim=4, qk_norm="plain"),                       # k = d
    dict(d_model=5, n_heads=1, head_dim=4, qk_norm="gain", input_centered=True),   # k = d - 1
    dict(d_model=8, n_heads=2, head_dim=4, kv_latent=4, rope_fraction=1.0),        # k = C
    dict(d_model=8, n_heads=2, head_dim=4, kv_latent=4, qk_norm="plain"),          # k = C
    dict(d_model=8, n_heads=2, kv_latent=2, latent_norm=True),                     # C = 2
    dict(d_model=8, n_heads=2, kv_latent=8, latent_norm=True),                     # C = d
    dict(d_model=4, n_heads=1, head_dim=4, softcap=30.0, bias="k"),                # k = d
    dict(d_model=4, n_heads=1, head_dim=5, softcap=30.0, bias="q"),                # no key bias
    dict(d_model=8, n_heads=2, n_layers=2, bias="qk"),
]


def _id(kw):
    return ",".join(f"{k}={v}" for k, v in kw.items())


@pytest.mark.parametrize("kw,message", REFUSED, ids=[_id(kw) for kw, _ in REFUSED])
def test_each_rule_refuses_with_its_message(kw, message):
    config = AttentionConfig(**kw)          # a valid layer ...
    with pytest.raises(ConfigError) as err:
        count(config)                       # ... whose count is not derived
    assert str(err.value) == message


@pytest.mark.parametrize("kw", DERIVED, ids=_id)
def test_the_boundary_of_each_rule_is_counted(kw):
    config = AttentionConfig(**kw)
    c = count(config)
    assert c.config == config and c.total == n_params(config) > c.unidentified >= 0


# component -> the parameters it counts
OWNERS = {"g_QK": ("g_Q", "g_K"), "c_QK": ("c_Q", "c_K"), "latent": ("W_DKV",)}


@pytest.mark.parametrize("kw,names", [
    (dict(d_model=8, n_heads=2, qk_norm="gain"), ["qk", "vo", "g_QK"]),
    (dict(d_model=8, n_heads=4, n_kv_heads=2, qk_norm="gain", bias="qkvo"),
     ["qk", "vo", "b_Q", "b_K", "b_V", "b_O", "g_QK"]),
    (dict(d_model=8, n_heads=2, qk_norm="whole"), ["qk", "vo", "g_QK"]),
    (dict(d_model=8, n_heads=2, qk_norm="layernorm", rope_fraction=1.0), ["qk", "vo", "g_QK"]),
    (dict(d_model=8, n_heads=2, qk_norm="layernorm_shared", rope_fraction=1.0), ["qk", "vo", "g_QK", "c_QK"]),
    (dict(d_model=8, n_heads=2, kv_latent=6), ["qk", "vo", "latent"]),
    (dict(d_model=8, n_heads=2, kv_latent=6, latent_norm=True), ["qk", "vo", "latent"]),
], ids=lambda x: _id(x) if isinstance(x, dict) else "")
def test_extra_components_are_named_for_their_parameters(kw, names):
    config = AttentionConfig(**kw)
    c = count(config)
    assert [x.name for x in c.components] == names
    shapes = param_shapes(config)
    for comp in c.components:
        if comp.name in OWNERS:
            assert comp.total == sum(math.prod(shapes[p]) for p in OWNERS[comp.name] if p in shapes)
    assert sum(x.total for x in c.components) == c.total == n_params(config)


@pytest.mark.parametrize("kw,freqs", [
    (dict(d_model=8, n_heads=2, qk_norm="layernorm_shared", rope_fraction=1.0), [0.0, 0.7]),  # c_QK: nu = 2
    (dict(d_model=4, n_heads=1, value_dim=4, bias="v"), None),        # v = b: the value bias undoes all
    (dict(d_model=4, n_heads=1, value_dim=6, bias="v"), None),        # v > b, no output bias: d - G v fixed
    (dict(d_model=4, n_heads=1, value_dim=6, bias="vo"), None),       # v > b with an output bias
    # a latent of C = 2 < d makes b = 2: v > b with G v < d, so d - G v = 3 directions are fixed
    # without an output bias and none with one; at v = b none either
    (dict(d_model=6, n_heads=1, value_dim=3, kv_latent=2, bias="v"), None),
    (dict(d_model=6, n_heads=1, value_dim=3, kv_latent=2, bias="vo"), None),
    (dict(d_model=6, n_heads=1, value_dim=2, kv_latent=2, bias="v"), None),
], ids=["shared-ln-zero-frequency", "v-equals-d", "v-above-d", "v-above-d-with-o", "latent-v-above-b",
        "latent-v-above-b-with-o", "latent-v-equals-b"])
def test_counts_at_the_edges_match_the_measured_rank(kw, freqs):
    from idlib.rank import measure
    config = AttentionConfig(**kw)
    f = None if freqs is None else torch.tensor(freqs, dtype=torch.float64)
    m = measure(config, frequencies=f)
    assert m.certified and m.rank == count(config, f).identified


def test_counts_are_integers():
    """Every count is an int (a float would print as 28.0 in the book's tables)."""
    for kw in [dict(d_model=6, n_heads=2, qk_norm="plain"), dict(d_model=8, n_heads=2, qk_norm="gain"),
               dict(d_model=8, n_heads=2, kv_latent=6, latent_norm=True), dict(d_model=8, n_heads=2,
               qk_norm="layernorm_shared", rope_fraction=1.0), dict(d_model=8, n_heads=4, n_kv_heads=2,
               bias="qkvo", rope_fraction=1.0)]:
        c = count(AttentionConfig(**kw))
        values = [c.total, c.identified, c.unidentified] + [x for comp in c.components
                                                            for x in (comp.total, comp.unidentified)]
        assert all(type(x) is int for x in values), kw


def test_tabulated_frequencies_up_to_the_limit_exactly():
    """rope_base < 1 tabulates the frequencies: 2^22 planes are counted, one more is refused."""
    from idlib.counting import MAX_TABULATED_PLANES
    assert MAX_TABULATED_PLANES == 1 << 22
    at = AttentionConfig(d_model=1 << 23, n_heads=1, rope_fraction=1.0, rope_base=0.5)
    assert count(at).total == n_params(at)
    over = AttentionConfig(d_model=(1 << 23) + 2, n_heads=1, rope_fraction=1.0, rope_base=0.5)
    with pytest.raises(ConfigError) as err:
        count(over)
    assert str(err.value) == ("rope_base=0.5 < 1 with 4194305 rotation planes: at most 4194304 "
                              "are counted")


def test_rotation_classes_in_order_of_first_appearance_and_chains_split_at_the_tolerance():
    from idlib.counting import ROTATION_TOL, _delta, rotation_classes
    assert rotation_classes([0.5, 0.3, 0.3, 0.5, 0.5, 0.9], 0) == ([3, 2, 1], 0, 0)
    assert rotation_classes([0.9, 0.3, 0.5, 0.3], 1) == ([1, 2, 1], 1, 0)
    # a chain 0.6 delta apart: within the tolerance of its neighbours, not of its far end
    delta = _delta(ROTATION_TOL)
    chain = [1.0 + i * 0.6 * delta for i in range(5)]
    assert rotation_classes(chain, 0) == ([1, 2, 2], 0, 0)

