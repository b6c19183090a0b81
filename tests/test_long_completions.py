"""The trainer's real-model settings in one short app run: 256-token completions
(configs/grpo_long.yaml) in micro-batches, bfloat16 on both sides, a tiny Llama,
activation checkpointing, LR warmup then cosine decay."""

import json
import math

import pytest

from forge_async.cli.subprocess_run import run_app

pytestmark = pytest.mark.e2e

STEPS = 4


def test_long_completions_train_in_micro_batches_in_bf16_on_llama(tmp_path):
    run = run_app(
        tmp_path / "run",
        "--config-name=grpo_long",
        f"steps={STEPS}",
        "prompts_per_step=2",
        "prompts_per_rollout=2",
        "model.tiny.family=llama",
        "trainer.dtype=bfloat16",
        "trainer.activation_checkpointing=full",
        "trainer.lr_schedule=cosine",
        "trainer.warmup_steps=2",
    )
    assert run.returncode == 0, run.output
    metrics = run.metrics
    assert [m["step"] for m in metrics] == list(range(1, STEPS + 1))
    batch = 2 * 4  # prompts_per_step x group_size
    for m in metrics:
        assert m["train/response_tokens"] >= 256 * batch  # sampling.min_tokens=256
        assert math.isfinite(m["train/loss"]) and m["train/grad_norm"] > 0
    # TorchTitan's schedule: warmup over 2 steps (lr/2, lr), one step at lr, then the cosine
    # decay over the remaining steps (the default's last half), half-way from lr down to the
    # default's lr/10 at the 4th of 4.
    lr = [m["train/lr"] for m in metrics]
    assert lr[:3] == [0.5e-3, 1e-3, 1e-3] and abs(lr[3] - 0.55e-3) < 1e-12
    # 8 rows of up to 516 tokens under a 2064-token budget: 2 micro-batches of 4 rows per step.
    events = json.loads((run.run_dir / "trace.json").read_text())
    assert sum(e["name"] == "forward" for e in events if e["ph"] == "X") == 2 * STEPS
    # Memory follows the micro-batch: the trainer's peak does not grow from step to step.
    peaks = [m["train/peak_memory_gib"] for m in metrics]
    assert peaks[-1] < 1.1 * peaks[0]
    saved = (run.run_dir / "config.yaml").read_text()
    assert "dtype: bfloat16" in saved.split("generator:")[1]  # the generator followed the trainer
    final = json.loads((run.run_dir / "final_model" / "config.json").read_text())
    assert final["architectures"] == ["LlamaForCausalLM"]
