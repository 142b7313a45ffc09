
# Copyright (c) cbllm contributors
#
# Read scaling with pgpool-II: the configuration README's "Scaling out"
# gives (streaming-replication mode, statement-level load balancing, the
# generation functions in read_only_function_list) spreads 100 separate
# SELECT llm_generate(...) calls across a primary and two streaming
# standbys: each of the three servers generates for some of them, and every
# call gets the same greedy text.  Skipped, saying so, where pgpool is not
# installed.
use strict;
use warnings;

use Cwd ();
use FindBin;
use lib $FindBin::RealBin;

use CbllmTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $pgpool = (grep { -x $_ } ('/usr/sbin/pgpool', '/usr/bin/pgpool'))[0];
plan skip_all => 'pgpool-II is not installed (Debian package pgpool2)' unless defined $pgpool;

my $N_CALLS = 100;
my $primary = CbllmTest::new_node('primary', allows_streaming => 1);
$primary->backup('base');
my @nodes = ($primary);
for my $i (1, 2)
{
	my $s = PostgreSQL::Test::Cluster->new("standby$i");
	$s->init_from_backup($primary, 'base', has_streaming => 1);
	$s->start;
	push @nodes, $s;
}
for my $s (@nodes[1, 2])
{
	$primary->wait_for_catchup($s);
	$s->poll_query_until('postgres', 'SELECT state FROM cbllm_status()', 'ready')
	  or BAIL_OUT('a standby engine did not become ready');
}

# pgpool-II in front of the three, configured as README's recipe says
my $dir = Cwd::abs_path(PostgreSQL::Test::Utils::tempdir());
my $port = PostgreSQL::Test::Cluster::get_free_port();
my $pcp_port = PostgreSQL::Test::Cluster::get_free_port();
my $user = getpwuid($<);
my $conf = <<"EOC";
backend_clustering_mode = 'streaming_replication'
listen_addresses = ''
port = $port
socket_dir = '$dir'
pcp_listen_addresses = ''
pcp_port = $pcp_port
pcp_socket_dir = '$dir'
pid_file_name = '$dir/pgpool.pid'
logdir = '$dir'
num_init_children = 4
max_pool = 1
enable_pool_hba = off
load_balance_mode = on
statement_level_load_balance = on
read_only_function_list = 'llm_generate,llm_chat,llm_generate_json,llm_chat_json,llm_chat_batch,llm_completions,llm_chat_completions,llm_tokenize,llm_detokenize,llm_token_count,llm_apply_chat_template,cbllm_status'
sr_check_period = 0
sr_check_user = '$user'
sr_check_database = 'postgres'
health_check_period = 0
failover_on_backend_error = off
EOC
for my $i (0 .. 2)
{
	$conf .= "backend_hostname$i = '" . $nodes[$i]->host . "'\n";
	$conf .= "backend_port$i = " . $nodes[$i]->port . "\n";
	$conf .= "backend_weight$i = 1\n";
	$conf .= "backend_flag$i = 'DISALLOW_TO_FAILOVER'\n";
}
PostgreSQL::Test::Utils::append_to_file("$dir/pgpool.conf", $conf);
PostgreSQL::Test::Utils::append_to_file("$dir/pcp.conf", '');
my $log = "$dir/pgpool.log";
my $h = IPC::Run::start([ $pgpool, '-n', '-f', "$dir/pgpool.conf", '-F', "$dir/pcp.conf" ],
	'>', $log, '2>&1');
# psql reading a file sends each statement on its own, as an application would
my $psql = sub {
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	unlink "$dir/script.sql";
	PostgreSQL::Test::Utils::append_to_file("$dir/script.sql", $sql);
	IPC::Run::run([ 'psql', '-X', '-A', '-t', '-q', '-h', $dir, '-p', $port, '-d', 'postgres',
		'-v', 'ON_ERROR_STOP=1', '-f', "$dir/script.sql" ], '>', \$out, '2>', \$err);
	chomp $out;
	return ($?, $out, $err);
};
ok( CbllmTest::wait_until(sub { my ($rc) = $psql->("SELECT 1;\n"); $rc == 0 }, 60, 0.2),
	'pgpool-II accepts connections')
  or diag(slurp_file($log));

my @before = map { $_->safe_psql('postgres', 'SELECT tokens_generated FROM cbllm_status()') } @nodes;
my $script = join('', map { "SELECT llm_generate('The quick brown fox', 6, temperature => 0);\n" } 1 .. $N_CALLS);
my ($rc, $out, $err) = $psql->($script);
is($rc, 0, "$N_CALLS separate calls through pgpool-II succeed") or diag($err);
my @texts = split /\n/, $out;
is(scalar(@texts), $N_CALLS, 'each gives a text');
my %distinct = map { $_ => 1 } @texts;
is(scalar(keys %distinct), 1, 'and every call the same greedy text');
is($texts[0], $primary->safe_psql('postgres', "SELECT llm_generate('The quick brown fox', 6, temperature => 0)"),
	"the primary's own");
my @after = map { $_->safe_psql('postgres', 'SELECT tokens_generated FROM cbllm_status()') } @nodes;
my @served = map { ($after[$_] - $before[$_]) / 6 } 0 .. 2;
note("calls served: primary $served[0], standby1 $served[1], standby2 $served[2]");
ok($served[0] > 0 && $served[1] > 0 && $served[2] > 0,
	"each of the three servers generated for some calls ($served[0], $served[1], $served[2])");

$h->signal('TERM');
$h->finish;
$_->stop for reverse @nodes;
done_testing();
