"""A copy of the wheel's framework library without its static symbol table and debug sections.

``libtensorflow_framework.so.2`` is 49.5 MB, 14 MB of which (``.symtab``, ``.strtab``,
``.debug_*``) the dynamic loader never maps; with the headers the GPU test needs, the exact file
does not fit the bundle's 64 MB. ``objcopy --strip-all`` drops those sections only, and
:func:`strip_copy` proves it: every section the loader maps (SHF_ALLOC: code, data, the dynamic
symbol table) and every program header must be byte-identical to the wheel's, so the program
runs the wheel's code. What is lost is symbol names of local functions in a debugger.
"""

from __future__ import annotations

import hashlib
import shutil
import struct
import subprocess
from pathlib import Path

from lmsforge.errors import LmsforgeError

STRIP_COMMAND = ("objcopy", "--strip-all")
_SHF_ALLOC = 0x2
_SHT_NOBITS = 8


def strip_copy(library: Path, dest: Path) -> None:
    """Write LIBRARY stripped to DEST; raises LmsforgeError if anything mapped differs."""
    if shutil.which(STRIP_COMMAND[0]) is None:
        raise LmsforgeError("objcopy not found: install binutils")
    proc = subprocess.run([*STRIP_COMMAND, str(library), str(dest)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise LmsforgeError(f"objcopy --strip-all {library.name} failed: "
                            f"{(proc.stderr.strip().splitlines() or ['no output'])[0]}")
    if loaded_image(library) != loaded_image(dest):
        raise LmsforgeError(f"stripping {library.name} changed a section the loader maps; "
                            "the bundle would not run the wheel's code")


def loaded_image(path: Path) -> tuple[tuple[object, ...], ...]:
    """What the dynamic loader sees of an ELF64 little-endian file: its program headers
    (without file offsets) and, per mapped section, name, address, size and sha256."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise LmsforgeError(f"{path} is not a 64-bit little-endian ELF file")
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", data, 0x36)
    segments = []
    for i in range(phnum):
        p_type, p_flags, _offset, vaddr, _paddr, filesz, memsz, align = struct.unpack_from(
            "<IIQQQQQQ", data, phoff + i * phentsize)
        segments.append(("segment", p_type, p_flags, vaddr, filesz, memsz, align))
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
               for i in range(shnum)]
    names_offset = headers[shstrndx][4]
    sections = []
    for name_at, sh_type, flags, addr, offset, size, *_ in headers:
        if not flags & _SHF_ALLOC:
            continue
        end = data.index(b"\0", names_offset + name_at)
        name = data[names_offset + name_at:end].decode()
        body = b"" if sh_type == _SHT_NOBITS else data[offset:offset + size]
        sections.append(("section", name, sh_type, flags, addr, size,
                         hashlib.sha256(body).hexdigest()))
    return tuple(segments + sections)
