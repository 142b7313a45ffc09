
# Copyright (c) cbllm contributors
#
# The database never goes down with the model.  The engine runs in a process
# of its own that the cbllm supervisor (a background worker) starts, so:
#  (1) kill -9 of the engine while 8 sessions generate: those sessions fail
#      within a second with an error that names the cause; a session running
#      ordinary SQL in the same cluster is not disconnected and its
#      transaction commits; no backend of the cluster restarts (their
#      pg_stat_activity start times are unchanged, the postmaster logs no
#      crash); the supervisor starts a new engine, and the next call gives
#      the same greedy output as before;
#  (2) the model file truncated under the engine (a model overwritten in
#      place): the engine dies of SIGBUS, the generating session's error
#      says the model file changed, ordinary SQL goes on, and once the file
#      is back the engine comes back by itself;
#  (3) SIGSTOP of the engine: cbllm_status() says "stalled" after
#      cbllm.stall_timeout, and "ready" after SIGCONT; with
#      cbllm.restart_stalled_engine the supervisor kills a stalled engine
#      that has requests, fails them saying so, and starts a new one;
#  (4) SIGTERM to the supervisor: the waiting session fails at once, and a
#      new supervisor (with a new engine) is back within seconds;
#  (5) a server restart: calls work and greedy output is unchanged.
# Generations run on a deeper copy of the test model (CbllmTest::deep_model)
# so that they last long enough to be interrupted.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use File::Copy ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = CbllmTest::new_deep_node('crash',
	extra_conf => "cbllm.max_tokens_limit = 1000\ncbllm.stall_timeout = '2s'\n");

my $PROMPT = 'the quick brown fox';
my $SHORT = "SELECT md5(t) || ' ' || length(t) FROM "
  . "(SELECT llm_generate('$PROMPT', 24) AS t OFFSET 0) g";
my $LONG = "SELECT length(llm_generate('$PROMPT', 1000, stop => NULL))";

my $solo = $node->safe_psql('postgres', $SHORT);
$node->safe_psql('postgres', 'CREATE TABLE ordinary (n int)');
like($solo, qr/^[0-9a-f]{32} [1-9]\d*$/, 'a short greedy generation works before any crash');

# The client backends now, as "pid start" lines.
sub backends
{
	return $node->safe_psql('postgres',
		"SELECT string_agg(pid || ' ' || backend_start, ',' ORDER BY pid) FROM pg_stat_activity "
		  . "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()");
}

# An ordinary session with an open transaction, left running: returns its handle.
sub ordinary_session
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe('BEGIN');
	$s->query_safe('INSERT INTO ordinary VALUES (1)');
	return $s;
}

# That session goes on: it can still query and its transaction commits.
sub ordinary_survives
{
	my ($s, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my ($out, $ret) = $s->query('INSERT INTO ordinary VALUES (2)');
	is($ret, 0, "$what: the ordinary session still runs SQL ($s->{stderr})");
	($out, $ret) = $s->query('COMMIT');
	is($ret, 0, "$what: its transaction commits");
	$s->quit;
}

# Start $n generating sessions and wait until the engine runs them all.
sub start_generating
{
	my ($n, $tag) = @_;
	my $tok0 = CbllmTest::status($node)->{tokens_generated};
	my @p = map { CbllmTest::start_psql($node, $LONG, app => "${tag}_$_") } 1 .. $n;
	my $st;
	CbllmTest::wait_until(
		sub {
			$st = CbllmTest::status($node);
			return $st->{requests_running} == $n && $st->{tokens_generated} >= $tok0 + 5 * $n;
		},
		30);
	return (\@p, $st);
}

# ---- (1) kill -9 of the engine while 8 sessions generate
{
	my $ord = ordinary_session();
	my $before = backends();
	my ($p, $st) = start_generating(8, 'gen');
	is($st->{requests_running}, '8', 'kill -9: 8 sessions are generating');
	my ($epid, $wpid) = ($st->{engine_pid}, $st->{worker_pid});
	like($epid, qr/^\d+$/, 'kill -9: cbllm_status() reports the engine pid');
	isnt($epid, $wpid, 'kill -9: the engine is a process of its own, not the worker');
	my $log_offset = -s $node->logfile;
	my $t = time;
	ok(kill('KILL', $epid), "kill -9 of the engine ($epid)");
	my @done = map { [ CbllmTest::finish_psql($_) ] } @$p;
	my $el = time - $t;
	is(scalar(grep { $_->[0] != 0 && $_->[0] != -1 } @done), 8,
		'kill -9: all 8 generating sessions fail (none hangs, none returns a result)');
	cmp_ok($el, '<', 3, sprintf('kill -9: ... within seconds (%.2f s for all 8)', $el));
	is( scalar(grep { $_->[2] =~ /ERROR:.*cbllm engine process was killed by SIGKILL/ } @done),
		8, 'kill -9: each error names the cause');
	note("kill -9: one session got: $done[0][2]");
	my $after = $node->safe_psql('postgres',
		"SELECT string_agg(pid || ' ' || backend_start, ',' ORDER BY pid) FROM pg_stat_activity "
		  . "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() "
		  . "AND pid IN (" . join(',', map { (split / /)[0] } split(/,/, $before)) . ")");
	is($after, $before, 'kill -9: no backend of the cluster was restarted');
	ordinary_survives($ord, 'kill -9');
	ok(!$node->log_contains(qr/terminating any other active server processes|was terminated by signal/,
			$log_offset),
		'kill -9: the postmaster saw no crash');
	ok($node->poll_query_until('postgres',
			"SELECT state = 'ready' AND engine_restarts = 1 FROM cbllm_status()"),
		'kill -9: the supervisor started a new engine and it is ready');
	my $st2 = CbllmTest::status($node);
	is($st2->{worker_pid}, $wpid, 'kill -9: the same supervisor runs');
	isnt($st2->{engine_pid}, $epid, 'kill -9: the new engine has a new pid');
	is($node->safe_psql('postgres', $SHORT), $solo,
		'kill -9: the next call gives the same greedy output as before the crash');
	ok(CbllmTest::wait_until(sub { CbllmTest::is_idle(CbllmTest::status($node)) }, 10),
		'kill -9: the engine is idle afterwards');
}

# ---- (2) the model file truncated under the engine
{
	my $model = CbllmTest::node_dir($node) . '/deep_model/model.safetensors';
	File::Copy::copy($model, "$model.saved") or die "copy: $!";
	my $ord = ordinary_session();
	my ($p, $st) = start_generating(1, 'bus');
	is($st->{requests_running}, '1', 'truncated model: a session is generating');
	my $t = time;
	open(my $fh, '>', $model) or die "truncate $model: $!";	# rewritten in place: first emptied
	close $fh;
	my ($rc, $out, $err) = CbllmTest::finish_psql($p->[0]);
	my $el = time - $t;
	isnt($rc, 0, 'truncated model: the generating session fails');
	cmp_ok($el, '<', 3, sprintf('truncated model: ... within seconds (%.2f s)', $el));
	like($err, qr/SIGBUS: a model file changed under the engine/,
		"truncated model: the error says the model file changed ($err)");
	ordinary_survives($ord, 'truncated model');
	# the new engine cannot load the truncated file, and says so
	ok($node->poll_query_until('postgres', "SELECT state FROM cbllm_status()", 'failed'),
		'truncated model: the restarted engine reports that the model fails to load');
	like($node->safe_psql('postgres', 'SELECT reason FROM cbllm_status()'),
		qr/safetensors|model\.safetensors/, 'truncated model: the reason names the file');
	# the file back: the supervisor's next try loads it
	File::Copy::move("$model.saved", $model) or die "restore: $!";
	ok($node->poll_query_until('postgres', "SELECT state FROM cbllm_status()", 'ready'),
		'truncated model: with the file restored the engine comes back by itself');
	is($node->safe_psql('postgres', $SHORT), $solo,
		'truncated model: the same greedy output afterwards');
}

# ---- (3) a stopped engine is stalled; optionally killed and restarted
{
	my $epid = CbllmTest::status($node)->{engine_pid};
	ok(kill('STOP', $epid), 'SIGSTOP to the engine');
	my $el = CbllmTest::wait_until(sub { CbllmTest::status($node)->{state} eq 'stalled' }, 10, 0.2);
	ok($el, 'SIGSTOP: cbllm_status() reports the engine as stalled');
	ok(kill('CONT', $epid), 'SIGCONT to the engine');
	ok(CbllmTest::wait_until(sub { CbllmTest::status($node)->{state} eq 'ready' }, 10),
		'SIGCONT: the engine is ready again');
	is(CbllmTest::status($node)->{engine_pid}, $epid, 'SIGCONT: the same engine goes on');

	$node->append_conf('postgresql.conf', "cbllm.restart_stalled_engine = on\n");
	$node->reload;
	my $restarts = CbllmTest::status($node)->{engine_restarts};
	my ($p, $st) = start_generating(1, 'stall');
	ok(kill('STOP', $st->{engine_pid}), 'restart_stalled_engine: SIGSTOP while a session generates');
	my ($rc, $out, $err) = CbllmTest::finish_psql($p->[0]);
	isnt($rc, 0, 'restart_stalled_engine: the generating session fails');
	like($err, qr/made no progress .* and was killed/,
		"restart_stalled_engine: its error says the engine stalled ($err)");
	ok($node->poll_query_until('postgres',
			"SELECT state = 'ready' AND engine_restarts = $restarts + 1 FROM cbllm_status()"),
		'restart_stalled_engine: a new engine is ready');
	$node->append_conf('postgresql.conf', "cbllm.restart_stalled_engine = off\n");
	$node->reload;
}

# ---- (4) SIGTERM to the supervisor while a session waits for its output
{
	my ($p, $st) = start_generating(1, 'term');
	my ($wpid, $epid) = ($st->{worker_pid}, $st->{engine_pid});
	like($wpid, qr/^\d+$/, 'SIGTERM: cbllm_status() reports the worker pid');
	my $t = time;
	ok(kill('TERM', $wpid), "SIGTERM to the supervisor ($wpid)");
	my ($rc, $out, $err) = CbllmTest::finish_psql($p->[0]);
	my $el = time - $t;
	isnt($rc, 0, 'SIGTERM: the waiting session fails');
	like($err, qr/ERROR:.*cbllm.*worker/, 'SIGTERM: the error names the cbllm worker');
	cmp_ok($el, '<', 5, sprintf('SIGTERM: the error comes quickly (%.2f s)', $el));
	ok(CbllmTest::wait_until(sub { !kill(0, $epid) }, 10),
		'SIGTERM: the supervisor took its engine process down with it');
	# bgw_restart_time is 5 s: the supervisor is back within seconds, with a new engine
	my $back = CbllmTest::wait_until(
		sub {
			my $s = CbllmTest::status($node);
			return $s->{state} eq 'ready' && $s->{worker_pid} ne '' && $s->{worker_pid} ne $wpid;
		},
		15, 0.2);
	ok($back, 'SIGTERM: a new supervisor starts and the engine is ready again');
	my ($ret, $got, $gerr) = $node->psql('postgres', "SET cbllm.load_timeout = '2s'; $SHORT");
	is($got, $solo, 'SIGTERM: calls work again, with the same greedy output');
}

# ---- (5) a server restart
{
	$node->restart;
	ok($node->poll_query_until('postgres', "SELECT state FROM cbllm_status()", 'ready'),
		'restart: the engine is ready after a server restart');
	is($node->safe_psql('postgres', $SHORT), $solo,
		'restart: the same greedy output after the restart');
	ok(CbllmTest::wait_until(sub { CbllmTest::is_idle(CbllmTest::status($node)) }, 10),
		'restart: the engine is idle after the call');
	cmp_ok(CbllmTest::status($node)->{tokens_generated}, '>', 0,
		'restart: the fresh engine counted the tokens of the call');
}

$node->stop;
done_testing();
