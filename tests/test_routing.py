"""Rollout routing (rollout/routing.py) over a real GeneratorPool's bookkeeping: samples in
flight and returned per generator, time busy, and generators lost with their host (no procs
needed to route)."""

import pytest

from forge_async.handles.generators import GeneratorFailed, GeneratorPool
from forge_async.rollout.routing import WorkerRouting

CALL = 128  # samples a call asks for


def routing(pool: GeneratorPool, worker: int, policy: str, oldest_admissible: int = 0) -> WorkerRouting:
    """Generator i samples with version 10 + i; admission admits versions from `oldest_admissible` on."""
    return WorkerRouting(
        pool, worker, policy, CALL, version_of=lambda i: 10 + i, admissible=lambda v: v >= oldest_admissible,
        producer=lambda generate: generate,
    )


def pool_with_paces(*seconds_busy: float) -> GeneratorPool:
    """Generators that each returned 1,280 samples in these many seconds busy."""
    pool = GeneratorPool(None, None, count=len(seconds_busy), max_restarts=0)
    for i, busy_s in enumerate(seconds_busy):
        pool.returned[i] = 1280
        pool.generating[i]._busy_s = busy_s
    return pool


def test_least_outstanding_sends_a_call_where_it_would_finish_first():
    pool = pool_with_paces(1.0, 4.0, 1.0)  # generator 1 is four times slower
    route = routing(pool, worker=0, policy="least_outstanding")
    assert route.version() == 10 and route.take() == 0  # idle alike: the lowest index
    pool.outstanding[:] = [CALL, 0, 0]
    assert route.version() == 12 and route.take() == 2  # the call goes where admission judged it
    pool.outstanding[:] = [CALL, 0, CALL]
    assert route.take() == 0  # 2 calls' work at 4x the pace beats 1 call's on the slow one
    pool.outstanding[:] = [4 * CALL, 0, 4 * CALL]
    assert route.take() == 1  # now the slow one finishes first
    pool.lost[1] = "generator 1 (node 1) cannot be respawned"
    assert route.take() == 0
    pool.lost[0] = pool.lost[2] = "lost too"
    with pytest.raises(GeneratorFailed, match="no generator is left"):
        route.take()


def test_a_generator_whose_weights_lag_is_passed_over_while_another_can_take_the_call():
    """Generator 0 holds version 10, generator 1 version 11; admission takes 11 and newer now."""
    pool = pool_with_paces(1.0, 4.0)
    route = routing(pool, worker=0, policy="least_outstanding", oldest_admissible=11)
    assert route.version() == 11 and route.take() == 1  # slower, but the call can go out now
    route = routing(pool, worker=0, policy="least_outstanding", oldest_admissible=12)
    assert route.version() == 10 and route.take() == 0  # none admissible: the soonest, to wait for


def test_a_generator_not_yet_measured_is_taken_at_the_others_pace():
    pool = pool_with_paces(1.0, 1.0)
    pool.returned[1] = 0  # a respawned or late generator: no pace yet
    route = routing(pool, worker=0, policy="least_outstanding")
    pool.outstanding[:] = [CALL, 0]
    assert route.take() == 1


def test_round_robin_keeps_a_worker_on_its_generator_until_it_is_lost():
    pool = pool_with_paces(1.0, 4.0, 1.0)
    route = routing(pool, worker=4, policy="round_robin")
    assert route.version() == 11 and route.take() == 1  # 4 % 3, however slow
    pool.lost[1] = "generator 1 (node 1) cannot be respawned"
    assert route.take() == 2  # the stand-in: live [0, 2], position 1 % 2


def test_a_worker_keeps_one_producer_per_generator():
    """Multi-turn rollouts batch a worker's turns per producer: one per generator, kept."""
    route = routing(pool_with_paces(1.0, 1.0), worker=0, policy="least_outstanding")
    first, second = route.produce_on(0), route.produce_on(1)
    assert route.produce_on(0) is first and first is not second and first.index == 0 and second.index == 1
