//! Recognising monitoring queries, the one kind of query that skips the
//! gate. Two conditions, both needed:
//! - **Who**: the current user has the privileges of `pg_monitor` (the
//!   role PostgreSQL grants to monitoring tools). A gated application role
//!   therefore has no free path at all: its queries over the views wait
//!   like any other. Why a privilege: a query-shape rule alone cannot be
//!   closed (built-in functions such as generate_series, repeat or xpath
//!   do unbounded work in any shape that lets a DBA filter and sort), and
//!   a plan-cost bound is not either (a function's cost estimate says
//!   nothing of the memory it takes). A role a DBA trusts to watch the
//!   server is the one that needs to look at a full gate.
//! - **What**: a SELECT whose every range-table entry is one of
//!   pg_gatekeeper's own views or set-returning functions, and whose every
//!   expression (target list, WHERE, JOIN ... ON, GROUP BY, HAVING, ORDER
//!   BY, LIMIT/OFFSET, window clauses, the arguments of the functions it
//!   reads) is made of an allow-list: columns, constants, parameters, CASE,
//!   COALESCE and the like, the built-in operators and casts of plain types
//!   (numbers, text, booleans, times and arrays of them), and the built-in
//!   functions, aggregates and window functions named in [`CALLABLE`].
//!   Anything else can run code the query does not show: a user-defined
//!   function (stable or not, it can run queries of its own, which would
//!   then need an admission in the middle of this statement), a domain's
//!   CHECK (reached by a cast, or by a built-in such as
//!   `json_populate_record` that converts to a record type with a domain
//!   column), or a built-in that runs a query or a type's input function
//!   named at run time.
//! - **Whose objects**: the extension's, by membership (`pg_depend`, as
//!   `ALTER EXTENSION ... ADD` records it), not by a schema's name: another
//!   object in schema `gatekeeper`, or a schema of that name in a database
//!   without the extension, is not trusted. The membership lookups are cached
//!   until the transaction ends ([`forget`]).
//!
//! Such a query needs no admission, so that a DBA can always look at the
//! gate, even when it is full. Anything else, `SELECT pg_sleep(10) FROM
//! gatekeeper.status` included, is gated as usual.
//!
//! The test is made twice: on the analysed Query (planner), and on the
//! PlannedStmt (ExecutorStart), because a prepared
//! statement's later executions fire only ExecutorStart. Both reject
//! quickly on the first ordinary table, so ordinary queries pay one branch
//! per range-table entry.

use std::cell::RefCell;
use std::ffi::{c_void, CStr};

use pgrx::pg_sys::{self, NodeTag, Oid};
use pgrx::prelude::*;

use crate::backend_local::BackendLocal;

/// The extension whose objects are trusted.
const EXTENSION: &CStr = c"pg_gatekeeper";

/// The schema the control file puts them in. Only a cheap first filter, so
/// that ordinary queries over other views and functions never reach the
/// membership lookup; trust comes from membership.
const SCHEMA: &CStr = c"gatekeeper";

/// What this transaction has found out about the extension's members.
struct Members {
    /// pg_gatekeeper's OID in this database's `pg_extension`; `None` where
    /// it is not created.
    extension: Option<Oid>,
    /// Objects looked up so far: (catalog, object, member of the extension).
    seen: Vec<(Oid, Oid, bool)>,
}

static MEMBERS: BackendLocal<RefCell<Option<Members>>> = BackendLocal::new(RefCell::new(None));

/// The transaction ended: what it found out may no longer hold (DROP or
/// ALTER EXTENSION since). Called from the transaction callback.
pub fn forget() {
    MEMBERS.with(|m| m.borrow_mut().take());
}

/// Whether object `objid` of catalog `classid` belongs to the extension.
/// Needs a transaction (catalog lookups).
///
/// No borrow of `MEMBERS` is held across a catalog lookup: a lookup can
/// wait on a lock, and a FATAL error there (a terminated backend, a
/// shutdown) exits without unwinding, so a borrow held then would never be
/// given back, and [`forget`], called by the transaction callback on the
/// way out, would find it taken.
fn is_member(classid: Oid, objid: Oid) -> bool {
    let known = MEMBERS.with(|m| {
        m.borrow().as_ref().map(|m| {
            (m.extension, m.seen.iter().find(|(c, o, _)| *c == classid && *o == objid).map(|&(_, _, member)| member))
        })
    });
    let extension = match known {
        Some((None, _)) => return false,
        Some((Some(_), Some(member))) => return member,
        Some((Some(extension), None)) => extension,
        None => {
            // SAFETY: an index lookup in pg_extension, inside a transaction.
            let extension = Some(unsafe { pg_sys::get_extension_oid(EXTENSION.as_ptr(), true) })
                .filter(|o| *o != pg_sys::InvalidOid);
            MEMBERS.with(|m| *m.borrow_mut() = Some(Members { extension, seen: Vec::new() }));
            match extension {
                Some(extension) => extension,
                None => return false,
            }
        }
    };
    // SAFETY: an index lookup in pg_depend (deptype 'e'), inside a transaction.
    let member = unsafe { pg_sys::getExtensionOfObject(classid, objid) } == extension;
    MEMBERS.with(|m| {
        if let Some(m) = m.borrow_mut().as_mut() {
            m.seen.push((classid, objid, member));
        }
    });
    member
}

/// The extension's objects, as one statement's test looks them up.
struct Ours(Option<Option<Oid>>);

impl Ours {
    /// The OID of the schema named `gatekeeper`, if any (the first filter).
    fn schema(&mut self) -> Option<Oid> {
        *self.0.get_or_insert_with(|| {
            // SAFETY: a syscache lookup by name; we are inside a transaction.
            let oid = unsafe { pg_sys::get_namespace_oid(SCHEMA.as_ptr(), true) };
            (oid != pg_sys::InvalidOid).then_some(oid)
        })
    }
    fn owns_relation(&mut self, relid: Oid) -> bool {
        // SAFETY: syscache lookup of a relation's namespace.
        self.schema().is_some_and(|s| unsafe { pg_sys::get_rel_namespace(relid) } == s)
            && is_member(pg_sys::RelationRelationId, relid)
    }
    /// One of the extension's set-returning functions, the ones behind the
    /// views (`gatekeeper.reset()` is its too, but it changes things).
    fn owns_view_function(&mut self, funcid: Oid) -> bool {
        // SAFETY: syscache lookups of a function's namespace and retset flag.
        self.schema()
            .is_some_and(|s| unsafe { pg_sys::get_func_namespace(funcid) == s && pg_sys::get_func_retset(funcid) })
            && is_member(pg_sys::ProcedureRelationId, funcid)
    }
}

/// Iterate the elements of a PostgreSQL pointer List.
///
/// SAFETY: `list` must be NIL or a valid List of pointers that outlives the iterator.
unsafe fn list_ptrs<T>(list: *mut pg_sys::List) -> impl Iterator<Item = *mut T> {
    let n = if list.is_null() { 0 } else { unsafe { (*list).length } };
    (0..n).map(move |k| unsafe { (*(*list).elements.add(k as usize)).ptr_value as *mut T })
}

/// Whether every range-table entry is ours or neutral, with at least one ours.
///
/// SAFETY: `rtable` must be a valid List of RangeTblEntry.
unsafe fn rtable_is_ours(rtable: *mut pg_sys::List, objects: &mut Ours, nested: bool) -> Option<bool> {
    let mut ours = false;
    // SAFETY: per the caller, every element is a RangeTblEntry.
    for rte in unsafe { list_ptrs::<pg_sys::RangeTblEntry>(rtable) } {
        let rte = unsafe { &*rte };
        // GROUP BY's own entry (18): neutral, once its expressions pass.
        if let Some(exprs) = crate::compat::group_rte_exprs(rte) {
            if unsafe { may_do_work(exprs.cast()) } {
                return None;
            }
            continue;
        }
        match rte.rtekind {
            pg_sys::RTEKind::RTE_RELATION => {
                // Views only: any table, ours or not, means real work.
                if rte.relkind != pg_sys::RELKIND_VIEW as std::ffi::c_char || !objects.owns_relation(rte.relid) {
                    return None;
                }
                ours = true;
            }
            pg_sys::RTEKind::RTE_FUNCTION => {
                for f in unsafe { list_ptrs::<pg_sys::RangeTblFunction>(rte.functions) } {
                    let expr = unsafe { (*f).funcexpr };
                    if expr.is_null() || unsafe { (*expr).type_ } != NodeTag::T_FuncExpr {
                        return None;
                    }
                    let fexpr = unsafe { &*(expr as *mut pg_sys::FuncExpr) };
                    if !objects.owns_view_function(fexpr.funcid) || unsafe { may_do_work(fexpr.args.cast()) } {
                        return None;
                    }
                }
                ours = true;
            }
            pg_sys::RTEKind::RTE_SUBQUERY if nested => {
                // A view expanded by the rewriter, or a subquery in FROM.
                if rte.subquery.is_null() || !unsafe { is_monitoring_query_in(rte.subquery, objects) } {
                    return None;
                }
                ours = true;
            }
            pg_sys::RTEKind::RTE_SUBQUERY | pg_sys::RTEKind::RTE_JOIN | pg_sys::RTEKind::RTE_RESULT => {}
            _ => return None,
        }
    }
    Some(ours)
}

/// The types a harmless read deals in: those of the views' columns and what
/// a monitoring query makes of them. Their input, output, comparison and
/// cast functions are built in and run no user code.
const PLAIN_TYPES: &[Oid] = &[
    pg_sys::BOOLOID,
    pg_sys::CHAROID,
    pg_sys::NAMEOID,
    pg_sys::INT2OID,
    pg_sys::INT4OID,
    pg_sys::INT8OID,
    pg_sys::OIDOID,
    pg_sys::FLOAT4OID,
    pg_sys::FLOAT8OID,
    pg_sys::NUMERICOID,
    pg_sys::TEXTOID,
    pg_sys::BPCHAROID,
    pg_sys::VARCHAROID,
    pg_sys::DATEOID,
    pg_sys::TIMEOID,
    pg_sys::TIMESTAMPOID,
    pg_sys::TIMESTAMPTZOID,
    pg_sys::INTERVALOID,
];

/// A plain type, or a built-in array of one.
fn plain_type(t: Oid) -> bool {
    // SAFETY: a syscache lookup of an array type's element type.
    PLAIN_TYPES.contains(&t) || (built_in(t) && PLAIN_TYPES.contains(&unsafe { pg_sys::get_element_type(t) }))
}

/// Built into PostgreSQL (from its catalog data files): below
/// `FirstGenbkiObjectId`, so neither created by a user nor by initdb's SQL.
fn built_in(oid: Oid) -> bool {
    oid.to_u32() < pg_sys::FirstGenbkiObjectId
}

/// The functions, aggregates and window functions a monitoring query may
/// call by name. Each computes on its arguments only: no query, no type's
/// input function chosen at run time, no user code. Operators and casts
/// need no name here: a built-in one over plain types is harmless.
#[rustfmt::skip]
const CALLABLE: &[&str] = &[
    // Aggregates.
    "count", "sum", "min", "max", "avg", "array_agg", "string_agg", "bool_and", "bool_or", "every",
    "stddev", "stddev_pop", "stddev_samp", "variance", "var_pop", "var_samp", "percentile_cont",
    "percentile_disc", "mode",
    // Window functions.
    "row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile", "lag", "lead", "first_value",
    "last_value", "nth_value",
    // Numbers and text.
    "abs", "ceil", "ceiling", "floor", "round", "trunc", "div", "mod", "power", "sqrt", "lower", "upper",
    "length", "char_length", "substr", "substring", "left", "right", "btrim", "ltrim", "rtrim", "replace",
    "split_part", "concat", "concat_ws",
    // Times.
    "now", "statement_timestamp", "transaction_timestamp", "date_part", "extract", "date_trunc", "age",
    "to_char", "to_timestamp", "timezone", "justify_hours", "justify_days", "justify_interval",
    "make_interval", "isfinite",
    // Arrays, sizes, this session and server.
    "array_length", "cardinality", "array_to_string", "pg_size_pretty", "current_setting", "pg_backend_pid",
    "pg_postmaster_start_time", "pg_conf_load_time",
];

/// Whether function `funcid` may run in a monitoring query: built in, not
/// volatile, not set-returning, and when `by_name` (called as a function,
/// not an operator or a cast) on the [`CALLABLE`] list.
fn callable(funcid: Oid, by_name: bool) -> bool {
    if funcid == pg_sys::InvalidOid || !built_in(funcid) {
        return false;
    }
    // SAFETY: syscache lookups of a built-in function's volatility, retset
    // flag and name (palloc'd, read before the next call).
    unsafe {
        if pg_sys::func_volatile(funcid) as u8 == pg_sys::PROVOLATILE_VOLATILE || pg_sys::get_func_retset(funcid) {
            return false;
        }
        if !by_name {
            return true;
        }
        let name = pg_sys::get_func_name(funcid);
        !name.is_null() && CStr::from_ptr(name).to_str().is_ok_and(|n| CALLABLE.contains(&n))
    }
}

/// Whether every expression of `list` (a List of expressions, or of the
/// TargetEntry nodes an aggregate's arguments are) has a plain type.
///
/// SAFETY: `list` must be NIL or a valid List of expression nodes.
unsafe fn plain_args(list: *mut pg_sys::List) -> bool {
    // SAFETY: per the caller.
    unsafe {
        list_ptrs::<pg_sys::Node>(list).all(|mut n| {
            if !n.is_null() && (*n).type_ == NodeTag::T_TargetEntry {
                n = (*(n as *mut pg_sys::TargetEntry)).expr.cast();
            }
            !n.is_null() && plain_type(pg_sys::exprType(n))
        })
    }
}

/// Whether `node` itself (not its children) is on the allow-list.
///
/// SAFETY: `node` must be a valid node of an analysed query or a plan.
unsafe fn node_is_harmless(node: *mut pg_sys::Node) -> bool {
    use NodeTag::*;
    // SAFETY: per the caller; each cast matches the node's tag (DistinctExpr
    // and NullIfExpr are OpExprs); set_opfuncid and set_sa_opfuncid fill in
    // a cached lookup, as check_functions_in_node does.
    unsafe {
        match (*node).type_ {
            T_Var | T_Const | T_Param | T_CaseTestExpr | T_SQLValueFunction | T_TargetEntry | T_FromExpr
            | T_JoinExpr | T_RangeTblRef | T_List | T_BoolExpr | T_NullTest | T_BooleanTest | T_CaseExpr
            | T_CaseWhen | T_CollateExpr | T_NamedArgExpr | T_GroupingFunc | T_SetOperationStmt => true,
            T_SortGroupClause => {
                let s = &*(node as *mut pg_sys::SortGroupClause);
                built_in(s.eqop) && built_in(s.sortop)
            }
            T_RelabelType | T_CoalesceExpr | T_MinMaxExpr | T_ArrayExpr => plain_type(pg_sys::exprType(node)),
            T_CoerceViaIO => {
                let arg = (*(node as *mut pg_sys::CoerceViaIO)).arg;
                plain_type(pg_sys::exprType(node)) && !arg.is_null() && plain_type(pg_sys::exprType(arg.cast()))
            }
            T_FuncExpr => {
                let f = &*(node as *mut pg_sys::FuncExpr);
                let by_name = matches!(
                    f.funcformat,
                    pg_sys::CoercionForm::COERCE_EXPLICIT_CALL | pg_sys::CoercionForm::COERCE_SQL_SYNTAX
                );
                callable(f.funcid, by_name) && plain_type(f.funcresulttype) && plain_args(f.args)
            }
            T_OpExpr | T_DistinctExpr | T_NullIfExpr => {
                pg_sys::set_opfuncid(node as *mut pg_sys::OpExpr);
                let o = &*(node as *mut pg_sys::OpExpr);
                callable(o.opfuncid, false) && plain_type(o.opresulttype) && plain_args(o.args)
            }
            T_ScalarArrayOpExpr => {
                pg_sys::set_sa_opfuncid(node as *mut pg_sys::ScalarArrayOpExpr);
                let o = &*(node as *mut pg_sys::ScalarArrayOpExpr);
                callable(o.opfuncid, false)
                    && [o.hashfuncid, o.negfuncid].iter().all(|f| *f == pg_sys::InvalidOid || callable(*f, false))
                    && plain_args(o.args)
            }
            T_Aggref => {
                let a = &*(node as *mut pg_sys::Aggref);
                callable(a.aggfnoid, true) && plain_type(a.aggtype) && plain_args(a.args) && plain_args(a.aggdirectargs)
            }
            T_WindowFunc => {
                let w = &*(node as *mut pg_sys::WindowFunc);
                callable(w.winfnoid, true) && plain_type(w.wintype) && plain_args(w.args)
            }
            _ => false,
        }
    }
}

/// Whether an expression may do more than a harmless read: whether any of
/// its nodes is off the allow-list ([`node_is_harmless`]).
///
/// SAFETY: `node` must be NULL or a valid expression tree (or a List of them).
unsafe fn may_do_work(node: *mut pg_sys::Node) -> bool {
    // SAFETY: forwarded from the caller; the walker only reads the tree.
    !node.is_null() && unsafe { work_walker(node, std::ptr::null_mut()) }
}

/// `expression_tree_walker` callback: true on the first node off the allow-list.
#[pg_guard]
unsafe extern "C-unwind" fn work_walker(node: *mut pg_sys::Node, ctx: *mut c_void) -> bool {
    if node.is_null() {
        return false;
    }
    // SAFETY: PostgreSQL's walkers pass valid nodes of the tree being walked.
    unsafe { !node_is_harmless(node) || pg_sys::expression_tree_walker(node, Some(work_walker), ctx) }
}

unsafe fn is_monitoring_query_in(query: *mut pg_sys::Query, ours: &mut Ours) -> bool {
    // SAFETY: the caller passes a valid analysed Query.
    unsafe {
        let q = &*query;
        if q.commandType != pg_sys::CmdType::CMD_SELECT
            || !q.utilityStmt.is_null()
            || q.hasSubLinks
            || q.hasTargetSRFs
            || q.hasModifyingCTE
            || q.hasForUpdate
            || !q.rowMarks.is_null()
            || !q.cteList.is_null()
            || !q.groupingSets.is_null()
            || q.rtable.is_null()
        {
            return false;
        }
        // Cheap rejection first: the first ordinary table ends the test.
        if rtable_is_ours(q.rtable, ours, true) != Some(true) {
            return false;
        }
        // The join tree holds WHERE and every JOIN ... ON.
        !may_do_work(q.targetList.cast())
            && !may_do_work(q.jointree.cast())
            && !may_do_work(q.setOperations)
            && !may_do_work(q.havingQual)
            && !may_do_work(q.limitOffset)
            && !may_do_work(q.limitCount)
            && !may_do_work(q.sortClause.cast())
            && !may_do_work(q.groupClause.cast())
            && !may_do_work(q.distinctClause.cast())
            && list_ptrs::<pg_sys::WindowClause>(q.windowClause).all(|w| {
                !may_do_work((*w).partitionClause.cast())
                    && !may_do_work((*w).orderClause.cast())
                    && !may_do_work((*w).startOffset)
                    && !may_do_work((*w).endOffset)
            })
    }
}

/// Whether the current user may take the free path: a member of
/// pg_monitor (directly or through other roles, as PostgreSQL's own
/// monitoring views decide). Needs a transaction (catalog lookups).
fn may_monitor() -> bool {
    // SAFETY: GetUserId is valid in a backend; has_privs_of_role reads the
    // role membership cache, inside a transaction.
    unsafe { pg_sys::has_privs_of_role(pg_sys::GetUserId(), pg_sys::Oid::from(pg_sys::ROLE_PG_MONITOR)) }
}

/// Whether an analysed Query is a monitoring query of a role that may
/// skip the gate with it.
///
/// # Safety
/// `query` must be a valid analysed Query, inside a transaction.
pub unsafe fn is_monitoring_query(query: *mut pg_sys::Query) -> bool {
    // SAFETY: forwarded from the caller.
    unsafe { is_monitoring_query_in(query, &mut Ours(None)) && may_monitor() }
}

/// SAFETY: `plan` must be NULL or a valid Plan tree.
unsafe fn plan_is_clean(plan: *mut pg_sys::Plan) -> bool {
    if plan.is_null() {
        return true;
    }
    // SAFETY: per the caller, `plan` is a valid Plan node; each cast matches
    // its tag, and children are walked only through the fields of the node
    // types recognised here. Any other node type fails the test.
    unsafe {
        let p = &*plan;
        if may_do_work(p.targetlist.cast()) || may_do_work(p.qual.cast()) {
            return false;
        }
        let join_ok = || !may_do_work((*(plan as *mut pg_sys::Join)).joinqual.cast());
        let extra_ok = match p.type_ {
            NodeTag::T_NestLoop => join_ok(),
            NodeTag::T_MergeJoin => join_ok() && !may_do_work((*(plan as *mut pg_sys::MergeJoin)).mergeclauses.cast()),
            NodeTag::T_HashJoin => {
                let h = &*(plan as *mut pg_sys::HashJoin);
                join_ok() && !may_do_work(h.hashclauses.cast()) && !may_do_work(h.hashkeys.cast())
            }
            NodeTag::T_Hash => !may_do_work((*(plan as *mut pg_sys::Hash)).hashkeys.cast()),
            NodeTag::T_Limit => {
                let l = &*(plan as *mut pg_sys::Limit);
                !may_do_work(l.limitOffset) && !may_do_work(l.limitCount)
            }
            NodeTag::T_Result => !may_do_work((*(plan as *mut pg_sys::Result)).resconstantqual),
            NodeTag::T_WindowAgg => {
                let w = &*(plan as *mut pg_sys::WindowAgg);
                !may_do_work(w.startOffset) && !may_do_work(w.endOffset) && !may_do_work(w.runCondition.cast())
            }
            NodeTag::T_Memoize => !may_do_work((*(plan as *mut pg_sys::Memoize)).param_exprs.cast()),
            NodeTag::T_FunctionScan => {
                // The functions are ours (checked on the range table); their
                // arguments must pass too.
                list_ptrs::<pg_sys::RangeTblFunction>((*(plan as *mut pg_sys::FunctionScan)).functions).all(|f| {
                    let e = (*f).funcexpr;
                    !e.is_null()
                        && (*e).type_ == NodeTag::T_FuncExpr
                        && !may_do_work((*(e as *mut pg_sys::FuncExpr)).args.cast())
                })
            }
            NodeTag::T_SubqueryScan => plan_is_clean((*(plan as *mut pg_sys::SubqueryScan)).subplan),
            NodeTag::T_Append => {
                list_ptrs::<pg_sys::Plan>((*(plan as *mut pg_sys::Append)).appendplans).all(|c| plan_is_clean(c))
            }
            // Nodes with no expressions of their own besides the target list
            // and quals checked above.
            NodeTag::T_Sort
            | NodeTag::T_IncrementalSort
            | NodeTag::T_Group
            | NodeTag::T_Agg
            | NodeTag::T_Unique
            | NodeTag::T_Material
            | NodeTag::T_SetOp
            | NodeTag::T_Gather
            | NodeTag::T_GatherMerge => true,
            _ => false,
        };
        extra_ok && plan_is_clean(p.lefttree) && plan_is_clean(p.righttree)
    }
}

/// Whether a planned statement only reads pg_gatekeeper's own objects.
///
/// # Safety
/// `stmt` must be a valid PlannedStmt, inside a transaction.
pub unsafe fn is_monitoring_plan(stmt: *mut pg_sys::PlannedStmt) -> bool {
    // SAFETY: forwarded from the caller; the flattened range table holds every
    // relation and function the plan (subplans included) reads.
    unsafe {
        let s = &*stmt;
        if s.commandType != pg_sys::CmdType::CMD_SELECT || !s.utilityStmt.is_null() || s.hasModifyingCTE {
            return false;
        }
        if rtable_is_ours(s.rtable, &mut Ours(None), false) != Some(true) {
            return false;
        }
        plan_is_clean(s.planTree) && list_ptrs::<pg_sys::Plan>(s.subplans).all(|p| plan_is_clean(p)) && may_monitor()
    }
}
