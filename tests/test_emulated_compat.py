"""Optimum Habana scripts (workbench.compat) on the emulated Gaudi, in a fresh process each,
on the current bridge's rules and on 1.19's.

The scripts are shaped like Optimum Habana's run_glue.py: the libraries (torch, transformers)
are imported first, then the Gaudi classes, then ``GaudiTrainingArguments(use_habana=True,
use_lazy_mode=True, gaudi_config_name=...)`` with a config that carries autocast op lists.
"""

from __future__ import annotations

import pytest

SCRIPT = """
import json, os, pathlib, warnings
import torch, transformers  # as run_glue.py: the libraries first
from test_attach import own_parts
from workbench.compat.optimum_habana import GaudiTrainer, GaudiTrainingArguments

config = pathlib.Path("config")
config.mkdir()
(config / "gaudi_config.json").write_text(json.dumps({
    "use_fused_adam": True, "use_fused_clip_norm": True, "use_torch_autocast": True,
    "autocast_bf16_ops": ["addmm", "bmm", "linear"],
    "autocast_fp32_ops": ["embedding", "log_softmax", "nll_loss"]}))
with warnings.catch_warnings(record=True) as said:
    warnings.simplefilter("always")
    args = GaudiTrainingArguments(
        output_dir="oh", use_habana=True, use_lazy_mode=True, gaudi_config_name=str(config),
        max_steps=2, per_device_train_batch_size=4, report_to="none", save_strategy="no",
        disable_tqdm=True)
    model, tok, data, metrics = own_parts()
    trainer = GaudiTrainer(model=model, args=args, train_dataset=data["train"],
                           processing_class=tok)
    trainer.train()
import habana_frameworks.torch as ht
from habana_frameworks.torch.utils.internal import is_lazy
out["lazy"] = is_lazy()
out["lists_at_load"] = ht.ENV_AT_LOAD["PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST"] is not None
out["device"] = str(next(trainer.model.parameters()).device)
out["said"] = [str(w.message) for w in said if issubclass(w.category, UserWarning)]
"""


@pytest.mark.parametrize("release", ["current", "1.19"])
@pytest.mark.parametrize("lazy_env", [None, "1"], ids=["mode-unset", "PT_HPU_LAZY_MODE=1"])
def test_an_optimum_habana_script_trains_in_a_fresh_process(on_hpu, release, lazy_env):
    """use_lazy_mode=True with autocast lists trains in a fresh process. Lazy mode and the
    lists reach the bridge whenever it has not loaded yet: on 1.19 always (unset means lazy,
    so `import torch` does not load it), on current bridges when PT_HPU_LAZY_MODE=1 is set as
    Intel's docs say for lazy mode. With the variable unset, a current bridge loads eager at
    `import torch`: then the script trains eager, and says why and how to get lazy."""
    env = {"FAKE_HPU_RELEASE": release, **({"PT_HPU_LAZY_MODE": lazy_env} if lazy_env else {})}
    out = on_hpu(SCRIPT, **env)
    assert out["device"] == "hpu:0"
    autoloaded_eager = release == "current" and lazy_env is None
    if autoloaded_eager:
        assert out["lazy"] is False and out["lists_at_load"] is False
        said = " ".join(out["said"])
        assert "trains in eager mode" in said and "PT_HPU_LAZY_MODE=1" in said
        assert "autocast_bf16_ops / autocast_fp32_ops are not applied" in said
    else:
        assert out["lazy"] is True, "use_lazy_mode=True runs lazy where the bridge can"
        assert out["lists_at_load"] is True, "the op lists were set before the bridge loaded"
        assert not [s for s in out["said"] if "not applied" in s or "already loaded" in s]
