#!/usr/bin/env python3
"""Load test for `deltaserve serve` (issue 5): N concurrent streaming clients against the tiny fixture model.

  python3 tools/loadtest/server_load.py --binary build/deltaserve --source . [--clients 32] [--duration 120]

Starts the server (tests/e2e/server_process.py), warms up with the same load, then runs the clients for
--duration seconds. Each client loops over a fixed catalogue of requests: chat and completions, different prompt
and reply lengths, some with stop strings, some sampled with seeds, some forcing a tool call, all streamed
with usage. Every stream is
checked: HTTP 200, SSE framing, one finish_reason, a usage chunk whose counts match the tokens (prompt count from
/tokenize, completion count from the returned token ids), [DONE] last, no stop string in the text, and the same
token hash every time the same request is sent (replies never depend on what else runs). The server's VmRSS is
sampled from /proc/PID/status every second. Pass: zero errors and RSS after the run within --rss-tolerance-mib of
RSS after warm-up (both taken idle). Standard library only. Not part of ctest: it takes minutes."""
import argparse
import http.client
import json
import os
import shutil
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "e2e"))
from server_process import Server, make_model_dir  # noqa: E402

WORDS = ("the quick brown fox jumps over a lazy dog while seven small birds sing about rivers stones and "
         "light in the early morning").split()


TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}}}}}]


def catalogue(count):
    """Fixed requests: kind, prompt length, reply length, stop strings and sampling all vary with the index."""
    specs = []
    for i in range(count):
        words = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(3 + (i * 7) % 60))
        body = {"max_tokens": (8, 24, 48, 96, 160)[i % 5], "stream": True,
                "stream_options": {"include_usage": True}, "return_token_ids": True}
        if i % 3 == 0:
            body["stop"] = ["e ", "ou"] if i % 2 else "\n"
        if i % 4 in (1, 2):
            body.update(temperature=0.8, top_p=0.95, seed=1000 + i)
        else:
            body["temperature"] = 0
        if i % 5 == 4:
            body["ignore_eos"] = True
        if i % 2 == 0:
            body["messages"] = [{"role": "user", "content": f"Request {i}: {words}"}]
            if i % 8 == 0:
                body["chat_template_kwargs"] = {"enable_thinking": False}
            if i % 12 == 6:  # a forced tool call: its name first, then argument fragments
                body["tools"] = TOOLS
                body["tool_choice"] = {"type": "function", "function": {"name": "lookup"}}
            specs.append(("/v1/chat/completions", body))
        else:
            body["prompt"] = f"Request {i}: {words}"
            specs.append(("/v1/completions", body))
    return specs


class Results:
    def __init__(self):
        self.lock = threading.Lock()
        self.latencies, self.ttfts, self.errors = [], [], []
        self.requests = self.tokens = 0

    def ok(self, latency, ttft, tokens):
        with self.lock:
            self.requests += 1
            self.tokens += tokens
            self.latencies.append(latency)
            if ttft is not None:
                self.ttfts.append(ttft)

    def error(self, message):
        with self.lock:
            self.errors.append(message)


class Checker:
    """What every reply must satisfy; the first token hash seen per request is the one all later ones must equal."""

    def __init__(self, server, specs):
        self.specs = specs
        self.prompt_tokens = []
        for path, body in specs:
            keys = ("messages", "chat_template_kwargs", "tools", "tool_choice") if "messages" in body else ("prompt",)
            probe = {k: body[k] for k in keys if k in body}
            status, r = server.post("/tokenize", probe)
            if status != 200:
                raise RuntimeError(f"/tokenize failed: {r}")
            self.prompt_tokens.append(r["count"])
        self.hashes = {}
        self.lock = threading.Lock()

    def check(self, index, events):
        path, body = self.specs[index]
        chat = path.endswith("chat/completions")
        if not events or events[-1] != "[DONE]":
            return "stream did not end with [DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        if any("error" in c for c in chunks):
            return "error event: " + json.dumps(next(c for c in chunks if "error" in c))
        if chat and chunks[0]["choices"][0]["delta"].get("role") != "assistant":
            return "first chat chunk has no role"
        finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and
                    c["choices"][0]["finish_reason"]]
        if len(finishes) != 1 or finishes[0] not in ("stop", "length", "tool_calls"):
            return f"finish reasons {finishes}"
        if "tool_choice" in body:
            pieces = [p for c in chunks if c["choices"] for p in c["choices"][0]["delta"].get("tool_calls", [])]
            if not pieces or pieces[0].get("function", {}).get("name") != "lookup" or not pieces[0].get("id"):
                return f"forced call: first piece {pieces[:1]}"
            if any(p["index"] != 0 or ("id" in p) for p in pieces[1:]):
                return "forced call: a later piece is not an argument fragment of call 0"
        usage_chunks = [c for c in chunks if not c["choices"]]
        if len(usage_chunks) != 1 or usage_chunks[0] is not chunks[-1]:
            return "usage chunk missing or not last"
        usage, ext = usage_chunks[0]["usage"], usage_chunks[0]["extension"]
        completion = len(ext["token_ids"])
        if usage["completion_tokens"] != completion:
            return f"usage.completion_tokens {usage['completion_tokens']} != {completion} token ids"
        if usage["prompt_tokens"] != self.prompt_tokens[index]:
            return f"usage.prompt_tokens {usage['prompt_tokens']} != /tokenize count {self.prompt_tokens[index]}"
        if usage["total_tokens"] != usage["prompt_tokens"] + completion:
            return "usage.total_tokens is not prompt + completion"
        if completion > body["max_tokens"] or (finishes[0] == "length" and completion != body["max_tokens"]):
            return f"{completion} tokens with max_tokens {body['max_tokens']} and finish {finishes[0]}"
        text = "".join((c["choices"][0]["delta"].get("content") or "") if chat else c["choices"][0]["text"]
                       for c in chunks if c["choices"])
        stops = body.get("stop", [])
        for stop in [stops] if isinstance(stops, str) else stops:
            if stop in text:
                return f"stop string {stop!r} in the reply"
        with self.lock:
            seen = self.hashes.setdefault(index, ext["token_hash"])
        if seen != ext["token_hash"]:
            return f"request {index}: token hash {ext['token_hash']} != {seen} from an earlier identical request"
        return None


def shows_text(event):
    """The first chunk with reply text (content, reasoning or completion text): time to first token."""
    if event == "[DONE]":
        return False
    choices = json.loads(event).get("choices") or [{}]
    part = choices[0].get("delta", choices[0])
    return bool(part.get("content") or part.get("reasoning_content") or part.get("text"))


def stream_once(port, path, body, results, checker, index):
    start = time.monotonic()
    ttft = None
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            return results.error(f"HTTP {resp.status}: {resp.read()[:200]!r}")
        if not resp.getheader("Content-Type", "").startswith("text/event-stream"):
            return results.error("Content-Type is not text/event-stream")
        events, buffer = [], b""
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.rstrip(b"\r\n")
            if line.startswith(b":"):
                continue  # keep-alive comment
            if line == b"":
                if buffer:
                    events.append(buffer.decode())
                    if ttft is None and shows_text(events[-1]):
                        ttft = time.monotonic() - start
                buffer = b""
                continue
            if not line.startswith(b"data: "):
                return results.error(f"bad SSE line {line[:80]!r}")
            buffer += line[len(b"data: "):]
        if buffer:
            events.append(buffer.decode())
        problem = checker.check(index, events)
        if problem:
            return results.error(problem)
        usage = json.loads(events[-2])["usage"]
        results.ok(time.monotonic() - start, ttft, usage["completion_tokens"])
    except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError) as e:
        results.error(f"{type(e).__name__}: {e}")
    finally:
        conn.close()


def run_clients(port, checker, clients, seconds, offset):
    results = Results()
    deadline = time.monotonic() + seconds

    def client(c):
        n = offset
        while time.monotonic() < deadline:
            index = (c * 5 + n) % len(checker.specs)
            stream_once(port, *checker.specs[index], results, checker, index)
            n += 1

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


class RssSampler(threading.Thread):
    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.samples, self.stopped = pid, [], threading.Event()
        self.t0 = time.monotonic()

    def run(self):
        while not self.stopped.is_set():
            self.samples.append((time.monotonic() - self.t0, rss_mib(self.pid)))
            self.stopped.wait(1.0)


def metric(server, name):
    for line in server.get("/metrics")[1].splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


def percentile(values, p):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--source", default=".")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--duration", type=float, default=120)
    parser.add_argument("--warmup", type=float, default=30)
    parser.add_argument("--requests", type=int, default=48, help="size of the request catalogue")
    parser.add_argument("--rss-tolerance-mib", type=float, default=8)
    parser.add_argument("--server-arg", action="append", default=[], help="extra `serve` argument (repeat)")
    parser.add_argument("--json", help="write the figures here as JSON")
    args = parser.parse_args()

    model_dir = make_model_dir(args.source)
    server = Server(args.binary, model_dir, *args.server_arg)
    sampler = RssSampler(server.proc.pid)
    sampler.start()
    try:
        checker = Checker(server, catalogue(args.requests))
        rss_start = rss_mib(server.proc.pid)
        warm = run_clients(server.port, checker, args.clients, args.warmup, 0)
        time.sleep(1)
        rss_warm, cache_warm = rss_mib(server.proc.pid), metric(server, "deltaserve_prompt_cache_bytes")
        t_measure = time.monotonic() - sampler.t0
        began = time.monotonic()
        main_run = run_clients(server.port, checker, args.clients, args.duration, 1)
        elapsed = time.monotonic() - began
        time.sleep(1)
        rss_end, cache_end = rss_mib(server.proc.pid), metric(server, "deltaserve_prompt_cache_bytes")
        load = os.getloadavg()
    finally:
        sampler.stopped.set()
        code = server.stop()
        shutil.rmtree(model_dir, ignore_errors=True)
    under_load = [r for t, r in sampler.samples if t >= t_measure]
    errors = warm.errors + main_run.errors
    if code != 0:
        errors.append(f"server exit code {code} after SIGTERM")
    figures = {
        "clients": args.clients, "duration_s": round(elapsed, 1), "warmup_s": args.warmup,
        "requests_warmup": warm.requests, "requests": main_run.requests,
        "completion_tokens": main_run.tokens, "tokens_per_s": round(main_run.tokens / elapsed, 1),
        "requests_per_s": round(main_run.requests / elapsed, 2),
        "latency_p50_s": round(percentile(main_run.latencies, 50), 3),
        "latency_p99_s": round(percentile(main_run.latencies, 99), 3),
        "ttft_p50_s": round(percentile(main_run.ttfts, 50), 3),
        "ttft_p99_s": round(percentile(main_run.ttfts, 99), 3),
        "errors": len(errors), "distinct_replies_checked": len(checker.hashes),
        "rss_start_mib": round(rss_start, 1), "rss_after_warmup_mib": round(rss_warm, 1),
        "rss_end_mib": round(rss_end, 1), "rss_growth_mib": round(rss_end - rss_warm, 1),
        "rss_under_load_min_mib": round(min(under_load), 1) if under_load else None,
        "rss_under_load_max_mib": round(max(under_load), 1) if under_load else None,
        "rss_samples": len(sampler.samples),
        "prompt_cache_mib_after_warmup": round(cache_warm / 2**20, 2),
        "prompt_cache_mib_end": round(cache_end / 2**20, 2),
        "loadavg": [round(x, 2) for x in load], "cpus": os.cpu_count(),
        "rss_tolerance_mib": args.rss_tolerance_mib,
    }
    for key, value in figures.items():
        print(f"{key:32} {value}")
    for e in errors[:20]:
        print("ERROR", e)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**figures, "rss_series": sampler.samples, "error_messages": errors[:100]}, f, indent=1)
    passed = not errors and rss_end - rss_warm <= args.rss_tolerance_mib
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
