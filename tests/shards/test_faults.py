"""Every bad input a shard set can hold: one error naming the shard (and member), or with
``on_error="skip"`` only the samples it cost, reported as the folder datasets report them;
never wrong data."""

from __future__ import annotations

import gzip
import os
import time
import warnings
from pathlib import Path

import pytest
from shardsets import samples, tar_of

import fastload
from fastload import transforms as T
from fastload.errors import ImageDecodeError, UnreadableImageWarning
from fastload.shards.format.tar import scan

CROP = T.CenterCrop(32)


def _shards(tmp_path: Path, count: int = 3) -> list[Path]:
    """``count`` good shards of 4 samples each (labels k % 3), ``s0``.. numbered across."""
    return [tar_of(tmp_path / f"good{k}.tar", samples(4, start=4 * k)) for k in range(count)]


def _delivered(dataset: fastload.ImageShards, *, workers: int = 0) -> tuple[list[int], list]:
    """The labels a loader delivers, in order, and the skip warnings it gave."""
    loader = fastload.DataLoader(dataset, batch_size=3, num_workers=workers)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        labels = [int(y) for _, batch in loader for y in batch]
    skipped = [w for w in caught if issubclass(w.category, UnreadableImageWarning)]
    return labels, skipped


def _expected_labels(dataset: fastload.ImageShards, bad: set[str]) -> list[int]:
    return [int(dataset.key(i)[1:]) % 3 for i in range(len(dataset)) if dataset.key(i) not in bad]


def test_a_member_cut_short(tmp_path: Path) -> None:
    shards = _shards(tmp_path)
    data = shards[2].read_bytes()
    last = scan(str(shards[2])).members[-1]
    shards[2].write_bytes(data[: last.offset + last.size // 2])  # into the last jpg
    os.utime(shards[2], (time.time() + 5, time.time() + 5))
    raising = fastload.ImageShards(shards, CROP)
    bad = len(raising) - 1
    with pytest.raises(ImageDecodeError, match=r"good2\.tar:s0011\.jpg.*cut short"):
        raising[bad]
    skipping = fastload.ImageShards(shards, CROP, on_error="skip")
    labels, warned = _delivered(skipping)
    assert labels == _expected_labels(skipping, {"s0011"}) and len(warned) == 1
    assert list(skipping.bad_files) == [f"{shards[2]}:s0011.jpg"]


def test_a_tar_cut_inside_a_header(tmp_path: Path) -> None:
    shards = _shards(tmp_path)
    data = shards[1].read_bytes()
    shards[1].write_bytes(data[: 4 * 1024 + 300])  # inside the second sample's first header
    with pytest.raises(fastload.ShardError, match=r"good1\.tar.*truncated inside a tar header"):
        fastload.ImageShards(shards)
    with pytest.warns(UnreadableImageWarning, match="left out"):
        skipping = fastload.ImageShards(shards, CROP, on_error="skip")
    assert len(skipping) == 9  # the first sample of the cut shard is whole
    assert "truncated inside a tar header" in skipping.bad_files[str(shards[1])]
    labels, _ = _delivered(skipping)
    assert labels == _expected_labels(skipping, set())


def test_a_member_that_is_not_an_image(tmp_path: Path) -> None:
    members = samples(3)
    members[3] = ("s0001.jpg", b"\x00not an image at all" * 50)
    shard = tar_of(tmp_path / "bad.tar", members)
    with pytest.raises(ImageDecodeError, match=r"bad\.tar:s0001\.jpg"):
        fastload.ImageShards(shard, CROP)[1]
    skipping = fastload.ImageShards(shard, CROP, on_error="skip")
    labels, warned = _delivered(skipping, workers=2)
    assert labels == [0, 2] and len(warned) == 1
    assert list(skipping.bad_files) == [f"{shard}:s0001.jpg"]


def test_a_missing_shard(tmp_path: Path) -> None:
    shards = _shards(tmp_path)
    gone = tmp_path / "gone.tar"
    with pytest.raises(FileNotFoundError, match=r"gone\.tar.*no such shard"):
        fastload.ImageShards([shards[0], gone, shards[1]])
    with pytest.warns(UnreadableImageWarning):
        skipping = fastload.ImageShards([shards[0], gone, shards[1]], CROP, on_error="skip")
    assert len(skipping) == 8 and skipping.bad_files == {str(gone): "no such shard"}


def test_a_pack_whose_manifest_lists_a_missing_or_changed_shard(tmp_path: Path) -> None:
    folder = tmp_path / "photos"
    from shardsets import class_folder

    class_folder(folder, classes=2, per_class=4)
    out = tmp_path / "out"
    fastload.pack(folder, out, shard_size=6000, workers=1, progress=False)
    (out / "shard-000001.tar").unlink()
    with pytest.raises(FileNotFoundError, match=r"shard-000001\.tar"):
        fastload.ImageShards(out)
    with open(out / "shard-000002.tar", "ab") as grown:
        grown.write(b"\0" * 512)
    with pytest.warns(UnreadableImageWarning):
        skipping = fastload.ImageShards(out, on_error="skip")
    assert "its manifest says" in skipping.bad_files[str(out / "shard-000002.tar")]


def test_a_pack_shard_cut_short_keeps_the_samples_before_the_cut(tmp_path: Path) -> None:
    from shardsets import class_folder

    out = tmp_path / "out"
    fastload.pack(class_folder(tmp_path / "photos"), out, shard_size=20_000, progress=False)
    whole = fastload.ImageShards(out)
    cut = out / "shard-000001.tar"
    index_before = (out / "shard-000001.idx").read_bytes()
    packed, first = int(whole.shard_sizes[1]), int(whole.shard_sizes[0])
    size, members = cut.stat().st_size, scan(str(cut)).members
    ends = {
        i: max(m.end for m in members if m.name.startswith(whole.key(i) + "."))
        for i in range(first, first + packed)
    }
    kept = [i for i, end in ends.items() if end <= size // 2]
    before = [whole.read_sample(i) for i in range(len(whole))]
    os.truncate(cut, size // 2)
    assert 0 < len(kept) < packed
    why = (
        f"cut short: it ends at byte {size // 2} of the {size} its manifest gives; "
        f"{packed - len(kept)} of its {packed} samples are lost (the {len(kept)} before the cut "
        "are read)"
    )
    with pytest.raises(fastload.ShardError) as raised:
        fastload.ImageShards(out)
    assert str(raised.value) == f"cannot read {str(cut)!r}: {why}"
    for _ in range(2):  # the scan is not kept as the shard's index: the loss shows every time
        with pytest.warns(UnreadableImageWarning, match="left out"):
            skipping = fastload.ImageShards(out, on_error="skip")
        assert skipping.bad_files == {str(cut): why}
        assert (out / "shard-000001.idx").read_bytes() == index_before
    assert len(skipping) == len(whole) - packed + len(kept)
    survivors = [i for i in range(len(whole)) if i < first or i in kept or i >= first + packed]
    assert [skipping.read_sample(i) for i in range(len(skipping))] == [before[i] for i in survivors]
    with pytest.warns(UnreadableImageWarning, match="left out"):
        delivering = fastload.ImageShards(out, CROP, on_error="skip")
    labels, warned = _delivered(delivering)
    assert labels == [before[i][1] for i in survivors] and warned == []


def test_files_that_are_not_tars(tmp_path: Path) -> None:
    shards = _shards(tmp_path, 2)
    text = tmp_path / "text.tar"
    text.write_text("just some notes\n" * 100)
    packed = tmp_path / "zipped.tar"
    packed.write_bytes(gzip.compress(shards[0].read_bytes()))
    with pytest.raises(fastload.ShardError, match=r"text\.tar.*not a tar file"):
        fastload.ImageShards([shards[0], text])
    with pytest.raises(fastload.ShardError, match=r"zipped\.tar.*gzip-compressed"):
        fastload.ImageShards([packed])
    with pytest.warns(UnreadableImageWarning):
        skipping = fastload.ImageShards([shards[0], text, packed, shards[1]], on_error="skip")
    assert len(skipping) == 8 and set(skipping.bad_files) == {str(text), str(packed)}


def test_an_index_that_no_longer_matches_its_shard(tmp_path: Path) -> None:
    shard = tar_of(tmp_path / "a.tar", samples(4))
    fastload.ImageShards(shard)  # writes a.idx
    tar_of(shard, samples(4, start=10, size=60))  # other samples at other offsets
    later = time.time() + 10
    os.utime(tmp_path / "a.idx", (later, later))  # the index looks newer: it is believed
    stale = fastload.ImageShards(shard, CROP)
    with pytest.raises(ImageDecodeError, match=r"a\.idx.*no longer matches.*delete it"):
        stale[1]
    skipping = fastload.ImageShards(shard, CROP, on_error="skip")
    labels, _ = _delivered(skipping)
    for path, why in skipping.bad_files.items():
        assert path.startswith(f"{shard}:") and "no longer matches" in why
    assert len(labels) + len(skipping.bad_files) == 4  # nothing read from a wrong place
    (tmp_path / "a.idx").unlink()
    assert [fastload.ImageShards(shard).key(i) for i in range(4)] == [
        f"s{k:04d}" for k in range(10, 14)
    ]


def test_duplicate_keys(tmp_path: Path) -> None:
    members = samples(4)
    split = [*members[:2], members[4], members[5], members[2], members[3], *members[6:]]
    split[4] = ("s0000.json", b"{}")  # s0000 again after s0002: split
    shard = tar_of(tmp_path / "dup.tar", split)
    with pytest.raises(fastload.ShardError, match=r"dup\.tar:s0000\.json.*appears twice"):
        fastload.ImageShards(shard)
    with pytest.warns(UnreadableImageWarning):
        skipping = fastload.ImageShards(shard, CROP, on_error="skip")
    # s0001 lost its .cls to the repeated s0000: without its label, it is left out too
    assert [skipping.key(i) for i in range(len(skipping))] == ["s0002", "s0003"]
    assert skipping.bad_files[f"{shard}:s0001.jpg"] == "sample has no .cls member"


def test_a_member_without_an_extension(tmp_path: Path) -> None:
    shard = tar_of(
        tmp_path / "noext.tar", [*samples(2), ("LICENSE", b"text"), *samples(1, start=2)]
    )
    with pytest.raises(fastload.ShardError, match=r"noext\.tar:LICENSE.*no extension"):
        fastload.ImageShards(shard)
    with pytest.warns(UnreadableImageWarning):
        skipping = fastload.ImageShards(shard, CROP, on_error="skip")
    assert len(skipping) == 3  # it cost no sample
    assert _delivered(skipping)[0] == [0, 1, 2]


def test_a_sample_without_cls(tmp_path: Path) -> None:
    members = samples(3)
    del members[2]  # s0001.cls
    shard = tar_of(tmp_path / "nolabel.tar", members)
    dataset = fastload.ImageShards(shard, CROP)
    with pytest.raises(ImageDecodeError) as raised:
        dataset[1]
    # the sample's own fault: named with its member, no decoder blamed, the cause chained
    why = "sample 's0001' has no .cls member"
    assert str(raised.value) == f"cannot read '{shard}:s0001.jpg': {why}"
    assert isinstance(raised.value.__cause__, ValueError)
    with pytest.raises(ValueError, match=r"no \.cls member"):
        dataset.targets  # noqa: B018
    with pytest.warns(UnreadableImageWarning, match="left out"):  # at construction
        skipping = fastload.ImageShards(shard, CROP, on_error="skip")
    labels, warned = _delivered(skipping)
    assert labels == [0, 2] and warned == []
    assert skipping.bad_files == {f"{shard}:s0001.jpg": "sample has no .cls member"}


def test_shards_without_any_label_never_make_one_up(tmp_path: Path) -> None:
    from images import jpeg_bytes, photo

    bare = [(f"{k}_{k}.jpg", jpeg_bytes(photo(40, 30, seed=k))) for k in range(3)]
    shard = tar_of(tmp_path / "bare.tar", bare)
    dataset = fastload.ImageShards(shard, CROP)
    with pytest.raises(ImageDecodeError, match=r"bare\.tar:0_0\.jpg.*no \.cls member"):
        next(iter(fastload.DataLoader(dataset, batch_size=2)))
    with pytest.warns(UnreadableImageWarning, match="left out"):
        skipping = fastload.ImageShards(shard, CROP, on_error="skip")
    assert len(skipping) == 0 and len(skipping.bad_files) == 3
