"""Character-level tokenizer, shipped in the Hugging Face `tokenizers` format.

One token per character keeps the synthetic tasks exact (sorting and reversing
operate on characters) and makes greedy near-ties land on single tokens.
"""
from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
# Printable ASCII plus newline; the embedding is padded to a round vocab size.
CHARACTERS = tuple(chr(c) for c in range(32, 127)) + ("\n",)
VOCAB_SIZE = 128


def build_vocab() -> dict[str, int]:
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in CHARACTERS:
        vocab[ch] = len(vocab)
    assert len(vocab) <= VOCAB_SIZE
    return vocab


def build_tokenizer() -> Tokenizer:
    """A `tokenizers.Tokenizer` that splits text into characters and prepends <bos>."""
    vocab = build_vocab()
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", special_tokens=[(BOS, vocab[BOS])]
    )
    return tok


def save_tokenizer(directory: Path) -> None:
    """Write tokenizer.json plus the config files `transformers.AutoTokenizer` reads."""
    directory = Path(directory)
    build_tokenizer().save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "unk_token": UNK,
        "model_max_length": 1024,
        "clean_up_tokenization_spaces": False,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    special = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD, "unk_token": UNK}
    (directory / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")


class CharTokenizer:
    """The engine's tokenizer: `encode` / `decode` like a Hugging Face tokenizer."""

    def __init__(self, tokenizer: Tokenizer):
        self._tok = tokenizer
        self.bos_token_id = tokenizer.token_to_id(BOS)
        self.eos_token_id = tokenizer.token_to_id(EOS)
        self.pad_token_id = tokenizer.token_to_id(PAD)
        self.vocab_size = VOCAB_SIZE

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> "CharTokenizer":
        path = Path(directory) / "tokenizer.json"
        if not path.is_file():
            raise ValueError(f"model: no tokenizer.json in {directory}")
        return cls(Tokenizer.from_file(str(path)))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, token_ids, skip_special_tokens: bool = True) -> str:
        return self._tok.decode(list(token_ids), skip_special_tokens=skip_special_tokens)
