"""The engine batch's occupancy (generator/running_mean, generator/under_half_frac): counted by a
real generator's engine loop, and reported per window between two reads."""

import pytest

from forge_async.generation.config import SamplingConfig
from forge_async.generation.occupancy import Occupancy
from forge_async.observability.occupancy_window import OccupancyWindow

pytestmark = pytest.mark.procs

SAMPLES = 16


def test_a_generator_counts_each_samples_engine_steps_and_the_straggler_steps(generator):
    """One call of 16 samples whose lengths differ (EOS sampled by the untrained model): each sample
    runs one engine step per token, and a step is a straggler step once fewer than 8 still run."""
    before = generator.occupancy_totals.call_one().get()
    (group,) = generator.generate.call_one(["<bos>31<sep>"], SamplingConfig(max_tokens=40), n=SAMPLES).get()
    window = generator.occupancy_totals.call_one().get().since(before)
    lengths = [len(c.token_ids) for c in group]
    assert len(set(lengths)) > 1, lengths  # a tail to measure
    running = [sum(n > step for n in lengths) for step in range(max(lengths))]  # samples running at each step
    assert window == Occupancy(
        steps=max(lengths), running=sum(lengths), under_half=sum(2 * r < SAMPLES for r in running)
    )


def test_the_window_reports_the_steps_since_the_last_read_over_every_generator():
    window = OccupancyWindow()
    first = window.figures({0: Occupancy(10, 80, 2), 1: Occupancy(5, 20, 0)})
    assert first == {
        "generator/engine_steps": 15,
        "generator/running_mean": 100 / 15,
        "generator/under_half_frac": 2 / 15,
    }
    # generator 0 did not answer this time; generator 1 ran 5 more steps, all of them stragglers
    second = window.figures({0: None, 1: Occupancy(10, 30, 5)})
    assert second == {"generator/engine_steps": 5, "generator/running_mean": 2.0, "generator/under_half_frac": 1.0}
    # generator 0's steps since its last answer count now; generator 1 was respawned: its totals start again
    third = window.figures({0: Occupancy(14, 100, 4), 1: Occupancy(2, 16, 0)})
    assert third == {"generator/engine_steps": 6, "generator/running_mean": 36 / 6, "generator/under_half_frac": 2 / 6}


def test_a_window_without_engine_steps_reports_zeros():
    assert OccupancyWindow().figures({0: Occupancy()}) == {
        "generator/engine_steps": 0,
        "generator/running_mean": 0.0,
        "generator/under_half_frac": 0.0,
    }
