"""TEST DOUBLE of habana_frameworks.torch.utils._weights_only_unpickler: weights-only loading of
every pickle protocol.

Source: gaudi-pytorch-bridge python_packages/habana_frameworks/torch/utils/_weights_only_unpickler.py
@ 5a56187, torch's weights-only unpickler with the protocol 3-5 opcodes added (framing, MEMOIZE,
STACK_GLOBAL, ...): lazy mode saves with protocol 4, which torch's own one refuses ("Unsupported
operand 149", pytorch/pytorch#118092, still open; torch 2.13 refuses it). The double stands in
with Python's unpickler restricted to torch's allowlist (``_get_allowed_globals`` and the user's
``safe_globals``); torch's finer limits on BUILD and REDUCE are not repeated here.
"""

import pickle

UnpicklingError = pickle.UnpicklingError


class Unpickler(pickle._Unpickler):
    def find_class(self, module, name):
        from torch import _weights_only_unpickler as torch_wo

        full = f"{module}.{name}"
        for allowed in (torch_wo._get_allowed_globals(), torch_wo._get_user_allowed_globals()):
            if full in allowed:
                return allowed[full]
        raise UnpicklingError(f"Unsupported global: GLOBAL {full} was not an allowed global")


def load(file, *, encoding: str = "ASCII"):
    return Unpickler(file, encoding=encoding).load()
