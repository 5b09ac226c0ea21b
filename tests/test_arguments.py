"""Every public function's arguments, checked by its declarations (idlib.arguments).

The invalid calls are generated from the declarations themselves: each rule says how to break
it (``Rule.bad``), and each must give one ConfigError line in the template
``<function>: <argument>=<value> must be <rule>``, before any work.  Hypothesis then throws
arbitrary values at every argument: the answer is ConfigError or the call's result, never a
bare TypeError / AttributeError / RuntimeError or a silently different layer.
"""
from __future__ import annotations

import importlib
import inspect

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idlib import arguments
from idlib.attention import flatten, init_params, n_params, random_inputs
from idlib.config import AttentionConfig, ConfigError, LatentAttentionConfig

MODULES = ["idlib.attention", "idlib.counting", "idlib.rank", "idlib.symmetry", "idlib.conservation",
           "idlib.verdict"]
ROPE = AttentionConfig(d_model=8, n_heads=2, rope_fraction=1.0, bias="qkvo")
WHOLE = AttentionConfig(d_model=8, n_heads=2, qk_norm="whole")
PARAMS = init_params(ROPE)
X = random_inputs(ROPE, 2, 5)
THETA = flatten(PARAMS)
ANGLES = [0.3, 0.7]
NEW = {k: v + 0.01 for k, v in PARAMS.items()}

# one valid call per checked public function (keyword arguments)
BASE = {
    "param_shapes": dict(config=ROPE), "n_params": dict(config=ROPE),
    "init_params": dict(config=ROPE, seed=0), "random_inputs": dict(config=ROPE, n_sequences=2, seq_len=5),
    "forward": dict(config=ROPE, params=PARAMS, X=X), "forward_sdpa": dict(config=ROPE, params=PARAMS, X=X),
    "unflatten": dict(config=ROPE, theta=THETA),
    "count": dict(config=ROPE), "layer_classes": dict(config=ROPE),
    "rotation_classes": dict(frequencies=ANGLES, pass_dims=0),
    "rope_commutant_dim": dict(frequencies=ANGLES, pass_dims=0),
    "orthogonal_commutant_dim": dict(frequencies=ANGLES, pass_dims=0),
    "gain_fiber": dict(frequencies=ANGLES, pass_dims=0),
    "measure": dict(config=ROPE), "measure_until_certified": dict(config=ROPE),
    "measure_and_check": dict(config=ROPE),
    "chart": dict(config=ROPE, params=PARAMS), "random_group_element": dict(config=ROPE, params=PARAMS),
    "orbit_generators": dict(config=ROPE, params=PARAMS), "tangent_basis": dict(config=ROPE, params=PARAMS),
    "permute_heads": dict(config=ROPE, params=PARAMS, head_perm=[1, 0]),
    "whole_norm_action": dict(config=WHOLE, params=init_params(WHOLE)),
    "random_element": dict(config=ROPE, params=PARAMS),
    "tangent_coords": dict(config=ROPE, params=PARAMS, update=THETA),
    "tangent_part": dict(config=ROPE, params=PARAMS, update=THETA),
    "overlap": dict(config=ROPE, params=PARAMS, update=THETA),
    "conserved": dict(config=ROPE, params=PARAMS), "balance": dict(config=ROPE, params=PARAMS),
    "project_step": dict(config=ROPE, old=PARAMS, new=NEW),
}
EXPENSIVE = {"measure", "measure_until_certified", "measure_and_check"}


def checked_functions() -> dict[str, object]:
    out = {}
    for name in MODULES:
        module = importlib.import_module(name)
        for attr, fn in vars(module).items():
            if callable(fn) and hasattr(fn, "rules") and not attr.startswith("_"):
                out[fn.__name__] = fn
    return out


FUNCTIONS = checked_functions()


def _arguments(name: str) -> dict:
    """The valid call's arguments, defaults filled in."""
    bound = inspect.signature(FUNCTIONS[name]).bind(**BASE[name])
    bound.apply_defaults()
    return dict(bound.arguments)


CASES = [(name, arg, i) for name, fn in sorted(FUNCTIONS.items()) if name in BASE
         for arg in fn.rules for i in range(len(fn.rules[arg].bad(_arguments(name))))]


def test_every_checked_function_has_a_valid_call_and_it_runs():
    assert set(FUNCTIONS) == set(BASE), "a checked function without a valid call in BASE (or gone)"
    for name, fn in sorted(FUNCTIONS.items()):
        if name not in EXPENSIVE:
            fn(**BASE[name])


@pytest.mark.parametrize("name, arg, i", CASES, ids=str)
def test_each_declared_bad_value_is_refused_in_one_line(name, arg, i):
    fn = FUNCTIONS[name]
    bad = fn.rules[arg].bad(_arguments(name))[i]
    with pytest.raises(ConfigError) as e:
        fn(**{**BASE[name], arg: bad})
    message = str(e.value)
    assert message.startswith(f"{name}: {arg}=") and " must be " in message and "\n" not in message


def test_the_silently_wrong_calls_of_the_issue_are_refused():
    """2-D frequencies were flattened; params or frequencies of another layer measured another
    layer; a negative pass_dims came back as fixed dims; a huge layer was measured for minutes."""
    from idlib.counting import count, rotation_classes
    from idlib.rank import measure
    two = AttentionConfig(d_model=8, n_heads=2, rope_fraction=1.0)
    with pytest.raises(ConfigError, match=r"^count: frequencies=\[\[0.1, 0.2\], \[0.3, 0.4\]\] must be"):
        count(two, [[0.1, 0.2], [0.3, 0.4]])
    with pytest.raises(ConfigError, match=r"W_Q has shape \(2, 8, 5\), the layer's is \(2, 8, 4\)"):
        measure(two, params=init_params(AttentionConfig(d_model=8, n_heads=2, head_dim=5)))
    with pytest.raises(ConfigError, match="3 given, the layer has rotary_dim / 2 = 2 rotation planes"):
        measure(two, frequencies=[0.1, 0.2, 0.3])
    with pytest.raises(ConfigError, match=r"^rotation_classes: pass_dims=-5 must be an integer in \[0, "):
        rotation_classes([0.1], -5)
    with pytest.raises(ConfigError, match=r"^measure: the layer has 67108864 parameters, more than "
                                          r"max_params=5000000 \(pass a larger max_params to insist\)$"):
        measure(AttentionConfig(d_model=4096, n_heads=32))
    with pytest.raises(ConfigError, match=r"^measure: measuring the layer's 256 parameters needs about "):
        measure(AttentionConfig(d_model=8, n_heads=2), seq_len=10 ** 9)
    with pytest.raises(ConfigError, match=r"^init_params: seed=0.5 must be an integer in \[0, "):
        init_params(two, seed=0.5)


def test_params_in_another_order_are_measured_as_the_layer_orders_them():
    from idlib.counting import count
    from idlib.rank import measure
    shuffled = dict(reversed(list(PARAMS.items())))
    a, b = measure(ROPE, params=PARAMS), measure(ROPE, params=shuffled)
    assert a.certified and b.certified
    assert (a.rank, a.n_params) == (b.rank, b.n_params) == (count(ROPE).identified, 288)


# -- hypothesis: any value, any argument -----------------------------------------------------------

VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=True),
    st.complex_numbers(), st.text(max_size=4), st.lists(st.floats(-4, 4), max_size=6),
    st.lists(st.lists(st.integers(0, 3), max_size=3), max_size=3),
    st.dictionaries(st.sampled_from(["W_Q", "W_K", "x"]), st.integers(), max_size=3),
    st.builds(lambda shape, dt: torch.zeros(shape, dtype=dt),
              st.lists(st.integers(0, 9), min_size=0, max_size=3),
              st.sampled_from([torch.float64, torch.float32, torch.int64, torch.complex128])),
    st.just(LatentAttentionConfig(d_model=8, n_heads=2, kv_latent=4, nope_dim=2, rope_dim=2,
                                  value_dim=2)),
    st.just(AttentionConfig(d_model=6, n_heads=3)))
CHEAP = sorted((name, arg) for name, fn in FUNCTIONS.items() for arg in fn.rules)


@settings(max_examples=400, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CHEAP), value=VALUES)
def test_any_value_is_a_config_error_or_an_answer(case, value):
    name, arg = case
    fn = FUNCTIONS[name]
    kwargs = {**BASE[name], arg: value}
    if name in EXPENSIVE and fn.rules[arg].check(value, {**_arguments(name), arg: value}) is None:
        return                            # accepted: it would measure (the valid calls do that)
    try:
        fn(**kwargs)
    except ConfigError as e:
        assert "\n" not in str(e)
