"""The real module's weights in idlib's layout (W_Q (H, d, k), ...) and back, and the symmetry
group of chapters 1-5, 7 and 9 (:mod:`idlib.symmetry`) acting on them: moving the module's own
weights by a random group element must leave its own forward unchanged (:func:`symmetry_check`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..lazy import torch

from .. import symmetry, variants
from ..attention import param_shapes
from ..config import AttentionConfig, ConfigError, LatentAttentionConfig
from .measure import inputs
from .modules import Built, forward, parameters

# -- the group action of chapters 1-5 on the real module's weights ---------------------------

@dataclass(frozen=True)
class Layout:
    """Where idlib's W_Q^h, W_K^g, W_V^g, W_O^h (and biases, gains) sit in the module's tensors.

    ``q``, ``k``, ``v``: (weight name, bias name or None, output indices (heads, width));
    ``o``: (weight name, bias name or None, input indices (H, v)); ``conv1d``: weights stored
    (in, out) (GPT-2) instead of nn.Linear's (out, in); ``gains``: QK-norm gain names, and
    whether the norm multiplies by 1 + weight (Gemma, Qwen3-Next); ``perm``: idlib's query/key
    dim j of a head is the module's dim perm[j] (RoPE on interleaved pairs (2i, 2i+1), idlib's
    planes being (i, i + r/2)); ``gate``: (weight name, bias name or None, output indices) of
    the output gate W_G (Qwen3-Next: rows of q_proj); ``sinks``: the sink logits' name."""

    q: tuple[str, str | None, torch.Tensor]
    k: tuple[str, str | None, torch.Tensor]
    v: tuple[str, str | None, torch.Tensor]
    o: tuple[str, str | None, torch.Tensor]
    conv1d: bool = False
    gains: tuple[str, str] | None = None
    one_plus: bool = False
    perm: torch.Tensor | None = None
    gate: tuple[str, str | None, torch.Tensor] | None = None
    sinks: str | None = None


def _rows(n: int, width: int, start: int = 0, stride: int | None = None) -> torch.Tensor:
    stride = width if stride is None else stride
    return start + torch.arange(n)[:, None] * stride + torch.arange(width)[None, :]


# families whose RoPE rotates the pairs (2i, 2i+1) of each head (idlib: the planes (i, i + r/2))
INTERLEAVED = {"helium", "ernie4_5", "cohere", "cohere2", "llama4_text", "codegen", "gptj"}


def _pairs(k: int, r: int) -> torch.Tensor:
    """idlib's dim j -> the module's: j < r/2 -> 2j, r/2 <= j < r -> 2(j - r/2) + 1, j >= r -> j."""
    j = torch.arange(k)
    return torch.where(j < r // 2, 2 * j, torch.where(j < r, 2 * (j - r // 2) + 1, j))


def layout(built: Built) -> Layout:
    """The family's parameter layout (separate, GPT-2's Conv1D, fused per head, fused per group,
    CodeGen's four blocks, interleaved RoPE pairs, Qwen3-Next's gate rows, GPT-OSS's sinks)."""
    lay = _layout(built)
    c = built.config
    if built.family in INTERLEAVED and c.rotary_dim:
        perm = _pairs(c.head_dim, c.rotary_dim)
        lay = replace(lay, q=lay.q[:2] + (lay.q[2][:, perm],), k=lay.k[:2] + (lay.k[2][:, perm],), perm=perm)
    return lay


def _layout(built: Built) -> Layout:
    c, fam = built.config, built.family
    H, G, k, v, m = c.n_heads, c.n_kv_heads, c.head_dim, c.value_dim, c.group_size
    names = parameters(built)
    bias = lambda w: w[: -len("weight")] + "bias" if w[: -len("weight")] + "bias" in names else None  # noqa: E731
    o_name = {"phi": "dense", "bert": "dense", "t5": "o", "gpt_neox": "dense", "persimmon": "dense",
              "falcon": "dense", "gpt2": "c_proj", "bloom": "dense", "mpt": "out_proj", "codegen": "out_proj",
              "gptj": "out_proj"}.get(fam, "o_proj") + ".weight"
    o = (o_name, bias(o_name), _rows(H, v))
    if fam in ("gpt_neox", "persimmon", "bloom") or (fam == "falcon" and not built.hf_config.new_decoder_architecture
                                                     and not built.hf_config.multi_query):
        w = "query_key_value.weight"
        rows = _rows(H, k, stride=3 * k)
        return Layout((w, bias(w), rows), (w, bias(w), rows + k), (w, bias(w), rows + 2 * k), o)
    if fam == "codegen":           # mp_num = 4 blocks, each [q | v | k] of H / 4 heads
        w, width = "qkv_proj.weight", H * k // 4
        block, j = torch.arange(H) // (H // 4), torch.arange(H) % (H // 4)
        base = (block * 3 * width + j * k)[:, None] + torch.arange(k)[None, :]
        return Layout((w, None, base), (w, None, base + 2 * width), (w, None, base + width), o)
    if fam == "falcon":
        w = "query_key_value.weight"
        if built.hf_config.multi_query and not built.hf_config.new_decoder_architecture:
            q = _rows(H, k)
            return Layout((w, bias(w), q), (w, bias(w), _rows(1, k, H * k)),
                          (w, bias(w), _rows(1, k, (H + 1) * k)), o)
        q = torch.cat([_rows(m, k, g * (m + 2) * k) for g in range(G)])
        kk = _rows(G, k, m * k, (m + 2) * k)
        return Layout((w, bias(w), q), (w, bias(w), kk), (w, bias(w), kk + k), o)
    if fam in ("gpt2", "phi3", "mpt"):
        w = {"gpt2": "c_attn.weight", "phi3": "qkv_proj.weight", "mpt": "Wqkv.weight"}[fam]
        return Layout((w, bias(w), _rows(H, k)), (w, bias(w), _rows(G, k, H * k)),
                      (w, bias(w), _rows(G, v, H * k + G * k)), o, conv1d=fam == "gpt2")
    sep = {"bert": ("self_attn.query", "self_attn.key", "self_attn.value"), "t5": ("q", "k", "v")}.get(
        fam, ("q_proj", "k_proj", "v_proj"))
    q, kk, vv = (s + ".weight" for s in sep)
    gains = ("q_norm.weight", "k_norm.weight") if "q_norm.weight" in names else None
    one_plus = gains is not None and getattr(built.module.q_norm, "one_plus", False)
    q_rows, gate = _rows(H, k), None
    if c.output_gate:              # Qwen3-Next: per head [query (k) | gate (k)] in q_proj
        q_rows = _rows(H, k, stride=2 * k)
        gate = (q, bias(q), q_rows + k)
    return Layout((q, bias(q), q_rows), (kk, bias(kk), _rows(G, k)), (vv, bias(vv), _rows(G, v)),
                  o, gains=gains, one_plus=one_plus, gate=gate, sinks="sinks" if c.sinks else None)


def to_params(built: Built) -> dict[str, torch.Tensor]:
    """The module's weights as idlib parameters (W_Q (H, d, k), ..., in idlib.attention's layout)."""
    lay, p = layout(built), parameters(built)
    out: dict[str, torch.Tensor] = {}
    for letter, (w, b, idx) in _projections(lay):
        W = p[w] if lay.conv1d else p[w].T                         # (d, outputs)
        out["W_" + letter] = torch.stack([W[:, i] for i in idx])
    W = p[lay.o[0]] if lay.conv1d else p[lay.o[0]].T               # (H v, d)
    out["W_O"] = torch.stack([W[i, :] for i in lay.o[2]])
    for letter, (w, b, idx) in _projections(lay) + [("O", lay.o)]:
        if b is not None:
            out["b_" + letter] = p[b] if letter == "O" else torch.stack([p[b][i] for i in idx])
    if lay.gains:
        shapes = param_shapes(built.config)
        for name, g in zip(("g_Q", "g_K"), lay.gains):
            gain = (p[g] + 1.0 if lay.one_plus else p[g]).reshape(shapes[name])
            out[name] = gain if lay.perm is None else gain[..., lay.perm]
    if lay.sinks:
        out["sinks"] = p[lay.sinks]
    return {name: out[name] for name in param_shapes(built.config)}


def _projections(lay: Layout) -> list[tuple[str, tuple[str, str | None, torch.Tensor]]]:
    """(idlib letter, (weight, bias, output indices)) of the input projections: Q, K, V (and G)."""
    return list(zip("QKV", (lay.q, lay.k, lay.v))) + ([("G", lay.gate)] if lay.gate else [])


def from_params(built: Built, params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The module's parameters with idlib's ``params`` written into them (inverse of to_params)."""
    lay = layout(built)
    p = {k: v.clone() for k, v in parameters(built).items()}
    for letter, (w, b, idx) in _projections(lay):
        for i, block in zip(idx, params["W_" + letter]):
            if lay.conv1d:
                p[w][:, i] = block
            else:
                p[w][i, :] = block.T
        if b is not None:
            for i, block in zip(idx, params["b_" + letter]):
                p[b][i] = block
    for i, block in zip(lay.o[2], params["W_O"]):
        if lay.conv1d:
            p[lay.o[0]][i, :] = block
        else:
            p[lay.o[0]][:, i] = block.T
    if lay.o[1] is not None:
        p[lay.o[1]] = params["b_O"].clone()
    if lay.gains:
        for name, g in zip(("g_Q", "g_K"), lay.gains):
            gain = params[name].clone()
            if lay.perm is not None:
                gain[..., lay.perm] = params[name]
            p[g] = (gain - 1.0 if lay.one_plus else gain).reshape(p[g].shape)
    if lay.sinks:
        p[lay.sinks] = params["sinks"].clone()
    return p


def symmetry_check(built: Built, seed: int = 0, scale: float = 0.5) -> dict[str, float]:
    """Move the module's weights by a random element of idlib's symmetry group (idlib.symmetry,
    chapters 1-5 and 7) and run the module's own forward: ``move`` = |theta' - theta| / |theta|,
    ``change`` = max |out' - out| / max |out| (round-off when the group is right)."""
    X = inputs(built.config, seed, n_sequences=4)
    if isinstance(built.config, LatentAttentionConfig):
        return _moved_output(built, X, latent_action(built, seed=seed, scale=scale))
    p = to_params(built)
    if from_params(built, p).keys() != parameters(built).keys():
        raise ConfigError(f"{built.family}: layout does not cover the module's parameters")
    try:
        moved = symmetry.random_element(built.config, p, seed=seed, scale=scale)
    except NotImplementedError as e:
        raise ConfigError(f"{built.family}: {e}") from None
    return _moved_output(built, X, from_params(built, moved))


def _moved_output(built: Built, X: torch.Tensor, moved: dict[str, torch.Tensor]) -> dict[str, float]:
    before = parameters(built)
    flat = lambda d: torch.cat([t.reshape(-1) for t in d.values()])  # noqa: E731
    with torch.no_grad():
        out, out2 = forward(built, X), forward(built, X, moved)
    return {"move": float((flat(moved) - flat(before)).norm() / flat(before).norm()),
            "change": float((out2 - out).abs().max() / out.abs().max())}


def _rotation_planes(built: Built) -> torch.Tensor:
    """(p / 2, 2) indices of the RoPE key's rotation planes: pairs (2i, 2i+1) (DeepSeek V2, and
    V3 with rope_interleave), else halves (i, i + p/2)."""
    p = built.config.rope_dim
    if built.family == "deepseek_v2" or getattr(built.hf_config, "rope_interleave", False):
        return torch.arange(p).reshape(-1, 2)
    return torch.stack([torch.arange(p // 2), torch.arange(p // 2) + p // 2], dim=1)


def latent_action(built: Built, seed: int = 0, scale: float = 0.5) -> dict[str, torch.Tensor]:
    """The module's parameters moved by a random element of the symmetry group of multi-head
    latent attention (:func:`idlib.counting.count_latent`): per latent W_down -> lambda O W_down
    (bias too), gain g -> g e^s, W_up -> W_up diag(g) O^T diag(g e^s)^-1; per head GL(n) on the
    no-RoPE query/key rows and GL(v) on value rows / output columns; one complex scalar per
    rotation plane on the shared RoPE key (c R_phi) and its inverse transpose on every head's
    RoPE query rows."""
    c = built.config
    gen = torch.Generator().manual_seed(seed)
    rnd = lambda *shape: scale * torch.randn(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    near_one = lambda m: torch.eye(m, dtype=torch.float64) + rnd(m, m) / m ** 0.5  # noqa: E731
    p = {k: v.clone() for k, v in parameters(built).items()}
    H, C, n, r, v = c.n_heads, c.kv_latent, c.nope_dim, c.rope_dim, c.value_dim
    q_w = "q_proj.weight" if c.q_latent is None else "q_b_proj.weight"
    latents = [("kv_a_proj_with_mqa", C, "kv_a_layernorm.weight", "kv_b_proj.weight")]
    if c.q_latent is not None:
        latents.append(("q_a_proj", c.q_latent, "q_a_layernorm.weight", q_w))
    for down, width, gain, up in latents:
        skew = rnd(width, width)
        O, lam = torch.linalg.matrix_exp(skew - skew.T), rnd(1).exp()
        for key in (down + ".weight", down + ".bias"):
            if key in p:
                p[key][:width] = lam * O @ p[key][:width]
        g_new = p[gain] * rnd(width).exp()
        p[up] = p[up] * p[gain] @ O.T / g_new
        p[gain] = g_new
    q_rows = lambda h: h * (n + r)  # noqa: E731 (first row of head h in the query projection)
    for h in range(H):
        A, B = near_one(n), near_one(v)
        q0, k0 = q_rows(h), h * (n + v)
        p[q_w][q0:q0 + n] = torch.linalg.solve(A.T, p[q_w][q0:q0 + n])
        p["kv_b_proj.weight"][k0:k0 + n] = A @ p["kv_b_proj.weight"][k0:k0 + n]
        p["kv_b_proj.weight"][k0 + n:k0 + n + v] = B @ p["kv_b_proj.weight"][k0 + n:k0 + n + v]
        p["o_proj.weight"][:, h * v:(h + 1) * v] = torch.linalg.solve(
            B.T, p["o_proj.weight"][:, h * v:(h + 1) * v].T).T
    for pair in _rotation_planes(built):
        a, phi = rnd(1).exp(), rnd(1)
        M = a * torch.stack([torch.cat([phi.cos(), -phi.sin()]), torch.cat([phi.sin(), phi.cos()])])
        for key in ("kv_a_proj_with_mqa.weight", "kv_a_proj_with_mqa.bias"):
            if key in p:
                p[key][C + pair] = M @ p[key][C + pair]
        for h in range(H):
            rows = q_rows(h) + n + pair
            p[q_w][rows] = torch.linalg.solve(M.T, p[q_w][rows])
    return p


