"""The ``fastload`` command: a thin layer over the library API."""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any, NoReturn

__all__ = ["main"]


class CLIError(Exception):
    """A user mistake: printed as one line, no traceback; exit status 2 (an argument), or 1
    (``status=1``: the data)."""

    def __init__(self, message: str, *, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


DEBUG = "FASTLOAD_DEBUG"  # set to 1: failures show their traceback (as --debug does)

# each command's one-line help: the top-level parser shows these without importing torch
COMMANDS = {
    "info": "versions, usable backends and CUDA devices on this machine",
    "scan": "check a dataset folder for files that will not decode, or decode oddly",
    "bench": "images/s of each backend against the stock torchvision pipeline",
    "autotune": "measure which num_workers gives the most images/s here",
    "doctor": "measure a torchvision model's training step on your images: what to change",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, with the way to more help, instead of argparse's usage block.
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _print_info(info: dict[str, Any]) -> None:
    """What ``fastload info`` prints after its first two lines (fastload, python)."""
    tv = info["torchvision"]
    print(f"torch        {info['torch']}")
    tv_note = "" if tv["usable"] else f"  (does not import: {tv['reason']})"
    print(f"torchvision  {tv['version'] or 'not installed'}{tv_note}")
    print(f"numpy        {info['numpy']}")
    print()
    print("backends")
    for b in info["backends"]:
        if b["usable"]:
            kind = "  (batch executor)" if b["kind"] == "executor" else ""
            print(f"  {b['name']:<10} usable      {b['version']}{kind}")
            for key, value in b["details"].items():
                print(f"  {'':<10}             {key.replace('_', ' ')}: {value}")
        else:
            print(f"  {b['name']:<10} unusable    {b['reason']}")
            print(f"  {'':<10}             fix: {b['fix']}")
    cuda = info["cuda"]
    print()
    build = cuda["torch_cuda_build"] or "none (CPU-only build of torch)"
    print(f"cuda         torch built for CUDA {build}")
    if not cuda["devices"]:
        print("             no CUDA device visible: device='cuda' is unavailable here")
    for d in cuda["devices"]:
        print(
            f"  cuda:{d['index']}  {d['name']}  (compute {d['capability']}, {d['memory_gib']} GiB)"
        )


def _cmd_info(args: argparse.Namespace) -> int:
    if not args.json:  # the first lines at once; the rest waits for torch and the backends
        import platform

        from fastload.system import cpu_cores
        from fastload.version import __version__

        print(f"fastload     {__version__}")
        cores = f"{platform.platform()}, {cpu_cores()} cores"
        print(f"python       {platform.python_version()} ({cores})", flush=True)
    from fastload.info import collect

    info = collect()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        _print_info(info)
    return 0


def _cmd_scan(args: argparse.Namespace) -> int:
    from fastload._progress import Progress
    from fastload.scan import KINDS, scan

    if not os.path.isdir(args.dir):
        raise CLIError(f"{args.dir!r} is not a folder")
    progress = Progress("scan")
    try:
        report = scan(
            args.dir,
            workers=args.workers,
            backend=args.backend,
            max_pixels=args.max_pixels,
            progress=progress,
        )
    except ValueError as exc:  # an unknown backend
        raise CLIError(str(exc)) from None
    finally:
        progress.close()
    if report.files == 0:
        print(
            f"fastload scan: no image files found under {args.dir} (looked for the extensions "
            "torchvision's ImageFolder reads: .jpg, .jpeg, .png, .webp, ...)",
            file=sys.stderr,
        )
        return 1
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 1 if report.findings else 0
    bad_files = len({f.path for f in report.findings})
    print(f"scanned {report.files} image files in {report.root}: {bad_files} with problems")
    print(f"  {'kind':<16} {'files':>6}  meaning")
    for kind, count in report.counts.items():
        print(f"  {kind:<16} {count:>6}  {KINDS[kind]}")
    if report.findings:
        print()
        for f in report.findings:
            print(f"  {f.kind:<16} {os.path.relpath(f.path, report.root)}: {f.detail}")
    return 1 if report.findings else 0


def _workers(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer or 'auto'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be 0 or more")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value:g} must be positive")
    return value


def _add_data(command: argparse.ArgumentParser) -> None:
    """The image folder, positional (like scan's) or as --data."""
    from fastload.bench import DEFAULT_IMAGES, default_root

    where = (
        f"default: {DEFAULT_IMAGES} ImageNet-like JPEGs made once in {default_root()} "
        "(FASTLOAD_CACHE_DIR moves it)"
    )
    command.add_argument(
        "dir", metavar="DIR", nargs="?", help=f"a class-folder image set ({where})"
    )
    command.add_argument("--data", metavar="DIR", help="the same as DIR")


def _data_argument(args: argparse.Namespace) -> str | None:
    if args.dir is not None and args.data is not None and args.dir != args.data:
        raise CLIError(f"two folders given: DIR {args.dir!r} and --data {args.data!r}; give one")
    return args.dir if args.dir is not None else args.data


def _data_folder(path: str | None, progress_label: str) -> str:
    from fastload._progress import Progress
    from fastload.bench import default_data

    if path is not None:
        if not os.path.isdir(path):
            raise CLIError(f"{path!r} is not a folder")
        return path
    progress = Progress(progress_label)
    try:
        return str(default_data(progress=progress))
    finally:
        progress.close()


def _cmd_bench(args: argparse.Namespace) -> int:
    from fastload._progress import Progress
    from fastload.backends import names as registered
    from fastload.bench import (
        StockFailed,
        format_table,
        notes,
        run,
        unreadable_files,
        write_plot,
    )
    from fastload.system import cpu_cores, load_average

    data = _data_folder(_data_argument(args), "making the default image set")
    checking = Progress(
        "checking files", rate=False, log="fastload bench: checking the files' first bytes"
    )
    try:
        total, bad = unreadable_files(data, progress=checking)
    except ValueError as exc:
        raise CLIError(f"{exc}; run 'fastload scan {data}'", status=1) from None
    finally:
        checking.close()
    if len(bad) == total:
        raise CLIError(
            f"none of the {total} image files in {data!r} is a readable image; run "
            f"'fastload scan {data}'",
            status=1,
        )
    if bad:
        first = ", ".join(os.path.relpath(p, data) for p in bad[:3])
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        print(
            f"fastload bench: note: left out {len(bad)} of {total} files that are not images "
            f"({first}{more}), on every side; 'fastload scan {data}' lists them all",
            file=sys.stderr,
        )
    names = tuple(registered()) if args.backend == "all" else (args.backend,)
    load_before = load_average() or 0.0
    # the rounds are timed by the clock: a count per second would say nothing
    progress = Progress("bench", rate=False)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)
            rows = run(
                data,
                names=names,
                pipeline=args.pipeline,
                batch_size=args.batch_size,
                num_workers=args.num_workers,
                device=args.device,
                seconds=args.seconds,
                accelerated=args.accelerated,
                progress=progress,
                exclude=bad,
            )
    except StockFailed as exc:  # e.g. a file it cannot read
        raise CLIError(f"{exc}; 'fastload scan {data}' finds unreadable files", status=1) from None
    except (ValueError, RuntimeError) as exc:  # e.g. a CUDA device on a machine without one
        raise CLIError(str(exc).splitlines()[0]) from None
    finally:
        progress.close()
    remarks = [str(n.message) for n in caught]  # each once, without a source line
    remarks += notes(rows, load_before=load_before, cores=cpu_cores())
    for note in dict.fromkeys(remarks):
        print(f"fastload bench: note: {note}", file=sys.stderr)
    if args.plot:
        write_plot(rows, args.plot)
    if args.json:
        results = [r.to_dict() for r in rows]
        out = {"data": data, "load_before": load_before, "notes": remarks, "results": results}
        print(json.dumps(out, indent=2))
        return 0
    print(f"{rows[0].pipeline} pipeline on {data}: batch {args.batch_size}, device {args.device}")
    print("\n".join(format_table(rows)))
    if args.plot:
        print(f"bar chart written to {args.plot}")
    return 0


def _cmd_autotune(args: argparse.Namespace) -> int:
    from fastload._progress import Progress
    from fastload.autotune import autotune
    from fastload.datasets import ImageFolder
    from fastload.loader import DataLoader
    from fastload.system import cpu_cores
    from fastload.transforms import RandomResizedCrop

    data = _data_folder(_data_argument(args), "making the default image set")
    try:
        # unreadable files are skipped: they would stop the measurement, not change the answer
        dataset = ImageFolder(
            data, transform=RandomResizedCrop(224), backend=args.backend, on_error="skip"
        )
    except (ValueError, ImportError) as exc:
        raise CLIError(str(exc)) from None
    except FileNotFoundError:
        raise CLIError(
            f"no image files found in {data!r}: autotune reads DIR/<class>/<image> files "
            f"(torchvision's ImageFolder layout); run 'fastload scan {data}'",
            status=1,
        ) from None
    progress = Progress(
        "autotune",
        rate=False,
        log=f"fastload autotune: measuring worker counts, {args.budget:.0f} s at most",
    )
    try:
        with warnings.catch_warnings(record=True) as notes:
            warnings.simplefilter("always", UserWarning)
            result = autotune(
                dataset,
                batch_size=args.batch_size,
                budget=args.budget,
                cache=not args.no_cache,
                progress=progress,
                loader=DataLoader,
                remeasure_loaded=args.remeasure_loaded,
            )
    finally:
        progress.close()
    for note in notes:  # a note about the measurement, not a Python warning with a source line
        print(f"fastload autotune: note: {note.message}", file=sys.stderr)
    if args.json:
        print(json.dumps({**result.to_dict(), "backend": dataset.backend, "data": data}, indent=2))
        return 0
    source = "measured now"
    if result.cached and result.loaded:
        source = (
            f"from the cache, measured under load ({result.load:.1f} on {cpu_cores()} cores); "
            "--remeasure-loaded or --no-cache measures again"
        )
    elif result.cached:
        source = "from the cache; --no-cache measures again"
    print(f"{dataset.backend} backend, batch {args.batch_size}, {data} ({source})")
    # a prefetch_factor column only when one was tried (blank: the loader's default)
    tried = any(m.prefetch_factor is not None for m in result.table)
    extra = f" {'prefetch':>8}" if tried else ""
    print(f"  {'num_workers':>11} {'images/s':>9} {'seconds':>8} {'busy':>5}{extra}")
    for m in sorted(result.table, key=lambda m: (m.num_workers, m.prefetch_factor or 0)):
        chosen = (m.num_workers, m.prefetch_factor) == (result.num_workers, result.prefetch_factor)
        mark = "  <- chosen" if chosen else ""
        busy = "" if m.busy is None else f"{m.busy:.0%}"
        factor = f" {m.prefetch_factor or '':>8}" if tried else ""
        print(
            f"  {m.num_workers:>11} {m.images_per_sec:>9,.0f} {m.seconds:>8.1f} {busy:>5}"
            f"{factor}{mark}"
        )
    setting = f"num_workers={result.num_workers}"
    if result.prefetch_factor is not None:
        setting += f", prefetch_factor={result.prefetch_factor}"
    print(f"{setting}: {result.reason}")
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    import torch
    import torchvision

    from fastload import gpu
    from fastload.datasets import ImageFolder
    from fastload.devices import resolve_device
    from fastload.diagnosis import doctor
    from fastload.loader import DataLoader
    from fastload.transforms import RandomResizedCrop

    try:
        build = torchvision.models.get_model_builder(args.model)
    except ValueError:
        names = ", ".join(torchvision.models.list_models(torchvision.models)[:12])
        raise CLIError(
            f"--model {args.model!r} is not a torchvision model (e.g. {names}, ...)"
        ) from None
    try:
        wanted = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        device = resolve_device(wanted) or torch.device("cpu")
    except (ValueError, RuntimeError) as exc:
        raise CLIError(str(exc).splitlines()[0]) from None
    data = _data_folder(_data_argument(args), "making the default image set")
    try:
        dataset = ImageFolder(
            data, transform=RandomResizedCrop(args.image_size), backend=args.backend
        )
    except (ValueError, ImportError) as exc:
        raise CLIError(str(exc)) from None
    model = build(weights=None, num_classes=len(dataset.classes)).to(device)
    if device.type == "cuda" and args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    loader: DataLoader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=args.num_workers,
        device=device,
        batch_transforms=gpu.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
        channels_last=args.channels_last,
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    autocast = torch.bfloat16 if args.bf16 else None
    report = doctor(model, loader, optimizer, steps=args.steps, autocast=autocast)
    if args.json:
        print(json.dumps({**report.to_dict(), "model": args.model, "data": data}, indent=2))
        return 0
    print(f"{args.model} on {data}: {dataset.backend} backend, num_workers={loader.num_workers}")
    print(report)
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _top() -> tuple[argparse.ArgumentParser, Any]:
    """The parser of ``fastload [--version] COMMAND``, its commands not yet filled in."""
    from fastload.version import __version__

    parser = _Parser(
        prog="fastload",
        description="Fast PyTorch image input pipelines.",
    )
    parser.add_argument("--version", action="version", version=f"fastload {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    return parser, sub


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or with ``command`` only that command's (the others' options can
    cost an import of torch)."""
    parser, sub = _top()
    adders = {
        "info": _add_info,
        "scan": _add_scan,
        "bench": _add_bench,
        "autotune": _add_autotune,
        "doctor": _add_doctor,
    }
    for name, add in adders.items():
        if command is None or name == command:
            add(sub)
    for each in sub.choices.values():
        each.add_argument(
            "--debug",
            action="store_true",
            help=f"show the traceback of a failure (or set {DEBUG}=1)",
        )
    return parser


def _add_info(sub: Any) -> None:
    info = sub.add_parser(
        "info",
        help=COMMANDS["info"],
        description="Show library versions, which decoding backends are usable here (and how "
        "to install the others), and the CUDA devices torch can see.",
    )
    info.add_argument("--json", action="store_true", help="print one JSON object")
    info.set_defaults(run=_cmd_info)


def _add_scan(sub: Any) -> None:
    from fastload.backends import DEFAULT_MAX_PIXELS

    scan = sub.add_parser(
        "scan",
        help=COMMANDS["scan"],
        description="Check every image file under DIR, in parallel: unreadable, truncated, "
        "oversized, wrongly named, CMYK and grayscale files. Exit status: 0 when nothing was "
        "found, 1 when something was (or no image file at all), 2 for a usage error.",
    )
    scan.add_argument("dir", metavar="DIR", help="the dataset folder")
    scan.add_argument("--json", action="store_true", help="print one JSON object")
    scan.add_argument(
        "--workers", type=_positive_int, default=None, help="processes (default: one per core)"
    )
    scan.add_argument(
        "--backend", default="auto", help="the backend to try files with (default: auto)"
    )
    scan.add_argument(
        "--max-pixels",
        type=_positive_int,
        default=DEFAULT_MAX_PIXELS,
        help=f"report images larger than this as oversized (default: {DEFAULT_MAX_PIXELS:,})",
    )
    scan.set_defaults(run=_cmd_scan)


def _add_bench(sub: Any) -> None:
    from fastload.backends import names as registered
    from fastload.bench import PIPELINES

    bench = sub.add_parser(
        "bench",
        help=COMMANDS["bench"],
        description="Measure images/s of a pipeline for each decoding backend and for the stock "
        "torchvision pipeline, in the same run. Without --data, a set of ImageNet-like JPEGs is "
        "made once and cached.",
    )
    _add_data(bench)
    bench.add_argument(
        "--backend",
        choices=[*registered(), "all"],
        default="all",
        help="the backend to measure beside the stock pipeline (default: all)",
    )
    bench.add_argument(
        "--pipeline",
        choices=PIPELINES,
        default="train",
        help="train: RandomResizedCrop 224; val: Resize 256 + CenterCrop 224; decode: decoding "
        "only (default: train)",
    )
    bench.add_argument(
        "--batch-size", type=_positive_int, default=64, help="images per batch (default: 64)"
    )
    bench.add_argument(
        "--num-workers",
        type=_workers,
        default=2,
        metavar="N|auto",
        help="worker processes per loader, or auto to tune each (default: 2)",
    )
    bench.add_argument(
        "--device", default="cpu", help="where batches go: cpu or cuda[:N] (default: cpu)"
    )
    bench.add_argument(
        "--seconds",
        type=_positive_float,
        default=20.0,
        help="measuring time in all, shared by the loaders and rounds (default: 20)",
    )
    bench.add_argument(
        "--accelerated",
        action="store_true",
        help="also measure the stock torchvision dataset, unchanged, through "
        "fastload.DataLoader(accelerate=True) (train and val)",
    )
    bench.add_argument("--json", action="store_true", help="print one JSON object")
    bench.add_argument("--plot", metavar="FILE.png", help="also write a bar chart")
    bench.set_defaults(run=_cmd_bench)


def _add_autotune(sub: Any) -> None:
    tune = sub.add_parser(
        "autotune",
        help=COMMANDS["autotune"],
        description="Measure the training pipeline (RandomResizedCrop 224) with several worker "
        "counts, within a time budget, and choose the fewest workers within 3% of the best. "
        "The answer is cached; the next call for the same data returns at once.",
    )
    _add_data(tune)
    tune.add_argument("--backend", default="auto", help="decoding backend (default: auto)")
    tune.add_argument(
        "--batch-size", type=_positive_int, default=64, help="images per batch (default: 64)"
    )
    tune.add_argument(
        "--budget",
        type=_positive_float,
        default=30.0,
        help="seconds of measuring at most (default: 30)",
    )
    tune.add_argument("--no-cache", action="store_true", help="measure even if an answer is cached")
    tune.add_argument(
        "--remeasure-loaded",
        action="store_true",
        help="measure again if the cached answer was taken under load (load average above "
        "the core count)",
    )
    tune.add_argument("--json", action="store_true", help="print one JSON object")
    tune.set_defaults(run=_cmd_autotune)


def _add_doctor(sub: Any) -> None:
    doc = sub.add_parser(
        "doctor",
        help=COMMANDS["doctor"],
        description="Train a torchvision model (random weights, SGD) for a few steps on the "
        "folder through fastload.DataLoader, split each step into waiting for data, the copy "
        "and compute, try the cheap changes, and list the findings ranked by the gain.",
    )
    _add_data(doc)
    doc.add_argument("--model", default="resnet50", help="a torchvision model (default: resnet50)")
    doc.add_argument("--backend", default="auto", help="decoding backend (default: auto)")
    doc.add_argument(
        "--batch-size", type=_positive_int, default=64, help="images per batch (default: 64)"
    )
    doc.add_argument(
        "--num-workers", type=int, default=2, help="loader worker processes (default: 2)"
    )
    doc.add_argument("--image-size", type=_positive_int, default=224, help="(default: 224)")
    doc.add_argument(
        "--device", default=None, help="where to train (default: cuda if there is one, else cpu)"
    )
    doc.add_argument("--steps", type=_positive_int, default=20, help="steps measured (default: 20)")
    doc.add_argument("--bf16", action="store_true", help="run the step under bf16 autocast")
    doc.add_argument("--channels-last", action="store_true", help="channels_last model and batches")
    doc.add_argument("--json", action="store_true", help="print one JSON object")
    doc.set_defaults(run=_cmd_doctor)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``fastload`` command.

    Args:
        argv: The arguments after the program name; ``sys.argv[1:]`` when ``None``.

    Returns:
        The exit status: 0 on success; 1 when ``scan`` found problems, or the data made a
        command fail (no images, an unreadable file, a failed pipeline); 2 for a mistake in the
        arguments; 130 when interrupted. A failure prints one line; ``--debug`` (or
        ``FASTLOAD_DEBUG=1``) shows its traceback.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in COMMANDS:
        # --version, --help, no command or an unknown one: answered (and exited) here, before
        # any command's options, some of which import torch to list their choices
        parser, sub = _top()
        for name, text in COMMANDS.items():
            sub.add_parser(name, help=text)
        parser.parse_args(argv)
    args = _parser(command).parse_args(argv)
    debug = args.debug or os.environ.get(DEBUG, "") not in ("", "0")
    try:
        return args.run(args)
    except CLIError as exc:
        print(f"fastload {args.command}: error: {exc}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        print("fastload: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        from fastload.errors import one_line

        print(
            f"fastload {args.command}: error: {one_line(exc)} (--debug shows the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
