#!/usr/bin/env python3
"""Trains the tiny Flash Next model (body + MTP head) from scratch and exports it in the HF layout.

Stages: corpus (corpus.py) -> byte-level BPE (bpe.py) -> Qwen4ExpForCausalLM + FlashNextMtpHead (tiny_model.py,
tools/mtp/mtp_head.py) -> AdamW with warmup + cosine decay under bf16 autocast -> held-out evaluation -> export.

Loss = CE(main, t_{i+1}) + MTP_WEIGHT * CE(head, t_{i+2}) + router load-balancing (router_aux_loss_coef) +
INDEXER_WEIGHT * KL(dense attention block mass || indexer block softmax) (trains only the indexer weights).

Continued training (stage 2): `--init-from DIR` starts from an exported checkpoint (its tokenizer, body and MTP
head; a fresh optimizer, so pair it with a short `--warmup` and a lower `--lr`), and `--strip-docstrings` trains on
the same corpus with docstrings and `#` comments removed (corpus.strip_source); the original held-out split is then
evaluated too, for comparison.

Reproduce: see models/flashnext-tiny-bf16/MODEL_CARD.md. `--steps auto` times steps 6-25 and fixes the total so the
run fits `--train-seconds`; the chosen number is logged, and `--steps N` replays it exactly (same seed, same data)."""
import argparse
import copy
import csv
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bpe  # noqa: E402
import corpus  # noqa: E402
import tiny_model  # noqa: E402

MTP_WEIGHT = 0.3  # the head's CE is weighted below the main loss so drafting never dominates the body's training
INDEXER_WEIGHT = 0.1


def log(msg, fh=None):
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    if fh:
        fh.write(line + "\n")
        fh.flush()


def import_mtp(path):
    sys.path.insert(0, path)
    import mtp_head
    return mtp_head


def lr_at(step, total, peak, warmup, floor):
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor * peak + (1 - floor) * peak * 0.5 * (1 + math.cos(math.pi * frac))


def forward_losses(model, head, mtp, windows, seq):
    """windows [B, seq+2]: main model reads seq tokens; head row i reads H_i and t_{i+1}, predicts t_{i+2}."""
    ids, labels = windows[:, :seq], windows[:, 1: seq + 1]
    out_logits, H = mtp.main_hidden(model, ids)
    embed, lm_head = mtp.head_inputs(model)
    head_logits, _ = head(H, windows[:, 1: seq + 1], embed, lm_head)
    v = out_logits.shape[-1]
    main = F.cross_entropy(out_logits.float().reshape(-1, v), labels.reshape(-1))
    draft = F.cross_entropy(head_logits.float().reshape(-1, v), windows[:, 2: seq + 2].reshape(-1))
    return main, draft, out_logits, head_logits


def router_aux(model):
    """transformers' load-balancing loss from the routers' logits of the last forward (captured by a hook)."""
    from transformers.models.qwen4_exp.modeling_qwen4_exp import load_balancing_loss_func
    logits = tuple(model._router_logits)
    return load_balancing_loss_func(logits, model.config.num_experts, model.config.num_experts_per_tok, None)


@torch.no_grad()
def evaluate(model, head, mtp, stream, seq, batch, max_windows, device, amp):
    """Held-out main loss, MTP loss, and MTP top-1 acceptance: head argmax at row i == main argmax at row i+1."""
    model.eval()
    head.eval()
    n = min(max_windows, (len(stream) - 2) // seq)
    tot = {"main": 0.0, "mtp": 0.0, "agree": 0, "rows": 0, "windows": 0}
    for start in range(0, n, batch):
        w = torch.stack([stream[i * seq: i * seq + seq + 2] for i in range(start, min(n, start + batch))]).to(device)
        with amp():
            main, draft, logits, hlog = forward_losses(model, head, mtp, w, seq)
        k = w.shape[0]
        tot["main"] += main.item() * k
        tot["mtp"] += draft.item() * k
        tot["agree"] += (hlog[:, :-1].argmax(-1) == logits[:, 1:].argmax(-1)).sum().item()
        tot["rows"] += k * (seq - 1)
        tot["windows"] += k
    model.train()
    head.train()
    return {"heldout_loss": tot["main"] / tot["windows"], "heldout_mtp_loss": tot["mtp"] / tot["windows"],
            "mtp_top1_acceptance": tot["agree"] / tot["rows"], "heldout_tokens": tot["windows"] * seq}


@torch.no_grad()
def greedy_complete(model, tok, prompt, n, device, amp):
    """Greedy continuation by whole-sequence re-runs (no cache)."""
    model.eval()
    ids = tok.encode(prompt, add_special_tokens=False).ids
    for _ in range(n):
        with amp():
            logits = model(input_ids=torch.tensor([ids], device=device), use_cache=False).logits
        nxt = int(logits[0, -1].argmax())
        ids.append(nxt)
        if nxt in (bpe.ENDOFTEXT, bpe.IM_END):
            break
    model.train()
    return tok.decode(ids)


def load_checkpoint(model_dir, mtp):
    """An exported checkpoint as fp32 training weights: the body through from_pretrained, the head from mtp.*."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, Qwen4ExpForCausalLM
    config = AutoConfig.from_pretrained(model_dir)
    config._experts_implementation, config._attn_implementation = "grouped_mm", "sdpa"
    model = Qwen4ExpForCausalLM.from_pretrained(model_dir, config=config, dtype=torch.float32)
    tiny_model.attach_owners(model)
    head = mtp.make_mtp_head(model.config, torch.float32)
    mtp.load_hf_tensors(head, load_file(os.path.join(model_dir, "model.safetensors")))
    return model, head


def export(model, head, mtp, tok, out_dir, seq):
    from safetensors.torch import load_file, save_file
    os.makedirs(out_dir, exist_ok=True)
    model.config.mtp_num_hidden_layers = 1
    model._router_logits.clear()
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(out_dir)
    path = os.path.join(out_dir, "model.safetensors")
    tensors = load_file(path)
    for name, t in mtp.hf_tensors(head).items():
        tensors[name] = t.detach().to("cpu", torch.bfloat16).contiguous()
    save_file(tensors, path, metadata={"format": "pt"})
    bpe.write_tokenizer_files(tok, out_dir, max_len=model.config.max_position_embeddings)
    bpe.write_generation_config(out_dir)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="work dir: corpus manifest, log, loss CSV, model/")
    ap.add_argument("--mtp-dir", default=os.path.join(os.path.dirname(HERE), "mtp"))
    ap.add_argument("--corpus-bytes", type=int, default=120_000_000)
    ap.add_argument("--tokenizer-bytes", type=int, default=24_000_000)
    ap.add_argument("--only-packages", default=None, help="comma list (dry runs)")
    ap.add_argument("--vocab", type=int, default=16384)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", default="auto")
    ap.add_argument("--max-steps", type=int, default=20000)
    ap.add_argument("--train-seconds", type=float, default=400)
    ap.add_argument("--wall-seconds", type=float, default=1e9, help="whole-run budget (--steps auto stays inside)")
    ap.add_argument("--reserve-seconds", type=float, default=60, help="kept for evaluation and export")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--eval-windows", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--heldout-percent", type=int, default=1)
    ap.add_argument("--sample-tokens", type=int, default=64)
    ap.add_argument("--init-from", default=None, help="exported checkpoint to continue from (tokenizer, body, head)")
    ap.add_argument("--strip-docstrings", action="store_true", help="train on sources without docstrings/comments")
    args = ap.parse_args()

    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    fh = open(os.path.join(args.out, "train.log"), "w")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(args.seed)
    mtp = import_mtp(args.mtp_dir)
    log(f"torch {torch.__version__} device {device} args {vars(args)}", fh)

    only = args.only_packages.split(",") if args.only_packages else None
    train_docs, heldout_docs, manifest = corpus.collect(args.corpus_bytes, args.heldout_percent, only=only)
    original_heldout, transform = heldout_docs, None
    if args.strip_docstrings:
        n_train, n_held = len(train_docs), len(heldout_docs)
        train_docs, heldout_docs = corpus.strip_docs(train_docs), corpus.strip_docs(heldout_docs)
        transform = {"strip_docstrings": "module/class/function docstrings and `#` comments removed "
                     "(tools/train/corpus.py strip_source: ast + tokenize); files that no longer parse dropped",
                     "train_files_before": n_train, "heldout_files_before": n_held}
    summary = corpus.write_manifest(os.path.join(args.out, "corpus.json"), manifest, train_docs, heldout_docs,
                                    transform)
    log(f"corpus: {summary['train_files']} train files ({summary['train_bytes']} B), {summary['heldout_files']} "
        f"held-out ({summary['heldout_bytes']} B); {[(p['package'], p['files']) for p in manifest]} "
        f"[{time.time() - t0:.0f}s]", fh)

    sample, size = [], 0
    for text in train_docs:  # a prefix of the hash-ordered docs: an even sample of every package
        if size >= args.tokenizer_bytes:
            break
        sample.append(text)
        size += len(text)
    if args.init_from:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(os.path.join(args.init_from, "tokenizer.json"))
    else:
        tok = bpe.train_tokenizer(sample, args.vocab)
    train_stream = torch.tensor(bpe.encode_corpus(tok, train_docs), dtype=torch.long)
    heldout_stream = torch.tensor(bpe.encode_corpus(tok, heldout_docs), dtype=torch.long)
    original_stream = torch.tensor(bpe.encode_corpus(tok, original_heldout), dtype=torch.long)
    log(f"tokenizer: vocab {tok.get_vocab_size()}, train {len(train_stream)} tokens "
        f"({summary['train_bytes'] / len(train_stream):.2f} B/token), held-out {len(heldout_stream)} tokens "
        f"[{time.time() - t0:.0f}s]", fh)

    if args.init_from:
        model, head = load_checkpoint(args.init_from, mtp)
        model, config = model.to(device), model.config
    else:
        config = tiny_model.tiny_config(tok.get_vocab_size(), max_positions=8192)
        model = tiny_model.build_model(config, experts="grouped_mm", attn="sdpa")
        head = mtp.make_mtp_head(model.config, torch.float32)
        head.apply(model._init_weights)  # transformers' own init for the head's layers (norms at 0, A_log, ...)
    model.to(device)
    head.to(device)
    tiny_model.attach_owners(head)
    tiny_model.use_fast_indexer(True)
    n_body = sum(p.numel() for p in model.parameters())
    n_head = sum(p.numel() for p in head.parameters())
    log(f"params: body {n_body}, MTP head {n_head}, total {n_body + n_head}", fh)

    routers = [m for m in model.modules() if type(m).__name__ == "Qwen4ExpTextTopKRouter"]
    model._router_logits = []
    for r in routers:
        r.register_forward_hook(lambda mod, a, out: model._router_logits.append(out[0]))

    params = list(model.parameters()) + list(head.parameters())
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=device == "cuda")

    def amp():
        return torch.autocast(device_type=device, dtype=torch.bfloat16)

    def evaluate_all():
        """Held-out metrics; with --strip-docstrings also on the original (unstripped) held-out files."""
        res = evaluate(model, head, mtp, heldout_stream, args.seq, args.batch, args.eval_windows, device, amp)
        if args.strip_docstrings:
            orig = evaluate(model, head, mtp, original_stream, args.seq, args.batch, args.eval_windows, device, amp)
            res.update({f"original_{k}": v for k, v in orig.items()})
        return res

    init_eval = None
    if args.init_from:
        init_eval = evaluate_all()
        log(f"held-out before continued training: {json.dumps(init_eval)}", fh)

    gen = torch.Generator().manual_seed(args.seed)
    train_stream_dev = train_stream.to(device)
    total = None if args.steps == "auto" else int(args.steps)
    rows = []
    csv_path = os.path.join(args.out, "loss.csv")
    model.train()
    head.train()
    step, t_train, t_mark = 0, time.time(), None
    while total is None or step < total:
        if step == 5:
            t_mark = time.time()
        if total is None and step == 25:
            per_step = (time.time() - t_mark) / 20
            budget = min(args.train_seconds, args.wall_seconds - (time.time() - t0) - args.reserve_seconds)
            total = max(26, min(args.max_steps, int(budget / per_step)))
            log(f"--steps auto: {per_step * 1000:.1f} ms/step, {budget:.0f} s left for training -> {total} steps", fh)
        cur_lr = lr_at(step, total or args.max_steps, args.lr, args.warmup, 0.1)
        for g in opt.param_groups:
            g["lr"] = cur_lr
        starts = torch.randint(0, len(train_stream) - args.seq - 2, (args.batch,), generator=gen)
        windows = torch.stack([train_stream_dev[s: s + args.seq + 2] for s in starts.tolist()])
        def losses():
            model._router_logits.clear()
            opt.zero_grad(set_to_none=True)
            with amp():
                main, draft, _, _ = forward_losses(model, head, mtp, windows, args.seq)
                aux = router_aux(model)
                kl = tiny_model.indexer_aux_loss(model)
                kl = kl if kl is not None else main.new_zeros(())
                loss = main + MTP_WEIGHT * draft + config.router_aux_loss_coef * aux + INDEXER_WEIGHT * kl
            loss.backward()
            return main, draft, aux, kl

        try:
            main, draft, aux, kl = losses()
        except (RuntimeError, NotImplementedError) as e:
            if step > 0:
                raise
            # grouped_mm depends on the torch build and device: fall back to the per-expert loop, same math
            log(f"grouped_mm experts failed ({e}); using eager experts", fh)
            for m in list(model.modules()) + list(head.modules()):
                if hasattr(m, "config") and hasattr(m.config, "_experts_implementation"):
                    m.config._experts_implementation = "eager"
            main, draft, aux, kl = losses()
        gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if step % args.log_every == 0 or step == 1 or step == total:
            row = {"step": step, "tokens": step * args.batch * args.seq, "lr": cur_lr, "loss": main.item(),
                   "mtp_loss": draft.item(), "router_aux": aux.item(), "indexer_kl": kl.item(),
                   "grad_norm": gnorm.item(), "seconds": round(time.time() - t_train, 1)}
            rows.append(row)
            log(" ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), fh)
    train_seconds = time.time() - t_train
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)

    result = evaluate_all()
    if init_eval is not None:
        result.update({"init_from": args.init_from, "init_eval": init_eval, "lr": args.lr, "warmup": args.warmup})
    result.update({"steps": total, "train_seconds": round(train_seconds, 1), "seq": args.seq, "batch": args.batch,
                   "train_tokens": total * args.batch * args.seq, "params_body": n_body, "params_mtp": n_head,
                   "mtp_loss_weight": MTP_WEIGHT, "indexer_loss_weight": INDEXER_WEIGHT, "seed": args.seed})
    log(f"held-out: {json.dumps(result)}", fh)
    sample_text = greedy_complete(model, tok, "def fibonacci(n):\n", args.sample_tokens, device, amp)
    log(f"greedy sample:\n{sample_text}", fh)
    result["sample_fibonacci"] = sample_text
    export(model, head, mtp, tok, os.path.join(args.out, "model"), args.seq)
    result["total_seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(args.out, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
    log(f"exported to {os.path.join(args.out, 'model')} [{time.time() - t0:.0f}s total]", fh)


if __name__ == "__main__":
    main()
