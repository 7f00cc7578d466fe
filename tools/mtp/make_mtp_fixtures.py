#!/usr/bin/env python3
"""Writes tiny checkpoints with an MTP head and float64 goldens of the head (docs/mtp.md).

Builds on tools/fixtures/make_fixtures.py (same bf16-exact randomisation, same tie-free prompt rule) and
tools/mtp/mtp_head.py (the reference head). Each fixture dir holds what make_fixtures writes (config.json with the
MTP layer count, model.safetensors now with `mtp.*`, reference.json, logits.f32) plus:
  hidden.f32      the main model's H rows [T, W] (qwen4_exp: streams before the final mixer; qwen3_next: post-norm)
  mtp_logits.f32  the head's teacher-forced logits [T, V]; row i reads H_i and t_{i+1}, the last row the main
                  model's greedy next token
  mtp_chain.f32   logits [3, V] of a chained greedy draft from the last position (depth 1 = last teacher row)
  mtp.json        next token, drafts, margins, widths, f32 conditioning
All float files are little-endian float32 of float64 values.

Usage: python3 tools/mtp/make_mtp_fixtures.py --out tests/fixtures [--only NAME]
"""
import argparse
import copy
import json
import os
import shutil
import sys

import torch
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
sys.path.insert(0, HERE)

import make_fixtures as mf  # noqa: E402
from mtp_head import chained_drafts, hf_tensors, make_mtp_head, teacher_forced  # noqa: E402

CHAIN_DEPTH = 3


def margins(logits):
    top2 = torch.topk(logits, 2, dim=-1).values
    return (top2[..., 0] - top2[..., 1]).tolist()


@torch.no_grad()
def write_head_goldens(out_dir, model, head, tokens, next_token):
    """Writes the head's goldens; returns False when an indexer (main or head) broke an exact tie."""
    mf.TIES.positions.clear()
    _, H, logits, _ = teacher_forced(head, model, tokens, next_token)
    drafts, chain = chained_drafts(head, model, tokens, next_token, CHAIN_DEPTH)
    if mf.TIES.positions:
        return False
    # The f32 run of the same weights: how well conditioned these goldens are.
    m32, h32 = copy.deepcopy(model).to(torch.float32), copy.deepcopy(head).to(torch.float32)
    f32_err = float((teacher_forced(h32, m32, tokens, next_token)[2].double() - logits).abs().max())
    H.numpy().astype("<f4").tofile(os.path.join(out_dir, "hidden.f32"))
    logits.numpy().astype("<f4").tofile(os.path.join(out_dir, "mtp_logits.f32"))
    chain.numpy().astype("<f4").tofile(os.path.join(out_dir, "mtp_chain.f32"))
    ref = {
        "prompt": tokens,
        "next_token": next_token,
        "hidden_width": int(H.shape[-1]),
        "vocab_size": int(logits.shape[-1]),
        "teacher_forced_margins": margins(logits),
        "chain_depth": CHAIN_DEPTH,
        "chain_drafts": drafts,
        "chain_margins": margins(chain),
        "logits_absmax": float(logits.abs().max()),
        "torch_f32_maxerr": f32_err,
    }
    with open(os.path.join(out_dir, "mtp.json"), "w") as f:
        json.dump(ref, f)
    return True


def save_with_head(model, head, out_dir):
    """save_pretrained's bf16 checkpoint with the head's tensors added under `mtp.` (bf16-exact already)."""
    mf.save_bf16(model, out_dir)
    path = os.path.join(out_dir, "model.safetensors")
    tensors = load_file(path)
    tensors.update({k: v.to(torch.bfloat16) for k, v in hf_tensors(head).items()})
    save_file(tensors, path, metadata={"format": "pt"})
    os.chmod(path, 0o644)


def build_fixture(out_dir, model, head_seed, n_tokens, prompt_seed, eos_at=None):
    head = make_mtp_head(model.config, torch.float64).eval()
    mf.randomise(head, head_seed)
    save_with_head(model, head, out_dir)
    for attempt in range(20):
        tokens = mf.prompt_tokens(n_tokens, prompt_seed + 1000 * attempt, eos_at)
        if not mf.write_reference(out_dir, model, tokens, 1, {"prompt_attempt": attempt}):
            continue
        with open(os.path.join(out_dir, "reference.json")) as f:
            next_token = json.load(f)["greedy"][0]
        if write_head_goldens(out_dir, model, head, tokens, next_token):
            return
    raise RuntimeError(f"{out_dir}: no tie-free prompt in 20 attempts")


def fixture_qwen4exp_mtp(out):
    """hc 2, PLE on one layer, indexer sparse inside the prompt for the main model and the head."""
    model = mf.build_qwen4exp(
        31, hidden_size=64, hc_count=2, hc_lowrank=8, num_hidden_layers=3,
        layer_types=["linear_attention", "qwen_sparse_attention", "linear_attention"], ple_layer_ids=[1],
        linear_num_key_heads=1, linear_num_value_heads=2, mtp_num_hidden_layers=1)
    build_fixture(out, model, 32, 40, 33, eos_at=25)


def fixture_qwen3next_mtp(out):
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM
    cfg = mf.eager(Qwen3NextConfig(
        vocab_size=mf.VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, linear_conv_kernel_dim=4, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, num_experts=8, num_experts_per_tok=2, decoder_sparse_step=1,
        mlp_only_layers=[1], norm_topk_prob=True, full_attention_interval=2,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        eos_token_id=mf.EOS, bos_token_id=1, pad_token_id=0, max_position_embeddings=4096,
        num_nextn_predict_layers=1))
    model = Qwen3NextForCausalLM(cfg).eval()
    mf.randomise(model, 41)
    build_fixture(out, model, 42, 40, 43)


FIXTURES = {"qwen4exp_mtp": fixture_qwen4exp_mtp, "qwen3next_mtp": fixture_qwen3next_mtp}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--only", default=None, choices=sorted(FIXTURES))
    args = ap.parse_args()
    for name, make in FIXTURES.items():
        if args.only and args.only != name:
            continue
        d = os.path.join(args.out, name)
        if os.path.exists(d):
            shutil.rmtree(d)
        os.makedirs(d)
        make(d)


if __name__ == "__main__":
    main()
