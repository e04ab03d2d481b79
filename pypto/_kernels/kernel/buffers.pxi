# The buffers kept between calls: the two slots (weight panels, tile scratch), taking and giving
# back a buffer, and kept_buffer_bytes() / release_buffers() for the module's users.

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

# What the kept panel buffer holds: the weight its panels were packed from (a copy of its 16-bit
# patterns, kept for weights of at most KEEP_WEIGHT_MAX bytes) and the plan values that lay the
# panels out. A call whose weight and values are equal uses the panels as they are: a repeated
# small call spent 15% of its kernel time packing (case a), and comparing its weight takes a
# tenth of that. Equal bits and values make equal panels, so no result can change.
cdef enum:
    KEEP_WEIGHT_MAX = 1 << 20
    PANEL_KEY_LEN = 11

cdef struct PanelOrigin:
    int64_t key[PANEL_KEY_LEN]   # _panel_key
    uint16_t *w_bits             # the weight's copy (malloc), or NULL: the panels are unknown
    int64_t w_count

cdef PanelOrigin _kept_origin   # of _kept[SLOT_PANELS]; w_bits NULL while nothing is known


cdef inline bint _keeps_weight_copy(int64_t w_count) noexcept nogil:
    """True when a weight of w_count elements is small enough to keep a copy of."""
    return w_count * sizeof(uint16_t) <= KEEP_WEIGHT_MAX


cdef void _panel_key(const Geometry *g, int64_t *key) noexcept nogil:
    """Every value _pack_weights lays the panels out by besides the weight (the tap tables and
    the panel offsets follow from them)."""
    key[0], key[1], key[2], key[3] = g.cout, g.cin, g.kh, g.kw
    key[4], key[5], key[6], key[7] = g.sh, g.sw, g.dh, g.dw
    key[8], key[9], key[10] = g.wb, g.dtype, g.dot_bf16


cdef bint _panels_hold(const PanelOrigin *origin, const int64_t *key, const uint16_t *w,
                       int64_t w_count) noexcept nogil:
    """True when panels described by ``origin`` are those that key and w would be packed into."""
    return (origin.w_bits != NULL and origin.w_count == w_count
            and memcmp(origin.key, key, sizeof(origin.key)) == 0
            and memcmp(origin.w_bits, w, w_count * sizeof(uint16_t)) == 0)


cdef void _note_panels(PanelOrigin *origin, const int64_t *key, const uint16_t *w,
                       int64_t w_count) noexcept nogil:
    """Record that the panels were just packed from w with key (when w is small enough to
    copy and the copy's memory is there; else nothing is known of them)."""
    free(origin.w_bits)
    origin.w_bits = NULL
    if not _keeps_weight_copy(w_count):
        return
    origin.w_bits = <uint16_t *>malloc(_max(1, w_count) * sizeof(uint16_t))
    if origin.w_bits != NULL:
        memcpy(origin.w_bits, w, w_count * sizeof(uint16_t))
        memcpy(origin.key, key, sizeof(origin.key))
        origin.w_count = w_count


cdef void *_take_panels(size_t size, size_t *capacity, PanelOrigin *origin):
    """_take_buffer of the panel slot; ``origin`` gets what the buffer holds (w_bits NULL when
    the buffer is a new one)."""
    global _kept_origin
    origin.w_bits = NULL
    if _kept[SLOT_PANELS] != NULL and _kept_bytes[SLOT_PANELS] >= size:
        origin[0] = _kept_origin
    else:
        free(_kept_origin.w_bits)
    _kept_origin.w_bits = NULL
    return _take_buffer(SLOT_PANELS, size, capacity)


cdef void _give_panels(void *p, size_t capacity, PanelOrigin *origin):
    """_give_buffer of the panel slot, with what the buffer holds (its copy of the weight is
    freed with the buffer when the buffer is not kept)."""
    global _kept_origin
    cdef void *before = _kept[SLOT_PANELS]
    _give_buffer(SLOT_PANELS, p, capacity)
    if p != NULL and _kept[SLOT_PANELS] == p and before != p:
        free(_kept_origin.w_bits)
        _kept_origin = origin[0]
    else:
        free(origin.w_bits)
    origin.w_bits = NULL


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
    """Bytes of kernel buffers kept for the next call (the weight copy of the panels' origin
    included)."""
    return sum(_kept_bytes[i] for i in range(2) if _kept[i] != NULL) + (
        _kept_origin.w_count * sizeof(uint16_t) if _kept_origin.w_bits != NULL else 0)


def release_buffers():
    """Free the kernel buffers kept for the next call."""
    for i in range(2):
        free(_kept[i])
        _kept[i] = NULL
    free(_kept_origin.w_bits)
    _kept_origin.w_bits = NULL
