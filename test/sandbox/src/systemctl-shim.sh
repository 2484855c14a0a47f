#!/bin/sh
# capkk sandbox systemctl shim: records every call and runs simple services without systemd.
# Log: /var/log/capkk-systemctl.log (one line per call: the arguments).
# A unit is started by running the first ExecStart= of /etc/systemd/system/<unit>.service
# (or /lib/systemd/system, /usr/lib/systemd/system) in the background; its PID goes to /run/capkk-units/<unit>.pid.
LOG=/var/log/capkk-systemctl.log
RUN=/run/capkk-units
STATE=/var/lib/capkk-systemctl
mkdir -p "$RUN" "$STATE/enabled" /var/log
echo "$*" >> "$LOG"

now=false
quiet=false
cmd=""
units=""
for a in "$@"; do
    case "$a" in
        --now) now=true ;;
        -q|--quiet) quiet=true ;;
        --no-pager|--no-block|--no-legend|--plain|--system|-l|--full|--no-ask-password) ;;
        -*) ;;
        *) if [ -z "$cmd" ]; then cmd="$a"; else units="$units $a"; fi ;;
    esac
done

unit_name() {
    case "$1" in
        *.*) echo "$1" ;;
        *) echo "$1.service" ;;
    esac
}

unit_file() {
    for d in /etc/systemd/system /run/systemd/system /lib/systemd/system /usr/lib/systemd/system; do
        if [ -f "$d/$1" ]; then echo "$d/$1"; return 0; fi
    done
    return 1
}

is_running() {
    [ -f "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null
}

start_unit() {
    u=$(unit_name "$1")
    if is_running "$u"; then return 0; fi
    f=$(unit_file "$u") || { echo "Failed to start $u: Unit $u not found." >&2; return 5; }
    exec_start=$(sed -n 's/^ExecStart=[-@+!]*//p' "$f" | head -n 1)
    if [ -z "$exec_start" ]; then echo "Failed to start $u: no ExecStart=" >&2; return 1; fi
    # EnvironmentFile=/path (optional, leading '-' means optional) and Environment="K=V" lines.
    envs=$(sed -n 's/^EnvironmentFile=-\{0,1\}//p' "$f")
    setsid sh -c "set -a; for ef in $envs; do [ -f \"\$ef\" ] && . \"\$ef\"; done; set +a; exec $exec_start" \
        >"/var/log/$u.log" 2>&1 </dev/null &
    echo $! > "$RUN/$u.pid"
    sleep 0.1
    if ! is_running "$u"; then
        echo "Job for $u failed. See /var/log/$u.log" >&2
        rm -f "$RUN/$u.pid"
        return 1
    fi
    return 0
}

stop_unit() {
    u=$(unit_name "$1")
    if [ -f "$RUN/$u.pid" ]; then
        p=$(cat "$RUN/$u.pid")
        kill "$p" 2>/dev/null
        i=0
        while kill -0 "$p" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
        kill -9 "$p" 2>/dev/null
        rm -f "$RUN/$u.pid"
    fi
    return 0
}

rc=0
case "$cmd" in
    daemon-reload|daemon-reexec|reset-failed) exit 0 ;;
    enable)
        for u in $units; do
            n=$(unit_name "$u")
            unit_file "$n" >/dev/null || { echo "Failed to enable unit: Unit file $n does not exist." >&2; exit 1; }
            touch "$STATE/enabled/$n"
            if $now; then start_unit "$n" || rc=$?; fi
        done ;;
    disable)
        for u in $units; do
            n=$(unit_name "$u"); rm -f "$STATE/enabled/$n"
            if $now; then stop_unit "$n"; fi
        done ;;
    start) for u in $units; do start_unit "$u" || rc=$?; done ;;
    stop) for u in $units; do stop_unit "$u"; done ;;
    restart|reload-or-restart|try-restart)
        for u in $units; do stop_unit "$u"; start_unit "$u" || rc=$?; done ;;
    reload) for u in $units; do is_running "$(unit_name "$u")" || rc=1; done ;;
    is-active)
        for u in $units; do
            if is_running "$(unit_name "$u")"; then $quiet || echo active; else $quiet || echo inactive; rc=3; fi
        done ;;
    is-enabled)
        for u in $units; do
            if [ -f "$STATE/enabled/$(unit_name "$u")" ]; then $quiet || echo enabled; else $quiet || echo disabled; rc=1; fi
        done ;;
    is-failed)
        for u in $units; do $quiet || echo inactive; done; rc=1 ;;
    status)
        for u in $units; do
            n=$(unit_name "$u")
            if is_running "$n"; then echo "* $n - Active: active (running) since shim; Main PID: $(cat "$RUN/$n.pid")"
            else echo "* $n - Active: inactive (dead)"; rc=3; fi
        done ;;
    is-system-running)
        # The manager's state: "running", or what a test wrote to $RUN/system-state (e.g. "stopping").
        st=$(cat "$RUN/system-state" 2>/dev/null || echo running)
        $quiet || echo "$st"
        [ "$st" = running ] || rc=1 ;;
    mask|unmask|kill|show|cat|list-units|list-unit-files) exit 0 ;;
    "") echo "systemctl shim: missing command" >&2; exit 1 ;;
    *) echo "systemctl shim: unsupported command $cmd" >&2; exit 1 ;;
esac
exit $rc
