"""The TurboJPEG backend beside other threads: its corrupt-stream errors are its own."""

from __future__ import annotations

import threading
import warnings

import pytest
from images import jpeg_bytes, photo

from fastload import backends


@pytest.fixture
def decoder(require_backend) -> backends.Backend:
    require_backend("turbojpeg")
    return backends.create("turbojpeg")


def test_a_truncated_stream_is_an_error(decoder: backends.Backend) -> None:
    data = jpeg_bytes(photo(320, 240, seed=3))
    with pytest.raises(ValueError, match="libjpeg-turbo: Premature end of JPEG file"):
        decoder.decode_jpeg(data[: len(data) // 2], 1)
    with pytest.raises(ValueError, match="libjpeg-turbo: Not a JPEG file"):
        decoder.decode_jpeg(b"GIF89a" + data, 1)


def test_warnings_of_other_threads_neither_fail_a_decode_nor_change_the_filters(
    decoder: backends.Backend,
) -> None:
    # catching libjpeg-turbo's warnings with warnings.catch_warnings would record these too
    # (its filters are the process's), and leave "always" behind when two threads interleave
    data = jpeg_bytes(photo(64, 48, seed=4))
    failures: list[BaseException] = []

    def decode() -> None:
        try:
            for _ in range(300):
                decoder.decode_jpeg(data, 1)
        except BaseException as exc:
            failures.append(exc)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = list(warnings.filters)
        threads = [threading.Thread(target=decode) for _ in range(2)]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            warnings.warn("another thread's warning", DeprecationWarning, stacklevel=1)
        for thread in threads:
            thread.join()
        after = list(warnings.filters)
    assert failures == []
    assert after == before
