"""The scoring tier in the apps: GRPO with a reference KL and a second reward learns; on-policy
distillation from that run's policy lowers the reverse KL; a killed teacher mesh ends the run clearly.

Two app runs serve every assertion: the GRPO run's final policy is the distillation's teacher,
and the distillation run is the one whose teacher proc is killed (after the steps it is judged on).
"""

import statistics

import pytest

from forge_async.cli.subprocess_run import run_app, run_app_acting_at
from tests.support.app_runs import assert_accounting, kill_role, resume_line

pytestmark = pytest.mark.e2e

WINDOW = 8
BREVITY = '{kind:reward,fn:"docs.examples.custom_scorer:brevity",weight:0.0}'  # reported, not trained on


@pytest.fixture(scope="module")
def grpo_with_kl(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("grpo_kl") / "run"
    run = run_app(
        run_dir,
        "steps=50",
        "seed=0",
        f"scorers=[{{kind:reward}},{{kind:reference_kl,coef:0.02}},{BREVITY}]",
        "trainer.lr_schedule=constant",  # the default decays the lr over the last half of the run
    )
    assert run.returncode == 0, run.output
    return run


def window_means(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values[:WINDOW]), statistics.fmean(values[-WINDOW:])


def test_grpo_with_reference_kl_learns_and_logs_each_scorer(grpo_with_kl):
    metrics = grpo_with_kl.metrics
    first, last = window_means([m["reward/mean"] for m in metrics])
    assert last - first > 0.15, f"first {WINDOW} steps {first:.3f}, last {WINDOW} steps {last:.3f}"
    # The weight-0 reward is logged on its own and adds nothing to the reward.
    assert all(m["reward/mean"] == pytest.approx(m["reward/task"]) for m in metrics)
    assert all(0 < m["reward/brevity"] <= 1 for m in metrics)
    # The policy moves away from the frozen reference: the KL starts at 0 and grows.
    kl = [m["kl/reference"] for m in metrics]
    assert kl[0] == pytest.approx(0.0, abs=1e-6) and statistics.fmean(kl[-WINDOW:]) > 1e-3
    for name in ("task", "reference_kl", "brevity"):
        assert metrics[-1][f"scoring/{name}/latency_ms"] > 0
        assert f"scoring/{name}/in_flight" in metrics[-1]
    assert_accounting(grpo_with_kl.summary)


def test_distillation_lowers_the_reverse_kl_and_a_killed_teacher_ends_the_run(grpo_with_kl, tmp_path):
    run_dir = tmp_path / "distill"
    teacher = grpo_with_kl.run_dir / "final_model"
    run = run_app_acting_at(
        run_dir, {28: kill_role(run_dir, "scorer1")}, "steps=60", f"teacher.path={teacher}", app="apps.distill"
    )
    metrics = run.metrics
    first, last = window_means([m["distill/reverse_kl"] for m in metrics[:28]])
    assert last < 0.7 * first, f"reverse KL: first {WINDOW} steps {first:.3f}, steps 21-28 {last:.3f}"
    assert all(m["reward/mean"] == m["reward/task"] for m in metrics)  # reported, not trained on
    # The teacher's death: exit 1 within a minute, naming the scorer and its pid; what was learned is saved.
    pid = run.procs["scorer1"]["pid"]
    assert run.returncode == 1, run.output
    assert run.ended_at - run.acted_at[28] < 60
    assert f"scorer 'teacher' (pid {pid} on" in run.output and "Traceback" not in run.output
    assert resume_line("apps.distill", run_dir) in run.output
    summary = run.summary
    assert summary["failure"].startswith("scorer 'teacher'") and summary["steps"] < 60
    assert_accounting(summary)
    assert (run_dir / "final_model" / "config.json").is_file()
