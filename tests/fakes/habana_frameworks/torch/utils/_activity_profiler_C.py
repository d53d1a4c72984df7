"""TEST DOUBLE of the bridge's C extension ``utils._activity_profiler_C``: it records what
the activity profiler asked for, so tests can see whether HPU profiling started.

Source: gaudi-pytorch-bridge @ 5a56187, python_packages/habana_frameworks/torch/
activity_profiler/csrc/bindings.cpp (the four functions activity_profiler.py calls).
Not emulated: device events. The real ``_export_logs(path)`` merges the device's trace
into the Chrome trace file; the double leaves the file as torch wrote it.
"""

calls: list[tuple] = []  # (function name, arguments), in call order


def _setup_activity_profiler_sources(synapse_logger, bridge_profile, profile_memory,
                                     mandatory_events):
    calls.append(("setup", synapse_logger, bridge_profile, profile_memory, tuple(mandatory_events)))


def _start_activity_profiler():
    calls.append(("start",))


def _stop_activity_profiler():
    calls.append(("stop",))


def _export_logs(path):
    calls.append(("export", str(path)))
