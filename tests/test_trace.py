"""The per-step budget (forge_async/observability/step_budget.py) on hand-made traces: busy, idle and bubble arithmetic."""

import json
import time
import tracemalloc

import pytest

from forge_async.observability.step_budget import TraceError, budget
from forge_async.observability.spans import Tracer, trace_events

pytestmark = pytest.mark.unit

MS = 1_000_000  # ns


def write_trace(run_dir, tracks: dict) -> None:
    (run_dir / "trace.json").write_text(json.dumps(trace_events(tracks)))


def test_budget_counts_each_side_and_the_bubble(tmp_path):
    # One 100 ms step: the trainer works 0-30 ms, the generator decodes 20-60 ms (overlapping it)
    # and swaps 70-80 ms. Nobody works 60-70 and 80-100: a 30 ms bubble.
    write_trace(
        tmp_path,
        {
            "controller": [("step", "trainer loop", 0, 100 * MS), ("wait for batch", "trainer loop", 0, 40 * MS)],
            "trainer rank 0": [("forward", "main", 0, 10 * MS), ("backward", "main", 10 * MS, 30 * MS)],
            "generator 0": [("decode", "main", 20 * MS, 60 * MS), ("swap weights", "weights", 70 * MS, 80 * MS)],
        },
    )
    result = budget(tmp_path)
    m = result["median_ms"]
    assert result["steps"] == result["steady_steps"] == 1
    assert m["step"] == pytest.approx(100)
    assert m["trainer rank 0 | main | backward"] == pytest.approx(20)
    assert m["trainer rank 0 | main | idle"] == pytest.approx(70)
    assert m["generator 0 | main | decode"] == pytest.approx(40)
    assert m["generator 0 | main | idle"] == pytest.approx(60)  # swapping is not decoding ...
    assert m["generator 0 | all lanes | idle"] == pytest.approx(50)  # ... but it is not idle either
    assert "trainer rank 0 | all lanes | idle" not in m  # one lane: its idle says it all
    assert m["controller | trainer loop | wait for batch"] == pytest.approx(40)
    assert m["bubble"] == pytest.approx(30)


def test_budget_leaves_start_up_steps_out_and_takes_medians(tmp_path):
    steps = [
        ("step", "trainer loop", k * 100 * MS, (k * 100 + length) * MS) for k, length in enumerate([90, 10, 20, 30])
    ]
    write_trace(tmp_path, {"controller": steps})
    result = budget(tmp_path, skip=1)
    assert result["steady_steps"] == 3 and result["median_ms"]["step"] == pytest.approx(20)


def test_a_trace_cut_short_is_still_read_and_a_missing_one_is_named(tmp_path):
    write_trace(tmp_path, {"controller": [("step", "trainer loop", 0, 5 * MS)]})
    text = (tmp_path / "trace.json").read_text()
    (tmp_path / "trace.json").write_text(text[:-1] + ",")  # a crashed writer's file: no closing bracket
    assert budget(tmp_path)["median_ms"]["step"] == pytest.approx(5)
    with pytest.raises(TraceError, match="no trace.json"):
        budget(tmp_path / "missing")


def test_tracer_keeps_the_newest_spans_and_can_be_off():
    tracer = Tracer(max_spans=2)
    for name in "abc":
        with tracer.span(name):
            pass
    assert [s[0] for s in tracer.take()] == ["b", "c"] and tracer.take() == []
    tracer.enabled = False
    with tracer.span("d"):
        pass
    assert tracer.take() == []


def test_tracer_ring_wraps_oldest_first_and_costs_20_bytes_a_span():
    tracer = Tracer(max_spans=3)
    for k in range(8):
        tracer.add(f"s{k}", k, k + 1, lane=f"lane {k % 2}")
    assert tracer.take() == [("s5", "lane 1", 5, 6), ("s6", "lane 0", 6, 7), ("s7", "lane 1", 7, 8)]
    tracemalloc.start()
    tracer = Tracer(max_spans=10_000)
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(30_000):
        tracer.add("decode", time.time_ns(), time.time_ns())
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grown < 10_000 * 25  # a deque of tuples: ~150 bytes a span


def test_a_generator_idle_while_a_request_is_held_back_is_what_admission_cost(tmp_path):
    # Worker 0 is held back 0-50 ms while the generator decodes worker 1's call (20-60 ms):
    # only 0-20 ms of the hold left the generator idle. Worker 1 is held back 70-90 ms with
    # the generator idle throughout; 60-70 and 90-100 it is idle with no worker held back.
    # Generator 1 does nothing in this step (its one span comes after it): idle for both holds.
    write_trace(
        tmp_path,
        {
            "controller": [
                ("step", "trainer loop", 0, 100 * MS),
                ("held back by admission", "rollout worker 0", 0, 50 * MS),
                ("held back by admission", "rollout worker 1", 70 * MS, 90 * MS),
            ],
            "generator 0": [("decode", "main", 20 * MS, 60 * MS)],
            "generator 1": [("decode", "main", 150 * MS, 160 * MS)],
        },
    )
    m = budget(tmp_path)["median_ms"]
    assert m["generator 0 | all lanes | idle, a request held back"] == pytest.approx(40)
    assert m["generator 1 | all lanes | idle, a request held back"] == pytest.approx(70)
    assert m["controller | rollout worker 0 | held back by admission"] == pytest.approx(50)
