
# Copyright (c) cbllm contributors
#
# When the engine cannot serve, calls fail at once with an error that says
# why and what to do:
#  (a) cbllm not in shared_preload_libraries: CREATE EXTENSION still works,
#      calls fail with "cbllm is not loaded" and a hint naming
#      shared_preload_libraries;
#  (b) a broken model directory (a truncated model.safetensors, a missing
#      config.json): cbllm_status() says 'failed' with the loader's message
#      as the reason, and calls fail with "the cbllm engine failed to load
#      its model" with that message as DETAIL;
#  (c) an empty cbllm.model: state 'no model', calls fail with "no model is
#      configured";
#  (d) a model that takes seconds to load (random weights for a ~0.7B
#      geometry, cbllm.load_format = dummy): a call with a short
#      cbllm.load_timeout fails with "the cbllm engine is still loading" and
#      a hint naming cbllm.load_timeout, while cbllm_status() says
#      'loading'; once loaded, the same call works.
# (a) has a cluster of its own; one cluster goes through (b) and (c),
# restarted with each configuration.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use File::Copy qw(copy);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $CALL = "SELECT llm_generate('hello', 8)";

# Run $sql expecting an error; returns (stderr, seconds taken).
sub fails
{
	my ($node, $sql, $name) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $t = time;
	my ($ret, $out, $err) = $node->psql('postgres', $sql, on_error_stop => 1);
	my $el = time - $t;
	isnt($ret, 0, "$name: the call fails");
	return ($err, $el);
}

# Restart $node with cbllm.model = $model; wait until the engine has settled.
sub restart_with_model
{
	my ($node, $model) = @_;
	$node->append_conf('postgresql.conf', "shared_preload_libraries = 'cbllm'\n"
		  . "cbllm.model = '$model'\n");
	$node->restart;
	return CbllmTest::wait_until(
		sub {
			my $s = $node->safe_psql('postgres', 'SELECT state FROM cbllm_status()');
			return $s ne 'starting' && $s ne 'loading';
		},
		60, 0.1);
}

# ---- (a) no shared_preload_libraries: a cluster of its own
{
	my $np = CbllmTest::new_node('nopreload', no_preload => 1, no_create => 1);
	my ($ret, $out, $err) = $np->psql('postgres', 'CREATE EXTENSION cbllm');
	note("not preloaded: CREATE EXTENSION: $err") if $ret;
	my %err;
	my $slowest = 0;
	for my $c (
		[ generate => $CALL ],
		[ array => "SELECT llm_generate(ARRAY['a', 'b'], 8)" ],
		[ stream => "SELECT * FROM llm_generate_stream('hello', 8)" ],
		[ status => 'SELECT * FROM cbllm_status()' ])
	{
		my $t = time;
		my ($r, $o, $e) = $np->psql('postgres', $c->[1]);
		my $el = time - $t;
		$slowest = $el if $el > $slowest;
		isnt($r, 0, "not preloaded: the $c->[0] call fails");
		$err{ $c->[0] } = $e;
	}
	cmp_ok($slowest, '<', 10, 'not preloaded: every call fails at once');
	# CREATE EXTENSION loads the library to check its C functions; without
	# preloading, _PG_init defines nothing and every call explains
	is($ret, 0, 'not preloaded: CREATE EXTENSION cbllm still works');
	like($err{generate}, qr/ERROR:\s+cbllm is not loaded/,
		'not preloaded: llm_generate says "cbllm is not loaded"');
	like($err{generate}, qr/HINT:.*shared_preload_libraries/,
		'not preloaded: the hint mentions shared_preload_libraries');
	like($err{array}, qr/ERROR:\s+cbllm is not loaded/,
		'not preloaded: llm_generate(text[]) says "cbllm is not loaded"');
	like($err{stream}, qr/ERROR:\s+cbllm is not loaded/,
		'not preloaded: llm_generate_stream says "cbllm is not loaded"');
	like($err{status}, qr/ERROR:\s+cbllm is not loaded.*HINT:.*shared_preload_libraries/s,
		'not preloaded: cbllm_status() says "cbllm is not loaded", with the hint');
	# whatever the calls did, they must not have crashed the server
	# (restart_after_crash is off here, so a crash would stop it)
	($ret, $out) = $np->psql('postgres', 'SELECT 1');
	is($out, '1', 'not preloaded: the server is still up after the failed calls');
	$np->stop('fast', fail_ok => 1);
}

# ---- (b) broken model directories, copied from the test model into the
# node's own directory: model.safetensors truncated to half; no config.json
my $node = CbllmTest::new_node('load');
is(CbllmTest::status($node)->{state}, 'ready', 'with the test model the engine is ready');
my $dir = CbllmTest::node_dir($node);
my $src = CbllmTest::model_dir();
my %broken;
for my $case ('truncated', 'no_config')
{
	my $d = "$dir/model_$case";
	mkdir $d or die "mkdir $d: $!";
	opendir my $dh, $src or die "opendir $src: $!";
	for my $f (grep { -f "$src/$_" } readdir $dh)
	{
		copy("$src/$f", "$d/$f") or die "copy $f: $!";
	}
	closedir $dh;
	$broken{$case} = $d;
}
truncate("$broken{truncated}/model.safetensors", int((-s "$src/model.safetensors") / 2))
  or die "truncate: $!";
unlink("$broken{no_config}/config.json") or die "unlink: $!";

for my $case (
	[ 'truncated', qr/\Q$broken{truncated}\E\/model\.safetensors.*truncated/ ],
	[ 'no_config', qr/\Q$broken{no_config}\E\/config\.json/ ])
{
	my ($name, $reason_re) = @$case;
	ok(restart_with_model($node, $broken{$name}), "$name: the engine settles after the restart");
	my $st = CbllmTest::status($node);
	is($st->{state}, 'failed', "$name: cbllm_status().state is 'failed'");
	like($st->{reason}, $reason_re, "$name: the reason is the loader's message naming the file");
	note("$name: reason: $st->{reason}");
	is($st->{model}, $broken{$name}, "$name: cbllm_status().model names the directory");
	like($st->{worker_pid}, qr/^\d+$/, "$name: the worker stays up (to answer calls)");

	my ($err, $el) = fails($node, $CALL, "$name: llm_generate");
	like($err, qr/ERROR:\s+the cbllm engine failed to load its model/,
		"$name: llm_generate says \"the cbllm engine failed to load its model\"");
	like($err, qr/DETAIL:\s+\Q$st->{reason}\E/,
		"$name: the DETAIL is the loader's message");
	cmp_ok($el, '<', 10, "$name: the call fails at once");

	($err) = fails($node, "SELECT llm_generate(ARRAY['a', 'b'], 8)", "$name: llm_generate(text[])");
	like($err, qr/ERROR:\s+the cbllm engine failed to load its model/,
		"$name: the array form fails the same way");
	($err) = fails($node, "SELECT * FROM llm_generate_stream('hello', 8)",
		"$name: llm_generate_stream");
	like($err, qr/ERROR:\s+the cbllm engine failed to load its model/,
		"$name: the stream fails the same way");
}

# ---- (c) an empty cbllm.model
ok(restart_with_model($node, ''), 'no model: the engine settles after the restart');
{
	my $st = CbllmTest::status($node);
	is($st->{state}, 'no model', "no model: cbllm_status().state is 'no model'");
	like($st->{worker_pid}, qr/^\d+$/, 'no model: the worker is up');
	my ($err, $el) = fails($node, $CALL, 'no model: llm_generate');
	like($err, qr/ERROR:\s+no model is configured/, 'no model: llm_generate says "no model is configured"');
	like($err, qr/HINT:.*cbllm\.model/, 'no model: the hint names cbllm.model');
	cmp_ok($el, '<', 10, 'no model: the call fails at once');
}

# ---- and a good model again: the same cluster serves
ok(restart_with_model($node, $src), 'good model: the engine settles after the restart');
is(CbllmTest::status($node)->{state}, 'ready', "good model: cbllm_status().state is 'ready'");
is($node->safe_psql('postgres', "SELECT length(llm_generate('hello', 8)) > 0"), 't',
	'good model: llm_generate works');

# ---- (d) still loading: a config-only directory whose dummy weights take seconds to make
{
	my $d = "$dir/model_slow";
	mkdir $d or die "mkdir $d: $!";
	for my $f (qw(tokenizer.json tokenizer_config.json))
	{
		copy("$src/$f", "$d/$f") or die "copy $f: $!";
	}
	my $cfg = slurp_file("$src/config.json");
	$cfg =~ s/"hidden_size":\s*\d+/"hidden_size": 1024/;
	$cfg =~ s/"intermediate_size":\s*\d+/"intermediate_size": 4096/;
	$cfg =~ s/"num_hidden_layers":\s*\d+/"num_hidden_layers": 40/;
	open my $fh, '>', "$d/config.json" or die "open $d/config.json: $!";
	print $fh $cfg;
	close $fh;
	$node->append_conf('postgresql.conf',
		"cbllm.model = '$d'\ncbllm.load_format = 'dummy'\n");
	$node->restart;
	my $t = time;
	my ($ret, $out, $err) = $node->psql('postgres',
		"SET cbllm.load_timeout = '300ms'; $CALL", on_error_stop => 1);
	my $el = time - $t;
	my $state = CbllmTest::status($node)->{state};
	isnt($ret, 0, 'still loading: a call with a 300 ms load_timeout fails');
	like($err, qr/ERROR:\s+the cbllm engine is still loading/,
		'still loading: the call says "the cbllm engine is still loading"');
	like($err, qr/HINT:.*cbllm\.load_timeout/, 'still loading: the hint names cbllm.load_timeout');
	cmp_ok($el, '<', 10, 'still loading: the call gives up after about its load_timeout');
	note("still loading: state right after the call: $state");
	like($state, qr/^(starting|loading)$/, "still loading: cbllm_status().state says it is loading ($state)");
	ok( CbllmTest::wait_until(
			sub { $node->safe_psql('postgres', 'SELECT state FROM cbllm_status()') eq 'ready' },
			120, 0.2),
		'still loading: the engine becomes ready');
	is($node->safe_psql('postgres', "SELECT length(llm_generate('hello', 4)) >= 0"), 't',
		'still loading: once loaded, the same call works');
}

$node->stop;
done_testing();
