"""Chapter 10's statements in words, checked against the data they describe."""
import pytest

from idlib.studies import modern


def test_llama4_floor_scale_default_is_8192():
    transformers = pytest.importorskip("transformers")
    assert transformers.Llama4TextConfig().floor_scale == 8192


def test_the_first_mixed_config_has_no_rope_on_any_layer_and_the_default_has_some():
    assert modern.rope_free(modern.MIXED[0][1])
    assert not modern.rope_free(modern.MIXED[1][1])


def test_own_table_is_numbered_and_tallies_every_seed():
    table = modern.own_table([("plain", dict(d_model=4, n_heads=2))], [0, 1], "A caption;",
                             "tab-x")
    assert table.startswith(":::{table} A caption; 2 of 2 agree (2 seeds).\n:name: tab-x\n")
    assert table.count("| plain |") == 1
