"""One registry of both kinds: a backend registered from a test works everywhere at once."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import thirdparty
import torch
from images import fault_files

import fastload
from fastload import backends, cli
from fastload import transforms as T
from fastload.synthetic import make_image_folder

HERE = Path(__file__).parent


@pytest.fixture
def registered() -> Iterator[None]:
    thirdparty.register_all()
    yield
    thirdparty.unregister_all()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("registry") / "set", images=24, classes=3)


def run_cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main(list(args))
    return status, out.getvalue()


def test_the_registry_knows_each_backends_kind() -> None:
    decoders, executors = backends.names("decoder"), backends.names("executor")
    # the two kinds split the registry, and each name is listed under its class's kind
    assert sorted(decoders + executors) == sorted(backends.names())
    assert all(backends.get(n).kind == "decoder" for n in decoders)
    assert all(backends.get(n).kind == "executor" for n in executors)
    # what fastload ships, whatever else is registered
    assert {"opencv", "pillow", "region", "turbojpeg"} <= set(decoders)
    assert {"dali", "nvimgcodec"} <= set(executors)
    assert backends.kind("dali") == "executor" and backends.kind("pillow") == "decoder"


def test_register_checks_kind_and_executor() -> None:
    class Odd(thirdparty.ThirdPartyDecoder):
        name = "odd"
        kind = "sometimes"  # type: ignore[assignment]

    with pytest.raises(ValueError, match="kind='sometimes' is not valid"):
        backends.register(Odd)

    class Hollow(thirdparty.ThirdPartyDecoder):
        name = "hollow"
        kind = "executor"

    with pytest.raises(ValueError, match="is an executor but does not define executor"):
        backends.register(Hollow)
    with pytest.raises(ValueError, match="backend='hollow' is not valid"):
        backends.unregister("hollow")


def test_a_decoder_has_no_executor() -> None:
    with pytest.raises(TypeError, match="'pillow' backend decodes per sample"):
        backends.get("pillow").executor(None, None)


def test_contract_suite_tests_a_backend_the_moment_it_registers() -> None:
    """The contract suite, run with the third-party backends registered by a plugin: each of
    them goes through exactly the contract tests pillow goes through, and passes them."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)])}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(HERE / "test_contract.py"), "-p", "thirdparty",
         "-k", "thirdparty or thirdexec or pillow", "-v", "-p", "no:cacheprovider"],
        capture_output=True, text=True, timeout=300, env=env, cwd=HERE.parent.parent,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    ran: dict[str, set[str]] = {"pillow": set(), "thirdparty": set(), "thirdexec": set()}
    for line in proc.stdout.splitlines():
        if " PASSED" not in line or "[" not in line:
            continue
        test = line.split("::")[1].split(" ")[0]
        name, params = test.split("[", 1)
        for backend, tests in ran.items():
            if backend in params.rstrip("]").split("-"):
                tests.add(f"{name}[{params.replace(backend, 'B')}")
    assert ran["pillow"] and ran["thirdparty"] == ran["pillow"] == ran["thirdexec"]


def test_info_lists_a_registered_backend(registered: None) -> None:
    status, out = run_cli("info", "--json")
    assert status == 0
    found = {b["name"]: b for b in json.loads(out)["backends"]}
    assert found["thirdparty"]["usable"] and found["thirdparty"]["kind"] == "decoder"
    assert found["thirdexec"]["kind"] == "executor"
    status, out = run_cli("info")
    assert "thirdparty" in out and "thirdexec" in out and "(batch executor)" in out


def test_bench_measures_a_registered_backend(registered: None, folder: Path) -> None:
    status, out = run_cli(
        "bench",
        "--data",
        str(folder),
        "--backend",
        "thirdparty",
        "--batch-size",
        "8",
        "--num-workers",
        "0",
        "--seconds",
        "1",
        "--json",
    )
    assert status == 0
    rows = {r["backend"]: r for r in json.loads(out)["results"]}
    assert rows["thirdparty"]["images_per_sec"] > 0 and rows["thirdparty"]["error"] is None


def test_auto_never_picks_a_backend_without_a_priority(registered: None) -> None:
    assert "thirdparty" not in backends.auto_order()
    assert backends.resolve("auto") in ("region", "turbojpeg", "opencv", "pillow")


def test_scan_uses_a_registered_backend(registered: None, tmp_path: Path) -> None:
    files = fault_files(tmp_path)
    status, out = run_cli("scan", str(tmp_path), "--backend", "thirdparty", "--json")
    report = json.loads(out)
    assert status == 1 and report["files"] == len(files)
    assert any(f["kind"] == "truncated" for f in report["findings"])


def batches(loader: fastload.DataLoader) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x.clone(), y.clone()) for x, y in loader]


def test_loader_backend_names_a_decoder_to_use_in_the_workers(
    registered: None, folder: Path
) -> None:
    val = T.Compose([T.Resize(40), T.CenterCrop(32)])
    ds = fastload.ImageFolder(folder, transform=val, backend="pillow")
    loader = fastload.DataLoader(ds, batch_size=8, num_workers=2, backend="thirdparty")
    assert loader.backend == "thirdparty" and loader.plan.dataset.backend == "thirdparty"
    assert loader.dataset is ds and ds.backend == "pillow"  # the user's dataset is left as it was
    ours = batches(loader)
    reference = batches(fastload.DataLoader(ds, batch_size=8))
    for (a, la), (b, lb) in zip(ours, reference, strict=True):
        assert torch.equal(la, lb)
        assert (a.int() - b.int()).abs().float().mean() <= 1.0
    with pytest.raises(
        ValueError, match=r"must be a fastload\.ImageFolder, ImageList or ImageShards"
    ):
        fastload.DataLoader([1, 2], batch_size=2, backend="thirdparty")


def test_a_registered_executor_runs_whole_batches(registered: None, folder: Path) -> None:
    """The shared executor parts with a library that is not DALI: same batches as the workers."""
    val = T.Compose([T.Resize(40), T.CenterCrop(32)])
    ds = fastload.ImageFolder(folder, transform=val, backend="thirdparty")
    executed = fastload.DataLoader(
        ds,
        batch_size=5,
        shuffle=True,
        backend="thirdexec",
        generator=torch.Generator().manual_seed(3),
    )
    assert executed.executor is not None and executed.num_workers == 0
    plain = fastload.DataLoader(
        ds, batch_size=5, shuffle=True, generator=torch.Generator().manual_seed(3)
    )
    for (a, la), (b, lb) in zip(batches(executed), batches(plain), strict=True):
        assert torch.equal(la, lb) and torch.equal(a, b)


def without_scan(data: bytes) -> bytes:
    """A JPEG whose header is whole and which ends properly, but has no image data."""
    return data[: data.index(b"\xff\xda")] + b"\xff\xd9"


def test_a_registered_executor_isolates_a_bad_file(registered: None, tmp_path: Path) -> None:
    files = fault_files(tmp_path)
    hollow = tmp_path / "hollow.jpg"
    hollow.write_bytes(without_scan(files["good"].read_bytes()))
    paths = [files["good"], files["truncated"], files["grey"], hollow, files["exif_rotated"]]
    ds = fastload.ImageList(paths, range(5), transform=T.Resize((16, 16)), on_error="skip")
    loader = fastload.DataLoader(ds, batch_size=5, backend="thirdexec")
    with pytest.warns(fastload.UnreadableImageWarning, match="skipped 2"):
        ((images, labels),) = list(loader)
    assert labels.tolist() == [0, 2, 4] and images.shape == (3, 3, 16, 16)
    assert sorted(ds.bad_files) == sorted([str(files["truncated"]), str(hollow)])
    np.testing.assert_array_equal(images[1].numpy(), ds[2][0].numpy())
    raising = fastload.ImageList([files["good"], hollow], [0, 1], transform=T.Resize((16, 16)))
    with pytest.raises(
        fastload.ImageDecodeError, match=f"cannot read {str(hollow)!r} with the thirdexec backend"
    ):
        list(fastload.DataLoader(raising, batch_size=2, backend="thirdexec"))
    gone = tmp_path / "gone.jpg"
    gone.write_bytes(files["good"].read_bytes())
    removed = fastload.ImageList([files["good"], gone], [0, 1], transform=T.Resize((16, 16)))
    gone.unlink()  # a storage failure, not a decoding one: no backend is named
    with pytest.raises(fastload.ImageDecodeError) as raised:
        list(fastload.DataLoader(removed, batch_size=2, backend="thirdexec"))
    assert str(raised.value).startswith(
        f"cannot read {str(gone)!r} from its storage: FileNotFoundError: "
    )
