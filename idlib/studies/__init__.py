"""Studies: what one chapter needs (RoPE, variants, census, sweep, training tasks); the core never imports them."""
