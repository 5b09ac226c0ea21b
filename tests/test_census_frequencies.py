"""The frequency condition of the census theorem (census.frequencies_generic)."""
import math

from idlib.config import AttentionConfig
from idlib.studies import census

ROPE = AttentionConfig(d_model=8, head_dim=4, rope_fraction=1.0)   # two planes


def test_standard_schedules_are_generic():
    ok, reason = census.frequencies_generic(AttentionConfig(d_model=64, n_heads=1, head_dim=64,
                                                            rope_fraction=1.0))
    assert ok is True and "32 angles" in reason


def test_conjugate_angles_are_not_generic():
    # theta_2 = 2 pi - theta_1: distinct and not multiples of pi, yet R(1) has a repeated
    # eigenvalue pair, so the commutant (and the unidentified count) grows.
    ok, _ = census.frequencies_generic(ROPE, frequencies=[1.0, 2 * math.pi - 1.0])
    assert ok is False


def test_angles_zero_or_pi_mod_two_pi_are_not_generic():
    assert census.frequencies_generic(ROPE, frequencies=[2 * math.pi, 1.0])[0] is False
    assert census.frequencies_generic(ROPE, frequencies=[3 * math.pi, 1.0])[0] is False
    assert census.frequencies_generic(ROPE, frequencies=[1.0, 1.0 + 2 * math.pi])[0] is False
    assert census.frequencies_generic(ROPE, frequencies=[1.0, 2.0])[0] is True


def test_no_rope_has_no_condition():
    assert census.frequencies_generic(AttentionConfig(d_model=8))[0] is None


def test_every_rotary_census_model_is_generic():
    verdicts = {m.slug: census.frequencies_generic(m.config)[0]
                for m in census.load_models() if m.config is not None}
    assert verdicts["llama-3-8b"] is True and verdicts["gpt2"] is None
    assert all(v in (True, None) for v in verdicts.values())
