"""OpenCLIP's webdataset loader against fastload in its place: issue 43's figures.

Setup, once per ``--work`` folder: the photos of ``--data`` (class folders) are listed in a CSV
table (``filepath``, ``title``: a caption made of the class and the file's name) and packed
twice with ``fastload.pack`` into about ``--shards`` shards, with the same image bytes: as
image-text samples (``KEY.jpg`` + ``KEY.txt`` + ``KEY.json``), and from the class folder
(``KEY.jpg`` + ``KEY.cls``).

The loader alone: OpenCLIP's real train preprocess (``open_clip.create_model_and_transforms``
for ``--model``, no pretrained weights) and tokenizer (``open_clip.get_tokenizer``), batch
``--batch-size``, ``--workers`` workers. Each row runs in a process of its own, every round,
rounds interleaved and rotated; it reads ``--batches`` batches, and its rate leaves out the
first one (the workers' start, and webdataset's shuffle buffer filling).

* ``open_clip``: OpenCLIP's own ``open_clip_train.data.get_wds_dataset`` on the image-text
  shards, with webdataset 0.2.86 taken from ``--baseline-path``. OpenCLIP's ``training`` extra
  pins ``webdataset<=0.2.86`` (newer ones break its loader), so the pin lives in a folder of
  its own, which ``scripts/install.sh`` makes with the ``dev`` extras
  (``pip install --no-deps --target DIR "webdataset==0.2.86"``).
* ``fastload``: ``fastload.integrations.open_clip.get_wds_dataset`` with the same arguments,
  on the same shards: what ``python -m fastload.integrations.open_clip`` trains with.
* ``fastload text`` and ``fastload cls``: the same loader's options without the tokenizer, over
  the image-text pack (captions as strings) and over the ``.cls`` pack: the same images, so
  ``fastload text / fastload cls`` is what reading captions costs. (``fastload / fastload
  text`` is what OpenCLIP's tokenizer costs; its own loader pays it too.)

``--main``: OpenCLIP's ``main`` for one short epoch on the CPU (a tiny model of its own
configurations, ``--main-args``), through ``python -m open_clip_train.main`` (its own loader,
webdataset 0.2.86) and ``python -m fastload.integrations.open_clip``, interleaved: the epoch's
wall seconds as OpenCLIP logs them (its ``batch_time`` summed; model building left out) and
the samples per epoch it reports.

Run: python benchmarks/peers/open_clip_swap.py [--baseline-path DIR] [--data DIR] [--rounds 3]
     [--main]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import fastload
from fastload.synthetic import default_data

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results

BASELINE = Path(__file__).resolve().parents[2] / ".venv" / "baselines" / "webdataset-0.2.86"
ROWS = ("open_clip", "fastload", "fastload text", "fastload cls")
MAIN_ARGS = (
    "--model ViT-S-32-alt --force-image-size 64 --batch-size 16 --epochs 1 --workers 2 "
    "--precision fp32 --device cpu --save-frequency 0 --report-to '' --log-every-n-steps 1"
)


def make_packs(data: Path, work: Path, shards: int) -> tuple[Path, Path, int]:
    """The image-text pack and the class pack of ``data``'s photos (made once)."""
    photos = sorted(p for p in data.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
    size = sum(p.stat().st_size for p in photos) // shards + 4096
    table, text, classes = work / "photos.csv", work / "text", work / "cls"
    if not (text / "manifest.json").exists():
        work.mkdir(parents=True, exist_ok=True)
        with open(table, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["filepath", "title"])
            for p in photos:
                writer.writerow([str(p), f"a photo of a {p.parent.name}, named {p.stem}"])
        fastload.pack(table, text, shard_size=size, progress=False)
    if not (classes / "manifest.json").exists():
        fastload.pack(data, classes, shard_size=size, progress=False)
    return text, classes, len(photos)


def _pattern(pack: Path) -> str:
    """The pack's shards as one brace pattern, as OpenCLIP's ``--train-data`` takes them."""
    names = sorted(p.name for p in pack.glob("*.tar"))
    stem, width = names[0].rsplit("-", 1)[0], len(names[0].rsplit("-", 1)[1]) - 4
    return f"{pack}/{stem}-{{{0:0{width}d}..{len(names) - 1:0{width}d}}}.tar"


def _loader(row: str, args: argparse.Namespace, samples: int) -> Any:
    """The row's loader, built as OpenCLIP builds its own (in the row's process)."""
    import open_clip

    _, preprocess, _ = open_clip.create_model_and_transforms(args.model, pretrained=None)
    tokenizer = open_clip.get_tokenizer(args.model)
    options = SimpleNamespace(
        train_data=_pattern(Path(args.work) / ("cls" if row == "fastload cls" else "text")),
        train_num_samples=samples,
        train_data_upsampling_factors=None,
        dataset_resampled=False,
        batch_size=args.batch_size,
        workers=args.workers,
        seed=0,
        world_size=1,
        rank=0,
    )
    if row == "open_clip":
        import webdataset
        from open_clip_train.data import get_wds_dataset

        assert webdataset.__version__ == "0.2.86", webdataset.__file__  # the pinned baseline
        return get_wds_dataset(options, preprocess, True, tokenizer=tokenizer).dataloader
    from fastload.integrations import open_clip as swap

    if row == "fastload":
        return swap.get_wds_dataset(options, preprocess, True, tokenizer=tokenizer).dataloader
    target = "cls" if row == "fastload cls" else "txt"
    dataset = fastload.ImageShards(options.train_data, preprocess, image=swap.IMAGE, target=target)
    return fastload.DataLoader(  # get_wds_dataset's options, without the tokenizer
        dataset,
        batch_size=args.batch_size,
        sampler=fastload.ShardSampler(dataset, seed=0, drop_last=True),
        num_workers=args.workers,
        drop_last=True,
        persistent_workers=args.workers > 0,
        accelerate=True,
    )


def run_row(row: str, args: argparse.Namespace) -> None:
    """In the row's own process: read ``--batches`` batches; print the rate as JSON."""
    _, _, samples = make_packs(Path(args.data), Path(args.work), args.shards)
    loader = _loader(row, args, samples)
    batches = iter(loader)
    images, _ = next(batches)
    start, seen = time.perf_counter(), 0
    for _ in range(args.batches - 1):
        try:
            images, _ = next(batches)
        except StopIteration:
            raise SystemExit(
                f"{row}: an epoch of {samples} samples holds fewer than --batches "
                f"{args.batches} batches of {args.batch_size}"
            ) from None
        seen += len(images)
    rate = seen / (time.perf_counter() - start)
    print(json.dumps({"rate": rate, "shape": list(images.shape)}))


def _env(row: str, args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    if row == "open_clip":
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [args.baseline_path, env.get("PYTHONPATH")])
        )
    return env


def _child(command: list[str], env: dict[str, str], timeout: float) -> tuple[str, str]:
    """The command's standard output and error; its error ends this run if it fails."""
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} failed:\n{done.stderr[-3000:]}")
    return done.stdout, done.stderr


def _summary(rates: dict[str, list[float]], pairs: list[tuple[str, str]], unit: str) -> None:
    for row, values in rates.items():
        low, high = min(values), max(values)
        print(f"  {row:14} median {statistics.median(values):8.1f} {unit} ({low:.1f}-{high:.1f})")
    for a, b in pairs:
        print(f"  {a} / {b}: median {results.spread(rates[a], rates[b])}")


def measure_loaders(args: argparse.Namespace) -> list[dict[str, Any]]:
    rates: dict[str, list[float]] = {row: [] for row in ROWS}
    for r in range(args.rounds):
        order = ROWS[r % len(ROWS) :] + ROWS[: r % len(ROWS)]
        for row in order:
            command = [sys.executable, __file__, "--row", row, *sys.argv[1:]]
            out, _ = _child(command, _env(row, args), timeout=1200)
            result = json.loads(out.strip().splitlines()[-1])
            rates[row].append(result["rate"])
            print(f"round {r + 1} {row:14} {result['rate']:8.1f} images/s {result['shape']}")
    print(
        f"\nThe loader alone: {args.model} train preprocess + tokenizer, batch {args.batch_size}, "
        f"{args.workers} workers, {args.batches} batches a row, {args.rounds} rounds interleaved"
    )
    pairs = [
        ("fastload", "open_clip"),
        ("fastload text", "fastload cls"),
        ("fastload", "fastload text"),
    ]
    _summary(rates, pairs, "images/s")
    base = rates["open_clip"]
    return [results.row(row, r, None if r is base else base) for row, r in rates.items()]


def _epoch(log: str) -> tuple[float, float, str]:
    """The epoch's training seconds and its seconds waiting for data (OpenCLIP's per-step
    ``Batch (t)`` and ``Data (t)``, summed over the steps it logs), and its last progress
    line's sample count."""
    steps = re.findall(
        r"Train Epoch: 0 \[\s*(\d+)/(\d+) .*?Data \(t\): ([\d.]+) Batch \(t\): ([\d.]+)", log
    )
    if not steps:
        raise SystemExit(f"no training step logged:\n{log[-3000:]}")
    took, waited = (sum(float(step[k]) for step in steps) for k in (3, 2))
    return took, waited, f"{steps[-1][0]}/{steps[-1][1]}"


def measure_main(args: argparse.Namespace, work: Path) -> None:
    text, _, _ = make_packs(Path(args.data), work, args.shards)
    common = ["--train-data", _pattern(text), "--train-num-samples", str(args.main_samples)]
    common += ["--dataset-type", "webdataset", *shlex.split(args.main_args)]
    modules = {"open_clip": "open_clip_train.main", "fastload": "fastload.integrations.open_clip"}
    seconds: dict[str, list[float]] = {row: [] for row in modules}
    for r in range(args.rounds):
        for row in list(modules)[r % 2 :] + list(modules)[: r % 2]:
            logs = work / "logs" / f"{row}-{r}"
            command = [sys.executable, "-m", modules[row], *common, "--logs", str(logs)]
            _child(command, _env(row, args), timeout=1800)
            log = "".join(p.read_text() for p in logs.rglob("out.log"))  # once, not the console
            shutil.rmtree(logs)  # with the checkpoint OpenCLIP saves after its last epoch
            took, waited, count = _epoch(log)
            seconds[row].append(took)
            print(
                f"round {r + 1} {row:10} epoch {took:6.1f} s ({waited:5.1f} s waiting for "
                f"data), {count} samples"
            )
    print(f"\nOpenCLIP's main, one epoch of {args.main_samples} samples: {args.main_args}")
    speed = {row: [args.main_samples / s for s in values] for row, values in seconds.items()}
    _summary(speed, [("fastload", "open_clip")], "samples/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--baseline-path",
        default=str(BASELINE),
        help="webdataset 0.2.86's folder (default: where scripts/install.sh puts it)",
    )
    parser.add_argument("--data", default=None, help="a class folder of photos")
    parser.add_argument("--work", default=None, help="where the packs go (kept between runs)")
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batches", type=int, default=25)
    parser.add_argument("--model", default="ViT-B-32")
    parser.add_argument("--main", action="store_true", help="also OpenCLIP's main, one epoch")
    parser.add_argument("--main-samples", type=int, default=512)
    parser.add_argument("--main-args", default=MAIN_ARGS)
    results.add_argument(parser)
    parser.add_argument("--row", choices=ROWS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not (Path(args.baseline_path) / "webdataset").is_dir():
        raise SystemExit(
            f"no webdataset in --baseline-path {args.baseline_path!r}: "
            f'pip install --no-deps --target {args.baseline_path} "webdataset==0.2.86"'
        )
    args.data = args.data or str(default_data())
    args.work = args.work or str(Path(os.environ.get("TMPDIR", "/tmp")) / "fastload-open-clip")
    if args.row:
        run_row(args.row, args)
        return
    text, _, samples = make_packs(Path(args.data), Path(args.work), args.shards)
    print(f"{samples} photos from {args.data}, {len(list(text.glob('*.tar')))} shards a pack")
    results.write(
        args.json,
        benchmark="open_clip_swap",
        title=f"OpenCLIP's loader against fastload in its place, {args.model} preprocess",
        baseline="open_clip",
        rows=measure_loaders(args),
        settings={k: getattr(args, k) for k in ("workers", "batch_size", "batches", "rounds")},
    )
    if args.main:
        measure_main(args, Path(args.work))


if __name__ == "__main__":
    main()
