"""The benchmark scripts that only read files run end to end on a small set (figures unchecked:
timing belongs to the benchmarks, not the tests)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fastload.synthetic import make_image_folder

ROOT = Path(__file__).resolve().parents[1]


def assert_figures(path: Path, benchmark: str) -> dict[str, Any]:
    """The figures a benchmark wrote with --json: named, with rows of per-round figures, and
    at least one ratio to the baseline."""
    doc: dict[str, Any] = json.loads(path.read_text())
    assert doc["benchmark"] == benchmark
    assert doc["rows"] and all(row["rates"] for row in doc["rows"])
    assert any("ratio" in row for row in doc["rows"]), doc["rows"]
    return doc


def script(name: str) -> Path:
    """``benchmarks/<group>/<name>.py``: the one script of that name, in the folder of what it
    measures."""
    (found,) = (ROOT / "benchmarks").glob(f"*/{name}.py")
    return found


def run_script(name: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """Run ``benchmarks/<group>/<name>.py``, which must succeed (the end of its output
    otherwise)."""
    done = subprocess.run(
        [sys.executable, str(script(name)), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done


def test_decode_floor_reports_the_ceiling(tmp_path: Path) -> None:
    data = make_image_folder(tmp_path / "set", images=12, classes=2)
    args = ["--data", str(data), "--images", "12", "--rounds", "1", "--backend", "opencv"]
    args += ["--json", str(tmp_path / "figures.json")]
    done = run_script("decode_floor", *args, timeout=300)
    assert_figures(tmp_path / "figures.json", "decode_floor")
    assert "opencv, one core, 12 images" in done.stdout
    ratios = re.findall(r"stock / fastload(.*?)(\d+\.\d+)x", done.stdout)
    assert [label.strip(", ") for label, _ in ratios] == ["now", "at best", "region"]
    assert all(float(r) > 0 for _, r in ratios)
    over = re.search(
        r"fastload sample, region\s+[\d.]+ ms\s+\(([+-][\d.]+)% on the best\)", done.stdout
    )
    assert over is not None, done.stdout
    shares = re.search(r"rows down to its bottom\s+([\d.]+)%, area ([\d.]+)%", done.stdout)
    assert shares is not None
    rows, area = float(shares[1]), float(shares[2])
    assert 0 < area <= rows <= 100  # a crop covers no more area than the rows down to it


def test_float_floor_sets_the_normalize_beside_the_float32_writes(tmp_path: Path) -> None:
    args = ["--batch-size", "4", "--size", "32", "--rounds", "2", "--seconds", "0.05"]
    args += ["--uint8-rate", "1000", "--json", str(tmp_path / "figures.json")]
    done = run_script("float_floor", *args, timeout=300)
    doc = assert_figures(tmp_path / "figures.json", "float_floor")
    assert [row["name"] for row in doc["rows"]] == [
        "float32 written",
        "fastload normalize",
        "uint8 stack",
    ]
    times = re.findall(r"(\d+\.\d+) us an image", done.stdout)
    assert len(times) == 3 and all(float(t) > 0 for t in times)
    ceilings = re.findall(
        r"the float32 costing (float32 written|fastload normalize): (\S+)", done.stdout
    )
    assert [name for name, _ in ceilings] == ["float32 written", "fastload normalize"]
    assert all(0 < float(ratio) <= 1 for _, ratio in ceilings)


def test_autotune_sweep_measures_the_choice_again_against_the_sweeps_best(
    tmp_path: Path,
) -> None:
    data = make_image_folder(tmp_path / "set", images=48, classes=2)
    args = ["--data", str(data), "--io-latency", "5", "--io-sigma", "1", "--max-workers", "2"]
    args += ["--budget", "2", "--rounds", "2", "--batch-size", "4", "--epoch-images", "100"]
    args += ["--json", str(tmp_path / "figures.json")]
    done = run_script("autotune_sweep", *args, timeout=300)
    assert_figures(tmp_path / "figures.json", "autotune_sweep")
    assert "48 images (100 samples an epoch), 5 ms mean wait per sample (sigma 1)" in done.stdout
    assert re.search(r"exhaustive sweep \(0\.\.2\)", done.stdout)
    assert "measured again, 2 rounds interleaved" in done.stdout
    shares = re.findall(r"of the means \(rounds ([\d.]+)% to ([\d.]+)%", done.stdout)
    assert shares and all(0 < float(a) <= float(b) for a, b in shares)


def test_prefetch_waits_compares_each_factor_with_the_default(tmp_path: Path) -> None:
    args = ["--workers", "2", "--io-latency", "2", "--seconds", "0.5", "--rounds", "1"]
    args += ["--json", str(tmp_path / "figures.json")]
    done = run_script("prefetch_waits", *args, timeout=300)
    assert_figures(tmp_path / "figures.json", "prefetch_waits")
    assert "ceiling (workers / mean wait): 1,000 images/s" in done.stdout
    rows = re.findall(
        r"prefetch_factor (\d):\s+([\d,]+) images/s; ([\d.]+)x the default's", done.stdout
    )
    assert [f for f, _, _ in rows] == ["1", "2", "4", "8"]
    rates = {f: float(rate.replace(",", "")) for f, rate, _ in rows}
    for factor, _, ratio in rows:  # each against the default measured in the same rounds
        assert float(ratio) == pytest.approx(rates[factor] / rates["2"], abs=0.006)
    # the samples really wait: no factor beats the ceiling the waits set (by more than noise)
    assert max(rates.values()) < 1.15 * 1000


def test_accelerate_torchvision_measures_the_three_loaders(tmp_path: Path) -> None:
    data = make_image_folder(tmp_path / "set", images=24, classes=2)
    args = ["--data", str(data), "--workers", "0", "--batch-size", "8", "--seconds", "1"]
    args += ["--rounds", "1", "--backend", "opencv", "--pipelines", "val"]
    args += ["--json", str(tmp_path / "figures.json")]
    done = run_script("accelerate_torchvision", *args, timeout=300)
    assert_figures(tmp_path / "figures.json", "accelerate_torchvision")
    assert "torchvision, accelerated" in done.stdout and "opencv" in done.stdout
    assert re.search(r"accelerated / hand-written fastload: \d+\.\d\d", done.stdout)


def test_fault_soak_passes_its_checks(tmp_path: Path) -> None:
    args = [
        "--images",
        "24",
        "--epochs",
        "2",
        "--batch-size",
        "8",
        "--backends",
        "pillow",
        "nvimgcodec",
    ]
    args += ["--json", str(tmp_path / "figures.json")]
    done = run_script("fault_soak", *args, timeout=600)
    assert_figures(tmp_path / "figures.json", "fault_soak")
    assert "FAIL" not in done.stdout and "every check passed" in done.stdout
    assert "nvimgcodec: 2 epochs" in done.stdout and "seen exactly once (24 of 24)" in done.stdout


def test_reference_recipes_measure_stock_against_the_swap(tmp_path: Path) -> None:
    data = make_image_folder(tmp_path / "set", images=24, classes=2)
    args = ["--data", str(data), "--workers", "0", "--batch-size", "8", "--crop", "32"]
    args += ["--seconds", "0.2", "--rounds", "1"]
    args += ["--json", str(tmp_path / "figures.json")]
    done = run_script("reference_recipes", *args, timeout=300)
    assert_figures(tmp_path / "figures.json", "reference_recipes")
    rounds = re.findall(r"round 1\s+(\S+): stock .*? \((whole|in part)\): ([\d.]+)x", done.stdout)
    how = {name: part for name, part, _ in rounds}
    # the default recipes and mixup's collate closure run whole; a policy on the CPU, in part
    assert how == {
        "train": "whole",
        "val": "whole",
        "ta_wide": "in part",
        "ra": "in part",
        "augmix": "in part",
        "mixup+cutmix": "whole",
    }
    # the policies as they run with a CUDA device, for comparison
    on_batches = re.findall(r"round 1\s+(\S+): .*; on batches .*: ([\d.]+)x", done.stdout)
    assert [name for name, _ in on_batches] == ["ta_wide", "ra", "augmix"]
    assert all(float(ratio) > 0 for _, _, ratio in rounds)
    assert re.search(r"mixup\+cutmix\s+[\d.]+x\s+[\d.]+-[\d.]+", done.stdout)


def test_timm_swap_measures_timms_loader_against_the_swap(tmp_path: Path) -> None:
    data = make_image_folder(tmp_path / "set", images=16, classes=2)
    args = ["--data", str(data), "--workers", "0", "--batch-size", "4", "--size", "32"]
    args += ["--seconds", "0.2", "--rounds", "1", "--recipes", "train", "val"]
    args += ["--json", str(tmp_path / "figures.json")]
    done = run_script("timm_swap", *args, timeout=300)
    assert_figures(tmp_path / "figures.json", "timm_swap")
    assert re.findall(r"^(\w+): fastload.DataLoader", done.stdout, re.M) == ["train", "val"]
    ratios = re.findall(r"fastload / timm: ([\d.]+)x", done.stdout)
    assert len(ratios) == 2 and all(float(r) > 0 for r in ratios)


def test_tables_measures_the_hf_pattern_and_parquet_against_shards(tmp_path: Path) -> None:
    data = make_image_folder(tmp_path / "set", images=16, classes=2)
    args = ["--data", str(data), "--work", str(tmp_path / "work"), "--workers", "0"]
    args += ["--batch-size", "4", "--size", "32", "--seconds", "0.2", "--rounds", "1"]
    args += ["--json", str(tmp_path / "figures.json")]
    done = run_script("tables", *args, timeout=300)
    assert_figures(tmp_path / "figures.json", "tables")
    rows = ("hf + torch", "hf + fastload", "ImageTable(dataset)", "ImageTable(parquet)")
    for row in (*rows, "ImageShards"):
        assert re.search(rf"{re.escape(row)}: +[\d.]+ images/s", done.stdout), done.stdout
    assert re.search(r"ImageTable\(parquet\) / ImageShards: [\d.]+x", done.stdout)


def test_train_ceiling_feeds_one_loop_both_ways_in_pinned_children(tmp_path: Path) -> None:
    data = make_image_folder(tmp_path / "set", images=16, classes=2)
    args = ["--data", str(data), "--archs", "resnet18", "--cores", "1", "--device", "cpu"]
    args += ["--batch-size", "4", "--image-size", "32", "--steps", "1", "--rounds", "1"]
    args += ["--stock-workers", "0"]
    args += ["--json", str(tmp_path / "figures.json")]
    done = run_script("train_ceiling", *args, timeout=600)
    assert_figures(tmp_path / "figures.json", "train_ceiling")
    rows = re.findall(r"resnet18\s+(fastload, 1 cores|stock, 0 workers)\s+synthetic", done.stdout)
    assert rows == ["fastload, 1 cores", "stock, 0 workers"], done.stdout
    assert "fastload.DataLoader: batch_size=4, num_workers=1, device=cpu" in done.stdout
    assert all(float(r) > 0 for r in re.findall(r"ratio (\d+\.\d+)", done.stdout))
    waits = re.findall(
        r"waiting for data (\d+\.\d)% \((\d+\.\d)%-(\d+\.\d)%\) of the step", done.stdout
    )
    assert len(waits) == 2 and all(0 < float(w) <= 100 for row in waits for w in row), done.stdout
    figures = json.loads((tmp_path / "figures.json").read_text())["rows"]
    assert all(0 < share <= 1 for r in figures for share in r["data_wait_share"])


def test_executor_cpu_side_times_each_step(tmp_path: Path) -> None:
    data = make_image_folder(tmp_path / "set", images=24, classes=2)
    args = ["--data", str(data), "--rounds", "1", "--processes", "1", "2"]
    args += ["--json", str(tmp_path / "figures.json")]
    done = run_script("executor_cpu_side", *args, timeout=300)
    assert_figures(tmp_path / "figures.json", "executor_cpu_side")
    steps = re.findall(r"^  (\w[\w ]*?)\s+([\d.]+) us", done.stdout, re.M)
    names = [name for name, _ in steps]
    assert names == ["read", "header", "plan", "region", "code stream", "render plan", "all"]
    assert re.search(r"steps 1-4 in 2 process\(es\): median [\d,]+ samples/s", done.stdout)


def test_shards_benchmark_runs_every_part(tmp_path: Path) -> None:
    data = make_image_folder(tmp_path / "set", images=48, classes=3)
    args = ["--data", str(data), "--seconds", "2", "--rounds", "1", "--batch-size", "8"]
    args += ["--shards", "3", "--many", "12", "--max-side", "64", "--backend", "pillow"]
    args += ["--json", str(tmp_path / "figures.json")]
    done = run_script("shards", *args, timeout=600)
    assert_figures(tmp_path / "figures.json", "shards")
    rows = ["stock folder", "fastload folder", "fastload shards", "webdataset"]
    for row in [*rows, "fastload shards raw 64", "fastload shards raw half 64"]:
        assert re.search(rf"  {row}\s+[\d,]+ images/s", done.stdout), done.stdout
    assert re.search(r"the raw half 64 pack: [\d.]+ MiB", done.stdout)
    assert re.search(r"fastload shards / webdataset: median \d+\.\d+x", done.stdout)
    assert len(re.findall(r"pack / tar: median \d+\.\d+x", done.stdout)) == 2
    assert len(re.findall(r"\s+\d+ shards: [\d,]+ / [\d,]+ MiB, \d+ fds", done.stdout)) == 2
    assert "window 8" in done.stdout
    assert len(re.findall(r"max_side \d+ \(\d+% of the bytes\), .*: [\d.]+ dB", done.stdout)) == 6


def test_raw_choice_models_both_costs_and_sets_each_choice_against_random(
    tmp_path: Path,
) -> None:
    data = make_image_folder(tmp_path / "set", images=12, classes=2)
    done = run_script("raw_choice", "--data", str(data), "--max-side", "64", "--seeds", "2")
    assert "12 photos" in done.stdout
    assert re.search(
        r"decoding: -?\d+ us \+ -?[\d.]+ ns a pixel \+ -?[\d.]+ ns a byte", done.stdout
    )
    shares = re.findall(
        r"share (0\.\d\d): .* by bytes per pixel -?[\d.]+, at random -?[\d.]+ .* by each "
        r"image's measured saving -?[\d.]+",
        done.stdout,
    )
    assert shares == ["0.25", "0.50", "0.75"], done.stdout


def test_seekable_sets_rewritten_jpegs_against_the_files(tmp_path: Path) -> None:
    data = make_image_folder(tmp_path / "set", images=6, classes=2)
    args = ["--data", str(data), "--rounds", "2", "--seconds", "0.1"]
    done = run_script("seekable", *args, "--json", str(tmp_path / "figures.json"))
    assert_figures(tmp_path / "figures.json", "seekable")
    assert re.search(r"6 JPEGs, .* rewritten: [\d.]+x the bytes .* the same pixels", done.stdout)
    assert re.search(r"seekable / files: \d+\.\d\dx \(", done.stdout), done.stdout
    empty = subprocess.run(
        [sys.executable, str(script("seekable")), "--data", str(tmp_path / "no")],
        capture_output=True,
        text=True,
    )
    assert empty.returncode == 2 and "no .jpg or .jpeg files" in empty.stderr


def test_seekable_nvimgcodec_sets_rewritten_jpegs_against_the_files(tmp_path: Path) -> None:
    """nvImageCodec's CPU decoder here (the GPU decoders need a GPU): whole and cropped."""
    data = make_image_folder(tmp_path / "set", images=70, classes=2)
    done = run_script(
        "seekable_nvimgcodec", "--data", str(data), "--device", "cpu", "--rounds", "1"
    )
    assert re.search(r"70 JPEGs; rewritten: [\d.]+x the bytes", done.stdout), done.stdout
    for mode in ("whole", "crops"):
        line = (
            rf"cpu, {mode}: files [\d,]+ images/s on \d+\.\d cores, seekable [\d,]+ on "
            rf"\d+\.\d; seekable / files \d+\.\d\dx .* decoded 70 and 70 of 70"
        )
        assert re.search(line, done.stdout), done.stdout
    assert "largest pixel difference, same decoder: 0" in done.stdout


def test_ray_data_sets_fastload_on_ray_against_rays_pipeline_and_the_loader(
    tmp_path: Path,
) -> None:
    data = make_image_folder(tmp_path / "set", images=16, classes=2)
    args = ["--data", str(data), "--rounds", "1", "--batch-size", "8"]
    done = run_script("ray_data", *args, "--json", str(tmp_path / "figures.json"))
    assert_figures(tmp_path / "figures.json", "ray_data")
    for ratio in ("fastload on Ray / Ray's pipeline", "fastload on Ray / fastload alone"):
        assert re.search(rf"{ratio}: \d+\.\d\dx", done.stdout), done.stdout
    assert re.search(r"Ray's pipeline\s+[\d,]+ images/s\s+peak memory\s+-?[\d,]+ MiB", done.stdout)


def test_remote_benchmark_prints_every_ratio(tmp_path: Path) -> None:
    data = make_image_folder(tmp_path / "set", images=48, classes=3)
    args = ["--data", str(data), "--rounds", "1", "--batch-size", "8", "--shards", "6"]
    args += ["--repeat", "1", "--rate", "5e6", "--latency", "0.005"]
    args += ["--json", str(tmp_path / "figures.json")]
    done = run_script("remote", *args, timeout=600)
    assert_figures(tmp_path / "figures.json", "remote")
    for row in ("local", "s3 first", "s3 cached", "s3 throttled"):
        assert re.search(rf"  {row}\s+\d+ \(\d+-\d+\)", done.stdout), done.stdout
    assert len(re.findall(r"\d+\.\d+ \(\d+\.\d+-\d+\.\d+\)x local", done.stdout)) == 2
    assert re.search(r"x what the link allows \(5 MB/s, 5 ms: \d+ images/s\)", done.stdout)
    assert re.search(r"largest sampled: .* \((within|ABOVE)\)", done.stdout)
    assert re.search(r"plain ranged GETs [\d.]+ \(.*\), fsspec's client [\d.]+ ", done.stdout)


def test_open_clip_swap_runs_openclips_loader_and_main_beside_fastloads(tmp_path: Path) -> None:
    """With OpenCLIP's pinned webdataset from the folder scripts/install.sh makes (dev)."""
    data = make_image_folder(tmp_path / "set", images=96, classes=3)
    args = ["--data", str(data), "--work", str(tmp_path / "work"), "--rounds", "1"]
    args += ["--shards", "4", "--batch-size", "16", "--batches", "3", "--main"]
    args += ["--main-samples", "32"]
    args += ["--json", str(tmp_path / "figures.json")]
    done = run_script("open_clip_swap", *args, timeout=900)
    assert_figures(tmp_path / "figures.json", "open_clip_swap")
    for row in ("open_clip", "fastload", "fastload text", "fastload cls"):
        assert re.search(rf"round 1 {row} +[\d.]+ images/s \[16, 3, 224, 224\]", done.stdout)
    ratios = re.findall(r"(fastload[a-z ]*) / ([a-z_ ]+): median ([\d.]+)x", done.stdout)
    assert [(a, b) for a, b, _ in ratios] == [
        ("fastload", "open_clip"),
        ("fastload text", "fastload cls"),
        ("fastload", "fastload text"),
        ("fastload", "open_clip"),
    ]
    assert all(float(r) > 0 for *_, r in ratios)
    # OpenCLIP's main counts the same samples per epoch with either loader
    for row in ("open_clip", "fastload"):
        epoch = rf"round 1 {row} +epoch +[\d.]+ s \( *[\d.]+ s waiting for data\), 32/32 samples"
        assert re.search(epoch, done.stdout), done.stdout


def test_worker_threads_sets_threads_against_processes_and_dali(tmp_path: Path) -> None:
    data = make_image_folder(tmp_path / "set", images=24, classes=2)
    args = ["--data", str(data), "--batch-size", "8", "--seconds", "0.5", "--rounds", "1"]
    # pinned to one core, with one worker of each kind (as the GPU check pins 4, 8 and 16)
    args += ["--cores", "1"]
    args += ["--json", str(tmp_path / "figures.json")]
    done = run_script("worker_threads", *args, timeout=600)
    assert_figures(tmp_path / "figures.json", "worker_threads")
    assert "pinned to 1 cores:" in done.stdout and "1 workers / threads" in done.stdout
    ratios = ["thread float32 / process float32", "thread float32 / DALI CPU float32"]
    ratios += ["process float32 / process uint8", "thread float32 / thread uint8"]
    for ratio in ratios:
        assert re.search(rf"{ratio}: \d+\.\d\dx", done.stdout), done.stdout
    assert re.search(r"memory, threads / processes, float32: \d+\.\d\dx", done.stdout)
    # the samples' own work on one core, times the workers: what each kind reaches of it
    ceiling = r"ceiling, float32: one core \d+ images/s, x1 = \d+; reached: processes \d+%, threads"
    assert re.search(ceiling, done.stdout), done.stdout


def run_benchmark(tmp_path: Path, name: str, *args: str) -> dict[str, Any]:
    """Run the benchmark ``name`` with ``--json``; the figures it wrote."""
    out = tmp_path / f"{name}.json"
    run_script(name, *args, "--json", str(out))
    return assert_figures(out, name)


def test_decode_pipeline_writes_each_rounds_ratio_to_stock(tmp_path: Path) -> None:
    data = make_image_folder(tmp_path / "set", images=16, classes=2)
    args = ["--data", str(data), "--workers", "0", "--batch-size", "4", "--seconds", "1"]
    args += ["--rounds", "2", "--pipelines", "val", "--backends", "opencv"]
    doc = run_benchmark(tmp_path, "decode_pipeline", *args)
    stock, opencv = doc["rows"][:2]
    assert (stock["name"], opencv["name"]) == ("stock torchvision", "opencv")
    assert len(opencv["rates"]) == len(stock["rates"]) == 2
    ratios = [a / b for a, b in zip(opencv["rates"], stock["rates"], strict=True)]
    assert opencv["low"] == pytest.approx(min(ratios), abs=1e-3)
    assert opencv["high"] == pytest.approx(max(ratios), abs=1e-3)


def test_gpu_augment_sets_each_pipeline_against_torchvisions_loop(tmp_path: Path) -> None:
    args = ["--device", "cpu", "--batch-size", "4", "--repeats", "1"]
    doc = run_benchmark(tmp_path, "gpu_augment", *args)
    assert [(row["group"], "ratio" in row) for row in doc["rows"]] == [
        ("jitter", False),
        ("jitter", True),
        ("jitter", True),
        ("crop+jitter", False),
        ("crop+jitter", True),
        ("crop+jitter", True),
    ]


def test_train_side_by_side_sets_fastload_against_the_stock_loop(tmp_path: Path) -> None:
    data = make_image_folder(tmp_path / "set", images=16, classes=2)
    args = ["--data", str(data), "--arch", "resnet18", "--device", "cpu", "--batch-size", "4"]
    args += ["--workers", "0", "--image-size", "32", "--steps", "1", "--rounds", "2"]
    args += ["--precision", "fp32"]
    doc = run_benchmark(tmp_path, "train_side_by_side", *args)
    stock, ours = doc["rows"]
    assert (stock["name"], ours["name"]) == ("stock", "fastload")
    assert len(ours["rates"]) == len(stock["rates"]) == 2
    assert doc["settings"]["precision"] == "fp32"


def test_train_loop_overhead_sets_the_trainer_against_a_plain_loop(tmp_path: Path) -> None:
    doc = run_benchmark(tmp_path, "train_loop_overhead", "--rounds", "2", "--steps", "5")
    plain, trainer = doc["rows"]
    assert (plain["name"], trainer["name"]) == ("hand-written loop", "fastload Trainer")
    assert trainer["unit"] == "steps/s" and len(trainer["rates"]) == 2


def test_prefetch_overlap_writes_the_pass_through_cost(tmp_path: Path) -> None:
    args = ["--device", "cpu", "--batches", "3", "--trials", "1"]
    doc = run_benchmark(tmp_path, "prefetch_overlap", *args)
    groups = [row["group"] for row in doc["rows"]]
    assert groups == ["pass-through, 0 workers"] * 2 + ["pass-through, 2 workers"] * 2


def test_delivery_runs_its_cpu_row_without_a_gpu(tmp_path: Path) -> None:
    """Its device rows, each a ratio to this one, need CUDA; --where samples the row with the
    real py-spy (a dev dependency)."""
    out = tmp_path / "delivery.json"
    args = ["--device", "cpu", "--workers", "1", "--seconds", "0.2", "--rounds", "1"]
    done = run_script("delivery", *args, "--where", "1", "--json", str(out))
    processes, threads = json.loads(out.read_text())["rows"]
    assert processes["group"] == "worker processes" and threads["group"] == "worker threads"
    for row in (processes, threads):
        assert row["name"] == "left on the CPU" and len(row["rates"]) == 1
        assert row["cores"] > 0  # the workers decoded: their CPU counts, wherever they ran
        where = f"where {row['group']}, left on the CPU's main process spends its time:"
        assert where in done.stdout, done.stdout
        shares = [share for stages in row["busy"].values() for share in stages.values()]
        assert shares and all(0 < share <= 1.05 for share in shares), row["busy"]
    # the thread workers decode in this process, and are sampled there
    assert threads["busy"]["worker threads"]["making batches"] > 0, threads["busy"]


def _frames(*frames: str) -> str:
    return ";".join(f"{name} ({where})" for name, where in frames)


def test_where_time_goes_files_each_sample_under_its_deepest_stage() -> None:
    spec = importlib.util.spec_from_file_location(
        "where_time_goes", ROOT / "benchmarks/where_time_goes.py"
    )
    assert spec is not None and spec.loader is not None
    where = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(where)
    main = "thread (11): MainThread;<module> (bench.py:3)"
    loop = ("CUDAPrefetcher.__next__", "fastload/gpu/prefetch.py:140")
    receive = ("_MultiProcessingDataLoaderIter._try_get_data", "fastload/loader/workers.py:252")
    raw = "\n".join(
        [
            # the prefetcher draws from the loader: receiving, where the queue is read
            f"{main};{_frames(loop, receive, ('Queue.get', 'multiprocessing/queues.py:122'))} 50",
            # the batch ops, called from the prefetcher: the ops'
            f"{main};{_frames(loop, ('BatchStage.__call__', 'fastload/gpu/stage.py:88'))} 30",
            f"{main};{_frames(loop)} 20",  # the copies and events themselves
            # the prefetcher walking the batch's structure: still its own, not pinning
            f"{main};{_frames(loop, ('map_tensors', 'fastload/memory/tensors.py:104'))} 10",
            f"{main};{_frames(('read_rate', 'fastload/autotune/rates.py:90'))} 10",
            # the pin-memory thread's copy into pinned memory
            "thread (12): Thread-1 (_pin_memory_loop);"
            + _frames(
                ("_pin_memory_loop", "torch/utils/data/_utils/pin_memory.py:59"),
                ("pin_memory", "torch/utils/data/_utils/pin_memory.py:70"),
            )
            + " 40",
            # a worker thread decoding, and pinning its batch
            "thread (13): fastload-worker_0;"
            + _frames(
                ("_make", "fastload/loader/threads.py:150"),
                ("decode", "fastload/backends/region.py:80"),
            )
            + " 100",
            "thread (13): fastload-worker_0;"
            + _frames(
                ("_make", "fastload/loader/threads.py:159"),
                ("pin_memory", "torch/utils/data/_utils/pin_memory.py:70"),
            )
            + " 20",
        ]
    )
    shares = where.busy_shares(raw, seconds=1.0)  # 200 samples a second
    expected = {
        "main thread": {
            "receiving": 0.25,
            "batch ops": 0.15,
            "copies, events": 0.15,
            "other": 0.05,
        },
        "pin-memory thread": {"pinning": 0.2},
        "worker threads": {"making batches": 0.5, "pinning": 0.1},
    }
    assert set(shares) == set(expected)
    for role, stages in expected.items():
        assert shares[role] == pytest.approx(stages), role


def test_worker_memory_sets_the_sample_arrays_against_a_list(tmp_path: Path) -> None:
    doc = run_benchmark(tmp_path, "worker_memory", "--files", "20000", "--epochs", "2")
    base, ours = doc["rows"]
    assert base["name"] == "list of (path, label) tuples"
    assert ours["name"] == "fastload.ImageList" and len(ours["rates"]) == 2


def test_detection_swap_sets_the_swap_against_the_stock_reference_loader(tmp_path: Path) -> None:
    args = ["--images", "12", "--seconds", "0.5", "--rounds", "2", "--workers", "1"]
    args += ["--pipelines", "multiscale, masks", "--json", str(tmp_path / "figures.json")]
    done = run_script("detection_swap", *args, "--where", "0.5")
    doc = assert_figures(tmp_path / "figures.json", "detection_swap")
    assert [row["name"] for row in doc["rows"]] == [
        "stock torchvision",
        "fastload, accelerate=True",
        "fastload, accelerate=True, worker_type='thread'",
    ]
    assert all(len(row["rates"]) == 2 for row in doc["rows"])
    assert all(row["main_cpu_ms_per_image"] > 0 for row in doc["rows"])  # the main process's
    assert "accelerated in part" in done.stdout and "RandomShortestSize" in done.stdout
    assert len(re.findall(r"accelerate=True.*? [\d,]+: \d+\.\d\dx \(", done.stdout)) == 2
    # --where: each loader's process sampled (a main thread that only waited has no samples);
    # the thread row's workers make its batches in this process, busy throughout
    assert all(isinstance(row["busy"], dict) for row in doc["rows"]), doc["rows"]
    assert doc["rows"][2]["busy"]["worker threads"]["making batches"] > 0, doc["rows"][2]


def test_detection_masks_memory_sets_fastloads_mask_memory_against_torchvisions(
    tmp_path: Path,
) -> None:
    args = ["--images", "6", "--rounds", "1", "--pipelines", "multiscale"]
    done = run_script("detection_masks_memory", *args, "--json", str(tmp_path / "figures.json"))
    doc = assert_figures(tmp_path / "figures.json", "detection_masks_memory")
    assert [row["name"] for row in doc["rows"]] == [
        "stock torchvision",
        "fastload, accelerate=True",
    ]
    assert all(row["unit"] == "MiB" and row["group"] == "multiscale, masks" for row in doc["rows"])
    assert "MiB at full size" in done.stdout and "at the output size" in done.stdout


def test_ffcv_peer_says_how_to_get_ffcv_when_it_is_missing(tmp_path: Path) -> None:
    """FFCV is a benchmark peer, not installed with fastload: one line says what to install."""
    done = subprocess.run(
        [sys.executable, str(script("ffcv_peer")), "--data", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "FFCV is not importable" in done.stderr and "ffcv==1.0.2" in done.stderr


def test_handover_bytes_sets_uint8_against_float32_in_rate_and_main_process_cpu(
    tmp_path: Path,
) -> None:
    args = ["--size", "64", "80", "--seconds", "0.3", "--rounds", "1", "--batch-size", "2"]
    doc = run_benchmark(tmp_path, "handover_bytes", *args)
    ratios = {(row["name"], row["group"], row["unit"]) for row in doc["rows"] if "ratio" in row}
    assert ratios == {("uint8", "rate", "images/s"), ("uint8", "main", "ms CPU an image")}
    assert all(rate > 0 for row in doc["rows"] for rate in row["rates"])


def test_handover_sets_fastloads_way_against_torchs_and_torchs_loader_in_rate_and_cpu(
    tmp_path: Path,
) -> None:
    doc = run_benchmark(tmp_path, "handover", "--seconds", "0.3", "--rounds", "1")
    ratios = {(row["group"], row.get("against")) for row in doc["rows"] if "ratio" in row}
    cases = ("classification", "classification, own collate", "image-text", "detection")
    cases += ("segmentation",)
    units = ("images/s", "ms CPU a batch")
    assert ratios == {(f"{case}, {unit}", None) for case in cases for unit in units} | {
        (f"{case} against torch's DataLoader, {unit}", "torch's DataLoader")
        for case in cases
        for unit in units
    }
    assert all(rate > 0 for row in doc["rows"] for rate in row["rates"])


def test_heap_reuse_sets_fastload_against_its_baselines_and_torchs_loader(
    tmp_path: Path,
) -> None:
    left = ("no workers, own collate, uint8",)  # against the heap as left
    alone = ("2 worker threads, two float32 views",)  # against the images alone in the ring
    each = ("no workers, two float32 views, 3 batches held",)  # against a buffer a batch
    args = ["--seconds", "0.3", "--rounds", "1", "--cases", *left, *alone, *each]
    doc = run_benchmark(tmp_path, "heap_reuse", *args)
    ratios = {(row["group"], row.get("against")) for row in doc["rows"] if "ratio" in row}
    cases = left + alone + each
    assert ratios == {(case, None) for case in left} | {
        (case, "fastload, images alone") for case in alone
    } | {(case, "fastload, a buffer a batch") for case in each} | {
        (f"{case} against torch's DataLoader", "torch's DataLoader") for case in cases
    }
    faults = [row for row in doc["rows"] if row["unit"] == "page faults a batch"]
    assert len(faults) == 3 * len(cases) and all(f >= 0 for row in faults for f in row["rates"])


def test_shared_ring_sets_kept_memory_against_fresh_in_speed_and_memory(tmp_path: Path) -> None:
    from fastload.synthetic import make_coco

    data = make_image_folder(tmp_path / "set", images=24, classes=2)
    make_coco(tmp_path / "coco", images=8)
    args = ["--data", str(data), "--coco", str(tmp_path / "coco"), "--seconds", "0.5"]
    args += ["--rounds", "1", "--pipelines", "classification float32", "detection multiscale"]
    doc = run_benchmark(tmp_path, "shared_ring", *args)
    units = {(row["group"], row["unit"]) for row in doc["rows"] if "ratio" in row}
    assert units == {
        (pipeline, unit)
        for pipeline in ("classification float32", "detection multiscale")
        for unit in ("images/s", "MiB")
    }


def test_float_ops_sets_each_op_after_normalize_against_normalize_alone(tmp_path: Path) -> None:
    args = ["--images", "40", "--batch-size", "4", "--rounds", "2", "--seconds", "0.2"]
    args += ["--pack", str(tmp_path / "pack"), "--json", str(tmp_path / "figures.json")]
    done = run_script("float_ops", *args, timeout=300)
    doc = assert_figures(tmp_path / "figures.json", "float_ops")
    names = [row["name"] for row in doc["rows"]]
    assert names[0] == "Normalize" and "Normalize + MixUp" in names
    assert "Normalize, channels_last" in names and "Normalize + RandomErasing" in names
    ratios = re.findall(r"images/s  (\d+\.\d+)x \([\d.]+-[\d.]+\) Normalize", done.stdout)
    assert len(ratios) == len(names) - 1 and all(float(r) > 0 for r in ratios)
    assert (tmp_path / "pack" / "manifest.json").exists()  # made once, where asked


@pytest.mark.skipif(shutil.which("perf") is None, reason="needs perf (apt-get install linux-perf)")
def test_gil_releases_counts_what_a_thread_workers_sample_lets_go(tmp_path: Path) -> None:
    data = make_image_folder(tmp_path / "set", images=16, classes=2)
    done = run_script("gil_releases", "--data", str(data), "--batches", "4", timeout=600)
    total = re.search(
        r"GIL releases an image: ([\d.]+) \(2 worker threads, 256 images\)", done.stdout
    )
    assert total is not None, done.stdout
    callers = dict(
        (caller.strip(), float(count))
        for count, caller in re.findall(r"^\s+([\d.]+)\s+(.+)$", done.stdout, re.MULTILINE)
    )
    # a batch's files are read, and its random crops decoded and resized, in one call each
    # that lets go of the GIL once or twice a batch; nothing of os's reading, of torch's
    # resize or of numpy's array draws is left on the sample's path
    assert callers.get("read_many <- cfunction_call", 0) <= 2 / 64, done.stdout
    assert "read_file <- cfunction_call" not in callers, done.stdout
    assert not any("os_read" in c or "upsample" in c or "randint" in c for c in callers)
    assert float(total[1]) <= 3, done.stdout  # 17 before the compiled reader and resize, 6.5
    listed = subprocess.run(["perf", "probe", "-l"], capture_output=True, text=True).stdout
    assert "PyEval_SaveThread" not in listed  # the probe it added is gone
