"""The cache key of a conv_backward_input call (``pypto._core.rules``), compiled: every small
call builds it, and in Python it was the largest piece of a small call's overhead.

``call_key(grad_output, input_size, weight, out_dtype, strides, paddings, dilations, groups)``
is every value the rules read, with its type, as one hashable tuple, or None when an argument
is anything but a plain Tensor, DataType, int, or list or tuple of plain ints (those calls are
judged by the whole table every time). Types are part of the key because the rules judge them
(``5`` and ``np.int64(5)`` or ``5.0`` hash alike but are not judged alike); so are each
sequence's kind (list or tuple) and length, which keep the flattened integers unambiguous.
Compiled with the baseline flags (setup.py): plain C, no instruction above the architecture's
default.
"""

from pypto._dtypes import DataType

from pypto._core import options as _config

cdef object _Tensor = None  # pypto.tensor.Tensor, imported on the first call (it imports rules)


cdef inline bint _add_ints(list ints, object seq):
    """Append the items of a list or tuple of plain ints; False for anything else."""
    cdef object value
    if type(seq) is not list and type(seq) is not tuple:
        return False
    for value in seq:  # Cython indexes an exact list or tuple directly
        if type(value) is not int:
            return False
        ints.append(value)
    return True


def call_key(grad_output, input_size, weight, out_dtype, strides, paddings, dilations, groups):
    """The call's cache key, or None (see the module's text)."""
    global _Tensor
    if _Tensor is None:
        from pypto.tensor import Tensor
        _Tensor = Tensor
    if type(grad_output) is not _Tensor or type(weight) is not _Tensor or type(groups) is not int:
        return None
    go_dtype, w_dtype = grad_output._dtype, weight._dtype
    if (type(out_dtype) is not DataType or type(go_dtype) is not DataType
            or type(w_dtype) is not DataType):
        return None
    tile = _config._get("convbp_tile_shapes")
    l1, l0 = tile.tileL1Info, tile.tileL0Info
    vec = _config._get("vec_tile_shapes")
    go_shape, w_shape = grad_output._shape, weight._shape
    cdef list ints = [l1.tileML1, l1.tileKL1, l1.tileNL1, l0.tileML0, l0.tileKL0, l0.tileNL0]
    cdef object value
    for value in ints:
        if type(value) is not int:
            return None
    if not (_add_ints(ints, go_shape) and _add_ints(ints, w_shape) and _add_ints(ints, vec)
            and _add_ints(ints, input_size) and _add_ints(ints, strides)
            and _add_ints(ints, paddings) and _add_ints(ints, dilations)):
        return None
    return (
        out_dtype, groups, go_dtype, w_dtype,
        (type(input_size), type(strides), type(paddings), type(dilations)),
        (len(go_shape), len(w_shape), len(vec), len(input_size), len(strides), len(paddings),
         len(dilations)),
        tuple(ints),
    )
