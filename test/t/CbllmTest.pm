
# Copyright (c) cbllm contributors
#
# CbllmTest: helpers shared by the TAP tests in test/t/ (a module, not a test).
#
#   my $node = CbllmTest::new_node('main', extra_conf => "...");
#   my $st = CbllmTest::status($node);           # cbllm_status() as a hash
#   CbllmTest::wait_until(sub { ... }, 30);      # bounded poll: elapsed s or undef
#   my $p = CbllmTest::start_psql($node, $sql);  # psql in the background
#   my ($rc, $out, $err) = CbllmTest::finish_psql($p);
#   CbllmTest::new_deep_node('slow');            # a cluster on a slower model
#
# Every wait here is bounded: PostgreSQL::Test::Utils::timeout_default is
# lowered to 60 s, which bounds poll_query_until and background_psql too.
package CbllmTest;

use strict;
use warnings;

use Cwd ();
use File::Copy qw(copy);
use IPC::Run ();
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

$PostgreSQL::Test::Utils::timeout_default = 60;

our @STATUS_COLUMNS = qw(state reason model device cpu_isa kv_blocks_total
  kv_blocks_used requests_running requests_waiting tokens_prompt
  tokens_generated steps mean_batch_size preemptions worker_pid max_model_len
  engine_pid engine_restarts);

# Layers of the slow model built by new_deep_node: about 5-10 ms per token on
# a 2-core machine, so that a full-length generation (~500 tokens) takes
# seconds and can be cancelled, killed or abandoned half-way.
our $DEEP_LAYERS = 256;

# The test model directory from the runner.
sub model_dir
{
	my $m = $ENV{CBLLM_TEST_MODEL};
	BAIL_OUT('CBLLM_TEST_MODEL is not set (run through test/run-pg-tests)')
	  unless defined $m && -d $m;
	return Cwd::abs_path($m);
}

# The standard configuration lines (model defaults to CBLLM_TEST_MODEL).
sub base_conf
{
	my (%o) = @_;
	my $model = defined $o{model} ? $o{model} : model_dir();
	my $conf = '';
	$conf .= "shared_preload_libraries = 'cbllm'\n" unless $o{no_preload};
	$conf .= "cbllm.model = '$model'\n";
	$conf .= "cbllm.threads = 2\n";
	$conf .= "cbllm.max_model_len = 512\n";
	$conf .= "cbllm.max_queued_requests = 64\n";
	# the tests run up to 20 requests from one session at once (the default
	# quotas are a quarter of the slots, 16, for a session and for a role)
	$conf .= "cbllm.max_requests_per_session = 32\n";
	$conf .= "cbllm.max_requests_per_role = 32\n";
	return $conf;
}

# A started cluster with cbllm configured and CREATE EXTENSION done.
# Options:
#   model => DIR, or CODE called with the (not yet initialised) node that
#            returns the model directory (e.g. a copy under node_dir($node));
#   no_preload => 1: no shared_preload_libraries;
#   extra_conf => TEXT appended after the standard lines;
#   no_create => 1: no CREATE EXTENSION (nor wait);
#   allows_streaming => 1: a primary that standbys can be made from;
#   wait_ready => 0 (default 1: poll until cbllm_status().state = 'ready').
sub new_node
{
	my ($name, %o) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	my $model = $o{model};
	$model = $model->($node) if ref $model eq 'CODE';
	$node->init(allows_streaming => $o{allows_streaming} // 0);
	$node->append_conf('postgresql.conf',
		base_conf(%o, model => $model) . ($o{extra_conf} // ''));
	$node->start;
	return $node if $o{no_create};
	$node->safe_psql('postgres', 'CREATE EXTENSION cbllm');
	if ($o{wait_ready} // 1)
	{
		$node->poll_query_until('postgres', "SELECT state FROM cbllm_status()", 'ready')
		  or BAIL_OUT("node $name: the cbllm engine did not become ready");
	}
	return $node;
}

# The absolute path of the node's base directory (the server runs in its
# data directory, so configured paths must be absolute).
sub node_dir
{
	my ($node) = @_;
	return Cwd::abs_path($node->basedir);
}

# A cluster running a deep copy of the test model (see deep_model) with a
# 128 MB KV cache (room for 4 full-length sequences of that model).
sub new_deep_node
{
	my ($name, %o) = @_;
	my $extra = "cbllm.kv_cache_size = '128MB'\n" . ($o{extra_conf} // '');
	return new_node(
		$name, %o,
		model => sub {
			return deep_model(model_dir(), node_dir($_[0]) . '/deep_model', $DEEP_LAYERS);
		},
		extra_conf => $extra);
}

# cbllm_status() as a hash (column => value, '' for NULL); dies on error.
sub status
{
	my ($node) = @_;
	my $row = $node->safe_psql('postgres',
		"SELECT " . join(" || chr(31) || ", map { "coalesce($_\::text, '')" } @STATUS_COLUMNS)
		  . " FROM cbllm_status()");
	my @v = split /\x1f/, $row, -1;
	my %h;
	@h{@STATUS_COLUMNS} = @v;
	return \%h;
}

# Call $cond every $interval seconds (default 0.05) until it returns true or
# $timeout seconds pass.  Returns the elapsed seconds (true) or undef.
sub wait_until
{
	my ($cond, $timeout, $interval) = @_;
	$interval //= 0.05;
	my $t0 = time;
	while (1)
	{
		my $ok = eval { $cond->() };
		my $el = time - $t0;
		return ($el > 0 ? $el : 1e-6) if $ok;
		return undef if $el > $timeout;
		usleep(int($interval * 1e6));
	}
}

# True when the engine holds nothing: no running or waiting request, no KV block.
sub is_idle
{
	my ($st) = @_;
	return $st->{requests_running} eq '0'
	  && $st->{requests_waiting} eq '0'
	  && $st->{kv_blocks_used} eq '0';
}

# Start psql running $sql (an array: one -c per element, each its own
# statement) in the background.  Options: app => application_name (to find
# the backend), env => { VAR => value } (e.g. PGOPTIONS), timeout => s
# (default 60).  Returns a handle for finish_psql.
sub start_psql
{
	my ($node, $sql, %o) = @_;
	my $p = { out => '', err => '' };
	my $conn = $node->connstr('postgres');
	$conn .= " application_name=$o{app}" if defined $o{app};
	my @cmd = ('psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $conn);
	push @cmd, map { ('-c', $_) } (ref $sql ? @$sql : ($sql));
	local %ENV = (%ENV, %{ $o{env} // {} });
	$p->{h} = IPC::Run::start(\@cmd, '<', \undef, '>', \$p->{out}, '2>', \$p->{err},
		IPC::Run::timeout($o{timeout} // 60));
	$p->{started} = time;
	return $p;
}

# Wait for a start_psql process to exit (bounded by its timeout).  Returns
# (exit status as in $?, stdout without its last newline, stderr, seconds since the
# start); the status is -1 on timeout (the process is then killed).
sub finish_psql
{
	my ($p) = @_;
	my $ok = eval { $p->{h}->finish; 1 };
	my $el = time - $p->{started};
	if (!$ok)
	{
		diag("psql did not finish: $@");
		eval { $p->{h}->kill_kill };
		return (-1, $p->{out}, $p->{err}, $el);
	}
	my $rc = $p->{h}->full_result(0);
	(my $out = $p->{out}) =~ s/\n\z//;
	return ($rc, $out, $p->{err}, $el);
}

# The pid of the backend whose application_name is $app (polls up to 30 s).
sub backend_pid
{
	my ($node, $app) = @_;
	my $pid = '';
	wait_until(
		sub {
			$pid = $node->safe_psql('postgres',
				"SELECT pid FROM pg_stat_activity WHERE application_name = '$app'");
			return $pid =~ /^\d+$/;
		},
		30, 0.05);
	return $pid =~ /^\d+$/ ? $pid : undef;
}

# Poll until the engine runs one request that has generated at least $min
# tokens beyond $tokens0 (the tokens_generated before it was submitted).
# Returns the status then, or undef after $timeout seconds.
sub wait_generating
{
	my ($node, $tokens0, $min, $timeout) = @_;
	my $st;
	wait_until(
		sub {
			$st = status($node);
			return $st->{requests_running} eq '1'
			  && $st->{tokens_generated} >= $tokens0 + $min;
		},
		$timeout // 30);
	return ($st && $st->{requests_running} eq '1'
		  && $st->{tokens_generated} >= $tokens0 + $min) ? $st : undef;
}

# Read a safetensors file: (header hash, data bytes).
sub read_safetensors
{
	my ($path) = @_;
	open my $fh, '<:raw', $path or die "open $path: $!";
	local $/;
	my $all = <$fh>;
	close $fh;
	my $n = unpack('Q<', substr($all, 0, 8));
	my $hdr = decode_json(substr($all, 8, $n));
	return ($hdr, substr($all, 8 + $n));
}

# Write a safetensors file from an ordered list of [name, dtype, shape, bytes].
sub write_safetensors
{
	my ($path, @tensors) = @_;
	my $off = 0;
	my @hdr = ('"__metadata__":{"format":"pt"}');
	for my $t (@tensors)
	{
		my ($name, $dtype, $shape, $bytes) = @$t;
		my $end = $off + length($bytes);
		push @hdr,
		  encode_json($name) . ':'
		  . JSON::PP->new->canonical->encode(
			{ dtype => $dtype, shape => $shape, data_offsets => [ $off, $end ] });
		$off = $end;
	}
	my $h = '{' . join(',', @hdr) . '}';
	$h .= ' ' x ((8 - length($h) % 8) % 8);
	open my $fh, '>:raw', $path or die "open $path: $!";
	print $fh pack('Q<', length($h)), $h;
	print $fh $_->[3] for @tensors;
	close $fh or die "close $path: $!";
	return;
}

# A deeper copy of the single-file model in $src, written to $dst: $layers
# decoder layers, layer i a copy of layer (i mod n) of the original.  Same
# tokenizer and widths, so the same prompts work, but every token costs
# about $layers/n times as much.
sub deep_model
{
	my ($src, $dst, $layers) = @_;
	mkdir $dst unless -d $dst;
	for my $f (qw(tokenizer.json tokenizer_config.json))
	{
		copy("$src/$f", "$dst/$f") or die "copy $src/$f: $!";
	}
	my $c = decode_json(slurp_file("$src/config.json"));
	my $n = $c->{num_hidden_layers};
	$c->{num_hidden_layers} = $layers;
	open my $cf, '>', "$dst/config.json" or die "open $dst/config.json: $!";
	print $cf JSON::PP->new->canonical->pretty->encode($c);
	close $cf;

	my ($hdr, $data) = read_safetensors("$src/model.safetensors");
	my $get = sub {
		my ($name) = @_;
		my $t = $hdr->{$name} or die "no tensor $name in $src";
		my ($a, $b) = @{ $t->{data_offsets} };
		return [ $name, $t->{dtype}, $t->{shape}, substr($data, $a, $b - $a) ];
	};
	my @per_layer = qw(input_layernorm.weight self_attn.q_proj.weight
	  self_attn.k_proj.weight self_attn.v_proj.weight self_attn.o_proj.weight
	  post_attention_layernorm.weight mlp.gate_proj.weight mlp.up_proj.weight
	  mlp.down_proj.weight);
	my @out = ($get->('model.embed_tokens.weight'));
	for my $i (0 .. $layers - 1)
	{
		for my $p (@per_layer)
		{
			my $t = $get->("model.layers." . ($i % $n) . ".$p");
			$t->[0] = "model.layers.$i.$p";
			push @out, $t;
		}
	}
	push @out, $get->('model.norm.weight');
	push @out, $get->('lm_head.weight') if exists $hdr->{'lm_head.weight'};
	write_safetensors("$dst/model.safetensors", @out);
	return $dst;
}

1;
