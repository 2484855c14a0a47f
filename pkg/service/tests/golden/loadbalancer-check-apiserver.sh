#!/bin/sh
# Managed by capkk-rs (controlPlaneLoadBalancer.type: Keepalived); rewritten when the control plane changes.
# keepalived's check of the local API server: exit 0 while its /readyz answers (curl), or, on a host without
# curl, while it accepts a TCP connection (bash).
if command -v curl >/dev/null 2>&1; then
  exec curl -fsk --max-time 2 -o /dev/null https://127.0.0.1:6443/readyz
fi
exec timeout 2 bash -c ': </dev/tcp/127.0.0.1/6443'
