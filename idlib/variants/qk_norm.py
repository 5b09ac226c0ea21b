"""QK-norm: queries and keys normalised after the projection (and bias), before RoPE.

Modes (``qk_norm``):

* "plain": rms(Q_h), rms(K_g) per head, rms(y) = y / sqrt(mean(y^2) + eps) (Llama 4's L2 norm).
* "gain": then times learned gains g_Q, g_K (k,) shared by all heads (Qwen3, Gemma 3).
* "whole": the whole projected query (all H heads) and key (G heads) RMS-normalised together,
  with gains g_Q (H, k), g_K (G, k) (OLMo 2, OLMoE).
* "layernorm": a LayerNorm (mean subtracted) on each head, gains per head (StableLM, Cohere).
* "layernorm_shared": one LayerNorm with gain g and shift c shared by the heads (Phi, Persimmon).

Count (chapters 7, 9): a QK move must keep every normalised query and key on its sphere, so
A = c O: per group the orthogonal part of the RoPE commutant (none with gains) and one scale
per query head and per key group; the biases are identified; the gains are seen only through
g_Q(i) g_K(j) R(t)_ij: one exchange per rotation plane and per fixed dim (``gain_fiber``).
"whole": one scale for all queries and one for all keys.  LayerNorm modes: each head's all-ones
direction of W_Q, b_Q (W_K, b_K) is unseen too.
"""
from __future__ import annotations

from ..lazy import torch

from ..fibers import _gain_fiber, _orthogonal_commutant
from ..fields import one_of
from .base import NORM_EPS, Flow, Mode, Tally, Variant, center, lead, rms_norm

ALL = frozenset({"permute_heads", "twin", "sdpa"})
MODES = {
    "none": Mode("none"),
    "plain": Mode("plain", ALL | {"structured", "symmetry"},
                  dict(rotations=True, whole=False, centred=False, shared_gains=False)),
    "gain": Mode("gain", ALL | {"symmetry"},
                 dict(rotations=False, whole=False, centred=False, shared_gains=True)),
    "whole": Mode("whole", ALL, dict(rotations=False, whole=True, centred=False, shared_gains=False)),
    "layernorm": Mode("layernorm", ALL,
                      dict(rotations=False, whole=False, centred=True, shared_gains=False)),
    "layernorm_shared": Mode("layernorm_shared", ALL,
                             dict(rotations=False, whole=False, centred=True, shared_gains=False)),
}
QK_NORMS = tuple(MODES)


def mode(config) -> Mode:
    return MODES[config.qk_norm]


def shapes(config) -> dict[str, tuple[int, ...]]:
    H, G, k = config.n_heads, config.n_kv_heads, config.head_dim
    return {"plain": {},
            "gain": {"g_Q": lead(config, "layer") + (k,), "g_K": lead(config, "set") + (k,)},
            "whole": {"g_Q": (H, k), "g_K": (G, k)},
            "layernorm": {"g_Q": (H, k), "g_K": (G, k)},
            "layernorm_shared": {"g_Q": (k,), "c_Q": (k,), "g_K": (k,), "c_K": (k,)},
            }[config.qk_norm]


def axes(config) -> dict[str, tuple[str | None, str | None]]:
    per_head = config.qk_norm in ("whole", "layernorm")
    return {"g_Q": ("layer", "head" if per_head else None),
            "g_K": ("set", "group" if per_head else None),
            "c_Q": (None, None), "c_K": (None, None)}


def refuse(config) -> str | None:
    k, d_in, C, name = config.head_dim, config.input_dim, config.kv_latent, config.qk_norm
    if mode(config).data["centred"] and (config.n_layers > 1 or C is not None or config.input_centered
                                         or k < 3 or not config.rotary_dim):
        return (f"qk_norm={name!r} is derived for one layer with RoPE, without latent or "
                f"centred inputs, and with head_dim >= 3 (got {k}; without RoPE the centred heads "
                "have more symmetry, not derived)")
    if mode(config).data["whole"] and (config.n_layers > 1 or C is not None or config.input_centered
                                       or config.n_heads * k > d_in):
        return (f"qk_norm='whole' is derived for one layer without latent or centred inputs and with "
                f"n_heads * head_dim = {config.n_heads * k} at most d_model = {config.d_model}")
    if k < 2:
        return (f"qk_norm={name!r} needs head_dim >= 2 (a normalised 1-dim head is a sign; its "
                "count is not derived)")
    if k > d_in:
        return (f"qk_norm={name!r} needs head_dim={k} at most the input dimension {d_in} "
                f"(d_model{' - 1, input_centered' if config.input_centered else ''}); the count "
                "for a wider normalised head is not derived")
    if C is not None and k > C:
        return (f"qk_norm={name!r} needs head_dim={k} at most kv_latent={C} "
                "(the count for a normalised head wider than the latent is not derived)")
    return None


def _whole(y: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
    return gain[:, None, :] * y / torch.sqrt(y.pow(2).mean(dim=(1, 3), keepdim=True) + NORM_EPS)


def normalise(flow: Flow) -> None:
    p, name, q, k = flow.params, flow.config.qk_norm, flow.q, flow.k
    if name == "whole":                          # all heads together (OLMo 2), then gains
        q, k = _whole(q, p["g_Q"]), _whole(k, p["g_K"])
    elif name in ("layernorm", "layernorm_shared"):   # LayerNorm per head (mean out)
        q, k = rms_norm(center(q)), rms_norm(center(k))
        if name == "layernorm":
            q, k = q * p["g_Q"][:, None, :], k * p["g_K"][:, None, :]
        else:
            q, k = q * p["g_Q"] + p["c_Q"], k * p["g_K"] + p["c_K"]
    else:
        q, k = rms_norm(q), rms_norm(k)
        if name == "gain":
            q, k = q * p["g_Q"], k * p["g_K"]
    flow.q, flow.k = q, k


def fibers(t: Tally) -> None:
    data, k = mode(t.config).data, t.config.head_dim
    ortho = 0
    if data["rotations"]:
        ortho = _orthogonal_commutant(t.classes) if t.classes else k * (k - 1) // 2
    else:
        t.gain = _gain_fiber(t.classes) if t.classes else k
    # whole: one scale for all queries and one for all keys (the layer's 2), no rotation
    # survives the gains; per head and group: m + 1 scales
    t.qk = 0 if data["whole"] else ortho + t.mm + 1
    t.q_bias, t.k_bias = 0, 0
    if data["centred"]:
        # the mean is subtracted: each head's all-ones direction of W_Q, b_Q (W_K, b_K) is unseen
        t.qk += (t.mm + 1) * t.d_in
        t.q_bias, t.k_bias = t.mm, 1
    if data["whole"]:
        t.qk_layer += 2


def components(t: Tally) -> None:
    c = t.config
    L, R, H, G, k = c.n_layers, c.n_kv_sets, c.n_heads, c.n_kv_heads, c.head_dim
    name = c.qk_norm
    if name == "gain":
        t.components.append(("g_QK", (L + R) * k, R * t.gain))
    elif name in ("whole", "layernorm"):      # per group: g_Q of its m heads against g_K
        t.components.append(("g_QK", (H + G) * k, G * t.gain))
    elif name == "layernorm_shared":          # shared gain and shift: one exchange per class;
        nu = t.classes[1] if t.classes else k  # the key shift's fixed dims are row constants
        t.components += [("g_QK", 2 * k, t.gain), ("c_QK", 2 * k, nu)]


ROW = Variant(
    name="qk_norm",
    summary="queries and keys normalised per head (with or without gains), or over all heads",
    fields={"qk_norm": one_of(QK_NORMS)},
    active=lambda config: config.qk_norm != "none",
    forward={"normalise": normalise},
    count={"fibers": fibers, "components": components},
    shapes=shapes, axes=axes, refuse=refuse, mode=mode, modes=tuple(MODES.values()),
    forgives_row_constants=False,
    text=lambda config: f"QK-norm {config.qk_norm}", chapter="chapters 7, 9")
