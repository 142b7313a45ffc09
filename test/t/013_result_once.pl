
# Copyright (c) cbllm contributors
#
# Every byte of an llm_submit result arrives exactly once, however the
# backend's reads interleave with the worker parking the finished result:
#  (1) thousands of requests are collected by polling llm_result(id, wait =>
#      false) while they run, so reads of the output ring race the moves to
#      the parked store; every result equals llm_generate of its prompt
#      (a read whose copy overlapped a completed park used to keep its copy
#      and then take the parked bytes too, repeating the end of the text);
#  (2) two sessions do the same at once.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = CbllmTest::new_node('once');

# ROUNDS rounds of four requests, each polled without waiting until it is over;
# the notice is "<mismatches> of <results>"
my $poll = sub {
	my ($rounds) = @_;
	return qq{
DO \$\$
DECLARE
  prompts text[] := ARRAY['SECOND!', 'FIRST; (ONE)!', 'THIRD', 'a b c d'];
  want text[];
  ids bigint[];
  r text;
  bad int := 0;
  n int := 0;
BEGIN
  FOR k IN 1..4 LOOP want[k] := llm_generate(prompts[k], 6); END LOOP;
  FOR i IN 1..$rounds LOOP
    ids := ARRAY[]::bigint[];
    FOR k IN 1..4 LOOP ids := ids || llm_submit(prompts[k], 6); END LOOP;
    FOR k IN 1..4 LOOP
      LOOP
        r := llm_result(ids[k], wait => false);
        EXIT WHEN r IS NOT NULL;
      END LOOP;
      n := n + 1;
      IF r IS DISTINCT FROM want[k] THEN bad := bad + 1; END IF;
    END LOOP;
  END LOOP;
  RAISE NOTICE 'mismatches: % of %', bad, n;
END \$\$;
};
};

# ---- (1) one session, 24000 results
{
	my ($rc, $out, $err) = $node->psql('postgres', $poll->(6000));
	like($err, qr/mismatches: 0 of 24000/,
		'24000 polled llm_submit results each equal llm_generate of their prompt');
}

# ---- (2) two sessions at once
{
	my @s = map { CbllmTest::start_psql($node, $poll->(2000), timeout => 120) } 1 .. 2;
	for my $i (0 .. 1)
	{
		my ($rc, $out, $err) = CbllmTest::finish_psql($s[$i]);
		like($err, qr/mismatches: 0 of 8000/,
			"session $i: 8000 polled results beside another session's are each whole and once");
	}
}

$node->stop;
done_testing();
