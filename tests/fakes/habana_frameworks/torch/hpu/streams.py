"""TEST DOUBLE of habana_frameworks.torch.hpu streams and events, on the emulated device.

The bridge defines ``Stream`` (wait_event, wait_stream, record_event, query, synchronize),
``stream()`` (a StreamContext), ``current_stream``, ``default_stream``, ``set_stream``
(hpu/streams.py @ 5a56187) and ``Event`` (record, wait, query, synchronize, elapsed_time;
hpu/events.py @ 5a56187); DeepSpeed's ZeRO makes a reduction stream with them. The emulated
device's memory is host memory and every op has finished when it returns, so each stream
is already synchronised and each event already complete: the API, with nothing to wait for.
Timing (``enable_timing``) is refused: there is no device clock to read.
"""

import contextlib


class Stream:
    def __init__(self, device=None, priority=0, **kwargs):
        from . import _get_device_index, _guard

        _guard(_get_device_index(device, optional=True))
        self.device_index, self.priority = 0, priority

    def wait_event(self, event) -> None:
        return None

    def wait_stream(self, stream) -> None:
        return None

    def record_event(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


class Event:
    def __init__(self, enable_timing=False, **kwargs):
        if enable_timing:
            raise NotImplementedError("the emulated HPU has no device clock: enable_timing")
        self.recorded = False

    def record(self, stream=None) -> None:
        self.recorded = True

    def wait(self, stream=None) -> None:
        return None

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


_default = {}


def default_stream(device=None) -> Stream:
    if "stream" not in _default:
        _default["stream"] = Stream(device)
    return _default["stream"]


_current = {}


def current_stream(device=None) -> Stream:
    return _current.get("stream") or default_stream(device)


def set_stream(stream) -> None:
    if stream is not None:
        _current["stream"] = stream


@contextlib.contextmanager
def stream(stream):
    """The bridge's StreamContext: ``stream`` is current inside the block."""
    before = _current.get("stream")
    set_stream(stream)
    try:
        yield stream
    finally:
        _current["stream"] = before
