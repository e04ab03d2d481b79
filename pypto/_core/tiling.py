"""The one tiling model of the dgrad GEMM, shared by the tile checks, the CPU kernel and the NPU.

Per image the op is a GEMM with M = Hin*Win output pixels, N = Cin, K = Cout*Kh*Kw (k runs over
Cout channels, then the Kh*Kw taps of each). An L1 tile takes tileML1 pixels (inside one Win
row, or whole rows), tileNL1 input channels and tileKL1 = a block of whole Cout channels times
all taps; an L0 tile is the block multiplied at once into the fp32 accumulator. The buffer
formulas below are the NPU's (Atlas A2/A3, per AI core); the CPU kernel sizes its scratch from
the same tiles.
"""

from typing import NamedTuple

__all__ = [
    "ConvProblem",
    "Tiling",
    "BUFFER_BYTES",
    "C0",
    "MAX_L0_LOOPS",
    "CPU_GROUP_PIXELS",
    "ceil_div",
    "ceil_align",
]

C0 = 16  # channel block (32 bytes of fp16/bf16): Cin0 = Cout0 = 16
BUFFER_BYTES = {"L0A": 65536, "L0B": 65536, "L0C": 131072, "L1": 524288, "UB": 196608}
L0C_ELEMENT_BYTES = 4  # the accumulator is fp32
MAX_L0_LOOPS = 5000  # upstream warns above this many L0 iterations
# The CPU kernel's image groups: whole-image M tiles of several images, up to this many pixels
# in all, share one work item (where its channel-vector kernels run), so that each weight block
# read from memory serves them all.
CPU_GROUP_PIXELS = 448


def ceil_div(a, b):
    return -(-a // b)


def ceil_align(a, b):
    return ceil_div(a, b) * b


class ConvProblem(NamedTuple):
    """A validated dgrad problem: NCHW dy [n, cout, hout, wout], weight [cout, cin, kh, kw]."""

    n: int
    cin: int
    cout: int
    hin: int
    win: int
    hout: int
    wout: int
    kh: int
    kw: int
    sh: int
    sw: int
    pt: int
    pb: int
    pl: int
    pr: int
    dh: int
    dw: int
    dtype_size: int = 2

    @property
    def taps(self):
        return self.kh * self.kw

    @property
    def gemm_m(self):
        return self.hin * self.win

    @property
    def gemm_n(self):
        return self.cin

    @property
    def gemm_k(self):
        return self.cout * self.taps

    @property
    def flops(self):
        """Multiply-adds times two, over the whole op (the usual dgrad FLOP count)."""
        return 2 * self.n * self.cin * self.cout * self.taps * self.hout * self.wout


class Tiling(NamedTuple):
    """L1 and L0 tiles (M, K, N), as the user set them."""

    UPSTREAM_NAMES = ("tileML1", "tileKL1", "tileNL1", "tileML0", "tileKL0", "tileNL0")

    ml1: int
    kl1: int
    nl1: int
    ml0: int
    kl0: int
    nl0: int

    @classmethod
    def from_infos(cls, l1, l0):
        return cls(l1.tileML1, l1.tileKL1, l1.tileNL1, l0.tileML0, l0.tileKL0, l0.tileNL0)

    # --- the shape of an M tile on the pixel grid -------------------------------------------
    def m_tile_rows_cols(self, p):
        """(rows, cols) of pixels an L1 M tile covers: part of one row, or whole rows."""
        if self.ml1 >= p.win and self.ml1 % p.win == 0:
            return self.ml1 // p.win, p.win
        return 1, self.ml1

    # --- NPU buffer use, in bytes ------------------------------------------------------------
    def l0a_bytes(self, p):
        return self.ml0 * self.kl0 * p.dtype_size

    def l0b_bytes(self, p):
        return self.kl0 * self.nl0 * p.dtype_size

    def l0c_bytes(self, p):
        return self.ml0 * self.nl0 * L0C_ELEMENT_BYTES

    def l1_dy_window(self, p):
        """(houtL1, woutL1, coutL1): the dy block one L1 tile loads (zero-inserted grid)."""
        hout_l1 = min(ceil_div(self.ml1, p.win) + (p.kh - 1) * p.dh, (p.hout - 1) * p.sh + 1)
        wout_l1 = min(min(self.ml1, p.win) + (p.kw - 1) * p.dw, (p.wout - 1) * p.sw + 1)
        return hout_l1, wout_l1, self.kl1 // p.taps

    def l1_bytes(self, p):
        """The specification's MinL1LoadSize: weight block plus dy window."""
        hout_l1, wout_l1, cout_l1 = self.l1_dy_window(p)
        return (self.kl1 * self.nl1 + hout_l1 * wout_l1 * cout_l1) * p.dtype_size

    def l0_loop_count(self, p):
        """L0 iterations per image, as upstream counts them before warning (> MAX_L0_LOOPS)."""
        return (
            ceil_div(p.gemm_n, self.nl0)
            * ceil_div(p.gemm_m, self.ml0)
            * ceil_div(p.gemm_k, self.kl0)
        )

    # --- what the CPU kernel runs with -------------------------------------------------------
    def kernel_tiles(self, p):
        """Tiles clipped to the problem, so scratch never exceeds what the problem can use.

        Returns (m_rows, m_cols, nl1, kl1, ml0, kl0, nl0). Clipping changes no block boundary:
        a tile larger than its dimension covers it in one partial block either way.
        """
        rows, cols = self.m_tile_rows_cols(p)
        rows = min(rows, p.hin)
        nl1 = min(self.nl1, p.cin)
        kl1 = min(self.kl1, p.gemm_k)
        return (
            rows,
            cols,
            nl1,
            kl1,
            min(self.ml0, rows * cols),
            min(self.kl0, kl1),
            min(self.nl0, nl1),
        )


# The NPU's blockDim range of one launch (the kernel header's PYPTO_CONV_DX_MAX_BLOCKS; the
# NPU's launch struct module re-exports it and the header test compares them).
MAX_BLOCKS = 65535


def task_grid(p, t):
    """(rows_per_task, cin_per_task, m_tasks, n_tasks) of one image: tileML1 of whole rows by
    tileNL1 channels. The one task-grid definition: the NPU's launch plan launches these tasks
    and the error localiser (pypto/_golden/localise.py) reports in them."""
    # clipped to the image, as the CPU's loop nest clips it (tileML1 is unbounded above)
    rows_per_task = min(p.hin, t.ml1 // p.win) if t.ml1 >= p.win else 1
    cin_per_task = min(t.nl1, ceil_align(p.cin, C0))
    n_tasks = ceil_div(p.cin, cin_per_task)
    m_tasks = ceil_div(p.hin, rows_per_task)
    if m_tasks * n_tasks > MAX_BLOCKS:  # one image must fit one launch: taller blocks
        rows_per_task = ceil_div(p.hin, MAX_BLOCKS // n_tasks)
        m_tasks = ceil_div(p.hin, rows_per_task)
    return rows_per_task, cin_per_task, m_tasks, n_tasks
