
# Copyright (c) cbllm contributors
#
# GGUF files and quantized weights through SQL (CBLLM_TEST_GGUF_MODEL: the
# test checkpoint converted to a Q8_0 GGUF file by test/tools/hf_to_gguf.py,
# its tokenizer in the file's tokenizer.ggml.* keys):
#  (1) cbllm.model naming the .gguf file itself: the engine becomes ready,
#      cbllm.engine shows the Q8_0 matrices, and llm_generate gives text;
#  (2) the checkpoint loaded with cbllm.weight_format = q8_0 holds the same
#      bytes (the file's quantizer is the engine's algorithm), so greedy
#      llm_generate gives the same text as the file, token for token;
#  (3) a cbllm.weight_format the server does not know is logged as invalid at
#      start and the default (auto) applies.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $gguf = $ENV{CBLLM_TEST_GGUF_MODEL};
BAIL_OUT('CBLLM_TEST_GGUF_MODEL is not set (run through test/run-pg-tests)')
  unless defined $gguf && -f $gguf;

my @prompts = ('The quick brown fox', 'hello world', 'a b c d e f');
my $q = join(' UNION ALL ',
	map { "SELECT $_ AS i, llm_generate('$prompts[$_]', 12, temperature => 0) AS t" }
	  0 .. $#prompts);

# (1) the file named directly
my $file = CbllmTest::new_node('gguf', model => $gguf);
like(
	$file->safe_psql('postgres', 'SELECT weight_types FROM cbllm.engine'),
	qr/Q8_0 \d+/, 'cbllm.engine shows the GGUF file\'s Q8_0 matrices');
my $from_file = $file->safe_psql('postgres', "$q ORDER BY i");
ok(length($from_file) > 3 * 2, 'llm_generate runs on the GGUF file') or diag($from_file);
$file->stop;

# (2) the checkpoint quantized at load
my $hf = CbllmTest::new_node('hf_q8',
	extra_conf => "cbllm.weight_format = 'q8_0'\n");
like(
	$hf->safe_psql('postgres', 'SELECT weight_types FROM cbllm.engine'),
	qr/Q8_0 \d+/, 'cbllm.weight_format = q8_0 quantizes the checkpoint\'s matrices at load');
is($hf->safe_psql('postgres', "$q ORDER BY i"),
	$from_file, 'the checkpoint as q8_0 generates what the GGUF file does, greedy');
$hf->stop;

# (3) an unknown format is the server's error, not the engine's
my $bad = PostgreSQL::Test::Cluster->new('bad_format');
$bad->init;
$bad->append_conf('postgresql.conf',
	CbllmTest::base_conf() . "cbllm.weight_format = 'int3'\n");
$bad->start;
like(slurp_file($bad->logfile), qr/invalid value for parameter "cbllm.weight_format"/,
	'a server given cbllm.weight_format = int3 logs the parameter as invalid');
is($bad->safe_psql('postgres', 'SHOW cbllm.weight_format'),
	'auto', 'and keeps the default, auto (PostgreSQL\'s rule for a library\'s setting)');
$bad->stop;

done_testing();
