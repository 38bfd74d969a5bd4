"""Tar files as shards: finding each member's data without reading it, and writing members.

A shard is a POSIX tar file (the WebDataset layout). Reading a member by its offset needs only
the offsets of its data, which :func:`scan` finds by hopping from header to header (one 512-byte
read per member, whatever the member's size). The long-name forms of GNU tar (``L`` entries) and
of POSIX pax (``x`` entries), and GNU's base-256 sizes, are understood, so that shards made by
``tar``, Python's ``tarfile``, webdataset's ``TarWriter`` and img2dataset all read alike.
"""

from __future__ import annotations

import os
import tarfile
from dataclasses import dataclass

__all__ = [
    "BLOCK",
    "END",
    "Member",
    "Scan",
    "TarError",
    "check_header",
    "header",
    "padding",
    "scan",
]

BLOCK = 512
END = b"\0" * (2 * BLOCK)  # the end-of-archive marker: two zero blocks
_REGULAR = (b"0", b"\0", b"7")  # regular file, old-style regular file, contiguous file
_GZIP, _BZIP2, _XZ, _ZSTD = b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd"


class TarError(ValueError):
    """A file that is not a readable uncompressed tar; the message names it and says why."""


@dataclass(frozen=True)
class Member:
    """A regular file in a tar: its name, and where its data lies.

    Attributes:
        name: The member's path inside the tar.
        offset: The offset of its first data byte (its header is the 512 bytes before).
        size: Its data's length in bytes.
    """

    name: str
    offset: int
    size: int

    @property
    def end(self) -> int:
        return self.offset + self.size


@dataclass(frozen=True)
class Scan:
    """What :func:`scan` found.

    Attributes:
        members: The regular files, in the tar's order. The last one runs past the end of a
            file cut inside it.
        problem: Why the scan stopped before the end-of-archive marker and before the end of
            the file (a header cut short, bytes that are not a tar header), or ``None``.
        size: The file's size in bytes.
    """

    members: list[Member]
    problem: str | None
    size: int


def padding(size: int) -> int:
    """The zero bytes that follow ``size`` bytes of data up to the next block."""
    return -size % BLOCK


def _number(field: bytes) -> int:
    """A numeric header field: octal text, or GNU's base-256 (first byte's high bit set)."""
    if field[:1] and field[0] & 0x80:
        value = int.from_bytes(field[1:], "big")
        return value - (1 << (8 * len(field) - 8)) if field[0] & 0x40 else value
    text = field.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def _valid_checksum(block: bytes) -> bool:
    try:
        stored = _number(block[148:156])
    except ValueError:
        return False
    rest = block[:148] + block[156:]
    if stored == sum(rest) + 8 * 32:  # the checksum field counts as eight spaces
        return True
    # some old tars summed signed chars
    return stored == sum(b - 256 if b >= 128 else b for b in rest) + 8 * 32


def _name(block: bytes) -> str:
    name = block[:100].split(b"\0", 1)[0]
    if block[257:262] == b"ustar":
        prefix = block[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + name
    return name.decode("utf-8", "surrogateescape")


def _pax(data: bytes) -> dict[str, str]:
    """The records of a pax extended header (``"%d %s=%s\\n"``)."""
    records, pos = {}, 0
    while pos < len(data):
        space = data.find(b" ", pos)
        if space < 0:
            break
        length = int(data[pos:space])
        if length <= 0:
            break
        key, _, value = data[space + 1 : pos + length - 1].partition(b"=")
        records[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return records


def _compressed(head: bytes) -> str | None:
    for magic, name in ((_GZIP, "gzip"), (_BZIP2, "bzip2"), (_XZ, "xz"), (_ZSTD, "zstd")):
        if head.startswith(magic):
            return name
    return None


def scan(path: str) -> Scan:
    """Find every regular member of a tar file without reading their data.

    Args:
        path: The tar file.

    Returns:
        The members, and what stopped the scan early, if anything.

    Raises:
        TarError: The file is compressed, or does not start with a tar header.
        OSError: It cannot be opened or read.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        return _scan(fd, path, size)
    finally:
        os.close(fd)


def _scan(fd: int, path: str, size: int) -> Scan:
    members: list[Member] = []
    pos, pax = 0, {}
    long_name: str | None = None
    while True:
        if pos >= size:
            return Scan(members, None, size)  # ended without the end-of-archive marker
        block = os.pread(fd, BLOCK, pos)
        after = f" after member {members[-1].name!r}" if members else ""
        if len(block) < BLOCK:
            return Scan(members, f"truncated inside a tar header at byte {pos}{after}", size)
        if block == b"\0" * BLOCK:
            return Scan(members, None, size)
        if not _valid_checksum(block):
            if pos == 0:
                compression = _compressed(block)
                if compression is not None:
                    raise TarError(
                        f"{path!r} is a {compression}-compressed file: shards are read by offset, "
                        f"which needs an uncompressed tar; decompress it first"
                    )
                raise TarError(f"{path!r} is not a tar file (no tar header at its start)")
            return Scan(members, f"no valid tar header at byte {pos}{after}", size)
        kind, length = block[156:157], _number(block[124:136])
        data = pos + BLOCK
        if kind in (b"L", b"x", b"g"):  # the next member's long name, or pax records
            if data + length > size:
                return Scan(members, f"truncated inside a tar header at byte {pos}{after}", size)
            payload = os.pread(fd, length, data)
            if kind == b"L":
                long_name = payload.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            elif kind == b"x":
                pax = _pax(payload)
            pos = data + length + padding(length)
            continue
        name = pax.get("path") or long_name or _name(block)
        if "size" in pax:
            length = int(pax["size"])
        if kind in _REGULAR:
            members.append(Member(name, data, length))
            if data + length > size:  # cut inside it: the reader of that member says so
                return Scan(members, None, size)
        pos = data + length + padding(length)
        long_name, pax = None, {}


def header(name: str, size: int, *, mtime: int = 0) -> bytes:
    """The header block(s) of a regular member (ustar; pax records only for what ustar cannot
    hold), read-only for everyone, owned by root: the bytes Python's ``tarfile`` writes."""
    raw = name.encode("ascii") if name.isascii() else b""
    if not raw or len(raw) > 100 or size >= 8**11 or not 0 <= mtime < 8**11:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = size, mtime, 0o444
        return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="surrogateescape")
    # the common case built directly: tarfile takes ~45 us a header, a third of packing's time
    block = bytearray(BLOCK)
    block[: len(raw)] = raw
    block[100:136] = b"0000444\0" + b"0000000\0" * 2 + b"%011o\0" % size
    block[136:157] = b"%011o\0" % mtime + b" " * 8 + b"0"
    block[257:265] = b"ustar\x0000"
    block[148:155] = b"%06o\0" % sum(block)
    return bytes(block)


def _plainly_its_own(block: bytes, member: Member) -> bool:
    """Whether ``block`` is a file's header holding ``member``'s whole name (no ustar prefix)
    and size."""
    if len(block) < BLOCK or block[156:157] not in _REGULAR or block[345:346] != b"\0":
        return False
    if block[:100].split(b"\0", 1)[0] != member.name.encode("utf-8", "surrogateescape"):
        return False
    try:
        return _number(block[124:136]) == member.size
    except ValueError:
        return False


def check_header(block: bytes, member: Member) -> str | None:
    """Why the 512 bytes before ``member``'s data are not its header, or ``None`` if they are.

    The size must match, and the name too where the header can hold it whole (a long name lives
    in an entry before the header). A header holding the member's own name, size and a file's
    type is its header: its checksum is summed only where that is not so (a sum of 512 bytes
    in Python, for every member of every sample read).
    """
    if _plainly_its_own(block, member):
        return None
    if len(block) < BLOCK or not _valid_checksum(block[:BLOCK]):
        return "no tar header before its data"
    if block[156:157] not in _REGULAR:
        return "the header before its data is not a file's"
    size = _number(block[124:136])
    if size != member.size and size != 0:  # a pax size record leaves 0 in the header
        return f"the tar header says {size} bytes, the index {member.size}"
    stored = _name(block[:BLOCK])
    # a pax writer puts a stand-in in the header for a name that is long or not ASCII
    plain = member.name.isascii() and len(member.name) <= 100
    if plain and stored != member.name:
        return f"the tar header names {stored!r}"
    return None
