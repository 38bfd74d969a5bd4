"""Finding members in tars written by GNU tar and Python's tarfile, in every format they write."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from shardsets import samples, tar_of

from fastload.shards.format.tar import BLOCK, Member, TarError, check_header, header, scan

LONG = "deep/" * 30 + "name-longer-than-a-ustar-field.jpg"


def _tarfile_members(path: Path) -> list[tuple[str, int, int]]:
    with tarfile.open(path) as tar:
        return [(m.name, m.offset_data, m.size) for m in tar if m.isreg()]


def _found(path: Path) -> list[tuple[str, int, int]]:
    return [(m.name, m.offset, m.size) for m in scan(str(path)).members]


@pytest.mark.parametrize(
    "fmt",
    [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT],
    ids=["ustar", "gnu", "pax"],
)
def test_scan_finds_what_tarfile_finds(tmp_path: Path, fmt: int) -> None:
    members = [*samples(3), ("dir/" + "x" * 90 + ".jpg", b"abc")]
    if fmt != tarfile.USTAR_FORMAT:
        members.append((LONG, b"long"))  # a GNU 'L' entry, or pax records
        members.append(("ünïcode.jpg", b"u"))
    path = tar_of(tmp_path / "t.tar", members, fmt=fmt)
    result = scan(str(path))
    assert result.problem is None
    assert _found(path) == _tarfile_members(path)
    data = path.read_bytes()
    for member in result.members:
        assert check_header(data[member.offset - BLOCK : member.offset], member) is None


@pytest.mark.skipif(shutil.which("tar") is None, reason="needs GNU tar")
@pytest.mark.parametrize("fmt", ["gnu", "pax", "ustar", "v7"])
def test_scan_reads_gnu_tars_output(tmp_path: Path, fmt: int) -> None:
    (tmp_path / "in").mkdir()
    names = ["a.jpg", "a.cls", "b.c.jpg"] + ([LONG.replace("/", "_")[:200]] if fmt != "v7" else [])
    if fmt in ("ustar", "v7"):
        names = [n for n in names if len(n) < 100]
    for k, name in enumerate(names):
        (tmp_path / "in" / name).write_bytes(bytes([k]) * (700 * k + 3))
    path = tmp_path / f"{fmt}.tar"
    subprocess.run(
        ["tar", "cf", str(path), f"--format={fmt}", *names], cwd=tmp_path / "in", check=True
    )
    assert scan(str(path)).problem is None
    assert _found(path) == _tarfile_members(path)


def test_a_tar_cut_inside_a_header_says_where(tmp_path: Path) -> None:
    whole = tar_of(tmp_path / "t.tar", samples(3)).read_bytes()
    first = scan(str(tmp_path / "t.tar")).members
    cut = tmp_path / "cut.tar"
    cut.write_bytes(whole[: first[2].offset - BLOCK + 100])  # 100 bytes into the third header
    result = scan(str(cut))
    assert [m.name for m in result.members] == [m.name for m in first[:2]]
    assert "truncated inside a tar header" in result.problem
    assert first[1].name in result.problem


def test_a_tar_cut_inside_a_member_keeps_it_with_its_claimed_size(tmp_path: Path) -> None:
    whole = tar_of(tmp_path / "t.tar", samples(2)).read_bytes()
    last = scan(str(tmp_path / "t.tar")).members[-1]
    cut = tmp_path / "cut.tar"
    cut.write_bytes(whole[: last.offset + last.size // 2])
    result = scan(str(cut))
    assert result.members[-1] == last and last.end > result.size


def test_garbage_after_a_member_is_a_problem_not_members(tmp_path: Path) -> None:
    whole = tar_of(tmp_path / "t.tar", samples(1)).read_bytes()
    members = scan(str(tmp_path / "t.tar")).members
    end = members[-1].offset + members[-1].size + (-members[-1].size % BLOCK)
    bad = tmp_path / "bad.tar"
    bad.write_bytes(whole[:end] + b"not a header".ljust(BLOCK, b"!"))
    result = scan(str(bad))
    assert len(result.members) == 2 and "no valid tar header" in result.problem


def test_compressed_and_foreign_files_are_named(tmp_path: Path) -> None:
    plain = tar_of(tmp_path / "t.tar", samples(1))
    packed = tmp_path / "t.tar.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    with pytest.raises(TarError, match=r"gzip-compressed.*decompress"):
        scan(str(packed))
    other = tmp_path / "notes.tar"
    other.write_bytes(b"hello, this is text and not a tar file\n" * 40)
    with pytest.raises(TarError, match="not a tar file"):
        scan(str(other))


def test_written_headers_read_back_with_tarfile(tmp_path: Path) -> None:
    path = tmp_path / "w.tar"
    with open(path, "wb") as out:
        for name, data in [("k.jpg", b"x" * 1000), (LONG, b"y")]:
            out.write(header(name, len(data)) + data + b"\0" * (-len(data) % BLOCK))
        out.write(b"\0" * 1024)
    with tarfile.open(path) as tar:
        assert [(m.name, m.size, m.mode) for m in tar] == [
            ("k.jpg", 1000, 0o444),
            (LONG, 1, 0o444),
        ]
    assert [m.name for m in scan(str(path)).members] == ["k.jpg", LONG]


def test_check_header_notices_another_member(tmp_path: Path) -> None:
    path = tar_of(tmp_path / "t.tar", samples(2))
    members = scan(str(path)).members
    data = path.read_bytes()
    block = data[members[1].offset - BLOCK : members[1].offset]
    assert check_header(block, members[1]) is None
    assert "bytes" in check_header(block, Member(members[1].name, members[1].offset, 7))
    assert "names" in check_header(block, Member("other.jpg", members[1].offset, members[1].size))
    assert "no tar header" in check_header(
        data[members[1].offset : members[1].offset + BLOCK], members[1]
    )


def test_check_header_reads_a_ustar_prefix_as_part_of_the_name(tmp_path: Path) -> None:
    """A header whose name field alone is the member's name, below a prefix, names another
    member; one with a bad checksum but the member's own name, size and type is its header."""
    tail = "q" * 60 + ".jpg"
    path = tar_of(tmp_path / "t.tar", [("p" * 60 + "/" + tail, b"abc")])
    (member,) = scan(str(path)).members
    block = path.read_bytes()[member.offset - BLOCK : member.offset]
    assert block[:100].rstrip(b"\0") == tail.encode() and block[345:346] == b"p"
    assert check_header(block, member) is None
    assert "names" in check_header(block, Member(tail, member.offset, member.size))
    plain = tar_of(tmp_path / "plain.tar", samples(1))
    first = scan(str(plain)).members[0]
    block = bytearray(plain.read_bytes()[first.offset - BLOCK : first.offset])
    block[148:156] = b"0000000\0"
    assert check_header(bytes(block), first) is None
