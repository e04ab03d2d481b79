"""pypto: PyPTO's ``conv_backward_input`` (convolution dgrad) on any CPU.

Upstream-compatible API: tensors and dtypes, tile-shape configuration with scopes, validation
with upstream's messages, shape-range inference, and an L1/L0-tiled Cython kernel (fp16/bf16
storage, fp32 accumulation, one round-to-nearest-even rounding).
"""

from . import error, frontend, pypto_impl
from ._convbp import conv_backward_input, conv_backward_input_size_range
from ._core.controller import function
from ._core.explain import TilingReport, explain_convbp_input_tiling
from ._core.options import (
    get_convbp_input_tile_shapes,
    get_num_threads,
    get_options,
    get_sum_order,
    get_vec_tile_shapes,
    options,
    reset_options,
    set_convbp_input_tile_shapes,
    set_num_threads,
    set_options,
    set_vec_tile_shapes,
)
from ._core.suggest import suggest_convbp_input_tile_shapes
from ._dtypes import DataType, TileOpFormat
from ._version import __version__
from .config import ConvBpTile
from .device import get_device, set_device
from .error import PyptoError
from .frontend import jit
from .tensor import Tensor, from_numpy, from_torch, tensor

# Upstream exports every DataType member at module level (pybind11 export_values).
globals().update({member.name: member for member in DataType})

__all__ = [
    "Tensor",
    "tensor",
    "DataType",
    "TileOpFormat",
    "from_numpy",
    "from_torch",
    "conv_backward_input",
    "conv_backward_input_size_range",
    "suggest_convbp_input_tile_shapes",
    "explain_convbp_input_tiling",
    "TilingReport",
    "set_convbp_input_tile_shapes",
    "get_convbp_input_tile_shapes",
    "set_vec_tile_shapes",
    "get_vec_tile_shapes",
    "set_num_threads",
    "get_num_threads",
    "options",
    "set_options",
    "get_options",
    "get_sum_order",
    "reset_options",
    "function",
    "jit",
    "frontend",
    "ConvBpTile",
    "PyptoError",
    "error",
    "pypto_impl",
    "__version__",
    "get_device",
    "set_device",
] + [member.name for member in DataType]
