"""The benchmark's problems: the layer cases a..j and ``Case``, one problem's data with a runner
for pypto and for each peer (torch in the storage dtype or upcast, NumPy GEMM + col2im in fp32).
"""

import numpy as np

import pypto
from pypto._core.shapes import forward_out_size
from pypto._core.tiling import ConvProblem
from pypto._dtypes import numpy_dtype
from pypto._golden.reference import dgrad_gemm_col2im
from pypto._kernels.dispatch import kernel_info

# name: (N, Cin, Cout, Hin, Win, Kh, Kw, stride, pad, dilation)
CASES = {
    "a": (1, 16, 16, 5, 32, 3, 3, 1, 1, 1),
    "b": (8, 64, 64, 56, 56, 3, 3, 1, 1, 1),
    "c": (8, 128, 128, 28, 28, 3, 3, 1, 1, 1),
    "d": (8, 256, 256, 14, 14, 3, 3, 1, 1, 1),
    "e": (8, 512, 512, 7, 7, 3, 3, 1, 1, 1),
    "f": (8, 64, 256, 56, 56, 1, 1, 1, 0, 1),
    "g": (8, 128, 64, 56, 56, 3, 3, 2, 1, 1),
    "h": (8, 3, 64, 224, 224, 7, 7, 2, 3, 1),
    "i": (4, 64, 64, 64, 64, 3, 3, 1, 2, 2),
    "j": (1, 256, 256, 64, 64, 5, 5, 1, 2, 1),
}
SPEC_TILES = ((16, 144, 16), (16, 16, 16))


class Case:
    """One benchmark problem with its data and every runner."""

    def __init__(self, name, params, dtype, rng):
        """``params``: a ConvProblem, or a CASES entry (square strides, pads, dilations)."""
        if isinstance(params, ConvProblem):
            problem = params
        else:
            n, cin, cout, hin, win, kh, kw, s, p, d = params
            hout = forward_out_size(hin, kh, s, p, p, d)
            wout = forward_out_size(win, kw, s, p, p, d)
            problem = ConvProblem(
                n, cin, cout, hin, win, hout, wout, kh, kw, s, s, p, p, p, p, d, d
            )
        self.name, self.dtype, self.problem = name, dtype, problem
        q = problem
        np_dtype = numpy_dtype(dtype)
        self.dy = rng.uniform(-1, 1, (q.n, q.cout, q.hout, q.wout)).astype(np_dtype)
        self.w = rng.uniform(-1, 1, (q.cout, q.cin, q.kh, q.kw)).astype(np_dtype)
        self.attrs = ([q.sh, q.sw], [q.pt, q.pb, q.pl, q.pr], [q.dh, q.dw])
        self.input_size = [q.n, q.cin, q.hin, q.win]

    def suggested_tiles(self):
        p = self.problem
        return pypto.suggest_convbp_input_tile_shapes(
            [p.n, p.cout, p.hout, p.wout],
            [p.cout, p.cin, p.kh, p.kw],
            self.input_size,
            self.dtype,
            *self.attrs,
        )

    def pypto_runner(self, tiles, sum_order=None):
        """pypto with ``tiles``, in ``sum_order`` (None: the order in force)."""
        l1, l0 = tiles
        dy, w = pypto.from_numpy(self.dy), pypto.from_numpy(self.w)
        order = {} if sum_order is None else {"sum_order": sum_order}

        def run():
            return pypto.conv_backward_input(dy, self.input_size, w, self.dtype, *self.attrs)

        def with_tiles():
            with pypto.options(
                convbp_tile_shapes=(l1, l0), vec_tile_shapes=[1, 16, 1, 64], **order
            ):
                return run()

        return with_tiles

    def pypto_runners(self, tiles, orders):
        """{"pypto": the first of ``orders``, "pypto <order>": each other} for bf16; fp16,
        which sums in one order, gets "pypto" alone."""
        if self.dtype != pypto.DT_BF16:
            return {"pypto": self.pypto_runner(tiles)}
        return {
            ("pypto" if i == 0 else f"pypto {order}"): self.pypto_runner(tiles, order)
            for i, order in enumerate(orders)
        }

    def torch_runner(self, torch, compute_dtype, out_dtype):
        s, p, d = self.attrs[0], self.attrs[1][::2], self.attrs[2]
        bits = self.dy.view(np.uint16), self.w.view(np.uint16)
        storage = torch.bfloat16 if self.dtype == pypto.DT_BF16 else torch.float16
        dy = torch.from_numpy(bits[0].view(np.int16)).view(storage)
        w = torch.from_numpy(bits[1].view(np.int16)).view(storage)
        x = torch.empty(self.input_size, dtype=compute_dtype)
        if compute_dtype == storage:

            def run():
                return torch.ops.aten.convolution_backward(
                    dy, x, w, None, s, p, d, False, [0, 0], 1, [True, False, False]
                )[0]
        else:

            def run():  # upcast, compute, round the result back to the storage type
                return torch.ops.aten.convolution_backward(
                    dy.to(compute_dtype),
                    x,
                    w.to(compute_dtype),
                    None,
                    s,
                    p,
                    d,
                    False,
                    [0, 0],
                    1,
                    [True, False, False],
                )[0].to(out_dtype)

        return run

    def numpy_runner(self):
        dy32, w32 = self.dy.astype(np.float32), self.w.astype(np.float32)
        hw = self.input_size[2:]

        def run():
            return dgrad_gemm_col2im(dy32, w32, hw, *self.attrs, dtype=np.float32)

        return run


def default_orders():
    """The bf16 orders a run times: the order in force, and the other beside it where this
    level has the AMX tile unit (which runs "tile" natively and "sequential" in fp32)."""
    first = pypto.get_sum_order("bf16")
    other = "sequential" if first == "tile" else "tile"
    return [first] + ([other] if kernel_info()["amx"] else [])
