
# Copyright (c) cbllm contributors
#
# The engine worker going away never leaves a session hanging, and the engine
# comes back by itself:
#  - kill -9 of the worker while a session generates: PostgreSQL reinitialises
#    (restart_after_crash = on), the session gets an error, and once the
#    cluster is back a new call returns the same greedy output as before;
#  - SIGTERM to the worker while a session waits: the session gets an error
#    naming the worker at once, and the worker restarts (bgw_restart_time 5 s);
#  - a server restart: calls work and greedy output is unchanged.
# Generations run on a deeper copy of the test model (CbllmTest::deep_model)
# so that they last long enough to be interrupted.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

# PostgreSQL::Test::Cluster turns restart_after_crash off; the later line wins
my $node = CbllmTest::new_deep_node('crash',
	extra_conf => "restart_after_crash = on\ncbllm.max_tokens_limit = 1000\n");

my $PROMPT = 'the quick brown fox';
my $SHORT = "SELECT md5(t) || ' ' || length(t) FROM "
  . "(SELECT llm_generate('$PROMPT', 24) AS t OFFSET 0) g";
my $LONG = "SELECT length(llm_generate('$PROMPT', 1000, stop => NULL))";

my $solo = $node->safe_psql('postgres', $SHORT);
like($solo, qr/^[0-9a-f]{32} [1-9]\d*$/, 'a short greedy generation works before any crash');

# ---- kill -9 of the worker while a session is generating
{
	my $tok0 = CbllmTest::status($node)->{tokens_generated};
	my $p = CbllmTest::start_psql($node, $LONG, app => 'cbllm_crash');
	my $st = CbllmTest::wait_generating($node, $tok0, 5);
	ok($st, 'kill -9: a session is generating');
	my $wpid = $st ? $st->{worker_pid} : '';
	like($wpid, qr/^\d+$/, 'kill -9: cbllm_status() reports the worker pid');
	my $log_offset = -s $node->logfile;
	ok(kill('KILL', $wpid), "kill -9 of the worker ($wpid)");
	my ($rc, $out, $err, $el) = CbllmTest::finish_psql($p);
	isnt($rc, 0, 'kill -9: the generating session fails (it does not hang)');
	isnt($rc, -1, 'kill -9: the generating session ends before its timeout');
	like($err,
		qr/terminating connection because of crash|server closed the connection unexpectedly|connection to server was lost|cbllm/,
		'kill -9: the generating session reports the crash');
	ok($node->poll_query_until('postgres', "SELECT state FROM cbllm_status()", 'ready'),
		'kill -9: the cluster reinitialises and the engine is ready again');
	ok( $node->log_contains(
			qr/background worker "cbllm engine" \(PID $wpid\) was terminated by signal 9/,
			$log_offset),
		'kill -9: the postmaster logged the worker crash');
	my $st2 = CbllmTest::status($node);
	like($st2->{worker_pid}, qr/^\d+$/, 'kill -9: a new worker runs');
	isnt($st2->{worker_pid}, $wpid, 'kill -9: the new worker has a new pid');
	is($node->safe_psql('postgres', $SHORT), $solo,
		'kill -9: a new session generates the same greedy output as before the crash');
	ok(CbllmTest::wait_until(sub { CbllmTest::is_idle(CbllmTest::status($node)) }, 30),
		'kill -9: the engine is idle afterwards');
}

# ---- SIGTERM to the worker while a session waits for its output
{
	my $tok0 = CbllmTest::status($node)->{tokens_generated};
	my $p = CbllmTest::start_psql($node, $LONG, app => 'cbllm_term');
	my $st = CbllmTest::wait_generating($node, $tok0, 5);
	ok($st, 'SIGTERM: a session is waiting for a generation');
	my $wpid = $st ? $st->{worker_pid} : '';
	like($wpid, qr/^\d+$/, 'SIGTERM: cbllm_status() reports the worker pid');
	my $t = time;
	ok(kill('TERM', $wpid), "SIGTERM to the worker ($wpid)");
	my ($rc, $out, $err) = CbllmTest::finish_psql($p);
	my $el = time - $t;
	isnt($rc, 0, 'SIGTERM: the waiting session fails');
	isnt($rc, -1, 'SIGTERM: the waiting session ends before its timeout');
	like($err, qr/ERROR:.*cbllm.*worker/, 'SIGTERM: the error names the cbllm worker');
	note("SIGTERM: the waiting session got: $err");
	note(sprintf('SIGTERM: the session ended %.2f s after the signal', $el));
	cmp_ok($el, '<', 5, 'SIGTERM: the error comes quickly (no hang)');

	# bgw_restart_time is 5 s: the worker (which exits with status 1, so that
	# the postmaster restarts it) is back within seconds
	my $back = CbllmTest::wait_until(
		sub {
			my $s = CbllmTest::status($node);
			return $s->{state} eq 'ready' && $s->{worker_pid} ne ''
			  && $s->{worker_pid} ne $wpid;
		},
		15, 0.2);
	note('SIGTERM: status now: ' . join(', ', map { "$_=" . CbllmTest::status($node)->{$_} }
		  qw(state worker_pid)));
	ok($back, 'SIGTERM: a new worker starts and the engine is ready again');
	my ($ret, $got, $gerr) = $node->psql('postgres',
		"SET cbllm.load_timeout = '2s'; $SHORT");
	is($got, $solo, 'SIGTERM: calls work again, with the same greedy output');
}

# ---- a server restart
{
	$node->restart;
	ok($node->poll_query_until('postgres', "SELECT state FROM cbllm_status()", 'ready'),
		'restart: the engine is ready after a server restart');
	is($node->safe_psql('postgres', $SHORT), $solo,
		'restart: the same greedy output after the restart');
	my $st = CbllmTest::status($node);
	ok(CbllmTest::is_idle($st), 'restart: the engine is idle after the call');
	is($st->{tokens_generated} > 0 ? 'yes' : 'no', 'yes',
		'restart: the fresh engine counted the tokens of the call');
}

$node->stop;
done_testing();
