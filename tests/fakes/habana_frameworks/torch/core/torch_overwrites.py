"""TEST DOUBLE of habana_frameworks.torch.core.torch_overwrites: what lazy mode changes in torch.

Source: gaudi-pytorch-bridge python_packages/habana_frameworks/torch/core/torch_overwrites.py
@ 5a56187 (1.19) and the same file @ ea38cef (the newer copy), alike in all that is modelled
here. ``core/__init__.py:49`` runs ``overwrite_torch_functions()`` at import; in lazy mode only
(each under ``if is_lazy():``) it:

- names every module given to another (``Module.__setattr__``, ``add_module``: lines 164-183,
  262-282): ``custom_name``, ``names_hook = True``, a forward pre-hook and an always-called
  forward hook, which keep a stack of module names for the bridge's debug output and hook each
  output tensor that requires grad (``names_hook`` on it too). The root module is never named.
- wraps ``torch.save`` (lines 385-432): every tensor inside dicts, lists and tuples is saved as
  ``t.data.detach().clone().cpu()`` and the containers are rebuilt as plain ``dict``, ``list``,
  ``tuple`` (an ``OrderedDict`` state dict loses its ``_metadata``, tied tensors are saved
  twice, a ``Parameter`` as a ``Tensor``); pickle protocol 4 by default.
- wraps ``torch.load`` (lines 497-560): ``weights_only`` defaults to False (stock torch >= 2.6:
  True), everything is loaded to the CPU and then the tensors inside dicts, lists and tuples are
  moved to ``map_location``.
- has torch's weights-only loads (``torch.serialization._load``, ``_legacy_load``) use the
  bridge's own unpickler, which reads protocol 4 (lines 434-483; ``utils/_weights_only_unpickler``).
- wraps ``Tensor._reduce_ex_internal`` (lines 344-360): a pickled HPU tensor names the bridge's
  ``_deserialize_habana_wrapper``, so a file holding one outside those containers (a whole
  module, an object's attribute) needs the bridge to be loaded.

Not emulated: the inference-mode renaming of ``relu`` modules (``PT_HPU_INFERENCE_MODE``),
weight sharing (``core/weight_sharing.py``, on in lazy mode unless ``PT_HPU_WEIGHT_SHARING=0``:
it turns each parameter read through a module into a ``HabanaParameterWrapper`` and keeps tied
parameters tied across ``Module.to``, which lazy tensors cannot do in place; the double's
``Module.to`` already keeps them tied), and the wrappers applied in every mode (seeds,
``fork_rng``, ``record_stream``, the process-group cache).
"""

import pickle
import threading
from collections import deque
from collections.abc import Callable

import torch

from habana_frameworks.torch.utils import _weights_only_unpickler
from habana_frameworks.torch.utils.internal import is_lazy

LAZY_DEFAULT_PROTOCOL = 4
_ORIGINAL: dict = {}  # (owner, name) -> what torch had there, for undo()
_names: deque = deque()  # the names of the modules whose forward is running, outermost first
_lock = threading.Lock()


def _named(obj) -> bool:
    return getattr(obj, "names_hook", False) is True


def _pre_fwd_hook(module, input):
    with _lock:
        _names.append(f"{_names[-1]}/{module.custom_name}" if _names else module.custom_name)


def _gen_grad_hook(name):
    def grad_hook(grad):  # the bridge names the module for its debug output; grad unchanged
        return grad

    return grad_hook


def _post_fwd_hook(module, input, output):
    with _lock:
        name = "gradient/" + _names.pop()
        try:  # a bare except in the bridge: outputs it cannot iterate are left as they are
            for out in (output,) if isinstance(output, torch.Tensor) else output:
                if isinstance(out, torch.Tensor) and out.requires_grad and not _named(out):
                    out.register_hook(_gen_grad_hook(name))
                    out.names_hook = True
        except Exception:
            pass


def _name_module(value, name) -> None:
    if isinstance(value, torch.nn.Module) and not _named(value):
        try:
            value.custom_name = name
            value.register_forward_pre_hook(_pre_fwd_hook)
            value.register_forward_hook(_post_fwd_hook, always_call=True)
            value.names_hook = True
        except RuntimeError:
            pass


class HpuMarker:
    pass


def _deserialize_habana_wrapper(func, marker, *args):
    return func(*args)


def _map(obj, leaf, keep_size: bool):
    """``leaf`` applied to every tensor inside dicts, lists and tuples, rebuilt as plain ones
    (the save wrapper keeps a ``torch.Size``; the load wrapper's walk makes it a tuple)."""
    if isinstance(obj, torch.Tensor):
        return leaf(obj)
    if isinstance(obj, dict):
        return {k: _map(v, leaf, keep_size) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_map(e, leaf, keep_size) for e in obj]
    if isinstance(obj, tuple) and not (keep_size and isinstance(obj, torch.Size)):
        return tuple(_map(e, leaf, keep_size) for e in obj)
    return obj


def overwrite_torch_functions() -> None:
    if not is_lazy():
        return
    setattr_orig = torch.nn.Module.__setattr__
    add_module_orig = torch.nn.Module.add_module
    reduce_orig = torch.Tensor._reduce_ex_internal
    save_orig, load_orig = torch.save, torch.load
    serialization = torch.serialization

    def protocol_4(load_internal):  # the weights-only unpickler swapped for the bridge's
        def wrap(f, map_location, pickle_module, *args, **kwargs):
            if pickle_module.__name__ == "torch._weights_only_unpickler":
                pickle_module = _weights_only_unpickler
            return load_internal(f, map_location, pickle_module, *args, **kwargs)

        return wrap

    def wrap_set_attr(self, name, value):
        _name_module(value, name)
        setattr_orig(self, name, value)

    def wrap_add_module(self, name, module):
        _name_module(module, name)
        add_module_orig(self, name, module)

    def reduce_ex_internal(self, proto):
        with torch.no_grad():
            func, args = reduce_orig(self, proto)
        if self.device.type.startswith("hpu"):
            return _deserialize_habana_wrapper, (func, HpuMarker(), *args)
        return func, args

    def wrap_save(obj, f, pickle_module=pickle, pickle_protocol=LAZY_DEFAULT_PROTOCOL,
                  _use_new_zipfile_serialization=True, _disable_byteorder_record=False):
        obj = _map(obj, lambda t: t.data.detach().clone().cpu(), keep_size=True)
        save_orig(obj=obj, f=f, pickle_module=pickle_module, pickle_protocol=pickle_protocol,
                  _use_new_zipfile_serialization=_use_new_zipfile_serialization,
                  _disable_byteorder_record=_disable_byteorder_record)

    def wrap_load(f, map_location=None, pickle_module=pickle, weights_only=False, mmap=None,
                  **pickle_load_args):
        if weights_only is True and pickle_module is not None:
            pickle_module = None  # stock torch refuses a pickle module with weights_only
        obj = load_orig(f, map_location="cpu", pickle_module=pickle_module,
                        weights_only=weights_only, mmap=mmap, **pickle_load_args)
        device = "cpu"
        if isinstance(map_location, (str, torch.device, Callable)):
            device = map_location
        elif isinstance(map_location, dict):
            device = map_location.get(device, device)
        if device == "cpu":
            return obj
        move = (lambda t: device(t, t.device)) if callable(device) else (lambda t: t.to(device))
        return _map(obj, move, keep_size=False)

    for owner, name, new in ((torch.nn.Module, "__setattr__", wrap_set_attr),
                             (torch.nn.Module, "add_module", wrap_add_module),
                             (torch.Tensor, "_reduce_ex_internal", reduce_ex_internal),
                             (torch, "save", wrap_save), (torch, "load", wrap_load),
                             (serialization, "_load", protocol_4(serialization._load)),
                             (serialization, "_legacy_load", protocol_4(serialization._legacy_load))):
        _ORIGINAL.setdefault((owner, name), getattr(owner, name))
        setattr(owner, name, new)


def undo() -> None:
    """Test hook (not bridge API): put torch's own functions back (a bridge never unloads; the
    ``fake_hpu`` fixture drops the double after each test)."""
    for (owner, name), value in _ORIGINAL.items():
        setattr(owner, name, value)
    _ORIGINAL.clear()
