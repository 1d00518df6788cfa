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
//! - **What**: a SELECT whose every range-table entry is
//!   one of pg_gatekeeper's own views or set-returning functions (objects in
//!   the `gatekeeper` schema) and that calls no volatile function and no
//!   user-defined function anywhere else: not in its target list, WHERE,
//!   JOIN ... ON, HAVING, LIMIT/OFFSET, window frame offsets, or the arguments
//!   of the functions it reads. A stable or immutable user-defined function
//!   can still do any amount of work, or run queries of its own, which would
//!   then need an admission in the middle of this statement.
//!
//! Such a query needs no admission, so that a DBA can always look at the
//! gate, even when it is full. Anything else, `SELECT pg_sleep(10) FROM
//! gatekeeper.status` included, is gated as usual.
//!
//! The test is made twice: on the analysed Query (post_parse_analyze and
//! planner), and on the PlannedStmt (ExecutorStart), because a prepared
//! statement's later executions fire only ExecutorStart. Both reject
//! quickly on the first ordinary table, so ordinary queries pay one branch
//! per range-table entry.

use pgrx::pg_sys;
use pgrx::pg_sys::NodeTag;
use pgrx::prelude::*;

/// Schema that holds the extension's objects (the control file fixes it).
const SCHEMA: &std::ffi::CStr = c"gatekeeper";

/// Lazily looked-up OID of our schema, `None` when it does not exist.
struct Schema(Option<Option<pg_sys::Oid>>);

impl Schema {
    fn oid(&mut self) -> Option<pg_sys::Oid> {
        *self.0.get_or_insert_with(|| {
            // SAFETY: a syscache lookup by name; we are inside a transaction.
            let oid = unsafe { pg_sys::get_namespace_oid(SCHEMA.as_ptr(), true) };
            (oid != pg_sys::InvalidOid).then_some(oid)
        })
    }
    fn owns_relation(&mut self, relid: pg_sys::Oid) -> bool {
        // SAFETY: syscache lookup of a relation's namespace.
        self.oid().is_some_and(|s| unsafe { pg_sys::get_rel_namespace(relid) } == s)
    }
    /// One of our set-returning functions, the ones behind the views
    /// (`gatekeeper.reset()` is ours too, but it changes things).
    fn owns_view_function(&mut self, funcid: pg_sys::Oid) -> bool {
        // SAFETY: syscache lookups of a function's namespace and retset flag.
        self.oid()
            .is_some_and(|s| unsafe { pg_sys::get_func_namespace(funcid) == s && pg_sys::get_func_retset(funcid) })
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
unsafe fn rtable_is_ours(rtable: *mut pg_sys::List, schema: &mut Schema, nested: bool) -> Option<bool> {
    let mut ours = false;
    // SAFETY: per the caller, every element is a RangeTblEntry.
    for rte in unsafe { list_ptrs::<pg_sys::RangeTblEntry>(rtable) } {
        let rte = unsafe { &*rte };
        match rte.rtekind {
            pg_sys::RTEKind::RTE_RELATION => {
                // Views only: any table, ours or not, means real work.
                if rte.relkind != pg_sys::RELKIND_VIEW as std::ffi::c_char || !schema.owns_relation(rte.relid) {
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
                    if !schema.owns_view_function(fexpr.funcid) || unsafe { may_do_work(fexpr.args.cast()) } {
                        return None;
                    }
                }
                ours = true;
            }
            pg_sys::RTEKind::RTE_SUBQUERY if nested => {
                // A view expanded by the rewriter, or a subquery in FROM.
                if rte.subquery.is_null() || !unsafe { is_monitoring_query_in(rte.subquery, schema) } {
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

/// Whether an expression calls a volatile function or a user-defined one
/// (OID from `FirstNormalObjectId` on: anything not built into PostgreSQL).
///
/// SAFETY: `node` must be NULL or a valid expression tree.
unsafe fn may_do_work(node: *mut pg_sys::Node) -> bool {
    // SAFETY: forwarded from the caller; the walker only reads the tree.
    !node.is_null()
        && unsafe { pg_sys::contain_volatile_functions(node) || user_function_walker(node, std::ptr::null_mut()) }
}

/// `expression_tree_walker` callback: true on the first user-defined function.
#[pg_guard]
unsafe extern "C-unwind" fn user_function_walker(node: *mut pg_sys::Node, ctx: *mut std::ffi::c_void) -> bool {
    if node.is_null() {
        return false;
    }
    // SAFETY: PostgreSQL's walkers pass valid nodes of the tree being walked.
    unsafe {
        // A domain's CHECK constraints run whatever functions they name,
        // and the expression tree does not show them.
        if (*node).type_ == NodeTag::T_CoerceToDomain {
            return true;
        }
        if pg_sys::check_functions_in_node(node, Some(user_function), ctx) {
            return true;
        }
        if (*node).type_ == NodeTag::T_Query {
            return pg_sys::query_tree_walker(node.cast(), Some(user_function_walker), ctx, 0);
        }
        pg_sys::expression_tree_walker(node, Some(user_function_walker), ctx)
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn user_function(funcid: pg_sys::Oid, _ctx: *mut std::ffi::c_void) -> bool {
    funcid.to_u32() >= pg_sys::FirstNormalObjectId
}

unsafe fn is_monitoring_query_in(query: *mut pg_sys::Query, schema: &mut Schema) -> bool {
    // SAFETY: the caller passes a valid analysed Query.
    unsafe {
        let q = &*query;
        if q.commandType != pg_sys::CmdType::CMD_SELECT
            || !q.utilityStmt.is_null()
            || q.hasSubLinks
            || !q.cteList.is_null()
            || q.rtable.is_null()
        {
            return false;
        }
        // Cheap rejection first: the first ordinary table ends the test.
        if rtable_is_ours(q.rtable, schema, true) != Some(true) {
            return false;
        }
        // The join tree holds WHERE and every JOIN ... ON.
        !may_do_work(q.targetList.cast())
            && !may_do_work(q.jointree.cast())
            && !may_do_work(q.havingQual)
            && !may_do_work(q.limitOffset)
            && !may_do_work(q.limitCount)
            && list_ptrs::<pg_sys::WindowClause>(q.windowClause)
                .all(|w| !may_do_work((*w).startOffset) && !may_do_work((*w).endOffset))
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
    unsafe { is_monitoring_query_in(query, &mut Schema(None)) && may_monitor() }
}

/// SAFETY: `plan` must be NULL or a valid Plan tree.
unsafe fn plan_is_clean(plan: *mut pg_sys::Plan) -> bool {
    if plan.is_null() {
        return true;
    }
    // SAFETY: per the caller, `plan` is a valid Plan node; children are walked
    // only through the fields of the node types we recognise.
    unsafe {
        let p = &*plan;
        if may_do_work(p.targetlist.cast()) || may_do_work(p.qual.cast()) {
            return false;
        }
        let extra_ok = match p.type_ {
            NodeTag::T_NestLoop | NodeTag::T_MergeJoin | NodeTag::T_HashJoin => {
                !may_do_work((*(plan as *mut pg_sys::Join)).joinqual.cast())
                    && match p.type_ {
                        NodeTag::T_MergeJoin => !may_do_work((*(plan as *mut pg_sys::MergeJoin)).mergeclauses.cast()),
                        NodeTag::T_HashJoin => !may_do_work((*(plan as *mut pg_sys::HashJoin)).hashclauses.cast()),
                        _ => true,
                    }
            }
            NodeTag::T_Limit => {
                let l = &*(plan as *mut pg_sys::Limit);
                !may_do_work(l.limitOffset) && !may_do_work(l.limitCount)
            }
            NodeTag::T_Result => !may_do_work((*(plan as *mut pg_sys::Result)).resconstantqual),
            NodeTag::T_WindowAgg => {
                let w = &*(plan as *mut pg_sys::WindowAgg);
                !may_do_work(w.startOffset) && !may_do_work(w.endOffset)
            }
            NodeTag::T_FunctionScan => {
                // The functions are ours (checked on the range table); their
                // arguments must not call anything volatile.
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
            // Nodes whose children live elsewhere are not worth recognising.
            NodeTag::T_MergeAppend | NodeTag::T_CustomScan | NodeTag::T_BitmapAnd | NodeTag::T_BitmapOr => false,
            _ => true,
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
        if rtable_is_ours(s.rtable, &mut Schema(None), false) != Some(true) {
            return false;
        }
        plan_is_clean(s.planTree) && list_ptrs::<pg_sys::Plan>(s.subplans).all(|p| plan_is_clean(p)) && may_monitor()
    }
}
