"""Chapter 9's statements in words, checked against the data they describe.

The chapter pastes its numbers from ``idlib.studies.implementations``; the words around them
are checked here: which families switch on a per-head QK LayerNorm and where each is measured,
and that the soft-cap lowers each count by G nu_+ (the pass-through key dimensions per group).
"""
import pytest

pytest.importorskip("transformers")

from idlib import implementations as impl  # noqa: E402
from idlib.config import AttentionConfig  # noqa: E402
from idlib.counting import count  # noqa: E402
from idlib.studies import implementations as study  # noqa: E402
from idlib.studies import modern  # noqa: E402


def test_the_per_head_qk_layernorm_families_and_where_they_are_measured():
    fams = study.qk_layernorm_families()
    assert fams == ["cohere", "persimmon", "phi", "stablelm"]
    first = set(study.families())
    assert [f for f in fams if f not in first] == ["cohere"]          # measured in chapter 10
    assert "cohere" in impl.FAMILIES_2026
    # chapter 10's module table switches the norm on for every one of them
    switched_on = {label.split(",")[0] for label, _, kw in modern.MODULE_CASES
                   if kw.get("qk_layernorm") or kw.get("use_qk_norm")}
    assert switched_on == set(fams)
    # and the first table builds them with the norm off
    for f in ("persimmon", "phi", "stablelm"):
        cfg = impl.hf_config(f, **study.small(f))
        assert cfg.to_dict().get("qk_layernorm") is False


def test_the_cap_lowers_each_count_by_G_nu_plus():
    for _, kw in study.SOFTCAP:
        plain = AttentionConfig(**kw)
        capped = AttentionConfig(**kw, softcap=50.0)
        nu_plus = plain.head_dim - plain.rotary_dim
        assert count(plain).unidentified - count(capped).unidentified == \
            plain.n_kv_heads * nu_plus
    for kw in study.SOFTCAP_NO_KEY_BIAS:
        assert "k" not in kw.get("bias", "")
        plain = AttentionConfig(**kw, causal=True)
        assert count(plain).unidentified == count(plain.replace(softcap=50.0)).unidentified


def test_the_chapter_tables_are_numbered():
    assert ":name: tab-impl-hf\n" in study.hf_families_table()
    assert ":name: tab-impl-read\n" in study.read_table()
