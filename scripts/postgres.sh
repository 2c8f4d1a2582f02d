#!/usr/bin/env bash
# Run a throwaway PostgreSQL cluster for Weir's tests and examples, with one command and without
# Docker, from Debian's postgresql package (scripts/setup.sh postgres installs it):
#
#   scripts/postgres.sh start          initdb on the first start, then start it in the background
#                                      and wait until it accepts connections
#   scripts/postgres.sh stop           stop it (fast shutdown; nothing to do when not running)
#   scripts/postgres.sh restart        stop, then start (tests restart the database mid-run)
#   scripts/postgres.sh status         exit 0 if running (prints the URL), 3 if not
#   scripts/postgres.sh url            print the connection URL, nothing else
#   scripts/postgres.sh psql [ARGS...] psql as weir on database weir over TCP, e.g. -c 'select 1'
#   scripts/postgres.sh logs [-f]      last 200 lines of the server log (-f: follow)
#
# The cluster listens on 127.0.0.1:$WEIR_POSTGRES_PORT only (default 5433: Debian's own cluster,
# which installing the package may create and start, has 5432, and is not used). Its superuser
# is weir with password weir-secret, and it has a database weir owned by weir. TCP clients must
# give the password (scram-sha-256); the Unix socket in $WEIR_POSTGRES_DIR/socket trusts every
# local user. max_prepared_transactions is $WEIR_POSTGRES_MAX_PREPARED (default 64), so two-phase
# commit (PREPARE TRANSACTION) works.
# The connection settings are written to $WEIR_POSTGRES_DIR/postgres.env (shell syntax:
# POSTGRES_URL, without the password, POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_HOST,
# POSTGRES_PORT, POSTGRES_DB); `status` prints its path.
#
# PostgreSQL refuses to run as root: as root, initdb, pg_ctl and the server run as the system
# user weir-pg (created with useradd when missing), which owns $WEIR_POSTGRES_DIR; any directory
# above it that weir-pg cannot pass through (e.g. /root, mode 700) is given search permission
# for others (o+x: no listing) and the script says so.
#
# Environment (all optional):
#   WEIR_POSTGRES_PORT           TCP port, default 5433
#   WEIR_POSTGRES_DIR            cluster (data/), socket/, log and postgres.env,
#                                default ~/.cache/weir/postgres-run-<port>
#   WEIR_POSTGRES_MAX_PREPARED   max_prepared_transactions, default 64 (0 turns PREPARE off)
#   WEIR_POSTGRES_START_TIMEOUT  seconds to wait for the server to accept connections, default 60
#   WEIR_POSTGRES_BIN            directory of initdb, pg_ctl and psql, default the newest
#                                /usr/lib/postgresql/*/bin (else the ones on PATH)
set -euo pipefail

PORT=${WEIR_POSTGRES_PORT:-5433}
RUN_DIR=${WEIR_POSTGRES_DIR:-$HOME/.cache/weir/postgres-run-$PORT}
START_TIMEOUT=${WEIR_POSTGRES_START_TIMEOUT:-60}
MAX_PREPARED=${WEIR_POSTGRES_MAX_PREPARED:-64}

HOST=127.0.0.1
DB_USER=weir
DB_PASSWORD=weir-secret
DB_NAME=weir
URL=postgresql://$DB_USER@$HOST:$PORT/$DB_NAME
# The unprivileged user the server runs as when this script runs as root.
PG_OS_USER=weir-pg

say() { printf 'postgres.sh: %s\n' "$*"; }
die() { printf 'postgres.sh: error: %s\n' "$*" >&2; exit 1; }

usage() {
    sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

validate_settings() {
    local n
    for n in PORT START_TIMEOUT MAX_PREPARED; do
        [[ ${!n} =~ ^[0-9]+$ ]] || die "$n must be a number, got '${!n}'"
    done
    ((PORT > 0 && PORT < 65536)) || die "WEIR_POSTGRES_PORT must be a TCP port, got $PORT"
    # Absolute, so that commands run from / (as weir-pg) and the server see the same paths.
    RUN_DIR=$(realpath -m "$RUN_DIR")
    DATA_DIR=$RUN_DIR/data
    SOCKET_DIR=$RUN_DIR/socket
    LOG_FILE=$RUN_DIR/postgres.log
    ENV_FILE=$RUN_DIR/postgres.env
    # A Unix socket path is limited to 107 bytes (sun_path); the server would refuse to start.
    local socket=$SOCKET_DIR/.s.PGSQL.$PORT
    ((${#socket} <= 107)) || die "socket path $socket is longer than 107 bytes: set a shorter WEIR_POSTGRES_DIR"
}

# Debian installs the server binaries outside PATH, one directory per major version.
find_binaries() {
    local bin=${WEIR_POSTGRES_BIN:-}
    if [[ -z $bin ]]; then
        bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    fi
    if [[ -z $bin ]] && command -v pg_ctl >/dev/null; then
        bin=$(dirname "$(command -v pg_ctl)")
    fi
    [[ -n $bin && -x $bin/initdb && -x $bin/pg_ctl && -x $bin/psql ]] ||
        die "no PostgreSQL server binaries (initdb, pg_ctl, psql) in ${bin:-/usr/lib/postgresql/*/bin}: run 'bash scripts/setup.sh postgres' (Debian: apt-get install postgresql)"
    PG_BIN=$bin
}

# as_pg CMD...: runs CMD as the user the server runs as (weir-pg when we are root, else us),
# from / (weir-pg may not be allowed into the caller's directory) and without our lock (fd 9),
# which the server would otherwise hold for its whole life.
as_pg() {
    if [[ $(id -u) -eq 0 ]]; then
        (cd / && exec runuser -u "$PG_OS_USER" -- "$@") 9>&-
    else
        (cd / && exec "$@") 9>&-
    fi
}

# As root: the weir-pg user must exist, own the run dir and be able to reach it.
prepare_os_user() {
    [[ $(id -u) -eq 0 ]] || return 0
    command -v runuser >/dev/null || die "running as root needs runuser (util-linux) to start PostgreSQL as $PG_OS_USER"
    if ! id -u "$PG_OS_USER" >/dev/null 2>&1; then
        command -v useradd >/dev/null || die "running as root needs useradd (passwd) to create the user $PG_OS_USER"
        say "creating the system user $PG_OS_USER (PostgreSQL does not run as root)"
        useradd --system --no-create-home --shell /usr/sbin/nologin "$PG_OS_USER"
    fi
    # Top down: a directory cannot be searched when one above it cannot be.
    local dir=$RUN_DIR dirs=()
    while [[ $dir != / ]]; do
        dir=$(dirname "$dir")
        dirs=("$dir" "${dirs[@]}")
    done
    for dir in "${dirs[@]}"; do
        if ! as_pg test -x "$dir"; then
            say "giving others search permission (chmod o+x) on $dir so that $PG_OS_USER can reach $RUN_DIR"
            chmod o+x "$dir"
        fi
    done
    find "$RUN_DIR" ! -user "$PG_OS_USER" -exec chown "$PG_OS_USER:" {} +
    as_pg test -w "$RUN_DIR" || die "$PG_OS_USER cannot write to $RUN_DIR"
}

# Serialise start/stop/restart on one run dir.
lock_run_dir() {
    exec 9>"$RUN_DIR/.lock"
    flock -w $((START_TIMEOUT + 120)) 9 || die "another postgres.sh holds $RUN_DIR/.lock"
}

is_running() {
    [[ -f $DATA_DIR/PG_VERSION ]] || return 1
    as_pg "$PG_BIN/pg_ctl" status -D "$DATA_DIR" >/dev/null 2>&1
}

server_pid() {
    head -n 1 "$DATA_DIR/postmaster.pid" 2>/dev/null || echo '?'
}

port_in_use() {
    (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

print_log_tail() {
    if [[ -f $LOG_FILE ]]; then
        printf -- '----- last 30 lines of %s -----\n' "$LOG_FILE" >&2
        tail -n 30 "$LOG_FILE" >&2
        printf -- '-----\n' >&2
    fi
}

# ---------------------------------------------------------------------------
# start
# ---------------------------------------------------------------------------

# initdb into a scratch directory renamed into place only when complete, so an interrupted
# initdb never leaves a half-made cluster that later starts would take for a real one.
init_cluster_once() {
    [[ -f $DATA_DIR/PG_VERSION ]] && return 0
    [[ ! -e $DATA_DIR ]] || die "$DATA_DIR exists but holds no cluster (no PG_VERSION): remove it"
    local scratch=$RUN_DIR/data.initdb pwfile=$RUN_DIR/.pwfile
    rm -rf "$scratch"
    (umask 077 && printf '%s\n' "$DB_PASSWORD" >"$pwfile")
    [[ $(id -u) -ne 0 ]] || chown "$PG_OS_USER:" "$pwfile"
    say "initdb: a new cluster in $DATA_DIR (superuser $DB_USER)"
    if ! as_pg "$PG_BIN/initdb" -D "$scratch" -U "$DB_USER" --pwfile="$pwfile" \
        --auth-local=trust --auth-host=scram-sha-256 \
        --encoding=UTF8 --locale=C.UTF-8 --no-sync >"$RUN_DIR/initdb.log" 2>&1; then
        rm -f "$pwfile"
        tail -n 30 "$RUN_DIR/initdb.log" >&2
        die "initdb failed (log: $RUN_DIR/initdb.log)"
    fi
    rm -f "$pwfile"
    mv "$scratch" "$DATA_DIR"
}

# Keeps one old log: the server appends to postgres.log across restarts until it passes 10 MB.
rotate_log() {
    if [[ -f $LOG_FILE ]] && (($(stat -c %s "$LOG_FILE") > 10 * 1024 * 1024)); then
        mv -f "$LOG_FILE" "$LOG_FILE.1"
    fi
}

# The settings are given on each start (not written into the cluster), so a changed port or
# directory takes effect on the next start. pg_ctl hands -o to /bin/sh, hence the quoting.
launch_server() {
    as_pg mkdir -p "$SOCKET_DIR"
    local opts
    opts="-c listen_addresses=$HOST -p $PORT -c max_prepared_transactions=$MAX_PREPARED"
    opts+=" -c unix_socket_directories=$(printf %q "$SOCKET_DIR")"
    if ! as_pg "$PG_BIN/pg_ctl" start -D "$DATA_DIR" -l "$LOG_FILE" -w -t "$START_TIMEOUT" \
        -o "$opts" >/dev/null; then
        print_log_tail
        die "PostgreSQL did not start within ${START_TIMEOUT} s (log: $LOG_FILE)"
    fi
}

# Over the trusted socket: the database weir, made once after initdb (and again if dropped).
ensure_database() {
    local psql=("$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$SOCKET_DIR" -p "$PORT" -U "$DB_USER" -d postgres)
    if [[ -z $(as_pg "${psql[@]}" -tA -c "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'") ]]; then
        say "creating database $DB_NAME owned by $DB_USER"
        as_pg "${psql[@]}" -c "CREATE DATABASE $DB_NAME OWNER $DB_USER"
    fi
}

# Regenerated on every start, like kafka.sh's secured.env.
write_env_file() {
    cat >"$ENV_FILE.tmp" <<EOF
# Written by scripts/postgres.sh start: the test PostgreSQL cluster.
POSTGRES_URL=$URL
POSTGRES_USER=$DB_USER
POSTGRES_PASSWORD=$DB_PASSWORD
POSTGRES_HOST=$HOST
POSTGRES_PORT=$PORT
POSTGRES_DB=$DB_NAME
EOF
    mv "$ENV_FILE.tmp" "$ENV_FILE"
}

start_locked() {
    if is_running; then
        say "already running (pid $(server_pid)); nothing to do"
        write_env_file
        echo "url: $URL (password: $DB_PASSWORD)"
        echo "connection settings: $ENV_FILE"
        return 0
    fi
    # Fail clearly rather than have pg_ctl wait for a server that cannot bind.
    port_in_use "$PORT" && die "port $PORT on $HOST is already in use (set WEIR_POSTGRES_PORT)"
    init_cluster_once
    rotate_log
    say "starting on $HOST:$PORT, waiting up to ${START_TIMEOUT} s (dir $RUN_DIR)"
    launch_server
    ensure_database
    write_env_file
    say "started pid $(server_pid)"
    echo "url: $URL (password: $DB_PASSWORD)"
    echo "connection settings: $ENV_FILE"
}

stop_locked() {
    if ! is_running; then
        say "not running; dir $RUN_DIR"
        return 0
    fi
    say "stopping pid $(server_pid) (port $PORT, dir $RUN_DIR)"
    as_pg "$PG_BIN/pg_ctl" stop -D "$DATA_DIR" -m fast -w -t 60 >/dev/null ||
        die "PostgreSQL did not stop (log: $LOG_FILE)"
    say "stopped"
}

# ---------------------------------------------------------------------------
# commands
# ---------------------------------------------------------------------------

setup_locked() {
    validate_settings
    find_binaries
    mkdir -p "$RUN_DIR"
    lock_run_dir
    prepare_os_user
}

cmd_start() { setup_locked; start_locked; }
cmd_stop() { setup_locked; stop_locked; }
cmd_restart() { setup_locked; stop_locked; start_locked; }

cmd_status() {
    validate_settings
    find_binaries
    if is_running; then
        echo "running: pid $(server_pid), url $URL (password $DB_PASSWORD), dir $RUN_DIR"
        echo "connection settings: $ENV_FILE"
        return 0
    fi
    echo "not running: port $PORT, dir $RUN_DIR"
    return 3
}

cmd_url() {
    echo "$URL"
}

cmd_psql() {
    validate_settings
    find_binaries
    PGPASSWORD=$DB_PASSWORD exec "$PG_BIN/psql" -h "$HOST" -p "$PORT" -U "$DB_USER" -d "$DB_NAME" "$@"
}

cmd_logs() {
    validate_settings
    [[ -f $LOG_FILE ]] || die "no server log yet at $LOG_FILE"
    case ${1:-} in
        -f | --follow) exec tail -n 200 -F "$LOG_FILE" ;;
        "") tail -n 200 "$LOG_FILE" ;;
        *) usage ;;
    esac
}

main() {
    local cmd=${1:-}
    (($#)) && shift
    case $cmd in
        start) cmd_start ;;
        stop) cmd_stop ;;
        restart) cmd_restart ;;
        status) cmd_status ;;
        url) cmd_url ;;
        psql) cmd_psql "$@" ;;
        logs) cmd_logs "$@" ;;
        *) usage ;;
    esac
}

main "$@"
