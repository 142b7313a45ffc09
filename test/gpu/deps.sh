# test/gpu/deps.sh (sourced): make the build find every library of
# test/gpu/deps.txt.  For each whose header the compiler does not find, the
# packages in .deps/ (test/gpu/fetch-deps.sh) are unpacked into .deps/root,
# and CPATH, LIBRARY_PATH and LD_LIBRARY_PATH point there.  Says what it did
# for each library; returns nonzero when one is neither installed nor in
# .deps/.
# unpack Debian package $1 into directory $2 (dpkg-deb, or ar and tar where there is no dpkg)
deb_extract() {
	if command -v dpkg-deb >/dev/null; then
		dpkg-deb -x "$1" "$2"
		return
	fi
	local tmp
	tmp=$(mktemp -d)
	(cd "$tmp" && ar x "$OLDPWD/$1") && tar -xf "$tmp"/data.tar.* -C "$2"
	rm -rf "$tmp"
}

gpu_deps() {
	local header dev runtime missing=0 deb lib
	while read -r header dev runtime; do
		case "$header" in '' | '#'*) continue ;; esac
		if echo "#include <$header>" | gcc -E - >/dev/null 2>&1; then
			echo "$header: from the system"
			continue
		fi
		for deb in $dev $runtime; do
			# shellcheck disable=SC2086 # the version and architecture are unknown: a glob
			set -- .deps/${deb}_*.deb
			if [ ! -f "$1" ]; then
				echo "$header: not installed, and .deps/ has no $deb package (run test/gpu/fetch-deps.sh where apt works)"
				missing=1
				continue 2
			fi
			mkdir -p .deps/root
			if ! deb_extract "$1" .deps/root; then
				echo "$header: $1 could not be unpacked"
				missing=1
				continue 2
			fi
		done
		echo "$header: from .deps ($dev $runtime)"
	done <test/gpu/deps.txt
	if [ -d .deps/root ]; then
		lib=$PWD/.deps/root/usr/lib/x86_64-linux-gnu
		export CPATH="$PWD/.deps/root/usr/include${CPATH:+:$CPATH}"
		export LIBRARY_PATH="$lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
		export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	fi
	return $missing
}
