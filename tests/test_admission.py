"""Admission control: generation waits instead of producing samples that would go stale."""

import asyncio

import pytest

from forge_async.data.buffer import DropCounts
from forge_async.data.episode import Completion, Episode
from forge_async.rollout.admission import AdmissionControl
from forge_async.rollout.types import Choice, WorkerShape
from forge_async.rollout.worker import run_worker

pytestmark = pytest.mark.unit

B = 4  # samples per training batch


class At:
    """A router whose one generator samples with `version` (a number, or a function read at each check)."""

    def __init__(self, version):
        self.version = version

    def choose(self) -> Choice:
        return Choice(None, self.version() if callable(self.version) else self.version)


async def admitted(gate: AdmissionControl, n: int, version=0, unit: int | None = None) -> int:
    """The samples `gate` admits of `n`, from a generator at `version`."""
    return (await gate.admit(n, At(version), unit)).samples


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("max_age, fits_while_idle", [(0, 1), (1, 2), (2, 3)])
def test_bound_is_max_age_plus_one_batches_when_the_trainer_waits(max_age, fits_while_idle):
    async def scenario():
        gate = AdmissionControl(batch_size=B, max_policy_age=max_age)
        calls = 0
        while gate.fits(B, generator_version=0):
            assert await admitted(gate, B)
            calls += 1
        return calls

    assert run(scenario()) == fits_while_idle


def test_a_running_step_counts_as_one_version_of_lag():
    gate = AdmissionControl(batch_size=B, max_policy_age=1)
    run(gate.step_started(taken=0))
    # The next batch is taken at version 1; a generator at version 0 may only fill it.
    assert gate.fits(B, generator_version=0)
    assert not gate.fits(B + 1, generator_version=0)
    # A generator already on the new weights gets the full depth back.
    assert gate.fits(2 * B, generator_version=1)


def test_weights_recent_enough_for_a_call_regardless_of_the_queue():
    """What routing asks before passing a generator over: its lag alone, not the room left."""
    gate = AdmissionControl(batch_size=B, max_policy_age=1)
    run(admitted(gate, 2 * B))  # the queue is full for now
    assert not gate.fits(B, generator_version=0) and gate.recent_enough(B, generator_version=0)
    run(gate.step_finished(version=2))  # weights at version 0 are now too old for any call
    assert not gate.recent_enough(1, generator_version=0) and gate.recent_enough(1, generator_version=1)
    assert not gate.recent_enough(B + 1, generator_version=1)  # a call past one batch lags one more


def test_a_call_goes_to_the_choice_it_was_admitted_by():
    """The router is asked anew at every check; the choice returned is the one that fitted."""

    class Alternating:
        def __init__(self):
            self.choices = 0

        def choose(self) -> Choice:
            self.choices += 1
            return Choice(self.choices, version=0 if self.choices % 2 else 1)  # odd: too old

    async def scenario():
        gate = AdmissionControl(batch_size=B, max_policy_age=0)
        await gate.step_finished(version=1)
        router = Alternating()
        waiting = asyncio.create_task(gate.admit(B, router))
        await asyncio.sleep(0.01)
        assert not waiting.done() and router.choices == 1
        await gate.weights_moved()
        return await waiting

    assert run(scenario())[:2] == (B, Choice(2, 1))


def test_slow_trainer_pauses_generation_and_nothing_goes_stale():
    """A producer that always wants more and a slow consumer: the producer waits."""

    async def scenario():
        gate = AdmissionControl(batch_size=B, max_policy_age=1)
        trained_ages, produced, queue = [], [], []
        generator_version = 0

        async def producer():
            while True:
                if not await admitted(gate, B, lambda: generator_version):
                    return
                queue.extend([generator_version] * B)  # samples tagged with their version
                produced.append(B)
                await gate.generated(B)

        async def slow_trainer(steps: int):
            nonlocal generator_version
            version = 0
            for _ in range(steps):
                while len(queue) < B:
                    await asyncio.sleep(0.001)
                batch = [queue.pop(0) for _ in range(B)]
                trained_ages.extend(version - v for v in batch)
                await gate.step_started(taken=B)
                await asyncio.sleep(0.02)  # slow step
                version += 1
                generator_version = version
                await gate.step_finished(version)
            await gate.close()

        task = asyncio.create_task(producer())
        await slow_trainer(steps=10)
        await task
        return gate, trained_ages, produced

    gate, ages, produced = run(scenario())
    assert max(ages) <= 1  # nothing trained past max_policy_age: nothing had to be dropped
    assert gate.paused_s > 0.1  # the producer spent the slow steps waiting
    assert sum(produced) <= 10 * B + 2 * B  # at most max_age + 1 batches beyond what was trained


def test_close_releases_waiting_producers():
    async def scenario():
        gate = AdmissionControl(batch_size=B, max_policy_age=0)
        assert await admitted(gate, B)
        waiting = asyncio.create_task(admitted(gate, B))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        await gate.close()
        return await waiting

    assert run(scenario()) == 0


def test_with_a_unit_admits_the_groups_that_fit_beside_what_is_queued():
    """Groups dropped on arrival leave a few samples queued: a whole request no longer fits
    at max_policy_age=0, but the groups that do are admitted (else the batch never fills)."""
    batch, group = 32, 4

    async def scenario():
        gate = AdmissionControl(batch_size=batch, max_policy_age=0)
        assert await admitted(gate, batch) == batch
        await gate.generated(batch)
        await gate.dropped(batch - 3 * group)  # all but 3 groups dropped for zero variance
        whole = asyncio.create_task(admitted(gate, batch))  # without a unit: waits
        partial = await admitted(gate, batch, unit=group)
        await asyncio.sleep(0.01)
        assert not whole.done()
        await gate.close()
        return partial, gate.queued

    partial, queued = run(scenario())
    assert partial == batch - 3 * group and queued == batch  # exactly the batch's missing groups


def test_a_multi_seat_call_is_admitted_for_each_policy_seat_and_a_seat_that_never_moved_is_released():
    """Self-play (two policy seats, groups of 4): a call is admitted 8 samples; a game that ends
    before seat 1 moves gives one completion, and the seat's admission is released, so what
    admission counts queued is what reached the buffer."""
    shape, group_size, calls = WorkerShape(1, calls_in_flight=1, samples_per_episode=2), 4, 3

    def completion(seat: int) -> Episode:
        return Episode(Completion([1], [2], [0.0], [0], "", "done", seat=seat), 0.0, 0.0)

    class SelfPlay:
        async def produce(self, generator, num_prompts: int):
            assert num_prompts == 1
            return [completion(seat) for seat in (0, 0, 1, 0, 1)], DropCounts({"scripted_player_error": 2})

    async def scenario():
        gate = AdmissionControl(batch_size=100, max_policy_age=1)
        stop, buffered = asyncio.Event(), []

        class Buffer:
            async def add(self, episodes, *, dropped):
                buffered.append(len(episodes) + dropped.total())
                if len(buffered) == calls:
                    stop.set()

        await run_worker(At(0), SelfPlay(), shape, group_size, Buffer(), gate, stop)
        return gate, buffered

    gate, buffered = run(scenario())
    assert shape.samples_per_call(group_size) == 8 and buffered == [7] * calls
    assert (gate.queued, gate.in_flight) == (7 * calls, 0)


def test_a_call_that_finishes_first_waits_for_the_calls_admitted_before_it():
    """Two workers' calls run at once and the later-admitted one finishes first: its episodes
    reach the buffer after the earlier call's, the order admission counted them in."""
    finish_order, added = [], []

    class Timed:
        """Each call's episodes carry its admission number; the first call takes longest."""

        def __init__(self):
            self.calls = 0

        async def produce(self, generator, num_prompts: int):
            call, self.calls = self.calls, self.calls + 1
            await asyncio.sleep(0.05 if call == 0 else 0.0)
            finish_order.append(call)
            return [Episode(Completion([1], [2], [0.0], [0], "", "stop"), 0.0, float(call))] * B, DropCounts()

    async def scenario():
        gate = AdmissionControl(batch_size=B, max_policy_age=10)  # room for every call: none waits
        stop = asyncio.Event()

        class Buffer:
            async def add(self, episodes, *, dropped):
                added.append(int(episodes[0].advantage))
                if len(added) >= 2:
                    stop.set()

        shape = WorkerShape(1, calls_in_flight=2)
        worker = run_worker(At(0), Timed(), shape, group_size=B, buffer=Buffer(), admission=gate, stop=stop)
        await asyncio.wait_for(worker, 10)
        return gate

    gate = run(scenario())
    assert finish_order[:2] == [1, 0]  # the second call was done first...
    assert added[:2] == [0, 1]  # ...and still reached the buffer second
    assert gate.in_flight == 0


def test_a_lost_call_lets_the_calls_behind_it_go():
    from forge_async.rollout.arrival_order import ArrivalOrder

    async def scenario():
        order = ArrivalOrder()
        first, second, third = order.issue(), order.issue(), order.issue()
        third_in = asyncio.create_task(order.turn(third))
        await order.turn(first)  # the oldest never waits
        await order.retire(second)  # retired out of order (lost before the first arrived)
        await asyncio.sleep(0.01)
        assert not third_in.done()  # the first still holds its place
        await order.retire(first)
        await asyncio.wait_for(third_in, 1)

    run(scenario())


def test_without_admission_control_calls_arrive_as_they_finish():
    from forge_async.rollout.arrival_order import ArrivalOrder

    async def scenario():
        order = ArrivalOrder(enabled=False)
        order.issue()
        await asyncio.wait_for(order.turn(order.issue()), 1)

    run(scenario())


def test_a_call_admitted_as_another_call_fails_never_goes_out_and_holds_no_one_back():
    """A worker's call fails at the moment its next call is admitted: the worker ends with the
    error, and the admitted call's samples and turn are released (another worker's calls would
    wait behind it for good)."""

    class FailsSecond:
        def __init__(self):
            self.calls = 0

        async def produce(self, generator, num_prompts: int):
            self.calls += 1
            if self.calls == 2:
                raise RuntimeError("a scorer failed")
            await asyncio.sleep(0.02)
            return [Episode(Completion([1], [2], [0.0], [0], "", "stop"), 0.0, 0.0)] * B, DropCounts()

    async def scenario():
        gate = AdmissionControl(batch_size=B, max_policy_age=10)
        stop, added = asyncio.Event(), []

        class Buffer:
            async def add(self, episodes, *, dropped):
                added.append(len(episodes))

        shape = WorkerShape(1, calls_in_flight=3)  # the third is admitted as the second fails
        worker = run_worker(At(0), FailsSecond(), shape, group_size=B, buffer=Buffer(), admission=gate, stop=stop)
        with pytest.raises(RuntimeError, match="a scorer failed"):
            await asyncio.wait_for(worker, 10)
        next_ticket = gate.arrivals.issue()
        await asyncio.wait_for(gate.arrivals.turn(next_ticket), 1)  # no ticket before it is left unretired
        return gate

    gate = run(scenario())
    assert gate.in_flight == 0
