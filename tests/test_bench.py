"""fastload bench and fastload autotune: the library and the commands, on a small made set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from fastload import backends, bench
from fastload.diagnosis import scan
from fastload.synthetic import make_image_folder


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("bench") / "set", images=60, classes=3)


def test_run_measures_stock_and_reports_unusable_backends(data: Path) -> None:
    rows = bench.run(
        data, names=("pillow", "nvjpeg"), batch_size=8, num_workers=0, seconds=1.0, rounds=1
    )
    stock, pillow, nvjpeg = rows
    assert stock.backend == bench.STOCK and stock.error is None and len(stock.rates) == 1
    assert pillow.error is None and len(pillow.rates) == 1
    # each round's ratio is against the stock round measured beside it
    assert pillow.ratio_to_stock == pytest.approx(pillow.rates[0] / stock.rates[0])
    assert nvjpeg.images_per_sec is None and "no 'nvjpeg' backend; registered:" in nvjpeg.error


@pytest.mark.parametrize("pipeline", ["val", "decode"])
def test_other_pipelines(data: Path, pipeline: str, require_backend) -> None:
    require_backend("dali")
    rows = bench.run(
        data,
        names=("opencv", "dali"),
        pipeline=pipeline,
        batch_size=8,
        num_workers=1,
        seconds=1.0,
        rounds=1,
    )
    stock, opencv, dali, threads = rows
    assert stock.error is None and opencv.error is None
    assert [len(stock.rates), len(opencv.rates)] == [1, 1]
    # the first per-sample backend again, on a thread of this process
    assert threads.backend == "opencv (threads)" and threads.error is None
    assert len(threads.rates) == 1 and threads.num_workers == 1
    if pipeline == "decode":  # DALI delivers batches of one size, not counted loose images
        assert dali.images_per_sec is None and "measure train or val" in dali.error
    else:
        assert dali.error is None and len(dali.rates) == 1


def test_accelerated_row_runs_the_stock_dataset_through_fastload(data: Path) -> None:
    rows = bench.run(
        data,
        names=("opencv",),
        pipeline="val",
        batch_size=8,
        num_workers=1,
        seconds=1.0,
        rounds=1,
        accelerated=True,
    )
    want = [bench.STOCK, bench.ACCELERATED, "opencv", "opencv (threads)"]
    assert [r.backend for r in rows] == want
    assert rows[1].error is None and len(rows[1].rates) == 1 and rows[1].num_workers == 1
    with pytest.raises(ValueError, match="accelerated=True measures train or val"):
        bench.run(data, pipeline="decode", batch_size=8, accelerated=True)


def test_bad_arguments(data: Path) -> None:
    with pytest.raises(
        ValueError, match="pipeline='fast' is not valid; valid: 'train', 'val', 'decode'"
    ):
        bench.run(data, pipeline="fast")
    with pytest.raises(ValueError, match="num_workers=-1"):
        bench.run(data, num_workers=-1)


def test_plot(data: Path, tmp_path: Path) -> None:
    rows = [
        bench.BenchRow(bench.STOCK, "train", 100.0, 1.0, 2, 8),
        bench.BenchRow("turbojpeg", "train", 180.0, 1.8, 2, 8),
        bench.BenchRow("dali", "train", None, None, None, 8, "not here"),
    ]
    path = bench.write_plot(rows, tmp_path / "chart.png")
    with Image.open(path) as image:
        assert image.format == "PNG" and image.width > 500


def fastload(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fastload", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_bench_command_json_all_backends(data: Path, tmp_path: Path) -> None:
    plot = tmp_path / "bench.png"
    proc = fastload(
        "bench",
        "--data",
        str(data),
        "--backend",
        "all",
        "--batch-size",
        "8",
        "--num-workers",
        "1",
        "--seconds",
        "3",
        "--json",
        "--plot",
        str(plot),
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)["results"]
    per_sample = next(n for n in backends.names() if backends.kind(n) != "executor")
    want = [bench.STOCK, *backends.names(), f"{per_sample} (threads)"]
    assert [r["backend"] for r in results] == want
    assert all(set(r) >= {"backend", "images_per_sec", "ratio_to_stock"} for r in results)
    assert all(r["images_per_sec"] > 0 and r["error"] is None for r in results)
    assert plot.exists()


def bench_quickly(data: Path, backend: str, *extra: str) -> subprocess.CompletedProcess:
    """``fastload bench`` on the test set: one backend, one second, no workers, batch 8."""
    return fastload(
        "bench", "--data", str(data), "--backend", backend, "--seconds", "1",
        "--num-workers", "0", "--batch-size", "8", *extra,
    )  # fmt: skip


def test_bench_command_dali_measures_the_dali_backend(data: Path, require_backend) -> None:
    require_backend("dali")
    proc = bench_quickly(data, "dali", "--json")
    assert proc.returncode == 0, proc.stderr
    stock, dali = json.loads(proc.stdout)["results"]
    assert stock["images_per_sec"] > 0 and dali["error"] is None
    assert dali["backend"] == "dali" and dali["images_per_sec"] > 0 and dali["num_workers"] == 0


def test_bench_command_text_table(data: Path) -> None:
    proc = bench_quickly(data, "opencv", "--accelerated")
    assert proc.returncode == 0, proc.stderr
    assert (
        "stock torchvision" in proc.stdout and "opencv" in proc.stdout and "x stock" in proc.stdout
    )
    assert bench.ACCELERATED in proc.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (("bench", "--data", "/no/such/dir"), "'/no/such/dir' is not a folder"),
        (("bench", "--backend", "nvjpeg2"), "invalid choice: 'nvjpeg2'"),
        (("bench", "--pipeline", "fast"), "invalid choice: 'fast'"),
        (("bench", "--num-workers", "many"), "'many' is not an integer or 'auto'"),
        (("bench", "--seconds", "0"), "0 must be positive"),
        (("bench", "--data", "{data}", "--device", "cuda:7", "--batch-size", "8"), "cuda"),
        (
            ("bench", "--data", "{data}", "--batch-size", "64"),
            "60 readable images, fewer than one batch of 64",
        ),
        (("autotune", "--data", "/no/such/dir"), "'/no/such/dir' is not a folder"),
        (
            ("autotune", "--data", "{data}", "--backend", "webp"),
            "invalid choice: 'webp' (choose from 'auto',",
        ),
        (("autotune", "--budget", "-1"), "-1 must be positive"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(data: Path, args: tuple[str, ...], message: str) -> None:
    proc = fastload(*(a.format(data=data) for a in args))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 good images, and three that are not: garbage, an empty file, a truncated JPEG (its
    header is fine, so only decoding finds it)."""
    root = make_image_folder(tmp_path_factory.mktemp("broken") / "set", images=24, classes=2)
    first = sorted((root / "class_00").iterdir())[0].read_bytes()
    (root / "class_00" / "garbage.jpg").write_bytes(b"<html>not found</html>")
    (root / "class_01" / "empty.jpg").write_bytes(b"")
    (root / "class_01" / "truncated.jpg").write_bytes(first[: len(first) // 3])
    return root


def test_rows_carry_each_rounds_rate_and_the_range_of_per_round_ratios(data: Path) -> None:
    calls: list[tuple] = []
    rows = bench.run(
        data,
        names=("pillow",),
        batch_size=8,
        seconds=3,
        rounds=3,
        progress=lambda *call: calls.append(call),
    )
    labelled = [c[2] for c in calls if len(c) == 3]
    assert labelled[:2] == ["stock torchvision, round 1 of 3", "pillow, round 1 of 3"]
    assert labelled[-1] == "pillow (threads), round 3 of 3" and calls[-1] == (9, 9)
    stock, pillow, threads = rows
    assert threads.backend == "pillow (threads)" and len(threads.rates) == 3
    assert len(stock.rates) == len(pillow.rates) == 3
    ratios = [p / s for p, s in zip(pillow.rates, stock.rates, strict=True)]
    assert pillow.ratio_range == (min(ratios), max(ratios))
    assert pillow.images_per_sec == sorted(pillow.rates)[1]
    # the CPU of this process and its workers in each configuration's rounds; no GPU here
    assert all(r.cores is not None and r.cores > 0 for r in rows)
    assert all(r.gpu_busy is None and r.jpeg_busy is None for r in rows)
    table = bench.format_table(rows)
    assert table[0].split()[-3:] == ["rounds", "workers", "cores"]
    low, high = pillow.ratio_range
    assert f"{low:.2f}-{high:.2f}" in table[2] and table[1].split()[-3] == "-"
    assert table[2].split()[-1] == f"{pillow.cores:.1f}"


def test_the_table_shows_the_gpus_columns_where_it_was_sampled() -> None:
    stock = bench.BenchRow(bench.STOCK, "train", 100.0, 1.0, 16, 64, cores=15.2, gpu_busy=3.0)
    nv = bench.BenchRow("nvimgcodec", "train", 400.0, 4.0, 4, 64, cores=3.4, gpu_busy=41.0)
    nv.jpeg_busy = 87.0
    failed = bench.BenchRow("dali", "train", None, None, None, 64, error="no DALI")
    head, first, second, third = bench.format_table([stock, nv, failed])
    assert head.endswith("cores  GPU % JPEG %")
    assert first.split()[-3:] == ["15.2", "3", "-"] and second.split()[-3:] == ["3.4", "41", "87"]
    assert "not run: no DALI" in third
    on_cpu = bench.BenchRow(bench.STOCK, "train", 100.0, 1.0, 2, 64, cores=1.8)
    assert bench.format_table([on_cpu])[0].endswith("cores")


def test_notes_say_when_the_figures_are_less_certain() -> None:
    def row(name: str, rates: list[float]) -> bench.BenchRow:
        return bench.BenchRow(name, "train", sorted(rates)[1], 1.0, 2, 8, rates=rates)

    steady = [row("stock torchvision", [100, 104, 102]), row("pillow", [150, 155, 160])]
    assert bench.notes(steady, load_before=1.0, cores=2) == []
    swinging = [*steady, row("opencv", [120, 150, 140])]
    (note,) = bench.notes(swinging, load_before=1.0, cores=2)
    assert note.startswith("rounds disagree by more than 10% (opencv 120-150 images/s)")
    (loaded,) = bench.notes(steady, load_before=3.5, cores=2)
    assert loaded.startswith("the load average was 3.5 on 2 cores before the run")


def test_files_that_are_not_images_are_found_by_their_first_bytes(broken: Path) -> None:
    calls: list[tuple] = []
    total, bad = scan.unreadable_files(broken, progress=lambda *c: calls.append(c))
    assert total == 27 and calls == []  # progress every 1,000 files: none for 27
    # the truncated JPEG starts as a JPEG: decoding finds it, not this check
    assert sorted(Path(p).name for p in bad) == ["empty.jpg", "garbage.jpg"]


def test_bench_leaves_broken_files_out_and_still_measures(broken: Path) -> None:
    # one batch holds all 25 files left (shuffled, never dropped): the truncated one is met in
    # every loader's first batch, whatever the order and however slow the machine
    args = ["--backend", "pillow", "--seconds", "3", "--batch-size", "25", "--accelerated"]
    proc = fastload("bench", str(broken), *args, "--json")
    assert proc.returncode == 0, proc.stderr
    notes = proc.stderr.strip().splitlines()
    assert notes[0] == (
        "fastload bench: note: left out 2 of 27 files that are not images "
        f"(class_00/garbage.jpg, class_01/empty.jpg), on every side; 'fastload scan {broken}' "
        "lists them all"
    )
    # not a terminal: one line says what is measured, for how long, instead of a bar; the
    # accelerated loader is not among them: its warm-up met the truncated file
    assert notes[1] == (
        "fastload bench: measuring 3 loaders in 3 interleaved rounds, about 3 s, each round "
        "once the loaders before it are idle"
    )
    assert all(line.startswith("fastload bench: note: ") for line in notes[2:]), proc.stderr
    rows = {r["backend"]: r for r in json.loads(proc.stdout)["results"]}
    # the stock side reads another file in the truncated one's place; pillow's skips it
    assert rows["stock torchvision"]["images_per_sec"] > 0 and rows["pillow"]["ratio_to_stock"] > 0
    # accelerate=True keeps the stock dataset's semantics: no skipping, so its row says why
    accelerated = rows["torchvision, accelerated"]
    assert accelerated["images_per_sec"] is None and "truncated.jpg" in accelerated["error"]
    assert accelerated["error"].startswith("ImageDecodeError: cannot read ")
    tuned = fastload("autotune", str(broken), "--budget", "3", "--no-cache", "--json")
    assert tuned.returncode == 0, tuned.stderr
    chosen = json.loads(tuned.stdout)
    assert chosen["num_workers"] in {m["num_workers"] for m in chosen["table"]}  # measured
    assert "Traceback" not in tuned.stderr


def test_data_failures_are_one_line_and_exit_1(tmp_path: Path) -> None:
    empty, two = tmp_path / "empty", tmp_path / "two" / "a"
    empty.mkdir()
    two.mkdir(parents=True)
    (two / "x.jpg").write_bytes(b"x")
    (two / "y.jpg").write_bytes(b"y")
    expected = {
        ("bench", str(empty)): f"fastload bench: error: no image files found in '{empty}': bench "
        "and autotune read DIR/<class>/<image> files (torchvision's ImageFolder layout); run "
        f"'fastload scan {empty}'",
        ("autotune", str(empty)): f"fastload autotune: error: no image files found in '{empty}': "
        "autotune reads DIR/<class>/<image> files (torchvision's ImageFolder layout) or shards; "
        "run "
        f"'fastload scan {empty}'",
        ("bench", str(two.parent), "--batch-size", "1"): "fastload bench: error: none of the 2 "
        f"image files in '{two.parent}' is a readable image; run 'fastload scan {two.parent}'",
    }
    for args, line in expected.items():
        proc = fastload(*args)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.strip().splitlines() == [line]


def test_an_unexpected_failure_is_one_line_and_debug_shows_the_traceback(tmp_path: Path) -> None:
    (tmp_path / "cache").write_text("a file where the cache folder should be")
    env = {"FASTLOAD_CACHE_DIR": str(tmp_path / "cache")}
    proc = fastload("bench", "--seconds", "1", env=env)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fastload bench: error: "), proc.stderr
    assert lines[0].endswith(" (--debug shows the traceback)")
    for debug in (["--debug"], []):
        shown = fastload("bench", "--seconds", "1", *debug, env={**env, "FASTLOAD_DEBUG": "1"})
        assert shown.returncode == 1 and "Traceback (most recent call last)" in shown.stderr


def test_one_line_takes_the_original_error_from_a_worker() -> None:
    from fastload.errors import one_line

    text = (
        "Caught ImageDecodeError in DataLoader worker process 0.\nOriginal Traceback (most "
        'recent call last):\n  File "x.py", line 1, in f\n    g()\n'
        "fastload.errors.ImageDecodeError: cannot read 'a.jpg' with the pillow backend: bad\n"
    )
    assert one_line(RuntimeError(text)) == (
        "ImageDecodeError: cannot read 'a.jpg' with the pillow backend: bad"
    )
    assert one_line(FileNotFoundError("no such file\nmore")) == "FileNotFoundError: no such file"


def test_autotune_command_json_and_cache(data: Path, tmp_path: Path) -> None:
    env = {"FASTLOAD_CACHE_DIR": str(tmp_path)}
    proc = fastload(
        "autotune", "--data", str(data), "--batch-size", "8", "--budget", "4", "--json", env=env
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert isinstance(result["num_workers"], int) and result["table"] and not result["cached"]
    keys = {"num_workers", "images_per_sec", "seconds", "busy", "prefetch_factor", "worker_type"}
    assert all(set(m) == keys for m in result["table"])
    # the workers' CPU share is read where there are workers (from /proc, there in CI)
    assert all((m["busy"] is None) == (m["num_workers"] == 0) for m in result["table"])
    again = fastload(
        "autotune", "--data", str(data), "--batch-size", "8", "--budget", "4", "--json", env=env
    )
    cached = json.loads(again.stdout)
    assert cached["cached"] and cached["num_workers"] == result["num_workers"]
    text = fastload("autotune", "--data", str(data), "--batch-size", "8", "--budget", "4", env=env)
    assert "<- chosen" in text.stdout and "from the cache" in text.stdout and "busy" in text.stdout


def test_autotune_command_shows_the_prefetch_factor_tried(
    data: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fastload import autotune as tune
    from fastload.cli import main

    table = [
        tune.Measurement(1, 100.0, 1.0, 0.1),
        tune.Measurement(4, 300.0, 1.0, 0.1),
        tune.Measurement(4, 390.0, 1.0, 0.1, 4),
    ]
    found = tune.AutotuneResult(4, 390.0, table, "the reason", prefetch_factor=4)
    monkeypatch.setattr(tune, "autotune", lambda *a, **k: found)
    assert main(["autotune", str(data), "--batch-size", "8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "prefetch" in lines[1]
    assert lines[-2].split() == ["4", "390", "1.0", "10%", "4", "<-", "chosen"]
    assert lines[-3].split() == ["4", "300", "1.0", "10%"]  # the default: not chosen
    assert lines[-1] == "num_workers=4, prefetch_factor=4: the reason"


def test_autotune_command_shows_both_kinds_of_worker_when_auto(
    data: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fastload import autotune as tune
    from fastload.cli import main

    table = [
        tune.Measurement(2, 300.0, 1.0, 0.9),
        tune.Measurement(2, 310.0, 1.0, 0.9, worker_type="process"),
        tune.Measurement(2, 400.0, 1.0, 0.9, worker_type="thread"),
    ]
    found = tune.AutotuneResult(2, 400.0, table, "the reason", worker_type="thread")
    asked = {}

    def fake(*args: object, **kwargs: object) -> tune.AutotuneResult:
        asked.update(kwargs)
        return found

    monkeypatch.setattr(tune, "autotune", fake)
    assert main(["autotune", str(data), "--batch-size", "8", "--worker-type", "auto"]) == 0
    assert asked["loader_kwargs"] == {"worker_type": "auto"}
    lines = capsys.readouterr().out.splitlines()
    assert "workers" in lines[1].split()
    assert lines[-2].split() == ["2", "400", "1.0", "90%", "thread", "<-", "chosen"]
    assert lines[-3].split() == ["2", "310", "1.0", "90%", "process"]
    assert lines[-4].split() == ["2", "300", "1.0", "90%"]  # the count's search
    assert lines[-1] == "num_workers=2, worker_type='thread': the reason"


# ---------------------------------------------------------------- the first hour of a new user


def test_the_folder_is_positional_too(data: Path, tmp_path: Path) -> None:
    proc = fastload(
        "bench", str(data), "--backend", "opencv", "--seconds", "1", "--num-workers", "0",
        "--batch-size", "8", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["data"] == str(data)
    env = {"FASTLOAD_CACHE_DIR": str(tmp_path)}
    tuned = fastload("autotune", str(data), "--batch-size", "8", "--budget", "2", "--json", env=env)
    assert tuned.returncode == 0, tuned.stderr
    assert json.loads(tuned.stdout)["data"] == str(data)
    both = fastload("bench", str(data), "--data", str(tmp_path))
    assert both.returncode == 2
    assert both.stderr.strip() == (
        f"fastload bench: error: two folders given: DIR {str(data)!r} and --data "
        f"{str(tmp_path)!r}; give one"
    )


@pytest.mark.parametrize("command", ["bench", "autotune"])
def test_help_explains_every_option_and_its_default(command: str) -> None:
    import argparse

    from fastload import cli

    sub = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices[command]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        name = action.option_strings[0] if action.option_strings else action.metavar
        assert action.help, f"{command} {name} has no help line"
        if action.default not in (None, False):
            assert (
                f"(default: {action.default:g}" in action.help
                if isinstance(action.default, float)
                else f"(default: {action.default}" in action.help
            ), (name, action.help)
    text = " ".join(parser.format_help().split())  # unwrapped
    assert "%%" not in text and "ImageNet-like JPEGs made once in" in text


def test_a_cached_answer_taken_under_load_says_so_and_is_measured_again_when_asked(
    data: Path, tmp_path: Path
) -> None:
    env = {"FASTLOAD_CACHE_DIR": str(tmp_path)}
    args = ("autotune", str(data), "--batch-size", "8", "--budget", "2")
    assert fastload(*args, "--json", env=env).returncode == 0
    cache = tmp_path / "autotune.json"
    stored = json.loads(cache.read_text())
    (entry,) = stored["entries"].values()
    entry["load"] = 999.0  # as if measured beside a busy build
    cache.write_text(json.dumps(stored))
    cores = len(os.sched_getaffinity(0))
    cached = fastload(*args, env=env)
    assert cached.returncode == 0, cached.stderr
    assert (
        f"(from the cache, measured under load (999.0 on {cores} cores); --remeasure-loaded or "
        "--no-cache measures again)" in cached.stdout
    )
    again = fastload(*args, "--remeasure-loaded", env=env)
    assert again.returncode == 0 and "(measured now)" in again.stdout, again.stderr


def test_small_data_is_a_note_not_a_python_warning(data: Path, tmp_path: Path) -> None:
    env = {"FASTLOAD_CACHE_DIR": str(tmp_path)}
    args = ("autotune", str(data), "--batch-size", "32", "--budget", "2")
    proc = fastload(*args, env=env)
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if line.startswith("fastload autotune")]
    assert notes == [
        # not a terminal: what is measured, for how long, instead of a bar
        "fastload autotune: measuring worker counts, 2 s at most",
        "fastload autotune: note: the dataset has 60 samples, fewer than 4 batches of 32: "
        "measuring over repeated epochs, so the figures include epoch starts",
    ]
    assert "UserWarning" not in proc.stderr and ".py:" not in proc.stderr
    again = fastload(*args, env=env)
    # from the cache (the wording names the load when the first run was measured under it)
    assert "(from the cache" in again.stdout and "--no-cache measures again" in again.stdout


def test_num_workers_auto_logs_one_line(data: Path, tmp_path: Path, monkeypatch, caplog) -> None:
    import logging

    import fastload as fl
    from fastload import transforms as T

    monkeypatch.setenv("FASTLOAD_CACHE_DIR", str(tmp_path))
    ds = fl.ImageFolder(data, transform=T.RandomResizedCrop(32))
    with caplog.at_level(logging.INFO, logger="fastload"):
        fl.DataLoader(ds, batch_size=8, num_workers="auto")
    lines = [r.getMessage() for r in caplog.records if r.name == "fastload"]
    assert len(lines) == 1 and lines[0].startswith("num_workers='auto': "), lines


@pytest.mark.parametrize(
    ("name", "home"),
    [
        ("default_data", "synthetic"),
        ("default_root", "synthetic"),
        ("DEFAULT_IMAGES", "synthetic"),
        ("unreadable_files", "diagnosis.scan"),
    ],
)
def test_names_that_moved_still_work_with_a_warning(name: str, home: str) -> None:
    import importlib

    with pytest.warns(DeprecationWarning, match=f"now fastload.{home}.{name}"):
        found = getattr(bench, name)
    assert found is getattr(importlib.import_module(f"fastload.{home}"), name)
