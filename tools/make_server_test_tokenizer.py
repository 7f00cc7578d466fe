#!/usr/bin/env python3
"""Writes tests/data/server_model/{tokenizer.json,tokenizer_config.json}: a byte-level BPE tokenizer whose
vocabulary is exactly the tiny fixtures' 320 ids, with ChatML and <think> tokens, for server tests.

Ids: 0 <|endoftext|> (pad), 1 <|im_start|> (bos), 2 <|im_end|> (eos, the fixtures' eos_token_id),
3 <think>, 4 </think>, then the 256 byte tokens, then merges learned from a small fixed corpus.
Needs `pip install tokenizers`. Deterministic: rerunning gives the same files."""
import json
import pathlib

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB = 320
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<think>", "</think>"]  # not special: they stay in decoded text, where the reasoning parser finds them
CORPUS = [
    "The quick brown fox jumps over the lazy dog. " * 4,
    "Hello, world! How are you today? I am fine, thank you. " * 4,
    "user assistant system tool <tool_call> </tool_call> the and of to in is that for it as with " * 4,
    "Once upon a time there was a small model that answered questions about numbers: 1 2 3 4 5 6 7 8 9 10. " * 4,
]
TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}{{- '<think>\\n' }}{%- endif %}{%- endif %}"
)


def train_byte_level_bpe(texts, vocab_size, special, added):
    """Byte-level BPE (GPT-2 style pre-tokenizer, all 256 bytes in the alphabet) with `special + added` as ids
    0..n-1; only `special` are marked special, so the `added` tags stay in decoded text for the parsers.
    Shared with tools/train/bpe.py."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special + added, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    spec = json.loads(tok.to_str())
    for entry in spec["added_tokens"]:
        entry["special"] = entry["content"] in special
    return Tokenizer.from_str(json.dumps(spec))


def main():
    out = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "server_model"
    out.mkdir(parents=True, exist_ok=True)
    tok = train_byte_level_bpe(CORPUS, VOCAB, SPECIAL, ADDED)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    assert [tok.token_to_id(t) for t in SPECIAL + ADDED] == [0, 1, 2, 3, 4]
    tok.save(str(out / "tokenizer.json"))
    config = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "chat_template": TEMPLATE, "model_max_length": 4096}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"wrote {out}: vocab {tok.get_vocab_size()}")


if __name__ == "__main__":
    main()
