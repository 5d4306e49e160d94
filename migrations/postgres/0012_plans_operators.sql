-- Plans and operators (as migrations/sqlite/0018): an account's expiry, the operators' audit log.

ALTER TABLE accounts ADD COLUMN expires_at BIGINT;

CREATE TABLE audit_log (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          BIGINT NOT NULL,
    actor       TEXT NOT NULL,
    action      TEXT NOT NULL,
    account_id  TEXT,
    before_json TEXT NOT NULL,
    after_json  TEXT NOT NULL
);
CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only';
END $$;
CREATE TRIGGER audit_log_no_change BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
