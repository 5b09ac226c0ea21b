"""idlib: identification of attention parameters, by closed form and by measured Jacobian rank."""
from .config import AttentionConfig, ConfigError
from .attention import forward, init_params, n_params, param_shapes, random_inputs
from .counting import Count, count
from .rank import RankMeasurement, measure

__all__ = ["AttentionConfig", "ConfigError", "forward", "init_params", "n_params",
           "param_shapes", "random_inputs", "Count", "count", "RankMeasurement", "measure"]
