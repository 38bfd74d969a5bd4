"""``fastload.doctor``: findings on planted faults, the measured split of a step, and the user's
objects left as they were."""

from __future__ import annotations

import json
import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from fastload.diagnosis import DoctorReport, doctor, measuring, static_findings


class FakeTime:
    """doctor's clock, advanced only by what the test's dataset and model say they take."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def take(self, seconds: float) -> None:
        self.now += seconds

    def __deepcopy__(self, memo: dict) -> FakeTime:
        return self  # doctor's copy of the model keeps time on the same clock


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr(measuring, "clock", fake)
    return fake


class Images(Dataset):
    """Small uint8 (or float32) images with labels; each sample can take ``delay`` seconds
    (of ``clock``, when given: with ``num_workers=0`` the sample is read in this process)."""

    def __init__(
        self, n: int = 48, *, delay: float = 0.0, dtype=torch.uint8, clock: FakeTime | None = None
    ) -> None:
        self.n, self.delay, self.dtype, self.clock = n, delay, dtype, clock

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.delay and self.clock is not None:
            self.clock.take(self.delay)
        elif self.delay:
            time.sleep(self.delay)
        g = torch.Generator().manual_seed(i)
        image = torch.randint(0, 256, (3, 16, 16), generator=g, dtype=torch.uint8)
        return (image if self.dtype == torch.uint8 else image.float() / 255), i % 3


class Net(torch.nn.Module):
    """A small conv net; each forward pass can take ``delay`` seconds of ``clock``, plus
    ``per_sample`` seconds for each sample of the batch."""

    def __init__(
        self,
        *,
        bias: bool = True,
        delay: float = 0.0,
        per_sample: float = 0.0,
        clock: FakeTime | None = None,
    ) -> None:
        super().__init__()
        self.delay, self.per_sample, self.clock = delay, per_sample, clock
        self.stem = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, bias=bias), torch.nn.BatchNorm2d(8), torch.nn.ReLU()
        )
        self.body = torch.nn.Conv2d(8, 8, 3, bias=True)  # no norm after it: fine
        self.head = torch.nn.Sequential(
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 3)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.clock is not None:
            self.clock.take(self.delay + self.per_sample * x.shape[0])
        elif self.delay:
            time.sleep(self.delay)
        if not x.is_floating_point():  # uint8 images: scaled here, as a training step would
            x = x.float() / 255
        return self.head(torch.relu(self.body(self.stem(x))))


def keys(found) -> set[str]:
    return {f.key for f in found}


def first_batch(loader):
    return next(iter(loader))


def test_a_bias_before_batchnorm_is_named() -> None:
    loader = DataLoader(Images(), batch_size=4)
    found = static_findings(
        Net(), loader, None, device=torch.device("cpu"), batch=first_batch(loader)
    )
    (bias,) = [f for f in found if f.key == "conv_bias_before_bn"]
    assert "stem.0 -> stem.1" in bias.what and "body" not in bias.what
    clean = static_findings(
        Net(bias=False), loader, None, device=torch.device("cpu"), batch=first_batch(loader)
    )
    assert "conv_bias_before_bn" not in keys(clean)


def test_loader_findings() -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")  # cuda: only read, never used
    plain = DataLoader(Images(), batch_size=4)
    found = static_findings(Net(bias=False), plain, None, device=cpu, batch=first_batch(plain))
    assert keys(found) == {"num_workers_0"}  # uint8, pin_memory not needed on the CPU
    floats = DataLoader(Images(dtype=torch.float32), batch_size=4, num_workers=1)
    found = static_findings(Net(bias=False), floats, None, device=cpu, batch=first_batch(floats))
    assert keys(found) == set()  # trained on the CPU: no copy to make smaller
    found = static_findings(Net(bias=False), floats, None, device=cuda, batch=first_batch(floats))
    assert keys(found) == {"float32_batches", "pin_memory_off"}
    model = Net(bias=False)
    optimizer = torch.optim.AdamW(model.parameters())
    found = static_findings(model, plain, optimizer, device=cuda, batch=first_batch(plain))
    assert keys(found) == {"num_workers_0", "pin_memory_off", "optimizer_not_fused"}
    pinned = DataLoader(Images(), batch_size=4, num_workers=1, pin_memory=True)
    fused = torch.optim.AdamW(model.parameters(), fused=True)
    assert keys(static_findings(model, pinned, fused, device=cuda, batch=None)) == set()


class Rows(Dataset):
    """``Images``' samples as the dicts Hugging Face pipelines give, a string key first (as
    webdataset's ``__key__``)."""

    def __init__(self, **images: object) -> None:
        self.images = Images(**images)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> dict:
        image, label = self.images[i]
        return {"__key__": f"img{i}", "pixel_values": image, "label": label}


def test_dict_batches_are_read_as_their_tuples() -> None:
    cuda = torch.device("cuda")  # only read, never used
    for dataset in (Images(dtype=torch.float32), Rows(dtype=torch.float32)):
        loader = DataLoader(dataset, batch_size=4, num_workers=1)
        found = static_findings(
            Net(bias=False), loader, None, device=cuda, batch=first_batch(loader)
        )
        assert keys(found) == {"float32_batches", "pin_memory_off"}
    report = doctor(Net(), DataLoader(Rows(), batch_size=4), steps=3, warmup=1, try_changes=False)
    assert report.steps == 3 and report.batch_size == 4


@pytest.mark.parametrize(
    ("slow", "bound"), [("loader", "loader"), ("model", "model")], ids=["slow loader", "slow model"]
)
def test_the_data_wait_share_is_measured(slow: str, bound: str, clock: FakeTime) -> None:
    # 4 samples a batch at 50 ms each: 200 ms of loading a step; or 100 ms in the forward pass
    delay = 0.05 if slow == "loader" else 0.0
    loader = DataLoader(Images(delay=delay, clock=clock), batch_size=4)
    model = Net(delay=0.1 if slow == "model" else 0.0, clock=clock)
    report = doctor(model, loader, steps=4, warmup=1, try_changes=False, progress=False)
    assert report.bound == bound
    if slow == "loader":
        assert report.data_wait_s == pytest.approx(0.2) and report.compute_s == 0.0
        assert report.data_wait_share == 1.0 and report.loader_rate == pytest.approx(4 / 0.2)
        ranked = [f.key for f in report.findings]
        assert set(ranked[:2]) == {"num_workers_0", "loader_bound"}
        assert report.findings[0].gain == 20.0  # all of the step is the wait: the bound's cap
    else:
        assert report.data_wait_s == 0.0 and report.compute_s == pytest.approx(0.1)
        assert report.step_rate == pytest.approx(4 / 0.1)
        assert "loader_bound" not in keys(report.findings)


def test_a_loader_bound_step_on_a_full_machine_names_ray(
    clock: FakeTime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the loader sets the pace and its workers already fill the cores, the remedy is
    decoding elsewhere: on the GPU, or on a cluster's CPUs with fastload.ray."""
    import fastload.diagnosis.checks as checks

    loader = DataLoader(Images(delay=0.05, clock=clock), batch_size=4)
    report = doctor(Net(), loader, steps=4, warmup=1, try_changes=False, progress=False)
    bound = next(f for f in report.findings if f.key == "loader_bound")
    assert "fastload.ray" not in bound.fix  # no workers yet: autotune first
    monkeypatch.setattr(checks, "cpu_cores", lambda: 0)  # its workers (none) fill the cores
    report = doctor(Net(), loader, steps=4, warmup=1, try_changes=False, progress=False)
    bound = next(f for f in report.findings if f.key == "loader_bound")
    assert "fastload.ray" in bound.fix and "fill this machine's 0 cores" in bound.fix


def test_the_users_objects_are_left_as_they_were() -> None:
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), 1e-2)
    loader = DataLoader(Images(), batch_size=4)
    images, labels = first_batch(loader)
    torch.nn.functional.cross_entropy(model(images.float() / 255), labels).backward()
    optimizer.step()  # the optimizer has state, the model grads and BatchNorm statistics
    model.eval()
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    moments = {k: {n: t.clone() for n, t in v.items()} for k, v in optimizer.state.items()}
    rng = torch.get_rng_state()
    report = doctor(model, loader, optimizer, steps=3, warmup=1, progress=False)
    assert report.tried  # changes were timed, on copies
    assert not model.training
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    assert all(torch.equal(grads[n], p.grad) for n, p in model.named_parameters())
    for p, state in optimizer.state.items():
        assert all(torch.equal(moments[p][n], t) for n, t in state.items())
    assert torch.equal(torch.get_rng_state(), rng)


def test_the_report_as_json() -> None:
    loader = DataLoader(Images(), batch_size=4)
    one = doctor(Net(), loader, steps=2, warmup=0, try_changes=False, progress=False)
    two = doctor(Net(bias=False), loader, steps=2, warmup=0, try_changes=False, progress=False)
    assert isinstance(one, DoctorReport)
    a, b = json.loads(one.to_json()), json.loads(two.to_json())
    assert (
        set(a)
        == set(b)
        == {
            "batch_size",
            "bound",
            "compute_s",
            "copy_s",
            "data_wait_s",
            "data_wait_share",
            "device",
            "findings",
            "loader_rate",
            "peak_memory_bytes",
            "step_rate",
            "step_s",
            "steps",
            "tried",
        }
    )
    assert set(a["findings"][0]) == {"key", "what", "fix", "cost", "gain", "measured"}
    assert a["batch_size"] == 4 and a["steps"] == 2 and a["device"] == "cpu"
    text = str(one)
    assert "waiting for data" in text and "stem.0 -> stem.1" in text


def test_bad_arguments_are_refused() -> None:
    loader = DataLoader(Images(), batch_size=4)
    with pytest.raises(ValueError, match="steps=0 must be an int >= 1"):
        doctor(Net(), loader, steps=0)
    with pytest.raises(ValueError, match="the loader yields no batch"):
        doctor(Net(), DataLoader(Images(n=0), batch_size=4), progress=False)


def test_the_trainer_runs_it_first_and_then_trains_as_without_it(capsys) -> None:
    import fastload
    from fastload import train

    def run(doctor: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = Net()
        loader = fastload.DataLoader(
            Images(), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(3)
        )
        trainer = train.Trainer(model, train.adamw(model, 1e-2), precision="fp32", progress=False)
        trainer.fit(loader, epochs=2, doctor=doctor)
        return [p.detach().clone() for p in model.parameters()]

    plain = run(False)
    assert "fastload doctor" not in capsys.readouterr().err
    diagnosed = run(True)
    err = capsys.readouterr().err
    assert "fastload doctor: 20 steps of batch 4 on cpu" in err and "stem.0 -> stem.1" in err
    assert all(torch.equal(a, b) for a, b in zip(plain, diagnosed, strict=True))


def test_the_users_own_steps_are_checked_and_the_costs_measured() -> None:
    loader = DataLoader(Images(), batch_size=8)
    model = Net(bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    weights = {k: v.clone() for k, v in model.state_dict().items()}

    def step(batch, *, set_to_none: bool) -> None:
        images, labels = batch
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=set_to_none)

    def evaluate(batch, *, quiet: bool) -> None:
        model.eval()
        with torch.no_grad() if quiet else torch.enable_grad():
            model(batch[0])

    def diagnose(*, careful: bool):
        return doctor(
            model,
            loader,
            optimizer,
            train_step=lambda b: step(b, set_to_none=careful),
            eval_step=lambda b: evaluate(b, quiet=careful),
            steps=2,
            warmup=1,
            try_changes=False,
            progress=False,
        )

    careless = diagnose(careful=False)
    found = {f.key: f for f in careless.findings}
    zeros, grad = found["zero_grad_to_zeros"], found["eval_with_grad"]
    assert zeros.measured and zeros.gain is not None and "set_to_none=True" in zeros.cost
    assert grad.measured and grad.gain is not None and "under no_grad" in grad.cost
    assert "torch.inference_mode()" in grad.fix
    careful = diagnose(careful=True)
    assert {"zero_grad_to_zeros", "eval_with_grad"}.isdisjoint(keys(careful.findings))
    # the user's objects: weights, mode and their own zero_grad as they were
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    assert model.training and "zero_grad" not in vars(optimizer) and "zero_grad" not in vars(model)
    assert optimizer.state == {} or all(not s for s in optimizer.state.values())


@pytest.mark.gpu
def test_host_syncs_in_the_users_step_are_found_on_cuda() -> None:
    loader = DataLoader(Images(), batch_size=8)
    model = Net(bias=False).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    logged: list[float] = []

    def step(batch, *, log: bool) -> None:
        images, labels = batch
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if log:
            logged.append(loss.item())  # a sync every step

    options = dict(steps=2, warmup=1, try_changes=False, progress=False, device="cuda")
    noisy = doctor(model, loader, optimizer, train_step=lambda b: step(b, log=True), **options)
    (syncs,) = [f for f in noisy.findings if f.key == "host_syncs"]
    assert syncs.what.startswith("1 host sync(s) per step") and logged
    quiet = doctor(model, loader, optimizer, train_step=lambda b: step(b, log=False), **options)
    assert "host_syncs" not in keys(quiet.findings)
    assert torch.cuda.get_sync_debug_mode() == 0


def test_a_slow_loader_is_tried_with_the_workers_autotune_finds(
    clock: FakeTime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker count autotune finds (faked here: its search is tested in tests/autotune) is
    priced as the step's throughput with it against now."""
    from fastload.autotune import AutotuneResult
    from fastload.diagnosis import trials

    # 20 ms a sample: the loader alone gives 4 / 0.08 = 50 samples/s... with workers, 4x that
    loader = DataLoader(Images(n=64, delay=0.02, clock=clock), batch_size=4)
    monkeypatch.setattr(trials, "autotune", lambda dataset, **o: AutotuneResult(4, 4 * 50.0))
    report = doctor(
        Net(bias=False, delay=0.01, clock=clock), loader, steps=3, warmup=1, progress=False
    )
    assert report.bound == "loader" and report.loader_rate == pytest.approx(50.0)
    found = {f.key: f for f in report.findings}
    more = found["more_workers"]
    # the step takes 4 / 0.01 = 400 samples/s, so 200 from the loader is the new pace: 4x
    assert more.measured and more.gain == pytest.approx(4.0)
    assert more.fix.startswith("DataLoader(..., num_workers=4)") and "autotune" in more.cost
    assert "num_workers_0" not in found  # the measured finding replaces the stated one
    assert report.tried["more_workers"] == more.gain and loader.num_workers == 0


def test_the_prefetch_factor_autotune_finds_is_in_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Waiting workers whose batches arrive unevenly: autotune keeps the worker count and finds
    a prefetch_factor (faked here; its search is tested in tests/autotune), and the fix names it."""
    from fastload.autotune import AutotuneResult
    from fastload.diagnosis import trials

    asked = []

    def found(dataset, **options):
        asked.append(options["loader"])
        return AutotuneResult(1, 1e9, prefetch_factor=8)

    monkeypatch.setattr(trials, "autotune", found)
    # one worker, 0.2 s a batch: past its two prefetched batches, the step waits on it
    loader = DataLoader(Images(n=64, delay=0.05), batch_size=4, num_workers=1)
    report = doctor(Net(bias=False), loader, steps=6, warmup=1, progress=False)
    assert report.bound == "loader" and asked == [DataLoader]
    more = {f.key: f for f in report.findings}["more_workers"]
    assert more.fix.startswith("DataLoader(..., num_workers=1, prefetch_factor=8)")
    assert "with 1 workers and prefetch_factor 8 (autotune)" in more.cost


@pytest.mark.parametrize(("delay", "per_sample", "gain"), [(0.01, 0.0, 2.0), (0.0, 0.0025, 1.0)])
def test_a_larger_batch_is_timed_and_one_that_does_not_fit_is_left_out(
    clock: FakeTime, delay: float, per_sample: float, gain: float
) -> None:
    # a step whose time does not grow with the batch doubles its throughput with twice the
    # batch; one that grows in proportion gains nothing, and is no finding (it stays tried)
    loader = DataLoader(Images(), batch_size=4)
    model = Net(bias=False, delay=delay, per_sample=per_sample, clock=clock)
    report = doctor(model, loader, steps=2, warmup=1, progress=False)
    assert report.tried["larger_batch"] == pytest.approx(gain)
    found = {f.key: f for f in report.findings}
    assert ("larger_batch" in found) is (gain > 1)
    if "larger_batch" in found:
        assert "with a batch of 8" in found["larger_batch"].cost
        assert found["larger_batch"].fix.startswith("fastload.train.find_batch_size(")

    class Full(Net):
        """Out of memory past 4 samples, as a GPU at its limit."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.shape[0] > 4:
                raise torch.OutOfMemoryError("CUDA out of memory (made up)")
            return super().forward(x)

    full = doctor(Full(bias=False), loader, steps=2, warmup=1, progress=False)
    assert "larger_batch" not in full.tried and "channels_last" in full.tried


class _KeyedImages(Images):
    """``Images`` that take fastload's per-sample seeds, as fastload's datasets do."""

    sample_keys = True

    def __getitem__(self, i: int):
        return super().__getitem__(int(i))


def test_worker_processes_are_tried_as_threads_where_threads_mean_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fastload loader that cannot keep up is measured again with its workers as threads
    (faked here: the loader's measuring is tested in tests/autotune); one whose workers cannot
    be threads with the same meaning is not tried."""
    import fastload
    from fastload.autotune import AutotuneResult
    from fastload.diagnosis import trials

    made = []

    def measured(make, workers, seconds):
        made.append(make(workers))
        return 80.0

    monkeypatch.setattr(trials, "autotune", lambda dataset, **o: AutotuneResult(1, 1.0))
    monkeypatch.setattr(trials, "measure_loader", measured)
    dataset = _KeyedImages(n=64, delay=0.05)  # one worker, 0.2 s a batch: the loader's pace
    loader = fastload.DataLoader(dataset, batch_size=4, num_workers=1, seeding="sample")
    report = doctor(Net(bias=False), loader, steps=6, warmup=1, progress=False)
    assert report.bound == "loader" and [m.worker_type for m in made] == ["thread"]
    assert made[0].num_workers == 1 and made[0].dataset is dataset
    threads = {f.key: f for f in report.findings}["thread_workers"]
    before = min(report.loader_rate, report.step_rate)
    assert threads.gain == pytest.approx(min(80.0, report.step_rate) / before, abs=0.01)
    assert threads.fix.startswith("DataLoader(..., worker_type='thread')")
    assert "-> 80 images/s with 1 worker threads" in threads.cost

    made.clear()
    refused = fastload.DataLoader(
        dataset, batch_size=4, num_workers=1, seeding="sample", worker_init_fn=print
    )
    report = doctor(Net(bias=False), refused, steps=6, warmup=1, progress=False)
    assert report.bound == "loader" and "thread_workers" not in report.tried and not made


def test_jpegs_without_restart_markers_are_named_for_random_crops(
    tmp_path, require_backend
) -> None:
    """A random crop by the region backend from JPEGs without restart markers: doctor names
    ``pack --pixels seekable``; not for a pack made so, a whole-image plan or another backend."""
    import fastload
    from fastload import transforms as T
    from fastload.synthetic import make_image_folder

    require_backend("region")
    folder = make_image_folder(tmp_path / "set", images=4, classes=2)
    cpu = torch.device("cpu")

    def found(dataset) -> set[str]:
        loader = fastload.DataLoader(dataset, batch_size=2, num_workers=1)
        return keys(static_findings(Net(bias=False), loader, None, device=cpu))

    crop = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip()])
    assert "jpegs_without_restarts" in found(fastload.ImageFolder(folder, crop, backend="region"))
    fastload.pack(folder, tmp_path / "seekable", pixels="seekable", progress=False)
    fastload.pack(folder, tmp_path / "files", progress=False)
    assert "jpegs_without_restarts" in found(
        fastload.ImageShards(tmp_path / "files", crop, backend="region")
    )
    for dataset in (
        fastload.ImageShards(tmp_path / "seekable", crop, backend="region"),
        fastload.ImageFolder(folder, T.Compose([T.Resize(40), T.CenterCrop(32)]), backend="region"),
        fastload.ImageFolder(folder, crop, backend="turbojpeg"),
    ):
        assert "jpegs_without_restarts" not in found(dataset)
