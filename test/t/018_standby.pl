
# Copyright (c) cbllm contributors
#
# cbllm on a hot standby (a streaming replica made with pg_basebackup):
#  (1) the standby's worker loads the model and serves llm_generate, its
#      array and stream forms, llm_completions and llm_submit/llm_result
#      (session and transaction scope) in read-only transactions, with the
#      primary's greedy output;
#  (2) cbllm.enrich, which writes, is refused on the standby with an error
#      that says why and where to run it, and likewise in a read-only
#      transaction on the primary;
#  (3) promotion keeps the standby's engine (the same worker, no reload),
#      and the promoted server then runs cbllm.enrich.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my @prompts = ('The quick brown fox', 'hello world', 'a b c d e f');
my $single = join(' UNION ALL ',
	map { "SELECT $_ AS i, llm_generate('$prompts[$_]', 10, temperature => 0) AS t" } 0 .. $#prompts)
  . ' ORDER BY i';
my $array =
	"SELECT n - 1, o FROM unnest(llm_generate(ARRAY['"
  . join("','", @prompts)
  . "'], 10, temperature => 0)) WITH ORDINALITY AS a(o, n) ORDER BY n";

my $primary = CbllmTest::new_node('primary', allows_streaming => 1);
$primary->safe_psql('postgres',
	"CREATE TABLE docs (id int PRIMARY KEY, body text, summary text);
	 INSERT INTO docs SELECT g, 'document ' || g, NULL FROM generate_series(1, 20) g;");
$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);

# (1) serving on the standby
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'the standby is in recovery');
ok($standby->poll_query_until('postgres', 'SELECT state FROM cbllm_status()', 'ready'),
	"the standby's engine loads the model");
my $want = $primary->safe_psql('postgres', $single);
is($standby->safe_psql('postgres', $single), $want,
	'llm_generate on the standby gives the primary\'s greedy texts');
is($standby->safe_psql('postgres', $array), $want, 'and so does the array form');
is( $standby->safe_psql(
		'postgres',
		"SELECT string_agg(t, '' ORDER BY n) FROM llm_generate_stream('$prompts[0]', 10, temperature => 0)
		 WITH ORDINALITY AS s(t, n)"),
	(split /\|/, (split /\n/, $want)[0], 2)[1],
	'the stream form\'s pieces make the same text');
is( $standby->safe_psql(
		'postgres',
		"SELECT count(*) FROM llm_completions('$prompts[1]', max_tokens => 4, temperature => 1, seed => 3, n => 3)"),
	'3', 'llm_completions gives its rows');
is( $standby->safe_psql(
		'postgres',
		"BEGIN READ ONLY;
		 SELECT llm_result(llm_submit('$prompts[2]', 10, temperature => 0)) = llm_result(
		        llm_submit('$prompts[2]', 10, temperature => 0, transaction_scoped => true));
		 COMMIT;"),
	't', 'llm_submit and llm_result work in a read-only transaction, either scope');

# (2) what writes is refused, with the reason and the place to run it
my ($rc, $out, $err) = $standby->psql('postgres',
	"CALL cbllm.enrich('docs', 'id', \$\$'Summarise: ' || body\$\$, 'summary', chunk_size => 5, max_tokens => 4)"
);
isnt($rc, 0, 'cbllm.enrich fails on the standby');
like($err, qr/cbllm\.enrich cannot run on a standby server: it writes its results to the table/,
	'with an error that says why');
like($err, qr/HINT:\s+Run it on the primary/, 'and a hint naming where to run it');
($rc, $out, $err) = $primary->psql('postgres',
	"SET default_transaction_read_only = on;
	 CALL cbllm.enrich('docs', 'id', \$\$'Summarise: ' || body\$\$, 'summary', chunk_size => 5, max_tokens => 4)"
);
like($err, qr/cbllm\.enrich cannot run in a read-only transaction/,
	'a read-only transaction on the primary refuses it the same way');
is($primary->safe_psql('postgres', 'SELECT count(summary) FROM docs'), '0', 'and nothing was written');

# (3) promotion keeps the engine
my $before = CbllmTest::status($standby);
$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'), 'the standby is promoted');
is($standby->safe_psql('postgres', $single), $want, 'and it goes on generating the same texts');
my $after = CbllmTest::status($standby);
is($after->{worker_pid}, $before->{worker_pid}, 'with the same cbllm worker');
is($after->{engine_pid}, $before->{engine_pid}, 'and the same engine process, not reloaded');
ok($after->{steps} > $before->{steps}, 'whose counters go on from before');
$standby->safe_psql('postgres',
	"CALL cbllm.enrich('docs', 'id', \$\$'Summarise: ' || body\$\$, 'summary', chunk_size => 5, max_tokens => 4)"
);
is($standby->safe_psql('postgres', 'SELECT count(summary) FROM docs'), '20',
	'the promoted server runs cbllm.enrich');

$standby->stop;
$primary->stop;
done_testing();
