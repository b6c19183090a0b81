"""The trainer's peak memory as the batch grows, with and without micro-batches.

    .venv/bin/python -m benchmarks.components.trainer_memory
    .venv/bin/python -m benchmarks.components.trainer_memory --rows 8 --length 512 --micro-batch-tokens 4096

One real trainer (the TorchTitan model, one proc: one float32 rank trains it as a plain module,
models/parallelize.py) per configuration, fresh
each time, takes one optimizer step on `rows` x 1, 2 and 4 episodes of `length`
tokens, once with the whole batch in one forward and once with
`trainer.micro_batch_tokens`. Printed: the proc's peak memory (on CPU the peak
resident set of the proc; on GPU the peak allocated by torch during the step) and
its growth from 1x to 4x. The model is made locally (4 layers, dim 256). With --json, the
same in the report's shape (benchmarks/harness/results.py).
"""

import argparse
import asyncio
import random
import tempfile
from pathlib import Path

import forge_async  # noqa: F401  (process-wide runtime settings)
from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command
from forge_async.learning.config import TrainerConfig
from forge_async.learning.spec import LearnerSpec
from forge_async.data.episode import Completion, Episode
from forge_async.handles import meshes
from forge_async.models.hf_checkpoint import Checkpoint
from forge_async.models.config import TinyModelConfig
from forge_async.models.tiny import create_tiny_checkpoint
from forge_async.models.tokenizer import build_digit_tokenizer
from forge_async.weights.config import WeightsConfig

PROMPT_TOKENS = 16
FACTORS = (1, 2, 4)  # the batch, in multiples of --rows


def episodes(rows: int, length: int, seed: int = 0) -> list[Episode]:
    """`rows` random digit sequences of `length` tokens, a 16-token prompt and the rest response."""
    rng = random.Random(seed)
    batch = []
    for row in range(rows):
        tokens = [rng.randrange(10) for _ in range(length)]
        response = length - PROMPT_TOKENS
        completion = Completion(
            prompt_ids=tokens[:PROMPT_TOKENS],
            token_ids=tokens[PROMPT_TOKENS:],
            logprobs=[-2.3] * response,
            versions=[0] * response,
            text="",
            finish_reason="length",
        )
        batch.append(Episode(completion, reward=float(row % 2), advantage=float(row % 2) - 0.5))
    return batch


def peak_gib(checkpoint: Checkpoint, config: TrainerConfig, batch: list[Episode]) -> float:
    pad_id = build_digit_tokenizer().pad_token_id
    procs, trainer = asyncio.run(
        meshes.spawn_trainer(LearnerSpec(str(checkpoint.path), config, pad_id), WeightsConfig("torchstore"))
    )
    try:
        return trainer.train_step.call_one(batch).get().metrics["train/peak_memory_gib"]
    finally:
        asyncio.run(meshes.stop_all(procs))


def result_of(peaks: dict[tuple[int, int | None], float], rows: int, length: int, micro: int) -> BenchmarkResult:
    """peaks: (batch factor, micro-batch tokens or None) -> peak GiB."""
    result = BenchmarkResult("trainer_memory", "Trainer memory", this_command())
    budgets = {"whole batch": None, f"micro-batches of {micro} tokens": micro}
    for name, budget in budgets.items():
        result.figure(f"{name}: 4x batch -> peak", growth(peaks, budget), "x")
        result.figure(f"{name}: peak at {rows * 4} x {length}", peaks[4, budget], "GiB")
    table = [
        [f"{rows * factor} x {length}", *(peaks[factor, budget] for budget in budgets.values())] for factor in FACTORS
    ]
    result.tables.append(Table("Peak memory of the trainer proc (GiB)", ["batch", *budgets], table))
    lines = [
        Line(name, [rows * f for f in FACTORS], [peaks[f, budget] for f in FACTORS]) for name, budget in budgets.items()
    ]
    result.series.append(
        Series(f"Trainer peak memory against the batch ({length}-token episodes)", "episodes", "GiB", lines)
    )
    return result


def growth(peaks: dict[tuple[int, int | None], float], budget: int | None) -> float:
    """Peak at 4x the batch over the peak at 1x."""
    return peaks[4, budget] / peaks[1, budget]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8, help="episodes at 1x")
    parser.add_argument("--length", type=int, default=512, help="tokens per episode")
    parser.add_argument("--micro-batch-tokens", type=int, default=4096)
    add_json_argument(parser)
    args = parser.parse_args()
    shape = TinyModelConfig(dim=256, n_layers=4, n_heads=4, head_dim=64, ffn_dim=1024, max_seq_len=args.length)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = Checkpoint.open(create_tiny_checkpoint(Path(tmp) / "model", shape))
        print(f"{'batch':>14} | {'whole batch':>12} | {f'micro {args.micro_batch_tokens} tok':>16}")
        peaks = {}
        for factor in FACTORS:
            batch = episodes(args.rows * factor, args.length)
            for budget in (None, args.micro_batch_tokens):
                peaks[factor, budget] = peak_gib(
                    checkpoint, TrainerConfig(micro_batch_tokens=budget, lr_schedule="constant"), batch
                )
            rows = f"{len(batch)} x {args.length}"
            print(f"{rows:>14} | {peaks[factor, None]:>8.2f} GiB | {peaks[factor, args.micro_batch_tokens]:>12.2f} GiB")
        for budget, name in ((None, "whole batch"), (args.micro_batch_tokens, "micro-batched")):
            print(f"{name}: 4x batch -> peak x{growth(peaks, budget):.2f}")
    if args.json:
        result_of(peaks, args.rows, args.length, args.micro_batch_tokens).write(args.json)


if __name__ == "__main__":
    main()
