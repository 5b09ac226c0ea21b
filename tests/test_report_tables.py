"""idlib.report.tables.layer_text: the layer a table row measured, in the book's notation."""
from idlib.config import AttentionConfig
from idlib.report.tables import format_share, layer_text


def test_plain_layer_names_every_width():
    assert layer_text(AttentionConfig(d_model=6, n_heads=2)) == "d=6 H=2 G=2 k=3 v=3"


def test_every_variant_field_is_named():
    c = AttentionConfig(d_model=4, n_heads=2, n_kv_heads=1, n_layers=3, kv_share=3,
                        rope_fraction=1.0, bias="qk", causal=True)
    assert layer_text(c) == "d=4 H=2 G=1 k=2 v=2 r=2 b_Q b_K causal L=3 S=3"
    c = AttentionConfig(d_model=6, n_heads=2, head_dim=2, kv_latent=3, latent_norm=True,
                        qk_norm="plain", input_centered=True)
    assert layer_text(c) == "d=6 H=2 G=2 k=2 v=2 QK-norm plain C=3 normed centred"


def test_format_share_two_decimals():
    assert format_share(36, 144) == "25.00%" and format_share(66, 654336) == "0.01%"
    # below 0.01%: two significant digits, never a misleading "0.00%" or a rounded-up "0.01%"
    assert format_share(65, 654336) == "0.0099%" and format_share(754, 27263488) == "0.0028%"
    assert format_share(0, 10) == "0.00%"
