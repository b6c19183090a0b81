"""`resume=RUN_DIR`: continue a run with the config it was started with.

Only keys that do not change the experiment may be overridden on resume (how
long it runs, how it saves itself, how many crashes it survives, where its
meshes run, how weights travel, whether vLLM compiles): those whose field is
marked `resumable` (forge_async/config/keys.py). Any other override fails,
naming the key, since the checkpoint was made under the saved value.
"""

import dataclasses
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from forge_async.config.keys import resumable_keys
from forge_async.controller.config import GRPOConfig
from forge_async.errors import ConfigError

SAVED_CONFIG = "config.yaml"


def resume_dir_from_argv(argv: list[str]) -> str | None:
    """The RUN_DIR of a `resume=RUN_DIR` command-line override, if there is one."""
    for arg in argv:
        if arg.startswith("resume="):
            return arg.split("=", 1)[1] or None
    return None


def resumed_config(run_dir: Path, overrides: list[str], current: DictConfig) -> DictConfig:
    """The config saved in `run_dir`, with the resumable keys of `overrides` taken from `current`
    (composed against its app's schema; an untyped one is read as GRPO's)."""
    saved_file = run_dir / SAVED_CONFIG
    if not saved_file.is_file():
        raise ConfigError(f"resume={run_dir}: no {SAVED_CONFIG} there; not a forge_async run directory")
    schema = OmegaConf.get_type(current)
    resumable = resumable_keys(schema if dataclasses.is_dataclass(schema) else GRPOConfig)
    changed = []
    for override in overrides:
        key = override.lstrip("+~").split("=", 1)[0]
        if key == "resume" or key.startswith("hydra."):
            continue
        if key not in resumable:
            raise ConfigError(
                f"{key}: cannot be changed when resuming (the checkpoint was made with the saved "
                f"value); keys that can: {', '.join(resumable)}"
            )
        changed.append(key)
    loaded = OmegaConf.load(saved_file)
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"resume={run_dir}: its {SAVED_CONFIG} is not a mapping of keys; not a forge_async run's")
    saved = _renamed_keys(loaded)
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
