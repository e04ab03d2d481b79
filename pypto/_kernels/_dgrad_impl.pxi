# The dgrad kernel body, included by one small module per ISA level (_dgrad_avx512_bf16.pyx,
# _dgrad_avx512.pyx, _dgrad_avx2.pyx, _dgrad_baseline.pyx): setup.py compiles each with its own
# -march, and the C headers pick their SIMD code from the compiler's macros. pypto._cpu chooses
# one module at import. Called only with arguments that passed every validation rule.
#
# Loop nest (pypto/_kernels/__init__.py has the picture):
#
#   parallel over work items (image, N-L1 block of Cin, M-L1 tile of pixels)
#     for each stride phase (rh, rw): the tile's pixels with (hi+pt) % sh == rh, (wi+pl) % sw == rw
#       -- a stride-1 correlation over the taps with kh*dh % sh == rh, kw*dw % sw == rw
#       for each M-L0 block of the phase's pixels
#         zero the fp32 accumulator C[tileNL1][tileML0]
#         for each K-L1 block (whole Cout channels x the phase's taps)
#           for each K-L0 block
#             gather A[tileKL0][tileML0] from dy (contiguous row copies, zero borders)
#             for each N-L0 block: C[rows] += W panel * A  (register-blocked micro-kernel)
#         round C once to fp16/bf16 and store it, in vec-tile chunks
#
# Each output element is summed over its k = (co, tap) in ascending order whatever the tiles
# and threads (in pairs (k, k+1) in the bf16 dot-product kernel), so threads never change a bit.

from cython.parallel cimport parallel, prange, threadid
from libc.stdint cimport int64_t, uint16_t, uint32_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset

cdef extern from "pypto_numeric.h" nogil:
    void pypto_widen(const uint16_t *src, float *dst, int64_t n, int dtype)
    void pypto_narrow(const float *src, uint16_t *dst, int64_t n, int dtype)
    uint16_t pypto_float_to_half(float f)
    float pypto_half_to_float(uint16_t h)
    float pypto_bf16_to_float(uint16_t h)
    int pypto_bf16_min_exponent(const uint16_t *x, int64_t n)
    uint16_t pypto_float_to_bf16(float f)
    void pypto_gather_run(const uint16_t *src, int64_t lo, int64_t hi, int64_t n, uint16_t *dst)
    void pypto_gather_run_f32(const uint16_t *src, int64_t lo, int64_t hi, int64_t n, float *dst,
                              int dtype)

cdef extern from "pypto_gemm.h" nogil:
    enum: PYPTO_MR
    enum: PYPTO_NR
    enum: PYPTO_HAVE_BF16_DOT
    const char *pypto_isa_name()
    void pypto_ukernel_f32(int64_t kc, const float *w, const float *a, int64_t lda,
                           float *c, int64_t ldc)
    void pypto_ukernel_bf16(int64_t kc_pairs, const uint32_t *w, const uint32_t *a,
                            int64_t lda, float *c, int64_t ldc)

cdef extern from *:
    """
    #ifdef _OPENMP
    #define PYPTO_HAVE_OPENMP 1
    #else
    #define PYPTO_HAVE_OPENMP 0
    #endif
    """
    int PYPTO_HAVE_OPENMP


ISA = pypto_isa_name().decode()
MR = PYPTO_MR
NR = PYPTO_NR
HAS_BF16_DOT = bool(PYPTO_HAVE_BF16_DOT)


cdef extern from *:
    """
    static int pypto_cpu_has(int feature) {
    #if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
        __builtin_cpu_init();
        switch (feature) {
        case 0: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
                       && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
        case 1: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
                       && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")
                       && __builtin_cpu_supports("avx512cd");
        case 2: return __builtin_cpu_supports("avx512bf16");
        }
    #endif
        (void)feature;
        return 0;
    }
    """
    int pypto_cpu_has(int feature)


def cpu_levels():
    """The ISA levels this CPU (and OS) can run, best last."""
    levels = ["baseline"]
    if pypto_cpu_has(0):
        levels.append("avx2")
        if pypto_cpu_has(1):
            levels.append("avx512")
            if pypto_cpu_has(2):
                levels.append("avx512_bf16")
    return levels


def openmp_enabled():
    """True when this module was built with OpenMP (else it runs on one thread)."""
    return bool(PYPTO_HAVE_OPENMP)


cdef enum:
    MAX_PHASES = 63 * 63

cdef struct Geometry:
    int64_t n_img, cin, cout, hin, win, hout, wout, kh, kw
    int64_t sh, sw, pt, pl, dh, dw
    int dtype, dot_bf16
    # tiles, clipped to the problem; padded sizes of the per-thread buffers
    int64_t m_rows, m_cols, nl1, kl1, ml0, kl0, nl0, cout_l1
    int64_t ml0_pad, nl1_pad, vec_c, vec_w
    int64_t n_blocks, row_tiles, col_tiles
    int64_t acc_len, a16_len, a_len     # floats, uint16s, floats (or uint32 pairs)
    # phases: taps of phase p are tap_kh/kw/qh/qw[tap_first[p] : tap_first[p] + tap_count[p]]
    const int64_t *tap_first
    const int64_t *tap_count
    const int64_t *tap_kh
    const int64_t *tap_kw
    const int64_t *w_offset              # where phase p's weight panels start (elements)
    const void *w_packed


cdef inline int64_t _min(int64_t a, int64_t b) noexcept nogil:
    return a if a < b else b


cdef inline int64_t _max(int64_t a, int64_t b) noexcept nogil:
    return a if a > b else b


cdef inline int64_t _round_up(int64_t a, int64_t b) noexcept nogil:
    return (a + b - 1) // b * b


cdef inline int64_t _k_stride(const Geometry *g, int64_t ntaps) noexcept nogil:
    """Length of phase's K axis in its weight panel (even when k goes in bf16 pairs)."""
    cdef int64_t k = g.cout * ntaps
    return _round_up(k, 2) if g.dot_bf16 else k


cdef struct PhaseGrid:
    # the phase's pixels inside one M tile: rows hi0 + r*sh, columns wi0 + c*sw
    int64_t hi0, wi0, rows, cols
    # their positions on the dy grid before the tap shift: ih0 + r, jw0 + c
    int64_t ih0, jw0


cdef inline bint _phase_grid(const Geometry *g, int64_t rh, int64_t rw, int64_t h0, int64_t rows,
                             int64_t w0, int64_t cols, PhaseGrid *pg) noexcept nogil:
    """The tile's pixels in phase (rh, rw); False when there are none."""
    pg.hi0 = h0 + ((rh - (h0 + g.pt) % g.sh) % g.sh + g.sh) % g.sh
    pg.wi0 = w0 + ((rw - (w0 + g.pl) % g.sw) % g.sw + g.sw) % g.sw
    if pg.hi0 >= h0 + rows or pg.wi0 >= w0 + cols:
        return False
    pg.rows = (h0 + rows - 1 - pg.hi0) // g.sh + 1
    pg.cols = (w0 + cols - 1 - pg.wi0) // g.sw + 1
    pg.ih0 = (pg.hi0 + g.pt) // g.sh
    pg.jw0 = (pg.wi0 + g.pl) // g.sw
    return True


cdef void _gather(const Geometry *g, const uint16_t *dy_img, const PhaseGrid *pg,
                  int64_t tap_first, int64_t ntaps, int64_t k0, int64_t k_count,
                  int64_t t0, int64_t t_count, uint16_t *a16, void *a) noexcept nogil:
    """The micro-kernel's A panel for taps k0 .. k0+k_count-1 and pixels t0 .. t0+t_count-1.

    In a phase every tap is a plain shift (qh, qw) of the dy grid, so each row segment of
    pixels reads one contiguous run of a dy row (zeros where the tap falls outside dy). fp32
    panels are widened while copied; for the bf16 dot product the bits go to a16 first, then
    each pair of k rows is interleaved into the panel.
    """
    cdef int64_t kk, k, co, tap, qh, qw, t, seg, r, c, ho, wo_first, lo, hi
    cdef float *arow_f = NULL
    cdef uint16_t *arow_h = NULL
    cdef const uint16_t *dyrow
    for kk in range(k_count):
        k = k0 + kk
        co = k // ntaps
        tap = tap_first + (k - co * ntaps)
        qh = (g.tap_kh[tap] * g.dh) // g.sh
        qw = (g.tap_kw[tap] * g.dw) // g.sw
        arow_h = a16 + kk * g.ml0_pad
        arow_f = <float *>a + kk * g.ml0_pad
        t = t0
        while t < t0 + t_count:
            r = t // pg.cols
            c = t - r * pg.cols
            seg = _min(pg.cols - c, t0 + t_count - t)
            ho = pg.ih0 + r - qh
            wo_first = pg.jw0 + c - qw
            lo = 0
            hi = 0
            if ho >= 0 and ho < g.hout:
                # columns j of the segment read dy column wo_first + j when inside [0, wout)
                lo = _min(_max(-wo_first, 0), seg)
                hi = _max(_min(g.wout - wo_first, seg), lo)
            dyrow = dy_img + (co * g.hout + ho) * g.wout + wo_first
            if g.dot_bf16:
                pypto_gather_run(dyrow, lo, hi, seg, arow_h)
                arow_h += seg
            else:
                pypto_gather_run_f32(dyrow, lo, hi, seg, arow_f, g.dtype)
                arow_f += seg
            t += seg
        # padding columns up to the micro-kernel width stay zero
        if g.dot_bf16:
            pypto_gather_run(NULL, 0, 0, g.ml0_pad - t_count, arow_h)
        else:
            pypto_gather_run_f32(NULL, 0, 0, g.ml0_pad - t_count, arow_f, g.dtype)
    if g.dot_bf16:
        _interleave_pairs(g, a16, k_count, <uint32_t *>a)


cdef void _interleave_pairs(const Geometry *g, const uint16_t *a16, int64_t k_count,
                            uint32_t *pairs) noexcept nogil:
    """pairs[kk/2][j] = (a16[kk][j], a16[kk+1][j]) as one uint32 (second half 0 past k_count)."""
    cdef int64_t kk, j
    cdef const uint16_t *even
    cdef const uint16_t *odd
    cdef uint32_t *out
    for kk in range(0, k_count, 2):
        even = a16 + kk * g.ml0_pad
        out = pairs + (kk // 2) * g.ml0_pad
        if kk + 1 < k_count:
            odd = even + g.ml0_pad
            for j in range(g.ml0_pad):
                out[j] = <uint32_t>even[j] | (<uint32_t>odd[j] << 16)
        else:
            for j in range(g.ml0_pad):
                out[j] = even[j]


cdef void _multiply(const Geometry *g, int64_t phase, int64_t ntaps, int64_t c_first,
                    int64_t n_count1, int64_t k0, int64_t k_count, int64_t t_count,
                    const void *a, float *acc) noexcept nogil:
    """acc[ci][t] += sum_k W[ci][k] A[k][t] over the block, N-L0 block by N-L0 block."""
    cdef int64_t k_stride = _k_stride(g, ntaps)
    cdef int64_t t_pad = _round_up(t_count, PYPTO_NR)
    cdef int64_t n0, n_end, cb, jb, panel
    n0 = 0
    while n0 < n_count1:                                           # N-L0
        n_end = _min(n0 + g.nl0, n_count1)
        cb = n0
        while cb < n_end:                                          # MR channels at a time
            panel = g.w_offset[phase] + (c_first + cb) * k_stride
            jb = 0
            while jb < t_pad:
                if g.dot_bf16:
                    pypto_ukernel_bf16((k_count + 1) // 2,
                                       <const uint32_t *>g.w_packed + panel // 2 + (k0 // 2) * PYPTO_MR,
                                       <const uint32_t *>a + jb, g.ml0_pad,
                                       acc + cb * g.ml0_pad + jb, g.ml0_pad)
                else:
                    pypto_ukernel_f32(k_count, <const float *>g.w_packed + panel + k0 * PYPTO_MR,
                                      <const float *>a + jb, g.ml0_pad,
                                      acc + cb * g.ml0_pad + jb, g.ml0_pad)
                jb += PYPTO_NR
            cb += PYPTO_MR
        n0 = n_end


cdef void _write_out(const Geometry *g, const float *acc, uint16_t *dx_img, int64_t c_first,
                     int64_t n_count, const PhaseGrid *pg, int64_t t0, int64_t t_count) noexcept nogil:
    """Round the accumulator once and store it in NCHW, in vec_c-channel x vec_w-column chunks."""
    cdef int64_t c_blk, c_end, ci, t, r, c, seg, w_blk, w_len, j
    cdef const float *src
    cdef uint16_t *dst
    c_blk = 0
    while c_blk < n_count:
        c_end = _min(c_blk + g.vec_c, n_count)
        t = t0
        while t < t0 + t_count:
            r = t // pg.cols
            c = t - r * pg.cols
            seg = _min(pg.cols - c, t0 + t_count - t)
            w_blk = 0
            while w_blk < seg:
                w_len = _min(g.vec_w, seg - w_blk)
                for ci in range(c_blk, c_end):
                    src = acc + ci * g.ml0_pad + (t - t0) + w_blk
                    dst = dx_img + ((c_first + ci) * g.hin + pg.hi0 + r * g.sh) * g.win \
                        + pg.wi0 + (c + w_blk) * g.sw
                    if g.sw == 1:
                        pypto_narrow(src, dst, w_len, g.dtype)
                    elif g.dtype == 1:
                        for j in range(w_len):
                            dst[j * g.sw] = pypto_float_to_bf16(src[j])
                    else:
                        for j in range(w_len):
                            dst[j * g.sw] = pypto_float_to_half(src[j])
                w_blk += w_len
            t += seg
        c_blk = c_end


cdef void _work_item(const Geometry *g, int64_t item, const uint16_t *dy, uint16_t *dx,
                     float *scratch) noexcept nogil:
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
    cdef const uint16_t *dy_img = dy + img * g.cout * g.hout * g.wout
    cdef uint16_t *dx_img = dx + img * g.cin * g.hin * g.win
    cdef float *acc = scratch
    cdef uint16_t *a16 = <uint16_t *>(scratch + g.acc_len)
    cdef void *a = <void *>(scratch + g.acc_len + (g.a16_len + 1) // 2)
    cdef PhaseGrid pg
    cdef int64_t rh, rw, phase, ntaps, k_phase, t_total, t0, t_count, k1, k1_end, k0, k_count
    for rh in range(g.sh):
        for rw in range(g.sw):
            if not _phase_grid(g, rh, rw, h0, rows, w0, cols, &pg):
                continue
            phase = rh * g.sw + rw
            ntaps = g.tap_count[phase]
            k_phase = g.cout * ntaps
            t_total = pg.rows * pg.cols
            t0 = 0
            while t0 < t_total:                                    # M-L0
                t_count = _min(g.ml0, t_total - t0)
                memset(acc, 0, g.nl1_pad * g.ml0_pad * sizeof(float))
                k1 = 0
                while k1 < k_phase:                                # K-L1: cout_l1 channels
                    k1_end = _min(k1 + g.cout_l1 * ntaps, k_phase)
                    k0 = k1
                    while k0 < k1_end:                             # K-L0
                        k_count = _min(g.kl0, k1_end - k0)
                        _gather(g, dy_img, &pg, g.tap_first[phase], ntaps, k0, k_count,
                                t0, t_count, a16, a)
                        _multiply(g, phase, ntaps, c_first, n_count1, k0, k_count, t_count,
                                  a, acc)
                        k0 += k_count
                    k1 = k1_end
                _write_out(g, acc, dx_img, c_first, n_count1, &pg, t0, t_count)
                t0 += t_count


cdef void _pack_weight_block(const Geometry *g, const uint16_t *w, int64_t cb) noexcept nogil:
    """Weight panels of channels cb .. cb+MR-1 for every phase (zero rows past Cin).

    fp32: panel[k][r] = w[co, cb+r, kh, kw] with k = co*ntaps + (tap's index in its phase);
    bf16 pairs: panel[k/2][r][k%2]. For each (co, phase) the source is one contiguous
    MR x Kh*Kw block and the destination one contiguous run: a small transpose.
    """
    cdef int64_t phase, ntaps, k_stride, co, ti, r, rows, first, base, k
    cdef int64_t taps = g.kh * g.kw
    cdef const uint16_t *src
    cdef float *dst_f
    cdef uint16_t *dst_h
    cdef int64_t tap_index
    rows = _min(PYPTO_MR, g.cin - cb)
    for phase in range(g.sh * g.sw):
        ntaps = g.tap_count[phase]
        if ntaps == 0:
            continue
        k_stride = _k_stride(g, ntaps)
        first = g.tap_first[phase]
        base = g.w_offset[phase] + cb * k_stride
        for co in range(g.cout):
            src = w + (co * g.cin + cb) * taps
            for ti in range(ntaps):
                tap_index = g.tap_kh[first + ti] * g.kw + g.tap_kw[first + ti]
                k = co * ntaps + ti
                if g.dot_bf16:
                    dst_h = <uint16_t *>g.w_packed + base + (k >> 1) * (2 * PYPTO_MR) + (k & 1)
                    for r in range(rows):
                        dst_h[2 * r] = src[r * taps + tap_index]
                elif g.dtype == 1:
                    dst_f = <float *>g.w_packed + base + k * PYPTO_MR
                    for r in range(rows):
                        dst_f[r] = pypto_bf16_to_float(src[r * taps + tap_index])
                else:
                    dst_f = <float *>g.w_packed + base + k * PYPTO_MR
                    for r in range(rows):
                        dst_f[r] = pypto_half_to_float(src[r * taps + tap_index])
        # rows past Cin and, with an odd K, the last pair's second weight stay 0 (calloc)


def dgrad(const uint16_t[:, :, :, ::1] dy, const uint16_t[:, :, :, ::1] w,
          uint16_t[:, :, :, ::1] dx, int dtype, tuple attrs, tuple tiles, tuple vec_cw,
          int num_threads, bint use_bf16_dot=True):
    """dx = dgrad(dy, w); NCHW arrays of 16-bit patterns (``dtype``: 0 fp16, 1 bf16).

    attrs = (sh, sw, pt, pl, dh, dw); tiles = (m_rows, m_cols, nl1, kl1, ml0, kl0, nl0) from
    Tiling.kernel_tiles; vec_cw = (channels, columns) per write-out chunk. bf16 uses the
    dot-product micro-kernel when this build has one, ``use_bf16_dot`` is true and the data
    cannot produce subnormals. Returns the path taken: "bf16_dot" or "fp32".
    """
    cdef Geometry g
    g.n_img, g.cout, g.hout, g.wout = dy.shape[0], dy.shape[1], dy.shape[2], dy.shape[3]
    g.cin, g.kh, g.kw = w.shape[1], w.shape[2], w.shape[3]
    g.hin, g.win = dx.shape[2], dx.shape[3]
    g.sh, g.sw, g.pt, g.pl, g.dh, g.dw = attrs
    g.dtype = dtype
    g.dot_bf16 = dtype == 1 and PYPTO_HAVE_BF16_DOT and use_bf16_dot
    if g.dot_bf16:
        # the dot-product instruction flushes subnormals: use it only where none can occur
        g.dot_bf16 = (pypto_bf16_min_exponent(&dy[0, 0, 0, 0], dy.size)
                      + pypto_bf16_min_exponent(&w[0, 0, 0, 0], w.size)) >= 142
    g.m_rows, g.m_cols, g.nl1, g.kl1, g.ml0, g.kl0, g.nl0 = tiles
    g.cout_l1 = g.kl1 // (g.kh * g.kw)
    g.vec_c, g.vec_w = vec_cw
    g.n_blocks = (g.cin + g.nl1 - 1) // g.nl1
    g.row_tiles = (g.hin + g.m_rows - 1) // g.m_rows
    g.col_tiles = (g.win + g.m_cols - 1) // g.m_cols
    g.ml0_pad = _round_up(g.ml0, PYPTO_NR)
    g.nl1_pad = _round_up(g.nl1, PYPTO_MR)
    g.acc_len = g.nl1_pad * g.ml0_pad
    g.a16_len = _round_up(g.kl0, 2) * g.ml0_pad
    g.a_len = _round_up(g.kl0, 2) * g.ml0_pad

    # taps grouped by stride phase: tap (kh, kw) feeds phase (kh*dh % sh, kw*dw % sw).
    # Tables live in one C block (small calls: no NumPy objects to build).
    cdef int64_t n_phases = g.sh * g.sw
    cdef int64_t taps = g.kh * g.kw
    cdef int64_t cin_pad = _round_up(g.cin, PYPTO_MR)
    cdef int64_t phase, i, j, n_taps_seen = 0, panel_elems = 0
    cdef int64_t *tables = <int64_t *>malloc((3 * n_phases + 2 * taps) * sizeof(int64_t))
    if tables == NULL:
        raise MemoryError("pypto: no memory for the kernel's tap tables")
    cdef int64_t *t_first = tables
    cdef int64_t *t_count = tables + n_phases
    cdef int64_t *w_off = tables + 2 * n_phases
    cdef int64_t *t_kh = tables + 3 * n_phases
    cdef int64_t *t_kw = t_kh + taps
    for phase in range(n_phases):
        t_first[phase] = n_taps_seen
        for i in range(g.kh):
            for j in range(g.kw):
                if (i * g.dh) % g.sh == phase // g.sw and (j * g.dw) % g.sw == phase % g.sw:
                    t_kh[n_taps_seen] = i
                    t_kw[n_taps_seen] = j
                    n_taps_seen += 1
        t_count[phase] = n_taps_seen - t_first[phase]
        w_off[phase] = panel_elems
        panel_elems += cin_pad * _k_stride(&g, t_count[phase])
    g.tap_first, g.tap_count, g.w_offset, g.tap_kh, g.tap_kw = t_first, t_count, w_off, t_kh, t_kw
    cdef size_t panel_bytes = panel_elems * (sizeof(uint16_t) if g.dot_bf16 else sizeof(float))
    cdef void *w_packed = calloc(panel_bytes, 1)
    cdef int64_t n_items = g.n_img * g.n_blocks * g.row_tiles * g.col_tiles
    cdef int threads = <int>_max(1, _min(num_threads, n_items))
    cdef int64_t per_thread = _round_up(g.acc_len + (g.a16_len + 1) // 2 + g.a_len, 16)
    cdef float *scratch = <float *>malloc(threads * per_thread * sizeof(float))
    cdef int64_t item, cb
    cdef int64_t n_cb = cin_pad // PYPTO_MR
    cdef const uint16_t *dy_p = &dy[0, 0, 0, 0]
    cdef const uint16_t *w_p = &w[0, 0, 0, 0]
    cdef uint16_t *dx_p = &dx[0, 0, 0, 0]
    try:
        if w_packed == NULL or scratch == NULL:
            raise MemoryError(f"pypto: no memory for the kernel's buffers ({panel_bytes} bytes of "
                              f"weight panels, {threads * per_thread * 4} bytes of tile scratch)")
        g.w_packed = w_packed
        with nogil, parallel(num_threads=threads):
            for cb in prange(n_cb, schedule="static"):
                _pack_weight_block(&g, w_p, cb * PYPTO_MR)
        with nogil, parallel(num_threads=threads):
            for item in prange(n_items, schedule="dynamic"):
                _work_item(&g, item, dy_p, dx_p, scratch + threadid() * per_thread)
    finally:
        free(scratch)
        free(w_packed)
        free(tables)
    return "bf16_dot" if g.dot_bf16 else "fp32"
