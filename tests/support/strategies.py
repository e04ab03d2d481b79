"""Hypothesis strategies for fuzzing the front door of pypto.conv_backward_input.

Three kinds of argument sets, as :class:`Case` objects (``Case.run`` makes the call):

* ``valid_cases()``: small legal problems (N <= 2, C <= 24, Hin/Win <= 12, K <= 5, strides and
  dilations <= 3, symmetric paddings inside rule A3), fp16 or bf16, Hin/Win anywhere in the
  range of section 3, legal tiles derived from the problem (rules TS1-TS6, checked by the
  independent ``tiles_legal`` of support/numerics.py) and legal vector tiles. Lists are sometimes
  tuples and ints sometimes NumPy integers: both are valid.
* ``boundary_cases()``: legal problems at the edges of the ranges (kernels up to 255, strides
  and dilations up to 63, paddings up to 255, dimensions up to 1000000), for shape-only calls.
* ``invalid_cases(rule)``: a valid case with ONE thing broken so that rule ``rule`` fails and
  every rule before it in the specification's table (section 4) still passes; the op must
  then report exactly ``rule``. B1 (no bias, static shapes) has no case: there is no bias
  argument and S1 already refuses dynamic (-1) dimensions, so B1 cannot be reached alone.
* ``junk_calls()`` / ``junk_config_calls()``: a valid case with one or more arguments (or tile /
  thread / memory options) replaced by random junk: wrong types, negative, zero, huge (10**30),
  floats, NaN, None, nested lists, strings, bools, and NumPy integers (which are valid ints).

Everything here is written from the specification, not from pypto's own rule code.
"""

import copy
import dataclasses
import math

import ml_dtypes
import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

import pypto
from pypto.pypto_impl import ConvBpTileL0Info, ConvBpTileL1Info
from support.numerics import ceil16, tiles_legal

DT = pypto.DataType
SUPPORTED = (DT.DT_FP16, DT.DT_BF16)
DTYPE_OF_NAME = {"fp16": DT.DT_FP16, "bf16": DT.DT_BF16}
# DataTypes that can hold host data, and their NumPy dtypes (written out here, not imported)
NUMPY_OF = {
    DT.DT_FP16: np.dtype(np.float16),
    DT.DT_BF16: np.dtype(ml_dtypes.bfloat16),
    DT.DT_FP32: np.dtype(np.float32),
    DT.DT_DOUBLE: np.dtype(np.float64),
    DT.DT_INT8: np.dtype(np.int8),
    DT.DT_INT16: np.dtype(np.int16),
    DT.DT_INT32: np.dtype(np.int32),
    DT.DT_INT64: np.dtype(np.int64),
    DT.DT_UINT8: np.dtype(np.uint8),
    DT.DT_UINT16: np.dtype(np.uint16),
    DT.DT_UINT32: np.dtype(np.uint32),
    DT.DT_UINT64: np.dtype(np.uint64),
    DT.DT_BOOL: np.dtype(np.bool_),
}

MAX_DIM = 1000000
RULE_IDS = (
    "T1",
    "R1",
    "D1",
    "D2",
    "D3",
    "D4",
    "S1",
    "S2",
    "A1",
    "A2",
    "A3",
    "A4",
    "G1",
    "C1",
    "O1",
    "TS0",
    "TS1",
    "TS2",
    "TS3",
    "TS4",
    "TS5",
    "TS6",
    "V1",
)
# the builtin kind of each rule's error (specification section 2: TypeError / ValueError /
# RuntimeError in upstream's "ErrCode: F0000x, <Kind>: ..." text)
RULE_KIND = dict.fromkeys(RULE_IDS, "ValueError")
RULE_KIND.update(T1="TypeError", TS0="RuntimeError")
MAX_DATA_ELEMENTS = 2_000_000  # larger tensors are passed shape-only

NOT_SET = object()


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


# ---------------------------------------------------------------------------------------------
# Case: one set of arguments and options
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Case:
    """Arguments for one conv_backward_input call, plus the tile options in effect.

    ``prob`` is the valid problem the case was made from (support/numerics.py's dict format); the
    argument fields are what is actually passed and may be broken. ``rule`` is the rule the case
    breaks (None: a valid case).
    """

    prob: dict
    dtype_name: str
    go_shape: list
    go_dtype: object
    w_shape: list
    w_dtype: object
    input_size: object
    out_dtype: object
    strides: object
    paddings: object
    dilations: object
    groups: object
    l1: object  # (tileML1, tileKL1, tileNL1), or None: never set
    l0: object  # (tileML0, tileKL0, tileNL0)
    vec: object  # vector tile values, or None: never set
    grad_output: object = NOT_SET  # a non-Tensor passed instead of grad_output (T1)
    weight: object = NOT_SET
    rule: object = None
    how: str = "valid"
    seed: int = 0

    def __repr__(self):
        extra = "".join(
            f", {k}={getattr(self, k)!r}"
            for k in ("grad_output", "weight")
            if getattr(self, k) is not NOT_SET
        )
        return (
            f"Case(rule={self.rule}, how={self.how!r}, {self.dtype_name}, "
            f"grad_output={self.go_shape}/{self.go_dtype}, "
            f"weight={self.w_shape}/{self.w_dtype}, "
            f"input_size={self.input_size!r}, out_dtype={self.out_dtype!r}, "
            f"strides={self.strides!r}, paddings={self.paddings!r}, "
            f"dilations={self.dilations!r}, groups={self.groups!r}, tiles={self.l1}/{self.l0}, "
            f"vec={self.vec!r}, seed={self.seed}{extra})"
        )

    def copy(self):
        return dataclasses.replace(
            self,
            **{
                f.name: copy.copy(getattr(self, f.name))
                for f in dataclasses.fields(self)
                if isinstance(getattr(self, f.name), (list, dict))
            },
        )

    # --- options -----------------------------------------------------------------------------
    def set_options(self):
        """Set this case's tiles and vector tiles in the current scope (unset ones: not set)."""
        if self.l1 is not None:
            pypto.set_convbp_input_tile_shapes(
                ConvBpTileL1Info(*self.l1), ConvBpTileL0Info(*self.l0)
            )
        if self.vec is not None:
            pypto.set_vec_tile_shapes(*self.vec)

    def configure(self):
        """Top-level options: back to the defaults, then this case's tiles."""
        pypto.reset_options()
        self.set_options()

    # --- tensors -------------------------------------------------------------------------------
    def data_ok(self):
        """True when grad_output and weight can be real arrays (small, non-negative dims,
        dtypes with a NumPy type)."""
        if self.grad_output is not NOT_SET or self.weight is not NOT_SET:
            return False
        for shape, dtype in ((self.go_shape, self.go_dtype), (self.w_shape, self.w_dtype)):
            if dtype not in NUMPY_OF or not all(_is_int(v) and v >= 0 for v in shape):
                return False
            if math.prod(int(v) for v in shape) > MAX_DATA_ELEMENTS:
                return False
        return True

    def arrays(self):
        """(dy, w) as NumPy arrays of the case's shapes and dtypes (call data_ok first)."""
        rng = np.random.default_rng(self.seed)
        return (
            random_array([int(v) for v in self.go_shape], self.go_dtype, rng),
            random_array([int(v) for v in self.w_shape], self.w_dtype, rng),
        )

    def tensors(self, arrays=None):
        """(grad_output, weight): from the arrays when given, else shape-only Tensors."""
        if arrays is not None:
            go, w = (pypto.from_numpy(a) for a in arrays)
        else:
            go = pypto.Tensor(self.go_shape, self.go_dtype, "grad_output")
            w = pypto.Tensor(self.w_shape, self.w_dtype, "weight")
        if self.grad_output is not NOT_SET:
            go = self.grad_output
        if self.weight is not NOT_SET:
            w = self.weight
        return go, w

    def op(self, grad_output, weight):
        """The op itself on the given tensors and this case's other arguments."""
        return pypto.conv_backward_input(
            grad_output,
            self.input_size,
            weight,
            self.out_dtype,
            self.strides,
            self.paddings,
            self.dilations,
            groups=self.groups,
        )

    def run(self, arrays=None):
        """configure() and call the op (with data when ``arrays`` is given)."""
        self.configure()
        return self.op(*self.tensors(arrays))

    def out_shape(self):
        """input_size as a tuple of ints when it can shape a small array, else None."""
        size = self.input_size
        if not isinstance(size, (list, tuple)) or not all(_is_int(v) and v >= 0 for v in size):
            return None
        size = tuple(int(v) for v in size)
        return size if math.prod(size) <= MAX_DATA_ELEMENTS else None

    def jit_kernel(self, dy, w, out, options_inside=False):
        """A ``pypto.jit`` kernel ``k(grad_output, weight, out)`` annotated with these arrays'
        shapes and dtypes that runs the op and moves the result into ``out``.

        With ``options_inside`` the tiles are set inside the kernel (its own scope) instead of
        at top level.
        """
        case = self

        def kernel(grad_output, weight, out):
            if options_inside:
                case.set_options()
            out.move(case.op(grad_output, weight))

        kernel.__annotations__ = {
            name: pypto.Tensor(list(a.shape), pypto.from_numpy(a).dtype)
            for name, a in (("grad_output", dy), ("weight", w), ("out", out))
        }
        return pypto.jit(kernel)


def random_array(shape, dtype, rng):
    """Random data of a DataType that has a NumPy type (normal floats, small ints, bools)."""
    np_dtype = NUMPY_OF[dtype]
    if np_dtype.kind == "f" or np_dtype == NUMPY_OF[DT.DT_BF16]:
        return rng.standard_normal(shape).astype(np_dtype)
    if np_dtype.kind == "b":
        return rng.random(shape) < 0.5
    lo = 0 if np_dtype.kind == "u" else -3
    return rng.integers(lo, 4, shape).astype(np_dtype)


# ---------------------------------------------------------------------------------------------
# Valid cases
# ---------------------------------------------------------------------------------------------
def _np_int(draw, v):
    """v as a plain int or, sometimes, a NumPy integer of a type that holds it (valid too)."""
    kinds = [int, int, np.int64]
    if -(2**31) <= v < 2**31:
        kinds.append(np.int32)
    if 0 <= v < 2**16:
        kinds.append(np.uint16)
    if -128 <= v < 128:
        kinds.append(np.int8)
    return draw(st.sampled_from(kinds))(v)


def _form(draw, values, allow_numpy=True):
    """A list of ints as a list or a tuple, its items sometimes NumPy integers."""
    items = (
        [_np_int(draw, v) for v in values] if allow_numpy and draw(st.booleans()) else list(values)
    )
    return tuple(items) if draw(st.booleans()) else items


def _axis(draw, max_in):
    """(kernel, stride, dilation, pad, out, in) of one axis with in <= max_in."""
    k = draw(st.integers(1, 5))
    s = draw(st.integers(1, 3))
    d = draw(st.integers(1, 3 if k == 1 else min(3, (max_in - 1) // (k - 1))))
    extent = (k - 1) * d + 1
    p = draw(st.integers(0, extent - 1))  # A3: pad < (K-1)*d + 1
    base = extent - 2 * p  # HinMin for out = 1
    out_lo = max(1, -(-(2 - base) // s))  # HinMax = HinMin + s - 1 >= 1
    out_hi = max(out_lo, min(8, (max_in - base) // s + 1))  # HinMin <= max_in
    out = draw(st.integers(out_lo, out_hi))
    lo = (out - 1) * s - 2 * p + extent  # section 3
    size_in = draw(st.integers(max(lo, 1), min(lo + s - 1, max_in)))
    return k, s, d, p, out, size_in


@st.composite
def valid_problems(draw, min_kernel=1, max_in=12):
    """A small legal problem dict (support/numerics.py's format)."""
    n = draw(st.integers(1, 2))
    cin, cout = draw(st.integers(1, 24)), draw(st.integers(1, 24))
    kh, sh, dh, ph, hout, hin = _axis(draw, max_in)
    kw, sw, dw, pw, wout, win = _axis(draw, max_in)
    assume(max(kh, kw) >= min_kernel)
    return dict(
        n=n,
        cin=cin,
        cout=cout,
        hout=hout,
        wout=wout,
        kh=kh,
        kw=kw,
        sh=sh,
        sw=sw,
        ph=ph,
        pw=pw,
        dh=dh,
        dw=dw,
        hin=hin,
        win=win,
    )


@st.composite
def legal_tiles(draw, prob):
    """(l1, l0, vec) legal for ``prob``: L1 tiles sometimes larger than the problem."""
    win, hin, taps = prob["win"], prob["hin"], prob["kh"] * prob["kw"]
    if draw(st.booleans()):
        ml1 = draw(st.integers(1, win))
    else:
        ml1 = win * draw(st.integers(1, hin + 1))
    nl1 = 16 * draw(st.integers(1, -(-prob["cin"] // 16) + 1))
    kl1 = 16 * taps * draw(st.integers(1, -(-prob["cout"] // 16) + 1))
    a = draw(st.integers(1, min(ceil16(ml1) // 16, 8)))
    b = draw(st.integers(1, min(kl1 // 16, 128 // a, 32)))
    c = draw(st.integers(1, max(1, min(nl1 // 16, 128 // a, 128 // b))))
    l1, l0 = (ml1, kl1, nl1), (16 * a, 16 * b, 16 * c)
    assume(tiles_legal(prob, l1, l0))
    vec = [
        draw(st.integers(1, 4)),
        draw(st.integers(1, 40)),
        draw(st.integers(1, 8)),
        16 * draw(st.integers(1, 4)),
    ]
    if draw(st.booleans()):
        vec.insert(2, 1)  # NCDHW form with D = 1
    return l1, l0, tuple(vec)


def _case_from_problem(draw, prob, dtype_name, l1, l0, vec, numpy_forms=True):
    dt = DTYPE_OF_NAME[dtype_name]
    p = prob
    tile_form = (
        (lambda t: tuple(_np_int(draw, v) for v in t))
        if numpy_forms and draw(st.booleans())
        else tuple
    )
    return Case(
        prob=prob,
        dtype_name=dtype_name,
        go_shape=_form(draw, [p["n"], p["cout"], p["hout"], p["wout"]], numpy_forms),
        go_dtype=dt,
        w_shape=_form(draw, [p["cout"], p["cin"], p["kh"], p["kw"]], numpy_forms),
        w_dtype=dt,
        input_size=_form(draw, [p["n"], p["cin"], p["hin"], p["win"]], numpy_forms),
        out_dtype=dt,
        strides=_form(draw, [p["sh"], p["sw"]], numpy_forms),
        paddings=_form(draw, [p["ph"], p["ph"], p["pw"], p["pw"]], numpy_forms),
        dilations=_form(draw, [p["dh"], p["dw"]], numpy_forms),
        groups=_np_int(draw, 1) if numpy_forms else 1,
        l1=tile_form(l1),
        l0=tile_form(l0),
        vec=tile_form(vec),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


@st.composite
def valid_cases(draw, min_kernel=1, numpy_forms=True):
    """A small valid call: problem, dtype, legal tiles and vector tiles."""
    prob = draw(valid_problems(min_kernel=min_kernel))
    l1, l0, vec = draw(legal_tiles(prob))
    dtype_name = draw(st.sampled_from(["fp16", "bf16"]))
    return _case_from_problem(draw, prob, dtype_name, l1, l0, vec, numpy_forms)


@st.composite
def boundary_cases(draw):
    """Valid problems at the edges of every range (for shape-only calls: they can be huge)."""

    def edge(lo, hi):
        return draw(st.one_of(st.sampled_from([lo, hi, lo + 1, hi - 1]), st.integers(lo, hi)))

    axes = []
    for _ in range(2):
        k = edge(1, 255)
        s, d = edge(1, 63), edge(1, 63)
        extent = (k - 1) * d + 1
        p = min(edge(0, 255), extent - 1)
        base = extent - 2 * p
        out_lo = max(1, -(-(2 - base) // s))
        out_hi = min(MAX_DIM, (MAX_DIM - base) // s + 1)
        assume(out_lo <= out_hi)
        out = draw(st.one_of(st.sampled_from([out_lo, out_hi]), st.integers(out_lo, out_hi)))
        lo = (out - 1) * s - 2 * p + extent
        size_in = draw(st.sampled_from([max(lo, 1), min(lo + s - 1, MAX_DIM)]))
        axes.append((k, s, d, p, out, size_in))
    (kh, sh, dh, ph, hout, hin), (kw, sw, dw, pw, wout, win) = axes
    assume(kh * kw * 16 <= 65535)  # S2
    n, cin, cout = edge(1, MAX_DIM), edge(1, MAX_DIM), edge(1, MAX_DIM)
    prob = dict(
        n=n,
        cin=cin,
        cout=cout,
        hout=hout,
        wout=wout,
        kh=kh,
        kw=kw,
        sh=sh,
        sw=sw,
        ph=ph,
        pw=pw,
        dh=dh,
        dw=dw,
        hin=hin,
        win=win,
    )
    taps = kh * kw
    l1 = (draw(st.sampled_from([1, win, min(win, 16)])), 16 * taps, 16)
    l0 = (16, 16, 16)
    assume(tiles_legal(prob, l1, l0))
    return _case_from_problem(
        draw, prob, draw(st.sampled_from(["fp16", "bf16"])), l1, l0, (1, 16, 1, 16)
    )


# ---------------------------------------------------------------------------------------------
# Invalid cases: one rule broken
# ---------------------------------------------------------------------------------------------
_NON_TENSORS = [
    None,
    3.0,
    "grad_output",
    [1, 16, 8, 8],
    (1, 1, 1, 1),
    {"shape": [1]},
    np.zeros((1, 1, 1, 1), np.float16),
    7,
    b"x",
    object,
]
_NON_DATATYPES = [
    None,
    6,
    8,
    6.0,
    "DT_FP16",
    np.float16,
    np.dtype(np.float16),
    True,
    [6],
    ml_dtypes.bfloat16,
]
_NON_LISTS = [
    None,
    1,
    1.0,
    "1111",
    {1, 2},
    {0: 1},
    np.array([1, 1, 1, 1]),
    range(4),
    b"\x01",
    frozenset([1]),
]
_NON_INTS = [
    1.0,
    0.5,
    "1",
    None,
    True,
    False,
    [1],
    (1,),
    np.float64(1.0),
    np.float32(2.0),
    np.bool_(True),
    1 + 0j,
    float("nan"),
    float("inf"),
]
_NON_GROUPS = [None, 1.0, True, False, "1", [1], (1,), np.float32(1), np.bool_(True), 1 + 0j]
_OUT_OF_RANGE_DIMS = [0, -1, -2, -1000, MAX_DIM + 1, 2**31, 2**63, 10**30, -(10**30)]


def _as_list(v):
    return [x for x in v]


def _set_item(seq, i, value):
    out = _as_list(seq)
    out[i] = value
    return out


def _break_T1(draw, c, data):
    target = draw(
        st.sampled_from(
            [
                "grad_output",
                "weight",
                "out_dtype",
                "input_size",
                "strides",
                "paddings",
                "dilations",
                "groups",
                "item",
            ]
        )
    )
    if target in ("grad_output", "weight"):
        if data:
            target = "out_dtype"  # a jit kernel turns arrays into Tensors: break something else
        else:
            setattr(c, target, draw(st.sampled_from(_NON_TENSORS)))
            return f"{target} not a Tensor"
    if target == "out_dtype":
        c.out_dtype = draw(st.sampled_from(_NON_DATATYPES))
    elif target == "groups":
        c.groups = draw(st.sampled_from(_NON_GROUPS))
    elif target == "item":
        target = draw(st.sampled_from(["input_size", "strides", "paddings", "dilations"]))
        seq = getattr(c, target)
        i = draw(st.integers(0, len(seq) - 1))
        setattr(c, target, _set_item(seq, i, draw(st.sampled_from(_NON_INTS))))
        return f"{target}[{i}] not an int"
    else:
        setattr(c, target, draw(st.sampled_from(_NON_LISTS)))
    return f"{target} of the wrong type"


def _break_R1(draw, c, data):
    target = draw(st.sampled_from(["go", "w", "input_size", "strides", "paddings", "dilations"]))
    want = {"go": 4, "w": 4, "input_size": 4, "strides": 2, "paddings": 4, "dilations": 2}[target]
    length = draw(st.integers(0, 7).filter(lambda n: n != want))
    field = {"go": "go_shape", "w": "w_shape"}.get(target, target)
    old = _as_list(getattr(c, field))
    new = (old * 4)[:length]  # truncated or repeated: every value stays legal
    setattr(c, field, tuple(new) if isinstance(getattr(c, field), tuple) else new)
    return f"{target} has {length} entries"


def _break_D1(draw, c, data):
    choices = [d for d in (NUMPY_OF if data else DT) if d not in SUPPORTED]
    c.go_dtype = draw(st.sampled_from(choices))
    return f"grad_output dtype {c.go_dtype}"


def _break_D2(draw, c, data):
    choices = [d for d in (NUMPY_OF if data else DT) if d not in SUPPORTED]
    c.w_dtype = draw(st.sampled_from(choices))
    return f"weight dtype {c.w_dtype}"


def _break_D3(draw, c, data):
    c.w_dtype = DT.DT_BF16 if c.go_dtype == DT.DT_FP16 else DT.DT_FP16
    return f"weight dtype {c.w_dtype} != grad_output dtype {c.go_dtype}"


def _break_D4(draw, c, data):
    c.out_dtype = draw(st.sampled_from([d for d in DT if d != c.go_dtype]))
    return f"out_dtype {c.out_dtype}"


def _break_S1(draw, c, data):
    field = draw(st.sampled_from(["go_shape", "w_shape", "input_size"]))
    i = draw(st.integers(0, 3))
    value = 0 if data and field != "input_size" else draw(st.sampled_from(_OUT_OF_RANGE_DIMS))
    setattr(c, field, _set_item(getattr(c, field), i, value))
    return f"{field}[{i}] = {value}"


def _break_S2(draw, c, data):
    how = draw(st.sampled_from(["kh", "kw", "product"]))
    if how == "product":  # both <= 255 but kh*kw*16 > 65535
        kh = draw(st.integers(17, 255))
        kw = draw(st.integers(-(-4096 // kh), 255))
        if draw(st.booleans()):
            kh, kw = kw, kh
    else:
        big = draw(st.one_of(st.integers(256, 300), st.just(MAX_DIM)))
        kh, kw = (big, c.w_shape[3]) if how == "kh" else (c.w_shape[2], big)
    c.w_shape = _as_list(c.w_shape)[:2] + [kh, kw]
    return f"kernel {kh}x{kw}"


def _bad_attr_value(draw):
    return draw(
        st.one_of(
            st.integers(-(10**30), 0),
            st.integers(64, 10**30),
            st.sampled_from([0, -1, 64, 65, 255, 10**30]),
        )
    )


def _break_A1(draw, c, data):
    i = draw(st.integers(0, 1))
    c.strides = _set_item(c.strides, i, _bad_attr_value(draw))
    return f"strides {c.strides}"


def _break_A2(draw, c, data):
    i = draw(st.integers(0, 1))
    c.dilations = _set_item(c.dilations, i, _bad_attr_value(draw))
    return f"dilations {c.dilations}"


def _break_A3(draw, c, data):
    p = c.prob
    how = draw(st.sampled_from(["range", "h_extent", "w_extent"]))
    if how == "range":
        i = draw(st.integers(0, 3))
        v = draw(
            st.one_of(
                st.integers(-(10**30), -1), st.integers(256, 10**30), st.sampled_from([-1, 256])
            )
        )
        c.paddings = _set_item(c.paddings, i, v)
    else:  # symmetric, but not smaller than the dilated kernel
        k, d, j = (p["kh"], p["dh"], 0) if how == "h_extent" else (p["kw"], p["dw"], 2)
        extent = (k - 1) * d + 1
        v = draw(st.integers(extent, 255))
        pads = _as_list(c.paddings)
        pads[j] = pads[j + 1] = v
        c.paddings = pads
    return f"paddings {c.paddings}"


def _break_A4(draw, c, data):
    p = c.prob
    axes = [
        (j, (k - 1) * d + 1)
        for j, k, d in ((0, p["kh"], p["dh"]), (2, p["kw"], p["dw"]))
        if (k - 1) * d + 1 >= 2
    ]
    j, extent = draw(st.sampled_from(axes))
    before = draw(st.integers(0, extent - 1))
    after = (before + draw(st.integers(1, extent - 1))) % extent  # != before
    pads = _as_list(c.paddings)
    pads[j], pads[j + 1] = before, after
    c.paddings = pads
    return f"paddings {pads}"


def _break_G1(draw, c, data):
    c.groups = draw(
        st.one_of(
            st.sampled_from([0, 2, 3, -1, 10**30, -(10**30)]),
            st.integers(2, 64),
            st.integers(-64, 0),
            st.builds(np.int64, st.integers(2, 64)),
            st.builds(np.int32, st.integers(-5, 0)),
        )
    )
    return f"groups {c.groups!r}"


def _other_dim(draw, v):
    """A legal dimension (S1) other than v."""
    x = draw(st.one_of(st.integers(1, 63), st.just(MAX_DIM - 1)))
    return x + 1 if x >= v else x


def _break_C1(draw, c, data):
    p = c.prob
    how = draw(st.sampled_from(["cout", "cin", "n"]))
    if how == "cout":
        c.go_shape = _set_item(c.go_shape, 1, _other_dim(draw, p["cout"]))
    elif how == "cin":
        c.input_size = _set_item(c.input_size, 1, _other_dim(draw, p["cin"]))
    else:
        c.input_size = _set_item(c.input_size, 0, _other_dim(draw, p["n"]))
    return f"{how} mismatch"


def _break_O1(draw, c, data):
    p = c.prob
    axis = draw(st.integers(0, 1))
    k, s, d, pad, out = (
        (p["kh"], p["sh"], p["dh"], p["ph"], p["hout"])
        if axis == 0
        else (p["kw"], p["sw"], p["dw"], p["pw"], p["wout"])
    )
    lo = (out - 1) * s - 2 * pad + (k - 1) * d + 1  # section 3
    hi = lo + s - 1
    choices = [st.integers(hi + 1, hi + 30), st.just(MAX_DIM)]
    if max(lo, 1) > 1:
        choices.append(st.integers(1, max(lo, 1) - 1))
    v = draw(st.one_of(*choices))
    c.input_size = _set_item(c.input_size, 2 + axis, v)
    return f"input_size[{2 + axis}] = {v} outside [{max(lo, 1)}, {hi}]"


def _break_TS0(draw, c, data):
    how = draw(
        st.sampled_from(["tiles unset", "tiles zero", "vec unset", "vec empty", "tile not int"])
    )
    if how == "tiles unset":
        c.l1 = c.l0 = None
    elif how == "tiles zero":
        c.l1, c.l0 = (0, 0, 0), (0, 0, 0)
    elif how == "vec unset":
        c.vec = None
    elif how == "vec empty":
        c.vec = ()
    else:
        which = draw(st.sampled_from(["l1", "l0"]))
        i = draw(st.integers(0, 2))
        bad = draw(st.sampled_from([16.0, "16", None, [16], np.float32(16), True, 16 + 0j]))
        setattr(c, which, tuple(_set_item(getattr(c, which), i, bad)))
        how = f"{which}[{i}] = {bad!r}"
    return how


def _nonpositive(draw):
    return draw(st.one_of(st.integers(-(10**30), 0), st.sampled_from([0, -1, -16])))


def _break_TS1(draw, c, data):
    win = c.prob["win"]
    if win >= 2 and draw(st.booleans()):
        ml1 = win * draw(st.integers(1, 40)) + draw(st.integers(1, win - 1))
    else:
        ml1 = _nonpositive(draw)
    c.l1 = (ml1,) + tuple(c.l1[1:])
    return f"tileML1 {ml1} (Win {win})"


def _break_TS2(draw, c, data):
    nl1 = draw(
        st.one_of(st.integers(1, 1000).filter(lambda v: v % 16), st.just(_nonpositive(draw)))
    )
    c.l1 = (c.l1[0], c.l1[1], nl1)
    return f"tileNL1 {nl1}"


def _break_TS3(draw, c, data):
    unit = 16 * c.prob["kh"] * c.prob["kw"]
    kl1 = draw(
        st.one_of(st.integers(1, 5 * unit).filter(lambda v: v % unit), st.just(_nonpositive(draw)))
    )
    c.l1 = (c.l1[0], kl1, c.l1[2])
    return f"tileKL1 {kl1} (unit {unit})"


def _break_TS4(draw, c, data):
    ml1, kl1, nl1 = (int(v) for v in c.l1)
    uppers = (ceil16(ml1), kl1, nl1)
    i = draw(st.integers(0, 2))
    how = draw(st.sampled_from(["nonpositive", "unaligned", "too big"]))
    if how == "nonpositive":
        v = _nonpositive(draw)
    elif how == "unaligned":
        v = draw(st.integers(1, uppers[i]).filter(lambda x: x % 16))
    else:
        v = uppers[i] + 16 * draw(st.integers(1, 100))
    c.l0 = tuple(_set_item(c.l0, i, v))
    return f"L0 tile {i} = {v} ({how}, upper {uppers[i]})"


def _break_TS5(draw, c, data):
    p = c.prob
    win, unit = p["win"], 16 * p["kh"] * p["kw"]
    buffer = draw(st.sampled_from(["L0A", "L0B", "L0C"]))
    a = b = cc = 1  # ml0, kl0, nl0 in units of 16; a pair's product > 128 overflows a buffer
    x = draw(st.integers(1, 40))
    y = draw(st.integers(128 // x + 1, 128 // x + 40))
    if buffer == "L0A":
        a, b = x, y
    elif buffer == "L0B":
        b, cc = x, y
    else:
        a, cc = x, y
    ml0, kl0, nl0 = 16 * a, 16 * b, 16 * cc
    ml1 = win * -(-ml0 // win)  # a multiple of Win (TS1) and >= ml0 (TS4)
    kl1 = unit * -(-kl0 // unit)  # a multiple of 16*Kh*Kw (TS3) and >= kl0
    nl1 = nl0  # a multiple of 16 (TS2)
    c.l1, c.l0 = (ml1, kl1, nl1), (ml0, kl0, nl0)
    return f"{buffer}: tiles {c.l1} {c.l0}"


def _break_TS6(draw, c, data):
    p = c.prob
    unit = 16 * p["kh"] * p["kw"]
    kl1 = unit * draw(st.integers(1, 4))
    nl1 = 16 * (262144 // (kl1 * 16) + 1 + draw(st.integers(0, 20)))
    c.l1 = (c.l1[0], kl1, nl1)
    c.l0 = (16, 16, 16)
    return f"L1 tiles {c.l1}: {2 * kl1 * nl1} bytes of weight alone"


def _break_V1(draw, c, data):
    how = draw(st.sampled_from(["length", "nonpositive", "last"]))
    if how == "length":
        n = draw(st.sampled_from([1, 2, 3, 6, 7, 8]))
        c.vec = tuple([1] * (n - 1) + [16])
    elif how == "nonpositive":
        vec = list(c.vec)
        vec[draw(st.integers(0, len(vec) - 1))] = _nonpositive(draw)
        c.vec = tuple(vec)
    else:
        vec = list(c.vec)
        vec[-1] = draw(st.integers(1, 10**6).filter(lambda v: v % 16))
        c.vec = tuple(vec)
    return f"vec {c.vec} ({how})"


BREAKERS = {rule: globals()[f"_break_{rule}"] for rule in RULE_IDS}


@st.composite
def invalid_cases(draw, rule=None, data=False):
    """A valid case with one thing broken so that ``rule`` (drawn when None) is the first rule
    that fails. ``data``: keep the case representable as real arrays (non-negative dims,
    dtypes with a NumPy type, no non-Tensor grad_output/weight)."""
    rule = draw(st.sampled_from(RULE_IDS)) if rule is None else rule
    case = draw(valid_cases(min_kernel=2 if rule == "A4" else 1)).copy()
    case.how = BREAKERS[rule](draw, case, data)
    case.rule = rule
    return case


# ---------------------------------------------------------------------------------------------
# Junk
# ---------------------------------------------------------------------------------------------
def junk_scalars():
    """Single values of every kind (some of them valid ints: NumPy integers, small ints)."""
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, 20),
        st.integers(-(2**70), 2**70),
        st.sampled_from(
            [0, -1, 1, 16, 10**30, -(10**30), 2**31, 2**63, 2**64, MAX_DIM, MAX_DIM + 1]
        ),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([1.0, 16.0, -0.0]),
        st.text(max_size=4),
        st.binary(max_size=3),
        st.complex_numbers(max_magnitude=10),
        st.builds(np.int64, st.integers(-3, 20)),
        st.builds(np.int32, st.integers(-3, 20)),
        st.builds(np.uint8, st.integers(0, 20)),
        st.builds(np.int8, st.integers(-3, 20)),
        st.builds(np.float64, st.floats(-5, 20)),
        st.builds(np.float16, st.floats(-5, 20)),
        st.sampled_from([np.bool_(True), np.bool_(False), np.float32("nan")]),
        st.sampled_from(list(DT)),
        st.sampled_from(
            [
                object(),
                int,
                np.float16,
                ml_dtypes.bfloat16,
                Ellipsis,
                slice(1),
                np.zeros(4, np.int64),
                np.zeros((1, 1, 1, 1), np.float16),
                np.array(3),
                pypto.Tensor([1], DT.DT_FP16),
            ]
        ),
    )


def junk_values():
    """Scalars, and lists / tuples / nested lists / dicts / sets of them."""
    scalar = junk_scalars()
    return st.one_of(
        scalar,
        st.lists(scalar, max_size=6),
        st.tuples(scalar, scalar),
        st.tuples(scalar, scalar, scalar, scalar),
        st.lists(st.lists(scalar, max_size=4), max_size=4),  # nested lists
        st.lists(st.tuples(st.integers(0, 3), st.lists(scalar, max_size=2)), max_size=3),
        st.dictionaries(st.text(max_size=2), scalar, max_size=2),
        st.frozensets(st.integers(-2, 5), max_size=4),
    )


def junk_int_lists(length):
    """Lists/tuples of ``length`` items (and other lengths), each a junk scalar or a small int."""
    item = st.one_of(st.integers(0, 20), junk_scalars())
    return st.one_of(
        st.lists(item, min_size=length, max_size=length).map(list),
        st.lists(item, min_size=length, max_size=length).map(tuple),
        st.lists(item, max_size=8),
    )


def junk_tensors():
    """pypto.Tensor constructions from junk shapes and dtypes (may itself raise PyptoError)."""
    return st.tuples(
        st.one_of(junk_int_lists(4), junk_values()),
        st.one_of(st.sampled_from(list(DT)), junk_scalars()),
    )


ARG_NAMES = (
    "grad_output",
    "input_size",
    "weight",
    "out_dtype",
    "strides",
    "paddings",
    "dilations",
    "groups",
)


@st.composite
def junk_calls(draw):
    """(case, replacements): a valid case and 1-3 of its arguments replaced by junk.

    grad_output / weight replacements are ("tensor", (shape, dtype)) to build a pypto.Tensor
    from junk, or ("value", junk) to pass the junk itself.
    """
    case = draw(valid_cases())
    names = draw(st.lists(st.sampled_from(ARG_NAMES), min_size=1, max_size=3, unique=True))
    replacements = {}
    for name in names:
        if name in ("grad_output", "weight"):
            replacements[name] = draw(
                st.one_of(
                    st.tuples(st.just("tensor"), junk_tensors()),
                    st.tuples(st.just("value"), junk_values()),
                )
            )
        elif name in ("input_size", "paddings"):
            replacements[name] = draw(st.one_of(junk_int_lists(4), junk_values()))
        elif name in ("strides", "dilations"):
            replacements[name] = draw(st.one_of(junk_int_lists(2), junk_values()))
        else:
            replacements[name] = draw(junk_values())
    return case, replacements


@st.composite
def junk_config_calls(draw):
    """(case, options): a valid case and junk tile / vector tile / thread / memory options.

    options maps "l1"/"l0" to a 3-tuple of tile values (junk or small ints), "vec" to a
    sequence of junk, "num_threads" and "memory_limit" to junk values.
    """
    case = draw(valid_cases())
    keys = draw(
        st.lists(
            st.sampled_from(["l1", "l0", "vec", "num_threads", "memory_limit"]),
            min_size=1,
            max_size=3,
            unique=True,
        )
    )
    tile_item = st.one_of(st.sampled_from([16, 32, 144, 0]), junk_scalars())
    options = {}
    for key in keys:
        if key in ("l1", "l0"):
            options[key] = draw(st.tuples(tile_item, tile_item, tile_item))
        elif key == "vec":
            huge = st.sampled_from([2**31, 2**63, 2**64, 10**30, 16 * 10**20])
            legal_but_huge = st.tuples(
                st.one_of(st.integers(1, 4), huge),
                st.one_of(st.integers(1, 40), huge),
                st.integers(1, 8),
                st.one_of(st.just(16), huge),
            )
            options[key] = draw(
                st.one_of(junk_int_lists(4), st.lists(tile_item, max_size=6), legal_but_huge)
            )
        elif key == "memory_limit":
            options[key] = draw(
                st.one_of(
                    junk_values(),
                    st.sampled_from(
                        [
                            "1K",
                            "8G",
                            "inf",
                            "nan",
                            "1e400",
                            "-1K",
                            "0.5",
                            "K",
                            "",
                            "1KiB",
                            "12 M",
                            "2T",
                            "1e3",
                        ]
                    ),
                )
            )
        else:
            options[key] = draw(
                st.one_of(junk_values(), st.integers(1, 4), st.sampled_from([2**31, 2**40, 2**63]))
            )
    return case, options
