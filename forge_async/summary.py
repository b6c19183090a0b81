"""summary.json: what a run did, with every generated sample accounted for.

    generated = trained + dropped_stale + dropped_other + left_in_buffer + in_flight
                + lost_in_failed_step

`generated` counts episodes that reached the replay buffer, over the whole run
(a resumed run continues the counters of its checkpoint). Drops are also given
by reason (`dropped_by_reason`: stale, overflow, buffer_lost, zero_variance, scorer_error).
"""

import json
import statistics
import time

from forge_async.weights.shared_memory import SharedMemoryChannel


async def write_summary(loop, final_model: str | None, failure: str | None) -> dict:
    """Summarise `loop` (a GRPOLoop) into RUN_DIR/summary.json and return it."""
    config, meshes = loop.config, loop.meshes
    buffer = await meshes.buffer.stats()
    wall = time.perf_counter() - loop.start
    generators = [g for g in await meshes.ask_generators(lambda g: g.stats.call_one()) if g]
    pauses = [p for g in generators for p in g["swap_pauses_ms"]]
    window = max(1, min(10, len(loop.rewards) // 2))
    summary = {
        "mode": config.mode,
        "steps": loop.step,
        "wall_s": wall,
        "interrupted": loop.stop_reason is not None,
        "stop_reason": loop.stop_reason,
        "failure": failure,
        "generated": buffer["added"],
        "trained": loop.trained,
        "dropped_stale": buffer["dropped_stale"],
        "dropped_other": buffer["dropped_other"],
        "dropped_by_reason": buffer["dropped_by_reason"],
        "dropped_zero_variance": buffer["dropped_by_reason"].get("zero_variance", 0),  # part of dropped_other
        # episodes of groups with equal rewards trained on: over filter.max_oversampling
        "kept_zero_variance": buffer["kept_zero_variance"],
        # per completion-length quartile, and the longest's drop rate over the shortest's (docs/staleness.md)
        "dropped_stale_by_len": buffer["dropped_stale_by_len"],
        "left_in_buffer": buffer["size"],
        "in_flight": 0,  # workers are drained into the buffer before this point
        # taken for a step that a failed trainer never finished
        "lost_in_failed_step": buffer["sampled"] - loop.trained,
        "reward_first": statistics.fmean(loop.rewards[:window]) if loop.rewards else None,
        "reward_last": statistics.fmean(loop.rewards[-window:]) if loop.rewards else None,
        # evaluation on held-out prompts (eval.*): the rows of the first and the last, or null
        "eval_first": loop.eval_first,
        "eval_last": loop.eval_last,
        "target_reward": config.target_reward,
        "target_reached": loop.target_reached,
        "samples_per_s": loop.trained / wall,
        "trainer_idle_frac": loop.trainer_idle_s / wall,
        "generator_idle_frac": 1 - sum(g["busy_s"] for g in generators) / (wall * max(1, len(generators))),
        "gen_paused_for_admission_s": loop.admission.paused_s,
        "generator_restarts": meshes.generator_restarts,
        "lost_requests": meshes.lost_requests,
        "checkpoint_s": loop.checkpoint_s,
        "inflight_swaps": len(pauses),
        "swap_pause_ms_mean": statistics.fmean(pauses) if pauses else None,
        "swap_pause_ms_max": max(pauses) if pauses else None,
        # swap_mode=abort_resume: requests re-submitted with their generated prefix, and the
        # prefix tokens (prompt + generated) prefilled again
        "resumed_requests": sum(g["resumed_requests"] for g in generators),
        "resumed_prefix_tokens": sum(g["resumed_prefix_tokens"] for g in generators),
        "stored_versions": await _stored_versions(config),
        # versions kept for relays / generators
        "torchstore_versions": await _torchstore_versions() if meshes.uses_torchstore else [],
        "placement": meshes.placement,
        "skipped_rows": loop.rollouts.task.skipped_rows,  # dataset rows skipped at load, by reason
    }
    accounted = (
        summary["trained"] + summary["dropped_stale"] + summary["dropped_other"]
        + summary["left_in_buffer"] + summary["in_flight"] + summary["lost_in_failed_step"]
    )
    summary["accounting_ok"] = accounted == summary["generated"]
    summary["final_model"] = final_model
    summary["run_dir"] = str(loop.run_dir)
    (loop.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


async def _stored_versions(config) -> list[int]:
    """Policy versions still held by the weight transport (hygiene: only those in use)."""
    if config.weights.transport == "shm":
        return SharedMemoryChannel(config.weights.channel_dir).versions()
    return await _torchstore_versions()


async def _torchstore_versions() -> list[int]:
    from forge_async.weights import store  # torchstore: ~1 s to import, only where it is used

    return await store.stored_versions()
