#!/usr/bin/env python3
"""Checks the engine against transformers on the trained checkpoint: float64 reference logits and greedy tokens of
transformers' own code (its per-query indexer loop, no training shortcuts) on a code prompt long enough that the
indexer is sparse, then `deltaserve logits` / `deltaserve generate` compared as for the test fixtures.

Usage: check_engine.py DELTASERVE_BINARY MODEL_DIR [--prompt-file F] [--tokens N] [--greedy N]
                       [--reference-from HF_DIR]
--reference-from: transformers runs HF_DIR while the engine runs MODEL_DIR; for a quantized MODEL_DIR, HF_DIR is
its float64 dequantization (dequantize_mlx.py), i.e. the same weights.
Reuses tools/fixtures (make_fixtures.write_reference, compare_engine.compare): same bound (1e-3 on every logit),
same tie handling."""
import argparse
import os
import sys
import tempfile

import torch

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TOOLS, "fixtures"))
import compare_engine  # noqa: E402
import make_fixtures  # noqa: E402  (sets float64 as the default dtype)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("model")
    ap.add_argument("--prompt-file", default=os.path.join(TOOLS, "fixtures", "compare_engine.py"))
    ap.add_argument("--tokens", type=int, default=600)
    ap.add_argument("--greedy", type=int, default=8)
    ap.add_argument("--reference-from", help="HF dir with the same weights for transformers (default MODEL_DIR)")
    args = ap.parse_args()

    from tokenizers import Tokenizer
    from transformers import AutoConfig, Qwen4ExpForCausalLM
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    with open(args.prompt_file) as f:
        ids = tok.encode(f.read(), add_special_tokens=False).ids
    while len(ids) < args.tokens:
        ids = ids + ids
    ids = ids[: args.tokens]
    reference = args.reference_from or args.model
    config = make_fixtures.eager(AutoConfig.from_pretrained(reference))
    model = Qwen4ExpForCausalLM.from_pretrained(reference, config=config, dtype=torch.float64).eval()
    with tempfile.TemporaryDirectory() as d:
        for name in os.listdir(args.model):
            os.symlink(os.path.abspath(os.path.join(args.model, name)), os.path.join(d, name))
        tie_free = make_fixtures.write_reference(d, model, ids, args.greedy)
        print(f"{len(ids)} prompt tokens; indexer sparse from position "
              f"{config.indexer_budget + config.indexer_compress_ratio - 1}; "
              f"reference {'has no' if tie_free else 'HAS'} indexer ties")
        ok = compare_engine.compare(args.binary, d)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
