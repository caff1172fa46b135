"""The store schema, as transactional migrations: a change and its record commit together."""

from __future__ import annotations

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

migrations = Migrations("toolloop")

_SCHEMA_1 = """
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
    current_turn INTEGER,
    final_text TEXT,
    reason TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    deadline_at TEXT NOT NULL
);
CREATE INDEX operations_tenant ON operations(tenant, created_at);

CREATE TABLE blobs (
    sha256 TEXT PRIMARY KEY,
    body TEXT NOT NULL
);

CREATE TABLE conversation (
    operation_id TEXT NOT NULL REFERENCES operations(operation_id),
    seq INTEGER NOT NULL,
    item_sha256 TEXT NOT NULL REFERENCES blobs(sha256),
    PRIMARY KEY (operation_id, seq)
);

CREATE TABLE turns (
    operation_id TEXT NOT NULL REFERENCES operations(operation_id),
    idx INTEGER NOT NULL,
    response_id TEXT,
    outcome TEXT NOT NULL,
    finish_reason TEXT,
    text TEXT,
    detail TEXT,
    request_sha256 TEXT NOT NULL,
    request_items INTEGER NOT NULL,
    response_sha256 TEXT NOT NULL,
    response_body BLOB NOT NULL,
    usage_json TEXT NOT NULL,
    error_json TEXT,
    created_at TEXT NOT NULL,
    PRIMARY KEY (operation_id, idx)
);

CREATE TABLE calls (
    operation_id TEXT NOT NULL REFERENCES operations(operation_id),
    turn_idx INTEGER NOT NULL,
    seq INTEGER NOT NULL,
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
    UNIQUE (operation_id, response_id, call_id)
);
CREATE INDEX calls_turn ON calls(operation_id, turn_idx, seq);
CREATE INDEX calls_key ON calls(operation_id, idempotency_key);

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
    reason TEXT
);
CREATE INDEX approvals_pending ON approvals(tenant, status);

CREATE TABLE transitions (
    id INTEGER PRIMARY KEY,
    operation_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    call_id TEXT,
    source TEXT,
    target TEXT NOT NULL,
    reason TEXT,
    at TEXT NOT NULL
);
CREATE INDEX transitions_op ON transitions(operation_id, id);
"""


@migrations(name="0001_initial")
def _initial(db: Database) -> None:
    for statement in _SCHEMA_1.split(";"):
        if statement.strip():
            db.execute(statement)


@migrations(name="call_intent_index")
def _call_intent_index(db: Database) -> None:
    """Repeat detection looks calls up by tool and canonical arguments."""
    db.execute("CREATE INDEX calls_intent ON calls(operation_id, name, arguments_sha256)")


_SCHEMA_AUDIT = """
CREATE TABLE audit_log (
    seq INTEGER PRIMARY KEY,
    operation_id TEXT,
    kind TEXT NOT NULL,
    call_id TEXT,
    record TEXT NOT NULL,
    record_sha256 TEXT NOT NULL,
    prev_sha256 TEXT NOT NULL,
    chain_sha256 TEXT NOT NULL
);
CREATE INDEX audit_log_op ON audit_log(operation_id, call_id, seq);
ALTER TABLE calls ADD COLUMN result_sha256 TEXT;
ALTER TABLE calls ADD COLUMN call_binding_sha256 TEXT;
ALTER TABLE turns ADD COLUMN tools_sha256 TEXT
"""


@migrations(name="0002_audit")
def _audit(db: Database) -> None:
    """The append-only, hash-chained audit log (docs/audit.md) and the call binding columns."""
    for statement in _SCHEMA_AUDIT.split(";"):
        if statement.strip():
            db.execute(statement)


@migrations(name="operation_leases")
def _operation_leases(db: Database) -> None:
    """One process at a time runs an operation: its lease, with an expiry (store/lease.py)."""
    db.execute(
        "CREATE TABLE leases (operation_id TEXT PRIMARY KEY, token TEXT NOT NULL,"
        " pid INTEGER NOT NULL, host TEXT NOT NULL, acquired_at REAL NOT NULL,"
        " expires_at REAL NOT NULL)"
    )


@migrations(name="call_lookup_order")
def _call_lookup_order(db: Database) -> None:
    """Call lookups by intent or key return rows in (turn_idx, seq) order; without those columns
    in the index SQLite scanned every call of the operation through ``calls_turn`` to avoid a
    sort, so each lookup cost O(calls so far) and a long run O(calls²) (bench/: T=2,000)."""
    db.execute("DROP INDEX IF EXISTS calls_intent")
    db.execute("DROP INDEX IF EXISTS calls_key")
    db.execute(
        "CREATE INDEX calls_intent ON calls(operation_id, name, arguments_sha256, turn_idx, seq)"
    )
    db.execute("CREATE INDEX calls_key ON calls(operation_id, idempotency_key, turn_idx, seq)")


#: Read-only views for people (Datasette, ``sqlite-utils query``): plain columns, one row per
#: operation, call or approval (docs/report.md lists them). They read only columns of
#: ``0001_initial``, so they do not depend on the order of any later migration; they are
#: not audited tables, so ``verify`` does not read them.
REPORT_VIEWS = {
    "v_operations": """
SELECT o.operation_id, o.state, o.reason, o.task,
       o.provider || '/' || o.api_family AS api, o.model, o.tenant, o.subject,
       o.registry_name || '@' || o.registry_revision AS registry, o.registry_sha256,
       o.policy_revision, o.final_text,
       json_extract(o.counters_json, '$.turns') AS turns,
       json_extract(o.counters_json, '$.tool_calls') AS tool_calls,
       json_extract(o.counters_json, '$.input_tokens') AS input_tokens,
       json_extract(o.counters_json, '$.output_tokens') AS output_tokens,
       (SELECT count(*) FROM calls c WHERE c.operation_id = o.operation_id) AS calls,
       (SELECT count(*) FROM approvals a
         WHERE a.operation_id = o.operation_id AND a.status = 'PENDING') AS pending_approvals,
       o.created_at, o.updated_at, o.deadline_at
  FROM operations o""",
    "v_calls": """
SELECT c.operation_id, c.turn_idx AS turn, c.seq, c.call_id, c.name AS tool, c.state,
       coalesce(c.arguments_json, c.raw_arguments) AS arguments, c.argument_error,
       CASE json_extract(c.model_result_json, '$.ok')
         WHEN 1 THEN 'ok'
         WHEN 0 THEN 'error'
       END AS outcome,
       CASE json_extract(c.model_result_json, '$.ok')
         WHEN 1 THEN substr(json_extract(c.model_result_json, '$.result'), 1, 200)
         WHEN 0 THEN json_extract(c.model_result_json, '$.error.code') || ': '
                     || substr(json_extract(c.model_result_json, '$.error.message'), 1, 200)
       END AS result_summary,
       c.idempotency_key, c.approval_id, a.status AS approval_status,
       a.decided_by AS approver, a.decided_at, c.started_at, c.finished_at, c.response_id
  FROM calls c
  LEFT JOIN approvals a ON a.approval_id = c.approval_id""",
    "v_approvals": """
SELECT a.approval_id, a.operation_id, a.call_id, a.tool, a.status,
       coalesce(c.arguments_json, c.raw_arguments) AS arguments,
       a.requested_by, a.requested_at, a.expires_at,
       a.decided_by AS approver, a.decided_at, a.reason, a.policy_revision, a.tenant,
       a.arguments_sha256
  FROM approvals a
  LEFT JOIN calls c
    ON c.operation_id = a.operation_id AND c.response_id = a.response_id
   AND c.call_id = a.call_id""",
}


@migrations(name="report_views")
def _report_views(db: Database) -> None:
    """Views for reading a store with Datasette or sqlite-utils; re-creating them is harmless."""
    for name, select in REPORT_VIEWS.items():
        db.execute(f"DROP VIEW IF EXISTS {name}")
        db.execute(f"CREATE VIEW {name} AS {select.strip()}")


@migrations(name="policy_pin")
def _policy_pin(db: Database) -> None:
    """Approvals (and operations) pin the canonical hash of their policy block, which the
    blobs table keeps, so a decision is made against the policy it was requested under.
    Rows written before have none (NULL): they are checked by policy revision only."""
    db.execute("ALTER TABLE approvals ADD COLUMN policy_sha256 TEXT")
    db.execute("ALTER TABLE operations ADD COLUMN policy_sha256 TEXT")


@migrations(name="call_id_index")
def _call_id_index(db: Database) -> None:
    """A call id names one call of an operation: a new proposal is checked against the earlier
    calls with its id (an index seek, in turn order), not against every call so far."""
    db.execute("CREATE INDEX calls_id ON calls(operation_id, call_id, turn_idx, seq)")


@migrations(name="replay_findings")
def _replay_findings(db: Database) -> None:
    """A replay keeps what it found on its operation, in a column written once (audited)."""
    db.execute("ALTER TABLE operations ADD COLUMN divergence_json TEXT")


@migrations(name="transition_response_id")
def _transition_response_id(db: Database) -> None:
    """A call is (response id, call id): providers may give every turn's calls the same ids,
    so the state log names the response too. Rows written before have none (NULL), and
    their audit records no such key."""
    db.execute("ALTER TABLE transitions ADD COLUMN response_id TEXT")


@migrations(name="drop_call_id_index")
def _drop_call_id_index(db: Database) -> None:
    """Nothing looks a call up by its call id alone any more (it names a call only with its
    response id, the unique key's index), so the index is one write per call for nothing."""
    db.execute("DROP INDEX IF EXISTS calls_id")


@migrations(name="audit_log_by_operation")
def _audit_log_by_operation(db: Database) -> None:
    """A batch record covers a whole transaction of one operation (no call id): the engine
    reads an operation's newest records first, which this index serves without a sort."""
    db.execute("CREATE INDEX audit_log_op_seq ON audit_log(operation_id, seq)")


@migrations(name="drop_audit_log_op_index")
def _drop_audit_log_op_index(db: Database) -> None:
    """Batch records name no call, so ``(operation_id, call_id, seq)`` orders nothing that
    ``audit_log_op_seq`` does not: one index write per record for nothing."""
    db.execute("DROP INDEX IF EXISTS audit_log_op")


#: calls not yet settled: every state a call may still leave (``engine.states``)
OPEN_CALLS_WHERE = (
    "state IN ('PROPOSED', 'WAITING_APPROVAL', 'APPROVED', 'EXECUTING', 'UNKNOWN_OUTCOME')"
)
OPEN_CALLS_INDEX = (
    f"CREATE INDEX calls_open ON calls(operation_id, turn_idx, seq) WHERE {OPEN_CALLS_WHERE}"
)


@migrations(name="open_calls_index")
def _open_calls_index(db: Database) -> None:
    """Before a turn's results go back, no call of the operation may be left unsettled (one
    moved out of its turn would be skipped for good): a partial index holds only those, so
    the check is a seek, whatever the length of the run."""
    db.execute(OPEN_CALLS_INDEX)


_KEYED_TABLES = """
CREATE TABLE blobs_keyed (
    sha256 TEXT PRIMARY KEY,
    body TEXT NOT NULL
) WITHOUT ROWID;
INSERT INTO blobs_keyed (sha256, body) SELECT sha256, body FROM blobs;
CREATE TABLE conversation_keyed (
    operation_id TEXT NOT NULL REFERENCES operations(operation_id),
    seq INTEGER NOT NULL,
    item_sha256 TEXT NOT NULL REFERENCES blobs_keyed(sha256),
    PRIMARY KEY (operation_id, seq)
) WITHOUT ROWID;
INSERT INTO conversation_keyed (operation_id, seq, item_sha256)
    SELECT operation_id, seq, item_sha256 FROM conversation;
DROP TABLE conversation;
DROP TABLE blobs;
ALTER TABLE blobs_keyed RENAME TO blobs;
ALTER TABLE conversation_keyed RENAME TO conversation
"""


@migrations(name="keyed_blobs_and_conversation")
def _keyed_blobs_and_conversation(db: Database) -> None:
    """Bodies and the conversation are only ever read by their key: kept in the key's own
    B-tree (``WITHOUT ROWID``), each key is stored once instead of in the table and again in
    its unique index (about 6% of a store's bytes)."""
    for statement in _KEYED_TABLES.split(";"):
        if statement.strip():
            db.execute(statement)


def apply(db: Database) -> None:
    """Bring a store up to the current schema (each step in its own transaction)."""
    migrations.apply(db)
