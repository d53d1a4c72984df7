"""The model catalog and the bundled tokenizers, offline."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import workbench as wb
from workbench.catalog.modelspec import FAMILIES, TOKENIZERS, ModelSpec

from conftest import ROOT

TINY_DATA = {"bert": "docstrings-topic", "gpt2": "docstrings-lm", "t5": "docstrings-summary",
             "llama": "docstrings-lm", "unet": "digits", "sd": "digits-captioned",
             "vae": "digits-captioned"}


def _batch(family: str, n: int = 4):
    spec, data = wb.model(family), wb.dataset(TINY_DATA[family])
    if family in ("sd", "vae"):  # the text-to-image objective around the pipeline's parts; the VAE's
        from workbench.diffusion.texttoimage import from_spec

        model = from_spec(spec)
        rows = data.prepare(model.captions)["train"].select(range(n))
        return model, {k: torch.tensor(rows[k]) for k in ("pixel_values", "input_ids")}
    model, tok = spec.build(num_labels=data.num_labels)
    rows = data.prepare(tok, max_length=64)["train"].select(range(n))
    if family == "unet":
        return model, {"pixel_values": torch.tensor(rows["pixel_values"])}
    from transformers import (
        DataCollatorForLanguageModeling,
        DataCollatorForSeq2Seq,
        DataCollatorWithPadding,
    )

    collate = {"bert": DataCollatorWithPadding(tok),
               "t5": DataCollatorForSeq2Seq(tok, model=model),
               "gpt2": DataCollatorForLanguageModeling(tok, mlm=False),
               "llama": DataCollatorForLanguageModeling(tok, mlm=False)}[family]
    return model, collate([dict(r) for r in rows])


@pytest.mark.parametrize("family", list(FAMILIES))
def test_tiny_model_forward_and_backward_on_its_bundled_data(family):
    torch.manual_seed(0)
    model, batch = _batch(family)
    n = sum(p.numel() for p in model.parameters())
    assert n < 5_000_000, f"tiny {family} has {n} parameters"
    if family == "unet":
        x = batch["pixel_values"]
        assert x.shape == (4, 1, 32, 32) and x.min() >= -1 and x.max() <= 1
        noise = torch.randn_like(x)
        t = torch.randint(0, 1000, (x.shape[0],))
        loss = torch.nn.functional.mse_loss(model(x + noise, t).sample, noise)
    elif family in ("sd", "vae"):
        loss = model(**batch)["loss"]
    else:
        loss = model(**batch).loss
    assert torch.isfinite(loss)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads)


def test_spec_round_trips_through_json():
    spec = wb.model("llama", size="tiny", num_labels=3, task="classification", num_hidden_layers=3)
    again = ModelSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec and again.overrides == {"num_hidden_layers": 3}
    assert again.config().num_hidden_layers == 3


def test_catalog_names_and_sizes():
    assert wb.model("gpt2-tiny") == wb.model("gpt2", size="tiny")
    assert wb.model("gpt2", size="small").source == "openai-community/gpt2"
    assert wb.model("pretrained-minilm").family == "bert"
    table = wb.models()
    assert set(table["family"]) == set(FAMILIES)
    tiny = table[table["size"] == "tiny"]
    assert (tiny["params"] < 5_000_000).all() and (tiny["source"] == "random init").all()


@pytest.mark.parametrize("family,size,params", [
    ("gpt2", "small", 124_439_808),       # GPT-2 124M
    ("llama", "7b", 6_738_415_616),       # Llama-2-7B
    ("llama", "3-70b", 70_553_706_496),   # Meta-Llama-3-70B
    ("t5", "small", 60_506_624),          # T5-small
])
def test_num_params_offline_without_building_weights(family, size, params):
    assert wb.model(family, size=size).num_params == params


def test_hub_ids_and_local_paths_are_accepted(tmp_path):
    spec = wb.model("gpt2", size="someone/my-gpt2")
    assert spec.source == "someone/my-gpt2" and spec.size == "custom"
    model, tok = wb.model("gpt2").build()
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    local = wb.model("gpt2", size=str(tmp_path / "m"))
    rebuilt, tok2 = local.build()
    assert local.is_pretrained and len(tok2) == len(tok)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), rebuilt.state_dict().values()))
    assert (tmp_path / "m" / "model.safetensors").exists()


# ---------------------------------------------------------------- bad input, clear errors
def test_unknown_family_size_task_list_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown model family 'bret' \(did you mean 'bert'\?\); known: bert, gpt2, t5, llama, unet"):
        wb.model("bret")
    with pytest.raises(ValueError, match=r"unknown model family 'gtp2-tiny' \(did you mean 'gpt2-tiny'\?\); known: bert,"):
        wb.model("gtp2-tiny")
    with pytest.raises(ValueError, match="unknown model family 'whisper'; known: bert,"):  # nothing near
        wb.model("whisper")
    with pytest.raises(ValueError, match="unknown size for gpt2 'huge'; known: tiny, small, medium, large, xl"):
        wb.model("gpt2", size="huge")
    with pytest.raises(ValueError, match=r"unknown size for gpt2 'smal' \(did you mean 'small'\?\); known: tiny,"):
        wb.model("gpt2", size="smal")
    with pytest.raises(ValueError, match="unknown task for t5 'classification'; known: seq2seq"):
        wb.model("t5", task="classification")


def test_a_config_field_the_family_does_not_have_is_refused_with_the_nearest():
    """A config keeps any keyword as an attribute and a model reads only its own fields: a
    misspelt one trained the default model without a word (GPT-2 at its default width)."""
    with pytest.raises(ValueError, match=r"^'hiden_size' is not a field of gpt2's config \(did you mean 'hidden_size'\?\)"):
        wb.model("gpt2", hiden_size=8)
    with pytest.raises(ValueError, match=r"^'sampel_size' is not a field of unet's config \(did you mean 'sample_size'\?\)"):
        wb.model("unet", sampel_size=16)
    # a field by the config's own name, by its mapped name (GPT-2's hidden_size is n_embd), a
    # common one: each reaches the config
    for fam, field, value in (("gpt2", "n_embd", 64), ("gpt2", "hidden_size", 64), ("llama", "num_key_value_heads", 2),
                              ("t5", "d_model", 64), ("bert", "hidden_dropout_prob", 0.0), ("gpt2", "tie_word_embeddings", False)):
        assert getattr(wb.model(fam, **{field: value}).config(), field) == value, (fam, field)
    assert wb.model("unet", sample_size=16).unet_config()["sample_size"] == 16


def test_missing_model_directory_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nope")):
        wb.model("bert", size=str(tmp_path / "nope"))


def test_hub_model_offline_says_so_and_how_to_use_a_local_path():
    with pytest.raises(RuntimeError, match=r"(?s)'openai-community/gpt2'.*HF_HUB_OFFLINE.*local directory"):
        wb.model("gpt2", size="small").build()


def test_tokenizer_larger_than_the_vocabulary_is_caught_before_training():
    spec = wb.model("gpt2", vocab_size=1000)
    with pytest.raises(ValueError, match=r"tokenizer has 8000 tokens but gpt2-tiny's vocab_size is 1000: pass vocab_size=8000"):
        spec.build()


def test_a_tiny_config_reads_a_shipped_tokenizer_once_and_ones_own_as_it_is_now(tmp_path, monkeypatch):
    tok = wb.model("t5").load_tokenizer()
    loads = []
    real = ModelSpec.load_tokenizer
    monkeypatch.setattr(ModelSpec, "load_tokenizer", lambda spec: loads.append(spec.name) or real(spec))
    for _ in range(3):  # the planner builds tiny-based configs hundreds of times
        cfg = wb.model("t5", d_model=64).config()
    rounded = -(-len(tok) // 64) * 64
    assert (cfg.vocab_size, cfg.eos_token_id, cfg.decoder_start_token_id) == (rounded, tok.eos_token_id, tok.pad_token_id)
    assert len(loads) <= 1, loads  # none where an earlier test already read it
    sizes = []
    for words in (100, 200):  # a tokenizer directory of one's own may be saved again
        tok.add_tokens([f"word{words}_{i}" for i in range(words)])
        tok.save_pretrained(tmp_path)
        sizes.append((wb.model("t5", tokenizer=str(tmp_path)).config().vocab_size, -(-len(tok) // 64) * 64))
    assert [got for got, _ in sizes] == [want for _, want in sizes] == [rounded + 128, rounded + 320]


# ---------------------------------------------------------------- tokenizers
def test_bundled_tokenizers_are_small_and_load_with_autotokenizer():
    from transformers import AutoTokenizer

    total = sum(f.stat().st_size for f in TOKENIZERS.rglob("*") if f.is_file())
    assert total < 2_000_000
    text = "Return the number of items in the queue."
    for name in ("bert", "gpt2", "llama", "t5"):
        tok = AutoTokenizer.from_pretrained(TOKENIZERS / name)
        ids = tok(text)["input_ids"]
        assert tok.unk_token_id not in ids, f"{name} has unknown tokens for plain English"
        assert tok.decode(ids, skip_special_tokens=True).lower().replace(" .", ".") == text.lower()
    t5 = AutoTokenizer.from_pretrained(TOKENIZERS / "t5")
    assert t5.convert_tokens_to_ids("<extra_id_0>") != t5.unk_token_id
    assert t5("a")["input_ids"][-1] == t5.eos_token_id
    bert = AutoTokenizer.from_pretrained(TOKENIZERS / "bert")
    assert bert.convert_ids_to_tokens(bert("x")["input_ids"])[::2] == ["[CLS]", "[SEP]"]


@pytest.mark.slow
def test_tokenizer_script_regenerates_the_shipped_files(tmp_path):
    manifest = json.loads((TOKENIZERS / "MANIFEST.json").read_text())
    import tokenizers

    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if (manifest["python"], manifest["tokenizers"]) != (here, tokenizers.__version__):
        pytest.skip(f"shipped tokenizers were trained on Python {manifest['python']} / tokenizers "
                    f"{manifest['tokenizers']}; the docstring corpus differs here")
    subprocess.run([sys.executable, ROOT / "scripts" / "make_tokenizers.py", "--out", tmp_path],
                   check=True, capture_output=True)
    again = json.loads((tmp_path / "MANIFEST.json").read_text())
    assert again == manifest, "regenerated tokenizers differ from the shipped ones"


def test_a_width_or_head_count_override_carries_the_head_width_with_it():
    """transformers derives a Llama config's head_dim from its width and head count once, when
    the config is built; wb.model's overrides of either must carry it (they kept the tiny
    config's 32-wide heads: a q_proj of 4096 x 1024 for a "4096-wide, 32-head" model)."""
    spec = wb.model("llama", hidden_size=256, num_attention_heads=8, num_key_value_heads=4, num_hidden_layers=1)
    assert spec.config().head_dim == 32  # 256 / 8, by chance the tiny config's too
    wide = wb.model("llama", hidden_size=512, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1)
    with torch.device("meta"):
        model = wide._from_config(wide.config())
    attention = model.model.layers[0].self_attn
    assert wide.config().head_dim == 128 and tuple(attention.q_proj.weight.shape) == (512, 512)
    assert tuple(attention.k_proj.weight.shape) == (256, 512)  # 2 key/value heads of 128
    # a head width stated apart stays: the override's, or a named size's own
    assert wb.model("llama", hidden_size=512, num_attention_heads=4, head_dim=64).config().head_dim == 64
    assert wb.model("llama", size="7b").config().head_dim == 128
    assert wb.model("llama").config().head_dim == 32  # the tiny config, untouched


# ---------------------------------------------------------------- the real MiniLM
def test_pretrained_minilm_loads_offline_and_embeds_meaningfully():
    spec = wb.model("pretrained-minilm")
    model, tok = spec.build(num_labels=2)
    encoder = model.bert.eval()
    sentences = ["How do I open a file in Python?", "Reading files with Python's open()",
                 "The cat sat quietly on the warm windowsill."]
    enc = tok(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = encoder(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1)
    emb = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
    similar, unrelated = float(emb[0] @ emb[1]), float(emb[0] @ emb[2])
    assert similar > unrelated + 0.2, (similar, unrelated)
