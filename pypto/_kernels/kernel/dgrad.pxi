# The dgrad kernel body, included by one small module per ISA level (_dgrad_avx512_bf16.pyx,
# _dgrad_avx512.pyx, _dgrad_avx2.pyx, _dgrad_baseline.pyx): setup.py compiles each with its own
# -march, and the C headers pick their SIMD code from the compiler's macros. pypto._kernels.dispatch imports
# one module, and only after the CPU check (pypto._kernels.features) says this CPU runs its level. Called
# only with arguments that passed every validation rule.
#
# Loop nest (pypto/_kernels/__init__.py has the picture):
#
#   parallel over work items (image or image group, N-L1 block of Cin, M-L1 tile of pixels)
#     for each stride phase (rh, rw): the tile's pixels with (hi+pt) % sh == rh, (wi+pl) % sw == rw,
#       a stride-1 correlation over the taps with kh*dh % sh == rh, kw*dw % sw == rw
#       zero the fp32 accumulator C[tileNL1][phase pixels]
#       for each K-L1 block (whole Cout channels x the phase's taps)
#         convert that block of dy, with a zero halo, into an fp32 frame (bf16 channel pairs for
#         the dot product); the A row of tap (qh, qw) is the frame shifted by (qh, qw)
#         for each M-L0 block, each K-L0 block, each register block of NR pixels:
#           (pack_a) copy the block's A rows out of the shifted frames into one k-major panel
#           for each N-L0 block: C[rows, block] += W panel * A rows   (register-blocked)
#       round C once to fp16/bf16 and store it, in vec-tile chunks
#
# The frame has the phase tile's width plus the halo. Packed, M positions are the tile's pixels;
# unpacked (few channel blocks), the kernels read the frame's rows and the halo columns are
# computed as M positions and never stored. The channel-vector kernels (_multiply_cv) take the
# tile's pixels only, broadcasting each from the frame at its offset (7 pixels x 32 channels, or
# 6 x 64 with the bf16 dot product where N-L1 blocks are whole 64-channel panels); the
# few-channel kernels (_multiply_few) read the frame's rows like the unpacked path. Each output
# element is summed over k = (co, tap) in ascending order (over (co pair, tap) pairs with the
# bf16 dot product) whatever the tiles and threads, so neither changes a bit.

from cpython.exc cimport PyErr_CheckSignals
from cython.parallel cimport parallel, prange, threadid
from libc.stdint cimport int64_t, uint16_t, uint32_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset

import time

from pypto._core.tiling import CPU_GROUP_PIXELS

cdef extern from "pypto_numeric.h" nogil:
    void pypto_widen(const uint16_t *src, float *dst, int64_t n, int dtype)
    void pypto_narrow(const float *src, uint16_t *dst, int64_t n, int dtype)
    uint16_t pypto_float_to_half(float f)
    float pypto_half_to_float(uint16_t h)
    float pypto_bf16_to_float(uint16_t h)
    void pypto_gather_f32(const float *src, int64_t stride, int64_t n, float *dst)
    void pypto_magnitudes(const uint16_t *x, int64_t n, uint16_t *least_minus_one,
                          uint16_t *most)
    int pypto_bf16_least_exponent(uint16_t least_minus_one)
    uint16_t pypto_float_to_bf16(float f)
    void pypto_frame_row_f32(const uint16_t *src, int64_t lo, int64_t hi, int64_t n, float *dst,
                              int dtype)
    void pypto_zero32(void *dst, int64_t n)
    void pypto_prefetch_row(const uint16_t *p, int64_t n, int for_write)
    void pypto_frame_row_pairs(const uint16_t *a, const uint16_t *b, int64_t lo, int64_t hi,
                                int64_t n, uint32_t *dst)

cdef extern from "pypto_gemm.h" nogil:
    enum: PYPTO_MR
    enum: PYPTO_NR
    enum: PYPTO_NR_HALF
    enum: PYPTO_NR_QUARTER
    enum: PYPTO_HAVE_BF16_DOT
    enum: PYPTO_HAVE_CHAN_VEC
    enum: PYPTO_HAVE_FEW
    enum: PYPTO_FEW_MR
    enum: PYPTO_FEW_NR
    enum: PYPTO_CV_M
    enum: PYPTO_CV_N
    enum: PYPTO_CV_STORE
    enum: PYPTO_HAVE_CV_WIDE
    enum: PYPTO_CVW_M
    enum: PYPTO_CVW_N
    const char *pypto_isa_name()
    void pypto_pack_a(int64_t kc, const void *const *a_rows, const int64_t *runs, int n_runs,
                      int64_t filled, uint32_t *a)
    void pypto_ukernel_f32(int64_t kc, const float *w, const float *const *a_rows, int64_t j0,
                           float *c, int64_t ldc)
    void pypto_ukernel_bf16(int64_t kc_pairs, const uint32_t *w, const uint32_t *const *a_rows,
                            int64_t j0, float *c, int64_t ldc)
    void pypto_ukernel_f32_half(int64_t kc, const float *w, const float *const *a_rows,
                                int64_t j0, float *c, int64_t ldc)
    void pypto_ukernel_bf16_half(int64_t kc_pairs, const uint32_t *w,
                                 const uint32_t *const *a_rows, int64_t j0, float *c, int64_t ldc)
    void pypto_ukernel_f32_quarter(int64_t kc, const float *w, const float *w_next,
                                   const float *const *a_rows, int64_t j0, float *c, int64_t ldc)
    void pypto_ukernel_few_f32(int64_t kc, const float *w, const float *const *a_rows, int64_t j0,
                               float *c, int64_t ldc)
    void pypto_ukernel_few_bf16(int64_t kc_pairs, const uint32_t *w,
                                const uint32_t *const *a_rows, int64_t j0, float *c, int64_t ldc)
    void pypto_ukernel_cv_f32(int64_t kc, const float *w, const float *const *a_rows,
                              const int64_t *offs, float *c, int64_t ldc, int first)
    void pypto_ukernel_cv_bf16(int64_t kc_pairs, const uint32_t *w, const uint32_t *const *a_rows,
                               const int64_t *offs, float *c, int64_t ldc, int first)
    void pypto_ukernel_cvw_bf16(int64_t kc_pairs, const uint32_t *w, const uint32_t *const *a_rows,
                                const int64_t *offs, float *c, int64_t ldc, int first)
    void pypto_cv_store_block(const float *acc, int64_t ldc, int n_pos, int n_ch, uint16_t *dst,
                              int64_t ch_stride, int64_t step, int dtype)

cdef extern from "pypto_peak.h" nogil:
    double pypto_peak_madd(int64_t iterations)
    double pypto_peak_bf16_dot(int64_t iterations)

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
HAS_CHAN_VEC = bool(PYPTO_HAVE_CHAN_VEC)
HAS_CV_WIDE = bool(PYPTO_HAVE_CV_WIDE)
HAS_FEW = bool(PYPTO_HAVE_FEW)


def openmp_enabled():
    """True when this module was built with OpenMP (else it runs on one thread)."""
    return bool(PYPTO_HAVE_OPENMP)


def scan_magnitudes(const uint16_t[::1] bits, int dtype, int num_threads=1):
    """(any Inf or NaN, least exponent of the nonzero values as bf16) of 16-bit patterns
    (``dtype``: 0 fp16, 1 bf16): the kernel's one pass over the weight (_magnitudes)."""
    cdef uint16_t least = 0xffff, most = 0
    if bits.shape[0] > 0:
        _magnitudes(&bits[0], bits.shape[0], num_threads, &least, &most)
    return most >= _all_ones_exponent(dtype), pypto_bf16_least_exponent(least)


cdef inline uint16_t _all_ones_exponent(int dtype) noexcept nogil:
    return 0x7f80 if dtype == 1 else 0x7c00


def peak_flops(str kind, int threads, int64_t iterations):
    """(flops, seconds) of the peak loop (pypto_peak.h) on ``threads`` threads at once, each
    doing ``iterations`` steps: kind "madd" (fp32 multiply-add at this level's widest vector) or
    "bf16_dot" (0 flops on levels without the bf16 dot product). The caller checks arguments."""
    cdef int use_dot = kind == "bf16_dot"
    cdef int t
    cdef double total = 0.0
    start = time.perf_counter()
    with nogil:
        for t in prange(threads, num_threads=threads, schedule="static", chunksize=1):
            total += pypto_peak_bf16_dot(iterations) if use_dot else pypto_peak_madd(iterations)
    return total, time.perf_counter() - start



cdef enum:
    FILL_AHEAD = 8      # the frame fill prefetches dy rows this many channels ahead
    PACK_BLOCK = 4096   # floats on the stack for one converted weight block (MR x Kh*Kw)
    MAX_RUNS = 32       # runs of frame positions in one register block: at most NR (<= 32)
    PACK_MIN_BLOCKS = 4 # pack A when at least this many channel blocks share each packed panel
    ALIGN = 16          # scratch parts start on 64 bytes (floats): whole cache lines, aligned loads


cdef struct Geometry:
    int64_t n_img, cin, cout, hin, win, hout, wout, kh, kw
    int64_t sh, sw, pt, pl, dh, dw
    int dtype, dot_bf16, pack_a
    # chan_vec: the channel-vector kernels (C rows are pixels, columns channels); few: the
    # few-channel kernels (4 rows x 64 positions); wb: channels per weight panel (PYPTO_CV_N or
    # PYPTO_CVW_N, PYPTO_FEW_MR or PYPTO_MR); m_block: positions per register block
    int chan_vec, few
    int64_t wb, m_block
    # tiles, clipped to the problem
    int64_t m_rows, m_cols, nl1, ml0, kl0, nl0, cout_l1
    int64_t nl1_pad, vec_c, vec_w
    int64_t n_blocks, row_tiles, col_tiles
    # images per work item (image group): > 1 only for small whole-image M tiles with chan_vec,
    # so that each weight block read from memory serves several images
    int64_t group, n_groups
    # per-thread scratch, in float-sized slots: packed A panel, accumulator, frame, A row pointers
    int64_t panel_len, panel_rows_len, acc_len, frame_len, rows_len, offs_len
    # phases: taps of phase p are tap_kh/kw[tap_first[p] : tap_first[p] + tap_count[p]]
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


cdef inline int64_t _k_len(const Geometry *g, int64_t ntaps) noexcept nogil:
    """Length of a phase's K axis in its weight panel: pairs of whole channel pairs for bf16."""
    return _round_up(g.cout, 2) * ntaps if g.dot_bf16 else g.cout * ntaps


cdef struct Frame:
    # the phase's pixels inside one M tile: rows hi0 + r*sh, columns wi0 + c*sw (r < rows, c < cols)
    int64_t hi0, wi0, rows, cols
    # frame of dy: rows ih0 - qh_max .., columns jw0 - qw_max .., pitch fc, fr rows per channel;
    # `images` frames of fr x fc (one per image of the group) per channel slot, `plane` apart
    int64_t ih0, jw0, qh_max, qw_max, fr, fc, images, plane
    # M positions: r*pitch + c; pixel (r, c) of A row k is at row k + r*fc + c in the frame.
    # Packed A and the channel-vector kernels: pitch = cols, the pixels only. Unpacked, the
    # kernels read the frame rows directly: pitch = fc, and the halo columns c >= cols are
    # computed and discarded. An image group's positions are its images' one after another
    # (image i's pixel (r, c) at frame row k + i*fr*fc + r*fc + c).
    int64_t pitch, positions, ldc


cdef bint _frame_for_phase(const Geometry *g, int64_t phase, int64_t h0, int64_t rows,
                           int64_t w0, int64_t cols, int64_t images, Frame *f) noexcept nogil:
    """The frame geometry of one phase of one M tile (of `images` images); False when the
    phase has no pixel there."""
    cdef int64_t rh = phase // g.sw, rw = phase - (phase // g.sw) * g.sw
    cdef int64_t t, qh, qw, qh_min = 0, qw_min = 0
    f.hi0 = h0 + ((rh - (h0 + g.pt) % g.sh) % g.sh + g.sh) % g.sh
    f.wi0 = w0 + ((rw - (w0 + g.pl) % g.sw) % g.sw + g.sw) % g.sw
    if f.hi0 >= h0 + rows or f.wi0 >= w0 + cols:
        return False
    f.rows = (h0 + rows - 1 - f.hi0) // g.sh + 1
    f.cols = (w0 + cols - 1 - f.wi0) // g.sw + 1
    f.ih0 = (f.hi0 + g.pt) // g.sh
    f.jw0 = (f.wi0 + g.pl) // g.sw
    f.qh_max = 0
    f.qw_max = 0
    for t in range(g.tap_first[phase], g.tap_first[phase] + g.tap_count[phase]):
        qh = (g.tap_kh[t] * g.dh) // g.sh
        qw = (g.tap_kw[t] * g.dw) // g.sw
        if t == g.tap_first[phase] or qh < qh_min:
            qh_min = qh
        if t == g.tap_first[phase] or qw < qw_min:
            qw_min = qw
        f.qh_max = _max(f.qh_max, qh)
        f.qw_max = _max(f.qw_max, qw)
    f.fr = f.rows + f.qh_max - qh_min
    f.fc = f.cols + f.qw_max - qw_min
    f.pitch = f.cols if g.pack_a or g.chan_vec else f.fc
    f.images = images
    f.plane = images * f.fr * f.fc
    f.positions = images * f.rows * f.pitch
    # accumulator: [channel][position] rows of ldc, or [position][channel] with chan_vec
    f.ldc = g.nl1_pad if g.chan_vec else _round_up(f.positions, g.m_block)
    return True


cdef void _fill_frame(const Geometry *g, const uint16_t *dy_img, const Frame *f,
                      int64_t co_first, int64_t co_count, void *frame) noexcept nogil:
    """dy channels co_first .. +co_count of the group's images as zero-haloed frames: fp32,
    or bf16 channel pairs."""
    cdef int64_t plane = f.plane, ch, row, ho, wo_first, lo, hi, co, image, dst
    cdef int64_t slots = (co_count + 1) // 2 if g.dot_bf16 else co_count
    cdef const uint16_t *src
    cdef const uint16_t *src2
    wo_first = f.jw0 - f.qw_max
    lo = _min(_max(-wo_first, 0), f.fc)
    hi = _max(_min(g.wout - wo_first, f.fc), lo)
    for ch in range(slots):
        for image in range(f.images):
            for row in range(f.fr):
                ho = f.ih0 - f.qh_max + row
                co = co_first + (2 * ch if g.dot_bf16 else ch)
                src = dy_img + ((image * g.cout + co) * g.hout + ho) * g.wout + wo_first
                dst = ch * plane + (image * f.fr + row) * f.fc
                if co + FILL_AHEAD < co_first + co_count and 0 <= ho < g.hout and hi > lo:
                    pypto_prefetch_row(src + FILL_AHEAD * g.hout * g.wout + lo, hi - lo, 0)
                if g.dot_bf16:
                    src2 = src + g.hout * g.wout if co + 1 < co_first + co_count else NULL
                    if ho < 0 or ho >= g.hout:
                        pypto_frame_row_pairs(src, src2, 0, 0, f.fc, <uint32_t *>frame + dst)
                    else:
                        pypto_frame_row_pairs(src, src2, lo, hi, f.fc, <uint32_t *>frame + dst)
                elif ho < 0 or ho >= g.hout:
                    pypto_frame_row_f32(src, 0, 0, f.fc, <float *>frame + dst, g.dtype)
                else:
                    pypto_frame_row_f32(src, lo, hi, f.fc, <float *>frame + dst, g.dtype)
    # reads past the last plane (discarded halo positions unpacked, the 8-element copies of
    # pypto_pack_a packed) stay on zeros
    memset(<float *>frame + slots * plane, 0, (f.fc + g.m_block) * sizeof(float))


cdef void _row_table(const Geometry *g, const Frame *f, int64_t phase, int64_t slots,
                     const void *frame, const void **rows) noexcept nogil:
    """rows[k] = where A row k (channel slot k // ntaps, the phase's tap k % ntaps) starts in
    the frame: the slot's plane shifted by the tap. The shifts are computed once per tap (their
    divisions per row were a quarter of the stem layer's time)."""
    cdef int64_t ntaps = g.tap_count[phase], plane = f.plane
    cdef int64_t slot, ti, tap
    for ti in range(ntaps):
        tap = g.tap_first[phase] + ti
        rows[ti] = <const float *>frame + (f.qh_max - (g.tap_kh[tap] * g.dh) // g.sh) * f.fc \
            + (f.qw_max - (g.tap_kw[tap] * g.dw) // g.sw)
    for slot in range(1, slots):
        for ti in range(ntaps):
            rows[slot * ntaps + ti] = <const float *>rows[ti] + slot * plane


cdef int _block_runs(const Frame *f, int64_t first, int64_t count, int64_t *runs) noexcept nogil:
    """Positions first .. first+count-1 as runs of consecutive frame positions (one per pixel
    row they touch), in pypto_pack_a's format; returns how many."""
    cdef int64_t p = first, r, c, length
    cdef int n = 0
    while p < first + count:
        r = p // f.cols
        c = p - r * f.cols
        length = _min(f.cols - c, first + count - p)
        runs[3 * n] = r * f.fc + c
        runs[3 * n + 1] = p - first
        runs[3 * n + 2] = length
        p += length
        n += 1
    return n


cdef void _multiply(const Geometry *g, const Frame *f, int64_t phase, int64_t c_first,
                    int64_t n_count1, int64_t k_first, int64_t k_count, const void **rows,
                    int64_t t0, int64_t t_count, float *acc, uint32_t *a_panel,
                    const void **panel_rows) noexcept nogil:
    """acc[ci][t0 ..] += sum_k W[ci][k] A[k][t0 ..] for one M-L0 x K-L0 block, N-L0 by N-L0.

    k counts channel pairs with the bf16 dot product (k_first, k_count in pairs). With g.pack_a
    each register block of A is first packed into a_panel (panel_rows[k] = its row k)."""
    cdef int64_t k_len = _k_len(g, g.tap_count[phase])
    cdef int64_t n0, n_end, cb, jb, j0, panel, filled
    cdef int64_t runs[3 * MAX_RUNS]
    cdef int n_runs
    cdef bint half, quarter
    cdef const void **a_rows = panel_rows if g.pack_a else rows
    cdef const float *w_f32
    # Register-width pixel blocks outside, channel blocks inside: one block of A (packed or
    # the frame's rows) stays in L1 while every channel's weight panel passes over it.
    jb = t0
    while jb < t0 + t_count:
        filled = _min(PYPTO_NR, t0 + t_count - jb)
        j0 = jb
        if g.pack_a:
            n_runs = _block_runs(f, jb, filled, runs)
            pypto_pack_a(k_count, rows, runs, n_runs, filled, a_panel)
            j0 = 0
        # a short last block needs only a narrower kernel (16 columns; 8 on AVX2, there on
        # two channel blocks at a time, where two remain in this N-L0 block)
        half = filled <= PYPTO_NR_HALF
        quarter = filled <= PYPTO_NR_QUARTER and PYPTO_NR_QUARTER < PYPTO_NR_HALF
        n0 = 0
        while n0 < n_count1:                                       # N-L0
            n_end = _min(n0 + g.nl0, n_count1)
            cb = n0
            while cb < n_end:                                      # MR channels at a time
                panel = g.w_offset[phase] + (c_first + cb) * k_len
                if g.dot_bf16:
                    (pypto_ukernel_bf16_half if half else pypto_ukernel_bf16)(
                        k_count, <const uint32_t *>g.w_packed + panel // 2 + k_first * PYPTO_MR,
                        <const uint32_t *const *>a_rows, j0, acc + cb * f.ldc + jb, f.ldc)
                    cb += PYPTO_MR
                    continue
                w_f32 = <const float *>g.w_packed + panel + k_first * PYPTO_MR
                if quarter and cb + PYPTO_MR < n_end:
                    pypto_ukernel_f32_quarter(k_count, w_f32, w_f32 + PYPTO_MR * k_len,
                                              <const float *const *>a_rows, j0,
                                              acc + cb * f.ldc + jb, f.ldc)
                    cb += 2 * PYPTO_MR
                    continue
                (pypto_ukernel_f32_half if half else pypto_ukernel_f32)(
                    k_count, w_f32, <const float *const *>a_rows, j0, acc + cb * f.ldc + jb,
                    f.ldc)
                cb += PYPTO_MR
            n0 = n_end
        jb += PYPTO_NR


cdef void _multiply_few(const Geometry *g, const Frame *f, int64_t phase, int64_t k_first,
                        int64_t k_count, const void **rows, int64_t t0, int64_t t_count,
                        float *acc) noexcept nogil:
    """_multiply with the few-channel kernels: every channel of the tile (at most 4: then the
    tile is all of Cin, c_first = 0) x 64 positions at a time, from the frame's rows."""
    cdef int64_t panel = g.w_offset[phase]
    cdef int64_t jb = t0
    while jb < t0 + t_count:
        if g.dot_bf16:
            pypto_ukernel_few_bf16(k_count, <const uint32_t *>g.w_packed + panel // 2
                                   + k_first * PYPTO_FEW_MR, <const uint32_t *const *>rows, jb,
                                   acc + jb, f.ldc)
        else:
            pypto_ukernel_few_f32(k_count, <const float *>g.w_packed + panel
                                  + k_first * PYPTO_FEW_MR, <const float *const *>rows, jb,
                                  acc + jb, f.ldc)
        jb += PYPTO_FEW_NR


cdef void _position_offsets(const Geometry *g, const Frame *f, int64_t *offs) noexcept nogil:
    """offs[t] = the frame offset of position t (image, row, column), for t up to the
    positions rounded up to g.m_block; the spare ones repeat the last position."""
    cdef int64_t per_image = f.rows * f.cols, t, p, image, r
    for t in range(_round_up(f.positions, g.m_block)):
        p = _min(t, f.positions - 1)
        image = p // per_image
        p -= image * per_image
        r = p // f.cols
        offs[t] = (image * f.fr + r) * f.fc + (p - r * f.cols)


cdef void _multiply_cv(const Geometry *g, const Frame *f, int64_t phase, int64_t c_first,
                       int64_t n_count1, int64_t k_first, int64_t k_count, const void **rows,
                       int64_t t0, int64_t t_count, float *acc,
                       const int64_t *offs, bint first) noexcept nogil:
    """_multiply with the channel-vector kernels: acc[t][ci] for g.m_block pixels x g.wb
    channels at a time (offs: _position_offsets; first: the accumulator's first k, which starts
    the sums at 0 instead of reading acc). A short last pixel block repeats its last pixel into
    the accumulator's spare rows (past the tile's positions: never written out)."""
    cdef int64_t k_len = _k_len(g, g.tap_count[phase])
    cdef int64_t nl0 = _round_up(g.nl0, g.wb)
    cdef int64_t n0, n_end, cb, pb, panel
    n0 = 0
    while n0 < n_count1:                                           # N-L0
        n_end = _min(n0 + nl0, n_count1)
        cb = n0
        while cb < n_end:            # g.wb channels: their weight panel stays in L1 ...
            panel = g.w_offset[phase] + (c_first + cb) * k_len
            pb = t0
            while pb < t0 + t_count:  # ... while the pixel blocks pass over it
                if g.wb == PYPTO_CVW_N:
                    pypto_ukernel_cvw_bf16(
                        k_count, <const uint32_t *>g.w_packed + panel // 2 + k_first * PYPTO_CVW_N,
                        <const uint32_t *const *>rows, offs + pb, acc + pb * f.ldc + cb, f.ldc,
                        first)
                elif g.dot_bf16:
                    pypto_ukernel_cv_bf16(
                        k_count, <const uint32_t *>g.w_packed + panel // 2 + k_first * PYPTO_CV_N,
                        <const uint32_t *const *>rows, offs + pb, acc + pb * f.ldc + cb, f.ldc,
                        first)
                else:
                    pypto_ukernel_cv_f32(
                        k_count, <const float *>g.w_packed + panel + k_first * PYPTO_CV_N,
                        <const float *const *>rows, offs + pb, acc + pb * f.ldc + cb, f.ldc,
                        first)
                pb += g.m_block
            cb += g.wb
        n0 = n_end


cdef void _write_out(const Geometry *g, const float *acc, uint16_t *dx_img, int64_t c_first,
                     int64_t n_count, const Frame *f) noexcept nogil:
    """Round the accumulator once and store its pixels in NCHW, in vec-tile chunks
    (vec_c channels x vec_w columns); halo positions are skipped."""
    cdef int64_t c_blk, c_end, ci, r, w_blk, w_len, j
    cdef const float *src
    cdef uint16_t *dst
    if g.chan_vec:
        _write_out_cv(g, acc, dx_img, c_first, n_count, f)
        return
    c_blk = 0
    while c_blk < n_count:
        c_end = _min(c_blk + g.vec_c, n_count)
        for r in range(f.rows):
            w_blk = 0
            while w_blk < f.cols:
                w_len = _min(g.vec_w, f.cols - w_blk)
                for ci in range(c_blk, c_end):
                    src = acc + ci * f.ldc + r * f.pitch + w_blk
                    dst = dx_img + ((c_first + ci) * g.hin + f.hi0 + r * g.sh) * g.win \
                        + f.wi0 + w_blk * g.sw
                    if g.sw == 1:
                        pypto_narrow(src, dst, w_len, g.dtype)
                    elif g.dtype == 1:
                        for j in range(w_len):
                            dst[j * g.sw] = pypto_float_to_bf16(src[j])
                    else:
                        for j in range(w_len):
                            dst[j * g.sw] = pypto_float_to_half(src[j])
                w_blk += w_len
        c_blk = c_end


cdef void _write_out_cv(const Geometry *g, const float *acc, uint16_t *dx_img, int64_t c_first,
                        int64_t n_count, const Frame *f) noexcept nogil:
    """_write_out for the channel-vector kernels' [position][channel] accumulator: each
    vec-tile chunk in blocks of PYPTO_CV_STORE columns x channels (16, AVX2 8), transposed in
    registers; the group's images one after another."""
    cdef int64_t image
    for image in range(f.images):
        _write_out_cv_image(g, acc + image * f.rows * f.cols * f.ldc,
                            dx_img + image * g.cin * g.hin * g.win, c_first, n_count, f)


cdef void _write_out_cv_image(const Geometry *g, const float *acc, uint16_t *dx_img,
                              int64_t c_first, int64_t n_count, const Frame *f) noexcept nogil:
    cdef int64_t c_blk, c_end, r, w_blk, w_end, cb, pb, ci, r_next, c_next, c_next_end
    cdef int64_t plane = g.hin * g.win
    cdef int64_t span = (f.cols - 1) * g.sw + 1   # a tile row's extent in an output row
    c_blk = 0
    while c_blk < n_count:
        c_end = _min(c_blk + g.vec_c, n_count)
        for r in range(f.rows):
            # the output rows of the next (chunk, row) step, for writing
            r_next, c_next, c_next_end = r + 1, c_blk, c_end
            if r_next == f.rows:
                r_next, c_next, c_next_end = 0, c_end, _min(c_end + g.vec_c, n_count)
            for ci in range(c_next, c_next_end):
                pypto_prefetch_row(dx_img + ((c_first + ci) * g.hin + f.hi0 + r_next * g.sh)
                                   * g.win + f.wi0, span, 1)
            w_blk = 0
            while w_blk < f.cols:
                w_end = _min(w_blk + g.vec_w, f.cols)
                cb = c_blk
                while cb < c_end:
                    pb = w_blk
                    while pb < w_end:
                        pypto_cv_store_block(
                            acc + (r * f.pitch + pb) * f.ldc + cb, f.ldc,
                            <int>_min(PYPTO_CV_STORE, w_end - pb),
                            <int>_min(PYPTO_CV_STORE, c_end - cb),
                            dx_img + ((c_first + cb) * g.hin + f.hi0 + r * g.sh) * g.win
                            + f.wi0 + pb * g.sw, plane, g.sw, g.dtype)
                        pb += PYPTO_CV_STORE
                    cb += PYPTO_CV_STORE
                w_blk = w_end
        c_blk = c_end


cdef void _work_item(const Geometry *g, int64_t item, const uint16_t *dy, uint16_t *dx,
                     float *scratch) noexcept nogil:
    """One (image group, N-L1 block, M-L1 tile): every output element of it, start to
    finish."""
    cdef int64_t tiles_per_img = g.n_blocks * g.row_tiles * g.col_tiles
    cdef int64_t img = (item // tiles_per_img) * g.group
    cdef int64_t images = _min(g.group, g.n_img - img)
    cdef int64_t rest = item - (item // tiles_per_img) * tiles_per_img
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
    cdef uint32_t *a_panel = <uint32_t *>scratch
    cdef const void **panel_rows = <const void **>(scratch + g.panel_len)
    cdef float *acc = scratch + g.panel_len + g.panel_rows_len
    cdef void *frame = <void *>(acc + g.acc_len)
    cdef const void **row_ptrs = <const void **>(acc + g.acc_len + g.frame_len)
    cdef int64_t *offs = <int64_t *>(acc + g.acc_len + g.frame_len + g.rows_len)
    cdef Frame f
    cdef int64_t phase, ntaps, co1, co_count, k1, k_count1, t0, t_count, k0, k_count
    cdef int64_t pair = 2 if g.dot_bf16 else 1
    cdef int64_t m_block = g.m_block
    if g.pack_a:
        for k0 in range(g.panel_rows_len // 2):
            panel_rows[k0] = a_panel + k0 * PYPTO_NR
    for phase in range(g.sh * g.sw):
        if not _frame_for_phase(g, phase, h0, rows, w0, cols, images, &f):
            continue
        ntaps = g.tap_count[phase]
        if g.chan_vec:
            _position_offsets(g, &f, offs)
            if ntaps == 0:   # otherwise the first k block starts the sums at 0 (no memset)
                memset(acc, 0, _round_up(f.positions, m_block) * f.ldc * sizeof(float))
        else:
            memset(acc, 0, g.nl1_pad * f.ldc * sizeof(float))
        co1 = 0
        while ntaps > 0 and co1 < g.cout:                          # K-L1: cout_l1 channels
            co_count = _min(g.cout_l1, g.cout - co1)
            _fill_frame(g, dy_img, &f, co1, co_count, frame)
            # this block's k (in pairs for bf16): channel slots x taps
            k1 = (co1 // pair) * ntaps
            k_count1 = ((co_count + pair - 1) // pair) * ntaps
            _row_table(g, &f, phase, k_count1 // ntaps, frame, row_ptrs)
            t0 = 0
            while t0 < f.positions:                                # M-L0
                # blocks start on the register width: a padded block must not reach into
                # the next one (each would add its products to the same positions)
                t_count = _min(_round_up(g.ml0, m_block), f.positions - t0)
                k0 = 0
                while k0 < k_count1:                               # K-L0
                    k_count = _min(_max(g.kl0 // pair, 1), k_count1 - k0)
                    if g.chan_vec:
                        _multiply_cv(g, &f, phase, c_first, n_count1, k1 + k0, k_count,
                                     row_ptrs + k0, t0, t_count, acc, offs,
                                     co1 == 0 and k0 == 0)
                    elif g.few:
                        _multiply_few(g, &f, phase, k1 + k0, k_count, row_ptrs + k0, t0,
                                      t_count, acc)
                    else:
                        _multiply(g, &f, phase, c_first, n_count1, k1 + k0, k_count,
                                  row_ptrs + k0, t0, t_count, acc, a_panel, panel_rows)
                    k0 += k_count
                t0 += t_count
            co1 += co_count
        _write_out(g, acc, dx_img, c_first, n_count1, &f)


cdef void _pack_weights(const Geometry *g, const uint16_t *w, int64_t co_begin,
                        int64_t co_end) noexcept nogil:
    """Weight panels of output channels co_begin .. co_end-1 (whole pairs with the bf16 dot
    product): every block of wb input channels (g.wb: PYPTO_MR, PYPTO_FEW_MR, or PYPTO_CV_N /
    PYPTO_CVW_N for the channel-vector kernels; zero rows past Cin) and every phase.

    fp32: panel[k][r] = w[co, cb+r, kh, kw] with k = co*ntaps + (the tap's index in its phase);
    bf16 pairs: panel[kp][r][co % 2] with kp = (co // 2)*ntaps + tap index. For each
    (co, channel block) the source is one contiguous wb x Kh*Kw block: a small transpose. The
    blocks are taken in memory order, channel after channel, so the hardware prefetcher streams
    the weight in (taken block column by block column, every pair's rows came as cache misses:
    12% of case e).
    """
    cdef int64_t phase, ntaps, co, ti, r, rows, first, base, k, tap_index, cb
    cdef int64_t taps = g.kh * g.kw
    cdef const uint16_t *src
    cdef const uint16_t *src2
    cdef float *dst_f
    cdef uint32_t *dst_pair
    cdef float widened[PACK_BLOCK]
    cdef int64_t wb = g.wb
    cdef int64_t cin_pad = _round_up(g.cin, wb)
    cdef bint block_fits = wb * taps <= PACK_BLOCK
    cdef int64_t step = 2 if g.dot_bf16 else 1
    co = co_begin
    while co < co_end:
        cb = 0
        while cb < cin_pad:
            rows = _min(wb, g.cin - cb)
            src = w + (co * g.cin + cb) * taps
            src2 = src + g.cin * taps
            if not g.dot_bf16 and block_fits:
                # the wb x Kh*Kw source block is contiguous: one vectorized conversion
                pypto_widen(src, widened, rows * taps, g.dtype)
            for phase in range(g.sh * g.sw):
                ntaps = g.tap_count[phase]
                first = g.tap_first[phase]
                base = g.w_offset[phase] + cb * _k_len(g, ntaps)
                for ti in range(ntaps):
                    tap_index = g.tap_kh[first + ti] * g.kw + g.tap_kw[first + ti]
                    if g.dot_bf16:
                        # one 32-bit store per (W[co], W[co+1]) pair
                        dst_pair = <uint32_t *>(<uint16_t *>g.w_packed + base) \
                            + ((co // 2) * ntaps + ti) * wb
                        if co + 1 < g.cout:
                            for r in range(rows):
                                dst_pair[r] = src[r * taps + tap_index] \
                                    | (<uint32_t>src2[r * taps + tap_index] << 16)
                        else:   # odd Cout: the last pair's partner is 0
                            for r in range(rows):
                                dst_pair[r] = src[r * taps + tap_index]
                        pypto_zero32(dst_pair + rows, wb - rows)
                        continue
                    k = co * ntaps + ti
                    dst_f = <float *>g.w_packed + base + k * wb
                    if block_fits:   # widened once per (co, channel block), above
                        pypto_gather_f32(widened + tap_index, taps, rows, dst_f)
                    else:
                        for r in range(rows):
                            pypto_widen(&src[r * taps + tap_index], &dst_f[r], 1, g.dtype)
                    pypto_zero32(dst_f + rows, wb - rows)
            cb += wb
        co += step
    # rows past Cin and the missing partner of an odd last channel are written as 0, so the
    # panels need no zeroed allocation (they are often the last call's buffer)


# The two large buffers of a call (weight panels, tile scratch) are kept for the next call: fresh
# memory from malloc is often fresh pages from the OS, and faulting them in and zeroing them cost
# up to a third of a call (case e, 4.7 MB of panels) when other work ran in between. A call takes
# a slot's buffer when it is large enough and frees it first when it is not (so no more than one
# call's worth is ever held), and gives it back at the end; buffers above KEEP_BYTES_MAX are not
# kept. Taken and given with the GIL held: concurrent calls each get their own.
cdef enum:
    KEEP_BYTES_MAX = 64 << 20
    SLOT_PANELS = 0
    SLOT_SCRATCH = 1

cdef void *_kept[2]
cdef size_t _kept_bytes[2]


cdef void *_take_buffer(int slot, size_t size, size_t *capacity):
    cdef void *p = _kept[slot]
    if p != NULL:
        _kept[slot] = NULL
        if _kept_bytes[slot] >= size:
            capacity[0] = _kept_bytes[slot]
            return p
        free(p)
    capacity[0] = size
    return malloc(size if size > 0 else 1)


cdef void _give_buffer(int slot, void *p, size_t capacity):
    if p == NULL:
        return
    if capacity > KEEP_BYTES_MAX or (_kept[slot] != NULL and _kept_bytes[slot] >= capacity):
        free(p)
        return
    free(_kept[slot])
    _kept[slot] = p
    _kept_bytes[slot] = capacity


def kept_buffer_bytes():
    """Bytes of kernel buffers kept for the next call."""
    return sum(_kept_bytes[i] for i in range(2) if _kept[i] != NULL)


def release_buffers():
    """Free the kernel buffers kept for the next call."""
    for i in range(2):
        free(_kept[i])
        _kept[i] = NULL


cdef void _magnitudes(const uint16_t *x, int64_t n, int num_threads, uint16_t *least,
                      uint16_t *most) noexcept:
    """pypto_magnitudes over n values, in parallel chunks (the weight and dy can be large)."""
    cdef int64_t chunk = 1 << 16, n_chunks = (n + chunk - 1) // chunk, i
    cdef int threads = <int>_max(1, _min(num_threads, n_chunks))
    cdef uint16_t *found = <uint16_t *>malloc(2 * n_chunks * sizeof(uint16_t))
    if found == NULL:
        pypto_magnitudes(x, n, least, most)
        return
    with nogil, parallel(num_threads=threads):
        for i in prange(n_chunks, schedule="static"):
            pypto_magnitudes(x + i * chunk, _min(chunk, n - i * chunk), &found[2 * i],
                             &found[2 * i + 1])
    least[0], most[0] = 0xffff, 0
    for i in range(n_chunks):
        least[0] = found[2 * i] if found[2 * i] < least[0] else least[0]
        most[0] = found[2 * i + 1] if found[2 * i + 1] > most[0] else most[0]
    free(found)


def dgrad(const uint16_t[:, :, :, ::1] dy, const uint16_t[:, :, :, ::1] w,
          uint16_t[:, :, :, ::1] dx, int dtype, tuple attrs, tuple tiles, tuple vec_cw,
          int num_threads, bint use_bf16_dot=True, bint use_chan_vec=True, bint use_few=True,
          bint use_wide=True):
    """dx = dgrad(dy, w); NCHW arrays of 16-bit patterns (``dtype``: 0 fp16, 1 bf16).

    attrs = (sh, sw, pt, pl, dh, dw); tiles = (m_rows, m_cols, nl1, kl1, ml0, kl0, nl0) from
    Tiling.kernel_tiles; vec_cw = (channels, columns) per write-out chunk. bf16 uses the
    dot-product micro-kernel when this build has one, ``use_bf16_dot`` is true and the data
    cannot produce subnormals. The channel-vector kernels serve tiles of whole blocks of 32
    input channels where the build has them and ``use_chan_vec`` is true (the same bits either
    way), and the few-channel kernels tiles of at most 4 channels (all of Cin) where the build
    has them and ``use_few`` is true; with the bf16 dot product, the wide channel-vector kernel
    (6 pixels x 64 channels) serves tiles of whole 64-channel blocks where ``use_wide`` is true.
    Returns the path taken: "bf16_dot" or "fp32", with "+chan_vec" (and "+wide") or "+few" when
    those served and "+group<G>" when work items held G images; or "non_finite", having written
    nothing, when the weight holds Inf or NaN (the caller's with_real_taps_only case).
    """
    cdef Geometry g
    cdef int64_t kl1
    cdef uint16_t w_least, w_most, dy_least, dy_most
    # The dimensions come from the buffers; the caller validated them, and this keeps a
    # disagreement between the three from ever becoming a write past dx.
    if dy.shape[0] != dx.shape[0] or w.shape[0] != dy.shape[1] or w.shape[1] != dx.shape[1]:
        raise ValueError(f"dgrad: buffer shapes disagree: dy N={dy.shape[0]} "
                         f"Cout={dy.shape[1]}, w Cout={w.shape[0]} Cin={w.shape[1]}, "
                         f"dx N={dx.shape[0]} Cin={dx.shape[1]}")
    # One pass over the weight: Inf/NaN (before anything else) and its least exponent.
    _magnitudes(&w[0, 0, 0, 0], w.size, num_threads, &w_least, &w_most)
    if w_most >= _all_ones_exponent(dtype):
        return "non_finite"
    g.n_img, g.cout, g.hout, g.wout = dy.shape[0], dy.shape[1], dy.shape[2], dy.shape[3]
    g.cin, g.kh, g.kw = w.shape[1], w.shape[2], w.shape[3]
    g.hin, g.win = dx.shape[2], dx.shape[3]
    g.sh, g.sw, g.pt, g.pl, g.dh, g.dw = attrs
    g.dtype = dtype
    g.dot_bf16 = dtype == 1 and PYPTO_HAVE_BF16_DOT and use_bf16_dot
    if g.dot_bf16:
        # the dot-product instruction flushes subnormals: use it only where none can occur
        _magnitudes(&dy[0, 0, 0, 0], dy.size, num_threads, &dy_least, &dy_most)
        g.dot_bf16 = (pypto_bf16_least_exponent(dy_least)
                      + pypto_bf16_least_exponent(w_least)) >= 142
    g.m_rows, g.m_cols, g.nl1, kl1, g.ml0, g.kl0, g.nl0 = tiles
    g.cout_l1 = kl1 // (g.kh * g.kw)
    g.vec_c, g.vec_w = vec_cw
    g.n_blocks = (g.cin + g.nl1 - 1) // g.nl1
    g.row_tiles = (g.hin + g.m_rows - 1) // g.m_rows
    g.col_tiles = (g.win + g.m_cols - 1) // g.m_cols
    # Channel-vector kernels where N-L1 blocks are whole PYPTO_CV_N-channel panels (32; AVX2 16)
    # or one block of all channels, and padding wastes at most 1/9 of the work: no halo, no A
    # packing and pixel blocks of 7 (AVX2 6) instead of 32 (small images).
    g.chan_vec = PYPTO_HAVE_CHAN_VEC and use_chan_vec \
        and (g.nl1 % PYPTO_CV_N == 0 or g.nl1 == g.cin) \
        and _round_up(g.nl1, PYPTO_CV_N) * 8 <= g.nl1 * 9
    # Few-channel kernels where the whole of Cin is at most 4 channels (the stem's 3).
    g.few = PYPTO_HAVE_FEW and use_few and not g.chan_vec and g.nl1 == g.cin \
        and g.cin <= PYPTO_FEW_MR
    g.wb = PYPTO_CV_N if g.chan_vec else (PYPTO_FEW_MR if g.few else PYPTO_MR)
    g.m_block = PYPTO_CV_M if g.chan_vec else (PYPTO_FEW_NR if g.few else PYPTO_NR)
    # The wide one (bf16 dot product, 6 pixels x 64 channels) where N-L1 blocks are whole
    # 64-channel panels.
    if g.chan_vec and g.dot_bf16 and PYPTO_HAVE_CV_WIDE and use_wide \
            and g.nl1 % PYPTO_CVW_N == 0:
        g.wb, g.m_block = PYPTO_CVW_N, PYPTO_CVW_M
    g.nl1_pad = _round_up(g.nl1, g.wb)
    # Image groups: small whole-image M tiles share work items, while at least two items per
    # thread remain. The same sums: only which images one weight read serves changes.
    g.group = 1
    if g.chan_vec and g.row_tiles == 1 and g.col_tiles == 1:
        g.group = _max(1, _min(g.n_img, <int64_t>CPU_GROUP_PIXELS // (g.m_rows * g.m_cols)))
        while g.group > 1 and (g.n_img + g.group - 1) // g.group * g.n_blocks < 2 * num_threads:
            g.group -= 1
    g.n_groups = (g.n_img + g.group - 1) // g.group

    # taps grouped by stride phase: tap (kh, kw) feeds phase (kh*dh % sh, kw*dw % sw).
    # Tables live in one C block (small calls: no NumPy objects to build).
    cdef int64_t n_phases = g.sh * g.sw
    cdef int64_t taps = g.kh * g.kw
    cdef int64_t cin_pad = _round_up(g.cin, g.wb)
    cdef int64_t phase, i, j, n_taps_seen = 0, panel_elems = 0, max_ntaps = 0
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
        max_ntaps = _max(max_ntaps, t_count[phase])
        w_off[phase] = panel_elems
        panel_elems += cin_pad * _k_len(&g, t_count[phase])
    g.tap_first, g.tap_count, g.w_offset, g.tap_kh, g.tap_kw = t_first, t_count, w_off, t_kh, t_kw

    # per-thread scratch, sized for the largest phase frame of any tile
    cdef int64_t rows_max = (g.m_rows + g.sh - 1) // g.sh
    cdef int64_t cols_max = (g.m_cols + g.sw - 1) // g.sw
    cdef int64_t fr_max = rows_max + ((g.kh - 1) * g.dh) // g.sh + 1
    cdef int64_t fc_max = cols_max + ((g.kw - 1) * g.dw) // g.sw + 1
    cdef int64_t slots = (g.cout_l1 + 1) // 2 if g.dot_bf16 else g.cout_l1
    cdef int64_t pair = 2 if g.dot_bf16 else 1
    # Packing A costs about one copy of a register block per k; it pays where enough channel
    # blocks reuse it (and saves the halo columns and unaligned reads of the frame's rows).
    g.pack_a = not g.chan_vec and not g.few and g.nl1_pad // PYPTO_MR >= PACK_MIN_BLOCKS
    cdef int64_t k_l0 = _max(g.kl0 // pair, 1)
    g.panel_len = _round_up(k_l0 * PYPTO_NR + 8, ALIGN) if g.pack_a else 0
    g.panel_rows_len = _round_up(2 * k_l0, ALIGN) if g.pack_a else 0   # pointers: two slots
    if g.chan_vec:
        g.acc_len = _round_up(_round_up(g.group * rows_max * cols_max, g.m_block) * g.nl1_pad,
                              ALIGN)
    else:
        g.acc_len = _round_up(g.nl1_pad * _round_up(rows_max * (cols_max if g.pack_a else fc_max),
                                                    g.m_block), ALIGN)
    g.frame_len = _round_up(slots * g.group * fr_max * fc_max + fc_max + g.m_block, ALIGN)
    g.rows_len = _round_up(2 * slots * max_ntaps, ALIGN)   # pointers are two float slots
    # channel-vector kernels: the positions' frame offsets (int64: two float slots)
    g.offs_len = 2 * _round_up(g.group * rows_max * cols_max, g.m_block) if g.chan_vec else 0
    cdef size_t panel_bytes = panel_elems * (sizeof(uint16_t) if g.dot_bf16 else sizeof(float))
    cdef size_t panel_capacity, scratch_capacity
    cdef void *w_packed = _take_buffer(SLOT_PANELS, panel_bytes, &panel_capacity)
    cdef int64_t n_items = g.n_groups * g.n_blocks * g.row_tiles * g.col_tiles
    cdef int threads = <int>_max(1, _min(num_threads, n_items))
    cdef int64_t per_thread = _round_up(g.panel_len + g.panel_rows_len + g.acc_len + g.frame_len
                                        + g.rows_len + g.offs_len, ALIGN)
    cdef char *scratch_block = <char *>_take_buffer(
        SLOT_SCRATCH, (threads * per_thread + ALIGN) * sizeof(float), &scratch_capacity)
    cdef float *scratch = <float *>(scratch_block
                                    + (-<size_t>scratch_block) % (ALIGN * sizeof(float)))
    cdef int64_t item, first, last, chunk, t
    # each thread packs a run of output channels (whole pairs with the dot product)
    cdef int64_t pack_step = ((g.cout + pair - 1) // pair + threads - 1) // threads * pair
    cdef const uint16_t *dy_p = &dy[0, 0, 0, 0]
    cdef const uint16_t *w_p = &w[0, 0, 0, 0]
    cdef uint16_t *dx_p = &dx[0, 0, 0, 0]
    try:
        if w_packed == NULL or scratch_block == NULL:
            raise MemoryError(f"pypto: no memory for the kernel's buffers ({panel_bytes} bytes of "
                              f"weight panels, {threads * per_thread * 4} bytes of tile scratch)")
        g.w_packed = w_packed
        with nogil, parallel(num_threads=threads):
            for t in prange(threads, schedule="static", chunksize=1):
                _pack_weights(&g, w_p, _min(t * pack_step, g.cout),
                              _min((t + 1) * pack_step, g.cout))
        # Work items go in chunks so that Ctrl-C is noticed between them: a signal only
        # reaches Python code, and a whole large call could run for minutes.
        chunk = max(8 * threads, 1)
        first = 0
        while first < n_items:
            last = _min(first + chunk, n_items)
            with nogil, parallel(num_threads=threads):
                for item in prange(first, last, schedule="dynamic"):
                    _work_item(&g, item, dy_p, dx_p, scratch + threadid() * per_thread)
            first = last
            PyErr_CheckSignals()
    finally:
        _give_buffer(SLOT_SCRATCH, scratch_block, scratch_capacity)
        _give_buffer(SLOT_PANELS, w_packed, panel_capacity)
        free(tables)
    return ("bf16_dot" if g.dot_bf16 else "fp32") + ("+chan_vec" if g.chan_vec else "") \
        + ("+wide" if g.chan_vec and g.wb == PYPTO_CVW_N else "") \
        + ("+few" if g.few else "") \
        + (f"+group{g.group}" if g.group > 1 else "")
