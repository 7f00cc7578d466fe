#!/usr/bin/env python3
"""Writes the float64 weights an MLX affine checkpoint made by `deltaserve convert` actually holds, in the HF layout
of the original, so transformers can run exactly the shipped weights (check_engine.py --reference-from).

Usage: dequantize_mlx.py QUANTIZED_DIR ORIGINAL_HF_DIR OUT_DIR
Each quantized linear (weight uint32 + scales + biases) becomes scale * q + bias computed in float64 (exact: a bf16
scale times an 8-bit code plus a bf16 bias fits in a double); stacked `switch_mlp` experts are split back into
`experts.E.*`. Every tensor that was not quantized is taken from the original, so norms and convs keep the HF
convention and only the quantization differs."""
import json
import os
import sys

import numpy as np
import torch
from safetensors import safe_open
from safetensors.numpy import save_file


def read(f, name):
    """numpy cannot hold bf16: floats come back as float64, integers as they are."""
    t = f.get_tensor(name)
    return t.to(torch.float64).numpy() if t.is_floating_point() else t.numpy()


def unpack_codes(words, bits, cols):
    """MLX packs codes as a little-endian bit stream in uint32 words along the input axis."""
    stream = np.unpackbits(words.astype("<u4").view(np.uint8), axis=-1, bitorder="little")
    stream = stream[..., : cols * bits].reshape(*words.shape[:-1], cols, bits)
    return (stream.astype(np.int64) << np.arange(bits)).sum(axis=-1)


def module_settings(config, module):
    q = config["quantization"]
    own = q.get(module)
    if isinstance(own, dict):
        return own["bits"], own["group_size"]
    return q["bits"], q["group_size"]


def main():
    qdir, orig, out = sys.argv[1:4]
    config = json.load(open(os.path.join(qdir, "config.json")))
    index = json.load(open(os.path.join(qdir, "model.safetensors.index.json")))["weight_map"]
    files = {n: safe_open(os.path.join(qdir, f), "pt") for n, f in index.items()}
    tensors = {}
    with safe_open(os.path.join(orig, "model.safetensors"), "pt") as f:
        for name in f.keys():
            tensors[name] = read(f, name)
    replaced = 0
    for name in sorted(index):
        if not name.endswith(".scales"):
            continue
        module = name[: -len(".scales")]
        bits, group = module_settings(config, module)
        words = read(files[module + ".weight"], module + ".weight")
        scales = read(files[name], name)
        biases = read(files[module + ".biases"], module + ".biases")
        cols = words.shape[-1] * 32 // bits
        codes = unpack_codes(words, bits, cols).reshape(*scales.shape, group)
        w = (codes * scales[..., None] + biases[..., None]).reshape(*words.shape[:-1], cols)
        if ".switch_mlp." in module:
            base, proj = module.split(".switch_mlp.")
            for e in range(w.shape[0]):
                key = f"{base}.experts.{e}.{proj}.weight"
                assert key in tensors, key
                tensors[key] = w[e]
        else:
            assert module + ".weight" in tensors, module
            tensors[module + ".weight"] = w
        replaced += 1
    # Tensors kept unquantized are mostly the original's bits, except centred norms, which MLX stores as
    # bf16(1 + w): the shipped weight is then (stored - 1), not w, and the reference must use it.
    quantized = {n[: -len(".scales")] for n in index if n.endswith(".scales")}
    shifted = 0
    for name in sorted(index):
        module = name.rsplit(".", 1)[0]
        if module in quantized or name not in tensors:
            continue
        stored = read(files[name], name)
        if not np.issubdtype(stored.dtype, np.floating):
            continue
        orig_value = tensors[name]
        if stored.shape != orig_value.shape:  # convs: MLX [C, K, 1], HF [C, 1, K]
            stored = stored.reshape(orig_value.shape[0], -1).reshape(orig_value.shape)
        if np.abs(stored - 1.0 - orig_value).max() < np.abs(stored - orig_value).max():
            tensors[name] = stored - 1.0
            shifted += 1
        else:
            tensors[name] = stored
    os.makedirs(out, exist_ok=True)
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, os.path.join(out, "model.safetensors"))
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        src = os.path.join(orig, name)
        if os.path.exists(src):
            with open(src, "rb") as a, open(os.path.join(out, name), "wb") as b:
                b.write(a.read())
    print(f"{replaced} quantized modules dequantized to float64, {shifted} norms stored as 1 + w taken as stored; "
          f"{len(tensors)} tensors written to {out}")


if __name__ == "__main__":
    main()
