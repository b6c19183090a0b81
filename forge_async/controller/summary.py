"""summary.json: what a run did, with every generated sample accounted for.

    generated = trained + dropped_stale + dropped_other + left_in_buffer + in_flight
                + lost_in_failed_step

`generated` counts episodes that reached the replay buffer, over the whole run
(a resumed run continues the counters of its checkpoint). Drops are also given
by reason (`dropped_by_reason`: stale, overflow, buffer_lost, zero_variance, scorer_error,
env_error, ...). Episodes dropped before their first model turn (an environment's reset
failed, no session came free) never reached a generator: they are `not_started` (with
`not_started_by_reason`), outside `generated` and the identity; `dropped_by_reason`
counts them with the rest.
"""

import json
from pathlib import Path

from forge_async.controller.config import GRPOConfig
from forge_async.handles.run import RunHandles
from forge_async.observability.record import RunRecord
from forge_async.observability.outputs import replace_text
from forge_async.weights.shared_memory import SharedMemoryChannel


async def write_summary(
    run_dir: Path,
    config: GRPOConfig,
    record: RunRecord,
    handles: RunHandles,
    generation_paused_s: float,
    skipped_rows: dict[str, int],
    final_model: str | None,
    weight_receivers: list[dict[str, int]],
) -> dict:
    """RUN_DIR/summary.json from the run's record and what its actors know now; returns it.

    `generation_paused_s`: admission control's hold on generation; `skipped_rows`: dataset
    rows skipped at load, by reason; `weight_receivers`: weights/delivery.py's report."""
    buffer = await handles.buffer.stats()
    wall = record.wall_s()
    generators = [g for g in await handles.generators.stats() if g]
    pauses = [g["swap_pauses"] for g in generators]
    swaps = sum(p["count"] for p in pauses)
    _, reward_first, reward_last = record.reward_ends.means()
    summary = {
        "mode": config.mode,
        "steps": record.step,
        "wall_s": wall,
        "interrupted": record.stop_reason is not None,
        "stop_reason": record.stop_reason,
        # what a stop past checkpoint.stop_grace_s abandoned or did not save; [] when nothing was
        "cut_short": record.cut_short,
        "failure": record.failure,
        "resumable": config.resumable,  # resume=RUN_DIR can continue it (not with a rival)
        "generated": buffer.added,
        "trained": record.trained,
        "dropped_stale": buffer.dropped_stale,
        "dropped_other": buffer.dropped_other,
        "dropped_by_reason": buffer.dropped_by_reason,
        "not_started": sum(buffer.not_started.values()),  # dropped before reaching a generator: not generated
        "not_started_by_reason": buffer.not_started,
        "dropped_zero_variance": buffer.dropped_by_reason.get("zero_variance", 0),  # part of dropped_other
        # episodes of groups with equal rewards trained on: over filter.max_oversampling
        "kept_zero_variance": buffer.kept_zero_variance,
        # per completion-length quartile, and the longest's drop rate over the shortest's (docs/staleness.md)
        "dropped_stale_by_len": buffer.dropped_stale_by_len,
        "left_in_buffer": buffer.size,
        "in_flight": 0,  # workers are drained into the buffer before this point
        # taken for a step that a failed trainer never finished
        "lost_in_failed_step": buffer.sampled - record.trained,
        "reward_first": reward_first,
        "reward_last": reward_last,
        # evaluation on held-out prompts (eval.*): the rows of the first and the last, or null
        "eval_first": record.eval_first,
        "eval_last": record.eval_last,
        "target_reward": config.target_reward,
        "target_reached": record.target_reached,
        "samples_per_s": record.trained / wall,
        "trainer_idle_frac": record.trainer_idle_s / wall,
        "generator_idle_frac": 1 - sum(g["busy_s"] for g in generators) / (wall * max(1, len(generators))),
        "gen_paused_for_admission_s": generation_paused_s,
        "generator_restarts": handles.generators.restarts,
        "generator_samples": handles.generators.returned,  # per generator (rollout_routing spreads them)
        # generators lost with their host (the run went on without them): why, each
        "generators_lost": handles.generators.losses,
        # generators spawned again on a lost host that came back: each one's new proc, and its
        # generator_samples count when it came back
        "generators_taken_back": handles.generators.taken_back,
        "lost_requests": handles.generators.lost_requests,
        "checkpoint_s": record.checkpoint_s,
        "inflight_swaps": swaps,
        "swap_pause_ms_mean": sum(p["total_ms"] for p in pauses) / swaps if swaps else None,
        "swap_pause_ms_max": max(p["max_ms"] for p in pauses if p["count"]) if swaps else None,
        # swap_mode=abort_resume: requests re-submitted with their generated prefix, and the
        # prefix tokens (prompt + generated) prefilled again
        "resumed_requests": sum(g["resumed_requests"] for g in generators),
        "resumed_prefix_tokens": sum(g["resumed_prefix_tokens"] for g in generators),
        "stored_versions": await _stored_versions(config),
        # versions kept for relays / generators
        "torchstore_versions": await _torchstore_versions() if handles.uses_torchstore else [],
        # per weight relay (or generator, under weights.transport=torchstore): the version it
        # holds, the versions it never loaded (a newer one was ready first), its failed links
        "weight_receivers": weight_receivers,
        "placement": handles.placement,
        "skipped_rows": skipped_rows,
        # a `rival` seat's policy (handles/rival.py): its version and samples, accounted as the run's
        "rival": None if handles.rival is None else await handles.rival.summary(),
    }
    accounted = (
        summary["trained"]
        + summary["dropped_stale"]
        + summary["dropped_other"]
        + summary["left_in_buffer"]
        + summary["in_flight"]
        + summary["lost_in_failed_step"]
    )
    summary["accounting_ok"] = accounted == summary["generated"]
    summary["final_model"] = final_model
    summary["run_dir"] = str(run_dir)
    replace_text(run_dir / "summary.json", json.dumps(summary, indent=2))
    return summary


async def _stored_versions(config: GRPOConfig) -> list[int]:
    """Policy versions still held by the weight transport (hygiene: only those in use)."""
    if config.weights.transport == "shm":
        return SharedMemoryChannel(config.weights.channel_dir).versions()
    return await _torchstore_versions()


async def _torchstore_versions() -> list[int]:
    from forge_async.weights import store  # heavy to import: only where torchstore is used

    return await store.stored_versions()
