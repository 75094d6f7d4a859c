#!/bin/bash
# Time `kube-testenv run --nodes N` to every node Ready, with the CPU seconds and RSS of the agent
# (the run process) and the daemons, up to Ready and over a steady period after it.
# usage: hack/measure-nodes.sh KUBE_TESTENV_BIN NAME NODES [TIMEOUT_S] [STEADY_S]   (as root)
set -u

BIN=$1; NAME=$2; N=$3; TO=${4:-900}; STEADY=${5:-60}
LOG=${OUT:-/tmp}/$NAME.log
clk=$(getconf CLK_TCK)
cpu() { awk -v c=$clk '{print ($14+$15)/c}' /proc/$1/stat 2>/dev/null || echo 0; }
rss() { awk '/VmRSS/{print $2/1024}' /proc/$1/status 2>/dev/null; }
echo "load at start: $(cat /proc/loadavg)"
t0=$(date +%s.%N)
$BIN run --name $NAME --nodes $N 2>$LOG >${OUT:-/tmp}/$NAME.out &
RUN=$!
api=""
while true; do
  if grep -q "ready in" $LOG; then break; fi
  if ! kill -0 $RUN 2>/dev/null; then echo "run exited"; tail -5 $LOG; exit 1; fi
  now=$(date +%s.%N); if (( $(echo "$now - $t0 > $TO" | bc) )); then echo TIMEOUT; break; fi
  [ -z "$api" ] && api=$(pgrep -f "kube-apiserver.*/run/kube-testenv/$NAME/" | head -1)
  sleep 0.5
done
t1=$(date +%s.%N)
[ -z "$api" ] && api=$(pgrep -f "kube-apiserver.*/run/kube-testenv/$NAME/" | head -1)
kcm=$(pgrep -f "kube-controller-manager.*/run/kube-testenv/$NAME/" | head -1)
etcd=$(pgrep -f "etcd.*/run/kube-testenv/$NAME/" | head -1)
echo "ready line: $(grep 'ready in' $LOG | tail -1)"
printf "wall to ready: %.1f s; load %s\n" $(echo "$t1 - $t0" | bc) "$(cat /proc/loadavg)"
echo "CPU s to ready: agent(run) $(cpu $RUN) apiserver $(cpu $api) kcm $(cpu $kcm) etcd $(cpu $etcd); RSS MiB: run $(rss $RUN) apiserver $(rss $api)"
a0=$(cpu $RUN); p0=$(cpu $api); k0=$(cpu $kcm); e0=$(cpu $etcd)
sleep $STEADY
echo "steady ${STEADY}s: CPU s agent $(echo "$(cpu $RUN) - $a0" | bc) apiserver $(echo "$(cpu $api) - $p0" | bc) kcm $(echo "$(cpu $kcm) - $k0" | bc) etcd $(echo "$(cpu $etcd) - $e0" | bc); RSS MiB run $(rss $RUN) apiserver $(rss $api); load $(cat /proc/loadavg)"
$BIN exec --name $NAME -- kubectl get nodes --no-headers 2>/dev/null | awk "{print \$2}" | sort | uniq -c
kill -TERM $RUN; wait $RUN
