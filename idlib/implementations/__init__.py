"""The attention code people run: ``transformers`` modules measured the way idlib measures its own.

Three jobs, one module each:

* :mod:`.modules`: building a family's own attention module for a small layer of a given layer
  type (float64, seeded weights, every float32 step re-evaluated in float64: ``FLOAT64_PATCHES``)
  and running its own forward;
* :mod:`.measure`: the certified Jacobian rank of the module's outputs with respect to its own
  parameters, on idlib's seeded inputs, paired with the closed form (:mod:`idlib.verdict`), for
  one small layer (``check``) or for every layer type of a config file (``check_model_of``);
* :mod:`.layout`: the module's weights in idlib's layout and back, and idlib's symmetry group
  (:mod:`idlib.symmetry`) acting on them.

``transformers`` is optional: it is imported inside these functions only.
"""
from .layout import (Layout, from_params, latent_action, layout, symmetry_check,  # noqa: F401
                     to_params)
from .measure import (ModuleMeasurement, check, check_family_of, check_model_of, inputs,  # noqa: F401
                      jacobian, measure, small_model_layer)
from .modules import (ATTENTION, FAMILIES_2026, FLOAT32_INSIDE, FLOAT64_EVERYWHERE,  # noqa: F401
                      FLOAT64_PATCHES, HEAD_DIM_FIXED, SMALL_LATENT, SPECS, Built,
                      Spec, _complex128_rotation, _forward, _mask, _transformers,
                      alibi_slopes,
                      build, eager64, module_classes, forward, hf_config, mpt_alibi, parameters, patches,
                      position_embeddings, randomize, small_latent_layer, small_layer)
from ..symmetry import whole_norm_action  # noqa: F401 (chapter 9 names it here)


def __getattr__(name: str):
    """RMSNorm64 and LayerNorm64, torch.nn.Module classes defined on first use (``.modules``)."""
    if name in ("RMSNorm64", "LayerNorm64"):
        return getattr(module_classes(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
