"""The rollout worker: generate calls kept going into the replay buffer, within max_policy_age.

Every call is admitted on its own (rollout/admission.py): only as many samples go out as
can still be trained on in time, given the version the generator it goes to samples
with (routing.py chooses the generator), and reaches the buffer in admission order
(arrival_order.py). A call whose generator is lost with its host
releases its admission and the worker goes on (the next choice is a live generator).
A worker keeps `shape.calls_in_flight` calls going at once: single-turn, one call
of `prompts_per_rollout` prompts; multi-turn, that many groups, each buffered once its
last episode ends and every group admitted before it is in (a slow group holds up the
buffering of later ones, never their generation).
"""

import asyncio

from forge_async.rollout.admission import Admitted, AdmissionControl
from forge_async.handles.buffer import BufferHandle
from forge_async.handles.generators import GeneratorLost
from forge_async.rollout.types import Choice, Producer, Router, WorkerShape
from forge_async.observability.span_names import BUFFER_ADD, GENERATE_AND_SCORE, HELD_BACK, IN_ORDER
from forge_async.observability.spans import TRACER


async def run_worker(
    router: Router,
    producer: Producer,
    shape: WorkerShape,
    group_size: int,
    buffer: BufferHandle,
    admission: AdmissionControl,
    stop: asyncio.Event,
    lane: str = "rollout worker",
) -> None:
    """Produce into `buffer` until `stop` is set, then finish the calls in flight: each call
    admitted, on the generator `router` chooses, then played by `producer`.

    A call's error (no generator left, a scorer's) ends the worker."""
    size, unit = shape.samples_per_call(group_size), shape.least_admitted(group_size)
    pending: set[asyncio.Task] = set()
    try:
        while not stop.is_set():
            if len(pending) >= shape.calls_in_flight:
                await _settle(pending)
                continue
            with TRACER.span(HELD_BACK, lane):
                admitted = await _admit(admission, size, router, unit, pending)
            if not admitted.samples:
                break
            per_prompt = shape.samples_per_prompt(group_size)
            call = _call_into_buffer(producer, admitted, per_prompt, buffer, admission, lane)
            if shape.calls_in_flight == 1:
                await call  # the request goes out now, not after a pass of the event loop
            else:
                pending.add(asyncio.create_task(call))
        while pending:
            await _settle(pending)
    finally:
        for task in pending:
            task.cancel()


async def _call_into_buffer(
    producer: Producer,
    admitted: Admitted,
    per_prompt: int,
    buffer: BufferHandle,
    admission: AdmissionControl,
    lane: str,
) -> None:
    """One admitted call's samples (`per_prompt` a prompt at most) into the buffer, in admission
    order (its ticket's turn). Admission counts a multi-seat episode's policy seats; those that
    never moved give nothing, and their admission is released."""
    samples = admitted.samples
    choice, ticket = _issued(admitted)
    try:
        try:
            with TRACER.span(GENERATE_AND_SCORE, lane):
                episodes, dropped = await producer.produce(choice.generator, samples // per_prompt)
            with TRACER.span(IN_ORDER, lane):
                await admission.arrivals.turn(ticket)
        except GeneratorLost:  # counted by the pool (lost_requests); the next call goes to a live generator
            await admission.lost(samples)
            return
        except BaseException:  # the worker cancelled: nothing of it will arrive
            await admission.lost(samples)
            raise
        with TRACER.span(BUFFER_ADD, lane):
            await buffer.add(episodes, dropped=dropped)
    finally:
        await admission.arrivals.retire(ticket)
    arrived = min(len(episodes) + dropped.total(), samples)
    if arrived < samples:
        await admission.lost(samples - arrived)
    await admission.generated(arrived)


async def _admit(
    admission: AdmissionControl, size: int, router: Router, unit: int | None, pending: set[asyncio.Task]
) -> Admitted:
    """Admission for one call (its samples, and the generator it goes to), raising meanwhile the
    error of any call in flight that fails. A call admitted as that error came never goes out:
    its admission and its turn are released, so the other workers' calls are not held behind it."""
    if not pending:  # nothing to watch: admitted at once where there is room, without a pass of the loop
        return await admission.admit(size, router, unit)
    admit = asyncio.ensure_future(admission.admit(size, router, unit))
    try:
        while not admit.done():
            await _settle(pending, admit)
        return admit.result()
    except BaseException:
        if admit.done() and not admit.cancelled() and admit.exception() is None and admit.result().samples:
            await admission.lost(admit.result().samples)
            await admission.arrivals.retire(_issued(admit.result())[1])
        raise
    finally:
        admit.cancel()


def _issued(admitted: Admitted) -> tuple[Choice, int]:
    """The generator and the ticket of a call admitted with samples (one of none has neither)."""
    if admitted.choice is None or admitted.ticket is None:
        raise RuntimeError(f"a call admitted with {admitted.samples} samples has no generator or ticket")
    return admitted.choice, admitted.ticket


async def _settle(pending: set[asyncio.Task], admit: asyncio.Future | None = None) -> None:
    """Wait until a call in `pending` finishes (or `admit` does); remove it, raising its error."""
    waiting = pending | ({admit} if admit is not None else set())
    done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    for task in done - {admit}:
        pending.discard(task)
        task.result()
