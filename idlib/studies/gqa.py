"""Chapter 5 (grouped and multi-query attention): the rules of its knobs.

The chapter measures, for a width d and H query heads, every number G of key/value groups
that divides H, without RoPE and with RoPE on every query/key dimension; so a (d, H) pair is
admissible when H divides d and the head width d/H is even (RoPE turns pairs of dimensions).
Its tensor demonstration gives one head of a group its own matrix, which needs at least two
heads per group (G < H). Each rule builds the layers it stands for and says why one does not
build, so a wrong knob fails in the chapter's first checking cell, naming itself.
"""
from __future__ import annotations

from typing import Any

from ..config import AttentionConfig, ConfigError
from ..report.parameters import POSITIVE_INT, Rule
from ..symmetry import rotation_matrix
from .rope import act_qk, act_vo, random_commutant, random_gl


def pair_problem(d_model: Any, n_heads: Any) -> str | None:
    """Why (d_model, n_heads) cannot be measured with and without full RoPE (None: it can)."""
    try:
        AttentionConfig(d_model, n_heads)
        AttentionConfig(d_model, n_heads, rope_fraction=1.0)
    except ConfigError as e:
        return str(e)
    return None


def heads_rule(d_model: Any) -> Rule:
    """Rule for ``n_heads`` at the width ``d_model`` (checked before it)."""
    return Rule(f"a positive integer dividing d_model={d_model!r} into heads of even "
                "width (RoPE on every query/key dimension)", POSITIVE_INT.holds,
                lambda x: pair_problem(d_model, x))


def groups_rule(d_model: Any, n_heads: Any) -> Rule:
    """Rule for ``demo_kv_heads``: a divisor G < H of ``n_heads`` (two heads per group at
    least, so that one head can be given its own matrix)."""
    return Rule(f"a divisor of n_heads={n_heads!r} smaller than n_heads (two heads per group "
                "at least)", lambda x: POSITIVE_INT.holds(x) and isinstance(n_heads, int)
                and x < n_heads and n_heads % x == 0)


PAIR = Rule("a (d_model, n_heads) pair of positive integers, n_heads dividing d_model into "
            "heads of even width",
            lambda x: isinstance(x, (tuple, list)) and len(x) == 2
            and all(POSITIVE_INT.holds(v) for v in x),
            lambda x: pair_problem(*x))
"""Rule for one entry of ``extra``."""


def group_moves(config: AttentionConfig, params: dict, seed: int) -> list[tuple[str, bool,
                                                                              AttentionConfig,
                                                                              dict]]:
    """The five moves of the chapter's tensor demonstration of a GQA layer ``config``:
    (label, whether the move is in the group of thm-gqa-count, the layer it acts on, the moved
    parameters). One random A_g and B_g per group on every head of the group; the same with
    head 0 given its own A (or its own B); with RoPE on every query/key dimension, one element
    of the commutant of R(1) per group, and one generic A_g per group."""
    m, k, v, G = config.group_size, config.head_dim, config.value_dim, config.n_kv_heads
    A = [random_gl(k, seed + 1 + g) for g in range(G)]             # one A_g per group
    B = [random_gl(v, seed + 11 + g) for g in range(G)]            # one B_g per group
    per_head = lambda mats: [mats[h // m] for h in range(config.n_heads)]
    A_split, B_split = per_head(A), per_head(B)
    A_split[0], B_split[0] = random_gl(k, seed + 21), random_gl(v, seed + 22)   # head 0 alone
    rope = config.replace(rope_fraction=1.0)
    A_comm = [random_commutant(rotation_matrix(rope, 1.0), seed + 31 + g) for g in range(G)]
    both = act_vo(config, act_qk(config, params, per_head(A), A), B, per_head(B))
    return [("no RoPE: one $(A_g, B_g)$ per group", True, config, both),
            ("no RoPE: head 0 has its own $A$", False, config,
             act_qk(config, params, A_split, A)),
            ("no RoPE: head 0 has its own $B$", False, config,
             act_vo(config, params, B, B_split)),
            ("RoPE: one commutant element per group", True, rope,
             act_qk(rope, params, per_head(A_comm), A_comm)),
            ("RoPE: one generic $A_g$ per group", False, rope,
             act_qk(rope, params, per_head(A), A))]
