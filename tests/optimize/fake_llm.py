"""A fake language-model server on 127.0.0.1 for tests: OpenAI's chat completions
(/v1/chat/completions) and Anthropic's messages (/v1/messages), answering scripted
replies in order and recording every request body.

A scripted reply is the assistant's text, a dict {"text": ..., "truncated": True} for a
reply cut off at the token limit, a function of the request body that returns either
(to answer with what the prompt holds), or an int: that HTTP status with an error
body. Token counts are reported as (characters of the request's messages) // 4 in and
(characters of the reply) // 4 out, so tests can check the accounting exactly.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def tokens_of(text: str) -> int:
    return len(text) // 4


class FakeLLM:
    def __init__(self, replies: list):
        self.replies = list(replies)
        self.requests: list[dict] = []  # {"path": ..., "body": {...}}
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.requests.append({"path": self.path, "body": body})
                    reply = fake.replies.pop(0) if fake.replies else 503
                if callable(reply):
                    reply = reply(body)
                if isinstance(reply, str):
                    reply = {"text": reply}
                if isinstance(reply, int):
                    self._send(reply, {"error": {"message": f"scripted status {reply}",
                                                 "type": "server_error"}})
                elif self.path.endswith("/chat/completions"):
                    self._send(200, fake.openai_body(body, reply))
                elif self.path.endswith("/messages"):
                    self._send(200, fake.anthropic_body(body, reply))
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def _send(self, status: int, payload: dict):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    @staticmethod
    def prompt_chars(body: dict) -> int:
        chars = len(body.get("system", "") or "")
        for m in body["messages"]:
            chars += len(m["content"]) if isinstance(m["content"], str) else 0
        return chars

    def openai_body(self, body: dict, reply: dict) -> dict:
        text = reply["text"]
        n_in, n_out = self.prompt_chars(body) // 4, tokens_of(text)
        return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0,
                "model": body["model"],
                "choices": [{"index": 0,
                             "finish_reason": "length" if reply.get("truncated") else "stop",
                             "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": n_in, "completion_tokens": n_out,
                          "total_tokens": n_in + n_out}}

    def anthropic_body(self, body: dict, reply: dict) -> dict:
        text = reply["text"]
        return {"id": "msg_fake", "type": "message", "role": "assistant",
                "model": body["model"], "content": [{"type": "text", "text": text}],
                "stop_reason": "max_tokens" if reply.get("truncated") else "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": self.prompt_chars(body) // 4,
                          "output_tokens": tokens_of(text)}}

    def user_prompt(self, i: int) -> str:
        """The user message of request `i`."""
        return [m for m in self.requests[i]["body"]["messages"] if m["role"] == "user"][-1][
            "content"]
