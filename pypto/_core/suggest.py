"""suggest_convbp_input_tile_shapes: tiles that are legal on an Atlas A2/A3 NPU and fast here.

The CPU kernel (pypto._kernels) likes large L0 blocks (few reloads of the fp32 accumulator),
an M-L0 block that is a whole number of its 32-pixel register width, and an L1 tile of a few
hundred pixels per stride phase. Candidates are built from those preferences and shrunk until
the NPU rules (the op's own TS1-TS6 checks) all pass.
"""

from ..error import ConvBpValueError, argument_errors_are_pypto_errors
from ..pypto_impl import ConvBpTileL0Info, ConvBpTileL1Info
from .rules import problem_from_shapes, tile_violation
from .tiling import C0, Tiling, ceil_align, ceil_div

__all__ = ["suggest_convbp_input_tile_shapes"]

PIXELS_PER_PHASE = 256  # pixels of one stride phase per L1 tile
MAX_CHANNELS = 128  # tileNL1 / tileNL0 cap
MAX_K_L0 = 128


def _candidates(p):
    """Preferred tiles first, then ever smaller ones (every value legal by itself)."""
    phases = p.sh * p.sw
    nl1 = min(ceil_align(p.cin, C0), MAX_CHANNELS)
    for pixels in (PIXELS_PER_PHASE * phases, 128 * phases, 64 * phases, 16):
        pixels = min(pixels, p.hin * p.win)
        if p.win >= pixels:
            ml1 = max(C0, pixels // C0 * C0) if p.win >= C0 else p.win
            ml1 = min(ml1, p.win)
        else:
            ml1 = max(1, pixels // p.win) * p.win
        per_phase = ceil_div(ml1, phases)
        ml0 = min(ceil_align(per_phase, 32), 256, ceil_align(ml1, C0))
        # Shrink the Cout block before the channel block: on the CPU a K-L1 block is only a
        # loop bound, while tileNL1 decides how many channels share one gathered A block.
        for nl in (nl1, 64, 32, 16):
            nl = min(nl, nl1)
            for cout_l1 in (ceil_align(min(p.cout, 256), C0), 128, 64, 32, 16):
                kl1 = cout_l1 * p.taps  # a whole multiple of 16 * Kh * Kw (TS3)
                for kl0 in (MAX_K_L0, 64, 32, 16):
                    kl0 = min(kl0, kl1)
                    for m0 in (ml0, 128, 64, 32, 16):
                        m0 = min(m0, ml0)
                        yield Tiling(ml1, kl1, nl, m0, kl0, nl)


@argument_errors_are_pypto_errors
def suggest_convbp_input_tile_shapes(
    grad_output_shape, weight_shape, input_size, dtype, strides, paddings, dilations
):
    """Suggest L1/L0 tiles for a dgrad: legal on an Atlas A2/A3 NPU (rules TS1-TS6), fast here.

    Parameters
    ----------
    grad_output_shape, weight_shape, input_size : sequences of 4 ints (NCHW, [Cout, Cin, Kh, Kw])
    dtype : pypto.DataType (DT_FP16 or DT_BF16)
    strides, paddings, dilations : as for conv_backward_input

    Returns
    -------
    (ConvBpTileL1Info, ConvBpTileL0Info)
        Pass them to ``pypto.set_convbp_input_tile_shapes``. The op always uses the tiles the
        user sets; this is only a helper.

    Raises
    ------
    PyptoError
        Bad arguments, or a kernel so large that no tiles satisfy the NPU's L1 rule (TS6).
    """
    p = problem_from_shapes(
        grad_output_shape, weight_shape, input_size, dtype, strides, paddings, dilations
    )
    for tiling in _candidates(p):
        violation = tile_violation(p, tiling)
        if violation is None:
            return (
                ConvBpTileL1Info(tiling.ml1, tiling.kl1, tiling.nl1),
                ConvBpTileL0Info(tiling.ml0, tiling.kl0, tiling.nl0),
            )
    rule, message = violation  # of the smallest tiles tried: the cause no tiles fit
    raise ConvBpValueError(
        rule,
        f"No L1/L0 tiles satisfy the NPU's rules for this problem: "
        f"even the smallest, L1 {tuple(tiling[:3])} and L0 "
        f"{tuple(tiling[3:])}, break {rule}: {message}",
    )


def smallest_tiles(p):
    """The last, smallest tiles the suggestion tries (legal or not): what ``pypto tiles``
    explains when no tiles are legal."""
    for tiling in _candidates(p):  # noqa: B007 - the last one, read after the loop, is wanted
        pass
    return (
        ConvBpTileL1Info(tiling.ml1, tiling.kl1, tiling.nl1),
        ConvBpTileL0Info(tiling.ml0, tiling.kl0, tiling.nl0),
    )
