#!/usr/bin/env python3
"""Writes tests/fixtures/flashnext_tiny: transformers' float64 reference (teacher-forced logits and a greedy
continuation) for the README's first prompt on exactly the weights models/flashnext-tiny holds, so the default test
suite checks the shipped model like any fixture (tests/unit/model_golden_test.cpp).

Usage: make_default_golden.py DEQUANTIZED_HF_DIR [--out tests/fixtures/flashnext_tiny] [--greedy 48]
DEQUANTIZED_HF_DIR comes from dequantize_mlx.py models/flashnext-tiny BF16_DIR OUT. The fixture's weight, config
and tokenizer files are relative symlinks into models/flashnext-tiny, so nothing is stored twice."""
import argparse
import os
import sys

import torch

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TOOLS)
sys.path.insert(0, os.path.join(TOOLS, "fixtures"))
import make_fixtures  # noqa: E402  (sets float64 as the default dtype)

PROMPT = "def fibonacci(n):"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reference")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "flashnext_tiny"))
    ap.add_argument("--greedy", type=int, default=48)
    args = ap.parse_args()
    from tokenizers import Tokenizer
    from transformers import AutoConfig, Qwen4ExpForCausalLM
    shipped = os.path.join(ROOT, "models", "flashnext-tiny")
    ids = Tokenizer.from_file(os.path.join(shipped, "tokenizer.json")).encode(PROMPT, add_special_tokens=False).ids
    config = make_fixtures.eager(AutoConfig.from_pretrained(args.reference))
    model = Qwen4ExpForCausalLM.from_pretrained(args.reference, config=config, dtype=torch.float64).eval()
    os.makedirs(args.out, exist_ok=True)
    for name in sorted(os.listdir(shipped)):
        if name.endswith((".json", ".safetensors")):
            link = os.path.join(args.out, name)
            if os.path.lexists(link):
                os.remove(link)
            os.symlink(os.path.relpath(os.path.join(shipped, name), args.out), link)
    tie_free = make_fixtures.write_reference(args.out, model, ids, args.greedy, {"prompt_text": PROMPT})
    print(f"{args.out}: {len(ids)} prompt tokens, {args.greedy} greedy; {'tie-free' if tie_free else 'HAS TIES'}")


if __name__ == "__main__":
    main()
