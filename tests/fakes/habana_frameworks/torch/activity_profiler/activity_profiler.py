"""TEST DOUBLE of habana_frameworks.torch.activity_profiler: importing it replaces
``torch.profiler.profile``, ``torch.profiler.ProfilerActivity`` and
``torch.autograd.profiler.profile`` with the bridge's own, as 1.19 does.

Source: gaudi-pytorch-bridge @ 5a56187, python_packages/habana_frameworks/torch/
activity_profiler/activity_profiler.py (imported by torch/__init__.py, line 53):
- ``torch.profiler.ProfilerActivity`` becomes a Python ``Enum`` (CPU, CUDA, HPU) whose
  members are not torch's: none of them is in ``torch.profiler.supported_activities()``.
- ``profile(activities=None)`` means CPU and HPU; HPU profiling starts only when the bridge's
  ``HPU`` member is among the activities; CPU and CUDA are exchanged for torch's own members
  before torch's profiler sees them.
One difference: the bridge exchanges HPU for None and passes it on (torch 2.5 ignored it);
torch 2.13's profiler raises on None, so the double leaves it out.
"""

from enum import Enum

import torch

import habana_frameworks.torch.utils._activity_profiler_C as hpu_profiler


class DebugActivity(Enum):
    SYNAPSE_FUNCTION_CALLS = 1
    BRIDGE_FUNCTION_CALLS = 2


def register_habana_activity_profiler():
    original_activity = torch.profiler.ProfilerActivity
    originals = (torch.profiler.profile, torch.profiler.ProfilerActivity,
                 torch.autograd.profiler.profile)

    class habana_autograd_profile_wrapper(torch.autograd.profiler.profile):
        def export_chrome_trace(self, path, *args, **kwargs):
            # the bridge's takes (self, path): torch 2.5's caller passed only that; torch
            # 2.13's passes its trace metadata too, so the double hands it on
            super().export_chrome_trace(path, *args, **kwargs)
            hpu_profiler._export_logs(path)

    class habana_profile(torch.profiler.profile):
        def __init__(self, *, activities=None, debug_activities=None, schedule=None,
                     on_trace_ready=None, record_shapes=False, profile_memory=False,
                     with_stack=False, with_flops=False, with_modules=False,
                     experimental_config=None):
            own = torch.profiler.ProfilerActivity
            activities = (own.CPU, own.HPU) if activities is None else activities
            self.hpu_profiling_active = own.HPU in activities
            exchanged = [self._exchange_activity(a) for a in activities]
            debug = set(debug_activities or ())
            hpu_profiler._setup_activity_profiler_sources(
                DebugActivity.SYNAPSE_FUNCTION_CALLS in debug,
                DebugActivity.BRIDGE_FUNCTION_CALLS in debug, profile_memory,
                ["SyncTensorsGraphInternal", "hpu_lazy"])
            super().__init__(activities=[a for a in exchanged if a is not None],
                             schedule=schedule, on_trace_ready=on_trace_ready,
                             record_shapes=record_shapes, profile_memory=profile_memory,
                             with_stack=with_stack, with_flops=with_flops,
                             with_modules=with_modules, experimental_config=experimental_config)

        def _exchange_activity(self, activity):
            if activity == torch.profiler.ProfilerActivity.CPU:
                return original_activity.CPU
            if activity == torch.profiler.ProfilerActivity.CUDA:
                return original_activity.CUDA
            return None  # the bridge's HPU (and anything else): torch's profiler never sees it

        def start_trace(self):
            if self.hpu_profiling_active:
                hpu_profiler._start_activity_profiler()
            super().start_trace()

        def stop_trace(self):
            super().stop_trace()
            if self.hpu_profiling_active:
                hpu_profiler._stop_activity_profiler()

    class HabanaProfilerActivity(Enum):
        CPU = 1
        CUDA = 2
        HPU = 3

    def undo():
        """Put torch's own back (the tests' fake_hpu fixture does, after each test)."""
        (torch.profiler.profile, torch.profiler.ProfilerActivity,
         torch.autograd.profiler.profile) = originals

    globals()["undo"] = undo  # a test hook, not the bridge's API
    torch.profiler.profile = habana_profile
    torch.profiler.ProfilerActivity = HabanaProfilerActivity
    torch.autograd.profiler.profile = habana_autograd_profile_wrapper


register_habana_activity_profiler()
