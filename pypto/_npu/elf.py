"""Is a file a shared library this process can load? Checked before dlopen.

glibc's loader maps a library's segments by their file offsets; in a truncated or corrupted
file they run past the end, and touching them kills the process with SIGBUS inside dlopen.
Reading the ELF header and program headers first turns that into an ordinary error.
"""

import os
import platform
import struct

__all__ = ["elf_problem"]

_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")  # Elf64_Ehdr, little-endian
_PROGRAM_HEADER = struct.Struct("<IIQQQQQQ")  # Elf64_Phdr
_PT_LOAD, _PT_DYNAMIC = 1, 2
_ET_DYN = 3
_MACHINES = {"x86_64": 62, "aarch64": 183}  # e_machine of the hosts pypto runs on


def elf_problem(path):
    """Why ``path`` is not a loadable 64-bit little-endian shared library for this machine, or
    None when its headers and every loaded segment lie inside the file."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            header = f.read(_HEADER.size)
            if len(header) < _HEADER.size:
                return f"it is {size} bytes, shorter than an ELF header"
            (
                ident,
                e_type,
                e_machine,
                _,
                _,
                e_phoff,
                e_shoff,
                _,
                _,
                e_phentsize,
                e_phnum,
                e_shentsize,
                e_shnum,
                _,
            ) = _HEADER.unpack(header)
            if ident[:4] != b"\x7fELF":
                return "it is not an ELF file"
            if e_phoff > size:
                return f"it is truncated: its program headers start past its {size} bytes"
            f.seek(e_phoff)  # only the headers are read: libraries can be large
            table = f.read(e_phnum * e_phentsize)
    except (OSError, ValueError) as exc:
        return f"cannot read it ({exc.strerror or exc})"
    if ident[4] != 2 or ident[5] != 1:
        return "it is not a 64-bit little-endian ELF file"
    if e_type != _ET_DYN:
        return f"it is not a shared library (ELF type {e_type})"
    want = _MACHINES.get(platform.machine())
    if want is not None and e_machine != want:
        return f"it is built for another machine (ELF machine {e_machine}, this one is {want})"
    if e_phentsize != _PROGRAM_HEADER.size or e_phnum == 0:
        return "its program header table is malformed"
    if e_phoff + e_phnum * e_phentsize > size or len(table) < e_phnum * e_phentsize:
        return f"it is truncated: its program headers end past its {size} bytes"
    if e_shnum and e_shoff + e_shnum * e_shentsize > size:
        return f"it is truncated: its section headers end past its {size} bytes"
    for i in range(e_phnum):
        p_type, _, p_offset, _, _, p_filesz, _, _ = _PROGRAM_HEADER.unpack_from(
            table, i * e_phentsize
        )
        if p_type in (_PT_LOAD, _PT_DYNAMIC) and p_offset + p_filesz > size:
            return (
                f"it is truncated: a segment ends at byte {p_offset + p_filesz}, past its "
                f"{size} bytes"
            )
    return None
