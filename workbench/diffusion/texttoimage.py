"""Text-to-image latent diffusion through the ordinary Trainer.

``TextToImage`` holds Stable Diffusion's parts (``pipeline.Parts``) and trains the UNet as
diffusers' train_text_to_image script does (frozen VAE and text encoders, scaled latents, the
scheduler's target, optional min-SNR weighting, noise offset, caption dropout for
classifier-free guidance, LoRA, EMA); ``forward`` also takes cached encodings
(``latentcache``) and then runs neither frozen part.
"""

from __future__ import annotations

import copy
import io

import torch
from torch import nn

from ..backends.registry import step_marker
from .pipeline import VAE_OPTIONS, Captions, Parts, options

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]  # the UNet's attention projections
GRID_COLUMNS = 10  # a sample grid's thumbnails per row


def add_lora(unet, lora: dict) -> None:
    """Freeze ``unet`` and give its attention projections LoRA adapters (peft) that train."""
    try:
        import peft
    except ImportError:
        raise ImportError("LoRA needs peft: pip install 'gaudi-workbench[lora]'") from None
    cfg = dict(lora)
    config = peft.LoraConfig(
        r=cfg.pop("r", 8),
        lora_alpha=cfg.pop("alpha", 8),
        lora_dropout=cfg.pop("dropout", 0.0),
        target_modules=cfg.pop("target_modules", LORA_TARGETS),
        **cfg,
    )
    unet.requires_grad_(False)
    unet.add_adapter(config)  # diffusers' PeftAdapterMixin: only the adapters require grad


class TextToImage(nn.Module):
    """Stable Diffusion's parts; ``forward(pixel_values, input_ids)`` returns the loss."""

    main_input_name = "pixel_values"
    snr: torch.Tensor  # buffers (register_buffer), typed for the checker; the last three
    ema_steps: torch.Tensor  # only with ema and cached encodings (empty_pooled: SDXL's)
    empty_context: torch.Tensor
    empty_pooled: torch.Tensor

    def __init__(
        self,
        parts: Parts,
        *,
        prediction_type: str | None = None,
        snr_gamma: float | None = None,
        noise_offset: float = 0.0,
        caption_dropout: float = 0.1,
        ema: float | None = None,
        frozen_dtype: torch.dtype | None = None,
    ):
        super().__init__()
        self.parts = parts
        self.unet, self.vae, self.text_encoder = parts.unet, parts.vae, parts.text_encoder
        self.text_encoder_2 = parts.text_encoder_2
        self.scheduler = parts.scheduler
        if prediction_type:  # the sampler must predict what the UNet learns
            self.scheduler.register_to_config(prediction_type=prediction_type)
            parts.sampler.register_to_config(prediction_type=prediction_type)
        self.prediction_type = self.scheduler.config.prediction_type
        self.snr_gamma, self.noise_offset = snr_gamma, noise_offset
        self.caption_dropout = caption_dropout
        self.ema, self.ema_unet = ema, None
        self.latent_cache: dict | None = None  # set by use_cache: where the cached encodings are
        if ema:  # a frozen copy the Trainer's optimizer never sees; saved with the weights
            self.ema_unet = copy.deepcopy(self.unet)
            self.register_buffer("ema_steps", torch.zeros(()))
        for frozen in self.frozen:
            frozen.requires_grad_(False)
            frozen.eval()
            if (
                frozen_dtype is not None
                and frozen is not self.ema_unet
                and next(frozen.parameters()).dtype != frozen_dtype
            ):
                frozen.to(frozen_dtype)
        # the empty prompt's ids: a dropped caption (classifier-free guidance training)
        for i, tok in enumerate(parts.captions.tokenizers):
            ids = tok("", padding="max_length", max_length=tok.model_max_length, truncation=True)[
                "input_ids"
            ]
            self.register_buffer(f"empty_ids_{i}", torch.tensor(ids), persistent=False)
        acp = self.scheduler.alphas_cumprod.float()
        self.register_buffer("snr", acp / (1 - acp), persistent=False)

    def _apply(self, fn, recurse=True):
        # diffusers' add_noise moves the scheduler's alphas_cumprod to the samples' device on
        # first use (scheduling_ddpm.py:594, diffusers 0.42.1): moved with the model instead, a
        # compiled step sees it on one device from step 1 (else dynamo recompiles at step 2:
        # one more graph compile on a Gaudi; found on the emulated HPU)
        out = super()._apply(fn, recurse)
        self.scheduler.alphas_cumprod = self.scheduler.alphas_cumprod.to(self.snr.device)
        return out

    @property
    def captions(self) -> Captions:
        return self.parts.captions

    @property
    def frozen(self) -> list[nn.Module]:
        return [
            m
            for m in (self.vae, self.text_encoder, self.text_encoder_2, self.ema_unet)
            if m is not None
        ]

    @torch.no_grad()
    def _update_ema(self, ema_unet: nn.Module) -> None:
        # Run at the start of each training step, so it averages the weights the previous
        # optimizer step left (the last step's update is not in it). The decay warms up as
        # diffusers' EMAModel does: min(ema, (1 + n) / (10 + n)); a tensor, so no device sync.
        decay = torch.clamp((1 + self.ema_steps) / (10 + self.ema_steps), max=self.ema)
        for e, p in zip(ema_unet.parameters(), self.unet.parameters()):
            e.lerp_(p.detach().to(e.dtype), (1 - decay).to(e.dtype))
        self.ema_steps.add_(1)

    def train(self, mode: bool = True):
        super().train(mode)
        for frozen in self.frozen:  # the Trainer calls model.train() at every step
            frozen.eval()
        return self

    @torch.no_grad()
    def encode_text(
        self, input_ids: torch.Tensor, input_ids_2: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(prompt embeddings, SDXL's extra UNet inputs or None) of caption token ids."""
        if self.text_encoder_2 is None:
            return self.text_encoder(input_ids)[0], None
        # SDXL: both encoders' penultimate hidden states side by side, the second's pooled
        one = self.text_encoder(input_ids, output_hidden_states=True).hidden_states[-2]
        out = self.text_encoder_2(input_ids_2, output_hidden_states=True)
        return torch.cat([one, out.hidden_states[-2]], dim=-1), out.text_embeds

    def _drop_captions(self, ids: list[torch.Tensor]) -> list[torch.Tensor]:
        if not self.training or not self.caption_dropout:
            return ids
        drop = torch.rand(ids[0].shape[0], device=ids[0].device) < self.caption_dropout
        return [
            torch.where(drop[:, None], getattr(self, f"empty_ids_{i}").to(x.device), x)
            for i, x in enumerate(ids)
        ]

    @torch.no_grad()
    def encode(
        self,
        pixel_values: torch.Tensor,
        input_ids: torch.Tensor,
        input_ids_2: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """What the frozen parts make of a batch, as the latent cache keeps it: the VAE's latent
        distribution (``latent_mean``, ``latent_std``: unscaled, in the VAE's dtype) and the
        caption embeddings (``context``; SDXL: ``pooled`` too)."""
        dist = self.vae.encode(pixel_values.to(next(self.vae.parameters()).dtype)).latent_dist
        context, pooled = self.encode_text(input_ids, input_ids_2)
        out = {"latent_mean": dist.mean, "latent_std": dist.std, "context": context}
        return out if pooled is None else {**out, "pooled": pooled}

    @torch.no_grad()
    def encode_empty(self) -> dict[str, torch.Tensor]:
        """The empty prompt's embeddings (``empty_context``; SDXL: ``empty_pooled``), one row:
        what a dropped caption becomes."""
        ids = [getattr(self, f"empty_ids_{i}")[None] for i in range(len(self.captions.tokenizers))]
        context, pooled = self.encode_text(*ids)
        return (
            {"empty_context": context}
            if pooled is None
            else {"empty_context": context, "empty_pooled": pooled}
        )

    def use_cache(self, empty: dict[str, torch.Tensor], info: dict) -> None:
        """Train from cached encodings; ``empty``: ``encode_empty()``'s, kept as buffers that
        move with the model, not saved; ``info``: the cache's path and whether it was found."""
        for name, value in empty.items():
            self.register_buffer(name, value, persistent=False)
        self.latent_cache = dict(info)

    def _sampled(self, mean: torch.Tensor, std: torch.Tensor, context: torch.Tensor, pooled):
        # as diffusers' DiagonalGaussianDistribution.sample: one randn of the mean's shape and dtype
        latents = mean + std * torch.randn(mean.shape, device=mean.device, dtype=mean.dtype)
        if self.training and self.caption_dropout:  # the same draw as _drop_captions
            drop = torch.rand(mean.shape[0], device=mean.device) < self.caption_dropout
            context = torch.where(
                drop[:, None, None], self.empty_context.to(context.dtype), context
            )
            if pooled is not None:
                pooled = torch.where(drop[:, None], self.empty_pooled.to(pooled.dtype), pooled)
        return latents, context, pooled

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        input_ids: torch.Tensor | None = None,
        input_ids_2: torch.Tensor | None = None,
        latent_mean: torch.Tensor | None = None,
        latent_std: torch.Tensor | None = None,
        context: torch.Tensor | None = None,
        pooled: torch.Tensor | None = None,
        return_loss: bool = True,
        **_unused,
    ):
        # `return_loss=True` tells the Trainer the loss needs no labels (eval_loss is reported).
        # Images and caption ids run through the frozen VAE and text encoder; cached encodings
        # (latent_mean, latent_std, context[, pooled]) skip both.
        if self.ema_unet is not None and self.training:
            self._update_ema(self.ema_unet)
        with torch.no_grad():
            if latent_mean is not None:
                assert latent_std is not None and context is not None  # the cache keeps them
                latents, context, pooled = self._sampled(latent_mean, latent_std, context, pooled)
                side = latent_mean.shape[-1] * self.parts.vae_scale
            else:
                assert pixel_values is not None  # images, else the cache's encodings
                vae_dtype = next(self.vae.parameters()).dtype
                latents = self.vae.encode(pixel_values.to(vae_dtype)).latent_dist.sample()
                ids = self._drop_captions([x for x in (input_ids, input_ids_2) if x is not None])
                context, pooled = self.encode_text(*ids)
                side = pixel_values.shape[-1]
            latents = latents.float() * self.vae.config.scaling_factor
        return {"loss": self._denoising_loss(latents, context, pooled, float(side))}

    def _denoising_loss(
        self, latents: torch.Tensor, context: torch.Tensor, pooled, side: float
    ) -> torch.Tensor:
        # randn of the shape, not randn_like: the noise must not follow the latents' memory
        # format (a CPU's VAE convolution returns channels-last), so that latents from the
        # cache and from images draw the same noise for a seed
        noise = torch.randn(latents.shape, device=latents.device, dtype=latents.dtype)
        # a per-channel shift: lets the model learn very dark and bright images
        if self.noise_offset:
            noise = noise + self.noise_offset * torch.randn(
                latents.shape[0], latents.shape[1], 1, 1, device=latents.device
            )
        t = torch.randint(
            0, self.scheduler.config.num_train_timesteps, (latents.shape[0],), device=latents.device
        )
        noisy = self.scheduler.add_noise(latents, noise, t)
        target = (
            noise
            if self.prediction_type == "epsilon"
            else self.scheduler.get_velocity(latents, noise, t)
        )
        extra = None
        # SDXL's size and crop conditioning: (original, crop top-left, target)
        if pooled is not None:
            time_ids = torch.tensor([side, side, 0.0, 0.0, side, side], device=latents.device)
            extra = {"text_embeds": pooled, "time_ids": time_ids.expand(latents.shape[0], 6)}
        unet_dtype = next(self.unet.parameters()).dtype
        pred = self.unet(
            noisy.to(unet_dtype), t, context.to(unet_dtype), added_cond_kwargs=extra
        ).sample
        loss = nn.functional.mse_loss(pred.float(), target.float(), reduction="none").mean(
            dim=(1, 2, 3)
        )
        if self.snr_gamma:  # min-SNR weighting (Hang et al. 2023): min(SNR, gamma) / SNR (+1 for v)
            snr = self.snr.to(t.device)[t]
            weight = snr.clamp(max=self.snr_gamma) / (
                snr + 1 if self.prediction_type == "v_prediction" else snr
            )
            loss = loss * weight
        return loss.mean()

    @torch.no_grad()
    def sample(
        self,
        prompts: str | list[str],
        steps: int = 25,
        guidance: float = 7.5,
        seed: int = 0,
        negative_prompt: str | list[str] | None = None,
    ):
        """Images for ``prompts`` (PIL), deterministic for a ``seed``, through diffusers'
        pipeline."""
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        if not prompts or not all(isinstance(p, str) for p in prompts):
            raise ValueError(
                "run.sample(prompts): pass a prompt or a list of prompts (strings), "
                "e.g. run.sample(['a handwritten seven'])"
            )
        if steps < 1:
            raise ValueError(f"steps must be at least 1, got {steps}")
        was_training = self.training
        self.eval()
        dtype = next(self.unet.parameters()).dtype
        frozen = [next(m.parameters()).dtype for m in self.frozen]
        try:
            for m, d in zip(
                self.frozen, frozen
            ):  # the pipeline runs every part in one dtype: the UNet's
                if d != dtype:
                    m.to(dtype)
            pipe = self.parts.pipeline(
                unet=self.ema_unet if self.ema_unet is not None else self.unet
            )
            pipe.set_progress_bar_config(disable=True)
            gen = torch.Generator(device="cpu").manual_seed(seed)
            # HPU lazy mode: one graph per denoising step (optimum-habana's pipelines mark each
            # step: pipeline_stable_diffusion.py @ 1d8504c, lines 561-562); a no-op elsewhere
            mark_step = step_marker(next(self.unet.parameters()).device)

            def each_step(pipeline, i, t, tensors):
                mark_step()
                return tensors

            return pipe(
                prompts,
                num_inference_steps=steps,
                guidance_scale=guidance,
                generator=gen,
                negative_prompt=negative_prompt,
                output_type="pil",
                callback_on_step_end=each_step,
            ).images
        finally:
            for m, d in zip(self.frozen, frozen):
                if d != dtype:
                    m.to(d)
            self.train(was_training)


def sample_grid(
    model: TextToImage, prompts: list[str], steps: int = 10, seed: int = 0, guidance: float = 7.5
) -> tuple[bytes, int]:
    """(PNG bytes, columns): ``model``'s samples for ``prompts`` side by side, at most
    ``GRID_COLUMNS`` a row, each at the model's resolution (32x32 for the tiny model)."""
    from .denoising import grid

    images = model.sample(prompts, steps=steps, guidance=guidance, seed=seed)
    columns = min(len(images), GRID_COLUMNS)
    buf = io.BytesIO()
    grid(images, columns=columns).save(buf, format="PNG", optimize=True)
    return buf.getvalue(), columns


class Autoencoder(nn.Module):
    """A VAE that trains on its own: ``forward(pixel_values)`` returns MSE reconstruction +
    ``kl_weight`` x KL (per latent element against per pixel: small, to keep detail). A
    running ``latent_std`` is saved with the weights: Stable Diffusion scales by its inverse.
    """

    main_input_name = "pixel_values"
    latent_std: torch.Tensor  # a buffer

    def __init__(self, vae, captions: Captions, kl_weight: float = VAE_OPTIONS["kl_weight"]):
        super().__init__()
        self.vae, self.captions, self.kl_weight = vae, captions, kl_weight
        self.register_buffer("latent_std", torch.zeros(()))  # 0: not measured yet

    def forward(self, pixel_values: torch.Tensor, return_loss: bool = True, **_unused):
        posterior = self.vae.encode(pixel_values).latent_dist
        z = posterior.sample()
        recon = self.vae.decode(z).sample
        mse = nn.functional.mse_loss(recon.float(), pixel_values.float())
        kl = posterior.kl().mean() / z[0].numel()
        if self.training:
            with torch.no_grad():  # torch.where, not an `if`: no device sync
                std = z.detach().float().std()
                self.latent_std.copy_(
                    torch.where(self.latent_std > 0, 0.95 * self.latent_std + 0.05 * std, std)
                )
        return {"loss": mse + self.kl_weight * kl, "mse": mse.detach()}

    def sample(self, *_args, **_kw):
        raise ValueError(
            "a VAE run reconstructs images, it does not sample them: train Stable Diffusion on its "
            "latents with wb.model('sd', vae=run) and sample that run"
        )


def from_spec(spec, precision: str | None = None):
    """The objective of an ``sd`` (or ``vae``) ModelSpec: its parts built, LoRA added as it says."""
    if spec.family == "vae":
        vae, captions = spec.build()
        return Autoencoder(
            vae, captions, **{k: spec.overrides.get(k, v) for k, v in VAE_OPTIONS.items()}
        )
    parts, _ = spec.build()
    if spec.lora is not None:
        add_lora(parts.unet, spec.lora)
    return TextToImage(
        parts, **options(spec.overrides), frozen_dtype=DTYPES.get(precision) if precision else None
    )
