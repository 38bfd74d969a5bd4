"""Use a fastload loader under Hugging Face Accelerate, as a user would, and write what this
process saw to ``OUT.<rank>.json``.

    python accelerate_run.py ROOT OUT MODE CONFIG

MODE:
  plain    ``accelerator.prepare(loader)``: what Accelerate's own rebuild delivers, and the
           warnings it raised;
  resume   ``fastload.integrations.hf_accelerate.prepare``: two epochs uninterrupted, with
           ``save_state`` after the first epoch's third batch; then fresh objects,
           ``load_state``, and the rest;
  shard    the same prepare, two epochs (run as the ranks of a torch.distributed job).
CONFIG is the loader: plain, batch_ops, accelerate, nvimgcodec or dali.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import torch
from accelerate import Accelerator

import fastload
from fastload.integrations.hf_accelerate import prepare

ROOT, OUT, MODE, CONFIG = sys.argv[1:5]
MEAN, STD = [0.5] * 3, [0.25] * 3


def make_loader() -> fastload.DataLoader:
    """The loader CONFIG names; its labels are the sample indices."""
    crop = fastload.transforms.RandomResizedCrop(16)
    options: dict = {"batch_size": 4, "shuffle": True}
    if CONFIG == "accelerate":
        import torchvision
        import torchvision.transforms as T

        pipeline = T.Compose([T.RandomResizedCrop(16), T.ToTensor(), T.Normalize(MEAN, STD)])
        dataset = torchvision.datasets.ImageFolder(ROOT, pipeline)
        return fastload.DataLoader(dataset, accelerate=True, **options)
    dataset = fastload.ImageFolder(ROOT, crop)
    if CONFIG in ("nvimgcodec", "dali"):
        return fastload.DataLoader(dataset, backend=CONFIG, device="cpu", **options)
    if CONFIG == "batch_ops":
        options["batch_transforms"] = fastload.gpu.Normalize(MEAN, STD)
    return fastload.DataLoader(dataset, **options)


def record(batches: list) -> dict:
    images = torch.cat([x.float().flatten() for x, _ in batches])
    return {
        "labels": [y.tolist() for _, y in batches],
        "sums": [float(x.double().sum()) for x, _ in batches],
        "min": float(images.min()),
        "max": float(images.max()),
        "dtype": str(batches[0][0].dtype),
    }


def main() -> None:
    accelerator = Accelerator(cpu=True)
    out: dict = {"rank": accelerator.process_index, "processes": accelerator.num_processes}
    if MODE == "plain":
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            prepared = accelerator.prepare(make_loader())
        out["warnings"] = [str(w.message) for w in caught if "fastload" in str(w.message)]
        out["class"] = type(prepared).__name__
        out["epoch"] = record(list(prepared))
    elif MODE == "resume":
        model = torch.nn.Linear(3, 2)
        torch.manual_seed(0)
        reference = list(make_loader())  # the same loader, not prepared
        torch.manual_seed(0)
        model, loader = prepare(accelerator, model, make_loader())
        out["explain"] = fastload.explain(loader)
        epochs = []
        for epoch in range(2):
            batches = []
            for batch in loader:
                batches.append(batch)
                if epoch == 0 and len(batches) == 3:
                    accelerator.save_state(f"{OUT}.state")
            epochs.append(record(batches))
        out["reference"], out["epochs"] = record(reference), epochs
        torch.manual_seed(123)  # the resumed run's own stream: the state must not depend on it
        again = Accelerator(cpu=True)
        model, loader = prepare(again, torch.nn.Linear(3, 2), make_loader())
        again.load_state(f"{OUT}.state")
        out["resumed"] = [record(list(loader)), record(list(loader))]
    elif MODE == "shard":
        torch.manual_seed(0)
        loader = prepare(accelerator, make_loader())
        out["len"] = len(loader)
        out["epochs"] = [record(list(loader)), record(list(loader))]
    with open(f"{OUT}.{accelerator.process_index}.json", "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
    # only the interpreter's teardown is left, where torch's gloo and autograd threads can still
    # abort a rank whose work is done (pytorch/pytorch#190489): skip it
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(0)
