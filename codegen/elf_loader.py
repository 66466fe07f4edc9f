"""Link x86-64 ELF relocatable objects (what `compile_program` emits) into this process, without
LLVM: only struct, mmap and ctypes, so a warm start from the disk cache never imports llvmlite.

Algorithm:
1) Parse the ELF64 little-endian header, section headers, symbol table and its string table with
   `struct`; accept only ET_REL objects for EM_X86_64.
2) Load every SHF_ALLOC section except unwind tables (`.eh_frame`, SHT_X86_64_UNWIND: nothing
   unwinds through generated code). TLS, static constructors/destructors (`.init_array`,
   `.ctors`, ...) and GNU ifuncs are refused: generated code has none and MCJIT as `jit.py` uses it
   would not run them either.
3) Scan the RELA sections of loaded sections: symbols used through a GOT relocation get a GOT
   slot; a PLT32 call to a symbol outside the image gets a stub `jmp *slot(%rip)` (the C library
   is usually more than 2 GiB away from an anonymous map).
4) Lay out three page-aligned segments in one anonymous mmap: code (executable sections, stubs),
   read-only data (rodata, GOT), writable data (data, bss, COMMON symbols); each section at a
   multiple of its sh_addralign (64 for AVX-512 constant pools).
5) Resolve symbols: defined ones are segment address + value; `_GLOBAL_OFFSET_TABLE_` is the GOT;
   undefined ones come from the `symbols` argument, then dlsym over this process (`CDLL(None)`),
   libm, libgcc_s; an unresolved strong symbol raises `ElfLoadError`, a weak one is 0.
6) Build the image in a bytearray, fill the GOT and stubs, apply each relocation with the x86-64
   psABI formula of its type (`_RELOCS`), range-check 32-bit fields, copy the image into the map,
   then mprotect code to RX and read-only data to R (W^X). An unknown relocation type raises
   `ElfLoadError`, so a caller can fall back to MCJIT.
The map lives as long as the `ElfLibrary` (unmapped when it is garbage collected).
7) With $ONNXJIT_PERF_MAP set, append every function's address, size and name to
   /tmp/perf-PID.map, where `perf report` looks up code without a file (a profile then names
   each kernel: `onnxjit_main_<id>.k3.conv_im2col_gemm.par0.task`).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
import threading
from collections.abc import Mapping
from typing import Any

from onnxjit.errors import CompileError

_PAGE = mmap.PAGESIZE
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_RELA = struct.Struct("<QQq")
# section types and flags, special section indexes, symbol binding/types (ELF gABI, x86-64 psABI)
_SHT_SYMTAB, _SHT_RELA, _SHT_NOBITS, _SHT_REL = 2, 4, 8, 9
_SHT_CTORS = (14, 15, 16)  # INIT_ARRAY, FINI_ARRAY, PREINIT_ARRAY
_SHT_X86_64_UNWIND = 0x70000001
_SHF_WRITE, _SHF_ALLOC, _SHF_EXEC, _SHF_TLS = 0x1, 0x2, 0x4, 0x400
_SHN_UNDEF, _SHN_LORESERVE, _SHN_ABS, _SHN_COMMON = 0, 0xFF00, 0xFFF1, 0xFFF2
_STB_LOCAL, _STB_WEAK = 0, 2
_STT_FUNC, _STT_TLS, _STT_GNU_IFUNC = 2, 6, 10
_CTOR_NAMES = (".init_array", ".fini_array", ".preinit_array", ".ctors", ".dtors")

# type -> (name, field bytes, range of a 4-byte field: "s" signed / "u" unsigned, value kind).
# Value kinds, with S symbol, A addend, P place, G GOT slot offset, GOT base, L PLT (stub or S):
#   abs S+A | pc S+A-P | got G+A | gotpcrel G+GOT+A-P | gotoff S+A-GOT | gotpc GOT+A-P
#   plt L+A-P | pltoff L-GOT+A
_RELOCS: dict[int, tuple[str, int, str, str]] = {
    1: ("R_X86_64_64", 8, "", "abs"),
    2: ("R_X86_64_PC32", 4, "s", "pc"),
    3: ("R_X86_64_GOT32", 4, "s", "got"),
    4: ("R_X86_64_PLT32", 4, "s", "plt"),
    9: ("R_X86_64_GOTPCREL", 4, "s", "gotpcrel"),
    10: ("R_X86_64_32", 4, "u", "abs"),
    11: ("R_X86_64_32S", 4, "s", "abs"),
    24: ("R_X86_64_PC64", 8, "", "pc"),
    25: ("R_X86_64_GOTOFF64", 8, "", "gotoff"),
    26: ("R_X86_64_GOTPC32", 4, "s", "gotpc"),
    27: ("R_X86_64_GOT64", 8, "", "got"),
    28: ("R_X86_64_GOTPCREL64", 8, "", "gotpcrel"),
    29: ("R_X86_64_GOTPC64", 8, "", "gotpc"),
    30: ("R_X86_64_GOTPLT64", 8, "", "got"),
    31: ("R_X86_64_PLTOFF64", 8, "", "pltoff"),
    41: ("R_X86_64_GOTPCRELX", 4, "s", "gotpcrel"),
    42: ("R_X86_64_REX_GOTPCRELX", 4, "s", "gotpcrel"),
}
_GOT_KINDS = ("got", "gotpcrel")
_STUB = 8  # jmp *disp32(%rip) is 6 bytes; padded with int3
_MASK64 = (1 << 64) - 1


class ElfLoadError(CompileError):
    """Object code this loader cannot link (malformed, an unknown relocation type, an
    unresolved symbol...): the caller may fall back to MCJIT."""


class ElfLibrary:
    """Object code linked into an anonymous map; holds the map (the code) alive."""

    def __init__(self, region: mmap.mmap, anchor: ctypes.Array, symbols: dict[str, int],
                 entry: str | None, entry_py: str | None, obj: Any = None):
        self.object = obj  # the CompiledObject linked, if the caller passed it (like MCJIT's)
        self._region = region  # unmapped when this object is collected
        self._anchor = anchor  # the exported buffer that gave the base address
        self.base = ctypes.addressof(anchor)
        self.size = len(region)
        self.symbols = symbols
        self.entry_addr = self.address(entry) if entry else 0
        self.entry_py_addr = self.address(entry_py) if entry_py else 0
        #: libraries this one's code calls into (a program's kernel groups), kept alive with it
        self.parts: list[ElfLibrary] = []
        #: ctypes functions calling the entries, made by the runtime once per arity
        self.entry_functions: dict = {}

    def address(self, name: str) -> int:
        """Address of a global symbol the object defines."""
        try:
            return self.symbols[name]
        except KeyError:
            raise ElfLoadError(f"object code does not define {name}") from None


# symbol lookup in this process --------------------------------------------------------------
_libs: list[ctypes.CDLL] = []
#: libm and libgcc_s are usually in the process already; opened only when a name is missing
_fallback = ["libm.so.6", "libgcc_s.so.1", "m"]
_libc: ctypes.CDLL | None = None
_lock = threading.Lock()
#: name -> address of every symbol found: the parts of one program, and every program of a
#: process, import the same few (a lookup makes a ctypes function object, and a miss in a
#: library raises): 250 lookups cost 8 ms of a warm start from the disk cache
_found: dict[str, int] = {}


def _dlsym(name: str) -> int:
    addr = _found.get(name)
    if addr:
        return addr
    addr = _lookup(name)
    if addr:  # (a miss may be found later, in a fallback library opened for another name)
        _found[name] = addr
    return addr


def _lookup(name: str) -> int:
    with _lock:
        if not _libs:
            _libs.append(ctypes.CDLL(None))
        done = 0
        while True:
            for lib in _libs[done:]:
                try:
                    return ctypes.cast(lib[name], ctypes.c_void_p).value or 0
                except AttributeError:
                    continue
            done = len(_libs)
            if not _fallback:
                return 0
            lib = _open(_fallback.pop(0))
            if lib is not None:
                _libs.append(lib)


def _open(soname: str) -> ctypes.CDLL | None:
    if "." not in soname:  # a bare name: ask ctypes.util (slow: it may run ldconfig)
        from ctypes import util

        path = util.find_library(soname)
        if not path:
            return None
        soname = path
    try:
        return ctypes.CDLL(soname)
    except OSError:
        return None


def _mprotect(addr: int, size: int, prot: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        _libc.mprotect.restype = ctypes.c_int
    if size and _libc.mprotect(addr, size, prot) != 0:
        raise ElfLoadError(f"mprotect failed (errno {ctypes.get_errno()})")


# parsing ------------------------------------------------------------------------------------
class _Section:
    __slots__ = ("index", "name", "type", "flags", "offset", "size", "link", "info", "align",
                 "segment", "addr")

    def __init__(self, index: int, name: str, fields: tuple):
        self.index, self.name = index, name
        (_, self.type, self.flags, _, self.offset, self.size, self.link, self.info, align,
         _) = fields
        self.align = max(1, align)
        self.segment = -1  # 0 code, 1 read-only, 2 writable; -1 not loaded
        self.addr = 0


def _cstr(data: bytes, offset: int) -> str:
    end = data.index(b"\0", offset)
    return data[offset:end].decode("utf-8", "replace")


def _parse(data: bytes) -> tuple[list[_Section], list[tuple], bytes]:
    """Section headers (named) and the symbol table (tuples of _SYM plus the name)."""
    if len(data) < _EHDR.size or data[:4] != b"\x7fELF":
        raise ElfLoadError("not an ELF object")
    ident, e_type, machine, *_, shoff, _flags, _eh, _ph, _phn, shentsize, shnum, shstrndx = \
        _EHDR.unpack_from(data)
    if ident[4] != 2 or ident[5] != 1 or e_type != 1 or machine != 62:
        raise ElfLoadError("not an ELF64 little-endian x86-64 relocatable object "
                           f"(class {ident[4]}, data {ident[5]}, type {e_type}, "
                           f"machine {machine})")
    if shnum == 0 or shentsize != _SHDR.size:  # extended section numbering: never from LLVM here
        raise ElfLoadError("unsupported section header table")
    raw = [_SHDR.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    shstr = raw[shstrndx]
    names = data[shstr[4]:shstr[4] + shstr[5]]
    sections = [_Section(i, _cstr(names, f[0]), f) for i, f in enumerate(raw)]
    for s in sections:
        if s.type != _SHT_NOBITS and s.offset + s.size > len(data):
            raise ElfLoadError(f"section {s.name} extends past the end of the object")
    symtabs = [s for s in sections if s.type == _SHT_SYMTAB]
    if len(symtabs) != 1:
        raise ElfLoadError(f"expected one symbol table, found {len(symtabs)}")
    st = symtabs[0]
    strs = sections[st.link]
    strtab = data[strs.offset:strs.offset + strs.size]
    syms = [(*f, _cstr(strtab, f[0])) for f in _SYM.iter_unpack(data[st.offset:st.offset
                                                                     + st.size])]
    return sections, syms, data


def _choose_sections(sections: list[_Section]) -> None:
    for s in sections:
        if not s.flags & _SHF_ALLOC or s.type == _SHT_X86_64_UNWIND or s.name == ".eh_frame":
            continue
        if s.flags & _SHF_TLS:
            raise ElfLoadError(f"thread-local section {s.name} is not supported")
        if s.size and (s.type in _SHT_CTORS or s.name.startswith(_CTOR_NAMES)):
            raise ElfLoadError(f"section {s.name} (static constructors) is not supported")
        s.segment = 0 if s.flags & _SHF_EXEC else 2 if s.flags & _SHF_WRITE else 1


def _relocations(sections: list[_Section], data: bytes) -> list[tuple[_Section, list[tuple]]]:
    """(target section, [(offset, type, symbol index, addend)]) for every loaded section."""
    out = []
    for r in sections:
        if r.type not in (_SHT_RELA, _SHT_REL) or sections[r.info].segment < 0:
            continue
        if r.type == _SHT_REL:
            raise ElfLoadError(f"REL relocations ({r.name}) are not supported on x86-64")
        rows = [(off, info & 0xFFFFFFFF, info >> 32, add)
                for off, info, add in _RELA.iter_unpack(data[r.offset:r.offset + r.size])]
        out.append((sections[r.info], rows))
    return out


# linking ------------------------------------------------------------------------------------
def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def load_elf(object_code: bytes, entry: str | None = None, entry_py: str | None = None,
             symbols: Mapping[str, int] | None = None, obj: Any = None) -> ElfLibrary:
    """Link `object_code` into this process and return its entry addresses (module docstring).

    `symbols` maps extra external names to addresses (looked up before the process's own);
    `obj` (the CompiledObject, read by the runtime) is kept as the library's `object`."""
    try:
        sections, syms, data = _parse(bytes(object_code))
        _choose_sections(sections)
        relocs = _relocations(sections, data)
        return _Linker(sections, syms, data, relocs, symbols or {}).link(entry, entry_py, obj)
    except (struct.error, IndexError, ValueError, KeyError) as e:
        raise ElfLoadError(f"malformed ELF object: {type(e).__name__}: {e}") from e


def load_compiled(obj: Any) -> ElfLibrary:
    """Link a `CompiledObject`: its parts (shared microkernels, kernel groups) first, in order,
    each in a map of its own with the symbols of the parts before it, then its entry's object
    with all the parts' symbols; the entry's library keeps the parts alive."""
    parts: list[ElfLibrary] = []
    symbols: dict[str, int] = {}
    for code in obj.parts:
        parts.append(load_elf(code, symbols=symbols))
        symbols.update(parts[-1].symbols)
    lib = load_elf(obj.object_code, obj.entry, obj.entry_py, symbols=symbols, obj=obj)
    lib.parts = parts
    return lib


class _Linker:
    def __init__(self, sections: list[_Section], syms: list[tuple], data: bytes,
                 relocs: list[tuple[_Section, list[tuple]]], extra: Mapping[str, int]):
        self.sections, self.syms, self.data = sections, syms, data
        self.relocs, self.extra = relocs, extra
        self.got: dict[int, int] = {}  # symbol index -> slot offset from the GOT base
        self.stubs: dict[int, int] = {}  # symbol index -> stub offset in the code segment
        self.common: dict[int, int] = {}  # symbol index -> offset in the writable segment
        self.used: set[int] = set()  # symbols some relocation refers to

    def _plan(self) -> list[int]:
        """Offsets of every section inside its segment; GOT slots, stubs; segment sizes."""
        for _, rows in self.relocs:
            for _, rtype, sym, _ in rows:
                spec = _RELOCS.get(rtype)
                if spec is None:
                    if rtype == 0:
                        continue
                    raise ElfLoadError(f"unsupported relocation type {rtype}")
                self.used.add(sym)
                external = self.syms[sym][3] == _SHN_UNDEF
                if spec[3] in _GOT_KINDS or (spec[3] == "plt" and external):
                    self.got.setdefault(sym, 8 * len(self.got))
                if spec[3] == "plt" and external:
                    self.stubs.setdefault(sym, 0)
        sizes = [0, 0, 0]
        for s in self.sections:
            if s.segment >= 0:
                s.addr = _align(sizes[s.segment], s.align)  # an offset until `_place`
                sizes[s.segment] = s.addr + s.size
        sizes[0] = _align(sizes[0], _STUB)
        for sym in self.stubs:
            self.stubs[sym] = sizes[0]
            sizes[0] += _STUB
        sizes[1] = _align(sizes[1], 8)
        self.got_offset = sizes[1]
        sizes[1] += 8 * len(self.got)
        for i, (_, _, _, shndx, value, size, _) in enumerate(self.syms):
            if shndx == _SHN_COMMON:  # value is the alignment of a tentative definition
                self.common[i] = _align(sizes[2], max(1, value))
                sizes[2] = self.common[i] + size
        return sizes

    def link(self, entry: str | None, entry_py: str | None, obj: Any) -> ElfLibrary:
        sizes = self._plan()
        starts = [0, _align(sizes[0], _PAGE)]
        starts.append(starts[1] + _align(sizes[1], _PAGE))
        total = max(_PAGE, starts[2] + _align(sizes[2], _PAGE))
        region = mmap.mmap(-1, total, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                           prot=mmap.PROT_READ | mmap.PROT_WRITE)
        anchor = (ctypes.c_char * total).from_buffer(region)
        base = ctypes.addressof(anchor)
        self.got_base = base + starts[1] + self.got_offset
        image = bytearray(total)
        for s in self.sections:
            if s.segment >= 0:
                s.addr += base + starts[s.segment]
                if s.type != _SHT_NOBITS:
                    at = s.addr - base
                    image[at:at + s.size] = self.data[s.offset:s.offset + s.size]
        addrs = [self._resolve(i, base + starts[2]) for i in range(len(self.syms))]
        for sym, slot in self.got.items():
            struct.pack_into("<Q", image, self.got_base - base + slot, addrs[sym])
        for sym, at in self.stubs.items():
            slot = self.got_base + self.got[sym]
            disp = slot - (base + at + 6)
            image[at:at + _STUB] = b"\xff\x25" + struct.pack("<i", disp) + b"\xcc\xcc"
            self.stubs[sym] = base + at
        for sec, rows in self.relocs:
            self._apply(image, base, sec, rows, addrs)
        region[:] = image
        _mprotect(base, starts[1], mmap.PROT_READ | mmap.PROT_EXEC)
        _mprotect(base + starts[1], starts[2] - starts[1], mmap.PROT_READ)
        exported = {name: addrs[i] for i, (_, info, _, shndx, _, _, name) in enumerate(self.syms)
                    if info >> 4 != _STB_LOCAL and shndx != _SHN_UNDEF}
        if os.environ.get("ONNXJIT_PERF_MAP"):
            self._perf_map(addrs)
        return ElfLibrary(region, anchor, exported, entry, entry_py, obj)

    def _perf_map(self, addrs: list[int]) -> None:
        rows = [f"{addrs[i]:x} {size:x} {name}\n"
                for i, (_, info, _, shndx, _, size, name) in enumerate(self.syms)
                if info & 0xF == _STT_FUNC and shndx != _SHN_UNDEF and size and addrs[i]]
        try:
            with open(f"/tmp/perf-{os.getpid()}.map", "a") as f:
                f.writelines(rows)
        except OSError:  # a profiling aid: no map is better than a failed compile
            pass

    def _resolve(self, i: int, rw_base: int) -> int:
        _, info, _, shndx, value, _, name = self.syms[i]
        if info & 0xF in (_STT_TLS, _STT_GNU_IFUNC):
            raise ElfLoadError(f"symbol {name!r}: TLS and ifunc symbols are not supported")
        if shndx == _SHN_UNDEF:
            if i == 0:
                return 0
            if name == "_GLOBAL_OFFSET_TABLE_":
                return self.got_base
            addr = self.extra.get(name) or _dlsym(name)
            if not addr and info >> 4 != _STB_WEAK and i in self.used:
                raise ElfLoadError(f"undefined symbol {name!r} not found in this process")
            return addr
        if shndx == _SHN_ABS:
            return value
        if shndx == _SHN_COMMON:
            return rw_base + self.common[i]
        if shndx >= _SHN_LORESERVE:
            raise ElfLoadError(f"symbol {name!r} in unsupported section index {shndx:#x}")
        sec = self.sections[shndx]
        if sec.segment < 0:
            return 0  # only an error if a relocation uses it (`_apply` checks)
        return sec.addr + value

    def _apply(self, image: bytearray, base: int, sec: _Section, rows: list[tuple],
               addrs: list[int]) -> None:
        got = self.got_base
        for off, rtype, sym, addend in rows:
            if rtype == 0:
                continue
            name, width, rng, kind = _RELOCS[rtype]
            s = addrs[sym]
            shndx = self.syms[sym][3]
            if not s and 0 < shndx < _SHN_LORESERVE and self.sections[shndx].segment < 0:
                raise ElfLoadError(f"{name} in {sec.name} refers to unloaded section "
                                   f"{self.sections[shndx].name}")
            if off + width > sec.size:
                raise ElfLoadError(f"{name} at {off:#x} is outside {sec.name}")
            p = sec.addr + off
            if kind == "abs":
                v = s + addend
            elif kind == "pc":
                v = s + addend - p
            elif kind == "got":
                v = self.got[sym] + addend
            elif kind == "gotpcrel":
                v = got + self.got[sym] + addend - p
            elif kind == "gotoff":
                v = s + addend - got
            elif kind == "gotpc":
                v = got + addend - p
            elif kind == "plt":
                v = self.stubs.get(sym, s) + addend - p
            else:  # pltoff: 64 bits reach any address, so the symbol itself serves as its PLT
                v = s - got + addend
            at = p - base
            if width == 8:
                struct.pack_into("<Q", image, at, v & _MASK64)
            elif rng == "u" and 0 <= v < 1 << 32:
                struct.pack_into("<I", image, at, v)
            elif rng == "s" and -(1 << 31) <= v < 1 << 31:
                struct.pack_into("<i", image, at, v)
            else:
                what = self.syms[sym][6] or self.sections[shndx].name
                raise ElfLoadError(f"{name} to {what!r} out of range ({v:#x}) in {sec.name}")
