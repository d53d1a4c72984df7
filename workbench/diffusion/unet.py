"""diffusers' UNets built from a catalog UNet config (conditional or not)."""


def unet_class(cfg: dict):
    """diffusers' UNet class for a catalog UNet config."""
    try:
        from diffusers.models.unets.unet_2d import UNet2DModel
        from diffusers.models.unets.unet_2d_condition import UNet2DConditionModel
    except ImportError:
        raise ImportError(
            "the UNet needs diffusers: pip install 'gaudi-workbench[diffusion]'"
        ) from None
    return UNet2DConditionModel if cfg.get("conditional") else UNet2DModel


def new_unet(cfg: dict):
    """A random-initialised diffusers UNet for a catalog UNet config."""
    fields = {k: v for k, v in cfg.items() if k not in ("subfolder", "conditional")}
    unet = unet_class(cfg).from_config(fields)
    assert not isinstance(unet, tuple)  # the (model, unused) pair comes only when asked for
    return unet
