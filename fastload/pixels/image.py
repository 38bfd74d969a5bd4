"""What an image file is, read from its first bytes: format, size, colour components, EXIF
orientation. Nothing here decodes pixels, so the size limit, the orientation and the crop can
all be settled before the decoder runs.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

__all__ = [
    "ImageInfo",
    "is_truncated_jpeg",
    "orient",
    "orientation_ops",
    "ppm_header",
    "probe",
    "sniff",
]

_MAGIC = (
    (b"\xff\xd8\xff", "jpeg"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"BM", "bmp"),
    (b"II*\x00", "tiff"),
    (b"MM\x00*", "tiff"),
    (b"P6", "ppm"),  # binary RGB (what ``fastload.pack`` writes as raw pixels)
)

# JPEG start-of-frame markers (baseline, extended, progressive, lossless; Huffman/arithmetic).
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_STANDALONE = {0x01, *range(0xD0, 0xD8)}  # TEM and RSTn carry no length

# EXIF orientation -> (transpose, mirror left-right, mirror top-bottom), applied in that order
# to the stored pixels to get the image as it should be shown.
_ORIENTATION = {
    1: (False, False, False),
    2: (False, True, False),
    3: (False, True, True),
    4: (False, False, True),
    5: (True, False, False),
    6: (True, True, False),
    7: (True, True, True),
    8: (True, False, True),
}


@dataclass(frozen=True)
class ImageInfo:
    """What the header of an image file says.

    Attributes:
        format: ``"jpeg"``, ``"png"``, ``"gif"``, ``"webp"``, ``"bmp"``, ``"tiff"``, ``"ppm"``
            (binary RGB) or ``"unknown"``; from the content, never from the file name.
        width: Stored width in pixels, or ``None`` when this module cannot read it.
        height: Stored height in pixels, or ``None``.
        components: JPEG colour components (1 grey, 3 YCbCr/RGB, 4 CMYK/YCCK); PNG channels;
            3 for a binary RGB PPM; ``None`` elsewhere.
        bit_depth: Bits per sample where the header says (JPEG precision, PNG bit depth, 8
            or 16 for a PPM by its largest value).
        orientation: EXIF orientation (1-8; 1 when absent or unreadable).
    """

    format: str
    width: int | None = None
    height: int | None = None
    components: int | None = None
    bit_depth: int | None = None
    orientation: int = 1

    @property
    def pixels(self) -> int | None:
        """Width times height, when both are known."""
        if self.width is None or self.height is None:
            return None
        return self.width * self.height

    @property
    def shown_size(self) -> tuple[int, int] | None:
        """(width, height) as displayed, after the EXIF orientation."""
        if self.width is None or self.height is None:
            return None
        if _ORIENTATION[self.orientation][0]:
            return self.height, self.width
        return self.width, self.height


def sniff(data: bytes) -> str:
    """The image format of ``data``, judged by its magic bytes."""
    for magic, name in _MAGIC:
        if data.startswith(magic):
            return name
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return "unknown"


def probe(data: bytes) -> ImageInfo:
    """Read the format, size, components and orientation of an encoded image.

    Args:
        data: The file's bytes (the header is enough for JPEG and PNG).

    Returns:
        What the header says. A header this module cannot parse gives an ``ImageInfo`` whose
        size is ``None``; deciding whether the file is broken is left to the decoder.
    """
    fmt = sniff(data)
    if fmt == "jpeg":
        return _probe_jpeg(data)
    if fmt == "png" and len(data) >= 26 and data[12:16] == b"IHDR":
        width, height, depth, color_type = struct.unpack(">IIBB", data[16:26])
        channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(color_type)
        return ImageInfo("png", width, height, channels, depth)
    if fmt == "ppm" and (header := ppm_header(data)) is not None:
        width, height, maxval, _ = header
        return ImageInfo("ppm", width, height, 3, 8 if maxval < 256 else 16)
    return ImageInfo(fmt)


def ppm_header(data: bytes) -> tuple[int, int, int, int] | None:
    """(width, height, maxval, offset of the pixels) of a binary RGB PPM (``P6``: the magic,
    width, height and maxval as whitespace-separated decimals, ``#`` comments allowed between
    them, then one whitespace byte); ``None`` when ``data`` does not start with such a header.
    """
    if not data.startswith(b"P6"):
        return None
    values: list[int] = []
    pos, end = 2, min(len(data), 512)
    while len(values) < 3:
        while pos < end and data[pos : pos + 1].isspace():
            pos += 1
        if pos < end and data[pos] == ord("#"):  # a comment runs to the end of its line
            while pos < end and data[pos] not in b"\r\n":
                pos += 1
            continue
        start = pos
        while pos < end and data[pos : pos + 1].isdigit():
            pos += 1
        if start == pos or pos >= end or not data[pos : pos + 1].isspace():
            return None
        values.append(int(data[start:pos]))
    width, height, maxval = values
    if width < 1 or height < 1 or not 0 < maxval < 65536:
        return None
    return width, height, maxval, pos + 1


def _probe_jpeg(data: bytes) -> ImageInfo:
    orientation = 1
    pos, end = 2, len(data)
    while pos + 4 <= end:
        if data[pos] != 0xFF:
            break  # lost sync: not a marker where one must be
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _STANDALONE:
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        segment = data[pos + 4 : pos + 2 + length]
        if marker == 0xE1 and segment.startswith(b"Exif\x00\x00"):
            orientation = _exif_orientation(segment[6:])
        elif marker in _SOF and len(segment) >= 6:
            depth, height, width, components = struct.unpack(">BHHB", segment[:6])
            return ImageInfo("jpeg", width, height, components, depth, orientation)
        elif marker in (0xDA, 0xD9):  # scan data or end of image before any frame header
            break
        pos += 2 + length
    return ImageInfo("jpeg", orientation=orientation)


def _exif_orientation(tiff: bytes) -> int:
    """The Orientation tag (0x0112) of IFD0 in a TIFF-structured EXIF block; 1 if absent."""
    if tiff[:2] == b"II":
        order = "<"
    elif tiff[:2] == b"MM":
        order = ">"
    else:
        return 1
    try:
        (ifd,) = struct.unpack(order + "I", tiff[4:8])
        (count,) = struct.unpack(order + "H", tiff[ifd : ifd + 2])
        for k in range(count):
            entry = ifd + 2 + 12 * k
            tag, kind = struct.unpack(order + "HH", tiff[entry : entry + 4])
            if tag == 0x0112 and kind == 3:  # SHORT
                (value,) = struct.unpack(order + "H", tiff[entry + 8 : entry + 10])
                return value if value in _ORIENTATION else 1
    except struct.error:
        pass
    return 1


def is_truncated_jpeg(data: bytes) -> bool:
    """Whether a JPEG's data lacks its end-of-image marker (in its second half): cut short."""
    return data.rfind(b"\xff\xd9", len(data) // 2) < 0


def orientation_ops(orientation: int) -> tuple[bool, bool, bool]:
    """(transpose, mirror left-right, mirror top-bottom) that display stored pixels upright."""
    return _ORIENTATION.get(orientation, _ORIENTATION[1])


def orient(array: np.ndarray, transpose: bool, mirror_lr: bool, mirror_tb: bool) -> np.ndarray:
    """Apply a transpose, then mirrors, to an H x W x C array; returns an array a tensor can
    be made from (no negative strides): C-contiguous, or channels-first in memory where the
    array given was.

    A view with negative strides cannot become a torch tensor, hence the copy; it is made once,
    on the smallest array of the pipeline (after the resize). Mirrors alone (a random flip) are
    copied by ``torch.flip``, in the memory's own layout: numpy copies a left-right mirror of
    3-byte pixels element by element, 5x slower at 224 x 224, and 40x on the channels-first
    memory torch's resize leaves (130 against 3.5 us), whose mirror stays channels-first.
    """
    if not transpose and (mirror_lr or mirror_tb) and array.dtype == np.uint8:
        import torch

        dims = [d for d, mirrored in ((0, mirror_tb), (1, mirror_lr)) if mirrored]
        flags = array.flags  # torch.from_numpy warns on a read-only array
        if flags.c_contiguous and flags.writeable:
            return torch.from_numpy(array).flip(dims).numpy()
        planes = array.transpose(2, 0, 1)  # torch's resize leaves channels-first memory
        if planes.flags.c_contiguous and planes.flags.writeable:
            flipped = torch.from_numpy(planes).flip([d + 1 for d in dims])
            return flipped.numpy().transpose(1, 2, 0)
    if transpose:
        array = array.transpose(1, 0, 2)
    if mirror_lr:
        array = array[:, ::-1]
    if mirror_tb:
        array = array[::-1]
    if transpose or mirror_lr or mirror_tb:
        return np.ascontiguousarray(array)
    return array
