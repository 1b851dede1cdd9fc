#!/usr/bin/env bash
# Runs a local nsqlookupd, nsqd and nsqadmin on 127.0.0.1 with data under ./data.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p data
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

lookupd_args=()
if [ -x build/nsqlookupd ]; then
	./build/nsqlookupd --tcp-address=127.0.0.1:4160 --http-address=127.0.0.1:4161 --broadcast-address=127.0.0.1 &
	pids+=($!)
	lookupd_args=(--lookupd-tcp-address=127.0.0.1:4160)
fi
./build/nsqd --tcp-address=127.0.0.1:4150 --http-address=127.0.0.1:4151 \
	--broadcast-address=127.0.0.1 --data-path=./data "${lookupd_args[@]}" &
pids+=($!)

admin_msg=""
if [ -x build/nsqadmin ]; then
	if [ ${#lookupd_args[@]} -gt 0 ]; then
		admin_source=(--lookupd-http-address=127.0.0.1:4161)
	else
		admin_source=(--nsqd-http-address=127.0.0.1:4151)
	fi
	./build/nsqadmin --http-address=127.0.0.1:4171 "${admin_source[@]}" &
	pids+=($!)
	admin_msg="nsqadmin is up: http://127.0.0.1:4171/"
fi

for _ in $(seq 1 50); do
	curl -fs http://127.0.0.1:4151/ping >/dev/null 2>&1 && break
	sleep 0.1
done
if [ -n "$admin_msg" ]; then
	for _ in $(seq 1 50); do
		curl -fs http://127.0.0.1:4171/ping >/dev/null 2>&1 && break
		sleep 0.1
	done
fi

cat <<MSG

nsqd is up: TCP 127.0.0.1:4150, HTTP 127.0.0.1:4151, data in ./data
nsqlookupd is up: TCP 127.0.0.1:4160, HTTP 127.0.0.1:4161
  curl -s 'http://127.0.0.1:4161/lookup?topic=test'
${admin_msg}

Publish:
  curl -d 'hello world' 'http://127.0.0.1:4151/pub?topic=test'
Consume (in another terminal):
  ./build/nsq_tail --nsqd-tcp-address=127.0.0.1:4150 --topic=test
or watch depths:
  curl -s 'http://127.0.0.1:4151/stats?format=json'

Ctrl-C stops them all.
MSG
wait
