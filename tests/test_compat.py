"""Each private name of torch and torchvision that fastload uses (fastload/compat.py), checked
on the installed releases: when one moves, its test says which and where to change."""

from __future__ import annotations

import inspect

import pytest
import torch
import torchvision
import torchvision.transforms as v1
import torchvision.transforms.v2 as v2

from fastload import compat

RELEASES = f"torch {torch.__version__}, torchvision {torchvision.__version__}"


def moved(what: str) -> str:
    return f"{RELEASES} moved or changed {what}: update fastload/compat.py"


@pytest.mark.parametrize(
    "name", ["BaseDataLoaderIter", "SingleProcessDataLoaderIter", "MultiProcessingDataLoaderIter"]
)
def test_torchs_loader_iterators(name: str) -> None:
    iterator = getattr(compat, name)
    assert inspect.isclass(iterator) and issubclass(iterator, compat.BaseDataLoaderIter), moved(
        f"torch.utils.data.dataloader._{name}"
    )


def test_the_iterator_methods_fastload_builds_on() -> None:
    assert callable(getattr(compat.MultiProcessingDataLoaderIter, "_try_get_data", None)), moved(
        "_MultiProcessingDataLoaderIter._try_get_data (fastload.loader.workers overrides it)"
    )
    fetcher = compat.DatasetKind.create_fetcher(
        compat.DatasetKind.Map, [1, 2], True, lambda batch: batch, False
    )
    assert fetcher.fetch([1]) == [2], moved("_DatasetKind.create_fetcher")
    assert isinstance(compat.MP_STATUS_CHECK_INTERVAL, (int, float)), moved(
        "torch.utils.data._utils.MP_STATUS_CHECK_INTERVAL"
    )


def test_pin_memory_helper() -> None:
    assert list(inspect.signature(compat.pin_memory).parameters) == ["data", "device"], moved(
        "torch.utils.data._utils.pin_memory.pin_memory(data, device)"
    )
    if torch.cuda.is_available():  # pinning needs a CUDA driver
        batch = {"x": torch.ones(2), "y": [torch.zeros(1)]}
        pinned = compat.pin_memory(batch, None)
        assert pinned["x"].is_pinned() and pinned["y"][0].is_pinned()


def test_storage_use_count() -> None:
    count = compat.storage_use_count()
    assert count is not None, moved("torch._C._storage_Use_Count (batch buffers are never reused)")
    tensor = torch.zeros(4)
    alone = count(compat.storage_handle(tensor.untyped_storage()))
    view = tensor[1:]  # noqa: F841 - a second reference to the same storage
    assert count(compat.storage_handle(tensor.untyped_storage())) > alone, moved("its counting")


def test_dynamo_backends_and_the_compiled_wrapper() -> None:
    assert "inductor" in compat.dynamo_backends(), moved("torch._dynamo.list_backends")
    model = torch.nn.Linear(2, 2)
    assert compat.compiled_inner(torch.compile(model)) is model, moved("OptimizedModule._orig_mod")
    assert compat.compiled_inner(model) is None


def test_foreach_div() -> None:
    tensors = [torch.full((2,), 4.0), torch.full((3,), 8.0)]
    compat.foreach_div_(tensors, 4.0)
    assert [t.tolist() for t in tensors] == [[1.0, 1.0], [2.0, 2.0, 2.0]], moved(
        "torch._foreach_div_"
    )


def test_accelerates_mark_of_a_prepared_loader() -> None:
    accelerator = pytest.importorskip("accelerate.accelerator")
    assert compat.ACCELERATE_PREPARED in inspect.getsource(accelerator), (
        f"accelerate no longer marks prepared objects with {compat.ACCELERATE_PREPARED!r}: "
        "update fastload/compat.py"
    )


def test_torchvisions_v1_policy_tables_and_draws() -> None:
    space = compat.augmentation_space(v1.TrivialAugmentWide(), 31)
    assert "Rotate" in space and len(space["Rotate"]) == 2, moved("TrivialAugmentWide's table")
    augmix = v1.AugMix()
    assert compat.parameter_max(augmix) == 10, moved("AugMix._PARAMETER_MAX")
    assert "Posterize" in compat.augmentation_space(augmix, 10, (32, 32)), moved("AugMix's table")
    weights = compat.sample_dirichlet(augmix, torch.tensor([[1.0, 1.0]]))
    assert weights.shape == (1, 2) and torch.allclose(weights.sum(), torch.tensor(1.0)), moved(
        "AugMix._sample_dirichlet"
    )


def test_torchvisions_v2_policy_tables() -> None:
    assert "Rotate" in compat.v2_augmentation_space(v2.TrivialAugmentWide()), moved(
        "v2's _AUGMENTATION_SPACE"
    )
    partial = compat.v2_augmentation_space(v2.AugMix(), partial=True)
    assert "Posterize" in partial and "Color" not in partial, moved("v2 AugMix's partial table")
    assert compat.v2_policies(v2.AutoAugment()), moved("v2 AutoAugment's _policies")
    assert compat.parameter_max(v2.AugMix()) == 10, moved("v2 AugMix._PARAMETER_MAX")


def test_default_collates_function_for_tensors() -> None:
    """default_collate stacks tensors with the function fastload swaps in its workers, and a
    function the user put in its map themselves stays theirs."""
    from torch.utils.data import default_collate
    from torch.utils.data._utils.collate import default_collate_fn_map

    assert default_collate_fn_map.get(torch.Tensor) is compat.collate_tensors, moved(
        "torch.utils.data._utils.collate.default_collate_fn_map[torch.Tensor]"
    )
    with compat.tensors_collated_by(lambda batch, **_: "ours"):
        assert default_collate([torch.ones(2)] * 3) == "ours", moved("default_collate's map")
    assert default_collate_fn_map[torch.Tensor] is compat.collate_tensors

    def doubled(batch: list[torch.Tensor], *, collate_fn_map: object = None) -> torch.Tensor:
        return torch.stack(batch) * 2

    default_collate_fn_map[torch.Tensor] = doubled
    try:
        with compat.tensors_collated_by(lambda batch, **_: None):
            assert torch.equal(default_collate([torch.ones(2)] * 3), torch.full((3, 2), 2.0))
    finally:
        default_collate_fn_map[torch.Tensor] = compat.collate_tensors


def test_a_thread_inside_tensors_collated_by_leaves_other_threads_torchs_function() -> None:
    """Worker threads collate at once: each inside its own swap gets its function, a thread
    outside gets torch's, and torch's is back in the map once the last one is out."""
    import threading

    from torch.utils.data import default_collate
    from torch.utils.data._utils.collate import default_collate_fn_map

    inside, leave = threading.Barrier(2), threading.Event()
    got: dict[str, object] = {}

    def worker(name: str) -> None:
        with compat.tensors_collated_by(lambda batch, **_: name):
            inside.wait()
            got[f"{name} inside"] = default_collate([torch.ones(2)] * 3)
            leave.wait()
        got[f"{name} after"] = default_collate([torch.ones(2)] * 3)

    first = threading.Thread(target=worker, args=("first",))
    first.start()
    inside.wait()  # the first thread is inside: this one is not
    assert torch.equal(default_collate([torch.ones(2)] * 3), torch.ones(3, 2))
    inside.reset()
    second = threading.Thread(target=worker, args=("second",))
    second.start()
    inside.wait()  # both inside at once
    leave.set()
    first.join(), second.join()
    assert got["first inside"] == "first" and got["second inside"] == "second"
    assert torch.equal(got["first after"], torch.ones(3, 2))  # type: ignore[arg-type]
    assert default_collate_fn_map[torch.Tensor] is compat.collate_tensors


def test_a_child_forked_while_another_thread_is_inside_gets_torchs_function_back() -> None:
    """Only the forking thread lives on in a child: a swap another thread made is undone
    there, and the child can swap its own (the guard is not left held)."""
    import os
    import threading

    from torch.utils.data import default_collate
    from torch.utils.data._utils.collate import default_collate_fn_map

    entered, leave = threading.Event(), threading.Event()

    def inside() -> None:
        with compat.tensors_collated_by(lambda batch, **_: "theirs"):
            entered.set()
            leave.wait()

    thread = threading.Thread(target=inside)
    thread.start()
    entered.wait()
    pid = os.fork()
    if pid == 0:  # the child: no assert may raise past here into pytest
        ok = default_collate_fn_map[torch.Tensor] is compat.collate_tensors
        with compat.tensors_collated_by(lambda batch, **_: "ours"):
            ok = ok and default_collate([torch.ones(2)]) == "ours"
        ok = ok and default_collate_fn_map[torch.Tensor] is compat.collate_tensors
        os._exit(0 if ok else 1)
    leave.set()
    thread.join()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert default_collate_fn_map[torch.Tensor] is compat.collate_tensors
