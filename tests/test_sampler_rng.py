"""The random state a generator's engine samples with, as a checkpoint saves and restores it:
torch's generators and numpy's global RNG, from which vLLM's V2 runner draws each request's seed."""

import io

import numpy as np
import pytest
import torch

from forge_async.generation.sampler_rng import SamplerRngState

pytestmark = pytest.mark.unit


def draws() -> tuple[list[int], list[float]]:
    """What numpy's global RNG (vLLM V2's request seeds) and torch's CPU generator give next."""
    return np.random.randint(0, 2**31, size=4).tolist(), torch.rand(4).tolist()


def saved_and_loaded(state):
    """`state` through the checkpoint's file (checkpoint/checkpointer.py: torch.save, then torch.load
    with weights_only=False)."""
    buffer = io.BytesIO()
    torch.save({"generator_rng": [state]}, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)["generator_rng"][0]


def test_numpys_global_rng_comes_back_with_torchs():
    state = saved_and_loaded(SamplerRngState.capture())
    expected = draws()
    draws()  # the process moves on
    SamplerRngState.of(state).restore()
    assert draws() == expected


def test_a_checkpoint_from_before_numpys_state_was_kept_restores_torchs_and_leaves_numpys():
    old = saved_and_loaded({"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all()})
    expected = torch.rand(4).tolist()
    numpy_now = np.random.get_state()
    SamplerRngState.of(old).restore()
    assert torch.rand(4).tolist() == expected
    after = np.random.get_state()
    assert np.array_equal(after[1], numpy_now[1]) and after[2] == numpy_now[2]


@pytest.mark.procs
def test_the_generators_rng_state_carries_numpys(generator):
    """Through the generator's endpoints, in its proc: numpy's state set is numpy's state read back."""
    saved = generator.rng_state.call_one().get()
    assert isinstance(saved, SamplerRngState) and saved.numpy is not None
    other = SamplerRngState(saved.torch_cpu, saved.torch_cuda, np.random.RandomState(7).get_state())
    try:
        generator.set_rng_state.call_one(other).get()
        back = generator.rng_state.call_one().get()
        assert back.numpy[0] == "MT19937" and np.array_equal(back.numpy[1], other.numpy[1])
        assert back.numpy[2:] == other.numpy[2:]
        assert torch.equal(back.torch_cpu, saved.torch_cpu)
        # a checkpoint written before numpy's state was kept: torch's generators alone
        generator.set_rng_state.call_one({"cpu": saved.torch_cpu, "cuda": list(saved.torch_cuda)}).get()
        assert np.array_equal(generator.rng_state.call_one().get().numpy[1], other.numpy[1])
    finally:
        generator.set_rng_state.call_one(saved).get()  # the session's generator, as it was
