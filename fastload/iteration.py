"""Iterating loaders past their epochs, for anything that measures them."""

from __future__ import annotations

from collections.abc import Generator, Iterable
from typing import Any

__all__ = ["endless"]


def endless(loader: Iterable[Any]) -> Generator[Any, None, None]:
    """Batches from ``loader``, epoch after epoch, without end.

    Raises:
        ValueError: An epoch yields no batch (an empty dataset).
    """
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            raise ValueError("the loader yields no batch: is the dataset empty?")
