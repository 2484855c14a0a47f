# shellcheck shell=bash
# The control-plane load balancer of the VM tests (test/vm/tcp-lb.py), shared by test/vm/real.sh (the day-2 run)
# and test/capi-e2e/capi-e2e.sh (K8sUpgrade): one copy, so both start, log and stop it the same way.
# Sourced, not executed; uses the sourcing script's ROOT.
#
#   tcp_lb_up DIR LISTEN BACKEND...   start tcp-lb.py in a session of its own (setsid: nothing sent to the test's
#                                     process group reaches it; tcp_lb_down stops it), listening on LISTEN
#                                     (ADDRESS:PORT) in front of the BACKENDs (ADDRESS:PORT), its output appended
#                                     to DIR/lb.log, its pid in DIR/lb.pid (and TCP_LB_PID). Returns 0 once LISTEN
#                                     listens; 1, saying why on stderr, when something listens there already
#                                     (before the start: a listener found afterwards would be taken for ours), when
#                                     the balancer exits, or when it does not listen within 30 s.
#   tcp_lb_down DIR                   stop the balancer of DIR/lb.pid (only while that pid is still a python3) and
#                                     remove the pid file.

tcp_lb_listening() { # tcp_lb_listening ADDRESS:PORT: something listens there, or on PORT of every address
  local port=${1##*:}
  ss -Htln "sport = :$port" 2>/dev/null |
    awk -v a="$1" -v p=":$port" '$4 == a || $4 == "0.0.0.0" p || $4 == "*" p || $4 == "[::]" p { f = 1 } END { exit !f }'
}

tcp_lb_up() {
  local dir=$1 listen=$2 _
  shift 2
  if tcp_lb_listening "$listen"; then
    echo "tcp_lb_up: something listens on $listen already (another run's load balancer?): ss -tlnp 'sport = :${listen##*:}'" >&2
    return 1
  fi
  mkdir -p "$dir"
  setsid python3 "$ROOT/test/vm/tcp-lb.py" "$listen" "$@" </dev/null >>"$dir/lb.log" 2>&1 &
  TCP_LB_PID=$!
  echo "$TCP_LB_PID" >"$dir/lb.pid"
  for _ in $(seq 30); do
    tcp_lb_listening "$listen" && return 0
    if ! kill -0 "$TCP_LB_PID" 2>/dev/null; then
      echo "tcp_lb_up: the load balancer exited (log $dir/lb.log)" >&2
      return 1
    fi
    sleep 1
  done
  tcp_lb_listening "$listen" && return 0
  echo "tcp_lb_up: the load balancer does not listen on $listen after 30 s (log $dir/lb.log)" >&2
  return 1
}

tcp_lb_down() {
  local pid
  pid=$(cat "$1/lb.pid" 2>/dev/null || true)
  [ -z "$pid" ] || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != python3 ] || kill "$pid" 2>/dev/null || true
  rm -f "$1/lb.pid"
}
