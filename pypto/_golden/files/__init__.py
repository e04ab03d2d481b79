"""The files of a golden case: the layout ``pypto golden`` writes and ``pypto compare`` reads.

    DIR/manifest.json             shapes, dtypes, attributes, tiles, seed, files, pypto version,
                                  the sum order of pypto's own result
    DIR/input/grad_output.bin     dy  [N, Cout, Hout, Wout]   fp16 / bf16
    DIR/input/weight.bin          w   [Cout, Cin, Kh, Kw]     fp16 / bf16
    DIR/output/golden.bin         dx  [N, Cin, Hin, Win]      float64 (the golden, unrounded)
    DIR/output/pypto.bin          dx                          fp16 / bf16 (pypto's own result)
    DIR/output/output.bin         dx                          fp16 / bf16: the kernel writes it

Every ``.bin`` is raw little-endian C-order data as NumPy's ``tofile`` writes it (bf16 as its
16-bit patterns: read it as uint16 or ``ml_dtypes.bfloat16``); each has a ``.npy`` twin (bf16
as uint16). Shapes and dtypes travel in the manifest. The shapes above are NCHW, pypto's
layout; a case may write its files in another (an msOpST case in NHWC with an HWCN filter):
each file's entry records its "layout" and its shape in that layout (no "layout": NCHW), and
such a manifest's format is ``pypto-golden/2``, so that a reader that knows only NCHW refuses
it. Readers return NCHW arrays. Every fault in a file (missing, wrong
size, wrong dtype or shape, bad manifest) is a PyptoError naming the file and what was expected.

The manifest is written last (a temporary file, then ``os.replace``), so an interrupted write
never leaves a manifest describing files that are not there; it records each file's sha256,
which ``compare`` checks. Writing into a folder that already holds a case needs ``replace``
(``--force``), which also deletes the old kernel results in output/: a new case never sits
beside a result of the old one.
"""

from .dims import LAYOUTS
from .layout import ACTUAL, FILES, FORMAT, FORMAT_LAID_OUT, MANIFEST, check_path
from .read import (
    read_array,
    read_case,
    read_inputs,
    read_result,
    resolve_actual,
    result_layout,
    stale_warning,
)
from .write import check_case_folder, write_case

__all__ = [
    "write_case",
    "read_case",
    "read_inputs",
    "read_array",
    "read_result",
    "result_layout",
    "resolve_actual",
    "FORMAT",
    "FORMAT_LAID_OUT",
    "LAYOUTS",
    "MANIFEST",
    "FILES",
    "ACTUAL",
    "check_path",
    "check_case_folder",
    "stale_warning",
]
