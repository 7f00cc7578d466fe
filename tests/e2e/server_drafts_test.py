#!/usr/bin/env python3
"""End to end: drafted == plain through the server on a model with an MTP head (models/flashnext-tiny), driven
by the official OpenAI SDK. Greedy and seeded replies with drafts equal `"draft": false`, alone and beside
other concurrent requests (streamed and not); the drafted/accepted counts are nonzero, so drafts really ran.

The server runs with `--draft-depth 3` so every window drafts (the depth policy would turn drafts off where
they do not pay, and its choice depends on timing). Run by ctest (server_drafts_e2e):
server_drafts_test.py --binary build/deltaserve --source .  Exits 77 (skipped) only without the `openai`
package."""
import argparse
import os
import re
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_process  # noqa: E402

openai = server_process.import_openai_or_skip()

ARGS = None

# (name, request): completions and chat, greedy and seeded sampling.
REQUESTS = [
    ("greedy code", dict(kind="completion", prompt="def fibonacci(n):", max_tokens=40, temperature=0)),
    ("seeded code", dict(kind="completion", prompt="import numpy as np\n\nclass Matrix:\n", max_tokens=40,
                         temperature=0.6, top_p=0.95, seed=7)),
    ("greedy chat", dict(kind="chat", prompt="Write a Python function that returns the n-th Fibonacci number.",
                         max_tokens=32, temperature=0)),
    ("seeded chat", dict(kind="chat", prompt="Sort a list of numbers in Python.", max_tokens=32,
                         temperature=0.8, seed=11)),
]


def extension(resp):
    return resp.model_dump()["extension"]


class DraftedEqualsPlain(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model_dir = os.path.join(ARGS.source, "models", "flashnext-tiny")
        cls.server = server_process.Server(ARGS.binary, cls.model_dir, "--draft-depth", "3", "--parallel", "4")
        cls.client = openai.OpenAI(base_url=cls.server.url + "/v1", api_key="none", max_retries=0, timeout=120)
        cls.model = os.path.basename(cls.model_dir)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def ask(self, req, draft=True):
        """The reply's token ids and (drafted, accepted) for one request."""
        extra = {"return_token_ids": True, "ignore_eos": True}
        if not draft:
            extra["draft"] = False
        common = dict(model=self.model, max_tokens=req["max_tokens"], temperature=req["temperature"],
                      seed=req.get("seed"), top_p=req.get("top_p", 1.0), extra_body=extra)
        if req["kind"] == "chat":
            r = self.client.chat.completions.create(messages=[{"role": "user", "content": req["prompt"]}], **common)
        else:
            r = self.client.completions.create(prompt=req["prompt"], **common)
        ext = extension(r)
        self.assertEqual(len(ext["token_ids"]), req["max_tokens"])
        return ext["token_ids"], (ext["drafted"], ext["accepted"])

    def test_alone_and_beside_others_equal_plain(self):
        totals = [0, 0]
        for name, req in REQUESTS:
            with self.subTest(name):
                plain, counts = self.ask(req, draft=False)
                self.assertEqual(counts, (0, 0))
                alone, (drafted, accepted) = self.ask(req)
                self.assertEqual(alone, plain)
                self.assertGreater(drafted, 0)  # depth 3: every window drafted
                totals[0] += drafted
                totals[1] += accepted
                # Beside three others at once: two drafting (one sampled), one plain.
                others, results = [REQUESTS[(i + 1) % len(REQUESTS)][1] for i in range(3)], {}

                def other(i):
                    results[i] = self.ask(others[i], draft=(i != 2))

                threads = [threading.Thread(target=other, args=(i,)) for i in range(3)]
                for t in threads:
                    t.start()
                beside, (drafted_beside, _) = self.ask(req)
                for t in threads:
                    t.join()
                self.assertEqual(beside, plain)
                self.assertGreater(drafted_beside, 0)
                self.assertEqual(len(results), 3)
                for i in range(3):  # the others too equal their plain replies
                    self.assertEqual(results[i][0], self.ask(others[i], draft=False)[0])
        self.assertGreater(totals[1], 0)  # drafts landed
        self.assertLess(totals[1], totals[0])  # and some were cut (rolled back)
        metrics = self.server.get("/metrics")[1]
        drafted = int(re.search(r"^deltaserve_drafted_tokens_total (\d+)", metrics, re.M).group(1))
        accepted = int(re.search(r"^deltaserve_accepted_tokens_total (\d+)", metrics, re.M).group(1))
        self.assertGreaterEqual(drafted, totals[0])
        self.assertGreater(accepted, 0)

    def test_streamed_reply_equals_plain(self):
        req = REQUESTS[1][1]
        ask = dict(model=self.model, prompt=req["prompt"], max_tokens=req["max_tokens"], temperature=req["temperature"],
                   top_p=req["top_p"], seed=req["seed"])
        plain = self.client.completions.create(extra_body={"ignore_eos": True, "draft": False}, **ask)
        chunks = list(self.client.completions.create(stream=True, extra_body={"ignore_eos": True}, **ask))
        self.assertEqual("".join(c.choices[0].text for c in chunks if c.choices), plain.choices[0].text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--source", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v", *rest])
