
# Copyright (c) cbllm contributors
#
# Reproducible sampled jobs: a seeded, sampled (temperature 0.8)
# cbllm.enrich under a JSON schema gives every row the same document when
# rerun with another chunk size, and again while other sessions generate at
# the same time (the CPU engine's batch invariance and each request's own
# generator make this so); every document is valid under the schema.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $N_ROWS = 40;
my $SCHEMA = q{'{"type": "object", "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5}, "tag": {"type": "string", "maxLength": 12}}, "required": ["score", "tag"]}'};

my $node = CbllmTest::new_node('reproducible', extra_conf => "cbllm.max_queued_requests = 128\n");

$node->safe_psql('postgres',
	"CREATE TABLE items (id int PRIMARY KEY, body text, doc jsonb);
	 INSERT INTO items SELECT i, 'item number ' || i FROM generate_series(1, $N_ROWS) i;");

# One job over every row; the documents as a JSON text ordered by id.
sub run_job
{
	my ($chunk) = @_;
	$node->safe_psql('postgres', 'UPDATE items SET doc = NULL');
	$node->safe_psql('postgres',
		"SET client_min_messages = warning; CALL cbllm.enrich('items', 'id', \$\$'Rate: ' || body\$\$, "
		  . "'doc', chunk_size => $chunk, max_tokens => 64, temperature => 0.8, seed => 11, "
		  . "json_schema => $SCHEMA)");
	return $node->safe_psql('postgres',
		'SELECT string_agg(doc::text, E\'\n\' ORDER BY id) FROM items');
}

my $first = run_job(5);
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM items WHERE (doc->>'score')::int BETWEEN 1 AND 5 "
		  . "AND length(doc->>'tag') <= 12 AND doc ?& ARRAY['score', 'tag']"),
	$N_ROWS,
	"all $N_ROWS documents are valid under the schema");
is(run_job(13), $first, 'rerun with chunks of 13 instead of 5: the same document for every row');

# again while three other sessions generate sampled text all the while
my @noise = map {
	CbllmTest::start_psql($node,
		"SELECT count(llm_generate('noise $_ ' || i, 40, temperature => 1)) "
		  . "FROM generate_series(1, 20000) i", timeout => 600)
} 1 .. 3;
ok( $node->poll_query_until('postgres',
		'SELECT requests_running + requests_waiting > 0 FROM cbllm.engine', 't'),
	'other sessions are generating');
my $busy = run_job(7);
# each of them runs its 20000 requests one after another, so a moment may find none
# in the engine: what shows they were generating throughout is that none has ended
my $alive = grep { $_->{h}->pumpable } @noise;
is($alive, 3, 'the three sessions were still at their loops when the job ended')
  or diag(join("\n", map { $_->{err} } @noise));
is($busy, $first, 'rerun with chunks of 7 beside three generating sessions: the same documents');
$_->{h}->kill_kill for @noise;

$node->stop;
done_testing();
