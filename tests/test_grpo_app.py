"""The GRPO app end to end: run directory contract, accounting, staleness bounds, bad input."""

import json

import pytest
import torch
import transformers

from apps.grpo.subprocess_run import run_app

METRIC_KEYS = {
    "step", "reward_mean", "policy_age_mean", "policy_age_max", "samples_trained",
    "dropped_stale", "gen_tokens_per_s", "trainer_idle_frac", "weight_sync_ms", "wall_s",
}


def assert_accounting(summary: dict) -> None:
    parts = ("trained", "dropped_stale", "dropped_other", "left_in_buffer", "in_flight")
    assert summary["generated"] == sum(summary[p] for p in parts), summary
    assert summary["accounting_ok"] is True


def test_short_async_run_writes_the_run_directory_contract(tmp_path):
    run = run_app(tmp_path / "run", "steps=4", "max_policy_age=1", "trainer.procs=2")
    assert run.returncode == 0, run.output
    metrics = run.metrics
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    for record in metrics:
        assert METRIC_KEYS <= record.keys()
        assert record["policy_age_max"] <= 1
    assert metrics[-1]["samples_trained"] == 4 * 16 * 8
    summary = run.summary
    assert_accounting(summary)
    assert summary["trained"] == 4 * 16 * 8
    assert "max_policy_age: 1" in (run.run_dir / "config.yaml").read_text()
    assert f"run dir: {run.run_dir}" in run.output
    # The final policy loads in transformers and differs from the initial weights.
    final = transformers.AutoModelForCausalLM.from_pretrained(str(run.run_dir / "final_model"))
    initial = transformers.AutoModelForCausalLM.from_pretrained(str(run.run_dir / "initial_model"))
    tokens = torch.tensor([[11, 3, 1, 4, 13]])
    with torch.no_grad():
        assert not torch.allclose(final(tokens).logits, initial(tokens).logits)


def test_max_policy_age_zero_makes_progress_on_policy(tmp_path):
    run = run_app(tmp_path / "run", "steps=3", "max_policy_age=0")
    assert run.returncode == 0, run.output
    assert [m["policy_age_max"] for m in run.metrics] == [0, 0, 0]
    assert_accounting(run.summary)


def test_sync_mode_trains_on_its_own_fresh_batches(tmp_path):
    run = run_app(tmp_path / "run", "mode=sync", "steps=3", "max_policy_age=0")
    assert run.returncode == 0, run.output
    assert [m["policy_age_max"] for m in run.metrics] == [0, 0, 0]
    summary = run.summary
    assert_accounting(summary)
    assert summary["dropped_stale"] == 0 and summary["generated"] == summary["trained"]


@pytest.mark.parametrize(
    "override, named",
    [
        ("no_such_key=1", "no_such_key"),
        ("trainer.lrr=0.1", "lrr"),
        ("steps=many", "steps"),
        ("mode=fast", "mode"),
        ("task.name=dataset task.dataset=/no/such/prompts.jsonl", "/no/such/prompts.jsonl"),
        ("model.path=/no/such/model", "/no/such/model"),
    ],
)
def test_bad_input_fails_fast_naming_the_culprit(tmp_path, override, named):
    run = run_app(tmp_path / "run", *override.split(), timeout=120)
    assert run.returncode != 0
    assert named in run.output
    assert "Traceback" not in run.output


def test_dataset_prompts_with_custom_reward(tmp_path):
    data = tmp_path / "prompts.jsonl"
    rows = [{"prompt": f"{a}{b}", "answer": str(max(a, b))} for a in range(10) for b in range(10)]
    data.write_text("\n".join(json.dumps(r) for r in rows))
    run = run_app(
        tmp_path / "run",
        "steps=2",
        "task.name=dataset",
        f"task.dataset={data}",
        "task.reward_fn=forge_async.data.tasks:exact_match",
    )
    assert run.returncode == 0, run.output
    assert len(run.metrics) == 2
    assert "task: dataset:prompts.jsonl" in run.output
