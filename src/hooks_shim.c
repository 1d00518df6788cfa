/*
 * The hook entry points, in C, so that an error raised by the code they
 * chain to (the standard planner, executor start, utility processing, or
 * another extension's hook) travels to PostgreSQL's own error handling
 * through C frames only, with every field it carries: DETAIL, HINT,
 * CONTEXT, the position, the schema, table, column and constraint names.
 * Were it to cross a Rust frame, pgrx would catch it and raise a copy with
 * only the SQLSTATE, message, DETAIL and HINT (and a Rust backtrace in the
 * DETAIL when RUST_BACKTRACE is set).
 *
 * Each entry point calls the Rust side (src/hooks.rs, guarded: an error it
 * raises is its own, complete) for the admission decision, then chains.
 *
 * The object access hook admits before a function is set up to run
 * (OAT_FUNCTION_EXECUTE) in a transaction that has no admission yet: a
 * fastpath function call, or a function in a domain's CHECK compiled while
 * parse analysis or Bind converts a value. A monitoring query that took the
 * free path compiles only harmless built-ins while it is planned and its
 * executor starts: gk_free_depth counts those scopes, in which the hook
 * does nothing.
 */
#include "postgres.h"

#include "catalog/objectaccess.h"
#include "catalog/pg_database.h"
#include "executor/executor.h"
#include "nodes/params.h"
#include "optimizer/planner.h"
#include "tcop/utility.h"

/* The Rust side. */
extern bool gk_before_planner(Query *parse);
extern bool gk_before_executor_start(QueryDesc *queryDesc, int eflags);
extern void gk_before_function_execute(void);
extern int gk_before_utility(PlannedStmt *pstmt, bool toplevel);
extern void gk_database_dropping(Oid dbid);
extern void gk_after_utility(int action, bool toplevel);
extern void gk_utility_failed(int action, bool toplevel);

static planner_hook_type prev_planner = NULL;
static ExecutorStart_hook_type prev_executor_start = NULL;
static ProcessUtility_hook_type prev_process_utility = NULL;
static object_access_hook_type prev_object_access = NULL;

/* Depth of free-path statements being planned or started (see above). */
static int	gk_free_depth = 0;

/*
 * This transaction holds an admission or was let through: written by the
 * Rust side (session.rs) whenever that changes. The planner and object
 * access hooks only decide admission, so with it set they chain at once;
 * ExecutorStart and ProcessUtility still call in (the stall check's run
 * start, utility scopes and chains).
 */
bool		gk_settled = false;

/*
 * The query id of the statement that asked for this transaction's
 * admission, until that statement has started (its ExecutorStart, or its
 * utility, returned): written by the Rust side (session.rs) at admission,
 * cleared here. A transaction's shape is learnt only once its statement
 * started: one that failed its permission checks at ExecutorStart, in a
 * subtransaction rolled back before long work, teaches nothing about a
 * statement that never ran (shapes are also per role: docs/DESIGN.md
 * §15). 0: none pending.
 */
uint64		gk_shape_pending = 0;

static inline void
gk_statement_started(uint64 query_id)
{
	if (gk_shape_pending != 0 && query_id == gk_shape_pending)
		gk_shape_pending = 0;
}

static PlannedStmt *
gk_call_planner(Query *parse, const char *query_string, int cursor_options, ParamListInfo bound_params)
{
	if (prev_planner)
		return prev_planner(parse, query_string, cursor_options, bound_params);
	return standard_planner(parse, query_string, cursor_options, bound_params);
}

static PlannedStmt *
gk_planner(Query *parse, const char *query_string, int cursor_options, ParamListInfo bound_params)
{
	PlannedStmt *volatile result = NULL;

	if (gk_settled || !gk_before_planner(parse))
		return gk_call_planner(parse, query_string, cursor_options, bound_params);
	gk_free_depth++;
	PG_TRY();
	{
		result = gk_call_planner(parse, query_string, cursor_options, bound_params);
	}
	PG_FINALLY();
	{
		gk_free_depth--;
	}
	PG_END_TRY();
	return result;
}

static void
gk_call_executor_start(QueryDesc *queryDesc, int eflags)
{
	if (prev_executor_start)
		prev_executor_start(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);
}

static void
gk_executor_start(QueryDesc *queryDesc, int eflags)
{
	if (!gk_before_executor_start(queryDesc, eflags))
	{
		gk_call_executor_start(queryDesc, eflags);
		gk_statement_started((uint64) queryDesc->plannedstmt->queryId);
		return;
	}
	gk_free_depth++;
	PG_TRY();
	{
		gk_call_executor_start(queryDesc, eflags);
	}
	PG_FINALLY();
	{
		gk_free_depth--;
	}
	PG_END_TRY();
}

static void
gk_object_access(ObjectAccessType access, Oid classId, Oid objectId, int subId, void *arg)
{
	if (prev_object_access)
		prev_object_access(access, classId, objectId, subId, arg);
	if (access == OAT_FUNCTION_EXECUTE && gk_free_depth == 0 && !gk_settled)
		gk_before_function_execute();
	/* DROP DATABASE, past its permission check: see shapes_api.rs. */
	if (access == OAT_DROP && classId == DatabaseRelationId)
		gk_database_dropping(objectId);
}

static void
gk_process_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
				   ProcessUtilityContext context, ParamListInfo params,
				   QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	const bool	toplevel = context == PROCESS_UTILITY_TOPLEVEL;
	int			action = gk_before_utility(pstmt, toplevel);

	/*
	 * Read before the call: a utility that commits or rolls back inside it
	 * (CALL, DO) may free its own statement (pg_stat_statements says the
	 * same of pstmt).
	 */
	const uint64 query_id = (uint64) pstmt->queryId;

	PG_TRY();
	{
		if (prev_process_utility)
			prev_process_utility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
		else
			standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
	}
	PG_CATCH();
	{
		/*
		 * It ran, and failed: a long CALL, CREATE INDEX or COPY that hit
		 * statement_timeout teaches its shape, as a planned statement that
		 * fails after its ExecutorStart does.
		 */
		gk_statement_started(query_id);
		gk_utility_failed(action, toplevel);
		PG_RE_THROW();
	}
	PG_END_TRY();
	gk_statement_started(query_id);
	gk_after_utility(action, toplevel);
}

/* Install the hooks, keeping the previous ones to chain to. */
void
gk_install_hooks(void)
{
	prev_planner = planner_hook;
	planner_hook = gk_planner;
	prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = gk_executor_start;
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = gk_process_utility;
	prev_object_access = object_access_hook;
	object_access_hook = gk_object_access;
}
