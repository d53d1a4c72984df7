"""TEST DOUBLE of habana_frameworks.torch.hpu streams and events: names only.

The bridge defines ``Stream`` (hpu/streams.py @ 5a56187) and ``Event`` (hpu/events.py @ 5a56187);
torch.compile's tracer lists ``torch.hpu.Stream`` and ``torch.hpu.Event`` whenever ``torch.hpu``
exists. The double runs nothing on a device: these are placeholders without behaviour.
"""


class Stream:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("the test double has no HPU streams")


class Event:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("the test double has no HPU events")
