"""A scripted model behind a real HTTP server that speaks the chat-completions API with tool calls,
for the demo, tests and trying wakeful without a language model (`wakeful dev model-server`).

It answers deterministically from the request alone: `rules` calls the first tool offered with its
arguments taken from the task card by parameter name; `gullible` does the same, then obeys
"pay N now" / "change X to Y" found inside EVIDENCE blocks, like a model that was prompt-injected
(the stand-ins of consumers/proposer/models.py, fed with the window read back from the messages).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from wakeful.consumers.proposer import messages as model_messages
from wakeful.consumers.proposer.models import GullibleModel, RulesModel

SCRIPTS: dict[str, type[RulesModel]] = {"rules": RulesModel, "gullible": GullibleModel}


@dataclass(frozen=True)
class Request:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any  # the JSON it carried, or None
    peer: str = ""  # the client's host:port: one per connection
    received: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: Any = None  # JSON-able, or bytes sent as they are
    headers: dict[str, str] = field(default_factory=dict)


Answer = Callable[[Request], Reply]


class ChatServer:
    """A ThreadingHTTPServer on its own thread; `answer` makes the reply to every request."""

    def __init__(self, answer: Answer, host: str = "127.0.0.1", port: int = 0) -> None:
        self.answer = answer
        self.host = host
        self.httpd = ThreadingHTTPServer((host, port), _handler(self))
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, args=(0.05,), name="model-server", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        """The base URL to give WAKEFUL_MODEL_URL."""
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> ChatServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ChatServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def scripted(script: str) -> Answer:
    """The answer of a deterministic model (see SCRIPTS) to any chat-completions request."""
    model = SCRIPTS[script]()

    def answer(request: Request) -> Reply:
        if request.method == "GET" and request.path.rstrip("/").endswith("/models"):
            return Reply(body={"object": "list", "data": [{"id": "scripted", "object": "model"}]})
        if request.method != "POST" or not request.path.rstrip("/").endswith("/chat/completions"):
            return Reply(404, {"error": {"message": f"no route {request.path}", "type": "not_found"}})
        try:
            window = model_messages.read_back(request.body)
        except ValueError as exc:
            return Reply(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
        proposal = model.propose(window)
        calls = None if proposal.tool == "none" else [(proposal.tool, proposal.args)]
        return Reply(body=completion(request.body.get("model", "scripted"), proposal.rationale, calls))

    return answer


def completion(
    model: str, text: str | None, calls: list[tuple[str, Any]] | None, *, tokens: tuple[int, int] = (100, 20)
) -> dict[str, Any]:
    """A chat completion whose one choice says `text` and makes `calls` ((name, arguments) each;
    arguments that are not a str are sent as JSON text)."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else orjson.dumps(args).decode(),
                },
            }
            for i, (name, args) in enumerate(calls)
        ]
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": tokens[0], "completion_tokens": tokens[1], "total_tokens": sum(tokens)},
    }


def _handler(server: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers do

        def do_GET(self) -> None:
            self._serve(None)

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                self._send(Reply(400, {"error": {"message": "the body is not JSON"}}))
                return
            self._serve(body)

        def _serve(self, body: Any) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            peer = f"{self.client_address[0]}:{self.client_address[1]}"
            request = Request(self.command, self.path, headers, body, peer)
            self._send(server.answer(request))

        def _send(self, reply: Reply) -> None:
            payload = reply.body if isinstance(reply.body, bytes) else orjson.dumps(reply.body)
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (its time-out): nothing to tell it

        def log_message(self, format: str, *args: Any) -> None:
            pass  # requests are not logged: they carry the task's window

    return Handler
