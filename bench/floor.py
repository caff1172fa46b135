"""The hand-written floor: the least code that does a durable tool loop's work, and no more.

Per model turn it parses the answer, parses and validates each call's arguments (jsonschema,
validator compiled once), calls the handler, wraps the result in the same envelope toolloop
sends, appends the new conversation items, builds the next request body, hashes the request
and every result over RFC 8785 canonical JSON (``rfc8785``), and commits the turn's rows (the
turn with its response body, its calls, its new conversation items stored once by content
hash) in one SQLite transaction, WAL with ``synchronous=NORMAL``: the level toolloop's
default durability (barriers) commits a read-only turn at.

The request hash is computed incrementally: the canonical bytes of a request are the fixed
keys before the conversation, the canonical items joined by commas, then the keys after it,
so a running SHA-256 over the items so far, copied and finished per turn, gives exactly
``sha256(rfc8785.dumps(body))`` at a cost that does not grow with the run (checked against
the direct hash on the first turns).

What it does not do: no state machine, no transition log, no audit hash chain, no per-call
intent commit before a handler runs (so no crash recovery of a half-run turn), no approvals,
policy, idempotency keys, guards, timeouts or result size caps, no error envelopes for
invalid calls (the workload has none), and no read-back of anything it wrote.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import rfc8785
import yaml

SCHEMA = """
CREATE TABLE blobs (sha256 TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE conversation (seq INTEGER PRIMARY KEY, item_sha256 TEXT NOT NULL);
CREATE TABLE turns (
    idx INTEGER PRIMARY KEY, request_sha256 TEXT NOT NULL, response_sha256 TEXT NOT NULL,
    response_body BLOB NOT NULL
);
CREATE TABLE calls (
    turn_idx INTEGER NOT NULL, seq INTEGER NOT NULL, call_id TEXT NOT NULL, name TEXT NOT NULL,
    arguments TEXT NOT NULL, result TEXT NOT NULL, result_sha256 TEXT NOT NULL,
    PRIMARY KEY (turn_idx, seq)
);
"""

Handler = Callable[[dict[str, Any], Any], Any]


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class RequestHash:
    """SHA-256 of a request's canonical bytes, with the conversation hashed once per item."""

    def __init__(self, head: dict[str, Any], key: str, tail: dict[str, Any]) -> None:
        # canonical {head..., key: [items], tail...}: every head key sorts before ``key``
        self.key = key
        head_bytes = rfc8785.dumps(head)[:-1]  # '{...' without the closing brace
        prefix = head_bytes + (b"," if head else b"") + rfc8785.dumps(key) + b":["
        self.running = hashlib.sha256(prefix)
        tail_bytes = rfc8785.dumps(tail)[1:]  # '...}' without the opening brace
        self.suffix = b"]" + (b"," if tail else b"") + tail_bytes
        self.count = 0

    def add(self, canonical_item: bytes) -> None:
        self.running.update(b"," + canonical_item if self.count else canonical_item)
        self.count += 1

    def digest(self) -> str:
        done = self.running.copy()
        done.update(self.suffix)
        return "sha256:" + done.hexdigest()


def load_tool(registry: Path) -> tuple[str, dict[str, Any], Handler]:
    """The one tool of the benchmark registry: name, JSON Schema, handler."""
    document = yaml.safe_load(registry.read_text())
    name, spec = next(iter(document["tools"].items()))
    module_name, function = spec["handler"].split(":")
    module = __import__(module_name)
    return name, spec, getattr(module, function)


def parse_openai(body: dict[str, Any]) -> tuple[list[tuple[str, str, str]], str | None]:
    calls = [
        (item["call_id"], item["name"], item["arguments"])
        for item in body["output"]
        if item["type"] == "function_call"
    ]
    texts = [
        part["text"]
        for item in body["output"]
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    ]
    return calls, "".join(texts) if texts else None


def parse_anthropic(body: dict[str, Any]) -> tuple[list[tuple[str, str, str]], str | None]:
    calls = [
        (block["id"], block["name"], json.dumps(block["input"]))
        for block in body["content"]
        if block["type"] == "tool_use"
    ]
    texts = [block["text"] for block in body["content"] if block["type"] == "text"]
    return calls, "".join(texts) if texts else None


class Floor:
    """One operation's loop, from the first request to the final text."""

    def __init__(
        self,
        api: str,
        path: Path,
        registry: Path,
        model: str,
        task: str,
    ) -> None:
        self.api = api
        self.conn = sqlite3.connect(str(path), isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.executescript(SCHEMA)
        name, spec, self.handler = load_tool(registry)
        self.tool = name
        self.validator = jsonschema.Draft202012Validator(spec["parameters"])
        if api == "openai":
            tools = [
                {
                    "type": "function",
                    "name": name,
                    "description": spec["description"],
                    "parameters": spec["parameters"],
                    "strict": False,
                }
            ]
            self.key, head, tail = "input", {}, {"model": model, "tools": tools}
        else:
            tools = [
                {
                    "name": name,
                    "description": spec["description"],
                    "input_schema": spec["parameters"],
                }
            ]
            self.key, head = "messages", {"max_tokens": 4096}
            tail = {"model": model, "tools": tools}
        self.head, self.tail = head, tail
        self.hasher = RequestHash(head, self.key, tail)
        self.conversation: list[dict[str, Any]] = []
        self.pending: list[tuple[str, str]] = []  # items not yet committed: (sha, body)
        self.append([{"role": "user", "content": task}])

    def append(self, items: Sequence[dict[str, Any]]) -> None:
        for item in items:
            body = rfc8785.dumps(item)
            self.hasher.add(body)
            self.pending.append((sha(body), body.decode("utf-8")))
            self.conversation.append(item)

    def request(self) -> tuple[dict[str, Any], str]:
        body = {**self.head, self.key: list(self.conversation), **self.tail}
        return body, self.hasher.digest()

    def turn(self, idx: int, response: bytes) -> str | None:
        """Handle one answer; returns the final text, or None when calls were run."""
        body = json.loads(response)
        calls, text = (parse_openai if self.api == "openai" else parse_anthropic)(body)
        rows, results = [], []
        for seq, (call_id, name, raw) in enumerate(calls):
            if name != self.tool:
                raise ValueError(f"unknown tool {name}")
            arguments = json.loads(raw)
            self.validator.validate(arguments)
            envelope = {"ok": True, "result": self.handler(arguments, None)}
            result = rfc8785.dumps(envelope)
            results.append((call_id, result.decode("utf-8")))
            rows.append((idx, seq, call_id, name, raw, result.decode("utf-8"), sha(result)))
        if self.api == "openai":
            self.append(body["output"])
            self.append(
                [
                    {"type": "function_call_output", "call_id": call_id, "output": result}
                    for call_id, result in results
                ]
            )
        else:
            self.append([{"role": "assistant", "content": body["content"]}])
            if results:
                blocks = [
                    {"type": "tool_result", "tool_use_id": c, "content": r, "is_error": False}
                    for c, r in results
                ]
                self.append([{"role": "user", "content": blocks}])
        self.commit(idx, response, rows)
        return text if not calls else None

    def commit(self, idx: int, response: bytes, rows: list[tuple[Any, ...]]) -> None:
        start = len(self.conversation) - len(self.pending)
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(
            "INSERT INTO turns VALUES (?, ?, ?, ?)",
            (idx, self.request_sha, sha(response), response),
        )
        self.conn.executemany("INSERT INTO calls VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        self.conn.executemany("INSERT OR IGNORE INTO blobs VALUES (?, ?)", self.pending)
        self.conn.executemany(
            "INSERT INTO conversation VALUES (?, ?)",
            [(start + n, digest) for n, (digest, _) in enumerate(self.pending)],
        )
        self.conn.execute("COMMIT")
        self.pending = []

    def run(self, responses: Sequence[bytes]) -> str:
        for idx, response in enumerate(responses):
            body, self.request_sha = self.request()
            if idx < 3:  # the incremental hash is the direct one
                assert self.request_sha == sha(rfc8785.dumps(body)), "request hash differs"
            text = self.turn(idx, response)
            if text is not None:
                return text
        raise ValueError("the recording ended before a final text")

    def close(self) -> None:
        self.conn.close()
