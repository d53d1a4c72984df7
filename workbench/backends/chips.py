"""The chip table: one record per accelerator model (memory, dense peak compute, the 16-bit
formats it runs), the one source of hardware figures that memory planning, MFU, the
pickers and the planner read. Plain data; ``device.chip()`` finds the record of a device.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GiB = 2**30


@dataclass(frozen=True, eq=False)
class Chip:
    """One device model: its memory, dense peak compute and the 16-bit formats it runs."""

    name: str
    kind: str
    title: str
    memory: int | None  # bytes of device memory (HBM, binary units); None: the host's RAM
    tflops: dict[str, float | None]  # dense peak TFLOP/s per precision; None where unknown
    pattern: str  # regex searched in a device name as ``_key`` writes it
    fp16: bool = True
    bf16: bool = True
    # bytes the allocator can hand out (HPU: memory_stats "Limit"); None: all of `memory`
    usable: int | None = None
    hbm_tbps: float | None = None  # HBM bandwidth, TB/s
    link_gbs: float | None = None  # inside a server: GB/s each way per device (NVLink, RoCE)
    scaleout_gbs: float | None = None  # between servers: GB/s each way per device
    host_gbs: float | None = None  # to the host: PCIe x16, GB/s each way (Gen4 32, Gen5 64)

    def instead(self, precision: str) -> str | None:
        """None when the chip runs ``precision``, else the precision to use in its place."""
        runs = {"bf16": self.bf16, "fp16": self.fp16, "fp32": True}
        return None if runs.get(precision, True) else next(p for p, ok in runs.items() if ok)


def _peaks(
    bf16: float | None,
    fp16: float | None = None,
    fp32: float | None = None,
    fp8: float | None = None,
) -> dict:
    """Dense peak TFLOP/s by precision (fp8: the planner's precision; training runs
    bf16/fp16/fp32)."""
    return {"bf16": bf16, "fp16": fp16, "fp32": fp32, "fp8": fp8}


# Dense (no sparsity) peaks: bf16 from docs/gaudi.md (vendor figures); NVIDIA fp16 (tensor cores, as
# bf16) and fp32 (no TF32: torch's default for matmuls) from NVIDIA's datasheets. Gaudi's
# fp16/fp32 peaks are not published in a form we trust: None. HBM: the nominal size, in GiB.
# fp8 (dense, the planner's; training runs bf16/fp16/fp32): Gaudi2 865 and Gaudi3 1835
# (= bf16; Intel's white papers, as tabulated in Bekman's ML Engineering), H100 SXM and H200
# 1979 (NVIDIA's 3,958 with sparsity / 2, as composer's speed monitor has it); sources quoted in
# assets/plan_references.json "peaks" and docs/planner-sources.md. A100: no fp8.
# Bandwidths (the planner's communication and memory-bound terms; docs/planner-sources.md):
# HBM from the vendors' datasheets (Gaudi 2 2.46, Gaudi 3 3.7, A100 40GB 1.555 / 80GB 2.039,
# H100 SXM 3.35, H200 4.8 TB/s). Inside a server, per device each way: NVLink 3 600 GB/s and
# NVLink 4 900 GB/s in both directions (A100 300, H100/H200 450); Gaudi 2's 21 of its 24
# 100 GbE ports and Gaudi 3's 21 of its 24 200 GbE ports wire the 8 cards all-to-all (262.5
# and 525 GB/s), the other 3 go out of the server (37.5 and 75 GB/s); DGX A100 / H100 give
# each GPU one 200 / 400 Gb/s InfiniBand port (25 / 50 GB/s).
# HLML names the product, not the generation (pyhlml hlmlDeviceGetName): HL-205 is the first
# Gaudi's mezzanine card, HL-225 the Gaudi 2 OAM, HL-325L / HL-338 Gaudi 3 (Intel's product names).
CHIPS: dict[str, Chip] = {
    c.name: c
    for c in (
        # Gaudi1: ~60 bf16 TFLOP/s is reported but uncertain: no MFU rather than a wrong one.
        # fp16 is not available on Gaudi1 (bf16 is on every generation).
        # usable: the allocator's pool (Gaudi2: as logged; Gaudi1: unverified; Gaudi3: unknown;
        # docs/gaudi.md)
        Chip(
            "Gaudi1",
            "hpu",
            "Intel Gaudi",
            32 * GiB,
            _peaks(None),
            r"gaudi(1(?!\d)|(?!\d))|^hl20\d",
            fp16=False,
            usable=int(29.9 * GiB),
        ),
        Chip(
            "Gaudi2",
            "hpu",
            "Intel Gaudi 2",
            96 * GiB,
            _peaks(432, fp8=865),
            r"gaudi2(?!\d)|^hl22\d",
            usable=int(94.62 * GiB),
            hbm_tbps=2.46,
            link_gbs=262.5,
            scaleout_gbs=37.5,
            host_gbs=32,
        ),
        Chip(
            "Gaudi3",
            "hpu",
            "Intel Gaudi 3",
            128 * GiB,
            _peaks(1835, fp8=1835),
            r"gaudi3(?!\d)|^hl3\d\d",
            hbm_tbps=3.7,
            link_gbs=525,
            scaleout_gbs=75,
            host_gbs=64,
        ),
        Chip(
            "A100 40GB",
            "cuda",
            "NVIDIA A100 40GB",
            40 * GiB,
            _peaks(312, 312, 19.5),
            r"a100(?!\d).*40g",
            hbm_tbps=1.555,
            link_gbs=300,
            scaleout_gbs=25,
            host_gbs=32,
        ),
        Chip(
            "A100 80GB",
            "cuda",
            "NVIDIA A100 80GB",
            80 * GiB,
            _peaks(312, 312, 19.5),
            r"a100(?!\d)",
            hbm_tbps=2.039,
            link_gbs=300,
            scaleout_gbs=25,
            host_gbs=32,
        ),
        # the PCIe and NVL boards run slower clocks: not this row
        Chip(
            "H100 SXM",
            "cuda",
            "NVIDIA H100 SXM 80GB",
            80 * GiB,
            _peaks(989, 989, 67, 1979),
            r"h100(?!\d)(?!.*(pcie|nvl))",
            hbm_tbps=3.35,
            link_gbs=450,
            scaleout_gbs=50,
            host_gbs=64,
        ),
        # GH200 (Grace Hopper) carries 96 or 144 GB of HBM beside its CPU: not this row
        Chip(
            "H200",
            "cuda",
            "NVIDIA H200",
            141 * GiB,
            _peaks(989, 989, 67, 1979),
            r"(?<!g)h200(?!\d)(?!.*nvl)",
            hbm_tbps=4.8,
            link_gbs=450,
            scaleout_gbs=50,
            host_gbs=64,
        ),
        Chip("CPU", "cpu", "CPU", None, _peaks(None), "^cpu$"),
    )
}


def _key(text: str) -> str:
    """A device name as the patterns read it: lowercased, spaces, ``-`` and ``_`` dropped except
    between two numbers, where they become ``/`` ("NVIDIA H100 80GB HBM3" is
    ``nvidiah100/80gbhbm3``), so a model number followed by a digit is another device ("NVIDIA
    RTX A1000" is not an A100)."""
    return re.sub(r"[\s_-]", "", re.sub(r"(?<=\d)[\s_-]+(?=\d)", "/", text.lower()))


def match(text: str | None, kind: str | None = None) -> Chip | None:
    """The chip named ``text`` exactly, else the first whose pattern it contains; None if none."""
    key = _key(text or "")
    if not key:
        return None
    rows = [c for c in CHIPS.values() if kind in (None, c.kind)]
    exact = [c for c in rows if _key(c.name) == key]
    return next(iter(exact), None) or next((c for c in rows if re.search(c.pattern, key)), None)
