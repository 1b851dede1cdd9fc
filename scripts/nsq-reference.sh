#!/usr/bin/env bash
# Prints the folder that holds NSQ v1.3.0's binaries (nsqd, nsqlookupd,
# nsqadmin, the tools, bench_writer and bench_reader), the reference this
# project is compared with. The first call builds them from the Go module
# proxy's copy of github.com/nsqio/nsq@v1.3.0 (in NSQ's own module, so with
# the dependency versions NSQ pins) into a cache folder, $NSQ_REF_DIR or
# ~/.cache/nsqgo/nsq-v1.3.0; later calls print it at once. Concurrent calls
# wait for one another. Build output goes to stderr.
#   usage: ref=$(scripts/nsq-reference.sh) && "$ref/nsqd" --version
set -euo pipefail
version=v1.3.0
out=${NSQ_REF_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nsqgo/nsq-$version}
apps="nsqd nsqlookupd nsqadmin nsq_stat nsq_tail nsq_to_file nsq_to_http nsq_to_nsq to_nsq"
benches="bench_writer bench_reader"

built() {
	local b
	for b in $apps $benches; do [ -x "$out/$b" ] || return 1; done
}

mkdir -p "$(dirname "$out")"
exec 9>"$out.lock"
flock 9
if ! built; then
	mod=$(cd "${TMPDIR:-/tmp}" && go mod download -json "github.com/nsqio/nsq@$version" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -d "$mod" ] || { echo "nsq-reference: cannot download github.com/nsqio/nsq@$version" >&2; exit 1; }
	tree=$(mktemp -d)
	trap 'rm -rf "$tree"' EXIT
	cp -R "$mod/." "$tree" && chmod -R u+w "$tree"
	mkdir -p "$out.new"
	(
		cd "$tree"
		for a in $apps; do go build -o "$out.new/$a" "./apps/$a"; done
		for b in $benches; do go build -o "$out.new/$b" "./bench/$b"; done
	) >&2
	rm -rf "$out" && mv "$out.new" "$out"
fi
echo "$out"
