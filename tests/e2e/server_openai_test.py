#!/usr/bin/env python3
"""End to end: a real `deltaserve serve` process on the tiny fixture model, driven by the official OpenAI SDK.

Run by ctest (server_openai_e2e): server_openai_test.py --binary build/deltaserve --source .
Exits 77 (ctest: skipped) only when the `openai` package is not installed; scripts/setup.sh installs it."""
import argparse
import json
import os
import shutil
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_process  # noqa: E402
from server_process import make_model_dir  # noqa: E402

openai = server_process.import_openai_or_skip()

ARGS = None


class Server(server_process.Server):
    def __init__(self, model_dir, *extra):
        super().__init__(ARGS.binary, model_dir, *extra)

    def client(self, key="none"):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0, timeout=120)


def extension(resp):
    return resp.model_dump()["extension"]


class ServerCase(unittest.TestCase):
    """One server on a copy of the model for the class; `server_args` and `prepare_model` vary it."""
    server_args = ()

    @classmethod
    def prepare_model(cls, model_dir):
        pass

    @classmethod
    def setUpClass(cls):
        cls.model_dir = make_model_dir(ARGS.source)
        cls.prepare_model(cls.model_dir)
        cls.server = Server(cls.model_dir, *cls.server_args)
        cls.client = cls.server.client()
        cls.model = os.path.basename(cls.model_dir)

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        shutil.rmtree(cls.model_dir, ignore_errors=True)
        assert code == 0, f"server exit code {code} after SIGTERM"


class OpenAISdk(ServerCase):

    def test_models_and_health(self):
        self.assertEqual([m.id for m in self.client.models.list()], [self.model])
        status, body = self.server.get("/health")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["status"], "ok")
        status, text = self.server.get("/metrics")
        self.assertIn("deltaserve_time_to_first_token_seconds_bucket", text)

    def test_chat(self):
        r = self.client.chat.completions.create(model=self.model, messages=[{"role": "user", "content": "Hello"}],
                                                max_tokens=6, seed=3)
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 6)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + 6)
        self.assertEqual(r.usage.prompt_tokens_details.cached_tokens, 0)
        self.assertIsNotNone(r.usage.completion_tokens_details.reasoning_tokens)
        self.assertEqual(extension(r)["seed"], 3)

    def test_completions_text_and_token_prompts(self):
        r = self.client.completions.create(model=self.model, prompt="Once upon a time", max_tokens=5,
                                           temperature=0, echo=True)
        self.assertTrue(r.choices[0].text.startswith("Once upon a time"))
        ids = self.client.completions.create(model=self.model, prompt=[10, 20, 30], max_tokens=5, temperature=0,
                                             extra_body={"return_token_ids": True})
        self.assertEqual(len(extension(ids)["token_ids"]), ids.usage.completion_tokens)
        self.assertEqual(ids.usage.prompt_tokens, 3)

    def test_streaming_with_usage(self):
        stream = self.client.chat.completions.create(model=self.model, messages=[{"role": "user", "content": "Hi"}],
                                                     max_tokens=7, stream=True, stream_options={"include_usage": True},
                                                     temperature=0)
        chunks = list(stream)
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 7)
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual(finishes, ["length"])
        plain = self.client.chat.completions.create(model=self.model, messages=[{"role": "user", "content": "Hi"}],
                                                    max_tokens=7, temperature=0)
        text = "".join((c.choices[0].delta.content or "") for c in chunks if c.choices)
        reasoning = "".join((c.choices[0].delta.model_extra.get("reasoning_content") or "") for c in chunks
                            if c.choices)
        self.assertEqual(text, plain.choices[0].message.content or "")
        self.assertEqual(reasoning, plain.choices[0].message.model_extra.get("reasoning_content") or "")

    def test_stop_string(self):
        base = self.client.completions.create(model=self.model, prompt="Hello", max_tokens=16, temperature=0,
                                              extra_body={"ignore_eos": True})
        text = base.choices[0].text
        cut = next((i for i in range(2, len(text) - 1) if text[i].isprintable() and text[i] != "\ufffd"), None)
        if cut is None:
            self.skipTest("greedy text has no printable character to stop on")
        stop = text[cut]
        r = self.client.completions.create(model=self.model, prompt="Hello", max_tokens=16, temperature=0,
                                           stop=[stop], extra_body={"ignore_eos": True})
        self.assertEqual(r.choices[0].text, text[:text.index(stop)])
        self.assertEqual(r.choices[0].finish_reason, "stop")

    def test_logprobs(self):
        r = self.client.chat.completions.create(model=self.model, messages=[{"role": "user", "content": "Hi"}],
                                                max_tokens=4, logprobs=True, top_logprobs=3, temperature=0)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), 4)
        for entry in content:
            self.assertEqual(len(entry.top_logprobs), 3)
            self.assertLessEqual(entry.logprob, 0)
            self.assertAlmostEqual(entry.logprob, entry.top_logprobs[0].logprob, places=5)  # greedy: the best
        c = self.client.completions.create(model=self.model, prompt="Hi", max_tokens=3, logprobs=2, temperature=0)
        self.assertEqual(len(c.choices[0].logprobs.token_logprobs), 3)
        self.assertEqual(len(c.choices[0].logprobs.top_logprobs[0]), 2)

    def test_errors(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(model=self.model, messages=[{"role": "user", "content": "x"}], n=2)
        self.assertEqual(e.exception.body["param"], "n")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "x"}])
        self.assertEqual(e.exception.body["code"], "model_not_found")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model=self.model, prompt=[1, 99999])
        self.assertEqual(e.exception.body["param"], "prompt")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(model=self.model, messages=[{"role": "user", "content": "x"}],
                                                logprobs=True, top_logprobs=21)
        self.assertEqual(e.exception.body["param"], "top_logprobs")
        status, body = self.server.post("/v1/chat/completions", b"{not json")
        self.assertEqual(status, 400)
        self.assertEqual(body["error"]["type"], "invalid_request_error")
        status, body = self.server.post("/v1/completions", {"prompt": [5] * 5000})
        self.assertEqual(body["error"]["code"], "context_length_exceeded")

    def test_tokenize_round_trip(self):
        status, tok = self.server.post("/tokenize", {"prompt": "Hello world"})
        self.assertEqual(status, 200)
        status, detok = self.server.post("/detokenize", {"tokens": tok["tokens"]})
        self.assertEqual(detok["prompt"], "Hello world")

    def test_disconnect_frees_the_slot(self):
        stream = self.client.completions.create(model=self.model, prompt="Go", max_tokens=3000, stream=True,
                                                extra_body={"ignore_eos": True})
        for i, _ in enumerate(stream):
            if i == 2:
                break
        stream.close()
        deadline = time.time() + 30
        while time.time() < deadline:
            health = json.loads(self.server.get("/health")[1])
            if health["requests_running"] == 0 and health["requests_queued"] == 0:
                break
            time.sleep(0.1)
        self.assertEqual(health["requests_running"], 0)
        self.assertIn("deltaserve_client_disconnects_total 1", self.server.get("/metrics")[1])

    def test_same_tokens_alone_beside_others_and_without_drafts(self):
        def ask(seed, prompt, **extra):
            r = self.client.completions.create(model=self.model, prompt=prompt, max_tokens=20, seed=seed,
                                               temperature=0.8, extra_body={"return_token_ids": True,
                                                                            "ignore_eos": True, **extra})
            return extension(r)["token_ids"], extension(r)["token_hash"]

        alone = ask(11, "The quick brown fox")
        results = {}

        def other(i):
            results[i] = ask(100 + i, f"Request {i} says hello", top_p=0.9)

        threads = [threading.Thread(target=other, args=(i,)) for i in range(7)]
        for t in threads:
            t.start()
        beside = ask(11, "The quick brown fox")
        for t in threads:
            t.join()
        self.assertEqual(len(results), 7)
        plain = ask(11, "The quick brown fox", draft=False)
        self.assertEqual(alone, beside)
        self.assertEqual(alone, plain)
        greedy = [self.client.completions.create(model=self.model, prompt="abc", max_tokens=12, temperature=0,
                                                 extra_body={"return_token_ids": True, "draft": d})
                  for d in (True, False)]
        self.assertEqual(extension(greedy[0])["token_ids"], extension(greedy[1])["token_ids"])


    def test_streamed_tool_calls_accumulate_to_the_whole_reply(self):
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}}}}]
        ask = dict(model=self.model, messages=[{"role": "user", "content": "Weather in Oslo?"}], tools=tools,
                   tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=12,
                   temperature=0)
        calls, finishes = {}, []
        for chunk in self.client.chat.completions.create(stream=True, **ask):
            if not chunk.choices:
                continue
            if chunk.choices[0].finish_reason:
                finishes.append(chunk.choices[0].finish_reason)
            for piece in chunk.choices[0].delta.tool_calls or []:
                if piece.index not in calls:  # a call's first piece names it
                    self.assertIsNotNone(piece.id)
                    self.assertEqual(piece.type, "function")
                    calls[piece.index] = {"id": piece.id, "name": piece.function.name, "arguments": ""}
                calls[piece.index]["arguments"] += piece.function.arguments or ""
        whole = self.client.chat.completions.create(**ask)
        message = whole.choices[0].message
        self.assertEqual(len(message.tool_calls), 1)
        self.assertEqual(message.tool_calls[0].function.name, "get_weather")
        self.assertEqual(list(calls), [0])
        self.assertEqual(calls[0], {"id": message.tool_calls[0].id, "name": "get_weather",
                                    "arguments": message.tool_calls[0].function.arguments})
        self.assertEqual(finishes, [whole.choices[0].finish_reason])
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(**{**ask, "tool_choice": {"type": "function",
                                                                          "function": {"name": "nope"}}})
        self.assertEqual(e.exception.body["param"], "tool_choice.function.name")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(**ask, response_format={"type": "json_object"})
        self.assertEqual(e.exception.body["param"], "response_format")


def health(server):
    return json.loads(server.get("/health")[1])


def wait_for(condition, what, limit=30):
    """Polls `condition` (server state read over HTTP) until true; fails after `limit` seconds."""
    deadline = time.time() + limit
    while not condition():
        if time.time() > deadline:
            raise AssertionError(f"timed out after {limit} s waiting for {what}")
        time.sleep(0.05)


class WholeReplies(ServerCase):
    """Non-streaming replies send nothing until they are whole (docs/server.md, "Errors"): a client that leaves
    is noticed through its socket, and a silent wait is not taken for a client that left."""

    # One slot, and a context long enough that an abandoned reply would run for many seconds (the tiny model
    # decodes ~2500 tokens/s here): its cancel is not a race with its natural end.
    server_args = ("--parallel", "1")
    long = 60000

    @classmethod
    def prepare_model(cls, model_dir):
        # The fixture's 4096 positions are raised to 65536 (the rotary angles of the positions used stay the same).
        config_path = os.path.join(model_dir, "config.json")
        with open(config_path) as f:
            config = json.load(f)
        config["max_position_embeddings"] = 65536
        with open(config_path, "w") as f:
            json.dump(config, f)

    def test_a_client_that_leaves_mid_generation_frees_the_only_slot(self):
        before = health(self.server)["completion_tokens_total"]
        max_tokens = self.long
        body = json.dumps({"model": self.model, "prompt": "Go", "max_tokens": max_tokens, "ignore_eos": True})
        request = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n{body}").encode()
        sock = socket.create_connection(("127.0.0.1", self.server.port), timeout=30)
        sock.sendall(request)
        wait_for(lambda: health(self.server)["requests_running"] == 1, "the request to start")
        sock.close()  # the client leaves; it was sent nothing
        wait_for(lambda: health(self.server)["requests_running"] == 0, "the request to be cancelled")
        metrics = self.server.get("/metrics")[1]
        self.assertIn("deltaserve_client_disconnects_total 1", metrics)
        self.assertIn('deltaserve_requests_total{route="completions",status="other"} 1', metrics)  # 499
        # Cut short, not run to max_tokens; and the next request gets the slot at once.
        self.assertLess(health(self.server)["completion_tokens_total"] - before, max_tokens)
        r = self.client.completions.create(model=self.model, prompt="Next", max_tokens=4,
                                           extra_body={"ignore_eos": True})
        self.assertEqual(r.usage.completion_tokens, 4)

    def test_a_reply_that_waits_silently_is_not_cancelled(self):
        # The stream holds the only slot for over a second (the server checks a waiting client every 0.5 s) while
        # the non-streaming request waits in the queue with nothing sent; it then runs and is whole.
        held = self.client.completions.create(model=self.model, prompt="Go", max_tokens=self.long,
                                              stream=True, extra_body={"ignore_eos": True})
        stream = iter(held)
        next(stream)
        result = {}

        def ask():
            try:
                result["reply"] = self.client.completions.create(model=self.model, prompt="Wait", max_tokens=5,
                                                                 extra_body={"ignore_eos": True})
            except Exception as e:  # reported below
                result["error"] = e

        waiting = threading.Thread(target=ask)
        waiting.start()
        wait_for(lambda: health(self.server)["requests_queued"] == 1, "the second request to queue")
        start = time.time()
        for _ in stream:
            if time.time() - start > 1.5:
                break
        held.close()
        waiting.join(timeout=60)
        self.assertFalse(waiting.is_alive())
        self.assertNotIn("error", result, result.get("error"))
        self.assertEqual(result["reply"].usage.completion_tokens, 5)
        self.assertEqual(result["reply"].choices[0].finish_reason, "length")


class QueueFull(unittest.TestCase):
    def test_a_full_queue_is_429_with_retry_after(self):
        model_dir = make_model_dir(ARGS.source)
        server = Server(model_dir, "--parallel", "1", "--max-queue", "1")
        client = server.client()
        long = dict(model=os.path.basename(model_dir), prompt="Go", max_tokens=3000, stream=True,
                    extra_body={"ignore_eos": True})
        try:
            running = client.completions.create(**long)
            next(iter(running))  # holds the only slot
            queued = client.completions.create(**long)  # waits in the queue of one
            with self.assertRaises(openai.RateLimitError) as e:
                client.completions.create(**long)
            self.assertEqual(e.exception.response.headers.get("retry-after"), "1")
            self.assertEqual(e.exception.body["code"], "queue_full")
            running.close()
            queued.close()
        finally:
            self.assertEqual(server.stop(), 0)
            shutil.rmtree(model_dir, ignore_errors=True)


class ApiKey(unittest.TestCase):
    def test_key_required_except_health(self):
        model_dir = make_model_dir(ARGS.source)
        server = Server(model_dir, "--api-key", "sekret")
        try:
            with self.assertRaises(openai.AuthenticationError):
                server.client("wrong").models.list()
            self.assertEqual(len(server.client("sekret").models.list().data), 1)
            self.assertEqual(server.get("/health")[0], 200)
            status, _ = server.get("/v1/models")
            self.assertEqual(status, 401)
        finally:
            self.assertEqual(server.stop(), 0)
            shutil.rmtree(model_dir, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--source", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v", *rest])
