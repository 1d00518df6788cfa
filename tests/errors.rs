//! The error fields a client sees are PostgreSQL's own, whatever the
//! server's environment: with RUST_BACKTRACE set for the postmaster, an
//! error raised under the extension's hooks must carry every field it
//! carries on a server without the library: SQLSTATE, message, DETAIL,
//! HINT, CONTEXT, position, and the schema, table, column, data type and
//! constraint names.

mod common;

use common::Cluster;

/// Statements whose errors pass through the planner and ProcessUtility hooks.
const FAILING: &[&str] = &[
    "SELECT 1/0",
    "INSERT INTO u VALUES (1)",
    "DO $$BEGIN RAISE EXCEPTION 'boom' USING DETAIL = 'my detail', HINT = 'my hint'; END$$",
    "CALL ins()",
];

fn fields(c: &Cluster, user: &str) -> Vec<(String, String, Option<String>, Option<String>)> {
    let mut s = c.connect(user, "errors");
    FAILING
        .iter()
        .map(|sql| {
            let e = s.batch_execute(sql).expect_err(sql);
            let db = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e}"));
            (
                db.code().code().to_string(),
                db.message().to_string(),
                db.detail().map(str::to_string),
                db.hint().map(str::to_string),
            )
        })
        .collect()
}

fn setup(c: &Cluster) {
    c.admin_exec(
        "CREATE TABLE u (id int PRIMARY KEY); INSERT INTO u VALUES (1); GRANT ALL ON u TO app;
         CREATE PROCEDURE ins() LANGUAGE sql AS $$ INSERT INTO u VALUES (1) $$;
         CREATE FUNCTION f_err() RETURNS int LANGUAGE plpgsql AS $$
           BEGIN RAISE EXCEPTION USING MESSAGE = 'in f', ERRCODE = '22012', COLUMN = 'c', TABLE = 't'; END $$;",
    );
}

#[test]
fn errors_carry_postgresqls_own_fields_even_with_rust_backtrace_set() {
    let bare = Cluster::start_with(&[], &[], false);
    setup(&bare);
    let want_su = fields(&bare, "postgres");
    let want_app = fields(&bare, "app");
    drop(bare);
    let gated = Cluster::start_with(&[], &["RUST_BACKTRACE=1", "RUST_LIB_BACKTRACE=1"], true);
    setup(&gated);
    assert_eq!(fields(&gated, "postgres"), want_su, "a superuser's errors");
    assert_eq!(fields(&gated, "app"), want_app, "a gated session's errors");
    gated.assert_quiet();
}
