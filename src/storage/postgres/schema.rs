//! The schema: one table per keyspace, the append-only triggers, the ledger's row, and the
//! checks made before `init` creates them (no `hitl_*` object yet, not a standby) or a
//! server opens them (derived tables an older build lacked are created).

use postgres::Client;
use postgres::error::SqlState;

use super::{LedgerRow, connect, describe, engine_err, parse_url};
use crate::storage::{Keyspace, StorageError};

/// The schema's format, recorded in the ledger's row.
pub(super) const SCHEMA_FORMAT: &str = "hitl-ledger/postgres/v1";

/// The tables of a ledger's schema (what [`drop_schema`] drops, with the function
/// `hitl_refuse_change`).
pub(super) fn schema_objects() -> Vec<String> {
    let mut t = vec!["hitl_ledger".to_string()];
    t.extend(Keyspace::ALL.iter().map(|ks| table(*ks)));
    t
}

/// The table of a keyspace.
pub(super) fn table(ks: Keyspace) -> String {
    format!("hitl_{}", ks.name())
}

/// The SQL that creates the schema (tables, the append-only triggers, the revoked
/// privileges). Run once, by `init`.
pub(super) fn schema_sql() -> String {
    let mut sql = String::from(
        "CREATE TABLE hitl_ledger (id int PRIMARY KEY CHECK (id = 1), format text NOT NULL, \
         origin text NOT NULL, verifier_key text NOT NULL, policy_sha256 text NOT NULL, \
         derived_epoch bigint NOT NULL DEFAULT 0);\n\
         CREATE FUNCTION hitl_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
         RAISE EXCEPTION 'hitl-ledger: % is append-only', TG_TABLE_NAME \
         USING ERRCODE = 'insufficient_privilege'; END $$;\n",
    );
    for ks in Keyspace::ALL {
        let t = table(ks);
        sql.push_str(&format!(
            "CREATE TABLE {t} (k bytea PRIMARY KEY, v bytea NOT NULL);\n"
        ));
        if ks.append_only() {
            sql.push_str(&format!(
                "CREATE TRIGGER {t}_insert_only BEFORE UPDATE OR DELETE ON {t} \
                 FOR EACH ROW EXECUTE FUNCTION hitl_refuse_change();\n\
                 CREATE TRIGGER {t}_no_truncate BEFORE TRUNCATE ON {t} \
                 FOR EACH STATEMENT EXECUTE FUNCTION hitl_refuse_change();\n\
                 REVOKE UPDATE, DELETE, TRUNCATE ON {t} FROM PUBLIC, CURRENT_USER;\n"
            ));
        }
    }
    sql
}

/// Creates the table of every derived keyspace a ledger's database lacks: a database made
/// by an older build, before that keyspace existed, works once `reindex` has filled it (the
/// append-only tables are never created here: they exist since `init`). Also adds the ledger
/// row's `derived_epoch` (`carry.rs`) where an older build's schema lacks it. Nothing is done
/// in a database without a ledger (`hitl_ledger`). Two servers opening at once may both try;
/// the loser's "already exists" is not an error.
pub(super) fn create_missing_derived(c: &mut Client) -> Result<(), StorageError> {
    let has_ledger: bool = c
        .query_one("SELECT to_regclass('hitl_ledger') IS NOT NULL", &[])
        .map_err(engine_err("reading the schema"))?
        .get(0);
    if !has_ledger {
        return Ok(());
    }
    // The epoch of derived state (`carry.rs`), which a database of an older build lacks.
    let has_epoch: bool = c
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = 'hitl_ledger' \
             AND column_name = 'derived_epoch')",
            &[],
        )
        .map_err(engine_err("reading the schema"))?
        .get(0);
    if !has_epoch
        && let Err(e) = c.batch_execute(
            "ALTER TABLE hitl_ledger ADD COLUMN IF NOT EXISTS derived_epoch bigint NOT NULL DEFAULT 0",
        )
    {
        return Err(StorageError::engine(
            "adding the derived epoch to the ledger's row",
            describe(&e),
        ));
    }
    for ks in Keyspace::ALL.iter().filter(|k| !k.append_only()) {
        let t = table(*ks);
        let exists: bool = c
            .query_one("SELECT to_regclass($1::text) IS NOT NULL", &[&t])
            .map_err(engine_err("reading the schema"))?
            .get(0);
        if exists {
            continue;
        }
        let sql = format!("CREATE TABLE IF NOT EXISTS {t} (k bytea PRIMARY KEY, v bytea NOT NULL)");
        if let Err(e) = c.batch_execute(&sql) {
            let raced = e.code().is_some_and(|code| {
                *code == SqlState::UNIQUE_VIOLATION || *code == SqlState::DUPLICATE_TABLE
            });
            if !raced {
                return Err(StorageError::engine(
                    "creating a derived table",
                    describe(&e),
                ));
            }
        }
    }
    Ok(())
}

/// Refuses a database whose current schema already holds `hitl_*` tables or functions.
/// Refuses a server in recovery (a hot standby: every write transaction would fail there) as
/// the database to write to, naming what to give instead.
pub(super) fn refuse_standby(c: &mut Client) -> Result<(), StorageError> {
    let standby: bool = c
        .query_one("SELECT pg_is_in_recovery()", &[])
        .map_err(engine_err("checking the database"))?
        .get(0);
    if standby {
        return Err(StorageError::Incompatible(
            "the database URL names a standby (read-only, in recovery): give the primary, or a host list with target_session_attrs=read-write".into(),
        ));
    }
    Ok(())
}

pub(super) fn refuse_existing(c: &mut impl postgres::GenericClient) -> Result<(), StorageError> {
    let found: Vec<String> = c
        .query(
            "SELECT tablename::text FROM pg_tables \
             WHERE schemaname = current_schema() AND tablename LIKE 'hitl\\_%' \
             UNION ALL SELECT proname::text || '()' FROM pg_proc \
             WHERE pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema()) \
             AND proname LIKE 'hitl\\_%' ORDER BY 1",
            &[],
        )
        .map_err(engine_err("reading the schema"))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if found.iter().any(|t| t == "hitl_ledger") {
        return Err(StorageError::Incompatible(
            "the database already holds a hitl-ledger ledger: to add a server, copy an existing server's data directory instead of running init".into(),
        ));
    }
    if !found.is_empty() {
        return Err(StorageError::Incompatible(format!(
            "the database holds hitl-ledger objects but no ledger ({}): drop them, or name another database",
            found.join(", ")
        )));
    }
    Ok(())
}

pub(super) fn read_row(c: &mut Client) -> Result<LedgerRow, StorageError> {
    let sql = "SELECT origin, verifier_key, policy_sha256 FROM hitl_ledger WHERE id = 1";
    let row = c
        .query_typed_opt(sql, &[])
        .map_err(engine_err("reading the ledger's row"))?
        .ok_or_else(|| StorageError::Incompatible("the database holds no hitl-ledger ledger (run `hitl-ledger init --database URL` once)".into()))?;
    Ok(LedgerRow {
        origin: row.get(0),
        verifier_key: row.get(1),
        policy_sha256: row.get(2),
    })
}

/// Drops every table and the function of the schema: a fresh database for each test
/// ledger, and what a failed `init` created (the database held none of them before).
///
/// # Errors
/// Engine errors.
pub fn drop_schema(url: &str) -> Result<(), StorageError> {
    let config = parse_url(url)?;
    let mut c = connect(&config)?;
    let mut sql = String::from("BEGIN;");
    for t in schema_objects() {
        sql.push_str(&format!("DROP TABLE IF EXISTS {t};"));
    }
    sql.push_str("DROP FUNCTION IF EXISTS hitl_refuse_change(); COMMIT;");
    c.batch_execute(&sql)
        .map_err(engine_err("dropping the schema"))
}
