"""Out-of-range config values fail at start with one ConfigError naming the key, the value and the range."""

import re

import pytest
from hydra import compose, initialize_config_dir

from apps.grpo.main import CONFIG_DIR, load_config  # importing it registers the config schema
from apps.grpo.subprocess_run import run_app
from forge_async.config import GRPOConfig
from forge_async.errors import ConfigError


def app_config(*overrides: str) -> GRPOConfig:
    """configs/grpo.yaml with `overrides`, composed and checked as `python -m apps.grpo` does."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return load_config(compose(config_name="grpo", overrides=list(overrides)))


BAD_VALUES = {
    "sampling.temperature=-1": "sampling.temperature=-1.0: must be >= 0 (0 = greedy)",
    "sampling.temperature=inf": "sampling.temperature=inf: must be a finite number >= 0",
    "sampling.top_p=1.5": "sampling.top_p=1.5: must be in (0, 1]",
    "sampling.top_p=0": "sampling.top_p=0.0: must be in (0, 1]",
    "sampling.max_tokens=0": "sampling.max_tokens=0: must be >= 1",
    "trainer.lr=-0.1": "trainer.lr=-0.1: must be > 0",
    "trainer.lr=nan": "trainer.lr=nan: must be a finite number > 0",
    "trainer.lr=inf": "trainer.lr=inf: must be a finite number > 0",
    "trainer.beta1=1": "trainer.beta1=1.0: must be in [0, 1)",
    "trainer.beta2=-0.5": "trainer.beta2=-0.5: must be in [0, 1)",
    "trainer.eps=0": "trainer.eps=0.0: must be > 0",
    "trainer.weight_decay=-1": "trainer.weight_decay=-1.0: must be >= 0",
    "trainer.grad_clip=0": "trainer.grad_clip=0.0: must be > 0",
    "trainer.is_cap=-1": "trainer.is_cap=-1.0: must be > 0 or null (null = no correction)",
    "trainer.is_cap=nan": "trainer.is_cap=nan: must be a finite number > 0 or null (null = no correction)",
    "trainer.threads=0": "trainer.threads=0: must be >= 1",
    "trainer.procs=0": "trainer.procs=0: must be >= 1",
    "generator.count=0": "generator.count=0: must be >= 1",
    "generator.max_restarts=-1": "generator.max_restarts=-1: must be >= 0",
    "generator.max_model_len=0": "generator.max_model_len=0: must be >= 1 or null",
    "generator.seed=-1": "generator.seed=-1: must be in [0, 4294967295]",
    "generator.gpu_memory_utilization=1.5": "generator.gpu_memory_utilization=1.5: must be in (0, 1]",
    "generator.kv_cache_gib=0": "generator.kv_cache_gib=0.0: must be > 0 or null (null = vLLM's default)",
    "generator.swap_mode=never": "generator.swap_mode='never': one of inflight, drain",
    "model.tiny.family=gpt2": "model.tiny.family='gpt2': one of qwen3, llama",
    "model.tiny.dim=0": "model.tiny.dim=0: must be >= 1",
    "model.tiny.n_heads=0": "model.tiny.n_heads=0: must be >= 1",
    "model.tiny.head_dim=7": "model.tiny.head_dim=7: must be even",
    "model.tiny.max_seq_len=-64": "model.tiny.max_seq_len=-64: must be >= 1",
    "checkpoint.every_steps=-1": "checkpoint.every_steps=-1: must be >= 0 (0 = off)",
    "checkpoint.keep=0": "checkpoint.keep=0: must be >= 1",
    "group_size=1": "group_size=1: must be >= 2 (group-relative advantages need at least two completions",
    "steps=0": "steps=0: must be >= 1",
    "max_policy_age=-1": "max_policy_age=-1: must be >= 0",
    "target_reward=nan": "target_reward=nan: must be a finite number",
    "prompts_per_rollout=32": "prompts_per_rollout=32 must be <= prompts_per_step=16",
}


@pytest.mark.parametrize("override", BAD_VALUES)
def test_an_out_of_range_value_is_named_with_what_the_key_accepts(override):
    with pytest.raises(ConfigError, match=f"^{re.escape(BAD_VALUES[override])}"):
        app_config(override)


@pytest.mark.parametrize(
    "overrides",
    [
        (),
        ("sampling.temperature=0", "sampling.top_p=1", "trainer.is_cap=null", "generator.kv_cache_gib=null"),
        ("group_size=2", "checkpoint.every_steps=0", "trainer.beta1=0", "generator.max_model_len=64"),
    ],
)
def test_values_at_the_edges_of_their_ranges_are_accepted(overrides):
    app_config(*overrides)


def test_the_app_exits_2_naming_the_key_before_any_proc_starts(tmp_path):
    run = run_app(tmp_path / "run", "sampling.top_p=1.5", timeout=60)
    assert run.returncode == 2, run.output
    assert "error: sampling.top_p=1.5: must be in (0, 1]" in run.output
    assert "Traceback" not in run.output
    assert "spawning" not in run.output and not (run.run_dir / "initial_model").exists()
