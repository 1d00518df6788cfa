-- Slow-client workload: an application about a
-- millisecond of network and processing away from the server. Two reads and
-- one write of random pgbench_accounts rows, no hot rows (no branch or
-- teller updates), so it measures CPU use rather than row-lock queues.
-- Run with -s <scale> so that :scale matches the data set.
\set aid1 random(1, 100000 * :scale)
\set aid2 random(1, 100000 * :scale)
\set delta random(-5000, 5000)
BEGIN;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid1;
\sleep 1 ms
SELECT abalance FROM pgbench_accounts WHERE aid = :aid2;
\sleep 1 ms
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid1;
END;
