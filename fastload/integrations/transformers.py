"""transformers' ``Trainer`` on fastload's loader.

In a script of one's own, build the trainer from here in place of transformers' (the same
arguments, plus ``fastload_options``)::

    from fastload.integrations.transformers import TransformersTrainer as Trainer

A script left as it is (transformers' ``run_image_classification.py``) runs with::

    python -m fastload.integrations.transformers path/to/script.py <the script's arguments>

which makes ``transformers.Trainer`` this module's :class:`TransformersTrainer` before the
script imports it.

``TransformersTrainer`` builds each loader (train, eval, test) as transformers builds it: the same
dataset (its unused columns removed as transformers removes them), collate function, sampler,
batch size, workers, pinned memory, persistent workers, prefetch factor and ``seed_worker``;
but as ``fastload.DataLoader(..., accelerate=True)``, prepared by
:func:`fastload.integrations.hf_accelerate.prepare` so that Accelerate leaves it fastload's
(this rank's shard, the batches on Accelerate's device, the order of Accelerate's seedable
sampler, which the ``Trainer`` turns on: the stock ``Trainer``'s order for the same seed). With
the example's ``set_transform`` and ``collate_fn`` (:mod:`fastload.accelerate.hf_datasets`),
the images are decoded fused with the pipeline and converted once a batch. A run resumed
mid-epoch (``resume_from_checkpoint``) skips the epoch's first batches as transformers does,
without reading them, on a fastload loader of the same options.

How it gets in: while the trainer builds a loader, ``transformers.trainer``'s ``DataLoader``
name is fastload's, and while it trains, its ``skip_first_batches`` is
:func:`fastload.integrations.hf_accelerate.skip_first_batches`; both names are put back after.
They are the module's globals, so a second, stock ``Trainer`` building its loaders in another
thread at the same moment would get fastload's too.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from typing import Any

from fastload._optional import MissingDependencyError
from fastload.integrations.hf_accelerate import prepare, skip_first_batches
from fastload.integrations.scripts import run_script
from fastload.loader import DataLoader

try:
    import transformers
    import transformers.trainer as trainer_module
except ImportError as exc:
    raise MissingDependencyError(
        f"fastload.integrations.transformers runs transformers' Trainer, and transformers is "
        f"not installed ({exc}). Install it with: pip install transformers"
    ) from exc

__all__ = ["TransformersTrainer", "install", "main"]


class TransformersTrainer(transformers.Trainer):
    """transformers' ``Trainer`` whose loaders are ``fastload.DataLoader`` (see the module's
    notes).

    Args:
        *args: transformers' ``Trainer`` arguments.
        fastload_options: fastload's own loader options for every loader the trainer builds
            (``accelerate=True`` unless given; ``device`` is Accelerate's).
        **kwargs: transformers' ``Trainer`` keyword arguments.
    """

    def __init__(
        self, *args: Any, fastload_options: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.fastload_options = {"accelerate": True, **(fastload_options or {})}

    def get_train_dataloader(self) -> Any:
        with self._fastload_loaders():
            return super().get_train_dataloader()

    def get_eval_dataloader(self, eval_dataset: Any = None) -> Any:
        with self._fastload_loaders():
            return super().get_eval_dataloader(eval_dataset)

    def get_test_dataloader(self, test_dataset: Any) -> Any:
        with self._fastload_loaders():
            return super().get_test_dataloader(test_dataset)

    def train(self, *args: Any, **kwargs: Any) -> Any:
        with _rebound("skip_first_batches", skip_first_batches):
            return super().train(*args, **kwargs)

    @contextlib.contextmanager
    def _fastload_loaders(self) -> Iterator[None]:
        """While transformers builds a loader: its ``DataLoader`` is fastload's, prepared
        fastload's way (so that its ``accelerator.prepare`` leaves it as it is). Not
        registered for ``accelerator.save_state``: the trainer's checkpoints resume by
        skipping batches, and it makes evaluation loaders again at each evaluation."""
        build = functools.partial(_prepared_loader, self.accelerator, self.fastload_options)
        with _rebound("DataLoader", build):
            yield


def _prepared_loader(accelerator: Any, options: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
    return prepare(accelerator, DataLoader(*args, **kwargs, **options), checkpoint=False)


@contextlib.contextmanager
def _rebound(name: str, value: Any) -> Iterator[None]:
    """``transformers.trainer``'s global ``name`` is ``value`` within the block.

    Raises:
        MissingDependencyError: This transformers' trainer has no such name (a release this
            module does not know).
    """
    if not hasattr(trainer_module, name):
        raise MissingDependencyError(
            f"transformers {transformers.__version__}'s trainer has no {name}, which "
            "fastload.integrations.transformers replaces: install a transformers that "
            "builds its loaders with torch's DataLoader (4.40 to 5.x)"
        )
    kept = getattr(trainer_module, name)
    setattr(trainer_module, name, value)
    try:
        yield
    finally:
        setattr(trainer_module, name, kept)


def install() -> None:
    """Make ``transformers.Trainer`` (and ``transformers.trainer.Trainer``) this module's
    :class:`TransformersTrainer`, for scripts that import it after this call; idempotent."""
    transformers.Trainer = TransformersTrainer  # type: ignore[misc]
    trainer_module.Trainer = TransformersTrainer  # type: ignore[misc]


def main(argv: Sequence[str] | None = None) -> None:
    """Run a script that trains with transformers' ``Trainer`` on fastload's loaders:
    ``argv`` is the script's path, then its arguments (``sys.argv[1:]`` when not given)."""
    run_script(argv, module="fastload.integrations.transformers", install=install)


if __name__ == "__main__":
    main()
