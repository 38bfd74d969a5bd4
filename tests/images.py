"""Real image files for tests, made on the spot: photos-like content and every fault kind."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
from PIL import Image


def photo(width: int = 320, height: int = 240, seed: int = 0) -> np.ndarray:
    """Smooth shapes plus grain: closer to a photo than noise, so resampling is comparable."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    channels = []
    for c in range(3):
        fx, fy, phase = [*rng.uniform(0.01, 0.05, 2).tolist(), rng.uniform(0, 6)]
        base = 128 + 90 * np.sin(x * fx + phase) * np.cos(y * fy + c)
        channels.append(base + rng.normal(0, 6, (height, width)))
    return np.clip(np.stack(channels, axis=2), 0, 255).astype(np.uint8)


def jpeg_bytes(array: np.ndarray, quality: int = 92, **save: object) -> bytes:
    out = io.BytesIO()
    mode = "L" if array.ndim == 2 else "RGB"
    Image.fromarray(array, mode).save(out, "JPEG", quality=quality, **save)
    return out.getvalue()


def with_orientation(array: np.ndarray, orientation: int) -> bytes:
    image = Image.fromarray(array)
    exif = image.getexif()
    exif[0x0112] = orientation
    out = io.BytesIO()
    image.save(out, "JPEG", quality=92, exif=exif)
    return out.getvalue()


def png_bytes(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def png16(width: int = 64, height: int = 48) -> tuple[bytes, np.ndarray]:
    """A 16-bit greyscale PNG, and the 8-bit values it should decode to."""
    values = np.linspace(0, 65535, width * height).reshape(height, width).astype(np.uint16)
    image = Image.fromarray(values)  # mode I;16
    expected = ((values.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)
    return png_bytes(image), np.repeat(expected[:, :, None], 3, axis=2)


def claim_size(data: bytes, width: int, height: int) -> bytes:
    """A JPEG whose frame header claims another size (a decompression bomb's header)."""
    pos = 2
    while pos < len(data):
        marker, length = data[pos + 1], struct.unpack(">H", data[pos + 2 : pos + 4])[0]
        if marker in (0xC0, 0xC1, 0xC2):
            return data[: pos + 5] + struct.pack(">HH", height, width) + data[pos + 9 :]
        pos += 2 + length
    raise ValueError("no frame header")


def fault_files(folder: Path) -> dict[str, Path]:
    """Write one file of every kind the contract test covers; returns kind -> path."""
    folder.mkdir(parents=True, exist_ok=True)
    rgb = photo(320, 240, seed=1)
    good = jpeg_bytes(rgb)
    cmyk = io.BytesIO()
    Image.fromarray(rgb).convert("CMYK").save(cmyk, "JPEG", quality=95)
    palette = Image.fromarray(rgb).convert("P", palette=Image.Palette.ADAPTIVE)
    palette.info["transparency"] = 0
    rgba = Image.fromarray(np.dstack([rgb, np.full(rgb.shape[:2], 128, np.uint8)]), "RGBA")
    files = {
        "good": good,
        "progressive": jpeg_bytes(rgb, progressive=True),
        "grey": jpeg_bytes(rgb.mean(axis=2).astype(np.uint8)),
        "cmyk": cmyk.getvalue(),
        "exif_rotated": with_orientation(rgb, 6),
        "png_named_jpg": png_bytes(Image.fromarray(rgb)),
        "png_palette": png_bytes(palette),
        "png_rgba": png_bytes(rgba),
        "png16": png16()[0],
        "truncated": good[: len(good) // 2],
        "empty": b"",
        "random_bytes": bytes(np.random.default_rng(3).integers(0, 256, 5000, dtype=np.uint8)),
        "jpeg_garbage": b"\xff\xd8\xff\xe0"
        + bytes(np.random.default_rng(4).integers(0, 256, 5000, dtype=np.uint8)),
        "oversized_header": claim_size(good, 60000, 60000),
    }
    paths = {}
    for kind, data in files.items():
        suffix = ".png" if kind in ("png_palette", "png_rgba", "png16") else ".jpg"
        path = folder / f"{kind}{suffix}"
        path.write_bytes(data)
        paths[kind] = path
    return paths


READABLE = [
    "good",
    "progressive",
    "grey",
    "cmyk",
    "exif_rotated",
    "png_named_jpg",
    "png_palette",
    "png_rgba",
    "png16",
]
UNREADABLE = ["truncated", "empty", "random_bytes", "jpeg_garbage", "oversized_header"]


def pillow_reference(path: Path) -> np.ndarray:
    """What Pillow shows for a file: EXIF applied, converted to RGB."""
    from PIL import ImageOps

    with Image.open(path) as image:
        return np.asarray(ImageOps.exif_transpose(image).convert("RGB"))
