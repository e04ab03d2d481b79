"""The localisation inside a failing task (issue 45): the runs of 16-channel blocks (C0) and
the bands of rows that hold the elements outside the bound, in the text, the JSON, the rows of
``pypto._golden.calls`` and the heatmap's red frames.

The results are the independent float64 oracle (tests/support/reference.py) rounded once, then
corrupted in known places; which elements are outside the bound is computed here from the
oracle (|a - g| > ulp(g) + K 2^-24 sum|dy w|), not taken from pypto.
"""

import numpy as np
import pytest

import pypto.testing as T
from pypto._golden import calls
from support.reference import dgrad_abs_reference, dgrad_reference, round_once, ulp

# the suggested tiles give tasks of 64 channels by 10 rows: M tiles rows 0-9, 10-19, 20-23
PROBLEM = dict(dy=[2, 32, 24, 24], w=[32, 64, 3, 3], x=[2, 64, 24, 24])
ROWS_PER_TILE, K = 10, 32 * 3 * 3


@pytest.fixture(scope="module")
def clean():
    """(dy, w, the oracle's golden, its sum|dy w|, the golden rounded once: a correct dx)."""
    rng = np.random.default_rng(7)
    dy = rng.uniform(-1, 1, PROBLEM["dy"]).astype(np.float16)
    w = rng.uniform(-1, 1, PROBLEM["w"]).astype(np.float16)
    args = ((24, 24), (1, 1), (1, 1), (1, 1))
    golden = dgrad_reference(dy, w, *args)
    size = dgrad_abs_reference(dy, w, *args)
    return dy, w, golden, size, round_once(golden, "fp16")


def judge(clean, corrupt):
    dy, w, golden, size, good = clean
    bad = good.copy()
    corrupt(bad)
    result = T.compare(bad, dy, w, PROBLEM["x"], [1, 1], [1, 1, 1, 1], [1, 1])
    # outside the bound, computed from the oracle alone
    error = np.abs(bad.astype(np.float64) - golden)
    outside = error > ulp(golden, "fp16") + K * 2.0**-24 * size
    return result, outside, error / ulp(golden, "fp16")


def regions(result):
    return [
        (r.image, r.channels, r.rows, r.outside, r.elements) for r in result.localisation.regions()
    ]


def count(outside, n, channels, rows):
    return int(outside[n, channels[0] : channels[1] + 1, rows[0] : rows[1] + 1].sum())


def test_a_box_inside_a_task_is_named_by_its_c0_blocks_and_rows(clean):
    """The new-user note's corruption: channels 16-31, rows 8-11 of image 1; here rows 12-15,
    inside M tile 1 (rows 10-19) of a 64-channel task."""
    result, outside, ulps = judge(clean, lambda dx: dx[1, 16:32, 12:16].__iadd__(1.0))
    assert outside.sum() == outside[1, 16:32, 12:16].sum() > 1500
    n = count(outside, 1, (16, 31), (12, 15))
    assert regions(result) == [(1, (16, 31), (12, 15), n, 16 * 4 * 24)]
    (region,) = result.localisation.regions()
    assert region.where == "image 1, channels 16-31, rows 12-15"
    assert region.max_ulp == pytest.approx(float(ulps[1, 16:32, 12:16].max()), rel=1e-12)
    text = result.report()
    task = f"    image 1, channels 0-63, M tile 1 (rows 10-19): {n} of {64 * 10 * 24} outside"
    assert task in text
    assert f"      region image 1, channels 16-31, rows 12-15: {n} of 1536 outside, max " in text
    # the JSON and a table's row carry the same region
    (failing,) = result.as_dict()["localisation"]["failing_tasks"]
    assert failing["regions"] == [
        {
            "image": 1,
            "channels": [16, 31],
            "rows": [12, 15],
            "outside": n,
            "elements": 1536,
            "max_ulp": region.max_ulp,
            "where": "image 1, channels 16-31, rows 12-15",
        }
    ]
    (row_task,) = calls.judged(result)["failing_tasks"]
    assert row_task["regions"] == failing["regions"]


@pytest.mark.parametrize(
    "corrupt, expected",
    [
        # one element: its C0 block, its row
        (lambda dx: dx[0, 20:21, 5:6, 7:8].__iadd__(4.0), [(0, (16, 31), (5, 5))]),
        # rows 8-11 cross the M tiles' boundary (rows 9 | 10): one region in each task
        (
            lambda dx: dx[1, 16:32, 8:12].__iadd__(1.0),
            [(1, (16, 31), (8, 9)), (1, (16, 31), (10, 11))],
        ),
        # two runs of C0 blocks (0-15 and 32-47, not 16-31) in one task
        (
            lambda dx: (dx[0, 0:16, 2:4].__iadd__(1.0), dx[0, 32:48, 2:4].__iadd__(1.0)),
            [(0, (0, 15), (2, 3)), (0, (32, 47), (2, 3))],
        ),
        # two bands of rows in one run: rows 0-1 and 5-6; and C0 blocks 32-63 as one run
        (
            lambda dx: (dx[1, 40:50, 0:2].__iadd__(1.0), dx[1, 40:50, 5:7].__iadd__(1.0)),
            [(1, (32, 63), (0, 1)), (1, (32, 63), (5, 6))],
        ),
    ],
)
def test_regions_follow_the_c0_blocks_and_the_bands_of_rows(clean, corrupt, expected):
    result, outside, _ = judge(clean, corrupt)
    expected = [
        (n, c, r, count(outside, n, c, r), (c[1] - c[0] + 1) * (r[1] - r[0] + 1) * 24)
        for n, c, r in expected
    ]
    assert sorted(regions(result)) == sorted(expected)
    assert sum(e[3] for e in expected) == outside.sum()


def test_more_than_four_regions_in_a_task_are_one_box(clean):
    """Every other row of channels 0-15 in M tile 0: five bands, one box around them."""
    result, outside, _ = judge(clean, lambda dx: dx[0, 0:16, 0:10:2].__iadd__(1.0))
    n = count(outside, 0, (0, 15), (0, 8))
    assert n == outside.sum() and n > 5 * 16 * 24 * 0.9
    assert regions(result) == [(0, (0, 15), (0, 8), n, 16 * 9 * 24)]


def test_a_correct_result_has_no_region(clean):
    result, outside, _ = judge(clean, lambda dx: None)
    assert not outside.any() and result.localisation.regions() == []
    assert calls.judged(result)["failing_tasks"] == []


def test_the_heatmap_frames_the_rows_of_each_region(clean, tmp_path, monkeypatch):
    """The red frames are the regions' bands of rows (over every image), not whole M tiles."""
    pytest.importorskip("matplotlib")
    from matplotlib import patches

    from pypto._golden import heatmap

    frames = []

    class Recording:
        @staticmethod
        def Rectangle(xy, width, height, **kwargs):
            frames.append((xy[1] + 0.5, xy[1] + 0.5 + height - 1, width, kwargs["edgecolor"]))
            return patches.Rectangle(xy, width, height, **kwargs)

    real = heatmap._matplotlib

    def recording():
        figure, canvas, colors, _ = real()
        return figure, canvas, colors, Recording

    monkeypatch.setattr(heatmap, "_matplotlib", recording)

    def corrupt(dx):
        dx[1, 16:32, 12:16] += 1.0  # rows 12-15 of image 1
        dx[0, 40, 21] += 4.0  # row 21 of image 0

    result, _, _ = judge(clean, corrupt)
    path = tmp_path / "dx.png"
    result.plot(str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(frames) == [(12, 15, 24, "#ff2020"), (21, 21, 24, "#ff2020")]
