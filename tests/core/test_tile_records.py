"""The tile records of pypto.pypto_impl: ConvBpTileL1Info, ConvBpTileL0Info and ConvBpTile
(specification section 2).
"""

import copy
import pickle

import pytest

import pypto
from pypto import pypto_impl
from pypto.pypto_impl import ConvBpTileL0Info, ConvBpTileL1Info


def l1(m=16, k=144, n=16):
    return ConvBpTileL1Info(m, k, n)


def l0(m=16, k=16, n=16):
    return ConvBpTileL0Info(m, k, n)


# ------------------------------------------------------------------------------------------------
# Tile records
# ------------------------------------------------------------------------------------------------
def test_tile_infos_positional_order_is_m_k_n():
    a = ConvBpTileL1Info(1, 2, 3)
    assert (a.tileML1, a.tileKL1, a.tileNL1) == (1, 2, 3)
    b = ConvBpTileL0Info(4, 5, 6)
    assert (b.tileML0, b.tileKL0, b.tileNL0) == (4, 5, 6)


def test_tile_infos_keywords():
    a = ConvBpTileL1Info(tileML1=16, tileNL1=32, tileKL1=144)
    assert (a.tileML1, a.tileKL1, a.tileNL1) == (16, 144, 32)
    b = ConvBpTileL0Info(tileNL0=48, tileML0=16, tileKL0=32)
    assert (b.tileML0, b.tileKL0, b.tileNL0) == (16, 32, 48)


def test_tile_infos_default_to_zero():
    a, b = ConvBpTileL1Info(), ConvBpTileL0Info()
    assert (a.tileML1, a.tileKL1, a.tileNL1) == (0, 0, 0)
    assert (b.tileML0, b.tileKL0, b.tileNL0) == (0, 0, 0)


def test_tile_infos_are_writable():
    a, b = ConvBpTileL1Info(), ConvBpTileL0Info()
    a.tileML1, a.tileKL1, a.tileNL1 = 32, 288, 64
    b.tileML0, b.tileKL0, b.tileNL0 = 16, 32, 48
    assert (a.tileML1, a.tileKL1, a.tileNL1) == (32, 288, 64)
    assert (b.tileML0, b.tileKL0, b.tileNL0) == (16, 32, 48)


def test_tile_infos_reject_bad_construction():
    with pytest.raises(TypeError):
        ConvBpTileL1Info(1, 2, 3, 4)
    with pytest.raises(TypeError):
        ConvBpTileL0Info(tileML1=16)
    with pytest.raises(TypeError):
        ConvBpTileL1Info(16, tileML1=16)


def test_convbp_tile_repr():
    tile = pypto_impl.ConvBpTile(ConvBpTileL1Info(16, 144, 16), ConvBpTileL0Info(16, 16, 16))
    text = (
        "ConvBpTile: {tileL1Info: {tileML1: 16, tileKL1: 144, tileNL1: 16}, "
        "tileL0Info: {tileML0: 16, tileKL0: 16, tileNL0: 16}};"
    )
    assert repr(tile) == text
    assert str(tile) == text
    assert tile.ToString() == text
    assert (
        repr(pypto.ConvBpTile(ConvBpTileL1Info(16, 144, 16), ConvBpTileL0Info(16, 16, 16))) == text
    )


def test_convbp_tile_default_and_valid():
    assert repr(pypto_impl.ConvBpTile()) == (
        "ConvBpTile: {tileL1Info: {tileML1: 0, tileKL1: 0, tileNL1: 0}, "
        "tileL0Info: {tileML0: 0, tileKL0: 0, tileNL0: 0}};"
    )
    assert not pypto_impl.ConvBpTile().valid()
    assert pypto_impl.ConvBpTile(l1(), l0()).valid()
    assert not pypto_impl.ConvBpTile(l1(), l0(32, 16, 16)).valid()


@pytest.mark.parametrize(
    "make",
    [
        lambda: pypto.ConvBpTile(l1(32, 288, 16), l0(16, 144, 16)),
        lambda: pypto_impl.ConvBpTile(l1(32, 288, 16), l0(16, 144, 16)),
        lambda: l1(32, 288, 16),
        lambda: l0(16, 144, 16),
    ],
    ids=["config.ConvBpTile", "pypto_impl.ConvBpTile", "L1Info", "L0Info"],
)
def test_tile_records_copy_and_pickle(make):
    original = make()
    for how in (copy.copy, copy.deepcopy, lambda t: pickle.loads(pickle.dumps(t))):
        twin = how(original)
        assert type(twin) is type(original) and repr(twin) == repr(original)
    deep = copy.deepcopy(original)
    if isinstance(original, (pypto.ConvBpTile, pypto_impl.ConvBpTile)):
        deep.tileL1Info.tileML1 = 64  # the copy's records are its own
        assert original.tileL1Info.tileML1 == 32 and original.valid() and deep.valid()
    with pytest.raises(AttributeError):
        original.no_such_field  # noqa: B018 - a plain AttributeError, not a RecursionError
