
# Copyright (c) cbllm contributors
#
# The observability views under load: 12 sessions generate at once on the
# slow (deep) model while another session polls cbllm.engine, cbllm.requests
# and cbllm.stats.  Every read returns quickly (reading never blocks the
# engine), cbllm.requests shows the 12 live requests with sensible states,
# cbllm.engine shows the load; afterwards cbllm.requests is empty,
# cbllm.stats counts exactly the 12 requests since cbllm.reset_stats(), and
# a non-superuser may read the views but not reset the statistics.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $N = 12;
my $MAX_TOKENS = 200;
my $LOCK = 4343;
my $STATES = "'submitted','queued','prefill','decode','preempted','swapped','done'";

my $node = CbllmTest::new_deep_node('views');

$node->safe_psql('postgres', 'SELECT cbllm.reset_stats()');
is($node->safe_psql('postgres', 'SELECT sum(samples) FROM cbllm.stats'),
	'0', 'no latency sample right after cbllm.reset_stats()');

# A barrier so that all sessions submit together (see 001).
my $holder = $node->background_psql('postgres');
$holder->query_safe("SELECT pg_advisory_lock($LOCK)");

my @p;
for my $i (0 .. $N - 1)
{
	push @p,
	  CbllmTest::start_psql($node,
		    "WITH l AS MATERIALIZED (SELECT pg_advisory_lock_shared($LOCK)), "
		  . "g AS MATERIALIZED (SELECT llm_generate('prompt $i the quick brown fox', "
		  . "$MAX_TOKENS, stop => NULL) AS t FROM l) "
		  . "SELECT length(t) FROM g");
}
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
		$N),
	"all $N sessions are waiting at the barrier");

# The monitoring session: one connection, so the timings are the queries'.
my $mon = $node->background_psql('postgres');
$holder->query_safe("SELECT pg_advisory_unlock($LOCK)");
my $t_load = time;

my %q = (
	engine => "SELECT requests_running + requests_waiting, kv_blocks_used FROM cbllm.engine",
	requests => "SELECT count(*), "
	  . "count(*) FILTER (WHERE state IS NULL OR state NOT IN ($STATES) OR pid IS NULL OR pid <= 0), "
	  . "count(*) FILTER (WHERE state IN ('prefill','decode') AND coalesce(prompt_tokens, 0) <= 0), "
	  . "string_agg(DISTINCT state, ',') "
	  . "FROM cbllm.requests",
	stats => "SELECT count(*) FROM cbllm.stats");
my %max_t = map { $_ => 0 } keys %q;
my ($max_live, $bad_rows, $bad_tokens, $reads, $seen_busy_engine) = (0, 0, 0, 0, 0);
my %states_seen;
my $deadline = time + 45;
while (time < $deadline)
{
	my %r;
	for my $v (sort keys %q)
	{
		my $t0 = time;
		$r{$v} = $mon->query_safe($q{$v});
		my $el = time - $t0;
		$max_t{$v} = $el if $el > $max_t{$v};
	}
	$reads++;
	my ($live, $bad, $badtok, $states) = split /\|/, $r{requests};
	$states_seen{$_} = 1 for split /,/, $states // '';
	$max_live = $live if $live > $max_live;
	$bad_rows += $bad;
	$bad_tokens += $badtok;
	my ($busy, $kv) = split /\|/, $r{engine};
	$seen_busy_engine = 1 if $busy > 0 && $kv > 0;
	# done once the requests seen have all left the engine
	last if $max_live > 0 && $live == 0 && $busy == 0;
	usleep(50_000);
}
note(sprintf('%d polls over %.1f s; slowest reads: engine %.3f s, requests %.3f s, stats %.3f s',
	$reads, time - $t_load, @max_t{qw(engine requests stats)}));

is($max_live, $N, "cbllm.requests showed all $N requests at once");
is($bad_rows, 0, 'every cbllm.requests row had a known state and a backend pid')
  or diag('states seen: ' . join(',', sort keys %states_seen));
is($bad_tokens, 0, 'every request in prefill or decode had prompt_tokens > 0');
ok($seen_busy_engine,
	'cbllm.engine showed running/waiting requests and used KV blocks during the load');
for my $v (sort keys %q)
{
	# a bound on liveness (a read never waits for the engine), not a speed goal: on a
	# loaded 2-core machine a connected psql's read can take a while by itself
	cmp_ok($max_t{$v}, '<', 2.0, "every read of cbllm.$v under load took < 2 s");
}

my $n_ok = 0;
for my $i (0 .. $N - 1)
{
	my ($rc, $out, $err) = CbllmTest::finish_psql($p[$i]);
	if ($rc == 0 && $out =~ /^[1-9]\d*$/) { $n_ok++ }
	else { diag("session $i: rc $rc, out '$out', err: $err") }
}
is($n_ok, $N, "all $N generations completed with non-empty text");

ok( CbllmTest::wait_until(
		sub { $node->safe_psql('postgres', 'SELECT count(*) FROM cbllm.requests') eq '0' }, 10),
	'cbllm.requests is empty after the load');

my %stats;
for my $row (split /\n/,
	$node->safe_psql('postgres',
		'SELECT metric, samples, p50_ms <= p90_ms AND p90_ms <= p99_ms FROM cbllm.stats'))
{
	my ($m, $s, $ord) = split /\|/, $row;
	$stats{$m} = { samples => $s, ordered => $ord };
}
is($stats{ttft}{samples}, $N, "cbllm.stats: $N ttft samples since the reset");
is($stats{e2e}{samples}, $N, "cbllm.stats: $N e2e samples since the reset");
cmp_ok($stats{itl}{samples} // 0, '>', 0, 'cbllm.stats: itl samples > 0');
for my $m (qw(ttft itl e2e))
{
	is($stats{$m}{ordered}, 't', "cbllm.stats: $m p50 <= p90 <= p99");
}
cmp_ok($node->safe_psql('postgres', 'SELECT mean_batch_size FROM cbllm.engine'),
	'>', 1, 'cbllm.engine: mean_batch_size > 1 (the sessions were batched)');

$node->safe_psql('postgres', 'SELECT cbllm.reset_stats()');
is($node->safe_psql('postgres', 'SELECT sum(samples) FROM cbllm.stats'),
	'0', 'cbllm.reset_stats() zeroes the samples');

# a non-superuser: may read the views, may not reset
$node->safe_psql('postgres', 'CREATE ROLE viewer LOGIN');
my ($rc, $out, $err) = $node->psql('postgres', 'SELECT cbllm.reset_stats()',
	extra_params => [ '-U', 'viewer' ]);
isnt($rc, 0, 'a non-superuser cannot call cbllm.reset_stats()');
like($err, qr/permission denied/, '... with permission denied');
for my $v (qw(engine requests stats))
{
	($rc, $out, $err) = $node->psql('postgres', "SELECT count(*) >= 0 FROM cbllm.$v",
		extra_params => [ '-U', 'viewer' ]);
	ok($rc == 0 && $out eq 't', "a non-superuser can read cbllm.$v")
	  or diag("rc $rc, err: $err");
}

$mon->quit;
$holder->quit;
$node->stop;
done_testing();
