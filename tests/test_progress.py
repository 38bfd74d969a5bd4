"""The progress bar: what a person sees of a long command or an epoch."""

from __future__ import annotations

import io
import time

from fastload._progress import Progress


def drawn(**options: object) -> str:
    stream = io.StringIO()
    bar = Progress("epoch 0", stream=stream, enabled=True, **options)  # type: ignore[arg-type]
    bar(0, 10)
    time.sleep(0.3)  # a slow count: a few per second (redraws come at most 10 times a second)
    bar(1, 10, "512 img/s")
    bar.close()
    return stream.getvalue()


def test_a_slow_count_keeps_a_decimal_instead_of_0_per_second() -> None:
    text = drawn()
    assert " 0/s" not in text and "/s 512 img/s" in text
    assert any(f"{k / 10:.1f}/s" in text for k in range(1, 100))


def test_the_rate_can_be_left_to_extra() -> None:
    text = drawn(rate=False)
    assert "1/10  10% 512 img/s" in text and text.count("/s") == 1
