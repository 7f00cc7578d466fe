"""The training corpus: Python sources of permissively licensed installed packages.

Deterministic: packages in a fixed order, files sorted by path, exact duplicates dropped (by content hash), files
ordered by content hash before the size cap so every package is sampled evenly, held-out split by content hash."""
import ast
import hashlib
import importlib.metadata as md
import io
import importlib.util
import json
import os
import re
import tokenize

# Candidate packages (import name, distribution name). Only those installed AND permissively licensed are used.
PACKAGES = [
    ("torch", "torch"), ("transformers", "transformers"), ("numpy", "numpy"), ("scipy", "scipy"),
    ("sympy", "sympy"), ("networkx", "networkx"), ("pandas", "pandas"), ("sklearn", "scikit-learn"),
    ("jax", "jax"), ("flax", "flax"), ("optax", "optax"), ("huggingface_hub", "huggingface_hub"),
    ("accelerate", "accelerate"), ("torchvision", "torchvision"), ("setuptools", "setuptools"), ("pip", "pip"),
    ("jinja2", "jinja2"), ("packaging", "packaging"), ("fsspec", "fsspec"),
]
PERMISSIVE = re.compile(r"\b(MIT|BSD|Apache|PSF|Python Software Foundation|ISC|Zlib|0BSD|CC0|Unlicense)", re.I)
COPYLEFT = re.compile(r"(GPL|MPL|Mozilla|EPL|Eclipse|CDDL|Commons Clause)", re.I)
MAX_FILE_BYTES = 200_000  # larger files are mostly generated tables
MAX_LINE_CHARS = 400  # lines longer than this are embedded data, not code


def licence_of(dist):
    """The licence as the package metadata states it (expression, then the License field, then classifiers)."""
    m = md.metadata(dist)
    parts = [m.get("License-Expression") or "", (m.get("License") or "").splitlines()[0] if m.get("License") else ""]
    parts += [c.split("::")[-1].strip() for c in (m.get_all("Classifier") or []) if c.startswith("License ::")]
    return " / ".join(p for p in parts if p), m["Version"]


def is_permissive(licence):
    return bool(licence) and bool(PERMISSIVE.search(licence)) and not COPYLEFT.search(licence)


def package_dir(import_name):
    spec = importlib.util.find_spec(import_name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def read_source(path):
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError:
        return None
    if len(raw) > MAX_FILE_BYTES or len(raw) < 64:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\x00" in text or max(len(line) for line in text.splitlines() or [""]) > MAX_LINE_CHARS:
        return None
    return text


def collect(max_bytes, heldout_percent=1, only=None):
    """Returns (train_texts, heldout_texts, manifest). `only` limits the package list (for dry runs)."""
    seen, docs, manifest = set(), [], []
    for import_name, dist in PACKAGES:
        if only and import_name not in only:
            continue
        try:
            licence, version = licence_of(dist)
        except md.PackageNotFoundError:
            continue
        root = package_dir(import_name)
        if root is None:
            continue
        entry = {"package": dist, "version": version, "licence": licence, "files": 0, "bytes": 0}
        if not is_permissive(licence):
            entry["skipped"] = "licence not permissive"
            manifest.append(entry)
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                if not name.endswith(".py"):
                    continue
                text = read_source(os.path.join(dirpath, name))
                if text is None:
                    continue
                digest = hashlib.sha256(text.encode()).hexdigest()
                if digest in seen:
                    continue
                seen.add(digest)
                docs.append((digest, dist, text))
        manifest.append(entry)
    docs.sort()  # by content hash: a fixed, package-mixed order independent of the file system
    train, heldout, total = [], [], 0
    counts = {e["package"]: e for e in manifest}
    for digest, dist, text in docs:
        if total + len(text) > max_bytes:
            break
        total += len(text)
        counts[dist]["files"] += 1
        counts[dist]["bytes"] += len(text)
        (heldout if int(digest[:8], 16) % 100 < heldout_percent else train).append(text)
    return train, heldout, manifest


def write_manifest(path, manifest, train, heldout, transform=None):
    """Package counts are of the selected files; `transform` records any rewrite applied after selection."""
    summary = {"packages": manifest, "train_files": len(train), "heldout_files": len(heldout),
               "train_bytes": sum(map(len, train)), "heldout_bytes": sum(map(len, heldout))}
    if transform:
        summary["transform"] = transform
    with open(path, "w") as f:
        json.dump(summary, f, indent=1)
    return summary


def _strip_comments(text):
    """Drops `#` comments (tokenize finds them, so `#` inside strings stays); comment-only lines go entirely."""
    lines = text.splitlines(keepends=True)
    cut = {}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            cut[tok.start[0] - 1] = tok.start[1]
    out = []
    for i, line in enumerate(lines):
        if i not in cut:
            out.append(line)
        elif line[: cut[i]].strip():
            out.append(line[: cut[i]].rstrip() + "\n")
    return "".join(out)


def _strip_docstrings(text):
    """Drops the docstring of the module and of every class and function, with the blank lines after it; a body
    that was only a docstring keeps a `pass` in its place."""
    lines = text.splitlines(keepends=True)
    drop, replace = set(), {}
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) or not node.body:
            continue
        doc = node.body[0]
        if not (isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)):
            continue
        first, last = doc.lineno - 1, doc.end_lineno - 1
        alone = not lines[first][: doc.col_offset].strip() and not lines[last][doc.end_col_offset:].strip()
        if len(node.body) > 1 and alone:
            drop.update(range(first, last + 1))
            while last + 1 < len(lines) and not lines[last + 1].strip():
                last += 1
                drop.add(last)
        elif alone:  # the body's only statement: a `pass` line in its place
            drop.update(range(first + 1, last + 1))
            replace[first] = lines[first][: doc.col_offset] + "pass\n"
        elif first == last:  # a one-line docstring sharing its line (`def f(): "doc"`)
            replace[first] = lines[first][: doc.col_offset] + "pass" + lines[first][doc.end_col_offset:]
        else:
            raise SyntaxError("multi-line docstring sharing its lines")
    out = [replace.get(i, line) for i, line in enumerate(lines) if i not in drop]
    return "".join(out).lstrip("\n")


def strip_source(text):
    """The file without docstrings and `#` comments, or None when it (or the result) does not parse."""
    try:
        out = _strip_docstrings(_strip_comments(text))
        ast.parse(out)
    except (SyntaxError, tokenize.TokenError, ValueError, IndentationError, RecursionError, MemoryError):
        return None
    return out if len(out) >= 64 else None


def strip_docs(texts, processes=None):
    """strip_source over the documents (in order, in parallel); documents that no longer parse are dropped."""
    import multiprocessing
    with multiprocessing.Pool(processes or os.cpu_count()) as pool:
        return [t for t in pool.map(strip_source, texts, chunksize=16) if t is not None]
