"""The end-of-run report on the console, from the run's summary.json, read typed
(observability/run_summary.py: RunSummary, GRPO's and distillation's; SFTSummary, SFT's)."""

import statistics
from pathlib import Path

from forge_async.observability.metrics import read_rows, success
from forge_async.observability.run_summary import RunSummary, SFTSummary
from forge_async.process.interpreter import module_command

DISTILL_WINDOW = 10  # steps averaged for the distillation line's first and last figures


def report_grpo(summary_json: dict, app: str, what: str) -> None:
    summary = RunSummary.from_json(summary_json)
    reached = summary.target_reached
    target = (
        f"reached {summary.target_reward} at step {reached.step} ({reached.wall_s:.0f}s)"
        if reached
        else f"target {summary.target_reward} not reached"
    )
    rewards = (
        f"reward {summary.reward_first:.2f} -> {summary.reward_last:.2f}"
        + ("" if summary.target_reward is None else f" ({target})")  # a game's rewards have no target
        if summary.steps
        else "no step trained"
    )
    print(
        f"\n== {summary.mode} {what}: {summary.steps} steps in {summary.wall_s:.0f}s ==\n"
        f"{rewards}\n"
        f"samples: generated {summary.generated} = trained {summary.trained}"
        f" + dropped stale {summary.dropped_stale} + dropped other {summary.dropped_other}"
        f" + left in buffer {summary.left_in_buffer} + in flight {summary.in_flight}"
        f" ({'adds up' if summary.accounting_ok else 'DOES NOT ADD UP'})\n"
        f"trainer idle {100 * summary.trainer_idle_frac:.0f}%,"
        f" generator idle {100 * summary.generator_idle_frac:.0f}%,"
        f" {summary.samples_per_s:.0f} samples/s\n"
        f"run dir: {summary.run_dir} (metrics.jsonl, plots.png, trace.json, summary.json, config.yaml, final_model/,"
        " checkpoints/, logs/)"
    )
    report_evaluations(summary)
    report_rival(summary.rival)
    if summary.dropped_other or summary.not_started:
        print(f"dropped by reason: {summary.dropped_by_reason}")
    if summary.not_started:
        print(
            f"not started (dropped before reaching a generator; not counted as generated): "
            f"{summary.not_started} {summary.not_started_by_reason}"
        )
    if summary.generator_restarts:
        print(f"generator restarts: {summary.generator_restarts} ({summary.lost_requests} lost requests issued again)")
    report_early_end(summary, app)


def report_rival(rival: dict | None) -> None:
    """The `rival` seat's policy, trained beside the run's (controller/rival_loop.py)."""
    if rival is not None:
        print(
            f"rival: version {rival['version']}; samples: generated {rival['generated']} = trained "
            f"{rival['trained']} + dropped stale {rival['dropped_stale']} + dropped other {rival['dropped_other']}"
            f" + left in buffer {rival['left_in_buffer']} + in a step {rival['in_step']}"
            f" ({'adds up' if rival['accounting_ok'] else 'DOES NOT ADD UP'})"
            + (f"; rival's policy: {rival['final_model']}" if rival.get("final_model") else "")
        )


def report_sft(summary_json: dict, app: str, what: str) -> None:
    summary = SFTSummary.from_json(summary_json)
    loss = (
        f"loss {summary.loss_first:.3f} -> {summary.loss_last:.3f} "
        f"(NLL per demonstration token, mean of the first and last {summary.loss_window} steps)"
        if summary.steps
        else "no step trained"
    )
    print(
        f"\n== {what}: {summary.steps} steps in {summary.wall_s:.0f}s ==\n"
        f"{loss}\n"
        f"trained on {summary.trained} demonstrations, {summary.trained_tokens} completion tokens "
        f"({summary.tokens_per_s:.0f} tokens/s)\n"
        f"run dir: {summary.run_dir} (metrics.jsonl, plots.png, trace.json, summary.json, config.yaml, final_model/,"
        " checkpoints/, logs/)"
    )
    report_evaluations(summary)
    if sum(summary.skipped_demonstrations.values()):
        print(f"demonstrations skipped: {summary.skipped_demonstrations}")
    report_early_end(summary, app)
    if summary.final_model and not (summary.failure or summary.stop_reason):
        print(f"continue with GRPO: {summary.grpo_command}")


def report_distillation(summary_json: dict) -> None:
    """The reverse KL to the teacher at the start and end of the run, and the teacher's own reward."""
    run_dir = Path(RunSummary.from_json(summary_json).run_dir)
    rows, _ = read_rows(run_dir)
    kl = [r["distill/reverse_kl"] for r in rows if "distill/reverse_kl" in r]
    if not kl:
        return
    window = max(1, min(DISTILL_WINDOW, len(kl) // 2))
    line = f"reverse KL to the teacher {statistics.fmean(kl[:window]):.3f} -> {statistics.fmean(kl[-window:]):.3f}"
    teacher_dir = run_dir / "teacher"
    if (teacher_dir / "summary.json").is_file():
        line += f" (teacher's own reward {RunSummary.read(teacher_dir).reward_last:.2f})"
    print(line)


def report_evaluations(summary: RunSummary | SFTSummary) -> None:
    """The first and the last evaluation on held-out prompts, if there were any."""
    first, last = summary.eval_first, summary.eval_last
    if first and last:
        print(
            f"eval on {last['eval/prompts']} held-out prompts: reward {first['eval/reward_mean']:.2f} "
            f"(v{first['eval/version']}) -> {last['eval/reward_mean']:.2f} (v{last['eval/version']}), "
            f"{success(last)[0]} {success(first)[1]:.2f} -> {success(last)[1]:.2f}"  # won, or pass@k
        )


def report_early_end(summary: RunSummary | SFTSummary, app: str) -> None:
    """What stopped a run before its last step, and the command that continues it."""
    if summary.failure:
        print(f"stopped early: {summary.failure}")
    if summary.stop_reason:
        print(f"interrupted ({summary.stop_reason}) after step {summary.steps}")
    for what in summary.cut_short:
        print(f"cut short: {what}")
    if (summary.failure or summary.stop_reason) and summary.resumable:
        print(f"resume with: {module_command(app, f'resume={summary.run_dir}')}")
