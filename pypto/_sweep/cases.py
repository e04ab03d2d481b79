"""Case files: pypto's own JSONL and CSV (one case a line), msOpST JSON (``msopst.py``).

Every case becomes one canonical dict (:func:`canonical`), the unit of work's input::

    {"id", "name", "source", "grad_output", "weight", "input_size" (None: the smallest valid),
     "strides", "paddings", "dilations", "groups", "dtype" ("fp16", "bf16" or "fp32", which
     the op refuses), "tiles" ("suggested" or {"l1", "l0", "vec"}), "inputs" ({"grad_output",
     "weight"}: {"dist", "range"}), "seed" (None: derived from the id)}

The id is the first 16 hex digits of the sha256 of the canonical JSON of everything but id,
name and source: the same case read from any file, in any order, on any host, has the same
id, folder, seed and shard. A case pypto cannot read (a field's value, a format, a dtype)
becomes an unreadable case (``schema.unreadable``): a refused row naming the file, the line
(or case index) and the field, while the file's other cases run. A file that is no case file
(unreadable, another extension, a line that is not JSON, a CSV header with an unknown column,
more cases than ``PYPTO_SWEEP_MAX_CASES``) is refused whole, before any case runs: one
PyptoError naming the file, the line and the field.
"""

import csv
import os

from .._core.fileio import parse_json, read_text, show
from .._golden.files.dims import LAYOUTS
from ..error import FeError, PyptoError
from .schema import (
    CaseCountError,
    CaseFileError,
    canonical,
    case_id,
    check_case_count,
    dist_of,
    dtype_of,
    int_of,
    ints_of,
    unreadable,
    value_range,
)
from .tiles import DEFAULT_LIMIT, legal_tilings

__all__ = ["read_cases", "read_case_file", "expand_all_tiles", "FIELDS"]

# pypto's case-file fields: what each holds
FIELDS = {
    "name": "a label for the case (not part of its id)",
    "grad_output": "N,Cout,Hout,Wout",
    "weight": "Cout,Cin,Kh,Kw",
    "input_size": "N,Cin,Hin,Win (default: the smallest valid size)",
    "N": "with Cin, H, W, Cout, kh, kw instead of the three shapes",
    "Cin": "input channels",
    "H": "input height",
    "W": "input width",
    "Cout": "output channels",
    "kh": "kernel height",
    "kw": "kernel width",
    "strides": "SH,SW (default 1,1)",
    "paddings": "T,B,L,R (default 0,0,0,0)",
    "dilations": "DH,DW (default 1,1)",
    "groups": "an int (default 1; the op takes 1 only)",
    "dtype": "fp16 / bf16 (also float16, bfloat16; fp32 is read and refused by the op)",
    "tiles": '"suggested" (default), "all" (every legal set, up to tiles_limit)',
    "tiles_limit": f"how many legal tile sets 'all' gives at most (default {DEFAULT_LIMIT})",
    "l1": "M,K,N: explicit L1 tiles (with l0)",
    "l0": "M,K,N: explicit L0 tiles (with l1)",
    "vec": "vector tile shapes (default 16,16,16,16)",
    "dist": "uniform (default), normal, ints, truncated_normal",
    "range": "lo,hi of the distribution (see docs/sweep.md)",
    "seed": "an int >= 0 (default: derived from the case's id)",
    "format": "the files' layout: NCHW (default), NHWC, or data/filter (NHWC/HWCN)",
}
_DIMS = ("N", "Cin", "H", "W", "Cout", "kh", "kw")


def expand_all_tiles(case, limit):
    """``case`` once per legal tile set (up to ``limit``): a case with tiles "all". A problem
    the op refuses, or one with no legal tiles, stays one case (tiles "suggested"), which
    becomes a row with the op's rule."""
    from .._golden.case import make_case

    try:
        if case["groups"] != 1 or case["dtype"] not in ("fp16", "bf16"):
            raise FeError(ValueError("refused by the op"))
        problem = make_case(
            case["grad_output"],
            case["weight"],
            case["input_size"],
            case["dtype"],
            case["strides"],
            case["paddings"],
            case["dilations"],
        ).problem
    except PyptoError:
        return [_with(case, tiles="suggested")]
    tilings = legal_tilings(problem, limit)
    if not tilings:
        return [_with(case, tiles="suggested")]
    return [
        _with(case, tiles={"l1": list(t[:3]), "l0": list(t[3:]), "vec": [16, 16, 16, 16]})
        for t in tilings
    ]


def _with(case, **changes):
    new = dict(case, **changes)
    new["id"] = case_id(new)
    return new


# --- pypto's own format ------------------------------------------------------------------------
def _from_fields(fields, where):
    """The canonical case(s) of one line of pypto's format (a dict of field -> JSON value or
    CSV text; empty CSV cells already dropped)."""
    unknown = [key for key in fields if key not in FIELDS]
    if unknown:
        raise CaseFileError(
            where,
            f"unknown field '{unknown[0]}' (the fields: {', '.join(FIELDS)})",
        )
    given_dims = [key for key in _DIMS if key in fields]
    shapes = [key for key in ("grad_output", "weight", "input_size") if key in fields]
    strides = ints_of(fields.get("strides", [1, 1]), 2, where, "strides")
    paddings = ints_of(fields.get("paddings", [0, 0, 0, 0]), 4, where, "paddings")
    dilations = ints_of(fields.get("dilations", [1, 1]), 2, where, "dilations")
    if given_dims:
        if shapes:
            raise CaseFileError(
                where,
                f"field '{shapes[0]}' and field '{given_dims[0]}': give the shapes "
                f"(grad_output, weight) or N,Cin,H,W,Cout,kh,kw, not both",
            )
        missing = [key for key in _DIMS if key not in fields]
        if missing:
            raise CaseFileError(where, f"field '{missing[0]}' is missing (N,Cin,H,W,Cout,kh,kw)")
        n, cin, h, w, cout, kh, kw = (int_of(fields[key], where, key) for key in _DIMS)
        if min(strides) < 1:  # grad_output is derived by dividing by them
            raise CaseFileError(
                where,
                f"field 'strides' {strides}: grad_output is derived from N,Cin,H,W,Cout,kh,kw "
                f"only with strides >= 1 (give grad_output and weight to have the op refuse it)",
            )
        # the forward output of an input of H x W: what grad_output must be
        hout = (h + paddings[0] + paddings[1] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
        wout = (w + paddings[2] + paddings[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
        grad_output, weight, input_size = [n, cout, hout, wout], [cout, cin, kh, kw], [n, cin, h, w]
    else:
        for key in ("grad_output", "weight"):
            if key not in fields:
                raise CaseFileError(
                    where, f"field '{key}' is missing (or give N,Cin,H,W,Cout,kh,kw)"
                )
        grad_output = ints_of(fields["grad_output"], 4, where, "grad_output")
        weight = ints_of(fields["weight"], 4, where, "weight")
        input_size = (
            ints_of(fields["input_size"], 4, where, "input_size")
            if "input_size" in fields
            else None
        )
    tiles = fields.get("tiles", "suggested")
    if not isinstance(tiles, str) or tiles.strip().lower() not in ("suggested", "all"):
        raise CaseFileError(
            where,
            f'field \'tiles\' must be "suggested" or "all" (explicit tiles: l1, l0, vec), '
            f"but is {show(tiles)}",
        )
    tiles = tiles.strip().lower()
    explicit = [key for key in ("l1", "l0") if key in fields]
    if explicit:
        if len(explicit) != 2:
            other = "l0" if explicit == ["l1"] else "l1"
            raise CaseFileError(where, f"field '{other}' is missing: l1 and l0 go together")
        if "tiles" in fields:
            raise CaseFileError(where, "field 'tiles': give tiles or l1/l0, not both")
        tiles = {
            "l1": ints_of(fields["l1"], 3, where, "l1"),
            "l0": ints_of(fields["l0"], 3, where, "l0"),
            "vec": ints_of(fields.get("vec", [16, 16, 16, 16]), (4, 5), where, "vec"),
        }
    elif "vec" in fields:
        raise CaseFileError(where, "field 'vec' needs explicit l1 and l0 tiles")
    limit = DEFAULT_LIMIT
    if "tiles_limit" in fields:
        if tiles != "all":
            raise CaseFileError(where, "field 'tiles_limit' applies to tiles \"all\" only")
        limit = int_of(fields["tiles_limit"], where, "tiles_limit")
        if not 1 <= limit <= 1000:
            raise CaseFileError(where, f"field 'tiles_limit' must be in [1, 1000], not {limit}")
    dist = dist_of(fields.get("dist", "uniform"), where, "dist")
    drawn = {"dist": dist, "range": None}
    if "range" in fields:
        drawn["range"] = value_range(fields["range"], where, "range", dist != "normal")
    seed = None
    if "seed" in fields:
        seed = int_of(fields["seed"], where, "seed")
        if seed < 0:
            raise CaseFileError(where, f"field 'seed' must be an int >= 0, but is {seed}")
    name = fields.get("name")
    if name is not None and not isinstance(name, str):
        name = str(name)
    layouts = _layouts(fields.get("format", "NCHW"), where)
    case = canonical(
        grad_output,
        weight,
        input_size,
        strides,
        paddings,
        dilations,
        int_of(fields.get("groups", 1), where, "groups"),
        dtype_of(fields.get("dtype", "fp16"), where, "dtype"),
        "suggested" if tiles == "all" else tiles,
        {"grad_output": dict(drawn), "weight": dict(drawn)},
        seed,
        name,
        where,
        layouts,
    )
    return expand_all_tiles(case, limit) if tiles == "all" else [case]


_DATA_LAYOUTS = ("NCHW", "NHWC")  # CANN's data_format values


def _layouts(text, where):
    """The layouts of a case's files from its ``format`` field, as a row's format column
    writes them: one layout for dy, w and dx alike (NCHW or NHWC), or the data's and the
    filter's, "NHWC/HWCN". The shapes in the case stay NCHW."""
    parts = text.strip().upper().split("/") if isinstance(text, str) else []
    data = parts[0] if parts else None
    weight = parts[1] if len(parts) == 2 else data
    if len(parts) not in (1, 2) or data not in _DATA_LAYOUTS or weight not in LAYOUTS:
        raise CaseFileError(
            where,
            f"field 'format' must be {', '.join(_DATA_LAYOUTS)} or DATA/FILTER (a filter in "
            f"{', '.join(LAYOUTS)}), but is {show(text)}",
        )
    return {"grad_output": data, "weight": weight, "grad_input": data}


def _line_cases(fields, where):
    """The cases of one line (a JSON value, or a CSV row's cells): an unreadable case when
    pypto cannot read it."""
    try:
        if not isinstance(fields, dict):
            raise CaseFileError(where, f"a line must be a JSON object, not {type(fields).__name__}")
        return _from_fields(fields, where)
    except CaseCountError:
        raise
    except CaseFileError as exc:
        name = fields.get("name") if isinstance(fields, dict) else None
        return [unreadable(fields, exc, name, where)]


def _read_jsonl(path, text):
    cases = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{path}:{number}"
        cases += _line_cases(parse_json(line, where), where)  # not JSON: not a case file
        check_case_count(len(cases), where)
    return cases


def _read_csv(path, text):
    reader = csv.reader(text.splitlines())
    header = None
    cases = []
    for row in reader:
        number = reader.line_num
        if not any(cell.strip() for cell in row) or row[0].lstrip().startswith("#"):
            continue
        if header is None:
            header = [cell.strip() for cell in row]
            for column in header:
                if column not in FIELDS:
                    raise CaseFileError(
                        f"{path}:{number}",
                        f"unknown column '{column}' (the fields: {', '.join(FIELDS)})",
                    )
            continue
        where = f"{path}:{number}"
        if len(row) > len(header):
            error = CaseFileError(where, f"{len(row)} cells, but the header has {len(header)}")
            cases.append(unreadable(row, error, None, where))
        else:
            fields = {key: cell for key, cell in zip(header, row) if cell.strip() != ""}
            cases += _line_cases(fields, where)
        check_case_count(len(cases), where)
    return cases


def read_case_file(path):
    """(cases, duplicates): every case of a case file, in file order, and how many cases were
    dropped as duplicates of an earlier one (same id). ``.jsonl``: pypto's JSON lines;
    ``.csv``: pypto's CSV (a header of field names); ``.json``: msOpST's case list."""
    from .msopst import read_msopst

    text = read_text(path, "the case file")
    ext = os.path.splitext(path)[1].lower()
    if ext == ".jsonl":
        cases = _read_jsonl(path, text)
    elif ext == ".csv":
        cases = _read_csv(path, text)
    elif ext == ".json":
        cases = read_msopst(path, text)
    else:
        raise FeError(
            ValueError(
                f"{path}: a case file must be .jsonl or .csv (pypto's format) or .json (msOpST)"
            )
        )
    seen, unique = set(), []
    for case in cases:
        if case["id"] not in seen:
            seen.add(case["id"])
            unique.append(case)
    return unique, len(cases) - len(unique)


def read_cases(*paths):
    """Every case of the case files (duplicates dropped), in file order."""
    cases, seen = [], set()
    for path in paths:
        for case in read_case_file(path)[0]:
            if case["id"] not in seen:
                seen.add(case["id"])
                cases.append(case)
    return cases
