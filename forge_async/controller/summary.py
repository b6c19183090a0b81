"""A GRPO run's summary.json: what it did, with every generated sample accounted for
(data/accounting.py), from its record and what its actors know at its end. The file is a
RunSummary (observability/run_summary.py, where each key is described).
"""

from pathlib import Path

from forge_async.controller.config import GRPOConfig
from forge_async.handles.run import RunHandles
from forge_async.controller.rival_loop import RivalLoop
from forge_async.observability.record import RunRecord
from forge_async.observability.run_summary import RunSummary, TargetReached
from forge_async.weights.outcomes import WeightReceiver
from forge_async.weights.shared_memory import SharedMemoryChannel


async def write_summary(
    run_dir: Path,
    config: GRPOConfig,
    record: RunRecord,
    handles: RunHandles,
    generation_paused_s: float,
    skipped_rows: dict[str, int],
    final_model: str | None,
    weight_receivers: list[WeightReceiver],
    rival: RivalLoop | None = None,
) -> dict:
    """RUN_DIR/summary.json from the run's record and what its actors know now; returns its
    object (cli/app.py's; `RunSummary.from_json` reads it typed).

    `generation_paused_s`: admission control's hold on generation; `skipped_rows`: dataset
    rows skipped at load, by reason; `weight_receivers`: weights/delivery.py's report; `rival`: a
    rival seat's learning."""
    assert handles.buffer is not None  # a GRPO run has its replay buffer
    buffer = await handles.buffer.stats()
    wall = record.wall_s()
    generators = [g for g in await handles.generators.stats() if g is not None]
    pauses = [g.swap_pauses for g in generators]
    swaps = sum(p.count for p in pauses)
    _, reward_first, reward_last = record.reward_ends.means()
    # workers are drained into the buffer before this point: nothing in flight; lost: taken for a
    # step that a failed trainer never finished
    account = buffer.account(record.trained, lost=buffer.sampled - record.trained)
    summary = RunSummary(
        mode=config.mode,
        **record.ending(wall),
        resumable=config.resumable,
        generated=account.generated,
        trained=account.trained,
        dropped_stale=account.dropped_stale,
        dropped_other=account.dropped_other,
        dropped_by_reason=buffer.dropped_by_reason,
        not_started=sum(buffer.not_started.values()),
        not_started_by_reason=buffer.not_started,
        dropped_zero_variance=buffer.dropped_by_reason.get("zero_variance", 0),
        kept_zero_variance=buffer.kept_zero_variance,
        dropped_stale_by_len=buffer.dropped_stale_by_len,
        left_in_buffer=account.left_in_buffer,
        in_flight=account.in_flight,
        lost_in_failed_step=account.lost,
        reward_first=reward_first,
        reward_last=reward_last,
        eval_first=record.eval_first,
        eval_last=record.eval_last,
        # a game's rewards (env.seats: a win, a loss) have no target to reach
        target_reward=None if config.env.seats else config.target_reward,
        target_reached=(
            None if config.env.seats or record.target_reached is None else TargetReached(**record.target_reached)
        ),
        samples_per_s=record.trained / wall,
        trainer_idle_frac=record.trainer_idle_s / wall,
        generator_idle_frac=1 - sum(g.busy_s for g in generators) / (wall * max(1, len(generators))),
        gen_paused_for_admission_s=generation_paused_s,
        generator_restarts=handles.generators.restarts,
        generator_samples=handles.generators.returned,
        generators_lost=handles.generators.losses,
        generators_taken_back=handles.generators.taken_back,
        lost_requests=handles.generators.lost_requests,
        checkpoint_s=record.checkpoint_s,
        inflight_swaps=swaps,
        swap_pause_ms_mean=sum(p.total_ms for p in pauses) / swaps if swaps else None,
        swap_pause_ms_max=max(p.max_ms for p in pauses if p.count) if swaps else None,
        resumed_requests=sum(g.resumed_requests for g in generators),
        resumed_prefix_tokens=sum(g.resumed_prefix_tokens for g in generators),
        stored_versions=await _stored_versions(config),
        torchstore_versions=await _torchstore_versions() if handles.uses_torchstore else [],
        weight_receivers=weight_receivers,
        placement=handles.placement,
        skipped_rows=skipped_rows,
        rival=None if rival is None else await rival.summary(),
        accounting_ok=account.balanced,
        final_model=final_model,
        run_dir=str(run_dir),
    )
    summary.write(run_dir)
    return summary.to_json()


async def _stored_versions(config: GRPOConfig) -> list[int]:
    """Policy versions still held by the weight transport (hygiene: only those in use)."""
    channel_dir = config.weights.channel_dir
    if config.weights.transport == "shm":
        assert channel_dir is not None  # the shm transport has its channel (handles/meshes.py checks)
        return SharedMemoryChannel(channel_dir).versions()
    return await _torchstore_versions()


async def _torchstore_versions() -> list[int]:
    from forge_async.weights import store  # heavy to import: only where torchstore is used

    return await store.stored_versions()
