"""The problem options of ``run``, ``tiles`` and ``golden`` (shapes, strides, paddings,
dilations, tiles) and the problem they give, with the defaults filled in."""

import pypto
from pypto._core.rules import TILE_RULES, problem_from_shapes
from pypto._core.suggest import smallest_tiles
from pypto._dtypes import DTYPE_NAMES

from .args import add_dtype, ints


def add_problem_args(parser):
    parser.add_argument("--grad-output", type=ints, required=True, metavar="N,COUT,HOUT,WOUT")
    parser.add_argument("--weight", type=ints, required=True, metavar="COUT,CIN,KH,KW")
    parser.add_argument(
        "--input-size", type=ints, metavar="N,CIN,HIN,WIN", help="default: the smallest valid size"
    )
    add_dtype(parser)
    parser.add_argument("--strides", type=ints, default=[1, 1], metavar="SH,SW")
    parser.add_argument("--paddings", type=ints, default=[0, 0, 0, 0], metavar="T,B,L,R")
    parser.add_argument("--dilations", type=ints, default=[1, 1], metavar="DH,DW")
    parser.add_argument(
        "--l1",
        type=ints,
        metavar="ML1,KL1,NL1",
        help="L1 tiles, upstream order M, K, N (default: suggested)",
    )
    parser.add_argument(
        "--l0", type=ints, metavar="ML0,KL0,NL0", help="L0 tiles, M, K, N (default: suggested)"
    )
    parser.add_argument(
        "--vec",
        type=ints,
        default=[16, 16, 16, 16],
        metavar="V,V,V,V[,V]",
        help="vector tile shapes (default 16,16,16,16)",
    )


def problem_spec(args):
    """(dy_shape, w_shape, input_size, strides, paddings, dilations, l1, l0, vec) from the
    options, and the dtype."""
    dtype = DTYPE_NAMES[args.dtype]
    input_size = args.input_size
    if input_size is None:
        (hin, _), (win, _) = pypto.conv_backward_input_size_range(
            args.grad_output, args.weight, args.strides, args.paddings, args.dilations
        )
        input_size = [args.grad_output[0], args.weight[1] if len(args.weight) > 1 else 0, hin, win]
    l1, l0 = args.l1, args.l0
    if l1 is None or l0 is None:
        try:
            s_l1, s_l0 = pypto.suggest_convbp_input_tile_shapes(
                args.grad_output,
                args.weight,
                input_size,
                dtype,
                args.strides,
                args.paddings,
                args.dilations,
            )
        except pypto.error.ConvBpInputError as exc:
            if exc.rule not in TILE_RULES or args.command != "tiles":
                raise
            # no legal tiles: explain the smallest ones, which show the rule that fails
            s_l1, s_l0 = smallest_tiles(
                problem_from_shapes(
                    args.grad_output,
                    args.weight,
                    input_size,
                    dtype,
                    args.strides,
                    args.paddings,
                    args.dilations,
                )
            )
        l1 = l1 or list(s_l1.as_tuple())
        l0 = l0 or list(s_l0.as_tuple())
    for name, value in (("--l1", l1), ("--l0", l0)):
        if len(value) != 3:
            raise pypto.error.FeError(ValueError(f"{name} takes 3 ints (M, K, N), got {value}"))
    return (
        args.grad_output,
        args.weight,
        input_size,
        args.strides,
        args.paddings,
        args.dilations,
        l1,
        l0,
        args.vec,
    ), dtype
