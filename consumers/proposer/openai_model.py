"""A model behind any OpenAI-compatible chat-completions server with tool calls (vLLM, llama.cpp's
llama-server, Ollama, LM Studio, hosted APIs).

`propose` returns, never raises. What it returns is only a proposal; the executor decides:
- a reply with exactly one call to a tool the window offers, its arguments a JSON object that fits
  the tool's schema: that call, with the reply's text as its rationale;
- any other reply (no call, several, an unknown tool, arguments that are not JSON or do not fit):
  `unusable`, a proposal of nothing that says why (the executor records it; the task stays);
- no reply at all (attempts or time used up on 429, 5xx, time-outs, connection errors; a refusal
  such as 401 or 404; a body that is not a chat completion): `failed` (the executor parks the task).

The API key goes into the Authorization header and nowhere else: no reason, log line or proposal
quotes the server's words on a refused key, and every reason is scrubbed of the key all the same.
"""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from pydantic import SecretStr

from wakeful.consumers.proposer import messages as model_messages
from wakeful.core import metrics
from wakeful.core.log import Log
from wakeful.core.retry import backoff
from wakeful.schemas.base import cut
from wakeful.schemas.proposals import MAX_CALLS, Call, Proposal

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
REASON_CHARS = 400  # Proposal.unusable and .failed hold 500
RATIONALE_CHARS = 1900  # Proposal.rationale holds 2000
_CHOICE_FIELDS = ("tool_choice", "parallel_tool_calls")
MAX_REPLY_BYTES = 1 << 20  # a chat completion with one tool call is a few KiB; more is read no further


class OpenAIModel:
    def __init__(
        self,
        url: str,
        model: str,
        key: SecretStr | None = None,
        *,
        timeout: float = 30.0,
        attempts: int = 4,
        connections: int = 16,
        log: Log | None = None,
        base_delay: float = 0.5,
        max_delay: float = 8.0,
    ) -> None:
        self.name = f"openai:{model}"
        self.model = model
        self.timeout = timeout
        self.attempts = attempts
        # One whole proposal, waits included, never holds a worker thread longer than this.
        self.budget = timeout * attempts
        self.base_delay, self.max_delay = base_delay, max_delay
        self.log = log or Log(role="proposer", model=self.name)
        self._secret = key.get_secret_value() if key is not None else ""
        headers = {"Authorization": f"Bearer {self._secret}"} if self._secret else {}
        # One client, so one connection pool, for every handler thread (httpx.Client is thread-safe).
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        self.client = httpx.Client(base_url=url.rstrip("/"), headers=headers, limits=limits)
        # No more requests in flight than connections: httpcore's sync pool can close a connection it
        # has handed to a queued request under it (a read on a closed socket, or a hang to the time-out).
        self._slots = threading.BoundedSemaphore(connections)
        self._strict = True  # the server takes tool_choice and parallel_tool_calls
        self._rng = random.Random()
        self._rng_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAIModel({self.name!r})"

    def close(self) -> None:
        self.client.close()

    def propose(self, window: dict[str, Any]) -> Proposal:
        if not window["tools"]:
            return Proposal(
                tool="none", args={}, rationale="no tool is permitted at this stage", model=self.name
            )
        log = self.log.bind(task_id=str(window.get("task_card", {}).get("task_id", ""))[:64])
        try:
            reply = self._call(window, log)
            proposal = (
                _nothing(self.name, failed=self._scrub(reply))
                if isinstance(reply, str)
                else read_reply(reply, window, self.name)
            )
        except Exception as exc:  # a fault in this client parks one task; it never stops the role
            log("model.error", error=type(exc).__name__)
            return _nothing(self.name, failed=f"the model client failed: {type(exc).__name__}")
        proposal = proposal.model_copy(
            update={
                "unusable": self._scrub(proposal.unusable) if proposal.unusable else None,
                "failed": self._scrub(proposal.failed) if proposal.failed else None,
                "rationale": self._scrub(proposal.rationale),
            }
        )
        if proposal.failed:
            log("model.failed", reason=proposal.failed)
        elif proposal.unusable:  # no reason: it may quote what the model wrote, which may quote evidence
            log("model.unusable")
        return proposal

    def _call(self, window: dict[str, Any], log: Log) -> dict[str, Any] | str:
        """The server's chat completion, or why there is none (a str)."""
        give_up = time.monotonic() + self.budget
        tag = model_messages.nonce()
        attempt = 0
        while True:
            attempt += 1
            body = model_messages.request(window, self.model, tag, strict_choice=self._strict)
            left = give_up - time.monotonic()
            wait: float | None = None
            try:
                response = self._post(body, timeout=max(0.05, min(self.timeout, left)))
            except _TooLarge:
                return f"the server's reply is larger than {MAX_REPLY_BYTES} bytes; read no further"
            except httpx.TimeoutException:
                problem = f"no reply within {min(self.timeout, left):.1f}s"
            except httpx.TransportError as exc:
                problem = f"cannot reach the model server ({type(exc).__name__}: {self._scrub(str(exc))})"
            else:
                status = response.status_code
                if status == 200:
                    return _completion(response)
                if status == 400 and self._strict and any(f in response.text for f in _CHOICE_FIELDS):
                    self._strict = False  # this server refuses them: ask without, and not again
                    log("model.strict_choice_refused")
                    attempt -= 1
                    continue
                if status not in RETRY_STATUS:
                    return _refusal(response, self._scrub)
                problem = f"HTTP {status} from the model server"
                wait = retry_after(response.headers.get("Retry-After"), datetime.now(UTC))
            if attempt >= self.attempts:
                return f"{problem}; gave up after {attempt} attempts"
            pause = wait if wait is not None else self._backoff(attempt)
            if time.monotonic() + pause >= give_up:
                return (
                    f"{problem}; waiting {pause:.1f}s more would pass the {self.budget:.0f}s "
                    "a proposal may take"
                )
            log("model.retry", attempt=attempt, problem=problem, wait=round(pause, 3))
            time.sleep(pause)

    def _post(self, body: dict[str, Any], timeout: float) -> httpx.Response:
        """The reply, read whole only up to MAX_REPLY_BYTES: a server cannot make the role hold more."""
        by = time.monotonic() + timeout
        if not self._slots.acquire(timeout=timeout):
            raise httpx.PoolTimeout(f"no free connection to the model server within {timeout:.1f}s")
        try:
            return self._read(body, max(0.05, by - time.monotonic()))
        finally:
            self._slots.release()

    def _read(self, body: dict[str, Any], timeout: float) -> httpx.Response:
        with self.client.stream("POST", "/chat/completions", json=body, timeout=timeout) as streamed:
            content = bytearray()
            for chunk in streamed.iter_bytes():
                content += chunk
                if len(content) > MAX_REPLY_BYTES:
                    raise _TooLarge
        return httpx.Response(
            streamed.status_code, headers=streamed.headers, content=bytes(content), request=streamed.request
        )

    def _backoff(self, attempt: int) -> float:
        with self._rng_lock:
            return backoff(attempt, self.base_delay, self.max_delay, self._rng)

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "[key]") if self._secret else text


class _TooLarge(Exception):
    pass


def retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds a Retry-After header asks for (delay-seconds or an HTTP-date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


def read_reply(reply: dict[str, Any], window: dict[str, Any], name: str) -> Proposal:
    """The proposal in a chat completion: one call to an offered tool with arguments that fit, or
    several, each to an offered read-only tool (D68)."""
    try:
        message = reply["choices"][0]["message"]
        if not isinstance(message, dict):
            raise TypeError(type(message).__name__)
    except (KeyError, IndexError, TypeError) as exc:
        return _nothing(name, failed=f"the server's reply is not a chat completion: no message ({exc!r})")
    tokens = _tokens(reply.get("usage"))
    metrics.model_usage(name, reply.get("usage"))
    text = message.get("content")
    rationale = cut(text, RATIONALE_CHARS) if isinstance(text, str) else ""
    calls = message.get("tool_calls") or []
    if not calls and isinstance(message.get("function_call"), dict):  # the older single-call field
        calls = [{"function": message["function_call"]}]
    if not isinstance(calls, list) or not calls:
        return _nothing(
            name, unusable="the model answered without a tool call", rationale=rationale, tokens=tokens
        )
    offered = {t["name"]: t for t in window["tools"]}
    if len(calls) > MAX_CALLS:
        return _nothing(
            name, unusable=f"the model made {len(calls)} tool calls; at most {MAX_CALLS}", tokens=tokens
        )
    read = [_call(c, offered) for c in calls]
    for found in read:
        if isinstance(found, str):
            return _nothing(name, unusable=found, tokens=tokens)
    made = [c for c in read if not isinstance(c, str)]
    if len(made) > 1 and not all(offered[tool].get("read_only") for tool, _ in made):
        effects = ", ".join(tool for tool, _ in made if not offered[tool].get("read_only"))
        why = (
            f"the model made {len(made)} tool calls; several are allowed only of read-only tools, "
            f"not {effects}"
        )
        return _nothing(name, unusable=why, tokens=tokens)
    (tool, args), more = made[0], made[1:]
    return Proposal(
        tool=tool,
        args=args,
        rationale=rationale,
        model=name,
        tokens=tokens,
        more=tuple(Call(tool=t, args=a) for t, a in more),
    )


def _call(made: Any, offered: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]] | str:
    """One tool call of a reply: (tool, arguments) to an offered tool with arguments that fit its
    schema, or why it is not one."""
    call = made.get("function") if isinstance(made, dict) else None
    tool = call.get("name") if isinstance(call, dict) else None
    if not isinstance(tool, str) or tool not in offered:
        return (
            f"the model called {cut(repr(tool), 64)}, which is not offered at this stage "
            f"(offered: {', '.join(offered)})"
        )
    assert isinstance(call, dict)
    raw = call.get("arguments", "{}")
    try:
        args = orjson.loads(raw) if isinstance(raw, str | bytes) else raw
    except orjson.JSONDecodeError as exc:
        return f"arguments for {tool} are not JSON: {exc}"
    if not isinstance(args, dict):
        return f"arguments for {tool} are not a JSON object"
    error = best_match(_validator(orjson.dumps(offered[tool]["parameters"])).iter_errors(args))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "arguments"
        return f"arguments for {tool} do not fit its schema: {where}: {cut(error.message, 160)}"
    return tool, args


@functools.lru_cache(maxsize=256)
def _validator(schema: bytes) -> Draft202012Validator:
    """One validator per argument schema, made once (the window sends the same few again and again)."""
    return Draft202012Validator(orjson.loads(schema))


def _nothing(
    name: str, *, unusable: str | None = None, failed: str | None = None, rationale: str = "", tokens: int = 0
) -> Proposal:
    return Proposal(
        tool="none",
        args={},
        rationale=rationale,
        model=name,
        unusable=cut(unusable, REASON_CHARS) if unusable else None,
        failed=cut(failed, REASON_CHARS) if failed else None,
        tokens=tokens,
    )


def _tokens(usage: Any) -> int:
    if not isinstance(usage, dict):
        return 0
    total = usage.get("total_tokens")
    if isinstance(total, int) and total >= 0:
        return total
    parts = [usage.get("prompt_tokens"), usage.get("completion_tokens")]
    return sum(p for p in parts if isinstance(p, int) and p >= 0)


def _completion(response: httpx.Response) -> dict[str, Any] | str:
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return "the server's reply is not JSON: is WAKEFUL_MODEL_URL a chat-completions API?"
    return body if isinstance(body, dict) else "the server's reply is not a JSON object"


def _refusal(response: httpx.Response, scrub: Callable[[str], str]) -> str:
    """Why the server refused for good. Never its words on a refused key: some quote the key; the
    rest is scrubbed before it is cut, so no cut can leave part of the key behind."""
    status = response.status_code
    if status in (401, 403):
        return (
            f"HTTP {status}: the model server refused the API key; "
            "check WAKEFUL_MODEL_KEY_FILE or OPENAI_API_KEY"
        )
    hint = " check WAKEFUL_MODEL_URL and WAKEFUL_MODEL_NAME;" if status == 404 else ""
    return f"HTTP {status} from the model server;{hint} it said: {cut(scrub(_said(response)), 200)}"


def _said(response: httpx.Response) -> str:
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return response.text
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        return str(error.get("message") or error.get("detail") or error)
    return str(error)
