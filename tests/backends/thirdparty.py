"""Two backends written the way a third party would: one file each kind, one register call.

``register_all()`` adds them; importing this module as a pytest plugin (``-p thirdparty``)
registers them before collection, so the contract suite parametrises over them too.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import torch

from fastload import backends
from fastload._optional import Requirement
from fastload.backends.executor import BatchExecutor, BatchFailed, Engine
from fastload.pixels.image import ImageInfo
from fastload.transforms import View

PILLOW = Requirement("pillow", "PIL", "pip install pillow")


class ThirdPartyDecoder(backends.Backend):
    """A per-sample decoder: Pillow, reduced by draft(), converted without Pillow's helpers."""

    name = "thirdparty"
    requires = (PILLOW,)

    def decode_jpeg(self, data: bytes, reduce: int) -> np.ndarray:
        from PIL import Image

        with Image.open(io.BytesIO(data)) as image:
            if reduce > 1:
                image.draft("RGB", (image.width // reduce, image.height // reduce))
            image.load()
            return np.asarray(image.convert("RGB"))


class _PillowEngine(Engine):
    """Decodes a planned batch sample by sample on the CPU: the executor parts, without DALI."""

    def __init__(self, render: dict[str, Any]) -> None:
        self._decoder = ThirdPartyDecoder()
        self._render = render
        self._queue: list[dict[str, list[Any]]] = []

    def inputs(
        self,
        data: list[np.ndarray],
        views: list[View],
        sizes: list[tuple[int, int]],
        infos: list[ImageInfo],
    ) -> dict[str, list[Any]]:
        return {"encoded": data, "view": views}

    def fits(self, batch: int) -> bool:
        return True

    def feed(self, inputs: dict[str, list[Any]]) -> None:
        self._queue.append(inputs)

    def collect(self) -> torch.Tensor:
        inputs = self._queue.pop(0)
        out = []
        for data, view in zip(inputs["encoded"], inputs["view"], strict=True):
            try:
                out.append(self._render_one(data, view))
            except Exception as exc:
                raise BatchFailed(str(exc)) from exc
        return torch.stack([torch.from_numpy(a).permute(2, 0, 1) for a in out])

    def _render_one(self, data: np.ndarray, view: View) -> np.ndarray:
        return self._decoder.decode(data.tobytes(), plan=lambda _: view, render=self._render)

    def discard(self, *, grow_to: int = 0) -> None:
        self._queue.clear()

    def drain(self) -> None:
        self._queue.clear()

    def decode_alone(self, data: np.ndarray) -> None:
        try:
            self._decoder.decode(data.tobytes())
        except Exception as exc:
            raise ValueError(str(exc) or type(exc).__name__) from exc


class ThirdPartyExecutor(ThirdPartyDecoder):
    """A batch executor over the same decoder: whole batches, in the loader's process."""

    name = "thirdexec"
    kind = "executor"

    @classmethod
    def executor(cls, dataset: Any, options: Any, *, batch_ops: Any = None) -> BatchExecutor:
        return BatchExecutor(
            cls.name,
            dataset,
            options,
            lambda translation, folded: _PillowEngine(dataset.transform_split.render),
            batch_ops=batch_ops,
        )


def register_all() -> None:
    for cls in (ThirdPartyDecoder, ThirdPartyExecutor):
        if cls.name not in backends.names():
            backends.register(cls)


def unregister_all() -> None:
    for cls in (ThirdPartyDecoder, ThirdPartyExecutor):
        if cls.name in backends.names():
            backends.unregister(cls.name)


def pytest_configure(config: Any) -> None:  # as a plugin: register before collection
    register_all()
