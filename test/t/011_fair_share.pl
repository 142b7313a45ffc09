
# Copyright (c) cbllm contributors
#
# No role takes the engine from another, and a stuck worker is seen:
#  (1) an unprivileged role submits 256 llm_submit requests and stays
#      connected without collecting them: another role's array call and
#      llm_submit still run at once, and the hog gets a clear error (its
#      quota) rather than every slot; uncollected results hold no slot;
#  (2) the per-role quota counts all of a role's sessions;
#  (3) a worker stopped with SIGSTOP shows as "stalled" after
#      cbllm.stall_timeout, and as "ready" again after SIGCONT;
#  (4) with the model directory deleted under a running engine, new
#      sessions' tokenizer functions still work (they ask the engine).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use File::Copy ();
use File::Path ();
use Time::HiRes qw(time);

# the defaults here: 64 slots, so a session holds 16 and a role 16 (a quarter each)
my $node = CbllmTest::new_node('fair',
	extra_conf => "cbllm.max_requests_per_session = 0\ncbllm.max_requests_per_role = 0\n"
	  . "cbllm.stall_timeout = '2s'\n");
$node->safe_psql('postgres', q{
	CREATE ROLE hog LOGIN;
	CREATE ROLE victim LOGIN;
});

# ---- (1) one role's uncollected requests
{
	my $hog = $node->background_psql('postgres', on_error_stop => 0, extra_params => ['-U', 'hog']);
	$hog->query_safe("SET cbllm.slot_wait_timeout = '2s'");
	my $hog_slots = sub {
		$node->safe_psql('postgres', "SELECT count(*) FROM cbllm.requests WHERE role = 'hog'::regrole");
	};
	my $parked = sub { $node->safe_psql('postgres', 'SELECT results_parked FROM cbllm_status()') };

	# 100 uncollected requests: more than the session may hold, and all accepted
	my ($out, $ret) = $hog->query(
		"SELECT count(llm_submit('x', max_tokens => 1)) FROM generate_series(1, 100)");
	is($out, '100', "the hog's 100 uncollected requests are all accepted ($hog->{stderr})");
	ok(CbllmTest::wait_until(sub { $hog_slots->() eq '0' && $parked->() eq '100' }, 10),
		'once finished, uncollected results hold no slot: all 100 are parked');

	# 256 more: the hog meets its limits (a role parks at most half the store,
	# then a session holds at most 16 slots) and gets a clear error
	($out, $ret) = $hog->query(
		"SELECT count(llm_submit('x', max_tokens => 1)) FROM generate_series(1, 256)");
	like($hog->{stderr}, qr/too many cbllm requests in this session/,
		'256 more: the hog is refused by its session quota');
	cmp_ok($hog_slots->(), '<=', 16, 'the hog never holds more than its session quota of slots');
	ok(CbllmTest::wait_until(sub { $parked->() eq '100' }, 10),
		'the failed statement took back its own requests; the first 100 results are still parked');

	# another role, while the hog stays connected
	my $t1 = time;
	my ($rc, $vout, $verr) = $node->psql('postgres',
		"SELECT array_length(llm_generate(ARRAY['a', 'b'], 4), 1)",
		connstr => $node->connstr('postgres') . ' user=victim');
	my $el = time - $t1;
	is($vout, '2', "another role's array call completes while the hog holds its requests ($verr)");
	cmp_ok($el, '<', 10, sprintf('... promptly (%.2f s)', $el));
	($rc, $vout, $verr) = $node->psql('postgres',
		"SELECT llm_result(llm_submit('mine', 4)) IS NOT NULL",
		connstr => $node->connstr('postgres') . ' user=victim');
	is($vout, 't', "another role's llm_submit and llm_result work too ($verr)");

	# the hog's requests end with its session, parked results included
	$hog->quit;
	ok( CbllmTest::wait_until(
			sub {
				$node->safe_psql('postgres',
					"SELECT count(*) FROM cbllm.requests WHERE role = 'hog'::regrole") eq '0'
				  && $node->safe_psql('postgres', 'SELECT results_parked FROM cbllm_status()')
				  eq '0';
			},
			10),
		"the hog's slots and parked results are freed when its session ends");
}

# ---- (2) the role quota spans sessions: two sessions of one role hold at most 16
{
	my @holders;
	for my $k (1 .. 2)
	{
		my $h = $node->background_psql('postgres', on_error_stop => 0, extra_params => ['-U', 'hog']);
		my $n = $k == 1 ? 10 : 6;
		$h->query_safe("SET cbllm.slot_wait_timeout = '500ms'");
		$h->query_safe('BEGIN');
		# streams hold their slots until their cursors close
		my ($o, $r) = $h->query(
			"DO \$\$ DECLARE c refcursor; p text; BEGIN FOR i IN 1..$n LOOP "
			  . "c := 'c$k' || i; OPEN c FOR SELECT llm_generate_stream('hold ' || i, 20); "
			  . "FETCH c INTO p; END LOOP; END \$\$");
		is($h->{stderr}, '', "session $k of the role opens $n streams");
		push @holders, $h;
	}
	my $third = $node->background_psql('postgres', on_error_stop => 0, extra_params => ['-U', 'hog']);
	$third->query_safe("SET cbllm.slot_wait_timeout = '500ms'");
	my ($out, $ret) = $third->query("SELECT llm_generate('one more', 4)");
	like($third->{stderr}, qr/too many cbllm requests for role "hog"/,
		'a third session of the role is refused by the role quota');
	my ($rc, $vout) = $node->psql('postgres', "SELECT llm_generate('victim', 4) IS NOT NULL",
		connstr => $node->connstr('postgres') . ' user=victim');
	is($vout, 't', 'another role is still served');
	$_->quit for (@holders, $third);
}

# ---- (3) a stopped worker is reported stalled, then ready again
{
	my $wpid = CbllmTest::status($node)->{worker_pid};
	like($wpid, qr/^\d+$/, 'the worker pid is known');
	ok(kill('STOP', $wpid), 'SIGSTOP to the worker');
	my $el = CbllmTest::wait_until(
		sub { CbllmTest::status($node)->{state} eq 'stalled' }, 10, 0.2);
	ok($el, 'cbllm_status() reports the stopped worker as stalled');
	cmp_ok($el // 99, '>=', 1.0, sprintf('... not before about cbllm.stall_timeout (%.1f s)', $el // 99));
	ok(kill('CONT', $wpid), 'SIGCONT to the worker');
	ok(CbllmTest::wait_until(sub { CbllmTest::status($node)->{state} eq 'ready' }, 10),
		'the resumed worker is ready again');
	is($node->safe_psql('postgres', "SELECT llm_generate('after the stall', 4) IS NOT NULL"),
		't', 'generation works after the stall');
}

$node->stop;

# ---- (4) the tokenizer functions ask the engine, so they keep working (and
# agree with generation) after the model directory is deleted
{
	my $moved = CbllmTest::new_node(
		'moved',
		model => sub {
			my $dst = CbllmTest::node_dir($_[0]) . '/model';
			mkdir $dst or die "mkdir $dst: $!";
			my $src = CbllmTest::model_dir();
			opendir(my $d, $src) or die "opendir $src: $!";
			for my $f (grep { -f "$src/$_" } readdir $d)
			{
				File::Copy::copy("$src/$f", "$dst/$f") or die "copy $f: $!";
			}
			closedir $d;
			return $dst;
		});
	my $q = "SELECT llm_tokenize('hello world')::text || ' ' || llm_token_count('hello world') "
	  . "|| ' ' || llm_detokenize(llm_tokenize('hello world'))";
	my $before = $moved->safe_psql('postgres', $q);
	File::Path::rmtree(CbllmTest::node_dir($moved) . '/model');
	ok(!-e CbllmTest::node_dir($moved) . '/model', 'the model directory is deleted');
	my ($rc, $after, $err) = $moved->psql('postgres', $q);
	is($after, $before, "a new session's tokenizer functions give the same answers ($err)");
	is($moved->safe_psql('postgres', "SELECT llm_generate('hello world', 4) IS NOT NULL"),
		't', 'and generation still works');
	$moved->stop;
}

done_testing();
