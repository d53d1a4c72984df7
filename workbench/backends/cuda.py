"""NVIDIA GPUs: the CUDA backend record, built from torch.cuda and NVIDIA's management
library (NVML, ``nvidia-ml-py``) for the panel's readings and the driver's version."""

from __future__ import annotations

from .cards import Card, holder
from .monitor import Unavailable, Vendor, driver_from_tool, inventory, read_vendor
from .record import Backend, Deployment, DeviceCalls, Monitoring, TrainingPolicy, noop

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
    minor_call="nvmlDeviceGetMinorNumber",
    processes_call="nvmlDeviceGetComputeRunningProcesses",  # nvidia-ml-py pynvml.py
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


def total_memory(index: int) -> int:
    # the device's properties come from the driver: no CUDA context is made for them
    return int(_cuda().get_device_properties(index).total_memory)


def cards() -> list[Card]:
    """Every NVIDIA GPU with the processes NVML says use it (NVML's running-process list:
    the driver's answer, no CUDA context); none where NVML cannot be read."""
    try:
        rows = inventory(NVML)
    except Unavailable:
        return []
    return [
        Card(
            "cuda",
            r["index"],
            r["name"],
            "GPU",
            None,
            r["total"],
            f"/dev/nvidia{r['minor']}" if r["minor"] is not None else None,
            [holder(pid) for pid in r["pids"]],
        )
        for r in rows
    ]


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
    calls=DeviceCalls(
        available=available,
        count=count,
        name=name,
        memory=memory,
        total_memory=total_memory,
        reset_peak=reset_peak,
        synchronize=synchronize,
        mark_step=noop,
        precision=precision,
    ),
    policy=TrainingPolicy(
        dist_backend="nccl",
        compile_backend=None,
        optimizer="adamw_torch_fused",
        oom_marker="CUDA out of memory",
        profiler_activities=("cpu", "cuda"),
    ),
    monitoring=Monitoring(monitor=monitor, cards=cards, driver_version=driver_version),
    deploy=Deployment(rank_index=True, k8s_resource="nvidia.com/gpu", slurm_gres="gpu"),
)
