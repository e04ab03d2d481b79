"""``tiles``: how the NPU tile rules judge a set of tiles, with their numbers."""

import pypto
from pypto import pypto_impl

from .problem import add_problem_args, problem_spec

NAME = "tiles"


def add_parser(commands, common):
    parser = commands.add_parser(
        NAME, parents=[common], help="explain how the NPU rules judge a set of tiles"
    )
    add_problem_args(parser)


def handle(args):
    """Exit 0 when the tiles are legal, 1 when a rule fails."""
    spec, dtype = problem_spec(args)
    dy, w, size, strides, paddings, dilations, l1, l0, vec = spec
    report = pypto.explain_convbp_input_tiling(
        dy,
        w,
        size,
        dtype,
        strides,
        paddings,
        dilations,
        pypto_impl.ConvBpTileL1Info(*l1),
        pypto_impl.ConvBpTileL0Info(*l0),
        vec_tile_shapes=vec,
    )
    print(report)
    return 0 if report.legal else 1
