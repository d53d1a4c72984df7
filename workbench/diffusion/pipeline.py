"""Stable Diffusion's parts: tokenizer(s), text encoder(s), VAE, UNet and two schedulers, built
from small configs or loaded from a diffusers-format directory or hub id (safetensors only).
Errors are the libraries' own: ``catalog`` names them with the fix.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..liblogs import transformers_errors_only
from .parts import SD, VAE

PARTS = ("text_encoder", "text_encoder_2", "vae", "unet", "scheduler", "sampler")
# the objective's options (wb.model("sd", ...) keywords) and their defaults
OPTIONS = {
    "prediction_type": None,
    "snr_gamma": None,
    "noise_offset": 0.0,
    "caption_dropout": 0.1,
    "ema": None,
}
VAE_OPTIONS = {"kl_weight": 1e-4}  # the VAE family's: KL per latent element against MSE per pixel


def diffusers() -> Any:
    """The diffusers module, or the pip fix (Any: its lazy top level re-exports its classes
    in a way pyright does not count as exports)."""
    try:
        import diffusers as d
    except ImportError:
        raise ImportError(
            "Stable Diffusion needs diffusers: pip install 'gaudi-workbench[diffusion]'"
        ) from None
    return d


def check_options(overrides: dict[str, Any], family: str = "sd") -> dict[str, Any]:
    """``overrides`` checked (a part's config is a dict; ``vae=`` also a trained VAE: a run,
    its directory, or a diffusers VAE directory), a Run given as ``vae=`` made its path."""
    overrides = dict(overrides)
    if family == "vae":
        bad = [k for k in overrides if k not in ("vae", *VAE_OPTIONS)]
        if bad:
            raise TypeError(
                f"unknown VAE option {bad[0]!r}; options: vae (a config dict), "
                f"{', '.join(VAE_OPTIONS)}"
            )
        return overrides
    if hasattr(overrides.get("vae"), "path"):  # a Run
        overrides["vae"] = str(overrides["vae"].path)
    if isinstance(overrides.get("vae"), (str, Path)):
        overrides["vae"] = str(Path(overrides["vae"]).expanduser().resolve())
        vae_config(overrides["vae"])  # refuses what holds no VAE, before anything is written
    for key, value in overrides.items():
        if key in PARTS and key != "sampler" and not isinstance(value, dict) and key != "vae":
            raise TypeError(
                f"{key}= takes a dict of config fields, e.g. {key}={{'layers_per_block': 1}}"
            )
        if key == "vae" and not isinstance(value, (dict, str)):
            raise TypeError(
                "vae= takes a trained VAE (a run, its directory, a diffusers VAE directory) "
                "or a dict of config fields"
            )
        if key not in PARTS and key not in OPTIONS:
            raise TypeError(
                f"unknown Stable Diffusion option {key!r}; options: {', '.join(OPTIONS)}; "
                f"part configs (dicts): {', '.join(PARTS)}"
            )
    pred = overrides.get("prediction_type")
    if pred not in (None, "epsilon", "v_prediction"):
        raise ValueError(
            f"prediction_type={pred!r}: use 'epsilon' or 'v_prediction' (or None: the scheduler's)"
        )
    p = overrides.get("caption_dropout", 0.1)
    if not 0 <= p < 1:
        raise ValueError(
            f"caption_dropout={p!r} must be at least 0 and below 1 (0.1: the usual 10% empty "
            "captions)"
        )
    gamma = overrides.get("snr_gamma")
    if gamma is not None and not gamma > 0:
        raise ValueError(
            f"snr_gamma={gamma!r} must be above 0 (5.0: the min-SNR paper's value) or None"
        )
    ema = overrides.get("ema")
    if ema is not None and not (isinstance(ema, float) and 0 < ema < 1):
        raise ValueError(
            f"ema={ema!r}: the EMA decay, a float between 0 and 1 (0.9999 is usual), or None for "
            "no EMA"
        )
    return overrides


def configs(size: str, overrides: dict[str, Any], family: str = "sd") -> dict[str, Any]:
    """The part configs of a catalog size (``tiny`` or named), with the part overrides applied
    (``vae=`` a trained VAE: its own config)."""
    info = {"sd": SD, "vae": VAE}[family]
    if size not in ("tiny", *info["sizes"]):
        raise ValueError(
            "the parts of a Stable Diffusion directory or hub id are read by build(); "
            f"num_params needs their configs: use size='tiny' or one of {', '.join(info['sizes'])}"
        )
    cfgs = dict(info["tiny"] if size == "tiny" else info["sizes"][size][1])
    # e.g. a second text encoder
    cfgs.update({k: {} for k in PARTS if k in overrides and k not in cfgs})
    if isinstance(overrides.get("vae"), str):
        return {**cfgs, "vae": vae_config(overrides["vae"]), "vae_path": overrides["vae"]}
    return {
        k: ({**v, **overrides.get(k, {})} if isinstance(v, dict) else overrides.get(k, v))
        for k, v in cfgs.items()
    }


def options(overrides: dict[str, Any]) -> dict[str, Any]:
    """The objective's options: the defaults with ``overrides`` applied."""
    return {k: overrides.get(k, v) for k, v in OPTIONS.items()}


@dataclass
class Captions:
    """What turns captioned images into a batch: the tokenizer(s), the image side, the caption
    length."""

    tokenizers: list
    resolution: int

    @property
    def caption_length(self) -> int:
        return int(self.tokenizers[0].model_max_length)


@dataclass
class Parts:
    """The pipeline's parts (diffusers' names); ``*_2`` only for SDXL."""

    tokenizer: Any
    text_encoder: Any
    vae: Any
    unet: Any
    scheduler: Any  # training: adds noise, knows the prediction type
    sampler: Any  # sampling
    tokenizer_2: Any = None
    text_encoder_2: Any = None
    extra: dict = field(default_factory=dict)

    @property
    def is_xl(self) -> bool:
        return self.text_encoder_2 is not None

    @property
    def vae_scale(self) -> int:
        return 2 ** (len(self.vae.config.block_out_channels) - 1)

    @property
    def resolution(self) -> int:
        side = self.unet.config.sample_size
        return int(side if isinstance(side, int) else side[0]) * self.vae_scale

    @property
    def captions(self) -> Captions:
        return Captions(
            [t for t in (self.tokenizer, self.tokenizer_2) if t is not None], self.resolution
        )

    def pipeline(self, unet=None):
        """diffusers' StableDiffusion(XL)Pipeline over these parts (``unet``: another UNet)."""
        # importing the pipelines warns about image processors it never uses
        with transformers_errors_only():
            d = diffusers()
            d.StableDiffusionPipeline  # noqa: B018  (diffusers imports its pipelines lazily)
        common = {
            "vae": self.vae,
            "text_encoder": self.text_encoder,
            "tokenizer": self.tokenizer,
            "unet": unet if unet is not None else self.unet,
            "scheduler": self.sampler,
        }
        if self.is_xl:
            # unguided: the empty prompt encoded, as caption dropout trains it (not SDXL's zeros)
            return d.StableDiffusionXLPipeline(
                **common,
                text_encoder_2=self.text_encoder_2,
                tokenizer_2=self.tokenizer_2,
                force_zeros_for_empty_prompt=False,
            )
        return d.StableDiffusionPipeline(
            **common, safety_checker=None, feature_extractor=None, requires_safety_checker=False
        )

    def save(self, path) -> None:
        """Write the parts as a diffusers-format directory (safetensors)."""
        self.pipeline().save_pretrained(str(path), safe_serialization=True)


def _sampler(name: str, scheduler_config: dict):
    d = diffusers()
    cls = getattr(d, name)
    extra = (
        {"set_alpha_to_one": False, "steps_offset": 1}
        if name in ("DDIMScheduler", "PNDMScheduler")
        else {}
    )
    if name == "PNDMScheduler":
        extra["skip_prk_steps"] = True
    return cls.from_config({**scheduler_config, **extra})


def _text_config(cfg: dict, tok=None):
    """A CLIPTextConfig; with ``tok`` (random init), its vocabulary and special ids."""
    import transformers

    ids = (
        {}
        if tok is None
        else {
            "vocab_size": _round_up(len(tok), 64),
            "bos_token_id": tok.bos_token_id,
            "eos_token_id": tok.eos_token_id,
            "pad_token_id": tok.pad_token_id,
        }
    )
    return transformers.CLIPTextConfig(**{**ids, **cfg})


def _text_encoder(cfg: dict, tok, projection: bool = False):
    import transformers

    cls = transformers.CLIPTextModelWithProjection if projection else transformers.CLIPTextModel
    return cls(_text_config(cfg, tok))


def build(configs: dict[str, Any], tokenizer) -> Parts:
    """Random-init parts from ``configs`` (one dict per part) around ``tokenizer``."""
    d = diffusers()
    # fixed caption length
    tokenizer.model_max_length = configs["text_encoder"]["max_position_embeddings"]
    two = "text_encoder_2" in configs
    parts = Parts(
        tokenizer=tokenizer,
        text_encoder=_text_encoder(configs["text_encoder"], tokenizer),
        vae=load_vae(configs["vae_path"])
        if "vae_path" in configs
        else d.AutoencoderKL.from_config(configs["vae"]),
        unet=d.UNet2DConditionModel.from_config(configs["unet"]),
        scheduler=d.DDPMScheduler.from_config(configs["scheduler"]),
        sampler=_sampler(configs["sampler"], configs["scheduler"]),
    )
    if two:
        parts.tokenizer_2 = tokenizer
        parts.text_encoder_2 = _text_encoder(configs["text_encoder_2"], tokenizer, projection=True)
    return parts


def num_params(configs: dict[str, Any], tokenizer=None) -> int:
    """Parameters of the text encoder(s), VAE and UNet, counted on the meta device."""
    import torch
    import transformers

    d = diffusers()
    with torch.device("meta"):
        models = [d.AutoencoderKL.from_config(configs["vae"])]
        if "unet" in configs:
            models.append(d.UNet2DConditionModel.from_config(configs["unet"]))
        for key, cls in (
            ("text_encoder", transformers.CLIPTextModel),
            ("text_encoder_2", transformers.CLIPTextModelWithProjection),
        ):
            if key in configs:
                models.append(cls(_text_config(configs[key], tokenizer)))
    return sum(p.numel() for m in models for p in m.parameters())


def build_vae(config: dict[str, Any], tokenizer):
    """(random-init AutoencoderKL, Captions) for the VAE family (captions tokenized, then
    unused)."""
    tokenizer.model_max_length = 16
    return diffusers().AutoencoderKL.from_config(config), Captions(
        [tokenizer], int(config["sample_size"])
    )


def _vae_checkpoint(path: Path) -> Path:
    """The weights of a VAE run's last checkpoint."""
    spec = json.loads((path / "spec.json").read_text())
    if spec["model"]["family"] != "vae":
        raise ValueError(
            f"vae={str(path)!r} is a {spec['model']['family']} run, not a VAE run "
            f"(train one with wb.train(wb.model('vae'), ...))"
        )
    found = sorted(
        path.glob("checkpoints/checkpoint-*/model.safetensors"),
        key=lambda p: int(p.parent.name[11:]),
    )
    if not found:
        raise FileNotFoundError(f"the VAE run {str(path)!r} has no checkpoint yet: train it first")
    return found[-1]


def vae_config(path: str) -> dict[str, Any]:
    """The config of a trained VAE: a VAE run's directory or a diffusers VAE directory."""
    p = Path(path)
    if (p / "config.json").exists():
        return {
            k: v
            for k, v in json.loads((p / "config.json").read_text()).items()
            if not k.startswith("_")
        }
    if not (p / "spec.json").exists():
        raise FileNotFoundError(
            f"vae={path!r} is neither a VAE run's directory (spec.json) nor a diffusers "
            f"VAE directory (config.json): pass wb.train(wb.model('vae'), ...)'s run or its path"
        )
    _vae_checkpoint(p)
    model = json.loads((p / "spec.json").read_text())["model"]
    return configs(model["size"], model["overrides"], "vae")["vae"]


def load_vae(path: str):
    """A trained VAE; from a run, with the scaling factor that gives its latents unit variance."""
    d, p = diffusers(), Path(path)
    if (p / "config.json").exists():
        return d.AutoencoderKL.from_pretrained(str(p), use_safetensors=True)
    from safetensors.torch import load_file

    state = load_file(str(_vae_checkpoint(p)))
    vae = d.AutoencoderKL.from_config(vae_config(path))
    vae.load_state_dict({k[len("vae.") :]: v for k, v in state.items() if k.startswith("vae.")})
    # measured while the VAE trained (the latent diffusion paper's 1 / std)
    if float(state.get("latent_std", 0)) > 0:
        vae.register_to_config(scaling_factor=float(1 / state["latent_std"]))
    return vae


def load(source: str, sampler: str | None = None, vae: str | None = None) -> Parts:
    """The parts of a diffusers-format directory or hub id, each from its subfolder; ``sampler``:
    the sampling scheduler class (default: the source's); ``vae``: a VAE directory."""
    import transformers

    d = diffusers()
    with warnings.catch_warnings():  # diffusers passes huggingface_hub an argument it deprecated
        warnings.filterwarnings("ignore", message=".*local_dir_use_symlinks", category=UserWarning)
        index = d.DiffusionPipeline.load_config(source)  # model_index.json: which parts there are
    kw: dict[str, Any] = {"use_safetensors": True}
    parts = Parts(
        tokenizer=transformers.AutoTokenizer.from_pretrained(source, subfolder="tokenizer"),
        text_encoder=transformers.CLIPTextModel.from_pretrained(
            source, subfolder="text_encoder", **kw
        ),
        vae=(
            d.AutoencoderKL.from_pretrained(vae, **kw)
            if vae
            else d.AutoencoderKL.from_pretrained(source, subfolder="vae", **kw)
        ),
        unet=d.UNet2DConditionModel.from_pretrained(source, subfolder="unet", **kw),
        scheduler=d.DDPMScheduler.from_pretrained(source, subfolder="scheduler"),
        sampler=None,
    )
    config = dict(parts.scheduler.config)
    name = sampler or (index.get("scheduler") or [None, "DDIMScheduler"])[1]
    parts.sampler = _sampler(name, config)
    if (index.get("text_encoder_2") or [None])[0] is not None:
        parts.tokenizer_2 = transformers.AutoTokenizer.from_pretrained(
            source, subfolder="tokenizer_2"
        )
        parts.text_encoder_2 = transformers.CLIPTextModelWithProjection.from_pretrained(
            source, subfolder="text_encoder_2", **kw
        )
    return parts


def _round_up(n: int, multiple: int) -> int:
    return (n + multiple - 1) // multiple * multiple
