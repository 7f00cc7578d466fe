#!/usr/bin/env bash
# The device command that trains models/flashnext-tiny-bf16, run from the repo root of the checkout the device
# machine receives, with tools/train and tools/mtp/mtp_head.py copied to an ignored folder (.dev/train, with mtp/
# inside) that is carried; the script runs from its own folder. Pass STEPS=N to replay a run's schedule instead of
# timing it (--steps auto). TRAIN_S/WALL_S/RESERVE_S/LIMIT_S set the time budget; further arguments go to
# train_tiny.py (stage 2: --init-from init --strip-docstrings --lr 6e-4 --warmup 25, see MODEL_CARD.md).
# Writes to $OUT (at most 8 files of 16 MiB): the log, loss CSV, corpus manifest, result, the model tar in 15 MiB parts.
set -o pipefail
cd "$(dirname "$0")" || exit 1
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true
nvidia-smi -L
timeout "${LIMIT_S:-575}" python3 train_tiny.py --out /tmp/w --mtp-dir mtp --steps "${STEPS:-auto}" \
  --train-seconds "${TRAIN_S:-420}" --wall-seconds "${WALL_S:-505}" --reserve-seconds "${RESERVE_S:-70}" "$@" 2>&1 |
  grep -v "falling back" | tee "$OUT/stdout.log"
cd /tmp/w && cp loss.csv result.json corpus.json "$OUT/"
tar cf - model | split -b 15M - "$OUT/model.tar.part-"
ls -la "$OUT"
