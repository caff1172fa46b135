-- Keeping tenants apart on one shared PostgreSQL store: row-level security by database role.
--
-- Run once, as the role that owns the store's tables (the one whose first `toolloop` command
-- migrated the database), after the store exists:
--     psql "$STORE_URL" -f docs/postgresql-tenancy.sql
-- then give each tenant's application a login role of its own:
--     CREATE ROLE acme_app LOGIN PASSWORD '…' IN ROLE toolloop_tenant;
--     INSERT INTO toolloop_tenant_roles (role, tenant) VALUES ('acme_app', 'acme');
-- and run it as `toolloop … --tenant acme --store postgresql://acme_app@host/db`.
--
-- What a tenant role can do: read and write its own tenant's operations, approvals, turns,
-- calls, transitions, conversation items and leases; rows of other tenants are invisible
-- (reads return none, updates and deletes touch none, an insert naming another tenant is
-- refused). The audit chain is one sequence for the whole store: a tenant role reads its own
-- operations' records, and the chain's last link through the `audit_head` view (made by the
-- store's migrations) to append to it (the `blob_hashes` view shows every stored body's
-- hash, never a body); `toolloop verify` walks the whole chain, so it,
-- `store copy` and migrations are for the owner (or a BYPASSRLS auditor role).
-- The owner is not subject to these policies.

CREATE TABLE IF NOT EXISTS toolloop_tenant_roles (
    role NAME PRIMARY KEY,
    tenant TEXT NOT NULL
);

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'toolloop_tenant') THEN
        CREATE ROLE toolloop_tenant NOLOGIN;
    END IF;
END
$$;

-- the tenant of the role connected now (NULL, so nothing matches, for a role not listed)
CREATE OR REPLACE FUNCTION toolloop_tenant() RETURNS TEXT
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
    AS $$ SELECT tenant FROM toolloop_tenant_roles WHERE role = session_user $$;
REVOKE ALL ON FUNCTION toolloop_tenant() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolloop_tenant() TO toolloop_tenant;

REVOKE ALL ON toolloop_tenant_roles FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO toolloop_tenant;
GRANT SELECT ON toolloop_migrations TO toolloop_tenant;
GRANT SELECT, INSERT, UPDATE, DELETE
    ON operations, approvals, turns, calls, transitions, conversation, leases
    TO toolloop_tenant;
GRANT SELECT, INSERT ON blobs TO toolloop_tenant;
GRANT SELECT, INSERT ON audit_log TO toolloop_tenant;
GRANT SELECT ON audit_head, blob_hashes TO toolloop_tenant;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO toolloop_tenant;
-- the report views read as the role that queries them, so the policies apply through them
ALTER VIEW v_operations SET (security_invoker = true);
ALTER VIEW v_calls SET (security_invoker = true);
ALTER VIEW v_approvals SET (security_invoker = true);
GRANT SELECT ON v_operations, v_calls, v_approvals TO toolloop_tenant;

DO $$
DECLARE
    t TEXT;
BEGIN
    FOREACH t IN ARRAY ARRAY['operations', 'approvals', 'turns', 'calls', 'transitions',
                             'conversation', 'leases', 'blobs', 'audit_log'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    END LOOP;
    -- rows with a tenant: the role's own
    FOREACH t IN ARRAY ARRAY['operations', 'approvals'] LOOP
        EXECUTE format('DROP POLICY IF EXISTS own_tenant ON %I', t);
        EXECUTE format('CREATE POLICY own_tenant ON %I TO toolloop_tenant'
                       ' USING (tenant = toolloop_tenant())'
                       ' WITH CHECK (tenant = toolloop_tenant())', t);
    END LOOP;
    -- rows of an operation: visible when the operation is (the subquery is itself filtered)
    FOREACH t IN ARRAY ARRAY['turns', 'calls', 'transitions', 'conversation', 'leases'] LOOP
        EXECUTE format('DROP POLICY IF EXISTS own_tenant ON %I', t);
        EXECUTE format('CREATE POLICY own_tenant ON %I TO toolloop_tenant'
                       ' USING (operation_id IN (SELECT operation_id FROM operations))'
                       ' WITH CHECK (operation_id IN (SELECT operation_id FROM operations))', t);
    END LOOP;
END
$$;

-- bodies (conversation items, tool lists, approval policies) are stored once by content
-- hash: a tenant reads the ones its own rows refer to, and may store any (the store looks
-- a hash up in the `blob_hashes` view first, so one already there is not written again)
DROP POLICY IF EXISTS own_items ON blobs;
CREATE POLICY own_items ON blobs FOR SELECT TO toolloop_tenant
    USING (
        sha256 IN (SELECT item_sha256 FROM conversation)
        OR sha256 IN (SELECT tools_sha256 FROM turns)
        OR sha256 IN (SELECT policy_sha256 FROM approvals)
        OR sha256 IN (SELECT policy_sha256 FROM operations)
    );
DROP POLICY IF EXISTS add_items ON blobs;
CREATE POLICY add_items ON blobs FOR INSERT TO toolloop_tenant WITH CHECK (true);

-- the chain: the records of its own operations, read and added
DROP POLICY IF EXISTS own_records ON audit_log;
CREATE POLICY own_records ON audit_log FOR SELECT TO toolloop_tenant
    USING (operation_id IN (SELECT operation_id FROM operations));
DROP POLICY IF EXISTS add_records ON audit_log;
CREATE POLICY add_records ON audit_log FOR INSERT TO toolloop_tenant
    WITH CHECK (operation_id IN (SELECT operation_id FROM operations));
