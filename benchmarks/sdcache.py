"""Text-to-image training from images vs from the latent cache (``cache_latents=True``).

    python -m benchmarks sdcache --json sdcache.json

Tiny Stable Diffusion on ``digits-captioned``: wb.train from images (the VAE encoder and
the text encoder run every step) and wb.train from the cache, side by side in interleaved
rounds (warm-up steps untimed, medians, their ratio). The cache's one-off build (keying by
the weights' hashes, encoding both splits, writing the file) and its load are timed on
their own, in a temporary directory. Beside them, an estimate for Stable Diffusion 1.5:
the FLOPs of its VAE encoder, text encoder and UNet per 512x512 image, counted on the
meta device (nothing is allocated), and the share of a training step the cache removes.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from workbench.backends.registry import device as pick
from workbench.catalog.modelspec import model as as_model
from workbench.data.dataset import dataset as as_dataset
from workbench.diffusion.latentcache import cache_key, encode_all, read, write
from workbench.diffusion.texttoimage import from_spec
from workbench.liblogs import quiet_libraries
from workbench.training.engine import train

from .contenders import rotated, timer


def _steps_per_s(
    cache: bool, spec, data, dev, warmup: int, steps: int, batch_size: int, precision: str
) -> float:
    """wb.train headless from images or from the cache; steps/s of the steps after ``warmup``."""
    clock = timer(dev, warmup, warmup + steps)
    with tempfile.TemporaryDirectory() as out:
        train(
            spec,
            data,
            max_steps=warmup + steps,
            batch_size=batch_size,
            lr=1e-3,
            precision=precision,
            device=dev.kind,
            live=False,
            run_dir=out,
            save_every=10_000,
            log_every=10,
            cache_latents=cache,
            callbacks=[clock],
        )
    return clock.steps_per_s()


def build_once(spec, data, dev, precision: str) -> tuple[float, float, int]:
    """(seconds to key, encode and write the cache of ``data``, seconds to read it back, bytes)."""
    model = from_spec(spec, precision)
    prepared = data.prepare(model.captions)
    with tempfile.TemporaryDirectory() as tmp:
        dev.synchronize()
        t0 = time.perf_counter()
        path = Path(tmp) / f"{cache_key(model, data, prepared, precision)}.safetensors"
        write(encode_all(model, prepared, dev, precision), path, {})
        built = time.perf_counter() - t0
        t0 = time.perf_counter()
        if read(path, prepared) is None:
            raise RuntimeError(f"the latent cache just written to {path} does not read back")
        return built, time.perf_counter() - t0, path.stat().st_size


def sd15_flops(resolution: int = 512) -> dict[str, float]:
    """GFLOPs per image of SD 1.5's VAE encoder, text encoder (77 tokens) and UNet forward,
    counted on the meta device; the share of a full-UNet (forward + backward, about 3 forwards)
    and a LoRA (about 2: gradients still flow back through the UNet) step the cache removes."""
    import torch
    import transformers
    from torch.utils.flop_counter import FlopCounterMode

    from workbench.diffusion.pipeline import configs, diffusers

    d, cfg = diffusers(), configs("sd15", {})
    side = resolution // 8

    def count(fn) -> float:
        with FlopCounterMode(display=False) as c:
            fn()
        return c.get_total_flops() / 1e9

    with torch.device("meta"), torch.no_grad():
        vae = d.AutoencoderKL.from_config(cfg["vae"])
        unet = d.UNet2DConditionModel.from_config(cfg["unet"])
        text = transformers.CLIPTextModel(transformers.CLIPTextConfig(**cfg["text_encoder"]))
        enc = count(lambda: vae.encode(torch.empty(1, 3, resolution, resolution)))
        txt = count(lambda: text(torch.zeros(1, 77, dtype=torch.long)))
        fwd = count(
            lambda: unet(torch.empty(1, 4, side, side), torch.tensor([10]), torch.empty(1, 77, 768))
        )
    frozen = enc + txt
    return {
        "vae_encoder_gflops": enc,
        "text_encoder_gflops": txt,
        "unet_forward_gflops": fwd,
        "frozen_share_full_unet": frozen / (frozen + 3 * fwd),
        "frozen_share_lora": frozen / (frozen + 2 * fwd),
    }


def run(
    steps: int = 20,
    warmup: int = 3,
    repeats: int = 3,
    batch_size: int = 16,
    device: str = "auto",
    precision: str = "auto",
    limit: int | None = None,
    sd15: bool = True,
) -> dict[str, Any]:
    """Steps/s of tiny SD from images and from the cache, side by side; the cache's build."""
    dev = pick(device)
    precision = dev.resolve_precision(precision)
    spec, data = as_model("sd"), as_dataset("digits-captioned", limit=limit)
    ways = {"images": False, "cache": True}
    samples: dict[str, list[float]] = {k: [] for k in ways}
    builds: list[tuple[float, float, int]] = []
    with quiet_libraries():
        for r in range(repeats):
            for name in rotated(list(ways), r):
                samples[name].append(
                    _steps_per_s(ways[name], spec, data, dev, warmup, steps, batch_size, precision)
                )
            builds.append(build_once(spec, data, dev, precision))
    med = {k: statistics.median(v) for k, v in samples.items()}
    build_s, load_s = (
        statistics.median(b[0] for b in builds),
        statistics.median(b[1] for b in builds),
    )
    saved = 1 / med["images"] - 1 / med["cache"]  # seconds a step saves
    figures = {
        "build_s": build_s,
        "load_s": load_s,
        "cache_mb": builds[0][2] / 2**20,
        "break_even_steps": build_s / saved if saved > 0 else float("inf"),
        **({f"sd15_{k}": v for k, v in sd15_flops().items()} if sd15 else {}),
    }
    return {
        "bench": "sdcache",
        "device": dev.to_dict(),
        "precision": precision,
        "config": {
            "model": "sd tiny",
            "data": "digits-captioned",
            "limit": limit,
            "batch_size": batch_size,
            "warmup_steps": warmup,
            "timed_steps": steps,
            "repeats": repeats,
        },
        "results": {k: {"steps_per_s": med[k], "all": samples[k]} for k in ways},
        "figures": figures,
        "ratios": {
            "cache_vs_images": med["cache"] / med["images"],  # of the medians; and per round:
            "cache_vs_images_rounds": statistics.median(
                c / i for c, i in zip(samples["cache"], samples["images"])
            ),
        },
    }
