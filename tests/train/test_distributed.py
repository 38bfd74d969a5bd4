"""fastload.train under torch.distributed: two real processes with the gloo backend, on the CPU."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import torch
from ranks import run_ranks

from fastload.train import distributed

ROOT = Path(__file__).resolve().parents[2]

_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import torch
    from torch.utils.data import Dataset
    import fastload
    from fastload import train
    from fastload.train import distributed

    class Points(Dataset):  # sample i is (x_i, class of x_i, i)
        def __init__(self):
            g = torch.Generator().manual_seed(0)
            self.x = torch.randn(45, 8, generator=g)
            self.y = (self.x[:, 0] > 0).long() + (self.x[:, 1] > 0).long()
        def __len__(self):
            return len(self.x)
        def __getitem__(self, i):
            return self.x[i], self.y[i], i

    class Recorded:  # passes batches on, noting which samples this rank saw
        def __init__(self, loader):
            self.loader, self.seen = loader, []
        def __len__(self):
            return len(self.loader)
        @property
        def sampler(self):
            return self.loader.sampler
        def __iter__(self):
            for x, y, i in self.loader:
                self.seen.append(i.tolist())
                yield x, y

    world = distributed.setup()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
    model = distributed.wrap(model, world)
    ds = Points()
    loader = Recorded(fastload.DataLoader(ds, batch_size=4, sampler=distributed.sampler(ds)))
    trainer = train.Trainer(model, train.adamw(model, 3e-2), precision="fp32", accumulate=2)
    epochs = []
    for epoch in range(4):
        loader.seen = []
        trainer.fit(loader, epochs=epoch + 1, checkpoint=sys.argv[2])
        epochs.append(sum(loader.seen, []))
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
    out = {
        "rank": world.rank,
        "size": world.size,
        "epochs": epochs,
        "losses": [s.loss for s in trainer.history],
        "weights": weights,
        "metrics": trainer.evaluate(loader),
    }
    with open(sys.argv[1] + f".{world.rank}.json", "w") as f:
        json.dump(out, f)
    distributed.cleanup()
    # only the interpreter's teardown is left, where torch's gloo and autograd threads can
    # still abort a rank whose work is done (pytorch/pytorch#190489): skip it
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(0)
    """
)


def test_two_gloo_ranks_train_one_model_on_disjoint_shards(tmp_path: Path) -> None:
    script = tmp_path / "ddp.py"
    script.write_text(_SCRIPT)
    run_ranks(script, lambda r: [str(tmp_path / "out"), str(tmp_path / "ck.pt")])
    a, b = (json.loads((tmp_path / f"out.{r}.json").read_text()) for r in range(2))
    assert a["size"] == b["size"] == 2
    for seen_a, seen_b in zip(a["epochs"], b["epochs"], strict=True):
        assert len(seen_a) == len(seen_b) == 23  # ceil(45 / 2): DistributedSampler pads by one
        assert set(seen_a) | set(seen_b) == set(range(45))  # every sample, once but the pad
        assert len(seen_a) + len(seen_b) - len(set(seen_a) | set(seen_b)) == 1
    assert a["epochs"][0] != a["epochs"][1]  # reshuffled every epoch
    assert a["weights"] == b["weights"]  # one model: DDP kept the ranks in step
    assert a["losses"] == b["losses"]  # the epoch loss is reduced over the ranks
    assert a["losses"][-1] < a["losses"][0]
    assert a["metrics"] == b["metrics"] and a["metrics"]["images"] == 46
    assert (tmp_path / "ck.pt").exists()  # written by rank 0


def test_a_single_process_is_plain() -> None:
    world = distributed.setup()
    assert (world.rank, world.size, world.main) == (0, 1, True)
    model = torch.nn.Linear(2, 2)
    assert distributed.wrap(model, world) is model
    assert distributed.sampler(list(range(10))) is None


def test_channels_last_must_come_before_ddp(tmp_path: Path) -> None:
    import pytest
    import torch.distributed as dist

    from fastload import train

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        conv = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten())
        late = torch.nn.parallel.DistributedDataParallel(conv)
        with pytest.raises(ValueError, match="convert it before wrapping"):
            train.Trainer(late, train.adamw(late, 1e-3), channels_last=True)
        world = distributed.World(0, 2, torch.device("cpu"))  # as if there were two ranks
        early = distributed.wrap(conv, world, channels_last=True)
        assert isinstance(early, torch.nn.parallel.DistributedDataParallel)
        train.Trainer(early, train.adamw(early, 1e-3), channels_last=True)  # accepted
    finally:
        dist.destroy_process_group()
