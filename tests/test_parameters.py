"""The parameters-cell checks: a bad knob fails first, in one line naming it and its rule."""

import pytest

from idlib.report.parameters import (POSITIVE_INT, PROFILE, ParameterError, check_parameters, layer,
                                     list_of, with_profile)

PROFILES = {"default": {"steps": 120, "n_seeds": 5}, "full": {"steps": 600, "n_seeds": 10}}


def test_a_profile_fills_only_the_knobs_not_given():
    assert with_profile("full", {"steps": None, "n_seeds": None, "seed": 0}, PROFILES) == \
        {"steps": 600, "n_seeds": 10, "seed": 0}
    assert with_profile("full", {"steps": 50, "n_seeds": None, "seed": 0}, PROFILES)["steps"] == 50
    knobs = with_profile("full", {"steps": -5, "n_seeds": None}, PROFILES)
    with pytest.raises(ParameterError, match=r"^steps=-5 must be a positive integer$"):
        check_parameters(knobs, steps=POSITIVE_INT, n_seeds=POSITIVE_INT)
    with pytest.raises(ParameterError, match=r"^profile='Full' must be one of 'default', 'full'$"):
        with_profile("Full", {"steps": None, "n_seeds": None}, PROFILES)
    with pytest.raises(ParameterError, match=r"not in the parameters cell: \['n_seeds'\]"):
        with_profile("full", {"steps": None}, PROFILES)


@pytest.mark.parametrize("value, message", [
    ({"d_model": 8, "n_heads": 3}, r"^rope_layer=\{'d_model': 8, 'n_heads': 3\}: d_model=8 must be "
                                   r"divisible by n_heads=3"),
    ({"d_model": 8, "n_heads": 2, "heads": 2}, r"^rope_layer=.*: got an unexpected keyword argument 'heads'"),
    ({"d_model": 8, "bias": "q"}, r"^rope_layer=.*: field 'bias' is set by the chapter \(bias='qkvo'\)"),
    ([1], r"^rope_layer=\[1\] must be a dict of AttentionConfig fields \(names to values\) besides bias$"),
])
def test_a_layer_knob_is_checked_by_building_it(value, message):
    with pytest.raises(ParameterError, match=message):
        check_parameters({"rope_layer": value}, rope_layer=layer(bias="qkvo"))
    check_parameters({"rope_layer": {"d_model": 8, "n_heads": 2}}, rope_layer=layer(bias="qkvo"))


def test_a_list_of_layers_names_the_entry():
    with pytest.raises(ParameterError, match=r"^configs=.*: entry 1 \(\{'d_model': 6, 'n_heads': 4\}\): "
                                             r"d_model=6 must be divisible by n_heads=4"):
        check_parameters({"configs": [{"d_model": 8, "n_heads": 2}, {"d_model": 6, "n_heads": 4}]},
                         configs=list_of(layer()))
    with pytest.raises(ParameterError, match=r"^profile='x' must be one of 'default', 'full'$"):
        check_parameters({"profile": "x"}, profile=PROFILE)
