"""fastload.train on the CPU with tiny models: the loop's arithmetic, checkpoints and refusals."""

from __future__ import annotations

import contextlib
import copy
import math
import os
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from fastload import train


def data(n: int = 96, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()  # 3 classes, learnable
    return TensorDataset(x, y)


def mlp(seed: int = 0, dropout: float = 0.0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(dropout), torch.nn.Linear(32, 3)
    )


def test_the_loss_decreases_and_the_epoch_is_summarised(capsys: pytest.CaptureFixture) -> None:
    model = mlp()
    trainer = train.Trainer(model, train.adamw(model, 1e-2), precision="fp32", progress=True)
    loader = DataLoader(data(), batch_size=16, shuffle=True)
    stats = [trainer.train_epoch(loader) for _ in range(6)]
    assert stats[-1].loss < 0.6 * stats[0].loss
    assert stats[0].images == 96 and stats[0].steps == 6 and trainer.step == 36
    assert 0.0 <= stats[0].data_wait_share <= 1.0 and stats[0].images_per_sec > 0
    err = capsys.readouterr().err
    assert "epoch 0 [" in err and "img/s, data" in err  # the bar: rate and waiting share
    assert "epoch 5: " in err and "images/s, waiting for data" in err  # the summary


@pytest.mark.parametrize("sizes", [[4, 4, 4, 4], [5, 5, 6]])
def test_accumulated_micro_batches_equal_one_big_batch(sizes: list[int]) -> None:
    ds = data(16)
    big, small = mlp(1), mlp(1)
    for model, loader, k in (
        (big, DataLoader(ds, batch_size=16), 1),
        (small, DataLoader(ds, batch_sampler=_split(sizes)), len(sizes)),
    ):
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        train.Trainer(model, opt, precision="fp32", accumulate=k, progress=False).train_epoch(
            loader
        )
    for a, b in zip(big.parameters(), small.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def _split(sizes: list[int]) -> list[list[int]]:
    out, start = [], 0
    for s in sizes:
        out.append(list(range(start, start + s)))
        start += s
    return out


def test_clipping_bounds_the_gradient_norm() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    norms: list[float] = []
    step = opt.step

    def recording_step(*args, **kwargs):
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))
        return step(*args, **kwargs)

    opt.step = recording_step
    loss = lambda out, y: 1000.0 * torch.nn.functional.cross_entropy(out, y)  # noqa: E731
    trainer = train.Trainer(
        model, opt, loss_fn=loss, precision="fp32", clip_grad_norm=0.25, progress=False
    )
    trainer.train_epoch(DataLoader(data(), batch_size=16))
    assert len(norms) == 6 and max(norms) <= 0.25 + 1e-5


def test_the_schedule_steps_once_per_optimizer_step() -> None:
    model = mlp()
    opt = train.adamw(model, 1e-3)
    schedule = train.warmup_cosine(opt, warmup_steps=2, total_steps=6)
    trainer = train.Trainer(
        model, opt, scheduler=schedule, accumulate=2, precision="fp32", progress=False
    )
    trainer.train_epoch(DataLoader(data(), batch_size=8))  # 12 micro-batches
    assert trainer.step == 6 and schedule.last_epoch == 6
    assert opt.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)  # annealed to the end


def test_resume_reproduces_the_uninterrupted_run_exactly(tmp_path: Path) -> None:
    def run(seed: int) -> tuple[train.Trainer, DataLoader]:
        model = mlp(seed, dropout=0.3)  # dropout: the random streams must be restored too
        opt = train.adamw(model, 1e-2)
        schedule = train.one_cycle(opt, max_lr=1e-2, total_steps=18)
        trainer = train.Trainer(model, opt, scheduler=schedule, precision="bf16", progress=False)
        return trainer, DataLoader(data(), batch_size=16, shuffle=True)

    torch.manual_seed(123)
    straight, loader = run(0)
    straight.fit(loader, epochs=3)

    torch.manual_seed(123)
    first, loader = run(0)
    first.fit(loader, epochs=1, checkpoint=tmp_path / "ck.pt")
    torch.manual_seed(999)  # a fresh process: other seeds, another initialisation
    resumed, loader = run(7)
    resumed.fit(loader, epochs=3, checkpoint=tmp_path / "ck.pt")
    assert resumed.epoch == straight.epoch == 3 and resumed.step == straight.step == 18
    ours, theirs = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_a_checkpoint_of_another_model_is_refused(tmp_path: Path) -> None:
    model = mlp()
    train.Trainer(model, train.adamw(model, 1e-3), progress=False).save(tmp_path / "a.pt")
    other = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    trainer = train.Trainer(other, train.adamw(other, 1e-3), progress=False)
    with pytest.raises(ValueError, match=r"is of a different model: .*0\.weight: \(32, 8\)"):
        trainer.load(tmp_path / "a.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match=r"junk\.pt' is not a fastload training checkpoint"):
        trainer.load(tmp_path / "junk.pt")


def nan_after(steps: int):
    calls = {"n": 0}

    def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        value = torch.nn.functional.cross_entropy(out, y)
        return value * math.nan if calls["n"] > steps else value

    return loss


def test_a_nonfinite_loss_stops_naming_the_step() -> None:
    model = mlp()
    trainer = train.Trainer(
        model, train.adamw(model, 1e-3), loss_fn=nan_after(2), precision="fp32", progress=False
    )
    with pytest.raises(train.NonFiniteLossError, match="nan at optimizer step 2 \\(epoch 0\\)"):
        trainer.train_epoch(DataLoader(data(), batch_size=16))


def test_a_nonfinite_loss_can_be_skipped() -> None:
    model = mlp()
    trainer = train.Trainer(
        model,
        train.adamw(model, 1e-3),
        loss_fn=nan_after(4),
        precision="fp32",
        on_nonfinite="skip",
        progress=False,
    )
    before = copy.deepcopy(model.state_dict())
    stats = trainer.train_epoch(DataLoader(data(), batch_size=16))
    assert stats.steps == 6 and stats.skipped_steps == 2 and math.isfinite(stats.loss)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_evaluation_runs_in_inference_mode_and_leaves_training_mode() -> None:
    seen: list[bool] = []

    class Probe(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(torch.is_inference_mode_enabled())
            return x

    model = torch.nn.Sequential(mlp(), Probe())
    trainer = train.Trainer(model, train.adamw(model, 1e-3), progress=False)
    metrics = trainer.evaluate(DataLoader(data(), batch_size=32))
    assert seen == [True, True, True] and model.training
    assert metrics["images"] == 96 and 0.0 <= metrics["accuracy"] <= 1.0
    assert math.isfinite(metrics["loss"])


def test_channels_last_and_activation_checkpointing() -> None:
    calls = {"n": 0}

    class Counted(torch.nn.Conv2d):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            calls["n"] += 1
            return super().forward(x)

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        Counted(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 3),
    )
    images = torch.randn(8, 3, 12, 12)
    loader = DataLoader(TensorDataset(images, torch.randint(0, 3, (8,))), batch_size=4)
    trainer = train.Trainer(
        model,
        train.adamw(model, 1e-3),
        channels_last=True,
        checkpoint_activations=["0"],
        progress=False,
    )
    trainer.train_epoch(loader)
    assert calls["n"] == 4  # two batches, each forward run again in the backward pass
    assert model[0].weight.is_contiguous(memory_format=torch.channels_last)
    with pytest.raises(ValueError, match="no submodule 'nope'"):
        train.Trainer(model, train.adamw(model, 1e-3), checkpoint_activations=["nope"])


def test_bad_options_are_refused_with_the_reason() -> None:
    model = mlp()
    opt = train.adamw(model, 1e-3)
    with pytest.raises(ValueError, match="precision='fp16' needs a CUDA device"):
        train.Trainer(model, opt, precision="fp16")
    with pytest.raises(
        ValueError, match="precision='fp8' is not valid; valid: 'auto', 'bf16', 'fp16', 'fp32'"
    ):
        train.Trainer(model, opt, precision="fp8")
    with pytest.raises(ValueError, match=r"torch\.compile has no backend 'warp' here; valid: "):
        train.Trainer(model, opt, compile="warp")
    with pytest.raises(ValueError, match="accumulate=0 must be an int >= 1"):
        train.Trainer(model, opt, accumulate=0)
    with pytest.raises(ValueError, match="on_nonfinite='ignore' is not valid"):
        train.Trainer(model, opt, on_nonfinite="ignore")


def test_precision_on_the_cpu() -> None:
    bf16 = train.Precision.resolve("bf16", "cpu")
    assert bf16.name == "bf16" and bf16.dtype is torch.bfloat16 and bf16.reason == "asked for"
    with bf16.autocast():
        assert torch.nn.Linear(4, 4)(torch.randn(2, 4)).dtype is torch.bfloat16
    assert not bf16.scaler().is_enabled() and not bf16.scales_loss
    assert train.Precision.resolve("fp32", "cpu").dtype is None


@pytest.mark.parametrize(
    "ratio, name, why",
    [
        (22.0, "fp32", "bf16 autocast measured 22.0x slower than fp32 on this CPU"),
        (0.5, "bf16", "bf16 autocast measured 2.0x as fast as fp32 on this CPU"),
    ],
)
def test_auto_on_the_cpu_chooses_what_measures_faster(
    monkeypatch: pytest.MonkeyPatch, ratio: float, name: str, why: str
) -> None:
    from fastload.train import precision

    monkeypatch.setattr(precision, "_CPU_BF16", None)
    monkeypatch.setattr(precision, "_cpu_bf16_ratio", lambda: ratio)
    chosen = train.Precision.resolve("auto", "cpu")
    assert chosen.name == name and chosen.reason == f"auto: {why}"
    model = mlp()
    trainer = train.Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), progress=False)
    assert trainer.precision.name == name


@pytest.mark.parametrize(("fp32", "bf16", "want"), [(1.0, 3.0, 3.0), (2.0, 1.0, 0.5)])
def test_the_cpu_measurement_is_bf16_time_over_fp32_time(
    monkeypatch: pytest.MonkeyPatch, fp32: float, bf16: float, want: float
) -> None:
    import itertools

    from fastload.train import precision

    # a fake clock: each timing reads it twice, fp32 and bf16 in alternation; the first
    # fp32 timing after the warm-up is a burst of other work, which the fastest reading ignores
    durations = itertools.chain([fp32, bf16, 10 * fp32, bf16], itertools.cycle([fp32, bf16]))
    readings = itertools.chain.from_iterable((0.0, d) for d in durations)
    now = [0.0]

    def clock() -> float:
        now[0] += next(readings)
        return now[0]

    monkeypatch.setattr(precision.time, "perf_counter", clock)
    assert precision._cpu_bf16_ratio() == pytest.approx(want)


def test_precision_owns_backward_and_step() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    precision = train.Precision.resolve("fp32", "cpu")
    before = [p.detach().clone() for p in model.parameters()]
    precision.backward(model(torch.randn(8, 8)).square().mean())
    precision.unscale_(opt)
    assert precision.step(opt) is True
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    precision.load_state_dict(precision.state_dict())
    assert precision == train.Precision("fp32", "cpu") != train.Precision("bf16", "cpu")


def test_train_step_is_one_optimizer_step_on_one_batch() -> None:
    model = mlp()
    trainer = train.Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        precision="fp32",
        accumulate=4,
        progress=False,
    )
    x, y = torch.randn(8, 8), torch.randint(0, 3, (8,))
    expected = torch.nn.functional.cross_entropy(model(x), y).item()
    record = trainer.train_step((x, y))
    assert record.samples == 8 and record.taken and trainer.step == 1
    assert record.loss == pytest.approx(expected, rel=1e-6)
    assert all(p.grad is None for p in model.parameters())  # freed with set_to_none


def test_adamw_groups_and_the_linear_rule() -> None:
    model = mlp()
    opt = train.adamw(model, 3e-4, weight_decay=0.1)
    decay, other = opt.param_groups
    assert decay["weight_decay"] == 0.1 and all(p.ndim == 2 for p in decay["params"])
    assert other["weight_decay"] == 0.0 and all(p.ndim == 1 for p in other["params"])
    assert train.scale_lr(0.1, 1024) == pytest.approx(0.4)
    assert train.scale_lr(0.1, 512, base_batch_size=512) == pytest.approx(0.1)


def test_find_lr_restores_the_model_and_suggests_a_rate(tmp_path: Path) -> None:
    model = mlp()
    trainer = train.Trainer(model, torch.optim.SGD(model.parameters(), lr=0.01), progress=False)
    before = copy.deepcopy(model.state_dict())
    result = train.find_lr(
        trainer, DataLoader(data(), batch_size=16, shuffle=True), steps=60, plot=tmp_path / "lr.png"
    )
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # untouched
    assert result.lrs == sorted(result.lrs) and len(result.lrs) == len(result.losses) >= 10
    assert result.lrs[0] <= result.suggestion <= result.lrs[-1]
    assert 1e-4 <= result.suggestion <= 5.0  # where SGD on this problem learns
    assert result.plot is not None and result.plot.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="need 0 < start_lr < end_lr"):
        train.find_lr(trainer, [], start_lr=1.0, end_lr=0.1)


def test_find_batch_size_grows_backs_off_and_scales_the_lr() -> None:
    # Out of memory is simulated (no GPU here): a step raises it above 700 samples.
    def step(size: int) -> None:
        if size > 700:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate ...")

    result = train.find_batch_size(step, base_lr=0.1, base_batch_size=256)
    assert 680 <= result.largest_fitting <= 700
    assert result.batch_size == int(result.largest_fitting * 0.9) // 8 * 8
    assert result.lr == pytest.approx(0.1 * result.batch_size / 256)
    assert [s for s, _ in result.tried][:8] == [8, 16, 32, 64, 128, 256, 512, 1024]
    with pytest.raises(RuntimeError, match="a batch of 8 does not fit"):
        train.find_batch_size(lambda size: step(size * 1000))
    with pytest.raises(ZeroDivisionError):  # any other error is the step's own: not swallowed
        train.find_batch_size(lambda size: 1 / 0)


def test_compile_wraps_the_model_and_checkpoints_the_plain_one(tmp_path: Path) -> None:
    model = mlp()
    trainer = train.Trainer(
        model, train.adamw(model, 1e-2), compile="eager", precision="fp32", progress=False
    )
    assert trainer.model is not model  # torch.compile's wrapper
    stats = trainer.train_epoch(DataLoader(data(), batch_size=16))
    assert stats.steps == 6 and math.isfinite(stats.loss)
    trainer.save(tmp_path / "c.pt")
    saved = torch.load(tmp_path / "c.pt", weights_only=False)["model"]
    assert set(saved) == set(model.state_dict())  # no "_orig_mod." prefixes


def test_an_iterable_without_a_length_finishes_its_last_step() -> None:
    """7 micro-batches, 3 per step: the seventh makes a step of its own at the end."""
    model = mlp()
    trainer = train.Trainer(
        model, train.adamw(model, 1e-3), accumulate=3, precision="fp32", progress=False
    )
    batches = (b for b in DataLoader(data(112), batch_size=16))  # a generator: no len()
    stats = trainer.train_epoch(batches)
    assert stats.steps == 3 and trainer.step == 3 and stats.images == 112


# ---------------------------------------------------------------- defects found by using it


def test_find_batch_size_narrows_on_the_cpu_allocators_out_of_memory() -> None:
    def step(size: int) -> None:
        # a real allocation: far beyond any machine's memory above 700 samples
        torch.empty(size * (2**40 if size > 700 else 1024), dtype=torch.uint8)

    with pytest.raises(RuntimeError, match=r"can't allocate memory|not enough memory"):
        step(701)
    result = train.find_batch_size(step)
    assert 680 <= result.largest_fitting <= 700


def test_an_unwritable_checkpoint_is_refused_before_training(tmp_path: Path) -> None:
    model = mlp()
    trainer = train.Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), progress=False)
    loader = DataLoader(data(), batch_size=16)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(NotADirectoryError, match=rf"{blocker}' is a file, not a folder"):
        trainer.fit(loader, epochs=1, checkpoint=blocker / "ck.pt")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with contextlib.ExitStack() as stack:
            if os.access(locked, os.W_OK):  # root writes anywhere: the OS's refusal, simulated
                from fastload.train import checkpoint

                def refuse(**kwargs: object) -> None:
                    raise PermissionError(13, "Permission denied")

                stack.enter_context(pytest.MonkeyPatch.context()).setattr(
                    checkpoint.tempfile, "TemporaryFile", refuse
                )
            with pytest.raises(
                PermissionError, match=rf"checkpoint='{locked}/ck.pt': cannot write in .*denied"
            ):
                trainer.fit(loader, epochs=1, checkpoint=locked / "ck.pt")
    finally:
        locked.chmod(0o700)
    assert trainer.epoch == 0 and trainer.step == 0  # nothing trained before the refusal


def test_checkpoints_get_the_umasks_permissions(tmp_path: Path) -> None:
    model = mlp()
    trainer = train.Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), progress=False)
    old = os.umask(0o022)
    try:
        path = trainer.save(tmp_path / "ck.pt")
    finally:
        os.umask(old)
    assert path is not None and (path.stat().st_mode & 0o777) == 0o644


@pytest.mark.parametrize("epochs", [-1, 1.5, True])
def test_epochs_must_be_a_count(epochs) -> None:
    model = mlp()
    trainer = train.Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), progress=False)
    with pytest.raises(ValueError, match=r"epochs=.* must be an int >= 0"):
        trainer.fit([], epochs=epochs)


def test_an_optimizer_over_another_model_is_refused() -> None:
    model, other = mlp(0), mlp(1)
    with pytest.raises(ValueError, match="does not hold 4 of the model's 4 trainable parameters"):
        train.Trainer(model, torch.optim.SGD(other.parameters(), lr=0.1))
    model[0].requires_grad_(False)  # frozen parameters need not be in the optimizer
    train.Trainer(model, torch.optim.SGD(model[3].parameters(), lr=0.1), progress=False)


def test_fit_returns_the_validation_and_prints_each_epoch_without_a_terminal(capsys) -> None:
    model = mlp()
    trainer = train.Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), precision="fp32")
    loader = DataLoader(data(), batch_size=16)
    stats = trainer.fit(loader, epochs=2, val_loader=loader)
    assert [s.val is not None and 0 <= s.val["accuracy"] <= 1 for s in stats] == [True, True]
    assert trainer.history[-1].val == stats[-1].val
    printed = capsys.readouterr().err.splitlines()  # stderr is not a terminal here
    assert [line.split(":")[0] for line in printed] == [
        "epoch 0",
        "epoch 0 val",
        "epoch 1",
        "epoch 1 val",
    ]


def test_steps_per_epoch_counts_the_leftover_group() -> None:
    model = mlp()
    trainer = train.Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        precision="fp32",
        accumulate=4,
        progress=False,
    )
    loader = DataLoader(data(), batch_size=10)  # 10 micro-batches: 4 + 4 + 2
    assert trainer.steps_per_epoch(loader) == train.steps_per_epoch(10, 4) == 3
    trainer.train_epoch(loader)
    assert trainer.step == 3


def test_the_lr_plot_of_a_single_rate_and_of_a_divergence(tmp_path: Path) -> None:
    from PIL import Image

    from fastload.train import finders

    assert finders._log_range([1e-3]) == pytest.approx((-3.0, -2.0))  # one decade, in log units
    assert finders._log_range([1e-4, 1e-1]) == pytest.approx((-4.0, -1.0))
    one = finders._plot([1e-3], [0.5], 1e-3, tmp_path / "one.png")
    wild = finders._plot([1e-4, 1e-3, 1e-2], [1.0, 0.5, 40.0], 1e-3, tmp_path / "wild.png")
    for path in (one, wild):
        with Image.open(path) as image:
            assert image.size == (720, 420)


class Rows(torch.utils.data.Dataset):
    """``data()``'s samples as dicts, the way Hugging Face pipelines give them (a string key
    first, as webdataset's ``__key__``)."""

    def __init__(self) -> None:
        self.rows = data()

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        x, y = self.rows[i]
        return {"__key__": f"row{i}", "features": x, "label": y}


def test_dict_batches_train_as_their_tuples_do() -> None:
    models = {}
    for kind, dataset in {"tuples": data(), "dicts": Rows()}.items():
        model = models[kind] = mlp()
        trainer = train.Trainer(model, train.adamw(model, 1e-2), precision="fp32", progress=False)
        stats = trainer.train_epoch(DataLoader(dataset, batch_size=16))
        assert stats.images == 96
    for ours, theirs in zip(
        models["dicts"].parameters(), models["tuples"].parameters(), strict=True
    ):
        assert torch.equal(ours, theirs)


def test_a_dict_batch_without_labels_is_refused_naming_its_keys() -> None:
    model = mlp()
    trainer = train.Trainer(model, train.adamw(model, 1e-2), precision="fp32", progress=False)
    with pytest.raises(
        TypeError, match=r"or a dict with 'labels' or 'label'; got a dict of \['target', 'x'\]"
    ):
        trainer.train_step({"x": torch.zeros(2, 8), "target": torch.zeros(2, dtype=torch.long)})
