"""What ``pack(pixels="seekable")`` does to nvImageCodec's batched decodes (nvJPEG on the GPU).

Every JPEG under ``--data`` (as ``benchmarks/decoding/seekable.py`` finds them) is rewritten as the
pack rewrites it (``region.add_restarts``). Batches of 64 are decoded by nvImageCodec from the files
and from their rewrites, rounds interleaved, whole and as random crop regions (RandomResizedCrop
windows, seeded), with each set of nvImageCodec backends: the mix fastload's ``nvimgcodec`` backend
makes on a GPU (the hardware JPEG engine, nvJPEG's CUDA decoder, the CPU behind them), and each
GPU decoder alone: the engine, and the CUDA decoder (nvImageCodec's ``HYBRID_CPU_GPU`` kind; it
has no JPEG decoder of the ``GPU_ONLY`` kind) with its Huffman decoding on the CPU below a
megapixel, as nvImageCodec sets it, and on the GPU for every image
(``nvjpeg_cuda_decoder:hybrid_huffman_threshold=0``). Printed per row: images/s of each, their
ratio per round, the CPU each used (this process's CPU time over the wall time, in cores: the
issue asks nvImageCodec's CPU use stated beside its rate), how many images each decoded (a
decoder alone returns nothing for a file it refuses: the hardware engine refuses progressive
JPEGs, which the rewrite makes baseline), and the largest pixel difference between the two
where the same decoder decoded both. On a GPU each row also says how busy the device ("gpu")
and its hardware JPEG decoders ("jpeg", where the driver gives it) were over its rounds
(``fastload.bench.usage.GpuSampler``): whether fastload's mix keeps the hardware engine busy.

nvImageCodec opens nvJPEG by its library name and gets the first copy in the process:
torchvision's older one once torchvision is imported, which nvImageCodec refuses region
decodes with. So the decoders are made before fastload (and torchvision) are imported.

Run: python benchmarks/decoding/seekable_nvimgcodec.py [--data DIR_OR_TARS] [--device cuda]
     [--rounds 5]
     (``--device cpu``: nvImageCodec's CPU decoder, to try the script without a GPU)
"""

from __future__ import annotations

import argparse
import io
import math
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results

BATCH = 64
LIMIT = 10**9


def decoders(nv: Any, device: str) -> dict[str, Any]:
    """The nvImageCodec decoders to compare, by name; a name whose decoder cannot be made on
    this machine maps to the reason."""
    on_gpu = "nvjpeg_cuda_decoder:hybrid_huffman_threshold=0"  # nvImageCodec's decoder options
    if device == "cpu":
        kinds = {"cpu": ([nv.BackendKind.CPU_ONLY], "")}
    else:
        kinds = {  # a GPU decoder made first loads nvImageCodec's nvJPEG, then fastload's
            "hardware engine": ([nv.BackendKind.HW_GPU_ONLY], ""),
            "CUDA, Huffman on the CPU": ([nv.BackendKind.HYBRID_CPU_GPU], ""),
            "CUDA, Huffman on the GPU": ([nv.BackendKind.HYBRID_CPU_GPU], on_gpu),
            "fastload's mix": None,
        }
    made: dict[str, Any] = {}
    for name, chosen in kinds.items():
        try:
            if chosen is None:
                from fastload.backends.nvimgcodec.decoder import make_decoder

                made[name] = make_decoder(0, threads=4)
            else:
                backends, options = chosen
                device_id = nv.NVIMGCODEC_DEVICE_CPU_ONLY if device == "cpu" else 0
                made[name] = nv.Decoder(
                    device_id=device_id,
                    backends=[nv.Backend(kind) for kind in backends],
                    options=options,
                )
        except RuntimeError as error:  # e.g. no CUDA decoder on this GPU
            made[name] = f"not made: {error}"
    return made


def windows(sizes: list[tuple[int, int]], seed: int = 0) -> list[tuple[int, int, int, int]]:
    """One RandomResizedCrop window (x0, y0, x1, y1) per image, drawn as torchvision does."""
    rng = random.Random(seed)
    out = []
    for width, height in sizes:
        box = (0, 0, width, height)
        for _ in range(10):
            area = width * height * rng.uniform(0.08, 1.0)
            ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
            w, h = round(math.sqrt(area * ratio)), round(math.sqrt(area / ratio))
            if 0 < w <= width and 0 < h <= height:
                x0, y0 = rng.randint(0, width - w), rng.randint(0, height - h)
                box = (x0, y0, x0 + w, y0 + h)
                break
        out.append(box)
    return out


def epoch(
    nv: Any, decoder: Any, files: list[bytes], boxes: list[Any] | None
) -> tuple[float, int, float]:
    """Images/s over one pass in batches, how many were decoded, and the cores used (this
    process's CPU time over the wall time)."""
    import torch

    done, start, cpu = 0, time.perf_counter(), time.process_time()
    for first in range(0, len(files), BATCH):
        streams = [nv.CodeStream(data) for data in files[first : first + BATCH]]
        if boxes is not None:
            streams = [
                stream.get_sub_code_stream(region=nv.Region(y0, x0, y1, x1))
                for stream, (x0, y0, x1, y1) in zip(
                    streams, boxes[first : first + BATCH], strict=True
                )
            ]
        images = decoder.decode(streams, params=_params(nv))
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        done += sum(image is not None for image in images)
    wall = time.perf_counter() - start
    return done / wall, done, (time.process_time() - cpu) / wall


def _params(nv: Any) -> Any:
    return nv.DecodeParams(
        apply_exif_orientation=False,
        color_spec=nv.ColorSpec.SRGB,
        allow_any_depth=False,
        sample_format=nv.SampleFormat.I_RGB,
    )


def largest_difference(nv: Any, decoder: Any, files: list[bytes], rewritten: list[bytes]) -> int:
    """The largest pixel difference of the first batch, where the decoder decoded both."""
    import numpy as np

    first = decoder.decode([nv.CodeStream(d) for d in files[:BATCH]], params=_params(nv))
    second = decoder.decode([nv.CodeStream(d) for d in rewritten[:BATCH]], params=_params(nv))
    largest = 0
    for a, b in zip(first, second, strict=True):
        if a is not None and b is not None:
            a, b = np.asarray(a.cpu(), dtype=np.int16), np.asarray(b.cpu(), dtype=np.int16)
            largest = max(largest, int(np.abs(a - b).max()))
    return largest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data", help="a folder of JPEGs, or tar shards (default: the cached default photos)"
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import nvidia.nvimgcodec as nv  # before fastload: see the module's docstring

    made = decoders(nv, args.device)
    from PIL import Image

    from decoding.seekable import jpegs
    from fastload.backends.region import add_restarts

    if args.data is None:  # fastload is imported by now, after the decoders were made
        from fastload.synthetic import default_data

        args.data = str(default_data())
    files = jpegs(Path(args.data))
    if not files:
        parser.error(f"no .jpg or .jpeg files or tar members under {args.data}")
    rewritten = [add_restarts(data, max_pixels=LIMIT) for data in files]
    sizes = []
    for data in files:
        with Image.open(io.BytesIO(data)) as image:
            sizes.append(image.size)
    boxes = windows(sizes)
    ratio = sum(map(len, rewritten)) / sum(map(len, files))
    print(f"{len(files)} JPEGs; rewritten: {ratio:.3f}x the bytes; batches of {BATCH}")
    from fastload.bench.usage import GpuSampler

    gpu = GpuSampler.open(0) if args.device == "cuda" else None
    try:
        for name, decoder in made.items():
            if isinstance(decoder, str):
                print(f"  {name}: {decoder}")
                continue
            for mode, crops in (("whole", None), ("crops", boxes)):
                measure(nv, decoder, name, mode, files, rewritten, crops, args.rounds, gpu)
            difference = largest_difference(nv, decoder, files, rewritten)
            print(f"  {name}: largest pixel difference, same decoder: {difference}")
    finally:
        if gpu is not None:
            gpu.close()


def measure(
    nv: Any,
    decoder: Any,
    name: str,
    mode: str,
    files: list[bytes],
    rewritten: list[bytes],
    crops: list[Any] | None,
    rounds: int,
    gpu: Any,
) -> None:
    """One decoder's row for one mode: the files against their rewrites, rounds interleaved,
    with the cores used and (``gpu``, a sampler) how busy the GPU and its JPEG engines were."""
    epoch(nv, decoder, files, crops)  # warm-up
    epoch(nv, decoder, rewritten, crops)
    rates: dict[str, list[float]] = {"files": [], "seekable": []}
    cores: dict[str, list[float]] = {"files": [], "seekable": []}
    counts = {}
    start = time.monotonic()
    for _ in range(rounds):
        for kind, data in (("files", files), ("seekable", rewritten)):
            rate, counts[kind], used = epoch(nv, decoder, data, crops)
            rates[kind].append(rate)
            cores[kind].append(used)
    busy = ""
    if gpu is not None:  # over both kinds' rounds: NVML's own sample period is up to a second
        shares = gpu.mean([(start, time.monotonic())])
        busy = "; " + ", ".join(
            f"{part} {share:.0f} % busy" for part, share in shares.items() if share is not None
        )
    print(
        f"  {name}, {mode}: files {statistics.median(rates['files']):,.0f} images/s "
        f"on {statistics.median(cores['files']):.1f} cores, seekable "
        f"{statistics.median(rates['seekable']):,.0f} on "
        f"{statistics.median(cores['seekable']):.1f}; seekable / files "
        f"{results.spread(rates['seekable'], rates['files'])}; "
        f"decoded {counts['files']} and {counts['seekable']} of {len(files)}{busy}"
    )


if __name__ == "__main__":
    main()
