"""Configuration: tile and vec-tile settings, options and their scopes (top level,
``pypto.function``, jit, ``pypto.options``, threads, asyncio and generators), the CPU thread
count and the memory limit (specification sections 2 and 5).
"""

import copy
import threading

import numpy as np
import pytest

import pypto
from pypto import pypto_impl
from pypto.pypto_impl import ConvBpTileL0Info, ConvBpTileL1Info

FP16 = pypto.DT_FP16
VEC = [16, 16, 16, 16]


def l1(m=16, k=144, n=16):
    return ConvBpTileL1Info(m, k, n)


def l0(m=16, k=16, n=16):
    return ConvBpTileL0Info(m, k, n)


def tile_values():
    a, b = pypto.get_convbp_input_tile_shapes()
    return (a.tileML1, a.tileKL1, a.tileNL1), (b.tileML0, b.tileKL0, b.tileNL0)


ZERO_TILES = ((0, 0, 0), (0, 0, 0))
UT_TILES = ((16, 144, 16), (16, 16, 16))


@pytest.fixture(autouse=True)
def clean_config():
    pypto.reset_options()
    yield
    pypto.reset_options()


def small_conv():
    """A legal shape-only call (upstream fp16 UT case); needs tiles and vec tiles."""
    go = pypto.Tensor([1, 16, 16, 16], FP16)
    w = pypto.Tensor([16, 16, 3, 3], FP16)
    return pypto.conv_backward_input(go, [1, 16, 16, 16], w, FP16, [1, 1], [1, 1, 1, 1], [1, 1])


def rule_of_small_conv():
    with pytest.raises(pypto.error.ConvBpInputError) as e:
        small_conv()
    return e.value.rule


# ------------------------------------------------------------------------------------------------
# set / get
# ------------------------------------------------------------------------------------------------
def test_tile_shapes_default_is_zero():
    assert tile_values() == ZERO_TILES
    a, b = pypto.get_convbp_input_tile_shapes()
    assert isinstance(a, ConvBpTileL1Info) and isinstance(b, ConvBpTileL0Info)


def test_tile_shapes_round_trip():
    pypto.set_convbp_input_tile_shapes(ConvBpTileL1Info(32, 288, 48), ConvBpTileL0Info(16, 32, 48))
    assert tile_values() == ((32, 288, 48), (16, 32, 48))


def test_tile_shapes_keyword_arguments():
    pypto.set_convbp_input_tile_shapes(tile_l1_info=l1(), tile_l0_info=l0())
    assert tile_values() == UT_TILES


def test_tile_shapes_are_stored_by_value():
    a, b = l1(), l0()
    pypto.set_convbp_input_tile_shapes(a, b)
    a.tileML1, b.tileKL0 = 999, 999  # edits after setting do not reach the config
    assert tile_values() == UT_TILES
    got_a, got_b = pypto.get_convbp_input_tile_shapes()
    got_a.tileNL1, got_b.tileNL0 = 777, 777  # nor edits of what the getter returned
    assert tile_values() == UT_TILES
    assert pypto.get_convbp_input_tile_shapes()[0] is not pypto.get_convbp_input_tile_shapes()[0]


@pytest.mark.parametrize(
    "a, b", [(None, l0()), (l1(), None), ((16, 144, 16), l0()), (l0(), l1()), ("l1", "l0")]
)
def test_tile_shapes_reject_wrong_types(a, b):
    with pytest.raises(pypto.PyptoError):
        pypto.set_convbp_input_tile_shapes(a, b)
    assert tile_values() == ZERO_TILES


def test_vec_tile_shapes_default_and_round_trip():
    assert pypto.get_vec_tile_shapes() == []
    pypto.set_vec_tile_shapes(16, 16, 1, 16, 16)
    assert pypto.get_vec_tile_shapes() == [16, 16, 1, 16, 16]
    got = pypto.get_vec_tile_shapes()
    got.append(5)
    assert pypto.get_vec_tile_shapes() == [16, 16, 1, 16, 16]


def test_vec_tile_shapes_numpy_ints_become_ints():
    pypto.set_vec_tile_shapes(np.int64(16), np.int32(16), 16, np.uint8(16))
    got = pypto.get_vec_tile_shapes()
    assert got == VEC
    assert all(type(v) is int for v in got)


@pytest.mark.parametrize(
    "bad",
    [(16.0, 16, 16, 16), ("16", 16, 16, 16), (True, 16, 16, 16), ([16, 16, 16, 16],), (None,)],
)
def test_vec_tile_shapes_reject_non_ints(bad):
    with pytest.raises(pypto.PyptoError):
        pypto.set_vec_tile_shapes(*bad)
    assert pypto.get_vec_tile_shapes() == []


def test_options_setters_and_getter():
    pypto.set_options(vec_tile_shapes=VEC, convbp_tile_shapes=(l1(), l0()))
    opts = pypto.get_options()
    assert opts["vec_tile_shapes"] == VEC
    assert repr(opts["convbp_tile_shapes"]) == repr(pypto_impl.ConvBpTile(l1(), l0()))
    with pytest.raises(pypto.PyptoError):
        pypto.set_options(no_such_option=1)


def test_options_accept_a_convbp_tile():
    pypto.set_options(convbp_tile_shapes=pypto.ConvBpTile(l1(32, 288, 32), l0()))
    assert tile_values() == ((32, 288, 32), (16, 16, 16))
    pypto.set_options(convbp_tile_shapes=pypto_impl.ConvBpTile(l1(), l0()))
    assert tile_values() == UT_TILES


# ------------------------------------------------------------------------------------------------
# Scopes
# ------------------------------------------------------------------------------------------------
def test_top_level_value_persists():
    pypto.set_convbp_input_tile_shapes(l1(), l0())
    pypto.set_vec_tile_shapes(*VEC)
    assert tile_values() == UT_TILES
    with pypto.function("F"):
        assert tile_values() == UT_TILES  # visible inside scopes
        assert pypto.get_vec_tile_shapes() == VEC
    with pypto.options():
        pass
    assert tile_values() == UT_TILES
    assert pypto.get_vec_tile_shapes() == VEC
    assert small_conv().shape == [1, 16, 16, 16]


def test_function_scope_values_disappear():
    with pypto.function("F", pypto.Tensor([1], FP16)):
        pypto.set_convbp_input_tile_shapes(l1(), l0())
        pypto.set_vec_tile_shapes(*VEC)
        assert tile_values() == UT_TILES
        assert small_conv().shape == [1, 16, 16, 16]
    assert tile_values() == ZERO_TILES
    assert pypto.get_vec_tile_shapes() == []
    assert rule_of_small_conv() == "TS0"


def test_function_scope_shadows_and_restores_top_level():
    pypto.set_vec_tile_shapes(1, 1, 1, 16)
    with pypto.function("F"):
        pypto.set_vec_tile_shapes(*VEC)
        assert pypto.get_vec_tile_shapes() == VEC
    assert pypto.get_vec_tile_shapes() == [1, 1, 1, 16]


def test_function_scope_values_disappear_when_the_block_raises():
    with pytest.raises(pypto.PyptoError):
        with pypto.function("F"):
            pypto.set_vec_tile_shapes(*VEC)
            raise ValueError("boom")
    assert pypto.get_vec_tile_shapes() == []


def test_function_yields_name_and_tensor_arguments():
    a, b = pypto.Tensor([1], FP16), pypto.Tensor([2], FP16)
    with pypto.function("CONV_BP", a, 3, "x", b) as f:
        assert f.name == "CONV_BP"
        assert f.tensors == [a, b]


def test_nested_function_is_an_error():
    with pytest.raises(pypto.PyptoError) as e:
        with pypto.function("OUTER"):
            with pypto.function("INNER"):
                pass
    assert "function nested is not allowed" in str(e.value)
    assert str(e.value) == "ErrCode: F00003, RuntimeError: function nested is not allowed"
    with pypto.function("AGAIN"):  # the failed nesting left nothing behind
        pass


def test_non_pypto_exception_inside_function_is_wrapped():
    original = KeyError("missing")
    with pytest.raises(pypto.error.FeError) as e:
        with pypto.function("F"):
            raise original
    assert isinstance(e.value, pypto.PyptoError)
    assert e.value.__cause__ is original
    assert str(e.value) == "ErrCode: F00006, KeyError: 'missing'"
    with pytest.raises(pypto.error.FeError) as e:
        with pypto.function("F"):
            raise ValueError("bad value")
    assert str(e.value) == "ErrCode: F00002, ValueError: bad value"


def test_pypto_exception_inside_function_is_not_rewrapped():
    original = pypto.error.FeError(TypeError("already wrapped"))
    with pytest.raises(pypto.PyptoError) as e:
        with pypto.function("F"):
            raise original
    assert e.value is original


def test_jit_scope_values_disappear():
    @pypto.jit
    def kernel():
        pypto.set_convbp_input_tile_shapes(l1(), l0())
        pypto.set_vec_tile_shapes(*VEC)
        return tile_values(), pypto.get_vec_tile_shapes()

    assert kernel() == (UT_TILES, VEC)
    assert tile_values() == ZERO_TILES
    assert pypto.get_vec_tile_shapes() == []


def test_jit_scope_values_disappear_when_the_body_raises():
    @pypto.frontend.jit
    def kernel():
        pypto.set_vec_tile_shapes(*VEC)
        raise RuntimeError("kernel failed")

    with pytest.raises(Exception, match="kernel failed"):
        kernel()
    assert pypto.get_vec_tile_shapes() == []


def test_options_context_manager():
    with pypto.options(vec_tile_shapes=VEC, convbp_tile_shapes=(l1(), l0())):
        assert pypto.get_vec_tile_shapes() == VEC
        assert tile_values() == UT_TILES
        pypto.set_vec_tile_shapes(1, 1, 1, 32)
        assert pypto.get_vec_tile_shapes() == [1, 1, 1, 32]
    assert pypto.get_vec_tile_shapes() == []
    assert tile_values() == ZERO_TILES


def test_an_options_object_holds_its_values_by_value_in_every_scope_it_opens():
    """An options object checks and copies its values once; each scope it opens takes those
    copies as they are. Edits of the caller's records, of what the getters return and of
    what a scope set do not reach the object's values."""
    a, b, vec = l1(), l0(), list(VEC)
    scoped = pypto.options(convbp_tile_shapes=(a, b), vec_tile_shapes=vec)
    a.tileML1, vec[0] = 999, 999  # after making the object
    for _ in range(2):
        with scoped:
            assert tile_values() == UT_TILES and pypto.get_vec_tile_shapes() == VEC
            got_a, _ = pypto.get_convbp_input_tile_shapes()
            got_a.tileML1 = 777
            pypto.get_vec_tile_shapes()[0] = 777
            pypto.set_vec_tile_shapes(1, 1, 1, 32)  # replaces the scope's value, not the list
        assert tile_values() == ZERO_TILES


def test_a_tile_record_subclass_keeps_its_own_attributes_when_copied():
    class Named(pypto_impl.ConvBpTileL1Info):
        pass

    original = Named(32, 288, 16)
    original.label = "mine"
    twin = copy.copy(original)
    assert type(twin) is Named and twin.label == "mine" and twin.as_tuple() == (32, 288, 16)
    twin.tileML1 = 1
    assert original.tileML1 == 32


def test_options_context_manager_values_disappear_when_the_block_raises():
    with pytest.raises(ZeroDivisionError):
        with pypto.options():
            pypto.set_convbp_input_tile_shapes(l1(), l0())
            1 / 0
    assert tile_values() == ZERO_TILES


def test_options_decorator():
    @pypto.options(vec_tile_shapes=VEC)
    def body(set_tiles):
        if set_tiles:
            pypto.set_convbp_input_tile_shapes(l1(), l0())
        return pypto.get_vec_tile_shapes(), tile_values()

    assert body(True) == (VEC, UT_TILES)
    assert pypto.get_vec_tile_shapes() == []
    assert tile_values() == ZERO_TILES
    assert body(False) == (VEC, ZERO_TILES)  # nothing left over from the first call


def test_options_decorator_values_disappear_when_the_function_raises():
    @pypto.options()
    def body():
        pypto.set_vec_tile_shapes(*VEC)
        raise ValueError("body failed")

    with pytest.raises(ValueError, match="body failed"):
        body()
    assert pypto.get_vec_tile_shapes() == []


def test_options_decorator_recursion():
    @pypto.options()
    def body(depth):
        pypto.set_num_threads(depth)
        if depth < 3:
            body(depth + 1)
        return pypto.get_num_threads()

    assert body(1) == 1
    pypto.set_num_threads(7)
    assert body(1) == 1
    assert pypto.get_num_threads() == 7


def test_nested_options_scopes():
    with pypto.options(vec_tile_shapes=VEC):
        with pypto.options(vec_tile_shapes=[1, 1, 1, 16]):
            assert pypto.get_vec_tile_shapes() == [1, 1, 1, 16]
        assert pypto.get_vec_tile_shapes() == VEC
    assert pypto.get_vec_tile_shapes() == []


def test_reset_options_at_top_level_restores_defaults():
    pypto.set_convbp_input_tile_shapes(l1(), l0())
    pypto.set_vec_tile_shapes(*VEC)
    pypto.set_num_threads(2)
    assert small_conv().shape == [1, 16, 16, 16]
    pypto.reset_options()
    assert tile_values() == ZERO_TILES
    assert pypto.get_vec_tile_shapes() == []
    assert rule_of_small_conv() == "TS0"


def test_reset_options_inside_a_scope_clears_only_that_scope():
    pypto.set_convbp_input_tile_shapes(l1(), l0())
    pypto.set_vec_tile_shapes(*VEC)
    with pypto.options():
        pypto.set_vec_tile_shapes(1, 1, 1, 32)
        pypto.set_convbp_input_tile_shapes(l1(32, 288, 32), l0(32, 32, 32))
        pypto.reset_options()
        assert pypto.get_vec_tile_shapes() == VEC  # top-level values show again
        assert tile_values() == UT_TILES
    assert pypto.get_vec_tile_shapes() == VEC
    assert tile_values() == UT_TILES
    with pypto.function("F"):
        pypto.reset_options()
        assert pypto.get_vec_tile_shapes() == VEC
        assert small_conv().shape == [1, 16, 16, 16]


# ------------------------------------------------------------------------------------------------
# Threads
# ------------------------------------------------------------------------------------------------
def run_threads(*targets):
    errors = []

    def wrap(target):
        def run():
            try:
                target()
            except BaseException as exc:  # reported in the main thread
                errors.append(exc)

        return run

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    if errors:
        raise errors[0]


def test_thread_scopes_are_private():
    pypto.set_vec_tile_shapes(1, 1, 1, 16)  # top level: shared by every thread
    barrier = threading.Barrier(2, timeout=5)
    seen = {}

    def a():
        with pypto.options():
            pypto.set_vec_tile_shapes(*VEC)
            barrier.wait()  # 1: A has set its scoped value
            barrier.wait()  # 2: B has read and set its own
            seen["a_end"] = pypto.get_vec_tile_shapes()
        seen["a_after"] = pypto.get_vec_tile_shapes()

    def b():
        with pypto.options():
            barrier.wait()  # 1
            seen["b_start"] = pypto.get_vec_tile_shapes()
            pypto.set_vec_tile_shapes(2, 2, 2, 48)
            seen["b_own"] = pypto.get_vec_tile_shapes()
            barrier.wait()  # 2

    run_threads(a, b)
    assert seen["b_start"] == [1, 1, 1, 16]  # not A's scoped value
    assert seen["b_own"] == [2, 2, 2, 48]
    assert seen["a_end"] == VEC  # not B's scoped value
    assert seen["a_after"] == [1, 1, 1, 16]
    assert pypto.get_vec_tile_shapes() == [1, 1, 1, 16]


def test_thread_top_level_values_are_shared():
    barrier = threading.Barrier(2, timeout=5)
    seen = {}

    def writer():
        pypto.set_convbp_input_tile_shapes(l1(), l0())  # top level in this thread
        barrier.wait()  # 1: written
        barrier.wait()  # 2: reader has read

    def reader():
        seen["before"] = tile_values()
        barrier.wait()  # 1
        seen["after"] = tile_values()
        barrier.wait()  # 2

    run_threads(writer, reader)
    assert seen["after"] == UT_TILES
    assert tile_values() == UT_TILES  # and the main thread sees it too


def test_function_scopes_in_two_threads_are_not_nested():
    barrier = threading.Barrier(2, timeout=5)
    seen = {}

    def worker(name, vec):
        def run():
            with pypto.function(name):
                pypto.set_vec_tile_shapes(*vec)
                barrier.wait()  # both threads inside a function
                seen[name] = pypto.get_vec_tile_shapes()
                barrier.wait()
            seen[name + "_after"] = pypto.get_vec_tile_shapes()

        return run

    run_threads(worker("A", VEC), worker("B", [1, 1, 1, 32]))
    assert seen == {"A": VEC, "B": [1, 1, 1, 32], "A_after": [], "B_after": []}


def test_op_in_threads_uses_each_threads_scope():
    barrier = threading.Barrier(2, timeout=5)
    rules = {}

    def with_tiles():
        with pypto.options(vec_tile_shapes=VEC, convbp_tile_shapes=(l1(), l0())):
            barrier.wait()
            rules["with"] = small_conv().shape

    def without_tiles():
        with pypto.options():
            barrier.wait()
            try:
                small_conv()
            except pypto.error.ConvBpInputError as exc:
                rules["without"] = exc.rule

    run_threads(with_tiles, without_tiles)
    assert rules == {"with": [1, 16, 16, 16], "without": "TS0"}


# ------------------------------------------------------------------------------------------------
# Threads setting for the CPU kernel
# ------------------------------------------------------------------------------------------------
def test_set_num_threads_round_trip_and_scope():
    pypto.set_num_threads(3)
    assert pypto.get_num_threads() == 3
    with pypto.options(num_threads=1):
        assert pypto.get_num_threads() == 1
    assert pypto.get_num_threads() == 3
    pypto.set_num_threads(None)
    assert pypto.get_num_threads() >= 1


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2", [2]])
def test_set_num_threads_rejects_bad_values(bad):
    pypto.set_num_threads(2)
    with pytest.raises(pypto.PyptoError) as e:
        pypto.set_num_threads(bad)
    assert "num_threads" in str(e.value)
    assert pypto.get_num_threads() == 2


@pytest.mark.parametrize(
    "call",
    [
        lambda: pypto.conv_backward_input(),
        lambda: pypto.conv_backward_input(*range(8)),
        lambda: pypto.conv_backward_input(*range(7), group=1),
        lambda: pypto.conv_backward_input_size_range([1]),
        lambda: pypto.suggest_convbp_input_tile_shapes(),
        lambda: pypto.explain_convbp_input_tiling(None),
        lambda: pypto.set_convbp_input_tile_shapes(),
        lambda: pypto.set_num_threads(),
        lambda: pypto.set_options(4),
        lambda: pypto.get_options(1),
        lambda: pypto.from_numpy(),
        lambda: pypto.from_torch(1, 2, 3),
        lambda: pypto.set_device(),
    ],
    ids=[
        "op-none",
        "op-extra",
        "op-misnamed",
        "range",
        "suggest",
        "explain",
        "set-tiles",
        "set-threads",
        "set-options",
        "get-options",
        "from-numpy",
        "from-torch",
        "set-device",
    ],
)
def test_wrong_arguments_to_public_functions_are_pypto_errors(call):
    with pytest.raises(pypto.PyptoError) as e:
        call()
    assert str(e.value).startswith("ErrCode: F00001, TypeError: ")
    assert isinstance(e.value, pypto.error.FeError)


@pytest.mark.parametrize("junk", [5, None, 1.5, object()], ids=["int", "None", "float", "object"])
def test_vec_tile_shapes_that_are_no_list_are_pypto_errors(junk):
    for call in (
        lambda: pypto.set_options(vec_tile_shapes=junk),
        lambda: pypto.options(vec_tile_shapes=junk).__enter__(),
        lambda: pypto.explain_convbp_input_tiling(
            [1, 16, 4, 4],
            [16, 16, 3, 3],
            [1, 16, 4, 4],
            pypto.DT_FP16,
            [1, 1],
            [1, 1, 1, 1],
            [1, 1],
            l1(4, 144, 16),
            l0(),
            vec_tile_shapes=junk,
        ),
    ):
        try:
            call()
        except pypto.PyptoError as exc:
            assert "vec_tile_shapes" in str(exc)
        else:
            assert junk is None  # explain: None means "the vec tiles in effect"
    pypto.reset_options()


# --- scopes under asyncio and generators (adversarial round 3, finding 7) ----------------------
def _tiles(m):
    return ConvBpTileL1Info(m, 144, 16), ConvBpTileL0Info(16, 16, 16)


def _ml1():
    return pypto.get_convbp_input_tile_shapes()[0].tileML1


def test_asyncio_tasks_keep_their_own_scopes():
    """Two tasks on one thread, each in its own scope, interleaved at awaits: each sees its own
    tiles throughout, and one's exit leaves the other's scope open (it used to delete it)."""
    import asyncio

    seen = {}

    async def job(name, m, delay):
        with pypto.options(convbp_tile_shapes=_tiles(m)):
            before = _ml1()
            await asyncio.sleep(delay)
            pypto.set_vec_tile_shapes(m, m, m, m)  # set inside the scope, after the await
            await asyncio.sleep(delay)
            seen[name] = (before, _ml1(), pypto.get_vec_tile_shapes())
        seen[name + " after"] = (_ml1(), pypto.get_vec_tile_shapes())

    async def main():
        with pypto.options(num_threads=3):
            await asyncio.gather(job("A", 16, 0.01), job("B", 32, 0.03))
            return pypto.get_num_threads(), pypto.get_vec_tile_shapes()

    assert asyncio.run(main()) == (3, [])
    assert seen == {
        "A": (16, 16, [16] * 4),
        "B": (32, 32, [32] * 4),
        "A after": (0, []),
        "B after": (0, []),
    }


def test_options_decorates_coroutine_and_generator_functions():
    import asyncio

    @pypto.options(num_threads=1, vec_tile_shapes=[1, 1, 1, 16])
    async def coroutine():
        await asyncio.sleep(0)
        return pypto.get_num_threads(), pypto.get_vec_tile_shapes()

    @pypto.options(num_threads=1)
    def generator():
        received = yield pypto.get_num_threads()
        yield received, pypto.get_num_threads()
        return "done"

    assert asyncio.run(coroutine()) == (1, [1, 1, 1, 16])
    pypto.set_num_threads(2)
    gen = generator()
    assert next(gen) == 1
    assert pypto.get_num_threads() == 2  # the caller's code between steps: not in the scope
    assert gen.send("x") == ("x", 1)
    with pytest.raises(StopIteration) as stop:
        next(gen)
    assert stop.value.value == "done" and pypto.get_num_threads() == 2

    @pypto.options(num_threads=1)
    def catches():
        try:
            yield 1
        except KeyError:
            yield pypto.get_num_threads()

    gen = catches()
    next(gen)
    assert gen.throw(KeyError("k")) == 1  # thrown in: handled inside the scope


def test_options_refuses_async_generator_functions():
    with pytest.raises(pypto.PyptoError, match="async generator"):

        @pypto.options(num_threads=1)
        async def agen():
            yield 1


def test_scopes_exited_out_of_order_close_only_themselves():
    """Generators can exit scopes in any order: each exit closes its own scope only."""

    def scoped(m):
        with pypto.options(convbp_tile_shapes=_tiles(m)):
            yield _ml1()
            yield _ml1()

    a, b = scoped(16), scoped(32)
    assert next(a) == 16 and next(b) == 32  # b's scope opened inside a's
    a.close()  # a's scope exits first
    assert _ml1() == 32  # b's is still open
    assert next(b) == 32
    b.close()
    assert _ml1() == 0


def test_memory_limit_accepts_numpy_integers():
    pypto.set_options(memory_limit=np.int64(10**9))
    assert pypto.get_options()["memory_limit"] == 10**9
    with pytest.raises(pypto.PyptoError, match="positive number of bytes"):
        pypto.set_options(memory_limit=np.int64(0))
