"""Compose forge_async's actor meshes by hand, without the GRPO app.

Spawns a trainer mesh (FSDP2 over `--trainer-procs` ranks), one vLLM generator
and a replay buffer, then runs a few on-policy GRPO steps on the built-in
max-digit task: generate groups, score them, buffer them, train, push the new
weights through torchstore, and load them into the generator.

    python docs/examples/compose_meshes.py --steps 3 --trainer-procs 2

Each mesh's procs write their output (vLLM's and TorchTitan's start-up lines, warnings)
to LOG_DIR/<mesh>.log, as the apps' do, so the console shows only what the script prints.
"""

import argparse
import asyncio
import random
import tempfile
from pathlib import Path

import forge_async  # noqa: F401  (process-wide runtime settings)
from forge_async.generation.config import GeneratorConfig, SamplingConfig
from forge_async.learning.config import TrainerConfig
from forge_async.learning.spec import LearnerSpec
from forge_async.tasks.config import TaskConfig
from forge_async.tasks.registry import build_task
from forge_async.handles import meshes
from forge_async.models.hf_checkpoint import Checkpoint
from forge_async.models.tiny import create_tiny_checkpoint
from forge_async.models.tokenizer import build_digit_tokenizer
from forge_async.scoring.config import ScoringConfig, default_scorers
from forge_async.scoring.tier import build_tier
from forge_async.weights import store
from forge_async.weights.config import WeightsConfig


async def compose(steps: int, trainer_procs: int, workdir: Path, log_dir: Path) -> None:
    tokenizer = build_digit_tokenizer()
    checkpoint = Checkpoint.open(create_tiny_checkpoint(workdir / "model"))
    sampling = SamplingConfig(max_tokens=3)
    prompt_budget = checkpoint.shape.max_seq_len - sampling.max_tokens
    task = build_task(TaskConfig(name="max_digit", num_digits=3), tokenizer, prompt_budget)
    scoring = build_tier(default_scorers(), ScoringConfig(), task)  # the task's own reward
    # torchstore transport: weights go through the store by name and version, and the
    # generator loads a version when told to (the shm transport would let it pick
    # new versions up by itself).
    weights = WeightsConfig(transport="torchstore")

    await store.start_store()
    trainer_config = TrainerConfig(procs=trainer_procs, lr_schedule="constant")  # a decay would need lr_total_steps
    learner = LearnerSpec(str(checkpoint.path), trainer_config, tokenizer.pad_token_id)
    trainer_procs_mesh, trainer = await meshes.spawn_trainer(learner, weights, log_dir=log_dir)
    generator_procs, generator, engine_start_s = await meshes.spawn_generator(
        checkpoint,
        GeneratorConfig(kv_cache_gib=0.25),
        weights,
        log_dir=log_dir,  # a tiny model needs little KV
    )
    buffer_procs, buffer = await meshes.spawn_replay_buffer(max_policy_age=0, capacity=1024, log_dir=log_dir)
    print(f"meshes up (engine start {engine_start_s:.1f}s); proc logs in {log_dir}")

    rng = random.Random(0)
    try:
        for step in range(1, steps + 1):
            prompts = [task.sample(rng) for _ in range(8)]
            groups = await generator.generate.call_one([p.token_ids for p in prompts], sampling, 8)
            episodes, _ = await scoring.score(prompts, groups, first_group_id=0)
            await buffer.add.call_one(episodes)
            version = await generator.get_version.call_one()
            batch = await buffer.sample.call_one(64, version)
            result = (await trainer.train_step.call(batch)).item(procs=0)
            await trainer.push_weights.call()
            loaded = await generator.load_version.call_one(result["version"])
            await store.delete_versions_before(loaded.version)  # no one needs older ones
            reward = sum(e.reward for e in batch) / len(batch)
            print(
                f"step {step}: reward {reward:.2f}, loss {result['train/loss']:.4f}, "
                f"trainer v{result['version']}, generator now v{loaded.version}"
            )
        print("stored policy versions:", await store.stored_versions())
    finally:
        await meshes.stop_all(trainer_procs_mesh, generator_procs, buffer_procs)
        await store.stop_store()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--trainer-procs", type=int, default=1)
    parser.add_argument("--log-dir", type=Path, default=Path("runs/compose_meshes_logs"), help="the procs' output")
    args = parser.parse_args()
    args.log_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as workdir:
        asyncio.run(compose(args.steps, args.trainer_procs, Path(workdir), args.log_dir))
    from monarch.actor import shutdown_context

    shutdown_context().get(timeout=30)


if __name__ == "__main__":
    main()
