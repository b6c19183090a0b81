"""`resume=RUN_DIR`: continue a run with the config it was started with.

Only keys that do not change the experiment may be overridden on resume (how
long it runs, how it saves itself, how many crashes it survives, where its
meshes run, how weights travel, whether vLLM compiles); any other
override fails, naming the key, since the checkpoint was made under the saved
value.
"""

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from forge_async.errors import ConfigError

RESUMABLE_KEYS = (
    "steps",
    "target_reward",
    "checkpoint.every_steps",
    "checkpoint.keep",
    "checkpoint.stop_grace_s",
    "stall.max_dropped_episodes",
    "stall.report_every_s",
    "generator.max_restarts",
    "weights.transport",
    "weights.cross_host",
    "weights.link_timeout_s",
    "placement.trainer_hosts",
    "placement.generator_hosts",
    "placement.trainer_gpus",
    "placement.generator_gpus",
    "placement.share_gpus",
    "generator.enforce_eager",
    "generator.compile",
    "verbose",
    "logging.tensorboard",
    "logging.wandb",
    "logging.wandb_project",
    "trace.enabled",
)
SAVED_CONFIG = "config.yaml"


def resume_dir_from_argv(argv: list[str]) -> str | None:
    """The RUN_DIR of a `resume=RUN_DIR` command-line override, if there is one."""
    for arg in argv:
        if arg.startswith("resume="):
            return arg.split("=", 1)[1] or None
    return None


def resumed_config(run_dir: Path, overrides: list[str], current: DictConfig) -> DictConfig:
    """The config saved in `run_dir`, with the resumable keys of `overrides` taken from `current`."""
    saved_file = run_dir / SAVED_CONFIG
    if not saved_file.is_file():
        raise ConfigError(f"resume={run_dir}: no {SAVED_CONFIG} there; not a forge_async run directory")
    changed = []
    for override in overrides:
        key = override.lstrip("+~").split("=", 1)[0]
        if key == "resume" or key.startswith("hydra."):
            continue
        if key not in RESUMABLE_KEYS:
            raise ConfigError(
                f"{key}: cannot be changed when resuming (the checkpoint was made with the saved "
                f"value); keys that can: {', '.join(RESUMABLE_KEYS)}"
            )
        changed.append(key)
    saved = _renamed_keys(OmegaConf.load(saved_file))
    for key in changed:
        OmegaConf.update(saved, key, OmegaConf.select(current, key))
    saved.resume = str(run_dir)
    return saved


def _renamed_keys(saved: DictConfig) -> DictConfig:
    """A config saved by an earlier version, with keys that moved since under their new names."""
    trainer = saved.get("trainer") or {}
    if "is_cap" in trainer:  # trainer.is_cap became importance.cap
        OmegaConf.update(saved, "importance.cap", trainer.pop("is_cap"), force_add=True)
    return saved
