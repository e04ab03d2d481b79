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
