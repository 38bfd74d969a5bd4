"""Train (or predict) a tiny model under PyTorch Lightning with a fastload loader, as a user
would, and write what each rank saw to ``OUT.<rank>.json``.

    python lightning_run.py ROOT OUT MODE CONFIG

MODE says how the loader reaches Lightning:
  lazy      built in ``train_dataloader()``, with only ``import fastload`` at the top: the
            DataLoader class is created inside Lightning's hook (2 ranks, ddp);
  eager     the same, with ``from fastload import DataLoader`` at the top (2 ranks, ddp);
  fit       built before ``trainer.fit(model, loader)`` (2 ranks, ddp);
  spawn     built before ``trainer.fit(model, loader)`` (2 ranks, ddp_spawn);
  predict   built in ``predict_dataloader()``, lazy (1 device, ``trainer.predict``);
  save      one device, a checkpoint saved after the first epoch's third batch, two epochs;
  resume    one device, training resumed from that checkpoint (``ckpt_path``).
CONFIG is the loader: plain, batch_ops, accelerate, nvimgcodec, dali, or generator (plain,
with a generator of its own).
"""

from __future__ import annotations

import json
import os
import sys

ROOT, OUT, MODE, CONFIG = sys.argv[1:5]
if MODE != "lazy" and MODE != "predict":
    from fastload import DataLoader  # noqa: F401  (the class exists before any hook)
import lightning as L  # noqa: E402
import torch  # noqa: E402

import fastload  # noqa: E402

MEAN, STD = [0.5] * 3, [0.25] * 3


def make_loader() -> fastload.DataLoader:
    """The loader, configured as CONFIG says; its labels are the sample indices."""
    if MODE in ("lazy", "predict"):
        assert "fastload.loader" not in sys.modules, "the class must be created in the hook"
    resize = fastload.transforms.Resize((16, 16))
    options: dict = {"batch_size": 4, "shuffle": MODE != "predict", "num_workers": 0}
    if CONFIG == "accelerate":
        import torchvision
        import torchvision.transforms as T

        pipeline = T.Compose([T.Resize((16, 16)), T.ToTensor(), T.Normalize(MEAN, STD)])
        dataset = torchvision.datasets.ImageFolder(ROOT, pipeline)
        return fastload.DataLoader(dataset, accelerate=True, **options)
    if CONFIG in ("nvimgcodec", "dali"):
        dataset = fastload.ImageFolder(ROOT, resize)
        return fastload.DataLoader(dataset, backend=CONFIG, device="cpu", **options)
    dataset = fastload.ImageFolder(ROOT, resize)
    if CONFIG == "batch_ops":
        options["batch_transforms"] = fastload.gpu.Normalize(MEAN, STD)
    elif CONFIG == "generator":  # the loader's own random stream, saved in its state
        options["generator"] = torch.Generator().manual_seed(7)
    elif CONFIG != "plain":
        raise SystemExit(f"unknown config {CONFIG!r}")
    return fastload.DataLoader(dataset, **options)


def describe(loader: fastload.DataLoader) -> dict:
    """The loader as Lightning holds it: its options and what it runs."""
    plan = loader.plan
    return {
        "class": type(loader).__name__,
        "batch_transforms": type(loader.batch_transforms).__name__,
        "accelerate": loader.accelerate,
        "backend": loader.backend,
        "device": loader.device,
        "plan": type(plan).__name__,
        "accelerated": plan.acceleration.accelerated,
        "sampler": type(loader.sampler).__name__,
        "batch_sampler": type(loader.batch_sampler).__name__,
        "len": len(loader),
    }


class Recorder(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.seen: dict = {"labels": [], "min": float("inf"), "max": float("-inf"), "dtype": []}

    def note(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        self.seen["labels"].append(y.tolist())
        self.seen["min"] = min(self.seen["min"], float(x.float().min()))
        self.seen["max"] = max(self.seen["max"], float(x.float().max()))
        self.seen["dtype"].append(str(x.dtype))
        return x.float().mean((2, 3))

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        features = self.note(batch)
        if "loader" not in self.seen:
            self.seen["loader"] = describe(self.trainer.train_dataloader)
        return torch.nn.functional.cross_entropy(self.lin(features), batch[1] % 2)

    def predict_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        return self.note(batch)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def on_train_end(self) -> None:
        self.write()

    def on_predict_end(self) -> None:
        self.write()

    def write(self) -> None:
        with open(f"{OUT}.{self.global_rank}.json", "w") as f:
            json.dump(self.seen, f)

    def teardown(self, stage: str) -> None:
        """Leave the process group, which Lightning leaves open under gloo, once both ranks
        have written what they saw: ``ddp_spawn``'s ranks end in torch's spawn, not in this
        script's ending."""
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()


class FromHooks(Recorder):
    def train_dataloader(self) -> fastload.DataLoader:
        return make_loader()

    def predict_dataloader(self) -> fastload.DataLoader:
        return make_loader()


class SaveAfterThree(L.Callback):
    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if trainer.current_epoch == 0 and batch_idx == 2:
            trainer.save_checkpoint(f"{OUT}.ckpt")


def main() -> None:
    quiet = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}
    if MODE in ("lazy", "eager", "fit", "spawn"):
        strategy = "ddp_spawn" if MODE == "spawn" else "ddp"
        trainer = L.Trainer(
            accelerator="cpu",
            devices=2,
            strategy=strategy,
            max_epochs=1,
            enable_checkpointing=False,
            **quiet,
        )
        if MODE in ("lazy", "eager"):
            trainer.fit(FromHooks())
        else:
            trainer.fit(Recorder(), make_loader())
    elif MODE == "predict":
        trainer = L.Trainer(accelerator="cpu", devices=1, **quiet)
        trainer.predict(FromHooks())
    elif MODE in ("save", "resume"):
        L.seed_everything(0)
        trainer = L.Trainer(
            accelerator="cpu",
            devices=1,
            max_epochs=2,
            enable_checkpointing=False,
            callbacks=[SaveAfterThree()] if MODE == "save" else [],
            **quiet,
        )
        ckpt = f"{OUT.rsplit('.', 1)[0]}.save.ckpt" if MODE == "resume" else None
        trainer.fit(FromHooks(), ckpt_path=ckpt)
    else:
        raise SystemExit(f"unknown mode {MODE!r}")


if __name__ == "__main__":
    main()
    # only the interpreter's teardown is left, where torch's gloo and autograd threads can still
    # abort a rank whose work is done (pytorch/pytorch#190489): skip it
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(0)
