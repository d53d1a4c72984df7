"""The Hugging Face hub, seen from here without the network: is it switched off, is a repo in
the local cache, and the one message for an id that could not be fetched (why, and the fixes).
"""

from __future__ import annotations

import sys
from pathlib import Path

from .. import settings

TRUE = ("1", "ON", "YES", "TRUE")
# what a repo needs in the cache to build a model from it: its config and its weights
WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "diffusion_pytorch_model.safetensors",
    "diffusion_pytorch_model.safetensors.index.json",
)


def offline_switch(what: str = "model") -> str | None:
    """The variable that switches the hub off for a ``what`` (``HF_HUB_OFFLINE=1``), or None
    (huggingface_hub reads it once, at import: after that its own reading counts too)."""
    names = ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"] + (
        ["HF_DATASETS_OFFLINE"] if what == "dataset" else []
    )
    for name in names:
        if (value := settings.get(name, "")).upper() in TRUE:
            return f"{name}={value}"
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None and getattr(constants, "HF_HUB_OFFLINE", False):
        return "HF_HUB_OFFLINE (read when huggingface_hub was imported)"
    return None


def in_cache(repo_id: str, subfolder: str | None = None) -> bool:
    """Whether the local hub cache holds ``repo_id``'s config and weights (no network)."""
    from huggingface_hub import try_to_load_from_cache

    prefix = f"{subfolder}/" if subfolder else ""

    def have(name: str) -> bool:
        try:
            return isinstance(try_to_load_from_cache(repo_id, prefix + name), str)
        except Exception:  # a malformed id: not in the cache
            return False

    return have("config.json") and any(have(name) for name in WEIGHTS)


def cached_dir(repo_id: str) -> str | None:
    """The local snapshot directory of ``repo_id`` that holds its ``config.json`` (or
    ``tokenizer_config.json``), or None: reading it needs no network (no update check)."""
    from huggingface_hub import try_to_load_from_cache

    for name in ("config.json", "tokenizer_config.json"):
        try:
            found = try_to_load_from_cache(repo_id, name)
        except Exception:  # a malformed id: not in the cache
            found = None
        if isinstance(found, str):
            return str(Path(found).parent)
    return None


def hub_error(what: str, ident: str, err: Exception) -> RuntimeError:
    """A clear message for a hub id that could not be fetched: why, and the fixes."""
    switch = offline_switch(what)
    why = (
        f"the hub is switched off ({switch}) and {ident!r} is not in the local cache"
        if switch
        else "the hub could not be reached, or has no such id "
        "(or it is gated: log in with `hf auth login`)"
    )
    detail = str(err).splitlines()[0] if str(err) else ""
    download = (
        f"hf download {ident}"
        + (" --repo-type dataset" if what == "dataset" else "")
        + " --local-dir DIR"
    )
    if what == "dataset":
        local = (
            f"download it where you have a network ({download}) and pass a local file or directory "
            f"instead, or use a bundled dataset (wb.datasets())"
        )
    else:
        local = (
            "use size='tiny', which needs no hub; or download it where you have a network "
            f"({download}) "
            f"and pass the local directory as size=DIR"
        )
    online = (
        (
            "; or go online: unset HF_HUB_OFFLINE (and TRANSFORMERS_OFFLINE, HF_DATASETS_OFFLINE) "
            "before "
            "importing workbench, and the first run downloads it into the cache"
        )
        if switch
        else ""
    )
    return RuntimeError(
        f"could not load {what} {ident!r} from the Hugging Face hub: {why}. "
        f"Fix: {local}{online}. ({type(err).__name__}: {detail})"
    )
