"""fastload.synthetic: the stand-ins for real data."""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path

import pytest

from fastload import synthetic
from fastload.synthetic import SlowStorage, photos


def test_slow_storage_waits_a_seeded_latency_of_the_mean_asked() -> None:
    storage = SlowStorage(list(range(10)), ms=20.0, sigma=1.0)
    waits = [storage.wait(i) for i in range(20_000)]
    assert statistics.fmean(waits) == pytest.approx(0.020, rel=0.05)
    assert storage.wait(7) == SlowStorage([], ms=20.0, sigma=1.0).wait(7)  # same sample, same wait
    long_tail = sum(w > 0.060 for w in waits) / len(waits)
    assert 0.04 < long_tail < 0.07  # sigma 1: about one in twenty waits 3x the mean
    even = SlowStorage([], ms=20.0, sigma=0.0)
    assert {round(even.wait(i), 9) for i in range(50)} == {0.02}


def test_slow_storage_returns_the_sample_after_its_wait() -> None:
    storage = SlowStorage(["a", "b", "c"], ms=5.0, sigma=0.5)
    start = time.perf_counter()
    assert [storage[i] for i in range(3)] == ["a", "b", "c"] and len(storage) == 3
    assert time.perf_counter() - start >= sum(storage.wait(i) for i in range(3))
    assert repr(storage) == "SlowStorage(['a', 'b', 'c'], ms=5.0, sigma=0.5)"


@pytest.mark.parametrize(
    "ms, sigma, message",
    [
        (0.0, 0.5, "ms=0.0 must be a positive number of milliseconds"),
        (-1.0, 0.5, "ms=-1.0 must be a positive"),
        (20.0, -0.1, r"sigma=-0.1 must be >= 0 \(0: every sample waits ms\)"),
    ],
)
def test_slow_storage_refuses_bad_waits(ms: float, sigma: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SlowStorage([], ms=ms, sigma=sigma)


def test_make_coco_writes_a_set_torchvision_reads(tmp_path) -> None:
    import torchvision

    from fastload.synthetic import make_coco

    folder, annotations = make_coco(tmp_path, images=3, seed=1)
    coco = torchvision.datasets.CocoDetection(str(folder), str(annotations))
    assert len(coco) == 3
    for image, objects in coco:
        assert 640 in image.size and 360 <= min(image.size) <= 640
        assert 1 <= len(objects) <= 8
        for annotation in objects:
            x, y, w, h = annotation["bbox"]
            assert (
                x >= 0
                and x + w <= image.size[0] + 0.01
                and y >= 0
                and y + h <= image.size[1] + 0.01
            )
            assert 1 <= annotation["category_id"] <= 80


def test_make_voc_writes_a_set_torchvisions_voc_segmentation_reads(tmp_path) -> None:
    import numpy as np
    import torchvision

    from fastload.synthetic import make_voc

    root = make_voc(tmp_path, images=3, seed=1)
    voc = torchvision.datasets.VOCSegmentation(str(root), year="2012", image_set="train")
    assert len(voc) == 3 and not (tmp_path / "coco").exists()
    for image, mask in voc:
        assert mask.mode == "P" and mask.size == image.size
        values = set(np.unique(np.asarray(mask)).tolist())
        assert 0 in values and 255 in values and values - {0, 255}  # background, void, classes
        assert max(values - {255}) <= 20


def test_default_data_is_made_once_and_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FASTLOAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(photos, "DEFAULT_IMAGES", 100)
    calls = []
    root = synthetic.default_data(progress=lambda d, t: calls.append((d, t)))
    assert len(list(root.rglob("*.jpg"))) == 100 and calls[-1] == (100, 100)
    before = (root / ".complete").stat().st_mtime
    assert synthetic.default_data() == root and (root / ".complete").stat().st_mtime == before
    assert [p.name for p in tmp_path.iterdir()] == [root.name]  # no half-made copy left


def test_default_data_asked_at_once_is_never_read_half_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two makers at the same time (parallel commands, parallel tests): each returns the whole
    set, and one set is left."""
    monkeypatch.setenv("FASTLOAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(photos, "DEFAULT_IMAGES", 50)
    seen: list[int] = []

    def make() -> None:
        root = synthetic.default_data()
        seen.append(len(list(root.rglob("*.jpg"))))

    makers = [threading.Thread(target=make) for _ in range(3)]
    for maker in makers:
        maker.start()
    for maker in makers:
        maker.join()
    assert seen == [50, 50, 50]
    assert [p.name for p in tmp_path.iterdir()] == [synthetic.default_root().name]


def test_a_half_made_set_of_an_earlier_version_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FASTLOAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(photos, "DEFAULT_IMAGES", 50)
    half = synthetic.default_root()
    (half / "c0").mkdir(parents=True)
    (half / "c0" / "cut.jpg").write_bytes(b"\xff\xd8")
    root = synthetic.default_data()
    assert not (root / "c0" / "cut.jpg").exists() and len(list(root.rglob("*.jpg"))) == 50
