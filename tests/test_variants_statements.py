"""Chapter 7's comparisons in words, checked against the counts of its configurations.

The chapter pastes the numbers (``{glue:text}``); the words around them ("identifies more",
"fewer only when ...", "drops by the factor L_kv") are checked here, on the same
configurations (``idlib.studies.variants``), with the closed-form counts the chapter's tables
measure.
"""
from fractions import Fraction

import pytest

from idlib.config import AttentionConfig
from idlib.counting import count
from idlib.report.layers import layer_label
from idlib.studies import variants


def fields(entries, key):
    return next(f for k, _, f in entries if k == key)


def counts(entries):
    return {key: count(AttentionConfig(**fields)) for key, _, fields in entries}


def test_every_section_has_unique_keys_and_labels():
    for entries in (variants.QK_NORM, variants.LATENT, variants.CENTRED, variants.STACK):
        keys = [k for k, _, _ in entries]
        labels = [label for _, label, _ in entries]
        assert len(set(keys)) == len(keys) and len(set(labels)) == len(labels)


def test_qk_norm_statements():
    c = counts(variants.QK_NORM)
    U = {k: v.unidentified for k, v in c.items()}
    # "identifies more" at the first shape, with and without gains
    assert U["qkn"] < U["plain"] and U["qkn-gain"] < U["plain"]
    # "makes the key bias matter": biases add to U without the norm, nothing with it
    assert U["bias"] - U["plain"] == 6 and U["qkn-bias"] - U["qkn"] == 0
    # "with RoPE the commutant is already small": QK-norm gains less there
    assert 0 <= U["rope"] - U["rope-qkn"] < U["plain"] - U["qkn"]
    # "does not always identify more": m + 1 = 4 > k(k + 1)/2 = 3
    gqa = AttentionConfig(**fields(variants.QK_NORM, "gqa"))
    m, k = gqa.group_size, gqa.head_dim
    assert m + 1 > k * (k + 1) // 2
    assert U["gqa-qkn"] > U["gqa"]
    assert U["gqa-qkn"] - U["gqa"] == gqa.n_kv_heads * (k * (k - 1) // 2 + m + 1 - k * k)


@pytest.mark.parametrize("k, m", [(2, 1), (2, 2), (2, 3), (3, 4), (3, 5), (4, 8), (4, 9)])
def test_qk_norm_identifies_more_exactly_when_m_plus_1_below_k_k_plus_1_over_2(k, m):
    plain = AttentionConfig(d_model=12, n_heads=2 * m, n_kv_heads=2, head_dim=k)
    normed = plain.replace(qk_norm="plain")
    fewer = count(normed).unidentified < count(plain).unidentified
    assert fewer == (m + 1 < k * (k + 1) / 2)


def test_latent_statements():
    U = {k: v.unidentified for k, v in counts(variants.LATENT).items()}
    assert U["c3"] > U["plain"]                      # a bottleneck identifies less
    assert U["c3-norm"] < U["c3"] and U["c7-norm"] < U["c7"]   # the norm identifies more
    # where the cases meet (d_c = d < N) they agree: U_Lambda = d^2
    c6 = count(AttentionConfig(**fields(variants.LATENT, "c6")))
    assert c6.component("latent").unidentified == 36


def test_centred_statements():
    c = counts(variants.CENTRED)
    U = {k: v.unidentified for k, v in c.items()}
    assert U["centred"] > U["plain"] and U["centred-bias"] > U["bias"]
    cfg = {k: AttentionConfig(**f) for k, _, f in variants.CENTRED}
    # k, v <= d - 1: exactly Hk + Gk + Gv more; v = 6 > d - 1 = 4: fewer than that
    assert U["centred"] - U["plain"] == variants.ones_components(cfg["centred"]) == 18
    assert U["centred-bias"] - U["bias"] < variants.ones_components(cfg["centred-bias"])


def test_stack_statements():
    c = counts(variants.STACK)
    s1, s2 = c["s1"], c["s2"]
    # "the count drops by the factor L_kv, and so does the share"
    assert s1.unidentified == 2 * s2.unidentified
    assert Fraction(s2.unidentified, s2.total) < Fraction(s1.unidentified, s1.total)
    for key, share in (("s1", 1), ("s2", 2)):
        cfg = AttentionConfig(**fields(variants.STACK, key))
        d, H, G, k, v = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.value_dim
        assert Fraction(c[key].unidentified, c[key].total) == \
            Fraction(G * (k * k + v * v), d * (k + v) * (share * H + G))


def test_layer_label_renames_latent_and_sharing_factor_only():
    latent = AttentionConfig(d_model=6, n_heads=2, head_dim=2, kv_latent=3, latent_norm=True)
    assert layer_label(latent) == "d=6 H=2 G=2 k=2 v=2 d_c=3 normed"
    stack = AttentionConfig(d_model=4, n_heads=2, n_layers=2, kv_share=2)
    assert layer_label(stack) == "d=4 H=2 G=2 k=2 v=2 L=2 L_kv=2"
    plain = AttentionConfig(d_model=8, n_heads=2, bias="qkvo", causal=True)
    assert layer_label(plain) == "d=8 H=2 G=2 k=4 v=4 b_Q b_K b_V b_O causal"
