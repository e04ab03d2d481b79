# The loops of one work item (image group, N-L1 block, M-L1 tile): the stride-phase frame of dy,
# the A row tables, the three multiply variants (pixel-vector, few-channel, channel-vector) and
# the write-outs. The loop nest and the register-block shapes are described in README.md.

cdef enum:
    FILL_AHEAD = 8      # the frame fill prefetches dy rows this many channels ahead
    WRITE_AHEAD = 64    # the run write-out prefetches dx this many positions ahead
    MAX_RUNS = 32       # runs of frame positions in one register block: at most NR (<= 32)


cdef struct Frame:
    # the phase's pixels inside one M tile: rows hi0 + r*sh, columns wi0 + c*sw (r < rows, c < cols)
    int64_t hi0, wi0, rows, cols
    # frame of dy: rows ih0 - qh_max .., columns jw0 - qw_max .., pitch fc, fr rows per channel;
    # `images` frames of fr x fc (one per image of the group) per channel slot, `plane` apart
    int64_t ih0, jw0, qh_max, qw_max, fr, fc, images, plane
    # M positions: r*pitch + c (c*rows + r with g.col_major; the channel-vector kernels' class
    # order multiplies them in another order, _positions, and puts the accumulator rows back
    # in this one); pixel (r, c) of A row k is at row k + r*fc + c in the frame.
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
    f.ldc = _cv_ldc(g) if g.chan_vec else _round_up(f.positions, g.m_block)
    return True


cdef void _fill_frame(const Geometry *g, const uint16_t *dy_img, const Frame *f,
                      int64_t co_first, int64_t co_count, void *frame) noexcept nogil:
    """dy channels co_first .. +co_count of the group's images as zero-haloed frames: fp32,
    or bf16 channel pairs."""
    cdef int64_t ho, wo_first, lo, hi
    cdef int64_t slots = (co_count + 1) // 2 if g.dot_bf16 else co_count
    wo_first = f.jw0 - f.qw_max
    lo = _min(_max(-wo_first, 0), f.fc)
    hi = _max(_min(g.wout - wo_first, f.fc), lo)
    ho = f.ih0 - f.qh_max
    if wo_first == 0 and f.fc == g.wout and ho >= 0 and ho + f.fr <= g.hout:
        # no halo (1x1 layers): the frame's rows are whole dy rows, one after another, so each
        # plane is one copy of fr * fc, not fr short ones (7-pixel rows ran the copy's scalar
        # tail only)
        _fill_frame_rows(g, dy_img, f, co_first, co_count, slots, 1, f.fr * f.fc, 0, 0,
                         f.fr * f.fc, frame)
    else:
        _fill_frame_rows(g, dy_img, f, co_first, co_count, slots, f.fr, f.fc, wo_first, lo, hi,
                         frame)
    # reads past the last plane (discarded halo positions unpacked, the 8-element copies of
    # pypto_pack_a packed) stay on zeros
    memset(<float *>frame + slots * f.plane, 0, (f.fc + g.m_block) * sizeof(float))


cdef void _fill_frame_rows(const Geometry *g, const uint16_t *dy_img, const Frame *f,
                           int64_t co_first, int64_t co_count, int64_t slots, int64_t rows,
                           int64_t width, int64_t wo_first, int64_t lo, int64_t hi,
                           void *frame) noexcept nogil:
    """_fill_frame in copies of ``width`` elements, ``rows`` per image and channel slot, each
    with its zero halo outside [lo, hi): the frame's rows (rows = fr, width = fc), or whole
    planes where the rows are consecutive dy rows (rows = 1, width = fr * fc)."""
    cdef int64_t plane = f.plane, ch, row, ho, co, image, dst
    cdef const uint16_t *src
    cdef const uint16_t *src2
    for ch in range(slots):
        for image in range(f.images):
            for row in range(rows):
                ho = f.ih0 - f.qh_max + row
                co = co_first + (2 * ch if g.dot_bf16 else ch)
                src = dy_img + ((image * g.cout + co) * g.hout + ho) * g.wout + wo_first
                dst = ch * plane + (image * rows + row) * width
                if co + FILL_AHEAD < co_first + co_count and 0 <= ho < g.hout and hi > lo:
                    pypto_prefetch_row(src + FILL_AHEAD * g.hout * g.wout + lo, hi - lo, 0)
                if g.dot_bf16:
                    src2 = src + g.hout * g.wout if co + 1 < co_first + co_count else NULL
                    if ho < 0 or ho >= g.hout:
                        pypto_frame_row_pairs(src, src2, 0, 0, width, <uint32_t *>frame + dst)
                    else:
                        pypto_frame_row_pairs(src, src2, lo, hi, width, <uint32_t *>frame + dst)
                elif ho < 0 or ho >= g.hout:
                    pypto_frame_row_f32(src, 0, 0, width, <float *>frame + dst, g.dtype)
                else:
                    pypto_frame_row_f32(src, lo, hi, width, <float *>frame + dst, g.dtype)


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


cdef inline void _next_position(const Geometry *g, const Frame *f, int64_t *r, int64_t *c,
                                int64_t *image) noexcept nogil:
    """(r, c, image) of the position after (r, c, image): along the row, or down the column
    with g.col_major."""
    if g.col_major:
        r[0] += 1
        if r[0] == f.rows:
            r[0] = 0
            c[0] += 1
            if c[0] == f.cols:
                c[0] = 0
                image[0] += 1
    else:
        c[0] += 1
        if c[0] == f.cols:
            c[0] = 0
            r[0] += 1
            if r[0] == f.rows:
                r[0] = 0
                image[0] += 1


cdef inline uint64_t _axis_taps(int64_t at, const int64_t *q, int64_t ntaps,
                                int64_t size) noexcept nogil:
    """Bits of the taps (shifts q) whose dy row (or column) at - q lies in [0, size)."""
    cdef uint64_t bits = 0
    cdef int64_t ti
    for ti in range(ntaps):
        if 0 <= at - q[ti] < size:
            bits |= (<uint64_t>1) << ti
    return bits


cdef inline uint64_t _all_taps(int64_t ntaps) noexcept nogil:
    """The bits of all ntaps (<= 64) taps."""
    return ~(<uint64_t>0) if ntaps == 64 else ((<uint64_t>1) << ntaps) - 1


cdef inline uint64_t _pixel_taps(const Geometry *g, const Frame *f, int64_t r, int64_t c,
                                 const int64_t *qh, const int64_t *qw, int64_t ntaps,
                                 const int64_t *inner) noexcept nogil:
    """Bits of the taps that read a real dy value at tile pixel (r, c) (all 64 bits set inside
    ``inner``, rows [0], [1), columns [2], [3), where every tap does)."""
    cdef uint64_t bits = ~(<uint64_t>0)
    if not inner[0] <= r < inner[1]:
        bits &= _axis_taps(f.ih0 + r, qh, ntaps, g.hout)
    if not inner[2] <= c < inner[3]:
        bits &= _axis_taps(f.jw0 + c, qw, ntaps, g.wout)
    return bits


cdef struct Placing:
    # the next position to place, its pixel block, and its place in the block
    int64_t t, block, in_block


cdef inline void _place(const Geometry *g, const Frame *f, Placing *at, int64_t image,
                        int64_t r, int64_t c, int64_t *offs, bint skip, const int64_t *qh,
                        const int64_t *qw, int64_t ntaps, const int64_t *inner) noexcept nogil:
    """Class order's next position is pixel (r, c) of the group's image `image`: its frame
    offset, its accumulator row in row order and its block's tap mask."""
    cdef int64_t *nat = offs + g.pos_cap
    cdef uint64_t *masks = <uint64_t *>(nat + g.pos_cap)
    offs[at.t] = (image * f.fr + r) * f.fc + c
    nat[at.t] = (image * f.rows + r) * f.cols + c
    if skip:
        masks[at.block] |= _pixel_taps(g, f, r, c, qh, qw, ntaps, inner)
    at.t += 1
    at.in_block += 1
    if at.in_block == g.m_block:   # counters: a division per position cost more than the rest
        at.in_block = 0
        at.block += 1


cdef void _row_order(const Geometry *g, const Frame *f, int64_t *offs, bint skip,
                     const int64_t *qh, const int64_t *qw, int64_t ntaps,
                     const int64_t *inner) noexcept nogil:
    """_positions' tables in row order (column order with g.col_major), where a position's
    accumulator row is its index (not stored); with skip, the blocks' masks from zero. A block
    with one inner position computes every tap: the tap bits are worked out for border
    positions only, and each line's run of inner positions sets its blocks' masks whole (bits
    per position were 2% of the time of layers with few multiply-adds a position,
    Inception's Conv2d_2a)."""
    cdef uint64_t *masks = <uint64_t *>(offs + 2 * g.pos_cap)
    cdef int64_t t = 0, image, i, j, b, lo, hi
    cdef int64_t outer = f.cols if g.col_major else f.rows
    cdef int64_t inside = f.rows if g.col_major else f.cols
    # the inner lines, and the inner run [run_lo, run_hi) along an inner line
    cdef int64_t line_lo = inner[2] if g.col_major else inner[0]
    cdef int64_t line_hi = inner[3] if g.col_major else inner[1]
    cdef int64_t run_lo = _max(0, inner[0] if g.col_major else inner[2])
    cdef int64_t run_hi = _min(inside, inner[1] if g.col_major else inner[3])
    cdef uint64_t line_bits
    if skip:
        for b in range(_round_up(f.positions, g.m_block) // g.m_block):
            masks[b] = 0
    for image in range(f.images):
        for i in range(outer):
            if g.col_major:
                for j in range(inside):
                    offs[t + j] = (image * f.fr + j) * f.fc + i
            else:
                for j in range(inside):
                    offs[t + j] = (image * f.fr + i) * f.fc + j
            if skip:
                if line_lo <= i < line_hi:
                    lo, hi, line_bits = run_lo, run_hi, ~(<uint64_t>0)
                else:   # a border line: every position's bits
                    lo, hi = 0, 0
                    line_bits = _axis_taps(f.jw0 + i, qw, ntaps, g.wout) if g.col_major \
                        else _axis_taps(f.ih0 + i, qh, ntaps, g.hout)
                for j in range(inside):
                    if lo <= j < hi:
                        continue
                    masks[(t + j) // g.m_block] |= line_bits & (
                        _axis_taps(f.ih0 + j, qh, ntaps, g.hout) if g.col_major
                        else _axis_taps(f.jw0 + j, qw, ntaps, g.wout))
                if lo < hi:
                    for b in range((t + lo) // g.m_block, (t + hi - 1) // g.m_block + 1):
                        masks[b] = ~(<uint64_t>0)
            t += inside


cdef int64_t _skipped(const uint64_t *masks, int64_t blocks, int64_t ntaps) noexcept nogil:
    """Taps the pixel blocks skip, summed over the blocks (an inner block's mask has all 64
    bits set)."""
    cdef int64_t b, skipped = 0
    for b in range(blocks):
        skipped += ntaps - __builtin_popcountll(masks[b] & _all_taps(ntaps))
    return skipped


cdef bint _positions(const Geometry *g, const Frame *f, int64_t phase, int64_t n_count,
                     int64_t *offs) noexcept nogil:
    """The position tables of one phase of a tile: offs[t], the frame offset of position t;
    after them (g.pos_cap apart), in class order, its accumulator row in row order (in row
    order, t itself); then, per pixel block of g.m_block positions, the bits of the phase's
    taps that read a real dy value for at least one of its positions (the others read
    padding for all of them, and the channel-vector kernels skip them; computed where
    g.exact_zeros allows skipping). Positions run in row order (column order with
    g.col_major), or, with g.class_order, border rows first (row r of every image of the
    group, then the next border row), then the other rows' border columns, then the inner
    pixels, whose blocks compute every tap; class order is taken where the products it skips
    beyond row order's (for all Cout channels and the tile's n_count channels) outweigh
    putting the accumulator back in row order before the write-out (_unpermute:
    g.unpermute_macs per float moved). True when it is taken. Spare positions up to
    g.m_block repeat the last one (its row: never written out). The same tile and n_count
    give the same order in every K-L1 block."""
    cdef int64_t *nat = offs + g.pos_cap
    cdef uint64_t *masks = <uint64_t *>(nat + g.pos_cap)
    cdef int64_t ntaps = g.tap_count[phase]
    cdef int64_t qh[64]
    cdef int64_t qw[64]
    cdef int64_t inner[4]
    cdef int64_t t, ti, tap, image = 0, r = 0, c = 0, skipped = 0, border
    cdef int64_t blocks = _round_up(f.positions, g.m_block) // g.m_block
    cdef int64_t moved = g.unpermute_macs * f.positions * f.ldc
    cdef bint skip = 1 < ntaps <= 64 and g.exact_zeros
    cdef bint by_class = False
    cdef Placing at
    at.t = at.block = at.in_block = 0
    inner[0], inner[1], inner[2], inner[3] = 0, f.rows, 0, f.cols
    if skip:
        for ti in range(ntaps):
            tap = g.tap_first[phase] + ti
            qh[ti] = (g.tap_kh[tap] * g.dh) // g.sh
            qw[ti] = (g.tap_kw[tap] * g.dw) // g.sw
            # rows and columns where this tap reads a real value
            inner[0] = _max(inner[0], qh[ti] - f.ih0)
            inner[1] = _min(inner[1], g.hout + qh[ti] - f.ih0)
            inner[2] = _max(inner[2], qw[ti] - f.jw0)
            inner[3] = _min(inner[3], g.wout + qw[ti] - f.jw0)
        # positions outside the inner box; were each to skip every tap, would that outweigh
        # the move? (else class order is not even weighed: large images' row tiles)
        border = f.images * (f.rows * f.cols - _max(0, inner[1] - inner[0])
                             * _max(0, inner[3] - inner[2]))
        by_class = g.class_order and border > 0 \
            and border * ntaps * g.cout * n_count > moved
    _row_order(g, f, offs, skip, qh, qw, ntaps, inner)
    if by_class:   # weighed against row order's skips, counted from its masks
        skipped = _skipped(masks, blocks, ntaps)
        for t in range(blocks):
            masks[t] = 0
        for r in range(f.rows):                         # border rows, every image's together
            if not inner[0] <= r < inner[1]:
                for image in range(f.images):
                    for c in range(f.cols):
                        _place(g, f, &at, image, r, c, offs, skip, qh, qw, ntaps, inner)
        for c in range(f.cols):                         # the other rows' border columns
            if not inner[2] <= c < inner[3]:
                for image in range(f.images):
                    for r in range(inner[0], inner[1]):
                        _place(g, f, &at, image, r, c, offs, skip, qh, qw, ntaps, inner)
        for image in range(f.images):                   # inner pixels: every tap
            for r in range(inner[0], inner[1]):
                for c in range(inner[2], inner[3]):
                    _place(g, f, &at, image, r, c, offs, skip, qh, qw, ntaps, inner)
        # multiply-adds saved against floats moved back into row order
        by_class = (_skipped(masks, blocks, ntaps) - skipped) * g.m_block * g.cout * n_count \
            > moved
        if not by_class:   # row order's tables again
            _row_order(g, f, offs, skip, qh, qw, ntaps, inner)
    for t in range(f.positions, _round_up(f.positions, g.m_block)):
        offs[t] = offs[f.positions - 1]
    return by_class


cdef void _unpermute(const Geometry *g, const Frame *f, float *acc,
                     int64_t *offs) noexcept nogil:
    """Move the accumulator's rows from _positions' class order to row order, in place: each
    cycle of the permutation with one spare row (after the tables), a row's table entry
    marked (negative) once its row is in place."""
    cdef int64_t *nat = offs + g.pos_cap
    cdef float *spare = <float *>(<uint64_t *>(nat + g.pos_cap) + g.pos_cap // g.m_block)
    cdef int64_t s, t, d, j
    cdef float v
    for s in range(f.positions):
        if nat[s] < 0 or nat[s] == s:
            continue
        memcpy(spare, acc + s * f.ldc, f.ldc * sizeof(float))
        t = s
        while True:   # spare holds row t's values, which belong in row nat[t]
            d = nat[t]
            nat[t] = -1 - d
            if d == s:
                memcpy(acc + s * f.ldc, spare, f.ldc * sizeof(float))
                break
            for j in range(f.ldc):
                v = acc[d * f.ldc + j]
                acc[d * f.ldc + j] = spare[j]
                spare[j] = v
            t = d


cdef void _multiply_cv(const Geometry *g, const Frame *f, int64_t phase, int64_t c_first,
                       int64_t n_count1, int64_t k_first, int64_t k_count, const void **rows,
                       int64_t t0, int64_t t_count, float *acc,
                       const int64_t *offs, bint first) noexcept nogil:
    """_multiply with the channel-vector kernels: acc[t][ci] for g.m_block pixels x g.wb
    channels at a time (offs: _positions' tables; first: the accumulator's first k, which
    starts the sums at 0 instead of reading acc). A short last pixel block repeats its last
    pixel into the accumulator's spare rows (past the tile's positions: never written out).

    A pixel block skips the taps that read padding for all its pixels (_positions' masks):
    their products are zeros. Adding a zero leaves an fp32 sum as it was unless the sum is
    -0.0, and it never is here (g.exact_zeros): it starts at +0.0, and with fp16 (exact
    products, none below 2^-48) or bf16 whose least exponents of dy and w sum to at least 142
    (products and sums are multiples of 2^-126: nothing underflows or is flushed, on the dot
    product or the fp32 path) no sum rounds to -0.0. So the bits are those of the whole sum
    (bf16 with smaller values: no skipping; a product can underflow to -0.0)."""
    cdef int64_t k_len = _k_len(g, g.tap_count[phase])
    cdef int64_t nl0 = _round_up(g.nl0, g.wb)
    cdef int64_t n0, n_end, cb, pb, panel
    cdef bint half
    cdef int64_t ntaps = g.tap_count[phase]
    cdef const uint64_t *masks = <const uint64_t *>(offs + 2 * g.pos_cap)
    cdef uint64_t all_taps = 0
    cdef pypto_taps taps
    cdef const pypto_taps *use = NULL
    cdef bint skip = 1 < ntaps <= 64 and g.exact_zeros
    if skip:
        all_taps = _all_taps(ntaps)
        taps.first = k_first % ntaps
        taps.count = ntaps
    n0 = 0
    while n0 < n_count1:                                           # N-L0
        n_end = _min(n0 + nl0, n_count1)
        cb = n0
        while cb < n_end:            # g.wb channels: their weight panel stays in L1 ...
            panel = g.w_offset[phase] + (c_first + cb) * k_len
            # a last panel of at most 16 channels: the 16-channel kernels
            half = PYPTO_HAVE_CV_HALF and g.wb == PYPTO_CV_N and n_count1 - cb <= PYPTO_CV_N // 2
            pb = t0
            while pb < t0 + t_count:  # ... while the pixel blocks pass over it
                if skip:
                    taps.mask = masks[pb // g.m_block] & all_taps
                    use = &taps if taps.mask != all_taps else NULL
                if g.wb == PYPTO_CVW_N and not g.dot_bf16:
                    pypto_ukernel_cvw_f32(
                        k_count, <const float *>g.w_packed + panel + k_first * PYPTO_CVW_N,
                        <const float *const *>rows, offs + pb, acc + pb * f.ldc + cb, f.ldc,
                        first, use)
                elif g.wb == PYPTO_CVW_N:
                    pypto_ukernel_cvw_bf16(
                        k_count, <const uint32_t *>g.w_packed + panel // 2 + k_first * PYPTO_CVW_N,
                        <const uint32_t *const *>rows, offs + pb, acc + pb * f.ldc + cb, f.ldc,
                        first, use)
                elif g.dot_bf16:
                    (pypto_ukernel_cvh_bf16 if half else pypto_ukernel_cv_bf16)(
                        k_count, <const uint32_t *>g.w_packed + panel // 2 + k_first * PYPTO_CV_N,
                        <const uint32_t *const *>rows, offs + pb, acc + pb * f.ldc + cb, f.ldc,
                        first, use)
                else:
                    (pypto_ukernel_cvh_f32 if half else pypto_ukernel_cv_f32)(
                        k_count, <const float *>g.w_packed + panel + k_first * PYPTO_CV_N,
                        <const float *const *>rows, offs + pb, acc + pb * f.ldc + cb, f.ldc,
                        first, use)
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
        _write_out_cv(g, acc, dx_img, c_first, n_count, f, NULL, NULL)
        return
    # read once: the compiler reloaded each from g and f for every chunk (a chunk is one vector
    # of 16 where vec tiles are small: 160 a call of the spec example; 8% -> 6% of its kernel)
    cdef int64_t vec_c = g.vec_c, vec_w = g.vec_w, sw = g.sw, ldc = f.ldc, cols = f.cols
    cdef int64_t plane = g.hin * g.win
    cdef int dtype = g.dtype
    c_blk = 0
    while c_blk < n_count:
        c_end = _min(c_blk + vec_c, n_count)
        for r in range(f.rows):
            w_blk = 0
            while w_blk < cols:
                w_len = _min(vec_w, cols - w_blk)
                src = acc + c_blk * ldc + r * f.pitch + w_blk
                dst = dx_img + (c_first + c_blk) * plane + (f.hi0 + r * g.sh) * g.win \
                    + f.wi0 + w_blk * sw
                for ci in range(c_blk, c_end):
                    if sw == 1:
                        pypto_narrow(src, dst, w_len, dtype)
                    elif dtype == 1:
                        for j in range(w_len):
                            dst[j * sw] = pypto_float_to_bf16(src[j])
                    else:
                        for j in range(w_len):
                            dst[j * sw] = pypto_float_to_half(src[j])
                    src += ldc
                    dst += plane
                w_blk += w_len
        c_blk = c_end


cdef void _write_out_cv(const Geometry *g, const float *acc, uint16_t *dx_img, int64_t c_first,
                        int64_t n_count, const Frame *f, const float *acc_b,
                        const Frame *f_b) noexcept nogil:
    """_write_out for the channel-vector kernels' [position][channel] accumulator: each
    vec-tile chunk in blocks of PYPTO_CV_STORE (16) columns x channels, transposed in
    registers; the group's images one after another. With acc_b and f_b (not NULL), a second
    stride-2 phase of the same output rows, one column to the right, interleaved with the
    first (pypto_cv_store_pair)."""
    cdef int64_t image
    for image in range(f.images):
        _write_out_cv_image(g, acc + image * f.rows * f.cols * f.ldc,
                            dx_img + image * g.cin * g.hin * g.win, c_first, n_count, f,
                            acc_b + image * f_b.rows * f_b.cols * f_b.ldc if f_b else NULL, f_b)


cdef void _write_out_cv_image(const Geometry *g, const float *acc, uint16_t *dx_img,
                              int64_t c_first, int64_t n_count, const Frame *f,
                              const float *acc_b, const Frame *f_b) noexcept nogil:
    cdef int64_t c_blk, c_end, r, w_blk, w_end, cb, pb, ci, r_next, c_next, c_next_end
    cdef int64_t plane = g.hin * g.win
    # a tile row's extent in an output row
    cdef int64_t span = (f.cols - 1) * g.sw + 1 + (f_b != NULL)
    # accumulator rows from one row of the tile to the next, and from one column to the next
    cdef int64_t row_step = 1 if g.col_major else f.pitch
    cdef int64_t col_step = f.rows if g.col_major else 1
    cdef uint16_t *dst
    if g.sh == 1 and g.sw == 1 and f.cols == g.win and not g.col_major:
        _write_out_cv_run(g, acc, dx_img + f.hi0 * g.win, c_first, n_count, f.rows * f.cols)
        return
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
                        dst = dx_img + ((c_first + cb) * g.hin + f.hi0 + r * g.sh) * g.win \
                            + f.wi0 + pb * g.sw
                        if f_b != NULL:
                            pypto_cv_store_pair(
                                acc + (r * f.pitch + pb) * f.ldc + cb,
                                acc_b + (r * f_b.pitch + pb) * f.ldc + cb, f.ldc,
                                <int>_min(PYPTO_CV_STORE, w_end - pb),
                                <int>_max(0, _min(PYPTO_CV_STORE, _min(w_end, f_b.cols) - pb)),
                                <int>_min(PYPTO_CV_STORE, c_end - cb), dst, plane, g.dtype)
                        else:
                            pypto_cv_store_block(
                                acc + (r * row_step + pb * col_step) * f.ldc + cb,
                                col_step * f.ldc,
                                <int>_min(PYPTO_CV_STORE, w_end - pb),
                                <int>_min(PYPTO_CV_STORE, c_end - cb), dst, plane, g.sw,
                                g.dtype)
                        pb += PYPTO_CV_STORE
                    cb += PYPTO_CV_STORE
                w_blk = w_end
        c_blk = c_end


cdef void _write_out_cv_run(const Geometry *g, const float *acc, uint16_t *dx_run,
                            int64_t c_first, int64_t n_count, int64_t n) noexcept nogil:
    """_write_out_cv_image of a whole-width tile of a stride-1 layer: its rows follow each
    other in dx as in the accumulator, so each vec_c-channel chunk is one run of n positions a
    channel, stored PYPTO_CV_STORE at a time across row ends (a 17-wide row took a block of 16
    and one of 1, a 7-wide one a block of 16 lanes for 7: a fifth of the time of 1x1 layers on
    small images went to the write-out)."""
    cdef int64_t c_blk = 0, c_end, cb, pb, ci, ahead
    cdef int64_t plane = g.hin * g.win
    if g.stream:
        while c_blk < n_count:
            c_end = _min(c_blk + g.vec_c, n_count)
            cb = c_blk
            while cb < c_end:
                pypto_cv_stream_run(acc + cb, _cv_ldc(g), n,
                                    <int>_min(PYPTO_CV_STREAM_CH, c_end - cb),
                                    dx_run + (c_first + cb) * plane, plane, g.dtype)
                cb += PYPTO_CV_STREAM_CH
            c_blk = c_end
        pypto_stream_fence()
        return
    while c_blk < n_count:
        c_end = _min(c_blk + g.vec_c, n_count)
        pb = 0
        while pb < n:
            # the runs' lines WRITE_AHEAD positions on (the next chunk's first ones at the end):
            # plane-strided runs that hardware prefetchers miss (without, 1x1 layers' write-out
            # took twice as long)
            ahead = pb + WRITE_AHEAD
            if ahead < n:
                for ci in range(c_blk, c_end):
                    pypto_prefetch_row(dx_run + (c_first + ci) * plane + ahead, 1, 1)
            else:
                for ci in range(c_end, _min(c_end + g.vec_c, n_count)):
                    pypto_prefetch_row(dx_run + (c_first + ci) * plane + ahead - n, 1, 1)
            cb = c_blk
            while cb < c_end:
                pypto_cv_store_block(acc + pb * _cv_ldc(g) + cb, _cv_ldc(g),
                                     <int>_min(PYPTO_CV_STORE, n - pb),
                                     <int>_min(PYPTO_CV_STORE, c_end - cb),
                                     dx_run + (c_first + cb) * plane + pb, plane, 1, g.dtype)
                cb += PYPTO_CV_STORE
            pb += PYPTO_CV_STORE
        c_blk = c_end


cdef inline void _frame_share(Frame *f, int64_t top, int64_t left, int64_t fr,
                              int64_t fc) noexcept nogil:
    """f re-based on the frame of fr x fc dy positions from (top, left) that covers it: the one
    frame every phase of a tile reads (_row_table's shifts and the fill follow qh_max, qw_max)."""
    f.qh_max = f.ih0 - top
    f.qw_max = f.jw0 - left
    f.fr = fr
    f.fc = fc
    f.plane = f.images * fr * fc


cdef inline int64_t _acc_part(const Geometry *g, const Frame *f) noexcept nogil:
    """Floats of one phase's accumulator in the channel-vector kernels' per-phase parts."""
    return _round_up(f.positions, g.m_block) * f.ldc


cdef inline void _multiply_block(const Geometry *g, const Frame *f, int64_t phase,
                                 int64_t c_first, int64_t n_count1, int64_t co1,
                                 int64_t co_count, const void *frame, const void **row_ptrs,
                                 float *acc, const int64_t *offs, uint32_t *a_panel,
                                 const void **panel_rows) noexcept nogil:
    """acc += one K-L1 block (dy channels co1 .. +co_count, already in the frame) of one phase:
    the row table, then M-L0 x K-L0 blocks through the tile's kernel shape."""
    cdef int64_t pair = 2 if g.dot_bf16 else 1
    cdef int64_t ntaps = g.tap_count[phase]
    cdef int64_t t0, t_count, k0, k_count
    # this block's k (in pairs for bf16): channel slots x taps
    cdef int64_t k1 = (co1 // pair) * ntaps
    cdef int64_t k_count1 = ((co_count + pair - 1) // pair) * ntaps
    _row_table(g, f, phase, k_count1 // ntaps, frame, row_ptrs)
    t0 = 0
    while t0 < f.positions:                                        # M-L0
        # blocks start on the register width: a padded block must not reach into the next one
        # (each would add its products to the same positions)
        t_count = _min(_round_up(g.ml0, g.m_block), f.positions - t0)
        k0 = 0
        while k0 < k_count1:                                       # K-L0
            k_count = _min(_max(g.kl0 // pair, 1), k_count1 - k0)
            if g.chan_vec:
                _multiply_cv(g, f, phase, c_first, n_count1, k1 + k0, k_count, row_ptrs + k0,
                             t0, t_count, acc, offs, co1 == 0 and k0 == 0)
            elif g.few:
                _multiply_few(g, f, phase, k1 + k0, k_count, row_ptrs + k0, t0, t_count, acc)
            else:
                _multiply(g, f, phase, c_first, n_count1, k1 + k0, k_count, row_ptrs + k0, t0,
                          t_count, acc, a_panel, panel_rows)
            k0 += k_count
        t0 += t_count


cdef void _work_item(const Geometry *g, int64_t item, const uint16_t *dy, uint16_t *dx,
                     float *scratch) noexcept nogil:
    """One (image group, N-L1 block, M-L1 tile): every output element of it, start to
    finish, in the kernel's floating-point environment (pypto_fpenv.h) on this thread."""
    cdef pypto_fpenv saved = pypto_fp_enter()
    _work_item_in_env(g, item, dy, dx, scratch)
    pypto_fp_leave(saved)


cdef void _work_item_in_env(const Geometry *g, int64_t item, const uint16_t *dy, uint16_t *dx,
                            float *scratch) noexcept nogil:
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
    cdef int64_t phase, co1, co_count, k0
    if g.pack_a:
        for k0 in range(g.panel_rows_len // 2):
            panel_rows[k0] = a_panel + k0 * PYPTO_NR
    if g.chan_vec:
        _work_item_cv(g, images, h0, rows, w0, cols, c_first, n_count1, dy_img, dx_img, acc,
                      frame, row_ptrs, offs)
        return
    for phase in range(g.sh * g.sw):
        if g.tap_count[phase] == 0 \
                or not _frame_for_phase(g, phase, h0, rows, w0, cols, images, &f):
            continue
        memset(acc, 0, g.nl1_pad * f.ldc * sizeof(float))
        co1 = 0
        while co1 < g.cout:                                         # K-L1: cout_l1 channels
            co_count = _min(g.cout_l1, g.cout - co1)
            _fill_frame(g, dy_img, &f, co1, co_count, frame)
            _multiply_block(g, &f, phase, c_first, n_count1, co1, co_count, frame, row_ptrs,
                            acc, offs, a_panel, panel_rows)
            co1 += co_count
        _write_out(g, acc, dx_img, c_first, n_count1, &f)
    _write_zero_phases(g, h0, rows, w0, cols, images, dx_img, c_first, n_count1)


cdef void _write_zero_phases(const Geometry *g, int64_t h0, int64_t rows, int64_t w0,
                             int64_t cols, int64_t images, uint16_t *dx_img, int64_t c_first,
                             int64_t n_count) noexcept nogil:
    """dx of the tile's stride phases without taps (1x1/2: three of four): zeros, stored
    straight into dx. A row phase whose column phases all have none is zeroed across the
    tile's columns, one run a row; another phase without taps column by column. (They went
    through a zeroed accumulator and the write-out: 15-20% of a 1x1/2 layer.)"""
    cdef Frame f
    cdef int64_t phase, image, ci, r, rh, col0, n_cols, step
    cdef int64_t zeroed_rh = -1
    cdef uint16_t *plane
    for phase in range(g.sh * g.sw):
        rh = phase // g.sw
        if g.tap_count[phase] > 0 or rh == zeroed_rh \
                or not _frame_for_phase(g, phase, h0, rows, w0, cols, images, &f):
            continue
        col0, n_cols, step = f.wi0, f.cols, g.sw
        if _taps_in_row_phase(g, rh) == 0:   # every column of these rows: one run each
            col0, n_cols, step, zeroed_rh = w0, cols, 1, rh
        for image in range(f.images):
            for ci in range(n_count):
                plane = dx_img + (image * g.cin + c_first + ci) * g.hin * g.win
                for r in range(f.rows):
                    pypto_zero_every(plane + (f.hi0 + r * g.sh) * g.win + col0, n_cols, step)


cdef int64_t _taps_in_row_phase(const Geometry *g, int64_t rh) noexcept nogil:
    cdef int64_t rw, taps = 0
    for rw in range(g.sw):
        taps += g.tap_count[rh * g.sw + rw]
    return taps


cdef void _work_item_cv(const Geometry *g, int64_t images, int64_t h0, int64_t rows, int64_t w0,
                        int64_t cols, int64_t c_first, int64_t n_count1,
                        const uint16_t *dy_img, uint16_t *dx_img, float *acc, void *frame,
                        const void **row_ptrs, int64_t *offs) noexcept nogil:
    """_work_item with the channel-vector kernels: K-L1 blocks outside, the stride phases
    inside, each phase summing into its own part of the accumulator, so that all phases read
    one frame of the tile's dy rows, filled once per K-L1 block (a 3x3/2 layer filled the
    same rows into four frames: up to 17% of its time)."""
    cdef Frame f, f_b
    cdef int64_t n_phases = g.sh * g.sw
    cdef int64_t phase, co1, co_count, part, ch, cw, top = 0, left = 0, bottom = 0, right = 0
    cdef bint seen = False, filled, by_class = False
    # the frame that covers every phase with taps
    for phase in range(n_phases):
        if g.tap_count[phase] == 0 \
                or not _frame_for_phase(g, phase, h0, rows, w0, cols, images, &f):
            continue
        ch, cw = f.ih0 - f.qh_max, f.jw0 - f.qw_max   # the phase's own frame's corner
        if not seen:
            top, left, bottom, right, seen = ch, cw, ch + f.fr, cw + f.fc, True
        else:
            top, left = _min(top, ch), _min(left, cw)
            bottom, right = _max(bottom, ch + f.fr), _max(right, cw + f.fc)
    co1 = 0
    while seen and co1 < g.cout:                                   # K-L1: cout_l1 channels
        co_count = _min(g.cout_l1, g.cout - co1)
        filled = False
        part = 0
        for phase in range(n_phases):
            if g.tap_count[phase] == 0 \
                    or not _frame_for_phase(g, phase, h0, rows, w0, cols, images, &f):
                continue
            _frame_share(&f, top, left, bottom - top, right - left)
            if not filled:
                _fill_frame(g, dy_img, &f, co1, co_count, frame)
                filled = True
            # stride 1 (one phase): the tables of the first K-L1 block serve every block
            if co1 == 0 or n_phases > 1:
                by_class = _positions(g, &f, phase, n_count1, offs)
            _multiply_block(g, &f, phase, c_first, n_count1, co1, co_count, frame, row_ptrs,
                            acc + part, offs, NULL, NULL)
            part += _acc_part(g, &f)
        co1 += co_count
    if by_class:   # g.class_order: stride 1, one phase, its accumulator at acc
        _unpermute(g, &f, acc, offs)
    part = 0
    phase = 0
    while phase < n_phases:
        if g.tap_count[phase] > 0 \
                and _frame_for_phase(g, phase, h0, rows, w0, cols, images, &f):
            # column phases 0 and 1 of a stride-2 row phase fill the same output rows, every
            # other column each: written out together, each output line is stored once
            if PYPTO_HAVE_CV_PAIR and g.sw == 2 and phase % 2 == 0 \
                    and g.tap_count[phase + 1] > 0 \
                    and _frame_for_phase(g, phase + 1, h0, rows, w0, cols, images, &f_b):
                if f.wi0 < f_b.wi0:
                    _write_out_cv(g, acc + part, dx_img, c_first, n_count1, &f,
                                  acc + part + _acc_part(g, &f), &f_b)
                else:
                    _write_out_cv(g, acc + part + _acc_part(g, &f), dx_img, c_first, n_count1,
                                  &f_b, acc + part, &f)
                part += _acc_part(g, &f) + _acc_part(g, &f_b)
                phase += 2
                continue
            _write_out(g, acc + part, dx_img, c_first, n_count1, &f)
            part += _acc_part(g, &f)
        phase += 1
    _write_zero_phases(g, h0, rows, w0, cols, images, dx_img, c_first, n_count1)
