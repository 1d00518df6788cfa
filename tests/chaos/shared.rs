//! What the threads share and what they count.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Mutex;

use postgres::CancelToken;

pub(crate) struct Shared {
    pub(crate) stop: AtomicBool,
    /// Transactions completed by the postgres clients ("a" and "t").
    pub(crate) completed: AtomicU64,
    /// The current cancel token of each "a" session, by application_name.
    pub(crate) tokens: Mutex<HashMap<String, CancelToken>>,
    /// Invariant violations seen by the monitor.
    pub(crate) violations: Mutex<Vec<String>>,
}

/// Per-thread counts, merged at the end.
#[derive(Default, Debug)]
pub(crate) struct Tally {
    /// Transactions that committed (or implicit statements that succeeded).
    pub(crate) completed: u64,
    /// Transactions attempted (whatever their fate).
    pub(crate) attempted: u64,
    /// Errors received, by SQLSTATE ("closed": the connection went away).
    pub(crate) errors: BTreeMap<String, u64>,
    /// Connections opened after the first (voluntary or after a terminate).
    pub(crate) reconnects: u64,
    pub(crate) connect_failures: u64,
    /// Errors this class of session must never see, with their messages.
    pub(crate) unexpected: Vec<String>,
    /// Faults injected, by kind (injector and psql threads).
    pub(crate) faults: BTreeMap<String, u64>,
}

impl Tally {
    pub(crate) fn merge(&mut self, o: Tally) {
        self.completed += o.completed;
        self.attempted += o.attempted;
        for (k, v) in o.errors {
            *self.errors.entry(k).or_default() += v;
        }
        for (k, v) in o.faults {
            *self.faults.entry(k).or_default() += v;
        }
        self.reconnects += o.reconnects;
        self.connect_failures += o.connect_failures;
        self.unexpected.extend(o.unexpected);
    }

    pub(crate) fn err(&self, code: &str) -> u64 {
        self.errors.get(code).copied().unwrap_or(0)
    }

    pub(crate) fn fault(&self, kind: &str) -> u64 {
        self.faults.get(kind).copied().unwrap_or(0)
    }

    pub(crate) fn bump(&mut self, kind: &str) {
        *self.faults.entry(kind.to_string()).or_default() += 1;
    }
}
