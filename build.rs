//! Compiles the hooks' C entry points (src/hooks_shim.c), the CPU clock
//! (src/clocks.c) and the peer's address (src/peer.c) against the server
//! headers of the PostgreSQL the crate is built for: the pg_config that
//! `cargo pgrx` passes (PGRX_PG_CONFIG_PATH), or the one `cargo pgrx init`
//! recorded for the selected `pgNN` feature.
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=src/hooks_shim.c");
    println!("cargo:rerun-if-changed=src/clocks.c");
    println!("cargo:rerun-if-changed=src/peer.c");
    println!("cargo:rerun-if-env-changed=PGRX_PG_CONFIG_PATH");
    let major = ["15", "16", "17", "18"]
        .into_iter()
        .find(|v| std::env::var_os(format!("CARGO_FEATURE_PG{v}")).is_some())
        .expect("one of the features pg15, pg16, pg17, pg18 must be enabled");
    let pgrx = pgrx_pg_config::Pgrx::from_config().expect("pgrx's configuration: run `cargo pgrx init` first");
    let pg_config = pgrx.get(&format!("pg{major}")).unwrap_or_else(|e| panic!("no pg_config for pg{major}: {e}"));
    let path = pg_config.path().expect("a pg_config path");
    let out = Command::new(&path).arg("--includedir-server").output().expect("run pg_config");
    assert!(out.status.success(), "{} --includedir-server failed", path.display());
    let includedir = String::from_utf8(out.stdout).expect("UTF-8 path");
    cc::Build::new()
        .file("src/hooks_shim.c")
        .file("src/clocks.c")
        .file("src/peer.c")
        .include(includedir.trim())
        // A hook whose signature changed in these headers must fail the
        // build, not be assigned with a warning (GCC 12 and 13 only warn).
        .flag_if_supported("-Werror=incompatible-pointer-types")
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-Wno-missing-field-initializers")
        .compile("gatekeeper_hooks_shim");
}
