"""The GRPO app end to end: run directory contract, accounting, staleness bounds, bad input."""

import json
import re
import subprocess
import sys

import pytest
import torch
import transformers
from matplotlib.image import imread
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from forge_async.cli.subprocess_run import run_app
from tests.support.app_runs import assert_accounting
from tests.support.doc_blocks import assert_console_as_documented
from tests.support.parity import assert_vllm_matches_transformers

pytestmark = pytest.mark.e2e

METRIC_KEYS = {
    "step",
    "reward/mean",
    "reward/smoothed",
    "policy/age_mean",
    "policy/age_max",
    "samples/trained",
    "samples/dropped_stale",
    "generator/tokens_per_s",
    "generator/idle_frac",
    "generator/running_mean",
    "generator/under_half_frac",
    "train/idle_frac",
    "train/entropy",
    "train/loss",
    "is/mismatch_kl",
    "completion/length_mean",
    "weights/sync_ms",
    "weights/bytes",
    "time/wall_s",
}


def test_short_async_run_writes_the_run_directory_contract(tmp_path):
    run = run_app(
        tmp_path / "run",
        "steps=4",
        "max_policy_age=1",
        "trainer.procs=2",
        "logging.tensorboard=true",
        "logging.wandb=offline",
        "target_reward=0.0",  # reached at step 1: the report's line reads as the docs' 400-step run's
    )
    assert run.returncode == 0, run.output
    assert_console_is_our_own(run)
    assert_console_as_documented(run.output, "grpo")  # docs/quickstart.md, evaluation.md, checkpoints.md
    metrics = run.metrics
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    for record in metrics:
        assert METRIC_KEYS <= record.keys()
        assert record["policy/age_max"] <= 1
    assert metrics[-1]["samples/trained"] == 4 * 16 * 8
    # The default's reference KL runs in the trainer: 0 against the initial policy, then > 0.
    assert metrics[0]["kl/reference"] < 1e-9 < metrics[-1]["kl/reference"]
    summary = run.summary
    assert_accounting(summary)
    assert summary["trained"] == 4 * 16 * 8
    by_len = summary["dropped_stale_by_len"]  # every episode that reached the buffer, in a length quartile
    assert sum(q["added"] for q in by_len["quartiles"]) == summary["generated"]
    assert sum(q["dropped_stale"] for q in by_len["quartiles"]) == summary["dropped_stale"]
    assert "max_policy_age: 1" in (run.run_dir / "config.yaml").read_text()
    assert f"run dir: {run.run_dir}" in run.output
    # The final policy loads in transformers and differs from the initial weights.
    final = transformers.AutoModelForCausalLM.from_pretrained(str(run.run_dir / "final_model"))
    initial = transformers.AutoModelForCausalLM.from_pretrained(str(run.run_dir / "initial_model"))
    tokens = torch.tensor([[11, 3, 1, 4, 13]])
    with torch.no_grad():
        assert not torch.allclose(final(tokens).logits, initial(tokens).logits)
    # ... and in vLLM, whose logprobs for a fixed sequence match transformers'.
    assert_vllm_matches_transformers(run.run_dir / "final_model", final)
    assert not (run.run_dir / "final_adapter").exists()  # LoRA runs only
    # The sinks and the plots hold every step.
    assert tensorboard_steps(run.run_dir / "tensorboard", "reward/mean") == [1, 2, 3, 4]
    assert wandb_records(run.run_dir).count(b"train/entropy") >= 4  # a history row per step
    assert imread(run.run_dir / "plots.png").shape[1] >= 800
    assert_trace_has_every_actor(run)
    assert_generator_busy_as_the_trace_counts_it(run)


def assert_generator_busy_as_the_trace_counts_it(run) -> None:
    """summary.json's generator busy time is the union of the generator's decode and swap spans
    (a tight bound: the swaps made between runs of engine steps, a few ms, must be counted);
    its start-up spans come before the run's clock starts."""
    from forge_async.observability.span_names import START_UP_LANE
    from forge_async.observability.step_budget import read_trace, spans_by_lane, union_length

    lanes = spans_by_lane(read_trace(run.run_dir))
    generator = [named for (track, lane), named in lanes.items() if track == "generator 0" and lane != START_UP_LANE]
    spans = [(s, e) for named in generator for _, s, e in named]
    traced_s = union_length(spans) / 1e6
    summary = run.summary
    busy_s = (1 - summary["generator_idle_frac"]) * summary["wall_s"]
    assert traced_s > 0 and busy_s == pytest.approx(traced_s, rel=0.002, abs=0.001), (busy_s, traced_s)


def assert_trace_has_every_actor(run) -> None:
    """trace.json is trace-event JSON with one track per actor, and the budget tool reads it."""
    events = json.loads((run.run_dir / "trace.json").read_text())
    tracks = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(tracks.values()) == ["controller", "generator 0", "replay buffer", "trainer rank 0", "trainer rank 1"]
    spans = [e for e in events if e["ph"] == "X"]
    assert all(e["dur"] >= 0 and e["ts"] > 0 for e in spans)
    names = {(tracks[e["pid"]], e["name"]) for e in spans}
    for track, name in [
        ("trainer rank 0", "forward"),
        ("trainer rank 1", "backward"),
        ("trainer rank 0", "publish weights"),
        ("generator 0", "decode"),
        ("controller", "held back by admission"),
        ("replay buffer", "sample"),
        ("trainer rank 1", "start-up imports"),
        ("generator 0", "launch"),
        ("controller", "meshes start"),
        ("controller", "role start"),
    ]:
        assert (track, name) in names, (track, name)
    assert sum(1 for e in spans if e["name"] == "step") == 4
    printed = subprocess.run(
        [sys.executable, "-m", "forge_async.observability.step_budget", str(run.run_dir)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "4 steady-state steps of 4" in printed and "trainer rank 1 | main | forward" in printed, printed
    assert re.search(r"bubble .* +\d+\.\d +\d+%", printed), printed


def assert_console_is_our_own(run) -> None:
    """No third-party line on the console; they are in RUN_DIR/logs."""
    for line in run.output.splitlines():
        assert not re.search(r"warn|\[W\d|WARNING|Traceback|it/s\]", line, re.IGNORECASE), line
    assert "WARNING" in (run.run_dir / "logs" / "generator0.log").read_text()  # vLLM's, kept
    assert run.output.count("meshes up") == 1 and "step    4/4 |" in run.output


def tensorboard_steps(log_dir, tag: str) -> list[int]:
    events = EventAccumulator(str(log_dir))
    events.Reload()
    return [event.step for event in events.Scalars(tag)]


def wandb_records(run_dir) -> bytes:
    """The offline W&B run's record file (protobuf records; metric names appear as text)."""
    (offline_run,) = (run_dir / "wandb").glob("offline-run-*")
    (records,) = offline_run.glob("*.wandb")
    return records.read_bytes()


@pytest.mark.parametrize("max_age", [0, 2])
def test_admission_control_keeps_every_sample_trainable(tmp_path, max_age):
    # At max_policy_age=0 with dynamic sampling: groups dropped for zero reward variance must
    # free their admission slots, or the run would stall.
    dynamic = ("filter.zero_variance_groups=true",) if max_age == 0 else ()
    run = run_app(tmp_path / "run", "steps=6", f"max_policy_age={max_age}", *dynamic)
    assert run.returncode == 0, run.output
    assert len(run.metrics) == 6  # progress, no stall at max_policy_age=0
    assert max(m["policy/age_max"] for m in run.metrics) <= max_age
    summary = run.summary
    assert_accounting(summary)
    assert summary["trained"] == 6 * 16 * 8  # every step a full batch
    if dynamic:  # near-random rewards at the start: many groups with all-equal rewards
        assert summary["dropped_zero_variance"] > 0
        assert summary["dropped_by_reason"]["zero_variance"] == summary["dropped_zero_variance"]
        assert run.metrics[-1]["samples/dropped_zero_variance"] == summary["dropped_zero_variance"]
    assert summary["dropped_stale"] == 0
    assert summary["gen_paused_for_admission_s"] > 0  # generation waited instead
    assert summary["stored_versions"] == [5, 6]  # shm channel: two slots, nothing older


def test_sync_mode_over_torchstore_trains_on_fresh_batches(tmp_path):
    run = run_app(
        tmp_path / "run",
        "mode=sync",
        "steps=3",
        "max_policy_age=0",
        "weights.transport=torchstore",
        # the loss variants reach the trainer (their arithmetic: test_loss_variants.py)
        "loss.aggregation=sequence_mean",
        "loss.scale_by_std=false",
        "loss.clip_low=0.2",
        "loss.clip_high=0.28",
        "importance.cap=null",
        "filter.zero_variance_groups=true",  # sync mode refills the batch after dropping groups
    )
    assert run.returncode == 0, run.output
    assert [m["policy/age_max"] for m in run.metrics] == [0, 0, 0]
    assert [m["train/clip_frac"] for m in run.metrics] == [0.0, 0.0, 0.0]  # on-policy: ratio 1, nothing cut
    saved = OmegaConf.load(run.run_dir / "config.yaml")
    assert saved.loss.max_tokens == saved.sampling.max_tokens == 3  # null resolved to the generation budget
    summary = run.summary
    assert_accounting(summary)
    assert summary["trained"] == 3 * 16 * 8 and summary["dropped_zero_variance"] > 0
    assert summary["dropped_stale"] == 0
    assert summary["generated"] == summary["trained"] + summary["dropped_zero_variance"]
    assert summary["stored_versions"] == [3]  # versions every generator moved past are deleted


@pytest.mark.parametrize(
    "override, named",
    [
        ("no_such_key=1", "no_such_key"),
        ("trainer.lrr=0.1", "lrr"),
        ("steps=many", "steps"),
        ("mode=fast", "mode"),
        ("task.name=dataset task.dataset=/no/such/prompts.jsonl", "/no/such/prompts.jsonl"),
        ("model.path=/no/such/model", "/no/such/model"),
        ("weights.transport=carrier_pigeon", "weights.transport"),
        ("prompts_per_rollout=32", "prompts_per_rollout"),
        ("placement.generator_hosts=[1]", "placement.generator_hosts"),
        ("checkpoint.keep=0", "checkpoint.keep"),
        ("loss.aggregation=median", "loss.aggregation"),
        ("loss.clip_low=0.2 loss.clip_high=0.28", "importance.cap=null"),
        ("loss.clip_high=0.28", "loss.clip_low"),
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
    rows.append({"prompt": "7" * 70, "answer": "7"})  # leaves no room in the 64-token context
    data.write_text("\n".join(json.dumps(r) for r in rows))
    run = run_app(
        tmp_path / "run",
        "steps=2",
        "task.name=dataset",
        f"task.dataset={data}",
        "task.reward_fn=forge_async.tasks.rewards:exact_match",
        "task.skip_bad_rows=true",
        "eval.prompts=10",  # held out of the 100 rows (the default 64 would be more than half)
    )
    assert run.returncode == 0, run.output
    assert len(run.metrics) == 2
    assert "task dataset:prompts.jsonl" in run.output
    assert "dataset: kept 100 of 101 rows (skipped: too_long 1)" in run.output
    assert run.summary["skipped_rows"]["too_long"] == 1
    assert [(e["eval/version"], e["eval/prompts"]) for e in run.evaluations] == [(0, 10), (2, 10)]


def test_a_reward_function_failing_on_the_first_batch_ends_the_run_with_one_line(tmp_path):
    """math:sqrt takes one argument, a reward function two: every score raises, and with the default
    scoring.on_error=fail the run stops before its first step, saying why in one line."""
    data = tmp_path / "prompts.jsonl"
    data.write_text(
        "\n".join(json.dumps({"prompt": f"{a}{b}", "answer": str(a)}) for a in range(10) for b in range(10))
    )
    run = run_app(
        tmp_path / "run",
        "steps=3",
        "task.name=dataset",
        f"task.dataset={data}",
        "task.reward_fn=math:sqrt",
        "eval.prompts=10",
        timeout=120,
    )
    assert run.returncode == 1, run.output
    assert "Traceback" not in run.output and "TypeError: unsupported format" not in run.output, run.output
    assert "no step trained" in run.output
    stopped = [line for line in run.output.splitlines() if line.startswith("stopped early:")]
    assert len(stopped) == 1 and "math:sqrt" in stopped[0], run.output
    assert run.summary["steps"] == 0 and "math:sqrt" in run.summary["failure"]
