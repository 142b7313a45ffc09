
# Copyright (c) cbllm contributors
#
# CbllmTest: helpers shared by the TAP tests in test/t/ (not a test itself).
#
#   my $node = CbllmTest::new_node('main', extra_conf => "...");
#   my $st = CbllmTest::status($node);          # cbllm_status() as a hash
#   CbllmTest::wait_until(sub { ... }, 30);     # bounded poll, returns elapsed s or undef
#   CbllmTest::deep_model($src, $dst, 256);     # a slower copy of the test model
#
# Every wait here is bounded: PostgreSQL::Test::Utils::timeout_default is
# lowered to 60 s, which bounds poll_query_until and background_psql too.
package CbllmTest;

use strict;
use warnings;

use File::Copy qw(copy);
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

$PostgreSQL::Test::Utils::timeout_default = 60;

our @STATUS_COLUMNS = qw(state reason model device cpu_isa kv_blocks_total
  kv_blocks_used requests_running requests_waiting tokens_prompt
  tokens_generated steps mean_batch_size preemptions worker_pid max_model_len);

# The test model directory from the runner.
sub model_dir
{
	my $m = $ENV{CBLLM_TEST_MODEL};
	BAIL_OUT('CBLLM_TEST_MODEL is not set (run through test/run-pg-tests)')
	  unless defined $m && -d $m;
	return $m;
}

# The standard configuration lines (model defaults to CBLLM_TEST_MODEL).
sub base_conf
{
	my (%o) = @_;
	my $model = exists $o{model} ? $o{model} : model_dir();
	my $conf = '';
	$conf .= "shared_preload_libraries = 'cbllm'\n" unless $o{no_preload};
	$conf .= "cbllm.model = '$model'\n";
	$conf .= "cbllm.threads = 2\n";
	$conf .= "cbllm.max_model_len = 512\n";
	$conf .= "cbllm.max_queued_requests = 64\n";
	return $conf;
}

# A started cluster with cbllm configured and CREATE EXTENSION done.
# Options: model => DIR, no_preload => 1, extra_conf => TEXT,
# wait_ready => 0 (default 1: poll until cbllm_status().state = 'ready').
sub new_node
{
	my ($name, %o) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', base_conf(%o) . ($o{extra_conf} // ''));
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION cbllm');
	if ($o{wait_ready} // 1)
	{
		$node->poll_query_until('postgres',
			"SELECT state FROM cbllm_status()", 'ready')
		  or BAIL_OUT("node $name: the cbllm engine did not become ready");
	}
	return $node;
}

# cbllm_status() as a hash (column => value); dies if the query fails.
sub status
{
	my ($node) = @_;
	my $row = $node->safe_psql('postgres',
		"SELECT " . join(", ", map { "coalesce($_\::text, '')" } @STATUS_COLUMNS)
		  . " FROM cbllm_status()",
		extra_params => [ '-F', "\x1f" ]);
	my @v = split /\x1f/, $row, -1;
	my %h;
	@h{@STATUS_COLUMNS} = @v;
	return \%h;
}

# The same through an open BackgroundPsql session (cheap enough to poll fast).
sub status_bg
{
	my ($session) = @_;
	my $row = $session->query_safe(
		"SELECT " . join(" || chr(31) || ", map { "coalesce($_\::text, '')" } @STATUS_COLUMNS)
		  . " FROM cbllm_status()");
	my @v = split /\x1f/, $row, -1;
	my %h;
	@h{@STATUS_COLUMNS} = @v;
	return \%h;
}

# Call $cond every $interval seconds until it returns true or $timeout
# seconds pass.  Returns the elapsed seconds (true, at least 1e-6) or undef.
sub wait_until
{
	my ($cond, $timeout, $interval) = @_;
	$interval //= 0.02;
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

# True when the engine holds nothing: no running or waiting request and no KV block.
sub is_idle
{
	my ($st) = @_;
	return $st->{requests_running} eq '0'
	  && $st->{requests_waiting} eq '0'
	  && $st->{kv_blocks_used} eq '0';
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
	my (@parts, $off);
	$off = 0;
	my $json = JSON::PP->new->canonical(0);
	# keep insertion order: build the header text by hand
	my @hdr = ('"__metadata__":{"format":"pt"}');
	for my $t (@tensors)
	{
		my ($name, $dtype, $shape, $bytes) = @$t;
		my $end = $off + length($bytes);
		push @hdr, encode_json($name) . ':' . encode_json(
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

# A deeper copy of the (single-file) model in $src: $layers decoder layers,
# layer i being a copy of layer (i mod n) of the original.  Same tokenizer and
# widths, so it runs the same prompts, but each token costs about $layers/n
# times as much: long enough generations to cancel, kill or disconnect
# mid-way.
sub deep_model
{
	my ($src, $dst, $layers) = @_;
	mkdir $dst unless -d $dst;
	for my $f (qw(tokenizer.json tokenizer_config.json))
	{
		copy("$src/$f", "$dst/$f") or die "copy $f: $!";
	}
	my $cfg = do { local (@ARGV, $/) = ("$src/config.json"); <> };
	my $c = decode_json($cfg);
	my $n = $c->{num_hidden_layers};
	$c->{num_hidden_layers} = $layers;
	open my $cf, '>', "$dst/config.json" or die;
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
