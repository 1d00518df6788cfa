//! The routes file (docs/DESIGN.md §15): the DBA's routes of query shapes
//! outlive a restart. Shared memory is laid out anew at every start and
//! after a crash, so the routes in force are also kept in a file in the
//! data directory, as pg_prewarm keeps its block list: rewritten whole by
//! the backend that sets, ends or clears a route, read back by the
//! postmaster when it lays the segment out. The file's text is
//! `gatekeeper_core::route_file`'s.
//!
//! Writes go to a temporary file that is flushed and renamed over the old
//! one, then the directory is flushed, so a crash leaves the old file or the
//! new one. A second LWLock of the tranche serialises the writers, and each
//! writer takes its copy of the routes under it, so the last file written
//! holds the last change.

use std::fs;
use std::io::Read;

use gatekeeper_core::route_file::{self, Route};
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::shmem;

/// Relative to the data directory, every server process's working directory.
const FILE: &str = "pg_gatekeeper_routes";
const TEMP: &str = "pg_gatekeeper_routes.tmp";
/// A copy of a file whose routes were not all restored: the next write
/// replaces the file with the routes in force, and what was skipped would
/// be lost without a trace. A copy is never replaced: a later start that
/// skips routes again keeps its copy as `KEPT.1`, `KEPT.2`, ... (an earlier
/// copy holds routes the file no longer has).
const KEPT: &str = "pg_gatekeeper_routes.skipped";
/// The most numbered copies kept beside [`KEPT`].
const MAX_COPIES: u32 = 99;

/// Whether files `a` and `b` hold the same bytes, read a block at a time
/// (a routes file may be a hundred megabytes, read in the postmaster).
fn same_bytes(a: &str, b: &str) -> std::io::Result<bool> {
    let (mut fa, mut fb) = (fs::File::open(a)?, fs::File::open(b)?);
    if fa.metadata()?.len() != fb.metadata()?.len() {
        return Ok(false);
    }
    let (mut ba, mut bb) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let n = fa.read(&mut ba)?;
        if n == 0 {
            return Ok(true);
        }
        fb.read_exact(&mut bb[..n])?;
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
    }
}

/// Keep a copy of the file under the first free name of [`KEPT`]'s, unless
/// one of the copies already holds the same bytes (a restart that skips
/// the same routes again); what to add to the log line.
fn keep_copy() -> String {
    let copy_to = |name: &str| -> std::io::Result<()> {
        let mut from = fs::File::open(FILE)?;
        let mut to = fs::OpenOptions::new().write(true).create_new(true).open(name)?;
        if let Err(e) = std::io::copy(&mut from, &mut to).and_then(|_| to.sync_all()) {
            let _ = fs::remove_file(name);
            return Err(e);
        }
        Ok(())
    };
    for n in 0..=MAX_COPIES {
        let name = if n == 0 { KEPT.to_string() } else { format!("{KEPT}.{n}") };
        if let Ok(true) = same_bytes(FILE, &name) {
            return format!("; the file is kept already, as \"{name}\"");
        }
        match copy_to(&name) {
            Ok(()) if n == 0 => return format!("; the file is kept as \"{name}\""),
            Ok(()) => return format!("; the file is kept as \"{name}\", beside earlier copies"),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return format!("; it could not be kept as \"{name}\": {e}"),
        }
    }
    format!("; it is not kept: \"{KEPT}\" and its {MAX_COPIES} numbered copies are there already (remove those no longer needed)")
}

/// Write `routes` to the file: what failed, and why, on an error. Called
/// under the writers' lock; a temporary file left by a failure is removed
/// before the lock goes, so it cannot take another writer's.
fn write(routes: &[Route]) -> Result<(), String> {
    let temp = || -> std::io::Result<()> {
        let mut f = std::io::BufWriter::new(fs::File::create(TEMP)?);
        route_file::encode_to(&mut f, routes)?;
        f.into_inner().map_err(|e| e.into_error())?.sync_all()
    };
    if let Err(e) = temp().and_then(|()| fs::rename(TEMP, FILE)) {
        let _ = fs::remove_file(TEMP);
        return Err(format!("could not write it: {e}"));
    }
    // Renamed: the new routes are in the file; the directory's flush makes
    // the rename itself survive a crash of the machine.
    fs::File::open(".")
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("written, but the data directory could not be flushed: {e}"))
}

/// Write the routes in force to the file, after a change to them. A failure
/// is a WARNING: the change is made in shared memory and holds until the
/// server stops, and the message says it may not outlive that.
pub fn save() {
    let result = shmem::with_routes_file_lock(|| {
        let routes = shmem::with_gate_shared(|l| route_file::in_force(l.shapes.entries(), crate::now_us()))
            .map_err(|e| (PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY, format!("could not copy the routes: {e}")))?;
        write(&routes).map_err(|why| (PgSqlErrorCode::ERRCODE_IO_ERROR, why))
    });
    if let Err((code, why)) = result {
        let report = ErrorReport::new(
            code,
            format!("pg_gatekeeper: could not save the query routes to file \"{FILE}\" in the data directory: {why}"),
            function_name!(),
        )
        .set_detail("The change is in force until the server stops; the server may start without it.")
        .set_hint("Fix the cause, then set the route again (or end it) to write the file.");
        crate::with_cancel_held(|| report.report(PgLogLevel::WARNING));
    }
}

/// The file's text; `None` when it is larger than any routes file, which
/// is not read further: the postmaster reads it, and an allocation that
/// fails in Rust code aborts the process, which would keep the server
/// from starting.
fn read_bounded() -> std::io::Result<Option<String>> {
    let mut bytes = Vec::new();
    fs::File::open(FILE)?.take(route_file::MAX_FILE_BYTES as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.len() > route_file::MAX_FILE_BYTES {
        return Ok(None);
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "stream did not contain valid UTF-8"))
}

/// Read the file back into a freshly laid-out table. Called by the
/// postmaster (or a single-user backend) from the shared-memory startup hook,
/// where an ERROR would stop the server: every problem is a LOG line.
pub fn restore() {
    let text = match read_bounded() {
        Ok(Some(t)) => t,
        Ok(None) => {
            pgrx::log!(
                "pg_gatekeeper: ignoring file \"{FILE}\": it is larger than any routes file ({} bytes); starting without routes, and the next route set or ended replaces it",
                route_file::MAX_FILE_BYTES
            );
            return;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => {
            pgrx::log!(
                "pg_gatekeeper: could not read the query routes from file \"{FILE}\": {e}; starting without them{}",
                keep_copy()
            );
            return;
        }
    };
    let now = crate::now_us();
    let room = shmem::with_gate_shared(|l| l.shapes.entries().len());
    let decoded = match route_file::decode(&text, now, room) {
        Ok(d) => d,
        Err(why) => {
            pgrx::log!("pg_gatekeeper: ignoring file \"{FILE}\": {why}{}", keep_copy());
            return;
        }
    };
    // One route per query: `decode` keeps a query's last line.
    let (restored, no_room) = shmem::with_gate(|mut l| {
        let ok = route_file::restore(&mut l.shapes, &decoded.routes, now);
        (ok, decoded.routes.len() - ok + decoded.over)
    });
    let mut skipped = Vec::new();
    for (n, what) in [
        (decoded.expired, "ended while the server was down"),
        (no_room, "found no room under pg_gatekeeper.max_shapes"),
        (decoded.bad_lines, "were damaged lines"),
    ] {
        if n > 0 {
            skipped.push(format!("{n} {what}"));
        }
    }
    let lost = no_room > 0 || decoded.bad_lines > 0;
    let skipped = if skipped.is_empty() { String::new() } else { format!("; skipped: {}", skipped.join(", ")) };
    let skipped = if lost { skipped + &keep_copy() } else { skipped };
    pgrx::log!("pg_gatekeeper: restored {restored} query routes from file \"{FILE}\"{skipped}");
}
