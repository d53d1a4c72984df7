"""TEST DOUBLE installed as ``pyhlml`` for the emulated Gaudi node: ``tests/fakes/pyhlml_double.py``
with the cards of the bridge double (``emulate()``: ``FAKE_HPU_COUNT`` cards), so HLML and the
bridge double agree on the node. Tests that want other cards load the double file itself."""

import sys

import pyhlml_double

pyhlml_double.emulate()
sys.modules[__name__] = pyhlml_double
