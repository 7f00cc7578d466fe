#!/usr/bin/env python3
"""Writes src/tokenizer/unicode_classes.cpp: the code point classes that HF `tokenizers` really uses.

The pre-tokenizer regex runs on Oniguruma inside `tokenizers` (Unicode 16 in 0.23), while Debian's PCRE2 knows
Unicode 14, so the C++ side cannot trust PCRE2's own \\p{L}. This tool asks the installed `tokenizers` itself
which code points each class holds and writes them as ranges:
  letter, number, mark, space   -- Oniguruma's \\p{L}, \\p{N}, \\p{M}, \\s (the Split regex)
  word, strip_space             -- Rust regex \\w and \\s (added tokens' single_word and lstrip/rstrip)
  nfc_inert                     -- code points HF's NFC (Unicode 9 era tables) leaves alone but utf8proc would
                                   reorder, decompose or compose; the C++ NFC cuts the text at them
Run: python3 tools/gen_unicode_classes.py [--out src/tokenizer/unicode_classes.cpp]
"""
import argparse
import ctypes
import shutil
import subprocess
import sys

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers

ALL = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]


def onig_class(pattern):
    # Split with behaviour "removed" drops the matches; whatever survives is outside the class.
    split = pre_tokenizers.Split(Regex(pattern), "removed")
    text = "".join(map(chr, ALL))
    kept = set()
    for piece, _ in split.pre_tokenize_str(text):
        kept.update(map(ord, piece))
    return [cp for cp in ALL if cp not in kept]


def byte_tokenizer():
    # A byte-level BPE with no merges: every char becomes tokens, so only the added tokens are of interest.
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    return tok


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def added_token_classes():
    tok = byte_tokenizer()
    tok.add_tokens([AddedToken("<w>", single_word=True, normalized=False),
                    AddedToken("<r>", rstrip=True, normalized=False)])
    w_id, r_id = tok.token_to_id("<w>"), tok.token_to_id("<r>")
    chars = [chr(cp) for cp in ALL]
    # single_word: "<c><w>" keeps <w> only when c is not a word character.
    enc = tok.encode_batch([c + "<w>" for c in chars], add_special_tokens=False)
    word = [cp for cp, e in zip(ALL, enc) if w_id not in e.ids]
    # rstrip: "<r><c>" is the token alone when c is white space.
    enc = tok.encode_batch(["<r>" + c for c in chars], add_special_tokens=False)
    strip_space = [cp for cp, e in zip(ALL, enc) if e.ids == [r_id]]
    return word, strip_space


class Utf8procProperty(ctypes.Structure):
    _fields_ = [("category", ctypes.c_int16), ("combining_class", ctypes.c_int16), ("bidi_class", ctypes.c_int16),
                ("decomp_type", ctypes.c_int16), ("decomp_seqindex", ctypes.c_uint16),
                ("casefold_seqindex", ctypes.c_uint16), ("uppercase_seqindex", ctypes.c_uint16),
                ("lowercase_seqindex", ctypes.c_uint16), ("titlecase_seqindex", ctypes.c_uint16),
                ("comb_index", ctypes.c_uint16)]


def nfc_inert():
    # Probes each code point utf8proc gives any normalization property: alone, before a ccc-1 mark and after a
    # ccc-230 mark, under NFD and NFC. Where HF and utf8proc disagree, the code point and its parts are inert.
    lib = ctypes.CDLL("libutf8proc.so.2")
    libc = ctypes.CDLL("libc.so.6")
    lib.utf8proc_get_property.restype = ctypes.POINTER(Utf8procProperty)
    lib.utf8proc_NFD.restype = lib.utf8proc_NFC.restype = ctypes.c_void_p

    def u8(fn, s):
        p = fn(s.encode())
        out = ctypes.string_at(p).decode()
        libc.free(ctypes.c_void_p(p))
        return out

    hf_nfd, hf_nfc = normalizers.NFD(), normalizers.NFC()
    inert = set()
    for cp in ALL:
        prop = lib.utf8proc_get_property(cp).contents
        if cp == 0 or (prop.combining_class == 0 and prop.decomp_seqindex == 0xFFFF and prop.comb_index == 0xFFFF):
            continue
        s = chr(cp)
        for probe in (s, "a" + s + "\u0334", "a\u0301" + s):
            if hf_nfd.normalize_str(probe) != u8(lib.utf8proc_NFD, probe) or \
                    hf_nfc.normalize_str(probe) != u8(lib.utf8proc_NFC, probe):
                inert.add(cp)
                inert.update(map(ord, u8(lib.utf8proc_NFD, s)))
    return sorted(inert)


def ranges(cps):
    out = []
    for cp in cps:
        if out and out[-1][1] + 1 == cp:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


def emit(name, cps, lines):
    rs = ranges(cps)
    lines.append(f"const CodepointRange k{name}[] = {{")
    for i in range(0, len(rs), 5):
        lines.append("    " + " ".join(f"{{0x{a:X}, 0x{b:X}}}," for a, b in rs[i:i + 5]))
    lines.append("};")
    return len(rs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="src/tokenizer/unicode_classes.cpp")
    args = ap.parse_args()
    classes = {
        "Letter": onig_class(r"\p{L}"),
        "Number": onig_class(r"\p{N}"),
        "Mark": onig_class(r"\p{M}"),
        "Space": onig_class(r"\s"),
    }
    word, strip_space = added_token_classes()
    classes["Word"] = word
    classes["StripSpace"] = strip_space
    classes["NfcInert"] = nfc_inert()
    lines = [
        f"// Generated by tools/gen_unicode_classes.py from tokenizers {tokenizers.__version__}; do not edit.",
        "// The classes HF tokenizers really matches (Oniguruma for the Split regex, Rust regex for added tokens).",
        '#include "tokenizer/unicode_classes.h"',
        "",
        "namespace ds::unicode {",
        "namespace {",
    ]
    counts = {}
    for name, cps in classes.items():
        counts[name] = emit(name, cps, lines)
    lines += ["}  // namespace", ""]
    enum_names = {"Letter": "letter", "Number": "number", "Mark": "mark", "Space": "space", "Word": "word",
                  "StripSpace": "strip_space", "NfcInert": "nfc_inert"}
    lines.append("std::span<const CodepointRange> ranges(CodepointClass c) {")
    lines.append("  switch (c) {")
    for name, member in enum_names.items():
        lines.append(f"    case CodepointClass::{member}:")
        lines.append(f"      return k{name};")
    lines.append("  }")
    lines.append("  return {};")
    lines.append("}")
    lines += ["", "}  // namespace ds::unicode", ""]
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    if shutil.which("clang-format"):
        subprocess.run(["clang-format", "-i", args.out], check=True)  # the repo's style, so reruns diff cleanly
    print({k: (len(v), counts[k]) for k, v in classes.items()}, file=sys.stderr)


if __name__ == "__main__":
    main()
