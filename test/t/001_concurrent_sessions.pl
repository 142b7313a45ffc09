
# Copyright (c) cbllm contributors
#
# 32 sessions generate at once: every one completes, each output equals the
# same prompt's output computed alone (greedy decoding is deterministic and
# batching must not change it), the engine really batched across sessions
# (more than one sequence per step on average), and afterwards it holds no
# request and no KV block.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $N_SESSIONS = 32;
my $N_PROMPTS = 8;
my $MAX_TOKENS = 48;
my $LOCK = 4242;

my $node = CbllmTest::new_node('concurrent');

# md5 and length of the output: exact comparison, immune to newlines in the text
sub gen_sql
{
	my ($k) = @_;
	return "SELECT md5(t) || ' ' || length(t) FROM "
	  . "(SELECT llm_generate('prompt $k', $MAX_TOKENS) AS t OFFSET 0) g";
}

# solo outputs, one session, one request at a time
my %solo;
for my $k (0 .. $N_PROMPTS - 1)
{
	$solo{$k} = $node->safe_psql('postgres', gen_sql($k));
	like($solo{$k}, qr/^[0-9a-f]{32} [1-9]\d*$/,
		"solo output for prompt $k is non-empty text");
}
is($node->safe_psql('postgres', gen_sql(0)), $solo{0},
	'the same prompt alone gives the same greedy output twice');
my %distinct = map { $_ => 1 } values %solo;
cmp_ok(scalar(keys %distinct), '>', 1,
	'distinct prompts give distinct outputs (the comparison below is meaningful)');
ok(CbllmTest::wait_until(sub { CbllmTest::is_idle(CbllmTest::status($node)) }, 30),
	'the engine is idle after the solo runs');

my $before = CbllmTest::status($node);

# A barrier: every session first waits on a shared advisory lock this session
# holds exclusively, so that all 32 submit their requests together.
my $holder = $node->background_psql('postgres');
$holder->query_safe("SELECT pg_advisory_lock($LOCK)");

my (@p, @prompt);
for my $i (0 .. $N_SESSIONS - 1)
{
	my $k = $i % $N_PROMPTS;
	$prompt[$i] = $k;
	$p[$i] = CbllmTest::start_psql($node,
		    "WITH l AS MATERIALIZED (SELECT pg_advisory_lock_shared($LOCK)), "
		  . "g AS MATERIALIZED (SELECT llm_generate('prompt $k', $MAX_TOKENS) AS t FROM l) "
		  . "SELECT md5(t) || ' ' || length(t) FROM g");
}

ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
		$N_SESSIONS),
	"all $N_SESSIONS sessions are connected and waiting at the barrier");

my $t0 = time;
$holder->query_safe("SELECT pg_advisory_unlock($LOCK)");

my (@out, $n_ok);
$n_ok = 0;
for my $i (0 .. $N_SESSIONS - 1)
{
	my ($rc, $out, $err) = CbllmTest::finish_psql($p[$i]);
	$out[$i] = $out;
	if ($rc == 0 && $err eq '')
	{
		$n_ok++;
	}
	else
	{
		diag("session $i: exit status $rc, stderr: $err");
	}
}
note(sprintf("the %d concurrent sessions took %.2f s", $N_SESSIONS, time - $t0));
is($n_ok, $N_SESSIONS, "all $N_SESSIONS concurrent sessions completed without error");

my $n_same = 0;
for my $i (0 .. $N_SESSIONS - 1)
{
	if ($out[$i] eq $solo{ $prompt[$i] })
	{
		$n_same++;
	}
	else
	{
		diag("session $i (prompt $prompt[$i]): got '$out[$i]', solo gave '$solo{$prompt[$i]}'");
	}
}
is($n_same, $N_SESSIONS,
	"every concurrent output equals the same prompt's solo output");

ok(CbllmTest::wait_until(sub { CbllmTest::is_idle(CbllmTest::status($node)) }, 30),
	'afterwards no request runs or waits and no KV block is used');

my $after = CbllmTest::status($node);
my $d_tokens = $after->{tokens_generated} - $before->{tokens_generated};
my $d_steps = $after->{steps} - $before->{steps};
note("concurrent run: $d_tokens tokens in $d_steps steps; "
	  . "mean_batch_size $before->{mean_batch_size} -> $after->{mean_batch_size}");
# EOS may end a sequence early, so the tokens are at most 32 x 48 and at least 32
cmp_ok($d_tokens, '>=', $N_SESSIONS, 'the concurrent run generated tokens for every session');
cmp_ok($d_tokens, '<=', $N_SESSIONS * $MAX_TOKENS, 'and no more than max_tokens each');
cmp_ok($d_steps, '>', 0, 'the engine stepped during the concurrent run');
cmp_ok($d_tokens / ($d_steps || 1), '>', 1.5,
	'tokens generated per engine step during the concurrent run is above 1 (cross-session batching)');
cmp_ok($after->{mean_batch_size}, '>', 1,
	'cbllm_status().mean_batch_size is above 1 after the concurrent run');
cmp_ok($after->{mean_batch_size}, '>', $before->{mean_batch_size},
	'mean_batch_size rose with the concurrent run');
is($after->{requests_running} . '/' . $after->{requests_waiting} . '/' . $after->{kv_blocks_used},
	'0/0/0', 'requests_running, requests_waiting and kv_blocks_used are all 0');
is($after->{state}, 'ready', 'the engine is still ready');

$holder->quit;
$node->stop;
done_testing();
