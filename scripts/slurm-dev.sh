#!/usr/bin/env bash
# A one-host Slurm 22.05 on loopback, for development and the test command.
#
#   scripts/slurm-dev.sh start DIR    # starts (or finds running) and prints the env to use
#   scripts/slurm-dev.sh status DIR   # which daemons run; exit 1 if the cluster does not answer
#   scripts/slurm-dev.sh stop DIR     # stops what start started, by recorded PID only
#
# Everything lives in DIR: the configuration rendered from deploy/slurm/*.in,
# a private munged (own key and socket), a private MariaDB (own datadir,
# socket and port), slurmdbd, slurmctld, one slurmd whose node has
# SLURM_DEV_GPUS fake GPUs (character devices `mknod c 195 N` in
# DIR/fakedev), and with SLURM_DEV_REST=1 slurmrestd (v0.0.38, JWT). Ports are
# picked free at the first start and kept in DIR/ports.env, and job ids start
# at a number drawn from them, so several clusters (one per session or test
# run) share a host without meeting; nothing is ever stopped by name.
#
# start is idempotent: a daemon whose recorded PID still runs is left alone,
# so a second start takes well under a second. It prints `export ...` lines
# (also written to DIR/env) on stdout; everything else goes to stderr, the
# daemons' logs to DIR/run/log/.
#
# Confinement: start first tries cgroup v1 (proctrack/cgroup + task/cgroup +
# ConstrainDevices=yes). If slurmd refuses it (no writable cgroup v1
# freezer/devices hierarchy), it falls back to proctrack/linuxproc +
# task/none, says so on stderr and records it in DIR/confinement
# ("cgroup" or "none: <why>"). SLURM_DEV_CGROUP=0 skips the attempt.
#
# Must run as root (slurmd runs jobs as other users; munged and MariaDB drop
# to their own users). DIR must be reachable by those users (start makes it
# 0755) and not under /tmp or /dev/shm: every job gets private ones
# (job_container/tmpfs), which would hide the spool and the workloads'
# folders. A mktemp -d under /var/tmp works.
#
# Environment: SLURM_DEV_GPUS (4), SLURM_DEV_CPUS (16), SLURM_DEV_NODE
# (localhost), SLURM_DEV_KILL_WAIT (5, seconds between SIGTERM and SIGKILL),
# SLURM_DEV_REST (0), SLURM_DEV_CGROUP (1).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TEMPLATES="$ROOT/deploy/slurm"

die() { echo "slurm-dev: $*" >&2; exit 1; }
log() { echo "slurm-dev: $*" >&2; }

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Is the daemon recorded in pid file $1 alive? The process must still be
# that daemon (its name is the file's, e.g. slurmd.pid -> slurmd): a pid
# reused by another program after a reboot is neither trusted nor killed.
alive() {
  [[ -s "$1" ]] || return 1
  local pid name
  pid=$(cat "$1")
  name=$(basename "$1" .pid)
  kill -0 "$pid" 2>/dev/null && [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$name" ]]
}

wait_for() {  # wait_for SECONDS command...: polls until the command succeeds
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

render() {  # render TEMPLATE OUT
  sed -e "s#@SLURM_DIR@#$S#g" -e "s#@CLUSTER@#$CLUSTER#g" -e "s#@CTLD_PORT@#$CTLD_PORT#g" \
    -e "s#@SLURMD_PORT@#$SLURMD_PORT#g" -e "s#@DBD_PORT@#$DBD_PORT#g" -e "s#@DB_PORT@#$DB_PORT#g" \
    -e "s#@FIRST_JOB_ID@#$FIRST_JOB_ID#g" -e "s#@NODE@#$NODE#g" -e "s#@CPUS@#$CPUS#g" \
    -e "s#@MEMORY_MB@#$MEMORY_MB#g" -e "s#@GPUS@#$GPUS#g" -e "s#@LAST_GPU@#$((GPUS - 1))#g" \
    -e "s#@KILL_WAIT@#$KILL_WAIT#g" -e "s#@PROCTRACK@#$PROCTRACK#g" -e "s#@TASK@#$TASK#g" -e "s#@JOB_CONTAINER@#$JOB_CONTAINER#g" -e "s#@JOB_TMP@#$JOB_TMP#g" \
    -e "s#@NODE_GRES@#$NODE_GRES#g" "$1" |
    GPU_LINES="$GPU_LINES" awk '{ if ($0 == "@GPU_LINES@") printf "%s", ENVIRON["GPU_LINES"]; else print }' >"$2.tmp"
  mv "$2.tmp" "$2"
}

load_layout() {
  S=$(cd "$1" && pwd)
  export SLURM_CONF="$S/slurm.conf"
  if [[ ! -s "$S/ports.env" ]]; then
    local ctld slurmd dbd db rest
    ctld=$(free_port); slurmd=$(free_port); dbd=$(free_port); db=$(free_port); rest=$(free_port)
    cat >"$S/ports.env" <<EOF
CTLD_PORT=$ctld
SLURMD_PORT=$slurmd
DBD_PORT=$dbd
DB_PORT=$db
REST_PORT=$rest
CLUSTER=atrium$((ctld % 10000))
FIRST_JOB_ID=$(((ctld % 60 + 1) * 1000000))
EOF
  fi
  # shellcheck disable=SC1091
  source "$S/ports.env"
  NODE=${SLURM_DEV_NODE:-localhost}
  GPUS=${SLURM_DEV_GPUS:-4}
  CPUS=${SLURM_DEV_CPUS:-16}
  MEMORY_MB=${SLURM_DEV_MEMORY_MB:-8000}
  KILL_WAIT=${SLURM_DEV_KILL_WAIT:-5}
  JOB_TMP=$S/run/jobtmp
  NODE_GRES=""
  GPU_LINES=""
  local i
  for ((i = 0; i < GPUS; i++)); do
    NODE_GRES+="${NODE_GRES:+,}gpu:idx$i:1"
    GPU_LINES+="NodeName=$NODE Name=gpu Type=idx$i File=$S/fakedev/nvidia$i"$'\n'
  done
  # Time-sliced shares: 1000 shards (milli-GPUs) per GPU, typed like it.
  for ((i = 0; i < GPUS; i++)); do
    NODE_GRES+=",shard:idx$i:1000"
    GPU_LINES+="NodeName=$NODE Name=shard Type=idx$i Count=1000 File=$S/fakedev/nvidia$i"$'\n'
  done
}

print_env() {
  {
    echo "export SLURM_CONF=$S/slurm.conf"
    echo "export ATRIUM_TEST_SLURM_DIR=$S"
    echo "export ATRIUM_SLURM_NODE=$NODE"
    if [[ "${SLURM_DEV_REST:-0}" == 1 ]]; then
      echo "export SLURMRESTD_URL=http://127.0.0.1:$REST_PORT"
    fi
  } >"$S/env"
  cat "$S/env"
}

start_munge() {
  alive "$S/run/munge/munged.pid" && return 0
  mkdir -p "$S/run/munge"
  if [[ ! -s "$S/run/munge.key" ]]; then
    dd if=/dev/urandom of="$S/run/munge.key" bs=1024 count=1 status=none
  fi
  chown munge:munge "$S/run/munge" "$S/run/munge.key"
  chmod 0755 "$S/run/munge"
  chmod 0400 "$S/run/munge.key"
  runuser -u munge -- /usr/sbin/munged --socket="$S/run/munge/munge.socket" \
    --key-file="$S/run/munge.key" --pid-file="$S/run/munge/munged.pid" \
    --seed-file="$S/run/munge/munged.seed" --log-file="$S/run/munge/munged.log" \
    </dev/null >>"$S/run/log/munged.out" 2>&1
  wait_for 5 test -S "$S/run/munge/munge.socket" || die "munged did not start (see $S/run/munge/munged.log)"
}

mariadb_cli() { mariadb --no-defaults -S "$S/run/mysqld/mysqld.sock" -uroot "$@"; }

start_mariadb() {
  alive "$S/run/mysqld/mariadbd.pid" && return 0
  mkdir -p "$S/run/mysqld"
  chown mysql:mysql "$S/run/mysqld"
  if [[ ! -d "$S/mysql/mysql" ]]; then
    mkdir -p "$S/mysql"
    chown mysql:mysql "$S/mysql"
    mariadb-install-db --no-defaults --user=mysql --datadir="$S/mysql" \
      --auth-root-authentication-method=socket --skip-test-db >"$S/run/log/mariadb-install.out" 2>&1 ||
      die "mariadb-install-db failed (see $S/run/log/mariadb-install.out)"
  fi
  setsid /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$S/mysql" \
    --socket="$S/run/mysqld/mysqld.sock" --pid-file="$S/run/mysqld/mariadbd.pid" \
    --port="$DB_PORT" --bind-address=127.0.0.1 --log-error="$S/run/log/mariadbd.log" \
    --innodb-flush-log-at-trx-commit=0 --innodb-buffer-pool-size=64M \
    </dev/null >>"$S/run/log/mariadbd.out" 2>&1 &
  wait_for 30 mariadb_cli -e 'select 1' || die "MariaDB did not start (see $S/run/log/mariadbd.log)"
  mariadb_cli -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw';
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
}

start_slurmdbd() {
  alive "$S/run/slurmdbd.pid" && return 0
  setsid /usr/sbin/slurmdbd -D </dev/null >>"$S/run/log/slurmdbd.out" 2>&1 &
  echo $! >"$S/run/slurmdbd.pid"
  wait_for 30 sacctmgr -n list cluster || die "slurmdbd did not answer (see $S/run/log/slurmdbd.log)"
  if [[ -z "$(sacctmgr -n -P list cluster format=cluster where cluster="$CLUSTER")" ]]; then
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
  fi
}

start_slurmctld() {
  alive "$S/run/slurmctld.pid" && return 0
  setsid /usr/sbin/slurmctld -D -i </dev/null >>"$S/run/log/slurmctld.out" 2>&1 &
  echo $! >"$S/run/slurmctld.pid"
  wait_for 20 bash -c 'scontrol ping | grep -q UP' || die "slurmctld did not answer (see $S/run/log/slurmctld.log)"
}

node_idle() { sinfo -h -n "$NODE" -o %T | grep -qE '^(idle|mixed|allocated)'; }

start_slurmd() {
  alive "$S/run/slurmd.pid" && return 0
  setsid /usr/sbin/slurmd -D -N "$NODE" </dev/null >>"$S/run/log/slurmd.out" 2>&1 &
  local pid=$!
  echo $pid >"$S/run/slurmd.pid"
  local deadline=$((SECONDS + 20))
  until node_idle; do
    kill -0 "$pid" 2>/dev/null || return 1
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

start_slurmrestd() {
  [[ "${SLURM_DEV_REST:-0}" == 1 ]] || return 0
  alive "$S/run/slurmrestd.pid" && return 0
  # slurmrestd refuses to run as root.
  setsid runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" SLURM_JWT=daemon /usr/sbin/slurmrestd \
    -a rest_auth/jwt -s openapi/v0.0.38,openapi/dbv0.0.38 "127.0.0.1:$REST_PORT" \
    </dev/null >>"$S/run/log/slurmrestd.out" 2>&1 &
  local parent=$!
  wait_for 5 bash -c "pgrep -P $parent >/dev/null" || die "slurmrestd did not start"
  pgrep -P "$parent" >"$S/run/slurmrestd.pid"
}

choose_confinement() {
  if [[ -s "$S/confinement" ]]; then
    CONFINEMENT=$(cat "$S/confinement")
  elif [[ "${SLURM_DEV_CGROUP:-1}" == 1 ]]; then
    CONFINEMENT=cgroup
  else
    CONFINEMENT="none: SLURM_DEV_CGROUP=0"
  fi
  if [[ "$CONFINEMENT" == cgroup ]]; then
    PROCTRACK=proctrack/cgroup; TASK=task/cgroup; JOB_CONTAINER=job_container/tmpfs
  else
    PROCTRACK=proctrack/linuxproc; TASK=task/none; JOB_CONTAINER=job_container/none
  fi
}

render_all() {
  render "$TEMPLATES/slurm.conf.in" "$S/slurm.conf"
  render "$TEMPLATES/gres.conf.in" "$S/gres.conf"
  render "$TEMPLATES/cgroup.conf.in" "$S/cgroup.conf"
  render "$TEMPLATES/job_container.conf.in" "$S/job_container.conf"
  render "$TEMPLATES/slurmdbd.conf.in" "$S/slurmdbd.conf"
  cp "$TEMPLATES/job_submit.lua" "$S/job_submit.lua"
  render "$TEMPLATES/job_ended.sh.in" "$S/job_ended.sh"
  chmod 755 "$S/job_ended.sh"
  chmod 600 "$S/slurmdbd.conf"
}

cmd_start() {
  [[ $(id -u) -eq 0 ]] || die "must run as root (slurmd starts jobs as other users)"
  # Jobs get a private /tmp and /dev/shm: what lives there (the spool, the
  # workloads' folders) would vanish from their view.
  case "$(realpath -m "$1")/" in
    /tmp/* | /dev/shm/*) die "DIR must not be under /tmp or /dev/shm (jobs get private ones); try /var/tmp" ;;
  esac
  mkdir -p "$1"
  load_layout "$1"
  chmod 0755 "$S"
  mkdir -p "$S/run/state" "$S/run/spool" "$S/run/log" "$S/fakedev" "$S/jobs" "$JOB_TMP"
  # Workload folders are owned by their tenant's user, mode 0700; the parent
  # only lets them pass.
  chmod 0711 "$S/jobs"
  # EpilogSlurmctld (job_ended.sh) marks ended jobs here for Atrium; only
  # root writes in it.
  mkdir -p "$S/ended"
  chmod 0700 "$S/ended"
  for ((i = 0; i < GPUS; i++)); do
    [[ -c "$S/fakedev/nvidia$i" ]] || mknod "$S/fakedev/nvidia$i" c 195 "$i"
    # Like the real /dev/nvidiaN: open to every user, so that what refuses a
    # GPU not given is the job's device cgroup, not the file mode.
    chmod 0666 "$S/fakedev/nvidia$i"
  done
  [[ -s "$S/run/jwt_hs256.key" ]] || {
    dd if=/dev/urandom of="$S/run/jwt_hs256.key" bs=32 count=1 status=none
    chmod 600 "$S/run/jwt_hs256.key"
  }
  choose_confinement
  render_all
  start_munge
  start_mariadb
  start_slurmdbd
  start_slurmctld
  if ! start_slurmd; then
    if [[ "$CONFINEMENT" == cgroup ]]; then
      local why
      why=$(grep -hiE 'error|fatal' "$S/run/log/slurmd.log" "$S/run/log/slurmd.out" 2>/dev/null | tail -3 | tr '\n' ' ')
      log "slurmd refused cgroup confinement; falling back to proctrack/linuxproc + task/none: $why"
      alive "$S/run/slurmd.pid" && kill "$(cat "$S/run/slurmd.pid")" && wait_for 10 bash -c "! kill -0 $(cat "$S/run/slurmd.pid")"
      echo "none: slurmd refused cgroup/v1: $why" >"$S/confinement"
      choose_confinement
      render_all
      scontrol reconfigure >/dev/null 2>&1 || true
      start_slurmd || die "slurmd did not register (see $S/run/log/slurmd.log)"
    else
      die "slurmd did not register (see $S/run/log/slurmd.log)"
    fi
  fi
  [[ -s "$S/confinement" ]] || echo "$CONFINEMENT" >"$S/confinement"
  start_slurmrestd
  print_env
}

cmd_status() {
  load_layout "$1"
  local d
  for d in munge/munged mysqld/mariadbd slurmdbd slurmctld slurmd slurmrestd; do
    if alive "$S/run/$d.pid"; then
      echo "$(basename "$d"): running (pid $(cat "$S/run/$d.pid"))"
    else
      echo "$(basename "$d"): stopped"
    fi
  done
  echo "confinement: $(cat "$S/confinement" 2>/dev/null || echo unknown)"
  scontrol ping 2>/dev/null | grep -q UP && sinfo -h -N -o '%N %T %G' 2>/dev/null
}

stop_pidfile() {  # stop_pidfile FILE: SIGTERM, then SIGKILL after 10 s
  local f=$1 pid
  alive "$f" || return 0
  pid=$(cat "$f")
  kill "$pid" 2>/dev/null || true
  if ! wait_for 10 bash -c "! kill -0 $pid"; then
    kill -KILL "$pid" 2>/dev/null || true
  fi
}

cmd_stop() {
  [[ -d "$1" ]] || return 0
  load_layout "$1"
  # Jobs first, so that no slurmstepd outlives its cluster.
  if alive "$S/run/slurmctld.pid"; then
    scancel -p gpu >/dev/null 2>&1 || true
    wait_for 15 bash -c '[[ -z "$(squeue -h -o %i)" ]]' || log "jobs still listed after 15 s"
  fi
  stop_pidfile "$S/run/slurmrestd.pid"
  stop_pidfile "$S/run/slurmd.pid"
  stop_pidfile "$S/run/slurmctld.pid"
  stop_pidfile "$S/run/slurmdbd.pid"
  stop_pidfile "$S/run/mysqld/mariadbd.pid"
  stop_pidfile "$S/run/munge/munged.pid"
}

[[ $# -eq 2 ]] || die "usage: $0 start|status|stop DIR"
case "$1" in
  start) cmd_start "$2" ;;
  status) cmd_status "$2" ;;
  stop) cmd_stop "$2" ;;
  *) die "usage: $0 start|status|stop DIR" ;;
esac
