//! The classes of sessions, the kinds of transactions each runs (with
//! their weights), and the errors each class may see.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// Role `app`: fault targets; no queue timeout.
    A,
    /// Role `app_to`: queue timeouts; never a fault target.
    T,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    SelectImplicit,
    UpdateImplicit,
    PreparedSelect,
    Block,
    BlockIdle,
    BlockBatch,
    BlockError,
    Savepoint,
    BlockRollback,
    StmtTimeoutImplicit,
    StmtTimeoutBegin,
    Sleep,
    MultiImplicit,
    LockTable,
    Maintenance,
    Procedure,
    Reconnect,
}

pub(crate) const A_KINDS: &[(u64, Kind)] = &[
    (200, Kind::SelectImplicit),
    (150, Kind::UpdateImplicit),
    (60, Kind::PreparedSelect),
    (100, Kind::Block),
    (80, Kind::BlockIdle),
    (50, Kind::BlockBatch),
    (50, Kind::BlockError),
    (30, Kind::Savepoint),
    (40, Kind::BlockRollback),
    (60, Kind::StmtTimeoutImplicit),
    (30, Kind::StmtTimeoutBegin),
    (30, Kind::Sleep),
    (20, Kind::MultiImplicit),
    (3, Kind::LockTable),
    (3, Kind::Maintenance),
    (5, Kind::Procedure),
    (10, Kind::Reconnect),
];

/// No statement_timeout and nothing that could end a wait other than the
/// queue timeout itself.
pub(crate) const T_KINDS: &[(u64, Kind)] = &[
    (250, Kind::SelectImplicit),
    (150, Kind::UpdateImplicit),
    (60, Kind::PreparedSelect),
    (150, Kind::Block),
    (80, Kind::BlockIdle),
    (60, Kind::BlockError),
    (50, Kind::BlockRollback),
    (20, Kind::Reconnect),
];

/// Errors each class may see. Anything else is a finding.
pub(crate) fn expected(class: Class, code: &str) -> bool {
    match class {
        // division by zero, cancel / statement_timeout, terminate, queue
        // full, deadlock between admitted sessions, connection gone.
        Class::A => matches!(code, "22012" | "57014" | "57P01" | "53400" | "40P01" | "closed"),
        // division by zero, queue timeout, queue full, deadlock.
        Class::T => matches!(code, "22012" | "53000" | "53400" | "40P01"),
    }
}
