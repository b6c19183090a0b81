"""Rollout routing (rollout/routing.py) over a real GeneratorPool's bookkeeping: samples in
flight and returned per generator, time busy, and generators lost with their host (no procs
needed to route)."""

import pytest

from forge_async.handles.generators import GeneratorFailed, GeneratorPool
from forge_async.rollout.admission import AdmissionControl
from forge_async.rollout.routing import WorkerRouting

pytestmark = pytest.mark.unit

CALL = 128  # samples a call asks for


class Versions:
    """Generator i samples with version 10 + i."""

    def generator_version(self, index: int) -> int:
        return 10 + index


def routing(pool: GeneratorPool, worker: int, policy: str, oldest_admissible: int = 0) -> WorkerRouting:
    """Admission admits a call of CALL samples from versions `oldest_admissible` on."""
    admission = AdmissionControl(batch_size=CALL, max_policy_age=0)
    admission.trainer_version = oldest_admissible
    return WorkerRouting(pool, worker, policy, CALL, Versions(), admission, least_admitted=CALL)


def pool_with_paces(*seconds_busy: float) -> GeneratorPool:
    """Generators that each returned 1,280 samples in these many seconds busy."""
    pool = GeneratorPool(None, None, count=len(seconds_busy), max_restarts=0)
    for i, busy_s in enumerate(seconds_busy):
        pool[i].pace.returned = 1280
        pool[i].pace.busy._busy_s = busy_s
    return pool


def outstanding(pool: GeneratorPool, *samples: int) -> None:
    for i, n in enumerate(samples):
        pool[i].pace.outstanding = n


def chosen(route: WorkerRouting) -> tuple[int, int]:
    choice = route.choose()
    return choice.generator.index, choice.version


def test_least_outstanding_sends_a_call_where_it_would_finish_first():
    pool = pool_with_paces(1.0, 4.0, 1.0)  # generator 1 is four times slower
    route = routing(pool, worker=0, policy="least_outstanding")
    assert chosen(route) == (0, 10)  # idle alike: the lowest index
    outstanding(pool, CALL, 0, 0)
    assert chosen(route) == (2, 12)
    outstanding(pool, CALL, 0, CALL)
    assert chosen(route)[0] == 0  # 2 calls' work at 4x the pace beats 1 call's on the slow one
    outstanding(pool, 4 * CALL, 0, 4 * CALL)
    assert chosen(route)[0] == 1  # now the slow one finishes first
    pool.lost[1] = "generator 1 (node 1) cannot be respawned"
    assert chosen(route)[0] == 0
    pool.lost[0] = pool.lost[2] = "lost too"
    with pytest.raises(GeneratorFailed, match="no generator is left"):
        route.choose()


def test_a_generator_whose_weights_lag_is_passed_over_while_another_can_take_the_call():
    """Generator 0 holds version 10, generator 1 version 11; admission takes 11 and newer now."""
    pool = pool_with_paces(1.0, 4.0)
    route = routing(pool, worker=0, policy="least_outstanding", oldest_admissible=11)
    assert chosen(route) == (1, 11)  # slower, but the call can go out now
    route = routing(pool, worker=0, policy="least_outstanding", oldest_admissible=12)
    assert chosen(route) == (0, 10)  # none admissible: the soonest, to wait for


def test_a_generator_not_yet_measured_is_taken_at_the_others_pace():
    pool = pool_with_paces(1.0, 1.0)
    pool[1].pace.returned = 0  # a respawned or late generator: no pace yet
    route = routing(pool, worker=0, policy="least_outstanding")
    outstanding(pool, CALL, 0)
    assert chosen(route)[0] == 1


def test_round_robin_keeps_a_worker_on_its_generator_until_it_is_lost():
    pool = pool_with_paces(1.0, 4.0, 1.0)
    route = routing(pool, worker=4, policy="round_robin")
    assert chosen(route) == (1, 11)  # 4 % 3, however slow
    pool.lost[1] = "generator 1 (node 1) cannot be respawned"
    assert chosen(route)[0] == 2  # the stand-in: live [0, 2], position 1 % 2
