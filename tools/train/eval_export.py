#!/usr/bin/env python3
"""Evaluates an exported checkpoint (HF layout + mtp.*) in PyTorch: main loss, MTP loss and MTP top-1 acceptance
(head argmax at row i == main argmax at row i+1) on windows of the given Python files. Confirms that the export
round-trips (body through from_pretrained, head through mtp_head.load_hf_tensors).

Usage: eval_export.py MODEL_DIR FILE... [--seq 512] [--windows 8] [--mtp-dir tools/mtp]"""
import argparse
import os
import sys

import torch
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bpe  # noqa: E402
import tiny_model  # noqa: E402
import train_tiny  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--mtp-dir", default=os.path.join(os.path.dirname(HERE), "mtp"))
    args = ap.parse_args()

    from tokenizers import Tokenizer
    from transformers import AutoConfig, Qwen4ExpForCausalLM
    mtp = train_tiny.import_mtp(args.mtp_dir)
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    texts = [open(f).read() for f in sorted(args.files)]
    stream = torch.tensor(bpe.encode_corpus(tok, texts), dtype=torch.long)
    config = AutoConfig.from_pretrained(args.model)
    config._experts_implementation, config._attn_implementation = "eager", "sdpa"
    model = Qwen4ExpForCausalLM.from_pretrained(args.model, config=config, dtype=torch.float32).eval()
    head = mtp.make_mtp_head(model.config, torch.float32)
    mtp.load_hf_tensors(head, load_file(os.path.join(args.model, "model.safetensors")))
    tiny_model.use_fast_indexer(True)  # equal to transformers' loop (check_indexer.py), much faster on CPU

    def no_amp():
        return torch.autocast("cpu", enabled=False)

    result = train_tiny.evaluate(model, head.eval(), mtp, stream, args.seq, 2, args.windows, "cpu", no_amp)
    print(f"{len(texts)} files, {len(stream)} tokens; {result}")


if __name__ == "__main__":
    main()
