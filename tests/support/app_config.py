"""An app's config composed in the test process, as `python -m apps.grpo` composes it."""

from hydra import compose, initialize_config_dir

import apps.grpo.main  # noqa: F401  (registers the config schema)
from forge_async.cli.app import CONFIG_DIR, load_config
from forge_async.controller.config import GRPOConfig


def app_config(*overrides: str, config_name: str = "grpo") -> GRPOConfig:
    """configs/CONFIG_NAME.yaml with `overrides`, composed and checked as `python -m apps.grpo` does."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return load_config(compose(config_name=config_name, overrides=list(overrides)))
