"""Presentation: tables and figures (one table formatter, one plotting style); the core never imports them."""
