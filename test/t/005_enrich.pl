
# Copyright (c) cbllm contributors
#
# cbllm.enrich as a batch job, and the asynchronous API's session cleanup:
#  (1) an enrichment of 3000 rows (chunks of 100, 8 tokens, test model) is
#      interrupted (pg_cancel_backend) after some chunks were committed: only
#      whole chunks are kept, the engine is left idle, and a second CALL
#      finishes the job; every row then holds the same text as llm_generate
#      gives for its prompt, and a trigger's audit table shows exactly one
#      committed UPDATE per row (none lost, none done twice);
#  (1b) on the slow (deep) model, a CALL cancelled while its chunk's requests
#      are generating: they are aborted in the engine, not run to the end,
#      and the chunk's rows are rolled back;
#  (2) poisoned rows (NULL prompts, prompts longer than max_model_len) do
#      not stop the job: each is recorded once in cbllm.enrich_errors with
#      its sqlstate and message, and every other row is done;
#  (3) the progress NOTICEs "N of M rows done, F failed, T tokens/s" count
#      up to M - F;
#  (4) on the slow model, requests from llm_submit that are never collected
#      are aborted when the session disconnects (transaction_scoped ones
#      when the transaction ends).
#  (5) a chunk larger than the free request slots, a prompt llm_submit
#      rejects, and two concurrent CALLs on one table.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $N_ROWS = 3000;
my $CHUNK = 100;
my $MAX_TOKENS = 8;
my $PROMPT = q{'Summarise: ' || body};
my $PROGRESS_RE =
  qr/NOTICE:\s+cbllm\.enrich: (\d+) of (\d+) rows done, (\d+) failed, ([0-9.]+) tokens\/s/;

# 128 request slots: a chunk of 100 fits (larger chunks are tested below).
my $node = CbllmTest::new_node('enrich', extra_conf => "cbllm.max_queued_requests = 128\n");

# The CALL of cbllm.enrich on $tbl with the standard options plus $extra.
sub enrich_sql
{
	my ($tbl, $extra) = @_;
	return "CALL cbllm.enrich('$tbl', 'id', \$\$$PROMPT\$\$, 'summary', "
	  . "max_tokens => $MAX_TOKENS" . ($extra ? ", $extra" : '') . ")";
}

# The progress NOTICEs in $err: a list of [N, M, F, T].
sub progress
{
	my ($err) = @_;
	my @p;
	push @p, [ $1, $2, $3, $4 ] while $err =~ /$PROGRESS_RE/g;
	return @p;
}

# Check the progress NOTICEs of one CALL: at least $min_lines of them, M the
# same in every line and equal to $todo, N never decreasing and N + F rising
# with every chunk, ending at N = M - F with F = $failed, and a positive rate.
sub progress_ok
{
	my ($what, $err, $todo, $failed, $min_lines) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my @p = progress($err);
	cmp_ok(scalar(@p), '>=', $min_lines,
		"$what: one progress NOTICE per chunk (at least $min_lines)");
	like($err, qr/NOTICE:\s+cbllm\.enrich: $todo rows of \S+ to do/,
		"$what: the first NOTICE announces the $todo rows to do");
	is(scalar(grep { $_->[1] != $todo } @p), 0, "$what: every progress NOTICE says \"of $todo\"");
	my ($monotonic, $rising) = (1, 1);
	for my $i (1 .. $#p)
	{
		$monotonic = 0 if $p[$i][0] < $p[ $i - 1 ][0] || $p[$i][2] < $p[ $i - 1 ][2];
		$rising = 0 if $p[$i][0] + $p[$i][2] <= $p[ $i - 1 ][0] + $p[ $i - 1 ][2];
	}
	ok($monotonic, "$what: the done (N) and failed (F) counts never go down");
	ok($rising, "$what: every chunk adds to N + F");
	my $last = $p[-1] // [ -1, -1, -1, 0 ];
	is($last->[2], $failed, "$what: the last NOTICE reports $failed failed");
	is($last->[0], $todo - $failed, "$what: the last NOTICE reports N = M - F done");
	cmp_ok($last->[3], '>', 0, "$what: the last NOTICE reports a positive tokens/s rate");
	return @p;
}

# ---------------------------------------------------------------------------
# (1) interrupted and resumed enrichment
$node->safe_psql(
	'postgres', qq{
CREATE TABLE docs (id int PRIMARY KEY, body text NOT NULL, summary text);
INSERT INTO docs SELECT i, 'document ' || i || ' about ' || md5(i::text), NULL
FROM generate_series(1, $N_ROWS) i;
CREATE TABLE docs_audit (id int PRIMARY KEY, updates int NOT NULL);
CREATE FUNCTION docs_audit() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO docs_audit VALUES (NEW.id, 1)
    ON CONFLICT (id) DO UPDATE SET updates = docs_audit.updates + 1;
    RETURN NEW;
END \$\$;
CREATE TRIGGER docs_audit AFTER UPDATE OF summary ON docs
FOR EACH ROW EXECUTE FUNCTION docs_audit();
});

my $done_sql = 'SELECT count(*) FROM docs WHERE summary IS NOT NULL';
my $t_job = time;
my $job = CbllmTest::start_psql($node, enrich_sql('docs', "chunk_size => $CHUNK"),
	app => 'cbllm_enrich_job');
my $pid = CbllmTest::backend_pid($node, 'cbllm_enrich_job');
ok($pid, 'interrupt: the enrichment session has a backend');
ok(CbllmTest::wait_until(sub { $node->safe_psql('postgres', $done_sql) > 0 }, 30, 0.02),
	'interrupt: another session sees committed chunks while the CALL runs');
my $t_cancel = time;
is($node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)"),
	't', 'interrupt: pg_cancel_backend signals the enrichment backend');
my ($rc, $out, $err) = CbllmTest::finish_psql($job);
isnt($rc, 0, 'interrupt: the cancelled CALL fails');
like($err, qr/canceling statement due to user request/,
	'interrupt: the session gets "canceling statement due to user request"');
note(sprintf('interrupt: cancelled %.2f s after the CALL started', $t_cancel - $t_job));

my $st;
my $idle = CbllmTest::wait_until(sub { $st = CbllmTest::status($node); CbllmTest::is_idle($st) }, 5);
# (the fast model would finish the chunk's requests in milliseconds anyway;
# (1b) on the slow model shows that they are aborted, not run to the end)
ok($idle, 'interrupt: within 5 s no request runs or waits and no KV block is used '
	  . '(the interrupted CALL left nothing in the engine)');
note(sprintf('interrupt: engine idle %.3f s after pg_cancel_backend', time - $t_cancel)) if $idle;

my ($done1, $max1) = split /\|/,
  $node->safe_psql('postgres', 'SELECT count(*), coalesce(max(id), 0) FROM docs WHERE summary IS NOT NULL');
note("interrupt: $done1 of $N_ROWS rows were done when the CALL was cancelled");
cmp_ok($done1, '>', 0, 'interrupt: some rows were done before the cancel');
cmp_ok($done1, '<', $N_ROWS, 'interrupt: not all rows were done (the job really was interrupted)');
is($done1 % $CHUNK, 0, "interrupt: only whole chunks of $CHUNK rows were kept");
is($max1, $done1, 'interrupt: the rows kept are the first ones in key order (no gaps)');
is($node->safe_psql('postgres', 'SELECT count(*) || \'/\' || coalesce(max(updates), 0) FROM docs_audit'),
	"$done1/1",
	'interrupt: the audit table holds exactly one UPDATE for each row done and none for the rolled-back chunk');
my @p_int = progress($err);
cmp_ok(scalar(@p_int), '>=', 1, 'interrupt: the cancelled CALL reported progress before the cancel');

# the second CALL resumes: only the rows left are done, each once
($rc, $out, $err) = ('', '', '');
my $t_resume = time;
$rc = $node->psql('postgres', enrich_sql('docs', "chunk_size => $CHUNK"),
	stdout => \$out, stderr => \$err);
note(sprintf('resume: the second CALL took %.2f s', time - $t_resume));
is($rc, 0, 'resume: the second CALL completes');
is($node->safe_psql('postgres', 'SELECT count(*) FROM docs WHERE summary IS NULL'),
	0, 'resume: every row is done');
is( $node->safe_psql(
		'postgres',
		'SELECT count(*) || \'/\' || min(updates) || \'/\' || max(updates) FROM docs_audit'),
	"$N_ROWS/1/1",
	'resume: the audit table shows exactly one committed UPDATE of the target for each of the '
	  . "$N_ROWS rows (none lost, none done twice)");
is($node->safe_psql('postgres',
		'SELECT count(*) FROM docs d WHERE NOT EXISTS (SELECT FROM docs_audit a WHERE a.id = d.id)'),
	0, 'resume: no row was filled without its UPDATE being audited');
my ($n_sample, $n_same, $n_before, $n_distinct) = split /\|/, $node->safe_psql(
	'postgres', qq{
SELECT count(*), count(*) FILTER (WHERE summary = llm_generate($PROMPT, $MAX_TOKENS)),
       count(*) FILTER (WHERE id <= $max1), count(DISTINCT summary)
FROM docs WHERE id % 50 = 1 OR id IN ($max1, $max1 + 1)});
cmp_ok($n_before, '>', 0, 'resume: the sample holds rows done before the cancel');
cmp_ok($n_sample - $n_before, '>', 0, 'resume: the sample holds rows done by the second CALL');
cmp_ok($n_distinct, '>', 1, 'resume: the sampled summaries differ (the comparison is meaningful)');
is($n_same, $n_sample,
	"resume: each of the $n_sample sampled rows holds llm_generate(prompt, $MAX_TOKENS) (greedy, deterministic)");
ok(CbllmTest::wait_until(sub { CbllmTest::is_idle(CbllmTest::status($node)) }, 5),
	'resume: the engine is idle after the job');

# (3) progress of the resumed CALL: M = the rows left, no failures
my $todo2 = $N_ROWS - $done1;
my @p_res = progress_ok('progress (resumed job)', $err, $todo2, 0, int(($todo2 + $CHUNK - 1) / $CHUNK));
is(scalar(grep { $_->[0] % $CHUNK != 0 && $_->[0] != $todo2 } @p_res),
	0, "progress (resumed job): N grows a chunk ($CHUNK rows) at a time");

# ---------------------------------------------------------------------------
# (2) poisoned rows: NULL prompts and prompts longer than max_model_len (512)
my $N2 = 400;
$node->safe_psql(
	'postgres', qq{
CREATE TABLE docs2 (id int PRIMARY KEY, body text, summary text);
INSERT INTO docs2
SELECT i, CASE WHEN i % 37 = 5 THEN NULL
               WHEN i % 41 = 7 THEN repeat('long ', 600)
               ELSE 'item ' || i END, NULL
FROM generate_series(1, $N2) i;
});
my @null_keys = grep { $_ % 37 == 5 } 1 .. $N2;
my @long_keys = grep { $_ % 41 == 7 && $_ % 37 != 5 } 1 .. $N2;
my $n_poison = @null_keys + @long_keys;
is($node->safe_psql('postgres', "SELECT min(llm_token_count($PROMPT)) FROM docs2 WHERE id % 41 = 7"),
	1812, 'poison: the long prompts have far more tokens than max_model_len 512');
($rc, $out, $err) = ('', '', '');
$rc = $node->psql('postgres', enrich_sql('docs2', 'chunk_size => 50'),
	stdout => \$out, stderr => \$err);
is($rc, 0, 'poison: the CALL completes despite the poisoned rows');
unlike($err, qr/ERROR/, 'poison: the CALL raised no error');
is($node->safe_psql('postgres', 'SELECT count(*) FROM docs2 WHERE summary IS NULL'),
	$n_poison, "poison: only the $n_poison poisoned rows are left undone");
is( $node->safe_psql(
		'postgres',
		'SELECT count(*) FROM docs2 WHERE summary IS NULL AND id::text NOT IN '
		  . "(SELECT key_value FROM cbllm.enrich_errors WHERE tbl = 'docs2'::regclass)"),
	0, 'poison: every row left undone is recorded in cbllm.enrich_errors');
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(key_value, ',' ORDER BY key_value::int) FROM cbllm.enrich_errors "
		  . "WHERE tbl = 'docs2'::regclass AND sqlstate = '22004' AND error = 'the prompt is NULL'"),
	join(',', @null_keys),
	'poison: each NULL-prompt key has one error row, sqlstate 22004, "the prompt is NULL"');
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(key_value, ',' ORDER BY key_value::int) FROM cbllm.enrich_errors "
		  . "WHERE tbl = 'docs2'::regclass AND sqlstate = '54000' AND error ~ "
		  . "'^cbllm request failed: the prompt has 1812 tokens, more than max_model_len 512 allows'"),
	join(',', @long_keys),
	'poison: each too-long key has one error row, sqlstate 54000, with both token counts in the message');
is($node->safe_psql('postgres', "SELECT count(*) FROM cbllm.enrich_errors WHERE tbl = 'docs2'::regclass"),
	$n_poison, "poison: cbllm.enrich_errors holds exactly $n_poison rows (one per poisoned key)");
is($node->safe_psql('postgres',
		"SELECT count(*) FROM docs2 WHERE id IN (1, 2, 100, $N2) AND summary = llm_generate($PROMPT, $MAX_TOKENS)"),
	4, 'poison: the rows around the poisoned ones hold llm_generate(prompt) like the rest');

# (3) progress of the poisoned job: N rises to M - F with F the poisoned rows
progress_ok('progress (poisoned job)', $err, $N2, $n_poison, int($N2 / 50));

ok(CbllmTest::wait_until(sub { CbllmTest::is_idle(CbllmTest::status($node)) }, 5),
	'poison: the engine is idle after the job');

# ---------------------------------------------------------------------------
# Robustness of the job itself:
#  - a chunk larger than the free request slots is cut short and the rest of
#    its rows come back in the next chunk;
#  - a row whose prompt llm_submit rejects (over cbllm.max_prompt_bytes) is
#    recorded in cbllm.enrich_errors, not fatal to the job;
#  - the chunk's rows are locked (FOR UPDATE SKIP LOCKED), so two CALLs on
#    the same table share the rows instead of doing them twice.
$node->safe_psql(
	'postgres', q{
CREATE TABLE docs3 (id int PRIMARY KEY, body text, summary text);
INSERT INTO docs3 SELECT i, 'entry ' || i, NULL FROM generate_series(1, 200) i;
CREATE TABLE docs4 (id int PRIMARY KEY, body text, summary text);
INSERT INTO docs4 SELECT i, CASE WHEN i = 3 THEN repeat('x', 70000) ELSE 'entry ' || i END, NULL
FROM generate_series(1, 10) i;
});
{
	($rc, $out, $err) = ('', '', '');
	$rc = $node->psql('postgres', enrich_sql('docs3', 'chunk_size => 200'),
		stdout => \$out, stderr => \$err);
	is($rc, 0, 'a chunk_size larger than cbllm.max_queued_requests (200 > 128): the CALL completes');
	is($node->safe_psql('postgres', 'SELECT count(*) FROM docs3 WHERE summary IS NULL'),
		0, 'a chunk_size larger than cbllm.max_queued_requests: every row is done');
}
{
	($rc, $out, $err) = ('', '', '');
	$rc = $node->psql('postgres', enrich_sql('docs4', 'chunk_size => 5'),
		stdout => \$out, stderr => \$err);
	is($rc, 0, 'a prompt over cbllm.max_prompt_bytes: the CALL completes');
	is($node->safe_psql('postgres',
			"SELECT sqlstate FROM cbllm.enrich_errors WHERE tbl = 'docs4'::regclass AND key_value = '3'"),
		'54000', 'a prompt over cbllm.max_prompt_bytes: recorded in cbllm.enrich_errors with 54000');
	is($node->safe_psql('postgres', 'SELECT count(*) FROM docs4 WHERE summary IS NULL'),
		1, 'a prompt over cbllm.max_prompt_bytes: every other row is done');
}
{
	$node->safe_psql(
		'postgres', q{
	CREATE TABLE docs5 (id int PRIMARY KEY, body text, summary text);
	INSERT INTO docs5 SELECT i, 'entry ' || i, NULL FROM generate_series(1, 600) i;
	TRUNCATE docs_audit;
	CREATE TRIGGER docs5_audit AFTER UPDATE OF summary ON docs5
	FOR EACH ROW EXECUTE FUNCTION docs_audit();
	});
	my @jobs = map { CbllmTest::start_psql($node, enrich_sql('docs5', 'chunk_size => 50')) } 1 .. 2;
	my @rcs = map { (CbllmTest::finish_psql($_))[0] } @jobs;
	is("@rcs", '0 0', 'two concurrent CALLs on one table: both complete');
	is( $node->safe_psql(
			'postgres',
			'SELECT count(*) || \'/\' || coalesce(max(updates), 0) FROM docs_audit'),
		'600/1',
		'two concurrent CALLs on one table: each row is generated and written once');
}
ok(CbllmTest::wait_until(sub { CbllmTest::is_idle(CbllmTest::status($node)) }, 5),
	'the engine is idle after the failed CALLs');
$node->stop;

# ---------------------------------------------------------------------------
# (4) llm_submit'ed requests never collected: aborted when their transaction
# (transaction_scoped) or session ends.  The test model would finish 20
# requests in milliseconds, so this runs on the slow (deep) model, where a
# full-length generation takes seconds.
my $deep = CbllmTest::new_deep_node('enrich_deep');
my $N_SUBMIT = 20;
my $SUBMIT = "SELECT count(llm_submit('request ' || i, 500, stop => NULL%s)) "
  . "FROM generate_series(1, $N_SUBMIT) i";

# Wait until the engine holds all $N_SUBMIT requests and has generated at
# least $min tokens for them since $tok0.
sub in_flight_ok
{
	my ($what, $tok0, $min) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $s;
	ok( CbllmTest::wait_until(
			sub {
				$s = CbllmTest::status($deep);
				return $s->{requests_running} + $s->{requests_waiting} == $N_SUBMIT
				  && $s->{tokens_generated} >= $tok0 + $min;
			},
			30),
		"$what: all $N_SUBMIT requests are in the engine and generating");
	return $s;
}

# Wait for the engine to be idle again; check it took under 5 s and fewer
# tokens than the full generations.
sub aborted_ok
{
	my ($what, $since, $tok0) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $s;
	my $idle = CbllmTest::wait_until(sub { $s = CbllmTest::status($deep); CbllmTest::is_idle($s) }, 5);
	ok($idle, "$what: within 5 s nothing runs or waits and no KV block is used");
	note(sprintf('%s: idle %.3f s after the end', $what, time - $since)) if $idle;
	cmp_ok($s->{tokens_generated} - $tok0, '<', $N_SUBMIT * 400,
		"$what: far fewer tokens were generated than $N_SUBMIT full generations (they were aborted)");
	return;
}

# (1b) a CALL interrupted in the middle of a chunk, while the chunk's requests
# are generating: they are aborted (not run to their end) and the chunk's
# rows are rolled back.
{
	my $ROWS = 40;
	my $MT = 400;
	$deep->safe_psql('postgres',
		"CREATE TABLE slow (id int PRIMARY KEY, body text, summary text);"
		  . "INSERT INTO slow SELECT i, 'slow ' || i, NULL FROM generate_series(1, $ROWS) i;");
	my $tok0 = CbllmTest::status($deep)->{tokens_generated};
	my $p = CbllmTest::start_psql($deep,
		"CALL cbllm.enrich('slow', 'id', 'body', 'summary', chunk_size => 20, max_tokens => $MT)",
		app => 'cbllm_slow_job');
	my $spid = CbllmTest::backend_pid($deep, 'cbllm_slow_job');
	my $s0;
	ok( CbllmTest::wait_until(
			sub {
				$s0 = CbllmTest::status($deep);
				return $s0->{requests_running} > 1 && $s0->{tokens_generated} >= $tok0 + 100;
			},
			30),
		'mid-chunk: the first chunk\'s requests are generating');
	my $t = time;
	is($deep->safe_psql('postgres', "SELECT pg_cancel_backend($spid)"),
		't', 'mid-chunk: pg_cancel_backend signals the enrichment backend');
	my ($rc, $out, $err) = CbllmTest::finish_psql($p);
	like($err, qr/canceling statement due to user request/,
		'mid-chunk: the session gets "canceling statement due to user request"');
	my $s;
	my $idle = CbllmTest::wait_until(sub { $s = CbllmTest::status($deep); CbllmTest::is_idle($s) }, 5);
	ok($idle, 'mid-chunk: within 5 s no request runs or waits and no KV block is used');
	note(sprintf('mid-chunk: %d requests running at the cancel; idle %.3f s after it',
			$s0->{requests_running}, time - $t)) if $idle;
	cmp_ok($s->{tokens_generated} - $tok0, '<', 20 * ($MT - 100),
		'mid-chunk: far fewer tokens were generated than the chunk would have (its requests were aborted)');
	is($deep->safe_psql('postgres', 'SELECT count(*) FROM slow WHERE summary IS NOT NULL'),
		0, 'mid-chunk: the interrupted chunk\'s rows were rolled back');
}

{
	my $s = $deep->background_psql('postgres');

	# transaction_scoped: cancelled at COMMIT
	my $tok0 = CbllmTest::status($deep)->{tokens_generated};
	$s->query_safe('BEGIN');
	is($s->query_safe(sprintf($SUBMIT, ', transaction_scoped => true')),
		$N_SUBMIT, "transaction_scoped: $N_SUBMIT requests submitted in a transaction");
	in_flight_ok('transaction_scoped', $tok0, 5);
	my $t = time;
	$s->query_safe('COMMIT');
	aborted_ok('transaction_scoped (COMMIT without collecting)', $t, $tok0);

	# session-scoped (the default): they survive the transaction, then the
	# session disconnects without collecting them
	$tok0 = CbllmTest::status($deep)->{tokens_generated};
	is($s->query_safe(sprintf($SUBMIT, '')), $N_SUBMIT,
		"session: $N_SUBMIT requests submitted (autocommit: their transaction has ended)");
	my $st1 = in_flight_ok('session', $tok0, 5);
	ok( CbllmTest::wait_until(
			sub { CbllmTest::status($deep)->{tokens_generated} >= $st1->{tokens_generated} + 20 }, 30),
		'session: the requests keep generating after their transaction ended');
	$t = time;
	$s->quit;
	aborted_ok('session (disconnect without collecting)', $t, $tok0);
}

is($deep->safe_psql('postgres', "SELECT length(llm_generate('request 1', 4)) > 0"),
	't', 'a new request completes after the abandoned ones');
$deep->stop;
done_testing();
