#!/usr/bin/env python3
"""HF `tokenizers` as the reference for the C++ tokenizer.

  expect   encodes every corpus chunk with HF and writes what the C++ test must reproduce
  variant  writes a tokenizer.json derived from a real one, to reach options the real files leave off
  bench    times HF encode (single thread) over the corpus chunks

Invalid UTF-8 in a chunk is decoded the Python way (bytes.decode("utf-8", "replace")) before HF sees it,
which is the behaviour the C++ Tokenizer documents for invalid input.

expect's file: one header line (JSON), then for each chunk, little-endian:
  u32 n, i32 ids[n]                       HF encode(text)
  u8 same; unless same: u32 len, bytes     HF decode(ids) (same: equal to the text)
  u8 same; unless same: u32 len, bytes     HF decode(ids, skip_special_tokens=True) (same: equal to decode)
  u8 same; unless same: u32 n, i32 ids[n]  HF encode with encode_special_tokens=True (same: equal to ids)
"""
import argparse
import json
import os
import struct
import sys
import time

import tokenizers
from tokenizers import Tokenizer


def read_corpus(path):
    with open(path, "rb") as f:
        header = f.readline()
        data = f.read()
    chunks, i = [], 0
    while i < len(data):
        (n,) = struct.unpack_from("<I", data, i)
        chunks.append(data[i + 4:i + 4 + n])
        i += 4 + n
    return header.decode().strip(), chunks


def write_text(out, same, text):
    out.append(struct.pack("<B", 1 if not same else 0))
    if not same:
        b = text.encode("utf-8")
        out.append(struct.pack("<I", len(b)) + b)


def write_ids(out, ids):
    out.append(struct.pack(f"<I{len(ids)}i", len(ids), *ids))


def expect(args):
    corpus_header, chunks = read_corpus(args.corpus)
    tok = Tokenizer.from_file(args.tokenizer)
    plain = Tokenizer.from_file(args.tokenizer)
    plain.encode_special_tokens = True
    texts = [raw.decode("utf-8", "replace") for raw in chunks]
    # Batches run on all cores; the ids do not depend on it.
    all_ids = [e.ids for e in tok.encode_batch(texts)]
    # encode_special_tokens can only change chunks that spell a special token.
    specials = [t.content for t in tok.get_added_tokens_decoder().values() if t.special]
    maybe = [i for i, t in enumerate(texts) if any(s in t for s in specials)]
    all_plain = list(all_ids)
    for i, e in zip(maybe, plain.encode_batch([texts[i] for i in maybe])):
        all_plain[i] = e.ids
    decoded = tok.decode_batch(all_ids, skip_special_tokens=False)
    skipped = tok.decode_batch(all_ids, skip_special_tokens=True)
    out = []
    for text, ids, ids_plain, dec, skip in zip(texts, all_ids, all_plain, decoded, skipped):
        write_ids(out, ids)
        write_text(out, dec == text, dec)
        write_text(out, skip == dec, skip)
        out.append(struct.pack("<B", 0 if ids_plain == ids else 1))
        if ids_plain != ids:
            write_ids(out, ids_plain)
    header = {"format": "ds-tokenizer-expected-1", "tokenizers": tokenizers.__version__,
              "tokenizer": os.path.basename(os.path.dirname(os.path.abspath(args.tokenizer))),
              "corpus": json.loads(corpus_header), "chunks": len(chunks)}
    with open(args.out, "wb") as f:
        f.write(json.dumps(header).encode() + b"\n")
        f.write(b"".join(out))


def variant(args):
    with open(args.base, encoding="utf-8") as f:
        tj = json.load(f)
    if args.kind == "flags":
        # Added tokens with every option HF has, for text in the corpus's edge cases.
        next_id = 1 + max(max(tj["model"]["vocab"].values()), max(t["id"] for t in tj["added_tokens"]))
        extra = [
            dict(content="<mask>", single_word=True, lstrip=True, rstrip=True, normalized=False, special=True),
            dict(content=" foo", single_word=False, lstrip=False, rstrip=True, normalized=False, special=False),
            dict(content="bar", single_word=True, lstrip=False, rstrip=False, normalized=False, special=False),
            dict(content="[SEP]", single_word=False, lstrip=True, rstrip=False, normalized=False, special=True),
            dict(content="\u212bstr\u00f6m", single_word=False, lstrip=False, rstrip=False, normalized=True,
                 special=False),
            dict(content="<|im_start|>x", single_word=False, lstrip=False, rstrip=False, normalized=False,
                 special=False),
            dict(content="\u01c5emo", single_word=True, lstrip=True, rstrip=False, normalized=True, special=True),
        ]
        for i, t in enumerate(extra):
            tj["added_tokens"].append(dict(id=next_id + i, **t))
    elif args.kind == "ignore_merges":
        tj["model"]["ignore_merges"] = True
    else:
        sys.exit(f"unknown variant {args.kind}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    Tokenizer.from_file(args.out)  # HF must accept what it will be compared on


def bench(args):
    if os.environ.get("RAYON_NUM_THREADS") != "1":
        sys.exit("bench: set RAYON_NUM_THREADS=1 before starting Python, so HF runs on one thread")
    _, chunks = read_corpus(args.corpus)
    if args.ascii:
        chunks = [c for c in chunks if c.isascii()]
    texts = [c.decode("utf-8", "replace") for c in chunks]
    tok = Tokenizer.from_file(args.tokenizer)
    size = sum(len(t.encode()) for t in texts)
    best = best_cpu = float("inf")
    tokens = 0
    for _ in range(args.repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        if args.batch:  # one call for all chunks: no per-call Python overhead, still one thread
            tokens = sum(len(e.ids) for e in tok.encode_batch(texts))
        else:
            tokens = sum(len(tok.encode(t).ids) for t in texts)
        best = min(best, time.perf_counter() - start)
        best_cpu = min(best_cpu, time.process_time() - cpu_start)  # steadier than wall time on a shared machine
    print(json.dumps({"tokenizer": args.tokenizer, "tokenizers": tokenizers.__version__,
                      "chunks": "ascii" if args.ascii else "all", "call": "encode_batch" if args.batch else "encode",
                      "bytes": size,
                      "tokens": tokens, "best_s": round(best, 4), "mb_per_s": round(size / best / 1e6, 2),
                      "best_cpu_s": round(best_cpu, 4), "mb_per_cpu_s": round(size / best_cpu / 1e6, 2),
                      "rayon_threads": os.environ.get("RAYON_NUM_THREADS")}))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("expect")
    e.add_argument("--tokenizer", required=True)
    e.add_argument("--corpus", required=True)
    e.add_argument("--out", required=True)
    v = sub.add_parser("variant")
    v.add_argument("--base", required=True)
    v.add_argument("--kind", required=True, choices=["flags", "ignore_merges"])
    v.add_argument("--out", required=True)
    b = sub.add_parser("bench")
    b.add_argument("--tokenizer", required=True)
    b.add_argument("--corpus", required=True)
    b.add_argument("--repeats", type=int, default=5)
    b.add_argument("--ascii", action="store_true", help="only the chunks that are pure ASCII")
    b.add_argument("--batch", action="store_true", help="time encode_batch over all chunks instead of encode each")
    args = ap.parse_args()
    {"expect": expect, "variant": variant, "bench": bench}[args.cmd](args)


if __name__ == "__main__":
    main()
