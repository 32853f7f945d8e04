#!/usr/bin/env bash
# End-to-end: a real kube-apiserver (and kube-controller-manager, for namespace
# deletion) v1.37.x against kite, driven by kubectl. Loopback only.
#
# Builds kite, kube-apiserver, kube-controller-manager, kubectl and etcdctl
# (Go build cache makes repeats fast), starts kite, kube-apiserver and a
# kube-controller-manager running only the namespace and garbage-collector
# controllers, checks that kube-apiserver accepts every manifest under
# deploy/kubernetes (kubectl apply --dry-run=server), then runs a kubectl
# workload that checks results. Exits non-zero on any failed check; every
# process it starts is stopped on exit.
#
# Environment:
#   KITE_KUBE_KEEP=1   keep the work directory (logs, data) after the run, and
#                      the Postgres database of KITE_KUBE_DATASTORE=postgres
#   KITE_KUBE_WORK=DIR use DIR as the work directory (default: mktemp)
#   KITE_DATASTORE_ENDPOINT=URL
#                      kite's --datastore-endpoint, at the start and at the
#                      restart (default: none, SQLite kite.db in kite's data dir)
#   KITE_KUBE_DATASTORE=sqlite|postgres|mysql|raftsql
#                      postgres: create a fresh database kite_kube_<hex> with
#                      createdb on 127.0.0.1 (user postgres; PGPORT, default
#                      5432), run kite on it and drop it at exit
#                      mysql: the same on the MySQL or MariaDB server at
#                      127.0.0.1 (user root, empty password; MYSQL_PORT,
#                      default 3306), with the mysql client
#                      raftsql: a cluster of three kite members (etcd's command
#                      line, each with its own data dir and SQLite);
#                      kube-apiserver and etcdctl get all three client URLs,
#                      and the SIGKILL restart kills the raft leader
#   KITE_KUBE_TLS=1    kite serves https with --client-cert-auth (a CA, server
#                      and client certificates made here with openssl), and
#                      kube-apiserver, etcdctl and curl reach it with
#                      --etcd-cafile/--etcd-certfile/--etcd-keyfile and the like
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export PATH="/usr/local/go/bin:$PATH"

# Storage: DATASTORE is what kite runs on (sqlite, postgres, mysql or raftsql),
# ENDPOINT its --datastore-endpoint ("" for kite.db in its data dir).
KITE_KUBE_DATASTORE=${KITE_KUBE_DATASTORE:-sqlite}
ENDPOINT=${KITE_DATASTORE_ENDPOINT:-}
PG_DB=""      # the database this script created (KITE_KUBE_DATASTORE=postgres)
COPY_PG_DB="" # the database it created for the kite copy test (same mode)
PG_CHECK=""   # a psql connection string to look into kite's database
MY_DB=""      # the database this script created (KITE_KUBE_DATASTORE=mysql)
case "$KITE_KUBE_DATASTORE" in
sqlite) ;;
postgres)
  if [ -n "$ENDPOINT" ]; then
    echo "KITE_KUBE_DATASTORE=postgres creates a database of its own: unset KITE_DATASTORE_ENDPOINT" >&2
    exit 2
  fi
  ;;
mysql)
  if [ -n "$ENDPOINT" ]; then
    echo "KITE_KUBE_DATASTORE=mysql creates a database of its own: unset KITE_DATASTORE_ENDPOINT" >&2
    exit 2
  fi
  ;;
raftsql)
  if [ -n "$ENDPOINT" ]; then
    echo "KITE_KUBE_DATASTORE=raftsql runs three members, each on the SQLite of its data dir: unset KITE_DATASTORE_ENDPOINT" >&2
    exit 2
  fi
  ;;
*)
  echo "KITE_KUBE_DATASTORE=$KITE_KUBE_DATASTORE: want sqlite, postgres, mysql or raftsql" >&2
  exit 2
  ;;
esac
case "$ENDPOINT" in
"" | sqlite://*) DATASTORE=sqlite ;;
postgres://* | postgresql://*) DATASTORE=postgres PG_CHECK=$ENDPOINT ;;
*)
  echo "KITE_DATASTORE_ENDPOINT: want sqlite://PATH or postgres://..." >&2
  exit 2
  ;;
esac
if [ "$KITE_KUBE_DATASTORE" = postgres ]; then DATASTORE=postgres; fi
if [ "$KITE_KUBE_DATASTORE" = mysql ]; then DATASTORE=mysql; fi
if [ "$KITE_KUBE_DATASTORE" = raftsql ]; then DATASTORE=raftsql; fi
PG_ADMIN=(-h 127.0.0.1 -p "${PGPORT:-5432}" -U postgres)
MY_ADMIN=(-h 127.0.0.1 -P "${MYSQL_PORT:-3306}" -u root)

WORK=${KITE_KUBE_WORK:-$(mktemp -d /tmp/kite-kube.XXXXXX)}
mkdir -p "$WORK"
BIN="$WORK/bin"
LOGS="$WORK/logs"
mkdir -p "$BIN" "$LOGS"

EVENT_TTL=10s
COMPACTION_INTERVAL=10s

T0=$(date +%s)
PASSED=0
FAILED=0
declare -a FAILURES=()
declare -A PIDS=()
declare -a TIMINGS=()

log() { printf '[%4ds] %s\n' "$(($(date +%s) - T0))" "$*"; }
pass() { PASSED=$((PASSED + 1)); log "PASS: $*"; }
fail() { FAILED=$((FAILED + 1)); FAILURES+=("$*"); log "FAIL: $*"; }
die() { fail "$*"; exit 1; }
check() { # check DESCRIPTION GOT WANT
  if [ "$2" = "$3" ]; then pass "$1 ($2)"; else fail "$1: got '$2', want '$3'"; fi
}

stop_pid() { # stop_pid NAME [SIGNAL]: stop a process this script started
  local name=$1 sig=${2:-TERM} pid=${PIDS[$1]:-}
  [ -n "$pid" ] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill "-$sig" "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
  unset "PIDS[$name]"
}

summary() {
  echo
  echo "================ kube-apiserver on kite: summary ================"
  echo "kubernetes: kube-apiserver/kube-controller-manager/kubectl $(sed -n 's/^\tk8s.io\/kubernetes \(v[^ ]*\).*/\1/p' "$HERE/go.mod")"
  echo "kite storage: $(storage_desc)"
  echo "kite client URL$([ "$DATASTORE" = raftsql ] && echo s): ${KITE_URL:-(not started)}$([ "${KITE_KUBE_TLS:-}" = 1 ] && echo " (mutual TLS, KITE_KUBE_TLS=1)")"
  for t in "${TIMINGS[@]}"; do echo "  $t"; done
  for f in "${FAILURES[@]}"; do echo "  FAILED: $f"; done
  echo "total $(($(date +%s) - T0))s; work dir $WORK"
  echo "kube-e2e: $PASSED passed, $FAILED failed"
}

storage_desc() {
  if [ "$DATASTORE" = raftsql ]; then
    echo "raftsql, 3 members, each with kite.db in its own data dir (KITE_KUBE_DATASTORE=raftsql)"
  elif [ "$DATASTORE" = mysql ]; then
    echo "mysql, database ${MY_DB:-(not created)} on 127.0.0.1:${MYSQL_PORT:-3306} (KITE_KUBE_DATASTORE=mysql)"
  elif [ "$KITE_KUBE_DATASTORE" = postgres ]; then
    echo "postgres, database ${PG_DB:-(not created)} on 127.0.0.1:${PGPORT:-5432} (KITE_KUBE_DATASTORE=postgres)"
  elif [ "$DATASTORE" = postgres ]; then
    echo "postgres, KITE_DATASTORE_ENDPOINT $(redact "$ENDPOINT")"
  elif [ -n "$ENDPOINT" ]; then
    echo "sqlite, $ENDPOINT"
  else
    echo "sqlite, kite.db in kite's data dir"
  fi
}
redact() { sed -E 's#(://[^:/@]*:)[^@]*@#\1xxxxx@#' <<<"$1"; }

# drop_db NAME: drop a database this script created, once kite has stopped.
drop_db() {
  local db=$1
  [ -n "$db" ] || return 0
  if [ "${KITE_KUBE_KEEP:-}" = 1 ]; then
    echo "KITE_KUBE_KEEP=1: keeping database $db (dropdb -h 127.0.0.1 -U postgres --force $db)"
    return 0
  fi
  if psql "${PG_ADMIN[@]}" -d postgres -q -v ON_ERROR_STOP=1 \
    -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>"$WORK/dropdb.err"; then
    echo "dropped database $db"
  else
    fail "drop database $db: $(cat "$WORK/dropdb.err")"
  fi
}

# drop_mysql_db NAME: the same for a MySQL database.
drop_mysql_db() {
  local db=$1
  [ -n "$db" ] || return 0
  if [ "${KITE_KUBE_KEEP:-}" = 1 ]; then
    echo "KITE_KUBE_KEEP=1: keeping database $db (mysql -h 127.0.0.1 -u root -e 'DROP DATABASE $db')"
    return 0
  fi
  if mysql "${MY_ADMIN[@]}" -e "DROP DATABASE IF EXISTS \`$db\`" 2>"$WORK/dropdb.err"; then
    echo "dropped database $db"
  else
    fail "drop database $db: $(cat "$WORK/dropdb.err")"
  fi
}

cleanup() {
  local rc=$?
  for name in "${!PIDS[@]}"; do stop_pid "$name"; done
  drop_db "$PG_DB"
  drop_mysql_db "$MY_DB"
  drop_db "$COPY_PG_DB"
  if [ "$rc" -ne 0 ] || [ "$FAILED" -ne 0 ]; then
    for f in "$LOGS"/*.log; do
      [ -f "$f" ] || continue
      echo "---- last lines of $f"
      tail -n 25 "$f"
    done
  fi
  summary
  if [ "${KITE_KUBE_KEEP:-}" != 1 ] && [ -z "${KITE_KUBE_WORK:-}" ]; then rm -rf "$WORK"; fi
  if [ "$FAILED" -ne 0 ] && [ "$rc" -eq 0 ]; then rc=1; fi
  exit "$rc"
}
trap cleanup EXIT
exec 3>&1 # the ERR trap reports here even inside redirected commands
trap 'log "command failed (line $LINENO): $BASH_COMMAND" >&3' ERR
trap 'exit 130' INT TERM

timed() { # timed LABEL CMD...: run CMD, record its duration, return its status
  local label=$1 s rc=0
  shift
  s=$(date +%s)
  # In a condition (timed ... || fail) the caller must see CMD's status,
  # not that of the bookkeeping after it.
  "$@" || rc=$?
  TIMINGS+=("$label: $(($(date +%s) - s))s")
  return "$rc"
}

# wait_for SECONDS DESCRIPTION CMD...: poll CMD every 0.5 s, bounded.
wait_for() {
  local limit=$1 desc=$2 deadline
  shift 2
  deadline=$(($(date +%s) + limit))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      fail "$desc: not true within ${limit}s"
      return 1
    fi
    sleep 0.5
  done
}

# free_port picks a port below the kernel's ephemeral range
# (/proc/sys/net/ipv4/ip_local_port_range, 32768-60999 by default): a port
# picked inside it can be taken by an outgoing connection (kube-apiserver
# opens many) before the server that was to bind it starts.
free_port() {
  local p low
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  [ "$low" -gt 21000 ] || low=32768
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % (low - 20000)))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

# ---------------------------------------------------------------- build
# Chained with &&: timed runs it as a condition, where set -e does not stop
# at the first failing command.
build() {
  log "building kite and etcdctl" &&
    go build -C "$ROOT" -tags kitetest -o "$BIN/kite" ./cmd/kite &&
    go build -C "$ROOT" -o "$BIN/etcdctl" go.etcd.io/etcd/etcdctl/v3 &&
    log "building kube-apiserver, kube-controller-manager, kubectl (cold: many minutes)" &&
    (cd "$HERE" && go build -o "$BIN/" k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl)
}
timed "build (kite, etcdctl, kube-apiserver, kube-controller-manager, kubectl)" build ||
  die "build of kite, etcdctl, kube-apiserver, kube-controller-manager or kubectl"

if [ "$KITE_KUBE_DATASTORE" = postgres ]; then
  # A fresh database for this run; cleanup drops it after kite stopped.
  name="kite_kube_$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
  if ! createdb "${PG_ADMIN[@]}" "$name" 2>"$LOGS/createdb.log"; then
    die "createdb $name on 127.0.0.1:${PGPORT:-5432} (user postgres): $(cat "$LOGS/createdb.log")"
  fi
  PG_DB=$name
  ENDPOINT="postgres://postgres@127.0.0.1:${PGPORT:-5432}/$PG_DB?sslmode=disable"
  PG_CHECK=$ENDPOINT
fi
if [ "$KITE_KUBE_DATASTORE" = mysql ]; then
  name="kite_kube_$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
  if ! mysql "${MY_ADMIN[@]}" -e "CREATE DATABASE $name" 2>"$LOGS/createdb.log"; then
    die "create database $name on 127.0.0.1:${MYSQL_PORT:-3306} (user root): $(cat "$LOGS/createdb.log")"
  fi
  MY_DB=$name
  ENDPOINT="mysql://root@tcp(127.0.0.1:${MYSQL_PORT:-3306})/$MY_DB"
fi
log "kite storage: $(storage_desc)"

KITE_PORT=$(free_port)
KITE_URL="http://127.0.0.1:$KITE_PORT"
KITE_DATA="$WORK/kite-data"
KITE_STORAGE_FLAGS=()
[ -z "$ENDPOINT" ] || KITE_STORAGE_FLAGS=(--datastore-endpoint "$ENDPOINT")
# TLS (KITE_KUBE_TLS=1): the flags of each client of kite.
KITE_TLS_FLAGS=() ETCDCTL_TLS=() CURL_TLS=() APISERVER_ETCD_TLS=()
if [ "${KITE_KUBE_TLS:-}" = 1 ]; then
  PKI="$WORK/pki"
  mkdir -p "$PKI"
  log "KITE_KUBE_TLS=1: a CA, kite's server certificate and a client certificate (openssl)"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=kite-kube-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$PKI/ca.key" -out "$PKI/ca.crt" 2>/dev/null
  issue() { # issue NAME EXTENSIONS: NAME.crt and NAME.key signed by the CA
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$1" -keyout "$PKI/$1.key" -out "$PKI/$1.csr" 2>/dev/null
    printf '%s\n' "$2" >"$PKI/$1.ext"
    openssl x509 -req -in "$PKI/$1.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
      -days 2 -extfile "$PKI/$1.ext" -out "$PKI/$1.crt" 2>/dev/null
  }
  issue kite "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth"
  issue kube-apiserver-etcd-client "extendedKeyUsage=clientAuth"
  KITE_URL="https://127.0.0.1:$KITE_PORT"
  KITE_TLS_FLAGS=(--cert-file "$PKI/kite.crt" --key-file "$PKI/kite.key"
    --trusted-ca-file "$PKI/ca.crt" --client-cert-auth)
  ETCDCTL_TLS=(--cacert "$PKI/ca.crt" --cert "$PKI/kube-apiserver-etcd-client.crt" --key "$PKI/kube-apiserver-etcd-client.key")
  CURL_TLS=(--cacert "$PKI/ca.crt" --cert "$PKI/kube-apiserver-etcd-client.crt" --key "$PKI/kube-apiserver-etcd-client.key")
  APISERVER_ETCD_TLS=(--etcd-cafile="$PKI/ca.crt" --etcd-certfile="$PKI/kube-apiserver-etcd-client.crt"
    --etcd-keyfile="$PKI/kube-apiserver-etcd-client.key")
fi
# KITE_URLS: the client URL of every kite (one, or raftsql's three members);
# KITE_URL: all of them, comma-separated, for etcdctl and --etcd-servers.
KITE_URLS=("$KITE_URL")
KITE_DATAS=("$KITE_DATA")
if [ "$DATASTORE" = raftsql ]; then
  # Three members n0..n2, each with a client and a peer port (all distinct),
  # its own data dir (member/wal, member/snap, kite.db), on the loopback.
  ports=("$KITE_PORT")
  while [ "${#ports[@]}" -lt 6 ]; do
    p=$(free_port)
    [[ " ${ports[*]} " == *" $p "* ]] || ports+=("$p")
  done
  KITE_URLS=() PEER_URLS=() KITE_DATAS=() INITIAL_CLUSTER=""
  for i in 0 1 2; do
    KITE_URLS+=("${KITE_URL%%://*}://127.0.0.1:${ports[2 * i]}")
    PEER_URLS+=("http://127.0.0.1:${ports[2 * i + 1]}")
    KITE_DATAS+=("$WORK/kite-n$i")
    INITIAL_CLUSTER+="${INITIAL_CLUSTER:+,}n$i=${PEER_URLS[i]}"
  done
  CLUSTER_TOKEN="kite-kube-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
  KITE_URL=$(IFS=,; echo "${KITE_URLS[*]}")
fi
etcdctl() { etcdctl_at "$KITE_URL" "$@"; }
etcdctl_at() { # etcdctl_at ENDPOINTS ARGS...: etcdctl on these comma-separated endpoints only
  local endpoints=$1
  shift
  "$BIN/etcdctl" --endpoints="$endpoints" "${ETCDCTL_TLS[@]}" --command-timeout=10s "$@"
}
kite_curl() { curl -fsS "${CURL_TLS[@]}" "$@"; }
kite_count() { # kite_count KEY [--prefix]: number of keys kite holds
  etcdctl get "$@" --keys-only -w json | jq -r '.count // 0'
}
# status_json ENDPOINTS [ARGS]: etcdctl endpoint status -w json with the
# member, leader and cluster IDs as strings (jq 1.6 reads numbers as doubles,
# which would make distinct 64-bit IDs compare equal).
status_json() {
  local endpoints=$1
  shift
  etcdctl_at "$endpoints" endpoint status -w json "$@" 2>/dev/null |
    sed -E 's/"(cluster_id|member_id|leader)":([0-9]+)/"\1":"\2"/g'
}

start_member() { # start_member I: raftsql member nI, etcd's command line
  local i=$1
  "$BIN/kite" --name "n$i" --data-dir "${KITE_DATAS[i]}" \
    --listen-client-urls "${KITE_URLS[i]}" --advertise-client-urls "${KITE_URLS[i]}" "${KITE_TLS_FLAGS[@]}" \
    --listen-peer-urls "${PEER_URLS[i]}" --initial-advertise-peer-urls "${PEER_URLS[i]}" \
    --initial-cluster "$INITIAL_CLUSTER" --initial-cluster-state new --initial-cluster-token "$CLUSTER_TOKEN" \
    --log-level warn >>"$LOGS/kite-n$i.log" 2>&1 &
  PIDS[kite-n$i]=$!
}
start_kite() {
  if [ "$DATASTORE" = raftsql ]; then
    local i
    for i in 0 1 2; do start_member "$i"; done
    for i in 0 1 2; do
      wait_for 60 "member n$i answers /health" kite_curl "${KITE_URLS[i]}/health" || return 1
    done
    return 0
  fi
  start_single_kite kite "$KITE_DATA" "$KITE_URL" "${KITE_STORAGE_FLAGS[@]}"
}
# start_single_kite NAME DATA-DIR URL [STORAGE-FLAGS...]: one kite (not
# raftsql) logging to NAME.log, waited for.
start_single_kite() {
  local name=$1 data=$2 url=$3
  shift 3
  "$BIN/kite" --name kite-kube --data-dir "$data" "$@" \
    --listen-client-urls "$url" --advertise-client-urls "$url" "${KITE_TLS_FLAGS[@]}" \
    --log-level warn >>"$LOGS/$name.log" 2>&1 &
  PIDS[$name]=$!
  wait_for 30 "$name answers /health" kite_curl "$url/health"
}
if [ "$DATASTORE" = raftsql ]; then
  log "starting a raftsql cluster of 3 kite members: $INITIAL_CLUSTER, clients on $KITE_URL"
else
  log "starting kite on $KITE_URL"
fi
start_kite || die "kite did not start"
if [ "${KITE_KUBE_TLS:-}" = 1 ]; then
  # Mutual TLS is enforced: without a client certificate kite refuses.
  if curl -fsS --max-time 5 --cacert "$PKI/ca.crt" "${KITE_URLS[0]}/health" >/dev/null 2>&1; then
    fail "kite answered a client without a certificate"
  else
    pass "kite refuses a client without a certificate"
  fi
  if "$BIN/etcdctl" --endpoints="${KITE_URLS[0]}" --cacert "$PKI/ca.crt" --dial-timeout=2s --command-timeout=3s get x >/dev/null 2>&1; then
    fail "etcdctl without a client certificate was served"
  else
    pass "etcdctl without a client certificate is refused"
  fi
fi

# raftsql: the leader, from endpoint status (status.leader == header.member_id).
# leader_of ENDPOINTS: print "INDEX MEMBER_ID TERM" of the leader, when every
# member answering on ENDPOINTS answers, they agree on the leader and it is
# one of them.
leader_of() {
  local js n lead i
  js=$(status_json "$1") || return 1
  n=$(jq 'length' <<<"$js")
  [ "$n" -eq "$(tr ',' '\n' <<<"$1" | wc -l)" ] || return 1
  [ "$(jq '[.[].Status.leader] | unique | length' <<<"$js")" = 1 ] || return 1
  lead=$(jq -r '.[] | select(.Status.leader == .Status.header.member_id) | .Endpoint' <<<"$js")
  [ "$(wc -w <<<"$lead")" = 1 ] || return 1
  for i in 0 1 2; do
    if [ "${KITE_URLS[i]:-}" = "$lead" ] || [ "${KITE_URLS[i]#*://}" = "$lead" ]; then
      echo "$i $(jq -r '.[0].Status.leader' <<<"$js") $(jq -r '[.[].Status.raftTerm] | max' <<<"$js")"
      return 0
    fi
  done
  return 1
}
# cluster_ok ENDPOINT: endpoint status --cluster through ENDPOINT lists the
# three members, one cluster, all with the same leader, which is one of them.
cluster_ok() {
  local js
  js=$(status_json "$1" --cluster) || return 1
  [ "$(jq 'length' <<<"$js")" = 3 ] &&
    [ "$(jq '[.[].Status.header.member_id] | unique | length' <<<"$js")" = 3 ] &&
    [ "$(jq '[.[].Status.header.cluster_id] | unique | length' <<<"$js")" = 1 ] &&
    [ "$(jq '[.[].Status.leader] | unique | length' <<<"$js")" = 1 ] &&
    [ "$(jq '[.[] | select(.Status.leader == .Status.header.member_id)] | length' <<<"$js")" = 1 ]
}
if [ "$DATASTORE" = raftsql ]; then
  first_leader() { read -r L _ T < <(leader_of "$KITE_URL" || true); }
  wait_for 30 "the raftsql cluster has one leader" first_leader &&
    pass "raftsql cluster: n$L is the leader of all three members (term $T)"
  wait_for 30 "endpoint status --cluster: 3 members, one leader" cluster_ok "${KITE_URLS[0]}" &&
    pass "endpoint status --cluster: 3 members, one cluster, one leader"
fi

# ------------------------------------------------------- certs and tokens
openssl genrsa -out "$WORK/sa.key" 2048 2>/dev/null
openssl rsa -in "$WORK/sa.key" -pubout -out "$WORK/sa.pub" 2>/dev/null
TOKEN=$(openssl rand -hex 24)
echo "$TOKEN,kite-admin,kite-admin-uid,\"system:masters\"" >"$WORK/tokens.csv"

API_PORT=$(free_port)
KCM_PORT=$(free_port)
cat >"$WORK/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kite
  cluster:
    server: https://127.0.0.1:$API_PORT
    # the apiserver's self-signed serving certificate from --cert-dir; loopback only
    insecure-skip-tls-verify: true
users:
- name: kite-admin
  user:
    token: $TOKEN
contexts:
- name: kite
  context: {cluster: kite, user: kite-admin}
current-context: kite
EOF
export KUBECONFIG="$WORK/kubeconfig"
kubectl() { "$BIN/kubectl" --request-timeout=30s "$@"; }

# ---------------------------------------------------------- kube-apiserver
# start_apiserver NAME PORT ETCD-SERVERS CERT-DIR: kube-apiserver on kite,
# logging to NAME.log.
start_apiserver() {
  "$BIN/kube-apiserver" \
    --etcd-servers="$3" "${APISERVER_ETCD_TLS[@]}" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$2" \
    --endpoint-reconciler-type=none \
    --cert-dir="$4" \
    --token-auth-file="$WORK/tokens.csv" \
    --authorization-mode=Node,RBAC \
    --service-account-key-file="$WORK/sa.pub" \
    --service-account-signing-key-file="$WORK/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range=10.96.0.0/16 \
    --etcd-compaction-interval="$COMPACTION_INTERVAL" \
    --event-ttl="$EVENT_TTL" \
    --v=2 --vmodule=compact=4,store=4,watcher=4,feature_support_checker=4 \
    >"$LOGS/$1.log" 2>&1 &
  PIDS[$1]=$!
}
log "starting kube-apiserver on 127.0.0.1:$API_PORT (etcd: kite)"
start_apiserver kube-apiserver "$API_PORT" "$KITE_URL" "$WORK/certs"
api_ready() { [ "$(kubectl get --raw /readyz 2>/dev/null)" = ok ]; }
timed "kube-apiserver start to /readyz" wait_for 180 "kube-apiserver /readyz" api_ready ||
  die "kube-apiserver not ready"
pass "kube-apiserver ready on kite"

log "starting kube-controller-manager (namespace, garbage-collector controllers)"
"$BIN/kube-controller-manager" \
  --kubeconfig="$WORK/kubeconfig" \
  --controllers=namespace-controller,garbage-collector-controller \
  --leader-elect=false \
  --bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
  --cert-dir="$WORK/kcm-certs" \
  --v=1 >"$LOGS/kube-controller-manager.log" 2>&1 &
PIDS[kube-controller-manager]=$!

# ------------------------------------------- manifests in deploy/kubernetes
# Every manifest the repository ships must be accepted by this
# kube-apiserver: a server-side dry run of each file (defaulting, validation,
# admission; kubectl's strict field validation refuses unknown fields). The
# namespaces they name are created first, for real: a dry run cannot create
# the namespace its other objects need.
log "deploy/kubernetes manifests: kubectl apply --dry-run=server"
dry_run() { kubectl apply --dry-run=server -f "$1" >"$LOGS/dry-run.log" 2>&1; } # dry_run FILE
mapfile -t MANIFESTS < <(find "$ROOT/deploy/kubernetes" -type f \( -name '*.yaml' -o -name '*.yml' \) | sort)
if [ "${#MANIFESTS[@]}" -eq 0 ]; then
  fail "no manifest under $ROOT/deploy/kubernetes"
else
  for ns in $(sed -n 's/^  namespace: *\([a-z0-9-]*\).*/\1/p' "${MANIFESTS[@]}" | sort -u); do
    kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns" >/dev/null ||
      fail "create namespace $ns"
  done
  for m in "${MANIFESTS[@]}"; do
    if dry_run "$m"; then
      pass "kubectl apply --dry-run=server accepts ${m#"$ROOT"/} ($(grep -c 'server dry run' "$LOGS/dry-run.log") objects)"
    else
      fail "kubectl apply --dry-run=server refuses ${m#"$ROOT"/}: $(tr '\n' ' ' <"$LOGS/dry-run.log")"
    fi
  done
  # ... and that dry run does refuse a broken manifest: a field misspelt.
  BROKEN=${MANIFESTS[0]}
  sed 's/^\( *\)containers:/\1containerz:/' "$BROKEN" >"$WORK/broken-manifest.yaml"
  if dry_run "$WORK/broken-manifest.yaml"; then
    fail "kubectl apply --dry-run=server accepted ${BROKEN#"$ROOT"/} with 'containers' misspelt"
  elif grep -q 'unknown field.*containerz' "$LOGS/dry-run.log"; then
    pass "kubectl apply --dry-run=server refuses ${BROKEN#"$ROOT"/} with 'containers' misspelt (unknown field)"
  else
    fail "dry run of ${BROKEN#"$ROOT"/} with 'containers' misspelt: $(tr '\n' ' ' <"$LOGS/dry-run.log")"
  fi
fi

# ---------------------------------------------------------------- workload
log "namespaces"
for ns in kite-bulk kite-watch kite-events; do kubectl create namespace "$ns" >/dev/null; done
check "namespace kite-bulk is Active" "$(kubectl get ns kite-bulk -o jsonpath='{.status.phase}')" Active
check "3 kite-* namespaces listed" "$(kubectl get ns -o name | grep -c '^namespace/kite-')" 3

# watch_cycle TAG: a kubectl watch (named kubectl-watch-TAG, left running) sees
# ADDED, MODIFIED and DELETED of configmap TAG.
watch_cycle() {
  local tag=$1 out="$WORK/watch-$1.out" ev
  kubectl get configmaps -n kite-watch --watch --output-watch-events --request-timeout=0 \
    -o jsonpath='{.type} {.object.metadata.name} {.object.data.v}{"\n"}' \
    >"$out" 2>"$LOGS/kubectl-watch-$tag.log" &
  PIDS[kubectl-watch-$tag]=$!
  sleep 2
  kubectl create configmap "$tag" -n kite-watch --from-literal=v=one >/dev/null
  kubectl patch configmap "$tag" -n kite-watch -p '{"data":{"v":"two"}}' >/dev/null
  kubectl delete configmap "$tag" -n kite-watch >/dev/null
  for ev in "ADDED $tag one" "MODIFIED $tag two" "DELETED $tag two"; do
    wait_for 30 "watch saw '$ev'" grep -qx "$ev" "$out" && pass "watch saw '$ev'"
  done
}
log "watch: kubectl get --watch --output-watch-events"
watch_cycle w1

log "500 configmaps and 500 secrets through one kubectl apply"
REV_BEFORE_BULK=$(etcdctl endpoint status -w json | jq -r '.[0].Status.header.revision')
gen_bulk() {
  local i
  for i in $(seq -w 1 500); do
    printf -- '---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%s\n  namespace: kite-bulk\n  labels: {bulk: "true"}\ndata:\n  value: value-%s\n' "$i" "$i"
    printf -- '---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: secret-%s\n  namespace: kite-bulk\n  labels: {bulk: "true"}\ndata:\n  value: %s\n' "$i" "$(printf 'secret-%s' "$i" | base64)"
  done
}
gen_bulk >"$WORK/bulk.yaml"
timed "kubectl apply --server-side of 1000 objects" \
  kubectl apply --server-side -f "$WORK/bulk.yaml" >"$LOGS/kubectl-apply.log" 2>&1 ||
  fail "kubectl apply of bulk.yaml"
check "applied objects" "$(grep -c 'serverside-applied' "$LOGS/kubectl-apply.log")" 1000

log "chunked lists"
# chunked_count KIND CHUNK: how many distinct KIND of kite-bulk kubectl lists
# in pages of CHUNK. kube-apiserver compacts every $COMPACTION_INTERVAL here,
# and 72 pages of 7 have taken 12 s on a loaded machine: a list that outlives
# its revision gets 410 Expired for its next page (as it would on etcd) and
# kubectl prints what it had. Such a list is started again, at most three
# times, and said so; a list cut short for any other reason is counted as is.
chunked_count() {
  local kind=$1 chunk=$2 try names
  for try in 1 2 3; do
    names=$(kubectl get "$kind" -n kite-bulk -l bulk=true --chunk-size="$chunk" -o name 2>"$WORK/chunked.err")
    grep -q '(Expired)' "$WORK/chunked.err" || break
    log "the list of $kind in pages of $chunk outlived its revision (410 Expired, try $try): $(head -c 200 "$WORK/chunked.err")" >&2
  done
  cat "$WORK/chunked.err" >&2
  sort -u <<<"$names" | grep -c .
}
check "configmaps via --chunk-size=50" "$(chunked_count configmaps 50)" 500
check "secrets via --chunk-size=7" "$(chunked_count secrets 7)" 500
check "configmap cm-123 value" "$(kubectl get configmap cm-123 -n kite-bulk -o jsonpath='{.data.value}')" value-123
check "secret secret-321 value" \
  "$(kubectl get secret secret-321 -n kite-bulk -o jsonpath='{.data.value}' | base64 -d)" secret-321
check "configmaps stored in kite (etcdctl count)" \
  "$(kite_count /registry/configmaps/kite-bulk/ --prefix)" 500

# member_count URL KEY [--prefix]: number of keys member URL holds, read
# serializably (from its own database, no raft round).
member_count() {
  local url=$1
  shift
  etcdctl_at "$url" get "$@" --consistency=s --keys-only -w json | jq -r '.count // 0'
}
member_count_is() { [ "$(member_count "$1" "${@:3}")" = "$2" ]; } # member_count_is URL N KEY [--prefix]

# The storage under test holds the data, straight from the storage itself.
storage_check() {
  local db rev got
  case "$DATASTORE" in
  sqlite)
    db=${ENDPOINT#sqlite://}
    [ -n "$db" ] || db="$KITE_DATA/kite.db"
    if [ -e "$db" ]; then pass "sqlite mode: kite's database is $db"; else fail "sqlite mode, but no database at $db"; fi
    ;;
  postgres)
    if [ -e "$KITE_DATA/kite.db" ]; then
      fail "postgres mode, but kite wrote $KITE_DATA/kite.db"
    else
      pass "postgres mode: no kite.db in kite's data dir"
    fi
    rev=$(etcdctl endpoint status -w json | jq -r '.[0].Status.header.revision')
    if ! [[ $rev =~ ^[0-9]+$ ]]; then
      fail "postgres mode: kite's revision from etcdctl endpoint status: '$rev'"
      return 0
    fi
    if ! got=$(psql "$PG_CHECK" -XAtq -v ON_ERROR_STOP=1 -c "SELECT
        (SELECT count(*) FROM kite_live
          WHERE key >= '/registry/configmaps/kite-bulk/'::bytea AND key < '/registry/configmaps/kite-bulk0'::bytea),
        (SELECT current_rev >= $rev FROM kite_revision)" 2>&1); then
      if [ -n "$PG_DB" ]; then
        fail "psql on kite's database $PG_DB: $got"
      else
        log "SKIP: the Postgres check: psql cannot use KITE_DATASTORE_ENDPOINT: $got"
      fi
      return 0
    fi
    check "postgres mode: kite-bulk configmaps in kite_live of kite's database, kite_revision at or past $rev" "$got" "500|t"
    ;;
  mysql)
    if [ -e "$KITE_DATA/kite.db" ]; then
      fail "mysql mode, but kite wrote $KITE_DATA/kite.db"
    else
      pass "mysql mode: no kite.db in kite's data dir"
    fi
    rev=$(etcdctl endpoint status -w json | jq -r '.[0].Status.header.revision')
    if ! [[ $rev =~ ^[0-9]+$ ]]; then
      fail "mysql mode: kite's revision from etcdctl endpoint status: '$rev'"
      return 0
    fi
    if ! got=$(mysql "${MY_ADMIN[@]}" -D "$MY_DB" -N -B -e "SELECT
        (SELECT count(*) FROM kite_live
          WHERE k >= '/registry/configmaps/kite-bulk/' AND k < '/registry/configmaps/kite-bulk0'),
        (SELECT current_rev >= $rev FROM kite_revision)" 2>&1); then
      fail "mysql on kite's database $MY_DB: $got"
      return 0
    fi
    check "mysql mode: kite-bulk configmaps in kite_live of kite's database, kite_revision at or past $rev" "$(tr '\t' '|' <<<"$got")" "500|1"
    ;;
  raftsql)
    # Every member applies the log into its own SQLite: each data dir has
    # its raft WAL and kite.db, and each member's own database (a
    # serializable read) holds the 500 configmaps.
    for i in 0 1 2; do
      if [ -e "${KITE_DATAS[i]}/kite.db" ] && [ -n "$(ls -A "${KITE_DATAS[i]}/member/wal" 2>/dev/null)" ]; then
        pass "raftsql mode: member n$i has kite.db and member/wal in ${KITE_DATAS[i]}"
      else
        fail "raftsql mode: member n$i lacks kite.db or member/wal in ${KITE_DATAS[i]}"
      fi
      wait_for 30 "member n$i's own database holds the 500 kite-bulk configmaps" \
        member_count_is "${KITE_URLS[i]}" 500 /registry/configmaps/kite-bulk/ --prefix &&
        pass "raftsql mode: member n$i's own database holds the 500 kite-bulk configmaps (serializable count)"
    done
    ;;
  esac
}
storage_check

log "watch-list: watch with sendInitialEvents=true"
kubectl get --raw "/api/v1/namespaces/kite-bulk/configmaps?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&labelSelector=bulk%3Dtrue&timeoutSeconds=5" \
  >"$WORK/watchlist.json" 2>"$LOGS/kubectl-watchlist.log" || true
check "watch-list initial ADDED events" "$(jq -r 'select(.type=="ADDED") | .object.metadata.name' "$WORK/watchlist.json" | sort -u | wc -l)" 500
check "watch-list initial-events-end bookmark" \
  "$(jq -r 'select(.type=="BOOKMARK") | .object.metadata.annotations["k8s.io/initial-events-end"] // empty' "$WORK/watchlist.json" | head -n1)" true

log "events expire through leases (--event-ttl=$EVENT_TTL)"
cat >"$WORK/event.yaml" <<EOF
apiVersion: v1
kind: Event
metadata: {name: kite-ttl-event, namespace: kite-events}
involvedObject: {kind: ConfigMap, name: kite-ttl, namespace: kite-events, apiVersion: v1}
reason: KiteTest
message: expires through a kite lease
type: Normal
EOF
EVENT_CREATED=$(date +%s)
kubectl create -f "$WORK/event.yaml" >/dev/null
check "event exists" "$(kubectl get event kite-ttl-event -n kite-events -o name)" event/kite-ttl-event
EVENT_LEASE=$(etcdctl get /registry/events/kite-events/kite-ttl-event -w json | jq -r '.kvs[0].lease // 0')
if [ "$EVENT_LEASE" != 0 ]; then pass "event key attached to lease $EVENT_LEASE"; else fail "event key has no lease"; fi
not_found() { # not_found KUBECTL-GET-ARGS...: the object is reported NotFound
  local out
  out=$(kubectl get "$@" -o name 2>&1) || true
  [[ $out == *NotFound* ]]
}
event_gone() { not_found event kite-ttl-event -n kite-events; }
if wait_for 60 "event expired" event_gone; then
  pass "event expired after $(($(date +%s) - EVENT_CREATED))s"
  check "event key gone from kite" \
    "$(kite_count /registry/events/kite-events/kite-ttl-event)" 0
fi

log "kube-apiserver's compaction (--etcd-compaction-interval=$COMPACTION_INTERVAL)"
compacted_past_bulk() {
  local c
  c=$(etcdctl get compact_rev_key --print-value-only)
  [ -n "$c" ] && [ "$c" -gt "$REV_BEFORE_BULK" ]
}
if wait_for 90 "apiserver compacted past revision $REV_BEFORE_BULK" compacted_past_bulk; then
  COMPACT_REV=$(etcdctl get compact_rev_key --print-value-only)
  pass "apiserver compacted at revision $COMPACT_REV (compact_rev_key version $(etcdctl get compact_rev_key -w json | jq -r '.kvs[0].version'))"
  if etcdctl get /registry/configmaps/kite-bulk/cm-001 --rev="$REV_BEFORE_BULK" >"$WORK/old-read.out" 2>&1; then
    fail "read at compacted revision $REV_BEFORE_BULK succeeded"
  elif grep -q "required revision has been compacted" "$WORK/old-read.out"; then
    pass "read at revision $REV_BEFORE_BULK answers 'required revision has been compacted'"
  else
    fail "read at compacted revision: $(cat "$WORK/old-read.out")"
  fi
  if [ "$DATASTORE" = raftsql ]; then
    # The compaction is a raft entry that every member applies to its own
    # database: each member reports it (a follower within moments).
    member_compacted() {
      local m
      m=$(kite_curl "$1/metrics" | awk '/^etcd_debugging_mvcc_compact_revision /{print $2}')
      [ -n "$m" ] && awk -v a="$m" -v b="$COMPACT_REV" 'BEGIN{exit !(a+0 >= b+0)}'
    }
    for i in 0 1 2; do
      wait_for 15 "member n$i reports etcd_debugging_mvcc_compact_revision >= $COMPACT_REV" \
        member_compacted "${KITE_URLS[i]}" &&
        pass "member n$i reports etcd_debugging_mvcc_compact_revision $(kite_curl "${KITE_URLS[i]}/metrics" | awk '/^etcd_debugging_mvcc_compact_revision /{print $2}')"
    done
  else
    KITE_COMPACT_METRIC=$(kite_curl "$KITE_URL/metrics" | awk '/^etcd_debugging_mvcc_compact_revision /{print $2}')
    if [ -n "$KITE_COMPACT_METRIC" ] && awk -v a="$KITE_COMPACT_METRIC" -v b="$COMPACT_REV" 'BEGIN{exit !(a+0 >= b+0)}'; then
      pass "kite reports etcd_debugging_mvcc_compact_revision $KITE_COMPACT_METRIC"
    else
      fail "kite compact revision metric '$KITE_COMPACT_METRIC' < $COMPACT_REV"
    fi
  fi
  if grep -q "etcd: compacted rev ($COMPACT_REV)" "$LOGS/kube-apiserver.log"; then
    pass "kube-apiserver logged 'etcd: compacted rev ($COMPACT_REV)'"
  else
    fail "kube-apiserver log has no 'etcd: compacted rev ($COMPACT_REV)'"
  fi
fi
if grep -q "compact failed" "$LOGS/kube-apiserver.log"; then fail "kube-apiserver logged 'compact failed'"; fi

if [ "$DATASTORE" = raftsql ]; then
  log "kite SIGKILL of the raft leader + restart on its data dir (raftsql)"
else
  log "kite SIGKILL + restart on the same data dir and storage ($DATASTORE)"
fi
# kube-apiserver and kube-controller-manager keep writing (leases), so the
# revision at the kill is not known exactly: a write acknowledged just before
# it must survive with its revision, and writes after it may or may not.
REV_URL=$KITE_URL # the kite whose revision is checked after the restart
if [ "$DATASTORE" = raftsql ]; then
  wait_for 30 "a raft leader before the kill" leader_of "$KITE_URL" || die "no raft leader to kill"
fi
MARK_REV=$(etcdctl put /kite-e2e/before-kill "$(date +%s%N)" -w json | jq -r '.header.revision')
if [ "$DATASTORE" = raftsql ]; then
  # Kill the leader; kube-apiserver (--etcd-servers lists all three members)
  # and etcdctl go on with the other two, which elect a new leader. Then the
  # killed member restarts with the same command line and data dir and must
  # catch up: its own database (serializable reads) agrees with the cluster.
  read -r L LEADER_ID TERM < <(leader_of "$KITE_URL" || true) || die "no raft leader to kill"
  SURVIVORS=() SURVIVOR_IDX=()
  for i in 0 1 2; do
    [ "$i" = "$L" ] || { SURVIVORS+=("${KITE_URLS[i]}"); SURVIVOR_IDX+=("$i"); }
  done
  SURVIVORS_URL=$(IFS=,; echo "${SURVIVORS[*]}")
  log "SIGKILL of the raft leader n$L (member $LEADER_ID, term $TERM)"
  stop_pid "kite-n$L" KILL
  new_leader() { # a leader NL elected among the two others, in a later term NT
    read -r NL _ NT < <(leader_of "$SURVIVORS_URL" || true) || return 1
    [ "$NL" != "$L" ] && [ "$NT" -gt "$TERM" ]
  }
  if timed "new raft leader after SIGKILL of the leader" wait_for 30 "a new leader among the two other members" new_leader; then
    pass "n$NL elected leader in term $NT with the old leader n$L down"
  fi
  timed "kube-apiserver /readyz with the leader killed" wait_for 90 "kube-apiserver ready with the leader killed" api_ready &&
    pass "kube-apiserver ready with the leader n$L killed"
  kubectl create configmap during-kill -n kite-watch --from-literal=v=leader-down >/dev/null ||
    fail "create configmap with the leader killed"
  check "configmap written with the leader killed" \
    "$(kubectl get configmap during-kill -n kite-watch -o jsonpath='{.data.v}')" leader-down
  check "configmaps listed with the leader killed" \
    "$(kubectl get configmaps -n kite-bulk -l bulk=true --chunk-size=100 -o name | sort -u | wc -l)" 500
  check "write acknowledged just before SIGKILL, through the two others: its revision" \
    "$(etcdctl_at "$SURVIVORS_URL" get /kite-e2e/before-kill -w json | jq -r '.kvs[0].mod_revision')" "$MARK_REV"
  DURING_REV=$(etcdctl_at "$SURVIVORS_URL" put /kite-e2e/during-kill "$(date +%s%N)" -w json | jq -r '.header.revision')
  log "restarting n$L with the same command line and data dir"
  start_member "$L"
  timed "restarted member n$L answers /health" wait_for 60 "restarted member n$L answers /health" \
    kite_curl "${KITE_URLS[L]}/health" || die "member n$L did not restart"
  # Caught up: the restarted member's own database (a serializable count)
  # holds as many configmaps as a linearizable count through another member
  # (including the one created while it was down), and the key written while
  # it was down, at its revision.
  OTHER=${SURVIVORS[0]}
  caught_up() {
    local want
    want=$(etcdctl_at "$OTHER" get /registry/configmaps/ --prefix --keys-only -w json | jq -r '.count // 0') || return 1
    [ "$(member_count "${KITE_URLS[L]}" /registry/configmaps/ --prefix)" = "$want" ] &&
      [ "$(etcdctl_at "${KITE_URLS[L]}" get /kite-e2e/during-kill --consistency=s -w json | jq -r '.kvs[0].mod_revision')" = "$DURING_REV" ]
  }
  if timed "restarted member n$L catching up" wait_for 60 "restarted member n$L caught up" caught_up; then
    pass "restarted member n$L caught up: serializable count of /registry/configmaps/ ($(member_count "${KITE_URLS[L]}" /registry/configmaps/ --prefix)) equals the linearizable one through n${SURVIVOR_IDX[0]}, and it holds the key written while it was down at revision $DURING_REV"
  fi
  check "write acknowledged just before SIGKILL, on the restarted member's own database: its revision" \
    "$(etcdctl_at "${KITE_URLS[L]}" get /kite-e2e/before-kill --consistency=s -w json | jq -r '.kvs[0].mod_revision')" "$MARK_REV"
  wait_for 30 "endpoint status --cluster through n$L: 3 members, one leader" cluster_ok "${KITE_URLS[L]}" &&
    pass "endpoint status --cluster through the restarted n$L: 3 members, one cluster, one leader"
  # The members' HashKV at one revision (all of them applied it, at the same
  # compaction) agree: the restarted member's database is the others'.
  hashes_agree() {
    local rev js
    rev=$(etcdctl get /kite-e2e/during-kill -w json | jq -r '.header.revision') || return 1
    js=$(etcdctl endpoint hashkv --rev="$rev" -w json 2>/dev/null) || return 1
    [ "$(jq 'length' <<<"$js")" = 3 ] &&
      [ "$(jq '[.[] | [.HashKV.hash, .HashKV.compact_revision]] | unique | length' <<<"$js")" = 1 ] &&
      HASHKV_SEEN=$(jq -r '.[0].HashKV | "hash \(.hash) at revision \(.hash_revision // "?"), compacted at \(.compact_revision)"' <<<"$js")
  }
  wait_for 60 "the three members' HashKV agree" hashes_agree &&
    pass "the three members' HashKV agree: $HASHKV_SEEN"
  REV_URL=${KITE_URLS[L]}
else
  stop_pid kite KILL
  sleep 2
  start_kite || die "kite did not restart"
fi
check "write acknowledged just before SIGKILL, after restart: its revision" \
  "$(etcdctl get /kite-e2e/before-kill -w json | jq -r '.kvs[0].mod_revision')" "$MARK_REV"
# (raftsql: the revision of the restarted member)
REV_AFTER_KILL=$(etcdctl_at "$REV_URL" endpoint status -w json | jq -r '.[0].Status.header.revision')
if [ "$REV_AFTER_KILL" -ge "$MARK_REV" ] 2>/dev/null; then
  pass "kite revision after restart ($REV_AFTER_KILL) >= the last acknowledged one ($MARK_REV)"
else
  fail "kite revision after restart '$REV_AFTER_KILL' < the last acknowledged one '$MARK_REV'"
fi
timed "kube-apiserver /readyz after kite restart" wait_for 90 "kube-apiserver ready after kite restart" api_ready &&
  pass "kube-apiserver ready again after kite restart"
check "configmaps after restart" \
  "$(kubectl get configmaps -n kite-bulk -l bulk=true --chunk-size=100 -o name | sort -u | wc -l)" 500
check "secrets after restart" "$(kubectl get secrets -n kite-bulk -l bulk=true -o name | sort -u | wc -l)" 500
check "configmap cm-500 after restart" "$(kubectl get configmap cm-500 -n kite-bulk -o jsonpath='{.data.value}')" value-500
# The watch opened before the restart either goes on or is closed cleanly:
# kube-apiserver's cacher re-lists (and closes its watchers) when its etcd
# watch cannot resume because the resume revision was compacted meanwhile, as
# it does on etcd. kubectl must see no error either way.
kubectl create configmap w2 -n kite-watch --from-literal=v=after-restart >/dev/null ||
  fail "create configmap after restart"
sleep 3
WATCH_PID=${PIDS[kubectl-watch-w1]}
if kill -0 "$WATCH_PID" 2>/dev/null; then
  wait_for 30 "the watch opened before the restart saw ADDED w2" \
    grep -qx "ADDED w2 after-restart" "$WORK/watch-w1.out" &&
    pass "the watch opened before the restart is still running and saw 'ADDED w2 after-restart'"
else
  if wait "$WATCH_PID"; then WATCH_RC=0; else WATCH_RC=$?; fi
  unset "PIDS[kubectl-watch-w1]"
  check "exit status of the watch closed by kube-apiserver during the restart" "$WATCH_RC" 0
fi
if [ -s "$LOGS/kubectl-watch-w1.log" ]; then
  fail "the watch opened before the restart printed: $(head -c 300 "$LOGS/kubectl-watch-w1.log")"
else
  pass "the watch opened before the restart printed no error"
fi
stop_pid kubectl-watch-w1
log "watch after the restart"
watch_cycle w3
stop_pid kubectl-watch-w3

# ------------------------------------------------------- kite copy
# `kite copy` from the running kite (raftsql: from its three members' client
# URLs) into a fresh SQLite, and with KITE_KUBE_DATASTORE=postgres also into a
# fresh Postgres database; on each copy a second kite and a second
# kube-apiserver must list every configmap and secret of the workload's
# namespaces with the resourceVersion the first lists. The first apiserver
# keeps running (its leases go on being written): the copy is of one
# revision, and those objects were all written before it.
COPY_TARGETS=(sqlite)
if [ "$KITE_KUBE_DATASTORE" = postgres ]; then
  COPY_PG_DB="kite_kube_copy_$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
  if createdb "${PG_ADMIN[@]}" "$COPY_PG_DB" 2>"$LOGS/createdb-copy.log"; then
    COPY_TARGETS+=(postgres)
  else
    fail "createdb $COPY_PG_DB: $(cat "$LOGS/createdb-copy.log")"
    COPY_PG_DB=""
  fi
fi
# rv_list [KUBECTL-FLAGS]: "KIND NAMESPACE/NAME RESOURCEVERSION" of every
# configmap and secret in the workload's namespaces, sorted.
rv_list() {
  kubectl "$@" get cm,secret -A \
    -o jsonpath='{range .items[*]}{.kind} {.metadata.namespace}/{.metadata.name} {.metadata.resourceVersion}{"\n"}{end}' |
    { grep -E '^[A-Za-z]+ kite-(bulk|watch|events)/' || true; } | sort
}
copy_check() { # copy_check TARGET: copy, serve, compare
  local target=$1 url port api_port rv_want rv_got
  local -a to storage=()
  case "$target" in
  sqlite) to=(--to-data-dir "$WORK/copy-sqlite") ;;
  postgres)
    to=(--to "postgres://postgres@127.0.0.1:${PGPORT:-5432}/$COPY_PG_DB?sslmode=disable")
    storage=(--datastore-endpoint "${to[1]}")
    ;;
  esac
  # ETCDCTL_TLS (--cacert --cert --key) are kite copy's flags too.
  if ! timed "kite copy into $target" \
    "$BIN/kite" copy --from "$KITE_URL" "${ETCDCTL_TLS[@]}" "${to[@]}" >"$LOGS/copy-$target.log" 2>&1; then
    fail "kite copy --from $KITE_URL into $target: $(tail -n 3 "$LOGS/copy-$target.log")"
    return 0
  fi
  pass "kite copy into $target: $(grep -o 'verified: [0-9]* keys at revision [0-9]*' "$LOGS/copy-$target.log")"
  port=$(free_port)
  url="${KITE_URLS[0]%%://*}://127.0.0.1:$port"
  start_single_kite "kite-copy-$target" "$WORK/copy-$target" "$url" "${storage[@]}" || return 0
  api_port=$(free_port)
  start_apiserver "kube-apiserver-copy-$target" "$api_port" "$url" "$WORK/copy-certs-$target"
  copy_api_ready() { [ "$(kubectl --server="https://127.0.0.1:$api_port" get --raw /readyz 2>/dev/null)" = ok ]; }
  if timed "kube-apiserver on the $target copy to /readyz" \
    wait_for 180 "kube-apiserver on the $target copy /readyz" copy_api_ready; then
    rv_want=$(rv_list) || fail "kubectl get cm,secret -A on the first apiserver"
    rv_got=$(rv_list --server="https://127.0.0.1:$api_port") || fail "kubectl get cm,secret -A on the $target copy"
    check "configmaps and secrets of kite-bulk, kite-watch, kite-events listed by the apiserver on the $target copy" \
      "$(wc -l <<<"$rv_got")" "$(wc -l <<<"$rv_want")"
    if [ "$(wc -l <<<"$rv_want")" -ge 1000 ] && [ "$rv_want" = "$rv_got" ]; then
      pass "every one of them has the same resourceVersion on both apiservers ($target copy)"
    else
      fail "$(wc -l <<<"$rv_want") objects; resourceVersions on the $target copy differ (< original, > copy): $(diff <(echo "$rv_want") <(echo "$rv_got") | head -n 5 | tr '\n' ' ')"
    fi
  fi
  stop_pid "kube-apiserver-copy-$target"
  stop_pid "kite-copy-$target"
}
log "kite copy of the running kite into ${COPY_TARGETS[*]}; kube-apiserver on each copy"
for target in "${COPY_TARGETS[@]}"; do copy_check "$target"; done

log "deleting namespace kite-bulk removes its objects"
timed "kubectl delete namespace kite-bulk" kubectl delete namespace kite-bulk --timeout=180s >/dev/null ||
  fail "kubectl delete namespace kite-bulk"
ns_gone() { not_found namespace kite-bulk; }
wait_for 60 "namespace kite-bulk gone" ns_gone && pass "namespace kite-bulk gone"
check "keys under /registry/configmaps/kite-bulk/ in kite" \
  "$(kite_count /registry/configmaps/kite-bulk/ --prefix)" 0
check "keys under /registry/secrets/kite-bulk/ in kite" \
  "$(kite_count /registry/secrets/kite-bulk/ --prefix)" 0
check "configmaps listed across namespaces with bulk=true" "$(kubectl get configmaps -A -l bulk=true -o name | wc -l)" 0

# ----------------------------------------- no silent storage fallbacks
log "storage feature checks (RequestWatchProgress / consistent reads from cache, RangeStream, watch-list)"
kubectl get configmaps -n kite-watch -o name >/dev/null # a consistent LIST
kubectl get --raw /metrics >"$WORK/apiserver-metrics.txt"
metric_sum() { # metric_sum REGEX: sum the samples whose line matches REGEX
  { grep -E "$1" "$WORK/apiserver-metrics.txt" || true; } | awk '{s += $NF} END {printf "%d", s}'
}
CONSISTENT_CACHE=$(metric_sum '^apiserver_watch_cache_consistent_read_total\{.*fallback="false".*success="true"')
CONSISTENT_FALLBACK=$(metric_sum '^apiserver_watch_cache_consistent_read_total\{.*fallback="true"')
LIST_STREAM=$(metric_sum '^etcd_requests_total\{.*operation="listStream"')
if [ "$CONSISTENT_CACHE" -gt 0 ]; then
  pass "consistent reads served from the watch cache: apiserver_watch_cache_consistent_read_total{fallback=false,success=true} = $CONSISTENT_CACHE"
else
  fail "no consistent read served from the watch cache (RequestWatchProgress off?)"
fi
check "consistent reads that fell back to etcd" "$CONSISTENT_FALLBACK" 0
if [ "$LIST_STREAM" -gt 0 ]; then
  pass "lists through RangeStream: etcd_requests_total{operation=listStream} = $LIST_STREAM"
else
  fail "no etcd_requests_total{operation=listStream}: RangeStream not used"
fi
if [ "$DATASTORE" = raftsql ]; then
  # kube-apiserver spreads its calls over the three members (only one was
  # restarted, and it need not get a list): the sum over the members counts.
  KITE_RANGESTREAM=0
  for u in "${KITE_URLS[@]}"; do
    n=$(kite_curl "$u/metrics" | { grep -E '^grpc_server_started_total\{.*grpc_method="RangeStream"' || true; } | awk '{s += $NF} END {printf "%d", s}')
    KITE_RANGESTREAM=$((KITE_RANGESTREAM + n))
  done
  if [ "$KITE_RANGESTREAM" -gt 0 ]; then pass "kite members served RangeStream calls: $KITE_RANGESTREAM"; else fail "no kite member saw a RangeStream call"; fi
else
  KITE_RANGESTREAM=$(kite_curl "$KITE_URL/metrics" | { grep -E '^grpc_server_started_total\{.*grpc_method="RangeStream"' || true; } | awk '{s += $NF} END {printf "%d", s}')
  if [ "$KITE_RANGESTREAM" -gt 0 ]; then pass "kite served RangeStream calls since restart: $KITE_RANGESTREAM"; else fail "kite saw no RangeStream call since restart"; fi
fi
for bad in "RequestWatchProgress feature is not supported" \
  "Failed to check if RequestWatchProgress is supported" \
  "does not support RangeStream" \
  "required storage feature RequestWatchProgress is disabled" \
  "Failed to parse etcd version"; do
  if grep -q "$bad" "$LOGS/kube-apiserver.log"; then fail "kube-apiserver log: '$bad'"; else pass "kube-apiserver log has no '$bad'"; fi
done
