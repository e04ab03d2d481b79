"""`pypto golden` / `pypto compare` against stale, edited, corrupted and hostile case folders.

Each fault must give one `error:` line and exit code 2 (or the right verdict), never a
traceback, and never a verdict on a result that does not belong to the case: a golden written
over an old case (stale output.bin), a plot format matplotlib cannot write, hand-edited
manifests, a .npy whose header lies about its size, a golden that does not match its inputs,
empty path arguments.
"""

import contextlib
import hashlib
import io
import json
import os
import shutil

import numpy as np
import pytest

import pypto
from pypto import __main__ as cli
from pypto._golden.case import draw_inputs, golden_dgrad, make_case
from support.reference import dgrad_reference

GOLDEN_ARGS = [
    "--grad-output",
    "2,32,12,12",
    "--weight",
    "32,40,3,3",
    "--paddings",
    "1,1,1,1",
    "--l1",
    "36,288,16",
    "--l0",
    "32,144,16",
]
OTHER_TILES = [
    "--grad-output",
    "2,32,12,12",
    "--weight",
    "32,40,3,3",
    "--paddings",
    "1,1,1,1",
    "--l1",
    "144,288,48",
    "--l0",
    "144,128,48",
]
DX_SHAPE = (2, 40, 12, 12)


def _run(*args):
    """pypto's CLI in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main([str(a) for a in args])
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def _one_error(code, err, text):
    assert code == 2 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert text in lines[0], err


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("hardening") / "case"
    code, _, err = _run("golden", *GOLDEN_ARGS, "--seed", "3", "--out", out)
    assert code == 0, err
    return out


@pytest.fixture
def case(made, tmp_path):
    """A fresh copy of the case (mtimes kept), with the kernel's result = pypto's."""
    path = tmp_path / "case"
    shutil.copytree(made, path)
    shutil.copyfile(path / "output/pypto.bin", path / "output/output.bin")
    return path


def _manifest(case):
    return json.loads((case / "manifest.json").read_text())


def _set_manifest(case, manifest):
    (case / "manifest.json").write_text(json.dumps(manifest))


# --- finding 5: golden over an existing case ------------------------------------------------------
def test_golden_refuses_a_folder_holding_a_case_without_force(case):
    before = (case / "output/output.bin").read_bytes()
    manifest = (case / "manifest.json").read_text()
    code, out, err = _run("golden", *OTHER_TILES, "--out", case)
    _one_error(code, err, f"{case} already holds a golden case")
    assert "--force" in err and out == ""
    # nothing was touched
    assert (case / "output/output.bin").read_bytes() == before
    assert (case / "manifest.json").read_text() == manifest
    # input/ or output/ files alone (no manifest) are a case too
    (case / "manifest.json").unlink()
    code, _, err = _run("golden", *OTHER_TILES, "--out", case)
    _one_error(code, err, "already holds a golden case")
    # an empty folder, or one with unrelated files, is fine
    fresh = case.parent / "fresh"
    fresh.mkdir()
    (fresh / "notes.txt").write_text("x")
    code, _, err = _run("golden", *GOLDEN_ARGS, "--out", fresh)
    assert code == 0, err


def test_golden_force_deletes_the_old_kernel_results(case):
    np.load(case / "output/pypto.npy").tofile(case / "output/output.bin")
    np.save(case / "output/output.npy", np.load(case / "output/pypto.npy"))
    (case / "output/old_run.log").write_text("x")
    (case / "output/keep").mkdir()  # a folder is the user's: kept
    code, out, err = _run("golden", *OTHER_TILES, "--out", case, "--force")
    assert code == 0, err
    assert "removed the old case's output/old_run.log, output/output.bin, output/output.npy" in out
    assert sorted(p.name for p in (case / "output").iterdir()) == [
        "golden.bin",
        "golden.npy",
        "keep",
        "pypto.bin",
        "pypto.npy",
    ]
    assert _manifest(case)["tiles"]["l1"] == [144, 288, 48]
    # the new case has no result yet: compare says so instead of judging the old one
    code, out, err = _run("compare", case)
    _one_error(code, err, "output.bin")
    assert "verdict" not in out


def test_an_interrupted_golden_leaves_no_manifest(case, monkeypatch):
    from pypto._golden.files import write as _casefiles

    calls = []

    def failing_write(directory, stem, array, dtype_name):
        calls.append(stem)
        if len(calls) == 3:
            raise OSError("disk full")
        return real_write(directory, stem, array, dtype_name)

    real_write = _casefiles._write
    monkeypatch.setattr(_casefiles, "_write", failing_write)
    code, _, err = _run("golden", *OTHER_TILES, "--out", case, "--force")
    _one_error(code, err, "cannot write the case to")
    # half the new files are written: no manifest (old or new) describes them
    assert not (case / "manifest.json").exists()
    assert not (case / "output/output.bin").exists()
    code, _, err = _run("compare", case)
    _one_error(code, err, "manifest.json not found")


def test_golden_records_sha256_and_compare_checks_it(case):
    manifest = _manifest(case)
    for name in ("grad_output", "weight", "golden", "pypto"):
        entry = manifest["files"][name]
        for ext in ("bin", "npy"):
            assert (
                entry[f"{ext}_sha256"]
                == hashlib.sha256((case / entry[ext]).read_bytes()).hexdigest()
            )
    code, out, err = _run("compare", case)
    assert code == 0 and "verdict (dual-L0): PASS" in out, err
    data = bytearray((case / "input/weight.bin").read_bytes())
    data[100] ^= 0x01  # one bit of one weight: same size, same dtype
    (case / "input/weight.bin").write_bytes(bytes(data))
    code, out, err = _run("compare", case)
    _one_error(code, err, "weight.bin does not match the sha256 manifest.json records")
    assert out == ""


def test_compare_warns_when_the_result_is_older_than_the_manifest(case):
    code, out, err = _run("compare", case)
    assert code == 0 and err == "", err
    stamp = os.stat(case / "manifest.json").st_mtime_ns - 10**9
    os.utime(case / "output/output.bin", ns=(stamp, stamp))
    code, out, err = _run("compare", case)
    assert code == 0 and "verdict (dual-L0): PASS" in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: ") and "older than" in lines[0]
    # the case's own files are not results of an earlier case
    code, _, err = _run("compare", case, "--actual", "pypto.bin")
    assert code == 0 and err == "", err


# --- finding 8: the plot --------------------------------------------------------------------------
def test_a_plot_format_matplotlib_cannot_write_is_refused_before_any_work(case, tmp_path):
    pytest.importorskip("matplotlib")
    report = tmp_path / "report.json"
    code, out, err = _run("compare", case, "--plot", tmp_path / "dx.jpg2", "--json", report)
    _one_error(code, err, "matplotlib cannot write '.jpg2' files")
    assert ".png" in err and out == "" and not report.exists()


def test_a_plot_that_fails_keeps_the_verdict_and_the_json(case, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    def refuse(self, *args, **kwargs):
        raise ValueError("Format 'png' is not supported")

    monkeypatch.setattr(Figure, "savefig", refuse)
    report = tmp_path / "report.json"
    code, out, err = _run("compare", case, "--plot", tmp_path / "dx.png", "--json", report)
    _one_error(code, err, "cannot write the plot to")
    assert "verdict (dual-L0): PASS" in out and f"JSON report: {report}" in out
    assert json.loads(report.read_text())["passed"] is True


def test_a_plot_path_is_written_as_given_and_a_folder_is_refused(case, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "somedir").mkdir()
    for folder in ("somedir", "somedir/"):
        code, out, err = _run("compare", case, "--plot", folder)
        _one_error(code, err, "it is a folder")
        assert out == ""
    assert not (tmp_path / "somedir.png").exists()
    code, out, err = _run("compare", case, "--plot", "dx")  # no extension: PNG, this name
    assert code == 0, err
    assert out.rstrip().endswith("plot: dx") and (tmp_path / "dx").read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "dx.png").exists()


# --- finding 9: hand-edited manifests -------------------------------------------------------------
def _edit(path, value):
    def edit(manifest):
        target = manifest
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


@pytest.mark.parametrize(
    "edit, text",
    [
        (_edit(["dtype"], ["fp16"]), "'dtype' must be 'fp16' or 'bf16', but is ['fp16']"),
        (_edit(["dtype"], {}), "'dtype' must be 'fp16' or 'bf16', but is {}"),
        (_edit(["files", "grad_output", "bin"], None), "'bin' must be a file name"),
        (_edit(["files", "grad_output", "bin"], 5), "'bin' must be a file name"),
        (_edit(["files", "weight", "bin"], []), "'bin' must be a file name"),
        (_edit(["files", "golden", "bin"], True), "'bin' must be a file name"),
        (_edit(["files", "golden", "bin"], ""), "'bin' must be a file name"),
        (
            _edit(["files", "weight", "bin"], "/etc/passwd"),
            "relative to the case folder and inside",
        ),
        (
            _edit(["files", "weight", "bin"], "../../x.bin"),
            "relative to the case folder and inside",
        ),
        (
            _edit(["files", "weight", "bin"], "input/../../case/input/weight.bin"),
            "relative to the case folder and inside",
        ),
        (_edit(["files", "pypto"], "output/pypto.bin"), "files 'pypto' must be an object"),
        (_edit(["files", "golden", "bin_sha256"], 7), "'bin_sha256' must be 64 hex digits"),
        (_edit(["files", "golden", "shape"], [2, "40"]), "'shape' must be a list of ints"),
        (_edit(["files", "actual", "npy_also_read"], "/tmp/x.npy"), "relative to the case folder"),
        (_edit(["tiles", "vec"], [[16], 16, 16, 16]), "tiles 'vec' must be a list of ints"),
        (_edit(["strides"], [1, True]), "'strides' must be a list of 2 ints"),
        (_edit(["seed"], "7"), "'seed' must be an int >= 0"),
        (_edit(["byte_order"], "big"), "'byte_order' must be 'little'"),
        (_edit(["sum_order"], "pairs"), "'sum_order' must be 'sequential' or 'tile'"),
        (_edit(["format"], ["pypto-golden/1"]), "format ['pypto-golden/1'], expected"),
    ],
)
def test_a_hand_edited_manifest_is_one_error_line(case, edit, text):
    manifest = _manifest(case)
    edit(manifest)
    _set_manifest(case, manifest)
    code, out, err = _run("compare", case)
    _one_error(code, err, text)
    assert out == ""


@pytest.mark.parametrize(
    "text, message",
    [
        ("[" * 100_000 + "]" * 100_000, "JSON nested too deep"),
        (
            '{"format": "pypto-golden/1", "dtype": ' + "[" * 500 + "]" * 500 + "}",
            "'dtype' must be 'fp16' or 'bf16'",
        ),
    ],
)
def test_deeply_nested_manifests_are_one_error_line(case, text, message):
    (case / "manifest.json").write_text(text)
    code, _, err = _run("compare", case)
    _one_error(code, err, message)


# --- finding 10: a .npy whose header claims more than the file holds ------------------------------
def _npy(path, shape, data=b"", descr="<f2", fortran=False):
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": descr, "fortran_order": fortran, "shape": shape}
        )
        f.write(data)


def test_a_npy_header_is_checked_before_anything_is_allocated(case, tmp_path):
    huge = tmp_path / "huge.npy"
    _npy(huge, (10**12,), b"\0" * 100)  # 228 bytes claiming 2 TB
    code, _, err = _run("compare", case, "--actual", huge)
    _one_error(code, err, "has shape [1000000000000], expected [2, 40, 12, 12]")
    short = tmp_path / "short.npy"
    _npy(short, DX_SHAPE, b"\0" * 100)  # the right shape, 100 of its 23040 bytes
    code, _, err = _run("compare", case, "--actual", short)
    _one_error(
        code,
        err,
        "holds 100 bytes after its header, but its float16 [2, 40, 12, 12] "
        "needs 23040 (truncated?)",
    )
    wrong = tmp_path / "wrong.npy"
    _npy(wrong, (10**12,), descr="<f8")
    code, _, err = _run("compare", case, "--actual", wrong)
    _one_error(code, err, "holds float64 data; expected float16")
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"\x93NUMPY\x01\x00\x10\x00{'descr': ((((((((")
    code, _, err = _run("compare", case, "--actual", bad)
    _one_error(code, err, "cannot read")
    # a Fortran-order .npy is read in its own order
    ref = np.load(case / "output/pypto.npy")
    np.save(tmp_path / "fortran.npy", np.asfortranarray(ref))
    code, out, err = _run("compare", case, "--actual", tmp_path / "fortran.npy")
    assert code == 0 and "verdict (dual-L0): PASS" in out, err


# --- finding 11: the golden is checked against the inputs -----------------------------------------
def test_a_nan_golden_is_refused_not_passed(case):
    manifest = _manifest(case)
    for entry in manifest["files"].values():  # as an older manifest: no sha256 to catch it
        entry.pop("bin_sha256", None)
        entry.pop("npy_sha256", None)
    _set_manifest(case, manifest)
    np.full(DX_SHAPE, np.nan).tofile(case / "output/golden.bin")
    np.full(DX_SHAPE, np.nan, np.float16).tofile(case / "output/output.bin")
    code, out, err = _run("compare", case, "--standard", "all")
    _one_error(code, err, "golden.bin does not match the inputs (corrupted or edited case)")
    assert "verdict" not in out
    # one element off by a part in 10^9, where |golden| is largest: found too
    dy = np.fromfile(case / "input/grad_output.bin", "<f2").reshape(2, 32, 12, 12)
    w = np.fromfile(case / "input/weight.bin", "<f2").reshape(32, 40, 3, 3)
    golden = dgrad_reference(dy, w, (12, 12), (1, 1), (1, 1), (1, 1))
    golden.reshape(-1)[np.argmax(np.abs(golden))] *= 1 + 1e-9
    golden.tofile(case / "output/golden.bin")
    code, _, err = _run("compare", case)
    _one_error(code, err, "does not match the inputs")


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize(
    "dy_shape, w_shape, strides, paddings, dilations, extra",
    [
        ([1, 16, 5, 7], [16, 24, 3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 0),
        ([2, 16, 4, 5], [16, 16, 3, 2], [2, 3], [1, 1, 0, 0], [1, 1], 1),
        ([1, 32, 6, 6], [32, 8, 3, 3], [1, 1], [2, 2, 2, 2], [2, 2], 0),
        ([1, 16, 3, 4], [16, 16, 1, 1], [2, 2], [0, 0, 0, 0], [1, 1], 1),
        ([2, 64, 9, 9], [64, 40, 5, 5], [2, 2], [2, 2, 2, 2], [1, 1], 1),
    ],
)
def test_check_golden_accepts_true_goldens_and_finds_wrong_ones(
    dtype, dy_shape, w_shape, strides, paddings, dilations, extra
):
    from pypto._golden.case import check_golden

    (hin, _), (win, _) = pypto.conv_backward_input_size_range(
        dy_shape, w_shape, strides, paddings, dilations
    )
    size = [dy_shape[0], w_shape[1], hin + extra, win + extra]
    case = make_case(dy_shape, w_shape, size, dtype, strides, paddings, dilations)
    for dist in ("uniform", "normal", "ints"):
        dy, w = draw_inputs(case, dist, 5)
        check_golden(case, dy, w, golden_dgrad(case, dy, w))
    # Inf and NaN inputs: the golden's non-finite pattern is the definition's, and is accepted
    dy.reshape(-1)[3], dy.reshape(-1)[-5], w.reshape(-1)[7] = np.inf, -np.inf, np.nan
    golden = golden_dgrad(case, dy, w)
    assert not np.isfinite(golden).all()
    check_golden(case, dy, w, golden)
    for fault in ("finite where non-finite", "nan", "largest off"):
        wrong = golden.copy()
        flat = wrong.reshape(-1)
        if fault == "finite where non-finite":
            flat[~np.isfinite(flat)] = 0.0
        elif fault == "nan":
            flat[np.flatnonzero(np.isfinite(flat))[0]] = np.nan
        else:
            finite = np.where(np.isfinite(flat), np.abs(flat), -1)
            flat[np.argmax(finite)] *= 1 + 1e-6
        with pytest.raises(pypto.PyptoError, match="does not match the inputs"):
            check_golden(case, dy, w, wrong)


# --- finding 15: empty path arguments -------------------------------------------------------------
@pytest.mark.parametrize("blank", ["", "   "])
def test_empty_paths_are_refused(case, tmp_path, monkeypatch, blank):
    monkeypatch.chdir(tmp_path / "case" / "input")  # a folder golden must not write into
    before = sorted(os.listdir("."))
    code, out, err = _run("golden", *GOLDEN_ARGS, "--out", blank)
    _one_error(code, err, "--out is")
    assert "empty or blank path" in err and out == "" and sorted(os.listdir(".")) == before
    for args, option in (
        (["compare", blank], "the case folder DIR is"),
        (["compare", case, "--actual", blank], "--actual is"),
        (["compare", case, "--plot", blank], "--plot is"),
        (["compare", case, "--json", blank], "--json is"),
    ):
        code, out, err = _run(*args)
        _one_error(code, err, option)
        assert "empty or blank path" in err and out == ""
    assert sorted(os.listdir(".")) == before and not os.path.exists(".png")


@pytest.mark.parametrize(
    "tiles, vec",
    [
        (((16.5, 144, 16), (16, 16, 16)), None),
        (((16, 144, 16), (16, 16.0, 16)), None),
        (((16, 144, 16), (16, 16, "16")), None),
        (None, [16, 16.5, 16, 16]),
        (None, [16, True, 16, 16]),
    ],
)
def test_golden_cases_take_int_tiles_only(tiles, vec):
    """make_case (pypto golden, testing.compare) read tiles with int(): 16.5 became 16."""
    from pypto._golden.case import make_case

    with pytest.raises(pypto.PyptoError, match="ints"):
        make_case(
            [1, 16, 5, 32],
            [16, 16, 3, 3],
            None,
            "fp16",
            [1, 1],
            [1, 1, 1, 1],
            [1, 1],
            tiles,
            vec=vec,
        )
