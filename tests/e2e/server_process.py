"""A real `deltaserve serve` process on the tiny fixture model, shared by the SDK end-to-end test and
tools/loadtest. Standard library only."""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request


def import_openai_or_skip():
    """The official openai client, or exit 77 (ctest's skip code) saying how to install it."""
    try:
        import openai
    except ImportError:
        print("SKIP: the openai Python package is not installed (scripts/setup.sh installs it)")
        raise SystemExit(77)
    return openai


def make_model_dir(source):
    """The qwen4exp_base fixture's weights plus the 320-token test tokenizer with a ChatML thinking template."""
    out = tempfile.mkdtemp(prefix="deltaserve-e2e-")
    fixture = os.path.join(source, "tests", "fixtures", "qwen4exp_base")
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        shutil.copy(os.path.join(fixture, name), out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(source, "tests", "data", "server_model", name), out)
    return out


class Server:
    """Starts `BINARY serve MODEL_DIR --port 0 --threads 2 EXTRA...` and reads the chosen port from stderr."""

    def __init__(self, binary, model_dir, *extra):
        self.proc = subprocess.Popen([binary, "serve", model_dir, "--port", "0", "--threads", "2", *extra],
                                     stderr=subprocess.PIPE, text=True)
        self.log = []
        deadline = time.time() + 60
        self.port = None
        while time.time() < deadline and self.port is None:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("server exited: " + "".join(self.log))
            self.log.append(line)
            m = re.search(r"http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
        threading.Thread(target=lambda: [self.log.append(l) for l in self.proc.stderr], daemon=True).start()
        self.url = f"http://127.0.0.1:{self.port}"

    def get(self, path, headers=None):
        req = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def post(self, path, body):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        self.proc.stderr.close()
        return code
