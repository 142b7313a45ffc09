
# Copyright (c) cbllm contributors
#
# A batch chat job through cbllm.enrich with messages_sql, on a model with a
# chat template (CBLLM_TEST_CHAT_MODEL: a generated Qwen3-layout model with
# the real Qwen3 tokenizer and chat template):
#  (1) 300 rows in chunks of 64: every row gets the same text llm_chat gives
#      for its messages alone (greedy), and a trigger's audit table shows one
#      committed UPDATE per row;
#  (2) rows whose messages are bad (content a number, not an array, NULL)
#      are recorded in cbllm.enrich_errors with the element named, and the
#      other rows are done;
#  (3) template_kwargs reach the template: with enable_thinking false the
#      Qwen3 template writes an empty think block, and the job's text equals
#      llm_chat's with the same template_kwargs;
#  (4) prompt_sql and messages_sql together, or template_kwargs without
#      messages_sql, are refused before any row is read.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $model = $ENV{CBLLM_TEST_CHAT_MODEL};
BAIL_OUT('CBLLM_TEST_CHAT_MODEL is not set (run through test/run-pg-tests)')
  unless defined $model && -d $model;

my $N_ROWS = 300;
my $MESSAGES = q{jsonb_build_array(
    jsonb_build_object('role', 'system', 'content', 'Summarise in five words.'),
    jsonb_build_object('role', 'user', 'content', body))};

my $node = CbllmTest::new_node('chat', model => $model,
	extra_conf => "cbllm.max_queued_requests = 128\ncbllm.max_model_len = 256\n");

$node->safe_psql('postgres', qq{
CREATE TABLE docs (id int PRIMARY KEY, body text, summary text);
INSERT INTO docs SELECT i, 'document number ' || i || ' about ' || md5(i::text) FROM generate_series(1, $N_ROWS) i;
CREATE TABLE audit (id int, summary text);
CREATE FUNCTION audit_row() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN INSERT INTO audit VALUES (NEW.id, NEW.summary); RETURN NEW; END \$\$;
CREATE TRIGGER docs_audit AFTER UPDATE ON docs FOR EACH ROW EXECUTE FUNCTION audit_row();
});

# (1) the job, then each row against llm_chat of its own messages
my ($rc, $out, $err) = $node->psql('postgres',
	"CALL cbllm.enrich('docs', 'id', NULL, 'summary', chunk_size => 64, max_tokens => 6, "
	  . "temperature => 0, messages_sql => \$\$$MESSAGES\$\$)");
is($rc, 0, 'a messages_sql job completes') or diag($err);
is($node->safe_psql('postgres', 'SELECT count(*) FROM docs WHERE summary IS NULL'),
	0, 'every row is filled');
is( $node->safe_psql(
		'postgres', qq{
SELECT count(*) FROM docs d
WHERE d.summary IS DISTINCT FROM llm_chat($MESSAGES, max_tokens => 6, temperature => 0)}),
	0,
	'every row holds what llm_chat gives for its messages');
is( $node->safe_psql(
		'postgres', 'SELECT count(*) FROM (SELECT id FROM audit GROUP BY id HAVING count(*) <> 1) x'),
	0,
	'the audit shows exactly one committed UPDATE per row');
is($node->safe_psql('postgres', 'SELECT count(DISTINCT id) FROM audit'), $N_ROWS,
	'the audit has every row');
isnt(
	$node->safe_psql('postgres',
		"SELECT llm_apply_chat_template($MESSAGES) FROM docs WHERE id = 1"),
	$node->safe_psql('postgres', "SELECT body FROM docs WHERE id = 1"),
	'the template wraps the messages (the prompt is not the bare body)');

# (2) bad messages are the row's error, named by element
$node->safe_psql('postgres', q{
CREATE TABLE bad (id int PRIMARY KEY, msgs jsonb, summary text);
INSERT INTO bad VALUES
  (1, '[{"role": "user", "content": "fine"}]'),
  (2, '[{"role": "user", "content": "fine"}, {"role": "user", "content": 42}]'),
  (3, '{"role": "user"}'),
  (4, NULL),
  (5, '[{"role": "user", "content": "also fine"}]');
});
($rc, $out, $err) = $node->psql('postgres',
	"CALL cbllm.enrich('bad', 'id', NULL, 'summary', max_tokens => 4, temperature => 0, "
	  . "messages_sql => 'msgs')");
is($rc, 0, 'a job with bad rows completes') or diag($err);
is($node->safe_psql('postgres', 'SELECT string_agg(id::text, \',\' ORDER BY id) FROM bad WHERE summary IS NOT NULL'),
	'1,5', 'the good rows are done');
like(
	$node->safe_psql('postgres', "SELECT error FROM cbllm.enrich_errors WHERE tbl = 'bad'::regclass AND key_value = '2'"),
	qr/messages\[1\]\.content/,
	'content that is a number is recorded naming messages[1].content');
like(
	$node->safe_psql('postgres', "SELECT error FROM cbllm.enrich_errors WHERE tbl = 'bad'::regclass AND key_value = '3'"),
	qr/messages must be a JSON array/,
	'messages that are not an array are recorded as such');
like(
	$node->safe_psql('postgres', "SELECT error FROM cbllm.enrich_errors WHERE tbl = 'bad'::regclass AND key_value = '4'"),
	qr/NULL/, 'NULL messages are recorded');

# (3) template_kwargs pass through the job
$node->safe_psql('postgres', 'UPDATE docs SET summary = NULL WHERE id <= 20');
($rc, $out, $err) = $node->psql('postgres',
	"CALL cbllm.enrich('docs', 'id', NULL, 'summary', max_tokens => 6, temperature => 0, "
	  . "where_sql => 'id <= 20', messages_sql => \$\$$MESSAGES\$\$, "
	  . "template_kwargs => '{\"enable_thinking\": false}')");
is($rc, 0, 'a job with template_kwargs completes') or diag($err);
like(
	$node->safe_psql('postgres',
		"SELECT llm_apply_chat_template($MESSAGES, template_kwargs => '{\"enable_thinking\": false}') FROM docs WHERE id = 1"),
	qr/<think>\n\n<\/think>\n\n$/,
	'enable_thinking false makes the template write an empty think block');
is( $node->safe_psql(
		'postgres', qq{
SELECT count(*) FROM docs d WHERE id <= 20 AND
d.summary IS DISTINCT FROM llm_chat($MESSAGES, max_tokens => 6, temperature => 0,
                                    template_kwargs => '{"enable_thinking": false}')}),
	0,
	'the rows hold what llm_chat gives with the same template_kwargs');

# (4) the arguments are checked before any row is read
($rc, $out, $err) = $node->psql('postgres',
	"CALL cbllm.enrich('docs', 'id', 'body', 'summary', messages_sql => 'jsonb_build_array()')");
like($err, qr/give exactly one of prompt_sql and messages_sql/, 'prompt_sql with messages_sql is refused');
($rc, $out, $err) = $node->psql('postgres',
	"CALL cbllm.enrich('docs', 'id', 'body', 'summary', template_kwargs => '{}')");
like($err, qr/template_kwargs needs messages_sql/, 'template_kwargs without messages_sql is refused');

$node->stop;
done_testing();
