"""Regenerate the tokenizers shipped in workbench/assets/tokenizers/.

    python scripts/make_tokenizers.py [--out DIR]

Trains four small tokenizers on the bundled `docstrings-lm` corpus (Python's own
docstrings), single-threaded so that the output is byte-for-byte reproducible for a given
Python and `tokenizers` version (MANIFEST.json records both and each file's sha256):

- bert:  WordPiece (vocabulary learnt by BPE merges), lower-cased, [CLS]/[SEP]/[PAD]/[UNK]/[MASK]
- gpt2:  byte-level BPE, <|endoftext|> as bos/eos/unk, a dedicated <pad>
- llama: byte-level BPE, <s> prepended, </s> as eos, <unk>, <pad>
- t5:    Metaspace BPE (SentencePiece-style), </s> appended, <pad>, <unk>, 100 sentinels <extra_id_N>
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

os.environ["RAYON_NUM_THREADS"] = "1"  # deterministic training (set before tokenizers loads)
os.environ["TOKENIZERS_PARALLELISM"] = "false"

from tokenizers import (  # noqa: E402
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from workbench.data import bundled  # noqa: E402

VOCAB = 8000


def _bert(corpus):
    # A WordPiece vocabulary learnt with BPE merges (what WordPieceTrainer does inside).
    # Neither WordPieceTrainer nor BpeTrainer's "##" prefix gives the same vocabulary twice
    # (their alphabets come out of a hash map), so the merges are learnt on Metaspace-marked
    # words, which is reproducible, and then renamed: "▁word" -> "word", "piece" -> "##piece".
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    learner = Tokenizer(models.BPE(unk_token="[UNK]"))
    learner.normalizer = normalizers.BertNormalizer(lowercase=True)
    learner.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.BertPreTokenizer(), pre_tokenizers.Metaspace()])
    learner.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=special))
    vocab = list(special)
    pieces = sorted(learner.get_vocab().items(), key=lambda kv: kv[1])
    for piece, _ in pieces:
        if piece in special or piece == "▁":
            continue
        word = piece[1:] if piece.startswith("▁") else "##" + piece
        if word not in vocab:
            vocab.append(word)
    for piece, _ in pieces:  # every single character may also start a word
        if len(piece) == 1 and piece != "▁" and piece not in vocab:
            vocab.append(piece)
    tok = Tokenizer(models.WordPiece(vocab={w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    tok.decoder = decoders.WordPiece()
    return tok, {"unk_token": "[UNK]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                 "sep_token": "[SEP]", "mask_token": "[MASK]"}


def _byte_bpe(corpus, special):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    return tok


def _gpt2(corpus):
    tok = _byte_bpe(corpus, ["<|endoftext|>", "<pad>"])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    eot = "<|endoftext|>"
    return tok, {"bos_token": eot, "eos_token": eot, "unk_token": eot, "pad_token": "<pad>"}


def _llama(corpus):
    tok = _byte_bpe(corpus, ["<unk>", "<s>", "</s>", "<pad>"])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=[("<s>", tok.token_to_id("<s>"))],
    )
    return tok, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}


def _t5(corpus):
    # SentencePiece-style (Metaspace) BPE: the Unigram trainer's EM is not reproducible
    # bit for bit, BPE is. Sentinels <extra_id_N> are appended at the end, as in T5.
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    sentinels = [f"<extra_id_{i}>" for i in range(100)]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=["<pad>", "</s>", "<unk>"]))
    tok.add_special_tokens(sentinels)
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B:1 </s>:1", special_tokens=[("</s>", tok.token_to_id("</s>"))],
    )
    return tok, {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
                 "additional_special_tokens": sentinels}


BUILDERS = {"bert": _bert, "gpt2": _gpt2, "llama": _llama, "t5": _t5}


def _save(tok: Tokenizer, special: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"), pretty=False)
    extra = special.pop("additional_special_tokens", None)
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 512,
              "clean_up_tokenization_spaces": False, **special}
    if extra:
        config["extra_special_tokens"] = extra
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "workbench" / "assets" / "tokenizers")
    args = p.parse_args(argv)
    corpus = bundled.load("docstrings-lm")["text"]
    import tokenizers

    manifest = {"python": f"{sys.version_info.major}.{sys.version_info.minor}",
                "tokenizers": tokenizers.__version__, "corpus_docs": len(corpus), "files": {}}
    for name, build in BUILDERS.items():
        tok, special = build(corpus)
        _save(tok, special, args.out / name)
        for f in sorted((args.out / name).iterdir()):
            manifest["files"][f"{name}/{f.name}"] = hashlib.sha256(f.read_bytes()).hexdigest()
        print(f"{name}: {tok.get_vocab_size()} tokens -> {args.out / name}")
    (args.out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
