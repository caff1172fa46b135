"""Tenants kept apart by PostgreSQL itself: the row-level security policy of
``docs/postgresql-tenancy.sql`` applied to a shared store, each tenant's application
connected as a role of its own. What ``--tenant`` filters, the server then enforces, also for
a command run without ``--tenant`` and for SQL written by hand."""

from __future__ import annotations

import secrets
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from support.cli import json_out
from support.paths import REFUND_OPENAI, REGISTRY, ROOT, TASK
from support.stores import behind_its_back
from typer.testing import CliRunner

from toolloop_cli.cli import app
from toolloop_cli.store import open_store
from toolloop_cli.store.db import DATA_DIR_ENV

POLICY = ROOT / "docs" / "postgresql-tenancy.sql"


def as_role(url: str, role: str, password: str) -> str:
    """``url`` logging in as ``role`` instead of its own user."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{role}:{password}@{host}"))


class Tenant:
    def __init__(self, name: str, url: str) -> None:
        self.name, self.url = name, url

    def __call__(self, *args: str) -> Any:
        return CliRunner().invoke(app, [*args, "--store", self.url], catch_exceptions=False)

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with behind_its_back(self.url) as conn:
            return [tuple(r) for r in conn.execute(sql, params).fetchall()]


@pytest.fixture
def tenants(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Tenant]:
    """A shared store made by its owner, the policy applied, and two tenants' roles, each
    with one refund waiting for approval."""
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    owner = Tenant("owner", postgres_url)
    open_store(postgres_url).close()  # the owner makes the store (an empty database is none)
    password = secrets.token_hex(8)
    found: dict[str, Tenant] = {"owner": owner}
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(POLICY.read_text())
        for name in ("acme", "globex"):
            role = f"{name}_{secrets.token_hex(4)}"  # roles are the server's, not the database's
            conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}' IN ROLE toolloop_tenant")
            conn.execute("INSERT INTO toolloop_tenant_roles VALUES (%s, %s)", (role, name))
            found[name] = Tenant(name, as_role(postgres_url, role, password))
    run = ("run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI), "--json")
    for name in ("acme", "globex"):
        started = found[name](*run, "--tenant", name)
        assert started.exit_code == 10, started.output  # waiting for approval
    return found


def _ops(tenant: Tenant) -> dict[str, str]:
    listed = json_out(tenant("runs", "--json"))["operations"]
    return {op["operation_id"]: op["tenant"] for op in listed}


def test_a_tenant_role_sees_only_its_own_operations_even_without_tenant(
    tenants: dict[str, Tenant],
) -> None:
    every = _ops(tenants["owner"])
    assert sorted(every.values()) == ["acme", "globex"]
    for name in ("acme", "globex"):
        assert set(_ops(tenants[name]).values()) == {name}
    (theirs,) = [op for op, t in every.items() if t == "globex"]
    shown = tenants["acme"]("show", theirs)
    assert shown.exit_code == 2 and theirs in shown.stderr  # unknown, as a wrong id is


def test_another_tenants_approval_cannot_be_decided(tenants: dict[str, Tenant]) -> None:
    (apr,) = tenants["globex"].rows("SELECT approval_id FROM approvals")
    decided = tenants["acme"]("approve", apr[0], "--as", "ops-lead")
    assert decided.exit_code == 2 and apr[0] in decided.stderr
    assert tenants["owner"].rows(
        "SELECT status FROM approvals WHERE approval_id = ?", (apr[0],)
    ) == [("PENDING",)]


def test_sql_by_hand_reads_and_changes_only_the_own_tenants_rows(
    tenants: dict[str, Tenant],
) -> None:
    acme, owner = tenants["acme"], tenants["owner"]
    (mine,) = acme.rows("SELECT operation_id FROM operations")
    for table in ("turns", "calls", "transitions", "conversation", "approvals"):
        seen = {r[0] for r in acme.rows(f"SELECT DISTINCT operation_id FROM {table}")}
        assert seen == {mine[0]}, table
        assert len(owner.rows(f"SELECT DISTINCT operation_id FROM {table}")) == 2, table
    assert acme.rows("SELECT count(*) FROM v_calls") == [(3,)]  # views apply the policy too
    held = {r[0] for r in acme.rows("SELECT sha256 FROM blobs")}
    referred = {
        r[0]
        for sql in (
            "SELECT item_sha256 FROM conversation",
            "SELECT tools_sha256 FROM turns",
            "SELECT policy_sha256 FROM approvals",
            "SELECT policy_sha256 FROM operations",
        )
        for r in acme.rows(sql)
    }
    assert held == referred - {None}  # the bodies its own rows refer to, and no others
    with behind_its_back(owner.url) as conn:  # a body only the other tenant refers to
        conn.execute("INSERT INTO blobs VALUES ('sha256:theirs', 'x')")
        conn.execute(
            "UPDATE turns SET tools_sha256 = 'sha256:theirs' WHERE operation_id <> ?", mine
        )
    assert acme.rows("SELECT body FROM blobs WHERE sha256 = 'sha256:theirs'") == []
    with behind_its_back(acme.url) as conn:
        assert conn.execute("UPDATE approvals SET reason = 'x'").rowcount == 1  # its own only
        assert conn.execute("DELETE FROM calls WHERE operation_id <> ?", mine).rowcount == 0
        with pytest.raises(sqlite3.DatabaseError, match="row-level security"):
            conn.execute("UPDATE operations SET tenant = 'globex'")
        records = {r[0] for r in conn.execute("SELECT operation_id FROM audit_log")}
        assert records == {mine[0]}  # its own records; the chain's last link by the view
        (head,) = conn.execute("SELECT seq FROM audit_head").fetchall()
        assert head[0] == owner.rows("SELECT max(seq) FROM audit_log")[0][0]


def test_tenants_finish_their_runs_on_one_chain_that_the_owner_verifies(
    tenants: dict[str, Tenant], tmp_path: Path
) -> None:
    for name in ("acme", "globex"):
        tenant = tenants[name]
        ((op, apr),) = tenant.rows("SELECT operation_id, approval_id FROM approvals")
        assert tenant("approve", apr, "--as", "ops-lead", "--tenant", name).exit_code == 0
        resumed = tenant("resume", op, "--tenant", name, "--json")
        assert resumed.exit_code == 0, resumed.output
        assert json_out(resumed)["state"] == "COMPLETED"
    verified = tenants["owner"]("verify", "--json")
    assert verified.exit_code == 0, verified.output
    assert json_out(verified)["counts"]["operations"] == 2
    partial = tenants["acme"]("verify")  # it sees one tenant's records: not the whole chain
    assert partial.exit_code == 20
