"""fastload scan: the library function and the command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from images import claim_size, fault_files, jpeg_bytes, photo

from fastload.diagnosis.scan import KINDS, scan

EXPECTED = {
    "truncated.jpg": {"truncated"},
    "empty.jpg": {"unreadable"},
    "random_bytes.jpg": {"unreadable"},
    "jpeg_garbage.jpg": {"unreadable"},
    "oversized_header.jpg": {"oversized"},
    "png_named_jpg.jpg": {"wrong_extension"},
    "cmyk.jpg": {"cmyk"},
    "grey.jpg": {"grayscale"},
    "png16.png": {"grayscale"},
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scan")
    fault_files(root / "class_a")
    good = jpeg_bytes(photo(64, 48))
    (root / "class_b").mkdir()
    for i in range(70):  # enough files for the parallel path
        (root / "class_b" / f"{i:03d}.jpg").write_bytes(good)
    (root / "class_b" / "readme.txt").write_text("not scanned")
    return root


def by_name(report) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for f in report.findings:
        found.setdefault(Path(f.path).name, set()).add(f.kind)
    return found


@pytest.mark.parametrize("workers", [1, 2])
def test_finds_every_kind_of_problem(dataset: Path, workers: int) -> None:
    report = scan(dataset, workers=workers)
    assert report.files == 14 + 70
    assert by_name(report) == EXPECTED
    assert set(report.counts) == set(KINDS)
    assert report.counts["unreadable"] == 3
    kinds = [f.kind for f in report.findings]
    assert kinds == sorted(kinds, key=list(KINDS).index)  # worst first
    assert all(f.detail for f in report.findings)


def test_max_pixels_is_configurable(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "big.jpg").write_bytes(claim_size(jpeg_bytes(photo(32, 32)), 3000, 2000))
    (tmp_path / "c" / "fine.jpg").write_bytes(jpeg_bytes(photo(100, 100)))
    report = scan(tmp_path, workers=1, max_pixels=5000)
    assert by_name(report) == {"big.jpg": {"oversized"}, "fine.jpg": {"oversized"}}
    assert "6,000,000 pixels > 5,000" in report.findings[0].detail


def test_progress_is_reported(dataset: Path) -> None:
    calls = []
    report = scan(dataset, workers=1, progress=lambda done, total: calls.append((done, total)))
    files = report.files
    assert files > 1 and calls == [(done, files) for done in range(1, files + 1)]  # once a file


def test_not_a_folder(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        scan(tmp_path / "missing")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fastload", "scan", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_command_json(dataset: Path) -> None:
    proc = run(str(dataset), "--json", "--workers", "2")
    assert proc.returncode == 1  # problems found
    report = json.loads(proc.stdout)
    assert report["files"] == 84 and report["counts"]["truncated"] == 1
    assert {Path(f["path"]).name for f in report["findings"]} == set(EXPECTED)


def test_command_text(dataset: Path) -> None:
    proc = run(str(dataset))
    assert proc.returncode == 1
    assert "scanned 84 image files" in proc.stdout
    assert "truncated        class_a/truncated.jpg: truncated JPEG" in proc.stdout


def test_command_clean_folder_exits_0(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "ok.jpg").write_bytes(jpeg_bytes(photo(32, 32)))
    proc = run(str(tmp_path))
    assert (
        proc.returncode == 0 and "1 image files" in proc.stdout and "0 with problems" in proc.stdout
    )


def test_command_on_a_folder_without_images_says_so_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("no images here")
    proc = run(str(tmp_path))
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip() == (
        f"fastload scan: no image files found under {tmp_path} (looked for the extensions "
        "torchvision's ImageFolder reads: .jpg, .jpeg, .png, .webp, ...)"
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (("/no/such/folder",), "'/no/such/folder' is not a folder"),
        (("{root}", "--backend", "jpegxl"), "invalid choice: 'jpegxl' (choose from 'auto',"),
        (("{root}", "--workers", "0"), "0 must be at least 1"),
        (("{root}", "--max-pixels", "lots"), "'lots' is not an integer"),
    ],
)
def test_command_bad_input_is_one_line(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    proc = run(*(a.format(root=tmp_path) for a in args))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
