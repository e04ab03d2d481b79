"""Problems for the NPU planner's tests: random extreme ones the op accepts, with legal tiles,
and the reviewed case that left the AscendC API's envelope (issue 13, finding 2)."""

from pypto._core.rules import problem_from_shapes, tile_violation
from pypto._core.shapes import forward_out_size
from pypto._core.tiling import C0, ConvProblem, Tiling
from pypto._dtypes import DataType

# n=1, Cin 11, Cout 13, dx 240x18286, dy 3x300, kernel 23x22, stride 13x61, pads 71/38,
# dilation 16x4: a dilation-phase piece got backpropPadUp 8 over a 2-row dy window, so the API's
# row count wrapped and 28,800 bytes were copied into a 19,200-byte A1 buffer.
ENVELOPE_CASE = (
    ConvProblem(1, 11, 13, 240, 18286, 3, 300, 23, 22, 13, 61, 71, 71, 38, 38, 16, 4),
    Tiling(103, 8096, 16, 96, 112, 16),
)


def legal_tiles(rng, p):
    """Random tiles the op accepts for ``p`` (TS1-TS6), small ones favoured; None if none found."""
    taps16 = C0 * p.taps
    for _ in range(300):
        ml1 = rng.choice([1, rng.randint(1, p.win), p.win * rng.randint(1, max(1, min(p.hin, 4)))])
        kl1 = taps16 * rng.choice([1, 1, 2, 4])
        nl1 = C0 * rng.choice([1, 2, 4, 8])
        t = Tiling(
            ml1,
            kl1,
            nl1,
            C0 * rng.randint(1, -(-ml1 // C0)),
            C0 * rng.randint(1, kl1 // C0),
            C0 * rng.randint(1, nl1 // C0),
        )
        t = t._replace(ml0=min(t.ml0, 256), kl0=min(t.kl0, 256), nl0=min(t.nl0, 128))
        if tile_violation(p, t) is None:
            return t
    return None


def extreme_problem(rng):
    """A problem the op accepts: kernels up to 255 (taps up to TS6's limit), strides and
    dilations up to 63, paddings up to 255 and below the kernel's extent; None when the draw
    has no output."""
    big = rng.random() < 0.3
    kh = rng.choice([1, 2, 3, 7, 16, 63, 255, rng.randint(1, 255)])
    kw = (
        min(255, rng.randint(max(1, 400 // kh), max(1, 963 // kh)))
        if big
        else rng.choice([1, 2, 3, 7, 16, 65, 255, rng.randint(1, 255)])
    )
    if kh * kw > 4095:
        return None
    axes = []
    for kernel in (kh, kw):
        stride = rng.choice([1, 2, 63, rng.randint(1, 63)])
        dilation = rng.choice([1, 2, 62, 63, rng.randint(1, 63)])
        reach = (kernel - 1) * dilation
        pad = rng.choice([0, 0, rng.randint(0, min(255, reach))])  # the op: pad < k extent
        lo = max(1, reach + 1 - 2 * pad)
        size_in = rng.randint(lo, lo + rng.choice([8, 300, 3000]))
        axes.append(
            (
                size_in,
                forward_out_size(size_in, kernel, stride, pad, pad, dilation),
                stride,
                pad,
                dilation,
            )
        )
    (hin, hout, sh, ph, dh), (win, wout, sw, pw, dw) = axes
    if hout < 1 or wout < 1:
        return None
    n, cin, cout = rng.choice([1, 3]), rng.choice([1, 16, 40]), rng.choice([1, 16, 33])
    # through the op's own rule table: raises if this draw is something the op refuses
    return problem_from_shapes(
        [n, cout, hout, wout],
        [cout, cin, kh, kw],
        [n, cin, hin, win],
        DataType.DT_FP16,
        [sh, sw],
        [ph, ph, pw, pw],
        [dh, dw],
    )
