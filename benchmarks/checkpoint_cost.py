"""What a whole-run checkpoint costs the trainer: write time, size, and restore time.

For the tiny default model and a ~100M-parameter Qwen3 shape, on `--procs` FSDP
ranks: one training step (so AdamW's state exists), then `Trainer.save_state`
(each rank writes its own DCP shard), then a fresh trainer mesh restores it with
`Trainer.load_state`. The controller's part of a checkpoint (buffer episodes,
RNG states) is small next to this; the app prints each checkpoint's total time.

    .venv/bin/python -m benchmarks.checkpoint_cost [--procs 1] [--models tiny 100m]
"""

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import forge_async  # noqa: F401  (process-wide runtime settings)
from forge_async.actors.trainer_config import TrainerConfig
from forge_async.data.episode import Completion, Episode
from forge_async.launch import meshes
from forge_async.models.checkpoint import Checkpoint
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
    config, weights = TrainerConfig(procs=procs), WeightsConfig("torchstore")
    params = sum(t.numel() for t in checkpoint.load_hf_state_dict().values())
    mesh, trainer = await meshes.spawn_trainer(checkpoint, config, pad_id, weights)
    await trainer.train_step.call(batch())
    target = workdir / name / "ckpt"
    start = time.perf_counter()
    await trainer.save_state.call(str(target))
    save_s = time.perf_counter() - start
    await meshes.stop_all(mesh)
    mesh, trainer = await meshes.spawn_trainer(checkpoint, config, pad_id, weights)
    start = time.perf_counter()
    await trainer.load_state.call(str(target))
    load_s = time.perf_counter() - start
    await meshes.stop_all(mesh)
    return {"params": params, "save_s": save_s, "load_s": load_s, "bytes": directory_bytes(target)}


async def main(models: list[str], procs: int) -> None:
    with tempfile.TemporaryDirectory() as workdir:
        print(f"trainer checkpoint, {procs} rank(s): model + AdamW state (DCP)")
        print(f"{'model':>6} {'params':>12} {'size MiB':>9} {'bytes/param':>11} {'save s':>7} {'restore s':>9}")
        for name in models:
            r = await measure(name, procs, Path(workdir))
            print(
                f"{name:>6} {r['params']:>12,} {r['bytes'] / 2**20:>9.1f} {r['bytes'] / r['params']:>11.1f} "
                f"{r['save_s']:>7.2f} {r['load_s']:>9.2f}",
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=sorted(SHAPES), default=["tiny", "100m"])
    parser.add_argument("--procs", type=int, default=1)
    args = parser.parse_args()
    asyncio.run(main(args.models, args.procs))
    from monarch.actor import shutdown_context

    shutdown_context().get(timeout=30)
