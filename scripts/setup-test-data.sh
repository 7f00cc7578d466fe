#!/usr/bin/env bash
# Builds the tokenizer parity data in .cache/tokenizer/ (or $DELTASERVE_TOKENIZER_DATA): the real Qwen3 and
# Qwen3.5 tokenizer.json files from pinned PyPI wheels, the generated corpus, and HF tokenizers' expected ids.
# Nothing here is committed; reruns are no-ops until a pinned version or a generating tool changes.
set -euo pipefail
cd "$(dirname "$0")/.."

DATA=${DELTASERVE_TOKENIZER_DATA:-.cache/tokenizer}
VENV=.cache/venv-tokenizer
TOKENIZERS=tokenizers==0.23.3
FAKER=faker==40.63.0
# Qwen3.5 (Qwen/Qwen3.5-0.8B) tokenizer.json, Apache-2.0, vendored by Meteo-France's mfai.
MFAI=mfai==9.0.1
QWEN35_SHA=5f9e4d4901a92b997e463c1f46055088b6cca5ca61a6522d1b9f64c4bb81cb42
# Qwen3 (Qwen/Qwen3-4B) tokenizer.json + tokenizer_config.json, Apache-2.0, vendored (gzipped) by InvokeAI.
INVOKEAI=invokeai==6.14.2
QWEN3_SHA=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4

stamp="$TOKENIZERS $FAKER $MFAI $INVOKEAI $(cat "$0" tools/gen_tokenizer_corpus.py tools/tokenizer_reference.py \
  | sha256sum | cut -d' ' -f1)"
if [ -f "$DATA/stamp" ] && [ "$(cat "$DATA/stamp")" = "$stamp" ]; then
  echo "tokenizer test data in $DATA is up to date"
  exit 0
fi

mkdir -p "$DATA/wheels"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check "$TOKENIZERS" "$FAKER"
"$VENV/bin/pip" download -q --disable-pip-version-check --no-deps -d "$DATA/wheels" "$MFAI" "$INVOKEAI"
PY="$VENV/bin/python"

# Only the tokenizer files are taken out of the wheels (neither package is installed).
"$PY" - "$DATA" <<'EOF'
import glob, gzip, os, sys, zipfile
data = sys.argv[1]
def take(wheel_glob, member, out, gunzip=False):
    wheel = sorted(glob.glob(os.path.join(data, "wheels", wheel_glob)))[-1]
    with zipfile.ZipFile(wheel) as z:
        raw = z.read(member)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "wb") as f:
        f.write(gzip.decompress(raw) if gunzip else raw)
take("mfai-*.whl", "mfai/tokenizers/qwen3.5/tokenizer.json", f"{data}/qwen3_5/tokenizer.json")
take("invokeai-*.whl", "invokeai/backend/qwen3/tokenizer/tokenizer.json.gz", f"{data}/qwen3/tokenizer.json", True)
take("invokeai-*.whl", "invokeai/backend/qwen3/tokenizer/tokenizer_config.json", f"{data}/qwen3/tokenizer_config.json")
EOF
echo "$QWEN35_SHA  $DATA/qwen3_5/tokenizer.json" | sha256sum -c --quiet
echo "$QWEN3_SHA  $DATA/qwen3/tokenizer.json" | sha256sum -c --quiet

"$PY" tools/gen_tokenizer_corpus.py --out "$DATA/corpus.bin"
"$PY" tools/tokenizer_reference.py variant --base "$DATA/qwen3/tokenizer.json" --kind flags \
  --out "$DATA/qwen3_flags/tokenizer.json"
"$PY" tools/tokenizer_reference.py variant --base "$DATA/qwen3_5/tokenizer.json" --kind ignore_merges \
  --out "$DATA/qwen3_5_ignore_merges/tokenizer.json"
for v in qwen3 qwen3_5 qwen3_flags qwen3_5_ignore_merges; do
  "$PY" tools/tokenizer_reference.py expect --tokenizer "$DATA/$v/tokenizer.json" --corpus "$DATA/corpus.bin" \
    --out "$DATA/$v.expected"
done
echo "$stamp" > "$DATA/stamp"
echo "tokenizer test data written to $DATA"
