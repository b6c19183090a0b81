"""Compose forge_async's actor meshes by hand, without the GRPO app.

Spawns a trainer mesh (FSDP2 over --trainer-procs ranks), one vLLM generator and a replay
buffer, then runs a few on-policy GRPO steps on the built-in max-digit task with a tiny model
made here: generate groups, score them, buffer them, train, publish the new weights (shared
memory on this host) and load them into the generator. Each mesh's procs write their output to
LOG_DIR/<mesh>.log. Every proc and the weight channel are gone when it exits, Ctrl-C included.

    python docs/examples/compose_meshes.py --steps 3 --trainer-procs 2
"""

import argparse
import asyncio
import random
import sys
import tempfile
from pathlib import Path

from forge_async.compose import (
    Checkpoint,
    Composition,
    DropCounts,
    GeneratorConfig,
    LearnerSpec,
    SamplingConfig,
    ScoringConfig,
    TaskConfig,
    TrainerConfig,
    UserError,
    WeightsConfig,
    build_digit_tokenizer,
    build_task,
    build_tier,
    create_tiny_checkpoint,
    default_scorers,
)


async def compose(steps: int, trainer_procs: int, workdir: Path, log_dir: Path) -> None:
    tokenizer = build_digit_tokenizer()  # the tiny model's vocabulary: digits and a few specials
    checkpoint = Checkpoint.open(create_tiny_checkpoint(workdir / "model"))  # random, seeded
    pad_id = tokenizer.pad_token_id
    sampling = SamplingConfig(max_tokens=3)
    prompt_budget = checkpoint.shape.max_seq_len - sampling.max_tokens
    task = build_task(TaskConfig(name="max_digit", num_digits=3), tokenizer, prompt_budget)
    scoring = build_tier(default_scorers(), ScoringConfig(), task)  # the task's own reward
    trainer_config = TrainerConfig(procs=trainer_procs, lr_schedule="constant")  # a decay needs lr_total_steps
    learner = LearnerSpec(str(checkpoint.path), trainer_config, pad_id)  # what the trainer trains

    async with Composition(WeightsConfig(), log_dir=log_dir) as meshes:  # stops all of it at the end
        trainer = await meshes.spawn_trainer(learner)
        generator = await meshes.spawn_generator(checkpoint, GeneratorConfig(kv_cache_gib=0.25))  # tiny: little KV
        buffer = await meshes.spawn_replay_buffer(max_policy_age=0, capacity=1024)
        print(f"meshes up (engine start {meshes.engine_start_s[0]:.1f}s); proc logs in {log_dir}")

        rng, groups_so_far = random.Random(0), 0
        for step in range(1, steps + 1):
            prompts = [task.sample(rng) for _ in range(8)]
            groups = await generator.generate.call_one([p.token_ids for p in prompts], sampling, 8)
            episodes, unscored = await scoring.score(prompts, groups, first_group_id=groups_so_far)
            groups_so_far += len(prompts)
            await buffer.add.call_one(episodes, dropped=DropCounts.unscored(unscored))
            version = await generator.get_version.call_one()
            batch = await buffer.sample.call_one(len(episodes), trainer_version=version)
            trained = (await trainer.train_step.call(batch)).item(procs=0)  # every rank takes the batch
            await trainer.push_weights.call()  # every rank writes its shard into the channel
            loaded = await generator.load_version.call_one(trained.version)
            reward = sum(e.reward for e in batch) / len(batch)
            print(
                f"step {step}: reward {reward:.2f}, loss {trained.metrics['train/loss']:.4f}, "
                f"trainer v{trained.version}, generator now v{loaded.version}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--trainer-procs", type=int, default=1)
    parser.add_argument("--log-dir", type=Path, default=Path("runs/compose_meshes_logs"), help="the procs' output")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        try:
            asyncio.run(compose(args.steps, args.trainer_procs, Path(workdir), args.log_dir))
        except UserError as err:  # bad input, named in one line
            sys.exit(f"error: {err}")
        except KeyboardInterrupt:  # Ctrl-C: the composition has stopped every proc by now
            print("interrupted", file=sys.stderr)
            sys.exit(130)


if __name__ == "__main__":
    main()
