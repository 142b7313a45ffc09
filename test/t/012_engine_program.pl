
# Copyright (c) cbllm contributors
#
# The engine program the supervisor runs:
#  (1) a cbllm.engine_program that cannot be run: the state is failed and
#      a call's error names the program;
#  (2) the CUDA backend inside the engine process, under PostgreSQL: the
#      engine program built against the CUDA emulator (every build has it)
#      with cbllm.device = 'cuda' serves generation and tokenization;
#  (3) a GPU memory budget with no room for the KV cache: the engine names
#      its own parameter and the call's hint names the PostgreSQL setting.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $emu = $ENV{CBLLM_EMU_ENGINE};
BAIL_OUT('CBLLM_EMU_ENGINE is not set (run through test/run-pg-tests)')
  unless defined $emu && -x $emu;

# ---- (1) a program that cannot be run
{
	my $node = CbllmTest::new_node('noprog',
		extra_conf => "cbllm.engine_program = '/nonexistent/cbllm-engine'\n", wait_ready => 0);
	ok($node->poll_query_until('postgres', 'SELECT state FROM cbllm_status()', 'failed'),
		'a missing engine program: the state is failed');
	my ($rc, $out, $err) = $node->psql('postgres', "SELECT llm_generate('hi', 4)");
	like($err, qr/failed to load its model.*DETAIL:.*\/nonexistent\/cbllm-engine.*cannot be run/s,
		"a call's error names the program ($err)");
	$node->stop;
}

# ---- (2) the emulated CUDA device inside the engine process
my $tokens_cpu;
{
	my $cpu = CbllmTest::new_node('cpuref');
	$tokens_cpu = $cpu->safe_psql('postgres', "SELECT llm_tokenize('hello world')");
	$cpu->stop;
}
{
	my $node = CbllmTest::new_node('emucuda',
		extra_conf => "cbllm.engine_program = '$emu'\ncbllm.device = 'cuda'\n"
		  . "cbllm.max_num_seqs = 8\ncbllm.max_num_batched_tokens = 256\n");
	is($node->safe_psql('postgres', 'SELECT device FROM cbllm_status()'), 'cuda',
		'the engine process runs the CUDA backend (on the emulated device)');
	my $text = $node->safe_psql('postgres', "SELECT llm_generate('hello world', 8)");
	ok(length($text) > 0, 'it generates');
	is($node->safe_psql('postgres', "SELECT llm_generate('hello world', 8)"), $text,
		'greedy generation on it is reproducible');
	is($node->safe_psql('postgres', "SELECT llm_tokenize('hello world')"), $tokens_cpu,
		'its tokenizer gives the ids the CPU engine gives');
	is($node->safe_psql('postgres',
			"SELECT array_length(llm_generate(ARRAY['a', 'b', 'c'], 4), 1)"), '3',
		'it batches an array of prompts');
	$node->stop;
}

# ---- (3) no room for the KV cache in the GPU memory budget
{
	local $ENV{CBLLM_EMU_DEVICE_MB} = '64';
	my $node = CbllmTest::new_node('nobudget',
		extra_conf => "cbllm.engine_program = '$emu'\ncbllm.device = 'cuda'\n"
		  . "cbllm.gpu_memory_utilization = 0.01\n", wait_ready => 0);
	ok($node->poll_query_until('postgres', 'SELECT state FROM cbllm_status()', 'failed'),
		'a budget with no room for the KV cache: the state is failed');
	my ($rc, $out, $err) = $node->psql('postgres', "SELECT llm_generate('hi', 4)");
	like($err, qr/DETAIL:.*gpu_memory_utilization/s, "the detail names the engine's parameter ($err)");
	like($err, qr/HINT:\s+Raise cbllm\.gpu_memory_utilization/, 'the hint names the PostgreSQL setting');
	$node->stop;
}

done_testing();
