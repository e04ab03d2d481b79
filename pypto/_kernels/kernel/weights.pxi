# The weight: one parallel scan of its magnitudes (Inf/NaN and the least exponent, which decides
# the bf16 dot product) and its packing into per-phase panels of wb input channels, in the
# weight's memory order.

cdef enum:
    PACK_BLOCK = 4096   # floats on the stack for one converted weight block (MR x Kh*Kw)


def scan_magnitudes(const uint16_t[::1] bits, int dtype, int num_threads=1):
    """(any Inf or NaN, least exponent of the nonzero values as bf16) of 16-bit patterns
    (``dtype``: 0 fp16, 1 bf16): the kernel's one pass over the weight (_magnitudes)."""
    cdef uint16_t least = 0xffff, most = 0
    if bits.shape[0] > 0:
        _magnitudes(&bits[0], bits.shape[0], num_threads, &least, &most)
    return most >= _all_ones_exponent(dtype), pypto_bf16_least_exponent(least)


cdef inline uint16_t _all_ones_exponent(int dtype) noexcept nogil:
    return 0x7f80 if dtype == 1 else 0x7c00


cdef inline bint _products_normal(int dy_exponent, int w_exponent) noexcept nogil:
    """The least biased exponents of dy's and w's nonzero magnitudes sum to at least 142: every
    product and partial sum is a multiple of 2^-126, so zero or normal, never -0.0."""
    return dy_exponent + w_exponent >= 142


cdef inline bint _flush_safe(int dy_exponent, int w_exponent) noexcept nogil:
    """An instruction that flushes subnormals (DAZ on inputs, FTZ on results: the bf16 dot
    product, the AMX tile unit) computes IEEE's bits: no product or sum can be subnormal, nor
    any input (a subnormal dy against |w| >= 2^15 passes the sum alone)."""
    return _products_normal(dy_exponent, w_exponent) and min(dy_exponent, w_exponent) >= 1


cdef void _magnitudes(const uint16_t *x, int64_t n, int num_threads, uint16_t *least,
                      uint16_t *most) noexcept:
    """pypto_magnitudes over n values, in parallel chunks (the weight and dy can be large)."""
    cdef int64_t chunk = 1 << 16, n_chunks = (n + chunk - 1) // chunk, i
    cdef int threads = <int>_max(1, num_threads)  # the call's team, whatever the chunks (plan.pxi)
    cdef uint16_t *found = NULL
    if n_chunks > 1 and threads > 1:
        found = <uint16_t *>malloc(2 * n_chunks * sizeof(uint16_t))
    if found == NULL:   # one chunk, one thread (small calls: no team to wake) or no memory
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


cdef void _pack_weights(const Geometry *g, const uint16_t *w, int64_t co_begin,
                        int64_t co_end) noexcept nogil:
    """_pack_weights_in_env in the kernel's floating-point environment (fp16 widens through
    F16C, whose subnormal inputs a thread's DAZ would flush)."""
    cdef pypto_fpenv saved = pypto_fp_enter()
    _pack_weights_in_env(g, w, co_begin, co_end)
    pypto_fp_leave(saved)


cdef void _pack_weights_in_env(const Geometry *g, const uint16_t *w, int64_t co_begin,
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
    cdef int64_t phase, ntaps, co, ti, r, rows, first, base, tap_index, cb
    cdef int64_t taps = g.kh * g.kw
    cdef const uint16_t *src
    cdef const uint16_t *src2
    cdef uint32_t *dst
    # one wb x Kh*Kw block as 32-bit elements: fp32 values, or bf16 pairs (co, co + 1)
    cdef float widened[PACK_BLOCK]
    cdef uint32_t *block32 = <uint32_t *>widened
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
            src2 = src + g.cin * taps if co + 1 < g.cout else NULL  # odd Cout: partner 0
            # the wb x Kh*Kw source block is contiguous: one vectorized pass makes its 32-bit
            # elements, and each tap's column of them is then one strided gather
            if block_fits:
                if g.dot_bf16:
                    pypto_pair16(src, src2, rows * taps, block32)
                else:
                    pypto_widen(src, widened, rows * taps, g.dtype)
            for phase in range(g.sh * g.sw):
                ntaps = g.tap_count[phase]
                first = g.tap_first[phase]
                base = g.w_offset[phase] + cb * _k_len(g, ntaps)
                for ti in range(ntaps):
                    tap_index = g.tap_kh[first + ti] * g.kw + g.tap_kw[first + ti]
                    # the panel row of k = (co, tap): wb 32-bit elements, one (W[co], W[co+1])
                    # pair each with the dot product (k counts pairs), else one fp32 value each
                    if g.dot_bf16:
                        dst = <uint32_t *>(<uint16_t *>g.w_packed + base) \
                            + ((co // 2) * ntaps + ti) * wb
                    else:
                        dst = <uint32_t *>(<float *>g.w_packed + base) + (co * ntaps + ti) * wb
                    if block_fits:   # the block's 32-bit elements were made once, above
                        pypto_gather32(block32 + tap_index, taps, rows, dst)
                    elif g.dot_bf16:
                        for r in range(rows):
                            dst[r] = src[r * taps + tap_index] | (
                                0 if src2 == NULL else <uint32_t>src2[r * taps + tap_index] << 16)
                    else:
                        for r in range(rows):
                            pypto_widen(&src[r * taps + tap_index], <float *>&dst[r], 1, g.dtype)
                    pypto_zero32(dst + rows, wb - rows)
            cb += wb
        co += step
    # rows past Cin and the missing partner of an odd last channel are written as 0, so the
    # panels need no zeroed allocation (they are often the last call's buffer)
