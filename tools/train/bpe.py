"""Byte-level BPE vocabulary for the tiny model, trained with HF `tokenizers`, plus the tokenizer and generation
configs the engine and transformers read.

Ids 0-6 are fixed: <|endoftext|> (document separator, pad, first eos), <|im_start|> (bos), <|im_end|> (chat eos),
<think>, </think>, <tool_call>, </tool_call>; then the 256 byte tokens, then learned merges."""
import json
import os
import sys


SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>"]  # not special: they stay in decoded text for parsers
ENDOFTEXT, IM_START, IM_END = 0, 1, 2


def server_tokenizer_tools():
    """tools/make_server_test_tokenizer.py, which holds the ChatML + enable_thinking template the server tests use
    and the byte-level BPE recipe (one definition of each, reused); found beside tools/train or one level up."""
    here = os.path.dirname(os.path.abspath(__file__))
    for tools in (os.path.dirname(here), os.path.join(os.path.dirname(os.path.dirname(here)), "tools")):
        if os.path.exists(os.path.join(tools, "make_server_test_tokenizer.py")):
            sys.path.insert(0, tools)
            import make_server_test_tokenizer
            return make_server_test_tokenizer
    raise FileNotFoundError("tools/make_server_test_tokenizer.py not found next to tools/train")


def chat_template():
    return server_tokenizer_tools().TEMPLATE


def train_tokenizer(texts, vocab_size):
    tok = server_tokenizer_tools().train_byte_level_bpe(texts, vocab_size, SPECIAL, ADDED)
    ids = [tok.token_to_id(t) for t in SPECIAL + ADDED]
    if ids != list(range(len(ids))):
        raise RuntimeError(f"special token ids {ids} are not 0..{len(ids) - 1}")
    return tok


def write_tokenizer_files(tok, out_dir, max_len):
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
              "pad_token": "<|endoftext|>", "chat_template": chat_template(), "model_max_length": max_len,
              "add_bos_token": False, "clean_up_tokenization_spaces": False}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def write_generation_config(out_dir):
    config = {"bos_token_id": IM_START, "eos_token_id": [ENDOFTEXT, IM_END], "pad_token_id": ENDOFTEXT,
              "do_sample": True, "temperature": 0.6, "top_p": 0.95, "top_k": 20}
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def encode_corpus(tok, texts):
    """All documents as one token stream, each followed by <|endoftext|> (which also resets PLE n-grams)."""
    out = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        out.extend(enc.ids)
        out.append(ENDOFTEXT)
    return out
