//! The error fields a client sees are PostgreSQL's own, whatever the
//! server's environment: with RUST_BACKTRACE set for the postmaster, an
//! error raised under the extension's hooks must carry every field it
//! carries on a server without the library: SQLSTATE, message, DETAIL,
//! HINT, CONTEXT, position, and the schema, table, column, data type and
//! constraint names. Each field is set by at least one of the statements,
//! so that no comparison is only of fields both sides lack.

mod common;

use common::Cluster;
use postgres::error::{DbError, ErrorPosition};

/// Statements whose errors pass through the planner, executor start and
/// ProcessUtility hooks, between them setting every field compared.
const FAILING: &[&str] = &[
    "SELECT 1/0",
    // DETAIL, schema, table, constraint.
    "INSERT INTO u VALUES (1)",
    // Column.
    "INSERT INTO u VALUES (NULL)",
    // Data type (a domain's CHECK, folded by the planner).
    "SELECT (-1)::posint",
    // Position in the statement.
    "SELECT no_such_column FROM u",
    // Position in an internal query, with CONTEXT.
    "DO $$BEGIN PERFORM no_such_column FROM u; END$$",
    "DO $$BEGIN RAISE EXCEPTION 'boom' USING DETAIL = 'my detail', HINT = 'my hint'; END$$",
    "CALL ins()",
    "SELECT f_err()",
];

/// The fields compared, by name.
const FIELDS: [&str; 11] = [
    "sqlstate",
    "message",
    "detail",
    "hint",
    "context",
    "position",
    "schema",
    "table",
    "column",
    "datatype",
    "constraint",
];

type Fields = [Option<String>; 11];

fn fields_of(db: &DbError) -> Fields {
    let s = |v: Option<&str>| v.map(str::to_string);
    let position = db.position().map(|p| match p {
        ErrorPosition::Original(n) => format!("{n}"),
        ErrorPosition::Internal { position, query } => format!("{position} in {query}"),
    });
    [
        Some(db.code().code().to_string()),
        Some(db.message().to_string()),
        s(db.detail()),
        s(db.hint()),
        s(db.where_()),
        position,
        s(db.schema()),
        s(db.table()),
        s(db.column()),
        s(db.datatype()),
        s(db.constraint()),
    ]
}

fn errors(c: &Cluster, user: &str) -> Vec<Fields> {
    let mut s = c.connect(user, "errors");
    FAILING
        .iter()
        .map(|sql| {
            let e = s.batch_execute(sql).expect_err(sql);
            fields_of(e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e}")))
        })
        .collect()
}

fn setup(c: &Cluster) {
    c.admin_exec(
        "CREATE TABLE u (id int PRIMARY KEY); INSERT INTO u VALUES (1); GRANT ALL ON u TO app;
         CREATE DOMAIN posint AS int CHECK (VALUE > 0);
         CREATE PROCEDURE ins() LANGUAGE sql AS $$ INSERT INTO u VALUES (1) $$;
         CREATE FUNCTION f_err() RETURNS int LANGUAGE plpgsql AS $$
           BEGIN RAISE EXCEPTION USING MESSAGE = 'in f', ERRCODE = '22012', SCHEMA = 's', TABLE = 't',
             COLUMN = 'c', DATATYPE = 'd', CONSTRAINT = 'k'; END $$;",
    );
}

#[test]
fn errors_carry_postgresqls_own_fields_even_with_rust_backtrace_set() {
    let bare = Cluster::start_with(&[], &[], false);
    setup(&bare);
    let want_su = errors(&bare, "postgres");
    let want_app = errors(&bare, "app");
    drop(bare);
    for (i, name) in FIELDS.iter().enumerate() {
        assert!(want_su.iter().any(|f| f[i].is_some()), "no statement sets {name}: the comparison proves nothing");
    }
    let gated = Cluster::start_with(&[], &["RUST_BACKTRACE=1", "RUST_LIB_BACKTRACE=1"], true);
    setup(&gated);
    for (who, got, want) in
        [("a superuser", errors(&gated, "postgres"), want_su), ("a gated session", errors(&gated, "app"), want_app)]
    {
        for ((sql, got), want) in FAILING.iter().zip(got).zip(want) {
            for (i, name) in FIELDS.iter().enumerate() {
                assert_eq!(got[i], want[i], "{who}'s error of {sql}: {name}");
            }
        }
    }
    gated.assert_quiet();
}
