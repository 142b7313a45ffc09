
# Copyright (c) cbllm contributors
#
# Several engines in one cluster (cbllm.engines = 2, a thread each):
#  (1) cbllm.engines shows two ready engine processes, and cbllm_status()
#      their sums;
#  (2) 32 concurrent sessions are split between the two (each generates for
#      some), and every output equals what a one-engine cluster gives for
#      the same prompt at temperature 0;
#  (3) on a slow model, kill -9 of one engine while sessions generate on
#      both: the sessions on that engine fail naming the cause, those on the
#      other complete, the other engine's process is untouched, and the
#      killed one is restarted and serves again.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $N = 32;
my @prompts = map { "prompt number $_ about " . ('abc', 'the fox', 'databases', 'x y z')[$_ % 4] } 1 .. $N;
my $two = CbllmTest::new_node('two', extra_conf => "cbllm.engines = 2\ncbllm.threads = 1\n");
my $one = CbllmTest::new_node('one', extra_conf => "cbllm.threads = 1\n");

# (1) two engines
my $engines = $two->safe_psql('postgres',
	"SELECT string_agg(engine || ':' || state, ',' ORDER BY engine) FROM cbllm.engines");
is($engines, '1:ready,2:ready', 'cbllm.engines shows two ready engines');
is($two->safe_psql('postgres', 'SELECT count(DISTINCT pid) FROM cbllm.engines'), '2',
	'each its own process');
is( $two->safe_psql(
		'postgres',
		'SELECT (SELECT sum(kv_blocks_total) FROM cbllm.engines) = kv_blocks_total FROM cbllm_status()'),
	't', "cbllm_status() sums the engines' KV caches");
is($one->safe_psql('postgres', 'SELECT count(*) FROM cbllm.engines'), '1',
	'a cluster without the setting has one engine');

# (2) 32 sessions at once
my @before = split /\n/,
  $two->safe_psql('postgres', 'SELECT tokens_out FROM cbllm.engines ORDER BY engine');
my @h = map { CbllmTest::start_psql($two, "SELECT llm_generate('$prompts[$_]', 12, temperature => 0)") }
  0 .. $N - 1;
my @got = map { my ($rc, $out) = CbllmTest::finish_psql($_); $rc == 0 ? $out : "failed: $rc" } @h;
my @after = split /\n/,
  $two->safe_psql('postgres', 'SELECT tokens_out FROM cbllm.engines ORDER BY engine');
my @want = map { $one->safe_psql('postgres', "SELECT llm_generate('$prompts[$_]', 12, temperature => 0)") }
  0 .. $N - 1;
is_deeply(\@got, \@want, "$N concurrent sessions get the one-engine cluster's greedy texts");
{
	my ($t1, $t2) = ($after[0] - $before[0], $after[1] - $before[1]);
	ok($t1 > 0 && $t2 > 0 && $t1 >= ($t1 + $t2) / 4 && $t2 >= ($t1 + $t2) / 4,
		"they were split between the engines, each generating at least a quarter (tokens $t1 and $t2)");
}
$two->stop;
$one->stop;

# (3) an engine's death fails only its own requests
my $slow = CbllmTest::new_deep_node('slow',
	extra_conf => "cbllm.engines = 2\ncbllm.threads = 1\ncbllm.max_tokens_limit = 1000\n");
my @long = map {
	CbllmTest::start_psql($slow, "SELECT length(llm_generate('$prompts[$_]', 1000, stop => NULL))")
} 0 .. 5;
ok( CbllmTest::wait_until(
		sub {
			$slow->safe_psql('postgres', 'SELECT bool_and(requests > 0) FROM cbllm.engines') eq 't';
		},
		60),
	'six long generations run on both engines');
my ($pid1, $pid2) = split /\n/, $slow->safe_psql('postgres', 'SELECT pid FROM cbllm.engines ORDER BY engine');
my $on2 = $slow->safe_psql('postgres', 'SELECT requests FROM cbllm.engines WHERE engine = 2');
kill 'KILL', $pid2;
my ($ok, $failed, $msg) = (0, 0, '');
for my $p (@long)
{
	my ($rc, $out, $err) = CbllmTest::finish_psql($p);
	if ($rc == 0) { $ok++ }
	else { $failed++; $msg = $err }
}
is($failed, $on2, "the $on2 sessions on the killed engine fail");
like($msg, qr/signal 9|killed/i, 'naming the cause') or diag($msg);
is($ok, 6 - $on2, 'the sessions on the other engine complete');
is($slow->safe_psql('postgres', 'SELECT pid FROM cbllm.engines WHERE engine = 1'), $pid1,
	"the other engine's process is untouched");
ok( $slow->poll_query_until('postgres',
		"SELECT state = 'ready' AND restarts = 1 FROM cbllm.engines WHERE engine = 2"),
	'the killed engine is restarted');
is($slow->safe_psql('postgres', "SELECT length(llm_generate('$prompts[0]', 4)) > 0"), 't',
	'and the cluster serves again');
$slow->stop;
done_testing();
