"""Denoising diffusion through the ordinary Trainer: ``DiffusionModel`` adds DDPM noise at random
timesteps and returns ``{"loss": mse}`` of the UNet's predicted against the true noise.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from ..backends.registry import step_marker


class DiffusionModel(nn.Module):
    """A UNet plus a DDPM noise schedule; ``forward(pixel_values)`` returns the loss."""

    main_input_name = "pixel_values"

    def __init__(self, unet: nn.Module, num_train_timesteps: int = 1000):
        super().__init__()
        from diffusers.schedulers.scheduling_ddpm import DDPMScheduler

        self.unet = unet
        self.scheduler = DDPMScheduler(num_train_timesteps=num_train_timesteps)
        self.num_train_timesteps = num_train_timesteps
        # a text-conditioned UNet's context width (None: unconditional)
        self.conditional = getattr(unet.config, "cross_attention_dim", None)

    def _context(self, batch: int, device, dtype):
        # A text-conditioned UNet (Stable Diffusion) trains unconditionally here: a zero
        # context is the "empty prompt" of classifier-free guidance training.
        if not self.conditional:
            return {}
        return {
            "encoder_hidden_states": torch.zeros(
                batch, 77, int(self.conditional), device=device, dtype=dtype
            )
        }

    def forward(self, pixel_values: torch.Tensor, return_loss: bool = True, **_unused):
        # `return_loss=True` in the signature: a loss without labels (eval_loss is reported)
        noise = torch.randn_like(pixel_values)
        t = torch.randint(
            0, self.num_train_timesteps, (pixel_values.shape[0],), device=pixel_values.device
        )
        noisy = self.scheduler.add_noise(pixel_values, noise, t)  # pyright: ignore[reportArgumentType] diffusers says IntTensor; randint's int64 is what it takes
        pred = self.unet(
            noisy,
            t,
            **self._context(pixel_values.shape[0], pixel_values.device, pixel_values.dtype),
        ).sample
        return {"loss": nn.functional.mse_loss(pred.float(), noise.float())}

    @torch.no_grad()
    def sample(self, n: int = 16, steps: int = 50, seed: int = 0):
        """Generate ``n`` images with DDIM in ``steps`` steps; returns PIL images."""
        from diffusers.schedulers.scheduling_ddim import DDIMScheduler
        from PIL import Image

        was_training = self.training
        self.eval()
        param = next(self.unet.parameters())
        cfg: Any = self.unet.config  # diffusers' config: its keys as attributes
        size = cfg.sample_size if isinstance(cfg.sample_size, int) else cfg.sample_size[0]
        gen = torch.Generator(device="cpu").manual_seed(seed)
        x = torch.randn(n, cfg.in_channels, size, size, generator=gen).to(param.device, param.dtype)
        sched = cast(DDIMScheduler, DDIMScheduler.from_config(self.scheduler.config))
        sched.set_timesteps(steps)
        ctx = self._context(n, param.device, param.dtype)
        # HPU lazy mode: run each denoising step's graph on its own, as optimum-habana's
        # pipelines do (pipeline_stable_diffusion.py @ 1d8504c, lines 561-562), rather than
        # piling every step into one graph; a no-op on other devices
        mark_step = step_marker(param.device)
        for t in sched.timesteps:
            eps = self.unet(x, t.to(param.device), **ctx).sample
            x = sched.step(eps, t, x).prev_sample  # pyright: ignore[reportArgumentType, reportAttributeAccessIssue] diffusers: an int timestep, a tuple or an output
            mark_step()
        self.train(was_training)
        images = (
            ((x.float().clamp(-1, 1) + 1) * 127.5)
            .round()
            .to(torch.uint8)
            .cpu()
            .permute(0, 2, 3, 1)
            .numpy()
        )
        return [Image.fromarray(im[..., 0] if im.shape[-1] == 1 else im) for im in images]


def grid(images, columns: int = 8):
    """Paste PIL images into one grid image."""
    from PIL import Image

    w, h = images[0].size
    rows = (len(images) + columns - 1) // columns
    out = Image.new(images[0].mode, (columns * w, rows * h))
    for i, im in enumerate(images):
        out.paste(im, ((i % columns) * w, (i // columns) * h))
    return out
