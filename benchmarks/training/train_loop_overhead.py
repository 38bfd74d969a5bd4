"""What fastload.train.Trainer's loop costs over a hand-written minimal loop, same run.

Both train the same tiny model (an MLP) with AdamW in fp32 on the same in-memory batches; the
hand-written loop is zero_grad / forward / loss / backward / step and nothing else. Rounds
alternate between the two, and the median time per epoch of each is compared. The Trainer does
more per step (weights the loss by the batch size, divides the gradients, reads the loss once,
checks it is finite, keeps statistics): this measures what that costs.

Run: python benchmarks/training/train_loop_overhead.py [--rounds 15] [--steps 200] [--width 256]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from fastload import train

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=200, help="steps per epoch")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--width", type=int, default=256, help="hidden width of the MLP")
    results.add_argument(parser)
    args = parser.parse_args()
    torch.manual_seed(0)
    batches = [
        (torch.randn(args.batch_size, 64), torch.randint(0, 10, (args.batch_size,)))
        for _ in range(args.steps)
    ]

    def model() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Linear(64, args.width),
            torch.nn.ReLU(),
            torch.nn.Linear(args.width, args.width),
            torch.nn.ReLU(),
            torch.nn.Linear(args.width, 10),
        )

    plain_model = model()
    plain_opt = torch.optim.AdamW(plain_model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    def plain_epoch() -> float:
        start = time.perf_counter()
        for x, y in batches:
            plain_opt.zero_grad(set_to_none=True)
            loss = loss_fn(plain_model(x), y)
            loss.backward()
            plain_opt.step()
        return time.perf_counter() - start

    ours = model()
    trainer = train.Trainer(
        ours, torch.optim.AdamW(ours.parameters(), lr=1e-3), precision="fp32", progress=False
    )

    def trainer_epoch() -> float:
        start = time.perf_counter()
        trainer.train_epoch(batches)
        return time.perf_counter() - start

    plain_epoch(), trainer_epoch()  # warm-up
    times = results.interleaved({"plain": plain_epoch, "fastload": trainer_epoch}, args.rounds)
    plain, fastload_times = times["plain"], times["fastload"]
    a, b = statistics.median(plain), statistics.median(fastload_times)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; MLP width {args.width}, "
        f"batch {args.batch_size}, {args.steps} steps per epoch, {args.rounds} rounds"
    )
    print(f"  hand-written loop  {a * 1000 / args.steps:8.3f} ms/step")
    print(f"  fastload Trainer   {b * 1000 / args.steps:8.3f} ms/step")
    print(f"  overhead: {b / a - 1:+.1%}  (target < 3 %)")
    steps = [args.steps / t for t in plain]  # steps/s, so that a ratio above 1 is faster
    results.write(
        args.json,
        benchmark="train_loop_overhead",
        title="fastload's Trainer against a hand-written loop, same MLP and batches",
        baseline="hand-written loop",
        rows=[
            results.row("hand-written loop", steps, unit="steps/s"),
            results.row(
                "fastload Trainer",
                [args.steps / t for t in fastload_times],
                steps,
                unit="steps/s",
                target=0.97,
            ),
        ],
        settings={k: getattr(args, k) for k in ("rounds", "steps", "batch_size", "width")},
    )


if __name__ == "__main__":
    main()
