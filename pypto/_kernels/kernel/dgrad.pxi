# The dgrad kernel, included by one small module per ISA level (dgrad_<level>.pyx): setup.py
# compiles each with its level's -march (pypto/_kernels/levels.py) and the headers pick their
# SIMD code from the compiler's macros. This file holds the module's API and dgrad(), which
# plans a call and runs it; the design (loop nest, register blocks) is in README.md.
#
# pypto._kernels.dispatch imports one such module, and only after the CPU check
# (pypto._kernels.features) says this CPU runs its level. dgrad() is called only with arguments
# that passed every validation rule.

include "decl.pxi"
include "plan.pxi"
include "buffers.pxi"
include "weights.pxi"
include "loops.pxi"
include "peak.pxi"

ISA = pypto_isa_name().decode()
MR = PYPTO_MR
NR = PYPTO_NR
HAS_BF16_DOT = bool(PYPTO_HAVE_BF16_DOT)
HAS_CHAN_VEC = bool(PYPTO_HAVE_CHAN_VEC)
HAS_CV_WIDE = bool(PYPTO_HAVE_CV_WIDE)
HAS_CV_WIDE_F32 = bool(PYPTO_HAVE_CV_WIDE_F32)
# stride-1 KhxKw tiles at least PIXEL_COLS wide with K >= PIXEL_K take the pixel kernels (0: never)
PIXEL_COLS, PIXEL_K = PYPTO_PIXEL_COLS, PYPTO_PIXEL_K
# calls of fewer multiply-adds run on one thread, whatever num_threads says
SERIAL_MACS = PYPTO_SERIAL_MACS
HAS_CV_STREAM = bool(PYPTO_HAVE_CV_STREAM)
HAS_FEW = bool(PYPTO_HAVE_FEW)


# how often the calling thread of a parallel call looks for Ctrl-C between its work items
cdef double SIGNAL_SECONDS = 0.05


def openmp_enabled():
    """True when this module was built with OpenMP (else it runs on one thread)."""
    return bool(PYPTO_HAVE_OPENMP)


def dgrad(dy, w, dx, int dtype, tuple attrs, tuple tiles, tuple vec_cw, int num_threads,
          bint use_bf16_dot=True, bint use_chan_vec=True, bint use_few=True, bint use_wide=True,
          int64_t stream_bytes=STREAM_BYTES, int64_t unpermute_macs=UNPERMUTE_MACS,
          int64_t serial_macs=SERIAL_MACS):
    """dx = dgrad(dy, w); C-contiguous NCHW arrays (any buffer) of 2-byte elements, read as
    16-bit patterns (``dtype``: 0 fp16, 1 bf16); dx writable.

    attrs = (sh, sw, pt, pl, dh, dw); tiles = (m_rows, m_cols, nl1, kl1, ml0, kl0, nl0) from
    Tiling.kernel_tiles; vec_cw = (channels, columns) per write-out chunk. bf16 uses the
    dot-product micro-kernel when this build has one, ``use_bf16_dot`` is true and the data
    cannot produce subnormals. The channel-vector kernels serve tiles of whole blocks of 32
    input channels (a block's last panel of at most 16 on their 16-channel forms, AVX-512)
    where the build has them and ``use_chan_vec`` is true (the same bits either way), and the
    few-channel kernels tiles of at most 4 channels (all of Cin) where the build has them and
    ``use_few`` is true; with the bf16 dot product (on the avx512 level also with fp32), the
    wide channel-vector kernel (6 pixels x 64 channels) serves tiles of whole 64-channel blocks
    where ``use_wide`` is true. With
    several threads and a dx of at least ``stream_bytes``, the channel-vector write-out of
    whole-width stride-1 tiles stores dx's whole lines non-temporally where the build can.
    Skipping padding taps, the channel-vector kernels take a tile's positions in class order
    where that saves more than ``unpermute_macs`` multiply-adds per accumulator float it moves
    (tests: -1, class order wherever a tile has border positions; the same bits either way).
    A call of fewer than ``serial_macs`` multiply-adds runs on one thread (tests: 0, the team
    always).
    Returns the path taken: "bf16_dot" or "fp32", with "+chan_vec" (and "+wide") or "+few" when
    those served, "+group<G>" when work items held G images and "+stream" when the write-out
    streamed; or "non_finite", having written nothing, when the weight holds Inf or NaN (the
    caller's with_real_taps_only case).
    """
    # The buffer protocol, not typed memoryviews: those want a 'H' format (so float16 arrays
    # needed a uint16 view each) and cost about 0.5 us a call of the spec example's 16 us.
    cdef Py_buffer views[3]
    memset(views, 0, sizeof(views))   # a buffer not taken has obj NULL: its release does nothing
    try:
        _take_view(dy, &views[0], 0, "dy")
        _take_view(w, &views[1], 0, "w")
        _take_view(dx, &views[2], PyBUF_WRITABLE, "dx")
        return _dgrad(&views[0], &views[1], &views[2], dtype, attrs, tiles, vec_cw, num_threads,
                      use_bf16_dot, use_chan_vec, use_few, use_wide, stream_bytes,
                      unpermute_macs, serial_macs)
    finally:
        PyBuffer_Release(&views[0])
        PyBuffer_Release(&views[1])
        PyBuffer_Release(&views[2])


cdef int _take_view(object array, Py_buffer *view, int flags, str name) except -1:
    """view = array's C-contiguous buffer of 4 dimensions and 2-byte items, else raise (the
    caller releases it either way)."""
    PyObject_GetBuffer(array, view, PyBUF_C_CONTIGUOUS | flags)
    if view.ndim != 4 or view.itemsize != 2:
        raise ValueError(f"dgrad: {name} must have 4 dimensions of 2-byte elements, not "
                         f"{view.ndim} of {view.itemsize}-byte ones")
    return 0


cdef object _dgrad(const Py_buffer *dy, const Py_buffer *w, Py_buffer *dx, int dtype,
                   tuple attrs, tuple tiles, tuple vec_cw, int num_threads, bint use_bf16_dot,
                   bint use_chan_vec, bint use_few, bint use_wide, int64_t stream_bytes,
                   int64_t unpermute_macs, int64_t serial_macs):
    cdef Geometry g
    cdef int64_t kl1
    cdef uint16_t w_least, w_most, dy_least, dy_most
    cdef int dy_exponent, w_exponent
    # The dimensions come from the buffers; the caller validated them, and this keeps a
    # disagreement between the three from ever becoming a write past dx.
    if dy.shape[0] != dx.shape[0] or w.shape[0] != dy.shape[1] or w.shape[1] != dx.shape[1]:
        raise ValueError(f"dgrad: buffer shapes disagree: dy N={dy.shape[0]} "
                         f"Cout={dy.shape[1]}, w Cout={w.shape[0]} Cin={w.shape[1]}, "
                         f"dx N={dx.shape[0]} Cin={dx.shape[1]}")
    # One pass over the weight: Inf/NaN (before anything else) and its least exponent.
    cdef int64_t w_count = w.len // 2
    cdef const uint16_t *dy_p = <const uint16_t *>dy.buf
    cdef const uint16_t *w_p = <const uint16_t *>w.buf
    cdef uint16_t *dx_p = <uint16_t *>dx.buf
    _magnitudes(w_p, w_count, num_threads, &w_least, &w_most)
    if w_most >= _all_ones_exponent(dtype):
        return "non_finite"
    g.n_img, g.cout, g.hout, g.wout = dy.shape[0], dy.shape[1], dy.shape[2], dy.shape[3]
    g.cin, g.kh, g.kw = w.shape[1], w.shape[2], w.shape[3]
    g.hin, g.win = dx.shape[2], dx.shape[3]
    g.sh, g.sw, g.pt, g.pl, g.dh, g.dw = attrs
    g.dtype = dtype
    g.unpermute_macs = unpermute_macs
    g.dot_bf16 = dtype == 1 and PYPTO_HAVE_BF16_DOT and use_bf16_dot
    g.exact_zeros = dtype == 0
    if dtype == 1 and (g.dot_bf16 or (PYPTO_HAVE_CHAN_VEC and g.kh * g.kw > 1)):
        # Where the least exponents sum to at least 142, every product and partial sum is a
        # multiple of 2^-126: zero or normal, never -0.0, so the channel-vector kernels may
        # skip the padding's zero products (_multiply_cv). The dot-product instruction also
        # reads a subnormal input as zero (DAZ), which that sum alone does not exclude (a
        # subnormal dy against |w| >= 2^15): it runs only where neither input has one.
        _magnitudes(dy_p, dy.len // 2, num_threads, &dy_least, &dy_most)
        dy_exponent = pypto_bf16_least_exponent(dy_least)
        w_exponent = pypto_bf16_least_exponent(w_least)
        g.exact_zeros = _products_normal(dy_exponent, w_exponent)
        g.dot_bf16 = g.dot_bf16 and _flush_safe(dy_exponent, w_exponent)
    g.m_rows, g.m_cols, g.nl1, kl1, g.ml0, g.kl0, g.nl0 = tiles
    g.cout_l1 = kl1 // (g.kh * g.kw)
    g.vec_c, g.vec_w = vec_cw
    cdef int64_t group_pixels = CPU_GROUP_PIXELS
    cdef int64_t *tables = <int64_t *>malloc((3 * g.sh * g.sw + 2 * g.kh * g.kw)
                                             * sizeof(int64_t))
    if tables == NULL:
        raise MemoryError("pypto: no memory for the kernel's tap tables")
    _plan(&g, _threads_for(&g, num_threads, serial_macs), use_chan_vec, use_few, use_wide,
          group_pixels, tables)
    g.stream = g.chan_vec and PYPTO_HAVE_CV_STREAM and g.threads > 1 \
        and dx.len >= stream_bytes
    cdef int threads = g.threads
    cdef int64_t n_items = g.n_items, per_thread = g.per_thread
    cdef int64_t pair = 2 if g.dot_bf16 else 1
    cdef size_t panel_bytes = _panel_bytes(&g)
    cdef size_t panel_capacity, scratch_capacity
    cdef PanelOrigin origin
    cdef int64_t panel_key[PANEL_KEY_LEN]
    _panel_key(&g, panel_key)
    cdef void *w_packed = _take_panels(panel_bytes, &panel_capacity, &origin)
    cdef char *scratch_block = <char *>_take_buffer(SLOT_SCRATCH, _scratch_bytes(&g),
                                                    &scratch_capacity)
    cdef float *scratch = <float *>(scratch_block
                                    + (-<size_t>scratch_block) % (ALIGN * sizeof(float)))
    cdef int64_t item, first, last, t
    # written through a pointer: a variable assigned in a prange body is private to each thread
    cdef double check_at = pypto_seconds() + SIGNAL_SECONDS
    cdef double *next_check = &check_at
    cdef int stopped = 0
    cdef int *stop = &stopped
    # each thread packs a run of output channels (whole pairs with the dot product)
    cdef int64_t pack_step = ((g.cout + pair - 1) // pair + threads - 1) // threads * pair
    try:
        if w_packed == NULL or scratch_block == NULL:
            raise MemoryError(f"pypto: no memory for the kernel's buffers ({panel_bytes} bytes of "
                              f"weight panels, {threads * per_thread * 4} bytes of tile scratch)")
        g.w_packed = w_packed
        if not _panels_hold(&origin, panel_key, w_p, w_count):   # else packed from this weight
            free(origin.w_bits)
            origin.w_bits = NULL
            if threads == 1:   # no team to wake: small calls spend microseconds in each region
                with nogil:
                    _pack_weights(&g, w_p, 0, g.cout)
            else:
                with nogil, parallel(num_threads=threads):
                    for t in prange(threads, schedule="static", chunksize=1):
                        _pack_weights(&g, w_p, _min(t * pack_step, g.cout),
                                      _min((t + 1) * pack_step, g.cout))
            _note_panels(&origin, panel_key, w_p, w_count)
        if threads == 1:
            # Work items go in chunks so that Ctrl-C is noticed between them: a signal only
            # reaches Python code, and a whole large call could run for minutes.
            first = 0
            while first < n_items:
                last = _min(first + 8, n_items)
                with nogil:
                    for item in range(first, last):
                        _work_item(&g, item, dy_p, dx_p, scratch)
                first = last
                PyErr_CheckSignals()
        else:
            # One parallel region for all items: a region per chunk of items ended in a barrier,
            # where threads waited for the chunk's last item (1-4% at 2 threads). The calling
            # thread, the team's thread 0, looks for Ctrl-C between its items every
            # SIGNAL_SECONDS; a handler's exception stops the team before its next items.
            with nogil, parallel(num_threads=threads):
                for item in prange(n_items, schedule="dynamic"):
                    if pypto_stopped(stop):
                        continue
                    _work_item(&g, item, dy_p, dx_p, scratch + threadid() * per_thread)
                    if threadid() == 0 and pypto_seconds() >= next_check[0]:
                        next_check[0] = pypto_seconds() + SIGNAL_SECONDS
                        pypto_check_signals(stop)
            pypto_raise_if(stop[0])
    finally:
        _give_buffer(SLOT_SCRATCH, scratch_block, scratch_capacity)
        _give_panels(w_packed, panel_capacity, &origin)
        free(tables)
    return ("bf16_dot" if g.dot_bf16 else "fp32") + ("+chan_vec" if g.chan_vec else "") \
        + ("+wide" if g.chan_vec and g.wb == PYPTO_CVW_N else "") \
        + ("+few" if g.few else "") \
        + (f"+group{g.group}" if g.group > 1 else "") \
        + ("+stream" if g.stream else "")


include "tile_order.pxi"
