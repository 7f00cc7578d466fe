# Sizes of the DeviceSampler's candidate lists (src/backend/cuda/sampling/kept_set.cu) for normal logits of a
# few spreads at vocabulary 248,320, computed on the host (float masses: sizes, not tokens): top-k, the
# tokens at or above the k-th largest of the 7,936 thread maxima (chunks of 8,192, 256 threads, strided);
# top-p alone, the tokens with mass in the 1/16-nat offset bin where the cut falls. A list over 4,096 sends
# the row to the full-row radix selection (a few ms). Run: /opt/refenv/bin/python list_sizes.py
import numpy as np
V, chunk, threads = 248320, 8192, 256
rng = np.random.default_rng(5)
def thread_maxima(z):
    parts = (V + chunk - 1) // chunk
    pad = np.full(parts * chunk, -np.inf, np.float32); pad[:V] = z
    return pad.reshape(parts, chunk // threads, threads).max(axis=1).ravel()
for sd in (1.0, 2.0, 3.0, 5.0):
    z = (rng.standard_normal(V) * sd).astype(np.float32)
    tm = np.sort(thread_maxima(z))[::-1]
    ks = {k: int((z >= tm[k - 1]).sum()) for k in (1, 20, 50, 1000)}
    row = [f"sd {sd}: top-k lists " + " ".join(f"k{k}:{n}" for k, n in ks.items())]
    for T in (0.6, 1.0, 1.5):
        for p in (0.9, 0.95):
            x = z.astype(np.float64) / T - z.max() / T
            m = np.exp(x); m[x < -31.2] = 0
            b = np.minimum((-x * 16).astype(np.int64), 511)
            mass = np.bincount(b, weights=m, minlength=512)
            cum = np.cumsum(mass); cut = int(np.searchsorted(cum, p * cum[-1]))
            row.append(f"T{T} p{p}:{int(((b == cut) & (m > 0)).sum())}")
    print("  ".join(row))
