"""The random state a generator's engine samples with: what a checkpoint keeps of each generator
(checkpoint/checkpointer.py), so that a resumed run samples as the saved one would have.

Where vLLM 0.32 draws its randomness when it samples:

- its V1 model runner (every CPU engine, a dense model's GPU engine: generation/platform.py) from
  torch's default generators: on CPU each step's seeds (vllm/v1/sample/ops/topk_topp_sampler.py,
  `forward_cpu`), on a GPU the exponential noise of its PyTorch path on the device's generator
  (`random_sample` in the same file);
- its V2 model runner (an MoE model's GPU engine) gives each request without a seed of its own one
  drawn from numpy's global RNG as the request is added (vllm/v1/worker/gpu/sample/states.py,
  `SamplingStates.add_request`), then samples from that seed.

Python's `random` is on no sampling path (vLLM draws from it to sample its KV-cache metrics and to
name temporary files), so it is not kept. Light: torch and numpy are imported when used.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class SamplerRngState:
    """torch's CPU generator, each CUDA device's generator, and numpy's global RNG (as
    `numpy.random.get_state()` gives it; None in a checkpoint written before it was kept: then
    numpy's RNG is left as it is)."""

    torch_cpu: "torch.Tensor"
    torch_cuda: tuple["torch.Tensor", ...]
    numpy: tuple | dict[str, Any] | None

    @classmethod
    def capture(cls) -> "SamplerRngState":
        """This process's state now."""
        import numpy as np
        import torch

        numpy_state = np.random.get_state(legacy=True)  # the default: a tuple for the global RNG
        return cls(torch.get_rng_state(), tuple(torch.cuda.get_rng_state_all()), numpy_state)

    @classmethod
    def of(cls, saved: "SamplerRngState | dict") -> "SamplerRngState":
        """A state as `capture` gave it, or as a checkpoint written before this class kept it:
        a dict of torch's generators alone (`cpu`, `cuda`)."""
        if isinstance(saved, SamplerRngState):
            return saved
        return cls(saved["cpu"], tuple(saved["cuda"]), None)

    def restore(self) -> None:
        """Set this process's generators to this state."""
        import numpy as np
        import torch

        torch.set_rng_state(self.torch_cpu)
        if self.torch_cuda:
            torch.cuda.set_rng_state_all(list(self.torch_cuda))
        if self.numpy is not None:
            np.random.set_state(self.numpy)
