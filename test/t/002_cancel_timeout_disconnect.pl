
# Copyright (c) cbllm contributors
#
# A request whose statement ends early is aborted in the engine, which frees
# its KV blocks at once instead of generating to the end: query cancel
# (pg_cancel_backend), statement_timeout, a client that disconnects, a
# streaming cursor that is closed (or whose transaction ends) and a
# streaming query with LIMIT.
#
# The test model generates ~500 tokens in a few milliseconds, too fast to
# interrupt, so this cluster runs a deeper copy of it (CbllmTest::deep_model)
# that takes seconds.  The full generation is timed first; each abort must
# bring the engine back to idle in well under half that time, with fewer
# tokens generated than the full generation.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = CbllmTest::new_deep_node('cancel',
	extra_conf => "cbllm.max_tokens_limit = 1000\n");

my $PROMPT = 'the quick brown fox';
my $LONG = "llm_generate('$PROMPT', 1000, stop => NULL)";
my $LONG_STREAM = "llm_generate_stream('$PROMPT', 1000, stop => NULL)";

# ---- baseline: how long the full generation takes, and how many tokens
my $st0 = CbllmTest::status($node);
my $t0 = time;
my $len = $node->safe_psql('postgres', "SELECT length($LONG)");
my $t_full = time - $t0;
ok(CbllmTest::wait_until(sub { CbllmTest::is_idle(CbllmTest::status($node)) }, 30),
	'the engine is idle after the full generation');
my $n_full = CbllmTest::status($node)->{tokens_generated} - $st0->{tokens_generated};
note(sprintf("full generation: %d tokens, %d characters in %.2f s", $n_full, $len, $t_full));
cmp_ok($n_full, '>=', 400,
	'the long generation runs to (almost) max_model_len: hundreds of tokens');
cmp_ok($t_full, '>=', 0.5, 'the long generation takes a measurable time');
# "Quickly": within half the full generation's time, but never asking for
# less than 1.5 s (or three quarters of it, when that is less): a vanished
# client is noticed by looking at its socket every 250 ms and the status is
# polled, and on a loaded two-core machine that can take a second, while the
# faster the engine the shorter the full generation.
my $quick = $t_full / 2;
$quick = ($t_full * 0.75 < 1.5 ? $t_full * 0.75 : 1.5) if $quick < 1.5;

# Check that the engine returns to idle within $quick seconds of $since
# (the moment the statement was interrupted), having generated fewer
# tokens than the full generation since $tokens0.
sub aborted_ok
{
	my ($what, $since, $tokens0) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $st;
	my $idle = CbllmTest::wait_until(
		sub { $st = CbllmTest::status($node); CbllmTest::is_idle($st) }, 30);
	my $el = time - $since;
	ok($idle, "$what: requests_running, requests_waiting and kv_blocks_used return to 0");
	note(sprintf("%s: idle %.3f s after the interruption (full generation %.2f s)",
			$what, $el, $t_full));
	cmp_ok($el, '<', $quick,
		"$what: the engine is idle well before the full generation would end");
	cmp_ok($st->{tokens_generated} - $tokens0, '<', $n_full,
		"$what: fewer tokens were generated than a full generation (it was aborted)");
	return;
}

# ---- pg_cancel_backend
{
	my $tok0 = CbllmTest::status($node)->{tokens_generated};
	my $p = CbllmTest::start_psql($node, "SELECT length($LONG)", app => 'cbllm_cancel');
	my $pid = CbllmTest::backend_pid($node, 'cbllm_cancel');
	ok($pid, 'the generating session has a backend');
	ok(CbllmTest::wait_generating($node, $tok0, 5), 'cancel: the request is generating');
	my $t = time;
	is($node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)"), 't',
		'pg_cancel_backend signals the generating backend');
	my ($rc, $out, $err) = CbllmTest::finish_psql($p);
	isnt($rc, 0, 'the cancelled statement fails');
	like($err, qr/canceling statement due to user request/,
		'the cancelled session gets "canceling statement due to user request"');
	aborted_ok('cancel', $t, $tok0);
}

# ---- statement_timeout
{
	my $tok0 = CbllmTest::status($node)->{tokens_generated};
	my $p = CbllmTest::start_psql($node,
		[ "SET statement_timeout = '200ms'", "SELECT length($LONG)" ]);
	my ($rc, $out, $err, $el) = CbllmTest::finish_psql($p);
	my $t = time;
	isnt($rc, 0, 'statement_timeout: the long generation fails');
	like($err, qr/canceling statement due to statement timeout/,
		'statement_timeout: the session gets "canceling statement due to statement timeout"');
	cmp_ok($el, '<', $quick,
		'statement_timeout: the statement ends long before the generation would');
	aborted_ok('statement_timeout', $t, $tok0);
}

# ---- a client that disconnects mid-generation (psql killed), detected by
# client_connection_check_interval
{
	my $tok0 = CbllmTest::status($node)->{tokens_generated};
	my $p = CbllmTest::start_psql($node, "SELECT length($LONG)",
		env => { PGOPTIONS => '-c client_connection_check_interval=100ms' });
	ok(CbllmTest::wait_generating($node, $tok0, 5),
		'disconnect (with check interval): the request is generating');
	my $t = time;
	$p->{h}->signal('KILL');
	my ($rc) = CbllmTest::finish_psql($p);
	isnt($rc, 0, 'disconnect (with check interval): psql was killed');
	aborted_ok('disconnect (with check interval)', $t, $tok0);
}

# ---- the same with the default configuration: the waiting backend checks
# its client's socket itself, so a vanished client aborts the request quickly
{
	my $tok0 = CbllmTest::status($node)->{tokens_generated};
	my $p = CbllmTest::start_psql($node, "SELECT length($LONG)");
	ok(CbllmTest::wait_generating($node, $tok0, 5), 'disconnect: the request is generating');
	my $t = time;
	$p->{h}->signal('KILL');
	my ($rc) = CbllmTest::finish_psql($p);
	isnt($rc, 0, 'disconnect: psql was killed');
	my $st;
	ok( CbllmTest::wait_until(
			sub { $st = CbllmTest::status($node); CbllmTest::is_idle($st) }, 30),
		'disconnect: the engine is idle eventually');
	my $el = time - $t;
	note(sprintf("disconnect: idle %.3f s after psql was killed (full generation %.2f s)",
			$el, $t_full));
	cmp_ok($el, '<', $quick,
		'disconnect: the engine is idle well before the full generation would end');
	cmp_ok($st->{tokens_generated} - $tok0, '<', $n_full,
		'disconnect: fewer tokens were generated than a full generation (it was aborted)');
}

# ---- a streaming cursor: rows arrive while the generation continues; CLOSE aborts it
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	my $tok0 = CbllmTest::status($node)->{tokens_generated};
	$s->query_safe('BEGIN');
	$s->query_safe("DECLARE c CURSOR FOR SELECT octet_length($LONG_STREAM)");
	my $rows = $s->query_safe('FETCH 3 FROM c');
	my @rows = split /\n/, $rows;
	is(scalar(@rows), 3, 'cursor: FETCH 3 returns 3 rows');
	ok(!grep({ !/^[1-9]\d*$/ } @rows), 'cursor: each row is a non-empty piece of text');
	my $st = CbllmTest::status($node);
	is($st->{requests_running}, '1', 'cursor: after FETCH 3 the request is still running');
	ok( CbllmTest::wait_until(
			sub { CbllmTest::status($node)->{tokens_generated} > $st->{tokens_generated} + 10 },
			30),
		'cursor: the generation continues while the cursor is idle');
	$rows = $s->query_safe('FETCH 2 FROM c');
	is(scalar(split(/\n/, $rows)), 2, 'cursor: a second FETCH 2 returns 2 more rows');
	my $t = time;
	$s->query_safe('CLOSE c');
	aborted_ok('cursor CLOSE', $t, $tok0);
	$s->query_safe('COMMIT');

	# a transaction that ends with the cursor still open aborts the request too
	$tok0 = CbllmTest::status($node)->{tokens_generated};
	$s->query_safe('BEGIN');
	$s->query_safe("DECLARE c CURSOR FOR SELECT octet_length($LONG_STREAM)");
	is(scalar(split(/\n/, $s->query_safe('FETCH 1 FROM c'))), 1, 'cursor: FETCH 1 returns a row');
	is(CbllmTest::status($node)->{requests_running}, '1', 'cursor: the request is running');
	$t = time;
	$s->query_safe('ROLLBACK');
	aborted_ok('cursor left open at ROLLBACK', $t, $tok0);
	$s->quit;
}

# ---- LIMIT on a stream: two rows, then the rest of the generation is abandoned
{
	my $tok0 = CbllmTest::status($node)->{tokens_generated};
	my $t = time;
	my $rows = $node->safe_psql('postgres', "SELECT octet_length($LONG_STREAM) LIMIT 2");
	my $el = time - $t;
	my @rows = split /\n/, $rows;
	is(scalar(@rows), 2, 'LIMIT 2: the stream returns 2 rows');
	ok(!grep({ !/^[1-9]\d*$/ } @rows), 'LIMIT 2: each row is a non-empty piece of text');
	cmp_ok($el, '<', $quick, 'LIMIT 2: the statement returns long before the generation would end');
	aborted_ok('LIMIT 2', $t, $tok0);
}

# ---- and the engine still works normally afterwards
is($node->safe_psql('postgres', "SELECT length(llm_generate('$PROMPT', 8)) > 0"), 't',
	'a new request completes after all the aborted ones');
is(CbllmTest::status($node)->{state}, 'ready', 'the engine is ready');

$node->stop;
done_testing();
