#!/bin/bash
# The quickest probe job (a few ms, for bursts): probe_job.py's records, no
# flock and no hold. Run as a sloth job: `bash probe_quick.sh DIR`. Appends
# "job attempt token pid start" to DIR/starts, "job attempt token pid boot"
# to DIR/spawned (boot: when this process was forked, in seconds of
# CLOCK_BOOTTIME from /proc/$$/stat's 10 ms ticks, rounded down), then
# "job attempt token pid end" to DIR/ends, and exits 0.
d=$1
who="$SLOTH_JOB_ID $SLOTH_JOB_ATTEMPT $SLOTH_JOB_TOKEN $$"
echo "$who $EPOCHREALTIME" >> "$d/starts"
read -r stat < "/proc/$$/stat"
set -- ${stat##*) }
ticks=${20}
printf '%s %d.%02d\n' "$who" $((ticks / 100)) $((ticks % 100)) >> "$d/spawned"
echo "$who $EPOCHREALTIME" >> "$d/ends"
