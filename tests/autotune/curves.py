"""Fake throughput curves, clocks and datasets for the autotune tests: nothing waits."""

from __future__ import annotations

import torch


class FakeClock:
    """Each measurement 'takes' ``per_call`` seconds; nothing waits."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def curve(
    rates: dict[int, float],
    clock: FakeClock | None = None,
    per_call: float = 1.0,
    bars: list[float | None] | None = None,
):
    measured = []

    def measure(w: int, bar: float | None) -> float:
        measured.append(w)
        if bars is not None:
            bars.append(bar)
        if clock is not None:
            clock.now += per_call
        return rates[w]

    return measure, measured


def saturating(limit: int, per_worker: float = 100.0, top: int = 32) -> dict[int, float]:
    return {w: per_worker * min(max(w, 0.5), limit) for w in range(top + 1)}


class Tensors(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.full((3, 8, 8), i % 256, dtype=torch.uint8), i


def readings(rates: dict[int, list[float]]):
    """A measure that returns each factor's readings in turn; the factors and bars asked."""
    asked: list[int] = []
    bars: list[float | None] = []

    def measure(factor: int, bar: float | None) -> float:
        asked.append(factor)
        bars.append(bar)
        return rates[factor][asked.count(factor) - 1]

    return measure, asked, bars
