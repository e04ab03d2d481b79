# The CPU feature table (pypto_cpu_features.h), always built for the baseline:
# pypto._kernels.dispatch imports it before any kernel module, to learn which ISA levels this CPU
# may run.

cdef extern from "pypto_cpu_features.h" nogil:
    ctypedef struct pypto_feature:
        const char *name
        int present
    enum: PYPTO_N_FEATURES
    void pypto_cpu_features(pypto_feature *out)
    int pypto_request_amx()


def cpu_features():
    """{feature name: present} as the running CPU and operating system report them."""
    cdef pypto_feature table[PYPTO_N_FEATURES]
    pypto_cpu_features(table)
    return {table[i].name.decode(): bool(table[i].present) for i in range(PYPTO_N_FEATURES)}


def request_amx_permission():
    """0 once this process may use AMX tile data (asked of the OS now if need be), else the
    errno of the refusal. Granting it enlarges every thread's signal frame for the rest of the
    process: pypto asks only when a call is about to use the tile unit."""
    return pypto_request_amx()
