
# Copyright (c) cbllm contributors
#
# The extension's SQL objects against hostile roles, and its data through
# pg_dump:
#  (1) as a class, nothing the extension's SQL and PL/pgSQL code runs can be
#      taken over through a search_path: every such function has its
#      search_path fixed to pg_catalog, pg_temp, and the one procedure
#      (cbllm.enrich, which commits and so cannot set one) names nothing
#      but schema-qualified functions, without operators;
#  (2) in a database with cbllm in public, a role with CREATE on public (as
#      every role had before PostgreSQL 15) plants look-alikes of every
#      built-in function and operator the extension's code uses, of
#      cbllm's own functions, and the exact exploit of a cardinality(text[])
#      that makes it superuser; the trap is shown to be armed, then a
#      superuser runs every form of cbllm.enrich (text, typed, constrained,
#      chat, fanned out to a peer through dblink) on three search_paths:
#      nothing planted runs, the role stays unprivileged, results are right;
#  (3) pg_dump and restore with rows in cbllm.enrich_errors: the next job
#      that records an error numbers it after the restored ones;
#  (4) the database's owner, not a superuser, dumps its own database (the
#      error table's row-level security does not stop it), and sees every
#      role's errors while another role sees only its own;
#  (5) cbllm in a schema of its own, as the README recommends: everything
#      works through search_path;
#  (6) smaller ones: options are checked before an enrich job reads a row;
#      an empty regex is refused like '()'; the per-engine view hides
#      prompt-token counts from roles that cbllm_status() hides them from;
#      cbllm.stats says since when it counts before any reset.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = CbllmTest::new_node('hardening');

# psql in $db as $role (undef: the bootstrap superuser): "failed: ERROR..." when it fails
sub query
{
	my ($db, $role, $sql) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql($db, $sql, stdout => \$out, stderr => \$err,
		extra_params => defined $role ? [ '-U', $role ] : []);
	return $rc == 0 ? $out : "failed: $err";
}

# ---------------------------------------------------------------------------
# (1) the class: fixed search_path, or a body that names only qualified functions
my $funcs = $node->safe_psql(
	'postgres', q{
SELECT p.oid::regprocedure || '|' || p.prokind::text || '|' || coalesce(array_to_string(p.proconfig, ';'), '')
FROM pg_depend d
JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
JOIN pg_language l ON l.oid = p.prolang
WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'cbllm')
  AND l.lanname IN ('sql', 'plpgsql')
ORDER BY 1});
my (@unset, @procs);
my $n_funcs = 0;
for my $line (split /\n/, $funcs)
{
	my ($sig, $kind, $config) = split /\|/, $line, 3;
	$n_funcs++;
	if ($kind eq 'p') { push @procs, $sig; next; }
	push @unset, $sig unless $config eq 'search_path=pg_catalog, pg_temp';
}
cmp_ok($n_funcs, '>=', 10, "the extension has $n_funcs functions and procedures in SQL or PL/pgSQL");
is(join(', ', @unset), '', 'every SQL and PL/pgSQL function runs with search_path = pg_catalog, pg_temp');
is(join(', ', @procs), 'cbllm.enrich(regclass,name,text,name,text,integer,integer,double precision,'
	  . 'double precision,integer,bigint,text[],integer,text,jsonb,jsonb,text,text[],text[])',
	'the only procedure is cbllm.enrich');

# The body of cbllm.enrich: comments and string literals stripped, every
# call must be of a schema-qualified function and no operator may appear.
my $body = $node->safe_psql('postgres',
	q{SELECT prosrc FROM pg_proc WHERE oid = 'cbllm.enrich'::regproc});
(my $code = $body) =~ s/--[^\n]*//g;
$code =~ s/'(?:[^']|'')*'//g;
my @calls = $code =~ /([A-Za-z_][\w.]*)\s*\(/g;
my @bad_calls = grep { !/^(cbllm|pg_catalog)\.\w+$/ } @calls;
cmp_ok(scalar(@calls), '>=', 4, 'the body of cbllm.enrich calls its helpers: ' . join(', ', @calls));
is(join(', ', @bad_calls), '', 'every call in the body of cbllm.enrich is schema-qualified');
(my $ops = $code) =~ s/:=//g;
my @bad_ops = $ops =~ /([-+*\/<>=~!@#%^&|`?]+)/g;
is(join(' ', @bad_ops), '', 'the body of cbllm.enrich uses no operator');

# ---------------------------------------------------------------------------
# (2) the trap, in a database of its own (it breaks unqualified calls there)
$node->safe_psql('postgres', q{
CREATE ROLE attacker LOGIN;
CREATE DATABASE trap;
});
$node->safe_psql(
	'trap', q{
CREATE EXTENSION cbllm;
CREATE EXTENSION dblink;
GRANT CREATE ON SCHEMA public TO attacker;
GRANT CREATE ON DATABASE trap TO attacker;
CREATE TABLE docs (id int PRIMARY KEY, body text NOT NULL, summary text, score int, label text);
INSERT INTO docs SELECT i, 'document ' || i, NULL, NULL, NULL FROM generate_series(1, 12) i;
});

# Look-alikes of what the extension's SQL uses, in schema $s: each logs its
# call (with the role it ran as) and tries to make the attacker superuser.
sub plant
{
	my ($s) = @_;
	my $pwn = "PERFORM evil_log.pwn";
	my @f = (
		[ 'cardinality(a text[])', 'integer', 'RETURN 0' ],
		[ 'cardinality(a boolean[])', 'integer', 'RETURN 0' ],
		[ 'array_position(a text[], b text)', 'integer', 'RETURN NULL' ],
		[ 'array_fill(a boolean, b integer[])', 'boolean[]', 'RETURN NULL' ],
		[ 'array_fill(a bigint, b integer[])', 'bigint[]', 'RETURN NULL' ],
		[ 'format(a text, b text)', 'text', 'RETURN a' ],
		[ 'format(a text, b regclass)', 'text', 'RETURN a' ],
		[ 'quote_ident(a text)', 'text', 'RETURN a' ],
		[ 'btrim(a text)', 'text', 'RETURN a' ],
		[ 'current_setting(a text)', 'text', q{RETURN 'public'} ],
		[ 'set_config(a text, b text, c boolean)', 'text', 'RETURN b' ],
		[ 'jsonb_typeof(a jsonb)', 'text', q{RETURN 'object'} ],
		[ 'jsonb_build_object(a text, b text, c text, d integer, e text, f integer)', 'jsonb',
			q{RETURN '{}'} ],
		[ 'clock_timestamp()', 'timestamptz', 'RETURN now()' ],
		[ 'round(a numeric, b integer)', 'numeric', 'RETURN a' ],
		[ 'pg_is_in_recovery()', 'boolean', 'RETURN false' ],
		[ 'count(a text)', 'bigint', 'RETURN 0' ],
		[ 'llm_submit(prompt text, max_tokens integer, temperature double precision, top_p double precision, '
			  . 'top_k integer, seed bigint, stop text[], priority integer, json_schema jsonb, regex text, '
			  . 'choices text[], transaction_scoped boolean)',
			'bigint', 'RETURN NULL' ],
		[ 'llm_submit_chat(messages jsonb, max_tokens integer, temperature double precision, '
			  . 'top_p double precision, top_k integer, seed bigint, stop text[], priority integer, '
			  . 'json_schema jsonb, regex text, choices text[], transaction_scoped boolean, '
			  . 'template_kwargs jsonb)',
			'bigint', 'RETURN NULL' ],
		[ 'llm_result(id bigint)', 'text', 'RETURN NULL' ],
		[ 'cbllm_status(x integer DEFAULT 0)', 'TABLE (tokens_generated bigint)',
			'RETURN QUERY SELECT 0::bigint' ],);
	my $sql = '';
	for my $f (@f)
	{
		my ($sig, $ret, $tail) = @$f;
		(my $name = $sig) =~ s/\(.*//;
		$sql .= "CREATE FUNCTION $s.$sig RETURNS $ret LANGUAGE plpgsql AS \$\$ BEGIN "
		  . "$pwn('$name'); $tail; END \$\$;\n";
	}
	for my $op ([ '>', 'integer', 'integer', 'gt' ], [ '=', 'text', 'text', 'eq' ],
		[ '<>', 'text', 'text', 'ne' ], [ '||', 'text', 'text', 'cat' ],
		[ '+', 'bigint', 'integer', 'plus' ], [ '=', 'integer', 'integer', 'ieq' ])
	{
		my ($o, $l, $r, $n) = @$op;
		my $res = $o eq '||' ? 'text' : $o eq '+' ? 'bigint' : 'boolean';
		my $val = $o eq '||' ? 'a OPERATOR(pg_catalog.||) b' : $o eq '+' ? 'a OPERATOR(pg_catalog.+) b'
		  : "a OPERATOR(pg_catalog.$o) b";
		$sql .= "CREATE FUNCTION $s.op_$n(a $l, b $r) RETURNS $res LANGUAGE plpgsql AS \$\$ BEGIN "
		  . "$pwn('operator $o'); RETURN $val; END \$\$;\n"
		  . "CREATE OPERATOR $s.$o (LEFTARG = $l, RIGHTARG = $r, FUNCTION = $s.op_$n);\n";
	}
	return $sql;
}

my $setup = q{
CREATE SCHEMA evil_log;
GRANT USAGE ON SCHEMA evil_log TO PUBLIC;
CREATE TABLE evil_log.calls (what text, by_role name);
GRANT INSERT ON evil_log.calls TO PUBLIC;
CREATE FUNCTION evil_log.pwn(what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO evil_log.calls VALUES (what, current_user);
    BEGIN
        ALTER ROLE attacker SUPERUSER;
    EXCEPTION WHEN insufficient_privilege THEN
        NULL;
    END;
END $$;
CREATE SCHEMA evil;
GRANT USAGE ON SCHEMA evil TO PUBLIC;
};
# First the exploit exactly as reported: one function in public
is( query('trap', 'attacker', $setup . q{
CREATE FUNCTION public.cardinality(text[]) RETURNS int LANGUAGE plpgsql
AS $$BEGIN PERFORM evil_log.pwn('cardinality'); RETURN 0; END$$;
}), '', 'the attacker creates public.cardinality(text[])');
query('trap', undef,
	q{CALL cbllm.enrich('public.docs', 'id', $$pg_catalog.concat('S: ', body)$$, 'summary', max_tokens => 4)});
is(query('trap', undef, q{SELECT rolsuper FROM pg_roles WHERE rolname = 'attacker'}), 'f',
	"a superuser's job on the default search_path does not make the attacker superuser");
is(query('trap', undef, q{SELECT count(*) FROM evil_log.calls}), '0', '... nor runs its function at all');
is(query('trap', undef, q{SELECT count(*) FILTER (WHERE summary IS NOT NULL) FROM public.docs}), '12',
	'... and the job did its work');
query('trap', 'attacker', 'DROP FUNCTION public.cardinality(text[])');

# Then look-alikes of everything
is(query('trap', 'attacker', plant('public') . plant('evil')), '',
	'the attacker plants look-alikes of functions and operators in public and in its own schema');

# The trap is armed: unqualified names on these paths find the attacker's objects.
query('trap', 'attacker', q{SELECT cardinality('{a}'::text[])});
query('trap', 'attacker', q{SET search_path = public, pg_catalog; SELECT 1 > 0, 'a'::text = 'a'});
query('trap', 'attacker', q{SET search_path = evil, pg_catalog; SELECT 'a'::text || 'b'::text});
is( join(',', sort split /\n/, query('trap', 'attacker', q{SELECT DISTINCT what FROM evil_log.calls})),
	'cardinality,operator =,operator >,operator ||',
	'the trap is armed: cardinality(text[]) and the operators are found before the built-in ones');
query('trap', 'attacker', 'TRUNCATE evil_log.calls');

my $peer = 'host=' . $node->host . ' port=' . $node->port . ' dbname=trap';
my @jobs = (
	[ 'text', q{CALL cbllm.enrich('public.docs', 'id', 'body', 'summary', max_tokens => 4)},
		q{SELECT count(*) FILTER (WHERE summary = public.llm_generate(body, 4)) FROM public.docs} ],
	[ 'integer column (implied json_schema)',
		q{CALL cbllm.enrich('public.docs', 'id', 'body', 'score', max_tokens => 8, where_sql => 'id < 7')},
		q{SELECT count(*) FILTER (WHERE score IS NOT NULL) + 6 FROM public.docs} ],
	[ 'choices', q{CALL cbllm.enrich('public.docs', 'id', 'body', 'label', choices => '{yes,no}')},
		q{SELECT count(*) FILTER (WHERE label IN ('yes', 'no')) FROM public.docs} ],
	[ 'chat form (every row fails: the model has no chat template)',
		q{CALL cbllm.enrich('public.docs', 'id', NULL, 'summary', max_tokens => 4,
		  messages_sql => $$pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object('role', 'user', 'content', body))$$,
		  template_kwargs => '{"enable_thinking": false}')},
		q{SELECT count(*) FROM cbllm.enrich_errors WHERE error LIKE '%chat template%'} ],
	[ 'fanned out to a peer',
		qq{CALL cbllm.enrich('public.docs', 'id', 'body', 'summary', max_tokens => 4, chunk_size => 6,
		  peers => ARRAY['$peer'])},
		q{SELECT count(*) FILTER (WHERE summary = public.llm_generate(body, 4)) FROM public.docs} ],);
for my $path ('"$user", public', 'public, pg_catalog', 'evil, pg_catalog, public')
{
	for my $job (@jobs)
	{
		my ($what, $call, $check) = @$job;
		$node->safe_psql('trap',
			'UPDATE public.docs SET summary = NULL, score = NULL, label = NULL; DELETE FROM cbllm.enrich_errors');
		my ($out, $err) = ('', '');
		my $r = $node->psql('trap', "SET search_path = $path; $call", stdout => \$out, stderr => \$err);
		is($r, 0, "search_path $path, $what: the superuser's CALL completes");
		is(query('trap', undef, $check), '12', "search_path $path, $what: every row got its real result");
		ok($err =~ /rows generated by each peer: \{[1-9]\d*\}/ && $err !~ /peer \d+ failed/,
			"search_path $path, $what: the peer generated rows and never failed")
		  if $what =~ /peer/;
	}
	is(query('trap', undef, q{SELECT string_agg(DISTINCT what, ',') FROM evil_log.calls}), '',
		"search_path $path: none of the attacker's functions or operators ran");
	is(query('trap', undef, q{SELECT rolsuper FROM pg_roles WHERE rolname = 'attacker'}), 'f',
		"search_path $path: the attacker is not superuser");
}

# ---------------------------------------------------------------------------
# (3) dump and restore with rows in cbllm.enrich_errors
$node->safe_psql('postgres', q{CREATE ROLE owner_role LOGIN; CREATE DATABASE appdb OWNER owner_role});
$node->safe_psql('appdb', 'CREATE EXTENSION cbllm');
query('appdb', 'owner_role', q{
CREATE TABLE items (id int PRIMARY KEY, body text, note text);
INSERT INTO items VALUES (1, 'one', NULL), (2, NULL, NULL), (3, 'three', NULL), (4, NULL, NULL);
CALL cbllm.enrich('items', 'id', 'body', 'note', max_tokens => 2);
});
my $errors = q{SELECT string_agg(id || ':' || key_value, ',' ORDER BY id) FROM cbllm.enrich_errors};
is(query('appdb', 'owner_role', $errors),
	'1:2,2:4', 'two rows with NULL prompts are recorded as errors 1 and 2');
my $dump = $node->basedir . '/appdb.sql';
my ($stdout, $stderr);
my $rc = IPC::Run::run([ 'pg_dump', '-d', $node->connstr('appdb'), '-U', 'owner_role', '-f', $dump ],
	'>', \$stdout, '2>', \$stderr);
ok($rc, "the database's owner, not a superuser, dumps its database ($stderr)");
$node->safe_psql('postgres', 'CREATE DATABASE restored OWNER owner_role');
$rc = IPC::Run::run([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('restored'), '-f', $dump ],
	'>', \$stdout, '2>', \$stderr);
ok($rc, "a superuser restores it ($stderr)");
is(query('restored', 'owner_role', $errors),
	'1:2,2:4', 'the restored database has the two error rows');
my $after = query('restored', 'owner_role', q{
INSERT INTO items VALUES (5, NULL, NULL);
CALL cbllm.enrich('items', 'id', 'body', 'note', where_sql => 'id = 5', max_tokens => 2);
SELECT string_agg(id || ':' || key_value, ',' ORDER BY id) FROM cbllm.enrich_errors;
});
is($after, '1:2,2:4,3:5', 'a job after the restore records its error as number 3, after the restored ones');

# ---------------------------------------------------------------------------
# (4) the owner sees every role's errors, another role only its own
$node->safe_psql('postgres', 'CREATE ROLE clerk LOGIN');
$node->safe_psql('appdb', q{
CREATE TABLE clerk_items (id int PRIMARY KEY, body text, note text);
INSERT INTO clerk_items VALUES (1, NULL, NULL);
ALTER TABLE clerk_items OWNER TO clerk;
});
query('appdb', 'clerk', q{CALL cbllm.enrich('clerk_items', 'id', 'body', 'note', max_tokens => 2)});
is(query('appdb', 'clerk', q{SELECT string_agg(tbl::text, ',') FROM cbllm.enrich_errors}), 'clerk_items',
	'the clerk sees only the error of its own job');
is(query('appdb', 'owner_role', 'SELECT count(*) FROM cbllm.enrich_errors'), '3',
	"the database's owner sees every role's errors");
is(query('appdb', 'clerk', q{INSERT INTO cbllm.enrich_errors (tbl, key_value, sqlstate, error, role)
	VALUES ('clerk_items', '1', '00000', 'forged', 'clerk')}) =~ /permission denied/ ? 1 : 0, 1,
	'another role still cannot insert rows by hand');

# ---------------------------------------------------------------------------
# (5) cbllm in a schema of its own
$node->safe_psql('postgres', 'CREATE DATABASE own');
is( query('own', undef, q{
CREATE SCHEMA llm;
CREATE EXTENSION cbllm SCHEMA llm;
SELECT extnamespace::regnamespace FROM pg_extension WHERE extname = 'cbllm';
}), 'llm', 'CREATE EXTENSION cbllm SCHEMA llm installs it in schema llm');
is(query('own', undef, q{SELECT count(*) FROM pg_proc WHERE proname = 'llm_generate' AND pronamespace = 'public'::regnamespace}),
	'0', 'nothing of it is in public');
is( query('own', undef, q{
SET search_path = "$user", public, llm;
CREATE TABLE t (id int PRIMARY KEY, body text, s text);
INSERT INTO t VALUES (1, 'hello', NULL), (2, 'world', NULL);
CALL cbllm.enrich('t', 'id', 'body', 's', max_tokens => 4);
SELECT count(*) FILTER (WHERE s = llm.llm_generate(body, 4)) || ' ' || (SELECT state FROM cbllm.engine)
FROM t;
}), '2 ready', 'with llm on the search_path, llm_generate, cbllm.enrich and the views work');

# ---------------------------------------------------------------------------
# (6) smaller ones
$node->safe_psql('postgres', q{
CREATE ROLE plain LOGIN;
CREATE TABLE opts (id int PRIMARY KEY, body text, s text);
INSERT INTO opts SELECT i, 'row ' || i, NULL FROM generate_series(1, 5) i;
GRANT SELECT, UPDATE ON opts TO plain;
});
for my $bad ([ 'max_tokens => 0', qr/max_tokens must be between 1 and/ ],
	[ 'temperature => -1', qr/temperature must be between 0 and/ ],
	[ q{regex => '('}, qr/regex: missing \)/ ],
	[ q{regex => ''}, qr/admits only the empty text/ ],
	[ q{template_kwargs => '[1]', messages_sql => $$'[]'::jsonb$$, prompt_sql => NULL},
		qr/template_kwargs must be a JSON object/ ])
{
	my ($args, $re) = @$bad;
	my $sql = $args =~ /prompt_sql/
	  ? "CALL cbllm.enrich('opts', 'id', target_column => 's', $args)"
	  : "CALL cbllm.enrich('opts', 'id', 'body', 's', $args)";
	my ($r, $o, $e) = (0, '', '');
	$r = $node->psql('postgres', $sql, stdout => \$o, stderr => \$e);
	like($e, $re, "cbllm.enrich with $args is refused with the option's own error");
	unlike($e, qr/rows of .* to do/, '... before it reads a row');
}
is($node->safe_psql('postgres', 'SELECT count(*) FROM cbllm.enrich_errors'), '0',
	'no refused job wrote an error row');
like(query('postgres', undef, q{SELECT llm_generate('x', 4, regex => '')}),
	qr/failed: .*the constraint admits only the empty text/, "llm_generate's regex => '' is refused like '()'");
like(query('postgres', undef, q{SELECT llm_generate('x', 4, regex => '()')}),
	qr/failed: .*the constraint admits only the empty text/, "... and '()' is refused the same way");
like(query('postgres', undef,
		q{SELECT llm_generate('x', 4, json_schema => (repeat('{"items": ', 700) || '{}' || repeat('}', 700))::jsonb)}),
	qr/nested too deeply/, 'a json_schema nested 700 levels deep is refused as nested too deeply');
query('postgres', undef, q{SELECT llm_generate('count my prompt tokens', 2)});
is( query('postgres', 'plain',
		'SELECT bool_and(tokens_in IS NULL) AND bool_and(tokens_out IS NOT NULL) FROM cbllm.engines'),
	't', "cbllm.engines hides prompt-token counts (prefix-cache hits) from a plain role, as cbllm_status() does");
is( query('postgres', undef, 'SELECT bool_and(tokens_in > 0) FROM cbllm.engines'), 't',
	'... and shows them to a superuser');
is(query('postgres', 'plain', 'SELECT bool_and(since IS NOT NULL) FROM cbllm.stats'), 't',
	'cbllm.stats says since when it counts before any reset');

$node->stop;
done_testing();
