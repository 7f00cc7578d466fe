#!/usr/bin/env python3
"""Writes the tokenizer parity corpus: >= 2 MB of mixed text in chunks, deterministic for a given Python and
Faker version (both are recorded in the file's header line).

Parts: Python stdlib sources (code), Faker prose in many scripts (Latin, Cyrillic, Greek, CJK, Arabic,
Hebrew, Armenian, Thai, Bengali, Devanagari, Hangul), and hand-made edge cases (special-token strings inside
text, contractions, white space runs, long numbers, emoji with ZWJ, combining marks in NFD, letters new in
Unicode 15/16, very long words, control characters, invalid UTF-8 bytes), and random code points.

Format: one header line (JSON), then for each chunk a 4-byte little-endian length and the raw bytes.
Run: python3 tools/gen_tokenizer_corpus.py --out corpus.bin
"""
import argparse
import json
import random
import struct
import sys
import sysconfig
from pathlib import Path

import faker

SEED = 20260527
STDLIB_FILES = [
    "argparse.py", "ast.py", "base64.py", "calendar.py", "collections/__init__.py", "configparser.py",
    "csv.py", "dataclasses.py", "datetime.py", "decimal.py", "difflib.py", "doctest.py", "email/message.py",
    "enum.py", "fractions.py", "ftplib.py", "functools.py", "gettext.py", "heapq.py", "html/parser.py",
    "inspect.py", "ipaddress.py", "json/decoder.py", "json/encoder.py", "locale.py", "logging/__init__.py",
    "mailbox.py", "pathlib.py", "pickle.py", "pprint.py", "shutil.py", "statistics.py", "string.py",
    "subprocess.py", "tarfile.py", "textwrap.py", "threading.py", "typing.py", "unittest/case.py",
    "urllib/parse.py", "uuid.py", "zipfile.py",
]
CODE_BYTES = 950_000
PROSE_LOCALES = [
    "en_US", "fr_FR", "de_DE", "es_ES", "it_IT", "pl_PL", "cs_CZ", "vi_VN", "ru_RU", "uk_UA", "el_GR",
    "zh_CN", "zh_TW", "ja_JP", "ar_AA", "fa_IR", "he_IL", "hy_AM", "th_TH", "bn_BD",
]
NAME_LOCALES = ["hi_IN", "ne_NP", "ko_KR", "ka_GE", "ta_IN", "ja_JP", "ru_RU", "el_GR", "ar_AA"]
PROSE_BYTES = 1_350_000
EDGE_BYTES = 320_000
FUZZ_BYTES = 200_000
# Code point ranges for the random-text part: marks (old and new), Hangul jamo, CJK, the astral planes.
FUZZ_RANGES = [(0x0, 0x7F), (0x80, 0x36F), (0x300, 0x36F), (0x1AB0, 0x1AFF), (0x1DC0, 0x1DFF), (0x20D0, 0x20FF),
               (0x590, 0x8FF), (0x900, 0xDFF), (0x1100, 0x11FF), (0xAC00, 0xD7A3), (0x2000, 0x2BFF), (0x3000, 0x30FF),
               (0x3400, 0x9FFF), (0xF900, 0xFFFF), (0x10000, 0x1FFFF), (0x20000, 0x323AF), (0xE0000, 0xE01EF),
               (0xF0000, 0x10FFFF)]

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
            "<|vision_start|>", "<|image_pad|>", "<|fim_prefix|>", "<tts_pad>", "<|audio_start|>"]
# Strings that only the test's "flags" tokenizer variant adds as tokens (single_word, lstrip, rstrip, normalized).
FLAG_TOKENS = ["<mask>", " foo", "bar", "[SEP]", "Åström", "<|im_start|>x", "ǅemo"]
WORDS = ["hello", "world", "token", "Straße", "naïve", "café", "東京", "Москва", "Αθήνα", "القاهرة", "नमस्ते",
         "서울", "bar", "barn", "foo", "x", "_bar_", "ſ", "İstanbul"]
CONTRACTIONS = ["I'm", "don't", "we've", "they'll", "he'd", "it's", "IT'S", "DON'T", "We'Re", "'ſ", "'K",
                "O'Neil", "rock 'n' roll", "you’re", "'s'", "''", "'", "can't've"]
SPACES = [" ", "  ", "\t", "\n", "\r\n", "\n\n", " \t ", "\u00a0", "\u3000", "\u2028", "\u0085", "\u200b",
          "\ufeff", "\u2003", "\u202f", "\u180e", "\x0b", "\x0c", "\r"]
EMOJI = ["👍", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵🇺🇸", "❤️", "1️⃣", "🧑🏻‍💻", "😀😃😄", "🫠", "👩🏾‍🤝‍👩🏼", "✈︎"]
COMBINING = ["e\u0301", "a\u0308", "A\u030a", "\u212b", "\u2126", "\u1100\u1161\u11a8", "\u1112\u1161\u11ab",
             "o\u0302\u0323", "Vie\u0323\u0302t", "क्षत्रिय", "Z\u0351\u0364\u0346\u035b\u0363a\u033e\u0357l\u0352go",
             "\u0915\u093c", "\uf900", "ﬁ", "Ⅻ", "½", "²³", "\u0f73", "\u0344", "\u0958"]
NEW_LETTERS = ["\U00031350", "\U0002EBF0", "\U00011F04", "\U00010D50", "\U000105C0", "\U00016D43", "\U0001E5D0",
               "\U00010940", "\U000323B0", "\U00018D09", "\U0001F9E0"]
NUMBERS = ["3.14159", "1,000,000", "٠١٢٣٤٥", "１２３４", "0x7fffffff", "1e-9", "۱۲۳", "१२३", "〇一二"]
INVALID = [b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\x80\x80", b"\xe0\x80\xaf",
           b"\xf0\x9f\x98", b"\xc3", b"\xfe\xfe", b"\xf8\x88\x80\x80\x80", b"\xe1\x80\xe1\x80\x80"]
SNIPPETS = ['{"role": "user", "content": "Hi!\\n"}', "<div class=\"a\">x&amp;y</div>", "# Title\n\n- item\n- item",
            "https://example.com/path?q=1&r=two#frag", "C:\\Users\\name\\file.txt", "\x1b[31mred\x1b[0m",
            "\x00\x01\x02\x7f", "SELECT * FROM t WHERE a='b';", "$$\\frac{a}{b}$$", "a\tb\tc\n1\t2\t3"]


def code_chunks(rng):
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks, total = [], 0
    for name in STDLIB_FILES:
        path = root / name
        if not path.exists() or total >= CODE_BYTES:
            continue
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        i = 0
        while i < len(lines) and total < CODE_BYTES:
            n = rng.randint(5, 160)
            chunk = "".join(lines[i:i + n]).encode()
            chunks.append(chunk)
            total += len(chunk)
            i += n
    return chunks


def prose_chunks(rng):
    fakers = {loc: faker.Faker(loc) for loc in PROSE_LOCALES + NAME_LOCALES}
    for i, f in enumerate(fakers.values()):
        f.seed_instance(SEED + i)
    chunks, total = [], 0
    while total < PROSE_BYTES:
        parts = []
        for _ in range(rng.randint(1, 6)):
            if rng.random() < 0.8:
                f = fakers[rng.choice(PROSE_LOCALES)]
                parts.append(f.paragraph(nb_sentences=rng.randint(1, 8)))
            else:
                f = fakers[rng.choice(NAME_LOCALES)]
                parts.append(f"{f.name()}, {f.address()}")
            parts.append(rng.choice(["\n", "\n\n", " ", "\r\n", "\n\n\n", "  \n"]))
        chunk = "".join(parts).encode()
        chunks.append(chunk)
        total += len(chunk)
    return chunks


def edge_piece(rng):
    kind = rng.randrange(14)
    if kind == 0:
        s = rng.choice(SPECIALS)
        return rng.choice([s, f"user\n{s}hello{s}", f"x{s}", f"{s}{rng.choice(SPECIALS)}", s[:-1], f"<{s}>",
                           f" {s} ", f"{s}\n"])
    if kind == 1:
        t = rng.choice(FLAG_TOKENS)
        return rng.choice([t, f" {t} ", f"a{t}b", f"\t{t}\n", f"{t}{t}", f"  {t}  x", f"_{t}", f"é{t}",
                           f"{t}ñ", f"9{t}", f"{t}!", "A\u030astro\u0308m", "\u212bstr\u00f6m", "Dže\u006dо"])
    if kind == 2:
        return rng.choice(CONTRACTIONS)
    if kind == 3:
        return "".join(rng.choice(SPACES) for _ in range(rng.randint(1, 8))) * rng.choice([1, 1, 3, 40])
    if kind == 4:
        return rng.choice(NUMBERS) if rng.random() < 0.4 else str(rng.getrandbits(rng.randint(1, 1400)))
    if kind == 5:
        return "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 4)))
    if kind == 6:
        return rng.choice(COMBINING)
    if kind == 7:
        return "".join(rng.choice(NEW_LETTERS) for _ in range(rng.randint(1, 3))) + rng.choice(["", "a", " b"])
    if kind == 8:
        alphabet = rng.choice(["ab", "abcdefghijklmnopqrstuvwxyz", "аб", "的是", "ـــ", "-=", "0123456789", " "])
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(40, 2500)))
    if kind == 9:
        return rng.choice(SNIPPETS)
    if kind == 10:
        return rng.choice(WORDS)
    if kind == 11:
        return rng.choice(["'", "\"", "(", ")", "...", "—", "–", "«", "»", "!!!", "?!", ";", "::", "->", "/*"])
    if kind == 12:
        return "".join(chr(rng.randint(0x20, 0x2FFF)) for _ in range(rng.randint(1, 12)))
    return rng.choice(["\n", " ", "", "\t"])


def edge_chunks(rng):
    chunks, total = [], 0
    while total < EDGE_BYTES:
        raw = bytearray()
        for _ in range(rng.randint(1, 30)):
            if rng.random() < 0.06:
                raw += rng.choice(INVALID)
            else:
                raw += edge_piece(rng).encode("utf-8", "surrogatepass")
        chunks.append(bytes(raw))
        total += len(raw)
    # Fixed cases the random mix may miss: a chunk ending mid-character, an empty chunk, one lone special.
    chunks += [b"abc\xe2\x82", b"", "<|im_start|>".encode(), b"\xf0\x9f\x98\x80"[:3] + b" ok"]
    return chunks


def fuzz_chunks(rng):
    # Random code points, white space and token strings: what no prose reaches (new marks, NFC corner cases).
    chunks, total = [], 0
    while total < FUZZ_BYTES:
        parts = []
        for _ in range(rng.randint(1, 30)):
            r = rng.random()
            if r < 0.2:
                parts.append(rng.choice(SPACES) * rng.choice([1, 1, 2, 5]))
            elif r < 0.3:
                parts.append(rng.choice(SPECIALS + FLAG_TOKENS + CONTRACTIONS))
            else:
                lo, hi = rng.choice(FUZZ_RANGES)
                cp = rng.randint(lo, hi)
                if not 0xD800 <= cp <= 0xDFFF:
                    parts.append(chr(cp))
        chunk = "".join(parts).encode()
        chunks.append(chunk)
        total += len(chunk)
    return chunks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rng = random.Random(SEED)
    chunks = code_chunks(rng) + prose_chunks(rng) + edge_chunks(rng) + fuzz_chunks(rng)
    random.Random(SEED + 1).shuffle(chunks)
    header = {"format": "ds-tokenizer-corpus-1", "python": sys.version.split()[0], "faker": faker.VERSION,
              "seed": SEED, "chunks": len(chunks), "bytes": sum(map(len, chunks))}
    with open(args.out, "wb") as f:
        f.write(json.dumps(header).encode() + b"\n")
        for c in chunks:
            f.write(struct.pack("<I", len(c)))
            f.write(c)
    print(json.dumps(header), file=sys.stderr)


if __name__ == "__main__":
    main()
