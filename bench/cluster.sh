# bench/cluster.sh: a throw-away PostgreSQL cluster that preloads cbllm, for
# the benchmark scripts (sourced, not run).
#
#   cluster_init NAME PORT MODEL_DIR   initdb in a fresh /tmp/cbllm-NAME.XXXXXX
#                                      with the lines every benchmark needs; sets
#                                      base, bindir, runas (the server's user when
#                                      root) and psql (an array: psql -qXAt on it)
#   (append the benchmark's own settings to "$base/data/postgresql.conf")
#   cluster_start                      start it; it is stopped and removed when
#                                      the script exits
cluster_init() {
	local name=$1 model=$3
	port=$2
	base=$(mktemp -d "/tmp/cbllm-$name.XXXXXX")
	runas=()
	if [ "$(id -u)" = 0 ]; then runas=(runuser -u postgres --); chown postgres "$base"; fi
	bindir=$(pg_config --bindir)
	"${runas[@]}" "$bindir/initdb" -D "$base/data" -A trust >/dev/null
	cat >>"$base/data/postgresql.conf" <<CONF
port = $port
unix_socket_directories = '$base'
listen_addresses = ''
shared_preload_libraries = 'cbllm'
cbllm.model = '$model'
CONF
	psql=("${runas[@]}" "$bindir/psql" -h "$base" -p "$port" -d postgres -qXAt)
}

cluster_stop() {
	"${runas[@]}" "$bindir/pg_ctl" -D "$base/data" -m fast stop >/dev/null 2>&1 || true
	rm -rf "$base"
}

cluster_start() {
	"${runas[@]}" "$bindir/pg_ctl" -D "$base/data" -l "$base/log" -w start >/dev/null
	trap cluster_stop EXIT
}
