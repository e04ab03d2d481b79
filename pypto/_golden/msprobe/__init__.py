"""Judge the conv2d backward calls of an msprobe dump (``pypto compare --msprobe DUMP``).

msprobe (``pip install mindstudio-probe``, Huawei's accuracy tool) dumps every API call of a
training step with ``PrecisionDebugger``: a ``dump.json`` per step and rank (or process) folder
and, for task "tensor", one file per tensor argument in ``dump_tensor_data/`` next to it (``.pt``
from PyTorch, ``.npy`` from MindSpore). What this package relies on (checked on msprobe 26.2.0
with torch 2.13, levels L0, L1 and mix):

- ``dump.json`` holds ``task``, ``level``, ``framework``, ``dump_data_dir`` (absolute, at dump
  time; null for task "statistics") and ``data``: {entry name: record}.
- ``Functional.conv2d.<n>.forward`` (also ``Torch.conv2d``, MindSpore's ``Mint.conv2d`` and
  ``MintFunctional.conv2d``): ``input_args`` (positional, in the API's order) and
  ``input_kwargs`` hold input, weight, bias, stride, padding, dilation, groups; a tensor is
  ``{"type": "torch.Tensor", "dtype", "shape", ..., "data_name": "<file>"}``, an int
  ``{"type": "int", "value": 2}``, a tuple a list of those, a str ``{"type": "str", ...}``,
  None null; an argument not passed is absent (the API's default applies).
  ``Functional.conv2d.<n>.backward``: ``input`` = [grad_output], ``output`` = [grad_input,
  grad_weight, grad_bias], null where no gradient was computed. Same ``<n>`` as the forward.
- Module entries (level L0 or mix): ``Module.<name>.Conv2d.forward.<n>`` /
  ``...backward.<n>`` (older msprobe: ``Module.<name>.Conv2d.<n>.forward``): the forward holds
  the module's input and ``parameters`` (weight, bias) but no stride, padding, dilation or
  groups; ``construct.json`` maps each call to its parent, so in a mix dump the
  ``Functional.conv2d`` call inside the module gives them. An L0 dump has none: those Module
  calls are listed as skipped.
- MindSpore's ``Functional.conv2d`` is ``mindspore.ops.conv2d`` (``pad_mode`` before
  ``padding``, padding of 1, 2 or 4 ints); its ``.npy`` files hold bf16 as float32 (read back
  exactly). MindSpore dumps follow msprobe's code, not a dump made here (no MindSpore).

Each call is judged as ``pypto.testing.compare`` judges a kernel's result: the dumped
grad_input against the float64 golden from the dumped grad_output and weight, every standard,
the fp32-accumulation bound, msprobe's own accuracy columns (``pypto._golden.msprobe_metrics``)
and the localisation over the NPU task grid of the suggested tiles (the dumped result was not
made with tiles: the grid only names where the errors are). A mix dump records each conv twice
(``Functional.conv2d.<n>.backward`` and ``Module.<name>.Conv2d.backward.<n>``): the Module
entry is left out, its module named in the Functional call's row, when both are skipped or
their tensors are bitwise the same. Calls may be chosen by api name (exactly or a glob); one
chosen call can be drawn and turned into a golden case folder (``extract``). Calls the
op cannot express are listed as skipped with the reason: groups != 1, padding "same" or
asymmetric, dtypes other than fp16/bf16 or mixed (autocast), no grad_input, any rule the op
refuses. A dump without tensors (task "statistics"), a tensor file that is missing, unreadable or
not what dump.json says is a PyptoError.

One module per stage, each using only those before it: ``records`` (what dump.json holds,
read one record at a time), ``discover`` (the dump.json files and their call trees), ``pairs``
(each backward entry with its forward: tensors, conv parameters, case or skip reason),
``tensors`` (the tensor files, located and read), ``table`` (rows and the report), ``judge``
(the whole dump: :func:`judge_dump`), ``extract`` (one call as a golden case folder).
"""

from .discover import find_dumps
from .extract import extract_call
from .judge import chosen_calls, judge_call, judge_calls, judge_dump, read_calls
from .records import CONSTRUCT_JSON, DUMP_JSON, MAX_NESTING, TENSOR_FOLDER
from .table import CSV_COLUMNS, MsprobeReport, check_report_path
from .tensors import MAX_LISTED

__all__ = [
    "MsprobeReport",
    "judge_dump",
    "judge_call",
    "judge_calls",
    "read_calls",
    "chosen_calls",
    "extract_call",
    "find_dumps",
    "check_report_path",
    "CSV_COLUMNS",
    "DUMP_JSON",
    "CONSTRUCT_JSON",
    "TENSOR_FOLDER",
    "MAX_NESTING",
    "MAX_LISTED",
]
