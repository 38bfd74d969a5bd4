"""``fastload bench``'s rows as a table and as a plot."""

from __future__ import annotations

from pathlib import Path

from fastload.bench.harness import BenchRow
from fastload.bench.pipelines import STOCK

__all__ = ["format_table", "write_plot"]


def format_table(rows: list[BenchRow]) -> list[str]:
    """The rows as the lines of a text table: images/s and ratio to stock (medians), the
    lowest and highest per-round ratio, workers, the cores used, and with a CUDA device how
    busy it and its JPEG engines were."""
    gpu = any(r.gpu_busy is not None for r in rows)
    jpeg = any(r.jpeg_busy is not None for r in rows)
    head = f"  {'loader':<24} {'images/s':>9} {'x stock':>8} {'rounds':>11} {'workers':>8}"
    head += (
        f" {'cores':>6}" + (f" {'GPU %':>6}" if gpu else "") + (f" {'JPEG %':>6}" if jpeg else "")
    )
    lines = [head]
    for r in rows:
        if r.images_per_sec is None:
            blank = f"  {r.backend:<24} {'-':>9} {'-':>8} {'-':>11} {'-':>8} {'-':>6}"
            blank += f" {'-':>6}" * (gpu + jpeg)
            lines.append(f"{blank}  not run: {r.error}")
            continue
        rate, ratio = f"{r.images_per_sec:,.0f}", f"{r.ratio_to_stock:.2f}"
        spread = (
            "-"
            if r.backend == STOCK or r.ratio_range is None
            else "{:.2f}-{:.2f}".format(*r.ratio_range)
        )
        line = f"  {r.backend:<24} {rate:>9} {ratio:>8} {spread:>11} {r.num_workers:>8}"
        line += f" {_figure(r.cores, '.1f'):>6}"
        line += f" {_figure(r.gpu_busy, '.0f'):>6}" if gpu else ""
        line += f" {_figure(r.jpeg_busy, '.0f'):>6}" if jpeg else ""
        lines.append(line)
    return lines


def _figure(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def write_plot(rows: list[BenchRow], path: str | Path) -> Path:
    """Draw the rows as a bar chart of images/s and write it as a PNG."""
    from PIL import Image, ImageDraw

    path = Path(path)
    measured = [r for r in rows if r.images_per_sec is not None]
    width, bar_h, gap, left = 760, 34, 14, 190
    height = 70 + len(rows) * (bar_h + gap)
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    draw.text(
        (20, 18), f"fastload bench: {rows[0].pipeline} pipeline, images/s (x stock)", fill="black"
    )
    top = max((r.images_per_sec or 0.0) for r in measured) if measured else 1.0
    for i, row in enumerate(rows):
        y = 55 + i * (bar_h + gap)
        draw.text((20, y + bar_h // 3), row.backend, fill="black")
        if row.images_per_sec is None:
            draw.text((left, y + bar_h // 3), f"not run: {row.error}"[:90], fill=(150, 40, 40))
            continue
        length = int((width - left - 140) * row.images_per_sec / top)
        colour = (120, 120, 120) if row.backend == STOCK else (40, 110, 200)
        draw.rectangle([left, y, left + max(length, 1), y + bar_h], fill=colour)
        draw.text(
            (left + length + 8, y + bar_h // 3),
            f"{row.images_per_sec:,.0f} ({row.ratio_to_stock:.2f}x)",
            fill="black",
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)
    return path
