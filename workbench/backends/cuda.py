"""NVIDIA GPUs: the CUDA backend record, built from torch.cuda and NVIDIA's management
library (NVML, ``nvidia-ml-py``) for the panel's readings and the driver's version."""

from __future__ import annotations

from .monitor import Vendor, driver_from_tool, read_vendor
from .record import Backend, noop

NVML_TEMPERATURE_GPU = 0  # the GPU die: nvidia-ml-py pynvml.py NVML_TEMPERATURE_GPU

NVML = Vendor(
    kind="cuda",
    module="pynvml",
    package="nvidia-ml-py",
    extra="cuda",
    library="NVML",
    driver="NVIDIA",
    prefix="nvml",
    error="NVMLError",
    util_field="gpu",
    sensor=NVML_TEMPERATURE_GPU,
    what="GPUs",
    fallback_name="NVIDIA GPU",
    driver_call="nvmlSystemGetDriverVersion",
)
NVIDIA_SMI = ("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")


def _cuda():
    import torch  # imported on first use, never at `import workbench`

    return torch.cuda


def available() -> bool:
    try:
        return bool(_cuda().is_available())
    except Exception:
        return False


def count() -> int:
    return int(_cuda().device_count())


def name(index: int) -> str:
    return str(_cuda().get_device_name(index))


def memory(index: int) -> dict[str, int]:
    cuda = _cuda()
    return {
        "allocated": int(cuda.memory_allocated(index)),
        "peak": int(cuda.max_memory_allocated(index)),
        "total": int(cuda.get_device_properties(index).total_memory),
    }


def reset_peak(index: int) -> None:
    _cuda().reset_peak_memory_stats(index)


def synchronize(index: int) -> None:
    _cuda().synchronize(index)


def precision(index: int) -> str:
    return "bf16" if _cuda().is_bf16_supported() else "fp16"


def monitor() -> list[dict]:
    """Every NVIDIA GPU, through NVML."""
    return read_vendor(NVML)


def driver_version() -> tuple[str | None, str]:
    """The NVIDIA driver's version, from ``nvidia-smi`` or else NVML."""
    return driver_from_tool(NVIDIA_SMI, NVML)


RECORD = Backend(
    kind="cuda",
    title="NVIDIA GPU",
    torch_device="cuda",
    dist_backend="nccl",
    compile_backend=None,
    optimizer="adamw_torch_fused",
    available=available,
    count=count,
    name=name,
    memory=memory,
    reset_peak=reset_peak,
    synchronize=synchronize,
    mark_step=noop,
    precision=precision,
    monitor=monitor,
    vendor=NVML,
    driver_version=driver_version,
    oom_marker="CUDA out of memory",
    profiler_activities=("cpu", "cuda"),
    rank_index=True,
    k8s_resource="nvidia.com/gpu",
    slurm_gres="gpu",
)
