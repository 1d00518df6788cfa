-- Wait-bound workload: short transactions that spend most of their time
-- waiting inside the server. SELECT pg_sleep(0.005) stands in for real I/O
-- (a read from disk): this machine's memory is far larger than the data set,
-- so real reads from disk are out of reach here, and a sleep is a wait that
-- uses no CPU, as an I/O wait does. With a fixed limit of a few sessions per
-- CPU, most admitted sessions are then asleep while others queue and the
-- CPUs idle: the case for an adaptive limit. The rest is a TPC-B-style
-- update of one random pgbench_accounts row (no branch or teller rows, so no
-- row-lock queue). Run with -s <scale> so that :scale matches the data set
-- (bench.py passes it).
\set aid random(1, 100000 * :scale)
\set delta random(-5000, 5000)
BEGIN;
SELECT pg_sleep(0.005);
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
END;
