"""The sampling parameters the engine benchmarks submit with: fixed-length completions, DELTA
outputs with logprobs, no detokenizing (what the generator asks of vLLM, without its stop rules)."""


def fixed_length(max_tokens: int):
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        max_tokens=max_tokens,
        ignore_eos=True,
        logprobs=0,
        output_kind=RequestOutputKind.DELTA,
        detokenize=False,
    )
