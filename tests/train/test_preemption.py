"""Stopping and resuming a real training run: SIGTERM / SIGUSR1 in a real subprocess, mid-epoch
checkpoints, and a kill during a checkpoint write."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from images import jpeg_bytes, photo
from ranks import run_ranks

from fastload.train import checkpoint as ckpt

# A small CNN on real JPEGs, loaded by fastload.DataLoader with two worker processes and a
# seeded generator; the loss function sends the process a signal at a chosen call, as a
# scheduler would, and logs each sample's pixel sum so the test can count what was trained.
SCRIPT = textwrap.dedent(
    """
    import json, os, signal, sys
    import torch
    import fastload
    from fastload import train
    from fastload import transforms as T

    folder, ckpt_path, log_path, out_path, signal_name, at = sys.argv[1:7]
    at = int(at)
    every = int(sys.argv[7]) if len(sys.argv) > 7 else None
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(), torch.nn.Dropout(0.2),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 3),
    )
    dataset = fastload.ImageFolder(
        folder, T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip()])
    )
    loader = fastload.DataLoader(
        dataset, batch_size=4, shuffle=True, num_workers=2,
        generator=torch.Generator().manual_seed(1),
    )
    calls = 0

    def loss_fn(outputs, targets):
        global calls
        calls += 1
        if calls == at:
            os.kill(os.getpid(), getattr(signal, signal_name))
        return torch.nn.functional.cross_entropy(outputs, targets)

    class Logged(torch.nn.Module):  # logs what each step trains on
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            with open(log_path, "a") as f:
                f.write(json.dumps(x.double().sum(dim=(1, 2, 3)).tolist()) + "\\n")
            return self.inner(x.float() / 255)

    logged = Logged(model)
    optimizer = train.adamw(logged, 1e-2)
    trainer = train.Trainer(logged, optimizer, loss_fn=loss_fn, precision="fp32", progress=False)
    trainer.fit(loader, epochs=2, checkpoint=ckpt_path, checkpoint_every=every)
    torch.save(model.state_dict(), out_path)
    """
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("photos")
    for k in range(22):  # 6 batches of 4, the last short
        cls = root / f"c{k % 3}"
        cls.mkdir(exist_ok=True)
        (cls / f"{k}.jpg").write_bytes(jpeg_bytes(photo(64 + 2 * k, 48, seed=k)))
    return root


def train_run(folder: Path, work: Path, signal_name: str = "SIGTERM", at: int = -1, every=None):
    script = work / "train.py"
    script.write_text(SCRIPT)
    args = [str(folder), str(work / "ck.pt"), str(work / "log"), str(work / "weights.pt")]
    args += [signal_name, str(at)] + ([str(every)] if every else [])
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=300
    )


def trained(work: Path) -> list[float]:
    lines = (work / "log").read_text().splitlines()
    return sorted(round(v, 3) for line in lines for v in json.loads(line))


@pytest.mark.parametrize(
    ("signal_name", "at"), [("SIGTERM", 3), ("SIGUSR1", 8), ("SIGTERM", 6)], ids=str
)
def test_a_stop_signal_checkpoints_mid_epoch_and_the_run_resumes_exactly(
    folder: Path, tmp_path: Path, signal_name: str, at: int
) -> None:
    straight = tmp_path / "straight"
    straight.mkdir()
    assert train_run(folder, straight).returncode == 0
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    first = train_run(folder, stopped, signal_name, at)
    number = int(getattr(signal, signal_name))
    assert first.returncode == 128 + number, first.stderr
    epoch, batch = divmod(at, 6)
    where = f"epoch {epoch}, after batch {batch}" if batch else f"the end of epoch {epoch - 1}"
    assert f"fastload: {signal_name} received: stopped at {where}, step {at};" in first.stderr
    assert "checkpoint written to" in first.stderr
    second = train_run(folder, stopped)  # the same command again
    assert second.returncode == 0, second.stderr
    # every sample of both epochs trained exactly once across the two processes, same pixels
    assert trained(stopped) == trained(straight)
    want = torch.load(straight / "weights.pt")
    got = torch.load(stopped / "weights.pt")
    assert all(torch.equal(want[k], got[k]) for k in want)


# The same run as two gloo ranks of one DDP job, each with its DistributedSampler shard and
# its own workers; only rank 0 receives the signal.
DDP_SCRIPT = textwrap.dedent(
    """
    import json, os, signal, sys
    import torch
    import fastload
    from fastload import train
    from fastload import transforms as T
    from fastload.train import distributed

    folder, ckpt_path, log_path, out_path, at = sys.argv[1:6]
    at = int(at)
    world = distributed.setup()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 3),
    )
    dataset = fastload.ImageFolder(
        folder, T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip()])
    )
    loader = fastload.DataLoader(
        dataset, batch_size=2, num_workers=2, sampler=distributed.sampler(dataset),
        generator=torch.Generator().manual_seed(1),
    )
    calls = 0

    def loss_fn(outputs, targets):
        global calls
        calls += 1
        if calls == at and world.rank == 0:
            os.kill(os.getpid(), signal.SIGTERM)
        return torch.nn.functional.cross_entropy(outputs, targets)

    class Logged(torch.nn.Module):  # logs what each step of this rank trains on
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            with open(f"{log_path}.{world.rank}", "a") as f:
                f.write(json.dumps(x.double().sum(dim=(1, 2, 3)).tolist()) + "\\n")
            return self.inner(x.float() / 255)

    net = distributed.wrap(Logged(model), world)
    trainer = train.Trainer(
        net, train.adamw(net, 1e-2), loss_fn=loss_fn, precision="fp32", progress=False
    )
    trainer.fit(loader, epochs=2, checkpoint=ckpt_path)
    torch.save(model.state_dict(), f"{out_path}.{world.rank}")
    distributed.cleanup()
    # only the interpreter's teardown is left, where torch's gloo and autograd threads can
    # still abort a rank whose work is done (pytorch/pytorch#190489): skip it
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(0)
    """
)


def test_ddp_ranks_stop_at_one_step_and_each_resumes_its_shard_exactly(
    folder: Path, tmp_path: Path
) -> None:
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)

    def job(work: Path, at: int = -1, status: int = 0) -> list[str]:
        work.mkdir(exist_ok=True)
        paths = [work / "ck.pt", work / "log", work / "weights.pt"]
        return run_ranks(script, lambda _: [str(folder), *map(str, paths), str(at)], status=status)

    job(tmp_path / "straight")
    stopped = tmp_path / "stopped"
    errs = job(stopped, at=4, status=128 + signal.SIGTERM)  # 22 files: 6 steps an epoch a rank
    # rank 1 got no signal, but stopped at the same step (the ranks agree every step) and with
    # the same status; rank 0 says so
    assert "fastload: SIGTERM received: stopped at epoch 0, after batch 4, step 4;" in errs[0]
    assert "Traceback" not in errs[1]
    job(stopped)  # the same command again
    for rank in range(2):
        want = (tmp_path / "straight" / f"log.{rank}").read_text().splitlines()
        got = (stopped / f"log.{rank}").read_text().splitlines()
        assert got == want  # each rank: its own shard's samples, once, in order, same pixels
        straight_weights = torch.load(tmp_path / "straight" / f"weights.pt.{rank}")
        resumed_weights = torch.load(stopped / f"weights.pt.{rank}")
        assert all(torch.equal(straight_weights[k], resumed_weights[k]) for k in straight_weights)


def test_checkpoint_every_writes_mid_epoch_and_resumes_after_a_kill(
    folder: Path, tmp_path: Path
) -> None:
    straight = tmp_path / "straight"
    straight.mkdir()
    assert train_run(folder, straight).returncode == 0
    killed = tmp_path / "killed"
    killed.mkdir()
    # SIGKILL at the 9th batch: nothing can be written then; the checkpoint of step 8 remains
    first = train_run(folder, killed, "SIGKILL", 9, every=4)
    assert first.returncode == -signal.SIGKILL
    state = ckpt.load(killed / "ck.pt")
    assert (state["epoch"], state["epoch_batches"], state["step"]) == (1, 2, 8)
    assert train_run(folder, killed).returncode == 0
    # batch 9 was trained by the killed run and again after resuming from step 8: the rest once
    log = trained(killed)
    assert len(log) == len(trained(straight)) + 4
    want = torch.load(straight / "weights.pt")
    got = torch.load(killed / "weights.pt")
    assert all(torch.equal(want[k], got[k]) for k in want)


WRITER = textwrap.dedent(
    """
    import os, signal, sys, torch
    from fastload.train import checkpoint as ckpt
    big = torch.zeros(16 * 1024 * 1024)
    ckpt.save({"model": {"w": big}, "version": 1}, sys.argv[1])

    def killed_mid_write(obj, f, *args, **kwargs):  # the next write dies halfway
        with open(f, "wb") as out:
            out.write(b"the first bytes of a checkpoint")
            out.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    torch.save = killed_mid_write
    ckpt.save({"model": {"w": big}, "version": 2}, sys.argv[1])
    """
)


def test_a_kill_during_the_write_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    # the kill comes from inside the write, at a known point: no race with the rename
    path = tmp_path / "ck.pt"
    proc = subprocess.run([sys.executable, "-c", WRITER, str(path)], timeout=120)
    assert proc.returncode == -signal.SIGKILL
    state = ckpt.load(path)  # whole: the version written before the killed one
    assert state["version"] == 1 and state["model"]["w"].numel() == 16 * 1024 * 1024
    assert list(tmp_path.glob(".ck.pt.*"))  # the partial file of the killed write
    ckpt.save({"model": {}, "version": 0}, path)
    assert list(tmp_path.glob(".ck.pt.*")) == []  # the next write clears it


def test_a_mid_epoch_checkpoint_needs_a_loader_that_can_resume(tmp_path: Path) -> None:
    from torch.utils.data import DataLoader, TensorDataset

    from fastload import train

    model = torch.nn.Linear(4, 2)
    trainer = train.Trainer(model, torch.optim.SGD(model.parameters(), 0.1), progress=False)
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8).long()), batch_size=2)
    with pytest.raises(ValueError, match="checkpoint_every: DataLoader has no state_dict"):
        trainer.fit(loader, epochs=1, checkpoint=tmp_path / "ck.pt", checkpoint_every=2)
    trainer.epoch_batches = 2
    trainer.save(tmp_path / "mid.pt")
    with pytest.raises(ValueError, match="middle of epoch 0, and DataLoader cannot resume"):
        trainer.load(tmp_path / "mid.pt", loader=loader)
