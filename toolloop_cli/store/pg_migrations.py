"""The PostgreSQL store's schema, as transactional migrations of its own.

The tables, columns and indexes are the SQLite store's as its migrations leave them (same
names, same order, the types PostgreSQL spells differently): a row copied from one backend to
the other hashes the same, so the audit chain verifies with the same head. Two additions that
hold no row content: ``rowid`` on the tables whose order SQLite's implicit rowid gives
(insertion order for ties), and the migration log. A later change to the schema is a new
migration here and one in ``migrations.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from .connection import Connection
from .migrations import OPEN_CALLS_INDEX

_SCHEMA = """
CREATE TABLE operations (
    operation_id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    task TEXT NOT NULL,
    provider TEXT NOT NULL,
    api_family TEXT NOT NULL,
    model TEXT NOT NULL,
    transport TEXT NOT NULL,
    adapter_revision TEXT NOT NULL,
    tenant TEXT NOT NULL,
    subject TEXT NOT NULL,
    registry_name TEXT NOT NULL,
    registry_revision TEXT NOT NULL,
    registry_path TEXT NOT NULL,
    registry_sha256 TEXT NOT NULL,
    policy_revision TEXT NOT NULL,
    settings_json TEXT NOT NULL,
    source_json TEXT NOT NULL,
    guards_json TEXT NOT NULL,
    counters_json TEXT NOT NULL,
    current_turn BIGINT,
    final_text TEXT,
    reason TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    deadline_at TEXT NOT NULL,
    policy_sha256 TEXT,
    divergence_json TEXT,
    rowid BIGSERIAL NOT NULL
);
CREATE INDEX operations_tenant ON operations(tenant, created_at);
CREATE INDEX operations_state ON operations(state, updated_at);

CREATE TABLE blobs (
    sha256 TEXT PRIMARY KEY,
    body TEXT NOT NULL
);

CREATE TABLE conversation (
    operation_id TEXT NOT NULL REFERENCES operations(operation_id),
    seq BIGINT NOT NULL,
    item_sha256 TEXT NOT NULL REFERENCES blobs(sha256),
    PRIMARY KEY (operation_id, seq)
);

CREATE TABLE turns (
    operation_id TEXT NOT NULL REFERENCES operations(operation_id),
    idx BIGINT NOT NULL,
    response_id TEXT,
    outcome TEXT NOT NULL,
    finish_reason TEXT,
    text TEXT,
    detail TEXT,
    request_sha256 TEXT NOT NULL,
    request_items BIGINT NOT NULL,
    response_sha256 TEXT NOT NULL,
    response_body BYTEA NOT NULL,
    usage_json TEXT NOT NULL,
    error_json TEXT,
    created_at TEXT NOT NULL,
    tools_sha256 TEXT,
    PRIMARY KEY (operation_id, idx)
);

CREATE TABLE calls (
    operation_id TEXT NOT NULL REFERENCES operations(operation_id),
    turn_idx BIGINT NOT NULL,
    seq BIGINT NOT NULL,
    response_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    name TEXT NOT NULL,
    raw_arguments TEXT NOT NULL,
    arguments_json TEXT,
    argument_error TEXT,
    state TEXT NOT NULL,
    idempotency_key TEXT,
    arguments_sha256 TEXT,
    tool_sha256 TEXT,
    approval_id TEXT,
    model_result_json TEXT,
    protected_audit_json TEXT,
    started_at TEXT,
    finished_at TEXT,
    result_sha256 TEXT,
    call_binding_sha256 TEXT,
    UNIQUE (operation_id, response_id, call_id)
);
CREATE INDEX calls_turn ON calls(operation_id, turn_idx, seq);
CREATE INDEX calls_intent ON calls(operation_id, name, arguments_sha256, turn_idx, seq);
CREATE INDEX calls_key ON calls(operation_id, idempotency_key, turn_idx, seq);

CREATE TABLE approvals (
    approval_id TEXT PRIMARY KEY,
    operation_id TEXT NOT NULL REFERENCES operations(operation_id),
    response_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    tenant TEXT NOT NULL,
    requested_by TEXT NOT NULL,
    status TEXT NOT NULL,
    arguments_sha256 TEXT NOT NULL,
    policy_revision TEXT NOT NULL,
    tool_sha256 TEXT NOT NULL,
    requested_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    decided_by TEXT,
    decided_at TEXT,
    reason TEXT,
    policy_sha256 TEXT,
    rowid BIGSERIAL NOT NULL
);
CREATE INDEX approvals_pending ON approvals(tenant, status);
CREATE INDEX approvals_operation ON approvals(operation_id, status);

CREATE TABLE transitions (
    id BIGSERIAL PRIMARY KEY,
    operation_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    call_id TEXT,
    source TEXT,
    target TEXT NOT NULL,
    reason TEXT,
    at TEXT NOT NULL,
    response_id TEXT
);
CREATE INDEX transitions_op ON transitions(operation_id, id);

CREATE TABLE audit_log (
    seq BIGINT PRIMARY KEY,
    operation_id TEXT,
    kind TEXT NOT NULL,
    call_id TEXT,
    record TEXT NOT NULL,
    record_sha256 TEXT NOT NULL,
    prev_sha256 TEXT NOT NULL,
    chain_sha256 TEXT NOT NULL
);
CREATE INDEX audit_log_op ON audit_log(operation_id, call_id, seq);
CREATE INDEX audit_log_op_seq ON audit_log(operation_id, seq);

CREATE TABLE leases (
    operation_id TEXT PRIMARY KEY,
    token TEXT NOT NULL,
    pid BIGINT NOT NULL,
    host TEXT NOT NULL,
    acquired_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
)
"""

#: the report views (migrations.REPORT_VIEWS) in PostgreSQL's JSON operators
_VIEWS = """
CREATE VIEW v_operations AS
SELECT o.operation_id, o.state, o.reason, o.task,
       o.provider || '/' || o.api_family AS api, o.model, o.tenant, o.subject,
       o.registry_name || '@' || o.registry_revision AS registry, o.registry_sha256,
       o.policy_revision, o.final_text,
       (o.counters_json::jsonb ->> 'turns')::bigint AS turns,
       (o.counters_json::jsonb ->> 'tool_calls')::bigint AS tool_calls,
       (o.counters_json::jsonb ->> 'input_tokens')::bigint AS input_tokens,
       (o.counters_json::jsonb ->> 'output_tokens')::bigint AS output_tokens,
       (SELECT count(*) FROM calls c WHERE c.operation_id = o.operation_id) AS calls,
       (SELECT count(*) FROM approvals a
         WHERE a.operation_id = o.operation_id AND a.status = 'PENDING') AS pending_approvals,
       o.created_at, o.updated_at, o.deadline_at
  FROM operations o;
CREATE VIEW v_calls AS
SELECT c.operation_id, c.turn_idx AS turn, c.seq, c.call_id, c.name AS tool, c.state,
       coalesce(c.arguments_json, c.raw_arguments) AS arguments, c.argument_error,
       CASE c.model_result_json::jsonb ->> 'ok'
         WHEN 'true' THEN 'ok'
         WHEN 'false' THEN 'error'
       END AS outcome,
       CASE c.model_result_json::jsonb ->> 'ok'
         WHEN 'true' THEN substr(c.model_result_json::jsonb ->> 'result', 1, 200)
         WHEN 'false' THEN (c.model_result_json::jsonb #>> '{error,code}') || ': '
                     || substr(c.model_result_json::jsonb #>> '{error,message}', 1, 200)
       END AS result_summary,
       c.idempotency_key, c.approval_id, a.status AS approval_status,
       a.decided_by AS approver, a.decided_at, c.started_at, c.finished_at, c.response_id
  FROM calls c
  LEFT JOIN approvals a ON a.approval_id = c.approval_id;
CREATE VIEW v_approvals AS
SELECT a.approval_id, a.operation_id, a.call_id, a.tool, a.status,
       coalesce(c.arguments_json, c.raw_arguments) AS arguments,
       a.requested_by, a.requested_at, a.expires_at,
       a.decided_by AS approver, a.decided_at, a.reason, a.policy_revision, a.tenant,
       a.arguments_sha256
  FROM approvals a
  LEFT JOIN calls c
    ON c.operation_id = a.operation_id AND c.response_id = a.response_id
   AND c.call_id = a.call_id
"""


@dataclass(frozen=True)
class Migration:
    name: str
    apply: Callable[[Connection], None]


def _statements(script: str) -> Callable[[Connection], None]:
    def run(conn: Connection) -> None:
        for statement in script.split(";"):
            if statement.strip():
                conn.execute(statement)

    return run


MIGRATIONS: tuple[Migration, ...] = (
    Migration("0001_schema", _statements(_SCHEMA)),
    Migration("0002_report_views", _statements(_VIEWS)),
    # read with the view owner's rights: a tenant role under row-level security
    # (docs/postgresql-tenancy.sql) sees only its own rows, yet appends to the one audit chain
    # and stores a body another tenant stored first only once
    Migration(
        "0003_shared_views",
        _statements(
            "CREATE VIEW audit_head AS"
            " SELECT seq, chain_sha256 FROM audit_log ORDER BY seq DESC LIMIT 1;"
            "CREATE VIEW blob_hashes AS SELECT sha256 FROM blobs;"
        ),
    ),
    # batch records name no call: audit_log_op_seq serves every read by operation
    Migration("0004_drop_audit_log_op_index", _statements("DROP INDEX IF EXISTS audit_log_op")),
    # calls not yet settled, looked up before a turn's results go back (``migrations.py``)
    Migration("0005_open_calls_index", _statements(OPEN_CALLS_INDEX)),
)

_LOG = (
    "CREATE TABLE IF NOT EXISTS toolloop_migrations (name TEXT PRIMARY KEY,"
    " applied_at TEXT NOT NULL)"
)


def pending(conn: Connection) -> list[Migration]:
    """The migrations this database has not had (all of them when it has no log yet)."""
    exists = conn.execute("SELECT to_regclass('toolloop_migrations')").fetchone()
    if exists is None or exists[0] is None:
        return list(MIGRATIONS)
    done = {r[0] for r in conn.execute("SELECT name FROM toolloop_migrations").fetchall()}
    return [m for m in MIGRATIONS if m.name not in done]


def apply(conn: Connection) -> None:
    """Apply what is pending, in the open write transaction (which holds the write lock, so a
    concurrent opener waits, then finds nothing left to do)."""
    conn.execute(_LOG)
    for migration in pending(conn):
        migration.apply(conn)
        conn.execute(
            "INSERT INTO toolloop_migrations (name, applied_at) VALUES (?, ?)",
            (migration.name, datetime.now(UTC).isoformat()),
        )
