"""Approval rows: requested, read, decided once; and the policy block each one pins."""

from __future__ import annotations

import json
from typing import Any

from toolloop_cli.audit.canonical import canonical_text, sha256_hex
from toolloop_cli.engine.records import ApprovalRecord
from toolloop_cli.engine.states import ApprovalStatus
from toolloop_cli.engine.types import JSONObject
from toolloop_cli.errors import AlreadyDecided, OperationNotFound, StoreError, TamperedStore

from .rows import APR_COLUMNS, APR_NAMES, apr_from_row
from .transactions import TransactionalStore


class ApprovalStore(TransactionalStore):
    """The approvals a store holds (a part of ``Store``)."""

    def insert_approval(self, apr: ApprovalRecord, policy: JSONObject | None = None) -> None:
        """Record an approval request; ``policy`` is the block its ``policy_sha256`` pins."""
        if apr.policy_sha256 is not None:
            self._pin_policy(apr.policy_sha256, policy)
        values = [getattr(apr, c.strip()) for c in APR_COLUMNS.split(",")]
        marks = ", ".join("?" for _ in values)
        self.conn.execute(f"INSERT INTO approvals ({APR_COLUMNS}) VALUES ({marks})", values)
        self.audit("approval", apr.model_dump())

    def _pin_policy(self, digest: str, policy: JSONObject | None) -> None:
        body = None if policy is None else canonical_text(policy)
        if body is None or sha256_hex(body.encode("utf-8")) != digest:
            raise StoreError(f"the policy given for pin {digest} does not hash to it")
        self.conn.execute(self._add_blob, (digest, body))

    def pinned_policy(self, digest: str) -> JSONObject:
        """The policy block an approval pinned, checked against its hash."""
        row = self._read_one("blobs", "SELECT body FROM blobs WHERE sha256 = ?", (digest,))
        body = None if row is None else row[0]
        data = body.encode("utf-8") if isinstance(body, str) else None
        if data is None or sha256_hex(data) != digest:
            raise TamperedStore(f"the policy pinned as {digest} is missing or altered in the store")
        document: JSONObject = json.loads(data)
        return document

    def get_approval(self, approval_id: str, tenant: str | None = None) -> ApprovalRecord:
        row = self._approval_row(approval_id)
        if row is None or (tenant is not None and row[5] != tenant):
            raise OperationNotFound(
                f"no approval {approval_id or repr('')} in store {self.location}"
            )
        apr = apr_from_row(row)
        self._audit.read("approval", apr.model_dump())
        return apr

    def check_approval_logged(self, approval_id: str) -> None:
        """Refuse an approval written around toolloop: it must be what the audit log last
        recorded for it (``logged.py``). Asked before a decision is made and before one is
        applied, so a forged decision or a moved expiry runs nothing."""
        if self.conn.in_transaction and self._audit.writes("approval", [approval_id]):
            return  # written by this transaction: not read again
        values = self._approval_row(approval_id)
        if values is None:
            return  # a missing approval is the reader's error to report
        row = dict(zip(APR_NAMES, values, strict=True))
        self._check_logged("approval", [approval_id], row, f"approval {approval_id}")

    def _approval_row(self, approval_id: str) -> tuple[Any, ...] | None:
        sql = f"SELECT {APR_COLUMNS} FROM approvals WHERE approval_id = ?"
        row: tuple[Any, ...] | None = self._read_one("approvals", sql, (approval_id,))
        return row

    def approvals(self, operation_id: str) -> list[ApprovalRecord]:
        rows = self._read(
            "approvals",
            f"SELECT {APR_COLUMNS} FROM approvals WHERE operation_id = ?"
            " ORDER BY requested_at, rowid",
            (operation_id,),
        )
        return [apr_from_row(r) for r in rows]

    def pending_approvals(self, tenant: str | None = None) -> list[ApprovalRecord]:
        sql = f"SELECT {APR_COLUMNS} FROM approvals WHERE status = 'PENDING'"
        args: list[Any] = []
        if tenant is not None:
            sql += " AND tenant = ?"
            args.append(tenant)
        sql += " ORDER BY requested_at, rowid"
        return [apr_from_row(r) for r in self._read("approvals", sql, args)]

    def decide_approval(
        self,
        approval_id: str,
        status: ApprovalStatus,
        by: str | None,
        at: str,
        reason: str | None,
    ) -> None:
        """Record a decision (a barrier); only the first decision on a PENDING one is written."""
        self.barrier()
        cur = self.conn.execute(
            "UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?, reason = ?"
            " WHERE approval_id = ? AND status = 'PENDING'",
            (status.value, by, at, reason, approval_id),
        )
        if cur.rowcount != 1:
            current = self.get_approval(approval_id)
            raise AlreadyDecided(
                f"approval {approval_id} is already {current.status}"
                + (f" by {current.decided_by}" if current.decided_by else "")
            )
        decided = self._approval_row(approval_id)
        assert decided is not None  # updated just now, in this transaction
        record = apr_from_row(decided)
        self.audit("approval", record.model_dump())
        self.announce_runnable(record.operation_id)  # a worker may go on with it
