# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""L1/L0-tiled dgrad on the CPU: fp16/bf16 in, fp32 accumulation, one rounding at write-out.

Called only by pypto._cpu with arguments that passed every validation rule; nothing here
checks shapes. The loop nest (see pypto/_kernels/__init__.py for the picture):

    parallel over work items (image n, N-L1 block of Cin, M-L1 tile of pixels)
      for each M-L0 block of the tile's pixels
        zero the fp32 accumulator C[tileNL1][tileML0]
        for each K-L1 block (whole Cout channels x all taps)
          for each K-L0 block
            gather A[tileKL0][tileML0] from dy (im2col of this block only), widened to fp32
            for each N-L0 block:  C[n rows] += Wp[n rows][k block] * A
        round C once to fp16/bf16 and write it out, blocked by the vector tile

Upstream runs N-L0 outside M-L0; here N-L0 is innermost so that one gathered A block serves
every N-L0 block (the NPU gets the same reuse from L1). Each output element is summed over
k = (co, kh, kw) in ascending order whatever the tiles and threads, so thread count never
changes a bit.
"""

from cython.parallel cimport parallel, prange, threadid
from libc.stdint cimport int64_t, uint16_t
from libc.string cimport memset

cdef extern from "pypto_numeric.h" nogil:
    float pypto_to_float(uint16_t h, int dtype)
    void pypto_widen(const uint16_t *src, float *dst, int64_t n, int dtype)
    void pypto_narrow(const float *src, uint16_t *dst, int64_t n, int dtype)

cdef extern from *:
    """
    #ifdef _OPENMP
    #define PYPTO_HAVE_OPENMP 1
    #else
    #define PYPTO_HAVE_OPENMP 0
    #endif
    """
    int PYPTO_HAVE_OPENMP


def openmp_enabled():
    """True when this module was built with OpenMP (else it runs on one thread)."""
    return bool(PYPTO_HAVE_OPENMP)


cdef struct Geometry:
    # problem
    int64_t n_img, cin, cout, hin, win, hout, wout, kh, kw
    int64_t sh, sw, pt, pl, dh, dw, taps, k_total
    int dtype
    # tiles (already clipped to the problem)
    int64_t m_rows, m_cols, nl1, kl1, ml0, kl0, nl0
    int64_t vec_c, vec_w
    # work decomposition
    int64_t n_blocks, row_tiles, col_tiles
    # per-thread scratch: C then A
    int64_t acc_len, a_len


cdef inline int64_t _min(int64_t a, int64_t b) noexcept nogil:
    return a if a < b else b


cdef void _gather(const Geometry *g, const uint16_t *dy_img, float *a_blk,
                  int64_t k0, int64_t k_count, int64_t h0, int64_t w0, int64_t cols,
                  int64_t t0, int64_t t_count) noexcept nogil:
    """A[kk][t] = dy[co, ho, wo] for k = k0 + kk and tile pixel t0 + t, or 0 where no dy pixel."""
    cdef int64_t kk, k, co, tap, khi, kwi, t, seg, hi, wi, hnum, ho, wnum, wo, j
    cdef int64_t wi_lo, wi_hi
    cdef float *arow
    cdef const uint16_t *dyrow
    for kk in range(k_count):
        k = k0 + kk
        co = k // g.taps
        tap = k - co * g.taps
        khi = tap // g.kw
        kwi = tap - khi * g.kw
        arow = a_blk + kk * g.ml0
        t = t0
        while t < t0 + t_count:
            # one row segment of the tile: pixels (hi, wi .. wi + seg - 1)
            hi = h0 + t // cols
            wi = w0 + t % cols
            seg = _min(cols - t % cols, t0 + t_count - t)
            hnum = hi + g.pt - khi * g.dh
            ho = hnum // g.sh
            if hnum < 0 or hnum - ho * g.sh != 0 or ho >= g.hout:
                memset(arow, 0, seg * sizeof(float))
            else:
                dyrow = dy_img + (co * g.hout + ho) * g.wout
                if g.sw == 1:
                    # dy columns wo = wi + pl - kw*dw: one contiguous run, zeros around it
                    wi_lo = kwi * g.dw - g.pl
                    wi_hi = wi_lo + g.wout
                    j = 0
                    while j < seg and wi + j < wi_lo:
                        arow[j] = 0
                        j += 1
                    wo = _min(seg, wi_hi - wi)
                    if wo > j:
                        pypto_widen(dyrow + (wi + j - wi_lo), arow + j, wo - j, g.dtype)
                        j = wo
                    while j < seg:
                        arow[j] = 0
                        j += 1
                else:
                    for j in range(seg):
                        wnum = wi + j + g.pl - kwi * g.dw
                        wo = wnum // g.sw
                        if wnum >= 0 and wnum - wo * g.sw == 0 and wo < g.wout:
                            arow[j] = pypto_to_float(dyrow[wo], g.dtype)
                        else:
                            arow[j] = 0
            arow += seg
            t += seg


cdef void _multiply(const Geometry *g, float *acc, const float *a_blk, const float *w_rows,
                    int64_t n_count, int64_t k_count, int64_t t_count) noexcept nogil:
    """acc[ci][t] += sum_kk w_rows[ci][kk] * a_blk[kk][t] for one L0 block (rows of length ml0)."""
    cdef int64_t ci, kk, t
    cdef float wv
    cdef float *crow
    cdef const float *wrow
    cdef const float *arow
    for ci in range(n_count):
        crow = acc + ci * g.ml0
        wrow = w_rows + ci * g.k_total
        for kk in range(k_count):
            wv = wrow[kk]
            arow = a_blk + kk * g.ml0
            for t in range(t_count):
                crow[t] = crow[t] + wv * arow[t]


cdef void _write_out(const Geometry *g, const float *acc, uint16_t *dx_img, int64_t c_first,
                     int64_t n_count, int64_t h0, int64_t w0, int64_t cols,
                     int64_t t0, int64_t t_count) noexcept nogil:
    """Round the accumulator once and store it in NCHW, in vec_c-channel x vec_w-column chunks."""
    cdef int64_t c_blk, c_end, ci, t, seg, hi, wi, w_blk, w_len
    c_blk = 0
    while c_blk < n_count:
        c_end = _min(c_blk + g.vec_c, n_count)
        t = t0
        while t < t0 + t_count:
            hi = h0 + t // cols
            wi = w0 + t % cols
            seg = _min(cols - t % cols, t0 + t_count - t)
            w_blk = 0
            while w_blk < seg:
                w_len = _min(g.vec_w, seg - w_blk)
                for ci in range(c_blk, c_end):
                    pypto_narrow(acc + ci * g.ml0 + (t - t0) + w_blk,
                                 dx_img + ((c_first + ci) * g.hin + hi) * g.win + wi + w_blk,
                                 w_len, g.dtype)
                w_blk += w_len
            t += seg
        c_blk = c_end


cdef void _work_item(const Geometry *g, int64_t item, const uint16_t *dy, const float *w_packed,
                     uint16_t *dx, float *scratch) noexcept nogil:
    """One (image, N-L1 block, M-L1 tile): every output element of it, start to finish."""
    cdef int64_t tiles_per_img = g.n_blocks * g.row_tiles * g.col_tiles
    cdef int64_t img = item // tiles_per_img
    cdef int64_t rest = item - img * tiles_per_img
    cdef int64_t nb = rest // (g.row_tiles * g.col_tiles)
    cdef int64_t mt = rest - nb * (g.row_tiles * g.col_tiles)
    cdef int64_t h0 = (mt // g.col_tiles) * g.m_rows
    cdef int64_t w0 = (mt % g.col_tiles) * g.m_cols
    cdef int64_t rows = _min(g.m_rows, g.hin - h0)
    cdef int64_t cols = _min(g.m_cols, g.win - w0)
    cdef int64_t c_first = nb * g.nl1
    cdef int64_t n_count1 = _min(g.nl1, g.cin - c_first)
    cdef int64_t t_total = rows * cols
    cdef const uint16_t *dy_img = dy + img * g.cout * g.hout * g.wout
    cdef uint16_t *dx_img = dx + img * g.cin * g.hin * g.win
    cdef float *acc = scratch
    cdef float *a_blk = scratch + g.acc_len
    cdef int64_t t0, t_count, k1, k1_end, k0, k_count, n0, n_count0

    t0 = 0
    while t0 < t_total:                                   # M-L0
        t_count = _min(g.ml0, t_total - t0)
        memset(acc, 0, g.acc_len * sizeof(float))
        k1 = 0
        while k1 < g.k_total:                             # K-L1
            k1_end = _min(k1 + g.kl1, g.k_total)
            k0 = k1
            while k0 < k1_end:                            # K-L0
                k_count = _min(g.kl0, k1_end - k0)
                _gather(g, dy_img, a_blk, k0, k_count, h0, w0, cols, t0, t_count)
                n0 = 0
                while n0 < n_count1:                      # N-L0
                    n_count0 = _min(g.nl0, n_count1 - n0)
                    _multiply(g, acc + n0 * g.ml0, a_blk,
                              w_packed + (c_first + n0) * g.k_total + k0,
                              n_count0, k_count, t_count)
                    n0 += n_count0
                k0 += k_count
            k1 = k1_end
        _write_out(g, acc, dx_img, c_first, n_count1, h0, w0, cols, t0, t_count)
        t0 += t_count


def _pack_weight(const uint16_t[:, :, :, ::1] w, float[:, ::1] w_packed, int dtype):
    """Wp[ci][co*Kh*Kw + kh*Kw + kw] = w[co, ci, kh, kw] in fp32 (B operand, transposed)."""
    cdef int64_t cout = w.shape[0], cin = w.shape[1], taps = w.shape[2] * w.shape[3]
    cdef int64_t co, ci, tap
    with nogil:
        for co in range(cout):
            for ci in range(cin):
                pypto_widen(&w[co, ci, 0, 0], &w_packed[ci, co * taps], taps, dtype)


def dgrad(const uint16_t[:, :, :, ::1] dy, const uint16_t[:, :, :, ::1] w,
          uint16_t[:, :, :, ::1] dx, int dtype, tuple attrs, tuple tiles, tuple vec_cw,
          int num_threads):
    """dx = dgrad(dy, w), all three NCHW arrays of 16-bit patterns (``dtype``: 0 fp16, 1 bf16).

    attrs = (sh, sw, pt, pl, dh, dw); tiles = (m_rows, m_cols, nl1, kl1, ml0, kl0, nl0) from
    Tiling.kernel_tiles; vec_cw = (channels, columns) per write-out chunk.
    """
    cdef Geometry g
    g.n_img, g.cout, g.hout, g.wout = dy.shape[0], dy.shape[1], dy.shape[2], dy.shape[3]
    g.cin, g.kh, g.kw = w.shape[1], w.shape[2], w.shape[3]
    g.hin, g.win = dx.shape[2], dx.shape[3]
    g.sh, g.sw, g.pt, g.pl, g.dh, g.dw = attrs
    g.taps = g.kh * g.kw
    g.k_total = g.cout * g.taps
    g.dtype = dtype
    g.m_rows, g.m_cols, g.nl1, g.kl1, g.ml0, g.kl0, g.nl0 = tiles
    g.vec_c, g.vec_w = vec_cw
    g.n_blocks = (g.cin + g.nl1 - 1) // g.nl1
    g.row_tiles = (g.hin + g.m_rows - 1) // g.m_rows
    g.col_tiles = (g.win + g.m_cols - 1) // g.m_cols
    g.acc_len = g.nl1 * g.ml0
    g.a_len = g.kl0 * g.ml0

    import numpy as np
    w_packed_arr = np.empty((g.cin, g.k_total), dtype=np.float32)
    _pack_weight(w, w_packed_arr, dtype)
    cdef float[:, ::1] w_packed = w_packed_arr

    cdef int64_t n_items = g.n_img * g.n_blocks * g.row_tiles * g.col_tiles
    cdef int threads = <int>_min(num_threads, n_items)
    cdef int64_t per_thread = g.acc_len + g.a_len
    scratch_arr = np.empty(threads * per_thread, dtype=np.float32)
    cdef float[::1] scratch = scratch_arr
    cdef int64_t item
    cdef const uint16_t *dy_p = &dy[0, 0, 0, 0]
    cdef uint16_t *dx_p = &dx[0, 0, 0, 0]
    cdef const float *w_p = &w_packed[0, 0]
    cdef float *s_p = &scratch[0]
    with nogil, parallel(num_threads=threads):
        for item in prange(n_items, schedule="dynamic"):
            _work_item(&g, item, dy_p, w_p, dx_p, s_p + threadid() * per_thread)
