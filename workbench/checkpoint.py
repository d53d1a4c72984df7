"""Checkpoints: the trained model back from a run's checkpoint directory.

Weights load from safetensors only. Remote code never runs because a file says so: whether
``trust_remote_code`` is on is the caller's decision at load time, never the run's spec.
"""

from __future__ import annotations

from pathlib import Path

from .catalog import TASK_CLASSES, ModelSpec


def load_checkpoint(spec: ModelSpec, ckpt: Path, base: Path | None = None, *,
                    trust_remote_code: bool = False):
    """(model, tokenizer) of ``spec`` from checkpoint directory ``ckpt``.

    ``base`` is where a LoRA run kept the random-init base weights its adapters sit on
    (pretrained bases are rebuilt from their source instead). Diffusion runs return the
    denoising module and no tokenizer.
    """
    if spec.task == "diffusion":
        from safetensors.torch import load_file

        from .diffusion import DiffusionModel

        unet, _ = spec.build()
        model = DiffusionModel(unet)
        model.load_state_dict(load_file(str(ckpt / "model.safetensors")))
        return model, None
    import transformers

    cls = getattr(transformers, TASK_CLASSES[spec.task])
    tok = transformers.AutoTokenizer.from_pretrained(str(ckpt))
    if spec.lora is not None:  # base weights (kept in the run, or the pretrained source) + adapters
        import peft

        if base is not None and (base / "config.json").exists():
            model = cls.from_pretrained(str(base), use_safetensors=True)
        else:
            model, _ = spec.build()
        return peft.PeftModel.from_pretrained(model, str(ckpt)), tok
    model = cls.from_pretrained(str(ckpt), use_safetensors=True, trust_remote_code=trust_remote_code)
    return model, tok


def load_base(spec: ModelSpec, base: Path):
    """The random-init base a LoRA run kept in ``base`` (its adapters cannot rebuild it)."""
    import transformers

    return getattr(transformers, TASK_CLASSES[spec.task]).from_pretrained(str(base), use_safetensors=True)
