#!/usr/bin/env bash
# test/gpu/rehearse.sh: prove that test/gpu/check.sh's build works on a
# machine where none of the libraries of test/gpu/deps.txt is installed, as
# on the GPU machine (no package archive, no -dev packages).  In a private
# mount namespace, overlays hide every file of their development packages
# (headers, link libraries, pkg-config files), then a copy of the
# tree is built as check.sh builds it, with the packages test/gpu/fetch-deps.sh
# downloads (cached in ~/.cache/cbllm/gpu-deps), and a test program runs.
#
# usage: test/gpu/rehearse.sh [--quick]     (as root: unshare and overlayfs)
#   --quick   the engine without CUDA, the CLI and one test program (as the
#             tests run it); without it, make CUDA=1 all, as check.sh does
# Prints TAP lines.
set -u
cd "$(dirname "$0")/../.."
quick=0
[ "${1:-}" = --quick ] && quick=1
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then
	echo "1..0 # SKIP needs root and unshare (a private mount namespace)"
	exit 0
fi
cache=${CBLLM_CACHE:-$HOME/.cache/cbllm}/gpu-deps
scratch=$(mktemp -d /tmp/cbllm-rehearse.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/tree" "$scratch/ovl"
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$scratch/tree"

# the packages, downloaded once
mapfile -t packages < <(grep -v '^#' test/gpu/deps.txt | awk 'NF { for (i = 2; i <= NF; i++) print $i }')
if ! ls "$cache"/*.deb >/dev/null 2>&1; then
	mkdir -p "$cache"
	(cd "$cache" && apt-get download "${packages[@]}" >/dev/null 2>&1) || {
		echo "1..1"
		echo "not ok 1 - the packages of test/gpu/deps.txt could not be downloaded (apt-get download)"
		exit 1
	}
fi
mkdir -p "$scratch/tree/.deps"
cp "$cache"/*.deb "$scratch/tree/.deps/"

# whiteouts (character devices 0:0 in an overlay's upper directory) for
# every file the development packages installed under the two directories
# overlaid (the runtime libraries stay: even mkdir and tar load PCRE2, through
# SELinux's library, so every such machine has them)
hidden=0
mapfile -t dev_packages < <(grep -v '^#' test/gpu/deps.txt | awk 'NF { print $2 }')
for pkg in "${dev_packages[@]}"; do
	while read -r f; do
		for top in /usr/include /usr/lib/x86_64-linux-gnu; do
			case "$f" in "$top"/*)
				rel=${f#"$top"/}
				up="$scratch/ovl/upper${top//\//_}"
				mkdir -p "$up/$(dirname "$rel")"
				mknod "$up/$rel" c 0 0 && hidden=$((hidden + 1)) ;;
			esac
		done
	done < <(dpkg -L "$pkg" 2>/dev/null | while read -r f; do [ -d "$f" ] || echo "$f"; done)
done

cat >"$scratch/inside.sh" <<INSIDE
set -u
n=0
tap() { n=\$((n + 1)); if [ "\$1" = 0 ]; then echo "ok \$n - \$2"; else echo "not ok \$n - \$2"; fi; }
# the last lines of a log as TAP comments
show() { tail -"\$2" "\$1" | while IFS= read -r l; do echo "# \$l"; done; }
for top in /usr/include /usr/lib/x86_64-linux-gnu; do
	up="$scratch/ovl/upper\${top//\//_}"
	mkdir -p "\$up" "\$up.work"
	mount -t overlay overlay -o "lowerdir=\$top,upperdir=\$up,workdir=\$up.work" "\$top"
done
gone=0
while read -r header dev runtime; do
	case "\$header" in '' | '#'*) continue ;; esac
	echo "#include <\$header>" | gcc -E - >/dev/null 2>&1 && gone=1
done <test/gpu/deps.txt
tap \$gone "$hidden files of the packages are hidden: no header of test/gpu/deps.txt is found"
cd "$scratch/tree"
. test/gpu/deps.sh
gpu_deps >"$scratch/deps.log" 2>&1
rc=\$?
deps=""
while IFS= read -r l; do deps="\$deps\$l; "; done <"$scratch/deps.log"
tap \$rc "every library comes from the downloaded packages: \$deps"
if [ $quick = 1 ]; then
	make -s -j"\$(nproc)" CUDA=0 bin/cbllm-cli bin/cbllm-engine build/test/test_tokenizer >"$scratch/build.log" 2>&1
else
	make -s -j"\$(nproc)" CUDA=1 all >"$scratch/build.log" 2>&1
fi
rc=\$?
[ \$rc = 0 ] || show "$scratch/build.log" 20
tap \$rc "check.sh's build succeeds with none of the packages installed"
build/test/test_tokenizer test/data/llama2-tokenizer >"$scratch/run.log" 2>&1
rc=\$?
[ \$rc = 0 ] || show "$scratch/run.log" 5
tap \$rc "a test program built so runs"
echo "1..\$n"
INSIDE
unshare -m bash "$scratch/inside.sh"
