"""The attention code people run: ``transformers`` modules measured the way idlib measures its own.

Three jobs, one module each:

* :mod:`.modules`: building a family's own attention module for a small layer (float64, seeded
  weights, every float32 step re-evaluated in float64) and running its own forward;
* :mod:`.measure`: the certified Jacobian rank of the module's outputs with respect to its own
  parameters, on idlib's seeded inputs, paired with the closed form (:mod:`idlib.verdict`);
* :mod:`.layout`: the module's weights in idlib's layout and back, and idlib's symmetry group
  (:mod:`idlib.symmetry`) acting on them.

``transformers`` is optional: it is imported inside these functions only.
"""
from .layout import (Layout, from_params, latent_action, layout, symmetry_check,  # noqa: F401
                     to_params)
from .measure import ModuleMeasurement, check, check_family_of, inputs, jacobian, measure  # noqa: F401
from .modules import (ATTENTION, DTYPE, FLOAT32_INSIDE, HEAD_DIM_FIXED, SMALL_LATENT, SPECS,  # noqa: F401
                      Built, RMSNorm64, Spec, _complex128_rotation, _forward, _mask, build, eager64,
                      forward, hf_config, parameters, position_embeddings, randomize, small_latent_layer,
                      small_layer)
from ..symmetry import whole_norm_action  # noqa: F401 (chapter 9 names it here)
