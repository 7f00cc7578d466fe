#!/usr/bin/env python3
"""The MTP draft head as a PyTorch module: the float64 reference for the engine's goldens and the trainable head.

Two forms (docs/mtp.md is the contract between this file, training and the engine):
- Flash Next (qwen4_exp): e = fc_embedding(centred-norm(embed(t_{i+1}))); u_s = fc_hidden(joint-centred-norm(H_i)_s)
  over all S*D values of the main model's streams before its final mixer; X_s = e + u_s; one decoder layer (gated
  attention with the indexer when the config has one, MoE, hyper-connections, no PLE); logits =
  lm_head(hyper_connection_mixer(X)). Chained drafts feed X back as H.
- qwen3_next: fc(concat(norm(embed(t_{i+1})), norm(h_i))), one pre-norm decoder layer, norm, lm_head; h_i is the
  main model's post-final-norm hidden (what lm_head reads), and chained drafts feed back the post-`norm` output,
  as vLLM's and mlx-lm's Qwen3-Next MTP code does.
Row i of the head (H_i with t_{i+1}, predicting t_{i+2}) sits at RoPE position i, the position of H_i.

The decoder layer, norms, hyper-connection mixer and rotary embedding are transformers' own classes, so the math is
the reference's. Construct with `make_mtp_head(text_config, dtype)`; float64 for goldens, any dtype for training.
The module runs whole sequences (causal mask, no cache): a chained draft is a re-run with the drafted rows appended.
"""
import copy

import torch
from torch import nn

# Config keys that give the number of MTP layers, first match wins. Only 1 is supported (docs/mtp.md).
MTP_LAYER_KEYS = ("mtp_num_hidden_layers", "num_nextn_predict_layers")


def mtp_layer_count(config):
    """The MTP layer count a config declares (a transformers config or a config.json dict); 0 when absent."""
    for key in MTP_LAYER_KEYS:
        v = config.get(key) if isinstance(config, dict) else getattr(config, key, None)
        if v is not None:
            return int(v)
    return 0


def _causal_mask(rows, dtype, device):
    """Additive float mask [1, 1, T, T] (0 where visible), the eager form both families' attention accepts."""
    visible = torch.ones(rows, rows, dtype=torch.bool, device=device).tril()
    mask = torch.zeros(rows, rows, dtype=dtype, device=device)
    return mask.masked_fill(~visible, torch.finfo(dtype).min)[None, None]


class _MtpHeadBase(nn.Module):
    """Shared plumbing: a rotary embedding kept out of the parameter tree (so `.to(bf16)` never rounds its
    inverse frequencies) and the mask/positions of a whole-sequence run."""

    def __init__(self, rope):
        super().__init__()
        self._rope = (rope,)  # a tuple hides it from .to(), state_dict() and parameters()

    def _rope_at(self, x, position_ids):
        rope = self._rope[0]
        if rope.inv_freq.device != x.device:
            rope.to(x.device)
        return rope(x, position_ids)

    @staticmethod
    def _positions(batch, rows, start, device):
        return (torch.arange(rows, device=device) + start).unsqueeze(0).expand(batch, rows)


class FlashNextMtpHead(_MtpHeadBase):
    """qwen4_exp form. Tensor names (under `mtp.`): pre_fc_norm_embedding [D], pre_fc_norm_hidden [S*D],
    fc_embedding [D, D], fc_hidden [D, D], layers.0.* (as a main-model attention layer, minus PLE),
    hyper_connection_mixer.*."""

    def __init__(self, config):
        from transformers.models.qwen4_exp import modeling_qwen4_exp as mq
        cfg = copy.deepcopy(config)
        cfg.num_hidden_layers = 1
        cfg.layer_types = ["qwen_sparse_attention"]
        cfg.ple_layer_ids = []
        super().__init__(mq.Qwen4ExpTextRotaryEmbedding(cfg))
        D, S, eps = cfg.hidden_size, cfg.hc_count, cfg.rms_norm_eps
        self.hc_count, self.hidden_size = S, D
        self.pre_fc_norm_embedding = mq.Qwen4ExpTextRMSNorm(D, eps=eps)
        self.pre_fc_norm_hidden = mq.Qwen4ExpTextRMSNorm(S * D, eps=eps)  # joint: one r() over all S*D values
        self.fc_embedding = nn.Linear(D, D, bias=False)
        self.fc_hidden = nn.Linear(D, D, bias=False)
        self.layers = nn.ModuleList([mq.Qwen4ExpTextDecoderLayer(cfg, 0)])
        self.hyper_connection_mixer = mq.Qwen4ExpTextGatedResidual(cfg, use_combine=False)

    @property
    def hidden_width(self):
        return self.hc_count * self.hidden_size

    def forward(self, hidden, next_ids, embed_tokens, lm_head, start=0, attention_mask=None):
        """hidden [B, T, S*D] (main-model streams H_i or a previous X), next_ids [B, T] (t_{i+1});
        row i at RoPE position start + i. Returns (logits [B, T, V], X [B, T, S*D])."""
        B, T, _ = hidden.shape
        e = self.fc_embedding(self.pre_fc_norm_embedding(embed_tokens(next_ids)))
        u = self.fc_hidden(self.pre_fc_norm_hidden(hidden).unflatten(-1, (self.hc_count, self.hidden_size)))
        x = (e.unsqueeze(-2) + u).flatten(-2)
        pos = self._positions(B, T, start, hidden.device)
        pos3 = pos[None].expand(3, B, T)  # text: equal positions on the three M-RoPE axes
        rope = self._rope_at(x, pos3)
        mask = attention_mask if attention_mask is not None else _causal_mask(T, x.dtype, x.device)
        for layer in self.layers:
            x = layer(x, position_embeddings=rope, attention_mask=mask, conv_mask=None, past_key_values=None)
        return lm_head(self.hyper_connection_mixer(x)), x


class Qwen3NextMtpHead(_MtpHeadBase):
    """qwen3_next form, with the names real Qwen3-Next checkpoints use (under `mtp.`): pre_fc_norm_embedding,
    pre_fc_norm_hidden, fc [D, 2D] over concat(embedding, hidden), layers.0.* (full attention + sparse MoE), norm."""

    def __init__(self, config):
        from transformers.models.qwen3_next import modeling_qwen3_next as mq
        cfg = copy.deepcopy(config)
        cfg.num_hidden_layers = 1
        cfg.layer_types = ["full_attention"]
        cfg.mlp_only_layers = []
        cfg.decoder_sparse_step = 1
        super().__init__(mq.Qwen3NextRotaryEmbedding(cfg))
        D, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.hidden_size = D
        self.pre_fc_norm_embedding = mq.Qwen3NextRMSNorm(D, eps=eps)
        self.pre_fc_norm_hidden = mq.Qwen3NextRMSNorm(D, eps=eps)
        self.fc = nn.Linear(2 * D, D, bias=False)
        self.layers = nn.ModuleList([mq.Qwen3NextDecoderLayer(cfg, 0)])
        self.norm = mq.Qwen3NextRMSNorm(D, eps=eps)

    @property
    def hidden_width(self):
        return self.hidden_size

    def forward(self, hidden, next_ids, embed_tokens, lm_head, start=0, attention_mask=None):
        """hidden [B, T, D] (main model's post-final-norm h_i or a previous head output); returns (logits, h_out)
        where h_out is the post-`norm` output that a chained draft feeds back."""
        B, T, _ = hidden.shape
        e = self.pre_fc_norm_embedding(embed_tokens(next_ids))
        x = self.fc(torch.cat([e, self.pre_fc_norm_hidden(hidden)], dim=-1))
        pos = self._positions(B, T, start, hidden.device)
        rope = self._rope_at(x, pos)
        mask = attention_mask if attention_mask is not None else _causal_mask(T, x.dtype, x.device)
        for layer in self.layers:
            x = layer(x, position_embeddings=rope, attention_mask=mask, position_ids=pos)
        out = self.norm(x)
        return lm_head(out), out


def make_mtp_head(config, dtype=torch.float32):
    """The head for a text config (qwen4_exp or qwen3_next); parameters zero/default-initialised in `dtype`."""
    kind = config.model_type
    if kind.startswith("qwen4_exp"):
        head = FlashNextMtpHead(config)
    elif kind == "qwen3_next":
        head = Qwen3NextMtpHead(config)
    else:
        raise ValueError(f"no MTP head form for model_type {kind!r}")
    return head.to(dtype)


def text_model(causal_lm):
    """The text decoder inside a *ForCausalLM or *ForConditionalGeneration."""
    inner = causal_lm.model
    return getattr(inner, "language_model", inner)


def main_hidden(causal_lm, input_ids, **kwargs):
    """Runs the main model; returns (logits, hidden): for qwen4_exp the streams H [B, T, S*D] entering the final
    hyper-connection mixer, for qwen3_next the post-final-norm hidden [B, T, D]."""
    tm = text_model(causal_lm)
    captured = {}
    if hasattr(tm, "hyper_connection_mixer"):
        handle = tm.hyper_connection_mixer.register_forward_pre_hook(
            lambda mod, args: captured.__setitem__("h", args[0]))
    else:
        handle = tm.norm.register_forward_hook(lambda mod, args, out: captured.__setitem__("h", out))
    try:
        out = causal_lm(input_ids=input_ids, use_cache=False, **kwargs)
    finally:
        handle.remove()
    return out.logits, captured["h"]


def head_inputs(causal_lm):
    """(embed_tokens, lm_head) shared with the main model."""
    return text_model(causal_lm).embed_tokens, causal_lm.lm_head


def teacher_forced(head, causal_lm, tokens, next_token):
    """Head logits at every position of `tokens` [T] (row i reads H_i and t_{i+1}; the last row reads
    `next_token`). Returns (main logits [T, V], H [T, W], head logits [T, V], X [T, W])."""
    ids = torch.tensor([tokens])
    main_logits, H = main_hidden(causal_lm, ids)
    nxt = torch.tensor([list(tokens[1:]) + [next_token]])
    embed, lm_head = head_inputs(causal_lm)
    logits, X = head(H, nxt, embed, lm_head)
    return main_logits[0], H[0], logits[0], X[0]


def chained_drafts(head, causal_lm, tokens, next_token, depth):
    """Greedy chained drafts from the last position: depth 1 is the teacher-forced last row; each further depth
    appends a row at the next position that reads the previous row's X and the previous draft. Returns the draft
    tokens and the logits [depth, V] of the appended rows, each computed by a whole-sequence re-run."""
    ids = torch.tensor([tokens])
    _, H = main_hidden(causal_lm, ids)
    embed, lm_head = head_inputs(causal_lm)
    hidden, nxt = H, list(tokens[1:]) + [next_token]
    drafts, rows = [], []
    for _ in range(depth):
        logits, X = head(hidden, torch.tensor([nxt]), embed, lm_head)
        last = logits[0, -1]
        rows.append(last)
        drafts.append(int(torch.argmax(last)))
        hidden = torch.cat([hidden, X[:, -1:]], dim=1)
        nxt = nxt + [drafts[-1]]
    return drafts, torch.stack(rows)


def hf_tensors(head, prefix="mtp."):
    """The head's tensors under checkpoint names: experts split per expert (`experts.E.{gate,up,down}_proj`) as
    save_pretrained writes the main model's layers."""
    out = {}
    for name, t in head.state_dict().items():
        if name.endswith("mlp.experts.gate_up_proj"):
            base = prefix + name[: -len("gate_up_proj")]
            gate, up = t.chunk(2, dim=1)
            for e in range(t.shape[0]):
                out[f"{base}{e}.gate_proj.weight"] = gate[e].contiguous()
                out[f"{base}{e}.up_proj.weight"] = up[e].contiguous()
        elif name.endswith("mlp.experts.down_proj"):
            base = prefix + name[: -len("down_proj")]
            for e in range(t.shape[0]):
                out[f"{base}{e}.down_proj.weight"] = t[e].contiguous()
        else:
            out[prefix + name] = t.contiguous()
    return out


def load_hf_tensors(head, tensors, prefix="mtp."):
    """Inverse of hf_tensors: loads checkpoint-named tensors (a dict) into the head; raises naming a missing one."""
    state = {}
    for name, t in head.state_dict().items():
        if name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.down_proj"):
            base = prefix + name[: name.rindex("experts.") + len("experts.")]
            parts = []
            for e in range(t.shape[0]):
                if name.endswith("gate_up_proj"):
                    g, u = tensors[f"{base}{e}.gate_proj.weight"], tensors[f"{base}{e}.up_proj.weight"]
                    parts.append(torch.cat([g, u], dim=0))
                else:
                    parts.append(tensors[f"{base}{e}.down_proj.weight"])
            state[name] = torch.stack(parts)
        else:
            if prefix + name not in tensors:
                raise KeyError(f"missing MTP tensor {prefix + name}")
            state[name] = tensors[prefix + name]
    head.load_state_dict({k: v.to(head.state_dict()[k].dtype) for k, v in state.items()})
