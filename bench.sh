#!/usr/bin/env bash
# Publish/consume throughput of nsqd on loopback.
#
# usage: ./bench.sh [size] [batch-size] [mem-queue-size] [data-path]
#   size            message body in bytes          (default 200)
#   batch-size      messages per MPUB              (default 200)
#   mem-queue-size  nsqd --mem-queue-size          (default 1000000)
#   data-path       nsqd --data-path               (default: a temp dir, removed afterwards)
#   RUNFOR=10s      environment: how long each of bench_writer and bench_reader runs
#
# Builds ./build/{nsqd,bench_writer,bench_reader,bench_channels}, starts nsqd on
# 127.0.0.1:4150/4151, creates topic sub_bench and channel ch, runs bench_writer
# then bench_reader and prints their result lines as PUB: and SUB:. nsqd is
# stopped with SIGTERM however the script ends.
set -euo pipefail

readonly size="${1:-200}"
readonly batch="${2:-200}"
readonly memq="${3:-1000000}"
datapath="${4:-}"
readonly runfor="${RUNFOR:-10s}"
readonly tcp_addr=127.0.0.1:4150
readonly http_addr=127.0.0.1:4151

cd "$(dirname "$0")"

made_datapath=""
nsqd_pid=""
nsqd_log=""

cleanup() {
	local rc=$?
	set +e
	if [[ -n "$nsqd_pid" ]] && kill -0 "$nsqd_pid" 2>/dev/null; then
		echo "# stopping nsqd (pid $nsqd_pid)"
		kill -TERM "$nsqd_pid" 2>/dev/null
		# nsqd flushes its in-memory queues to disk on exit; allow for that.
		for _ in $(seq 1 600); do
			kill -0 "$nsqd_pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$nsqd_pid" 2>/dev/null; then
			echo "# nsqd did not exit after 60s; sending SIGKILL" >&2
			kill -KILL "$nsqd_pid" 2>/dev/null
		fi
		wait "$nsqd_pid" 2>/dev/null
	fi
	if [[ $rc -ne 0 && -n "$nsqd_log" && -s "$nsqd_log" ]]; then
		echo "# last lines of the nsqd log:" >&2
		tail -n 20 "$nsqd_log" >&2
	fi
	[[ -n "$nsqd_log" ]] && rm -f "$nsqd_log"
	[[ -n "$made_datapath" ]] && rm -rf "$made_datapath"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ -z "$datapath" ]]; then
	datapath="$(mktemp -d "${TMPDIR:-/tmp}/nsqd-bench.XXXXXX")"
	made_datapath="$datapath"
fi

echo "# using --mem-queue-size=$memq --data-path=$datapath --size=$size --batch-size=$batch --runfor=$runfor"

echo "# building nsqd and bench tools into ./build/"
mkdir -p build
go build -o build/nsqd ./apps/nsqd
go build -o build/ ./bench/bench_writer ./bench/bench_reader ./bench/bench_channels

if curl -s -o /dev/null "http://$http_addr/ping"; then
	echo "something is already listening on $http_addr; stop it first" >&2
	exit 1
fi

echo "# starting nsqd"
nsqd_log="$(mktemp "${TMPDIR:-/tmp}/nsqd-bench-log.XXXXXX")"
./build/nsqd --mem-queue-size="$memq" --data-path="$datapath" \
	--tcp-address="$tcp_addr" --http-address="$http_addr" >"$nsqd_log" 2>&1 &
nsqd_pid=$!

ready=""
for _ in $(seq 1 100); do
	if ! kill -0 "$nsqd_pid" 2>/dev/null; then
		echo "nsqd exited during startup" >&2
		exit 1
	fi
	if [[ "$(curl -s "http://$http_addr/ping" || true)" == "OK" ]]; then
		ready=1
		break
	fi
	sleep 0.1
done
if [[ -z "$ready" ]]; then
	echo "nsqd did not answer /ping within 10s" >&2
	exit 1
fi

echo "# creating topic/channel"
curl -sS --fail -o /dev/null -X POST "http://$http_addr/topic/create?topic=sub_bench"
curl -sS --fail -o /dev/null -X POST "http://$http_addr/channel/create?topic=sub_bench&channel=ch"

echo "# running bench_writer"
pub="$(./build/bench_writer --runfor="$runfor" --size="$size" --batch-size="$batch" \
	--topic=sub_bench --nsqd-tcp-address="$tcp_addr")"
echo "PUB: $pub"

echo "# running bench_reader"
sub="$(./build/bench_reader --runfor="$runfor" --size="$size" \
	--topic=sub_bench --channel=ch --nsqd-tcp-address="$tcp_addr")"
echo "SUB: $sub"
