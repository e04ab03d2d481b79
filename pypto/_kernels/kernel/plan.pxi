# The plan of one call: the Geometry struct that every loop reads (problem, clipped tiles, the
# kernel shape chosen, tap tables, buffer sizes), _plan(), which fills it before anything is
# allocated, buffer_bytes() (what a call allocates, for the memory guard), integer helpers.

from pypto._core.tiling import CPU_GROUP_PIXELS

cdef enum:
    PACK_MIN_BLOCKS = 4  # pack A when at least this many channel blocks share each packed panel
    ALIGN = 16          # scratch parts start on 64 bytes (floats): whole cache lines, aligned loads


cdef struct Geometry:
    int64_t n_img, cin, cout, hin, win, hout, wout, kh, kw
    int64_t sh, sw, pt, pl, dh, dw
    int dtype, dot_bf16, pack_a
    # exact_zeros: no fp32 sum can be -0.0 (fp16; bf16 whose least exponents of dy and w sum to
    # at least 142), so the kernels may leave out products that are zeros (_multiply_cv)
    int exact_zeros
    # chan_vec: the channel-vector kernels (C rows are pixels, columns channels); few: the
    # few-channel kernels (4 rows x 64 positions); wb: channels per weight panel (PYPTO_CV_N or
    # PYPTO_CVW_N, PYPTO_FEW_MR or PYPTO_MR); m_block: positions per register block
    int chan_vec, few
    # stream: the run write-out stores dx's whole lines non-temporally (STREAM_BYTES)
    int stream
    # col_major: a tile's positions (and accumulator rows) column after column, not row after
    # row (1xN kernels: a pixel block then shares its column and the taps it can skip)
    int col_major
    # class_order: a tile's positions in classes of the taps they skip (border rows, border
    # columns, inner pixels), the accumulator put back in row order before the write-out
    # (KhxKw kernels, Kh and Kw > 1, stride 1: loops.pxi, _positions)
    int class_order
    int64_t wb, m_block
    # tiles, clipped to the problem
    int64_t m_rows, m_cols, nl1, ml0, kl0, nl0, cout_l1
    int64_t nl1_pad, vec_c, vec_w
    int64_t n_blocks, row_tiles, col_tiles
    # images per work item (image group): > 1 only for small whole-image M tiles with chan_vec,
    # so that each weight block read from memory serves several images
    int64_t group, n_groups
    # per-thread scratch, in float-sized slots: packed A panel, accumulator, frame, A row pointers
    # (and per_thread, all of them); work items, and the threads that run them
    int64_t panel_len, panel_rows_len, acc_len, frame_len, rows_len, offs_len, per_thread
    # positions a tile's phase may have, rounded up to m_block (the position tables' length)
    int64_t pos_cap
    # class order is taken where the multiply-adds it saves exceed this many per float of the
    # accumulator moved back into row order (UNPERMUTE_MACS; tests: -1, wherever it applies)
    int64_t unpermute_macs
    int64_t n_items
    int threads
    # phases: taps of phase p are tap_kh/kw[tap_first[p] : tap_first[p] + tap_count[p]]
    const int64_t *tap_first
    const int64_t *tap_count
    const int64_t *tap_kh
    const int64_t *tap_kw
    const int64_t *w_offset              # where phase p's weight panels start (elements)
    int64_t panel_elems                  # elements of all the weight panels
    const void *w_packed


cdef inline int64_t _min(int64_t a, int64_t b) noexcept nogil:
    return a if a < b else b


cdef inline int64_t _max(int64_t a, int64_t b) noexcept nogil:
    return a if a > b else b


cdef inline int64_t _round_up(int64_t a, int64_t b) noexcept nogil:
    return (a + b - 1) // b * b


cdef inline int64_t _cv_computed(int64_t channels) noexcept nogil:
    """The channels the channel-vector kernels compute for a block of ``channels``: whole
    PYPTO_CV_N-channel panels, the last one 16 wide where it holds at most 16, follows a whole
    one and the level has the half kernels (Cin 48 and 80, Inception's 5x5 and Conv2d_4a
    layers, ran on the pixel kernels at 184-191 GFLOP/s, 7 x 32 + 7 x 16 runs them at 209-218;
    a lone 16-channel block is no faster than on the pixel kernels, and a 1x1 one slower)."""
    cdef int64_t computed = _round_up(channels, PYPTO_CV_N)
    if PYPTO_HAVE_CV_HALF and channels > PYPTO_CV_N and computed - channels >= PYPTO_CV_N // 2:
        computed -= PYPTO_CV_N // 2
    return computed


cdef inline int64_t _cv_ldc(const Geometry *g) noexcept nogil:
    """Floats between the channel-vector accumulator's pixel rows: N-L1 padded, plus one
    cache line, so that the 16 rows the write-out transposes fall in 16 L1 sets (512 or 1024
    channels put them all in one or two: a quarter of the write-out's time)."""
    return g.nl1_pad + ALIGN


cdef inline int64_t _k_len(const Geometry *g, int64_t ntaps) noexcept nogil:
    """Length of a phase's K axis in its weight panel: pairs of whole channel pairs for bf16."""
    return _round_up(g.cout, 2) * ntaps if g.dot_bf16 else g.cout * ntaps


cdef enum:
    ITEMS_PER_THREAD = 4  # work items a thread should have, for dynamic scheduling to balance
    # channel-taps (N-L1 x Kh*Kw) up to which N-L1 blocks are merged: 2048 left 3x3 layers'
    # 128-channel blocks (1152) alone; 4608 takes them in pairs (1 thread, Zen 4, fp16:
    # ResNet-50 layer3 3x3 -3%, the 3x3 layers of four networks 0.2-1.6% in all; 9216: 0.2%
    # more)
    MERGE_TAPS = 4608
    ROW_HALO_SHARE = 4    # whole-width M tiles are merged up to this many times the halo rows
    ROW_MERGE_BYTES = 262144  # ... while the tile's fp32 accumulator stays within 256 KiB
    # loops.pxi, _positions: moving one float of the accumulator back into row order costs
    # about as much as this many multiply-adds (Zen 4: without the weighing, 8-row tiles of
    # Inception's 149-wide images, 32 channels, were 2-7% slower in class order)
    UNPERMUTE_MACS = 32
    # dx bytes from which several threads stream the run write-out (pypto_cv_stream_run):
    # 2 threads, Zen 4 (VM): 1x1 layers with 5-13 MB of dx -3% to +9% (layer2.k.conv1 -1..-3%,
    # layer2.0.conv1 +4..6%, Mixed_5d.branch1x1 +9%), and 1.4-1.9x in processes whose ordinary
    # write-out was slow (dx lines last written by the other core); 3.2-3.6 MB -5% to +2%. The
    # AVX2 level (same host): 5-13 MB +2% to +10%, 3.2-3.6 MB +-1%. Not with one thread: a
    # loop's dx stays in this core's caches between calls, 3-5% faster cached.
    STREAM_BYTES = 4194304


cdef int64_t _image_group(const Geometry *g, int num_threads, int64_t group_pixels) noexcept nogil:
    """Images per work item for small whole-image M tiles (up to group_pixels pixels), so that
    each weight block read from memory serves several images: the same sums, only which images
    one weight read serves changes. Groups of equal size (8 images as 4 + 4, not 7 + 1), at
    least ITEMS_PER_THREAD items a thread (else one image), and with a team the size whose
    items are spread best: dynamic scheduling of n items of up to s images each takes about
    ceil(n / threads) * s; the least of that, the largest group on a tie (8 images x 3 N-L1
    blocks at 2 threads: 4 groups of 2, 6 items a thread, not 3 + 3 + 2, whose 9 items took
    11% longer on Inception's Mixed_7c 1x3 layer)."""
    cdef int64_t top = _max(1, _min(g.n_img, group_pixels // (g.m_rows * g.m_cols)))
    cdef int64_t cap, size, groups, items, cost, best = 1, best_cost = -1
    for cap in range(top, 0, -1):
        groups = (g.n_img + cap - 1) // cap
        size = (g.n_img + groups - 1) // groups  # the largest of equal groups
        items = groups * g.n_blocks
        if size > 1 and items < ITEMS_PER_THREAD * num_threads:
            continue
        cost = (items + num_threads - 1) // num_threads * size if num_threads > 1 else 0
        if best_cost < 0 or cost < best_cost:
            best, best_cost = size, cost
    return best


cdef void _split_for_threads(Geometry *g, int num_threads) noexcept nogil:
    """Cut the NPU's M-L1 and N-L1 tiles finer where they give a team of ``num_threads`` fewer
    than ITEMS_PER_THREAD work items each: first whole-row M tiles into fewer rows (down to one
    row), then N-L1 blocks into fewer channels (whole panels of g.wb channels), then one-row
    tiles into column ranges (whole register blocks of g.m_block positions). Then balance the
    row tiles (28 rows in tiles of 9: 7+7+7+7, not 9+9+9+1). Before cutting, N-L1 blocks of
    few channel-taps and whole-width M tiles of few rows (against the kernel's halo rows) are
    merged while enough items remain. Every element is still summed over k in the same order
    by the same kernel shape: only which work item computes it changes, so no bit does. Image
    groups are left alone: they shrink for threads on their own (_plan)."""
    cdef int64_t want = ITEMS_PER_THREAD * num_threads
    cdef int64_t others, needed, size, merge
    # Few channel-taps per item (1x1 layers: N-L1 x 1; 3x3 layers' 128-channel blocks): the
    # frame fill, once per item and K-L1 block, is a large share of the item's work. Merge
    # whole N-L1 blocks up to MERGE_TAPS channel-taps, while ITEMS_PER_THREAD items a thread
    # remain.
    if g.nl1 % g.wb == 0 and g.nl1 < g.cin:
        others = g.n_groups * g.row_tiles * g.col_tiles
        merge = MERGE_TAPS // (g.nl1 * g.kh * g.kw)
        while merge > 1 and others * ((g.cin + merge * g.nl1 - 1) // (merge * g.nl1)) < want:
            merge -= 1
        if merge > 1:
            g.nl1 = _min(merge * g.nl1, _round_up(g.cin, g.wb))
            g.n_blocks = (g.cin + g.nl1 - 1) // g.nl1
    if g.nl1 % g.wb == 0 and g.nl1 < g.cin:  # blocks of equal panel counts: 96 + 64, not 128 + 32
        g.nl1 = ((g.cin + g.wb - 1) // g.wb + g.n_blocks - 1) // g.n_blocks * g.wb
    # Short whole-width M tiles of a tall kernel (the NPU's one-row tiles of large images): each
    # item fills m_rows + halo dy rows into its frame, so every dy row was converted 3 times for
    # a 3x3 kernel on one-row tiles (11% of Inception's Conv2d_2a). Merge whole rows up to
    # ROW_HALO_SHARE times the halo, within ROW_MERGE_BYTES of accumulator, while
    # ITEMS_PER_THREAD items a thread remain.
    cdef int64_t halo = (g.kh - 1) * g.dh
    if g.col_tiles == 1 and g.group == 1 and 0 < g.m_rows < ROW_HALO_SHARE * halo:
        others = g.n_groups * g.n_blocks
        size = _min(_min(ROW_HALO_SHARE * halo, g.hin),
                    ROW_MERGE_BYTES // (4 * g.win * _round_up(g.nl1, g.wb)))
        while size > g.m_rows and others * ((g.hin + size - 1) // size) < want:
            size -= 1
        if size > g.m_rows:
            g.m_rows = size
            g.row_tiles = (g.hin + g.m_rows - 1) // g.m_rows
    if num_threads > 1 and g.group == 1:
        others = g.n_groups * g.n_blocks * g.col_tiles
        if g.col_tiles == 1 and others * g.row_tiles < want:
            needed = (want + others - 1) // others
            g.m_rows = _min(g.m_rows, _max(1, g.hin // needed))
            g.row_tiles = (g.hin + g.m_rows - 1) // g.m_rows
        others = g.n_groups * g.row_tiles * g.col_tiles
        if others * g.n_blocks < want and g.nl1 > g.wb:
            needed = (want + others - 1) // others
            size = _max(g.wb, g.cin // needed // g.wb * g.wb)
            if size < g.nl1:
                g.nl1 = size
                g.n_blocks = (g.cin + g.nl1 - 1) // g.nl1
        others = g.n_groups * g.n_blocks * g.row_tiles
        if g.m_rows == 1 and others * g.col_tiles < want:
            needed = (want + others - 1) // others
            size = _max(g.m_block, g.win // needed // g.m_block * g.m_block)
            if size < g.m_cols:
                g.m_cols = size
                g.col_tiles = (g.win + g.m_cols - 1) // g.m_cols
    if g.m_rows > 1:  # whole rows: tiles of equal height
        g.row_tiles = (g.hin + g.m_rows - 1) // g.m_rows
        g.m_rows = (g.hin + g.row_tiles - 1) // g.row_tiles
    g.ml0 = _min(g.ml0, g.m_rows * g.m_cols)
    g.nl0 = _min(g.nl0, g.nl1)
    g.nl1_pad = _round_up(g.nl1, g.wb)


cdef inline int _threads_for(const Geometry *g, int num_threads,
                             int64_t serial_macs) noexcept nogil:
    """The threads to plan a call for: ``num_threads``, or 1 for a call of fewer than
    ``serial_macs`` multiply-adds (pypto_isa.h, PYPTO_SERIAL_MACS), which one thread finishes
    in a few microseconds. Such a call enters no parallel region, so the team's threads wait
    for the next larger call as they are (none ends or starts). Not a Geometry field: one
    more field there moved the large layers' time by 2% (2 threads, Intel)."""
    cdef int64_t dy_count = g.n_img * g.cout * g.hout * g.wout
    # dy's elements first: below serial_macs, times Cin x Kh x Kw (a weight's count) they
    # cannot overflow
    if dy_count < serial_macs and dy_count * (g.cin * g.kh * g.kw) < serial_macs:
        return 1
    return num_threads


cdef void _plan(Geometry *g, int num_threads, bint use_chan_vec, bint use_few, bint use_wide,
                int64_t group_pixels, int64_t *tables) noexcept nogil:
    """The rest of g for one call, from its problem, dtype, dot_bf16 and tiles: the kernel
    shape, image groups (up to group_pixels pixels: CPU_GROUP_PIXELS), tap tables (kept in
    ``tables``: 3*sh*sw + 2*Kh*Kw int64), A packing, the per-thread scratch parts, the panels'
    length, the work items and the threads."""
    cdef int64_t n_phases = g.sh * g.sw
    cdef int64_t taps = g.kh * g.kw
    g.n_blocks = (g.cin + g.nl1 - 1) // g.nl1
    g.row_tiles = (g.hin + g.m_rows - 1) // g.m_rows
    g.col_tiles = (g.win + g.m_cols - 1) // g.m_cols
    # Channel-vector kernels where N-L1 blocks are whole PYPTO_CV_N-channel panels (32; AVX2 16)
    # or one block of all channels, and padding wastes at most 1/9 of the work: no halo, no A
    # packing and pixel blocks of 7 (AVX2 6) instead of 32 (small images).
    # Not for wide stride-1 KhxKw tiles of long K where the level prefers the pixel kernels
    # (PYPTO_PIXEL_COLS, pypto_isa.h).
    g.chan_vec = PYPTO_HAVE_CHAN_VEC and use_chan_vec \
        and (g.nl1 % PYPTO_CV_N == 0 or g.nl1 == g.cin) \
        and _cv_computed(g.nl1) * 8 <= g.nl1 * 9 \
        and not (PYPTO_PIXEL_COLS and g.sh == 1 and g.sw == 1 and g.kh > 1 and g.kw > 1
                 and g.m_cols >= PYPTO_PIXEL_COLS and g.cout * taps >= PYPTO_PIXEL_K)
    # Few-channel kernels where the whole of Cin is at most 4 channels (the stem's 3).
    g.few = PYPTO_HAVE_FEW and use_few and not g.chan_vec and g.nl1 == g.cin \
        and g.cin <= PYPTO_FEW_MR
    g.wb = PYPTO_CV_N if g.chan_vec else (PYPTO_FEW_MR if g.few else PYPTO_MR)
    g.m_block = PYPTO_CV_M if g.chan_vec else (PYPTO_FEW_NR if g.few else PYPTO_NR)
    # The wide one (6 pixels x 64 channels: bf16 dot product, or fp32 on the avx512 level,
    # pypto_isa.h) where every N-L1 block is whole
    # 64-channel panels, the last one too: the 7 x 32 kernel is as fast, so a padded last
    # panel is lost work (Cin 288 in blocks of 128, the last padded from 32 to 64: 8% slower
    # than 7 x 32 on Inception's Mixed_6a 3x3/2 and its 1x1 layers into 288 channels).
    if g.chan_vec and (PYPTO_HAVE_CV_WIDE if g.dot_bf16 else PYPTO_HAVE_CV_WIDE_F32) \
            and use_wide and g.nl1 % PYPTO_CVW_N == 0 and g.cin % PYPTO_CVW_N == 0:
        g.wb, g.m_block = PYPTO_CVW_N, PYPTO_CVW_M
    g.nl1_pad = _round_up(g.nl1, g.wb)
    g.stream = 0  # dgrad() decides
    # 1xN kernels (Inception's 1x7 and 1x3): blocks of a row's consecutive pixels had every tap
    # in some pixel; down a column, a block skips the taps that read the left or right padding
    # (_multiply_cv). Stride 1 only (no paired column phases to write out).
    g.col_major = g.chan_vec and g.kh == 1 and g.kw > 1 and g.sh == 1 and g.sw == 1 \
        and g.exact_zeros
    # KhxKw kernels: in row order, a block at a row's end runs on into the next row (or image)
    # and computes every tap; in classes, blocks of one border row (all images' row r
    # together) or one border column skip its padding taps (8x8 images in groups of 4, 3x3:
    # 95% -> 87% of the taps computed, counted per block)
    g.class_order = g.chan_vec and g.kh > 1 and g.kw > 1 and g.sh == 1 and g.sw == 1 \
        and g.exact_zeros
    g.group = 1
    if g.chan_vec and g.row_tiles == 1 and g.col_tiles == 1:
        g.group = _image_group(g, num_threads, group_pixels)
    g.n_groups = (g.n_img + g.group - 1) // g.group
    _split_for_threads(g, num_threads)
    if g.chan_vec:
        # K-L0 for the CPU: each K-L0 block stores the accumulator and the next reads it back
        # (the same fp32 values: no bit changes), so take as much of the K-L1 block as keeps
        # the block's weight panel chunk (g.wb channels x K-L0) within PYPTO_CV_L0_BYTES (per
        # level, pypto_isa.h). Each pixel block reads the chunk once; on Zen 4, a 64-byte line
        # per 6-7 dot products from L2 kept up, and longer chunks store the accumulator less
        # often (24 KiB, an L1's worth, was 1-4% slower on every layer class tried there:
        # tools/layer_ab.py, issue 27's note); on Intel's avx512 level 24 KiB was faster
        g.kl0 = _max(g.kl0, _min(g.cout_l1 * g.kh * g.kw,
                                 PYPTO_CV_L0_BYTES // (g.wb * 4) * (2 if g.dot_bf16 else 1)))

    # taps grouped by stride phase: tap (kh, kw) feeds phase (kh*dh % sh, kw*dw % sw).
    # Tables live in one C block (small calls: no NumPy objects to build).
    cdef int64_t cin_pad = _round_up(g.cin, g.wb)
    cdef int64_t phase, i, j, n_taps_seen = 0, panel_elems = 0, max_ntaps = 0
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
        panel_elems += cin_pad * _k_len(g, t_count[phase])
    g.tap_first, g.tap_count, g.w_offset, g.tap_kh, g.tap_kw = t_first, t_count, w_off, t_kh, t_kw
    g.panel_elems = panel_elems

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
    cdef int64_t live = 0   # phases with taps
    for phase in range(n_phases):
        live += t_count[phase] > 0
    if g.chan_vec:
        # a part per stride phase with taps (loops.pxi, _work_item_cv)
        g.acc_len = _round_up(_max(live, 1) * _round_up(g.group * rows_max * cols_max, g.m_block)
                              * _cv_ldc(g), ALIGN)
    else:
        g.acc_len = _round_up(g.nl1_pad * _round_up(rows_max * (cols_max if g.pack_a else fc_max),
                                                    g.m_block), ALIGN)
    g.frame_len = _round_up(slots * g.group * fr_max * fc_max + fc_max + g.m_block, ALIGN)
    g.rows_len = _round_up(2 * slots * max_ntaps, ALIGN)   # pointers are two float slots
    # channel-vector kernels' position tables (_positions): frame offsets and accumulator rows
    # (int64: two float slots each), the blocks' tap masks (uint64), and one accumulator row
    # for _unpermute; sized alike whether or not a call's dy scan allows skipping
    g.pos_cap = _round_up(g.group * rows_max * cols_max, g.m_block) if g.chan_vec else 0
    g.offs_len = 4 * g.pos_cap + 2 * (g.pos_cap // g.m_block) + _cv_ldc(g) if g.chan_vec else 0
    g.per_thread = _round_up(g.panel_len + g.panel_rows_len + g.acc_len + g.frame_len
                             + g.rows_len + g.offs_len, ALIGN)
    g.n_items = g.n_groups * g.n_blocks * g.row_tiles * g.col_tiles
    # Every parallel region of every call runs the caller's whole team (a call below
    # _threads_for's serial_macs enters none), even with fewer items than threads: libgomp ends
    # the surplus threads when a smaller team starts and creates them again for the next larger
    # one (tens of microseconds a thread, several per call).
    g.threads = <int>_max(1, num_threads)


cdef inline size_t _panel_bytes(const Geometry *g) noexcept nogil:
    """Bytes of the weight panels: fp32, or bf16 pairs with the dot product."""
    return g.panel_elems * (sizeof(uint16_t) if g.dot_bf16 else sizeof(float))


cdef inline size_t _scratch_bytes(const Geometry *g) noexcept nogil:
    """Bytes of the tile scratch block: every thread's part, and room to align the first."""
    return (g.threads * g.per_thread + ALIGN) * sizeof(float)


cdef void _plan_of_tuples(Geometry *g, tuple dy_shape, tuple w_shape, tuple dx_shape, int dtype,
                          tuple attrs, tuple tiles, int num_threads, bint dot_bf16,
                          bint use_chan_vec, bint use_few, bint use_wide,
                          int64_t serial_macs=PYPTO_SERIAL_MACS) except *:
    """g planned from dispatch's tuples, as dgrad() plans it from its buffers: for the
    questions asked before a call (buffer_bytes, work_split). The tap tables are freed on
    return: only g's sizes and counts are read afterwards."""
    cdef int64_t kl1
    g.n_img, g.cout, g.hout, g.wout = dy_shape
    g.cin, g.kh, g.kw = w_shape[1], w_shape[2], w_shape[3]
    g.hin, g.win = dx_shape[2], dx_shape[3]
    g.sh, g.sw, g.pt, g.pl, g.dh, g.dw = attrs
    g.dtype = dtype
    g.dot_bf16 = dot_bf16
    g.exact_zeros = dtype == 0 or dot_bf16
    g.unpermute_macs = UNPERMUTE_MACS
    g.m_rows, g.m_cols, g.nl1, kl1, g.ml0, g.kl0, g.nl0 = tiles
    g.cout_l1 = kl1 // (g.kh * g.kw)
    cdef int64_t *tables = <int64_t *>malloc((3 * g.sh * g.sw + 2 * g.kh * g.kw)
                                             * sizeof(int64_t))
    if tables == NULL:
        raise MemoryError("pypto: no memory for the kernel's tap tables")
    _plan(g, _threads_for(g, num_threads, serial_macs), use_chan_vec, use_few, use_wide,
          CPU_GROUP_PIXELS, tables)
    free(tables)
    g.tap_first = g.tap_count = g.w_offset = g.tap_kh = g.tap_kw = NULL


def buffer_bytes(tuple dy_shape, tuple w_shape, tuple dx_shape, int dtype, tuple attrs,
                 tuple tiles, int num_threads, bint use_bf16_dot=True, bint use_chan_vec=True,
                 bint use_few=True, bint use_wide=True):
    """What dgrad() with these arguments allocates, from the same plan, as (shared, per_thread,
    threads): at most ``shared + threads * per_thread`` bytes, the weight panels, the copy of a
    small weight that says what they hold (buffers.pxi) and the scratch block's alignment slack
    plus each of its ``threads`` threads' tile scratch. Where the bf16
    dot product may serve (it is chosen after a scan of the data), the larger of the two plans.
    Per thread is largest with one thread: image groups only shrink as threads are added."""
    cdef Geometry g
    cdef size_t shared = 0, per_thread = 0
    cdef int dot
    for dot in range(2 if dtype == 1 and PYPTO_HAVE_BF16_DOT and use_bf16_dot else 1):
        _plan_of_tuples(&g, dy_shape, w_shape, dx_shape, dtype, attrs, tiles, num_threads, dot,
                        use_chan_vec, use_few, use_wide)
        shared = max(shared, _panel_bytes(&g) + ALIGN * sizeof(float))
        per_thread = max(per_thread, g.per_thread * sizeof(float))
    cdef int64_t w_count = g.cout * g.cin * g.kh * g.kw
    return shared + (w_count * sizeof(uint16_t) if _keeps_weight_copy(w_count) else 0), \
        per_thread, g.threads


def work_split(tuple dy_shape, tuple w_shape, tuple dx_shape, int dtype, tuple attrs,
               tuple tiles, int num_threads, bint dot_bf16=False,
               int64_t serial_macs=PYPTO_SERIAL_MACS):
    """How dgrad() with these arguments cuts its work for ``num_threads`` threads, from the
    same plan: a dict of the work items and what makes them (image groups, N-L1 blocks and
    their channels, row and column tiles and the rows of each; ``threads``: 1 below
    ``serial_macs`` multiply-adds, as dgrad())."""
    cdef Geometry g
    _plan_of_tuples(&g, dy_shape, w_shape, dx_shape, dtype, attrs, tiles, num_threads,
                    dot_bf16 and dtype == 1 and PYPTO_HAVE_BF16_DOT, True, True, True,
                    serial_macs)
    return {"items": g.n_items, "group": g.group, "n_blocks": g.n_blocks, "nl1": g.nl1,
            "row_tiles": g.row_tiles, "m_rows": g.m_rows, "col_tiles": g.col_tiles,
            "m_cols": g.m_cols, "threads": g.threads, "chan_vec": bool(g.chan_vec),
            "panel_channels": g.wb, "block_positions": g.m_block}
