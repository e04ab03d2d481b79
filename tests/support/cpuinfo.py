"""The CPU's feature flags as Linux reports them: an independent reading of CPUID (the kernel's
own decoding, with what it disabled removed), for tests that check pypto's feature table or
depend on what a peer library does on this CPU."""


def cpuinfo_flags():
    """(the feature line's name, its flags): ("flags", {...}) on x86, ("Features", {...}) on
    AArch64; (None, None) without /proc/cpuinfo or such a line."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return None, None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return key.strip(), set(value.split())
    return None, None
