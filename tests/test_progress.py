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


def test_where_the_bar_is_not_drawn_the_log_line_is_printed_once() -> None:
    stream = io.StringIO()
    bar = Progress(
        "bench", stream=stream, enabled=False, log="fastload bench: measuring, about 9 s"
    )
    for done in range(4):
        bar(done, 3, "pillow, round 1 of 3")
    bar.close()
    assert stream.getvalue() == "fastload bench: measuring, about 9 s\n"
    drawn_stream = io.StringIO()
    drawn_bar = Progress("bench", stream=drawn_stream, enabled=True, log="not in a terminal")
    drawn_bar(0, 3)
    assert "not in a terminal" not in drawn_stream.getvalue()


def test_a_shorter_line_is_padded_over_a_longer_one() -> None:
    stream = io.StringIO()
    bar = Progress("bench", stream=stream, enabled=True, rate=False)
    bar(0, 3, "torchvision, accelerated, round 1 of 3")
    time.sleep(0.15)
    bar(1, 3)
    first, second = stream.getvalue().split("\r")[1:]
    assert len(second) == len(first) and second.rstrip().endswith("33%")
