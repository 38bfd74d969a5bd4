"""Remote shards against the same shards read locally: issue 38's figures.

The photos, each ``--repeat`` times, are packed once (``--shards`` shards, bytes unchanged)
and uploaded to moto's S3
server on loopback, run in a process of its own (``fastload.testing.S3Server``). Every row
reads one epoch of the same pack with the same loader: ``fastload.ImageShards``,
``fastload.ShardSampler`` (window 8), RandomResizedCrop 224 + flip fused with decoding,
``--workers`` workers, batch ``--batch-size``, float32 normalized batches (``--dtype uint8``:
none). Each round runs every row once, in a rotated order; each epoch starts its own workers.

* ``local``: the pack on local disk (the page cache: it is read every round).
* ``s3 first``: from S3, through a new, empty cache folder (no limit): the first epoch, whose
  shards are downloaded ahead of the sampler while the workers decode.
* ``s3 cached``: the next epoch of the same dataset, from the cache.
* ``s3 throttled``: from S3 through ``fastload.testing.FaultProxy`` at ``--rate`` bytes/s with
  ``--latency`` s per request, into a new cache with ``cache_limit`` a ``--limit`` fraction of
  the pack. Its ratio is against what the link allows: the link's bytes/s over the pack's bytes
  per sample. The cache folder's size is sampled every 20 ms during the epoch; its largest value
  is reported against the limit plus the largest shard.

Then the two ways a shard is downloaded, on the largest shard, ``--rounds`` x 8 downloads each,
interleaved: CPU seconds of this process per GiB with plain ranged GETs
(``fastload.shards.storage.ranged``) against fsspec's asynchronous client (s3fs).

Also printed: the CPU seconds the S3 server took (it shares this machine's cores with the
loader; a real store does not) and this process's, per row.

Run: python benchmarks/storage/remote.py [--data DIR] [--rounds 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastload
from fastload import gpu
from fastload import transforms as T
from fastload.synthetic import default_data
from fastload.testing import FaultProxy, S3Server

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def repeated(data: Path, out: Path, times: int) -> Path:
    """``data``'s class folders with each photo ``times`` times (symbolic links), so that an
    epoch lasts long enough for its first seconds (the first shards' download) to weigh what
    they weigh in a real one."""
    for photo in sorted(p for p in data.rglob("*") if p.is_file()):
        folder = out / photo.parent.relative_to(data)
        folder.mkdir(parents=True, exist_ok=True)
        for k in range(times):
            (folder / f"r{k}_{photo.name}").symlink_to(photo.resolve())
    return out


def pack(data: Path, out: Path, shards: int) -> Path:
    size = sum(p.stat().st_size for p in data.rglob("*") if p.is_file() or p.is_symlink())
    fastload.pack(data, out, shard_size=size // shards + 4096, progress=False)
    return out


def loader(dataset: fastload.ImageShards, args: argparse.Namespace) -> Any:
    return fastload.DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=fastload.ShardSampler(dataset, seed=1),
        num_workers=args.workers,
        batch_transforms=gpu.Normalize(MEAN, STD) if args.dtype == "float32" else None,
    )


def epoch(loaded: Any, epoch: int = 0, during: Callable[[], None] | None = None) -> float:
    """Images per second of one epoch (workers started within it)."""
    loaded.sampler.set_epoch(epoch)
    began, images = time.perf_counter(), 0
    for batch, _ in loaded:
        images += len(batch)
        if during is not None:
            during()
    return images / (time.perf_counter() - began)


class Sampled:
    """The largest value of ``measure()`` every ``every`` s while it runs."""

    def __init__(self, measure: Callable[[], int], every: float = 0.02) -> None:
        self.measure, self.every, self.most = measure, every, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.most = max(self.most, self.measure())

    def __enter__(self) -> Sampled:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.most = max(self.most, self.measure())


def one_round(
    args: argparse.Namespace, local: Path, s3: S3Server, url: str, work: Path, number: int
) -> dict[str, Any]:
    transform = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()])
    results: dict[str, Any] = {}

    def run_local() -> None:
        results["local"] = epoch(loader(fastload.ImageShards(local, transform), args))

    def run_s3() -> None:
        dataset = fastload.ImageShards(
            url, transform, storage_options=s3.storage_options(), cache_dir=work / f"c{number}"
        )
        loaded = loader(dataset, args)
        server, here = cpu_seconds(s3.pid), time.process_time()
        results["s3 first"] = epoch(loaded, 0)
        results["server cpu"] = cpu_seconds(s3.pid) - server
        results["main cpu"] = time.process_time() - here
        here = time.process_time()
        results["s3 cached"] = epoch(loaded, 1)
        results["main cpu cached"] = time.process_time() - here

    def run_throttled() -> None:
        with FaultProxy(s3.endpoint, rate=args.rate, latency=args.latency, process=True) as proxy:
            dataset = fastload.ImageShards(
                url,
                transform,
                storage_options=s3.storage_options(proxy.url),
                cache_dir=work / f"t{number}",
                cache_limit=int(args.limit * sum(size for size in dataset_sizes(local))),
            )
            assert dataset.cache is not None
            with Sampled(dataset.cache.usage) as usage:
                results["s3 throttled"] = epoch(loader(dataset, args))
            results["cache most"] = usage.most
            results["cache limit"] = dataset.cache.limit

    runs = [run_local, run_s3, run_throttled]
    for run in runs[number % 3 :] + runs[: number % 3]:
        run()
    return results


def clients(s3: S3Server, url: str, size: int, rounds: int) -> tuple[list[float], list[float]]:
    """CPU seconds per GiB of whole-shard downloads: plain GETs, and fsspec's client."""
    from fastload.shards.storage.remote import Remote

    plain, through_fsspec = [], []
    with tempfile.TemporaryFile() as file:
        for _ in range(rounds):
            for kind in ("plain", "fsspec"):
                remote = Remote("s3", s3.storage_options(), 60, plain_gets=kind == "plain")
                remote.download(url, file.fileno(), size)  # the connection and client made
                began = time.process_time()
                for _ in range(8):
                    remote.download(url, file.fileno(), size)
                spent = (time.process_time() - began) / (8 * size / 2**30)
                (plain if kind == "plain" else through_fsspec).append(spent)
    return plain, through_fsspec


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of a process so far (Linux)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def dataset_sizes(folder: Path) -> list[int]:
    return [p.stat().st_size for p in sorted(folder.glob("*.tar"))]


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=None, help="a class folder of photos")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--shards", type=int, default=96)
    parser.add_argument("--repeat", type=int, default=6, help="each photo this many times")
    parser.add_argument("--dtype", choices=["float32", "uint8"], default="float32")
    parser.add_argument("--rate", type=float, default=50e6, help="throttled link, bytes/s")
    parser.add_argument("--latency", type=float, default=0.02, help="per request, seconds")
    parser.add_argument(
        "--limit", type=float, default=0.4, help="cache_limit / pack size (two windows: 0.33)"
    )
    results.add_argument(parser)
    args = parser.parse_args()
    data = Path(args.data) if args.data else default_data()
    with tempfile.TemporaryDirectory() as tmp, S3Server(process=True) as s3:
        work = Path(tmp)
        local = pack(repeated(data, work / "photos", args.repeat), work / "pack", args.shards)
        s3.make_bucket("bench")
        url = "s3://bench/pack"
        began = time.perf_counter()
        from fastload.shards.storage.remote import Remote

        remote = Remote("s3", s3.storage_options(), 60)
        for file in sorted(local.iterdir()):
            remote.put_file(str(file), f"{url}/{file.name}")
        sizes = dataset_sizes(local)
        samples = len(fastload.ImageShards(local))
        print(
            f"{samples} photos in {len(sizes)} shards ({sum(sizes) / 2**20:.0f} MiB, largest "
            f"{max(sizes) / 2**20:.1f} MiB), uploaded in {time.perf_counter() - began:.1f} s"
        )
        link = args.rate / (sum(sizes) / samples)
        rounds = [one_round(args, local, s3, url, work, n) for n in range(args.rounds)]
        largest = max(local.glob("*.tar"), key=lambda p: p.stat().st_size)
        plain, through_fsspec = clients(s3, f"{url}/{largest.name}", max(sizes), args.rounds)
    rows = ["local", "s3 first", "s3 cached", "s3 throttled"]
    print(f"\nimages/s, median (min-max) of {args.rounds} rounds, {args.dtype} batches:")
    for row in rows:
        values = [r[row] for r in rounds]
        print(f"  {row:14s} {statistics.median(values):7.0f} ({min(values):.0f}-{max(values):.0f})")
    print("\nratios, each round's against the local epoch of the same round:")
    for row in ("s3 first", "s3 cached"):
        print(f"  {row:14s} {spread([r[row] / r['local'] for r in rounds])}x local")
    print(
        f"  s3 throttled   {spread([r['s3 throttled'] / link for r in rounds])}x what the link "
        f"allows ({args.rate / 1e6:.0f} MB/s, {args.latency * 1e3:.0f} ms: {link:.0f} images/s)"
    )
    local_rates = [r["local"] for r in rounds]
    results.write(
        args.json,
        benchmark="remote",
        title=f"remote shards (moto's S3 on loopback) against local ones, {args.dtype}",
        baseline="local",
        rows=[
            results.row(row, [r[row] for r in rounds], None if row == "local" else local_rates)
            for row in ("local", "s3 first", "s3 cached")
        ],
        settings={k: getattr(args, k) for k in ("workers", "batch_size", "shards", "repeat")}
        | {"dtype": args.dtype, "rounds": args.rounds},
    )
    mib = sum(sizes) / 2**20
    print(
        f"\nCPU seconds in the s3 first epoch (its {mib:.0f} MiB): S3 server "
        f"{spread([r['server cpu'] for r in rounds])}, this process "
        f"{spread([r['main cpu'] for r in rounds])} (the cached epoch: "
        f"{spread([r['main cpu cached'] for r in rounds])})"
    )
    print(
        f"downloading a shard, CPU seconds per GiB: plain ranged GETs {spread(plain)}, "
        f"fsspec's client {spread(through_fsspec)}: "
        f"{spread([p / f for p, f in zip(plain, through_fsspec, strict=True)])}x"
    )
    most = max(r["cache most"] for r in rounds)
    limit = rounds[0]["cache limit"]
    print(
        f"\ncache folder, largest sampled: {most / 2**20:.1f} MiB; limit {limit / 2**20:.1f} MiB "
        f"+ largest shard {max(sizes) / 2**20:.1f} MiB = {(limit + max(sizes)) / 2**20:.1f} MiB "
        f"({'within' if most <= limit + max(sizes) else 'ABOVE'})"
    )


if __name__ == "__main__":
    main()
