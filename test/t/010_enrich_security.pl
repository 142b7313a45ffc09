
# Copyright (c) cbllm contributors
#
# cbllm.enrich between roles, each test run as the role concerned:
#  (1) cbllm.enrich_errors: a role sees and deletes only the errors of the
#      jobs it ran (an error's text quotes the failing value, so a role that
#      cannot read a table must not read its errors); nobody INSERTs or
#      UPDATEs by hand; cbllm.record_enrich_error refuses a role that could
#      not enrich the table (no forged rows); a role with UPDATE on one
#      column may run a job and has its own errors; the table's owner (a
#      superuser) sees and deletes everything;
#  (2) search_path: a role that can create functions (the extension's
#      names), operators, types and views in a schema the superuser puts
#      first on its search_path (before or after pg_catalog) gets none of
#      them run by the superuser's CALL of cbllm.enrich (the trap is shown to
#      be armed first), does not become superuser, and the job's results are
#      still the real llm_generate texts.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = CbllmTest::new_node('enrich_security');

# psql as $role (undef: the superuser the cluster was made by): (exit
# status, stdout, stderr).
sub as_role
{
	my ($role, $sql) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql('postgres', $sql,
		stdout => \$out, stderr => \$err,
		extra_params => defined $role ? [ '-U', $role ] : []);
	return ($rc, $out, $err);
}

# The output of $sql run as $role, or "failed: ERROR..." when it fails (so
# that the test comparing it fails, and the script goes on).
sub query_as
{
	my ($role, $sql) = @_;
	my ($rc, $out, $err) = as_role($role, $sql);
	return $rc == 0 ? $out : "failed: $err";
}

# Run $sql as $role for a test's set-up; dies if it fails.
sub run_as
{
	my ($role, $sql) = @_;
	my ($rc, $out, $err) = as_role($role, $sql);
	die "as $role: $err" if $rc != 0;
	return $out;
}

# ---------------------------------------------------------------------------
# (1) cbllm.enrich_errors between roles
$node->safe_psql(
	'postgres', q{
CREATE ROLE alice LOGIN;
CREATE ROLE "Bob Q" LOGIN;
CREATE ROLE mallory LOGIN;
CREATE ROLE carol LOGIN;
CREATE TABLE customers (id int PRIMARY KEY, card text NOT NULL, note text);
INSERT INTO customers VALUES (1, '12', NULL), (2, '4111-1111-1111-1111', NULL), (3, '34', NULL);
ALTER TABLE customers OWNER TO alice;
GRANT SELECT, UPDATE (note) ON customers TO carol;
CREATE TABLE bobs (id int PRIMARY KEY, qty text NOT NULL, note text);
INSERT INTO bobs VALUES (1, 'seven', NULL), (2, '8', NULL);
ALTER TABLE bobs OWNER TO "Bob Q";
});
my $CARD_PROMPT = q{$$'Customer ' || card::int$$};
my $LEAK = 'invalid input syntax for type integer: "4111-1111-1111-1111"';

my ($rc, $out, $err) = as_role('alice',
	"CALL cbllm.enrich('customers', 'id', $CARD_PROMPT, 'note', max_tokens => 4)");
is($rc, 0, 'alice enriches her table customers');
is(query_as(undef, 'SELECT role, key_value, error FROM cbllm.enrich_errors'),
	"alice|2|$LEAK",
	'the failing row is recorded with role alice, and its error quotes the card number');

($rc, $out, $err) = as_role('mallory', 'SELECT count(*) FROM customers');
like($err, qr/permission denied for table customers/, 'mallory cannot read customers');
is(query_as('mallory', 'SELECT count(*) FROM cbllm.enrich_errors'),
	0, "mallory sees none of alice's error rows");
is(query_as('mallory', q{SELECT count(*) FROM cbllm.enrich_errors WHERE error LIKE '%4111%'}),
	0, "mallory cannot read the card number through alice's error text");

($rc, $out, $err) = as_role('mallory',
	q{INSERT INTO cbllm.enrich_errors (tbl, key_value, sqlstate, error)
	  VALUES ('customers', '1', '00000', 'forged by mallory')});
like($err, qr/permission denied for table enrich_errors/,
	'mallory cannot INSERT a forged row into cbllm.enrich_errors');
($rc, $out, $err) = as_role('mallory',
	q{SELECT cbllm.record_enrich_error('customers', '1', '00000', 'forged by mallory')});
like($err, qr/permission denied to record enrichment errors for table customers/,
	'mallory cannot record an error about customers, a table she cannot update');
($rc, $out, $err) = as_role('mallory', q{UPDATE cbllm.enrich_errors SET error = 'changed'});
like($err, qr/permission denied for table enrich_errors/, 'mallory cannot UPDATE cbllm.enrich_errors');
is( query_as('mallory',
		'WITH d AS (DELETE FROM cbllm.enrich_errors RETURNING 1) SELECT count(*) FROM d'),
	0, "mallory's DELETE of every row deletes none of alice's");
is(query_as(undef, q{SELECT count(*) FROM cbllm.enrich_errors WHERE error LIKE '%forged%'}),
	0, 'no forged row reached cbllm.enrich_errors');
is(query_as(undef, 'SELECT count(*) FROM cbllm.enrich_errors'),
	1, "alice's error row is still there");

($rc, $out, $err) = as_role('Bob Q',
	q{CALL cbllm.enrich('bobs', 'id', $$'Qty ' || qty::int$$, 'note', max_tokens => 4)});
is($rc, 0, '"Bob Q" (a mixed-case name with a space) enriches his table bobs');
is(query_as('Bob Q', 'SELECT tbl, key_value, error FROM cbllm.enrich_errors'),
	'bobs|1|invalid input syntax for type integer: "seven"',
	'"Bob Q" sees exactly his own error row');
is(query_as('alice', 'SELECT tbl, key_value FROM cbllm.enrich_errors'),
	'customers|2', 'alice sees exactly her own error row');

($rc, $out, $err) = as_role('carol',
	"CALL cbllm.enrich('customers', 'id', $CARD_PROMPT, 'note', max_tokens => 4)");
is($rc, 0, 'carol, with UPDATE on the column note only, runs a job on customers');
is(query_as('carol', 'SELECT tbl, key_value, error FROM cbllm.enrich_errors'),
	"customers|2|$LEAK", 'carol sees the error of her own job (she can read customers)');
is(query_as('alice', 'SELECT count(*) FROM cbllm.enrich_errors'),
	1, "alice does not see carol's error row");
is( query_as(undef,
		q{SELECT string_agg(role::text || ':' || key_value, ',' ORDER BY id) FROM cbllm.enrich_errors}),
	'alice:2,"Bob Q":1,carol:2',
	"the superuser (the table's owner) sees every role's rows");

is( query_as('alice',
		'WITH d AS (DELETE FROM cbllm.enrich_errors RETURNING key_value) '
		  . q{SELECT string_agg(key_value, ',') FROM d}),
	'2', 'alice deletes her own error row');
is( query_as(undef,
		q{SELECT string_agg(role::text, ',' ORDER BY id) FROM cbllm.enrich_errors}),
	'"Bob Q",carol', "alice's DELETE left the other roles' rows");
is(query_as(undef,
		'WITH d AS (DELETE FROM cbllm.enrich_errors RETURNING 1) SELECT count(*) FROM d'),
	2, "the table's owner deletes every role's rows");

# ---------------------------------------------------------------------------
# (2) a trap on the superuser's search_path
$node->safe_psql(
	'postgres', q{
CREATE ROLE attacker LOGIN;
GRANT CREATE ON DATABASE postgres TO attacker;
CREATE TABLE docs (id int PRIMARY KEY, body text NOT NULL, summary text);
INSERT INTO docs SELECT i, 'document ' || i, NULL FROM generate_series(1, 12) i;
});
run_as(
	'attacker', q{
CREATE SCHEMA evil;
GRANT USAGE ON SCHEMA evil TO PUBLIC;
CREATE TABLE evil.calls (what text, by_role name);
GRANT INSERT ON evil.calls TO PUBLIC;
-- logs the call, and makes the attacker superuser when a superuser runs it
CREATE FUNCTION evil.pwn(what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO evil.calls VALUES (what, current_user);
    BEGIN
        ALTER ROLE attacker SUPERUSER;
    EXCEPTION WHEN insufficient_privilege THEN
        NULL;
    END;
END $$;
-- the extension's functions, as the unqualified calls would find them
CREATE FUNCTION evil.llm_submit(prompt text, max_tokens integer DEFAULT 256,
                                temperature double precision DEFAULT 0,
                                top_p double precision DEFAULT 1, top_k integer DEFAULT 0,
                                seed bigint DEFAULT NULL, stop text[] DEFAULT NULL,
                                priority integer DEFAULT 0, transaction_scoped boolean DEFAULT false)
RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN PERFORM evil.pwn('llm_submit'); RETURN NULL; END $$;
CREATE FUNCTION evil.llm_result(id bigint, wait boolean DEFAULT true)
RETURNS text LANGUAGE plpgsql AS $$ BEGIN PERFORM evil.pwn('llm_result'); RETURN NULL; END $$;
CREATE FUNCTION evil.cbllm_status(OUT tokens_generated bigint)
LANGUAGE plpgsql AS $$ BEGIN PERFORM evil.pwn('cbllm_status'); tokens_generated := 0; END $$;

-- for a search_path that puts pg_catalog after them: an operator and a
-- catalog view; a type
CREATE SCHEMA evil2;
GRANT USAGE ON SCHEMA evil2 TO PUBLIC;
CREATE FUNCTION evil2.text_eq(a pg_catalog.text, b pg_catalog.text) RETURNS boolean LANGUAGE plpgsql
AS $$ BEGIN PERFORM evil.pwn('operator ='); RETURN a OPERATOR(pg_catalog.=) b; END $$;
CREATE OPERATOR evil2.= (LEFTARG = pg_catalog.text, RIGHTARG = pg_catalog.text,
                         FUNCTION = evil2.text_eq);
CREATE FUNCTION evil2.spy() RETURNS boolean LANGUAGE plpgsql
AS $$ BEGIN PERFORM evil.pwn('pg_attribute'); RETURN true; END $$;
CREATE VIEW evil2.pg_attribute AS
SELECT attrelid, attname, attnum, attisdropped, atttypid, atttypmod
FROM pg_catalog.pg_attribute WHERE evil2.spy();
GRANT SELECT ON evil2.pg_attribute TO PUBLIC;
CREATE SCHEMA evil3;
GRANT USAGE ON SCHEMA evil3 TO PUBLIC;
CREATE FUNCTION evil3.text_ok(t pg_catalog.text) RETURNS boolean LANGUAGE plpgsql
AS $$ BEGIN PERFORM evil.pwn('type text'); RETURN true; END $$;
CREATE DOMAIN evil3.text AS pg_catalog.text CHECK (evil3.text_ok(VALUE));
});

# The trap is armed: on these search_paths unqualified names find the attacker's objects.
run_as('attacker', 'SET search_path = evil, public; SELECT llm_result(1)');
run_as('attacker',
	q{SET search_path = evil2, pg_catalog, public; SELECT count(*) FROM pg_attribute WHERE attrelid = 'docs'::pg_catalog.regclass});
run_as('attacker',
	q{SET search_path = evil2, pg_catalog, public; SELECT 'a'::pg_catalog.text = 'a'::pg_catalog.text});
run_as('attacker', q{SET search_path = evil3, pg_catalog, public; SELECT 'a'::text});
is( query_as('attacker', q{SELECT string_agg(DISTINCT what, ',') FROM evil.calls}),
	'llm_result,operator =,pg_attribute,type text',
	'the trap is armed: unqualified llm_result, =, pg_attribute and text find the attacker\'s objects');
run_as('attacker', 'TRUNCATE evil.calls');

my $attacker_super = q{SELECT rolsuper FROM pg_roles WHERE rolname = 'attacker'};
my $results_ok =
  q{SELECT count(*) FILTER (WHERE summary = llm_generate(body, 4)) || '/' || count(*) FROM docs};
for my $path ('evil, public', 'evil2, pg_catalog, public', 'evil3, pg_catalog, public')
{
	($rc, $out, $err) = ('', '', '');
	$rc = $node->psql(
		'postgres',
		"SET search_path = $path; CALL cbllm.enrich('public.docs', 'id', 'body', 'summary', max_tokens => 4)",
		stdout => \$out,
		stderr => \$err);
	is($rc, 0, "search_path $path: the superuser's CALL completes");
	is(query_as(undef, $attacker_super),
		'f', "search_path $path: the attacker did not become superuser");
	is(query_as(undef, 'SELECT count(*) FROM evil.calls'),
		0, "search_path $path: none of the attacker's functions, operators, types or views ran");
	is(query_as(undef, $results_ok),
		'12/12', "search_path $path: every row holds the real llm_generate text");
	# a fresh start for the next path, whatever happened
	$node->safe_psql('postgres',
		'ALTER ROLE attacker NOSUPERUSER; TRUNCATE evil.calls; UPDATE docs SET summary = NULL');
}

$node->stop;
done_testing();
