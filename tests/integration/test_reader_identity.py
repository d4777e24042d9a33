"""Defect 21: caches key on what a model is (a GGUF's content, a server's URL and build), not on its name."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lcrag.readers import CachedReader, CompletionCache, GenerationParams, OpenAIChatReader
from lcrag.retrieval.summaries import Summarizer

QUESTION = [{"role": "user", "content": "same question"}]


class AliasServer:
    """An OpenAI-compatible server answering as ``alias``, each with its own reply and system_fingerprint."""

    def __init__(self, reply: str, fingerprint: str | None = None):
        self.reply, self.fingerprint, self.requests = reply, fingerprint, 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                owner.requests += 1
                data = {"choices": [{"message": {"content": owner.reply}}],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 1}}
                if owner.fingerprint:
                    data["system_fingerprint"] = owner.fingerprint
                body = json.dumps(data).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/v1"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()


@pytest.fixture
def alias_servers():
    servers = []

    def start(reply, fingerprint=None):
        servers.append(AliasServer(reply, fingerprint))
        return servers[-1]

    yield start
    for s in servers:
        s.http.shutdown()


def test_two_servers_with_one_alias_do_not_share_cached_answers(tmp_path, alias_servers):
    first, second = alias_servers("from the first"), alias_servers("from the second")
    cache = CompletionCache(tmp_path / "completions.sqlite")
    readers = [CachedReader(OpenAIChatReader("alias", base_url=s.url, context_window=1000), cache)
               for s in (first, second)]
    assert readers[0].identity != readers[1].identity
    answers = [r.complete(QUESTION, GenerationParams()).text for r in readers]
    assert answers == ["from the first", "from the second"]
    assert readers[0].complete(QUESTION, GenerationParams()).from_cache  # each server's own answer is kept
    assert (first.requests, second.requests) == (1, 1)
    # summaries and token counts key on the identity too
    assert Summarizer(readers[0]).key != Summarizer(readers[1]).key
    assert readers[0].tokenizer.name != readers[1].tokenizer.name


def test_another_system_fingerprint_is_not_served_from_cache(tmp_path, alias_servers):
    server = alias_servers("old build", fingerprint="fp_old")
    cache = CompletionCache(tmp_path / "completions.sqlite")
    reader = CachedReader(OpenAIChatReader("alias", base_url=server.url, context_window=1000), cache)
    reader.complete(QUESTION, GenerationParams())
    server.reply, server.fingerprint = "new build", "fp_new"
    reader.complete([{"role": "user", "content": "another"}], GenerationParams())  # the reader learns the new build
    again = reader.complete(QUESTION, GenerationParams())
    assert (again.text, again.from_cache, again.system_fingerprint) == ("new build", False, "fp_new")
    assert reader.complete(QUESTION, GenerationParams()).from_cache  # the new build's answer is cached
