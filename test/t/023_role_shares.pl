
# Copyright (c) cbllm contributors
#
# No role can starve or lock out the others:
#  (1) request slots: a role holds at most a quarter of them by default
#      (two roles cannot take them all), and the last
#      cbllm.superuser_reserved_requests free slots are a superuser's only:
#      once four roles fill the rest, a fifth is refused with the reason
#      while a superuser is still served;
#  (2) priorities: a superuser caps the priority a role may ask for with
#      ALTER ROLE ... SET cbllm.max_priority; the role cannot raise it;
#  (3) running sequences: while one role's 16-prompt array call holds every
#      running sequence of the engine (8) and queues the rest, another
#      role's 4-token question completes at once, before any request of the
#      flood has ended, and the flood then completes in full.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

# the default quotas (a quarter of the 64 slots each) and 8 slots reserved
my $node = CbllmTest::new_node('shares',
	extra_conf => "cbllm.max_requests_per_session = 0\ncbllm.max_requests_per_role = 0\n");
$node->safe_psql('postgres', join '', map { "CREATE ROLE r$_ LOGIN;\n" } 1 .. 5);

# A session of $role holding $n open streams (each its slot until the cursor closes).
sub hold
{
	my ($role, $n) = @_;
	my $h = $node->background_psql('postgres', on_error_stop => 0, extra_params => [ '-U', $role ]);
	$h->query_safe("SET cbllm.slot_wait_timeout = '300ms'");
	$h->query_safe('BEGIN');
	$h->query("DO \$\$ DECLARE c refcursor; p text; BEGIN FOR i IN 1..$n LOOP "
		  . "c := 'c' || i; OPEN c FOR SELECT llm_generate_stream('hold ' || i, 20); "
		  . "FETCH c INTO p; END LOOP; END \$\$");
	return $h;
}
my $held = sub {
	my ($role) = @_;
	$node->safe_psql('postgres', "SELECT count(*) FROM cbllm.requests WHERE role = '$role'::regrole");
};

# ---- (1) slots
{
	my @s;
	push @s, hold('r1', 8), hold('r1', 8);
	is($s[0]->{stderr} . $s[1]->{stderr}, '', 'two sessions of r1 open 8 streams each');
	my $third = hold('r1', 1);
	like($third->{stderr}, qr/too many cbllm requests for role "r1"/,
		'a third session of r1 is refused: a role holds at most a quarter of the 64 slots');
	is($held->('r1'), '16', 'r1 holds 16 slots');
	push @s, $third, hold('r2', 16), hold('r3', 16);
	is($held->('r2') + $held->('r3'), 32, 'r2 and r3 take their 16 each: three roles hold 48 of 64');
	my $fourth = hold('r4', 16);
	like($fourth->{stderr}, qr/the other 8 are reserved for superusers \(cbllm.superuser_reserved_requests\)/,
		'r4 is refused once only the 8 reserved slots are free, with the reason');
	$fourth->quit;
	$fourth = hold('r4', 8);
	is($fourth->{stderr}, '', 'r4 can hold the 8 slots before the reserved ones');
	push @s, $fourth;
	my ($rc, $out, $err) = $node->psql('postgres',
		"SET cbllm.slot_wait_timeout = '300ms'; SELECT llm_generate('plain', 2) IS NOT NULL",
		connstr => $node->connstr('postgres') . ' user=r5');
	like($err, qr/reserved for superusers/, 'a fifth role is refused while only the reserved slots are free');
	is($node->safe_psql('postgres', "SELECT llm_generate('the superuser', 2) IS NOT NULL"), 't',
		'a superuser is still served');
	$_->quit for @s;
	ok(CbllmTest::wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM cbllm.requests') eq '0' }, 20),
		'every slot is free once the sessions end');
}

# ---- (2) priorities
{
	$node->safe_psql('postgres', 'ALTER ROLE r1 SET cbllm.max_priority = 0');
	my $as_r1 = $node->connstr('postgres') . ' user=r1';
	my ($rc, $out, $err) = $node->psql('postgres', "SELECT llm_generate('x', 2, priority => 1000)",
		connstr => $as_r1);
	like($err, qr/priority 1000 is above the highest this role may ask for, 0/,
		'a role capped at priority 0 is refused priority 1000, with the reason');
	($rc, $out, $err) = $node->psql('postgres',
		"SELECT llm_generate('x', 2, priority => 0) IS NOT NULL AND llm_generate('x', 2, priority => -5) IS NOT NULL",
		connstr => $as_r1);
	is($out, 't', 'it may ask for priority 0 or lower');
	($rc, $out, $err) = $node->psql('postgres', 'SET cbllm.max_priority = 1000', connstr => $as_r1);
	like($err, qr/permission denied to set parameter "cbllm.max_priority"/, 'the role cannot raise its cap');
	($rc, $out, $err) = $node->psql('postgres',
		"SELECT count(*) FROM (SELECT cbllm.enrich_check_options(NULL, 4, 0, 1, 0, NULL, NULL, 5, NULL, NULL, NULL)) s",
		connstr => $as_r1);
	like($err, qr/priority 5 is above/, 'an enrich job of the role checks the cap before its first row');
	is($node->safe_psql('postgres', "SELECT llm_generate('x', 2, priority => 1000) IS NOT NULL"), 't',
		'a superuser without a cap asks for any priority');
}
$node->stop;

# ---- (3) running sequences, on the slow model: a flood of 16 long requests
# (8 run, 8 wait) and another role's short question
{
	my $slow = CbllmTest::new_deep_node('shares_slow',
		extra_conf => "cbllm.max_num_seqs = 8\ncbllm.kv_cache_size = '512MB'\n"
		  . "cbllm.max_requests_per_role = 32\n");
	$slow->safe_psql('postgres', 'CREATE ROLE flood LOGIN; CREATE ROLE asker LOGIN');
	my $config = decode_json(slurp_file(CbllmTest::model_dir() . '/config.json'));
	my $eos = ref $config->{eos_token_id} ? $config->{eos_token_id}[0] : $config->{eos_token_id};
	my $flood_sql = "SELECT count(*) FROM unnest(llm_generate("
	  . "(SELECT array_agg('flood ' || i) FROM generate_series(1, 16) i), 160, temperature => 0.8, "
	  . "seed => 1, logit_bias => '{\"$eos\": -100}')) t WHERE length(t) > 0";
	my $flood = CbllmTest::start_psql($slow, $flood_sql,
		env => { PGUSER => 'flood' }, timeout => 600);
	my $live = sub {
		$slow->safe_psql('postgres', "SELECT count(*) FROM cbllm.requests WHERE role = 'flood'::regrole");
	};
	my $decoding = sub {
		$slow->safe_psql('postgres',
			"SELECT count(*) FROM cbllm.requests WHERE role = 'flood'::regrole AND state = 'decode'");
	};
	ok(CbllmTest::wait_until(sub { $live->() eq '16' && $decoding->() eq '8' }, 60),
		'the flood holds all 8 running sequences and queues its other 8');
	my $t0 = time;
	my ($rc, $out, $err) = $slow->psql('postgres',
		"SELECT length(llm_generate('a short question', 4, temperature => 0)) > 0",
		connstr => $slow->connstr('postgres') . ' user=asker');
	my $el = time - $t0;
	my $after = $live->();
	is($out, 't', "the other role's 4-token question completes ($err)");
	is($after, '16', sprintf('... in %.2f s, before any request of the flood ended', $el));
	my ($frc, $fout, $ferr) = CbllmTest::finish_psql($flood);
	is($fout, '16', "the flood then completes, all 16 texts ($ferr)");
	$slow->stop;
}

done_testing();
