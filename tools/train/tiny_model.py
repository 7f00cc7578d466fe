"""The tiny Flash Next body (transformers' Qwen4ExpForCausalLM) and two training-time helpers for its indexer.

transformers' QSA indexer loops over every (batch, query) pair in Python and its top-k selection passes no gradient,
so training needs (1) the same selection computed in one batched pass, checked against transformers' loop by
`check_fast_indexer`, and (2) a signal for the indexer weights: the KL divergence from the dense attention's mass per
key block to the softmax of the indexer's block scores (the lightning-indexer objective of DeepSeek-V3.2's sparse
attention, arXiv:2512.02556), on detached inputs so it trains the indexer alone."""
import math

import torch
import torch.nn.functional as F
from transformers import Qwen4ExpForCausalLM, Qwen4ExpTextConfig
from transformers.models.qwen4_exp import modeling_qwen4_exp as mq

from bpe import ENDOFTEXT, IM_END, IM_START


def tiny_config(vocab_size, max_positions):
    """About 20M parameters; every Flash Next part present. Sparse attention from 144 tokens of context on (9 blocks of 16, 8 kept)."""
    return Qwen4ExpTextConfig(
        vocab_size=vocab_size, hidden_size=256, num_hidden_layers=6,
        layer_types=["linear_attention", "linear_attention", "qwen_sparse_attention",
                     "linear_attention", "linear_attention", "qwen_sparse_attention"],
        num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        linear_conv_kernel_dim=4, linear_key_head_dim=64, linear_value_head_dim=64, linear_num_key_heads=2,
        linear_num_value_heads=4, num_experts=16, num_experts_per_tok=4, moe_intermediate_size=96,
        shared_expert_intermediate_size=256, norm_topk_prob=True, router_aux_loss_coef=0.01,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [4, 2, 2], "mrope_interleaved": True},
        hc_count=2, hc_lowrank=16, ple_layer_ids=[2], ple_embed_dim=64, ple_conv_kernel_size=4, ngram_size=3,
        heads_per_ngram=2, ngram_vocab_size_base=8192, make_ngram_vocab_size_divisible_by=128, seed=1234,
        split_ngram_parts=1, indexer_n_heads=4, indexer_kv_heads=1, indexer_head_dim=32, indexer_budget=128,
        indexer_compress_ratio=16, eos_token_id=[ENDOFTEXT, IM_END], bos_token_id=IM_START,
        pad_token_id=ENDOFTEXT, rms_norm_eps=1e-6, max_position_embeddings=max_positions,
        tie_word_embeddings=False, initializer_range=0.02)


def build_model(config, experts="grouped_mm", attn="sdpa"):
    config._experts_implementation = experts
    config._attn_implementation = attn
    model = Qwen4ExpForCausalLM(config)
    attach_owners(model)
    return model


def attach_owners(module):
    """Lets each indexer reach its attention layer's projections (for the KL target)."""
    for m in module.modules():
        if isinstance(m, mq.Qwen4ExpTextAttention):
            m.indexer._owner = [m]  # a list, so it is not registered as a submodule


_ORIGINAL_FORWARD = mq.Qwen4ExpTextQSAIndexer.forward


def _block_scores(indexer, hidden, cos, sin):
    """Indexer scores [B, T, NB] of every query against every complete key block, as transformers computes them."""
    b, t, _ = hidden.shape
    r, d = indexer.compress_ratio, indexer.index_head_dim
    q, k = torch.split(indexer.index_qk_proj(hidden), [indexer.index_n_heads * d, d], dim=-1)
    q = mq.apply_rotary_pos_emb(indexer.q_layernorm(q.reshape(b, t, -1, d)), cos=cos, sin=sin, unsqueeze_dim=2)
    nb = t // r
    pooled = k[:, : nb * r].reshape(b, nb, r, d).float().mean(dim=2).to(k.dtype)
    starts = torch.arange(nb, device=hidden.device) * r
    keys = mq.apply_rotary_pos_emb(indexer.k_layernorm(pooled).unsqueeze(2), cos=cos[:, starts], sin=sin[:, starts],
                                   unsqueeze_dim=2).squeeze(2)
    scores = torch.einsum("bthd,bnd->btnh", q.float(), keys.float())
    return torch.relu(scores).sum(dim=-1) / math.sqrt(d)


def _dense_block_mass(attn, hidden, cos, sin, r, nb):
    """Dense causal attention probabilities [B, T, NB], averaged over heads and summed within each key block."""
    b, t, _ = hidden.shape
    hd = attn.head_dim
    q = attn.q_proj(hidden).view(b, t, -1, 2 * hd)[..., :hd]
    q = attn.q_norm(q).transpose(1, 2)
    k = attn.k_norm(attn.k_proj(hidden).view(b, t, -1, hd)).transpose(1, 2)
    q, k = mq.apply_rotary_pos_emb(q, k, cos, sin)
    k = mq.repeat_kv(k, attn.num_key_value_groups)
    logits = torch.matmul(q.float(), k.float().transpose(2, 3)) * attn.scaling
    causal = torch.ones(t, t, dtype=torch.bool, device=hidden.device).tril()
    probs = logits.masked_fill(~causal, float("-inf")).softmax(dim=-1).mean(dim=1)
    return probs[..., : nb * r].reshape(b, t, nb, r).sum(dim=-1)


def fast_indexer_forward(self, hidden_states, position_embeddings, attention_mask, past_key_values):
    """transformers' selection for a causal, unpadded, cache-free batch, in one pass; stores `_aux_loss` when
    training. Anything else (a cache, padding) goes to transformers' own loop."""
    b, t, _ = hidden_states.shape
    cos, sin = position_embeddings
    if past_key_values is not None or cos.shape[1] != t:
        return _ORIGINAL_FORWARD(self, hidden_states, position_embeddings, attention_mask, past_key_values)
    r = self.compress_ratio
    nb = t // r
    pos = torch.arange(t, device=hidden_states.device)
    complete = (pos + 1) // r  # complete key blocks visible to each query
    causal = pos[None, :] <= pos[:, None]
    selected = causal.expand(b, t, t)
    self._aux_loss = None
    if nb > 0:
        scores = _block_scores(self, hidden_states.detach(), cos, sin)
        valid = torch.arange(nb, device=pos.device)[None, :] < complete[:, None]  # [T, NB]
        masked = scores.detach().masked_fill(~valid, float("-inf"))
        top = masked.topk(min(self.block_topk, nb), dim=-1).indices
        chosen = torch.zeros_like(valid).expand(b, t, nb).scatter(-1, top, True) & valid
        key_block = (pos // r).clamp_max(nb - 1)
        in_chosen = chosen.gather(-1, key_block.view(1, 1, t).expand(b, t, t)) & (pos < nb * r)
        tail = pos[None, :] >= (complete * r)[:, None]
        selected = (in_chosen | tail) & causal
        if self.training and hasattr(self, "_owner"):
            with torch.no_grad():
                mass = _dense_block_mass(self._owner[0], hidden_states.detach(), cos, sin, r, nb)
                target = mass.masked_fill(~valid, 0.0)
                target = target / target.sum(dim=-1, keepdim=True).clamp_min(1e-9)
            rows = complete > 0
            logq = scores.masked_fill(~valid, float("-inf")).log_softmax(dim=-1)
            kl = (target * (target.clamp_min(1e-9).log() - logq.masked_fill(~valid, 0.0))).sum(dim=-1)
            self._aux_loss = kl[:, rows].mean()
    mask = selected.unsqueeze(1)
    if attention_mask.is_floating_point():
        return torch.where(mask, attention_mask.new_zeros(()), torch.finfo(attention_mask.dtype).min)
    return mask


def use_fast_indexer(enabled=True):
    mq.Qwen4ExpTextQSAIndexer.forward = fast_indexer_forward if enabled else _ORIGINAL_FORWARD


def indexer_aux_loss(model):
    losses = [m._aux_loss for m in model.modules() if isinstance(m, mq.Qwen4ExpTextQSAIndexer)
              and getattr(m, "_aux_loss", None) is not None]
    return torch.stack(losses).mean() if losses else None


def check_fast_indexer(model, input_ids):
    """The batched selection must equal transformers' loop on the same input (tie-free random-init scores)."""
    masks = {}
    for name, enabled in (("loop", False), ("fast", True)):
        use_fast_indexer(enabled)
        captured = []
        hooks = [m.register_forward_hook(lambda mod, args, out: captured.append(out))
                 for m in model.modules() if isinstance(m, mq.Qwen4ExpTextQSAIndexer)]
        with torch.no_grad():
            logits = model(input_ids=input_ids, use_cache=False).logits
        for h in hooks:
            h.remove()
        masks[name] = (captured, logits)
    for a, b in zip(masks["loop"][0], masks["fast"][0]):
        if not torch.equal(a, b):
            raise AssertionError("fast indexer selection differs from transformers' loop")
    err = (masks["loop"][1] - masks["fast"][1]).abs().max().item()
    if err > 1e-5:
        raise AssertionError(f"fast indexer logits differ from transformers' loop by {err}")
    return err
