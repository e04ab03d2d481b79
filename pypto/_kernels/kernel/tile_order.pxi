# sum_order "tile" (bf16): dgrad summed in the order of AMX's TDPBF16PS (pypto_tile.h says the
# order), on the tile unit where this level has one and the caller allows it, else emulated in
# IEEE fp32 with the same bits. One work item = (a block of input channels, 32 on the tile unit
# and 128 emulated; stride phase; a run of 16-position tiles of the phase's rows, images one
# after another; smaller for a team with few items); each C tile runs every K step (co block,
# tap) before its one rounding, so no sum depends on the threads or items.
# Images go in waves: a wave's dy frames are filled, then its items run, so the frames are
# read while a cache still holds them (a call's frames at once: 1x1 layers of many channels
# spent a third of their time writing and reading them from memory); on a team each thread
# fills a band of them and runs that band's items first (_tile_wave_banded).

cdef extern from "pypto_tile.h" nogil:
    enum: PYPTO_TILE_CH
    enum: PYPTO_TILE_PX
    enum: PYPTO_TILE_K
    enum: PYPTO_TILE_ITEM_TILES
    enum: PYPTO_TILE_ITEM_C
    enum: PYPTO_AMX_ITEM_CH
    enum: PYPTO_EMU_ITEM_CH
    enum: PYPTO_TILE_C_BYTES
    enum: PYPTO_TILE_FORM_AMX
    enum: PYPTO_TILE_FORM_F32
    enum: PYPTO_TILE_FORM_DOT
    enum: PYPTO_TILE_DENSE_FAST
    enum: PYPTO_TILE_LANES
    enum: PYPTO_TILE_READ_SLACK
    enum: PYPTO_TV_FUSED
    void pypto_tile_pack(const uint16_t *w, int64_t cout, int64_t cin, int64_t taps, int64_t cb,
                         int form, void *dst)
    void pypto_tile_pair_channels(const uint16_t *dy, int64_t cout, int form, int64_t b,
                                  int64_t k, int64_t area, const uint16_t **low,
                                  const uint16_t **high)
    void pypto_tile_pair_row(const uint16_t *l, const uint16_t *u, int64_t n, uint32_t *row)
    void pypto_tile_fill_images(const uint16_t *const *low, const uint16_t *const *high,
                                int64_t images, int64_t p0, int64_t p1, uint32_t *plane)
    void pypto_tile_frame_rows(const uint16_t *dy, int64_t cout, int form, int64_t b, int64_t k,
                               int64_t hout, int64_t wout, int64_t top, int64_t left,
                               int64_t wf, int64_t r0, int64_t r1, uint32_t *plane)
    void pypto_tile_frame_block(const uint16_t *dy, int64_t cout, int64_t b, int64_t hout,
                                int64_t wout, int64_t top, int64_t left, int64_t hf, int64_t wf,
                                uint16_t *block)
    ctypedef struct pypto_tile_runs:
        int n[PYPTO_TILE_ITEM_TILES]
        int x[PYPTO_TILE_ITEM_TILES][PYPTO_TILE_PX]
        int len[PYPTO_TILE_ITEM_TILES][PYPTO_TILE_PX]
        const uint32_t *src[PYPTO_TILE_ITEM_TILES][PYPTO_TILE_PX]
    enum: PYPTO_TILE_NOWHERE
    ctypedef struct pypto_tile_lanes:
        int32_t row[PYPTO_TILE_ITEM_TILES][PYPTO_TILE_PX]
        int32_t col[PYPTO_TILE_ITEM_TILES][PYPTO_TILE_PX]
        int32_t rows, cols
        const int64_t *tap_row
        const int64_t *tap_col
    void pypto_tile_run_emulated(const void *const *a, int n_ch, int last_rows, int item_ch,
                                 const uint32_t *const *b,
                                 const pypto_tile_runs *runs, const pypto_tile_lanes *lanes,
                                 int n_tiles, int64_t blocks,
                                 int64_t taps,
                                 const int64_t *tap_index, const int64_t *tap_offset,
                                 int64_t n_taps, int64_t plane, float *c, float *scratch,
                                 int form, int exact, int64_t cout)
    void pypto_amx_begin()
    void pypto_amx_end()
    void pypto_tile_run_amx(const uint16_t *const *a, int n_ch, const uint32_t *const *b,
                            int n_tiles, int64_t blocks, int64_t taps, const int64_t *tap_index,
                            const int64_t *tap_offset, int64_t n_taps, int64_t plane, float *c)
    float *pypto_tile_c_slot(float *c, int t, int ch, int item_ch)
    void pypto_tile_write(const float *c, int64_t n_ch, int64_t q0, int64_t wf, int64_t cols,
                          int64_t rows, uint16_t *dst, int64_t row_step, int64_t col_step,
                          int64_t ch_stride)
    enum: PYPTO_TILE_LANE_IMAGES
    void pypto_tile_write_interleaved(float *c, int c_ch, int n_ch, int64_t cin_left,
                                      int n_tiles, int64_t at, int64_t stop, int64_t images,
                                      int64_t n0, uint16_t *dx, int64_t area, int64_t image_stride)
    void pypto_tile_write_pair(const float *c0, const float *c1, int64_t n_ch, int64_t q0,
                               int64_t wf, int64_t win, int64_t rows, uint16_t *dst,
                               int64_t row_step, int64_t ch_stride)

cdef extern from "pypto_isa.h" nogil:
    enum: PYPTO_HAVE_AMX

HAS_AMX = bool(PYPTO_HAVE_AMX)
TILE_THREAD_BYTES = PYPTO_TILE_C_BYTES   # a team thread's C buffer, in the call's scratch
DENSE_FAST = bool(PYPTO_TILE_DENSE_FAST)   # the emulation may take dense positions here
LANES = bool(PYPTO_TILE_LANES)             # ... and flat frames with masked lanes



cdef struct TileGeometry:
    int64_t n_img, cout, cin, hout, wout, hin, win, kh, kw, sh, sw, pt, pl, dh, dw
    int64_t taps, blocks, ch_tiles, top, left, hf, wf, plane, pairs
    int64_t *rows          # per phase: rows and columns of the phase's pixel grid
    int64_t *cols
    int64_t *tiles         # 16-position tiles of one image's phase rows at the frame's width
    int64_t *n_taps        # per phase: its taps, ascending, and each tap's frame offset
    int64_t *tap_index     # [phase * taps + i]
    int64_t *tap_offset
    int64_t *tap_row       # the tap's dy row and column of the phase's pixel (0, 0)
    int64_t *tap_col
    int64_t *items         # per work item: channel block, phase, first tile (of all images)
    int64_t n_items
    bint paired            # stride 2 across: an item's phase is a row phase, both columns
    bint dense             # emulation: items over dense positions (pypto_tile_runs)
    bint flat              # dense, and a wave's frames plane-major: no gathers (_tile_geometry)
    bint masked            # flat, and a tap may read outside an image: lane masks
    bint interleaved       # masked, and the wave's images inside each position (_choose_lanes)
    int64_t lane_images    # interleaved: the images of the wave that runs now
    int64_t wave_plane     # positions of a wave's pair plane: its images' planes, or (flat) one
    int64_t item_ch        # channel tiles of an item's channel block (pypto_tile.h)
    bint write_by_channel  # an item's write-out a channel tile at a time (else tile by tile)
    int64_t ch_blocks      # channel blocks: ch_tiles / item_ch, rounded up
    int64_t item_tiles, item_phases
    bint idle_phases       # an item phase has no taps: no items; its dx zeroed (_tile_zero_plane)
    int64_t wave, n_waves  # images per wave; waves
    int64_t *wave_items    # wave w's items: wave_items[w] .. wave_items[w + 1] - 1
    int64_t bands          # the emulation on a team: its threads' shares of a wave's frames
    int64_t *band_items    # band b of wave w: items band_items[w * bands + b] .. (+ 1) - 1
    int64_t *band_next     # per band: its next item not yet taken (_tile_next_item)
    int64_t *band_state    # per band: BAND_FREE, BAND_FILLING, BAND_FILLED (_tile_wave_banded)
    bint local_bands       # a band's items read only the frames of its own band
    int use_amx, exact
    int form               # PYPTO_TILE_FORM_*: the weight's and the frames' layout (pypto_tile.h)
    const void *w_packed   # per 16-channel block: [co block][tap][16][32], bf16 or fp32
    int64_t w_block_elems
    int64_t slack          # bytes before and after the frames that a load may read
    float *c_items         # per team thread, its items' C (PYPTO_TILE_C_BYTES apart)
    uint32_t *frames       # per image of a wave: pairs planes of hf x wf (flat: per pair
                           # plane, the wave's images' hout x wout one after another)


# the emulation takes dense positions (pypto_tile_runs) where frame positions would drop more
# than this share: a dense tile's B operand is a masked load a run, not one load
cdef double DENSE_WASTE = 0.05

cdef enum:
    WAVE_FRAME_BYTES = 1 << 20   # a thread's share of a wave's frames: what its L2 keeps
    WRITE_PAGES = 32             # 4 KiB pages an item's write-out may hold open tile by tile
    WAVE_ITEMS = 4               # a thread's items in a wave, at least
    BAND_FREE = 0                # a band's fill: not claimed, claimed, done (_tile_wave_banded)
    BAND_FILLING = 1
    BAND_FILLED = 2


cdef int _tile_geometry(TileGeometry *g, tuple shapes, tuple attrs, int threads,
                        int lane_order=-1) except -1:
    """The phases, taps, frame halo, waves and work items of a call in the data form g.form
    for a team of ``threads`` (0: every image in one wave; tables malloc'ed, freed by
    _tile_free); ``lane_order``: _choose_lanes's (below 0: its own choice)."""
    cdef int64_t ph, rh, rw, kh, kw, x, o, n_phases, t, i, n, cb, tiles, first, last, wv, step
    cdef int64_t band
    cdef int64_t per_image, image_items
    cdef bint inside
    (g.n_img, g.cout, g.hout, g.wout), (_, g.cin, g.kh, g.kw), (_, _, g.hin, g.win) = shapes
    g.sh, g.sw, g.pt, g.pl, g.dh, g.dw = attrs
    g.taps = g.kh * g.kw
    g.blocks = (g.cout + PYPTO_TILE_K - 1) // PYPTO_TILE_K
    g.pairs = g.blocks * (PYPTO_TILE_K // 2)
    g.ch_tiles = (g.cin + PYPTO_TILE_CH - 1) // PYPTO_TILE_CH
    n_phases = g.sh * g.sw
    g.rows = <int64_t *>malloc((4 * n_phases + 4 * n_phases * g.taps) * sizeof(int64_t))
    if g.rows == NULL:
        raise MemoryError("pypto: no memory for the tile order's phase tables")
    g.cols, g.tiles, g.n_taps = g.rows + n_phases, g.rows + 2 * n_phases, g.rows + 3 * n_phases
    g.tap_index = g.rows + 4 * n_phases
    g.tap_offset = g.tap_index + n_phases * g.taps
    g.tap_row = g.tap_offset + n_phases * g.taps
    g.tap_col = g.tap_row + n_phases * g.taps
    # the halo: every row and column a tap of a phase reads for its pixels
    cdef int64_t top = 0, bottom = 0, left = 0, right = 0
    for ph in range(n_phases):
        rh, rw = ph // g.sw, ph % g.sw
        g.rows[ph] = (g.hin - rh + g.sh - 1) // g.sh if rh < g.hin else 0
        g.cols[ph] = (g.win - rw + g.sw - 1) // g.sw if rw < g.win else 0
        g.n_taps[ph] = 0
        if g.rows[ph] == 0 or g.cols[ph] == 0:
            continue
        for kh in range(g.kh):
            x = rh + g.pt - kh * g.dh
            if x % g.sh != 0:
                continue
            o = x // g.sh            # dy row of the phase's first row
            top = max(top, -o)
            bottom = max(bottom, o + g.rows[ph] - g.hout)
            for kw in range(g.kw):
                x = rw + g.pl - kw * g.dw
                if x % g.sw != 0:
                    continue
                left = max(left, -(x // g.sw))
                right = max(right, x // g.sw + g.cols[ph] - g.wout)
                g.tap_index[ph * g.taps + g.n_taps[ph]] = kh * g.kw + kw
                g.n_taps[ph] += 1
    g.top, g.left = top, left
    # the zeros between two rows serve as the right halo of one and the left halo of the next
    # (a read left of column 0 lands in the previous row's tail): max(left, right) of them, or
    # up to left + right where a width that lays rows on whole tiles (a divisor or multiple of
    # 16) lies between, as a tile of one or whole rows is written in fewer runs (d: 15 wide,
    # 4% slower than 16)
    g.wf = g.wout + max(left, right)
    for x in range(g.wf, left + g.wout + right + 1):
        if x % PYPTO_TILE_PX == 0 or PYPTO_TILE_PX % x == 0:
            g.wf = x
            break
    for ph in range(n_phases):   # every phase's columns fit in a frame row (wf >= cols)
        g.wf = max(g.wf, g.cols[ph])
    # below the last row, room for a tile's 15 positions past it and a row's tap offset
    g.hf = top + g.hout + bottom + 1 + (PYPTO_TILE_PX + g.wf - 1) // g.wf
    g.plane = _plane_lines(g, g.hf * g.wf)
    for ph in range(n_phases):
        g.tiles[ph] = (g.rows[ph] * g.wf + PYPTO_TILE_PX - 1) // PYPTO_TILE_PX \
            if g.cols[ph] > 0 else 0
    for ph in range(n_phases):
        rh, rw = ph // g.sw, ph % g.sw
        for i in range(g.n_taps[ph]):
            t = g.tap_index[ph * g.taps + i]
            kh, kw = t // g.kw, t % g.kw
            g.tap_row[ph * g.taps + i] = (rh + g.pt - kh * g.dh) // g.sh
            g.tap_col[ph * g.taps + i] = (rw + g.pl - kw * g.dw) // g.sw
            g.tap_offset[ph * g.taps + i] = (g.tap_row[ph * g.taps + i] + top) * g.wf \
                + g.tap_col[ph * g.taps + i] + left
    g.n_items = 0
    # stride 2 across: an item runs both column phases of a row phase on half the tiles, so
    # that the write-out interleaves them into whole dx rows (pypto_tile_write_pair)
    g.paired = g.sw == 2
    # the emulation's items take 8 channel tiles: in fp32 a split B serves 128 channels; in the
    # dot form each dense gather of B does (4 tiles, not 2: ResNet-50 0.95-0.97x the time on
    # Zen 4, whose full-rate VDPBF16PS makes the gather count; nothing measurable on Intel's
    # half rate; 8, not 4: pypto_tile.h). Where such an item's dx channel planes lie on more
    # than WRITE_PAGES pages (the L2 streamer follows so many store streams), it writes them a
    # channel tile at a time along its tiles: written tile by tile, 64 planes of 56x56 took
    # 1.05-1.10x the time of 32 on avx2
    g.item_ch = PYPTO_EMU_ITEM_CH if g.form != PYPTO_TILE_FORM_AMX else PYPTO_AMX_ITEM_CH
    g.ch_blocks = (g.ch_tiles + g.item_ch - 1) // g.item_ch
    g.item_tiles = min(PYPTO_TILE_ITEM_TILES, PYPTO_TILE_ITEM_C // g.item_ch) \
        // (2 if g.paired else 1)
    g.item_phases = g.sh if g.paired else n_phases
    g.dense = g.form != PYPTO_TILE_FORM_AMX and PYPTO_TILE_DENSE_FAST \
        and (_frame_waste(g) > DENSE_WASTE or PYPTO_TILE_LANES and _grids_are_dy(g))
    g.idle_phases = False
    for ph in range(g.item_phases):
        g.idle_phases = g.idle_phases or _phase_taps(g, ph) == 0 and _phase_area(g, ph) > 0
    g.wave = g.n_img   # every image in one wave while the items are cut
    _items_for_team(g, threads)
    g.write_by_channel = g.form != PYPTO_TILE_FORM_AMX \
        and g.item_ch * PYPTO_TILE_CH * g.hin * g.win * 2 > WRITE_PAGES * 4096
    # the wave: as many images as the team's L2 share holds frames of, or as give each
    # thread WAVE_ITEMS items, whichever is more
    per_image = g.pairs * g.plane * 4
    image_items = 0
    for ph in range(g.item_phases):
        if _phase_taps(g, ph) > 0:
            image_items += (_phase_tiles(g, ph) + g.item_tiles - 1) // g.item_tiles
    image_items *= g.ch_blocks
    if threads > 0:
        g.wave = min(g.n_img, max(1, threads * WAVE_FRAME_BYTES // per_image,
                                  (threads * WAVE_ITEMS + image_items - 1) // max(1, image_items)))
    g.n_waves = (g.n_img + g.wave - 1) // g.wave
    # A stride-1 1x1 layer without padding has no halo: its dense positions are an image's
    # plane, one after another. Laid out plane-major across the wave's images, a dense tile is
    # one run of its plane, read where it lies as frame positions are: no gathered (dot form)
    # or masked (fp32) B operand. The plane ends in a tile's 16 zero positions, which the
    # wave's last tile reads past its last one.
    # With AVX-512 (PYPTO_TILE_LANES) any layer whose phases' pixel grids are dy's own size
    # lays its frames so (pypto_tile_lanes): a tap is a shift of the plane, and its lanes that
    # leave the image are masked to zeros, where frames have their halo (no gather: ResNet-50's
    # 7x7 and 14x14 layers spent 10-12% of their time gathering dense runs).
    g.flat = g.dense and g.taps == 1 and g.sh == 1 and g.sw == 1 and g.pt == 0 and g.pl == 0 \
        and g.hin == g.hout and g.win == g.wout and g.wf == g.wout
    g.masked = not g.flat and g.dense and PYPTO_TILE_LANES and _grids_are_dy(g)
    g.flat = g.flat or g.masked
    g.interleaved = False
    if g.masked and g.sh == 1 and g.sw == 1 and lane_order != 0:
        _choose_lanes(g, lane_order)
    g.wave_plane = g.wave * g.plane
    if g.flat:
        g.plane = _plane_lines(g, g.wave * g.hout * g.wout + PYPTO_TILE_PX)
        g.wave_plane = g.plane
        _flat_offsets(g, g.wave)   # a tap: a shift of the plane (the largest: a full wave's)
    # AVX2's loads of masked lanes read whole vectors: up to a tap's shift outside the frames
    g.slack = PYPTO_TILE_READ_SLACK
    if g.masked:
        for ph in range(n_phases):
            for i in range(g.n_taps[ph]):
                g.slack = max(g.slack, PYPTO_TILE_READ_SLACK
                              + (abs(g.tap_offset[ph * g.taps + i]) * 4 + 63) // 64 * 64)
    for wv in range(g.n_waves):
        for ph in range(g.item_phases):
            _item_range(g, ph, wv, &first, &last, &step)
            g.n_items += (last - first + step - 1) // step
    g.n_items *= g.ch_blocks
    # The emulation on a team: each thread fills the frames of its band of a wave's positions
    # (flat) or rows (frames) and runs the band's items first (a frame line filled by one core
    # and read by another had to be taken back from the reader at the next wave's fill:
    # filling cost 4x as much on two threads as on one, a fifth of ResNet-50's item time)
    g.bands = threads if g.form != PYPTO_TILE_FORM_AMX and threads > 1 else 1
    g.items = <int64_t *>malloc((3 * max(g.n_items, 1) + g.n_waves + 1
                                 + g.n_waves * g.bands + 1 + 2 * g.bands) * sizeof(int64_t))
    if g.items == NULL:
        raise MemoryError("pypto: no memory for the tile order's work items")
    g.wave_items = g.items + 3 * max(g.n_items, 1)
    g.band_items = g.wave_items + g.n_waves + 1
    g.band_next = g.band_items + g.n_waves * g.bands + 1
    g.band_state = g.band_next + g.bands
    # flat frames whose every tap reads its own position (1x1, stride 1 or the tapped phase of
    # stride 2): the items of a band read the positions that band's fill wrote, and no other
    g.local_bands = g.flat
    for ph in range(n_phases):
        for i in range(g.n_taps[ph]):
            g.local_bands = g.local_bands and g.tap_offset[ph * g.taps + i] == 0
    inside = _channel_blocks_inside(g)   # the same for every wave (it sees a wave's size)
    i = 0
    for wv in range(g.n_waves):
        g.wave_items[wv] = i
        for band in range(g.bands):
            g.band_items[wv * g.bands + band] = i
            if inside:
                for ph in range(g.item_phases):
                    _band_range(g, ph, wv, band, &first, &last, &step)
                    while first < last:
                        for cb in range(g.ch_blocks):
                            g.items[3 * i], g.items[3 * i + 1] = cb, ph
                            g.items[3 * i + 2] = first
                            i += 1
                        first += step
            else:
                for cb in range(g.ch_blocks):
                    for ph in range(g.item_phases):
                        _band_range(g, ph, wv, band, &first, &last, &step)
                        while first < last:
                            g.items[3 * i], g.items[3 * i + 1] = cb, ph
                            g.items[3 * i + 2] = first
                            i += 1
                            first += step
    g.wave_items[g.n_waves] = i
    g.band_items[g.n_waves * g.bands] = i
    return 0


cdef int64_t _plane_lines(const TileGeometry *g, int64_t positions) noexcept nogil:
    """A pair plane of ``positions`` on whole 64-byte lines (every plane starts on one), an
    odd number of them in the emulation: a K step reads the same position of a block's 16
    planes, and planes a multiple of 4 KiB apart fell in one set of L1 (8 ways): Inception-v3's
    17x17 layers in waves of 7 images (planes of 2048 positions, 8 KiB) took 1.8x the time
    of waves of 8. The tile unit's frames are position-major: its planes stay as they are."""
    cdef int64_t lines = (positions + 15) // 16
    if g.form != PYPTO_TILE_FORM_AMX and lines % 2 == 0:
        lines += 1
    return lines * 16


# interleaved lanes serve where they compute fewer lanes by LANE_MARGIN and their fill and
# write-out's cost, about LANE_COST_MACS multiply-adds a lane (Inception-v3's 8x8 1x3 layer,
# as many lanes either way, took 1.0-2.0% longer interleaved at 1152 a lane: 12-23 MACs)
cdef double LANE_MARGIN = 0.01
cdef double LANE_COST_MACS = 20.0


cdef void _choose_lanes(TileGeometry *g, int lane_order) noexcept nogil:
    """Masked flat frames of a stride-1 layer: the wave's images one after another (a tile
    holds 16 positions of one image's rows), or (interleaved) the images inside each position,
    where that computes enough fewer lanes to pay (``lane_order`` below 0; 0: never, 1:
    always). A tap's lanes outside the image are computed as zeros and a tile all outside is
    skipped: interleaved, a tile of 8 images is 2 positions, so a tap leaves out whole tiles
    of a border, where 16 positions of a 7x7 image's rows mixed border and inner ones
    (ResNet-50's 7x7 3x3 layers computed 24% more lanes than they needed, 14x14 10%,
    Inception-v3's 17x17 1x7 layers 12%; interleaved 11%, 5% and 6%). No sum changes: a lane's
    steps are the same, only where it lies. Interleaved waves hold equal numbers of images,
    up to PYPTO_TILE_LANE_IMAGES (a tile is then one position)."""
    cdef int64_t images = min(g.wave, PYPTO_TILE_LANE_IMAGES)
    cdef double macs = 1.0 * g.blocks * PYPTO_TILE_K * g.n_taps[0]   # a lane's, a channel's
    if lane_order < 0 and _lane_work(g, 0) <= _lane_work(g, images) \
            * (1.0 + LANE_MARGIN + LANE_COST_MACS / macs):
        return
    g.interleaved = True
    g.n_waves = (g.n_img + images - 1) // images
    g.wave = (g.n_img + g.n_waves - 1) // g.n_waves
    g.n_waves = (g.n_img + g.wave - 1) // g.wave


cdef int64_t _lane_work(const TileGeometry *g, int64_t images) noexcept nogil:
    """Lanes a wave's tiles compute over the taps of a stride-1 layer (16 for each tile in
    which a tap reads at least one position inside dy): ``images`` 0, the wave's images one
    after another; else that many images inside each position."""
    cdef int64_t i, n, r, r0, r1, c0, c1, area = g.hout * g.wout, last, work = 0
    for i in range(g.n_taps[0]):
        r0, r1 = max(0, -g.tap_row[i]), min(g.hout, g.hout - g.tap_row[i])
        c0, c1 = max(0, -g.tap_col[i]), min(g.wout, g.wout - g.tap_col[i])
        if r0 >= r1 or c0 >= c1:
            continue
        last = -1
        for n in range(g.wave if images == 0 else 1):
            for r in range(r0, r1):
                if images == 0:
                    work += _tiles_reached(n * area + r * g.wout + c0,
                                           n * area + r * g.wout + c1, &last)
                else:
                    work += _tiles_reached((r * g.wout + c0) * images,
                                           (r * g.wout + c1) * images, &last)
    return work * PYPTO_TILE_PX


cdef inline int64_t _tiles_reached(int64_t a, int64_t b, int64_t *last) noexcept nogil:
    """Tiles of lanes a .. b - 1 past tile last[0] (the runs come in order), and last[0]
    moved to the run's last tile."""
    cdef int64_t t0 = max(a // PYPTO_TILE_PX, last[0] + 1), t1 = (b - 1) // PYPTO_TILE_PX
    last[0] = max(last[0], t1)
    return max(0, t1 - t0 + 1)


cdef void _flat_offsets(TileGeometry *g, int64_t images) noexcept nogil:
    """Each tap's shift of flat frames, for a wave of ``images`` (interleaved: a position's
    lanes are the wave's images, so a tap moves by a position's worth of them)."""
    cdef int64_t i
    g.lane_images = images
    for i in range(g.sh * g.sw * g.taps):
        g.tap_offset[i] = (g.tap_row[i] * g.wout + g.tap_col[i]) \
            * (images if g.interleaved else 1)


cdef void _items_for_team(TileGeometry *g, int threads) noexcept nogil:
    """Smaller items where a call would give a team of ``threads`` fewer than WAVE_ITEMS items
    a thread (a small layer at batch 1 on many cores: ResNet-50's 7x7 layers made 8 items):
    half the tiles, down to a pair (paired: one a column phase), then (the emulation) half the
    channel tiles, down to one. A tile's sums do not depend on its item, so no bit changes. A
    smaller item reuses a K step's weight over fewer tiles and (fewer channels) a split or
    gathered B over fewer channel tiles: one thread took 0.99-1.02x the time with items of a
    pair of tiles, 1.02-1.06x with 32 channels and 1.09-1.15x with 16 (avx512, cases b-f at
    batch 1; the tiles first, though e's weight of 9 MiB is then read twice)."""
    cdef int64_t target = threads * WAVE_ITEMS, floor = 1 if g.paired else 2
    while threads > 1 and _call_items(g) < target:
        if g.item_tiles > floor:
            g.item_tiles = max(floor, g.item_tiles // 2)
        elif g.item_ch > 1 and g.form != PYPTO_TILE_FORM_AMX:   # the unit's C: 2 x 2 tiles
            g.item_ch //= 2
            g.ch_blocks = (g.ch_tiles + g.item_ch - 1) // g.item_ch
        else:
            break


cdef int64_t _call_items(const TileGeometry *g) noexcept nogil:
    """The work items of wave 0 (every image, where g.wave is all of them; more waves only add
    items)"""
    cdef int64_t ph, first, last, step, items = 0
    for ph in range(g.item_phases):
        _item_range(g, ph, 0, &first, &last, &step)
        items += (last - first + step - 1) // step
    return items * g.ch_blocks


cdef void _band_range(const TileGeometry *g, int64_t ph, int64_t wv, int64_t band,
                      int64_t *first, int64_t *last, int64_t *step) noexcept nogil:
    """_item_range's items of band ``band``: an equal share of them (a phase whose grid is
    dy's splits its positions as _tile_fill_band splits the frames)."""
    cdef int64_t start, count
    _item_range(g, ph, wv, &start, last, step)
    count = (last[0] - start + step[0] - 1) // step[0]
    first[0] = start + _band_start(g, count, band) * step[0]
    last[0] = min(last[0], start + _band_start(g, count, band + 1) * step[0])


cdef inline int64_t _band_start(const TileGeometry *g, int64_t count, int64_t band) noexcept nogil:
    """The first of ``count`` steps (items, or frame rows) that band ``band`` takes"""
    return band * count // g.bands


cdef bint _grids_are_dy(const TileGeometry *g) noexcept nogil:
    """Whether the dense pixel grid of every item phase with a tap has dy's rows and columns
    (then a dense position and its tap's dy position lie a constant apart)."""
    cdef int64_t ph, grid
    for ph in range(g.item_phases):
        grid = 2 * ph if g.paired else ph
        if g.n_taps[grid] + (g.n_taps[grid + 1] if g.paired else 0) == 0:
            continue
        if g.rows[grid] != g.hout or g.cols[grid] != g.wout:
            return False
    return True


cdef double _frame_waste(const TileGeometry *g) noexcept nogil:
    """The share of positions a call in frame positions computes and drops (halo columns,
    the last tile of each image)."""
    cdef int64_t ph, framed = 0, real = 0
    for ph in range(g.item_phases):
        framed += _phase_tiles(g, ph) * PYPTO_TILE_PX
        real += _phase_area(g, ph)
    return 1.0 - real / <double>framed if framed > 0 else 0.0


cdef inline int64_t _phase_area(const TileGeometry *g, int64_t ph) noexcept nogil:
    """Dense positions of one image of an item's phase (paired: column phase 0's grid, which
    serves both)."""
    cdef int64_t run_ph = 2 * ph if g.paired else ph
    return g.rows[run_ph] * g.cols[run_ph]


cdef void _item_range(const TileGeometry *g, int64_t ph, int64_t wv, int64_t *first,
                      int64_t *last, int64_t *step) noexcept nogil:
    """Wave wv's items of item phase ph start at first, first + step, ... < last: tiles of all
    images (frame positions), or dense positions of all images; none where the phase has no
    taps (_tile_zero_plane writes its zeros)."""
    cdef int64_t n0 = wv * g.wave, n1 = min(g.n_img, (wv + 1) * g.wave)
    cdef int64_t per_image = _phase_area(g, ph) if g.dense else _phase_tiles(g, ph)
    first[0], last[0] = n0 * per_image, n1 * per_image
    if _phase_taps(g, ph) == 0:
        last[0] = first[0]
    step[0] = g.item_tiles * PYPTO_TILE_PX if g.dense else g.item_tiles


cdef inline int64_t _phase_taps(const TileGeometry *g, int64_t ph) noexcept nogil:
    """Taps of item phase ph (paired: of both its column phases)"""
    return g.n_taps[2 * ph] + g.n_taps[2 * ph + 1] if g.paired else g.n_taps[ph]


cdef void _tile_zero_plane(const TileGeometry *g, uint16_t *dx, int64_t job,
                           int64_t n0) noexcept nogil:
    """Zeros of dx channel plane ``job`` of the wave from image n0 (image n0 + job // cin) at
    the item phases without taps (a 1x1/2 layer's odd rows): stored straight, where as items
    they went through a zeroed C and the write-out."""
    cdef uint16_t *plane = dx + (n0 * g.cin + job) * g.hin * g.win
    cdef int64_t ph, r, grid
    for ph in range(g.item_phases):
        if _phase_taps(g, ph) > 0:
            continue
        grid = 2 * ph if g.paired else ph
        for r in range(g.rows[grid] if g.cols[grid] > 0 else 0):
            if g.paired:   # both column phases: whole rows
                memset(plane + (ph + r * g.sh) * g.win, 0, g.win * sizeof(uint16_t))
            else:
                pypto_zero_every(plane + (ph // g.sw + r * g.sh) * g.win + ph % g.sw,
                                 g.cols[ph], g.sw)


cdef inline int64_t _phase_tiles(const TileGeometry *g, int64_t ph) noexcept nogil:
    """Tiles of one image of an item's phase ``ph`` (paired: row phase ph, whose column
    phase 0 has the most columns)."""
    return g.tiles[2 * ph] if g.paired else g.tiles[ph]


cdef bint _channel_blocks_inside(const TileGeometry *g) noexcept nogil:
    """Whether a wave's work items take the input channel blocks innermost (items that follow
    each other read the same dy tiles and every block's weight) rather than outermost (they read
    one block's weight and all of the wave's dy). The order whose data a core's L2 keeps: one
    block's weight and all of dy, else all of the weight and one item's dy, else the one that
    reads less from L3."""
    cdef double budget = 1 << 20
    cdef double block_weight = 1.0 * g.item_ch * g.blocks * g.taps * PYPTO_TILE_CH \
        * PYPTO_TILE_K * _weight_bytes(g.form)
    cdef double weight = block_weight * g.ch_blocks
    cdef double dy = 4.0 * g.pairs * g.wave_plane   # a wave's frames
    cdef double item_dy = dy / max(1, g.wave_plane // PYPTO_TILE_PX) * g.item_tiles
    cdef double items = max(1.0, g.wave_plane / (PYPTO_TILE_PX * g.item_tiles))
    if dy + block_weight <= budget:
        return False
    if weight + item_dy <= budget:
        return True
    return weight * items < dy * g.ch_blocks


cdef void _tile_free(TileGeometry *g) noexcept nogil:
    free(g.rows)
    free(g.items)
    g.rows = NULL
    g.items = NULL


cdef int64_t _tile_weight_bytes(const TileGeometry *g, int form) noexcept nogil:
    """The packed weight in this form, on whole 64-byte lines."""
    return (g.ch_tiles * g.blocks * g.taps * PYPTO_TILE_CH * PYPTO_TILE_K * _weight_bytes(form)
            + 63) // 64 * 64


cdef int64_t _tile_frame_bytes(const TileGeometry *g) noexcept nogil:
    """A wave's dy frames, the bytes a dense run's whole-vector load may read before and
    after them, and room to start them on a 64-byte line."""
    return g.pairs * g.wave_plane * 4 + 2 * g.slack + 64


cdef int64_t _tile_scratch_bytes(const TileGeometry *g, int64_t threads) noexcept nogil:
    """The call's scratch: the frames (_tile_frame_bytes), then each of ``threads`` threads'
    C from a 64-byte line."""
    return _tile_frame_bytes(g) + 64 + threads * PYPTO_TILE_C_BYTES


cdef void _tile_panel_key(const TileGeometry *g, int64_t *key) noexcept nogil:
    """The kept-panels key (buffers.pxi) of the tile order's packed weight: what
    pypto_tile_pack lays it out by besides the weight. key[8] is below 0, where dgrad's
    (a register block's width) is not, so neither order takes the other's panels."""
    memset(key, 0, PANEL_KEY_LEN * sizeof(int64_t))
    key[0], key[1], key[2], key[3] = g.cout, g.cin, g.kh, g.kw
    key[8] = -1 - g.form


cdef inline int _weight_bytes(int form) noexcept nogil:
    return 4 if form == PYPTO_TILE_FORM_F32 else 2


def tile_buffer_bytes(tuple dy_shape, tuple w_shape, tuple dx_shape, tuple attrs,
                      int threads=0):
    """Bytes dgrad_tile allocates for these shapes (packed weight and dy frames, at most) on a
    team of ``threads`` (0: whatever the team), and TILE_THREAD_BYTES more for each of the
    team's threads (its items' C)."""
    cdef TileGeometry g
    cdef int form
    weight, frames = 0, 0
    for form in (PYPTO_TILE_FORM_F32, PYPTO_TILE_FORM_AMX, PYPTO_TILE_FORM_DOT):
        memset(&g, 0, sizeof(g))
        g.form = form   # F32: the largest weight; the frames of any form
        try:
            _tile_geometry(&g, (dy_shape, w_shape, dx_shape), attrs, threads)
            weight = max(weight, _tile_weight_bytes(&g, form))
            frames = max(frames, _tile_scratch_bytes(&g, 0))
        finally:
            _tile_free(&g)
    return weight + frames + 64


def tile_layout(tuple dy_shape, tuple w_shape, tuple dx_shape, tuple attrs, str form,
                int threads=0, int lane_order=-1):
    """How dgrad_tile lays a call's dy out in ``form`` ("amx", "f32" or "dot"): "frames" (a
    halo, frame positions), "dense" (frames, dense positions gathered), "flat" (plane-major,
    read in place), "masked" (flat, taps' lanes masked) or "interleaved" (masked, the images
    inside each position); the tests' check of what a case covers."""
    cdef TileGeometry g
    memset(&g, 0, sizeof(g))
    g.form = {"amx": PYPTO_TILE_FORM_AMX, "f32": PYPTO_TILE_FORM_F32,
              "dot": PYPTO_TILE_FORM_DOT}[form]
    try:
        _tile_geometry(&g, (dy_shape, w_shape, dx_shape), attrs, threads, lane_order)
        if g.interleaved:
            return "interleaved"
        return "masked" if g.masked else "flat" if g.flat else "dense" if g.dense else "frames"
    finally:
        _tile_free(&g)


def tile_work_split(tuple dy_shape, tuple w_shape, tuple dx_shape, tuple attrs, str form,
                    int threads):
    """How dgrad_tile cuts a call's work in ``form`` ("amx", "f32" or "dot") for a team of
    ``threads``, from the same geometry: a dict of its work items, waves and images a wave,
    an item's channel tiles and tiles (the model of docs/performance.md's many-core table;
    dgrad_tile runs calls below SERIAL_MACS on one thread whatever the team), the positions
    of a frames' pair plane, and the bytes of packed weight its items read (each item all of
    its channel block's rows for its phases' taps; a tile wholly outside dy skips its step, so
    at most) beside the packed weight's."""
    cdef TileGeometry g
    cdef int64_t i, cb, ph, n_ch, taps, reads = 0
    memset(&g, 0, sizeof(g))
    g.form = {"amx": PYPTO_TILE_FORM_AMX, "f32": PYPTO_TILE_FORM_F32,
              "dot": PYPTO_TILE_FORM_DOT}[form]
    try:
        _tile_geometry(&g, (dy_shape, w_shape, dx_shape), attrs, threads)
        for i in range(g.n_items):
            cb, ph = g.items[3 * i], g.items[3 * i + 1]
            n_ch = min(g.item_ch, g.ch_tiles - cb * g.item_ch)
            taps = _phase_taps(&g, ph)
            reads += n_ch * g.blocks * taps * PYPTO_TILE_CH * PYPTO_TILE_K * _weight_bytes(g.form)
        return {"items": g.n_items, "waves": g.n_waves, "wave": g.wave,
                "item_channels": g.item_ch * PYPTO_TILE_CH, "item_tiles": g.item_tiles,
                "bands": g.bands, "plane": g.plane, "weight_reads": reads,
                "weight_bytes": _tile_weight_bytes(&g, g.form)}
    finally:
        _tile_free(&g)


cdef int64_t _frame_chunk(const TileGeometry *g, int64_t frame_jobs, int threads) noexcept nogil:
    """Frame jobs (the tile unit's blocks) a thread takes at once: about 4096 positions'
    worth, at most 16, and at least four chunks a thread where there are that many jobs."""
    cdef int64_t positions = g.plane * (PYPTO_TILE_K // 2)
    cdef int64_t chunk = min(16, max(1, 4096 // max(1, positions)))
    return max(1, min(chunk, frame_jobs // (4 * threads)))


cdef void _tile_pack_block(const TileGeometry *g, const uint16_t *w, int64_t cb) noexcept nogil:
    """The packed weight of 16-channel block ``cb``."""
    cdef pypto_fpenv saved = pypto_fp_enter()
    pypto_tile_pack(w, g.cout, g.cin, g.taps, cb, g.form,
                    <char *>g.w_packed + cb * g.w_block_elems * _weight_bytes(g.form))
    pypto_fp_leave(saved)


cdef void _tile_frame_block(const TileGeometry *g, const uint16_t *dy, int64_t job,
                            int64_t n0) noexcept nogil:
    """The tile unit's frames: job j fills co block j % blocks of image n0 + j // blocks's
    frame (the emulation's frames: _tile_fill_band)."""
    cdef int64_t n = job // g.blocks, k = job % g.blocks
    pypto_tile_frame_block(dy + (n0 + n) * g.cout * g.hout * g.wout, g.cout, k, g.hout, g.wout,
                           g.top, g.left, g.hf, g.wf,
                           <uint16_t *>(g.frames + (n * g.pairs + k * (PYPTO_TILE_K // 2))
                                        * g.plane))


cdef void _tile_fill_band(const TileGeometry *g, const uint16_t *dy, int64_t band, int64_t k,
                          int64_t n0) noexcept nogil:
    """Pair plane k of a wave's frames from image n0 (the emulation's): flat, at band
    ``band``'s positions (as _band_range splits them; the last band zeroes the plane's tail),
    else the band's share of the images' frame rows (one band: all of them)."""
    cdef int64_t area = g.hout * g.wout, images = min(g.n_img, n0 + g.wave) - n0
    cdef int64_t step = g.item_tiles * PYPTO_TILE_PX, total = images * area
    if not g.flat:
        _tile_fill_band_rows(g, dy, band, k, n0, images)
        return
    cdef int64_t count = (total + step - 1) // step, n, at, end, run
    cdef int64_t p0 = min(total, _band_start(g, count, band) * step)
    cdef int64_t p1 = min(total, _band_start(g, count, band + 1) * step)
    cdef uint32_t *plane = g.frames + k * g.plane
    cdef const uint16_t *low
    cdef const uint16_t *high
    if g.interleaved:
        _tile_fill_lanes(g, dy, k, n0, images, p0, p1)
        at = p1
    else:
        at = p0
    while at < p1:   # a run of one image's positions
        n = at // area
        end = min(p1, (n + 1) * area)
        pypto_tile_pair_channels(dy + (n0 + n) * g.cout * area, g.cout, g.form,
                                 k // (PYPTO_TILE_K // 2), k % (PYPTO_TILE_K // 2), area, &low,
                                 &high)
        run = at - n * area
        pypto_tile_pair_row(low + run if low != NULL else NULL,
                            high + run if high != NULL else NULL, end - at, plane + at)
        at = end
    if band == g.bands - 1:
        memset(plane + total, 0, (g.plane - total) * sizeof(uint32_t))


cdef void _tile_fill_lanes(const TileGeometry *g, const uint16_t *dy, int64_t k, int64_t n0,
                           int64_t images, int64_t p0, int64_t p1) noexcept nogil:
    """Lanes p0 .. p1 - 1 of pair plane k of interleaved flat frames (_choose_lanes): lane
    position * images + n holds image n0 + n's pair at that position."""
    cdef int64_t area = g.hout * g.wout, n
    cdef const uint16_t *low[PYPTO_TILE_LANE_IMAGES]
    cdef const uint16_t *high[PYPTO_TILE_LANE_IMAGES]
    for n in range(images):
        pypto_tile_pair_channels(dy + (n0 + n) * g.cout * area, g.cout, g.form,
                                 k // (PYPTO_TILE_K // 2), k % (PYPTO_TILE_K // 2), area, &low[n],
                                 &high[n])
    pypto_tile_fill_images(low, high, images, p0, p1, g.frames + k * g.plane)


cdef void _tile_fill_band_rows(const TileGeometry *g, const uint16_t *dy, int64_t band, int64_t k,
                               int64_t n0, int64_t images) noexcept nogil:
    """Band ``band``'s share of the wave's frame rows of pair plane k (images one after
    another), each image's part with pypto_tile_frame_rows."""
    cdef int64_t rows = images * g.hf, area = g.hout * g.wout, n, end
    cdef int64_t at = _band_start(g, rows, band), last = _band_start(g, rows, band + 1)
    while at < last:
        n = at // g.hf
        end = min(last, (n + 1) * g.hf)
        pypto_tile_frame_rows(dy + (n0 + n) * g.cout * area, g.cout, g.form,
                              k // (PYPTO_TILE_K // 2), k % (PYPTO_TILE_K // 2), g.hout, g.wout,
                              g.top, g.left, g.wf, at - n * g.hf, end - n * g.hf,
                              g.frames + (n * g.pairs + k) * g.plane)
        at = end


cdef inline int64_t _tile_next_item(const TileGeometry *g, int64_t wv, int64_t home) noexcept nogil:
    """The next item of wave wv for a team thread whose band is ``home``: its band's, then
    another's, once that band is filled (a band still filling with items left: wait for it;
    every band is claimed before its filler or anyone else takes an item); -1 when none is
    left."""
    cdef int64_t k, band, item, end, spins = 0
    cdef bint waiting = True
    while waiting:
        waiting = False
        for k in range(g.bands):
            band = (home + k) % g.bands
            end = g.band_items[wv * g.bands + band + 1]
            if not pypto_flag_is(&g.band_state[band], BAND_FILLED):
                waiting = waiting or pypto_flag_below(&g.band_next[band], end)
                continue
            item = pypto_take(&g.band_next[band], end)
            if item >= 0:
                return item
        if waiting:
            pypto_relax(spins)
            spins += 1
    return -1


cdef void _tile_item(const TileGeometry *g, int64_t item, uint16_t *dx, int64_t n0,
                     int tid) noexcept nogil:
    """Every output element of one work item of the wave from image n0, in the kernel's
    floating-point environment."""
    cdef float *c = g.c_items + tid * (PYPTO_TILE_C_BYTES // sizeof(float))   # thread tid's
    cdef float scratch[PYPTO_TILE_K * PYPTO_TILE_PX * 2 + 16]
    cdef float *split = scratch + (-<size_t>scratch // sizeof(float)) % 16
    cdef const void *a[PYPTO_EMU_ITEM_CH]
    cdef const uint32_t *b[PYPTO_TILE_ITEM_TILES]
    cdef pypto_tile_runs runs
    cdef pypto_tile_lanes lanes
    cdef int64_t cb = g.items[3 * item], ph = g.items[3 * item + 1]
    cdef int64_t first = g.items[3 * item + 2]
    cdef int64_t rh = ph if g.paired else ph // g.sw, rw = 0 if g.paired else ph % g.sw
    cdef int64_t grid = 2 * ph if g.paired else ph   # the phase whose rows and columns count
    cdef int64_t per_image = _phase_area(g, ph) if g.dense else _phase_tiles(g, ph)
    cdef int64_t end = min(g.n_img, n0 + g.wave) * per_image   # this wave's
    cdef int n_tiles = <int>(min(g.item_tiles * PYPTO_TILE_PX, end - first) + PYPTO_TILE_PX - 1) \
        // PYPTO_TILE_PX if g.dense else <int>min(g.item_tiles, end - first)
    cdef int n_ch = <int>min(g.item_ch, g.ch_tiles - cb * g.item_ch)
    # the item's last channel tile: its channels below Cin (the rest are never written out)
    cdef int last_rows = <int>min(PYPTO_TILE_CH,
                                  g.cin - (cb * g.item_ch + n_ch - 1) * PYPTO_TILE_CH)
    cdef int phases = 2 if g.paired and g.cols[2 * ph + 1] > 0 else 1
    cdef int64_t t, n, q0, ch, ci0, p, run_ph, slot, k, w
    cdef size_t a_bytes = g.w_block_elems * _weight_bytes(g.form)
    # C laid out for the item's own channel tiles (the tile unit's for its 2): an item short
    # of item_ch (Cin of 32, 64, 80; a last channel block) zeroes and updates no unused C
    cdef int c_ch = <int>g.item_ch if g.use_amx else n_ch
    cdef int64_t c_phase = (n_tiles + 1) // 2 * 2 * c_ch * PYPTO_TILE_CH * PYPTO_TILE_PX
    cdef pypto_fpenv saved = pypto_fp_enter()
    for ch in range(g.item_ch):   # past the last channel tile: its first (never read)
        a[ch] = <const char *>g.w_packed + (cb * g.item_ch + (ch if ch < n_ch else 0)) * a_bytes
    if g.flat:   # tile t: a run of each pair plane from the wave's position first + 16 t
        for t in range(n_tiles):
            b[t] = g.frames + first - n0 * per_image + t * PYPTO_TILE_PX
        if g.interleaved:
            _interleaved_lanes(g, first, end, n_tiles, n0, &lanes)
        elif g.masked:
            _flat_lanes(g, first, end, n_tiles, &lanes)
        if g.sh != 1 or g.sw != 1:   # the runs of a strided write-out
            _dense_runs(g, grid, first, end, n_tiles, n0, &runs)
    elif g.dense:
        _dense_runs(g, grid, first, end, n_tiles, n0, &runs)
    else:
        for t in range(n_tiles):   # tile first + t: image n, positions q0 .. q0 + 15
            n, q0 = (first + t) // per_image, ((first + t) % per_image) * PYPTO_TILE_PX
            b[t] = g.frames + (n - n0) * g.pairs * g.plane \
                + (q0 * (PYPTO_TILE_K // 2) if g.form == PYPTO_TILE_FORM_AMX else q0)
    if g.use_amx:
        pypto_amx_begin()
    for p in range(phases):    # the item's column phases (paired: both; their C one after another)
        run_ph = 2 * ph + p if g.paired else ph
        lanes.tap_row, lanes.tap_col = g.tap_row + run_ph * g.taps, g.tap_col + run_ph * g.taps
        if g.use_amx:
            pypto_tile_run_amx(<const uint16_t *const *>a, n_ch, b, n_tiles, g.blocks, g.taps,
                               g.tap_index + run_ph * g.taps, g.tap_offset + run_ph * g.taps,
                               g.n_taps[run_ph], g.plane, c + p * c_phase)
        else:
            pypto_tile_run_emulated(a, n_ch, last_rows, c_ch, b,
                                    &runs if g.dense and not g.flat else NULL,
                                    &lanes if g.masked else NULL,
                                    n_tiles, g.blocks, g.taps, g.tap_index + run_ph * g.taps,
                                    g.tap_offset + run_ph * g.taps, g.n_taps[run_ph], g.plane,
                                    c + p * c_phase, split, g.form, g.exact, g.cout)
    if g.use_amx:
        pypto_amx_end()
    if g.interleaved:   # a channel tile at a time, its lanes in dx's order
        pypto_tile_write_interleaved(c, c_ch, n_ch, g.cin - cb * g.item_ch * PYPTO_TILE_CH,
                                     n_tiles, first - n0 * g.hin * g.win,
                                     end - n0 * g.hin * g.win, g.lane_images, n0,
                                     dx + cb * g.item_ch * PYPTO_TILE_CH * g.hin * g.win,
                                     g.hin * g.win, g.cin * g.hin * g.win)
        n_tiles = 0
    # the write-out: tile by tile, the channel tiles inside, or (g.write_by_channel) a channel
    # tile at a time along the tiles
    for w in range(n_tiles * n_ch):
        if g.write_by_channel:
            ch, t = w // n_tiles, w % n_tiles
        else:
            t, ch = w // n_ch, w % n_ch
        ci0 = (cb * g.item_ch + ch) * PYPTO_TILE_CH
        slot = pypto_tile_c_slot(c, <int>t, <int>ch, c_ch) - c
        if g.dense and g.sh == 1 and g.sw == 1:
            _write_contiguous(g, c + slot, ci0, first + t * PYPTO_TILE_PX, end, dx)
            continue
        if g.dense:
            for k in range(runs.n[t]):
                _write_run(g, c + slot, c_phase, phases, ci0, grid, rh, rw,
                           first + t * PYPTO_TILE_PX + runs.x[t][k], runs.x[t][k],
                           runs.len[t][k], dx)
            continue
        n, q0 = (first + t) // per_image, ((first + t) % per_image) * PYPTO_TILE_PX
        if phases == 2:
            pypto_tile_write_pair(c + slot, c + c_phase + slot,
                                  min(PYPTO_TILE_CH, g.cin - ci0), q0, g.wf, g.win,
                                  g.rows[grid], dx + ((n * g.cin + ci0) * g.hin + rh) * g.win,
                                  g.sh * g.win, g.hin * g.win)
        else:
            pypto_tile_write(c + slot, min(PYPTO_TILE_CH, g.cin - ci0), q0, g.wf,
                             g.cols[grid], g.rows[grid],
                             dx + ((n * g.cin + ci0) * g.hin + rh) * g.win + rw,
                             g.sh * g.win, g.sw, g.hin * g.win)
    pypto_fp_leave(saved)


cdef void _flat_lanes(const TileGeometry *g, int64_t first, int64_t end, int n_tiles,
                      pypto_tile_lanes *lanes) noexcept nogil:
    """Each lane's row and column in its image of an item's tiles from dense position
    ``first`` (flat frames: the grid is dy's own size)."""
    cdef int64_t area = g.hout * g.wout, pos
    cdef int t, x
    lanes.rows, lanes.cols = <int32_t>g.hout, <int32_t>g.wout
    for t in range(n_tiles):
        for x in range(PYPTO_TILE_PX):
            pos = first + t * PYPTO_TILE_PX + x
            if pos < end:
                lanes.row[t][x] = <int32_t>(pos % area // g.wout)
                lanes.col[t][x] = <int32_t>(pos % g.wout)
            else:
                lanes.row[t][x] = lanes.col[t][x] = PYPTO_TILE_NOWHERE


cdef void _interleaved_lanes(const TileGeometry *g, int64_t first, int64_t end, int n_tiles,
                             int64_t n0, pypto_tile_lanes *lanes) noexcept nogil:
    """_flat_lanes for interleaved frames (lane position * images + n: image n0 + n), counted
    on lane by lane, not divided for each."""
    cdef int64_t images = g.lane_images, at = first - n0 * g.hout * g.wout
    cdef int64_t stop = end - n0 * g.hout * g.wout, n = at % images, q = at // images
    cdef int64_t r = q // g.wout, col = q % g.wout
    cdef int t, x
    lanes.rows, lanes.cols = <int32_t>g.hout, <int32_t>g.wout
    for t in range(n_tiles):
        for x in range(PYPTO_TILE_PX):
            if at < stop:
                lanes.row[t][x], lanes.col[t][x] = <int32_t>r, <int32_t>col
            else:
                lanes.row[t][x] = lanes.col[t][x] = PYPTO_TILE_NOWHERE
            at += 1
            n += 1
            if n == images:   # the next position
                n, col = 0, col + 1
                if col == g.wout:
                    r, col = r + 1, 0


cdef void _tile_wave_banded(TileGeometry *g, const uint16_t *dy, const uint16_t *w,
                            uint16_t *dx, int64_t wv, int64_t n0, int64_t packs, int64_t zeros,
                            int threads, int *stop, double *next_check) noexcept:
    """One wave of the emulation on a team: the weight's pack jobs (if any), then thread t
    fills band t of every pair plane (a static schedule: with a team of g.bands threads, thread
    t takes band t's planes) and zeros its share of the ``zeros`` planes' idle phases, then
    runs band t's items, then takes other filled bands' items.
    With local bands (g.local_bands) the fill and the items are one region: thread t claims
    band t (then any band not claimed), fills it and marks it filled, and runs items at once
    (no barrier between: ResNet-50's 56x56 1x1 layers ran 8 waves, each a fill region and an
    items region)."""
    cdef int64_t job, band, item, tid, home, k
    cdef bint local = g.local_bands and packs == 0
    for band in range(g.bands):
        g.band_next[band] = g.band_items[wv * g.bands + band]
        g.band_state[band] = BAND_FREE if local else BAND_FILLED
    if not local:
        with nogil, parallel(num_threads=threads):
            for job in prange(packs, schedule="dynamic"):
                _tile_pack_block(g, w, job)
            for job in prange(g.bands * g.pairs, schedule="static", chunksize=g.pairs):
                _tile_fill_band(g, dy, job // g.pairs, job % g.pairs, n0)
            for job in prange(zeros, schedule="static"):
                _tile_zero_plane(g, dx, job, n0)
    with nogil, parallel(num_threads=threads):
        tid = threadid()
        home = tid % g.bands
        if local:
            home = -1
            for k in range(g.bands):
                band = (tid + k) % g.bands
                if pypto_flag_claim(&g.band_state[band], BAND_FREE, BAND_FILLING):
                    for job in range(g.pairs):
                        _tile_fill_band(g, dy, band, job, n0)
                    for job in range(_band_start(g, zeros, band), _band_start(g, zeros, band + 1)):
                        _tile_zero_plane(g, dx, job, n0)
                    pypto_flag_set(&g.band_state[band], BAND_FILLED)
                    if home < 0:
                        home = band
            if home < 0:
                home = tid % g.bands
        item = _tile_next_item(g, wv, home)
        while item >= 0 and not pypto_stopped(stop):
            _tile_item(g, item, dx, n0, <int>tid)
            if tid == 0 and pypto_seconds() >= next_check[0]:
                next_check[0] = pypto_seconds() + SIGNAL_SECONDS
                pypto_check_signals(stop)
            item = _tile_next_item(g, wv, home)


cdef void _dense_runs(const TileGeometry *g, int64_t grid, int64_t first, int64_t end,
                      int n_tiles, int64_t n0, pypto_tile_runs *runs) noexcept nogil:
    """The runs of an item's tiles from dense position ``first`` (phase ``grid``'s pixels of
    every image in order, up to ``end``): each a piece of one frame row, or of one image's
    frame where its rows follow each other without a halo column (a stride-1 1x1 layer: a tile
    is one run, two across an image's end; the write-out then takes whole tiles too)."""
    cdef int64_t area = g.rows[grid] * g.cols[grid], pos, n, r, col, length
    cdef bint whole_rows = g.sh == 1 and g.sw == 1 and g.wf == g.cols[grid]
    cdef int t, x
    for t in range(n_tiles):
        runs.n[t] = 0
        pos, x = first + t * PYPTO_TILE_PX, 0
        while x < PYPTO_TILE_PX and pos < end:
            n, r, col = pos // area, pos % area // g.cols[grid], pos % g.cols[grid]
            length = min(PYPTO_TILE_PX - x, end - pos,
                         area - pos % area if whole_rows else g.cols[grid] - col)
            runs.x[t][runs.n[t]], runs.len[t][runs.n[t]] = x, <int>length
            runs.src[t][runs.n[t]] = g.frames + (n - n0) * g.pairs * g.plane + r * g.wf + col
            runs.n[t] += 1
            x += <int>length
            pos += length


cdef void _write_contiguous(const TileGeometry *g, const float *c, int64_t ci0, int64_t pos,
                            int64_t end, uint16_t *dx) noexcept nogil:
    """A dense C tile of a stride-1 call (positions pos .. below end) rounded into dx: there a
    phase's pixels are dx's own, so the tile is one run of dx a channel (two where it crosses
    into the next image), not a run a row."""
    cdef int64_t area = g.hin * g.win, n_ch = min(PYPTO_TILE_CH, g.cin - ci0)
    cdef int64_t x = 0, limit = min(<int64_t>PYPTO_TILE_PX, end - pos), n, length
    while x < limit:
        n = (pos + x) // area
        length = min(limit - x, area - (pos + x) % area)
        pypto_tile_write(c + x, n_ch, 0, length, length, 1,
                         dx + (n * g.cin + ci0) * area + (pos + x) % area, 0, 1, area)
        x += length


cdef void _write_run(const TileGeometry *g, const float *c, int64_t c_phase, int phases,
                     int64_t ci0, int64_t grid, int64_t rh, int64_t rw, int64_t pos, int x,
                     int length, uint16_t *dx) noexcept nogil:
    """One run of a dense C tile (``x`` .. ``x + length - 1``, dense positions pos ..; the
    second phase's C ``c_phase`` floats on) rounded into dx."""
    cdef int64_t area = g.rows[grid] * g.cols[grid]
    cdef int64_t n = pos // area, r = pos % area // g.cols[grid], col = pos % g.cols[grid]
    cdef int64_t n_ch = min(PYPTO_TILE_CH, g.cin - ci0)
    cdef uint16_t *row = dx + ((n * g.cin + ci0) * g.hin + r * g.sh + rh) * g.win
    if phases == 2:   # one frame row of the pair: dx columns 2 col .. below win
        pypto_tile_write_pair(c + x, c + c_phase + x, n_ch, 0, length, g.win - 2 * col, 1,
                              row + 2 * col, 0, g.hin * g.win)
    else:
        pypto_tile_write(c + x, n_ch, 0, length, length, 1, row + col * g.sw + rw, 0, g.sw,
                         g.hin * g.win)


def dgrad_tile(dy, w, dx, tuple attrs, int num_threads, bint use_amx=True,
               int64_t serial_macs=SERIAL_MACS, bint use_dot=True, int lane_order=-1):
    """dx = dgrad(dy, w) in sum_order "tile", bf16 only (buffers as dgrad's). The tile unit
    serves where this level has one, ``use_amx`` is true (the caller has the OS's permission
    and the self-check's verdict) and no subnormal can occur; the emulation elsewhere, same
    bits: with the bf16 dot product where this level has it, ``use_dot`` is true and nothing
    can be subnormal, else in fp32. Returns "tile+amx", "tile+dot" or "tile+emulated", or
    "non_finite" (nothing written) when the weight holds Inf or NaN, as dgrad does.
    ``lane_order`` (tests): masked flat frames' lanes as _choose_lanes lays them (below 0: as
    it chooses; 0: a wave's images one after another; 1: interleaved)."""
    cdef Py_buffer views[3]
    memset(views, 0, sizeof(views))
    try:
        _take_view(dy, &views[0], 0, "dy")
        _take_view(w, &views[1], 0, "w")
        _take_view(dx, &views[2], PyBUF_WRITABLE, "dx")
        return _dgrad_tile(&views[0], &views[1], &views[2], attrs, num_threads, use_amx,
                           serial_macs, use_dot, lane_order)
    finally:
        PyBuffer_Release(&views[0])
        PyBuffer_Release(&views[1])
        PyBuffer_Release(&views[2])


cdef object _dgrad_tile(const Py_buffer *dy, const Py_buffer *w, Py_buffer *dx, tuple attrs,
                        int num_threads, bint use_amx, int64_t serial_macs, bint use_dot,
                        int lane_order):
    cdef TileGeometry g
    cdef uint16_t w_least, w_most, dy_least, dy_most
    cdef int dy_exponent, w_exponent
    cdef const uint16_t *dy_p = <const uint16_t *>dy.buf
    cdef const uint16_t *w_p = <const uint16_t *>w.buf
    cdef uint16_t *dx_p = <uint16_t *>dx.buf
    cdef int64_t job, item, first, last, macs, wv, n0, packs, frame_jobs, chunk, part, zeros
    cdef int threads
    if dy.shape[0] != dx.shape[0] or w.shape[0] != dy.shape[1] or w.shape[1] != dx.shape[1]:
        raise ValueError("dgrad_tile: buffer shapes disagree")
    _magnitudes(w_p, w.len // 2, num_threads, &w_least, &w_most)
    if w_most >= _all_ones_exponent(1):
        return "non_finite"
    # dy's magnitudes decide only whether a flushing form may serve (the tile unit, the dot
    # product) and, where the vectors have no FMA, whether products are exact: a level with
    # neither skips the pass over dy (5-7% of a 56x56 1x1 layer's call)
    dy_exponent, dy_most = 0, 0x7f7f   # as if a subnormal and a huge value: neither holds
    if (PYPTO_HAVE_AMX and use_amx) or (PYPTO_HAVE_BF16_DOT and use_dot) or not PYPTO_TV_FUSED:
        _magnitudes(dy_p, dy.len // 2, num_threads, &dy_least, &dy_most)
        dy_exponent = pypto_bf16_least_exponent(dy_least)
    w_exponent = pypto_bf16_least_exponent(w_least)
    memset(&g, 0, sizeof(g))
    cdef char *block = NULL
    cdef char *at
    cdef char *panels = NULL
    cdef size_t capacity = 0, panel_capacity = 0
    cdef PanelOrigin origin
    cdef int64_t panel_key[PANEL_KEY_LEN]
    cdef bint packed = False
    origin.w_bits = NULL   # _give_panels frees it, whatever raised before _take_panels
    cdef double check_at = pypto_seconds() + SIGNAL_SECONDS
    cdef double *next_check = &check_at
    cdef int stopped = 0
    cdef int *stop = &stopped
    try:
        g.use_amx = PYPTO_HAVE_AMX and use_amx and _flush_safe(dy_exponent, w_exponent)
        g.form = PYPTO_TILE_FORM_AMX if g.use_amx else (
            PYPTO_TILE_FORM_DOT if PYPTO_HAVE_BF16_DOT and use_dot
            and _flush_safe(dy_exponent, w_exponent) else PYPTO_TILE_FORM_F32)
        # the whole team, as dgrad: no call starts or ends a thread
        macs = dy.shape[0] * w.shape[0] * dx.shape[1] * dx.shape[2] * dx.shape[3] \
            * w.shape[2] * w.shape[3] // (attrs[0] * attrs[1])
        threads = 1 if macs < serial_macs else num_threads
        _tile_geometry(&g, (tuple(dy.shape[i] for i in range(4)),
                            tuple(w.shape[i] for i in range(4)),
                            tuple(dx.shape[i] for i in range(4))), attrs, threads,
                      lane_order)
        # products of two bf16 are exact in fp32 unless below 2^-126 or past the largest
        # float: the least exponents sum to >= 142, the largest magnitudes' to <= 380
        g.exact = _products_normal(dy_exponent, w_exponent) \
            and (dy_most >> 7) + (w_most >> 7) <= 380
        g.w_block_elems = g.blocks * g.taps * PYPTO_TILE_CH * PYPTO_TILE_K
        # the packed weight in the kept panel buffer, as dgrad's panels (buffers.pxi): a call
        # with an equal weight uses it as it is; the frames, on whole 64-byte lines (a tile
        # row the unit loads is one line), in the kept scratch buffer (fresh pages cost a third
        # of a 1x1 layer's call)
        panels = <char *>_take_panels(_tile_weight_bytes(&g, g.form) + 64, &panel_capacity,
                                      &origin)
        block = <char *>_take_buffer(SLOT_SCRATCH, _tile_scratch_bytes(&g, threads), &capacity)
        if panels == NULL or block == NULL:
            raise MemoryError("pypto: no memory for the tile order's weight, dy frames and C")
        g.w_packed = panels + (-<size_t>panels) % 64
        g.frames = <uint32_t *>(block + g.slack + (-<size_t>(block + g.slack)) % 64)
        at = block + _tile_frame_bytes(&g)   # past the frames and their slack
        g.c_items = <float *>(at + (-<size_t>at) % 64)
        _tile_panel_key(&g, panel_key)
        packed = _panels_hold(&origin, panel_key, w_p, w.len // 2)
        if not packed:
            free(origin.w_bits)
            origin.w_bits = NULL
        for wv in range(g.n_waves):   # the weight packed with the first wave's frames
            n0 = wv * g.wave
            packs = g.ch_tiles if wv == 0 and not packed else 0
            frame_jobs = (min(g.n_img, n0 + g.wave) - n0) * g.blocks   # the tile unit's
            zeros = (min(g.n_img, n0 + g.wave) - n0) * g.cin if g.idle_phases else 0
            if g.interleaved:
                _flat_offsets(&g, min(g.n_img, n0 + g.wave) - n0)
            if threads == 1:
                with nogil:
                    for job in range(packs):
                        _tile_pack_block(&g, w_p, job)
                    if g.form == PYPTO_TILE_FORM_AMX:
                        for job in range(frame_jobs):
                            _tile_frame_block(&g, dy_p, job, n0)
                    else:
                        for job in range(g.pairs):
                            _tile_fill_band(&g, dy_p, 0, job, n0)
                    for job in range(zeros):
                        _tile_zero_plane(&g, dx_p, job, n0)
                first = g.wave_items[wv]
                while first < g.wave_items[wv + 1]:
                    last = min(first + 8, g.wave_items[wv + 1])
                    with nogil:
                        for item in range(first, last):
                            _tile_item(&g, item, dx_p, n0, 0)
                    first = last
                    PyErr_CheckSignals()
            else:
                if g.bands > 1:
                    _tile_wave_banded(&g, dy_p, w_p, dx_p, wv, n0, packs, zeros, threads,
                                      stop, next_check)
                    pypto_raise_if(stop[0])
                    continue
                # the tile unit: the pack's jobs one at a time; the frames' in chunks (a 7x7
                # plane was a job of ~40 ns, and two threads taking jobs one by one from a
                # shared counter filled them slower than one thread)
                first, last = g.wave_items[wv], g.wave_items[wv + 1]
                chunk = _frame_chunk(&g, frame_jobs, threads)
                with nogil, parallel(num_threads=threads):
                    for job in prange(packs, schedule="dynamic"):
                        _tile_pack_block(&g, w_p, job)
                    for part in prange((frame_jobs + chunk - 1) // chunk, schedule="dynamic"):
                        for job in range(part * chunk, min(frame_jobs, (part + 1) * chunk)):
                            _tile_frame_block(&g, dy_p, job, n0)
                    for job in prange(zeros, schedule="static"):
                        _tile_zero_plane(&g, dx_p, job, n0)
                with nogil, parallel(num_threads=threads):
                    for item in prange(first, last, schedule="dynamic"):
                        if pypto_stopped(stop):
                            continue
                        _tile_item(&g, item, dx_p, n0, threadid())
                        if threadid() == 0 and pypto_seconds() >= next_check[0]:
                            next_check[0] = pypto_seconds() + SIGNAL_SECONDS
                            pypto_check_signals(stop)
                pypto_raise_if(stop[0])
        if not packed:
            _note_panels(&origin, panel_key, w_p, w.len // 2)
    finally:
        _give_buffer(SLOT_SCRATCH, block, capacity)
        _give_panels(panels, panel_capacity, &origin)
        _tile_free(&g)
    return "tile+amx" if g.use_amx else (
        "tile+dot" if g.form == PYPTO_TILE_FORM_DOT else "tile+emulated")
