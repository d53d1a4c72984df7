"""Checkpoints: the trained model back from a run's checkpoint directory, from safetensors only;
``trust_remote_code`` is the caller's (the ``ModelSpec`` handed in), never the run's spec.json.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..catalog.modelspec import TASK_CLASSES, ModelSpec


def problem(ckpt: Path) -> str | None:
    """Why checkpoint directory ``ckpt`` cannot be resumed from (a save killed half-way: its
    state must parse and every safetensors file have a whole header), or None."""
    try:
        return _problem(ckpt)
    except FileNotFoundError as e:  # removed as it was read (rank 0 removes a save cut short)
        return f"{Path(e.filename or ckpt).name} went away as it was read"


def _problem(ckpt: Path) -> str | None:
    state = ckpt / "trainer_state.json"
    if not state.exists():
        return "no trainer_state.json"
    try:
        json.loads(state.read_text())
    except (ValueError, UnicodeDecodeError):
        return f"trainer_state.json does not parse ({state.stat().st_size} bytes)"
    weights = sorted(ckpt.glob("*.safetensors"))
    if not weights:
        return "no safetensors weights"
    from safetensors import SafetensorError, safe_open

    for w in weights:
        # safetensors' own reader checks the header and that the file covers every tensor
        # it names ("header too small", "incomplete metadata, file not fully covered")
        try:
            with safe_open(w, framework="pt"):
                pass
        except SafetensorError as e:
            why = str(e).removeprefix("Error while deserializing header: ")
            return f"{w.name} is cut short or broken ({w.stat().st_size} bytes: {why})"
    return None


def load_checkpoint(spec: ModelSpec, ckpt: Path, base: Path | None = None):
    """(model, tokenizer) of ``spec`` from checkpoint directory ``ckpt`` (diffusion: the
    denoising module and None). ``base``: a LoRA run's random-init base weights.
    ``spec.trust_remote_code`` says whether the configs' Python files may run.
    """
    # the parts rebuilt (LoRA added), then every weight the run saved
    if spec.task == "text_to_image":
        from safetensors.torch import load_file

        from ..diffusion.texttoimage import from_spec

        model = from_spec(spec)
        model.load_state_dict(load_file(str(ckpt / "model.safetensors")))
        return model, model.captions
    if spec.task == "diffusion":
        from safetensors.torch import load_file

        from ..diffusion.denoising import DiffusionModel

        unet, _ = spec.build()
        model = DiffusionModel(unet)
        model.load_state_dict(load_file(str(ckpt / "model.safetensors")))
        return model, None
    import transformers

    trust_remote_code = spec.trust_remote_code
    cls = getattr(transformers, TASK_CLASSES[spec.task])
    # explicit: None would make transformers ask on stdin when a file names code
    tok = transformers.AutoTokenizer.from_pretrained(str(ckpt), trust_remote_code=trust_remote_code)
    if spec.lora is not None:  # base weights (kept in the run, or the pretrained source) + adapters
        import peft

        if base is not None and (base / "config.json").exists():
            model = cls.from_pretrained(
                str(base), use_safetensors=True, trust_remote_code=trust_remote_code
            )
        else:
            model, _ = spec.build()
        return peft.PeftModel.from_pretrained(model, str(ckpt)), tok
    model = cls.from_pretrained(
        str(ckpt), use_safetensors=True, trust_remote_code=trust_remote_code
    )
    return model, tok


def load_base(spec: ModelSpec, base: Path):
    """The random-init base a LoRA run kept in ``base`` (its adapters cannot rebuild it)."""
    import transformers

    return getattr(transformers, TASK_CLASSES[spec.task]).from_pretrained(
        str(base), use_safetensors=True, trust_remote_code=spec.trust_remote_code
    )
