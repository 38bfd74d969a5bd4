"""``fastload pack`` of image-text tables (CSV, TSV, Parquet; OpenCLIP's column convention),
read back by fastload and by the real webdataset package."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import webdataset as wds
from images import jpeg_bytes, photo

import fastload

CAPTIONS = ["a red fox", "un café au lait", "東京の夜景", "tab\tinside, comma", "", "🦊"]


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    folder = tmp_path_factory.mktemp("table")
    (folder / "images").mkdir()
    rows = []
    for k in range(12):
        name = f"images/{k:03d}.jpg"
        (folder / name).write_bytes(jpeg_bytes(photo(48 + k, 40, seed=k)))
        rows.append({"filepath": name, "title": CAPTIONS[k % 6], "url": f"https://x/{k}", "n": k})
    return folder, rows


def _write_csv(path: Path, rows: list[dict], separator: str) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]), delimiter=separator)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _by_path(out: Path) -> dict[str, tuple[str, dict]]:
    """Each sample's caption and metadata by image path, as webdataset reads the pack."""
    found = {}
    shards = [str(p) for p in sorted(out.glob("*.tar"))]
    for sample in wds.WebDataset(shards, shardshuffle=False, empty_check=False):
        meta = json.loads(sample["json"])
        found[meta["path"]] = (sample["txt"].decode("utf-8"), meta)
    return found


@pytest.mark.parametrize("kind", ["csv", "tsv", "parquet"])
def test_a_table_packs_to_image_text_shards(
    rows: tuple[Path, list[dict]], tmp_path: Path, kind: str
) -> None:
    folder, table = rows
    if kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        source = folder / "pairs.parquet"
        pq.write_table(pa.Table.from_pylist(table), source)
    else:
        source = _write_csv(folder / f"pairs.{kind}", table, "\t" if kind == "tsv" else ",")
    out = tmp_path / "pack"
    manifest = fastload.pack(source, out, shard_size=20_000, progress=False)
    assert manifest.samples == 12 and len(manifest.shards) > 1 and manifest.classes == []
    found = _by_path(out)
    assert len(found) == 12
    for row in table:
        caption, meta = found[row["filepath"]]
        assert caption == row["title"]
        assert meta["url"] == row["url"] and str(meta["n"]) == str(row["n"])
    dataset = fastload.ImageShards(out, target="txt")
    assert sorted(dataset.read_sample(i)[1] for i in range(12)) == sorted(r["title"] for r in table)


def test_table_errors_name_the_columns(rows: tuple[Path, list[dict]], tmp_path: Path) -> None:
    folder, table = rows
    source = _write_csv(folder / "named.csv", table, ",")
    with pytest.raises(
        ValueError, match="no caption column 'caption'; its columns: filepath, title, url, n"
    ):
        fastload.pack(source, tmp_path / "a", caption_key="caption", progress=False)


def test_fastload_pack_takes_a_table_and_its_keys(
    rows: tuple[Path, list[dict]], tmp_path: Path
) -> None:
    folder, table = rows
    renamed = [{"image": r["filepath"], "text": r["title"]} for r in table]
    source = _write_csv(folder / "renamed.tsv", renamed, "\t")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fastload",
            "pack",
            str(source),
            str(tmp_path / "out"),
            "--image-key",
            "image",
            "--caption-key",
            "text",
            "--max-side",
            "32",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    dataset = fastload.ImageShards(tmp_path / "out", target="txt")
    assert sorted(c for _, c in (dataset.read_sample(i) for i in range(12))) == sorted(CAPTIONS * 2)
    assert max(fastload.ImageShards(tmp_path / "out", target=None)[0].shape[1:]) == 32
