
# Copyright (c) cbllm contributors
#
# The batching node (bgworker/batch.h): plain SQL that calls llm_generate per
# row runs in batches, and gives what row-by-row evaluation gives.
#
#   - every statement form gives the same results batched as row by row
#     (cbllm.batch_rows = 0 turns the node off for the comparison): SELECT,
#     UPDATE ... SET, INSERT ... SELECT, a WHERE filter, a join, two calls
#     in one row, a call inside another's arguments (two waves), a call
#     inside CASE (left row by row), seeded sampling, jsonb output, NULL
#     inputs;
#   - EXPLAIN shows the node, which calls it batches and which it leaves
#     row by row and why; EXPLAIN ANALYZE counts batches, requests and tokens;
#   - LIMIT 5 over 300 rows makes 5 requests; a cursor closed after 3 rows
#     leaves nothing running;
#   - a statement_timeout stops a batched UPDATE within 2 s, leaves the table
#     unchanged and the engine idle; an error in one row's arguments fails
#     the statement with the function's own error.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $ROWS = 300;
my $node = CbllmTest::new_node('batch', extra_conf => "cbllm.max_queued_requests = 128\n");

$node->safe_psql('postgres',
	"CREATE TABLE t (id int PRIMARY KEY, p text, s text);
	 INSERT INTO t SELECT i, CASE WHEN i % 50 = 7 THEN NULL ELSE 'row ' || i || ' says' END, NULL
	 FROM generate_series(1, $ROWS) i;
	 CREATE TABLE sink (id int, s text)");

# The output of $sql batched and row by row (cbllm.batch_rows 0).
sub both
{
	my ($sql) = @_;
	my $batched = $node->safe_psql('postgres', $sql);
	my $plain = $node->safe_psql('postgres', "SET cbllm.batch_rows = 0; $sql");
	return ($batched, $plain);
}

sub same
{
	my ($sql, $what) = @_;
	my ($b, $p) = both($sql);
	ok($b ne '' && $b eq $p, "$what: the same batched as row by row");
}

same("SELECT id, llm_generate(p, 8) FROM t ORDER BY id", 'SELECT of 300 rows');
same("SELECT id, llm_generate(p, 6), llm_generate('again: ' || p, 4) FROM t WHERE id <= 40 ORDER BY id",
	'two calls a row');
same("SELECT id, llm_generate(llm_generate(p, 4) || ' and', 4) FROM t WHERE id <= 30 ORDER BY id",
	'a call inside another (two waves)');
same("SELECT id, CASE WHEN id % 2 = 0 THEN llm_generate(p, 5) ELSE 'odd' END FROM t WHERE id <= 30 ORDER BY id",
	'a call inside CASE (row by row)');
same("SELECT id, llm_generate(p, 8, temperature => 0.9, seed => id) FROM t WHERE id <= 60 ORDER BY id",
	'seeded sampling');
same("SELECT id, llm_generate_json(p, 24, json_schema => '{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\"}}, \"required\": [\"n\"]}') FROM t WHERE id <= 20 ORDER BY id",
	'jsonb output under a schema');
same("SELECT id FROM t WHERE id % 3 = 0 AND octet_length(llm_generate(p, 3)) % 2 = 0 ORDER BY id",
	'a WHERE filter');
same("SELECT a.id, b.id, llm_generate(b.p, 6) FROM t a JOIN t b ON b.id = a.id + 1 WHERE a.id < 40 ORDER BY a.id",
	'a join, the call on one side');
same("SELECT count(*) FILTER (WHERE x IS NULL), count(*) FROM (SELECT llm_generate(p, 3) AS x FROM t) s",
	'NULL inputs give NULL');

# UPDATE and INSERT ... SELECT: the table's contents after each
sub table_after
{
	my ($setting, $sql, $table) = @_;
	$node->safe_psql('postgres', "UPDATE t SET s = NULL; TRUNCATE sink");
	$node->safe_psql('postgres', "SET cbllm.batch_rows = $setting; $sql");
	return $node->safe_psql('postgres',
		"SELECT string_agg(id || ':' || coalesce(s, '<null>'), E'\\n' ORDER BY id) FROM $table");
}
my $upd = "UPDATE t SET s = llm_generate(p, 8)";
my $ub = table_after(-1, $upd, 't');
ok($ub ne '' && $ub eq table_after(0, $upd, 't'), 'UPDATE ... SET: the same table batched as row by row');
my $ins = "INSERT INTO sink SELECT id, llm_generate(p, 8) FROM t WHERE id <= 100";
my $ib = table_after(-1, $ins, 'sink');
ok($ib ne '' && $ib eq table_after(0, $ins, 'sink'), 'INSERT ... SELECT: the same rows batched as row by row');

# EXPLAIN
my $plan = $node->safe_psql('postgres', "EXPLAIN (COSTS OFF) UPDATE t SET s = llm_generate(p, 8)");
like($plan, qr/Custom Scan \(cbllm Batch\)/, 'EXPLAIN shows the batching node under the UPDATE');
like($plan, qr/Batched Calls: llm_generate/, 'EXPLAIN names the batched calls');
$plan = $node->safe_psql('postgres',
	"EXPLAIN (COSTS OFF) SELECT CASE WHEN id > 1 THEN llm_generate(p) END, llm_generate(p) FROM t");
like($plan, qr/Row-by-Row Calls: llm_generate \(inside CASE\)/,
	'EXPLAIN names a call left row by row and says why');
$plan = $node->safe_psql('postgres',
	"SET cbllm.batch_rows = 0; EXPLAIN (COSTS OFF) SELECT llm_generate(p) FROM t");
unlike($plan, qr/cbllm Batch/, 'with cbllm.batch_rows 0 there is no batching node');
$plan = $node->safe_psql('postgres',
	"SET cbllm.batch_rows = 64; EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT llm_generate(p, 4) FROM t");
my ($batches) = $plan =~ /Batches: (\d+)/;
my ($requests) = $plan =~ /Requests: (\d+)/;
my ($completion) = $plan =~ /Completion Tokens: (\d+)/;
is($batches, 5, 'EXPLAIN ANALYZE: 300 rows in batches of 64 are 5 batches');
is($requests, 294, 'EXPLAIN ANALYZE: one request per row with a prompt (6 rows have none)');
ok(defined $completion && $completion > 0 && $completion <= 4 * 294,
	"EXPLAIN ANALYZE counts the completion tokens ($completion)");

# LIMIT: only the rows returned are generated for
$plan = $node->safe_psql('postgres',
	"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT llm_generate(p, 4) FROM t LIMIT 5");
like($plan, qr/Row Bound: 5/, 'LIMIT 5: the node knows its bound');
($requests) = $plan =~ /Requests: (\d+)/;
is($requests, 5, 'LIMIT 5 over 300 rows makes 5 requests');

# a cursor closed early cancels what its batch still has running: its first
# 3 rows ask for one token, the other 61 of the batch for 400 (the transaction,
# which would cancel them at its end, stays open a second longer)
my $before = CbllmTest::status($node)->{tokens_generated};
$node->safe_psql('postgres',
	"BEGIN; DECLARE c CURSOR FOR SELECT llm_generate(p, CASE WHEN id <= 3 THEN 1 ELSE 400 END, stop => NULL)
	 FROM t ORDER BY id; FETCH 3 FROM c; CLOSE c; SELECT pg_sleep(1); COMMIT;");
ok(CbllmTest::wait_until(sub { CbllmTest::is_idle(CbllmTest::status($node)) }, 10),
	'a cursor closed after 3 rows: nothing is left running');
my $made = CbllmTest::status($node)->{tokens_generated} - $before;
cmp_ok($made, '<', 61 * 400 / 4,
	"and the batch's other requests were cancelled, not run to the end ($made tokens made of " . 61 * 400 . ')');

# statement_timeout stops a batched UPDATE: nothing written, nothing left running
$node->safe_psql('postgres', 'UPDATE t SET s = NULL');
my $t0 = time;
my ($rc, $out, $err) = $node->psql('postgres',
	"SET statement_timeout = '300ms'; UPDATE t SET s = llm_generate(p, 400, stop => NULL)");
my $el = time - $t0;
like($err, qr/statement timeout/, 'statement_timeout cancels the batched UPDATE');
cmp_ok($el, '<', 2, sprintf('within 2 s (%.2f s)', $el));
is($node->safe_psql('postgres', 'SELECT count(s) FROM t'), '0', 'the table is unchanged');
ok(CbllmTest::wait_until(sub { CbllmTest::is_idle(CbllmTest::status($node)) }, 2),
	'and the engine is idle within 2 s');

# an error in one row's arguments is the function's own error
($rc, $out, $err) = $node->psql('postgres',
	"UPDATE t SET s = llm_generate(p, CASE WHEN id = 77 THEN -1 ELSE 4 END)");
like($err, qr/max_tokens/, 'a bad argument in one row fails the statement with the function\'s error');
is($node->safe_psql('postgres', 'SELECT count(s) FROM t'), '0', 'and nothing is written');

done_testing();
