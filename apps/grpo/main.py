"""GRPO on Monarch actor meshes: configure, build the meshes, run the loop, report.

    python -m apps.grpo                                  # CPU default: tiny model, max-digit task
    python -m apps.grpo mode=sync steps=50 trainer.procs=2 max_policy_age=0

Every key of configs/grpo.yaml can be overridden; see docs/configuration.md.
"""

import asyncio
import sys
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

import forge_async  # noqa: F401  (process-wide runtime settings)
from forge_async.config import GRPOConfig
from forge_async.errors import ConfigError
from forge_async.data.tasks import TaskError, build_task
from forge_async.launch import meshes
from forge_async.loop import GRPOLoop
from forge_async.models import Checkpoint, CheckpointError, create_tiny_checkpoint
from forge_async.weights import store
from forge_async.weights.shared_memory import SharedMemoryChannel

ConfigStore.instance().store(name="grpo_schema", node=GRPOConfig)
# An absolute path: under `python -m`, Hydra would read a relative one as a module name.
CONFIG_DIR = str(Path(__file__).resolve().parents[2] / "configs")

USER_ERRORS = (ConfigError, CheckpointError, TaskError)


def prepare_checkpoint(config: GRPOConfig, run_dir: Path) -> Checkpoint:
    if config.model.path is not None:
        return Checkpoint.open(config.model.path)
    return Checkpoint.open(create_tiny_checkpoint(run_dir / "initial_model", config.model.tiny))


async def run(config: GRPOConfig, run_dir: Path) -> dict:
    from transformers import AutoTokenizer

    checkpoint = prepare_checkpoint(config, run_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint.path))
    task = build_task(config.task, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    print(f"run dir: {run_dir}\nmodel: {checkpoint.path} | task: {task.name} | mode: {config.mode}")

    config.weights = config.weights.resolved()
    await store.start_store()
    all_procs = []  # everything spawned so far, stopped however the run ends
    try:
        print(
            f"spawning trainer x{config.trainer.procs}, generators x{config.generator.count}, "
            "replay buffer ..."
        )
        trainer_procs, trainer = await meshes.spawn_trainer(
            checkpoint, config.trainer, pad_id, config.weights
        )
        all_procs.append(trainer_procs)
        spawned = await asyncio.gather(
            *(
                meshes.spawn_generator(checkpoint, config.generator, config.weights, i)
                for i in range(config.generator.count)
            )
        )
        all_procs.extend(procs for procs, _, _ in spawned)
        buffer_procs, buffer = await meshes.spawn_replay_buffer(
            config.max_policy_age, config.buffer_capacity
        )
        all_procs.append(buffer_procs)
        starts = ", ".join(f"{t['engine_start_s']:.1f}s" for _, _, t in spawned)
        print(f"meshes up: trainer x{config.trainer.procs}, generators x{len(spawned)} (engine start {starts})")
        loop = GRPOLoop(config, run_dir, task, trainer, [g for _, g, _ in spawned], buffer)
        return await loop.run()
    finally:
        await meshes.stop_all(*all_procs)
        await store.stop_store()
        SharedMemoryChannel(config.weights.channel_dir).remove()


def report(summary: dict) -> None:
    reached = summary["target_reached"]
    target = (
        f"reached {summary['target_reward']} at step {reached['step']} ({reached['wall_s']:.0f}s)"
        if reached
        else f"target {summary['target_reward']} not reached"
    )
    print(
        f"\n== {summary['mode']} GRPO: {summary['steps']} steps in {summary['wall_s']:.0f}s ==\n"
        f"reward {summary['reward_first']:.2f} -> {summary['reward_last']:.2f} ({target})\n"
        f"samples: generated {summary['generated']} = trained {summary['trained']}"
        f" + dropped stale {summary['dropped_stale']} + dropped other {summary['dropped_other']}"
        f" + left in buffer {summary['left_in_buffer']} + in flight {summary['in_flight']}"
        f" ({'adds up' if summary['accounting_ok'] else 'DOES NOT ADD UP'})\n"
        f"trainer idle {100 * summary['trainer_idle_frac']:.0f}%,"
        f" generator idle {100 * summary['generator_idle_frac']:.0f}%,"
        f" {summary['samples_per_s']:.0f} samples/s\n"
        f"run dir: {summary['run_dir']} (metrics.jsonl, summary.json, config.yaml, final_model/)"
    )


@hydra.main(version_base=None, config_path=CONFIG_DIR, config_name="grpo")
def main(cfg: DictConfig) -> None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        config: GRPOConfig = OmegaConf.to_object(cfg)
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        summary = asyncio.run(run(config, run_dir))
    except USER_ERRORS as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    finally:
        from monarch.actor import shutdown_context

        shutdown_context().get(timeout=30)
    report(summary)
