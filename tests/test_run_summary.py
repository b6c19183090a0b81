"""summary.json is written from the typed summaries with the keys, in the order, that the docs and
the benchmarks read, and reads back as the same object; the console's report reads it typed."""

import asyncio
import json
from types import SimpleNamespace

import pytest

from forge_async.cli.report import report_grpo, report_sft
from forge_async.controller import sft_summary, summary
from forge_async.data.buffer import BufferStats
from forge_async.generation.stats import GeneratorStats, SwapPauses
from forge_async.observability.record import RunRecord, StepEnds
from forge_async.observability.run_summary import RunSummary, SFTSummary, TakenBack, TargetReached
from forge_async.weights.outcomes import WeightReceiver

pytestmark = pytest.mark.unit

# What docs/quickstart.md, docs/sft.md and benchmarks/ read: a key added goes at its place here too.
GRPO_KEYS = [
    "mode", "steps", "wall_s", "interrupted", "stop_reason", "cut_short", "failure", "resumable",
    "generated", "trained", "dropped_stale", "dropped_other", "dropped_by_reason", "not_started",
    "not_started_by_reason", "dropped_zero_variance", "kept_zero_variance", "dropped_stale_by_len",
    "left_in_buffer", "in_flight", "lost_in_failed_step", "reward_first", "reward_last", "eval_first",
    "eval_last", "target_reward", "target_reached", "samples_per_s", "trainer_idle_frac",
    "generator_idle_frac", "gen_paused_for_admission_s", "generator_restarts", "generator_samples",
    "generators_lost", "generators_taken_back", "lost_requests", "checkpoint_s", "inflight_swaps",
    "swap_pause_ms_mean", "swap_pause_ms_max", "resumed_requests", "resumed_prefix_tokens",
    "stored_versions", "torchstore_versions", "weight_receivers", "placement", "skipped_rows", "rival",
    "accounting_ok", "final_model", "run_dir",
]  # fmt: skip
SFT_KEYS = [
    "objective", "steps", "wall_s", "interrupted", "stop_reason", "cut_short", "failure", "resumable",
    "trained", "trained_tokens", "skipped_demonstrations", "loss_window", "loss_first", "loss_last",
    "eval_first", "eval_last", "samples_per_s", "tokens_per_s", "checkpoint_s", "generator_restarts",
    "placement", "skipped_rows", "final_model", "grpo_command", "run_dir",
]  # fmt: skip


class Buffer:
    async def stats(self) -> BufferStats:
        return BufferStats(
            size=2,
            added=12,
            sampled=8,
            dropped_stale=1,
            dropped_other=1,
            dropped_by_reason={"stale": 1, "zero_variance": 1, "env_error": 3},
            kept_zero_variance=0,
            dropped_stale_by_len={"quartiles": [], "longest_to_shortest": None},
            not_started={"env_error": 3},
        )


class Generators:
    restarts, lost_requests, returned, losses = 1, 4, [7, 5], ["node 1 lost"]
    taken_back = [TakenBack(generator=1, proc="pid 9 on node 1: host1, 10.0.0.2", samples_before=3)]

    async def stats(self) -> list[GeneratorStats | None]:
        busy = GeneratorStats(
            4, 3.0, SwapPauses(2, 10.0, 7.0), resumed_requests=1, resumed_prefix_tokens=9, preempting_resets=0
        )
        return [busy, None]  # the second one lost: left out


def grpo_summary(tmp_path) -> dict:
    record = RunRecord(step=3, trained=8, target_reached={"step": 2, "wall_s": 1.5})
    for reward in (0.25, 0.5, 1.0):
        record.reward_ends.append(reward)
    config = SimpleNamespace(
        mode="async",
        resumable=True,
        target_reward=0.9,
        env=SimpleNamespace(seats=[]),  # a task with a pass threshold: its target is reported
        weights=SimpleNamespace(transport="shm", channel_dir=str(tmp_path)),
    )
    handles = SimpleNamespace(
        buffer=Buffer(),
        generators=Generators(),
        uses_torchstore=False,
        placement={"trainer": [0], "generators": [0, 1]},
    )
    receivers = [WeightReceiver(version=3, versions_skipped=1, link_failures=0, lost=False, taken_back=1)]
    return asyncio.run(
        summary.write_summary(tmp_path, config, record, handles, 0.5, {"bad_json": 2}, "/m", receivers)  # type: ignore[arg-type]
    )


def test_the_grpo_summary_keeps_its_keys_and_reads_back_typed(tmp_path):
    written = grpo_summary(tmp_path)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert list(on_disk) == GRPO_KEYS and on_disk == written
    assert on_disk["target_reached"] == {"step": 2, "wall_s": 1.5}
    assert on_disk["weight_receivers"] == [
        {"version": 3, "versions_skipped": 1, "link_failures": 0, "lost": False, "taken_back": 1}
    ]
    read = RunSummary.read(tmp_path)
    assert read == RunSummary.from_json(written) and read.to_json() == on_disk
    assert read.target_reached == TargetReached(step=2, wall_s=1.5)
    assert read.generators_taken_back[0].samples_before == 3 and read.weight_receivers[0].taken_back == 1
    # 12 generated = 8 trained + 1 stale + 1 other + 2 held; the 3 not started are outside it
    assert (read.accounting_ok, read.lost_in_failed_step, read.not_started) == (True, 0, 3)
    assert (read.inflight_swaps, read.swap_pause_ms_mean, read.swap_pause_ms_max) == (2, 5.0, 7.0)
    assert (read.resumed_requests, read.resumed_prefix_tokens, read.dropped_zero_variance) == (1, 9, 1)


def test_a_summary_names_the_keys_it_lacks_and_leaves_out_keys_of_no_field(tmp_path):
    written = grpo_summary(tmp_path)
    assert RunSummary.from_json({**written, "added_later": 1}) == RunSummary.from_json(written)
    del written["rival"], written["run_dir"]
    with pytest.raises(ValueError, match="lacks rival, run_dir"):
        RunSummary.from_json(written)


def test_the_report_reads_the_summary_typed(tmp_path, capsys):
    written = grpo_summary(tmp_path)
    report_grpo({**written, "failure": "trainer lost"}, "apps.grpo", "run")
    out = capsys.readouterr().out
    assert "reward 0.25 -> 1.00 (reached 0.9 at step 2 (2s))" in out
    assert "samples: generated 12 = trained 8 + dropped stale 1 + dropped other 1 + left in buffer 2" in out
    assert "(adds up)" in out and "not started (dropped before reaching a generator" in out
    assert "stopped early: trainer lost" in out and f"-m apps.grpo resume={tmp_path}" in out


def test_the_sft_summary_keeps_its_keys_and_reads_back_typed(tmp_path, capsys):
    record = RunRecord(step=2, trained=16)
    loop = SimpleNamespace(
        record=record,
        demonstrations=SimpleNamespace(tokens=48, skipped={"too_long": 1}),
        loss_ends=StepEnds([2.0, 1.0]),
    )
    handles = SimpleNamespace(generators=Generators(), placement={"trainer": [0], "generators": [0]})
    config = SimpleNamespace(resumable=True)  # what it reads without a final model
    written = sft_summary.write_summary(tmp_path, config, loop, handles, {}, None)  # type: ignore[arg-type]
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert list(on_disk) == SFT_KEYS and on_disk == written
    read = SFTSummary.read(tmp_path)
    assert (read.objective, read.loss_first, read.loss_last, read.grpo_command) == ("sft", 2.0, 1.0, None)
    report_sft(written, "apps.sft", "supervised fine-tuning")
    out = capsys.readouterr().out
    assert "loss 2.000 -> 1.000" in out and "demonstrations skipped: {'too_long': 1}" in out
