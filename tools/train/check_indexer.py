#!/usr/bin/env python3
"""Checks tiny_model's batched indexer selection against transformers' per-query loop: equal masks and logits on
a random model whose weights are large enough that indexer scores have no exact ties (relu zeros tie otherwise and
torch.topk's order among ties is arbitrary). Usage: python3 tools/train/check_indexer.py"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_model  # noqa: E402


def main():
    torch.set_default_dtype(torch.float64)
    gen = torch.Generator().manual_seed(7)
    config = tiny_model.tiny_config(vocab_size=512, max_positions=4096)
    config.hidden_size, config.indexer_budget, config.indexer_compress_ratio = 64, 32, 8
    model = tiny_model.build_model(config, experts="eager", attn="sdpa").eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2 or "norm" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * (0.3 if p.ndim >= 2 else 0.2))
    ids = torch.randint(7, 512, (2, 120), generator=gen)
    ids[0, 50] = 0  # a document separator inside the window
    for attn in ("sdpa", "eager"):  # bool and additive float masks
        model.config._attn_implementation = attn
        err = tiny_model.check_fast_indexer(model, ids)
        print(f"{attn}: batched indexer selection equals transformers' loop; max logit diff {err:.1e}")


if __name__ == "__main__":
    main()
