"""TEST DOUBLE of habana_frameworks.torch.hpu.random: one generator, device 0 only.

Source: gaudi-pytorch-bridge python_packages/habana_frameworks/torch/hpu/random.py @ 5a56187
(get_rng_state / set_rng_state raise for any device but 0). The double's generator is a CPU one.
"""

import torch

_generator = torch.Generator()


def _index(device) -> int:
    from . import _get_device_index

    return _get_device_index(device, optional=True)


def get_rng_state(device="hpu"):
    if _index(device) != 0:
        raise RuntimeError("hpu get_rng_state supports only device 0")
    return _generator.get_state()


def set_rng_state(new_state, device="hpu") -> None:
    if _index(device) != 0:
        raise RuntimeError("hpu set_rng_state supports only device 0")
    _generator.set_state(new_state)


def manual_seed(seed):
    return _generator.manual_seed(int(seed))


def seed() -> int:
    return _generator.seed()


def initial_seed() -> int:
    return _generator.initial_seed()


def get_rng_state_all():
    return [get_rng_state(0)]


def set_rng_state_all(new_states) -> None:
    if len(new_states) != 1:
        raise RuntimeError("hpu set_rng_state_all supports only states len of 1")
    set_rng_state(new_states[0], 0)


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)
