"""Fuzzing the front door of pypto.conv_backward_input (specification sections 3 and 4).

Properties (strategies in tests/support/strategies.py):

* a valid call returns an ``input_size``-shaped Tensor; with data, values within the error bound
  of support/numerics.py against the float64 oracle, and the same bits through a ``pypto.jit``
  kernel that moves the result into the caller's array;
* a call broken in exactly one rule raises a ``ConvBpInputError`` (a ``PyptoError``) whose
  ``.rule`` is that rule, with the rule's error kind and upstream's "ErrCode: ..." text, and
  never any other exception type, one test per rule id;
* when such a call fails inside a jit kernel, the caller's output array is left untouched
  (pre-filled with a sentinel bit pattern, compared byte for byte);
* junk (wrong types, negative, zero, 10**30, floats, NaN, None, nested lists, strings, bools,
  NumPy integers) in any argument or option raises only PyptoErrors (or succeeds when the
  junk happens to be valid, e.g. NumPy integers), never another exception, a crash or a hang.

What the fuzzing found is kept as deterministic regression tests at the end of this module.

Bounded for CI: every property runs 60-150 examples (a few seconds in all). A longer run:

    PYPTO_FUZZ_EXAMPLES=20000 python -m pytest tests/core/test_fuzz.py -q -p no:cacheprovider \\
        --hypothesis-show-statistics

sets max_examples of every property (each rule's test counts as one property) to that number;
``--hypothesis-show-statistics`` prints how many examples each property tried. A hang makes the
process print every thread's stack and exit (after 120 s, plus 0.1 s per example in a long
run), so CI cannot stall.
"""

import faulthandler
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import pypto
import support.strategies as S
from pypto._core.options import MAX_THREADS
from pypto.error import ConvBpInputError
from support.numerics import check_accuracy
from support.slowdown import limit

LONG_EXAMPLES = int(os.environ.get("PYPTO_FUZZ_EXAMPLES", "0") or 0)
CODES = {"TypeError": "F00001", "ValueError": "F00002", "RuntimeError": "F00003"}
BUILTIN = {"TypeError": TypeError, "ValueError": ValueError, "RuntimeError": RuntimeError}
SENTINEL_BITS = 0x7E5A  # a NaN payload no computation produces, in fp16 and bf16 alike


def fuzz_settings(default):
    return settings(
        max_examples=LONG_EXAMPLES or default,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.filter_too_much,
            HealthCheck.data_too_large,
        ],
    )


HANG_SECONDS = 120 + 0.1 * LONG_EXAMPLES


def _hang_watchdog(config, test_name):
    """A timer that, if a test runs for HANG_SECONDS, prints every thread's stack to the real
    stderr (out of pytest's capture) and ends the process: a hang fails CI instead of stalling
    it. faulthandler's own timer backs it up for a hang that never releases the GIL."""

    def fire():
        capture = config.pluginmanager.getplugin("capturemanager")
        if capture is not None:
            capture.suspend_global_capture(in_=False)
        sys.stderr.write(
            f"\n*** {test_name} still running after {HANG_SECONDS:.0f} s: a hang. Stacks:\n"
        )
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(70)

    timer = threading.Timer(HANG_SECONDS, fire)
    timer.daemon = True
    timer.start()
    faulthandler.dump_traceback_later(HANG_SECONDS + 30, exit=True)
    return timer


@pytest.fixture(autouse=True)
def _defaults_and_hang_guard(request):
    """Default options around every test; a test that hangs dumps its stacks and exits."""
    pypto.reset_options()
    timer = _hang_watchdog(request.config, request.node.nodeid)
    yield
    timer.cancel()
    faulthandler.cancel_dump_traceback_later()
    pypto.reset_options()


def check_rule_error(err, case):
    """err is the ConvBpInputError of case.rule, with its kind and upstream's text format."""
    assert isinstance(err, ConvBpInputError), f"{type(err).__name__}: {err} for {case}"
    assert isinstance(err, pypto.PyptoError)
    assert err.rule == case.rule, f"expected {case.rule}, got {err.rule}: {err}\n{case}"
    kind = S.RULE_KIND[case.rule]
    assert isinstance(err, BUILTIN[kind]), (kind, err)
    assert str(err).startswith(f"ErrCode: {CODES[kind]}, {kind}: "), str(err)
    assert len(str(err)) > 40  # a message, not just a code


def sentinel(shape, dtype):
    """An array pre-filled with a bit pattern no computation writes (a NaN payload for
    fp16/bf16; the same bytes, repeated, for other dtypes)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    pattern = np.array([SENTINEL_BITS], np.uint16).view(np.uint8)
    return np.resize(pattern, nbytes).view(dtype).reshape(shape)


def jit_outcome(case, dy, w, out, options_inside):
    """Run case's jit kernel; return the exception it raised (None when it returned)."""
    pypto.reset_options()
    if not options_inside:
        case.set_options()
    kernel = case.jit_kernel(dy, w, out, options_inside)
    try:
        kernel(dy, w, out)
    except pypto.PyptoError as exc:
        return exc
    return None


# ---------------------------------------------------------------------------------------------
# Valid calls
# ---------------------------------------------------------------------------------------------
@fuzz_settings(150)
@given(S.valid_cases())
def test_valid_shape_only_call_returns_the_shape(case):
    p = case.prob
    # the valid input sizes of section 3, as the package reports them
    (hlo, hhi), (wlo, whi) = pypto.conv_backward_input_size_range(
        case.go_shape, case.w_shape, case.strides, case.paddings, case.dilations
    )
    hmin = (p["hout"] - 1) * p["sh"] - 2 * p["ph"] + (p["kh"] - 1) * p["dh"] + 1
    wmin = (p["wout"] - 1) * p["sw"] - 2 * p["pw"] + (p["kw"] - 1) * p["dw"] + 1
    assert (hlo, hhi, wlo, whi) == (
        max(hmin, 1),
        hmin + p["sh"] - 1,
        max(wmin, 1),
        wmin + p["sw"] - 1,
    )
    assert hlo <= p["hin"] <= hhi and wlo <= p["win"] <= whi
    result = case.run()
    assert isinstance(result, pypto.Tensor)
    assert result.shape == [p["n"], p["cin"], p["hin"], p["win"]]
    assert all(type(v) is int for v in result.shape)
    assert result.dtype == S.DTYPE_OF_NAME[case.dtype_name]
    assert not result.has_data


@fuzz_settings(150)
@given(S.boundary_cases())
def test_boundary_shape_only_call_returns_the_shape(case):
    p = case.prob
    result = case.run()
    assert result.shape == [p["n"], p["cin"], p["hin"], p["win"]]
    assert not result.has_data


@fuzz_settings(60)
@given(S.valid_cases(), st.booleans())
def test_valid_data_call_matches_the_oracle_and_jit(case, options_inside):
    dy, w = case.arrays()
    result = case.run((dy, w))
    p = case.prob
    assert result.shape == [p["n"], p["cin"], p["hin"], p["win"]]
    out = result.numpy()
    assert out.dtype == dy.dtype and out.shape == tuple(result.shape)
    check_accuracy(out, p, dy, w, repr(case))
    # the same call in a jit kernel writes the same bits into the caller's array
    target = sentinel(out.shape, out.dtype)
    assert jit_outcome(case, dy, w, target, options_inside) is None
    assert np.array_equal(target.view(np.uint16), out.view(np.uint16))


# ---------------------------------------------------------------------------------------------
# Calls broken in exactly one rule
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rule", S.RULE_IDS)
@fuzz_settings(60)
@given(data=st.data(), with_data=st.booleans())
def test_invalid_call_reports_the_broken_rule(rule, data, with_data):
    case = data.draw(S.invalid_cases(rule), label="case")
    arrays = case.arrays() if with_data and case.data_ok() else None
    with pytest.raises(pypto.PyptoError) as e:
        case.run(arrays)
    check_rule_error(e.value, case)


@fuzz_settings(150)
@given(S.invalid_cases(data=True), st.booleans())
def test_failed_jit_call_writes_nothing(case, options_inside):
    if not case.data_ok():
        event("skipped: not representable as arrays")
        return  # too large, or a dtype without a NumPy type: covered shape-only above
    event(f"rule {case.rule}")
    dy, w = case.arrays()
    out_np = np.dtype(np.float16)
    if isinstance(case.out_dtype, pypto.DataType) and case.out_dtype in S.NUMPY_OF:
        out_np = S.NUMPY_OF[case.out_dtype]
    out = sentinel(case.out_shape() or (1, 1, 1, 1), out_np)
    before = out.tobytes()
    err = jit_outcome(case, dy, w, out, options_inside)
    assert err is not None, f"the kernel did not fail: {case}"
    check_rule_error(err, case)
    assert out.tobytes() == before, "a failed call wrote into the caller's output array"


# ---------------------------------------------------------------------------------------------
# Junk
# ---------------------------------------------------------------------------------------------
def _junk_argument(case, name, replacement):
    if name in ("grad_output", "weight"):
        kind, value = replacement
        if kind == "tensor":
            shape, dtype = value
            return pypto.Tensor(shape, dtype, name)  # may raise a PyptoError itself
        return value
    return replacement


@fuzz_settings(150)
@given(S.junk_calls(), st.booleans())
def test_junk_arguments_raise_only_pypto_errors(junk, with_data):
    case, replacements = junk
    arrays = case.arrays() if with_data else None
    try:
        case.configure()
        go, w = case.tensors(arrays)
        args = dict(
            grad_output=go,
            weight=w,
            input_size=case.input_size,
            out_dtype=case.out_dtype,
            strides=case.strides,
            paddings=case.paddings,
            dilations=case.dilations,
            groups=case.groups,
        )
        for name, value in replacements.items():
            args[name] = _junk_argument(case, name, value)
        groups = args.pop("groups")
        result = pypto.conv_backward_input(**args, groups=groups)
    except ConvBpInputError as exc:
        assert exc.rule in S.RULE_IDS, exc
        assert str(exc).startswith("ErrCode: F0000")
        return
    except pypto.PyptoError as exc:
        assert str(exc).startswith("ErrCode: ")
        return
    # the junk was valid after all (NumPy integers, an equal list, ...)
    assert isinstance(result, pypto.Tensor)
    assert result.shape == [int(v) for v in args["input_size"]]


@fuzz_settings(150)
@given(S.junk_config_calls())
def test_junk_options_raise_only_pypto_errors(junk):
    case, options = junk
    dy, w = case.arrays()
    case.configure()
    try:
        for key, value in options.items():
            if key in ("l1", "l0"):
                l1 = value if key == "l1" else case.l1
                l0 = value if key == "l0" else case.l0
                pypto.set_convbp_input_tile_shapes(
                    pypto.pypto_impl.ConvBpTileL1Info(*l1), pypto.pypto_impl.ConvBpTileL0Info(*l0)
                )
            elif key == "vec":
                pypto.set_vec_tile_shapes(*value)
            else:
                pypto.set_options(**{key: value})
    except pypto.PyptoError:
        pass  # the option was refused when set: fine; the op runs with what was accepted
    try:
        result = case.op(*case.tensors((dy, w)))
    except pypto.PyptoError as exc:
        assert str(exc).startswith("ErrCode: ")
        return
    # accepted options must still give the right answer
    check_accuracy(result.numpy(), case.prob, dy, w, f"{case} with options {options}")


# ---------------------------------------------------------------------------------------------
# Regressions the fuzzing found (deterministic)
# ---------------------------------------------------------------------------------------------
def _small_valid_case():
    prob = dict(
        n=1,
        cin=20,
        cout=18,
        hout=5,
        wout=6,
        kh=3,
        kw=3,
        sh=1,
        sw=1,
        ph=1,
        pw=1,
        dh=1,
        dw=1,
        hin=5,
        win=6,
    )
    return S.Case(
        prob=prob,
        dtype_name="fp16",
        go_shape=[1, 18, 5, 6],
        go_dtype=pypto.DT_FP16,
        w_shape=[18, 20, 3, 3],
        w_dtype=pypto.DT_FP16,
        input_size=[1, 20, 5, 6],
        out_dtype=pypto.DT_FP16,
        strides=[1, 1],
        paddings=[1, 1, 1, 1],
        dilations=[1, 1],
        groups=1,
        l1=(6, 288, 32),
        l0=(16, 32, 16),
        vec=(1, 16, 1, 16),
        seed=5,
    )


@pytest.mark.parametrize(
    "vec",
    [
        (1, 2**63, 1, 16),
        (1, 10**30, 1, 16),
        (1, 16, 1, 16 * 10**20),
        (1, 16, 1, 2**64),
        (1, 2**63 - 1, 1, 16),
    ],
)
def test_huge_vector_tile_values_give_a_result_or_a_pypto_error(vec):
    """Vector tiles pass rule V1 with any positive size (the last a multiple of 16); a size the
    kernel cannot hold (>= 2**63) must be refused with a PyptoError, not an OverflowError."""
    case = _small_valid_case()
    case.vec = vec
    dy, w = case.arrays()
    try:
        result = case.run((dy, w))
    except pypto.PyptoError:
        return
    check_accuracy(result.numpy(), case.prob, dy, w, f"vec {vec}")


@pytest.mark.parametrize("threads", [MAX_THREADS + 1, 2**31, 2**40])
def test_num_threads_beyond_the_bound_is_refused_when_set(threads):
    """num_threads is bounded (libgomp ends the process when it cannot create a thread):
    a count above MAX_THREADS is a PyptoError naming the range, at set time."""
    with pytest.raises(
        pypto.PyptoError,
        match=rf"num_threads must be None or an int in "
        rf"\[1, {MAX_THREADS}\], but got {threads}",
    ):
        pypto.set_options(num_threads=threads)
    assert pypto.get_options()["num_threads"] is None


def test_the_most_threads_allowed_gives_a_result():
    case = _small_valid_case()
    dy, w = case.arrays()
    case.configure()
    pypto.set_num_threads(MAX_THREADS)
    check_accuracy(case.op(*case.tensors((dy, w))).numpy(), case.prob, dy, w, "MAX_THREADS")


@pytest.mark.parametrize(
    "bad",
    [int, np.int64, np.zeros(4), np.array([16, 16]), np.array(16.5), np.array([32.0])],
    ids=["int-type", "np.int64-type", "zeros4", "int-array2", "0d-16.5", "float-array1"],
)
def test_vector_tile_junk_is_refused_with_a_pypto_error(bad):
    """set_vec_tile_shapes takes ints (NumPy integers too). Anything that is not an integer
    (operator.index refuses it) must be refused with a PyptoError, not a bare TypeError, and
    not silently truncated (0-d float array 16.5 -> 16)."""
    with pytest.raises(pypto.PyptoError):
        pypto.set_vec_tile_shapes(16, 16, 16, bad)
    assert pypto.get_vec_tile_shapes() == []


@pytest.mark.parametrize("field", range(6))
def test_tile_field_array_is_refused_with_a_pypto_error(field):
    """Tile records accept any value (as upstream); the op's rule TS0 must turn a non-int, here
    a NumPy array of several elements, into a PyptoError (not "truth value of an array is
    ambiguous")."""
    case = _small_valid_case()
    values = list(case.l1) + list(case.l0)
    values[field] = np.zeros(4, np.int64)
    case.l1, case.l0 = tuple(values[:3]), tuple(values[3:])
    with pytest.raises(pypto.PyptoError) as e:
        case.run()
    assert getattr(e.value, "rule", None) == "TS0"


# --- classes the first probe missed ---------------------------------------------------------------
def _factorizations(draw, size, rank):
    dims = []
    for _ in range(rank - 1):
        divisors = [d for d in range(1, size + 1) if size % d == 0]
        d = draw(st.sampled_from(divisors))
        dims.append(d)
        size //= d
    return dims + [size]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_arrays_reshaped_in_place_after_wrapping_never_reach_the_kernel(data):
    """A valid call whose dy or weight array is then given another shape of the same size in
    place (``a.shape = ...``): refused before any kernel runs, whatever the new shape."""
    case = data.draw(S.valid_cases(numpy_forms=False))
    if not case.data_ok():
        return
    dy, w = case.arrays()
    tensors = case.tensors((dy, w))
    target = data.draw(st.sampled_from([dy, w]))
    rank = data.draw(st.integers(1, 5))
    new_shape = tuple(_factorizations(data.draw, target.size, rank))
    if new_shape == target.shape or not target.flags.c_contiguous:
        return
    target.shape = new_shape
    case.configure()
    with pytest.raises(pypto.PyptoError, match="changed in place after wrapping"):
        case.op(*tensors)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_library_check_never_raises_and_what_it_passes_loads(data, tmp_path_factory):
    """elf_problem (run before dlopen) on a real shared library cut anywhere or with header
    bytes changed: it returns a reason or None, never raises, and what it passes loads
    without ending the process."""
    from pypto._npu.elf import elf_problem

    library = next(pathlib.Path(np.__file__).parent.rglob("_multiarray_umath*.so"))
    original = library.read_bytes()
    cut = data.draw(st.integers(0, len(original) - 1))
    broken = bytearray(original[:cut] if data.draw(st.booleans()) else original)
    if not data.draw(st.booleans()) and len(broken) >= 64:
        for _ in range(data.draw(st.integers(1, 4))):
            broken[data.draw(st.integers(0, 63))] = data.draw(st.integers(0, 255))
    path = tmp_path_factory.mktemp("elf") / "lib.so"
    path.write_bytes(bytes(broken))
    verdict = elf_problem(path)
    assert verdict is None or isinstance(verdict, str)
    if verdict is None and bytes(broken) != original:
        # passed as loadable (a cut in unreferenced trailing bytes, a harmless header byte):
        # then loading it must not end the process
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "import ctypes, sys\ntry:\n    ctypes.CDLL(sys.argv[1])\nexcept OSError:\n    pass",
                str(path),
            ],
            capture_output=True,
            timeout=limit(60),
        )
        assert done.returncode == 0, (cut, len(original), done.returncode, done.stderr[-500:])


# One subprocess runs every drawn scenario: a parent call on some threads, then a child made by
# os.fork() that may set its own thread count and an address-space limit before its call. The
# child must give the parent's bits or a PyptoError (a limit too tight for the call), never
# hang, crash or end through libgomp; the parent waits with a deadline.
_FORK_LIMIT_SCRIPT = textwrap.dedent("""
    import json, os, resource, signal, sys
    import numpy as np, pypto
    scenarios = json.loads(sys.argv[1])
    rng = np.random.default_rng(3)
    dy = rng.standard_normal((2, 16, 12, 12)).astype(np.float16)
    w = rng.standard_normal((16, 24, 3, 3)).astype(np.float16)
    pypto.set_convbp_input_tile_shapes(*pypto.suggest_convbp_input_tile_shapes(
        dy.shape, w.shape, [2, 24, 12, 12], pypto.DT_FP16, [1, 1], [1, 1, 1, 1], [1, 1]))
    pypto.set_vec_tile_shapes(16, 16, 16, 16)

    def call():
        return pypto.conv_backward_input(pypto.from_numpy(dy), [2, 24, 12, 12], pypto.from_numpy(w),
                                         pypto.DT_FP16, [1, 1], [1, 1, 1, 1], [1, 1]).numpy()

    pypto.set_num_threads(1)
    want = call().view(np.uint16)
    for parent_threads, child_threads, headroom_mib in scenarios:
        pypto.set_num_threads(parent_threads)
        assert np.array_equal(call().view(np.uint16), want)
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                if headroom_mib is not None:
                    with open("/proc/self/statm") as f:
                        mapped = int(f.read().split()[0]) * resource.getpagesize()
                    resource.setrlimit(resource.RLIMIT_AS,
                                       (mapped + (headroom_mib << 20), resource.RLIM_INFINITY))
                if child_threads is not None:
                    pypto.set_num_threads(child_threads)
                code = 0 if np.array_equal(call().view(np.uint16), want) else 4
            except pypto.PyptoError:
                code = 5
            finally:
                os._exit(code)
        signal.alarm(int(sys.argv[2]))  # a hung child ends this process, which the test sees
        _, status = os.waitpid(pid, 0)
        signal.alarm(0)
        print(json.dumps([parent_threads, child_threads, headroom_mib,
                          os.WEXITSTATUS(status) if os.WIFEXITED(status)
                          else -os.WTERMSIG(status)]))
""")


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    scenarios=st.lists(
        st.tuples(
            st.sampled_from([1, 2, 3, 8, 64]),
            st.one_of(st.none(), st.sampled_from([1, 2, 16, 1024])),
            st.one_of(st.none(), st.sampled_from([8, 64, 256, 2048])),
        ),
        min_size=4,
        max_size=8,
    )
)
def test_forked_children_under_thread_and_address_space_limits_compute_or_refuse(
    scenarios, tmp_path_factory
):
    done = subprocess.run(
        [sys.executable, "-c", _FORK_LIMIT_SCRIPT, json.dumps(scenarios), str(int(limit(60)))],
        capture_output=True,
        text=True,
        timeout=limit(60) * (len(scenarios) + 1),
        cwd=tmp_path_factory.getbasetemp(),
    )
    assert "Thread creation failed" not in done.stderr, "libgomp ended a process"
    assert done.returncode == 0, (scenarios, done.returncode, done.stderr[-2000:])
    outcomes = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(outcomes) == len(scenarios)
    for _parent_threads, _child_threads, headroom_mib, code in outcomes:
        # 0: the parent's bits; 5: a PyptoError (only where an address-space limit was set)
        assert code == 0 or (code == 5 and headroom_mib is not None), outcomes
        event(f"child {'computed' if code == 0 else 'refused'}")
