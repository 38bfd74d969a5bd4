"""Grouping members into samples by webdataset's own rule, and the index DALI reads."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from shardsets import samples, tar_of
from webdataset.tariterators import base_plus_ext

from fastload.shards.format import index as indexes
from fastload.shards.format.tar import scan

NAMES = [
    "a.jpg",
    "a.b.jpg",
    "dir/sub/key.seg.png",
    "dir.with.dots/key.jpg",
    "UPPER.JPEG",
    "._hidden.jpg",
    ".DS_Store",
    "__MACOSX/._a.jpg",
    "README",
    "dir/noext",
    "__meta__",
]


@pytest.mark.parametrize("name", NAMES)
def test_keys_follow_webdataset(name: str) -> None:
    theirs = base_plus_ext(name)
    mine = indexes.split_name(name)
    if theirs == (None, None):
        assert mine is None
    elif name.startswith("__"):
        assert mine is None  # webdataset skips these entries before it splits names
    else:
        assert mine == theirs


def _members(tmp_path: Path, members: list[tuple[str, bytes]]):
    path = tar_of(tmp_path / "g.tar", members)
    return scan(str(path)).members


def test_group_makes_samples_of_consecutive_members(tmp_path: Path) -> None:
    found, problems = indexes.group(_members(tmp_path, samples(3)))
    assert problems == []
    assert [(k, [p.ext for p in parts]) for k, parts in found] == [
        ("s0000", ["cls", "jpg"]),
        ("s0001", ["cls", "jpg"]),
        ("s0002", ["cls", "jpg"]),
    ]


def test_group_leaves_junk_out_quietly_and_names_what_makes_no_sample(tmp_path: Path) -> None:
    members = [
        ("._s0000.jpg", b"x"),
        *samples(1),
        (".DS_Store", b"x"),
        ("__MACOSX/._s0000.jpg", b"x"),
        ("README", b"notes"),
        *samples(1, start=1),
    ]
    found, problems = indexes.group(_members(tmp_path, members))
    assert [k for k, _ in found] == ["s0000", "s0001"]
    assert problems == [("README", "its name has no extension, so it belongs to no sample")]


def test_group_refuses_split_and_repeated_keys(tmp_path: Path) -> None:
    a, b = samples(1), samples(1, start=1)
    members = [a[0], *b, a[1], *samples(1, start=2), ("s0002.jpg", b"again")]
    found, problems = indexes.group(_members(tmp_path, members))
    # s0000 is split by s0001, s0002 has two jpg: both are left out, s0001 is whole
    assert [key for key, _ in found] == ["s0001"]
    names = [name for name, _ in problems]
    assert names == ["s0000.jpg", "s0002.jpg"]
    assert "appears twice" in problems[0][1] and "two 'jpg' members" in problems[1][1]


def test_index_round_trips_in_dalis_format(tmp_path: Path) -> None:
    found, _ = indexes.group(_members(tmp_path, samples(2)))
    path = tmp_path / "g.idx"
    indexes.write_index(path, found)
    lines = path.read_text().splitlines()
    assert lines[0] == "v1.2 2"
    ext, offset, size, name = lines[1].split()[:4]
    assert (ext, name) == ("cls", "s0000.cls") and int(offset) % 512 == 0 and size == "1"
    assert indexes.read_index(path) == found


def test_load_writes_the_index_beside_and_uses_it_next_time(tmp_path: Path) -> None:
    shard = tar_of(tmp_path / "a.tar", samples(2))
    first = indexes.load(str(shard))
    assert first.index == str(tmp_path / "a.idx") and (tmp_path / "a.idx").exists()
    again = indexes.load(str(shard))
    assert again.samples == first.samples and again.index == first.index


def test_load_makes_the_index_again_when_the_shard_is_newer(tmp_path: Path) -> None:
    shard = tar_of(tmp_path / "a.tar", samples(2))
    indexes.load(str(shard))
    tar_of(shard, samples(3))  # rewritten with another sample
    later = time.time() + 5
    os.utime(shard, (later, later))
    assert len(indexes.load(str(shard)).samples) == 3
    assert indexes.read_index(tmp_path / "a.idx")[2][0] == "s0002"


def test_an_index_that_does_not_fit_its_shard_is_made_again(tmp_path: Path) -> None:
    shard = tar_of(tmp_path / "a.tar", samples(12))
    indexes.load(str(shard))
    tar_of(shard, samples(1))  # smaller now; the index claims offsets past its end
    old = time.time() - 100
    os.utime(shard, (old, old))  # and it even looks older than its index
    assert len(indexes.load(str(shard)).samples) == 1


def test_a_read_only_folder_keeps_its_index_in_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ro").mkdir()
    shard = tar_of(tmp_path / "ro" / "a.tar", samples(2))
    monkeypatch.setenv("FASTLOAD_CACHE_DIR", str(tmp_path / "cache"))
    real_write = indexes.write_index

    def refuse_beside(path, found):  # root ignores folder permissions: refuse as EROFS would
        if Path(path).parent == tmp_path / "ro":
            raise OSError(30, "Read-only file system")
        real_write(path, found)

    monkeypatch.setattr(indexes, "write_index", refuse_beside)
    loaded = indexes.load(str(shard))
    cached = indexes.cached_index_path(str(shard))
    assert loaded.index == str(cached) and cached.exists()
    assert not (tmp_path / "ro" / "a.idx").exists()
    assert indexes.load(str(shard)).index == str(cached)


def test_a_broken_shard_gets_no_index(tmp_path: Path) -> None:
    whole = tar_of(tmp_path / "a.tar", samples(2)).read_bytes()
    (tmp_path / "a.tar").write_bytes(whole[:1500])  # cut inside the second member's header
    loaded = indexes.load(str(tmp_path / "a.tar"))
    assert loaded.lost is not None and loaded.index is None
    assert not (tmp_path / "a.idx").exists()


def test_a_file_of_another_kind_beside_the_shard_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FASTLOAD_CACHE_DIR", str(tmp_path / "cache"))
    shard = tar_of(tmp_path / "a.tar", samples(2))
    (tmp_path / "a.idx").write_text("someone else's index, in another format\n")
    loaded = indexes.load(str(shard))
    assert (tmp_path / "a.idx").read_text().startswith("someone else's")
    assert loaded.index == str(indexes.cached_index_path(str(shard)))
