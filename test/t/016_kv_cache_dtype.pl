
# Copyright (c) cbllm contributors
#
# cbllm.kv_cache_dtype through SQL:
#  (1) with the same cbllm.kv_cache_size, f16 and bf16 caches hold twice
#      the blocks of an f32 one (cbllm_status().kv_blocks_total), and
#      llm_generate answers on each, several sessions at once;
#  (2) greedy output on an f16 cache is reproducible, and the same
#      prompts through the array form give the same texts;
#  (3) a value the server does not know is logged as invalid at start and
#      the default (auto) applies.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my @prompts = ('The quick brown fox', 'hello world', 'a b c d e f');
my $q = join(' UNION ALL ',
	map { "SELECT $_ AS i, llm_generate('$prompts[$_]', 12, temperature => 0) AS t" }
	  0 .. $#prompts);

my %blocks;
for my $dt ('f32', 'f16', 'bf16')
{
	my $node = CbllmTest::new_node("kv_$dt",
		extra_conf => "cbllm.kv_cache_size = '4MB'\ncbllm.kv_cache_dtype = '$dt'\n");
	is($node->safe_psql('postgres', 'SHOW cbllm.kv_cache_dtype'), $dt, "SHOW cbllm.kv_cache_dtype is $dt");
	$blocks{$dt} = $node->safe_psql('postgres', 'SELECT kv_blocks_total FROM cbllm_status()');
	my $texts = $node->safe_psql('postgres', "$q ORDER BY i");
	my @rows = split /\n/, $texts;
	is(scalar(@rows), 3, "$dt cache: llm_generate answers three prompts") or diag($texts);
	if ($dt eq 'f16')
	{
		is($node->safe_psql('postgres', "$q ORDER BY i"), $texts,
			'f16 cache: greedy output is reproducible');
		my $arr = $node->safe_psql('postgres',
			"SELECT string_agg(o, '|' ORDER BY n) FROM unnest(llm_generate(ARRAY['"
			  . join("','", @prompts) . "'], 12, temperature => 0)) WITH ORDINALITY AS a(o, n)");
		my $single = join('|', map { (split /\|/, $_, 2)[1] } @rows);
		is($arr, $single, 'f16 cache: the array form gives each prompt the same text as alone');
	}
	$node->stop;
}
ok($blocks{f32} > 0, "an f32 cache of 4MB holds $blocks{f32} blocks");
is($blocks{f16}, 2 * $blocks{f32}, "the same 4MB holds twice the blocks as f16 ($blocks{f16})");
is($blocks{bf16}, 2 * $blocks{f32}, "and as bf16 ($blocks{bf16})");

my $bad = PostgreSQL::Test::Cluster->new('bad_kv_dtype');
$bad->init;
$bad->append_conf('postgresql.conf',
	CbllmTest::base_conf() . "cbllm.kv_cache_dtype = 'f8'\n");
$bad->start;
like(slurp_file($bad->logfile), qr/invalid value for parameter "cbllm.kv_cache_dtype"/,
	'a server given cbllm.kv_cache_dtype = f8 logs the parameter as invalid');
is($bad->safe_psql('postgres', 'SHOW cbllm.kv_cache_dtype'),
	'auto', 'and keeps the default, auto');
$bad->stop;

done_testing();
