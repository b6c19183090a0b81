"""What a whole-run checkpoint costs the trainer: write time, size, and restore time.

For the tiny default model and a ~100M-parameter Qwen3 shape, on `--procs` FSDP
ranks: one training step (so AdamW's state exists), then `Trainer.save_state`
(each rank writes its own DCP shard), then a fresh trainer mesh restores it with
`Trainer.load_state`. The controller's part of a checkpoint (buffer episodes,
RNG states) is small next to this; the app prints each checkpoint's total time.

    .venv/bin/python -m benchmarks.components.checkpoint_cost [--procs 1] [--models tiny 100m] [--json PATH]
"""

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import forge_async  # noqa: F401  (process-wide runtime settings)
from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command
from forge_async.learning.config import TrainerConfig
from forge_async.learning.spec import LearnerSpec
from forge_async.data.episode import Completion, Episode
from forge_async.handles import meshes
from forge_async.models.hf_checkpoint import Checkpoint
from forge_async.models.tiny import create_tiny_checkpoint
from forge_async.models.config import TinyModelConfig
from forge_async.models.tokenizer import build_digit_tokenizer
from forge_async.weights.config import WeightsConfig

SHAPES = {
    "tiny": TinyModelConfig(),
    "100m": TinyModelConfig(dim=768, n_layers=11, n_heads=12, head_dim=64, ffn_dim=3072),
}


def batch(size: int = 16) -> list[Episode]:
    episodes = []
    for i in range(size):
        completion = Completion([11, 3, 1, 4, 13], [4, 12], [-2.0, -2.0], [0, 0], "4", "stop")
        episodes.append(Episode(completion, float(i % 2), 1.0 if i % 2 else -1.0, group_id=i // 8))
    return episodes


def directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


async def measure(name: str, procs: int, workdir: Path) -> dict:
    checkpoint = Checkpoint.open(create_tiny_checkpoint(workdir / name / "model", SHAPES[name]))
    pad_id = build_digit_tokenizer().pad_token_id
    config, weights = TrainerConfig(procs=procs, lr_schedule="constant"), WeightsConfig("torchstore")
    params = sum(t.numel() for t in checkpoint.load_hf_state_dict().values())
    mesh, trainer = await meshes.spawn_trainer(LearnerSpec(str(checkpoint.path), config, pad_id), weights)
    await trainer.train_step.call(batch())
    target = workdir / name / "ckpt"
    start = time.perf_counter()
    await trainer.save_state.call(str(target))
    save_s = time.perf_counter() - start
    await meshes.stop_all(mesh)
    mesh, trainer = await meshes.spawn_trainer(LearnerSpec(str(checkpoint.path), config, pad_id), weights)
    start = time.perf_counter()
    await trainer.load_state.call(str(target))
    load_s = time.perf_counter() - start
    await meshes.stop_all(mesh)
    return {"params": params, "save_s": save_s, "load_s": load_s, "bytes": directory_bytes(target)}


COLUMNS = ("model", "params", "size MiB", "bytes/param", "save s", "restore s")
WIDTHS = (6, 12, 9, 11, 7, 9)


def cells(name: str, r: dict) -> list[str]:
    """One model's row, as printed."""
    return [
        name,
        f"{r['params']:,}",
        f"{r['bytes'] / 2**20:.1f}",
        f"{r['bytes'] / r['params']:.1f}",
        f"{r['save_s']:.2f}",
        f"{r['load_s']:.2f}",
    ]


def aligned(row: list[str]) -> str:
    return " ".join(cell.rjust(width) for cell, width in zip(row, WIDTHS))


def result_of(measured: dict[str, dict], procs: int) -> BenchmarkResult:
    """`measured`: model name -> measure()'s figures."""
    result = BenchmarkResult("checkpoint_cost", "Checkpoint cost", this_command())
    for name, r in measured.items():
        result.figure(f"save, {name} model, {procs} rank(s)", r["save_s"], "s")
        result.figure(f"restore, {name} model, {procs} rank(s)", r["load_s"], "s")
        result.figure(f"checkpoint bytes per parameter, {name} model", r["bytes"] / r["params"], "B")
    rows = [cells(name, r) for name, r in measured.items()]
    result.tables.append(Table(f"Trainer checkpoint, {procs} rank(s): model + AdamW state (DCP)", list(COLUMNS), rows))
    lines = [
        Line(label, list(measured), [r[key] for r in measured.values()])
        for label, key in (("save", "save_s"), ("restore", "load_s"))
    ]
    result.series.append(Series(f"Checkpoint save and restore, {procs} rank(s)", "model", "s", lines, bars=True))
    return result


async def main(models: list[str], procs: int) -> dict[str, dict]:
    """Model name -> its figures, each printed as it is measured."""
    measured = {}
    with tempfile.TemporaryDirectory() as workdir:
        print(f"trainer checkpoint, {procs} rank(s): model + AdamW state (DCP)")
        print(aligned(list(COLUMNS)))
        for name in models:
            measured[name] = await measure(name, procs, Path(workdir))
            print(aligned(cells(name, measured[name])), flush=True)
    return measured


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=sorted(SHAPES), default=["tiny", "100m"])
    parser.add_argument("--procs", type=int, default=1)
    add_json_argument(parser)
    args = parser.parse_args()
    measured = asyncio.run(main(args.models, args.procs))
    if args.json:
        result_of(measured, args.procs).write(args.json)
    from monarch.actor import shutdown_context

    shutdown_context().get(timeout=30)
